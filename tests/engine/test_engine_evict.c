/*
 * test_engine_evict.c — bounded vocabularies (issue 14 items 1-3): eviction
 * lru / lfu / ttl (by lookups, ttl_records, or by event time, ttl_s),
 * recycled-index notices, determinism, persistence.
 *
 * The central check is the trainer's view: a shadow mapping index -> value
 * per column, built only from the output rows and the notices (a notice at
 * row r forgets the index before row r is read). At every row the index must
 * agree with the shadow (an index reused without a notice fails), and after
 * every block the shadow must equal the engine's own mapping exactly. Values
 * are fed as uint64 below the modulus, so the test knows each row's key.
 */
#include "engine_test_util.h"
#include "pr_vocab.h"

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

static void spec_for(pr_pipeline_spec *s, const scen *sc)
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

static uint64_t key_of(const scen *sc, uint64_t k)
{
    return sc->hash ? k * STRIDE : k;
}

/* Event time of row r of block blk: 100 ms per row, every fifth row 20 s
 * late (out of order), so ttl_s 30 is about 300 lookups. */
#define T0_MS 1700000000000LL
static int64_t event_ms(int blk, uint32_t r)
{
    int64_t t = T0_MS + ((int64_t)blk * ROWS + r) * 100;
    return r % 5 == 3 ? t - 20000 : t;
}

/* Fill block number `blk` deterministically (event times when the block
 * has row metadata). */
static void fill_block(pr_block *b, const scen *sc, uint64_t seed, int blk)
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

static void shadow_init(shadow_col *sh, const pr_pipeline_spec *s)
{
    for (int c = 0; c < NCOL; c++) {
        sh[c].cap = s->sparse[c].capacity;
        sh[c].val = calloc(sh[c].cap, sizeof(uint64_t));
        sh[c].has = calloc(sh[c].cap, 1);
        assert_non_null(sh[c].val);
        assert_non_null(sh[c].has);
    }
}

static void shadow_fini(shadow_col *sh)
{
    for (int c = 0; c < NCOL; c++) {
        free(sh[c].val);
        free(sh[c].has);
    }
}

/* Apply one block's output and notices to the shadow as a trainer would,
 * checking every row; then compare with the engine's mapping. Returns the
 * number of notices applied. */
static uint32_t shadow_apply(shadow_col *sh, const pr_engine *e, const pr_block *b, const pr_out *o)
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

static void run_scenario(const scen *sc, int blocks, int threads)
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

/* Capacity is never exceeded and the notices reconstruct the mapping at
 * every block, for every policy, direct and hash tables, with admission. */
static void test_notices_reconstruct_mapping(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SCEN; i++)
        run_scenario(&scenarios[i], 40, 2);
}

/* Record each block's sparse output and notices. */
typedef struct {
    int64_t *idx; /* [blocks][NCOL][ROWS] */
    pr_recycled *n;
    size_t nn, ncap;
    size_t *first; /* [blocks + 1]: notices of block i are n[first[i] .. first[i+1]) */
} trace;

static void trace_block(trace *t, int blk, const pr_out *o)
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

static trace trace_new(int blocks)
{
    trace t = {0};
    t.idx = calloc((size_t)blocks * NCOL * ROWS, sizeof(int64_t));
    t.first = calloc((size_t)blocks + 1, sizeof(size_t));
    assert_non_null(t.idx);
    assert_non_null(t.first);
    return t;
}

static void trace_free(trace *t)
{
    free(t->idx);
    free(t->n);
    free(t->first);
}

static void assert_same_block(const trace *a, const trace *b, int blk)
{
    size_t off = (size_t)blk * NCOL * ROWS;
    assert_memory_equal(a->idx + off, b->idx + off, NCOL * ROWS * sizeof(int64_t));
    size_t na = a->first[blk + 1] - a->first[blk], nb = b->first[blk + 1] - b->first[blk];
    assert_int_equal(na, nb);
    if (na)
        assert_memory_equal(a->n + a->first[blk], b->n + b->first[blk], na * sizeof(pr_recycled));
}

static void run_trace(const scen *sc, int threads, int blocks, trace *t)
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
static void test_thread_invariance(void **state)
{
    (void)state;
    const int blocks = 30;
    for (size_t i = 0; i < N_SCEN; i++) {
        trace t1 = trace_new(blocks), t3 = trace_new(blocks);
        run_trace(&scenarios[i], 1, blocks, &t1);
        run_trace(&scenarios[i], 3, blocks, &t3);
        assert_true(t1.nn > 0);
        for (int k = 0; k < blocks; k++)
            assert_same_block(&t1, &t3, k);
        trace_free(&t1);
        trace_free(&t3);
    }
}

