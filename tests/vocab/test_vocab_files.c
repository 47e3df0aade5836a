/*
 * test_vocab_files.c — the vocabulary's files (vocab/): text export and
 * import (seeds), snapshots, and the journal through a crash: recovery
 * restores every index handed out, a torn or garbage tail is cut, a gap
 * between snapshot and journal is refused. (Eviction's files:
 * tests/engine/test_engine_evict.c; earlier releases' files:
 * test_vocab_compat.c.)
 */
#include "engine_test_util.h"

#include <sys/stat.h>

#include "pr_vocab.h"

static pr_engine *small_engine(pr_pipeline_spec *s, int threads)
{
    tu_spec(s, 2, 4, PR_VOCAB_DEFAULT, 1000, true, true);
    s->sparse[1].min_count = 2;
    s->sparse[3].modulus = 1ULL << 32; /* hash table column */
    return tu_engine(s, NULL, threads);
}

static void test_vocab_export(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_engine *e = small_engine(&s, 1);
    pr_block *b = pr_block_new(2, 4, 64, false);
    const char *v[] = {"3e9", "1", "", "1"}; /* 0x3e9 = 1001 -> 1 mod 1000 */
    for (uint32_t r = 0; r < 4; r++)
        for (uint32_t c = 0; c < 4; c++)
            pr_block_put_hex(b, c, r, v[r], strlen(v[r]));
    b->rows = 4;
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    char *dir = tu_tmpdir();
    char sub[512], path[600], err[256];
    snprintf(sub, sizeof(sub), "%s/vocab", dir);
    assert_int_equal(pr_vocab_export(e, sub, err, sizeof(err)), 0);
    snprintf(path, sizeof(path), "%s/C1.tsv", sub);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256];
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(strstr(line, "# piperec vocabulary"));
    assert_non_null(strstr(line, "column C1"));
    assert_non_null(strstr(line, "profile default"));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "# index\tvalue_hex\tcount\n");
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "2\t1\t0\n");
    assert_null(fgets(line, sizeof(line), f));
    fclose(f);
    /* min_count 2 column: 1 seen 3 times (assigned), counts kept */
    snprintf(path, sizeof(path), "%s/C2.tsv", sub);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "2\t1\t3\n");
    fclose(f);
    snprintf(path, sizeof(path), "%s/C4.tsv", sub);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "2\t3e9\t0\n");
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "3\t1\t0\n");
    fclose(f);
    tu_rmdir(dir);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* export -> import into a fresh engine: same vocabulary (pending min_count
 * entries included), and both continue identically. */
