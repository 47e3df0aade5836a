/*
 * test_hot.c — the hot-set sketch (service/hot.c) against exact counts: a
 * Zipf-like stream (with and without decay), a shifting hot set under decay,
 * rejected rows of an engine output, table churn and determinism.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_hot.h"

#define N_ITEMS 200000
#define N_DRAWS 2000000
#define BLOCK   4096

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* Zipf(s) over N_ITEMS ranks by inverse CDF; rank r is index r * 2654435761
 * mod 2^31 so hot indices are not small and contiguous. */
static int64_t *zipf_stream(double s, uint64_t seed)
{
    double *cdf = malloc(N_ITEMS * sizeof(*cdf));
    int64_t *v = malloc(N_DRAWS * sizeof(*v));
    assert_non_null(cdf);
    assert_non_null(v);
    double acc = 0;
    for (int i = 0; i < N_ITEMS; i++)
        cdf[i] = acc += pow(i + 1, -s);
    for (size_t d = 0; d < N_DRAWS; d++) {
        double u = (double)(rng_next(&seed) >> 11) / 9007199254740992.0 * acc;
        size_t lo = 0, hi = N_ITEMS - 1;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (cdf[mid] < u)
                lo = mid + 1;
            else
                hi = mid;
        }
        v[d] = (int64_t)((lo * 2654435761ull) & 0x7fffffff);
    }
    free(cdf);
    return v;
}

static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Feed the stream in blocks; compare top-k coverage with the exact (decayed)
 * counts for k = 10, 100, 1000: within 1% (relative). */
static void check_coverage(uint64_t half_life)
{
    int64_t *v = zipf_stream(1.05, 42);
    /* Exact decayed counts per rank-index, through a map from index to rank. */
    double *exact = calloc(N_ITEMS, sizeof(*exact));
    int64_t *idx_of = malloc(N_ITEMS * sizeof(*idx_of));
    for (size_t r = 0; r < N_ITEMS; r++)
        idx_of[r] = (int64_t)((r * 2654435761ull) & 0x7fffffff);
    /* index -> rank: the multiplier is odd, so invert it modulo 2^31. */
    uint64_t inv = 1;
    for (int i = 0; i < 5; i++)
        inv = (inv * (2 - 2654435761ull * inv)) & 0x7fffffff;

    pr_hot *h = pr_hot_new(1024, half_life);
    assert_non_null(h);
    double w = 1, total = 0;
    for (size_t off = 0; off < N_DRAWS; off += BLOCK) {
        size_t n = N_DRAWS - off < BLOCK ? N_DRAWS - off : BLOCK;
        if (half_life)
            w *= exp2((double)n / (double)half_life);
        pr_hot_observe(h, v + off, n);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = ((uint64_t)v[off + i] * inv) & 0x7fffffff;
            assert_true(r < N_ITEMS);
            assert_int_equal(idx_of[r], v[off + i]);
            exact[r] += w;
        }
        total += w * (double)n;
    }
    assert_int_equal(pr_hot_rows_observed(h), N_DRAWS);

    double *sorted = malloc(N_ITEMS * sizeof(*sorted));
    memcpy(sorted, exact, N_ITEMS * sizeof(*sorted));
    qsort(sorted, N_ITEMS, sizeof(*sorted), cmp_desc);
    size_t ks[] = {10, 100, 1024};
    double est[3];
    pr_hot_coverage(h, ks, 3, est);
    for (int j = 0; j < 3; j++) {
        double ex = 0;
        for (size_t i = 0; i < ks[j]; i++)
            ex += sorted[i];
        ex /= total;
        print_message("half_life %llu k %zu: exact %.5f sketch %.5f\n",
                      (unsigned long long)half_life, ks[j], ex, est[j]);
        assert_true(fabs(est[j] - ex) <= 0.01 * ex);
    }

    /* The top 10 are the 10 hottest ranks, in order, with their shares. */
    pr_hot_item it[10];
    double cov;
    assert_int_equal(pr_hot_top(h, 10, it, &cov), 10);
    assert_true(fabs(cov - est[0]) < 1e-12);
    for (int i = 0; i < 10; i++) {
        uint64_t r = ((uint64_t)it[i].index * inv) & 0x7fffffff;
        assert_true(r < 12); /* rank noise among near-equal neighbours only */
        assert_true(fabs(it[i].share - exact[r] / total) <= 0.01 * exact[r] / total);
    }
    pr_hot_free(h);
    free(sorted);
    free(idx_of);
    free(exact);
    free(v);
}

