/*
 * test_json_decode.c — the JSON decoder through a declared schema
 * (ingest/json_decode.c): values, keys, defaults, missing values and lists in
 * the block and its side tables; every reject reason with nothing left in the
 * block; the id rule ("42" vs 42, 4.0); a record that does not fit; JSON
 * lines; the generated clickstream
 * against examples/clickstream.yaml without a single reject.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"

static const char *const schema_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      event_time: { path: ts, unit: ms }\n"
    "      labels:\n"
    "        - { name: click, path: label.click }\n"
    "        - { name: purchase, path: label.purchase, default: 0 }\n"
    "      dense:\n"
    "        - { name: price, path: item.price, default: 0, ops: [ { clip: [0, 100] }, log1p ] }\n"
    "        - { name: age, path: user.age }\n"
    "      sparse:\n"
    "        - { name: user, path: user.id, ops: [vocab] }\n"
    "        - { name: cat, path: item.cat, default: unknown, ops: [vocab] }\n"
    "        - { name: tags, path: item.tags, list: { max_len: 2 }, ops: [ { hash: 100 } ] }\n"
    "        - { name: hist, path: history, list: { max_len: 20, keep: last }, ops: [vocab] }\n"
    "        - { name: bucket, path: user.age, ops: [ { bucketize: [10, 20] } ] }\n"
    "        - { name: hx, path: hexid, ops: [hex2int, vocab] }\n"
    "        - { name: hour, path: ts, ops: [hour_of_day] }\n"
    "        - { name: cx, cross: [item.cat, user.id], ops: [ { hash: 1000 } ] }\n"
    "    transform: { vocab: { profile: default } }\n";

/* side indices of the features above, and engine columns of the vocab ones */
enum { F_USER, F_CAT, F_TAGS, F_HIST, F_BUCKET, F_HX, F_HOUR, F_CX, N_FEAT };
enum { C_USER, C_CAT, C_HIST, C_HX };

typedef struct rej_log {
    int n;
    int reason[64];
    size_t len[64];
    char detail[64][256];
} rej_log;

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    (void)rec;
    (void)recno;
    rej_log *l = opaque;
    if (l->n < 64) {
        l->reason[l->n] = reason;
        l->len[l->n] = len;
        snprintf(l->detail[l->n], sizeof(l->detail[0]), "%s", detail);
    }
    l->n++;
}

typedef struct fx {
    pr_config *cfg;
    const pr_feature_schema *fs;
    pr_json_decoder *d;
    pr_block *b;
    rej_log rl;
    pr_decode_ctx ctx;
} fx;

static void fx_init(fx *t, const char *yaml, uint32_t cap)
{
    char err[512];
    memset(t, 0, sizeof(*t));
    int rc = pr_config_load_string(yaml, strlen(yaml), "test.yaml", &t->cfg, err, sizeof(err));
    if (rc)
        fail_msg("config: %s", err);
    t->fs = &t->cfg->pipelines[0].features;
    t->d = pr_json_decoder_new(t->fs, err, sizeof(err));
    if (!t->d)
        fail_msg("decoder: %s", err);
    t->b = pr_feature_block_new(t->fs, cap, true);
    assert_non_null(t->b);
    t->ctx = (pr_decode_ctx){.json = t->d,
                             .on_reject = on_rej,
                             .opaque = &t->rl,
                             .partition = 3,
                             .offset = 77,
                             .default_event_time_ms = 5000};
}

static void fx_free(fx *t)
{
    pr_block_free(t->b);
    pr_json_decoder_free(t->d);
    pr_config_free(t->cfg);
}

static int decode(fx *t, const char *doc)
{
    return pr_decode_json_line(&t->ctx, t->b, doc, strlen(doc), 9);
}

static uint64_t key_at(const pr_block *b, int col, uint32_t el)
{
    return b->sparse_u64[(size_t)col * b->scap + el];
}

static bool miss_at(const pr_block *b, int col, uint32_t el)
{
    return pr_bit_test(b->sparse_missing + (size_t)col * pr_bitmap_words(b->scap), el);
}

static uint64_t hs(const char *s)
{
    return pr_fop_hash64(s, strlen(s));
}

static void test_values(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    pr_block *b = t.b;
    pr_fside *s = b->side;
    assert_int_equal(s->n_feat, N_FEAT);
    assert_int_equal(s->vocab_col[F_USER], C_USER);
    assert_int_equal(s->vocab_col[F_HX], C_HX);

    assert_int_equal(decode(&t, "{\"ts\":1732615200123,\"user\":{\"id\":\"u42\",\"age\":15},"
                                "\"item\":{\"price\":12.5,\"cat\":\"shoes\",\"tags\":[\"red\","
                                "\"sale\",\"x\"]},\"history\":[1,2,3,4],\"hexid\":\"ff\","
                                "\"unknown\":[{\"deep\":null}],\"label\":{\"click\":true}}"),
                     1);
    assert_int_equal(b->rows, 1);
    assert_int_equal(b->event_time_ms[0], 1732615200123LL);
    assert_int_equal(b->partition[0], 3);
    assert_int_equal(b->offset[0], 9);
    assert_true(s->labels[0] == 1.0f && s->labels[1] == 0.0f);
    assert_true(s->dense[0] == (float)log1p(12.5) && s->dense[1] == 15.0f);
    assert_true(key_at(b, C_USER, 0) == hs("u42") && !miss_at(b, C_USER, 0));
    assert_true(key_at(b, C_CAT, 0) == hs("shoes"));
    assert_int_equal(pr_fside_lengths(s, F_TAGS)[0], 2);
    assert_true(s->values[F_TAGS][0] == (int64_t)(hs("red") % 100));
    assert_true(s->values[F_TAGS][1] == (int64_t)(hs("sale") % 100));
    assert_int_equal(pr_fside_lengths(s, F_HIST)[0], 4);
    for (int k = 0; k < 4; k++)
        assert_true(key_at(b, C_HIST, (uint32_t)k) == (uint64_t)k + 1);
    assert_int_equal(s->values[F_BUCKET][0], 2);
    assert_true(key_at(b, C_HX, 0) == 0xff);
    assert_int_equal(s->values[F_HOUR][0], 11); /* 10:00 UTC */
    pr_fval cv[2] = {{.type = PR_FVAL_STR, .len = 5, .str = "shoes"},
                     {.type = PR_FVAL_STR, .len = 3, .str = "u42"}};
    const pr_fval *cc[2] = {&cv[0], &cv[1]};
    pr_fval cross;
    assert_int_equal(pr_fop_cross(cc, 2, 1, &cross, NULL), 0);
    uint8_t cb[8]; /* then hash: XXH64 of the cross's 8 integer bytes, mod 1000 */
    assert_int_equal(pr_fop_value_bytes(&cross, cb, sizeof(cb)), 8);
    assert_true(s->values[F_CX][0] == (int64_t)(pr_fop_hash64(cb, 8) % 1000));

    /* mostly missing: defaults, missing keys keep their slot, lists empty */
    assert_int_equal(decode(&t, "{\"user\":{\"id\":42},\"history\":null,"
                                "\"label\":{\"click\":0,\"purchase\":1}}"),
                     1);
    assert_int_equal(b->event_time_ms[1], 5000);
    assert_true(s->labels[2] == 0.0f && s->labels[3] == 1.0f);
    assert_true(s->dense[2] == 0.0f && s->dense[3] == 0.0f);
    assert_true(key_at(b, C_USER, 1) == 42 && !miss_at(b, C_USER, 1));
    assert_true(key_at(b, C_CAT, 1) == hs("unknown"));
    assert_int_equal(pr_fside_lengths(s, F_TAGS)[1], 0);
    assert_int_equal(pr_fside_lengths(s, F_HIST)[1], 0);
    assert_int_equal(pr_fside_lengths(s, F_BUCKET)[1], 1);
    assert_int_equal(s->values[F_BUCKET][1], 0);
    assert_int_equal(pr_fside_lengths(s, F_HX)[1], 1);
    assert_true(miss_at(b, C_HX, 1) && key_at(b, C_HX, 1) == 0);
    assert_int_equal(s->values[F_HOUR][1], 0);
    assert_int_equal(s->values[F_CX][1], 0);
    assert_int_equal(b->col_rows[C_USER], 2);
    assert_int_equal(b->col_rows[C_HIST], 4);

    /* a missing label without default is 0; keep last of a long list */
    assert_int_equal(decode(&t, "{\"label\":{},\"history\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,"
                                "15,16,17,18,19,20,21,22]}"),
                     1);
    assert_true(s->labels[4] == 0.0f);
    assert_int_equal(pr_fside_lengths(s, F_HIST)[2], 20);
    assert_true(key_at(b, C_HIST, 4) == 3 && key_at(b, C_HIST, 23) == 22);
    assert_int_equal(t.rl.n, 0);
    fx_free(&t);
}

