/*
 * test_pbuser.c — the user's own Protobuf messages (issue 23,
 * ingest/pbuser_*.c): the generated clickstream written as shop.Click gives
 * the same blocks as the same events as JSON (and registry-framed too);
 * every scalar type, packed and unpacked repeated fields, maps, oneof,
 * enums, nested messages, and 2000 random messages written by Python's
 * protobuf against what its decoder reads (pbuser_reference.py); the
 * presence rules (proto3 implicit, optional, proto2); malformed wire bytes and
 * framing rejected with their reason; the config's errors naming the key;
 * weighted lists over repeated messages (aligned paths: a hole per element
 * without an explicit-presence field, an implicit one's zero value) and
 * parallel repeated fields, as JSON gives them; map fields read by their
 * keys (list: { from: keys }, weights: { from: values }) as JSON objects
 * are, and their load-time errors; google.protobuf.Timestamp fields read
 * whole as the RFC 3339 string of the same JSON event (Python's
 * Timestamp.ToJsonString the reference), Durations as seconds, either out of
 * range rejected bad_time.
 *
 * The descriptor set is built from tests/data/pbuser_*.proto by protoc at
 * build time (PR_PBUSER_DESC).
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
#include "schema_insert.h"

typedef struct rej_log {
    int n;
    int last;
    int filtered; /* PR_DEC_FILTERED reports (schema.filter), not rejects */
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
    if (pr_decode_dropped(reason)) { /* schema.filter, downsample */
        l->filtered++;
        return;
    }
    l->n++;
    l->last = reason;
    snprintf(l->detail, sizeof(l->detail), "%s", detail);
}

static void blocks_equal(const pr_block *a, const pr_block *b)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->n_sparse, b->n_sparse);
    const pr_fside *sa = a->side, *sb = b->side;
    uint32_t rows = a->rows;
    assert_memory_equal(sa->labels, sb->labels, (size_t)rows * sa->n_labels * sizeof(float));
    assert_memory_equal(sa->dense, sb->dense, (size_t)rows * sa->n_dense * sizeof(float));
    for (uint16_t f = 0; f < sa->n_feat; f++) {
        assert_memory_equal(sa->lengths + (size_t)f * sa->cap, sb->lengths + (size_t)f * sb->cap,
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
    assert_memory_equal(a->offset, b->offset, rows * sizeof(int64_t));
}

/* examples/clickstream.yaml as it is (a copy). */
static char *clickstream_json_yaml(void)
{
    FILE *f = fopen(PR_SOURCE_DIR "/examples/clickstream.yaml", "rb");
    assert_non_null(f);
    static char text[16384];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    char *out = strdup(text);
    assert_non_null(out);
    return out;
}

/* examples/clickstream.yaml with `format: json` replaced by protobuf (the
 * pbuser_clickstream.proto message); framing as given. */
static char *clickstream_yaml(const char *framing)
{
    char *text = clickstream_json_yaml();
    size_t n = strlen(text);
    const char *at = strstr(text, "      format: json\n");
    assert_non_null(at);
    char *out = malloc(n + 512);
    assert_non_null(out);
    int k = snprintf(out, n + 512,
                     "%.*s      format: protobuf\n      protobuf: { descriptor_set: \"%s\", "
                     "message: shop.Click, framing: %s }\n%s",
                     (int)(at - text), text, PR_PBUSER_DESC, framing,
                     at + strlen("      format: json\n"));
    assert_true(k > 0);
    free(text);
    return out;
}

/* ---------------------------------------------------------------- same as JSON */

/* Labels and a dense feature by `in:` (a string, a repeated string, an
 * int32 that proto3 cannot tell from 0 when absent), and labels through
 * operators, at the lists' starts; alone: the list feature on item.tags
 * dropped, so that `in:` is the only reader of the repeated field (as
 * `piperec infer --labels item.tags=sale` writes it). */
static char *drop_tags(char *yaml)
{
    char *tags = strstr(yaml, "        - { name: tags, path: item.tags,");
    assert_non_null(tags);
    char *eol = strchr(tags, '\n');
    assert_non_null(eol);
    memmove(tags, eol + 1, strlen(eol + 1) + 1);
    return yaml;
}

static char *with_in(char *yaml, bool alone)
{
    if (alone)
        yaml = drop_tags(yaml);
    yaml = schema_insert_at(yaml, "      labels:\n",
                            "        - { name: mobile, path: context.device, in: [ios, android] }\n"
                            "        - { name: on_sale, path: item.tags, in: [sale, limited], "
                            "default: -1 }\n"
                            "        - { name: long_dwell, path: label.dwell_s, default: 0, "
                            "ops: [ { at_least: 5 } ] }\n"
                            "        - { name: log_price, path: item.price, ops: [ { clip: [0, "
                            "500] }, log1p ] }\n");
    return schema_insert_at(yaml, "      dense:\n",
                            "        - { name: page01, path: context.page, in: [0, 1], default: "
                            "0.5 }\n");
}

/* in: 0 none, 1 with_in, 2 with_in alone, 3 the list feature on item.tags
 * dropped (a filter's path the only reader of the repeated field). */
static void same_as_json_in(const char *framing, bool framed, const char *filter, int in)
{
    char err[512];
    pr_config *cj = NULL, *cp = NULL;
    char *yj = schema_insert(clickstream_json_yaml(), filter);
    if (in == 3)
        yj = drop_tags(yj);
    else if (in)
        yj = with_in(yj, in == 2);
    if (pr_config_load_string(yj, strlen(yj), "json.yaml", &cj, err, sizeof(err)))
        fail_msg("%s", err);
    free(yj);
    char *y = schema_insert(clickstream_yaml(framing), filter);
    if (in == 3)
        y = drop_tags(y);
    else if (in)
        y = with_in(y, in == 2);
    if (pr_config_load_string(y, strlen(y), "pb.yaml", &cp, err, sizeof(err)))
        fail_msg("%s", err);
    free(y);
    const pr_feature_schema *fs = &cj->pipelines[0].features;
    pr_json_decoder *dj = pr_json_decoder_new(fs, err, sizeof(err));
    pr_json_decoder *dp = pr_json_decoder_new(&cp->pipelines[0].features, err, sizeof(err));
    assert_non_null(dj);
    assert_non_null(dp);
    pr_pbuser_desc *desc;
    pr_pbuser_reader *rd;
    if (pr_pbuser_attach(dp, &cp->pipelines[0].source.protobuf, &desc, &rd, err, sizeof(err)))
        fail_msg("%s", err);
    rej_log rl = {0};
    pr_decode_ctx xj = {.json = dj, .on_reject = on_rej, .opaque = &rl};
    pr_decode_ctx xp = xj;
    xp.json = dp;
    pr_block *bj = pr_feature_block_new(fs, 256, true);
    pr_block *bp = pr_feature_block_new(fs, 256, true);
    enum { N = 3000 };
    char ev[PR_GEN_JSON_LINE_MAX];
    uint8_t *pb = NULL;
    size_t pb_cap = 0;
    uint32_t total = 0;
    for (uint64_t row = 0; row < N; row++) {
        size_t len = pr_gen_json_event(11, row, ev, sizeof(ev));
        int pl = pr_pbuser_encode_json(desc, ev, len, framed, 42, &pb, &pb_cap, err, sizeof(err));
        if (pl < 0)
            fail_msg("encode row %d: %s", (int)row, err);
        assert_true((size_t)pl < len); /* protobuf is smaller than the JSON text */
        xj.offset = xp.offset = (int64_t)row;
        uint32_t next = 0;
        int a = pr_decode_message(PR_MSG_JSON, &xj, bj, ev, len, &next, NULL);
        int b = pr_decode_message(PR_MSG_PROTOBUF, &xp, bp, pb, (size_t)pl, &next, NULL);
        if (rl.n)
            fail_msg("row %d rejected: %s", (int)row, rl.detail);
        assert_int_equal(a, b);
        if (a == 0) { /* filtered: both said so */
            assert_int_equal(rl.filtered % 2, 0);
            continue;
        }
        if (a == PR_EFULL) {
            blocks_equal(bj, bp);
            total += bj->rows;
            pr_block_reset(bj);
            pr_block_reset(bp);
            row--;
            continue;
        }
        assert_int_equal(a, 1);
    }
    blocks_equal(bj, bp);
    total += bj->rows;
    assert_int_equal(total + (uint32_t)rl.filtered / 2, N);
    if (filter) /* each condition drops some, not all */
        assert_in_range(rl.filtered / 2, N / 4, N - N / 20);
    else
        assert_int_equal(rl.filtered, 0);
    free(pb);
    pr_block_free(bj);
    pr_block_free(bp);
    pr_json_decoder_free(dj);
    pr_json_decoder_free(dp);
    pr_pbuser_reader_free(rd);
    pr_pbuser_desc_free(desc);
    pr_config_free(cj);
    pr_config_free(cp);
}

static void same_as_json(const char *framing, bool framed, const char *filter)
{
    same_as_json_in(framing, framed, filter, 0);
}

static void test_in_same_as_json(void **state)
{
    (void)state;
    same_as_json_in("none", false, NULL, 1);
}

/* `in:` alone on a repeated field (no list feature reads it) reads its
 * elements, as JSON's list: the reader once refused it ("the field is
 * repeated"). */
static void test_in_repeated_alone(void **state)
{
    (void)state;
    same_as_json_in("none", false, NULL, 2);
}

static void test_same_as_json(void **state)
{
    (void)state;
    same_as_json("none", false, NULL);
}

/* The same records pass schema.filter as JSON and as Protobuf: strings, an
 * int32 (proto3: 0 is not on the wire), a repeated field, an optional one. */
static void test_filter_same_as_json(void **state)
{
    (void)state;
    same_as_json("none", false,
                 "      filter:\n"
                 "        - { path: context.device, in: [ios, android, web] }\n"
                 "        - { path: item.tags, not_in: [sale, new] }\n"
                 "        - { path: user.age_days, present: true }\n"
                 "        - { path: context.page, not_in: [3] }\n");
}

/* A filter's path the only reader of a repeated field (no list feature on
 * item.tags): read by its elements, as in JSON; the reader once refused it
 * ("the field is repeated"). */
static void test_filter_repeated_alone(void **state)
{
    (void)state;
    same_as_json_in("none", false,
                    "      filter:\n"
                    "        - { path: item.tags, in: [new, eco, limited] }\n",
                    3);
}

static void test_same_as_json_framed(void **state)
{
    (void)state;
    same_as_json("auto", true, NULL);
    same_as_json("registry", true, NULL);
}

/* ---------------------------------------------------------------- the reader alone */

typedef struct rfx {
    pr_pbuser_desc *d;
    pr_pbuser_reader *r;
    pr_json_extractor *x;
    pr_json_block *jb;
    uint8_t *pb;
    size_t pb_cap;
    pr_json_reject rej;
} rfx;

static void rfx_init(rfx *t, const char *message, const pr_json_path *paths, size_t n,
                     pr_pb_framing framing)
{
    char err[512];
    memset(t, 0, sizeof(*t));
    t->d = pr_pbuser_desc_load(PR_PBUSER_DESC, message, err, sizeof(err));
    if (!t->d)
        fail_msg("%s", err);
    t->r = pr_pbuser_reader_new(t->d, framing, paths, n, err, sizeof(err));
    if (!t->r)
        fail_msg("%s", err);
    t->x = pr_json_extractor_new(paths, n, 0, err, sizeof(err));
    assert_non_null(t->x);
    t->jb = pr_json_block_new(t->x, 1);
}

static void rfx_free(rfx *t)
{
    free(t->pb);
    pr_json_block_free(t->jb);
    pr_json_extractor_free(t->x);
    pr_pbuser_reader_free(t->r);
    pr_pbuser_desc_free(t->d);
}

static int read_bytes(rfx *t, const void *buf, size_t len)
{
    pr_json_block_reset(t->jb);
    return pr_pbuser_read(t->r, t->jb, buf, len, &t->rej);
}

static int read_json(rfx *t, const char *json)
{
    char err[256];
    int n = pr_pbuser_encode_json(t->d, json, strlen(json), false, 0, &t->pb, &t->pb_cap, err,
                                  sizeof(err));
    if (n < 0)
        fail_msg("encode %s: %s", json, err);
    return read_bytes(t, t->pb, (size_t)n);
}

static const pr_json_any *val(rfx *t, uint32_t col, uint32_t k)
{
    assert_int_equal(t->jb->cols[col].present[0], PR_JSON_PRESENT);
    assert_true(k < t->jb->cols[col].count[0]);
    return &t->jb->cols[col].any[k];
}

static void want_i(rfx *t, uint32_t col, int64_t v)
{
    const pr_json_any *a = val(t, col, 0);
    assert_int_equal(a->type, PR_JSON_INT64);
    assert_int_equal(a->i, v);
}

static void want_s(rfx *t, uint32_t col, uint32_t k, const char *s)
{
    const pr_json_any *a = val(t, col, k);
    assert_int_equal(a->type, PR_JSON_STRING);
    assert_int_equal(a->s.len, strlen(s));
    assert_memory_equal(t->jb->arena + a->s.off, s, strlen(s));
}

static void want_absent(rfx *t, uint32_t col)
{
    assert_int_equal(t->jb->cols[col].present[0], PR_JSON_ABSENT);
}

#define SC(p)                                                                                      \
    {                                                                                              \
        .path = p, .type = PR_JSON_ANY, .shape = PR_JSON_SCALAR                                    \
    }
#define LI(p)                                                                                      \
    {                                                                                              \
        .path = p, .type = PR_JSON_ANY, .shape = PR_JSON_LIST, .max_list = 4                       \
    }

static const pr_json_path all_paths[] = {
    SC("i32"),       SC("i64"),    SC("u32"),      SC("u64"),    SC("s32"),      SC("s64"),
    SC("f32"),       SC("f64"),    SC("sf32"),     SC("sf64"),   SC("fl"),       SC("db"),
    SC("b"),         SC("str"),    SC("by"),       SC("color"),  SC("opt"),      SC("inner.n"),
    SC("inner.c"),   LI("packed"), LI("unpacked"), LI("names"),  SC("attrs.k1"), SC("objs.a.s"),
    SC("scores.-3"), SC("one_s"),  SC("one_n"),    LI("colors"), SC("inner.s"),  SC("ts"),
    SC("dwell_d"),   LI("times"),  SC("tmap.a"),
};
enum {
    I32,
    I64,
    U32,
    U64,
    S32,
    S64,
    F32,
    F64,
    SF32,
    SF64,
    FL,
    DB,
    B,
    STR,
    BY,
    COLOR,
    OPT,
    INNER_N,
    INNER_C,
    PACKED,
    UNPACKED,
    NAMES,
    ATTR_K1,
    OBJ_A_S,
    SCORE_M3,
    ONE_S,
    ONE_N,
    COLORS,
    INNER_S,
    TS,
    DWELL_D,
    TIMES,
    TMAP_A,
    N_ALL
};

static void test_scalar_types(void **state)
{
    (void)state;
    rfx t;
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_NONE);
    assert_int_equal(
        read_json(&t, "{\"i32\": -5, \"i64\": -9000000000, \"u32\": 4000000000, "
                      "\"u64\": 18446744073709551615, \"s32\": -17, \"s64\": -9000000001, "
                      "\"f32\": 4294967295, \"f64\": 12345678901, \"sf32\": -2, \"sf64\": -3, "
                      "\"fl\": 1.5, \"db\": -2.25, \"b\": true, \"str\": \"h\\u00e9\", "
                      "\"by\": \"raw\", \"color\": \"GREEN\", \"opt\": 0}"),
        0);
    want_i(&t, I32, -5);
    want_i(&t, I64, -9000000000LL);
    want_i(&t, U32, 4000000000LL);
    want_i(&t, U64, -1); /* above 2^63 - 1: its bits */
    want_i(&t, S32, -17);
    want_i(&t, S64, -9000000001LL);
    want_i(&t, F32, 4294967295LL);
    want_i(&t, F64, 12345678901LL);
    want_i(&t, SF32, -2);
    want_i(&t, SF64, -3);
    assert_int_equal(val(&t, FL, 0)->type, PR_JSON_DOUBLE);
    assert_true(val(&t, FL, 0)->d == 1.5);
    assert_true(val(&t, DB, 0)->d == -2.25);
    assert_int_equal(val(&t, B, 0)->type, PR_JSON_BOOL);
    assert_int_equal(val(&t, B, 0)->i, 1);
    want_s(&t, STR, 0, "h\xc3\xa9");
    want_s(&t, BY, 0, "raw");
    want_s(&t, COLOR, 0, "GREEN");
    want_i(&t, OPT, 0);       /* optional, set to 0: present */
    want_absent(&t, INNER_N); /* under an absent message: missing */
    want_absent(&t, PACKED);  /* repeated, none: absent */
    want_absent(&t, ATTR_K1);
    want_absent(&t, ONE_S);
    /* an enum number the descriptor does not name: the number */
    static const uint8_t unk[] = {0x80, 0x01, 0x09}; /* field 16 varint 9 */
    assert_int_equal(read_bytes(&t, unk, sizeof(unk)), 0);
    want_i(&t, COLOR, 9);
    /* Protobuf's JSON mapping: 64-bit integers as strings, any number may be one. */
    assert_int_equal(read_json(&t, "{\"i64\": \"-9000000000\", \"u64\": \"18446744073709551615\", "
                                   "\"i32\": \"7\", \"db\": \"-2.25\", \"fl\": \"NaN\"}"),
                     0);
    want_i(&t, I64, -9000000000LL);
    want_i(&t, U64, -1);
    want_i(&t, I32, 7);
    assert_true(val(&t, DB, 0)->d == -2.25);
    assert_true(val(&t, FL, 0)->d != val(&t, FL, 0)->d);
    char err[256];
    assert_true(pr_pbuser_encode_json(t.d, "{\"i64\": \"12x\"}", 12, false, 0, &t.pb, &t.pb_cap,
                                      err, sizeof(err)) < 0);
    rfx_free(&t);
}

