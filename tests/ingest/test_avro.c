/*
 * test_avro.c — the Avro reader (ingest/avro_reader.c) against the JSON path:
 * the generated clickstream written as Avro (pr_avro_writer, the encoder of
 * `piperec produce|gen --format avro`) decodes to byte-identical blocks as
 * the same events in JSON text, plain and registry-framed; maps, enums,
 * fixed, bytes, decimals and unions read like their JSON forms; a path the
 * writer schema lacks is absent; the reject reasons (bad_avro, bad_framing,
 * wrong_type, list_too_long) with nothing left in the block; the time logical
 * types in their writer's unit whatever event_time.unit says; arrays of
 * records mapped by list features as JSON's lists of objects; weighted
 * lists (ids and weights kept aligned over arrays of records by holes, and
 * parallel arrays) as JSON gives them; maps read by their keys (list: {
 * from: keys }, weighted by their values; repeated keys, written by hand)
 * as the same JSON objects give them; a map key on the way to a path
 * written twice (the last entry wins, in items of arrays too); a fixed writer schema checked when
 * the config loads (missing file, unknown path, single-valued path through
 * an array, types, a weights path of numbers, a map path that names no map
 * or whose values are no numbers), and the hint that a plain
 * pipeline's bad_avro record is registry-framed. The registry
 * (fetch, evolution, down/up, 404) is tested end to end in
 * tests/ingest/test_avro_registry.sh with a test registry server.
 */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "schema_insert.h"

typedef struct rej_log {
    int n, last, filtered;
    char detail[256];
} rej_log;

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    (void)rec;
    (void)len;
    (void)recno;
    rej_log *l = opaque;
    l->last = reason;
    if (pr_decode_dropped(reason)) { /* schema.filter, downsample: not a reject */
        assert_int_equal(len, 0);
        l->filtered++;
        return;
    }
    l->n++;
    l->last = reason;
    snprintf(l->detail, sizeof(l->detail), "%s", detail);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    return strdup(buf);
}

static void blocks_equal(pr_block *a, pr_block *b)
{
    assert_int_equal(a->rows, b->rows);
    pr_fside *sa = a->side, *sb = b->side;
    uint32_t rows = a->rows;
    assert_memory_equal(sa->labels, sb->labels, (size_t)rows * sa->n_labels * sizeof(float));
    assert_memory_equal(sa->dense, sb->dense, (size_t)rows * sa->n_dense * sizeof(float));
    for (uint16_t f = 0; f < sa->n_feat; f++) {
        assert_memory_equal(pr_fside_lengths(sa, f), pr_fside_lengths(sb, f),
                            rows * sizeof(int32_t));
        assert_int_equal(sa->n_values[f], sb->n_values[f]);
        if (sa->n_values[f])
            assert_memory_equal(sa->values[f], sb->values[f], sa->n_values[f] * sizeof(int64_t));
        assert_int_equal(!sa->weights[f], !sb->weights[f]);
        assert_int_equal(sa->n_weights[f], sb->n_weights[f]);
        if (sa->n_weights[f])
            assert_memory_equal(sa->weights[f], sb->weights[f], sa->n_weights[f] * sizeof(float));
    }
    size_t words = pr_bitmap_words(a->scap);
    for (uint32_t c = 0; c < a->n_sparse; c++) {
        assert_int_equal(a->col_rows[c], b->col_rows[c]);
        assert_memory_equal(a->sparse_u64 + (size_t)c * a->scap,
                            b->sparse_u64 + (size_t)c * b->scap, a->col_rows[c] * sizeof(uint64_t));
        for (uint32_t e = 0; e < a->col_rows[c]; e++)
            assert_int_equal(pr_bit_test(a->sparse_missing + c * words, e),
                             pr_bit_test(b->sparse_missing + c * words, e));
    }
    assert_memory_equal(a->event_time_ms, b->event_time_ms, rows * sizeof(int64_t));
}

/* Two decoders of one schema: JSON text, and Avro through a reader. */
typedef struct fx {
    pr_config *cfg;
    const pr_feature_schema *fs;
    pr_json_decoder *dj, *da;
    pr_avro_reader *rd;
    pr_avro_writer *w;
    pr_block *bj, *ba;
    rej_log rj, ra;
    pr_decode_ctx cj, ca;
    uint8_t *buf;
    size_t len, cap;
} fx;

static void fx_init(fx *t, const char *yaml, const char *schema, pr_avro_framing framing)
{
    char err[512];
    memset(t, 0, sizeof(*t));
    if (pr_config_load_string(yaml, strlen(yaml), "t.yaml", &t->cfg, err, sizeof(err)))
        fail_msg("config: %s", err);
    t->fs = &t->cfg->pipelines[0].features;
    t->dj = pr_json_decoder_new(t->fs, err, sizeof(err));
    t->da = pr_json_decoder_new(t->fs, err, sizeof(err));
    assert_non_null(t->dj);
    assert_non_null(t->da);
    t->rd = pr_avro_reader_new(t->da, schema, NULL, framing, 0, err, sizeof(err));
    if (!t->rd)
        fail_msg("reader: %s", err);
    pr_json_decoder_set_reader(t->da, pr_avro_read, t->rd);
    t->w = pr_avro_writer_new(schema, err, sizeof(err));
    if (!t->w)
        fail_msg("writer: %s", err);
    t->bj = pr_feature_block_new(t->fs, 128, true);
    t->ba = pr_feature_block_new(t->fs, 128, true);
    t->cj = (pr_decode_ctx){.json = t->dj, .on_reject = on_rej, .opaque = &t->rj};
    t->ca = (pr_decode_ctx){.json = t->da, .on_reject = on_rej, .opaque = &t->ra};
}

static void fx_free(fx *t)
{
    pr_block_free(t->bj);
    pr_block_free(t->ba);
    pr_json_decoder_free(t->dj);
    pr_json_decoder_free(t->da);
    pr_avro_reader_free(t->rd);
    pr_avro_writer_free(t->w);
    pr_config_free(t->cfg);
    free(t->buf);
}

/* The event in both formats; returns what both decoders returned. */
static int both(fx *t, const char *ev, int64_t framed_id)
{
    char err[256];
    if (pr_avro_from_json(t->w, ev, strlen(ev), framed_id, &t->buf, &t->len, &t->cap, err,
                          sizeof(err)))
        fail_msg("encode %s: %s", ev, err);
    uint32_t next = 0;
    int a = pr_decode_message(PR_MSG_JSON, &t->cj, t->bj, ev, strlen(ev), &next, NULL);
    int b = pr_decode_message(PR_MSG_AVRO, &t->ca, t->ba, t->buf, t->len, &next, NULL);
    if (a != b || t->rj.last != t->ra.last)
        fail_msg("%s: json %d (%s), avro %d (%s)", ev, a, pr_decode_reason_name(t->rj.last), b,
                 pr_decode_reason_name(t->ra.last));
    return a;
}

/* A filter over every kind of value the clickstream has: strings, integers,
 * a list, an optional field, a path the writer schema lacks (absent); then
 * negatives downsampled by event id, with a weight label. */
static const char *const click_filter =
    "      filter:\n"
    "        - { path: context.device, in: [ios, android, web] }\n"
    "        - { path: item.tags, not_in: [sale, new] }\n"
    "        - { path: user.age_days, present: true }\n"
    "        - { path: context.page, not_in: [3] }\n"
    "        - { path: context.nosuch, present: false }\n"
    "      downsample: { rate: 0.3, where: { path: label.click, in: [0] }, key: event_id, "
    "weight: w }\n";

/* Labels and a dense feature by `in:` over a string, a list of strings
 * (optional) and an integer (optional), and labels through operators,
 * inserted at the lists' starts. */
static const char *const click_in_labels =
    "        - { name: mobile, path: context.device, in: [ios, android] }\n"
    "        - { name: on_sale, path: item.tags, in: [sale, limited], default: -1 }\n"
    "        - { name: long_dwell, path: label.dwell_s, default: 0, ops: [ { at_least: 5 } ] }\n"
    "        - { name: log_price, path: item.price, ops: [ { clip: [0, 500] }, log1p ] }\n";
static const char *const click_in_dense =
    "        - { name: page01, path: context.page, in: [0, 1], default: 0.5,\n"
    "            ops: [ { standardize: { mean: 0.5, std: 0.5 } } ] }\n";

/* The clickstream: Avro equals JSON, plain and framed; with a filter, the
 * same records pass; with the `in:` features, the same values. */
static void run_clickstream_in(pr_avro_framing framing, int64_t id, const char *filter, bool in)
{
    char *yaml = schema_insert(slurp(PR_SOURCE_DIR "/examples/clickstream.yaml"), filter);
    if (in) {
        yaml = schema_insert_at(yaml, "      labels:\n", click_in_labels);
        yaml = schema_insert_at(yaml, "      dense:\n", click_in_dense);
    }
    char *schema = slurp(PR_SOURCE_DIR "/examples/clickstream.avsc");
    fx t;
    fx_init(&t, yaml, schema, framing);
    char ev[PR_GEN_JSON_LINE_MAX];
    enum { N = 3000 };
    uint32_t rows = 0;
    for (uint64_t row = 0; row < N; row++) {
        size_t n = pr_gen_json_event(5, row, ev, sizeof(ev));
        ev[n] = 0;
        int rc = both(&t, ev, id);
        if (rc == PR_EFULL) {
            blocks_equal(t.bj, t.ba);
            rows += t.bj->rows;
            pr_block_reset(t.bj);
            pr_block_reset(t.ba);
            row--;
            continue;
        }
        assert_true(rc == 1 || (filter && rc == 0));
    }
    blocks_equal(t.bj, t.ba);
    rows += t.bj->rows;
    assert_int_equal(rows + (uint32_t)t.ra.filtered, N);
    assert_int_equal(t.ra.filtered, t.rj.filtered);
    if (filter) /* each condition drops some, not all */
        assert_in_range(t.ra.filtered, N / 4, N - N / 20);
    else
        assert_int_equal(t.ra.filtered, 0);
    assert_int_equal(t.ra.n, 0);
    fx_free(&t);
    free(yaml);
    free(schema);
}

static void run_clickstream(pr_avro_framing framing, int64_t id, const char *filter)
{
    run_clickstream_in(framing, id, filter, false);
}

static void test_clickstream_plain(void **state)
{
    (void)state;
    run_clickstream(PR_AVRO_FRAMING_PLAIN, -1, NULL);
}

static void test_clickstream_in(void **state)
{
    (void)state;
    run_clickstream_in(PR_AVRO_FRAMING_PLAIN, -1, NULL, true);
}

static void test_clickstream_filter(void **state)
{
    (void)state;
    run_clickstream(PR_AVRO_FRAMING_PLAIN, -1, click_filter);
    run_clickstream(PR_AVRO_FRAMING_REGISTRY, 7, click_filter);
}

static void test_clickstream_framed(void **state)
{
    (void)state;
    run_clickstream(PR_AVRO_FRAMING_REGISTRY, 42, NULL); /* the fixed schema, whatever the id */
}

static const char *const types_yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      event_time: { path: ts, unit: us }\n"
    "      labels: [ { name: y, path: y } ]\n"
    "      dense:\n"
    "        - { name: amount, path: amount, default: 0 }\n"
    "        - { name: f, path: f }\n"
    "      sparse:\n"
    "        - { name: color, path: attrs.color, ops: [vocab] }\n"
    "        - { name: size, path: attrs.size, default: none, ops: [vocab] }\n"
    "        - { name: kind, path: kind, ops: [vocab] }\n"
    "        - { name: blob, path: blob, ops: [vocab] }\n"
    "        - { name: raw, path: raw, ops: [vocab] }\n"
    "        - { name: deep, path: a.b.c, ops: [vocab] }\n"
    "        - { name: gone, path: not.in.schema, default: 7, ops: [vocab] }\n"
    "        - { name: ids, path: ids, list: { max_len: 3, keep: last }, ops: [vocab] }\n"
    "        - { name: flag, path: flag, ops: [ { hash: 10 } ] }\n";

static const char *const types_avsc =
    "{\"type\":\"record\",\"name\":\"T\",\"fields\":["
    "{\"name\":\"ts\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-micros\"}},"
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"skipme\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"array\","
    "\"items\":\"string\"}}},"
    "{\"name\":\"amount\",\"type\":[\"null\",{\"type\":\"bytes\",\"logicalType\":\"decimal\","
    "\"precision\":10,\"scale\":2}]},"
    "{\"name\":\"f\",\"type\":\"float\"},"
    "{\"name\":\"attrs\",\"type\":{\"type\":\"map\",\"values\":\"string\"}},"
    "{\"name\":\"kind\",\"type\":{\"type\":\"enum\",\"name\":\"K\",\"symbols\":[\"A\",\"B\"]}},"
    "{\"name\":\"blob\",\"type\":{\"type\":\"fixed\",\"name\":\"F4\",\"size\":4}},"
    "{\"name\":\"raw\",\"type\":[\"null\",\"bytes\"]},"
    "{\"name\":\"a\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"A\",\"fields\":["
    "{\"name\":\"b\",\"type\":{\"type\":\"record\",\"name\":\"B\",\"fields\":["
    "{\"name\":\"c\",\"type\":\"long\"}]}}]}]},"
    "{\"name\":\"ids\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
    "{\"name\":\"flag\",\"type\":\"boolean\"},"
    "{\"name\":\"again\",\"type\":\"F4\"}]}";

