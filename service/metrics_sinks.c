/*
 * metrics_sinks.c — the sinks' families (metric_families.h): per sink
 * batches, bytes, refusals, redeliveries, errors, queue and clients; and
 * for sinks that serve readers on a port (PR_SINK_CAP_LISTENER: the trainer
 * port) the network surface: connections, refusals, drops, auth failures,
 * receive buffers, I/O loop turns. Stats: pr_sink_stats (pr_sink.h), from the
 * cache the pipeline thread refreshes.
 */
#include <string.h>

#include "metric_families.h"

typedef struct pr__sinks_snap {
    size_t n;
    const char *names[4];
    unsigned caps[4];
    pr_sink_stats ss[4];
} pr__sinks_snap;

static void pr__sinks_scrape(pr__pipe *p, void *snap)
{
    pr__sinks_snap *s = snap;
    pthread_mutex_lock(&p->lock);
    s->n = p->n_sink_stats;
    memcpy(s->names, p->sink_names, sizeof(s->names));
    memcpy(s->caps, p->sink_caps, sizeof(s->caps));
    memcpy(s->ss, p->sink_stats, sizeof(s->ss));
    pthread_mutex_unlock(&p->lock);
}

/* One sample per sink, from the uint64_t at `off` in pr_sink_stats. */
static void pr__emit_per_sink(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__sinks_snap *s = c->snap;
    for (size_t k = 0; k < s->n; k++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}, {f->labels[1], s->names[k]}};
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        pr__metric_sample(mb, f->name, l, 2, (double)*v);
    }
}

/* A listener's per-reason counters: one sample per reason, from the
 * uint64_t array at `off` in pr_sink_stats; `arg` picks the reason names
 * (0 refused, 1 dropped, 2 auth). Only pipelines with a listening sink. */
static void pr__emit_listener_reasons(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    static const int counts[] = {PR_TRAINER_REFUSE__COUNT, PR_TRAINER_DROP__COUNT,
                                 PR_TRAINER_AUTH__COUNT};
    const char *(*const names[])(int) = {pr_trainer_refuse_reason_name, pr_trainer_drop_reason_name,
                                         pr_trainer_auth_reason_name};
    const pr__sinks_snap *s = c->snap;
    for (size_t k = 0; k < s->n; k++) {
        if (!(s->caps[k] & PR_SINK_CAP_LISTENER))
            continue;
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        for (int r = 0; r < counts[f->arg]; r++) {
            pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                            {f->labels[1], names[f->arg](r)}};
            pr__metric_sample(mb, f->name, l, 2, (double)v[r]);
        }
    }
}

/* A listener's value (uint64_t at `off` in pr_sink_stats), labelled by pipeline. */
static void pr__emit_listener_value(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__sinks_snap *s = c->snap;
    for (size_t k = 0; k < s->n; k++) {
        if (!(s->caps[k] & PR_SINK_CAP_LISTENER))
            continue;
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        pr__metric_sample(mb, f->name, l, 1, (double)*v);
    }
}

#define PR__SINK(field) .emit = pr__emit_per_sink, .off = offsetof(pr_sink_stats, field)
#define PR__LVAL(field) .emit = pr__emit_listener_value, .off = offsetof(pr_sink_stats, field)
#define PR__LREASONS(field, which)                                                                 \
    .emit = pr__emit_listener_reasons, .off = offsetof(pr_sink_stats, field), .arg = (which)

static const pr__family pr__families[] = {
    /* Sinks, one sample per sink. */
    {650, "piperec_sink_batches_sent_total", PR_METRIC_COUNTER, "Batches accepted by the sink.",
     PR__L_PIPE_AND("sink"), PR__SINK(batches_sent)},
    {660, "piperec_sink_batches_acked_total", PR_METRIC_COUNTER, "Batches the sink acknowledged.",
     PR__L_PIPE_AND("sink"), PR__SINK(batches_acked)},
    {670, "piperec_sink_bytes_sent_total", PR_METRIC_COUNTER, "Bytes the sink wrote out.",
     PR__L_PIPE_AND("sink"), PR__SINK(bytes_sent)},
    {680, "piperec_sink_refused_total", PR_METRIC_COUNTER,
     "Times the sink was full and a batch had to wait.", PR__L_PIPE_AND("sink"),
     PR__SINK(batches_refused)},
    {690, "piperec_sink_redeliveries_total", PR_METRIC_COUNTER,
     "Batches sent again after a trainer went away unacknowledged.", PR__L_PIPE_AND("sink"),
     PR__SINK(redeliveries)},
    {700, "piperec_sink_errors_total", PR_METRIC_COUNTER, "Sink errors.", PR__L_PIPE_AND("sink"),
     PR__SINK(errors)},
    {710, "piperec_sink_queued_batches", PR_METRIC_GAUGE,
     "Batches accepted by the sink and not yet acknowledged.", PR__L_PIPE_AND("sink"),
     PR__SINK(queued_batches)},
    {720, "piperec_sink_clients", PR_METRIC_GAUGE, "Connected trainers (trainer sink).",
     PR__L_PIPE_AND("sink"), PR__SINK(clients)},

    /* Trainer port: the network surface (docs/operations.md, Security). */
    {730, "piperec_trainer_connections", PR_METRIC_GAUGE,
     "Open trainer connections, subscribed or not.", PR__L_PIPE, PR__LVAL(connections)},
    {740, "piperec_trainer_connections_refused_total", PR_METRIC_COUNTER,
     "Trainer connections closed before the protocol started, by reason.", PR__L_PIPE_AND("reason"),
     PR__LREASONS(refused, 0)},
    {750, "piperec_trainer_connections_dropped_total", PR_METRIC_COUNTER,
     "Trainer connections closed by the server (timeouts, limits, protocol errors), by reason.",
     PR__L_PIPE_AND("reason"), PR__LREASONS(dropped, 1)},
    {760, "piperec_trainer_auth_failures_total", PR_METRIC_COUNTER,
     "Trainer connections refused by authentication (token, client certificate), by reason.",
     PR__L_PIPE_AND("reason"), PR__LREASONS(auth_failures, 2)},
    {770, "piperec_trainer_receive_buffer_bytes", PR_METRIC_GAUGE,
     "Bytes held by trainer connections' receive buffers (counted in the in-flight bytes).",
     PR__L_PIPE, PR__LVAL(receive_buffer_bytes)},
    {780, "piperec_trainer_io_wakeups_total", PR_METRIC_COUNTER,
     "Turns of the trainer sink's I/O loop (about 10/s when idle; a busy loop shows here).",
     PR__L_PIPE, PR__LVAL(io_wakeups)},
};

static const pr__metric_module pr__module = {.name = "sinks",
                                             .snap_size = sizeof(pr__sinks_snap),
                                             .scrape = pr__sinks_scrape,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_sinks_init(void)
{
    pr__metrics_register(&pr__module);
}
