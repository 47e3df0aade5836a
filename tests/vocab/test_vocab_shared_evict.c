/*
 * test_vocab_shared_evict.c — a shared vocabulary that evicts (pr_engine.h,
 * "shared vocabulary"): replicas agree on every eviction through one ordered
 * log of proposals (pr_engine_vocab_apply) and usage (pr_engine_vocab_touch).
 *
 * Proves: two replicas fed alternate blocks of one stream end with the same
 * vocabulary, the same clocks and statistics (byte-identical snapshots) and
 * the same recycled-index notices (number, col, index, in order) for lru,
 * lfu with decay and ttl_records, direct and hash tables, whatever their
 * thread counts; replaying each replica's notices over its own outputs gives
 * a consistent mapping; frozen lookups change nothing but the pending usage;
 * apply-made notices keep apply order across columns; touch steers the
 * victim; tagged snapshots carry unannounced notices; dlrm and ttl_s are
 * refused with a reason.
 */
#include "engine_test_util.h"
#include "pr_vocab.h"

#define SE_CAP  10 /* per evicting column: 8 slots under profile default */
#define SE_ROWS 16 /* rows per block */

typedef struct {
    bool usage; /* false: a proposal (apply), true: usage (touch) */
    uint32_t col;
    uint64_t key;
    uint32_t count;
} se_rec;

typedef struct {
    se_rec *r;
    size_t n, cap;
} se_log;

static void se_push(se_log *l, bool usage, uint32_t col, uint64_t key, uint32_t count)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->r = realloc(l->r, l->cap * sizeof(*l->r));
        assert_non_null(l->r);
    }
    l->r[l->n++] = (se_rec){usage, col, key, count};
}

/* A block's misses, deduplicated per (col, key) with their occurrences. */
static int se_miss_cb(uint32_t col, uint64_t key, void *opaque)
{
    se_log *m = opaque;
    for (size_t i = 0; i < m->n; i++)
        if (m->r[i].col == col && m->r[i].key == key) {
            m->r[i].count++;
            return 0;
        }
    se_push(m, false, col, key, 1);
    return 0;
}

static int se_usage_cb(uint32_t col, uint64_t key, uint32_t count, void *opaque)
{
    se_push(opaque, true, col, key, count);
    return 0;
}

/* A replica: its engine, its log position, the notices of all its outputs,
 * and the mapping its notices and outputs imply (index -> value per column). */
#define SE_NONE UINT64_MAX
typedef struct {
    pr_engine *e;
    size_t applied;
    pr_recycled *notes;
    size_t n_notes, notes_cap;
    uint64_t *map; /* [n_sparse][map_cap] */
    uint64_t map_cap;
    uint32_t rounds_max;
} se_replica;

static void se_replica_init(se_replica *r, const pr_pipeline_spec *s, int threads)
{
    memset(r, 0, sizeof(*r));
    char err[256];
    r->e = tu_engine(s, "cpu", threads);
    assert_int_equal(pr_engine_vocab_set_shared(r->e, true, err, sizeof(err)), 0);
    r->map_cap = 0;
    for (uint32_t c = 0; c < s->n_sparse; c++)
        if (s->sparse[c].capacity > r->map_cap)
            r->map_cap = s->sparse[c].capacity;
    r->map = malloc(s->n_sparse * r->map_cap * sizeof(*r->map));
    assert_non_null(r->map);
    for (size_t i = 0; i < s->n_sparse * r->map_cap; i++)
        r->map[i] = SE_NONE;
}

static void se_replica_free(se_replica *r)
{
    pr_engine_free(r->e);
    free(r->notes);
    free(r->map);
}

static void se_catch_up(se_replica *r, const se_log *log)
{
    char err[256];
    for (; r->applied < log->n; r->applied++) {
        const se_rec *x = &log->r[r->applied];
        int64_t idx;
        int rc = x->usage ? pr_engine_vocab_touch(r->e, x->col, x->key, x->count, err, sizeof(err))
                          : pr_engine_vocab_apply(r->e, x->col, x->key, x->count, &idx, err,
                                                  sizeof(err));
        if (rc)
            print_error("%s: %s\n", x->usage ? "touch" : "apply", err);
        assert_int_equal(rc, 0);
    }
}

