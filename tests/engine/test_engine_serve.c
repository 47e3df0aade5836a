/*
 * test_engine_serve.c — the engine's serving mode (pr_engine_vocab_serve,
 * `piperec transform` and `piperec serve`): after a block fills the
 * vocabulary, lookups only. A known value keeps its index, a value without
 * one gets OOV (profile default) or the caller's `unseen` index (dlrm, also
 * for a full table), counted in pr_engine_stats.undecided_oov; nothing in
 * the vocabulary changes (entries, counts, eviction statistics), so the
 * same block twice gives the same rows. Covered per table kind (direct and
 * hash), min_count (a value below it is not counted up to an index),
 * bounded columns (lru/lfu: the next victim stays the same), the argument
 * checks, engine.threads 1 vs 4 on the Criteo layout, and blocks in two
 * halves (pr_engine_process_par/_seq) against whole ones.
 *
 * The vocabulary is compared through pr_engine_vocab_read, every field
 * (value, index, count, last_use, last_use_ms), before and after serving.
 */
#include "engine_test_util.h"

#include "pr_vocab.h"

/* Every column's vocabulary, for comparing before and after. */
typedef struct {
    tu_vocab col[4];
    uint32_t n;
} vsnap;

static vsnap vsnap_take(const pr_engine *e)
{
    vsnap s = {.n = pr_engine_spec(e)->n_sparse};
    assert_true(s.n <= 4);
    for (uint32_t c = 0; c < s.n; c++)
        s.col[c] = tu_vocab_get(e, c);
    return s;
}

static void vsnap_free(vsnap *s)
{
    for (uint32_t c = 0; c < s->n; c++)
        free(s->col[c].e);
}

/* The engine's vocabulary is exactly `s`, field by field. */
static void vsnap_assert_same(const vsnap *s, const pr_engine *e)
{
    vsnap now = vsnap_take(e);
    for (uint32_t c = 0; c < s->n; c++) {
        assert_int_equal(now.col[c].n, s->col[c].n);
        for (size_t i = 0; i < s->col[c].n; i++) {
            const pr_vocab_entry *a = &s->col[c].e[i], *b = &now.col[c].e[i];
            assert_int_equal(a->value, b->value);
            assert_int_equal(a->index, b->index);
            assert_int_equal(a->count, b->count);
            assert_int_equal(a->last_use, b->last_use);
            assert_int_equal(a->last_use_ms, b->last_use_ms);
        }
    }
    vsnap_free(&now);
}

static uint64_t undecided(const pr_engine *e)
{
    pr_engine_stats st;
    pr_engine_get_stats(e, &st);
    return st.undecided_oov;
}

#define MISS UINT64_MAX /* a missing value in col_block */

/* n rows of one column (values below the modulus; MISS = missing),
 * processed into o; got[] the indices. */
static void col_block(pr_engine *e, pr_block *b, pr_out *o, const uint64_t *vals, uint32_t n,
                      int64_t *got)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < n; r++) {
        tu_set_u64(b, 0, r, vals[r] == MISS ? 0 : vals[r]);
        if (vals[r] == MISS)
            pr_bit_set(b->sparse_missing, r);
    }
    b->rows = n;
    tu_process(e, b, o);
    for (uint32_t r = 0; r < n; r++)
        got[r] = pr_out_index(o, 0, r);
}

static void serve_ok(pr_engine *e, int64_t unseen)
{
    char err[512] = "";
    int rc = pr_engine_vocab_serve(e, unseen, err, sizeof(err));
    if (rc)
        print_error("pr_engine_vocab_serve: %d %s\n", rc, err);
    assert_int_equal(rc, 0);
}

/* ---------------------------------------------------------------- both profiles */

/* Fill, serve, look up known and new values; the same block twice gives the
 * same rows; the vocabulary never moves. Direct and hash tables. */
