/*
 * test_batcher.c — the batcher's contract with a manual clock: batch sizes,
 * max_delay deadlines, sequence numbers, per-partition order, metadata,
 * safe offsets under in-order and out-of-order acks, rejects, revoke, and
 * event-time ordering with watermark, lateness policies and idle partitions;
 * the popular split (batch.split popular): two streams, every row once.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "bt_util.h"

typedef struct fx {
    pr_manual_clock mc;
    bt_sink sink;
    pr_batcher *b;
    bt_io *io;
    /* late rows handed back */
    int64_t late_off[64];
    int n_late;
} fx;

static uint64_t vocab_cb(void *opaque, uint32_t col)
{
    (void)opaque;
    return 1000 + col;
}

static void late_cb(void *opaque, const pr_block *in, const pr_out *out, uint32_t row)
{
    (void)out;
    fx *f = ((bt_sink *)opaque == NULL) ? NULL : (fx *)((char *)opaque - offsetof(fx, sink));
    f->late_off[f->n_late++] = in->offset[row];
}

static fx *fx_new_split(uint32_t size, int64_t delay, pr_batch_ordering ord, int64_t lateness,
                        pr_batch_late_policy pol, pr_batch_split split)
{
    fx *f = calloc(1, sizeof(*f));
    pr_manual_clock_init(&f->mc, 1700000000000LL);
    pr_batcher_cfg cfg = {
        .pipeline = "t",
        .n_dense = BT_ND,
        .n_sparse = BT_NS,
        .sparse_width = 4,
        .batch = {.size = size,
                  .max_delay_ms = delay,
                  .ordering = ord,
                  .allowed_lateness_ms = lateness,
                  .late_policy = pol,
                  .split = split},
        .clock = &f->mc.clock,
        .on_emit = bt_on_emit,
        .on_late = late_cb,
        .vocab_size = vocab_cb,
        .opaque = &f->sink,
    };
    char err[256];
    assert_int_equal(pr_batcher_new(&cfg, &f->b, err, sizeof(err)), 0);
    f->io = bt_io_new(1024);
    return f;
}

static fx *fx_new(uint32_t size, int64_t delay, pr_batch_ordering ord, int64_t lateness,
                  pr_batch_late_policy pol)
{
    return fx_new_split(size, delay, ord, lateness, pol, PR_BATCH_SPLIT_NONE);
}

static void fx_free(fx *f)
{
    pr_batcher_free(f->b);
    bt_sink_free(&f->sink);
    bt_io_free(f->io);
    free(f);
}

static void add_rows(fx *f, int32_t p, int64_t first, int n, int64_t et)
{
    bt_io_reset(f->io);
    for (int i = 0; i < n; i++)
        bt_row(f->io, p, first + i, et, 0);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
}

static void check_rows(const pr_batch *b)
{
    for (uint32_t i = 0; i < b->rows; i++) {
        int32_t p;
        int64_t off;
        assert_int_equal(bt_row_id(b, i, &p, &off), 0);
    }
}

/* ------------------------------------------------------------------ */

static void test_full_batches(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    add_rows(f, 0, 0, 10, 5);
    assert_int_equal(f->sink.n, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(f->sink.b[i]->rows, 4);
        assert_int_equal(f->sink.b[i]->seq, i + 1);
        assert_int_equal(f->sink.b[i]->reason, PR_BATCH_FULL);
        check_rows(f->sink.b[i]);
    }
    /* 2 rows still buffered; flush emits them as a short batch. */
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 3);
    assert_int_equal(f->sink.b[2]->rows, 2);
    assert_int_equal(f->sink.b[2]->seq, 3);
    assert_int_equal(f->sink.b[2]->reason, PR_BATCH_FLUSH);
    check_rows(f->sink.b[2]);
    fx_free(f);
}

static void test_deadline_exact(void **state)
{
    (void)state;
    fx *f = fx_new(100, 100, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    assert_int_equal(pr_batcher_poll(f->b), -1); /* nothing buffered */
    add_rows(f, 0, 0, 3, 5);
    assert_int_equal(pr_batcher_poll(f->b), 100);
    pr_manual_clock_advance_ms(&f->mc, 40);
    add_rows(f, 0, 3, 2, 5); /* later rows do not move the deadline */
    pr_manual_clock_advance_ms(&f->mc, 59);
    assert_int_equal(pr_batcher_poll(f->b), 1);
    assert_int_equal(f->sink.n, 0);
    pr_manual_clock_advance_ms(&f->mc, 1);
    assert_int_equal(pr_batcher_poll(f->b), -1);
    assert_int_equal(f->sink.n, 1);
    assert_int_equal(f->sink.b[0]->rows, 5);
    assert_int_equal(f->sink.b[0]->reason, PR_BATCH_DEADLINE);
    check_rows(f->sink.b[0]);
    /* The next partial batch gets its own deadline from its first row. */
    pr_manual_clock_advance_ms(&f->mc, 500);
    add_rows(f, 0, 5, 1, 5);
    pr_manual_clock_advance_ms(&f->mc, 99);
    pr_batcher_poll(f->b);
    assert_int_equal(f->sink.n, 1);
    pr_manual_clock_advance_ms(&f->mc, 1);
    pr_batcher_poll(f->b);
    assert_int_equal(f->sink.n, 2);
    assert_int_equal(f->sink.b[1]->seq, 2);
    fx_free(f);
}

static void test_zero_delay(void **state)
{
    (void)state;
    fx *f = fx_new(100, 0, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    add_rows(f, 0, 0, 3, 5);
    assert_int_equal(f->sink.n, 0);
    assert_int_equal(pr_batcher_poll(f->b), -1);
    assert_int_equal(f->sink.n, 1);
    fx_free(f);
}

static void test_partition_order_and_metadata(void **state)
{
    (void)state;
    fx *f = fx_new(7, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    /* Interleaved partitions, several blocks, event times vary. */
    int64_t next[3] = {0, 100, 200};
    for (int blk = 0; blk < 6; blk++) {
        bt_io_reset(f->io);
        for (int i = 0; i < 5; i++) {
            int32_t p = (blk + i) % 3;
            bt_row(f->io, p, next[p], 1000 + next[p], 0);
            next[p]++;
        }
        assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    }
    pr_batcher_flush(f->b);
    int64_t last[3] = {-1, -1, -1};
    uint64_t rows = 0;
    for (size_t k = 0; k < f->sink.n; k++) {
        const pr_batch *b = f->sink.b[k];
        assert_int_equal(b->seq, k + 1);
        assert_string_equal(b->pipeline, "t");
        int64_t mn = INT64_MAX, mx = INT64_MIN;
        uint32_t rr[3] = {0};
        int64_t first[3] = {-1, -1, -1}, lst[3] = {-1, -1, -1};
        for (uint32_t i = 0; i < b->rows; i++) {
            int32_t p;
            int64_t off;
            assert_int_equal(bt_row_id(b, i, &p, &off), 0);
            assert_true(off > last[p]); /* offset order within a partition */
            last[p] = off;
            if (first[p] < 0)
                first[p] = off;
            lst[p] = off;
            rr[p]++;
            int64_t et = 1000 + off;
            mn = et < mn ? et : mn;
            mx = et > mx ? et : mx;
        }
        assert_int_equal(b->min_event_time_ms, mn);
        assert_int_equal(b->max_event_time_ms, mx);
        assert_int_equal(b->emit_time_ms, f->mc.wall_ms);
        uint32_t nr = 0;
        for (int p = 0; p < 3; p++)
            nr += rr[p] ? 1 : 0;
        assert_int_equal(b->n_ranges, nr);
        for (uint32_t j = 0; j < b->n_ranges; j++) {
            const pr_batch_range *r = &b->ranges[j];
            if (j)
                assert_true(r->partition > b->ranges[j - 1].partition);
            assert_int_equal(r->first_offset, first[r->partition]);
            assert_int_equal(r->last_offset, lst[r->partition]);
            assert_int_equal(r->rows, rr[r->partition]);
        }
        for (int c = 0; c < BT_NS; c++)
            assert_int_equal(b->vocab_sizes[c], 1000 + c);
        rows += b->rows;
    }
    assert_int_equal(rows, 30);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_in, 30);
    assert_int_equal(st.rows_out, 30);
    assert_int_equal(st.batches_emitted, f->sink.n);
    assert_int_equal(st.fill_ratio.count, f->sink.n);
    fx_free(f);
}

static void test_safe_offsets(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), -1);
    add_rows(f, 0, 0, 10, 5); /* batches 1: 0-3, 2: 4-7; buffered 8, 9 */
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 0);
    assert_int_equal(pr_batcher_ack(f->b, 2), 0); /* out of order */
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 0);
    assert_int_equal(pr_batcher_ack(f->b, 2), PR_EINVAL); /* twice */
    assert_int_equal(pr_batcher_ack(f->b, 9), PR_EINVAL); /* unknown */
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 8); /* buffered rows hold it */
    pr_batcher_flush(f->b);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 8);
    assert_int_equal(pr_batcher_ack(f->b, 3), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 10);

    /* Rejects (engine and pre-engine) never hold commits back. */
    bt_io_reset(f->io);
    bt_row(f->io, 0, 10, 5, 1);
    bt_row(f->io, 0, 11, 5, 0);
    bt_row(f->io, 0, 12, 5, 1);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 11);
    pr_batcher_note_done(f->b, 0, 13);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 11);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.b[3]->rows, 1);
    assert_int_equal(f->sink.b[3]->ranges[0].first_offset, 11);
    assert_int_equal(pr_batcher_ack(f->b, 4), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 14);
    /* A partition with only rejects. */
    pr_batcher_note_done(f->b, 5, 41);
    assert_int_equal(pr_batcher_safe_offset(f->b, 5), 42);

    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_rejected, 4);
    assert_int_equal(st.unacked_batches, 0);
    assert_int_equal(st.inflight_bytes, 0);
    fx_free(f);
}