static void test_zipf_no_decay(void **state)
{
    (void)state;
    check_coverage(0);
}

static void test_zipf_decay(void **state)
{
    (void)state;
    /* Four half-lives over the stream: the weights span 16x; and a half-life
     * short enough to rescale the weight several times. */
    check_coverage(N_DRAWS / 4);
    check_coverage(20000);
}

/* Under decay the hot set follows the stream: after a shift, the new hot
 * indices lead and the old ones fade. */
static void test_decay_follows_shift(void **state)
{
    (void)state;
    pr_hot *h = pr_hot_new(64, 10000);
    int64_t blk[1000];
    uint64_t seed = 7;
    for (int phase = 0; phase < 2; phase++) {
        for (int b = 0; b < 200; b++) {
            for (int i = 0; i < 1000; i++) {
                uint64_t x = rng_next(&seed);
                /* Half the values from 5 hot indices, half from a wide tail. */
                blk[i] = (x & 1) ? phase * 1000 + (int64_t)(x >> 8) % 5
                                 : 100000 + (int64_t)(x >> 8) % 50000;
            }
            pr_hot_observe(h, blk, 1000);
        }
        pr_hot_item it[5];
        double cov;
        assert_int_equal(pr_hot_top(h, 5, it, &cov), 5);
        for (int i = 0; i < 5; i++) {
            assert_true(it[i].index >= phase * 1000 && it[i].index < phase * 1000 + 5);
            assert_true(fabs(it[i].share - 0.1) < 0.01);
        }
        assert_true(fabs(cov - 0.5) < 0.02);
    }
    pr_hot_free(h);
}

/* Rejected rows of an engine output are not counted; int32 and int64 widths. */
static void test_observe_out(void **state)
{
    (void)state;
    for (int width = 4; width <= 8; width += 4) {
        pr_out *o = pr_out_new(0, 2, 128, (uint8_t)width);
        assert_non_null(o);
        o->rows = 100;
        for (uint32_t r = 0; r < 100; r++) {
            int64_t v = r < 50 ? 7 : 9;
            if (width == 8)
                pr_out_sparse64(o, 1)[r] = v;
            else
                pr_out_sparse32(o, 1)[r] = (int32_t)v;
        }
        /* Rows 60..99 rejected: 50 sevens and 10 nines remain. */
        for (uint32_t r = 60; r < 100; r++)
            o->rejected[r >> 6] |= 1ull << (r & 63);
        o->n_rejected = 40;
        pr_hot *h = pr_hot_new(4, 0);
        assert_int_equal(pr_hot_top_k(h), 4);
        pr_hot_observe_out(h, o, 1);
        assert_int_equal(pr_hot_rows_observed(h), 60);
        pr_hot_item it[4];
        double cov;
        assert_int_equal(pr_hot_top(h, 4, it, &cov), 2);
        assert_int_equal(it[0].index, 7);
        assert_true(fabs(it[0].share - 50.0 / 60) < 1e-9);
        assert_int_equal(it[1].index, 9);
        assert_true(fabs(cov - 1) < 1e-9);
        pr_hot_free(h);
        pr_out_free(o);
    }
}

/* A list feature of a declared schema: every element counts (rows with
 * 3, 0 and 1 elements), rejected rows left out. */
