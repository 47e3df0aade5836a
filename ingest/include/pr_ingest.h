/*
 * pr_ingest.h — the ingest component's one public header: record decoders
 * (bytes in a source format -> engine rows; used offline and by Kafka ingest)
 * and the Kafka side of piperec: a consumer that decodes messages
 * into engine row blocks (pr_consumer), a dead-letter producer (pr_dlq) and a
 * loopback test broker built on librdkafka's mock cluster (pr_mock_broker).
 *
 * Shape of the consumer. One librdkafka high-level consumer per pipeline,
 * polled by ONE thread (the pipeline thread) with rd_kafka_consumer_poll only
 * (the batch consume API of librdkafka 2.0.x can lose messages in a
 * rebalance). Every message is decoded straight into the caller's pr_block,
 * with per-row metadata (partition key, offset, event time). Decoded rows are
 * not committed by anything here: the caller stores "offset + 1" of what its
 * sinks acknowledged with pr_consumer_store_offset() and librdkafka's
 * auto-commit (enable.auto.commit=true, every auto.commit.interval.ms)
 * commits what was stored; pr_consumer_commit() commits synchronously and is
 * called on revoke and on shutdown. enable.auto.offset.store is forced to
 * false so nothing is ever stored behind the caller's back.
 *
 * Commit policy, in short (at-least-once):
 *   - rows go out; once every batch holding a partition's rows up to offset X
 *     is acknowledged, the service calls pr_consumer_store_offset(.., X + 1);
 *   - messages that produced no rows (all rejected, or empty) are "consumed"
 *     too: pr_consumer_consumed_next() tells, per partition, the offset after
 *     the last message poll handed out completely; when nothing of a
 *     partition is in flight downstream, that value is safe to store, so a
 *     trailing run of rejects never blocks commits;
 *   - the rule, per partition key p:  store = rows of p in flight downstream
 *     ? min(downstream safe offset, consumed_next(p)) : consumed_next(p).
 *     The min() matters only for a message split over two blocks (below):
 *     its first rows may be acknowledged before the rest was handed out;
 *   - on revoke: on_revoke() runs FIRST (the service drops unbatched rows of
 *     those partitions and stores their safe offsets), then the consumer
 *     commits synchronously, then the partitions are unassigned. Callbacks
 *     run inside pr_consumer_poll, so rows of a revoked partition appended
 *     earlier in the same poll call are still in the caller's block.
 *
 * Partition keys. A pipeline may read several topics, but a pr_block row has
 * one int32 `partition`. Rows therefore carry a partition KEY:
 * (topic_index << 16) | partition, where topic_index is the order in which the
 * consumer first saw the topic (0 for the first topic; so for the usual
 * single-topic pipeline the key IS the Kafka partition). pr_consumer_topic()
 * maps an index back to its name.
 *
 * Messages that do not fit. A message is decoded only when the block has room
 * for all its records; otherwise it stays pending inside the consumer and is
 * decoded first by the next poll (nothing is lost, order is kept). A message
 * with more records than the block's whole capacity is split across polls;
 * its offset is reported by pr_consumer_consumed_next() only after its last
 * piece went out. Pending messages of revoked partitions are dropped (the new
 * owner reads them).
 *
 * Rejects. A record a decoder refuses is counted by reason, logged
 * (rate-limited; a burst's suppressed count is logged within a second of its
 * end, and the totals by reason at close), passed to on_reject (when set)
 * and, when a dead-letter topic is configured, produced there with its
 * original bytes and the headers
 *   piperec-reason (pr_decode_reason_name), piperec-detail,
 *   piperec-source-topic, piperec-partition, piperec-offset
 * (plus piperec-record-index for a record inside a multi-record message);
 * without a topic but with a dead-letter file, appended there with the same
 * fields (pr_dlq_set_file). Either way its offset is held until the letter
 * is confirmed or fsync'd (pr_dlq_hold).
 *
 * Threads. pr_consumer_poll, _pause, _resume, _store_offset*, _commit,
 * _consumed_next and _close are called by the one polling thread (callbacks
 * run on that thread, inside poll or close). pr_consumer_get_stats,
 * pr_consumer_assignment, pr_consumer_lag and pr_consumer_topic may be called
 * from any thread (atomics / an internal mutex).
 *
 * Errors: 0 or a negative PR_E* code; constructors and actions that can fail
 * for a reason a user can fix take errstr.
 */
#ifndef PR_INGEST_H
#define PR_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "pr_cfgmap.h"
#include "pr_clock.h"
#include "pr_engine.h"
#include "pr_error.h"
#include "pr_kafka.h" /* the client builder (pr_dlq_new takes its role settings) */

/* ---------------------------------------------------------------- decoders
 *
 * Record decoders: bytes in a source format -> rows appended to
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

typedef enum pr_decode_reason {
    PR_DEC_OK = 0,
    PR_DEC_FIELD_COUNT,  /* wrong number of tab-separated fields */
    PR_DEC_BAD_LABEL,    /* label not an integer */
    PR_DEC_BAD_DENSE,    /* dense field not a number */
    PR_DEC_BAD_HEX,      /* sparse field with a non-hex character */
    PR_DEC_LONG_HEX,     /* sparse field longer than 16 hex digits */
    PR_DEC_BAD_PROTOBUF, /* protobuf payload does not parse */
    PR_DEC_BAD_SHAPE,    /* protobuf event with the wrong number of values */
    PR_DEC_EMPTY,        /* Kafka message with an empty payload (no record at all) */
    /* JSON (source.format json, pr_json_decoder): the extractor's reasons
     * (pr_json_reason, same names), then the schema's own. */
    PR_DEC_NOT_JSON,            /* syntax error, or bytes after the object */
    PR_DEC_NOT_OBJECT,          /* a JSON value, but not an object */
    PR_DEC_TRUNCATED,           /* the input ends inside the object */
    PR_DEC_BAD_UTF8,            /* invalid UTF-8 */
    PR_DEC_BAD_ESCAPE,          /* bad \ escape or unpaired surrogate */
    PR_DEC_TOO_DEEP,            /* nesting deeper than the bound */
    PR_DEC_NUMBER_OUT_OF_RANGE, /* number beyond double (or int64 where an id is read) */
    PR_DEC_LIST_TOO_LONG,       /* a list longer than the wire limit (PR_FEAT_MAX_LIST) */
    PR_DEC_WRONG_TYPE,          /* a configured path (or an operator) got the wrong type */
    PR_DEC_BAD_TIME,            /* an unreadable time (event time, hour_of_day, ...) */
    /* Avro and Protobuf (issue 23) */
    PR_DEC_UNKNOWN_SCHEMA_ID, /* the registry does not know the message's schema id (404) */
    PR_DEC_BAD_FRAMING,       /* not registry framing (magic byte 0 + 4-byte id [+ indexes]) */
    PR_DEC_BAD_AVRO,          /* an Avro body that does not match its writer schema */
    PR_DEC__COUNT
} pr_decode_reason;

/* Short snake_case name, used as the Prometheus `reason` label and in
 * rejects.tsv / dead-letter headers ("field_count", "bad_hex", ...). */
const char *pr_decode_reason_name(int reason);

/* The pr_decode_reason of a pr_json_reason (PR_DEC_NOT_JSON.. by name);
 * PR_DEC_NOT_JSON for anything unknown. */
int pr_decode_reason_of_json(int json_reason);

/* Not a reject: a record the declared schema's filter (schema.filter) drops.
 * The decoder reports it through the reject callback with this reason, an
 * empty detail and len 0, so that it keeps its place among a message's
 * records wherever rejects travel (decode threads, merges); every handler
 * counts it as filtered and does nothing else: no log, no dead letter, no
 * rejects.tsv line. Outside [0, PR_DEC__COUNT): no reject counter has it. */
#define PR_DEC_FILTERED 0x100
/* Likewise: a record schema.downsample did not keep (PR_DEC_SAMPLED_OUT). */
#define PR_DEC_SAMPLED_OUT 0x101

/* Is `reason` a record dropped on purpose (filter, downsample), not a reject? */
static inline bool pr_decode_dropped(int reason)
{
    return reason == PR_DEC_FILTERED || reason == PR_DEC_SAMPLED_OUT;
}

/* Called once per rejected record (and per filtered one: PR_DEC_FILTERED).
 * `rec`/`len` is the raw record (one TSV line without its newline, or the
 * whole message payload). */
typedef void (*pr_reject_cb)(void *opaque, int reason, const char *detail, const char *rec,
                             size_t len, int64_t recno);

typedef struct pr_json_decoder pr_json_decoder; /* JSON through a declared schema (below) */

typedef struct pr_decode_ctx {
    const pr_pipeline_spec *spec; /* shape: label, n_dense, n_sparse */
    pr_json_decoder *json;        /* PR_MSG_JSON, _AVRO, _PROTOBUF: the decoder (one per
                                   * thread; Avro and Protobuf: its reader set); else NULL */
    pr_reject_cb on_reject;
    void *opaque;
    /* Row metadata written into blocks that have it. */
    int32_t partition;
    int64_t offset;                /* Kafka offset, or first line number offline */
    int64_t default_event_time_ms; /* used when the record carries no event time */
    /* > 0: a record whose own event time is more than this past
     * default_event_time_ms (streaming: the Kafka message timestamp) is
     * rejected bad_time, so that one wrong clock cannot move the event-time
     * watermark (or a ttl_s clock) years ahead. 0 = no bound (offline). */
    int64_t max_event_ahead_ms;
    /* Fused Hex2Int: a block this context starts (rows == 0) gets
     * PR_SPARSE_U64 sparse columns and hex values are parsed while decoding.
     * Only valid when the pipeline's sparse ops start with hex2int (see
     * pr_decode_want_parse_hex); drivers set it, benchmarks of the engine's
     * own Hex2Int leave it false. A column keeps the encoding it has. */
    bool parse_hex;
} pr_decode_ctx;

