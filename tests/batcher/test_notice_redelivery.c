/*
 * test_notice_redelivery.c — recycled-index notices through a redelivery
 * (issue 19): a batch that goes to another trainer after the first left
 * without acknowledging it carries its notices with it, same numbers, same
 * rows. The real batcher feeds the real trainer sink over loopback TCP; an
 * engine stand-in (an LRU vocabulary of 4 indices per column over 11 values)
 * numbers a notice for every recycle. Trainer A takes a window of batches,
 * acknowledges a few and goes away holding the rest; trainer B then gets
 * everything else. The stream a trainer pair trains on (A's acknowledged
 * batches, then B's, in sequence order) must hold every batch once and
 * every notice number once, each in front of the first row of the new
 * value, and replaying it as a trainer would must find every index holding
 * one value between two of its notices. The batches A held and B got again
 * must carry byte-identical notices.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "bt_util.h"
#include "pr_sink.h"
#include "pr_trainer_client.h"

#define RD_ROWS    480
#define RD_BATCH   8
#define RD_CAP     4
#define RD_KEYS    11
#define RD_BATCHES (RD_ROWS / RD_BATCH)

/* One received batch, decoded enough to replay it. */
typedef struct rd_got {
    bool have;
    uint32_t rows;
    uint32_t id[RD_BATCH];
    int32_t idx[BT_NS][RD_BATCH];
    pr_recycled notes[RD_BATCH * BT_NS + 1];
    uint32_t n_notes;
} rd_got;

typedef struct rd {
    pr_batcher *b;
    pr_sinkset *ss;
    pr_sink *sink;
    pr_manual_clock mc;
    uint32_t rng, clock;
    int32_t key[BT_NS][RD_CAP];
    uint32_t last[BT_NS][RD_CAP];
    uint64_t number;
    int32_t row_key[RD_ROWS][BT_NS];
    size_t n_acked;
    rd_got a[RD_BATCHES + 1], bgot[RD_BATCHES + 1];
} rd;

static void rd_emit(void *opaque, pr_batch *b)
{
    rd *t = opaque;
    assert_int_equal(pr_sinkset_send(t->ss, b), 0);
}

static void rd_on_ack(void *opaque, uint64_t seq)
{
    rd *t = opaque;
    assert_int_equal(pr_batcher_ack(t->b, seq), 0);
    t->n_acked++;
}

static uint32_t rd_rand(rd *t)
{
    t->rng = t->rng * 1103515245u + 12345u;
    return (t->rng >> 8) & 0xffffff;
}

/* LRU index of `key` in column c; a recycle numbers a notice at block row r. */
static int32_t rd_lookup(rd *t, int c, int32_t key, uint32_t r, pr_recycled *n, uint32_t *nn)
{
    int32_t lru = 0;
    t->clock++;
    for (int32_t i = 0; i < RD_CAP; i++) {
        if (t->key[c][i] == key || t->key[c][i] < 0) {
            t->key[c][i] = key;
            t->last[c][i] = t->clock;
            return i;
        }
        if (t->last[c][i] < t->last[c][lru])
            lru = i;
    }
    t->key[c][lru] = key;
    t->last[c][lru] = t->clock;
    n[(*nn)++] = (pr_recycled){(uint32_t)c, r, lru, ++t->number};
    return lru;
}

/* Every row through the batcher in blocks of 16 (two partitions). */
static void rd_feed(rd *t)
{
    bt_io *io = bt_io_new(16);
    static pr_recycled notes[16 * BT_NS];
    for (uint32_t id = 0; id < RD_ROWS;) {
        bt_io_reset(io);
        uint32_t nn = 0;
        for (uint32_t r = 0; r < 16; r++, id++) {
            bt_row(io, (int32_t)(id % 2), id, 5, 0);
            io->out.dense[r] = (float)id;
            for (int c = 0; c < BT_NS; c++) {
                int32_t key = (int32_t)(rd_rand(t) % RD_KEYS);
                t->row_key[id][c] = key;
                ((int32_t *)io->out.sparse)[(size_t)c * io->out.cap + r] =
                    rd_lookup(t, c, key, r, notes, &nn);
            }
        }
        io->out.recycled = nn ? notes : NULL;
        io->out.n_recycled = nn;
        assert_int_equal(pr_batcher_add(t->b, &io->in, &io->out), 0);
    }
    pr_batcher_flush(t->b);
    bt_io_free(io);
}