/* A vocabulary evicting by event time (ttl_s) needs each row's event time:
 * a record whose time is at or before the epoch, or missing with no default
 * (offline), is rejected as bad_time instead of reaching the engine, which
 * refuses such a block and would stop the pipeline on one record. */
static void test_ttl_s_needs_time(void **state)
{
    (void)state;
    static const char *const yaml =
        "pipelines:\n"
        "  - name: t\n"
        "    source: { format: json }\n"
        "    schema:\n"
        "      event_time: { path: ts, unit: s }\n"
        "      sparse: [ { name: u, path: u, ops: [vocab] } ]\n"
        "    transform:\n"
        "      vocab: { profile: default }\n"
        "      columns: { u: { capacity: 10, eviction: ttl, ttl_s: 60 } }\n";
    fx t;
    fx_init(&t, yaml, 64);
    assert_int_equal(decode(&t, "{\"ts\": 1000, \"u\": 1}"), 1);
    assert_int_equal(decode(&t, "{\"u\": 2}"), 1); /* the message's time (5000 ms) */
    assert_int_equal(t.rl.n, 0);
    assert_int_equal(decode(&t, "{\"ts\": 0, \"u\": 3}"), 0);
    assert_int_equal(decode(&t, "{\"ts\": -86400, \"u\": 4}"), 0);
    t.ctx.default_event_time_ms = 0; /* offline: no message time */
    assert_int_equal(decode(&t, "{\"u\": 5}"), 0);
    assert_int_equal(t.rl.n, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(t.rl.reason[i], PR_DEC_BAD_TIME);
        assert_non_null(strstr(t.rl.detail[i], "ttl_s"));
    }
    assert_int_equal(t.b->rows, 2);
    fx_free(&t);
    /* without ttl_s the same records are fine: times before 1970 are times */
    fx_init(&t, schema_yaml, 64);
    assert_int_equal(decode(&t, "{\"ts\": -86400000, \"user\": {\"id\": 1}}"), 1);
    assert_int_equal(t.rl.n, 0);
    fx_free(&t);
}

/* What reaches a float32 tensor must be finite (a NaN or an infinite label
 * makes a loss NaN), and a record's own event time may not run further ahead
 * of its message's timestamp than source.max_event_time_ahead_s. */
static void test_bounds(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    const struct {
        const char *doc;
        int ok;
        const char *detail;
    } cases[] = {
        {"{\"label\":{\"click\":1e300}}", 0, "click (label.click): 1e+300 is beyond float32"},
        {"{\"label\":{\"click\":3e38}}", 1, NULL},
        {"{\"user\":{\"age\":-1e39}}", 0, "age (user.age): -1e+39 is beyond float32"},
        {"{\"user\":{\"age\":1e38}}", 1, NULL},
        /* the final value counts: clip brings 1e300 back to 100 */
        {"{\"item\":{\"price\":1e300}}", 1, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, cases[i].doc), cases[i].ok);
        assert_int_equal(t.rl.n, !cases[i].ok);
        if (!cases[i].ok) {
            assert_int_equal(t.rl.reason[0], PR_DEC_NUMBER_OUT_OF_RANGE);
            assert_string_equal(t.rl.detail[0], cases[i].detail);
        }
    }
    /* event time: the message's is 5000 ms; a day ahead is the bound */
    t.ctx.max_event_ahead_ms = 86400000;
    t.rl.n = 0;
    assert_int_equal(decode(&t, "{\"ts\": 86405000}"), 1);
    assert_int_equal(decode(&t, "{\"ts\": -5000000}"), 1); /* behind: late, never bad */
    assert_int_equal(t.rl.n, 0);
    assert_int_equal(decode(&t, "{\"ts\": 4102444800000}"), 0);
    assert_int_equal(t.rl.n, 1);
    assert_int_equal(t.rl.reason[0], PR_DEC_BAD_TIME);
    assert_string_equal(t.rl.detail[0],
                        "event_time (ts): event time 2100-01-01T00:00:00.000Z is 47482.0 days "
                        "ahead of the message's timestamp 1970-01-01T00:00:05.000Z "
                        "(source.max_event_time_ahead_s 86400)");
    assert_int_equal(decode(&t, "{\"ts\": 86405001}"), 0);
    /* no bound, or no message time (offline): accepted */
    t.ctx.max_event_ahead_ms = 0;
    assert_int_equal(decode(&t, "{\"ts\": 4102444800000}"), 1);
    t.ctx.max_event_ahead_ms = 86400000;
    t.ctx.default_event_time_ms = 0;
    assert_int_equal(decode(&t, "{\"ts\": 4102444800000}"), 1);
    fx_free(&t);
}

static void test_rejects(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    char deep[400], *p = deep;
    p += sprintf(p, "{\"x\":");
    for (int i = 0; i < 80; i++)
        *p++ = '[';
    for (int i = 0; i < 80; i++)
        *p++ = ']';
    sprintf(p, "}");
    char *longlist = malloc(5 * 4200 + 32);
    p = longlist + sprintf(longlist, "{\"history\":[");
    for (int i = 0; i <= PR_FEAT_MAX_LIST; i++)
        p += sprintf(p, "%s1", i ? "," : "");
    sprintf(p, "]}");
    const struct {
        const char *doc;
        int reason;
    } cases[] = {
        {"{\"user\" 1}", PR_DEC_NOT_JSON},
        {"nope", PR_DEC_NOT_JSON},
        {"null", PR_DEC_NOT_OBJECT},
        {"[1]", PR_DEC_NOT_OBJECT},
        {"{\"user\":", PR_DEC_TRUNCATED},
        {"{\"user\":{\"id\":\"\xff\"}}", PR_DEC_BAD_UTF8},
        {"{\"user\":{\"id\":\"\\q\"}}", PR_DEC_BAD_ESCAPE},
        {deep, PR_DEC_TOO_DEEP},
        {"{\"label\":{\"click\":1e999}}", PR_DEC_NUMBER_OUT_OF_RANGE},
        /* an integer id beyond int64 is out of range, not a "number" id */
        {"{\"user\":{\"id\":9223372036854775808}}", PR_DEC_NUMBER_OUT_OF_RANGE},
        {"{\"user\":{\"id\":-9223372036854775809}}", PR_DEC_NUMBER_OUT_OF_RANGE},
        {"{\"history\":[1,18446744073709551615]}", PR_DEC_NUMBER_OUT_OF_RANGE},
        {"{\"hexid\":99999999999999999999}", PR_DEC_NUMBER_OUT_OF_RANGE},
        {longlist, PR_DEC_LIST_TOO_LONG},
        {"{\"label\":{\"click\":\"yes\"}}", PR_DEC_WRONG_TYPE},
        {"{\"user\":{\"id\":1.5}}", PR_DEC_WRONG_TYPE},
        {"{\"user\":{\"id\":[1]}}", PR_DEC_WRONG_TYPE},
        {"{\"history\":[1,{}]}", PR_DEC_WRONG_TYPE},
        {"{\"history\":[1.5]}", PR_DEC_WRONG_TYPE},
        {"{\"item\":{\"price\":\"cheap\"}}", PR_DEC_WRONG_TYPE},
        {"{\"ts\":\"yesterday\"}", PR_DEC_BAD_TIME},
        {"{\"hexid\":\"zz\"}", PR_DEC_BAD_HEX},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    /* a good row first, so that "nothing left behind" is visible */
    assert_int_equal(
        decode(&t, "{\"user\":{\"id\":\"a\"},\"history\":[5],\"item\":{\"tags\":[\"q\"]}}"), 1);
    for (size_t i = 0; i < n; i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, cases[i].doc), 0);
        assert_int_equal(t.rl.n, 1);
        if (t.rl.reason[0] != cases[i].reason)
            fail_msg("case %zu: reason %s (%s), expected %s", i,
                     pr_decode_reason_name(t.rl.reason[0]), t.rl.detail[0],
                     pr_decode_reason_name(cases[i].reason));
        assert_int_equal(t.b->rows, 1);
        assert_int_equal(t.b->col_rows[C_USER], 1);
        assert_int_equal(t.b->col_rows[C_HIST], 1);
        assert_int_equal(t.b->side->n_values[F_TAGS], 1);
    }
    /* ... while a number reader (dense, bucketize) takes such an integer */
    t.rl.n = 0;
    assert_int_equal(decode(&t, "{\"user\":{\"age\":100000000000000000000}}"), 1);
    assert_int_equal(t.rl.n, 0);
    /* the detail names the feature and its path */
    t.rl.n = 0;
    decode(&t, "{\"label\":{\"click\":\"yes\"}}");
    assert_non_null(strstr(t.rl.detail[0], "click (label.click)"));
    for (int r = PR_DEC_NOT_JSON; r < PR_DEC__COUNT; r++)
        assert_string_not_equal(pr_decode_reason_name(r), "unknown");
    free(longlist);
    fx_free(&t);
}

