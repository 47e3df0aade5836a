/*
 * test_transform_lib.c — pr_transform (service/transform.c) on the default
 * config's Criteo layout, in-process, and pr_framing_next.
 *
 * The 100-row sample first goes through a plain engine, which fills the
 * vocabulary and gives the expected rows; the transform then gets that
 * engine (now serving) and the same lines: every JSON line must carry that
 * row's label, dense values and indices. Around it: an unseen id (profile
 * dlrm: `unseen`), a line with the wrong field count ({"error":
 * "field_count"} in its place, also inside a record of several lines), more
 * events than one block (1024) in order, and the vocabulary unchanged.
 * Framing: lines (CRLF, blank and blank-ish lines), delimited (LEB128
 * lengths: empty, multi-byte, truncated, past the end, too long), single
 * (an empty body is no record, not an endless one). The raw layout
 * (pr_transform_raw_begin/_end): the same rows in one trainer-stream frame,
 * the rejected lines' errors with their indices.
 * (`piperec transform` against `piperec process` byte for byte is the
 * script test tests/offline/test_transform.py.)
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_config.h"
#include "pr_service.h"

#define NLINES 100
#define UNSEEN 424242 /* above every index the sample gives */

static pr_config *cfg;
static const pr_pipeline_cfg *pc;
static char *lines[NLINES];
static size_t lens[NLINES];

/* The first pass: for each sample line its output row (-1: rejected). */
typedef struct {
    pr_engine *eng;
    pr_block *blk;
    pr_out *out;
    int32_t row[NLINES];
} first_pass;

static int setup(void **state)
{
    (void)state;
    char err[512];
    if (pr_config_load_default(&cfg, err, sizeof(err))) {
        print_error("pr_config_load_default: %s\n", err);
        return -1;
    }
    pc = &cfg->pipelines[0];
    FILE *f = fopen(PR_TEST_DATA "/criteo_sample_100.tsv", "r");
    if (!f)
        return -1;
    char *buf = NULL;
    size_t cap = 0;
    for (int i = 0; i < NLINES; i++) {
        ssize_t n = getline(&buf, &cap, f);
        if (n <= 0)
            return -1;
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        lines[i] = strndup(buf, (size_t)n);
        lens[i] = (size_t)n;
    }
    free(buf);
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < NLINES; i++)
        free(lines[i]);
    pr_config_free(cfg);
    return 0;
}

/* A fresh engine of the pipeline with the sample processed through it. */
static void first_pass_run(first_pass *fp)
{
    char err[512] = "";
    pr_engine_opts eo = pr_config_engine_opts(cfg);
    fp->eng = pr_engine_new(&pc->spec, &eo, err, sizeof(err));
    if (!fp->eng)
        fail_msg("pr_engine_new: %s", err);
    const pr_pipeline_spec *s = &pc->spec;
    fp->blk = pr_block_new(s->n_dense, s->n_sparse, 128, true);
    fp->out = pr_out_new(s->n_dense, s->n_sparse, 128, pr_engine_sparse_width(fp->eng));
    assert_non_null(fp->blk);
    assert_non_null(fp->out);
    pr_decode_ctx ctx = {.spec = s, .parse_hex = pr_decode_want_parse_hex(s)};
    for (int i = 0; i < NLINES; i++) {
        uint32_t before = fp->blk->rows;
        assert_true(pr_decode_criteo_line(&ctx, fp->blk, lines[i], lens[i], i + 1) >= 0);
        fp->row[i] = fp->blk->rows > before ? (int32_t)before : -1;
    }
    assert_true(fp->blk->rows > 90);
    if (pr_engine_process(fp->eng, fp->blk, fp->out, err, sizeof(err)))
        fail_msg("pr_engine_process: %s", err);
}

static void first_pass_free(first_pass *fp)
{
    pr_block_free(fp->blk);
    pr_out_free(fp->out);
    pr_engine_free(fp->eng);
}

static pr_transform *transform_new(pr_engine *eng)
{
    char err[512] = "";
    pr_transform_opts o = {.pc = pc, .eng = eng, .unseen = UNSEEN};
    pr_transform *t = NULL;
    if (pr_transform_new(&o, &t, err, sizeof(err)))
        fail_msg("pr_transform_new: %s", err);
    return t;
}

static void feed(pr_transform *t, const char *rec, size_t n, pr_mbuf *out)
{
    char err[512] = "";
    if (pr_transform_event(t, rec, n, out, err, sizeof(err)))
        fail_msg("pr_transform_event: %s", err);
}

