/*
 * test_json_extract.c — the JSON field extractor (ingest/json_extract.c):
 * every reject reason, nesting, escapes and surrogates, invalid UTF-8,
 * numbers, unknown fields, key order, lists, null vs absent, duplicate keys,
 * rejected rows leaving nothing behind, and a cross-check against Python's
 * json module on generated documents (tests/ingest/json_reference.py).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_ingest.h"

typedef struct fx {
    pr_json_extractor *x;
    pr_json_block *b;
    pr_json_reject rej;
} fx;

static void fx_open(fx *f, const pr_json_path *paths, size_t n, uint32_t max_depth)
{
    char err[256] = "";
    f->x = pr_json_extractor_new(paths, n, max_depth, err, sizeof(err));
    if (!f->x)
        fail_msg("extractor: %s", err);
    f->b = pr_json_block_new(f->x, 64);
    assert_non_null(f->b);
}

static void fx_close(fx *f)
{
    pr_json_block_free(f->b);
    pr_json_extractor_free(f->x);
}

/* Extract a NUL-terminated document; returns the reason (0 = row appended). */
static int ex(fx *f, const char *doc)
{
    memset(&f->rej, 0, sizeof(f->rej));
    return pr_json_extract(f->x, f->b, doc, strlen(doc), &f->rej);
}

static int exn(fx *f, const char *doc, size_t len)
{
    memset(&f->rej, 0, sizeof(f->rej));
    return pr_json_extract(f->x, f->b, doc, len, &f->rej);
}

/* First value index of row r of column c. */
static uint32_t first(const pr_json_col *c, uint32_t r)
{
    uint32_t v = 0;
    for (uint32_t i = 0; i < r; i++)
        v += c->count[i];
    return v;
}

static int64_t last_i64(fx *f, uint32_t col, uint32_t k)
{
    const pr_json_col *c = &f->b->cols[col];
    assert_true(k < c->count[f->b->rows - 1]);
    return c->i64[first(c, f->b->rows - 1) + k];
}

static double last_f64(fx *f, uint32_t col)
{
    const pr_json_col *c = &f->b->cols[col];
    assert_int_equal(c->count[f->b->rows - 1], 1);
    return c->f64[first(c, f->b->rows - 1)];
}

/* Row `r`'s k-th string of column col, NUL-terminated (static buffer). */
static const char *str_at(fx *f, uint32_t col, uint32_t r, uint32_t k)
{
    static char buf[256];
    const pr_json_col *c = &f->b->cols[col];
    assert_true(k < c->count[r]);
    pr_json_str s = c->str[first(c, r) + k];
    assert_true(s.len < sizeof(buf));
    memcpy(buf, f->b->arena + s.off, s.len);
    buf[s.len] = 0;
    return buf;
}

static const char *last_str(fx *f, uint32_t col, uint32_t k)
{
    return str_at(f, col, f->b->rows - 1, k);
}

static uint8_t last_present(fx *f, uint32_t col)
{
    return f->b->cols[col].present[f->b->rows - 1];
}

static uint32_t last_count(fx *f, uint32_t col)
{
    return f->b->cols[col].count[f->b->rows - 1];
}

static const pr_json_path P_ONE_OF_EACH[] = {
    {"i", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"d", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"b", PR_JSON_BOOL, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"s", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"k", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"l", PR_JSON_INT64, PR_JSON_LIST, 3, PR_JSON_AT},
    {"e", PR_JSON_STRING, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT},
};
enum { C_I, C_D, C_B, C_S, C_K, C_L, C_E };
#define N_ONE (sizeof(P_ONE_OF_EACH) / sizeof(P_ONE_OF_EACH[0]))

static void test_reason_names(void **state)
{
    (void)state;
    for (int r = 0; r < PR_JSON__REASONS; r++) {
        const char *n = pr_json_reason_name(r);
        assert_string_not_equal(n, "unknown");
        for (int q = 0; q < r; q++)
            assert_string_not_equal(n, pr_json_reason_name(q));
    }
    assert_string_equal(pr_json_reason_name(PR_JSON__REASONS), "unknown");
    assert_string_equal(pr_json_reason_name(-1), "unknown");
    assert_string_equal(pr_json_reason_name(PR_JSON_WRONG_TYPE), "wrong_type");
    assert_string_equal(pr_json_reason_name(PR_JSON_NUMBER_OUT_OF_RANGE), "number_out_of_range");
}

/* One document per reason, and the detail names the path where there is one. */
static void test_every_reason(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, P_ONE_OF_EACH, N_ONE, 4);
    static const struct {
        const char *doc;
        int reason;
    } cases[] = {
        {"", PR_JSON_NOT_JSON},
        {"   ", PR_JSON_NOT_JSON},
        {"hello", PR_JSON_NOT_JSON},
        {"{x:1}", PR_JSON_NOT_JSON},
        {"{\"i\":1,}", PR_JSON_NOT_JSON},
        {"{\"i\" 1}", PR_JSON_NOT_JSON},
        {"{\"i\":1} x", PR_JSON_NOT_JSON},
        {"{\"i\":1}{}", PR_JSON_NOT_JSON},
        {"{\"u\":tru}", PR_JSON_NOT_JSON},
        {"{\"u\":nul }", PR_JSON_NOT_JSON},
        {"{\"u\":\"a\tb\"}", PR_JSON_NOT_JSON},
        {"{\"u\":NaN}", PR_JSON_NOT_JSON},
        {"[1,2]", PR_JSON_NOT_OBJECT},
        {"\"str\"", PR_JSON_NOT_OBJECT},
        {"42", PR_JSON_NOT_OBJECT},
        {"null", PR_JSON_NOT_OBJECT},
        {" [1, {\"a\": 2}] ", PR_JSON_NOT_OBJECT},
        /* text that only starts like a JSON value is not JSON */
        {"nul", PR_JSON_NOT_JSON},
        {"not json at all", PR_JSON_NOT_JSON},
        {"[1,2] x", PR_JSON_NOT_JSON},
        {"\"open", PR_JSON_NOT_JSON},
        {"{", PR_JSON_TRUNCATED},
        {"{\"i\":1", PR_JSON_TRUNCATED},
        {"{\"s\":\"ab", PR_JSON_TRUNCATED},
        {"{\"i\":", PR_JSON_TRUNCATED},
        {"{\"u\":[1,2", PR_JSON_TRUNCATED},
        {"{\"u\":{\"v\":tr", PR_JSON_TRUNCATED},
        {"{\"s\":\"\\u12", PR_JSON_TRUNCATED},
        {"{\"s\":\"\xc3\xa9\"", PR_JSON_TRUNCATED},
        {"{\"s\":\"\xc3", PR_JSON_TRUNCATED},
        {"{\"s\":\"\xff\"}", PR_JSON_BAD_UTF8},
        {"{\"s\":\"\\q\"}", PR_JSON_BAD_ESCAPE},
        {"{\"s\":\"\\ud800\"}", PR_JSON_BAD_ESCAPE},
        {"{\"u\":[[[[1]]]]}", PR_JSON_TOO_DEEP},
        {"{\"d\":1e309}", PR_JSON_NUMBER_OUT_OF_RANGE},
        {"{\"l\":[1,2,3,4]}", PR_JSON_LIST_TOO_LONG},
        {"{\"i\":\"1\"}", PR_JSON_WRONG_TYPE},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int r = ex(&f, cases[i].doc);
        if (r != cases[i].reason)
            fail_msg("case %zu '%s': got %s (%s), want %s", i, cases[i].doc, pr_json_reason_name(r),
                     f.rej.detail, pr_json_reason_name(cases[i].reason));
        assert_int_equal(f.rej.reason, r);
        assert_true(f.rej.detail[0] != 0);
        assert_true(f.rej.offset <= strlen(cases[i].doc));
    }
    assert_int_equal(f.b->rows, 0);
    assert_int_equal(ex(&f, "{\"i\":\"1\"}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "i: expected an int64"));
    assert_int_equal(f.rej.offset, 5);
    /* NULL reject pointer is fine */
    assert_int_equal(pr_json_extract(f.x, f.b, "[", 1, NULL), PR_JSON_NOT_JSON);
    fx_close(&f);
}

static void test_wrong_types(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, P_ONE_OF_EACH, N_ONE, 0);
    static const char *const bad[] = {
        "{\"i\":1.5}",       "{\"i\":1e2}",   "{\"i\":true}",    "{\"i\":{}}",
        "{\"i\":[1]}",       "{\"d\":\"1\"}", "{\"d\":false}",   "{\"b\":1}",
        "{\"b\":\"true\"}",  "{\"s\":1}",     "{\"s\":[\"a\"]}", "{\"s\":{\"a\":1}}",
        "{\"k\":1.5}",       "{\"k\":true}",  "{\"k\":[\"a\"]}", "{\"l\":1}",
        "{\"l\":[1,null]}",  "{\"l\":[[1]]}", "{\"l\":[{}]}",    "{\"l\":[1,\"2\"]}",
        "{\"e\":[\"a\",1]}", "{\"e\":{}}",    "{\"l\":{}}",      "{\"l\":\"1,2\"}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = ex(&f, bad[i]);
        if (r != PR_JSON_WRONG_TYPE)
            fail_msg("'%s': got %s (%s)", bad[i], pr_json_reason_name(r), f.rej.detail);
    }
    assert_int_equal(f.b->rows, 0);
    fx_close(&f);
}

