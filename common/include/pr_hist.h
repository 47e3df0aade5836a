/*
 * pr_hist.h — a fixed-bucket histogram (latencies, fill ratios) that one
 * thread observes while another snapshots it (it has its own lock), and
 * quantiles over snapshots or windows between two snapshots. The same
 * estimate as PromQL's histogram_quantile, so a number printed by a bench or
 * the demo matches what a dashboard shows.
 */
#ifndef PR_HIST_H
#define PR_HIST_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

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

/* A copy of a histogram's counters, e.g. for quantiles over a time window.
 * Also a histogram of its own, without a lock, for data one thread owns (the
 * batcher's stats): pr_hist_snapshot_init, then pr_hist_snapshot_observe_n. */
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
void pr_histogram_fini(pr_histogram *h);
/* Record `n` observations of value v (n > 1 for "these n rows all had v"). */
void pr_histogram_observe_n(pr_histogram *h, double v, uint64_t n);
static inline void pr_histogram_observe(pr_histogram *h, double v)
{
    pr_histogram_observe_n(h, v, 1);
}
void pr_histogram_snapshot(pr_histogram *h, pr_hist_snapshot *out);

/* The unlocked form: same bounds rule and bucket choice as pr_histogram. */
int pr_hist_snapshot_init(pr_hist_snapshot *s, const double *bounds, size_t n_bounds);
void pr_hist_snapshot_observe_n(pr_hist_snapshot *s, double v, uint64_t n);
static inline void pr_hist_snapshot_observe(pr_hist_snapshot *s, double v)
{
    pr_hist_snapshot_observe_n(s, v, 1);
}

/* out = a - b (counts of the window between two snapshots of one histogram). */
void pr_hist_snapshot_diff(const pr_hist_snapshot *a, const pr_hist_snapshot *b,
                           pr_hist_snapshot *out);
/* Estimated q-quantile (0..1) by linear interpolation inside the bucket, as
 * PromQL's histogram_quantile does; NaN when empty; the last finite bound when
 * it falls in +Inf. */
double pr_hist_snapshot_quantile(const pr_hist_snapshot *s, double q);

/* Standard bucket sets. */
extern const double pr_buckets_freshness_s[]; /* 1 ms .. 60 s */
extern const size_t pr_buckets_freshness_n;
extern const double pr_buckets_ratio[]; /* 0.1 .. 1.0 */
extern const size_t pr_buckets_ratio_n;

#endif
