/*
 * test_vocab_shared.c — the engine's shared-vocabulary mode (pr_engine.h,
 * "shared vocabulary"), driven the way vocab/vocablog.c drives it but with an
 * in-memory log: engines report their misses, append them to one ordered
 * list, apply the whole list in order, then process.
 *
 * Proves: one engine through the log gives exactly the output of plain
 * streaming; two engines fed different blocks end with identical
 * vocabularies and give every value the same index; min_count counts the
 * occurrences of all engines; capacity and dlrm fullness behave as in
 * streaming; processing never invents an index; tagged snapshots round-trip.
 */
#include "engine_test_util.h"
#include "pr_vocab.h"

/* The in-memory log: (col, key, count) records in order. */
typedef struct {
    uint32_t col;
    uint64_t key;
    uint32_t count;
} tl_rec;

typedef struct {
    tl_rec *r;
    size_t n, cap;
} tl_log;

static void tl_push(tl_log *l, uint32_t col, uint64_t key, uint32_t count)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 1024;
        l->r = realloc(l->r, l->cap * sizeof(*l->r));
        assert_non_null(l->r);
    }
    l->r[l->n++] = (tl_rec){col, key, count};
}

/* Misses of one block, deduplicated per (col, key) in first-appearance
 * order, column by column (what vocablog.c proposes). */
typedef struct {
    tl_log m;
} tl_miss;

static int tl_miss_cb(uint32_t col, uint64_t key, void *opaque)
{
    tl_miss *t = opaque;
    for (size_t i = 0; i < t->m.n; i++)
        if (t->m.r[i].col == col && t->m.r[i].key == key) {
            t->m.r[i].count++;
            return 0;
        }
    tl_push(&t->m, col, key, 1);
    return 0;
}

/* A replica: its engine and how far into the log it applied. */
typedef struct {
    pr_engine *e;
    size_t applied;
} tl_replica;

static void tl_catch_up(tl_replica *r, const tl_log *log)
{
    char err[256];
    for (; r->applied < log->n; r->applied++) {
        const tl_rec *x = &log->r[r->applied];
        int64_t idx;
        int rc = pr_engine_vocab_apply(r->e, x->col, x->key, x->count, &idx, err, sizeof(err));
        if (rc)
            print_error("apply: %s\n", err);
        assert_int_equal(rc, 0);
    }
}

/* One block through a replica: propose misses, apply the log, process. */
static void tl_step(tl_replica *r, tl_log *log, const pr_block *b, pr_out *o)
{
    tl_miss t = {{0}};
    char err[256];
    assert_int_equal(pr_engine_vocab_misses(r->e, b, tl_miss_cb, &t, err, sizeof(err)), 0);
    uint32_t ns = pr_engine_spec(r->e)->n_sparse;
    for (uint32_t c = 0; c < ns; c++)
        for (size_t i = 0; i < t.m.n; i++)
            if (t.m.r[i].col == c)
                tl_push(log, c, t.m.r[i].key, t.m.r[i].count);
    free(t.m.r);
    tl_catch_up(r, log);
    tu_process(r->e, b, o);
}

static pr_engine *tl_shared_engine(const pr_pipeline_spec *s)
{
    pr_engine *e = tu_engine(s, "cpu", 2);
    char err[256];
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    return e;
}

/* Block k of a deterministic stream: skewed values, some missing. */
static void tl_fill(pr_block *b, uint64_t seed, uint64_t domain)
{
    pr_block_reset(b);
    uint64_t s = seed * 7919 + 1;
    for (uint32_t r = 0; r < b->cap; r++) {
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            if (tu_rand(&s) % 17 == 0)
                tu_put_missing(b, c, r);
            else
                tu_put_hex_u64(b, c, r, tu_skewed(&s, domain) * 0x10001 + c);
        }
        b->rows++;
    }
}

static void test_one_replica_equals_streaming(void **state)
{
    (void)state;
    /* direct tables (modulus 4096), hash tables (no modulus), both profiles */
    for (int variant = 0; variant < 4; variant++) {
        pr_pipeline_spec s;
        tu_spec(&s, 0, 3, variant & 1 ? PR_VOCAB_DEFAULT : PR_VOCAB_DLRM, 4096, variant < 2, true);
        pr_engine *plain = tu_engine(&s, "cpu", 2);
        tl_replica rep = {tl_shared_engine(&s), 0};
        tl_log log = {0};
        pr_block *b = pr_block_new(0, 3, 512, false);
        pr_out *o1 = tu_out(plain, b), *o2 = tu_out(rep.e, b);
        for (uint64_t k = 0; k < 12; k++) {
            tl_fill(b, k, 20000);
            tu_process(plain, b, o1);
            tl_step(&rep, &log, b, o2);
            tu_assert_same_out(o1, o2);
        }
        tu_assert_same_vocab(plain, rep.e);
        /* Known values cost nothing: a block seen before has no misses. */
        tl_miss t = {{0}};
        char err[256];
        tl_fill(b, 3, 20000);
        assert_int_equal(pr_engine_vocab_misses(rep.e, b, tl_miss_cb, &t, err, sizeof(err)), 0);
        assert_int_equal(t.m.n, 0);
        free(log.r);
        pr_out_free(o1);
        pr_out_free(o2);
        pr_block_free(b);
        pr_engine_free(plain);
        pr_engine_free(rep.e);
    }
}

