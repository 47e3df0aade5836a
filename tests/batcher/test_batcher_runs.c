/*
 * test_batcher_runs.c — the batcher's run path (runs of rows of one
 * partition appended at once, issue 21's worker CPU) against the per-row
 * path it replaces (PIPEREC_BATCHER_RUNS=0): the same blocks into two
 * batchers, one per path, give byte-identical TrainingBatch encodings, the
 * same sequence numbers and the same safe offsets after acks in any order,
 * across runs of 1..60 rows, rejects, notices at any row, revokes and
 * batch sizes that cut runs anywhere. The run side also recycles tensor
 * blocks (the default; the per-row side has PIPEREC_BATCHER_RECYCLE=0): each
 * compared batch is released at once, so acked batches' blocks come back
 * and are written again, and must leave nothing of their old rows (the
 * tensors, and the encodings pr_batch_encode writes into pooled blocks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bt_util.h"

#define NP 5 /* partitions */

typedef struct side {
    pr_manual_clock mc;
    bt_sink sink;
    pr_batcher *b;
    size_t checked; /* batches compared so far */
} side;

static uint64_t vocab_cb(void *opaque, uint32_t col)
{
    (void)opaque;
    return 1000 + col;
}

static void side_new(side *s, uint32_t size, pr_batch_ordering ord, bool runs)
{
    memset(s, 0, sizeof(*s));
    pr_manual_clock_init(&s->mc, 1700000000000LL);
    pr_batcher_cfg cfg = {
        .pipeline = "t",
        .n_dense = BT_ND,
        .n_sparse = BT_NS,
        .sparse_width = 4,
        .batch = {.size = size,
                  .max_delay_ms = 50,
                  .ordering = ord,
                  .allowed_lateness_ms = 1000,
                  .late_policy = PR_BATCH_LATE_EMIT},
        .clock = &s->mc.clock,
        .on_emit = bt_on_emit,
        .vocab_size = vocab_cb,
        .opaque = &s->sink,
    };
    char err[256];
    if (runs) {
        unsetenv("PIPEREC_BATCHER_RUNS");
        unsetenv("PIPEREC_BATCHER_RECYCLE");
    } else {
        setenv("PIPEREC_BATCHER_RUNS", "0", 1);
        setenv("PIPEREC_BATCHER_RECYCLE", "0", 1);
    }
    assert_int_equal(pr_batcher_new(&cfg, &s->b, err, sizeof(err)), 0);
    unsetenv("PIPEREC_BATCHER_RUNS");
    unsetenv("PIPEREC_BATCHER_RECYCLE");
}

static uint32_t rnd(uint32_t *st)
{
    *st = *st * 1103515245u + 12345u;
    return (*st >> 8) & 0xffffff;
}

/* A block of runs: partition, run length 1..60, every row's offset the
 * partition's next; ~1/23 rejected; notices at random rows. */
static void fill_block(bt_io *io, uint32_t *st, int64_t *next_off, pr_recycled *nv, uint32_t *nn,
                       uint64_t *number)
{
    bt_io_reset(io);
    uint32_t want = 1 + rnd(st) % 400;
    *nn = 0;
    while (io->in.rows < want) {
        int32_t p = (int32_t)(rnd(st) % NP);
        uint32_t len = 1 + rnd(st) % 60;
        for (uint32_t i = 0; i < len && io->in.rows < want; i++) {
            uint32_t r = io->in.rows;
            bt_row(io, p, next_off[p]++, 1000 + (int64_t)(rnd(st) % 200), rnd(st) % 23 == 0);
            if (rnd(st) % 31 == 0 && *nn < 64)
                nv[(*nn)++] = (pr_recycled){rnd(st) % BT_NS, r, (int64_t)(rnd(st) % 50), ++*number};
        }
    }
    io->out.recycled = *nn ? nv : NULL;
    io->out.n_recycled = *nn;
}

