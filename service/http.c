/*
 * http.c — the HTTP listener (pr_http.h) on libmicrohttpd.
 *
 * One daemon with libmicrohttpd's internal polling thread: scrapes and probes
 * are rare and cheap, so one thread serving requests in turn is enough and
 * keeps handlers from running concurrently with each other. The listening
 * socket is bound by libmicrohttpd from a sockaddr we resolve ourselves, so
 * "host:port" parsing and error messages stay ours.
 */
#include "pr_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pr_hostport.h"
#include "pr_log.h"

#define PR_HTTP_MAX_ROUTES 16

struct pr_http {
    struct MHD_Daemon *daemon;
    uint16_t port;
    size_t n_routes;
    pr__http_route routes[PR_HTTP_MAX_ROUTES];
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

static enum MHD_Result pr__http_handle(void *cls, struct MHD_Connection *conn, const char *url,
                                       const char *method, const char *version,
                                       const char *upload_data, size_t *upload_data_size,
                                       void **con_cls)
{
    (void)version;
    (void)upload_data;
    pr_http *h = cls;
    /* First call per request only announces headers; answer on it (no body
     * is expected for GET) but not when an upload is in progress. */
    if (*con_cls == NULL) {
        *con_cls = (void *)1;
        if (*upload_data_size == 0 && (!strcmp(method, "GET") || !strcmp(method, "HEAD")))
            goto answer;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
answer:
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char msg[] = "method not allowed\n";
        return pr__http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain; charset=utf-8", msg,
                              sizeof(msg) - 1);
    }
    for (size_t i = 0; i < h->n_routes; i++) {
        if (strcmp(url, h->routes[i].path))
            continue;
        pr_mbuf body;
        pr_mbuf_init(&body);
        const char *ctype = "text/plain; charset=utf-8";
        pr__http_query q = {conn};
        int status = h->routes[i].qfn ? h->routes[i].qfn(h->routes[i].opaque, &q, &body, &ctype)
                                      : h->routes[i].fn(h->routes[i].opaque, &body, &ctype);
        enum MHD_Result r;
        if (body.err) {
            static const char msg[] = "out of memory\n";
            r = pr__http_reply(conn, 500, "text/plain; charset=utf-8", msg, sizeof(msg) - 1);
        } else {
            r = pr__http_reply(conn, (unsigned)status, ctype, body.buf ? body.buf : "", body.len);
        }
        pr_mbuf_fini(&body);
        return r;
    }
    static const char nf[] = "not found (try /metrics, /healthz, /readyz, /v1/status, /v1/hot)\n";
    return pr__http_reply(conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", nf,
                          sizeof(nf) - 1);
}

int pr__http_start(const char *listen_addr, const pr__http_route *routes, size_t n_routes,
                   pr_http **out, char *errstr, size_t errstr_size)
{
    char host[256], port[8];
    uint16_t portnum;
    if (n_routes > PR_HTTP_MAX_ROUTES)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "http: too many routes");
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
    memcpy(h->routes, routes, n_routes * sizeof(*routes));
    h->port = bound;
    h->daemon = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
                                 pr__http_handle, h, MHD_OPTION_LISTEN_SOCKET, fd,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!h->daemon) {
        close(fd);
        free(h);
        return pr_seterr(errstr, errstr_size, PR_EIO, "http.listen '%s': cannot start server",
                         listen_addr);
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
    free(h);
}
