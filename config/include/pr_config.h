/*
 * pr_config.h — piperec's configuration: YAML (libyaml) parsed into plain C
 * structs, validated with messages a user can act on.
 *
 * Every message names the file, the YAML line and the full key path, then
 * the problem:
 *
 *     config.yaml:12: pipelines[0].batch.size: expected an integer, got 'abc'
 *     config.yaml:3: pipelines[0].sorce: unknown key (valid: name, source, ...)
 *
 * Loading collects several errors (one per line in errstr) before failing, so
 * a user fixes a file in one go. The reference of every key (type, default,
 * meaning) is docs/configuration.md, generated from the key tables: each
 * component's own table (pr_cfgmap.h) for its section, pr_config.c's for the
 * structure around them. They are the single source of truth for names,
 * defaults and ranges.
 *
 * Two validation levels:
 *   - pr_config_load_*: everything `piperec process` (offline) needs: shape,
 *     operators, ranges, enums, names, addresses. Sources and sinks are optional.
 *   - pr_config_check_streaming(): what `piperec run` needs on top: every
 *     pipeline has a Kafka source with topics and bootstrap.servers, and at
 *     least one enabled sink.
 *
 * Ownership: a pr_config owns every string and array it points to; free it all
 * with pr_config_free(). Nothing in it is shared. Not thread-safe: load it
 * once, then treat it as read-only (concurrent readers are fine).
 *
 * Errors: 0 or a negative PR_E* code (PR_EINVAL for a bad config, PR_EIO for
 * an unreadable file, PR_ENOMEM).
 */
#ifndef PR_CONFIG_H
#define PR_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pr_batcher.h"
#include "pr_cfgmap.h"
#include "pr_engine.h"
#include "pr_error.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "pr_mbuf.h"
#include "pr_sink.h"
#include "pr_vocab.h"

/* ---------------------------------------------------------------- enums */

/* The enums of the config are the components' own (the names below are
 * kept for callers of this header):
 *   source.format      pr_msg_format (pr_ingest.h)
 *   batch.ordering     pr_batch_ordering (pr_batcher.h)
 *   batch.late_policy  pr_batch_late_policy (pr_batcher.h) */
typedef pr_msg_format pr_source_format;
#define PR_FORMAT_CRITEO_TSV           PR_MSG_CRITEO_TSV
#define PR_FORMAT_PROTOBUF_EVENT       PR_MSG_PROTOBUF_EVENT
#define PR_FORMAT_PROTOBUF_EVENT_BATCH PR_MSG_PROTOBUF_EVENT_BATCH
#define PR_FORMAT_JSON                 PR_MSG_JSON
#define PR_FORMAT_AVRO                 PR_MSG_AVRO
#define PR_FORMAT_PROTOBUF             PR_MSG_PROTOBUF
#define PR_FORMAT__COUNT               PR_MSG__COUNT

typedef pr_batch_ordering pr_ordering;
#define PR_ORDERING_PARTITION  PR_BATCH_ORDER_PARTITION
#define PR_ORDERING_EVENT_TIME PR_BATCH_ORDER_EVENT_TIME
#define PR_ORDERING__COUNT     2

typedef pr_batch_late_policy pr_late_policy;
#define PR_LATE_EMIT        PR_BATCH_LATE_EMIT
#define PR_LATE_DROP_TO_DLQ PR_BATCH_LATE_DROP_TO_DLQ
#define PR_LATE__COUNT      2

/* Config names of the enum values; *_from_name returns -1 when unknown. */
const char *pr_source_format_name(pr_source_format f);
int pr_source_format_from_name(const char *name);

/* ---------------------------------------------------------------- structs */

/* Sections owned by a component (struct, keys, defaults and docs in one
 * table there), filled directly by the loader:
 *   source          pr_source_cfg        pr_ingest.h   pr_source_cfgmap
 *   source.kafka    pr_kafka_source_cfg  pr_ingest.h   pr_kafka_source_cfgmap
 *   batch           pr_batch_cfg         pr_batcher.h  pr_batch_cfgmap
 *   sinks.trainer   pr_trainer_sink_cfg  pr_sink.h     pr_sink_trainer_cfgmap
 *   sinks.kafka     pr_kafka_sink_cfg    pr_sink.h     pr_sink_kafka_cfgmap
 *   sinks.files     pr_files_sink_cfg    pr_sink.h     pr_sink_files_cfgmap
 *   engine          pr_engine_opts       pr_engine.h   pr_engine_cfgmap
 *   vocab_log       pr_vocablog_cfg      pr_vocab.h    pr_vocablog_cfgmap
 * The sections below (state, http, limits) belong to the service, which sits
 * above this layer, so their tables live in pr_config.c. In a pr_config every
 * string and list of those structs is owned by the config. */

