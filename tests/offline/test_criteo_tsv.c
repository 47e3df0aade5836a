/*
 * test_criteo_tsv.c — the Criteo TSV decoder (ingest/criteo_tsv.c): values,
 * missing fields, each reject reason, "\r\n" and unterminated lines, the
 * whole-buffer decoder, and a fuzz pass (random bytes, NULs, huge lines)
 * that must never crash nor leave a half-written row behind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_ingest.h"

typedef struct rejects {
    int n;
    int last_reason;
    int64_t last_recno;
    char last_detail[256];
    char last_rec[256];
} rejects;

static void on_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                      int64_t recno)
{
    rejects *r = opaque;
    r->n++;
    r->last_reason = reason;
    r->last_recno = recno;
    snprintf(r->last_detail, sizeof(r->last_detail), "%s", detail);
    size_t n = len < sizeof(r->last_rec) - 1 ? len : sizeof(r->last_rec) - 1;
    memcpy(r->last_rec, rec, n);
    r->last_rec[n] = '\0';
}

typedef struct fixture {
    pr_pipeline_spec spec;
    pr_block *b;
    rejects rj;
    pr_decode_ctx ctx;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    pr_pipeline_spec_default(&f->spec);
    f->b = pr_block_new(13, 26, 128, true);
    f->ctx.spec = &f->spec;
    f->ctx.on_reject = on_reject;
    f->ctx.opaque = &f->rj;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    pr_block_free(f->b);
    free(f);
    return 0;
}

/* A good line: label 1, I1..I13 = 0..12 with I2 missing, C1..C26 hex with C3 missing. */
static const char *good_line(char *buf, size_t n)
{
    size_t k = (size_t)snprintf(buf, n, "1");
    for (int j = 0; j < 13; j++)
        k +=
            (size_t)(j == 1 ? snprintf(buf + k, n - k, "\t") : snprintf(buf + k, n - k, "\t%d", j));
    for (int c = 0; c < 26; c++)
        k += (size_t)(c == 2 ? snprintf(buf + k, n - k, "\t")
                             : snprintf(buf + k, n - k, "\t%08x", 0xa0b0c0d0u + c));
    return buf;
}

static bool missing(const uint64_t *bm, const pr_block *b, uint32_t col, uint32_t row)
{
    return pr_bit_test(bm + col * pr_bitmap_words(b->cap), row);
}

static void test_good_line(void **state)
{
    fixture *f = *state;
    char line[1024];
    good_line(line, sizeof(line));
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 7), 1);
    assert_int_equal(f->b->rows, 1);
    assert_int_equal(f->b->labels[0], 1);
    assert_int_equal(f->b->offset[0], 7);
    for (uint32_t j = 0; j < 13; j++) {
        assert_true(f->b->dense[j * f->b->cap] == (j == 1 ? 0.0 : (double)j));
        assert_int_equal(missing(f->b->dense_missing, f->b, j, 0), j == 1);
    }
    for (uint32_t c = 0; c < 26; c++) {
        char want[17];
        if (c == 2)
            memset(want, '0', 16);
        else
            snprintf(want, sizeof(want), "00000000%08x", 0xa0b0c0d0u + c);
        assert_memory_equal(pr_block_hex(f->b, c, 0), want, 16);
        assert_int_equal(missing(f->b->sparse_missing, f->b, c, 0), c == 2);
    }
    assert_int_equal(f->rj.n, 0);
}

static void with_field(char *out, size_t n, int idx, const char *val);

