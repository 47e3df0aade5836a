/*
 * test_http.c — the HTTP listener (service/http.c) with a raw socket client:
 * routes, status codes, content type, 404/405, port 0, bind errors; POST
 * routes (the body whole however it was written: many writes, chunked,
 * several requests on one connection; empty; exactly 64 MiB; 413 above it;
 * 405 for GET; a client gone mid-body; many requests, which the ASan build
 * checks for leaks); and HTTPS (http.tls) with curl as the client: the
 * right CA, a CA that did not sign the server, plain HTTP to the HTTPS
 * port, mutual TLS (no client certificate, a foreign one, the right one)
 * and bad certificate files. Certificates come from the openssl CLI into a
 * temporary directory.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_http.h"

static int h_hello(void *opaque, pr_mbuf *body, const char **ctype)
{
    int *calls = opaque;
    (*calls)++;
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    pr_mbuf_puts(body, "piperec_up 1\n");
    return 200;
}

static int h_down(void *opaque, pr_mbuf *body, const char **ctype)
{
    (void)opaque;
    (void)ctype;
    pr_mbuf_puts(body, "not ready: no partitions\n");
    return 503;
}

/* One request over a fresh connection; returns the whole response. */
static void http_req(uint16_t port, const char *req, char *resp, size_t size)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    size_t len = 0;
    ssize_t n;
    while (len + 1 < size && (n = read(fd, resp + len, size - 1 - len)) > 0)
        len += (size_t)n;
    resp[len] = '\0';
    close(fd);
}

static void test_routes(void **state)
{
    (void)state;
    int calls = 0;
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL, NULL},
                               {"/readyz", h_down, NULL, NULL, NULL}};
    pr_http *h = NULL;
    char err[256];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 2, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);
    assert_true(port > 0);

    char resp[4096];
    http_req(port, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n", resp, sizeof(resp));
    assert_true(strncmp(resp, "HTTP/1.", 7) == 0 && strncmp(resp + 8, " 200", 4) == 0);
    assert_non_null(strstr(resp, "version=0.0.4"));
    assert_non_null(strstr(resp, "\r\n\r\npiperec_up 1\n"));
    assert_int_equal(calls, 1);

    http_req(port, "GET /readyz HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 503"));
    assert_non_null(strstr(resp, "no partitions"));

    http_req(port, "GET /nothing HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 404"));

    http_req(port, "POST /metrics HTTP/1.0\r\nContent-Length: 2\r\n\r\nab", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 405"));
    assert_int_equal(calls, 1);

    /* The port is taken now: a second listener on it fails with a reason. */
    char listen[64];
    snprintf(listen, sizeof(listen), "127.0.0.1:%u", (unsigned)port);
    pr_http *h2 = NULL;
    assert_int_equal(pr__http_start(listen, routes, 2, &h2, err, sizeof(err)), PR_EIO);
    assert_non_null(strstr(err, "http.listen"));
    assert_null(h2);
    pr__http_stop(h);
}

/* ---------------------------------------------------------------- POST routes */

typedef struct {
    int calls;
    size_t last_len;
} echo_state;

static uint32_t fnv1a(const char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 16777619u;
    return h;
}

/* POST /echo: "len=N fnv=H tag=T\n", then the body itself when short. */
static int h_echo(void *opaque, const pr__http_query *q, const char *body, size_t len, pr_mbuf *out,
                  const char **ctype)
{
    echo_state *st = opaque;
    st->calls++;
    st->last_len = len;
    *ctype = "application/x-echo";
    const char *tag = pr__http_query_get(q, "tag");
    pr_mbuf_printf(out, "len=%zu fnv=%08x tag=%s\n", len, fnv1a(body, len), tag ? tag : "-");
    if (len <= 4096)
        pr_mbuf_append(out, body, len);
    return 200;
}

static int http_connect(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int one = 1;
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

static void write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        assert_true(w > 0);
        p += w, n -= (size_t)w;
    }
}

/* Read one response (headers and a Content-Length body) from fd into resp;
 * returns its status. */