/* A snapshot taken after block k, loaded into a fresh engine, continues with
 * exactly the indices and notices of the engine that kept running. */
static void test_snapshot_restore_same_notices(void **state)
{
    (void)state;
    const int blocks = 30, k = 12;
    char *dir = tu_tmpdir();
    char snap[512];
    snprintf(snap, sizeof(snap), "%s/v.snap", dir);
    for (size_t i = 0; i < N_SCEN; i++) {
        const scen *sc = &scenarios[i];
        trace full = trace_new(blocks), resumed = trace_new(blocks);
        run_trace(sc, 2, blocks, &full);

        pr_pipeline_spec s;
        spec_for(&s, sc);
        pr_block *b = pr_block_new(1, NCOL, ROWS, true);
        pr_engine *e1 = tu_engine(&s, "cpu", 2);
        pr_out *o = tu_out(e1, b);
        char err[512];
        for (int j = 0; j < k; j++) {
            fill_block(b, sc, 2, j);
            tu_process(e1, b, o);
        }
        /* every notice so far delivered: nothing to announce again */
        pr_engine_vocab_notices_delivered(e1, pr_engine_vocab_recycled_total(e1) + 1);
        assert_int_equal(pr_vocab_save(e1, snap, err, sizeof(err)), 0);
        pr_engine *e2 = tu_engine(&s, "cpu", 1);
        assert_int_equal(pr_vocab_load(e2, snap, err, sizeof(err)), 0);
        tu_assert_same_vocab(e1, e2);
        assert_int_equal(pr_engine_vocab_recycled_total(e1), pr_engine_vocab_recycled_total(e2));
        pr_engine_free(e1);
        for (int j = k; j < blocks; j++) {
            fill_block(b, sc, 2, j);
            tu_process(e2, b, o);
            trace_block(&resumed, j, o);
        }
        for (int j = k; j < blocks; j++)
            assert_same_block(&full, &resumed, j);
        assert_true(full.first[blocks] > full.first[k]); /* it recycled after the restore */
        trace_free(&full);
        trace_free(&resumed);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e2);
    }
    tu_rmdir(dir);
}

/* Notices not known delivered when a snapshot is taken (their batch may be
 * lost in a crash while the snapshot already holds the recycled index) are
 * announced again after a restore: same numbers, row 0 of the first block;
 * those below the delivered floor are not. */
static void test_snapshot_keeps_undelivered_notices(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char snap[512], err[512];
    snprintf(snap, sizeof(snap), "%s/v.snap", dir);
    const scen *sc = &scenarios[0];
    pr_pipeline_spec s;
    spec_for(&s, sc);
    pr_block *b = pr_block_new(1, NCOL, ROWS, true);
    pr_engine *e1 = tu_engine(&s, "cpu", 1);
    pr_out *o = tu_out(e1, b);
    for (int j = 0; j < 12; j++) {
        fill_block(b, sc, 2, j);
        tu_process(e1, b, o);
    }
    uint64_t total = pr_engine_vocab_recycled_total(e1);
    assert_true(total > 4);
    uint64_t floor = total - 3; /* the last four were not acknowledged */
    for (int round = 0; round < 2; round++) {
        if (round == 1)
            pr_engine_vocab_notices_delivered(e1, floor);
        assert_int_equal(pr_vocab_save(e1, snap, err, sizeof(err)), 0);
        pr_engine *e2 = tu_engine(&s, "cpu", 1);
        assert_int_equal(pr_vocab_load(e2, snap, err, sizeof(err)), 0);
        fill_block(b, sc, 2, 12);
        tu_process(e2, b, o);
        /* round 0: every notice handed out is announced again, in order;
         * round 1: only those from the floor on */
        uint64_t first = round == 0 ? 1 : floor;
        uint32_t n_again = (uint32_t)(total - first + 1);
        assert_true(o->n_recycled >= n_again);
        for (uint32_t i = 0; i < n_again; i++) {
            assert_int_equal(o->recycled[i].number, first + i);
            assert_int_equal(o->recycled[i].row, 0);
        }
        for (uint32_t i = n_again; i < o->n_recycled; i++)
            assert_true(o->recycled[i].number > total);
        pr_engine_free(e2);
    }
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e1);
    tu_rmdir(dir);
}

