/*
 * test_engine.c — unit tests of the preprocessing engine (cpu backend): every
 * operator with its edge cases, both vocabulary profiles, min_count streaming
 * and two-pass, TorchRec's published sparse_to_contiguous example, thread
 * count invariance, block boundaries and spec validation messages. The
 * vocabulary's files (export, snapshot, journal) are tests/vocab/'s.
 */
#include "engine_test_util.h"

#include <math.h>
#include <sys/stat.h>

#include "pr_backend.h"

/* ------------------------------------------------------------ names and spec */

static void test_names(void **state)
{
    (void)state;
    for (int op = 0; op < PR_OP__COUNT; op++)
        assert_int_equal(pr_op_from_name(pr_op_name((pr_op)op)), op);
    assert_int_equal(pr_op_from_name("vocab"), PR_OP_VOCAB);
    assert_int_equal(pr_op_from_name("nope"), -1);
    assert_int_equal(pr_vocab_profile_from_name("dlrm"), PR_VOCAB_DLRM);
    assert_int_equal(pr_vocab_profile_from_name("default"), PR_VOCAB_DEFAULT);
    assert_int_equal(pr_vocab_profile_from_name("torchrec"), -1);
    assert_string_equal(pr_vocab_profile_name(PR_VOCAB_DEFAULT), "default");
    const char *const *b = pr_engine_backends();
    assert_string_equal(b[0], "cpu");
}

static void expect_invalid(const pr_pipeline_spec *s, const char *needle)
{
    char err[512] = "";
    assert_int_equal(pr_pipeline_spec_validate(s, err, sizeof(err)), PR_EINVAL);
    if (!strstr(err, needle)) {
        print_error("message '%s' lacks '%s'\n", err, needle);
        fail();
    }
}

static void test_spec_validate(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512];
    pr_pipeline_spec_default(&s);
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), 0);
    assert_int_equal(s.n_dense, 13);
    assert_int_equal(s.n_sparse, 26);
    assert_string_equal(s.sparse[25].name, "C26");
    assert_int_equal(s.sparse[0].modulus, 524288);
    assert_true(pr_spec_has_op(&s, PR_OP_VOCAB));

    s.sparse_ops[1] = PR_OP_VOCAB;
    s.sparse_ops[2] = PR_OP_MODULUS;
    expect_invalid(&s, "sparse_ops: vocab before modulus");

    pr_pipeline_spec_default(&s);
    s.sparse_ops[2] = PR_OP_HEX2INT;
    expect_invalid(&s, "hex2int' appears twice");

    pr_pipeline_spec_default(&s);
    s.dense_ops[0] = PR_OP_HEX2INT;
    expect_invalid(&s, "dense_ops: operator 'hex2int' does not apply here");

    pr_pipeline_spec_default(&s);
    s.dense_ops[0] = PR_OP_LOG1P;
    s.dense_ops[1] = PR_OP_NEG2ZERO;
    expect_invalid(&s, "dense_ops: log1p before neg2zero");

    pr_pipeline_spec_default(&s);
    s.sparse[2].modulus = 0;
    expect_invalid(&s, "sparse.C3.modulus: must be > 0");

    pr_pipeline_spec_default(&s);
    s.sparse[4].min_count = 3;
    expect_invalid(&s, "sparse.C5.min_count: 3 needs profile default");
    s.profile = PR_VOCAB_DEFAULT;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), 0);
    s.sparse[4].min_count = 0;
    expect_invalid(&s, "sparse.C5.min_count: must be >= 1");

    pr_pipeline_spec_default(&s);
    strcpy(s.sparse[3].name, "C1");
    expect_invalid(&s, "sparse.C1.name: used twice");
    strcpy(s.sparse[3].name, "a/b");
    expect_invalid(&s, "must not contain '/'");

    pr_pipeline_spec_default(&s);
    s.profile = PR_VOCAB_DEFAULT;
    s.sparse[0].capacity = 2;
    expect_invalid(&s, "sparse.C1.capacity: 2 leaves no room");

    pr_pipeline_spec_default(&s);
    s.n_sparse = PR_MAX_SPARSE + 1;
    expect_invalid(&s, "n_sparse");

    /* pr_engine_new reports the same message */
    pr_pipeline_spec_default(&s);
    s.sparse[0].modulus = 0;
    pr_engine_opts o = {0};
    err[0] = 0;
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "sparse.C1.modulus"));

    pr_pipeline_spec_default(&s);
    o.backend = "warp-drive";
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "unknown backend 'warp-drive'"));
    assert_non_null(strstr(err, "cpu"));
}