/* Paths through nested objects; the same key at several levels. */
static void test_nesting(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {
        {"id", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
        {"user.id", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
        {"user.user.id", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
        {"a.b.c.d", PR_JSON_BOOL, PR_JSON_SCALAR, 0, PR_JSON_AT},
        {"a.x", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    };
    fx f;
    fx_open(&f, paths, 5, 0);
    assert_int_equal(ex(&f, "{\"user\":{\"id\":\"u1\",\"user\":{\"id\":3,\"x\":{\"id\":9}},"
                            "\"z\":{\"user\":{\"id\":7}}},\"id\":1,"
                            "\"a\":{\"b\":{\"c\":{\"d\":true}},\"x\":2.5}}"),
                     0);
    assert_int_equal(last_i64(&f, 0, 0), 1);
    assert_string_equal(last_str(&f, 1, 0), "u1");
    assert_int_equal(last_i64(&f, 2, 0), 3);
    assert_int_equal(f.b->cols[3].b[0], 1);
    assert_true(last_f64(&f, 4) == 2.5);
    /* missing intermediate objects, or null ones: absent */
    assert_int_equal(ex(&f, "{\"user\":null,\"a\":{\"b\":null}}"), 0);
    for (int c = 0; c < 5; c++)
        assert_int_equal(last_present(&f, c), PR_JSON_ABSENT);
    /* a scalar where an object is needed */
    assert_int_equal(ex(&f, "{\"user\":5}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "user: an object expected"));
    assert_int_equal(ex(&f, "{\"a\":{\"b\":[]}}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "a.b:"));
    /* compile errors */
    char err[256];
    static const pr_json_path prefix[] = {{"a", PR_JSON_INT64, 0, 0, PR_JSON_AT},
                                          {"a.b", PR_JSON_INT64, 0, 0, PR_JSON_AT}};
    assert_null(pr_json_extractor_new(prefix, 2, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "'a'"));
    static const pr_json_path prefix2[] = {{"a.b", PR_JSON_INT64, 0, 0, PR_JSON_AT},
                                           {"a", PR_JSON_INT64, 0, 0, PR_JSON_AT}};
    assert_null(pr_json_extractor_new(prefix2, 2, 0, err, sizeof(err)));
    static const pr_json_path dup[] = {{"a.b", PR_JSON_INT64, 0, 0, PR_JSON_AT},
                                       {"a.b", PR_JSON_BOOL, 0, 0, PR_JSON_AT}};
    assert_null(pr_json_extractor_new(dup, 2, 0, err, sizeof(err)));
    assert_non_null(strstr(err, "twice"));
    static const pr_json_path empty[] = {{"a..b", PR_JSON_INT64, 0, 0, PR_JSON_AT}};
    assert_null(pr_json_extractor_new(empty, 1, 0, err, sizeof(err)));
    static const pr_json_path badtype[] = {{"a", 0, 0, 0, PR_JSON_AT}};
    assert_null(pr_json_extractor_new(badtype, 1, 0, err, sizeof(err)));
    assert_null(pr_json_extractor_new(paths, 5, PR_JSON_MAX_DEPTH_LIMIT + 1, err, sizeof(err)));
    fx_close(&f);
}

static void test_depth(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"a.b", PR_JSON_INT64, PR_JSON_LIST, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 1, 3);
    assert_int_equal(ex(&f, "{\"a\":{\"b\":[1]}}"), 0); /* list at depth 3 */
    assert_int_equal(ex(&f, "{\"x\":{\"y\":{}}}"), 0);
    assert_int_equal(ex(&f, "{\"x\":{\"y\":{\"z\":1}}}"), 0);
    assert_int_equal(ex(&f, "{\"x\":{\"y\":{\"z\":[]}}}"), PR_JSON_TOO_DEEP);
    assert_int_equal(ex(&f, "{\"x\":[[[]]]}"), PR_JSON_TOO_DEEP);
    fx_close(&f);
    /* very deep skipped nesting at the default limit: rejected, no crash */
    fx_open(&f, paths, 1, 0);
    size_t n = 100000;
    char *doc = malloc(n + 8);
    doc[0] = '{';
    memcpy(doc + 1, "\"x\":", 4);
    memset(doc + 5, '[', n);
    assert_int_equal(exn(&f, doc, n + 5), PR_JSON_TOO_DEEP);
    assert_int_equal(f.rej.offset, 5 + PR_JSON_DEFAULT_MAX_DEPTH - 1);
    free(doc);
    fx_close(&f);
}

static void test_escapes(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {
        {"s", PR_JSON_STRING, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 1, 0);
    assert_int_equal(ex(&f, "{\"s\":\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"}"), 0);
    assert_string_equal(last_str(&f, 0, 0), "a\"b\\c/d\b\f\n\r\t");
    assert_int_equal(ex(&f, "{\"s\":[\"\\u00e9\",\"\\u20AC\",\"\\ud83d\\ude00\",\"\\u0041\"]}"), 0);
    assert_string_equal(last_str(&f, 0, 0), "\xc3\xa9");
    assert_string_equal(last_str(&f, 0, 1), "\xe2\x82\xac");
    assert_string_equal(last_str(&f, 0, 2), "\xf0\x9f\x98\x80");
    assert_string_equal(last_str(&f, 0, 3), "A");
    assert_int_equal(ex(&f, "{\"s\":\"\\udbff\\udfff|\\u0000|\"}"), 0);
    const pr_json_col *c = &f.b->cols[0];
    pr_json_str s = c->str[c->n_values - 1];
    assert_int_equal(s.len, 7);
    assert_memory_equal(f.b->arena + s.off, "\xf4\x8f\xbf\xbf|\0|", 7);
    /* a long string crossing the 8-byte fast path, with an escape at the end */
    assert_int_equal(ex(&f, "{\"s\":\"0123456789abcdefghijklmnopqrstuvwxyz\\n\"}"), 0);
    assert_string_equal(last_str(&f, 0, 0), "0123456789abcdefghijklmnopqrstuvwxyz\n");
    uint32_t rows = f.b->rows;
    static const char *const bad[] = {
        "{\"s\":\"\\ud800\"}",    "{\"s\":\"\\ud800x\"}",
        "{\"s\":\"\\ud800\\n\"}", "{\"s\":\"\\ud800\\u0041\"}",
        "{\"s\":\"\\udc00\"}",    "{\"s\":\"\\udfff\\ud800\"}",
        "{\"s\":\"\\u12g4\"}",    "{\"s\":\"\\x41\"}",
        "{\"s\":\"\\U0041\"}",    "{\"s\":\"\\'\"}",
        "{\"t\":\"\\ud800\"}",    "{\"\\ud800\":1}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int r = ex(&f, bad[i]);
        if (r != PR_JSON_BAD_ESCAPE)
            fail_msg("'%s': got %s", bad[i], pr_json_reason_name(r));
    }
    assert_int_equal(f.b->rows, rows);
    fx_close(&f);
}

/* Keys are matched after unescaping; the same goes for non-ASCII keys. */
static void test_escaped_keys(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"id", PR_JSON_INT64, 0, 0, PR_JSON_AT},
                                         {"caf\xc3\xa9.n", PR_JSON_INT64, 0, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 2, 0);
    assert_int_equal(ex(&f, "{\"\\u0069d\":5,\"caf\\u00e9\":{\"\\u006e\":6}}"), 0);
    assert_int_equal(last_i64(&f, 0, 0), 5);
    assert_int_equal(last_i64(&f, 1, 0), 6);
    assert_int_equal(ex(&f, "{\"caf\xc3\xa9\":{\"n\":7},\"i\\u0064\\u0000\":1}"), 0);
    assert_int_equal(last_present(&f, 0), PR_JSON_ABSENT);
    assert_int_equal(last_i64(&f, 1, 0), 7);
    fx_close(&f);
}

static void test_bad_utf8(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"s", PR_JSON_STRING, 0, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 1, 0);
    static const char *const bad[] = {
        "\xc0\x80",
        "\xc1\xbf",
        "\xe0\x80\x80",
        "\xe0\x9f\xbf", /* overlongs */
        "\xf0\x80\x80\x80",
        "\xf0\x8f\xbf\xbf", /* overlongs */
        "\xed\xa0\x80",
        "\xed\xbf\xbf",
        "\xed\xa0\x80\xed\xb0\x80", /* surrogates */
        "\xe2\x82",
        "\xc3",
        "\xf0\x9f\x98", /* truncated */
        "\x80",
        "\xbf",
        "\xf5\x80\x80\x80",
        "\xff", /* never valid */
        "\xf4\x90\x80\x80",
        "\xe2\x28\xa1",
        "\xc3\x28", /* > U+10FFFF, bad */
    };
    char doc[64];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        for (int where = 0; where < 3; where++) {
            const char *fmt = where == 0   ? "{\"s\":\"ab%scd\"}"
                              : where == 1 ? "{\"x\":[\"%s\"]}"
                                           : "{\"k%s\":1}";
            snprintf(doc, sizeof(doc), fmt, bad[i]);
            int r = ex(&f, doc);
            if (r != PR_JSON_BAD_UTF8)
                fail_msg("case %zu/%d: got %s (%s)", i, where, pr_json_reason_name(r),
                         f.rej.detail);
        }
    }
    /* raw bytes outside strings */
    assert_int_equal(ex(&f, "{\"s\":\"a\"\xc3\xa9}"), PR_JSON_NOT_JSON);
    static const char *const good[] = {"\x7f",         "\xc2\x80",         "\xdf\xbf",
                                       "\xe0\xa0\x80", "\xed\x9f\xbf",     "\xee\x80\x80",
                                       "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(doc, sizeof(doc), "{\"s\":\"%s\",\"k%s\":\"%s\"}", good[i], good[i], good[i]);
        assert_int_equal(ex(&f, doc), 0);
        assert_string_equal(last_str(&f, 0, 0), good[i]);
    }
    fx_close(&f);
}

static void test_numbers(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"i", PR_JSON_INT64, 0, 0, PR_JSON_AT},
                                         {"d", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT},
                                         {"k", PR_JSON_KEY, 0, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 3, 0);
    assert_int_equal(ex(&f, "{\"i\":-0,\"d\":-0,\"k\":-0}"), 0);
    assert_int_equal(last_i64(&f, 0, 0), 0);
    assert_true(last_f64(&f, 1) == 0.0 && !signbit(last_f64(&f, 1)));
    assert_string_equal(last_str(&f, 2, 0), "0");
    assert_int_equal(ex(&f, "{\"d\":-0.0}"), 0);
    assert_true(last_f64(&f, 1) == 0.0 && signbit(last_f64(&f, 1)));
    assert_int_equal(ex(&f, "{\"i\":9223372036854775807,\"k\":-9223372036854775808}"), 0);
    assert_true(last_i64(&f, 0, 0) == INT64_MAX);
    assert_string_equal(last_str(&f, 2, 0), "-9223372036854775808");
    assert_int_equal(ex(&f, "{\"i\":-9223372036854775808,\"k\":42}"), 0);
    assert_true(last_i64(&f, 0, 0) == INT64_MIN);
    assert_string_equal(last_str(&f, 2, 0), "42");
    assert_int_equal(ex(&f, "{\"i\":9223372036854775808}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"i\":-9223372036854775809}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"i\":100000000000000000000000}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"k\":9223372036854775808}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"i\":1e309}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"d\":1e309}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"d\":-1e309}"), PR_JSON_NUMBER_OUT_OF_RANGE);
    assert_int_equal(ex(&f, "{\"x\":1e309}"), 0); /* skipped: syntax only */
    static const struct {
        const char *lit;
        double want;
    } dbl[] = {
        {"1e308", 1e308},
        {"1.7976931348623157e308", 1.7976931348623157e308},
        {"9223372036854775808", 9223372036854775808.0},
        {"123456789012345678901234567890", 123456789012345678901234567890.0},
        {"0.1", 0.1},
        {"2.5e-3", 2.5e-3},
        {"1E2", 100.0},
        {"1e+2", 100.0},
        {"-12.75", -12.75},
        {"4.9e-324", 4.9e-324},
        {"1e-400", 0.0},
        {"9007199254740993", 9007199254740992.0},
        {"0.30000000000000004", 0.30000000000000004},
        {"3.141592653589793238462643383279", 3.141592653589793},
        {"42", 42.0},
    };
    char doc[128];
    for (size_t i = 0; i < sizeof(dbl) / sizeof(dbl[0]); i++) {
        snprintf(doc, sizeof(doc), "{\"d\":%s}", dbl[i].lit);
        assert_int_equal(ex(&f, doc), 0);
        if (last_f64(&f, 1) != dbl[i].want)
            fail_msg("%s: got %.17g", dbl[i].lit, last_f64(&f, 1));
    }
    static const char *const syntax[] = {"01",   "-01", "00",   "1.",       ".5",
                                         "+1",   "1e",  "1e+",  "-",        "1.e5",
                                         "0x10", "--1", "1ee2", "Infinity", "-Infinity"};
    for (size_t i = 0; i < sizeof(syntax) / sizeof(syntax[0]); i++) {
        for (int skipped = 0; skipped < 2; skipped++) {
            snprintf(doc, sizeof(doc), "{\"%s\":%s}", skipped ? "x" : "d", syntax[i]);
            int r = ex(&f, doc);
            if (r != PR_JSON_NOT_JSON)
                fail_msg("%s: got %s", doc, pr_json_reason_name(r));
        }
    }
    fx_close(&f);
}

/* Decimals of 1..8 integer and 0..9 fraction digits, signs and exponents
 * (Clinger's exact path and strtod's), in a document long enough for any
 * read-ahead, as a value and inside a list: the same double as strtod, bit
 * for bit (-0.0 included; an integer as an integer: "-0" is 0). */
static void test_decimals_like_strtod(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"d", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT},
                                         {"l", PR_JSON_DOUBLE, PR_JSON_LIST, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 2, 0);
    uint64_t x = 88172645463325252ull;
    char lit[64], doc[256];
    for (int it = 0; it < 200000; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int ni = 1 + (int)(x % 8), nf = (int)((x >> 8) % 10), k = 0;
        if ((x >> 16) & 1)
            lit[k++] = '-';
        for (int i = 0; i < ni; i++)
            lit[k++] = (char)('0' + (i == 0 && ni > 1 ? 1 + (x >> (20 + i)) % 9
                                                      : (x >> (20 + 3 * i)) % 10));
        if (nf) {
            lit[k++] = '.';
            for (int i = 0; i < nf; i++)
                lit[k++] = (char)('0' + (x >> (40 + 2 * i)) % 10);
        }
        if (((x >> 60) & 7) == 0)
            k += snprintf(lit + k, sizeof(lit) - (size_t)k, "e%d", (int)((x >> 50) % 9) - 4);
        lit[k] = 0;
        /* an integer is read as one ("-0" is 0, docs: the extractor) */
        double want = strchr(lit, '.') || strchr(lit, 'e') ? strtod(lit, NULL)
                                                           : (double)strtoll(lit, NULL, 10);
        pr_json_block_reset(f.b);
        snprintf(doc, sizeof(doc), "{\"d\":%s,\"l\":[%s, %s],\"pad\":\"%s\"}", lit, lit, lit,
                 "0123456789012345678901234567890123456789");
        assert_int_equal(ex(&f, doc), 0);
        const pr_json_col *l = &f.b->cols[1];
        uint32_t at = first(l, f.b->rows - 1);
        assert_int_equal(l->count[f.b->rows - 1], 2);
        double got[3] = {last_f64(&f, 0), l->f64[at], l->f64[at + 1]};
        for (int i = 0; i < 3; i++)
            if (memcmp(&got[i], &want, sizeof(want)) != 0)
                fail_msg("%s: got %.17g (%d), strtod %.17g", lit, got[i], i, want);
    }
    fx_close(&f);
}

/* Unknown fields of every kind are skipped; key order does not matter. */
static void test_unknown_fields_and_order(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"u.id", PR_JSON_KEY, 0, 0, PR_JSON_AT},
                                         {"h", PR_JSON_INT64, PR_JSON_LIST, 0, PR_JSON_AT},
                                         {"p", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 3, 0);
    static const char *const docs[] = {
        "{\"u\":{\"id\":\"x1\"},\"h\":[1,2],\"p\":1.5}",
        "{\"p\":1.5,\"h\":[1,2],\"u\":{\"id\":\"x1\"}}",
        " {\"zz\":{\"a\":[1,{\"b\":null}],\"c\":\"\\u00e9\"},\"h\" : [ 1 , 2 ] ,\"u\":{\"q\":[],"
        "\"id\":\"x1\",\"r\":{}},\"n\":null,\"t\":true,\"f\":false,\"e\":-1.5e-7,\"p\":1.5}\r\n",
        "{\"u\":{\"x\":{\"id\":\"no\"},\"id\":\"x1\"},\"id\":\"no\",\"p\":1.5,\"h\":[1,2]}",
    };
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ex(&f, docs[i]), 0);
        assert_string_equal(last_str(&f, 0, 0), "x1");
        assert_int_equal(last_count(&f, 1), 2);
        assert_int_equal(last_i64(&f, 1, 0), 1);
        assert_int_equal(last_i64(&f, 1, 1), 2);
        assert_true(last_f64(&f, 2) == 1.5);
    }
    fx_close(&f);
}

static void test_lists_null_absent(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, P_ONE_OF_EACH, N_ONE, 0);
    assert_int_equal(ex(&f, "{\"l\":[],\"e\":\"one\",\"i\":null}"), 0);
    assert_int_equal(last_present(&f, C_L), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, C_L), 0);
    assert_int_equal(last_present(&f, C_E), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, C_E), 1);
    assert_string_equal(last_str(&f, C_E, 0), "one");
    assert_int_equal(last_present(&f, C_I), PR_JSON_NULL);
    assert_int_equal(last_count(&f, C_I), 0);
    assert_int_equal(last_present(&f, C_D), PR_JSON_ABSENT);
    assert_int_equal(last_count(&f, C_D), 0);
    assert_int_equal(ex(&f, "{\"l\":[7,8,9],\"e\":[\"a\",\"b\"],\"l2\":[1,2,3,4,5],\"b\":false}"),
                     0);
    assert_int_equal(last_count(&f, C_L), 3);
    assert_int_equal(last_i64(&f, C_L, 2), 9);
    assert_int_equal(last_count(&f, C_E), 2);
    assert_string_equal(last_str(&f, C_E, 1), "b");
    assert_int_equal(last_present(&f, C_B), PR_JSON_PRESENT);
    assert_int_equal(f.b->cols[C_B].b[0], 0);
    assert_int_equal(ex(&f, "{\"l\":null,\"e\":[]}"), 0);
    assert_int_equal(last_present(&f, C_L), PR_JSON_NULL);
    assert_int_equal(last_present(&f, C_E), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, C_E), 0);
    assert_int_equal(ex(&f, "{\"l\":[1,2,3,4]}"), PR_JSON_LIST_TOO_LONG);
    assert_non_null(strstr(f.rej.detail, "l: list too long"));
    /* jagged layout: values key-major across rows */
    assert_int_equal(f.b->rows, 3);
    assert_int_equal(f.b->cols[C_L].n_values, 3);
    assert_int_equal(f.b->cols[C_E].n_values, 3);
    assert_string_equal(str_at(&f, C_E, 0, 0), "one");
    assert_string_equal(str_at(&f, C_E, 1, 0), "a");
    fx_close(&f);
}

