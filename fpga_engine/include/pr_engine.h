/*
 * pr_engine.h — the preprocessing engine's contract.
 *
 * A pipeline spec (usually parsed from YAML by config/include/pr_config.h) is compiled
 * into an operator dataflow:
 *
 *     dense : [Neg2Zero] -> [Logarithm]                    double -> float32
 *     sparse: [Hex2Int] -> [Modulus] -> [VocabGen+VocabMap] hex/u64 -> int32|int64
 *
 * and then fed columnar row blocks (pr_block) that come out as columnar output
 * tensors (pr_out). Semantics are those of shared/DESIGN.md; the two vocabulary
 * profiles are PR_VOCAB_DLRM (missing = key 0, indices from 0) and
 * PR_VOCAB_DEFAULT (0 = missing, 1 = out-of-vocabulary, first appearances from 2).
 *
 * Layout: every column is contiguous ("column-major", feature-major). Input
 * column c of a block with capacity `cap` starts at element c*cap; output
 * tensors are [n_cols][rows] with stride `cap`. The .npy writer stores them
 * with fortran_order=True, so numpy sees the usual [N, n_cols] arrays.
 *
 * State: the engine holds and executes the vocabulary tables (lookup-or-
 * insert, eviction, recycled-index notices); it never writes a file. Making
 * them durable or sharing them is vocab/'s (pr_vocab.h), through the
 * primitives at the end of this header. Blocks must be processed in stream
 * order; a value first seen in block k keeps its index in every later block.
 * Results never depend on the thread count: each column is processed in row
 * order by exactly one worker per block.
 *
 * Threads: a pr_engine is not thread-safe; one driver thread calls it. It runs
 * its own worker threads inside pr_engine_process().
 *
 * Errors: 0 or a negative PR_E* code (common/include/pr_error.h); creation and
 * processing failures also write a readable reason into errstr.
 */
#ifndef PR_ENGINE_H
#define PR_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pr_cfgmap.h"
#include "pr_error.h"

#define PR_MAX_DENSE 256 /* dense columns of the Criteo layout (the engine's own) */
/* Dense columns of a declared schema, its vector features' dims counted
 * (their values run in the decoder, never in the engine's dense columns). */
#define PR_MAX_DENSE_COLS 4096
#define PR_MAX_SPARSE     256
#define PR_MAX_OPS        8
#define PR_HEX_SLOT       16 /* bytes per hex value in a block: up to 16 digits */
#define PR_NAME_MAX       64

/* ---------------------------------------------------------------- operators */

typedef enum pr_op {
    PR_OP_NEG2ZERO = 0,
    PR_OP_LOG1P,
    PR_OP_HEX2INT,
    PR_OP_MODULUS,
    PR_OP_VOCAB, /* VocabGen + VocabMap, one operator */
    PR_OP__COUNT
} pr_op;

/* Config name of an operator ("neg2zero", "log1p", "hex2int", "modulus",
 * "vocab"); pr_op_from_name returns -1 for an unknown name. */
const char *pr_op_name(pr_op op);
int pr_op_from_name(const char *name);

typedef enum pr_vocab_profile {
    PR_VOCAB_DLRM = 0,
    PR_VOCAB_DEFAULT = 1,
} pr_vocab_profile;

const char *pr_vocab_profile_name(pr_vocab_profile p);
int pr_vocab_profile_from_name(const char *name); /* -1 when unknown */

/* How min_count > 1 is applied. */
typedef enum pr_count_mode {
    PR_COUNT_STREAMING = 0, /* one pass: OOV until seen min_count times, then next index */
    PR_COUNT_TWO_PASS = 1,  /* offline: pr_engine_count() over all data, then process */
} pr_count_mode;

/* Bounded vocabularies (per column): what makes room when a column is at
 * capacity and a new value is admitted. With anything but NONE the evicted
 * value's index is recycled at once for the new value (the table never holds
 * more than `capacity` indices) and the engine reports the recycled index in
 * pr_out.recycled, so that a trainer resets that embedding row before using
 * it again. Every decision depends only on the data order: the clock is the
 * column's count of looked-up values ("records"), or for ttl with ttl_s the
 * newest event time the column has looked up (pr_block.event_time_ms), never
 * wall time, and each column is processed in row order by one worker, so
 * results do not depend on the thread count. cpu backend only (PR_ENOTSUP
 * from the others). */
typedef enum pr_vocab_eviction {
    PR_EVICT_NONE = 0, /* full table: OOV (default) or PR_EFULL (dlrm), as always */
    PR_EVICT_LRU = 1,  /* the least recently used value */
    PR_EVICT_LFU = 2,  /* the least frequently used value; counts halve every
                        * decay_records lookups of the column (0 = never) */
    PR_EVICT_TTL = 3,  /* the least recently used value, only once it has not been
                        * seen for ttl_records lookups (or ttl_s seconds of event
                        * time); a full table of younger values maps new ones to
                        * OOV (needs profile default) */
    PR_EVICT__COUNT
} pr_vocab_eviction;

/* Config names ("none", "lru", "lfu", "ttl"), NULL-terminated, by enum value. */
extern const char *const pr_vocab_eviction_names[];

/* Index reserved by the `default` profile. */
#define PR_INDEX_MISSING 0
#define PR_INDEX_OOV     1

/* ---------------------------------------------------------------- spec */

typedef struct pr_sparse_col_spec {
    char name[PR_NAME_MAX];     /* "C1".. by default */
    uint64_t modulus;           /* used when the pipeline has the modulus op; must be > 0 */
    uint32_t min_count;         /* >= 1; 1 = every value gets an index at first sight */
    uint64_t capacity;          /* max indices including reserved ones; 0 = automatic:
                                 * modulus (+2 under default) if bounded, else INT32_MAX */
    pr_vocab_eviction eviction; /* PR_EVICT_NONE (default); others need a capacity */
    uint64_t ttl_records;       /* PR_EVICT_TTL: idle lookups before a value may go (> 0) */
    uint64_t ttl_s;             /* PR_EVICT_TTL instead of ttl_records (exactly one is set):
                                 * a value may go once the column's event clock (the newest
                                 * event_time_ms it looked up, so late rows never move it
                                 * back) is ttl_s seconds past the clock at its last lookup.
                                 * Every processed row needs event_time_ms > 0. */
    uint64_t decay_records;     /* PR_EVICT_LFU: lookups between halvings; 0 = no decay */
    uint64_t input_fp;          /* a declared feature's: pr_feature_vocab_input_fp (its paths,
                                 * default and operators before vocab: what its keys mean);
                                 * 0 for the Criteo layout (hex2int/modulus are the spec's) */
} pr_sparse_col_spec;

typedef struct pr_pipeline_spec {
    char name[PR_NAME_MAX];
    bool has_label;
    uint16_t n_dense;
    uint16_t n_sparse;
    uint8_t n_dense_ops;
    uint8_t dense_ops[PR_MAX_OPS]; /* subsequence of neg2zero, log1p */
    uint8_t n_sparse_ops;
    uint8_t sparse_ops[PR_MAX_OPS]; /* subsequence of hex2int, modulus, vocab */
    pr_vocab_profile profile;
    pr_count_mode count_mode;
    uint32_t n_features; /* a declared schema's features (pr_feature_engine_spec sets it; the
                          * engine's feature health counts them, pr_engine_missing); 0 for
                          * the Criteo layout. Not part of the fingerprint. */
    pr_sparse_col_spec sparse[PR_MAX_SPARSE];
} pr_pipeline_spec;

/* Fill a spec with the Criteo defaults: label, 13 dense, 26 sparse named
 * C1..C26, dense [neg2zero, log1p], sparse [hex2int, modulus, vocab],
 * modulus 2^64-1 is not allowed so the default modulus is 524288 (Piper P-III),
 * profile dlrm, min_count 1, capacity automatic. */
void pr_pipeline_spec_default(pr_pipeline_spec *spec);

/* Check a spec; on failure names the field ("sparse_ops: vocab before modulus"). */
int pr_pipeline_spec_validate(const pr_pipeline_spec *spec, char *errstr, size_t errstr_size);

bool pr_spec_has_op(const pr_pipeline_spec *spec, pr_op op);
/* Does some column of a spec with the vocab operator evict (eviction other
 * than none), so that the engine recycles indices? */
bool pr_spec_has_eviction(const pr_pipeline_spec *spec);
/* Most indices column `col` can hand out, reserved ones included: its
 * capacity, or when 0 (automatic) the modulus (+2 under default) with the
 * modulus operator, else INT32_MAX. */
uint64_t pr_spec_col_capacity(const pr_pipeline_spec *spec, uint32_t col);

/* ---------------------------------------------------------------- blocks */

typedef enum pr_sparse_enc {
    PR_SPARSE_HEX = 0, /* column holds PR_HEX_SLOT-byte slots: digits right-aligned,
                        * left-padded with '0' (so "a1" is "00000000000000a1") */
    PR_SPARSE_U64 = 1, /* column holds uint64 values (Hex2Int is a pass-through) */
} pr_sparse_enc;

/* Bitmaps: words of 64 bits, bit r of column c at words[c*pr_bitmap_words(cap) + r/64]. */
static inline size_t pr_bitmap_words(uint32_t cap)
{
    return ((size_t)cap + 63) / 64;
}
static inline bool pr_bit_test(const uint64_t *w, size_t i)
{
    return (w[i >> 6] >> (i & 63)) & 1u;
}
static inline void pr_bit_set(uint64_t *w, size_t i)
{
    w[i >> 6] |= (uint64_t)1 << (i & 63);
}
static inline void pr_bit_clear(uint64_t *w, size_t i)
{
    w[i >> 6] &= ~((uint64_t)1 << (i & 63));
}
/* Set bits of w. Written out (SWAR): the x86-64 baseline has no POPCNT, and
 * __builtin_popcountll there is a call into libgcc per word. */
