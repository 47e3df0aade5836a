/*
 * test_batcher_jagged.c — the batcher with a declared schema (issue 20):
 * rows from pr_out.side become jagged batches (labels [B, L], dense [B, D],
 * per-feature lengths and key-major values) under partition and event-time
 * ordering, with engine rejects, revoke, recycled-index notices per
 * feature, per-feature vocabulary sizes, the popular split (rows routed by
 * their flag, demoted behind a pending notice, merged back under
 * popular_min_rows, values kept with their row), and the batch
 * shape derived from a feature schema. Hand-built blocks, manual clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batcher_int.h"
#include "pr_clock.h"

/* Schema: labels click, buy; dense price; features user (vocab column 0),
 * hist (a list, vocab column 1), bucket (no vocab, 5 rows). */
#define NL 2
#define ND 1
#define NF 3
static const char *const label_names[NL] = {"click", "buy"};
static const char *const dense_names[ND] = {"price"};
static const char *const feat_names[NF] = {"user", "hist", "bucket"};
static const int16_t vocab_col[NF] = {0, 1, -1};
static const uint64_t sizes[NF] = {0, 0, 5};

/* Row (p, off): the values every check recomputes. */
static int64_t user_of(int32_t p, int64_t off)
{
    return p * 100000 + off;
}
static int32_t hist_len(int64_t off)
{
    return (int32_t)(off % 4);
}
static int64_t hist_val(int32_t p, int64_t off, int j)
{
    return (p * 100000 + off) * 10 + j;
}
/* With g_weighted, hist is a weighted list: each value's weight. */
static bool g_weighted;
static const uint8_t weighted[NF] = {0, 1, 0};
static float hist_w(int64_t v)
{
    return (float)(v % 1000) + 0.25f;
}

typedef struct jio {
    pr_block in;
    pr_out out;
} jio;

static jio *jio_new(uint32_t cap)
{
    jio *io = calloc(1, sizeof(*io));
    io->in.cap = io->out.cap = cap;
    io->in.partition = calloc(cap, sizeof(int32_t));
    io->in.offset = calloc(cap, sizeof(int64_t));
    io->in.event_time_ms = calloc(cap, sizeof(int64_t));
    io->out.n_sparse = 2;
    io->out.sparse_width = 4;
    io->out.rejected = calloc(pr_bitmap_words(cap), sizeof(uint64_t));
    io->out.side = pr_fside_new(NL, ND, NF, cap);
    assert_non_null(io->out.side);
    if (g_weighted)
        assert_int_equal(pr_fside_weigh(io->out.side, 1), 0);
    return io;
}

static void jio_free(jio *io)
{
    free(io->in.partition);
    free(io->in.offset);
    free(io->in.event_time_ms);
    free(io->out.rejected);
    pr_fside_free(io->out.side);
    free(io);
}

static void jio_reset(jio *io)
{
    io->in.rows = io->out.rows = 0;
    io->out.n_rejected = 0;
    io->out.n_recycled = 0;
    io->out.recycled = NULL;
    memset(io->out.rejected, 0, pr_bitmap_words(io->out.cap) * sizeof(uint64_t));
    pr_fside_reset(io->out.side);
}

static void push_val(pr_fside *s, uint16_t f, int64_t v)
{
    assert_int_equal(pr_fside_reserve(s, f, 1), 0);
    s->values[f][s->n_values[f]++] = v;
}

/* Append row (p, off, et); a rejected row keeps its lengths with 0 values. */
static void jrow(jio *io, int32_t p, int64_t off, int64_t et, int rejected)
{
    uint32_t r = io->in.rows++;
    io->out.rows = io->in.rows;
    io->in.partition[r] = p;
    io->in.offset[r] = off;
    io->in.event_time_ms[r] = et;
    pr_fside *s = io->out.side;
    s->labels[r * NL] = (float)(off & 1);
    s->labels[r * NL + 1] = off % 3 == 0 ? 1.0f : 0.0f;
    s->dense[r * ND] = (float)user_of(p, off) + 0.5f;
    pr_fside_lengths(s, 0)[r] = 1;
    push_val(s, 0, rejected ? 0 : user_of(p, off));
    pr_fside_lengths(s, 1)[r] = hist_len(off);
    for (int j = 0; j < hist_len(off); j++) {
        push_val(s, 1, rejected ? 0 : hist_val(p, off, j));
        if (g_weighted)
            s->weights[1][s->n_weights[1]++] = hist_w(hist_val(p, off, j));
    }
    pr_fside_lengths(s, 2)[r] = 1;
    push_val(s, 2, rejected ? 0 : off % 5);
    if (rejected) {
        pr_bit_set(io->out.rejected, r);
        io->out.n_rejected++;
    }
}

