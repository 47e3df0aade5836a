/*
 * engine_test_util.h — small helpers shared by the engine tests: building
 * blocks from plain arrays, a deterministic skewed generator, temp dirs, and
 * comparing two engines' vocabularies. Header-only so each test binary stays
 * one .c file plus this.
 */
#ifndef PR_ENGINE_TEST_UTIL_H
#define PR_ENGINE_TEST_UTIL_H

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_engine.h"

/* xorshift64*: deterministic, fast, good enough for test data. */
static inline uint64_t tu_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Skewed draw in [0, n): small values far more frequent. */
static inline uint64_t tu_skewed(uint64_t *s, uint64_t n)
{
    uint64_t a = tu_rand(s) % n;
    uint64_t b = tu_rand(s) % (a + 1);
    return tu_rand(s) % (b + 1);
}

static inline void tu_put_hex_u64(pr_block *b, uint32_t col, uint32_t row, uint64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%" PRIx64, v);
    pr_block_put_hex(b, col, row, buf, (size_t)n);
}

static inline void tu_put_missing(pr_block *b, uint32_t col, uint32_t row)
{
    pr_block_put_hex(b, col, row, "", 0);
}

static inline void tu_set_u64(pr_block *b, uint32_t col, uint32_t row, uint64_t v)
{
    b->sparse_enc[col] = PR_SPARSE_U64;
    b->sparse_u64[(size_t)col * b->cap + row] = v;
}

/* A spec with n_dense dense, n_sparse sparse columns and the given sparse ops. */
static inline void tu_spec(pr_pipeline_spec *s, uint16_t n_dense, uint16_t n_sparse,
                           pr_vocab_profile prof, uint64_t modulus, bool mod, bool vocab)
{
    pr_pipeline_spec_default(s);
    s->n_dense = n_dense;
    s->n_sparse = n_sparse;
    s->profile = prof;
    s->n_sparse_ops = 0;
    s->sparse_ops[s->n_sparse_ops++] = PR_OP_HEX2INT;
    if (mod)
        s->sparse_ops[s->n_sparse_ops++] = PR_OP_MODULUS;
    if (vocab)
        s->sparse_ops[s->n_sparse_ops++] = PR_OP_VOCAB;
    for (int c = 0; c < PR_MAX_SPARSE; c++)
        s->sparse[c].modulus = modulus;
}

static inline pr_engine *tu_engine(const pr_pipeline_spec *s, const char *backend, int threads)
{
    char err[512] = "";
    pr_engine_opts o = {.backend = backend, .threads = threads};
    pr_engine *e = pr_engine_new(s, &o, err, sizeof(err));
    if (!e)
        print_error("pr_engine_new: %s\n", err);
    assert_non_null(e);
    return e;
}

static inline pr_out *tu_out(const pr_engine *e, const pr_block *b)
{
    pr_out *o = pr_out_new(b->n_dense, b->n_sparse, b->cap, pr_engine_sparse_width(e));
    assert_non_null(o);
    return o;
}

static inline void tu_process(pr_engine *e, const pr_block *b, pr_out *o)
{
    char err[512] = "";
    int rc = pr_engine_process(e, b, o, err, sizeof(err));
    if (rc)
        print_error("pr_engine_process: %d %s\n", rc, err);
    assert_int_equal(rc, 0);
}

typedef struct {
    pr_vocab_entry *e;
    size_t n, cap;
} tu_vocab;

static inline int tu_vocab_cb(const pr_vocab_entry *e, void *opaque)
{
    tu_vocab *v = opaque;
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->e = realloc(v->e, v->cap * sizeof(*v->e));
        assert_non_null(v->e);
    }
    v->e[v->n++] = *e;
    return 0;
}

static inline tu_vocab tu_vocab_get(const pr_engine *e, uint32_t col)
{
    tu_vocab v = {0};
    assert_int_equal(pr_engine_vocab_read(e, col, tu_vocab_cb, &v), 0);
    return v;
}