/* Acks mark each batch's rows by runs of one partition (pr__offsets_done):
 * blocks of three partitions in runs, batches of 6 that cut the runs, acked
 * in a scrambled order; after every ack each partition's safe offset is the
 * first offset of its rows still unacknowledged (or its last + 1). */
static void test_safe_offsets_runs_acked_out_of_order(void **state)
{
    (void)state;
    fx *f = fx_new(6, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    static const struct {
        int32_t p;
        int64_t first;
        int n;
    } blocks[] = {{0, 0, 5}, {1, 0, 3}, {0, 5, 5}, {1, 3, 6}, {2, 0, 1}, {0, 10, 7}};
    int64_t end[3] = {0};
    for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
        add_rows(f, blocks[i].p, blocks[i].first, blocks[i].n, 5);
        end[blocks[i].p] = blocks[i].first + blocks[i].n;
    }
    pr_batcher_flush(f->b);
    int nb = (int)f->sink.n;
    assert_true(nb >= 5 && nb <= 64);
    bool acked[64] = {0};
    int order[64], k = 0;
    for (int i = nb - 1; i >= 0; i -= 2) /* last, third from last, ... then the rest */
        order[k++] = i;
    for (int i = nb - 2; i >= 0; i -= 2)
        order[k++] = i;
    for (int a = 0; a < nb; a++) {
        assert_int_equal(pr_batcher_ack(f->b, f->sink.b[order[a]]->seq), 0);
        acked[order[a]] = true;
        for (int32_t p = 0; p < 3; p++) {
            int64_t want = end[p];
            for (int i = 0; i < nb; i++)
                for (uint32_t r = 0; !acked[i] && r < f->sink.b[i]->n_ranges; r++)
                    if (f->sink.b[i]->ranges[r].partition == p &&
                        f->sink.b[i]->ranges[r].first_offset < want)
                        want = f->sink.b[i]->ranges[r].first_offset;
            assert_int_equal(pr_batcher_safe_offset(f->b, p), want);
        }
    }
    fx_free(f);
}

/* Regression: empty messages at a partition's tail (no row, no reject) used
 * to hold its commit at the last row until more data arrived. */
static void test_note_consumed_empty_tail(void **state)
{
    (void)state;
    fx *f = fx_new(2, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    add_rows(f, 0, 0, 2, 5); /* batch 1: offsets 0, 1 */
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 2);
    pr_batcher_note_consumed(f->b, 0, 6); /* offsets 2..5 were empty messages */
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 6);
    pr_batcher_note_consumed(f->b, 0, 4); /* never moves back */
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 6);
    /* A row in flight still holds the commit at its offset. */
    add_rows(f, 0, 6, 1, 5);
    pr_batcher_note_consumed(f->b, 0, 9);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 6);
    pr_batcher_flush(f->b);
    assert_int_equal(pr_batcher_ack(f->b, 2), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 9);
    /* An assigned partition that only ever had empty messages. */
    pr_batcher_assign(f->b, 3);
    assert_int_equal(pr_batcher_safe_offset(f->b, 3), -1);
    pr_batcher_note_consumed(f->b, 3, 17);
    assert_int_equal(pr_batcher_safe_offset(f->b, 3), 17);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_rejected, 0);
    fx_free(f);
}

/* Many partitions (the offset tracker's key index grows several times;
 * keys below 21474: bt_util's values are key * 100000 + offset in an int):
 * every partition's safe offset, before and after the acks and after a note
 * of empty messages, and none for a key never seen. */