/* Every Avro type the paths read, against the same JSON. */
static void test_types(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, types_yaml, types_avsc, PR_AVRO_FRAMING_PLAIN);
    const char *evs[] = {
        "{\"ts\":1700000000123456,\"y\":1,\"skipme\":{\"x\":[\"p\",\"q\"],\"z\":[]},"
        "\"amount\":12.34,\"f\":0.5,\"attrs\":{\"size\":\"L\",\"color\":\"red\"},\"kind\":\"B\","
        "\"blob\":\"abcd\",\"raw\":\"\\u0001x\",\"a\":{\"b\":{\"c\":-5}},\"ids\":[1,2,3,4,5],"
        "\"flag\":true,\"again\":\"wxyz\"}",
        "{\"ts\":1,\"y\":0,\"skipme\":{},\"amount\":null,\"f\":-2.25,\"attrs\":{},\"kind\":\"A\","
        "\"blob\":\"0000\",\"raw\":null,\"a\":null,\"ids\":[],\"flag\":false,\"again\":\"1234\"}",
        "{\"ts\":2,\"y\":3,\"skipme\":{\"k\":[\"v\"]},\"amount\":-0.07,\"f\":1e10,"
        "\"attrs\":{\"color\":\"\"},\"kind\":\"A\",\"blob\":\"zzzz\",\"raw\":\"\",\"a\":{\"b\":{"
        "\"c\":"
        "9007199254740993}},\"ids\":[7],\"flag\":true,\"again\":\"1234\"}",
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(both(&t, evs[i], -1), 1);
    blocks_equal(t.bj, t.ba);
    assert_int_equal(t.ba->rows, 3);
    assert_int_equal(t.ra.n, 0);
    fx_free(&t);
}

/* Reasons: nothing left in the block, the record named. */
static void test_rejects(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, types_yaml, types_avsc, PR_AVRO_FRAMING_PLAIN);
    const char *ev = "{\"ts\":1,\"y\":0,\"skipme\":{},\"amount\":null,\"f\":1,\"attrs\":{},"
                     "\"kind\":\"A\",\"blob\":\"0000\",\"raw\":null,\"a\":null,\"ids\":[],"
                     "\"flag\":false,\"again\":\"1234\"}";
    char err[256];
    assert_int_equal(
        pr_avro_from_json(t.w, ev, strlen(ev), -1, &t.buf, &t.len, &t.cap, err, sizeof(err)), 0);
    uint32_t next = 0;
    /* every truncation of a good record: bad_avro, no row */
    for (size_t cut = 0; cut < t.len; cut++) {
        t.ra.n = 0;
        assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, cut, &next, NULL), 0);
        assert_int_equal(t.ra.n, 1);
        assert_int_equal(t.ra.last, PR_DEC_BAD_AVRO);
    }
    /* a byte too many */
    t.buf[t.len] = 0;
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len + 1, &next, NULL), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_AVRO);
    /* a union branch out of range: amount's index is after ts, y, skipme */
    uint8_t bad[] = {2, 0, 0, 9};
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, bad, sizeof(bad), &next, NULL), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_AVRO);
    assert_int_equal(t.ba->rows, 0);
    /* the good one still reads */
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL), 1);
    fx_free(&t);

    /* framing expected, missing */
    fx_init(&t, types_yaml, types_avsc, PR_AVRO_FRAMING_REGISTRY);
    assert_int_equal(
        pr_avro_from_json(t.w, ev, strlen(ev), -1, &t.buf, &t.len, &t.cap, err, sizeof(err)), 0);
    t.buf[0] = 1; /* ts = -1, not a magic byte */
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_FRAMING);
    fx_free(&t);
}

/* An Avro string is UTF-8 as a JSON or a Protobuf string is: invalid bytes
 * are bad_utf8 in every format (the same events give the same batches). */
static void test_bad_utf8(void **state)
{
    (void)state;
    char *yaml = slurp(PR_SOURCE_DIR "/examples/clickstream.yaml");
    char *schema = slurp(PR_SOURCE_DIR "/examples/clickstream.avsc");
    fx t;
    fx_init(&t, yaml, schema, PR_AVRO_FRAMING_PLAIN);
    char ev[PR_GEN_JSON_LINE_MAX];
    size_t n = pr_gen_json_event(5, 0, ev, sizeof(ev));
    ev[n] = 0;
    assert_int_equal(both(&t, ev, -1), 1);
    char *id = strstr(ev, "\"id\":\"u");
    assert_non_null(id);
    char uid[32];
    size_t ul = strcspn(id + 6, "\"");
    memcpy(uid, id + 6, ul);
    char err[256];
    assert_int_equal(
        pr_avro_from_json(t.w, ev, strlen(ev), -1, &t.buf, &t.len, &t.cap, err, sizeof(err)), 0);
    uint8_t *at = memmem(t.buf, t.len, uid, ul);
    assert_non_null(at);
    at[0] = 0xff; /* never in UTF-8 */
    uint32_t next = 0, rows = t.ba->rows;
    t.ra.n = 0;
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL), 0);
    assert_int_equal(t.ra.n, 1);
    assert_int_equal(t.ra.last, PR_DEC_BAD_UTF8);
    assert_int_equal(t.ba->rows, rows);
    fx_free(&t);
    free(yaml);
    free(schema);
}

/* Where the writer schema cannot hold what the path needs: wrong_type when
 * such a value is there (as JSON), nothing when it is not. */
static void test_wrong_types(void **state)
{
    (void)state;
    static const char *const yaml = "pipelines:\n"
                                    "  - name: t\n"
                                    "    source: { format: json }\n"
                                    "    schema:\n"
                                    "      labels: [ { name: y, path: y } ]\n"
                                    "      sparse:\n"
                                    "        - { name: u, path: user.id, ops: [vocab] }\n"
                                    "        - { name: l, path: l, list: { max_len: 2 }, "
                                    "ops: [vocab] }\n";
    static const char *const avsc =
        "{\"type\":\"record\",\"name\":\"T\",\"fields\":["
        "{\"name\":\"y\",\"type\":\"int\"},"
        "{\"name\":\"user\",\"type\":[\"null\",\"string\",{\"type\":\"record\",\"name\":\"U\","
        "\"fields\":[{\"name\":\"id\",\"type\":{\"type\":\"map\",\"values\":\"int\"}}]}]},"
        "{\"name\":\"l\",\"type\":[\"null\",\"long\",{\"type\":\"array\",\"items\":\"string\"}]}]}";
    fx t;
    fx_init(&t, yaml, avsc, PR_AVRO_FRAMING_PLAIN);
    assert_int_equal(both(&t, "{\"y\":1,\"user\":null,\"l\":null}", -1), 1);
    assert_int_equal(both(&t, "{\"y\":1,\"user\":\"u1\",\"l\":[\"a\"]}", -1), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE); /* a string where user must be an object */
    assert_int_equal(both(&t, "{\"y\":1,\"user\":{\"id\":{\"k\":1}},\"l\":null}", -1), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE); /* an object at the path */
    assert_int_equal(both(&t, "{\"y\":1,\"user\":null,\"l\":5}", -1), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE); /* a scalar where a list is read */
    assert_int_equal(both(&t, "{\"y\":1,\"user\":null,\"l\":[\"a\",\"b\",\"c\"]}", -1), 1);
    blocks_equal(t.bj, t.ba);
    fx_free(&t);
}

/* Time logical types (timestamp-millis / -micros, date): the writer schema
 * says the unit, not event_time.unit (which reads plain numbers): a schema
 * evolving from millis to micros gives the same event time, hour and day. */
static void run_times(const char *ts_type, const char *ts[], int64_t rows_out[][3])
{
    static const char *const yaml =
        "pipelines:\n"
        "  - name: t\n"
        "    source: { format: json }\n"
        "    schema:\n"
        "      event_time: { path: ts, unit: s }\n"
        "      labels: [ { name: y, path: y } ]\n"
        "      sparse:\n"
        "        - { name: hour, path: ts, ops: [hour_of_day] }\n"
        "        - { name: wd, path: d, ops: [ { day_of_week: ms } ] }\n"
        "        - { name: plain, path: p, ops: [hour_of_day] }\n"
        "      dense: [ { name: ag, path: d, ops: [ { age: s } ] } ]\n";
    char avsc[1024];
    snprintf(avsc, sizeof(avsc),
             "{\"type\":\"record\",\"name\":\"T\",\"fields\":["
             "{\"name\":\"ts\",\"type\":{\"type\":\"long\",\"logicalType\":\"%s\"}},"
             "{\"name\":\"y\",\"type\":\"int\"},"
             "{\"name\":\"d\",\"type\":[\"null\",{\"type\":\"int\",\"logicalType\":\"date\"}]},"
             "{\"name\":\"p\",\"type\":\"long\"}]}",
             ts_type);
    fx t;
    fx_init(&t, yaml, avsc, PR_AVRO_FRAMING_PLAIN);
    char err[256], ev[256];
    uint32_t next = 0;
    for (int i = 0; ts[i]; i++) {
        snprintf(ev, sizeof(ev), "{\"ts\":%s,\"y\":1,\"d\":19675,\"p\":3600}", ts[i]);
        if (pr_avro_from_json(t.w, ev, strlen(ev), -1, &t.buf, &t.len, &t.cap, err, sizeof(err)))
            fail_msg("encode %s: %s", ev, err);
        if (pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL) != 1)
            fail_msg("%s (%s): %s", ev, ts_type, t.ra.detail);
    }
    pr_fside *s = t.ba->side;
    for (uint32_t r = 0; r < t.ba->rows; r++) {
        rows_out[r][0] = t.ba->event_time_ms[r];
        rows_out[r][1] = s->values[0][r];
        assert_int_equal(s->values[1][r], 2); /* 2023-11-14, a Tuesday */
        assert_int_equal(s->values[2][r], 2); /* a plain long: unit s, 01:00 */
        /* age of the date (days, whatever `age: s` says) at the event time */
        double want = (double)t.ba->event_time_ms[r] / 1000.0 - 19675.0 * 86400.0;
        assert_true(fabs(s->dense[r] - want) <= fabs(want) * 1e-6 + 1e-3);
    }
    rows_out[t.ba->rows][0] = -1;
    fx_free(&t);
}

static void test_time_logical_types(void **state)
{
    (void)state;
    const char *ms[] = {"1700000000123", "-2", "0", NULL};
    const char *us[] = {"1700000000123456", "-1500", "999", NULL};
    int64_t a[8][3], b[8][3];
    run_times("timestamp-millis", ms, a);
    run_times("timestamp-micros", us, b);
    const int64_t want[][2] = {{1700000000123, 23}, {-2, 24}, {0, 1}};
    for (int r = 0; r < 3; r++) {
        assert_int_equal(a[r][0], want[r][0]);
        assert_int_equal(a[r][1], want[r][1]);
        assert_int_equal(b[r][0], want[r][0]);
        assert_int_equal(b[r][1], want[r][1]);
    }
    assert_int_equal(a[3][0], -1);
    run_times("local-timestamp-millis", ms, a);
    assert_int_equal(a[0][0], want[0][0]);
}

/* Arrays of records: a list feature's path maps over the items, as JSON's
 * lists of objects (an item without the field, or null there, adds
 * nothing); a single-valued path across the array and a second list level
 * are wrong_type. */