/* The one id rule, the same records as tests/offline/schema_reference.py's
 * check_id_rules (offline runs this decoder): the JSON type decides, so the
 * string "42" is hashed and the integer 42 is its bits (two ids, not one);
 * a number with a fraction or exponent is never an id, wrong_type, even a
 * whole one (4.0) on a path a dense feature also reads. */
static void test_id_rules(void **state)
{
    (void)state;
    static const char *const yaml = "pipelines:\n"
                                    "  - name: ids\n"
                                    "    source: { format: json }\n"
                                    "    schema:\n"
                                    "      labels: [ { name: click, path: click } ]\n"
                                    "      dense:\n"
                                    "        - { name: item_num, path: item }\n"
                                    "      sparse:\n"
                                    "        - { name: item, path: item, ops: [vocab] }\n"
                                    "        - { name: user, path: user, ops: [vocab] }\n"
                                    "    transform: { vocab: { profile: default } }\n";
    static const struct {
        const char *doc;
        int reason; /* 0: a row */
        uint64_t item, user;
    } cases[] = {
        {"{\"click\": 1, \"item\": 4, \"user\": 42}", 0, 4, 42},
        {"{\"click\": 0, \"item\": 4.0, \"user\": 42}", PR_DEC_WRONG_TYPE, 0, 0},
        {"{\"click\": 1, \"item\": 5, \"user\": \"42\"}", 0, 5, 1},
        {"{\"click\": 0, \"item\": 6, \"user\": 4.0}", PR_DEC_WRONG_TYPE, 0, 0},
        {"{\"click\": 1, \"item\": 4, \"user\": \"x\"}", 0, 4, 2},
        {"{\"click\": 1, \"item\": 7, \"user\": 42}", 0, 7, 42},
        {"{\"click\": 1, \"item\": \"7\", \"user\": 42}", PR_DEC_WRONG_TYPE, 0, 0},
        {"{\"click\": 1, \"item\": 8, \"user\": \"42\"", PR_DEC_TRUNCATED, 0, 0},
    };
    fx t;
    fx_init(&t, yaml, 64);
    uint32_t row = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, cases[i].doc), cases[i].reason ? 0 : 1);
        if (cases[i].reason) {
            assert_int_equal(t.rl.n, 1);
            assert_string_equal(pr_decode_reason_name(t.rl.reason[0]),
                                pr_decode_reason_name(cases[i].reason));
            continue;
        }
        /* user keys: 1 stands for hs("42"), 2 for hs("x") */
        uint64_t user = cases[i].user == 1   ? hs("42")
                        : cases[i].user == 2 ? hs("x")
                                             : cases[i].user;
        assert_int_equal(key_at(t.b, 0, row), cases[i].item);
        assert_int_equal(key_at(t.b, 1, row), user);
        assert_true(t.b->side->dense[row] == (float)cases[i].item);
        row++;
    }
    assert_int_equal(t.b->rows, 4);
    assert_true(hs("42") != 42);
    fx_free(&t);
}

/* A row whose list does not fit the element room: PR_EFULL, block untouched. */
static void test_full(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    const char *doc = "{\"history\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20]}";
    uint32_t scap = t.b->scap, fit = scap / 20;
    assert_true(fit < t.b->cap);
    for (uint32_t i = 0; i < fit; i++)
        assert_int_equal(decode(&t, doc), 1);
    assert_int_equal(decode(&t, doc), PR_EFULL);
    assert_int_equal(t.b->rows, fit);
    assert_int_equal(t.b->col_rows[C_HIST], fit * 20);
    assert_int_equal(t.b->col_rows[C_USER], fit);
    /* a record with fewer elements still fits */
    assert_int_equal(decode(&t, "{\"history\":[1]}"), scap - fit * 20 >= 1 ? 1 : PR_EFULL);
    assert_int_equal(t.rl.n, 0);
    pr_block_reset(t.b);
    assert_int_equal(decode(&t, doc), 1);
    fx_free(&t);
}

static void test_lines_and_message(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    const char *buf = "{\"user\":{\"id\":1}}\n\n  \r\n{bad\n{\"user\":{\"id\":2}}";
    int64_t lines = 0;
    size_t used = pr_decode_json_lines(&t.ctx, t.b, buf, strlen(buf), false, 100, &lines);
    assert_int_equal(lines, 4);
    assert_int_equal(t.b->rows, 1);
    assert_int_equal(t.rl.n, 1);
    assert_int_equal(t.rl.reason[0], PR_DEC_NOT_JSON);
    used += pr_decode_json_lines(&t.ctx, t.b, buf + used, strlen(buf) - used, true, 104, &lines);
    assert_int_equal(used, strlen(buf));
    assert_int_equal(t.b->rows, 2);
    assert_int_equal(t.b->offset[1], 104);
    /* one message = one object, through the format dispatch */
    uint32_t next = 0;
    const char *m = "{\"user\":{\"id\":3}}";
    assert_int_equal(pr_message_record_count(PR_MSG_JSON, m, strlen(m), NULL), 1);
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.ctx, t.b, m, strlen(m), &next, NULL), 1);
    assert_int_equal(t.b->offset[2], 77);
    assert_true(key_at(t.b, C_USER, 2) == 3);
    pr_decode_ctx no = t.ctx;
    no.json = NULL;
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &no, t.b, m, strlen(m), &next, NULL),
                     PR_EINVAL);
    fx_free(&t);
}

/* schema.filter: each rule of the match (pr_engine.h), a failing record
 * dropped before its features (no row, no reject even when a feature would
 * refuse it, no vocabulary key), reported as PR_DEC_FILTERED with len 0; a
 * record that does not parse is rejected whatever the filter says. */
static const char *const filter_yaml = "pipelines:\n"
                                       "  - name: t\n"
                                       "    schema:\n"
                                       "      filter:\n"
                                       "        - { path: type, in: [click, 7, true] }\n"
                                       "        - { path: bot, not_in: [true, yes] }\n"
                                       "        - { path: user.id, present: true }\n"
                                       "        - { path: deleted, present: false }\n"
                                       "      sparse:\n"
                                       "        - { name: user, path: user.id, ops: [vocab] }\n"
                                       "        - { name: n, path: n, ops: [vocab] }\n";