static void test_observe_side_list(void **state)
{
    (void)state;
    pr_out *o = pr_out_new(0, 1, 64, 8);
    assert_non_null(o);
    o->side = pr_fside_new(0, 0, 1, 64);
    assert_non_null(o->side);
    int32_t *len = pr_fside_lengths(o->side, 0);
    static const int64_t vals[] = {5, 5, 6, /* row 1 empty */ 5, 8, 8};
    len[0] = 3, len[1] = 0, len[2] = 1, len[3] = 2;
    assert_int_equal(pr_fside_reserve(o->side, 0, 6), 0);
    memcpy(o->side->values[0], vals, sizeof(vals));
    o->side->n_values[0] = 6;
    o->rows = 4;
    o->rejected[0] |= 1ull << 3; /* row 3 (the two eights) rejected */
    o->n_rejected = 1;
    pr_hot *h = pr_hot_new(4, 0);
    pr_hot_observe_side(h, o, 0);
    assert_int_equal(pr_hot_rows_observed(h), 4); /* elements, not rows */
    pr_hot_item it[4];
    double cov;
    assert_int_equal(pr_hot_top(h, 4, it, &cov), 2);
    assert_int_equal(it[0].index, 5);
    assert_true(fabs(it[0].share - 3.0 / 4) < 1e-9);
    assert_int_equal(it[1].index, 6);
    pr_hot_free(h);
    pr_fside_free(o->side);
    o->side = NULL;
    pr_out_free(o);
}

/* A declared schema's notices (after pr_feature_finish: col = side index,
 * row = block row) restart their index in the sketch of that feature only,
 * before the row that uses it anew; a hot index leaves the set at once. */
static void test_observe_side_notices(void **state)
{
    (void)state;
    pr_out *o = pr_out_new(0, 2, 64, 8);
    assert_non_null(o);
    o->side = pr_fside_new(0, 0, 2, 64);
    assert_non_null(o->side);
    o->side->vocab_col[0] = 0;
    o->side->vocab_col[1] = 1;
    /* 40 rows: feature 0 one value (7 each row), feature 1 a list (7, 7). */
    o->rows = 40;
    for (uint32_t r = 0; r < 40; r++) {
        pr_fside_lengths(o->side, 0)[r] = 1;
        pr_fside_lengths(o->side, 1)[r] = 2;
    }
    assert_int_equal(pr_fside_reserve(o->side, 0, 40), 0);
    assert_int_equal(pr_fside_reserve(o->side, 1, 80), 0);
    for (uint32_t i = 0; i < 40; i++)
        o->side->values[0][i] = 7;
    for (uint32_t i = 0; i < 80; i++)
        o->side->values[1][i] = 7;
    o->side->n_values[0] = 40;
    o->side->n_values[1] = 80;
    pr_hot *h0 = pr_hot_new(4, 0), *h1 = pr_hot_new(4, 0);
    pr_hot_observe_side(h0, o, 0);
    pr_hot_observe_side(h1, o, 1);
    pr_hot_set_refresh(h0);
    pr_hot_set_refresh(h1);
    assert_true(pr_hot_is_hot(h0, 7));
    assert_true(pr_hot_is_hot(h1, 7));
    /* Next block: index 7 of feature 1 recycled at row 39 (feature 0's 7
     * untouched). Feature 1's counter restarts there: 1 row x 2 = 2, under
     * PR_HOT_SET_MIN_COUNT. */
    pr_recycled n = {.col = 1, .row = 39, .index = 7, .number = 1};
    o->recycled = &n;
    o->n_recycled = 1;
    pr_hot_observe_side(h0, o, 0);
    pr_hot_observe_side(h1, o, 1);
    o->recycled = NULL;
    o->n_recycled = 0;
    assert_true(pr_hot_is_hot(h0, 7));
    assert_false(pr_hot_is_hot(h1, 7)); /* left the set with its old value */
    pr_hot_item it[4];
    double cov;
    assert_int_equal(pr_hot_top(h0, 4, it, &cov), 1);
    assert_true(fabs(it[0].share - 1.0) < 1e-9);
    assert_int_equal(pr_hot_top(h1, 4, it, &cov), 1);
    assert_true(fabs(it[0].share - 2.0 / 160) < 1e-9); /* 2 of 160 elements since the start */
    assert_int_equal(pr_hot_rows_observed(h1), 160);
    pr_hot_free(h0);
    pr_hot_free(h1);
    pr_fside_free(o->side);
    o->side = NULL;
    pr_out_free(o);
}