/* A record's own event time against ctx->max_event_ahead_ms: 0 when within
 * the bound (or no bound, or no message time), else PR_DEC_BAD_TIME with
 * `what` ("event time 2100-01-01T00:00:00.000Z is 27000.0 days ahead of the
 * message's timestamp 2026-...Z (source.max_event_time_ahead_s 86400)"). */
int pr_decode_check_ahead(const pr_decode_ctx *ctx, int64_t event_ms, char *what, size_t size);

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF): what a
 * string value must be in every format (JSON's extractor, Protobuf string
 * fields, Avro strings), bad_utf8 otherwise. */
bool pr_utf8_valid(const void *s, size_t n);

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
 * arena is unused). Their reference, over protobuf-c's unpack, is test code
 * (tests/ingest/proto_ref.h): same rows, same reject decisions. With
 * ctx->parse_hex an empty block gets u64 columns. */

/* One JSON object (one Kafka message) through ctx->json (PR_MSG_JSON; see
 * "JSON decoder" at the end); returns as pr_decode_message. */
int pr_decode_json_message(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                           uint32_t *next_rec);

/* ---------------------------------------------------------------- formats */

/* Message payload formats. Values match pr_source_format in
 * config/include/pr_config.h, so a config value can be passed with a cast. */
typedef enum pr_msg_format {
    PR_MSG_CRITEO_TSV = 0,           /* one or more '\n'-separated Criteo TSV lines */
    PR_MSG_PROTOBUF_EVENT = 1,       /* one piperec.v1.Event */
    PR_MSG_PROTOBUF_EVENT_BATCH = 2, /* one piperec.v1.EventBatch */
    PR_MSG_JSON = 3,                 /* one JSON object, read through the declared schema
                                      * (pr_json_decoder; pr_decode_ctx.json) */
    PR_MSG_AVRO = 4,                 /* one Avro record (plain, or registry-framed), read
                                      * through the declared schema: pr_decode_ctx.json
                                      * with its Avro reader set */
    PR_MSG_PROTOBUF = 5,             /* one message of the user's own .proto (plain, or
                                      * registry-framed), the same way */
    PR_MSG__COUNT
} pr_msg_format;

/* Config names (source.format), indexed by pr_msg_format, NULL-terminated. */
extern const char *const pr_msg_format_names[];
const char *pr_msg_format_name(int fmt);       /* "criteo_tsv", ... or "unknown" */
int pr_msg_format_from_name(const char *name); /* -1 when unknown */

/* Decode one message of `fmt` into `b`, starting at record *next_rec (0 for
 * a fresh message). Returns the rows appended (>= 0) when the whole message
 * has been consumed (records appended or rejected), or PR_EFULL when the block
 * filled first: then *next_rec is where to resume in a fresh block. `arena`
 * (may be NULL) speeds up protobuf decoding; see the decoders above. */
int pr_decode_message(pr_msg_format fmt, const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                      size_t len, uint32_t *next_rec, pr_arena *arena);

/* Records in a message without decoding its values: lines for criteo_tsv
 * (a trailing newline does not start a record, blank lines are skipped, and
 * a message of only line breaks is 1 record, rejected empty), 1 for
 * protobuf_event and json, the
 * number of events for protobuf_event_batch (0 when it does not parse). */
int pr_message_record_count(pr_msg_format fmt, const void *buf, size_t len, pr_arena *arena);

/* A topic-partition as seen by callbacks and listings. `topic` points into
 * the consumer's topic table and stays valid until pr_consumer_free. */
typedef struct pr_tp {
    const char *topic;
    int32_t partition;
    int32_t key;    /* PR_PART_KEY(topic index, partition) */
    int64_t offset; /* meaning depends on the call; -1 when not applicable */
} pr_tp;

/* ---------------------------------------------------------------- dead letters */

typedef struct pr_dlq pr_dlq;

/* A librdkafka property (pr_cfgmap.h's pr_kv: a config's property list can
 * be passed as is). */
typedef pr_kv pr_kv_ref;

/* A dead-letter producer for `topic` (pr_kafka.h's PR_KAFKA_DLQ_PRODUCER:
 * idempotent, acks=all). `props` are the consumer's librdkafka properties
 * (bootstrap.servers, security...); consumer-only properties (group.id,
 * auto.offset.reset, ...) are skipped so one property list serves both.
 * Returns NULL and a reason on failure. */
pr_dlq *pr_dlq_new(const char *topic, const pr_kv_ref *props, size_t n_props, char *errstr,
                   size_t errstr_size);

/* A dead-letter "producer" with no topic: every letter is appended to the
 * dead-letter file `path` (the format: pr_dlq_set_file), written as it
 * comes and fsync'd at most every 100 ms (pr_dlq_poll) or at once
 * (pr_dlq_sync, pr_dlq_flush); each holds its offset until its fsync.
 * max_bytes: see pr_dlq_set_file. NULL and a reason on failure. */
pr_dlq *pr_dlq_new_file(const char *path, uint64_t max_bytes, char *errstr, size_t errstr_size);

/* One dead letter: the original bytes (copied) plus the reason headers, from
 * source partition KEY `key` (PR_PART_KEY) at `offset`. record_index < 0
 * omits piperec-record-index. Non-blocking. The letter is pending until the
 * broker confirms it (or it is written to the dead-letter file), and while
 * pending it holds its offset (pr_dlq_hold). A refused enqueue (queue full,
 * broker down) or a failed delivery is retried from pr_dlq_poll; a letter
 * too large for the topic goes to the file, or makes the producer fatal
 * (pr_dlq_fatal) when there is none. Returns 0, PR_EAGAIN / PR_EKAFKA when
 * not enqueued now (still pending: retried), PR_ENOMEM. Polling thread only. */
int pr_dlq_send(pr_dlq *d, int32_t key, const void *payload, size_t len, const char *reason,
                const char *detail, const char *src_topic, int32_t partition, int64_t offset,
                int64_t record_index);
/* The same with the source message's Kafka key (mkey NULL: none), which the
 * dead letter keeps as its own key, so a keyed topic's letters stay keyed. */
int pr_dlq_send_keyed(pr_dlq *d, int32_t key, const void *mkey, size_t mkey_len,
                      const void *payload, size_t len, const char *reason, const char *detail,
                      const char *src_topic, int32_t partition, int64_t offset,
                      int64_t record_index);

/* Lowest source offset of partition key `key` whose dead letter is not yet
 * confirmed by the topic nor fsync'd in the file (INT64_MAX when none; NULL
 * d is fine): offsets at or past it must not be committed. Polling thread. */
int64_t pr_dlq_hold(const pr_dlq *d, int32_t key);

/* The dead-letter file: where letters the topic can never take are appended
 * (fsync'd at once), or with pr_dlq_new_file every letter. The service
 * passes <state.dir>/<pipeline>.deadletters. Each letter is one text header
 * line, tab-separated: piperec-dead-letter, reason, source topic, partition,
 * offset, record index (-1: the message's only record), payload length,
 * detail, why not in a topic; then exactly `length` payload bytes and a
 * newline (docs/formats.md). A letter that would take the file past
 * max_bytes (0 = no bound) first renames it to <path>.1, dropping the older
 * .1 (its letters counted in file_dropped). NULL = none. Before the first
 * letter only (PR_ESTATE after); PR_ENOMEM. */
int pr_dlq_set_file(pr_dlq *d, const char *path, uint64_t max_bytes);

/* fsync the dead-letter file now when it has letters not yet durable, so
 * their offsets may be committed (a revoke, before it stores them). 0, or
 * PR_EIO (fatal). NULL is fine. Polling thread. */
int pr_dlq_sync(pr_dlq *d);

/* Why the producer cannot go on (a letter that can go nowhere), or NULL. */
const char *pr_dlq_fatal(const pr_dlq *d);

/* Serve delivery reports and retries, fsync the file when its last fsync is
 * 100 ms old (non-blocking but for that fsync); the consumer calls it in its
 * poll. */
void pr_dlq_poll(pr_dlq *d);
/* Wait up to timeout_ms for pending dead letters, fsync the file.
 * PR_ETIMEDOUT if some remain, PR_EIO when the file failed. */
int pr_dlq_flush(pr_dlq *d, int timeout_ms);
/* Flushes (up to 5 s) and frees. NULL is fine. */
void pr_dlq_free(pr_dlq *d);

typedef struct pr_dlq_stats {
    uint64_t sent;         /* delivery confirmed by the broker */
    uint64_t failed;       /* attempts refused at enqueue or failed at delivery (retried) */
    uint64_t pending;      /* not yet confirmed nor in the file: offsets held */
    uint64_t to_file;      /* written to the dead-letter file (no topic, or it cannot take them) */
    uint64_t file_dropped; /* deleted with <file>.1 when the file rotated */
} pr_dlq_stats;

void pr_dlq_get_stats(const pr_dlq *d, pr_dlq_stats *st); /* any thread */

/* ---------------------------------------------------------------- group leave */

/* Ask the coordinator of consumer group `group` to drop member `member_id`
 * (a dynamic member: no group.instance.id), as its own LeaveGroup would: a
 * restart uses it for its killed predecessor, so the group rebalances now
 * rather than after that member's session expires. `props` give
 * bootstrap.servers; only PLAINTEXT listeners (PR_ENOTSUP otherwise).
 * *was_member is false when the coordinator no longer knew the member.
 * Blocks up to timeout_ms. 0, PR_EINVAL, PR_ENOTSUP, PR_ETIMEDOUT, PR_EKAFKA. */
int pr_kafka_leave_group(const pr_kv_ref *props, size_t n_props, const char *group,
                         const char *member_id, int timeout_ms, bool *was_member, char *errstr,
                         size_t errstr_size);

