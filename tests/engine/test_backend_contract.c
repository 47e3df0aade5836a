/*
 * test_backend_contract.c — the contract every engine backend keeps
 * (fpga_engine/pr_backend.h), checked against every name pr_engine_backends()
 * lists, so a newly registered backend is covered without touching this file.
 *
 * The oracle is a deliberately plain reference implementation written here:
 * row by row, a char-by-char hex parser, % for modulus, and glibc's tsearch
 * tree for vocabularies. Backends must match it exactly: outputs, rejected
 * rows (which never touch vocabulary state), vocab_read order, and
 * snapshot-then-continue. A backend that cannot start here (no device) is
 * skipped, not failed.
 */
#define _GNU_SOURCE
#include "engine_test_util.h"

#include <math.h>
#include <search.h>

#include "pr_backend.h"
#include "pr_vocab.h"

/* ------------------------------------------------------------ reference */

typedef struct ref_ent {
    uint64_t value;
    int64_t index; /* -1 = pending */
    uint64_t count;
} ref_ent;

typedef struct ref_col {
    void *root; /* tsearch tree of ref_ent* */
    ref_ent **by_order;
    size_t n_ent;
    int64_t n_assigned;
} ref_col;

typedef struct ref_engine {
    pr_pipeline_spec spec;
    ref_col cols[PR_MAX_SPARSE];
    bool counted; /* two-pass: counting finished */
} ref_engine;

static int ref_cmp(const void *a, const void *b)
{
    uint64_t x = ((const ref_ent *)a)->value, y = ((const ref_ent *)b)->value;
    return x < y ? -1 : x > y;
}

static ref_ent *ref_get(ref_col *c, uint64_t v, bool create)
{
    ref_ent key = {v, 0, 0};
    void *found = tfind(&key, &c->root, ref_cmp);
    if (found)
        return *(ref_ent **)found;
    if (!create)
        return NULL;
    ref_ent *e = calloc(1, sizeof(*e));
    e->value = v;
    e->index = -1;
    tsearch(e, &c->root, ref_cmp);
    c->by_order = realloc(c->by_order, (c->n_ent + 1) * sizeof(*c->by_order));
    c->by_order[c->n_ent++] = e;
    return e;
}

static void ref_free(ref_engine *r)
{
    for (int c = 0; c < PR_MAX_SPARSE; c++) {
        tdestroy(r->cols[c].root, free);
        free(r->cols[c].by_order);
    }
    free(r);
}

