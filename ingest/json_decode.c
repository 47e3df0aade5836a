/*
 * json_decode.c — JSON events through a declared feature schema (issue 20):
 * the pr_json_decoder (contract in pr_ingest.h, "JSON decoder").
 *
 * One record at a time: the extractor (json_extract.c) reads the schema's
 * paths out of the document in one pass (every path as PR_JSON_ANY, so the
 * decoder sees what each value was and applies the schema's type rules
 * itself); then each feature's operators run up to its `vocab` step
 * (feature_ops.c, the CPU's operator library) and the record becomes one row
 * of a declared schema's pr_block: labels and dense values and the final
 * values of features without a vocabulary go to the side tables (pr_fside),
 * vocabulary keys to the feature's engine column. Everything is staged first
 * and written only once the whole record passed, so a rejected record leaves
 * nothing behind (no vocabulary effect), and a record that does not fit
 * leaves the block untouched (PR_EFULL: retried in the next block).
 *
 * Per record rather than per block: a declared schema's row needs the block
 * room of its own lists (pr_block_fits), and the engine, not the decoder, is
 * the bottleneck (bench/RESULTS.md).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_base64.h"
#include "pr_ingest.h"

/* The per-value helpers below run once per value of every record (~20 per
 * clickstream event): inlined, their call overhead was a tenth of the
 * decoder's own instructions (callgrind, bench_protobuf). */
#define PR__HOT static inline __attribute__((always_inline))

/* One feature of the schema, resolved against the extractor's paths. */
typedef struct pr__jfeat {
    const pr_feature_spec *f;
    uint8_t kind;                    /* f->kind, here beside the rest (one cache line) */
    uint32_t col[PR_FEAT_MAX_CROSS]; /* extractor column of each path */
    int side;                        /* index among sparse+list features, -1 */
    int vocab_step;                  /* index of `vocab` in the chain, -1 */
    int8_t tunit;                    /* a time-tagged value's pr_time_unit here, -1 as is */
    uint16_t slot;                   /* label / dense index (a vector's first column) */
    uint16_t dim;                    /* f->dim: a dense vector's columns, 0 a number */
    int32_t wcol;                    /* a weighted list's weights path: extractor column, -1 */
    int32_t ecol;  /* list: { from: entries } / values: the map's values (crossed with its
                    * keys, or the ids), -1 */
    bool holes;    /* its path is PR_JSON_ALIGNED: may hold holes */
    bool str_time; /* a label or dense number read as a string: age of an rfc3339 time */
} pr__jfeat;

/* Where the filter's and the downsample's paths are in an extracted block:
 * col[i] for path i of pr_feature_select_paths (the filter's conditions,
 * then the downsample's where, then its key). */
typedef struct pr__sel {
    uint32_t col[PR_SELECT_PATHS_MAX];
} pr__sel;

struct pr_json_decoder {
    const pr_feature_schema *fs; /* the caller's; outlives the decoder */
    pr_json_extractor *x;
    pr_json_block *jb;
    pr_json_path *paths; /* the extractor's columns (strings borrowed from the schema) */
    size_t n_paths;
    pr_record_read_fn read; /* another format's reader (Avro, Protobuf); NULL = JSON text */
    void *rd;
    void (*rd_free)(void *rd); /* set: the decoder owns rd */
    uint32_t n_feat;
    pr__jfeat *feat;
    /* schema.filter and schema.downsample: their columns in jb, and a second
     * extractor of their paths alone (JSON), for a record the full one
     * refuses for a feature's sake: the filter still decides first. */
    pr__sel sel, fsel;
    bool selects;          /* the schema has a filter or a downsample */
    pr_json_extractor *fx; /* NULL: no path of theirs */
    pr_json_block *fjb;
    float weight; /* the record's weight label (downsample) */
    uint16_t n_labels, n_dense, n_side;
    bool weighted; /* some list has weights (d->wt) */
    /* one record, staged */
    float *labels, *dense; /* [n_labels], [n_dense] */
    int64_t event_ms;
    int64_t own_event_us; /* the record's own event time (age), or PR_FOP_NO_TIME */
    uint32_t *cnt;        /* [n_side] values kept */
    uint64_t **val;       /* [n_side] keys (vocab) or int64 values, up to max_len */
    uint8_t **miss;       /* [n_side] 1 = a missing key (single-valued vocab feature) */
    float **wt;           /* [n_side] a weighted list's staged weights, up to max_len; else NULL */
    uint32_t *wpos;       /* [PR_FEAT_MAX_LIST] a weighted list's element's position in its weights
                           * list, beside fv (PR__NO_WEIGHTS: none) */
    uint32_t *need;       /* [n_side] elements per engine column (block's vocab_col order) */
    pr_fval *fv;          /* [PR_FEAT_MAX_LIST] a chain's values */
    pr_fval *fv2;         /* [PR_FEAT_MAX_LIST] a map's values, crossed with its keys (entries) */
    uint8_t *raw;         /* [PR_FEAT_MAX_DIM * 4] a base64 vector's bytes (encoding f32) */
    uint8_t *why;         /* [PR_FEAT_MAX_LIST] operator reject reasons */
    char detail[PR_NAME_MAX + PR_FEAT_PATH_MAX + 256];
};

static bool pr__is_side(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST;
}

/* ---------------------------------------------------------------- building */

/* The unit a time-tagged value (an Avro timestamp, pr_json_any.unit) is
 * converted to for feature f: its hour_of_day / day_of_week / age step's unit
 * when that is a count (s, ms, us); -1 (the number as written) otherwise.
 * The event time reads tagged values itself (pr__event_time). */
static int8_t pr__time_op_unit(const pr_feature_spec *f)
{
    if (f->n_paths != 1 || f->kind == PR_FEAT_EVENT_TIME)
        return -1;
    for (uint8_t s = 0; s < f->n_ops; s++)
        if (f->ops[s].op == PR_FOP_HOUR_OF_DAY || f->ops[s].op == PR_FOP_DAY_OF_WEEK ||
            f->ops[s].op == PR_FOP_AGE)
            return f->ops[s].unit == PR_TIME_RFC3339 ? -1 : (int8_t)f->ops[s].unit;
    return -1;
}

/* Index of `path` in paths[0, n), or n. */
static size_t pr__path_find(const pr_json_path *paths, size_t n, const char *path,
                            pr_json_part part)
{
    size_t i = 0;
    while (i < n && (paths[i].part != part || strcmp(paths[i].path, path) != 0))
        i++;
    return i;
}

/* The filter's and the downsample's paths added to paths[0, *n) (at most
 * cap), where they are not already; sel says where each is. */
static int pr__sel_paths(const pr_feature_schema *fs, pr_json_path *paths, size_t *n, size_t cap,
                         pr__sel *sel)
{
    const char *extra[PR_SELECT_PATHS_MAX];
    uint32_t n_extra = pr_feature_select_paths(fs, extra);
    for (uint32_t i = 0; i < n_extra; i++) {
        size_t j = pr__path_find(paths, *n, extra[i], PR_JSON_AT);
        if (j == *n) {
            if (*n >= cap)
                return PR_EINVAL;
            paths[(*n)++] = (pr_json_path){.path = extra[i],
                                           .type = PR_JSON_ANY,
                                           .shape = PR_JSON_SCALAR_OR_LIST,
                                           .max_list = PR_FEAT_MAX_LIST};
        }
        sel->col[i] = (uint32_t)j;
    }
    return 0;
}

/* The column of (path, part) read position by position beside a list's
 * ids in column `ids` (a weighted list's weights, a map's values for its
 * entries): both PR_JSON_ALIGNED, so holes keep the positions; added to
 * paths when new. */
static int32_t pr__aligned_col(pr_json_path *paths, size_t *n, uint8_t *uses, const char *path,
                               pr_json_part part, uint32_t ids)
{
    size_t j = pr__path_find(paths, *n, path, part);
    if (j == *n)
        paths[(*n)++] = (pr_json_path){
            .path = path, .type = PR_JSON_ANY, .max_list = PR_FEAT_MAX_LIST, .part = part};
    uses[j] |= 8;
    uses[ids] |= 8;
    return (int32_t)j;
}