static void test_capacity_and_width(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_pipeline_spec_default(&s);
    assert_int_equal(pr__spec_col_capacity(&s, 0), 524288);
    s.profile = PR_VOCAB_DEFAULT;
    assert_int_equal(pr__spec_col_capacity(&s, 0), 524290);
    pr_engine *e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 4);
    assert_string_equal(pr_engine_backend_name(e), "cpu");
    assert_int_equal(pr_engine_vocab_size(e, 0), 2); /* reserved 0 and 1 */
    pr_engine_free(e);

    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 0, false, true); /* no modulus: INT32_MAX */
    assert_int_equal(pr__spec_col_capacity(&s, 1), INT32_MAX);
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 4);
    pr_engine_free(e);

    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 1ULL << 33, true, true);
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 8);
    pr_engine_free(e);

    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 1ULL << 31, true, false); /* values < 2^31 */
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 4);
    assert_int_equal(pr_engine_vocab_size(e, 0), 0);
    pr_engine_free(e);

    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 0, false, false); /* raw u64 */
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 8);
    pr_engine_free(e);

    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 1000, true, true);
    s.sparse[1].capacity = 1ULL << 32;
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_sparse_width(e), 8);
    pr_engine_free(e);
}

/* ------------------------------------------------------------ operators */

static void test_hex2int(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 1, 2, PR_VOCAB_DLRM, 0, false, false); /* hex2int only: raw u64 out */
    s.n_dense_ops = 0;
    pr_engine *e = tu_engine(&s, NULL, 2);
    pr_block *b = pr_block_new(1, 2, 64, false);
    struct {
        const char *hex;
        uint64_t want;
        bool bad;
    } cases[] = {
        {"ffffffffffffffff", UINT64_MAX, false},
        {"FFFFFFFFFFFFFFFF", UINT64_MAX, false},
        {"0123456789abcdef", 0x0123456789abcdefULL, false},
        {"0123456789ABCDEF", 0x0123456789abcdefULL, false},
        {"aBcD", 0xabcd, false},
        {"0", 0, false},
        {"00000000", 0, false},
        {"a1", 0xa1, false},
        {"05db9164", 0x05db9164, false},
        {"", 0, false}, /* missing */
        {"12g4", 0, true},
        {"G", 0, true},
        {"@", 0, true},
        {"`", 0, true},
        {"/", 0, true},
        {":", 0, true},
        {"12 4", 0, true},
        {"\xff\xfe", 0, true},
        {"-1", 0, true},
        {"10000000000000000", 0, true}, /* 17 digits: put_hex refuses */
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++) {
        pr_block_put_hex(b, 0, (uint32_t)i, "7", 1);
        pr_block_put_hex(b, 1, (uint32_t)i, cases[i].hex, strlen(cases[i].hex));
        b->labels[i] = 1;
        b->dense[i] = 3.0;
    }
    /* a bad value in column 0 only, column 1 fine */
    pr_block_put_hex(b, 0, (uint32_t)n, "zz", 2);
    pr_block_put_hex(b, 1, (uint32_t)n, "1", 1);
    b->rows = (uint32_t)n + 1;
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    uint32_t nbad = 0;
    for (size_t i = 0; i < n; i++) {
        bool rej = pr_bit_test(o->rejected, i);
        assert_int_equal(rej, cases[i].bad);
        if (rej) {
            nbad++;
            assert_int_equal(o->reject_reason[i], PR_REJECT_BAD_HEX);
            assert_int_equal(o->reject_col[i], 1);
            assert_int_equal(pr_out_index(o, 0, (uint32_t)i), 0);
            assert_int_equal(pr_out_index(o, 1, (uint32_t)i), 0);
            assert_int_equal(o->labels[i], 0);
            assert_true(o->dense[i] == 0.0f);
        } else {
            assert_int_equal((uint64_t)pr_out_index(o, 1, (uint32_t)i), cases[i].want);
            assert_int_equal(pr_out_index(o, 0, (uint32_t)i), 7);
            assert_int_equal(o->labels[i], 1);
            assert_true(o->dense[i] == 3.0f);
        }
    }
    assert_true(pr_bit_test(o->rejected, n));
    assert_int_equal(o->reject_col[n], 0);
    assert_int_equal(o->n_rejected, nbad + 1);
    pr_engine_stats st;
    pr_engine_get_stats(e, &st);
    assert_int_equal(st.rows_in, n + 1);
    assert_int_equal(st.rows_rejected, nbad + 1);
    assert_int_equal(st.op_values[PR_OP_HEX2INT], 2 * (n + 1));
    assert_int_equal(st.blocks, 1);

    /* a hex column without hex2int in the pipeline is a usage error */
    pr_pipeline_spec s2;
    tu_spec(&s2, 1, 2, PR_VOCAB_DLRM, 100, true, true);
    s2.n_sparse_ops = 2;
    s2.sparse_ops[0] = PR_OP_MODULUS;
    s2.sparse_ops[1] = PR_OP_VOCAB;
    pr_engine *e2 = tu_engine(&s2, NULL, 1);
    char err[512] = "";
    assert_int_equal(pr_engine_process(e2, b, o, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "no hex2int"));
    pr_engine_free(e2);

    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_modulus(void **state)
{
    (void)state;
    const uint64_t mods[] = {1,
                             2,
                             3,
                             7,
                             10,
                             1000,
                             8192,
                             524288,
                             1000003,
                             (1ULL << 24) + 1,
                             4294967291ULL,
                             4294967296ULL,
                             (1ULL << 40) + 12345,
                             (1ULL << 63) - 25,
                             (1ULL << 63),
                             (1ULL << 63) + 1,
                             UINT64_MAX - 1,
                             UINT64_MAX};
    uint64_t seed = 42;
    for (size_t m = 0; m < sizeof(mods) / sizeof(mods[0]); m++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 3, PR_VOCAB_DLRM, mods[m], true, false);
        pr_engine *e = tu_engine(&s, NULL, 1);
        pr_block *b = pr_block_new(0, 3, 1024, false);
        b->rows = 1024;
        for (uint32_t r = 0; r < b->rows; r++) {
            uint64_t v = tu_rand(&seed);
            if (r < 8)
                v = (uint64_t[]){0,       1,           UINT64_MAX,  UINT64_MAX - 1,
                                 mods[m], mods[m] - 1, mods[m] + 1, 1ULL << 63}[r];
            tu_set_u64(b, 0, r, v);
            tu_set_u64(b, 1, r, v >> (r % 64));
            tu_put_hex_u64(b, 2, r, v);
        }
        pr_out *o = tu_out(e, b);
        tu_process(e, b, o);
        for (uint32_t r = 0; r < b->rows; r++) {
            uint64_t v = b->sparse_u64[r];
            assert_int_equal((uint64_t)pr_out_index(o, 0, r), v % mods[m]);
            if (pr_engine_sparse_width(e) == 4)
                assert_true(pr_out_index(o, 0, r) >= 0);
            assert_int_equal((uint64_t)pr_out_index(o, 1, r), (v >> (r % 64)) % mods[m]);
            assert_int_equal((uint64_t)pr_out_index(o, 2, r), v % mods[m]);
        }
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e);
    }
}

