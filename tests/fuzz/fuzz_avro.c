/*
 * fuzz_avro.c — libFuzzer target for the Avro reader (ingest/avro_reader.c)
 * through the JSON decoder (pr_decode_message, source.format avro) with a
 * fixed writer schema that has every Avro type a path can meet: records,
 * unions with null, arrays (wanted and skipped, with sized blocks), maps
 * (wanted keys and skipped values), enums, fixed, bytes, a decimal, floats,
 * a recursive record (skipped).
 *
 * Input: one flags byte, then the message.
 *   bit 0: a 64-row block (else 1024 rows)
 *   bit 1: registry framing expected (magic byte 0 + 4-byte id, then the body)
 * Checks, beyond no crash / leak / UB / hang:
 *   - the return is 1 (row appended), 0 (rejected, exactly one reject with a
 *     named reason) or PR_EFULL (only when the block is full); never
 *     PR_EAGAIN (a fixed schema needs no registry);
 *   - a rejected record leaves the block as it was (rows, elements of every
 *     vocab column, values of every side feature);
 *   - decoding is a function of the message: the same message in a fresh
 *     block gives the same labels, keys and values.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_config.h"
#include "pr_ingest.h"
#include "pr_log.h"

static const char yaml[] =
    "pipelines:\n"
    "  - name: f\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      event_time: { path: ts, unit: ms }\n"
    "      labels: [ { name: y, path: y }, { name: z, path: m.z, default: 0 },\n"
    "                { name: ki, path: kind, in: [a, 1] }, { name: si, path: strs, in: [x] } ]\n"
    "      dense: [ { name: d, path: dec, default: 1, ops: [ { clip: [0, 9] }, log1p ] },\n"
    "               { name: f, path: f } ]\n"
    "      sparse:\n"
    "        - { name: u, path: u.id, ops: [vocab] }\n"
    "        - { name: k, path: kind, default: none, ops: [vocab] }\n"
    "        - { name: h, path: h, list: { max_len: 4, keep: last }, ops: [vocab] }\n"
    "        - { name: t, path: m.tag, ops: [ { hash: 97 } ] }\n"
    "        - { name: x, path: fx, ops: [vocab] }\n"
    "        - { name: b, path: raw, ops: [vocab] }\n"
    "        - { name: s, path: strs, list: { max_len: 3 }, ops: [vocab] }\n"
    "        - { name: cx, cross: [kind, u.id], ops: [ { hash: 1000 } ] }\n"
    "        - { name: wm, path: wm, list: { max_len: 20, from: keys },\n"
    "            weights: { from: values, default: 1 }, ops: [vocab] }\n"
    "        - { name: we, path: wm, list: { max_len: 5, from: entries }, ops: [vocab] }\n"
    "        - { name: wv, path: wm, list: { max_len: 4, from: values, keep: last },\n"
    "            ops: [ { bucketize: [0, 1, 10] } ] }\n";

static const char avsc[] =
    "{\"type\":\"record\",\"name\":\"R\",\"fields\":["
    "{\"name\":\"ts\",\"type\":[\"null\",\"long\"]},"
    "{\"name\":\"y\",\"type\":\"double\"},"
    "{\"name\":\"skip\",\"type\":{\"type\":\"array\",\"items\":{\"type\":\"map\",\"values\":"
    "[\"null\",\"string\",\"float\"]}}},"
    "{\"name\":\"u\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"U\",\"fields\":["
    "{\"name\":\"id\",\"type\":[\"string\",\"long\"]},{\"name\":\"b\",\"type\":\"boolean\"}]}]},"
    "{\"name\":\"kind\",\"type\":{\"type\":\"enum\",\"name\":\"K\",\"symbols\":[\"a\",\"b\",\"c\"]}"
    "},"
    "{\"name\":\"h\",\"type\":{\"type\":\"array\",\"items\":\"long\"}},"
    "{\"name\":\"m\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"int\",\"string\"]}},"
    "{\"name\":\"dec\",\"type\":{\"type\":\"bytes\",\"logicalType\":\"decimal\",\"precision\":9,"
    "\"scale\":2}},"
    "{\"name\":\"f\",\"type\":\"float\"},"
    "{\"name\":\"fx\",\"type\":{\"type\":\"fixed\",\"name\":\"F\",\"size\":3}},"
    "{\"name\":\"raw\",\"type\":[\"null\",\"bytes\"]},"
    "{\"name\":\"strs\",\"type\":[\"null\",{\"type\":\"array\",\"items\":\"string\"}]},"
    "{\"name\":\"tree\",\"type\":[\"null\",{\"type\":\"record\",\"name\":\"Node\",\"fields\":["
    "{\"name\":\"v\",\"type\":\"int\"},{\"name\":\"next\",\"type\":[\"null\",\"Node\"]}]}]},"
    "{\"name\":\"wm\",\"type\":{\"type\":\"map\",\"values\":[\"null\",\"double\"]}}]}";

static pr_config *g_cfg;
static pr_json_decoder *g_dec[2]; /* plain, framed */
static pr_block *g_blk[2];

