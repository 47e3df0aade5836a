/*
 * batch_jagged.c — a declared schema's rows in the batcher (issue 20):
 * jagged batches built from pr_out.side (contract: pr_batcher.h,
 * pr_batch_schema; internals: batcher_int.h).
 *
 * batcher.c keeps every rule (ordering, deadlines, offsets, notices) and
 * calls here wherever it touches row data. A build's batch holds the
 * fixed-width parts at their final places (label_mat and dense_mat
 * row-major with `cap` rows of room, lengths [n_feat][cap]); the values of
 * each feature grow in the build's own arrays (pr__jbuild), because a row
 * has any number of them, and are gathered key-major into the batch only at
 * emission, which also compacts the lengths to stride `rows`. So each value
 * is copied twice (block -> build -> batch), the price of not knowing a
 * batch's value count before it is full.
 *
 * Under event_time a pending row's fixed part sits in the batcher's pool
 * slot (labels | dense | lengths) and its values in a per-slot array kept
 * here, reused when the slot is.
 */
#include <stdlib.h>
#include <string.h>

#include "batcher_int.h"

/* ---------------------------------------------------------------- schema */

/* memcpy that allows n == 0 with NULL pointers (an empty list, a schema
 * without labels or dense features: those arrays may not exist). */
static inline void pr__copy(void *dst, const void *src, size_t n)
{
    if (n)
        memcpy(dst, src, n);
}

int pr_batch_schema_from_features(const pr_feature_schema *fs, pr_batch_schema *out)
{
    memset(out, 0, sizeof(*out));
    size_t n = fs->n_features ? fs->n_features : 1;
    size_t nd = pr_feature_schema_dense_cols(fs);
    nd = nd ? nd : 1;
    const char **lab = calloc(n, sizeof(char *)), **den = calloc(nd, sizeof(char *));
    const char **keys = calloc(n, sizeof(char *));
    int16_t *vc = calloc(n, sizeof(int16_t));
    uint64_t *sizes = calloc(n, sizeof(uint64_t));
    bool any_w = false, any_t = false;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        any_w |= pr_feature_weighted(&fs->features[i]);
        any_t |= fs->features[i].table[0] != '\0';
    }
    const char **tabs = any_t ? calloc(n, sizeof(char *)) : NULL;
    out->feature_tables = tabs;
    uint8_t *wtd = any_w ? calloc(n, 1) : NULL;
    out->weighted = wtd;
    out->label_names = lab;
    out->dense_names = den;
    out->feature_names = keys;
    out->vocab_col = vc;
    out->sizes = sizes;
    out->dense_buf = calloc(nd, PR_NAME_MAX);
    if (!lab || !den || !keys || !vc || !sizes || !out->dense_buf || (any_w && !wtd) ||
        (any_t && !tabs)) {
        pr_batch_schema_fini(out);
        return PR_ENOMEM;
    }
    out->n_dense = (uint16_t)pr_feature_dense_names(fs, out->dense_buf, (uint32_t)nd);
    for (uint16_t c = 0; c < out->n_dense; c++)
        den[c] = out->dense_buf[c];
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        if (f->kind == PR_FEAT_LABEL) {
            lab[out->n_labels++] = f->name;
        } else if (f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST) {
            uint16_t k = out->n_feat++;
            keys[k] = f->name;
            vc[k] = (int16_t)pr_feature_vocab_col(fs, i); /* a shared table: its owner's */
            sizes[k] = pr_feature_value_range(f);
            if (wtd)
                wtd[k] = pr_feature_weighted(f);
            if (tabs)
                tabs[k] = pr_feature_table_name(f);
        }
    }
    return 0;
}

