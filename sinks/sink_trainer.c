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
 * protobuf (header + b->pb), no extra copy.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pr_grow.h"
#include "pr_hostport.h"
#include "trainer_wire.h"
#include "pr_log.h"
#include "pr_sink.h"
#include "sink_acks.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

#define NS_PER_MS 1000000LL
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
    bool subscribed;
    bool closing; /* stop reading, close once the out queue is written */
    bool dead;
    uint32_t window;
    inflight *fl;
    size_t n_fl, cap_fl;
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

    int lfd;
    int wake[2];
    int port;
    pthread_t th;
    bool started;
    int stop;

    pthread_mutex_t mu;
    /* under mu */
    pr_batch **queue; /* not yet given to a trainer, sorted by seq */
    size_t qlen, qcap;
    pr__acks acked; /* under mu */
    uint64_t n_assigned; /* batches in trainers' in-flight lists */
    pr_sink_stats st;
    uint64_t bytes_sent; /* atomic, outside mu: updated on every write */

    /* I/O thread only */
    tclient *clients;
    uint64_t next_client_id;
    uint64_t rr;
} trainer_sink;

/* ---------------------------------------------------------------- queue (under mu) */

static int queue_insert(trainer_sink *t, pr_batch *b)
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

static void wake(trainer_sink *t)
{
    char c = 1;
    ssize_t r = write(t->wake[1], &c, 1);
    (void)r; /* EAGAIN: a wake-up is already pending */
}

/* ---------------------------------------------------------------- clients (I/O thread) */

static void oq_push(tclient *c, out_item *it)
{
    it->next = NULL;
    if (c->oq_tail)
        c->oq_tail->next = it;
    else
        c->oq_head = it;
    c->oq_tail = it;
}

static void item_free(out_item *it)
{
    pr_batch_unref(it->ref);
    free(it->owned);
    free(it);
}

static int send_ctrl(tclient *c, const Piperec__Trainer__V1__Frame *f)
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
    oq_push(c, it);
    return 0;
}

static void send_error(tclient *c, Piperec__Trainer__V1__Error__Code code, const char *msg)
{
    Piperec__Trainer__V1__Error e = PIPEREC__TRAINER__V1__ERROR__INIT;
    e.code = code;
    e.message = (char *)msg;
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ERROR;
    f.error = &e;
    (void)send_ctrl(c, &f);
    c->closing = true;
    pr_warn("trainer sink: client %s (#%llu): %s", c->client_id, (unsigned long long)c->id, msg);
}

static int send_batch(trainer_sink *t, tclient *c, pr_batch *b)
{
    out_item *it = calloc(1, sizeof(*it));
    if (!it)
        return PR_ENOMEM;
    if (pr_grow((void **)&c->fl, &c->cap_fl, c->n_fl + 1, sizeof(*c->fl)) < 0) {
        free(it);
        return PR_ENOMEM;
    }
    it->hlen = pr__batch_frame_header(b, it->hdr);
    it->ref = pr_batch_ref(b);
    it->body = b->pb;
    it->blen = b->pb_len;
    oq_push(c, it);
    c->fl[c->n_fl++] = (inflight){b->seq, b, pr_clock_mono_ns(t->clock)};
    return 0;
}

/* Give queued batches to trainers with credit, round robin. Takes mu. */
static void dispatch(trainer_sink *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->qlen) {
        size_t n = 0;
        for (tclient *c = t->clients; c; c = c->next)
            n++;
        tclient *pick = NULL;
        for (size_t k = 0; k < n && !pick; k++) {
            size_t want = (size_t)((t->rr + k) % n), i = 0;
            for (tclient *c = t->clients; c; c = c->next, i++)
                if (i == want) {
                    if (c->subscribed && !c->closing && !c->dead && c->n_fl < c->window)
                        pick = c;
                    break;
                }
        }
        if (!pick)
            break;
        t->rr++;
        pr_batch *b = t->queue[0];
        if (send_batch(t, pick, b) < 0)
            break;
        memmove(t->queue, t->queue + 1, (t->qlen - 1) * sizeof(*t->queue));
        t->qlen--;
        t->n_assigned++;
    }
    pthread_mutex_unlock(&t->mu);
}