static int filter_one(fx *t, const char *doc)
{
    uint32_t rows = t->b->rows;
    int rl = t->rl.n, rc = decode(t, doc);
    if (rc == 1) {
        assert_int_equal(t->rl.n, rl);
        return 1;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(t->b->rows, rows);
    assert_int_equal(t->rl.n, rl + 1);
    return t->rl.reason[rl] == PR_DEC_FILTERED ? -1 : 0; /* -1 filtered, 0 rejected */
}

static void test_filter(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, filter_yaml, 64);
    static const struct {
        const char *doc;
        int want; /* 1 a row, -1 filtered, 0 rejected */
    } cases[] = {
        {"{\"type\": \"click\", \"user\": {\"id\": 1}}", 1},
        {"{\"type\": \"view\", \"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"Click\", \"user\": {\"id\": 1}}", -1},  /* bytes, exactly */
        {"{\"type\": \"click \", \"user\": {\"id\": 1}}", -1}, /* length too */
        {"{\"type\": 7, \"user\": {\"id\": 1}}", 1},           /* an integer */
        {"{\"type\": 7.0, \"user\": {\"id\": 1}}", 1},         /* a number of that value */
        {"{\"type\": 7.5, \"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"7\", \"user\": {\"id\": 1}}", -1}, /* a string is not 7 */
        {"{\"type\": true, \"user\": {\"id\": 1}}", 1},   /* true is 1, in the list */
        {"{\"type\": 1, \"user\": {\"id\": 1}}", 1},
        {"{\"type\": false, \"user\": {\"id\": 1}}", -1},
        {"{\"type\": 1e30, \"user\": {\"id\": 1}}", -1},
        {"{\"type\": 7.000000001, \"user\": {\"id\": 1}}", -1},
        {"{\"type\": 99999999999999999999, \"user\": {\"id\": 1}}", -1}, /* beyond int64 */
        {"{\"type\": [\"view\", \"click\"], \"user\": {\"id\": 1}}", 1}, /* an element */
        {"{\"type\": [\"view\"], \"user\": {\"id\": 1}}", -1},
        {"{\"type\": [], \"user\": {\"id\": 1}}", -1},
        {"{\"type\": null, \"user\": {\"id\": 1}}", -1},
        {"{\"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"click\", \"bot\": true, \"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"click\", \"bot\": \"yes\", \"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"click\", \"bot\": [false, \"yes\"], \"user\": {\"id\": 1}}", -1},
        {"{\"type\": \"click\", \"bot\": false, \"user\": {\"id\": 1}}", 1},
        {"{\"type\": \"click\", \"bot\": null, \"user\": {\"id\": 1}}",
         1}, /* not_in: null passes */
        {"{\"type\": \"click\", \"bot\": [], \"user\": {\"id\": 1}}", 1},
        {"{\"type\": \"click\", \"user\": {\"id\": null}}", -1},
        {"{\"type\": \"click\", \"user\": null}", -1},
        {"{\"type\": \"click\", \"user\": {}}", -1},
        {"{\"type\": \"click\", \"user\": {\"id\": 1}, \"deleted\": null}", 1},
        {"{\"type\": \"click\", \"user\": {\"id\": 1}, \"deleted\": false}", -1},
        {"{\"type\": \"click\", \"user\": {\"id\": 1}, \"deleted\": []}", -1},
        /* a failing record is not read further: a feature that would refuse
         * it (n: a number where an id is needed) does not reject it */
        {"{\"type\": \"view\", \"user\": {\"id\": 1}, \"n\": 1.5}", -1},
        {"{\"type\": \"click\", \"user\": {\"id\": 1}, \"n\": 1.5}", 0},
        /* one that does not parse is rejected whatever it holds */
        {"{\"type\": \"view\", \"user\": {\"id\": 1}", 0},
        {"{\"type\": \"view\", \"user\": 5}", 0},
    };
    int rows = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = filter_one(&t, cases[i].doc);
        if (got != cases[i].want)
            fail_msg("%s: got %d, want %d", cases[i].doc, got, cases[i].want);
        rows += got == 1;
    }
    for (int k = 0; k < t.rl.n && k < 64; k++)
        if (t.rl.reason[k] == PR_DEC_FILTERED) {
            assert_int_equal(t.rl.len[k], 0);
            assert_string_equal(t.rl.detail[k], "");
        }
    assert_int_equal((int)t.b->rows, rows);
    /* filtered records left no vocabulary key: only the rows' */
    assert_int_equal(t.b->col_rows[0], (uint32_t)rows);
    fx_free(&t);

    /* The filter decides before the features refuse a value: a record of
     * another kind whose fields a feature cannot read (a list where it wants
     * one value, a scalar where a list, an object on the way, a number out
     * of range) is filtered, not rejected; one the filter keeps is rejected
     * as before, and so is one whose filter path itself cannot be read. */
    fx_init(&t,
            "pipelines:\n  - name: t\n    schema:\n"
            "      filter: [ { path: type, in: [click] }, { path: tags, not_in: [sale] } ]\n"
            "      sparse:\n"
            "        - { name: t, path: type, ops: [vocab] }\n"
            "        - { name: u, path: user.id, ops: [vocab] }\n"
            "        - { name: tags, path: tags, list: { max_len: 4 }, ops: [vocab] }\n",
            64);
    static const struct {
        const char *doc;
        int want;
    } refused[] = {
        {"{\"type\": [\"view\"]}", -1},
        {"{\"type\": \"click\", \"tags\": \"sale\"}", -1},
        {"{\"type\": \"click\", \"tags\": \"new\"}", 0},
        {"{\"type\": \"view\", \"user\": 5}", -1},
        {"{\"type\": \"view\", \"user\": [{\"id\": 1}]}", -1},
        {"{\"type\": \"view\", \"user\": {\"id\": 1e999}}", -1},
        {"{\"type\": \"click\", \"user\": 5}", 0},
        {"{\"type\": {\"a\": 1}}", 0},
        {"{\"type\": \"view\", \"user\": 5", 0},
        {"{\"type\": \"click\", \"user\": {\"id\": 2}, \"tags\": [\"x\"]}", 1},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        int got = filter_one(&t, refused[i].doc);
        if (got != refused[i].want)
            fail_msg("%s: got %d, want %d", refused[i].doc, got, refused[i].want);
    }
    fx_free(&t);

    /* a number matches an integer exactly, beyond 2^53 too */
    fx_init(&t,
            "pipelines:\n  - name: t\n    schema:\n"
            "      filter: [ { path: n, in: [9007199254740993] } ]\n"
            "      sparse: [ { name: u, path: u, ops: [vocab] } ]\n",
            64);
    assert_int_equal(filter_one(&t, "{\"n\": 9007199254740992.0, \"u\": 1}"), -1);
    assert_int_equal(filter_one(&t, "{\"n\": 9007199254740993, \"u\": 1}"), 1);
    fx_free(&t);
}

/* schema.downsample: the decision hash is frozen (the same event is kept or
 * dropped by every release: a replay after an upgrade trains on the same
 * rows); the kept share is the rate; the key alone decides; records `where`
 * does not select are kept with weight 1, kept selected ones weigh 1/rate;
 * without a key (or with none in the record) its bytes decide. */
static const char *const ds_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    schema:\n"
    "      downsample: { rate: 0.25, where: { path: click, in: [0] }, key: id, weight: w }\n"
    "      labels: [ { name: click, path: click } ]\n"
    "      sparse:\n"
    "        - { name: user, path: user, ops: [vocab] }\n";

static float label_at(const pr_block *b, uint32_t row, uint32_t k)
{
    return b->side->labels[(size_t)row * b->side->n_labels + k];
}

static void test_downsample(void **state)
{
    (void)state;
    assert_true(pr_downsample_hash_id(42) == 0xf648bb2458c9d02aull);
    assert_true(pr_downsample_hash_id(pr_fop_hash64("e1", 2)) == 0x8dcd4495e5f579f5ull);
    fx t;
    fx_init(&t, ds_yaml, 64);
    assert_int_equal(t.b->side->n_labels, 2);
    enum { N = 20000 };
    char doc[160];
    uint32_t kept = 0, sampled = 0;
    for (int i = 0; i < N; i++) {
        snprintf(doc, sizeof(doc), "{\"id\": \"e%d\", \"click\": %d, \"user\": %d}", i, i % 5 == 0,
                 i % 7);
        pr_block_reset(t.b);
        int rl = t.rl.n, rc = decode(&t, doc);
        if (i % 5 == 0) { /* click 1: not selected, kept, weight 1 */
            assert_int_equal(rc, 1);
            assert_true(label_at(t.b, 0, 1) == 1.0f);
            continue;
        }
        sampled++;
        uint64_t h =
            pr_downsample_hash_id(pr_fop_hash64(doc + 8, (size_t)(strchr(doc + 8, '"') - doc - 8)));
        bool want = h < t.fs->downsample.threshold;
        assert_int_equal(rc, want ? 1 : 0);
        if (want) {
            kept++;
            assert_true(label_at(t.b, 0, 0) == 0.0f);
            assert_true(label_at(t.b, 0, 1) == 4.0f);
        } else {
            assert_int_equal(t.rl.n, rl + 1);
            assert_int_equal(t.rl.reason[rl < 64 ? rl : 63],
                             rl < 64 ? PR_DEC_SAMPLED_OUT : t.rl.reason[63]);
        }
    }
    assert_in_range(kept, sampled / 4 - sampled / 40, sampled / 4 + sampled / 40);
    /* the key decides: other fields (and their order) do not */
    const char *a = "{\"id\": \"e3\", \"click\": 0, \"user\": 1}";
    const char *b = "{\"user\": 99, \"click\": 0, \"id\": \"e3\", \"x\": [1, 2]}";
    pr_block_reset(t.b);
    assert_int_equal(decode(&t, a), decode(&t, b));
    /* an integer key is its value */
    bool k7 = pr_downsample_hash_id(7) < t.fs->downsample.threshold;
    pr_block_reset(t.b);
    assert_int_equal(decode(&t, "{\"id\": 7, \"click\": 0, \"user\": 1}"), k7 ? 1 : 0);
    /* a number of an integral value is that integer, as the filter matches;
     * a list of one is its element; a fraction or an integer beyond int64
     * is no id: the bytes decide */
    pr_block_reset(t.b);
    assert_int_equal(decode(&t, "{\"id\": 7.0, \"click\": 0, \"user\": 1}"), k7 ? 1 : 0);
    pr_block_reset(t.b);
    assert_int_equal(decode(&t, "{\"id\": [7], \"click\": 0, \"user\": 1}"), k7 ? 1 : 0);
    static const char *const no_id[] = {"{\"id\": 7.5, \"click\": 0, \"user\": 1}",
                                        "{\"id\": 18446744073709551000, \"click\": 0, \"user\": 1}",
                                        "{\"id\": [1, 2], \"click\": 0, \"user\": 1}"};
    for (size_t i = 0; i < 3; i++) {
        pr_block_reset(t.b);
        bool kb = pr_fop_hash64(no_id[i], strlen(no_id[i])) < t.fs->downsample.threshold;
        assert_int_equal(decode(&t, no_id[i]), kb ? 1 : 0);
    }
    /* no key in the record: its bytes decide, the same bytes the same way */
    const char *nokey = "{\"click\": 0, \"user\": 5}";
    bool kb = pr_fop_hash64(nokey, strlen(nokey)) < t.fs->downsample.threshold;
    for (int r = 0; r < 3; r++) {
        pr_block_reset(t.b);
        assert_int_equal(decode(&t, nokey), kb ? 1 : 0);
    }
    fx_free(&t);
    /* rate 1, no where: everything kept, weight 1 / 1 */
    fx_init(&t,
            "pipelines:\n  - name: t\n    schema:\n      downsample: { rate: 1, weight: w }\n"
            "      sparse: [ { name: user, path: user, ops: [vocab] } ]\n",
            64);
    for (int i = 0; i < 60; i++) {
        snprintf(doc, sizeof(doc), "{\"user\": %d}", i);
        assert_int_equal(decode(&t, doc), 1);
        assert_true(label_at(t.b, (uint32_t)i, 0) == 1.0f);
    }
    fx_free(&t);
}