static void test_presence(void **state)
{
    (void)state;
    rfx t;
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_NONE);
    /* proto3 implicit presence: the empty message gives every default */
    assert_int_equal(read_bytes(&t, "", 0), 0);
    want_i(&t, I32, 0);
    want_i(&t, U64, 0);
    assert_true(val(&t, DB, 0)->d == 0.0);
    assert_int_equal(val(&t, B, 0)->i, 0);
    want_s(&t, STR, 0, "");
    want_s(&t, COLOR, 0, "COLOR_NONE");
    want_absent(&t, OPT);     /* optional: missing */
    want_absent(&t, INNER_N); /* a message: missing, and what is under it */
    want_absent(&t, ONE_N);   /* a oneof member: explicit */
    /* the message present (empty): its implicit fields are their defaults */
    assert_int_equal(read_json(&t, "{\"inner\": {}}"), 0);
    want_i(&t, INNER_N, 0);
    want_s(&t, INNER_C, 0, "COLOR_NONE");
    want_s(&t, INNER_S, 0, "");
    /* a singular field twice: the last; a message twice: merged */
    static const uint8_t twice[] = {0x10, 0x01, 0x10, 0x02, 0x92, 0x01, 0x02, 0x08,
                                    0x05, 0x92, 0x01, 0x03, 0x12, 0x01, 'x'};
    assert_int_equal(read_bytes(&t, twice, sizeof(twice)), 0);
    want_i(&t, I64, 2);
    want_i(&t, INNER_N, 5);
    want_s(&t, INNER_S, 0, "x");
    /* oneof: the last member wins, the other is cleared */
    static const uint8_t oneof[] = {0xd2, 0x01, 0x01, 'a', 0xd8, 0x01, 0x07};
    assert_int_equal(read_bytes(&t, oneof, sizeof(oneof)), 0);
    want_i(&t, ONE_N, 7);
    want_absent(&t, ONE_S);
    rfx_free(&t);

    /* proto2: absent is missing, whatever [default] says */
    static const pr_json_path p2[] = {SC("n"), SC("s"), SC("id")};
    rfx_init(&t, "t2.Old", p2, 3, PR_PB_FRAMING_NONE);
    assert_int_equal(read_json(&t, "{\"id\": 3}"), 0);
    want_absent(&t, 0);
    want_absent(&t, 1);
    want_i(&t, 2, 3);
    rfx_free(&t);
}

static void test_repeated_maps(void **state)
{
    (void)state;
    rfx t;
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_NONE);
    /* packed (the encoder packs) and unpacked (field 20 declared so) */
    assert_int_equal(read_json(&t, "{\"packed\": [1, -2, 300], \"unpacked\": [7, 8], "
                                   "\"names\": [\"a\", \"b\"], \"colors\": [\"RED\", 2]}"),
                     0);
    assert_int_equal(t.jb->cols[PACKED].count[0], 3);
    assert_int_equal(val(&t, PACKED, 1)->i, -2);
    assert_int_equal(val(&t, PACKED, 2)->i, 300);
    assert_int_equal(t.jb->cols[UNPACKED].count[0], 2);
    assert_int_equal(val(&t, UNPACKED, 1)->i, 8);
    want_s(&t, NAMES, 1, "b");
    want_s(&t, COLORS, 0, "RED");
    want_s(&t, COLORS, 1, "GREEN");
    /* a packed field written unpacked and an unpacked one packed: both read,
     * and runs append: [1] packed + 2 unpacked + [3] packed */
    static const uint8_t mixed[] = {0x9a, 0x01, 0x01, 0x01, 0x98, 0x01, 0x02, 0x9a,
                                    0x01, 0x01, 0x03, 0xa2, 0x01, 0x02, 0x04, 0x05};
    assert_int_equal(read_bytes(&t, mixed, sizeof(mixed)), 0);
    assert_int_equal(t.jb->cols[PACKED].count[0], 3);
    assert_int_equal(val(&t, PACKED, 2)->i, 3);
    assert_int_equal(t.jb->cols[UNPACKED].count[0], 2);
    assert_int_equal(val(&t, UNPACKED, 1)->i, 5);
    /* more than max_list (4): list_too_long */
    assert_int_equal(read_json(&t, "{\"packed\": [1, 2, 3, 4, 5]}"), PR_DEC_LIST_TOO_LONG);
    /* maps: a key segment; a message value; integer keys in decimal */
    assert_int_equal(read_json(&t, "{\"attrs\": {\"k0\": \"no\", \"k1\": \"yes\"}, "
                                   "\"objs\": {\"a\": {\"s\": \"deep\"}, \"b\": {\"s\": \"x\"}}, "
                                   "\"scores\": {\"-3\": 0.5, \"4\": 1}}"),
                     0);
    want_s(&t, ATTR_K1, 0, "yes");
    want_s(&t, OBJ_A_S, 0, "deep");
    assert_true(val(&t, SCORE_M3, 0)->d == 0.5);
    /* a key there without a value: the value's default */
    static const uint8_t nov[] = {0xba, 0x01, 0x04, 0x0a, 0x02, 'k', '1'};
    assert_int_equal(read_bytes(&t, nov, sizeof(nov)), 0);
    want_s(&t, ATTR_K1, 0, "");
    /* the key again without a value after one with: the later entry wins */
    static const uint8_t again[] = {0xba, 0x01, 0x07, 0x0a, 0x02, 'k',  '1', 0x12, 0x01,
                                    'v',  0xba, 0x01, 0x04, 0x0a, 0x02, 'k', '1'};
    assert_int_equal(read_bytes(&t, again, sizeof(again)), 0);
    want_s(&t, ATTR_K1, 0, "");
    /* a repeated message is skipped when not on a path */
    assert_int_equal(read_json(&t, "{\"items\": [{\"n\": 1}, {\"s\": \"z\"}], \"i32\": 4}"), 0);
    want_i(&t, I32, 4);
    rfx_free(&t);
}

/* One expected token ("i:-5", "d:0x1.8p+0", "b:1", "s:6869") against value k of col. */
static void want_token(rfx *t, uint32_t col, uint32_t k, const char *tok, int msg)
{
    const pr_json_any *a = val(t, col, k);
    char kind = tok[0];
    const char *v = tok + 2;
    if (kind == 'i') {
        if (a->type != PR_JSON_INT64 || a->i != strtoll(v, NULL, 10))
            fail_msg("message %d %s[%u]: want %s, got type %d %lld", msg, all_paths[col].path, k,
                     tok, a->type, (long long)a->i);
    } else if (kind == 'd') {
        double d = strtod(v, NULL);
        if (a->type != PR_JSON_DOUBLE || memcmp(&d, &a->d, sizeof(d)))
            fail_msg("message %d %s[%u]: want %s, got %a", msg, all_paths[col].path, k, tok, a->d);
    } else if (kind == 'b') {
        if (a->type != PR_JSON_BOOL || a->i != atoi(v))
            fail_msg("message %d %s[%u]: want %s", msg, all_paths[col].path, k, tok);
    } else {
        char hex[1024] = "";
        for (uint32_t i = 0; i < a->s.len && 2 * i + 2 < sizeof(hex); i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)t->jb->arena[a->s.off + i]);
        if (a->type != PR_JSON_STRING || strcmp(hex, v))
            fail_msg("message %d %s[%u]: want %s, got s:%s", msg, all_paths[col].path, k, tok, hex);
    }
}

/* Random t3.All messages written by Python's protobuf (pbuser_reference.py):
 * every path's values are what the official decoder says, under the rules. */
static void test_python_reference(void **state)
{
    (void)state;
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "mkdir -p " PR_BINARY_DIR "/test-tmp && /usr/bin/python3 " PR_SOURCE_DIR
             "/tests/ingest/pbuser_reference.py %s 2000 7 " PR_BINARY_DIR
             "/test-tmp/pbuser_ref.pbd " PR_BINARY_DIR "/test-tmp/pbuser_ref.exp",
             PR_PBUSER_DESC);
    assert_int_equal(system(cmd), 0);
    FILE *fm = fopen(PR_BINARY_DIR "/test-tmp/pbuser_ref.pbd", "rb");
    FILE *fe = fopen(PR_BINARY_DIR "/test-tmp/pbuser_ref.exp", "r");
    assert_non_null(fm);
    assert_non_null(fe);
    rfx t;
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_NONE);
    static uint8_t msg[65536];
    static char line[1 << 16];
    int n = 0;
    for (int c; (c = fgetc(fm)) != EOF; n++) {
        size_t len = (size_t)(c & 0x7f); /* the varint length */
        for (int shift = 7; c & 0x80; shift += 7) {
            c = fgetc(fm);
            assert_true(c != EOF);
            len |= (size_t)(c & 0x7f) << shift;
        }
        assert_true(len < sizeof(msg) && fread(msg, 1, len, fm) == len);
        assert_non_null(fgets(line, sizeof(line), fe));
        line[strcspn(line, "\n")] = '\0';
        if (read_bytes(&t, msg, len) != 0)
            fail_msg("message %d rejected: %s", n, t.rej.detail);
        char *save = NULL, *field = strtok_r(line, "\t", &save);
        for (uint32_t col = 0; col < N_ALL; col++, field = strtok_r(NULL, "\t", &save)) {
            assert_non_null(field);
            if (!strcmp(field, "A")) {
                if (t.jb->cols[col].present[0] != PR_JSON_ABSENT)
                    fail_msg("message %d %s: want absent", n, all_paths[col].path);
                continue;
            }
            uint32_t k = 0;
            char *s2 = NULL;
            for (char *tok = strtok_r(field, " ", &s2); tok; tok = strtok_r(NULL, " ", &s2), k++)
                want_token(&t, col, k, tok, n);
            if (k != t.jb->cols[col].count[0])
                fail_msg("message %d %s: %u values, want %u", n, all_paths[col].path,
                         t.jb->cols[col].count[0], k);
        }
    }
    assert_int_equal(n, 2000);
    fclose(fm);
    fclose(fe);
    rfx_free(&t);
}

static void want_bad(rfx *t, const void *b, size_t n, int reason, const char *detail)
{
    assert_int_equal(read_bytes(t, b, n), reason);
    if (!strstr(t->rej.detail, detail))
        fail_msg("detail '%s' lacks '%s'", t->rej.detail, detail);
    assert_int_equal(t->jb->rows, 0);
}

