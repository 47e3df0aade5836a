/*
 * test_vocab_evict_files.c — bounded vocabularies through a restart: a
 * snapshot restores the same notices and keeps the undelivered ones, a
 * journal replay re-announces what it recycled with the same numbers, event
 * clocks (ttl_s) survive, and files written under other eviction settings
 * are refused with the reason. Scenarios: tests/engine/evict_test_util.h.
 */
#include "engine_test_util.h"
#include "evict_test_util.h"
#include "pr_vocab.h"

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
    assert_int_equal(file_u32_at(snap1, 8), 6);  /* the Criteo layout: version 6 */
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
    assert_int_equal(file_u32_at(snap2, 8), 6);
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

/* Issue 19 finding 3: `piperec vocab import` of an export taken mid-stream
 * from an evicting engine continues exactly as the engine that kept running:
 * the same indices and the same notice numbers (the counter goes on from
 * where the export left it, not from #1), because the export carries the
 * notice counter, the column clocks and every value's last use (time) and
 * count (what lru, lfu with decay and ttl decide on). */
static void test_export_import_same_notices(void **state)
{
    (void)state;
    const int blocks = 30, k = 12;
    char *dir = tu_tmpdir();
    char sub[512], err[512];
    snprintf(sub, sizeof(sub), "%s/export", dir);
    for (size_t i = 0; i < N_SCEN; i++) {
        const scen *sc = &scenarios[i];
        trace full = trace_new(blocks), resumed = trace_new(blocks), kept = trace_new(blocks);
        run_trace(sc, 2, blocks, &full);

        pr_pipeline_spec s;
        spec_for(&s, sc);
        pr_block *b = pr_block_new(1, NCOL, ROWS, true);
        pr_engine *e1 = tu_engine(&s, "cpu", 2);
        pr_out *o = tu_out(e1, b);
        for (int j = 0; j < k; j++) {
            fill_block(b, sc, 2, j);
            tu_process(e1, b, o);
        }
        uint64_t total = pr_engine_vocab_recycled_total(e1);
        assert_true(total > 0); /* it recycled before the export */
        assert_int_equal(pr_vocab_export(e1, sub, err, sizeof(err)), 0);
        pr_engine *e2 = tu_engine(&s, "cpu", 1);
        if (pr_vocab_import(e2, sub, err, sizeof(err)))
            fail_msg("scenario %zu: import: %s", i, err);
        tu_assert_same_vocab(e1, e2);
        assert_int_equal(pr_engine_vocab_recycled_total(e2), total);
        for (int j = k; j < blocks; j++) { /* the same stream goes on in both */
            fill_block(b, sc, 2, j);
            tu_process(e1, b, o);
            trace_block(&kept, j, o);
            tu_process(e2, b, o);
            trace_block(&resumed, j, o);
        }
        for (int j = k; j < blocks; j++) {
            assert_same_block(&full, &kept, j);
            assert_same_block(&full, &resumed, j);
        }
        assert_true(full.first[blocks] > full.first[k]); /* it recycled after the import */
        assert_true(resumed.n[resumed.first[k]].number > total);
        tu_assert_same_vocab(e1, e2);
        trace_free(&full);
        trace_free(&resumed);
        trace_free(&kept);
        pr_out_free(o);
        pr_block_free(b);
        pr_engine_free(e1);
        pr_engine_free(e2);
        tu_rmdir(strdup(sub));
    }
    tu_rmdir(dir);
}

/* An export's eviction state is refused, with the way out, by a pipeline
 * with other eviction settings; its first three columns alone still import
 * (fresh statistics, notice numbers from 1). Files of different exports and
 * a second state line are refused, leaving the engine as it was. */
static void test_export_state_refused_elsewhere(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char sub[512], plain[600], cmd[2048], err[512];
    snprintf(sub, sizeof(sub), "%s/export", dir);
    snprintf(plain, sizeof(plain), "%s/plain", dir);
    const scen *sc = &scenarios[0]; /* lru */
    pr_pipeline_spec s, sttl, snone;
    spec_for(&s, sc);
    spec_for(&sttl, &scenarios[7]); /* ttl_s */
    spec_for(&snone, sc);
    for (int c = 0; c < NCOL; c++)
        snone.sparse[c].eviction = PR_EVICT_NONE;
    pr_block *b = pr_block_new(1, NCOL, ROWS, true);
    pr_engine *e = tu_engine(&s, "cpu", 1);
    pr_out *o = tu_out(e, b);
    for (int j = 0; j < 3; j++) {
        fill_block(b, sc, 2, j);
        tu_process(e, b, o);
    }
    assert_int_equal(pr_vocab_export(e, sub, err, sizeof(err)), 0);
    const pr_pipeline_spec *other[] = {&sttl, &snone};
    for (int i = 0; i < 2; i++) {
        pr_engine *e2 = tu_engine(other[i], "cpu", 1);
        assert_int_equal(pr_vocab_import(e2, sub, err, sizeof(err)), PR_EINVAL);
        assert_non_null(strstr(err, "eviction state of a pipeline with eviction by lookups"));
        assert_non_null(strstr(err, "cut -f1-3"));
        pr_engine_free(e2);
    }
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s' && for f in '%s'/*.tsv; do grep -v '^#!' \"$f\" | cut -f1-3 > "
             "'%s'/$(basename \"$f\"); done",
             plain, sub, plain);
    assert_int_equal(system(cmd), 0);
    pr_engine *e3 = tu_engine(&sttl, "cpu", 1);
    if (pr_vocab_import(e3, plain, err, sizeof(err)))
        fail_msg("plain import: %s", err);
    assert_int_equal(pr_engine_vocab_recycled_total(e3), 0);
    pr_engine_free(e3);
    /* files of different exports; a state line twice */
    const char *edits[] = {"s/notice_next [0-9]*/notice_next 7/", "2p"};
    const char *why[] = {"come from different exports", "must come once, before the entries"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd), "sed -i '%s' '%s/C2.tsv'", edits[i], sub);
        assert_int_equal(system(cmd), 0);
        pr_engine *e4 = tu_engine(&s, "cpu", 1);
        assert_int_not_equal(pr_vocab_import(e4, sub, err, sizeof(err)), 0);
        if (!strstr(err, why[i]))
            fail_msg("edit %d: %s", i, err);
        assert_int_equal(pr_engine_vocab_recycled_total(e4), 0);
        pr_engine_free(e4);
    }
    pr_out_free(o);
    pr_engine_free(e);
    pr_block_free(b);
    tu_rmdir(dir);
}

/* ttl_s needs every row's event time: a block without them is refused
 * before anything changes (offline files have none). */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_restore_same_notices),
        cmocka_unit_test(test_snapshot_keeps_undelivered_notices),
        cmocka_unit_test(test_journal_replay_same_notices),
        cmocka_unit_test(test_ttl_s_restart),
        cmocka_unit_test(test_ttl_s_files_refused),
        cmocka_unit_test(test_export_import_same_notices),
        cmocka_unit_test(test_export_state_refused_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
