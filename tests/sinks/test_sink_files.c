/*
 * test_sink_files.c — the files sink's acknowledgement rule: batches are
 * acked only when their roll is closed (full, or older than roll_max_ms at
 * a poll: manual clock), fsync'd and renamed to batches-<epoch>-<first>-<last>; an
 * open roll is invisible (.tmp- prefix) and removed when the sink closes.
 * Content is read back with pr_npy_read. (numpy reads it in files_numpy.sh.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "pr_npy.h"
#include "pr_sink.h"

static uint64_t acked[64];
static size_t n_acked;

static void on_ack(void *opaque, uint64_t seq)
{
    (void)opaque;
    acked[n_acked++] = seq;
}

static bool exists(const char *dir, const char *name)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

static pr_batch *batch(uint64_t seq, uint32_t rows)
{
    pr_batch *b = pr_batch_new("files", rows, 2, 1, 8);
    b->seq = seq;
    b->epoch = 7; /* roll names carry it: batches-7-<first>-<last> */
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(seq * 100 + r);
        b->dense[r] = (float)seq;
        b->dense[rows + r] = (float)r;
        ((int64_t *)b->sparse)[r] = (int64_t)seq << 33;
    }
    return b;
}

static void test_roll_and_ack(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/test-tmp/test_sink_files", PR_BINARY_DIR);
    char cmd[2600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    assert_int_equal(system(cmd), 0);

    pr_manual_clock mc;
    pr_manual_clock_init(&mc, 1700000000000LL);
    pr_sink_cfg cfg = {
        .pipeline = "files", .n_dense = 2, .n_sparse = 1, .sparse_width = 8, .clock = &mc.clock};
    cfg.files.dir = dir;
    cfg.files.roll_batches = 2;
    cfg.files.roll_max_ms = 500;
    pr_sink *s;
    char err[512];
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &cfg, &s, err, sizeof(err)), 0);
    assert_true(pr_sink_ready(s));

    for (uint64_t q = 1; q <= 3; q++) {
        pr_batch *b = batch(q, 3);
        assert_int_equal(pr_batch_encode(b), 0);
        assert_int_equal(pr_sink_send(s, b), 0);
        pr_batch_unref(b);
    }
    /* Roll 1-2 closed at its 2nd batch; 3 sits in an open roll. */
    assert_int_equal(pr_sink_poll(s, on_ack, NULL), 2);
    assert_int_equal(acked[0], 1);
    assert_int_equal(acked[1], 2);
    assert_true(exists(dir, "batches-7-1-2/meta.json"));
    assert_true(exists(dir, ".tmp-batches-7-3/dense.npy"));
    mc.mono_ns += 499 * 1000000LL;
    assert_int_equal(pr_sink_poll(s, on_ack, NULL), 0);
    mc.mono_ns += 1000000LL;
    assert_int_equal(pr_sink_poll(s, on_ack, NULL), 1); /* roll_max_ms reached */
    assert_int_equal(acked[2], 3);
    assert_true(exists(dir, "batches-7-3-3/labels.npy"));
    assert_false(exists(dir, ".tmp-batches-7-3"));

    pr_npy_array a;
    char p[1024];
    snprintf(p, sizeof(p), "%s/batches-7-1-2/dense.npy", dir);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 6);
    assert_int_equal(a.cols, 2);
    assert_true(pr_npy_get(&a, 4, 0) == 2.0 && pr_npy_get(&a, 4, 1) == 1.0);
    pr_npy_array_fini(&a);
    snprintf(p, sizeof(p), "%s/batches-7-1-2/sparse.npy", dir);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.dtype, PR_NPY_I64);
    assert_true(pr_npy_get(&a, 5, 0) == (double)(2LL << 33));
    pr_npy_array_fini(&a);

    /* An open roll is thrown away at close, unacked. */
    pr_batch *b = batch(4, 1);
    assert_int_equal(pr_sink_send(s, b), 0);
    pr_batch_unref(b);
    assert_true(exists(dir, ".tmp-batches-7-4"));
    pr_sink_free(s);
    assert_false(exists(dir, ".tmp-batches-7-4"));
    assert_int_equal(n_acked, 3);

    /* What a kill -9 leaves (an unfinished roll, a jagged one with its
     * sparse/) is removed when the sink opens; finished rolls stay. */
    snprintf(cmd, sizeof(cmd),
             "mkdir -p '%s/.tmp-batches-7-9/sparse' && touch '%s/.tmp-batches-7-9/dense.npy' "
             "'%s/.tmp-batches-7-9/sparse/u.values.npy' && mkdir '%s/.tmp-batches-8-1'",
             dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &cfg, &s, err, sizeof(err)), 0);
    assert_false(exists(dir, ".tmp-batches-7-9"));
    assert_false(exists(dir, ".tmp-batches-8-1"));
    assert_true(exists(dir, "batches-7-1-2/meta.json"));
    assert_true(exists(dir, "batches-7-3-3/labels.npy"));
    /* a second sink on the directory (another process, or a config mistake)
     * is refused while this one holds it, and welcome once it is gone */
    pr_sink *s2 = NULL;
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &cfg, &s2, err, sizeof(err)), PR_ESTATE);
    assert_non_null(strstr(err, "is the files sink of another process"));
    pr_sink_free(s);
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &cfg, &s2, err, sizeof(err)), 0);
    pr_sink_free(s2);
}