/* The distinct paths of the schema, one extractor column each: PR_JSON_ANY,
 * a list shape when every feature reading it is a list, a scalar when none
 * is, either when both (a scalar feature then refuses a list itself); a
 * dense vector's path the vector shape (no list of objects on the way). */
static int pr__paths(pr_json_decoder *d, const pr_feature_schema *fs, pr_json_path *paths,
                     size_t *n_out)
{
    size_t n = 0, cap = (size_t)fs->n_features * (PR_FEAT_MAX_CROSS + 1) + PR_SELECT_PATHS_MAX;
    /* bit 0 scalar user, bit 1 list user, bit 2 dense vector (its path is its
     * own: the config refuses another feature on it), bit 3 a weighted list's
     * ids or weights (aligned: holes kept; the config refuses a single-valued
     * feature or a vector on it) */
    uint8_t *uses = calloc(cap, 1);
    if (!uses)
        return PR_ENOMEM;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        pr_json_part part = f->from_keys ? PR_JSON_KEYS : PR_JSON_AT;
        for (uint8_t k = 0; k < f->n_paths; k++) {
            size_t j = pr__path_find(paths, n, f->paths[k], part);
            if (j == n)
                paths[n++] = (pr_json_path){.path = f->paths[k],
                                            .type = PR_JSON_ANY,
                                            .max_list = PR_FEAT_MAX_LIST,
                                            .part = part};
            /* `in:` reads either shape, as the filter (a list: by its elements) */
            uses[j] |= f->in.n                                                             ? 0
                       : f->kind == PR_FEAT_DENSE && f->dim && !pr_feature_vector_bytes(f) ? 4
                       : pr_feature_reads_list(f)                                          ? 2
                                                                                           : 1;
            d->feat[i].col[k] = (uint32_t)j;
        }
        d->feat[i].wcol =
            !pr_feature_weighted(f)
                ? -1
                : pr__aligned_col(paths, &n, uses, f->weights_path,
                                  f->weights_from_values ? PR_JSON_VALUES : PR_JSON_AT,
                                  d->feat[i].col[0]);
        /* from: entries / values: the values beside the keys, entry by entry */
        d->feat[i].ecol =
            !f->from_entries && !f->from_values
                ? -1
                : pr__aligned_col(paths, &n, uses, f->paths[0], PR_JSON_VALUES, d->feat[i].col[0]);
        d->feat[i].str_time = (f->kind == PR_FEAT_LABEL || f->kind == PR_FEAT_DENSE) &&
                              pr_feature_input_type(f) == PR_FTYPE_STR;
    }
    /* The filter's and the downsample's paths: either shape (a list matches
     * by its elements) unless a feature reads it too. */
    int rc = pr__sel_paths(fs, paths, &n, cap, &d->sel);
    for (size_t j = 0; j < n; j++)
        paths[j].shape = uses[j] & 4    ? PR_JSON_VECTOR
                         : uses[j] & 8  ? PR_JSON_ALIGNED
                         : uses[j] == 2 ? PR_JSON_LIST
                         : uses[j] == 1 ? PR_JSON_SCALAR
                                        : PR_JSON_SCALAR_OR_LIST;
    for (uint32_t i = 0; i < fs->n_features; i++)
        d->feat[i].holes =
            fs->features[i].n_paths == 1 && paths[d->feat[i].col[0]].shape == PR_JSON_ALIGNED;
    free(uses);
    *n_out = n;
    return rc;
}

static int pr__stage_alloc(pr_json_decoder *d, const pr_feature_schema *fs)
{
    d->labels = calloc((size_t)d->n_labels + 1, sizeof(float));
    d->dense = calloc((size_t)d->n_dense + 1, sizeof(float));
    d->cnt = calloc((size_t)d->n_side + 1, sizeof(uint32_t));
    d->val = calloc((size_t)d->n_side + 1, sizeof(uint64_t *));
    d->miss = calloc((size_t)d->n_side + 1, sizeof(uint8_t *));
    d->need = calloc((size_t)d->n_side + 1, sizeof(uint32_t));
    d->fv = calloc(PR_FEAT_MAX_LIST, sizeof(pr_fval));
    d->fv2 = calloc(PR_FEAT_MAX_LIST, sizeof(pr_fval));
    d->why = calloc(PR_FEAT_MAX_LIST, 1);
    d->raw = malloc((size_t)PR_FEAT_MAX_DIM * 4);
    d->wt = calloc((size_t)d->n_side + 1, sizeof(float *));
    d->wpos = calloc(PR_FEAT_MAX_LIST, sizeof(uint32_t));
    if (!d->labels || !d->dense || !d->cnt || !d->val || !d->miss || !d->need || !d->fv ||
        !d->fv2 || !d->why || !d->raw || !d->wt || !d->wpos)
        return PR_ENOMEM;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr__jfeat *jf = &d->feat[i];
        if (jf->side < 0)
            continue;
        uint32_t m = jf->f->kind == PR_FEAT_LIST ? jf->f->max_len : 1;
        d->val[jf->side] = calloc(m ? m : 1, sizeof(uint64_t));
        d->miss[jf->side] = calloc(m ? m : 1, 1);
        if (!d->val[jf->side] || !d->miss[jf->side])
            return PR_ENOMEM;
        if (jf->wcol >= 0 && !(d->wt[jf->side] = calloc(m ? m : 1, sizeof(float))))
            return PR_ENOMEM;
        d->weighted |= jf->wcol >= 0;
    }
    return 0;
}

pr_json_decoder *pr_json_decoder_new(const pr_feature_schema *fs, char *errstr, size_t errstr_size)
{
    if (!fs || !fs->declared || fs->n_features == 0) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "json: needs a declared feature schema");
        return NULL;
    }
    if (fs->n_filter > PR_FILTER_MAX_CONDS) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "json: more than %d filter conditions",
                  PR_FILTER_MAX_CONDS);
        return NULL;
    }
    /* a vector's elements go through fv / why ([PR_FEAT_MAX_LIST]) and into
     * the staged dense row: the config's limits, checked again for a schema
     * built by hand */
    _Static_assert(PR_FEAT_MAX_DIM <= PR_FEAT_MAX_LIST, "a vector's elements fit fv");
    if (pr_feature_schema_dense_cols(fs) > PR_MAX_DENSE_COLS) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "json: more than %d dense columns",
                  PR_MAX_DENSE_COLS);
        return NULL;
    }
    pr_json_decoder *d = calloc(1, sizeof(*d));
    pr_json_path *paths = calloc(
        (size_t)fs->n_features * (PR_FEAT_MAX_CROSS + 1) + PR_SELECT_PATHS_MAX, sizeof(*paths));
    if (!d || !paths || !(d->feat = calloc(fs->n_features, sizeof(*d->feat))))
        goto out_nomem;
    d->fs = fs;
    d->n_feat = fs->n_features;
    d->weight = 1.0f; /* a weight label without a downsample (serving): 1 */
    for (uint32_t i = 0; i < fs->n_features; i++) {
        pr__jfeat *jf = &d->feat[i];
        jf->f = &fs->features[i];
        jf->kind = (uint8_t)jf->f->kind;
        jf->side = pr__is_side(jf->f) ? d->n_side++ : -1;
        jf->vocab_step = pr_feature_vocab_step(jf->f);
        jf->tunit = pr__time_op_unit(jf->f);
        jf->dim = jf->f->dim;
        if (jf->f->kind == PR_FEAT_LABEL)
            jf->slot = d->n_labels++;
        else if (jf->f->kind == PR_FEAT_DENSE) { /* a vector: dim columns from slot */
            jf->slot = d->n_dense;
            d->n_dense = (uint16_t)(d->n_dense + pr_feature_dense_cols(jf->f));
        }
    }
    size_t n_paths = 0;
    if (pr__paths(d, fs, paths, &n_paths))
        goto out_nomem;
    char xerr[256];
    d->x = pr_json_extractor_new(paths, n_paths, 0, xerr, sizeof(xerr));
    if (!d->x) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "json: the schema's paths: %s", xerr);
        goto out_free;
    }
    if (!(d->jb = pr_json_block_new(d->x, 1)) || pr__stage_alloc(d, fs))
        goto out_nomem;
    d->selects = fs->n_filter || fs->downsample.enabled;
    pr_json_path fpaths[PR_SELECT_PATHS_MAX];
    size_t nf = 0;
    pr__sel_paths(fs, fpaths, &nf, PR_SELECT_PATHS_MAX, &d->fsel);
    if (nf) {
        d->fx = pr_json_extractor_new(fpaths, nf, 0, xerr, sizeof(xerr));
        if (!d->fx) {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "json: the filter's paths: %s", xerr);
            goto out_free;
        }
        if (!(d->fjb = pr_json_block_new(d->fx, 1)))
            goto out_nomem;
    }
    d->paths = paths;
    d->n_paths = n_paths;
    return d;