static void test_malformed(void **state)
{
    (void)state;
    rfx t;
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_AUTO);
    want_bad(&t, "\x08", 1, PR_DEC_BAD_PROTOBUF, "truncated varint");
    want_bad(&t, "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, PR_DEC_BAD_PROTOBUF,
             "truncated varint");
    want_bad(&t,
             "\x72\x05"
             "ab",
             4, PR_DEC_BAD_PROTOBUF, "past the end");
    want_bad(&t, "\x0d\x01\x02\x03\x04", 5, PR_DEC_BAD_PROTOBUF, "field 'i32' (1): wire type 5");
    want_bad(&t, "\x0f\x01", 2, PR_DEC_BAD_PROTOBUF, "wire type 7");
    want_bad(&t, "\x00\x01", 2, PR_DEC_BAD_FRAMING, "no registry framing");
    want_bad(&t, "\x92\x01\x01\x08", 4, PR_DEC_BAD_PROTOBUF, "truncated varint at byte 4");
    want_bad(&t, "\xfb\x07\x08\x01", 4, PR_DEC_BAD_PROTOBUF, "without its end"); /* group 127 */
    want_bad(&t, "\x72\x02\xc3\x28", 4, PR_DEC_BAD_UTF8, "invalid UTF-8");
    want_bad(&t, "\x09", 1, PR_DEC_BAD_PROTOBUF, "field 'i32' (1): wire type 1");
    want_bad(&t, "\x01", 1, PR_DEC_BAD_PROTOBUF, "field number 0");
    /* an unknown group, properly closed, is skipped */
    assert_int_equal(read_bytes(&t, "\xfb\x07\x08\x01\xfc\x07\x08\x02", 8), 0);
    want_i(&t, I32, 2);
    /* deep nesting of the configured message path: bounded */
    uint8_t deep[400];
    size_t dn = 0;
    for (int i = 0; i < 120; i++) { /* unknown groups, nested */
        deep[dn++] = 0xfb;
        deep[dn++] = 0x07;
    }
    want_bad(&t, deep, dn, PR_DEC_BAD_PROTOBUF, "nesting deeper than 100");
    /* framing: [0] names t3.All? No: t3.All is the file's second message */
    want_bad(&t, "\x00\x00\x00\x00\x2a\x00", 6, PR_DEC_BAD_FRAMING, "another message");
    want_bad(&t, "\x00\x00\x00", 3, PR_DEC_BAD_FRAMING, "no registry framing");
    /* [1] = t3.All (Inner is first in pbuser_types.proto) */
    assert_int_equal(read_bytes(&t, "\x00\x00\x00\x00\x2a\x02\x02\x08\x05", 9), 0);
    want_i(&t, I32, 5);
    rfx_free(&t);
    /* framing none: a 0 first byte is a malformed message */
    rfx_init(&t, "t3.All", all_paths, N_ALL, PR_PB_FRAMING_NONE);
    want_bad(&t, "\x00\x00\x00\x00\x2a\x00", 6, PR_DEC_BAD_PROTOBUF, "field number 0");
    rfx_free(&t);
}

/* A malformed message through the decoder: rejected with its reason, the
 * block untouched. */
static void test_reject_through_decoder(void **state)
{
    (void)state;
    char err[512];
    pr_config *cp = NULL;
    char *y = clickstream_yaml("auto");
    if (pr_config_load_string(y, strlen(y), "pb.yaml", &cp, err, sizeof(err)))
        fail_msg("%s", err);
    free(y);
    const pr_feature_schema *fs = &cp->pipelines[0].features;
    pr_json_decoder *dp = pr_json_decoder_new(fs, err, sizeof(err));
    /* the drivers' call: the decoder owns the reader */
    if (pr_json_decoder_for_source(dp, &cp->pipelines[0].source, err, sizeof(err)))
        fail_msg("%s", err);
    rej_log rl = {0};
    pr_decode_ctx x = {.json = dp, .on_reject = on_rej, .opaque = &rl};
    pr_block *b = pr_feature_block_new(fs, 16, true);
    uint32_t next = 0;
    assert_int_equal(pr_decode_message(PR_MSG_PROTOBUF, &x, b, "\x1a\x09\x0a", 3, &next, NULL), 0);
    assert_int_equal(rl.n, 1);
    assert_int_equal(rl.last, PR_DEC_BAD_PROTOBUF);
    assert_string_equal(pr_decode_reason_name(rl.last), "bad_protobuf");
    assert_non_null(strstr(rl.detail, "past the end"));
    /* an empty message: proto3 defaults, the feature defaults for the rest */
    assert_int_equal(pr_decode_message(PR_MSG_PROTOBUF, &x, b, "", 0, &next, NULL), 1);
    assert_int_equal(b->rows, 1);
    pr_block_free(b);
    pr_json_decoder_free(dp);
    pr_config_free(cp);
}

/* ---------------------------------------------------------------- lists of messages */

/* A list path through a repeated message maps over its elements: each
 * element read as a message of its own (last value wins inside it, implicit
 * presence gives the default, explicit presence adds nothing when absent). */
static void test_lists_of_messages(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {LI("items.n"), LI("items.s"), LI("items.c"),
                                         LI("items.opt"), SC("i32")};
    rfx t;
    rfx_init(&t, "t3.All", paths, 5, PR_PB_FRAMING_NONE);
    assert_int_equal(read_json(&t, "{\"items\": [{\"n\": 1, \"s\": \"a\", \"opt\": 0}, "
                                   "{\"s\": \"b\", \"c\": \"RED\"}, {\"n\": 3, \"opt\": 9}], "
                                   "\"i32\": 4}"),
                     0);
    assert_int_equal(t.jb->cols[0].count[0], 3);
    assert_int_equal(val(&t, 0, 0)->i, 1);
    assert_int_equal(val(&t, 0, 1)->i, 0); /* implicit presence: the default */
    assert_int_equal(val(&t, 0, 2)->i, 3);
    want_s(&t, 1, 0, "a");
    want_s(&t, 1, 1, "b");
    want_s(&t, 1, 2, "");
    want_s(&t, 2, 0, "COLOR_NONE");
    want_s(&t, 2, 1, "RED");
    assert_int_equal(t.jb->cols[3].count[0], 2); /* explicit presence: absent adds nothing */
    assert_int_equal(val(&t, 3, 0)->i, 0);
    assert_int_equal(val(&t, 3, 1)->i, 9);
    want_i(&t, 4, 4);
    /* a field twice inside one element: the last wins, in that element only;
     * elements 22 {n:1} {n:2 n:5} */
    static const uint8_t twice[] = {0xb2, 0x01, 0x02, 0x08, 0x01, 0xb2,
                                    0x01, 0x04, 0x08, 0x02, 0x08, 0x05};
    assert_int_equal(read_bytes(&t, twice, sizeof(twice)), 0);
    assert_int_equal(t.jb->cols[0].count[0], 2);
    assert_int_equal(val(&t, 0, 0)->i, 1);
    assert_int_equal(val(&t, 0, 1)->i, 5);
    /* max_list (4) counts the elements */
    assert_int_equal(read_json(&t, "{\"items\": [{\"n\": 1}, {\"n\": 2}, {\"n\": 3}, {\"n\": 4}, "
                                   "{\"n\": 5}]}"),
                     PR_DEC_LIST_TOO_LONG);
    /* no elements: length 0 */
    assert_int_equal(read_json(&t, "{\"i32\": 1}"), 0);
    assert_int_equal(t.jb->cols[0].count[0], 0);
    rfx_free(&t);
}

/* One schema over t3.All, two decoders (JSON text; Protobuf through its
 * reader) and a block each: the same events both ways. */
typedef struct pbfx {
    pr_config *cfg;
    pr_json_decoder *dj, *dp;
    pr_pbuser_desc *desc;
    pr_pbuser_reader *rd;
    rej_log rj, rp;
    pr_decode_ctx xj, xp;
    pr_block *bj, *bp;
    uint8_t *pb;
    size_t pb_cap;
} pbfx;

static void pbfx_init(pbfx *t, const char *schema)
{
    char y[2048], err[512];
    memset(t, 0, sizeof(*t));
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      labels: [ { name: y, path: i32 } ]\n%s",
             PR_PBUSER_DESC, schema);
    if (pr_config_load_string(y, strlen(y), "pb.yaml", &t->cfg, err, sizeof(err)))
        fail_msg("%s", err);
    const pr_feature_schema *fs = &t->cfg->pipelines[0].features;
    t->dj = pr_json_decoder_new(fs, err, sizeof(err));
    t->dp = pr_json_decoder_new(fs, err, sizeof(err));
    assert_non_null(t->dj);
    assert_non_null(t->dp);
    if (pr_pbuser_attach(t->dp, &t->cfg->pipelines[0].source.protobuf, &t->desc, &t->rd, err,
                         sizeof(err)))
        fail_msg("%s", err);
    t->xj = (pr_decode_ctx){.json = t->dj, .on_reject = on_rej, .opaque = &t->rj};
    t->xp = (pr_decode_ctx){.json = t->dp, .on_reject = on_rej, .opaque = &t->rp};
    t->bj = pr_feature_block_new(fs, 64, true);
    t->bp = pr_feature_block_new(fs, 64, true);
}

/* Event ev_json as JSON and ev_pb written as Protobuf, as record i: the rows
 * each gave, which must agree (two texts where proto3 cannot say "absent"). */
static int pbfx_pair(pbfx *t, const char *ev_json, const char *ev_pb, int64_t i)
{
    char err[512];
    int pl = pr_pbuser_encode_json(t->desc, ev_pb, strlen(ev_pb), false, 0, &t->pb, &t->pb_cap, err,
                                   sizeof(err));
    if (pl < 0)
        fail_msg("encode %s: %s", ev_pb, err);
    t->xj.offset = t->xp.offset = i;
    uint32_t next = 0;
    int a = pr_decode_message(PR_MSG_JSON, &t->xj, t->bj, ev_json, strlen(ev_json), &next, NULL);
    int b = pr_decode_message(PR_MSG_PROTOBUF, &t->xp, t->bp, t->pb, (size_t)pl, &next, NULL);
    if (a != b || t->rj.last != t->rp.last)
        fail_msg("%s: json %d (%s), protobuf %d (%s)", ev_pb, a, pr_decode_reason_name(t->rj.last),
                 b, pr_decode_reason_name(t->rp.last));
    return a;
}

/* Event ev (JSON) both ways as record i: the rows each gave, which must agree. */
static int pbfx_both(pbfx *t, const char *ev, int64_t i)
{
    return pbfx_pair(t, ev, ev, i);
}

static void pbfx_free(pbfx *t)
{
    free(t->pb);
    pr_block_free(t->bj);
    pr_block_free(t->bp);
    pr_json_decoder_free(t->dj);
    pr_json_decoder_free(t->dp);
    pr_pbuser_reader_free(t->rd);
    pr_pbuser_desc_free(t->desc);
    pr_config_free(t->cfg);
}

/* The same events as JSON and as Protobuf through the schema: identical blocks. */
static void test_lists_of_messages_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: n, path: items.n, list: { max_len: 3, keep: last }, ops: "
                  "[vocab] }\n"
                  "        - { name: s, path: items.s, list: { max_len: 8 }, ops: [vocab] }\n"
                  "        - { name: h, path: items.opt, list: { max_len: 8 }, ops: [ { hash: 50 "
                  "} ] }\n"
                  "        - { name: c, path: str, ops: [vocab] }\n");
    /* every field given (proto3 implicit presence reads an absent one as its default) */
    static const char *const evs[] = {
        "{\"i32\": 1, \"str\": \"u1\", \"items\": [{\"n\": 7, \"s\": \"a1\", \"opt\": 2}, "
        "{\"n\": 8, \"s\": \"a7\", \"opt\": 3}]}",
        "{\"i32\": 0, \"str\": \"u2\", \"items\": [{\"n\": 1, \"s\": \"a1\"}, {\"n\": 2, \"s\": "
        "\"a2\", \"opt\": 5}, {\"n\": 3, \"s\": \"a3\"}, {\"n\": 4, \"s\": \"a9\"}]}",
        "{\"i32\": 1, \"str\": \"u1\", \"items\": []}",
        "{\"i32\": 1, \"str\": \"u3\"}",
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_both(&t, evs[i], (int64_t)i), 1);
    assert_int_equal(t.rj.n + t.rp.n, 0);
    blocks_equal(t.bj, t.bp);
    assert_int_equal(pr_fside_lengths(t.bp->side, 0)[1], 3); /* keep last 3 of 4 */
    assert_int_equal(pr_fside_lengths(t.bp->side, 2)[1], 1); /* absent opt dropped */
    pbfx_free(&t);
}

/* Dense vectors (dim) from repeated float / double / int64 (packed and
 * not): the same rows as the JSON events; an empty repeated field (proto3
 * cannot tell it from an absent one) is missing, as an empty JSON list is;
 * a wrong length is wrong_type in both. A vector through a repeated message
 * is a config error (an element without the field would shift the rest). */
static void test_dense_vectors_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      dense:\n"
                  "        - { name: v, path: vec, dim: 3 }\n"
                  "        - { name: d, path: dvec, dim: 2, default: 9, ops: [neg2zero] }\n"
                  "        - { name: n, path: packed, dim: 2 }\n");
    static const struct {
        const char *ev;
        int rows;
    } evs[] = {
        {"{\"i32\": 1, \"vec\": [0.5, -2, 3], \"dvec\": [-1.5, 4], \"packed\": [7, 8]}", 1},
        {"{\"i32\": 0, \"vec\": [1, 2, 3], \"dvec\": [], \"packed\": []}", 1},
        {"{\"i32\": 0}", 1},
        {"{\"i32\": 0, \"vec\": [1, 2], \"dvec\": [1, 2]}", 0},
        {"{\"i32\": 0, \"vec\": [1, 2, 3], \"packed\": [1]}", 0},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        assert_int_equal(pbfx_both(&t, evs[i].ev, (int64_t)i), evs[i].rows);
        if (!evs[i].rows)
            assert_int_equal(t.rp.last, PR_DEC_WRONG_TYPE);
    }
    assert_int_equal(t.rp.n, 2);
    blocks_equal(t.bj, t.bp);
    const float want[3][7] = {
        {0.5f, -2, 3, 0, 4, 7, 8}, {1, 2, 3, 9, 9, 0, 0}, {0, 0, 0, 9, 9, 0, 0}};
    assert_int_equal(t.bp->side->n_dense, 7);
    assert_memory_equal(t.bp->side->dense, want, sizeof(want));
    pbfx_free(&t);
    char y[1024], err[512];
    pr_config *cfg = NULL;
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      dense: [ { name: n, path: items.n, dim: 2 } ]\n",
             PR_PBUSER_DESC);
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &cfg, err, sizeof(err)), 0);
    if (!strstr(err, "schema.dense[0].path: 'items' is a repeated message: a dense vector reads "
                     "one repeated number field"))
        fail_msg("%s", err);
}

/* Weighted lists: ids and an optional score in a repeated message (an
 * element without the score takes the default: a hole keeps the
 * positions), parallel repeated fields, and the rejects, as the same JSON
 * events give them; a weights path on a string field fails the config. */
