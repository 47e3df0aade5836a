/*
 * http.c — the HTTP listener (pr_http.h) on libmicrohttpd.
 *
 * One daemon with libmicrohttpd's internal polling thread: scrapes and probes
 * are rare and cheap, so one thread serving requests in turn is enough and
 * keeps handlers from running concurrently with each other. A listener
 * that answers heavier requests asks for more (pr__http_start_pool): a pool
 * of polling threads, each serving its own connections, or (`piperec
 * serve`) a thread per connection; handlers then run concurrently and must
 * lock what they share. The listening
 * socket is bound by libmicrohttpd from a sockaddr we resolve ourselves, so
 * "host:port" parsing and error messages stay ours.
 *
 * HTTPS uses libmicrohttpd's own TLS (GnuTLS): the PEM files are read and
 * checked here with GnuTLS first, so a bad file gets a message naming the
 * http.tls key instead of libmicrohttpd's bare "cannot start". libmicrohttpd
 * only *requests* a client certificate when given a trust list; verifying it
 * against that list is ours, once per request, before any route runs.
 */
#include "pr_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pr_hostport.h"
#include "pr_log.h"

#define PR_HTTP_MAX_ROUTES 16
/* Connections at once: with POST routes, each may hold a body of up to
 * PR__HTTP_MAX_BODY while it arrives. */
#define PR__HTTP_MAX_CONNECTIONS 64
#define PR_HTTP_PEM_MAX          (1 << 20) /* larger is not a certificate file */
/* TLS 1.2 and 1.3 only, GnuTLS's default ciphers for them. */
#define PR_HTTP_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct pr_http {
    struct MHD_Daemon *daemon;
    uint16_t port;
    size_t n_routes;
    pr__http_route routes[PR_HTTP_MAX_ROUTES];
    /* HTTPS: the PEM texts libmicrohttpd was given (kept for its lifetime). */
    char *tls_cert, *tls_key, *tls_ca;
    pthread_mutex_t log_mu;
    pr_ratelimit refused_log; /* refusals: client certificates, cut bodies (under log_mu) */
};

struct pr__http_query {
    struct MHD_Connection *conn;
};

const char *pr__http_query_get(const pr__http_query *q, const char *key)
{
    return MHD_lookup_connection_value(q->conn, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result pr__http_reply(struct MHD_Connection *conn, unsigned status,
                                      const char *ctype, const char *body, size_t len)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    enum MHD_Result r = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

/* Mutual TLS: the request's connection must carry a certificate that one of
 * http.tls.ca_file's CAs signed. Logs the peer on refusal. */
static bool pr__http_client_ok(pr_http *h, struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    unsigned status = 0;
    int rc = ci && ci->tls_session
                 ? gnutls_certificate_verify_peers2((gnutls_session_t)ci->tls_session, &status)
                 : GNUTLS_E_INVALID_SESSION;
    if (rc == 0 && status == 0)
        return true;
    char peer[INET6_ADDRSTRLEN] = "?";
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (ai && ai->client_addr) {
        const struct sockaddr *sa = ai->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, peer, sizeof(peer));
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, peer, sizeof(peer));
    }
    pthread_mutex_lock(&h->log_mu);
    pr_log_ratelimited(&h->refused_log, PR_LOG_WARN, "http: %s refused: %s", peer,
                       rc == GNUTLS_E_NO_CERTIFICATE_FOUND ? "no client certificate"
                       : rc                                ? gnutls_strerror(rc)
                                                           : "client certificate not trusted");
    pthread_mutex_unlock(&h->log_mu);
    return false;
}

/* A POST request's body as it arrives (the connection's con_cls). */
typedef struct pr__http_upload {
    pr_mbuf body;
    bool too_big;
    size_t discarded; /* bytes past the limit, read and dropped (a chunked body) */
} pr__http_upload;

/* A chunked body another PR__HTTP_MAX_BODY past the limit: the connection
 * is closed rather than read to its end for the 413 (logged). */
static enum MHD_Result pr__http_cut(pr_http *h, struct MHD_Connection *conn)
{
    (void)conn;
    pthread_mutex_lock(&h->log_mu);
    pr_log_ratelimited(&h->refused_log, PR_LOG_WARN,
                       "http: a chunked request body went past 128 MiB: connection closed "
                       "(over 64 MiB is answered 413 when it ends before 128 MiB)");
    pthread_mutex_unlock(&h->log_mu);
    return MHD_NO;
}

