/*
 * `piperec process --fit` (issue 20 item 2): one pass over JSON lines with the
 * streaming decoder (pr_decode_json_line), computing for every dense feature
 * with a `standardize` step the mean and population standard deviation of the
 * value as it reaches that step (the decoder runs the steps before it, and
 * hands it over as the engine gets it: float32; rejected lines skipped and
 * counted). A value still missing at the step (no `default`, no `fill`
 * before it) is skipped, not counted as 0: the decoder hands a dense value
 * over as a plain float (0 when missing), so the fitted chain ends in a fill
 * with NaN instead of the standardize step, and non-finite values (those
 * NaNs, and a log1p of a value below -1) are left out of the statistics. At
 * run time such a value stays missing through standardize and ends as 0,
 * the fitted mean.
 * A weighted list's weights.ops with a standardize step is fitted the same
 * way over every kept weight as it reaches the step (the chain cut there;
 * a weight is never missing: the default or a reject), its line keyed
 * NAME.weights.
 * Welford's method, in input order on one thread, so the result never depends
 * on --threads. Writes a YAML snippet (name -> { standardize: { mean, std } }).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_ingest.h"
#include "pr_service.h"

typedef struct pr__fit_acc {
    uint32_t feat, dense, step; /* feature index, its first dense column, standardize step */
    uint32_t cols;              /* its dense columns: a vector's elements are pooled */
    int side;                   /* weights.ops: the list's side index (its weights); else -1 */
    uint64_t n;
    double mean, m2;
} pr__fit_acc;

/* The features to fit; returns their count (0: none). */
static uint32_t pr__fit_find(const pr_feature_schema *s, pr__fit_acc *acc)
{
    uint32_t n = 0, dense = 0;
    for (uint32_t i = 0; i < s->n_features; i++) {
        const pr_feature_spec *f = &s->features[i];
        for (uint32_t k = 0; pr_feature_weighted(f) && k < f->n_weight_ops; k++)
            if (f->weight_ops[k].op == PR_FOP_STANDARDIZE) {
                acc[n++] = (pr__fit_acc){.feat = i, .step = k, .side = pr_feature_side_index(s, i)};
                break;
            }
        if (f->kind != PR_FEAT_DENSE)
            continue;
        for (uint32_t k = 0; k < f->n_ops; k++)
            if (f->ops[k].op == PR_FOP_STANDARDIZE) {
                acc[n++] = (pr__fit_acc){.feat = i,
                                         .dense = dense,
                                         .step = k,
                                         .cols = pr_feature_dense_cols(f),
                                         .side = -1};
                break;
            }
        dense += pr_feature_dense_cols(f);
    }
    return n;
}

/* One value into a's statistics (Welford); a non-finite one is left out. */
static void pr__fit_add(pr__fit_acc *a, double v)
{
    if (!isfinite(v))
        return;
    a->n++;
    double d = v - a->mean;
    a->mean += d / (double)a->n;
    a->m2 += d * (v - a->mean);
}

static void pr__fit_row(const pr_feature_schema *s, const pr_block *b, pr__fit_acc *acc,
                        uint32_t n_acc)
{
    (void)s;
    for (uint32_t j = 0; j < n_acc; j++) {
        pr__fit_acc *a = &acc[j];
        /* row 0; the decoder ran the steps before; a vector's elements (a
         * list's kept weights) in order, one mean and std for all
         * (standardize is scalar) */
        for (uint32_t c = 0; a->side < 0 && c < a->cols; c++)
            pr__fit_add(a, b->side->dense[a->dense + c]);
        for (uint32_t k = 0; a->side >= 0 && k < b->side->n_weights[a->side]; k++)
            pr__fit_add(a, b->side->weights[a->side][k]);
    }
}

/* Rejects are only counted (by the caller: no row); a record filtered or
 * sampled out is told apart, so that it does not count as rejected. */
static void pr__fit_note_drop(void *opaque, int reason, const char *detail, const char *rec,
                              size_t rec_len, int64_t recno)
{
    (void)detail, (void)rec, (void)rec_len, (void)recno;
    *(bool *)opaque = pr_decode_dropped(reason);
}

/* Read `in` line by line, one row block of one row, into the accumulators. */
static int pr__fit_pass(const pr_feature_schema *s, FILE *in, pr__fit_acc *acc, uint32_t n_acc,
                        pr_fit_result *res, char *errstr, size_t errstr_size)
{
    pr_json_decoder *dec = pr_json_decoder_new(s, errstr, errstr_size);
    if (!dec)
        return PR_EINVAL;
    pr_block *b = pr_feature_block_new(s, 1, true);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    int rc = b ? 0 : pr_seterr(errstr, errstr_size, PR_ENOMEM, "fit: out of memory");
    bool filtered = false;
    pr_decode_ctx ctx = {.json = dec, .on_reject = pr__fit_note_drop, .opaque = &filtered};
    while (!rc && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        size_t at = 0;
        while (at < (size_t)len && (line[at] == ' ' || line[at] == '\t'))
            at++;
        if (at == (size_t)len)
            continue;
        pr_block_reset(b);
        filtered = false;
        int drc = pr_decode_json_line(&ctx, b, line, (size_t)len, lineno);
        if (drc < 0 && drc != PR_EFULL) {
            rc = pr_seterr(errstr, errstr_size, drc, "fit: line %" PRId64 ": %s", lineno,
                           pr_strerror(drc));
            break;
        }
        res->lines++;
        if (filtered) {
            res->filtered++;
            continue;
        }
        if (drc == PR_EFULL || b->rows == 0) {
            res->rejected++;
            continue;
        }
        pr__fit_row(s, b, acc, n_acc);
    }
    free(line);
    pr_block_free(b);
    pr_json_decoder_free(dec);
    return rc;
}

