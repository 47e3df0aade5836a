/*
 * source_cfg.c — the keys of a pipeline's `source` section: names, defaults
 * and docs in one table each for `source` and `source.kafka` (contract:
 * pr_ingest.h).
 *
 * The YAML loader (config/) applies files through these tables and
 * docs/configuration.md is generated from them. Kept apart from the consumer
 * so that the loader links the tables without the consumer itself.
 */
#include "pr_ingest.h"

const char *const pr_msg_format_names[PR_MSG__COUNT + 1] = {
    [PR_MSG_CRITEO_TSV] = "criteo_tsv",
    [PR_MSG_PROTOBUF_EVENT] = "protobuf_event",
    [PR_MSG_PROTOBUF_EVENT_BATCH] = "protobuf_event_batch",
    [PR_MSG_JSON] = "json",
    [PR_MSG_AVRO] = "avro",
    [PR_MSG_PROTOBUF] = "protobuf",
    [PR_MSG__COUNT] = NULL,
};

const char *const pr_avro_framing_names[] = {
    [PR_AVRO_FRAMING_AUTO] = "auto",
    [PR_AVRO_FRAMING_PLAIN] = "plain",
    [PR_AVRO_FRAMING_REGISTRY] = "registry",
    NULL,
};

const char *const pr_offset_reset_names[] = {
    [PR_OFFSET_RESET_FAIL] = "fail",
    [PR_OFFSET_RESET_EARLIEST] = "earliest",
    [PR_OFFSET_RESET_LATEST] = "latest",
    NULL,
};

static const pr_cfgmap_entry kafka_source_entries[] = {
    {.name = "topics",
     .type = PR_CFG_STRLIST,
     .flags = PR_CFG_NONEMPTY,
     .off = offsetof(pr_kafka_source_cfg, topics),
     .off2 = offsetof(pr_kafka_source_cfg, n_topics),
     .doc = "Topics to consume (a list, or one name). Required by `run`."},
    PR_CFG_E_STR("group.id", PR_CFG_NONEMPTY, pr_kafka_source_cfg, group_id, NULL,
                 "Consumer group; default piperec-NAME (NAME = the pipeline's name). Offsets are "
                 "committed only after every batch holding a record is acknowledged."),
    PR_CFG_E_KV("properties", pr_kafka_source_cfg, properties,
                "librdkafka consumer properties, passed through untouched (numbers and booleans "
                "become strings; a whole value ${env:NAME} or ${file:PATH} is read from there, "
                "for secrets). `run` needs bootstrap.servers; TLS and SASL settings here reach "
                "every client of the pipeline. piperec defaults "
                "session.timeout.ms to 6000 (librdkafka: 45000) so a restarted process gets its "
                "partitions back within seconds, queued.min.messages to 1000000 (librdkafka: "
                "100000) so fetching keeps up with small messages, and queued.max.messages.kbytes "
                "to 262144 (librdkafka: 65536): the fetch queue should hold about 1 s of input, "
                "or the fetcher idles up to 1 s each time it fills (docs/operations.md, Memory), "
                "and fetch.wait.max.ms to 10 (librdkafka: 500) so that a fetch held at the "
                "broker does not delay fresh records past batch.max_delay_ms; set them here to "
                "override."),
    PR_CFG_E_ENUM(
        "on_offset_reset", pr_kafka_source_cfg, on_offset_reset, pr_offset_reset_names, "fail",
        "When a partition's committed offset (or fetch position) is no longer in the "
        "log (retention deleted it, topic recreated): fail stops the pipeline naming "
        "topic, partition and offsets; earliest / latest jump there, logged and counted "
        "in piperec_offset_resets_total. A partition with no committed offset starts where "
        "properties.auto.offset.reset says (default latest), without counting; "
        "latest's offset is committed at once, so a restart or another replica "
        "resumes there, and a partition new to a group that committed on the topic's "
        "other partitions (added to the topic) starts at its log start: latest skips "
        "nothing the group has not read. With state.dir, a topic the group committed on "
        "before (<state.dir>/<pipeline>.read) whose offsets are all gone (expired after "
        "the broker's offsets.retention.minutes, deleted, the topic recreated) is this "
        "policy's to decide too, not started at latest's end as if new."),
    PR_CFG_E_STR("group_instance_id", 0, pr_kafka_source_cfg, group_instance_id, NULL,
                 "Static group membership (group.instance.id): a restarted member takes its "
                 "partitions back without waiting for its old session to expire. Unset: "
                 "$PIPEREC_INSTANCE_ID, else $POD_NAME (the Helm chart sets it), plus '-' and "
                 "the pipeline name; neither set, or \"\": dynamic membership. Must be unique "
                 "per live process of a group."),
};
const pr_cfgmap pr_kafka_source_cfgmap = PR_CFGMAP(kafka_source_entries);

