/*
 * test_gen.c — the synthetic data generator (tools/gen/gen.c): determinism for
 * (seed, row), Criteo-like shape (cardinality bounds, missing values,
 * negatives, label rate), and that its three outputs agree: TSV decoded by
 * the Criteo decoder, blocks, and the binary EventBatch stream decoded by
 * protobuf-c; the planted signal of `piperec gen --signal 1`; the exact Zipf law
 * of `piperec gen --zipf S`.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "piperec.pb-c.h"
#include "pr_ingest.h"
#include "pr_gen.h"

static void test_deterministic(void **state)
{
    (void)state;
    pr_gen *a = pr_gen_new(7), *b = pr_gen_new(7), *c = pr_gen_new(8);
    pr_gen_row x, y, z;
    memset(&x, 0, sizeof(x)); /* padding bytes, for memcmp */
    memset(&y, 0, sizeof(y));
    int differ = 0;
    for (uint64_t r = 0; r < 1000; r++) {
        pr_gen_row_at(a, r, &x);
        pr_gen_row_at(b, r, &y);
        pr_gen_row_at(c, r, &z);
        assert_memory_equal(&x, &y, sizeof(x));
        differ += memcmp(x.sparse, z.sparse, sizeof(x.sparse)) != 0;
    }
    assert_true(differ > 900);
    /* Any range: row 123456789 is the same whether made alone or in a run. */
    char buf1[PR_GEN_TSV_LINE_MAX * 4], buf2[PR_GEN_TSV_LINE_MAX];
    uint64_t n;
    size_t l1 = pr_gen_tsv(a, 123456787, 3, buf1, sizeof(buf1), &n);
    assert_int_equal(n, 3);
    size_t l2 = pr_gen_tsv(b, 123456789, 1, buf2, sizeof(buf2), &n);
    assert_int_equal(n, 1);
    assert_memory_equal(buf1 + l1 - l2, buf2, l2);
    pr_gen_free(a);
    pr_gen_free(b);
    pr_gen_free(c);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void test_shape(void **state)
{
    (void)state;
    enum { N = 200000 };
    pr_gen *g = pr_gen_new(1);
    uint32_t *vals = malloc(sizeof(uint32_t) * N * PR_GEN_N_SPARSE);
    uint64_t miss_s[PR_GEN_N_SPARSE] = {0}, miss_d[PR_GEN_N_DENSE] = {0}, neg = 0, pos = 0;
    pr_gen_row row;
    for (uint32_t r = 0; r < N; r++) {
        pr_gen_row_at(g, r, &row);
        pos += row.label == 1;
        assert_true(row.label == 0 || row.label == 1);
        for (int j = 0; j < PR_GEN_N_DENSE; j++) {
            miss_d[j] += row.dense_missing >> j & 1;
            neg += row.dense[j] < 0;
            assert_true(row.dense[j] >= -3);
        }
        for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
            miss_s[c] += row.sparse_missing >> c & 1;
            vals[(size_t)c * N + r] = (row.sparse_missing >> c & 1) ? UINT32_MAX : row.sparse[c];
        }
    }
    /* ~3% positive, negatives present, C22 mostly missing, C1 never. */
    assert_true(pos > N / 50 && pos < N / 25);
    assert_true(neg > N / 100);
    assert_true(miss_s[21] > N / 2);
    assert_int_equal(miss_s[0], 0);
    assert_true(miss_d[11] > N / 2);
    /* Distinct values never exceed the column cardinality; the top value is hot. */
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        uint32_t *v = vals + (size_t)c * N;
        qsort(v, N, sizeof(*v), cmp_u32);
        uint32_t distinct = 0, run = 0, best = 0;
        for (uint32_t i = 0; i < N; i++) {
            if (v[i] == UINT32_MAX)
                break;
            if (i == 0 || v[i] != v[i - 1]) {
                distinct++;
                run = 0;
            }
            if (++run > best)
                best = run;
        }
        assert_true(distinct <= pr_gen_cardinality[c]);
        assert_true(distinct > 0);
        assert_true(best > N / 50); /* Zipf head */
        if (pr_gen_cardinality[c] <= 27)
            assert_int_equal(distinct, pr_gen_cardinality[c]);
    }
    free(vals);
    pr_gen_free(g);
}

static void noop_reject(void *o, int reason, const char *d, const char *rec, size_t len, int64_t n)
{
    (void)reason, (void)d, (void)rec, (void)len, (void)n;
    (*(int *)o)++;
}

