/*
 * test_engine_evict.c — bounded vocabularies (issue 14 items 1-3): eviction
 * lru / lfu / ttl (by lookups, ttl_records, or by event time, ttl_s),
 * recycled-index notices, determinism. (Their persistence, snapshots and
 * journal: tests/vocab/test_vocab_evict_files.c.)
 *
 * The central check is the trainer's view: a shadow mapping index -> value
 * per column, built only from the output rows and the notices (a notice at
 * row r forgets the index before row r is read). At every row the index must
 * agree with the shadow (an index reused without a notice fails), and after
 * every block the shadow must equal the engine's own mapping exactly. Values
 * are fed as uint64 below the modulus, so the test knows each row's key.
 */
#include "engine_test_util.h"
#include "evict_test_util.h"
#include "pr_vocab.h"

/* Capacity is never exceeded and the notices reconstruct the mapping at
 * every block, for every policy, direct and hash tables, with admission. */
static void test_notices_reconstruct_mapping(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_SCEN; i++)
        run_scenario(&scenarios[i], 40, 2);
}

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
    assert_int_equal(hdr[8], 6); /* the Criteo layout */
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
        cmocka_unit_test(test_spec_errors),
        cmocka_unit_test(test_ttl_s_threshold),
        cmocka_unit_test(test_ttl_s_out_of_order),
        cmocka_unit_test(test_ttl_s_needs_event_times),
        cmocka_unit_test(test_ttl_s_spec_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
