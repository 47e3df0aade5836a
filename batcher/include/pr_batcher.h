/*
 * pr_batcher.h — the freshness-aware batcher and the offset tracking behind
 * at-least-once delivery.
 *
 * The pipeline thread feeds engine output (pr_block + pr_out) in; columnar
 * training batches (pr_batch) come out through the emit callback:
 *
 *   - a batch holds exactly cfg.batch.size rows, except a batch emitted
 *     because its oldest row waited max_delay_ms (pr_batcher_poll), or by
 *     pr_batcher_flush at shutdown;
 *   - sequence numbers are strictly increasing from 1, without gaps, within
 *     one epoch (cfg.epoch: the service bumps it at every start, so
 *     (epoch, seq) strictly increases across restarts);
 *   - ordering PR_BATCH_ORDER_PARTITION: rows keep arrival order, so each
 *     partition's rows stay in offset order (batches may mix partitions);
 *   - ordering PR_BATCH_ORDER_EVENT_TIME: rows wait in a buffer and are
 *     released in (event_time, partition, offset) order once the watermark
 *     (min over partitions of their max event time, minus
 *     allowed_lateness_ms) passes them; a row older than the watermark when it
 *     arrives is late (late_policy). A row never waits more than max_delay_ms
 *     for the watermark: at its deadline the watermark is forced up to it,
 *     so an idle partition cannot stall the stream.
 *   - split PR_BATCH_SPLIT_POPULAR (Hotline's popular mini-batches): rows
 *     the caller flags as popular (pr_batcher_add_split: every sparse index
 *     in the hot sets) go into batches of their own, pr_batch.popular = 1,
 *     the rest into regular batches. Each stream has its own max_delay_ms
 *     deadline and keeps the ordering above within itself; both take
 *     sequence numbers from the one counter (so the merged stream is still
 *     strictly increasing, and each stream alone increases with gaps). Every
 *     row goes into exactly one batch of one stream.
 *   - recycled-index notices (bounded vocabularies, pr_out.recycled): every
 *     notice travels in exactly one batch, in pr_batch.recycled, before any
 *     row that uses the index with its new meaning, at its exact place:
 *     `row` is the first row of the batch that reads the index anew, and in
 *     the merged stream (batches in sequence order, rows in order) every row
 *     before it used the old value and every row after it the new one (a
 *     notice whose block row was rejected moves to the next kept row). Under
 *     split popular the notices ride in regular batches only: a row that
 *     uses an index whose notice is still in the regular build goes to the
 *     regular stream even when flagged popular, and a popular build holding
 *     rows of the old value is emitted first. Under ordering event_time the
 *     same holds: a notice waits among the pending rows just before the row
 *     it precedes, and rows that use the index after it are released after
 *     every pending row that used it before (they may leave later than
 *     their event time alone would put them; no row waits past its
 *     max_delay_ms deadline for it).
 *   - re-announced notices (cfg.notice_restart_next): notices numbered
 *     below cfg.notice_floor or in cfg.notice_acked were acknowledged
 *     before this start and are dropped; the other restored ones wait in a
 *     backlog and go out spread over batches, lowest numbers first, at most
 *     batch.reannounce_max per batch at row 0, but always before the first
 *     row that uses their index. The numbers acknowledged since are kept
 *     (pr_batcher_notice_acks), so a start that stops again, with any part
 *     of the backlog acknowledged, saves exactly what the next may skip.
 *   - popular_min_rows (split popular): a popular build with fewer rows when
 *     its deadline passes (or at a flush) is merged, in arrival order, into
 *     the regular build, which is emitted then: no tiny popular batches.
 *   - hot-set version (pr_batcher_hot_version): every batch carries the
 *     latest version its rows were judged against (pr_batch.hot_version).
 *
 * Offsets: for every partition the batcher knows which offsets are still in
 * flight (buffered, or emitted but not acknowledged by every sink).
 * pr_batcher_safe_offsets() reports, per partition, the offset+1 value that is
 * safe to hand to rd_kafka_offsets_store(): the lowest offset still in flight,
 * or highest seen + 1 when nothing is. Rows the engine rejected and records
 * rejected before the engine (pr_batcher_note_done) count as done at once, so
 * they never hold commits back.
 *
 * Batch memory: a pr_batch is reference counted. The batcher keeps one
 * reference until pr_batcher_ack(seq); the emit callback borrows the batch
 * and takes its own reference (pr_batch_ref) to keep it (pr_sinkset does).
 * Tensors are column-major with stride `rows` (column c of dense starts at
 * dense + c*rows), little-endian, ready for .npy (fortran_order) and for the
 * TrainingBatch `bytes` fields.
 *
 * Threads: a pr_batcher is used by one thread (the pipeline thread) except
 * pr_batcher_get_stats(), which any thread may call. pr_batch_ref/unref are
 * atomic; a batch's content is read-only after emission.
 *
 * Errors: 0 or a negative PR_E* code (common/include/pr_error.h).
 */
