/*
 * test_offline.c — the offline driver (service/offline.c) in-process, so it
 * also runs under ASan/UBSan: decoder and engine rejects in line order, many
 * small chunks and blocks with 1 and 3 decoder threads giving identical
 * output, a FIFO input (the streaming read path, partial lines carried
 * between chunks), two-pass counting from a FIFO (spooled), an empty input,
 * and I/O errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_gen.h"
#include "pr_npy.h"
#include "pr_service.h"

static char tmpdir[512];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "%s/test-tmp/test_offline", PR_BINARY_DIR);
    char cmd[sizeof(tmpdir) * 2 + 32];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", tmpdir, tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Synthetic rows, with a bad line every 97th line (cycling through kinds). */
static char *make_input(uint64_t rows, size_t *len_out, uint64_t *bad_out)
{
    pr_gen *g = pr_gen_new(9);
    size_t cap = (size_t)rows * PR_GEN_TSV_LINE_MAX + 64;
    char *buf = malloc(cap), line[PR_GEN_TSV_LINE_MAX];
    size_t len = 0;
    uint64_t bad = 0;
    for (uint64_t r = 0; r < rows; r++) {
        size_t l = pr_gen_tsv(g, r, 1, line, sizeof(line), NULL);
        if (r % 97 == 5) {
            bad++;
            switch ((r / 97) % 4) {
            case 0:
                line[0] = 'x';
                break; /* bad_label */
            case 1:
                l = 10;
                line[l - 1] = '\n';
                break; /* field_count */
            case 2:
                line[l - 3] = 'g';
                break; /* bad_hex (engine) */
            default:
                line[1] = '\t';
                line[2] = '\t';
                line[3] = '\t';
                break; /* count or dense */
            }
        }
        memcpy(buf + len, line, l);
        len += l;
    }
    pr_gen_free(g);
    *len_out = len;
    *bad_out = bad;
    return buf;
}