/* Journal replay after a crash restores the exact mapping and re-announces
 * the journaled notices with their numbers (row 0 of the next block); a torn
 * tail (an unfinished block) is ignored; replaying onto a snapshot that
 * already holds the journal (crash inside a checkpoint) changes nothing. */
static void test_journal_replay_same_notices(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char snap[512], jr[512], err[512];
    snprintf(snap, sizeof(snap), "%s/v.snap", dir);
    snprintf(jr, sizeof(jr), "%s/v.journal", dir);
    for (size_t i = 0; i < N_SCEN; i++) {
        const scen *sc = &scenarios[i];
        unlink(snap);
        unlink(jr);
        pr_pipeline_spec s;
        spec_for(&s, sc);
        pr_block *b = pr_block_new(1, NCOL, ROWS, true);
        pr_engine *e1 = tu_engine(&s, "cpu", 2);
        pr_out *o = tu_out(e1, b);
        trace t = trace_new(20);
        assert_int_equal(pr_vocab_journal_open(e1, jr, err, sizeof(err)), 0);
        for (int j = 0; j < 5; j++) {
            fill_block(b, sc, 3, j);
            tu_process(e1, b, o);
        }
        /* the batches of blocks 0-4 were acknowledged before the checkpoint */
        pr_engine_vocab_notices_delivered(e1, pr_engine_vocab_recycled_total(e1) + 1);
        assert_int_equal(pr_vocab_checkpoint(e1, snap, NULL, err, sizeof(err)), 0);
        uint64_t before = pr_engine_vocab_recycled_total(e1);
        for (int j = 5; j < 15; j++) {
            fill_block(b, sc, 3, j);
            tu_process(e1, b, o);
            trace_block(&t, j, o);
        }
        size_t since = t.nn - t.first[5];
        assert_true(since > 0);
        /* crash: no snapshot; a torn half record at the end of the journal */
        FILE *f = fopen(jr, "ab");
        assert_non_null(f);
        fwrite("garbage-of-a-torn-block", 1, 23, f);
        fclose(f);

        pr_engine *e2 = tu_engine(&s, "cpu", 1);
        assert_int_equal(pr_vocab_load(e2, snap, err, sizeof(err)), 0);
        assert_int_equal(pr_engine_vocab_recycled_total(e2), before);
        assert_int_equal(pr_vocab_journal_replay(e2, jr, err, sizeof(err)), 0);
        for (uint32_t c = 0; c < NCOL; c++) { /* same mapping (usage stats may differ) */
            tu_vocab va = tu_vocab_get(e1, c), vb = tu_vocab_get(e2, c);
            size_t na = 0, nb = 0;
            while (na < va.n && va.e[na].index >= 0)
                na++;
            while (nb < vb.n && vb.e[nb].index >= 0)
                nb++;
            assert_int_equal(na, nb);
            for (size_t q = 0; q < na; q++) {
                assert_int_equal(va.e[q].index, vb.e[q].index);
                assert_int_equal(va.e[q].value, vb.e[q].value);
            }
            free(va.e);
            free(vb.e);
        }
        assert_int_equal(pr_engine_vocab_recycled_total(e2), pr_engine_vocab_recycled_total(e1));

        /* Replaying again onto a snapshot of the replayed state: idempotent. */
        char snap2[600];
        snprintf(snap2, sizeof(snap2), "%s.2", snap);
        assert_int_equal(pr_vocab_save(e2, snap2, err, sizeof(err)), 0);
        pr_engine *e3 = tu_engine(&s, "cpu", 1);
        assert_int_equal(pr_vocab_load(e3, snap2, err, sizeof(err)), 0);
        assert_int_equal(pr_vocab_journal_replay(e3, jr, err, sizeof(err)), 0);
        tu_assert_same_vocab(e2, e3);

        /* The next block re-announces exactly the journaled notices first. */
        fill_block(b, sc, 3, 15);
        pr_out *o2 = tu_out(e2, b);
        tu_process(e2, b, o2);
        assert_true(o2->n_recycled >= since);
        for (size_t q = 0; q < since; q++) {
            const pr_recycled *want = &t.n[t.first[5] + q], *got = &o2->recycled[q];
            assert_int_equal(got->number, want->number);
            assert_int_equal(got->col, want->col);
            assert_int_equal(got->index, want->index);
            assert_int_equal(got->row, 0);
        }
        /* e3 saw them in its snapshot's pending list: announced once more, same numbers */
        pr_out *o3 = tu_out(e3, b);
        tu_process(e3, b, o3);
        assert_int_equal(o3->n_recycled, o2->n_recycled);
        assert_memory_equal(o3->recycled, o2->recycled, o2->n_recycled * sizeof(pr_recycled));
        pr_out_free(o2);
        pr_out_free(o3);
        trace_free(&t);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e1);
        pr_engine_free(e2);
        pr_engine_free(e3);
        unlink(snap2);
    }
    tu_rmdir(dir);
}

