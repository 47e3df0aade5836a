/*
 * test_trainer_security.c — the trainer port under abuse (issue 11,
 * "Hardening"): connection limit, EMFILE flood with a low RLIMIT_NOFILE,
 * handshake and idle timeouts (manual clock), frame size limit, partial
 * frames against the shared receive-buffer pool, bearer tokens (missing,
 * wrong, rotated) and TLS (right CA, wrong CA, plain text to a TLS port,
 * mutual TLS with and without a client certificate, a certificate replaced
 * on disk while running). Every refusal must be
 * counted under its reason.
 *
 * Waiting for the sink's I/O thread is condition-based (poll the stats
 * until they hold, generous deadline). Timeouts are driven by a manual
 * clock. Certificates come from the openssl CLI into a temporary directory.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_clock.h"
#include "pr_sink.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

typedef struct sfx {
    pr_sink *sink;
    char addr[64];
    uint64_t next_seq;
} sfx;

static sfx *sfx_new(const pr_trainer_sink_cfg *tc, const pr_clock *clk)
{
    sfx *f = calloc(1, sizeof(*f));
    const char *dn[] = {"I1", "I2"}, *sn[] = {"C1"};
    pr_sink_cfg cfg = {.pipeline = "criteo",
                       .n_dense = 2,
                       .n_sparse = 1,
                       .sparse_width = 4,
                       .dense_names = dn,
                       .sparse_names = sn,
                       .clock = clk};
    cfg.trainer = *tc;
    cfg.trainer.listen = "127.0.0.1:0";
    char err[512];
    if (pr_sink_new(&pr_sink_trainer_ops, &cfg, &f->sink, err, sizeof(err)))
        fail_msg("sink: %s", err);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", pr_sink_port(f->sink));
    f->next_seq = 1;
    return f;
}

static void sfx_free(sfx *f)
{
    pr_sink_free(f->sink);
    free(f);
}

static void send_batch(sfx *f)
{
    pr_batch *b = pr_batch_new("criteo", 3, 2, 1, 4);
    b->seq = f->next_seq++;
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(pr_sink_send(f->sink, b), 0);
    pr_batch_unref(b);
}

static pr_sink_stats stats(sfx *f)
{
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    return st;
}

/* Wait until cond(stats) holds (10 s deadline, checked every 2 ms). */
#define WAIT_FOR(f, cond)                                                                          \
    do {                                                                                           \
        pr_sink_stats st_;                                                                         \
        int i_;                                                                                    \
        for (i_ = 0; i_ < 5000; i_++) {                                                            \
            st_ = stats(f);                                                                        \
            const pr_sink_stats *st = &st_;                                                        \
            if (cond)                                                                              \
                break;                                                                             \
            poll(NULL, 0, 2);                                                                      \
        }                                                                                          \
        if (i_ == 5000)                                                                            \
            fail_msg("timed out waiting for: %s", #cond);                                          \
    } while (0)

static int raw_socket(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void raw_connect_fd(sfx *f, int fd)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)pr_sink_port(f->sink))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
}

static int raw_connect(sfx *f)
{
    int fd = raw_socket();
    raw_connect_fd(f, fd);
    return fd;
}

/* The next frame from the server, or NULL on EOF/reset/timeout. */
static Piperec__Trainer__V1__Frame *raw_next(int fd)
{
    uint32_t n;
    uint8_t *p = (uint8_t *)&n;
    for (size_t got = 0; got < 4;) {
        ssize_t r = read(fd, p + got, 4 - got);
        if (r <= 0)
            return NULL;
        got += (size_t)r;
    }
    uint8_t *body = malloc(n ? n : 1);
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, body + got, n - got);
        if (r <= 0) {
            free(body);
            return NULL;
        }
        got += (size_t)r;
    }
    Piperec__Trainer__V1__Frame *fr = piperec__trainer__v1__frame__unpack(NULL, n, body);
    free(body);
    return fr;
}