/* ---------------------------------------------------------------- consumer */

typedef struct pr_consumer pr_consumer;

#define PR_CONSUMER_MAX_INSTANCES 16 /* source.consumers */

/* What a rejected record looked like. Pointers are valid only during the call. */
typedef struct pr_reject_info {
    int reason; /* pr_decode_reason */
    const char *detail;
    const char *topic;
    int32_t partition;
    int32_t key;
    int64_t offset;
    int64_t record_index; /* record within the message (line / event), 0-based */
    const void *rec;      /* the rejected record's bytes */
    size_t len;
} pr_reject_info;

typedef void (*pr_partitions_cb)(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n);
typedef void (*pr_msg_reject_cb)(void *opaque, pr_consumer *c, const pr_reject_info *ri);

/* ---------------------------------------------------------------- settings (source_cfg.c) */

/* A pipeline's `source` section. Keys, defaults and docs are the tables
 * pr_source_cfgmap (format, dead_letter_topic) and pr_kafka_source_cfgmap
 * (the `source.kafka` keys); the YAML loader applies them and
 * docs/configuration.md is generated from them. Strings and lists belong to
 * whoever filled the struct (pr_config for a loaded config). */
/* What to do when the position of a partition (its committed offset at
 * assignment, or the fetch position later) is no longer in the log: records
 * were deleted by retention, or the topic was recreated. Config names in
 * pr_offset_reset_names (source.kafka.on_offset_reset). */
typedef enum pr_offset_reset {
    PR_OFFSET_RESET_FAIL = 0, /* stop the pipeline with a message naming the offsets */
    PR_OFFSET_RESET_EARLIEST, /* jump to the log start (re-read what is left) */
    PR_OFFSET_RESET_LATEST,   /* jump to the log end (skip to new data) */
} pr_offset_reset;
extern const char *const pr_offset_reset_names[];

typedef struct pr_kafka_source_cfg {
    bool enabled;  /* source.kafka present */
    char **topics; /* n_topics strings */
    size_t n_topics;
    const char *group_id;            /* default "piperec-<pipeline name>" (set by the loader) */
    pr_kv_list properties;           /* bootstrap.servers, auto.offset.reset, ... */
    pr_offset_reset on_offset_reset; /* default fail */
    const char *group_instance_id;   /* static membership; NULL = from the environment */
} pr_kafka_source_cfg;

/* source.protobuf (source.format protobuf, issue 23): the user's messages,
 * described by a descriptor set. Key table: pr_pbuser_cfgmap. */
typedef enum pr_pb_framing {
    PR_PB_FRAMING_AUTO = 0, /* registry framing when the first byte is 0 (a plain message
                             * never starts with 0: field number 0 does not exist) */
    PR_PB_FRAMING_NONE,     /* plain messages only */
    PR_PB_FRAMING_REGISTRY, /* every message registry-framed (else bad_framing) */
} pr_pb_framing;
extern const char *const pr_pb_framing_names[]; /* "auto", "none", "registry", NULL */

typedef struct pr_pbuser_cfg {
    bool enabled;               /* the section is present */
    const char *descriptor_set; /* protoc --descriptor_set_out=FILE --include_imports */
    const char *message;        /* "pkg.Name", the events' message */
    pr_pb_framing framing;
} pr_pbuser_cfg;
extern const pr_cfgmap pr_pbuser_cfgmap;

/* source.schema_registry: a Confluent-compatible schema registry (issue 23;
 * the client is pr_registry, below). */
typedef struct pr_registry_cfg {
    bool enabled;              /* source.schema_registry present */
    const char *url;           /* http(s)://host:port[/prefix] */
    const char *username;      /* basic auth: user and a file holding the password */
    const char *password_file; /* (first line; trailing newline dropped) */
    const char *token_file;    /* bearer token from a file (instead of basic auth) */
    const char *ca_file;       /* CA bundle for https; NULL = the system's */
    uint32_t timeout_ms;       /* one request, connect included; default 2000 */
    uint32_t cache_max;        /* writer schemas kept (compiled); default 1000 */
} pr_registry_cfg;

/* Avro framing of a message: plain Avro binary, or registry framing (byte 0
 * = 0, 4-byte big-endian schema id, then the body). */
typedef enum pr_avro_framing {
    PR_AVRO_FRAMING_AUTO = 0, /* registry with schema_registry, plain with schema_file */
    PR_AVRO_FRAMING_PLAIN,
    PR_AVRO_FRAMING_REGISTRY,
} pr_avro_framing;
extern const char *const pr_avro_framing_names[];

/* source.avro (format avro). */
typedef struct pr_avro_source_cfg {
    bool enabled;            /* source.avro present */
    const char *schema_file; /* a fixed writer schema (.avsc JSON); or the registry */
    pr_avro_framing framing; /* default auto */
} pr_avro_source_cfg;

typedef struct pr_source_cfg pr_source_cfg;
struct pr_source_cfg {
    pr_kafka_source_cfg kafka;
    pr_msg_format format;                /* default criteo_tsv */
    const char *dead_letter_topic;       /* NULL = the dead-letter file (state.dir), else
                                          * rejects are only counted and logged */
    uint64_t dead_letter_file_max_bytes; /* rotate the dead-letter file past it */
    uint32_t decode_threads;             /* 0 = auto (engine.threads, at most the CPUs) */
    uint32_t consumers;                  /* consumer instances (group members) in the process */
    uint32_t max_event_time_ahead_s;     /* a record's own event time further ahead of its
                                          * message's timestamp: bad_time; 0 = no bound */
    pr_avro_source_cfg avro;             /* format avro */
    pr_registry_cfg schema_registry;     /* format avro (and protobuf): writer schemas by id */
    pr_pbuser_cfg protobuf;              /* format protobuf: descriptor set and message */
};

extern const pr_cfgmap pr_source_cfgmap;
extern const pr_cfgmap pr_kafka_source_cfgmap;
extern const pr_cfgmap pr_avro_source_cfgmap;
extern const pr_cfgmap pr_registry_cfgmap;

typedef struct pr_consumer_conf {
    const char *const *topics; /* subscribed topics (a "^regex" works too) */
    size_t n_topics;
    const char *group_id;   /* required */
    const pr_kv_ref *props; /* passed to librdkafka untouched (SASL, SSL, tuning...) */
    size_t n_props;         /* except: enable.auto.offset.store=false and
                             * partition.assignment.strategy=cooperative-sticky
                             * are forced; enable.auto.commit defaults to true */
    pr_msg_format format;
    const pr_pipeline_spec *spec;        /* shape (label, n_dense, n_sparse); borrowed for life */
    pr_json_decoder *json;               /* format json: the decoder, used by the polling thread
                                          * only; borrowed for life; NULL otherwise */
    const char *dead_letter_topic;       /* NULL = every dead letter goes to dead_letter_file;
                                          * neither: rejects are counted and logged only */
    const char *dead_letter_file;        /* without a topic, every dead letter; with one, those
                                          * the topic can never take (too large) are appended
                                          * here; NULL = none (then such a record stops the
                                          * pipeline rather than being lost) */
    uint64_t dead_letter_file_max_bytes; /* rotate to <file>.1 past it; 0 = never */
    pr_offset_reset on_offset_reset;     /* position out of range; see pr_offset_reset */
    const char *group_instance_id;       /* group.instance.id (static membership); NULL or ""
                                          * = dynamic membership */
    const char *member_file;             /* dynamic membership: where the member ids are
                                          * kept, a line per instance (written at each
                                          * assignment, removed by a clean close); a new
                                          * consumer that finds one asks the coordinator to
                                          * drop those members first (fast restart after
                                          * SIGKILL). NULL = off */
    const char *read_file;               /* the topics this group committed on, a line
                                          * "group<TAB>topic" each (written at the first
                                          * commit on a topic): a topic listed for the group
                                          * whose offsets are all gone (expired after
                                          * offsets.retention.minutes, deleted, the topic
                                          * recreated) is not started at auto.offset.reset
                                          * latest's end as if new: on_offset_reset decides.
                                          * NULL = off */
    const pr_clock *clock;               /* event time fallback ("now"); NULL = real clock */
    /* Decode threads (the polling thread included): > 1 decodes messages
     * on that many threads, merged back in poll order, so rows, rejects,
     * dead letters and offsets are those of one thread; 0 or 1 = the
     * polling thread only. Every format (Avro with a schema registry: a
     * message whose writer schema the polling thread has not fetched yet
     * decodes there, which fetches it). json, avro
     * and protobuf need `features` (one decoder per thread; borrowed for
     * life), avro and protobuf also `source` (each thread's reader is made
     * from its files; borrowed for life; NULL: those decode serially). */
    unsigned decode_threads;
    const pr_feature_schema *features;
    const pr_source_cfg *source;
    /* Members of the group in this process (source.consumers; 0 or 1 = one,
     * at most PR_CONSUMER_MAX_INSTANCES): each its own librdkafka client
     * with its share of the partitions; with more than one, each is
     * polled by a thread of its own into a ring the polling thread reads
     * (rebalance events in order, handled on the polling thread, so the
     * callbacks below still run there); offsets, rebalances, dead letters
     * and stats are kept for all of them together. A static member's id gets "-1", "-2", ... for
     * the second and later; the member file is the first one's. */
    unsigned consumers;
    /* Callbacks (all optional), run on the polling thread. on_assign gets the
     * newly assigned partitions (offset -1); on_revoke the partitions about
     * to be unassigned (offset = consumed_next, or -1), before the commit. */
    pr_partitions_cb on_assign;
    pr_partitions_cb on_revoke;
    pr_msg_reject_cb on_reject;
    void *opaque;
} pr_consumer_conf;

/* Create the consumer and subscribe. Returns NULL and a reason on failure
 * (bad property, no topics, DLQ producer failed...). */
