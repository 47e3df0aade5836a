/*
 * pr_gen.h — deterministic synthetic Criteo-Kaggle-shaped data, and a JSON
 * clickstream (the end of this header).
 *
 * Every row is a pure function of (seed, row index): any range can be made,
 * in any order, by any number of threads, and always comes out the same.
 * That lets `piperec gen`, the benchmarks and the streaming demo produce the
 * same data without files.
 *
 * Shape: label (about 3% positive), 13 dense integers I1..I13, 26 sparse
 * values C1..C26 printed as 8 hex digits. Sparse column c draws a rank from a
 * Zipf-like power law over [0, card[c]) (card = the 26 published Kaggle
 * cardinalities, pr_gen_cardinality) and maps it through a fixed per-column
 * bijective 32-bit scramble, so a column has at most card[c] distinct values
 * and a few very frequent ones. Dense values are heavy-tailed non-negative
 * integers; I2 is sometimes -1/-2/-3 as in the real data. Missing values
 * (empty fields) appear at per-column rates resembling the Kaggle set (C22
 * mostly missing, I12 mostly missing, ...). docs/formats.md documents the
 * TSV and binary outputs.
 *
 * Planted signal (pr_gen_set_signal, `piperec gen --signal 1`): the label
 * becomes Bernoulli(sigmoid(logit)) with logit a fixed function of a few
 * sparse values (C1, C6, C9, C14, C17, C20: a pseudo-random weight per
 * value) and dense features (log1p of I1, I3, I7), drawn with the row's own
 * random bits: still a pure function of (seed, row), about 20% positive, and
 * learnable (a small DLRM reaches a held-out AUC near 0.88), so trainers have
 * something to measure. Dense and sparse values are the same as without it;
 * without it the output is unchanged (3% positive, independent of features).
 *
 * Exact Zipf (pr_gen_set_zipf, `piperec gen --zipf S`): sparse column c draws
 * its rank r from P(r) = (r + 1)^-S / sum_{k=1}^{card[c]} k^-S instead of the
 * power law above (same scramble, same missing rates; dense values and
 * labels unchanged), e.g. for hot-set tests and benches, where a column's
 * exact top-k share is known.
 *
 * Threads: a pr_gen is read-only after pr_gen_new (and pr_gen_set_signal,
 * pr_gen_set_zipf); share it freely.
 */
#ifndef PR_GEN_H
#define PR_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_engine.h"

#define PR_GEN_N_DENSE  13
#define PR_GEN_N_SPARSE 26

/* The published per-column cardinalities of Criteo Kaggle (C1..C26). */
extern const uint32_t pr_gen_cardinality[PR_GEN_N_SPARSE];

typedef struct pr_gen pr_gen;

/* One generated row. */
typedef struct pr_gen_row {
    int32_t label;
    uint32_t dense_missing;  /* bit j set: dense column j is missing (value 0) */
    uint32_t sparse_missing; /* bit c set: sparse column c is missing (value 0) */
    int64_t dense[PR_GEN_N_DENSE];
    uint32_t sparse[PR_GEN_N_SPARSE];
} pr_gen_row;

/* Build the quantile tables for `seed`. Returns NULL when out of memory. */
pr_gen *pr_gen_new(uint64_t seed);
void pr_gen_free(pr_gen *g);

/* Planted-signal model: 0 = none (the default), 1 = the model described
 * above. Returns PR_EINVAL for other values. Call before sharing g. */
#define PR_GEN_SIGNAL_MAX 1
int pr_gen_set_signal(pr_gen *g, uint32_t model);

/* Sparse ranks from an exact Zipf with exponent s (0 < s <= PR_GEN_ZIPF_MAX;
 * 0 = back to the default power law). PR_EINVAL out of range, PR_ENOMEM.
 * Builds per-column tables (about 24 KiB each); call before sharing g. */
#define PR_GEN_ZIPF_MAX 10.0
int pr_gen_set_zipf(pr_gen *g, double s);
/* The exponent set, 0 when none. */
double pr_gen_zipf(const pr_gen *g);

void pr_gen_row_at(const pr_gen *g, uint64_t row, pr_gen_row *out);

