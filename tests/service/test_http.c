/*
 * test_http.c — the HTTP listener (service/http.c) with a raw socket client:
 * routes, status codes, content type, 404/405, port 0, bind errors; and
 * HTTPS (http.tls) with curl as the client: the right CA, a CA that did not
 * sign the server, plain HTTP to the HTTPS port, mutual TLS (no client
 * certificate, a foreign one, the right one) and bad certificate files.
 * Certificates come from the openssl CLI into a temporary directory.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
        cmocka_unit_test(test_routes),          cmocka_unit_test(test_bad_address),
        cmocka_unit_test(test_https),           cmocka_unit_test(test_https_client_certs),
        cmocka_unit_test(test_https_bad_files),
    };
    return cmocka_run_group_tests(tests, make_certs, remove_certs);
}