static void test_tsv_and_block_agree(void **state)
{
    (void)state;
    enum { N = 500 };
    pr_gen *g = pr_gen_new(3);
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    char *buf = malloc((size_t)N * PR_GEN_TSV_LINE_MAX);
    uint64_t n;
    size_t len = pr_gen_tsv(g, 1000, N, buf, (size_t)N * PR_GEN_TSV_LINE_MAX, &n);
    assert_int_equal(n, N);
    pr_block *b = pr_block_new(13, 26, N, true), *b2 = pr_block_new(13, 26, N, true);
    int rejects = 0;
    pr_decode_ctx ctx = {.spec = &spec, .on_reject = noop_reject, .opaque = &rejects};
    int64_t lines;
    assert_int_equal(pr_decode_criteo_lines(&ctx, b, buf, len, false, 1, &lines), len);
    assert_int_equal(lines, N);
    assert_int_equal(rejects, 0);
    assert_int_equal(pr_gen_fill_block(g, 1000, N, b2, false), 0);
    assert_int_equal(b2->rows, N);
    size_t words = pr_bitmap_words(b->cap);
    assert_memory_equal(b->labels, b2->labels, N * sizeof(int32_t));
    for (uint32_t c = 0; c < 13; c++) {
        assert_memory_equal(b->dense + c * b->cap, b2->dense + c * b2->cap, N * sizeof(double));
        assert_memory_equal(b->dense_missing + c * words, b2->dense_missing + c * words, words * 8);
    }
    for (uint32_t c = 0; c < 26; c++) {
        assert_memory_equal(pr_block_hex(b, c, 0), pr_block_hex(b2, c, 0), (size_t)N * PR_HEX_SLOT);
        assert_memory_equal(b->sparse_missing + c * words, b2->sparse_missing + c * words,
                            words * 8);
    }
    assert_int_equal(pr_gen_fill_block(g, 0, b2->cap - b2->rows + 1, b2, false), PR_EFULL);
    pr_block_free(b);
    pr_block_free(b2);
    free(buf);
    pr_gen_free(g);
}

static void test_binary_is_event_batch(void **state)
{
    (void)state;
    enum { N = 300 };
    pr_gen *g = pr_gen_new(5);
    size_t cap = pr_gen_pb_max(N);
    uint8_t *buf = malloc(cap);
    assert_int_equal(pr_gen_pb_batch(g, 50, N, buf, cap - 1), 0);
    size_t len = pr_gen_pb_batch(g, 50, N, buf, cap);
    assert_true(len > 0);
    /* varint length prefix */
    uint64_t blen = 0;
    size_t hl = 0;
    for (int shift = 0;; shift += 7) {
        blen |= (uint64_t)(buf[hl] & 0x7f) << shift;
        if (!(buf[hl++] & 0x80))
            break;
    }
    assert_int_equal(hl + blen, len);
    Piperec__V1__EventBatch *eb = piperec__v1__event_batch__unpack(NULL, blen, buf + hl);
    assert_non_null(eb);
    assert_int_equal(eb->n_events, N);
    for (uint32_t i = 0; i < N; i++) {
        pr_gen_row row;
        pr_gen_row_at(g, 50 + i, &row);
        Piperec__V1__Event *e = eb->events[i];
        assert_int_equal(e->label, row.label);
        assert_int_equal(e->n_dense, 13);
        assert_int_equal(e->n_sparse_id, 26);
        uint32_t dm = 0, sm = 0;
        for (size_t k = 0; k < e->n_dense_missing; k++)
            dm |= 1u << e->dense_missing[k];
        for (size_t k = 0; k < e->n_sparse_missing; k++)
            sm |= 1u << e->sparse_missing[k];
        assert_int_equal(dm, row.dense_missing);
        assert_int_equal(sm, row.sparse_missing);
        for (int j = 0; j < 13; j++)
            assert_true(e->dense[j] == (double)row.dense[j]);
        for (int c = 0; c < 26; c++)
            assert_int_equal(e->sparse_id[c], row.sparse[c]);
    }
    piperec__v1__event_batch__free_unpacked(eb, NULL);
    free(buf);
    pr_gen_free(g);
}

/* The planted signal (pr_gen_set_signal): features unchanged, labels still
 * a pure function of (seed, row), about 20% positive, and dependent on the
 * planted columns: rows sharing C9's most frequent value differ in rate
 * from the rest. Without it, the label rate stays at 3%. */
static void test_signal(void **state)
{
    (void)state;
    enum { N = 100000 };
    pr_gen *plain = pr_gen_new(5), *sig = pr_gen_new(5), *sig2 = pr_gen_new(5);
    assert_int_equal(pr_gen_set_signal(sig, 1), 0);
    assert_int_equal(pr_gen_set_signal(sig2, 1), 0);
    assert_int_equal(pr_gen_set_signal(sig2, PR_GEN_SIGNAL_MAX + 1), PR_EINVAL);
    pr_gen_row a, b, c;
    uint64_t pos = 0, plain_pos = 0;
    uint32_t c9 = 0;
    uint64_t n_c9 = 0, pos_c9 = 0;
    for (uint64_t r = 0; r < N; r++) {
        pr_gen_row_at(plain, r, &a);
        pr_gen_row_at(sig, r, &b);
        pr_gen_row_at(sig2, r, &c);
        assert_memory_equal(a.dense, b.dense, sizeof(a.dense));
        assert_memory_equal(a.sparse, b.sparse, sizeof(a.sparse));
        assert_int_equal(b.label, c.label);
        pos += (uint64_t)b.label;
        plain_pos += (uint64_t)a.label;
        if (r == 0)
            c9 = b.sparse[8];
        if (b.sparse[8] == c9) {
            n_c9++;
            pos_c9 += (uint64_t)b.label;
        }
    }
    assert_true(plain_pos > N / 50 && plain_pos < N / 25); /* ~3% */
    assert_true(pos > N * 15 / 100 && pos < N * 25 / 100); /* ~20% */
    double rate_c9 = (double)pos_c9 / (double)n_c9;
    double rate_rest = (double)(pos - pos_c9) / (double)(N - n_c9);
    assert_true(n_c9 > 1000 && n_c9 < N - 1000);
    assert_true(rate_c9 - rate_rest > 0.02 || rate_rest - rate_c9 > 0.02);
    pr_gen_free(plain);
    pr_gen_free(sig);
    pr_gen_free(sig2);
}