static void test_safe_offsets_many_partitions(void **state)
{
    (void)state;
    enum { NP = 700 };
    fx *f = fx_new(1000, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    for (int j = 0; j < 3; j++) {
        bt_io_reset(f->io);
        for (int i = 0; i < NP; i++)
            bt_row(f->io, i * 30 + i % 7, 10 * i + j, 5, 0);
        assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    }
    for (int i = 0; i < NP; i++)
        assert_int_equal(pr_batcher_safe_offset(f->b, i * 30 + i % 7), 10 * i);
    assert_int_equal(pr_batcher_safe_offset(f->b, 5), -1);
    pr_batcher_flush(f->b);
    for (uint64_t seq = 1; seq <= 3; seq++)
        assert_int_equal(pr_batcher_ack(f->b, seq), 0);
    for (int i = 0; i < NP; i++) {
        int32_t key = i * 30 + i % 7;
        assert_int_equal(pr_batcher_safe_offset(f->b, key), 10 * i + 3);
        pr_batcher_note_consumed(f->b, key, 10 * i + 5);
    }
    for (int i = 0; i < NP; i++)
        assert_int_equal(pr_batcher_safe_offset(f->b, i * 30 + i % 7), 10 * i + 5);
    fx_free(f);
}

typedef struct offs_seen {
    int32_t p[8];
    int64_t o[8];
    int n;
} offs_seen;

static void offs_cb(void *opaque, int32_t p, int64_t o)
{
    offs_seen *s = opaque;
    s->p[s->n] = p;
    s->o[s->n++] = o;
}

static void test_safe_offsets_multi_and_inflight(void **state)
{
    (void)state;
    fx *f = fx_new(3, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    const uint64_t row_bytes = 4 + BT_ND * 4 + BT_NS * 4;
    bt_io_reset(f->io);
    bt_row(f->io, 1, 50, 5, 0);
    bt_row(f->io, 2, 70, 5, 0);
    bt_row(f->io, 1, 51, 5, 0); /* batch 1 = {1:50, 2:70, 1:51} */
    bt_row(f->io, 2, 71, 5, 0); /* buffered */
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    assert_int_equal(pr_batcher_inflight_bytes(f->b), 4 * row_bytes);
    assert_int_equal(pr_batcher_unacked_batches(f->b), 1);
    offs_seen s = {0};
    pr_batcher_safe_offsets(f->b, offs_cb, &s);
    assert_int_equal(s.n, 2);
    for (int i = 0; i < 2; i++)
        assert_int_equal(s.o[i], s.p[i] == 1 ? 50 : 70);
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_inflight_bytes(f->b), 1 * row_bytes);
    assert_int_equal(pr_batcher_safe_offset(f->b, 1), 52);
    assert_int_equal(pr_batcher_safe_offset(f->b, 2), 71);
    fx_free(f);
}

static void test_revoke(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    bt_io_reset(f->io);
    for (int i = 0; i < 3; i++) {
        bt_row(f->io, 0, i, 5, 0);
        bt_row(f->io, 1, i, 5, 0);
    } /* batch 1: 0:0 1:0 0:1 1:1 ; buffered 0:2 1:2 */
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    assert_int_equal(f->sink.n, 1);
    int64_t safe;
    assert_int_equal(pr_batcher_revoke(f->b, 1, &safe), 0);
    assert_int_equal(safe, 0); /* batch 1 (unacked) holds partition 1 offset 0 */
    assert_int_equal(pr_batcher_safe_offset(f->b, 1), -1); /* forgotten */
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 2);
    assert_int_equal(f->sink.b[1]->rows, 1);
    assert_int_equal(f->sink.b[1]->n_ranges, 1);
    assert_int_equal(f->sink.b[1]->ranges[0].partition, 0);
    check_rows(f->sink.b[1]);
    /* Acking the batch that still holds revoked rows is fine. */
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_ack(f->b, 2), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 3);
    assert_int_equal(pr_batcher_revoke(f->b, 7, &safe), 0);
    assert_int_equal(safe, -1);
    /* Reassigned later: tracked from scratch. */
    add_rows(f, 1, 2, 1, 5);
    assert_int_equal(pr_batcher_safe_offset(f->b, 1), 2);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_dropped_revoke, 1);
    /* Nothing already emitted came out again. */
    pr_batcher_flush(f->b);
    for (size_t k = 0; k < f->sink.n; k++)
        for (size_t j = 0; j < k; j++)
            assert_true(f->sink.b[k]->seq > f->sink.b[j]->seq);
    fx_free(f);
}

static void add_et(fx *f, int32_t p, int64_t off, int64_t et)
{
    bt_io_reset(f->io);
    bt_row(f->io, p, off, et, 0);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
}

static void test_event_time_watermark(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_EVENT_TIME, 0, PR_BATCH_LATE_EMIT);
    pr_batcher_assign(f->b, 0);
    pr_batcher_assign(f->b, 1); /* both partitions hold the watermark until they have data */
    add_et(f, 0, 0, 10);
    add_et(f, 0, 1, 20);
    add_et(f, 0, 2, 30);
    assert_int_equal(f->sink.n, 0); /* partition 1 has no data: no watermark yet */
    add_et(f, 1, 0, 15);
    add_et(f, 1, 1, 25);
    /* watermark = min(30, 25) = 25: rows 10, 15, 20, 25 released -> one full batch */
    assert_int_equal(f->sink.n, 1);
    const pr_batch *b = f->sink.b[0];
    int64_t want_p[] = {0, 1, 0, 1}, want_off[] = {0, 0, 1, 1};
    for (uint32_t i = 0; i < 4; i++) {
        int32_t p;
        int64_t off;
        assert_int_equal(bt_row_id(b, i, &p, &off), 0);
        assert_int_equal(p, want_p[i]);
        assert_int_equal(off, want_off[i]);
    }
    assert_int_equal(b->min_event_time_ms, 10);
    assert_int_equal(b->max_event_time_ms, 25);
    /* Safe offsets: p0 offset 2 (et 30) is still buffered. */
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 2);
    assert_int_equal(pr_batcher_safe_offset(f->b, 1), 2);
    /* A late row (et 5 < watermark 25) under `emit`: released into the next batch. */
    add_et(f, 1, 2, 5);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_late, 1);
    assert_int_equal(st.watermark_ms, 25);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 2);
    b = f->sink.b[1];
    assert_int_equal(b->rows, 2);
    int32_t p;
    int64_t off;
    assert_int_equal(bt_row_id(b, 0, &p, &off), 0);
    assert_int_equal(p * 1000 + off, 1002); /* the late row first (it was released at once) */
    assert_int_equal(bt_row_id(b, 1, &p, &off), 0);
    assert_int_equal(p * 1000 + off, 2);
    fx_free(f);
}

static void test_event_time_drop_late(void **state)
{
    (void)state;
    fx *f = fx_new(100, 1000, PR_BATCH_ORDER_EVENT_TIME, 10, PR_BATCH_LATE_DROP_TO_DLQ);
    add_et(f, 0, 0, 100);
    add_et(f, 0, 1, 200); /* watermark = 200 - 10 = 190 */
    add_et(f, 0, 2, 185); /* late */
    add_et(f, 0, 3, 195); /* not late (>= watermark) */
    assert_int_equal(f->n_late, 1);
    assert_int_equal(f->late_off[0], 2);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_late, 1);
    assert_int_equal(st.rows_late_dropped, 1);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 1);
    const pr_batch *b = f->sink.b[0];
    assert_int_equal(b->rows, 3);
    int64_t want[] = {0, 3, 1}; /* event time order: 100, 195, 200 */
    for (uint32_t i = 0; i < 3; i++) {
        int32_t p;
        int64_t off;
        assert_int_equal(bt_row_id(b, i, &p, &off), 0);
        assert_int_equal(off, want[i]);
    }
    /* The dropped row does not hold commits back once the rest is acked. */
    assert_int_equal(pr_batcher_ack(f->b, 1), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), 4);
    fx_free(f);
}

static void test_event_time_idle_partition(void **state)
{
    (void)state;
    fx *f = fx_new(100, 50, PR_BATCH_ORDER_EVENT_TIME, 0, PR_BATCH_LATE_EMIT);
    pr_batcher_assign(f->b, 0);
    pr_batcher_assign(f->b, 1); /* never sends anything */
    add_et(f, 0, 0, 1000);
    pr_manual_clock_advance_ms(&f->mc, 20);
    add_et(f, 0, 1, 900);
    assert_int_equal(pr_batcher_poll(f->b), 30);
    pr_manual_clock_advance_ms(&f->mc, 29);
    assert_int_equal(pr_batcher_poll(f->b), 1);
    assert_int_equal(f->sink.n, 0);
    pr_manual_clock_advance_ms(&f->mc, 1);
    /* Row 0's deadline: the watermark is forced to 1000, both rows go, in event-time order. */
    assert_int_equal(pr_batcher_poll(f->b), -1);
    assert_int_equal(f->sink.n, 1);
    const pr_batch *b = f->sink.b[0];
    assert_int_equal(b->rows, 2);
    int32_t p;
    int64_t off;
    assert_int_equal(bt_row_id(b, 0, &p, &off), 0);
    assert_int_equal(off, 1);
    assert_int_equal(bt_row_id(b, 1, &p, &off), 0);
    assert_int_equal(off, 0);
    assert_int_equal(b->reason, PR_BATCH_DEADLINE);
    fx_free(f);
}