typedef struct fx {
    pr_manual_clock mc;
    pr_batch *b[256];
    size_t n;
    pr_batcher *bt;
    jio *io;
} fx;

static void on_emit(void *opaque, pr_batch *b)
{
    fx *f = opaque;
    f->b[f->n++] = pr_batch_ref(b);
}

static uint64_t vocab_cb(void *opaque, uint32_t col)
{
    (void)opaque;
    return 1000 + col;
}

/* the weighted schema also names each feature's vocabulary table (field 33) */
static const char *const tables[NF] = {"user", "hist", "user"};
static const pr_batch_schema schema = {NL,        ND,    NF,   label_names, dense_names, feat_names,
                                       vocab_col, sizes, NULL, NULL,        NULL};
static const pr_batch_schema schema_w = {
    NL, ND, NF, label_names, dense_names, feat_names, vocab_col, sizes, NULL, weighted, tables};

static fx *fx_new_split(uint32_t size, pr_batch_ordering ord, pr_batch_split split,
                        uint32_t popular_min_rows)
{
    fx *f = calloc(1, sizeof(*f));
    pr_manual_clock_init(&f->mc, 1700000000000LL);
    pr_batcher_cfg cfg = {
        .pipeline = "j",
        .n_sparse = 2,
        .sparse_width = 4,
        .batch = {.size = size,
                  .max_delay_ms = 100,
                  .ordering = ord,
                  .split = split,
                  .popular_min_rows = popular_min_rows},
        .clock = &f->mc.clock,
        .on_emit = on_emit,
        .vocab_size = vocab_cb,
        .opaque = f,
        .schema = g_weighted ? &schema_w : &schema,
    };
    char err[256];
    assert_int_equal(pr_batcher_new(&cfg, &f->bt, err, sizeof(err)), 0);
    f->io = jio_new(256);
    return f;
}

static fx *fx_new(uint32_t size, pr_batch_ordering ord)
{
    return fx_new_split(size, ord, PR_BATCH_SPLIT_NONE, 0);
}

static void fx_free(fx *f)
{
    pr_batcher_free(f->bt);
    for (size_t i = 0; i < f->n; i++)
        pr_batch_unref(f->b[i]);
    jio_free(f->io);
    free(f);
}

/* Every row of a jagged batch holds the values of its (p, off); the wire
 * round trip keeps them. Returns the rows' ids through ids[] (p << 32 | off). */