static void test_vocab_import_roundtrip(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_engine *e = small_engine(&s, 1);
    pr_block *b = pr_block_new(2, 4, 64, false);
    uint64_t seed = 7;
    for (uint32_t r = 0; r < 64; r++)
        for (uint32_t c = 0; c < 4; c++)
            tu_put_hex_u64(b, c, r, tu_skewed(&seed, 3000));
    b->rows = 64;
    pr_out *o = tu_out(e, b), *o2 = tu_out(e, b);
    tu_process(e, b, o);
    char *dir = tu_tmpdir();
    char sub[512], err[512] = "";
    snprintf(sub, sizeof(sub), "%s/vocab", dir);
    assert_int_equal(pr_vocab_export(e, sub, err, sizeof(err)), 0);
    pr_engine *f = tu_engine(&s, NULL, 1);
    int rc = pr_vocab_import(f, sub, err, sizeof(err));
    if (rc)
        print_error("import: %s\n", err);
    assert_int_equal(rc, 0);
    tu_assert_same_vocab(e, f);
    /* A second import into a populated engine is refused. */
    assert_int_equal(pr_vocab_import(f, sub, err, sizeof(err)), PR_ESTATE);
    for (uint32_t r = 0; r < 64; r++)
        for (uint32_t c = 0; c < 4; c++)
            tu_put_hex_u64(b, c, r, tu_skewed(&seed, 3000));
    tu_process(e, b, o);
    tu_process(f, b, o2);
    tu_assert_same_out(o, o2);
    tu_assert_same_vocab(e, f);
    tu_rmdir(dir);
    pr_engine_free(f);
    pr_out_free(o2);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* A hand-written seed, lines out of order and without counts: indices are
 * kept and new values continue after the largest; a gap names file:line. */
static void test_vocab_import_seed(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DEFAULT, 1000, true, true);
    pr_engine *e = tu_engine(&s, NULL, 1);
    char *dir = tu_tmpdir();
    char path[600], err[512] = "";
    snprintf(path, sizeof(path), "%s/C1.tsv", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("# another system's dictionary\n4\t3E7\n2\t10\n3\t5\n", fp);
    fclose(fp);
    assert_int_equal(pr_vocab_import(e, dir, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_vocab_size(e, 0), 5);
    pr_block *b = pr_block_new(0, 1, 64, false);
    const char *v[] = {"5", "63", "3e7", "10", ""};
    for (uint32_t r = 0; r < 5; r++)
        pr_block_put_hex(b, 0, r, v[r], strlen(v[r]));
    b->rows = 5;
    pr_out *o = tu_out(e, b);
    tu_process(e, b, o);
    const int64_t want[] = {3, 5, 4, 2, 0};
    for (uint32_t r = 0; r < 5; r++)
        assert_int_equal(pr_out_index(o, 0, r), want[r]);
    pr_engine *g = tu_engine(&s, NULL, 1);
    fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("2\t10\n4\t5\n", fp);
    fclose(fp);
    assert_int_equal(pr_vocab_import(g, dir, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "C1.tsv:2: index 4 leaves a gap: index 3 is missing"));
    assert_int_equal(pr_engine_vocab_size(g, 0), 2);
    pr_engine_free(g);
    tu_rmdir(dir);
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    pr_engine *a = small_engine(&s, 2);
    pr_block *b = pr_block_new(2, 4, 4096, false);
    pr_out *oa = tu_out(a, b), *ob = tu_out(a, b);
    uint64_t seed = 99;
    for (int k = 0; k < 3; k++) {
        tu_gen_block(b, &seed, 4000);
        tu_process(a, b, oa);
    }
    char *dir = tu_tmpdir();
    char path[600], err[512] = "";
    snprintf(path, sizeof(path), "%s/vocab.snap", dir);
    assert_int_equal(pr_vocab_save(a, path, err, sizeof(err)), 0);
    struct stat st;
    char tmp[700];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    assert_int_not_equal(stat(tmp, &st), 0); /* renamed away */

    pr_engine *bb = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_load(bb, path, err, sizeof(err)), 0);
    tu_assert_same_vocab(a, bb);
    for (int k = 0; k < 3; k++) {
        tu_gen_block(b, &seed, 4000);
        tu_process(a, b, oa);
        tu_process(bb, b, ob);
        tu_assert_same_out(oa, ob);
    }
    tu_assert_same_vocab(a, bb);
    pr_engine_free(bb);

    /* different spec -> fingerprint mismatch */
    pr_pipeline_spec s2 = s;
    s2.sparse[2].modulus = 999;
    pr_engine *c = tu_engine(&s2, NULL, 1);
    err[0] = 0;
    assert_int_equal(pr_vocab_load(c, path, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "different pipeline spec"));
    pr_engine_free(c);

    /* corrupt byte -> checksum error, state untouched */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 40, SEEK_SET);
    int byte = fgetc(f);
    fseek(f, 40, SEEK_SET);
    fputc(0x5a ^ byte, f);
    fclose(f);
    c = tu_engine(&s, NULL, 1);
    assert_int_not_equal(pr_vocab_load(c, path, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "corrupt"));
    assert_int_equal(pr_engine_vocab_size(c, 0), 2);
    pr_engine_free(c);
    /* not a snapshot at all */
    c = tu_engine(&s, NULL, 1);
    f = fopen(path, "wb");
    fputs("hello", f);
    fclose(f);
    assert_int_equal(pr_vocab_load(c, path, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "not a piperec snapshot"));
    pr_engine_free(c);

    tu_rmdir(dir);
    pr_out_free(oa);
    pr_out_free(ob);
    pr_block_free(b);
    pr_engine_free(a);
}