/* A trainer is gone: its unacked batches go back to the queue. */
static void client_drop(trainer_sink *t, tclient *c)
{
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < c->n_fl; i++) {
        if (queue_insert(t, c->fl[i].b) < 0) {
            pr_err("trainer sink: out of memory requeueing batch %llu",
                   (unsigned long long)c->fl[i].seq);
            pr_batch_unref(c->fl[i].b);
        }
        t->n_assigned--;
    }
    t->st.redeliveries += c->n_fl;
    if (c->subscribed)
        t->st.clients--;
    pthread_mutex_unlock(&t->mu);
    if (c->n_fl)
        pr_warn("trainer sink: client %s (#%llu) left with %zu unacked batches; they go to the "
                "next trainer",
                c->client_id, (unsigned long long)c->id, c->n_fl);
    else
        pr_info("trainer sink: client %s (#%llu) disconnected", c->client_id,
                (unsigned long long)c->id);
    c->n_fl = 0;
    close(c->fd);
    while (c->oq_head) {
        out_item *it = c->oq_head;
        c->oq_head = it->next;
        item_free(it);
    }
    free(c->fl);
    free(c->rbuf);
    free(c);
}

static void handle_subscribe(trainer_sink *t, tclient *c, const Piperec__Trainer__V1__Subscribe *s)
{
    char msg[256];
    if (c->subscribed) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL, "already subscribed");
        return;
    }
    snprintf(c->client_id, sizeof(c->client_id), "%s",
             s->client_id && *s->client_id ? s->client_id : "anonymous");
    if (s->protocol_version != PR_TRAINER_PROTOCOL_VERSION) {
        snprintf(msg, sizeof(msg), "protocol version %u not supported (server speaks %d)",
                 s->protocol_version, PR_TRAINER_PROTOCOL_VERSION);
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__UNSUPPORTED_VERSION, msg);
        return;
    }
    if (!s->pipeline || strcmp(s->pipeline, t->pipeline)) {
        snprintf(msg, sizeof(msg), "unknown pipeline '%s' (this server streams '%s')",
                 s->pipeline ? s->pipeline : "", t->pipeline);
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__UNKNOWN_PIPELINE, msg);
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
    Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
    f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK;
    f.subscribe_ok = &ok;
    if (send_ctrl(c, &f) < 0) {
        c->dead = true;
        return;
    }
    c->subscribed = true;
    pthread_mutex_lock(&t->mu);
    t->st.clients++;
    pthread_mutex_unlock(&t->mu);
    pr_info("trainer sink: client %s (#%llu) subscribed to %s with %u credits", c->client_id,
            (unsigned long long)c->id, t->pipeline, c->window);
}

static void handle_ack(trainer_sink *t, tclient *c, const uint64_t *seqs, size_t n)
{
    pthread_mutex_lock(&t->mu);
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

static void handle_frame(trainer_sink *t, tclient *c, const uint8_t *data, size_t len)
{
    const uint8_t *bp;
    size_t bl;
    Piperec__Trainer__V1__Frame *f;
    if (pr__frame_parse(data, len, &bp, &bl, &f) < 0) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__BAD_FRAME, "frame does not parse");
        return;
    }
    if (!f) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL, "clients do not send batches");
        return;
    }
    if (!c->subscribed && f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE &&
        f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_PING &&
        f->msg_case != PIPEREC__TRAINER__V1__FRAME__MSG_PONG) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                   "first message must be Subscribe");
        pr__frame_free(f);
        return;
    }
    switch (f->msg_case) {
    case PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE:
        handle_subscribe(t, c, f->subscribe);
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ACK:
        handle_ack(t, c, f->ack->sequences, f->ack->n_sequences);
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
        (void)send_ctrl(c, &r);
        break;
    }
    case PIPEREC__TRAINER__V1__FRAME__MSG_PONG:
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
        pr_warn("trainer sink: client %s (#%llu) reported error %d: %s", c->client_id,
                (unsigned long long)c->id, (int)f->error->code, f->error->message);
        c->dead = true;
        break;
    default:
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__PROTOCOL,
                   "unexpected message from a client");
        break;
    }
    pr__frame_free(f);
}

