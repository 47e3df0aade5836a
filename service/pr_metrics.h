/*
 * pr_metrics.h — Prometheus text exposition (format 0.0.4) and the one metric
 * type that needs state of its own: the histogram.
 *
 * piperec renders metrics directly at scrape time: components keep plain
 * stats structs (ingest, batcher, sinks, engine), and the service walks them
 * and writes families with the helpers below. There is no global registry, so
 * nothing has to be registered or unregistered when a pipeline starts or
 * stops, and a scrape always sees one consistent read of each stats struct.
 *
 * Naming rules this module helps keep (see docs/operations.md):
 *   - every name starts with "piperec_", base units (_seconds, _bytes),
 *     counters end in _total;
 *   - labels have low cardinality (pipeline, topic, partition, column,
 *     reason, operator, backend, version): never one label value per record
 *     value or per batch;
 *   - a family is announced once (HELP + TYPE), then its samples follow.
 *
 * Threads: a pr_mbuf belongs to one thread. A pr_histogram may be observed by
 * one thread while another snapshots or renders it (it has its own lock).
 *
 * Errors: writers never fail mid-way; an allocation failure sets mb->err
 * (PR_ENOMEM) and later writes are dropped, so check mb->err once at the end.
 */
#ifndef PR_METRICS_H
#define PR_METRICS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_error.h"

/* ---------------------------------------------------------------- buffer */

/* A growing text buffer (always NUL-terminated when buf != NULL). */
typedef struct pr_mbuf {
    char *buf;
    size_t len;
    size_t cap;
    int err; /* 0 or PR_ENOMEM */
} pr_mbuf;

void pr_mbuf_init(pr_mbuf *mb);
void pr_mbuf_free(pr_mbuf *mb);
void pr_mbuf_reset(pr_mbuf *mb); /* len = 0, keeps the memory */
void pr_mbuf_append(pr_mbuf *mb, const char *s, size_t len);
void pr_mbuf_puts(pr_mbuf *mb, const char *s);
void pr_mbuf_printf(pr_mbuf *mb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pr_mbuf_vprintf(pr_mbuf *mb, const char *fmt, va_list ap);
/* A JSON string literal with quotes and escapes. */
void pr_mbuf_json_str(pr_mbuf *mb, const char *s);

/* ---------------------------------------------------------------- exposition */

typedef enum pr_metric_type {
    PR_METRIC_COUNTER = 0,
    PR_METRIC_GAUGE,
    PR_METRIC_HISTOGRAM,
    PR_METRIC_UNTYPED,
} pr_metric_type;

/* One label pair. A NULL value is written as "". */
typedef struct pr_label {
    const char *name;
    const char *value;
} pr_label;

/* Write "# HELP name help" and "# TYPE name type". */
void pr_metric_family(pr_mbuf *mb, const char *name, pr_metric_type type, const char *help);

/* Write one sample line: name{l1="v1",...} value. Label values are escaped
 * (backslash, quote, newline); values print as integers when they are, +Inf,
 * -Inf and NaN as the format wants. */
void pr_metric_sample(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                      double value);

/* Convenience: family + one unlabelled sample. */
void pr_metric_single(pr_mbuf *mb, const char *name, pr_metric_type type, const char *help,
                      double value);

/* ---------------------------------------------------------------- histogram */

#define PR_METRIC_HIST_MAX_BUCKETS 32

/* Cumulative-at-render histogram with fixed upper bounds (ascending, finite;
 * +Inf is implicit). */
typedef struct pr_histogram {
    pthread_mutex_t lock;
    size_t n_bounds;
    double bounds[PR_METRIC_HIST_MAX_BUCKETS];
    uint64_t counts[PR_METRIC_HIST_MAX_BUCKETS + 1]; /* per bucket, not cumulative; last = +Inf */
    uint64_t count;
    double sum;
} pr_histogram;

/* A copy of a histogram's counters, e.g. for quantiles over a time window. */
typedef struct pr_hist_snapshot {
    size_t n_bounds;
    double bounds[PR_METRIC_HIST_MAX_BUCKETS];
    uint64_t counts[PR_METRIC_HIST_MAX_BUCKETS + 1];
    uint64_t count;
    double sum;
} pr_hist_snapshot;

/* Bounds are copied; n_bounds <= PR_METRIC_HIST_MAX_BUCKETS and ascending, else
 * PR_EINVAL. */
int pr_histogram_init(pr_histogram *h, const double *bounds, size_t n_bounds);
void pr_histogram_destroy(pr_histogram *h);
/* Record `n` observations of value v (n > 1 for "these n rows all had v"). */
void pr_histogram_observe_n(pr_histogram *h, double v, uint64_t n);
static inline void pr_histogram_observe(pr_histogram *h, double v)
{
    pr_histogram_observe_n(h, v, 1);
}
void pr_histogram_snapshot(pr_histogram *h, pr_hist_snapshot *out);

/* out = a - b (counts of the window between two snapshots of one histogram). */
void pr_hist_snapshot_diff(const pr_hist_snapshot *a, const pr_hist_snapshot *b,
                           pr_hist_snapshot *out);
/* Estimated q-quantile (0..1) by linear interpolation inside the bucket, as
 * PromQL's histogram_quantile does; NaN when empty; the last finite bound when
 * it falls in +Inf. */
double pr_hist_snapshot_quantile(const pr_hist_snapshot *s, double q);

/* Write a histogram family's samples (_bucket with le, _sum, _count) with the
 * given extra labels (the family line must be written first with
 * PR_METRIC_HISTOGRAM). `name` is the base name without suffix. */
void pr_metric_histogram(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                         const pr_hist_snapshot *s);

/* Standard bucket sets. */
extern const double pr_buckets_freshness_s[]; /* 1 ms .. 60 s */
extern const size_t pr_buckets_freshness_n;
extern const double pr_buckets_ratio[]; /* 0.1 .. 1.0 */
extern const size_t pr_buckets_ratio_n;

#endif
