/*
 * hist.c — fixed-bucket histograms and quantiles (contract: pr_hist.h).
 *
 * Counts are kept per bucket (not cumulative) under a mutex, so an
 * observation costs one short binary search and one lock; the service
 * observes per batch (with a row count), never per row, so the lock is cold.
 */
#include "pr_hist.h"

#include <math.h>
#include <string.h>

#include "pr_error.h"

const double pr_buckets_freshness_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1,   0.15,   0.2,   0.25, 0.3,   0.5,  0.75,
                                         1,     2.5,    5,     10,   30,    60};
const size_t pr_buckets_freshness_n = sizeof(pr_buckets_freshness_s) / sizeof(double);
const double pr_buckets_ratio[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0};
const size_t pr_buckets_ratio_n = sizeof(pr_buckets_ratio) / sizeof(double);

int pr_hist_snapshot_init(pr_hist_snapshot *s, const double *bounds, size_t n_bounds)
{
    if (n_bounds > PR_METRIC_HIST_MAX_BUCKETS)
        return PR_EINVAL;
    for (size_t i = 0; i < n_bounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
            return PR_EINVAL;
    memset(s, 0, sizeof(*s));
    s->n_bounds = n_bounds;
    memcpy(s->bounds, bounds, n_bounds * sizeof(double));
    return 0;
}

int pr_histogram_init(pr_histogram *h, const double *bounds, size_t n_bounds)
{
    pr_hist_snapshot s;
    int rc = pr_hist_snapshot_init(&s, bounds, n_bounds);
    if (rc < 0)
        return rc;
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    h->n_bounds = s.n_bounds;
    memcpy(h->bounds, s.bounds, sizeof(h->bounds));
    return 0;
}

void pr_histogram_fini(pr_histogram *h)
{
    pthread_mutex_destroy(&h->lock);
}

/* First bucket whose bound is >= v (le semantics); NaN goes to +Inf. */
static size_t pr__hist_bucket(const double *bounds, size_t n_bounds, double v)
{
    size_t lo = 0, hi = n_bounds;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v <= bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void pr_hist_snapshot_observe_n(pr_hist_snapshot *s, double v, uint64_t n)
{
    if (n == 0)
        return;
    s->counts[pr__hist_bucket(s->bounds, s->n_bounds, v)] += n;
    s->count += n;
    s->sum += v * (double)n;
}

void pr_histogram_observe_n(pr_histogram *h, double v, uint64_t n)
{
    if (n == 0)
        return;
    size_t b = pr__hist_bucket(h->bounds, h->n_bounds, v);
    pthread_mutex_lock(&h->lock);
    h->counts[b] += n;
    h->count += n;
    h->sum += v * (double)n;
    pthread_mutex_unlock(&h->lock);
}

void pr_histogram_snapshot(pr_histogram *h, pr_hist_snapshot *out)
{
    pthread_mutex_lock(&h->lock);
    out->n_bounds = h->n_bounds;
    memcpy(out->bounds, h->bounds, sizeof(out->bounds));
    memcpy(out->counts, h->counts, sizeof(out->counts));
    out->count = h->count;
    out->sum = h->sum;
    pthread_mutex_unlock(&h->lock);
}

void pr_hist_snapshot_diff(const pr_hist_snapshot *a, const pr_hist_snapshot *b,
                           pr_hist_snapshot *out)
{
    pr_hist_snapshot r = *a;
    for (size_t i = 0; i <= r.n_bounds; i++)
        r.counts[i] = a->counts[i] >= b->counts[i] ? a->counts[i] - b->counts[i] : 0;
    r.count = a->count >= b->count ? a->count - b->count : 0;
    r.sum = a->sum - b->sum;
    *out = r;
}

double pr_hist_snapshot_quantile(const pr_hist_snapshot *s, double q)
{
    if (s->count == 0)
        return NAN;
    if (q < 0)
        q = 0;
    if (q > 1)
        q = 1;
    double rank = q * (double)s->count;
    uint64_t cum = 0;
    for (size_t i = 0; i <= s->n_bounds; i++) {
        uint64_t prev = cum;
        cum += s->counts[i];
        if ((double)cum >= rank && s->counts[i] > 0) {
            if (i == s->n_bounds)
                return s->n_bounds ? s->bounds[s->n_bounds - 1] : NAN;
            double lower = i == 0 ? 0.0 : s->bounds[i - 1];
            double upper = s->bounds[i];
            double frac = (rank - (double)prev) / (double)s->counts[i];
            return lower + (upper - lower) * frac;
        }
    }
    return s->n_bounds ? s->bounds[s->n_bounds - 1] : NAN;
}
