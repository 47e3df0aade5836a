/*
 * offline_schema.c — `piperec process` for a declared feature schema (issue
 * 20): JSON lines -> per-record operators up to vocab -> jagged pr_block ->
 * engine (vocabularies) -> pr_feature_finish -> the offline layout
 * (pr_layout_*: labels.npy, dense.npy, sparse/<name>.values/.lengths.npy),
 * plus vocab/<name>.tsv, rejects.tsv and, when a vocabulary evicts,
 * recycled.npy (int64 [K, 4]: feature index among sparse features, output
 * row, index, notice number).
 *
 * One reader thread decodes (a JSON line at a time, in order); the engine
 * runs its own `eopts->threads` workers per block. Every output depends only
 * on the input order: never on the thread count or the block size.
 *
 * Decoding here is a small self-contained path over the ingest JSON
 * extractor (pr_json_*), written so that the offline layout could be built
 * and tested before the streaming decoder existed: labels and dense features
 * are read as numbers (PR_JSON_DOUBLE), every other path as an id
 * (PR_JSON_KEY: a string, or an integer written as its decimal digits). An id
 * whose bytes are a canonical decimal int64 ("42", "-7"; so 42 and "42"
 * alike) is the integer; any other is a string. Vocabulary keys: an integer
 * is its int64 bits (exact); a string is pr_fop_hash64 of its bytes (two
 * distinct strings collide with probability about n^2 / 2^65 for n distinct
 * strings). A missing label or dense value without a default is 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pr_ingest.h"
#include "pr_npy.h"
#include "pr_service.h"

#define PR__DETAIL 200

/* The decoder: the extractor's columns per feature path, scratch values. */
typedef struct pr__sdec {
    const pr_feature_schema *schema;
    pr_json_extractor *x;
    pr_json_block *jb;
    uint32_t (*col)[PR_FEAT_MAX_CROSS]; /* [n_features]: extractor column of each path */
    pr_json_type *type;                 /* [n_paths] */
    pr_fval **vals;                     /* [n_features][PR_FEAT_MAX_LIST] staged values */
    uint32_t *n_vals;                   /* [n_features] */
    pr_fval *cross[PR_FEAT_MAX_CROSS];  /* one value per cross path */
    uint8_t reason[PR_FEAT_MAX_LIST];
    int64_t event_ms;
} pr__sdec;

/* A record's reject: a reason name and a detail. */
typedef struct pr__srej {
    const char *reason;
    char detail[PR__DETAIL];
} pr__srej;

static bool pr__is_sparse(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST;
}

static void pr__sdec_free(pr__sdec *d)
{
    if (!d)
        return;
    pr_json_block_free(d->jb);
    pr_json_extractor_free(d->x);
    for (uint32_t i = 0; d->vals && i < d->schema->n_features; i++)
        free(d->vals[i]);
    for (int k = 0; k < PR_FEAT_MAX_CROSS; k++)
        free(d->cross[k]);
    free(d->vals);
    free(d->n_vals);
    free(d->col);
    free(d->type);
    free(d);
}

/* Register `path` (once) with the type the feature reads it as. */
static int pr__add_path(pr__sdec *d, pr_json_path *paths, size_t *n, const pr_feature_spec *f,
                        const char *path, uint32_t *col, char *errstr, size_t errstr_size)
{
    pr_json_type t =
        f->kind == PR_FEAT_LABEL || f->kind == PR_FEAT_DENSE ? PR_JSON_DOUBLE : PR_JSON_KEY;
    pr_json_shape sh = f->kind == PR_FEAT_LIST ? PR_JSON_LIST : PR_JSON_SCALAR;
    for (size_t j = 0; j < *n; j++)
        if (strcmp(paths[j].path, path) == 0) {
            /* A number read by one feature and an id by another (user.age_days
             * as dense and bucketized): read the number; the id side takes
             * integral values as integers (pr__json_val). */
            if (paths[j].shape != sh)
                return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                                 "schema: path '%s' is a list for one feature and a single value "
                                 "for another ('%s')",
                                 path, f->name);
            if (paths[j].type != t)
                paths[j].type = d->type[j] = PR_JSON_DOUBLE;
            *col = (uint32_t)j;
            return 0;
        }
    paths[*n] = (pr_json_path){path, t, sh, PR_FEAT_MAX_LIST};
    d->type[*n] = t;
    *col = (uint32_t)(*n)++;
    return 0;
}