void pr_batch_schema_fini(pr_batch_schema *s)
{
    free((void *)s->label_names);
    free((void *)s->dense_names);
    free((void *)s->feature_names);
    free((void *)s->vocab_col);
    free((void *)s->sizes);
    free((void *)s->weighted);
    free((void *)s->feature_tables);
    free(s->dense_buf);
    memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------------- state */

static char (*pr__copy_names(const char *const *src, uint16_t n))[PR_NAME_MAX]
{
    char(*d)[PR_NAME_MAX] = calloc(n ? n : 1, PR_NAME_MAX);
    for (uint16_t i = 0; d && i < n; i++)
        snprintf(d[i], PR_NAME_MAX, "%s", src[i] ? src[i] : "");
    return d;
}

int pr__jag_new(const pr_batch_schema *s, pr__jag **out)
{
    pr__jag *j = calloc(1, sizeof(*j));
    if (!j)
        return PR_ENOMEM;
    j->n_labels = s->n_labels;
    j->n_dense = s->n_dense;
    j->n_feat = s->n_feat;
    size_t nf = s->n_feat ? s->n_feat : 1;
    j->keys = pr__copy_names(s->feature_names, s->n_feat);
    j->vocab_col = malloc(nf * sizeof(int16_t));
    j->sizes = calloc(nf, sizeof(uint64_t));
    bool ok = j->keys && j->vocab_col && j->sizes;
    if (ok && s->label_names && !(j->label_names = pr__copy_names(s->label_names, s->n_labels)))
        ok = false;
    if (ok && s->dense_names && !(j->dense_names = pr__copy_names(s->dense_names, s->n_dense)))
        ok = false;
    if (ok && s->feature_tables && !(j->tables = pr__copy_names(s->feature_tables, s->n_feat)))
        ok = false;
    if (ok && s->weighted && (j->weighted = calloc(nf, 1)))
        memcpy(j->weighted, s->weighted, s->n_feat);
    ok &= !s->weighted || j->weighted;
    for (uint16_t f = 0; ok && f < s->n_feat; f++) {
        j->vocab_col[f] = s->vocab_col ? s->vocab_col[f] : -1;
        j->sizes[f] = s->sizes ? s->sizes[f] : 0;
    }
    if (!ok) {
        pr__jag_free(j);
        return PR_ENOMEM;
    }
    *out = j;
    return 0;
}

void pr__jag_free(pr__jag *j)
{
    if (!j)
        return;
    free(j->keys);
    free(j->tables);
    free(j->label_names);
    free(j->dense_names);
    free(j->vocab_col);
    free(j->sizes);
    free(j->weighted);
    free(j->voff);
    for (uint32_t i = 0; i < j->p_cap; i++)
        free(j->p_vals[i]);
    free(j->p_vals);
    free(j->p_vcap);
    free(j);
}

size_t pr__jag_row_bytes(const pr__jag *j)
{
    return ((size_t)j->n_labels + j->n_dense + j->n_feat) * 4;
}

int pr__jbuild_init(const pr__jag *j, pr__jbuild *jb)
{
    size_t nf = j->n_feat ? j->n_feat : 1;
    jb->fv = calloc(nf, sizeof(*jb->fv));
    jb->fn = calloc(nf, sizeof(*jb->fn));
    jb->fcap = calloc(nf, sizeof(*jb->fcap));
    jb->fw = calloc(nf, sizeof(*jb->fw));
    jb->wtd = j->weighted;
    return jb->fv && jb->fn && jb->fcap && jb->fw ? 0 : PR_ENOMEM;
}

void pr__jbuild_fini(const pr__jag *j, pr__jbuild *jb)
{
    for (uint32_t f = 0; jb->fv && f < j->n_feat; f++)
        free(jb->fv[f]);
    for (uint32_t f = 0; jb->fw && f < j->n_feat; f++)
        free(jb->fw[f]);
    free(jb->fw);
    free(jb->fv);
    free(jb->fn);
    free(jb->fcap);
    memset(jb, 0, sizeof(*jb));
}

pr_batch *pr__jag_batch(const pr__jag *j, const char *pipeline, uint32_t cap)
{
    pr_batch *bt = pr_batch_new_jagged(pipeline, cap, j->n_labels, j->n_dense, j->n_feat, 0);
    if (!bt)
        return NULL;
    free(bt->vocab_sizes); /* emission sets them */
    bt->vocab_sizes = NULL;
    bt->bytes = 0;
    pr__copy(bt->feature_keys, j->keys, (size_t)j->n_feat * PR_NAME_MAX);
    if (j->tables && (bt->feature_tables = malloc((size_t)j->n_feat * PR_NAME_MAX + 1)))
        pr__copy(bt->feature_tables, j->tables, (size_t)j->n_feat * PR_NAME_MAX);
    if (j->label_names && (bt->label_names = malloc((size_t)j->n_labels * PR_NAME_MAX + 1)))
        pr__copy(bt->label_names, j->label_names, (size_t)j->n_labels * PR_NAME_MAX);
    if (j->dense_names && (bt->dense_names = malloc((size_t)j->n_dense * PR_NAME_MAX + 1)))
        pr__copy(bt->dense_names, j->dense_names, (size_t)j->n_dense * PR_NAME_MAX);
    if ((j->label_names && !bt->label_names) || (j->dense_names && !bt->dense_names)) {
        pr_batch_unref(bt);
        return NULL;
    }
    bt->rows = 0;
    return bt;
}

/* ---------------------------------------------------------------- blocks */

int pr__jag_block(pr__jag *j, const pr_out *out)
{
    const pr_fside *s = out->side;
    if (!s || s->n_labels != j->n_labels || s->n_dense != j->n_dense || s->n_feat != j->n_feat ||
        s->cap < out->rows)
        return PR_EINVAL;
    if (j->voff_cap < out->rows + 1) {
        uint32_t nc = out->rows + 1;
        uint64_t *v = realloc(j->voff, (size_t)nc * (j->n_feat ? j->n_feat : 1) * sizeof(*v));
        if (!v)
            return PR_ENOMEM;
        j->voff = v;
        j->voff_cap = nc;
    }
    for (uint32_t f = 0; f < j->n_feat; f++) {
        const int32_t *len = s->lengths + (size_t)f * s->cap;
        uint64_t *vo = j->voff + (size_t)f * j->voff_cap, at = 0;
        for (uint32_t r = 0; r < out->rows; r++) {
            vo[r] = at;
            at += len[r] > 0 ? (uint64_t)len[r] : 0;
        }
        vo[out->rows] = at;
        if (at > s->n_values[f])
            return PR_EINVAL; /* lengths promise more values than the side holds */
        bool w = j->weighted && j->weighted[f];
        if (w != (s->weights[f] != NULL) || (w && at > s->n_weights[f]))
            return PR_EINVAL; /* weighted in the schema and not in the block, or short */
    }
    return 0;
}

const int64_t *pr__jag_row_values(const pr__jag *j, const pr_out *out, uint32_t f, uint32_t r,
                                  uint32_t *n)
{
    const uint64_t *vo = j->voff + (size_t)f * j->voff_cap;
    *n = (uint32_t)(vo[r + 1] - vo[r]);
    return out->side->values[f] + vo[r];
}

static int pr__fv_reserve(pr__jbuild *jb, uint32_t f, uint64_t more)
{
    if (jb->fn[f] + more <= jb->fcap[f])
        return 0;
    uint64_t nc = jb->fcap[f] ? jb->fcap[f] * 2 : 1024;
    while (nc < jb->fn[f] + more)
        nc *= 2;
    int64_t *v = realloc(jb->fv[f], nc * sizeof(*v));
    if (!v)
        return PR_ENOMEM;
    jb->fv[f] = v;
    if (jb->wtd && jb->wtd[f]) {
        float *w = realloc(jb->fw[f], nc * sizeof(*w));
        if (!w)
            return PR_ENOMEM; /* fv grew, fcap not: the next call retries both */
        jb->fw[f] = w;
    }
    jb->fcap[f] = nc;
    return 0;
}

/* The weights of n values of feature f appended to the build (fn not moved:
 * the caller moves it with the values). */
static inline void pr__fw_put(pr__jbuild *jb, uint32_t f, const float *w, uint64_t n)
{
    if (jb->wtd && jb->wtd[f])
        pr__copy(jb->fw[f] + jb->fn[f], w, (size_t)n * 4);
}

/* Rows [r, r + k) of the block into rows [n, n + k) of bt (values appended
 * to the build). A run of rows is contiguous in every array of the block,
 * so each part is one copy per run rather than one per row and feature:
 * the per-call cost of ~11 small memcpy per row was most of the worker's
 * batching time on 300-byte JSON events. */
static int pr__copy_run(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap, uint32_t n,
                        const pr_out *out, uint32_t r, uint32_t k)
{
    const pr_fside *s = out->side;
    if (j->n_labels)
        pr__copy(bt->label_mat + (size_t)n * j->n_labels, s->labels + (size_t)r * j->n_labels,
                 (size_t)k * j->n_labels * 4);
    if (j->n_dense)
        pr__copy(bt->dense_mat + (size_t)n * j->n_dense, s->dense + (size_t)r * j->n_dense,
                 (size_t)k * j->n_dense * 4);
    for (uint32_t f = 0; f < j->n_feat; f++) {
        const uint64_t *vo = j->voff + (size_t)f * j->voff_cap;
        int32_t *len = bt->lengths + (size_t)f * cap + n;
        for (uint32_t i = 0; i < k; i++) /* row i's length, from the offsets */
            len[i] = (int32_t)(vo[r + i + 1] - vo[r + i]);
        uint64_t nv = vo[r + k] - vo[r];
        if (pr__fv_reserve(jb, f, nv) < 0)
            return PR_ENOMEM;
        pr__copy(jb->fv[f] + jb->fn[f], out->side->values[f] + vo[r], (size_t)nv * 8);
        if (out->side->weights[f])
            pr__fw_put(jb, f, out->side->weights[f] + vo[r], nv);
        jb->fn[f] += nv;
    }
    return 0;
}

int pr__jag_copy_rows(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                      const pr_out *out, const uint32_t *idx, uint32_t k)
{
    for (uint32_t i = 0; i < k;) {
        uint32_t run = 1;
        while (i + run < k && idx[i + run] == idx[i] + run)
            run++;
        int err = pr__copy_run(j, jb, bt, cap, bt->rows + i, out, idx[i], run);
        if (err < 0)
            return err;
        i += run;
    }
    return 0;
}

/* ---------------------------------------------------------------- event_time pool */

int pr__jag_pool_grow(pr__jag *j, uint32_t cap)
{
    if (cap <= j->p_cap)
        return 0;
    int64_t **v = realloc(j->p_vals, (size_t)cap * sizeof(*v));
    if (!v)
        return PR_ENOMEM;
    j->p_vals = v;
    uint32_t *c = realloc(j->p_vcap, (size_t)cap * sizeof(*c));
    if (!c)
        return PR_ENOMEM;
    j->p_vcap = c;
    for (uint32_t i = j->p_cap; i < cap; i++) {
        j->p_vals[i] = NULL;
        j->p_vcap[i] = 0;
    }
    j->p_cap = cap;
    return 0;
}

/* Pending layout: labels f32[n_labels] | dense f32[n_dense] | lengths i32[n_feat]. */
static int32_t *pr__pend_lengths(const pr__jag *j, const uint8_t *p)
{
    return (int32_t *)(p + ((size_t)j->n_labels + j->n_dense) * 4);
}

int pr__jag_to_pending(pr__jag *j, const pr_out *out, uint32_t r, uint32_t slot, uint8_t *dst)
{
    const pr_fside *s = out->side;
    pr__copy(dst, s->labels + (size_t)r * j->n_labels, (size_t)j->n_labels * 4);
    pr__copy(dst + (size_t)j->n_labels * 4, s->dense + (size_t)r * j->n_dense,
             (size_t)j->n_dense * 4);
    int32_t *len = pr__pend_lengths(j, dst);
    uint64_t total = 0, tw = 0;
    for (uint32_t f = 0; f < j->n_feat; f++) {
        const uint64_t *vo = j->voff + (size_t)f * j->voff_cap;
        len[f] = (int32_t)(vo[r + 1] - vo[r]);
        total += (uint64_t)len[f];
        if (j->weighted && j->weighted[f])
            tw += (uint64_t)len[f];
    }
    uint64_t need = total + (tw + 1) / 2; /* the weights, float32, after the values */
    if (need > j->p_vcap[slot]) {
        int64_t *v = realloc(j->p_vals[slot], need * sizeof(*v));
        if (!v)
            return PR_ENOMEM;
        j->p_vals[slot] = v;
        j->p_vcap[slot] = (uint32_t)need;
    }
    uint64_t at = 0;
    float *wt = (float *)(j->p_vals[slot] + total);
    for (uint32_t f = 0; f < j->n_feat; f++) {
        uint32_t k;
        const int64_t *v = pr__jag_row_values(j, out, f, r, &k);
        pr__copy(j->p_vals[slot] + at, v, (size_t)k * 8);
        at += k;
        if (j->weighted && j->weighted[f]) {
            const uint64_t *vo = j->voff + (size_t)f * j->voff_cap;
            pr__copy(wt, s->weights[f] + vo[r], (size_t)k * 4);
            wt += k;
        }
    }
    return 0;
}

const int64_t *pr__jag_pending_values(const pr__jag *j, uint32_t slot, const uint8_t *src,
                                      uint32_t f, uint32_t *n)
{
    const int32_t *len = pr__pend_lengths(j, src);
    uint64_t at = 0;
    for (uint32_t i = 0; i < f; i++)
        at += (uint64_t)len[i];
    *n = (uint32_t)len[f];
    return j->p_vals[slot] + at;
}

int pr__jag_from_pending(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                         uint32_t slot, const uint8_t *src)
{
    uint32_t n = bt->rows;
    pr__copy(bt->label_mat + (size_t)n * j->n_labels, src, (size_t)j->n_labels * 4);
    pr__copy(bt->dense_mat + (size_t)n * j->n_dense, src + (size_t)j->n_labels * 4,
             (size_t)j->n_dense * 4);
    const int32_t *len = pr__pend_lengths(j, src);
    const int64_t *v = j->p_vals[slot];
    uint64_t total = 0;
    for (uint32_t f = 0; f < j->n_feat; f++)
        total += (uint64_t)len[f];
    const float *wt = (const float *)(j->p_vals[slot] + total);
    for (uint32_t f = 0; f < j->n_feat; f++) {
        uint32_t k = (uint32_t)len[f];
        bt->lengths[(size_t)f * cap + n] = (int32_t)k;
        if (pr__fv_reserve(jb, f, k) < 0)
            return PR_ENOMEM;
        pr__copy(jb->fv[f] + jb->fn[f], v, (size_t)k * 8);
        if (jb->wtd && jb->wtd[f]) {
            pr__fw_put(jb, f, wt, k);
            wt += k;
        }
        jb->fn[f] += k;
        v += k;
    }
    return 0;
}

/* ---------------------------------------------------------------- builds */

void pr__jag_keep_rows(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                       const uint8_t *keep)
{
    uint32_t n = bt->rows, w = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        if (i != w) {
            memmove(bt->label_mat + (size_t)w * j->n_labels,
                    bt->label_mat + (size_t)i * j->n_labels, (size_t)j->n_labels * 4);
            memmove(bt->dense_mat + (size_t)w * j->n_dense, bt->dense_mat + (size_t)i * j->n_dense,
                    (size_t)j->n_dense * 4);
        }
        w++;
    }
    for (uint32_t f = 0; f < j->n_feat; f++) {
        int32_t *len = bt->lengths + (size_t)f * cap;
        uint64_t rd = 0, wr = 0;
        uint32_t o = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t k = (uint32_t)len[i];
            if (keep[i]) {
                memmove(jb->fv[f] + wr, jb->fv[f] + rd, (size_t)k * 8);
                if (jb->wtd && jb->wtd[f])
                    memmove(jb->fw[f] + wr, jb->fw[f] + rd, (size_t)k * 4);
                wr += k;
                len[o++] = (int32_t)k;
            }
            rd += k;
        }
        jb->fn[f] = wr;
    }
    bt->rows = w;
}