out_nomem:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "json: out of memory");
out_free:
    free(paths);
    pr_json_decoder_free(d);
    return NULL;
}

void pr_json_decoder_free(pr_json_decoder *d)
{
    if (!d)
        return;
    for (uint16_t s = 0; d->val && s < d->n_side; s++) {
        free(d->val[s]);
        free(d->miss[s]);
        if (d->wt)
            free(d->wt[s]);
    }
    free(d->wt);
    free(d->wpos);
    free(d->labels);
    free(d->dense);
    free(d->cnt);
    free(d->val);
    free(d->miss);
    free(d->need);
    free(d->fv);
    free(d->fv2);
    free(d->why);
    free(d->raw);
    if (d->rd_free)
        d->rd_free(d->rd);
    pr_json_block_free(d->jb);
    pr_json_extractor_free(d->x);
    pr_json_block_free(d->fjb);
    pr_json_extractor_free(d->fx);
    free(d->paths);
    free(d->feat);
    free(d);
}

/* ---------------------------------------------------------------- one record */

/* A pr_fop_reject as the record's reason. */
static int pr__reason_of_fop(int why)
{
    return why == PR_FOP_REJECT_HEX    ? PR_DEC_BAD_HEX
           : why == PR_FOP_REJECT_TIME ? PR_DEC_BAD_TIME
                                       : PR_DEC_WRONG_TYPE;
}

static int pr__fail(pr_json_decoder *d, const pr_feature_spec *f, int reason, const char *what)
{
    snprintf(d->detail, sizeof(d->detail), "%s (%s): %s", f->name, f->paths[0], what);
    return reason;
}

static const char *pr__type_name(uint8_t t)
{
    return t == PR_FVAL_STR ? "a string" : t == PR_FVAL_NUM ? "a number" : "an integer";
}

/* Microseconds per pr_json_unit, per pr_time_unit (s, ms, us). */
static const int64_t pr__tag_us[] = {
    [PR_JSON_UNIT_DAYS] = 86400LL * 1000000, [PR_JSON_UNIT_MS] = 1000, [PR_JSON_UNIT_US] = 1};
static const int64_t pr__unit_us[] = {[PR_TIME_S] = 1000000, [PR_TIME_MS] = 1000, [PR_TIME_US] = 1};

/* A time-tagged integer as microseconds; false when out of range. */
static bool pr__tagged_us(const pr_json_any *a, int64_t *us)
{
    return !__builtin_mul_overflow(a->i, pr__tag_us[a->unit], us);
}

/* A time-tagged integer in unit `to` (floored, as pr__event_time floors);
 * out of range: an infinite number, which every time step refuses. */
static void pr__retime(const pr_json_any *a, int8_t to, pr_fval *v)
{
    int64_t us, q = pr__unit_us[to];
    if (!pr__tagged_us(a, &us)) {
        v->type = PR_FVAL_NUM;
        v->num = HUGE_VAL;
        return;
    }
    v->u = (uint64_t)(us >= 0 ? us / q : -((-us + q - 1) / q));
}

/* Value k of extractor column `col` (row 0) as a pr_fval; bools are integers;
 * a time-tagged integer in unit tunit (>= 0). */
PR__HOT void pr__value(const pr_json_decoder *d, uint32_t col, uint32_t k, pr_fval *v, int8_t tunit)
{
    const pr_json_any *a = &d->jb->cols[col].any[k];
    memset(v, 0, sizeof(*v));
    switch (a->type) {
    case PR_JSON_HOLE: /* a PR_JSON_ALIGNED path's element without the field */
        break;
    case PR_JSON_STRING:
        v->type = PR_FVAL_STR;
        v->len = a->s.len;
        v->str = d->jb->arena + a->s.off;
        break;
    case PR_JSON_DOUBLE:
        v->type = PR_FVAL_NUM;
        v->num = a->d;
        break;
    default: /* INT64, BOOL */
        v->type = PR_FVAL_INT;
        v->u = (uint64_t)a->i;
        if (a->unit && tunit >= 0)
            pr__retime(a, tunit, v);
        break;
    }
}

/* The single value of a scalar path: missing when absent or null; a list
 * (a path shared with a list feature) is the wrong type. */
PR__HOT int pr__scalar(pr_json_decoder *d, const pr__jfeat *jf, uint8_t k, pr_fval *v)
{
    uint32_t col = jf->col[k];
    memset(v, 0, sizeof(*v));
    if (d->jb->cols[col].present[0] != PR_JSON_PRESENT)
        return 0;
    if (d->jb->cols[col].count[0] != 1)
        return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE, "a single value expected, got a list");
    pr__value(d, col, 0, v, jf->tunit);
    return 0;
}

/* Steps [from, to) of f's chain over n values; the first reject names the
 * reason. d->why is all zeros between calls (a step writes it only where it
 * rejects, and a reject zeroes it again here), so no step clears it first. */
static int pr__chain_fail(pr_json_decoder *d, const pr_feature_spec *f, uint32_t s, size_t n,
                          int bad)
{
    if (bad < 0) {
        memset(d->why, 0, n);
        return pr__fail(d, f, PR_DEC_WRONG_TYPE, "operator not runnable here");
    }
    size_t r = 0;
    while (r < n && !d->why[r])
        r++;
    int why = r < n ? d->why[r] : 0;
    memset(d->why, 0, n);
    char what[96], takes[48];
    const pr_fop_info *op = &pr_fop_table[f->ops[s].op];
    if (why == PR_FOP_REJECT_TYPE) { /* say what it takes: the value's type is the other */
        pr_ftype_text(op->accepts, takes, sizeof(takes));
        snprintf(what, sizeof(what), "'%s' takes %s, and the value is not one", op->name, takes);
    } else {
        snprintf(what, sizeof(what), "'%s' refused the value", op->name);
    }
    return pr__fail(d, f, pr__reason_of_fop(why), what);
}

PR__HOT int pr__chain(pr_json_decoder *d, const pr_feature_spec *f, uint32_t from, uint32_t to,
                      pr_fval *v, size_t n)
{
    for (uint32_t s = from; s < to; s++) {
        int bad = pr_fop_apply_at(&f->ops[s], v, n, d->why, d->own_event_us);
        if (bad != 0)
            return pr__chain_fail(d, f, s, n, bad);
    }
    return 0;
}

/* A number of an integral value within int64 as that integer (exactly:
 * 2^53 + 1 written as a float is not 2^53 + 1); false for anything else. */
static bool pr__integral(const pr_json_any *a, int64_t *i)
{
    if (a->big_int || !(a->d >= -9223372036854775808.0 && a->d < 9223372036854775808.0) ||
        a->d != (double)(int64_t)a->d)
        return false;
    *i = (int64_t)a->d;
    return true;
}

/* A value's key as the filter matches it: a string its pr_fop_hash64
 * (*type PR_FTYPE_STR), an integer its value (a bool 0 / 1, a number of an
 * integral value within int64 that integer; PR_FTYPE_INT); false for
 * anything else. The downsample key's id and `in:` both read it. */
