/*
 * feature_exec.c — executing a declared feature schema on the engine (issue
 * 20): the side tables (pr_fside) that carry labels, dense values and jagged
 * sparse/list features next to the engine's columns, the blocks and outputs
 * shaped for a schema, the engine spec derived from it, and
 * pr_feature_finish, which turns the engine's per-element indices back into
 * per-feature lengths and values.
 *
 * Why a separate side: the engine's hot path (cpu_backend.c) stays the
 * Criteo one (fixed-width columns); a declared schema only gives it the
 * vocabulary work, one U64 column per vocab feature with col_rows elements,
 * and everything else travels in the side tables untouched by the engine.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "pr_engine.h"

/* ---------------------------------------------------------------- side tables */

pr_fside *pr_fside_new(uint16_t n_labels, uint16_t n_dense, uint16_t n_feat, uint32_t cap)
{
    if (cap == 0)
        return NULL;
    pr_fside *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n_labels = n_labels;
    s->n_dense = n_dense;
    s->n_feat = n_feat;
    s->cap = cap;
    s->labels = calloc((size_t)cap * n_labels + 1, sizeof(float));
    s->dense = calloc((size_t)cap * n_dense + 1, sizeof(float));
    s->lengths = calloc((size_t)cap * n_feat + 1, sizeof(int32_t));
    s->vocab_col = malloc(((size_t)n_feat + 1) * sizeof(int16_t));
    s->values = calloc((size_t)n_feat + 1, sizeof(int64_t *));
    s->n_values = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    s->values_cap = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    bool ok = s->labels && s->dense && s->lengths && s->vocab_col && s->values && s->n_values &&
              s->values_cap;
    for (uint16_t f = 0; ok && f < n_feat; f++) {
        s->vocab_col[f] = -1;
        s->values[f] = malloc((size_t)cap * sizeof(int64_t));
        s->values_cap[f] = cap;
        ok = s->values[f] != NULL;
    }
    if (!ok) {
        pr_fside_free(s);
        return NULL;
    }
    return s;
}

void pr_fside_free(pr_fside *s)
{
    if (!s)
        return;
    for (uint16_t f = 0; s->values && f < s->n_feat; f++)
        free(s->values[f]);
    free(s->labels);
    free(s->dense);
    free(s->lengths);
    free(s->vocab_col);
    free(s->values);
    free(s->n_values);
    free(s->values_cap);
    free(s);
}

void pr_fside_reset(pr_fside *s)
{
    memset(s->lengths, 0, (size_t)s->cap * s->n_feat * sizeof(int32_t));
    memset(s->n_values, 0, (size_t)s->n_feat * sizeof(uint32_t));
}

int pr_fside_reserve(pr_fside *s, uint16_t f, uint32_t more)
{
    uint64_t need = (uint64_t)s->n_values[f] + more;
    if (need <= s->values_cap[f])
        return 0;
    if (need > UINT32_MAX)
        return PR_ENOMEM;
    uint64_t nc = (uint64_t)s->values_cap[f] * 2;
    if (nc < need)
        nc = need;
    if (nc > UINT32_MAX)
        nc = UINT32_MAX;
    int64_t *p = realloc(s->values[f], (size_t)nc * sizeof(int64_t));
    if (!p)
        return PR_ENOMEM;
    s->values[f] = p;
    s->values_cap[f] = (uint32_t)nc;
    return 0;
}

/* ---------------------------------------------------------------- schema shapes */

static bool pr__feat_is_sparse(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST;
}

int pr_feature_side_index(const pr_feature_schema *schema, uint32_t i)
{
    if (i >= schema->n_features || !pr__feat_is_sparse(&schema->features[i]))
        return -1;
    int k = 0;
    for (uint32_t j = 0; j < i; j++)
        k += pr__feat_is_sparse(&schema->features[j]);
    return k;
}