static void write_file(const char *path, const char *buf, size_t len)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void same_file(const char *a, const char *b)
{
    size_t la, lb;
    char *x = slurp(a, &la), *y = slurp(b, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    free(x);
    free(y);
}

static int run(const char *in, const char *out, int threads, uint32_t block_rows,
               const pr_pipeline_spec *spec, pr_offline_result *res, char *err, size_t errn)
{
    pr_engine_opts eo = {.backend = "cpu", .threads = threads};
    pr_offline_opts oo = {
        .input = in, .output_dir = out, .threads = threads, .block_rows = block_rows};
    return pr_offline_run(spec, &eo, &oo, res, err, errn);
}

typedef struct fifo_writer {
    const char *path;
    const char *buf;
    size_t len;
} fifo_writer;

static void *fifo_write(void *arg)
{
    fifo_writer *w = arg;
    FILE *f = fopen(w->path, "w");
    if (f) {
        /* Odd-sized writes so lines straddle reads. */
        for (size_t off = 0; off < w->len; off += 7777)
            fwrite(w->buf + off, 1, w->len - off < 7777 ? w->len - off : 7777, f);
        fclose(f);
    }
    return NULL;
}

static void test_threads_rejects_fifo(void **state)
{
    (void)state;
    enum { ROWS = 20000 };
    size_t len;
    uint64_t bad;
    char *data = make_input(ROWS, &len, &bad);
    char in[600], o1[600], o3[600], of[600], p1[700], p2[700], err[512];
    snprintf(in, sizeof(in), "%s/in.tsv", tmpdir);
    write_file(in, data, len);
    snprintf(o1, sizeof(o1), "%s/o1", tmpdir);
    snprintf(o3, sizeof(o3), "%s/o3", tmpdir);
    snprintf(of, sizeof(of), "%s/ofifo", tmpdir);
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_offline_result r1, r3, rf;
    /* 128-row blocks -> 25 KB chunks: hundreds of chunks and blocks. */
    assert_int_equal(run(in, o1, 1, 128, &spec, &r1, err, sizeof(err)), 0);
    assert_int_equal(run(in, o3, 3, 128, &spec, &r3, err, sizeof(err)), 0);
    assert_int_equal(r1.lines, ROWS);
    assert_int_equal(r1.rejected, bad);
    assert_int_equal(r1.rows, ROWS - bad);
    assert_true(r1.rejected_by[PR_DEC_BAD_HEX] > 0);
    assert_true(r1.rejected_by[PR_DEC_BAD_LABEL] > 0);
    assert_true(r1.rejected_by[PR_DEC_FIELD_COUNT] > 0);
    assert_int_equal(r3.rows, r1.rows);
    const char *files[] = {"dense.npy", "sparse.npy", "labels.npy", "rejects.tsv", "vocab/C3.tsv"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p1, sizeof(p1), "%s/%s", o1, files[i]);
        snprintf(p2, sizeof(p2), "%s/%s", o3, files[i]);
        same_file(p1, p2);
    }
    /* rejects.tsv: one line per bad line, in order, line numbers right. */
    snprintf(p1, sizeof(p1), "%s/rejects.tsv", o1);
    size_t rl;
    char *rj = slurp(p1, &rl), *save = NULL;
    uint64_t n = 0;
    for (char *l = strtok_r(rj, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++)
        assert_int_equal(strtoull(l, NULL, 10), 97 * n + 5 + 1);
    assert_int_equal(n, bad);
    free(rj);
    pr_npy_array a;
    snprintf(p1, sizeof(p1), "%s/sparse.npy", o1);
    assert_int_equal(pr_npy_read(p1, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, ROWS - bad);
    assert_int_equal(a.cols, 26);
    pr_npy_array_fini(&a);

    /* The same through a FIFO: the read() path. */
    char fifo[600];
    snprintf(fifo, sizeof(fifo), "%s/in.fifo", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    fifo_writer fw = {fifo, data, len};
    pthread_t t;
    pthread_create(&t, NULL, fifo_write, &fw);
    assert_int_equal(run(fifo, of, 2, 256, &spec, &rf, err, sizeof(err)), 0);
    pthread_join(t, NULL);
    assert_int_equal(rf.rows, r1.rows);
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(p1, sizeof(p1), "%s/%s", o1, files[i]);
        snprintf(p2, sizeof(p2), "%s/%s", of, files[i]);
        same_file(p1, p2);
    }

    /* Two-pass from a FIFO (spooled) equals two-pass from the file. */
    spec.profile = PR_VOCAB_DEFAULT;
    spec.count_mode = PR_COUNT_TWO_PASS;
    for (uint32_t c = 0; c < spec.n_sparse; c++)
        spec.sparse[c].min_count = 3;
    snprintf(o1, sizeof(o1), "%s/tp-file", tmpdir);
    snprintf(of, sizeof(of), "%s/tp-fifo", tmpdir);
    assert_int_equal(run(in, o1, 2, 512, &spec, &r1, err, sizeof(err)), 0);
    pthread_create(&t, NULL, fifo_write, &fw);
    assert_int_equal(run(fifo, of, 2, 512, &spec, &rf, err, sizeof(err)), 0);
    pthread_join(t, NULL);
    assert_int_equal(rf.rows, r1.rows);
    assert_int_equal(r1.rejected, bad);
    snprintf(p1, sizeof(p1), "%s/sparse.npy", o1);
    snprintf(p2, sizeof(p2), "%s/sparse.npy", of);
    same_file(p1, p2);
    /* Under min_count 3 some values are OOV (index 1). */
    assert_int_equal(pr_npy_read(p1, &a, err, sizeof(err)), 0);
    uint64_t oov = 0;
    for (uint64_t i = 0; i < a.n * a.cols; i++)
        oov += ((int32_t *)a.data)[i] == PR_INDEX_OOV;
    assert_true(oov > 0);
    pr_npy_array_fini(&a);
    free(data);
}

/* Issue 21: the engine runs in two halves (lookups of known values on any
 * worker, first appearances in input order) and transposes on any worker;
 * every output must stay the same at 1, 2, 4, 8 and 16 threads (more
 * workers than cores is fine here), for the specs that take the split path
 * (dlrm, default profile with two-pass min_count) and those that fall back
 * to the whole engine in order (a hash-table column, modulus above 2^24). */
static void threads_identical(const char *tag, const pr_pipeline_spec *spec, const char *in,
                              uint64_t rows)
{
    static const int threads[] = {1, 2, 4, 8, 16};
    const char *files[] = {"dense.npy",    "sparse.npy",   "labels.npy",   "rejects.tsv",
                           "vocab/C1.tsv", "vocab/C3.tsv", "vocab/C26.tsv"};
    char o1[600], on[600], p1[700], p2[700], err[512];
    pr_offline_result r1, rn;
    snprintf(o1, sizeof(o1), "%s/%s-t1", tmpdir, tag);
    assert_int_equal(run(in, o1, 1, 64, spec, &r1, err, sizeof(err)), 0);
    assert_int_equal(r1.lines, rows);
    for (size_t t = 1; t < sizeof(threads) / sizeof(threads[0]); t++) {
        snprintf(on, sizeof(on), "%s/%s-t%d", tmpdir, tag, threads[t]);
        /* 64-row blocks: hundreds of chunks in flight at once */
        assert_int_equal(run(in, on, threads[t], 64, spec, &rn, err, sizeof(err)), 0);
        assert_int_equal(rn.rows, r1.rows);
        assert_int_equal(rn.rejected, r1.rejected);
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
            snprintf(p1, sizeof(p1), "%s/%s", o1, files[i]);
            snprintf(p2, sizeof(p2), "%s/%s", on, files[i]);
            same_file(p1, p2);
        }
    }
}

static void test_threads_1_to_16(void **state)
{
    (void)state;
    enum { ROWS = 12000 };
    size_t len;
    uint64_t bad;
    char *data = make_input(ROWS, &len, &bad);
    char in[600];
    snprintf(in, sizeof(in), "%s/in16.tsv", tmpdir);
    write_file(in, data, len);
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    threads_identical("dlrm", &spec, in, ROWS);
    spec.profile = PR_VOCAB_DEFAULT;
    spec.count_mode = PR_COUNT_TWO_PASS;
    for (uint32_t c = 0; c < spec.n_sparse; c++)
        spec.sparse[c].min_count = 2;
    threads_identical("twopass", &spec, in, ROWS);
    pr_pipeline_spec_default(&spec);
    spec.sparse[2].modulus = 1ull << 40; /* C3 in a hash table: the whole engine, in order */
    threads_identical("hash", &spec, in, ROWS);

    /* A dlrm column that fills up fails the run with the same error (the
     * first failing block and row) whichever path and thread count. */
    pr_pipeline_spec_default(&spec);
    spec.sparse[11].capacity = 3000;
    char o[600], err1[512], errn[512];
    pr_offline_result r;
    snprintf(o, sizeof(o), "%s/full-t1", tmpdir);
    assert_int_equal(run(in, o, 1, 64, &spec, &r, err1, sizeof(err1)), PR_EFULL);
    assert_non_null(strstr(err1, "C12"));
    for (int t = 2; t <= 16; t *= 2) {
        snprintf(o, sizeof(o), "%s/full-t%d", tmpdir, t);
        assert_int_equal(run(in, o, t, 64, &spec, &r, errn, sizeof(errn)), PR_EFULL);
        assert_string_equal(errn, err1);
    }
    free(data);
}

static void test_empty_and_errors(void **state)
{
    (void)state;
    char in[600], out[600], err[512];
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_offline_result res;
    snprintf(in, sizeof(in), "%s/empty.tsv", tmpdir);
    write_file(in, "", 0);
    snprintf(out, sizeof(out), "%s/empty-out", tmpdir);
    assert_int_equal(run(in, out, 2, 0, &spec, &res, err, sizeof(err)), 0);
    assert_int_equal(res.rows, 0);
    assert_int_equal(res.lines, 0);
    pr_npy_array a;
    char p[700];
    snprintf(p, sizeof(p), "%s/dense.npy", out);
    assert_int_equal(pr_npy_read(p, &a, err, sizeof(err)), 0);
    assert_int_equal(a.n, 0);
    assert_int_equal(a.cols, 13);
    pr_npy_array_fini(&a);

    snprintf(in, sizeof(in), "%s/nope.tsv", tmpdir);
    assert_int_equal(run(in, out, 1, 0, &spec, &res, err, sizeof(err)), PR_EIO);
    assert_non_null(strstr(err, "nope.tsv"));
    assert_int_equal(run(tmpdir, out, 1, 0, &spec, &res, err, sizeof(err)), PR_EIO);
    snprintf(in, sizeof(in), "%s/empty.tsv", tmpdir);
    assert_int_equal(run(in, "/proc/piperec-no", 1, 0, &spec, &res, err, sizeof(err)), PR_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_rejects_fifo),
        cmocka_unit_test(test_threads_1_to_16),
        cmocka_unit_test(test_empty_and_errors),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
