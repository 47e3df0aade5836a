/*
 * test_vocab_compat.c — state dirs written by an earlier release restore
 * with the same indices and notices (issue 18): the fixtures of
 * fixtures/README.md, restored directly and after a checkpoint that rewrites
 * them in today's format, must print exactly what the release printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "compat_scenario.h"
#include "pr_vocab.h"

#define FIX_DIR PR_SOURCE_DIR "/tests/vocab/fixtures"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *buf = slurp(from, &n);
    assert_non_null(buf);
    FILE *f = fopen(to, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(buf);
}

static uint32_t file_u32_at(const char *path, long off)
{
    uint32_t v = 0;
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fread(&v, 4, 1, f), 1);
    fclose(f);
    return v;
}

static pr_engine *new_engine(const cs_case *cc)
{
    pr_pipeline_spec spec;
    cc->spec(&spec);
    char err[256];
    pr_engine *eng = pr_engine_new(&spec, NULL, err, sizeof(err));
    if (!eng)
        fail_msg("%s: %s", cc->name, err);
    return eng;
}

/* Restore dir/<case>.* into a fresh engine; the tag line for tagged cases. */
static pr_engine *restore(const cs_case *cc, const char *dir, FILE *dump)
{
    char snap[1024], jr[1024], err[512];
    snprintf(snap, sizeof(snap), "%s/%s.vocab", dir, cc->name);
    snprintf(jr, sizeof(jr), "%s/%s.journal", dir, cc->name);
    pr_engine *eng = new_engine(cc);
    if (cc->tagged) {
        char tag[PR_SNAPSHOT_TAG_MAX + 1];
        uint32_t tl = 0;
        if (pr_vocab_load_tagged(eng, snap, tag, PR_SNAPSHOT_TAG_MAX, &tl, err, sizeof(err)))
            fail_msg("%s: %s", cc->name, err);
        tag[tl] = '\0';
        fprintf(dump, "tag %s\n", tag);
    } else if (pr_vocab_load(eng, snap, err, sizeof(err)) ||
               pr_vocab_journal_replay(eng, jr, err, sizeof(err))) {
        fail_msg("%s: %s", cc->name, err);
    }
    return eng;
}

/* Run on from a restored engine and compare with <case>.expected. */
static void finish_and_compare(const cs_case *cc, pr_engine *eng, FILE *dump, char **text,
                               const char *how)
{
    fprintf(dump, "pending %u\n", pr_engine_vocab_notices_pending(eng));
    assert_int_equal(cs_run_blocks(eng, CS_BLOCKS_A, CS_BLOCKS_A + CS_BLOCKS_B, dump, false), 0);
    cs_dump_vocab(dump, eng);
    fclose(dump);
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.expected", FIX_DIR, cc->name);
    size_t n = 0;
    char *want = slurp(path, &n);
    assert_non_null(want);
    if (strcmp(*text, want) != 0) {
        fprintf(stderr, "%s (%s): restored state differs from the release's:\n--- got\n%s",
                cc->name, how, *text);
        fail();
    }
    free(want);
    free(*text);
}

/* The tag line comes before "pending" in the release's dump. */
static void check_direct(const cs_case *cc)
{
    char *text = NULL;
    size_t len = 0;
    FILE *dump = open_memstream(&text, &len);
    pr_engine *eng = restore(cc, FIX_DIR, dump);
    finish_and_compare(cc, eng, dump, &text, "direct");
    pr_engine_free(eng);
}

/* Restore, checkpoint into a scratch state dir (today's format), restore
 * that into a fresh engine, then run on. */
static void check_upgraded(const cs_case *cc)
{
    char dir[] = "/tmp/pr_vocab_compat_XXXXXX", snap[1024], jr[1024], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(snap, sizeof(snap), "%s/%s.vocab", dir, cc->name);
    snprintf(jr, sizeof(jr), "%s/%s.journal", dir, cc->name);
    char from[1024];
    snprintf(from, sizeof(from), "%s/%s.vocab", FIX_DIR, cc->name);
    copy_file(from, snap);
    if (!cc->tagged) {
        snprintf(from, sizeof(from), "%s/%s.journal", FIX_DIR, cc->name);
        copy_file(from, jr);
    }
    char *scratch = NULL;
    size_t slen = 0;
    FILE *sink = open_memstream(&scratch, &slen);
    pr_engine *eng = restore(cc, dir, sink);
    fclose(sink);
    free(scratch);
    if (cc->tagged) {
        assert_int_equal(
            pr_vocab_save_tagged(eng, snap, CS_TAG, sizeof(CS_TAG) - 1, err, sizeof(err)), 0);
    } else {
        if (pr_vocab_journal_open(eng, jr, err, sizeof(err)) ||
            pr_vocab_checkpoint(eng, snap, NULL, err, sizeof(err)))
            fail_msg("%s: %s", cc->name, err);
    }
    pr_engine_free(eng);
    assert_int_equal(
        file_u32_at(snap, 8),
        6); /* upgraded: version 6 for the Criteo layout (7 only with input fingerprints) */
    if (!cc->tagged)
        assert_int_equal(file_u32_at(jr, 0), 0x4a565250); /* "PRVJ" */

    char *text = NULL;
    size_t len = 0;
    FILE *dump = open_memstream(&text, &len);
    eng = restore(cc, dir, dump);
    finish_and_compare(cc, eng, dump, &text, "after an upgrading checkpoint");
    pr_engine_free(eng);
    unlink(snap);
    unlink(jr);
    rmdir(dir);
}

/* Open the release's journal for appending (which rewrites it in today's
 * format, records kept), then restore the release's snapshot with it. */
static void check_converted_journal(const cs_case *cc)
{
    if (cc->tagged)
        return;
    char dir[] = "/tmp/pr_vocab_compat_XXXXXX", snap[1024], jr[1024], from[1024], err[512];
    assert_non_null(mkdtemp(dir));
    snprintf(snap, sizeof(snap), "%s/%s.vocab", dir, cc->name);
    snprintf(jr, sizeof(jr), "%s/%s.journal", dir, cc->name);
    snprintf(from, sizeof(from), "%s/%s.vocab", FIX_DIR, cc->name);
    copy_file(from, snap);
    snprintf(from, sizeof(from), "%s/%s.journal", FIX_DIR, cc->name);
    copy_file(from, jr);
    pr_engine *eng = new_engine(cc);
    if (pr_vocab_journal_open(eng, jr, err, sizeof(err)))
        fail_msg("%s: %s", cc->name, err);
    pr_engine_free(eng);
    char magic[9] = "";
    FILE *f = fopen(jr, "rb");
    assert_non_null(f);
    assert_int_equal(fread(magic, 1, 8, f), 8);
    fclose(f);
    assert_string_equal(magic, "PRVJRNL4");

    char *text = NULL;
    size_t len = 0;
    FILE *dump = open_memstream(&text, &len);
    eng = restore(cc, dir, dump);
    finish_and_compare(cc, eng, dump, &text, "with its journal converted");
    pr_engine_free(eng);
    unlink(snap);
    unlink(jr);
    rmdir(dir);
}

static void test_compat(void **state)
{
    (void)state;
    for (size_t i = 0; i < CS_N_CASES; i++) {
        check_direct(&cs_cases[i]);
        check_upgraded(&cs_cases[i]);
        check_converted_journal(&cs_cases[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_compat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