/* The jagged set (pr_npy_jagged, issue 20): rows appended, then continued
 * from a cut-back point (values cut to the kept rows' lengths), as `piperec
 * consume --output` does after a checkpoint. */
static void test_jagged_set_resume(void **state)
{
    (void)state;
    char dir[512], err[512], p[1024];
    snprintf(dir, sizeof(dir), "%s/test-tmp/test_sink_files_jagged", PR_BINARY_DIR);
    snprintf(p, sizeof(p), "rm -rf '%s'", dir);
    assert_int_equal(system(p), 0);
    const char *names[2] = {"user", "hist"};
    pr_npy_jagged *j;
    assert_int_equal(pr_npy_jagged_open(&j, dir, 1, 0, 2, names, false, 0, err, sizeof(err)), 0);
    float lab[3] = {1, 0, 1};
    int32_t len[6] = {1, 1, 1, 2, 0, 3};
    int64_t val[8] = {10, 11, 12, 100, 101, 120, 121, 122};
    assert_int_equal(pr_npy_jagged_append(j, 3, lab, NULL, len, val, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_jagged_close(j, true, err, sizeof(err)), 0);
    /* keep 2 rows: hist keeps 2 values; then one more row */
    assert_int_equal(pr_npy_jagged_open(&j, dir, 1, 0, 2, names, true, 2, err, sizeof(err)), 0);
    float lab2[1] = {0};
    int32_t len2[2] = {1, 1};
    int64_t val2[2] = {13, 130};
    assert_int_equal(pr_npy_jagged_append(j, 1, lab2, NULL, len2, val2, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_jagged_close(j, false, err, sizeof(err)), 0);
    pr_npy_array a;
    snprintf(p, sizeof(p), "%s/sparse/hist.values.npy", dir);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 3);
    assert_true(pr_npy_get(&a, 1, 0) == 101 && pr_npy_get(&a, 2, 0) == 130);
    pr_npy_array_fini(&a);
    snprintf(p, sizeof(p), "%s/sparse/hist.lengths.npy", dir);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 3);
    assert_true(pr_npy_get(&a, 2, 0) == 1);
    pr_npy_array_fini(&a);
    snprintf(p, sizeof(p), "%s/labels.npy", dir);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 3);
    assert_int_equal(a.cols, 1);
    pr_npy_array_fini(&a);
    snprintf(p, sizeof(p), "%s/dense.npy", dir);
    struct stat st;
    assert_int_not_equal(stat(p, &st), 0); /* no dense features: no dense.npy */
    /* a feature name that cannot be a file name */
    const char *bad[1] = {"../x"};
    assert_int_equal(pr_npy_jagged_open(&j, dir, 0, 0, 1, bad, false, 0, err, sizeof(err)),
                     PR_EINVAL);
}

static void test_bad_dir(void **state)
{
    (void)state;
    pr_sink_cfg cfg = {.pipeline = "files", .n_dense = 1, .n_sparse = 1, .sparse_width = 4};
    pr_sink *s;
    char err[512];
    assert_int_equal(pr_sink_new(&pr_sink_files_ops, &cfg, &s, err, sizeof(err)), PR_EINVAL);
    cfg.files.dir = "/proc/nonexistent/x";
    assert_true(pr_sink_new(&pr_sink_files_ops, &cfg, &s, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "sinks.files.dir"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roll_and_ack),
        cmocka_unit_test(test_bad_dir),
        cmocka_unit_test(test_jagged_set_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