static void client_read(trainer_sink *t, tclient *c)
{
    /* Frames that arrived before EOF/reset are still handled (a client's
     * last acks often come in the same read as its FIN). */
    bool gone = false;
    for (;;) {
        if (c->rcap - c->rlen < 4096) {
            size_t nc = c->rcap ? c->rcap * 2 : 8192;
            uint8_t *n = realloc(c->rbuf, nc);
            if (!n) {
                c->dead = true;
                return;
            }
            c->rbuf = n;
            c->rcap = nc;
        }
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, 0);
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
    }
    size_t pos = 0;
    while (!c->closing && !c->dead && c->rlen - pos >= 4) {
        uint32_t n;
        memcpy(&n, c->rbuf + pos, 4);
        if (n > PR__FRAME_MAX_CTRL) {
            send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__BAD_FRAME, "frame too large");
            break;
        }
        if (c->rlen - pos - 4 < n)
            break;
        handle_frame(t, c, c->rbuf + pos + 4, n);
        pos += 4 + (size_t)n;
    }
    if (pos) {
        memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
        c->rlen -= pos;
    }
    if (gone)
        c->dead = true;
}

static void client_flush(trainer_sink *t, tclient *c)
{
    while (c->oq_head && !c->dead) {
        out_item *it = c->oq_head;
        struct iovec iov[2];
        int n = 0;
        size_t total = it->hlen + it->blen;
        if (it->done < it->hlen)
            iov[n++] = (struct iovec){it->hdr + it->done, it->hlen - it->done};
        size_t boff = it->done > it->hlen ? it->done - it->hlen : 0;
        iov[n++] = (struct iovec){(void *)(it->body + boff), it->blen - boff};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
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
            return;
        c->oq_head = it->next;
        if (!c->oq_head)
            c->oq_tail = NULL;
        item_free(it);
    }
    if (!c->oq_head && c->closing)
        c->dead = true;
}

static void accept_clients(trainer_sink *t)
{
    for (;;) {
        int fd = accept4(t->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        tclient *c = calloc(1, sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->id = ++t->next_client_id;
        snprintf(c->client_id, sizeof(c->client_id), "unsubscribed");
        c->last_rx_ns = c->last_ping_ns = pr_clock_mono_ns(t->clock);
        c->next = t->clients;
        t->clients = c;
    }
}

static void check_timers(trainer_sink *t, tclient *c, int64_t now)
{
    if (c->closing || c->dead || !c->subscribed)
        return;
    if (t->ack_timeout_ns > 0 && c->n_fl && now - c->fl[0].sent_ns > t->ack_timeout_ns) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT,
                   "batch not acknowledged within the ack timeout");
        return;
    }
    if (now - c->last_rx_ns > 6 * t->keepalive_ns) {
        send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__TIMEOUT,
                   "no message from the client within 6 keepalive intervals");
        return;
    }
    if (now - c->last_ping_ns >= t->keepalive_ns) {
        Piperec__Trainer__V1__Ping ping = PIPEREC__TRAINER__V1__PING__INIT;
        ping.nonce = (uint64_t)now;
        ping.time_ms = pr_clock_wall_ms(t->clock);
        Piperec__Trainer__V1__Frame f = PIPEREC__TRAINER__V1__FRAME__INIT;
        f.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_PING;
        f.ping = &ping;
        (void)send_ctrl(c, &f);
        c->last_ping_ns = now;
    }
}

