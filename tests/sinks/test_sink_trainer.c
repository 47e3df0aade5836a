/*
 * test_sink_trainer.c — the trainer sink over real loopback TCP with the C
 * client (pr_trainer_client): exactly-once delivery without failures, the
 * credit window, redelivery of a vanished trainer's unacked batches to the
 * next trainer, two trainers sharing one pipeline, and handshake errors.
 *
 * Waiting for the sink's I/O thread is condition-based: poll the state with
 * a short poll(2) timeout until it holds or a generous deadline passes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_sink.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"

typedef struct tfx {
    pr_sinkset *ss;
    pr_sink *sink;
    char addr[64];
    uint64_t acked[256];
    size_t n_acked;
    uint64_t next_seq;
} tfx;

static tfx *tfx_new_timeout(uint32_t max_window, int64_t ack_timeout_ms)
{
    tfx *f = calloc(1, sizeof(*f));
    const char *dn[] = {"I1", "I2"}, *sn[] = {"C1"};
    pr_sink_cfg cfg = {.pipeline = "criteo",
                       .n_dense = 2,
                       .n_sparse = 1,
                       .sparse_width = 4,
                       .dense_names = dn,
                       .sparse_names = sn};
    cfg.trainer.listen = "127.0.0.1:0";
    cfg.trainer.max_unacked_batches = max_window;
    cfg.trainer.ack_timeout_ms = ack_timeout_ms;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &f->sink, err, sizeof(err)), 0);
    f->ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(f->ss, f->sink), 0);
    assert_true(pr_sinkset_ready(f->ss));
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", pr_sink_port(f->sink));
    f->next_seq = 1;
    return f;
}

static tfx *tfx_new(uint32_t max_window)
{
    return tfx_new_timeout(max_window, 0);
}

static void tfx_free(tfx *f)
{
    pr_sinkset_free(f->ss);
    free(f);
}

static void send_batches(tfx *f, int n)
{
    for (int i = 0; i < n; i++) {
        pr_batch *b = pr_batch_new("criteo", 3, 2, 1, 4);
        b->seq = f->next_seq++;
        for (int r = 0; r < 3; r++) {
            b->labels[r] = (int32_t)b->seq;
            ((int32_t *)b->sparse)[r] = (int32_t)(b->seq * 10 + (uint64_t)r);
        }
        assert_int_equal(pr_sinkset_send(f->ss, b), 0);
        pr_batch_unref(b);
    }
}

static void on_ack(void *opaque, uint64_t seq)
{
    tfx *f = opaque;
    f->acked[f->n_acked++] = seq;
}

/* Poll the sink set until `n` acks arrived in total. */
static void wait_acks(tfx *f, size_t n)
{
    for (int i = 0; i < 2000 && f->n_acked < n; i++) {
        pr_sinkset_poll(f->ss, on_ack, f);
        if (f->n_acked < n)
            poll(NULL, 0, 5);
    }
    assert_int_equal(f->n_acked, n);
}

static void wait_clients(tfx *f, uint64_t n)
{
    pr_sink_stats st;
    for (int i = 0; i < 2000; i++) {
        pr_sink_get_stats(f->sink, &st);
        if (st.clients == n)
            return;
        poll(NULL, 0, 5);
    }
    fail_msg("expected %llu subscribed trainers, have %llu", (unsigned long long)n,
             (unsigned long long)st.clients);
}

static pr_trainer_client *connect_client(tfx *f, uint32_t credits, const char *id)
{
    pr_trainer_client_opts o = {.connect = f->addr,
                                .pipeline = "criteo",
                                .credits = credits,
                                .client_id = id,
                                .timeout_ms = 5000};
    pr_trainer_client *c;
    char err[256];
    int rc = pr_trainer_client_open(&o, &c, err, sizeof(err));
    if (rc)
        fail_msg("connect: %s", err);
    return c;
}

/* Receive one batch (5 s deadline), check its content, return its seq. */
static uint64_t recv_one(pr_trainer_client *c)
{
    pr_batch_view v;
    char err[256];
    int rc = pr_trainer_client_next(c, &v, 5000, err, sizeof(err));
    if (rc != 1)
        fail_msg("next: rc %d: %s", rc, rc < 0 ? err : "timeout");
    assert_int_equal(v.rows, 3);
    assert_int_equal(v.n_dense, 2);
    int32_t lab, sp;
    memcpy(&lab, v.labels, 4);
    memcpy(&sp, v.sparse + 8, 4);
    assert_int_equal((uint64_t)lab, v.seq);
    assert_int_equal((uint64_t)sp, v.seq * 10 + 2);
    uint64_t seq = v.seq;
    pr_batch_view_fini(&v);
    return seq;
}