/* A Kafka message in schema-registry framing (Confluent's JSON Schema
 * serializer: byte 0 = 0, a 4-byte schema id, the JSON) decodes as the bare
 * JSON; a rejected one keeps its whole bytes (the dead letter). A line of a
 * file is never read as framed. */
static void test_registry_framed_message(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, schema_yaml, 64);
    uint32_t next = 0;
    const char plain[] = "{\"user\":{\"id\":5},\"item\":{\"cat\":\"shoes\"}}";
    char framed[64] = {0, 0, 0, 1, 0x2a};
    memcpy(framed + 5, plain, sizeof(plain) - 1);
    size_t flen = 5 + sizeof(plain) - 1;
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.ctx, t.b, plain, strlen(plain), &next, NULL),
                     1);
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.ctx, t.b, framed, flen, &next, NULL), 1);
    assert_int_equal(t.rl.n, 0);
    assert_int_equal(t.b->rows, 2);
    assert_true(key_at(t.b, C_USER, 1) == 5);
    assert_true(key_at(t.b, C_USER, 1) == key_at(t.b, C_USER, 0));
    assert_true(key_at(t.b, C_CAT, 1) == key_at(t.b, C_CAT, 0));
    /* too short for the framing; framed garbage: rejected with the whole message */
    const char shortf[] = {0, 0, 1};
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.ctx, t.b, shortf, 3, &next, NULL), 0);
    assert_int_equal(t.rl.reason[0], PR_DEC_BAD_FRAMING);
    assert_int_equal(t.rl.len[0], 3);
    assert_non_null(strstr(t.rl.detail[0], "registry framing needs 5"));
    char bad[16] = {0, 0, 0, 0, 7, '{', 'x'};
    assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.ctx, t.b, bad, 7, &next, NULL), 0);
    assert_int_equal(t.rl.reason[1], PR_DEC_NOT_JSON);
    assert_int_equal(t.rl.len[1], 7);
    assert_non_null(strstr(t.rl.detail[1], "after the 5-byte registry frame"));
    assert_int_equal(pr_decode_json_line(&t.ctx, t.b, framed, flen, 1), 0);
    assert_int_equal(t.rl.n, 3);
    assert_int_not_equal(t.rl.reason[2], 0);
    assert_int_equal(t.b->rows, 2);
    fx_free(&t);
}

/* The generated clickstream through the example's schema: no rejects, and
 * the same blocks whatever the block size. */
/* Weighted lists: ids and weights position by position over a list of
 * objects (holes kept: an object without the id drops its weight, one
 * without the weight takes the default), parallel lists, max_len/keep on the
 * pairs, ids the chain makes missing, and every reject. */
static const char *const weighted_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      sparse:\n"
    "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
    "            weights: { path: cats.score, default: 0.5 }, ops: [vocab] }\n"
    "        - { name: hist, path: hist, list: { max_len: 2, keep: last },\n"
    "            weights: { path: dwell }, ops: [hex2int, { hash: 1000 }] }\n"
    "        - { name: catsh, path: cats.id, list: { max_len: 8 }, ops: [ { hash: 100 } ] }\n"
    "    transform: { vocab: { profile: default } }\n";

static void weights_of(const fx *t, uint16_t f, float *out, uint32_t n)
{
    const pr_fside *s = t->b->side;
    assert_non_null(s->weights[f]);
    assert_int_equal(s->n_weights[f], n);
    memcpy(out, s->weights[f], n * sizeof(float));
}

static void test_weighted_lists(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, weighted_yaml, 64);
    assert_int_equal(decode(&t, "{\"cats\":[{\"id\":\"a\",\"score\":0.9},{\"id\":\"b\"},"
                                "{\"score\":3},null,{\"id\":null,\"score\":4},"
                                "{\"id\":\"c\",\"score\":null},{\"id\":\"d\",\"score\":2}],"
                                "\"hist\":[\"a\",\"\",\"ff\",\"10\"],\"dwell\":[1,2,3,4]}"),
                     1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    const pr_fside *s = t.b->side;
    /* cats: a(0.9), b(default), c(default); d cut by max_len 3 */
    assert_int_equal(pr_fside_lengths(t.b->side, 0)[0], 3);
    assert_int_equal(key_at(t.b, 0, 0), hs("a"));
    assert_int_equal(key_at(t.b, 0, 1), hs("b"));
    assert_int_equal(key_at(t.b, 0, 2), hs("c"));
    float w[8];
    weights_of(&t, 0, w, 3);
    assert_true(w[0] == 0.9f && w[1] == 0.5f && w[2] == 0.5f);
    /* hist: "" becomes missing and is dropped with its weight 2; keep last 2
     * of a(1), ff(3), 10(4) -> ff(3), 10(4) */
    assert_int_equal(pr_fside_lengths(t.b->side, 1)[0], 2);
    weights_of(&t, 1, w, 2);
    assert_true(w[0] == 3.0f && w[1] == 4.0f);
    assert_null(s->weights[2]); /* catsh shares cats.id, unweighted: holes never reach it */
    assert_int_equal(pr_fside_lengths(t.b->side, 2)[0], 4);
    /* a weight whose id is dropped (no id, or cut by max_len / keep) is never
     * judged: a string there, or a missing one, rejects nothing */
    assert_int_equal(decode(&t, "{\"cats\":[{\"id\":\"a\",\"score\":1},{\"score\":\"n/a\"},"
                                "{\"id\":null,\"score\":1e300}],"
                                "\"hist\":[\"a\",\"b\",\"c\"],\"dwell\":[\"x\",5,6]}"),
                     1);
    weights_of(&t, 1, w, 4);
    assert_true(w[2] == 5.0f && w[3] == 6.0f);
    weights_of(&t, 0, w, 4);
    assert_true(w[3] == 1.0f);
    /* an absent weights list: every id takes the default; none without one */
    assert_int_equal(decode(&t, "{\"cats\":[{\"id\":\"a\"},{\"id\":\"b\"}]}"), 1);
    weights_of(&t, 0, w, 6);
    assert_true(w[4] == 0.5f && w[5] == 0.5f);
    const struct {
        const char *doc;
        int reason;
        const char *says;
    } bad[] = {
        {"{\"hist\":[\"a\",\"b\"],\"dwell\":[1]}", PR_DEC_WRONG_TYPE, "1 numbers for 2 ids"},
        {"{\"hist\":[\"a\"]}", PR_DEC_WRONG_TYPE, "no default"},
        {"{\"hist\":[\"a\"],\"dwell\":[\"x\"]}", PR_DEC_WRONG_TYPE, "a string"},
        {"{\"hist\":[\"a\"],\"dwell\":[true]}", PR_DEC_WRONG_TYPE, "a bool"},
        {"{\"hist\":[\"a\"],\"dwell\":[1e300]}", PR_DEC_NUMBER_OUT_OF_RANGE, "beyond float32"},
        {"{\"hist\":[\"a\"],\"dwell\":7}", PR_DEC_WRONG_TYPE, NULL},
        {"{\"cats\":[{\"id\":\"a\",\"score\":[1]}]}", PR_DEC_WRONG_TYPE, NULL},
    };
    uint32_t rows = t.b->rows;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, bad[i].doc), 0);
        assert_int_equal(t.rl.n, 1);
        assert_int_equal(t.rl.reason[0], bad[i].reason);
        if (bad[i].says && !strstr(t.rl.detail[0], bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, t.rl.detail[0], bad[i].says);
        assert_int_equal(t.b->rows, rows); /* nothing of a reject stays */
        assert_int_equal(s->n_weights[0], 6);
        assert_int_equal(s->n_weights[1], 4);
    }
    fx_free(&t);
}

