/*
 * pr_hot.h — hot sets (issue 14 item 4): a decayed frequency sketch over the
 * indices one sparse column emits, answering "which indices are hot, and what
 * share of lookups do the top k of them cover".
 *
 * One pr_hot per sparse column. Space-saving top-K (Metwally et al.): K
 * counters; an index without a counter takes over the smallest one and
 * inherits its count as error, so every count is an upper bound and any index
 * whose true share exceeds 1/K has a counter. Decay is exponential in records,
 * never in wall time (replays and tests see the same sketch): a value observed
 * `half_life` records ago weighs half of one observed now. It is done without
 * touching the counters, by growing the weight of new observations and
 * rescaling everything once the weight gets large.
 *
 * Accuracy: the counters at the bottom of a space-saving sketch carry errors
 * as large as their counts, so the sketch keeps PR_HOT_SLACK counters per
 * index it reports: with 8x, the top-1024 coverage of a Zipf(1.05) stream
 * over 200k indices is within 0.01% of the exact one; with 1x it is 13% off
 * (tests/service/test_hot.c).
 *
 * Cost: per value one hash probe and a sift in a min-heap of K slots (O(log K)
 * at worst, O(1) for values already hot). Memory about 40 bytes per counter:
 * 330 KiB per column at top_k 1024.
 *
 * Threads: one writer (the pipeline thread); readers need the writer's lock
 * (service.c holds pr__pipe.hot_lock around observe and read). Nothing here
 * locks.
 */
#ifndef PR_HOT_H
#define PR_HOT_H

#include <stddef.h>
#include <stdint.h>

#include "pr_engine.h"

typedef struct pr_hot pr_hot;

#define PR_HOT_SLACK     8 /* counters kept per index reported */
#define PR_HOT_MAX_TOP_K (1u << 16)

/* One entry of a top-k answer: the index and its estimated (decayed) share of
 * the lookups, 0..1. */
typedef struct pr_hot_item {
    int64_t index;
    double share;
} pr_hot_item;

/* A sketch answering top-k queries up to k = top_k (1..PR_HOT_MAX_TOP_K),
 * with PR_HOT_SLACK * top_k counters; half_life in records (0: no decay).
 * NULL when out of memory or top_k is out of range. */
pr_hot *pr_hot_new(uint32_t top_k, uint64_t half_life);
void pr_hot_free(pr_hot *h); /* NULL is fine */

/* Count n values as one step of decay (the weight grows once per call, by
 * n records: blocks of a few thousand rows against half-lives of millions). */
void pr_hot_observe(pr_hot *h, const int64_t *idx, size_t n);
/* The same for column `col` of an engine output, rejected rows left out. */
void pr_hot_observe_out(pr_hot *h, const pr_out *o, uint32_t col);

/* The largest k answered, and values observed since creation (not decayed). */
uint32_t pr_hot_top_k(const pr_hot *h);
uint64_t pr_hot_rows_observed(const pr_hot *h);

/* The min(k, top_k, counters in use) hottest indices, hottest first (ties: smaller
 * index first), into items[k]. Returns how many; *coverage (may be NULL) is
 * their summed share, the estimated share of lookups the top k cover (0 when
 * nothing was observed). */
size_t pr_hot_top(const pr_hot *h, size_t k, pr_hot_item *items, double *coverage);

/* Estimated coverage of the top k for each of ks[0..n) in one pass (one sort). */
void pr_hot_coverage(const pr_hot *h, const size_t *ks, size_t n, double *out);

#endif
