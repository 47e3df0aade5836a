/*
 * metrics_consumer.c — the Kafka consumer's families (metric_families.h):
 * messages and bytes in, errors, rebalances, commits, stale group members,
 * assignment, per-partition lag and offsets, dead letters, offset resets.
 * Stats: pr_consumer_stats, pr_consumer_lag, pr_dlq_stats (pr_ingest.h).
 */
#include <stdio.h>
#include <stdlib.h>

#include "metric_families.h"

typedef struct pr__consumer_snap {
    pr_consumer_stats cs;
    pr_partition_lag *lags; /* NULL when it cannot be allocated: no lag samples */
    size_t n_lags;
    pr_dlq_stats dq;
    bool has_dlq;
} pr__consumer_snap;

static void pr__consumer_scrape(pr__pipe *p, void *snap)
{
    pr__consumer_snap *s = snap;
    pr_consumer_get_stats(p->cons, &s->cs);
    s->lags = calloc(PR__MAX_PARTS, sizeof(pr_partition_lag));
    if (s->lags)
        s->n_lags = pr_consumer_lag(p->cons, s->lags, PR__MAX_PARTS);
    if (s->n_lags > PR__MAX_PARTS)
        s->n_lags = PR__MAX_PARTS;
    pr_dlq *d = pr_consumer_dlq(p->cons);
    if (d) {
        pr_dlq_get_stats(d, &s->dq);
        s->has_dlq = true;
    }
}

static void pr__consumer_release(void *snap)
{
    free(((pr__consumer_snap *)snap)->lags);
}

/* A killed predecessor's group member, by what became of it. */
static void pr__emit_stale_members(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    static const char *const names[PR_STALE__COUNT] = {
        [PR_STALE_DROPPED] = "dropped", [PR_STALE_GONE] = "gone", [PR_STALE_FAILED] = "failed"};
    const pr__consumer_snap *s = c->snap;
    for (int r = 0; r < PR_STALE__COUNT; r++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], names[r]}};
        pr__metric_sample(mb, f->name, l, 2, (double)s->cs.stale_members[r]);
    }
}

enum { PR__LAG_COMMITTED, PR__LAG_POSITION, PR__LAG_HIGH_WATERMARK, PR__LAG_COMMITTED_OFFSET };

/* One sample per partition; a value not known yet (-1) has no sample rather
 * than a fake number. */
static void pr__emit_lag(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__consumer_snap *s = c->snap;
    for (size_t k = 0; k < s->n_lags; k++) {
        const pr_partition_lag *L = &s->lags[k];
        int64_t v;
        switch (f->arg) {
        case PR__LAG_COMMITTED:
            v = (L->high_watermark >= 0 && L->committed >= 0) ? L->high_watermark - L->committed
                                                              : -1;
            break;
        case PR__LAG_POSITION:
            v = (L->high_watermark >= 0 && L->position >= 0) ? L->high_watermark - L->position : -1;
            break;
        case PR__LAG_HIGH_WATERMARK:
            v = L->high_watermark;
            break;
        default:
            v = L->committed;
            break;
        }
        if (v < 0)
            continue;
        char part[16];
        snprintf(part, sizeof(part), "%d", L->tp.partition);
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], L->tp.topic},
                        {f->labels[2], part}};
        pr__metric_sample(mb, f->name, l, 3, (double)v);
    }
}

static void pr__emit_dead_letters(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__consumer_snap *s = c->snap;
    if (!s->has_dlq)
        return;
    pr_label l1[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], "sent"}};
    pr__metric_sample(mb, f->name, l1, 2, (double)s->dq.sent);
    pr_label l2[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], "failed"}};
    pr__metric_sample(mb, f->name, l2, 2, (double)s->dq.failed);
    pr_label l3[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], "file"}};
    pr__metric_sample(mb, f->name, l3, 2, (double)s->dq.to_file);
    pr_label l4[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], "file_dropped"}};
    pr__metric_sample(mb, f->name, l4, 2, (double)s->dq.file_dropped);
}

static void pr__emit_dead_letters_pending(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__consumer_snap *s = c->snap;
    if (!s->has_dlq)
        return;
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_sample(mb, f->name, l, 1, (double)s->dq.pending);
}

/* One sample per partition that was ever reset (a counter that never moved
 * has no sample: the family stays small). */
static void pr__emit_offset_resets(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    /* Every partition that was (a recreated topic resets them all; a fixed
     * array of 64 left the rest out). */
    size_t cap = pr_consumer_offset_resets(c->p->cons, NULL, NULL, 0);
    if (!cap)
        return;
    pr_tp *tps = malloc(cap * sizeof(*tps));
    uint64_t *counts = malloc(cap * sizeof(*counts));
    size_t n = tps && counts ? pr_consumer_offset_resets(c->p->cons, tps, counts, cap) : 0;
    for (size_t k = 0; k < n && k < cap; k++) {
        char part[16];
        snprintf(part, sizeof(part), "%d", tps[k].partition);
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], tps[k].topic},
                        {f->labels[2], part}};
        pr__metric_sample(mb, f->name, l, 3, (double)counts[k]);
    }
    free(tps);
    free(counts);
}