static bool pr__value_key(const pr_json_block *jb, const pr_json_any *a, uint8_t *type,
                          uint64_t *key)
{
    int64_t i;
    *type = PR_FTYPE_INT;
    switch (a->type) {
    case PR_JSON_STRING:
        *type = PR_FTYPE_STR;
        *key = pr_fop_hash64(jb->arena + a->s.off, a->s.len);
        return true;
    case PR_JSON_INT64:
    case PR_JSON_BOOL:
        *key = (uint64_t)a->i;
        return true;
    case PR_JSON_DOUBLE:
        if (!pr__integral(a, &i))
            return false;
        *key = (uint64_t)i;
        return true;
    default:
        return false;
    }
}

/* Is extracted value a (of block jb) one of `in`'s values? */
static bool pr__in_eq(const pr_json_block *jb, const pr_json_any *a, const pr_feature_in *in)
{
    uint8_t type;
    uint64_t key;
    if (!pr__value_key(jb, a, &type, &key))
        return false;
    for (uint16_t k = 0; k < in->n; k++)
        if (in->key[k] == key && in->type[k] == type)
            return true;
    return false;
}

/* A label's or dense number's `in:`: 1 when a value at its path (a list:
 * an element) is one of its values, else 0; absent, null or an empty list
 * (which Avro and Protobuf readers, as a repeated field, do not tell from
 * absent): its default, else missing. */
static void pr__in_value(pr_json_decoder *d, const pr__jfeat *jf, pr_fval *v)
{
    const pr_json_col *c = &d->jb->cols[jf->col[0]];
    memset(v, 0, sizeof(*v));
    if (c->present[0] != PR_JSON_PRESENT || c->count[0] == 0) {
        if (jf->f->has_default)
            pr_fop_apply(&jf->f->deflt, v, 1, NULL);
        return;
    }
    v->type = PR_FVAL_NUM;
    for (uint32_t i = 0; i < c->count[0] && v->num == 0; i++)
        v->num = pr__in_eq(d->jb, &c->any[i], &jf->f->in) ? 1.0 : 0.0;
}

/* A number for a label or a dense feature (bools and integers convert;
 * with `in:` its 1 or 0). */
static int pr__numeric(pr_json_decoder *d, const pr__jfeat *jf, pr_fval *v)
{
    if (jf->f->in.n) {
        pr__in_value(d, jf, v);
        return 0;
    }
    int rc = pr__scalar(d, jf, 0, v);
    if (rc)
        return rc;
    bool str_time = jf->str_time;
    if ((v->type == PR_FVAL_STR) != str_time && v->type != PR_FVAL_MISSING)
        return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE,
                        str_time ? "an rfc3339 time (a string) expected"
                                 : "a number expected, got a string");
    if (v->type == PR_FVAL_INT) {
        v->num = (double)(int64_t)v->u;
        v->type = PR_FVAL_NUM;
    }
    if (v->type == PR_FVAL_MISSING && jf->f->has_default)
        pr_fop_apply(&jf->f->deflt, v, 1, NULL);
    return 0;
}

/* A label's or dense feature's final value must be a finite float32: NaN
 * or infinity (Avro and Protobuf doubles can carry them), or a magnitude
 * beyond float32 (1e300: inf in the tensor), would make a loss NaN. */
static int pr__float32(pr_json_decoder *d, const pr__jfeat *jf, const pr_fval *v)
{
    if (v->type != PR_FVAL_NUM || isfinite((float)v->num) || d->fs->nonfinite_ok)
        return 0;
    char what[96];
    snprintf(what, sizeof(what), "%g is %s", v->num,
             isfinite(v->num) ? "beyond float32" : "not a finite number");
    return pr__fail(d, jf->f, PR_DEC_NUMBER_OUT_OF_RANGE, what);
}

/* A dense vector (`dim`) written as a list: exactly dim numbers (bools and
 * integers convert) into d->fv; absent, null or an empty list (a Protobuf
 * repeated field cannot tell empty from absent) leaves every element
 * missing. */
static int pr__vector_list(pr_json_decoder *d, const pr__jfeat *jf)
{
    const pr_feature_spec *f = jf->f;
    const pr_json_col *c = &d->jb->cols[jf->col[0]];
    uint32_t dim = f->dim;
    pr_fval *v = d->fv;
    char what[96];
    if (c->present[0] != PR_JSON_PRESENT || !c->count[0]) {
        memset(v, 0, dim * sizeof(*v)); /* PR_FVAL_MISSING */
        return 0;
    }
    if (c->count[0] != dim) {
        snprintf(what, sizeof(what), "a vector of %u numbers expected, got %u", dim, c->count[0]);
        return pr__fail(d, f, PR_DEC_WRONG_TYPE, what);
    }
    for (uint32_t k = 0; k < dim; k++) {
        pr__value(d, jf->col[0], k, &v[k], jf->tunit);
        if (v[k].type == PR_FVAL_STR) {
            snprintf(what, sizeof(what), "a number expected at [%u], got a string", k);
            return pr__fail(d, f, PR_DEC_WRONG_TYPE, what);
        }
        if (v[k].type == PR_FVAL_INT) {
            v[k].num = (double)(int64_t)v[k].u;
            v[k].type = PR_FVAL_NUM;
        }
    }
    return 0;
}

/* A dense vector with `encoding: f32`: one string of dim float32
 * little-endian, its bytes as they are from a binary format (Avro bytes or
 * fixed, Protobuf bytes: text fields must be UTF-8, which floats are not;
 * the config checks a fixed writer schema), base64 in JSON text (the
 * standard or the URL-safe alphabet, padded or not); absent, null or empty
 * (a proto3 bytes field cannot tell empty from absent) leaves every element
 * missing. */
static int pr__vector_bytes(pr_json_decoder *d, const pr__jfeat *jf)
{
    const pr_feature_spec *f = jf->f;
    uint32_t dim = f->dim;
    pr_fval *v = d->fv, s;
    char what[128];
    int rc = pr__scalar(d, jf, 0, &s);
    if (rc)
        return rc;
    if (s.type == PR_FVAL_MISSING || (s.type == PR_FVAL_STR && s.len == 0)) {
        memset(v, 0, dim * sizeof(*v));
        return 0;
    }
    if (s.type != PR_FVAL_STR)
        return pr__fail(d, f, PR_DEC_WRONG_TYPE,
                        "float32 bytes expected (base64 in JSON), got a number");
    const uint8_t *b = (const uint8_t *)s.str;
    size_t n = s.len;
    if (!d->read) { /* JSON text: base64 */
        if (s.len / 4 * 3 > (size_t)PR_FEAT_MAX_DIM * 4) {
            snprintf(what, sizeof(what), "a vector of %u float32 is %u bytes, got over %u", dim,
                     dim * 4, PR_FEAT_MAX_DIM * 4);
            return pr__fail(d, f, PR_DEC_WRONG_TYPE, what);
        }
        if (pr_base64_decode(s.str, s.len, d->raw, (size_t)PR_FEAT_MAX_DIM * 4, &n))
            return pr__fail(d, f, PR_DEC_WRONG_TYPE, "not base64 (f32 bytes in JSON text)");
        b = d->raw;
    }
    if (n != (size_t)dim * 4) {
        snprintf(what, sizeof(what), "a vector of %u float32 is %u bytes, got %zu", dim, dim * 4,
                 n);
        return pr__fail(d, f, PR_DEC_WRONG_TYPE, what);
    }
    for (uint32_t k = 0; k < dim; k++) {
        uint32_t u = (uint32_t)b[4 * k] | (uint32_t)b[4 * k + 1] << 8 |
                     (uint32_t)b[4 * k + 2] << 16 | (uint32_t)b[4 * k + 3] << 24;
        float x;
        memcpy(&x, &u, sizeof(x));
        v[k] = (pr_fval){.type = PR_FVAL_NUM, .num = x};
    }
    return 0;
}

/* A dense vector: its dim values (pr__vector_list or pr__vector_bytes),
 * each through the chain into column slot + k; missing ones take the
 * default (a fill, else 0). */
static int pr__vector(pr_json_decoder *d, const pr__jfeat *jf)
{
    const pr_feature_spec *f = jf->f;
    uint32_t dim = f->dim;
    pr_fval *v = d->fv;
    int rc = f->encoding == PR_VEC_F32 ? pr__vector_bytes(d, jf) : pr__vector_list(d, jf);
    if (rc)
        return rc;
    if (f->has_default)
        pr_fop_apply(&f->deflt, v, dim, NULL);
    rc = pr__chain(d, f, 0, f->n_ops, v, dim);
    for (uint32_t k = 0; !rc && k < dim; k++)
        rc = pr__float32(d, jf, &v[k]);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < dim; k++)
        d->dense[jf->slot + k] = v[k].type == PR_FVAL_NUM ? (float)v[k].num : 0.0f;
    return 0;
}