static bool ref_hex(const char *slot, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < PR_HEX_SLOT; i++) {
        char ch = slot[i];
        int d;
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return false;
        v = v * 16 + (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Parse + validate one row; returns the first bad column or -1. */
static int ref_row_values(const pr_block *b, uint32_t r, uint64_t *vals, bool *missing)
{
    for (uint32_t c = 0; c < b->n_sparse; c++) {
        missing[c] = pr_bit_test(b->sparse_missing + c * pr_bitmap_words(b->cap), r);
        vals[c] = 0;
        if (missing[c])
            continue;
        if (b->sparse_enc[c] == PR_SPARSE_U64)
            vals[c] = b->sparse_u64[(size_t)c * b->cap + r];
        else if (!ref_hex(b->sparse_hex + ((size_t)c * b->cap + r) * PR_HEX_SLOT, &vals[c]))
            return (int)c;
    }
    return -1;
}

static bool ref_has(const pr_pipeline_spec *s, pr_op op)
{
    return pr_spec_has_op(s, op);
}

static void ref_count(ref_engine *re, const pr_block *b)
{
    const pr_pipeline_spec *s = &re->spec;
    uint64_t vals[PR_MAX_SPARSE];
    bool miss[PR_MAX_SPARSE];
    for (uint32_t r = 0; r < b->rows; r++) {
        if (ref_row_values(b, r, vals, miss) >= 0)
            continue;
        for (uint32_t c = 0; c < s->n_sparse; c++) {
            if (miss[c] && s->profile == PR_VOCAB_DEFAULT)
                continue;
            uint64_t v = ref_has(s, PR_OP_MODULUS) ? vals[c] % s->sparse[c].modulus : vals[c];
            if (s->sparse[c].min_count > 1)
                ref_get(&re->cols[c], v, true)->count++;
        }
    }
}

/* Expected output of one block; returns PR_EFULL like the engine would. */
static int ref_process(ref_engine *re, const pr_block *b, int64_t *sparse_out, float *dense_out,
                       int32_t *labels, bool *rejected)
{
    const pr_pipeline_spec *s = &re->spec;
    int64_t base = s->profile == PR_VOCAB_DEFAULT ? 2 : 0;
    bool two_pass = s->count_mode == PR_COUNT_TWO_PASS;
    uint64_t vals[PR_MAX_SPARSE];
    bool miss[PR_MAX_SPARSE];
    bool full[PR_MAX_SPARSE] = {0};
    int rc = 0;
    for (uint32_t r = 0; r < b->rows; r++) {
        rejected[r] = ref_row_values(b, r, vals, miss) >= 0;
        labels[r] = rejected[r] || !s->has_label ? 0 : b->labels[r];
        for (uint32_t d = 0; d < s->n_dense; d++) {
            double x = b->dense[(size_t)d * b->cap + r];
            for (int k = 0; k < s->n_dense_ops; k++) {
                if (s->dense_ops[k] == PR_OP_NEG2ZERO && x < 0)
                    x = 0;
                if (s->dense_ops[k] == PR_OP_LOG1P)
                    x = (float)log1p(x);
            }
            if (rejected[r] || pr_bit_test(b->dense_missing + d * pr_bitmap_words(b->cap), r))
                x = 0;
            dense_out[(size_t)d * b->rows + r] = (float)x;
        }
        for (uint32_t c = 0; c < s->n_sparse; c++) {
            int64_t *o = &sparse_out[(size_t)c * b->rows + r];
            *o = 0;
            if (rejected[r] || full[c])
                continue;
            if (miss[c] && s->profile == PR_VOCAB_DEFAULT)
                continue;
            uint64_t v = ref_has(s, PR_OP_MODULUS) ? vals[c] % s->sparse[c].modulus : vals[c];
            if (!ref_has(s, PR_OP_VOCAB)) {
                *o = (int64_t)v;
                continue;
            }
            ref_col *col = &re->cols[c];
            uint32_t minc = s->sparse[c].min_count;
            ref_ent *e = ref_get(col, v, !(two_pass && minc > 1));
            if (e && e->index >= 0) {
                if (minc > 1 && !two_pass)
                    e->count++;
                *o = e->index;
                continue;
            }
            if (minc > 1) {
                if (!e) {
                    *o = PR_INDEX_OOV;
                    continue;
                }
                if (!two_pass)
                    e->count++;
                if (e->count < minc) {
                    *o = PR_INDEX_OOV;
                    continue;
                }
            }
            if ((uint64_t)(base + col->n_assigned) >= pr__spec_col_capacity(s, c)) {
                if (s->profile == PR_VOCAB_DEFAULT) {
                    *o = PR_INDEX_OOV;
                    continue;
                }
                full[c] = true;
                rc = PR_EFULL;
                continue;
            }
            e->index = base + col->n_assigned++;
            *o = e->index;
        }
    }
    return rc;
}

/* ------------------------------------------------------------ data */

static void gen(pr_block *b, uint64_t *seed, uint32_t rows, int flavor)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(tu_rand(seed) % 2);
        for (uint32_t d = 0; d < b->n_dense; d++) {
            uint64_t x = tu_rand(seed);
            b->dense[(size_t)d * b->cap + r] =
                (double)tu_skewed(seed, 3000) * (x % 9 == 0 ? -1.0 : 1.0) +
                (x % 11 == 0 ? 0.25 : 0);
            if (x % 23 == 0)
                pr_bit_set(b->dense_missing + d * pr_bitmap_words(b->cap), r);
        }
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            uint64_t x = tu_rand(seed);
            uint64_t v = tu_skewed(seed, c % 2 ? 50 : 20000) * 0x1000193ULL;
            if (flavor == 1 && c == 0)
                b->sparse_enc[c] = PR_SPARSE_U64;
            if (x % 19 == 0) {
                pr_bit_set(b->sparse_missing + c * pr_bitmap_words(b->cap), r);
                if (b->sparse_enc[c] == PR_SPARSE_HEX)
                    memset(pr_block_hex(b, c, r), '0', PR_HEX_SLOT);
            } else if (b->sparse_enc[c] == PR_SPARSE_U64) {
                b->sparse_u64[(size_t)c * b->cap + r] = v;
            } else if (x % 997 == 0) {
                pr_block_put_hex(b, c, r, "12z4", 4);
            } else {
                tu_put_hex_u64(b, c, r, x % 3 == 0 ? v : v * 7);
                if (x % 4 == 0) /* upper case some */
                    for (char *p = pr_block_hex(b, c, r); p < pr_block_hex(b, c, r) + PR_HEX_SLOT;
                         p++)
                        if (*p >= 'a' && *p <= 'f')
                            *p = (char)(*p - 'a' + 'A');
            }
        }
    }
    b->rows = rows;
}