/* The server's Error code on fd (reads past pings), or -1 at EOF. */
static int raw_error_code(int fd)
{
    for (;;) {
        Piperec__Trainer__V1__Frame *fr = raw_next(fd);
        if (!fr)
            return -1;
        int code =
            fr->msg_case == PIPEREC__TRAINER__V1__FRAME__MSG_ERROR ? (int)fr->error->code : -2;
        piperec__trainer__v1__frame__free_unpacked(fr, NULL);
        if (code != -2)
            return code;
    }
}

static pr_trainer_client *open_client(sfx *f, pr_trainer_client_opts *o, char *err, size_t es,
                                      int *rc)
{
    pr_trainer_client *c = NULL;
    o->connect = f->addr;
    o->pipeline = o->pipeline ? o->pipeline : "criteo";
    o->timeout_ms = 5000;
    *rc = pr_trainer_client_open(o, &c, err, es);
    return c;
}

/* A subscribed client receives one batch and acks it. */
static void roundtrip(sfx *f, pr_trainer_client *c)
{
    send_batch(f);
    pr_batch_view v;
    char err[256];
    int rc = pr_trainer_client_next(c, &v, 5000, err, sizeof(err));
    if (rc != 1)
        fail_msg("next: %d %s", rc, rc < 0 ? err : "timeout");
    assert_int_equal(pr_trainer_client_ack(c, v.seq), 0);
    pr_batch_view_fini(&v);
}

/* A plain trainer can connect, receive a batch and ack it. */
static void assert_trainer_gets_in(sfx *f)
{
    pr_trainer_client_opts o = {0};
    char err[256];
    int rc;
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ., .. and the directory's own fd */
}

/* ---------------------------------------------------------------- connections */

static void test_max_connections(void **state)
{
    (void)state;
    pr_trainer_sink_cfg tc = {.max_connections = 3};
    sfx *f = sfx_new(&tc, NULL);
    int fds[5];
    for (int i = 0; i < 5; i++)
        fds[i] = raw_connect(f);
    WAIT_FOR(f, st->connections == 3 && st->refused[PR_TRAINER_REFUSE_MAX_CONNECTIONS] == 2);
    /* The refused ones are told why (or just closed), never left hanging. */
    int told = 0;
    for (int i = 3; i < 5; i++) {
        int code = raw_error_code(fds[i]);
        assert_true(code == PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE || code == -1);
        told += code != -1;
    }
    (void)told;
    for (int i = 0; i < 5; i++)
        close(fds[i]);
    WAIT_FOR(f, st->connections == 0);
    /* Room again: a trainer gets in. */
    assert_trainer_gets_in(f);
    sfx_free(f);
}

/* 300 idle connections against RLIMIT_NOFILE: the sink must accept-and-
 * close what it cannot hold (through its spare descriptor) instead of
 * leaving the listening socket readable, which made its loop spin. The
 * loop's wakeups are counted: with the spin they are in the tens of
 * thousands per second, here a handful per 100 ms poll timeout. */
static struct rlimit saved_nofile;

/* Whatever the test did, the next tests get their descriptors back. */
static int restore_nofile(void **state)
{
    (void)state;
    if (!saved_nofile.rlim_cur)
        return 0; /* the test stopped before it changed anything */
    return setrlimit(RLIMIT_NOFILE, &saved_nofile) == 0 ? 0 : -1;
}