static const char *const map_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      sparse:\n"
    "        - { name: aff, path: user.aff, list: { max_len: 3, from: keys },\n"
    "            weights: { from: values, default: 0.5 }, ops: [vocab] }\n"
    "        - { name: affs, path: user.aff, list: { max_len: 2, from: keys, keep: last },\n"
    "            ops: [ { hash: 1000 } ] }\n"
    "        - { name: tags, path: tags, list: { max_len: 8, from: keys },\n"
    "            weights: { from: values }, ops: [vocab] }\n"
    "    transform: { vocab: { profile: default } }\n";

/* list: { from: keys } and weights: { from: values }: a map's keys are the
 * ids in the event's order, each weighted by its value; max_len and keep cut
 * both; null takes the default; a string or a map where a number belongs
 * rejects, naming the feature. */
static void test_map_lists(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, map_yaml, 64);
    assert_int_equal(decode(&t, "{\"user\":{\"aff\":{\"sports\":0.7,\"news\":null,\"\":2,"
                                "\"film\":4,\"sports\":0.25}},\"tags\":{\"a\":1,\"b\":-2.5}}"),
                     1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    float w[8];
    /* aff: sports (0.25, its last value in its first place), news (the
     * default), "" (2; a key as any other); film cut by max_len */
    assert_int_equal(pr_fside_lengths(t.b->side, 0)[0], 3);
    assert_int_equal(key_at(t.b, 0, 0), hs("sports"));
    assert_int_equal(key_at(t.b, 0, 1), hs("news"));
    assert_int_equal(key_at(t.b, 0, 2), hs(""));
    weights_of(&t, 0, w, 3);
    assert_true(w[0] == 0.25f && w[1] == 0.5f && w[2] == 2.0f);
    /* affs: the same keys, unweighted, the last 2 kept ("" is a value for a hash) */
    assert_int_equal(pr_fside_lengths(t.b->side, 1)[0], 2);
    assert_null(t.b->side->weights[1]);
    weights_of(&t, 2, w, 2);
    assert_true(w[0] == 1.0f && w[1] == -2.5f);
    /* {} and an absent map: empty lists */
    assert_int_equal(decode(&t, "{\"user\":{\"aff\":{}}}"), 1);
    assert_int_equal(pr_fside_lengths(t.b->side, 0)[1], 0);
    assert_int_equal(pr_fside_lengths(t.b->side, 2)[1], 0);
    const struct {
        const char *doc;
        int reason;
        const char *says;
    } bad[] = {
        {"{\"tags\":{\"a\":null}}", PR_DEC_WRONG_TYPE, "no default"},
        {"{\"tags\":{\"a\":\"1\"}}", PR_DEC_WRONG_TYPE, "a string"},
        {"{\"user\":{\"aff\":{\"a\":true}}}", PR_DEC_WRONG_TYPE, "a bool"},
        {"{\"user\":{\"aff\":{\"a\":1e300}}}", PR_DEC_NUMBER_OUT_OF_RANGE, "beyond float32"},
        {"{\"user\":{\"aff\":{\"a\":{\"b\":1}}}}", PR_DEC_WRONG_TYPE, "a map's value"},
        {"{\"user\":{\"aff\":[\"a\"]}}", PR_DEC_WRONG_TYPE, "a map (an object) expected"},
    };
    uint32_t rows = t.b->rows;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, bad[i].doc), 0);
        assert_int_equal(t.rl.n, 1);
        assert_int_equal(t.rl.reason[0], bad[i].reason);
        if (!strstr(t.rl.detail[0], bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, t.rl.detail[0], bad[i].says);
        assert_int_equal(t.b->rows, rows);
    }
    fx_free(&t);
}

/* list: { from: entries }: each key crossed with its value (the cross of
 * `cross:`: a string value and the same integer differ), in the event's
 * order; a repeated key keeps its first place and its last value; a null
 * value leaves the entry out; a list or object value is wrong_type; keep
 * last and max_len cut the entries. */
static const char *const entries_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      sparse:\n"
    "        - { name: attrs, path: item.attrs, list: { max_len: 3, from: entries }, "
    "ops: [vocab] }\n"
    "        - { name: last, path: item.attrs, list: { max_len: 1, from: entries, keep: last "
    "}, ops: [vocab] }\n"
    "    transform: { vocab: { profile: default } }\n";

static uint64_t cross2(const char *key, pr_fval v)
{
    pr_fval k = {.type = PR_FVAL_STR, .str = key, .len = strlen(key)}, out;
    const pr_fval *cols[2] = {&k, &v};
    assert_int_equal(pr_fop_cross(cols, 2, 1, &out, NULL), 0);
    return out.u;
}

static void test_map_entries(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, entries_yaml, 64);
    assert_int_equal(decode(&t, "{\"item\":{\"attrs\":{\"color\":\"red\",\"n\":3,\"size\":null,"
                                "\"color\":\"blue\",\"s\":\"3\",\"b\":true}}}"),
                     1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    const pr_fval blue = {.type = PR_FVAL_STR, .str = "blue", .len = 4};
    const pr_fval three = {.type = PR_FVAL_INT, .u = 3};
    const pr_fval s3 = {.type = PR_FVAL_STR, .str = "3", .len = 1};
    const pr_fval one = {.type = PR_FVAL_INT, .u = 1};
    assert_int_equal(pr_fside_lengths(t.b->side, 0)[0], 3); /* color, n, s (size: null) */
    assert_int_equal(key_at(t.b, 0, 0), cross2("color", blue));
    assert_int_equal(key_at(t.b, 0, 1), cross2("n", three));
    assert_int_equal(key_at(t.b, 0, 2), cross2("s", s3));
    assert_true(cross2("n", three) != cross2("n", s3) && cross2("color", blue) != hs("color"));
    assert_int_equal(pr_fside_lengths(t.b->side, 1)[0], 1); /* keep last: b=true */
    assert_int_equal(key_at(t.b, 1, 0), cross2("b", one));
    /* empty, absent, every value null: empty lists */
    assert_int_equal(decode(&t, "{\"item\":{\"attrs\":{}}}"), 1);
    assert_int_equal(decode(&t, "{\"item\":{}}"), 1);
    assert_int_equal(decode(&t, "{\"item\":{\"attrs\":{\"a\":null}}}"), 1);
    for (uint32_t r = 1; r < 4; r++)
        assert_int_equal(pr_fside_lengths(t.b->side, 0)[r], 0);
    t.rl.n = 0;
    assert_int_equal(decode(&t, "{\"item\":{\"attrs\":{\"a\":[1]}}}"), 0);
    assert_int_equal(t.rl.reason[0], PR_DEC_WRONG_TYPE);
    assert_int_equal(t.b->rows, 4);
    fx_free(&t);
}

/* list: { from: values }: a map's values are the ids, in the event's order,
 * typed as a list's elements (a string, an integer, true as 1); a repeated
 * key keeps its first place and its last value; a null value is left out;
 * keep last and max_len cut the values; the same map read by its keys
 * beside them; an integer beyond int64 is number_out_of_range, a number
 * with a fraction, a list or object value, or a list for the map
 * wrong_type. */
static const char *const values_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      sparse:\n"
    "        - { name: ads, path: slots, list: { max_len: 3, from: values }, ops: [vocab] }\n"
    "        - { name: last, path: slots, list: { max_len: 1, from: values, keep: last }, "
    "ops: [vocab] }\n"
    "        - { name: keys, path: slots, list: { max_len: 8, from: keys }, ops: [vocab] }\n"
    "        - { name: h, path: slots, list: { max_len: 8, from: values }, ops: [ { hash: 1000 "
    "} ] }\n"
    "    transform: { vocab: { profile: default } }\n";