pr_consumer *pr_consumer_new(const pr_consumer_conf *conf, char *errstr, size_t errstr_size);

/* Append rows decoded from messages to `b` (b->rows onward; the block is not
 * reset). Waits up to timeout_ms for the first message, then takes what is
 * already there without waiting, until the block is full or no message is
 * ready. Returns the rows appended (>= 0; 0 on timeout), or a negative code
 * on a fatal consumer error (errstr says why). `b` must have the pipeline's
 * shape; with_meta blocks get partition key, offset and event time per row
 * (event's own time, else the message timestamp, else the clock's now). */
int pr_consumer_poll(pr_consumer *c, pr_block *b, int timeout_ms, char *errstr, size_t errstr_size);

/* A message is held for the next block (it did not fit this one: rows, or a
 * declared schema's element room): the block is full for this consumer. */
bool pr_consumer_has_pending(const pr_consumer *c);

/* Stop / restart fetching from every assigned partition (and from partitions
 * assigned while paused). Keep polling while paused: rebalances are served by
 * poll. A message already held pending (at most one) is still handed out by
 * the next poll; nothing else is. Idempotent. */
int pr_consumer_pause(pr_consumer *c);
int pr_consumer_resume(pr_consumer *c);
bool pr_consumer_paused(const pr_consumer *c);

/* Mark everything before next_offset as processed (librdkafka's offset store;
 * committed by auto-commit or pr_consumer_commit). Storing for a partition not
 * assigned any more returns PR_ESTATE (harmless); storing the offset stored
 * last for that partition returns 1 and calls nothing (the service stores
 * every partition's safe offset after each ack: most have not moved). */
int pr_consumer_store_offset(pr_consumer *c, const char *topic, int32_t partition,
                             int64_t next_offset);
int pr_consumer_store_offset_key(pr_consumer *c, int32_t key, int64_t next_offset);

/* Offset after the last message of partition `key` that poll handed out
 * completely (rows appended or rejected); -1 when none yet. */
int64_t pr_consumer_consumed_next(const pr_consumer *c, int32_t key);

/* Synchronously commit the stored offsets of the current assignment. Nothing
 * to commit is success. */
int pr_consumer_commit(pr_consumer *c, char *errstr, size_t errstr_size);

/* Leave the group: on_revoke for everything, commit, close. Then free. */
int pr_consumer_close(pr_consumer *c, char *errstr, size_t errstr_size);
void pr_consumer_free(pr_consumer *c); /* closes first when needed; NULL ok */

/* Name of topic index `idx` (see PR_PART_KEY), NULL when unknown. Any thread. */
const char *pr_consumer_topic(const pr_consumer *c, int idx);

/* The librdkafka handle, for things this API does not cover. Owned by c. */
rd_kafka_t *pr_consumer_handle(pr_consumer *c);
/* The dead-letter producer (a topic, or the file alone), NULL when none; the
 * service sends engine rejects through it. Owned by c. */
pr_dlq *pr_consumer_dlq(pr_consumer *c);

/* What became of a SIGKILLed predecessor's group member (member_file). */
typedef enum pr_stale_member {
    PR_STALE_DROPPED, /* the coordinator dropped it on our request */
    PR_STALE_GONE,    /* it had already left (its session expired) */
    PR_STALE_FAILED,  /* the request failed: its session must expire */
    PR_STALE__COUNT
} pr_stale_member;

typedef struct pr_consumer_stats {
    uint64_t messages;               /* Kafka messages received */
    uint64_t bytes;                  /* their payload bytes */
    uint64_t records;                /* rows appended to blocks */
    uint64_t rejects[PR_DEC__COUNT]; /* rejected records by pr_decode_reason */
    uint64_t rejected_records;       /* sum of rejects[] */
    uint64_t filtered;               /* records schema.filter dropped (PR_DEC_FILTERED) */
    uint64_t sampled_out;            /* records schema.downsample dropped (PR_DEC_SAMPLED_OUT) */
    uint64_t dlq_sent;
    uint64_t dlq_failed;
    uint64_t kafka_errors;     /* non-fatal consumer errors seen by poll */
    uint64_t rebalances;       /* assign + revoke events */
    uint64_t offset_resets;    /* out-of-range positions reset (on_offset_reset) */
    uint64_t commit_failures;  /* offset commits the broker refused (e.g. mid-rebalance):
                                * their rows may be read again (at-least-once) */
    uint64_t dlq_file;         /* dead letters written to the dead-letter file */
    uint64_t dlq_file_dropped; /* ... deleted with <file>.1 when the file rotated */
    uint64_t dlq_pending;      /* dead letters not yet confirmed (they hold offsets back) */
    uint64_t stale_members[PR_STALE__COUNT]; /* a killed predecessor's member at startup, by
                                                pr_stale_member */
    uint32_t assigned_partitions;
    uint32_t paused_partitions; /* gauge */
    bool paused;
    /* A message that cannot be decoded yet (its reader answered PR_EAGAIN:
     * a schema registry down or slow) waits as the pending message, its
     * partitions paused, and is retried every 100 ms; nothing is dropped or
     * rejected for it. */
    uint64_t decode_waits;   /* retries that answered PR_EAGAIN */
    uint32_t decode_waiting; /* gauge: 1 while a message waits */
    char decode_wait_why[160];
    char last_kafka_error[160]; /* the client's last error ("" none): what /readyz says
                                 * while no partition is assigned (brokers down) */
} pr_consumer_stats;

void pr_consumer_get_stats(const pr_consumer *c, pr_consumer_stats *st); /* any thread */

/* Partitions whose position was reset (out of range, on_offset_reset earliest
 * or latest), with their reset counts; returns how many such partitions
 * exist, fills up to max. Any thread. */
size_t pr_consumer_offset_resets(const pr_consumer *c, pr_tp *out, uint64_t *counts, size_t max);

/* Current assignment (offset -1); returns the count, fills up to max. Any thread. */
size_t pr_consumer_assignment(const pr_consumer *c, pr_tp *out, size_t max);

/* Lag of each assigned partition, from cached values (never blocks on the
 * network): high watermark from the last fetch, position = next offset the
 * consumer will fetch, committed = last offset committed by this consumer
 * (auto or sync, or found at assignment), -1 when unknown. lag = high -
 * committed when both known, else high - position, else -1. Any thread. */
typedef struct pr_partition_lag {
    pr_tp tp;
    int64_t high_watermark;
    int64_t position;
    int64_t committed;
    int64_t lag;
    bool paused;
} pr_partition_lag;

size_t pr_consumer_lag(pr_consumer *c, pr_partition_lag *out, size_t max);

/* ---------------------------------------------------------------- test broker */

/* librdkafka's mock cluster on 127.0.0.1 (random port): a TEST broker, no
 * durability, no SSL/SASL, keeps only ~5 MB per partition. Used by tests,
 * `piperec broker` and `piperec demo`; production uses a real Kafka cluster. */
typedef struct pr_mock_broker pr_mock_broker;

/* Start one mock broker and create the comma-separated topics (may be NULL
 * or "") with `partitions` partitions each (>= 1). Other topics are created
 * on first use by the mock cluster itself. */
pr_mock_broker *pr_mock_broker_start(int partitions, const char *topics_csv, char *errstr,
                                     size_t errstr_size);
/* "127.0.0.1:PORT", valid until stop. */
const char *pr_mock_broker_bootstrap(const pr_mock_broker *mb);
int pr_mock_broker_create_topic(pr_mock_broker *mb, const char *topic, int partitions, char *errstr,
                                size_t errstr_size);
/* Take the broker down (true: every connection closed, new ones refused)
 * or bring it back up (false), for outage tests. Data and group state are
 * kept; librdkafka's mock does not move leadership. Returns 0 or PR_EKAFKA. */
int pr_mock_broker_set_down(pr_mock_broker *mb, bool down, char *errstr, size_t errstr_size);
/* The next n requests of Kafka API `api_key` (8: OffsetCommit, ...) are
 * answered with error `err` (a rd_kafka_resp_err_t), for fault tests. */
void pr_mock_broker_fail_next(pr_mock_broker *mb, int16_t api_key, size_t n, int err);
void pr_mock_broker_stop(pr_mock_broker *mb); /* NULL ok */

