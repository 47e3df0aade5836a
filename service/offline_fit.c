/*
 * `piperec process --fit` (issue 20 item 2): one pass over the events as
 * `piperec process` reads them (JSON lines, or for source.format avro and
 * protobuf varint-delimited records through offline_delim.h's reader, the
 * decoder set up by pr_json_decoder_for_source) with the streaming decoder
 * (pr_decode_json_line), computing for every dense feature (and label)
 * with a `standardize` step the mean and population standard deviation of the
 * value as it reaches that step (the decoder runs the steps before it, and
 * hands it over as the engine gets it: float32; rejected records skipped
 * and counted, a zero-length record among them), so the same events in
 * any of those formats fit the same numbers. A value still missing at the
 * step (no `default`, no `fill` before it) is skipped, not counted as 0: the
 * decoder hands a dense value over as a plain float (0 when missing), so the fitted chain ends in a
 * fill with NaN instead of the standardize step, and non-finite values (those NaNs, and a log1p of
 * a value below -1) are left out of the statistics. At run time such a value stays missing through
 * standardize and ends as 0, the fitted mean. A weighted list's weights.ops with a standardize step
 * is fitted the same way over every kept weight as it reaches the step (the chain cut there; a
 * weight is never missing: the default or a reject), its line keyed NAME.weights. Welford's method,
 * in input order on one thread, so the result never depends on --threads. Writes a YAML snippet
 * (name -> { standardize: { mean, std } }).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "offline_delim.h"
#include "pr_ingest.h"
#include "pr_service.h"

typedef struct pr__fit_acc {
    uint32_t feat, dense, step; /* feature index, its first dense column, standardize step */
    uint32_t cols;              /* its dense columns: a vector's elements are pooled */
    int side;                   /* weights.ops: the list's side index (its weights); else -1 */
    bool label;                 /* a label's ops: `dense` is its label index */
    uint64_t n;
    double mean, m2;
} pr__fit_acc;