/* Key of (col, row) after Hex2Int and Modulus, as the test wrote it. */
static uint64_t se_key(const pr_block *b, const pr_pipeline_spec *s, uint32_t c, uint32_t r)
{
    uint64_t v = b->sparse_u64[(size_t)c * b->cap + r];
    return pr_spec_has_op(s, PR_OP_MODULUS) ? v % s->sparse[c].modulus : v;
}

/* Record an output's notices and check its rows against the mapping: between
 * two notices of an index, every row using it holds one value. */
static void se_check_out(se_replica *r, const pr_block *b, const pr_out *o)
{
    const pr_pipeline_spec *s = pr_engine_spec(r->e);
    uint32_t k = 0;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        if (r->n_notes == r->notes_cap) {
            r->notes_cap = r->notes_cap ? r->notes_cap * 2 : 256;
            r->notes = realloc(r->notes, r->notes_cap * sizeof(*r->notes));
            assert_non_null(r->notes);
        }
        r->notes[r->n_notes++] = o->recycled[i];
        if (i)
            assert_true(o->recycled[i].row >= o->recycled[i - 1].row);
    }
    for (uint32_t row = 0; row < o->rows; row++) {
        for (; k < o->n_recycled && o->recycled[k].row == row; k++) {
            assert_true(o->recycled[k].index >= 2);
            r->map[o->recycled[k].col * r->map_cap + (uint64_t)o->recycled[k].index] = SE_NONE;
        }
        for (uint32_t c = 0; c < o->n_sparse; c++) {
            int64_t idx = pr_out_index(o, c, row);
            uint64_t cap = s->sparse[c].capacity; /* set for every column here */
            assert_true(idx >= 0 && (uint64_t)idx < cap);
            if (idx < 2)
                continue;
            uint64_t *m = &r->map[c * r->map_cap + (uint64_t)idx];
            uint64_t v = se_key(b, s, c, row);
            if (*m == SE_NONE)
                *m = v;
            else if (*m != v) {
                print_error("col %u index %" PRId64 ": value %" PRIx64 " then %" PRIx64
                            " with no notice between\n",
                            c, idx, *m, v);
                fail();
            }
        }
    }
    for (; k < o->n_recycled; k++) { /* an empty block still announces */
        assert_int_equal(o->rows, 0);
        r->map[o->recycled[k].col * r->map_cap + (uint64_t)o->recycled[k].index] = SE_NONE;
    }
}

/* One block through a replica, as a vocablog driver would: propose what it
 * misses and apply the log until nothing is missing (after 3 rounds, let the
 * rest map to OOV), process, then put the block's usage in the log. */
static void se_step(se_replica *r, se_log *log, const pr_block *b, pr_out *o)
{
    char err[256];
    bool oov = false;
    uint32_t round = 0;
    for (;; round++) {
        se_log m = {0};
        assert_int_equal(pr_engine_vocab_misses(r->e, b, se_miss_cb, &m, err, sizeof(err)), 0);
        size_t n = m.n;
        for (size_t i = 0; i < n; i++)
            se_push(log, false, m.r[i].col, m.r[i].key, m.r[i].count);
        free(m.r);
        if (!n)
            break;
        if (round == 3) {
            assert_int_equal(pr_engine_vocab_set_undecided_oov(r->e, true, err, sizeof(err)), 0);
            oov = true;
            break;
        }
        se_catch_up(r, log);
    }
    if (round > r->rounds_max)
        r->rounds_max = round;
    tu_process(r->e, b, o);
    if (oov)
        assert_int_equal(pr_engine_vocab_set_undecided_oov(r->e, false, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_drain_usage(r->e, se_usage_cb, log), 0);
    se_check_out(r, b, o);
}

/* Block k of a deterministic stream: skewed values per column, some missing. */
static void se_fill(pr_block *b, const pr_pipeline_spec *s, uint64_t k, uint64_t domain)
{
    pr_block_reset(b);
    uint64_t st = k * 7919 + 17;
    for (uint32_t c = 0; c < b->n_sparse; c++)
        b->sparse_enc[c] = PR_SPARSE_U64;
    for (uint32_t r = 0; r < SE_ROWS; r++) {
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            if (tu_rand(&st) % 23 == 0) {
                tu_set_u64(b, c, r, 0);
                pr_bit_set(b->sparse_missing + c * pr_bitmap_words(b->cap), r);
                continue;
            }
            uint64_t v = tu_skewed(&st, domain) * 0x10001 + c;
            tu_set_u64(b, c, r, pr_spec_has_op(s, PR_OP_MODULUS) ? v % s->sparse[c].modulus : v);
        }
        b->rows++;
    }
}

