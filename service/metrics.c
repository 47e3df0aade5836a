/*
 * metrics.c — Prometheus text exposition 0.0.4 and histograms (pr_metrics.h).
 *
 * Rendering writes straight into a growing buffer; there is no registry. The
 * histogram keeps per-bucket (not cumulative) counts under a mutex so an
 * observation costs one short binary search and one lock; it is observed per
 * batch (with a row count), never per row, so the lock is cold.
 */
#include "pr_metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- buffer */

void pr_mbuf_init(pr_mbuf *mb)
{
    memset(mb, 0, sizeof(*mb));
}

void pr_mbuf_free(pr_mbuf *mb)
{
    free(mb->buf);
    memset(mb, 0, sizeof(*mb));
}

void pr_mbuf_reset(pr_mbuf *mb)
{
    mb->len = 0;
    if (mb->buf)
        mb->buf[0] = '\0';
}

static bool pr__mbuf_reserve(pr_mbuf *mb, size_t extra)
{
    if (mb->err)
        return false;
    if (mb->len + extra + 1 <= mb->cap)
        return true;
    size_t cap = mb->cap ? mb->cap : 1024;
    while (cap < mb->len + extra + 1)
        cap *= 2;
    char *nb = realloc(mb->buf, cap);
    if (!nb) {
        mb->err = PR_ENOMEM;
        return false;
    }
    mb->buf = nb;
    mb->cap = cap;
    return true;
}

void pr_mbuf_append(pr_mbuf *mb, const char *s, size_t len)
{
    if (!pr__mbuf_reserve(mb, len))
        return;
    memcpy(mb->buf + mb->len, s, len);
    mb->len += len;
    mb->buf[mb->len] = '\0';
}

void pr_mbuf_puts(pr_mbuf *mb, const char *s)
{
    pr_mbuf_append(mb, s, strlen(s));
}

void pr_mbuf_vprintf(pr_mbuf *mb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof(small)) {
        pr_mbuf_append(mb, small, (size_t)n);
    } else if (pr__mbuf_reserve(mb, (size_t)n)) {
        vsnprintf(mb->buf + mb->len, (size_t)n + 1, fmt, ap2);
        mb->len += (size_t)n;
    }
    va_end(ap2);
}

void pr_mbuf_printf(pr_mbuf *mb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pr_mbuf_vprintf(mb, fmt, ap);
    va_end(ap);
}

void pr_mbuf_json_str(pr_mbuf *mb, const char *s)
{
    pr_mbuf_append(mb, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        switch (*p) {
        case '"':
            pr_mbuf_append(mb, "\\\"", 2);
            break;
        case '\\':
            pr_mbuf_append(mb, "\\\\", 2);
            break;
        case '\n':
            pr_mbuf_append(mb, "\\n", 2);
            break;
        case '\r':
            pr_mbuf_append(mb, "\\r", 2);
            break;
        case '\t':
            pr_mbuf_append(mb, "\\t", 2);
            break;
        default:
            if (*p < 0x20)
                pr_mbuf_printf(mb, "\\u%04x", *p);
            else
                pr_mbuf_append(mb, (const char *)p, 1);
        }
    }
    pr_mbuf_append(mb, "\"", 1);
}

/* ---------------------------------------------------------------- exposition */

static const char *const pr__type_names[] = {
    [PR_METRIC_COUNTER] = "counter",
    [PR_METRIC_GAUGE] = "gauge",
    [PR_METRIC_HISTOGRAM] = "histogram",
    [PR_METRIC_UNTYPED] = "untyped",
};

/* HELP text escapes backslash and newline only. */
static void pr__help_escape(pr_mbuf *mb, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            pr_mbuf_append(mb, "\\\\", 2);
        else if (*s == '\n')
            pr_mbuf_append(mb, "\\n", 2);
        else
            pr_mbuf_append(mb, s, 1);
    }
}

void pr_metric_family(pr_mbuf *mb, const char *name, pr_metric_type type, const char *help)
{
    pr_mbuf_printf(mb, "# HELP %s ", name);
    pr__help_escape(mb, help);
    pr_mbuf_printf(mb, "\n# TYPE %s %s\n", name, pr__type_names[type]);
}

/* Shortest of %.15g / %.17g that reads back exactly (0.1, not 0.10000000000000001). */
static void pr__fmt_double(char *out, size_t size, double v)
{
    snprintf(out, size, "%.15g", v);
    if (strtod(out, NULL) != v)
        snprintf(out, size, "%.17g", v);
}

