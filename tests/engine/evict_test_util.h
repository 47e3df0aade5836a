/*
 * evict_test_util.h — the bounded-vocabulary scenarios and helpers shared by
 * tests/engine/test_engine_evict.c (eviction itself) and
 * tests/vocab/test_vocab_evict_files.c (its snapshots and journal): the
 * scenario table, deterministic blocks, the trainer's shadow mapping built
 * from outputs and notices, per-block traces, one-column helpers and file
 * peeks. Header-only, like engine_test_util.h.
 */
#ifndef PR_EVICT_TEST_UTIL_H
#define PR_EVICT_TEST_UTIL_H

#include "engine_test_util.h"

#define NCOL 3
#define ROWS 512

typedef struct {
    uint64_t *val; /* [cap] value at index, valid when has[] */
    uint8_t *has;
    uint64_t cap;
} shadow_col;

typedef struct {
    pr_vocab_eviction ev;
    bool hash; /* modulus above the direct-array limit */
    uint32_t min_count;
    uint64_t capacity; /* including reserved */
    pr_vocab_profile prof;
    uint64_t ttl_s; /* ttl by event time (else ttl_records 300) */
} scen;

/* Value domain of column c: keys spread over [0, M) so that hash columns
 * really hash; draw k in [0, D) Zipf-like, key = k * STRIDE. */
#define DOMAIN 4000
#define STRIDE 1000003ULL

static inline void spec_for(pr_pipeline_spec *s, const scen *sc)
{
    uint64_t mod = sc->hash ? (1ULL << 40) : (uint64_t)DOMAIN * STRIDE;
    if (!sc->hash)
        mod = DOMAIN; /* direct: key = k */
    tu_spec(s, 1, NCOL, sc->prof, mod, true, true);
    for (int c = 0; c < NCOL; c++) {
        s->sparse[c].capacity = sc->capacity + (uint64_t)c * 7; /* differ per column */
        s->sparse[c].eviction = sc->ev;
        s->sparse[c].min_count = sc->min_count;
        s->sparse[c].ttl_records = sc->ttl_s ? 0 : 300;
        s->sparse[c].ttl_s = sc->ttl_s;
        s->sparse[c].decay_records = sc->ev == PR_EVICT_LFU ? 1000 : 0;
    }
}

static inline uint64_t key_of(const scen *sc, uint64_t k)
{
    return sc->hash ? k * STRIDE : k;
}

/* Event time of row r of block blk: 100 ms per row, every fifth row 20 s
 * late (out of order), so ttl_s 30 is about 300 lookups. */
#define T0_MS 1700000000000LL
static inline int64_t event_ms(int blk, uint32_t r)
{
    int64_t t = T0_MS + ((int64_t)blk * ROWS + r) * 100;
    return r % 5 == 3 ? t - 20000 : t;
}

/* Fill block number `blk` deterministically (event times when the block
 * has row metadata). */
static inline void fill_block(pr_block *b, const scen *sc, uint64_t seed, int blk)
{
    pr_block_reset(b);
    uint64_t st = seed * 7919 + (uint64_t)blk * 104729 + 1;
    for (uint32_t r = 0; r < ROWS; r++) {
        b->labels[r] = (int32_t)(r & 1);
        b->dense[r] = (double)r;
        if (b->event_time_ms)
            b->event_time_ms[r] = event_ms(blk, r);
        for (uint32_t c = 0; c < NCOL; c++) {
            /* a drifting hot set: new values keep arriving */
            uint64_t k = (tu_skewed(&st, DOMAIN / 4) + (uint64_t)blk * 37 * (c + 1)) % DOMAIN;
            tu_set_u64(b, c, r, key_of(sc, k));
        }
    }
    b->rows = ROWS;
}

static inline void shadow_init(shadow_col *sh, const pr_pipeline_spec *s)
{
    for (int c = 0; c < NCOL; c++) {
        sh[c].cap = s->sparse[c].capacity;
        sh[c].val = calloc(sh[c].cap, sizeof(uint64_t));
        sh[c].has = calloc(sh[c].cap, 1);
        assert_non_null(sh[c].val);
        assert_non_null(sh[c].has);
    }
}

static inline void shadow_fini(shadow_col *sh)
{
    for (int c = 0; c < NCOL; c++) {
        free(sh[c].val);
        free(sh[c].has);
    }
}

/* Apply one block's output and notices to the shadow as a trainer would,
 * checking every row; then compare with the engine's mapping. Returns the
 * number of notices applied. */