static int pr__sdec_new(const pr_feature_schema *schema, pr__sdec **out, char *errstr,
                        size_t errstr_size)
{
    pr__sdec *d = calloc(1, sizeof(*d));
    size_t np = (size_t)schema->n_features * PR_FEAT_MAX_CROSS + 1;
    pr_json_path *paths = calloc(np, sizeof(*paths));
    if (!d || !paths) {
        free(d);
        free(paths);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
    }
    d->schema = schema;
    d->col = calloc(schema->n_features + 1, sizeof(*d->col));
    d->type = calloc(np, sizeof(*d->type));
    d->vals = calloc(schema->n_features + 1, sizeof(*d->vals));
    d->n_vals = calloc(schema->n_features + 1, sizeof(*d->n_vals));
    int rc = d->col && d->type && d->vals && d->n_vals ? 0 : PR_ENOMEM;
    for (int k = 0; !rc && k < PR_FEAT_MAX_CROSS; k++)
        rc = (d->cross[k] = calloc(1, sizeof(pr_fval))) ? 0 : PR_ENOMEM;
    size_t n = 0;
    for (uint32_t i = 0; !rc && i < schema->n_features; i++) {
        const pr_feature_spec *f = &schema->features[i];
        if (!(d->vals[i] = calloc(PR_FEAT_MAX_LIST, sizeof(pr_fval))))
            rc = PR_ENOMEM;
        for (uint8_t p = 0; !rc && p < f->n_paths; p++)
            rc = pr__add_path(d, paths, &n, f, f->paths[p], &d->col[i][p], errstr, errstr_size);
        if (rc && rc != PR_ENOMEM) {
            free(paths);
            pr__sdec_free(d);
            return rc;
        }
    }
    if (!rc && !(d->x = pr_json_extractor_new(paths, n, 0, errstr, errstr_size)))
        rc = PR_EINVAL;
    free(paths);
    if (!rc && !(d->jb = pr_json_block_new(d->x, 1)))
        rc = PR_ENOMEM;
    if (rc) {
        pr__sdec_free(d);
        return rc == PR_ENOMEM ? pr_seterr(errstr, errstr_size, rc, "offline: out of memory") : rc;
    }
    *out = d;
    return 0;
}

/* Is s[0, len) a canonical decimal int64 ("0", "-12", no '+', no leading 0)? */
static bool pr__canonical_int(const char *s, uint32_t len, int64_t *v)
{
    uint32_t i = len && s[0] == '-';
    if (i == len || len - i > 19 || (s[i] == '0' && len - i > 1) || (i && s[i] == '0'))
        return false;
    uint64_t u = 0;
    for (uint32_t k = i; k < len; k++) {
        if (s[k] < '0' || s[k] > '9')
            return false;
        u = u * 10 + (uint64_t)(s[k] - '0');
    }
    if (u > (uint64_t)INT64_MAX + (i ? 1 : 0))
        return false;
    *v = i ? (int64_t)(0 - u) : (int64_t)u;
    return true;
}

/* Value k of extractor column j as a pr_fval for feature f: a number for a
 * label or dense feature, else an id (an integer or a string; a number read
 * for another feature counts as an integer when it is whole, else stays a
 * number, which an id's operators reject). */
static pr_fval pr__json_val(const pr__sdec *d, const pr_feature_spec *f, uint32_t j, uint32_t k)
{
    const pr_json_col *c = &d->jb->cols[j];
    pr_fval v = {.type = PR_FVAL_NUM};
    if (d->type[j] == PR_JSON_DOUBLE) {
        v.num = c->f64[k];
        bool id = f->kind != PR_FEAT_LABEL && f->kind != PR_FEAT_DENSE;
        if (id && v.num == floor(v.num) && v.num >= -9223372036854775808.0 &&
            v.num < 9223372036854775808.0)
            return (pr_fval){.type = PR_FVAL_INT, .u = (uint64_t)(int64_t)v.num};
        return v;
    }
    const char *s = d->jb->arena + c->str[k].off;
    int64_t i;
    if (pr__canonical_int(s, c->str[k].len, &i))
        return (pr_fval){.type = PR_FVAL_INT, .u = (uint64_t)i};
    v.type = PR_FVAL_STR;
    v.str = s;
    v.len = c->str[k].len;
    return v;
}

static const char *pr__fop_reject_name(int why)
{
    static const char *const names[] = {"ok", "wrong_type", "bad_hex", "bad_time"};
    return why >= 0 && why <= PR_FOP_REJECT_TIME ? names[why] : "bad_value";
}

