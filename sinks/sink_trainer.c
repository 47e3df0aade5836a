/*
 * sink_trainer.c — the trainer stream sink: a TCP server that deals batches
 * out to subscribed trainers (protocol: docs/trainer-protocol.md).
 *
 * Shape: the pipeline thread only touches a locked queue (send() appends,
 * poll() drains acknowledged sequences); one I/O thread owns every socket
 * and runs a poll(2) loop over the listening socket, a wake-up pipe and the
 * clients, all non-blocking. Each batch is given to exactly one trainer
 * with free credit (round robin), and is kept, referenced, in that trainer's
 * in-flight list until acked. When a trainer goes away (EOF, socket error,
 * protocol error, ack timeout, keepalive silence) its in-flight batches go
 * back to the front of the queue, in sequence order, for the next trainer
 * with credit. So with no failures every batch is delivered exactly once,
 * and with failures at least once. Batches wait in the queue while no
 * trainer is connected; the batcher's in-flight byte accounting turns that
 * into backpressure upstream.
 *
 * Batch frames are written with sendmsg() straight from the batch's encoded
 * protobuf (header + b->pb), no extra copy (with TLS: SSL_write of the same
 * two pieces). A trainer that subscribed with the raw tensor layout gets
 * each batch built for it in that layout (trainer_wire.c) when the batch is
 * dealt to it: one pass over the tensors, paid only by such trainers.
 *
 * The port faces the network, so every resource a peer can make it hold is
 * bounded (docs/operations.md "Security"): connections (max_connections;
 * beyond it, and when accept() hits EMFILE/ENFILE, connections are accepted
 * and closed at once through a spare descriptor, so the listening socket
 * never stays readable and the loop never spins), time (handshake_timeout_ms
 * until SubscribeOk, idle_timeout_ms of silence, a closing peer that does not
 * read gets CLOSE_LINGER_NS), frame size (max_frame_bytes) and receive memory
 * (each connection owns RX_BASE bytes; growth for a large or partial frame
 * comes out of one shared max_receive_buffer_bytes pool, and a connection
 * that cannot get its share is dropped). Optional TLS (OpenSSL, mutual TLS
 * with a CA file; certificate, key and CA re-read when a file changes, for
 * connections accepted after) and bearer tokens (a file re-read when it
 * changes) guard who may subscribe. Every refusal is counted by reason
 * (pr_sink_stats) and logged, at most LOG_BURST lines per LOG_WINDOW_NS per
 * kind (descriptor exhaustion: one line per window).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "pr_clock.h"
#include "pr_grow.h"
#include "pr_hostport.h"
#include "trainer_wire.h"
#include "pr_log.h"
#include "pr_sink.h"
#include "sink_acks.h"
#include "trainer_ckpt.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

#define NS_PER_MS        1000000LL
#define RX_BASE          4096u /* receive buffer every connection may hold outside the shared pool */
#define RX_ROUNDS        16    /* reads per connection per loop turn (fairness) */
#define ACCEPTS_PER_TURN 256
#define CLOSE_LINGER_NS  (2000LL * NS_PER_MS) /* a closing peer that does not read */
#define ACCEPT_PAUSE_NS  (100LL * NS_PER_MS)  /* no spare fd: stop polling the listener */
#define UNIX_SNDBUF      (4 << 20)            /* a Unix socket's send buffer: whole raw batches */
#define LOG_WINDOW_NS    (10000LL * NS_PER_MS)
#define LOG_BURST        5
#define TOKEN_FILE_MAX   (64 * 1024)
#ifndef PR_VERSION_STR
#define PR_VERSION_STR "piperec/0.1"
#endif

typedef struct out_item {
    uint8_t hdr[16];
    size_t hlen;
    const uint8_t *body;
    size_t blen;
    pr_batch *ref;  /* batch frames: body = ref->pb */
    uint8_t *owned; /* control frames: the whole frame, in body */
    size_t done;
    struct out_item *next;
} out_item;

typedef struct inflight {
    uint64_t seq;
    pr_batch *b;
    int64_t sent_ns;
} inflight;

typedef struct tclient {
    int fd;
    uint64_t id;
    char client_id[64];
    char peer[64]; /* "address:port", for logs */
    bool subscribed;
    bool closing; /* stop reading, close once the out queue is written */
    bool dead;
    SSL *ssl;            /* NULL: plain TCP */
    bool tls_ready;      /* handshake done */
    bool tls_peeked;     /* first byte looked at (a TLS record or not) */
    bool tls_want_write; /* the last SSL call needs the socket writable */
    bool rx_more;        /* stopped reading with input left: read again without waiting */
    uint8_t layout;      /* PR__LAYOUT_PB or PR__LAYOUT_RAW (Subscribe.layout) */
    bool kjt_offsets;    /* raw layout: send the offsets section */
    bool compact;        /* raw layout: Subscribe.compact */
    int64_t accepted_ns;
    int64_t closing_ns;
    uint32_t window;
    inflight *fl;
    size_t n_fl, cap_fl;
    /* checkpoint delivery: acked (trained on), not yet in a committed checkpoint */
    inflight *tr;
    size_t n_tr, cap_tr;
    uint8_t *rbuf;
    size_t rlen, rcap;
    out_item *oq_head, *oq_tail;
    int64_t last_rx_ns;
    int64_t last_ping_ns;
    struct tclient *next;
} tclient;

typedef struct trainer_sink {
    pr_sink base;
    char pipeline[PR_NAME_MAX];
    uint16_t n_dense, n_sparse;
    uint8_t sparse_width;
    char **dense_names;
    char **sparse_names;
    const pr_clock *clock;
    uint32_t max_window;
    int64_t ack_timeout_ns;
    int64_t keepalive_ns;
    uint32_t max_queued;
    uint32_t max_conns;
    int64_t handshake_ns;
    int64_t idle_ns;
    uint32_t max_frame;
    uint64_t rx_pool; /* max_receive_buffer_bytes */
    SSL_CTX *ssl_ctx; /* NULL: plain TCP; replaced by pr__tls_refresh (I/O thread) */
    bool mtls;
    pr_trainer_tls_cfg tls;    /* copies of the paths, for tls_refresh */
    struct stat tls_st[3];     /* cert, key, CA files as of the context in use */
    struct stat tls_bad_st[3]; /* ... as of the last set that failed to load */
    char *token_path;          /* NULL: no token auth */
    bool ckpt;                 /* sinks.trainer.delivery: checkpoint */

    int lfd;
    int ufd;         /* sinks.trainer.unix_path listener; -1: none */
    char *unix_path; /* owned; unlinked at free */
    int wake[2];
    int port;
    pthread_t th;
    bool started;
    int stop;

    pthread_mutex_t mu;
    /* under mu */
    pr_batch **queue; /* not yet given to a trainer, sorted by seq */
    size_t qlen, qcap;
    pr__acks acked;      /* under mu */
    pr__posset resume;   /* under mu: rows durable checkpoints hold (checkpoint delivery) */
    bool resume_known;   /* under mu: a trainer subscribed (its resume position is in) */
    uint64_t n_assigned; /* batches in trainers' in-flight lists */
    pr_sink_stats st;
    uint64_t bytes_sent; /* atomic, outside mu: updated on every write */

    uint64_t rx_bytes;   /* atomic: bytes held by receive buffers (pr_sink_buffered_bytes) */
    uint64_t io_wakeups; /* atomic */

    /* I/O thread only */
    tclient *clients;
    size_t n_conns;
    uint64_t rx_pool_used;       /* receive buffer bytes beyond RX_BASE, over all connections */
    int spare_fd;                /* /dev/null, given up to accept-and-close at EMFILE */
    int64_t accept_paused_until; /* real monotonic ns; 0 = not paused */
    uint64_t next_client_id;
    uint64_t rr;
    struct loglimit {
        bool open;
        int64_t win_ns;
        unsigned n;
        uint64_t suppressed;
    } logs[5]; /* LOG_REFUSE, LOG_DROP, LOG_AUTH, LOG_TOKEN, LOG_FD */
    /* token auth: SHA-256 of each accepted token, and what the file looked like */
    uint8_t (*tokens)[32];
    size_t n_tokens;
    struct stat token_st;
} trainer_sink;

enum { LOG_REFUSE, LOG_DROP, LOG_AUTH, LOG_TOKEN, LOG_FD };

/* ---------------------------------------------------------------- queue (under mu) */

static int pr__queue_insert(trainer_sink *t, pr_batch *b)
{
    if (pr_grow((void **)&t->queue, &t->qcap, t->qlen + 1, sizeof(*t->queue)) < 0)
        return PR_ENOMEM;
    size_t i = t->qlen;
    while (i > 0 && t->queue[i - 1]->seq > b->seq) {
        t->queue[i] = t->queue[i - 1];
        i--;
    }
    t->queue[i] = b;
    t->qlen++;
    return 0;
}

static void pr__wake(trainer_sink *t)
{
    char c = 1;
    ssize_t r = write(t->wake[1], &c, 1);
    (void)r; /* EAGAIN: a wake-up is already pending */
}

/* ---------------------------------------------------------------- limits, counters, logs */

static void pr__count(trainer_sink *t, uint64_t *ctr)
{
    pthread_mutex_lock(&t->mu);
    (*ctr)++;
    pthread_mutex_unlock(&t->mu);
}

/* true: log this event. At most `burst` lines of a kind per LOG_WINDOW_NS;
 * the next window starts by saying how many were left out. */