static void test_emfile_flood(void **state)
{
    (void)state;
    enum { N = 300 };
    pr_trainer_sink_cfg tc = {.max_connections = 1000};
    sfx *f = sfx_new(&tc, NULL);
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    saved_nofile = old;
    if (old.rlim_max < (rlim_t)(open_fds() + N + 64))
        skip();
    struct rlimit big = {(rlim_t)(open_fds() + N + 64), old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &big), 0);
    int fds[N];
    for (int i = 0; i < N; i++) /* the client ends exist before the limit drops */
        fds[i] = raw_socket();
    /* The server may open 20 more descriptors, then accept() fails. */
    struct rlimit low = {(rlim_t)(open_fds() + 20), old.rlim_max};
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    for (int i = 0; i < N; i++) {
        raw_connect_fd(f, fds[i]);
        if (i % 32 == 31) /* stay within the listen backlog */
            WAIT_FOR(f, st->connections + st->refused[PR_TRAINER_REFUSE_FD_EXHAUSTED] ==
                            (uint64_t)i + 1);
    }
    WAIT_FOR(f, st->connections + st->refused[PR_TRAINER_REFUSE_FD_EXHAUSTED] == N);
    pr_sink_stats a = stats(f);
    assert_true(a.connections >= 10 && a.connections <= 20);
    assert_true(a.refused[PR_TRAINER_REFUSE_FD_EXHAUSTED] >= N - 20);
    poll(NULL, 0, 300); /* an idle stretch: the loop must sleep through it */
    pr_sink_stats b = stats(f);
    uint64_t wakeups = b.io_wakeups - a.io_wakeups;
    print_message("EMFILE flood: %llu held, %llu refused, %llu wakeups in 300 ms\n",
                  (unsigned long long)a.connections,
                  (unsigned long long)a.refused[PR_TRAINER_REFUSE_FD_EXHAUSTED],
                  (unsigned long long)wakeups);
    assert_true(wakeups < 30);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    WAIT_FOR(f, st->connections == 0);
    /* Descriptors back: a trainer gets in. */
    assert_trainer_gets_in(f);
    sfx_free(f);
}

static void test_handshake_and_idle_timeouts(void **state)
{
    (void)state;
    pr_manual_clock mc;
    pr_manual_clock_init(&mc, 1700000000000LL);
    pr_trainer_sink_cfg tc = {
        .handshake_timeout_ms = 1000, .idle_timeout_ms = 5000, .keepalive_ms = 2000};
    sfx *f = sfx_new(&tc, &mc.clock);
    int silent = raw_connect(f); /* connects, never subscribes */
    pr_trainer_client_opts o = {0};
    char err[256];
    int rc;
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    WAIT_FOR(f, st->connections == 2 && st->clients == 1);
    pr_manual_clock_advance_ms(&mc, 999);
    poll(NULL, 0, 250); /* two loop turns at the new time: nothing may happen */
    assert_int_equal(stats(f).dropped[PR_TRAINER_DROP_HANDSHAKE_TIMEOUT], 0);
    pr_manual_clock_advance_ms(&mc, 2);
    WAIT_FOR(f, st->dropped[PR_TRAINER_DROP_HANDSHAKE_TIMEOUT] == 1 && st->connections == 1);
    assert_int_equal(raw_error_code(silent), PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT);
    close(silent);
    /* The subscribed trainer is silent too: the idle timeout closes it. */
    assert_int_equal(stats(f).dropped[PR_TRAINER_DROP_IDLE_TIMEOUT], 0);
    pr_manual_clock_advance_ms(&mc, 5000);
    WAIT_FOR(f, st->dropped[PR_TRAINER_DROP_IDLE_TIMEOUT] == 1 && st->connections == 0);
    pr_batch_view v;
    assert_int_equal(pr_trainer_client_next(c, &v, 5000, err, sizeof(err)), PR_ESTATE);
    assert_non_null(strstr(err, "nothing received"));
    pr_trainer_client_close(c);
    sfx_free(f);
}

static void test_frame_too_large(void **state)
{
    (void)state;
    pr_trainer_sink_cfg tc = {.max_frame_bytes = 1024};
    sfx *f = sfx_new(&tc, NULL);
    int fd = raw_connect(f);
    uint32_t n = 1025;
    assert_int_equal(write(fd, &n, 4), 4);
    assert_int_equal(raw_error_code(fd), PIPEREC__TRAINER__V1__ERROR__CODE__BAD_FRAME);
    WAIT_FOR(f, st->dropped[PR_TRAINER_DROP_FRAME_TOO_LARGE] == 1 && st->connections == 0);
    close(fd);
    sfx_free(f);
}

/* Partial frames: each connection may hold RX_BASE (4 KiB); the rest comes
 * from max_receive_buffer_bytes. With a 64 KiB pool and 30000-byte frames,
 * two connections fit, the others are dropped; the total stays bounded,
 * the service sees it (pr_sinkset_buffered_bytes) and a trainer still gets
 * in. */