/* Run steps [k0, k1) of f over its n staged values; on a rejected value fill rej. */
static int pr__run_steps(pr__sdec *d, const pr_feature_spec *f, pr_fval *v, uint32_t n, int k0,
                         int k1, pr__srej *rej)
{
    for (int k = k0; k < k1; k++) {
        memset(d->reason, 0, n);
        int rc = pr_fop_apply(&f->ops[k], v, n, d->reason);
        if (rc < 0)
            return rc;
        if (rc > 0) {
            uint32_t r = 0;
            while (r < n && !d->reason[r])
                r++;
            rej->reason = pr__fop_reject_name(r < n ? d->reason[r] : PR_FOP_REJECT_TYPE);
            snprintf(rej->detail, sizeof(rej->detail), "%s: '%s' cannot take the value", f->name,
                     pr_fop_table[f->ops[k].op].name);
            return 1;
        }
    }
    return 0;
}

/* Stage feature i's values before its vocab step (all of its operators when
 * it has none): 0, 1 when the record is rejected (rej filled) or PR_E*. */
static int pr__stage_feature(pr__sdec *d, uint32_t i, pr__srej *rej)
{
    const pr_feature_spec *f = &d->schema->features[i];
    pr_fval *v = d->vals[i];
    uint32_t n = 1;
    int k0 = 0;
    if (f->n_paths >= 2) {
        const pr_fval *cols[PR_FEAT_MAX_CROSS];
        for (uint8_t p = 0; p < f->n_paths; p++) {
            uint32_t j = d->col[i][p];
            *d->cross[p] = d->jb->cols[j].present[0] == PR_JSON_PRESENT
                               ? pr__json_val(d, f, j, 0)
                               : (pr_fval){.type = PR_FVAL_MISSING};
            cols[p] = d->cross[p];
        }
        int rc = pr_fop_cross(cols, f->n_paths, 1, v, NULL);
        if (rc < 0)
            return rc;
        k0 = 1; /* the implicit cross step */
    } else {
        uint32_t j = d->col[i][0];
        const pr_json_col *c = &d->jb->cols[j];
        bool present = c->present[0] == PR_JSON_PRESENT;
        n = f->kind == PR_FEAT_LIST ? (present ? c->count[0] : 0) : 1;
        for (uint32_t k = 0; k < n; k++)
            v[k] = present ? pr__json_val(d, f, j, k) : (pr_fval){.type = PR_FVAL_MISSING};
        if (f->kind != PR_FEAT_LIST && !present && f->has_default)
            pr_fop_apply(&f->deflt, v, 1, NULL);
    }
    int vs = pr_feature_vocab_step(f);
    int rc = pr__run_steps(d, f, v, n, k0, vs >= 0 ? vs : f->n_ops, rej);
    if (rc)
        return rc;
    if (vs >= 0) /* a vocabulary key: an integer, or a string (hashed later) */
        for (uint32_t k = 0; k < n; k++)
            if (v[k].type == PR_FVAL_NUM) {
                rej->reason = "wrong_type";
                snprintf(rej->detail, sizeof(rej->detail),
                         "%s: a vocabulary key must be an integer or a string, not a number",
                         f->name);
                return 1;
            }
    if (f->kind == PR_FEAT_LIST) { /* drop missing elements, keep max_len */
        uint32_t w = 0;
        for (uint32_t k = 0; k < n; k++)
            if (v[k].type != PR_FVAL_MISSING)
                v[w++] = v[k];
        n = w;
        if (n > f->max_len) {
            if (f->keep_last)
                memmove(v, v + (n - f->max_len), (size_t)f->max_len * sizeof(*v));
            n = f->max_len;
        }
    }
    d->n_vals[i] = n;
    return 0;
}

