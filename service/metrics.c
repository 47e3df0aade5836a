/*
 * metrics.c — Prometheus text exposition 0.0.4 (pr_metrics.h).
 *
 * Rendering writes straight into a growing buffer (common/include/pr_mbuf.h); there
 * is no registry. Histograms themselves live in common/include/pr_hist.h.
 */
#include "pr_metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void pr__metric_family(pr_mbuf *mb, const char *name, pr__metric_type type, const char *help)
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

/* A whole number in decimal, as "%.0f" writes it. A scrape writes hundreds
 * of samples (one per partition and lag family); printf's float path was
 * most of a scrape's CPU. */
static void pr__int_value(pr_mbuf *mb, int64_t v)
{
    char tmp[24];
    char *p = tmp + sizeof(tmp);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        *--p = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        *--p = '-';
    pr_mbuf_append(mb, p, (size_t)(tmp + sizeof(tmp) - p));
}

static void pr__value(pr_mbuf *mb, double v)
{
    char tmp[40];
    if (isnan(v))
        pr_mbuf_puts(mb, "NaN");
    else if (isinf(v))
        pr_mbuf_puts(mb, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9.007199254740992e15) {
        if (v == 0 && signbit(v))
            pr_mbuf_puts(mb, "-0"); /* as "%.0f" has it */
        else
            pr__int_value(mb, (int64_t)v);
    } else {
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
        pr_mbuf_puts(mb, ln);
        pr_mbuf_append(mb, "=\"", 2);
        for (const char *p = lv; *p;) {
            size_t run = strcspn(p, "\\\"\n"); /* plain bytes, appended at once */
            pr_mbuf_append(mb, p, run);
            p += run;
            if (*p == '\\')
                pr_mbuf_append(mb, "\\\\", 2);
            else if (*p == '"')
                pr_mbuf_append(mb, "\\\"", 2);
            else if (*p == '\n')
                pr_mbuf_append(mb, "\\n", 2);
            if (*p)
                p++;
        }
        pr_mbuf_append(mb, "\"", 1);
    }
    pr_mbuf_append(mb, "}", 1);
}

void pr__metric_sample(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                       double value)
{
    pr_mbuf_puts(mb, name);
    pr__labels(mb, labels, n_labels, NULL, NULL);
    pr_mbuf_append(mb, " ", 1);
    pr__value(mb, value);
    pr_mbuf_append(mb, "\n", 1);
}

void pr__metric_single(pr_mbuf *mb, const char *name, pr__metric_type type, const char *help,
                       double value)
{
    pr__metric_family(mb, name, type, help);
    pr__metric_sample(mb, name, NULL, 0, value);
}

/* ---------------------------------------------------------------- histogram */

void pr__metric_histogram(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
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