static void test_event_time_revoke(void **state)
{
    (void)state;
    fx *f = fx_new(100, 1000, PR_BATCH_ORDER_EVENT_TIME, 0, PR_BATCH_LATE_EMIT);
    add_et(f, 0, 0, 10);
    add_et(f, 1, 0, 20);
    add_et(f, 0, 1, 30); /* watermark min(30, 20) = 20: p1:0 released (p0:0 went at 10) */
    add_et(f, 1, 1, 40); /* watermark 30: p0:1 released too; p1:1 pending */
    int64_t safe;
    assert_int_equal(pr_batcher_revoke(f->b, 1, &safe), 0);
    assert_int_equal(safe, 0);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 1);
    const pr_batch *b = f->sink.b[0];
    assert_int_equal(b->rows, 2);
    for (uint32_t i = 0; i < 2; i++) {
        int32_t p;
        int64_t off;
        assert_int_equal(bt_row_id(b, i, &p, &off), 0);
        assert_int_equal(p, 0);
    }
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_dropped_revoke, 2);
    fx_free(f);
}

/* ------------------------------------------------------------------ popular split */

/* The test's popularity rule: a pure function of the row. */
static int is_pop(int32_t p, int64_t off)
{
    return (off * 7 + p) % 3 == 0;
}

/* Rows [first, first + n) of partitions 0 and 1 interleaved, flagged by
 * is_pop, every 11th row an engine reject (never batched). */
static void add_split_rows(fx *f, int64_t first, int n, int64_t et)
{
    bt_io_reset(f->io);
    uint64_t pop[16] = {0};
    for (int i = 0; i < n; i++)
        for (int32_t p = 0; p < 2; p++) {
            int64_t off = first + i;
            if (is_pop(p, off))
                pr_bit_set(pop, f->io->in.rows);
            bt_row(f->io, p, off, et + off, off % 11 == 5);
        }
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, pop), 0);
}

/* Every kept row exactly once; a popular batch holds only flagged rows and a
 * regular one only unflagged rows; per stream and partition, offsets (or
 * event times) increase; sequence numbers 1..n without gaps. */
static void check_split_streams(fx *f, int64_t n_off, bool split)
{
    uint8_t seen[2][256] = {{0}};
    int64_t last[2][2] = {{-1, -1}, {-1, -1}}; /* [stream][partition] */
    uint64_t pop_rows = 0, pop_batches = 0, rows = 0;
    for (size_t i = 0; i < f->sink.n; i++) {
        const pr_batch *b = f->sink.b[i];
        assert_int_equal(b->seq, i + 1);
        assert_true(split || !b->popular);
        pop_batches += b->popular;
        for (uint32_t r = 0; r < b->rows; r++) {
            int32_t p;
            int64_t off;
            assert_int_equal(bt_row_id(b, r, &p, &off), 0);
            assert_true(p >= 0 && p < 2 && off >= 0 && off < n_off);
            assert_int_equal(seen[p][off]++, 0);
            if (split)
                assert_int_equal(b->popular, is_pop(p, off));
            assert_true(off > last[b->popular][p]);
            last[b->popular][p] = off;
            pop_rows += b->popular;
            rows++;
        }
    }
    for (int32_t p = 0; p < 2; p++)
        for (int64_t off = 0; off < n_off; off++)
            assert_int_equal(seen[p][off], off % 11 == 5 ? 0 : 1);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_out, rows);
    assert_int_equal(st.rows_out_popular, pop_rows);
    assert_int_equal(st.batches_popular, pop_batches);
    assert_int_equal(st.batches_emitted, f->sink.n);
    assert_true(!split || (pop_rows > 0 && pop_rows < rows));
}

static void test_split_popular(void **state)
{
    (void)state;
    fx *f = fx_new_split(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT,
                         PR_BATCH_SPLIT_POPULAR);
    /* Blocks of uneven sizes, so builds fill in the middle of a block. */
    int64_t first = 0;
    for (int n = 1; first + n <= 120; n = n % 7 + 2) {
        add_split_rows(f, first, n, 0);
        first += n;
    }
    pr_batcher_flush(f->b);
    check_split_streams(f, first, true);

    /* Commits: the regular stream acked alone holds the offset at the first
     * popular row still unacked; acking the rest releases everything. */
    int64_t first_pop = -1;
    for (size_t i = 0; i < f->sink.n; i++)
        if (!f->sink.b[i]->popular)
            assert_int_equal(pr_batcher_ack(f->b, f->sink.b[i]->seq), 0);
    for (int64_t off = 0; off < first && first_pop < 0; off++)
        if (is_pop(0, off) && off % 11 != 5)
            first_pop = off;
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), first_pop);
    for (size_t i = 0; i < f->sink.n; i++)
        if (f->sink.b[i]->popular)
            assert_int_equal(pr_batcher_ack(f->b, f->sink.b[i]->seq), 0);
    assert_int_equal(pr_batcher_safe_offset(f->b, 0), first);
    assert_int_equal(pr_batcher_safe_offset(f->b, 1), first);
    fx_free(f);
}

/* Each stream has its own max_delay_ms deadline; revoke drops a partition's
 * rows from both builds. */
static void test_split_deadlines_and_revoke(void **state)
{
    (void)state;
    fx *f = fx_new_split(8, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT,
                         PR_BATCH_SPLIT_POPULAR);
    uint64_t pop = 1;
    bt_io_reset(f->io);
    bt_row(f->io, 0, 0, 0, 0);
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, &pop), 0);
    pr_manual_clock_advance_ms(&f->mc, 400);
    pop = 0;
    bt_io_reset(f->io);
    bt_row(f->io, 0, 1, 0, 0);
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, &pop), 0);
    assert_int_equal(pr_batcher_poll(f->b), 600); /* the popular row's deadline */
    pr_manual_clock_advance_ms(&f->mc, 600);
    assert_int_equal(pr_batcher_poll(f->b), 400);
    assert_int_equal(f->sink.n, 1);
    assert_int_equal(f->sink.b[0]->popular, 1);
    assert_int_equal(f->sink.b[0]->reason, PR_BATCH_DEADLINE);
    pr_manual_clock_advance_ms(&f->mc, 400);
    assert_int_equal(pr_batcher_poll(f->b), -1);
    assert_int_equal(f->sink.n, 2);
    assert_int_equal(f->sink.b[1]->popular, 0);
    assert_int_equal(f->sink.b[1]->ranges[0].first_offset, 1);

    /* Revoke: partition 1's buffered rows leave both builds, partition 2's stay. */
    bt_io_reset(f->io);
    uint64_t bits = 0;
    for (int i = 0; i < 6; i++) {
        if (i % 2)
            bits |= 1ull << i;
        bt_row(f->io, 1 + i / 3, 10 + i, 0, 0);
    }
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, &bits), 0);
    int64_t safe;
    assert_int_equal(pr_batcher_revoke(f->b, 1, &safe), 0);
    assert_int_equal(safe, 10);
    pr_batcher_flush(f->b);
    uint32_t kept = 0;
    for (size_t i = 2; i < f->sink.n; i++) {
        assert_int_equal(f->sink.b[i]->ranges[0].partition, 2);
        kept += f->sink.b[i]->rows;
    }
    assert_int_equal(kept, 3);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.rows_dropped_revoke, 3);
    fx_free(f);
}