static void check_batch(const pr_batch *b, int64_t *ids)
{
    assert_true(b->jagged);
    assert_int_equal(b->n_sparse, NF);
    assert_int_equal(b->n_labels, NL);
    assert_string_equal(b->feature_keys[1], "hist");
    assert_string_equal(b->label_names[1], "buy");
    assert_string_equal(b->dense_names[0], "price");
    uint64_t at[NF], start = 0;
    for (int f = 0; f < NF; f++) {
        at[f] = start;
        for (uint32_t r = 0; r < b->rows; r++)
            start += (uint64_t)b->lengths[(size_t)f * b->rows + r];
    }
    assert_int_equal(start, b->n_values);
    for (uint32_t r = 0; r < b->rows; r++) {
        assert_int_equal(b->lengths[r], 1);
        int64_t u = b->values[at[0]++];
        int32_t p = (int32_t)(u / 100000);
        int64_t off = u % 100000;
        ids[r] = ((int64_t)p << 32) | off;
        assert_true(b->label_mat[r * NL] == (float)(off & 1));
        assert_true(b->label_mat[r * NL + 1] == (off % 3 == 0 ? 1.0f : 0.0f));
        assert_true(b->dense_mat[r] == (float)u + 0.5f);
        assert_int_equal(b->lengths[b->rows + r], hist_len(off));
        for (int j = 0; j < hist_len(off); j++) {
            if (g_weighted) /* the weight travels with its value; 1 on the others */
                assert_true(b->weights[at[1]] == hist_w(hist_val(p, off, j)) &&
                            b->weights[at[0] - 1] == 1.0f && b->weights[at[2]] == 1.0f);
            assert_int_equal(b->values[at[1]++], hist_val(p, off, j));
        }
        assert_int_equal(b->lengths[2 * b->rows + r], 1);
        assert_int_equal(b->values[at[2]++], off % 5);
    }
    assert_int_equal(b->vocab_sizes[0], 1000);
    assert_int_equal(b->vocab_sizes[1], 1001);
    assert_int_equal(b->vocab_sizes[2], 5);
    /* The wire keeps every tensor. */
    pr_batch *copy = pr_batch_ref((pr_batch *)b);
    assert_int_equal(pr_batch_encode(copy), 0);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(copy->pb, copy->pb_len, &v, err, sizeof(err)), 0);
    assert_true(v.jagged);
    assert_int_equal(v.values_len, b->n_values * 8);
    assert_memory_equal(v.values, b->values, v.values_len);
    assert_memory_equal(v.lengths, b->lengths, v.lengths_len);
    assert_int_equal(!b->weights, !g_weighted);
    assert_int_equal(v.weights_len, g_weighted ? b->n_values * 4 : 0);
    if (g_weighted) {
        assert_memory_equal(v.weights, b->weights, v.weights_len);
        assert_int_equal(v.n_weighted_keys, 1);
        assert_int_equal(pr_batch_view_key_index(&v, &v.weighted_keys[0]), 1);
        pr_batch *back = pr_batch_from_view(&v); /* the C client's batch */
        assert_non_null(back);
        assert_memory_equal(back->weights, b->weights, v.weights_len);
        assert_true(back->weighted[1] && !back->weighted[0] && !back->weighted[2]);
        assert_int_equal(v.n_feature_tables, NF);
        for (int k = 0; k < NF; k++) {
            assert_int_equal(v.feature_tables[k].len, strlen(tables[k]));
            assert_memory_equal(v.feature_tables[k].s, tables[k], strlen(tables[k]));
            assert_string_equal(back->feature_tables[k], tables[k]);
        }
        pr_batch_unref(back);
    } else {
        assert_int_equal(v.n_feature_tables, 0); /* none shared: nothing on the wire */
        assert_null(b->feature_tables);
    }
    pr_batch_view_fini(&v);
    pr_batch_unref(copy);
}

static void add(fx *f)
{
    assert_int_equal(pr_batcher_add(f->bt, &f->io->in, &f->io->out), 0);
    jio_reset(f->io);
}

/* ------------------------------------------------------------------ */

static void test_partition_order(void **state)
{
    (void)state;
    fx *f = fx_new(4, PR_BATCH_ORDER_PARTITION);
    for (int64_t off = 0; off < 10; off++)
        jrow(f->io, (int32_t)(off % 2), off, 5, off == 3);
    add(f);
    assert_int_equal(f->n, 2);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 3);
    int64_t ids[8], want = 0;
    for (size_t i = 0; i < f->n; i++) {
        assert_int_equal(f->b[i]->seq, i + 1);
        check_batch(f->b[i], ids);
        for (uint32_t r = 0; r < f->b[i]->rows; r++, want++) {
            if (want == 3)
                want++; /* rejected */
            assert_int_equal(ids[r] & 0xffffffff, want);
        }
        assert_true(f->b[i]->bytes >= f->b[i]->n_values * 8);
    }
    assert_int_equal(f->b[2]->rows, 1);
    /* Rows added across several blocks join the same batch. */
    for (int64_t off = 20; off < 23; off++) {
        jrow(f->io, 0, off, 5, 0);
        add(f);
    }
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 4);
    check_batch(f->b[3], ids);
    assert_int_equal(f->b[3]->rows, 3);
    fx_free(f);
}