static void serve_one_column(pr_vocab_profile prof, bool hash, int64_t unseen)
{
    pr_pipeline_spec s;
    uint64_t mod = hash ? 1ULL << 40 : 1000;
    uint64_t k = hash ? 1000003ULL : 1; /* spread the keys of a hash table */
    tu_spec(&s, 0, 1, prof, mod, true, true);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, b), *o2 = tu_out(e, b);
    int64_t got[16], base = prof == PR_VOCAB_DEFAULT ? 2 : 0;
    const uint64_t fill[] = {10 * k, 11 * k, 12 * k, 10 * k};
    col_block(e, b, o, fill, 4, got);
    assert_int_equal(got[0], base);
    assert_int_equal(got[1], base + 1);
    assert_int_equal(got[2], base + 2);
    assert_int_equal(got[3], base);
    assert_int_equal(pr_engine_vocab_size(e, 0), (uint64_t)base + 3);
    assert_int_equal(undecided(e), 0);
    vsnap before = vsnap_take(e);

    serve_ok(e, unseen);
    int64_t oov = prof == PR_VOCAB_DEFAULT ? PR_INDEX_OOV : unseen;
    /* known, new, known, new, the same new again, missing, known */
    const uint64_t ask[] = {11 * k, 99 * k, 10 * k, 98 * k, 99 * k, MISS, 12 * k};
    col_block(e, b, o, ask, 7, got);
    assert_int_equal(got[0], base + 1);
    assert_int_equal(got[1], oov);
    assert_int_equal(got[2], base);
    assert_int_equal(got[3], oov);
    assert_int_equal(got[4], oov);
    /* missing: PR_INDEX_MISSING under default; dlrm looks it up as key 0 (new) */
    assert_int_equal(got[5], prof == PR_VOCAB_DEFAULT ? PR_INDEX_MISSING : oov);
    assert_int_equal(got[6], base + 2);
    uint64_t new_per_block = prof == PR_VOCAB_DEFAULT ? 3 : 4; /* dlrm: missing is a value */
    assert_int_equal(undecided(e), new_per_block);
    assert_int_equal(pr_engine_vocab_size(e, 0), (uint64_t)base + 3);
    vsnap_assert_same(&before, e);

    /* The same block again: the same rows (nothing was learnt). */
    col_block(e, b, o2, ask, 7, got);
    tu_assert_same_out(o, o2);
    assert_int_equal(undecided(e), 2 * new_per_block);
    vsnap_assert_same(&before, e);

    vsnap_free(&before);
    pr_out_free(o);
    pr_out_free(o2);
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_serve_default(void **state)
{
    (void)state;
    serve_one_column(PR_VOCAB_DEFAULT, false, 0);
    serve_one_column(PR_VOCAB_DEFAULT, true, 0);
    serve_one_column(PR_VOCAB_DEFAULT, false, 77); /* unseen has no say under default */
}

static void test_serve_dlrm(void **state)
{
    (void)state;
    serve_one_column(PR_VOCAB_DLRM, false, 7);
    serve_one_column(PR_VOCAB_DLRM, true, 7);
    serve_one_column(PR_VOCAB_DLRM, false, 0);
}

/* dlrm, a full table (capacity 3): a new value gets `unseen`, where
 * processing would have failed with PR_EFULL. */
static void test_serve_dlrm_full(void **state)
{
    (void)state;
    for (int hash = 0; hash < 2; hash++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 1, PR_VOCAB_DLRM, hash ? 1ULL << 40 : 1000, true, true);
        s.sparse[0].capacity = 3;
        pr_engine *e = tu_engine(&s, "cpu", 1);
        pr_block *b = pr_block_new(0, 1, 64, false);
        pr_out *o = tu_out(e, b);
        int64_t got[4];
        col_block(e, b, o, (const uint64_t[]){5, 6, 7}, 3, got);
        assert_int_equal(pr_engine_vocab_size(e, 0), 3);
        serve_ok(e, 2);
        col_block(e, b, o, (const uint64_t[]){8, 6, 9}, 3, got);
        assert_int_equal(got[0], 2);
        assert_int_equal(got[1], 1);
        assert_int_equal(got[2], 2);
        assert_int_equal(undecided(e), 2);
        assert_int_equal(pr_engine_vocab_size(e, 0), 3);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e);
    }
}

/* ---------------------------------------------------------------- min_count */

/* min_count 2: 50 seen once stays below it; serving looks it up three
 * times and it stays OOV, its count still 1 (a lookup that counted would
 * give it an index at the second). 60, seen twice, has index 2. */