static inline unsigned pr_popcount64(uint64_t w)
{
    w -= (w >> 1) & 0x5555555555555555ULL;
    w = (w & 0x3333333333333333ULL) + ((w >> 2) & 0x3333333333333333ULL);
    w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (unsigned)((w * 0x0101010101010101ULL) >> 56);
}
/* Bit `from` into bit `to` (a row moved down within a block). */
static inline void pr_bit_move(uint64_t *w, size_t from, size_t to)
{
    if (pr_bit_test(w, from))
        pr_bit_set(w, to);
    else
        pr_bit_clear(w, to);
}

/* Partition key of a row (pr_block.partition): which Kafka topic (its index
 * in the pipeline's topic list) and partition the row came from. Written by
 * ingest, read by the batcher and the sinks. */
#define PR_PART_KEY(topic_idx, partition)                                                          \
    ((int32_t)(((uint32_t)(topic_idx) << 16) | (uint32_t)(partition)))
#define PR_PART_KEY_TOPIC(key)     ((int)((uint32_t)(key) >> 16))
#define PR_PART_KEY_PARTITION(key) ((int32_t)((uint32_t)(key)&0xffffu))

/* Side tables of a declared schema's block or output (issue 20; NULL for the
 * Criteo layout). Labels and dense values are float32 row-major; every sparse
 * or list feature f (schema order, index f among them) has lengths[f][r], the
 * number of values row r has, and values[f], those values row-major (their
 * count n_values[f] is the sum of the lengths).
 *   In a pr_block (filled by the decoder): lengths for EVERY feature; values
 *   only for a feature without vocab (vocab_col[f] < 0): its final int64
 *   values. A feature with vocab has its keys in engine sparse column
 *   vocab_col[f] instead (PR_SPARSE_U64, col_rows[c] keys, row-major, the same
 *   count as the sum of its lengths).
 *   In a pr_out (filled by pr_feature_finish): lengths and values for every
 *   feature; a vocab feature's values are its indices (after any operators
 *   that follow vocab).
 * A single-valued feature always has length 1 (a missing value is key 0 under
 * dlrm, PR_INDEX_MISSING under default; the engine's missing bitmap marks it);
 * an absent list has length 0. */
typedef struct pr_fside {
    uint16_t n_labels, n_dense, n_feat; /* n_feat: sparse + list features, schema order */
    uint32_t cap;                       /* row capacity */
    float *labels;                      /* [cap][n_labels] row-major */
    float *dense;                       /* [cap][n_dense] row-major */
    int32_t *lengths;                   /* [n_feat][cap]: values of feature f in row r */
    int16_t *vocab_col;                 /* [n_feat]: engine sparse column of a vocab feature,
                                         * -1 none */
    bool shared; /* some column holds several features' keys (`table:`): row r's run of
                  * column c is its features' row-r keys in feature order (pr_fside_col_len) */
    /* Feature health (in a pr_block; pr_feature_side_new sizes it): bit r
     * of bitmap i (at word i * pr_bitmap_words(cap)) is set when row r's
     * event lacked schema feature i (absent, null or an empty list at its
     * path, a cross's at any of its paths; before its default). Decoders set
     * them, a block's row moves carry them (parallel decode's merge, row
     * drops; pr_fside_copy_rows, for outputs, does not), the engine counts
     * them (pr_engine_missing). NULL: not tracked. */
    uint32_t n_schema;
    uint64_t *absent;                /* n_schema bitmaps */
    int64_t **values;                /* [n_feat]: row-major values (sum of lengths) */
    uint32_t *n_values, *values_cap; /* [n_feat] */
    /* Weighted features (`weights:`): weights[f] float32, one per element in
     * the order of the feature's values (so its count is the sum of the
     * lengths, in a block as in an output, vocab feature or not); NULL for an
     * unweighted feature (every weight 1). n_weights, weights_cap as above. */
    float **weights;                   /* [n_feat] */
    uint32_t *n_weights, *weights_cap; /* [n_feat] */
} pr_fside;

/* Allocate side tables for `cap` rows (values of each feature start with room
 * for cap values and grow with pr_fside_reserve); vocab_col all -1. NULL on
 * allocation failure. pr_fside_reset empties it (n_values = 0, lengths 0);
 * pr_fside_free frees it (NULL is fine). */
pr_fside *pr_fside_new(uint16_t n_labels, uint16_t n_dense, uint16_t n_feat, uint32_t cap);
/* The keys row r has in vocab column c: the lengths of the features whose
 * vocab_col is c (one feature unless s->shared). */
uint32_t pr_fside_col_len(const pr_fside *s, int c, uint32_t r);
void pr_fside_free(pr_fside *s);
void pr_fside_reset(pr_fside *s);
/* Make room for `more` values of feature f past n_values[f]: 0 or
 * PR_ENOMEM (weights: pr_fside_reserve_weights). */
int pr_fside_reserve(pr_fside *s, uint16_t f, uint32_t more);
/* Make feature f weighted (weights[f] allocated, room for cap weights):
 * 0, or PR_ENOMEM. Idempotent. */
int pr_fside_weigh(pr_fside *s, uint16_t f);
/* Room for `more` weights of feature f past n_weights[f]: 0 or PR_ENOMEM
 * (PR_EINVAL for an unweighted feature). */
int pr_fside_reserve_weights(pr_fside *s, uint16_t f, uint32_t more);
/* Does any feature of s carry weights? */
bool pr_fside_weighted(const pr_fside *s);
/* Append rows [s0, s0 + n) of src as rows [d0, d0 + n) of dst (same shape,
 * the same features weighted): labels, dense, lengths and weights copied;
 * each feature's values of those rows
 * appended after dst->n_values[f] (so dst's rows before d0 must hold exactly
 * dst->n_values[f] values, as when rows are appended in order). src_off, when
 * not NULL, is [n_feat] value offsets of row s0 in src (saves summing the
 * lengths of the rows before it; pr_fside_copy_rows advances it past the
 * copied rows, so a caller walking src in order passes the same array again).
 * PR_EINVAL for another shape or rows past a capacity, PR_ENOMEM. */
int pr_fside_copy_rows(pr_fside *dst, uint32_t d0, const pr_fside *src, uint32_t s0, uint32_t n,
                       uint32_t *src_off);
/* Lengths of feature f (pointer to [cap]). */
static inline int32_t *pr_fside_lengths(pr_fside *s, uint16_t f)
{
    return s->lengths + (size_t)f * s->cap;
}

/* A columnar input row block. Decoders fill it; the engine only reads it. */
typedef struct pr_block {
    uint32_t rows; /* rows filled */
    uint32_t cap;  /* capacity of every row column (multiple of 64) */
    uint16_t n_dense;
    uint16_t n_sparse;
    /* Jagged sparse columns (declared schemas, issue 20). scap is the element
     * capacity (stride) of every sparse column: sparse column c starts at
     * element c*scap of sparse_hex / sparse_u64, its missing bitmap at word
     * c*pr_bitmap_words(scap). col_rows[c] is the number of elements column c
     * holds (row-major over the rows). For the Criteo layout scap == cap and
     * col_rows is NULL: every column holds `rows` elements. */
    uint32_t scap;
    uint32_t *col_rows;       /* [n_sparse] or NULL */
    pr_fside *side;           /* owned by the block; NULL for the Criteo layout */
    int32_t *labels;          /* [cap] */
    double *dense;            /* [n_dense][cap] */
    uint64_t *dense_missing;  /* n_dense bitmaps; set bit = missing (value treated as 0) */
    uint8_t *sparse_enc;      /* [n_sparse] pr_sparse_enc, per column for this block */
    char *sparse_hex;         /* [n_sparse][cap][PR_HEX_SLOT] */
    uint64_t *sparse_u64;     /* [n_sparse][cap] */
    uint64_t *sparse_missing; /* n_sparse bitmaps; set bit = missing (empty field) */
    /* Row metadata; allocated when the block is created with_meta. Offline mode
     * keeps the 1-based input line number in `offset` and has no event time
     * (0). The engine reads event_time_ms only for eviction ttl with ttl_s. */
    int32_t *partition;     /* [cap] */
    int64_t *offset;        /* [cap] */
    int64_t *event_time_ms; /* [cap] ms since the epoch; <= 0 = none */
} pr_block;

/* Allocate a block (cap is rounded up to a multiple of 64; all columns 64-byte
 * aligned). Returns NULL on allocation failure. Free with pr_block_free. */
pr_block *pr_block_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, bool with_meta);
/* A block with jagged sparse columns: each holds up to `scap` elements (>= cap,
 * rounded up to a multiple of 64); col_rows allocated (all 0); side NULL (the
 * caller attaches one, which the block then owns: pr_feature_block_new does
 * both from a schema). */
pr_block *pr_block_new_jagged(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                              bool with_meta);
void pr_block_free(pr_block *b);
/* Empty the block for reuse: rows = 0, bitmaps cleared, encodings reset to HEX
 * (to U64 for a block with side tables), col_rows 0, side reset. */
void pr_block_reset(pr_block *b);
/* Does one more row fit, needing need[c] more elements in sparse column c
 * (need NULL: 1 each)? Rows below cap and col_rows[c] + need[c] <= scap. */
bool pr_block_fits(const pr_block *b, const uint32_t *need);
/* Elements held by sparse column c. */
static inline uint32_t pr_block_col_rows(const pr_block *b, uint32_t c)
{
    return b->col_rows ? b->col_rows[c] : b->rows;
}

static inline char *pr_block_hex(pr_block *b, uint32_t col, uint32_t row)
{
    return b->sparse_hex + ((size_t)col * b->scap + row) * PR_HEX_SLOT;
}

/* Store `len` (<= 16) hex characters as slot (col,row): right-aligned,
 * zero-padded. len == 0 marks the value missing. Characters are not checked
 * here; Hex2Int rejects non-hex digits. */
void pr_block_put_hex(pr_block *b, uint32_t col, uint32_t row, const char *s, size_t len);

/* Reasons a row can be rejected by the engine. */
typedef enum pr_reject_reason {
    PR_REJECT_NONE = 0,
    PR_REJECT_BAD_HEX, /* non-hex character in a sparse field */
    PR_REJECT__ENGINE_COUNT
} pr_reject_reason;