static int pr__event_time(pr_json_decoder *d, const pr__jfeat *jf, const pr_decode_ctx *ctx)
{
    pr_fval v;
    int rc = pr__scalar(d, jf, 0, &v);
    d->event_ms = ctx->default_event_time_ms;
    if (rc || v.type == PR_FVAL_MISSING)
        return rc;
    int64_t us;
    const pr_json_any *a = &d->jb->cols[jf->col[0]].any[0];
    if (a->type == PR_JSON_INT64 && a->unit) { /* the writer's type says the unit */
        if (!pr__tagged_us(a, &us))
            return pr__fail(d, jf->f, PR_DEC_BAD_TIME, "a time out of range");
    } else if (pr_fop_time_us(&v, jf->f->unit, &us))
        return pr__fail(d, jf->f, PR_DEC_BAD_TIME, "not a time in its unit");
    d->event_ms = us >= 0 ? us / 1000 : -((-us + 999) / 1000);
    d->own_event_us = us;
    char what[200];
    if (pr_decode_check_ahead(ctx, d->event_ms, what, sizeof(what)))
        return pr__fail(d, jf->f, PR_DEC_BAD_TIME, what);
    return 0;
}

/* A vocabulary evicting by event time needs every row's time after the epoch
 * (the engine refuses a block holding one without): reject the record here. */
static int pr__time_for_ttl(pr_json_decoder *d, const pr_feature_schema *fs)
{
    if (!fs->time_required || d->event_ms > 0)
        return 0;
    const pr_feature_spec *f = NULL;
    for (uint32_t i = 0; i < fs->n_features && !f; i++)
        if (fs->features[i].kind == PR_FEAT_EVENT_TIME)
            f = &fs->features[i];
    snprintf(d->detail, sizeof(d->detail),
             "%s (%s): eviction ttl_s needs an event time after 1970-01-01T00:00:00Z, got %s",
             f ? f->name : "event_time", f ? f->paths[0] : "-",
             d->event_ms ? "an earlier one" : "none");
    return PR_DEC_BAD_TIME;
}

/* Why a final value cannot be staged (the type names the reason). */
static int pr__finish_fail(pr_json_decoder *d, const pr__jfeat *jf, const pr_fval *v)
{
    char what[96];
    snprintf(what, sizeof(what), "%s cannot be %s", pr__type_name(v->type),
             jf->vocab_step >= 0 ? "a vocabulary id" : "a sparse value (an integer)");
    return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE, what);
}

/* Final value (before vocab, or at the chain's end) -> staged key / value. */
PR__HOT int pr__finish_value(pr_json_decoder *d, const pr__jfeat *jf, const pr_fval *v,
                             uint64_t *out, uint8_t *missing)
{
    *missing = v->type == PR_FVAL_MISSING;
    *out = 0;
    if (*missing || v->type == PR_FVAL_INT) {
        *out = *missing ? 0 : v->u;
        return 0;
    }
    if (v->type == PR_FVAL_STR && jf->vocab_step >= 0) {
        *out = pr_fop_hash64(v->str, v->len);
        return 0;
    }
    return pr__finish_fail(d, jf, v);
}

static int pr__single(pr_json_decoder *d, const pr__jfeat *jf)
{
    const pr_feature_spec *f = jf->f;
    pr_fval *v = d->fv;
    uint32_t from = 0, to = jf->vocab_step >= 0 ? (uint32_t)jf->vocab_step : f->n_ops;
    int rc;
    if (f->n_paths > 1) { /* a cross: its implicit first step */
        pr_fval vals[PR_FEAT_MAX_CROSS];
        const pr_fval *cols[PR_FEAT_MAX_CROSS];
        for (uint8_t k = 0; k < f->n_paths; k++) {
            if ((rc = pr__scalar(d, jf, k, &vals[k])))
                return rc;
            cols[k] = &vals[k];
        }
        d->why[0] = 0;
        if (pr_fop_cross(cols, f->n_paths, 1, v, d->why) != 0)
            return pr__fail(d, f, pr__reason_of_fop(d->why[0]), "'cross' refused the values");
        from = f->n_ops > 0 && f->ops[0].op == PR_FOP_CROSS ? 1 : 0;
    } else {
        if ((rc = pr__scalar(d, jf, 0, v)))
            return rc;
        if (v->type == PR_FVAL_MISSING && f->has_default)
            pr_fop_apply(&f->deflt, v, 1, NULL);
    }
    if ((rc = pr__chain(d, f, from, to, v, 1)))
        return rc;
    d->cnt[jf->side] = 1; /* a missing single value keeps its slot */
    return pr__finish_value(d, jf, v, &d->val[jf->side][0], &d->miss[jf->side][0]);
}

/* A weighted list's weights list against its n ids: as long (or absent);
 * the weights themselves are read later, for the ids that are kept. */
static int pr__weights_len(pr_json_decoder *d, const pr__jfeat *jf, uint32_t n)
{
    const pr_json_col *c = &d->jb->cols[jf->wcol];
    uint32_t wn = c->present[0] == PR_JSON_PRESENT ? c->count[0] : 0;
    if (!wn || wn == n)
        return 0;
    char what[PR_FEAT_PATH_MAX + 96];
    snprintf(what, sizeof(what), "weights (%s): %u numbers for %u ids", jf->f->weights_path, wn, n);
    return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE, what);
}

/* The weights of the m ids kept, whose positions in the weights list are
 * d->wpos[0, m) (PR__NO_WEIGHTS: no weights list), into out: a number, as
 * float32; missing (a hole, no list) the default, or the record rejected;
 * a string or a bool wrong_type; NaN, infinity or beyond float32
 * number_out_of_range. Only kept ids are judged: a weight whose id was
 * dropped (missing, cut by max_len) never rejects its record. With
 * weights.ops the chain runs on the kept weights (pr__weights_ops) and
 * only its result is judged, as a dense feature's. */
#define PR__NO_WEIGHTS UINT32_MAX

/* Kept weight k as read, or the default: 0, or the record's reject. */
PR__HOT int pr__weight_raw(pr_json_decoder *d, const pr__jfeat *jf, uint32_t k, double *w)
{
    const pr_json_col *c = &d->jb->cols[jf->wcol];
    const pr_json_any *a = d->wpos[k] == PR__NO_WEIGHTS ? NULL : &c->any[d->wpos[k]];
    char what[PR_FEAT_PATH_MAX + 96];
    if (!a || a->type == PR_JSON_HOLE) {
        if (!jf->f->has_weight_default) {
            snprintf(what, sizeof(what), "weights (%s): an id without a weight (no default)",
                     jf->f->weights_path);
            return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE, what);
        }
        *w = jf->f->weight_default;
        return 0;
    }
    if (a->type == PR_JSON_STRING || a->type == PR_JSON_BOOL) {
        snprintf(what, sizeof(what), "weights (%s): a weight is %s, not a number",
                 jf->f->weights_path, a->type == PR_JSON_STRING ? "a string" : "a bool");
        return pr__fail(d, jf->f, PR_DEC_WRONG_TYPE, what);
    }
    *w = a->type == PR_JSON_INT64 ? (double)a->i : a->d;
    return 0;
}

/* A weight as float32, or number_out_of_range (`ops`: after the operators). */
PR__HOT int pr__weight_f32(pr_json_decoder *d, const pr__jfeat *jf, double w, const char *ops,
                           float *out)
{
    /* --fit (nonfinite_ok) keeps an infinity, which an operator after the
     * cut may still bound, out of its statistics; NaN stays NaN through
     * every operator, so the run rejects its record and the fit skips it */
    if (!isfinite((float)w) && (!d->fs->nonfinite_ok || isnan(w))) {
        char what[PR_FEAT_PATH_MAX + 96];
        snprintf(what, sizeof(what), "weights (%s): %s%g is %s", jf->f->weights_path, ops,
                 isnan(w) ? NAN : w, /* "nan", not "-nan" (log1p(-2)) */
                 isfinite(w) ? "beyond float32" : "not a finite number");
        return pr__fail(d, jf->f, PR_DEC_NUMBER_OUT_OF_RANGE, what);
    }
    *out = (float)w;
    return 0;
}