static void test_lists_of_records(void **state)
{
    (void)state;
    static const char *const yaml =
        "pipelines:\n"
        "  - name: t\n"
        "    source: { format: json }\n"
        "    schema:\n"
        "      labels: [ { name: y, path: y } ]\n"
        "      sparse:\n"
        "        - { name: ad, path: imp.ad_id, list: { max_len: 3, keep: last }, ops: [vocab] }\n"
        "        - { name: pos, path: imp.pos, list: { max_len: 8 }, ops: [ { hash: 100 } ] }\n"
        "        - { name: cat, path: imp.meta.cat, list: { max_len: 8 }, ops: [vocab] }\n"
        "        - { name: tag, path: imp.tags, list: { max_len: 8 }, ops: [vocab] }\n"
        "        - { name: first, path: clk.id, ops: [vocab] }\n";
    static const char *const avsc =
        "{\"type\":\"record\",\"name\":\"T\",\"fields\":["
        "{\"name\":\"y\",\"type\":\"int\"},"
        "{\"name\":\"imp\",\"type\":[\"null\",{\"type\":\"array\",\"items\":{\"type\":\"record\","
        "\"name\":\"Imp\",\"fields\":["
        "{\"name\":\"ad_id\",\"type\":[\"null\",\"string\",\"long\"]},"
        "{\"name\":\"pos\",\"type\":[\"null\",\"long\"]},"
        "{\"name\":\"skip\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
        "{\"name\":\"meta\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"M\",\"fields\":["
        "{\"name\":\"cat\",\"type\":\"string\"}]}]},"
        "{\"name\":\"tags\",\"type\":[\"null\",\"string\",{\"type\":\"array\","
        "\"items\":\"string\"}]}]}}]},"
        "{\"name\":\"clk\",\"type\":[\"null\",{\"type\":\"array\",\"items\":{\"type\":\"record\","
        "\"name\":\"C\",\"fields\":[{\"name\":\"id\",\"type\":\"string\"}]}}]}]}";
    fx t;
    fx_init(&t, yaml, avsc, PR_AVRO_FRAMING_PLAIN);
    const char *good[] = {
        "{\"y\":1,\"imp\":[{\"ad_id\":\"a1\",\"pos\":1,\"skip\":[4],\"meta\":{\"cat\":\"x\"},"
        "\"tags\":\"t1\"},{\"ad_id\":\"a7\",\"pos\":2,\"skip\":[],\"meta\":null,\"tags\":null}],"
        "\"clk\":null}",
        "{\"y\":0,\"imp\":[{\"ad_id\":null,\"pos\":3,\"skip\":[],\"meta\":{\"cat\":\"y\"},"
        "\"tags\":null},{\"ad_id\":42,\"pos\":null,\"skip\":[1,2],\"meta\":null,\"tags\":\"t2\"},"
        "{\"ad_id\":\"a1\",\"pos\":4,\"skip\":[],\"meta\":null,\"tags\":null},"
        "{\"ad_id\":\"a9\",\"pos\":5,\"skip\":[],\"meta\":null,\"tags\":null}],\"clk\":null}",
        "{\"y\":1,\"imp\":[],\"clk\":null}",
        "{\"y\":1,\"imp\":null,\"clk\":null}",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(both(&t, good[i], -1), 1);
    blocks_equal(t.bj, t.ba);
    assert_int_equal(t.ra.n, 0);
    /* ad: a1 a7 | a1 a9 (42 and a1 kept last 3: 42 a1 a9) | - | - */
    const int32_t *len = pr_fside_lengths(t.ba->side, 0);
    assert_int_equal(len[0], 2);
    assert_int_equal(len[1], 3);
    assert_int_equal(len[2], 0);
    assert_int_equal(len[3], 0);
    assert_int_equal(pr_fside_lengths(t.ba->side, 1)[1], 3); /* a null pos dropped */
    assert_int_equal(pr_fside_lengths(t.ba->side, 2)[0], 1);
    /* a single-valued path across the array; a second list level */
    assert_int_equal(both(&t, "{\"y\":1,\"imp\":null,\"clk\":[{\"id\":\"c\"}]}", -1), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    assert_non_null(strstr(t.ra.detail, "single-valued"));
    assert_int_equal(both(&t,
                          "{\"y\":1,\"imp\":[{\"ad_id\":\"a\",\"pos\":1,\"skip\":[],"
                          "\"meta\":null,\"tags\":[\"p\",\"q\"]}],\"clk\":null}",
                          -1),
                     0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    assert_non_null(strstr(t.ra.detail, "one list level"));
    assert_int_equal(t.ba->rows, 4);
    fx_free(&t);
}

/* ---- a fixed writer schema checked when the config loads ---- */

static const char *const chk_avsc =
    "{\"type\":\"record\",\"name\":\"Ev\",\"fields\":["
    "{\"name\":\"ts\",\"type\":{\"type\":\"long\",\"logicalType\":\"timestamp-micros\"}},"
    "{\"name\":\"user\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"U\",\"fields\":["
    "{\"name\":\"id\",\"type\":\"string\"},{\"name\":\"age_days\",\"type\":[\"null\",\"int\"]},"
    "{\"name\":\"geo\",\"type\":{\"type\":\"record\",\"name\":\"G\",\"fields\":["
    "{\"name\":\"cc\",\"type\":\"string\"}]}}]}]},"
    "{\"name\":\"amount\",\"type\":[\"null\",{\"type\":\"bytes\",\"logicalType\":\"decimal\","
    "\"precision\":10,\"scale\":2}]},"
    "{\"name\":\"tags\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
    "{\"name\":\"imps\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"I\",\"fields\":[{\"name\":\"ad\",\"type\":[\"null\",\"string\"]}]}}},"
    "{\"name\":\"attrs\",\"type\":{\"type\":\"map\",\"values\":\"string\"}},"
    "{\"name\":\"tier\",\"type\":{\"type\":\"enum\",\"name\":\"T\",\"symbols\":[\"A\",\"B\"]}},"
    "{\"name\":\"opt\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"mixed\",\"type\":[\"string\",\"double\"]}]}";

/* The config of one pipeline reading `file` (a registry too when `reg`)
 * with the schema lines `schema`: pr_config_load_string's rc, err filled. */
static int load_avro(const char *file, bool reg, const char *schema, char *err, size_t errn)
{
    char yaml[4096];
    snprintf(yaml, sizeof(yaml),
             "pipelines:\n"
             "  - name: t\n"
             "    source:\n"
             "      format: avro\n"
             "      avro: { schema_file: \"%s\" }\n"
             "%s"
             "    schema:\n"
             "%s",
             file, reg ? "      schema_registry: { url: \"http://127.0.0.1:1/\" }\n" : "", schema);
    pr_config *cfg = NULL;
    err[0] = 0;
    int rc = pr_config_load_string(yaml, strlen(yaml), "a.yaml", &cfg, err, errn);
    pr_config_free(cfg);
    return rc;
}

static void expect_refused(const char *file, const char *schema, const char *want)
{
    char err[2048];
    assert_int_not_equal(load_avro(file, false, schema, err, sizeof(err)), 0);
    if (!strstr(err, want))
        fail_msg("expected \"%s\" in: %s", want, err);
}

static char *write_tmp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/test_avro_XXXXXX.avsc");
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return strdup(path);
}

/* Missing and unparsable files, paths not in the schema, a single-valued
 * path through an array of records, shapes and types no record can give:
 * config errors naming the key; what the reader reads loads. */
static void test_schema_file_checked(void **state)
{
    (void)state;
    char *good = write_tmp(chk_avsc), *bad = write_tmp("{\"type\":\"record\",\"name\":");
    static const char *const fine =
        "      event_time: { path: ts, unit: ms }\n"
        "      labels: [ { name: y, path: user.age_days, default: 0 } ]\n"
        "      dense: [ { name: amount, path: amount, default: 0 } ]\n"
        "      sparse:\n"
        "        - { name: user, path: user.id, ops: [vocab] }\n"
        "        - { name: cc, path: user.geo.cc, ops: [vocab] }\n"
        "        - { name: tags, path: tags, list: { max_len: 4 }, ops: [vocab] }\n"
        "        - { name: ads, path: imps.ad, list: { max_len: 4 }, ops: [vocab] }\n"
        "        - { name: color, path: attrs.color, default: none, ops: [vocab] }\n"
        "        - { name: tier, path: tier, ops: [vocab] }\n"
        "        - { name: x, cross: [user.id, tier], ops: [ { hash: 64 } ] }\n"
        "        - { name: hour, path: ts, ops: [hour_of_day] }\n";
    char err[2048];
    if (load_avro(good, false, fine, err, sizeof(err)))
        fail_msg("refused: %s", err);
    expect_refused("/nonexistent/x.avsc", fine,
                   "a.yaml:5: pipelines[0].source.avro.schema_file: cannot read the writer "
                   "schema /nonexistent/x.avsc");
    expect_refused(bad, fine, "pipelines[0].source.avro.schema_file: ");
    expect_refused(bad, fine, "is not a usable Avro schema");
    static const char *const typo = "      sparse:\n"
                                    "        - { name: tier, path: tier, ops: [vocab] }\n"
                                    "        - { name: user, path: user.idd, ops: [vocab] }\n";
    char want[512];
    snprintf(want, sizeof(want),
             "a.yaml:9: pipelines[0].schema.sparse[1].path: 'user.idd' is not in the writer "
             "schema %s (record user has: id, age_days, geo)",
             good);
    expect_refused(good, typo, want);
    expect_refused(good, "      sparse: [ { name: s, path: nope, ops: [vocab] } ]\n",
                   "(record Ev has: ts, user, amount, tags, imps, attrs, tier, opt, mixed)");
    expect_refused(
        good, "      sparse: [ { name: x, cross: [user.id, user.nope], ops: [ { hash: 8 } ] } ]\n",
        "pipelines[0].schema.sparse[0].cross[1]: 'user.nope' is not in");
    expect_refused(good, "      sparse: [ { name: ad, path: imps.ad, ops: [vocab] } ]\n",
                   "pipelines[0].schema.sparse[0].path: 'imps.ad' in the writer schema");
    expect_refused(good, "      sparse: [ { name: ad, path: imps.ad, ops: [vocab] } ]\n",
                   "imps is an array of records: a single-valued feature cannot go through it");
    expect_refused(good, "      sparse: [ { name: t, path: tags, ops: [vocab] } ]\n",
                   "an array: declare a list feature");
    expect_refused(
        good, "      sparse: [ { name: t, path: tier, list: { max_len: 2 }, ops: [vocab] } ]\n",
        "not an array: a list feature (or a dense vector) needs an array");
    expect_refused(good, "      dense: [ { name: d, path: user.id } ]\n",
                   "pipelines[0].schema.dense[0].path: 'user.id' in the writer schema");
    expect_refused(good, "      dense: [ { name: d, path: user.id } ]\n",
                   "it gives a string, and a dense feature needs a number");
    /* age in rfc3339 reads a string: a long is refused, a string loads */
    expect_refused(good,
                   "      event_time: { path: ts, unit: ms }\n"
                   "      dense: [ { name: d, path: ts, ops: [ { age: rfc3339 } ] } ]\n",
                   "it gives an integer, and a dense feature needs a string (its first operator "
                   "is age in rfc3339)");
    if (load_avro(good, false,
                  "      event_time: { path: ts, unit: ms }\n"
                  "      dense: [ { name: d, path: user.id, ops: [ { age: rfc3339 } ] } ]\n",
                  err, sizeof(err)))
        fail_msg("age of a string refused: %s", err);
    /* `in:` takes any value, a list (an array, an array of records) too */
    static const char *const in_fine =
        "      labels:\n"
        "        - { name: a, path: tier, in: [A] }\n"
        "        - { name: b, path: tags, in: [x, 1] }\n"
        "        - { name: c, path: imps.ad, in: [a1] }\n"
        "      dense: [ { name: d, path: user.id, in: [u1], default: 0 } ]\n"
        "      sparse: [ { name: tier, path: tier, ops: [vocab] } ]\n";
    if (load_avro(good, false, in_fine, err, sizeof(err)))
        fail_msg("in: refused: %s", err);
    /* a union gives every branch's type: a nullable string is still a
     * string; a string-or-double can be a number */
    expect_refused(good, "      dense: [ { name: d, path: opt } ]\n",
                   "it gives a string, and a dense feature needs a number");
    if (load_avro(good, false, "      dense: [ { name: d, path: mixed } ]\n", err, sizeof(err)))
        fail_msg("a union with a number refused: %s", err);
    expect_refused(good, "      dense: [ { name: d, path: user.geo } ]\n",
                   "the path ends at a record, not a value");
    expect_refused(good, "      event_time: { path: user.id, unit: ms }\n",
                   "pipelines[0].schema.event_time.path: 'user.id'");
    /* schema.filter's paths: a value or an array of any type; not a path the
     * schema lacks, nor a record */
    static const char *const filtered = "      sparse: [ { name: t, path: tier, ops: [vocab] } ]\n"
                                        "      filter:\n"
                                        "        - { path: user.id, in: [a] }\n"
                                        "        - { path: amount, not_in: [0] }\n"
                                        "        - { path: tags, in: [x] }\n"
                                        "        - { path: opt, present: true }\n"
                                        "        - { path: mixed, absent: true }\n";
    if (load_avro(good, false, filtered, err, sizeof(err)) == 0 || !strstr(err, "absent"))
        fail_msg("an unknown condition key not named: %s", err);
    char fixed[1024];
    snprintf(fixed, sizeof(fixed), "%.*s",
             (int)(strstr(filtered, "        - { path: mixed") - filtered), filtered);
    if (load_avro(good, false, fixed, err, sizeof(err)))
        fail_msg("filter paths refused: %s", err);
    strcat(fixed, "        - { path: user.nope, present: false }\n");
    expect_refused(good, fixed, "pipelines[0].schema.filter[4].path: 'user.nope' is not in");
    expect_refused(good,
                   "      sparse: [ { name: t, path: tier, ops: [vocab] } ]\n"
                   "      filter: [ { path: user.geo, present: true } ]\n",
                   "pipelines[0].schema.filter[0].path: ");
    /* with a registry the writer schemas come at run time: a path a schema
     * lacks is absent there (schema evolution), not checked at load */
    if (load_avro(good, true, typo, err, sizeof(err)))
        fail_msg("refused with a registry: %s", err);
    unlink(good);
    unlink(bad);
    free(good);
    free(bad);
}

/* The head of the dense vector tests' configs: one pipeline, label y. */
#define Y_HEAD                                                                                     \
    "pipelines:\n  - name: t\n    source: { format: json }\n    schema:\n"                         \
    "      labels: [ { name: y, path: y } ]\n"

/* Dense vectors (dim): an array of floats, a nullable array of doubles and
 * an array of ints read as the same JSON lists do: values, defaults, and
 * the same rejects (a wrong length, a value beyond float32); a vector
 * through an array of records is refused in both (an element without the
 * field would shift the rest). */
static const char *const vec_yaml =
    Y_HEAD "      dense:\n"
           "        - { name: emb, path: emb, dim: 3 }\n"
           "        - { name: dv, path: dv, dim: 2, default: 7, ops: [ { clip: [-5, 1e12] } ] }\n"
           "        - { name: iv, path: iv, dim: 2, ops: [log1p] }\n"
           "        - { name: pos, path: pos, dim: 2, default: 0 }\n";

static const char *const vec_avsc =
    "{\"type\":\"record\",\"name\":\"V\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"emb\",\"type\":{\"type\":\"array\",\"items\":\"float\"}},"
    "{\"name\":\"dv\",\"type\":[\"null\",{\"type\":\"array\",\"items\":\"double\"}]},"
    "{\"name\":\"iv\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
    "{\"name\":\"pos\",\"type\":{\"type\":\"array\",\"items\":\"double\"}},"
    "{\"name\":\"imps\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"P\",\"fields\":[{\"name\":\"p\",\"type\":\"double\"}]}}}]}";

static void test_dense_vectors(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, vec_yaml, vec_avsc, PR_AVRO_FRAMING_PLAIN);
    static const struct {
        const char *ev;
        int rows, reason;
    } cases[] = {
        {"{\"y\":1,\"emb\":[0.5,-1.25,3],\"dv\":[-10,2],\"iv\":[0,3],\"pos\":[1.5,2.5],\"imps\":[]"
         "}",
         1, 0},
        {"{\"y\":0,\"emb\":[1,2,3],\"dv\":null,\"iv\":[1,1],\"pos\":[1,2],\"imps\":[]}", 1, 0},
        {"{\"y\":0,\"emb\":[],\"dv\":[],\"iv\":[],\"pos\":[],\"imps\":[]}", 1, 0}, /* empty */
        {"{\"y\":0,\"emb\":[1,2],\"dv\":null,\"iv\":[1,1],\"pos\":[],\"imps\":[]}", 0,
         PR_DEC_WRONG_TYPE},
        {"{\"y\":0,\"emb\":[1,2,3,4],\"dv\":[1,2],\"iv\":[1,1],\"pos\":[],\"imps\":[]}", 0,
         PR_DEC_WRONG_TYPE},
        {"{\"y\":0,\"emb\":[1,2,3],\"dv\":[1e300,2],\"iv\":[1,1],\"pos\":[1,2],\"imps\":[]}", 1,
         0}, /* clipped into float32 */
        {"{\"y\":0,\"emb\":[1,2,3],\"dv\":[1,2],\"iv\":[1,1],\"pos\":[1e300,2],\"imps\":[]}", 0,
         PR_DEC_NUMBER_OUT_OF_RANGE},
        {"{\"y\":0,\"emb\":[1,2,3],\"dv\":[1,2,3],\"iv\":[1,1],\"pos\":[1,2],\"imps\":[]}", 0,
         PR_DEC_WRONG_TYPE},
    };
    int rows = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t.rj.last = t.ra.last = 0;
        int rc = both(&t, cases[i].ev, -1);
        assert_int_equal(rc, cases[i].rows);
        if (!cases[i].rows && t.ra.last != cases[i].reason)
            fail_msg("%s: %s", cases[i].ev, pr_decode_reason_name(t.ra.last));
        rows += rc;
    }
    blocks_equal(t.bj, t.ba);
    assert_int_equal(t.ba->rows, rows);
    const pr_fside *sd = t.ba->side;
    assert_int_equal(sd->n_dense, 9);
    const float l1 = (float)log1p(1.0);
    const float want[4][9] = {{0.5f, -1.25f, 3, -5, 2, 0, (float)log1p(3.0), 1.5f, 2.5f},
                              {1, 2, 3, 7, 7, l1, l1, 1, 2},
                              {0, 0, 0, 7, 7, 0, 0, 0, 0},
                              {1, 2, 3, 1e12f, 2, l1, l1, 1, 2}};
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 9; c++)
            if (sd->dense[r * 9 + c] != want[r][c])
                fail_msg("row %d column %d: %g, want %g", r, c, sd->dense[r * 9 + c], want[r][c]);
    if (!strstr(t.ra.detail, "dv (dv): a vector of 2 numbers expected, got 3"))
        fail_msg("detail: %s", t.ra.detail);
    fx_free(&t);

    /* through an array of records: wrong_type in both formats */
    static const char *const through = "pipelines:\n"
                                       "  - name: t\n"
                                       "    source: { format: json }\n"
                                       "    schema:\n"
                                       "      labels: [ { name: y, path: y } ]\n"
                                       "      dense: [ { name: p, path: imps.p, dim: 2 } ]\n";
    fx_init(&t, through, vec_avsc, PR_AVRO_FRAMING_PLAIN);
    assert_int_equal(both(&t,
                          "{\"y\":1,\"emb\":[1,2,3],\"dv\":null,\"iv\":[1,1],\"pos\":[],"
                          "\"imps\":[{\"p\":1},{\"p\":2}]}",
                          -1),
                     0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    if (!strstr(t.rj.detail, "a dense vector's") || !strstr(t.ra.detail, "a dense vector's"))
        fail_msg("json: %s; avro: %s", t.rj.detail, t.ra.detail);
    fx_free(&t);
}