static void test_dense_ops(void **state)
{
    (void)state;
    const double in[] = {-5.0,   -0.5,   -1e300, 0.0,         1.0,  2.5, 3.0,
                         4095.0, 4096.0, 1e6,    123456789.0, 0.25, 1e-9};
    size_t n = sizeof(in) / sizeof(in[0]);
    for (int variant = 0; variant < 4; variant++) {
        pr_pipeline_spec s;
        tu_spec(&s, 2, 1, PR_VOCAB_DLRM, 100, true, true);
        s.n_dense_ops = 0;
        if (variant & 1)
            s.dense_ops[s.n_dense_ops++] = PR_OP_NEG2ZERO;
        if (variant & 2)
            s.dense_ops[s.n_dense_ops++] = PR_OP_LOG1P;
        pr_engine *e = tu_engine(&s, NULL, 2);
        pr_block *b = pr_block_new(2, 1, 64, false);
        for (size_t r = 0; r < n; r++) {
            b->dense[r] = in[r];
            b->dense[b->cap + r] = in[r];
            tu_put_hex_u64(b, 0, (uint32_t)r, 1);
        }
        /* column 1: row 3 onwards every other row missing (value ignored) */
        for (size_t r = 3; r < n; r += 2) {
            b->dense[b->cap + r] = -77.0;
            pr_bit_set(b->dense_missing + pr_bitmap_words(b->cap), r);
        }
        b->rows = (uint32_t)n;
        pr_out *o = tu_out(e, b);
        tu_process(e, b, o);
        for (size_t r = 0; r < n; r++) {
            double x = in[r];
            if (variant & 1)
                x = x < 0 ? 0 : x;
            float want = (variant & 2) ? (float)log1p(x) : (float)x;
            float got = o->dense[r];
            if (isnan(want))
                assert_true(isnan(got));
            else
                assert_memory_equal(&got, &want, sizeof(float));
            float got1 = o->dense[o->cap + r];
            if (r >= 3 && (r - 3) % 2 == 0)
                assert_true(got1 == 0.0f);
            else if (!isnan(want))
                assert_memory_equal(&got1, &want, sizeof(float));
        }
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e);
    }
}