static void *io_thread(void *arg)
{
    trainer_sink *t = arg;
    struct pollfd *pfd = NULL;
    tclient **pc = NULL;
    size_t cap = 0;
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        size_t n = 2;
        for (tclient *c = t->clients; c; c = c->next)
            n++;
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
        pfd[0] = (struct pollfd){t->wake[0], POLLIN, 0};
        pfd[1] = (struct pollfd){t->lfd, POLLIN, 0};
        size_t i = 2;
        for (tclient *c = t->clients; c; c = c->next, i++) {
            pc[i] = c;
            pfd[i] = (struct pollfd){
                c->fd, (short)((c->closing ? 0 : POLLIN) | (c->oq_head ? POLLOUT : 0)), 0};
        }
        int rc = poll(pfd, n, 100);
        if (rc < 0 && errno != EINTR)
            break;
        if (pfd[0].revents & POLLIN) {
            char buf[256];
            while (read(t->wake[0], buf, sizeof(buf)) > 0)
                ;
        }
        if (pfd[1].revents & POLLIN)
            accept_clients(t);
        for (size_t k = 2; k < n; k++) {
            tclient *c = pc[k];
            if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR))
                client_read(t, c);
            if (pfd[k].revents & POLLOUT)
                client_flush(t, c);
        }
        int64_t now = pr_clock_mono_ns(t->clock);
        for (tclient *c = t->clients; c; c = c->next)
            check_timers(t, c, now);
        /* Reap dead clients first so their batches are dealt out again right away. */
        for (tclient **pp = &t->clients; *pp;) {
            tclient *c = *pp;
            if (c->dead) {
                *pp = c->next;
                client_drop(t, c);
            } else {
                pp = &c->next;
            }
        }
        dispatch(t);
        for (tclient *c = t->clients; c; c = c->next)
            client_flush(t, c);
    }
    /* Shutdown: tell subscribed clients, best effort. */
    for (tclient *c = t->clients; c; c = c->next) {
        if (c->subscribed && !c->closing) {
            send_error(c, PIPEREC__TRAINER__V1__ERROR__CODE__SHUTDOWN, "server is stopping");
            client_flush(t, c);
        }
    }
    free(pfd);
    free(pc);
    return NULL;
}

/* ---------------------------------------------------------------- ops */

static void names_free(char **v, size_t n)
{
    if (!v)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char **names_dup(const char *const *src, size_t n)
{
    if (!src || !n)
        return NULL;
    char **v = calloc(n, sizeof(char *));
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = strdup(src[i] ? src[i] : ""))) {
            names_free(v, n);
            return NULL;
        }
    }
    return v;
}

static void trainer_free(pr_sink *s);