/* Weighted lists: ids and scores in an array of records with nullable
 * fields (an item without the id drops its score, one without the score
 * takes the default), parallel arrays (a nullable one), and the rejects,
 * all as the same JSON events give them; a weights path the writer schema
 * gives as strings fails the config check. */
static const char *const w_avsc =
    "{\"type\":\"record\",\"name\":\"W\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"cats\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"C\",\"fields\":[{\"name\":\"id\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"score\",\"type\":[\"null\",\"double\"]},"
    "{\"name\":\"tag\",\"type\":\"string\"}]}}},"
    "{\"name\":\"hist\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
    "{\"name\":\"dwell\",\"type\":[\"null\",{\"type\":\"array\",\"items\":\"float\"}]}]}";

static void test_weighted_lists(void **state)
{
    (void)state;
    static const char *const yaml =
        Y_HEAD "      sparse:\n"
               "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
               "            weights: { path: cats.score, default: 0.5 }, ops: [vocab] }\n"
               "        - { name: hist, path: hist, list: { max_len: 4, keep: last },\n"
               "            weights: { path: dwell }, ops: [vocab] }\n"
               "        - { name: tags, path: cats.tag, list: { max_len: 8 }, ops: [vocab] }\n"
               "        - { name: catl, path: cats.id, list: { max_len: 3 }, ops: [vocab],\n"
               "            weights: { path: cats.score, default: 0.5,\n"
               "                       ops: [log1p, { clip: [0, 1] }] } }\n"
               "        - { name: histz, path: hist, list: { max_len: 4, keep: last },\n"
               "            weights: { path: dwell, ops: [ { standardize: { mean: 1, std: 2 } } "
               "] },\n"
               "            ops: [vocab] }\n";
    fx t;
    fx_init(&t, yaml, w_avsc, PR_AVRO_FRAMING_PLAIN);
    static const struct {
        const char *ev;
        int rows, reason;
    } cases[] = {
        {"{\"y\":1,\"cats\":[{\"id\":\"a\",\"score\":0.25,\"tag\":\"t\"},{\"id\":\"b\","
         "\"score\":null,\"tag\":\"t\"},{\"id\":null,\"score\":3,\"tag\":\"u\"},{\"id\":"
         "\"c\",\"score\":2,\"tag\":\"v\"}],\"hist\":[\"x\",\"y\"],\"dwell\":[1.5,2]}",
         1, 0},
        {"{\"y\":0,\"cats\":[],\"hist\":[],\"dwell\":null}", 1, 0},
        {"{\"y\":0,\"cats\":[{\"id\":null,\"score\":null,\"tag\":\"t\"}],\"hist\":[\"x\"],"
         "\"dwell\":[4]}",
         1, 0},
        {"{\"y\":0,\"cats\":[],\"hist\":[\"x\"],\"dwell\":null}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":0,\"cats\":[],\"hist\":[\"x\",\"y\"],\"dwell\":[1]}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":0,\"cats\":[{\"id\":\"a\",\"score\":1e300,\"tag\":\"t\"}],\"hist\":[],"
         "\"dwell\":null}",
         0, PR_DEC_NUMBER_OUT_OF_RANGE},
    };
    int rows = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        t.rj.last = t.ra.last = 0;
        int rc = both(&t, cases[i].ev, -1);
        assert_int_equal(rc, cases[i].rows);
        if (!cases[i].rows && t.ra.last != cases[i].reason)
            fail_msg("%s: %s", cases[i].ev, pr_decode_reason_name(t.ra.last));
        rows += rc;
    }
    blocks_equal(t.bj, t.ba);
    const pr_fside *sd = t.ba->side;
    static const float cw[] = {0.25f, 0.5f, 2.0f}, hw[] = {1.5f, 2.0f, 4.0f};
    assert_int_equal(sd->n_weights[0], 3);
    assert_memory_equal(sd->weights[0], cw, sizeof(cw));
    assert_int_equal(sd->n_weights[1], 3);
    assert_memory_equal(sd->weights[1], hw, sizeof(hw));
    assert_null(sd->weights[2]);
    assert_int_equal(pr_fside_lengths((pr_fside *)sd, 2)[0], 4); /* tags: every item */
    /* weights.ops: the same chain on the same weights (blocks_equal: as JSON) */
    const float lw[] = {(float)log1p(0.25), (float)log1p(0.5), 1.0f},
                zw[] = {(float)((1.5 - 1) / 2), (float)((2.0 - 1) / 2), (float)((4.0 - 1) / 2)};
    assert_int_equal(sd->n_weights[3], 3);
    assert_memory_equal(sd->weights[3], lw, sizeof(lw));
    assert_int_equal(sd->n_weights[4], 3);
    assert_memory_equal(sd->weights[4], zw, sizeof(zw));
    fx_free(&t);
    /* a fixed writer schema: the weights path must give numbers */
    char *f = write_tmp(w_avsc);
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
                   "            weights: { path: cats.tag }, ops: [vocab] }\n",
                   "schema.sparse[0].weights.path: 'cats.tag'");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
                   "            weights: { path: cats.tag }, ops: [vocab] }\n",
                   "weights are numbers");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
                   "            weights: { path: cats.nope }, ops: [vocab] }\n",
                   "schema.sparse[0].weights.path: 'cats.nope' is not in the writer schema");
    char err[2048];
    if (load_avro(f, false,
                  "      sparse:\n"
                  "        - { name: cats, path: cats.id, list: { max_len: 3 },\n"
                  "            weights: { path: cats.score }, ops: [vocab] }\n",
                  err, sizeof(err)))
        fail_msg("a good weights path refused: %s", err);
    unlink(f);
    free(f);
}

/* Aligned paths over an array of a nullable record union: a null item, a
 * null record on the way to the weight (meta), a null field, all keep the
 * positions (a hole each); an item without the id drops its weight, an id
 * without a weight takes the default or, without one, rejects the record
 * wrong_type; a record branch of the writer schema without the weights
 * field gives holes only. Each as the same JSON events give it. */
static const char *const wr_avsc =
    "{\"type\":\"record\",\"name\":\"W\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"cats\",\"type\":[\"null\",{\"type\":\"array\",\"items\":[\"null\","
    "{\"type\":\"record\",\"name\":\"C\",\"fields\":["
    "{\"name\":\"id\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"meta\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"M\",\"fields\":["
    "{\"name\":\"w\",\"type\":[\"null\",\"float\"]}]}]},"
    "{\"name\":\"score\",\"type\":[\"null\",\"long\"]}]}]}]}]}";

/* The same without the score field (an older writer). */
static const char *const wr_old_avsc =
    "{\"type\":\"record\",\"name\":\"W\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"cats\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"C\",\"fields\":[{\"name\":\"id\",\"type\":[\"null\",\"string\"]}]}}}]}";

typedef struct wcase {
    const char *ev;
    int rows, reason;
} wcase;

/* cases[0, n) both ways (JSON, Avro under writer schema avsc) through a
 * fixture made from yaml: the rows and reasons each case names, blocks
 * equal; the caller reads t's blocks, then fx_free(t). */
static void weighted_cases(fx *t, const char *yaml, const char *avsc, const wcase *cases, size_t n)
{
    fx_init(t, yaml, avsc, PR_AVRO_FRAMING_PLAIN);
    for (size_t i = 0; i < n; i++) {
        t->rj.last = t->ra.last = 0;
        assert_int_equal(both(t, cases[i].ev, -1), cases[i].rows);
        if (!cases[i].rows && t->ra.last != cases[i].reason)
            fail_msg("%s: %s", cases[i].ev, pr_decode_reason_name(t->ra.last));
    }
    blocks_equal(t->bj, t->ba);
}