/* ------------------------------------------------------------ profiles */

static void test_profile_dlrm(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 10, true, true);
    pr_engine *e = tu_engine(&s, NULL, 1);
    /* 0x1b mod 10 = 7, 0x11 mod 10 = 7; missing = key 0 = "00000000" = 0xa mod 10 */
    const char *vals[] = {"1b", "", "00000000", "11", "a", "3", "1B"};
    int64_t want[] = {0, 1, 1, 0, 1, 2, 0};
    int64_t got[7];
    tu_run_column(e, vals, 7, got);
    for (int i = 0; i < 7; i++)
        assert_int_equal(got[i], want[i]);
    assert_int_equal(pr_engine_vocab_size(e, 0), 3);
    tu_vocab v = tu_vocab_get(e, 0);
    assert_int_equal(v.n, 3);
    assert_int_equal(v.e[0].value, 7);
    assert_int_equal(v.e[1].value, 0);
    assert_int_equal(v.e[2].value, 3);
    assert_int_equal(v.e[2].index, 2);
    free(v.e);
    pr_engine_free(e);
}

static void test_profile_default(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 10, true, true);
    pr_engine *e = tu_engine(&s, NULL, 1);
    /* missing = 0 and never in the vocabulary; "0" is a real value */
    const char *vals[] = {"1b", "", "0", "11", "", "3", "0"};
    int64_t want[] = {2, 0, 3, 2, 0, 4, 3};
    int64_t got[7];
    tu_run_column(e, vals, 7, got);
    for (int i = 0; i < 7; i++)
        assert_int_equal(got[i], want[i]);
    assert_int_equal(pr_engine_vocab_size(e, 0), 5);
    tu_vocab v = tu_vocab_get(e, 0);
    assert_int_equal(v.n, 3);
    assert_int_equal(v.e[0].index, 2);
    assert_int_equal(v.e[0].value, 7);
    assert_int_equal(v.e[1].value, 0);
    free(v.e);
    pr_engine_free(e);

    /* without vocab: the modded value itself; missing -> 0 in both profiles */
    for (int p = 0; p < 2; p++) {
        tu_spec(&s, 0, 1, (pr_vocab_profile)p, 10, true, false);
        e = tu_engine(&s, NULL, 1);
        const char *v2[] = {"1b", "", "ff"};
        int64_t g2[3];
        tu_run_column(e, v2, 3, g2);
        assert_int_equal(g2[0], 7);
        assert_int_equal(g2[1], 0);
        assert_int_equal(g2[2], 5);
        pr_engine_free(e);
    }
}