static void test_two_replicas_agree(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 2, PR_VOCAB_DLRM, 1u << 20, false, true);
    tl_replica a = {tl_shared_engine(&s), 0}, b = {tl_shared_engine(&s), 0};
    tl_log log = {0};
    pr_block *blk = pr_block_new(0, 2, 256, false);
    pr_out *oa = tu_out(a.e, blk), *ob = tu_out(b.e, blk);
    /* value -> index seen in any output, per column */
    enum { DOM = 5000 };
    int64_t *seen = malloc(2 * DOM * sizeof(int64_t));
    assert_non_null(seen);
    for (size_t i = 0; i < 2 * DOM; i++)
        seen[i] = -1;
    for (uint64_t k = 0; k < 20; k++) {
        tl_replica *r = k % 3 == 0 ? &b : &a; /* uneven split of the blocks */
        pr_out *o = r == &a ? oa : ob;
        tl_fill(blk, k, DOM);
        tl_step(r, &log, blk, o);
        for (uint32_t c = 0; c < 2; c++)
            for (uint32_t row = 0; row < blk->rows; row++) {
                if (pr_bit_test(blk->sparse_missing + c * pr_bitmap_words(blk->cap), row))
                    continue;
                char hex[PR_HEX_SLOT + 1] = {0};
                memcpy(hex, pr_block_hex(blk, c, row), PR_HEX_SLOT);
                uint64_t v = (strtoull(hex, NULL, 16) - c) / 0x10001;
                assert_true(v < DOM);
                int64_t idx = pr_out_index(o, c, row);
                if (seen[c * DOM + v] < 0)
                    seen[c * DOM + v] = idx;
                assert_int_equal(seen[c * DOM + v], idx);
            }
    }
    tl_catch_up(&a, &log);
    tl_catch_up(&b, &log);
    tu_assert_same_vocab(a.e, b.e);
    free(seen);
    free(log.r);
    pr_out_free(oa);
    pr_out_free(ob);
    pr_block_free(blk);
    pr_engine_free(a.e);
    pr_engine_free(b.e);
}

/* Put one value `n` times into a one-column block. */
static void tl_value_block(pr_block *b, uint64_t v, uint32_t n)
{
    pr_block_reset(b);
    for (uint32_t r = 0; r < n; r++)
        tu_put_hex_u64(b, 0, r, v);
    b->rows = n;
}

static void test_min_count_across_replicas(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    s.sparse[0].min_count = 3;
    tl_replica a = {tl_shared_engine(&s), 0}, b = {tl_shared_engine(&s), 0};
    tl_log log = {0};
    pr_block *blk = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(a.e, blk);
    /* 7 seen twice by a, once by b: admitted at b's occurrence */
    tl_value_block(blk, 7, 2);
    tl_step(&a, &log, blk, o);
    assert_int_equal(pr_out_index(o, 0, 0), PR_INDEX_OOV);
    tl_value_block(blk, 9, 1);
    tl_step(&a, &log, blk, o);
    tl_value_block(blk, 7, 1);
    tl_step(&b, &log, blk, o);
    assert_int_equal(pr_out_index(o, 0, 0), 2);
    /* 9 seen once by a and once by b: still below 3 */
    tl_value_block(blk, 9, 1);
    tl_step(&b, &log, blk, o);
    assert_int_equal(pr_out_index(o, 0, 0), PR_INDEX_OOV);
    tl_catch_up(&a, &log);
    tu_assert_same_vocab(a.e, b.e);
    assert_int_equal(pr_engine_vocab_size(a.e, 0), 3);
    free(log.r);
    pr_out_free(o);
    pr_block_free(blk);
    pr_engine_free(a.e);
    pr_engine_free(b.e);
}