/* ================================================================ JSON field extractor
 * (ingest/json_extract.c, owner: ingest JSON; issue 20 item 3)
 *
 * Extracts a compiled set of dotted paths ("user.id", "label.click",
 * "history") from one JSON object (one Kafka message, one JSON line) in ONE
 * pass, without building a tree, into a columnar, jagged pr_json_block.
 * Everything else in the document is skipped but still validated: JSON syntax
 * (RFC 8259), UTF-8 (no overlongs, no surrogates, no truncated sequences),
 * escapes (\uXXXX, surrogate pairs must pair up), nesting depth.
 *
 * Values. Each path declares a type and a shape:
 *   PR_JSON_INT64   a number written as an integer in int64 range ("-0" is 0);
 *                   1.5 or 1e3 -> wrong_type, 9223372036854775808 ->
 *                   number_out_of_range
 *   PR_JSON_DOUBLE  any number: integers in int64 range convert as (double),
 *                   others parse correctly rounded; beyond +-DBL_MAX ->
 *                   number_out_of_range (underflow gives 0 or a subnormal)
 *   PR_JSON_BOOL    true / false
 *   PR_JSON_STRING  a string, unescaped, into the block's arena
 *   PR_JSON_KEY     a string or an int64 integer, both as string bytes (an id
 *                   for a vocabulary: "42" and 42 are the same key, -0 is "0")
 *   PR_JSON_ANY     a string, a number or a bool, each tagged with what it was
 *                   (pr_json_any: STRING, INT64 for an integer in int64 range,
 *                   DOUBLE for any other number, BOOL); the schema decoder
 *                   reads every path this way and checks types itself
 *   shapes: PR_JSON_SCALAR (an array -> wrong_type), PR_JSON_LIST (an array of
 *   scalars of the type; a scalar -> wrong_type), PR_JSON_SCALAR_OR_LIST,
 *   PR_JSON_VECTOR (as LIST, but a list of objects on the way -> wrong_type,
 *   as for a scalar: an element without the field would shift the rest),
 *   PR_JSON_ALIGNED (as LIST, but over a list of objects an element without
 *   the field, null there, or null itself gives a hole, type PR_JSON_HOLE).
 *   Inside a list, null and nested arrays/objects -> wrong_type; more than
 *   max_list elements -> list_too_long. An object at a path -> wrong_type.
 *   A non-object, non-null value where a path needs an object (path "user.id",
 *   document {"user": 5}) -> wrong_type; null there means the path is absent.
 *   An array where a path needs an object is a list of objects: the path maps
 *   over its elements ("imp.ad_id" of {"imp": [{"ad_id": 1}, {"ad_id": 2}]}
 *   reads as the list [1, 2]), when every path below takes a list (else
 *   wrong_type: a single value cannot cross a list). An element that lacks
 *   the key, holds null there or is null adds nothing (so two paths over one
 *   list stay aligned only when no element is dropped); a non-object element
 *   -> wrong_type; one list level per path (a list, or a list of objects,
 *   inside an element -> wrong_type); max_list counts the mapped elements;
 *   the elements are one nesting level below the array (max_depth).
 *   One path may not be a prefix of another ("user" and "user.id").
 *   Keys are matched after unescaping ("\u0069d" matches "id"); a key that
 *   contains '.' cannot be addressed.
 *
 * Duplicate keys: the LAST occurrence wins, as in most JSON readers
 * (Python's json, JavaScript): a repeated key drops what its earlier
 * occurrence gave, for the whole subtree under it. Every occurrence is still
 * type-checked, so a bad earlier one rejects the row.
 *
 * Rejects. The first problem in document order names the reason. A rejected
 * document appends nothing: no row, no values, no arena bytes. Numbers inside
 * skipped (unconfigured) fields are checked for syntax only.
 *
 * Output (per path i, cols[i]), rows appended in order:
 *   present[r]  PR_JSON_ABSENT, PR_JSON_NULL (the key is there, value null)
 *               or PR_JSON_PRESENT (a scalar or a list, an empty list too)
 *   count[r]    0 (absent, null, []), 1 (a scalar), n (a list of n)
 *   values      key-major: row r's values start at count[0] + .. + count[r-1];
 *               in i64 (INT64), f64 (DOUBLE), b (BOOL) or str (STRING, KEY:
 *               offset + length into arena; not NUL-terminated).
 *
 * Threads: a pr_json_extractor is immutable once built and may be shared;
 * a pr_json_block belongs to one thread at a time.
 */

typedef enum pr_json_reason {
    PR_JSON_OK = 0,
    PR_JSON_NOT_JSON,            /* syntax error, or bytes after the object */
    PR_JSON_NOT_OBJECT,          /* the document is a JSON value but not an object */
    PR_JSON_TRUNCATED,           /* the input ends inside the object */
    PR_JSON_BAD_UTF8,            /* invalid UTF-8 (overlong, surrogate, truncated sequence) */
    PR_JSON_BAD_ESCAPE,          /* bad \ escape, or an unpaired \uD800-\uDFFF */
    PR_JSON_TOO_DEEP,            /* nesting deeper than max_depth */
    PR_JSON_NUMBER_OUT_OF_RANGE, /* number beyond double, or int64 for an INT64 path */
    PR_JSON_LIST_TOO_LONG,       /* a list with more than max_list elements */
    PR_JSON_WRONG_TYPE,          /* a configured path holds the wrong kind of value */
    PR_JSON__REASONS
} pr_json_reason;

/* Short snake_case name ("not_json", "wrong_type", ...); "unknown" if out of range. */
const char *pr_json_reason_name(int reason);

typedef enum pr_json_type {
    PR_JSON_INT64 = 1,
    PR_JSON_DOUBLE,
    PR_JSON_BOOL,
    PR_JSON_STRING,
    PR_JSON_KEY,
    PR_JSON_ANY,
} pr_json_type;

typedef enum pr_json_shape {
    PR_JSON_SCALAR = 0,
    PR_JSON_LIST,
    PR_JSON_SCALAR_OR_LIST,
    PR_JSON_VECTOR,  /* a list at the path itself, never mapped over a list of
                      * objects on the way (a dense vector: its positions hold) */
    PR_JSON_ALIGNED, /* as LIST, but mapping over a list of objects keeps every
                      * position: an element without the field, with null
                      * there, or null itself, adds a hole (a PR_JSON_ANY value
                      * of type PR_JSON_HOLE) instead of nothing, so that two
                      * ALIGNED paths under one list of objects have the same
                      * count and element k from the same object (the ids and
                      * weights of an id-score list). PR_JSON_ANY paths only. */
} pr_json_shape;

/* The type of a hole of a PR_JSON_ALIGNED path (pr_json_any.type). */
#define PR_JSON_HOLE 0

enum { PR_JSON_ABSENT = 0, PR_JSON_NULL = 1, PR_JSON_PRESENT = 2 };

#define PR_JSON_DEFAULT_MAX_DEPTH 64
#define PR_JSON_MAX_DEPTH_LIMIT   1024
#define PR_JSON_DEFAULT_MAX_LIST  1024

/* What a path reads: the value at it, or the entries of the map (object)
 * at it. A map's entries are read in the document's order, one element
 * per key (a repeated key keeps its first place and takes its last value,
 * as Python's dict and JavaScript do); the map is a list level of its own
 * (under a list of objects -> wrong_type). PR_JSON_KEYS reads the keys as
 * PR_JSON_STRING values; PR_JSON_VALUES the values, PR_JSON_ANY scalars
 * (null -> a hole; a list or object -> wrong_type), and needs the KEYS path
 * of the same map (which dedups) and the ALIGNED shape. Both PR_JSON_ANY,
 * list shapes; a map's path reads no named key below it. */
typedef enum pr_json_part {
    PR_JSON_AT = 0, /* the value at the path */
    PR_JSON_KEYS,   /* the keys of the map at the path */
    PR_JSON_VALUES, /* the values of the map at the path, aligned with its keys */
} pr_json_part;

typedef struct pr_json_path {
    const char *path; /* dotted, e.g. "user.id"; copied */
    pr_json_type type;
    pr_json_shape shape;
    uint32_t max_list; /* lists only; 0 = PR_JSON_DEFAULT_MAX_LIST */
    pr_json_part part; /* PR_JSON_AT unless a map's keys or values */
} pr_json_path;

typedef struct pr_json_extractor pr_json_extractor;

/* Compile `n` paths (1..65535). max_depth 0 = PR_JSON_DEFAULT_MAX_DEPTH,
 * at most PR_JSON_MAX_DEPTH_LIMIT (the top-level object is depth 1).
 * Returns NULL with errstr on a bad path (empty segment, duplicate, prefix
 * of another), a bad type/shape, or no memory. */
pr_json_extractor *pr_json_extractor_new(const pr_json_path *paths, size_t n, uint32_t max_depth,
                                         char *errstr, size_t errstr_size);
void pr_json_extractor_free(pr_json_extractor *x); /* NULL ok */
size_t pr_json_extractor_paths(const pr_json_extractor *x);

typedef struct pr_json_str {
    uint32_t off, len; /* into pr_json_block.arena */
} pr_json_str;

/* The time unit a format's own type gives an integer (Avro's logical types
 * timestamp-millis / -micros, local-timestamp-*, date); JSON has none. */
typedef enum pr_json_unit {
    PR_JSON_UNIT_NONE = 0, /* a plain number: the feature's configured unit applies */
    PR_JSON_UNIT_DAYS,     /* days since the epoch (Avro date) */
    PR_JSON_UNIT_MS,       /* milliseconds since the epoch */
    PR_JSON_UNIT_US,       /* microseconds since the epoch */
} pr_json_unit;

/* A PR_JSON_ANY value: type is PR_JSON_STRING (s), PR_JSON_INT64 (i),
 * PR_JSON_DOUBLE (d) or PR_JSON_BOOL (i = 0 / 1). big_int: a DOUBLE written
 * as an integer beyond int64 (a reader that needs an integer says
 * number_out_of_range, not wrong_type). unit (pr_json_unit) is set on an
 * INT64 whose writer type says it is a time. Both in the padding: no cost. */
typedef struct pr_json_any {
    uint8_t type;
    uint8_t big_int;
    uint8_t unit;
    union {
        int64_t i;
        double d;
        pr_json_str s;
    };
} pr_json_any;

typedef struct pr_json_col {
    uint8_t *present;  /* [cap] rows */
    uint32_t *count;   /* [cap] rows */
    uint32_t n_values; /* values appended so far (all rows) */
    uint32_t values_cap;
    int64_t *i64;     /* PR_JSON_INT64, else NULL */
    double *f64;      /* PR_JSON_DOUBLE */
    uint8_t *b;       /* PR_JSON_BOOL (0 / 1) */
    pr_json_str *str; /* PR_JSON_STRING, PR_JSON_KEY */
    pr_json_any *any; /* PR_JSON_ANY */
} pr_json_col;

typedef struct pr__json_scratch pr__json_scratch;

/* A batch of extracted rows for one extractor: cols[i] is path i as given to
 * pr_json_extractor_new. Value arrays and the arena grow as needed; the
 * per-row arrays hold `cap` rows. */
typedef struct pr_json_block {
    uint32_t rows, cap;
    uint32_t n_cols;
    pr_json_col *cols;
    char *arena; /* string bytes, unescaped */
    size_t arena_len, arena_cap;
    pr__json_scratch *scratch; /* per-row state (internal) */
} pr_json_block;

