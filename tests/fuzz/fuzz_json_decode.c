/*
 * fuzz_json_decode.c — libFuzzer target for the JSON decoder through a
 * declared schema (ingest/json_decode.c, pr_decode_json_line): the
 * extractor plus the schema's type rules and operators (defaults, lists with
 * keep last, lists of objects, hex2int, bucketize, hash, a cross,
 * hour_of_day, age, event time, two dense vectors as lists, one as base64 float32
 * bytes, two weighted lists: one over a list of objects with a default, one
 * parallel without), behind a record filter (one condition on a
 * feature's path: the filter's own extraction when a feature refuses) and
 * a keyed downsample with a weight label.
 *
 * Input: one flags byte, then the document.
 *   bit 0: a 64-row block (else 1024 rows)
 * Checks, beyond no crash / leak / UB / hang:
 *   - the return is 1 (row appended), 0 (rejected, exactly one reject with a
 *     named reason, or dropped: filtered or sampled out) or PR_EFULL (only
 *     when the block is full);
 *   - a rejected record leaves the block as it was (rows, elements of every
 *     vocab column, values of every side feature);
 *   - an appended row is consistent: its lengths are the elements each vocab
 *     column gained and the values each side feature gained, single-valued
 *     features have length 1, lists at most max_len, every dense column
 *     (vectors' too) a finite float32;
 *   - decoding is a function of the document: the same document in a fresh
 *     block gives the same row.
 */
#include <math.h>
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
    "      filter: [ { path: kind, not_in: [skip, 3, true] }, { path: u.id, not_in: [x] } ]\n"
    "      downsample: { rate: 0.9, where: { path: l.y, in: [0] }, key: e, weight: w }\n"
    "      event_time: { path: ts, unit: ms }\n"
    "      labels: [ { name: y, path: l.y }, { name: z, path: l.z, default: 0, ops: [ { at_least: "
    "1 } ] },\n"
    "                { name: k, path: kind, in: [go, 3, true] }, { name: ti, path: i.t, in: [a] } "
    "]\n"
    "      dense:\n"
    "        - { name: p, path: i.p, default: 1, ops: [ { clip: [0, 9] }, log1p ] }\n"
    "        - { name: v, path: i.v, dim: 3, default: 2, ops: [ { clip: [-5, 5] } ] }\n"
    "        - { name: iv, path: iv, dim: 2 }\n"
    "        - { name: fb, path: fb, dim: 2, encoding: f32, default: 1 }\n"
    "        - { name: ag, path: i.pt, ops: [ age, { fill: 0 } ] }\n"
    "        - { name: ar, path: i.pr, ops: [ { age: rfc3339 } ] }\n"
    "      sparse:\n"
    "        - { name: u, path: u.id, ops: [vocab] }\n"
    "        - { name: c, path: i.c, default: none, ops: [vocab] }\n"
    "        - { name: h, path: h, list: { max_len: 4, keep: last },\n"
    "            weights: { path: hw, ops: [log1p, { clip: [0, 5] }] },\n"
    "            ops: [vocab] }\n"
    "        - { name: t, path: i.t, list: { max_len: 3 }, ops: [ { hash: 97 } ] }\n"
    "        - { name: x, path: x, ops: [hex2int, vocab] }\n"
    "        - { name: a, path: u.a, ops: [ { bucketize: [1, 10, 100] } ] }\n"
    "        - { name: hr, path: ts, ops: [hour_of_day] }\n"
    "        - { name: cx, cross: [i.c, u.id], ops: [ { hash: 1000 } ] }\n"
    "        - { name: ia, path: imp.ad, list: { max_len: 3, keep: last },\n"
    "            weights: { path: imp.w, default: 1 }, ops: [vocab] }\n"
    "        - { name: ip, path: imp.p, list: { max_len: 5 }, ops: [ { hash: 13 } ] }\n"
    "        - { name: m, path: u.m, list: { max_len: 3, from: keys },\n"
    "            weights: { from: values, default: 0.5 }, ops: [vocab] }\n"
    "        - { name: mk, path: u.m, list: { max_len: 2, from: keys, keep: last }, ops: [vocab] "
    "}\n"
    "        - { name: tg, path: tg, list: { max_len: 4, from: keys }, ops: [ { hash: 7 } ] }\n"
    "        - { name: me, path: u.m, list: { max_len: 3, from: entries, keep: last }, ops: "
    "[vocab] }\n"
    "        - { name: it, path: imp.ad, list: { max_len: 4 }, ops: [vocab], table: ia }\n"
    "        - { name: sv, path: sl, list: { max_len: 3, from: values, keep: last }, ops: "
    "[vocab], table: u }\n";

static pr_config *g_cfg;
static pr_json_decoder *g_dec;
static pr_block *g_blk[2];

static void fuzz_init(void)
{
    char err[512];
    pr_log_set_level(PR_LOG_ERROR);
    if (pr_config_load_string(yaml, sizeof(yaml) - 1, "fuzz.yaml", &g_cfg, err, sizeof(err)) ||
        !(g_dec = pr_json_decoder_new(&g_cfg->pipelines[0].features, err, sizeof(err)))) {
        fprintf(stderr, "fuzz_json_decode: %s\n", err);
        abort();
    }
    for (int i = 0; i < 2; i++) {
        g_blk[i] = pr_feature_block_new(&g_cfg->pipelines[0].features, i ? 1024 : 64, true);
        FUZZ_CHECK(g_blk[i] != NULL);
    }
}