static inline uint32_t shadow_apply(shadow_col *sh, const pr_engine *e, const pr_block *b,
                                    const pr_out *o)
{
    int64_t base = pr_engine_spec(e)->profile == PR_VOCAB_DEFAULT ? 2 : 0;
    uint32_t k = 0;
    uint64_t last_number = 0;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        /* (row, col) order, numbers strictly increasing */
        if (i > 0) {
            const pr_recycled *p = &o->recycled[i - 1], *q = &o->recycled[i];
            assert_true(p->row < q->row || (p->row == q->row && p->col < q->col));
        }
        assert_true(o->recycled[i].number > last_number);
        last_number = o->recycled[i].number;
    }
    for (uint32_t r = 0; r < o->rows; r++) {
        for (; k < o->n_recycled && o->recycled[k].row <= r; k++) {
            const pr_recycled *n = &o->recycled[k];
            assert_true(n->col < NCOL);
            assert_true(n->index >= base && (uint64_t)n->index < sh[n->col].cap);
            sh[n->col].has[n->index] = 0;
        }
        for (uint32_t c = 0; c < NCOL; c++) {
            int64_t idx = pr_out_index(o, c, r);
            uint64_t key = b->sparse_u64[(size_t)c * b->cap + r];
            if (idx < base)
                continue; /* OOV / missing */
            assert_true((uint64_t)idx < sh[c].cap);
            if (sh[c].has[idx] && sh[c].val[idx] != key) {
                print_error("col %u row %u: index %" PRId64 " reused for %" PRIx64 " (was %" PRIx64
                            ") without a notice\n",
                            c, r, idx, key, sh[c].val[idx]);
                fail();
            }
            sh[c].has[idx] = 1;
            sh[c].val[idx] = key;
        }
    }
    assert_int_equal(k, o->n_recycled);
    /* The shadow is exactly the engine's mapping. */
    for (uint32_t c = 0; c < NCOL; c++) {
        uint64_t size = pr_engine_vocab_size(e, c);
        assert_true(size <= sh[c].cap); /* never above capacity */
        tu_vocab v = tu_vocab_get(e, c);
        uint64_t assigned = 0;
        for (size_t i = 0; i < v.n; i++) {
            if (v.e[i].index < 0)
                continue;
            assigned++;
            assert_true(sh[c].has[v.e[i].index]);
            assert_int_equal(sh[c].val[v.e[i].index], v.e[i].value);
        }
        uint64_t in_shadow = 0;
        for (uint64_t i = 0; i < sh[c].cap; i++)
            in_shadow += sh[c].has[i];
        assert_int_equal(in_shadow, assigned);
        assert_int_equal(assigned + (uint64_t)base, size);
        free(v.e);
    }
    return o->n_recycled;
}

static inline void run_scenario(const scen *sc, int blocks, int threads)
{
    pr_pipeline_spec s;
    spec_for(&s, sc);
    pr_engine *e = tu_engine(&s, "cpu", threads);
    pr_block *b = pr_block_new(1, NCOL, ROWS, true);
    pr_out *o = tu_out(e, b);
    shadow_col sh[NCOL];
    shadow_init(sh, &s);
    uint64_t notices = 0;
    for (int i = 0; i < blocks; i++) {
        fill_block(b, sc, 1, i);
        tu_process(e, b, o);
        notices += shadow_apply(sh, e, b, o);
    }
    assert_true(notices > 0); /* the scenario did evict */
    assert_int_equal(pr_engine_vocab_recycled_total(e), notices);
    shadow_fini(sh);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

static const scen scenarios[] = {
    {PR_EVICT_LRU, false, 1, 202, PR_VOCAB_DEFAULT, 0},
    {PR_EVICT_LRU, true, 1, 200, PR_VOCAB_DLRM, 0},
    {PR_EVICT_LFU, false, 1, 200, PR_VOCAB_DLRM, 0},
    {PR_EVICT_LFU, true, 2, 202, PR_VOCAB_DEFAULT, 0},
    {PR_EVICT_TTL, false, 1, 202, PR_VOCAB_DEFAULT, 0},
    {PR_EVICT_TTL, true, 3, 402, PR_VOCAB_DEFAULT, 0},
    {PR_EVICT_LRU, false, 2, 150, PR_VOCAB_DEFAULT, 0},
    /* ttl by event time, rows partly out of order (event_ms) */
    {PR_EVICT_TTL, false, 1, 202, PR_VOCAB_DEFAULT, 30},
    {PR_EVICT_TTL, true, 2, 302, PR_VOCAB_DEFAULT, 30},
};
#define N_SCEN (sizeof(scenarios) / sizeof(scenarios[0]))

/* Record each block's sparse output and notices. */
typedef struct {
    int64_t *idx; /* [blocks][NCOL][ROWS] */
    pr_recycled *n;
    size_t nn, ncap;
    size_t *first; /* [blocks + 1]: notices of block i are n[first[i] .. first[i+1]) */
} trace;

static inline void trace_block(trace *t, int blk, const pr_out *o)
{
    for (uint32_t c = 0; c < NCOL; c++)
        for (uint32_t r = 0; r < ROWS; r++)
            t->idx[((size_t)blk * NCOL + c) * ROWS + r] = pr_out_index(o, c, r);
    t->first[blk] = t->nn;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        if (t->nn == t->ncap) {
            t->ncap = t->ncap ? t->ncap * 2 : 256;
            t->n = realloc(t->n, t->ncap * sizeof(*t->n));
            assert_non_null(t->n);
        }
        t->n[t->nn++] = o->recycled[i];
    }
    t->first[blk + 1] = t->nn;
}