static void test_partial_frame_flood(void **state)
{
    (void)state;
    enum { N = 6, FRAME = 30000 };
    pr_trainer_sink_cfg tc = {.max_frame_bytes = 32768, .max_receive_buffer_bytes = 65536};
    sfx *f = sfx_new(&tc, NULL);
    pr_sinkset *ss = pr_sinkset_new();
    pr_sink *other;
    pr_sink_cfg fcfg = {.pipeline = "criteo"};
    char dir[] = "/tmp/pr_sec_files_XXXXXX";
    assert_non_null(mkdtemp(dir));
    fcfg.files.dir = dir;
    char err[512];
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &fcfg, &other, err, sizeof(err)), 0);
    assert_int_equal(pr_sinkset_add(ss, other), 0);
    int fds[N];
    uint8_t *junk = calloc(1, 20000);
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect(f);
        uint32_t n = FRAME;
        assert_int_equal(write(fds[i], &n, 4), 4);
        assert_int_equal(write(fds[i], junk, 20000), 20000);
        /* One at a time: which ones fit is then exact. */
        WAIT_FOR(f,
                 st->receive_buffer_bytes == (uint64_t)(i < 2 ? i + 1 : 2) * (4 + FRAME) &&
                     st->dropped[PR_TRAINER_DROP_RECEIVE_BUFFER] == (uint64_t)(i < 2 ? 0 : i - 1) &&
                     st->connections == (uint64_t)(i < 2 ? i + 1 : 2));
    }
    free(junk);
    for (int i = 2; i < N; i++)
        assert_int_equal(raw_error_code(fds[i]), PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE);
    pr_sink_stats st = stats(f);
    assert_true(st.receive_buffer_bytes <= 65536 + N * 4096);
    assert_int_equal(pr_sink_buffered_bytes(f->sink), 2 * (4 + FRAME));
    assert_int_equal(pr_sink_buffered_bytes(other), 0);
    /* A trainer's small frames still fit in its own 4 KiB. */
    pr_trainer_client_opts o = {0};
    int rc;
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
    for (int i = 0; i < N; i++)
        close(fds[i]);
    WAIT_FOR(f, st->connections == 0 && st->receive_buffer_bytes == 0);
    pr_sinkset_free(ss);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    sfx_free(f);
}

/* ---------------------------------------------------------------- tokens */

static void write_file(const char *path, const char *text)
{
    char tmp[512];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
    assert_int_equal(rename(tmp, path), 0); /* a new inode, like a Secret update */
}

static void test_token_auth(void **state)
{
    (void)state;
    char dir[] = "/tmp/pr_sec_tok_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof(path), "%s/token", dir);
    write_file(path, "# trainers\ns3cret-one\n");
    pr_trainer_sink_cfg tc = {0};
    tc.auth.token_file = path;
    sfx *f = sfx_new(&tc, NULL);
    char err[256];
    int rc;
    pr_trainer_client_opts o = {0};
    /* No token. */
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_int_equal(rc, PR_ESTATE);
    assert_non_null(strstr(err, "authentication required"));
    /* Wrong token. */
    o.token = "s3cret-two";
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_int_equal(rc, PR_ESTATE);
    assert_non_null(strstr(err, "token not accepted"));
    pr_sink_stats st = stats(f);
    assert_int_equal(st.auth_failures[PR_TRAINER_AUTH_MISSING_TOKEN], 1);
    assert_int_equal(st.auth_failures[PR_TRAINER_AUTH_BAD_TOKEN], 1);
    assert_int_equal(st.clients, 0);
    /* Right token. */
    o.token = "s3cret-one";
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
    /* Rotation: both during the switch, then only the new one. */
    write_file(path, "s3cret-one\ns3cret-two\n");
    o.token = "s3cret-two";
    c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    pr_trainer_client_close(c);
    write_file(path, "s3cret-two\n");
    o.token = "s3cret-one";
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_non_null(strstr(err, "token not accepted"));
    /* A broken update keeps the tokens that were valid. */
    write_file(path, "\n# nothing\n");
    o.token = "s3cret-two";
    c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    pr_trainer_client_close(c);
    assert_int_equal(stats(f).auth_failures[PR_TRAINER_AUTH_BAD_TOKEN], 2);
    /* The client's token file reader. */
    char tok[64];
    write_file(path, "# comment\n\n  tok-from-file  \n");
    assert_int_equal(pr_trainer_client_read_token(path, tok, sizeof(tok), err, sizeof(err)), 0);
    assert_string_equal(tok, "tok-from-file");
    sfx_free(f);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------------- TLS */

static char cert_dir[64];

/* A CA, a server certificate for 127.0.0.1 signed by it, a client
 * certificate signed by it, and a second, unrelated CA. */
static int make_certs(void **state)
{
    (void)state;
    if (system("openssl version >/dev/null 2>&1") != 0)
        return 0; /* the TLS tests skip */
    snprintf(cert_dir, sizeof(cert_dir), "/tmp/pr_sec_tls_XXXXXX");
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
    if (cert_dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cert_dir);
        if (system(cmd) != 0)
            return -1;
    }
    return 0;
}

