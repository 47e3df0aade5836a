/*
 * test_npy.c — the .npy writer/reader (sinks/npy.c): streaming writes of
 * column-major blocks (stored C order), whole-array Fortran-order writes, 1-D
 * and int64 arrays, the reserved header rewritten at close, abort, and I/O
 * errors naming the path; PR_NPY_DIRECT (O_DIRECT, whole blocks) giving the
 * same bytes as buffered writes. numpy itself reads these files in the script test
 * test_offline_cli (np.load on the process output and on npy_fixture files).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_npy.h"

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "%s/test-tmp/test_npy", PR_BINARY_DIR);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *out, size_t n, const char *name)
{
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void test_stream_cols(void **state)
{
    (void)state;
    char path[512], err[256];
    path_of(path, sizeof(path), "stream.npy");
    enum { COLS = 3, STRIDE = 64 };
    float blk[COLS * STRIDE];
    pr_npy_writer *w;
    assert_int_equal(pr_npy_open(&w, path, PR_NPY_F32, COLS, err, sizeof(err)), 0);
    /* 2 blocks: 10 then 50 rows; value = global row * 10 + col. */
    uint32_t base = 0;
    for (int k = 0; k < 2; k++) {
        uint32_t rows = k ? 50 : 10;
        for (uint32_t c = 0; c < COLS; c++)
            for (uint32_t r = 0; r < rows; r++)
                blk[c * STRIDE + r] = (float)((base + r) * 10 + c);
        assert_int_equal(pr_npy_append_cols(w, blk, STRIDE, rows, err, sizeof(err)), 0);
        base += rows;
    }
    assert_int_equal(pr_npy_rows(w), 60);
    assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);

    pr_npy_array a;
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.dtype, PR_NPY_F32);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.n, 60);
    assert_int_equal(a.cols, COLS);
    assert_false(a.fortran);
    for (uint32_t r = 0; r < 60; r++)
        for (uint32_t c = 0; c < COLS; c++)
            assert_true(pr_npy_get(&a, r, c) == r * 10 + c);
    pr_npy_array_fini(&a);
    /* Data starts at a 64-byte aligned offset: header is 128 bytes. */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    assert_int_equal(ftell(f), 128 + 60 * COLS * 4);
    fclose(f);
}