int pr__jag_move_row(const pr__jag *j, pr__jbuild *djb, pr_batch *d, const pr__jbuild *sjb,
                     const pr_batch *s, uint32_t cap, uint32_t i, uint64_t *vat)
{
    uint32_t n = d->rows;
    pr__copy(d->label_mat + (size_t)n * j->n_labels, s->label_mat + (size_t)i * j->n_labels,
             (size_t)j->n_labels * 4);
    pr__copy(d->dense_mat + (size_t)n * j->n_dense, s->dense_mat + (size_t)i * j->n_dense,
             (size_t)j->n_dense * 4);
    for (uint32_t f = 0; f < j->n_feat; f++) {
        uint32_t k = (uint32_t)s->lengths[(size_t)f * cap + i];
        d->lengths[(size_t)f * cap + n] = (int32_t)k;
        if (pr__fv_reserve(djb, f, k) < 0)
            return PR_ENOMEM;
        pr__copy(djb->fv[f] + djb->fn[f], sjb->fv[f] + vat[f], (size_t)k * 8);
        if (sjb->wtd && sjb->wtd[f])
            pr__fw_put(djb, f, sjb->fw[f] + vat[f], k);
        djb->fn[f] += k;
        vat[f] += k;
    }
    return 0;
}

/* The batch's weights, key-major beside its values: a weighted feature's
 * from the build, 1 for every value of the others (a KeyedJaggedTensor's
 * weights cover every key); jb->fn[f] (not reset yet) counts each. */