static void test_capacity_overflow(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    /* dlrm: capacity 2, third distinct value -> PR_EFULL naming the column */
    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 1000, true, true);
    strcpy(s.sparse[1].name, "userid");
    s.sparse[1].capacity = 2;
    pr_engine *e = tu_engine(&s, NULL, 2);
    pr_block *b = pr_block_new(0, 2, 64, false);
    const uint64_t v[] = {5, 6, 5, 7, 8};
    for (uint32_t r = 0; r < 5; r++) {
        tu_put_hex_u64(b, 0, r, v[r]);
        tu_put_hex_u64(b, 1, r, v[r]);
    }
    b->rows = 5;
    pr_out *o = tu_out(e, b);
    char err[512] = "";
    assert_int_equal(pr_engine_process(e, b, o, err, sizeof(err)), PR_EFULL);
    assert_non_null(strstr(err, "userid"));
    assert_non_null(strstr(err, "capacity"));
    assert_non_null(strstr(err, "profile default"));
    assert_int_equal(pr_out_index(o, 1, 0), 0);
    assert_int_equal(pr_out_index(o, 1, 1), 1);
    assert_int_equal(pr_out_index(o, 1, 2), 0);
    assert_int_equal(pr_engine_vocab_size(e, 1), 2);
    assert_int_equal(pr_out_index(o, 0, 3), 2); /* other column unaffected */
    pr_engine_free(e);

    /* default: capacity 4 = 2 reserved + 2 indices, then OOV */
    tu_spec(&s, 0, 2, PR_VOCAB_DEFAULT, 1000, true, true);
    s.sparse[1].capacity = 4;
    e = tu_engine(&s, NULL, 1);
    tu_process(e, b, o);
    const int64_t want[] = {2, 3, 2, 1, 1};
    for (uint32_t r = 0; r < 5; r++)
        assert_int_equal(pr_out_index(o, 1, r), want[r]);
    assert_int_equal(pr_engine_vocab_size(e, 1), 4);
    pr_engine_free(e);

    /* default with hash table (no modulus) full -> OOV too */
    tu_spec(&s, 0, 2, PR_VOCAB_DEFAULT, 0, false, true);
    s.sparse[1].capacity = 3;
    e = tu_engine(&s, NULL, 1);
    tu_process(e, b, o);
    const int64_t want2[] = {2, 1, 2, 1, 1};
    for (uint32_t r = 0; r < 5; r++)
        assert_int_equal(pr_out_index(o, 1, r), want2[r]);
    pr_engine_free(e);
    pr_out_free(o);
    pr_block_free(b);
}

