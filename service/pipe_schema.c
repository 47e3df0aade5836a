/*
 * pipe_schema.c — a streaming pipeline with a declared feature schema (issue
 * 20): its engine spec (pr_feature_engine_spec: one vocabulary column per
 * vocab feature), its JSON decoder and jagged blocks, the step after the
 * engine (pr_feature_finish), and dropping rows from a jagged block.
 *
 * The rest of the pipeline is the Criteo one: the consumer decodes messages
 * through p->json into the block (source.format json), the worker runs the
 * engine on it, then pr__schema_finish fills the output's side tables that
 * the batcher carries. The Criteo layout never comes here (p->json NULL).
 */
#include <string.h>

#include "pipe.h"

int pr__schema_spec(pr__pipe *p, char *errstr, size_t errstr_size)
{
    const pr_pipeline_cfg *pc = p->cfg;
    p->spec = &pc->spec;
    if (!pc->features.declared)
        return 0;
    int rc = pr_feature_engine_spec(&pc->features, &pc->spec, &p->espec, errstr, errstr_size);
    if (rc)
        return rc;
    p->spec = &p->espec;
    p->json = pr_json_decoder_new(&pc->features, errstr, errstr_size);
    if (!p->json)
        return PR_EINVAL;
    /* avro, protobuf: the format's reader fills the decoder's rows */
    return pr_json_decoder_for_source(p->json, &pc->source, errstr, errstr_size);
}

int pr__schema_blocks(pr__pipe *p, uint32_t block_rows)
{
    const pr_feature_schema *fs = &p->cfg->features;
    p->blk = pr_feature_block_new(fs, block_rows, true);
    p->wblk = pr_feature_block_new(fs, block_rows, true);
    p->wout = pr_feature_out_new(fs, block_rows, pr_engine_sparse_width(p->eng));
    return p->blk && p->wblk && p->wout ? 0 : PR_ENOMEM;
}

int pr__schema_finish(pr__pipe *p, pr_block *b, pr_out *o, char *errstr, size_t errstr_size)
{
    if (!p->json)
        return 0;
    return pr_feature_finish(&p->cfg->features, b, o, errstr, errstr_size);
}

/* Move `n` elements of vocab column c from element `from` to `to` (to <= from). */
static void pr__move_keys(pr_block *b, uint32_t c, uint32_t from, uint32_t to, uint32_t n)
{
    uint64_t *keys = b->sparse_u64 + (size_t)c * b->scap;
    uint64_t *m = b->sparse_missing + (size_t)c * pr_bitmap_words(b->scap);
    for (uint32_t k = 0; k < n && from != to; k++) {
        keys[to + k] = keys[from + k];
        if (pr_bit_test(m, from + k))
            pr_bit_set(m, to + k);
        else
            pr_bit_clear(m, to + k);
    }
}

/* Row r's keys in each vocab column (a shared table's: its features' summed). */
static void pr__col_runs(const pr_fside *s, uint32_t r, uint32_t n_cols, uint32_t *run)
{
    memset(run, 0, n_cols * sizeof(*run));
    for (uint16_t f = 0; f < s->n_feat; f++)
        if (s->vocab_col[f] >= 0 && (uint32_t)s->vocab_col[f] < n_cols)
            run[s->vocab_col[f]] += (uint32_t)pr_fside_lengths((pr_fside *)s, f)[r];
}

/* One kept row r moved to w: meta, labels, dense, each feature's values and
 * weights (rd, wr: per feature), each vocab column's keys (crd, cwr: per
 * column; run: row r's keys in each). */
static void pr__move_row(pr_block *b, uint32_t r, uint32_t w, uint32_t *rd, uint32_t *wr,
                         const uint32_t *crd, uint32_t *cwr, const uint32_t *run)
{
    pr_fside *s = b->side;
    for (uint16_t f = 0; f < s->n_feat; f++) {
        uint32_t n = (uint32_t)pr_fside_lengths(s, f)[r];
        pr_fside_lengths(s, f)[w] = (int32_t)n;
        if (s->vocab_col[f] < 0 && rd[f] != wr[f])
            memmove(s->values[f] + wr[f], s->values[f] + rd[f], n * sizeof(int64_t));
        if (s->weights[f] && rd[f] != wr[f])
            memmove(s->weights[f] + wr[f], s->weights[f] + rd[f], n * sizeof(float));
        wr[f] += n;
    }
    for (uint32_t c = 0; c < b->n_sparse; c++) {
        pr__move_keys(b, c, crd[c], cwr[c], run[c]);
        cwr[c] += run[c];
    }
    if (w == r)
        return;
    size_t aw = pr_bitmap_words(s->cap);
    for (uint32_t i = 0; s->absent && i < s->n_schema; i++)
        pr_bit_move(s->absent + i * aw, r, w);
    memcpy(s->labels + (size_t)w * s->n_labels, s->labels + (size_t)r * s->n_labels,
           s->n_labels * sizeof(float));
    memcpy(s->dense + (size_t)w * s->n_dense, s->dense + (size_t)r * s->n_dense,
           s->n_dense * sizeof(float));
    b->partition[w] = b->partition[r];
    b->offset[w] = b->offset[r];
    b->event_time_ms[w] = b->event_time_ms[r];
}

void pr__schema_drop_rows(pr_block *b, bool (*drop)(void *, const pr_block *, uint32_t),
                          void *opaque)
{
    pr_fside *s = b->side;
    uint32_t rd[PR_MAX_SPARSE * 2] = {0}, wr[PR_MAX_SPARSE * 2] = {0}; /* per feature */
    uint32_t crd[PR_MAX_SPARSE] = {0}, cwr[PR_MAX_SPARSE] = {0}, run[PR_MAX_SPARSE];
    uint32_t w = 0;
    if (s->n_feat > PR_MAX_SPARSE * 2 || b->n_sparse > PR_MAX_SPARSE)
        return; /* the config allows at most PR_MAX_SPARSE sparse features */
    for (uint32_t r = 0; r < b->rows; r++) {
        pr__col_runs(s, r, b->n_sparse, run);
        if (!drop(opaque, b, r))
            pr__move_row(b, r, w++, rd, wr, crd, cwr, run);
        for (uint16_t f = 0; f < s->n_feat; f++)
            rd[f] += (uint32_t)pr_fside_lengths(s, f)[r];
        for (uint32_t c = 0; c < b->n_sparse; c++)
            crd[c] += run[c];
    }
    for (uint16_t f = 0; f < s->n_feat; f++) {
        if (s->weights[f])
            s->n_weights[f] = wr[f];
        if (s->vocab_col[f] < 0)
            s->n_values[f] = wr[f];
    }
    for (uint32_t c = 0; c < b->n_sparse; c++) {
        uint64_t *m = b->sparse_missing + (size_t)c * pr_bitmap_words(b->scap);
        for (uint32_t e = cwr[c]; e < b->col_rows[c]; e++)
            pr_bit_clear(m, e);
        b->col_rows[c] = cwr[c];
    }
    for (uint32_t r = w; r < b->rows; r++) {
        for (uint16_t f = 0; f < s->n_feat; f++)
            pr_fside_lengths(s, f)[r] = 0;
        for (uint32_t i = 0; s->absent && i < s->n_schema; i++)
            pr_bit_clear(s->absent + i * pr_bitmap_words(s->cap), r);
    }
    b->rows = w;
}
