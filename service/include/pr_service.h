/*
 * pr_service.h — the service component's one public header: the streaming
 * runtime behind `piperec run` and `piperec demo` (pr_service), and the
 * offline driver behind `piperec process` (pr_offline_run, at the end).
 *
 * One pr_service runs every pipeline of a pr_config. Per pipeline there is one
 * thread that turns the loop
 *
 *     consumer poll -> decode into a block -> engine -> batcher -> sinks
 *
 * and keeps the delivery promise: an input offset is stored for commit
 * (rd_kafka_offsets_store, offset + 1) only once the batcher says every batch
 * holding it was acknowledged by every sink. Commits happen on librdkafka's
 * auto-commit timer (of stored offsets only), on partition revoke and at
 * shutdown. Sinks run their own I/O threads; HTTP runs on libmicrohttpd's.
 *
 * Backpressure: when the bytes held by a pipeline (buffered rows + emitted,
 * unacknowledged batches) exceed limits.max_inflight_bytes, every assigned
 * partition is paused; the loop keeps polling (so the consumer stays in its
 * group) and resumes them when the figure drops below half the limit.
 *
 * Vocabulary state (state.dir per pipeline): at start a snapshot is loaded
 * and the journal replayed; during the run new vocabulary entries are
 * journalled before any batch holding them is emitted; a snapshot is written
 * every state.checkpoint_interval_s and at shutdown, then the journal is
 * truncated. So a value keeps its index across restarts.
 *
 * Shutdown (pr_service_request_stop, e.g. from SIGTERM): stop fetching, emit
 * the last partial batches, wait up to drain_timeout_ms for acknowledgements,
 * store and commit safe offsets, save vocabularies, leave the group.
 *
 * Threads: pr_service_new/start/stop/free from one controlling thread;
 * pr_service_request_stop is async-signal-safe; the query functions
 * (stats, render, healthy, ready) may be called from any thread.
 */
#ifndef PR_SERVICE_H
#define PR_SERVICE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pr_clock.h"
#include "pr_config.h"
#include "pr_engine.h"
#include "pr_error.h"
#include "pr_hist.h"
#include "pr_ingest.h"
#include "pr_mbuf.h"

typedef struct pr_service pr_service;

typedef struct pr_service_opts {
    const pr_clock *clock;    /* NULL = pr_clock_real() */
    int64_t drain_timeout_ms; /* bounded wait for acks at shutdown; <= 0 = 10000 */
    int64_t health_stall_ms;  /* /healthz fails when a loop has not turned for this
                               * long; <= 0 = 5000 */
    int64_t max_poll_wait_ms; /* longest single consumer poll; <= 0 = 100. The loop
                               * polls for less when a batch deadline is nearer. */
    bool no_http;             /* do not start the HTTP endpoint even when configured */
} pr_service_opts;

/* Per pipeline figures, a consistent-enough copy for status lines and tests
 * (each field read atomically; not all at the same instant). */
typedef struct pr_pipeline_stats {
    char name[PR_NAME_MAX];
    const char *backend;  /* engine backend in use (static string) */
    uint64_t records_in;  /* rows decoded (accepted by the decoder) */
    uint64_t messages_in; /* Kafka messages consumed */
    uint64_t bytes_in;    /* payload bytes consumed */
    uint64_t rejected;    /* records rejected (decode + engine) */
    uint64_t filtered;    /* records schema.filter dropped */
    uint64_t sampled_out; /* records schema.downsample dropped */
    uint64_t rows_out;    /* rows emitted in batches */
    uint64_t batches_emitted;
    uint64_t batches_acked;
    uint64_t inflight_bytes;      /* buffered + emitted-unacked */
    uint64_t inflight_peak_bytes; /* highest inflight_bytes seen */
    uint32_t assigned_partitions;
    uint32_t paused_partitions;
    int64_t lag;               /* sum over partitions of high watermark - position;
                                * -1 when not known yet */
    uint64_t vocab_size_total; /* sum over sparse columns */
    uint64_t pauses;           /* times backpressure paused the partitions */
    uint64_t loop_turns;       /* pipeline loop iterations (tests wait on it) */
    /* Where the pipeline thread's wall time goes (ns; benches read it):
     * consumer polls that brought no row (starved: nothing fetched yet),
     * polls that brought rows, and waits for the worker (its block busy or
     * waiting for the vocab log while the next block is full). */
    uint64_t poll_empty_ns, poll_rows_ns, worker_wait_ns;
    pr_hist_snapshot fresh_emit; /* event time -> batch emitted, seconds */
    pr_hist_snapshot fresh_ack;  /* batch emitted -> acknowledged, seconds */
} pr_pipeline_stats;