/* The popular split of a declared schema: a row is popular when every
 * element of every vocab feature is hot; an empty list passes; a feature
 * without vocab (vocab_col -1) is not judged. */
static void test_popular_rows_side(void **state)
{
    (void)state;
    enum { TOP = 4 };
    pr_hot *h[2] = {pr_hot_new(TOP, 0), pr_hot_new(TOP, 0)};
    int64_t v[64];
    for (int i = 0; i < 64; i++)
        v[i] = i % 4; /* 0..3 hot in both, 16 times each */
    pr_hot_observe(h[0], v, 64);
    pr_hot_observe(h[1], v, 64);
    pr_out *o = pr_out_new(0, 2, 64, 8);
    o->side = pr_fside_new(0, 0, 3, 64);
    /* features: 0 user (vocab col 0), 1 bucket (no vocab), 2 hist (vocab col 1, a list) */
    o->side->vocab_col[0] = 0;
    o->side->vocab_col[1] = -1;
    o->side->vocab_col[2] = 1;
    static const int64_t user[5] = {1, 2, 9, 3, 0};
    static const int32_t hlen[5] = {2, 0, 1, 3, 1};
    static const int64_t hist[7] = {0, 1, /* row 1 empty */ 2, 3, 99, 1, 3};
    static const bool want[5] = {true, true, false, false, true};
    o->rows = 5;
    assert_int_equal(pr_fside_reserve(o->side, 0, 5), 0);
    assert_int_equal(pr_fside_reserve(o->side, 1, 5), 0);
    assert_int_equal(pr_fside_reserve(o->side, 2, 7), 0);
    for (uint32_t r = 0; r < 5; r++) {
        pr_fside_lengths(o->side, 0)[r] = 1;
        pr_fside_lengths(o->side, 1)[r] = 1;
        pr_fside_lengths(o->side, 2)[r] = hlen[r];
        o->side->values[0][r] = user[r];
        o->side->values[1][r] = 12345; /* never hot: not judged */
    }
    memcpy(o->side->values[2], hist, sizeof(hist));
    o->side->n_values[0] = o->side->n_values[1] = 5;
    o->side->n_values[2] = 7;
    uint64_t *pop = pr_hot_popular_rows(h, o);
    assert_non_null(pop);
    for (uint32_t r = 0; r < 5; r++)
        assert_int_equal(pr_bit_test(pop, r), want[r]);
    free(pop);
    assert_int_equal(pr_hot_sets_version(h, 2), 2); /* both sets built by the call */
    pr_hot_free(h[0]);
    pr_hot_free(h[1]);
    pr_fside_free(o->side);
    o->side = NULL;
    pr_out_free(o);
}

/* Hot sets (batch.split popular): the top top_k by estimate among values
 * seen at least PR_HOT_SET_MIN_COUNT times for sure; nothing before the set
 * is asked for; pr_hot_popular_rows marks a row popular only when every
 * column's index is in its set, and the set follows the stream at rebuilds. */
