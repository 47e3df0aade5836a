/*
 * trainer_client.c — the reference trainer-stream client (contract:
 * pr_trainer_client.h; protocol: docs/trainer-protocol.md).
 *
 * One non-blocking socket driven with poll(2) timeouts, one receive buffer.
 * A frame is parsed in place: a batch comes back as a zero-copy view into
 * the buffer, which stays valid until the next call (the consumed frame is
 * dropped from the buffer at the start of that call). Server pings are
 * answered while waiting for batches. With TLS the same loop runs over
 * SSL_read/SSL_write (WANT_READ/WANT_WRITE become poll events).
 *
 * Checkpoint delivery: waiting for a CheckpointOk reads ahead of batches
 * that are already buffered; those frames stay where they are (the buffer
 * is a queue of whole frames from offset 0), and only the control frames
 * read on the way (Ping, CheckpointOk) are cut out of it, so _next() later
 * returns the batches in arrival order.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <signal.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "pr_hostport.h"
#include "pr_varint.h"
#include "trainer_wire.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

struct pr_trainer_client {
    int fd;
    SSL_CTX *ctx; /* TLS only */
    SSL *ssl;
    short want; /* TLS: the poll event the last SSL call waits for */
    pr_trainer_info info;
    uint8_t *buf;
    size_t len, cap;
    size_t consumed;  /* bytes of the last returned frame, dropped at the next call */
    uint8_t *rebuilt; /* raw layout: the last batch as a TrainingBatch (the view's bytes) */
    size_t rebuilt_cap;
    bool stopping; /* the server sent Error{SHUTDOWN}: a clean stop, still draining */
};

static int64_t pr__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int pr__wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int tmo = -1;
        if (deadline >= 0) {
            int64_t left = deadline - pr__now_ms();
            tmo = left > 0 ? (int)left : 0;
        }
        struct pollfd p = {fd, ev, 0};
        int rc = poll(&p, 1, tmo);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc < 0)
            return PR_EIO;
        return rc == 0 ? PR_ETIMEDOUT : 0;
    }
}

/* SSL call result -> -1 with errno (EAGAIN: wait for c->want), 0 at EOF. */
static ssize_t pr__tc_tls_result(pr_trainer_client *c, int rc, size_t n)
{
    return pr__tls_result(c->ssl, rc, n, &c->want);
}

static ssize_t pr__c_recv(pr_trainer_client *c, void *buf, size_t n)
{
    c->want = POLLIN;
    if (!c->ssl)
        return recv(c->fd, buf, n, 0);
    size_t got = 0;
    ERR_clear_error();
    int rc = SSL_read_ex(c->ssl, buf, n, &got);
    return pr__tc_tls_result(c, rc, got);
}

/* SSL_write writes with write(2): keep a vanished server from raising
 * SIGPIPE in the caller's thread (blocked around the call, a pending one
 * is taken back). */