/* Event-time ordering splits the same way; split none ignores the flags. */
static void test_split_event_time_and_none(void **state)
{
    (void)state;
    fx *f = fx_new_split(4, 1000, PR_BATCH_ORDER_EVENT_TIME, 0, PR_BATCH_LATE_EMIT,
                         PR_BATCH_SPLIT_POPULAR);
    int64_t first = 0;
    for (int n = 3; first + n <= 60; n = n % 5 + 3) {
        add_split_rows(f, first, n, 1000);
        first += n;
    }
    pr_batcher_flush(f->b);
    check_split_streams(f, first, true);
    fx_free(f);

    f = fx_new(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    add_split_rows(f, 0, 40, 0);
    pr_batcher_flush(f->b);
    check_split_streams(f, 40, false);
    fx_free(f);
}

static void test_bad_config(void **state)
{
    (void)state;
    pr_batcher *b;
    char err[256];
    pr_batcher_cfg cfg = {
        .pipeline = "t", .sparse_width = 4, .batch = {.size = 0}, .on_emit = bt_on_emit};
    assert_int_equal(pr_batcher_new(&cfg, &b, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "batch.size"));
    cfg.batch.size = 4;
    cfg.sparse_width = 3;
    assert_int_equal(pr_batcher_new(&cfg, &b, err, sizeof(err)), PR_EINVAL);
}

/* A batcher built in code gets the documented defaults from the same table
 * the YAML loader and docs/configuration.md use. */
static void test_default_table(void **state)
{
    (void)state;
    pr_batch_cfg c;
    memset(&c, 0xff, sizeof(c));
    assert_int_equal(pr_cfgmap_set_defaults(&pr_batch_cfgmap, &c), 0);
    assert_int_equal(c.size, 4096);
    assert_int_equal(c.max_delay_ms, 100);
    assert_int_equal(c.ordering, PR_BATCH_ORDER_PARTITION);
    assert_int_equal(c.allowed_lateness_ms, 1000);
    assert_int_equal(c.late_policy, PR_BATCH_LATE_EMIT);
    assert_int_equal(c.split, PR_BATCH_SPLIT_NONE);
    assert_int_equal(c.reannounce_max, PR_BATCH_REANNOUNCE_MAX);
}

/* ------------------------------------------------------------------ notices */

static void set_notices(fx *f, pr_recycled *n, uint32_t k)
{
    f->io->out.recycled = n;
    f->io->out.n_recycled = k;
}

/* Exact mode (partition order, one stream): each notice lands in the batch
 * holding the first kept row at or after its block row, at that row's place;
 * a rejected row passes its notices to the next kept row, and notices past
 * the block's last kept row precede the next block's first row. */
static void test_notices_exact_place(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    bt_io_reset(f->io);
    for (int i = 0; i < 11; i++)
        bt_row(f->io, 0, i, 5, i == 5 || i == 10);
    pr_recycled n[] = {{0, 0, 7, 1}, {1, 5, 8, 2}, {0, 6, 9, 3}, {1, 9, 10, 4}, {0, 10, 11, 5}};
    set_notices(f, n, 5);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    set_notices(f, NULL, 0);
    /* kept rows 0-3 | 4 6 7 8 | 9 (+ next block) */
    assert_int_equal(f->sink.n, 2);
    const pr_batch *b1 = f->sink.b[0], *b2 = f->sink.b[1];
    assert_int_equal(b1->n_recycled, 1);
    assert_int_equal(b1->recycled[0].row, 0);
    assert_int_equal(b1->recycled[0].number, 1);
    assert_int_equal(b2->n_recycled, 2);
    assert_int_equal(b2->recycled[0].number, 2); /* block row 5 rejected -> row 6 */
    assert_int_equal(b2->recycled[0].row, 1);
    assert_int_equal(b2->recycled[0].col, 1);
    assert_int_equal(b2->recycled[0].index, 8);
    assert_int_equal(b2->recycled[1].number, 3);
    assert_int_equal(b2->recycled[1].row, 1);
    add_rows(f, 0, 11, 2, 5); /* next block: rows 11, 12 */
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 3);
    const pr_batch *b3 = f->sink.b[2];
    assert_int_equal(b3->rows, 3); /* 9, 11, 12 */
    assert_int_equal(b3->n_recycled, 2);
    assert_int_equal(b3->recycled[0].number, 4);
    assert_int_equal(b3->recycled[0].row, 0);
    assert_int_equal(b3->recycled[1].number, 5); /* after row 9, before row 11 */
    assert_int_equal(b3->recycled[1].row, 1);
    /* and they travel on the wire */
    pr_batch *b3m = (pr_batch *)b3;
    assert_int_equal(pr_batch_encode(b3m), 0);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b3m->pb, b3m->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.n_recycled, 2);
    assert_memory_equal(v.recycled, b3->recycled, 2 * sizeof(pr_recycled));
    pr_batch_view_fini(&v);
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.recycled_out, 5);
    fx_free(f);
}

/* event_time (rows reordered): each notice exactly once, in front of its
 * row (issue 19: at row 0 of the next batch before); split popular: at
 * their exact row too. */
static void test_notices_loose_modes(void **state)
{
    (void)state;
    fx *f = fx_new(4, 1000, PR_BATCH_ORDER_EVENT_TIME, 0, PR_BATCH_LATE_EMIT);
    pr_batcher_assign(f->b, 0);
    bt_io_reset(f->io);
    for (int i = 0; i < 3; i++)
        bt_row(f->io, 0, i, 100 + i, 0);
    pr_recycled n[] = {{0, 2, 7, 1}, {1, 2, 8, 2}};
    set_notices(f, n, 2);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    set_notices(f, NULL, 0);
    assert_int_equal(f->sink.n, 0);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 1);
    assert_int_equal(f->sink.b[0]->n_recycled, 2);
    assert_int_equal(f->sink.b[0]->recycled[0].row, 2);
    assert_int_equal(f->sink.b[0]->recycled[1].row, 2);
    assert_int_equal(f->sink.b[0]->recycled[1].number, 2);
    fx_free(f);

    /* split popular (issue 19): exact, in the regular stream, once */
    f = fx_new_split(2, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT,
                     PR_BATCH_SPLIT_POPULAR);
    bt_io_reset(f->io);
    for (int i = 0; i < 3; i++)
        bt_row(f->io, 0, i, 5, 0);
    uint64_t pop = 1; /* row 0 popular */
    set_notices(f, n, 2);
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, &pop), 0);
    set_notices(f, NULL, 0);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 2);
    assert_false(f->sink.b[0]->popular); /* rows 1, 2: full during the add */
    assert_int_equal(f->sink.b[0]->n_recycled, 2);
    assert_int_equal(f->sink.b[0]->recycled[0].row, 1); /* in front of row 2 */
    assert_int_equal(f->sink.b[0]->recycled[1].row, 1);
    assert_true(f->sink.b[1]->popular);
    assert_int_equal(f->sink.b[1]->n_recycled, 0);
    fx_free(f);
}