static const pr__http_route *pr__http_route_of(const pr_http *h, const char *url)
{
    for (size_t i = 0; i < h->n_routes; i++)
        if (!strcmp(url, h->routes[i].path))
            return &h->routes[i];
    return NULL;
}

static void pr__http_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                          enum MHD_RequestTerminationCode toe)
{
    (void)cls, (void)conn, (void)toe;
    if (*con_cls && *con_cls != (void *)1) {
        pr__http_upload *up = *con_cls;
        pr_mbuf_fini(&up->body);
        free(up);
    }
    *con_cls = NULL;
}

static enum MHD_Result pr__http_text(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    return pr__http_reply(conn, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

/* Run route rt for the request; up: a POST's body. */
static enum MHD_Result pr__http_run(struct MHD_Connection *conn, const pr__http_route *rt,
                                    const pr__http_upload *up)
{
    pr_mbuf body;
    pr_mbuf_init(&body);
    const char *ctype = "text/plain; charset=utf-8";
    pr__http_query q = {conn};
    int status =
        up ? rt->pfn(rt->opaque, &q, up->body.buf ? up->body.buf : "", up->body.len, &body, &ctype)
        : rt->qfn ? rt->qfn(rt->opaque, &q, &body, &ctype)
                  : rt->fn(rt->opaque, &body, &ctype);
    enum MHD_Result r = body.err ? pr__http_text(conn, 500, "out of memory\n")
                                 : pr__http_reply(conn, (unsigned)status, ctype,
                                                  body.buf ? body.buf : "", body.len);
    pr_mbuf_fini(&body);
    return r;
}

static enum MHD_Result pr__http_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    (void)version;
    pr_http *h = cls;
    const pr__http_route *rt = pr__http_route_of(h, url);
    bool post = rt && rt->pfn && !strcmp(method, "POST");
    /* First call per request only announces headers; answer on it (no body
     * is expected for GET) but not when an upload is in progress. A POST
     * route's body is gathered in a pr__http_upload, answered at its end. */
    if (*con_cls == NULL) {
        /* Refused before its body is read: a client without a certificate
         * (mutual TLS), a body announced over the limit. */
        if (post && h->tls_ca && !pr__http_client_ok(h, conn)) {
            *con_cls = (void *)1;
            return pr__http_text(conn, MHD_HTTP_FORBIDDEN,
                                 "client certificate required (http.tls.ca_file)\n");
        }
        const char *cl = post ? MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                            MHD_HTTP_HEADER_CONTENT_LENGTH)
                              : NULL;
        if (cl && strtoull(cl, NULL, 10) > PR__HTTP_MAX_BODY) {
            *con_cls = (void *)1;
            return pr__http_text(conn, 413, "request body over 64 MiB: send fewer events\n");
        }
        pr__http_upload *up = post ? calloc(1, sizeof(*up)) : NULL;
        if (post && !up)
            return MHD_NO;
        if (up)
            pr_mbuf_init(&up->body);
        *con_cls = up ? (void *)up : (void *)1;
        if (!post && *upload_data_size == 0 && (!strcmp(method, "GET") || !strcmp(method, "HEAD")))
            goto answer;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (post) {
            pr__http_upload *up = *con_cls;
            if (up->body.len + *upload_data_size > PR__HTTP_MAX_BODY)
                up->too_big = true;
            if (!up->too_big)
                pr_mbuf_append(&up->body, upload_data, *upload_data_size);
            else if ((up->discarded += *upload_data_size) > PR__HTTP_MAX_BODY)
                return pr__http_cut(h, conn); /* a runaway chunked body: no 413 after it */
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
answer:
    if (h->tls_ca && !pr__http_client_ok(h, conn))
        return pr__http_text(conn, MHD_HTTP_FORBIDDEN,
                             "client certificate required (http.tls.ca_file)\n");
    if (post) {
        const pr__http_upload *up = *con_cls;
        if (up->too_big)
            return pr__http_text(conn, 413, "request body over 64 MiB: send fewer events\n");
        if (up->body.err)
            return pr__http_text(conn, 500, "out of memory\n");
        return pr__http_run(conn, rt, up);
    }
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (!get || (rt && rt->pfn))
        return pr__http_text(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                             rt && rt->pfn ? "method not allowed: POST the events\n"
                                           : "method not allowed\n");
    if (rt)
        return pr__http_run(conn, rt, NULL);
    return pr__http_text(conn, MHD_HTTP_NOT_FOUND,
                         "not found (try /metrics, /healthz, /readyz, /v1/status, /v1/hot)\n");
}

int pr__http_tls_supported(void)
{
    return MHD_is_feature_supported(MHD_FEATURE_TLS) == MHD_YES;
}

/* Read a PEM file whole (NUL-terminated) into *out. */
static int pr__http_read_pem(const char *key, const char *path, char **out, char *errstr,
                             size_t errstr_size)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http.tls.%s: %s: %s", key, path,
                         strerror(errno));
    char *buf = malloc(PR_HTTP_PEM_MAX + 1);
    size_t n = buf ? fread(buf, 1, PR_HTTP_PEM_MAX + 1, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!buf)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "http: out of memory");
    if (bad || n == 0 || n > PR_HTTP_PEM_MAX) {
        free(buf);
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "http.tls.%s: %s: unreadable, empty or over 1 MiB", key, path);
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