static void test_event_time(void **state)
{
    (void)state;
    fx *f = fx_new(64, PR_BATCH_ORDER_EVENT_TIME);
    pr_batcher_assign(f->bt, 0);
    pr_batcher_assign(f->bt, 1);
    /* partition 0 at event times 10, 30, 50; partition 1 at 20, 40, 60 */
    for (int64_t i = 0; i < 3; i++)
        jrow(f->io, 0, i, 10 + 20 * i, 0);
    add(f);
    for (int64_t i = 0; i < 3; i++)
        jrow(f->io, 1, 10 + i, 20 + 20 * i, 0);
    add(f);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 1);
    int64_t ids[8];
    check_batch(f->b[0], ids);
    static const int64_t order[6] = {0, (1LL << 32) | 10, 1, (1LL << 32) | 11, 2, (1LL << 32) | 12};
    assert_int_equal(f->b[0]->rows, 6);
    for (int r = 0; r < 6; r++)
        assert_int_equal(ids[r], order[r]);
    fx_free(f);
}

static void test_revoke(void **state)
{
    (void)state;
    for (int ord = 0; ord < 2; ord++) {
        fx *f = fx_new(64, (pr_batch_ordering)ord);
        for (int64_t off = 0; off < 12; off++)
            jrow(f->io, (int32_t)(off % 3 == 1), off, 100 + off, 0);
        add(f);
        int64_t safe;
        assert_int_equal(pr_batcher_revoke(f->bt, 1, &safe), 0);
        pr_batcher_flush(f->bt);
        assert_int_equal(f->n, 1);
        int64_t ids[16];
        check_batch(f->b[0], ids);
        assert_int_equal(f->b[0]->rows, 8);
        for (uint32_t r = 0; r < 8; r++)
            assert_int_equal(ids[r] >> 32, 0);
        fx_free(f);
    }
}

/* A notice of feature hist (col 1) at block row 2 goes into the batch at
 * the row that holds that block row. */
static void test_notices(void **state)
{
    (void)state;
    fx *f = fx_new(4, PR_BATCH_ORDER_PARTITION);
    pr_recycled n[2] = {{1, 2, 7, 1}, {0, 5, 3, 2}};
    for (int64_t off = 0; off < 6; off++)
        jrow(f->io, 0, off, 5, off == 1);
    f->io->out.recycled = n;
    f->io->out.n_recycled = 2;
    add(f);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 2);
    /* block rows 0, 2, 3, 4 in batch 1 (row 1 rejected), 5 in batch 2 */
    assert_int_equal(f->b[0]->n_recycled, 1);
    assert_int_equal(f->b[0]->recycled[0].col, 1);
    assert_int_equal(f->b[0]->recycled[0].row, 1);
    assert_int_equal(f->b[1]->n_recycled, 1);
    assert_int_equal(f->b[1]->recycled[0].col, 0);
    assert_int_equal(f->b[1]->recycled[0].row, 0);
    fx_free(f);
}

/* The popular split with a declared schema: rows go to the stream their
 * flag says, each batch keeps every row's values (lists included), and a
 * popular build under popular_min_rows merges back in arrival order. */
static void test_split(void **state)
{
    (void)state;
    fx *f = fx_new_split(4, PR_BATCH_ORDER_PARTITION, PR_BATCH_SPLIT_POPULAR, 3);
    uint64_t pop[1] = {0};
    for (int64_t off = 10; off < 22; off++) {
        if (off % 2 == 0)
            pr_bit_set(pop, f->io->in.rows);
        jrow(f->io, 0, off, 5, 0);
    }
    assert_int_equal(pr_batcher_add_split(f->bt, &f->io->in, &f->io->out, pop), 0);
    jio_reset(f->io);
    assert_int_equal(f->n, 2); /* popular 10 12 14 16, regular 11 13 15 17 */
    pr_batcher_flush(f->bt);   /* popular 18 20: under 3 rows, merged: 18 19 20 21 */
    assert_int_equal(f->n, 3);
    static const int64_t want[3][4] = {{10, 12, 14, 16}, {11, 13, 15, 17}, {18, 19, 20, 21}};
    static const bool popular[3] = {true, false, false};
    for (size_t i = 0; i < 3; i++) {
        int64_t ids[4];
        check_batch(f->b[i], ids);
        assert_int_equal(f->b[i]->rows, 4);
        assert_int_equal(f->b[i]->popular, popular[i]);
        assert_int_equal(f->b[i]->seq, i + 1);
        for (int r = 0; r < 4; r++)
            assert_int_equal(ids[r], want[i][r]);
    }
    pr_batcher_stats st;
    pr_batcher_get_stats(f->bt, &st);
    assert_int_equal(st.rows_demoted, 2);
    fx_free(f);
}