/* A recycled index (bounded vocabularies, pr_vocab_eviction): from block row
 * `row` on, `index` of sparse column `col` means a new value; rows before it
 * (and earlier blocks) used it for the evicted one. `number` counts the
 * pipeline's notices from 1, in (row, column) order, and survives restarts:
 * a notice re-announced after a restart (journal replay) keeps its number, so
 * a consumer applies each number once. A shared vocabulary that evicts
 * recycles in pr_engine_vocab_apply: those notices come at row 0 of the next
 * block, in apply order (see "shared vocabulary"). */
typedef struct pr_recycled {
    uint32_t col;
    uint32_t row;
    int64_t index;
    uint64_t number;
} pr_recycled;

/* Engine output for one block: columnar tensors, stride = cap. Rows the engine
 * rejected have their bit set in `rejected`, a reason and the column that
 * failed; their tensor values are 0 and they did not touch any vocabulary. */
typedef struct pr_out {
    uint32_t rows;
    uint32_t cap;
    /* As in pr_block: sparse column c has col_rows[c] indices (NULL: rows) at
     * stride scap (== cap for the Criteo layout), in the block's element
     * order; notices' `row` is then the element position in the column until
     * pr_feature_finish re-expresses them. side: filled by pr_feature_finish
     * (allocated on first use, owned by the pr_out, freed by pr_out_free). */
    uint32_t scap;
    uint32_t *col_rows;
    pr_fside *side;
    uint16_t n_dense;
    uint16_t n_sparse;
    uint8_t sparse_width; /* 4 (int32) or 8 (int64), fixed per engine */
    uint32_t n_rejected;
    int32_t *labels;        /* [cap] (copied from the input) */
    float *dense;           /* [n_dense][cap] */
    void *sparse;           /* [n_sparse][cap] of int32_t or int64_t */
    uint64_t *rejected;     /* bitmap over rows */
    uint8_t *reject_reason; /* [cap] pr_reject_reason */
    uint16_t *reject_col;   /* [cap] sparse column index that failed */
    /* Recycled indices of this block, in (row, col) order (pr_recycled);
     * pr_engine_process empties and refills the list (owned by the pr_out,
     * grown as needed, freed by pr_out_free). Always empty without eviction. */
    pr_recycled *recycled;
    uint32_t n_recycled;
    uint32_t recycled_cap;
} pr_out;

pr_out *pr_out_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint8_t sparse_width);
/* An output for jagged blocks: sparse columns of `scap` elements (as
 * pr_block_new_jagged), col_rows allocated. */
pr_out *pr_out_new_jagged(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                          uint8_t sparse_width);
void pr_out_free(pr_out *o);

static inline int32_t *pr_out_sparse32(pr_out *o, uint32_t col)
{
    return (int32_t *)o->sparse + (size_t)col * o->scap;
}
static inline int64_t *pr_out_sparse64(pr_out *o, uint32_t col)
{
    return (int64_t *)o->sparse + (size_t)col * o->scap;
}
/* Index of (col,element) widened to int64 whatever the width. */
static inline int64_t pr_out_index(const pr_out *o, uint32_t col, uint32_t row)
{
    size_t i = (size_t)col * o->scap + row;
    return o->sparse_width == 8 ? ((const int64_t *)o->sparse)[i] : ((const int32_t *)o->sparse)[i];
}

/* ---------------------------------------------------------------- engine */

typedef struct pr_engine pr_engine;

/* The `engine` section of the config. Keys, ranges, defaults and docs are
 * pr_engine_cfgmap (engine_cfg.c), which the YAML loader applies and
 * docs/configuration.md is generated from. pr_engine_new treats a NULL
 * backend or 0 threads as the table default (cpu, 2 threads). */
typedef struct pr_engine_opts {
    const char *backend; /* "cpu" (default), "hls-sim", "xrt", "auto" */
    int threads;         /* worker threads for the cpu backend, 1..64; default 2 */
    const char *xclbin;  /* xrt: path of the device binary */
    int device;          /* xrt: device index; default 0 */
    bool overlap;        /* streaming (`run`): decode the next block while the engine and
                          * batcher work on this one (a second thread per pipeline); not
                          * used by the engine itself. Default true from the table. */
    bool huge_tables;    /* cpu: the direct vocabulary maps (1 MiB and larger) on transparent
                          * huge pages. For batch runs (`piperec process` sets it), which
                          * touch the maps whole at once: page by page, each first write
                          * after a parallel read flushed every CPU's TLB. Streaming keeps
                          * 4 KiB pages: a huge page's first touch zeroes 2 MiB, so a slow
                          * stream's first block paid the whole maps at once (~0.25 s for
                          * 26 maps of 2 MiB on the 2-core test VM). Not a config key. */
} pr_engine_opts;

extern const pr_cfgmap pr_engine_cfgmap;

/* Per-operator accounting, accumulated over the engine's life. */
typedef struct pr_engine_stats {
    uint64_t op_ns[PR_OP__COUNT];     /* wall time summed over workers */
    uint64_t op_values[PR_OP__COUNT]; /* values that went through the operator */
    uint64_t rows_in;
    uint64_t rows_rejected;
    uint64_t blocks;
    uint64_t undecided_oov; /* shared vocabulary with eviction: values mapped to OOV
                             * because the log had not given them an index
                             * (pr_engine_vocab_set_undecided_oov); serving:
                             * values without an index (pr_engine_vocab_serve) */
    /* Feature health per sparse column (rows the engine rejected left out):
     * col_values, the values looked up (present ones: an empty field, a
     * missing single of a declared schema, is not looked up); col_oov, those
     * answered without an index of their own: the OOV index under profile
     * default (below min_count, a full table, in serving or --frozen an unseen
     * value), and under dlrm serving's `unseen` answer and a shared log's
     * undecided values. Missing values per feature: pr_engine_missing. */
    uint64_t col_values[PR_MAX_SPARSE];
    uint64_t col_oov[PR_MAX_SPARSE];
} pr_engine_stats;

/* Compile `spec` (copied) for the chosen backend. On failure returns NULL and
 * writes why into errstr (unknown backend, no device, invalid spec...). */
pr_engine *pr_engine_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts, char *errstr,
                         size_t errstr_size);
void pr_engine_free(pr_engine *eng);

const pr_pipeline_spec *pr_engine_spec(const pr_engine *eng);
const char *pr_engine_backend_name(const pr_engine *eng); /* the backend actually running */
uint8_t pr_engine_sparse_width(const pr_engine *eng);     /* 4 or 8 */

/* Process one block into `out` (allocated with pr_out_new for this engine's
 * widths, cap >= in->rows). Returns 0, or PR_EFULL when a column's vocabulary
 * is full under the dlrm profile (errstr names the column; the engine state is
 * then unchanged for rows after the failing one and the pipeline should stop),
 * PR_EINVAL when a column evicts by ttl_s and a row has no event time
 * (event_time_ms missing or <= 0; nothing is processed), or another PR_E*
 * code. */
int pr_engine_process(pr_engine *eng, const pr_block *in, pr_out *out, char *errstr,
                      size_t errstr_size);

/* A block in two halves, for a driver that runs many blocks at once (the
 * offline driver): pr_engine_process_par does everything that does not
 * depend on the blocks before it (dense operators, Modulus, the lookup of
 * values that already have an index) and may run on any thread, for any
 * number of blocks at a time, concurrently with each other and with one
 * pr_engine_process_seq; pr_engine_process_seq then gives indices to the
 * values the first half did not find (first appearances, in row order per
 * column) and must be called one block at a time, blocks in input order,
 * like pr_engine_process. The two together give exactly what
 * pr_engine_process gives, outputs, vocabularies and errors alike.
 *
 * The split state (`sp`) holds one block's pending values between the
 * halves: one per block in flight, from pr_engine_split_new (NULL when
 * out of memory). Jagged blocks (col_rows) split like the others. Blocks
 * the first half cannot do alone (a backend or spec without it: hex
 * columns, eviction, a shared vocabulary, streaming min_count, hash-table
 * vocabularies unless the split is exclusive, a journal hook) are marked,
 * and pr_engine_process_seq then runs all of pr_engine_process on them; so
 * a driver never needs to ask.
 * pr_engine_process_par returns 0 (problems are reported by the second
 * half). Nothing else may use the engine while halves are in flight. */
typedef struct pr_engine_split pr_engine_split;
pr_engine_split *pr_engine_split_new(const pr_engine *eng);
void pr_engine_split_free(pr_engine_split *sp);
int pr_engine_process_par(const pr_engine *eng, const pr_block *in, pr_out *out,
                          pr_engine_split *sp);
int pr_engine_process_seq(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                          char *errstr, size_t errstr_size);
/* pr_engine_process_seq by column, for a driver that keeps one input order
 * per column (the columns' vocabularies are independent): when the block is
 * not whole (pr_engine_split_whole), pr_engine_process_seq_col for every
 * sparse column, each column's blocks in input order, different columns on
 * any threads at once; then pr_engine_process_seq_end once (one call at a
 * time), which reports the block's error. A whole block takes only
 * pr_engine_process_seq_end (all of pr_engine_process), in input order with
 * no column of a later block started. */
bool pr_engine_split_whole(const pr_engine_split *sp);
/* The driver's promise that no pr_engine_process_seq* call runs while a
 * pr_engine_process_par of this split does (e.g. the halves run in separate
 * phases with a barrier between): the first half may then look up
 * hash-table vocabularies too, which an insert could move under a reader,
 * so only first appearances are left to the second half. Default false. */
void pr_engine_split_set_exclusive(pr_engine_split *sp, bool exclusive);
void pr_engine_process_seq_col(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                               uint32_t col);
int pr_engine_process_seq_end(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                              char *errstr, size_t errstr_size);