/* Read the http.tls files and check them with GnuTLS: the key fits the
 * certificate, the CA file holds at least one certificate. */
static int pr__http_load_tls(pr_http *h, const pr__http_tls *tls, char *errstr, size_t errstr_size)
{
    if (!pr__http_tls_supported())
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "http.tls: this libmicrohttpd was built without TLS");
    if (!tls->cert_file || !*tls->cert_file || !tls->key_file || !*tls->key_file)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "http.tls: cert_file and key_file are required");
    int rc = pr__http_read_pem("cert_file", tls->cert_file, &h->tls_cert, errstr, errstr_size);
    if (!rc)
        rc = pr__http_read_pem("key_file", tls->key_file, &h->tls_key, errstr, errstr_size);
    if (!rc && tls->ca_file && *tls->ca_file)
        rc = pr__http_read_pem("ca_file", tls->ca_file, &h->tls_ca, errstr, errstr_size);
    if (rc)
        return rc;
    gnutls_certificate_credentials_t cred;
    if (gnutls_certificate_allocate_credentials(&cred) < 0)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "http.tls: out of memory");
    gnutls_datum_t c = {(unsigned char *)h->tls_cert, (unsigned)strlen(h->tls_cert)};
    gnutls_datum_t k = {(unsigned char *)h->tls_key, (unsigned)strlen(h->tls_key)};
    int g = gnutls_certificate_set_x509_key_mem(cred, &c, &k, GNUTLS_X509_FMT_PEM);
    if (g < 0)
        rc =
            pr_seterr(errstr, errstr_size, PR_EINVAL, "http.tls: cert_file %s with key_file %s: %s",
                      tls->cert_file, tls->key_file, gnutls_strerror(g));
    if (!rc && h->tls_ca) {
        gnutls_datum_t a = {(unsigned char *)h->tls_ca, (unsigned)strlen(h->tls_ca)};
        g = gnutls_certificate_set_x509_trust_mem(cred, &a, GNUTLS_X509_FMT_PEM);
        if (g <= 0)
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "http.tls.ca_file: %s: %s", tls->ca_file,
                           g < 0 ? gnutls_strerror(g) : "no certificate in it");
    }
    gnutls_certificate_free_credentials(cred);
    return rc;
}

static void pr__http_free(pr_http *h)
{
    pthread_mutex_destroy(&h->log_mu);
    free(h->tls_cert);
    free(h->tls_key);
    free(h->tls_ca);
    free(h);
}

int pr__http_start(const char *listen_addr, const pr__http_route *routes, size_t n_routes,
                   pr_http **out, char *errstr, size_t errstr_size)
{
    return pr__http_start_pool(listen_addr, NULL, 1, routes, n_routes, out, errstr, errstr_size);
}

int pr__http_start_tls(const char *listen_addr, const pr__http_tls *tls,
                       const pr__http_route *routes, size_t n_routes, pr_http **out, char *errstr,
                       size_t errstr_size)
{
    return pr__http_start_pool(listen_addr, tls, 1, routes, n_routes, out, errstr, errstr_size);
}