/* ------------------------------------------------------------------ notices, simulated
 *
 * An engine stand-in: per sparse column an LRU vocabulary of SIM_CAP indices
 * over SIM_KEYS values, numbering a notice for every recycle. Rows carry
 * their global number in dense column 0; sim_replay then plays the emitted
 * batches as a trainer would (sequence order, each notice applied at its
 * `row`) and checks that every index holds one value between its notices. */

#define SIM_CAP  4
#define SIM_KEYS 11
#define SIM_ROWS 3000

typedef struct sim {
    uint32_t rng;
    int32_t key[BT_NS][SIM_CAP];   /* value held by each index, -1 = none */
    uint32_t last[BT_NS][SIM_CAP]; /* LRU clock */
    uint32_t clock;
    uint64_t number; /* notices handed out */
    int32_t row_key[SIM_ROWS][BT_NS];
    uint8_t rejected[SIM_ROWS];
    uint32_t next_row;
    uint32_t jitter; /* event times id + [0, jitter): rows out of order (0: all 5) */
    pr_recycled notes[SIM_ROWS * BT_NS];
} sim;

static uint32_t sim_rand(sim *m)
{
    m->rng = m->rng * 1103515245u + 12345u;
    return (m->rng >> 8) & 0xffffff;
}

/* Index of value `key` in column c, recycling the least recently used index
 * when full (a notice at block row r). */
static int32_t sim_lookup(sim *m, int c, int32_t key, uint32_t r, pr_recycled *n, uint32_t *nn)
{
    int32_t lru = 0;
    m->clock++;
    for (int32_t i = 0; i < SIM_CAP; i++) {
        if (m->key[c][i] == key) {
            m->last[c][i] = m->clock;
            return i;
        }
        if (m->key[c][i] < 0) {
            m->key[c][i] = key;
            m->last[c][i] = m->clock;
            return i;
        }
        if (m->last[c][i] < m->last[c][lru])
            lru = i;
    }
    m->key[c][lru] = key;
    m->last[c][lru] = m->clock;
    n[(*nn)++] = (pr_recycled){(uint32_t)c, r, lru, ++m->number};
    return lru;
}

/* One block of n rows (partition n % 2 ... alternating), every 13th row
 * rejected, rows flagged popular at random (pop_pct percent). */
static void sim_block(fx *f, sim *m, uint32_t n, int pop_pct)
{
    bt_io_reset(f->io);
    uint64_t pop[16] = {0};
    uint32_t nn = 0;
    for (uint32_t r = 0; r < n && m->next_row < SIM_ROWS; r++) {
        uint32_t id = m->next_row++;
        int32_t p = (int32_t)(id % 2);
        int64_t et = m->jitter ? (int64_t)(id + sim_rand(m) % m->jitter) : 5;
        bt_row(f->io, p, id, et, id % 13 == 6);
        m->rejected[id] = id % 13 == 6;
        f->io->out.dense[r] = (float)id;
        for (int c = 0; c < BT_NS && !m->rejected[id]; c++) {
            /* skewed: low keys are frequent */
            int32_t key = (int32_t)(sim_rand(m) % SIM_KEYS);
            key = key > (int32_t)(sim_rand(m) % SIM_KEYS) ? key / 2 : key;
            m->row_key[id][c] = key;
            ((int32_t *)f->io->out.sparse)[(size_t)c * f->io->out.cap + r] =
                sim_lookup(m, c, key, r, m->notes, &nn);
        }
        if ((int)(sim_rand(m) % 100) < pop_pct)
            pr_bit_set(pop, r);
    }
    set_notices(f, nn ? m->notes : NULL, nn);
    assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, pop), 0);
    set_notices(f, NULL, 0);
}

/* Feed SIM_ROWS rows in blocks of 1..40, polling at random clock steps. */
static void sim_run(fx *f, sim *m, int pop_pct, uint32_t jitter)
{
    memset(m, 0, sizeof(*m));
    m->rng = 12345;
    m->jitter = jitter;
    memset(m->key, 0xff, sizeof(m->key));
    while (m->next_row < SIM_ROWS) {
        sim_block(f, m, 1 + sim_rand(m) % 40, pop_pct);
        pr_manual_clock_advance_ms(&f->mc, (int64_t)(sim_rand(m) % 40));
        (void)pr_batcher_poll(f->b);
    }
    pr_batcher_flush(f->b);
}

/* Replay the batches: every notice number 1..m->number exactly once, every
 * row once, `row` within its batch, under event_time each notice in front of
 * a row that uses its index (the first of the new value: every simulated
 * notice has one), and each index holds one value between two of its notices (a trainer
 * resetting the row at the notice trains every embedding row for one value
 * at a time). Returns the popular rows. */
static uint64_t sim_replay(fx *f, const sim *m)
{
    static uint8_t seen_note[SIM_ROWS * BT_NS + 1], seen_row[SIM_ROWS];
    memset(seen_note, 0, sizeof(seen_note));
    memset(seen_row, 0, sizeof(seen_row));
    int32_t held[BT_NS][SIM_CAP];
    memset(held, 0xff, sizeof(held));
    uint64_t popular = 0;
    for (size_t bi = 0; bi < f->sink.n; bi++) {
        const pr_batch *b = f->sink.b[bi];
        assert_int_equal(b->seq, bi + 1);
        uint32_t ni = 0;
        for (uint32_t i = 0; i <= b->rows; i++) {
            for (; ni < b->n_recycled && b->recycled[ni].row <= i; ni++) {
                const pr_recycled *n = &b->recycled[ni];
                assert_int_equal(n->row, i); /* notices in row order */
                assert_true(n->number >= 1 && n->number <= m->number);
                assert_int_equal(seen_note[n->number]++, 0); /* each number once */
                held[n->col][n->index] = -1;
                if (m->jitter) { /* event_time: exact, checked here (issue 19) */
                    assert_true(i < b->rows);
                    assert_int_equal(((const int32_t *)b->sparse)[(size_t)n->col * b->rows + i],
                                     n->index);
                }
            }
            if (i == b->rows)
                break;
            uint32_t id = (uint32_t)b->dense[i];
            assert_false(m->rejected[id]);
            assert_int_equal(seen_row[id]++, 0);
            popular += b->popular;
            for (int c = 0; c < BT_NS; c++) {
                int32_t idx = ((const int32_t *)b->sparse)[(size_t)c * b->rows + i];
                if (held[c][idx] < 0)
                    held[c][idx] = m->row_key[id][c];
                else
                    assert_int_equal(held[c][idx], m->row_key[id][c]);
            }
        }
        assert_int_equal(ni, b->n_recycled); /* every notice within the batch */
    }
    for (uint64_t n = 1; n <= m->number; n++)
        assert_int_equal(seen_note[n], 1);
    for (uint32_t id = 0; id < SIM_ROWS; id++)
        assert_int_equal(seen_row[id], !m->rejected[id]);
    return popular;
}

/* Issue 19 items 1 and 2: under batch.split popular every notice came twice
 * (the second copy in a later regular batch at a wrong row) and at row 0 of
 * the next batch, so rows of the old value could follow it; both failed
 * this test before. Now each number comes once, at its exact row in the
 * merged stream, in split and unsplit streams, with popular_min_rows too. */