/* Elements per vocab column and values per side feature. */
typedef struct counts {
    uint32_t rows, col[PR_MAX_SPARSE], val[PR_MAX_SPARSE], wts[PR_MAX_SPARSE];
} counts;

static void snap(const pr_block *b, counts *c)
{
    memset(c, 0, sizeof(*c));
    c->rows = b->rows;
    for (uint32_t k = 0; k < b->n_sparse; k++)
        c->col[k] = b->col_rows[k];
    for (uint16_t f = 0; f < b->side->n_feat; f++) {
        c->val[f] = b->side->n_values[f];
        c->wts[f] = b->side->n_weights[f];
    }
}

static void check_row(const pr_block *b, const counts *before)
{
    const pr_fside *s = b->side;
    uint32_t r = before->rows;
    const pr_feature_schema *fs = &g_cfg->pipelines[0].features;
    uint16_t f = 0;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *fe = &fs->features[i];
        if (fe->kind != PR_FEAT_SPARSE && fe->kind != PR_FEAT_LIST)
            continue;
        int32_t len = s->lengths[(size_t)f * s->cap + r];
        FUZZ_CHECK(fe->kind == PR_FEAT_LIST ? len >= 0 && (uint32_t)len <= fe->max_len : len == 1);
        int c = s->vocab_col[f];
        if (c >= 0) /* a shared table's column: its features' row lengths summed */
            FUZZ_CHECK(b->col_rows[c] - before->col[c] == pr_fside_col_len(s, c, r));
        else
            FUZZ_CHECK(s->n_values[f] - before->val[f] == (uint32_t)len);
        /* a weighted list: one finite float32 weight per element */
        FUZZ_CHECK(!pr_feature_weighted(fe) == !s->weights[f]);
        if (s->weights[f]) {
            FUZZ_CHECK(s->n_weights[f] - before->wts[f] == (uint32_t)len);
            for (uint32_t k = before->wts[f]; k < s->n_weights[f]; k++)
                FUZZ_CHECK(isfinite(s->weights[f][k]));
        }
        f++;
    }
    /* every dense column (a vector's included) a finite float32 */
    FUZZ_CHECK(s->n_dense == pr_feature_schema_dense_cols(fs));
    for (uint16_t c = 0; c < s->n_dense; c++)
        FUZZ_CHECK(isfinite(s->dense[(size_t)r * s->n_dense + c]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dec)
        fuzz_init();
    if (size < 1)
        return 0;
    pr_block *b = g_blk[data[0] & 1 ? 0 : 1];
    const char *doc = (const char *)data + 1;
    size_t len = size - 1;
    fuzz_rejects rl = {0};
    pr_decode_ctx ctx = {.json = g_dec, .on_reject = fuzz_on_reject, .opaque = &rl};
    if (b->rows == b->cap)
        pr_block_reset(b);
    counts before, after;
    snap(b, &before);
    int rc = pr_decode_json_line(&ctx, b, doc, len, 1);
    snap(b, &after);
    FUZZ_CHECK(rc == 1 || rc == 0 || rc == PR_EFULL);
    if (rc != 1) {
        FUZZ_CHECK(memcmp(&before, &after, sizeof(before)) == 0);
        FUZZ_CHECK(rc == PR_EFULL ? rl.n == 0 : rl.n == 1);
        if (rc == 0) /* a reject with its name, or a record the filter / downsample dropped */
            FUZZ_CHECK(pr_decode_dropped(rl.reason[0]) ||
                       strcmp(pr_decode_reason_name(rl.reason[0]), "unknown") != 0);
        if (rc == PR_EFULL)
            pr_block_reset(b);
        return 0;
    }
    FUZZ_CHECK(rl.n == 0 && after.rows == before.rows + 1);
    check_row(b, &before);
    /* The same document alone in a fresh block: the same row. */
    pr_block *o = g_blk[data[0] & 1 ? 1 : 0];
    pr_block_reset(o);
    FUZZ_CHECK(pr_decode_json_line(&ctx, o, doc, len, 1) == 1);
    const pr_fside *s = b->side, *t = o->side;
    FUZZ_CHECK(memcmp(s->labels + (size_t)before.rows * s->n_labels, t->labels,
                      s->n_labels * sizeof(float)) == 0);
    FUZZ_CHECK(memcmp(s->dense + (size_t)before.rows * s->n_dense, t->dense,
                      s->n_dense * sizeof(float)) == 0);
    for (uint16_t f = 0; f < s->n_feat; f++) {
        int c = s->vocab_col[f];
        uint32_t n = (uint32_t)s->lengths[(size_t)f * s->cap + before.rows];
        if (c >= 0)
            FUZZ_CHECK(memcmp(b->sparse_u64 + (size_t)c * b->scap + before.col[c],
                              o->sparse_u64 + (size_t)c * o->scap, n * sizeof(uint64_t)) == 0);
        else
            FUZZ_CHECK(memcmp(s->values[f] + before.val[f], t->values[f], n * sizeof(int64_t)) ==
                       0);
        if (s->weights[f])
            FUZZ_CHECK(memcmp(s->weights[f] + before.wts[f], t->weights[f], n * sizeof(float)) ==
                       0);
    }
    pr_block_reset(o);
    return 0;
}