static void test_exactly_once(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    send_batches(f, 10); /* queued before any trainer exists */
    pr_trainer_client *c = connect_client(f, 4, "t1");
    const pr_trainer_info *in = pr_trainer_client_info(c);
    assert_int_equal(in->n_dense, 2);
    assert_int_equal(in->credits, 4);
    assert_string_equal(in->sparse_names[0], "C1");
    send_batches(f, 10);
    uint64_t last = 0;
    for (int i = 0; i < 20; i++) {
        uint64_t s = recv_one(c);
        assert_true(s > last);
        last = s;
        assert_int_equal(pr_trainer_client_ack(c, s), 0);
    }
    assert_int_equal(last, 20);
    wait_acks(f, 20);
    int seen[21] = {0};
    for (size_t i = 0; i < f->n_acked; i++)
        seen[f->acked[i]]++;
    for (int s = 1; s <= 20; s++)
        assert_int_equal(seen[s], 1);
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    assert_int_equal(st.batches_sent, 20);
    assert_int_equal(st.batches_acked, 20);
    assert_int_equal(st.redeliveries, 0);
    assert_int_equal(st.queued_batches, 0);
    pr_trainer_client_close(c);
    tfx_free(f);
}

static void test_credit_window(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    pr_trainer_client *c = connect_client(f, 3, "t1");
    send_batches(f, 6);
    for (int i = 0; i < 3; i++)
        assert_int_equal(recv_one(c), (uint64_t)i + 1);
    /* Window full: nothing more arrives until an ack. */
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_trainer_client_next(c, &v, 200, err, sizeof(err)), 0);
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    assert_int_equal(st.queued_batches, 6);
    assert_int_equal(pr_trainer_client_ack(c, 2), 0);
    assert_int_equal(recv_one(c), 4);
    assert_int_equal(pr_trainer_client_next(c, &v, 200, err, sizeof(err)), 0);
    wait_acks(f, 1);
    assert_int_equal(f->acked[0], 2);
    pr_trainer_client_close(c);
    tfx_free(f);
}

static void test_window_capped_by_server(void **state)
{
    (void)state;
    tfx *f = tfx_new(2);
    pr_trainer_client *c = connect_client(f, 100, "greedy");
    assert_int_equal(pr_trainer_client_info(c)->credits, 2);
    pr_trainer_client_close(c);
    tfx_free(f);
}

static void test_redelivery_after_disconnect(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    pr_trainer_client *a = connect_client(f, 4, "a");
    send_batches(f, 8);
    for (int i = 0; i < 4; i++)
        assert_int_equal(recv_one(a), (uint64_t)i + 1);
    assert_int_equal(pr_trainer_client_ack(a, 1), 0);
    assert_int_equal(pr_trainer_client_ack(a, 2), 0);
    wait_acks(f, 2);
    pr_trainer_client_close(a); /* dies holding 3 and 4 */
    wait_clients(f, 0);
    pr_trainer_client *b = connect_client(f, 4, "b");
    for (uint64_t want = 3; want <= 8; want++) {
        uint64_t s = recv_one(b);
        assert_int_equal(s, want); /* redelivered first, in order, then the rest */
        assert_int_equal(pr_trainer_client_ack(b, s), 0);
    }
    wait_acks(f, 8);
    int seen[9] = {0};
    for (size_t i = 0; i < f->n_acked; i++)
        seen[f->acked[i]]++;
    for (int s = 1; s <= 8; s++)
        assert_int_equal(seen[s], 1);
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    /* 3 and 4 at least; 5 and 6 too when the server refilled a's window first. */
    assert_true(st.redeliveries >= 2 && st.redeliveries <= 4);
    pr_trainer_client_close(b);
    tfx_free(f);
}

/* The reported duplicate: trainer A takes batches 1-8 (reads only 1-3, acks
 * none) and goes away; the next trainer must get every batch exactly once,
 * the redelivered ones first and in order, and nothing again after acking
 * it. The window of 4 makes the sink refill after each ack, which is where a
 * batch queued twice would show up. */
static void test_redelivery_each_batch_once(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    send_batches(f, 8); /* queued first: all 8 go out with A's SubscribeOk */
    pr_trainer_client *a = connect_client(f, 8, "a");
    for (uint64_t want = 1; want <= 3; want++)
        assert_int_equal(recv_one(a), want);
    pr_trainer_client_close(a);
    wait_clients(f, 0);
    send_batches(f, 4); /* arrive while no trainer is connected */
    pr_trainer_client *b = connect_client(f, 4, "b");
    for (uint64_t want = 1; want <= 12; want++) {
        assert_int_equal(recv_one(b), want);
        assert_int_equal(pr_trainer_client_ack(b, want), 0);
    }
    wait_acks(f, 12);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_trainer_client_next(b, &v, 200, err, sizeof(err)), 0); /* no repeat */
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    assert_int_equal(st.redeliveries, 8);
    assert_int_equal(st.batches_acked, 12);
    assert_int_equal(st.errors, 0); /* no ack for a batch b did not hold */
    assert_int_equal(st.queued_batches, 0);
    pr_trainer_client_close(b);
    tfx_free(f);
}