/* Build every pipeline (engines, consumers, batchers, sinks, state) from a
 * config that passed pr_config_check_streaming. cfg must outlive the service.
 * Nothing runs yet. On failure returns a negative PR_E* and a reason. */
int pr_service_new(const pr_config *cfg, const pr_service_opts *opts, pr_service **out,
                   char *errstr, size_t errstr_size);

/* Start the pipeline threads and the HTTP endpoint. */
int pr_service_start(pr_service *svc, char *errstr, size_t errstr_size);

/* Ask every pipeline to drain and stop; returns at once. Async-signal-safe. */
void pr_service_request_stop(pr_service *svc);
/* True once a stop was requested or a pipeline failed for good. */
bool pr_service_stopping(const pr_service *svc);

/* Request stop (if not yet), wait for the drain and join every thread.
 * Returns 0 when every pipeline drained cleanly (all emitted batches acked,
 * offsets committed), PR_ETIMEDOUT when acks were still missing at the drain
 * deadline (their offsets stay uncommitted: they will be redelivered), or the
 * first fatal pipeline error. Idempotent. */
int pr_service_stop(pr_service *svc);

/* Stop if needed and release everything. NULL is fine. */
void pr_service_free(pr_service *svc);

/* ---------------------------------------------------------------- queries */

size_t pr_service_n_pipelines(const pr_service *svc);
int pr_service_pipeline_stats(pr_service *svc, size_t i, pr_pipeline_stats *st);

/* Bound ports (useful when the config says port 0); 0 when not listening. */
uint16_t pr_service_http_port(const pr_service *svc);
uint16_t pr_service_trainer_port(const pr_service *svc, size_t pipeline);

/* /healthz: every pipeline loop turned within health_stall_ms and none failed. */
bool pr_service_healthy(pr_service *svc, char *why, size_t why_size);
/* /readyz: every pipeline has partitions assigned and at least one sink able to
 * accept a batch. */
bool pr_service_ready(pr_service *svc, char *why, size_t why_size);

/* The whole /metrics body (Prometheus text 0.0.4). */
void pr_service_render_metrics(pr_service *svc, pr_mbuf *mb);
/* The /v1/status body (JSON). */
void pr_service_render_status(pr_service *svc, pr_mbuf *mb);

/* ---------------------------------------------------------------- offline
 *
 * The offline driver: raw Criteo TSV (file or stdin) through
 * the engine into .npy files. `piperec process` is a thin CLI over it.
 *
 * Output in DIR: dense.npy (float32 [N, n_dense]), sparse.npy (int32 or int64
 * [N, n_sparse], as pr_engine_sparse_width), labels.npy (int32 [N], when the
 * spec has a label), vocab/<col>.tsv (pr_vocab_export) and rejects.tsv
 * (one line per rejected input line: "line<TAB>reason<TAB>detail<TAB>original
 * line", in line order, reasons named by pr_decode_reason_name), and, only
 * when some column evicts, recycled.npy (int64 [K, 4]: column, output row,
 * index, number of each recycled-index notice, in row order; docs/formats.md).
 * N counts accepted rows only; row i of every array is the i-th accepted line.
 *
 * Shape of the run: the input is cut into chunks of whole lines; `threads`
 * workers (the calling thread and threads - 1 more) decode chunks into
 * blocks in parallel and take turns at two serial stages, each strictly in
 * input order: the engine, then writing; so output never depends on the
 * thread count. With count_mode
 * two_pass (and min_count > 1) the input is read twice: a pass of
 * pr_engine_count, then the real pass; stdin is first spooled to an unlinked
 * temporary file for that. Regular files are mmap'd.
 *
 * Errors: 0 or a negative PR_E* code with the reason in errstr (PR_EIO with
 * the path and strerror for I/O; PR_EFULL when a vocabulary fills up).
 */
/* Default rows per block. Small on purpose: a block of 8192 Criteo rows is
 * ~5 MB (hex slots dominate), so the decoder's writes and the engine's reads
 * stay in L2/L3; 65536-row blocks measured ~1.5x slower end to end. */