/* Lists of objects (issue 20 follow-up): a path through an array of objects
 * maps over its elements; absent or null fields drop that element; one list
 * level per path; a single-valued path that crosses a list is wrong_type. */
/* Row r's k-th value of an ANY column (static buffer): "s:TEXT", "i:N",
 * "d:X", "b:0/1" or "hole". */
static const char *any_at(fx *f, uint32_t col, uint32_t r, uint32_t k)
{
    static char buf[256];
    const pr_json_col *c = &f->b->cols[col];
    assert_true(k < c->count[r]);
    const pr_json_any *a = &c->any[first(c, r) + k];
    switch (a->type) {
    case PR_JSON_STRING:
        snprintf(buf, sizeof(buf), "s:%.*s", (int)a->s.len, f->b->arena + a->s.off);
        break;
    case PR_JSON_INT64:
        snprintf(buf, sizeof(buf), "i:%lld", (long long)a->i);
        break;
    case PR_JSON_DOUBLE:
        snprintf(buf, sizeof(buf), "d:%g", a->d);
        break;
    case PR_JSON_BOOL:
        snprintf(buf, sizeof(buf), "b:%d", (int)a->i);
        break;
    default:
        snprintf(buf, sizeof(buf), "hole");
    }
    return buf;
}

/* A map's entries (PR_JSON_KEYS, PR_JSON_VALUES): keys in the document's
 * order, values aligned with them, a repeated key in its first place with
 * its last value, null a hole; the map a list level of its own. */