#ifndef PR_BATCHER_H
#define PR_BATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_cfgmap.h"
#include "pr_clock.h"
#include "pr_engine.h"
#include "pr_error.h"
#include "pr_hist.h"

/* batch.ordering; config names in pr_batch_ordering_names. */
typedef enum pr_batch_ordering {
    PR_BATCH_ORDER_PARTITION = 0,  /* "partition": offset order within a partition */
    PR_BATCH_ORDER_EVENT_TIME = 1, /* "event_time": partitions merged by watermark */
} pr_batch_ordering;

/* batch.late_policy: rows older than the watermark - allowed_lateness_ms.
 * Config names in pr_batch_late_policy_names. */
typedef enum pr_batch_late_policy {
    PR_BATCH_LATE_EMIT = 0,        /* "emit": put into the next batch, counted */
    PR_BATCH_LATE_DROP_TO_DLQ = 1, /* "drop_to_dlq": counted and handed to on_late; offset done */
} pr_batch_late_policy;

/* batch.split; config names in pr_batch_split_names. */
typedef enum pr_batch_split {
    PR_BATCH_SPLIT_NONE = 0,    /* "none": one stream */
    PR_BATCH_SPLIT_POPULAR = 1, /* "popular": popular rows in batches of their own */
} pr_batch_split;

/* ---------------------------------------------------------------- settings (batch_cfg.c) */

/* The `batch` section of a pipeline. Its keys, ranges, defaults and docs are
 * pr_batch_cfgmap (size 4096, max_delay_ms 100, ordering partition,
 * allowed_lateness_ms 1000, late_policy emit, split none); pr_cfgmap_set_defaults(
 * &pr_batch_cfgmap, &cfg) gives exactly those. */
typedef struct pr_batch_cfg {
    uint32_t size;        /* rows per batch, >= 1 */
    int64_t max_delay_ms; /* >= 0; 0 = a partial batch goes at the next poll */
    pr_batch_ordering ordering;
    int64_t allowed_lateness_ms;      /* >= 0; event_time only */
    pr_batch_late_policy late_policy; /* event_time only */
    pr_batch_split split;             /* popular: two streams (see the top of this file) */
    uint32_t popular_min_rows;        /* split popular: a popular build with fewer rows at
                                         its deadline (or a flush) joins the regular stream
                                         instead; 0 = off; <= size */
    uint32_t reannounce_max;          /* restart: most restored notices a batch carries at
                                         row 0 (besides those a row needs first); 0 =
                                         PR_BATCH_REANNOUNCE_MAX */
} pr_batch_cfg;

extern const pr_cfgmap pr_batch_cfgmap;
/* NULL-terminated config names, indexed by the enum values. */
extern const char *const pr_batch_ordering_names[];
extern const char *const pr_batch_late_policy_names[];
extern const char *const pr_batch_split_names[];

/* Why a batch was emitted (stats; also in pr_batch.reason). */
typedef enum pr_batch_reason {
    PR_BATCH_FULL = 0,
    PR_BATCH_DEADLINE = 1,
    PR_BATCH_FLUSH = 2,
    PR_BATCH__REASONS
} pr_batch_reason;

/* ---------------------------------------------------------------- batches */

/* Rows of one partition in a batch. Under partition ordering the rows are
 * exactly the kept offsets in [first_offset, last_offset]; under event_time
 * ordering first/last are the min/max offset of the partition's rows.
 * `partition` is the row's partition KEY as ingest writes it:
 * (topic_index << 16) | kafka_partition (PR_PART_KEY in pr_engine.h);
 * the TrainingBatch encoding splits it into topic name + partition. */
typedef struct pr_batch_range {
    int32_t partition;    /* partition key */
    int64_t first_offset; /* inclusive */
    int64_t last_offset;  /* inclusive */
    uint32_t rows;
} pr_batch_range;

/* Longest TrainingBatch.replica kept (longer names are cut). */
#define PR_REPLICA_MAX 256