static int read_response(int fd, char *resp, size_t size)
{
    size_t len = 0, need = SIZE_MAX;
    while (len < need) {
        assert_true(len + 1 < size);
        ssize_t n = read(fd, resp + len, size - 1 - len);
        assert_true(n > 0);
        len += (size_t)n;
        resp[len] = '\0';
        const char *end = strstr(resp, "\r\n\r\n"), *cl = strcasestr(resp, "content-length:");
        if (end && cl && cl < end)
            need = (size_t)(end + 4 - resp) + strtoul(cl + 15, NULL, 10);
    }
    assert_int_equal(len, need); /* nothing beyond this response */
    assert_true(strncmp(resp, "HTTP/1.", 7) == 0);
    return atoi(resp + 9);
}

/* The status of POST path with a body of n bytes (from fill(i)), sent in
 * writes of `piece` bytes after the headers; resp gets the response. */
static int post_body(uint16_t port, const char *path, const char *body, size_t n, size_t piece,
                     char *resp, size_t size)
{
    int fd = http_connect(port);
    char hdr[256];
    int h = snprintf(hdr, sizeof(hdr),
                     "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     path, n);
    write_all(fd, hdr, (size_t)h);
    for (size_t at = 0; at < n; at += piece)
        write_all(fd, body + at, n - at < piece ? n - at : piece);
    int st = read_response(fd, resp, size);
    close(fd);
    return st;
}

static char *pattern(size_t n)
{
    char *p = malloc(n ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (char)('a' + (i * 7 + i / 251) % 26);
    return p;
}

static const char *resp_body(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    assert_non_null(b);
    return b + 4;
}

/* The body arrives whole: short, in many small writes, larger than
 * libmicrohttpd's buffer (many upload calls), chunked, and several requests
 * on one keep-alive connection; GET routes beside it still answer. */
static void test_post_body(void **state)
{
    (void)state;
    int calls = 0;
    echo_state es = {0};
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL, NULL},
                               {"/echo", NULL, &es, NULL, h_echo}};
    pr_http *h = NULL;
    char err[256], resp[16384], want[128];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 2, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);

    assert_int_equal(post_body(port, "/echo?tag=a%20b", "hello", 5, 5, resp, sizeof(resp)), 200);
    assert_non_null(strstr(resp, "application/x-echo"));
    snprintf(want, sizeof(want), "len=5 fnv=%08x tag=a b\nhello", fnv1a("hello", 5));
    assert_string_equal(resp_body(resp), want);

    /* 3000 bytes, 7 at a time (TCP_NODELAY: many segments) */
    char *p = pattern(3000);
    assert_int_equal(post_body(port, "/echo", p, 3000, 7, resp, sizeof(resp)), 200);
    snprintf(want, sizeof(want), "len=3000 fnv=%08x tag=-\n", fnv1a(p, 3000));
    assert_memory_equal(resp_body(resp), want, strlen(want));
    assert_memory_equal(resp_body(resp) + strlen(want), p, 3000);
    free(p);

    /* 3 MiB: far over the connection's buffer, so many upload calls */
    size_t big = 3u << 20;
    p = pattern(big);
    assert_int_equal(post_body(port, "/echo", p, big, 65536, resp, sizeof(resp)), 200);
    snprintf(want, sizeof(want), "len=%zu fnv=%08x tag=-\n", big, fnv1a(p, big));
    assert_string_equal(resp_body(resp), want);
    free(p);

    /* empty */
    assert_int_equal(post_body(port, "/echo", "", 0, 1, resp, sizeof(resp)), 200);
    snprintf(want, sizeof(want), "len=0 fnv=%08x tag=-\n", fnv1a("", 0));
    assert_string_equal(resp_body(resp), want);

    /* chunked, then a second request on the same connection */
    int fd = http_connect(port);
    const char *chunked =
        "POST /echo?tag=c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    write_all(fd, chunked, strlen(chunked));
    assert_int_equal(read_response(fd, resp, sizeof(resp)), 200);
    snprintf(want, sizeof(want), "len=11 fnv=%08x tag=c\nhello world", fnv1a("hello world", 11));
    assert_string_equal(resp_body(resp), want);
    const char *second = "POST /echo?tag=d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nde";
    write_all(fd, second, strlen(second));
    assert_int_equal(read_response(fd, resp, sizeof(resp)), 200);
    snprintf(want, sizeof(want), "len=2 fnv=%08x tag=d\nde", fnv1a("de", 2));
    assert_string_equal(resp_body(resp), want);
    const char *get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    write_all(fd, get, strlen(get));
    assert_int_equal(read_response(fd, resp, sizeof(resp)), 200);
    assert_string_equal(resp_body(resp), "piperec_up 1\n");
    close(fd);
    assert_int_equal(es.calls, 6);
    assert_int_equal(calls, 1);
    pr__http_stop(h);
}