static void test_map_entries(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {
        {"user.aff", PR_JSON_ANY, PR_JSON_ALIGNED, 3, PR_JSON_KEYS},
        {"user.aff", PR_JSON_ANY, PR_JSON_ALIGNED, 3, PR_JSON_VALUES},
        {"tags", PR_JSON_ANY, PR_JSON_LIST, 0, PR_JSON_KEYS},
        {"user.id", PR_JSON_ANY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    };
    fx f;
    fx_open(&f, paths, 4, 0);
    assert_int_equal(ex(&f, "{\"user\":{\"id\":7,\"aff\":{\"sports\":0.5,\"n\\u0065ws\":2,"
                            "\"x\":null,\"sports\":true}},\"tags\":{\"a\":[1,{}],\"b\":{}}}"),
                     0);
    uint32_t r = f.b->rows - 1;
    assert_int_equal(last_count(&f, 0), 3);
    assert_int_equal(last_count(&f, 1), 3);
    assert_string_equal(any_at(&f, 0, r, 0), "s:sports");
    assert_string_equal(any_at(&f, 0, r, 1), "s:news");
    assert_string_equal(any_at(&f, 0, r, 2), "s:x");
    assert_string_equal(any_at(&f, 1, r, 0), "b:1"); /* sports: its last value, first place */
    assert_string_equal(any_at(&f, 1, r, 1), "i:2");
    assert_string_equal(any_at(&f, 1, r, 2), "hole");
    assert_int_equal(last_count(&f, 2), 2); /* keys only: any value, skipped */
    assert_string_equal(any_at(&f, 2, r, 1), "s:b");
    assert_string_equal(any_at(&f, 3, r, 0), "i:7");
    /* {} present and empty; null and absent read as absent */
    assert_int_equal(ex(&f, "{\"user\":{\"aff\":{}},\"tags\":null}"), 0);
    assert_int_equal(last_present(&f, 0), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, 0), 0);
    assert_int_equal(last_present(&f, 2), PR_JSON_ABSENT);
    /* the map repeated: the last wins, whole */
    assert_int_equal(ex(&f, "{\"user\":{\"aff\":{\"a\":1,\"b\":2},\"aff\":{\"c\":3}}}"), 0);
    r = f.b->rows - 1;
    assert_int_equal(last_count(&f, 0), 1);
    assert_string_equal(any_at(&f, 0, r, 0), "s:c");
    assert_string_equal(any_at(&f, 1, r, 0), "i:3");
    /* a repeated key does not count twice against max_list */
    assert_int_equal(ex(&f, "{\"user\":{\"aff\":{\"a\":1,\"b\":2,\"a\":5,\"c\":3}}}"), 0);
    assert_int_equal(last_count(&f, 1), 3);
    assert_string_equal(any_at(&f, 1, f.b->rows - 1, 0), "i:5");
    uint32_t rows = f.b->rows, nv0 = f.b->cols[0].n_values, nv1 = f.b->cols[1].n_values;
    size_t arena = f.b->arena_len;
    static const struct {
        const char *doc;
        int reason;
        const char *detail;
    } bad[] = {
        {"{\"user\":{\"aff\":{\"a\":1,\"b\":2,\"c\":3,\"d\":4}}}", PR_JSON_LIST_TOO_LONG,
         "user.aff: map with too many keys"},
        {"{\"user\":{\"aff\":[{\"a\":1}]}}", PR_JSON_WRONG_TYPE,
         "user.aff: a map (an object) expected"},
        {"{\"user\":{\"aff\":5}}", PR_JSON_WRONG_TYPE, "user.aff: a map (an object) expected"},
        {"{\"user\":{\"aff\":{\"a\":[1]}}}", PR_JSON_WRONG_TYPE,
         "user.aff: a list or object as a map's value"},
        {"{\"user\":{\"aff\":{\"a\":{}}}}", PR_JSON_WRONG_TYPE,
         "user.aff: a list or object as a map's value"},
        {"{\"user\":[{\"aff\":{\"a\":1}}]}", PR_JSON_WRONG_TYPE,
         "a list of objects, under a single-valued path"},
        {"{\"user\":{\"aff\":{\"a\":1,}}}", PR_JSON_NOT_JSON, "key expected"},
        {"{\"user\":{\"aff\":{\"a\" 1}}}", PR_JSON_NOT_JSON, "':' expected"},
        {"{\"user\":{\"aff\":{\"a\":1", PR_JSON_TRUNCATED, ""},
        {"{\"tags\":{\"a\":[1,}}", PR_JSON_NOT_JSON, ""},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = ex(&f, bad[i].doc);
        if (rc != bad[i].reason || !strstr(f.rej.detail, bad[i].detail))
            fail_msg("case %zu: %d '%s'", i, rc, f.rej.detail);
    }
    /* rejects leave nothing behind */
    assert_int_equal(f.b->rows, rows);
    assert_int_equal(f.b->cols[0].n_values, nv0);
    assert_int_equal(f.b->cols[1].n_values, nv1);
    assert_int_equal(f.b->arena_len, arena);
    fx_close(&f);

    /* a big map: repeated keys found past the linear scan (a hash table),
     * a second map in the same row and the next row start their own */
    static const pr_json_path big[] = {
        {"m", PR_JSON_ANY, PR_JSON_ALIGNED, 100, PR_JSON_KEYS},
        {"m", PR_JSON_ANY, PR_JSON_ALIGNED, 100, PR_JSON_VALUES},
    };
    fx_open(&f, big, 2, 0);
    for (int pass = 0; pass < 2; pass++) {
        char doc[8192];
        int n = snprintf(doc, sizeof(doc), "{\"m\": {\"zz\": 0");
        for (int k = 0; k < 60; k++) /* k40..k59 repeat k0..k19 (and zz at 50) */
            n +=
                snprintf(doc + n, sizeof(doc) - (size_t)n, ", \"k%d\": %d", k < 40 ? k : k - 40, k);
        n += snprintf(doc + n, sizeof(doc) - (size_t)n, ", \"zz\": 7}%s}",
                      pass ? ", \"m\": {\"a\": 1, \"a\": 2}" : "");
        assert_int_equal(ex(&f, doc), 0);
        r = f.b->rows - 1;
        if (pass) { /* the map repeated: the last wins */
            assert_int_equal(last_count(&f, 0), 1);
            assert_string_equal(any_at(&f, 1, r, 0), "i:2");
            continue;
        }
        assert_int_equal(last_count(&f, 0), 41);
        assert_int_equal(last_count(&f, 1), 41);
        assert_string_equal(any_at(&f, 0, r, 0), "s:zz");
        assert_string_equal(any_at(&f, 1, r, 0), "i:7");
        assert_string_equal(any_at(&f, 0, r, 5), "s:k4");
        assert_string_equal(any_at(&f, 1, r, 5), "i:44");  /* k4's last value */
        assert_string_equal(any_at(&f, 1, r, 30), "i:29"); /* k29, given once */
    }
    fx_close(&f);

    /* under a list of objects a map is a second list level */
    static const pr_json_path in_list[] = {
        {"imp.m", PR_JSON_ANY, PR_JSON_LIST, 0, PR_JSON_KEYS},
    };
    fx_open(&f, in_list, 1, 0);
    assert_int_equal(ex(&f, "{\"imp\":[{\"m\":{\"a\":1}}]}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "a map inside a list of objects"));
    fx_close(&f);

    /* compiling: a map's path names no key under it; values come with keys;
     * list shapes of PR_JSON_ANY only */
    static const struct {
        pr_json_path p[2];
        size_t n;
        const char *err;
    } refused[] = {
        {{{"m", PR_JSON_ANY, PR_JSON_LIST, 0, PR_JSON_KEYS},
          {"m.x", PR_JSON_ANY, 0, 0, PR_JSON_AT}},
         2,
         "json path 'm' is read as a map"},
        {{{"m", PR_JSON_ANY, PR_JSON_ALIGNED, 0, PR_JSON_VALUES}},
         1,
         "a map's values are read with its keys"},
        {{{"m", PR_JSON_ANY, PR_JSON_SCALAR, 0, PR_JSON_KEYS}}, 1, "bad type, shape or part"},
        {{{"m", PR_JSON_KEY, PR_JSON_LIST, 0, PR_JSON_KEYS}}, 1, "bad type, shape or part"},
        {{{"m", PR_JSON_ANY, PR_JSON_LIST, 0, PR_JSON_VALUES}}, 1, "bad type, shape or part"},
        {{{"m", PR_JSON_ANY, PR_JSON_LIST, 0, PR_JSON_KEYS}, {"m", PR_JSON_ANY, 0, 0, PR_JSON_AT}},
         2,
         "is a prefix of another path"},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        char err[256] = "";
        pr_json_extractor *x =
            pr_json_extractor_new(refused[i].p, refused[i].n, 0, err, sizeof(err));
        if (x || !strstr(err, refused[i].err))
            fail_msg("refused case %zu: %s", i, err);
    }
}

static void test_lists_of_objects(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {
        {"imp.ad_id", PR_JSON_KEY, PR_JSON_LIST, 3, PR_JSON_AT},
        {"imp.pos", PR_JSON_INT64, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT},
        {"imp.meta.cat", PR_JSON_STRING, PR_JSON_LIST, 0, PR_JSON_AT},
        {"user.id", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    };
    fx f;
    fx_open(&f, paths, 4, 0);
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":\"a1\",\"pos\":1,\"meta\":{\"cat\":\"x\"}},"
                            "{\"pos\":2,\"ad_id\":\"a7\",\"junk\":[1,{}]}],\"user\":{\"id\":5}}"),
                     0);
    assert_int_equal(last_present(&f, 0), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, 0), 2);
    assert_string_equal(last_str(&f, 0, 0), "a1");
    assert_string_equal(last_str(&f, 0, 1), "a7");
    assert_int_equal(last_count(&f, 1), 2);
    assert_int_equal(last_i64(&f, 1, 0), 1);
    assert_int_equal(last_i64(&f, 1, 1), 2);
    assert_int_equal(last_count(&f, 2), 1);
    assert_string_equal(last_str(&f, 2, 0), "x");
    assert_int_equal(last_i64(&f, 3, 0), 5);
    /* absent or null fields and null elements drop that element; an int id is a key */
    assert_int_equal(ex(&f, "{\"imp\":[{\"pos\":1},null,{\"ad_id\":null,\"meta\":null},"
                            "{\"ad_id\":42},{}]}"),
                     0);
    assert_int_equal(last_count(&f, 0), 1);
    assert_string_equal(last_str(&f, 0, 0), "42");
    assert_int_equal(last_count(&f, 1), 1);
    assert_int_equal(last_present(&f, 2), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, 2), 0);
    assert_int_equal(last_present(&f, 3), PR_JSON_ABSENT);
    /* [] and null */
    assert_int_equal(ex(&f, "{\"imp\":[]}"), 0);
    assert_int_equal(last_present(&f, 0), PR_JSON_PRESENT);
    assert_int_equal(last_count(&f, 0), 0);
    assert_int_equal(ex(&f, "{\"imp\":null}"), 0);
    assert_int_equal(last_present(&f, 0), PR_JSON_ABSENT);
    /* a key repeated inside an element: the last wins, in that element only */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":\"a\"},{\"ad_id\":\"b\",\"ad_id\":\"c\"}]}"), 0);
    assert_int_equal(last_count(&f, 0), 2);
    assert_string_equal(last_str(&f, 0, 0), "a");
    assert_string_equal(last_str(&f, 0, 1), "c");
    /* the list repeated: the last wins */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":\"a\"}],\"imp\":[{\"ad_id\":\"b\"}]}"), 0);
    assert_int_equal(last_count(&f, 0), 1);
    assert_string_equal(last_str(&f, 0, 0), "b");
    uint32_t rows = f.b->rows, nv = f.b->cols[0].n_values;
    /* max_list counts the mapped elements */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1},{\"pos\":0},{\"ad_id\":2},{\"ad_id\":3}]}"),
                     0);
    assert_int_equal(last_count(&f, 0), 3);
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1},{\"ad_id\":2},{\"ad_id\":3},{\"ad_id\":4}]}"),
                     PR_JSON_LIST_TOO_LONG);
    assert_non_null(strstr(f.rej.detail, "imp.ad_id: list too long"));
    /* wrong element types */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1.5}]}"), PR_JSON_WRONG_TYPE);
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":{}}]}"), PR_JSON_WRONG_TYPE);
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1},5]}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "a list of objects expected"));
    /* one list level per path */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":[\"a\",\"b\"]}]}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "one list level per path"));
    assert_int_equal(ex(&f, "{\"imp\":[{\"meta\":[{\"cat\":\"x\"}]}]}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "imp.meta: a list inside a list of objects"));
    /* a single-valued path crossing a list */
    assert_int_equal(ex(&f, "{\"user\":[{\"id\":1}]}"), PR_JSON_WRONG_TYPE);
    assert_non_null(strstr(f.rej.detail, "user: a list of objects, under a single-valued path"));
    /* syntax inside elements is still checked; rejects leave nothing */
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1},"), PR_JSON_TRUNCATED);
    assert_int_equal(ex(&f, "{\"imp\":[{\"ad_id\":1} {\"ad_id\":2}]}"), PR_JSON_NOT_JSON);
    assert_int_equal(f.b->rows, rows + 1);
    assert_int_equal(f.b->cols[0].n_values, nv + 3);
    fx_close(&f);
    /* depth: the elements of a list of objects are one level below the list */
    static const pr_json_path deep[] = {{"a.b.c", PR_JSON_INT64, PR_JSON_LIST, 0, PR_JSON_AT}};
    fx_open(&f, deep, 1, 3);
    assert_int_equal(ex(&f, "{\"a\":{\"b\":[1]}}"), PR_JSON_WRONG_TYPE);
    assert_int_equal(ex(&f, "{\"a\":[{\"b\":{\"c\":1}}]}"), PR_JSON_TOO_DEEP);
    assert_int_equal(ex(&f, "{\"a\":{\"b\":[{\"c\":1},{\"c\":2}]}}"), PR_JSON_TOO_DEEP);
    fx_close(&f);
    fx_open(&f, deep, 1, 4);
    assert_int_equal(ex(&f, "{\"a\":{\"b\":[{\"c\":1},{\"c\":2}]}}"), 0);
    assert_int_equal(last_count(&f, 0), 2);
    assert_int_equal(last_i64(&f, 0, 1), 2);
    fx_close(&f);
}