/* ------------------------------------------------------------ suite */

typedef struct contract_case {
    const char *label;
    pr_vocab_profile profile;
    uint64_t modulus; /* 0 = no modulus op */
    bool vocab;
    uint32_t min_count;
    pr_count_mode mode;
    uint64_t capacity;
} contract_case;

static const contract_case cases[] = {
    {"dlrm mod 4096", PR_VOCAB_DLRM, 4096, true, 1, PR_COUNT_STREAMING, 0},
    {"dlrm mod 2^36 (hash)", PR_VOCAB_DLRM, 1ULL << 36, true, 1, PR_COUNT_STREAMING, 0},
    {"default mod 1000 capacity 300", PR_VOCAB_DEFAULT, 1000, true, 1, PR_COUNT_STREAMING, 300},
    {"default no modulus min_count 3", PR_VOCAB_DEFAULT, 0, true, 3, PR_COUNT_STREAMING, 0},
    {"default mod 65536 two-pass min_count 2", PR_VOCAB_DEFAULT, 65536, true, 2, PR_COUNT_TWO_PASS,
     0},
    {"stateless mod 1000003", PR_VOCAB_DLRM, 1000003, false, 1, PR_COUNT_STREAMING, 0},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

static void case_spec(const contract_case *k, pr_pipeline_spec *s)
{
    tu_spec(s, 3, 5, k->profile, k->modulus, k->modulus != 0, k->vocab);
    s->count_mode = k->mode;
    for (int c = 0; c < 5; c++) {
        s->sparse[c].min_count = k->min_count;
        s->sparse[c].capacity = k->capacity;
    }
}

static pr_engine *try_engine(const char *backend, const pr_pipeline_spec *s, int threads)
{
    char err[512] = "";
    pr_engine_opts o = {.backend = backend, .threads = threads};
    pr_engine *e = pr_engine_new(s, &o, err, sizeof(err));
    if (!e)
        print_message("backend %s unavailable here: %s\n", backend, err);
    return e;
}

#define N_BLOCKS 6
#define ROWS     3000

static void check_vocab_order(const pr_engine *e, uint32_t col, int64_t base)
{
    tu_vocab v = tu_vocab_get(e, col);
    bool pending = false;
    size_t n_assigned = 0;
    for (size_t i = 0; i < v.n; i++) {
        if (v.e[i].index < 0) {
            pending = true;
            continue;
        }
        assert_false(pending); /* assigned ones first, then pending ones */
        assert_int_equal(v.e[i].index, base + (int64_t)i);
        n_assigned++;
    }
    assert_int_equal(pr_engine_vocab_size(e, col), (uint64_t)base + n_assigned);
    free(v.e);
}

static void run_backend(const char *backend)
{
    int ran = 0;
    for (size_t ci = 0; ci < N_CASES; ci++) {
        const contract_case *k = &cases[ci];
        pr_pipeline_spec s;
        case_spec(k, &s);
        /* a backend may refuse a spec it cannot run (device limits): that
         * case is skipped, the others still have to pass */
        pr_engine *e = try_engine(backend, &s, 2);
        if (!e)
            continue;
        ran++;
        print_message("[%s] %s\n", backend, k->label);
        ref_engine *re = calloc(1, sizeof(*re));
        re->spec = s;
        pr_block *blocks[N_BLOCKS];
        uint64_t seed = 77 + ci;
        for (int i = 0; i < N_BLOCKS; i++) {
            blocks[i] = pr_block_new(3, 5, ROWS, false);
            gen(blocks[i], &seed, ROWS - (uint32_t)i * 7, i % 2);
        }
        if (k->mode == PR_COUNT_TWO_PASS) {
            for (int i = 0; i < N_BLOCKS; i++) {
                assert_int_equal(pr_engine_count(e, blocks[i]), 0);
                ref_count(re, blocks[i]);
            }
            assert_int_equal(pr_engine_count_done(e), 0);
        }
        int64_t *want = malloc(sizeof(int64_t) * 5 * ROWS);
        float *wdense = malloc(sizeof(float) * 3 * ROWS);
        int32_t *wlab = malloc(sizeof(int32_t) * ROWS);
        bool *wrej = malloc(ROWS);
        pr_out *o = tu_out(e, blocks[0]);
        char snap[] = "/tmp/pr_contract_XXXXXX";
        int fd = mkstemp(snap);
        assert_true(fd >= 0);
        close(fd);
        pr_engine *cont = NULL; /* restored from the snapshot after block 2 */
        pr_out *oc = tu_out(e, blocks[0]);
        for (int i = 0; i < N_BLOCKS; i++) {
            const pr_block *b = blocks[i];
            int wrc = ref_process(re, b, want, wdense, wlab, wrej);
            char err[512] = "";
            int rc = pr_engine_process(e, b, o, err, sizeof(err));
            assert_int_equal(rc, wrc);
            uint32_t nrej = 0;
            for (uint32_t r = 0; r < b->rows; r++) {
                assert_int_equal(pr_bit_test(o->rejected, r), wrej[r]);
                nrej += wrej[r];
                assert_int_equal(o->labels[r], wlab[r]);
                for (uint32_t c = 0; c < 5; c++)
                    if (pr_out_index(o, c, r) != want[(size_t)c * b->rows + r]) {
                        print_error("%s/%s block %d row %u col %u: got %" PRId64 " want %" PRId64
                                    "\n",
                                    backend, k->label, i, r, c, pr_out_index(o, c, r),
                                    want[(size_t)c * b->rows + r]);
                        fail();
                    }
                for (uint32_t d = 0; d < 3; d++) {
                    float g = o->dense[(size_t)d * o->cap + r], w = wdense[(size_t)d * b->rows + r];
                    assert_memory_equal(&g, &w, sizeof(float));
                }
            }
            assert_int_equal(o->n_rejected, nrej);
            if (cont) {
                assert_int_equal(pr_engine_process(cont, b, oc, err, sizeof(err)), rc);
                tu_assert_same_out(o, oc);
            }
            if (i == 2 && k->vocab) {
                assert_int_equal(pr_vocab_save(e, snap, err, sizeof(err)), 0);
                cont = try_engine(backend, &s, 1);
                assert_non_null(cont);
                assert_int_equal(pr_vocab_load(cont, snap, err, sizeof(err)), 0);
                /* counts travel in the snapshot; the count pass is over */
                if (k->mode == PR_COUNT_TWO_PASS)
                    assert_int_equal(pr_engine_count_done(cont), 0);
                tu_assert_same_vocab(e, cont);
            }
        }
        /* vocab_read: same entries as the reference, in index order */
        for (uint32_t c = 0; c < 5 && k->vocab; c++) {
            int64_t base = k->profile == PR_VOCAB_DEFAULT ? 2 : 0;
            check_vocab_order(e, c, base);
            tu_vocab v = tu_vocab_get(e, c);
            ref_col *rc = &re->cols[c];
            assert_int_equal(pr_engine_vocab_size(e, c), (uint64_t)(base + rc->n_assigned));
            size_t i = 0;
            for (; i < v.n && v.e[i].index >= 0; i++) {
                ref_ent *x = ref_get(rc, v.e[i].value, false);
                assert_non_null(x);
                assert_int_equal(x->index, v.e[i].index);
                if (v.e[i].count) /* backends that count must count right */
                    assert_int_equal(x->count, v.e[i].count);
            }
            assert_int_equal(i, (size_t)rc->n_assigned);
            free(v.e);
        }
        if (cont)
            tu_assert_same_vocab(e, cont);
        unlink(snap);
        free(want);
        free(wdense);
        free(wlab);
        free(wrej);
        pr_out_free(o);
        pr_out_free(oc);
        for (int i = 0; i < N_BLOCKS; i++)
            pr_block_free(blocks[i]);
        pr_engine_free(cont);
        pr_engine_free(e);
        ref_free(re);
    }
    if (!ran)
        skip();
}

/* Snapshots are backend-neutral: written by one backend, loaded by cpu. */
static void run_cross_snapshot(const char *backend)
{
    pr_pipeline_spec s;
    case_spec(&cases[0], &s);
    pr_engine *e = try_engine(backend, &s, 1);
    if (!e)
        skip();
    pr_engine *c = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(3, 5, ROWS, false);
    uint64_t seed = 5;
    gen(b, &seed, ROWS, 0);
    pr_out *o = tu_out(e, b), *o2 = tu_out(c, b);
    tu_process(e, b, o);
    char snap[] = "/tmp/pr_contract_XXXXXX";
    int fd = mkstemp(snap);
    close(fd);
    char err[512];
    assert_int_equal(pr_vocab_save(e, snap, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_load(c, snap, err, sizeof(err)), 0);
    gen(b, &seed, ROWS, 0);
    tu_process(e, b, o);
    tu_process(c, b, o2);
    tu_assert_same_out(o, o2);
    unlink(snap);
    pr_out_free(o);
    pr_out_free(o2);
    pr_block_free(b);
    pr_engine_free(c);
    pr_engine_free(e);
}

static void test_contract(void **state)
{
    run_backend((const char *)*state);
}
static void test_cross_snapshot(void **state)
{
    run_cross_snapshot((const char *)*state);
}

int main(void)
{
    const char *const *names = pr_engine_backends();
    size_t n = 0;
    while (names[n])
        n++;
    struct CMUnitTest *tests = calloc(2 * n, sizeof(*tests));
    char **labels = calloc(2 * n, sizeof(*labels));
    for (size_t i = 0; i < n; i++) {
        labels[2 * i] = malloc(128);
        labels[2 * i + 1] = malloc(128);
        snprintf(labels[2 * i], 128, "contract[%s]", names[i]);
        snprintf(labels[2 * i + 1], 128, "cross_snapshot[%s]", names[i]);
        tests[2 * i] =
            (struct CMUnitTest){labels[2 * i], test_contract, NULL, NULL, (void *)names[i]};
        tests[2 * i + 1] = (struct CMUnitTest){labels[2 * i + 1], test_cross_snapshot, NULL, NULL,
                                               (void *)names[i]};
    }
    int rc = _cmocka_run_group_tests("backend_contract", tests, 2 * n, NULL, NULL);
    for (size_t i = 0; i < 2 * n; i++)
        free(labels[i]);
    free(labels);
    free(tests);
    return rc;
}
