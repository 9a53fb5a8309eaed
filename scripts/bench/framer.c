/*
 * framer.c -- throughput of the framer (and framer + decode) on a captured 40 KB PULL
 * response, fed the way the connection feeds it: rmq__framer_alloc, a 64 KiB "read" (memcpy,
 * standing in for the kernel's copy), rmq__framer_commit.
 *
 *   scripts/build && cc -O2 -std=c11 -D_GNU_SOURCE -Iruntime scripts/bench/framer.c \
 *       build/librmqlua_static.a $(pkg-config --libs luajit libuv jansson liblz4 libzstd) \
 *       -lz -lcrypto -lm -lpthread -ldl -o /tmp/bench_framer && /tmp/bench_framer
 *
 * Run from the repo root. Optional argument: another frame file.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "protocol/cmd.h"

static long nframes;
static int decode;

static void on_frame(void *ud, rmq_rbuf_t *f)
{
    (void)ud;
    nframes++;
    if (decode) {
        rmq_cmd_t c;
        char err[128];
        if (rmq__cmd_decode(f, &c, err, sizeof(err))) {
            fprintf(stderr, "decode: %s\n", err);
            exit(1);
        }
        rmq__cmd_free(&c);
    }
    rmq__rbuf_release(f);
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *path =
        argc > 1 ? argv[1]
                 : "spec/fixtures/wire/08_bench_pull_sample/0034-11-PULL_MESSAGE.response.bin";
    static rmq_framer_t f;
    char err[128], *frame, *stream;
    size_t flen, slen, i, copies = 64;
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        perror(path);
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    flen = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    frame = malloc(flen);
    if (fread(frame, 1, flen, fp) != flen) return 1;
    fclose(fp);
    slen = copies * flen;
    stream = malloc(slen);
    for (i = 0; i < copies; i++)
        memcpy(stream + i * flen, frame, flen);

    for (decode = 0; decode < 2; decode++) {
        double t0, dt;
        size_t total = 0;
        int rep;
        rmq__framer_init(&f, 0);
        nframes = 0;
        t0 = now();
        for (rep = 0; rep < 1500; rep++) {
            size_t off = 0;
            while (off < slen) {
                char *base;
                size_t len;
                rmq__framer_alloc(&f, &base, &len);
                if (len > 65536) len = 65536;
                if (len > slen - off) len = slen - off;
                memcpy(base, stream + off, len);
                if (rmq__framer_commit(&f, base, len, on_frame, NULL, err, sizeof(err))) {
                    fprintf(stderr, "framer: %s\n", err);
                    return 1;
                }
                off += len;
            }
            total += slen;
        }
        dt = now() - t0;
        printf("%-14s %ld frames of %zu bytes: %.0f frames/s, %.2f GB/s (incl. the read copy)\n",
               decode ? "framer+decode" : "framer", nframes, flen, (double)nframes / dt,
               (double)total / dt / 1e9);
        rmq__framer_reset(&f);
    }
    free(stream);
    free(frame);
    return 0;
}