/* Duplicate keys: the last occurrence wins, for a whole subtree. */
static void test_duplicate_keys(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {
        {"a", PR_JSON_INT64, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT},
        {"u.id", PR_JSON_INT64, 0, 0, PR_JSON_AT},
        {"u.x", PR_JSON_INT64, 0, 0, PR_JSON_AT}};
    fx f;
    fx_open(&f, paths, 3, 0);
    assert_int_equal(ex(&f, "{\"a\":[1,2,3],\"a\":4}"), 0);
    assert_int_equal(last_count(&f, 0), 1);
    assert_int_equal(last_i64(&f, 0, 0), 4);
    assert_int_equal(f.b->cols[0].n_values, 1);
    assert_int_equal(ex(&f, "{\"a\":4,\"a\":null}"), 0);
    assert_int_equal(last_present(&f, 0), PR_JSON_NULL);
    assert_int_equal(ex(&f, "{\"u\":{\"id\":1,\"x\":2},\"u\":{\"x\":3}}"), 0);
    assert_int_equal(last_present(&f, 1), PR_JSON_ABSENT);
    assert_int_equal(last_i64(&f, 2, 0), 3);
    assert_int_equal(ex(&f, "{\"u\":{\"id\":1,\"id\":5}}"), 0);
    assert_int_equal(last_i64(&f, 1, 0), 5);
    assert_int_equal(ex(&f, "{\"u\":{\"id\":1},\"u\":null}"), 0);
    assert_int_equal(last_present(&f, 1), PR_JSON_ABSENT);
    /* every occurrence is type-checked */
    assert_int_equal(ex(&f, "{\"a\":\"x\",\"a\":1}"), PR_JSON_WRONG_TYPE);
    fx_close(&f);
}

