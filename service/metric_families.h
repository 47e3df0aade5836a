/*
 * metric_families.h — how a component's statistics reach /metrics.
 *
 * Each owner of statistics registers a metric module (HAProxy's stats
 * modules are the model): the families it exports, and how to take one
 * consistent read of its stats per pipeline per scrape. The registry
 * (metrics_registry.c) knows no component's stats struct; it takes each
 * module's snapshot of each pipeline, then renders the families in page
 * order. The components below the service cannot see the metrics writer
 * (pr_metrics.h is the service's; tests/layout/test_layers.py), so their
 * modules live here, one file per owner:
 *
 *   metrics_process.c   process-wide: build, start time, in-flight limit
 *   metrics_pipeline.c  the pipeline loop: up, loop age, epoch, backpressure,
 *                       rejects across stages, checkpoints, hot sets
 *   metrics_consumer.c  the Kafka consumer (pr_consumer_stats, lags, dead letters)
 *   metrics_batcher.c   the batcher (pr_batcher_stats)
 *   metrics_engine.c    the engine (pr_engine_stats, vocabulary sizes)
 *   metrics_vocablog.c  the shared vocabulary log (pr_vocablog_stats)
 *   metrics_sinks.c     every sink (pr_sink_stats), the trainer port
 *   metrics_schemareg.c the schema registry client (pr_registry_totals)
 *
 * Page order: the page is one list ordered as docs/operations.md documents
 * it, and families of different owners interleave there. Each family carries
 * its `rank` (its place on the page); the registry renders by rank, so a new
 * family picks a free rank between its neighbours. Ranks are unique.
 *
 * Threads: render runs on HTTP threads; scrape functions read through the
 * components' thread-safe getters or the pipeline's cache under p->lock.
 */
#ifndef PR__METRIC_FAMILIES_H
#define PR__METRIC_FAMILIES_H

#include <stddef.h>
#include <stdint.h>

#include "pipe.h"
#include "pr_metrics.h"

typedef struct pr__family pr__family;

/* One pipeline's view during a scrape: the pipeline and the snapshot its
 * module took (NULL for modules without one). */
typedef struct pr__metric_ctx {
    pr__pipe *p;
    int64_t now_ns; /* scrape time, the same for every pipeline */
    const void *snap;
} pr__metric_ctx;

/* Value kinds for the default emitter (no emit, no proc). */
enum { PR__V_U64 = 0, PR__V_U32 };

/*
 * A family. Rendered once (HELP, TYPE), then:
 *   - `proc` set: one process-wide sample set;
 *   - `emit` set: emit writes each pipeline's samples (labels, histograms,
 *     one sample per partition, reason, operator, column or sink);
 *   - neither: one sample per pipeline, {pipeline="..."}, the integer at
 *     `off` in the module's snapshot (`kind` says its width), divided by
 *     `div` when set.
 * `labels` names the family's labels in order; emitters take their label
 * names from it, so the table is the one place they are spelled.
 */
struct pr__family {
    int rank; /* place on the page (see above) */
    const char *name;
    pr__metric_type type;
    const char *help;
    const char *labels[3];
    size_t off; /* value, histogram or array offset in the snapshot */
    double div; /* 0: value as is */
    int arg;    /* emitter-specific */
    int kind;   /* PR__V_* for the default emitter */
    void (*emit)(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c);
    void (*proc)(pr_mbuf *mb, const pr__family *f, const pr_service *svc);
};

/* A module: its families and its per-pipeline snapshot. */
typedef struct pr__metric_module {
    const char *name;
    size_t snap_size;                        /* 0: no snapshot */
    void (*scrape)(pr__pipe *p, void *snap); /* fill snap (zeroed) */
    void (*release)(void *snap);             /* NULL: nothing to free */
    /* NULL: every pipeline has samples; else only pipelines it says yes to
     * (no snapshot for the others), and the module's families are left off
     * the page (no HELP, no TYPE) when it says no to every pipeline. */
    bool (*shown)(const pr__pipe *p);
    const pr__family *families;
    size_t n_families;
} pr__metric_module;

/* Add a module to the page (its registration call does this once; the
 * registry runs the registration calls on the first render). */
void pr__metrics_register(const pr__metric_module *m);

/* The registration calls, one per owner (metrics_*.c). */
void pr__metrics_process_init(void);
void pr__metrics_pipeline_init(void);
void pr__metrics_consumer_init(void);
void pr__metrics_batcher_init(void);
void pr__metrics_engine_init(void);
void pr__metrics_vocablog_init(void);
void pr__metrics_sinks_init(void);
void pr__metrics_schemareg_init(void);

/* Shared emitter helpers (metrics_registry.c). */
const char *pr__metric_pipe_name(const pr__metric_ctx *c);
double pr__metric_scaled(const pr__family *f, double v);

/* Label sets: "pipeline" first, then the family's own label. */
/* clang-format off */
#define PR__L_NONE        {0}
#define PR__L_VERSION     {"version"}
#define PR__L_PIPE        {"pipeline"}
#define PR__L_PIPE_AND(x) {"pipeline", x}
#define PR__L_PARTITION   {"pipeline", "topic", "partition"}
/* clang-format on */

#define PR__N(a) (sizeof(a) / sizeof((a)[0]))

#endif