typedef struct pr_batch {
    char pipeline[PR_NAME_MAX];
    char **topics; /* topic names by topic index (copy of cfg.topics) */
    uint32_t n_topics;
    uint64_t seq;   /* 1, 2, 3, ... within the epoch */
    uint64_t epoch; /* restart epoch (pr_batcher_cfg.epoch); 0 = none */
    char
        replica[PR_REPLICA_MAX]; /* the replica that built it (pr_batcher_cfg.replica); "" = none */
    uint32_t rows;
    uint16_t n_dense;
    uint16_t n_sparse;
    uint8_t sparse_width; /* 4 = int32, 8 = int64 */
    uint8_t reason;       /* pr_batch_reason */
    uint8_t popular;      /* 1: a popular batch (batch.split popular): every row's sparse
                             indices were in the hot sets when it was batched */
    uint64_t hot_version; /* hot-set version the rows were judged against (the latest
                             of its rows; pr_batcher_hot_version); 0 = none */

    /* Tensors, column-major with stride `rows`; one 64-byte aligned block each. */
    int32_t *labels; /* [rows] */
    float *dense;    /* [n_dense][rows] */
    void *sparse;    /* [n_sparse][rows] int32_t or int64_t */

    pr_batch_range *ranges; /* sorted by partition */
    uint32_t n_ranges;
    int64_t min_event_time_ms;
    int64_t max_event_time_ms;
    int64_t emit_time_ms;   /* wall clock at emission */
    int64_t emit_mono_ns;   /* monotonic clock at emission (for emit -> ack) */
    int64_t oldest_mono_ns; /* arrival of the row that waited longest */
    uint64_t *vocab_sizes;  /* [n_sparse], from the caller at emission */
    /* Recycled-index notices (TrainingBatch.recycled): `row` is a row of this
     * batch (see the top of this file); owned, freed with the batch. */
    pr_recycled *recycled;
    uint32_t n_recycled;

    /* Declared-schema (jagged) batches (`jagged` = 1; pr_batch_new_jagged):
     * labels, dense and sparse above are NULL, n_sparse = n_feat (so
     * vocab_sizes and recycled[].col index the features) and sparse_width 8.
     * The tensors are those of TrainingBatch fields 22-30: */
    uint8_t jagged;
    uint16_t n_labels;
    float *label_mat;  /* [rows][n_labels] row-major */
    float *dense_mat;  /* [rows][n_dense] row-major */
    int32_t *lengths;  /* [n_sparse][rows] key-major: values of feature f in row r */
    int64_t *values;   /* key-major: feature 0's values (rows in order), then feature 1 .. */
    uint64_t n_values; /* sum of lengths */
    /* Weighted features (TrainingBatch fields 31-32): weights float32 [n_values],
     * weight k of value k, 1 on an unweighted feature's values; weighted
     * [n_sparse] 1 = the feature carries weights. Both NULL when none does. */
    float *weights;
    uint8_t *weighted;
    char (*feature_keys)[PR_NAME_MAX]; /* [n_sparse] */
    /* [n_sparse] each feature's vocabulary table (its own name, or the
     * `table:` it shares: TrainingBatch field 33); NULL = none shared */
    char (*feature_tables)[PR_NAME_MAX];
    char (*label_names)[PR_NAME_MAX]; /* [n_labels]; NULL = not sent */
    char (*dense_names)[PR_NAME_MAX]; /* [n_dense]; NULL = not sent */

    /* Encoded piperec.v1.TrainingBatch, set once by pr_batch_encode(). */
    uint8_t *pb;
    size_t pb_len;

    size_t bytes; /* tensor bytes, for in-flight accounting */

    /* Private to the batcher. */
    int refcnt;
    void *priv_rows; /* per-row offset-tracker handles */
    /* The emitting service's queue of batches to send (service/worker.c:
     * the worker emits, the pipeline thread sends); NULL elsewhere. */
    struct pr_batch *send_next;
    struct pr__tpool *tpool;  /* the batcher's pool its tensor block returns to, or NULL */
    struct pr__tpool *pbpool; /* ... and its encoding's (held from allocation), or NULL */
    bool pb_pooled;           /* pb came from pbpool */
} pr_batch;

/* Take / drop a reference; the last unref frees the batch. */
pr_batch *pr_batch_ref(pr_batch *b);
void pr_batch_unref(pr_batch *b);