/* GET (and HEAD) on a POST route: 405, the handler not called; unknown
 * paths 404; a GET route still answers GET. */
static void test_post_methods(void **state)
{
    (void)state;
    int calls = 0;
    echo_state es = {0};
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL, NULL},
                               {"/echo", NULL, &es, NULL, h_echo}};
    pr_http *h = NULL;
    char err[256], resp[4096];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 2, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);
    http_req(port, "GET /echo HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 405"));
    assert_non_null(strstr(resp, "POST the events"));
    http_req(port, "HEAD /echo HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 405"));
    http_req(port, "PUT /echo HTTP/1.0\r\nContent-Length: 2\r\n\r\nab", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 405"));
    http_req(port, "GET /nothing HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 404"));
    http_req(port, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_non_null(strstr(resp, " 200"));
    assert_int_equal(es.calls, 0);
    assert_int_equal(calls, 1);
    pr__http_stop(h);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Exactly PR__HTTP_MAX_BODY is answered; one byte more is 413 without a
 * call, at once on its Content-Length (nothing of the body sent). */
static void test_post_too_big(void **state)
{
    (void)state;
    echo_state es = {0};
    pr__http_route routes[] = {{"/echo", NULL, &es, NULL, h_echo}};
    pr_http *h = NULL;
    char err[256], resp[4096];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 1, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);
    size_t max = PR__HTTP_MAX_BODY;
    char *p = calloc(1, max + 1);
    assert_non_null(p);
    double t0 = now_s();
    assert_int_equal(post_body(port, "/echo", p, max, 1u << 20, resp, sizeof(resp)), 200);
    assert_int_equal(es.calls, 1);
    assert_int_equal(es.last_len, max);
    /* Refused on its Content-Length, before any of the body is sent. */
    int fd = http_connect(port);
    char hdr[256];
    int hn = snprintf(hdr, sizeof(hdr),
                      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n\r\n",
                      max + 1);
    write_all(fd, hdr, (size_t)hn);
    assert_int_equal(read_response(fd, resp, sizeof(resp)), 413);
    close(fd);
    assert_non_null(strstr(resp, "64 MiB"));
    assert_int_equal(es.calls, 1);
    print_message("two 64 MiB POSTs: %.2f s\n", now_s() - t0);
    free(p);
    pr__http_stop(h);
}

/* Chunks of 1 MiB on fd until `mib` MiB went or a write fails: the MiB
 * written. */
static size_t send_chunks(int fd, const char *mib_buf, size_t mib)
{
    char head[32];
    int hn = snprintf(head, sizeof(head), "%x\r\n", 1u << 20);
    size_t sent = 0;
    for (; sent < mib; sent++) {
        if (write(fd, head, (size_t)hn) != hn)
            break;
        ssize_t w = 0;
        for (size_t at = 0; at < (1u << 20); at += (size_t)w)
            if ((w = write(fd, mib_buf + at, (1u << 20) - at)) <= 0)
                return sent;
        if (write(fd, "\r\n", 2) != 2)
            break;
    }
    return sent;
}

/* A chunked body over 64 MiB (no Content-Length to refuse it by): read to
 * its end and answered 413 when it ends within another 64 MiB; a runaway
 * one is cut, the connection closed once 128 MiB went, and the listener
 * keeps answering. */