static void test_serve_min_count(void **state)
{
    (void)state;
    for (int hash = 0; hash < 2; hash++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, hash ? 1ULL << 40 : 1000, true, true);
        s.sparse[0].min_count = 2;
        pr_engine *e = tu_engine(&s, "cpu", 1);
        pr_block *b = pr_block_new(0, 1, 64, false);
        pr_out *o = tu_out(e, b);
        int64_t got[8];
        col_block(e, b, o, (const uint64_t[]){60, 50, 60}, 3, got);
        assert_int_equal(got[0], PR_INDEX_OOV);
        assert_int_equal(got[1], PR_INDEX_OOV);
        assert_int_equal(got[2], 2);
        assert_int_equal(pr_engine_vocab_size(e, 0), 3);
        vsnap before = vsnap_take(e);
        assert_int_equal(before.col[0].n, 2); /* 60 assigned, 50 pending */
        assert_int_equal(before.col[0].e[1].value, 50);
        assert_int_equal(before.col[0].e[1].count, 1);

        serve_ok(e, 0);
        col_block(e, b, o, (const uint64_t[]){50, 50, 60, 50, 70}, 5, got);
        assert_int_equal(got[0], PR_INDEX_OOV);
        assert_int_equal(got[1], PR_INDEX_OOV);
        assert_int_equal(got[2], 2);
        assert_int_equal(got[3], PR_INDEX_OOV);
        assert_int_equal(got[4], PR_INDEX_OOV);
        assert_int_equal(undecided(e), 4); /* three below min_count, one unseen */
        assert_int_equal(pr_engine_vocab_size(e, 0), 3);
        vsnap_assert_same(&before, e);
        vsnap_free(&before);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e);
    }
}

/* ---------------------------------------------------------------- bounded columns */

/* An evicting column, capacity 2 indices: 10 then 11 fill it, so 10 is the
 * next victim (lru: least recent; lfu: 10 and 11 used as often, 10 older).
 * Serving looks 10 up again and again and asks for new values: nothing is
 * evicted, the statistics stay, and a fresh engine loaded from the serving
 * engine's snapshot still evicts 10 (its index) for the next new value. */
static void serve_bounded(pr_vocab_eviction ev, pr_vocab_profile prof, bool hash, int64_t unseen,
                          char *dir)
{
    pr_pipeline_spec s;
    int64_t base = prof == PR_VOCAB_DEFAULT ? 2 : 0;
    tu_spec(&s, 0, 1, prof, hash ? 1ULL << 40 : 1000, true, true);
    s.sparse[0].capacity = (uint64_t)base + 2;
    s.sparse[0].eviction = ev;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, b);
    int64_t got[8];
    col_block(e, b, o, (const uint64_t[]){10, 11}, 2, got);
    assert_int_equal(got[0], base);
    assert_int_equal(got[1], base + 1);
    vsnap before = vsnap_take(e);

    serve_ok(e, unseen);
    int64_t oov = prof == PR_VOCAB_DEFAULT ? PR_INDEX_OOV : unseen;
    const uint64_t ask[] = {10, 12, 10, 10, 13, 10};
    col_block(e, b, o, ask, 6, got);
    assert_int_equal(got[0], base);
    assert_int_equal(got[1], oov);
    assert_int_equal(got[2], base);
    assert_int_equal(got[3], base);
    assert_int_equal(got[4], oov);
    assert_int_equal(got[5], base);
    assert_int_equal(o->n_recycled, 0);
    assert_int_equal(undecided(e), 2);
    assert_int_equal(pr_engine_vocab_recycled_total(e), 0);
    vsnap_assert_same(&before, e);
    vsnap_free(&before);

    /* The next victim, as a fresh engine with this state decides it. */
    char snap[512], err[512];
    snprintf(snap, sizeof(snap), "%s/serve.snap", dir);
    assert_int_equal(pr_vocab_save(e, snap, err, sizeof(err)), 0);
    pr_engine *f = tu_engine(&s, "cpu", 1);
    if (pr_vocab_load(f, snap, err, sizeof(err)))
        fail_msg("pr_vocab_load: %s", err);
    col_block(f, b, o, (const uint64_t[]){14, 11}, 2, got);
    assert_int_equal(got[0], base); /* 10's index */
    assert_int_equal(got[1], base + 1);
    assert_int_equal(o->n_recycled, 1);
    assert_int_equal(o->recycled[0].index, base);
    pr_engine_free(f);

    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_serve_bounded(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    for (int hash = 0; hash < 2; hash++) {
        serve_bounded(PR_EVICT_LRU, PR_VOCAB_DEFAULT, hash, 0, dir);
        serve_bounded(PR_EVICT_LFU, PR_VOCAB_DEFAULT, hash, 0, dir);
        /* dlrm: PR_INDEX_OOV (1) is 11's index here; a new value is `unseen` */
        serve_bounded(PR_EVICT_LRU, PR_VOCAB_DLRM, hash, 5, dir);
        serve_bounded(PR_EVICT_LFU, PR_VOCAB_DLRM, hash, 5, dir);
    }
    tu_rmdir(dir);
}

