/*
 * fuzz_pbuser.c — libFuzzer target for the user-Protobuf reader
 * (ingest/pbuser_decode.c) through the JSON decoder, as source.format
 * protobuf runs it: t3.All of tests/data/pbuser_types.proto (every scalar
 * type, packed and unpacked lists, maps with string and integer keys, a
 * message-valued map, oneof, enums, nested messages, Timestamps and a
 * Duration read whole) under a declared schema reading all of them.
 *
 * Input: one flags byte, then the message.
 *   bit 0: framing registry (else auto)
 *   bit 1: a 64-row block (else 1024 rows)
 * Checks, beyond no crash / leak / UB / hang:
 *   - the return is 1 (row appended), 0 (rejected: exactly one reject, with
 *     a named reason) or PR_EFULL (only when the block is full);
 *   - a rejected message leaves the block as it was (rows, the elements of
 *     every vocab column, the values of every side feature);
 *   - an appended row has length 1 per single-valued feature and at most
 *     max_len per list;
 *   - decoding is a function of the bytes: the same message again in a fresh
 *     block gives the same result.
 * The descriptor set is written by protoc at build time (PR_FUZZ_PBUSER_DESC).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_config.h"
#include "pr_ingest.h"
#include "pr_log.h"

static const char yaml_fmt[] =
    "pipelines:\n"
    "  - name: f\n"
    "    source:\n"
    "      format: protobuf\n"
    "      protobuf: { descriptor_set: \"%s\", message: t3.All, framing: %s }\n"
    "    schema:\n"
    "      event_time: { path: sf64, unit: ms }\n"
    "      labels: [ { name: y, path: i32 }, { name: z, path: opt, default: 0 },\n"
    "                { name: ci, path: color, in: [1, RED] }, { name: ni, path: names, in: [a] } "
    "]\n"
    "      dense: [ { name: d, path: db, ops: [ { clip: [0, 9] }, log1p ] }, "
    "{ name: g, path: fl },\n"
    "               { name: dd, path: dwell_d }, "
    "{ name: ja, path: joined, ops: [ { age: rfc3339 }, { fill: 0 } ] } ]\n"
    "      sparse:\n"
    "        - { name: s, path: str, ops: [vocab] }\n"
    "        - { name: u, path: u64, ops: [vocab] }\n"
    "        - { name: c, path: color, ops: [vocab] }\n"
    "        - { name: p, path: packed, list: { max_len: 4, keep: last }, ops: [vocab] }\n"
    "        - { name: q, path: unpacked, list: { max_len: 3 }, ops: [ { hash: 97 } ] }\n"
    "        - { name: n, path: names, list: { max_len: 5 }, ops: [vocab] }\n"
    "        - { name: k, path: attrs.k1, default: none, ops: [vocab] }\n"
    "        - { name: o, path: objs.a.s, ops: [vocab] }\n"
    "        - { name: sc, path: scores.-3, ops: [ { bucketize: [0, 1] } ] }\n"
    "        - { name: on, path: one_n, ops: [vocab] }\n"
    "        - { name: os, path: one_s, ops: [vocab] }\n"
    "        - { name: in, path: inner.n, ops: [vocab] }\n"
    "        - { name: cl, path: colors, list: { max_len: 4 }, ops: [vocab] }\n"
    "        - { name: z3, path: s32, ops: [vocab] }\n"
    "        - { name: by, path: by, ops: [ { hash: 1000 } ] }\n"
    "        - { name: wm, path: wmap, list: { max_len: 20, from: keys },\n"
    "            weights: { from: values, default: 1 }, ops: [vocab] }\n"
    "        - { name: im, path: imap, list: { max_len: 3, from: keys, keep: last },\n"
    "            weights: { from: values }, ops: [vocab] }\n"
    "        - { name: cm, path: cmap, list: { max_len: 4, from: keys }, ops: [vocab] }\n"
    "        - { name: ce, path: cmap, list: { max_len: 4, from: entries }, ops: [vocab] }\n"
    "        - { name: cv, path: cmap, list: { max_len: 3, from: values }, ops: [vocab] }\n"
    "        - { name: x, cross: [inner.c, f32], ops: [ { hash: 1000 } ] }\n"
    "        - { name: th, path: ts, ops: [ { hour_of_day: rfc3339 } ] }\n"
    "        - { name: tl, path: times, list: { max_len: 3 }, ops: [ { day_of_week: rfc3339 } ] }\n"
    "        - { name: tm, path: tmap.a, ops: [vocab] }\n"
    "        - { name: ia, path: items.at, list: { max_len: 2 }, ops: [vocab] }\n";

typedef struct fuzz_setup {
    pr_config *cfg;
    pr_json_decoder *dec;
    pr_pbuser_desc *desc;
    pr_pbuser_reader *rd;
} fuzz_setup;

static fuzz_setup g_fx[2]; /* [0] framing auto, [1] registry */
static pr_block *g_blk[2];

