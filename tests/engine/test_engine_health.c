/*
 * test_engine_health.c — the engine's feature health (pr_engine_stats
 * col_values / col_oov, pr_engine_missing): per sparse column the values
 * looked up (present ones) and those answered without an index of their own,
 * per feature the rows that lacked it; rows the engine rejects left out.
 * Checked against a count made here from the blocks and the rows the engine
 * wrote, over several blocks: the Criteo layout under profile default
 * (min_count and a full table give OOV) at engine.threads 1 and 4 (the
 * counts must not depend on threads); serving under both profiles (dlrm:
 * the `unseen` answer) whole and in two halves; a declared schema's
 * per-feature absent bitmaps (pr_fside.absent, spec.n_features); the
 * written-out popcount.
 */
#include "engine_test_util.h"

#define TROWS  3000
#define UNSEEN 777777

typedef struct {
    uint64_t values[PR_MAX_SPARSE], oov[PR_MAX_SPARSE], missing[2 * PR_MAX_SPARSE];
} hexp;

/* Add one processed block's health, counted from the block and the rows:
 * `oov_index` is what a value without an index got (PR_INDEX_OOV, or
 * UNSEEN for dlrm serving). */
static void hexp_add(hexp *x, const pr_block *b, const pr_out *o, int64_t oov_index)
{
    size_t w = pr_bitmap_words(b->cap);
    for (uint32_t r = 0; r < b->rows; r++) {
        if (o->n_rejected && pr_bit_test(o->rejected, r))
            continue;
        for (uint32_t d = 0; d < b->n_dense; d++)
            x->missing[d] += pr_bit_test(b->dense_missing + d * w, r);
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            if (pr_bit_test(b->sparse_missing + c * w, r)) {
                x->missing[b->n_dense + c]++;
                continue;
            }
            x->values[c]++;
            x->oov[c] += pr_out_index(o, c, r) == oov_index;
        }
    }
}

static void hexp_check(const hexp *x, const pr_engine *e)
{
    pr_engine_stats st;
    pr_engine_get_stats(e, &st);
    const pr_pipeline_spec *s = pr_engine_spec(e);
    uint64_t m[2 * PR_MAX_SPARSE + 2];
    uint32_t nf = (uint32_t)s->n_dense + s->n_sparse;
    for (uint32_t i = 0; i < nf + 2; i++)
        m[i] = 12345; /* overwritten: past the count with 0 */
    assert_int_equal(pr_engine_missing(e, m, nf + 2), nf);
    for (uint32_t i = 0; i < nf; i++)
        assert_int_equal(m[i], x->missing[i]);
    assert_int_equal(m[nf], 0);
    assert_int_equal(m[nf + 1], 0);
    for (uint32_t c = 0; c < s->n_sparse; c++) {
        assert_int_equal(st.col_values[c], x->values[c]);
        assert_int_equal(st.col_oov[c], x->oov[c]);
    }
}

static void same_health(const pr_engine *a, const pr_engine *b)
{
    pr_engine_stats sa, sb;
    pr_engine_get_stats(a, &sa);
    pr_engine_get_stats(b, &sb);
    assert_memory_equal(sa.col_values, sb.col_values, sizeof(sa.col_values));
    assert_memory_equal(sa.col_oov, sb.col_oov, sizeof(sa.col_oov));
    uint64_t ma[2 * PR_MAX_SPARSE], mb[2 * PR_MAX_SPARSE];
    uint32_t n = pr_engine_missing(a, ma, 2 * PR_MAX_SPARSE);
    assert_int_equal(pr_engine_missing(b, mb, 2 * PR_MAX_SPARSE), n);
    assert_memory_equal(ma, mb, n * sizeof(uint64_t));
}

/* The Criteo layout, profile default: min_count 3 on some columns and a
 * full table on one make OOV answers; bad hex rows are rejected (not
 * counted); 1 thread = 4 threads. */