/* Two-pass min_count (count_mode == PR_COUNT_TWO_PASS): feed every block once
 * through pr_engine_count(), then call pr_engine_count_done(), then process the
 * same blocks in the same order. Rows rejected by Hex2Int are not counted. */
int pr_engine_count(pr_engine *eng, const pr_block *in);
int pr_engine_count_done(pr_engine *eng);

void pr_engine_get_stats(const pr_engine *eng, pr_engine_stats *st);

/* Feature health: rows (not rejected by the engine) whose event lacked each
 * feature, accumulated over the engine's life. Features are, for the Criteo
 * layout, its dense columns then its sparse ones (a missing bit: an empty
 * field); with spec.n_features (a declared schema), the schema's features in
 * order (pr_fside.absent, the decoder's: absent, null or an empty list,
 * before any default). Writes n counts into out (0 past the engine's
 * count) and returns the engine's count. Same threads as
 * pr_engine_get_stats. */
uint32_t pr_engine_missing(const pr_engine *eng, uint64_t *out, uint32_t n);

/* ---------------------------------------------------------------- vocabulary */

/* Number of indices handed out for a sparse column, reserved ones included
 * (so it is the embedding-table size a trainer needs). 0 when the pipeline has
 * no vocab operator. */
uint64_t pr_engine_vocab_size(const pr_engine *eng, uint32_t col);

/* One vocabulary entry. Entries with index < 0 are values seen fewer than
 * min_count times so far (streaming mode), kept so counting resumes after a
 * restore. */
typedef struct pr_vocab_entry {
    uint64_t value; /* key after Hex2Int and Modulus */
    int64_t index;
    uint64_t count;      /* times seen (0 when the backend does not count); under
                          * eviction lfu the (decayed) use count */
    uint64_t last_use;   /* eviction lru/lfu/ttl: the column's record clock at the
                          * value's last lookup (orders lru, breaks lfu ties); else 0 */
    int64_t last_use_ms; /* eviction ttl with ttl_s: the column's event clock (ms) at
                          * the value's last lookup; else 0 */
} pr_vocab_entry;

/* Read a column's vocabulary: calls `cb` for every entry in increasing index
 * order (assigned entries first, then pending ones). Stops early and returns
 * cb's value when it is non-zero. */
typedef int (*pr_vocab_cb)(const pr_vocab_entry *e, void *opaque);
int pr_engine_vocab_read(const pr_engine *eng, uint32_t col, pr_vocab_cb cb, void *opaque);
/* May pr_engine_vocab_read run for different columns on several threads at
 * once (nothing changing the engine meanwhile)? True for the CPU backend;
 * false for the kernel backends, whose reads share one transfer buffer. */
bool pr_engine_vocab_read_concurrent(const pr_engine *eng);

/* Number of the last recycled-index notice handed out (0 = none yet). */
uint64_t pr_engine_vocab_recycled_total(const pr_engine *eng);

/* The caller knows every notice numbered below `floor` reached its consumer
 * (e.g. its batch was acknowledged). Notices handed out and not yet known
 * delivered are kept in every snapshot and announced again (same numbers,
 * row 0 of the next block) after a restart from it, so a notice is never
 * lost with a batch the crash dropped while the snapshot holds its effect.
 * Without calls the list grows until the engine is freed. */
void pr_engine_vocab_notices_delivered(pr_engine *eng, uint64_t floor);
/* Notices the next pr_engine_process announces at row 0: those restored
 * (snapshot, journal) and those pr_engine_vocab_apply made (shared
 * vocabulary with eviction). */
uint32_t pr_engine_vocab_notices_pending(const pr_engine *eng);

/* ---------------------------------------------------------------- shared vocabulary */

/* A vocabulary decided outside this engine, the same on several engines
 * (vocab/include/pr_vocab.h: replicas agree through a Kafka log). The
 * driver, per block:
 *
 *   1. pr_engine_vocab_misses(): the values the block would have to insert;
 *   2. has them decided elsewhere, then applies every decision in the agreed
 *      order with pr_engine_vocab_apply() (its own and other engines');
 *   3. pr_engine_process(), which in shared mode only looks values up: it
 *      never inserts or counts, so every index comes from step 2.
 *
 * Only the cpu backend supports it (PR_ENOTSUP from the others). Not
 * journaled: the shared log is the journal; snapshots (pr_vocab.h) work as usual.
 *
 * Bounded vocabularies (pr_vocab_eviction) can be shared too, under profile
 * default (whose OOV index can answer a value the log could not keep) and
 * without ttl_s (event time would have to travel in the log): PR_ENOTSUP
 * otherwise, naming the reason. Every change to a bounded column's state
 * then comes from the log, so replicas applying the same log hold the same
 * vocabulary and hand out the same recycled-index notices:
 *
 *   - processing only looks up: a value with an index gets it and its use is
 *     counted per index ("pending usage", saturating at UINT32_MAX) without
 *     touching the eviction statistics or the column's record clock; a value
 *     without one fails the block (PR_ESTATE) even when the table is full,
 *     since the log may evict to make room (OOV while min_count is still
 *     counting it, as usual), unless pr_engine_vocab_set_undecided_oov;
 *   - pr_engine_vocab_misses reports such values even in a full column;
 *   - pr_engine_vocab_apply inserts with eviction (below), and
 *     pr_engine_vocab_touch records uses: the driver drains the pending usage
 *     (pr_engine_vocab_drain_usage) after processing, puts it in the log, and
 *     applies it from there like the proposals;
 *   - a recycle made by pr_engine_vocab_apply is numbered at once, in apply
 *     order (pr_engine_vocab_recycled_total counts it), and announced by the
 *     next pr_engine_process at row 0 of pr_out.recycled: rows before that
 *     call used the evicted value. Snapshots keep such notices until they are
 *     announced (pr_engine_vocab_notices_pending), like restored ones.
 *
 * Pending usage is not in snapshots (it only steers future evictions, and
 * only once it reaches the log). A vocabulary journal cannot be open in
 * shared mode when a column evicts (PR_ESTATE from whichever call comes
 * second). */

/* Switch shared mode on or off (off: processing inserts as usual). In shared
 * mode pr_engine_process fails with PR_ESTATE, naming the column, when a
 * value was never applied (OOV for values below min_count or past a full
 * default-profile table without eviction, as usual). */
int pr_engine_vocab_set_shared(pr_engine *eng, bool shared, char *errstr, size_t errstr_size);

/* While on (default off), shared-mode processing maps a value of a bounded
 * column that has no index to PR_INDEX_OOV instead of failing, and counts it
 * in pr_engine_stats.undecided_oov: for a value that several proposal rounds
 * could not keep in a full table. Columns without eviction are not
 * affected. Errors as pr_engine_vocab_set_shared. */
int pr_engine_vocab_set_undecided_oov(pr_engine *eng, bool on, char *errstr, size_t errstr_size);

/* Serving (`piperec transform`, `piperec serve`): from now on processing
 * only looks up, for good. Every value gets the index a row would get from
 * the vocabulary as loaded; a value without one (unseen, still below
 * min_count, or past a full table) gets PR_INDEX_OOV under profile default
 * and `unseen` under profile dlrm (which has no OOV index), counted in
 * pr_engine_stats.undecided_oov. Nothing in the vocabulary changes: not its
 * indices, counts or eviction statistics. 0 (also for a pipeline without
 * vocab); PR_ENOTSUP for a backend that cannot, PR_EINVAL for unseen < 0
 * or above what the output's indices hold (INT32_MAX at sparse width 4).
 * A serving engine's blocks split into halves (pr_engine_process_par) for
 * every column without eviction, shared and hash-table ones included: its
 * second half only looks up, so several threads may each run a first half
 * while one runs a second (`piperec serve` with threads), as long as
 * nothing changes the vocabulary meanwhile (a vocabulary log's apply). */
int pr_engine_vocab_serve(pr_engine *eng, int64_t unseen, char *errstr, size_t errstr_size);

/* Called for every occurrence (in row order within a column, block chunk by
 * chunk) of a value without an index in a column with room left (or one that
 * evicts, full or not); a non-zero return stops the scan and is returned.
 * Rows Hex2Int rejects, and missing values under profile default, are not
 * reported. */
typedef int (*pr_vocab_miss_cb)(uint32_t col, uint64_t key, void *opaque);
int pr_engine_vocab_misses(pr_engine *eng, const pr_block *in, pr_vocab_miss_cb cb, void *opaque,
                           char *errstr, size_t errstr_size);

/* pr_engine_vocab_misses for one column of keys already through Hex2Int
 * and Modulus, any number of them (a block's column, or the elements of a
 * list feature): cb(col, key) for every occurrence without an index, in
 * order, unless the column is full and does not evict. Missing values are
 * the caller's to leave out. PR_EINVAL (naming the column) for a key not
 * below the column's modulus; PR_ENOTSUP from a backend without it. */
int pr_engine_vocab_misses_keys(pr_engine *eng, uint32_t col, const uint64_t *keys, size_t n,
                                pr_vocab_miss_cb cb, void *opaque, char *errstr,
                                size_t errstr_size);

/* Apply one decision: `count` occurrences (>= 1) of `key` (after Hex2Int and
 * Modulus; below the column's modulus) in column `col`, as streaming
 * processing would count and insert them. *index is the value's own index
 * afterwards, or -1 (below min_count, or no room: OOV). PR_EINVAL for a bad
 * column or key, PR_EFULL when a dlrm column is full (the pipeline must
 * stop, as in processing), PR_ENOMEM.
 * A column that evicts does what processing one occurrence does, with
 * eviction: the record clock advances, a value with an index is touched, a
 * new one takes a free index or, in a full table, the victim's of the
 * column's policy (ttl: OOV, *index -1, while no value is old enough), whose
 * pending usage is dropped; with min_count > 1 up to min(count, min_count)
 * such lookups, stopping once the value has an index (later uses travel as
 * pr_engine_vocab_touch). */
int pr_engine_vocab_apply(pr_engine *eng, uint32_t col, uint64_t key, uint32_t count,
                          int64_t *index, char *errstr, size_t errstr_size);