static const pr_cfgmap_entry source_entries[] = {
    PR_CFG_E_ENUM("format", pr_source_cfg, format, pr_msg_format_names, "criteo_tsv",
                  "Payload encoding: criteo_tsv (one TSV line per message), protobuf_event "
                  "(piperec.Event), protobuf_event_batch (piperec.EventBatch), json (one JSON "
                  "object per message, bare or schema-registry framed), avro (one Avro record per "
                  "message, plain or "
                  "schema-registry framed) or protobuf (one message of the user's own .proto); "
                  "json, avro and protobuf are read through the declared `schema:` (they need "
                  "one, and a declared schema needs one of them)."),
    PR_CFG_E_STR("dead_letter_topic", 0, pr_source_cfg, dead_letter_topic, NULL,
                 "Topic receiving records that fail to decode (and late ones under drop_to_dlq), "
                 "with the reason in headers (docs/formats.md). Unset: with state.dir, every "
                 "rejected record goes to the dead-letter file "
                 "`<state.dir>/<pipeline>.deadletters` (its offset committed only once the file "
                 "is fsync'd); without state.dir, "
                 "rejects are counted and logged only (warned at startup)."),
    {.name = "dead_letter_file_max_bytes",
     .type = PR_CFG_SIZE,
     .off = offsetof(pr_source_cfg, dead_letter_file_max_bytes),
     .min = 4096,
     .def = "256MiB",
     .doc = "Bound of the dead-letter file (`<state.dir>/<pipeline>.deadletters`): a letter "
            "that would take it past this first renames it to `<file>.1`, deleting the older "
            "`.1` (its letters counted in "
            "`piperec_dead_letters_total{result=\"file_dropped\"}`). At least 4KiB."},
    PR_CFG_E_INT("decode_threads", 0, pr_source_cfg, decode_threads, 0, 64, "0",
                 "Threads that decode messages, the polling thread included (1 = the "
                 "polling thread only; 0 = engine.threads, at most the CPUs, and at least 2 "
                 "with source.consumers > 1); from 2, with source.consumers > 1, each "
                 "instance's polling thread decodes its own messages too. The polling thread keeps "
                 "polling while the others decode, "
                 "then merges in poll order: rows, rejects, dead letters and offsets are the "
                 "same for every count. Every format; avro with source.schema_registry: a "
                 "message whose writer schema id is not fetched yet decodes on the "
                 "polling thread, which fetches it."),
    PR_CFG_E_INT("max_event_time_ahead_s", 0, pr_source_cfg, max_event_time_ahead_s, 0, UINT32_MAX,
                 "86400",
                 "A record whose own event time (schema.event_time, Event.event_time_ms) is "
                 "more than this many seconds ahead of its Kafka message's timestamp is "
                 "rejected `bad_time` (dead-lettered, counted): one producer with a wrong "
                 "clock must not move the event-time watermark (ordering: event_time) or a "
                 "ttl_s eviction clock years ahead, which would make every later record late "
                 "or every value idle. 0 = no bound. Streaming only: offline has no message "
                 "timestamps."),
    PR_CFG_E_INT("consumers", 0, pr_source_cfg, consumers, 1, PR_CONSUMER_MAX_INSTANCES, "1",
                 "Members of the consumer group in this process, each its own librdkafka "
                 "client with its share of the partitions (one client delivers ~0.7-1M small "
                 "messages/s); with 2 or more, each is polled by a thread of its own, "
                 "which hands messages and rebalance events to the pipeline thread in "
                 "order; offsets, rebalances, dead letters and metrics are kept for all "
                 "together; at a stop every instance revokes and commits before any "
                 "leaves, then all leave in one rebalance (0.1-0.3 s on the test broker). "
                 "A static member "
                 "(group_instance_id) gets -1, -2, ... for the second and later."),
};
const pr_cfgmap pr_source_cfgmap = PR_CFGMAP(source_entries);