static void test_weighted_lists_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: s, path: items.s, list: { max_len: 8 },\n"
                  "            weights: { path: items.score, default: 0.5 }, ops: [vocab] }\n"
                  "        - { name: h, path: hist, list: { max_len: 2, keep: last },\n"
                  "            weights: { path: dwell }, ops: [vocab] }\n"
                  "        - { name: n, path: items.n, list: { max_len: 8 }, ops: [vocab] }\n"
                  "        - { name: sl, path: items.s, list: { max_len: 8 }, ops: [vocab],\n"
                  "            weights: { path: items.score, default: 0.5,\n"
                  "                       ops: [log1p, { clip: [0, 1] }] } }\n");
    static const struct {
        const char *ev;
        int rows, reason;
    } evs[] = {
        {"{\"i32\": 1, \"items\": [{\"s\": \"a\", \"n\": 1, \"score\": 0.25}, {\"s\": \"b\", "
         "\"n\": 2}, {\"s\": \"c\", \"n\": 3, \"score\": 2}], \"hist\": [\"x\", \"y\", \"z\"], "
         "\"dwell\": [1, 2, 3.5]}",
         1, 0},
        {"{\"i32\": 0, \"items\": [{\"s\": \"a\", \"n\": 1}]}", 1, 0},
        {"{\"i32\": 0, \"hist\": [\"x\"]}", 0, PR_DEC_WRONG_TYPE},
        {"{\"i32\": 0, \"hist\": [\"x\", \"y\"], \"dwell\": [1]}", 0, PR_DEC_WRONG_TYPE},
        {"{\"i32\": 0, \"items\": [{\"s\": \"a\", \"n\": 1, \"score\": 1e300}]}", 0,
         PR_DEC_NUMBER_OUT_OF_RANGE},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        assert_int_equal(pbfx_both(&t, evs[i].ev, (int64_t)i), evs[i].rows);
        if (!evs[i].rows && t.rp.last != evs[i].reason)
            fail_msg("%s: %s", evs[i].ev, pr_decode_reason_name(t.rp.last));
    }
    blocks_equal(t.bj, t.bp);
    /* a NaN weight (JSON cannot write one) is out of range, not a missing
     * weight: hist "x" (field 31) with dwell [NaN] (field 32, packed float) */
    static const uint8_t nan_w[] = {0x08, 0x01, 0xfa, 0x01, 0x01, 'x', 0x82,
                                    0x02, 0x04, 0x00, 0x00, 0xc0, 0x7f};
    uint32_t next = 0;
    uint32_t rows = t.bp->rows;
    assert_int_equal(
        pr_decode_message(PR_MSG_PROTOBUF, &t.xp, t.bp, nan_w, sizeof(nan_w), &next, NULL), 0);
    assert_int_equal(t.rp.last, PR_DEC_NUMBER_OUT_OF_RANGE);
    assert_int_equal(t.bp->rows, rows);
    const pr_fside *sd = t.bp->side;
    static const float sw[] = {0.25f, 0.5f, 2.0f, 0.5f}, hw[] = {2.0f, 3.5f};
    assert_int_equal(sd->n_weights[0], 4);
    assert_memory_equal(sd->weights[0], sw, sizeof(sw));
    assert_int_equal(sd->n_weights[1], 2);
    assert_memory_equal(sd->weights[1], hw, sizeof(hw));
    assert_null(sd->weights[2]);
    /* weights.ops: the same chain on the same weights (blocks_equal: as JSON) */
    const float lw[] = {(float)log1p(0.25), (float)log1p(0.5), 1.0f, (float)log1p(0.5)};
    assert_int_equal(sd->n_weights[3], 4);
    assert_memory_equal(sd->weights[3], lw, sizeof(lw));
    pbfx_free(&t);
    char y[1024], err[512];
    pr_config *cfg = NULL;
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      sparse:\n"
             "        - { name: n, path: items.n, list: { max_len: 2 },\n"
             "            weights: { path: items.s }, ops: [vocab] }\n",
             PR_PBUSER_DESC);
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &cfg, err, sizeof(err)), 0);
    if (!strstr(err, "schema.sparse[0].weights.path: 'items.s' in message t3.All: a string, "
                     "bytes, enum or bool field, and weights are numbers"))
        fail_msg("%s", err);
}

/* A config over t3.All with `sparse` as its features: loads when want is
 * NULL, else fails with want in the error. */
static void all_config(const char *sparse, const char *want)
{
    char y[2048], err[1024];
    pr_config *cfg = NULL;
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      sparse:\n%s",
             PR_PBUSER_DESC, sparse);
    int rc = pr_config_load_string(y, strlen(y), "pb.yaml", &cfg, err, sizeof(err));
    if (!want) {
        if (rc)
            fail_msg("unexpected: %s", err);
        pr_config_free(cfg);
        return;
    }
    assert_int_not_equal(rc, 0);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
}

#define AL(p)                                                                                      \
    {                                                                                              \
        .path = p, .type = PR_JSON_ANY, .shape = PR_JSON_ALIGNED, .max_list = 4                    \
    }

/* Element k of column col is a hole. */
static void want_hole(rfx *t, uint32_t col, uint32_t k)
{
    assert_int_equal(val(t, col, k)->type, PR_JSON_HOLE);
}

/* PR_JSON_ALIGNED paths through a repeated message: one position per
 * element, a hole where the element lacks an explicit-presence field (as
 * JSON's extractor gives for an object without the key); a proto3 implicit
 * field the element lacks reads its zero value, as a LIST of it does, not a
 * hole; a repeated field on an aligned path reads as a list (no holes);
 * holes count towards max_list. */
static void test_aligned_over_messages(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {AL("items.opt"), AL("items.score"), AL("items.n"),
                                         LI("items.s"),   AL("dwell"),       AL("items.c")};
    rfx t;
    rfx_init(&t, "t3.All", paths, 6, PR_PB_FRAMING_NONE);
    static const char ev[] = "{\"items\": [{\"opt\": 1, \"score\": 0.5, \"n\": 3}, {\"n\": 4}, "
                             "{\"opt\": 2}, {}], \"dwell\": [1.5, 2]}";
    assert_int_equal(read_json(&t, ev), 0);
    for (uint32_t c = 0; c < 4; c++)
        assert_int_equal(t.jb->cols[c].count[0], 4);
    assert_int_equal(val(&t, 0, 0)->i, 1);
    want_hole(&t, 0, 1);
    assert_int_equal(val(&t, 0, 2)->i, 2);
    want_hole(&t, 0, 3);
    assert_true(val(&t, 1, 0)->d == 0.5);
    want_hole(&t, 1, 1);
    want_hole(&t, 1, 2);
    want_hole(&t, 1, 3);
    static const int64_t ns[] = {3, 4, 0, 0}; /* implicit: 0 where absent, as a list's "" */
    for (uint32_t k = 0; k < 4; k++) {
        assert_int_equal(val(&t, 2, k)->type, PR_JSON_INT64);
        assert_int_equal(val(&t, 2, k)->i, ns[k]);
        want_s(&t, 3, k, "");
        want_s(&t, 5, k, "COLOR_NONE"); /* an implicit enum: its 0 value */
    }
    assert_int_equal(t.jb->cols[4].count[0], 2);
    assert_true(val(&t, 4, 1)->d == 2.0);
    /* the explicit-presence columns as JSON's extractor reads the same text */
    pr_json_block *jb = pr_json_block_new(t.x, 1);
    assert_int_equal(pr_json_extract(t.x, jb, ev, strlen(ev), NULL), 0);
    for (uint32_t c = 0; c < 2; c++) {
        assert_int_equal(jb->cols[c].count[0], 4);
        for (uint32_t k = 0; k < 4; k++)
            assert_int_equal(jb->cols[c].any[k].type, t.jb->cols[c].any[k].type);
    }
    pr_json_block_free(jb);
    /* five elements without opt: five holes, past max_list 4 */
    assert_int_equal(read_json(&t, "{\"items\": [{\"n\": 1}, {}, {}, {}, {}]}"),
                     PR_DEC_LIST_TOO_LONG);
    /* no elements: nothing, no hole */
    assert_int_equal(read_json(&t, "{\"items\": []}"), 0);
    assert_int_equal(t.jb->cols[0].count[0], 0);
    rfx_free(&t);
}

/* A weighted list over a repeated message: an element without the id (an
 * optional field) drops its weight, one without the score takes the default
 * or, without a default, rejects the record wrong_type; an empty element
 * keeps the positions. The same JSON events give the same blocks. A proto3
 * implicit field inside an element is its zero value, never a hole: as an
 * id it is kept, as a weight it is 0 (not the default), as the JSON event
 * with an explicit 0 gives. */
static void test_weighted_messages_aligned(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: o, path: items.opt, list: { max_len: 8 },\n"
                  "            weights: { path: items.score, default: 0.5 }, ops: [vocab] }\n"
                  "        - { name: p, path: items.opt, list: { max_len: 8 }, ops: [vocab] }\n"
                  "        - { name: z, path: items.opt, list: { max_len: 8 },\n"
                  "            weights: { path: items.n, default: 9 }, ops: [vocab] }\n"
                  "        - { name: m, path: items.n, list: { max_len: 8 },\n"
                  "            weights: { path: items.score, default: 0.5 }, ops: [vocab] }\n");
    static const struct {
        const char *json, *pb;
    } evs[] = {
        {"{\"i32\": 1, \"items\": [{\"opt\": 1, \"score\": 2, \"n\": 5}, {\"score\": 3, \"n\": 0}, "
         "{\"opt\": 2, \"n\": 0}, {\"n\": 0}, {\"opt\": 3, \"score\": 0.25, \"n\": 6}]}",
         "{\"i32\": 1, \"items\": [{\"opt\": 1, \"score\": 2, \"n\": 5}, {\"score\": 3}, "
         "{\"opt\": 2}, {}, {\"opt\": 3, \"score\": 0.25, \"n\": 6}]}"},
        {"{\"i32\": 0, \"items\": [{\"s\": \"x\", \"n\": 0}]}", "{\"i32\": 0, \"items\": [{\"s\": "
                                                                "\"x\"}]}"},
        {"{\"i32\": 0}", "{\"i32\": 0}"},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_pair(&t, evs[i].json, evs[i].pb, (int64_t)i), 1);
    blocks_equal(t.bj, t.bp);
    const pr_fside *sd = t.bp->side;
    static const float ow[] = {2.0f, 0.5f, 0.25f}, zw[] = {5.0f, 0.0f, 6.0f},
                       mw[] = {2.0f, 3.0f, 0.5f, 0.5f, 0.25f, 0.5f};
    assert_int_equal(sd->n_weights[0], 3);
    assert_memory_equal(sd->weights[0], ow, sizeof(ow));
    assert_int_equal(pr_fside_lengths(t.bp->side, 1)[0], 3); /* the ids alone */
    assert_int_equal(sd->n_weights[2], 3);
    assert_memory_equal(sd->weights[2], zw, sizeof(zw));
    assert_int_equal(sd->n_weights[3], 6); /* implicit ids: every element, a 0 where absent */
    assert_memory_equal(sd->weights[3], mw, sizeof(mw));
    pbfx_free(&t);
    /* no default */
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: o, path: items.opt, list: { max_len: 8 },\n"
                  "            weights: { path: items.score }, ops: [vocab] }\n");
    static const struct {
        const char *ev;
        int rows, reason;
    } strict[] = {
        {"{\"i32\": 1, \"items\": [{\"opt\": 1, \"score\": 2}, {\"score\": 3}, {}]}", 1, 0},
        {"{\"i32\": 1, \"items\": [{\"opt\": 1, \"score\": 2}, {\"opt\": 2}]}", 0,
         PR_DEC_WRONG_TYPE},
        {"{\"i32\": 1, \"items\": [{}, {\"opt\": 4, \"score\": -1}]}", 1, 0},
    };
    for (size_t i = 0; i < sizeof(strict) / sizeof(strict[0]); i++) {
        t.rj.last = t.rp.last = 0;
        assert_int_equal(pbfx_both(&t, strict[i].ev, (int64_t)i), strict[i].rows);
        if (!strict[i].rows && t.rp.last != strict[i].reason)
            fail_msg("%s: %s", strict[i].ev, pr_decode_reason_name(t.rp.last));
    }
    blocks_equal(t.bj, t.bp);
    static const float sw[] = {2.0f, -1.0f};
    assert_int_equal(t.bp->side->n_weights[0], 2);
    assert_memory_equal(t.bp->side->weights[0], sw, sizeof(sw));
    pbfx_free(&t);
}

/* The descriptor set and weights: a list of numbers (a repeated number
 * field, a number field of a repeated message) loads; a string, bytes or
 * enum field, or a field that is not a list, is refused naming
 * schema.sparse[i].weights.path; the ids of a weighted list are a list too. */
static void test_weighted_config(void **state)
{
    (void)state;
    all_config("        - { name: h, path: hist, list: { max_len: 2 },\n"
               "            weights: { path: packed }, ops: [vocab] }\n"
               "        - { name: o, path: items.opt, list: { max_len: 2 },\n"
               "            weights: { path: items.n }, ops: [vocab] }\n",
               NULL);
    static const struct {
        const char *ids, *weights, *want;
    } bad[] = {
        {"hist", "colors",
         "schema.sparse[0].weights.path: 'colors' in message t3.All: a string, bytes, enum or "
         "bool field, and weights are numbers"},
        {"hist", "names", "'names' in message t3.All: a string, bytes, enum or bool field"},
        {"items.opt", "items.c",
         "'items.c' in message t3.All: a string, bytes, enum or bool field"},
        {"hist", "flags", "'flags' in message t3.All: a string, bytes, enum or bool field"},
        {"hist", "db", "schema.sparse[0].weights.path: 'db' is not repeated"},
        {"hist", "inner.n", "schema.sparse[0].weights.path: 'n' is not repeated"},
        {"hist", "nosuch", "schema.sparse[0].weights.path: message t3.All has no field 'nosuch'"},
        {"items.opt", "items.tags", "'tags' is repeated inside the repeated message 'items'"},
        {"str", "dwell", "schema.sparse[0].path: 'str' is not repeated"},
    };
    char y[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(y, sizeof(y),
                 "        - { name: a, path: %s, list: { max_len: 3 },\n"
                 "            weights: { path: %s }, ops: [vocab] }\n",
                 bad[i].ids, bad[i].weights);
        all_config(y, bad[i].want);
    }
}

/* A dense vector as float32 bytes (encoding f32) in a Protobuf bytes
 * field, read raw: the rows JSON gives for the same bytes in base64 (ASCII
 * bytes, so that the JSON form the encoder takes carries them as they
 * are); a string field is refused at load (text is UTF-8, floats are not). */
