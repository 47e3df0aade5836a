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
 * meaning) is docs/configuration.md; the key tables in pr_config.c are the
 * single source of truth for names, defaults and ranges.
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

#include "pr_engine.h"
#include "pr_error.h"
#include "pr_log.h"

/* ---------------------------------------------------------------- enums */

/* source.format: how Kafka message payloads (or offline input) are encoded. */
typedef enum pr_source_format {
    PR_FORMAT_CRITEO_TSV = 0,       /* "criteo_tsv": one TSV line per message */
    PR_FORMAT_PROTOBUF_EVENT,       /* "protobuf_event": one piperec.Event */
    PR_FORMAT_PROTOBUF_EVENT_BATCH, /* "protobuf_event_batch": one piperec.EventBatch */
    PR_FORMAT__COUNT
} pr_source_format;

/* batch.ordering */
typedef enum pr_ordering {
    PR_ORDERING_PARTITION = 0, /* "partition": offset order within a partition */
    PR_ORDERING_EVENT_TIME,    /* "event_time": partitions merged by watermark */
    PR_ORDERING__COUNT
} pr_ordering;

/* batch.late_policy: records older than the watermark - allowed_lateness_ms. */
typedef enum pr_late_policy {
    PR_LATE_EMIT = 0,    /* "emit": put into the next batch anyway */
    PR_LATE_DROP_TO_DLQ, /* "drop_to_dlq": send to source.dead_letter_topic */
    PR_LATE__COUNT
} pr_late_policy;

/* Config names of the enum values; *_from_name returns -1 when unknown. */
const char *pr_source_format_name(pr_source_format f);
int pr_source_format_from_name(const char *name);
const char *pr_ordering_name(pr_ordering o);
int pr_ordering_from_name(const char *name);
const char *pr_late_policy_name(pr_late_policy p);
int pr_late_policy_from_name(const char *name);

/* ---------------------------------------------------------------- structs */

/* Ordered string key/value pairs, passed through to librdkafka untouched
 * (YAML numbers and booleans arrive here as their text: "5", "true"). */
typedef struct pr_kv {
    char *key;
    char *value;
} pr_kv;

typedef struct pr_kv_list {
    pr_kv *items;
    size_t n;
} pr_kv_list;

/* Value of `key`, or NULL. The last occurrence wins. */
const char *pr_kv_get(const pr_kv_list *l, const char *key);

typedef struct pr_kafka_source_cfg {
    bool enabled;  /* source.kafka present */
    char **topics; /* n_topics owned strings */
    size_t n_topics;
    char *group_id;        /* default "piperec-<pipeline name>" */
    pr_kv_list properties; /* bootstrap.servers, auto.offset.reset, ... */
} pr_kafka_source_cfg;

typedef struct pr_source_cfg {
    pr_kafka_source_cfg kafka;
    pr_source_format format; /* default criteo_tsv */
    char *dead_letter_topic; /* NULL = rejects are only counted and logged */
} pr_source_cfg;

typedef struct pr_batch_cfg {
    uint32_t size;               /* rows per batch, 1..1048576; default 4096 */
    int64_t max_delay_ms;        /* >= 0; default 100 */
    pr_ordering ordering;        /* default partition */
    int64_t allowed_lateness_ms; /* >= 0; event_time only; default 1000 */
    pr_late_policy late_policy;  /* default emit */
} pr_batch_cfg;

typedef struct pr_trainer_sink_cfg {
    bool enabled;                 /* sinks.trainer present (and enabled: true) */
    char *listen;                 /* "host:port"; default "127.0.0.1:7070" */
    uint32_t max_unacked_batches; /* credit window per trainer; default 64 */
    int64_t ack_timeout_ms;       /* default 30000 */
} pr_trainer_sink_cfg;

typedef struct pr_kafka_sink_cfg {
    bool enabled;
    char *topic;           /* required when enabled */
    pr_kv_list properties; /* producer properties; bootstrap.servers
                            * falls back to the source's when absent */
} pr_kafka_sink_cfg;

typedef struct pr_files_sink_cfg {
    bool enabled;
    char *dir;             /* required when enabled */
    uint32_t roll_batches; /* batches per file set; default 100 */
} pr_files_sink_cfg;

typedef struct pr_sinks_cfg {
    pr_trainer_sink_cfg trainer;
    pr_kafka_sink_cfg kafka;
    pr_files_sink_cfg files;
} pr_sinks_cfg;

/* Vocabulary durability: snapshot + journal under dir. */
typedef struct pr_state_cfg {
    bool enabled;                  /* state present (and enabled: true) */
    char *dir;                     /* required when enabled */
    int64_t checkpoint_interval_s; /* >= 1; default 60 */
} pr_state_cfg;

typedef struct pr_pipeline_cfg {
    char name[PR_NAME_MAX];                      /* same as spec.name; unique across pipelines */
    pr_pipeline_spec spec;                       /* schema + transform, ready for pr_engine_new */
    char dense_names[PR_MAX_DENSE][PR_NAME_MAX]; /* "I1".. or schema.dense_names */
    pr_source_cfg source;
    pr_batch_cfg batch;
    pr_sinks_cfg sinks;
    pr_state_cfg state;
    int line; /* 1-based YAML line of this pipeline; 0 if none */
} pr_pipeline_cfg;

typedef struct pr_http_cfg {
    bool enabled; /* default true */
    char *listen; /* default "127.0.0.1:9464" */
} pr_http_cfg;

/* pr_engine_opts with owned strings; see pr_config_engine_opts(). */
typedef struct pr_engine_cfg {
    char *backend; /* cpu | hls-sim | xrt | auto; default cpu */
    int threads;   /* 1..64; default 2 */
    char *xclbin;  /* NULL when not set */
    int device;    /* >= 0; default 0 */
} pr_engine_cfg;

typedef struct pr_limits_cfg {
    uint64_t max_inflight_bytes; /* default 256 MiB */
} pr_limits_cfg;

typedef struct pr_config {
    char *origin; /* file name or the origin given to load_string */
    pr_pipeline_cfg *pipelines;
    size_t n_pipelines; /* >= 1 */
    pr_http_cfg http;
    pr_engine_cfg engine;
    pr_limits_cfg limits;
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

#endif