/* Tensor sizes in bytes (the Criteo tensors; 0 for a jagged batch). */
static inline size_t pr_batch_labels_bytes(const pr_batch *b)
{
    return b->jagged ? 0 : (size_t)b->rows * 4;
}
static inline size_t pr_batch_dense_bytes(const pr_batch *b)
{
    return b->jagged ? 0 : (size_t)b->rows * b->n_dense * 4;
}
static inline size_t pr_batch_sparse_bytes(const pr_batch *b)
{
    return b->jagged ? 0 : (size_t)b->rows * b->n_sparse * b->sparse_width;
}
/* A jagged batch's tensor sizes in bytes. */
static inline size_t pr_batch_label_mat_bytes(const pr_batch *b)
{
    return (size_t)b->rows * b->n_labels * 4;
}
static inline size_t pr_batch_dense_mat_bytes(const pr_batch *b)
{
    return b->jagged ? (size_t)b->rows * b->n_dense * 4 : 0;
}
static inline size_t pr_batch_lengths_bytes(const pr_batch *b)
{
    return b->jagged ? (size_t)b->rows * b->n_sparse * 4 : 0;
}
static inline size_t pr_batch_values_bytes(const pr_batch *b)
{
    return (size_t)b->n_values * 8;
}
static inline size_t pr_batch_weights_bytes(const pr_batch *b)
{
    return b->weights ? (size_t)b->n_values * 4 : 0;
}

/* Build a standalone batch (tests, tools, decoders): allocates tensors for
 * `rows` rows, zeroed, refcount 1, seq 0, no ranges. NULL on ENOMEM. */
pr_batch *pr_batch_new(const char *pipeline, uint32_t rows, uint16_t n_dense, uint16_t n_sparse,
                       uint8_t sparse_width);

/* Build a standalone jagged batch: label_mat, dense_mat and lengths for
 * `rows` rows, zeroed; values for `n_values` values, zeroed; feature_keys
 * zeroed (names to fill in); label_names / dense_names NULL. NULL on ENOMEM. */
pr_batch *pr_batch_new_jagged(const char *pipeline, uint32_t rows, uint16_t n_labels,
                              uint16_t n_dense, uint16_t n_feat, uint64_t n_values);

/* ---------------------------------------------------------------- protobuf (batch_pb.c) */

/* Encode `b` as a piperec.v1.TrainingBatch into b->pb (once; later calls
 * return 0 at once). Call on the thread that owns the batch before handing it
 * to other threads (pr_sinkset_send does). */
int pr_batch_encode(pr_batch *b);

/* Size of the encoding and encoding into a caller buffer of that size. */
size_t pr_batch_pb_size(const pr_batch *b);
size_t pr_batch_pb_write(const pr_batch *b, uint8_t *out);

/* A decoded TrainingBatch that points into the encoded buffer (zero copy):
 * tensors are byte pointers (possibly unaligned: memcpy, or np.frombuffer on
 * the bytes); ranges and vocab sizes are decoded into owned arrays. Valid
 * while the buffer lives; free the arrays with pr_batch_view_fini. */
typedef struct pr_batch_view_range {
    const char *topic;
    size_t topic_len;
    int32_t partition;
    int64_t first_offset;
    int64_t last_offset;
    uint32_t rows;
} pr_batch_view_range;

/* A string inside the decoded buffer (not NUL-terminated). */
typedef struct pr_batch_view_str {
    const char *s;
    size_t len;
} pr_batch_view_str;

typedef struct pr_batch_view {
    const char *pipeline;
    size_t pipeline_len;
    uint64_t seq;
    uint64_t epoch;      /* TrainingBatch.epoch; 0 when the server sent none */
    const char *replica; /* TrainingBatch.replica (not NUL-terminated); "" when none */
    size_t replica_len;
    bool popular;         /* TrainingBatch.popular; false when the server sent none */
    uint64_t hot_version; /* TrainingBatch.hot_set_version; 0 when the server sent none */
    uint32_t rows;
    uint32_t n_dense;
    uint32_t n_sparse;
    uint32_t sparse_width;
    const uint8_t *labels;
    size_t labels_len;
    const uint8_t *dense;
    size_t dense_len;
    const uint8_t *sparse;
    size_t sparse_len;
    int64_t min_event_time_ms;
    int64_t max_event_time_ms;
    int64_t emit_time_ms;
    pr_batch_view_range *ranges;
    uint32_t n_ranges;
    uint64_t *vocab_sizes;
    uint32_t n_vocab_sizes;
    pr_recycled *recycled; /* TrainingBatch.recycled, decoded (owned); NULL when none */
    uint32_t n_recycled;
    /* Jagged batches (TrainingBatch.jagged; fields 22-30): tensors as bytes
     * (unaligned), names as (pointer, length) pairs into the buffer (owned
     * arrays). n_values = values_len / 8 = sum of the lengths. */
    bool jagged;
    uint32_t n_labels;
    const uint8_t *values;
    size_t values_len;
    const uint8_t *lengths;
    size_t lengths_len;
    const uint8_t *label_mat;
    size_t label_mat_len;
    const uint8_t *dense_mat;
    size_t dense_mat_len;
    pr_batch_view_str *feature_keys; /* [n_feature_keys] */
    uint32_t n_feature_keys;
    pr_batch_view_str *label_names;
    uint32_t n_label_names;
    pr_batch_view_str *dense_names;
    uint32_t n_dense_names;
    const uint8_t *weights; /* field 31: float32 [n_values]; NULL = none */
    size_t weights_len;
    pr_batch_view_str *weighted_keys; /* field 32 */
    uint32_t n_weighted_keys;
    pr_batch_view_str *feature_tables; /* field 33: [n_feature_keys], or none */
    uint32_t n_feature_tables;
} pr_batch_view;