/* A block shaped for `x` (which must outlive it), `cap` rows (>= 1). */
pr_json_block *pr_json_block_new(const pr_json_extractor *x, uint32_t cap);
void pr_json_block_reset(pr_json_block *b); /* rows, values, arena to 0; memory kept */
void pr_json_block_free(pr_json_block *b);  /* NULL ok */

/* Where and why a document was rejected. */
typedef struct pr_json_reject {
    int reason;    /* pr_json_reason */
    size_t offset; /* byte offset in the document where the problem was seen */
    char detail[160];
} pr_json_reject;

/* Extract one document doc[0, len) (need not be NUL-terminated; leading and
 * trailing JSON whitespace allowed) as the next row of `b`.
 * Returns 0 when a row was appended; a pr_json_reason (> 0) when the document
 * was rejected (nothing appended; *rej filled when rej is non-NULL);
 * PR_EFULL when the block has no free row, PR_ENOMEM when growing failed
 * (both: nothing appended, the document was not looked at / is to be retried). */
int pr_json_extract(const pr_json_extractor *x, pr_json_block *b, const char *doc, size_t len,
                    pr_json_reject *rej);

/* ---- the row writer: another format fills one row of a pr_json_block ----
 * (issue 23: Avro and Protobuf readers). The reader of another format walks
 * its own bytes and writes the values of the block's columns (the paths the
 * decoder asked for, pr_json_decoder_paths) with the same rules as the JSON
 * extractor, so that json_decode.c turns its rows into block rows exactly as
 * it does JSON's:
 *   pr_json_row_begin     opens the next row: 0, or PR_EFULL (no free row);
 *   pr_json_row_put       a number or a bool (v->type PR_JSON_INT64,
 *                         PR_JSON_DOUBLE or PR_JSON_BOOL with v->i 0 / 1):
 *                         the column's value, or the next element of a list;
 *   pr_json_row_put_str   a string (copied into the block's arena);
 *   pr_json_row_null      the path is there and null (drops values put
 *                         earlier in the row for that column);
 *   pr_json_row_end       the row counts (columns never written: absent);
 *   pr_json_row_abort     nothing of the open row is kept;
 *   pr_json_row_mark      a column's state in the open row, and
 *   pr_json_row_undo      back to that state (what was put since is
 *                         dropped): a key met again in a map on the way to
 *                         a path replaces what its first occurrence put, as
 *                         the JSON extractor's last occurrence wins.
 * put, put_str and null return 0, PR_ENOMEM, PR_EINVAL (no open row, column
 * out of range) or a pr_json_reason (> 0): wrong_type for a value the
 * column's type does not take (on a PR_JSON_ANY column: none) or for a
 * second value on a PR_JSON_SCALAR column, list_too_long past the column's
 * max_list. After a reason or an error the reader aborts the row.
 * A list is a run of puts; an empty list is not told apart from an absent
 * path (the decoder gives both length 0), and a list of one element on a
 * PR_JSON_SCALAR_OR_LIST column reads as a scalar: a reader that must refuse
 * a list on a scalar path (or a scalar on a list path) checks the path's
 * shape itself and returns wrong_type. One row open at a time; the block
 * belongs to one thread. */
int pr_json_row_begin(pr_json_block *b);
int pr_json_row_put(pr_json_block *b, uint32_t col, const pr_json_any *v);
int pr_json_row_put_str(pr_json_block *b, uint32_t col, const char *s, size_t len);
int pr_json_row_null(pr_json_block *b, uint32_t col);
/* A hole as the next element of a PR_JSON_ALIGNED column (an element of a
 * list of records / repeated messages without the field): same returns as
 * pr_json_row_put (wrong_type on another shape; list_too_long counts it). */
int pr_json_row_hole(pr_json_block *b, uint32_t col);
void pr_json_row_end(pr_json_block *b);
void pr_json_row_abort(pr_json_block *b);
typedef struct pr_json_row_at {
    uint32_t n_values, count;
    uint8_t present;
} pr_json_row_at;
void pr_json_row_mark(const pr_json_block *b, uint32_t col, pr_json_row_at *at);
void pr_json_row_undo(pr_json_block *b, uint32_t col, const pr_json_row_at *at);

/* ================================================================ JSON decoder
 * (ingest/json_decode.c; issue 20, source.format json)
 *
 * A declared feature schema (pr_engine.h's pr_feature_schema) applied to JSON
 * documents, one record at a time, into a declared schema's pr_block
 * (pr_feature_block_new: side tables, one U64 engine column per vocab
 * feature). Per record:
 *   - the schema's distinct paths (its filter's too) are extracted in one
 *     pass (pr_json_extract, every path as PR_JSON_ANY); a document the
 *     extractor refuses is rejected with its reason (not_json, truncated,
 *     bad_utf8, ...);
 *   - schema.filter (pr_engine.h): a record failing a condition is reported
 *     as PR_DEC_FILTERED (not a reject) and read no further: its features
 *     are not looked at, nothing is staged;
 *   - event_time: read in its unit (s / ms / us: integer or number;
 *     rfc3339: string) into the row's event_time_ms (floored to the ms);
 *     absent or null: ctx->default_event_time_ms; unreadable: bad_time;
 *   - labels: a number (true/false are 1/0); absent or null: the default,
 *     else 0 (as offline); a string: wrong_type;
 *   - dense: the same value rules, then the chain; missing at the end: 0;
 *   - sparse (one value; a cross reads each path and starts with `cross`):
 *     a string, an integer (a bool is 0/1) or a number; absent or null: the
 *     default, else missing; then the operators BEFORE `vocab` (all of them
 *     without one). A vocab feature's key: an integer's int64 bits (exact),
 *     a string's pr_fop_hash64 (XXH64, PR_FOP_HASH_SEED; two distinct
 *     strings collide with probability about n^2 / 2^65 for n strings), a
 *     missing value key 0 with the engine's missing bit (index 0 under the
 *     default profile, key 0 under dlrm): length 1 always. Without vocab the
 *     final integer goes to the side tables (missing: 0). A number where an
 *     integer or a string is needed: wrong_type;
 *   - list: the elements through the same operators, missing elements
 *     dropped, then the first (keep first) or last (keep last) max_len kept;
 *     absent, null or []: length 0; more than PR_FEAT_MAX_LIST elements on
 *     the wire: list_too_long; a scalar where only lists read the path:
 *     wrong_type;
 *   - an operator's refusal rejects the record: wrong_type, bad_hex,
 *     bad_time.
 * The row is staged and written only when the whole record passed: a
 * rejected record leaves nothing in the block, and one that does not fit
 * (rows, or a vocab column's element room: pr_block_fits) leaves it untouched.
 * Rejects go to ctx->on_reject with the reason (pr_decode_reason) and a
 * detail naming the feature and its path ("user (user.id): ...") or the
 * byte offset of a syntax problem.
 *
 * Threads: a decoder holds one record's scratch: one per decoding thread.
 * It borrows the schema, which must outlive it. */

/* Build a decoder for a declared schema. NULL with errstr when the schema is
 * not declared, its paths clash (one a prefix of another: "user" and
 * "user.id"), or memory runs out. */
pr_json_decoder *pr_json_decoder_new(const pr_feature_schema *schema, char *errstr,
                                     size_t errstr_size);
void pr_json_decoder_free(pr_json_decoder *d); /* NULL ok */

/* One JSON document (a JSON line without its newline) through ctx->json as
 * the next row of `b` (row offset = recno, as pr_decode_criteo_line).
 * Returns 1 when a row was appended, 0 when rejected, PR_EFULL when it does
 * not fit (nothing consumed), PR_EINVAL when b is not shaped for the schema,
 * PR_ENOMEM. */
int pr_decode_json_line(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                        int64_t recno);

/* JSON lines of buf[0, len) into `b` until the buffer or the block runs out
 * (as pr_decode_criteo_lines: whole lines, a final line without a newline
 * only when eof, line i gets recno first_recno + i). Blank lines are skipped
 * (counted in *lines_out, no row, no reject). A line that does not fit stops
 * the call before it. Returns the bytes consumed. */
size_t pr_decode_json_lines(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                            bool eof, int64_t first_recno, int64_t *lines_out);

/* ---- another format's reader in place of the JSON extractor (issue 23) ----
 * Avro and Protobuf reuse everything above: their reader fills one row of the
 * decoder's pr_json_block (the row writer, pr_json_row_*) and the decoder
 * applies the schema to it as to an extracted JSON row, so every format
 * gives identical block rows for the same events.
 *
 * A reader reads one record buf[0, len) into jb (jb has one free row,
 * already reset) and returns:
 *   0          one row written (pr_json_row_end);
 *   > 0        a pr_decode_reason (NOT a pr_json_reason: a reason from
 *              pr_json_row_put* converts with pr_decode_reason_of_json),
 *              nothing written, rej->detail says what and where;
 *   PR_EAGAIN  not decodable yet (e.g. the schema registry is down): nothing
 *              written; the message is to be retried later, unchanged;
 *   < 0        another error (PR_ENOMEM): nothing written.
 * Column i of jb is paths[i] of pr_json_decoder_paths (a dotted path, type
 * PR_JSON_ANY, the shape the schema's features need, max_list).
 * With a reader set, pr_decode_json_line, _lines and _message read through
 * it; PR_EAGAIN comes back from them (and from pr_decode_message) as is. */
typedef int (*pr_record_read_fn)(void *rd, pr_json_block *jb, const void *buf, size_t len,
                                 pr_json_reject *rej);

/* The detail of the decoder's last reject, or of its reader's last
 * PR_EAGAIN (why the message must wait); valid until the next record. */
const char *pr_json_decoder_last_detail(const pr_json_decoder *d);

/* The decoder's extractor columns: *paths = an array of the returned count,
 * valid for the decoder's life. */
