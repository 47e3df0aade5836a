/*
 * test_http.c — the HTTP listener (service/http.c) with a raw socket client:
 * routes, status codes, content type, 404/405, port 0, bind errors.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
    pr__http_route routes[] = {{"/metrics", h_hello, &calls, NULL},
                               {"/readyz", h_down, NULL, NULL}};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_bad_address),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