static void test_dense_vector_bytes_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      dense:\n"
                  "        - { name: b, path: by, dim: 2, encoding: f32, default: 3 }\n");
    static const struct {
        const char *json, *pb;
        int rows;
    } evs[] = {
        {"{\"i32\": 1, \"by\": \"YWJjZGVmZ2g=\"}", "{\"i32\": 1, \"by\": \"abcdefgh\"}", 1},
        {"{\"i32\": 0, \"by\": \"\"}", "{\"i32\": 0}", 1},
        {"{\"i32\": 0, \"by\": \"YWJj\"}", "{\"i32\": 0, \"by\": \"abc\"}", 0},
    };
    char err[512];
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
        int pl = pr_pbuser_encode_json(t.desc, evs[i].pb, strlen(evs[i].pb), false, 0, &t.pb,
                                       &t.pb_cap, err, sizeof(err));
        if (pl < 0)
            fail_msg("encode %s: %s", evs[i].pb, err);
        uint32_t next = 0;
        assert_int_equal(pr_decode_message(PR_MSG_JSON, &t.xj, t.bj, evs[i].json,
                                           strlen(evs[i].json), &next, NULL),
                         evs[i].rows);
        assert_int_equal(
            pr_decode_message(PR_MSG_PROTOBUF, &t.xp, t.bp, t.pb, (size_t)pl, &next, NULL),
            evs[i].rows);
        assert_int_equal(t.rj.last, t.rp.last);
    }
    assert_int_equal(t.rp.last, PR_DEC_WRONG_TYPE);
    blocks_equal(t.bj, t.bp);
    float want[2][2] = {{0, 0}, {3, 3}};
    memcpy(want[0], "abcdefgh", 8);
    assert_memory_equal(t.bp->side->dense, want, sizeof(want));
    pbfx_free(&t);
    char y[1024];
    pr_config *cfg = NULL;
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      dense: [ { name: s, path: str, dim: 1, encoding: f32 } ]\n",
             PR_PBUSER_DESC);
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &cfg, err, sizeof(err)), 0);
    if (!strstr(err, "it gives a string, and a dense vector with encoding f32 needs bytes"))
        fail_msg("%s", err);
}

/* ---------------------------------------------------------------- config */

static void config_fails(const char *schema, const char *message, const char *want)
{
    char y[4096], err[1024];
    snprintf(y, sizeof(y),
             "pipelines:\n"
             "  - name: t\n"
             "    source:\n"
             "      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: %s }\n"
             "    schema:\n"
             "      labels: [ { name: click, path: label.click } ]\n"
             "      sparse:\n%s",
             PR_PBUSER_DESC, message, schema);
    pr_config *c = NULL;
    int rc = pr_config_load_string(y, strlen(y), "pb.yaml", &c, err, sizeof(err));
    if (!want) {
        if (rc)
            fail_msg("unexpected: %s", err);
        pr_config_free(c);
        return;
    }
    assert_int_not_equal(rc, 0);
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
}

static void test_config_errors(void **state)
{
    (void)state;
    const char *ok = "        - { name: u, path: user.id, ops: [vocab] }\n"
                     "        - { name: h, path: history, list: { max_len: 4 }, ops: [vocab] }\n";
    config_fails(ok, "shop.Click", NULL);
    /* schema.filter's paths: a scalar or a repeated field of any type; not a
     * field the message lacks (named at load, not at the start) */
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      filter:\n"
                 "        - { path: item.tags, not_in: [sale] }\n"
                 "        - { path: item.price, in: [1] }\n"
                 "        - { path: user.age_days, present: true }\n",
                 "shop.Click", NULL);
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      filter:\n"
                 "        - { path: context.device, in: [ios] }\n"
                 "        - { path: context.nosuch, present: false }\n",
                 "shop.Click",
                 "pipelines[0].schema.filter[1].path: message shop.Click.Context has no field "
                 "'nosuch'");
    config_fails(ok, "shop.Clack", "source.protobuf.message: message shop.Clack is not in");
    config_fails(ok, "Click", "message Click is not in");
    config_fails(ok, "Click", "(give the full name: shop.Click)");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "        - { name: i, path: item.id, ops: [vocab] }\n"
                 "        - { name: x, path: usr.id, ops: [vocab] }\n",
                 "shop.Click",
                 "pb.yaml:11: pipelines[0].schema.sparse[2].path: message shop.Click has no field "
                 "'usr'");
    config_fails("        - { name: t, path: item.tags, ops: [vocab] }\n", "shop.Click",
                 "schema.sparse[0].path: 'tags' is repeated: declare a list feature");
    config_fails("        - { name: t, path: user.id, list: { max_len: 2 }, ops: [vocab] }\n",
                 "shop.Click", "'id' is not repeated");
    /* dense vectors: a repeated number field, told apart from a list */
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: h, path: history, dim: 4 } ]\n",
                 "shop.Click", NULL);
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: h, path: history } ]\n",
                 "shop.Click",
                 "schema.dense[0].path: 'history' is repeated: declare a list feature (list: { "
                 "max_len: N }), or a dense vector (dim: N)");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: p, path: item.price, dim: 2 } ]\n",
                 "shop.Click",
                 "'price' is not repeated (a double): a list feature (or a dense "
                 "vector) needs a repeated field");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: t, path: item.tags, dim: 2 } ]\n",
                 "shop.Click", "it gives a string, and a dense feature needs a number");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: p, path: item.price, dim: 2, encoding: f32 } ]\n",
                 "shop.Click",
                 "it gives a number, and a dense vector with encoding f32 needs bytes");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense: [ { name: t, path: item.tags, dim: 2, encoding: f32 } ]\n",
                 "shop.Click", "'tags' is repeated");
    /* lists of messages: a list feature maps over them, one list level per path */
    {
        char y2[2048], e2[1024];
        pr_config *c2 = NULL;
        const char *ok2 =
            "        - { name: a, path: items.n, list: { max_len: 4 }, ops: [vocab] }\n";
        const char *two =
            "        - { name: a, path: items.tags, list: { max_len: 4 }, ops: [vocab] }\n";
        snprintf(y2, sizeof(y2),
                 "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
                 "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
                 "    schema:\n      sparse:\n%s",
                 PR_PBUSER_DESC, ok2);
        if (pr_config_load_string(y2, strlen(y2), "pb.yaml", &c2, e2, sizeof(e2)))
            fail_msg("unexpected: %s", e2);
        pr_config_free(c2);
        snprintf(y2, sizeof(y2),
                 "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
                 "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
                 "    schema:\n      sparse:\n%s",
                 PR_PBUSER_DESC, two);
        assert_int_not_equal(pr_config_load_string(y2, strlen(y2), "pb.yaml", &c2, e2, sizeof(e2)),
                             0);
        if (!strstr(e2, "'tags' is repeated inside the repeated message 'items': one list level"))
            fail_msg("error '%s'", e2);
    }
    config_fails("        - { name: u, path: user, ops: [vocab] }\n", "shop.Click",
                 "'user' is a message (shop.Click.User): name one of its fields");
    /* A field of a type the feature can never take: refused at load, not
     * every record rejected wrong_type at run time. */
    config_fails("        - { name: p, path: item.price, ops: [vocab] }\n", "shop.Click",
                 "schema.sparse[0].path: 'item.price' in message shop.Click: it gives a number, "
                 "and 'vocab' needs an "
                 "integer or a string");
    config_fails(
        "        - { name: u, path: user.id, ops: [vocab] }\n"
        "      dense:\n        - { name: d, path: user.id }\n",
        "shop.Click",
        "schema.dense[0].path: 'user.id' in message shop.Click: it gives a string, and a dense "
        "feature needs a number");
    config_fails("        - { name: u, path: user.id, ops: [vocab] }\n"
                 "      dense:\n        - { name: d, path: ts }\n"
                 "        - { name: p, path: item.price }\n"
                 "        - { name: b, path: item.price, ops: [log1p] }\n",
                 "shop.Click", NULL); /* integers convert to numbers */
    config_fails("        - { name: x, cross: [user.id, item.nope], ops: [ { hash: 9 } ] }\n",
                 "shop.Click", "schema.sparse[0].cross[1]: message shop.Click.Item has no field");
    /* a path through a repeated message, a map without its key */
    char y[2048], err[1024];
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "    schema:\n      sparse:\n"
             "        - { name: a, path: items.n, ops: [vocab] }\n"
             "        - { name: b, path: attrs, ops: [vocab] }\n",
             PR_PBUSER_DESC);
    pr_config *c = NULL;
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "'items' is a repeated message: a single-valued feature cannot "
                                "go through it"));
    assert_non_null(strstr(err, "'attrs' is a map: name a key after it"));
    /* the file */
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: /nonexistent.desc, message: t3.All }\n"
             "    schema:\n      sparse: [ { name: a, path: i32, ops: [vocab] } ]\n");
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "source.protobuf.descriptor_set: /nonexistent.desc"));
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "    schema:\n      sparse: [ { name: a, path: i32, ops: [vocab] } ]\n");
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "source.protobuf: missing"));
    /* a registry is Avro's: the descriptor set is the schema here */
    snprintf(y, sizeof(y),
             "pipelines:\n  - name: t\n    source:\n      format: protobuf\n"
             "      protobuf: { descriptor_set: \"%s\", message: t3.All }\n"
             "      schema_registry: { url: \"http://127.0.0.1:1\" }\n"
             "    schema:\n      sparse: [ { name: a, path: i32, ops: [vocab] } ]\n",
             PR_PBUSER_DESC);
    assert_int_not_equal(pr_config_load_string(y, strlen(y), "pb.yaml", &c, err, sizeof(err)), 0);
    assert_non_null(strstr(err, "source.schema_registry: not used by format protobuf"));
}

/* ---------------------------------------------------------------- maps read by their keys */

#define MK(p, pt, sh, ml)                                                                          \
    {                                                                                              \
        .path = p, .type = PR_JSON_ANY, .shape = sh, .max_list = ml, .part = pt                    \
    }

/* Event json through the Protobuf reader (written by the encoder) and through
 * JSON's extractor over the same paths: the same columns, value by value
 * (a map that is {} in JSON and no entry in Protobuf: length 0 both). */
static void same_as_extractor(rfx *t, const char *json)
{
    if (read_json(t, json) != 0)
        fail_msg("%s: %s", json, t->rej.detail);
    pr_json_block *jb = pr_json_block_new(t->x, 1);
    pr_json_reject rej;
    if (pr_json_extract(t->x, jb, json, strlen(json), &rej))
        fail_msg("extract %s: %s", json, rej.detail);
    for (uint32_t c = 0; c < jb->n_cols; c++) {
        const pr_json_col *a = &jb->cols[c], *b = &t->jb->cols[c];
        if (a->count[0] != b->count[0])
            fail_msg("%s: column %u: json %u values, protobuf %u", json, c, a->count[0],
                     b->count[0]);
        if (a->count[0])
            assert_int_equal(a->present[0], b->present[0]);
        for (uint32_t k = 0; k < a->count[0]; k++) {
            const pr_json_any *x = &a->any[k], *y = &b->any[k];
            if (x->type != y->type)
                fail_msg("%s: column %u[%u]: json type %d, protobuf %d", json, c, k, x->type,
                         y->type);
            if (x->type == PR_JSON_STRING) {
                assert_int_equal(x->s.len, y->s.len);
                assert_memory_equal(jb->arena + x->s.off, t->jb->arena + y->s.off, x->s.len);
            } else {
                assert_memory_equal(&x->i, &y->i, sizeof(x->i)); /* the int64 or the double */
            }
        }
    }
    pr_json_block_free(jb);
}

/* A map field read by its keys (PR_JSON_KEYS) and values (PR_JSON_VALUES):
 * the entries in wire order, a repeated key in its first place with its
 * last value, integer keys in decimal (sint32 zigzag, a uint64 above 2^63
 * unsigned), values by type, all as JSON's extractor reads the same text;
 * max_list counts distinct keys; an entry without its key reads "" / 0,
 * without its value the value type's 0 (never a hole); a bad key or value
 * on the wire is refused. */
