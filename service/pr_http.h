/*
 * pr_http.h — the process's one HTTP listener (libmicrohttpd, its own internal
 * thread): a fixed table of GET routes, each a callback that fills a body.
 *
 * The service registers /metrics, /healthz, /readyz and /v1/status; the
 * listener knows nothing about pipelines. Handlers run on libmicrohttpd's
 * thread (or threads: pr__http_start_pool), so they must only read state
 * that is safe to read concurrently (stats under their own locks or
 * atomics).
 *
 * Listening on port 0 picks a free port; pr__http_port() tells which.
 *
 * Optional HTTPS (http.tls): libmicrohttpd's GnuTLS backend serves a PEM
 * certificate and key read once at start; with a client CA every request
 * must come with a certificate that CA signed (mutual TLS), else 403.
 */
#ifndef PR_HTTP_H
#define PR_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "pr_metrics.h"

typedef struct pr_http pr_http;

/* Fill `body` and return the HTTP status (200, 503...). *content_type may be
 * set to a static string; it defaults to "text/plain; charset=utf-8". */
typedef int (*pr__http_handler)(void *opaque, pr_mbuf *body, const char **content_type);

/* A request's query string, for routes that read one (GET /v1/hot?...). */
typedef struct pr__http_query pr__http_query;
/* The value of `key` in the query string (URL-decoded), or NULL when absent. */
const char *pr__http_query_get(const pr__http_query *q, const char *key);
typedef int (*pr__http_query_handler)(void *opaque, const pr__http_query *q, pr_mbuf *body,
                                      const char **content_type);

/* A POST route's handler: the request body whole (at most
 * PR__HTTP_MAX_BODY bytes; a larger one is answered 413 without a call, at
 * once when its Content-Length says so, else (chunked) at its end, unless
 * it runs another PR__HTTP_MAX_BODY past the limit: then the connection is
 * closed; without a client certificate that mutual TLS wants, 403 before
 * the body is read). At most 64 connections at once. */
typedef int (*pr__http_post_handler)(void *opaque, const pr__http_query *q, const char *body,
                                     size_t len, pr_mbuf *out, const char **content_type);
#define PR__HTTP_MAX_BODY (64u << 20)

typedef struct pr__http_route {
    const char *path; /* exact match, e.g. "/metrics" */
    pr__http_handler fn;
    void *opaque;
    pr__http_query_handler qfn; /* used instead of fn when set */
    pr__http_post_handler pfn;  /* set: the route answers POST (and only POST) */
} pr__http_route;

/* HTTPS settings (http.tls): PEM files, read when the listener starts. */
typedef struct pr__http_tls {
    const char *cert_file; /* server certificate (chain); required */
    const char *key_file;  /* its private key; required */
    const char *ca_file;   /* CAs for client certificates, or NULL: no client check */
} pr__http_tls;

/* Whether this libmicrohttpd was built with TLS (Debian's is, with GnuTLS). */
int pr__http_tls_supported(void);

/* Start listening on "host:port" (host empty or "0.0.0.0" = all IPv4
 * interfaces). Routes are copied (n <= 16). Unknown paths answer 404, methods
 * other than GET/HEAD (POST for a POST route) 405. On failure returns a negative PR_E* and a reason
 * ("http.listen 127.0.0.1:9464: Address already in use"). */
int pr__http_start(const char *listen, const pr__http_route *routes, size_t n_routes, pr_http **out,
                   char *errstr, size_t errstr_size);
/* The same with HTTPS when tls is not NULL. A file that cannot be read or a
 * key that does not fit the certificate fails with PR_EINVAL and a reason
 * naming the http.tls key. */
int pr__http_start_tls(const char *listen, const pr__http_tls *tls, const pr__http_route *routes,
                       size_t n_routes, pr_http **out, char *errstr, size_t errstr_size);
/* The same with a pool of `threads` (1..PR_HTTP_MAX_THREADS) polling
 * threads: each serves its own connections, so up to `threads` handlers run
 * at once (one per connection at a time) and must lock what they share.
 * The connection limit (64) is shared among the threads. threads
 * PR_HTTP_PER_CONNECTION: a thread for each connection (at most 64), so a
 * request never waits behind another connection's; the caller bounds how
 * many handlers do heavy work at once (serve: its pool of transforms). */
#define PR_HTTP_MAX_THREADS    64
#define PR_HTTP_PER_CONNECTION 0u
int pr__http_start_pool(const char *listen, const pr__http_tls *tls, unsigned threads,
                        const pr__http_route *routes, size_t n_routes, pr_http **out, char *errstr,
                        size_t errstr_size);
/* The port actually bound. */
uint16_t pr__http_port(const pr_http *h);
/* Stop the listener and free it (NULL is fine). Waits for running handlers. */
void pr__http_stop(pr_http *h);

#endif