static void test_post_chunked_too_big(void **state)
{
    (void)state;
    signal(SIGPIPE, SIG_IGN);
    echo_state es = {0};
    pr__http_route routes[] = {{"/echo", NULL, &es, NULL, h_echo}};
    pr_http *h = NULL;
    char err[256], resp[4096];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 1, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);
    char *mib = calloc(1, 1u << 20);
    assert_non_null(mib);
    static const char hdr[] =
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
    int fd = http_connect(port);
    write_all(fd, hdr, strlen(hdr));
    assert_int_equal(send_chunks(fd, mib, 70), 70);
    write_all(fd, "0\r\n\r\n", 5);
    assert_int_equal(read_response(fd, resp, sizeof(resp)), 413);
    close(fd);
    fd = http_connect(port);
    write_all(fd, hdr, strlen(hdr));
    size_t sent = send_chunks(fd, mib, 1024); /* 1 GiB, unless cut */
    close(fd);
    print_message("runaway chunked body: cut after %zu MiB sent\n", sent);
    assert_true(sent >= 128 && sent < 256); /* socket buffers hold a few MiB */
    assert_int_equal(es.calls, 0);
    assert_int_equal(post_body(port, "/echo", "ok", 2, 2, resp, sizeof(resp)), 200);
    assert_int_equal(es.calls, 1);
    free(mib);
    pr__http_stop(h);
}

/* Many POSTs in a row, some abandoned mid-body (the client closes): every
 * upload is freed (the ASan build's leak check), and the listener keeps
 * answering. */
static void test_post_many(void **state)
{
    (void)state;
    echo_state es = {0};
    pr__http_route routes[] = {{"/echo", NULL, &es, NULL, h_echo}};
    pr_http *h = NULL;
    char err[256], resp[16384], hdr[128];
    assert_int_equal(pr__http_start("127.0.0.1:0", routes, 1, &h, err, sizeof(err)), 0);
    uint16_t port = pr__http_port(h);
    char *p = pattern(70000);
    for (int i = 0; i < 300; i++) {
        size_t n = (size_t)(i * 233) % 70000;
        assert_int_equal(post_body(port, "/echo", p, n, 8192, resp, sizeof(resp)), 200);
        assert_int_equal(es.last_len, n);
        if (i % 30 == 0) { /* half a body, then gone */
            int fd = http_connect(port);
            int k = snprintf(hdr, sizeof(hdr),
                             "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n");
            write_all(fd, hdr, (size_t)k);
            write_all(fd, p, 30000);
            close(fd);
        }
    }
    assert_int_equal(es.calls, 300);
    free(p);
    pr__http_stop(h);
}

static void test_bad_address(void **state)
{
    (void)state;
    pr_http *h = NULL;
    char err[256];
    assert_int_equal(pr__http_start("nonsense", NULL, 0, &h, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "host:port"));
    pr__http_stop(NULL);
}

/* ---------------------------------------------------------------- HTTPS */

static char cert_dir[64];

/* A CA, a server certificate for 127.0.0.1 and a client certificate signed
 * by it, and an unrelated self-signed "rogue" CA with its own key. */
static int make_certs(void **state)
{
    (void)state;
    snprintf(cert_dir, sizeof(cert_dir), "/tmp/pr_http_tls_XXXXXX");
    if (!mkdtemp(cert_dir))
        return -1;
    char cmd[4096];
    snprintf(
        cmd, sizeof(cmd),
        "set -e; cd %s; exec >/dev/null 2>&1\n"
        "ca() { openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout $1.key -out $1.crt -days 2 -subj /CN=$1; }\n"
        "ca ca; ca rogue\n"
        "leaf() { openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
        "-keyout $1.key -out $1.csr -subj /CN=$1; "
        "printf \"$2\" > $1.ext; "
        "openssl x509 -req -in $1.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out $1.crt -days 2 -extfile $1.ext; }\n"
        "leaf server 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n'\n"
        "leaf client 'extendedKeyUsage=clientAuth\\n'\n",
        cert_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int remove_certs(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", cert_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static const char *cpath(const char *name)
{
    static char b[8][128];
    static int k;
    char *p = b[k++ % 8];
    snprintf(p, 128, "%s/%s", cert_dir, name);
    return p;
}

/* curl ARGS against https://127.0.0.1:port/metrics: the HTTP status it got
 * (0 when the TLS handshake or the connection failed). */
static int curl_status(uint16_t port, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w '%%{http_code}' --max-time 20 %s "
             "https://127.0.0.1:%u/metrics 2>/dev/null",
             args, (unsigned)port);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char out[16] = "";
    if (!fgets(out, sizeof(out), p))
        out[0] = '\0';
    pclose(p);
    return atoi(out);
}

static void test_https(void **state)
{
    (void)state;
    if (!pr__http_tls_supported())
        fail_msg("libmicrohttpd without TLS: http.tls cannot work");
    int calls = 0;
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL, NULL}};
    pr__http_tls tls = {cpath("server.crt"), cpath("server.key"), NULL};
    pr_http *h = NULL;
    char err[256], args[512];
    if (pr__http_start_tls("127.0.0.1:0", &tls, routes, 1, &h, err, sizeof(err)))
        fail_msg("%s", err);
    uint16_t port = pr__http_port(h);
    /* The right CA: the body, over TLS. */
    snprintf(args, sizeof(args), "--cacert %s", cpath("ca.crt"));
    assert_int_equal(curl_status(port, args), 200);
    assert_int_equal(calls, 1);
    /* A CA that did not sign the server: curl refuses it. */
    snprintf(args, sizeof(args), "--cacert %s", cpath("rogue.crt"));
    assert_int_equal(curl_status(port, args), 0);
    /* Plain HTTP to the HTTPS port gets no HTTP answer and runs no route. */
    char resp[4096];
    http_req(port, "GET /metrics HTTP/1.0\r\n\r\n", resp, sizeof(resp));
    assert_null(strstr(resp, "HTTP/1."));
    assert_int_equal(calls, 1);
    pr__http_stop(h);
}

