/*
 * test_vocab_store.c — the store interface (pr_vocab.h, "the store") with
 * its local implementation, and resolving columns of keys of any length.
 *
 * Proves: a local store with a state dir makes every block's indices
 * durable (a second engine recovered from the dir after a crash holds the
 * same vocabulary and gives the same indices to the next block); the seed
 * applies on the first start only; without a state dir it only seeds and
 * nothing checkpoints; local resolve never waits; and a column of keys
 * reports exactly the keys without an index, for any length, so jagged
 * list elements can be resolved like a block's column.
 */
#include "engine_test_util.h"

#include <sys/stat.h>

#include "pr_vocab.h"

static pr_vocab_store *st_open(pr_engine *e, const char *dir, const char *seed)
{
    char err[512] = "";
    pr_vocab_store_opts o = {.eng = e, .pipeline = "p", .state_dir = dir, .seed = seed};
    pr_vocab_store *vs = NULL;
    if (pr_vocab_store_new(&o, &vs, err, sizeof(err)) ||
        pr_vocab_store_recover(vs, 1, err, sizeof(err)))
        fail_msg("store: %s", err);
    return vs;
}

static void st_spec(pr_pipeline_spec *s)
{
    tu_spec(s, 1, 3, PR_VOCAB_DEFAULT, 100000, true, true);
}

static void test_local_recovers_after_crash(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), err[256];
    pr_pipeline_spec s;
    st_spec(&s);
    pr_engine *a = tu_engine(&s, "cpu", 2);
    pr_vocab_store *vs = st_open(a, dir, NULL);
    assert_true(pr_vocab_store_persistent(vs));
    pr_vocablog_stats ls;
    assert_false(pr_vocab_store_log_stats(vs, &ls));
    pr_block *b = pr_block_new(1, 3, 512, true);
    pr_out *o = tu_out(a, b);
    uint64_t seed = 7;
    for (int k = 0; k < 6; k++) {
        tu_gen_block(b, &seed, 500);
        assert_int_equal(pr_vocab_store_resolve(vs, b, 0, err, sizeof(err)), 0);
        tu_process(a, b, o);
        if (k == 2)
            assert_int_equal(pr_vocab_store_checkpoint(vs, err, sizeof(err)), 0);
        assert_int_equal(pr_vocab_store_poll(vs, 0, err, sizeof(err)), 0);
    }
    pr_vocab_store_free(vs); /* a crash: blocks 3..5 live in the journal only */

    pr_engine *c = tu_engine(&s, "cpu", 1);
    pr_vocab_store *vc = st_open(c, dir, NULL);
    tu_assert_same_vocab(a, c);
    tu_gen_block(b, &seed, 500);
    pr_out *oa = tu_out(a, b), *oc = tu_out(c, b);
    tu_process(a, b, oa);
    tu_process(c, b, oc);
    tu_assert_same_out(oa, oc);
    pr_out_free(oa);
    pr_out_free(oc);
    pr_out_free(o);
    pr_block_free(b);
    pr_vocab_store_free(vc);
    pr_engine_free(c);
    pr_engine_free(a);
    tu_rmdir(dir);
}

static void test_local_seed_and_no_state(void **state)
{
    (void)state;
    char *seed_dir = tu_tmpdir(), *dir = tu_tmpdir(), err[256];
    pr_pipeline_spec s;
    st_spec(&s);
    pr_engine *a = tu_engine(&s, "cpu", 1);
    pr_block *b = pr_block_new(1, 3, 256, true);
    pr_out *o = tu_out(a, b);
    uint64_t seed = 11;
    tu_gen_block(b, &seed, 200);
    tu_process(a, b, o);
    assert_int_equal(pr_vocab_export(a, seed_dir, err, sizeof(err)), 0);

    /* no state dir: only the seed, nothing to checkpoint */
    pr_engine *n = tu_engine(&s, "cpu", 1);
    pr_vocab_store *vn = st_open(n, NULL, seed_dir);
    assert_false(pr_vocab_store_persistent(vn));
    assert_int_equal(pr_vocab_store_checkpoint(vn, err, sizeof(err)), 0);
    tu_assert_same_vocab(a, n);
    pr_vocab_store_free(vn);
    pr_engine_free(n);

    /* a state dir: seeded on the first start, not on the second */
    pr_engine *f = tu_engine(&s, "cpu", 1);
    pr_vocab_store *vf = st_open(f, dir, seed_dir);
    tu_assert_same_vocab(a, f);
    tu_gen_block(b, &seed, 200);
    tu_process(f, b, o);
    pr_vocab_store_free(vf);
    pr_engine *g = tu_engine(&s, "cpu", 1);
    pr_vocab_store *vg = st_open(g, dir, seed_dir);
    tu_assert_same_vocab(f, g);
    pr_vocab_store_free(vg);
    pr_engine_free(g);
    pr_engine_free(f);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(a);
    tu_rmdir(seed_dir);
    tu_rmdir(dir);
}