static int pr__jag_finish_weights(const pr__jag *j, const pr__jbuild *jb, pr_batch *bt,
                                  uint64_t total)
{
    free(bt->weights);
    free(bt->weighted);
    bt->weights = malloc(total ? total * sizeof(float) : 4);
    bt->weighted = malloc(j->n_feat ? j->n_feat : 1);
    if (!bt->weights || !bt->weighted)
        return PR_ENOMEM;
    memcpy(bt->weighted, j->weighted, j->n_feat);
    uint64_t at = 0;
    for (uint32_t f = 0; f < j->n_feat; f++) {
        if (j->weighted[f])
            pr__copy(bt->weights + at, jb->fw[f], (size_t)jb->fn[f] * 4);
        else
            for (uint64_t i = 0; i < jb->fn[f]; i++)
                bt->weights[at + i] = 1.0f;
        at += jb->fn[f];
    }
    return 0;
}

int pr__jag_finish(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap)
{
    uint32_t n = bt->rows;
    uint64_t total = 0;
    for (uint32_t f = 0; f < j->n_feat; f++)
        total += jb->fn[f];
    int64_t *v = malloc(total ? total * sizeof(*v) : 8);
    int rc = !v ? PR_ENOMEM : j->weighted ? pr__jag_finish_weights(j, jb, bt, total) : 0;
    if (rc) {
        free(v);
        return rc;
    }
    uint64_t at = 0;
    for (uint32_t f = 0; f < j->n_feat; f++) {
        pr__copy(v + at, jb->fv[f], jb->fn[f] * 8);
        at += jb->fn[f];
        jb->fn[f] = 0;
        if (f && n < cap) /* moving down in column order: memmove is safe */
            memmove(bt->lengths + (size_t)f * n, bt->lengths + (size_t)f * cap, (size_t)n * 4);
    }
    free(bt->values);
    bt->values = v;
    bt->n_values = total;
    bt->bytes = pr_batch_label_mat_bytes(bt) + pr_batch_dense_mat_bytes(bt) +
                pr_batch_lengths_bytes(bt) + pr_batch_values_bytes(bt) + pr_batch_weights_bytes(bt);
    return 0;
}