static int count_usage(uint32_t col, uint64_t key, uint32_t count, void *opaque)
{
    (void)col, (void)key;
    *(uint64_t *)opaque += count;
    return 0;
}

/* A bounded column in a shared vocabulary (`serve --from-log`): a frozen
 * replica's lookups count uses for the log (pr_engine_vocab_drain_usage),
 * serving ones none, so serving moves no replica's eviction order. */
static void test_serve_shared_bounded_no_usage(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    s.sparse[0].capacity = 8;
    s.sparse[0].eviction = PR_EVICT_LRU;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, b);
    int64_t got[8];
    col_block(e, b, o, (const uint64_t[]){10, 11}, 2, got);
    char err[256];
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    uint64_t uses = 0;
    col_block(e, b, o, (const uint64_t[]){10, 10}, 2, got); /* a replica's lookups */
    assert_int_equal(pr_engine_vocab_drain_usage(e, count_usage, &uses), 0);
    assert_int_equal(uses, 2);
    serve_ok(e, 0);
    uses = 0;
    col_block(e, b, o, (const uint64_t[]){10, 11, 10, 12}, 4, got);
    assert_int_equal(got[0], 2);
    assert_int_equal(got[3], PR_INDEX_OOV);
    assert_int_equal(pr_engine_vocab_drain_usage(e, count_usage, &uses), 0);
    assert_int_equal(uses, 0);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* A bounded column with min_count 2: a value below it is OOV under serving
 * and counted as undecided, like an unbounded column's. */
static void test_serve_bounded_min_count(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    s.sparse[0].capacity = 4;
    s.sparse[0].eviction = PR_EVICT_LRU;
    s.sparse[0].min_count = 2;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, b);
    int64_t got[8];
    col_block(e, b, o, (const uint64_t[]){60, 50, 60}, 3, got);
    assert_int_equal(got[2], 2);
    vsnap before = vsnap_take(e);
    serve_ok(e, 0);
    col_block(e, b, o, (const uint64_t[]){50, 50, 60, 70}, 4, got);
    assert_int_equal(got[0], PR_INDEX_OOV);
    assert_int_equal(got[1], PR_INDEX_OOV);
    assert_int_equal(got[2], 2);
    assert_int_equal(got[3], PR_INDEX_OOV);
    assert_int_equal(undecided(e), 3);
    vsnap_assert_same(&before, e);
    vsnap_free(&before);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* ---------------------------------------------------------------- arguments */