static void test_values(void **state)
{
    fixture *f = *state;
    /* Floats, negatives, short and 16-digit hex, CRLF. */
    const char *line =
        "0\t1.5\t-3\t1e3\t-0.25\t007\t\t\t\t\t\t\t\t99999999999\t"
        "a\tABCDEF\t0123456789abcdef\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t1\r";
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 1), 1);
    double want[13] = {1.5, -3, 1000, -0.25, 7, 0, 0, 0, 0, 0, 0, 0, 99999999999.0};
    for (uint32_t j = 0; j < 13; j++)
        assert_true(f->b->dense[j * f->b->cap] == want[j]);
    assert_memory_equal(pr_block_hex(f->b, 0, 0), "000000000000000a", 16);
    assert_memory_equal(pr_block_hex(f->b, 1, 0), "0000000000ABCDEF", 16);
    assert_memory_equal(pr_block_hex(f->b, 2, 0), "0123456789abcdef", 16);
    assert_memory_equal(pr_block_hex(f->b, 25, 0), "0000000000000001", 16); /* '\r' stripped */
    assert_true(missing(f->b->sparse_missing, f->b, 3, 0));
    assert_false(missing(f->b->sparse_missing, f->b, 25, 0));
    /* an underflowing decimal is the nearest double (0 or subnormal), not a reject */
    char tiny[1024];
    with_field(tiny, sizeof(tiny), 1, "1e-400");
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, tiny, strlen(tiny), 2), 1);
    assert_true(f->b->dense[1] == 0.0);
    with_field(tiny, sizeof(tiny), 1, "4.9e-324");
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, tiny, strlen(tiny), 3), 1);
    assert_true(f->b->dense[2] > 0.0 && f->b->dense[2] < 1e-300);
}

typedef struct bad_case {
    const char *what;
    int reason;
    const char *detail_part;
} bad_case;

static void check_reject(fixture *f, const char *line, int reason, const char *detail_part)
{
    uint32_t rows = f->b->rows;
    int before = f->rj.n;
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 42), 0);
    assert_int_equal(f->b->rows, rows);
    assert_int_equal(f->rj.n, before + 1);
    assert_int_equal(f->rj.last_reason, reason);
    assert_int_equal(f->rj.last_recno, 42);
    if (!strstr(f->rj.last_detail, detail_part))
        fail_msg("detail '%s' lacks '%s'", f->rj.last_detail, detail_part);
    assert_null(strchr(f->rj.last_detail, '\t'));
}

/* Replace field `idx` of a good line with `val`. */
static void with_field(char *out, size_t n, int idx, const char *val)
{
    char line[1024], *save, *tok;
    good_line(line, sizeof(line));
    size_t k = 0;
    int i = 0;
    /* strsep keeps empty fields. */
    save = line;
    while ((tok = strsep(&save, "\t")) != NULL) {
        k += (size_t)snprintf(out + k, n - k, "%s%s", i ? "\t" : "", i == idx ? val : tok);
        i++;
    }
}

static void test_rejects(void **state)
{
    fixture *f = *state;
    char line[2048];
    check_reject(f, "", PR_DEC_FIELD_COUNT, "1 fields, expected 40");
    check_reject(f, "1\t2\t3", PR_DEC_FIELD_COUNT, "3 fields");
    good_line(line, sizeof(line));
    strcat(line, "\textra");
    check_reject(f, line, PR_DEC_FIELD_COUNT, "41 fields");
    with_field(line, sizeof(line), 0, "x");
    check_reject(f, line, PR_DEC_BAD_LABEL, "label");
    with_field(line, sizeof(line), 0, "");
    check_reject(f, line, PR_DEC_BAD_LABEL, "label");
    with_field(line, sizeof(line), 3, "12abc");
    check_reject(f, line, PR_DEC_BAD_DENSE, "I3: '12abc'");
    with_field(line, sizeof(line), 5, "nan");
    check_reject(f, line, PR_DEC_BAD_DENSE, "I5");
    with_field(line, sizeof(line), 5, "1e999"); /* overflow */
    check_reject(f, line, PR_DEC_BAD_DENSE, "I5");
    /* a label that is an integer, but not an int32, says so */
    with_field(line, sizeof(line), 0, "2147483648");
    check_reject(f, line, PR_DEC_BAD_LABEL, "'2147483648' is out of range (an int32 label)");
    with_field(line, sizeof(line), 0, "-9223372036854775807");
    check_reject(f, line, PR_DEC_BAD_LABEL, "out of range");
    with_field(line, sizeof(line), 0, "1.0");
    check_reject(f, line, PR_DEC_BAD_LABEL, "'1.0' is not an integer");
    with_field(line, sizeof(line), 14, "0123456789abcdef0");
    check_reject(f, line, PR_DEC_LONG_HEX, "C1: 17 characters");
    with_field(line, sizeof(line), 39, "0123456789abcdef01234");
    check_reject(f, line, PR_DEC_LONG_HEX, "C26");
    /* A wrong count wins over a bad value. */
    check_reject(f, "x\t1", PR_DEC_FIELD_COUNT, "2 fields");
    /* Non-hex characters are the engine's business: accepted here. */
    with_field(line, sizeof(line), 14, "zz");
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 1), 1);
}