static void test_map_keys_reader(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {MK("wmap", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                         MK("wmap", PR_JSON_VALUES, PR_JSON_ALIGNED, 4),
                                         MK("scores", PR_JSON_KEYS, PR_JSON_LIST, 4),
                                         MK("zmap", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                         MK("zmap", PR_JSON_VALUES, PR_JSON_ALIGNED, 4),
                                         MK("umap", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                         MK("umap", PR_JSON_VALUES, PR_JSON_ALIGNED, 4),
                                         MK("attrs", PR_JSON_KEYS, PR_JSON_LIST, 4),
                                         SC("i32")};
    rfx t;
    rfx_init(&t, "t3.All", paths, 9, PR_PB_FRAMING_NONE);
    same_as_extractor(&t,
                      "{\"wmap\": {\"b\": 2.5, \"a\": 0.25, \"b\": -1.5, \"c\": 0.5}, "
                      "\"scores\": {\"-3\": 1.5, \"7\": 2.5, \"-3\": 3.5}, "
                      "\"zmap\": {\"-2\": -7, \"0\": 0, \"2147483647\": 9, \"-2147483648\": 1}, "
                      "\"umap\": {\"18446744073709551615\": -5, \"1\": 3}, "
                      "\"attrs\": {\"\xc3\xa9\": \"x\", \"\": \"y\"}, \"i32\": 1}");
    assert_int_equal(t.jb->cols[0].count[0], 3);
    want_s(&t, 0, 0, "b");
    want_s(&t, 0, 1, "a");
    want_s(&t, 0, 2, "c");
    assert_true(val(&t, 1, 0)->type == PR_JSON_DOUBLE && val(&t, 1, 0)->d == -1.5);
    assert_true(val(&t, 1, 1)->d == 0.25);
    want_s(&t, 2, 0, "-3");
    want_s(&t, 3, 3, "-2147483648");
    assert_int_equal(val(&t, 4, 0)->i, -7);
    want_s(&t, 5, 0, "18446744073709551615");
    assert_int_equal(val(&t, 6, 0)->i, -5);
    /* four keys, some twice: within max_list 4; five: list_too_long */
    same_as_extractor(
        &t, "{\"i32\": 0, \"wmap\": {\"a\": 1.5, \"b\": 2.5, \"a\": 3.5, \"c\": 0.5, \"d\": "
            "0.5, \"c\": 4.5, \"b\": 8.5}}");
    assert_true(val(&t, 1, 0)->d == 3.5 && val(&t, 1, 1)->d == 8.5 && val(&t, 1, 2)->d == 4.5);
    assert_int_equal(
        read_json(&t, "{\"wmap\": {\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4, \"e\": 5}}"),
        PR_DEC_LIST_TOO_LONG);
    /* empty and absent maps: nothing */
    same_as_extractor(&t, "{\"wmap\": {}, \"zmap\": {}, \"i32\": 2}");
    want_absent(&t, 0);
    same_as_extractor(&t, "{\"i32\": 0}");
    /* wmap (34) entries {key "a"} (no value), {value 1.0} (no key); zmap (36)
     * an empty entry: key 0, value 0 */
    static const uint8_t partial[] = {0x92, 0x02, 0x03, 0x0a, 0x01, 'a',  0x92, 0x02, 0x09, 0x11, 0,
                                      0,    0,    0,    0,    0,    0xf0, 0x3f, 0xa2, 0x02, 0x00};
    assert_int_equal(read_bytes(&t, partial, sizeof(partial)), 0);
    want_s(&t, 0, 0, "a");
    want_s(&t, 0, 1, "");
    assert_true(val(&t, 1, 0)->type == PR_JSON_DOUBLE && val(&t, 1, 0)->d == 0.0);
    assert_true(val(&t, 1, 1)->d == 1.0);
    want_s(&t, 3, 0, "0");
    assert_true(val(&t, 4, 0)->type == PR_JSON_INT64 && val(&t, 4, 0)->i == 0);
    /* a value of another wire type; a key that is not UTF-8 */
    want_bad(&t, "\x92\x02\x05\x0a\x01\x61\x10\x01", 8, PR_DEC_BAD_PROTOBUF,
             "map 'wmap' value: wire type 0, expected 1");
    want_bad(&t, "\x92\x02\x03\x0a\x01\xff", 6, PR_DEC_BAD_UTF8,
             "map 'wmap': a key of invalid UTF-8");
    /* a key of another wire type (a varint for a string): refused, as
     * protobuf's parsers refuse it, not read as an empty key */
    want_bad(&t, "\x92\x02\x0b\x08\x05\x11\0\0\0\0\0\0\xf0\x3f", 14, PR_DEC_BAD_PROTOBUF,
             "map 'wmap' key: wire type 0, expected 2");
    rfx_free(&t);
}

/* A big map: its repeated keys found past PR__MAP_LINEAR entries (a hash
 * table), built anew for the next record's map (whose keys sit elsewhere). */
static void test_map_keys_big(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {MK("wmap", PR_JSON_KEYS, PR_JSON_ALIGNED, 64),
                                         MK("wmap", PR_JSON_VALUES, PR_JSON_ALIGNED, 64)};
    rfx t;
    rfx_init(&t, "t3.All", paths, 2, PR_PB_FRAMING_NONE);
    char ev[4096];
    int n = snprintf(ev, sizeof(ev), "{\"wmap\": {");
    for (int i = 0; i < 40; i++)
        n += snprintf(ev + n, sizeof(ev) - (size_t)n, "\"k%d\": %d.5, ", i, i);
    snprintf(ev + n, sizeof(ev) - (size_t)n,
             "\"k3\": 100.5, \"k39\": 200.5, \"k20\": 300.5, \"k3\": 400.5}}");
    same_as_extractor(&t, ev);
    assert_int_equal(t.jb->cols[0].count[0], 40);
    want_s(&t, 0, 39, "k39");
    assert_true(val(&t, 1, 3)->d == 400.5 && val(&t, 1, 39)->d == 200.5 &&
                val(&t, 1, 20)->d == 300.5 && val(&t, 1, 21)->d == 21.5);
    n = snprintf(ev, sizeof(ev), "{\"wmap\": {");
    for (int i = 19; i >= 0; i--)
        n += snprintf(ev + n, sizeof(ev) - (size_t)n, "\"k%d\": %d.5, ", i, i);
    snprintf(ev + n, sizeof(ev) - (size_t)n, "\"k0\": 7.5, \"k19\": 8.5, \"x\": 1.5}}");
    same_as_extractor(&t, ev);
    assert_int_equal(t.jb->cols[0].count[0], 21);
    assert_true(val(&t, 1, 19)->d == 7.5 && val(&t, 1, 0)->d == 8.5);
    rfx_free(&t);
}

/* A map read by its keys inside messages: under a map's value (a later
 * entry with the same key replaces the value and so the inner map's keys,
 * as JSON's repeated key does), and in a message that occurs twice on the
 * wire (protobuf merges it: the inner map's entries add up, a key in both
 * takes the last value). */
static void test_map_keys_nested(void **state)
{
    (void)state;
    static const pr_json_path paths[] = {MK("objs.a.m", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                         MK("objs.a.m", PR_JSON_VALUES, PR_JSON_ALIGNED, 4),
                                         MK("inner.m", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                         MK("inner.m", PR_JSON_VALUES, PR_JSON_ALIGNED, 4)};
    rfx t;
    rfx_init(&t, "t3.All", paths, 4, PR_PB_FRAMING_NONE);
    same_as_extractor(&t, "{\"objs\": {\"a\": {\"m\": {\"x\": 1.5, \"y\": 0.5}}, \"b\": {\"m\": "
                          "{\"z\": 1.5}}, \"a\": {\"m\": {\"y\": 2.5}}}, \"inner\": {\"m\": "
                          "{\"p\": 1.5, \"q\": 2.5}}}");
    assert_int_equal(t.jb->cols[0].count[0], 1);
    want_s(&t, 0, 0, "y");
    assert_true(val(&t, 1, 0)->d == 2.5);
    want_s(&t, 2, 1, "q");
    char err[256];
    uint8_t *two = NULL;
    size_t cap = 0;
    static const char e1[] = "{\"inner\": {\"m\": {\"p\": 1.5, \"q\": 2.5}}}",
                      e2[] = "{\"inner\": {\"m\": {\"r\": 0.5, \"p\": 3.5}}}";
    int a = pr_pbuser_encode_json(t.d, e1, strlen(e1), false, 0, &two, &cap, err, sizeof(err));
    assert_true(a > 0);
    uint8_t *buf = malloc((size_t)a * 2 + 64);
    memcpy(buf, two, (size_t)a);
    int b = pr_pbuser_encode_json(t.d, e2, strlen(e2), false, 0, &two, &cap, err, sizeof(err));
    assert_true(b > 0);
    memcpy(buf + a, two, (size_t)b);
    assert_int_equal(read_bytes(&t, buf, (size_t)(a + b)), 0);
    assert_int_equal(t.jb->cols[2].count[0], 3);
    want_s(&t, 2, 0, "p");
    want_s(&t, 2, 2, "r");
    assert_true(val(&t, 3, 0)->d == 3.5 && val(&t, 3, 1)->d == 2.5 && val(&t, 3, 2)->d == 0.5);
    free(buf);
    free(two);
    rfx_free(&t);
}

/* pr_pbuser_reader_new fails with `want` in its error. */
static void reader_fails(const pr_json_path *paths, size_t n, const char *want)
{
    char err[512];
    pr_pbuser_desc *d = pr_pbuser_desc_load(PR_PBUSER_DESC, "t3.All", err, sizeof(err));
    assert_non_null(d);
    pr_pbuser_reader *r = pr_pbuser_reader_new(d, PR_PB_FRAMING_NONE, paths, n, err, sizeof(err));
    if (r || !strstr(err, want))
        fail_msg("reader: '%s' lacks '%s'", r ? "(made)" : err, want);
    pr_pbuser_desc_free(d);
}

/* Paths the reader refuses for a map read by its keys. */
static void test_map_keys_refused(void **state)
{
    (void)state;
    const pr_json_path under[] = {MK("items.m", PR_JSON_KEYS, PR_JSON_LIST, 4)};
    reader_fails(under, 1, "'m' is a map inside the repeated message 'items': one list level");
    const pr_json_path not_map[] = {MK("names", PR_JSON_KEYS, PR_JSON_LIST, 4)};
    reader_fails(not_map, 1, "'names' is not a map field (repeated, a string)");
    const pr_json_path key_below[] = {MK("attrs", PR_JSON_KEYS, PR_JSON_LIST, 4), SC("attrs.k1")};
    reader_fails(key_below, 2, "'attrs' is read as a map (list: { from: keys }): no path may name");
    const pr_json_path key_above[] = {SC("attrs.k1"), MK("attrs", PR_JSON_KEYS, PR_JSON_LIST, 4)};
    reader_fails(key_above, 2, "'attrs' is read as a map (list: { from: keys }): no path may name");
    const pr_json_path msgs[] = {MK("objs", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                 MK("objs", PR_JSON_VALUES, PR_JSON_ALIGNED, 4)};
    reader_fails(msgs, 2, "objs: the map's values are messages (t3.Inner)");
    const pr_json_path alone[] = {MK("wmap", PR_JSON_VALUES, PR_JSON_ALIGNED, 4)};
    reader_fails(alone, 1, "map 'wmap': its values are read with its keys");
    const pr_json_path shape[] = {MK("wmap", PR_JSON_KEYS, PR_JSON_ALIGNED, 4),
                                  MK("wmap", PR_JSON_VALUES, PR_JSON_LIST, 4)};
    reader_fails(shape, 2, "wmap: a map's values are read as a list aligned with its keys");
}

/* JSON event json and Protobuf bytes pb as record i (pbfx_pair for bytes
 * the encoder cannot write). */
static int pbfx_raw(pbfx *t, const char *json, const void *pb, size_t len, int64_t i)
{
    t->xj.offset = t->xp.offset = i;
    uint32_t next = 0;
    int a = pr_decode_message(PR_MSG_JSON, &t->xj, t->bj, json, strlen(json), &next, NULL);
    int b = pr_decode_message(PR_MSG_PROTOBUF, &t->xp, t->bp, pb, len, &next, NULL);
    if (a != b || t->rj.last != t->rp.last)
        fail_msg("%s: json %d, protobuf %d (%s)", json, a, b, pr_decode_reason_name(t->rp.last));
    return a;
}

/* list: { from: keys } and weights: { from: values } over Protobuf map
 * fields: the same blocks as the same JSON events (ids, weights, keep
 * last, a repeated key, empty and absent maps, integer keys, a map past
 * PR_FEAT_MAX_LIST keys rejected list_too_long both ways); an entry without
 * its value weighs 0 (JSON's 0, not the default: map values have no
 * presence). */
static void test_map_keys_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: w, path: wmap, list: { max_len: 8, from: keys },\n"
                  "            weights: { from: values, default: 0.5 }, ops: [vocab] }\n"
                  "        - { name: k, path: attrs, list: { max_len: 2, keep: last, from: keys "
                  "}, ops: [vocab] }\n"
                  "        - { name: i, path: imap, list: { max_len: 4, from: keys },\n"
                  "            weights: { from: values }, ops: [vocab] }\n"
                  "        - { name: s, path: scores, list: { max_len: 8, from: keys }, ops: [ { "
                  "hash: 50 } ] }\n"
                  "        - { name: v, path: wmap, list: { max_len: 2, keep: last, from: keys "
                  "}, ops: [vocab] }\n"
                  "        - { name: e, path: attrs, list: { max_len: 4, from: entries }, ops: "
                  "[vocab] }\n");
    static const char *const evs[] = {
        "{\"i32\": 1, \"wmap\": {\"a\": 0.25, \"b\": 2, \"c\": -1.5}, \"attrs\": {\"x\": \"1\", "
        "\"y\": \"2\", \"z\": \"3\"}, \"imap\": {\"7\": 0.5, \"-3\": 1.5}, \"scores\": {\"-3\": 1, "
        "\"9\": 2}}",
        "{\"i32\": 0, \"wmap\": {\"a\": 1, \"b\": 2, \"a\": 3}, \"imap\": {\"5\": 1, \"5\": 2.5}}",
        "{\"i32\": 0, \"wmap\": {}, \"attrs\": {}, \"imap\": {}}",
        "{\"i32\": 1}",
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_both(&t, evs[i], (int64_t)i), 1);
    /* wmap (34): {"b": 4} then {"a"} without a value */
    static const uint8_t novalue[] = {0x08, 0x01, 0x92, 0x02, 0x0c, 0x0a, 0x01, 'b',
                                      0x11, 0,    0,    0,    0,    0,    0,    0x10,
                                      0x40, 0x92, 0x02, 0x03, 0x0a, 0x01, 'a'};
    assert_int_equal(
        pbfx_raw(&t, "{\"i32\": 1, \"wmap\": {\"b\": 4, \"a\": 0}}", novalue, sizeof(novalue), 4),
        1);
    /* 40 keys, some again past the first 8 kept; then 4097 keys */
    char *ev = malloc(80000);
    int n = snprintf(ev, 80000, "{\"i32\": 1, \"wmap\": {");
    for (int i = 0; i < 40; i++)
        n += snprintf(ev + n, 80000 - (size_t)n, "\"k%d\": %d, ", i, i);
    snprintf(ev + n, 80000 - (size_t)n, "\"k3\": 100, \"k30\": 7, \"k0\": 9}}");
    assert_int_equal(pbfx_both(&t, ev, 5), 1);
    n = snprintf(ev, 80000, "{\"i32\": 1, \"wmap\": {");
    for (int i = 0; i <= PR_FEAT_MAX_LIST; i++)
        n += snprintf(ev + n, 80000 - (size_t)n, "%s\"k%d\": 1", i ? ", " : "", i);
    snprintf(ev + n, 80000 - (size_t)n, "}}");
    assert_int_equal(pbfx_both(&t, ev, 6), 0);
    assert_int_equal(t.rp.last, PR_DEC_LIST_TOO_LONG);
    free(ev);
    assert_int_equal(t.rp.n, 1);
    blocks_equal(t.bj, t.bp);
    const pr_fside *sd = t.bp->side;
    static const float ww[] = {0.25f, 2, -1.5f, 3, 2, 4, 0, 9, 1, 2, 100, 4, 5, 6, 7};
    assert_int_equal(sd->n_weights[0], 15);
    assert_memory_equal(sd->weights[0], ww, sizeof(ww));
    static const float iw[] = {0.5f, 1.5f, 2.5f};
    assert_int_equal(sd->n_weights[2], 3);
    assert_memory_equal(sd->weights[2], iw, sizeof(iw));
    static const int32_t klen[] = {2, 0, 0, 0, 0, 0}, wlen[] = {3, 2, 0, 0, 2, 8};
    assert_memory_equal(pr_fside_lengths(t.bp->side, 1), klen, sizeof(klen)); /* last 2 of 3 */
    assert_memory_equal(pr_fside_lengths(t.bp->side, 0), wlen, sizeof(wlen));
    pbfx_free(&t);
}

/* list: { from: values } over Protobuf map fields: the map's values as the
 * ids (string, int64, int32, bool and enum values), beside its keys, keep
 * last, a oneof string field in the same table: the same blocks as the same
 * JSON events, a repeated key's last value in its first place; an entry
 * without its value the value type's 0 (an id, as JSON's 0). */
static void test_map_values_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      sparse:\n"
                  "        - { name: av, path: attrs, list: { max_len: 2, from: values }, ops: "
                  "[vocab] }\n"
                  "        - { name: ak, path: attrs, list: { max_len: 4, from: keys }, ops: "
                  "[vocab] }\n"
                  "        - { name: zv, path: zmap, list: { max_len: 2, keep: last, from: values "
                  "}, ops: [vocab] }\n"
                  "        - { name: uv, path: umap, list: { max_len: 4, from: values }, ops: [ { "
                  "hash: 100 } ] }\n"
                  "        - { name: bv, path: bmap, list: { max_len: 4, from: values }, ops: "
                  "[vocab] }\n"
                  "        - { name: cv, path: cmap, list: { max_len: 4, from: values }, ops: "
                  "[vocab] }\n"
                  "        - { name: s, path: one_s, ops: [vocab], table: av }\n");
    static const char *const evs[] = {
        "{\"i32\": 1, \"attrs\": {\"top\": \"adA\", \"side\": \"adB\", \"foot\": \"adC\"}, "
        "\"zmap\": {\"-2\": 5, \"3\": -7, \"9\": 11}, \"umap\": {\"1\": -1, \"2\": 2}, "
        "\"bmap\": {\"a\": true, \"b\": false}, \"cmap\": {\"x\": \"RED\", \"y\": \"GREEN\"}, "
        "\"one_s\": \"adB\"}",
        "{\"i32\": 0, \"attrs\": {\"a\": \"x\", \"b\": \"y\", \"a\": \"z\"}, \"zmap\": {}}",
        "{\"i32\": 0, \"attrs\": {}, \"umap\": {}, \"one_s\": \"adA\"}",
        "{\"i32\": 1}",
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_both(&t, evs[i], (int64_t)i), 1);
    /* attrs (23): {"b": "q"} then {"a"} without a value: the value "" */
    static const uint8_t novalue[] = {0x08, 0x01, 0xba, 0x01, 0x06, 0x0a, 0x01, 'b', 0x12,
                                      0x01, 'q',  0xba, 0x01, 0x03, 0x0a, 0x01, 'a'};
    assert_int_equal(pbfx_raw(&t, "{\"i32\": 1, \"attrs\": {\"b\": \"q\", \"a\": \"\"}}", novalue,
                              sizeof(novalue), 4),
                     1);
    blocks_equal(t.bj, t.bp);
    static const int32_t al[] = {2, 2, 0, 0, 2}, zl[] = {2, 0, 0, 0, 0}, kl[] = {3, 2, 0, 0, 2};
    assert_memory_equal(pr_fside_lengths(t.bp->side, 0), al, sizeof(al));
    assert_memory_equal(pr_fside_lengths(t.bp->side, 1), kl, sizeof(kl));
    assert_memory_equal(pr_fside_lengths(t.bp->side, 2), zl, sizeof(zl));
    pbfx_free(&t);
}

/* Well-known types are messages read by their fields (docs/formats.md):
 * a Timestamp's seconds as the event time, under hour_of_day and age; a
 * StringValue wrapper's value as an id, an absent wrapper missing; the
 * same rows as the same JSON objects. */
static void test_well_known_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t,
              "      event_time: { path: ts.seconds, unit: s }\n"
              "      dense: [ { name: age, path: joined.seconds, ops: [ age, { fill: -1 } ] } ]\n"
              "      sparse:\n"
              "        - { name: h, path: ts.seconds, ops: [hour_of_day] }\n"
              "        - { name: u, path: wuser.value, ops: [vocab] }\n");
    static const char *const evs[] = {
        "{\"i32\": 1, \"ts\": {\"seconds\": 1700000000, \"nanos\": 5}, "
        "\"joined\": {\"seconds\": 1699996400}, \"wuser\": {\"value\": \"u1\"}}",
        "{\"i32\": 0, \"ts\": {\"seconds\": 1700003600}, \"wuser\": {\"value\": \"\"}}",
        "{\"i32\": 0, \"ts\": {\"seconds\": 1700007200}}",
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_both(&t, evs[i], (int64_t)i), 1);
    blocks_equal(t.bj, t.bp);
    pr_fside *sd = t.bp->side;
    assert_true(sd->dense[0] == 3600.0f && sd->dense[1] == -1.0f && sd->dense[2] == -1.0f);
    assert_int_equal(t.bp->event_time_ms[1], 1700003600000LL);
    assert_int_equal(sd->values[0][0], 23); /* 22:13 UTC */
    /* the wrapper ("u1", "" and absent) reads as JSON's {"value": ...} does
     * (blocks_equal above); its keys are the engine's to number */
    assert_int_equal(pr_fside_lengths(sd, 1)[2], 1);
    pbfx_free(&t);
}