uint64_t pr__jag_vocab_size(const pr__jag *j, uint32_t f, pr_batch_vocab_cb cb, void *opaque)
{
    if (j->vocab_col[f] >= 0)
        return cb ? cb(opaque, (uint32_t)j->vocab_col[f]) : 0;
    return j->sizes[f];
}

/* ---------------------------------------------------------------- standalone builds */

struct pr_jagged_build {
    pr__jag *j;
    pr__jbuild jb;
    pr_batch *bt; /* the batch being built, NULL between builds */
    uint32_t cap;
};

int pr_jagged_build_new(const pr_batch_schema *s, pr_jagged_build **out)
{
    *out = NULL;
    pr_jagged_build *b = calloc(1, sizeof(*b));
    if (!b)
        return PR_ENOMEM;
    int rc = pr__jag_new(s, &b->j);
    if (!rc)
        rc = pr__jbuild_init(b->j, &b->jb);
    if (rc) {
        pr_jagged_build_free(b);
        return rc;
    }
    *out = b;
    return 0;
}

void pr_jagged_build_free(pr_jagged_build *b)
{
    if (!b)
        return;
    pr_batch_unref(b->bt);
    if (b->j)
        pr__jbuild_fini(b->j, &b->jb);
    pr__jag_free(b->j);
    free(b);
}