/* A rejected row leaves no missing bits for the next row in its place. */
static void test_reject_leaves_no_trace(void **state)
{
    fixture *f = *state;
    char line[2048];
    /* Everything missing up to a bad last field. */
    size_t k = (size_t)snprintf(line, sizeof(line), "0");
    for (int i = 0; i < 38; i++)
        k += (size_t)snprintf(line + k, sizeof(line) - k, "\t");
    snprintf(line + k, sizeof(line) - k, "\t0123456789abcdef0123");
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 1), 0);
    good_line(line, sizeof(line));
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 2), 1);
    assert_false(missing(f->b->dense_missing, f->b, 0, 0));
    assert_false(missing(f->b->sparse_missing, f->b, 0, 0));
    assert_true(missing(f->b->sparse_missing, f->b, 2, 0));
}

static void test_block_full(void **state)
{
    fixture *f = *state;
    char line[1024];
    good_line(line, sizeof(line));
    for (uint32_t i = 0; i < f->b->cap; i++)
        assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), i + 1), 1);
    assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, strlen(line), 0), PR_EFULL);
}

static void test_lines_buffer(void **state)
{
    fixture *f = *state;
    char line[1024], buf[8192];
    good_line(line, sizeof(line));
    /* good CRLF, bad, good, unterminated good */
    int n = snprintf(buf, sizeof(buf), "%s\r\nbad\n%s\n%s", line, line, line);
    int64_t lines = 0;
    size_t used = pr_decode_criteo_lines(&f->ctx, f->b, buf, (size_t)n, false, 10, &lines);
    assert_int_equal(lines, 3);
    assert_int_equal(f->b->rows, 2);
    assert_int_equal(f->rj.n, 1);
    assert_int_equal(f->rj.last_recno, 11);
    assert_string_equal(f->rj.last_rec, "bad");
    assert_int_equal(f->b->offset[1], 12);
    /* The unterminated line waits for eof. */
    size_t rest = (size_t)n - used;
    assert_int_equal(rest, strlen(line));
    used = pr_decode_criteo_lines(&f->ctx, f->b, buf + (n - (int)rest), rest, true, 13, &lines);
    assert_int_equal(used, rest);
    assert_int_equal(lines, 1);
    assert_int_equal(f->b->rows, 3);
    assert_int_equal(f->b->offset[2], 13);
}