static void test_journal_crash_recovery(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 2, 4, PR_VOCAB_DLRM, 1 << 16, true, true);
    s.sparse[3].modulus = 1ULL << 33; /* hash column, int64 output */
    const int n_blocks = 8, crash_after = 5, checkpoint_after = 2;
    pr_block *blocks[8];
    uint64_t seed = 7;
    for (int k = 0; k < n_blocks; k++) {
        blocks[k] = pr_block_new(2, 4, 2048, false);
        tu_gen_block(blocks[k], &seed, 2000);
    }
    char *dir = tu_tmpdir();
    char snap[600], jr[600], err[512] = "";
    snprintf(snap, sizeof(snap), "%s/vocab.snap", dir);
    snprintf(jr, sizeof(jr), "%s/vocab.journal", dir);

    /* reference: uninterrupted */
    pr_engine *ref = tu_engine(&s, NULL, 2);
    pr_out *oref[8];
    for (int k = 0; k < n_blocks; k++) {
        oref[k] = tu_out(ref, blocks[k]);
        tu_process(ref, blocks[k], oref[k]);
    }

    /* crashing run */
    pr_engine *a = tu_engine(&s, NULL, 2);
    assert_int_equal(pr_vocab_journal_open(a, jr, err, sizeof(err)), 0);
    pr_out *o = tu_out(a, blocks[0]);
    for (int k = 0; k < crash_after; k++) {
        tu_process(a, blocks[k], o);
        tu_assert_same_out(o, oref[k]);
        if (k + 1 == checkpoint_after)
            assert_int_equal(pr_vocab_checkpoint(a, snap, NULL, err, sizeof(err)), 0);
    }
    pr_engine_free(a); /* crash: nothing saved after the checkpoint */
    /* and a torn record at the end */
    FILE *f = fopen(jr, "ab");
    fwrite("\x01\x02\x03\x04\x05", 1, 5, f);
    fclose(f);

    pr_engine *b = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_load(b, snap, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_journal_replay(b, jr, err, sizeof(err)), 0);
    /* replaying twice is harmless (records already present are checked) */
    assert_int_equal(pr_vocab_journal_replay(b, jr, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_journal_open(b, jr, err, sizeof(err)), 0);
    for (int k = crash_after; k < n_blocks; k++) {
        tu_process(b, blocks[k], o);
        tu_assert_same_out(o, oref[k]);
    }
    tu_assert_same_vocab(ref, b);
    pr_engine_free(b);

    /* a second crash right away: snapshot (old) + journal (now longer) */
    pr_engine *c = tu_engine(&s, NULL, 3);
    assert_int_equal(pr_vocab_load(c, snap, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_journal_replay(c, jr, err, sizeof(err)), 0);
    tu_assert_same_vocab(ref, c);
    pr_engine_free(c);

    /* journal of another spec is refused */
    pr_pipeline_spec s2 = s;
    s2.sparse[0].modulus = 77;
    c = tu_engine(&s2, NULL, 1);
    assert_int_equal(pr_vocab_journal_replay(c, jr, err, sizeof(err)), PR_EINVAL);
    assert_int_equal(pr_vocab_journal_open(c, jr, err, sizeof(err)), PR_EINVAL);
    pr_engine_free(c);

    /* checkpoint truncates the journal to its header */
    pr_engine *d = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_journal_open(d, jr, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_checkpoint(d, snap, jr, err, sizeof(err)), 0); /* truncates */
    pr_vocab_journal_close(d);
    struct stat st;
    assert_int_equal(stat(jr, &st), 0);
    assert_int_equal(st.st_size, 24);
    pr_engine_free(d);

    for (int k = 0; k < n_blocks; k++) {
        pr_out_free(oref[k]);
        pr_block_free(blocks[k]);
    }
    pr_out_free(o);
    pr_engine_free(ref);
    tu_rmdir(dir);
}

/* A crash can leave a whole record of garbage (zeros: the size reached the
 * disk, the data did not) at the journal's end. Replay stops there; the
 * journal opened after it must not keep it, or every index journaled after
 * the restart sits behind it and is lost at the next crash. */
static void test_journal_aligned_garbage_tail(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 2, 4, PR_VOCAB_DLRM, 1 << 16, true, true);
    pr_block *blocks[2];
    uint64_t seed = 11;
    for (int k = 0; k < 2; k++) {
        blocks[k] = pr_block_new(2, 4, 2048, false);
        tu_gen_block(blocks[k], &seed, 2000);
    }
    char *dir = tu_tmpdir();
    char jr[600], err[512] = "";
    snprintf(jr, sizeof(jr), "%s/vocab.journal", dir);
    pr_engine *ref = tu_engine(&s, NULL, 1);
    pr_out *o = tu_out(ref, blocks[0]);
    for (int k = 0; k < 2; k++)
        tu_process(ref, blocks[k], o);

    pr_engine *a = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_journal_open(a, jr, err, sizeof(err)), 0);
    tu_process(a, blocks[0], o);
    pr_engine_free(a); /* crash */
    static const unsigned char zeros[24];
    FILE *f = fopen(jr, "ab");
    assert_int_equal(fwrite(zeros, 1, sizeof(zeros), f), sizeof(zeros));
    fclose(f);

    pr_engine *b = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_journal_replay(b, jr, err, sizeof(err)), 0);
    assert_int_equal(pr_vocab_journal_open(b, jr, err, sizeof(err)), 0);
    tu_process(b, blocks[1], o);
    pr_engine_free(b); /* crash again, no checkpoint */

    pr_engine *c = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_journal_replay(c, jr, err, sizeof(err)), 0);
    tu_assert_same_vocab(ref, c);
    pr_engine_free(c);

    for (int k = 0; k < 2; k++)
        pr_block_free(blocks[k]);
    pr_out_free(o);
    pr_engine_free(ref);
    tu_rmdir(dir);
}

