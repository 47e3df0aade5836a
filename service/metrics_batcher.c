/*
 * metrics_batcher.c — the batcher's families (metric_families.h): rows out,
 * acks, late and revoked rows, what it buffers and holds in flight, batches
 * by reason, popular batches, the batch and freshness histograms, recycled-
 * index notices. Stats: pr_batcher_stats (pr_batcher.h), read once per scrape.
 */
#include "metric_families.h"

static void pr__batcher_scrape(pr__pipe *p, void *snap)
{
    pr_batcher_get_stats(p->bat, snap);
}

static const char *const pr__reason_labels[PR_BATCH__REASONS] = {
    [PR_BATCH_FULL] = "full",
    [PR_BATCH_DEADLINE] = "deadline",
    [PR_BATCH_FLUSH] = "flush",
};

static void pr__emit_batch_reasons(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr_batcher_stats *bs = c->snap;
    for (int r = 0; r < PR_BATCH__REASONS; r++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], pr__reason_labels[r]}};
        pr__metric_sample(mb, f->name, l, 2, (double)bs->batches_by_reason[r]);
    }
}

/* A pr_hist_snapshot at `off` in the batcher stats. */
static void pr__emit_hist(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr_hist_snapshot *h = (const pr_hist_snapshot *)((const char *)c->snap + f->off);
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_histogram(mb, f->name, l, 1, h);
}

#define PR__BS(field)   .off = offsetof(pr_batcher_stats, field)
#define PR__HIST(field) .emit = pr__emit_hist, .off = offsetof(pr_batcher_stats, field)

static const pr__family pr__families[] = {
    {140, "piperec_records_out_total", PR_METRIC_COUNTER, "Rows emitted in training batches.",
     PR__L_PIPE, PR__BS(rows_out)},
    {150, "piperec_batches_acked_total", PR_METRIC_COUNTER,
     "Batches acknowledged by every sink (their offsets may be committed).", PR__L_PIPE,
     PR__BS(batches_acked)},
    {160, "piperec_late_records_total", PR_METRIC_COUNTER,
     "Rows older than the event-time watermark (ordering event_time).", PR__L_PIPE,
     PR__BS(rows_late)},
    {170, "piperec_revoke_dropped_records_total", PR_METRIC_COUNTER,
     "Buffered rows dropped because their partition was revoked (the new owner re-reads them).",
     PR__L_PIPE, PR__BS(rows_dropped_revoke)},
    {180, "piperec_buffered_records", PR_METRIC_GAUGE, "Rows waiting in the batcher.", PR__L_PIPE,
     PR__BS(buffered_rows)},
    {190, "piperec_unacked_batches", PR_METRIC_GAUGE,
     "Batches emitted and not yet acknowledged by every sink.", PR__L_PIPE,
     PR__BS(unacked_batches)},
    {200, "piperec_inflight_bytes", PR_METRIC_GAUGE,
     "Bytes held for delivery: buffered rows plus unacknowledged batches.", PR__L_PIPE,
     PR__BS(inflight_bytes)},
    {210, "piperec_last_sequence", PR_METRIC_GAUGE, "Sequence number of the last emitted batch.",
     PR__L_PIPE, PR__BS(last_seq)},

    /* Batches by reason, popular batches. */
    {350, "piperec_batches_emitted_total", PR_METRIC_COUNTER,
     "Training batches emitted, by reason: full, deadline (max_delay_ms), flush.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_batch_reasons},
    {360, "piperec_popular_batches_total", PR_METRIC_COUNTER,
     "Popular batches emitted (batch.split popular; included in piperec_batches_emitted_total).",
     PR__L_PIPE, PR__BS(batches_popular)},
    {370, "piperec_popular_records_total", PR_METRIC_COUNTER,
     "Rows emitted in popular batches (included in piperec_records_out_total).", PR__L_PIPE,
     PR__BS(rows_out_popular)},
    {380, "piperec_popular_share_ratio", PR_METRIC_GAUGE,
     "Share of the rows emitted since start that went out in popular batches (batch.split "
     "popular; 0 otherwise).",
     PR__L_PIPE, PR__BS(popular_share_ppm), .div = 1e6},

    /* Histograms (le is added by the writer). */
    {390, "piperec_batch_fill_ratio", PR_METRIC_HISTOGRAM,
     "Rows per emitted batch divided by batch.size.", PR__L_PIPE, PR__HIST(fill_ratio)},
    {400, "piperec_freshness_event_to_emit_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: emit time minus the oldest event time in it (Kafka timestamp when the "
     "event has none).",
     PR__L_PIPE, PR__HIST(event_to_emit_s)},
    {410, "piperec_batch_wait_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: how long its oldest row waited in the batcher.", PR__L_PIPE, PR__HIST(wait_s)},
    {420, "piperec_freshness_emit_to_ack_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: emission to acknowledgement by every sink.", PR__L_PIPE, PR__HIST(emit_to_ack_s)},

    {450, "piperec_vocab_recycled_total", PR_METRIC_COUNTER,
     "Recycled-index notices sent in batches (bounded vocabularies with eviction): indices "
     "reused for a new value, whose embedding rows a trainer resets.",
     PR__L_PIPE, PR__BS(recycled_out)},
};

static const pr__metric_module pr__module = {.name = "batcher",
                                             .snap_size = sizeof(pr_batcher_stats),
                                             .scrape = pr__batcher_scrape,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_batcher_init(void)
{
    pr__metrics_register(&pr__module);
}