/* Hand-checked policies on one column: capacity 2 indices (dlrm: 0, 1). */
static void one_col(pr_engine *e, pr_block *b, pr_out *o, const uint64_t *keys, uint32_t n)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < n; r++)
        tu_set_u64(b, 0, r, keys[r]);
    b->rows = n;
    tu_process(e, b, o);
}

static void test_policies_by_hand(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_block *b = pr_block_new(0, 1, 64, false);
    /* lru: a b a c -> c takes b's index */
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 100, true, true);
    s.sparse[0].capacity = 2;
    s.sparse[0].eviction = PR_EVICT_LRU;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_out *o = tu_out(e, b);
    one_col(e, b, o, (const uint64_t[]){10, 11, 10, 12, 11}, 5);
    assert_int_equal(pr_out_index(o, 0, 3), 1); /* 12 -> b's index 1 */
    assert_int_equal(pr_out_index(o, 0, 4), 0); /* 11 back: lru is 10 (row 2) -> index 0 */
    assert_int_equal(o->n_recycled, 2);
    assert_int_equal(o->recycled[0].row, 3);
    assert_int_equal(o->recycled[0].index, 1);
    assert_int_equal(o->recycled[0].number, 1);
    assert_int_equal(o->recycled[1].row, 4);
    assert_int_equal(o->recycled[1].index, 0);
    pr_out_free(o);
    pr_engine_free(e);
    /* lfu: a a b c -> c takes b's index (used once), then d takes c's */
    s.sparse[0].eviction = PR_EVICT_LFU;
    e = tu_engine(&s, "cpu", 1);
    o = tu_out(e, b);
    one_col(e, b, o, (const uint64_t[]){10, 10, 11, 12, 13, 10}, 6);
    assert_int_equal(pr_out_index(o, 0, 3), 1);
    assert_int_equal(pr_out_index(o, 0, 4), 1);
    assert_int_equal(pr_out_index(o, 0, 5), 0); /* 10 kept its index */
    assert_int_equal(o->n_recycled, 2);
    pr_out_free(o);
    pr_engine_free(e);
    /* ttl 3, default profile (indices 2, 3): a b c -> c OOV (nothing 3 old),
     * d one lookup later: a expired -> d takes a's index 2 */
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 100, true, true);
    s.sparse[0].capacity = 4;
    s.sparse[0].eviction = PR_EVICT_TTL;
    s.sparse[0].ttl_records = 3;
    e = tu_engine(&s, "cpu", 1);
    o = tu_out(e, b);
    one_col(e, b, o, (const uint64_t[]){10, 11, 12, 13}, 4);
    assert_int_equal(pr_out_index(o, 0, 0), 2);
    assert_int_equal(pr_out_index(o, 0, 1), 3);
    assert_int_equal(pr_out_index(o, 0, 2), PR_INDEX_OOV);
    assert_int_equal(pr_out_index(o, 0, 3), 2);
    assert_int_equal(o->n_recycled, 1);
    assert_int_equal(o->recycled[0].row, 3);
    assert_int_equal(pr_engine_vocab_size(e, 0), 4);
    pr_out_free(o);
    pr_engine_free(e);
    pr_block_free(b);
}

/* ---------------------------------------------------------------- ttl by event time */

/* Event times in whole seconds, as ms. */
#define AT(sec) ((int64_t)(sec)*1000)

/* One column, profile default, capacity 4 (indices 2 and 3), eviction ttl
 * by event time. */
static void ttl_s_spec(pr_pipeline_spec *s, uint64_t ttl_s)
{
    tu_spec(s, 0, 1, PR_VOCAB_DEFAULT, 100, true, true);
    s->sparse[0].capacity = 4;
    s->sparse[0].eviction = PR_EVICT_TTL;
    s->sparse[0].ttl_s = ttl_s;
}

