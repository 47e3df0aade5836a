/*
 * metrics_pipeline.c — the families of the pipeline loop itself
 * (metric_families.h): whether it runs and turns, its restart epoch,
 * backpressure, the rejects of every stage under one `reason` label (the
 * loop counts the engine's and merges them with the decoder's and the
 * batcher's), the records the schema's filter and downsampling dropped, vocabulary checkpoints and
 * the hot-set sketches.
 */
#include <stdio.h>
#include <string.h>

#include "metric_families.h"

/* One read of the loop's counters (atomics in pr__pipe) and of the reject
 * counts it merges. */
typedef struct pr__pipe_snap {
    uint64_t epoch, inflight_peak, pauses, checkpoints;
    uint64_t dec_rejects[PR_DEC__COUNT];
    uint64_t engine_rejects[PR_REJECT__ENGINE_COUNT];
    uint64_t late_dropped;
    uint64_t filtered, sampled_out;
} pr__pipe_snap;

static void pr__pipe_scrape(pr__pipe *p, void *snap)
{
    pr__pipe_snap *s = snap;
    s->epoch = atomic_load(&p->epoch);
    s->inflight_peak = atomic_load(&p->inflight_peak);
    s->pauses = atomic_load(&p->pauses);
    s->checkpoints = atomic_load(&p->checkpoints);
    pr_consumer_stats cs;
    pr_consumer_get_stats(p->cons, &cs);
    memcpy(s->dec_rejects, cs.rejects, sizeof(s->dec_rejects));
    s->filtered = cs.filtered;
    s->sampled_out = cs.sampled_out;
    for (int r = 0; r < PR_REJECT__ENGINE_COUNT; r++)
        s->engine_rejects[r] = atomic_load(&p->engine_rejects[r]);
    pr_batcher_stats bs;
    pr_batcher_get_stats(p->bat, &bs);
    s->late_dropped = bs.rows_late_dropped;
}

static void pr__emit_up(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    bool up = !atomic_load(&c->p->fatal) && !atomic_load(&c->p->done);
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_sample(mb, f->name, l, 1, up ? 1 : 0);
}

static void pr__emit_loop_age(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_sample(mb, f->name, l, 1,
                      (double)(c->now_ns - atomic_load(&c->p->last_turn_ns)) / 1e9);
}

/* Engine reject reasons map onto the decoder's reason names, so one
 * `reason` label covers both stages. */
static const char *pr__engine_reject_name(int r)
{
    switch (r) {
    case PR_REJECT_BAD_HEX:
        return pr_decode_reason_name(PR_DEC_BAD_HEX);
    default:
        return "engine";
    }
}

/* Decoder reasons and engine reasons under one `reason` label (merged by
 * name), then the batcher's late drops. */
static void pr__emit_rejects(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__pipe_snap *s = c->snap;
    uint64_t eng[PR_DEC__COUNT] = {0};
    uint64_t eng_other = 0;
    for (int r = 1; r < PR_REJECT__ENGINE_COUNT; r++) {
        if (r == PR_REJECT_BAD_HEX)
            eng[PR_DEC_BAD_HEX] += s->engine_rejects[r];
        else
            eng_other += s->engine_rejects[r];
    }
    for (int r = 1; r < PR_DEC__COUNT; r++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], pr_decode_reason_name(r)}};
        pr__metric_sample(mb, f->name, l, 2, (double)(s->dec_rejects[r] + eng[r]));
    }
    if (eng_other) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], pr__engine_reject_name(-1)}};
        pr__metric_sample(mb, f->name, l, 2, (double)eng_other);
    }
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], "late_dropped"}};
    pr__metric_sample(mb, f->name, l, 2, (double)s->late_dropped);
}

/* Hot-set coverage for a fixed few k (those <= hot.top_k), per sparse column:
 * low cardinality whatever top_k is. */
static void pr__emit_hot_coverage(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    static const size_t ks[] = {100, 1000};
    static const char *const kn[] = {"100", "1000"};
    pr__pipe *p = c->p;
    if (!p->hot)
        return;
    const pr_pipeline_spec *spec = p->spec;
    uint32_t top_k = p->svc->cfg->hot.top_k;
    for (uint32_t col = 0; col < spec->n_sparse; col++) {
        double cov[2];
        pthread_mutex_lock(&p->hot_lock);
        pr_hot_coverage(p->hot[col], ks, 2, cov);
        pthread_mutex_unlock(&p->hot_lock);
        for (size_t j = 0; j < 2; j++) {
            if (ks[j] > top_k)
                continue;
            pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                            {f->labels[1], spec->sparse[col].name},
                            {f->labels[2], kn[j]}};
            pr__metric_sample(mb, f->name, l, 3, cov[j]);
        }
    }
}

#define PR__PS(field) .off = offsetof(pr__pipe_snap, field)

static const pr__family pr__families[] = {
    {50, "piperec_pipeline_up", PR_METRIC_GAUGE,
     "1 while the pipeline loop runs, 0 after a fatal error or stop.", PR__L_PIPE,
     .emit = pr__emit_up},
    {60, "piperec_loop_age_seconds", PR_METRIC_GAUGE,
     "Seconds since the pipeline loop last turned (/healthz uses it).", PR__L_PIPE,
     .emit = pr__emit_loop_age},
    {220, "piperec_epoch", PR_METRIC_GAUGE,
     "Restart epoch stamped on batches (bumped at every start; 0 without state.dir).", PR__L_PIPE,
     PR__PS(epoch)},
    {230, "piperec_inflight_peak_bytes", PR_METRIC_GAUGE,
     "Highest in-flight bytes seen since start.", PR__L_PIPE, PR__PS(inflight_peak)},
    {260, "piperec_backpressure_pauses_total", PR_METRIC_COUNTER,
     "Times in-flight bytes went over the limit and fetching was paused.", PR__L_PIPE,
     PR__PS(pauses)},
    {310, "piperec_rejected_records_total", PR_METRIC_COUNTER,
     "Records rejected (malformed), by reason; each also goes to the dead-letter "
     "topic when one is configured.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_rejects},
    {315, "piperec_filtered_records_total", PR_METRIC_COUNTER,
     "Records the declared schema's filter (schema.filter) dropped: read, offsets committed, "
     "no row; not rejects (no dead letter).",
     PR__L_PIPE, PR__PS(filtered)},
    {316, "piperec_sampled_out_records_total", PR_METRIC_COUNTER,
     "Records schema.downsample did not keep: read, offsets committed, no row; not rejects.",
     PR__L_PIPE, PR__PS(sampled_out)},
    {590, "piperec_vocab_checkpoints_total", PR_METRIC_COUNTER,
     "Vocabulary snapshots written to state.dir.", PR__L_PIPE, PR__PS(checkpoints)},
    {600,
     "piperec_hot_coverage_ratio",
     PR_METRIC_GAUGE,
     "Estimated share of a sparse column's lookups covered by its k hottest indices (decayed "
     "hot-set sketch; k 100 and 1000, those <= hot.top_k).",
     {"pipeline", "column", "k"},
     .emit = pr__emit_hot_coverage},
};

static const pr__metric_module pr__module = {.name = "pipeline",
                                             .snap_size = sizeof(pr__pipe_snap),
                                             .scrape = pr__pipe_scrape,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_pipeline_init(void)
{
    pr__metrics_register(&pr__module);
}