#define PR_OFFLINE_BLOCK_ROWS 8192

typedef struct pr_offline_opts {
    const char *input;           /* path, or "-" for stdin */
    const char *output_dir;      /* created when missing */
    int threads;                 /* workers (decode, engine and write stages), >= 1 */
    uint32_t block_rows;         /* rows per engine block; 0 = PR_OFFLINE_BLOCK_ROWS */
    bool progress;               /* progress line on stderr while running */
    const char *vocab_seed;      /* NULL, or a directory for pr_vocab_import */
    bool buffered_io;            /* .npy files through the page cache; default O_DIRECT
                                  * where the filesystem takes it (PR_NPY_DIRECT) */
    const pr_source_cfg *source; /* declared schema: the source (formats avro and protobuf:
                                  * varint-delimited records, docs/formats.md); NULL = JSON
                                  * lines */
    bool frozen;    /* after the seed, look up only (pr_engine_vocab_serve): nothing added */
    int64_t unseen; /* frozen, profile dlrm: the index of an id without one */
} pr_offline_opts;

typedef struct pr_offline_result {
    uint64_t lines;                      /* input lines seen */
    uint64_t rows;                       /* rows written */
    uint64_t rejected;                   /* lines rejected (all reasons) */
    uint64_t rejected_by[PR_DEC__COUNT]; /* by pr_decode_reason */
    uint64_t filtered;                   /* records schema.filter dropped (no row, no reject) */
    uint64_t sampled_out;                /* records schema.downsample dropped (likewise) */
    uint64_t bytes;                      /* input bytes */
    double seconds;                      /* wall time of the whole run */
    uint8_t sparse_width;                /* 4 or 8 */
    /* Where the time went, in thread-seconds (stages overlap, so they can sum
     * to more than `seconds`): decoding (all workers), the engine stage, the
     * write stage (.npy transposes, writes or waiting for the O_DIRECT
     * ones, rejects.tsv), the workers waiting for work; then the vocabulary
     * export (one thread, after the pass). Both passes of a two_pass run. */
    double decode_s, engine_s, write_s, idle_s, vocab_s;
    /* After the pass (issue 21): the export's thread-seconds (its workers)
     * and its longest task (one column or one piece: the export's wall time
     * on unlimited threads), and the wall time closing the outputs (.npy
     * headers, rejects.tsv) before it. Zero where a driver does not say. */
    double vocab_thread_s, vocab_longest_s, close_s;
    /* Of engine_s and write_s, the time spent holding the input order (the
     * in-order engine and write stages; the Criteo layout): the serial
     * fraction that bounds the speed-up from more threads (Amdahl). */
    double serial_engine_s, serial_write_s;
    /* Declared schemas: per round its longest chain of first appearances
     * (one column's, in input order), summed. The chains run beside the next
     * round's decoding; only the part past it counts in serial_engine_s. */
    double chain_s;
    /* Each engine column's name and vocabulary size after the run
     * (pr_engine_vocab_size: the embedding-table size; 0 without vocab). A
     * declared schema's engine has a column only for the sparse features that
     * reach it, so match by name. */
    uint32_t n_vocab;
    uint64_t vocab_sizes[PR_MAX_SPARSE];
    char vocab_names[PR_MAX_SPARSE][PR_NAME_MAX];
    uint64_t unseen; /* frozen: ids without an index (OOV, or `unseen` under dlrm) */
} pr_offline_result;

/* `piperec process`'s output directory (service/offline_meta.c). Before a run:
 * remove what an earlier run left there that this one may not rewrite, so
 * nothing stale is read beside it: dense.npy, sparse.npy, labels.npy,
 * meta.json, sparse/<name>.values.npy and .lengths.npy, vocab/<name>.tsv
 * (rejects.tsv is rewritten; recycled.npy is the drivers'). Only those names:
 * other files in DIR stay, and vocab/ stays whole when it is the run's
 * vocabulary seed (`vocab_seed`, NULL = none: transform.vocab.seed naming
 * the vocab/ an earlier run wrote there). 0 or PR_EIO with the path. */
int pr_offline_clear_outputs(const char *dir, const char *vocab_seed, char *errstr,
                             size_t errstr_size);