static void test_two_trainers_share(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    pr_trainer_client *c[2] = {connect_client(f, 2, "a"), connect_client(f, 2, "b")};
    wait_clients(f, 2);
    const int N = 30;
    send_batches(f, N);
    int owner[31];
    memset(owner, -1, sizeof(owner));
    int got[2] = {0, 0}, total = 0;
    for (int spins = 0; total < N && spins < 10000; spins++) {
        for (int k = 0; k < 2; k++) {
            pr_batch_view v;
            char err[256];
            int rc = pr_trainer_client_next(c[k], &v, 10, err, sizeof(err));
            assert_true(rc >= 0);
            if (rc == 1) {
                assert_true(v.seq >= 1 && v.seq <= (uint64_t)N);
                assert_int_equal(owner[v.seq], -1); /* each batch to exactly one trainer */
                owner[v.seq] = k;
                got[k]++;
                total++;
                assert_int_equal(pr_trainer_client_ack(c[k], v.seq), 0);
                pr_batch_view_fini(&v);
            }
        }
    }
    assert_int_equal(total, N);
    assert_true(got[0] > 0 && got[1] > 0);
    wait_acks(f, (size_t)N);
    pr_trainer_client_close(c[0]);
    pr_trainer_client_close(c[1]);
    tfx_free(f);
}

static void test_ack_timeout_redelivers(void **state)
{
    (void)state;
    tfx *f = tfx_new_timeout(64, 100);
    pr_trainer_client *slow = connect_client(f, 1, "slow");
    send_batches(f, 2);
    assert_int_equal(recv_one(slow), 1);
    /* No ack: after 100 ms the server says TIMEOUT and hangs up. */
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_trainer_client_next(slow, &v, 5000, err, sizeof(err)), PR_ESTATE);
    assert_non_null(strstr(err, "ack timeout"));
    pr_trainer_client_close(slow);
    wait_clients(f, 0);
    pr_trainer_client *c = connect_client(f, 4, "next");
    for (uint64_t want = 1; want <= 2; want++) {
        assert_int_equal(recv_one(c), want);
        assert_int_equal(pr_trainer_client_ack(c, want), 0);
    }
    wait_acks(f, 2);
    pr_trainer_client_close(c);
    tfx_free(f);
}

static void test_unknown_pipeline(void **state)
{
    (void)state;
    tfx *f = tfx_new(64);
    pr_trainer_client_opts o = {.connect = f->addr, .pipeline = "nope", .timeout_ms = 5000};
    pr_trainer_client *c;
    char err[256];
    assert_int_equal(pr_trainer_client_open(&o, &c, err, sizeof(err)), PR_ESTATE);
    assert_non_null(strstr(err, "unknown pipeline 'nope'"));
    o.pipeline = "criteo";
    o.connect = "127.0.0.1:1"; /* nothing listens there */
    assert_int_equal(pr_trainer_client_open(&o, &c, err, sizeof(err)), PR_EIO);
    tfx_free(f);
}

/* ---------------------------------------------------------------- raw-socket trainer */

/* A trainer written against the wire format only (protobuf-c, no
 * pr_trainer_client), so a test controls exactly when bytes and FIN go out. */
static int raw_connect(tfx *f, uint32_t credits)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)pr_sink_port(f->sink))};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    struct timeval tv = {5, 0}; /* a reply that never comes fails the test, not hangs it */
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    Piperec__Trainer__V1__Subscribe sub = PIPEREC__TRAINER__V1__SUBSCRIBE__INIT;
    sub.protocol_version = PR_TRAINER_PROTOCOL_VERSION;
    sub.pipeline = "criteo";
    sub.credits = credits;
    sub.client_id = "raw";
    Piperec__Trainer__V1__Frame fr = PIPEREC__TRAINER__V1__FRAME__INIT;
    fr.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE;
    fr.subscribe = &sub;
    uint8_t buf[256];
    uint32_t n = (uint32_t)piperec__trainer__v1__frame__pack(&fr, buf + 4);
    memcpy(buf, &n, 4); /* little-endian length prefix (x86/ARM hosts) */
    assert_int_equal(write(fd, buf, 4 + n), (ssize_t)(4 + n));
    return fd;
}

static void raw_read_all(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            fail_msg("raw trainer: read: %s", r ? strerror(errno) : "EOF");
        p += r;
        n -= (size_t)r;
    }
}