/* A rejected document leaves no row, no value and no arena byte behind. */
static void test_reject_leaves_nothing(void **state)
{
    (void)state;
    fx f;
    fx_open(&f, P_ONE_OF_EACH, N_ONE, 0);
    assert_int_equal(ex(&f, "{\"s\":\"first\",\"l\":[1],\"e\":[\"x\"]}"), 0);
    pr_json_block snap = *f.b;
    uint32_t nv[N_ONE];
    for (size_t c = 0; c < N_ONE; c++)
        nv[c] = f.b->cols[c].n_values;
    static const char *const bad[] = {
        "{\"s\":\"abcdef\",\"l\":[1,2,3],\"e\":[\"y\",\"z\"],\"k\":7,\"i\":\"bad\"}",
        "{\"s\":\"abcdef\",\"l\":[1,2,3],\"e\":[\"y\",\"z\"],\"k\":7,\"x\":[1,2",
        "{\"s\":\"abcdef\",\"l\":[1,2,3],\"e\":[\"y\",\"z\"],\"k\":7,\"d\":1e999}",
        "{\"s\":\"abcdef\",\"l\":[1,2,3],\"e\":[\"y\",\"z\"],\"k\":7} trailing",
        "{\"s\":\"abcdef\",\"l\":[1,2,3],\"e\":[\"y\",\"z\"],\"k\":7,\"l\":[1,2,3,4]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_true(ex(&f, bad[i]) > 0);
        assert_int_equal(f.b->rows, snap.rows);
        assert_int_equal(f.b->arena_len, snap.arena_len);
        for (size_t c = 0; c < N_ONE; c++)
            assert_int_equal(f.b->cols[c].n_values, nv[c]);
    }
    assert_int_equal(ex(&f, "{\"s\":\"second\",\"l\":[2]}"), 0);
    assert_int_equal(f.b->rows, 2);
    assert_string_equal(str_at(&f, C_S, 0, 0), "first");
    assert_string_equal(str_at(&f, C_S, 1, 0), "second");
    assert_int_equal(f.b->cols[C_L].i64[1], 2);
    assert_int_equal(f.b->arena_len, 12);
    fx_close(&f);
}