static void flush(pr_transform *t, pr_mbuf *out)
{
    char err[512] = "";
    if (pr_transform_flush(t, out, err, sizeof(err)))
        fail_msg("pr_transform_flush: %s", err);
    assert_false(out->err);
}

/* ---------------------------------------------------------------- reading lines */

/* The text after "key": in line, which must have it. */
static const char *json_at(const char *line, const char *key)
{
    char k[64];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(line, k);
    if (!p)
        fail_msg("no %s in %s", k, line);
    return p + strlen(k);
}

/* line (up to its newline) is the first pass's row r, field by field:
 * label, the dense values (as float32, exactly), the sparse indices; or,
 * with unseen_col >= 0, that column `unseen` instead. */
static void assert_row(const char *line, const first_pass *fp, uint32_t r, int unseen_col)
{
    const pr_pipeline_spec *s = &pc->spec;
    const pr_out *o = fp->out;
    assert_true(strncmp(line, "{\"labels\":{\"label\":", 19) == 0);
    assert_int_equal(strtol(json_at(line, "label"), NULL, 10), o->labels[r]);
    for (uint32_t k = 0; k < s->n_dense; k++) {
        float want = o->dense[(size_t)k * o->cap + r];
        float got = strtof(json_at(line, pc->dense_names[k]), NULL);
        if (got != want)
            fail_msg("row %u %s: %.9g, want %.9g", r, pc->dense_names[k], got, want);
    }
    const char *sp = json_at(line, "sparse");
    for (uint32_t c = 0; c < s->n_sparse; c++) {
        long long want = c == (uint32_t)unseen_col ? UNSEEN : pr_out_index(o, c, r);
        long long got = strtoll(json_at(sp, s->sparse[c].name), NULL, 10);
        if (got != want)
            fail_msg("row %u %s: %lld, want %lld", r, s->sparse[c].name, got, want);
    }
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    assert_true(end[-1] == '}' && end[-2] == '}');
}

/* The n-th line of out (from 0). */
static const char *nth_line(const pr_mbuf *out, size_t n)
{
    const char *p = out->buf;
    for (size_t i = 0; i < n; i++) {
        p = memchr(p, '\n', out->len - (size_t)(p - out->buf));
        assert_non_null(p);
        p++;
    }
    return p;
}

static size_t count_lines(const pr_mbuf *out)
{
    size_t n = 0;
    for (size_t i = 0; i < out->len; i++)
        n += out->buf[i] == '\n';
    return n;
}

static void assert_field_count_error(const char *line)
{
    assert_true(strncmp(line, "{\"error\":\"field_count\",\"detail\":\"", 33) == 0);
}

/* ---------------------------------------------------------------- rows */

/* The sample's lines come out as the first pass's rows; nothing is
 * learnt (vocabulary sizes, unseen count). */