static void test_journal_gap_detected(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    tu_spec(&s, 0, 1, PR_VOCAB_DLRM, 1000, true, true);
    char *dir = tu_tmpdir();
    char jr[600], err[512] = "";
    snprintf(jr, sizeof(jr), "%s/j", dir);
    pr_engine *a = tu_engine(&s, NULL, 1);
    const char *v1[] = {"1", "2"}, *v2[] = {"3"};
    int64_t got[2];
    tu_run_column(a, v1, 2, got); /* before the journal: only in a snapshot */
    assert_int_equal(pr_vocab_journal_open(a, jr, err, sizeof(err)), 0);
    tu_run_column(a, v2, 1, got);
    assert_int_equal(got[0], 2);
    pr_engine_free(a);
    pr_engine *b = tu_engine(&s, NULL, 1);
    assert_int_equal(pr_vocab_journal_replay(b, jr, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "jumps from index 0 to 2"));
    pr_engine_free(b);
    tu_rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_export),
        cmocka_unit_test(test_vocab_import_roundtrip),
        cmocka_unit_test(test_vocab_import_seed),
        cmocka_unit_test(test_snapshot_roundtrip),
        cmocka_unit_test(test_journal_crash_recovery),
        cmocka_unit_test(test_journal_aligned_garbage_tail),
        cmocka_unit_test(test_journal_gap_detected),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