/* Decode one JSON line into the staging area: 0, 1 = rejected, or PR_E*. */
static int pr__sdec_record(pr__sdec *d, const char *line, size_t len, pr__srej *rej)
{
    pr_json_block_reset(d->jb);
    pr_json_reject jr;
    int rc = pr_json_extract(d->x, d->jb, line, len, &jr);
    if (rc > 0) {
        rej->reason = pr_json_reason_name(rc);
        snprintf(rej->detail, sizeof(rej->detail), "%s", jr.detail);
        return 1;
    }
    if (rc < 0)
        return rc;
    d->event_ms = 0;
    for (uint32_t i = 0; i < d->schema->n_features; i++) {
        const pr_feature_spec *f = &d->schema->features[i];
        if (f->kind == PR_FEAT_EVENT_TIME) {
            uint32_t j = d->col[i][0];
            if (d->jb->cols[j].present[0] != PR_JSON_PRESENT)
                continue;
            pr_fval v = pr__json_val(d, f, j, 0);
            int64_t us;
            if (pr_fop_time_us(&v, f->unit, &us)) {
                rej->reason = "bad_time";
                snprintf(rej->detail, sizeof(rej->detail), "%s: not a time in %s", f->name,
                         pr_time_unit_names[f->unit]);
                return 1;
            }
            d->event_ms = us / 1000;
            continue;
        }
        if ((rc = pr__stage_feature(d, i, rej)))
            return rc;
    }
    return 0;
}

/* The staged record's elements per engine column (vocab features). */
static void pr__sdec_need(const pr__sdec *d, const pr_block *b, uint32_t *need)
{
    for (uint32_t i = 0, fi = 0; i < d->schema->n_features; i++) {
        if (!pr__is_sparse(&d->schema->features[i]))
            continue;
        int col = b->side->vocab_col[fi++];
        if (col >= 0)
            need[col] = d->n_vals[i];
    }
}

static uint64_t pr__vocab_key(const pr_fval *v)
{
    return v->type == PR_FVAL_STR ? pr_fop_hash64(v->str, v->len) : v->u;
}

/* Append the staged record as the block's next row (the caller checked it fits). */
static int pr__sdec_commit(const pr__sdec *d, pr_block *b, int64_t line)
{
    pr_fside *s = b->side;
    uint32_t r = b->rows, li = 0, di = 0, fi = 0;
    for (uint32_t i = 0; i < d->schema->n_features; i++) {
        const pr_feature_spec *f = &d->schema->features[i];
        const pr_fval *v = d->vals[i];
        uint32_t n = d->n_vals[i];
        if (f->kind == PR_FEAT_LABEL || f->kind == PR_FEAT_DENSE) {
            float x = v[0].type == PR_FVAL_NUM   ? (float)v[0].num
                      : v[0].type == PR_FVAL_INT ? (float)(int64_t)v[0].u
                                                 : 0.0f;
            if (f->kind == PR_FEAT_LABEL)
                s->labels[(size_t)r * s->n_labels + li++] = x;
            else
                s->dense[(size_t)r * s->n_dense + di++] = x;
            continue;
        }
        if (!pr__is_sparse(f))
            continue;
        pr_fside_lengths(s, (uint16_t)fi)[r] = (int32_t)n;
        int col = s->vocab_col[fi];
        if (col >= 0) {
            uint64_t *keys = b->sparse_u64 + (size_t)col * b->scap;
            uint64_t *miss = b->sparse_missing + (size_t)col * pr_bitmap_words(b->scap);
            for (uint32_t k = 0; k < n; k++) {
                uint32_t e = b->col_rows[col]++;
                keys[e] = v[k].type == PR_FVAL_MISSING ? 0 : pr__vocab_key(&v[k]);
                if (v[k].type == PR_FVAL_MISSING)
                    pr_bit_set(miss, e);
            }
        } else {
            if (pr_fside_reserve(s, (uint16_t)fi, n))
                return PR_ENOMEM;
            for (uint32_t k = 0; k < n; k++)
                s->values[fi][s->n_values[fi]++] = v[k].type == PR_FVAL_INT ? (int64_t)v[k].u : 0;
        }
        fi++;
    }
    if (b->offset) {
        b->offset[r] = line;
        b->partition[r] = 0;
        b->event_time_ms[r] = d->event_ms;
    }
    b->rows++;
    return 0;
}

/* ---------------------------------------------------------------- the run */

typedef struct pr__srun {
    const pr_feature_schema *schema;
    const pr_offline_opts *opts;
    pr_offline_result *res;
    pr_engine *eng;
    pr__sdec *dec;
    pr_block *blk;
    pr_out *out;
    pr_layout_writer *lw;
    pr_npy_writer *w_recycled;
    FILE *rejects;
    bool counting;
    const char **names; /* sparse feature names, side order */
} pr__srun;

static int pr__srun_recycled(pr__srun *run, char *errstr, size_t errstr_size)
{
    const pr_out *o = run->out;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        const pr_recycled *r = &o->recycled[i];
        int64_t row[4] = {r->col, (int64_t)(run->res->rows + r->row), r->index, (int64_t)r->number};
        int rc = pr_npy_append_rows(run->w_recycled, row, 1, errstr, errstr_size);
        if (rc)
            return rc;
    }
    return 0;
}