int pr__http_start_pool(const char *listen_addr, const pr__http_tls *tls, unsigned threads,
                        const pr__http_route *routes, size_t n_routes, pr_http **out, char *errstr,
                        size_t errstr_size)
{
    char host[256], port[8];
    uint16_t portnum;
    if (n_routes > PR_HTTP_MAX_ROUTES)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http: too many routes");
    if (threads > PR_HTTP_MAX_THREADS)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http: threads must be 0..%d, not %u",
                         PR_HTTP_MAX_THREADS, threads);
    if (!listen_addr || pr_hostport_parse(listen_addr, host, sizeof(host), &portnum))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http.listen '%s': expected host:port",
                         listen_addr ? listen_addr : "");
    snprintf(port, sizeof(port), "%u", (unsigned)portnum);

    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host[0] ? host : NULL, port, &hints, &ai);
    if (gai)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http.listen '%s': %s", listen_addr,
                         gai_strerror(gai));

    /* Bind ourselves so the error message is ours and port 0 works the same
     * for IPv4 and IPv6; libmicrohttpd takes the listening socket over. */
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        freeaddrinfo(ai);
        return pr_seterr(errstr, errstr_size, PR_EIO, "http.listen '%s': socket: %s", listen_addr,
                         strerror(e));
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 64)) {
        int e = errno;
        close(fd);
        freeaddrinfo(ai);
        return pr_seterr(errstr, errstr_size, PR_EIO, "http.listen '%s': %s", listen_addr,
                         strerror(e));
    }
    freeaddrinfo(ai);

    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    uint16_t bound = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            bound = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            bound = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }

    pr_http *h = calloc(1, sizeof(*h));
    if (!h) {
        close(fd);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "http: out of memory");
    }
    h->n_routes = n_routes;
    if (n_routes)
        memcpy(h->routes, routes, n_routes * sizeof(*routes));
    h->port = bound;
    h->refused_log = (pr_ratelimit)PR_RATELIMIT_INIT(1);
    pthread_mutex_init(&h->log_mu, NULL);
    if (tls) {
        int rc = pr__http_load_tls(h, tls, errstr, errstr_size);
        if (rc) {
            close(fd);
            pr__http_free(h);
            return rc;
        }
    }
    /* Unused options are passed as MHD_OPTION_ARRAY with nothing in it. */
    struct MHD_OptionItem none[] = {{MHD_OPTION_END, 0, NULL}};
    struct MHD_OptionItem tls_opts[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, h->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, h->tls_key},
        {MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)PR_HTTP_TLS_PRIORITIES},
        {h->tls_ca ? MHD_OPTION_HTTPS_MEM_TRUST : MHD_OPTION_END, 0, h->tls_ca},
        {MHD_OPTION_END, 0, NULL},
    };
    /* A pool: each thread polls the listening socket and its own connections. */
    struct MHD_OptionItem pool[] = {
        {threads > 1 ? MHD_OPTION_THREAD_POOL_SIZE : MHD_OPTION_END, threads, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    unsigned per_conn = threads == PR_HTTP_PER_CONNECTION ? MHD_USE_THREAD_PER_CONNECTION : 0;
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | per_conn | (tls ? MHD_USE_TLS : 0), 0,
        NULL, NULL, pr__http_handle, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)10, MHD_OPTION_CONNECTION_LIMIT, (unsigned)PR__HTTP_MAX_CONNECTIONS,
        MHD_OPTION_NOTIFY_COMPLETED, pr__http_done, NULL, MHD_OPTION_ARRAY, tls ? tls_opts : none,
        MHD_OPTION_ARRAY, pool, MHD_OPTION_END);
    if (!h->daemon) {
        close(fd);
        pr__http_free(h);
        return pr_seterr(errstr, errstr_size, PR_EIO, "http.listen '%s': cannot start server%s",
                         listen_addr, tls ? " (TLS)" : "");
    }
    *out = h;
    return 0;
}

uint16_t pr__http_port(const pr_http *h)
{
    return h ? h->port : 0;
}

void pr__http_stop(pr_http *h)
{
    if (!h)
        return;
    /* MHD_stop_daemon closes the listening socket it was given. */
    MHD_stop_daemon(h->daemon);
    pr__http_free(h);
}