/* A google.protobuf.Timestamp read whole (path: ts, unit: rfc3339) is the
 * RFC 3339 string of the same instant: the same rows as JSON events carrying
 * that string (protobuf's JSON mapping of a Timestamp), to the microsecond
 * (the nanos past it cut), before 1970 too: as the event time, under age
 * (a dense feature) and hour_of_day / day_of_week (the op's unit is the event
 * time's), as an id (the text itself), in a repeated field, per element of a
 * repeated message and under a map key (an entry without its value: the
 * epoch, protobuf's default). A Timestamp met twice merges; a Duration reads
 * as its seconds, a number. */
static void test_timestamp_same_as_json(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t,
              "      event_time: { path: ts, unit: rfc3339 }\n"
              "      dense:\n"
              "        - { name: age, path: joined, ops: [ { age: rfc3339 }, { fill: -1 } ] }\n"
              "        - { name: dw, path: dwell_d, default: -1 }\n"
              "      sparse:\n"
              "        - { name: h, path: ts, ops: [hour_of_day] }\n"
              "        - { name: wd, path: ts, ops: [day_of_week] }\n"
              "        - { name: id, path: ts, ops: [vocab] }\n"
              "        - { name: tl, path: times, list: { max_len: 4 }, ops: [hour_of_day] }\n"
              "        - { name: ia, path: items.at, list: { max_len: 4 }, ops: [day_of_week] }\n"
              "        - { name: tm, path: tmap.a, ops: [hour_of_day] }\n");
    static const struct {
        const char *json, *pb;
    } evs[] = {
        {"{\"i32\": 1, \"ts\": \"2026-11-29T08:00:00.123456789Z\", "
         "\"joined\": \"2026-11-29T07:00:00.000000999Z\", \"dwell_d\": 2.5, "
         "\"times\": [\"2026-11-30T23:30:00Z\", \"1969-12-31T12:00:00.5Z\"], "
         "\"items\": [{\"at\": \"2026-12-01T00:00:00.001Z\"}, {\"n\": 1}], "
         "\"tmap\": {\"a\": \"2026-11-29T07:00:00Z\"}}",
         "{\"i32\": 1, \"ts\": {\"seconds\": 1795939200, \"nanos\": 123456789}, "
         "\"joined\": {\"seconds\": 1795935600, \"nanos\": 999}, "
         "\"dwell_d\": {\"seconds\": 2, \"nanos\": 500000000}, "
         "\"times\": [{\"seconds\": 1796081400}, {\"seconds\": -43200, \"nanos\": 500000000}], "
         "\"items\": [{\"at\": {\"seconds\": 1796083200, \"nanos\": 1000000}}, {\"n\": 1}], "
         "\"tmap\": {\"a\": {\"seconds\": 1795935600}}}"},
        {"{\"i32\": 0, \"ts\": \"1969-12-31T23:59:59.500Z\", \"joined\": \"1970-01-01T00:00:00Z\", "
         "\"dwell_d\": -0.25}",
         "{\"i32\": 0, \"ts\": {\"seconds\": -1, \"nanos\": 500000000}, \"joined\": {}, "
         "\"dwell_d\": {\"nanos\": -250000000}}"},
        {"{\"i32\": 0, \"joined\": \"2026-11-29T07:00:00Z\", \"tmap\": {\"a\": "
         "\"1970-01-01T00:00:00Z\"}}",
         "{\"i32\": 0, \"joined\": {\"seconds\": 1795935600}, \"tmap\": {\"a\": {}}}"},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_pair(&t, evs[i].json, evs[i].pb, (int64_t)i), 1);
    /* ts (40) as two messages, {seconds: 1} then {nanos: 5}: merged */
    static const uint8_t twice[] = {0x08, 0x01, 0xc2, 0x02, 0x02, 0x08,
                                    0x01, 0xc2, 0x02, 0x02, 0x10, 0x05};
    assert_int_equal(pbfx_raw(&t, "{\"i32\": 1, \"ts\": \"1970-01-01T00:00:01.000000005Z\"}", twice,
                              sizeof(twice), 3),
                     1);
    blocks_equal(t.bj, t.bp);
    pr_fside *sd = t.bp->side;
    assert_int_equal(t.bp->event_time_ms[0], 1795939200123LL);
    assert_int_equal(t.bp->event_time_ms[1], -500); /* floored, as the rfc3339 string's */
    assert_int_equal(t.bp->event_time_ms[3], 1000);
    /* to the microsecond: 08:00:00.123456 - 07:00:00.000000 (ts.seconds said 3600 s) */
    assert_true(sd->dense[0] == (float)3600.123456 && sd->dense[1] == 2.5f);
    assert_true(sd->dense[2] == -0.5f && sd->dense[3] == -0.25f); /* 23:59:59.5 before 1970 */
    assert_true(sd->dense[4] == -1.0f && sd->dense[5] == -1.0f);  /* no event time: no age */
    assert_int_equal(sd->values[0][0], 9);                        /* 08:00 UTC */
    assert_int_equal(sd->values[0][1], 24);                       /* 23:59 */
    assert_int_equal(sd->values[1][0], 7);                        /* a Sunday */
    static const int32_t tl[] = {2, 0, 0, 0};
    assert_memory_equal(pr_fside_lengths(sd, 3), tl, sizeof(tl));
    assert_int_equal(sd->values[3][0], 24); /* 23:30 */
    assert_int_equal(sd->values[3][1], 13); /* 12:00 */
    pbfx_free(&t);
}

/* `piperec produce --format protobuf` takes a Timestamp or Duration as
 * protobuf's JSON mapping writes it: an RFC 3339 string ("Z" or an offset,
 * before 1970 too), "2.5s" / "-0.25s" for a Duration; the same rows as the
 * {"seconds", "nanos"} spelling. A string that is neither is refused,
 * naming the field. */
static void test_timestamp_strings_encode(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t,
              "      event_time: { path: ts, unit: rfc3339 }\n"
              "      dense:\n"
              "        - { name: age, path: joined, ops: [ { age: rfc3339 }, { fill: -1 } ] }\n"
              "        - { name: dw, path: dwell_d, default: -1 }\n"
              "      sparse:\n"
              "        - { name: tl, path: times, list: { max_len: 4 }, ops: [hour_of_day] }\n");
    static const struct {
        const char *json, *pb;
    } evs[] = {
        {"{\"i32\": 1, \"ts\": \"2026-11-29T08:00:00.123456Z\", "
         "\"joined\": \"2026-11-29T07:00:00Z\", \"dwell_d\": 2.5, "
         "\"times\": [\"2026-11-30T23:30:00Z\", \"1969-12-31T12:00:00.5Z\"]}",
         "{\"i32\": 1, \"ts\": \"2026-11-29T09:00:00.123456789+01:00\", "
         "\"joined\": \"2026-11-29T07:00:00Z\", \"dwell_d\": \"2.5s\", "
         "\"times\": [\"2026-11-30T23:30:00Z\", \"1969-12-31T12:00:00.5Z\"]}"},
        {"{\"i32\": 0, \"ts\": \"1969-12-31T23:59:59.5Z\", \"dwell_d\": -0.25}",
         "{\"i32\": 0, \"ts\": \"1969-12-31T23:59:59.500Z\", \"dwell_d\": \"-0.25s\"}"},
        {"{\"i32\": 0, \"ts\": \"1970-01-01T00:00:00Z\", \"dwell_d\": 3}",
         "{\"i32\": 0, \"ts\": \"1970-01-01T00:00:00Z\", \"dwell_d\": \"3s\"}"},
    };
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        assert_int_equal(pbfx_pair(&t, evs[i].json, evs[i].pb, (int64_t)i), 1);
    blocks_equal(t.bj, t.bp);
    assert_int_equal(t.bp->event_time_ms[0], 1795939200123LL);
    assert_int_equal(t.bp->event_time_ms[1], -500);
    /* the second spelling gives the same message bytes */
    char err[256];
    uint8_t *a = NULL, *b = NULL;
    size_t ca = 0, cb = 0;
    static const char s1[] = "{\"ts\": \"1969-12-31T23:59:59.5Z\", \"dwell_d\": \"-0.25s\"}";
    static const char s2[] = "{\"ts\": {\"seconds\": -1, \"nanos\": 500000000}, "
                             "\"dwell_d\": {\"nanos\": -250000000}}";
    int na = pr_pbuser_encode_json(t.desc, s1, strlen(s1), false, 0, &a, &ca, err, sizeof(err));
    int nb = pr_pbuser_encode_json(t.desc, s2, strlen(s2), false, 0, &b, &cb, err, sizeof(err));
    assert_true(na > 0 && na == nb);
    assert_memory_equal(a, b, (size_t)na);
    static const char *const bad[] = {"{\"ts\": \"yesterday\"}", "{\"dwell_d\": \"2.5\"}",
                                      "{\"dwell_d\": \"1.5m\"}", "{\"ts\": \"\"}"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        assert_true(pr_pbuser_encode_json(t.desc, bad[i], strlen(bad[i]), false, 0, &a, &ca, err,
                                          sizeof(err)) < 0);
        assert_non_null(strstr(err, strstr(bad[i], "ts") ? "RFC 3339" : "duration"));
    }
    free(a);
    free(b);
    pbfx_free(&t);
}

/* A Timestamp or Duration out of its type's range rejects the record
 * bad_time, naming the field, as an unreadable RFC 3339 string does in
 * JSON: negative nanos, nanos of 1e9, a year past 9999 or before 1, a
 * Duration whose seconds and nanos disagree in sign or beyond 10000 years;
 * the range's ends read. A wire type its seconds or nanos cannot have is
 * bad_protobuf; its other fields are skipped. */
