/*
 * pr_decode.h — record decoders: bytes in a source format -> rows appended to
 * an engine pr_block. Used by the offline driver (criteo_tsv from a file) and
 * by the Kafka ingest (all formats, one message at a time).
 *
 * A decoder appends zero or more rows. A record it cannot decode is never
 * dropped silently: the decoder calls the reject callback with the reason
 * (a pr_decode_reason) and a short detail, and appends nothing for it.
 * Hex digits are not validated here beyond length (> 16 digits is a reject);
 * the engine's Hex2Int rejects non-hex characters — unless the context asks
 * for fused Hex2Int (pr_decode_ctx.parse_hex): then the decoder parses hex
 * fields to uint64 itself (PR_SPARSE_U64 columns, Hex2Int becomes a
 * pass-through in the engine) and rejects non-hex values as PR_DEC_BAD_HEX,
 * with the detail "<column>: '<value>' is not hex" (the lowest failing
 * column, as the engine would name it). Outputs are identical either way;
 * the engine's hex2int time then shows up in decoding instead.
 */
#ifndef PR_DECODE_H
#define PR_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_engine.h"

typedef enum pr_decode_reason {
    PR_DEC_OK = 0,
    PR_DEC_FIELD_COUNT,  /* wrong number of tab-separated fields */
    PR_DEC_BAD_LABEL,    /* label not an integer */
    PR_DEC_BAD_DENSE,    /* dense field not a number */
    PR_DEC_BAD_HEX,      /* sparse field with a non-hex character */
    PR_DEC_LONG_HEX,     /* sparse field longer than 16 hex digits */
    PR_DEC_BAD_PROTOBUF, /* protobuf payload does not parse */
    PR_DEC_BAD_SHAPE,    /* protobuf event with the wrong number of values */
    PR_DEC__COUNT
} pr_decode_reason;

/* Short snake_case name, used as the Prometheus `reason` label and in
 * rejects.tsv / dead-letter headers ("field_count", "bad_hex", ...). */
const char *pr_decode_reason_name(int reason);

/* Called once per rejected record. `rec`/`len` is the raw record (one TSV line
 * without its newline, or the whole message payload). */
typedef void (*pr_reject_cb)(void *opaque, int reason, const char *detail, const char *rec,
                             size_t len, int64_t recno);

typedef struct pr_decode_ctx {
    const pr_pipeline_spec *spec; /* shape: label, n_dense, n_sparse */
    pr_reject_cb on_reject;
    void *opaque;
    /* Row metadata written into blocks that have it. */
    int32_t partition;
    int64_t offset;                /* Kafka offset, or first line number offline */
    int64_t default_event_time_ms; /* used when the record carries no event time */
    /* Fused Hex2Int: a block this context starts (rows == 0) gets
     * PR_SPARSE_U64 sparse columns and hex values are parsed while decoding.
     * Only valid when the pipeline's sparse ops start with hex2int (see
     * pr_decode_want_parse_hex); drivers set it, benchmarks of the engine's
     * own Hex2Int leave it false. A column keeps the encoding it has. */
    bool parse_hex;
} pr_decode_ctx;

/* True when fused Hex2Int gives the same results as the engine's: the
 * pipeline's sparse ops start with hex2int. */
static inline bool pr_decode_want_parse_hex(const pr_pipeline_spec *spec)
{
    return spec->n_sparse_ops > 0 && spec->sparse_ops[0] == PR_OP_HEX2INT;
}

/* Decode one Criteo TSV line (no trailing newline; a trailing '\r' is
 * tolerated). Appends one row, or rejects. Returns 1 when a row was appended,
 * 0 when rejected, PR_EFULL when the block has no room (nothing consumed). */
int pr_decode_criteo_line(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                          int64_t recno);

/* Decode whole lines of buf[0, len) into `b` until the buffer or the block
 * runs out (faster than calling pr_decode_criteo_line per line: one memchr
 * per line end). Lines end with '\n' ("\r\n" too); a final line without a
 * newline is decoded only when `eof` is true, otherwise it is left for the
 * next call. Line i (from 0) gets recno first_recno + i; rejects go to
 * ctx->on_reject as usual. Returns the bytes consumed (whole lines only) and
 * stores the lines consumed (rows appended + rejects) in *lines_out. */
size_t pr_decode_criteo_lines(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                              bool eof, int64_t first_recno, int64_t *lines_out);

/* ---- Kafka message decoders (ingest/proto_decode.c, owner: ingest) ----
 * Message decoders take a record cursor: they decode records from *next_rec
 * on and return the rows appended (>= 0) once the whole message is consumed
 * (appended or rejected), or PR_EFULL when the block filled first (then
 * *next_rec is where to resume, in a fresh block). Records are lines for TSV
 * and events for EventBatch; the reject callback's `recno` is the record
 * index inside the message, `rec` the record's own bytes (a rejected event of
 * a batch is re-encoded as a single Event). */

/* Bump allocator for protobuf-c unpacking: one reset per message instead of
 * one malloc per field. Not thread-safe; one per decoding thread. */
typedef struct pr_arena pr_arena;
pr_arena *pr_arena_new(size_t initial_bytes);
void pr_arena_free(pr_arena *a);

/* One or more '\n'-separated Criteo TSV lines (empty lines are skipped). */
int pr_decode_criteo_message(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                             uint32_t *next_rec);
/* One piperec.v1.Event. Sparse values as sparse_hex go to PR_SPARSE_HEX slots,
 * as sparse_id to PR_SPARSE_U64 columns; a block column keeps the encoding of
 * its first row (ids are then written as 16-digit hex, hex strings parsed). */
int pr_decode_protobuf_event(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                             uint32_t *next_rec, pr_arena *arena);
/* One piperec.v1.EventBatch. */
int pr_decode_protobuf_event_batch(const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                                   size_t len, uint32_t *next_rec, pr_arena *arena);
/* The two above are hand-written wire-format decoders (no allocation; the
 * arena is unused). The *_ref forms do the same through protobuf-c's
 * unpack (with the arena) and are the reference they are tested against:
 * same rows, same reject decisions. A rejected event of a batch is passed to
 * the reject callback as its own bytes by the fast decoder, re-encoded by
 * the reference. With ctx->parse_hex an empty block gets u64 columns. */
int pr_decode_protobuf_event_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                                 uint32_t *next_rec, pr_arena *arena);
int pr_decode_protobuf_event_batch_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                                       size_t len, uint32_t *next_rec, pr_arena *arena);

#endif