static inline trace trace_new(int blocks)
{
    trace t = {0};
    t.idx = calloc((size_t)blocks * NCOL * ROWS, sizeof(int64_t));
    t.first = calloc((size_t)blocks + 1, sizeof(size_t));
    assert_non_null(t.idx);
    assert_non_null(t.first);
    return t;
}

static inline void trace_free(trace *t)
{
    free(t->idx);
    free(t->n);
    free(t->first);
}

static inline void assert_same_block(const trace *a, const trace *b, int blk)
{
    size_t off = (size_t)blk * NCOL * ROWS;
    assert_memory_equal(a->idx + off, b->idx + off, NCOL * ROWS * sizeof(int64_t));
    size_t na = a->first[blk + 1] - a->first[blk], nb = b->first[blk + 1] - b->first[blk];
    assert_int_equal(na, nb);
    if (na)
        assert_memory_equal(a->n + a->first[blk], b->n + b->first[blk], na * sizeof(pr_recycled));
}

static inline void run_trace(const scen *sc, int threads, int blocks, trace *t)
{
    pr_pipeline_spec s;
    spec_for(&s, sc);
    pr_engine *e = tu_engine(&s, "cpu", threads);
    pr_block *b = pr_block_new(1, NCOL, ROWS, true);
    pr_out *o = tu_out(e, b);
    for (int i = 0; i < blocks; i++) {
        fill_block(b, sc, 2, i);
        tu_process(e, b, o);
        trace_block(t, i, o);
    }
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* engine.threads changes nothing: indices and notices are identical. */
/* Hand-checked policies on one column: capacity 2 indices (dlrm: 0, 1). */
static inline void one_col(pr_engine *e, pr_block *b, pr_out *o, const uint64_t *keys, uint32_t n)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < n; r++)
        tu_set_u64(b, 0, r, keys[r]);
    b->rows = n;
    tu_process(e, b, o);
}

/* Event times in whole seconds, as ms. */
#define AT(sec) ((int64_t)(sec)*1000)

/* One column, profile default, capacity 4 (indices 2 and 3), eviction ttl
 * by event time. */
static inline void ttl_s_spec(pr_pipeline_spec *s, uint64_t ttl_s)
{
    tu_spec(s, 0, 1, PR_VOCAB_DEFAULT, 100, true, true);
    s->sparse[0].capacity = 4;
    s->sparse[0].eviction = PR_EVICT_TTL;
    s->sparse[0].ttl_s = ttl_s;
}

static inline void one_col_at(pr_engine *e, pr_block *b, pr_out *o, const uint64_t *keys,
                              const int64_t *ms, uint32_t n)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < n; r++) {
        tu_set_u64(b, 0, r, keys[r]);
        b->event_time_ms[r] = ms[r];
    }
    b->rows = n;
    tu_process(e, b, o);
}

static inline int64_t last_use_ms_of(const pr_engine *e, int64_t index)
{
    tu_vocab v = tu_vocab_get(e, 0);
    int64_t ms = -1;
    for (size_t i = 0; i < v.n; i++)
        if (v.e[i].index == index)
            ms = v.e[i].last_use_ms;
    free(v.e);
    return ms;
}

static inline uint32_t file_u32_at(const char *path, long off)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint32_t v = 0;
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fread(&v, 1, 4, f), 4);
    fclose(f);
    return v;
}

static inline void file_magic(const char *path, char *magic)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 8, f), 8);
    magic[8] = 0;
    fclose(f);
}

#endif