static pr_trainer_client *rd_connect(rd *t, uint32_t credits, const char *id)
{
    char addr[64], err[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", pr_sink_port(t->sink));
    pr_trainer_client_opts o = {
        .connect = addr, .pipeline = "t", .credits = credits, .client_id = id, .timeout_ms = 5000};
    pr_trainer_client *c;
    if (pr_trainer_client_open(&o, &c, err, sizeof(err)))
        fail_msg("connect: %s", err);
    return c;
}

/* Receive one batch into got[seq]; returns its seq. */
static uint64_t rd_recv(pr_trainer_client *c, rd_got *got)
{
    pr_batch_view v;
    char err[256];
    int rc = pr_trainer_client_next(c, &v, 5000, err, sizeof(err));
    if (rc != 1)
        fail_msg("next: rc %d: %s", rc, rc < 0 ? err : "timeout");
    assert_true(v.seq >= 1 && v.seq <= RD_BATCHES && v.rows <= RD_BATCH);
    rd_got *g = &got[v.seq];
    assert_false(g->have); /* no trainer gets a batch twice */
    g->have = true;
    g->rows = v.rows;
    for (uint32_t i = 0; i < v.rows; i++) {
        float d;
        memcpy(&d, v.dense + (size_t)i * 4, 4);
        g->id[i] = (uint32_t)d;
        for (int c = 0; c < BT_NS; c++)
            memcpy(&g->idx[c][i], v.sparse + ((size_t)c * v.rows + i) * 4, 4);
    }
    assert_true(v.n_recycled <= RD_BATCH * BT_NS + 1);
    g->n_notes = v.n_recycled;
    if (v.n_recycled)
        memcpy(g->notes, v.recycled, (size_t)v.n_recycled * sizeof(pr_recycled));
    uint64_t seq = v.seq;
    pr_batch_view_fini(&v);
    return seq;
}

static void rd_wait_acks(rd *t, size_t n)
{
    for (int i = 0; i < 2000 && t->n_acked < n; i++) {
        pr_sinkset_poll(t->ss, rd_on_ack, t);
        if (t->n_acked < n)
            poll(NULL, 0, 5);
    }
    assert_int_equal(t->n_acked, n);
}

static void rd_wait_clients(rd *t, uint64_t n)
{
    pr_sink_stats st;
    for (int i = 0; i < 2000; i++) {
        pr_sink_get_stats(t->sink, &st);
        if (st.clients == n)
            return;
        poll(NULL, 0, 5);
    }
    fail_msg("expected %llu trainers", (unsigned long long)n);
}

/* Replay `stream[seq]` for seq 1..RD_BATCHES as a trainer. */
static void rd_replay(const rd *t, rd_got *const *stream)
{
    static uint8_t seen_note[RD_ROWS * BT_NS + 1], seen_row[RD_ROWS];
    memset(seen_note, 0, sizeof(seen_note));
    memset(seen_row, 0, sizeof(seen_row));
    int32_t held[BT_NS][RD_CAP];
    memset(held, 0xff, sizeof(held));
    for (uint32_t s = 1; s <= RD_BATCHES; s++) {
        const rd_got *g = stream[s];
        assert_non_null(g);
        uint32_t ni = 0;
        for (uint32_t i = 0; i < g->rows; i++) {
            for (; ni < g->n_notes && g->notes[ni].row <= i; ni++) {
                const pr_recycled *n = &g->notes[ni];
                assert_int_equal(n->row, i);
                assert_true(n->number >= 1 && n->number <= t->number);
                assert_int_equal(seen_note[n->number]++, 0);
                assert_int_equal(g->idx[n->col][i], n->index); /* the new value's first row */
                held[n->col][n->index] = -1;
            }
            assert_int_equal(seen_row[g->id[i]]++, 0);
            for (int c = 0; c < BT_NS; c++) {
                int32_t *h = &held[c][g->idx[c][i]];
                if (*h < 0)
                    *h = t->row_key[g->id[i]][c];
                assert_int_equal(*h, t->row_key[g->id[i]][c]);
            }
        }
        assert_int_equal(ni, g->n_notes);
    }
    for (uint64_t n = 1; n <= t->number; n++)
        assert_int_equal(seen_note[n], 1);
    for (uint32_t id = 0; id < RD_ROWS; id++)
        assert_int_equal(seen_row[id], 1);
}

static rd *rd_new(void)
{
    static rd t;
    memset(&t, 0, sizeof(t));
    t.rng = 4242;
    memset(t.key, 0xff, sizeof(t.key));
    pr_manual_clock_init(&t.mc, 1700000000000LL);
    const char *dn[] = {"I1", "I2", "I3"}, *sn[] = {"C1", "C2"};
    pr_sink_cfg sc = {.pipeline = "t",
                      .n_dense = BT_ND,
                      .n_sparse = BT_NS,
                      .sparse_width = 4,
                      .dense_names = dn,
                      .sparse_names = sn};
    sc.trainer.listen = "127.0.0.1:0";
    sc.trainer.max_unacked_batches = RD_BATCHES;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &sc, &t.sink, err, sizeof(err)), 0);
    t.ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(t.ss, t.sink), 0);
    pr_batcher_cfg bc = {.pipeline = "t",
                         .n_dense = BT_ND,
                         .n_sparse = BT_NS,
                         .sparse_width = 4,
                         .batch = {.size = RD_BATCH, .max_delay_ms = 1000},
                         .clock = &t.mc.clock,
                         .on_emit = rd_emit,
                         .opaque = &t};
    assert_int_equal(pr_batcher_new(&bc, &t.b, err, sizeof(err)), 0);
    return &t;
}