static void reader_free(void *r)
{
    pr_avro_reader_free(r);
}

static void fuzz_init(void)
{
    char err[512];
    pr_log_set_level(PR_LOG_ERROR);
    if (pr_config_load_string(yaml, sizeof(yaml) - 1, "fuzz.yaml", &g_cfg, err, sizeof(err)))
        goto out_fail;
    for (int i = 0; i < 2; i++) {
        const pr_feature_schema *fs = &g_cfg->pipelines[0].features;
        if (!(g_dec[i] = pr_json_decoder_new(fs, err, sizeof(err))))
            goto out_fail;
        pr_avro_reader *r = pr_avro_reader_new(g_dec[i], avsc, NULL,
                                               i ? PR_AVRO_FRAMING_REGISTRY : PR_AVRO_FRAMING_PLAIN,
                                               0, err, sizeof(err));
        if (!r)
            goto out_fail;
        pr_json_decoder_set_reader_owned(g_dec[i], pr_avro_read, r, reader_free);
        g_blk[i] = pr_feature_block_new(fs, i ? 1024 : 64, true);
        FUZZ_CHECK(g_blk[i] != NULL);
    }
    return;
out_fail:
    fprintf(stderr, "fuzz_avro: %s\n", err);
    abort();
}

typedef struct counts {
    uint32_t rows, col[PR_MAX_SPARSE], val[PR_MAX_SPARSE];
} counts;

static void snap(const pr_block *b, counts *c)
{
    memset(c, 0, sizeof(*c));
    c->rows = b->rows;
    for (uint32_t k = 0; k < b->n_sparse; k++)
        c->col[k] = b->col_rows[k];
    for (uint16_t f = 0; f < b->side->n_feat; f++)
        c->val[f] = b->side->n_values[f];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_cfg)
        fuzz_init();
    if (size < 1)
        return 0;
    pr_block *b = g_blk[data[0] & 1 ? 0 : 1];
    pr_json_decoder *d = g_dec[(data[0] >> 1) & 1];
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    fuzz_rejects rl = {0};
    pr_decode_ctx ctx = {.json = d, .on_reject = fuzz_on_reject, .opaque = &rl};
    if (b->rows == b->cap)
        pr_block_reset(b);
    counts before, after;
    snap(b, &before);
    uint32_t next = 0;
    int rc = pr_decode_message(PR_MSG_AVRO, &ctx, b, msg, len, &next, NULL);
    snap(b, &after);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == PR_EFULL);
    if (rc != 1) {
        FUZZ_CHECK(memcmp(&before, &after, sizeof(before)) == 0);
        FUZZ_CHECK(rc == PR_EFULL ? rl.n == 0 : rl.n == 1);
        if (rc == 0)
            FUZZ_CHECK(strcmp(pr_decode_reason_name(rl.reason[0]), "unknown") != 0);
        if (rc == PR_EFULL)
            pr_block_reset(b);
        return 0;
    }
    FUZZ_CHECK(rl.n == 0 && after.rows == before.rows + 1);
    /* The same message alone in a fresh block: the same row. */
    pr_block *o = g_blk[data[0] & 1 ? 1 : 0];
    pr_block_reset(o);
    FUZZ_CHECK(pr_decode_message(PR_MSG_AVRO, &ctx, o, msg, len, &next, NULL) == 1);
    const pr_fside *s = b->side, *t = o->side;
    FUZZ_CHECK(memcmp(s->labels + (size_t)before.rows * s->n_labels, t->labels,
                      s->n_labels * sizeof(float)) == 0);
    for (uint16_t f = 0; f < s->n_feat; f++) {
        int c = s->vocab_col[f];
        uint32_t n = (uint32_t)s->lengths[(size_t)f * s->cap + before.rows];
        FUZZ_CHECK(n == (uint32_t)t->lengths[f * (size_t)t->cap]);
        if (c >= 0)
            FUZZ_CHECK(memcmp(b->sparse_u64 + (size_t)c * b->scap + before.col[c],
                              o->sparse_u64 + (size_t)c * o->scap, n * sizeof(uint64_t)) == 0);
        else
            FUZZ_CHECK(memcmp(s->values[f] + before.val[f], t->values[f], n * sizeof(int64_t)) ==
                       0);
    }
    pr_block_reset(o);
    return 0;
}