static void test_notices_exact_split(void **state)
{
    (void)state;
    static sim m;
    const struct {
        pr_batch_split split;
        uint32_t min_rows;
        int pop_pct;
    } cases[] = {{PR_BATCH_SPLIT_NONE, 0, 50},
                 {PR_BATCH_SPLIT_POPULAR, 0, 50},
                 {PR_BATCH_SPLIT_POPULAR, 0, 90},
                 {PR_BATCH_SPLIT_POPULAR, 6, 90}};
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        fx *f =
            fx_new_split(8, 20, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT, cases[t].split);
        if (cases[t].min_rows) { /* the batcher copied cfg: rebuild with the minimum */
            pr_batcher_free(f->b);
            pr_batcher_cfg cfg = {.pipeline = "t",
                                  .n_dense = BT_ND,
                                  .n_sparse = BT_NS,
                                  .sparse_width = 4,
                                  .batch = {.size = 8,
                                            .max_delay_ms = 20,
                                            .split = PR_BATCH_SPLIT_POPULAR,
                                            .popular_min_rows = cases[t].min_rows},
                                  .clock = &f->mc.clock,
                                  .on_emit = bt_on_emit,
                                  .opaque = &f->sink};
            char err[256];
            assert_int_equal(pr_batcher_new(&cfg, &f->b, err, sizeof(err)), 0);
        }
        sim_run(f, &m, cases[t].pop_pct, 0);
        assert_true(m.number > 500); /* the test recycles a lot */
        uint64_t pop = sim_replay(f, &m);
        pr_batcher_stats st;
        pr_batcher_get_stats(f->b, &st);
        assert_int_equal(st.recycled_out, m.number);
        if (cases[t].split == PR_BATCH_SPLIT_POPULAR)
            assert_true(pop > 0 && st.batches_popular > 0);
        if (cases[t].min_rows) /* no popular batch below the minimum */
            for (size_t i = 0; i < f->sink.n; i++)
                if (f->sink.b[i]->popular)
                    assert_true(f->sink.b[i]->rows >= cases[t].min_rows);
        fx_free(f);
    }
}

/* Issue 19 (item 7 of trainer-protocol's list): under ordering event_time
 * the notices came at row 0 of the next batch emitted, so rows of the old
 * value released later (a later event time) followed them, and the replay
 * found indices holding two values; this failed before. Now a notice waits
 * in the event-time heap just before its row, rows of the new value wait
 * behind the old value's, and every notice lands at the first row of the
 * new value, exactly once, with rows out of order across two partitions,
 * split or not, late rows included. */
static void test_notices_exact_event_time(void **state)
{
    (void)state;
    static sim m;
    const struct {
        pr_batch_split split;
        int64_t lateness;
        uint32_t jitter;
    } cases[] = {{PR_BATCH_SPLIT_NONE, 0, 40},
                 {PR_BATCH_SPLIT_NONE, 30, 200},
                 {PR_BATCH_SPLIT_POPULAR, 0, 40},
                 {PR_BATCH_SPLIT_POPULAR, 10, 100}};
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        fx *f = fx_new_split(8, 20, PR_BATCH_ORDER_EVENT_TIME, cases[t].lateness,
                             PR_BATCH_LATE_EMIT, cases[t].split);
        sim_run(f, &m, 50, cases[t].jitter);
        assert_true(m.number > 500);
        uint64_t pop = sim_replay(f, &m);
        pr_batcher_stats st;
        pr_batcher_get_stats(f->b, &st);
        assert_int_equal(st.recycled_out, m.number);
        assert_int_equal(st.buffered_rows, 0);
        if (cases[t].split == PR_BATCH_SPLIT_POPULAR)
            assert_true(pop > 0);
        /* everything acknowledged: no notice held */
        for (size_t i = 0; i < f->sink.n; i++)
            assert_int_equal(pr_batcher_ack(f->b, f->sink.b[i]->seq), 0);
        assert_int_equal(pr_batcher_notice_floor(f->b), UINT64_MAX);
        fx_free(f);
    }
}

/* Issue 19 item 5: after a restart the engine hands every restored notice
 * to the first block at row 0 (562K in one batch in the acceptance run).
 * Now those below the saved floor (acknowledged before) are dropped, and
 * the others go out spread, at most PR_BATCH_REANNOUNCE_MAX per batch, but
 * always before the first row that uses their index; the floor stays at the
 * lowest one not yet sent. Before, the first batch carried all 3000. */
#define RS_NOTES 3000
#define RS_FLOOR 501
static void restart_case(pr_batch_ordering ord, pr_batch_split split, uint32_t cap)
{
    fx *f = fx_new_split(8, 1000, ord, 0, PR_BATCH_LATE_EMIT, split);
    pr_batcher_free(f->b);
    pr_batcher_cfg cfg = {.pipeline = "t",
                          .n_dense = BT_ND,
                          .n_sparse = BT_NS,
                          .sparse_width = 4,
                          .batch = {.size = 8,
                                    .max_delay_ms = 1000,
                                    .ordering = ord,
                                    .split = split,
                                    .reannounce_max = cap},
                          .clock = &f->mc.clock,
                          .on_emit = bt_on_emit,
                          .opaque = &f->sink,
                          .notice_restart_next = RS_NOTES + 1,
                          .notice_floor = RS_FLOOR};
    char err[256];
    assert_int_equal(pr_batcher_new(&cfg, &f->b, err, sizeof(err)), 0);
    pr_batcher_assign(f->b, 0);
    assert_int_equal(pr_batcher_notice_floor(f->b), RS_FLOOR); /* nothing seen yet */
    /* The engine still holds all the restored notices (and two new ones)
     * for its first block: they do not pull the saved floor below RS_FLOOR
     * (it fell to 1, so a restart stopped before its first block made the
     * next one announce everything again). */
    assert_int_equal(pr_batcher_notice_top(f->b, RS_NOTES + 2, RS_NOTES + 2), RS_NOTES + 1);
    /* notice n: column n % 2, index (n - 1) / 2; one new notice (3001) too */
    static pr_recycled n[RS_NOTES + 1];
    for (uint32_t i = 0; i < RS_NOTES; i++)
        n[i] = (pr_recycled){(i + 1) % 2, 0, i / 2, i + 1};
    n[RS_NOTES] = (pr_recycled){0, 3, 1499, RS_NOTES + 1};
    uint32_t rng = 7, id = 0;
    for (int blk = 0; blk < 50; blk++) {
        bt_io_reset(f->io);
        uint64_t pop[1] = {0};
        for (uint32_t r = 0; r < 8; r++, id++) {
            bt_row(f->io, 0, id, id, 0);
            f->io->out.dense[r] = (float)id;
            for (int c = 0; c < BT_NS; c++) {
                rng = rng * 1103515245u + 12345u;
                ((int32_t *)f->io->out.sparse)[(size_t)c * f->io->out.cap + r] =
                    (int32_t)((rng >> 8) % 1500);
            }
            if (r % 2)
                pr_bit_set(pop, r);
        }
        set_notices(f, blk ? NULL : n, blk ? 0 : RS_NOTES + 1);
        assert_int_equal(pr_batcher_add_split(f->b, &f->io->in, &f->io->out, pop), 0);
        set_notices(f, NULL, 0);
        if (blk == 0) {
            assert_true(pr_batcher_notice_floor(f->b) >= RS_FLOOR);
            /* after the first block the engine's pending ones are the newest */
            assert_int_equal(pr_batcher_notice_top(f->b, RS_NOTES + 3, 2), RS_NOTES + 2);
        }
    }
    pr_batcher_flush(f->b);
    /* Replay: an index whose notice is >= the floor still holds the old
     * value (-2) in the trainer; every row after the restart uses the new
     * one (-3): the notice must come first. */
    static uint8_t seen[RS_NOTES + 2];
    memset(seen, 0, sizeof(seen));
    int32_t held[BT_NS][1500];
    for (uint32_t i = 0; i < RS_NOTES; i++)
        held[(i + 1) % 2][i / 2] = i + 1 < RS_FLOOR ? -3 : -2;
    for (size_t bi = 0; bi < f->sink.n; bi++) {
        const pr_batch *b = f->sink.b[bi];
        assert_true(b->n_recycled <=
                    (cap ? cap : PR_BATCH_REANNOUNCE_MAX) + (size_t)b->rows * BT_NS + 1);
        uint32_t ni = 0;
        for (uint32_t i = 0; i <= b->rows; i++) {
            for (; ni < b->n_recycled && b->recycled[ni].row <= i; ni++) {
                const pr_recycled *x = &b->recycled[ni];
                assert_true(x->number >= RS_FLOOR && x->number <= RS_NOTES + 1);
                assert_int_equal(seen[x->number]++, 0);
                held[x->col][x->index] = -1;
            }
            for (int c = 0; i < b->rows && c < BT_NS; c++) {
                int32_t idx = ((const int32_t *)b->sparse)[(size_t)c * b->rows + i];
                if (held[c][idx] == -1)
                    held[c][idx] = -3;
                assert_int_equal(held[c][idx], -3);
            }
        }
    }
    for (uint32_t x = RS_FLOOR; x <= RS_NOTES + 1; x++)
        assert_int_equal(seen[x], 1);
    assert_true(f->sink.b[0]->n_recycled < RS_NOTES - RS_FLOOR); /* spread */
    pr_batcher_stats st;
    pr_batcher_get_stats(f->b, &st);
    assert_int_equal(st.recycled_skipped, RS_FLOOR - 1);
    assert_int_equal(pr_batcher_notice_floor(f->b), RS_FLOOR); /* none acked yet: the oldest held */
    for (size_t bi = 0; bi < f->sink.n; bi++)
        assert_int_equal(pr_batcher_ack(f->b, f->sink.b[bi]->seq), 0);
    assert_int_equal(pr_batcher_notice_floor(f->b), UINT64_MAX);
    fx_free(f);
}