/* weights.ops: the m kept weights (the default first) through the chain
 * in double, as a dense vector's elements, then each as float32. */
static int pr__weights_ops(pr_json_decoder *d, const pr__jfeat *jf, uint32_t m, float *out)
{
    const pr_feature_spec *f = jf->f;
    pr_fval *v = d->fv; /* the ids are staged: fv is free */
    int rc;
    for (uint32_t k = 0; k < m; k++) {
        v[k] = (pr_fval){.type = PR_FVAL_NUM};
        if ((rc = pr__weight_raw(d, jf, k, &v[k].num)))
            return rc;
    }
    for (uint32_t s = 0; s < f->n_weight_ops; s++)
        if (pr_fop_apply(&f->weight_ops[s], v, m, d->why) != 0) { /* numbers: never */
            memset(d->why, 0, m);
            char what[PR_FEAT_PATH_MAX + 96];
            snprintf(what, sizeof(what), "weights (%s): '%s' refused a weight", f->weights_path,
                     pr_fop_table[f->weight_ops[s].op].name);
            return pr__fail(d, f, PR_DEC_WRONG_TYPE, what);
        }
    for (uint32_t k = 0; k < m; k++)
        if ((rc = pr__weight_f32(d, jf, v[k].num, "after the operators ", &out[k])))
            return rc;
    return 0;
}

static int pr__weights_take(pr_json_decoder *d, const pr__jfeat *jf, uint32_t m, float *out)
{
    if (jf->f->n_weight_ops)
        return pr__weights_ops(d, jf, m, out);
    for (uint32_t k = 0; k < m; k++) {
        double w;
        int rc = pr__weight_raw(d, jf, k, &w);
        if (rc || (rc = pr__weight_f32(d, jf, w, "", &out[k])))
            return rc;
    }
    return 0;
}

/* A map's m entries (keys in d->fv, as read): each key crossed with its
 * value (pr_fop_cross, as `cross:`) into one integer id; a null value (a
 * hole) leaves the entry missing, dropped with the other missing ones. Kept
 * out of line: the common list stays as compact as it was. */
static __attribute__((noinline)) int pr__entries(pr_json_decoder *d, const pr__jfeat *jf,
                                                 uint32_t m)
{
    for (uint32_t k = 0; k < m; k++) /* a hole reads as missing */
        pr__value(d, (uint32_t)jf->ecol, k, &d->fv2[k], -1);
    const pr_fval *cols[2] = {d->fv, d->fv2};
    d->why[0] = 0;
    if (pr_fop_cross(cols, 2, m, d->fv, d->why) != 0)
        return pr__fail(d, jf->f, pr__reason_of_fop(d->why[0]), "'cross' refused an entry");
    return 0;
}

/* A map's m values, the ids (list: { from: values }), in place of its keys
 * in d->fv: each typed as a list's element; a null value (a hole) reads as
 * missing, dropped with the other missing ones. */
static __attribute__((noinline)) void pr__map_values(pr_json_decoder *d, const pr__jfeat *jf,
                                                     uint32_t m)
{
    for (uint32_t k = 0; k < m; k++)
        pr__value(d, (uint32_t)jf->ecol, k, &d->fv[k], jf->tunit);
}

/* A list feature: its elements (a weighted list's with the positions of
 * their weights; holes of an aligned path dropped first, as an element
 * without the field; a map's entries crossed, or its values in place of
 * its keys) through the chain up to
 * vocab; missing ones dropped, then max_len and keep; then the kept ids'
 * weights. */
static int pr__list(pr_json_decoder *d, const pr__jfeat *jf)
{
    const pr_feature_spec *f = jf->f;
    const pr_json_col *c = &d->jb->cols[jf->col[0]];
    uint32_t n = c->present[0] == PR_JSON_PRESENT ? c->count[0] : 0;
    uint32_t to = jf->vocab_step >= 0 ? (uint32_t)jf->vocab_step : f->n_ops;
    bool weighted = jf->wcol >= 0;
    int rc;
    if (weighted && (rc = pr__weights_len(d, jf, n)))
        return rc;
    /* no weights list (absent, null, empty): every kept id takes the default */
    bool no_list = weighted && (d->jb->cols[jf->wcol].present[0] != PR_JSON_PRESENT ||
                                !d->jb->cols[jf->wcol].count[0]);
    uint32_t m = 0;
    if (!jf->holes) /* the common case: no holes to drop, no weights */
        for (; m < n; m++)
            pr__value(d, jf->col[0], m, &d->fv[m], jf->tunit);
    else
        for (uint32_t k = 0; k < n; k++) {
            if (c->any[k].type == PR_JSON_HOLE)
                continue;
            if (weighted)
                d->wpos[m] = no_list ? PR__NO_WEIGHTS : k;
            pr__value(d, jf->col[0], k, &d->fv[m++], jf->tunit);
        }
    if (jf->ecol >= 0 && jf->f->from_values)
        pr__map_values(d, jf, m);
    else if (jf->ecol >= 0 && (rc = pr__entries(d, jf, m)))
        return rc;
    if ((rc = pr__chain(d, f, 0, to, d->fv, m)))
        return rc;
    uint32_t kept = 0; /* missing elements dropped (with their weights), order kept */
    if (!weighted) {
        for (uint32_t k = 0; k < m; k++)
            if (d->fv[k].type != PR_FVAL_MISSING)
                d->fv[kept++] = d->fv[k];
    } else {
        for (uint32_t k = 0; k < m; k++)
            if (d->fv[k].type != PR_FVAL_MISSING) {
                d->wpos[kept] = d->wpos[k];
                d->fv[kept++] = d->fv[k];
            }
    }
    uint32_t first = kept > f->max_len && f->keep_last ? kept - f->max_len : 0;
    m = kept - first < f->max_len ? kept - first : f->max_len;
    for (uint32_t k = 0; k < m; k++)
        if ((rc = pr__finish_value(d, jf, &d->fv[first + k], &d->val[jf->side][k],
                                   &d->miss[jf->side][k])))
            return rc;
    if (weighted) {
        if (first)
            memmove(d->wpos, d->wpos + first, (size_t)m * sizeof(*d->wpos));
        if ((rc = pr__weights_take(d, jf, m, d->wt[jf->side])))
            return rc;
    }
    d->cnt[jf->side] = m;
    return 0;
}

/* A wrong_type of a sparse feature whose value was an integer beyond int64:
 * out of range is the reason (the value is an integer, just too large). A
 * list: { from: values }'s values are its map's values column. */
static int pr__range_first(pr_json_decoder *d, const pr__jfeat *jf, int rc)
{
    if (rc != PR_DEC_WRONG_TYPE)
        return rc;
    for (uint8_t k = 0; k < jf->f->n_paths; k++) {
        const pr_json_col *c = &d->jb->cols[jf->f->from_values ? (uint32_t)jf->ecol : jf->col[k]];
        uint32_t n = c->present[0] == PR_JSON_PRESENT ? c->count[0] : 0;
        for (uint32_t i = 0; i < n; i++)
            if (c->any[i].big_int)
                return pr__fail(d, jf->f, PR_DEC_NUMBER_OUT_OF_RANGE, "integer beyond int64");
    }
    return rc;
}

