/*
 * test_feature_exec.c — executing a declared feature schema on the engine
 * (issue 20, fpga_engine/feature_exec.c): the engine spec derived from a
 * schema (per-feature vocabulary options, the ttl_s refusal on lists),
 * jagged blocks through the cpu backend (col_rows keys, first-appearance
 * order across block boundaries and thread counts), pr_feature_finish
 * (lengths, values, operators after vocab, notices per feature and row), a
 * shared vocabulary (misses, apply, lookup-only processing) over jagged blocks
 * the refusal of jagged blocks by a backend that cannot run them.
 */
#include "engine_test_util.h"

/* label click, dense price, sparse user [vocab], list hist (max_len 4)
 * [vocab], sparse age [bucketize], sparse cat [vocab, modulus 3]. */
static pr_feature_spec g_feats[6];
static pr_feature_schema g_schema = {.features = g_feats, .n_features = 6, .declared = true};

static void feat(int i, const char *name, pr_feature_kind kind, const pr_fop *ops, int n_ops)
{
    pr_feature_spec *f = &g_feats[i];
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    f->kind = kind;
    f->n_paths = 1;
    snprintf(f->paths[0], sizeof(f->paths[0]), "%s", name);
    f->max_len = kind == PR_FEAT_LIST ? 4 : 0;
    f->n_ops = (uint8_t)n_ops;
    for (int k = 0; k < n_ops; k++)
        f->ops[k].op = ops[k];
}

static int setup(void **state)
{
    (void)state;
    static const pr_fop vocab[] = {PR_FOP_VOCAB}, buck[] = {PR_FOP_BUCKETIZE},
                        vmod[] = {PR_FOP_VOCAB, PR_FOP_MODULUS};
    feat(0, "click", PR_FEAT_LABEL, NULL, 0);
    feat(1, "price", PR_FEAT_DENSE, NULL, 0);
    feat(2, "user", PR_FEAT_SPARSE, vocab, 1);
    feat(3, "hist", PR_FEAT_LIST, vocab, 1);
    feat(4, "age", PR_FEAT_SPARSE, buck, 1);
    g_feats[4].ops[0].n_bounds = 1;
    g_feats[4].ops[0].bounds[0] = 10;
    feat(5, "cat", PR_FEAT_SPARSE, vmod, 2);
    g_feats[5].ops[1].n = 3;
    return 0;
}

static void test_shapes_and_spec(void **state)
{
    (void)state;
    assert_int_equal(pr_feature_side_index(&g_schema, 0), -1);
    assert_int_equal(pr_feature_side_index(&g_schema, 2), 0);
    assert_int_equal(pr_feature_side_index(&g_schema, 5), 3);
    assert_int_equal(pr_feature_vocab_step(&g_feats[5]), 0);
    assert_int_equal(pr_feature_vocab_step(&g_feats[4]), -1);

    pr_pipeline_spec base, spec;
    pr_pipeline_spec_default(&base);
    snprintf(base.name, sizeof(base.name), "clicks");
    base.profile = PR_VOCAB_DEFAULT;
    base.n_sparse = 4;
    const char *names[] = {"user", "hist", "age", "cat"};
    for (int c = 0; c < 4; c++)
        snprintf(base.sparse[c].name, PR_NAME_MAX, "%s", names[c]);
    base.sparse[3].capacity = 100; /* transform.columns.cat.capacity */
    char err[512] = "";
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), 0);
    assert_string_equal(spec.name, "clicks");
    assert_int_equal(spec.n_dense, 0);
    assert_false(spec.has_label);
    assert_int_equal(spec.n_sparse, 3);
    assert_int_equal(spec.n_sparse_ops, 1);
    assert_int_equal(spec.sparse_ops[0], PR_OP_VOCAB);
    assert_string_equal(spec.sparse[1].name, "hist");
    assert_string_equal(spec.sparse[2].name, "cat");
    assert_int_equal(spec.sparse[2].capacity, 100);
    assert_int_equal(spec.profile, PR_VOCAB_DEFAULT);

    base.sparse[1].eviction = PR_EVICT_TTL;
    base.sparse[1].capacity = 50;
    base.sparse[1].ttl_s = 60;
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "list feature 'hist'"));
}

/* Row r of the test data: user u%5, hist of r%5 values (r+k)%7, age r%20,
 * cat (r*3)%4; row r%6 == 5 has no user (missing). */