static void test_weighted_records_aligned(void **state)
{
    (void)state;
    static const char *const dflt =
        Y_HEAD "      sparse:\n"
               "        - { name: cats, path: cats.id, list: { max_len: 8 },\n"
               "            weights: { path: cats.meta.w, default: 0.5 }, ops: [vocab] }\n"
               "        - { name: ids, path: cats.id, list: { max_len: 8 }, ops: [vocab] }\n";
    static const wcase dcases[] = {
        {"{\"y\":1,\"cats\":[{\"id\":\"a\",\"meta\":{\"w\":2}},null,{\"id\":\"b\",\"meta\":null},"
         "{\"id\":null,\"meta\":{\"w\":3}},{\"id\":\"c\",\"meta\":{\"w\":null}},{\"meta\":{\"w\":9}"
         "},"
         "{\"id\":\"d\",\"meta\":{\"w\":4}}]}",
         1, 0},
        {"{\"y\":0,\"cats\":null}", 1, 0},
        {"{\"y\":0,\"cats\":[null,null,{\"id\":null}]}", 1, 0},
        {"{\"y\":0,\"cats\":[]}", 1, 0},
        {"{\"y\":1,\"cats\":[null,{\"id\":\"e\"}]}", 1, 0},
    };
    fx t;
    weighted_cases(&t, dflt, wr_avsc, dcases, sizeof(dcases) / sizeof(dcases[0]));
    const pr_fside *sd = t.ba->side;
    static const float w0[] = {2.0f, 0.5f, 0.5f, 4.0f, 0.5f};
    assert_int_equal(sd->n_weights[0], 5);
    assert_memory_equal(sd->weights[0], w0, sizeof(w0));
    static const int32_t len0[] = {4, 0, 0, 0, 1};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 0), len0, sizeof(len0));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 1), len0, sizeof(len0)); /* ids alone */
    assert_null(sd->weights[1]);
    fx_free(&t);

    /* no default: an id without its weight rejects the record */
    static const char *const strict =
        Y_HEAD "      sparse:\n"
               "        - { name: cats, path: cats.id, list: { max_len: 8 },\n"
               "            weights: { path: cats.score }, ops: [vocab] }\n";
    static const wcase scases[] = {
        {"{\"y\":1,\"cats\":[{\"id\":\"a\",\"score\":7},{\"id\":null,\"score\":2},null,"
         "{\"score\":5},{\"id\":\"b\",\"score\":-1}]}",
         1, 0},
        {"{\"y\":1,\"cats\":[{\"id\":\"a\",\"score\":1},{\"id\":\"b\"}]}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"cats\":[{\"id\":\"a\",\"score\":1},null,{\"id\":\"b\",\"score\":null}]}", 0,
         PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"cats\":[null,{\"score\":3}]}", 1, 0},
    };
    weighted_cases(&t, strict, wr_avsc, scases, sizeof(scases) / sizeof(scases[0]));
    static const float w1[] = {7.0f, -1.0f};
    assert_int_equal(t.ba->side->n_weights[0], 2);
    assert_memory_equal(t.ba->side->weights[0], w1, sizeof(w1));
    fx_free(&t);

    /* a writer schema whose records lack the weights field: every id a hole's
     * weight (the default, or the record rejected) */
    static const char *const old =
        Y_HEAD "      sparse:\n"
               "        - { name: cats, path: cats.id, list: { max_len: 8 },\n"
               "            weights: { path: cats.score, default: 0.25 }, ops: [vocab] }\n";
    static const wcase ocases[] = {
        {"{\"y\":1,\"cats\":[{\"id\":\"a\"},{\"id\":null},{\"id\":\"b\"}]}", 1, 0},
        {"{\"y\":0,\"cats\":[]}", 1, 0},
    };
    weighted_cases(&t, old, wr_old_avsc, ocases, sizeof(ocases) / sizeof(ocases[0]));
    static const float w2[] = {0.25f, 0.25f};
    assert_int_equal(t.ba->side->n_weights[0], 2);
    assert_memory_equal(t.ba->side->weights[0], w2, sizeof(w2));
    fx_free(&t);
    static const wcase rcases[] = {
        {"{\"y\":1,\"cats\":[{\"id\":\"a\"}]}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"cats\":[{\"id\":null}]}", 1, 0},
    };
    weighted_cases(&t, strict, wr_old_avsc, rcases, sizeof(rcases) / sizeof(rcases[0]));
    fx_free(&t);
}

/* A fixed writer schema and weights: a list of int, long, float, double or
 * decimal loads; a boolean, an enum, bytes, a string or a single number is
 * refused naming schema.sparse[i].weights.path; the ids of a weighted list
 * must be a list too (schema.sparse[i].path). */
static const char *const wchk_avsc =
    "{\"type\":\"record\",\"name\":\"K\",\"fields\":["
    "{\"name\":\"ids\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
    "{\"name\":\"one\",\"type\":\"string\"},"
    "{\"name\":\"ints\",\"type\":{\"type\":\"array\",\"items\":\"int\"}},"
    "{\"name\":\"decs\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"bytes\","
    "\"logicalType\":\"decimal\",\"precision\":6,\"scale\":2}}},"
    "{\"name\":\"flags\",\"type\":{\"type\":\"array\",\"items\":\"boolean\"}},"
    "{\"name\":\"kinds\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"enum\",\"name\":\"E\","
    "\"symbols\":[\"A\",\"B\"]}}},"
    "{\"name\":\"blobs\",\"type\":{\"type\":\"array\",\"items\":\"bytes\"}},"
    "{\"name\":\"amount\",\"type\":\"double\"},"
    "{\"name\":\"recs\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\",\"name\":"
    "\"R\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"},{\"name\":\"on\",\"type\":"
    "[\"null\",\"boolean\"]},{\"name\":\"w\",\"type\":[\"null\",\"double\"]}]}}}]}";

static void test_weighted_schema_checked(void **state)
{
    (void)state;
    char *f = write_tmp(wchk_avsc), err[2048], y[512];
    static const char *const good[] = {"ints", "decs"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: ids, list: { max_len: 3 },\n"
                 "            weights: { path: %s }, ops: [vocab] }\n"
                 "        - { name: r, path: recs.id, list: { max_len: 3 },\n"
                 "            weights: { path: recs.w, default: 1 }, ops: [vocab] }\n",
                 good[i]);
        if (load_avro(f, false, y, err, sizeof(err)))
            fail_msg("weights %s refused: %s", good[i], err);
    }
    static const struct {
        const char *ids, *weights, *want;
    } bad[] = {
        {"ids", "flags", "schema.sparse[0].weights.path: 'flags' in the writer schema"},
        {"ids", "flags", "it gives a boolean, and weights are numbers"},
        {"ids", "kinds", "it gives an enum, and weights are numbers"},
        {"ids", "blobs", "it gives bytes, and weights are numbers"},
        {"ids", "one", "schema.sparse[0].weights.path: 'one' in the writer schema"},
        {"ids", "amount", "a double, not an array: a list feature"},
        {"recs.id", "recs.on", "it gives a boolean, and weights are numbers"},
        {"one", "ints", "schema.sparse[0].path: 'one' in the writer schema"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: %s, list: { max_len: 3 },\n"
                 "            weights: { path: %s }, ops: [vocab] }\n",
                 bad[i].ids, bad[i].weights);
        expect_refused(f, y, bad[i].want);
    }
    unlink(f);
    free(f);
}

/* ---- maps read by their keys (list: { from: keys }) ---- */

/* Maps whose keys are a list's ids: a map of doubles weighted by its values,
 * a nullable map of nullable floats (null values take the default), a map
 * of longs read by its keys only (keep: last), a map behind a map's key;
 * null, absent and empty maps; all as the same JSON objects give them. */
static const char *const map_avsc =
    "{\"type\":\"record\",\"name\":\"M\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"aff\",\"type\":{\"type\":\"map\",\"values\":\"double\"}},"
    "{\"name\":\"opt\",\"type\":[\"null\",{\"type\":\"map\",\"values\":[\"null\",\"float\"]}]},"
    "{\"name\":\"cnt\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"nested\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"map\","
    "\"values\":\"int\"}}}]}";

/* The same without opt (an older writer): the map is absent. */
static const char *const map_old_avsc =
    "{\"type\":\"record\",\"name\":\"M\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"aff\",\"type\":{\"type\":\"map\",\"values\":\"double\"}},"
    "{\"name\":\"cnt\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"nested\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"map\","
    "\"values\":\"int\"}}}]}";

static const char *const map_yaml =
    Y_HEAD "      sparse:\n"
           "        - { name: aff, path: aff, list: { max_len: 3, from: keys },\n"
           "            weights: { from: values }, ops: [vocab] }\n"
           "        - { name: opt, path: opt, list: { max_len: 4, from: keys },\n"
           "            weights: { from: values, default: 0.5 }, ops: [vocab] }\n"
           "        - { name: cnt, path: cnt, list: { max_len: 2, from: keys, keep: last },\n"
           "            ops: [vocab] }\n"
           "        - { name: nx, path: nested.x, list: { max_len: 8, from: keys }, ops: [vocab] "
           "}\n"
           "        - { name: ce, path: cnt, list: { max_len: 4, from: entries }, ops: [vocab] }\n";

static void test_maps_weighted(void **state)
{
    (void)state;
    static const wcase cases[] = {
        {"{\"y\":1,\"aff\":{\"sports\":0.7,\"news\":0.25,\"tech\":2,\"art\":1},\"opt\":{\"a\":"
         "null,\"b\":1.5,\"c\":-2},\"cnt\":{\"x\":3,\"y\":4,\"z\":5},\"nested\":{\"w\":{\"q\":1},"
         "\"x\":{\"p\":2,\"o\":3}}}",
         1, 0},
        {"{\"y\":0,\"aff\":{},\"opt\":null,\"cnt\":{},\"nested\":{}}", 1, 0},
        {"{\"y\":0,\"aff\":{\"q\":-3},\"opt\":{},\"cnt\":{\"k\":1},\"nested\":{\"x\":{}}}", 1, 0},
        {"{\"y\":0,\"aff\":{},\"cnt\":{},\"nested\":{}}", 1, 0}, /* no opt: null in Avro */
        {"{\"y\":0,\"aff\":{\"a\":1e300},\"cnt\":{},\"nested\":{}}", 0, PR_DEC_NUMBER_OUT_OF_RANGE},
    };
    fx t;
    weighted_cases(&t, map_yaml, map_avsc, cases, sizeof(cases) / sizeof(cases[0]));
    const pr_fside *sd = t.ba->side;
    assert_int_equal(t.ba->rows, 4);
    static const float aw[] = {0.7f, 0.25f, 2.0f, -3.0f}, ow[] = {0.5f, 1.5f, -2.0f};
    assert_int_equal(sd->n_weights[0], 4);
    assert_memory_equal(sd->weights[0], aw, sizeof(aw));
    assert_int_equal(sd->n_weights[1], 3);
    assert_memory_equal(sd->weights[1], ow, sizeof(ow));
    assert_null(sd->weights[2]);
    static const int32_t al[] = {3, 0, 1, 0}, ol[] = {3, 0, 0, 0}, cl[] = {2, 0, 1, 0},
                         nl[] = {2, 0, 0, 0};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 0), al, sizeof(al));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 1), ol, sizeof(ol));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 2), cl, sizeof(cl));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 3), nl, sizeof(nl));
    /* keep: last kept y and z, in the map's order: the ids of "y" then "z" */
    const uint64_t *cnt = t.ba->sparse_u64 + 2 * (size_t)t.ba->scap;
    assert_int_equal(t.ba->col_rows[2], 3);
    assert_true(cnt[0] == pr_fop_hash64("y", 1) && cnt[1] == pr_fop_hash64("z", 1));
    /* from: entries: each key crossed with its value (a long as JSON's
     * integer; a float value would be a number, which JSON's -2 is not:
     * a value's type counts, as for cross) */
    static const int32_t cel[] = {3, 0, 1, 0};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 4), cel, sizeof(cel));
    pr_fval kx = {.type = PR_FVAL_STR, .str = "x", .len = 1}, v3 = {.type = PR_FVAL_INT, .u = 3},
            ex;
    const pr_fval *xc[2] = {&kx, &v3};
    assert_int_equal(pr_fop_cross(xc, 2, 1, &ex, NULL), 0);
    assert_true(t.ba->sparse_u64[4 * (size_t)t.ba->scap] == ex.u);
    fx_free(&t);

    /* no default: a null value rejects the record; an older writer without
     * the map gives none */
    static const char *const strict =
        Y_HEAD "      sparse:\n"
               "        - { name: opt, path: opt, list: { max_len: 4, from: keys },\n"
               "            weights: { from: values }, ops: [vocab] }\n";
    static const wcase scases[] = {
        {"{\"y\":1,\"aff\":{},\"opt\":{\"a\":1,\"b\":null},\"cnt\":{},\"nested\":{}}", 0,
         PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"aff\":{},\"opt\":{\"a\":1,\"b\":2},\"cnt\":{},\"nested\":{}}", 1, 0},
        {"{\"y\":1,\"aff\":{},\"opt\":null,\"cnt\":{},\"nested\":{}}", 1, 0},
    };
    weighted_cases(&t, strict, map_avsc, scases, sizeof(scases) / sizeof(scases[0]));
    assert_int_equal(t.ba->rows, 2);
    if (!strstr(t.ra.detail, "an id without a weight"))
        fail_msg("detail: %s", t.ra.detail);
    fx_free(&t);
    static const wcase ocases[] = {
        {"{\"y\":1,\"aff\":{\"a\":1},\"cnt\":{\"b\":2},\"nested\":{\"x\":{\"c\":3}}}", 1, 0},
    };
    weighted_cases(&t, map_yaml, map_old_avsc, ocases, 1);
    assert_int_equal(pr_fside_lengths(t.ba->side, 1)[0], 0);
    assert_int_equal(pr_fside_lengths(t.ba->side, 3)[0], 1);
    fx_free(&t);
}

/* An Avro record built by hand, beside its JSON text: maps with repeated
 * keys (which the Avro writer, from a JSON object, never writes). */
typedef struct hand {
    uint8_t *b;
    size_t n, cap;
    char *j;
    size_t jn, jcap;
} hand;

static void h_raw(hand *h, const void *p, size_t n)
{
    if (h->n + n > h->cap) {
        h->cap = (h->n + n) * 2 + 64;
        h->b = realloc(h->b, h->cap);
        assert_non_null(h->b);
    }
    memcpy(h->b + h->n, p, n);
    h->n += n;
}

static void h_long(hand *h, int64_t v)
{
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    uint8_t b[10];
    size_t n = 0;
    do {
        b[n++] = (uint8_t)((u & 0x7f) | (u > 0x7f ? 0x80 : 0));
        u >>= 7;
    } while (u);
    h_raw(h, b, n);
}

static void h_str(hand *h, const char *s)
{
    h_long(h, (int64_t)strlen(s));
    h_raw(h, s, strlen(s));
}