static void check_same(side *a, side *b)
{
    assert_int_equal(a->sink.n, b->sink.n);
    for (size_t i = a->checked; i < a->sink.n; i++) {
        const pr_batch *x = a->sink.b[i], *y = b->sink.b[i];
        assert_int_equal(x->seq, y->seq);
        assert_int_equal(x->seq, i + 1); /* ack_some acks by position */
        assert_int_equal(x->rows, y->rows);
        assert_int_equal(x->oldest_mono_ns, y->oldest_mono_ns);
        size_t nx = pr_batch_pb_size(x), ny = pr_batch_pb_size(y);
        assert_int_equal(nx, ny);
        uint8_t *ex = malloc(nx), *ey = malloc(ny);
        assert_int_equal(pr_batch_pb_write(x, ex), nx);
        assert_int_equal(pr_batch_pb_write(y, ey), ny);
        assert_memory_equal(ex, ey, nx);
        /* pr_batch_encode (the run side's from its pool's blocks) gives the same bytes */
        assert_int_equal(pr_batch_encode(a->sink.b[i]), 0);
        assert_int_equal(pr_batch_encode(b->sink.b[i]), 0);
        assert_int_equal(x->pb_len, nx);
        assert_int_equal(y->pb_len, ny);
        assert_memory_equal(x->pb, ex, nx);
        assert_memory_equal(y->pb, ex, nx);
        free(ex);
        free(ey);
        /* Released: once acked too, the block goes back to the pool. */
        pr_batch_unref(a->sink.b[i]);
        pr_batch_unref(b->sink.b[i]);
        a->sink.b[i] = b->sink.b[i] = NULL;
    }
    a->checked = b->checked = a->sink.n;
    for (int32_t p = 0; p < NP; p++)
        assert_int_equal(pr_batcher_safe_offset(a->b, p), pr_batcher_safe_offset(b->b, p));
}

static void ack_some(side *s, uint32_t *st)
{
    for (size_t i = 0; i < s->sink.n; i++)
        if (rnd(st) % 3 == 0)
            (void)pr_batcher_ack(s->b, i + 1); /* sequences start at 1, one per batch */
}

static void same_case(uint32_t size, pr_batch_ordering ord, uint32_t seed)
{
    side a, b;
    side_new(&a, size, ord, false);
    side_new(&b, size, ord, true);
    bt_io *io = bt_io_new(512);
    int64_t next_off[NP] = {0};
    pr_recycled nv[64];
    uint32_t nn, st = seed;
    uint64_t number = 0;
    for (int blk = 0; blk < 120 && a.sink.n < 500; blk++) {
        fill_block(io, &st, next_off, nv, &nn, &number);
        assert_int_equal(pr_batcher_add(a.b, &io->in, &io->out), 0);
        assert_int_equal(pr_batcher_add(b.b, &io->in, &io->out), 0);
        int64_t step = (int64_t)(rnd(&st) % 30);
        pr_manual_clock_advance_ms(&a.mc, step);
        pr_manual_clock_advance_ms(&b.mc, step);
        (void)pr_batcher_poll(a.b);
        (void)pr_batcher_poll(b.b);
        uint32_t ack_seed = st;
        ack_some(&a, &ack_seed);
        ack_seed = st;
        ack_some(&b, &ack_seed);
        if (blk % 40 == 39) { /* a revoke of one partition, then it comes back */
            int32_t p = (int32_t)(rnd(&st) % NP);
            pr_batcher_revoke(a.b, p, NULL);
            pr_batcher_revoke(b.b, p, NULL);
        }
        check_same(&a, &b);
    }
    pr_batcher_flush(a.b);
    pr_batcher_flush(b.b);
    check_same(&a, &b);
    assert_true(a.sink.n > 3);
    pr_batcher_free(a.b);
    pr_batcher_free(b.b);
    bt_sink_free(&a.sink);
    bt_sink_free(&b.sink);
    bt_io_free(io);
}

static void test_runs_partition_order(void **state)
{
    (void)state;
    static const uint32_t sizes[] = {1, 7, 64, 1000};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (uint32_t seed = 1; seed <= 3; seed++)
            same_case(sizes[i], PR_BATCH_ORDER_PARTITION, seed * 7919u + sizes[i]);
}

static void test_runs_event_time(void **state)
{
    (void)state; /* the knob leaves event_time alone: still the same batches */
    same_case(64, PR_BATCH_ORDER_EVENT_TIME, 99);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs_partition_order),
        cmocka_unit_test(test_runs_event_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