static void one_col_at(pr_engine *e, pr_block *b, pr_out *o, const uint64_t *keys,
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

static int64_t last_use_ms_of(const pr_engine *e, int64_t index)
{
    tu_vocab v = tu_vocab_get(e, 0);
    int64_t ms = -1;
    for (size_t i = 0; i < v.n; i++)
        if (v.e[i].index == index)
            ms = v.e[i].last_use_ms;
    free(v.e);
    return ms;
}

/* A value idle for less than ttl_s of event time stays, one idle for
 * ttl_s or more goes; the number of lookups in between does not matter. */
static void test_ttl_s_threshold(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    ttl_s_spec(&s, 10);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(0, 1, 128, true);
    pr_out *o = tu_out(e, b);
    uint64_t keys[66];
    int64_t ms[66];
    keys[0] = 10, ms[0] = AT(1000);   /* -> 2 */
    keys[1] = 11, ms[1] = AT(1001);   /* -> 3 */
    for (uint32_t r = 2; r < 62; r++) /* 60 lookups of 11 within 6 s */
        keys[r] = 11, ms[r] = AT(1001) + (r - 2) * 100;
    keys[62] = 12, ms[62] = AT(1010) - 1;   /* 10 idle 9.999 s: OOV */
    keys[63] = 12, ms[63] = AT(1010);       /* 10 idle 10 s: evicted, 12 -> 2 */
    keys[64] = 13, ms[64] = AT(1016);       /* 11 idle 9.1 s (last 1006.9): OOV */
    keys[65] = 13, ms[65] = AT(1016) + 900; /* 11 idle 10 s: evicted, 13 -> 3 */
    one_col_at(e, b, o, keys, ms, 66);
    assert_int_equal(pr_out_index(o, 0, 0), 2);
    assert_int_equal(pr_out_index(o, 0, 1), 3);
    for (uint32_t r = 2; r < 62; r++)
        assert_int_equal(pr_out_index(o, 0, r), 3);
    assert_int_equal(pr_out_index(o, 0, 62), PR_INDEX_OOV);
    assert_int_equal(pr_out_index(o, 0, 63), 2);
    assert_int_equal(pr_out_index(o, 0, 64), PR_INDEX_OOV);
    assert_int_equal(pr_out_index(o, 0, 65), 3);
    assert_int_equal(o->n_recycled, 2);
    assert_int_equal(o->recycled[0].row, 63);
    assert_int_equal(o->recycled[0].index, 2);
    assert_int_equal(o->recycled[1].row, 65);
    assert_int_equal(o->recycled[1].index, 3);
    /* the event clock at the last lookup is what vocab_read reports */
    assert_int_equal(last_use_ms_of(e, 2), AT(1010));
    assert_int_equal(last_use_ms_of(e, 3), AT(1016) + 900);
    pr_out_free(o);
    pr_engine_free(e);

    /* ttl_records 3 on the same rows would have evicted 10 long before */
    s.sparse[0].ttl_s = 0;
    s.sparse[0].ttl_records = 3;
    e = tu_engine(&s, "cpu", 1);
    o = tu_out(e, b);
    one_col_at(e, b, o, keys, ms, 66);
    assert_int_equal(pr_out_index(o, 0, 62), 2);
    pr_out_free(o);
    pr_engine_free(e);
    pr_block_free(b);
}

/* Out-of-order event times: "now" is the newest event time the column has
 * seen, and a late row's lookup counts as a use now, not in the past. */
static void test_ttl_s_out_of_order(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    ttl_s_spec(&s, 10);
    pr_engine *e = tu_engine(&s, "cpu", 2);
    pr_block *b = pr_block_new(0, 1, 64, true);
    pr_out *o = tu_out(e, b);
    one_col_at(e, b, o, (const uint64_t[]){10, 11, 12, 11, 12, 13, 13},
               (const int64_t[]){AT(1000), AT(1030),
                                 AT(1005),  /* late: the clock stays 1030, 10 idle 30 s */
                                 AT(990),   /* late use of 11: stamped 1030 */
                                 AT(1031),  /* 12 used: 11 is least recent */
                                 AT(1035),  /* 11 idle 5 s (45 s by its own late time) */
                                 AT(1040)}, /* 11 idle 10 s */
               7);
    assert_int_equal(pr_out_index(o, 0, 0), 2);
    assert_int_equal(pr_out_index(o, 0, 1), 3);
    assert_int_equal(pr_out_index(o, 0, 2), 2); /* 10 evicted for 12 */
    assert_int_equal(pr_out_index(o, 0, 3), 3);
    assert_int_equal(pr_out_index(o, 0, 4), 2);
    assert_int_equal(pr_out_index(o, 0, 5), PR_INDEX_OOV);
    assert_int_equal(pr_out_index(o, 0, 6), 3); /* 11 evicted for 13 */
    assert_int_equal(o->n_recycled, 2);
    assert_int_equal(o->recycled[0].row, 2);
    assert_int_equal(o->recycled[1].row, 6);
    pr_out_free(o);
    pr_engine_free(e);
    pr_block_free(b);
}

static uint32_t file_u32_at(const char *path, long off)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint32_t v = 0;
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fread(&v, 1, 4, f), 4);
    fclose(f);
    return v;
}