static void se_assert_same_state(se_replica *a, se_replica *b)
{
    tu_assert_same_vocab(a->e, b->e);
    uint32_t ns = pr_engine_spec(a->e)->n_sparse;
    for (uint32_t c = 0; c < ns; c++) {
        tu_vocab va = tu_vocab_get(a->e, c), vb = tu_vocab_get(b->e, c);
        for (size_t i = 0; i < va.n; i++)
            assert_int_equal(va.e[i].last_use, vb.e[i].last_use);
        free(va.e);
        free(vb.e);
    }
    /* clocks, statistics, notice counters: the snapshots are byte-identical */
    char *dir = tu_tmpdir();
    char pa[512], pb[512], err[256];
    snprintf(pa, sizeof(pa), "%s/a.snap", dir);
    snprintf(pb, sizeof(pb), "%s/b.snap", dir);
    assert_int_equal(pr_vocab_save(a->e, pa, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_save(b->e, pb, err, sizeof(err)), 0);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", pa, pb);
    assert_int_equal(system(cmd), 0);
    tu_rmdir(dir);
}

/* Two replicas, alternate blocks, one log: same vocabulary, same notices. */
static void se_two_replicas(pr_vocab_eviction ev, bool mod, uint32_t min_count, uint64_t domain)
{
    pr_pipeline_spec s;
    tu_spec(&s, 0, 3, PR_VOCAB_DEFAULT, 4096, mod, true);
    for (uint32_t c = 0; c < 2; c++) {
        s.sparse[c].eviction = ev;
        s.sparse[c].capacity = SE_CAP;
        if (ev == PR_EVICT_LFU)
            s.sparse[c].decay_records = 7;
        if (ev == PR_EVICT_TTL)
            s.sparse[c].ttl_records = 12;
    }
    s.sparse[1].min_count = min_count;
    s.sparse[2].capacity = 4098; /* column 2 does not evict */
    se_replica a, b;
    se_replica_init(&a, &s, 1);
    se_replica_init(&b, &s, 3);
    se_log log = {0};
    pr_block *blk = pr_block_new(0, 3, 64, false);
    pr_out *o = tu_out(a.e, blk);
    for (uint64_t k = 0; k < 240; k++) {
        se_replica *r = k % 2 ? &b : &a;
        se_fill(blk, &s, k, domain);
        se_catch_up(r, &log);
        se_step(r, &log, blk, o);
    }
    /* both reach the end of the log; an empty block announces the rest */
    pr_block_reset(blk);
    for (int i = 0; i < 2; i++) {
        se_replica *r = i ? &b : &a;
        se_catch_up(r, &log);
        tu_process(r->e, blk, o);
        se_check_out(r, blk, o);
        assert_int_equal(pr_engine_vocab_notices_pending(r->e), 0);
    }
    assert_int_equal(a.n_notes, b.n_notes);
    assert_true(a.n_notes > 5); /* the tables really were full */
    for (size_t i = 0; i < a.n_notes; i++) {
        assert_int_equal(a.notes[i].number, i + 1);
        assert_int_equal(b.notes[i].number, i + 1);
        assert_int_equal(a.notes[i].col, b.notes[i].col);
        assert_int_equal(a.notes[i].index, b.notes[i].index);
        assert_true(a.notes[i].col < 2);
    }
    assert_int_equal(pr_engine_vocab_recycled_total(a.e), a.n_notes);
    assert_int_equal(pr_engine_vocab_recycled_total(b.e), b.n_notes);
    for (uint32_t c = 0; c < 2; c++)
        assert_true(pr_engine_vocab_size(a.e, c) <= SE_CAP);
    se_assert_same_state(&a, &b);
    /* the driver did need more than one round somewhere, and OOV fallbacks */
    pr_engine_stats sa, sb;
    pr_engine_get_stats(a.e, &sa);
    pr_engine_get_stats(b.e, &sb);
    print_message("eviction %s %s min_count %u domain %" PRIu64
                  ": %zu notices, %zu log records, max rounds %u/%u, "
                  "undecided_oov %" PRIu64 "/%" PRIu64 "\n",
                  pr_vocab_eviction_names[ev], mod ? "direct" : "hash", min_count, domain,
                  a.n_notes, log.n, a.rounds_max, b.rounds_max, sa.undecided_oov, sb.undecided_oov);
    pr_out_free(o);
    pr_block_free(blk);
    free(log.r);
    se_replica_free(&a);
    se_replica_free(&b);
}

/* Each policy under thrashing (tables far too small) and mostly fitting,
 * direct and hash tables, min_count 1 and 2. */
static void se_two_replicas_all(pr_vocab_eviction ev)
{
    se_two_replicas(ev, true, 1, 40);
    se_two_replicas(ev, false, 2, 40);
    se_two_replicas(ev, true, 2, 14);
    se_two_replicas(ev, false, 1, 14);
}

static void test_two_replicas_lru(void **state)
{
    (void)state;
    se_two_replicas_all(PR_EVICT_LRU);
}

static void test_two_replicas_lfu(void **state)
{
    (void)state;
    se_two_replicas_all(PR_EVICT_LFU);
}

static void test_two_replicas_ttl(void **state)
{
    (void)state;
    se_two_replicas_all(PR_EVICT_TTL);
}

static void se_spec1(pr_pipeline_spec *s, uint16_t n_sparse, pr_vocab_eviction ev)
{
    tu_spec(s, 0, n_sparse, PR_VOCAB_DEFAULT, 1000, true, true);
    for (uint32_t c = 0; c < n_sparse; c++) {
        s->sparse[c].eviction = ev;
        s->sparse[c].capacity = SE_CAP;
        if (ev == PR_EVICT_TTL)
            s->sparse[c].ttl_records = 4;
    }
}

static void se_block_values(pr_block *b, const uint64_t *v, uint32_t n)
{
    pr_block_reset(b);
    for (uint32_t c = 0; c < b->n_sparse; c++)
        b->sparse_enc[c] = PR_SPARSE_U64;
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0; c < b->n_sparse; c++)
            tu_set_u64(b, c, r, v[r]);
    b->rows = n;
}