/* The split under event_time: pending rows keep their stream and values. */
static void test_split_event_time(void **state)
{
    (void)state;
    fx *f = fx_new_split(8, PR_BATCH_ORDER_EVENT_TIME, PR_BATCH_SPLIT_POPULAR, 0);
    pr_batcher_assign(f->bt, 0);
    uint64_t pop[1] = {0x2a}; /* rows 1, 3, 5 */
    for (int64_t off = 0; off < 6; off++)
        jrow(f->io, 0, off, 10 + off, 0);
    assert_int_equal(pr_batcher_add_split(f->bt, &f->io->in, &f->io->out, pop), 0);
    jio_reset(f->io);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 2);
    static const int64_t want[2][3] = {{0, 2, 4}, {1, 3, 5}};
    for (size_t i = 0; i < 2; i++) {
        int64_t ids[8];
        check_batch(f->b[i], ids);
        assert_int_equal(f->b[i]->rows, 3);
        assert_int_equal(f->b[i]->popular, i == 1);
        for (int r = 0; r < 3; r++)
            assert_int_equal(ids[r], want[i][r]);
    }
    fx_free(f);
}

/* Notices under the split name features (col = side index): a popular build
 * holding a row with the recycled index (any element of a list) goes out at
 * once, before the notice; a popular row using an index whose notice waits
 * in the regular build is demoted behind it. */
static void test_split_notices(void **state)
{
    (void)state;
    fx *f = fx_new_split(8, PR_BATCH_ORDER_PARTITION, PR_BATCH_SPLIT_POPULAR, 0);
    uint64_t pop[1] = {0xff};
    for (int64_t off = 0; off < 4; off++)
        jrow(f->io, 0, off, 5, 0);
    assert_int_equal(pr_batcher_add_split(f->bt, &f->io->in, &f->io->out, pop), 0);
    jio_reset(f->io);
    assert_int_equal(f->n, 0);
    /* user of row 6 recycled; hist element of row 1 (in the popular build) too */
    pr_recycled n[2] = {{0, 0, user_of(0, 6), 1}, {1, 0, hist_val(0, 1, 0), 2}};
    for (int64_t off = 4; off < 8; off++)
        jrow(f->io, 0, off, 5, 0);
    f->io->out.recycled = n;
    f->io->out.n_recycled = 2;
    assert_int_equal(pr_batcher_add_split(f->bt, &f->io->in, &f->io->out, pop), 0);
    jio_reset(f->io);
    assert_int_equal(f->n, 1); /* the popular 0..3 went out before the notices */
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 3);
    static const int64_t want0[] = {0, 1, 2, 3}, want1[] = {6}, want2[] = {4, 5, 7};
    const int64_t *want[3] = {want0, want1, want2};
    static const uint32_t rows[3] = {4, 1, 3};
    static const bool popular[3] = {true, false, true};
    for (size_t i = 0; i < 3; i++) {
        int64_t ids[8];
        check_batch(f->b[i], ids);
        assert_int_equal(f->b[i]->rows, rows[i]);
        assert_int_equal(f->b[i]->popular, popular[i]);
        for (uint32_t r = 0; r < rows[i]; r++)
            assert_int_equal(ids[r], want[i][r]);
    }
    assert_int_equal(f->b[0]->n_recycled, 0);
    assert_int_equal(f->b[1]->n_recycled, 2); /* both notices, in front of row 6 */
    pr_batcher_stats st;
    pr_batcher_get_stats(f->bt, &st);
    assert_int_equal(st.rows_demoted, 1);
    fx_free(f);
}