static uint64_t rnd(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random bytes, NULs, mutated good lines and one huge line: never a crash,
 * every line is either a row or exactly one reject. */
static void test_fuzz(void **state)
{
    fixture *f = *state;
    uint64_t seed = 12345;
    char good[1024];
    good_line(good, sizeof(good));
    size_t glen = strlen(good);
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    for (int iter = 0; iter < 3000; iter++) {
        size_t len;
        int kind = (int)(rnd(&seed) % 4);
        if (kind == 0) { /* random bytes from a small alphabet */
            static const char alpha[] = "\t\t\t\t0123456789abcdefXZ-.e\r\n\0 ";
            len = rnd(&seed) % 600;
            for (size_t i = 0; i < len; i++)
                buf[i] = alpha[rnd(&seed) % (sizeof(alpha) - 1)];
        } else if (kind == 1) { /* fully random bytes */
            len = rnd(&seed) % 600;
            for (size_t i = 0; i < len; i++)
                buf[i] = (char)rnd(&seed);
        } else if (kind == 2) { /* a good line with a few mutations */
            memcpy(buf, good, glen);
            len = glen;
            for (int m = 0; m < 3; m++)
                buf[rnd(&seed) % len] = (char)rnd(&seed);
            len -= rnd(&seed) % 4;
        } else { /* a good line cut short or repeated on one line */
            len = rnd(&seed) % (glen * 3);
            for (size_t i = 0; i < len; i++)
                buf[i] = good[i % glen];
        }
        if (iter == 7) { /* one huge line of tabs and digits */
            len = cap;
            for (size_t i = 0; i < len; i++)
                buf[i] = (i % 3) ? '7' : '\t';
        }
        pr_block_reset(f->b);
        int rj = f->rj.n;
        int64_t lines = 0;
        size_t used = pr_decode_criteo_lines(&f->ctx, f->b, buf, len, true, 1, &lines);
        assert_int_equal(used, len);
        assert_int_equal((int64_t)f->b->rows + (f->rj.n - rj), lines);
    }
    free(buf);
}

/* Random valid lines of every field shape the fast path takes or hands to
 * the general decoder (long integers, floats, short/long hex, missing):
 * values must come out right either way. */
static void test_mixed_values(void **state)
{
    fixture *f = *state;
    uint64_t seed = 99;
    char line[2048];
    for (int iter = 0; iter < 2000; iter++) {
        double want_d[13];
        char want_h[26][17];
        bool dmiss[13], smiss[26];
        int k = snprintf(line, sizeof(line), "%d", (int)(rnd(&seed) % 2));
        for (int j = 0; j < 13; j++) {
            int kind = (int)(rnd(&seed) % 6);
            dmiss[j] = kind == 0;
            if (kind == 0) {
                want_d[j] = 0;
                k += snprintf(line + k, sizeof(line) - (size_t)k, "\t");
            } else if (kind == 5) {
                want_d[j] = (double)(int64_t)(rnd(&seed) % 2000) / 8.0;
                k += snprintf(line + k, sizeof(line) - (size_t)k, "\t%.3f", want_d[j]);
            } else {
                int digits = 1 + (int)(rnd(&seed) % 12);
                int64_t v = (int64_t)(rnd(&seed) % 1000000000000ull);
                for (int d = digits; d < 12; d++)
                    v /= 10;
                if (rnd(&seed) % 5 == 0)
                    v = -v;
                want_d[j] = (double)v;
                k += snprintf(line + k, sizeof(line) - (size_t)k, "\t%lld", (long long)v);
            }
        }
        for (int c = 0; c < 26; c++) {
            int l = (int)(rnd(&seed) % 20);
            l = l > 16 ? 8 : l;
            smiss[c] = l == 0;
            char h[17];
            for (int i = 0; i < l; i++)
                h[i] = "0123456789abcdefABCDEF"[rnd(&seed) % 22];
            h[l] = '\0';
            memset(want_h[c], '0', 16);
            memcpy(want_h[c] + 16 - l, h, (size_t)l);
            k += snprintf(line + k, sizeof(line) - (size_t)k, "\t%s", h);
        }
        pr_block_reset(f->b);
        assert_int_equal(pr_decode_criteo_line(&f->ctx, f->b, line, (size_t)k, 1), 1);
        for (uint32_t j = 0; j < 13; j++) {
            if (f->b->dense[j * f->b->cap] != want_d[j])
                fail_msg("line %d I%u: got %g want %g: %s", iter, j + 1, f->b->dense[j * f->b->cap],
                         want_d[j], line);
            assert_int_equal(missing(f->b->dense_missing, f->b, j, 0), dmiss[j]);
        }
        for (uint32_t c = 0; c < 26; c++) {
            assert_memory_equal(pr_block_hex(f->b, c, 0), want_h[c], 16);
            assert_int_equal(missing(f->b->sparse_missing, f->b, c, 0), smiss[c]);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_good_line, setup, teardown),
        cmocka_unit_test_setup_teardown(test_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reject_leaves_no_trace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_block_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lines_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fuzz, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mixed_values, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