/* Every feature of the extracted record into the staging area. */
static int pr__features(pr_json_decoder *d, const pr_decode_ctx *ctx)
{
    d->event_ms = ctx->default_event_time_ms;
    d->own_event_us = PR_FOP_NO_TIME;
    for (uint32_t i = 0; i < d->n_feat; i++) {
        const pr__jfeat *jf = &d->feat[i];
        pr_fval v;
        int rc = 0;
        switch (jf->kind) {
        case PR_FEAT_EVENT_TIME:
            rc = pr__event_time(d, jf, ctx);
            break;
        case PR_FEAT_LABEL:
            if (jf->f->weight) /* schema.downsample's, no path */
                d->labels[jf->slot] = d->weight;
            else if (!(rc = pr__numeric(d, jf, &v)) &&
                     !(rc = pr__chain(d, jf->f, 0, jf->f->n_ops, &v, 1)) &&
                     !(rc = pr__float32(d, jf, &v)))
                d->labels[jf->slot] = v.type == PR_FVAL_NUM ? (float)v.num : 0.0f;
            break;
        case PR_FEAT_DENSE:
            if (jf->dim)
                rc = pr__vector(d, jf);
            else if (!(rc = pr__numeric(d, jf, &v)) &&
                     !(rc = pr__chain(d, jf->f, 0, jf->f->n_ops, &v, 1)) &&
                     !(rc = pr__float32(d, jf, &v)))
                d->dense[jf->slot] = v.type == PR_FVAL_NUM ? (float)v.num : 0.0f;
            break;
        case PR_FEAT_SPARSE:
            rc = pr__range_first(d, jf, pr__single(d, jf));
            break;
        case PR_FEAT_LIST:
            rc = pr__range_first(d, jf, pr__list(d, jf));
            break;
        default:
            break;
        }
        if (rc)
            return rc;
    }
    return pr__time_for_ttl(d, d->fs);
}

/* ---------------------------------------------------------------- the filter */

/* Does extracted value a (of block jb) equal filter value v (pr_engine.h's
 * matching rules)? */
static bool pr__filter_eq(const pr_json_block *jb, const pr_json_any *a, const pr_filter_value *v)
{
    switch (a->type) {
    case PR_JSON_STRING:
        return v->type == PR_FTYPE_STR && a->s.len == v->len &&
               memcmp(jb->arena + a->s.off, v->str, v->len) == 0;
    case PR_JSON_INT64:
    case PR_JSON_BOOL:
        return v->type == PR_FTYPE_INT && a->i == v->i;
    case PR_JSON_DOUBLE: {
        int64_t i;
        return v->type == PR_FTYPE_INT && pr__integral(a, &i) && i == v->i;
    }
    default:
        return false;
    }
}

/* Is any value at the condition's path (column c of jb) one of its values? */
static bool pr__filter_any(const pr_json_block *jb, const pr_filter_cond *fc, const pr_json_col *c)
{
    uint32_t n = c->present[0] == PR_JSON_PRESENT ? c->count[0] : 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint16_t k = 0; k < fc->n_values; k++)
            if (pr__filter_eq(jb, &c->any[i], &fc->values[k]))
                return true;
    return false;
}

/* Does the record extracted in jb pass condition fc (its path in column col)? */
static bool pr__cond_pass(const pr_json_block *jb, const pr_filter_cond *fc, uint32_t col)
{
    const pr_json_col *c = &jb->cols[col];
    switch (fc->op) {
    case PR_FILTER_IN:
        return pr__filter_any(jb, fc, c);
    case PR_FILTER_NOT_IN:
        return !pr__filter_any(jb, fc, c);
    case PR_FILTER_PRESENT:
        return c->present[0] == PR_JSON_PRESENT;
    default: /* PR_FILTER_ABSENT */
        return c->present[0] != PR_JSON_PRESENT;
    }
}

/* The downsample key's id (pr__value_key of its one value); false for a
 * fraction, an integer beyond int64, a list of several, absent: the
 * record's bytes decide. */
static bool pr__key_id(const pr_json_block *jb, const pr_json_col *c, uint64_t *id)
{
    uint8_t type;
    return c->present[0] == PR_JSON_PRESENT && c->count[0] == 1 &&
           pr__value_key(jb, &c->any[0], &type, id);
}

/* What schema.filter and schema.downsample make of the record extracted in
 * jb (sel: where their paths are; doc: its bytes, the JSON without a
 * registry frame): 0 kept (d->weight set), PR_DEC_FILTERED or
 * PR_DEC_SAMPLED_OUT. */
static int pr__select(pr_json_decoder *d, const pr_json_block *jb, const pr__sel *sel,
                      const char *doc, size_t len)
{
    const pr_feature_schema *fs = d->fs;
    for (uint32_t i = 0; i < fs->n_filter; i++)
        if (!pr__cond_pass(jb, &fs->filter[i], sel->col[i]))
            return PR_DEC_FILTERED;
    const pr_downsample *ds = &fs->downsample;
    d->weight = 1.0f;
    /* pr_feature_select_paths' order: where after the filter, then key */
    if (!ds->enabled || (ds->has_where && !pr__cond_pass(jb, &ds->where, sel->col[fs->n_filter])))
        return 0; /* not sampled: kept, weight 1 */
    uint64_t id, h;
    if (ds->key[0] && pr__key_id(jb, &jb->cols[sel->col[fs->n_filter + ds->has_where]], &id))
        h = pr_downsample_hash_id(id);
    else
        h = pr_fop_hash64(doc, len);
    if (ds->threshold != UINT64_MAX && h >= ds->threshold)
        return PR_DEC_SAMPLED_OUT;
    d->weight = (float)(1.0 / ds->rate);
    return 0;
}

/* A record the extractor refused for a value at one of the features' paths
 * (a type, a shape, a range): are the filter's and the downsample's paths
 * readable alone? Then they decide first (the record may not be one the
 * features are for); jdoc: the JSON. 0 kept (the refusal stands),
 * PR_DEC_FILTERED or PR_DEC_SAMPLED_OUT. */
static int pr__select_refused(pr_json_decoder *d, int reason, const char *jdoc, size_t jlen)
{
    if (d->read || (reason != PR_DEC_WRONG_TYPE && reason != PR_DEC_LIST_TOO_LONG &&
                    reason != PR_DEC_NUMBER_OUT_OF_RANGE))
        return 0;
    if (!d->fx) /* a downsample by the record's bytes alone: no column is read */
        return pr__select(d, d->jb, &d->sel, jdoc, jlen);
    pr_json_block_reset(d->fjb);
    if (pr_json_extract(d->fx, d->fjb, jdoc, jlen, NULL) != 0)
        return 0;
    return pr__select(d, d->fjb, &d->fsel, jdoc, jlen);
}

/* Feature health: the features row r's record lacked (absent, null or an
 * empty list at its path; a cross at any of its paths) marked in the block's
 * side tables (pr_fside.absent). */
static void pr__mark_absent(const pr_json_decoder *d, pr_fside *s, uint32_t r)
{
    const pr_json_col *cols = d->jb->cols;
    size_t words = pr_bitmap_words(s->cap);
    for (uint32_t i = 0; s->absent && i < d->n_feat && i < s->n_schema; i++) {
        const pr__jfeat *jf = &d->feat[i];
        bool lacks = false;
        for (uint8_t k = 0; k < jf->f->n_paths && !lacks; k++)
            lacks = cols[jf->col[k]].count[0] == 0;
        if (lacks)
            pr_bit_set(s->absent + i * words, r);
    }
}