static void test_min_count_streaming(void **state)
{
    (void)state;
    for (int hash = 0; hash < 2; hash++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, hash ? 0 : 100, !hash, true);
        s.sparse[0].min_count = 2;
        pr_engine *e = tu_engine(&s, NULL, 1);
        const char *vals[] = {"a", "a", "b", "a", "", "b", "c", "c", "c"};
        int64_t want[] = {1, 2, 1, 2, 0, 3, 1, 4, 4};
        int64_t got[9];
        tu_run_column(e, vals, 9, got);
        for (int i = 0; i < 9; i++)
            assert_int_equal(got[i], want[i]);
        tu_vocab v = tu_vocab_get(e, 0);
        assert_int_equal(v.n, 3);
        assert_int_equal(v.e[0].value, 0xa);
        assert_int_equal(v.e[0].count, 3);
        assert_int_equal(v.e[2].value, 0xc);
        assert_int_equal(v.e[2].count, 3);
        free(v.e);
        /* a value seen once stays pending and is listed after the assigned */
        const char *more[] = {"d"};
        tu_run_column(e, more, 1, got);
        assert_int_equal(got[0], 1);
        v = tu_vocab_get(e, 0);
        assert_int_equal(v.n, 4);
        assert_int_equal(v.e[3].value, 0xd);
        assert_true(v.e[3].index < 0);
        assert_int_equal(v.e[3].count, 1);
        free(v.e);
        pr_engine_free(e);
    }
}

/* ------------------------------------------------------------ TorchRec golden */

static const uint64_t torchrec_in[3][3][3] = {
    {{10, 70, 10}, {20, 80, 20}, {30, 90, 30}},
    {{20, 70, 40}, {30, 80, 50}, {40, 90, 60}},
    {{20, 70, 70}, {20, 80, 80}, {30, 90, 90}},
};
static const int64_t torchrec_plain[3][3][3] = {
    {{2, 2, 2}, {3, 3, 3}, {4, 4, 4}},
    {{3, 2, 5}, {4, 3, 6}, {5, 4, 7}},
    {{3, 2, 8}, {3, 3, 9}, {4, 4, 10}},
};
static const int64_t torchrec_min2[3][3][3] = {
    {{1, 2, 1}, {2, 3, 1}, {3, 4, 1}},
    {{2, 2, 1}, {3, 3, 1}, {1, 4, 1}},
    {{2, 2, 1}, {2, 3, 1}, {3, 4, 1}},
};

static pr_block *torchrec_day(int day, bool hex)
{
    pr_block *b = pr_block_new(0, 3, 64, false);
    for (uint32_t r = 0; r < 3; r++)
        for (uint32_t c = 0; c < 3; c++) {
            if (hex)
                tu_put_hex_u64(b, c, r, torchrec_in[day][r][c]);
            else
                tu_set_u64(b, c, r, torchrec_in[day][r][c]);
        }
    b->rows = 3;
    return b;
}

static void test_torchrec_golden(void **state)
{
    (void)state;
    /* variant bits: hex or u64 input; two-pass min_count 2; then the modulus:
     * none (hash table), 1000 (direct array) or 2^40 (hash table) */
    for (int variant = 0; variant < 12; variant++) {
        bool hex = variant & 1, min2 = variant & 2;
        int modk = variant >> 2;
        pr_pipeline_spec s;
        tu_spec(&s, 0, 3, PR_VOCAB_DEFAULT, modk == 1 ? 1000 : 1ULL << 40, modk != 0, true);
        if (min2) {
            s.count_mode = PR_COUNT_TWO_PASS;
            for (int c = 0; c < 3; c++)
                s.sparse[c].min_count = 2;
        }
        pr_engine *e = tu_engine(&s, NULL, 2);
        pr_block *days[3];
        for (int d = 0; d < 3; d++)
            days[d] = torchrec_day(d, hex);
        if (min2) {
            char err[256];
            pr_out *o = tu_out(e, days[0]);
            assert_int_equal(pr_engine_process(e, days[0], o, err, sizeof(err)), PR_ESTATE);
            pr_out_free(o);
            for (int d = 0; d < 3; d++)
                assert_int_equal(pr_engine_count(e, days[d]), 0);
            assert_int_equal(pr_engine_count_done(e), 0);
        }
        const int64_t(*want)[3][3] = min2 ? torchrec_min2 : torchrec_plain;
        for (int d = 0; d < 3; d++) {
            pr_out *o = tu_out(e, days[d]);
            tu_process(e, days[d], o);
            for (uint32_t r = 0; r < 3; r++)
                for (uint32_t c = 0; c < 3; c++)
                    if (pr_out_index(o, c, r) != want[d][r][c]) {
                        print_error("variant %d day %d [%u][%u]: %" PRId64 " want %" PRId64 "\n",
                                    variant, d, r, c, pr_out_index(o, c, r), want[d][r][c]);
                        fail();
                    }
            pr_out_free(o);
        }
        for (int d = 0; d < 3; d++)
            pr_block_free(days[d]);
        pr_engine_free(e);
    }
}