static void test_criteo_default(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 3, 6, PR_VOCAB_DEFAULT, 1ULL << 40, true, true);
    s.sparse[1].min_count = 3;
    s.sparse[4].min_count = 2;
    s.sparse[2].capacity = 40; /* fills at once: OOV from then on */
    pr_engine *e1 = tu_engine(&s, "cpu", 1), *e4 = tu_engine(&s, "cpu", 4);
    pr_block *b = pr_block_new(s.n_dense, s.n_sparse, TROWS, false);
    pr_out *o1 = tu_out(e1, b), *o4 = tu_out(e4, b);
    hexp x = {0};
    uint64_t seed = 99, rejected = 0;
    for (int k = 0; k < 4; k++) {
        tu_gen_block(b, &seed, TROWS - (uint32_t)k * 100);
        tu_process(e1, b, o1);
        tu_process(e4, b, o4);
        hexp_add(&x, b, o1, PR_INDEX_OOV);
        rejected += o1->n_rejected;
    }
    assert_true(rejected > 0);
    assert_true(x.oov[1] > 0 && x.oov[2] > 0 && x.oov[4] > 0);
    assert_int_equal(x.oov[0], 0);
    assert_true(x.missing[0] > 0 && x.missing[3] > 0);
    hexp_check(&x, e1);
    same_health(e1, e4);
    pr_out_free(o1);
    pr_out_free(o4);
    pr_block_free(b);
    pr_engine_free(e1);
    pr_engine_free(e4);
}

/* u64 values of 3 columns (direct, hash, direct with min_count under
 * default), some missing. */
static void gen_u64(pr_block *b, uint64_t *seed, uint32_t rows)
{
    static const uint64_t step[3] = {1, 1000003, 1};
    pr_block_reset(b);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            uint64_t x = tu_rand(seed);
            tu_set_u64(b, c, r, tu_skewed(seed, 600) * step[c]);
            if (x % 11 == 0) {
                tu_set_u64(b, c, r, 0);
                pr_bit_set(b->sparse_missing + c * pr_bitmap_words(b->cap), r);
            }
        }
    b->rows = rows;
}

/* What `piperec process --frozen` does with a job of blocks: every block's
 * first half, then each column's second half over all blocks, then every
 * block's end: the counts must be each block's own (as `want`, an engine
 * that ran the same blocks whole), not the last block's again. */
static void interleaved(const pr_pipeline_spec *s, pr_vocab_profile prof, const pr_engine *want)
{
    pr_engine *e = tu_engine(s, "cpu", 1);
    pr_block *b[4];
    pr_out *o[4];
    pr_engine_split *sp[4];
    uint64_t seed = 5;
    char err[256];
    b[0] = pr_block_new(0, 3, TROWS, false);
    o[0] = tu_out(e, b[0]);
    gen_u64(b[0], &seed, TROWS / 4);
    tu_process(e, b[0], o[0]);
    assert_int_equal(pr_engine_vocab_serve(e, UNSEEN, err, sizeof(err)), 0);
    for (int k = 1; k < 4; k++) {
        b[k] = pr_block_new(0, 3, TROWS, false);
        o[k] = tu_out(e, b[k]);
        gen_u64(b[k], &seed, TROWS); /* the blocks `want` ran after its first */
    }
    for (int k = 1; k < 4; k++) {
        sp[k] = pr_engine_split_new(e);
        assert_int_equal(pr_engine_process_par(e, b[k], o[k], sp[k]), 0);
    }
    for (uint32_t c = 0; c < 3; c++)
        for (int k = 1; k < 4; k++)
            pr_engine_process_seq_col(e, b[k], o[k], sp[k], c);
    for (int k = 1; k < 4; k++)
        assert_int_equal(pr_engine_process_seq_end(e, b[k], o[k], sp[k], err, sizeof(err)), 0);
    same_health(want, e);
    (void)prof;
    for (int k = 0; k < 4; k++) {
        if (k)
            pr_engine_split_free(sp[k]);
        pr_out_free(o[k]);
        pr_block_free(b[k]);
    }
    pr_engine_free(e);
}

/* Serving: values without an index are OOV (default) or `unseen` (dlrm),
 * counted per column, the same whole and in two halves. */