/* The longest TSV line pr_gen_tsv can write, newline included. */
#define PR_GEN_TSV_LINE_MAX 512

/* Write rows [row0, row0 + n) as TSV lines into buf (cap bytes), stopping
 * early when the next line might not fit. Returns bytes written; *rows_out
 * gets the rows written. */
size_t pr_gen_tsv(const pr_gen *g, uint64_t row0, uint64_t n, char *buf, size_t cap,
                  uint64_t *rows_out);

/* Append rows [row0, row0 + n) to a block shaped 13 dense / 26 sparse (hex
 * slots, or uint64 values with PR_SPARSE_U64 when `u64`). Fails with PR_EFULL
 * (nothing appended) when they do not fit, PR_EINVAL on a wrong shape. Row
 * metadata, when the block has it, gets offset = row index. */
int pr_gen_fill_block(const pr_gen *g, uint64_t row0, uint32_t n, pr_block *b, bool u64);

/* The "binary" format: one varint length, then one serialized
 * piperec.v1.EventBatch of rows [row0, row0 + n) (sparse values as sparse_id).
 * Returns bytes written, or 0 when cap < pr_gen_pb_max(n). */
size_t pr_gen_pb_max(uint32_t n);
size_t pr_gen_pb_batch(const pr_gen *g, uint64_t row0, uint32_t n, uint8_t *buf, size_t cap);

/* One Kafka message payload holding events [row0, row0 + n) in a source
 * format (pr_source_format of pr_config.h): criteo_tsv = n TSV lines,
 * protobuf_event = one bare Event (n must be 1), protobuf_event_batch = one
 * EventBatch, json = one clickstream event (below; n must be 1, seed = g's).
 * Returns its length, or 0 when it does not fit in cap. Used by
 * `piperec demo` and the streaming benchmarks. */
size_t pr_gen_message(const pr_gen *g, int format, uint64_t row0, uint32_t n, uint8_t *buf,
                      size_t cap);

/* ---------------------------------------------------------------- JSON clickstream
 *
 * `piperec gen --format json`: one JSON object per line, a pure function of
 * (seed, row) like the rows above (gen_json.c), shaped for
 * examples/clickstream.yaml:
 *
 *   {"event_id":"e…","ts":1732600000050,"user":{"id":"u1234","age_days":400},
 *    "item":{"id":985,"category":"books","price":12.5,"tags":["sale","crème"]},
 *    "context":{"device":"ios","page":3},"history":[97,1009,12],
 *    "label":{"click":1,"purchase":0,"dwell_s":12.3}}
 *
 * ts in ms, increasing with the row (50 ms apart, jittered); 200000 users and
 * 24 categories x 4000 items with power-law popularity; an item's category,
 * price and tags are functions of its id (category = id mod 24). Missing on
 * purpose: user.age_days (10%), item.tags (1 item in 7; some lists empty),
 * context (5%), history (8%; else 0..20 items), label.purchase (30%). The
 * label object comes first in 20% of events (field order varies).
 *
 * Planted signal: each user has two favourite categories (hashes of the
 * user id); the event's item is from the first in 45% of events, the second
 * in 20%; history items lean to them too (40% / 30%). click ~
 * Bernoulli(sigmoid(pr_gen_json_logit(item category == favourite 1, == favourite
 * 2, history items of the item's category, device ios/android))), about
 * 35% positive; purchase = click and a 15% coin; dwell_s > 0 only for clicks.
 * A model over user, category and history embeddings learns it.
 */
#define PR_GEN_JSON_LINE_MAX 1024 /* an event plus its newline always fits */

double pr_gen_json_logit(bool fav1, bool fav2, unsigned same_cat_history, bool mobile);

/* Event `row` (no newline) into buf; returns its length, 0 when cap is too
 * small (PR_GEN_JSON_LINE_MAX always suffices). */
size_t pr_gen_json_event(uint64_t seed, uint64_t row, char *buf, size_t cap);

/* Events [row0, row0 + n) as JSON lines, stopping early when the next line
 * might not fit; *rows_out (may be NULL) gets the rows written. */
size_t pr_gen_json_lines(uint64_t seed, uint64_t row0, uint64_t n, char *buf, size_t cap,
                         uint64_t *rows_out);

#endif