/* Uses from the log: when `key` has an index in evicting column `col`, one
 * tick of the column's record clock and `count` (>= 1) uses at it, as a
 * processed lookup records one (lru/ttl: most recent now; lfu: its count
 * grows by `count`, saturating). A key without an index (evicted since it
 * was used) changes nothing, clock included. A column that does not evict:
 * nothing, 0. PR_EINVAL for a bad column, key or count; errors as
 * pr_engine_vocab_set_shared. */
int pr_engine_vocab_touch(pr_engine *eng, uint32_t col, uint64_t key, uint32_t count, char *errstr,
                          size_t errstr_size);

/* Report the pending usage of every evicting column (counted by shared-mode
 * processing since the last drain): cb(col, key, count) per index with
 * count > 0, by column then index ascending, `key` being the value now at
 * that index; each is cleared once cb returned 0. A non-zero return stops
 * the drain and is returned (that entry and the later ones stay). 0 when no
 * column evicts. */
typedef int (*pr_vocab_usage_cb)(uint32_t col, uint64_t key, uint32_t count, void *opaque);
int pr_engine_vocab_drain_usage(pr_engine *eng, pr_vocab_usage_cb cb, void *opaque);

/* ---------------------------------------------------------------- primitives for vocab/
 *
 * The engine executes; vocab/ (pr_vocab.h) decides durability and sharing:
 * it writes and reads every vocabulary file (snapshot, journal, text) and
 * talks to the shared log. These calls are what it needs to read a table
 * out and put one back exactly. One driver thread, like everything else. */

/* Fingerprint of everything in the spec that gives indices their meaning
 * (sparse ops, profile, count mode, per-column modulus, min_count, capacity
 * and eviction settings); vocabulary files carry it. */
uint64_t pr_engine_vocab_fingerprint(const pr_engine *eng);

/* Like pr_engine_vocab_read, but only assigned entries with index >=
 * from_index (the backend may still report earlier ones: filter). */
int pr_engine_vocab_read_from(const pr_engine *eng, uint32_t col, int64_t from_index,
                              pr_vocab_cb cb, void *opaque);

/* Replace column `col`'s table with n entries: assigned ones in index order,
 * then pending ones (index < 0), usage statistics included. Returns the
 * backend's PR_E* code (no errstr: the caller names the file). */
int pr_engine_vocab_load_column(pr_engine *eng, uint32_t col, const pr_vocab_entry *e, size_t n);

/* A bounded column's clocks: lookups so far, and the newest event time (ms)
 * looked up (eviction ttl with ttl_s; else 0). Both only grow. {0, 0} and a
 * no-op for columns of an engine that does not evict. */
typedef struct pr_vocab_clock {
    uint64_t records;
    int64_t event_ms;
} pr_vocab_clock;
pr_vocab_clock pr_engine_vocab_clock(const pr_engine *eng, uint32_t col);
void pr_engine_vocab_set_clock(pr_engine *eng, uint32_t col, pr_vocab_clock clock);

/* One index handed out in an evicting column, in row order: fresh (the next
 * index) or recycled (an evicted value's index). */
typedef struct pr_vocab_assignment {
    uint32_t row;
    bool recycled;
    int64_t index;
    uint64_t value;
    uint64_t tick;   /* the column's record clock at the assignment */
    int64_t tick_ms; /* its event clock (eviction ttl with ttl_s; else 0) */
} pr_vocab_assignment;

/* Column `col`'s assignments of the last pr_engine_process, or of the last
 * pr_engine_vocab_apply on it when one came after (valid until the next of
 * either). Empty for a column that does not evict. */
void pr_engine_vocab_block_log(const pr_engine *eng, uint32_t col, const pr_vocab_assignment **log,
                               size_t *n);

/* Notices a snapshot must keep: the pending ones (announced by the next
 * pr_engine_process), then the ones handed out and not known delivered;
 * cb's non-zero return stops the walk and is returned. */
typedef int (*pr_notice_cb)(const pr_recycled *r, void *opaque);
int pr_engine_vocab_notices_each(const pr_engine *eng, pr_notice_cb cb, void *opaque);
uint32_t pr_engine_vocab_notices_held(const pr_engine *eng);
/* Restore notices: empty the pending list, queue one (announced at row 0 of
 * the next block, its number kept; PR_ENOMEM), set the next number (0: keep). */
void pr_engine_vocab_notices_clear(pr_engine *eng);
int pr_engine_vocab_notices_queue(pr_engine *eng, const pr_recycled *r);
void pr_engine_vocab_notices_set_next(pr_engine *eng, uint64_t next);

/* pr_engine_vocab_set_shared(true) is in force. */
bool pr_engine_vocab_is_shared(const pr_engine *eng);

/* The durability hook: pr_engine_process calls hook(eng, opaque) after the
 * block (also after a failed one: indices handed out before the failure may
 * already sit in the output) and before it returns, so a block's new indices
 * are durable before its output is released; the hook reads them with
 * pr_engine_vocab_read_from / pr_engine_vocab_block_log. A non-zero return
 * fails the block with the hook's errstr. One hook at a time: setting one
 * (or NULL) first calls the previous one's release(opaque); pr_engine_free
 * releases the last. vocab/'s journal (pr_vocab_journal_open) is the user;
 * a shared vocabulary that evicts refuses it (PR_ESTATE from
 * pr_engine_vocab_set_shared while a hook is set). */
typedef int (*pr_engine_block_hook)(pr_engine *eng, void *opaque, char *errstr, size_t errstr_size);
void pr_engine_set_block_hook(pr_engine *eng, pr_engine_block_hook hook,
                              void (*release)(void *opaque), void *opaque);
/* The hook's opaque when `hook` is the one set; else NULL. */
void *pr_engine_block_hook_data(const pr_engine *eng, pr_engine_block_hook hook);

/* ---------------------------------------------------------------- backends */

/* Names of the compiled-in backends, NULL-terminated. */
const char *const *pr_engine_backends(void);

/* ================================================================ feature schema (issue 20)
 *
 * A pipeline's features, as declared by the config's `schema:` (or the
 * built-in Criteo preset): each has a name, a kind, a source path into the
 * event and an ordered operator chain. This block is the contract between the
 * config (which parses and validates it), the operator library
 * (feature_ops.c: pure, deterministic column functions, the CPU's
 * implementation of every operator) and placement (which backend runs which
 * operator; `piperec explain`). The streaming engine does not execute it yet:
 * today's execution path is the pr_pipeline_spec above.
 *
 * Values flow through a chain as pr_fval columns; a value's type is one of
 * the PR_FTYPE_* bits. An operator accepts a set of types and produces one
 * (pr_fop_table). The static type of a chain's input follows the kind:
 * dense and label read a number, sparse reads a string or an integer id, a
 * cross starts with the implicit `cross` operator. A chain is valid when every
 * operator accepts some type its input may have; a value of a type the
 * operator does not accept rejects its record at run time. Dense chains end
 * in a number, sparse chains in an integer. */

#define PR_FEAT_PATH_MAX  128  /* a path ("user.id"), NUL included */
#define PR_FEAT_MAX_CROSS 8    /* paths of one cross */
#define PR_FEAT_MAX_OPS   8    /* operators of one feature, the implicit cross included */
#define PR_FOP_MAX_BOUNDS 64   /* bucketize boundaries */
#define PR_FOP_STR_MAX    64   /* a string fill / default value, NUL included */
#define PR_FEAT_MAX_LIST  4096 /* max_len of a list feature */
#define PR_FEAT_MAX_DIM   PR_MAX_DENSE_COLS /* dim of a dense vector feature */

/* Seed of every hash the operators compute (hash, cross): the ASCII bytes
 * "piperec" followed by a zero byte, read as a big-endian 64-bit number. */
#define PR_FOP_HASH_SEED 0x7069706572656300ull

/* Value types (bits, so that a set of possible types is a mask). */
#define PR_FTYPE_NUM 1u /* float64 number */
#define PR_FTYPE_INT 2u /* 64-bit integer: an id, a hash, a bucket, an index */
#define PR_FTYPE_STR 4u /* byte string (UTF-8 as the event has it) */
/* Beside PR_FTYPE_STR in a reader's load-time check only (a fixed Avro
 * writer schema, a Protobuf descriptor): the field holds raw bytes (Avro
 * bytes or fixed, Protobuf bytes), not text that must be UTF-8. */
#define PR_FTYPE_BYTES 16u
/* Beside PR_FTYPE_INT in a Protobuf descriptor's load-time check only: the
 * field is a bool (read as 0 / 1), which a weight may not be. */
#define PR_FTYPE_BOOL 32u
/* Beside PR_FTYPE_STR in a Protobuf descriptor's load-time check only: the
 * field is a google.protobuf.Timestamp, read as its RFC 3339 text. */
#define PR_FTYPE_TIME 64u

typedef enum pr_feature_kind {
    PR_FEAT_LABEL = 0,  /* float32 target; several allowed; numeric operators */
    PR_FEAT_DENSE,      /* float32 feature */
    PR_FEAT_SPARSE,     /* one categorical value per record (string or integer id) */
    PR_FEAT_LIST,       /* zero or more categorical values (multi-hot), max_len kept */
    PR_FEAT_EVENT_TIME, /* the record's event time; at most one; no operators */
    PR_FEAT__COUNT
} pr_feature_kind;

/* "label", "dense", "sparse", "list", "event_time"; NULL-terminated. */
extern const char *const pr_feature_kind_names[];

typedef enum pr_time_unit {
    PR_TIME_S = 0,   /* integer or number of seconds since the epoch */
    PR_TIME_MS,      /* milliseconds */
    PR_TIME_US,      /* microseconds */
    PR_TIME_RFC3339, /* string, e.g. "2024-02-29T23:59:60.5+01:00" */
    PR_TIME__COUNT
} pr_time_unit;

/* "s", "ms", "us", "rfc3339"; NULL-terminated. */
extern const char *const pr_time_unit_names[];