/* The feature's whole `ops:` list (or its weights.ops) in YAML flow form
 * with its standardize step fitted, as a --set line for `piperec run` /
 * `piperec process`. */
static void pr__fit_set_line(const char *pipeline, const pr_feature_spec *f, const pr__fit_acc *a,
                             double sd, FILE *out)
{
    const pr_fop_step *steps = a->side < 0 ? f->ops : f->weight_ops;
    uint32_t n = a->side < 0 ? f->n_ops : f->n_weight_ops;
    char ops[4096];
    size_t k = 0;
    for (uint32_t i = 0; i < n && k + 2 < sizeof(ops); i++) {
        pr_fop_step st = steps[i];
        if (i == a->step) {
            st.a = a->mean;
            st.b = sd;
        }
        if (i)
            k += (size_t)snprintf(ops + k, sizeof(ops) - k, ", ");
        k += pr_fop_step_yaml(&st, ops + k, sizeof(ops) - k);
    }
    fprintf(out, "#   --set 'pipelines[%s].schema.%s[%s].%s=[%s]'\n", pipeline,
            a->side < 0 ? "dense" : "sparse", f->name, a->side < 0 ? "ops" : "weights.ops", ops);
}

/* The YAML snippet; a feature whose std is 0 (or with no value) gets a
 * comment; with `pipeline`, each fitted one a --set line too. */
static void pr__fit_write(const pr_feature_schema *s, const char *pipeline, const pr__fit_acc *acc,
                          uint32_t n_acc, FILE *out, pr_fit_result *res)
{
    fprintf(out, "# piperec process --fit: population mean and std of each value as it reaches "
                 "its standardize step (values missing there are left out; n counts the others)\n");
    for (uint32_t j = 0; j < n_acc; j++) {
        const pr__fit_acc *a = &acc[j];
        char name[PR_NAME_MAX + 8];
        snprintf(name, sizeof(name), "%s%s", s->features[a->feat].name,
                 a->side < 0 ? "" : ".weights");
        double sd = a->n ? sqrt(a->m2 / (double)a->n) : 0;
        if (a->n == 0 || !(sd > 0)) {
            fprintf(out, "# %s: %s; standardize needs std > 0\n", name,
                    a->n ? "std is 0 (every value is the same)" : "no values");
            res->degenerate++;
        }
        fprintf(out, "%s: { standardize: { mean: %.17g, std: %.17g } }  # n=%" PRIu64 "\n", name,
                a->mean, sd, a->n);
        if (pipeline && a->n && sd > 0)
            pr__fit_set_line(pipeline, &s->features[a->feat], a, sd, out);
    }
    res->features = n_acc;
}

int pr_offline_fit(const pr_feature_schema *s, const char *pipeline, const char *input, FILE *out,
                   pr_fit_result *res, char *errstr, size_t errstr_size)
{
    memset(res, 0, sizeof(*res));
    if (!s->declared)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "--fit needs a declared schema (the pipeline's `schema:` list)");
    pr__fit_acc *acc = calloc(s->n_features ? s->n_features : 1, sizeof(*acc));
    if (!acc)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "fit: out of memory");
    uint32_t n_acc = pr__fit_find(s, acc);
    int rc = 0;
    if (!n_acc)
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "--fit: no dense feature (or weights.ops) of the schema has a "
                       "`standardize` step");
    FILE *in = rc ? NULL : fopen(input, "r");
    if (!rc && !in)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "--fit: cannot open %s", input);
    /* The decoder runs a dense feature's whole chain: cut each fitted chain
     * before its standardize step so the block holds the value reaching it. */
    pr_feature_schema cut = *s;
    cut.nonfinite_ok = true; /* the NaN fill below marks a missing value */
    cut.features = rc ? NULL : malloc((size_t)s->n_features * sizeof(*cut.features));
    if (!rc && !cut.features)
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "fit: out of memory");
    if (!rc) {
        memcpy(cut.features, s->features, (size_t)s->n_features * sizeof(*cut.features));
        for (uint32_t j = 0; j < n_acc; j++) { /* standardize -> fill NaN: missing marked */
            pr_feature_spec *f = &cut.features[acc[j].feat];
            if (acc[j].side >= 0) { /* weights: never missing, cut before the step */
                f->n_weight_ops = (uint8_t)acc[j].step;
                continue;
            }
            f->ops[acc[j].step] =
                (pr_fop_step){.op = PR_FOP_FILL, .value_type = PR_FTYPE_NUM, .a = NAN};
            f->n_ops = (uint8_t)(acc[j].step + 1);
        }
        rc = pr__fit_pass(&cut, in, acc, n_acc, res, errstr, errstr_size);
    }
    free(cut.features);
    if (in)
        fclose(in);
    if (!rc)
        pr__fit_write(s, pipeline, acc, n_acc, out, res);
    free(acc);
    return rc;
}