/* Vocabulary durability: snapshot + journal under dir. */
typedef struct pr_state_cfg {
    bool enabled;                  /* state present (and enabled: true) */
    char *dir;                     /* required when enabled */
    int64_t checkpoint_interval_s; /* >= 1; default 60 */
} pr_state_cfg;

typedef struct pr_pipeline_cfg {
    char name[PR_NAME_MAX]; /* same as spec.name; unique across pipelines */
    pr_pipeline_spec spec;  /* schema + transform, ready for pr_engine_new */
    char dense_names[PR_MAX_DENSE_COLS][PR_NAME_MAX]; /* "I1".., schema.dense_names, or a
                                                       * declared schema's dense columns */
    pr_source_cfg source;
    pr_batch_cfg batch;
    pr_sinks_cfg sinks;
    pr_state_cfg state;
    pr_vocablog_cfg vocab_log; /* vocab_log section (pr_vocab.h); enabled = present */
    char *vocab_seed;          /* transform.vocab.seed: directory of <col>.tsv, or NULL */
    /* The features (pr_engine.h): the declared schema (features.declared) or
     * the Criteo preset of `spec`; event time, labels, dense, sparse in that
     * order; the array is owned by the config. A declared schema also sets
     * spec's counts and names (dense_names, sparse[].name) from its features. */
    pr_feature_schema features;
    int line; /* 1-based YAML line of this pipeline; 0 if none */
} pr_pipeline_cfg;

typedef struct pr_http_tls_cfg {
    bool enabled;    /* the `tls` section is present (and enabled: true) */
    char *cert_file; /* PEM server certificate (chain); required */
    char *key_file;  /* PEM private key; required */
    char *ca_file;   /* PEM CAs for client certificates: set = mutual TLS */
} pr_http_tls_cfg;

typedef struct pr_http_cfg {
    bool enabled;        /* default true */
    char *listen;        /* default "127.0.0.1:9464" */
    pr_http_tls_cfg tls; /* HTTPS (service/pr_http.h) */
} pr_http_cfg;

/* The engine section is pr_engine_opts itself (strings owned by the config). */
typedef pr_engine_opts pr_engine_cfg;

typedef struct pr_limits_cfg {
    uint64_t max_inflight_bytes; /* default 256 MiB */
} pr_limits_cfg;

/* Hot sets (service/pr_hot.h): a decayed top-k sketch per sparse column. */
typedef struct pr_hot_cfg {
    uint32_t top_k; /* largest k served; 0 = off; default 0 (off: it costs ~86 ns per value in the
                       pipeline thread) */
    uint64_t half_life_records; /* decay half-life in records; default 10000000 */
} pr_hot_cfg;

typedef struct pr_config {
    char *origin; /* file name or the origin given to load_string */
    pr_pipeline_cfg *pipelines;
    size_t n_pipelines; /* >= 1 */
    pr_http_cfg http;
    pr_engine_cfg engine;
    pr_limits_cfg limits;
    pr_hot_cfg hot;
    pr_log_level log_level;     /* log.level: error|warn|info|debug; default info */
    struct pr__config_src *src; /* internal: source text and overrides, for pr_config_set */
} pr_config;

/* ---------------------------------------------------------------- API */

/* Parse and validate. On success *out is a new config (free with
 * pr_config_free). On failure *out is NULL, the return is negative and errstr
 * holds one line per error found ("origin:line: key.path: problem"). */
int pr_config_load_file(const char *path, pr_config **out, char *errstr, size_t errstr_size);
int pr_config_load_string(const char *yaml, size_t len, const char *origin, pr_config **out,
                          char *errstr, size_t errstr_size);