static void test_stream_large_i64_and_1d(void **state)
{
    (void)state;
    char path[512], path1[512], err[256];
    path_of(path, sizeof(path), "i64.npy");
    path_of(path1, sizeof(path1), "labels.npy");
    /* More than the writer's 1 MiB buffer, to cross flushes. */
    enum { COLS = 5, ROWS = 100000 };
    int64_t *m = malloc(sizeof(int64_t) * COLS * ROWS);
    int32_t *l = malloc(sizeof(int32_t) * ROWS);
    for (uint32_t c = 0; c < COLS; c++)
        for (uint32_t r = 0; r < ROWS; r++)
            m[(size_t)c * ROWS + r] = (int64_t)r * 1000003 + c - 5000000000ll;
    for (uint32_t r = 0; r < ROWS; r++)
        l[r] = (int32_t)r - 7;
    pr_npy_writer *w, *wl;
    assert_int_equal(pr_npy_open(&w, path, PR_NPY_I64, COLS, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_open(&wl, path1, PR_NPY_I32, 0, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_append_cols(w, m, ROWS, ROWS, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_append_cols(wl, l, ROWS, ROWS, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_close(wl, err, sizeof(err)), 0);
    pr_npy_array a;
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.dtype, PR_NPY_I64);
    assert_int_equal(a.n, ROWS);
    for (uint32_t r = 0; r < ROWS; r += 997)
        for (uint32_t c = 0; c < COLS; c++)
            assert_true(((int64_t *)a.data)[(size_t)r * COLS + c] == m[(size_t)c * ROWS + r]);
    pr_npy_array_fini(&a);
    assert_int_equal(pr_npy_read(path1, &a, err, sizeof(err)), 0);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.n, ROWS);
    assert_memory_equal(a.data, l, sizeof(int32_t) * ROWS);
    pr_npy_array_fini(&a);
    free(m);
    free(l);
}

static void test_rows_and_fortran_array(void **state)
{
    (void)state;
    char path[512], err[256];
    int32_t colmajor[2 * 4] = {1, 2, 3, 4, 10, 20, 30, 40}; /* [4, 2] */
    path_of(path, sizeof(path), "fortran.npy");
    assert_int_equal(pr_npy_write_array(path, PR_NPY_I32, colmajor, 4, 2, true, err, sizeof(err)),
                     0);
    pr_npy_array a;
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_true(a.fortran);
    assert_int_equal(a.n, 4);
    assert_int_equal(a.cols, 2);
    assert_true(pr_npy_get(&a, 2, 1) == 30);
    assert_true(pr_npy_get(&a, 3, 0) == 4);
    pr_npy_array_fini(&a);

    path_of(path, sizeof(path), "rows.npy");
    int32_t rowmajor[] = {1, 10, 2, 20, 3, 30};
    pr_npy_writer *w;
    assert_int_equal(pr_npy_open(&w, path, PR_NPY_I32, 2, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_append_rows(w, rowmajor, 3, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 3);
    assert_true(pr_npy_get(&a, 2, 1) == 30);
    pr_npy_array_fini(&a);
}

static void test_empty_abort_and_errors(void **state)
{
    (void)state;
    char path[512], err[256];
    pr_npy_writer *w;
    pr_npy_array a;
    path_of(path, sizeof(path), "empty.npy");
    assert_int_equal(pr_npy_open(&w, path, PR_NPY_F32, 13, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 0);
    assert_int_equal(a.cols, 13);
    pr_npy_array_fini(&a);

    path_of(path, sizeof(path), "aborted.npy");
    assert_int_equal(pr_npy_open(&w, path, PR_NPY_F32, 1, err, sizeof(err)), 0);
    pr_npy_abort(w);
    assert_int_not_equal(access(path, F_OK), 0);

    assert_int_equal(pr_npy_open(&w, "/nonexistent-dir/x.npy", PR_NPY_F32, 1, err, sizeof(err)),
                     PR_EIO);
    assert_non_null(strstr(err, "/nonexistent-dir/x.npy"));
    assert_int_equal(pr_npy_read("/nonexistent-dir/x.npy", &a, err, sizeof(err)), PR_EIO);

    path_of(path, sizeof(path), "garbage.npy");
    FILE *f = fopen(path, "w");
    fputs("not numpy at all", f);
    fclose(f);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), PR_EINVAL);
}

/* Read a whole file (test helper; aborts the test on failure). */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n ? (size_t)n : 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* The same blocks through a buffered and a PR_NPY_DIRECT writer: row widths
 * that do not divide 4 KiB, blocks of 1 row to several MiB (so the direct
 * writer carries partial blocks from flush to flush), a sync in the middle
 * (direct mode ends there) and append_rows; the files must be identical. */
static void test_direct_same_bytes(void **state)
{
    (void)state;
    static const struct {
        pr_npy_dtype dt;
        uint32_t cols;
        bool sync;
    } shapes[] = {
        {PR_NPY_F32, 13, false}, {PR_NPY_I32, 26, false}, {PR_NPY_I64, 26, false},
        {PR_NPY_I32, 0, false},  {PR_NPY_F32, 13, true},
    };
    static const uint32_t blocks[] = {1, 63, 64, 65, 4097, 40000, 1, 100000, 7};
    enum { STRIDE = 100003 };
    char err[256];
    uint64_t *data = malloc(sizeof(uint64_t) * 26 * (size_t)STRIDE);
    assert_non_null(data);
    for (size_t i = 0; i < 26 * (size_t)STRIDE; i++)
        data[i] = i * 0x9e3779b97f4a7c15ull;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        char path[2][512];
        for (int direct = 0; direct < 2; direct++) {
            snprintf(path[direct], sizeof(path[direct]), "%s/direct-%zu-%d.npy", tmpdir, s, direct);
            pr_npy_writer *w;
            assert_int_equal(pr_npy_open_flags(&w, path[direct], shapes[s].dt, shapes[s].cols,
                                               direct ? PR_NPY_DIRECT : 0, err, sizeof(err)),
                             0);
            for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
                assert_int_equal(pr_npy_append_cols(w, data, STRIDE, blocks[b], err, sizeof(err)),
                                 0);
                if (shapes[s].sync && b == 4)
                    assert_int_equal(pr_npy_sync(w, err, sizeof(err)), 0);
            }
            assert_int_equal(pr_npy_append_rows(w, data, 3, err, sizeof(err)), 0);
            assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);
        }
        size_t n0, n1;
        unsigned char *a = slurp(path[0], &n0), *b = slurp(path[1], &n1);
        size_t esz = pr_npy_dtype_size(shapes[s].dt) * (shapes[s].cols ? shapes[s].cols : 1);
        assert_int_equal(n0, 128 + esz * 144301);
        assert_int_equal(n1, n0);
        assert_memory_equal(a, b, n0);
        free(a);
        free(b);
        pr_npy_array arr;
        assert_int_equal(pr_npy_read(path[1], &arr, err, sizeof(err)), 0);
        assert_int_equal(arr.n, 144301);
        pr_npy_array_fini(&arr);
    }
    free(data);
    pr_npy_writer *w;
    assert_int_equal(pr_npy_open_flags(&w, tmpdir, PR_NPY_F32, 1, 0x80, err, sizeof(err)),
                     PR_EINVAL);
}