static int trainer_new(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t errstr_size)
{
    trainer_sink *t = calloc(1, sizeof(*t));
    if (!t)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "trainer sink: out of memory");
    t->base.ops = &pr_sink_trainer_ops;
    t->lfd = -1;
    t->wake[0] = t->wake[1] = -1;
    t->port = -1;
    pthread_mutex_init(&t->mu, NULL);
    snprintf(t->pipeline, sizeof(t->pipeline), "%s", cfg->pipeline ? cfg->pipeline : "");
    t->n_dense = cfg->n_dense;
    t->n_sparse = cfg->n_sparse;
    t->sparse_width = cfg->sparse_width;
    t->dense_names = names_dup(cfg->dense_names, cfg->n_dense);
    t->sparse_names = names_dup(cfg->sparse_names, cfg->n_sparse);
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

    const char *listen_s = tc.listen;
    char host[256];
    uint16_t port;
    int err;
    if (pr_hostport_parse(listen_s, host, sizeof(host), &port) < 0) {
        err = pr_seterr(errstr, errstr_size, PR_EINVAL,
                        "sinks.trainer.listen: '%s' is not host:port", listen_s);
        goto fail;
    }
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int gai = getaddrinfo(host[0] ? host : NULL, portstr, &hints, &ai);
    if (gai) {
        err = pr_seterr(errstr, errstr_size, PR_EINVAL, "sinks.trainer.listen: %s: %s", listen_s,
                        gai_strerror(gai));
        goto fail;
    }
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
    if (t->lfd < 0) {
        err =
            pr_seterr(errstr, errstr_size, PR_EIO, "sinks.trainer.listen: cannot listen on %s: %s",
                      listen_s, strerror(last_errno));
        goto fail;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(t->lfd, (struct sockaddr *)&ss, &sl) == 0)
        t->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    if (pipe2(t->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        err = pr_seterr(errstr, errstr_size, PR_EIO, "trainer sink: pipe: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&t->th, NULL, io_thread, t) != 0) {
        err = pr_seterr(errstr, errstr_size, PR_EIO, "trainer sink: cannot start the I/O thread");
        goto fail;
    }
    t->started = true;
    pr_info("trainer sink: pipeline %s listening on %s (port %d)", t->pipeline, listen_s, t->port);
    *out = &t->base;
    return 0;
fail:
    trainer_free(&t->base);
    return err;
}

static int trainer_send(pr_sink *s, pr_batch *b)
{
    trainer_sink *t = (trainer_sink *)s;
    if (!b->pb)
        return PR_EINVAL;
    pthread_mutex_lock(&t->mu);
    if (t->max_queued && t->qlen + t->n_assigned >= t->max_queued) {
        t->st.batches_refused++;
        pthread_mutex_unlock(&t->mu);
        return PR_EAGAIN;
    }
    int err = queue_insert(t, pr_batch_ref(b));
    if (err < 0)
        pr_batch_unref(b);
    else
        t->st.batches_sent++;
    pthread_mutex_unlock(&t->mu);
    wake(t);
    return err;
}

static int trainer_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
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

static bool trainer_ready(pr_sink *s)
{
    trainer_sink *t = (trainer_sink *)s;
    return t->started && t->lfd >= 0;
}

static void trainer_stats(pr_sink *s, pr_sink_stats *st)
{
    trainer_sink *t = (trainer_sink *)s;
    pthread_mutex_lock(&t->mu);
    *st = t->st;
    st->bytes_sent = __atomic_load_n(&t->bytes_sent, __ATOMIC_RELAXED);
    st->queued_batches = t->qlen + t->n_assigned;
    pthread_mutex_unlock(&t->mu);
}

static void trainer_free(pr_sink *s)
{
    trainer_sink *t = (trainer_sink *)s;
    if (!t)
        return;
    if (t->started) {
        __atomic_store_n(&t->stop, 1, __ATOMIC_RELEASE);
        wake(t);
        pthread_join(t->th, NULL);
    }
    while (t->clients) {
        tclient *c = t->clients;
        t->clients = c->next;
        client_drop(t, c);
    }
    for (size_t i = 0; i < t->qlen; i++)
        pr_batch_unref(t->queue[i]);
    free(t->queue);
    pr__acks_fini(&t->acked);
    if (t->lfd >= 0)
        close(t->lfd);
    if (t->wake[0] >= 0)
        close(t->wake[0]);
    if (t->wake[1] >= 0)
        close(t->wake[1]);
    names_free(t->dense_names, t->n_dense);
    names_free(t->sparse_names, t->n_sparse);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int pr_sink_trainer_port(pr_sink *s)
{
    if (!s || s->ops != &pr_sink_trainer_ops)
        return -1;
    return ((trainer_sink *)s)->port;
}

const pr_sink_ops pr_sink_trainer_ops = {
    .name = "trainer",
    .doc = "TCP stream to trainers: credit window, ack by sequence, redelivery to another trainer",
    .new_ = trainer_new,
    .send = trainer_send,
    .poll = trainer_poll,
    .ready = trainer_ready,
    .get_stats = trainer_stats,
    .free_ = trainer_free,
};