static void test_capacity_and_full(void **state)
{
    (void)state;
    char err[256];
    /* default: past capacity is OOV, and a full column reports no misses */
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    s.sparse[0].capacity = 4; /* 0, 1 reserved + two values */
    tl_replica a = {tl_shared_engine(&s), 0};
    tl_log log = {0};
    pr_block *blk = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(a.e, blk);
    for (uint64_t v = 1; v <= 3; v++) {
        tl_value_block(blk, v, 1);
        tl_step(&a, &log, blk, o);
        assert_int_equal(pr_out_index(o, 0, 0), v <= 2 ? (int64_t)v + 1 : PR_INDEX_OOV);
    }
    tl_miss t = {{0}};
    tl_value_block(blk, 50, 1);
    assert_int_equal(pr_engine_vocab_misses(a.e, blk, tl_miss_cb, &t, err, sizeof(err)), 0);
    assert_int_equal(t.m.n, 0);
    tu_process(a.e, blk, o);
    assert_int_equal(pr_out_index(o, 0, 0), PR_INDEX_OOV);
    pr_engine_free(a.e);

    /* dlrm: applying past capacity is PR_EFULL, as processing would be */
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
    s.sparse[0].capacity = 2;
    pr_engine *e = tl_shared_engine(&s);
    int64_t idx;
    assert_int_equal(pr_engine_vocab_apply(e, 0, 5, 1, &idx, err, sizeof(err)), 0);
    assert_int_equal(idx, 0);
    assert_int_equal(pr_engine_vocab_apply(e, 0, 6, 1, &idx, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_apply(e, 0, 5, 1, &idx, err, sizeof(err)), 0);
    assert_int_equal(idx, 0);
    assert_int_equal(pr_engine_vocab_apply(e, 0, 7, 1, &idx, err, sizeof(err)), PR_EFULL);
    assert_non_null(strstr(err, "full"));
    /* bad input from a log: out-of-range column or key */
    assert_int_equal(pr_engine_vocab_apply(e, 3, 5, 1, &idx, err, sizeof(err)), PR_EINVAL);
    assert_int_equal(pr_engine_vocab_apply(e, 0, 1000, 1, &idx, err, sizeof(err)), PR_EINVAL);
    pr_engine_free(e);
    free(log.r);
    pr_out_free(o);
    pr_block_free(blk);
}

static void test_never_invents(void **state)
{
    (void)state;
    char err[256];
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1u << 20, false, true);
    pr_engine *e = tl_shared_engine(&s);
    pr_block *blk = pr_block_new(0, 1, 64, false);
    pr_out *o = tu_out(e, blk);
    tl_value_block(blk, 42, 3);
    assert_int_equal(pr_engine_process(e, blk, o, err, sizeof(err)), PR_ESTATE);
    assert_non_null(strstr(err, "C1"));
    assert_int_equal(pr_engine_vocab_size(e, 0), 0);
    /* shared mode off again: processing inserts as usual */
    assert_int_equal(pr_engine_vocab_set_shared(e, false, err, sizeof(err)), 0);
    tu_process(e, blk, o);
    assert_int_equal(pr_engine_vocab_size(e, 0), 1);
    pr_out_free(o);
    pr_block_free(blk);
    pr_engine_free(e);

    /* backends without shared support say so */
    const char *const *names = pr_engine_backends();
    for (; *names; names++) {
        if (!strcmp(*names, "hls-sim")) {
            tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
            pr_engine *h = tu_engine(&s, "hls-sim", 1);
            assert_int_equal(pr_engine_vocab_set_shared(h, true, err, sizeof(err)), PR_ENOTSUP);
            assert_non_null(strstr(err, "cpu"));
            pr_engine_free(h);
        }
    }
}

static void test_tagged_snapshot(void **state)
{
    (void)state;
    char err[256];
    char *dir = tu_tmpdir();
    char path[512];
    snprintf(path, sizeof(path), "%s/s.snap", dir);
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
    pr_engine *e = tl_shared_engine(&s);
    int64_t idx;
    for (uint64_t v = 10; v < 20; v++)
        assert_int_equal(pr_engine_vocab_apply(e, 0, v, 1, &idx, err, sizeof(err)), 0);
    const char tag[] = "position 1234";
    assert_int_equal(pr_vocab_save_tagged(e, path, tag, sizeof(tag), err, sizeof(err)), 0);
    pr_engine *f = tu_engine(&s, "cpu", 1);
    char back[64];
    uint32_t len = 0;
    assert_int_equal(pr_vocab_load_tagged(f, path, back, sizeof(back), &len, err, sizeof(err)), 0);
    assert_int_equal(len, sizeof(tag));
    assert_memory_equal(back, tag, sizeof(tag));
    tu_assert_same_vocab(e, f);
    /* a reader that expects no tag refuses a tagged snapshot */
    pr_engine *g = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_vocab_load(g, path, err, sizeof(err)), PR_EINVAL);
    /* and an untagged snapshot has an empty tag */
    assert_int_equal(pr_vocab_save(e, path, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_load_tagged(g, path, back, sizeof(back), &len, err, sizeof(err)), 0);
    assert_int_equal(len, 0);
    pr_engine_free(e);
    pr_engine_free(f);
    pr_engine_free(g);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_replica_equals_streaming),
        cmocka_unit_test(test_two_replicas_agree),
        cmocka_unit_test(test_min_count_across_replicas),
        cmocka_unit_test(test_capacity_and_full),
        cmocka_unit_test(test_never_invents),
        cmocka_unit_test(test_tagged_snapshot),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