/* Index of `name` among a view's feature_keys, or -1. */
int pr_batch_view_key_index(const pr_batch_view *v, const pr_batch_view_str *name);

/* Decode and check shapes (tensor lengths must match rows x columns x width).
 * On failure returns PR_EBADREC with a reason and leaves nothing to free. */
int pr_batch_decode(const uint8_t *buf, size_t len, pr_batch_view *v, char *errstr,
                    size_t errstr_size);
void pr_batch_view_fini(pr_batch_view *v);

/* A pr_batch (owning copies) from a view, e.g. to feed a files sink. */
pr_batch *pr_batch_from_view(const pr_batch_view *v);

/* ---------------------------------------------------------------- batcher */

typedef struct pr_batcher pr_batcher;

/* A batch is ready. `b` is borrowed (the batcher keeps a reference until
 * pr_batcher_ack); take pr_batch_ref to keep it beyond the call. Set the
 * batch's vocab_sizes before this is called: see vocab_size below. */
typedef void (*pr_batch_emit_cb)(void *opaque, pr_batch *b);

/* A late row under PR_BATCH_LATE_DROP_TO_DLQ, handed back so the service
 * dead-letters it: row `row` of `in`/`out`. Its offset already counts as done. */
typedef void (*pr_batch_late_cb)(void *opaque, const pr_block *in, const pr_out *out, uint32_t row);

/* Vocabulary size of sparse column `col` at emission (pr_engine_vocab_size). */
typedef uint64_t (*pr_batch_vocab_cb)(void *opaque, uint32_t col);

/* A declared schema's batch shape (issue 20): the batcher reads the rows'
 * pr_out.side (labels, dense, every sparse/list feature's lengths and values)
 * and emits jagged batches (pr_batch.jagged). The names are copied by
 * pr_batcher_new. vocab_sizes[f] of a batch is vocab_size(vocab_col[f]) for a
 * feature with a vocabulary, else sizes[f] (the embedding rows its last
 * operator can produce: hash / modulus N, bucketize, hour_of_day ...; 0 when
 * not bounded). Notices (pr_out.recycled after pr_feature_finish) have
 * col = feature index and row = block row. */
typedef struct pr_batch_schema {
    uint16_t n_labels, n_dense, n_feat;
    const char *const *label_names;    /* [n_labels]; NULL = not sent */
    const char *const *dense_names;    /* [n_dense]; NULL = not sent */
    const char *const *feature_names;  /* [n_feat]: the KeyedJaggedTensor keys */
    const int16_t *vocab_col;          /* [n_feat]: engine sparse column, -1 = none */
    const uint64_t *sizes;             /* [n_feat]; NULL = all 0 */
    char (*dense_buf)[PR_NAME_MAX];    /* pr_batch_schema_from_features: the dense columns'
                                        * names dense_names points at (owned) */
    const uint8_t *weighted;           /* [n_feat] 1 = carries weights (`weights:`); NULL = none
                                        * (pr_batch_schema_from_features: owned) */
    const char *const *feature_tables; /* [n_feat] each feature's vocabulary table; NULL =
                                        * none shared (pr_batch_schema_from_features: owned) */
} pr_batch_schema;

/* The batch shape of a declared feature schema (batch_jagged.c): names point
 * into `fs` (which must outlive `out` until pr_batcher_new copied them; the
 * dense columns' names, a vector's NAME[0].., are out's own),
 * vocab_col numbers the features with a vocab step in schema order (the
 * engine's columns, pr_feature_engine_spec), sizes from each chain's last
 * operator. Free with pr_batch_schema_fini. 0 or PR_ENOMEM. */
int pr_batch_schema_from_features(const pr_feature_schema *fs, pr_batch_schema *out);
void pr_batch_schema_fini(pr_batch_schema *s);

/* A standalone jagged batch built from blocks' rows by the code that
 * builds the batcher's own (batch_jagged.c): the same feature keys, names,
 * tables, lengths, values, weights (1 on an unweighted feature's values)
 * and vocab sizes, without partitions, offsets or timing (`piperec serve`'s
 * raw answer). One build at a time per pr_jagged_build. */