static void h_json(hand *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void h_json(hand *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (h->jn + (size_t)n + 1 > h->jcap) {
        h->jcap = (h->jn + (size_t)n + 1) * 2 + 64;
        h->j = realloc(h->j, h->jcap);
        assert_non_null(h->j);
    }
    va_start(ap, fmt);
    vsnprintf(h->j + h->jn, (size_t)n + 1, fmt, ap);
    va_end(ap);
    h->jn += (size_t)n;
}

/* One map entry: a key and its value: t 'n' null, 'd' a double, 'l' a long,
 * 's' a string. */
typedef struct ment {
    const char *k;
    char t;
    double v;
    const char *s;
} ment;

/* e[0, n) as a map in both forms; `branches`: the union of its values by
 * type letter ("nds": null is branch 0, ...), NULL for none; the first
 * `split` entries in a block that gives its byte size (negative count). */
static void h_map(hand *h, const ment *e, size_t n, const char *branches, size_t split)
{
    hand blk = {0};
    hand *to = split ? &blk : h;
    h_json(h, "{");
    if (!split && n)
        h_long(h, (int64_t)n);
    for (size_t i = 0; i < n; i++) {
        if (i == split && split) {
            h_long(h, -(int64_t)split);
            h_long(h, (int64_t)blk.n);
            h_raw(h, blk.b, blk.n);
            if (n > split)
                h_long(h, (int64_t)(n - split));
            to = h;
        }
        h_str(to, e[i].k);
        if (branches)
            h_long(to, strchr(branches, e[i].t) - branches);
        h_json(h, "%s\"%s\":", i ? "," : "", e[i].k);
        if (e[i].t == 'n') {
            h_json(h, "null");
        } else if (e[i].t == 'd') {
            h_raw(to, &e[i].v, 8);
            h_json(h, "%.17g", e[i].v);
        } else if (e[i].t == 'l') {
            h_long(to, (int64_t)e[i].v);
            h_json(h, "%lld", (long long)e[i].v);
        } else {
            h_str(to, e[i].s);
            h_json(h, "\"%s\"", e[i].s);
        }
    }
    if (split && split >= n) { /* all in the sized block */
        h_long(h, -(int64_t)n);
        h_long(h, (int64_t)blk.n);
        h_raw(h, blk.b, blk.n);
    }
    h_long(h, 0);
    h_json(h, "}");
    free(blk.b);
    free(blk.j);
}

/* A record of rk_avsc: y, m (weighted), k (keys only), nested (a map whose
 * key x, given twice, names a map of keys). Returns what both decoders
 * returned. */
static int hand_both(fx *t, const ment *m, size_t nm, size_t split, const ment *k, size_t nk,
                     const ment *x1, size_t nx1, const ment *x2, size_t nx2)
{
    hand h = {0};
    h_long(&h, 1);
    h_json(&h, "{\"y\":1,\"m\":");
    h_map(&h, m, nm, "nds", split);
    h_json(&h, ",\"k\":");
    h_map(&h, k, nk, NULL, 0);
    h_json(&h, ",\"nested\":{\"x\":");
    h_long(&h, 2); /* nested: x, then x again */
    h_str(&h, "x");
    h_map(&h, x1, nx1, NULL, 0);
    h_json(&h, ",\"x\":");
    h_str(&h, "x");
    h_map(&h, x2, nx2, NULL, 0);
    h_long(&h, 0);
    h_json(&h, "}}");
    uint32_t next = 0;
    t->rj.last = t->ra.last = 0;
    int a = pr_decode_message(PR_MSG_JSON, &t->cj, t->bj, h.j, h.jn, &next, NULL);
    int b = pr_decode_message(PR_MSG_AVRO, &t->ca, t->ba, h.b, h.n, &next, NULL);
    if (a != b || t->rj.last != t->ra.last)
        fail_msg("%s: json %d (%s), avro %d (%s: %s)", h.j, a, pr_decode_reason_name(t->rj.last), b,
                 pr_decode_reason_name(t->ra.last), t->ra.detail);
    free(h.b);
    free(h.j);
    return a;
}

static const char *const rk_avsc =
    "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"double\",\"string\"]}},"
    "{\"name\":\"k\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"nested\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"map\","
    "\"values\":\"long\"}}}]}";

/* A repeated key keeps its first place and takes its last value (null, a
 * number, a string alike), in small maps and past PR__AV_MAP_LINEAR keys
 * (the hash table), across blocks; a map given twice (its key repeated in
 * the map above it) is read from its last occurrence; a key that is not
 * UTF-8 is bad_utf8; 4096 distinct keys
 * with repeats load, 4097 are list_too_long: as JSON text with the same
 * repeated keys. */
static void test_maps_repeated_keys(void **state)
{
    (void)state;
    static const char *const yaml = Y_HEAD
        "      sparse:\n"
        "        - { name: m, path: m, list: { max_len: 64, from: keys },\n"
        "            weights: { from: values, default: 0.5 }, ops: [vocab] }\n"
        "        - { name: k, path: k, list: { max_len: 64, from: keys, keep: last },\n"
        "            ops: [vocab] }\n"
        "        - { name: x, path: nested.x, list: { max_len: 8, from: keys }, ops: [vocab] "
        "}\n";
    fx t;
    fx_init(&t, yaml, rk_avsc, PR_AVRO_FRAMING_PLAIN);
    static const ment m1[] = {{"a", 'd', 1, 0}, {"b", 'd', 2, 0}, {"a", 'n', 0, 0},
                              {"c", 'd', 3, 0}, {"b", 'd', 4, 0}, {"d", 'n', 0, 0},
                              {"d", 'd', 5, 0}},
                      k1[] = {{"p", 'l', 1, 0}, {"q", 'l', 2, 0}, {"p", 'l', 3, 0}},
                      x1[] = {{"u", 'l', 1, 0}, {"v", 'l', 1, 0}}, x2[] = {{"w", 'l', 1, 0}};
    assert_int_equal(hand_both(&t, m1, 7, 2, k1, 3, x1, 2, x2, 1), 1);
    /* 40 keys, every third given again with a new value, k05 again as null */
    ment big[70];
    char names[40][8];
    size_t nb = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(names[i], sizeof(names[i]), "k%02d", i);
        big[nb++] = (ment){names[i], 'd', i, 0};
    }
    for (int i = 0; i < 40; i += 3)
        big[nb++] = (ment){names[i], 'd', 100 + i, 0};
    big[nb++] = (ment){names[5], 'n', 0, 0};
    big[nb++] = (ment){names[7], 's', 0, "seven"};
    big[nb++] = (ment){names[7], 'd', 7.5, 0}; /* a string, then a number: the number */
    assert_int_equal(hand_both(&t, big, nb, 25, big, 0, x1, 2, x2, 0), 1);
    /* a string as the last value: a weight that is a string rejects */
    static const ment ms[] = {{"a", 'd', 2, 0}, {"a", 's', 0, "x"}};
    assert_int_equal(hand_both(&t, ms, 2, 0, k1, 0, x1, 0, x2, 0), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    big[nb - 2] = (ment){names[7], 'd', 7.5, 0};
    big[nb - 1] = (ment){names[7], 's', 0, "seven"};
    assert_int_equal(hand_both(&t, big, nb, 0, big, 0, x1, 0, x2, 0), 0);
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    static const ment bad_key[] = {{"a", 'd', 1, 0}, {"b\xff", 'd', 2, 0}}; /* not UTF-8 */
    assert_int_equal(hand_both(&t, bad_key, 2, 0, k1, 0, x1, 0, x2, 0), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_UTF8);
    blocks_equal(t.bj, t.ba);
    const pr_fside *sd = t.ba->side;
    assert_int_equal(t.ba->rows, 2);
    static const int32_t ml[] = {4, 40}, kl[] = {2, 0}, xl[] = {1, 0};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 0), ml, sizeof(ml));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 1), kl, sizeof(kl));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 2), xl, sizeof(xl));
    float want[44] = {0.5f, 4, 3, 5};
    for (int i = 0; i < 40; i++)
        want[4 + i] = i == 5 ? 0.5f : i == 7 ? 7.5f : i % 3 == 0 ? 100.0f + i : (float)i;
    assert_int_equal(sd->n_weights[0], 44);
    assert_memory_equal(sd->weights[0], want, sizeof(want));
    assert_true(t.ba->sparse_u64[2 * (size_t)t.ba->scap] == pr_fop_hash64("w", 1));
    fx_free(&t);

    /* 4096 distinct keys (the most a list reads), each given twice: they
     * load; one key more is list_too_long */
    fx_init(&t, yaml, rk_avsc, PR_AVRO_FRAMING_PLAIN);
    enum { KEYS = PR_FEAT_MAX_LIST + 1 };
    ment *e = calloc(2 * KEYS, sizeof(*e)), *d = calloc(2 * KEYS, sizeof(*d));
    char(*kn)[8] = calloc(KEYS, sizeof(*kn));
    assert_true(e && d && kn);
    size_t ne = 0;
    for (int i = 0; i < KEYS - 1; i++) {
        snprintf(kn[i], sizeof(kn[i]), "%d", i);
        e[ne++] = (ment){kn[i], 'l', i, 0};
        e[ne++] = (ment){kn[(i * 7) % (i + 1)], 'l', -i, 0};
    }
    for (size_t i = 0; i < ne; i++)
        d[i] = (ment){e[i].k, 'd', e[i].v / 4, 0};
    assert_int_equal(hand_both(&t, d, ne, 1000, e, ne, x1, 0, x2, 0), 1);
    snprintf(kn[KEYS - 1], sizeof(kn[0]), "%d", KEYS - 1);
    e[ne++] = (ment){kn[KEYS - 1], 'l', 1, 0};
    assert_int_equal(hand_both(&t, d, 0, 0, e, ne, x1, 0, x2, 0), 0);
    assert_int_equal(t.ra.last, PR_DEC_LIST_TOO_LONG);
    d[ne - 1] = (ment){e[ne - 1].k, 'd', 1, 0};
    assert_int_equal(hand_both(&t, d, ne, 0, e, 0, x1, 0, x2, 0), 0);
    assert_int_equal(t.ra.last, PR_DEC_LIST_TOO_LONG);
    blocks_equal(t.bj, t.ba);
    assert_int_equal(t.ba->rows, 1);
    assert_int_equal(pr_fside_lengths(t.ba->side, 0)[0], 64);
    assert_int_equal(pr_fside_lengths(t.ba->side, 1)[0], 64);
    free(e);
    free(d);
    free(kn);
    fx_free(&t);
}

/* A map on the way to paths (its key a path segment) whose key comes
 * again: the last occurrence wins, as JSON's repeated object key, for a
 * scalar (a string, then another or null), a record's fields below the key
 * (a scalar and a list), the keys of a map read whole below it, and inside
 * the items of an array of records (each item on its own). */
static const char *const pk_avsc =
    "{\"type\":\"record\",\"name\":\"P\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"a\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"string\"]}},"
    "{\"name\":\"b\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"record\",\"name\":\"B\","
    "\"fields\":[{\"name\":\"s\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"l\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
    "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":\"double\"}}]}}},"
    "{\"name\":\"imps\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\",\"name\":\"I\","
    "\"fields\":[{\"name\":\"id\",\"type\":\"string\"},"
    "{\"name\":\"at\",\"type\":{\"type\":\"map\",\"values\":\"string\"}}]}}}]}";

/* One entry of a map on the way: key, a string (NULL: null), a list of
 * longs and a map of doubles (b's records), or an item's attribute map. */
typedef struct pent {
    const char *k, *s;
    int nl;
    int64_t l[3];
    int nm;
    const char *mk[3];
} pent;

static void h_pmap_a(hand *h, const pent *e, int n)
{
    h_json(h, ",\"a\":{");
    if (n)
        h_long(h, n);
    for (int i = 0; i < n; i++) {
        h_str(h, e[i].k);
        h_long(h, e[i].s ? 1 : 0);
        if (e[i].s)
            h_str(h, e[i].s);
        h_json(h, "%s\"%s\":", i ? "," : "", e[i].k);
        h_json(h, e[i].s ? "\"%s\"" : "null", e[i].s);
    }
    h_long(h, 0);
    h_json(h, "}");
}

static void h_pmap_b(hand *h, const pent *e, int n)
{
    h_json(h, ",\"b\":{");
    if (n)
        h_long(h, n);
    for (int i = 0; i < n; i++) {
        h_str(h, e[i].k);
        h_json(h, "%s\"%s\":{\"s\":", i ? "," : "", e[i].k);
        h_long(h, e[i].s ? 1 : 0);
        if (e[i].s)
            h_str(h, e[i].s);
        h_json(h, e[i].s ? "\"%s\"" : "null", e[i].s);
        h_json(h, ",\"l\":[");
        if (e[i].nl)
            h_long(h, e[i].nl);
        for (int k = 0; k < e[i].nl; k++) {
            h_long(h, e[i].l[k]);
            h_json(h, "%s%lld", k ? "," : "", (long long)e[i].l[k]);
        }
        h_long(h, 0);
        h_json(h, "],\"m\":{");
        if (e[i].nm)
            h_long(h, e[i].nm);
        for (int k = 0; k < e[i].nm; k++) {
            double d = k + 0.5;
            h_str(h, e[i].mk[k]);
            h_raw(h, &d, 8);
            h_json(h, "%s\"%s\":%.17g", k ? "," : "", e[i].mk[k], d);
        }
        h_long(h, 0);
        h_json(h, "}}");
    }
    h_long(h, 0);
    h_json(h, "}");
}