int pr_feature_vocab_step(const pr_feature_spec *f)
{
    for (uint8_t k = 0; k < f->n_ops; k++)
        if (f->ops[k].op == PR_FOP_VOCAB)
            return k;
    return -1;
}

/* Counts of a schema's labels, dense, sparse+list and vocab features. */
typedef struct pr__shape {
    uint16_t labels, dense, feat, vocab;
    uint32_t max_list; /* the largest max_len of a vocab list feature */
} pr__shape;

static pr__shape pr__schema_shape(const pr_feature_schema *schema)
{
    pr__shape sh = {0};
    for (uint32_t i = 0; i < schema->n_features; i++) {
        const pr_feature_spec *f = &schema->features[i];
        if (f->kind == PR_FEAT_LABEL)
            sh.labels++;
        else if (f->kind == PR_FEAT_DENSE)
            sh.dense++;
        else if (pr__feat_is_sparse(f)) {
            sh.feat++;
            if (pr_feature_vocab_step(f) >= 0) {
                sh.vocab++;
                if (f->kind == PR_FEAT_LIST && f->max_len > sh.max_list)
                    sh.max_list = f->max_len;
            }
        }
    }
    return sh;
}

pr_fside *pr_feature_side_new(const pr_feature_schema *schema, uint32_t cap)
{
    pr__shape sh = pr__schema_shape(schema);
    pr_fside *s = pr_fside_new(sh.labels, sh.dense, sh.feat, cap);
    if (!s)
        return NULL;
    int16_t col = 0;
    for (uint32_t i = 0; i < schema->n_features; i++) {
        int f = pr_feature_side_index(schema, i);
        if (f >= 0 && pr_feature_vocab_step(&schema->features[i]) >= 0)
            s->vocab_col[f] = col++;
    }
    return s;
}

uint32_t pr_feature_block_scap(const pr_feature_schema *schema, uint32_t cap)
{
    pr__shape sh = pr__schema_shape(schema);
    uint64_t avg = sh.max_list < 8 ? sh.max_list : 8;
    uint64_t scap = (uint64_t)cap * (avg > 1 ? avg : 1);
    if (scap < sh.max_list)
        scap = sh.max_list;
    if (scap > UINT32_MAX - 63)
        scap = UINT32_MAX - 63;
    return (uint32_t)scap;
}

pr_block *pr_feature_block_new(const pr_feature_schema *schema, uint32_t cap, bool with_meta)
{
    pr__shape sh = pr__schema_shape(schema);
    pr_block *b =
        pr_block_new_jagged(0, sh.vocab, cap, pr_feature_block_scap(schema, cap), with_meta);
    if (!b)
        return NULL;
    b->side = pr_feature_side_new(schema, b->cap);
    if (!b->side) {
        pr_block_free(b);
        return NULL;
    }
    memset(b->sparse_enc, PR_SPARSE_U64, sh.vocab);
    return b;
}

pr_out *pr_feature_out_new(const pr_feature_schema *schema, uint32_t cap, uint8_t sparse_width)
{
    pr__shape sh = pr__schema_shape(schema);
    return pr_out_new_jagged(0, sh.vocab, cap, pr_feature_block_scap(schema, cap), sparse_width);
}

/* ---------------------------------------------------------------- engine spec */

int pr_feature_engine_spec(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                           pr_pipeline_spec *spec, char *errstr, size_t errstr_size)
{
    (void)schema;
    (void)base;
    (void)spec;
    return pr_seterr(errstr, errstr_size, PR_ENOTSUP, "pr_feature_engine_spec: not yet");
}

/* ---------------------------------------------------------------- finish */

int pr_feature_finish(const pr_feature_schema *schema, const pr_block *in, pr_out *out,
                      char *errstr, size_t errstr_size)
{
    (void)schema;
    (void)in;
    (void)out;
    return pr_seterr(errstr, errstr_size, PR_ENOTSUP, "pr_feature_finish: not yet");
}