static bool pr__log_ok(trainer_sink *t, int kind, unsigned burst)
{
    struct loglimit *l = &t->logs[kind];
    int64_t now = pr_clock_mono_ns(t->clock);
    if (!l->open || now - l->win_ns >= LOG_WINDOW_NS) {
        if (l->suppressed)
            pr_warn("trainer sink: %llu more such events in the last %lld s were not logged",
                    (unsigned long long)l->suppressed,
                    (long long)((now - l->win_ns) / 1000000000LL));
        *l = (struct loglimit){.open = true, .win_ns = now};
    }
    if (l->n < burst) {
        l->n++;
        return true;
    }
    l->suppressed++;
    return false;
}

static void pr__peer_name(const struct sockaddr_storage *ss, socklen_t sl, char *out, size_t n)
{
    char h[INET6_ADDRSTRLEN + 1], p[8];
    if (getnameinfo((const struct sockaddr *)ss, sl, h, sizeof(h), p, sizeof(p),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, n, "?");
    else if (ss->ss_family == AF_INET6)
        snprintf(out, n, "[%s]:%s", h, p);
    else
        snprintf(out, n, "%s:%s", h, p);
}

static const char *pr__tls_errstr(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    if (!e)
        snprintf(buf, n, "connection closed");
    else
        ERR_error_string_n(e, buf, n);
    return buf;
}

static void pr__tls_refresh(trainer_sink *t);

/* ---------------------------------------------------------------- token auth */

/* Read the token file: one token per line, blank lines and # comments
 * skipped, surrounding white space trimmed. Only SHA-256 digests are kept,
 * compared in constant time. On failure the previous tokens stay. */
static int pr__tokens_load(trainer_sink *t, char *errstr, size_t es)
{
    FILE *f = fopen(t->token_path, "re");
    if (!f)
        return pr_seterr(errstr, es, PR_EIO, "sinks.trainer.auth.token_file: %s: %s", t->token_path,
                         strerror(errno));
    struct stat st;
    char *buf = NULL;
    size_t len = 0;
    int err = 0;
    if (fstat(fileno(f), &st) < 0 || st.st_size > TOKEN_FILE_MAX ||
        !(buf = malloc(TOKEN_FILE_MAX + 1))) {
        err = pr_seterr(errstr, es, PR_EINVAL,
                        "sinks.trainer.auth.token_file: %s: unreadable or "
                        "larger than %d bytes",
                        t->token_path, TOKEN_FILE_MAX);
        goto out;
    }
    len = fread(buf, 1, TOKEN_FILE_MAX, f);
    buf[len] = '\0';
    uint8_t(*tok)[32] = NULL;
    size_t n = 0;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        while (*line == ' ' || *line == '\t' || *line == '\r')
            line++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == ' ' || line[l - 1] == '\t' || line[l - 1] == '\r'))
            line[--l] = '\0';
        if (!l || line[0] == '#')
            continue;
        void *nt = realloc(tok, (n + 1) * sizeof(*tok));
        if (!nt) {
            free(tok);
            err = pr_seterr(errstr, es, PR_ENOMEM, "out of memory reading the token file");
            goto out;
        }
        tok = nt;
        unsigned dl = 32;
        EVP_Digest(line, l, tok[n++], &dl, EVP_sha256(), NULL);
    }
    OPENSSL_cleanse(buf, len);
    if (!n) {
        err = pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.auth.token_file: %s holds no token",
                        t->token_path);
        goto out;
    }
    free(t->tokens);
    t->tokens = tok;
    t->n_tokens = n;
    t->token_st = st;
out:
    free(buf);
    fclose(f);
    return err;
}

static bool pr__same_file_state(const struct stat *a, const struct stat *b)
{
    return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Called for each Subscribe: re-read the token file when it changed (a new
 * inode, as with Kubernetes secret updates, size, mtime or ctime). */
static void pr__tokens_refresh(trainer_sink *t)
{
    struct stat st;
    char err[512];
    if (stat(t->token_path, &st) < 0) {
        if (pr__log_ok(t, LOG_TOKEN, LOG_BURST))
            pr_warn("trainer sink: token file %s: %s; the tokens read before stay valid",
                    t->token_path, strerror(errno));
        return;
    }
    if (pr__same_file_state(&st, &t->token_st))
        return;
    if (pr__tokens_load(t, err, sizeof(err)) < 0) {
        if (pr__log_ok(t, LOG_TOKEN, LOG_BURST))
            pr_warn("trainer sink: %s; the tokens read before stay valid", err);
        return;
    }
    pr_info("trainer sink: token file %s re-read: %zu token(s)", t->token_path, t->n_tokens);
}

static bool pr__token_ok(const trainer_sink *t, const char *tok)
{
    uint8_t h[32];
    unsigned dl = 32;
    EVP_Digest(tok, strlen(tok), h, &dl, EVP_sha256(), NULL);
    bool ok = false;
    for (size_t i = 0; i < t->n_tokens; i++)
        ok |= CRYPTO_memcmp(h, t->tokens[i], 32) == 0;
    return ok;
}

/* ---------------------------------------------------------------- clients (I/O thread) */

/* recv()/SSL_read(): > 0 bytes, 0 EOF, -1 with errno (EAGAIN: wait). */
static ssize_t pr__conn_recv(tclient *c, void *buf, size_t n)
{
    if (!c->ssl)
        return recv(c->fd, buf, n, 0);
    size_t got = 0;
    c->tls_want_write = false;
    ERR_clear_error();
    int rc = SSL_read_ex(c->ssl, buf, n, &got);
    short want = 0;
    ssize_t r = pr__tls_result(c->ssl, rc, got, &want);
    c->tls_want_write = want == POLLOUT;
    return r;
}

/* sendmsg()/SSL_write() of up to two pieces: bytes written or -1 with errno. */
static ssize_t pr__conn_send(tclient *c, struct iovec *iov, int n)
{
    if (!c->ssl) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        return sendmsg(c->fd, &mh, MSG_NOSIGNAL);
    }
    size_t w = 0;
    c->tls_want_write = false;
    ERR_clear_error();
    int rc = SSL_write_ex(c->ssl, iov[0].iov_base, iov[0].iov_len, &w);
    if (rc == 1)
        return (ssize_t)w;
    switch (SSL_get_error(c->ssl, rc)) {
    case SSL_ERROR_WANT_WRITE:
        c->tls_want_write = true;
        /* fallthrough */
    case SSL_ERROR_WANT_READ:
        errno = EAGAIN;
        return -1;
    default:
        errno = EPIPE;
        return -1;
    }
}

static void pr__oq_push(tclient *c, out_item *it)
{
    it->next = NULL;
    if (c->oq_tail)
        c->oq_tail->next = it;
    else
        c->oq_head = it;
    c->oq_tail = it;
}

static void pr__item_free(out_item *it)
{
    pr_batch_unref(it->ref);
    free(it->owned);
    free(it);
}

static int pr__send_ctrl(tclient *c, const Piperec__Trainer__V1__Frame *f)
{
    out_item *it = calloc(1, sizeof(*it));
    if (!it)
        return PR_ENOMEM;
    size_t len;
    if (pr__frame_pack(f, &it->owned, &len) < 0) {
        free(it);
        return PR_ENOMEM;
    }
    it->body = it->owned;
    it->blen = len;
    pr__oq_push(c, it);
    return 0;
}

static void pr__mark_closing(trainer_sink *t, tclient *c)
{
    if (!c->closing)
        c->closing_ns = pr_clock_mono_ns(t->clock);
    c->closing = true;
}

/* Queue an Error frame and close once it is written. */
static void pr__send_error(trainer_sink *t, tclient *c, Piperec__Trainer__V1__Error__Code code,
                           const char *msg)
{
    if (c->ssl && !c->tls_ready) { /* no channel to say it on */
        c->dead = true;
        return;
    }
    Piperec__Trainer__V1__Error e = PIPEREC__TRAINER__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ERROR;
    f.error = &e;
    (void)pr__send_ctrl(c, &f);
    pr__mark_closing(t, c);
}

/* Close a connection for `reason`: counted, logged (rate-limited), told why. */
static void pr__drop(trainer_sink *t, tclient *c, pr_trainer_drop_reason reason,
                     Piperec__Trainer__V1__Error__Code code, const char *msg)
{
    pr__count(t, &t->st.dropped[reason]);
    if (pr__log_ok(t, LOG_DROP, LOG_BURST))
        pr_warn("trainer sink: closing connection #%llu from %s (client %s): %s [%s]",
                (unsigned long long)c->id, c->peer, c->client_id, msg,
                pr_trainer_drop_reason_name(reason));
    pr__send_error(t, c, code, msg);
}

static void pr__auth_fail(trainer_sink *t, tclient *c, pr_trainer_auth_reason reason,
                          const char *msg)
{
    pr__count(t, &t->st.auth_failures[reason]);
    if (pr__log_ok(t, LOG_AUTH, LOG_BURST))
        pr_warn("trainer sink: authentication failed for connection #%llu from %s (client %s): "
                "%s [%s]",
                (unsigned long long)c->id, c->peer, c->client_id, msg,
                pr_trainer_auth_reason_name(reason));
    pr__send_error(t, c, PIPEREC__TRAINER__V1__ERROR__CODE__UNAUTHENTICATED, msg);
}

/* Best effort, on a socket that is about to be closed: one plain-text Error
 * frame, so a client learns why (too many connections, TLS required). */
static void pr__raw_error(int fd, Piperec__Trainer__V1__Error__Code code, const char *msg)
{
    Piperec__Trainer__V1__Error e = PIPEREC__TRAINER__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ERROR;
    f.error = &e;
    uint8_t *buf;
    size_t len;
    if (pr__frame_pack(&f, &buf, &len) == 0) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        free(buf);
    }
}

/* `plain`: the connection speaks the protocol without TLS whatever the port
 * does (the Unix socket): it can read a plain Error. */
