/*
 * tls_conf.c -- the TLS client context of a configuration (conf.h): the tls_* options turned
 * into net/tls.h's client settings.
 *
 * Ownership: the context returned holds one reference for the caller.
 * Threads: any thread (it reads certificate and key files).
 */
#include "conf.h"

#include "net/tls.h"

int rmq__tls_ctx_from_conf(const rmq_conf_t *conf, rmq_tls_ctx_t **out, char *errstr, size_t n)
{
    *out = NULL;
    if (!conf->use_tls) return 0;
    rmq_tls_client_conf_t cf = {
        .test_mode = conf->tls_test_mode_enable,
        .auth_server = conf->tls_client_auth_server,
        .cert_path = conf->tls_client_cert_path,
        .key_path = conf->tls_client_key_path,
        .key_password = conf->tls_client_key_password,
        .trust_cert_path = conf->tls_client_trust_cert_path,
        .skip_name_check = !conf->tls_verify_server_name,
    };
    return rmq__tls_ctx_client(&cf, out, errstr, n);
}