typedef struct {
    uint64_t key[64];
    uint32_t col[64];
    size_t n;
} st_misses;

static int st_miss_cb(uint32_t col, uint64_t key, void *opaque)
{
    st_misses *m = opaque;
    if (m->n < 64) {
        m->col[m->n] = col;
        m->key[m->n] = key;
    }
    m->n++;
    return 0;
}

static void test_misses_keys(void **state)
{
    (void)state;
    char err[256];
    pr_pipeline_spec s;
    tu_spec(&s, 0, 2, PR_VOCAB_DEFAULT, 1000, true, true);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    assert_int_equal(pr_engine_vocab_set_shared(e, true, err, sizeof(err)), 0);
    int64_t idx;
    assert_int_equal(pr_engine_vocab_apply(e, 1, 5, 1, &idx, err, sizeof(err)), 0);
    assert_int_equal(idx, 2);
    /* a list feature's elements: any length, repeats reported each time */
    const uint64_t keys[] = {5, 7, 7, 9, 5};
    st_misses m = {0};
    assert_int_equal(pr_engine_vocab_misses_keys(e, 1, keys, 5, st_miss_cb, &m, err, sizeof(err)),
                     0);
    assert_int_equal(m.n, 3);
    assert_int_equal(m.key[0], 7);
    assert_int_equal(m.key[1], 7);
    assert_int_equal(m.key[2], 9);
    assert_int_equal(m.col[2], 1);
    m.n = 0;
    assert_int_equal(pr_engine_vocab_misses_keys(e, 0, keys, 0, st_miss_cb, &m, err, sizeof(err)),
                     0);
    assert_int_equal(m.n, 0);
    /* the same keys as a block's column: the same misses */
    pr_block *b = pr_block_new(0, 2, 64, false);
    b->rows = 5;
    for (uint32_t r = 0; r < 5; r++) {
        tu_set_u64(b, 0, r, 5);
        tu_set_u64(b, 1, r, keys[r]);
    }
    m.n = 0;
    assert_int_equal(pr_engine_vocab_misses(e, b, st_miss_cb, &m, err, sizeof(err)), 0);
    assert_int_equal(m.n, 8); /* column 0: 5 x key 5; column 1: 7, 7, 9 */
    const uint64_t bad[] = {1000};
    assert_int_equal(pr_engine_vocab_misses_keys(e, 1, bad, 1, st_miss_cb, &m, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "C2"));
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_local_resolve_keys_ready(void **state)
{
    (void)state;
    char err[256];
    pr_pipeline_spec s;
    st_spec(&s);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_vocab_store *vs = st_open(e, NULL, NULL);
    const uint64_t keys[] = {1, 2, 3};
    pr_vocab_keys cols[] = {{0, keys, 3}, {2, keys, 1}};
    assert_int_equal(pr_vocab_store_resolve_keys(vs, cols, 2, 0, err, sizeof(err)), 0);
    pr_vocab_store_free(vs);
    pr_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_recovers_after_crash),
        cmocka_unit_test(test_local_seed_and_no_state),
        cmocka_unit_test(test_misses_keys),
        cmocka_unit_test(test_local_resolve_keys_ready),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