/* A cpu engine with `threads` workers in shared mode (as a vocab log runs it). */
static pr_engine *se_shared(const pr_pipeline_spec *s, int threads)
{
    char err[256];
    pr_engine *e = tu_engine(s, "cpu", threads);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    return e;
}

static void se_apply(pr_engine *e, uint32_t col, uint64_t key, int64_t want)
{
    char err[256];
    int64_t idx = -2;
    int rc = pr_engine_vocab_apply(e, col, key, 1, &idx, err, sizeof(err));
    if (rc)
        print_error("apply: %s\n", err);
    assert_int_equal(rc, 0);
    if (want != -2)
        assert_int_equal(idx, want);
}

static int se_usage_list_cb(uint32_t col, uint64_t key, uint32_t count, void *opaque)
{
    se_push(opaque, true, col, key, count);
    return 0;
}

/* Frozen lookups change nothing but the pending usage: the same block twice
 * gives the same output and the same state; undecided values fail the block
 * (even in a full table) unless undecided_oov, which counts them. */
static void test_frozen_lookups_keep_state(void **state)
{
    (void)state;
    char err[256];
    pr_vocab_eviction evs[] = {PR_EVICT_LRU, PR_EVICT_LFU, PR_EVICT_TTL};
    for (int p = 0; p < 3; p++) {
        pr_pipeline_spec s;
        se_spec1(&s, 1, evs[p]);
        pr_engine *e = se_shared(&s, 2);
        for (uint64_t v = 100; v < 108; v++) /* full: 8 slots */
            se_apply(e, 0, v, (int64_t)(v - 100 + 2));
        pr_block *blk = pr_block_new(0, 1, 64, false);
        pr_out *o1 = tu_out(e, blk), *o2 = tu_out(e, blk);
        uint64_t vals[] = {103, 100, 103, 107, 103, 101};
        se_block_values(blk, vals, 6);
        char *dir = tu_tmpdir();
        char p1[512], p2[512], cmd[1200];
        snprintf(p1, sizeof(p1), "%s/1.snap", dir);
        snprintf(p2, sizeof(p2), "%s/2.snap", dir);
        assert_int_equal(pr_vocab_save(e, p1, err, sizeof(err)), 0);
        tu_process(e, blk, o1);
        tu_process(e, blk, o2);
        tu_assert_same_out(o1, o2);
        assert_int_equal(o1->n_recycled, 0);
        assert_int_equal(pr_out_index(o1, 0, 0), 5);
        assert_int_equal(pr_out_index(o1, 0, 1), 2);
        assert_int_equal(pr_vocab_save(e, p2, err, sizeof(err)), 0);
        snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", p1, p2);
        assert_int_equal(system(cmd), 0); /* clocks, last_use, counts unchanged */
        /* the uses wait for the log: slot order, counts of both blocks */
        se_log u = {0};
        assert_int_equal(pr_engine_vocab_drain_usage(e, se_usage_list_cb, &u), 0);
        assert_int_equal(u.n, 4);
        uint64_t keys[] = {100, 101, 103, 107};
        uint32_t counts[] = {2, 2, 6, 2};
        for (size_t i = 0; i < 4; i++) {
            assert_int_equal(u.r[i].col, 0);
            assert_int_equal(u.r[i].key, keys[i]);
            assert_int_equal(u.r[i].count, counts[i]);
        }
        u.n = 0;
        assert_int_equal(pr_engine_vocab_drain_usage(e, se_usage_list_cb, &u), 0);
        assert_int_equal(u.n, 0); /* drained */

        /* a new value in the full table: undecided, reported as a miss */
        uint64_t nv[] = {103, 555};
        se_block_values(blk, nv, 2);
        assert_int_equal(pr_engine_process(e, blk, o1, err, sizeof(err)), PR_ESTATE);
        assert_non_null(strstr(err, "C1"));
        se_log m = {0};
        assert_int_equal(pr_engine_vocab_misses(e, blk, se_miss_cb, &m, err, sizeof(err)), 0);
        assert_int_equal(m.n, 1);
        assert_int_equal(m.r[0].key, 555);
        free(m.r);
        assert_int_equal(pr_engine_vocab_set_undecided_oov(e, true, err, sizeof(err)), 0);
        tu_process(e, blk, o1);
        assert_int_equal(pr_out_index(o1, 0, 1), PR_INDEX_OOV);
        pr_engine_stats st;
        pr_engine_get_stats(e, &st);
        assert_int_equal(st.undecided_oov, 1);
        assert_int_equal(pr_engine_vocab_set_undecided_oov(e, false, err, sizeof(err)), 0);
        assert_int_equal(pr_engine_process(e, blk, o1, err, sizeof(err)), PR_ESTATE);
        /* usage of a failed block may be partial; drop it */
        assert_int_equal(pr_engine_vocab_drain_usage(e, se_usage_list_cb, &u), 0);
        free(u.r);
        tu_rmdir(dir);
        pr_out_free(o1);
        pr_out_free(o2);
        pr_block_free(blk);
        pr_engine_free(e);
    }
}