static void file_magic(const char *path, char *magic)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 8, f), 8);
    magic[8] = 0;
    fclose(f);
}

/* The event clock and each value's last-use event time survive a restart:
 * a snapshot load and a journal replay continue with exactly the evictions
 * of the engine that kept running. Without them the first late row below
 * (900 s, after a clock of 1020 s) would not evict, and 12 at 1025 s would
 * find 11 long expired. */
static void test_ttl_s_restart(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char snap0[512], snap1[512], jr[512], err[512], magic[9];
    snprintf(snap0, sizeof(snap0), "%s/start.snap", dir);
    snprintf(snap1, sizeof(snap1), "%s/v.snap", dir);
    snprintf(jr, sizeof(jr), "%s/v.journal", dir);
    pr_pipeline_spec s;
    ttl_s_spec(&s, 10);
    pr_block *b = pr_block_new(0, 1, 64, true);
    pr_engine *e1 = tu_engine(&s, "cpu", 1);
    pr_out *o1 = tu_out(e1, b);
    assert_int_equal(pr_vocab_journal_open(e1, jr, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_checkpoint(e1, snap0, NULL, err, sizeof(err)), 0);
    one_col_at(e1, b, o1, (const uint64_t[]){10, 11}, (const int64_t[]){AT(1000), AT(1020)}, 2);
    assert_int_equal(pr_vocab_save(e1, snap1, err, sizeof(err)), 0);
    assert_int_equal(file_u32_at(snap1, 8), 5);  /* the one snapshot version */
    assert_int_equal(file_u32_at(snap1, 24), 3); /* fields: clocks and event clocks */
    file_magic(jr, magic);
    assert_string_equal(magic, "PRVJRNL4");   /* the one journal version */
    assert_int_equal(file_u32_at(jr, 20), 3); /* fields: eviction, event times */

    pr_engine *e2 = tu_engine(&s, "cpu", 1); /* from the snapshot */
    assert_int_equal(pr_vocab_load(e2, snap1, err, sizeof(err)), 0);
    pr_engine *e3 = tu_engine(&s, "cpu", 2); /* from the empty snapshot + the journal */
    assert_int_equal(pr_vocab_load(e3, snap0, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_journal_replay(e3, jr, err, sizeof(err)), 0);
    for (int64_t i = 2; i <= 3; i++) {
        assert_int_equal(last_use_ms_of(e2, i), last_use_ms_of(e1, i));
        assert_int_equal(last_use_ms_of(e3, i), last_use_ms_of(e1, i));
    }
    pr_out *o2 = tu_out(e2, b), *o3 = tu_out(e3, b);
    const uint64_t keys[] = {12, 13, 13};
    const int64_t ms[] = {AT(900), AT(1025), AT(1030)};
    one_col_at(e1, b, o1, keys, ms, 3);
    one_col_at(e2, b, o2, keys, ms, 3);
    one_col_at(e3, b, o3, keys, ms, 3);
    assert_int_equal(pr_out_index(o1, 0, 0), 2);            /* clock 1020: 10 idle 20 s */
    assert_int_equal(pr_out_index(o1, 0, 1), PR_INDEX_OOV); /* 11 idle 5 s */
    assert_int_equal(pr_out_index(o1, 0, 2), 3);            /* 11 idle 10 s */
    assert_int_equal(o1->n_recycled, 2);
    tu_assert_same_out(o1, o2);
    tu_assert_same_out(o1, o3);
    assert_int_equal(o2->n_recycled, o1->n_recycled);
    assert_memory_equal(o2->recycled, o1->recycled, o1->n_recycled * sizeof(pr_recycled));
    /* e3 first re-announces nothing (nothing was recycled before the crash) */
    assert_int_equal(o3->n_recycled, o1->n_recycled);
    assert_memory_equal(o3->recycled, o1->recycled, o1->n_recycled * sizeof(pr_recycled));
    tu_assert_same_vocab(e1, e2);
    tu_assert_same_vocab(e1, e3);
    pr_out_free(o1);
    pr_out_free(o2);
    pr_out_free(o3);
    pr_engine_free(e1);
    pr_engine_free(e2);
    pr_engine_free(e3);
    pr_block_free(b);
    tu_rmdir(dir);
}

/* A snapshot or journal written under another ttl (or ttl kind) does not
 * load: the fingerprint covers ttl_s; pipelines without ttl_s keep writing
 * snapshot version 3 and journal PRVJRNL2. */
static void test_ttl_s_files_refused(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char snap[512], jr[512], err[512], magic[9];
    snprintf(snap, sizeof(snap), "%s/v.snap", dir);
    snprintf(jr, sizeof(jr), "%s/v.journal", dir);
    pr_pipeline_spec s10, s20, srec;
    ttl_s_spec(&s10, 10);
    ttl_s_spec(&s20, 20);
    ttl_s_spec(&srec, 0);
    srec.sparse[0].ttl_records = 10;
    pr_block *b = pr_block_new(0, 1, 64, true);
    pr_engine *e = tu_engine(&s10, "cpu", 1);
    pr_out *o = tu_out(e, b);
    assert_int_equal(pr_vocab_journal_open(e, jr, err, sizeof(err)), 0);
    one_col_at(e, b, o, (const uint64_t[]){10}, (const int64_t[]){AT(1000)}, 1);
    assert_int_equal(pr_vocab_save(e, snap, err, sizeof(err)), 0);
    pr_out_free(o);
    pr_engine_free(e);

    e = tu_engine(&s20, "cpu", 1);
    assert_int_equal(pr_vocab_load(e, snap, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "different pipeline spec"));
    assert_non_null(strstr(err, "ttl_s"));
    assert_int_equal(pr_vocab_journal_replay(e, jr, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "different pipeline spec"));
    assert_int_equal(pr_vocab_journal_open(e, jr, err, sizeof(err)), PR_EINVAL);
    pr_engine_free(e);

    e = tu_engine(&srec, "cpu", 1);
    assert_int_equal(pr_vocab_load(e, snap, err, sizeof(err)), PR_EINVAL);
    assert_int_equal(pr_vocab_journal_replay(e, jr, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "by event time (ttl_s)"));
    /* ttl_records: the formats of before */
    char snap2[600], jr2[600];
    snprintf(snap2, sizeof(snap2), "%s.rec", snap);
    snprintf(jr2, sizeof(jr2), "%s.rec", jr);
    assert_int_equal(pr_vocab_journal_open(e, jr2, err, sizeof(err)), 0);
    o = tu_out(e, b);
    one_col_at(e, b, o, (const uint64_t[]){10}, (const int64_t[]){0}, 1); /* no time needed */
    assert_int_equal(pr_vocab_save(e, snap2, err, sizeof(err)), 0);
    assert_int_equal(file_u32_at(snap2, 8), 5);
    assert_int_equal(file_u32_at(snap2, 24), 1); /* fields: clocks, no event clocks */
    file_magic(jr2, magic);
    assert_string_equal(magic, "PRVJRNL4");
    assert_int_equal(file_u32_at(jr2, 20), 1); /* fields: eviction, no event times */
    pr_out_free(o);
    pr_engine_free(e);
    e = tu_engine(&s10, "cpu", 1);
    assert_int_equal(pr_vocab_journal_replay(e, jr2, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "eviction by lookups"));
    pr_engine_free(e);
    pr_block_free(b);
    tu_rmdir(dir);
}

/* ttl_s needs every row's event time: a block without them is refused
 * before anything changes (offline files have none). */
static void test_ttl_s_needs_event_times(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512];
    ttl_s_spec(&s, 10);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_block *nometa = pr_block_new(0, 1, 64, false);
    pr_block *b = pr_block_new(0, 1, 64, true);
    pr_out *o = tu_out(e, b);
    tu_set_u64(nometa, 0, 0, 10);
    nometa->rows = 1;
    assert_int_equal(pr_engine_process(e, nometa, o, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "ttl_s"));
    assert_non_null(strstr(err, "no row metadata"));
    pr_block_reset(b);
    tu_set_u64(b, 0, 0, 10);
    tu_set_u64(b, 0, 1, 11);
    b->event_time_ms[0] = AT(1000);
    b->event_time_ms[1] = 0; /* what piperec process leaves there */
    b->rows = 2;
    assert_int_equal(pr_engine_process(e, b, o, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "block row 1"));
    assert_non_null(strstr(err, "ttl_records"));
    assert_int_equal(pr_engine_vocab_size(e, 0), 2); /* row 0 did not go in either */
    b->event_time_ms[1] = AT(1001);
    tu_process(e, b, o);
    assert_int_equal(pr_engine_vocab_size(e, 0), 4);
    pr_out_free(o);
    pr_block_free(b);
    pr_block_free(nometa);
    pr_engine_free(e);
}

/* Exactly one of ttl_records and ttl_s with eviction ttl; ttl_s only with
 * eviction ttl; each refusal names its key. */
static void test_ttl_s_spec_errors(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512];
    ttl_s_spec(&s, 60);
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), 0);
    s.sparse[0].ttl_records = 100;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "sparse.C1.ttl_s"));
    assert_non_null(strstr(err, "not both"));
    s.sparse[0].ttl_records = 0;
    s.sparse[0].ttl_s = 0;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "ttl_records > 0"));
    assert_non_null(strstr(err, "ttl_s > 0"));
    s.sparse[0].ttl_s = (uint64_t)INT64_MAX / 1000 + 1;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "ttl_s: at most"));
    s.sparse[0].ttl_s = 60;
    for (int ev = PR_EVICT_NONE; ev <= PR_EVICT_LFU; ev++) {
        s.sparse[0].eviction = (pr_vocab_eviction)ev;
        assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
        assert_non_null(strstr(err, "sparse.C1.ttl_s"));
        assert_non_null(strstr(err, "needs eviction ttl"));
    }
    s.sparse[0].eviction = PR_EVICT_TTL;
    s.profile = PR_VOCAB_DLRM;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "profile default"));
    s.profile = PR_VOCAB_DEFAULT;
    /* hls-sim: no eviction at all, said so */
    pr_engine_opts o = {.backend = "hls-sim", .threads = 1};
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "eviction"));
}