typedef struct pr_jagged_build pr_jagged_build;
int pr_jagged_build_new(const pr_batch_schema *s, pr_jagged_build **out); /* 0 or PR_ENOMEM */
void pr_jagged_build_free(pr_jagged_build *b);                            /* NULL ok */
/* Start a batch (one begun before is dropped); it grows as rows come. */
int pr_jagged_build_begin(pr_jagged_build *b, const char *pipeline);
/* Rows idx[0..k) (increasing) of a block's output, after pr_feature_finish,
 * appended. PR_EINVAL for a side the schema does not fit (or no build
 * begun), PR_ENOMEM. */
int pr_jagged_build_add(pr_jagged_build *b, const pr_out *out, const uint32_t *idx, uint32_t k);
/* The batch (the caller's reference), its vocab sizes as the batcher sets
 * them at emission (cb for a feature with a vocabulary); NULL on ENOMEM. */
pr_batch *pr_jagged_build_end(pr_jagged_build *b, pr_batch_vocab_cb cb, void *opaque);

typedef struct pr_batcher_cfg {
    const char *pipeline;
    const char *const *topics; /* topic names by topic index (partition key >> 16) */
    size_t n_topics;           /* 0: ranges carry "" as topic */
    uint16_t n_dense;
    uint16_t n_sparse;
    uint8_t sparse_width;         /* 4 or 8 (pr_engine_sparse_width) */
    pr_batch_cfg batch;           /* size, deadline, ordering (see pr_batch_cfg) */
    const pr_clock *clock;        /* NULL = pr_clock_real() */
    pr_batch_emit_cb on_emit;     /* required */
    pr_batch_late_cb on_late;     /* drop_to_dlq; NULL = only counted */
    pr_batch_vocab_cb vocab_size; /* NULL = vocab sizes 0 */
    void *opaque;                 /* passed to the callbacks */
    uint64_t epoch;               /* stamped on every batch; 0 = none (see pr_batch) */
    const char *replica;          /* stamped on every batch (copied); NULL/"" = none */
    /* Restart re-announcement of recycled-index notices (0 = none): notices
     * numbered below notice_restart_next were handed out before this start
     * (pr_engine_vocab_recycled_total + 1 after the vocabulary restore);
     * those below notice_floor were acknowledged then (the previous run's
     * pr_batcher_notice_floor, saved with pr_batcher_notice_floor_save),
     * and so were those in notice_acked (n_notice_acked ranges above
     * notice_floor, pr_notice_acks.r of the same file; copied). */
    uint64_t notice_restart_next;
    uint64_t notice_floor;
    const struct pr_notice_range *notice_acked;
    uint32_t n_notice_acked;
    /* Declared schema (NULL = the Criteo layout): jagged batches, see
     * pr_batch_schema. n_dense / n_sparse / sparse_width above are then the
     * engine's (0 / its vocab columns / its width) and are not checked;
     * batch.split popular is refused (no hot sets for jagged rows yet). */
    const pr_batch_schema *schema;
} pr_batcher_cfg;

/* Default of batch.reannounce_max: most re-announced notices a batch
 * carries at row 0 (besides those forced in front of the first row using
 * their index). */
#define PR_BATCH_REANNOUNCE_MAX 1024u
/* The bound a batcher applies (cfg.batch.reannounce_max, 0 = the default). */
uint32_t pr_batcher_reannounce_max(const pr_batcher *b);

int pr_batcher_new(const pr_batcher_cfg *cfg, pr_batcher **out, char *errstr, size_t errstr_size);
/* Frees the batcher; batches still referenced elsewhere stay valid. */
void pr_batcher_free(pr_batcher *b);

/* Add the kept rows of an engine output (rows with their bit in
 * out->rejected are skipped, their offsets recorded as done). `in` must have
 * row metadata (partition/offset/event_time_ms). Full batches are emitted
 * during the call. */
int pr_batcher_add(pr_batcher *b, const pr_block *in, const pr_out *out);

/* The same, with per-row flags: bit r of `popular` (pr_bitmap_words(out->rows)
 * words; NULL = none set) marks row r popular. Under split popular those rows
 * go to the popular stream; under split none the flags are ignored. */
int pr_batcher_add_split(pr_batcher *b, const pr_block *in, const pr_out *out,
                         const uint64_t *popular);

/* The hot-set version that rows added from now on are judged against
 * (batch.split popular; service: pr_hot_sets_version). Non-decreasing. */
void pr_batcher_hot_version(pr_batcher *b, uint64_t version);