static void test_notices_restart_spread(void **state)
{
    (void)state;
    restart_case(PR_BATCH_ORDER_PARTITION, PR_BATCH_SPLIT_NONE, 0);
    restart_case(PR_BATCH_ORDER_PARTITION, PR_BATCH_SPLIT_POPULAR, 0);
    restart_case(PR_BATCH_ORDER_EVENT_TIME, PR_BATCH_SPLIT_NONE, 0);
    /* batch.reannounce_max: a smaller bound spreads the backlog further */
    restart_case(PR_BATCH_ORDER_PARTITION, PR_BATCH_SPLIT_NONE, 100);
    restart_case(PR_BATCH_ORDER_EVENT_TIME, PR_BATCH_SPLIT_NONE, 100);
}

/* The notice floor file: missing = 0, round trip, junk refused. */
static void test_notice_floor_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/pr_floor_XXXXXX", path[64], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/p.notices", dir);
    pr_notice_acks v = {.floor = 9};
    assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), 0);
    assert_int_equal(v.floor, 0);
    assert_int_equal(v.n, 0);
    assert_int_equal(
        pr_batcher_notice_floor_save(path, &(pr_notice_acks){.floor = 284433}, err, sizeof(err)),
        0);
    assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), 0);
    assert_int_equal(v.floor, 284433);
    assert_int_equal(v.n, 0);
    pr_notice_acks_fini(&v);
    FILE *fp = fopen(path, "w");
    fputs("x\n", fp);
    fclose(fp);
    assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "not a notice number"));
    pr_notice_acks_fini(&v);
    remove(path);
    rmdir(dir);
}

/* Issue 19 item 6: every batch carries the hot-set version its rows were
 * judged against (the latest of its rows'), popular and regular alike. */
static void test_hot_version_stamp(void **state)
{
    (void)state;
    fx *f = fx_new_split(4, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT,
                         PR_BATCH_SPLIT_POPULAR);
    pr_batcher_hot_version(f->b, 5);
    add_split_rows(f, 0, 1, 5); /* (0,0) popular, (1,0) regular */
    pr_batcher_hot_version(f->b, 7);
    add_split_rows(f, 1, 1, 5);      /* (0,1) regular, (1,1) regular */
    pr_batcher_hot_version(f->b, 6); /* never goes back */
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 2);
    for (size_t i = 0; i < f->sink.n; i++)
        assert_int_equal(f->sink.b[i]->hot_version, f->sink.b[i]->popular ? 5 : 7);
    add_split_rows(f, 2, 1, 5);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.b[f->sink.n - 1]->hot_version, 7);
    fx_free(f);
}

/* A revoke drops buffered rows of a partition: the notices of the build
 * keep their place among the rows left (row 3 of 4 became row 1 of 2; it
 * stayed 3, past the batch's end, before). */
static void test_notices_after_revoke(void **state)
{
    (void)state;
    fx *f = fx_new(8, 1000, PR_BATCH_ORDER_PARTITION, 0, PR_BATCH_LATE_EMIT);
    bt_io_reset(f->io);
    for (int i = 0; i < 2; i++)
        for (int32_t p = 0; p < 2; p++)
            bt_row(f->io, p, i, 5, 0);
    pr_recycled n[] = {{1, 3, 9, 1}};
    set_notices(f, n, 1);
    assert_int_equal(pr_batcher_add(f->b, &f->io->in, &f->io->out), 0);
    set_notices(f, NULL, 0);
    assert_int_equal(pr_batcher_revoke(f->b, 0, NULL), 0);
    pr_batcher_flush(f->b);
    assert_int_equal(f->sink.n, 1);
    assert_int_equal(f->sink.b[0]->rows, 2);
    assert_int_equal(f->sink.b[0]->n_recycled, 1);
    assert_int_equal(f->sink.b[0]->recycled[0].row, 1);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_batches),
        cmocka_unit_test(test_deadline_exact),
        cmocka_unit_test(test_zero_delay),
        cmocka_unit_test(test_partition_order_and_metadata),
        cmocka_unit_test(test_safe_offsets),
        cmocka_unit_test(test_safe_offsets_runs_acked_out_of_order),
        cmocka_unit_test(test_safe_offsets_multi_and_inflight),
        cmocka_unit_test(test_safe_offsets_many_partitions),
        cmocka_unit_test(test_note_consumed_empty_tail),
        cmocka_unit_test(test_revoke),
        cmocka_unit_test(test_event_time_watermark),
        cmocka_unit_test(test_event_time_drop_late),
        cmocka_unit_test(test_event_time_idle_partition),
        cmocka_unit_test(test_event_time_revoke),
        cmocka_unit_test(test_split_popular),
        cmocka_unit_test(test_split_deadlines_and_revoke),
        cmocka_unit_test(test_split_event_time_and_none),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_default_table),
        cmocka_unit_test(test_notices_exact_place),
        cmocka_unit_test(test_notices_loose_modes),
        cmocka_unit_test(test_notices_exact_split),
        cmocka_unit_test(test_notices_exact_event_time),
        cmocka_unit_test(test_notices_restart_spread),
        cmocka_unit_test(test_notice_floor_file),
        cmocka_unit_test(test_hot_version_stamp),
        cmocka_unit_test(test_notices_after_revoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