/* The staged record as row b->rows: PR_EFULL when it does not fit. */
static int pr__commit(pr_json_decoder *d, const pr_decode_ctx *ctx, pr_block *b, int64_t offset)
{
    pr_fside *s = b->side;
    for (uint32_t c = 0; c < b->n_sparse; c++)
        d->need[c] = 0;
    for (uint16_t f = 0; f < d->n_side; f++)
        if (s->vocab_col[f] >= 0)
            d->need[s->vocab_col[f]] += d->cnt[f]; /* a shared table: its features' */
    if (!pr_block_fits(b, d->need))
        return PR_EFULL;
    for (uint16_t f = 0; f < d->n_side; f++)
        if (s->vocab_col[f] < 0 && pr_fside_reserve(s, f, d->cnt[f]))
            return PR_ENOMEM;
    for (uint16_t f = 0; d->weighted && f < d->n_side; f++)
        if (d->wt[f] && pr_fside_reserve_weights(s, f, d->cnt[f]))
            return PR_ENOMEM;
    uint32_t r = b->rows;
    memcpy(s->labels + (size_t)r * d->n_labels, d->labels, d->n_labels * sizeof(float));
    memcpy(s->dense + (size_t)r * d->n_dense, d->dense, d->n_dense * sizeof(float));
    size_t words = pr_bitmap_words(b->scap);
    for (uint16_t f = 0; f < d->n_side; f++) {
        uint32_t n = d->cnt[f];
        pr_fside_lengths(s, f)[r] = (int32_t)n;
        if (d->weighted && d->wt[f]) {
            memcpy(s->weights[f] + s->n_weights[f], d->wt[f], (size_t)n * sizeof(float));
            s->n_weights[f] += n;
        }
        int c = s->vocab_col[f];
        if (c < 0) {
            for (uint32_t k = 0; k < n; k++)
                s->values[f][s->n_values[f]++] = (int64_t)d->val[f][k];
            continue;
        }
        uint32_t at = b->col_rows[c];
        uint64_t *keys = b->sparse_u64 + (size_t)c * b->scap + at;
        uint64_t *miss = b->sparse_missing + (size_t)c * words;
        for (uint32_t k = 0; k < n; k++) {
            keys[k] = d->val[f][k];
            if (d->miss[f][k])
                pr_bit_set(miss, at + k);
        }
        b->col_rows[c] = at + n;
    }
    if (b->partition)
        b->partition[r] = ctx->partition;
    if (b->offset)
        b->offset[r] = offset;
    if (b->event_time_ms)
        b->event_time_ms[r] = d->event_ms;
    pr__mark_absent(d, s, r);
    b->rows = r + 1;
    return 0;
}

/* Row 0 of d->jb from one record: the JSON extractor, or the reader set.
 * 0 with *reason 0 (a row), or with a pr_decode_reason (d->detail says it);
 * < 0 an error. *jdoc, *jlen: the record without a registry frame. */
/* Schema-registry framing of a JSON Kafka message (Confluent's JSON Schema
 * serializer): byte 0 = 0, the magic byte, then a 4-byte big-endian schema
 * id, then the JSON text. JSON text never begins with a NUL byte, so a
 * message that does is read as framed; the id is skipped, not looked up (the
 * declared schema is the schema). */
#define PR__JSON_FRAMING 5

static int pr__read_row(pr_json_decoder *d, const char *doc, size_t len, bool message, int *reason,
                        const char **jdoc, size_t *jlen)
{
    pr_json_reject rej; /* not zeroed whole: 160 bytes per record for nothing */
    rej.reason = 0;
    rej.offset = 0;
    rej.detail[0] = 0;
    bool framed = message && !d->read && len && doc[0] == 0;
    if (framed) {
        if (len < PR__JSON_FRAMING) {
            *reason = PR_DEC_BAD_FRAMING;
            snprintf(d->detail, sizeof(d->detail),
                     "%zu byte(s) begin with byte 0: registry framing needs 5 (magic byte 0 and a "
                     "4-byte schema id) before the JSON",
                     len);
            return 0;
        }
        doc += PR__JSON_FRAMING;
        len -= PR__JSON_FRAMING;
    }
    *jdoc = doc;
    *jlen = len;
    pr_json_block_reset(d->jb);
    int rc = d->read ? d->read(d->rd, d->jb, doc, len, &rej)
                     : pr_json_extract(d->x, d->jb, doc, len, &rej);
    if (rc < 0) /* PR_EAGAIN: why (pr_json_decoder_last_detail) */
        snprintf(d->detail, sizeof(d->detail), "%s", rej.detail);
    if (rc <= 0)
        return rc;
    /* a reader gives pr_decode_reason, the extractor pr_json_reason */
    *reason = !d->read ? pr_decode_reason_of_json(rc) : rc < PR_DEC__COUNT ? rc : PR_DEC_WRONG_TYPE;
    /* names the byte: of the JSON, after a registry frame (the dead letter
     * keeps the whole message) */
    snprintf(d->detail, sizeof(d->detail), "%s%s", rej.detail,
             framed ? " (of the JSON after the 5-byte registry frame)" : "");
    return 0;
}

/* One document: 1 appended, 0 rejected or filtered (reported), PR_EFULL, PR_ENOMEM,
 * PR_EINVAL, PR_EAGAIN (a reader's: not decodable yet). */
static int pr__decode_one(const pr_decode_ctx *ctx, pr_block *b, const char *doc, size_t len,
                          bool message, int64_t recno, int64_t offset)
{
    pr_json_decoder *d = ctx->json;
    if (!d || !b->side || !b->col_rows || b->side->n_feat != d->n_side ||
        b->side->n_labels != d->n_labels || b->side->n_dense != d->n_dense)
        return PR_EINVAL;
    if (b->rows >= b->cap)
        return PR_EFULL;
    const char *jdoc = doc;
    size_t jlen = len;
    int reason = 0, rc = pr__read_row(d, doc, len, message, &reason, &jdoc, &jlen);
    if (rc < 0)
        return rc; /* PR_EAGAIN (reader: retry later), PR_ENOMEM */
    /* the filter and the downsample decide first */
    int drop = !d->selects ? 0
               : reason    ? pr__select_refused(d, reason, jdoc, jlen)
                           : pr__select(d, d->jb, &d->sel, jdoc, jlen);
    if (drop) { /* not a reject: keeps its place among the records */
        if (ctx->on_reject)
            ctx->on_reject(ctx->opaque, drop, "", doc, 0, recno);
        return 0;
    }
    if (!reason)
        reason = pr__features(d, ctx);
    if (reason) {
        if (ctx->on_reject)
            ctx->on_reject(ctx->opaque, reason, d->detail, doc, len, recno);
        return 0;
    }
    rc = pr__commit(d, ctx, b, offset);
    return rc < 0 ? rc : 1;
}

int pr_decode_json_line(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                        int64_t recno)
{
    return pr__decode_one(ctx, b, line, len, false, recno, recno);
}

static bool pr__blank(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return false;
    return true;
}

size_t pr_decode_json_lines(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                            bool eof, int64_t first_recno, int64_t *lines_out)
{
    const char *p = buf, *end = buf + len;
    int64_t lines = 0;
    while (p < end && b->rows < b->cap) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl && !eof)
            break;
        const char *le = nl ? nl : end;
        size_t ll = (size_t)(le - p);
        if (!pr__blank(p, ll) &&
            pr__decode_one(ctx, b, p, ll, false, first_recno + lines, first_recno + lines) < 0)
            break; /* no room (or no memory): this line again, in the next block */
        lines++;
        p = nl ? nl + 1 : end;
    }
    if (lines_out)
        *lines_out = lines;
    return (size_t)(p - buf);
}

int pr_decode_json_message(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                           uint32_t *next_rec)
{
    int rc = pr__decode_one(ctx, b, buf, len, true, 0, ctx->offset);
    if (rc == PR_EFULL)
        *next_rec = 0;
    return rc;
}

size_t pr_json_decoder_paths(const pr_json_decoder *d, const pr_json_path **paths)
{
    *paths = d->paths;
    return d->n_paths;
}

void pr_json_decoder_set_reader_owned(pr_json_decoder *d, pr_record_read_fn fn, void *rd,
                                      void (*free_fn)(void *rd))
{
    if (d->rd_free)
        d->rd_free(d->rd);
    d->read = fn;
    d->rd = fn ? rd : NULL;
    d->rd_free = fn ? free_fn : NULL;
}

void pr_json_decoder_set_reader(pr_json_decoder *d, pr_record_read_fn fn, void *rd)
{
    pr_json_decoder_set_reader_owned(d, fn, rd, NULL);
}

int pr_json_decoder_for_source(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                               size_t errstr_size)
{
    switch (src->format) {
    case PR_MSG_AVRO:
        return pr_avro_reader_from_cfg(d, src, errstr, errstr_size) ? 0 : PR_EINVAL;
    case PR_MSG_PROTOBUF:
        return pr_pbuser_set_reader(d, &src->protobuf, errstr, errstr_size);
    default: /* json (offline, a declared schema reads JSON lines whatever the format says) */
        return 0;
    }
}

const char *pr_json_decoder_last_detail(const pr_json_decoder *d)
{
    return d ? d->detail : "";
}