static void test_https_client_certs(void **state)
{
    (void)state;
    int calls = 0;
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL, NULL}};
    pr__http_tls tls = {cpath("server.crt"), cpath("server.key"), cpath("ca.crt")};
    pr_http *h = NULL;
    char err[256], args[512];
    if (pr__http_start_tls("127.0.0.1:0", &tls, routes, 1, &h, err, sizeof(err)))
        fail_msg("%s", err);
    uint16_t port = pr__http_port(h);
    /* No client certificate: 403, the route does not run. */
    snprintf(args, sizeof(args), "--cacert %s", cpath("ca.crt"));
    assert_int_equal(curl_status(port, args), 403);
    /* A certificate the CA did not sign. */
    snprintf(args, sizeof(args), "--cacert %s --cert %s --key %s", cpath("ca.crt"),
             cpath("rogue.crt"), cpath("rogue.key"));
    int st = curl_status(port, args);
    assert_true(st == 403 || st == 0);
    assert_int_equal(calls, 0);
    /* The right one. */
    snprintf(args, sizeof(args), "--cacert %s --cert %s --key %s", cpath("ca.crt"),
             cpath("client.crt"), cpath("client.key"));
    assert_int_equal(curl_status(port, args), 200);
    assert_int_equal(calls, 1);
    pr__http_stop(h);
}

static void test_https_bad_files(void **state)
{
    (void)state;
    pr_http *h = NULL;
    char err[512];
    pr__http_tls tls = {cpath("server.crt"), cpath("client.key"), NULL}; /* not its key */
    assert_int_equal(pr__http_start_tls("127.0.0.1:0", &tls, NULL, 0, &h, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "key_file"));
    assert_null(h);
    tls = (pr__http_tls){cpath("missing.crt"), cpath("server.key"), NULL};
    assert_int_equal(pr__http_start_tls("127.0.0.1:0", &tls, NULL, 0, &h, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "http.tls.cert_file"));
    tls = (pr__http_tls){cpath("server.crt"), cpath("server.key"), cpath("server.ext")};
    assert_int_equal(pr__http_start_tls("127.0.0.1:0", &tls, NULL, 0, &h, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "http.tls.ca_file"));
    tls = (pr__http_tls){NULL, cpath("server.key"), NULL};
    assert_int_equal(pr__http_start_tls("127.0.0.1:0", &tls, NULL, 0, &h, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "cert_file and key_file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_bad_address),
        cmocka_unit_test(test_post_body),
        cmocka_unit_test(test_post_methods),
        cmocka_unit_test(test_post_too_big),
        cmocka_unit_test(test_post_chunked_too_big),
        cmocka_unit_test(test_post_many),
        cmocka_unit_test(test_https),
        cmocka_unit_test(test_https_client_certs),
        cmocka_unit_test(test_https_bad_files),
    };
    return cmocka_run_group_tests(tests, make_certs, remove_certs);
}
