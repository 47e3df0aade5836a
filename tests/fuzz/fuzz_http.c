/*
 * fuzz_http.c — libFuzzer target for the HTTP endpoint (service/http.c and
 * the service's /metrics, /healthz, /readyz, /v1/status handlers).
 *
 * End to end rather than a handler call: the handlers take no request input
 * of their own, the request is parsed by libmicrohttpd and routed by
 * pr__http_handle, so the target runs the real thing. LLVMFuzzerInitialize
 * starts an in-process mock Kafka broker and a whole pr_service (the embedded
 * default config with bootstrap.servers pointed at the mock broker, HTTP and
 * the trainer sink on 127.0.0.1 port 0) with its real libmicrohttpd daemon.
 * Each input is written as raw bytes to a fresh loopback connection, the
 * write side is shut down, and the whole answer is read back. An answer must
 * come within 5 s (otherwise: a hang, reported as a crash) and, when there is
 * one, start with an HTTP status line. Pipeline threads keep running in the
 * background, so /metrics and /v1/status render live state concurrently.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "pr_config.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "pr_service.h"

static pr_mock_broker *broker;
static pr_config *cfg;
static pr_service *svc;
static uint16_t port;

static void stop_all(void)
{
    if (svc) {
        pr_service_request_stop(svc);
        pr_service_stop(svc);
        pr_service_free(svc);
    }
    pr_config_free(cfg);
    pr_mock_broker_stop(broker);
}

static void die(const char *what, const char *err)
{
    fprintf(stderr, "fuzz_http: %s: %s\n", what, err);
    exit(1);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char err[2048];
    pr_log_set_level(PR_LOG_ERROR);
    broker = pr_mock_broker_start(2, "events", err, sizeof(err));
    if (!broker)
        die("mock broker", err);
    if (pr_config_load_default(&cfg, err, sizeof(err)))
        die("config", err);
    static const char *const sets[][2] = {
        {"http.listen", "127.0.0.1:0"},
        {"pipelines[*].sinks.trainer.listen", "127.0.0.1:0"},
        {"engine.threads", "1"},
        {"log.level", "error"},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        if (pr_config_set(cfg, sets[i][0], sets[i][1], err, sizeof(err)))
            die(sets[i][0], err);
    if (pr_config_set(cfg, "pipelines[*].source.kafka.properties.bootstrap.servers",
                      pr_mock_broker_bootstrap(broker), err, sizeof(err)))
        die("bootstrap.servers", err);
    pr_service_opts o = {0};
    o.drain_timeout_ms = 1000;
    if (pr_service_new(cfg, &o, &svc, err, sizeof(err)) || pr_service_start(svc, err, sizeof(err)))
        die("service", err);
    pr_log_set_level(PR_LOG_ERROR); /* the service applied log.level; keep it quiet */
    port = pr_service_http_port(svc);
    if (!port)
        die("http", "no port");
    atexit(stop_all);
    return 0;
}

/* A connect interrupted by a signal goes on in the background: wait for it
 * to finish and take its result (0, or -1 with errno set). */
static int connect_finish(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int pr;
    while ((pr = poll(&pfd, 1, 5000)) < 0 && errno == EINTR)
        ;
    if (pr == 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    int soerr = 0;
    socklen_t sl = sizeof(soerr);
    if (pr < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        return -1;
    errno = soerr;
    return soerr ? -1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    FUZZ_CHECK(fd >= 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* Thousands of connections a second, each leaving a TIME_WAIT behind
     * (the server closes first): from one source address the loopback runs
     * out of ports (EADDRNOTAVAIL) within seconds. So the source address
     * rotates over 127.0.0.2-201 (all of 127/8 is loopback), connections end
     * with a reset (SO_LINGER 0, below), and a connect that still finds no
     * free port is retried, not a finding. */
    static unsigned src_rot;
    struct sockaddr_in src = {0};
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + 1 + (src_rot++ % 200));
    (void)bind(fd, (struct sockaddr *)&src, sizeof(src));
    int cr;
    for (int tries = 0; (cr = connect(fd, (struct sockaddr *)&a, sizeof(a))) != 0 &&
                        errno == EADDRNOTAVAIL && tries < 500;
         tries++)
        usleep(10000);
    if (cr != 0 && errno == EINTR)
        cr = connect_finish(fd); /* libFuzzer's timer signal interrupted it */
    if (cr != 0) {
        fprintf(stderr, "fuzz_http: connect to 127.0.0.1:%u: %s\n", (unsigned)port,
                strerror(errno));
        abort();
    }
    /* The server may answer (and close) before reading everything: a failed
     * send is not an error; the answer is what counts. */
    size_t off = 0;
    while (off < size) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char head[5], buf[65536];
    size_t len = 0;
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, 5000);
        if (pr == 0) {
            fprintf(stderr, "fuzz_http: no answer and no close within 5 s\n");
            abort();
        }
        if (pr < 0 && errno == EINTR)
            continue;
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EOF, or a reset after an early answer */
        for (ssize_t i = 0; i < n && len + (size_t)i < sizeof(head); i++)
            head[len + (size_t)i] = buf[i];
        len += (size_t)n;
    }
    struct linger lg = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    if (len >= sizeof(head))
        FUZZ_CHECK(!memcmp(head, "HTTP/", 5));
    return 0;
}