/* Assert two engines hold identical vocabularies in every column. */
static inline void tu_assert_same_vocab(const pr_engine *a, const pr_engine *b)
{
    uint32_t ns = pr_engine_spec(a)->n_sparse;
    for (uint32_t c = 0; c < ns; c++) {
        assert_int_equal(pr_engine_vocab_size(a, c), pr_engine_vocab_size(b, c));
        tu_vocab va = tu_vocab_get(a, c), vb = tu_vocab_get(b, c);
        assert_int_equal(va.n, vb.n);
        for (size_t i = 0; i < va.n; i++) {
            assert_int_equal(va.e[i].value, vb.e[i].value);
            assert_int_equal(va.e[i].index, vb.e[i].index);
            assert_int_equal(va.e[i].count, vb.e[i].count);
        }
        free(va.e);
        free(vb.e);
    }
}

/* Assert two outputs are bit-identical over their rows. */
static inline void tu_assert_same_out(const pr_out *a, const pr_out *b)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->n_rejected, b->n_rejected);
    for (uint32_t c = 0; c < a->n_sparse; c++)
        for (uint32_t r = 0; r < a->rows; r++)
            if (pr_out_index(a, c, r) != pr_out_index(b, c, r)) {
                print_error("sparse col %u row %u: %" PRId64 " vs %" PRId64 "\n", c, r,
                            pr_out_index(a, c, r), pr_out_index(b, c, r));
                fail();
            }
    for (uint32_t d = 0; d < a->n_dense; d++)
        assert_memory_equal(a->dense + (size_t)d * a->cap, b->dense + (size_t)d * b->cap,
                            a->rows * sizeof(float));
    assert_memory_equal(a->labels, b->labels, a->rows * sizeof(int32_t));
    assert_memory_equal(a->rejected, b->rejected, pr_bitmap_words(a->rows) * 8);
}

static inline char *tu_tmpdir(void)
{
    char *d = strdup("/tmp/pr_engine_test_XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static inline void tu_rmdir(char *d)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
    free(d);
}

/* One sparse column, modulus 10, values given as hex strings ("" = missing). */
static inline void tu_run_column(pr_engine *e, const char *const *vals, size_t n, int64_t *got)
{
    pr_block *b = pr_block_new(0, 1, (uint32_t)n, false);
    for (size_t i = 0; i < n; i++)
        pr_block_put_hex(b, 0, (uint32_t)i, vals[i], strlen(vals[i]));
    b->rows = (uint32_t)n;
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    for (size_t i = 0; i < n; i++)
        got[i] = pr_out_index(o, 0, (uint32_t)i);
    pr_out_free(o);
    pr_block_free(b);
}

/* A pseudo-random block: skewed values, some missing, a few bad hex rows,
 * negative and missing dense values. */
static inline void tu_gen_block(pr_block *b, uint64_t *seed, uint32_t rows)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(tu_rand(seed) & 1);
        for (uint32_t d = 0; d < b->n_dense; d++) {
            uint64_t x = tu_rand(seed);
            double v =
                (double)tu_skewed(seed, 5000) - (x % 10 == 0 ? 3000 : 0) + (x % 7 == 0 ? 0.5 : 0);
            b->dense[(size_t)d * b->cap + r] = v;
            if (x % 13 == 0)
                pr_bit_set(b->dense_missing + d * pr_bitmap_words(b->cap), r);
        }
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            uint64_t x = tu_rand(seed);
            uint64_t span = c % 3 == 0 ? 100 : c % 3 == 1 ? 100000 : 1ULL << 40;
            uint64_t v = tu_skewed(seed, span) * 0x9E3779B1ULL;
            if (x % 17 == 0)
                tu_put_missing(b, c, r);
            else if (x % 5003 == 0)
                pr_block_put_hex(b, c, r, "nothex", 6);
            else
                tu_put_hex_u64(b, c, r, v);
        }
    }
    b->rows = rows;
}

#endif