static void test_block_full_and_growth(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {{"l", PR_JSON_INT64, PR_JSON_LIST, 5000, PR_JSON_AT},
                                         {"s", PR_JSON_STRING, 0, 0, PR_JSON_AT}};
    char err[256];
    pr_json_extractor *x = pr_json_extractor_new(paths, 2, 0, err, sizeof(err));
    assert_non_null(x);
    pr_json_block *b = pr_json_block_new(x, 2);
    assert_null(pr_json_block_new(x, 0));
    /* a list far longer than the initial value capacity; a long string */
    size_t cap = 5000 * 8 + 20000;
    char *doc = malloc(cap);
    size_t n = (size_t)sprintf(doc, "{\"s\":\"");
    memset(doc + n, 'z', 10000);
    n += 10000;
    n += (size_t)sprintf(doc + n, "\",\"l\":[");
    for (int i = 0; i < 5000; i++)
        n += (size_t)sprintf(doc + n, "%s%d", i ? "," : "", i);
    n += (size_t)sprintf(doc + n, "]}");
    assert_int_equal(pr_json_extract(x, b, doc, n, NULL), 0);
    assert_int_equal(pr_json_extract(x, b, "{}", 2, NULL), 0);
    assert_int_equal(pr_json_extract(x, b, "{}", 2, NULL), PR_EFULL);
    assert_int_equal(b->cols[0].count[0], 5000);
    assert_int_equal(b->cols[0].i64[4999], 4999);
    assert_int_equal(b->cols[1].str[0].len, 10000);
    assert_int_equal(b->cols[0].present[1], PR_JSON_ABSENT);
    pr_json_block_reset(b);
    assert_int_equal(b->rows, 0);
    assert_int_equal(pr_json_extract(x, b, "{\"s\":\"q\"}", 9, NULL), 0);
    assert_int_equal(b->arena_len, 1);
    free(doc);
    pr_json_block_free(b);
    pr_json_extractor_free(x);
}