static const char *cpath(const char *name)
{
    static char b[8][128];
    static int k;
    char *p = b[k++ % 8];
    snprintf(p, 128, "%s/%s", cert_dir, name);
    return p;
}

static sfx *tls_sink(bool mtls, const char *token_file)
{
    pr_trainer_sink_cfg tc = {0};
    tc.tls.enabled = true;
    tc.tls.cert_file = cpath("server.crt");
    tc.tls.key_file = cpath("server.key");
    tc.tls.ca_file = mtls ? cpath("ca.crt") : NULL;
    tc.auth.token_file = token_file;
    return sfx_new(&tc, NULL);
}

static void test_tls(void **state)
{
    (void)state;
    if (!cert_dir[0])
        skip();
    sfx *f = tls_sink(false, NULL);
    char err[256];
    int rc;
    /* Right CA: works end to end. */
    pr_trainer_client_opts o = {.tls_ca = cpath("ca.crt")};
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
    /* A CA that did not sign the server: the client refuses the server. */
    o = (pr_trainer_client_opts){.tls_ca = cpath("rogue.crt")};
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_non_null(strstr(err, "not trusted"));
    WAIT_FOR(f, st->refused[PR_TRAINER_REFUSE_TLS_HANDSHAKE] == 1);
    /* Plain text to the TLS port: refused, and told so in plain text. */
    o = (pr_trainer_client_opts){0};
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_non_null(strstr(err, "requires TLS"));
    WAIT_FOR(f, st->refused[PR_TRAINER_REFUSE_PLAINTEXT] == 1 && st->connections == 0);
    sfx_free(f);
}