static void pr__refuse(trainer_sink *t, int fd, bool plain, const char *peer,
                       pr_trainer_refuse_reason reason, const char *msg)
{
    pr__count(t, &t->st.refused[reason]);
    if (pr__log_ok(t, LOG_REFUSE, LOG_BURST))
        pr_warn("trainer sink: refused connection from %s: %s [%s]", peer, msg,
                pr_trainer_refuse_reason_name(reason));
    if (fd >= 0) {
        if (!t->ssl_ctx || reason == PR_TRAINER_REFUSE_PLAINTEXT || plain)
            pr__raw_error(fd, PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE, msg);
        close(fd);
    }
}

void (*pr__trainer_frame_hook)(void *arg);
void *pr__trainer_frame_hook_arg;

/* I/O thread, without mu: frame b for c and queue it for writing. The
 * batch is encoded here when the sink set left that to this sink
 * (PR_SINK_CAP_ENCODES): only this thread deals batches out, so only it
 * encodes, once; the frames of both layouts read the encoding. */
static int pr__send_batch(trainer_sink *t, tclient *c, pr_batch *b)
{
    int rc = pr_batch_encode(b);
    if (rc < 0)
        return rc;
    out_item *it = calloc(1, sizeof(*it));
    if (!it)
        return PR_ENOMEM;
    if (pr_grow((void **)&c->fl, &c->cap_fl, c->n_fl + 1, sizeof(*c->fl)) < 0) {
        free(it);
        return PR_ENOMEM;
    }
    if (c->layout == PR__LAYOUT_RAW) {
        size_t len;
        void (*hook)(void *) = __atomic_load_n(&pr__trainer_frame_hook, __ATOMIC_ACQUIRE);
        if (hook)
            hook(pr__trainer_frame_hook_arg);
        rc = pr__raw_frame(b, c->kjt_offsets, c->compact, &it->owned, &len);
        if (rc < 0) {
            free(it);
            return rc;
        }
        it->body = it->owned;
        it->blen = len;
    } else {
        it->hlen = pr__batch_frame_header(b, it->hdr);
        it->body = b->pb;
        it->blen = b->pb_len;
    }
    it->ref = pr_batch_ref(b);
    pr__oq_push(c, it);
    c->fl[c->n_fl++] = (inflight){b->seq, b, pr_clock_mono_ns(t->clock)};
    return 0;
}

/* Give queued batches to trainers with credit, round robin. I/O thread.
 * mu is held only to pick a trainer and take the batch off the queue: the
 * frame (a raw layout frame is one pass over the tensors, ~1 ms for 8192
 * Criteo rows) is built after unlocking, so the pipeline thread's send()
 * and poll() never wait for it. Nothing is lost meanwhile: the batch is
 * counted in n_assigned (max_queued still sees it), and a trainer's
 * in-flight list and out queue belong to this thread alone. A frame that
 * cannot be built puts the batch back at its place in the queue. */
static void pr__dispatch(trainer_sink *t)
{
    for (;;) {
        pthread_mutex_lock(&t->mu);
        tclient *pick = NULL;
        size_t n = t->n_conns;
        for (size_t k = 0; k < n && !pick && t->qlen; k++) {
            size_t want = (size_t)((t->rr + k) % n), i = 0;
            for (tclient *c = t->clients; c; c = c->next, i++)
                if (i == want) {
                    if (c->subscribed && !c->closing && !c->dead && c->n_fl < c->window)
                        pick = c;
                    break;
                }
        }
        if (!pick) {
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->rr++;
        pr_batch *b = t->queue[0];
        memmove(t->queue, t->queue + 1, (t->qlen - 1) * sizeof(*t->queue));
        t->qlen--;
        t->n_assigned++;
        pthread_mutex_unlock(&t->mu);
        if (pr__send_batch(t, pick, b) == 0)
            continue;
        pthread_mutex_lock(&t->mu);
        t->n_assigned--;
        if (pr__queue_insert(t, b) < 0) { /* cannot fail: the slot was just freed */
            pr_err("trainer sink: batch %llu lost from the queue", (unsigned long long)b->seq);
            pr_batch_unref(b);
        }
        pthread_mutex_unlock(&t->mu);
        return;
    }
}

/* ---------------------------------------------------------------- receive buffers */

static size_t pr__rx_extra(size_t cap)
{
    return cap > RX_BASE ? cap - RX_BASE : 0;
}

/* Resize c's buffer to `cap` bytes (>= c->rlen), charging growth beyond
 * RX_BASE to the shared pool. false: the pool cannot give that much. */
static bool pr__rbuf_resize(trainer_sink *t, tclient *c, size_t cap)
{
    uint64_t used = t->rx_pool_used - pr__rx_extra(c->rcap) + pr__rx_extra(cap);
    if (cap > c->rcap && pr__rx_extra(cap) > pr__rx_extra(c->rcap) && used > t->rx_pool)
        return false;
    uint8_t *n = realloc(c->rbuf, cap);
    if (!n)
        return cap < c->rcap; /* shrinking in place is fine */
    c->rbuf = n;
    t->rx_pool_used = used;
    if (cap > c->rcap)
        __atomic_add_fetch(&t->rx_bytes, cap - c->rcap, __ATOMIC_RELAXED);
    else
        __atomic_sub_fetch(&t->rx_bytes, c->rcap - cap, __ATOMIC_RELAXED);
    c->rcap = cap;
    return true;
}

static void pr__rbuf_free(trainer_sink *t, tclient *c)
{
    t->rx_pool_used -= pr__rx_extra(c->rcap);
    __atomic_sub_fetch(&t->rx_bytes, c->rcap, __ATOMIC_RELAXED);
    free(c->rbuf);
    c->rbuf = NULL;
    c->rcap = c->rlen = 0;
}

/* Batches of a trainer that left go back to the queue (under mu). */
static void pr__requeue(trainer_sink *t, const inflight *items, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (pr__queue_insert(t, items[i].b) < 0) {
            pr_err("trainer sink: out of memory requeueing batch %llu",
                   (unsigned long long)items[i].seq);
            pr_batch_unref(items[i].b);
        }
        t->n_assigned--;
    }
    t->st.redeliveries += n;
}

/* A trainer is gone: its unacked batches go back to the queue. */
static void pr__client_drop(trainer_sink *t, tclient *c)
{
    pthread_mutex_lock(&t->mu);
    pr__requeue(t, c->fl, c->n_fl);
    /* Checkpoint delivery: what it trained on after its last committed
     * checkpoint is not in any durable model either; a trainer restored from
     * that checkpoint must get it again. */
    pr__requeue(t, c->tr, c->n_tr);
    if (c->subscribed)
        t->st.clients--;
    t->n_conns--;
    t->st.connections = t->n_conns;
    pthread_mutex_unlock(&t->mu);
    if (c->n_fl || c->n_tr)
        pr_warn("trainer sink: client %s (#%llu) left with %zu unacked batches and %zu not in a "
                "committed checkpoint; they go to the next trainer",
                c->client_id, (unsigned long long)c->id, c->n_fl, c->n_tr);
    else if (c->subscribed)
        pr_info("trainer sink: client %s (#%llu) disconnected", c->client_id,
                (unsigned long long)c->id);
    c->n_fl = 0;
    c->n_tr = 0;
    free(c->tr);
    if (c->ssl) {
        if (c->tls_ready && !c->dead)
            (void)SSL_shutdown(c->ssl); /* close_notify, best effort */
        SSL_free(c->ssl);
    }
    close(c->fd);
    while (c->oq_head) {
        out_item *it = c->oq_head;
        c->oq_head = it->next;
        pr__item_free(it);
    }
    free(c->fl);
    pr__rbuf_free(t, c);
    free(c);
}

/* ---------------------------------------------------------------- checkpoint delivery */

/* Release one batch whose rows a durable checkpoint holds: the sink set may
 * now count it as acknowledged (its offsets can be committed). Under mu. */
static void pr__ckpt_release(trainer_sink *t, pr_batch *b)
{
    uint64_t seq = b->seq;
    pr_batch_unref(b);
    if (pr__acks_push(&t->acked, &seq, 1) < 0) {
        pr_err("trainer sink: out of memory recording checkpointed batch %llu",
               (unsigned long long)seq);
        return;
    }
    t->st.batches_acked++;
}

static size_t pr__ckpt_release_list(trainer_sink *t, const pr__posset *ps, inflight *v, size_t *n)
{
    size_t w = 0, released = 0;
    for (size_t i = 0; i < *n; i++) {
        if (pr__posset_covers_batch(ps, v[i].b)) {
            pr__ckpt_release(t, v[i].b);
            t->n_assigned--;
            released++;
        } else {
            v[w++] = v[i];
        }
    }
    *n = w;
    return released;
}

/* Release every batch, wherever it is (queued, in flight or trained on by
 * any trainer), whose rows all lie in `ps`. Checkpoints of data-parallel
 * ranks hold each other's batches, so all connections are searched. I/O
 * thread; takes mu. */
static size_t pr__ckpt_release_covered(trainer_sink *t, const pr__posset *ps)
{
    size_t released = 0;
    pthread_mutex_lock(&t->mu);
    size_t w = 0;
    for (size_t i = 0; i < t->qlen; i++) {
        if (pr__posset_covers_batch(ps, t->queue[i])) {
            pr__ckpt_release(t, t->queue[i]);
            released++;
        } else {
            t->queue[w++] = t->queue[i];
        }
    }
    t->qlen = w;
    for (tclient *c = t->clients; c; c = c->next) {
        released += pr__ckpt_release_list(t, ps, c->fl, &c->n_fl);
        released += pr__ckpt_release_list(t, ps, c->tr, &c->n_tr);
    }
    pthread_mutex_unlock(&t->mu);
    return released;
}