/* A record rejected before the engine (decode error, sent to the DLQ): its
 * offset is done and must not hold commits back. */
void pr_batcher_note_done(pr_batcher *b, int32_t partition, int64_t offset);

/* The consumer handed over every message of `partition` below `next`
 * (pr_consumer_consumed_next): offsets below it that brought no row (empty
 * messages) are done, so an empty tail does not hold the commit back until
 * more data arrives. Rows still in flight keep holding it as before; not
 * counted as rejects. Creates the partition's entry when it has none. */
void pr_batcher_note_consumed(pr_batcher *b, int32_t partition, int64_t next);

/* Declare an assigned partition before any row arrives: under event_time it
 * then holds the watermark (up to max_delay_ms) until it has data. */
void pr_batcher_assign(pr_batcher *b, int32_t partition);

/* Emit what is due: rows whose max_delay_ms deadline passed. Returns the
 * milliseconds until the next deadline (0 = due now, -1 = nothing buffered),
 * a good timeout for the next consumer poll. */
int64_t pr_batcher_poll(pr_batcher *b);

/* Emit everything buffered (shutdown), ignoring the watermark. */
void pr_batcher_flush(pr_batcher *b);

/* Every sink acknowledged batch `seq`: release its offsets and memory.
 * Acks may come in any order. Unknown or repeated seq: PR_EINVAL. */
int pr_batcher_ack(pr_batcher *b, uint64_t seq);

/* Calls cb(partition, safe_offset) for every tracked partition: safe_offset
 * is the offset+1 value to store (lowest in-flight offset, or highest seen+1). */
typedef void (*pr_batcher_offset_cb)(void *opaque, int32_t partition, int64_t safe_offset);
void pr_batcher_safe_offsets(pr_batcher *b, pr_batcher_offset_cb cb, void *opaque);
/* One partition (key); -1 when the partition is not tracked. */
int64_t pr_batcher_safe_offset(pr_batcher *b, int32_t partition);

/* The partition was revoked: drop its buffered (not yet emitted) rows and
 * forget it. *safe_offset (may be NULL) gets the value to store and commit
 * for it before the revoke completes: the lowest offset that was still in
 * flight (dropped or unacked rows are re-read by the next owner), highest
 * seen+1, or -1 when the partition was never seen. Rows already emitted are
 * not re-emitted; their later acks are ignored for this partition. */
int pr_batcher_revoke(pr_batcher *b, int32_t partition, int64_t *safe_offset);

/* ---------------------------------------------------------------- stats */

typedef struct pr_batcher_stats {
    uint64_t batches_emitted;
    uint64_t batches_by_reason[PR_BATCH__REASONS];
    uint64_t batches_acked;
    uint64_t rows_in;             /* kept rows added */
    uint64_t rows_out;            /* rows emitted in batches */
    uint64_t rows_rejected;       /* engine rejects + note_done, recorded as done */
    uint64_t rows_late;           /* late rows (both policies) */
    uint64_t rows_late_dropped;   /* late rows sent to on_late */
    uint64_t rows_dropped_revoke; /* buffered rows dropped by revoke */
    uint64_t batches_popular;     /* emitted popular batches (in batches_emitted) */
    uint64_t rows_out_popular;    /* rows emitted in popular batches (in rows_out) */
    uint64_t recycled_out;        /* recycled-index notices emitted in batches */
    uint64_t recycled_skipped;    /* restored notices dropped: acknowledged before the start */
    uint64_t rows_demoted;        /* split popular: flagged rows sent in regular batches
                                     (notice order, popular_min_rows) */
    /* gauges */
    uint64_t buffered_rows;
    uint64_t buffered_bytes;
    uint64_t unacked_batches;
    uint64_t unacked_bytes;
    uint64_t inflight_bytes;    /* buffered + unacked */
    uint64_t last_seq;          /* last emitted sequence */
    uint64_t popular_share_ppm; /* rows_out_popular / rows_out, in millionths (0 when none) */
    int64_t watermark_ms;       /* event_time ordering; INT64_MIN when none */
    /* histograms (seconds / ratio) */
    pr_hist_snapshot fill_ratio;      /* rows / batch_size per batch */
    pr_hist_snapshot event_to_emit_s; /* per batch: emit_time - min_event_time */
    pr_hist_snapshot wait_s;          /* per batch: oldest row's wait in the batcher */
    pr_hist_snapshot emit_to_ack_s;   /* per batch: emit -> all sinks acked */
} pr_batcher_stats;

/* Snapshot (thread-safe). */
void pr_batcher_get_stats(pr_batcher *b, pr_batcher_stats *st);