static void test_two_pass_rejected_not_counted(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 2, PR_VOCAB_DEFAULT, 1000, true, true);
    s.count_mode = PR_COUNT_TWO_PASS;
    s.sparse[1].min_count = 2;
    pr_engine *e = tu_engine(&s, NULL, 1);
    pr_block *b = pr_block_new(0, 2, 64, false);
    /* value 5 in column 1 appears twice, but once in a row rejected for col 0 */
    pr_block_put_hex(b, 0, 0, "1", 1);
    pr_block_put_hex(b, 1, 0, "5", 1);
    pr_block_put_hex(b, 0, 1, "q", 1);
    pr_block_put_hex(b, 1, 1, "5", 1);
    b->rows = 2;
    assert_int_equal(pr_engine_count(e, b), 0);
    assert_int_equal(pr_engine_count_done(e), 0);
    assert_int_equal(pr_engine_count(e, b), PR_ESTATE);
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    assert_int_equal(pr_out_index(o, 1, 0), PR_INDEX_OOV);
    assert_int_equal(pr_out_index(o, 1, 1), 0);
    assert_true(pr_bit_test(o->rejected, 1));
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);

    /* count in streaming mode is a state error */
    s.count_mode = PR_COUNT_STREAMING;
    e = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_engine_count_done(e), PR_ESTATE);
    pr_engine_free(e);
}

static void test_rejected_rows_leave_vocab_alone(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 3, (pr_vocab_profile)p, 1000, true, true);
        pr_engine *e = tu_engine(&s, NULL, 3);
        pr_block *b = pr_block_new(0, 3, 64, false);
        /* row 0: bad in col 2, new values in cols 0, 1; row 1: the same values, valid */
        pr_block_put_hex(b, 0, 0, "11", 2);
        pr_block_put_hex(b, 1, 0, "22", 2);
        pr_block_put_hex(b, 2, 0, "x3", 2);
        pr_block_put_hex(b, 0, 1, "99", 2);
        pr_block_put_hex(b, 1, 1, "22", 2);
        pr_block_put_hex(b, 2, 1, "33", 2);
        pr_block_put_hex(b, 0, 2, "11", 2);
        pr_block_put_hex(b, 1, 2, "23", 2);
        pr_block_put_hex(b, 2, 2, "33", 2);
        b->rows = 3;
        pr_out *o = tu_out(e, b);
        tu_process(e, b, o);
        int64_t base = p == PR_VOCAB_DEFAULT ? 2 : 0;
        assert_int_equal(o->n_rejected, 1);
        assert_int_equal(o->reject_col[0], 2);
        for (uint32_t c = 0; c < 3; c++)
            assert_int_equal(pr_out_index(o, c, 0), 0);
        assert_int_equal(pr_out_index(o, 0, 1), base);     /* 0x99: first */
        assert_int_equal(pr_out_index(o, 0, 2), base + 1); /* 0x11: second, not first */
        assert_int_equal(pr_out_index(o, 1, 1), base);
        assert_int_equal(pr_out_index(o, 1, 2), base + 1);
        assert_int_equal(pr_engine_vocab_size(e, 0), (uint64_t)base + 2);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e);
    }
}

/* ------------------------------------------------------------ invariance */