#define PR__CS(field)   .off = offsetof(pr__consumer_snap, cs.field)
#define PR__CS32(field) .off = offsetof(pr__consumer_snap, cs.field), .kind = PR__V_U32
#define PR__LAG(kind)   .emit = pr__emit_lag, .arg = (kind)

static const pr__family pr__families[] = {
    {70, "piperec_messages_in_total", PR_METRIC_COUNTER, "Kafka messages consumed.", PR__L_PIPE,
     PR__CS(messages)},
    {80, "piperec_bytes_in_total", PR_METRIC_COUNTER, "Kafka message payload bytes consumed.",
     PR__L_PIPE, PR__CS(bytes)},
    {90, "piperec_records_in_total", PR_METRIC_COUNTER,
     "Records decoded from messages into row blocks.", PR__L_PIPE, PR__CS(records)},
    {100, "piperec_consumer_errors_total", PR_METRIC_COUNTER,
     "Non-fatal Kafka consumer errors seen by poll.", PR__L_PIPE, PR__CS(kafka_errors)},
    {110, "piperec_rebalances_total", PR_METRIC_COUNTER, "Partition assign and revoke events.",
     PR__L_PIPE, PR__CS(rebalances)},
    {120, "piperec_commit_failures_total", PR_METRIC_COUNTER,
     "Offset commits the broker refused (e.g. during a rebalance); rows after the last "
     "successful commit may be delivered again.",
     PR__L_PIPE, PR__CS(commit_failures)},
    {130, "piperec_stale_members_total", PR_METRIC_COUNTER,
     "Group members of a killed predecessor found at startup (state dir), by result: dropped "
     "(LeaveGroup sent on its behalf), gone (its session had expired), failed (the restart "
     "waits out its session).",
     PR__L_PIPE_AND("result"), .emit = pr__emit_stale_members},
    {135, "piperec_decode_waits_total", PR_METRIC_COUNTER,
     "Decoding retries of a message that could not be decoded yet (a schema registry down or "
     "slow): its partitions are paused meanwhile, nothing is dropped or rejected for it.",
     PR__L_PIPE, PR__CS(decode_waits)},
    {240, "piperec_assigned_partitions", PR_METRIC_GAUGE,
     "Partitions currently assigned to this process.", PR__L_PIPE, PR__CS32(assigned_partitions)},
    {250, "piperec_paused_partitions", PR_METRIC_GAUGE,
     "Assigned partitions paused by backpressure.", PR__L_PIPE, PR__CS32(paused_partitions)},
    {255, "piperec_decode_waiting", PR_METRIC_GAUGE,
     "1 while a message waits to be decoded (schema registry unreachable; /readyz says why).",
     PR__L_PIPE, PR__CS32(decode_waiting)},

    /* Lag, per partition. */
    {270, "piperec_consumer_lag_records", PR_METRIC_GAUGE,
     "High watermark minus committed offset, per partition.", PR__L_PARTITION,
     PR__LAG(PR__LAG_COMMITTED)},
    {280, "piperec_consumer_position_lag_records", PR_METRIC_GAUGE,
     "High watermark minus the consumer's fetch position, per partition.", PR__L_PARTITION,
     PR__LAG(PR__LAG_POSITION)},
    {290, "piperec_consumer_high_watermark_offset", PR_METRIC_GAUGE,
     "Partition high watermark (next offset to be written).", PR__L_PARTITION,
     PR__LAG(PR__LAG_HIGH_WATERMARK)},
    {300, "piperec_consumer_committed_offset", PR_METRIC_GAUGE,
     "Last committed offset (next offset to read after a restart).", PR__L_PARTITION,
     PR__LAG(PR__LAG_COMMITTED_OFFSET)},

    /* Dead letters, offset resets. */
    {320, "piperec_dead_letters_total", PR_METRIC_COUNTER,
     "Dead letters by result: sent (delivery confirmed), failed (attempts refused or failed; "
     "retried), file (written to the dead-letter file: no dead_letter_topic, or too large for "
     "it), file_dropped (deleted with <file>.1 when the dead-letter file rotated).",
     PR__L_PIPE_AND("result"), .emit = pr__emit_dead_letters},
    {330, "piperec_dead_letters_pending", PR_METRIC_GAUGE,
     "Dead letters not yet confirmed by the topic nor written to the dead-letter file; each "
     "holds its source offset uncommitted.",
     PR__L_PIPE, .emit = pr__emit_dead_letters_pending},
    {340, "piperec_offset_resets_total", PR_METRIC_COUNTER,
     "Positions found out of range (retention, recreated topic) and reset per "
     "source.kafka.on_offset_reset, per partition.",
     PR__L_PARTITION, .emit = pr__emit_offset_resets},
};

static const pr__metric_module pr__module = {.name = "consumer",
                                             .snap_size = sizeof(pr__consumer_snap),
                                             .scrape = pr__consumer_scrape,
                                             .release = pr__consumer_release,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_consumer_init(void)
{
    pr__metrics_register(&pr__module);
}