static void test_rows_match_first_pass(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    uint64_t size[PR_MAX_SPARSE];
    for (uint32_t c = 0; c < pc->spec.n_sparse; c++)
        size[c] = pr_engine_vocab_size(fp.eng, c);
    pr_transform *t = transform_new(fp.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    for (int i = 0; i < NLINES; i++)
        feed(t, lines[i], lens[i], &out);
    assert_int_equal(out.len, 0); /* under a block: nothing yet */
    flush(t, &out);
    assert_int_equal(count_lines(&out), NLINES);
    for (int i = 0; i < NLINES; i++) {
        if (fp.row[i] < 0)
            assert_true(strncmp(nth_line(&out, (size_t)i), "{\"error\":", 9) == 0);
        else
            assert_row(nth_line(&out, (size_t)i), &fp, (uint32_t)fp.row[i], -1);
    }
    pr_transform_counts c;
    pr_transform_get_counts(t, &c);
    assert_int_equal(c.events, NLINES);
    assert_int_equal(c.rows, fp.blk->rows);
    assert_int_equal(c.unseen, 0);
    for (uint32_t k = 0; k < pc->spec.n_sparse; k++)
        assert_int_equal(pr_engine_vocab_size(fp.eng, k), size[k]);
    pr_mbuf_fini(&out);
    pr_transform_free(t);
    first_pass_free(&fp);
}

/* A known row, a line with 3 fields, a known row with an unseen C1 (and a
 * CRLF end): the reject in its place, `unseen` for the new id, counted. */
static void test_unseen_and_reject(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    assert_true(fp.row[0] == 0 && fp.row[1] == 1);
    uint64_t size0 = pr_engine_vocab_size(fp.eng, 0);
    pr_transform *t = transform_new(fp.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    /* line 1 with C1 (field 15, after the label and 13 dense) replaced */
    char mod[4096];
    const char *p = lines[1];
    for (int tabs = 0; tabs < 14; p++)
        tabs += *p == '\t';
    const char *c1_end = strchr(p, '\t');
    int n = snprintf(mod, sizeof(mod), "%.*s0badc0de%s\r", (int)(p - lines[1]), lines[1], c1_end);
    feed(t, lines[0], lens[0], &out);
    feed(t, "1\t2\t3", 5, &out);
    feed(t, mod, (size_t)n, &out);
    flush(t, &out);
    assert_int_equal(count_lines(&out), 3);
    assert_row(nth_line(&out, 0), &fp, 0, -1);
    assert_field_count_error(nth_line(&out, 1));
    assert_row(nth_line(&out, 2), &fp, 1, 0);
    pr_transform_counts c;
    pr_transform_get_counts(t, &c);
    assert_int_equal(c.events, 3);
    assert_int_equal(c.rows, 2);
    assert_int_equal(c.rejected, 1);
    assert_int_equal(c.by_reason[PR_DEC_FIELD_COUNT], 1);
    assert_int_equal(c.unseen, 1);
    assert_int_equal(pr_engine_vocab_size(fp.eng, 0), size0);
    pr_mbuf_fini(&out);
    pr_transform_free(t);
    first_pass_free(&fp);
}

/* One record holding several Criteo lines (framing single): a line each,
 * the reject between the rows it came between. */
static void test_multi_line_record(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    pr_transform *t = transform_new(fp.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    char rec[8192];
    int n = snprintf(rec, sizeof(rec), "%s\n1\t2\n%s\n", lines[0], lines[1]);
    feed(t, rec, (size_t)n, &out);
    flush(t, &out);
    assert_int_equal(count_lines(&out), 3);
    assert_row(nth_line(&out, 0), &fp, 0, -1);
    assert_field_count_error(nth_line(&out, 1));
    assert_row(nth_line(&out, 2), &fp, 1, -1);
    pr_mbuf_fini(&out);
    pr_transform_free(t);
    first_pass_free(&fp);
}

/* 12 rounds of the sample with a bad line after every 37th: more than a
 * block (1024 rows). Lines come out while events go in, and all of them in
 * input order, each the same as the first time. */
static void test_many_in_order(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    pr_transform *t = transform_new(fp.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    const int rounds = 12, events = rounds * NLINES + rounds * NLINES / 37;
    int32_t *what = calloc((size_t)events, sizeof(*what)); /* sample line, or -1: bad */
    assert_non_null(what);
    int k = 0;
    size_t seen_early = 0;
    for (int i = 0; i < rounds * NLINES; i++) {
        feed(t, lines[i % NLINES], lens[i % NLINES], &out);
        what[k++] = i % NLINES;
        if (i % 37 == 36) {
            feed(t, "x\ty", 3, &out);
            what[k++] = -1;
        }
        if (k == 1100)
            seen_early = count_lines(&out);
    }
    assert_int_equal(k, events);
    assert_true(seen_early >= 1024); /* a full block was written before the flush */
    flush(t, &out);
    assert_int_equal(count_lines(&out), (size_t)events);
    const char *line = out.buf;
    for (int i = 0; i < events; i++) {
        if (what[i] < 0)
            assert_field_count_error(line);
        else
            assert_row(line, &fp, (uint32_t)fp.row[what[i]], -1);
        line = strchr(line, '\n') + 1;
    }
    pr_transform_counts c;
    pr_transform_get_counts(t, &c);
    assert_int_equal(c.events, (uint64_t)events);
    assert_int_equal(c.rejected, (uint64_t)(events - rounds * NLINES));
    assert_int_equal(c.unseen, 0);
    free(what);
    pr_mbuf_fini(&out);
    pr_transform_free(t);
    first_pass_free(&fp);
}

static void test_transform_new_errors(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    char err[512] = "";
    pr_transform_opts o = {.pc = pc, .eng = fp.eng, .unseen = -1};
    pr_transform *t = (pr_transform *)1;
    assert_int_equal(pr_transform_new(&o, &t, err, sizeof(err)), PR_EINVAL);
    assert_null(t);
    assert_non_null(strstr(err, "unseen"));
    pr_transform_free(NULL);
    first_pass_free(&fp);
}

/* ---------------------------------------------------------------- framing */

/* Every record of body under fr as "[rec]" joined, or "ERR:<errstr>" where
 * it fails. At most 64 records: a framing that never ends fails here. */
static void records(pr_framing fr, const char *body, size_t len, char *got, size_t size)
{
    char err[256] = "";
    const char *rec;
    size_t n, at = 0, w = 0;
    int rc, k = 0;
    got[0] = '\0';
    while ((rc = pr_framing_next(fr, body, len, &at, &rec, &n, err, sizeof(err))) == 1) {
        assert_true(++k <= 64);
        assert_true(at <= len);
        w += (size_t)snprintf(got + w, size - w, "[%.*s]", (int)n, rec);
    }
    if (rc < 0)
        snprintf(got + w, size - w, "ERR:%s", err);
    else
        assert_int_equal(rc, 0);
}

static void test_framing_lines(void **state)
{
    (void)state;
    char got[1024];
    const char body[] = "a\r\n\r\n  \n\t\r\nb c\n\n\n d\r\ne\r";
    records(PR_FRAMING_LINES, body, sizeof(body) - 1, got, sizeof(got));
    assert_string_equal(got, "[a][b c][ d][e]");
    records(PR_FRAMING_LINES, "", 0, got, sizeof(got));
    assert_string_equal(got, "");
    records(PR_FRAMING_LINES, "\n\r\n", 3, got, sizeof(got));
    assert_string_equal(got, "");
    records(PR_FRAMING_LINES, "x", 1, got, sizeof(got));
    assert_string_equal(got, "[x]");
    assert_int_equal(pr_framing_default(PR_MSG_CRITEO_TSV), PR_FRAMING_LINES);
    assert_int_equal(pr_framing_default(PR_MSG_JSON), PR_FRAMING_LINES);
    assert_int_equal(pr_framing_default(PR_MSG_AVRO), PR_FRAMING_DELIMITED);
}

static void test_framing_delimited(void **state)
{
    (void)state;
    char got[1024], body[512];
    /* "abc", an empty record, 300 bytes (length 0xac 0x02), "z" */
    size_t n = 0;
    body[n++] = 3;
    memcpy(body + n, "abc", 3), n += 3;
    body[n++] = 0;
    body[n++] = (char)0xac;
    body[n++] = 0x02;
    memset(body + n, 'q', 300), n += 300;
    body[n++] = 1;
    body[n++] = 'z';
    char want[512];
    snprintf(want, sizeof(want), "[abc][][%.*s][z]", 300,
             "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"
             "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"
             "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"
             "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq");
    records(PR_FRAMING_DELIMITED, body, n, got, sizeof(got));
    assert_string_equal(got, want);
    records(PR_FRAMING_DELIMITED, "", 0, got, sizeof(got));
    assert_string_equal(got, "");
    /* the length's last byte missing */
    records(PR_FRAMING_DELIMITED, "\x01y\x80", 3, got, sizeof(got));
    assert_string_equal(got, "[y]ERR:byte 2: a bad or truncated record length");
    /* a length past the end */
    records(PR_FRAMING_DELIMITED,
            "\x01y\x05"
            "abc",
            6, got, sizeof(got));
    assert_string_equal(got, "[y]ERR:byte 2: a record of 5 bytes, but 3 are left");
    /* a huge length (2^42 - 1) and an endless one */
    records(PR_FRAMING_DELIMITED, "\xff\xff\xff\xff\xff\x7f", 6, got, sizeof(got));
    assert_non_null(strstr(got, "ERR:byte 0: a record of 4398046511103 bytes"));
    records(PR_FRAMING_DELIMITED, "\xff\xff\xff\xff\xff\xff\x01", 7, got, sizeof(got));
    assert_string_equal(got, "ERR:byte 0: a bad or truncated record length");
}

static void test_framing_single(void **state)
{
    (void)state;
    char got[256];
    records(PR_FRAMING_SINGLE, "a\nb\n", 4, got, sizeof(got));
    assert_string_equal(got, "[a\nb\n]");
    /* An empty body: no record (it used to be an empty record for ever:
     * serve's framing check spun on it). */
    records(PR_FRAMING_SINGLE, "", 0, got, sizeof(got));
    assert_string_equal(got, "");
}

/* A reloaded vocabulary: set_engine to a second engine of the same
 * pipeline, the first freed (serve's swap): the transform reads nothing of
 * the freed one (ASan: its spec was kept, a use after free) and answers as
 * before. */
static void test_set_engine_then_free_old(void **state)
{
    (void)state;
    first_pass a, b;
    first_pass_run(&a);
    first_pass_run(&b);
    pr_transform *t = transform_new(a.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    for (int i = 0; i < NLINES; i++)
        feed(t, lines[i], lens[i], &out);
    flush(t, &out);
    char err[512] = "";
    assert_int_equal(pr_transform_set_engine(t, b.eng, err, sizeof(err)), 0);
    first_pass_free(&a);
    pr_mbuf again;
    pr_mbuf_init(&again);
    for (int i = 0; i < NLINES; i++)
        feed(t, lines[i], lens[i], &again);
    flush(t, &again);
    assert_int_equal(again.len, out.len);
    assert_memory_equal(again.buf, out.buf, out.len);
    pr_mbuf_fini(&out);
    pr_mbuf_fini(&again);
    pr_transform_free(t);
    first_pass_free(&b);
}

/* ---------------------------------------------------------------- raw layout */

static uint32_t get32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* The raw layout (`serve ?layout=raw`): the sample with a bad line at 50
 * gives that line's error, with its index, as the only text; the frame
 * holds every other line's row in order (labels, dense row-major, int64
 * indices key-major, lengths 1) as the first pass gave it; then JSON lines
 * again. */
static void test_raw_layout(void **state)
{
    (void)state;
    first_pass fp;
    first_pass_run(&fp);
    pr_transform *t = transform_new(fp.eng);
    pr_mbuf out;
    pr_mbuf_init(&out);
    pr_transform_raw_begin(t);
    for (int i = 0; i < NLINES; i++) {
        if (i == 50)
            feed(t, "1\t2\t3", 5, &out);
        feed(t, lines[i], lens[i], &out);
    }
    flush(t, &out);
    assert_int_equal(count_lines(&out), 1);
    assert_non_null(strstr(nth_line(&out, 0), "{\"index\":50,\"error\":\"field_count\""));
    uint8_t *frame = NULL;
    size_t len = 0, at = 0;
    char err[256];
    assert_int_equal(pr_transform_raw_end(t, &frame, &len, &at, err, sizeof(err)), 0);
    assert_true(at > 5 && at < 16 && len > at + 128);
    assert_int_equal(get32(frame), len - 4);
    const uint8_t *pay = frame + at;
    assert_int_equal(get32(pay), 0x54425250); /* PRBT */
    uint32_t rows = get32(pay + 12), nd = get32(pay + 16), nk = get32(pay + 24);
    uint32_t good = 0;
    for (int i = 0; i < NLINES; i++)
        good += fp.row[i] >= 0;
    assert_int_equal(rows, good);
    assert_int_equal(nd, 13);
    assert_int_equal(nk, 26);
    for (int sec = 0; sec < 4; sec++) /* 64-byte aligned in the frame */
        assert_int_equal((at + get32(pay + 64 + 8 * sec)) % 64, 0);
    const float *dense = (const float *)(pay + get32(pay + 64));
    const float *labels = (const float *)(pay + get32(pay + 72));
    const int32_t *lengths = (const int32_t *)(pay + get32(pay + 80));
    const int64_t *values = (const int64_t *)(pay + get32(pay + 88));
    for (uint32_t i = 0, k = 0; i < NLINES; i++) {
        if (fp.row[i] < 0)
            continue;
        uint32_t r = (uint32_t)fp.row[i];
        assert_true(labels[k] == (float)fp.out->labels[r]);
        for (uint32_t d = 0; d < nd; d++)
            assert_memory_equal(&dense[(size_t)k * nd + d],
                                &fp.out->dense[(size_t)d * fp.out->cap + r], 4);
        for (uint32_t c = 0; c < nk; c++) {
            assert_int_equal(values[(size_t)c * rows + k], pr_out_index(fp.out, c, r));
            assert_int_equal(lengths[(size_t)c * rows + k], 1);
        }
        k++;
    }
    free(frame);
    /* JSON lines again */
    pr_mbuf_reset(&out);
    feed(t, lines[0], lens[0], &out);
    flush(t, &out);
    assert_int_equal(count_lines(&out), 1);
    assert_row(nth_line(&out, 0), &fp, 0, -1);
    /* dropped rows (frame NULL) leave nothing behind */
    pr_transform_raw_begin(t);
    feed(t, lines[1], lens[1], &out);
    flush(t, &out);
    assert_int_equal(pr_transform_raw_end(t, NULL, NULL, NULL, NULL, 0), 0);
    pr_mbuf_fini(&out);
    pr_transform_free(t);
    first_pass_free(&fp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_match_first_pass),
        cmocka_unit_test(test_unseen_and_reject),
        cmocka_unit_test(test_raw_layout),
        cmocka_unit_test(test_multi_line_record),
        cmocka_unit_test(test_many_in_order),
        cmocka_unit_test(test_transform_new_errors),
        cmocka_unit_test(test_framing_lines),
        cmocka_unit_test(test_framing_delimited),
        cmocka_unit_test(test_framing_single),
        cmocka_unit_test(test_set_engine_then_free_old),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