/* Add a position sent by a trainer (Subscribe.resume or CheckpointCommit)
 * to `ps`. false: a range does not make sense (the caller drops the client). */
static bool pr__ckpt_add_ranges(pr__posset *ps, Piperec__V1__OffsetRange *const *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (r[i]->first_offset < 0 || r[i]->last_offset < r[i]->first_offset)
            return false;
        if (pr__posset_add(ps, r[i]->topic, r[i]->partition, r[i]->first_offset,
                           r[i]->last_offset) < 0)
            return false;
    }
    return true;
}

static void pr__handle_checkpoint(trainer_sink *t, tclient *c,
                                  const Piperec__Trainer__V1__CheckpointCommit *cc)
{
    if (!t->ckpt) {
        /* ack delivery: acks already released (and let the service commit)
         * every batch. A trainer that checkpoints believes rows after its
         * checkpoint come again after a crash; here they would not. */
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "CheckpointCommit, but this server's sinks.trainer.delivery is ack: acked "
                 "batches are committed at once, so rows after a checkpoint would not come "
                 "again after a trainer crash; set delivery: checkpoint on the server, or "
                 "train with delivery ack");
        return;
    }
    pr__posset ps;
    pr__posset_init(&ps);
    bool ok = pr__ckpt_add_ranges(&ps, cc->ranges, cc->n_ranges);
    if (ok) {
        /* A committed checkpoint is a resume position too: rows it holds are
         * never delivered again, even if the consumer reads them twice. */
        pthread_mutex_lock(&t->mu);
        ok = pr__ckpt_add_ranges(&t->resume, cc->ranges, cc->n_ranges);
        pthread_mutex_unlock(&t->mu);
    }
    if (!ok) {
        pr__posset_fini(&ps);
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "CheckpointCommit: bad offset range (or out of memory)");
        return;
    }
    size_t released = pr__ckpt_release_covered(t, &ps);
    pr__posset_fini(&ps);
    pr_debug("trainer sink: client %s (#%llu) committed checkpoint %llu: %zu batch(es) released",
             c->client_id, (unsigned long long)c->id, (unsigned long long)cc->id, released);
    Piperec__Trainer__V1__CheckpointOk okm = PIPEREC__TRAINER__V1__CHECKPOINT_OK__INIT;
    okm.id = cc->id;
    okm.released = (uint32_t)released;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_CHECKPOINT_OK;
    f.checkpoint_ok = &okm;
    (void)pr__send_ctrl(c, &f);
}

static void pr__handle_subscribe(trainer_sink *t, tclient *c,
                                 const Piperec__Trainer__V1__Subscribe *s)
{
    char msg[256];
    if (c->subscribed) {
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "already subscribed");
        return;
    }
    snprintf(c->client_id, sizeof(c->client_id), "%s",
             s->client_id && *s->client_id ? s->client_id : "anonymous");
    /* Authentication first: an unknown client learns nothing about the server. */
    if (t->token_path) {
        pr__tokens_refresh(t);
        if (!s->token || !*s->token) {
            pr__auth_fail(t, c, PR_TRAINER_AUTH_MISSING_TOKEN,
                          "authentication required: Subscribe carries no token");
            return;
        }
        if (!pr__token_ok(t, s->token)) {
            pr__auth_fail(t, c, PR_TRAINER_AUTH_BAD_TOKEN, "token not accepted");
            return;
        }
    }
    if (s->protocol_version != PR_TRAINER_PROTOCOL_VERSION) {
        snprintf(msg, sizeof(msg), "protocol version %u not supported (server speaks %d)",
                 s->protocol_version, PR_TRAINER_PROTOCOL_VERSION);
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL,
                 PIPEREC__TRAINER__V1__ERROR__CODE__UNSUPPORTED_VERSION, msg);
        return;
    }
    if (!s->pipeline || strcmp(s->pipeline, t->pipeline)) {
        snprintf(msg, sizeof(msg), "unknown pipeline '%s' (this server streams '%s')",
                 s->pipeline ? s->pipeline : "", t->pipeline);
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL,
                 PIPEREC__TRAINER__V1__ERROR__CODE__UNKNOWN_PIPELINE, msg);
        return;
    }
    uint32_t w = s->credits ? s->credits : 8;
    c->window = w < t->max_window ? w : t->max_window;
    Piperec__Trainer__V1__SubscribeOk ok = PIPEREC__TRAINER__V1__SUBSCRIBE_OK__INIT;
    ok.protocol_version = PR_TRAINER_PROTOCOL_VERSION;
    ok.pipeline = t->pipeline;
    ok.n_dense = t->n_dense;
    ok.n_sparse = t->n_sparse;
    ok.sparse_width = t->sparse_width;
    if (t->dense_names) {
        ok.n_dense_names = t->n_dense;
        ok.dense_names = t->dense_names;
    }
    if (t->sparse_names) {
        ok.n_sparse_names = t->n_sparse;
        ok.sparse_names = t->sparse_names;
    }
    ok.credits = c->window;
    ok.keepalive_ms = (uint32_t)(t->keepalive_ns / NS_PER_MS);
    ok.server = PR_VERSION_STR;
    /* Layouts this server does not know get the TrainingBatch (layout 0,
     * left out of SubscribeOk: the bytes old clients always got). */
    c->layout = s->layout == PR__LAYOUT_RAW ? PR__LAYOUT_RAW : PR__LAYOUT_PB;
    c->kjt_offsets = s->kjt_offsets;
    c->compact = s->compact;
    ok.layout = c->layout;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK;
    f.subscribe_ok = &ok;
    if (pr__send_ctrl(c, &f) < 0) {
        c->dead = true;
        return;
    }
    c->subscribed = true;
    pthread_mutex_lock(&t->mu);
    t->st.clients++;
    bool ok_resume = !t->ckpt || pr__ckpt_add_ranges(&t->resume, s->resume, s->n_resume);
    if (t->ckpt)
        t->resume_known = true;
    pthread_mutex_unlock(&t->mu);
    if (!ok_resume) {
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "Subscribe.resume: bad offset range (or out of memory)");
        return;
    }
    if (t->ckpt && s->n_resume) {
        /* Batches still held that the restored checkpoint holds (its
         * CheckpointCommit was lost with the trainer) are done. */
        pr__posset ps;
        pr__posset_init(&ps);
        if (pr__ckpt_add_ranges(&ps, s->resume, s->n_resume))
            pr__ckpt_release_covered(t, &ps);
        pr__posset_fini(&ps);
    }
    pr_info("trainer sink: client %s (#%llu) subscribed to %s with %u credits%s", c->client_id,
            (unsigned long long)c->id, t->pipeline, c->window,
            c->layout == PR__LAYOUT_RAW ? " (raw layout)" : "");
}

static void pr__handle_ack(trainer_sink *t, tclient *c, const uint64_t *seqs, size_t n)
{
    pthread_mutex_lock(&t->mu);
    if (t->ckpt) {
        /* Checkpoint delivery: an Ack returns the credit only; the batch
         * waits on this connection for a CheckpointCommit that holds it. */
        for (size_t k = 0; k < n; k++) {
            size_t i;
            for (i = 0; i < c->n_fl && c->fl[i].seq != seqs[k]; i++)
                ;
            if (i == c->n_fl ||
                pr_grow((void **)&c->tr, &c->cap_tr, c->n_tr + 1, sizeof(*c->tr)) < 0) {
                t->st.errors++;
                continue;
            }
            c->tr[c->n_tr++] = c->fl[i];
            memmove(&c->fl[i], &c->fl[i + 1], (c->n_fl - i - 1) * sizeof(*c->fl));
            c->n_fl--;
        }
        pthread_mutex_unlock(&t->mu);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        size_t i;
        for (i = 0; i < c->n_fl && c->fl[i].seq != seqs[k]; i++)
            ;
        if (i == c->n_fl) {
            t->st.errors++; /* late or duplicate ack: harmless, ignored */
            continue;
        }
        pr_batch_unref(c->fl[i].b);
        memmove(&c->fl[i], &c->fl[i + 1], (c->n_fl - i - 1) * sizeof(*c->fl));
        c->n_fl--;
        t->n_assigned--;
        if (pr__acks_push(&t->acked, &seqs[k], 1) < 0) {
            pr_err("trainer sink: out of memory recording ack %llu", (unsigned long long)seqs[k]);
            continue;
        }
        t->st.batches_acked++;
    }
    pthread_mutex_unlock(&t->mu);
}

static void pr__handle_frame(trainer_sink *t, tclient *c, const uint8_t *data, size_t len)
{
    const uint8_t *bp;
    size_t bl;
    Piperec__Trainer__V1__Frame *f;
    if (pr__frame_parse(data, len, &bp, &bl, &f) < 0) {
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__BAD_FRAME,
                 "frame does not parse");
        return;
    }
    if (!f) {
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "clients do not send batches");
        return;
    }
    if (!c->subscribed && f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE &&
        f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_PING &&
        f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_PONG) {
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "first message must be Subscribe");
        pr__frame_free(f);
        return;
    }
    switch (f->msg_case) {
    case PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE:
        pr__handle_subscribe(t, c, f->subscribe);
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ACK:
        pr__handle_ack(t, c, f->ack->sequences, f->ack->n_sequences);
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_CREDIT: {
        uint64_t w = (uint64_t)c->window + f->credit->credits;
        c->window = w < t->max_window ? (uint32_t)w : t->max_window;
        break;
    }
    case PIPEREC__TRAINER__V1__FRAME__MSG_PING: {
        Piperec__Trainer__V1__Pong pong = PIPEREC__TRAINER__V1__PONG__INIT;
        pong.nonce = f->ping->nonce;
        pong.time_ms = pr_clock_wall_ms(t->clock);
        Piperec__Trainer__V1__Frame r = PIPEREC__TRAINER__V1__FRAME__INIT;
        r.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_PONG;
        r.pong = &pong;
        (void)pr__send_ctrl(c, &r);
        break;
    }
    case PIPEREC__TRAINER__V1__FRAME__MSG_PONG:
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_CHECKPOINT_COMMIT:
        pr__handle_checkpoint(t, c, f->checkpoint_commit);
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
        pr_warn("trainer sink: client %s (#%llu) reported error %d: %s", c->client_id,
                (unsigned long long)c->id, (int)f->error->code, f->error->message);
        c->dead = true;
        break;
    default:
        pr__drop(t, c, PR_TRAINER_DROP_PROTOCOL, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                 "unexpected message from a client");
        break;
    }
    pr__frame_free(f);
}