static void fuzz_init(void)
{
    char yaml[4096], err[512];
    pr_log_set_level(PR_LOG_ERROR);
    for (int i = 0; i < 2; i++) {
        fuzz_setup *s = &g_fx[i];
        snprintf(yaml, sizeof(yaml), yaml_fmt, PR_FUZZ_PBUSER_DESC, i ? "registry" : "auto");
        if (pr_config_load_string(yaml, strlen(yaml), "fuzz.yaml", &s->cfg, err, sizeof(err)) ||
            !(s->dec = pr_json_decoder_new(&s->cfg->pipelines[0].features, err, sizeof(err))) ||
            pr_pbuser_attach(s->dec, &s->cfg->pipelines[0].source.protobuf, &s->desc, &s->rd, err,
                             sizeof(err))) {
            fprintf(stderr, "fuzz_pbuser: %s\n", err);
            abort();
        }
    }
    for (int i = 0; i < 2; i++) {
        g_blk[i] = pr_feature_block_new(&g_fx[0].cfg->pipelines[0].features, i ? 1024 : 64, true);
        FUZZ_CHECK(g_blk[i] != NULL);
    }
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

static void check_row(const pr_feature_schema *fs, const pr_block *b, uint32_t r)
{
    const pr_fside *s = b->side;
    uint16_t f = 0;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *fe = &fs->features[i];
        if (fe->kind != PR_FEAT_SPARSE && fe->kind != PR_FEAT_LIST)
            continue;
        int32_t len = s->lengths[(size_t)f * s->cap + r];
        FUZZ_CHECK(fe->kind == PR_FEAT_LIST ? len >= 0 && (uint32_t)len <= fe->max_len : len == 1);
        f++;
    }
}

static int decode(fuzz_setup *s, pr_block *b, const uint8_t *msg, size_t len, fuzz_rejects *rl)
{
    pr_decode_ctx ctx = {.json = s->dec, .on_reject = fuzz_on_reject, .opaque = rl};
    uint32_t next = 0;
    return pr_decode_message(PR_MSG_PROTOBUF, &ctx, b, msg, len, &next, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_fx[0].dec)
        fuzz_init();
    if (size < 1)
        return 0;
    fuzz_setup *s = &g_fx[data[0] & 1];
    pr_block *b = g_blk[data[0] & 2 ? 0 : 1];
    const uint8_t *msg = data + 1;
    size_t len = size - 1;
    fuzz_rejects rl = {0};
    if (b->rows == b->cap)
        pr_block_reset(b);
    counts before, after;
    snap(b, &before);
    int rc = decode(s, b, msg, len, &rl);
    snap(b, &after);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == PR_EFULL);
    if (rc != 1) {
        FUZZ_CHECK(memcmp(&before, &after, sizeof(before)) == 0);
        FUZZ_CHECK(rc == PR_EFULL ? rl.n == 0 : rl.n == 1);
        if (rc == 0)
            FUZZ_CHECK(strcmp(pr_decode_reason_name(rl.reason[0]), "unknown") != 0);
        if (rc == PR_EFULL)
            pr_block_reset(b);
    } else {
        FUZZ_CHECK(rl.n == 0 && after.rows == before.rows + 1);
        check_row(&s->cfg->pipelines[0].features, b, before.rows);
    }
    /* The same bytes in a fresh block: the same outcome and row lengths. */
    pr_block *o = g_blk[data[0] & 2 ? 1 : 0];
    pr_block_reset(o);
    fuzz_rejects r2 = {0};
    int rc2 = decode(s, o, msg, len, &r2);
    FUZZ_CHECK(rc2 == (rc == PR_EFULL ? 1 : rc) || (rc == PR_EFULL && rc2 == 0));
    if (rc == 1) {
        const pr_fside *x = b->side, *y = o->side;
        for (uint16_t f = 0; f < x->n_feat; f++)
            FUZZ_CHECK(x->lengths[(size_t)f * x->cap + before.rows] == y->lengths[f * y->cap]);
        FUZZ_CHECK(memcmp(x->labels + (size_t)before.rows * x->n_labels, y->labels,
                          x->n_labels * sizeof(float)) == 0);
    }
    if (rc == 0)
        FUZZ_CHECK(r2.n == 1 && r2.reason[0] == rl.reason[0] &&
                   !strcmp(r2.detail[0], rl.detail[0]));
    pr_block_reset(o);
    return 0;
}