static void test_serve_args(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512] = "";
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_engine_vocab_serve(e, -1, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "unseen"));
    /* 4-byte indices: 2^32 + 1 would come out as 1, a value's index */
    assert_int_equal(pr_engine_sparse_width(e), 4);
    assert_int_equal(pr_engine_vocab_serve(e, (1LL << 32) + 1, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "0..2147483647"));
    /* refused: still learning */
    pr_block *b = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, b);
    int64_t got[2];
    col_block(e, b, o, (const uint64_t[]){3, 4}, 2, got);
    assert_int_equal(got[1], 1);
    assert_int_equal(pr_engine_vocab_size(e, 0), 2);
    pr_out_free(o);
    pr_engine_free(e);

    /* no vocab: 0, and processing is as before */
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, false);
    e = tu_engine(&s, "cpu", 1);
    o = tu_out(e, b);
    assert_int_equal(pr_engine_vocab_serve(e, 3, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_serve(e, -1, err, sizeof(err)), 0);
    col_block(e, b, o, (const uint64_t[]){3, 1004}, 2, got);
    assert_int_equal(got[0], 3);
    assert_int_equal(got[1], 4); /* modulus only */
    assert_int_equal(undecided(e), 0);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* ---------------------------------------------------------------- threads */

#define TROWS  9000    /* over two chunks of PR__CHUNK rows */
#define UNSEEN 9999999 /* dlrm: above every index the first block gives */

/* The Criteo layout (hex values, some missing, a few bad), columns 0-3
 * hashed; under `prof` default also min_count 2 on some columns and a
 * bounded column. Fill from one seed, serve, process another seed's block
 * (new values) twice: threads 1 and 4 give the same rows, counts and
 * vocabulary. */
static void serve_threads(pr_vocab_profile prof)
{
    pr_pipeline_spec s;
    pr_pipeline_spec_default(&s);
    s.profile = prof;
    for (int c = 0; c < 4; c++)
        s.sparse[c].modulus = 1ULL << 40;
    if (prof == PR_VOCAB_DEFAULT) {
        s.sparse[1].min_count = 2;
        s.sparse[5].min_count = 3;
        s.sparse[7].capacity = 500;
        s.sparse[7].eviction = PR_EVICT_LRU;
    }
    pr_engine *e1 = tu_engine(&s, "cpu", 1), *e4 = tu_engine(&s, "cpu", 4);
    pr_block *b = pr_block_new(s.n_dense, s.n_sparse, TROWS, false);
    pr_out *o1 = tu_out(e1, b), *o4 = tu_out(e4, b), *again = tu_out(e4, b);
    uint64_t seed = 42;
    tu_gen_block(b, &seed, TROWS);
    tu_process(e1, b, o1);
    tu_process(e4, b, o4);
    tu_assert_same_out(o1, o4);
    serve_ok(e1, UNSEEN);
    serve_ok(e4, UNSEEN);
    tu_assert_same_vocab(e1, e4);

    seed = 4242; /* other values: many unseen */
    tu_gen_block(b, &seed, TROWS);
    tu_process(e1, b, o1);
    tu_process(e4, b, o4);
    tu_assert_same_out(o1, o4);
    assert_true(o1->n_rejected > 0); /* the bad hex rows */
    uint64_t u = undecided(e1);
    assert_true(u > 1000);
    assert_int_equal(undecided(e4), u);
    tu_process(e4, b, again);
    tu_assert_same_out(o4, again);
    assert_int_equal(undecided(e4), 2 * u);
    tu_assert_same_vocab(e1, e4);
    /* Each unseen value's row says so: `unseen` (above every index) under
     * dlrm, OOV under default; a value the first block gave an index keeps it. */
    uint64_t marked = 0;
    for (uint32_t c = 0; c < s.n_sparse; c++)
        for (uint32_t r = 0; r < o1->rows; r++)
            if (!pr_bit_test(o1->rejected, r))
                marked += pr_out_index(o1, c, r) == (prof == PR_VOCAB_DLRM ? UNSEEN : PR_INDEX_OOV);
    assert_int_equal(marked, u);
    pr_out_free(o1);
    pr_out_free(o4);
    pr_out_free(again);
    pr_block_free(b);
    pr_engine_free(e1);
    pr_engine_free(e4);
}

static void test_serve_threads(void **state)
{
    (void)state;
    serve_threads(PR_VOCAB_DLRM);
    serve_threads(PR_VOCAB_DEFAULT);
}

/* ---------------------------------------------------------------- halves */

/* u64 values (some missing) of 4 columns: direct, hash, direct with
 * min_count 2, hash with min_count 3. */
static void gen_u64_block(pr_block *b, uint64_t *seed, uint32_t rows)
{
    static const uint64_t span[4] = {900, 1ULL << 40, 900, 1ULL << 40};
    pr_block_reset(b);
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(tu_rand(seed) & 1);
        for (uint32_t d = 0; d < b->n_dense; d++)
            b->dense[(size_t)d * b->cap + r] = (double)tu_skewed(seed, 5000);
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            uint64_t x = tu_rand(seed);
            tu_set_u64(b, c, r, tu_skewed(seed, span[c] / 1000 + 300) * (span[c] / 1000 + 1));
            if (x % 17 == 0) {
                tu_set_u64(b, c, r, 0);
                pr_bit_set(b->sparse_missing + c * pr_bitmap_words(b->cap), r);
            }
        }
    }
    b->rows = rows;
}