/* Handle the complete frames at the start of the buffer; keep the rest. */
static void pr__parse_frames(trainer_sink *t, tclient *c)
{
    size_t pos = 0;
    while (!c->closing && !c->dead && c->rlen - pos >= 4) {
        uint32_t n;
        memcpy(&n, c->rbuf + pos, 4);
        if (n > t->max_frame || c->rlen - pos - 4 < n)
            break;
        pr__handle_frame(t, c, c->rbuf + pos + 4, n);
        pos += 4 + (size_t)n;
    }
    if (pos) {
        memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
        c->rlen -= pos;
    }
}

/* TLS: look at the first byte (a TLS handshake record starts with 0x16; a
 * piperec frame on a TLS port does not), then drive SSL_accept. */
static void pr__tls_handshake(trainer_sink *t, tclient *c)
{
    char eb[256];
    if (!c->tls_peeked) {
        uint8_t b;
        ssize_t r = recv(c->fd, &b, 1, MSG_PEEK);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            c->dead = true;
        if (r <= 0)
            return;
        c->tls_peeked = true;
        if (b != 0x16) {
            pr__refuse(t, -1, false, c->peer, PR_TRAINER_REFUSE_PLAINTEXT,
                       "this port requires TLS (plain-text client)");
            pr__raw_error(c->fd, PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE,
                          "this port requires TLS");
            c->dead = true;
            return;
        }
    }
    c->tls_want_write = false;
    ERR_clear_error();
    int rc = SSL_do_handshake(c->ssl);
    if (rc == 1) {
        c->tls_ready = true;
        c->last_rx_ns = pr_clock_mono_ns(t->clock);
        X509 *cert = SSL_get1_peer_certificate(c->ssl);
        if (cert) {
            char subj[256];
            X509_NAME_oneline(X509_get_subject_name(cert), subj, sizeof(subj));
            snprintf(c->client_id, sizeof(c->client_id), "%.63s", subj);
            X509_free(cert);
        }
        pr_debug("trainer sink: connection #%llu from %s: %s established",
                 (unsigned long long)c->id, c->peer, SSL_get_version(c->ssl));
        return;
    }
    int e = SSL_get_error(c->ssl, rc);
    if (e == SSL_ERROR_WANT_READ)
        return;
    if (e == SSL_ERROR_WANT_WRITE) {
        c->tls_want_write = true;
        return;
    }
    unsigned long err = ERR_peek_last_error();
    int reason = ERR_GET_REASON(err);
    long vr = SSL_get_verify_result(c->ssl);
    c->dead = true;
    if (t->mtls && (reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE ||
                    reason == SSL_R_CERTIFICATE_VERIFY_FAILED || vr != X509_V_OK)) {
        char msg[320];
        snprintf(msg, sizeof(msg), "client certificate refused: %s",
                 vr != X509_V_OK ? X509_verify_cert_error_string(vr)
                                 : pr__tls_errstr(eb, sizeof(eb)));
        pr__count(t, &t->st.auth_failures[PR_TRAINER_AUTH_CLIENT_CERT]);
        if (pr__log_ok(t, LOG_AUTH, LOG_BURST))
            pr_warn("trainer sink: authentication failed for connection #%llu from %s: %s "
                    "[client_cert]",
                    (unsigned long long)c->id, c->peer, msg);
        return;
    }
    char msg[320];
    snprintf(msg, sizeof(msg), "TLS handshake failed: %s", pr__tls_errstr(eb, sizeof(eb)));
    pr__refuse(t, -1, false, c->peer, PR_TRAINER_REFUSE_TLS_HANDSHAKE, msg);
}

static void pr__client_read(trainer_sink *t, tclient *c)
{
    if (c->ssl && !c->tls_ready) {
        pr__tls_handshake(t, c);
        if (!c->tls_ready || c->dead)
            return;
    }
    /* Frames that arrived before EOF/reset are still handled (a client's
     * last acks often come in the same read as its FIN): each read is parsed
     * before the next. */
    bool gone = false;
    int rounds = 0;
    c->rx_more = false;
    for (; rounds < RX_ROUNDS && !c->closing && !c->dead; rounds++) {
        size_t need = RX_BASE;
        if (c->rlen >= 4) {
            uint32_t n;
            memcpy(&n, c->rbuf, 4);
            if (n > t->max_frame) {
                char msg[128];
                snprintf(msg, sizeof(msg), "frame of %u bytes is larger than %u", n, t->max_frame);
                pr__drop(t, c, PR_TRAINER_DROP_FRAME_TOO_LARGE,
                         PIPEREC__TRAINER__V1__ERROR__CODE__BAD_FRAME, msg);
                break;
            }
            if (4 + (size_t)n > need)
                need = 4 + (size_t)n;
        }
        if (need > c->rcap && !pr__rbuf_resize(t, c, need)) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "receive buffers full (max_receive_buffer_bytes %llu): a %zu-byte frame does "
                     "not fit",
                     (unsigned long long)t->rx_pool, need - 4);
            pr__drop(t, c, PR_TRAINER_DROP_RECEIVE_BUFFER,
                     PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE, msg);
            break;
        }
        ssize_t r = pr__conn_recv(c, c->rbuf + c->rlen, c->rcap - c->rlen);
        if (r == 0) {
            gone = true;
            break;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                gone = true;
            break;
        }
        c->rlen += (size_t)r;
        c->last_rx_ns = pr_clock_mono_ns(t->clock);
        pr__parse_frames(t, c);
    }
    if (rounds == RX_ROUNDS || (c->ssl && !c->closing && SSL_pending(c->ssl) > 0))
        c->rx_more = true; /* more input may be waiting: read again next turn */
    /* Give a large buffer back once its frame is handled. */
    if (c->rcap > RX_BASE && c->rlen <= RX_BASE && c->rbuf)
        (void)pr__rbuf_resize(t, c, RX_BASE);
    if (gone)
        c->dead = true;
}

static void pr__client_flush(trainer_sink *t, tclient *c)
{
    if (c->ssl && !c->tls_ready)
        return;
    while (c->oq_head && !c->dead) {
        out_item *it = c->oq_head;
        struct iovec iov[2];
        int n = 0;
        size_t total = it->hlen + it->blen;
        if (it->done < it->hlen)
            iov[n++] = (struct iovec){it->hdr + it->done, it->hlen - it->done};
        size_t boff = it->done > it->hlen ? it->done - it->hlen : 0;
        iov[n++] = (struct iovec){(void *)(it->body + boff), it->blen - boff};
        ssize_t w = pr__conn_send(c, iov, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                c->dead = true;
            return;
        }
        it->done += (size_t)w;
        __atomic_add_fetch(&t->bytes_sent, (uint64_t)w, __ATOMIC_RELAXED);
        if (it->done < total)
            continue; /* a partial write: try the rest (EAGAIN ends it) */
        c->oq_head = it->next;
        if (!c->oq_head)
            c->oq_tail = NULL;
        pr__item_free(it);
    }
    if (!c->oq_head && c->closing)
        c->dead = true;
}

/* Shutdown: tell every subscribed client, and make the notice arrive. A
 * trainer ends its loop quietly only on this SHUTDOWN (any other end is a
 * crash to it), so the notice must not wait behind batch frames a slow
 * trainer has no room for, nor be destroyed by a reset: the batch frames
 * not yet begun are dropped (unacked, they are delivered again after the
 * restart), the Error goes next, the queues are written for up to
 * SHUTDOWN_WRITE_NS, then the write side is shut and what the trainers
 * still send (acks) is read away, so the close is an orderly FIN. */