size_t pr_json_decoder_paths(const pr_json_decoder *d, const pr_json_path **paths);

/* Read records with fn(rd, ...) instead of the JSON extractor; fn NULL = JSON
 * text again. rd is borrowed (the caller frees it after the decoder). */
void pr_json_decoder_set_reader(pr_json_decoder *d, pr_record_read_fn fn, void *rd);

/* Like set_reader, and the decoder owns rd: pr_json_decoder_free (or the
 * next set_reader / set_reader_owned) calls free_fn(rd). */
void pr_json_decoder_set_reader_owned(pr_json_decoder *d, pr_record_read_fn fn, void *rd,
                                      void (*free_fn)(void *rd));

/* The reader of a pipeline's source.format set on d (owned by d): nothing
 * for json (and any non-record format), the Avro reader for avro, the
 * Protobuf reader for protobuf (pr_pbuser_set_reader). The one call drivers
 * (streaming, offline) make after pr_json_decoder_new. */
int pr_json_decoder_for_source(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                               size_t errstr_size);

/* ================================================================ schema registry
 * (ingest/registry.c; issue 23; used by the Avro reader and the Protobuf
 * reader alike)
 *
 * A client of a Confluent-compatible registry: GET {url}/schemas/ids/{id}
 * with libcurl, basic auth or a bearer token, a CA file, a timeout per
 * request. It keeps no schemas (each reader caches what it compiles from
 * them); it keeps the registry's health: after a failure (down, slow, 5xx)
 * further fetches answer PR_EAGAIN at once until a backoff has passed
 * (100 ms doubling to 5 s), so a paused partition's retries do not hammer a
 * registry that is down. One thread at a time (the decoding thread).
 */
typedef struct pr_registry pr_registry;

typedef struct pr_registry_stats {
    uint64_t fetches;   /* requests answered 200 */
    uint64_t not_found; /* answered 404 (unknown id) */
    uint64_t failures;  /* down, timed out, other statuses */
    bool down;          /* the last request failed */
    char last_error[160];
} pr_registry_stats;

/* A client for cfg (strings copied; the password and token files are read
 * here). NULL with errstr on a bad url or an unreadable file. */
pr_registry *pr_registry_new(const pr_registry_cfg *cfg, char *errstr, size_t errstr_size);
void pr_registry_free(pr_registry *r); /* NULL ok */

/* The schema text of `id` (the "schema" member of the answer, unescaped;
 * *schema_type the "schemaType" member, "AVRO" when absent) into *text, a
 * malloc'd NUL-terminated string the caller frees. Returns 0, PR_EBADREC (the
 * registry answered 404: no such id), PR_EAGAIN (down, slow, an error
 * status, or backing off: try again later; errstr says why), PR_ENOMEM. */
int pr_registry_fetch(pr_registry *r, uint32_t id, char **text, char *schema_type,
                      size_t schema_type_size, char *errstr, size_t errstr_size);

/* Registry framing of buf[0, len): byte 0 = 0, then a 4-byte big-endian
 * schema id; *id and *body (the offset after the id) on success. Returns
 * false when buf is too short or byte 0 is not 0. */
bool pr_registry_frame(const void *buf, size_t len, uint32_t *id, size_t *body);

void pr_registry_get_stats(const pr_registry *r, pr_registry_stats *st); /* same thread */

/* Why a fetch failed, for /metrics: refused (nothing listens: connect
 * refused), timeout (connect or answer slower than timeout_ms), 5xx (a server
 * error status), 404 (the registry does not know the id), other (DNS, TLS,
 * another status, an answer without a schema). */
typedef enum pr_registry_fail {
    PR_REG_FAIL_REFUSED = 0,
    PR_REG_FAIL_TIMEOUT,
    PR_REG_FAIL_5XX,
    PR_REG_FAIL_404,
    PR_REG_FAIL_OTHER,
    PR_REG_FAIL__COUNT
} pr_registry_fail;
extern const char *const pr_registry_fail_names[]; /* "refused", "timeout", "5xx", "404", "other" */

/* The totals of every client made from one pr_registry_cfg (a pipeline's
 * source.schema_registry), live or freed, and of the schema caches of the
 * readers using them: what /metrics shows per pipeline. Counters only grow
 * for the life of the process (a client freed and made again from the same
 * cfg adds to the same totals). */
typedef struct pr_registry_totals {
    uint64_t fetches;                  /* schemas fetched (answered 200) */
    uint64_t fail[PR_REG_FAIL__COUNT]; /* failed requests, by kind */
    uint64_t cache_evictions;          /* schemas dropped from a full cache */
    int64_t cached;                    /* schemas (and remembered unknown ids) cached now */
} pr_registry_totals;

/* The totals for cfg; false when no client was ever made from it. Any
 * thread (the counters are atomics). */
bool pr_registry_totals_of(const pr_registry_cfg *cfg, pr_registry_totals *t);

/* A reader's schema cache changed: `delta` entries added (or removed, < 0),
 * `evicted` of them dropped to make room. Same thread as the fetches. */
void pr_registry_note_cache(pr_registry *r, int64_t delta, uint64_t evicted);

/* ================================================================ Avro reader
 * (ingest/avro_reader.c; issue 23, source.format avro)
 *
 * A pr_record_read_fn (set on a pr_json_decoder with
 * pr_json_decoder_set_reader) that reads one Avro record per message into
 * the decoder's columns, with the JSON path's dotted paths: a record field or
 * a map key per segment, unions with null (null = the path is null; a null
 * on the way = absent), arrays as lists, enums as their symbol (a string),
 * fixed and bytes as strings (ids), int / long (timestamp-millis / -micros
 * too: declare the event time's unit accordingly) as integers, float /
 * double as numbers, decimal (bytes or fixed) as a number (unscaled / 10^scale).
 * A path the writer schema lacks is absent (the feature's default). An array
 * of records on the way is a list of objects, as in JSON: a list path maps
 * over its items (a null field adds no element); a single-valued path or a
 * second array level there -> wrong_type when such a value is present. A
 * PR_JSON_KEYS / PR_JSON_VALUES path (list: { from: keys }) reads the map
 * at it whole, as the JSON extractor reads an object (pr_json_part): its
 * keys in the encoded order, a repeated key in its first place with its
 * last value, a null value a hole; a null map is absent; a map under an
 * array of records, or no map at the path -> wrong_type.
 *
 * Writer schemas: a fixed one (source.avro.schema_file), or one per schema id
 * from the registry (registry framing). Each writer schema is parsed with
 * avro-c and compiled once into a plan that walks the binary body directly,
 * reading only the wanted values and skipping the rest; plans are cached per
 * id (at most cache_max, the least recently used dropped), so a new id
 * mid-stream is one fetch and one compile. Reasons: bad_framing (framing
 * expected and missing), unknown_schema_id (the registry answered 404; kept
 * for 10 s before asking again), bad_avro (the body does not match its
 * writer schema: truncated, bad lengths or branch indexes, bytes left over),
 * too_deep, and the schema rules of the JSON path (wrong_type,
 * list_too_long). Registry down or slow: PR_EAGAIN (retry later).
 *
 * Threads: one reader per decoder (per decoding thread). */
typedef struct pr_avro_reader pr_avro_reader;

/* A reader for decoder d's paths. schema_json (may be NULL with a registry)
 * is the fixed writer schema; reg (borrowed, may be NULL) the registry;
 * framing as configured (AUTO: registry framing when reg is set).
 * NULL with errstr (a schema avro-c refuses, neither schema nor registry). */
pr_avro_reader *pr_avro_reader_new(const pr_json_decoder *d, const char *schema_json,
                                   pr_registry *reg, pr_avro_framing framing, uint32_t cache_max,
                                   char *errstr, size_t errstr_size);
void pr_avro_reader_free(pr_avro_reader *r); /* NULL ok */
/* The pr_record_read_fn (rd = a pr_avro_reader). */
int pr_avro_read(void *rd, pr_json_block *jb, const void *buf, size_t len, pr_json_reject *rej);

/* A reader for a pipeline's source config (schema_file read here, a registry
 * client made when configured and owned by the reader), set on d, which
 * owns it (pr_json_decoder_for_source calls this for format avro). */
pr_avro_reader *pr_avro_reader_from_cfg(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                                        size_t errstr_size);

/* A fixed writer schema (source.avro.schema_file) as the config loader
 * checks it: pr_avro_schema_load reads and parses `file` (a path relative
 * to the working directory), NULL with errstr naming the file when it
 * cannot be read, does not parse, or its top level is not a record.
 * pr_avro_check_feature resolves path k of f in it as the reader would
 * read it: 0, or PR_EINVAL with errstr ("'user.idd' is not in the writer
 * schema x.avsc (record user has: id, age_days)") when the path is not in
 * the schema, crosses an array of records under a single-valued feature,
 * ends at a record or map, is an array for a single-valued feature or not
 * an array for a list one, or can only give values the feature (its first
 * operator) refuses; for list: { from: keys }, names no map (or a union
 * with one), or a map under an array of records, and with weights: { from:
 * values } (k == PR_FEAT_WEIGHTS_PATH) a map whose values can be other than
 * numbers (int, long, float, double, decimal) or null. With a registry the
 * writer schemas come at run time and none of this applies (a path a
 * writer schema lacks is absent). */
typedef struct pr_avro_schema pr_avro_schema;
pr_avro_schema *pr_avro_schema_load(const char *file, char *errstr, size_t errstr_size);
void pr_avro_schema_free(pr_avro_schema *s); /* NULL ok */
int pr_avro_check_feature(const pr_avro_schema *s, const pr_feature_spec *f, uint8_t k,
                          char *errstr, size_t errstr_size);