/* ---- cross-check against Python's json module ---- */

static const pr_json_path REF_PATHS[] = {
    {"a", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"b", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"s", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"k", PR_JSON_KEY, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT},
    {"t", PR_JSON_BOOL, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"l", PR_JSON_INT64, PR_JSON_LIST, 5, PR_JSON_AT},
    {"o.x", PR_JSON_STRING, PR_JSON_SCALAR_OR_LIST, 0, PR_JSON_AT},
    {"o.y.z", PR_JSON_DOUBLE, PR_JSON_LIST, 4, PR_JSON_AT},
    {"o.k", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
};
#define N_REF (sizeof(REF_PATHS) / sizeof(REF_PATHS[0]))

static void put_hex(char **o, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        *o += sprintf(*o, "%02x", b[i]);
}

/* The last row in json_reference.py's EXPECTED form. */
static void format_row(const pr_json_block *b, char *o)
{
    uint32_t r = b->rows - 1;
    for (size_t p = 0; p < N_REF; p++) {
        const pr_json_col *c = &b->cols[p];
        uint32_t v0 = first(c, r);
        o += sprintf(o, "%d:%u:", c->present[r], c->count[r]);
        for (uint32_t k = 0; k < c->count[r]; k++) {
            if (k)
                *o++ = ',';
            uint32_t v = v0 + k;
            switch (REF_PATHS[p].type) {
            case PR_JSON_INT64:
                o += sprintf(o, "%lld", (long long)c->i64[v]);
                break;
            case PR_JSON_DOUBLE: {
                uint64_t bits;
                memcpy(&bits, &c->f64[v], 8);
                o += sprintf(o, "%016llx", (unsigned long long)bits);
                break;
            }
            case PR_JSON_BOOL:
                o += sprintf(o, "%d", c->b[v]);
                break;
            default:
                put_hex(&o, b->arena + c->str[v].off, c->str[v].len);
            }
        }
        *o++ = '|';
        *o = 0;
    }
}

static void test_cross_check_python(void **state)
{
    (void)state;
    const char *out = PR_BINARY_DIR "/test-tmp/json_reference.txt";
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p " PR_BINARY_DIR "/test-tmp && /usr/bin/python3 " PR_SOURCE_DIR
             "/tests/ingest/json_reference.py %s 4000 20261126",
             out);
    assert_int_equal(system(cmd), 0);
    FILE *fp = fopen(out, "r");
    assert_non_null(fp);
    char err[256];
    pr_json_extractor *x = pr_json_extractor_new(REF_PATHS, N_REF, 6, err, sizeof(err));
    assert_non_null(x);
    pr_json_block *b = pr_json_block_new(x, 1);
    size_t lcap = 1 << 16;
    char *line = malloc(lcap), *doc = malloc(lcap), *got = malloc(lcap);
    int n = 0, accepted = 0, exact_rejects = 0;
    while (fgets(line, (int)lcap, fp)) {
        char *tab = strchr(line, '\t');
        assert_non_null(tab);
        *tab = 0;
        char *want = tab + 1;
        want[strcspn(want, "\n")] = 0;
        size_t len = strlen(line) / 2;
        for (size_t i = 0; i < len; i++)
            sscanf(line + 2 * i, "%2hhx", (unsigned char *)&doc[i]);
        pr_json_block_reset(b);
        pr_json_reject rej = {0};
        int r = pr_json_extract(x, b, doc, len, &rej);
        assert_true(r >= 0);
        if (r == 0)
            format_row(b, got);
        else
            snprintf(got, lcap, "R:%s", pr_json_reason_name(r));
        bool ok;
        if (!strcmp(want, "R:syntax")) {
            ok = r > 0;
        } else {
            ok = !strcmp(want, got);
            accepted += r == 0;
            exact_rejects += r > 0;
        }
        if (!ok)
            fail_msg("document %d '%.*s': got %s (%s), want %s", n, (int)len, doc, got, rej.detail,
                     want);
        n++;
    }
    assert_int_equal(n, 4000);
    assert_true(accepted > 500 && exact_rejects > 500);
    fclose(fp);
    free(line);
    free(doc);
    free(got);
    pr_json_block_free(b);
    pr_json_extractor_free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reason_names),
        cmocka_unit_test(test_every_reason),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_escaped_keys),
        cmocka_unit_test(test_bad_utf8),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_decimals_like_strtod),
        cmocka_unit_test(test_unknown_fields_and_order),
        cmocka_unit_test(test_lists_null_absent),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_lists_of_objects),
        cmocka_unit_test(test_map_entries),
        cmocka_unit_test(test_reject_leaves_nothing),
        cmocka_unit_test(test_block_full_and_growth),
        cmocka_unit_test(test_cross_check_python),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