void pr_config_free(pr_config *cfg);
/* pr_config_load_file with overrides applied before validation, as
 * pr_config_set would apply them (paths and values as there), so that an
 * override can make a file valid (e.g. engine.backend for a config whose
 * backend cannot run its operators). The overrides are kept for later
 * pr_config_set calls. */
int pr_config_load_file_with(const char *path, char *const *ov_path, char *const *ov_value,
                             size_t n_ov, pr_config **out, char *errstr, size_t errstr_size);

/* The embedded default config (Criteo: label, 13 dense, 26 sparse, dense
 * [neg2zero, log1p], sparse [hex2int, {modulus: 524288}, vocab], profile
 * dlrm; one pipeline "criteo" reading topic `events` as criteo_tsv from
 * bootstrap.servers "127.0.0.1:0" (an unroutable address the demo replaces), batch
 * 4096 rows / 100 ms / partition order, trainer sink on 127.0.0.1:7070, http
 * on 127.0.0.1:9464, engine cpu with 2 threads, limits 256 MiB). Used by
 * `piperec demo` and by `piperec process` without --config. Static storage. */
const char *pr_config_default_yaml(void);
/* pr_config_load_string(pr_config_default_yaml(), ..., "<default>", ...). */
int pr_config_load_default(pr_config **out, char *errstr, size_t errstr_size);

/* The extra checks of streaming mode (`piperec run`, `piperec demo`): every
 * pipeline has source.kafka with >= 1 topic and a bootstrap.servers property,
 * at least one enabled sink, and count_mode streaming. Reports every problem
 * found, one per line, like loading does. */
int pr_config_check_streaming(const pr_config *cfg, char *errstr, size_t errstr_size);

/* `piperec run --check`'s last step: every Kafka client of each pipeline
 * (consumer, dead letters, Kafka sink, vocab log) built from its
 * properties, ${env:}/${file:} values resolved, as the service builds it,
 * then destroyed before it waited for a broker: a misspelt property, a bad
 * value, an unset variable or an unreadable TLS file fails here, naming the
 * key (one report per pipeline). Not part of every start, which builds the
 * clients anyway (and would run a GSSAPI kinit or an OIDC token fetch
 * twice). */
int pr_config_check_kafka(const pr_config *cfg, char *errstr, size_t errstr_size);

/* Override one setting after loading, e.g. from the command line:
 *
 *     pr_config_set(cfg, "engine.backend", "hls-sim", ...)
 *     pr_config_set(cfg, "pipelines[0].batch.size", "1024", ...)
 *     pr_config_set(cfg, "pipelines[*].source.kafka.properties.bootstrap.servers",
 *                   "127.0.0.1:39092", ...)
 *     pr_config_set(cfg, "pipelines[criteo].sinks.trainer.listen", "127.0.0.1:0", ...)
 *
 * `value` is read as a YAML value (so "[a, b]" is a list). pipelines[N] picks
 * by index, pipelines[NAME] by name, pipelines[*] all. Under `properties` the
 * rest of the path is the property name (dots included), set or replaced.
 * The same type and range checks as loading apply, and the whole config is
 * re-validated; on failure cfg is left unchanged. On success the config is
 * rebuilt in place: pointers into it (pipelines, strings) taken before the
 * call are no longer valid. Overrides survive later pr_config_set calls. */
int pr_config_set(pr_config *cfg, const char *path, const char *value, char *errstr,
                  size_t errstr_size);

/* The pipeline named `name`, or NULL. */
const pr_pipeline_cfg *pr_config_pipeline(const pr_config *cfg, const char *name);

/* Engine options borrowing cfg's strings (valid while cfg lives). */
pr_engine_opts pr_config_engine_opts(const pr_config *cfg);

/* Parse a size: plain number or with a unit B, KiB, MiB, GiB, TiB, KB, MB,
 * GB, TB (optional space before the unit). Returns 0 or PR_EINVAL. */
int pr_config_parse_size(const char *s, uint64_t *out);

/* Write the key reference (every key path, type, default, doc) as a Markdown
 * table, generated from the key tables. */
void pr_config_write_reference(FILE *f);

/* ---------------------------------------------------------------- inference */