#define PR__JB_CAP0 1024 /* rows a build starts with; doubled as they come */

int pr_jagged_build_begin(pr_jagged_build *b, const char *pipeline)
{
    pr_batch_unref(b->bt);
    for (uint32_t f = 0; f < b->j->n_feat; f++)
        b->jb.fn[f] = 0; /* a build dropped half way */
    b->cap = PR__JB_CAP0;
    b->bt = pr__jag_batch(b->j, pipeline, b->cap);
    return b->bt ? 0 : PR_ENOMEM;
}

/* Room for `need` rows: the rows so far into a batch of a larger capacity
 * (the lengths are key-major with stride cap). */
static int pr__jb_grow(pr_jagged_build *b, uint64_t need)
{
    if (need <= b->cap)
        return 0;
    if (need > UINT32_MAX / 2)
        return PR_ENOMEM;
    uint32_t nc = b->cap * 2 > need ? b->cap * 2 : (uint32_t)need;
    pr_batch *o = b->bt, *n = pr__jag_batch(b->j, o->pipeline, nc);
    if (!n)
        return PR_ENOMEM;
    const pr__jag *j = b->j;
    pr__copy(n->label_mat, o->label_mat, (size_t)o->rows * j->n_labels * 4);
    pr__copy(n->dense_mat, o->dense_mat, (size_t)o->rows * j->n_dense * 4);
    for (uint32_t f = 0; f < j->n_feat; f++)
        pr__copy(n->lengths + (size_t)f * nc, o->lengths + (size_t)f * b->cap, (size_t)o->rows * 4);
    n->rows = o->rows;
    pr_batch_unref(o);
    b->bt = n;
    b->cap = nc;
    return 0;
}

int pr_jagged_build_add(pr_jagged_build *b, const pr_out *out, const uint32_t *idx, uint32_t k)
{
    if (!b->bt)
        return PR_EINVAL;
    int rc = pr__jb_grow(b, (uint64_t)b->bt->rows + k);
    if (!rc)
        rc = pr__jag_block(b->j, out);
    if (!rc)
        rc = pr__jag_copy_rows(b->j, &b->jb, b->bt, b->cap, out, idx, k);
    if (!rc)
        b->bt->rows += k;
    return rc;
}

pr_batch *pr_jagged_build_end(pr_jagged_build *b, pr_batch_vocab_cb cb, void *opaque)
{
    pr_batch *bt = b->bt;
    b->bt = NULL;
    uint32_t nf = b->j->n_feat;
    if (!bt || pr__jag_finish(b->j, &b->jb, bt, b->cap) < 0 ||
        !(bt->vocab_sizes = calloc(nf ? nf : 1, sizeof(uint64_t)))) {
        pr_batch_unref(bt);
        return NULL;
    }
    for (uint32_t f = 0; f < nf; f++)
        bt->vocab_sizes[f] = pr__jag_vocab_size(b->j, f, cb, opaque);
    return bt;
}