/* Positional writes (the offline driver's several workers): blocks
 * transposed with pr_npy_transpose and written at their rows in reverse
 * order, from a writer opened O_DIRECT, give the bytes the appends give. */
static void test_positional_same_bytes(void **state)
{
    (void)state;
    static const uint32_t blocks[] = {1, 63, 64, 65, 4097, 7};
    enum { STRIDE = 5000, COLS = 26 };
    char err[256], path[2][512];
    uint32_t *data = malloc(sizeof(uint32_t) * COLS * (size_t)STRIDE);
    uint32_t *rm = malloc(sizeof(uint32_t) * COLS * (size_t)STRIDE);
    assert_non_null(data);
    assert_non_null(rm);
    for (size_t i = 0; i < COLS * (size_t)STRIDE; i++)
        data[i] = (uint32_t)(i * 2654435761u);
    uint64_t total = 0;
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++)
        total += blocks[b];
    for (int pos = 0; pos < 2; pos++) {
        snprintf(path[pos], sizeof(path[pos]), "%s/positional-%d.npy", tmpdir, pos);
        pr_npy_writer *w;
        assert_int_equal(
            pr_npy_open_flags(&w, path[pos], PR_NPY_I32, COLS, PR_NPY_DIRECT, err, sizeof(err)), 0);
        if (pos)
            assert_int_equal(pr_npy_begin_positional(w, err, sizeof(err)), 0);
        for (size_t k = 0; !pos && k < sizeof(blocks) / sizeof(blocks[0]); k++)
            assert_int_equal(pr_npy_append_cols(w, data, STRIDE, blocks[k], err, sizeof(err)), 0);
        uint64_t row0 = total;
        for (size_t k = sizeof(blocks) / sizeof(blocks[0]); pos && k-- > 0;) {
            row0 -= blocks[k];
            /* block k is the same data whichever order it is written in */
            pr_npy_transpose(rm, data, STRIDE, blocks[k], COLS, PR_NPY_I32);
            assert_int_equal(pr_npy_pwrite_rows(w, row0, rm, blocks[k], err, sizeof(err)), 0);
        }
        if (pos) {
            pr_npy_set_rows(w, total);
            /* appends are refused once positional writes began */
            assert_int_equal(pr_npy_begin_positional(w, err, sizeof(err)), PR_ESTATE);
        }
        assert_int_equal(pr_npy_close(w, err, sizeof(err)), 0);
    }
    size_t n0, n1;
    unsigned char *a = slurp(path[0], &n0), *b = slurp(path[1], &n1);
    assert_int_equal(n0, 128 + 4 * COLS * total);
    assert_int_equal(n1, n0);
    assert_memory_equal(a, b, n0);
    free(a);
    free(b);
    free(data);
    free(rm);
}

/* The offline layout of a declared schema through its one writer: two
 * appends from side tables (the second from row 1), read back file by file,
 * then the same rows from jagged-batch tensors give the same bytes. */