/* Recycles made by apply: numbered at once in apply order (across columns),
 * announced at row 0 of the next process; a recycle drops the slot's
 * pending usage. */
static void test_apply_notices_in_apply_order(void **state)
{
    (void)state;
    char err[256];
    pr_pipeline_spec s;
    se_spec1(&s, 2, PR_EVICT_LRU);
    pr_engine *e = se_shared(&s, 2);
    for (uint64_t v = 0; v < 8; v++) {
        se_apply(e, 0, 100 + v, (int64_t)v + 2);
        se_apply(e, 1, 200 + v, (int64_t)v + 2);
    }
    pr_block *blk = pr_block_new(0, 2, 64, false);
    pr_out *o = tu_out(e, blk);
    /* a use of column 0's oldest value (100, index 2), not in the log yet */
    pr_block_reset(blk);
    blk->sparse_enc[0] = blk->sparse_enc[1] = PR_SPARSE_U64;
    tu_set_u64(blk, 0, 0, 100);
    tu_set_u64(blk, 1, 0, 207);
    blk->rows = 1;
    tu_process(e, blk, o);
    /* column 1 first, then column 0: that order, numbers 1 and 2 */
    se_apply(e, 1, 300, 2); /* evicts 200 */
    se_apply(e, 0, 400, 2); /* evicts 100, and its pending use */
    assert_int_equal(pr_engine_vocab_recycled_total(e), 2);
    assert_int_equal(pr_engine_vocab_notices_pending(e), 2);
    se_log u = {0};
    assert_int_equal(pr_engine_vocab_drain_usage(e, se_usage_list_cb, &u), 0);
    assert_int_equal(u.n, 1); /* only 207's */
    assert_int_equal(u.r[0].col, 1);
    assert_int_equal(u.r[0].key, 207);
    free(u.r);
    blk->rows = 0;
    tu_process(e, blk, o);
    assert_int_equal(o->n_recycled, 2);
    assert_int_equal(o->recycled[0].col, 1);
    assert_int_equal(o->recycled[0].number, 1);
    assert_int_equal(o->recycled[1].col, 0);
    assert_int_equal(o->recycled[1].number, 2);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(o->recycled[i].row, 0);
        assert_int_equal(o->recycled[i].index, 2);
    }
    tu_process(e, blk, o);
    assert_int_equal(o->n_recycled, 0); /* announced once */
    /* a vocabulary journal is the log's job here */
    char *dir = tu_tmpdir();
    char jp[512];
    snprintf(jp, sizeof(jp), "%s/j", dir);
    assert_int_equal(pr_vocab_journal_open(e, jp, err, sizeof(err)), PR_ESTATE);
    tu_rmdir(dir);
    pr_out_free(o);
    pr_block_free(blk);
    pr_engine_free(e);
}