static ssize_t pr__c_send(pr_trainer_client *c, const void *buf, size_t n)
{
    c->want = POLLOUT;
    if (!c->ssl)
        return send(c->fd, buf, n, MSG_NOSIGNAL);
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    bool was_pending = sigismember(&pending, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    size_t w = 0;
    ERR_clear_error();
    int rc = SSL_write_ex(c->ssl, buf, n, &w);
    ssize_t r = pr__tc_tls_result(c, rc, w);
    int e = errno;
    sigpending(&pending);
    if (!was_pending && sigismember(&pending, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return r;
}

static int pr__write_all(pr_trainer_client *c, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = pr__c_send(c, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (pr__wait_fd(c->fd, c->want, pr__now_ms() + 30000) < 0)
                    return PR_EIO;
                continue;
            }
            return PR_EIO;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int pr__send_frame(pr_trainer_client *c, const Piperec__Trainer__V1__Frame *f)
{
    uint8_t *buf;
    size_t len;
    int err = pr__frame_pack(f, &buf, &len);
    if (err < 0)
        return err;
    err = pr__write_all(c, buf, len);
    free(buf);
    return err;
}

/* Drop the frame returned last (its view is no longer in use). */
static void pr__drop_consumed(pr_trainer_client *c)
{
    if (c->consumed) {
        memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
        c->len -= c->consumed;
        c->consumed = 0;
    }
}

/* Make sure a whole frame is buffered at byte `at` (the start of a frame);
 * returns its body length via *n. */
static int pr__fill_frame_at(pr_trainer_client *c, size_t at, int64_t deadline, uint32_t *n,
                             char *errstr, size_t es)
{
    for (;;) {
        if (c->len - at >= 4) {
            memcpy(n, c->buf + at, 4);
            if (*n > PR__FRAME_MAX)
                return pr_seterr(errstr, es, PR_EBADREC, "frame of %u bytes is too large", *n);
            if (c->len - at - 4 >= *n)
                return 0;
        }
        size_t need = at + (c->len - at >= 4 ? 4 + (size_t)*n : 65536);
        if (need < 65536)
            need = 65536; /* always > c->len: the frame at `at` is incomplete */
        if (c->cap < need) {
            uint8_t *nb = realloc(c->buf, need);
            if (!nb)
                return pr_seterr(errstr, es, PR_ENOMEM, "out of memory for a %zu-byte frame", need);
            c->buf = nb;
            c->cap = need;
        }
        ssize_t r = pr__c_recv(c, c->buf + c->len, c->cap - c->len);
        if (r > 0) {
            c->len += (size_t)r;
            continue;
        }
        if (r == 0)
            return pr_seterr(errstr, es, PR_EIO, "server closed the connection");
        if (c->ssl && errno == ECONNRESET) {
            char eb[256];
            unsigned long e = ERR_peek_last_error();
            if (e) { /* an alert, e.g. the server refused our certificate: final */
                ERR_error_string_n(e, eb, sizeof(eb));
                return pr_seterr(errstr, es, PR_ESTATE, "TLS: %s", eb);
            }
            return pr_seterr(errstr, es, PR_EIO, "server closed the connection");
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return pr_seterr(errstr, es, PR_EIO, "recv: %s", strerror(errno));
        int rc = pr__wait_fd(c->fd, c->want, deadline);
        if (rc == PR_ETIMEDOUT)
            return PR_ETIMEDOUT;
        if (rc < 0)
            return pr_seterr(errstr, es, PR_EIO, "poll: %s", strerror(errno));
    }
}

/* Make sure a whole frame is buffered at the front; its body length in *n. */
static int pr__read_frame(pr_trainer_client *c, int64_t deadline, uint32_t *n, char *errstr,
                          size_t es)
{
    pr__drop_consumed(c);
    return pr__fill_frame_at(c, 0, deadline, n, errstr, es);
}

static int pr__server_error(pr_trainer_client *c, const Piperec__Trainer__V1__Frame *f,
                            char *errstr, size_t es)
{
    if (f->error->code == PIPEREC__TRAINER__V1__ERROR__CODE__SHUTDOWN)
        c->stopping = true;
    return pr_seterr(errstr, es, PR_ESTATE, "server error %d: %s", (int)f->error->code,
                     f->error->message ? f->error->message : "");
}

bool pr_trainer_client_stopping(const pr_trainer_client *c)
{
    return c && c->stopping;
}

static char **pr__names_copy(char **src, size_t n)
{
    if (!n)
        return NULL;
    char **v = calloc(n, sizeof(char *));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = strdup(src[i]);
    return v;
}

/* A TLS failure: PR_EINVAL for our own files, PR_ESTATE when TLS said no
 * (an alert: final, like a server Error), PR_EIO when the connection just
 * ended (worth retrying). */
static int pr__tls_fail(const char *what, char *errstr, size_t es)
{
    char eb[256];
    unsigned long e = ERR_peek_last_error();
    int code = strcmp(what, "handshake") != 0 ? PR_EINVAL : e ? PR_ESTATE : PR_EIO;
    if (e)
        ERR_error_string_n(e, eb, sizeof(eb));
    else
        snprintf(eb, sizeof(eb), "connection closed by the server");
    return pr_seterr(errstr, es, code, "TLS: %s: %s", what, eb);
}

/* TLS over the connected socket: verify the server against tls_ca (or the
 * system CAs) and `host` (name or IP); present a client certificate when
 * given. Blocks until the handshake is done or the deadline. */
static int pr__tls_connect(pr_trainer_client *c, const pr_trainer_client_opts *o, const char *host,
                           int64_t deadline, char *errstr, size_t es)
{
    ERR_clear_error();
    if (!(c->ctx = SSL_CTX_new(TLS_client_method())))
        return pr__tls_fail("context", errstr, es);
    SSL_CTX_set_min_proto_version(c->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(c->ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(c->ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
    if (o->tls_ca ? SSL_CTX_load_verify_locations(c->ctx, o->tls_ca, NULL) != 1
                  : SSL_CTX_set_default_verify_paths(c->ctx) != 1)
        return pr__tls_fail(o->tls_ca ? o->tls_ca : "system CAs", errstr, es);
    if ((o->tls_cert != NULL) != (o->tls_key != NULL))
        return pr_seterr(errstr, es, PR_EINVAL, "TLS: a client certificate needs its key");
    if (o->tls_cert && SSL_CTX_use_certificate_chain_file(c->ctx, o->tls_cert) != 1)
        return pr__tls_fail(o->tls_cert, errstr, es);
    if (o->tls_key && SSL_CTX_use_PrivateKey_file(c->ctx, o->tls_key, SSL_FILETYPE_PEM) != 1)
        return pr__tls_fail(o->tls_key, errstr, es);
    if (!(c->ssl = SSL_new(c->ctx)) || SSL_set_fd(c->ssl, c->fd) != 1)
        return pr__tls_fail("session", errstr, es);
    const char *name = host[0] ? host : "127.0.0.1";
    unsigned char ipbuf[16];
    bool is_ip = inet_pton(AF_INET, name, ipbuf) == 1 || inet_pton(AF_INET6, name, ipbuf) == 1;
    X509_VERIFY_PARAM *vp = SSL_get0_param(c->ssl);
    if (is_ip) {
        X509_VERIFY_PARAM_set1_ip_asc(vp, name);
    } else {
        SSL_set_tlsext_host_name(c->ssl, name);
        SSL_set1_host(c->ssl, name);
    }
    SSL_set_connect_state(c->ssl);
    for (;;) {
        ERR_clear_error();
        int rc = SSL_do_handshake(c->ssl);
        if (rc == 1)
            return 0;
        if (pr__tc_tls_result(c, rc, 0) < 0 && errno == EAGAIN) {
            if (pr__wait_fd(c->fd, c->want, deadline) < 0)
                return pr_seterr(errstr, es, PR_ETIMEDOUT,
                                 "TLS handshake with the server timed out");
            continue;
        }
        long vr = SSL_get_verify_result(c->ssl);
        if (vr != X509_V_OK)
            return pr_seterr(errstr, es, PR_EINVAL, "TLS: server certificate not trusted: %s",
                             X509_verify_cert_error_string(vr));
        return pr__tls_fail("handshake", errstr, es);
    }
}

/* Protobuf OffsetRanges for n ranges (checked: 0 <= first <= last): *rv
 * holds them, *rp points at each; free both. */
static int pr__ranges_build(const pr_trainer_range *r, size_t n, Piperec__V1__OffsetRange **rv,
                            Piperec__V1__OffsetRange ***rp, char *errstr, size_t es)
{
    *rv = NULL;
    *rp = NULL;
    if (!n)
        return 0;
    if (!r)
        return pr_seterr(errstr, es, PR_EINVAL, "%zu offset ranges given as NULL", n);
    for (size_t i = 0; i < n; i++)
        if (r[i].first < 0 || r[i].first > r[i].last)
            return pr_seterr(errstr, es, PR_EINVAL, "offset range %s/%d [%lld, %lld] is not valid",
                             r[i].topic ? r[i].topic : "", (int)r[i].partition,
                             (long long)r[i].first, (long long)r[i].last);
    *rv = calloc(n, sizeof(**rv));
    *rp = calloc(n, sizeof(**rp));
    if (!*rv || !*rp) {
        free(*rv);
        free(*rp);
        *rv = NULL;
        *rp = NULL;
        return pr_seterr(errstr, es, PR_ENOMEM, "out of memory for %zu offset ranges", n);
    }
    for (size_t i = 0; i < n; i++) {
        Piperec__V1__OffsetRange init = PIPEREC__V1__OFFSET_RANGE__INIT;
        (*rv)[i] = init;
        (*rv)[i].topic = (char *)(r[i].topic ? r[i].topic : "");
        (*rv)[i].partition = r[i].partition;
        (*rv)[i].first_offset = r[i].first;
        (*rv)[i].last_offset = r[i].last;
        (*rp)[i] = &(*rv)[i];
    }
    return 0;
}

int pr_trainer_client_read_token(const char *path, char *out, size_t n, char *errstr, size_t es)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return pr_seterr(errstr, es, PR_EIO, "token file %s: %s", path, strerror(errno));
    char line[4096];
    int err = pr_seterr(errstr, es, PR_EINVAL, "token file %s holds no token", path);
    while (fgets(line, sizeof(line), f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t l = strlen(p);
        while (l && (p[l - 1] == '\n' || p[l - 1] == '\r' || p[l - 1] == ' ' || p[l - 1] == '\t'))
            p[--l] = '\0';
        if (!l || p[0] == '#')
            continue;
        if (l >= n) {
            err = pr_seterr(errstr, es, PR_EINVAL, "token file %s: token too long", path);
            break;
        }
        memcpy(out, p, l + 1);
        err = 0;
        break;
    }
    fclose(f);
    return err;
}

/* A TCP connection to host:port before `deadline`: the socket, or a negative
 * error naming `connect`. */
static int pr__tc_connect(const char *connect_to, const char *host, uint16_t port, int64_t deadline,
                          char *errstr, size_t es)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int gai = getaddrinfo(host[0] ? host : "127.0.0.1", portstr, &hints, &ai);
    if (gai)
        return pr_seterr(errstr, es, PR_EIO, "%s: %s", connect_to, gai_strerror(gai));
    int fd = -1, last = ECONNREFUSED;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
            last = errno;
            close(fd);
            fd = -1;
            continue;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (pr__wait_fd(fd, POLLOUT, deadline) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
            last = soerr ? soerr : ETIMEDOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return pr_seterr(errstr, es, PR_EIO, "cannot connect to %s: %s", connect_to,
                         strerror(last));
    return fd;
}

/* "unix:PATH": a connected Unix domain socket, or a negative error. */
static int pr__tc_connect_unix(const char *connect_to, char *errstr, size_t es)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *path = connect_to + 5;
    if (!*path || strlen(path) >= sizeof(sa.sun_path))
        return pr_seterr(errstr, es, PR_EINVAL, "--connect: '%s': bad socket path", connect_to);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return pr_seterr(errstr, es, PR_EIO, "cannot connect to %s: %s", connect_to, strerror(e));
    }
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    return fd;
}

/* Send Subscribe (with the resume ranges). */
static int pr__tc_subscribe(pr_trainer_client *c, const pr_trainer_client_opts *opts, char *errstr,
                            size_t es)
{
    char idbuf[64];
    snprintf(idbuf, sizeof(idbuf), "piperec-%d", (int)getpid());
    Piperec__Trainer__V1__Subscribe sub = PIPEREC__TRAINER__V1__SUBSCRIBE__INIT;
    sub.protocol_version = PR_TRAINER_PROTOCOL_VERSION;
    sub.pipeline = (char *)opts->pipeline;
    sub.credits = opts->credits ? opts->credits : 8;
    sub.client_id = (char *)(opts->client_id ? opts->client_id : idbuf);
    sub.token = (char *)(opts->token ? opts->token : "");
    Piperec__V1__OffsetRange *rv = NULL, **rp = NULL;
    int err = pr__ranges_build(opts->resume, opts->n_resume, &rv, &rp, errstr, es);
    if (err < 0)
        return err;
    sub.n_resume = opts->n_resume;
    sub.resume = rp;
    sub.layout = opts->raw_layout ? 1 : 0;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE;
    f.subscribe = &sub;
    err = pr__send_frame(c, &f);
    free(rv);
    free(rp);
    if (err < 0 && c->ssl) {
        /* The server may have refused us with a TLS alert (mutual TLS without
         * an accepted certificate): read it for a useful, final error. */
        uint32_t n;
        int rerr = pr__read_frame(c, pr__now_ms() + 1000, &n, errstr, es);
        if (rerr == PR_ESTATE)
            return rerr;
    }
    if (err < 0)
        return pr_seterr(errstr, es, err, "cannot send Subscribe to %s", opts->connect);
    return 0;
}

/* Wait for SubscribeOk (skipping early Pings) and keep what it says. */
static int pr__tc_await_ok(pr_trainer_client *c, const pr_trainer_client_opts *opts,
                           int64_t deadline, char *errstr, size_t es)
{
    int err;
    for (;;) {
        uint32_t n;
        err = pr__read_frame(c, deadline, &n, errstr, es);
        if (err == PR_ETIMEDOUT)
            err = pr_seterr(errstr, es, PR_ETIMEDOUT, "no SubscribeOk from %s in time",
                            opts->connect);
        if (err < 0)
            break;
        const uint8_t *bp;
        size_t bl;
        Piperec__Trainer__V1__Frame *r = NULL;
        c->consumed = 4 + (size_t)n;
        if (pr__frame_parse(c->buf + 4, n, &bp, &bl, &r) < 0 || !r) {
            err = pr_seterr(errstr, es, PR_EBADREC, "unexpected answer to Subscribe");
            break;
        }
        if (r->msg_case == PIPEREC__TRAINER__V1__FRAME__MSG_ERROR) {
            err = pr__server_error(c, r, errstr, es);
            pr__frame_free(r);
            break;
        }
        if (r->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK) {
            pr__frame_free(r);
            continue; /* e.g. an early Ping */
        }
        Piperec__Trainer__V1__SubscribeOk *ok = r->subscribe_ok;
        pr_trainer_info *in = &c->info;
        snprintf(in->pipeline, sizeof(in->pipeline), "%s", ok->pipeline);
        in->protocol_version = ok->protocol_version;
        in->n_dense = ok->n_dense;
        in->n_sparse = ok->n_sparse;
        in->sparse_width = ok->sparse_width;
        in->credits = ok->credits;
        in->layout = ok->layout;
        if (ok->n_dense_names == ok->n_dense)
            in->dense_names = pr__names_copy(ok->dense_names, ok->n_dense_names);
        if (ok->n_sparse_names == ok->n_sparse)
            in->sparse_names = pr__names_copy(ok->sparse_names, ok->n_sparse_names);
        pr__frame_free(r);
        return 0;
    }
    return err;
}

int pr_trainer_client_open(const pr_trainer_client_opts *opts, pr_trainer_client **out,
                           char *errstr, size_t es)
{
    *out = NULL;
    char host[256];
    uint16_t port = 0;
    bool local = opts->connect && !strncmp(opts->connect, "unix:", 5);
    if (!opts->connect ||
        (!local && (pr_hostport_parse(opts->connect, host, sizeof(host), &port) < 0 || !port)))
        return pr_seterr(errstr, es, PR_EINVAL, "--connect: '%s' is not host:port or unix:PATH",
                         opts->connect ? opts->connect : "");
    if (local && (opts->tls || opts->tls_ca || opts->tls_cert || opts->tls_key))
        return pr_seterr(errstr, es, PR_EINVAL,
                         "--connect %s: TLS does not apply to a Unix domain socket", opts->connect);
    if (!opts->pipeline || !*opts->pipeline)
        return pr_seterr(errstr, es, PR_EINVAL, "a pipeline name is required");
    int64_t deadline = pr__now_ms() + (opts->timeout_ms > 0 ? opts->timeout_ms : 10000);
    int fd = local ? pr__tc_connect_unix(opts->connect, errstr, es)
                   : pr__tc_connect(opts->connect, host, port, deadline, errstr, es);
    if (fd < 0)
        return fd;
    int one = 1;
    if (!local)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    pr_trainer_client *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return pr_seterr(errstr, es, PR_ENOMEM, "out of memory");
    }
    c->fd = fd;
    if (opts->tls || opts->tls_ca || opts->tls_cert || opts->tls_key) {
        int terr = pr__tls_connect(c, opts, host, deadline, errstr, es);
        if (terr < 0) {
            pr_trainer_client_close(c);
            return terr;
        }
    }
    int err = pr__tc_subscribe(c, opts, errstr, es);
    if (!err)
        err = pr__tc_await_ok(c, opts, deadline, errstr, es);
    if (err < 0) {
        pr_trainer_client_close(c);
        return err;
    }
    *out = c;
    return 0;
}

const pr_trainer_info *pr_trainer_client_info(const pr_trainer_client *c)
{
    return &c->info;
}

/* Answer a server Ping with the same nonce. */
static int pr__answer_ping(pr_trainer_client *c, const Piperec__Trainer__V1__Ping *ping)
{
    Piperec__Trainer__V1__Pong pong = PIPEREC__TRAINER__V1__PONG__INIT;
    pong.nonce = ping->nonce;
    pong.time_ms = ping->time_ms;
    Piperec__Trainer__V1__Frame r = PIPEREC__TRAINER__V1__FRAME__INIT;
    r.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_PONG;
    r.pong = &pong;
    return pr__send_frame(c, &r);
}

/* Cut the frame of `size` bytes at `at` out of the buffer. */
static void pr__cut_frame(pr_trainer_client *c, size_t at, size_t size)
{
    memmove(c->buf + at, c->buf + at + size, c->len - at - size);
    c->len -= size;
}

/* Append field `num` (bytes) to a TrainingBatch being rebuilt at *p. */
static uint8_t *pr__put_bytes(uint8_t *p, uint32_t num, const void *data, size_t len)
{
    p = pr_varint_put(p, ((uint64_t)num << 3) | 2);
    p = pr_varint_put(p, len);
    memcpy(p, data, len);
    return p + len;
}

/* A Criteo batch's raw sections back in TrainingBatch form: labels int32
 * [rows], dense float32 [n_dense][rows], sparse [n_sparse][rows] of the
 * pipeline's sparse width (4 or 8). Returns the end of what was written,
 * NULL when a value does not fit int32. */
static uint8_t *pr__raw_criteo_fields(uint8_t *p, const pr__raw_view *rv, uint32_t width)
{
    size_t rows = rv->rows, nd = rv->n_dense, nk = rv->n_keys;
    const float *lab = (const float *)rv->sec[PR__RAW_LABELS];
    p = pr_varint_put(p, (7u << 3) | 2);
    p = pr_varint_put(p, rows * 4);
    for (size_t r = 0; r < rows; r++) {
        int32_t l = (int32_t)lab[r * rv->n_labels];
        memcpy(p, &l, 4), p += 4;
    }
    const float *dense = (const float *)rv->sec[PR__RAW_DENSE];
    p = pr_varint_put(p, (8u << 3) | 2);
    p = pr_varint_put(p, rows * nd * 4);
    for (size_t col = 0; col < nd; col++)
        for (size_t r = 0; r < rows; r++)
            memcpy(p, &dense[r * nd + col], 4), p += 4;
    bool v32 = rv->flags & PR__RAW_F_VALUES32;
    const uint8_t *vals = rv->sec[PR__RAW_VALUES];
    p = pr_varint_put(p, (9u << 3) | 2);
    p = pr_varint_put(p, rows * nk * width);
    for (size_t i = 0; i < rows * nk; i++) {
        int64_t x;
        if (v32) {
            int32_t y;
            memcpy(&y, vals + 4 * i, 4);
            x = y;
        } else {
            memcpy(&x, vals + 8 * i, 8);
        }
        if (width == 8) {
            memcpy(p, &x, 8), p += 8;
        } else {
            if (x < INT32_MIN || x > INT32_MAX)
                return NULL;
            int32_t y = (int32_t)x;
            memcpy(p, &y, 4), p += 4;
        }
    }
    return p;
}

/* A raw layout frame (Frame.raw_batch; docs/trainer-protocol.md) checked
 * (pr__raw_parse: header, section sizes against the shape) and turned back
 * into the TrainingBatch it carries: the metadata section followed by the
 * tensor fields, decoded into *v by pr_batch_decode, which checks the
 * shapes again. The view points into c->rebuilt (valid until the next
 * call). A value that does not fit the pipeline's int32 width, a Criteo
 * length other than 1, or a header that disagrees with the metadata are
 * PR_EBADREC. */
static int pr__raw_to_view(pr_trainer_client *c, const uint8_t *frame, size_t n, pr_batch_view *v,
                           char *errstr, size_t es)
{
    uint64_t plen;
    size_t vn = pr_varint_get(frame + 1, frame + n, &plen);
    if (!vn || plen != n - 1 - vn)
        return pr_seterr(errstr, es, PR_EBADREC, "raw batch frame: bad payload length");
    const uint8_t *pay = frame + 1 + vn;
    pr__raw_view rv;
    if (pr__raw_parse(pay, (size_t)plen, &rv) < 0)
        return pr_seterr(errstr, es, PR_EBADREC, "raw batch does not parse (header or sections)");
    bool jagged = rv.flags & PR__RAW_F_JAGGED;
    size_t need = rv.sec_len[PR__RAW_META] + 64;
    if (jagged)
        need += rv.sec_len[PR__RAW_DENSE] + rv.sec_len[PR__RAW_LABELS] +
                rv.sec_len[PR__RAW_LENGTHS] + rv.sec_len[PR__RAW_VALUES] +
                rv.sec_len[PR__RAW_WEIGHTS];
    else
        need += (size_t)rv.rows * (4 + 4 * rv.n_dense + 8 * rv.n_keys);
    if (need > c->rebuilt_cap) {
        uint8_t *nb = realloc(c->rebuilt, need);
        if (!nb)
            return pr_seterr(errstr, es, PR_ENOMEM, "out of memory for a raw batch");
        c->rebuilt = nb;
        c->rebuilt_cap = need;
    }
    /* The metadata, then the tensors. A Criteo batch's sparse width is the
     * pipeline's (SubscribeOk); the decoder checks it against the metadata's. */
    uint8_t *p = c->rebuilt;
    memcpy(p, rv.sec[PR__RAW_META], rv.sec_len[PR__RAW_META]);
    p += rv.sec_len[PR__RAW_META];
    uint32_t width = c->info.sparse_width == 8 ? 8 : 4;
    if (!jagged && rv.sec_len[PR__RAW_LENGTHS]) {
        const uint8_t *lp = rv.sec[PR__RAW_LENGTHS];
        for (size_t i = 0; i < rv.sec_len[PR__RAW_LENGTHS]; i += 4) {
            int32_t l;
            memcpy(&l, lp + i, 4);
            if (l != 1)
                return pr_seterr(errstr, es, PR_EBADREC,
                                 "raw batch: a Criteo batch with a length other than 1");
        }
    }
    int err;
    if (jagged) {
        p = pr__put_bytes(p, 24, rv.sec[PR__RAW_VALUES], rv.sec_len[PR__RAW_VALUES]);
        p = pr__put_bytes(p, 25, rv.sec[PR__RAW_LENGTHS], rv.sec_len[PR__RAW_LENGTHS]);
        p = pr__put_bytes(p, 27, rv.sec[PR__RAW_LABELS], rv.sec_len[PR__RAW_LABELS]);
        p = pr__put_bytes(p, 28, rv.sec[PR__RAW_DENSE], rv.sec_len[PR__RAW_DENSE]);
        if (rv.sec_len[PR__RAW_WEIGHTS])
            p = pr__put_bytes(p, 31, rv.sec[PR__RAW_WEIGHTS], rv.sec_len[PR__RAW_WEIGHTS]);
    } else if (!(p = pr__raw_criteo_fields(p, &rv, width))) {
        return pr_seterr(errstr, es, PR_EBADREC, "raw batch: a value does not fit int32");
    }
    if ((err = pr_batch_decode(c->rebuilt, (size_t)(p - c->rebuilt), v, errstr, es)) < 0)
        return err;
    if (v->seq != rv.seq || v->epoch != rv.epoch || v->rows != rv.rows) {
        pr_batch_view_fini(v);
        return pr_seterr(errstr, es, PR_EBADREC, "raw batch: header and metadata disagree");
    }
    return 0;
}

int pr_trainer_client_next(pr_trainer_client *c, pr_batch_view *v, int timeout_ms, char *errstr,
                           size_t es)
{
    int64_t deadline = timeout_ms < 0 ? -1 : pr__now_ms() + timeout_ms;
    for (;;) {
        uint32_t n;
        int err = pr__read_frame(c, deadline, &n, errstr, es);
        if (err == PR_ETIMEDOUT)
            return 0;
        if (err < 0)
            return err;
        c->consumed = 4 + (size_t)n;
        const uint8_t *bp;
        size_t bl;
        Piperec__Trainer__V1__Frame *f = NULL;
        if (n && c->buf[4] == ((PR__FRAME_FIELD_RAW << 3) | 2)) {
            err = pr__raw_to_view(c, c->buf + 4, n, v, errstr, es);
            return err < 0 ? err : 1;
        }
        if (pr__frame_parse(c->buf + 4, n, &bp, &bl, &f) < 0)
            return pr_seterr(errstr, es, PR_EBADREC, "frame does not parse");
        if (bp) {
            err = pr_batch_decode(bp, bl, v, errstr, es);
            return err < 0 ? err : 1;
        }
        switch (f->msg_case) {
        case PIPEREC__TRAINER__V1__FRAME__MSG_PING: {
            err = pr__answer_ping(c, f->ping);
            pr__frame_free(f);
            if (err < 0)
                return pr_seterr(errstr, es, PR_EIO, "cannot answer a ping");
            continue;
        }
        case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
            err = pr__server_error(c, f, errstr, es);
            pr__frame_free(f);
            return err;
        default:
            pr__frame_free(f); /* Pong or newer messages: ignored */
            continue;
        }
    }
}

int pr_trainer_client_ack(pr_trainer_client *c, uint64_t seq)
{
    Piperec__Trainer__V1__Ack ack = PIPEREC__TRAINER__V1__ACK__INIT;
    ack.n_sequences = 1;
    ack.sequences = &seq;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ACK;
    f.ack = &ack;
    return pr__send_frame(c, &f);
}

int pr_trainer_client_checkpoint(pr_trainer_client *c, const pr_trainer_range *ranges, size_t n,
                                 uint64_t id, int timeout_ms, uint32_t *released, char *errstr,
                                 size_t es)
{
    Piperec__V1__OffsetRange *rv, **rp;
    int err = pr__ranges_build(ranges, n, &rv, &rp, errstr, es);
    if (err < 0)
        return err;
    Piperec__Trainer__V1__CheckpointCommit cc = PIPEREC__TRAINER__V1__CHECKPOINT_COMMIT__INIT;
    cc.n_ranges = n;
    cc.ranges = rp;
    cc.id = id;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_CHECKPOINT_COMMIT;
    f.checkpoint_commit = &cc;
    err = pr__send_frame(c, &f);
    free(rv);
    free(rp);
    if (err < 0)
        return pr_seterr(errstr, es, PR_EIO, "cannot send CheckpointCommit %llu",
                         (unsigned long long)id);
    if (timeout_ms == 0)
        return 0;
    int64_t deadline = timeout_ms < 0 ? -1 : pr__now_ms() + timeout_ms;
    pr__drop_consumed(c);
    size_t at = 0; /* frames before `at` are batches left for _next() */
    for (;;) {
        uint32_t fn;
        err = pr__fill_frame_at(c, at, deadline, &fn, errstr, es);
        if (err == PR_ETIMEDOUT)
            return 0;
        if (err < 0)
            return err;
        const uint8_t *bp;
        size_t bl;
        Piperec__Trainer__V1__Frame *r = NULL;
        if (pr__frame_parse(c->buf + at + 4, fn, &bp, &bl, &r) < 0)
            return pr_seterr(errstr, es, PR_EBADREC, "frame does not parse");
        if (bp) { /* a batch: stays buffered, in order */
            at += 4 + (size_t)fn;
            continue;
        }
        int done = 0;
        switch (r->msg_case) {
        case PIPEREC__TRAINER__V1__FRAME__MSG_PING:
            if (pr__answer_ping(c, r->ping) < 0)
                done = pr_seterr(errstr, es, PR_EIO, "cannot answer a ping");
            break;
        case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
            done = pr__server_error(c, r, errstr, es);
            break;
        case PIPEREC__TRAINER__V1__FRAME__MSG_CHECKPOINT_OK:
            if (r->checkpoint_ok->id == id) {
                if (released)
                    *released = r->checkpoint_ok->released;
                done = 1;
            } /* else: the answer to an earlier commit that was not waited for */
            break;
        default:
            break; /* Pong or newer messages: ignored */
        }
        pr__frame_free(r);
        if (done < 0)
            return done; /* the Error frame stays: _next() reports it too */
        pr__cut_frame(c, at, 4 + (size_t)fn);
        if (done)
            return 1;
    }
}

void pr_trainer_client_close(pr_trainer_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0) {
        /* Graceful close: closing a socket with unread data in its receive
         * queue (pings, batches beyond --count) makes the kernel send RST, and
         * the server may then lose acks still queued on its side. Half-close,
         * drain until the server closes (bounded), then close. */
        /* (No TLS close_notify: the server treats a plain EOF as the end.) */
        shutdown(c->fd, SHUT_WR);
        char sink[4096];
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
        for (int spins = 0; spins < 100 && poll(&pfd, 1, 20) > 0; spins++)
            if (recv(c->fd, sink, sizeof(sink), 0) <= 0)
                break;
        close(c->fd);
    }
    for (uint32_t i = 0; c->info.dense_names && i < c->info.n_dense; i++)
        free(c->info.dense_names[i]);
    for (uint32_t i = 0; c->info.sparse_names && i < c->info.n_sparse; i++)
        free(c->info.sparse_names[i]);
    free(c->info.dense_names);
    free(c->info.sparse_names);
    SSL_free(c->ssl);
    SSL_CTX_free(c->ctx);
    free(c->buf);
    free(c->rebuilt);
    free(c);
}