/* How a dense vector (`dim`) is written in the event (`encoding`). */
typedef enum pr_vec_encoding {
    PR_VEC_LIST = 0, /* a list of dim numbers (JSON array, Avro array, repeated field) */
    PR_VEC_F32,      /* dim float32, little-endian, as bytes: Avro bytes or fixed,
                      * Protobuf bytes; in JSON text a base64 string */
    PR_VEC__COUNT
} pr_vec_encoding;

/* "list", "f32"; NULL-terminated. */
extern const char *const pr_vec_encoding_names[];

typedef enum pr_fop {
    PR_FOP_FILL = 0,    /* missing -> value */
    PR_FOP_CLIP,        /* [lo, hi] */
    PR_FOP_NEG2ZERO,    /* x < 0 -> 0 */
    PR_FOP_LOG1P,       /* log(x + 1) */
    PR_FOP_STANDARDIZE, /* (x - mean) / std */
    PR_FOP_BUCKETIZE,   /* 1 + count of boundaries <= x */
    PR_FOP_HASH,        /* XXH64 of the value's bytes mod N */
    PR_FOP_MODULUS,     /* v mod N */
    PR_FOP_HEX2INT,     /* hex string -> integer */
    PR_FOP_CROSS,       /* XXH64 of several values (implicit first op of a cross) */
    PR_FOP_HOUR_OF_DAY, /* 1 + UTC hour (1..24) */
    PR_FOP_DAY_OF_WEEK, /* ISO weekday, Monday 1 .. Sunday 7 (UTC) */
    PR_FOP_VOCAB,       /* the continuous vocabulary: value -> stable index */
    PR_FOP_AT_LEAST,    /* x >= T -> 1, else 0 (a label or a flag from a number) */
    PR_FOP_AGE,         /* seconds from a time to the record's event time */
    PR_FOP__COUNT
} pr_fop;

/* What an operator's argument is. */
typedef enum pr_fop_arg {
    PR_FARG_NONE = 0, /* `neg2zero` */
    PR_FARG_VALUE,    /* `{ fill: 0 }`, `{ fill: "none" }`: a number, integer or string */
    PR_FARG_RANGE,    /* `{ clip: [lo, hi] }`, lo <= hi, numbers */
    PR_FARG_STATS,    /* `{ standardize: { mean: M, std: S } }`, S > 0 */
    PR_FARG_BOUNDS,   /* `{ bucketize: [b1, b2, ...] }`, strictly increasing, finite */
    PR_FARG_COUNT,    /* `{ hash: N }`, integer N >= 1 */
    PR_FARG_UNIT,     /* optional: `hour_of_day` or `{ hour_of_day: ms }` (else event_time.unit) */
    PR_FARG_NUMBER,   /* `{ at_least: 30 }`: a finite number (in a) */
} pr_fop_arg;

/* Backends, as bits (placement). */
#define PR_BACKEND_BIT_CPU     1u
#define PR_BACKEND_BIT_HLS_SIM 2u
#define PR_BACKEND_BIT_XRT     4u
#define PR_BACKEND_BITS_FPGA   (PR_BACKEND_BIT_HLS_SIM | PR_BACKEND_BIT_XRT)

/* One row of the operator table: the single source of its name, argument,
 * types, backends and documentation (docs/configuration.md is generated from
 * it by pr_fop_write_reference). */
typedef struct pr_fop_info {
    const char *name;   /* config name */
    pr_fop_arg arg;     /* argument form */
    bool arg_required;  /* false: bare name allowed (PR_FARG_NONE or UNIT) */
    unsigned accepts;   /* PR_FTYPE_* mask of input types */
    unsigned output;    /* PR_FTYPE_* of the result; 0 = the input's type */
    unsigned backends;  /* PR_BACKEND_BIT_* that can run it (the FPGA ones only
                         * inside their fixed chains, see pr_feature_place) */
    const char *syntax; /* how it is written in `ops:` */
    const char *doc;    /* exact semantics */
} pr_fop_info;

extern const pr_fop_info pr_fop_table[PR_FOP__COUNT];

/* -1 when unknown. */
int pr_fop_from_name(const char *name);

/* One operator of a chain with its argument. */
typedef struct pr_fop_step {
    pr_fop op;
    uint8_t value_type;               /* fill: PR_FTYPE_NUM, _INT or _STR */
    pr_time_unit unit;                /* hour_of_day, day_of_week, age */
    uint16_t n_bounds;                /* bucketize */
    double a, b;                      /* fill (NUM), clip lo/hi, standardize mean/std */
    uint64_t n;                       /* hash buckets, modulus, fill (INT) */
    char str[PR_FOP_STR_MAX];         /* fill (STR) */
    double bounds[PR_FOP_MAX_BOUNDS]; /* bucketize, strictly increasing */
} pr_fop_step;

/* `in: [V, ...]` on a label or a dense number: the value is 1 when the
 * field's value (a list: one of its elements) is one of V, matched as
 * schema.filter matches (a string by its bytes, an integer equal to an
 * integer, true / false or a number of that integral value), else 0; absent,
 * null or an empty list: the feature's `default`, else missing. A string is kept as its
 * pr_fop_hash64 (as a vocabulary keys it), so the set stays small. */
#define PR_FEAT_MAX_IN 64
typedef struct pr_feature_in {
    uint16_t n;                   /* 0: no `in` */
    uint8_t type[PR_FEAT_MAX_IN]; /* PR_FTYPE_INT or PR_FTYPE_STR */
    uint64_t key[PR_FEAT_MAX_IN]; /* INT: the value; STR: pr_fop_hash64 of its bytes */
    char text[160];               /* the values as written, for explain ("..." when cut) */
} pr_feature_in;

typedef struct pr_feature_spec {
    char name[PR_NAME_MAX];
    pr_feature_kind kind;
    uint8_t n_paths;                                 /* 1, or 2.. for a cross */
    char paths[PR_FEAT_MAX_CROSS][PR_FEAT_PATH_MAX]; /* dotted paths into the event */
    uint32_t max_len;         /* PR_FEAT_LIST: values kept, 1..PR_FEAT_MAX_LIST */
    bool keep_last;           /* PR_FEAT_LIST: keep the last max_len values (else the first) */
    uint16_t dim;             /* PR_FEAT_DENSE: 0 a number; 1..PR_FEAT_MAX_DIM a vector of that many
                               * numbers (`dim:`), dim dense columns NAME[0]..NAME[dim-1] */
    pr_vec_encoding encoding; /* a vector's: a list of numbers, or float32 bytes */
    bool has_default;         /* a missing field takes `deflt` (a fill step) */
    pr_fop_step deflt;        /* PR_FOP_FILL with the default value */
    pr_time_unit unit;        /* PR_FEAT_EVENT_TIME */
    bool weight;              /* PR_FEAT_LABEL without a path: schema.downsample's weight */
    /* PR_FEAT_LIST with `weights:` (an id-score list): one float32 weight per
     * element, read at weights_path ("" = an unweighted list) position by
     * position with the ids; an element dropped drops its weight. A missing
     * weight (a hole: an object of a list of objects without the field, or
     * null there; or the whole weights list absent) takes weight_default when
     * has_weight_default, else rejects the record. */
    char weights_path[PR_FEAT_PATH_MAX];
    bool has_weight_default;
    double weight_default; /* as written (finite in float32): the chain's input */
    /* `weights.ops`: numeric operators (pr_fop_weight_op) each kept weight
     * goes through in double, after the default, the result rounded to
     * float32, which must be finite (else the record is rejected,
     * number_out_of_range). Dropped ids' weights never run them. 0: the
     * weight is the number as read. */
    uint8_t n_weight_ops;
    pr_fop_step weight_ops[PR_FEAT_MAX_OPS];
    /* PR_FEAT_LIST with `list: { from: keys }`: the path names a map (a
     * JSON object, an Avro map, a Protobuf map field) whose keys, in the
     * event's order, are the list's values; with `weights: { from: values }`
     * (weights_from_values, weights_path then the same path) each key's
     * value is its weight. */
    bool from_keys;
    bool weights_from_values;
    /* `list: { from: entries }` (from_keys set too): each entry's key and
     * value crossed (pr_fop_cross of the two, as `cross:`) into one integer
     * id, `color=red` not `color`; an entry whose value is null is left out. */
    bool from_entries;
    /* `list: { from: values }` (from_keys set too): each entry's value, in
     * the event's order, is one id (a slot->ad id map: its ad ids), typed as
     * a list's element (a string, an integer); an entry whose value is null
     * is left out. Never weighted: the values are the ids. */
    bool from_values;
    /* `table: OWNER` (a shared vocabulary): the name of the sparse feature
     * whose vocabulary, and so embedding table, this one uses; "" = its own.
     * The owner names none; both have the same operators up to vocab. The
     * engine sees one column per table (named after the owner), its keys
     * row by row, in each row the members' keys in schema order. */
    char table[PR_NAME_MAX];
    pr_feature_in in; /* PR_FEAT_LABEL, PR_FEAT_DENSE (a number): `in:`, n 0 without */
    uint8_t n_ops;
    pr_fop_step ops[PR_FEAT_MAX_OPS];
} pr_feature_spec;

/* schema.filter: which records of a declared schema become rows. A record
 * passes when every condition holds; one that does not is dropped before its
 * features are read (no row, no reject, no vocabulary effect) and counted
 * (pr_ingest.h, PR_DEC_FILTERED). A value matches by type: a string equals
 * the same bytes; an integer (true / false are 1 / 0) equals an integer, a
 * bool or a number of the same value; a list matches when one of its
 * elements does. Absent and null are the same. */
#define PR_FILTER_MAX_CONDS  16
#define PR_FILTER_MAX_VALUES 64

typedef enum pr_filter_op {
    PR_FILTER_IN = 0,  /* the value (a list: an element) is one of values */
    PR_FILTER_NOT_IN,  /* absent, null, or the value (every element) is none of values */
    PR_FILTER_PRESENT, /* the path holds a value that is not null (an empty list too) */
    PR_FILTER_ABSENT,  /* absent or null */
    PR_FILTER__COUNT
} pr_filter_op;