/* Engine, finish and write (or count) the block, then empty it. */
static int pr__srun_flush(pr__srun *run, char *errstr, size_t errstr_size)
{
    pr_block *b = run->blk;
    int rc = 0;
    if (b->rows == 0)
        return 0;
    if (run->counting) {
        rc = pr_engine_count(run->eng, b);
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "offline: counting pass: %s",
                             pr_strerror(rc));
    } else {
        if ((rc = pr_engine_process(run->eng, b, run->out, errstr, errstr_size)) ||
            (rc = pr_feature_finish(run->schema, b, run->out, errstr, errstr_size)) ||
            (rc = pr_layout_append(run->lw, run->out->side, 0, b->rows, errstr, errstr_size)))
            return rc;
        if (run->out->n_recycled) {
            if ((rc = pr__srun_recycled(run, errstr, errstr_size)))
                return rc;
            pr_engine_vocab_notices_delivered(run->eng,
                                              pr_engine_vocab_recycled_total(run->eng) + 1);
        }
        run->res->rows += b->rows;
    }
    pr_block_reset(b);
    return 0;
}

static bool pr__blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* One line: decode, then reject it or append it (flushing a full block). */
static int pr__srun_line(pr__srun *run, const char *line, size_t len, int64_t lineno, char *errstr,
                         size_t errstr_size)
{
    pr__srej rej = {0};
    int rc = pr__sdec_record(run->dec, line, len, &rej);
    if (rc < 0)
        return pr_seterr(errstr, errstr_size, rc, "offline: line %" PRId64 ": %s", lineno,
                         pr_strerror(rc));
    if (rc > 0) {
        if (!run->counting) {
            fprintf(run->rejects, "%" PRId64 "\t%s\t%s\t", lineno, rej.reason, rej.detail);
            fwrite(line, 1, len, run->rejects);
            fputc('\n', run->rejects);
            run->res->rejected++;
        }
        return 0;
    }
    uint32_t need[PR_MAX_SPARSE];
    pr__sdec_need(run->dec, run->blk, need);
    if (!pr_block_fits(run->blk, need) && (rc = pr__srun_flush(run, errstr, errstr_size)))
        return rc;
    if (!pr_block_fits(run->blk, need)) /* cannot happen: scap >= every max_len */
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "offline: line %" PRId64 " does not fit an empty block", lineno);
    if (pr__sdec_commit(run->dec, run->blk, lineno))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
    return 0;
}

static bool pr__starts_object(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    return i < n && s[i] == '{';
}

/* One pass over the input (JSON lines; "-" = stdin). */
static int pr__srun_pass(pr__srun *run, char *errstr, size_t errstr_size)
{
    const char *in = run->opts->input;
    bool std = strcmp(in, "-") == 0;
    FILE *f = std ? stdin : fopen(in, "r");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", in, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t lineno = 0;
    int rc = 0;
    bool seen_object = false;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n')
            len--;
        if (!run->counting) {
            run->res->lines++;
            run->res->bytes += (uint64_t)n;
        }
        if (pr__blank(line, len))
            continue;
        if (!seen_object && !(seen_object = pr__starts_object(line, len)))
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%" PRId64 ": not a JSON object: a declared schema reads JSON "
                           "lines (one object per line); Criteo TSV goes with the Criteo layout "
                           "(schema: { label, dense: N, sparse: M })",
                           in, lineno);
        else
            rc = pr__srun_line(run, line, len, lineno, errstr, errstr_size);
    }
    if (!rc && ferror(f))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", in, strerror(errno));
    free(line);
    if (!std)
        fclose(f);
    return rc ? rc : pr__srun_flush(run, errstr, errstr_size);
}

static bool pr__spec_two_pass(const pr_pipeline_spec *spec)
{
    if (spec->count_mode != PR_COUNT_TWO_PASS)
        return false;
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].min_count > 1)
            return true;
    return false;
}

static int pr__mkdirs(const char *dir, char *errstr, size_t errstr_size)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", dir);
    for (char *p = tmp + 1;; p++)
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(errno));
            if (!(*p = c))
                return 0;
        }
}