static void test_thread_invariance(void **state)
{
    (void)state;
    const uint32_t rows = 300000, bs = 16384;
    for (int variant = 0; variant < 3; variant++) {
        pr_pipeline_spec s;
        /* 0: dlrm, modulus 2^20 (direct); 1: default + min_count on some columns,
         * modulus 2^30 (hash); 2: default, no modulus (hash, u64 keys) */
        tu_spec(&s, 4, 8, variant == 0 ? PR_VOCAB_DLRM : PR_VOCAB_DEFAULT,
                variant == 0 ? 1 << 20 : 1 << 30, variant < 2, true);
        if (variant == 1)
            for (int c = 0; c < 8; c += 2)
                s.sparse[c].min_count = (uint32_t)(c / 2 + 2);
        pr_engine *e[3];
        for (int t = 0; t < 3; t++)
            e[t] = tu_engine(&s, NULL, t + 1);
        pr_block *b = pr_block_new(4, 8, bs, false);
        pr_out *o[3];
        for (int t = 0; t < 3; t++)
            o[t] = tu_out(e[t], b);
        uint64_t seed = 1234 + (uint64_t)variant;
        uint32_t nrej = 0;
        for (uint32_t done = 0; done < rows; done += bs) {
            uint32_t n = rows - done < bs ? rows - done : bs;
            tu_gen_block(b, &seed, n);
            for (int t = 0; t < 3; t++)
                tu_process(e[t], b, o[t]);
            tu_assert_same_out(o[0], o[1]);
            tu_assert_same_out(o[0], o[2]);
            nrej += o[0]->n_rejected;
        }
        assert_true(nrej > 0); /* the data does exercise rejection */
        tu_assert_same_vocab(e[0], e[1]);
        tu_assert_same_vocab(e[0], e[2]);
        assert_true(pr_engine_vocab_size(e[0], 1) > 1000);
        for (int t = 0; t < 3; t++) {
            pr_out_free(o[t]);
            pr_engine_free(e[t]);
        }
        pr_block_free(b);
    }
}

static void test_block_boundary(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
    pr_engine *e = tu_engine(&s, NULL, 2);
    pr_block *b = pr_block_new(0, 1, 64, false);
    const char *k1[] = {"5", "6", "7"};
    const char *k2[] = {"8", "7", "5", "6"};
    for (uint32_t r = 0; r < 3; r++)
        pr_block_put_hex(b, 0, r, k1[r], 1);
    b->rows = 3;
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    pr_block_reset(b);
    for (uint32_t r = 0; r < 4; r++)
        pr_block_put_hex(b, 0, r, k2[r], 1);
    b->rows = 4;
    tu_process(e, b, o);
    assert_int_equal(pr_out_index(o, 0, 0), 3);
    assert_int_equal(pr_out_index(o, 0, 1), 2);
    assert_int_equal(pr_out_index(o, 0, 2), 0);
    assert_int_equal(pr_out_index(o, 0, 3), 1);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_auto_backend(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_pipeline_spec_default(&s);
    s.sparse[0].modulus = 100; /* keep tables small */
    pr_engine *e = tu_engine(&s, "auto", 1);
    const char *name = pr_engine_backend_name(e);
    assert_true(strcmp(name, "cpu") == 0 || strcmp(name, "xrt") == 0);
    pr_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_spec_validate),
        cmocka_unit_test(test_capacity_and_width),
        cmocka_unit_test(test_hex2int),
        cmocka_unit_test(test_modulus),
        cmocka_unit_test(test_dense_ops),
        cmocka_unit_test(test_profile_dlrm),
        cmocka_unit_test(test_profile_default),
        cmocka_unit_test(test_capacity_overflow),
        cmocka_unit_test(test_min_count_streaming),
        cmocka_unit_test(test_torchrec_golden),
        cmocka_unit_test(test_two_pass_rejected_not_counted),
        cmocka_unit_test(test_rejected_rows_leave_vocab_alone),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_block_boundary),
        cmocka_unit_test(test_auto_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