static void test_layout_writer(void **state)
{
    (void)state;
    char dir[512], err[512] = "", path[600];
    path_of(dir, sizeof(dir), "layout");
    mkdir(dir, 0777);
    pr_fside *s = pr_fside_new(2, 1, 2, 64);
    assert_non_null(s);
    for (uint32_t r = 0; r < 3; r++) {
        s->labels[r * 2] = (float)r;
        s->labels[r * 2 + 1] = (float)r + 0.5f;
        s->dense[r] = (float)r * 10;
        pr_fside_lengths(s, 0)[r] = 1;
        s->values[0][s->n_values[0]++] = 100 + r;
        pr_fside_lengths(s, 1)[r] = (int32_t)r; /* 0, 1, 2 values */
        for (uint32_t k = 0; k < r; k++)
            s->values[1][s->n_values[1]++] = (int64_t)(r * 10 + k);
    }
    const char *names[] = {"user", "hist"};
    pr_npy_jagged *w;
    assert_int_equal(pr_npy_jagged_open_flags(&w, dir, s->n_labels, s->n_dense, s->n_feat, names,
                                              false, 0, 0, err, sizeof(err)),
                     0);
    assert_int_equal(pr_npy_jagged_append_side(w, s, 0, 3, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_jagged_append_side(w, s, 1, 2, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_jagged_rows(w), 5);
    assert_int_equal(pr_npy_jagged_close(w, false, err, sizeof(err)), 0);
    pr_npy_array a;
    snprintf(path, sizeof(path), "%s/labels.npy", dir);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(a.cols, 2);
    assert_true(pr_npy_get(&a, 3, 1) == 1.5);
    pr_npy_array_fini(&a);
    snprintf(path, sizeof(path), "%s/dense.npy", dir);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 5);
    assert_true(pr_npy_get(&a, 4, 0) == 20.0);
    pr_npy_array_fini(&a);
    snprintf(path, sizeof(path), "%s/sparse/hist.lengths.npy", dir);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.dtype, PR_NPY_I32);
    assert_int_equal(a.n, 5);
    static const int32_t lens[] = {0, 1, 2, 1, 2};
    for (int i = 0; i < 5; i++)
        assert_int_equal(((int32_t *)a.data)[i], lens[i]);
    pr_npy_array_fini(&a);
    snprintf(path, sizeof(path), "%s/sparse/hist.values.npy", dir);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.dtype, PR_NPY_I64);
    static const int64_t vals[] = {10, 20, 21, 10, 20, 21};
    assert_int_equal(a.n, 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(((int64_t *)a.data)[i], vals[i]);
    pr_npy_array_fini(&a);
    snprintf(path, sizeof(path), "%s/sparse/user.values.npy", dir);
    assert_int_equal(pr_npy_read(path, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 5);
    assert_int_equal(((int64_t *)a.data)[3], 101);
    pr_npy_array_fini(&a);
    pr_fside_free(s);

    /* The same five rows as jagged-batch tensors (pr_npy_jagged_append, the
     * files sink's and consume's way in), with O_DIRECT this time: the same
     * bytes, file for file. */
    char dir2[512], path2[600];
    path_of(dir2, sizeof(dir2), "layout-batch");
    static const float lab[] = {0, 0.5f, 1, 1.5f, 2, 2.5f, 1, 1.5f, 2, 2.5f};
    static const float den[] = {0, 10, 20, 10, 20};
    static const int32_t len[] = {1, 1, 1, 1, 1, 0, 1, 2, 1, 2};
    static const int64_t val[] = {100, 101, 102, 101, 102, 10, 20, 21, 10, 20, 21};
    assert_int_equal(pr_npy_jagged_open_flags(&w, dir2, 2, 1, 2, names, false, 0, PR_NPY_DIRECT,
                                              err, sizeof(err)),
                     0);
    assert_int_equal(pr_npy_jagged_append(w, 5, lab, den, len, val, err, sizeof(err)), 0);
    assert_int_equal(pr_npy_jagged_rows(w), 5);
    assert_int_equal(pr_npy_jagged_close(w, true, err, sizeof(err)), 0);
    static const char *const files[] = {"labels.npy",
                                        "dense.npy",
                                        "sparse/user.values.npy",
                                        "sparse/user.lengths.npy",
                                        "sparse/hist.values.npy",
                                        "sparse/hist.lengths.npy"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
        snprintf(path2, sizeof(path2), "%s/%s", dir2, files[i]);
        size_t n0, n1;
        unsigned char *x = slurp(path, &n0), *y = slurp(path2, &n1);
        assert_non_null(x);
        assert_non_null(y);
        if (n0 != n1 || memcmp(x, y, n0) != 0)
            fail_msg("%s: the two ways in wrote different bytes", files[i]);
        free(x);
        free(y);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_cols),
        cmocka_unit_test(test_stream_large_i64_and_1d),
        cmocka_unit_test(test_rows_and_fortran_array),
        cmocka_unit_test(test_empty_abort_and_errors),
        cmocka_unit_test(test_direct_same_bytes),
        cmocka_unit_test(test_positional_same_bytes),
        cmocka_unit_test(test_layout_writer),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