#define SHUTDOWN_WRITE_NS (2000LL * NS_PER_MS)
static void pr__shutdown_notice(trainer_sink *t)
{
    for (tclient *c = t->clients; c; c = c->next) {
        if (!c->subscribed || c->closing || c->dead)
            continue;
        out_item **pp = c->oq_head && c->oq_head->done ? &c->oq_head->next : &c->oq_head;
        while (*pp) { /* keep a frame half written (framing), drop the rest */
            out_item *it = *pp;
            *pp = it->next;
            pr__item_free(it);
        }
        c->oq_tail = NULL;
        for (out_item *it = c->oq_head; it; it = it->next)
            c->oq_tail = it;
        pr__send_error(t, c, PIPEREC__TRAINER__V1__ERROR__CODE__SHUTDOWN, "server is stopping");
    }
    int64_t deadline = pr_mono_ns() + SHUTDOWN_WRITE_NS;
    for (;;) {
        struct pollfd fds[64];
        nfds_t n = 0;
        for (tclient *c = t->clients; c; c = c->next) {
            if (c->dead || !c->oq_head)
                continue;
            pr__client_flush(t, c);
            if (!c->dead && c->oq_head && n < sizeof(fds) / sizeof(fds[0]))
                fds[n++] = (struct pollfd){.fd = c->fd, .events = POLLOUT};
        }
        int64_t left = deadline - pr_mono_ns();
        if (n == 0 || left <= 0)
            break;
        (void)poll(fds, n, (int)(left / NS_PER_MS) + 1);
    }
    for (tclient *c = t->clients; c; c = c->next) {
        if (c->ssl)
            continue; /* TLS: close_notify at the drop */
        (void)shutdown(c->fd, SHUT_WR);
        char sink[4096]; /* a few acks: read until the peer closes or 100 ms pass */
        int64_t until = pr_mono_ns() + 100 * NS_PER_MS;
        struct pollfd pf = {.fd = c->fd, .events = POLLIN};
        while (pr_mono_ns() < until && poll(&pf, 1, 20) > 0 &&
               recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
            ;
    }
}

/* accept() failed with EMFILE/ENFILE: the pending connections would keep
 * the listening socket readable and the loop spinning. Give up the spare
 * descriptor, accept one and close it, take the spare back, until the
 * backlog is empty. Without a spare, stop polling the listener for
 * ACCEPT_PAUSE_NS (real time: a manual test clock must not wedge it). */
static void pr__accept_exhausted(trainer_sink *t, int lfd, int first_errno)
{
    uint64_t n = 0;
    while (t->spare_fd >= 0 && n < ACCEPTS_PER_TURN) {
        close(t->spare_fd);
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int e = errno;
        if (fd >= 0) {
            pr__raw_error(fd, PIPEREC__TRAINER__V1__ERROR__CODE__UNAVAILABLE,
                          "server out of file descriptors");
            close(fd);
            n++;
        }
        t->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 && e != EINTR && e != ECONNABORTED)
            break;
    }
    if (n) {
        pthread_mutex_lock(&t->mu);
        t->st.refused[PR_TRAINER_REFUSE_FD_EXHAUSTED] += n;
        pthread_mutex_unlock(&t->mu);
    }
    if (t->spare_fd < 0)
        t->accept_paused_until = pr_mono_ns() + ACCEPT_PAUSE_NS;
    if (pr__log_ok(t, LOG_FD, 1)) /* once per burst: the count is in the metric */
        pr_warn("trainer sink: accept: %s with %zu trainer connections open: refused %llu "
                "connection(s) [fd_exhausted]; raise the open-file limit (ulimit -n) or lower "
                "sinks.trainer.max_connections",
                strerror(first_errno), t->n_conns, (unsigned long long)n);
}

/* Accept what waits on listener `lfd`: the TCP port, or (`local`) the
 * Unix domain socket, where connections are plain (the socket file's
 * permissions guard it; TLS does not apply) and tokens are checked as on
 * the port. */
static void pr__accept_clients(trainer_sink *t, int lfd, bool local)
{
    for (int k = 0; k < ACCEPTS_PER_TURN; k++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                pr__accept_exhausted(t, lfd, errno);
            return;
        }
        char peer[64];
        if (local)
            snprintf(peer, sizeof(peer), "unix:%llu", (unsigned long long)t->next_client_id + 1);
        else
            pr__peer_name(&ss, sl, peer, sizeof(peer));
        if (t->n_conns >= t->max_conns) {
            char msg[96];
            snprintf(msg, sizeof(msg), "too many connections (max_connections %u)", t->max_conns);
            pr__refuse(t, fd, local, peer, PR_TRAINER_REFUSE_MAX_CONNECTIONS, msg);
            continue;
        }
        int one = 1;
        if (local) {
            int sb = UNIX_SNDBUF;
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof(sb));
        } else {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        }
        if (t->ssl_ctx && !local)
            pr__tls_refresh(t);
        tclient *c = calloc(1, sizeof(*c));
        if (c && t->ssl_ctx && !local) {
            c->ssl = SSL_new(t->ssl_ctx);
            if (!c->ssl || SSL_set_fd(c->ssl, fd) != 1) {
                SSL_free(c->ssl);
                free(c);
                c = NULL;
            } else {
                SSL_set_accept_state(c->ssl);
            }
        }
        if (!c) {
            pr_err("trainer sink: out of memory accepting a connection from %s", peer);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->id = ++t->next_client_id;
        snprintf(c->peer, sizeof(c->peer), "%s", peer);
        snprintf(c->client_id, sizeof(c->client_id), "unsubscribed");
        c->accepted_ns = c->last_rx_ns = c->last_ping_ns = pr_clock_mono_ns(t->clock);
        c->next = t->clients;
        t->clients = c;
        pthread_mutex_lock(&t->mu);
        t->n_conns++;
        t->st.connections = t->n_conns;
        pthread_mutex_unlock(&t->mu);
    }
}

static void pr__check_timers(trainer_sink *t, tclient *c, int64_t now)
{
    if (c->dead)
        return;
    if (c->closing) {
        if (now - c->closing_ns > CLOSE_LINGER_NS)
            c->dead = true; /* the peer does not read its Error: close anyway */
        return;
    }
    if (!c->subscribed) {
        if (now - c->accepted_ns > t->handshake_ns) {
            char msg[96];
            snprintf(msg, sizeof(msg), "no Subscribe within %lld ms of connecting",
                     (long long)(t->handshake_ns / NS_PER_MS));
            pr__drop(t, c, PR_TRAINER_DROP_HANDSHAKE_TIMEOUT,
                     PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT, msg);
        }
        return;
    }
    if (t->ack_timeout_ns > 0 && c->n_fl && now - c->fl[0].sent_ns > t->ack_timeout_ns) {
        pr__drop(t, c, PR_TRAINER_DROP_ACK_TIMEOUT, PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT,
                 "batch not acknowledged within the ack timeout");
        return;
    }
    if (now - c->last_rx_ns > t->idle_ns) {
        char msg[96];
        snprintf(msg, sizeof(msg), "nothing received from the client for %lld ms",
                 (long long)(t->idle_ns / NS_PER_MS));
        pr__drop(t, c, PR_TRAINER_DROP_IDLE_TIMEOUT, PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT,
                 msg);
        return;
    }
    if (now - c->last_ping_ns >= t->keepalive_ns) {
        Piperec__Trainer__V1__Ping ping = PIPEREC__TRAINER__V1__PING__INIT;
        ping.nonce = (uint64_t)now;
        ping.time_ms = pr_clock_wall_ms(t->clock);
        Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
        f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_PING;
        f.ping = &ping;
        (void)pr__send_ctrl(c, &f);
        c->last_ping_ns = now;
    }
}

static void *pr__io_thread(void *arg)
{
    trainer_sink *t = arg;
    struct pollfd *pfd = NULL;
    tclient **pc = NULL;
    size_t cap = 0;
    /* SSL_write() writes with write(2): a peer that went away must give
     * EPIPE, not kill the process. */
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, NULL);
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        size_t n = 3 + t->n_conns;
        if (n > cap) {
            size_t nc = n * 2;
            struct pollfd *np = realloc(pfd, nc * sizeof(*np));
            tclient **npc = np ? realloc(pc, nc * sizeof(*npc)) : NULL;
            if (np)
                pfd = np;
            if (!npc) {
                pr_err("trainer sink: out of memory in the I/O loop");
                usleep(10000);
                continue;
            }
            pc = npc;
            cap = nc;
        }
        if (t->spare_fd < 0)
            t->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        bool listen_on = true;
        if (t->accept_paused_until) {
            if (pr_mono_ns() < t->accept_paused_until)
                listen_on = false;
            else
                t->accept_paused_until = 0;
        }
        pfd[0] = (struct pollfd){t->wake[0], POLLIN, 0};
        pfd[1] = (struct pollfd){t->lfd, (short)(listen_on ? POLLIN : 0), 0};
        pfd[2] = (struct pollfd){t->ufd, (short)(listen_on ? POLLIN : 0), 0}; /* -1: ignored */
        size_t i = 3;
        int timeout = 100;
        for (tclient *c = t->clients; c; c = c->next, i++) {
            bool handshaking = c->ssl && !c->tls_ready;
            short ev = (short)((!c->closing || handshaking) ? POLLIN : 0);
            if ((c->oq_head && !handshaking) || c->tls_want_write)
                ev |= POLLOUT;
            pc[i] = c;
            pfd[i] = (struct pollfd){c->fd, ev, 0};
            if (c->rx_more)
                timeout = 0;
        }
        int rc = poll(pfd, n, timeout);
        __atomic_add_fetch(&t->io_wakeups, 1, __ATOMIC_RELAXED);
        if (rc < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            char buf[256];
            while (read(t->wake[0], buf, sizeof(buf)) > 0)
                ;
        }
        if (pfd[1].revents & POLLIN)
            pr__accept_clients(t, t->lfd, false);
        if (pfd[2].revents & POLLIN)
            pr__accept_clients(t, t->ufd, true);
        for (size_t k = 3; k < n; k++) {
            tclient *c = pc[k];
            short re = pfd[k].revents;
            if (c->closing && (re & (POLLHUP | POLLERR)) && !(c->ssl && !c->tls_ready)) {
                c->dead = true; /* nobody left to read our Error */
                continue;
            }
            if ((re & (POLLIN | POLLHUP | POLLERR)) || c->rx_more ||
                ((re & POLLOUT) && c->ssl && (!c->tls_ready || c->tls_want_write)))
                pr__client_read(t, c);
            if (re & POLLOUT)
                pr__client_flush(t, c);
        }
        int64_t now = pr_clock_mono_ns(t->clock);
        for (tclient *c = t->clients; c; c = c->next)
            pr__check_timers(t, c, now);
        /* Reap dead clients first so their batches are dealt out again right away. */
        for (tclient **pp = &t->clients; *pp;) {
            tclient *c = *pp;
            if (c->dead) {
                *pp = c->next;
                pr__client_drop(t, c);
            } else {
                pp = &c->next;
            }
        }
        pr__dispatch(t);
        for (tclient *c = t->clients; c; c = c->next)
            pr__client_flush(t, c);
    }
    pr__shutdown_notice(t);
    free(pfd);
    free(pc);
    return NULL;
}