/* The generator's per-column bijection (gen.c pr__scramble), to map values
 * back to ranks. */
static uint32_t scramble(uint32_t x, uint32_t col)
{
    x += (col + 1) * 0x9e3779b9u;
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

typedef struct val_rank {
    uint32_t val, rank;
} val_rank;

static int cmp_vr(const void *a, const void *b)
{
    uint32_t x = ((const val_rank *)a)->val, y = ((const val_rank *)b)->val;
    return (x > y) - (x < y);
}

/* --zipf S: the share of rank buckets (head table, tail, far tail) matches
 * the exact law P(r) = (r+1)^-S / sum_{k=1}^{card} k^-S within 4 sigma, for
 * S below, at and above 1 and columns with 3, 1460, 93145 and 10M values. */
static void check_zipf(double s)
{
    enum { N = 200000, R = 16384 };
    static const uint32_t lim[] = {1, 2, 10, 100, 2048, 4096, R, UINT32_MAX};
    enum { NB = sizeof(lim) / sizeof(lim[0]) };
    static const int cols[] = {2, 0, 9, 8};
    pr_gen *g = pr_gen_new(5);
    assert_int_equal(pr_gen_set_zipf(g, s), 0);
    val_rank *vr = malloc(R * sizeof(*vr));
    for (size_t ci = 0; ci < sizeof(cols) / sizeof(cols[0]); ci++) {
        int c = cols[ci];
        uint32_t card = pr_gen_cardinality[c], nr = card < R ? card : R;
        for (uint32_t r = 0; r < nr; r++)
            vr[r] = (val_rank){scramble(r, (uint32_t)c), r};
        qsort(vr, nr, sizeof(*vr), cmp_vr);
        double want[NB] = {0}, total = 0;
        for (uint32_t k = card; k >= 1; k--) { /* small terms first */
            double p = pow(k, -s);
            total += p;
            uint32_t b = 0;
            while (k - 1 >= lim[b])
                b++;
            want[b] += p;
        }
        uint64_t got[NB] = {0}, n = 0;
        pr_gen_row row;
        for (uint64_t i = 0; i < N; i++) {
            pr_gen_row_at(g, i, &row);
            if (row.sparse_missing >> c & 1)
                continue;
            n++;
            val_rank key = {row.sparse[c], 0};
            const val_rank *f = bsearch(&key, vr, nr, sizeof(*vr), cmp_vr);
            uint32_t rank = f ? f->rank : R, b = 0;
            while (rank >= lim[b])
                b++;
            got[b]++;
        }
        for (uint32_t b = 0; b < NB; b++) {
            double p = want[b] / total, sd = sqrt(p * (1 - p) / (double)n);
            double e = (double)got[b] / (double)n;
            if (fabs(e - p) > 4 * sd + 1e-4)
                fail_msg("zipf %.2f column C%d ranks < %u: share %.5f, want %.5f (sd %.5f)", s,
                         c + 1, lim[b], e, p, sd);
        }
    }
    free(vr);
    /* A pure function of (seed, row); 0 restores the default law. */
    pr_gen *g2 = pr_gen_new(5), *plain = pr_gen_new(5);
    assert_int_equal(pr_gen_set_zipf(g2, s), 0);
    pr_gen_row x, y;
    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));
    pr_gen_row_at(g, 777, &x);
    pr_gen_row_at(g2, 777, &y);
    assert_memory_equal(&x, &y, sizeof(x));
    assert_int_equal(pr_gen_set_zipf(g2, 0), 0);
    pr_gen_row_at(g2, 777, &x);
    pr_gen_row_at(plain, 777, &y);
    assert_memory_equal(&x, &y, sizeof(x));
    pr_gen_free(g2);
    pr_gen_free(plain);
    pr_gen_free(g);
}

static void test_zipf(void **state)
{
    (void)state;
    check_zipf(0.8);
    check_zipf(1.0);
    check_zipf(1.3);
    pr_gen *g = pr_gen_new(1);
    assert_int_equal(pr_gen_set_zipf(g, -1), PR_EINVAL);
    assert_int_equal(pr_gen_set_zipf(g, 10.5), PR_EINVAL);
    assert_int_equal(pr_gen_set_zipf(g, NAN), PR_EINVAL);
    assert_true(pr_gen_zipf(g) == 0);
    pr_gen_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_tsv_and_block_agree),
        cmocka_unit_test(test_binary_is_event_batch),
        cmocka_unit_test(test_signal),
        cmocka_unit_test(test_zipf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