static void test_hot_set(void **state)
{
    (void)state;
    enum { TOP = 16 };
    pr_hot *h = pr_hot_new(TOP, 0);
    /* Value v < 40 seen 60 - v times (60..21), 3000 values seen once each,
     * 3 values (1000..1002) seen 3 times: below the floor. Interleaved. */
    int64_t *v = malloc(8000 * sizeof(*v));
    size_t n = 0;
    for (int round = 0; round < 60; round++) {
        for (int64_t x = 0; x < 40; x++)
            if (round < 60 - x)
                v[n++] = x;
        if (round < 3)
            for (int64_t x = 1000; x < 1003; x++)
                v[n++] = x;
        for (int k = 0; k < 50; k++)
            v[n++] = 100000 + round * 50 + k;
    }
    pr_hot_observe(h, v, n);
    assert_false(pr_hot_is_hot(h, 0)); /* not asked for yet */
    assert_int_equal(pr_hot_set_size(h), 0);
    pr_hot_set_refresh(h);
    assert_int_equal(pr_hot_set_size(h), TOP);
    for (int64_t x = 0; x < 40; x++)
        assert_int_equal(pr_hot_is_hot(h, x), x < TOP);
    for (int64_t x = 1000; x < 1003; x++)
        assert_false(pr_hot_is_hot(h, x));
    assert_false(pr_hot_is_hot(h, 100000));

    /* Two columns; popular = both indices hot. */
    pr_hot *h2 = pr_hot_new(TOP, 0);
    pr_hot_observe(h2, v, n);
    pr_out *o = pr_out_new(0, 2, 256, 4);
    o->rows = 200;
    for (uint32_t r = 0; r < 200; r++) {
        pr_out_sparse32(o, 0)[r] = (int32_t)(r % 20); /* hot when < 16 */
        pr_out_sparse32(o, 1)[r] = (int32_t)(r % 7 == 0 ? 100000 : r % 16);
    }
    pr_hot *cols[2] = {h, h2};
    uint64_t *pop = pr_hot_popular_rows(cols, o);
    assert_non_null(pop);
    uint32_t n_pop = 0;
    for (uint32_t r = 0; r < 200; r++) {
        bool want = r % 20 < 16 && r % 7 != 0;
        assert_int_equal(pr_bit_test(pop, r), want);
        n_pop += want;
    }
    assert_true(n_pop > 100);
    free(pop);
    assert_int_equal(pr_hot_set_size(h2), TOP); /* turned on by the call */

    /* The stream moves to values 500..515, 100 times each: after enough values
     * a rebuild (due by itself during observe) holds the new ones only. */
    n = 0;
    for (int round = 0; round < 100; round++)
        for (int64_t x = 500; x < 516; x++)
            v[n++] = x;
    pr_hot *h3 = pr_hot_new(TOP, 1000); /* decay, so the old values fade */
    pr_hot_observe(h3, v, 100);
    pr_hot_set_refresh(h3);
    for (int i = 0; i < 40; i++)
        pr_hot_observe(h3, v, n);
    for (int64_t x = 500; x < 516; x++)
        assert_true(pr_hot_is_hot(h3, x));
    assert_int_equal(pr_hot_set_size(h3), TOP);
    free(v);
    pr_out_free(o);
    pr_hot_free(h);
    pr_hot_free(h2);
    pr_hot_free(h3);
}

/* Constant churn through a small table (every value evicts) keeps lookups
 * right: the backward-shift deletion leaves no broken probe runs. Two runs of
 * the same stream give the same answer (no wall time, no randomness). */
static void test_churn_deterministic(void **state)
{
    (void)state;
    pr_hot_item a[16], b[16];
    for (int run = 0; run < 2; run++) {
        pr_hot *h = pr_hot_new(16, 5000);
        uint64_t seed = 99;
        int64_t blk[512];
        for (int k = 0; k < 400; k++) {
            for (int i = 0; i < 512; i++) {
                uint64_t x = rng_next(&seed);
                blk[i] = (x % 3 == 0) ? 42 : (int64_t)(x >> 20);
            }
            pr_hot_observe(h, blk, 512);
        }
        assert_int_equal(pr_hot_top(h, 16, run ? b : a, NULL), 16);
        assert_int_equal((run ? b : a)[0].index, 42);
        pr_hot_free(h);
    }
    assert_memory_equal(a, b, sizeof(a));
    assert_null(pr_hot_new(0, 0));
    pr_hot *empty = pr_hot_new(8, 0);
    double cov = -1;
    assert_int_equal(pr_hot_top(empty, 8, a, &cov), 0);
    assert_true(cov == 0);
    pr_hot_free(empty);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zipf_no_decay),       cmocka_unit_test(test_zipf_decay),
        cmocka_unit_test(test_decay_follows_shift), cmocka_unit_test(test_observe_out),
        cmocka_unit_test(test_churn_deterministic), cmocka_unit_test(test_hot_set),
        cmocka_unit_test(test_observe_side_list),   cmocka_unit_test(test_observe_side_notices),
        cmocka_unit_test(test_popular_rows_side),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