/* ---- Avro writer (ingest/avro_writer.c): JSON objects as Avro records ----
 * For tools and tests (`piperec produce|gen --format avro`), not the hot
 * path: a JSON object encoded under a writer schema (fields by name; a union
 * takes null for a missing or null value, else its first branch that fits
 * the value; a missing field takes its default). */
typedef struct pr_avro_writer pr_avro_writer;
pr_avro_writer *pr_avro_writer_new(const char *schema_json, char *errstr, size_t errstr_size);
void pr_avro_writer_free(pr_avro_writer *w); /* NULL ok */
/* One JSON object json[0, len) as an Avro body, after a registry frame with
 * schema id framed_id when framed_id >= 0, into *buf (grown with realloc;
 * *cap its size), *out_len the bytes. 0, or PR_EINVAL with errstr (the value
 * does not fit the schema), PR_ENOMEM. */
int pr_avro_from_json(pr_avro_writer *w, const char *json, size_t len, int64_t framed_id,
                      uint8_t **buf, size_t *out_len, size_t *cap, char *errstr,
                      size_t errstr_size);

/* ================================================================ user Protobuf messages
 * (ingest/pbuser_desc.c, pbuser_decode.c, pbuser_encode.c; issue 23,
 * source.format protobuf)
 *
 * A team's own .proto: its FileDescriptorSet (protoc --descriptor_set_out=F
 * --include_imports) and a message name. The reader is a pr_record_read_fn
 * for the JSON decoder (pr_json_decoder_for_source sets it): it walks the wire bytes
 * once with a plan compiled from the decoder's paths and writes one row of
 * the decoder's pr_json_block, so the declared schema applies to Protobuf
 * events exactly as to JSON ones (same operators, keys, rejects).
 *
 * Paths: dotted field names (or json_names) from the message: nested
 * messages descend ("user.id"); a map<K, V> field takes the next segment as
 * the key ("attrs.color": the value of key "color"; integer keys in decimal,
 * bool keys true / false), then continues into V when V is a message. A list
 * feature needs a repeated field (packed or not, both read), or goes through
 * one repeated message (a list of messages: one element per message, each
 * read as a message of its own; nothing repeated below it); a single-valued
 * feature needs a singular field under no repeated message. A path with
 * part PR_JSON_KEYS names a map field itself (under no repeated message):
 * its entries in wire order, the keys as strings (integers in decimal), the
 * values on the same path's PR_JSON_VALUES column (an entry without its
 * value: the value type's 0); a key that occurs again keeps its first place
 * and takes its last value; max_list counts the keys.
 *
 * Presence: proto2 fields, proto3 `optional` fields, oneof members and
 * message fields have explicit presence: absent = missing (the feature's
 * default applies). Other proto3 singular fields have implicit presence:
 * never missing; absent is the type's default (0, 0.0, false, "", the enum's
 * 0 value) whenever the message holding them is there (a path under an
 * absent message is missing). A map key's entry present: its value, else the
 * value's default. Repeated: absent = empty = length 0. proto2 `[default =]`
 * options are not applied (the feature's `default` is).
 *
 * Values: integers as int64 (uint64 / fixed64 above 2^63 - 1 keep their
 * bits), float / double as numbers, bool, strings (UTF-8 checked, bad_utf8)
 * and bytes (raw) as strings, enums as their symbol name (a number the
 * descriptor does not name: the number). Repeated singular fields keep the
 * last value, a message occurring twice is merged, a oneof member clears the
 * others (protobuf's rules). A path may end at a well-known message field
 * (pr_pb_wkt), read whole: a google.protobuf.Timestamp as its RFC 3339 text
 * (pr_pb_timestamp_text: what `unit: rfc3339` reads), a
 * google.protobuf.Duration as its seconds, a number (pr_pb_duration_seconds);
 * one out of its type's range rejects the record bad_time. Its fields stay
 * paths too (`ts.seconds`).
 *
 * Rejects: malformed wire bytes (truncated, a wire type the field cannot
 * have, a length past the end, field number 0, nesting deeper than 100):
 * bad_protobuf with what and the byte offset; registry framing that does not
 * parse or names another message: bad_framing. The registry's schema id is
 * read but not looked up: the local descriptor set is the schema.
 *
 * Threads: a pr_pbuser_desc is immutable once loaded and may be shared; a
 * reader holds one record's staging: one per decoder (per thread). */
typedef struct pr_pbuser_desc pr_pbuser_desc;
typedef struct pr_pbuser_reader pr_pbuser_reader;

/* Load a descriptor set file and find `message` ("pkg.Name", a leading dot
 * allowed). NULL with errstr: unreadable, not a descriptor set, a type not
 * in the set (no --include_imports), no such message. */
pr_pbuser_desc *pr_pbuser_desc_load(const char *file, const char *message, char *errstr,
                                    size_t errstr_size);
void pr_pbuser_desc_free(pr_pbuser_desc *d);                 /* NULL ok */
const char *pr_pbuser_desc_message(const pr_pbuser_desc *d); /* "pkg.Name" */

/* Check one feature path: PR_EINVAL with errstr ("message shop.Click has no
 * field 'usr'", "'items' is a repeated message: a single-valued feature
 * cannot go through it", "'tags' is repeated: declare a list feature") or 0
 * with *types the PR_FTYPE_* its values read as (pr_feature_check_input
 * says whether the feature can take them). `shape`: how the feature reads
 * the path, PR_JSON_SCALAR, PR_JSON_LIST (a list feature) or PR_JSON_VECTOR
 * (a dense vector: a repeated field, not through a repeated message).
 * `part` PR_JSON_KEYS or PR_JSON_VALUES (list: { from: keys }, weights:
 * { from: values }): the path must name a map field, under no repeated
 * message ("'tags' is not a map field (...): list: { from: keys } reads a
 * map"); *types is then PR_FTYPE_STR for the keys, the value type's for
 * the values (0 for a message). */
int pr_pbuser_check_path(const pr_pbuser_desc *d, const char *path, pr_json_shape shape,
                         pr_json_part part, unsigned *types, char *errstr, size_t errstr_size);

/* A reader for the columns paths[0, n) (a decoder's pr_json_decoder_paths).
 * Borrows d, which must outlive it. NULL with errstr on a bad path. */
pr_pbuser_reader *pr_pbuser_reader_new(const pr_pbuser_desc *d, pr_pb_framing framing,
                                       const pr_json_path *paths, size_t n, char *errstr,
                                       size_t errstr_size);
void pr_pbuser_reader_free(pr_pbuser_reader *r); /* NULL ok */

/* pr_record_read_fn: rd is a pr_pbuser_reader. */
int pr_pbuser_read(void *rd, pr_json_block *jb, const void *buf, size_t len, pr_json_reject *rej);

/* Load cfg's descriptor set and set a reader on `dec` (its paths), owned by
 * dec (freed by pr_json_decoder_free, with its descriptor set): what
 * pr_json_decoder_for_source does for format protobuf. 0 or PR_EINVAL with
 * errstr (the file, the message, a path). */
int pr_pbuser_set_reader(pr_json_decoder *dec, const pr_pbuser_cfg *cfg, char *errstr,
                         size_t errstr_size);

/* The same with the reader borrowed: on success *desc and *reader are the
 * caller's, freed after the decoder (tests, benches). */
int pr_pbuser_attach(pr_json_decoder *dec, const pr_pbuser_cfg *cfg, pr_pbuser_desc **desc,
                     pr_pbuser_reader **reader, char *errstr, size_t errstr_size);

/* The well-known message types the reader reads as one value. */
typedef enum pr_pb_wkt {
    PR_PB_WKT_NONE = 0,
    PR_PB_WKT_TIMESTAMP, /* google.protobuf.Timestamp: an RFC 3339 string */
    PR_PB_WKT_DURATION,  /* google.protobuf.Duration: a number of seconds */
} pr_pb_wkt;

/* The well-known type of the message named `full` ("google.protobuf.Timestamp",
 * a leading dot allowed) whose fields 1 and 2 are of types t1 and t2
 * (FieldDescriptorProto.Type; 0 for a field absent or repeated): the type
 * when both the name and the fields (int64 seconds, int32 nanos) are its,
 * else PR_PB_WKT_NONE. */
pr_pb_wkt pr_pb_wkt_of(const char *full, int t1, int t2);

#define PR_PB_TIME_TEXT_MAX 32 /* "9999-12-31T23:59:59.999999999Z" and its NUL */

/* A Timestamp as protobuf's JSON mapping writes it: UTC, "Z", and 0, 3, 6 or
 * 9 fraction digits, the fewest that hold nanos ("2026-11-29T08:00:00.123Z").
 * Its length (text NUL-terminated), or 0 when it is out of the type's range:
 * nanos outside 0..999999999, seconds before 0001-01-01T00:00:00Z or after
 * 9999-12-31T23:59:59Z. */
size_t pr_pb_timestamp_text(int64_t seconds, int32_t nanos, char text[PR_PB_TIME_TEXT_MAX]);

/* A Duration as seconds + nanos / 1e9 in *out; false when out of the type's
 * range: |seconds| over 315576000000, |nanos| over 999999999, or seconds and
 * nanos of opposite signs. */
bool pr_pb_duration_seconds(int64_t seconds, int32_t nanos, double *out);

/* One JSON object -> the wire bytes of the descriptor's message (for
 * `piperec produce --format protobuf`, tests and benches): keys are field
 * names or json_names, nested objects messages, arrays repeated fields
 * (scalars packed), objects on map fields maps, strings enum names; null and
 * absent keys are not written. With `framed`, registry framing (schema id
 * `schema_id`) goes first. Returns the bytes written to out (growing *out /
 * *cap with realloc) or PR_EINVAL with errstr naming the key. */
int pr_pbuser_encode_json(const pr_pbuser_desc *d, const char *json, size_t len, bool framed,
                          uint32_t schema_id, uint8_t **out, size_t *cap, char *errstr,
                          size_t errstr_size);

#endif