static void serving(pr_vocab_profile prof)
{
    pr_pipeline_spec s;
    tu_spec(&s, 0, 3, prof, 1000, true, true);
    s.sparse[1].modulus = 1ULL << 40;
    if (prof == PR_VOCAB_DEFAULT)
        s.sparse[2].min_count = 2;
    pr_engine *ew = tu_engine(&s, "cpu", 1), *es = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 3, TROWS, false);
    pr_out *ow = tu_out(ew, b), *os = tu_out(es, b);
    uint64_t seed = 5;
    gen_u64(b, &seed, TROWS / 4); /* fills part of the vocabulary */
    tu_process(ew, b, ow);
    tu_process(es, b, os);
    hexp x = {0};
    hexp_add(&x, b, ow, PR_INDEX_OOV);
    if (prof == PR_VOCAB_DLRM) /* training under dlrm has no OOV answer */
        memset(x.oov, 0, sizeof(x.oov));
    char err[256];
    assert_int_equal(pr_engine_vocab_serve(ew, UNSEEN, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_serve(es, UNSEEN, err, sizeof(err)), 0);
    pr_engine_split *sp = pr_engine_split_new(es);
    assert_non_null(sp);
    for (int k = 0; k < 3; k++) {
        gen_u64(b, &seed, TROWS);
        tu_process(ew, b, ow);
        assert_int_equal(pr_engine_process_par(es, b, os, sp), 0);
        assert_false(pr_engine_split_whole(sp));
        assert_int_equal(pr_engine_process_seq(es, b, os, sp, err, sizeof(err)), 0);
        hexp_add(&x, b, ow, prof == PR_VOCAB_DLRM ? UNSEEN : PR_INDEX_OOV);
    }
    for (uint32_t c = 0; c < 3; c++)
        assert_true(x.oov[c] > 0);
    hexp_check(&x, ew);
    same_health(ew, es);
    interleaved(&s, prof, ew);
    pr_engine_split_free(sp);
    pr_out_free(ow);
    pr_out_free(os);
    pr_block_free(b);
    pr_engine_free(ew);
    pr_engine_free(es);
}

static void test_serving(void **state)
{
    (void)state;
    serving(PR_VOCAB_DEFAULT);
    serving(PR_VOCAB_DLRM);
}

/* spec.n_features: missing values are counted per schema feature from the
 * block's absent bitmaps (the decoder's), not per column. */
static void test_declared_absent(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    s.n_features = 3;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 200, false);
    b->side = pr_fside_new(0, 0, 0, b->cap);
    assert_non_null(b->side);
    b->side->n_schema = 3;
    size_t w = pr_bitmap_words(b->cap);
    b->side->absent = calloc(3 * w, sizeof(uint64_t));
    assert_non_null(b->side->absent);
    pr_out *o = tu_out(e, b);
    uint64_t want[3] = {0};
    for (int k = 0; k < 2; k++) {
        pr_block_reset(b);
        for (uint32_t r = 0; r < 150; r++) {
            tu_set_u64(b, 0, r, r % 7);
            for (uint32_t i = 0; i < 3; i++)
                if ((r + (uint32_t)k) % (i + 2) == 0) {
                    pr_bit_set(b->side->absent + i * w, r);
                    want[i]++;
                }
        }
        b->rows = 150;
        tu_process(e, b, o);
    }
    uint64_t m[4];
    assert_int_equal(pr_engine_missing(e, m, 4), 3);
    for (uint32_t i = 0; i < 3; i++)
        assert_int_equal(m[i], want[i]);
    assert_int_equal(m[3], 0);
    pr_engine_stats st;
    pr_engine_get_stats(e, &st);
    assert_int_equal(st.col_values[0], 300); /* no missing bit in the column itself */
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* pr_popcount64 (the bitmaps' count on CPUs without POPCNT) against a bit
 * by bit count. */
static void test_popcount(void **state)
{
    (void)state;
    uint64_t seed = 3;
    for (int k = 0; k < 2000; k++) {
        uint64_t w = k < 3 ? (k == 0 ? 0 : k == 1 ? ~(uint64_t)0 : 1ULL << 63) : tu_rand(&seed);
        w &= k % 3 ? ~(uint64_t)0 : tu_rand(&seed); /* sparser words too */
        unsigned n = 0;
        for (int b = 0; b < 64; b++)
            n += (unsigned)(w >> b) & 1u;
        assert_int_equal(pr_popcount64(w), n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_popcount),
        cmocka_unit_test(test_criteo_default),
        cmocka_unit_test(test_serving),
        cmocka_unit_test(test_declared_absent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