/* The features to fit; returns their count (0: none). */
static uint32_t pr__fit_find(const pr_feature_schema *s, pr__fit_acc *acc)
{
    uint32_t n = 0, dense = 0, labels = 0;
    for (uint32_t i = 0; i < s->n_features; i++) {
        const pr_feature_spec *f = &s->features[i];
        for (uint32_t k = 0; f->kind == PR_FEAT_LABEL && k < f->n_ops; k++)
            if (f->ops[k].op == PR_FOP_STANDARDIZE) {
                acc[n++] = (pr__fit_acc){
                    .feat = i, .dense = labels, .step = k, .cols = 1, .side = -1, .label = true};
                break;
            }
        labels += f->kind == PR_FEAT_LABEL;
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
            pr__fit_add(a, a->label ? b->side->labels[a->dense] : b->side->dense[a->dense + c]);
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

/* One pass: the decoder (set up for the source's format), a row block of
 * one row, the accumulators. */
typedef struct pr__fit_run {
    const pr_feature_schema *s;
    pr_block *b;
    pr_decode_ctx ctx;
    bool filtered; /* the last record was filtered or sampled out (pr__fit_note_drop) */
    pr__fit_acc *acc;
    uint32_t n_acc;
    pr_fit_result *res;
    uint32_t eagain_waits; /* PR_EAGAIN waits so far (a schema registry down) */
    const char *unit;      /* "line" or "record", in errors */
} pr__fit_run;

/* One record (a JSON line, or a varint-delimited record's bytes) into the
 * accumulators: counted, and fitted unless rejected or filtered. A decoder
 * answering PR_EAGAIN (a registry not reachable yet) is retried as
 * `piperec process` does (pr__offline_eagain_wait: a minute at most). */
static int pr__fit_record(pr__fit_run *r, const char *rec, size_t len, int64_t recno, char *errstr,
                          size_t errstr_size)
{
    pr_block_reset(r->b);
    r->filtered = false;
    int drc;
    do
        drc = pr_decode_json_line(&r->ctx, r->b, rec, len, recno);
    while (drc == PR_EAGAIN && pr__offline_eagain_wait(&r->eagain_waits));
    if (drc < 0 && drc != PR_EFULL)
        return pr_seterr(errstr, errstr_size, drc, "fit: %s %" PRId64 ": %s", r->unit, recno,
                         pr_strerror(drc));
    r->res->lines++;
    if (r->filtered) {
        r->res->filtered++;
        return 0;
    }
    if (drc == PR_EFULL || r->b->rows == 0) {
        r->res->rejected++;
        return 0;
    }
    pr__fit_row(r->s, r->b, r->acc, r->n_acc);
    return 0;
}

/* Read `in` line by line (JSON lines; blank lines skipped, not counted). */
static int pr__fit_lines(pr__fit_run *r, FILE *in, char *errstr, size_t errstr_size)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    int rc = 0;
    while (!rc && (len = getline(&line, &cap, in)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        size_t at = 0;
        while (at < (size_t)len && (line[at] == ' ' || line[at] == '\t'))
            at++;
        if (at == (size_t)len)
            continue;
        rc = pr__fit_record(r, line, (size_t)len, lineno, errstr, errstr_size);
    }
    free(line);
    return rc;
}

/* Read `in` as varint-delimited records (source.format avro, protobuf) with
 * the reader `piperec process` uses (offline_delim.h: the same records, the
 * same errors, an Avro container file refused); a zero-length record is
 * rejected (`empty`), as there. */
static int pr__fit_records(pr__fit_run *r, FILE *in, const char *input, bool avro, char *errstr,
                           size_t errstr_size)
{
    pr__delim d;
    size_t len;
    int rc = pr__delim_start(&d, in, input, avro, errstr, errstr_size);
    while (!rc && (rc = pr__delim_next(&d, &len, errstr, errstr_size)) == 1) {
        rc = 0;
        if (len == 0) {
            r->res->lines++;
            r->res->rejected++;
            continue;
        }
        rc = pr__fit_record(r, d.rec, len, d.recno, errstr, errstr_size);
    }
    pr__delim_free(&d);
    if (!rc && ferror(in))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", input, strerror(errno));
    return rc;
}

/* One pass over `input` (open as `in`) into the accumulators: JSON lines,
 * or with source.format avro / protobuf varint-delimited records. */
static int pr__fit_pass(const pr_feature_schema *s, const pr_source_cfg *source, FILE *in,
                        const char *input, pr__fit_acc *acc, uint32_t n_acc, pr_fit_result *res,
                        char *errstr, size_t errstr_size)
{
    pr_json_decoder *dec = pr_json_decoder_new(s, errstr, errstr_size);
    if (!dec)
        return PR_EINVAL;
    bool delimited = source && (source->format == PR_MSG_AVRO || source->format == PR_MSG_PROTOBUF);
    pr__fit_run r = {.s = s,
                     .b = pr_feature_block_new(s, 1, true),
                     .acc = acc,
                     .n_acc = n_acc,
                     .res = res,
                     .unit = delimited ? "record" : "line"};
    r.ctx = (pr_decode_ctx){.json = dec, .on_reject = pr__fit_note_drop, .opaque = &r.filtered};
    int rc = r.b ? 0 : pr_seterr(errstr, errstr_size, PR_ENOMEM, "fit: out of memory");
    if (!rc && source)
        rc = pr_json_decoder_for_source(dec, source, errstr, errstr_size);
    if (!rc)
        rc = delimited ? pr__fit_records(&r, in, input, source->format == PR_MSG_AVRO, errstr,
                                         errstr_size)
                       : pr__fit_lines(&r, in, errstr, errstr_size);
    pr_block_free(r.b);
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
            a->label      ? "labels"
            : a->side < 0 ? "dense"
                          : "sparse",
            f->name, a->side < 0 ? "ops" : "weights.ops", ops);
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

int pr_offline_fit(const pr_feature_schema *s, const pr_source_cfg *source, const char *pipeline,
                   const char *input, FILE *out, pr_fit_result *res, char *errstr,
                   size_t errstr_size)
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
                       "--fit: no dense feature or label (or weights.ops) of the schema "
                       "has a `standardize` step");
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
        rc = pr__fit_pass(&cut, source, in, input, acc, n_acc, res, errstr, errstr_size);
    }
    free(cut.features);
    if (in)
        fclose(in);
    if (!rc)
        pr__fit_write(s, pipeline, acc, n_acc, out, res);
    free(acc);
    return rc;
}