static void fill_row(pr_block *b, uint32_t r_global)
{
    pr_fside *s = b->side;
    uint32_t r = b->rows;
    s->labels[r] = (float)(r_global % 2);
    s->dense[r] = (float)r_global * 0.5f;
    uint64_t *miss = b->sparse_missing;
    /* user: col 0, one element */
    uint32_t e = b->col_rows[0]++;
    if (r_global % 6 == 5)
        pr_bit_set(miss, e);
    else
        b->sparse_u64[e] = 1000 + r_global % 5;
    pr_fside_lengths(s, 0)[r] = 1;
    /* hist: col 1 */
    uint32_t n = r_global % 5;
    for (uint32_t k = 0; k < n; k++)
        b->sparse_u64[(size_t)1 * b->scap + b->col_rows[1]++] = 70 + (r_global + k) % 7;
    pr_fside_lengths(s, 1)[r] = (int32_t)n;
    /* age: side values, no vocab */
    assert_int_equal(pr_fside_reserve(s, 2, 1), 0);
    s->values[2][s->n_values[2]++] = r_global % 20 >= 10 ? 2 : 1;
    pr_fside_lengths(s, 2)[r] = 1;
    /* cat: col 2 */
    b->sparse_u64[(size_t)2 * b->scap + b->col_rows[2]++] = (r_global * 3) % 4;
    pr_fside_lengths(s, 3)[r] = 1;
    b->rows++;
}

/* Expected output of feature f for the N rows, computed independently:
 * first-appearance order from index 2 (profile default, missing 0). */
typedef struct {
    int32_t len[4][200];
    int64_t val[4][1000];
    uint32_t n[4];
} expect_t;

static int64_t first_seen(uint64_t *seen, uint32_t *n_seen, uint64_t key)
{
    for (uint32_t i = 0; i < *n_seen; i++)
        if (seen[i] == key)
            return 2 + i;
    seen[(*n_seen)++] = key;
    return 2 + *n_seen - 1;
}

static void expected(expect_t *x, uint32_t rows)
{
    memset(x, 0, sizeof(*x));
    uint64_t seen[3][64];
    uint32_t ns[3] = {0};
    for (uint32_t r = 0; r < rows; r++) {
        x->len[0][r] = 1;
        x->val[0][x->n[0]++] = r % 6 == 5 ? 0 : first_seen(seen[0], &ns[0], 1000 + r % 5);
        x->len[1][r] = (int32_t)(r % 5);
        for (uint32_t k = 0; k < r % 5; k++)
            x->val[1][x->n[1]++] = first_seen(seen[1], &ns[1], 70 + (r + k) % 7);
        x->len[2][r] = 1;
        x->val[2][x->n[2]++] = r % 20 >= 10 ? 2 : 1;
        x->len[3][r] = 1;
        x->val[3][x->n[3]++] = first_seen(seen[2], &ns[2], (r * 3) % 4) % 3;
    }
}

/* Run `rows` rows in blocks of `block_rows` with `threads` workers and check
 * every block's finished side against the expectation. */
static void run_and_check(uint32_t rows, uint32_t block_rows, int threads)
{
    pr_pipeline_spec base, spec;
    pr_pipeline_spec_default(&base);
    base.profile = PR_VOCAB_DEFAULT;
    base.n_sparse = 0;
    char err[512] = "";
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), 0);
    pr_engine_opts eo = {.backend = "cpu", .threads = threads};
    pr_engine *eng = pr_engine_new(&spec, &eo, err, sizeof(err));
    assert_non_null(eng);
    pr_block *b = pr_feature_block_new(&g_schema, block_rows, true);
    pr_out *o = pr_feature_out_new(&g_schema, block_rows, pr_engine_sparse_width(eng));
    assert_non_null(b);
    assert_non_null(o);
    assert_true(b->scap >= b->cap);
    expect_t *x = malloc(sizeof(*x));
    expected(x, rows);
    uint32_t at[4] = {0}, row0 = 0;
    for (uint32_t r = 0; r < rows;) {
        pr_block_reset(b);
        while (r < rows && b->rows < block_rows) {
            uint32_t need[3] = {1, 4, 1};
            assert_true(pr_block_fits(b, need));
            fill_row(b, r++);
        }
        assert_int_equal(pr_engine_process(eng, b, o, err, sizeof(err)), 0);
        assert_int_equal(pr_feature_finish(&g_schema, b, o, err, sizeof(err)), 0);
        const pr_fside *s = o->side;
        for (uint32_t i = 0; i < b->rows; i++) {
            assert_float_equal(s->labels[i], (float)((row0 + i) % 2), 0);
            assert_float_equal(s->dense[i], (float)(row0 + i) * 0.5f, 0);
        }
        for (uint16_t f = 0; f < 4; f++) {
            for (uint32_t i = 0; i < b->rows; i++)
                assert_int_equal(pr_fside_lengths(o->side, f)[i], x->len[f][row0 + i]);
            for (uint32_t j = 0; j < s->n_values[f]; j++)
                assert_int_equal(s->values[f][j], x->val[f][at[f] + j]);
            at[f] += s->n_values[f];
        }
        row0 += b->rows;
    }
    for (uint16_t f = 0; f < 4; f++)
        assert_int_equal(at[f], x->n[f]);
    assert_int_equal(pr_engine_vocab_size(eng, 0), 2 + 5);
    assert_int_equal(pr_engine_vocab_size(eng, 1), 2 + 7);
    free(x);
    pr_block_free(b);
    pr_out_free(o);
    pr_engine_free(eng);
}