static void test_notices_follow_redelivery(void **state)
{
    (void)state;
    rd *t = rd_new();
    pr_trainer_client *a = rd_connect(t, 8, "a");
    rd_wait_clients(t, 1);
    rd_feed(t);
    assert_true(t->number > 100); /* the stream recycles a lot */
    /* A reads its window of 8, acknowledges the first 3, leaves with 5. */
    for (uint64_t want = 1; want <= 8; want++)
        assert_int_equal(rd_recv(a, t->a), want);
    for (uint64_t s = 1; s <= 3; s++)
        assert_int_equal(pr_trainer_client_ack(a, s), 0);
    rd_wait_acks(t, 3);
    pr_trainer_client_close(a);
    rd_wait_clients(t, 0);
    uint64_t held_min = UINT64_MAX; /* A's unacknowledged notices stay held */
    for (uint32_t s = 4; s <= 8; s++)
        for (uint32_t i = 0; i < t->a[s].n_notes; i++)
            if (t->a[s].notes[i].number < held_min)
                held_min = t->a[s].notes[i].number;
    assert_true(held_min < UINT64_MAX);
    assert_true(pr_batcher_notice_floor(t->b) <= held_min);
    /* B gets everything else: the 5 A held first, then the rest. */
    pr_trainer_client *b = rd_connect(t, 8, "b");
    for (uint32_t k = 4; k <= RD_BATCHES; k++) {
        uint64_t s = rd_recv(b, t->bgot);
        assert_int_equal(pr_trainer_client_ack(b, s), 0);
    }
    rd_wait_acks(t, RD_BATCHES);
    pr_sink_stats st;
    pr_sink_get_stats(t->sink, &st);
    assert_true(st.redeliveries >= 5);
    for (uint32_t s = 4; s <= 8; s++) { /* redelivered with the very same notices */
        assert_true(t->bgot[s].have);
        assert_int_equal(t->bgot[s].n_notes, t->a[s].n_notes);
        assert_memory_equal(t->bgot[s].notes, t->a[s].notes, t->a[s].n_notes * sizeof(pr_recycled));
    }
    static rd_got *stream[RD_BATCHES + 1];
    for (uint32_t s = 1; s <= RD_BATCHES; s++) {
        assert_true(s <= 3 ? !t->bgot[s].have : t->bgot[s].have);
        stream[s] = s <= 3 ? &t->a[s] : &t->bgot[s];
    }
    rd_replay(t, stream);
    assert_int_equal(pr_batcher_notice_floor(t->b), UINT64_MAX); /* all acknowledged */
    pr_trainer_client_close(b);
    pr_sinkset_free(t->ss);
    pr_batcher_free(t->b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_notices_follow_redelivery),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