/* Open the outputs: the layout, rejects.tsv, recycled.npy when evicting. */
static int pr__srun_open(pr__srun *run, const pr_pipeline_spec *spec, char *errstr,
                         size_t errstr_size)
{
    const char *dir = run->opts->output_dir;
    char path[4200];
    int rc = pr__mkdirs(dir, errstr, errstr_size);
    if (rc)
        return rc;
    unsigned fl = run->opts->buffered_io ? 0 : PR_NPY_DIRECT;
    if ((rc = pr_layout_open(&run->lw, dir, run->blk->side, run->names, fl, errstr, errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/recycled.npy", dir);
    if (!pr_spec_has_eviction(spec))
        unlink(path);
    else if ((rc = pr_npy_open(&run->w_recycled, path, PR_NPY_I64, 4, errstr, errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/rejects.tsv", dir);
    if (!(run->rejects = fopen(path, "w")))
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    return 0;
}

/* Close the outputs and export the vocabularies (on success), or drop them. */
static int pr__srun_close(pr__srun *run, int rc, char *errstr, size_t errstr_size)
{
    char path[4200];
    if (!rc && run->lw)
        rc = pr_layout_close(run->lw, errstr, errstr_size);
    else
        pr_layout_abort(run->lw);
    run->lw = NULL;
    if (!rc && run->w_recycled)
        rc = pr_npy_close(run->w_recycled, errstr, errstr_size);
    else
        pr_npy_abort(run->w_recycled);
    if (run->rejects && fclose(run->rejects) && !rc)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "rejects.tsv: %s", strerror(errno));
    if (!rc) {
        snprintf(path, sizeof(path), "%s/vocab", run->opts->output_dir);
        rc = pr__mkdirs(path, errstr, errstr_size);
        if (!rc)
            rc = pr_engine_vocab_export(run->eng, path, errstr, errstr_size);
    }
    return rc;
}

static int pr__srun_setup(pr__srun *run, const pr_pipeline_spec *spec, const pr_engine_opts *eopts,
                          char *errstr, size_t errstr_size)
{
    const pr_feature_schema *schema = run->schema;
    if (!(run->eng = pr_engine_new(spec, eopts, errstr, errstr_size)))
        return PR_EINVAL;
    if (run->opts->vocab_seed) {
        int rc = pr_engine_vocab_import(run->eng, run->opts->vocab_seed, errstr, errstr_size);
        if (rc)
            return rc;
    }
    int rc = pr__sdec_new(schema, &run->dec, errstr, errstr_size);
    if (rc)
        return rc;
    uint32_t rows = run->opts->block_rows ? run->opts->block_rows : PR_OFFLINE_BLOCK_ROWS;
    run->blk = pr_feature_block_new(schema, rows, true);
    run->out = pr_feature_out_new(schema, rows, pr_engine_sparse_width(run->eng));
    run->names = calloc(schema->n_features + 1, sizeof(*run->names));
    if (!run->blk || !run->out || !run->names)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory for blocks");
    for (uint32_t i = 0, fi = 0; i < schema->n_features; i++)
        if (pr__is_sparse(&schema->features[i]))
            run->names[fi++] = schema->features[i].name;
    run->res->sparse_width = pr_engine_sparse_width(run->eng);
    return 0;
}

int pr_offline_run_schema(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                          const pr_engine_opts *eopts, const pr_offline_opts *opts,
                          pr_offline_result *res, char *errstr, size_t errstr_size)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    memset(res, 0, sizeof(*res));
    pr_pipeline_spec spec;
    int rc = pr_feature_engine_spec(schema, base, &spec, errstr, errstr_size);
    if (rc)
        return rc;
    bool two_pass = pr__spec_two_pass(&spec);
    if (two_pass && strcmp(opts->input, "-") == 0)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "offline: count_mode two_pass reads the input twice; give a file, "
                         "not stdin, for a declared schema");
    pr__srun run = {.schema = schema, .opts = opts, .res = res};
    rc = pr__srun_setup(&run, &spec, eopts, errstr, errstr_size);
    if (!rc && two_pass) {
        run.counting = true;
        rc = pr__srun_pass(&run, errstr, errstr_size);
        run.counting = false;
        if (!rc)
            rc = pr_engine_count_done(run.eng);
    }
    if (!rc)
        rc = pr__srun_open(&run, &spec, errstr, errstr_size);
    if (!rc)
        rc = pr__srun_pass(&run, errstr, errstr_size);
    if (run.eng)
        rc = pr__srun_close(&run, rc, errstr, errstr_size);
    pr_engine_free(run.eng);
    pr__sdec_free(run.dec);
    pr_block_free(run.blk);
    pr_out_free(run.out);
    free(run.names);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    return rc;
}