/* After a run: DIR/meta.json, the keys of a files-sink roll's meta.json that
 * an offline run has (docs/formats.md): pipeline, rows, rejected, n_dense,
 * n_sparse, sparse_width, vocab_sizes, and sparse_names (Criteo layout) or
 * jagged, n_labels, feature_keys, label_names, dense_names (declared schema).
 * `schema` NULL = the Criteo layout of `spec`. Written to a temporary name and
 * renamed. 0 or PR_EIO. */
int pr_offline_write_meta(const char *dir, const char *pipeline, const pr_pipeline_spec *spec,
                          const char (*dense_names)[PR_NAME_MAX], const pr_feature_schema *schema,
                          const pr_offline_result *res, char *errstr, size_t errstr_size);

/* Engine threads that suit `workers` offline workers: the engine stage runs
 * beside decoding on the other workers, so its own pool stays at 1 thread
 * below 8 workers (helpers would only take cores from decoding), then
 * workers / 4 (one engine thread could not keep up with 8+ decoders). With
 * several workers the pool only serves jobs run whole (specs the engine's
 * halves cannot split: hash-table or evicting vocabularies, streaming
 * min_count); split jobs run on the workers themselves (offline.c). */
int pr_offline_engine_threads(int workers);

/* Run the whole job. `eopts` configures the engine (backend, threads). */
int pr_offline_run(const pr_pipeline_spec *spec, const pr_engine_opts *eopts,
                   const pr_offline_opts *opts, pr_offline_result *res, char *errstr,
                   size_t errstr_size);

/* The same job for a declared feature schema (issue 20, service/offline_schema.c):
 * the input is JSON lines, or for source.format avro and protobuf
 * varint-delimited records (a varint length, then the message, as protobuf's
 * writeDelimitedTo; each may be registry-framed; a zero-length record is
 * rejected `empty`, as Kafka's empty payloads are; "line" numbers
 * are then record numbers from 1) (JSON lines: one object per line; blank
 * lines skipped; the
 * first non-blank line must start with '{', else PR_EINVAL: the input is not
 * JSON lines), the engine spec is pr_feature_engine_spec(schema, base), and
 * the outputs are the offline layout (pr_npy_jagged: labels.npy, dense.npy,
 * sparse/<name>.values.npy and .lengths.npy), vocab/<name>.tsv, rejects.tsv
 * (line, reason, detail, record) and recycled.npy when a vocabulary evicts
 * (feature index among sparse features, output row, index, number).
 * Records are decoded by the streaming decoder (pr_json_decoder,
 * pr_decode_json_line), so a line is kept or rejected, and with the same
 * reason (res->rejected_by, rejects.tsv), as the same event on a
 * `source.format: json` pipeline. opts->threads workers decode in parallel,
 * the engine uses eopts->threads; outputs never depend on either, nor on the
 * block size. */
int pr_offline_run_schema(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                          const pr_engine_opts *eopts, const pr_offline_opts *opts,
                          pr_offline_result *res, char *errstr, size_t errstr_size);

/* `piperec process --fit` (issue 20, service/offline_fit.c): one pass over
 * `input` with the streaming decoder, read as `piperec process` reads it:
 * JSON lines, or for source->format avro and protobuf varint-delimited
 * records (the decoder set up by pr_json_decoder_for_source, the records
 * read by the same reader, an Avro container file refused, a zero-length
 * record rejected; `source` NULL = JSON lines); for every dense feature with a
 * `standardize` step, the mean and population std (Welford, input order) of the
 * value as it reaches that step (missing values skipped, rejected records skipped
 * and counted), written to `out` as YAML (name: { standardize: { mean, std } },
 * %.17g) and, with `pipeline`, as a comment holding the `--set` that puts the
 * numbers into the config (the feature's whole ops list). A weighted list whose
 * weights.ops has a standardize step: the same over its kept weights, keyed
 * NAME.weights, the --set naming its weights.ops. PR_EINVAL when the schema is not declared
 * or has no standardize step. */
typedef struct pr_fit_result {
    uint64_t lines, rejected; /* non-blank lines (or records) read; of them rejected */
    uint64_t filtered;        /* of them dropped by schema.filter or downsample (not fitted) */
    uint32_t features;        /* features fitted */
    uint32_t degenerate;      /* of them with std 0 or no value */
} pr_fit_result;