/* Issue 19: under event_time a list feature's notice still lands at the
 * first row of the new value. Row B (partition 1, event time 50) brings a
 * new value to index X of hist, which row A (partition 0, event time 100,
 * read first) used for the old value: B waits behind A and the notice sits
 * between them (it went to row 0, before both, and A came after it). */
static void test_notices_event_time(void **state)
{
    (void)state;
    fx *f = fx_new(64, PR_BATCH_ORDER_EVENT_TIME);
    pr_batcher_assign(f->bt, 0);
    pr_batcher_assign(f->bt, 1);
    int64_t x = hist_val(0, 1, 0);
    jrow(f->io, 0, 1, 100, 0);         /* A: hist [x] */
    jrow(f->io, 1, 5, 50, 0);          /* B: hist [x] (new value) */
    f->io->out.side->values[1][1] = x; /* B's only hist value */
    pr_recycled n[1] = {{1, 1, x, 1}};
    f->io->out.recycled = n;
    f->io->out.n_recycled = 1;
    add(f);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 1);
    const pr_batch *b = f->b[0];
    assert_int_equal(b->rows, 2);
    assert_true(b->dense_mat[0] == (float)user_of(0, 1) + 0.5f); /* A first */
    assert_true(b->dense_mat[1] == (float)user_of(1, 5) + 0.5f);
    assert_int_equal(b->n_recycled, 1);
    assert_int_equal(b->recycled[0].row, 1);
    assert_int_equal(b->recycled[0].index, x);
    fx_free(f);
}

static void test_refusals(void **state)
{
    (void)state;
    /* A block without side tables is refused. */
    fx *f = fx_new(4, PR_BATCH_ORDER_PARTITION);
    jrow(f->io, 0, 0, 5, 0);
    pr_fside *s = f->io->out.side;
    f->io->out.side = NULL;
    assert_int_equal(pr_batcher_add(f->bt, &f->io->in, &f->io->out), PR_EINVAL);
    f->io->out.side = s;
    fx_free(f);
}

/* The same runs with hist weighted: every weight stays with its value
 * through blocks, the event-time pool, the popular split's moves and the
 * wire (TrainingBatch 31-32 and back). */
static void test_weighted(void **state)
{
    g_weighted = true;
    test_partition_order(state);
    test_event_time(state);
    test_revoke(state);
    test_split(state);
    test_split_event_time(state);
    test_split_notices(state);
    g_weighted = false;
}

