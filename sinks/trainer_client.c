/*
 * trainer_client.c — the reference trainer-stream client (contract:
 * pr_trainer_client.h; protocol: docs/trainer-protocol.md).
 *
 * One non-blocking socket driven with poll(2) timeouts, one receive buffer.
 * A frame is parsed in place: a batch comes back as a zero-copy view into
 * the buffer, which stays valid until the next call (the consumed frame is
 * dropped from the buffer at the start of that call). Server pings are
 * answered while waiting for batches.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pr_hostport.h"
#include "trainer_wire.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

struct pr_trainer_client {
    int fd;
    pr_trainer_info info;
    uint8_t *buf;
    size_t len, cap;
    size_t consumed; /* bytes of the last returned frame, dropped at the next call */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int tmo = -1;
        if (deadline >= 0) {
            int64_t left = deadline - now_ms();
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

static int write_all(pr_trainer_client *c, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (wait_fd(c->fd, POLLOUT, now_ms() + 30000) < 0)
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

static int send_frame(pr_trainer_client *c, const Piperec__Trainer__V1__Frame *f)
{
    uint8_t *buf;
    size_t len;
    int err = pr__frame_pack(f, &buf, &len);
    if (err < 0)
        return err;
    err = write_all(c, buf, len);
    free(buf);
    return err;
}

/* Make sure a whole frame is buffered; returns its body length via *n. */
static int read_frame(pr_trainer_client *c, int64_t deadline, uint32_t *n, char *errstr, size_t es)
{
    if (c->consumed) {
        memmove(c->buf, c->buf + c->consumed, c->len - c->consumed);
        c->len -= c->consumed;
        c->consumed = 0;
    }
    for (;;) {
        if (c->len >= 4) {
            memcpy(n, c->buf, 4);
            if (*n > PR__FRAME_MAX)
                return pr_seterr(errstr, es, PR_EBADREC, "frame of %u bytes is too large", *n);
            if (c->len - 4 >= *n)
                return 0;
        }
        size_t need = c->len >= 4 ? 4 + (size_t)*n : 65536;
        if (need < 65536)
            need = 65536;
        if (c->cap < need) {
            uint8_t *nb = realloc(c->buf, need);
            if (!nb)
                return pr_seterr(errstr, es, PR_ENOMEM, "out of memory for a %zu-byte frame", need);
            c->buf = nb;
            c->cap = need;
        }
        ssize_t r = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
        if (r > 0) {
            c->len += (size_t)r;
            continue;
        }
        if (r == 0)
            return pr_seterr(errstr, es, PR_EIO, "server closed the connection");
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return pr_seterr(errstr, es, PR_EIO, "recv: %s", strerror(errno));
        int rc = wait_fd(c->fd, POLLIN, deadline);
        if (rc == PR_ETIMEDOUT)
            return PR_ETIMEDOUT;
        if (rc < 0)
            return pr_seterr(errstr, es, PR_EIO, "poll: %s", strerror(errno));
    }
}

static int server_error(const Piperec__Trainer__V1__Frame *f, char *errstr, size_t es)
{
    return pr_seterr(errstr, es, PR_ESTATE, "server error %d: %s", (int)f->error->code,
                     f->error->message ? f->error->message : "");
}

static char **names_copy(char **src, size_t n)
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

int pr_trainer_client_open(const pr_trainer_client_opts *opts, pr_trainer_client **out,
                           char *errstr, size_t es)
{
    *out = NULL;
    char host[256];
    uint16_t port;
    if (!opts->connect || pr_hostport_parse(opts->connect, host, sizeof(host), &port) < 0 || !port)
        return pr_seterr(errstr, es, PR_EINVAL, "--connect: '%s' is not host:port",
                         opts->connect ? opts->connect : "");
    if (!opts->pipeline || !*opts->pipeline)
        return pr_seterr(errstr, es, PR_EINVAL, "a pipeline name is required");
    int64_t deadline = now_ms() + (opts->timeout_ms > 0 ? opts->timeout_ms : 10000);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int gai = getaddrinfo(host[0] ? host : "127.0.0.1", portstr, &hints, &ai);
    if (gai)
        return pr_seterr(errstr, es, PR_EIO, "%s: %s", opts->connect, gai_strerror(gai));
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
        if (wait_fd(fd, POLLOUT, deadline) < 0 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
            last = soerr ? soerr : ETIMEDOUT;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return pr_seterr(errstr, es, PR_EIO, "cannot connect to %s: %s", opts->connect,
                         strerror(last));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

    pr_trainer_client *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return pr_seterr(errstr, es, PR_ENOMEM, "out of memory");
    }
    c->fd = fd;
    char idbuf[64];
    snprintf(idbuf, sizeof(idbuf), "piperec-%d", (int)getpid());
    Piperec__Trainer__V1__Subscribe sub = PIPEREC__TRAINER__V1__SUBSCRIBE__INIT;
    sub.protocol_version = PR_TRAINER_PROTOCOL_VERSION;
    sub.pipeline = (char *)opts->pipeline;
    sub.credits = opts->credits ? opts->credits : 8;
    sub.client_id = (char *)(opts->client_id ? opts->client_id : idbuf);
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE;
    f.subscribe = &sub;
    int err = send_frame(c, &f);
    if (err < 0) {
        pr_trainer_client_close(c);
        return pr_seterr(errstr, es, err, "cannot send Subscribe to %s", opts->connect);
    }
    for (;;) {
        uint32_t n;
        err = read_frame(c, deadline, &n, errstr, es);
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
            err = server_error(r, errstr, es);
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
        if (ok->n_dense_names == ok->n_dense)
            in->dense_names = names_copy(ok->dense_names, ok->n_dense_names);
        if (ok->n_sparse_names == ok->n_sparse)
            in->sparse_names = names_copy(ok->sparse_names, ok->n_sparse_names);
        pr__frame_free(r);
        *out = c;
        return 0;
    }
    pr_trainer_client_close(c);
    return err;
}

const pr_trainer_info *pr_trainer_client_info(const pr_trainer_client *c)
{
    return &c->info;
}

int pr_trainer_client_next(pr_trainer_client *c, pr_batch_view *v, int timeout_ms, char *errstr,
                           size_t es)
{
    int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
    for (;;) {
        uint32_t n;
        int err = read_frame(c, deadline, &n, errstr, es);
        if (err == PR_ETIMEDOUT)
            return 0;
        if (err < 0)
            return err;
        c->consumed = 4 + (size_t)n;
        const uint8_t *bp;
        size_t bl;
        Piperec__Trainer__V1__Frame *f = NULL;
        if (pr__frame_parse(c->buf + 4, n, &bp, &bl, &f) < 0)
            return pr_seterr(errstr, es, PR_EBADREC, "frame does not parse");
        if (bp) {
            err = pr_batch_decode(bp, bl, v, errstr, es);
            return err < 0 ? err : 1;
        }
        switch (f->msg_case) {
        case PIPEREC__TRAINER__V1__FRAME__MSG_PING: {
            Piperec__Trainer__V1__Pong pong = PIPEREC__TRAINER__V1__PONG__INIT;
            pong.nonce = f->ping->nonce;
            pong.time_ms = f->ping->time_ms;
            Piperec__Trainer__V1__Frame r = PIPEREC__TRAINER__V1__FRAME__INIT;
            r.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_PONG;
            r.pong = &pong;
            err = send_frame(c, &r);
            pr__frame_free(f);
            if (err < 0)
                return pr_seterr(errstr, es, PR_EIO, "cannot answer a ping");
            continue;
        }
        case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
            err = server_error(f, errstr, es);
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
    return send_frame(c, &f);
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
    free(c->buf);
    free(c);
}