/* A serving engine's blocks in two halves (what `piperec serve` runs on
 * several threads): the same rows and unseen counts as pr_engine_process,
 * with the first halves of two blocks run before either second half, for
 * direct and hash tables, min_count (profile default), both profiles. */
static void serve_split(pr_vocab_profile prof)
{
    pr_pipeline_spec s;
    tu_spec(&s, 2, 4, prof, 1000, true, true);
    s.sparse[1].modulus = s.sparse[3].modulus = 1ULL << 40;
    if (prof == PR_VOCAB_DEFAULT) { /* dlrm has no OOV for a value below it */
        s.sparse[2].min_count = 2;
        s.sparse[3].min_count = 3;
    }
    pr_engine *ew = tu_engine(&s, "cpu", 1), *es = tu_engine(&s, "cpu", 1);
    pr_block *b1 = pr_block_new(2, 4, TROWS, false), *b2 = pr_block_new(2, 4, TROWS, false);
    pr_out *w1 = tu_out(ew, b1), *w2 = tu_out(ew, b1), *s1 = tu_out(es, b1), *s2 = tu_out(es, b1);
    uint64_t seed = 7;
    gen_u64_block(b1, &seed, TROWS);
    tu_process(ew, b1, w1);
    tu_process(es, b1, s1);
    serve_ok(ew, UNSEEN);
    serve_ok(es, UNSEEN);
    gen_u64_block(b1, &seed, TROWS); /* the same distributions: known and new values */
    gen_u64_block(b2, &seed, TROWS / 3);
    tu_process(ew, b1, w1);
    tu_process(ew, b2, w2);

    pr_engine_split *sp1 = pr_engine_split_new(es), *sp2 = pr_engine_split_new(es);
    assert_non_null(sp1);
    assert_non_null(sp2);
    assert_int_equal(pr_engine_process_par(es, b1, s1, sp1), 0);
    assert_int_equal(pr_engine_process_par(es, b2, s2, sp2), 0);
    assert_false(pr_engine_split_whole(sp1)); /* the first half did the lookups */
    assert_false(pr_engine_split_whole(sp2));
    char err[256];
    assert_int_equal(pr_engine_process_seq(es, b1, s1, sp1, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_process_seq(es, b2, s2, sp2, err, sizeof(err)), 0);
    tu_assert_same_out(w1, s1);
    tu_assert_same_out(w2, s2);
    assert_true(undecided(ew) > 100);
    assert_int_equal(undecided(es), undecided(ew));
    tu_assert_same_vocab(ew, es);
    pr_engine_split_free(sp1);
    pr_engine_split_free(sp2);
    pr_out_free(w1);
    pr_out_free(w2);
    pr_out_free(s1);
    pr_out_free(s2);
    pr_block_free(b1);
    pr_block_free(b2);
    pr_engine_free(ew);
    pr_engine_free(es);
}

static void test_serve_split(void **state)
{
    (void)state;
    serve_split(PR_VOCAB_DEFAULT);
    serve_split(PR_VOCAB_DLRM);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serve_default),
        cmocka_unit_test(test_serve_dlrm),
        cmocka_unit_test(test_serve_dlrm_full),
        cmocka_unit_test(test_serve_min_count),
        cmocka_unit_test(test_serve_bounded),
        cmocka_unit_test(test_serve_bounded_min_count),
        cmocka_unit_test(test_serve_args),
        cmocka_unit_test(test_serve_threads),
        cmocka_unit_test(test_serve_shared_bounded_no_usage),
        cmocka_unit_test(test_serve_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