/* Phase profile (PIPEREC_WORKER_PROF=1, else all zero): CPU nanoseconds of
 * the calling threads in the column copies into batches, the emission's
 * bookkeeping (less the callback) and on_emit (encoding, sink offers).
 * Cumulative; the worker takes deltas around its own calls. The thread that
 * calls pr_batcher_add* / poll / flush only. */
enum {
    PR_BATCHER_PROF_COPY,
    PR_BATCHER_PROF_EMIT,
    PR_BATCHER_PROF_CALLBACK,
    PR_BATCHER_PROF__COUNT
};
void pr_batcher_prof(const pr_batcher *b, uint64_t ns[PR_BATCHER_PROF__COUNT]);

/* In-flight bytes (buffered + emitted-unacked), for backpressure; pipeline
 * thread only, cheap. */
uint64_t pr_batcher_inflight_bytes(const pr_batcher *b);
uint64_t pr_batcher_unacked_batches(const pr_batcher *b);
/* The lowest number of a recycled-index notice the batcher still holds (in a
 * batch being built, or emitted and not acknowledged, or restored and not
 * sent yet), or UINT64_MAX when it holds none: every notice below it was
 * acknowledged with its batch. For pr_engine_vocab_notices_delivered. */
uint64_t pr_batcher_notice_floor(const pr_batcher *b);

/* The lowest notice number the engine may still hold for its next block,
 * given pr_engine_vocab_recycled_total and pr_engine_vocab_notices_pending:
 * a store cycle saves min(pr_batcher_notice_floor, this). The engine's
 * pending list holds the newest notices (numbered up to recycled_total),
 * but after a restart, until the first block, also the restored ones
 * (numbered below cfg.notice_restart_next, which the batcher's own floor
 * already covers): they do not pull it down, so a restart that stops
 * before its first block keeps the floor it started with. */
uint64_t pr_batcher_notice_top(const pr_batcher *b, uint64_t recycled_total,
                               uint32_t engine_pending);

/* Recycled-index notices known acknowledged: every number below `floor`,
 * and the numbers of the ranges above it. A restored backlog goes out partly
 * before the notices below it (the ones its first rows need, and batches
 * acknowledged out of order), so one number alone cannot say which were
 * acknowledged; the ranges can (issue 19: "a restart re-announces only
 * unacknowledged notices"). */
typedef struct pr_notice_range {
    uint64_t lo, hi; /* inclusive */
} pr_notice_range;

typedef struct pr_notice_acks {
    uint64_t floor;
    const pr_notice_range *r; /* increasing, disjoint and not adjacent, all above floor */
    uint32_t n;
    pr_notice_range *own; /* what _load allocated (freed by pr_notice_acks_fini) */
} pr_notice_acks;

/* Most ranges kept (memory and file): beyond it the highest are forgotten,
 * so their notices would go out once more after a restart (never fewer).
 * The ranges are the acknowledged notices above an unacknowledged one; the
 * backlog goes out in number order, so there are about as many as notices
 * rows took ahead of it, or batches acknowledged out of order. */
#define PR_NOTICE_ACKS_MAX 65536u

/* What a store cycle saves (service/pipeline.c): floor = min(this
 * batcher's pr_batcher_notice_floor, top) with top from
 * pr_batcher_notice_top, and the numbers acknowledged above it (below top).
 * out->r points into the batcher, valid until its next call; out->own is
 * NULL. Pipeline thread. */
void pr_batcher_notice_acks(pr_batcher *b, uint64_t top, pr_notice_acks *out);

/* The notice floor file across restarts (notice_floor.c): the floor on the
 * first line, then one `lo-hi` line per range (a file without ranges is the
 * one-number file of earlier releases, which still loads; their readers see
 * the floor of a newer file and only re-announce more). Written with a
 * temporary file and a rename (no fsync: a stale file knows fewer
 * acknowledged notices, which only re-announces more). _load gives floor 0
 * and no ranges when the file does not exist; PR_EBADREC naming the file,
 * the line and what to do when it is not such a file; call
 * pr_notice_acks_fini after it, failed or not. */
int pr_batcher_notice_floor_load(const char *path, pr_notice_acks *acks, char *errstr,
                                 size_t errstr_size);
int pr_batcher_notice_floor_save(const char *path, const pr_notice_acks *acks, char *errstr,
                                 size_t errstr_size);
void pr_notice_acks_fini(pr_notice_acks *acks);
/* A digest of floor and ranges: a store cycle writes the file only when it
 * changed. */
uint64_t pr_notice_acks_digest(const pr_notice_acks *acks);

#endif
