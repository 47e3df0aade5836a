/*
 * metrics_engine.c — the engine's families (metric_families.h): backend,
 * vocabulary size and capacity per column, feature health (lookups and OOV
 * answers per column, missing values per feature), values that went out as
 * OOV while waiting for the vocab log, and time and values per operator.
 * Stats: pr_engine_stats and vocabulary sizes, from the cache the pipeline
 * thread refreshes (the engine may not be called from other threads).
 */
#include <string.h>

#include "metric_families.h"

typedef struct pr__engine_snap {
    pr_engine_stats est;
    uint64_t vocab[PR_MAX_SPARSE];
} pr__engine_snap;

static void pr__engine_scrape(pr__pipe *p, void *snap)
{
    pr__engine_snap *s = snap;
    pthread_mutex_lock(&p->lock);
    s->est = p->est;
    memcpy(s->vocab, p->vocab, sizeof(s->vocab));
    pthread_mutex_unlock(&p->lock);
}

static void pr__emit_backend(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                    {f->labels[1], pr_engine_backend_name(c->p->eng)}};
    pr__metric_sample(mb, f->name, l, 2, 1);
}

/* A column's vocabulary capacity by the rule pr_engine.h documents for
 * pr_sparse_col_spec.capacity: the configured one, else modulus (+2 reserved
 * indices under the default profile) when the column is bounded, else
 * INT32_MAX. */
static uint64_t pr__vocab_capacity(const pr_pipeline_spec *spec, uint32_t c)
{
    const pr_sparse_col_spec *col = &spec->sparse[c];
    if (col->capacity)
        return col->capacity;
    if (pr_spec_has_op(spec, PR_OP_MODULUS) && col->modulus) {
        uint64_t extra = spec->profile == PR_VOCAB_DEFAULT ? 2 : 0;
        return col->modulus > UINT64_MAX - extra ? UINT64_MAX : col->modulus + extra;
    }
    return INT32_MAX;
}

/* One sample per sparse column, when the pipeline has a vocab operator. */
static void pr__emit_vocab(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__engine_snap *s = c->snap;
    const pr_pipeline_spec *spec = c->p->spec;
    if (!pr_spec_has_op(spec, PR_OP_VOCAB))
        return;
    for (uint32_t col = 0; col < spec->n_sparse; col++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], spec->sparse[col].name}};
        /* arg 1: the column's capacity instead of its size (alerts use the ratio). */
        double v = f->arg ? (double)pr__vocab_capacity(spec, col) : (double)s->vocab[col];
        pr__metric_sample(mb, f->name, l, 2, v);
    }
}

/* One sample per operator the pipeline uses, from the uint64_t[PR_OP__COUNT]
 * array at `off` in the snapshot. */
static void pr__emit_per_operator(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const uint64_t *v = (const uint64_t *)((const char *)c->snap + f->off);
    for (int op = 0; op < PR_OP__COUNT; op++) {
        if (!pr_spec_has_op(c->p->spec, (pr_op)op))
            continue;
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], pr_op_name((pr_op)op)}};
        pr__metric_sample(mb, f->name, l, 2, pr__metric_scaled(f, (double)v[op]));
    }
}

/* Feature health (pr_fhealth.h): family f->arg's samples, from the cache
 * the pipeline thread refreshes. */
static void pr__emit_health(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    pthread_mutex_lock(&c->p->lock);
    pr_fhealth_samples(mb, f->arg, pr__metric_pipe_name(c), &c->p->health);
    pthread_mutex_unlock(&c->p->lock);
}

#define PR__ES(field) .off = offsetof(pr__engine_snap, est.field)

static const pr__family pr__families[] = {
    {40, "piperec_engine_backend_info", PR_METRIC_GAUGE,
     "Engine backend in use per pipeline; the value is always 1.", PR__L_PIPE_AND("backend"),
     .emit = pr__emit_backend},
    {430, "piperec_vocab_size", PR_METRIC_GAUGE,
     "Indices handed out per sparse column, reserved ones included (embedding "
     "rows a trainer needs).",
     PR__L_PIPE_AND("column"), .emit = pr__emit_vocab},
    {440, "piperec_vocab_capacity", PR_METRIC_GAUGE,
     "Most indices a sparse column can hand out, reserved ones included (vocab capacity, or "
     "the automatic one from modulus).",
     PR__L_PIPE_AND("column"), .emit = pr__emit_vocab, .arg = 1},
    {442, "piperec_vocab_lookups_total", PR_METRIC_COUNTER, PR_FHEALTH_HELP_LOOKUPS,
     PR__L_PIPE_AND("column"), .emit = pr__emit_health, .arg = PR_FHEALTH_LOOKUPS},
    {444, "piperec_vocab_oov_total", PR_METRIC_COUNTER, PR_FHEALTH_HELP_OOV,
     PR__L_PIPE_AND("column"), .emit = pr__emit_health, .arg = PR_FHEALTH_OOV},
    {446, "piperec_feature_missing_total", PR_METRIC_COUNTER, PR_FHEALTH_HELP_MISSING,
     PR__L_PIPE_AND("feature"), .emit = pr__emit_health, .arg = PR_FHEALTH_MISSING},
    {560, "piperec_vocab_log_oov_values_total", PR_METRIC_COUNTER,
     "Values of such blocks that went out as OOV (columns with eviction and vocab_log).",
     PR__L_PIPE, PR__ES(undecided_oov)},
    {610, "piperec_engine_operator_seconds_total", PR_METRIC_COUNTER,
     "Engine time per operator (summed over worker threads).", PR__L_PIPE_AND("operator"),
     .emit = pr__emit_per_operator, PR__ES(op_ns), .div = 1e9},
    {620, "piperec_engine_operator_values_total", PR_METRIC_COUNTER,
     "Values processed per operator.", PR__L_PIPE_AND("operator"), .emit = pr__emit_per_operator,
     PR__ES(op_values)},
    {630, "piperec_engine_rows_total", PR_METRIC_COUNTER, "Rows that went through the engine.",
     PR__L_PIPE, PR__ES(rows_in)},
    {640, "piperec_engine_blocks_total", PR_METRIC_COUNTER, "Row blocks processed by the engine.",
     PR__L_PIPE, PR__ES(blocks)},
};

static const pr__metric_module pr__module = {.name = "engine",
                                             .snap_size = sizeof(pr__engine_snap),
                                             .scrape = pr__engine_scrape,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_engine_init(void)
{
    pr__metrics_register(&pr__module);
}