/* "in", "not_in", "present", "absent"; NULL-terminated. */
extern const char *const pr_filter_op_names[];

typedef struct pr_filter_value {
    uint8_t type; /* PR_FTYPE_INT or PR_FTYPE_STR */
    uint8_t len;  /* STR: bytes, < PR_FOP_STR_MAX */
    int64_t i;    /* INT */
    char str[PR_FOP_STR_MAX];
} pr_filter_value;

typedef struct pr_filter_cond {
    char path[PR_FEAT_PATH_MAX];
    pr_filter_op op;
    uint16_t n_values; /* IN, NOT_IN: 1..PR_FILTER_MAX_VALUES */
    pr_filter_value values[PR_FILTER_MAX_VALUES];
} pr_filter_cond;

/* schema.downsample: of the records `where` selects (all without it), keep
 * a `rate` share, decided by a hash of the value at `key` (of the record's
 * bytes when it has none), so that the same event is kept or dropped in
 * every run, thread count and mode; a dropped one is counted
 * (PR_DEC_SAMPLED_OUT). With a weight label, a kept selected row weighs
 * 1 / rate and every other row 1, so that a trainer's weighted loss sees
 * the data as it was before the sampling. */
typedef struct pr_downsample {
    bool enabled;
    bool has_where;
    double rate;                /* (0, 1] */
    uint64_t threshold;         /* keep when the decision hash < threshold; UINT64_MAX: rate 1 */
    pr_filter_cond where;       /* has_where: the records sampled */
    char key[PR_FEAT_PATH_MAX]; /* "" = the record's bytes */
    char weight[PR_NAME_MAX];   /* the weight label's name; "" = none */
} pr_downsample;

/* The decision hash of a downsampled record: the key's id (an integer's
 * value, a string's pr_fop_hash64) through pr_fop_hash64 of its 8
 * little-endian bytes; or pr_fop_hash64 of the record's bytes. */
uint64_t pr_downsample_hash_id(uint64_t id);

/* A pipeline's features. `features` and `filter` are owned by whoever built
 * it (the config frees its own). */
typedef struct pr_feature_schema {
    pr_feature_spec *features;
    uint32_t n_features;
    pr_filter_cond *filter; /* [n_filter], all must hold; NULL when none */
    uint32_t n_filter;
    pr_downsample downsample;
    bool declared;    /* true: the config's `schema:` list; false: the Criteo preset */
    uint32_t cpu_ops; /* bit (1u << op): this operator may run on the cpu when the engine
                       * backend cannot run it (schema.cpu_ops); 0 = no fallback */
    /* A vocabulary evicts by event time (ttl_s): the JSON decoder rejects a
     * record without an event time after the epoch (bad_time), since the
     * engine refuses a block holding such a row. Set by the config. */
    bool time_required;
    /* Let non-finite values through to labels and dense values (the JSON
     * decoder rejects a non-finite float32 otherwise): `process --fit` marks
     * missing values NaN and leaves non-finite ones out of its statistics.
     * Never set by a config. */
    bool nonfinite_ok;
} pr_feature_schema;

/* The paths schema.filter and schema.downsample read, in this order: each
 * filter condition's, then the downsample's where and its key (those it
 * has), into paths; returns how many (at most PR_SELECT_PATHS_MAX). The one
 * list the config checks and the decoders extract. */
#define PR_SELECT_PATHS_MAX (PR_FILTER_MAX_CONDS + 2)
uint32_t pr_feature_select_paths(const pr_feature_schema *fs, const char **paths);

/* The dense columns of a schema (its dense features' pr_feature_dense_cols). */
uint32_t pr_feature_schema_dense_cols(const pr_feature_schema *fs);

/* The names of a schema's dense columns, in column order, into names[0, cap):
 * NAME, or NAME[c] for column c of a vector (the config keeps that under
 * PR_NAME_MAX); returns how many the schema has. */
uint32_t pr_feature_dense_names(const pr_feature_schema *fs, char (*names)[PR_NAME_MAX],
                                uint32_t cap);

/* Check a chain's types and order for the feature's kind. On failure returns
 * PR_EINVAL, *bad_op is the index of the offending step (n_ops when the
 * chain's end is the problem) and errstr says why, naming the operator and
 * the type, e.g. "'log1p' needs a number, but the value here is a string or
 * an integer". */
int pr_feature_check_chain(const pr_feature_spec *f, uint32_t *bad_op, char *errstr,
                           size_t errstr_size);

/* Can `op` be a step of a weighted list's `weights.ops`? A weight's
 * operators take a number and give a number (neg2zero, log1p, clip,
 * standardize); fill is not one (weights.default fills a missing weight). */
bool pr_fop_weight_op(pr_fop op);

/* Check f's weights.ops: 0, or PR_EINVAL with *bad_op the offending step
 * and errstr why ("'bucketize' gives an integer, and a weight is a number
 * (valid: clip, neg2zero, log1p, standardize)"). */
int pr_feature_check_weight_ops(const pr_feature_spec *f, uint32_t *bad_op, char *errstr,
                                size_t errstr_size);

/* "a number or a string": the types of a PR_FTYPE_* mask, for messages. */
void pr_ftype_text(unsigned mask, char *buf, size_t size);

/* Can feature f keep a value when its path gives values of the PR_FTYPE_*
 * mask `types` (a reader's load-time check: a fixed Avro writer schema, a
 * Protobuf descriptor)? A label or dense feature needs a number (integers
 * convert); a sparse or list feature's chain must take one of them at every
 * step. 0 (also for a cross, the event time, or types 0: always null), or
 * PR_EINVAL with errstr "it gives a string, and a dense feature needs a
 * number" / "... and 'log1p' needs a number", the same rules as the JSON
 * decoder's wrong_type. */
int pr_feature_check_input(const pr_feature_spec *f, unsigned types, char *errstr,
                           size_t errstr_size);

/* The PR_FTYPE_* mask of a feature's raw value (before its operators). */
unsigned pr_feature_input_type(const pr_feature_spec *f);

/* Dense vectors (`dim:`): a dense feature with dim >= 1 reads a list of
 * exactly dim numbers at its path (or, with encoding f32, one value of dim
 * float32 bytes), each through the feature's chain, into dim consecutive
 * dense columns named NAME[0]..NAME[dim-1]; a dense feature without dim
 * reads one number into one column named NAME. */

/* The dense columns f takes: dim for a vector, 1 for a dense number, 0 for
 * any other kind. */
static inline uint32_t pr_feature_dense_cols(const pr_feature_spec *f)
{
    return f->kind != PR_FEAT_DENSE ? 0 : f->dim ? f->dim : 1;
}

/* Does f read a list at its path (a list feature, a dense vector written
 * as a list of numbers)? */
static inline bool pr_feature_reads_list(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_LIST ||
           (f->kind == PR_FEAT_DENSE && f->dim && f->encoding == PR_VEC_LIST);
}

/* The path index (beside 0..n_paths-1) that names a weighted list's
 * weights_path in the load-time path checks (Avro, Protobuf). */
#define PR_FEAT_WEIGHTS_PATH 255

/* Is f a list feature with weights (an id-score list)? */
static inline bool pr_feature_weighted(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_LIST && f->weights_path[0] != '\0';
}

/* The vocabulary table f looks its ids up in: the `table:` it names, else
 * its own (its name). */
static inline const char *pr_feature_table_name(const pr_feature_spec *f)
{
    return f->table[0] ? f->table : f->name;
}

/* Is f a dense vector written as float32 bytes (one string value)? */
static inline bool pr_feature_vector_bytes(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_DENSE && f->dim && f->encoding == PR_VEC_F32;
}

/* Placement: which backend runs each operator of `f` when the engine's
 * backend is `backend` ("cpu", "hls-sim", "xrt"; "auto" is placed as xrt, the
 * backend it prefers). The cpu runs everything. An FPGA backend runs what its
 * kernel runs: the dense chain (neg2zero then log1p) of a dense feature and
 * the hex chain (hex2int, modulus, vocab, in that order) of a single-valued
 * sparse feature, each as a prefix of the feature's chain (the kernel reads
 * the raw column); its vocab needs a modulus <= 2^26 right before it (the
 * kernel's vocabularies are direct-indexed tables). Every other operator goes to the cpu only when
 * its bit is in cpu_ops; otherwise PR_ENOTSUP and errstr names the feature, the operator, the
 * backend and why. On success on[i] is the name of the backend running step i ("cpu" or `backend`).
 * A weighted list's weights.ops always run on the cpu (in the decoder): on an FPGA backend each
 * needs its bit in cpu_ops too.
 */
int pr_feature_place(const pr_feature_spec *f, const char *backend, uint32_t cpu_ops,
                     const char **on, char *errstr, size_t errstr_size);

/* The Criteo layout as features, from today's spec: "label" (when has_label),
 * dense dense_names[i] with spec->dense_ops, sparse spec->sparse[i].name with
 * spec->sparse_ops (modulus per column). Paths are the names (the TSV field
 * of that name). `out` holds room for 1 + n_dense + n_sparse features;
 * returns the count. dense_names NULL = I1..In. */
uint32_t pr_feature_criteo_preset(const pr_pipeline_spec *spec,
                                  const char (*dense_names)[PR_NAME_MAX], pr_feature_spec *out);

/* ---------------------------------------------------------------- operator library
 *
 * The CPU implementation of every operator, over columns of values. Pure and
 * deterministic: the result depends only on the inputs (no state, no time, no
 * threads). A row's value is a pr_fval; PR_FVAL_MISSING marks an absent
 * value (operators keep it missing, except fill). Rejections: a value whose
 * type the operator does not accept, or that it cannot read (a bad hex
 * string, an unreadable time), becomes missing and, when `reason` is given
 * and reason[row] is still 0, gets a pr_fop_reject; the functions return the
 * number of rows they rejected. */