static void test_map_values(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, values_yaml, 64);
    assert_int_equal(decode(&t, "{\"slots\":{\"top\":\"adA\",\"side\":7,\"x\":null,"
                                "\"top\":\"adB\",\"n\":-3,\"b\":true}}"),
                     1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    assert_int_equal(pr_fside_lengths(t.b->side, 0)[0], 3); /* adB, 7, -3 (x: null; b cut) */
    assert_int_equal(key_at(t.b, 0, 0), hs("adB"));
    assert_int_equal(key_at(t.b, 0, 1), 7);
    assert_int_equal(key_at(t.b, 0, 2), (uint64_t)-3);
    assert_int_equal(pr_fside_lengths(t.b->side, 1)[0], 1); /* keep last: b's true */
    assert_int_equal(key_at(t.b, 1, 0), 1);
    assert_int_equal(pr_fside_lengths(t.b->side, 2)[0], 5); /* the keys, x's too */
    assert_int_equal(key_at(t.b, 2, 0), hs("top"));
    assert_int_equal(key_at(t.b, 2, 2), hs("x"));
    assert_int_equal(pr_fside_lengths(t.b->side, 3)[0], 4); /* hashed: all but the null */
    /* empty, absent, null, every value null: empty lists */
    assert_int_equal(decode(&t, "{\"slots\":{}}"), 1);
    assert_int_equal(decode(&t, "{}"), 1);
    assert_int_equal(decode(&t, "{\"slots\":null}"), 1);
    assert_int_equal(decode(&t, "{\"slots\":{\"a\":null}}"), 1);
    for (uint32_t r = 1; r < 5; r++)
        assert_int_equal(pr_fside_lengths(t.b->side, 0)[r], 0);
    const struct {
        const char *doc;
        int reason;
        const char *says;
    } bad[] = {
        {"{\"slots\":{\"a\":1.5}}", PR_DEC_WRONG_TYPE, "cannot be a vocabulary id"},
        {"{\"slots\":{\"a\":[1]}}", PR_DEC_WRONG_TYPE, "a map's value"},
        {"{\"slots\":{\"a\":{\"b\":1}}}", PR_DEC_WRONG_TYPE, "a map's value"},
        {"{\"slots\":[\"adA\"]}", PR_DEC_WRONG_TYPE, "a map (an object) expected"},
        {"{\"slots\":{\"a\":99999999999999999999}}", PR_DEC_NUMBER_OUT_OF_RANGE,
         "integer beyond int64"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        t.rl.n = 0;
        assert_int_equal(decode(&t, bad[i].doc), 0);
        assert_int_equal(t.rl.n, 1);
        if (t.rl.reason[0] != bad[i].reason || !strstr(t.rl.detail[0], bad[i].says))
            fail_msg("case %zu: %s '%s', want %s '%s'", i, pr_decode_reason_name(t.rl.reason[0]),
                     t.rl.detail[0], pr_decode_reason_name(bad[i].reason), bad[i].says);
    }
    assert_int_equal(t.b->rows, 5);
    fx_free(&t);
}

/* `in:` labels and a dense number, and a label through operators
 * (at_least after a clip; its default 2 goes through them too): 1 when a
 * value (a list: an element) is
 * one of the set, matched as the filter matches (a string by its bytes, an
 * integer, true as 1, a number of an integral value; "1" is a string, 1.5
 * no integer), else 0; absent, null and [] give the default, else 0
 * (missing); the dense value goes on through its operators; a list where
 * the operator label reads one number (an object in it too) rejects the
 * record. */
static const char *const in_yaml = "pipelines:\n"
                                   "  - name: t\n"
                                   "    source: { format: json }\n"
                                   "    schema:\n"
                                   "      labels:\n"
                                   "        - { name: click, path: type, in: [click, buy] }\n"
                                   "        - { name: num, path: n, in: [1, 7], default: -1 }\n"
                                   "        - { name: at, path: n, default: 2,\n"
                                   "            ops: [ { clip: [0, 10] }, { at_least: 2 } ] }\n"
                                   "      dense:\n"
                                   "        - { name: d, path: type, in: [buy], default: 0.5,\n"
                                   "            ops: [ { clip: [0, 0.75] } ] }\n"
                                   "      sparse: [ { name: s, path: s, ops: [vocab] } ]\n"
                                   "    transform: { vocab: { profile: default } }\n";

static void test_in(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, in_yaml, 64);
    static const struct {
        const char *ev;
        float click, num, at, d;
    } cases[] = {
        {"{\"type\":\"click\",\"n\":1}", 1, 1, 0, 0},
        {"{\"type\":\"buy\",\"n\":7.0}", 1, 1, 1, 0.75},
        {"{\"type\":\"view\",\"m\":\"1\"}", 0, -1, 1, 0},
        {"{\"type\":[\"view\",\"buy\"],\"n\":true}", 1, 1, 0, 0.75},
        {"{\"type\":[],\"n\":1.5}", 0, 0, 0, 0.5},
        {"{\"type\":null,\"n\":null}", 0, -1, 1, 0.5},
        {"{\"n\":-3}", 0, 0, 0, 0.5},
        {"{\"type\":\"Click\",\"n\":2}", 0, 0, 1, 0},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++)
        if (decode(&t, cases[i].ev) != 1)
            fail_msg("%s: rejected: %s", cases[i].ev, t.rl.n ? t.rl.detail[0] : "?");
    const pr_fside *sd = t.b->side;
    for (size_t i = 0; i < n; i++) {
        if (sd->labels[i * 3] != cases[i].click || sd->labels[i * 3 + 1] != cases[i].num ||
            sd->labels[i * 3 + 2] != cases[i].at || sd->dense[i] != cases[i].d)
            fail_msg("%s: click %g num %g at %g d %g", cases[i].ev, sd->labels[i * 3],
                     sd->labels[i * 3 + 1], sd->labels[i * 3 + 2], sd->dense[i]);
    }
    /* an object is no value: the record is rejected */
    assert_int_equal(decode(&t, "{\"type\":\"click\",\"n\":[1, {\"a\":1}]}"), 0);
    assert_int_equal(t.rl.reason[0], PR_DEC_WRONG_TYPE);
    fx_free(&t);
}

/* age: the record's own event time minus a time in the event, in seconds,
 * as a dense number (ms, and an rfc3339 string), a label (at_least after
 * it) and a sparse id (bucketize after it); a record without its own event
 * time gives missing even where the decode has a message time (5000 ms
 * here): streaming equals offline; a number where the rfc3339 string is
 * expected is wrong_type, an unreadable time bad_time. */
static const char *const age_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      event_time: { path: ts, unit: ms }\n"
    "      labels:\n"
    "        - { name: old, path: p, ops: [ age, { at_least: 60 } ] }\n"
    "      dense:\n"
    "        - { name: a, path: p, ops: [age] }\n"
    "        - { name: b, path: c, ops: [ { age: rfc3339 } ] }\n"
    "      sparse:\n"
    "        - { name: s, path: p,\n"
    "            ops: [ { age: ms }, { bucketize: [0, 60] } ] }\n";

static void test_age(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, age_yaml, 64);
    static const struct {
        const char *ev;
        float old, a, b;
        int64_t s;
    } cases[] = {
        {"{\"ts\":1700000000000,\"p\":1699999940000,\"c\":\"2023-11-14T22:12:20Z\"}", 1, 60, 60, 3},
        {"{\"ts\":1700000000000,\"p\":1700000000500,\"c\":\"2023-11-14T22:13:20.25Z\"}", 0, -0.5f,
         -0.25f, 1},
        {"{\"p\":1,\"c\":\"2023-11-14T22:12:20Z\"}", 0, 0, 0, 0},
        {"{\"ts\":1700000000000}", 0, 0, 0, 0},
    };
    size_t n = sizeof(cases) / sizeof(cases[0]);
    for (size_t i = 0; i < n; i++)
        if (decode(&t, cases[i].ev) != 1)
            fail_msg("%s: rejected: %s", cases[i].ev, t.rl.n ? t.rl.detail[0] : "?");
    const pr_fside *sd = t.b->side;
    for (size_t i = 0; i < n; i++)
        if (sd->labels[i] != cases[i].old || sd->dense[i * 2] != cases[i].a ||
            sd->dense[i * 2 + 1] != cases[i].b || sd->values[0][i] != cases[i].s)
            fail_msg("%s: old %g a %g b %g s %" PRId64, cases[i].ev, sd->labels[i],
                     sd->dense[i * 2], sd->dense[i * 2 + 1], sd->values[0][i]);
    assert_int_equal(decode(&t, "{\"ts\":1700000000000,\"p\":1,\"c\":5}"), 0);
    assert_int_equal(t.rl.reason[t.rl.n - 1], PR_DEC_WRONG_TYPE);
    assert_int_equal(decode(&t, "{\"ts\":1700000000000,\"p\":1,\"c\":\"later\"}"), 0);
    assert_int_equal(t.rl.reason[t.rl.n - 1], PR_DEC_BAD_TIME);
    fx_free(&t);
}