/* Settings that cannot work are refused with a reason; eviction none keeps
 * the old fingerprint (old snapshots and journals still load). */
static void test_spec_errors(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512];
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 100, true, true);
    s.sparse[0].eviction = PR_EVICT_LRU;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "capacity"));
    s.sparse[0].capacity = 10;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), 0);
    s.sparse[0].eviction = PR_EVICT_TTL;
    s.sparse[0].ttl_records = 5;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "profile default"));
    s.profile = PR_VOCAB_DEFAULT;
    s.sparse[0].ttl_records = 0;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "ttl_records"));
    s.sparse[0].ttl_records = 5;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), 0);
    s.count_mode = PR_COUNT_TWO_PASS;
    assert_int_equal(pr_pipeline_spec_validate(&s, err, sizeof(err)), PR_EINVAL);
    s.count_mode = PR_COUNT_STREAMING;

    /* hls-sim: not supported, said so */
    pr_engine_opts o = {.backend = "hls-sim", .threads = 1};
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "eviction"));
    /* shared vocabulary: with eviction under profile default and ttl_records
     * (the refusals are in tests/vocab/test_vocab_shared_evict.c) */
    pr_engine *e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    pr_engine_free(e);

    /* none: the one snapshot version, without eviction fields */
    char *dir = tu_tmpdir();
    char snap[512];
    snprintf(snap, sizeof(snap), "%s/v.snap", dir);
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 100, true, true);
    e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_vocab_save(e, snap, err, sizeof(err)), 0);
    FILE *f = fopen(snap, "rb");
    unsigned char hdr[12];
    assert_int_equal(fread(hdr, 1, 12, f), 12);
    fclose(f);
    assert_int_equal(hdr[8], 5);
    assert_int_equal(file_u32_at(snap, 24), 0);
    /* ... and an evicting engine refuses it (different meaning) */
    s.sparse[0].capacity = 10;
    s.sparse[0].eviction = PR_EVICT_LRU;
    pr_engine *e2 = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_vocab_load(e2, snap, err, sizeof(err)), PR_EINVAL);
    pr_engine_free(e2);
    pr_engine_free(e);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policies_by_hand),
        cmocka_unit_test(test_notices_reconstruct_mapping),
        cmocka_unit_test(test_thread_invariance),
        cmocka_unit_test(test_snapshot_restore_same_notices),
        cmocka_unit_test(test_snapshot_keeps_undelivered_notices),
        cmocka_unit_test(test_journal_replay_same_notices),
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_ttl_s_threshold),
        cmocka_unit_test(test_ttl_s_out_of_order),
        cmocka_unit_test(test_ttl_s_restart),
        cmocka_unit_test(test_ttl_s_files_refused),
        cmocka_unit_test(test_ttl_s_needs_event_times),
        cmocka_unit_test(test_ttl_s_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