typedef enum pr_fval_type {
    PR_FVAL_MISSING = 0,
    PR_FVAL_NUM = PR_FTYPE_NUM,
    PR_FVAL_INT = PR_FTYPE_INT,
    PR_FVAL_STR = PR_FTYPE_STR,
} pr_fval_type;

typedef struct pr_fval {
    uint8_t type; /* pr_fval_type */
    uint32_t len; /* PR_FVAL_STR: bytes */
    union {
        double num;      /* PR_FVAL_NUM */
        uint64_t u;      /* PR_FVAL_INT (an int64 as its two's complement bits) */
        const char *str; /* PR_FVAL_STR: not NUL-terminated; owned by the caller */
    };
} pr_fval;

typedef enum pr_fop_reject {
    PR_FOP_OK = 0,
    PR_FOP_REJECT_TYPE, /* the operator does not take this type */
    PR_FOP_REJECT_HEX,  /* hex2int: not hex, or more than 16 digits */
    PR_FOP_REJECT_TIME, /* hour_of_day / day_of_week / age: not a time, or out of range */
} pr_fop_reject;

/* Apply one step to a column of n values, in place. `vocab` is not a library
 * operator (it is the engine's stateful vocabulary): PR_EINVAL. */
int pr_fop_apply(const pr_fop_step *step, pr_fval *v, size_t n, uint8_t *reason);
/* The same, for values of one record whose own event time is event_us
 * (microseconds since the epoch; PR_FOP_NO_TIME: none, and `age` gives
 * missing). pr_fop_apply is this with PR_FOP_NO_TIME. */
#define PR_FOP_NO_TIME INT64_MIN
int pr_fop_apply_at(const pr_fop_step *step, pr_fval *v, size_t n, uint8_t *reason,
                    int64_t event_us);

/* cross: out[r] = PR_FOP_HASH_SEED-seeded XXH64 over the values of the k
 * columns at row r (byte layout in pr_fop_cross_bytes); missing when any of
 * them is missing. */
int pr_fop_cross(const pr_fval *const *cols, size_t k, size_t n, pr_fval *out, uint8_t *reason);

/* The bytes that hash and cross feed XXH64 (documented in
 * docs/configuration.md): writes up to cap bytes, returns the full length.
 *   pr_fop_value_bytes: NUM 8 bytes little-endian IEEE 754 binary64 (-0.0 as
 *   +0.0, every NaN as 0x7ff8000000000000); INT 8 bytes little-endian; STR its
 *   bytes, no terminator.
 *   pr_fop_cross_bytes: per value in order a tag byte (1 NUM, 2 INT, 3 STR),
 *   for STR a 4-byte little-endian length, then its value bytes. */
size_t pr_fop_value_bytes(const pr_fval *v, uint8_t *buf, size_t cap);
size_t pr_fop_cross_bytes(const pr_fval *vals, size_t k, uint8_t *buf, size_t cap);
uint64_t pr_fop_hash64(const void *p, size_t len); /* XXH64(p, len, PR_FOP_HASH_SEED) */

/* Times: microseconds since 1970-01-01T00:00:00Z (negative before). */
/* RFC 3339 date-time ("YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)"; 't'/'z'
 * and a space for 'T' accepted; second 60 (a leap second) reads as 59.999999;
 * fraction digits past microseconds are truncated). PR_EINVAL when malformed. */
int pr_fop_parse_rfc3339(const char *s, size_t len, int64_t *us);
/* A value in `unit` as microseconds: INT (int64), NUM (floored to a whole
 * microsecond), STR under rfc3339. PR_EINVAL for another type, an
 * unreadable string or a time past +-2^63 us. */
int pr_fop_time_us(const pr_fval *v, pr_time_unit unit, int64_t *us);
int pr_fop_hour_of_day(int64_t us); /* 1..24 = 1 + UTC hour */
int pr_fop_day_of_week(int64_t us); /* 1..7 = ISO weekday (Monday 1), UTC */

/* Write the operator reference (a Markdown table from pr_fop_table: operator,
 * syntax, input, output, backends, semantics). */
void pr_fop_write_reference(FILE *f);

/* ---------------------------------------------------------------- declared schemas: execution
 *
 * How a declared schema runs on the engine (issue 20):
 *   decoder (ingest: pr_json_decoder) -> pr_block with side tables -> the
 *   engine (vocabularies only) -> pr_feature_finish -> pr_out.side.
 * Vocabulary keys: an integer id is its int64 value's bits (exact); a string
 * id is pr_fop_hash64 of its bytes (two distinct strings collide with
 * probability about n^2 / 2^65 for n distinct strings). */

/* Index among the sparse and list features (the side tables' f) of feature
 * i of the schema, or -1 when feature i is not sparse or list. */
int pr_feature_side_index(const pr_feature_schema *schema, uint32_t i);
/* Index of the vocab step in a feature's chain, or -1 when it has none. */
int pr_feature_vocab_step(const pr_feature_spec *f);
/* The schema index of the feature whose vocabulary feature i uses: the
 * feature its `table:` names, else i; -1 when i has no vocab step or names
 * no such feature (the config refuses that). */
int pr_feature_table_owner(const pr_feature_schema *schema, uint32_t i);
/* The engine column of feature i's vocabulary (its table's: one per owner,
 * in the owners' schema order), or -1 without vocab. What a block's and a
 * batch schema's vocab_col hold. */
int pr_feature_vocab_col(const pr_feature_schema *schema, uint32_t i);
/* True when a and b give every value the same vocabulary key: the same
 * operators, with the same arguments, up to and including vocab, and a map
 * read the same way (its entries, or not: a map's keys or values are ids as
 * any list's elements are). */
bool pr_feature_same_keys(const pr_feature_spec *a, const pr_feature_spec *b);

/* One step as the config writes it, in YAML flow form (`log1p`, `{ modulus:
 * 1000 }`, `{ standardize: { mean: 1.5, std: 2 } }`, numbers %.17g, so they
 * read back the same). Returns the length written (truncated to n - 1). */
size_t pr_fop_step_yaml(const pr_fop_step *st, char *out, size_t n);

/* What decides the keys a feature's vocabulary sees, as canonical text: its
 * paths, its default and the operators before its vocab step with their
 * arguments ("paths item.id; default -; ops { modulus: 1000 }"). Not its name,
 * kind or list length, which change no key. Truncated to n - 1 bytes. */
void pr_feature_vocab_input(const pr_feature_spec *f, char *out, size_t n);
/* A nonzero 64-bit fingerprint of the same fields, in a frozen binary
 * encoding (not the text, which may change): two configs whose feature
 * gives the same value a different key differ here. Snapshots and the vocab
 * log keep it per column, so its value for a given feature never changes
 * (tests/engine/test_feature_ops.c pins some). */
uint64_t pr_feature_vocab_input_fp(const pr_feature_spec *f);

/* Embedding rows a feature's last operator can produce (hash N, modulus N:
 * N; bucketize: bounds + 2; hour_of_day 25; day_of_week 8, 0 being
 * missing); 0 when unbounded or when a vocabulary decides. The size a batch
 * (and meta.json) reports for a feature without vocab. */
uint64_t pr_feature_value_range(const pr_feature_spec *f);

/* The operators after a feature's vocab step applied to n indices in place
 * (as pr_feature_finish applies them; a step leaving a value missing gives
 * 0); tmp has room for n values. 0, or the operator library's error. A
 * feature without vocab: nothing to do. */
int pr_feature_after_vocab(const pr_feature_spec *f, int64_t *v, uint32_t n, pr_fval *tmp);

/* The engine spec for a declared schema: name, profile and count_mode from
 * `base` (the config's transform), n_dense 0, no label, sparse_ops [vocab]
 * (U64 columns: no hex2int, no modulus; the schema's own operators ran in the
 * decoder), one sparse column per feature with a vocab step, in schema order,
 * named after the feature, its vocabulary options (min_count, capacity,
 * eviction, ttl_records/ttl_s, decay_records) taken from base's column of the
 * same name when base has one (the config's transform.columns), else the
 * defaults. PR_EINVAL (errstr says why) when the result does not validate,
 * e.g. eviction ttl_s on a list feature (ttl_s reads per-row event time). */
int pr_feature_engine_spec(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                           pr_pipeline_spec *spec, char *errstr, size_t errstr_size);

/* Side tables shaped for a schema (labels, dense, sparse+list features,
 * vocab_col from the schema's vocab features in order). NULL on failure. */
pr_fside *pr_feature_side_new(const pr_feature_schema *schema, uint32_t cap);

/* Sparse element capacity (scap) of a block of `cap` rows for a schema: at
 * least cap and at least the largest max_len of a vocab list feature, so that
 * any one record fits an empty block; lists add room for an average of
 * min(max_len, 8) values per row. */
uint32_t pr_feature_block_scap(const pr_feature_schema *schema, uint32_t cap);

/* A block for a declared schema: one U64 sparse column per vocab feature, no
 * engine dense columns, scap from pr_feature_block_scap, side from
 * pr_feature_side_new. NULL on failure. */
pr_block *pr_feature_block_new(const pr_feature_schema *schema, uint32_t cap, bool with_meta);
/* The matching engine output (sparse_width from pr_engine_sparse_width). */
pr_out *pr_feature_out_new(const pr_feature_schema *schema, uint32_t cap, uint8_t sparse_width);

/* After pr_engine_process(in, out) of a declared schema's block: run the
 * operators that follow vocab (on the indices) and assemble out->side
 * (allocated on first use): labels and dense copied from in->side; for every
 * sparse/list feature its lengths and values (vocab features: the engine's
 * indices in element order; others: in->side's values); and re-express
 * out->recycled with `row` = the block row holding the element and `col` =
 * the feature's side index (order kept: by element, then column, so the
 * list stays in (row, col) order after a stable sort the function does).
 * Rows the engine rejected keep their lengths and 0 values. 0 or a negative
 * PR_E* code with errstr. */
int pr_feature_finish(const pr_feature_schema *schema, const pr_block *in, pr_out *out,
                      char *errstr, size_t errstr_size);

#endif