int pr_offline_fit(const pr_feature_schema *schema, const pr_source_cfg *source,
                   const char *pipeline, const char *input, FILE *out, pr_fit_result *res,
                   char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- transform
 *
 * The row each event becomes, with the vocabulary as it stands, for a model
 * in serving or a held-out set (service/transform.c; `piperec transform`,
 * `piperec serve`): the pipeline's own decoder (source.format) and engine,
 * the engine's vocabulary frozen by pr_engine_vocab_serve (a known id gets
 * its index; one without gets OOV, under profile dlrm `unseen`; nothing is
 * added). schema.filter and schema.downsample do not apply, and a record
 * without its own event time is timed when its block starts.
 *
 * Output: one JSON line per event, in input order: {"labels":{..},
 * "dense":{..},"sparse":{..}[,"weights":{..}]} for a row (a single-valued
 * sparse feature a number, a list or a dense vector an array), or
 * {"error":REASON,"detail":".."} for an event the decoder rejected
 * (pr_decode_reason_name). Lines come out in blocks: pr_transform_event may
 * write the lines of earlier events when its block fills, and
 * pr_transform_flush writes the rest.
 *
 * One pr_transform belongs to one thread at a time. Its engine too, unless
 * the transforms that share it each have the same `seq_mu`: then each runs
 * a block's first half (decoding, operators, lookups of known ids:
 * pr_engine_process_par) on its own thread and only the second half under
 * seq_mu, and the caller keeps the vocabulary from changing while any of
 * them runs (a reload's swap, a vocabulary log's apply). */
typedef struct pr_transform pr_transform;

typedef struct pr_transform_opts {
    const pr_pipeline_cfg *pc; /* borrowed: outlives the transform */
    pr_engine *eng;            /* borrowed: pc's engine spec, the vocabulary loaded */
    int64_t unseen;            /* profile dlrm: the index of an id without one (>= 0) */
    pthread_mutex_t *seq_mu;   /* NULL: the engine is this transform's alone */
} pr_transform_opts;

typedef struct pr_transform_counts {
    uint64_t events, rows, rejected;
    uint64_t unseen; /* ids that had no index (OOV, or `unseen` under dlrm) */
    uint64_t by_reason[PR_DEC__COUNT];
} pr_transform_counts;

/* 0 or a negative PR_E* with errstr (PR_ENOTSUP: the engine backend cannot
 * serve; PR_EINVAL: a decoder that cannot be built). */
int pr_transform_new(const pr_transform_opts *o, pr_transform **out, char *errstr,
                     size_t errstr_size);
/* One record of the source format (a JSON line, a Criteo line, an Avro or
 * Protobuf message as on Kafka). A rejected record is not an error: it gets
 * its error line. PR_EAGAIN: the record cannot be read yet (the schema
 * registry is down). */
int pr_transform_event(pr_transform *t, const void *rec, size_t len, pr_mbuf *out, char *errstr,
                       size_t errstr_size);
int pr_transform_flush(pr_transform *t, pr_mbuf *out, char *errstr, size_t errstr_size);
/* Another engine of the same pipeline (a reloaded vocabulary), put into
 * serving mode; the old one is the caller's to free (after the swap is
 * decided: pr_transform_engine_back puts it back without allocating, for a
 * caller whose swap of several transforms failed half way). Between
 * flushes only. */
int pr_transform_set_engine(pr_transform *t, pr_engine *eng, char *errstr, size_t errstr_size);
void pr_transform_engine_back(pr_transform *t);
void pr_transform_get_counts(const pr_transform *t, pr_transform_counts *c);
/* The counts put back (serve: a request answered with an error counts none
 * of its events). */
void pr_transform_set_counts(pr_transform *t, const pr_transform_counts *c);
void pr_transform_free(pr_transform *t); /* NULL ok; not the engine */

/* The rows as one batch in the trainer stream's raw layout instead of JSON
 * lines (`piperec serve`'s ?layout=raw; docs/serving.md): after
 * pr_transform_raw_begin, the rows of pr_transform_event and _flush are kept
 * and their `out` gets only the rejected events' lines, each with its
 * event's index in the answer ({"index":I,"error":..,"detail":..});
 * pr_transform_raw_end (after the last flush) makes the kept rows one batch,
 * named and sized as the training batches are, and frames it as the trainer
 * stream does (pr_batch_raw_frame: *frame malloc'd, its payload at
 * *payload_at), then goes back to JSON lines. frame NULL: the rows are
 * dropped. 0 or PR_ENOMEM / PR_EINVAL with errstr. */