static const pr_cfgmap_entry avro_source_entries[] = {
    PR_CFG_E_STR("schema_file", PR_CFG_NONEMPTY, pr_avro_source_cfg, schema_file, NULL,
                 "The writer schema (an .avsc JSON file, a path relative to the working directory) "
                 "of every message, when the topic has one fixed schema; otherwise set "
                 "source.schema_registry and each message's schema id picks its writer schema. "
                 "Read when the config loads: a file that is missing or does not parse, and "
                 "(without a registry) a feature path the schema cannot give, are config "
                 "errors (docs/formats.md, Avro events)."),
    PR_CFG_E_ENUM("framing", pr_avro_source_cfg, framing, pr_avro_framing_names, "auto",
                  "plain: each message is an Avro binary body; registry: byte 0 is 0 (the magic "
                  "byte), then a 4-byte big-endian schema id, then the body (a message without "
                  "the magic byte is rejected as bad_framing); auto: registry with "
                  "source.schema_registry, plain with schema_file alone. `piperec gen|produce "
                  "--format avro` write registry framing unless given --schema-id plain."),
};
const pr_cfgmap pr_avro_source_cfgmap = PR_CFGMAP(avro_source_entries);

static const pr_cfgmap_entry registry_entries[] = {
    PR_CFG_E_STR("url", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_registry_cfg, url, NULL,
                 "Base URL of a Confluent-compatible schema registry (http:// or https://); a "
                 "message's writer schema is GET {url}/schemas/ids/{id}, fetched once per id."),
    PR_CFG_E_STR("username", PR_CFG_NONEMPTY, pr_registry_cfg, username, NULL,
                 "Basic auth user (with password_file)."),
    PR_CFG_E_STR("password_file", PR_CFG_NONEMPTY, pr_registry_cfg, password_file, NULL,
                 "File holding the basic auth password (its first line)."),
    PR_CFG_E_STR("token_file", PR_CFG_NONEMPTY, pr_registry_cfg, token_file, NULL,
                 "File holding a bearer token (its first line), instead of basic auth."),
    PR_CFG_E_STR("ca_file", PR_CFG_NONEMPTY, pr_registry_cfg, ca_file, NULL,
                 "CA bundle (PEM) to verify an https registry; unset: the system's."),
    PR_CFG_E_INT("timeout_ms", 0, pr_registry_cfg, timeout_ms, 10, 600000, "2000",
                 "Limit of one request, connect included. A registry that is down, slower, or "
                 "answers an error status makes the partition wait (nothing is rejected for "
                 "it): retried with backoff (100 ms doubling to 5 s)."),
    PR_CFG_E_INT("cache_max", 0, pr_registry_cfg, cache_max, 1, 1000000, "1000",
                 "Writer schemas kept compiled (the least recently used beyond it are dropped "
                 "and fetched again when seen)."),
};
const pr_cfgmap pr_registry_cfgmap = PR_CFGMAP(registry_entries);