static void pr__value(pr_mbuf *mb, double v)
{
    char tmp[40];
    if (isnan(v))
        pr_mbuf_puts(mb, "NaN");
    else if (isinf(v))
        pr_mbuf_puts(mb, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9.007199254740992e15)
        pr_mbuf_printf(mb, "%.0f", v);
    else {
        pr__fmt_double(tmp, sizeof(tmp), v);
        pr_mbuf_puts(mb, tmp);
    }
}

static void pr__labels(pr_mbuf *mb, const pr_label *labels, size_t n, const char *extra_name,
                       const char *extra_value)
{
    if (n == 0 && !extra_name)
        return;
    pr_mbuf_append(mb, "{", 1);
    for (size_t i = 0; i <= n; i++) {
        const char *ln, *lv;
        if (i < n) {
            ln = labels[i].name;
            lv = labels[i].value ? labels[i].value : "";
        } else if (extra_name) {
            ln = extra_name;
            lv = extra_value;
        } else {
            break;
        }
        if (i > 0)
            pr_mbuf_append(mb, ",", 1);
        pr_mbuf_printf(mb, "%s=\"", ln);
        for (const char *p = lv; *p; p++) {
            if (*p == '\\')
                pr_mbuf_append(mb, "\\\\", 2);
            else if (*p == '"')
                pr_mbuf_append(mb, "\\\"", 2);
            else if (*p == '\n')
                pr_mbuf_append(mb, "\\n", 2);
            else
                pr_mbuf_append(mb, p, 1);
        }
        pr_mbuf_append(mb, "\"", 1);
    }
    pr_mbuf_append(mb, "}", 1);
}

void pr_metric_sample(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                      double value)
{
    pr_mbuf_puts(mb, name);
    pr__labels(mb, labels, n_labels, NULL, NULL);
    pr_mbuf_append(mb, " ", 1);
    pr__value(mb, value);
    pr_mbuf_append(mb, "\n", 1);
}

void pr_metric_single(pr_mbuf *mb, const char *name, pr_metric_type type, const char *help,
                      double value)
{
    pr_metric_family(mb, name, type, help);
    pr_metric_sample(mb, name, NULL, 0, value);
}

/* ---------------------------------------------------------------- histogram */

const double pr_buckets_freshness_s[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                         0.1,   0.15,   0.2,   0.25, 0.3,   0.5,  0.75,
                                         1,     2.5,    5,     10,   30,    60};
const size_t pr_buckets_freshness_n = sizeof(pr_buckets_freshness_s) / sizeof(double);
const double pr_buckets_ratio[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0};
const size_t pr_buckets_ratio_n = sizeof(pr_buckets_ratio) / sizeof(double);

int pr_histogram_init(pr_histogram *h, const double *bounds, size_t n_bounds)
{
    if (n_bounds > PR_METRIC_HIST_MAX_BUCKETS)
        return PR_EINVAL;
    for (size_t i = 0; i < n_bounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1]))
            return PR_EINVAL;
    memset(h, 0, sizeof(*h));
    pthread_mutex_init(&h->lock, NULL);
    h->n_bounds = n_bounds;
    memcpy(h->bounds, bounds, n_bounds * sizeof(double));
    return 0;
}

void pr_histogram_destroy(pr_histogram *h)
{
    pthread_mutex_destroy(&h->lock);
}

void pr_histogram_observe_n(pr_histogram *h, double v, uint64_t n)
{
    if (n == 0)
        return;
    /* First bucket whose bound is >= v (le semantics); NaN goes to +Inf. */
    size_t lo = 0, hi = h->n_bounds;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    pthread_mutex_lock(&h->lock);
    h->counts[lo] += n;
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

void pr_metric_histogram(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                         const pr_hist_snapshot *s)
{
    char le[64];
    uint64_t cum = 0;
    for (size_t i = 0; i <= s->n_bounds; i++) {
        cum += s->counts[i];
        if (i < s->n_bounds)
            pr__fmt_double(le, sizeof(le), s->bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        pr_mbuf_printf(mb, "%s_bucket", name);
        pr__labels(mb, labels, n_labels, "le", le);
        pr_mbuf_append(mb, " ", 1);
        pr__value(mb, (double)cum);
        pr_mbuf_append(mb, "\n", 1);
    }
    pr_mbuf_printf(mb, "%s_sum", name);
    pr__labels(mb, labels, n_labels, NULL, NULL);
    pr_mbuf_append(mb, " ", 1);
    pr__value(mb, s->sum);
    pr_mbuf_append(mb, "\n", 1);
    pr_mbuf_printf(mb, "%s_count", name);
    pr__labels(mb, labels, n_labels, NULL, NULL);
    pr_mbuf_append(mb, " ", 1);
    pr__value(mb, (double)s->count);
    pr_mbuf_append(mb, "\n", 1);
}