/* ---------------------------------------------------------------- ops */

static void pr__names_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char **pr__names_dup(const char *const *src, size_t n)
{
    if (!src || !n)
        return NULL;
    char **v = calloc(n, sizeof(char *));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = strdup(src[i] ? src[i] : ""))) {
            pr__names_free(v, n);
            return NULL;
        }
    }
    return v;
}

static void pr__trainer_free(pr_sink *s);

/* A server TLS context from the files of tc: certificate and key, optional
 * client CA (mutual TLS), TLS 1.2 or newer. Errors name the key and
 * OpenSSL's reason; *out is set only on success. */
static int pr__tls_ctx_new(const pr_trainer_tls_cfg *tc, SSL_CTX **out, char *errstr, size_t es)
{
    char eb[256];
    int err = 0;
    if (!tc->cert_file || !tc->key_file)
        return pr_seterr(errstr, es, PR_EINVAL,
                         "sinks.trainer.tls: cert_file and key_file are required");
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx)
        return pr_seterr(errstr, es, PR_ENOMEM, "sinks.trainer.tls: %s",
                         pr__tls_errstr(eb, sizeof(eb)));
    bool v13 = tc->min_version && strcmp(tc->min_version, "1.3") == 0;
    SSL_CTX_set_min_proto_version(ctx, v13 ? TLS1_3_VERSION : TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION);
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(ctx, tc->cert_file) != 1)
        err = pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.tls.cert_file: %s: %s", tc->cert_file,
                        pr__tls_errstr(eb, sizeof(eb)));
    else if (SSL_CTX_use_PrivateKey_file(ctx, tc->key_file, SSL_FILETYPE_PEM) != 1)
        err = pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.tls.key_file: %s: %s", tc->key_file,
                        pr__tls_errstr(eb, sizeof(eb)));
    else if (SSL_CTX_check_private_key(ctx) != 1)
        err = pr_seterr(errstr, es, PR_EINVAL,
                        "sinks.trainer.tls: key_file %s does not match cert_file %s", tc->key_file,
                        tc->cert_file);
    else if (tc->ca_file && *tc->ca_file) {
        if (SSL_CTX_load_verify_locations(ctx, tc->ca_file, NULL) != 1)
            err = pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.tls.ca_file: %s: %s", tc->ca_file,
                            pr__tls_errstr(eb, sizeof(eb)));
        else
            SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    if (err) {
        SSL_CTX_free(ctx);
        return err;
    }
    *out = ctx;
    return 0;
}

/* What the TLS files looked like (stat before reading them); a file that
 * cannot be stat'ed reads as all zero, which differs from any real state. */
static void pr__tls_files_state(const trainer_sink *t, struct stat st[3])
{
    const char *paths[3] = {t->tls.cert_file, t->tls.key_file, t->tls.ca_file};
    for (int i = 0; i < 3; i++)
        if (!paths[i] || stat(paths[i], &st[i]) < 0)
            memset(&st[i], 0, sizeof(st[i]));
}

static bool pr__tls_files_same(const struct stat a[3], const struct stat b[3])
{
    for (int i = 0; i < 3; i++)
        if (!pr__same_file_state(&a[i], &b[i]))
            return false;
    return true;
}

/* I/O thread, before each accepted connection: when the certificate, key or
 * CA file changed (a new inode, as with Kubernetes secret updates, size,
 * mtime or ctime), build a new context and use it for connections accepted
 * from now on; connections already open keep theirs (OpenSSL counts the
 * references). A set that does not load (say, the certificate replaced but
 * not yet its key) keeps the previous context and is warned about once; it
 * is tried again when a file changes again. */
static void pr__tls_refresh(trainer_sink *t)
{
    struct stat st[3];
    pr__tls_files_state(t, st);
    if (pr__tls_files_same(st, t->tls_st) || pr__tls_files_same(st, t->tls_bad_st))
        return;
    char err[512];
    SSL_CTX *ctx = NULL;
    if (pr__tls_ctx_new(&t->tls, &ctx, err, sizeof(err)) < 0) {
        memcpy(t->tls_bad_st, st, sizeof(t->tls_bad_st));
        pr_warn("trainer sink: TLS files changed but do not load (%s); the previous certificate "
                "stays in use",
                err);
        return;
    }
    SSL_CTX_free(t->ssl_ctx);
    t->ssl_ctx = ctx;
    memcpy(t->tls_st, st, sizeof(t->tls_st));
    pr_info("trainer sink: TLS certificate %s re-read; new connections use it", t->tls.cert_file);
}

/* Load the TLS context at start, keeping copies of the paths for reloads. */
static int pr__tls_setup(trainer_sink *t, const pr_trainer_tls_cfg *tc, char *errstr, size_t es)
{
    const char *src[4] = {tc->cert_file, tc->key_file, tc->ca_file, tc->min_version};
    char **dst[4] = {(char **)&t->tls.cert_file, (char **)&t->tls.key_file,
                     (char **)&t->tls.ca_file, (char **)&t->tls.min_version};
    t->tls.enabled = true;
    for (int i = 0; i < 4; i++)
        if (src[i] && *src[i] && !(*dst[i] = strdup(src[i])))
            return pr_seterr(errstr, es, PR_ENOMEM, "trainer sink: out of memory");
    pr__tls_files_state(t, t->tls_st);
    int err = pr__tls_ctx_new(&t->tls, &t->ssl_ctx, errstr, es);
    if (err)
        return err;
    t->mtls = t->tls.ca_file != NULL;
    return 0;
}

/* sinks.trainer.listen: the TCP listener (t->lfd) and its port. */
static int pr__tcp_listen(trainer_sink *t, const char *listen_s, char *errstr, size_t es)
{
    char host[256];
    uint16_t port;
    if (pr_hostport_parse(listen_s, host, sizeof(host), &port) < 0)
        return pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.listen: '%s' is not host:port",
                         listen_s);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int gai = getaddrinfo(host[0] ? host : NULL, portstr, &hints, &ai);
    if (gai)
        return pr_seterr(errstr, es, PR_EINVAL, "sinks.trainer.listen: %s: %s", listen_s,
                         gai_strerror(gai));
    int last_errno = 0;
    for (struct addrinfo *a = ai; a && t->lfd < 0; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 64) == 0) {
            t->lfd = fd;
        } else {
            last_errno = errno;
            close(fd);
        }
    }
    freeaddrinfo(ai);
    if (t->lfd < 0)
        return pr_seterr(errstr, es, PR_EIO, "sinks.trainer.listen: cannot listen on %s: %s",
                         listen_s, strerror(last_errno));
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(t->lfd, (struct sockaddr *)&ss, &sl) == 0)
        t->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* sinks.trainer.unix_path: a second listener, same protocol, for a trainer
 * on the same node (a sidecar sharing a volume). A socket file left by a
 * process that died is replaced; one that answers is not (another server
 * uses it), nor is a file that is not a socket. Mode 0660: the owner and
 * its group (a pod's fsGroup) may connect. */
static int pr__unix_listen(trainer_sink *t, const char *path, char *errstr, size_t es)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (!path[0] || strlen(path) >= sizeof(sa.sun_path))
        return pr_seterr(errstr, es, PR_EINVAL,
                         "sinks.trainer.unix_path: '%s': empty or longer than %zu bytes", path,
                         sizeof(sa.sun_path) - 1);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return pr_seterr(errstr, es, PR_EIO, "sinks.trainer.unix_path: socket: %s",
                         strerror(errno));
    struct stat st;
    if (lstat(path, &st) == 0) {
        int probe = S_ISSOCK(st.st_mode) ? socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
        bool live = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (probe >= 0)
            close(probe);
        if (!S_ISSOCK(st.st_mode) || live) {
            close(fd);
            return pr_seterr(errstr, es, PR_EIO, "sinks.trainer.unix_path: %s: %s", path,
                             live ? "another server is listening there"
                                  : "exists and is not a socket");
        }
        unlink(path); /* left by a process that is gone */
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0660) < 0 ||
        listen(fd, 64) < 0) {
        int e = errno;
        close(fd);
        return pr_seterr(errstr, es, PR_EIO, "sinks.trainer.unix_path: cannot listen on %s: %s",
                         path, strerror(e));
    }
    if (!(t->unix_path = strdup(path))) {
        close(fd);
        unlink(path);
        return pr_seterr(errstr, es, PR_ENOMEM, "trainer sink: out of memory");
    }
    t->ufd = fd;
    return 0;
}