static void test_schema_from_features(void **state)
{
    (void)state;
    pr_feature_spec fs[7];
    memset(fs, 0, sizeof(fs));
    snprintf(fs[0].name, PR_NAME_MAX, "click");
    fs[0].kind = PR_FEAT_LABEL;
    snprintf(fs[1].name, PR_NAME_MAX, "user");
    fs[1].kind = PR_FEAT_SPARSE;
    fs[1].n_ops = 1;
    fs[1].ops[0].op = PR_FOP_VOCAB;
    snprintf(fs[2].name, PR_NAME_MAX, "price");
    fs[2].kind = PR_FEAT_DENSE;
    snprintf(fs[3].name, PR_NAME_MAX, "cat_x_dev");
    fs[3].kind = PR_FEAT_SPARSE;
    fs[3].n_ops = 2;
    fs[3].ops[0].op = PR_FOP_CROSS;
    fs[3].ops[1].op = PR_FOP_HASH;
    fs[3].ops[1].n = 65536;
    snprintf(fs[4].name, PR_NAME_MAX, "history");
    fs[4].kind = PR_FEAT_LIST;
    fs[4].n_ops = 1;
    fs[4].ops[0].op = PR_FOP_VOCAB;
    snprintf(fs[5].name, PR_NAME_MAX, "age");
    fs[5].kind = PR_FEAT_SPARSE;
    fs[5].n_ops = 1;
    fs[5].ops[0].op = PR_FOP_BUCKETIZE;
    fs[5].ops[0].n_bounds = 4;
    snprintf(fs[6].name, PR_NAME_MAX, "recent"); /* history's table (`table:`) */
    fs[6].kind = PR_FEAT_LIST;
    fs[6].n_ops = 1;
    fs[6].ops[0].op = PR_FOP_VOCAB;
    snprintf(fs[6].table, PR_NAME_MAX, "history");
    pr_feature_schema sch = {.features = fs, .n_features = 7, .declared = true};
    pr_batch_schema bs;
    assert_int_equal(pr_batch_schema_from_features(&sch, &bs), 0);
    assert_int_equal(bs.n_labels, 1);
    assert_int_equal(bs.n_dense, 1);
    assert_int_equal(bs.n_feat, 5);
    assert_string_equal(bs.feature_names[2], "history");
    assert_int_equal(bs.vocab_col[0], 0);
    assert_int_equal(bs.vocab_col[1], -1);
    assert_int_equal(bs.vocab_col[2], 1);
    assert_int_equal(bs.vocab_col[3], -1);
    assert_int_equal(bs.sizes[1], 65536);
    assert_int_equal(bs.sizes[3], 6);
    assert_int_equal(bs.vocab_col[4], 1); /* recent: history's column */
    assert_non_null(bs.feature_tables);
    assert_string_equal(bs.feature_tables[0], "user");
    assert_string_equal(bs.feature_tables[4], "history");
    pr_batch_schema_fini(&bs);
}

/* Restored notices (a restart, cfg.notice_restart_next) wait in the backlog
 * and are spread PR_BATCH_REANNOUNCE_MAX per batch, but one whose index a
 * row uses (any value of a list feature) goes in front of that row. */
static void test_restored_notice_before_use(void **state)
{
    (void)state;
    fx *f = calloc(1, sizeof(*f));
    pr_manual_clock_init(&f->mc, 1700000000000LL);
    pr_batcher_cfg cfg = {
        .pipeline = "j",
        .sparse_width = 4,
        .batch = {.size = 4, .max_delay_ms = 100},
        .clock = &f->mc.clock,
        .on_emit = on_emit,
        .opaque = f,
        .schema = &schema,
        .notice_restart_next = 5000,
    };
    char err[256];
    assert_int_equal(pr_batcher_new(&cfg, &f->bt, err, sizeof(err)), 0);
    f->io = jio_new(256);
    uint32_t nn = PR_BATCH_REANNOUNCE_MAX + 6;
    pr_recycled *n = calloc(nn, sizeof(*n));
    for (uint32_t i = 0; i < nn; i++) /* hist indices 1000.., the last one used below */
        n[i] = (pr_recycled){1, 0, i + 1 < nn ? 1000 + (int64_t)i : hist_val(9, 5, 0), i + 1};
    f->io->out.recycled = n;
    f->io->out.n_recycled = nn;
    /* rows off 4 (no history) and 5 (history [hist_val(9, 5, 0)]) of partition 9 */
    jrow(f->io, 9, 4, 5, 0);
    jrow(f->io, 9, 5, 5, 0);
    add(f);
    pr_batcher_flush(f->bt);
    assert_int_equal(f->n, 1);
    const pr_batch *b = f->b[0];
    bool found = false;
    for (uint32_t i = 0; i < b->n_recycled; i++)
        if (b->recycled[i].col == 1 && b->recycled[i].index == hist_val(9, 5, 0)) {
            found = true;
            assert_true(b->recycled[i].row <= 1); /* before the row that uses it */
        }
    assert_true(found);
    assert_true(b->n_recycled <= PR_BATCH_REANNOUNCE_MAX + 1);
    free(n);
    fx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partition_order),
        cmocka_unit_test(test_event_time),
        cmocka_unit_test(test_revoke),
        cmocka_unit_test(test_notices),
        cmocka_unit_test(test_notices_event_time),
        cmocka_unit_test(test_restored_notice_before_use),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_notices),
        cmocka_unit_test(test_split_event_time),
        cmocka_unit_test(test_schema_from_features),
        cmocka_unit_test(test_weighted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