/* Touch from the log moves a value away from eviction (lru, ttl) or adds to
 * its count (lfu); a key without an index changes nothing. */
static void test_touch_steers_victim(void **state)
{
    (void)state;
    char err[256];
    pr_vocab_eviction evs[] = {PR_EVICT_LRU, PR_EVICT_LFU, PR_EVICT_TTL};
    for (int p = 0; p < 3; p++) {
        pr_pipeline_spec s;
        se_spec1(&s, 1, evs[p]);
        pr_engine *e = se_shared(&s, 1);
        for (uint64_t v = 0; v < 8; v++)
            se_apply(e, 0, 100 + v, (int64_t)v + 2);
        tu_vocab before = tu_vocab_get(e, 0);
        /* unknown key: nothing at all */
        assert_int_equal(pr_engine_vocab_touch(e, 0, 999, 5, err, sizeof(err)), 0);
        tu_vocab same = tu_vocab_get(e, 0);
        for (size_t i = 0; i < before.n; i++) {
            assert_int_equal(before.e[i].last_use, same.e[i].last_use);
            assert_int_equal(before.e[i].count, same.e[i].count);
        }
        free(before.e);
        free(same.e);
        assert_int_equal(pr_engine_vocab_touch(e, 0, 100, 3, err, sizeof(err)), 0);
        tu_vocab after = tu_vocab_get(e, 0);
        assert_int_equal(after.e[0].last_use, 9); /* 8 applies, then this tick */
        assert_int_equal(after.e[0].count, 4);
        free(after.e);
        /* the next new value takes 101's index, not 100's (ttl: 101 is 9
         * records old, past ttl_records 4) */
        se_apply(e, 0, 500, 3);
        assert_int_equal(pr_engine_vocab_recycled_total(e), 1);
        /* bad calls */
        assert_int_equal(pr_engine_vocab_touch(e, 1, 100, 1, err, sizeof(err)), PR_EINVAL);
        assert_int_equal(pr_engine_vocab_touch(e, 0, 100, 0, err, sizeof(err)), PR_EINVAL);
        assert_int_equal(pr_engine_vocab_touch(e, 0, 5000, 1, err, sizeof(err)), PR_EINVAL);
        pr_engine_free(e);
    }
    /* a column without eviction: touch does nothing */
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    pr_engine *e = se_shared(&s, 1);
    se_apply(e, 0, 7, 2);
    assert_int_equal(pr_engine_vocab_touch(e, 0, 7, 1, err, sizeof(err)), 0);
    se_log u = {0};
    assert_int_equal(pr_engine_vocab_drain_usage(e, se_usage_list_cb, &u), 0);
    assert_int_equal(u.n, 0);
    pr_engine_free(e);
}

/* A tagged snapshot between an apply that recycled and the next process
 * keeps the notice: the restored replica announces it as the saved one does. */