/* weights.ops: the numeric operators on the kept weights, in double after
 * the default, then float32 (compared bit for bit with the same double
 * computation rounded once); ids cut by max_len or dropped as holes drop
 * their weights before the chain; a result that is not finite rejects. */
static const char *const weight_ops_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      sparse:\n"
    "        - { name: hist, path: hist, list: { max_len: 3, keep: last }, ops: [vocab],\n"
    "            weights: { path: dwell, default: 0.1, ops: [log1p, { clip: [0, 2] }] } }\n"
    "        - { name: z, path: z.id, list: { max_len: 4 }, ops: [vocab],\n"
    "            weights: { path: z.s, default: 0.3,\n"
    "                       ops: [ { standardize: { mean: 0.7, std: 0.3 } } ] } }\n"
    "        - { name: aff, path: aff, list: { max_len: 2, from: keys }, ops: [vocab],\n"
    "            weights: { from: values, ops: [neg2zero, log1p] } }\n"
    "        - { name: l, path: l, list: { max_len: 2 }, ops: [vocab],\n"
    "            weights: { path: lw, ops: [log1p] } }\n"
    "    transform: { vocab: { profile: default } }\n";

static float lc(double x) /* log1p then clip [0, 2], as the chain computes it */
{
    return (float)fmin(fmax(log1p(x), 0), 2);
}

static float zs(double x) /* standardize mean 0.7 std 0.3 */
{
    return (float)((x - 0.7) / 0.3);
}

static void assert_weights(const fx *t, uint16_t f, uint32_t from, const float *want, uint32_t n)
{
    float w[16];
    assert_true(from + n <= 16);
    weights_of(t, f, w, from + n);
    for (uint32_t k = 0; k < n; k++)
        if (memcmp(&w[from + k], &want[k], sizeof(float)) != 0)
            fail_msg("feature %u weight %u: %.9g, want %.9g", f, from + k, (double)w[from + k],
                     (double)want[k]);
}

static void test_weight_ops(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, weight_ops_yaml, 64);
    /* hist: a(-5) cut by keep last 3 before the chain (log1p(-5) would be
     * NaN); z: the object without an id drops its -100, b takes the default
     * 0.3 (as written, a double) before standardize; aff: neg2zero, log1p */
    assert_int_equal(decode(&t, "{\"hist\":[\"a\",\"b\",\"c\",\"d\"],\"dwell\":[-5,0.5,3,1.7],"
                                "\"z\":[{\"id\":\"a\",\"s\":0.9},{\"s\":-100},{\"id\":\"b\"}],"
                                "\"aff\":{\"p\":2.5,\"n\":-3}}"),
                     1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    assert_int_equal(key_at(t.b, 0, 0), hs("b"));
    assert_weights(&t, 0, 0, (float[]){lc(0.5), lc(3), lc(1.7)}, 3);
    assert_weights(&t, 1, 0, (float[]){zs(0.9), zs(0.3)}, 2);
    assert_true(zs(0.3) != zs((double)0.3f)); /* the default enters as written */
    assert_weights(&t, 2, 0, (float[]){(float)log1p(2.5), 0.0f}, 2);
    /* the default (no weights list) through the chain; 1e300 is clipped to
     * 2 (only the chain's result is judged); an integer weight as a double */
    assert_int_equal(decode(&t, "{\"hist\":[\"x\"]}"), 1);
    assert_int_equal(decode(&t, "{\"hist\":[\"y\",\"w\"],\"dwell\":[1e300,7]}"), 1);
    if (t.rl.n)
        fail_msg("rejected: %s", t.rl.detail[0]);
    assert_weights(&t, 0, 3, (float[]){lc(0.1), 2.0f, lc(7)}, 3);
    const struct {
        const char *doc;
        const char *says;
    } bad[] = {
        {"{\"hist\":[\"a\"],\"dwell\":[-2]}",
         "hist (hist): weights (dwell): after the operators nan is not a finite number"},
        {"{\"l\":[\"a\"],\"lw\":[-1]}",
         "l (l): weights (lw): after the operators -inf is not a finite number"},
        {"{\"hist\":[\"a\"],\"dwell\":[-1]}", NULL}, /* clip makes -inf 0: kept */
        {"{\"z\":[{\"id\":\"a\",\"s\":1e300}]}",
         "z (z.id): weights (z.s): after the operators 3.33333e+300 is beyond float32"},
        {"{\"aff\":{\"p\":1e300,\"q\":1}}", NULL}, /* log1p(1e300) = 690.8: kept */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t rows = t.b->rows, nw = t.b->side->n_weights[0];
        t.rl.n = 0;
        assert_int_equal(decode(&t, bad[i].doc), bad[i].says ? 0 : 1);
        if (!bad[i].says) {
            assert_int_equal(t.rl.n, 0);
            continue;
        }
        assert_int_equal(t.rl.n, 1);
        assert_int_equal(t.rl.reason[0], PR_DEC_NUMBER_OUT_OF_RANGE);
        if (!strstr(t.rl.detail[0], bad[i].says))
            fail_msg("case %zu: '%s' does not say '%s'", i, t.rl.detail[0], bad[i].says);
        assert_int_equal(t.b->rows, rows); /* nothing of a reject stays */
        assert_int_equal(t.b->side->n_weights[0], nw);
    }
    assert_weights(&t, 0, 6, (float[]){0.0f}, 1);
    assert_weights(&t, 2, 2, (float[]){(float)log1p(1e300), (float)log1p(1)}, 2);
    fx_free(&t);
}

static void test_gen_clickstream(void **state)
{
    (void)state;
    char err[512];
    pr_config *cfg = NULL;
    if (pr_config_load_file(PR_SOURCE_DIR "/examples/clickstream.yaml", &cfg, err, sizeof(err)))
        fail_msg("%s", err);
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_json_decoder *d = pr_json_decoder_new(fs, err, sizeof(err));
    assert_non_null(d);
    rej_log rl = {0};
    pr_decode_ctx ctx = {.json = d, .on_reject = on_rej, .opaque = &rl};
    enum { N = 4000 };
    size_t cap = (size_t)N * PR_GEN_JSON_LINE_MAX;
    char *buf = malloc(cap);
    uint64_t got = 0;
    size_t len = pr_gen_json_lines(7, 0, N, buf, cap, &got);
    assert_int_equal(got, N);
    uint32_t caps[2] = {64, 1024};
    uint64_t acc[2][2 * PR_MAX_SPARSE] = {{0}}; /* per feature lengths, per column keys */
    for (int k = 0; k < 2; k++) {
        pr_block *b = pr_feature_block_new(fs, caps[k], true);
        size_t at = 0;
        int64_t rows = 0, lines;
        while (at < len) {
            pr_block_reset(b);
            at += pr_decode_json_lines(&ctx, b, buf + at, len - at, true, rows, &lines);
            rows += lines;
            for (uint16_t f = 0; f < b->side->n_feat; f++) {
                int32_t *l = pr_fside_lengths(b->side, f);
                for (uint32_t r = 0; r < b->rows; r++)
                    acc[k][f] = acc[k][f] * 31 + (uint64_t)l[r];
            }
            for (uint32_t c = 0; c < b->n_sparse; c++)
                for (uint32_t e = 0; e < b->col_rows[c]; e++)
                    acc[k][PR_MAX_SPARSE + c] =
                        acc[k][PR_MAX_SPARSE + c] * 31 + key_at(b, (int)c, e);
        }
        assert_int_equal(rows, N);
        pr_block_free(b);
    }
    assert_int_equal(rl.n, 0);
    assert_memory_equal(acc[0], acc[1], sizeof(acc[0]));
    free(buf);
    pr_json_decoder_free(d);
    pr_config_free(cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_bounds),
        cmocka_unit_test(test_ttl_s_needs_time),
        cmocka_unit_test(test_id_rules),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_lines_and_message),
        cmocka_unit_test(test_registry_framed_message),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_downsample),
        cmocka_unit_test(test_gen_clickstream),
        cmocka_unit_test(test_weighted_lists),
        cmocka_unit_test(test_map_lists),
        cmocka_unit_test(test_map_entries),
        cmocka_unit_test(test_map_values),
        cmocka_unit_test(test_in),
        cmocka_unit_test(test_age),
        cmocka_unit_test(test_weight_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
