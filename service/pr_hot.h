/*
 * pr_hot.h — hot sets (issue 14 item 4): a decayed frequency sketch over the
 * indices one sparse column emits, answering "which indices are hot, and what
 * share of lookups do the top k of them cover".
 *
 * One pr_hot per sparse column (a declared schema: per vocab feature, every
 * list element counting as one value, pr_hot_observe_side). Space-saving top-K (Metwally et al.): K
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
 * Hot set (batch.split popular, Hotline): the indices a trainer may treat as
 * hot right now, for a membership test per value. It is the top top_k by
 * estimate among counters whose guaranteed count (count - error, in units of
 * a current observation) is at least PR_HOT_SET_MIN_COUNT, so a value seen
 * once never makes a set, however young the stream. It is rebuilt from the
 * sketch every PR_HOT_SET_REFRESH_MIN..MAX values (a quarter of the values
 * seen so far, in that range): a linear-time selection over the counters
 * per rebuild, a probe of a small open-addressing table (2 x top_k slots,
 * cache resident) per test. Kept only once pr_hot_popular_rows has
 * asked for it: without a split it costs nothing.
 *
 * Threads: one writer (the block's runner: service/worker.c, on the worker
 * or, without overlap, the pipeline thread); readers need the writer's lock
 * (pr__pipe.hot_lock, service/pipe.h: held by worker.c around observe and by
 * the readers, service/http_views.c for /v1/hot and metrics_pipeline.c for
 * the coverage gauge). Nothing here locks.
 */
#ifndef PR_HOT_H
#define PR_HOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_engine.h"

typedef struct pr_hot pr_hot;

#define PR_HOT_SLACK     8 /* counters kept per index reported */
#define PR_HOT_MAX_TOP_K (1u << 16)

#define PR_HOT_SET_MIN_COUNT   4.0    /* guaranteed sightings to enter a hot set */
#define PR_HOT_SET_REFRESH_MIN 4096u  /* values between hot-set rebuilds, at least */
#define PR_HOT_SET_REFRESH_MAX 65536u /* and at most */

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
/* The same for column `col` of an engine output, rejected rows left out.
 * Heat belongs to values, not indices: at each of the output's recycled-
 * index notices for the column (pr_out.recycled, bounded vocabularies) the
 * index's counter restarts from 0 before the rows that use it anew, and an
 * index that was in the hot set leaves it at once (the set is rebuilt). */
void pr_hot_observe_out(pr_hot *h, const pr_out *o, uint32_t col);
/* The same for sparse or list feature f of a declared schema's output
 * (o->side, filled by pr_feature_finish): every element of every kept row
 * counts as one value, so a list feature's shares are shares of elements
 * (an empty list adds nothing). The output's notices for feature f (after
 * pr_feature_finish: col = side index f, row = block row) restart their
 * index before that row, as above. Nothing without side tables. A pipeline
 * keeps one sketch per vocab feature (engine column c = side->vocab_col[f],
 * named after the feature); features without vocab have none. */
void pr_hot_observe_side(pr_hot *h, const pr_out *o, uint16_t f);

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

/* ---------------------------------------------------------------- hot sets */

/* Is `index` in the column's current hot set (false before the set was
 * first asked for)? */
bool pr_hot_is_hot(const pr_hot *h, int64_t index);
/* Indices in the current hot set (<= top_k). */
size_t pr_hot_set_size(const pr_hot *h);
/* Rebuild the hot set from the sketch now (tests; observe does it when due). */
void pr_hot_set_refresh(pr_hot *h);
/* Hot-set version: how many times the set was rebuilt (0 = never asked for).
 * A pipeline's version is the sum over its columns (pr_hot_sets_version; 0
 * for hot NULL): it grows whenever any column's set may have changed, and
 * equal versions mean the same sets. Batches carry it (TrainingBatch.
 * hot_set_version) and GET /v1/hot reports it. */
uint64_t pr_hot_set_version(const pr_hot *h);
uint64_t pr_hot_sets_version(pr_hot *const *hot, uint32_t n);

/* Which rows of `o` are popular: every sparse column's index in its
 * column's hot set (hot[c] for c < o->n_sparse, after observing `o`). For a
 * declared schema (o->side set): every element of every vocab feature f of
 * the row in hot[side->vocab_col[f]] (a list counts each element; an empty
 * list passes; features without vocab are not judged).
 * Returns a bitmap of pr_bitmap_words(o->rows) words, bit r = row r popular
 * (rejected rows: unspecified), for pr_batcher_add_split; the caller frees
 * it. NULL when out of memory (then no row is popular). The first call
 * turns hot-set upkeep on for these sketches. */
uint64_t *pr_hot_popular_rows(pr_hot *const *hot, const pr_out *o);

#endif