static void test_jagged_blocks(void **state)
{
    (void)state;
    run_and_check(150, 64, 1);
    run_and_check(150, 64, 4);
    run_and_check(150, 128, 2);
}

/* Eviction lru on the list with room for 3 values: notices name the feature
 * (side index 1) and the block row holding the first use. */
static void test_notices_per_feature(void **state)
{
    (void)state;
    pr_pipeline_spec base, spec;
    pr_pipeline_spec_default(&base);
    base.profile = PR_VOCAB_DEFAULT;
    base.n_sparse = 1;
    snprintf(base.sparse[0].name, PR_NAME_MAX, "hist");
    base.sparse[0].eviction = PR_EVICT_LRU;
    base.sparse[0].capacity = 2 + 3;
    char err[512] = "";
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), 0);
    pr_engine_opts eo = {.backend = "cpu", .threads = 2};
    pr_engine *eng = pr_engine_new(&spec, &eo, err, sizeof(err));
    assert_non_null(eng);
    pr_block *b = pr_feature_block_new(&g_schema, 64, true);
    pr_out *o = pr_feature_out_new(&g_schema, 64, pr_engine_sparse_width(eng));
    for (uint32_t r = 0; r < 10; r++)
        fill_row(b, r);
    assert_int_equal(pr_engine_process(eng, b, o, err, sizeof(err)), 0);
    assert_true(o->n_recycled > 0);
    assert_int_equal(pr_feature_finish(&g_schema, b, o, err, sizeof(err)), 0);
    const pr_fside *s = o->side;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        const pr_recycled *n = &o->recycled[i];
        assert_int_equal(n->col, 1);
        assert_true(n->row < 10);
        if (i)
            assert_true(o->recycled[i - 1].row <= n->row);
        /* the row holds the recycled index in its hist values */
        uint32_t off = 0;
        for (uint32_t r = 0; r < n->row; r++)
            off += (uint32_t)pr_fside_lengths(o->side, 1)[r];
        bool found = false;
        for (int32_t k = 0; k < pr_fside_lengths(o->side, 1)[n->row]; k++)
            found |= s->values[1][off + k] == n->index;
        assert_true(found);
    }
    pr_block_free(b);
    pr_out_free(o);
    pr_engine_free(eng);
}

/* Shared vocabulary (vocab_log) over jagged blocks: every miss of every
 * element reported, applied in report order, then lookup-only processing
 * gives what a local engine gives. */
typedef struct {
    pr_engine *eng;
    int err;
} apply_ctx;

static int apply_miss(uint32_t col, uint64_t key, void *opaque)
{
    apply_ctx *a = opaque;
    int64_t idx;
    char err[256];
    if (pr_engine_vocab_apply(a->eng, col, key, 1, &idx, err, sizeof(err)))
        a->err++;
    return 0;
}

static void test_shared_jagged(void **state)
{
    (void)state;
    pr_pipeline_spec base, spec;
    pr_pipeline_spec_default(&base);
    base.profile = PR_VOCAB_DEFAULT;
    base.n_sparse = 0;
    char err[512] = "";
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), 0);
    pr_engine_opts eo = {.backend = "cpu", .threads = 2};
    pr_engine *loc = pr_engine_new(&spec, &eo, err, sizeof(err));
    pr_engine *sh = pr_engine_new(&spec, &eo, err, sizeof(err));
    assert_non_null(loc);
    assert_non_null(sh);
    assert_int_equal(pr_engine_vocab_set_shared(sh, true, err, sizeof(err)), 0);
    pr_block *b = pr_feature_block_new(&g_schema, 64, true);
    pr_out *o1 = pr_feature_out_new(&g_schema, 64, pr_engine_sparse_width(loc));
    pr_out *o2 = pr_feature_out_new(&g_schema, 64, pr_engine_sparse_width(sh));
    for (uint32_t r = 0; r < 200;) {
        pr_block_reset(b);
        for (uint32_t k = 0; k < 50 && r < 200; k++)
            fill_row(b, r++);
        assert_int_equal(pr_engine_process(loc, b, o1, err, sizeof(err)), 0);
        apply_ctx a = {sh, 0};
        assert_int_equal(pr_engine_vocab_misses(sh, b, apply_miss, &a, err, sizeof(err)), 0);
        assert_int_equal(a.err, 0);
        assert_int_equal(pr_engine_process(sh, b, o2, err, sizeof(err)), 0);
        for (uint32_t c = 0; c < b->n_sparse; c++)
            for (uint32_t e = 0; e < b->col_rows[c]; e++)
                assert_int_equal(pr_out_index(o1, c, e), pr_out_index(o2, c, e));
    }
    pr_block_free(b);
    pr_out_free(o1);
    pr_out_free(o2);
    pr_engine_free(loc);
    pr_engine_free(sh);
}