static void test_timestamp_rejects(void **state)
{
    (void)state;
    pbfx t;
    pbfx_init(&t, "      event_time: { path: ts, unit: rfc3339 }\n"
                  "      dense: [ { name: dw, path: dwell_d, default: 0 } ]\n");
    static const char *const bad[] = {
        "{\"i32\": 1, \"ts\": {\"seconds\": 5, \"nanos\": -1}}",
        "{\"i32\": 1, \"ts\": {\"seconds\": 5, \"nanos\": 1000000000}}",
        "{\"i32\": 1, \"ts\": {\"seconds\": 253402300800}}",
        "{\"i32\": 1, \"ts\": {\"seconds\": -62135596801}}",
        "{\"i32\": 1, \"ts\": {\"seconds\": -9223372036854775808}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(pbfx_pair(&t, "{\"i32\": 1, \"ts\": \"not a time\"}", bad[i], 0), 0);
        assert_int_equal(t.rp.last, PR_DEC_BAD_TIME);
    }
    assert_string_equal(t.rp.detail, "field 'ts': google.protobuf.Timestamp out of its range "
                                     "(seconds -9223372036854775808, nanos 0)");
    /* the range's ends are times; past them none */
    assert_int_equal(pbfx_pair(&t, "{\"i32\": 1, \"ts\": \"9999-12-31T23:59:59.999999999Z\"}",
                               "{\"i32\": 1, \"ts\": {\"seconds\": 253402300799, "
                               "\"nanos\": 999999999}}",
                               1),
                     1);
    assert_int_equal(pbfx_pair(&t,
                               "{\"i32\": 1, \"ts\": \"0001-01-01T00:00:00Z\", \"dwell_d\": -1}",
                               "{\"i32\": 1, \"ts\": {\"seconds\": -62135596800}, \"dwell_d\": "
                               "{\"seconds\": -1}}",
                               2),
                     1);
    blocks_equal(t.bj, t.bp);
    pbfx_free(&t);
    /* the reader alone */
    static const pr_json_path p[] = {SC("ts"), SC("dwell_d"), SC("tmap.a")};
    rfx r;
    rfx_init(&r, "t3.All", p, 3, PR_PB_FRAMING_NONE);
    want_bad(&r, "\xc2\x02\x02\x10\x7f\xc2\x02\x0b\x10\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 19,
             PR_DEC_BAD_TIME, "(seconds 0, nanos -1)"); /* the last nanos wins */
    assert_int_equal(read_json(&r, "{\"dwell_d\": {\"seconds\": 1, \"nanos\": -1}}"),
                     PR_DEC_BAD_TIME);
    assert_string_equal(r.rej.detail, "field 'dwell_d': google.protobuf.Duration out of its range "
                                      "(seconds 1, nanos -1)");
    assert_int_equal(read_json(&r, "{\"dwell_d\": {\"seconds\": 315576000001}}"), PR_DEC_BAD_TIME);
    assert_int_equal(read_json(&r, "{\"dwell_d\": {\"nanos\": -1000000000}}"), PR_DEC_BAD_TIME);
    want_bad(&r, "\xc2\x02\x02\x0d\x01", 5, PR_DEC_BAD_PROTOBUF,
             "field 'ts.seconds' (1): wire type 5, expected 0");
    want_bad(&r, "\xc2\x02\x02\x12\x00", 5, PR_DEC_BAD_PROTOBUF,
             "field 'ts.nanos' (2): wire type 2, expected 0");
    want_bad(&r, "\xc2\x02\x01\x18", 4, PR_DEC_BAD_PROTOBUF, "truncated varint at byte 4");
    assert_int_equal(read_bytes(&r, "\xc2\x02\x04\x08\x02\x18\x07", 7), 0); /* field 3 skipped */
    const pr_json_any *a = val(&r, 0, 0);
    assert_int_equal(a->type, PR_JSON_STRING);
    assert_int_equal(a->s.len, 20);
    assert_memory_equal(r.jb->arena + a->s.off, "1970-01-01T00:00:02Z", 20);
    /* tmap (45): an entry "a" without its value: the type's default, the epoch */
    assert_int_equal(read_bytes(&r, "\xea\x02\x03\x0a\x01\x61", 6), 0);
    a = val(&r, 2, 0);
    assert_int_equal(a->s.len, 20);
    assert_memory_equal(r.jb->arena + a->s.off, "1970-01-01T00:00:00Z", 20);
    assert_int_equal(r.jb->cols[0].present[0], PR_JSON_ABSENT);
    rfx_free(&r);
}

/* A Timestamp read whole is a time in unit rfc3339: the event time and a
 * first hour_of_day / day_of_week / age step in s, ms or us are refused at
 * load, naming the key and the spelling (its seconds keep unit s); a
 * Duration is a number; the field read whole and by its fields is
 * refused, as an object's would be; a map of Timestamps is not a list. */
static void test_timestamp_config(void **state)
{
    (void)state;
    all_config("        - { name: h, path: ts, ops: [hour_of_day] }\n"
               "        - { name: t, path: times, list: { max_len: 2 }, ops: [day_of_week] }\n"
               "        - { name: i, path: items.at, list: { max_len: 2 }, ops: [vocab] }\n"
               "      dense: [ { name: a, path: joined, ops: [ { age: rfc3339 } ] },\n"
               "               { name: d, path: dwell_d, ops: [ log1p ] } ]\n"
               "      event_time: { path: ts, unit: rfc3339 }\n",
               NULL);
    all_config("        - { name: h, path: joined.seconds, ops: [hour_of_day] }\n"
               "      event_time: { path: ts.seconds, unit: s }\n",
               NULL);
    static const struct {
        const char *yaml, *want;
    } bad[] = {
        {"        - { name: u, path: wuser.value, ops: [vocab] }\n"
         "      event_time: { path: ts, unit: ms }\n",
         "schema.event_time.path: 'ts' in message t3.All is a google.protobuf.Timestamp, read as "
         "its RFC 3339 text (not in ms): give unit: rfc3339 (or the path ts.seconds, to the "
         "second)"},
        {"        - { name: h, path: joined, ops: [hour_of_day] }\n"
         "      event_time: { path: ts.seconds, unit: s }\n",
         "schema.sparse[0].path: 'joined' in message t3.All is a google.protobuf.Timestamp, read "
         "as its RFC 3339 text (not in s): give { hour_of_day: rfc3339 }"},
        {"        - { name: t, path: times, list: { max_len: 2 }, ops: [ { day_of_week: us } ] }\n",
         "schema.sparse[0].path: 'times' in message t3.All is a google.protobuf.Timestamp"},
        {"        - { name: u, path: wuser.value, ops: [vocab] }\n"
         "      dense: [ { name: a, path: joined, ops: [ { age: s } ] } ]\n"
         "      event_time: { path: ts, unit: rfc3339 }\n",
         "schema.dense[0].path: 'joined' in message t3.All is a google.protobuf.Timestamp, read "
         "as its RFC 3339 text (not in s): give { age: rfc3339 }"},
        {"        - { name: u, path: wuser.value, ops: [vocab] }\n"
         "      dense: [ { name: a, path: joined } ]\n",
         "schema.dense[0].path: 'joined' in message t3.All: it gives a string, and a dense "
         "feature needs a number"},
        {"        - { name: d, path: dwell_d, ops: [vocab] }\n",
         "'dwell_d' in message t3.All: it gives a number, and 'vocab' needs"},
        {"        - { name: h, path: ts, ops: [ { hour_of_day: rfc3339 } ] }\n"
         "        - { name: s, path: ts.seconds, ops: [vocab] }\n",
         "'ts.seconds' is inside 'ts'"},
        {"        - { name: m, path: tmap, list: { max_len: 2, from: values }, ops: [vocab] }\n",
         "'tmap' in message t3.All: a map of message values"},
        {"        - { name: m, path: wuser, ops: [vocab] }\n",
         "'wuser' is a message (google.protobuf.StringValue): name one of its fields"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        all_config(bad[i].yaml, bad[i].want);
}

/* The descriptor set and maps read by their keys: a map field of any key
 * type loads, weighted by number values; a field that is no map is refused
 * naming schema.sparse[i].path, values that are no numbers naming
 * schema.sparse[i].weights.from, a map under a repeated message too. */
static void test_map_keys_config(void **state)
{
    (void)state;
    all_config(
        "        - { name: w, path: wmap, list: { max_len: 2, from: keys },\n"
        "            weights: { from: values }, ops: [vocab] }\n"
        "        - { name: i, path: imap, list: { max_len: 2, from: keys },\n"
        "            weights: { from: values, default: 1 }, ops: [vocab] }\n"
        "        - { name: z, path: zmap, list: { max_len: 2, from: keys },\n"
        "            weights: { from: values }, ops: [vocab] }\n"
        "        - { name: u, path: umap, list: { max_len: 2, from: keys },\n"
        "            weights: { from: values }, ops: [ { hash: 10 } ] }\n"
        "        - { name: a, path: attrs, list: { max_len: 2, from: keys }, ops: [vocab] }\n"
        "        - { name: o, path: objs, list: { max_len: 2, from: keys }, ops: [vocab] }\n",
        NULL);
    static const struct {
        const char *path, *weights, *want;
    } bad[] = {
        {"names", "",
         "schema.sparse[1].path: 'names' is not a map field (repeated, a string): list: { from: "
         "keys } reads a map"},
        {"str", "", "schema.sparse[1].path: 'str' is not a map field (a string)"},
        {"inner", "", "schema.sparse[1].path: 'inner' is not a map field (a message)"},
        {"items", "", "schema.sparse[1].path: 'items' is not a map field (repeated, a message)"},
        {"items.m", "", "schema.sparse[1].path: 'm' is a map inside the repeated message 'items'"},
        {"wmap.a", "",
         "schema.sparse[1].path: 'wmap.a' names a key of the map 'wmap', not a map field"},
        {"objs.a", "", "schema.sparse[1].path: 'objs.a' names a key of the map 'objs'"},
        {"nosuch", ", weights: { from: values }",
         "schema.sparse[1].path: message t3.All has no field 'nosuch'"},
        {"attrs", ", weights: { from: values }",
         "schema.sparse[1].weights.from: 'attrs' in message t3.All: a map of string, bytes, enum "
         "or bool values, and weights are numbers"},
        {"cmap", ", weights: { from: values }",
         "schema.sparse[1].weights.from: 'cmap' in message t3.All: a map of string"},
        {"bmap", ", weights: { from: values }",
         "schema.sparse[1].weights.from: 'bmap' in message t3.All: a map of string"},
        {"objs", ", weights: { from: values }",
         "schema.sparse[1].weights.from: 'objs' in message t3.All: a map of message values"},
    };
    char y[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(
            y, sizeof(y),
            "        - { name: a, path: hist, list: { max_len: 3 }, ops: [vocab] }\n"
            "        - { name: b, path: %s, list: { max_len: 3, from: keys }%s, ops: [vocab] }\n",
            bad[i].path, bad[i].weights);
        all_config(y, bad[i].want);
    }
}

/* The descriptor set and from: values: a map of strings, integers, bools
 * or enums loads (and shares a table with a plain field); a map of
 * messages is refused naming schema.sparse[i].path, a map of doubles for
 * vocab too, and weights beside from: values naming weights.from. */
static void test_map_values_config(void **state)
{
    (void)state;
    all_config(
        "        - { name: a, path: attrs, list: { max_len: 2, from: values }, ops: [vocab] "
        "}\n"
        "        - { name: z, path: zmap, list: { max_len: 2, from: values }, ops: [vocab] }\n"
        "        - { name: u, path: umap, list: { max_len: 2, from: values }, ops: [vocab] }\n"
        "        - { name: b, path: bmap, list: { max_len: 2, from: values }, ops: [vocab] }\n"
        "        - { name: c, path: cmap, list: { max_len: 2, from: values }, ops: [vocab] }\n"
        "        - { name: s, path: str, ops: [vocab], table: a }\n",
        NULL);
    static const struct {
        const char *path, *more, *want;
    } bad[] = {
        {"objs", "",
         "schema.sparse[0].path: 'objs' in message t3.All: a map of message values, and from: "
         "values makes each value an id"},
        {"wmap", "",
         "schema.sparse[0].path: 'wmap' in message t3.All: it gives a number, and 'vocab' needs"},
        {"names", "", "schema.sparse[0].path: 'names' is not a map field"},
        {"imap", ", weights: { from: values }",
         "schema.sparse[0].weights.from: list: { from: values } makes ids of the map's values"},
    };
    char y[512];
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(
            y, sizeof(y),
            "        - { name: b, path: %s, list: { max_len: 3, from: values }%s, ops: [vocab] "
            "}\n",
            bad[i].path, bad[i].more);
        all_config(y, bad[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_as_json),
        cmocka_unit_test(test_same_as_json_framed),
        cmocka_unit_test(test_filter_same_as_json),
        cmocka_unit_test(test_in_same_as_json),
        cmocka_unit_test(test_in_repeated_alone),
        cmocka_unit_test(test_filter_repeated_alone),
        cmocka_unit_test(test_scalar_types),
        cmocka_unit_test(test_python_reference),
        cmocka_unit_test(test_presence),
        cmocka_unit_test(test_repeated_maps),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_reject_through_decoder),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_lists_of_messages),
        cmocka_unit_test(test_lists_of_messages_same_as_json),
        cmocka_unit_test(test_dense_vectors_same_as_json),
        cmocka_unit_test(test_weighted_lists_same_as_json),
        cmocka_unit_test(test_aligned_over_messages),
        cmocka_unit_test(test_weighted_messages_aligned),
        cmocka_unit_test(test_weighted_config),
        cmocka_unit_test(test_dense_vector_bytes_same_as_json),
        cmocka_unit_test(test_map_keys_reader),
        cmocka_unit_test(test_map_keys_big),
        cmocka_unit_test(test_map_keys_nested),
        cmocka_unit_test(test_map_keys_refused),
        cmocka_unit_test(test_map_keys_same_as_json),
        cmocka_unit_test(test_map_keys_config),
        cmocka_unit_test(test_map_values_same_as_json),
        cmocka_unit_test(test_well_known_same_as_json),
        cmocka_unit_test(test_timestamp_same_as_json),
        cmocka_unit_test(test_timestamp_strings_encode),
        cmocka_unit_test(test_timestamp_rejects),
        cmocka_unit_test(test_timestamp_config),
        cmocka_unit_test(test_map_values_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