/* Next Frame from the server (the caller frees it). */
static Piperec__Trainer__V1__Frame *raw_next(int fd)
{
    uint32_t n;
    raw_read_all(fd, (uint8_t *)&n, 4);
    uint8_t *body = malloc(n ? n : 1);
    raw_read_all(fd, body, n);
    Piperec__Trainer__V1__Frame *fr = piperec__trainer__v1__frame__unpack(NULL, n, body);
    free(body);
    assert_non_null(fr);
    return fr;
}

/* Regression: a trainer that sends its last acks and closes at once. The
 * acks and the FIN arrive in the same read on the server; the sink used to
 * see EOF and drop the client without handling the frames before it, so
 * those batches were never acked and went to the next trainer again.
 * TCP_CORK makes the acks and the FIN leave in one segment, so the server
 * always finds both queued together. */
static void test_acks_then_close_raw(void **state)
{
    (void)state;
    enum { N = 12 };
    tfx *f = tfx_new(64);
    send_batches(f, N);
    int fd = raw_connect(f, N);
    uint64_t seqs[N];
    size_t got = 0;
    while (got < N) {
        Piperec__Trainer__V1__Frame *fr = raw_next(fd);
        if (fr->msg_case == PIPEREC__TRAINER__V1__FRAME__MSG_ERROR)
            fail_msg("server error: %s", fr->error->message);
        if (fr->msg_case == PIPEREC__TRAINER__V1__FRAME__MSG_BATCH)
            seqs[got++] = fr->batch->sequence;
        piperec__trainer__v1__frame__free_unpacked(fr, NULL);
    }
    int one = 1;
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)), 0);
    uint8_t out[N * 32];
    size_t len = 0;
    for (size_t i = 0; i < N; i++) {
        Piperec__Trainer__V1__Ack ack = PIPEREC__TRAINER__V1__ACK__INIT;
        ack.n_sequences = 1;
        ack.sequences = &seqs[i];
        Piperec__Trainer__V1__Frame fr = PIPEREC__TRAINER__V1__FRAME__INIT;
        fr.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ACK;
        fr.ack = &ack;
        uint32_t n = (uint32_t)piperec__trainer__v1__frame__pack(&fr, out + len + 4);
        memcpy(out + len, &n, 4);
        len += 4 + n;
    }
    assert_int_equal(write(fd, out, len), (ssize_t)len);
    close(fd); /* nothing unread: FIN, not RST */
    wait_clients(f, 0);
    wait_acks(f, N);
    int seen[N + 1] = {0};
    for (size_t i = 0; i < f->n_acked; i++)
        seen[f->acked[i]]++;
    for (int s = 1; s <= N; s++)
        assert_int_equal(seen[s], 1);
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    assert_int_equal(st.batches_acked, N);
    assert_int_equal(st.redeliveries, 0);
    assert_int_equal(st.queued_batches, 0);
    tfx_free(f);
}

/* Regression, client side: pr_trainer_client_close with batches still
 * unread used to close() at once, which makes the kernel send RST, and the
 * server could lose the acks written just before. Now the client half-closes
 * and drains: every ack counts, and only the unread batches go round again. */
static void test_client_close_with_unread_data(void **state)
{
    (void)state;
    enum { N = 6 };
    tfx *f = tfx_new(64);
    send_batches(f, 2 * N); /* queued first: all 2N go out with the SubscribeOk */
    pr_trainer_client *c = connect_client(f, 2 * N, "closer"); /* reads only N */
    for (uint64_t want = 1; want <= N; want++) {
        assert_int_equal(recv_one(c), want);
        assert_int_equal(pr_trainer_client_ack(c, want), 0);
    }
    pr_trainer_client_close(c);
    wait_clients(f, 0);
    wait_acks(f, N);
    for (size_t i = 0; i < f->n_acked; i++)
        assert_true(f->acked[i] >= 1 && f->acked[i] <= N);
    pr_sink_stats st;
    pr_sink_get_stats(f->sink, &st);
    assert_int_equal(st.batches_acked, N);
    assert_int_equal(st.redeliveries, N); /* exactly the unread ones */
    tfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exactly_once),
        cmocka_unit_test(test_credit_window),
        cmocka_unit_test(test_window_capped_by_server),
        cmocka_unit_test(test_redelivery_after_disconnect),
        cmocka_unit_test(test_redelivery_each_batch_once),
        cmocka_unit_test(test_two_trainers_share),
        cmocka_unit_test(test_ack_timeout_redelivers),
        cmocka_unit_test(test_unknown_pipeline),
        cmocka_unit_test(test_acks_then_close_raw),
        cmocka_unit_test(test_client_close_with_unread_data),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