static void test_mtls_and_token(void **state)
{
    (void)state;
    if (!cert_dir[0])
        skip();
    char tok[256];
    snprintf(tok, sizeof(tok), "%s/token", cert_dir);
    write_file(tok, "tls-token\n");
    sfx *f = tls_sink(true, tok);
    char err[256];
    int rc;
    /* No client certificate. */
    pr_trainer_client_opts o = {.tls_ca = cpath("ca.crt"), .token = "tls-token"};
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    WAIT_FOR(f, st->auth_failures[PR_TRAINER_AUTH_CLIENT_CERT] == 1);
    /* A certificate from another CA (self-signed rogue). */
    o.tls_cert = cpath("rogue.crt");
    o.tls_key = cpath("rogue.key");
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    WAIT_FOR(f, st->auth_failures[PR_TRAINER_AUTH_CLIENT_CERT] == 2);
    /* The right certificate but a wrong token. */
    o.tls_cert = cpath("client.crt");
    o.tls_key = cpath("client.key");
    o.token = "nope";
    assert_null(open_client(f, &o, err, sizeof(err), &rc));
    assert_non_null(strstr(err, "token not accepted"));
    assert_int_equal(stats(f).auth_failures[PR_TRAINER_AUTH_BAD_TOKEN], 1);
    /* Both right. */
    o.token = "tls-token";
    pr_trainer_client *c = open_client(f, &o, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    for (int i = 0; i < 3; i++)
        roundtrip(f, c);
    pr_trainer_client_close(c);
    WAIT_FOR(f, st->connections == 0 && st->batches_acked == 3);
    sfx_free(f);
}

/* The certificate and key are re-read when their files change: connections
 * accepted after a rotation get the new certificate and a client that
 * trusts only the old CA is refused; a half-done rotation (certificate
 * replaced, key not yet) keeps the old certificate in use. */
static void test_tls_cert_reload(void **state)
{
    (void)state;
    if (!cert_dir[0])
        skip();
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "set -e; cd %s; exec >/dev/null 2>&1\n"
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server2.key "
             "-out server2.csr -subj /CN=server2\n"
             "printf 'subjectAltName=IP:127.0.0.1\\nextendedKeyUsage=serverAuth\\n' > server2.ext\n"
             "openssl x509 -req -in server2.csr -CA rogue.crt -CAkey rogue.key -CAcreateserial "
             "-out server2.crt -days 2 -extfile server2.ext\n"
             "cp server.crt live.crt; cp server.key live.key\n",
             cert_dir);
    assert_int_equal(system(cmd), 0);
    pr_trainer_sink_cfg tc = {0};
    tc.tls.enabled = true;
    tc.tls.cert_file = cpath("live.crt");
    tc.tls.key_file = cpath("live.key");
    sfx *f = sfx_new(&tc, NULL);
    char err[256];
    int rc;
    pr_trainer_client_opts old_ca = {.tls_ca = cpath("ca.crt")};
    pr_trainer_client_opts new_ca = {.tls_ca = cpath("rogue.crt")};
    pr_trainer_client *c = open_client(f, &old_ca, err, sizeof(err), &rc);
    if (rc)
        fail_msg("%s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
    /* Half a rotation: the new certificate with the old key does not load. */
    snprintf(cmd, sizeof(cmd), "cp %s %s", cpath("server2.crt"), cpath("live.crt"));
    assert_int_equal(system(cmd), 0);
    c = open_client(f, &old_ca, err, sizeof(err), &rc);
    if (rc)
        fail_msg("half-done rotation: %s", err);
    pr_trainer_client_close(c);
    assert_null(open_client(f, &new_ca, err, sizeof(err), &rc));
    /* The key too: the new certificate is served, the old CA no longer fits. */
    snprintf(cmd, sizeof(cmd), "cp %s %s", cpath("server2.key"), cpath("live.key"));
    assert_int_equal(system(cmd), 0);
    c = open_client(f, &new_ca, err, sizeof(err), &rc);
    if (rc)
        fail_msg("after rotation: %s", err);
    roundtrip(f, c);
    pr_trainer_client_close(c);
    assert_null(open_client(f, &old_ca, err, sizeof(err), &rc));
    assert_non_null(strstr(err, "not trusted"));
    sfx_free(f);
}

static void test_tls_bad_config(void **state)
{
    (void)state;
    if (!cert_dir[0])
        skip();
    pr_trainer_sink_cfg tc = {0};
    tc.tls.enabled = true;
    tc.tls.cert_file = cpath("server.crt");
    tc.tls.key_file = cpath("client.key"); /* not the certificate's key */
    tc.listen = "127.0.0.1:0";
    pr_sink_cfg cfg = {.pipeline = "criteo", .trainer = tc};
    pr_sink *s = NULL;
    char err[512];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "key_file"));
    cfg.trainer.tls.key_file = NULL;
    cfg.trainer.auth.token_file = "/nonexistent/token";
    cfg.trainer.tls.enabled = false;
    assert_true(pr_sink_new(&pr_sink_trainer_ops, &cfg, &s, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "token_file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_connections),
        cmocka_unit_test_teardown(test_emfile_flood, restore_nofile),
        cmocka_unit_test(test_handshake_and_idle_timeouts),
        cmocka_unit_test(test_frame_too_large),
        cmocka_unit_test(test_partial_frame_flood),
        cmocka_unit_test(test_token_auth),
        cmocka_unit_test(test_tls),
        cmocka_unit_test(test_mtls_and_token),
        cmocka_unit_test(test_tls_cert_reload),
        cmocka_unit_test(test_tls_bad_config),
    };
    return cmocka_run_group_tests(tests, make_certs, remove_certs);
}
