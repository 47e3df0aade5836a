/*
 * metrics_vocablog.c — the shared vocabulary log's families
 * (metric_families.h), only for pipelines that have one (vocab_log): lag,
 * liveness, records, proposals, waits and errors. Stats: pr_vocablog_stats
 * (pr_vocablog.h).
 */
#include "metric_families.h"

typedef struct pr__vlog_snap {
    pr_vocablog_stats vls;
    bool has_vlog;
} pr__vlog_snap;

static void pr__vlog_scrape(pr__pipe *p, void *snap)
{
    pr__vlog_snap *s = snap;
    if (p->vlog) {
        pr_vocablog_get_stats(p->vlog, &s->vls);
        s->has_vlog = true;
    }
}

enum { PR__VL_VALUE, PR__VL_LAG, PR__VL_UP, PR__VL_ERRORS, PR__VL_WAIT };

/* arg: PR__VL_VALUE the uint64_t at off in pr_vocablog_stats, or the log
 * lag, up, errors by kind, the wait histogram. */
static void pr__emit_vlog(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__vlog_snap *s = c->snap;
    if (!s->has_vlog)
        return;
    const pr_vocablog_stats *v = &s->vls;
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], NULL}};
    switch (f->arg) {
    case PR__VL_LAG: {
        int64_t lag = v->end_offset > v->applied_offset ? v->end_offset - v->applied_offset : 0;
        pr__metric_sample(mb, f->name, l, 1, (double)lag);
        break;
    }
    case PR__VL_UP:
        pr__metric_sample(mb, f->name, l, 1, v->up ? 1 : 0);
        break;
    case PR__VL_ERRORS: {
        static const char *const kinds[] = {"corrupt", "produce", "fetch"};
        const uint64_t vals[] = {v->corrupt_records, v->produce_errors, v->consume_errors};
        for (size_t k = 0; k < 3; k++) {
            l[1].value = kinds[k];
            pr__metric_sample(mb, f->name, l, 2, (double)vals[k]);
        }
        break;
    }
    case PR__VL_WAIT:
        pr__metric_histogram(mb, f->name, l, 1, &v->wait);
        break;
    default:
        pr__metric_sample(mb, f->name, l, 1, (double)*(const uint64_t *)((const char *)v + f->off));
    }
}

#define PR__VLOG(field) .emit = pr__emit_vlog, .off = offsetof(pr_vocablog_stats, field)

static const pr__family pr__families[] = {
    {460, "piperec_vocab_log_lag_records", PR_METRIC_GAUGE,
     "Records of the shared vocabulary log not applied yet (vocab_log only).", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = PR__VL_LAG},
    {470, "piperec_vocab_log_up", PR_METRIC_GAUGE,
     "1 when the vocabulary log answered in the last 5 s (vocab_log only).", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = PR__VL_UP},
    {480, "piperec_vocab_log_records_total", PR_METRIC_COUNTER,
     "Vocabulary log records applied (from every replica).", PR__L_PIPE, PR__VLOG(records_applied)},
    {490, "piperec_vocab_log_indices_assigned_total", PR_METRIC_COUNTER,
     "Indices the vocabulary log assigned (to values proposed by any replica).", PR__L_PIPE,
     PR__VLOG(indices_assigned)},
    {500, "piperec_vocab_log_proposals_total", PR_METRIC_COUNTER,
     "Values this replica proposed to the vocabulary log (rate: proposals/s).", PR__L_PIPE,
     PR__VLOG(proposals)},
    {510, "piperec_vocab_log_ahead_proposals_total", PR_METRIC_COUNTER,
     "Values proposed ahead: the next block's new values, sent while the block before it "
     "waited for the log (part of piperec_vocab_log_proposals_total; only without min_count "
     "> 1 and eviction).",
     PR__L_PIPE, PR__VLOG(ahead_values)},
    {520, "piperec_vocab_log_blocks_waited_total", PR_METRIC_COUNTER,
     "Blocks that waited for the vocabulary log to decide new values.", PR__L_PIPE,
     PR__VLOG(blocks_waited)},
    {530, "piperec_vocab_log_values_waiting", PR_METRIC_GAUGE,
     "Distinct values of the block now waiting for the vocabulary log.", PR__L_PIPE,
     PR__VLOG(values_waiting)},
    {540, "piperec_vocab_log_usage_records_total", PR_METRIC_COUNTER,
     "Usage records this replica appended (columns with eviction: the uses that keep every "
     "replica's eviction statistics alike).",
     PR__L_PIPE, PR__VLOG(usage_records)},
    {550, "piperec_vocab_log_oov_blocks_total", PR_METRIC_COUNTER,
     "Blocks (columns with eviction) whose new values were evicted again in every proposal "
     "round while they waited: those values went out as OOV in that block.",
     PR__L_PIPE, PR__VLOG(rounds_exhausted)},
    {570, "piperec_vocab_log_wait_seconds", PR_METRIC_HISTOGRAM,
     "Time from proposing a block's new values to their indices being known.", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = PR__VL_WAIT},
    {580, "piperec_vocab_log_errors_total", PR_METRIC_COUNTER,
     "Vocabulary log problems: corrupt (records or entries skipped), produce (proposals sent "
     "again), fetch (read errors, e.g. broker down).",
     PR__L_PIPE_AND("kind"), .emit = pr__emit_vlog, .arg = PR__VL_ERRORS},
};

static const pr__metric_module pr__module = {.name = "vocablog",
                                             .snap_size = sizeof(pr__vlog_snap),
                                             .scrape = pr__vlog_scrape,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_vocablog_init(void)
{
    pr__metrics_register(&pr__module);
}
