#!/bin/sh
# Build the libFuzzer targets with clang and run each for SECONDS (default 60), seeded from
# spec/fixtures. Exits non-zero when a target finds a crash, leak or timeout.
set -u
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/build-fuzz"
CC=clang cmake -S "$root" -B "$dir" -DRMQ_FUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
    -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null || exit 1
cmake --build "$dir" -j"$(nproc)" -- --no-print-directory >/dev/null || exit 1
fail=0
for bin in "$dir"/fuzz_*; do
    [ -x "$bin" ] || continue
    name=$(basename "$bin")
    corpus="$dir/corpus/$name"
    mkdir -p "$corpus"
    seeds="$root/spec/fixtures/fuzz/${name#fuzz_}"
    [ -d "$seeds" ] || seeds=""
    echo "-- $name for ${secs}s"
    if ! (cd "$dir" && "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
            -print_final_stats=0 "$corpus" $seeds >"$dir/$name.log" 2>&1); then
        echo "$name FAILED:"; tail -40 "$dir/$name.log"; fail=1
    else
        grep -E '^#[0-9]+.*DONE' "$dir/$name.log" | tail -1
    fi
done
exit $fail