static void test_snapshot_keeps_apply_notices(void **state)
{
    (void)state;
    char err[256];
    pr_pipeline_spec s;
    se_spec1(&s, 1, PR_EVICT_LFU);
    s.sparse[0].decay_records = 5;
    pr_engine *e = se_shared(&s, 1);
    for (uint64_t v = 0; v < 9; v++) /* the ninth recycles */
        se_apply(e, 0, 100 + v, -2);
    assert_int_equal(pr_engine_vocab_notices_pending(e), 1);
    char *dir = tu_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/t.snap", dir);
    const char tag[] = "log offset 9";
    assert_int_equal(pr_vocab_save_tagged(e, path, tag, sizeof(tag), err, sizeof(err)), 0);
    pr_engine *f = tu_engine(&s, "cpu", 2);
    char back[64];
    uint32_t len = 0;
    assert_int_equal(pr_vocab_load_tagged(f, path, back, sizeof(back), &len, err, sizeof(err)), 0);
    assert_int_equal(len, sizeof(tag));
    assert_int_equal(pr_engine_vocab_set_shared(f, true, err, sizeof(err)), 0);
    tu_assert_same_vocab(e, f);
    /* both go on with the same log and blocks */
    pr_block *blk = pr_block_new(0, 1, 64, false);
    pr_out *oe = tu_out(e, blk), *of = tu_out(f, blk);
    for (uint64_t k = 0; k < 6; k++) {
        uint64_t v[] = {100 + k, 108, 101 + k, 100 + 2 * k};
        for (uint32_t i = 0; i < 4; i++) {
            se_apply(e, 0, v[i], -2);
            se_apply(f, 0, v[i], -2);
        }
        se_block_values(blk, v, 4);
        assert_int_equal(pr_engine_vocab_set_undecided_oov(e, true, err, sizeof(err)), 0);
        assert_int_equal(pr_engine_vocab_set_undecided_oov(f, true, err, sizeof(err)), 0);
        tu_process(e, blk, oe);
        tu_process(f, blk, of);
        tu_assert_same_out(oe, of);
        assert_int_equal(oe->n_recycled, of->n_recycled);
        for (uint32_t i = 0; i < oe->n_recycled; i++) {
            assert_int_equal(oe->recycled[i].number, of->recycled[i].number);
            assert_int_equal(oe->recycled[i].index, of->recycled[i].index);
        }
        if (k == 0)
            assert_true(oe->n_recycled >= 1 && oe->recycled[0].number == 1);
    }
    tu_assert_same_vocab(e, f);
    pr_out_free(oe);
    pr_out_free(of);
    pr_block_free(blk);
    pr_engine_free(e);
    pr_engine_free(f);
    tu_rmdir(dir);
}

/* What cannot be shared is refused, naming the reason. */
static void test_refusals(void **state)
{
    (void)state;
    char err[512];
    pr_pipeline_spec s;
    se_spec1(&s, 1, PR_EVICT_LRU);
    s.profile = PR_VOCAB_DLRM;
    pr_engine *e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "profile default"));
    int64_t idx;
    assert_int_equal(pr_engine_vocab_apply(e, 0, 1, 1, &idx, err, sizeof(err)), PR_ENOTSUP);
    assert_int_equal(pr_engine_vocab_touch(e, 0, 1, 1, err, sizeof(err)), PR_ENOTSUP);
    assert_int_equal(pr_engine_vocab_set_undecided_oov(e, true, err, sizeof(err)), PR_ENOTSUP);
    pr_engine_free(e);

    se_spec1(&s, 1, PR_EVICT_TTL);
    s.sparse[0].ttl_records = 0;
    s.sparse[0].ttl_s = 60;
    e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "ttl_s"));
    pr_engine_free(e);

    /* journal first, then shared: refused as well */
    se_spec1(&s, 1, PR_EVICT_LRU);
    e = tu_engine(&s, "cpu", 1);
    char *dir = tu_tmpdir();
    char jp[512];
    snprintf(jp, sizeof(jp), "%s/j", dir);
    assert_int_equal(pr_vocab_journal_open(e, jp, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), PR_ESTATE);
    pr_vocab_journal_close(e);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    pr_engine_free(e);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_replicas_lru),
        cmocka_unit_test(test_two_replicas_lfu),
        cmocka_unit_test(test_two_replicas_ttl),
        cmocka_unit_test(test_frozen_lookups_keep_state),
        cmocka_unit_test(test_apply_notices_in_apply_order),
        cmocka_unit_test(test_touch_steers_victim),
        cmocka_unit_test(test_snapshot_keeps_apply_notices),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