/* imps: items of (id in k, its attribute map: keys mk, each value s). */
static void h_pimps(hand *h, const pent *e, int n)
{
    h_json(h, ",\"imps\":[");
    if (n)
        h_long(h, n);
    for (int i = 0; i < n; i++) {
        h_str(h, e[i].k);
        h_json(h, "%s{\"id\":\"%s\",\"at\":{", i ? "," : "", e[i].k);
        if (e[i].nm)
            h_long(h, e[i].nm);
        for (int k = 0; k < e[i].nm; k++) {
            h_str(h, e[i].mk[k]);
            h_str(h, e[i].s);
            h_json(h, "%s\"%s\":\"%s\"", k ? "," : "", e[i].mk[k], e[i].s);
        }
        h_long(h, 0);
        h_json(h, "}}");
    }
    h_long(h, 0);
    h_json(h, "]");
}

static int hand_path_keys(fx *t, const pent *a, int na, const pent *b, int nb, const pent *im,
                          int ni)
{
    hand h = {0};
    h_long(&h, 1);
    h_json(&h, "{\"y\":1");
    h_pmap_a(&h, a, na);
    h_pmap_b(&h, b, nb);
    h_pimps(&h, im, ni);
    h_json(&h, "}");
    uint32_t next = 0;
    t->rj.last = t->ra.last = 0;
    int rj = pr_decode_message(PR_MSG_JSON, &t->cj, t->bj, h.j, h.jn, &next, NULL);
    int ra = pr_decode_message(PR_MSG_AVRO, &t->ca, t->ba, h.b, h.n, &next, NULL);
    if (rj != ra || t->rj.last != t->ra.last)
        fail_msg("%s: json %d (%s), avro %d (%s: %s)", h.j, rj, pr_decode_reason_name(t->rj.last),
                 ra, pr_decode_reason_name(t->ra.last), t->ra.detail);
    free(h.b);
    free(h.j);
    return rj;
}

static void test_maps_repeated_path_keys(void **state)
{
    (void)state;
    static const char *const yaml =
        Y_HEAD "      sparse:\n"
               "        - { name: ac, path: a.color, ops: [vocab] }\n"
               "        - { name: bs, path: b.x.s, ops: [vocab] }\n"
               "        - { name: bl, path: b.x.l, list: { max_len: 4 }, ops: [vocab] }\n"
               "        - { name: bm, path: b.x.m, list: { max_len: 4, from: keys },\n"
               "            weights: { from: values, default: 9 }, ops: [vocab] }\n"
               "        - { name: ic, path: imps.at.c, list: { max_len: 4 }, ops: [vocab] }\n"
               "        - { name: ii, path: imps.id, list: { max_len: 4 }, ops: [vocab] }\n";
    fx t;
    fx_init(&t, yaml, pk_avsc, PR_AVRO_FRAMING_PLAIN);
    /* a scalar twice, then null last; a record twice (its list shorter, its
     * string null, its map other keys); items whose attribute key repeats */
    static const pent
        a1[] = {{.k = "color", .s = "red"}, {.k = "z", .s = "q"}, {.k = "color", .s = "blue"}},
        a2[] = {{.k = "color", .s = "red"}, {.k = "color", .s = NULL}},
        b1[] = {{.k = "x", .s = "p", .nl = 3, .l = {1, 2, 3}, .nm = 2, .mk = {"m1", "m2"}},
                {.k = "y", .s = "o", .nl = 1, .l = {9}},
                {.k = "x", .s = NULL, .nl = 1, .l = {4}, .nm = 1, .mk = {"m3"}}},
        b2[] = {{.k = "x", .s = "p", .nl = 2, .l = {5, 6}},
                {.k = "x", .s = "r", .nl = 0},
                {.k = "x", .s = "s", .nl = 2, .l = {7, 8}, .nm = 3, .mk = {"m4", "m5", "m4"}}},
        i1[] = {{.k = "i1", .s = "u", .nm = 2, .mk = {"c", "c"}},
                {.k = "i2", .s = "w", .nm = 1, .mk = {"d"}},
                {.k = "i3", .s = "v", .nm = 3, .mk = {"c", "e", "c"}}};
    assert_int_equal(hand_path_keys(&t, a1, 3, b1, 3, i1, 3), 1);
    assert_int_equal(hand_path_keys(&t, a2, 2, b2, 3, i1, 1), 1);
    /* a scalar given twice is no longer two values (it was wrong_type) */
    static const pent a3[] = {
        {.k = "color", .s = "red"}, {.k = "color", .s = "red"}, {.k = "color", .s = "green"}};
    assert_int_equal(hand_path_keys(&t, a3, 3, b2, 0, i1, 0), 1);
    blocks_equal(t.bj, t.ba);
    const pr_fside *sd = t.ba->side;
    assert_int_equal(t.ba->rows, 3);
    static const int32_t bl[] = {1, 2, 0}, bm[] = {1, 2, 0}, ic[] = {2, 1, 0}, ii[] = {3, 1, 0};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 2), bl, sizeof(bl));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 3), bm, sizeof(bm));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 4), ic, sizeof(ic));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 5), ii, sizeof(ii));
    static const float bw[] = {0.5f, 2.5f, 1.5f}; /* m3; m4 (its last value), m5 */
    assert_int_equal(sd->n_weights[3], 3);
    assert_memory_equal(sd->weights[3], bw, sizeof(bw));
    fx_free(&t);
}

/* What a map path refuses, in both formats: a string where the map
 * belongs, a map under an array of records (one list level per path; a
 * null one there is absent), a list as a map's value. */
static void test_maps_rejected(void **state)
{
    (void)state;
    static const char *const avsc =
        "{\"type\":\"record\",\"name\":\"X\",\"fields\":["
        "{\"name\":\"y\",\"type\":\"int\"},"
        "{\"name\":\"v\",\"type\":[\"null\",\"string\",{\"type\":\"map\",\"values\":\"double\"}]},"
        "{\"name\":\"recs\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
        "\"name\":\"I\",\"fields\":[{\"name\":\"m\",\"type\":[\"null\",{\"type\":\"map\","
        "\"values\":\"double\"}]}]}}},"
        "{\"name\":\"mr\",\"type\":{\"type\":\"map\",\"values\":[\"null\",{\"type\":\"array\","
        "\"items\":\"double\"}]}}]}";
    static const char *const yaml =
        Y_HEAD "      sparse:\n"
               "        - { name: v, path: v, list: { max_len: 8, from: keys },\n"
               "            weights: { from: values, default: 1 }, ops: [vocab] }\n"
               "        - { name: r, path: recs.m, list: { max_len: 8, from: keys }, ops: [vocab] "
               "}\n"
               "        - { name: mr, path: mr, list: { max_len: 8, from: keys },\n"
               "            weights: { from: values, default: 2 }, ops: [vocab] }\n";
    static const wcase cases[] = {
        {"{\"y\":1,\"v\":{\"a\":1},\"recs\":[],\"mr\":{\"a\":null}}", 1, 0},
        {"{\"y\":1,\"v\":\"str\",\"recs\":[],\"mr\":{}}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"v\":null,\"recs\":[{\"m\":null},{\"m\":null}],\"mr\":{}}", 1, 0},
        {"{\"y\":1,\"v\":null,\"recs\":[{\"m\":{}}],\"mr\":{}}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"v\":null,\"recs\":[],\"mr\":{\"a\":[1,2]}}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"v\":null,\"recs\":[{\"m\":null},{\"m\":{\"a\":1}}],\"mr\":{}}", 0,
         PR_DEC_WRONG_TYPE},
    };
    fx t;
    weighted_cases(&t, yaml, avsc, cases, sizeof(cases) / sizeof(cases[0]));
    if (!strstr(t.ra.detail, "recs.m: a map inside a list of records (one list level per path)"))
        fail_msg("detail: %s", t.ra.detail);
    assert_int_equal(both(&t, "{\"y\":1,\"v\":\"str\",\"recs\":[],\"mr\":{}}", -1), 0);
    if (!strstr(t.ra.detail, "v: a map expected"))
        fail_msg("detail: %s", t.ra.detail);
    assert_int_equal(both(&t, "{\"y\":1,\"v\":null,\"recs\":[],\"mr\":{\"a\":[1,2]}}", -1), 0);
    if (!strstr(t.ra.detail, "mr: a list or record as a map's value"))
        fail_msg("detail: %s", t.ra.detail);
    assert_int_equal(t.ba->rows, 2);
    static const float w[] = {1.0f, 2.0f}; /* v's a: 1; mr's a: null, the default */
    assert_int_equal(t.ba->side->n_weights[0], 1);
    assert_int_equal(t.ba->side->n_weights[2], 1);
    assert_true(t.ba->side->weights[0][0] == w[0] && t.ba->side->weights[2][0] == w[1]);
    fx_free(&t);
}

/* list: { from: values }: a map's values as the ids (a map of strings, of
 * longs, a nullable map of nullable strings, longs and doubles), beside its
 * keys, keep last, a plain feature in the same table: the same rows as the
 * same JSON objects give; a null value left out in both, a double with a
 * fraction wrong_type in both. */
static const char *const vmap_avsc =
    "{\"type\":\"record\",\"name\":\"V\",\"fields\":["
    "{\"name\":\"y\",\"type\":\"int\"},"
    "{\"name\":\"slots\",\"type\":{\"type\":\"map\",\"values\":\"string\"}},"
    "{\"name\":\"cnt\",\"type\":{\"type\":\"map\",\"values\":\"long\"}},"
    "{\"name\":\"opt\",\"type\":[\"null\",{\"type\":\"map\",\"values\":[\"null\","
    "\"string\",\"long\",\"double\"]}]},"
    "{\"name\":\"ad\",\"type\":[\"null\",\"string\"]}]}";

static const char *const vmap_yaml =
    Y_HEAD "      sparse:\n"
           "        - { name: s, path: slots, list: { max_len: 3, from: values }, ops: [vocab] }\n"
           "        - { name: sl, path: slots, list: { max_len: 2, from: values, keep: last },\n"
           "            ops: [vocab] }\n"
           "        - { name: sk, path: slots, list: { max_len: 3, from: keys }, ops: [vocab] }\n"
           "        - { name: c, path: cnt, list: { max_len: 4, from: values }, ops: [ { hash: 100 "
           "} ] }\n"
           "        - { name: o, path: opt, list: { max_len: 4, from: values }, ops: [vocab] }\n"
           "        - { name: ad, path: ad, ops: [vocab], table: s }\n";

static void test_map_values_same_as_json(void **state)
{
    (void)state;
    static const wcase cases[] = {
        {"{\"y\":1,\"slots\":{\"top\":\"adA\",\"side\":\"adB\",\"foot\":\"adC\","
         "\"more\":\"adD\"},\"cnt\":{\"x\":3,\"y\":-4},\"opt\":{\"a\":\"u\",\"b\":null,"
         "\"c\":5},\"ad\":\"adB\"}",
         1, 0},
        {"{\"y\":0,\"slots\":{},\"cnt\":{},\"opt\":null,\"ad\":null}", 1, 0},
        {"{\"y\":0,\"slots\":{\"a\":\"adE\"},\"cnt\":{\"k\":9223372036854775807},"
         "\"opt\":{\"n\":null},\"ad\":\"adA\"}",
         1, 0},
        {"{\"y\":1,\"slots\":{},\"cnt\":{},\"opt\":{\"d\":2.5}}", 0, PR_DEC_WRONG_TYPE},
        {"{\"y\":1,\"slots\":{\"z\":\"adA\"},\"cnt\":{}}", 1, 0}, /* no opt: null */
    };
    fx t;
    weighted_cases(&t, vmap_yaml, vmap_avsc, cases, sizeof(cases) / sizeof(cases[0]));
    assert_int_equal(t.ba->rows, 4);
    const pr_fside *sd = t.ba->side;
    static const int32_t sl[] = {3, 0, 1, 1}, ll[] = {2, 0, 1, 1}, cl[] = {2, 0, 1, 0},
                         ol[] = {2, 0, 0, 0};
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 0), sl, sizeof(sl));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 1), ll, sizeof(ll));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 3), cl, sizeof(cl));
    assert_memory_equal(pr_fside_lengths((pr_fside *)sd, 4), ol, sizeof(ol));
    fx_free(&t);
}

/* A fixed writer schema and from: keys: a map (or a nullable one, or one
 * behind a map's key) loads, its values int, long, float, double or decimal
 * (nullable too) with weights: { from: values }; a record, an array, a
 * string, a nullable string, a map under an array of records are refused
 * naming schema.sparse[i].path; values that are strings or booleans naming
 * the weights. */
static const char *const mchk_avsc =
    "{\"type\":\"record\",\"name\":\"C\",\"fields\":["
    "{\"name\":\"aff\",\"type\":{\"type\":\"map\",\"values\":\"double\"}},"
    "{\"name\":\"opt\",\"type\":[\"null\",{\"type\":\"map\",\"values\":[\"null\",\"float\"]}]},"
    "{\"name\":\"cnt\",\"type\":{\"type\":\"map\",\"values\":\"int\"}},"
    "{\"name\":\"dec\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"bytes\","
    "\"logicalType\":\"decimal\",\"precision\":6,\"scale\":2}}},"
    "{\"name\":\"names\",\"type\":{\"type\":\"map\",\"values\":\"string\"}},"
    "{\"name\":\"flags\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"boolean\"]}},"
    "{\"name\":\"nested\",\"type\":{\"type\":\"map\",\"values\":{\"type\":\"map\","
    "\"values\":\"long\"}}},"
    "{\"name\":\"user\",\"type\":{\"type\":\"record\",\"name\":\"U\",\"fields\":["
    "{\"name\":\"id\",\"type\":\"string\"}]}},"
    "{\"name\":\"tags\",\"type\":{\"type\":\"array\",\"items\":\"string\"}},"
    "{\"name\":\"one\",\"type\":[\"null\",\"string\"]},"
    "{\"name\":\"recs\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"record\","
    "\"name\":\"I\",\"fields\":[{\"name\":\"m\",\"type\":{\"type\":\"map\","
    "\"values\":\"double\"}}]}}}]}";

