/*
 * pr_metrics.h — Prometheus text exposition (format 0.0.4) and the one metric
 * type that needs state of its own: the histogram.
 *
 * piperec renders metrics directly at scrape time: components keep plain
 * stats structs (ingest, batcher, sinks, engine), and each owner's metric
 * module (metric_families.h) takes one read of them per scrape and writes
 * its families with the helpers below. Modules register their families once
 * per process, not per pipeline, so nothing has to be registered or
 * unregistered when a pipeline starts or stops, and a scrape always sees one
 * consistent read of each stats struct.
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
#include "pr_hist.h"
#include "pr_mbuf.h"

/* ---------------------------------------------------------------- exposition */

typedef enum pr__metric_type {
    PR_METRIC_COUNTER = 0,
    PR_METRIC_GAUGE,
    PR_METRIC_HISTOGRAM,
    PR_METRIC_UNTYPED,
} pr__metric_type;

/* One label pair. A NULL value is written as "". */
typedef struct pr_label {
    const char *name;
    const char *value;
} pr_label;

/* Write "# HELP name help" and "# TYPE name type". */
void pr__metric_family(pr_mbuf *mb, const char *name, pr__metric_type type, const char *help);

/* Write one sample line: name{l1="v1",...} value. Label values are escaped
 * (backslash, quote, newline); values print as integers when they are, +Inf,
 * -Inf and NaN as the format wants. */
void pr__metric_sample(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                       double value);

/* Convenience: family + one unlabelled sample. */
void pr__metric_single(pr_mbuf *mb, const char *name, pr__metric_type type, const char *help,
                       double value);

/* Write a histogram family's samples (_bucket with le, _sum, _count) with the
 * given extra labels (the family line must be written first with
 * PR_METRIC_HISTOGRAM). `name` is the base name without suffix. */
void pr__metric_histogram(pr_mbuf *mb, const char *name, const pr_label *labels, size_t n_labels,
                          const pr_hist_snapshot *s);

/* ---------------------------------------------------------------- process */

/* Write the standard process collector families (process_cpu_seconds_total,
 * process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds, process_start_time_seconds) for the
 * calling process, read from /proc at call time (process_metrics.c). A
 * family whose source cannot be read is left out. Any thread. */
void pr__process_metrics(pr_mbuf *mb);

#endif