void pr_transform_raw_begin(pr_transform *t);
int pr_transform_raw_end(pr_transform *t, uint8_t **frame, size_t *len, size_t *payload_at,
                         char *errstr, size_t errstr_size);

/* How records follow each other in a body or a file: `lines` (one a line,
 * a trailing CR dropped, blank lines skipped: json, criteo_tsv),
 * `delimited` (each an unsigned LEB128 length and its bytes, as `piperec
 * process` reads avro and protobuf files), `single` (all of it is one; an
 * empty body none). */
typedef enum pr_framing {
    PR_FRAMING_LINES,
    PR_FRAMING_DELIMITED,
    PR_FRAMING_SINGLE,
    PR_FRAMING__COUNT
} pr_framing;
extern const char *const pr_framing_names[PR_FRAMING__COUNT];
pr_framing pr_framing_default(pr_msg_format fmt); /* lines for json and criteo_tsv */
/* The record at buf[*at, len): 1 with rec/n and *at past it, 0 at the end,
 * PR_EINVAL with errstr for a bad or truncated length. */
int pr_framing_next(pr_framing fr, const char *buf, size_t len, size_t *at, const char **rec,
                    size_t *n, char *errstr, size_t errstr_size);
/* Every record of buf read through: 0, or PR_EINVAL as pr_framing_next (a
 * body or a file refused whole before any of it is used). */
int pr_framing_check(pr_framing fr, const char *buf, size_t len, char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- serve
 *
 * `piperec serve` (service/serve.c): the transform behind HTTP, on its own
 * listener: POST /v1/transform (the body's events, framed `lines`,
 * `delimited` or `single`: query `framing`, default lines for json and
 * criteo_tsv, delimited otherwise; 200 with one JSON line per event, 400
 * for a broken framing, 413 over 64 MiB, 503 when a record cannot be read
 * yet), GET /healthz, /metrics, /v1/status. Up to `threads` requests are
 * answered at once, each with one vocabulary from start to end. The caller
 * loads the vocabulary into an engine and hands it over (pr_serve_start,
 * pr_serve_swap: the serve owns it from then on). */
typedef struct pr_serve pr_serve;

typedef struct pr_serve_opts {
    const pr_pipeline_cfg *pc;               /* borrowed */
    const char *listen;                      /* host:port; port 0 picks one (pr_serve_port) */
    const char *tls_cert, *tls_key, *tls_ca; /* HTTPS when tls_cert is set (as http.tls) */
    int64_t unseen;                          /* pr_transform_opts.unseen */
    const char *vocab_source;                /* for /v1/status: where the vocabulary comes from */
    unsigned threads; /* requests answered at once (HTTP threads), 1..PR_SERVE_MAX_THREADS; 0 = 1 */
} pr_serve_opts;
#define PR_SERVE_MAX_THREADS 64

/* Takes `eng` on success; on failure it stays the caller's. 0 or a
 * negative PR_E* with errstr. */
int pr_serve_start(const pr_serve_opts *o, pr_engine *eng, pr_serve **out, char *errstr,
                   size_t errstr_size);
uint16_t pr_serve_port(const pr_serve *s);
unsigned pr_serve_threads(const pr_serve *s);
/* A reloaded vocabulary's engine in place of the one in use, between two
 * requests; takes `eng` (freed when it is refused). */
int pr_serve_swap(pr_serve *s, pr_engine *eng, char *errstr, size_t errstr_size);
/* A reload that failed: counted, and `why` shown in /v1/status. */
void pr_serve_load_failed(pr_serve *s, const char *why);
/* fn(opaque, the engine in use) with no request running (a vocabulary
 * log's records applied to it); fn must leave the engine in serving mode.
 * Requests wait meanwhile: keep each call short (a bounded step). */
void pr_serve_locked(pr_serve *s, void (*fn)(void *opaque, pr_engine *eng), void *opaque);
/* A vocabulary log followed (`--from-log`): where it stands, for /v1/status
 * and /metrics. */
void pr_serve_set_log_position(pr_serve *s, int64_t applied, int64_t end);
void pr_serve_get_counts(pr_serve *s, pr_transform_counts *c);
void pr_serve_stop(pr_serve *s); /* NULL ok */

#endif