static void test_maps_schema_checked(void **state)
{
    (void)state;
    char *f = write_tmp(mchk_avsc), err[2048], y[512];
    static const char *const good[] = {"aff", "opt", "cnt", "dec", "nested.x"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: %s, list: { max_len: 3, from: keys },\n"
                 "            weights: { from: values, default: 1 }, ops: [vocab] }\n"
                 "        - { name: n, path: names, list: { max_len: 3, from: keys }, ops: "
                 "[vocab] }\n",
                 good[i]);
        if (load_avro(f, false, y, err, sizeof(err)))
            fail_msg("map %s refused: %s", good[i], err);
    }
    static const struct {
        const char *path;
        bool weighted;
        const char *want;
    } bad[] = {
        {"user", false, "schema.sparse[0].path: 'user' in the writer schema"},
        {"user", false, "it is a record, not a map: list: { from: keys } reads a map"},
        {"tags", true, "schema.sparse[0].path: 'tags' in the writer schema"},
        {"tags", true, "it is an array, not a map: list: { from: keys } reads a map"},
        {"one", false, "it is a string, not a map: list: { from: keys } reads a map"},
        {"recs.m", false, "a map inside an array of records (one list level per path)"},
        {"user.nope", false, "'user.nope' is not in the writer schema"},
        {"names", true, "schema.sparse[0].weights"},
        {"names", true,
         "the map's values can be a string, and weights (from: values) are numbers (int, long, "
         "float, double)"},
        {"flags", true, "the map's values can be a boolean, and weights"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: %s, list: { max_len: 3, from: keys }%s, ops: [vocab] "
                 "}\n",
                 bad[i].path, bad[i].weighted ? ", weights: { from: values }" : "");
        expect_refused(f, y, bad[i].want);
    }
    /* from: entries: scalar values (strings, booleans, numbers) load; a
     * map of maps is refused, naming the path */
    static const char *const eok[] = {"names", "flags", "cnt", "opt"};
    for (size_t i = 0; i < sizeof(eok) / sizeof(eok[0]); i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: %s, list: { max_len: 3, from: entries }, ops: "
                 "[vocab] }\n",
                 eok[i]);
        if (load_avro(f, false, y, err, sizeof(err)))
            fail_msg("entries of %s refused: %s", eok[i], err);
    }
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: nested, list: { max_len: 3, from: entries }, ops: "
                   "[vocab] }\n",
                   "the map's values can be a map, and from: entries crosses each key with a "
                   "scalar value");
    /* from: values: values that can be ids (strings, booleans, ints) load;
     * a map of maps, or of floats or doubles for vocab, is refused naming
     * the path; the values' type is the ids' (bucketize needs a number: a
     * map of strings is refused, a map of ints loads) */
    static const char *const vok[] = {"names", "flags", "cnt"};
    for (size_t i = 0; i < sizeof(vok) / sizeof(vok[0]); i++) {
        snprintf(y, sizeof(y),
                 "      sparse:\n"
                 "        - { name: a, path: %s, list: { max_len: 3, from: values }, ops: "
                 "[vocab] }\n",
                 vok[i]);
        if (load_avro(f, false, y, err, sizeof(err)))
            fail_msg("values of %s refused: %s", vok[i], err);
    }
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: opt, list: { max_len: 3, from: values }, ops: "
                   "[vocab] }\n",
                   "'opt' in the writer schema");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: aff, list: { max_len: 3, from: values }, ops: "
                   "[vocab] }\n",
                   "it gives a number, and 'vocab' needs an integer or a string");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: nested, list: { max_len: 3, from: values }, ops: "
                   "[vocab] }\n",
                   "schema.sparse[0].path: 'nested' in the writer schema");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: nested, list: { max_len: 3, from: values }, ops: "
                   "[vocab] }\n",
                   "the map's values can be a map, and from: values makes each value an id");
    expect_refused(f,
                   "      sparse:\n"
                   "        - { name: a, path: names, list: { max_len: 3, from: values }, ops: "
                   "[ { bucketize: [1, 10] } ] }\n",
                   "it gives a string, and 'bucketize' needs");
    if (load_avro(f, false,
                  "      sparse:\n"
                  "        - { name: a, path: cnt, list: { max_len: 3, from: values }, ops: "
                  "[ { bucketize: [1, 10] } ] }\n",
                  err, sizeof(err)))
        fail_msg("bucketize on a map of ints refused: %s", err);
    unlink(f);
    free(f);
}

/* Dense vectors as float32 bytes (encoding f32): Avro bytes and fixed read
 * raw give the rows JSON gives for the same bytes in base64; a wrong
 * length is wrong_type in both, an empty value is missing. (The bytes are
 * ASCII so that the JSON form the Avro writer takes carries them as they
 * are; as float32 they are finite.) */
static void test_dense_vector_bytes(void **state)
{
    (void)state;
    static const char *const yaml =
        Y_HEAD "      dense:\n"
               "        - { name: b, path: b, dim: 3, encoding: f32 }\n"
               "        - { name: f, path: f, dim: 2, encoding: f32, default: 1 }\n";
    static const char *const avsc =
        "{\"type\":\"record\",\"name\":\"B\",\"fields\":["
        "{\"name\":\"y\",\"type\":\"int\"},{\"name\":\"b\",\"type\":\"bytes\"},"
        "{\"name\":\"f\",\"type\":[\"null\",{\"type\":\"fixed\",\"name\":\"F8\",\"size\":8}]}]}";
    static const struct {
        const char *json, *avro; /* base64 in JSON text; the raw bytes for the writer */
        int rows;
    } cases[] = {
        {"{\"y\":1,\"b\":\"YWJjZGVmZ2hpamts\",\"f\":\"QUJDREVGR0g=\"}",
         "{\"y\":1,\"b\":\"abcdefghijkl\",\"f\":\"ABCDEFGH\"}", 1},
        {"{\"y\":0,\"b\":\"YWJjZGVmZ2hpamts\",\"f\":null}",
         "{\"y\":0,\"b\":\"abcdefghijkl\",\"f\":null}", 1},
        {"{\"y\":0,\"b\":\"\",\"f\":null}", "{\"y\":0,\"b\":\"\",\"f\":null}", 1},
        {"{\"y\":0,\"b\":\"YWJjZGVmZ2g\",\"f\":null}", "{\"y\":0,\"b\":\"abcdefgh\",\"f\":null}",
         0},
    };
    fx t;
    fx_init(&t, yaml, avsc, PR_AVRO_FRAMING_PLAIN);
    char err[256];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (pr_avro_from_json(t.w, cases[i].avro, strlen(cases[i].avro), -1, &t.buf, &t.len, &t.cap,
                              err, sizeof(err)))
            fail_msg("encode %s: %s", cases[i].avro, err);
        uint32_t next = 0;
        t.rj.last = t.ra.last = 0;
        assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.cj, t.bj, cases[i].json,
                                           strlen(cases[i].json), &next, NULL),
                         cases[i].rows);
        assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL),
                         cases[i].rows);
        assert_int_equal(t.rj.last, t.ra.last);
    }
    assert_int_equal(t.ra.last, PR_DEC_WRONG_TYPE);
    if (!strstr(t.ra.detail, "b (b): a vector of 3 float32 is 12 bytes, got 8"))
        fail_msg("detail: %s", t.ra.detail);
    blocks_equal(t.bj, t.ba);
    float want[3][5];
    memcpy(want[0], "abcdefghijklABCDEFGH", 20);
    memcpy(want[1], "abcdefghijkl", 12);
    want[1][3] = want[1][4] = 1;
    for (int c = 0; c < 5; c++)
        want[2][c] = c < 3 ? 0 : 1;
    assert_memory_equal(t.ba->side->dense, want, sizeof(want));
    fx_free(&t);
    char *good = write_tmp(avsc);
    expect_refused(good, "      dense: [ { name: e, path: y, dim: 1, encoding: f32 } ]\n",
                   "it gives an integer, and a dense vector with encoding f32 needs bytes");
    unlink(good);
    free(good);
    good = write_tmp("{\"type\":\"record\",\"name\":\"G\",\"fields\":[{\"name\":\"g\","
                     "\"type\":{\"type\":\"fixed\",\"name\":\"G8\",\"size\":8}}]}");
    expect_refused(good, "      dense: [ { name: e, path: g, dim: 3, encoding: f32 } ]\n",
                   "a fixed of 8 bytes, and a vector of 3 float32 is 12 bytes");
    char lerr[2048];
    if (load_avro(good, false, "      dense: [ { name: e, path: g, dim: 2, encoding: f32 } ]\n",
                  lerr, sizeof(lerr)))
        fail_msg("refused: %s", lerr);
    unlink(good);
    free(good);
    good = write_tmp(chk_avsc); /* text and enums: UTF-8 symbols, not float bytes */
    expect_refused(good, "      dense: [ { name: e, path: user.id, dim: 1, encoding: f32 } ]\n",
                   "it gives a string, and a dense vector with encoding f32 needs bytes");
    expect_refused(good, "      dense: [ { name: e, path: tier, dim: 1, encoding: f32 } ]\n",
                   "it gives a string, and a dense vector with encoding f32 needs bytes");
    expect_refused(good, "      dense: [ { name: e, path: tags, dim: 1, encoding: f32 } ]\n",
                   "an array: encoding f32 reads one bytes value");
    unlink(good);
    free(good);
}

/* The writer schema checks of a vector: an array of numbers, not a value,
 * not an array of strings; a single-valued dense feature on an array is
 * told about dim. */
static void test_dense_vectors_checked(void **state)
{
    (void)state;
    char *good = write_tmp(vec_avsc), err[2048];
    if (load_avro(good, false, "      dense: [ { name: e, path: emb, dim: 4 } ]\n", err,
                  sizeof(err)))
        fail_msg("refused: %s", err);
    expect_refused(good, "      dense: [ { name: e, path: imps.p, dim: 2 } ]\n",
                   "imps is an array of records: a dense vector reads one array of numbers");
    expect_refused(good, "      dense: [ { name: e, path: y, dim: 4 } ]\n",
                   "int, not an array: a list feature (or a dense vector) needs an array");
    expect_refused(good, "      dense: [ { name: e, path: emb } ]\n",
                   "an array: declare a list feature (list: { max_len: N }), or a dense vector "
                   "(dim: N)");
    unlink(good);
    free(good);
    good = write_tmp(chk_avsc);
    expect_refused(good, "      dense: [ { name: e, path: tags, dim: 2 } ]\n",
                   "it gives a string, and a dense feature needs a number");
    unlink(good);
    free(good);
}

/* A registry-framed record read as plain: bad_avro, and the detail says
 * how to fix it; a record that is just broken gets no such hint. */
static void test_framing_hint(void **state)
{
    (void)state;
    fx t;
    fx_init(&t, types_yaml, types_avsc, PR_AVRO_FRAMING_PLAIN);
    const char *ev = "{\"ts\":1,\"y\":0,\"skipme\":{},\"amount\":null,\"f\":-2.25,\"attrs\":{},"
                     "\"kind\":\"A\",\"blob\":\"0000\",\"raw\":null,\"a\":null,\"ids\":[],"
                     "\"flag\":false,\"again\":\"1234\"}";
    char err[256];
    uint32_t next = 0;
    assert_int_equal(
        pr_avro_from_json(t.w, ev, strlen(ev), 7, &t.buf, &t.len, &t.cap, err, sizeof(err)), 0);
    assert_int_equal(t.buf[0], 0);
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len, &next, NULL), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_AVRO);
    if (!strstr(t.ra.detail, "(the message looks registry-framed: magic byte 0, schema id 7; "
                             "set source.avro.framing: registry)"))
        fail_msg("no hint: %s", t.ra.detail);
    /* the same bytes less one: byte 0 is 0, but no whole record follows */
    t.ra.detail[0] = 0;
    assert_int_equal(pr_decode_message(PR_MSG_AVRO, &t.ca, t.ba, t.buf, t.len - 1, &next, NULL), 0);
    assert_int_equal(t.ra.last, PR_DEC_BAD_AVRO);
    assert_non_null(strstr(t.ra.detail, "avro: "));
    assert_null(strstr(t.ra.detail, "registry-framed"));
    assert_int_equal(t.ba->rows, 0);
    fx_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clickstream_plain),
        cmocka_unit_test(test_clickstream_framed),
        cmocka_unit_test(test_clickstream_filter),
        cmocka_unit_test(test_clickstream_in),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_bad_utf8),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_time_logical_types),
        cmocka_unit_test(test_lists_of_records),
        cmocka_unit_test(test_schema_file_checked),
        cmocka_unit_test(test_framing_hint),
        cmocka_unit_test(test_dense_vectors),
        cmocka_unit_test(test_weighted_lists),
        cmocka_unit_test(test_weighted_records_aligned),
        cmocka_unit_test(test_weighted_schema_checked),
        cmocka_unit_test(test_dense_vectors_checked),
        cmocka_unit_test(test_dense_vector_bytes),
        cmocka_unit_test(test_maps_weighted),
        cmocka_unit_test(test_maps_repeated_keys),
        cmocka_unit_test(test_maps_repeated_path_keys),
        cmocka_unit_test(test_maps_rejected),
        cmocka_unit_test(test_maps_schema_checked),
        cmocka_unit_test(test_map_values_same_as_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