static int pr__trainer_new(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t errstr_size)
{
    trainer_sink *t = calloc(1, sizeof(*t));
    if (!t)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "trainer sink: out of memory");
    t->base.ops = &pr_sink_trainer_ops;
    t->lfd = -1;
    t->ufd = -1;
    t->spare_fd = -1;
    t->wake[0] = t->wake[1] = -1;
    t->port = -1;
    pthread_mutex_init(&t->mu, NULL);
    snprintf(t->pipeline, sizeof(t->pipeline), "%s", cfg->pipeline ? cfg->pipeline : "");
    t->n_dense = cfg->n_dense;
    t->n_sparse = cfg->n_sparse;
    t->sparse_width = cfg->sparse_width;
    t->dense_names = pr__names_dup(cfg->dense_names, cfg->n_dense);
    t->sparse_names = pr__names_dup(cfg->sparse_names, cfg->n_sparse);
    t->clock = cfg->clock ? cfg->clock : pr_clock_real();
    /* Zero fields take the documented defaults (pr_sink_trainer_cfgmap);
     * ack_timeout_ms 0 keeps its own meaning, no timeout. */
    pr_trainer_sink_cfg tc = cfg->trainer;
    pr_cfgmap_default_zero(&pr_sink_trainer_cfgmap, &tc);
    tc.ack_timeout_ms = cfg->trainer.ack_timeout_ms;
    t->max_window = tc.max_unacked_batches;
    t->ack_timeout_ns = tc.ack_timeout_ms * NS_PER_MS;
    t->keepalive_ns = tc.keepalive_ms * NS_PER_MS;
    t->max_queued = tc.max_queued_batches;
    t->max_conns = tc.max_connections;
    t->handshake_ns = tc.handshake_timeout_ms * NS_PER_MS;
    /* Silence below two ping intervals would drop healthy trainers. */
    t->idle_ns = tc.idle_timeout_ms * NS_PER_MS;
    if (t->idle_ns < 2 * t->keepalive_ns)
        t->idle_ns = 2 * t->keepalive_ns;
    t->max_frame = tc.max_frame_bytes;
    t->rx_pool = tc.max_receive_buffer_bytes;
    t->ckpt = tc.delivery == PR_TRAINER_DELIVERY_CHECKPOINT;
    pr__posset_init(&t->resume);
    t->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int err;
    if (tc.tls.enabled && (err = pr__tls_setup(t, &tc.tls, errstr, errstr_size)) < 0)
        goto fail;
    if (tc.auth.token_file) {
        if (!(t->token_path = strdup(tc.auth.token_file))) {
            err = pr_seterr(errstr, errstr_size, PR_ENOMEM, "trainer sink: out of memory");
            goto fail;
        }
        if ((err = pr__tokens_load(t, errstr, errstr_size)) < 0)
            goto fail;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (rlim_t)t->max_conns + 64 > rl.rlim_cur)
        pr_warn("trainer sink: sinks.trainer.max_connections %u is close to the open-file limit "
                "%llu: connections beyond the limit are refused, but HTTP and Kafka need "
                "descriptors too; raise `ulimit -n` or lower max_connections",
                t->max_conns, (unsigned long long)rl.rlim_cur);

    if ((err = pr__tcp_listen(t, tc.listen, errstr, errstr_size)) < 0)
        goto fail;
    if (tc.unix_path && (err = pr__unix_listen(t, tc.unix_path, errstr, errstr_size)) < 0)
        goto fail;
    if (pipe2(t->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        err = pr_seterr(errstr, errstr_size, PR_EIO, "trainer sink: pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&t->th, NULL, pr__io_thread, t) != 0) {
        err = pr_seterr(errstr, errstr_size, PR_EIO, "trainer sink: cannot start the I/O thread");
        goto fail;
    }
    t->started = true;
    pr_info("trainer sink: pipeline %s listening on %s (port %d, %s%s%s)%s%s", t->pipeline,
            tc.listen, t->port, t->ssl_ctx ? "TLS" : "plain TCP",
            t->mtls ? ", client certificates" : "", t->token_path ? ", token" : "",
            t->unix_path ? " and unix:" : "", t->unix_path ? t->unix_path : "");
    *out = &t->base;
    return 0;
fail:
    pr__trainer_free(&t->base);
    return err;
}

static int pr__trainer_send(pr_sink *s, pr_batch *b)
{
    trainer_sink *t = (trainer_sink *)s;
    pthread_mutex_lock(&t->mu);
    if (t->max_queued && t->qlen + t->n_assigned >= t->max_queued) {
        t->st.batches_refused++;
        pthread_mutex_unlock(&t->mu);
        return PR_EAGAIN;
    }
    int err = pr__queue_insert(t, pr_batch_ref(b));
    if (err < 0)
        pr_batch_unref(b);
    else
        t->st.batches_sent++;
    pthread_mutex_unlock(&t->mu);
    pr__wake(t);
    return err;
}

static int pr__trainer_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
{
    trainer_sink *t = (trainer_sink *)s;
    uint64_t local[256];
    int total = 0;
    for (;;) {
        size_t n;
        pthread_mutex_lock(&t->mu);
        n = t->acked.n < 256 ? t->acked.n : 256;
        if (n) {
            memcpy(local, t->acked.seq, n * sizeof(uint64_t));
            memmove(t->acked.seq, t->acked.seq + n, (t->acked.n - n) * sizeof(uint64_t));
            t->acked.n -= n;
        }
        pthread_mutex_unlock(&t->mu);
        for (size_t i = 0; i < n; i++)
            cb(opaque, local[i]);
        total += (int)n;
        if (n < 256)
            return total;
    }
}

static bool pr__trainer_ready(pr_sink *s)
{
    trainer_sink *t = (trainer_sink *)s;
    return t->started && t->lfd >= 0;
}

static void pr__trainer_stats(pr_sink *s, pr_sink_stats *st)
{
    trainer_sink *t = (trainer_sink *)s;
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    st->bytes_sent = __atomic_load_n(&t->bytes_sent, __ATOMIC_RELAXED);
    st->queued_batches = t->qlen + t->n_assigned;
    pthread_mutex_unlock(&t->mu);
    st->receive_buffer_bytes = __atomic_load_n(&t->rx_bytes, __ATOMIC_RELAXED);
    st->io_wakeups = __atomic_load_n(&t->io_wakeups, __ATOMIC_RELAXED);
}

static uint64_t pr_sink_trainer_buffered_bytes(pr_sink *s)
{
    if (!s || s->ops != &pr_sink_trainer_ops)
        return 0;
    return __atomic_load_n(&((trainer_sink *)s)->rx_bytes, __ATOMIC_RELAXED);
}

static void pr__trainer_free(pr_sink *s)
{
    trainer_sink *t = (trainer_sink *)s;
    if (!t)
        return;
    if (t->started) {
        __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
        pr__wake(t);
        pthread_join(t->th, NULL);
    }
    while (t->clients) {
        tclient *c = t->clients;
        t->clients = c->next;
        pr__client_drop(t, c);
    }
    for (size_t i = 0; i < t->qlen; i++)
        pr_batch_unref(t->queue[i]);
    free(t->queue);
    pr__acks_fini(&t->acked);
    pr__posset_fini(&t->resume);
    if (t->lfd >= 0)
        close(t->lfd);
    if (t->ufd >= 0) {
        close(t->ufd);
        unlink(t->unix_path);
    }
    free(t->unix_path);
    if (t->spare_fd >= 0)
        close(t->spare_fd);
    SSL_CTX_free(t->ssl_ctx);
    free((char *)t->tls.cert_file);
    free((char *)t->tls.key_file);
    free((char *)t->tls.ca_file);
    free((char *)t->tls.min_version);
    free(t->tokens);
    free(t->token_path);
    if (t->wake[0] >= 0)
        close(t->wake[0]);
    if (t->wake[1] >= 0)
        close(t->wake[1]);
    pr__names_free(t->dense_names, t->n_dense);
    pr__names_free(t->sparse_names, t->n_sparse);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static int pr_sink_trainer_port(pr_sink *s)
{
    if (!s || s->ops != &pr_sink_trainer_ops)
        return -1;
    return ((trainer_sink *)s)->port;
}

static bool pr_sink_trainer_checkpoint_mode(pr_sink *s)
{
    return s && s->ops == &pr_sink_trainer_ops && ((trainer_sink *)s)->ckpt;
}

static bool pr_sink_trainer_resume_known(pr_sink *s)
{
    if (!pr_sink_trainer_checkpoint_mode(s))
        return true;
    trainer_sink *t = (trainer_sink *)s;
    pthread_mutex_lock(&t->mu);
    bool k = t->resume_known;
    pthread_mutex_unlock(&t->mu);
    return k;
}

static uint32_t pr_sink_trainer_resume_filter(pr_sink *s, const char *const *topics,
                                              size_t n_topics, const int32_t *keys,
                                              const int64_t *offsets, uint32_t n, uint8_t *skip)
{
    memset(skip, 0, n);
    if (!pr_sink_trainer_checkpoint_mode(s))
        return 0;
    trainer_sink *t = (trainer_sink *)s;
    uint32_t k = 0;
    pthread_mutex_lock(&t->mu);
    if (t->resume.n) {
        for (uint32_t r = 0; r < n; r++) {
            int ti = PR_PART_KEY_TOPIC(keys[r]);
            const char *topic = (size_t)ti < n_topics && topics ? topics[ti] : "";
            if (pr__posset_covers(&t->resume, topic, PR_PART_KEY_PARTITION(keys[r]), offsets[r],
                                  offsets[r])) {
                skip[r] = 1;
                k++;
            }
        }
    }
    pthread_mutex_unlock(&t->mu);
    return k;
}

const pr_sink_ops pr_sink_trainer_ops = {
    .name = "trainer",
    .doc = "TCP stream to trainers: credit window, ack by sequence, redelivery to another trainer",
    .new_ = pr__trainer_new,
    .send = pr__trainer_send,
    .poll = pr__trainer_poll,
    .ready = pr__trainer_ready,
    .get_stats = pr__trainer_stats,
    .free_ = pr__trainer_free,
    /* Capabilities: readers ack, unacked batches go to another trainer,
     * checkpoint delivery, a listening port, encoding on the I/O thread. */
    .enabled_off = offsetof(pr_sinks_cfg, trainer.enabled),
    .caps = PR_SINK_CAP_ACKS | PR_SINK_CAP_REDELIVERY | PR_SINK_CAP_CHECKPOINT |
            PR_SINK_CAP_LISTENER | PR_SINK_CAP_ENCODES,
    .port = pr_sink_trainer_port,
    .buffered_bytes = pr_sink_trainer_buffered_bytes,
    .checkpoint_mode = pr_sink_trainer_checkpoint_mode,
    .resume_known = pr_sink_trainer_resume_known,
    .resume_filter = pr_sink_trainer_resume_filter,
};