/* `piperec infer` (config_infer.c): statistics of sample events per field
 * path, and the declared-schema config they suggest (event time, labels,
 * dense features with a transform fitted to the sample, ids and lists with a
 * vocabulary; every line commented with what was seen, the fields left out
 * listed with the reason). Rules: docs/configuration.md, "Inferring a
 * schema". One thread; the same events in the same order give the same text. */
typedef struct pr_infer pr_infer;

typedef struct pr_infer_opts {
    const char *name;      /* the pipeline's name; NULL: "events" */
    const char *topic;     /* NULL: the name */
    const char *bootstrap; /* NULL: "127.0.0.1:9092" */
    /* comma-separated items, exactly these labels (NULL: detected): PATH (a
     * number or true/false), or PATH=V1|V2|... (a label by value: `in:`) */
    const char *labels;
    const char *time_path;         /* the event time's path; NULL: detected; "": none */
    const char *ignore;            /* comma-separated paths left out, with every field under them */
    const char *origin;            /* where the events came from, for the first comment */
    const char *avro_schema_file;  /* NULL: format json; else format avro with this schema_file */
    const char *pb_descriptor_set; /* else, with pb_message: format protobuf */
    const char *pb_message;        /* "pkg.Name" */
    /* Kafka client properties (security.protocol, sasl.*, ...) for the
     * config's source.kafka.properties: a secret's raw value (a key naming a
     * password, secret or token) is written as ${env:PIPEREC_KAFKA_<KEY>}, a
     * ${env:} / ${file:} reference as given. */
    const pr_kv *kafka_props;
    size_t n_kafka_props;
} pr_infer_opts;

typedef struct pr_infer_summary {
    bool event_time;
    size_t labels, dense, sparse, lists, skipped; /* sparse counts the lists too */
    /* values of labels by value (--labels PATH=V1|V2) that no event of the
     * sample holds, "PATH=V, ..." (cut to fit), or "" */
    char label_values_unseen[256];
} pr_infer_summary;

int pr_infer_new(pr_infer **out); /* 0 or PR_ENOMEM */
void pr_infer_free(pr_infer *inf);
/* One event: the JSON text of one object. PR_EBADREC (counted in
 * pr_infer_rejected, nothing else kept; why in pr_infer_last_error) when it
 * is not one, or repeats a key; PR_ENOMEM. */
int pr_infer_add_json(pr_infer *inf, const char *text, size_t len);
const char *pr_infer_last_error(const pr_infer *inf);
/* Avro records (config_infer_avro.c): varint-delimited binary bodies, as
 * `piperec process` reads format avro, plain or behind a schema-registry
 * header (most of them so: the config says framing: registry), each
 * decoded with the writer schema in
 * schema_file and added as the event the Avro reader sees (a union as its
 * branch, an enum as its symbol, ...), until max_events events were added or
 * f ends. A record that does not decode is counted in pr_infer_rejected.
 * PR_EINVAL with errstr for a schema that does not load; PR_EIO; PR_ENOMEM. */
int pr_infer_add_avro_records(pr_infer *inf, const char *schema_file, FILE *f, uint64_t max_events,
                              char *errstr, size_t errstr_size);
/* Protobuf messages (config_infer_pb.c): varint-delimited messages, as
 * `piperec process` reads format protobuf, each decoded with the message
 * `message` of the descriptor set in descriptor_set and added as the event
 * the Protobuf reader sees (fields by name, nested messages as objects,
 * repeated fields as lists, enums as their names, ...), until max_events
 * events were added or f ends. A message that does not decode is counted in
 * pr_infer_rejected. PR_EINVAL with errstr for a descriptor set or message
 * that does not load; PR_EIO; PR_ENOMEM. */
int pr_infer_add_pb_messages(pr_infer *inf, const char *descriptor_set, const char *message,
                             FILE *f, uint64_t max_events, char *errstr, size_t errstr_size);
uint64_t pr_infer_events(const pr_infer *inf);
uint64_t pr_infer_rejected(const pr_infer *inf);
/* Appends the config to out and fills *sum. PR_EINVAL with errstr when no
 * event was added, or an option names a path no event has (or a label that
 * is not a number, an event time that is not a time); PR_ENOMEM. */
int pr_infer_write(const pr_infer *inf, const pr_infer_opts *o, pr_mbuf *out, pr_infer_summary *sum,
                   char *errstr, size_t errstr_size);

#endif