/* pr_fside_copy_rows: rows regrouped into another side table, in order and
 * with a walking offset, equal the source rows. */
static void test_fside_copy_rows(void **state)
{
    (void)state;
    pr_fside *src = pr_fside_new(1, 1, 2, 64), *dst = pr_fside_new(1, 1, 2, 64);
    assert_non_null(src);
    assert_non_null(dst);
    for (uint32_t r = 0; r < 10; r++) {
        src->labels[r] = (float)r;
        src->dense[r] = (float)r * 2;
        for (uint16_t f = 0; f < 2; f++) {
            uint32_t n = (r + f) % 3;
            pr_fside_lengths(src, f)[r] = (int32_t)n;
            assert_int_equal(pr_fside_reserve(src, f, n), 0);
            for (uint32_t k = 0; k < n; k++)
                src->values[f][src->n_values[f]++] = r * 100 + f * 10 + k;
        }
    }
    /* rows 3..9 in pieces of 1, 2, 4 with a walking offset */
    uint32_t off[2] = {0, 0};
    for (uint16_t f = 0; f < 2; f++)
        for (uint32_t r = 0; r < 3; r++)
            off[f] += (uint32_t)pr_fside_lengths(src, f)[r];
    assert_int_equal(pr_fside_copy_rows(dst, 0, src, 3, 1, off), 0);
    assert_int_equal(pr_fside_copy_rows(dst, 1, src, 4, 2, off), 0);
    assert_int_equal(pr_fside_copy_rows(dst, 3, src, 6, 4, NULL), 0);
    for (uint32_t r = 0; r < 7; r++) {
        assert_true(dst->labels[r] == (float)(r + 3));
        assert_true(dst->dense[r] == (float)(r + 3) * 2);
    }
    for (uint16_t f = 0; f < 2; f++) {
        uint32_t at = 0;
        for (uint32_t r = 0; r < 7; r++) {
            uint32_t n = (r + 3 + f) % 3;
            assert_int_equal(pr_fside_lengths(dst, f)[r], n);
            for (uint32_t k = 0; k < n; k++)
                assert_int_equal(dst->values[f][at++], (r + 3) * 100 + f * 10 + k);
        }
        assert_int_equal(dst->n_values[f], at);
    }
    pr_fside *other = pr_fside_new(2, 1, 2, 64);
    assert_int_equal(pr_fside_copy_rows(other, 0, src, 0, 1, NULL), PR_EINVAL);
    pr_fside_free(other);
    pr_fside_free(src);
    pr_fside_free(dst);
}

static void test_fpga_refuses_jagged(void **state)
{
    (void)state;
    pr_pipeline_spec base, spec;
    pr_pipeline_spec_default(&base);
    base.n_sparse = 0;
    char err[512] = "";
    assert_int_equal(pr_feature_engine_spec(&g_schema, &base, &spec, err, sizeof(err)), 0);
    /* The kernel's vocabularies need a modulus: give it one, so that the
     * block (not the spec) is what it refuses. */
    spec.n_sparse_ops = 2;
    spec.sparse_ops[0] = PR_OP_MODULUS;
    spec.sparse_ops[1] = PR_OP_VOCAB;
    for (uint32_t c = 0; c < spec.n_sparse; c++)
        spec.sparse[c].modulus = 1024;
    pr_engine_opts eo = {.backend = "hls-sim", .threads = 1};
    pr_engine *eng = pr_engine_new(&spec, &eo, err, sizeof(err));
    if (!eng)
        print_error("hls-sim: %s\n", err);
    assert_non_null(eng);
    pr_block *b = pr_feature_block_new(&g_schema, 64, true);
    pr_out *o = pr_feature_out_new(&g_schema, 64, pr_engine_sparse_width(eng));
    fill_row(b, 0);
    assert_int_equal(pr_engine_process(eng, b, o, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "jagged"));
    pr_block_free(b);
    pr_out_free(o);
    pr_engine_free(eng);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes_and_spec),     cmocka_unit_test(test_jagged_blocks),
        cmocka_unit_test(test_notices_per_feature), cmocka_unit_test(test_shared_jagged),
        cmocka_unit_test(test_fside_copy_rows),     cmocka_unit_test(test_fpga_refuses_jagged),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
