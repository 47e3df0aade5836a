/*
 * test_config.c — unit tests of the configuration layer (config/pr_config.c).
 *
 * Errors are tested through a table: a YAML snippet and the fragments its
 * message must contain (the key path, the problem and, where the YAML has
 * one, the line). One test per behaviour otherwise: the embedded default,
 * a config using every key, Kafka property pass-through, per-column
 * overrides, the streaming checks, command-line overrides, and that
 * docs/configuration.md documents every key of the tables.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_cfgmap.h"
#include "pr_config.h"
#include "pr_hostport.h"

static pr_config *load_ok(const char *yaml)
{
    char err[4096];
    pr_config *cfg = NULL;
    int rc = pr_config_load_string(yaml, strlen(yaml), "t.yaml", &cfg, err, sizeof(err));
    if (rc != 0)
        fail_msg("load failed: %s", err);
    assert_non_null(cfg);
    return cfg;
}

/* Load must fail; returns the message in err. */
static void load_fail(const char *yaml, char *err, size_t n)
{
    pr_config *cfg = (pr_config *)1;
    int rc = pr_config_load_string(yaml, strlen(yaml), "t.yaml", &cfg, err, n);
    if (rc == 0)
        fail_msg("load succeeded, expected an error for:\n%s", yaml);
    assert_int_equal(rc, PR_EINVAL);
    assert_null(cfg);
}

#define MINIMAL "pipelines:\n  - name: p\n"
#define SCHEMA  MINIMAL "    schema:\n"

/* ---------------------------------------------------------------- default */

static void test_default_loads(void **state)
{
    (void)state;
    char err[1024];
    pr_config *cfg = NULL;
    assert_int_equal(pr_config_load_default(&cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg->n_pipelines, 1);
    const pr_pipeline_cfg *pl = pr_config_pipeline(cfg, "criteo");
    assert_non_null(pl);
    assert_string_equal(pl->spec.name, "criteo");
    assert_true(pl->spec.has_label);
    assert_int_equal(pl->spec.n_dense, 13);
    assert_int_equal(pl->spec.n_sparse, 26);
    assert_int_equal(pl->spec.n_dense_ops, 2);
    assert_int_equal(pl->spec.dense_ops[0], PR_OP_NEG2ZERO);
    assert_int_equal(pl->spec.dense_ops[1], PR_OP_LOG1P);
    assert_int_equal(pl->spec.n_sparse_ops, 3);
    assert_int_equal(pl->spec.sparse_ops[0], PR_OP_HEX2INT);
    assert_int_equal(pl->spec.sparse_ops[1], PR_OP_MODULUS);
    assert_int_equal(pl->spec.sparse_ops[2], PR_OP_VOCAB);
    assert_int_equal(pl->spec.profile, PR_VOCAB_DLRM);
    assert_int_equal(pl->spec.count_mode, PR_COUNT_STREAMING);
    for (int c = 0; c < 26; c++) {
        char name[16];
        snprintf(name, sizeof(name), "C%d", c + 1);
        assert_string_equal(pl->spec.sparse[c].name, name);
        assert_int_equal(pl->spec.sparse[c].modulus, 524288);
        assert_int_equal(pl->spec.sparse[c].min_count, 1);
        assert_int_equal(pl->spec.sparse[c].capacity, 0);
    }
    assert_string_equal(pl->dense_names[12], "I13");
    assert_true(pl->source.kafka.enabled);
    assert_int_equal(pl->source.kafka.n_topics, 1);
    assert_string_equal(pl->source.kafka.topics[0], "events");
    assert_string_equal(pl->source.kafka.group_id, "piperec-criteo");
    assert_string_equal(pr_kv_get(&pl->source.kafka.properties, "bootstrap.servers"),
                        "127.0.0.1:0");
    assert_int_equal(pl->source.format, PR_FORMAT_CRITEO_TSV);
    assert_null(pl->source.dead_letter_topic);
    assert_int_equal(pl->batch.size, 4096);
    assert_int_equal(pl->batch.max_delay_ms, 100);
    assert_int_equal(pl->batch.ordering, PR_ORDERING_PARTITION);
    assert_true(pl->sinks.trainer.enabled);
    assert_string_equal(pl->sinks.trainer.listen, "127.0.0.1:7070");
    assert_false(pl->sinks.kafka.enabled);
    assert_false(pl->sinks.files.enabled);
    assert_false(pl->state.enabled);
    assert_true(cfg->http.enabled);
    assert_string_equal(cfg->http.listen, "127.0.0.1:9464");
    assert_string_equal(cfg->engine.backend, "cpu");
    assert_int_equal(cfg->engine.threads, 2);
    assert_null(cfg->engine.xclbin);
    assert_int_equal(cfg->limits.max_inflight_bytes, 256u << 20);
    assert_int_equal(cfg->log_level, PR_LOG_INFO);
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    pr_engine_opts o = pr_config_engine_opts(cfg);
    assert_string_equal(o.backend, "cpu");
    assert_int_equal(o.threads, 2);
    pr_config_free(cfg);
}

/* A minimal config gets the documented defaults everywhere. */
static void test_minimal_defaults(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(MINIMAL);
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    assert_string_equal(pl->name, "p");
    assert_int_equal(pl->spec.n_sparse, 26);
    assert_int_equal(pl->batch.size, 4096);
    assert_int_equal(pl->batch.allowed_lateness_ms, 1000);
    assert_int_equal(pl->batch.late_policy, PR_LATE_EMIT);
    assert_false(pl->source.kafka.enabled);
    assert_string_equal(pl->sinks.trainer.listen, "127.0.0.1:7070"); /* default, though disabled */
    assert_false(pl->sinks.trainer.enabled);
    assert_string_equal(cfg->engine.backend, "cpu");
    assert_int_equal(cfg->engine.device, 0);
    assert_true(cfg->http.enabled);
    /* Offline needs nothing more; streaming does. */
    char err[2048];
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "t.yaml:2: pipelines[0].source.kafka: missing"));
    assert_non_null(strstr(err, "pipelines[0].sinks: no enabled sink"));
    pr_config_free(cfg);
}

/* ---------------------------------------------------------------- every key */

static const char full_yaml[] =
    "pipelines:\n"
    "  - name: criteo\n"
    "    source:\n"
    "      kafka:\n"
    "        topics: [events, events2]\n"
    "        group.id: g1\n"
    "        properties: { bootstrap.servers: \"h:9092\", auto.offset.reset: earliest }\n"
    "      format: protobuf_event_batch\n"
    "      dead_letter_topic: events-dlq\n"
    "    schema: { label: false, dense: 2, sparse: 3, dense_names: [a, b],\n"
    "              sparse_names: [user, item, ctx] }\n"
    "    transform:\n"
    "      dense: [log1p]\n"
    "      sparse: [hex2int, { modulus: 1000 }, vocab]\n"
    "      vocab: { profile: default, min_count: 3, capacity: 5000, count_mode: two_pass }\n"
    "      columns: { item: { modulus: 77, min_count: 2, capacity: 90 } }\n"
    "    batch: { size: 512, max_delay_ms: 0, ordering: event_time,\n"
    "             allowed_lateness_ms: 250, late_policy: drop_to_dlq }\n"
    "    sinks:\n"
    "      trainer: { enabled: true, listen: \"0.0.0.0:7071\", max_unacked_batches: 8, "
    "ack_timeout_ms: 500 }\n"
    "      kafka: { enabled: true, topic: out, properties: { linger.ms: 5 } }\n"
    "      files: { enabled: false, dir: /tmp/out, roll_batches: 7 }\n"
    "    state: { enabled: true, dir: /tmp/state, checkpoint_interval_s: 30 }\n"
    "  - name: second\n"
    "    schema: { dense: 0, sparse: 1 }\n"
    "    transform: { dense: [], sparse: [hex2int] }\n"
    "http: { enabled: false, listen: \"[::1]:9000\" }\n"
    "engine: { backend: hls-sim, threads: 4, xclbin: /opt/k.xclbin, device: 1 }\n"
    "limits: { max_inflight_bytes: 1GiB }\n"
    "log: { level: debug }\n";

static void test_full_config(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(full_yaml);
    assert_int_equal(cfg->n_pipelines, 2);
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    assert_int_equal(pl->line, 2);
    assert_int_equal(pl->source.kafka.n_topics, 2);
    assert_string_equal(pl->source.kafka.topics[1], "events2");
    assert_string_equal(pl->source.kafka.group_id, "g1");
    assert_int_equal(pl->source.format, PR_FORMAT_PROTOBUF_EVENT_BATCH);
    assert_string_equal(pl->source.dead_letter_topic, "events-dlq");
    assert_false(pl->spec.has_label);
    assert_int_equal(pl->spec.n_dense, 2);
    assert_string_equal(pl->dense_names[1], "b");
    assert_int_equal(pl->spec.n_sparse, 3);
    assert_string_equal(pl->spec.sparse[2].name, "ctx");
    assert_int_equal(pl->spec.n_dense_ops, 1);
    assert_int_equal(pl->spec.dense_ops[0], PR_OP_LOG1P);
    assert_int_equal(pl->spec.profile, PR_VOCAB_DEFAULT);
    assert_int_equal(pl->spec.count_mode, PR_COUNT_TWO_PASS);
    /* Pipeline-wide values, then the per-column override on `item` only. */
    assert_int_equal(pl->spec.sparse[0].modulus, 1000);
    assert_int_equal(pl->spec.sparse[0].min_count, 3);
    assert_int_equal(pl->spec.sparse[0].capacity, 5000);
    assert_int_equal(pl->spec.sparse[1].modulus, 77);
    assert_int_equal(pl->spec.sparse[1].min_count, 2);
    assert_int_equal(pl->spec.sparse[1].capacity, 90);
    assert_int_equal(pl->spec.sparse[2].modulus, 1000);
    assert_int_equal(pl->batch.size, 512);
    assert_int_equal(pl->batch.max_delay_ms, 0);
    assert_int_equal(pl->batch.ordering, PR_ORDERING_EVENT_TIME);
    assert_int_equal(pl->batch.allowed_lateness_ms, 250);
    assert_int_equal(pl->batch.late_policy, PR_LATE_DROP_TO_DLQ);
    assert_true(pl->sinks.trainer.enabled);
    assert_string_equal(pl->sinks.trainer.listen, "0.0.0.0:7071");
    assert_int_equal(pl->sinks.trainer.max_unacked_batches, 8);
    assert_int_equal(pl->sinks.trainer.ack_timeout_ms, 500);
    assert_true(pl->sinks.kafka.enabled);
    assert_string_equal(pl->sinks.kafka.topic, "out");
    assert_string_equal(pr_kv_get(&pl->sinks.kafka.properties, "linger.ms"), "5");
    /* bootstrap.servers comes from the source when the sink has none. */
    assert_string_equal(pr_kv_get(&pl->sinks.kafka.properties, "bootstrap.servers"), "h:9092");
    assert_false(pl->sinks.files.enabled); /* enabled: false wins over presence */
    assert_string_equal(pl->sinks.files.dir, "/tmp/out");
    assert_int_equal(pl->sinks.files.roll_batches, 7);
    assert_true(pl->state.enabled);
    assert_string_equal(pl->state.dir, "/tmp/state");
    assert_int_equal(pl->state.checkpoint_interval_s, 30);

    const pr_pipeline_cfg *p2 = pr_config_pipeline(cfg, "second");
    assert_ptr_equal(p2, &cfg->pipelines[1]);
    assert_int_equal(p2->spec.n_dense, 0);
    assert_int_equal(p2->spec.n_dense_ops, 0);
    assert_int_equal(p2->spec.n_sparse_ops, 1);
    assert_false(p2->source.kafka.enabled);
    assert_string_equal(p2->source.kafka.group_id, "piperec-second");
    assert_null(pr_config_pipeline(cfg, "nope"));

    assert_false(cfg->http.enabled);
    assert_string_equal(cfg->http.listen, "[::1]:9000");
    assert_string_equal(cfg->engine.backend, "hls-sim");
    assert_int_equal(cfg->engine.threads, 4);
    assert_string_equal(cfg->engine.xclbin, "/opt/k.xclbin");
    assert_int_equal(cfg->engine.device, 1);
    assert_int_equal(cfg->limits.max_inflight_bytes, 1ull << 30);
    assert_int_equal(cfg->log_level, PR_LOG_DEBUG);
    pr_config_free(cfg);
}

/* The consumer group defaults to piperec-<name> when source.kafka is given. */
static void test_group_id_default(void **state)
{
    (void)state;
    pr_config *cfg =
        load_ok("pipelines:\n  - name: clicks\n    source: { kafka: { topics: t } }\n");
    assert_string_equal(cfg->pipelines[0].source.kafka.group_id, "piperec-clicks");
    assert_int_equal(cfg->pipelines[0].source.kafka.n_topics, 1);
    assert_string_equal(cfg->pipelines[0].source.kafka.topics[0], "t");
    pr_config_free(cfg);
}

/* A section switched off with `enabled: false` needs none of its required
 * keys, and stays off. */
static void test_disabled_sections(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(MINIMAL "    sinks: { trainer: { tls: { enabled: false } }, "
                                     "kafka: { enabled: false }, files: { enabled: no } }\n"
                                     "    state: { enabled: false, dir: '' }\n"
                                     "http: { tls: { enabled: off } }\n");
    const pr_pipeline_cfg *p = &cfg->pipelines[0];
    assert_true(p->sinks.trainer.enabled);
    assert_false(p->sinks.trainer.tls.enabled);
    assert_false(p->sinks.kafka.enabled);
    assert_false(p->sinks.files.enabled);
    assert_false(p->state.enabled);
    assert_false(cfg->http.tls.enabled);
    pr_config_free(cfg);
    /* Switched on, the same section still needs them. */
    char err[1024];
    load_fail(MINIMAL "    sinks: { kafka: { enabled: true } }\n", err, sizeof(err));
    assert_non_null(strstr(err, "pipelines[0].sinks.kafka.topic: missing (required)"));
}

/* ---------------------------------------------------------------- errors */

typedef struct err_case {
    const char *what;
    const char *yaml;
    const char *want[3]; /* fragments the message must contain */
} err_case;

#define TTL_VOCAB "    transform: { vocab: { profile: default, capacity: 100, eviction: ttl"

static const err_case err_cases[] = {
    {"unknown key",
     MINIMAL "    sorce: {}\n",
     {"t.yaml:3: pipelines[0].sorce: unknown key", "valid: name, source, schema"}},
    {"unknown nested key",
     MINIMAL "    batch: { size: 10, max_delay: 5 }\n",
     {"t.yaml:3: pipelines[0].batch.max_delay: unknown key", "max_delay_ms"}},
    {"unknown top-level key", MINIMAL "htp: {}\n", {"t.yaml:3: htp: unknown key", "http"}},
    {"wrong type",
     MINIMAL "    batch:\n      size: abc\n",
     {"t.yaml:4: pipelines[0].batch.size: expected an integer, got 'abc'"}},
    {"map where a scalar goes",
     MINIMAL "    batch: { size: { a: 1 } }\n",
     {"pipelines[0].batch.size: expected an integer, got a mapping"}},
    {"scalar where a map goes",
     MINIMAL "    batch: 5\n",
     {"pipelines[0].batch: expected a mapping, got '5'"}},
    {"modulus 0",
     MINIMAL "    transform: { sparse: [hex2int, { modulus: 0 }, vocab] }\n",
     {"pipelines[0].transform.sparse[1].modulus: must be >= 1, got 0"}},
    {"column modulus 0",
     MINIMAL "    transform: { columns: { C3: { modulus: 0 } } }\n",
     {"pipelines[0].transform.columns.C3.modulus: must be >= 1"}},
    {"bad profile",
     MINIMAL "    transform: { vocab: { profile: torchrec } }\n",
     {"pipelines[0].transform.vocab.profile: unknown profile 'torchrec'", "dlrm", "default"}},
    {"bad format",
     MINIMAL "    source: { format: thrift }\n",
     {"pipelines[0].source.format: unknown value 'thrift'",
      "criteo_tsv, protobuf_event, protobuf_event_batch"}},
    {"bad ordering",
     MINIMAL "    batch: { ordering: random }\n",
     {"pipelines[0].batch.ordering: unknown value 'random'", "partition, event_time"}},
    {"bad late policy",
     MINIMAL "    batch: { late_policy: ignore }\n",
     {"pipelines[0].batch.late_policy: unknown value 'ignore'"}},
    {"bad backend",
     MINIMAL "engine: { backend: gpu }\n",
     {"t.yaml:3: engine.backend: unknown value 'gpu'", "cpu, hls-sim, xrt, auto"}},
    {"bad log level", MINIMAL "log: { level: loud }\n", {"log.level: unknown value 'loud'"}},
    {"batch size 0",
     MINIMAL "    batch: { size: 0 }\n",
     {"pipelines[0].batch.size: must be between 1 and 1048576, got 0"}},
    {"batch size too big",
     MINIMAL "    batch: { size: 1048577 }\n",
     {"pipelines[0].batch.size: must be between 1 and 1048576"}},
    {"negative delay",
     MINIMAL "    batch: { max_delay_ms: -1 }\n",
     {"pipelines[0].batch.max_delay_ms: must be", "got -1"}},
    {"threads",
     MINIMAL "engine: { threads: 65 }\n",
     {"engine.threads: must be between 1 and 64, got 65"}},
    {"threads 0", MINIMAL "engine: { threads: 0 }\n", {"engine.threads: must be between 1 and 64"}},
    {"too many dense",
     MINIMAL "    schema: { dense: 257 }\n",
     {"pipelines[0].schema.dense: must be between 0 and 256"}},
    {"too many sparse",
     MINIMAL "    schema: { sparse: 1000 }\n",
     {"pipelines[0].schema.sparse: must be between 0 and 256"}},
    {"unknown column",
     MINIMAL "    transform: { columns: { C27: { modulus: 5 } } }\n",
     {"t.yaml:3: pipelines[0].transform.columns.C27: unknown column", "C1 .. C26"}},
    {"unknown named column",
     MINIMAL
     "    schema: { sparse_names: [u, i] }\n    transform: { columns: { C1: { modulus: 5 } } }\n",
     {"pipelines[0].transform.columns.C1: unknown column", "u .. i"}},
    {"duplicate pipeline",
     MINIMAL "  - name: q\n  - name: p\n",
     {"t.yaml:4: pipelines[2].name: duplicate pipeline name 'p' (also pipelines[0])"}},
    {"malformed YAML",
     "pipelines:\n  - name: p\n    batch: { size: 1\n  - x\n",
     {"t.yaml:", "malformed YAML"}},
    {"malformed YAML line",
     "pipelines:\n  - name: p\n    batch: [\n    x: : y\n",
     {"t.yaml:4: malformed YAML"}},
    {"bad size unit",
     MINIMAL "limits: { max_inflight_bytes: 12 parsecs }\n",
     {"limits.max_inflight_bytes: expected a size", "'12 parsecs'"}},
    {"size too small",
     MINIMAL "limits: { max_inflight_bytes: 1KiB }\n",
     {"limits.max_inflight_bytes: must be at least 1048576 bytes, got 1KiB"}},
    {"integer overflow",
     MINIMAL "    transform: { columns: { C1: { capacity: 99999999999999999999 } } }\n",
     {"pipelines[0].transform.columns.C1.capacity: 99999999999999999999 is out of range"}},
    {"bad listen",
     MINIMAL "    sinks: { trainer: { listen: \"localhost\" } }\n",
     {"pipelines[0].sinks.trainer.listen: expected an address host:port", "'localhost'"}},
    {"bad port",
     MINIMAL "http: { listen: \"0.0.0.0:70000\" }\n",
     {"http.listen: expected an address"}},
    {"sparse op order",
     MINIMAL "    transform: { sparse: [vocab, hex2int] }\n",
     {"pipelines[0].transform.sparse[1]: 'hex2int' is out of order"}},
    {"dense op twice",
     MINIMAL "    transform: { dense: [neg2zero, neg2zero] }\n",
     {"pipelines[0].transform.dense[1]: 'neg2zero' appears twice"}},
    {"dense op in sparse list",
     MINIMAL "    transform: { sparse: [log1p] }\n",
     {"pipelines[0].transform.sparse[0]: unknown sparse operator 'log1p'",
      "hex2int, modulus, vocab"}},
    {"value on non-modulus op",
     MINIMAL "    transform: { sparse: [{ hex2int: 3 }] }\n",
     {"pipelines[0].transform.sparse[0]: operator 'hex2int' takes no value"}},
    {"missing name",
     "pipelines:\n  - schema: { dense: 1 }\n",
     {"t.yaml:2: pipelines[0].name: missing (required)"}},
    {"bad name", "pipelines:\n  - name: \"a b\"\n", {"pipelines[0].name: invalid name 'a b'"}},
    {"no pipelines", "http: {}\n", {"t.yaml:1: pipelines: missing (required)"}},
    {"empty pipelines", "pipelines: []\n", {"pipelines: at least one pipeline is needed"}},
    {"top level not a map", "- a\n- b\n", {"t.yaml:1: expected a mapping, got a list"}},
    {"two documents", MINIMAL "---\n" MINIMAL, {"t.yaml:3: a second YAML document"}},
    {"bad second document", MINIMAL "---\n[a\n", {"t.yaml:", "malformed YAML"}},
    {"empty document", "# nothing\n", {"t.yaml: empty config"}},
    {"names/count mismatch",
     MINIMAL "    schema: { sparse: 3, sparse_names: [a, b] }\n",
     {"pipelines[0].schema.sparse_names: 2 names but sparse is 3"}},
    {"duplicate column name",
     MINIMAL "    schema: { sparse_names: [a, a] }\n",
     {"pipelines[0].schema.sparse_names[1]: duplicate name 'a'"}},
    {"drop_to_dlq without topic",
     MINIMAL "    batch: { late_policy: drop_to_dlq }\n",
     {"pipelines[0].batch.late_policy: drop_to_dlq needs source.dead_letter_topic"}},
    {"dead letters into the source topic",
     MINIMAL "    source: { kafka: { topics: [a, ev] }, dead_letter_topic: ev }\n",
     {"pipelines[0].source.dead_letter_topic: 'ev' is a topic this source reads"}},
    {"dead letters into a topic the source's pattern reads",
     MINIMAL "    source: { kafka: { topics: [\"^ev.*\"] }, dead_letter_topic: ev-dlq }\n",
     {"pipelines[0].source.dead_letter_topic: 'ev-dlq' is a topic this source reads"}},
    {"column modulus without op",
     MINIMAL "    transform: { sparse: [hex2int, vocab], columns: { C2: { modulus: 9 } } }\n",
     {"pipelines[0].transform.columns.C2.modulus: transform.sparse has no modulus operator"}},
    {"engine rule: min_count under dlrm",
     MINIMAL "    transform: { vocab: { min_count: 2 } }\n",
     {"t.yaml:3: pipelines[0].transform.vocab.min_count: 2 needs profile default", "(column C1)"}},
    /* Issue 14: eviction ttl takes exactly one of ttl_records and ttl_s. */
    {"ttl_records and ttl_s",
     MINIMAL TTL_VOCAB ", ttl_records: 5, ttl_s: 60 } }\n",
     {"t.yaml:3: pipelines[0].transform.vocab.ttl_s: ", "not both", "(column C1)"}},
    {"ttl_records and a column's ttl_s",
     MINIMAL TTL_VOCAB ", ttl_records: 5 }, columns: { C7: { ttl_s: 60 } } }\n",
     {"pipelines[0].transform.columns.C7.ttl_s: ", "not both"}},
    {"eviction ttl without a ttl",
     MINIMAL TTL_VOCAB " } }\n",
     {"pipelines[0].transform: ", "ttl_records > 0", "ttl_s > 0"}},
    {"ttl_s with eviction lru",
     MINIMAL "    transform: { vocab: { profile: default, capacity: 100, eviction: lru, "
             "ttl_s: 60 } }\n",
     {"pipelines[0].transform.vocab.ttl_s: ", "needs eviction ttl", "(column C1)"}},
    {"ttl_s without eviction",
     MINIMAL "    transform: { columns: { C2: { ttl_s: 60 } } }\n",
     {"pipelines[0].transform.columns.C2.ttl_s: 60 needs eviction ttl", "none"}},
    {"ttl_s negative",
     MINIMAL "    transform: { vocab: { ttl_s: -1 } }\n",
     {"pipelines[0].transform.vocab.ttl_s: ", "got -1"}},
    {"eviction lru without a capacity",
     MINIMAL "    transform: { vocab: { eviction: lru } }\n",
     {"pipelines[0].transform.vocab.eviction: lru needs an explicit capacity", "(column C1)"}},
    {"column ttl_s without vocab op",
     MINIMAL "    transform: { sparse: [hex2int, modulus], columns: { C2: { ttl_s: 9 } } }\n",
     {"pipelines[0].transform.columns.C2.ttl_s: transform.sparse has no vocab operator"}},
    {"duplicate key",
     MINIMAL "    batch: { size: 1, size: 2 }\n",
     {"pipelines[0].batch.size: duplicate key"}},
    {"bad bool",
     MINIMAL "    schema: { label: maybe }\n",
     {"pipelines[0].schema.label: expected true or false, got 'maybe'"}},
    {"kafka sink without topic",
     MINIMAL "    sinks: { kafka: { properties: { a: b } } }\n",
     {"pipelines[0].sinks.kafka.topic: missing (required)"}},
    {"property value is a map",
     MINIMAL "    source: { kafka: { properties: { a: { b: c } } } }\n",
     {"pipelines[0].source.kafka.properties.a: expected a value"}},
    {"topics not strings",
     MINIMAL "    source: { kafka: { topics: [[a]] } }\n",
     {"pipelines[0].source.kafka.topics[0]: expected a string, got a list"}},
    /* Issue 11: topics: [''] used to pass --check and fail only at subscribe. */
    {"empty topic name",
     MINIMAL "    source: { kafka: { topics: ['ok', ''] } }\n",
     {"pipelines[0].source.kafka.topics[1]: must not be an empty string"}},
    {"empty topic scalar",
     MINIMAL "    source: { kafka: { topics: '' } }\n",
     {"pipelines[0].source.kafka.topics: must not be an empty string"}},
    /* A quoted '' is a value, not a blank: keys that need a character refuse it. */
    {"empty kafka sink topic",
     MINIMAL "    sinks: { kafka: { topic: \"\" } }\n",
     {"t.yaml:3: pipelines[0].sinks.kafka.topic: must not be an empty string"}},
    {"empty group.id",
     MINIMAL "    source: { kafka: { group.id: '' } }\n",
     {"pipelines[0].source.kafka.group.id: must not be an empty string"}},
    {"empty vocab seed",
     MINIMAL "    transform: { vocab: { seed: '' } }\n",
     {"pipelines[0].transform.vocab.seed: must not be an empty string"}},
    {"empty state dir",
     MINIMAL "    state: { dir: '' }\n",
     {"pipelines[0].state.dir: must not be an empty string"}},
    /* Declared feature schema (issue 20). */
    {"duplicate feature name",
     SCHEMA "      dense: [ { name: price, path: p } ]\n"
            "      sparse: [ { name: price, path: q, ops: [vocab] } ]\n",
     {"t.yaml:5: pipelines[0].schema.sparse[0].name: duplicate feature name 'price' (also a "
      "dense feature)"}},
    {"op not valid for the kind",
     SCHEMA "      sparse:\n        - { name: user, path: user.id, ops: [log1p] }\n",
     {"t.yaml:5: pipelines[0].schema.sparse[0].ops[0]: 'log1p' needs a number, but the value "
      "here is a string or an integer"}},
    {"op after vocab makes no sense",
     SCHEMA "      sparse: [ { name: u, path: u, ops: [vocab, { clip: [0, 1] }] } ]\n",
     {"schema.sparse[0].ops[1]: 'clip' needs a number", "(after 'vocab')"}},
    {"dense chain ending in a bucket",
     SCHEMA "      dense: [ { name: a, path: a, ops: [ { bucketize: [1, 2] } ] } ]\n",
     {"schema.dense[0].ops: a dense feature must end in a number"}},
    {"sparse chain ending in a string",
     SCHEMA "      sparse: [ { name: a, path: a } ]\n",
     {"schema.sparse[0]: a sparse feature must end in an integer id", "vocab, hash"}},
    {"vocab twice",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [vocab, vocab] } ]\n",
     {"schema.sparse[0].ops[1]: 'vocab' appears twice"}},
    {"missing path",
     SCHEMA "      dense: [ { name: a, ops: [log1p] } ]\n",
     {"t.yaml:4: pipelines[0].schema.dense[0].path: missing (required)"}},
    {"sparse without path or cross",
     SCHEMA "      sparse: [ { name: a, ops: [vocab] } ]\n",
     {"pipelines[0].schema.sparse[0]: missing path (or cross: [path, path, ...])"}},
    {"bad path", SCHEMA "      dense: [ { name: a, path: a..b } ]\n", {"invalid path 'a..b'"}},
    {"boundaries not increasing",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [ { bucketize: [30, 90, 90] } ] } ]\n",
     {"schema.sparse[0].ops[0].bucketize[2]: boundaries must be strictly increasing: 90 comes "
      "after 90"}},
    {"boundaries not numbers",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [ { bucketize: [1, x] } ] } ]\n",
     {"ops[0].bucketize[1]: expected a finite number, got 'x'"}},
    {"hash 0",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [ { hash: 0 } ] } ]\n",
     {"schema.sparse[0].ops[0].hash: must be >= 1, got 0"}},
    {"clip lo > hi",
     SCHEMA "      dense: [ { name: a, path: a, ops: [ { clip: [5, 1] } ] } ]\n",
     {"ops[0].clip: [lo, hi] needs lo <= hi, got [5, 1]"}},
    {"standardize std 0",
     SCHEMA
     "      dense: [ { name: a, path: a, ops: [ { standardize: { mean: 1, std: 0 } } ] } ]\n",
     {"ops[0].standardize.std: must be > 0, got 0"}},
    {"standardize unknown key",
     SCHEMA "      dense: [ { name: a, path: a, ops: [ { standardize: { mu: 1, std: 1 } } ] } ]\n",
     {"ops[0].standardize: unknown key (valid: mean, std)"}},
    {"fill without its value",
     SCHEMA "      dense: [ { name: a, path: a, ops: [fill] } ]\n",
     {"ops[0]: 'fill' needs an argument: { fill: V }"}},
    {"fill with a string on a dense feature",
     SCHEMA "      dense: [ { name: a, path: a, ops: [ { fill: none } ] } ]\n",
     {"ops[0].fill: expected a finite number, got 'none'"}},
    {"argument to neg2zero",
     SCHEMA "      dense: [ { name: a, path: a, ops: [ { neg2zero: 1 } ] } ]\n",
     {"ops[0].neg2zero: 'neg2zero' takes no argument"}},
    {"unknown operator",
     SCHEMA "      dense: [ { name: a, path: a, ops: [logg] } ]\n",
     {"ops[0]: unknown operator 'logg'", "log1p"}},
    {"cross in ops",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [cross] } ]\n",
     {"ops[0]: not an operator in ops: 'cross'"}},
    {"cross of one path",
     SCHEMA "      sparse: [ { name: a, cross: [a], ops: [ { hash: 8 } ] } ]\n",
     {"schema.sparse[0].cross: expected a list of 2..8 paths"}},
    {"cross as a list",
     SCHEMA
     "      sparse: [ { name: a, cross: [a, b], list: { max_len: 3 }, ops: [ { hash: 8 } ] } ]\n",
     {"schema.sparse[0].list: a cross is single-valued"}},
    {"list without max_len",
     SCHEMA "      sparse: [ { name: a, path: a, list: { keep: last }, ops: [vocab] } ]\n",
     {"schema.sparse[0].list.max_len: missing (required)"}},
    {"list default",
     SCHEMA
     "      sparse: [ { name: a, path: a, list: { max_len: 3 }, default: x, ops: [vocab] } ]\n",
     {"schema.sparse[0].default: a list has no default"}},
    {"sparse default not a string or integer",
     SCHEMA "      sparse: [ { name: a, path: a, default: 1.5, ops: [vocab] } ]\n",
     {"schema.sparse[0].default: a sparse value is a string or an integer"}},
    {"dim 0",
     SCHEMA "      dense: [ { name: a, path: a, dim: 0 } ]\n",
     {"schema.dense[0].dim: must be between 1 and 4096, got 0"}},
    {"dim too large",
     SCHEMA "      dense: [ { name: a, path: a, dim: 4097 } ]\n",
     {"schema.dense[0].dim: "}},
    {"dim on a sparse feature",
     SCHEMA "      sparse: [ { name: a, path: a, dim: 2, ops: [vocab] } ]\n",
     {"schema.sparse[0].dim: unknown key"}},
    {"dim on a label",
     SCHEMA "      labels: [ { name: a, path: a, dim: 2 } ]\n",
     {"schema.labels[0].dim: unknown key"}},
    {"vector columns' names too long",
     SCHEMA "      dense: [ { name: abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghij, "
            "path: a, dim: 100 } ]\n",
     {"schema.dense[0].name: with dim 100 the columns are named", "[99]",
      "so the name at most 59"}},
    {"encoding without dim",
     SCHEMA "      dense: [ { name: a, path: a, encoding: f32 } ]\n",
     {"schema.dense[0].encoding: applies to a dense vector: give dim too"}},
    {"unknown encoding",
     SCHEMA "      dense: [ { name: a, path: a, dim: 2, encoding: f16 } ]\n",
     {"schema.dense[0].encoding: unknown value 'f16'"}},
    {"a vector's path read by another feature",
     SCHEMA
     "      dense:\n        - { name: a, path: x }\n        - { name: v, path: x, dim: 2 }\n",
     {"dense vector 'v' reads 'x', and so does dense feature 'a': a vector's path is its own"}},
    {"weights on a single-valued feature",
     SCHEMA "      sparse: [ { name: a, path: a, weights: { path: w }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights: only a list feature (with list:) carries weights"}},
    {"weights without a path",
     SCHEMA
     "      sparse: [ { name: a, path: a, list: { max_len: 2 }, weights: { default: 1 } } ]\n",
     {"schema.sparse[0].weights: missing path (the weights' field), or from: values"}},
    {"weights with path and from",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: keys },\n"
            "                  weights: { path: w, from: values }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights: give path or from, not both"}},
    {"list.from unknown",
     SCHEMA
     "      sparse: [ { name: a, path: a, list: { max_len: 2, from: vals }, ops: [vocab] } ]\n",
     {"schema.sparse[0].list.from: unknown value 'vals' (valid: value, keys, entries, values)"}},
    {"weights.from unknown",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: keys },\n"
            "                  weights: { from: keys }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.from: unknown value 'keys' (valid: values)"}},
    {"weights from values without from keys",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 },\n"
            "                  weights: { from: values }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.from: values are the weights of a map's keys: give list: { "
      "from: keys }"}},
    {"a map's keys weighted by another path",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: keys },\n"
            "                  weights: { path: w }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.path: a map's keys are weighted by its values"}},
    {"a table without vocab",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [vocab] }\n"
            "        - { name: b, path: b, ops: [ { hash: 10 } ], table: a }\n",
     {"schema.sparse[1].table: 'b' has no vocab step: a shared table is a vocabulary"}},
    {"a table nobody owns",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [vocab] }\n"
            "        - { name: b, path: b, ops: [vocab], table: nope }\n",
     {"schema.sparse[1].table: no sparse feature is named 'nope'"}},
    {"a table owner without vocab",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [ { hash: 10 } ] }\n"
            "        - { name: b, path: b, ops: [vocab], table: a }\n",
     {"schema.sparse[1].table: 'a' has no vocab step: only a vocabulary is shared"}},
    {"a table of a member",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [vocab] }\n"
            "        - { name: b, path: b, ops: [vocab], table: a }\n"
            "        - { name: c, path: c, ops: [vocab], table: b }\n",
     {"schema.sparse[2].table: 'b' uses the table of 'a' itself: name 'a'"}},
    {"a table with other operators",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [ { modulus: 1000 }, vocab ] }\n"
            "        - { name: b, path: b, list: { max_len: 3 }, ops: [vocab], table: a }\n",
     {"schema.sparse[1].table: 'b' and 'a' must have the same operators up to and including "
      "vocab"}},
    {"a table with another modulus",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [ { modulus: 1000 }, vocab ] }\n"
            "        - { name: b, path: b, ops: [ { modulus: 999 }, vocab ], table: a }\n",
     {"schema.sparse[1].table: 'b' and 'a' must have the same operators"}},
    {"a table with operators after vocab",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [vocab] }\n"
            "        - { name: b, path: b, ops: [ vocab, { modulus: 50 } ], table: a }\n",
     {"schema.sparse[1].table: 'b' has operators after vocab: a shared table's features end "
      "with vocab"}},
    {"a table owner with operators after vocab",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [ vocab, { modulus: 50 } ] }\n"
            "        - { name: b, path: b, ops: [vocab], table: a }\n",
     {"schema.sparse[1].table: 'a' has operators after vocab"}},
    {"a table of map keys and map entries",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, list: { max_len: 3, from: keys }, ops: [vocab] }\n"
            "        - { name: b, path: b, list: { max_len: 3, from: entries }, ops: [vocab], "
            "table: a }\n",
     {"schema.sparse[1].table: 'b' and 'a' must have the same operators up to and including "
      "vocab (and a map read the same way"}},
    {"a member's vocabulary options",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, ops: [vocab] }\n"
            "        - { name: b, path: b, ops: [vocab], table: a }\n"
            "    transform:\n      vocab: { profile: default }\n"
            "      columns: { b: { capacity: 10 } }\n",
     {"transform.columns.b: 'b' uses the vocabulary of 'a' (its table): set the options under "
      "transform.columns.a"}},
    {"a map read as a value too",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: m, list: { max_len: 2, from: keys }, ops: [vocab] }\n"
            "        - { name: b, path: m, list: { max_len: 2 }, ops: [vocab] }\n",
     {"schema.sparse[0].path: 'm' is read as a map (list: { from: keys }) by 'a' and as a value "
      "by feature b"}},
    {"entries with weights",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: entries },\n"
            "                  weights: { from: values }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights: from: entries makes ids of the keys and their values"}},
    {"values with weights from values",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: values },\n"
            "                  weights: { from: values }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.from: list: { from: values } makes ids of the map's values: "
      "they cannot be their own weights"}},
    {"values with weights from a path",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: values },\n"
            "                  weights: { path: w, default: 1 }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.path: list: { from: values } makes ids of the map's values"}},
    {"a table of map values and map entries",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, list: { max_len: 3, from: values }, ops: [vocab] }\n"
            "        - { name: b, path: b, list: { max_len: 3, from: entries }, ops: [vocab], "
            "table: a }\n",
     {"schema.sparse[1].table: 'b' and 'a' must have the same operators up to and including "
      "vocab (and a map read the same way"}},
    {"a map's values read as a value too",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: m, list: { max_len: 2, from: values }, ops: [vocab] }\n"
            "        - { name: b, path: m, ops: [vocab] }\n",
     {"schema.sparse[0].path: 'm' is read as a map (list: { from: values }) by 'a' and as a "
      "value by feature b"}},
    {"a map read as another list's weights",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: m, list: { max_len: 2, from: keys }, ops: [vocab] }\n"
            "        - { name: b, path: x, list: { max_len: 2 }, weights: { path: m },\n"
            "            ops: [vocab] }\n",
     {"schema.sparse[0].path: 'm' is read as a map (list: { from: keys }) by 'a' and as a value "
      "by feature b"}},
    {"a map read as a value by a filter",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: m, list: { max_len: 2, from: keys }, ops: [vocab] }\n"
            "      filter: [ { path: m, in: [x] } ]\n",
     {"'m' is read as a map (list: { from: keys }) by 'a' and as a value by a filter or "
      "downsample condition"}},
    {"a key under a map read by its keys",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: m, list: { max_len: 2, from: keys }, ops: [vocab] }\n"
            "        - { name: b, path: m.x, ops: [vocab] }\n",
     {"'m.x' is inside 'm'"}},
    {"in: not a list",
     SCHEMA "      labels: [ { name: y, path: type, in: click } ]\n",
     {"schema.labels[0].in: expected a list of values ([click, view], [1, 2]), got"}},
    {"in: a value twice, a null, a number",
     SCHEMA "      labels: [ { name: y, path: type, in: [click, 1, click, null, 1.5] } ]\n",
     {"schema.labels[0].in[2]: 'click' is listed twice",
      "schema.labels[0].in[3]: null is not a value to match", "schema.labels[0].in[4]:"}},
    {"in: on a dense vector",
     SCHEMA "      dense: [ { name: v, path: v, dim: 4, in: [1] } ]\n",
     {"schema.dense[0].in: makes one number of the field; a vector (dim) has dim of them"}},
    {"in: not on a sparse feature",
     SCHEMA "      sparse: [ { name: s, path: s, in: [a], ops: [vocab] } ]\n",
     {"schema.sparse[0].in: unknown key"}},
    {"weights on the ids' own path",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, weights: { path: a } } ]\n",
     {"schema.sparse[0].weights.path: 'a' is the ids' own path"}},
    {"weights default beyond float32",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 },\n"
            "                  weights: { path: w, default: 1e300 }, ops: [vocab] } ]\n",
     {"schema.sparse[0].weights.default: 1e+300 is beyond float32"}},
    {"a weighted list's path read by a single-valued feature",
     SCHEMA "      dense: [ { name: d, path: w } ]\n"
            "      sparse: [ { name: a, path: a, list: { max_len: 2 }, weights: { path: w },\n"
            "                  ops: [vocab] } ]\n",
     {"weighted list 'a' reads 'w', and so does dense feature 'd'"}},
    {"weights path inside the ids' path",
     SCHEMA "      sparse: [ { name: a, path: cats, list: { max_len: 2 },\n"
            "                  weights: { path: cats.w }, ops: [vocab] } ]\n",
     {"schema.sparse[0].path: 'cats.w' is inside 'cats' (sparse[0].weights.path)"}},
    {"weights: unknown key",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, weights: { pth: w } } ]\n",
     {"schema.sparse[0].weights.pth: unknown key (valid: path, from, default, ops)"}},
    {"weights.ops: an operator that gives an integer",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { path: w, ops: [log1p, { bucketize: [1, 2] }] } } ]\n",
     {"schema.sparse[0].weights.ops[1]: 'bucketize' gives an integer, and a weight is a number "
      "(valid: clip, neg2zero, log1p, standardize)"}},
    {"weights.ops: an operator that takes an integer or a string",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2, from: keys }, ops: [vocab],\n"
            "                  weights: { from: values, ops: [hex2int] } } ]\n",
     {"schema.sparse[0].weights.ops[0]: 'hex2int' takes a string or an integer, and a weight is "
      "a number"}},
    {"weights.ops: fill",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { path: w, ops: [ { fill: 1 } ] } } ]\n",
     {"schema.sparse[0].weights.ops[0]: 'fill' is not a weights operator: weights.default"}},
    {"weights.ops: vocab, hash, a time operator",
     SCHEMA "      sparse:\n"
            "        - { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "            weights: { path: w, ops: [vocab] } }\n"
            "        - { name: b, path: b, list: { max_len: 2 }, ops: [vocab],\n"
            "            weights: { path: v, ops: [neg2zero, { hash: 10 }, { hour_of_day: s }] } "
            "}\n",
     {"schema.sparse[0].weights.ops[0]: 'vocab' takes",
      "schema.sparse[1].weights.ops[1]: 'hash' gives an integer"}},
    {"weights.ops: an unknown operator",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { path: w, ops: [log2] } } ]\n",
     {"schema.sparse[0].weights.ops[0]: unknown operator 'log2'"}},
    {"weights.ops: a bad argument",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { path: w, ops: [ { clip: [5, 0] } ] } } ]\n",
     {"schema.sparse[0].weights.ops[0].clip: [lo, hi] needs lo <= hi"}},
    {"weights.ops without path or from",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { ops: [log1p] } } ]\n",
     {"schema.sparse[0].weights: missing path (the weights' field), or from: values"}},
    {"weights.ops on an FPGA backend",
     SCHEMA "      sparse: [ { name: a, path: a, list: { max_len: 2 }, ops: [vocab],\n"
            "                  weights: { path: w, ops: [log1p] } } ]\n"
            "      cpu_ops: [vocab]\nengine: { backend: hls-sim }\n",
     {"feature 'a': weights operator 'log1p' cannot run on backend hls-sim", "schema.cpu_ops"}},
    {"too many dense columns",
     SCHEMA "      dense:\n        - { name: a, path: a, dim: 4000 }\n"
            "        - { name: b, path: b, dim: 97 }\n",
     {"4097 dense columns (a vector takes its dim), at most 4096"}},
    {"unknown feature key",
     SCHEMA "      dense: [ { name: a, pth: a } ]\n",
     {"schema.dense[0].pth: unknown key (valid: name, path, dim, encoding, default, in, ops)"}},
    {"hour_of_day without a unit",
     SCHEMA "      sparse: [ { name: h, path: ts, ops: [hour_of_day, vocab] } ]\n",
     {"ops[0]: 'hour_of_day' needs a time unit", "{ hour_of_day: ms }"}},
    {"age without an event time",
     SCHEMA "      dense: [ { name: a, path: created, ops: [ { age: ms } ] } ]\n",
     {"ops[0]: 'age' counts to the record's event time: declare schema.event_time"}},
    {"age of rfc3339 strings on a dense vector",
     SCHEMA "      event_time: { path: ts, unit: ms }\n"
            "      dense: [ { name: v, path: v, dim: 2, ops: [ { age: rfc3339 } ] } ]\n",
     {"'age' reads rfc3339 strings, and a dense vector's elements are numbers"}},
    {"age on float32 bytes",
     SCHEMA "      event_time: { path: ts, unit: ms }\n"
            "      dense: [ { name: v, path: v, dim: 2, encoding: f32, ops: [ { age: s } ] } ]\n",
     {"a float32 cannot hold a time to the second"}},
    {"a number default before an age of strings",
     SCHEMA "      event_time: { path: ts, unit: ms }\n"
            "      dense: [ { name: a, path: c, default: 0, ops: [ { age: rfc3339 } ] } ]\n",
     {"a default is a number", "{ fill: V } after age"}},
    {"age in weights.ops",
     SCHEMA "      event_time: { path: ts, unit: ms }\n"
            "      sparse:\n"
            "        - { name: l, path: l, list: { max_len: 4 }, ops: [vocab],\n"
            "            weights: { path: w, ops: [ { age: ms } ] } }\n",
     {"weights.ops[0]", "'age'"}},
    {"bad event time unit",
     SCHEMA "      event_time: { path: ts, unit: ns }\n      dense: [ { name: a, path: a } ]\n",
     {"schema.event_time.unit: unknown value 'ns'"}},
    {"Criteo key in a declared schema",
     SCHEMA "      label: true\n      dense: [ { name: a, path: a } ]\n",
     {"t.yaml:4: pipelines[0].schema.label: belongs to the Criteo layout"}},
    {"Criteo count beside a feature list",
     SCHEMA "      dense: 13\n      sparse: [ { name: a, path: a, ops: [vocab] } ]\n",
     {"pipelines[0].schema.dense: belongs to the Criteo layout"}},
    {"transform chain in a declared schema",
     SCHEMA "      dense: [ { name: a, path: a } ]\n    transform: { dense: [log1p] }\n",
     {"pipelines[0].transform.dense: a declared schema gives each feature its own chain"}},
    {"column modulus in a declared schema",
     SCHEMA "      sparse: [ { name: a, path: a, ops: [ { modulus: 5 }, vocab ] } ]\n"
            "    transform: { columns: { a: { modulus: 7 } } }\n",
     {"transform.columns.a.modulus: a declared schema gives the modulus in the feature's "
      "chain"}},
    {"vocabulary option on a declared feature without vocab",
     SCHEMA "      sparse:\n"
            "        - { name: u, path: u, ops: [vocab] }\n"
            "        - { name: t, path: t, list: { max_len: 4 }, ops: [ { hash: 64 } ] }\n"
            "    transform: { columns: { u: { min_count: 2 }, t: { min_count: 2 } } }\n",
     {"transform.columns.t.min_count: feature 't' has no vocab operator"}},
    {"eviction on a declared feature without vocab",
     SCHEMA "      sparse:\n"
            "        - { name: u, path: u, ops: [vocab] }\n"
            "        - { name: d, path: d, ops: [ hex2int, { modulus: 9 } ] }\n"
            "    transform: { columns: { d: { capacity: 10, eviction: lru } } }\n",
     {"transform.columns.d.capacity: feature 'd' has no vocab operator",
      "transform.columns.d.eviction: feature 'd' has no vocab operator"}},
    {"ttl_s eviction on a list feature",
     SCHEMA "      sparse: [ { name: h, path: h, list: { max_len: 4 }, ops: [vocab] } ]\n"
            "    transform:\n      vocab: { profile: default }\n"
            "      columns: { h: { eviction: ttl, ttl_s: 60, capacity: 100 } }\n",
     {"transform.columns.h.ttl_s: list feature 'h' cannot evict by event time"}},
    {"no feature",
     SCHEMA "      labels: [ { name: click, path: c } ]\n",
     {"pipelines[0].schema: declares no dense or sparse feature"}},
    {"unknown cpu_ops operator",
     SCHEMA "      cpu_ops: [clip, vocabb]\n      dense: [ { name: a, path: a } ]\n",
     {"schema.cpu_ops[1]: unknown operator 'vocabb'"}},
    {"operator the backend cannot run",
     SCHEMA "      dense: [ { name: price, path: p, ops: [ { clip: [0, 1] } ] } ]\n"
            "engine: { backend: hls-sim }\n",
     {"t.yaml:2: pipelines[0].schema: feature 'price': operator 'clip' cannot run on backend "
      "hls-sim",
      "schema.cpu_ops"}},
};

static void test_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(err_cases) / sizeof(err_cases[0]); i++) {
        const err_case *e = &err_cases[i];
        char err[4096];
        load_fail(e->yaml, err, sizeof(err));
        if (getenv("PR_TEST_VERBOSE"))
            printf("%-36s %s\n", e->what, err);
        for (int w = 0; w < 3 && e->want[w]; w++)
            if (!strstr(err, e->want[w]))
                fail_msg("case '%s': message\n  %s\nlacks\n  %s", e->what, err, e->want[w]);
    }
}

/* Several problems are reported together, one per line. */
static void test_errors_collected(void **state)
{
    (void)state;
    char err[4096];
    load_fail(MINIMAL "    batch: { size: x, ordering: y }\nengine: { threads: 0 }\n", err,
              sizeof(err));
    assert_non_null(strstr(err, "pipelines[0].batch.size"));
    assert_non_null(strstr(err, "\n"));
    assert_non_null(strstr(err, "pipelines[0].batch.ordering"));
    assert_non_null(strstr(err, "t.yaml:4: engine.threads"));
    /* A tiny buffer gets a truncated but terminated message. */
    char small[16];
    load_fail(MINIMAL "engine: { threads: 0 }\n", small, sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
}

/* ---------------------------------------------------------------- values */

static void test_size_units(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        uint64_t v;
    } ok[] = {
        {"0", 0},
        {"123", 123},
        {"5B", 5},
        {"1KiB", 1024},
        {"2 MiB", 2u << 20},
        {"3GiB", 3ull << 30},
        {"1TiB", 1ull << 40},
        {"1KB", 1000},
        {"7MB", 7000000},
        {"2GB", 2000000000ull},
        {"1TB", 1000000000000ull},
    };
    static const char *const bad[] = {"",           "MiB", "-1",      "1.5GiB",
                                      "1 mib",      "1XB", "1 MiB x", "99999999999999999999",
                                      "20000000TiB"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        if (pr_config_parse_size(ok[i].s, &v) != 0)
            fail_msg("'%s' rejected", ok[i].s);
        assert_int_equal(v, ok[i].v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v;
        if (pr_config_parse_size(bad[i], &v) == 0)
            fail_msg("'%s' accepted", bad[i]);
    }
    pr_config *cfg = load_ok(MINIMAL "limits: { max_inflight_bytes: 64 MB }\n");
    assert_int_equal(cfg->limits.max_inflight_bytes, 64000000);
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "limits: { max_inflight_bytes: 2097152 }\n");
    assert_int_equal(cfg->limits.max_inflight_bytes, 2u << 20);
    pr_config_free(cfg);
}

static void test_hostport(void **state)
{
    (void)state;
    char host[64];
    uint16_t port = 1;
    assert_int_equal(pr_hostport_parse("0.0.0.0:7070", host, sizeof(host), &port), 0);
    assert_string_equal(host, "0.0.0.0");
    assert_int_equal(port, 7070);
    assert_int_equal(pr_hostport_parse("[::1]:0", host, sizeof(host), &port), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 0);
    assert_int_equal(pr_hostport_parse(":9464", host, sizeof(host), &port), 0);
    assert_string_equal(host, "");
    assert_int_equal(pr_hostport_parse("kafka-0.svc:65535", host, sizeof(host), &port), 0);
    assert_int_equal(port, 65535);
    static const char *const bad[] = {"host",   "host:",   "host:65536", "host:12a",
                                      "::1:80", "[::1]80", "a b:1",      "h:123456"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (pr_hostport_parse(bad[i], host, sizeof(host), &port) == 0)
            fail_msg("'%s' accepted", bad[i]);
}

/* Properties keep their order; numbers and booleans arrive as their text. */
static void test_properties_passthrough(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(MINIMAL "    source:\n"
                                     "      kafka:\n"
                                     "        topics: [t]\n"
                                     "        properties:\n"
                                     "          bootstrap.servers: \"a:1,b:2\"\n"
                                     "          session.timeout.ms: 6000\n"
                                     "          enable.auto.commit: false\n"
                                     "          fetch.wait.max.ms: 0.5\n"
                                     "          client.id: \"007\"\n");
    const pr_kv_list *p = &cfg->pipelines[0].source.kafka.properties;
    assert_int_equal(p->n, 5);
    assert_string_equal(p->items[0].key, "bootstrap.servers");
    assert_string_equal(p->items[0].value, "a:1,b:2");
    assert_string_equal(p->items[1].key, "session.timeout.ms");
    assert_string_equal(p->items[1].value, "6000");
    assert_string_equal(p->items[2].value, "false");
    assert_string_equal(p->items[3].value, "0.5");
    assert_string_equal(p->items[4].value, "007");
    assert_null(pr_kv_get(p, "group.id"));
    char err[512];
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].sinks: no enabled sink"));
    assert_null(strstr(err, "source.kafka"));
    pr_config_free(cfg);
}

/* A property's value may live elsewhere: ${env:NAME}, ${file:PATH} (trailing
 * newlines dropped), $${ for a literal ${. The config keeps the value as
 * written (a command that builds no Kafka client needs no secret: process,
 * explain, vocab) and refuses a malformed reference at load, naming the key
 * and never quoting the value; run --check resolves them, naming the key. */
static void test_property_references(void **state)
{
    (void)state;
    char path[] = "/tmp/pr_test_secret_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "s3cr3t\r\n\n", 9), 9);
    close(fd);
    setenv("PR_TEST_SASL_USER", "svc-ml", 1);
    char yaml[1024], err[1024], *v;
    snprintf(yaml, sizeof(yaml),
             MINIMAL "    source:\n"
                     "      kafka:\n"
                     "        topics: [t]\n"
                     "        properties:\n"
                     "          bootstrap.servers: \"a:1\"\n"
                     "          sasl.username: \"${env:PR_TEST_SASL_USER}\"\n"
                     "          sasl.password: ${file:%s}\n"
                     "          client.id: \"$${literal}\"\n"
                     "          client.rack: \"a${env:X}\"\n"
                     "    sinks: { files: { dir: /tmp/x } }\n",
             path);
    pr_config *cfg = load_ok(yaml);
    const pr_kv_list *p = &cfg->pipelines[0].source.kafka.properties;
    assert_string_equal(pr_kv_get(p, "sasl.username"), "${env:PR_TEST_SASL_USER}");
    static const char *const want[][2] = {{"sasl.username", "svc-ml"},
                                          {"sasl.password", "s3cr3t"},
                                          {"client.id", "${literal}"},
                                          {"client.rack", "a${env:X}"}}; /* whole values only */
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        assert_int_equal(pr_kv_ref_resolve(pr_kv_get(p, want[i][0]), &v, err, sizeof(err)), 0);
        assert_string_equal(v, want[i][1]);
        free(v);
    }
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), 0);
    /* unset, unreadable: every start's check names the key, as --check's does */
    unsetenv("PR_TEST_SASL_USER");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].source.kafka.properties.sasl.username: environment "
                                "variable PR_TEST_SASL_USER is not set"));
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err,
                           "pipelines[0].source.kafka.properties: consumer: property "
                           "sasl.username: environment variable PR_TEST_SASL_USER is not set"));
    setenv("PR_TEST_SASL_USER", "svc-ml", 1);
    unlink(path);
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "source.kafka.properties.sasl.password: cannot read the value's "
                                "file"));
    assert_non_null(strstr(err, "No such file or directory"));
    pr_config_free(cfg);
    static const char *const unknown[] = {"${PASSWORD}", "${env:}", "${file:/x", "${vault:a/b}"};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        snprintf(yaml, sizeof(yaml),
                 MINIMAL "    vocab_log: { topic: v, properties: { sasl.password: \"%s\" } }\n",
                 unknown[i]);
        load_fail(yaml, err, sizeof(err));
        if (!strstr(err, "vocab_log.properties.sasl.password: the value begins with ${ but is "
                         "not ${env:NAME} or ${file:PATH}") ||
            strstr(err, unknown[i] + 2))
            fail_msg("%s: %s", unknown[i], err);
    }
}

/* A Kafka sink on the source's cluster reaches it as the source does (its
 * TLS and SASL settings); one with brokers of its own keeps its own. A
 * misspelt property or a bad value of any client fails run --check. */
static void test_kafka_clients_checked(void **state)
{
    (void)state;
#define SECURED                                                                                    \
    "    source:\n"                                                                                \
    "      kafka:\n"                                                                               \
    "        topics: [t]\n"                                                                        \
    "        properties:\n"                                                                        \
    "          bootstrap.servers: \"a:1\"\n"                                                       \
    "          security.protocol: SASL_SSL\n"                                                      \
    "          sasl.mechanisms: SCRAM-SHA-512\n"                                                   \
    "          sasl.username: u\n"                                                                 \
    "          sasl.password: p\n"                                                                 \
    "          session.timeout.ms: 6000\n"
    pr_config *cfg =
        load_ok(MINIMAL SECURED
                "          enable.ssl.certificate.verification: false\n"
                "    sinks: { kafka: { topic: o, properties: { sasl.username: s } } }\n"
                "    transform: { vocab: { profile: default } }\n"
                "    vocab_log: { topic: v, properties: { message.max.bytes: 2000000 } }\n");
    const pr_kv_list *sk = &cfg->pipelines[0].sinks.kafka.properties;
    assert_string_equal(pr_kv_get(sk, "bootstrap.servers"), "a:1");
    assert_string_equal(pr_kv_get(sk, "security.protocol"), "SASL_SSL");
    assert_string_equal(pr_kv_get(sk, "sasl.mechanisms"), "SCRAM-SHA-512");
    assert_string_equal(pr_kv_get(sk, "sasl.password"), "p");
    assert_string_equal(pr_kv_get(sk, "sasl.username"), "s"); /* its own wins */
    assert_string_equal(pr_kv_get(sk, "enable.ssl.certificate.verification"), "false");
    assert_null(pr_kv_get(sk, "session.timeout.ms")); /* a consumer's, not the cluster's */
    /* the vocab log with a property of its own still reaches the cluster */
    const pr_kv_list *vl = &cfg->pipelines[0].vocab_log.properties;
    assert_string_equal(pr_kv_get(vl, "message.max.bytes"), "2000000");
    assert_string_equal(pr_kv_get(vl, "bootstrap.servers"), "a:1");
    assert_string_equal(pr_kv_get(vl, "sasl.password"), "p");
    assert_string_equal(pr_kv_get(vl, "enable.ssl.certificate.verification"), "false");
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL SECURED "    sinks: { kafka: { topic: o, properties: {\n"
                                  "      bootstrap.servers: \"other:1\" } } }\n");
    sk = &cfg->pipelines[0].sinks.kafka.properties;
    assert_int_equal(sk->n, 1);
    pr_config_free(cfg);

    char err[1024];
    cfg = load_ok(MINIMAL SECURED "    sinks: { files: { dir: /tmp/x } }\n");
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), 0);
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "    source: { kafka: { topics: [t], properties: {\n"
                          "      bootstrap.servers: \"a:1\", securty.protocol: SSL } } }\n"
                          "    sinks: { files: { dir: /tmp/x } }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0); /* --check's only */
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].source.kafka.properties: consumer: property "
                                "securty.protocol: No such configuration property"));
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "    source: { kafka: { topics: [t], properties: { bootstrap.servers: "
                          "\"a:1\" } } }\n"
                          "    sinks: { kafka: { topic: o, properties: { acks: most } } }\n");
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].sinks.kafka.properties.acks: Invalid value"));
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "    source: { kafka: { topics: [t], properties: { bootstrap.servers: "
                          "\"a:1\", security.protocol: SSL, ssl.ca.location: /nonexistent/ca.pem "
                          "} } }\n"
                          "    sinks: { files: { dir: /tmp/x } }\n");
    assert_int_equal(pr_config_check_kafka(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].source.kafka.properties: consumer: ssl.ca.location"));
    pr_config_free(cfg);
#undef SECURED
}

/* Two pipelines' files sinks in one directory would name their rolls alike:
 * refused, naming both (trailing slashes and ./ do not hide it). */
static void test_files_dirs_refused(void **state)
{
    (void)state;
    char err[1024];
    pr_config *cfg = load_ok(
        "pipelines:\n"
        "  - name: a\n"
        "    source: { kafka: { topics: [a], properties: { bootstrap.servers: \"h:1\" } } }\n"
        "    sinks: { files: { dir: out/x } }\n"
        "  - name: b\n"
        "    source: { kafka: { topics: [b], properties: { bootstrap.servers: \"h:1\" } } }\n"
        "    sinks: { files: { dir: ./out/x/ } }\n"
        "  - name: c\n"
        "    source: { kafka: { topics: [c], properties: { bootstrap.servers: \"h:1\" } } }\n"
        "    sinks: { files: { dir: out/xy } }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[1].sinks.files.dir: ./out/x/ is also the files sink "
                                "of pipelines[0] (a)"));
    assert_null(strstr(err, "pipelines[2]"));
    pr_config_free(cfg);
}

/* batch.split popular needs hot sets, and cannot go with checkpoint delivery;
 * vocab_log cannot go with a seed. Each mistake names its key. */
static void test_combinations_refused(void **state)
{
    (void)state;
#define SRC "    source: { kafka: { topics: [t], properties: { bootstrap.servers: \"a:1\" } } }\n"
    char err[1024];
    pr_config *cfg = load_ok(MINIMAL SRC "    batch: { split: popular }\n"
                                         "    sinks: { trainer: { delivery: checkpoint } }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].batch.split: popular needs hot sets"));
    assert_non_null(strstr(err, "delivery: checkpoint"));
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL SRC "    batch: { split: popular }\n"
                              "    sinks: { trainer: {} }\n"
                              "hot: { top_k: 64 }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    pr_config_free(cfg);
    pr_config *bad = NULL;
    const char *y = MINIMAL SRC "    transform: { vocab: { seed: /tmp } }\n"
                                "    vocab_log: { topic: v }\n";
    assert_int_equal(pr_config_load_string(y, strlen(y), "t.yaml", &bad, err, sizeof(err)),
                     PR_EINVAL);
    assert_null(bad);
    assert_non_null(strstr(err, "vocab_log: cannot be combined with transform.vocab.seed"));
    /* two listeners on one port pass a config check, not a start */
    cfg = load_ok(MINIMAL SRC "    sinks: { trainer: { listen: \"0.0.0.0:7171\" } }\n"
                              "  - name: q\n" SRC
                              "    sinks: { trainer: { listen: \"127.0.0.1:7171\" } }\n"
                              "http: { listen: \"127.0.0.1:7171\" }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].sinks.trainer.listen: 0.0.0.0:7171 takes the port of "
                                "http.listen 127.0.0.1:7171"));
    assert_non_null(strstr(err, "pipelines[1].sinks.trainer.listen: 127.0.0.1:7171 takes the "
                                "port of pipelines[0].sinks.trainer.listen 0.0.0.0:7171"));
    assert_null(strstr(err, ":3:")); /* no misleading line */
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL SRC "    sinks: { trainer: { listen: \"127.0.0.1:0\" } }\n"
                              "http: { listen: \"127.0.0.1:0\" }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0); /* 0: any free port */
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL SRC "    sinks: { trainer: { listen: \"127.0.0.1:9464\" } }\n"
                              "http: { enabled: false }\n"); /* nothing binds http.listen */
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    pr_config_free(cfg);
#undef SRC
}

/* Overrides land on the named column only, after the pipeline-wide values,
 * whatever order the keys are written in. */
static void test_column_overrides(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(MINIMAL "    transform:\n"
                                     "      columns:\n"
                                     "        C3: { modulus: 10000000, capacity: 1000000 }\n"
                                     "        C26: { min_count: 4 }\n"
                                     "      vocab: { profile: default, min_count: 2 }\n"
                                     "      sparse: [hex2int, { modulus: 4096 }, vocab]\n");
    const pr_pipeline_spec *s = &cfg->pipelines[0].spec;
    assert_int_equal(s->profile, PR_VOCAB_DEFAULT);
    assert_int_equal(s->sparse[2].modulus, 10000000);
    assert_int_equal(s->sparse[2].capacity, 1000000);
    assert_int_equal(s->sparse[2].min_count, 2);
    assert_int_equal(s->sparse[25].min_count, 4);
    assert_int_equal(s->sparse[25].modulus, 4096);
    for (int c = 0; c < 25; c++) {
        if (c == 2)
            continue;
        assert_int_equal(s->sparse[c].modulus, 4096);
        assert_int_equal(s->sparse[c].capacity, 0);
        assert_int_equal(s->sparse[c].min_count, 2);
    }
    pr_config_free(cfg);

    /* With named columns, and schema written after transform. */
    cfg = load_ok(MINIMAL "    transform: { columns: { item: { modulus: 3 } } }\n"
                          "    schema: { dense: 1, sparse_names: [user, item] }\n");
    s = &cfg->pipelines[0].spec;
    assert_int_equal(s->n_sparse, 2);
    assert_int_equal(s->sparse[0].modulus, 524288);
    assert_int_equal(s->sparse[1].modulus, 3);
    pr_config_free(cfg);
}

/* ttl_s (issue 14): for all columns under transform.vocab, per column under
 * transform.columns, and 0 = not set, so a column can switch to ttl_records
 * or another eviction. */
static void test_ttl_s(void **state)
{
    (void)state;
    pr_config *cfg =
        load_ok(MINIMAL "    transform:\n"
                        "      vocab: { profile: default, capacity: 1000, eviction: ttl, "
                        "ttl_s: 3600 }\n"
                        "      columns:\n"
                        "        C3: { ttl_s: 60 }\n"
                        "        C4: { ttl_s: 0, ttl_records: 500 }\n"
                        "        C5: { eviction: lru, ttl_s: 0 }\n");
    const pr_pipeline_spec *s = &cfg->pipelines[0].spec;
    for (int c = 0; c < 26; c++) {
        const pr_sparse_col_spec *cs = &s->sparse[c];
        uint64_t want_s = c == 2 ? 60 : c == 3 || c == 4 ? 0 : 3600;
        assert_int_equal(cs->ttl_s, want_s);
        assert_int_equal(cs->ttl_records, c == 3 ? 500 : 0);
        assert_int_equal(cs->eviction, c == 4 ? PR_EVICT_LRU : PR_EVICT_TTL);
    }
    pr_config_free(cfg);
}

/* ---------------------------------------------------------------- overrides */

static void test_set(void **state)
{
    (void)state;
    char err[2048];
    pr_config *cfg = NULL;
    assert_int_equal(pr_config_load_default(&cfg, err, sizeof(err)), 0);
    assert_int_equal(pr_config_set(cfg, "engine.backend", "hls-sim", err, sizeof(err)), 0);
    assert_string_equal(cfg->engine.backend, "hls-sim");
    assert_int_equal(pr_config_set(cfg, "pipelines[*].source.kafka.properties.bootstrap.servers",
                                   "127.0.0.1:39092", err, sizeof(err)),
                     0);
    assert_string_equal(pr_kv_get(&cfg->pipelines[0].source.kafka.properties, "bootstrap.servers"),
                        "127.0.0.1:39092");
    assert_string_equal(pr_kv_get(&cfg->pipelines[0].source.kafka.properties, "auto.offset.reset"),
                        "earliest");
    /* Earlier overrides survive later ones. */
    assert_int_equal(pr_config_set(cfg, "pipelines[criteo].batch.size", "1024", err, sizeof(err)),
                     0);
    assert_int_equal(cfg->pipelines[0].batch.size, 1024);
    assert_string_equal(cfg->engine.backend, "hls-sim");
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].sinks.trainer.listen", "127.0.0.1:0", err, sizeof(err)),
        0);
    assert_string_equal(cfg->pipelines[0].sinks.trainer.listen, "127.0.0.1:0");
    /* New sections and lists. */
    assert_int_equal(pr_config_set(cfg, "pipelines[0].sinks.files.dir", "/tmp/x", err, sizeof(err)),
                     0);
    assert_true(cfg->pipelines[0].sinks.files.enabled);
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].source.kafka.topics", "[a, b]", err, sizeof(err)), 0);
    assert_int_equal(cfg->pipelines[0].source.kafka.n_topics, 2);
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].transform.columns.C5.modulus", "17", err, sizeof(err)), 0);
    assert_int_equal(cfg->pipelines[0].spec.sparse[4].modulus, 17);
    assert_int_equal(pr_config_set(cfg, "limits.max_inflight_bytes", "1GiB", err, sizeof(err)), 0);
    assert_int_equal(cfg->limits.max_inflight_bytes, 1ull << 30);

    /* Failures name the problem and leave the config as it was. */
    assert_int_equal(pr_config_set(cfg, "engine.backend", "gpu", err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "engine.backend: unknown value 'gpu'"));
    assert_string_equal(cfg->engine.backend, "hls-sim");
    assert_int_equal(pr_config_set(cfg, "engine.backnd", "cpu", err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "engine.backnd: unknown key (valid: backend, threads"));
    assert_int_equal(pr_config_set(cfg, "pipelines[9].batch.size", "1", err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "no item matches [9]"));
    assert_int_equal(pr_config_set(cfg, "pipelines[0].batch.size", "0", err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "(override): pipelines[0].batch.size: must be between 1"));
    assert_int_equal(pr_config_set(cfg, "engine.threads.x", "1", err, sizeof(err)), PR_EINVAL);
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].transform.columns.C99.modulus", "1", err, sizeof(err)),
        PR_EINVAL);
    assert_non_null(strstr(err, "columns.C99: unknown column"));
    assert_int_equal(cfg->pipelines[0].batch.size, 1024);
    assert_string_equal(cfg->engine.backend, "hls-sim");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    pr_config_free(cfg);
}

/* ---------------------------------------------------------------- files */

static void test_load_file(void **state)
{
    (void)state;
    char path[] = "/tmp/pr_config_testXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs(MINIMAL "    batch:\n      size: nope\n", f);
    fclose(f);
    char err[1024];
    pr_config *cfg = (pr_config *)1;
    assert_int_equal(pr_config_load_file(path, &cfg, err, sizeof(err)), PR_EINVAL);
    assert_null(cfg);
    char want[128];
    snprintf(want, sizeof(want), "%s:4: pipelines[0].batch.size: expected an integer", path);
    assert_non_null(strstr(err, want));
    f = fopen(path, "w");
    fputs(pr_config_default_yaml(), f);
    fclose(f);
    assert_int_equal(pr_config_load_file(path, &cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg->origin, path);
    pr_config_free(cfg);
    unlink(path);
    assert_int_equal(pr_config_load_file(path, &cfg, err, sizeof(err)), PR_EIO);
    assert_non_null(strstr(err, path));
}

/* docs/configuration.md holds the reference generated from the key tables. */
static void test_reference_documented(void **state)
{
    (void)state;
    char *ref = NULL;
    size_t ref_len = 0;
    FILE *m = open_memstream(&ref, &ref_len);
    pr_config_write_reference(m);
    fclose(m);
    FILE *f = fopen(PR_SOURCE_DIR "/docs/configuration.md", "r");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *doc = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(doc, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    /* Each generated row (key, type, default, meaning) must be there verbatim. */
    int keys = 0;
    for (char *p = strstr(ref, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
        char *e = strchr(p + 1, '\n');
        char row[1024];
        snprintf(row, sizeof(row), "%.*s", (int)(e - p), p); /* with the leading newline */
        if (!strstr(doc, row)) {
            free(doc);
            free(ref);
            fail_msg("docs/configuration.md lacks or differs on this row (regenerate the table "
                     "with pr_config_write_reference()):%s",
                     row);
        }
        keys++;
    }
    assert_true(keys > 40);

    /* The complete example of the page loads and is fit for streaming. */
    char *y = strstr(doc, "```yaml\n");
    assert_non_null(y);
    y += 8;
    char *end = strstr(y, "```");
    assert_non_null(end);
    char err[2048];
    pr_config *cfg = NULL;
    if (pr_config_load_string(y, (size_t)(end - y), "configuration.md", &cfg, err, sizeof(err)))
        fail_msg("docs example: %s", err);
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    assert_int_equal(cfg->pipelines[0].spec.sparse[2].modulus, 10000000);
    pr_config_free(cfg);
    free(doc);
    free(ref);
}

/* A component built in code (pr_cfgmap_set_defaults) and one loaded from a
 * config that leaves every key out get the same values: the defaults exist
 * once, in the component's table. */
static void test_component_defaults_match_loader(void **state)
{
    (void)state;
    char err[1024];
    pr_config *cfg = NULL;
    const char *y = MINIMAL "    sinks: { trainer: {}, files: { dir: /tmp/x } }\n";
    assert_int_equal(pr_config_load_string(y, strlen(y), "t.yaml", &cfg, err, sizeof(err)), 0);
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];

    pr_batch_cfg b = {0};
    assert_int_equal(pr_cfgmap_set_defaults(&pr_batch_cfgmap, &b), 0);
    assert_memory_equal(&b, &pl->batch, sizeof(b));

    pr_trainer_sink_cfg t = {.enabled = true};
    assert_int_equal(pr_cfgmap_set_defaults(&pr_sink_trainer_cfgmap, &t), 0);
    assert_string_equal(t.listen, pl->sinks.trainer.listen);
    assert_int_equal(t.max_unacked_batches, pl->sinks.trainer.max_unacked_batches);
    assert_int_equal(t.ack_timeout_ms, pl->sinks.trainer.ack_timeout_ms);
    assert_int_equal(t.keepalive_ms, 10000); /* internal: not a YAML key */
    assert_int_equal(pl->sinks.trainer.keepalive_ms, 0);

    pr_files_sink_cfg f = {0};
    assert_int_equal(pr_cfgmap_set_defaults(&pr_sink_files_cfgmap, &f), 0);
    assert_int_equal(f.roll_batches, pl->sinks.files.roll_batches);

    pr_source_cfg src = {0};
    assert_int_equal(pr_cfgmap_set_defaults(&pr_source_cfgmap, &src), 0);
    assert_int_equal(src.format, pl->source.format);

    pr_engine_opts eo = {0};
    assert_int_equal(pr_cfgmap_set_defaults(&pr_engine_cfgmap, &eo), 0);
    assert_string_equal(eo.backend, cfg->engine.backend);
    assert_int_equal(eo.threads, cfg->engine.threads);
    assert_int_equal(eo.device, cfg->engine.device);

    /* default_zero keeps what is set and fills only the rest. */
    pr_batch_cfg z = {.size = 7};
    assert_int_equal(pr_cfgmap_default_zero(&pr_batch_cfgmap, &z), 0);
    assert_int_equal(z.size, 7);
    assert_int_equal(z.max_delay_ms, 100);

    /* Internal entries are neither keys nor documented. */
    const char *bad = MINIMAL "    sinks: { trainer: { keepalive_ms: 5 } }\n";
    pr_config *c2 = NULL;
    assert_int_equal(pr_config_load_string(bad, strlen(bad), "t.yaml", &c2, err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "sinks.trainer.keepalive_ms: unknown key"));
    pr_config_free(cfg);
}

/* ---------------------------------------------------------------- feature schema (issue 20) */

static const pr_feature_spec *feat(const pr_pipeline_cfg *pl, const char *name)
{
    for (uint32_t i = 0; i < pl->features.n_features; i++)
        if (strcmp(pl->features.features[i].name, name) == 0)
            return &pl->features.features[i];
    fail_msg("no feature %s", name);
    return NULL;
}

/* examples/clickstream.yaml: every kind, argument and option lands in the spec. */
static void test_schema_declared(void **state)
{
    (void)state;
    char err[4096];
    pr_config *cfg = NULL;
    if (pr_config_load_file(PR_SOURCE_DIR "/examples/clickstream.yaml", &cfg, err, sizeof(err)))
        fail_msg("example: %s", err);
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    const pr_feature_schema *fs = &pl->features;
    assert_true(fs->declared);
    assert_int_equal(fs->n_features, 16);
    /* Event time, labels, dense, sparse, each in file order. */
    static const char *const order[] = {"event_time", "click",    "purchase", "dwell",
                                        "price",      "age_days", "price_z",  "user",
                                        "item",       "category", "tags",     "history",
                                        "age_bucket", "hour",     "weekday",  "cat_x_device"};
    for (int i = 0; i < 16; i++)
        assert_string_equal(fs->features[i].name, order[i]);
    const pr_feature_spec *f = feat(pl, "event_time");
    assert_int_equal(f->kind, PR_FEAT_EVENT_TIME);
    assert_string_equal(f->paths[0], "ts");
    assert_int_equal(f->unit, PR_TIME_MS);
    f = feat(pl, "purchase");
    assert_int_equal(f->kind, PR_FEAT_LABEL);
    assert_true(f->has_default && f->deflt.value_type == PR_FTYPE_NUM && f->deflt.a == 0);
    assert_false(feat(pl, "click")->has_default);
    f = feat(pl, "price");
    assert_string_equal(f->paths[0], "item.price");
    assert_int_equal(f->n_ops, 2);
    assert_int_equal(f->ops[0].op, PR_FOP_CLIP);
    assert_true(f->ops[0].a == 0 && f->ops[0].b == 10000);
    assert_int_equal(f->ops[1].op, PR_FOP_LOG1P);
    f = feat(pl, "price_z");
    assert_int_equal(f->ops[0].op, PR_FOP_FILL);
    assert_true(f->ops[0].a == 20);
    assert_true(f->ops[1].a == 20 && f->ops[1].b == 15);
    f = feat(pl, "item");
    assert_int_equal(f->ops[0].op, PR_FOP_MODULUS);
    assert_int_equal(f->ops[0].n, 1000000);
    f = feat(pl, "category");
    assert_true(f->has_default && f->deflt.value_type == PR_FTYPE_STR);
    assert_string_equal(f->deflt.str, "unknown");
    f = feat(pl, "tags");
    assert_int_equal(f->kind, PR_FEAT_LIST);
    assert_int_equal(f->max_len, 8);
    assert_false(f->keep_last);
    assert_int_equal(f->ops[0].n, 4096);
    f = feat(pl, "history");
    assert_int_equal(f->kind, PR_FEAT_LIST);
    assert_int_equal(f->max_len, 10);
    assert_true(f->keep_last);
    f = feat(pl, "age_bucket");
    assert_int_equal(f->ops[0].n_bounds, 4);
    assert_true(f->ops[0].bounds[3] == 1000);
    f = feat(pl, "hour");
    assert_int_equal(f->ops[0].op, PR_FOP_HOUR_OF_DAY);
    assert_int_equal(f->ops[0].unit, PR_TIME_MS); /* from event_time */
    f = feat(pl, "cat_x_device");
    assert_int_equal(f->n_paths, 2);
    assert_string_equal(f->paths[1], "context.device");
    assert_int_equal(f->n_ops, 2);
    assert_int_equal(f->ops[0].op, PR_FOP_CROSS);
    assert_int_equal(f->ops[1].n, 65536);
    assert_true(fs->cpu_ops & (1u << PR_FOP_CROSS));
    assert_false(fs->cpu_ops & (1u << PR_FOP_NEG2ZERO));
    /* Today's spec follows: counts, names, the engine ops in use, moduli. */
    assert_true(pl->spec.has_label);
    assert_int_equal(pl->spec.n_dense, 3);
    assert_string_equal(pl->dense_names[2], "price_z");
    assert_int_equal(pl->spec.n_sparse, 9);
    assert_string_equal(pl->spec.sparse[0].name, "user");
    assert_int_equal(pl->spec.sparse[1].modulus, 1000000);
    assert_int_equal(pl->spec.n_dense_ops, 0);
    assert_int_equal(pl->spec.n_sparse_ops, 2);
    assert_int_equal(pl->spec.sparse_ops[0], PR_OP_MODULUS);
    assert_int_equal(pl->spec.sparse_ops[1], PR_OP_VOCAB);
    /* Streaming runs it from JSON; any other format would be read as Criteo
     * columns, and json without a declared schema has nothing to read. */
    assert_int_equal(pl->source.format, PR_FORMAT_JSON);
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), 0);
    pr_config_free(cfg);
    cfg = load_ok("pipelines:\n  - name: p\n    source: { kafka: { topics: [t], properties: "
                  "{ bootstrap.servers: 'x:1' } } }\n    sinks: { files: { dir: /tmp/x } }\n"
                  "    schema: { sparse: [ { name: u, path: u, ops: [vocab] } ] }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].source.format: a declared schema reads JSON"));
    pr_config_free(cfg);
    cfg = load_ok("pipelines:\n  - name: p\n    source: { format: json, kafka: { topics: [t], "
                  "properties: { bootstrap.servers: 'x:1' } } }\n"
                  "    sinks: { files: { dir: /tmp/x } }\n");
    assert_int_equal(pr_config_check_streaming(cfg, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].source.format: json needs a declared schema"));
    pr_config_free(cfg);

    /* Integer and string values on sparse features; keep/unit forms. */
    cfg = load_ok(MINIMAL "    schema:\n      sparse:\n"
                          "        - { name: a, path: a, default: 18446744073709551615, "
                          "ops: [ { fill: 7 }, vocab ] }\n"
                          "        - { name: b, path: b, default: '12', ops: [ { day_of_week: "
                          "rfc3339 } ] }\n"
                          "        - { name: c, path: c, default: -3, ops: [ { hash: 5 } ] }\n");
    pl = &cfg->pipelines[0];
    f = feat(pl, "a");
    assert_int_equal(f->deflt.value_type, PR_FTYPE_INT);
    assert_true(f->deflt.n == UINT64_MAX);
    assert_int_equal(f->ops[0].value_type, PR_FTYPE_INT);
    f = feat(pl, "b");
    assert_int_equal(f->deflt.value_type, PR_FTYPE_STR); /* quoted: a string */
    assert_int_equal(f->ops[0].unit, PR_TIME_RFC3339);
    assert_true(feat(pl, "c")->deflt.n == (uint64_t)-3);
    assert_false(pl->spec.has_label);
    pr_config_free(cfg);
}

/* schema.filter: what each condition parses to, and every refusal naming
 * its key. */
#define FSPARSE "      sparse: [ { name: u, path: user.id, ops: [vocab] } ]\n"

static void filter_refused(const char *filter, const char *want)
{
    char y[8192], err[4096];
    snprintf(y, sizeof(y), SCHEMA FSPARSE "      filter:\n%s", filter);
    load_fail(y, err, sizeof(err));
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
}

/* Dense vectors: dim columns each, named NAME[k], in schema order with the
 * numbers; up to 4096 columns in all (more than the Criteo layout's 256). */
static void test_schema_dense_vectors(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(SCHEMA "      dense:\n"
                                    "        - { name: price, path: price }\n"
                                    "        - { name: emb, path: item.emb, dim: 3000, default: 0, "
                                    "ops: [ { clip: [-1, 1] } ] }\n"
                                    "        - { name: age, path: age }\n"
                                    "        - { name: v, path: v, dim: 2 }\n");
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    assert_int_equal(pl->spec.n_dense, 3004);
    assert_string_equal(pl->dense_names[0], "price");
    assert_string_equal(pl->dense_names[1], "emb[0]");
    assert_string_equal(pl->dense_names[3000], "emb[2999]");
    assert_string_equal(pl->dense_names[3001], "age");
    assert_string_equal(pl->dense_names[3003], "v[1]");
    const pr_feature_spec *f = feat(pl, "emb");
    assert_int_equal(f->dim, 3000);
    assert_int_equal(pr_feature_dense_cols(f), 3000);
    assert_true(pr_feature_reads_list(f));
    assert_int_equal(pr_feature_dense_cols(feat(pl, "price")), 1);
    assert_false(pr_feature_reads_list(feat(pl, "price")));
    assert_int_equal(pr_feature_schema_dense_cols(&pl->features), 3004);
    char names[4][PR_NAME_MAX];
    assert_int_equal(pr_feature_dense_names(&pl->features, names, 4), 3004);
    assert_string_equal(names[3], "emb[2]");
    pr_config_free(cfg);
}

static void test_schema_filter(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(SCHEMA FSPARSE "      filter:\n"
                                            "        - { path: type, in: [click, 3, true, '4'] }\n"
                                            "        - { path: user.bot, not_in: [false, -2] }\n"
                                            "        - { path: user.id, present: true }\n"
                                            "        - { path: deleted, present: false }\n");
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    assert_int_equal(fs->n_filter, 4);
    const pr_filter_cond *c = fs->filter;
    assert_string_equal(c[0].path, "type");
    assert_int_equal(c[0].op, PR_FILTER_IN);
    assert_int_equal(c[0].n_values, 4);
    assert_int_equal(c[0].values[0].type, PR_FTYPE_STR);
    assert_string_equal(c[0].values[0].str, "click");
    assert_int_equal(c[0].values[0].len, 5);
    assert_int_equal(c[0].values[1].type, PR_FTYPE_INT);
    assert_int_equal(c[0].values[1].i, 3);
    assert_int_equal(c[0].values[2].type, PR_FTYPE_INT); /* true: 1, as ids read it */
    assert_int_equal(c[0].values[2].i, 1);
    assert_int_equal(c[0].values[3].type, PR_FTYPE_STR); /* quoted: the string */
    assert_string_equal(c[0].values[3].str, "4");
    assert_int_equal(c[1].op, PR_FILTER_NOT_IN);
    assert_int_equal(c[1].values[0].i, 0);
    assert_int_equal(c[1].values[1].i, -2);
    assert_int_equal(c[2].op, PR_FILTER_PRESENT);
    assert_int_equal(c[3].op, PR_FILTER_ABSENT);
    pr_config_free(cfg);

    filter_refused("        - { path: type }\n",
                   "t.yaml:6: pipelines[0].schema.filter[0]: no test: a condition has one test");
    filter_refused(
        "        - { path: a, in: [x] }\n        - { path: b, in: [x], present: true }\n",
        "pipelines[0].schema.filter[1]: more than one test");
    filter_refused("        - { in: [x] }\n", "pipelines[0].schema.filter[0].path: ");
    filter_refused("        - { path: a, in: [] }\n", "schema.filter[0].in: 1..64 values, got 0");
    filter_refused("        - { path: a, in: x }\n", "schema.filter[0].in: expected a list");
    filter_refused("        - { path: a, in: [1.5] }\n",
                   "schema.filter[0].in[0]: a filter value is a string, an integer, true or "
                   "false, got '1.5' (quote it");
    filter_refused("        - { path: a, not_in: [x, ~] }\n",
                   "schema.filter[0].not_in[1]: null is not a value to match");
    filter_refused("        - { path: a, in: [x, y, x] }\n",
                   "schema.filter[0].in[2]: 'x' is listed twice");
    filter_refused("        - { path: a, in: [1, 2, 1] }\n",
                   "schema.filter[0].in[2]: '1' is listed twice");
    filter_refused("        - { path: a, in: [9223372036854775808] }\n",
                   "schema.filter[0].in[0]: 9223372036854775808 is beyond int64");
    filter_refused("        - { path: a, present: maybe }\n",
                   "schema.filter[0].present: expected true or false, got 'maybe'");
    filter_refused("        - { path: a..b, present: true }\n",
                   "schema.filter[0].path: invalid path 'a..b'");
    filter_refused("        - { path: a, in: [x], also: 1 }\n", "schema.filter[0].also");
    filter_refused("        - { path: user, present: true }\n",
                   "pipelines[0].schema.filter[0].path: 'user.id' is inside 'user' "
                   "(sparse[0].path)");
    filter_refused("        - { path: user.id.x, present: true }\n",
                   "pipelines[0].schema.sparse[0].path: 'user.id.x' is inside 'user.id' "
                   "(filter[0].path)");
    filter_refused("        - { path: a, in: "
                   "[aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa] }\n",
                   "at most 63 bytes, got 66");
    char many[4096];
    size_t n = 0;
    for (int i = 0; i < PR_FILTER_MAX_CONDS + 1; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n,
                              "        - { path: f%d, present: true }\n", i);
    filter_refused(many, "schema.filter: 1..16 conditions, got 17");
    n = (size_t)snprintf(many, sizeof(many), "        - { path: a, in: [");
    for (int i = 0; i < PR_FILTER_MAX_VALUES + 1; i++)
        n += (size_t)snprintf(many + n, sizeof(many) - n, "%s%d", i ? ", " : "", i);
    snprintf(many + n, sizeof(many) - n, "] }\n");
    filter_refused(many, "schema.filter[0].in: 1..64 values, got 65");
    /* features reading a field whole and inside are refused the same way */
    char err[4096];
    load_fail(SCHEMA "      sparse:\n        - { name: u, path: user, ops: [vocab] }\n"
                     "        - { name: v, path: user.id, ops: [vocab] }\n",
              err, sizeof(err));
    assert_non_null(
        strstr(err, "schema.sparse[0].path: 'user.id' is inside 'user' (sparse[1].path)"));
    /* the Criteo layout has no named fields */
    load_fail(MINIMAL "    schema:\n      filter: [ { path: a, present: true } ]\n", err,
              sizeof(err));
    assert_non_null(strstr(err, "pipelines[0].schema.filter: needs a declared schema"));
}

/* schema.downsample: what it parses to (the weight label after the others),
 * and every refusal naming its key. */
static void downsample_refused(const char *ds, const char *want)
{
    char y[4096], err[4096];
    snprintf(y, sizeof(y),
             SCHEMA "      labels: [ { name: click, path: click } ]\n" FSPARSE
                    "      downsample: %s\n",
             ds);
    load_fail(y, err, sizeof(err));
    if (!strstr(err, want))
        fail_msg("error '%s' lacks '%s'", err, want);
}

static void test_schema_downsample(void **state)
{
    (void)state;
    char err[4096];
    pr_config *cfg = load_ok(SCHEMA "      downsample: { weight: w, rate: 0.1, key: event.id, "
                                    "where: { path: click, in: [0] } }\n"
                                    "      labels: [ { name: click, path: click } ]\n" FSPARSE);
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    const pr_downsample *ds = &fs->downsample;
    assert_true(ds->enabled);
    assert_true(ds->rate == 0.1);
    assert_true(ds->threshold == (uint64_t)(0.1 * 18446744073709551616.0));
    assert_true(ds->has_where);
    assert_string_equal(ds->where.path, "click");
    assert_int_equal(ds->where.op, PR_FILTER_IN);
    assert_int_equal(ds->where.values[0].i, 0);
    assert_string_equal(ds->key, "event.id");
    assert_string_equal(ds->weight, "w");
    /* the weight is a label after the declared ones, without a path */
    assert_string_equal(fs->features[0].name, "click");
    assert_string_equal(fs->features[1].name, "w");
    assert_int_equal(fs->features[1].kind, PR_FEAT_LABEL);
    assert_true(fs->features[1].weight);
    assert_int_equal(fs->features[1].n_paths, 0);
    pr_config_free(cfg);
    cfg = load_ok(SCHEMA "      downsample: { rate: 1 }\n" FSPARSE);
    ds = &cfg->pipelines[0].features.downsample;
    assert_true(ds->enabled && !ds->has_where && !ds->key[0] && !ds->weight[0]);
    assert_true(ds->threshold == UINT64_MAX);
    assert_int_equal(cfg->pipelines[0].features.n_features, 1);
    pr_config_free(cfg);

    /* --set reaches its keys: a rate changed, a downsample added */
    cfg = load_ok(SCHEMA "      downsample: { rate: 0.1, weight: w }\n" FSPARSE);
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].schema.downsample.rate", "0.5", err, sizeof(err)), 0);
    assert_true(cfg->pipelines[0].features.downsample.rate == 0.5);
    assert_true(cfg->pipelines[0].features.downsample.threshold == (uint64_t)1 << 63);
    assert_int_equal(cfg->pipelines[0].features.n_features, 2); /* one weight label */
    pr_config_free(cfg);
    cfg = load_ok(SCHEMA FSPARSE);
    assert_int_equal(
        pr_config_set(cfg, "pipelines[0].schema.downsample.rate", "0.25", err, sizeof(err)), 0);
    assert_true(cfg->pipelines[0].features.downsample.enabled);
    pr_config_free(cfg);

    downsample_refused("{ rate: 0 }", "pipelines[0].schema.downsample.rate: the share of records "
                                      "kept: > 0 and <= 1, got 0");
    downsample_refused("{ rate: 1.5 }", "downsample.rate: the share of records kept");
    downsample_refused("{ rate: x }", "downsample.rate: expected a finite number, got 'x'");
    downsample_refused("{ key: id }", "downsample.rate: ");
    downsample_refused("{ rate: 0.5, where: [ { path: a, in: [1] } ] }",
                       "downsample.where: expected a condition");
    downsample_refused("{ rate: 0.5, where: { path: a } }", "downsample.where: no test");
    downsample_refused("{ rate: 0.5, key: 'a..b' }", "downsample.key: invalid path");
    downsample_refused("{ rate: 0.5, weight: click }",
                       "pipelines[0].schema.downsample.weight: 'click' is also the name of a label "
                       "feature");
    downsample_refused("{ rate: 0.5, weight: 'a b' }", "downsample.weight");
    downsample_refused("{ rate: 0.5, seed: 3 }", "downsample.seed");
    downsample_refused("0.5", "downsample: expected a mapping, got '0.5'");
    downsample_refused("", "pipelines[0].schema.downsample: expected a mapping { rate, where, key, "
                           "weight }, got nothing");
    downsample_refused("{ rate: 0.5, key: user }", "'user.id' is inside 'user' (sparse[0].path)");
    load_fail(MINIMAL "    schema:\n      downsample: { rate: 0.5 }\n", err, sizeof(err));
    assert_non_null(strstr(err, "pipelines[0].schema.downsample: needs a declared schema"));
}

/* No declared schema: the Criteo preset of the final spec. */
static void test_schema_preset(void **state)
{
    (void)state;
    char err[1024];
    pr_config *cfg = NULL;
    assert_int_equal(pr_config_load_default(&cfg, err, sizeof(err)), 0);
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    assert_false(pl->features.declared);
    assert_int_equal(pl->features.n_features, 40);
    assert_int_equal(pl->features.features[0].kind, PR_FEAT_LABEL);
    assert_string_equal(pl->features.features[1].name, "I1");
    assert_string_equal(pl->features.features[39].name, "C26");
    assert_int_equal(pl->features.features[39].ops[1].n, 524288);
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "    schema: { label: false, dense_names: [x, y], sparse: 2 }\n"
                          "    transform:\n      dense: [log1p]\n      sparse: [hex2int, vocab]\n");
    pl = &cfg->pipelines[0];
    assert_int_equal(pl->features.n_features, 4);
    assert_string_equal(pl->features.features[0].name, "x");
    assert_string_equal(pl->features.features[0].paths[0], "x");
    assert_int_equal(pl->features.features[0].n_ops, 1);
    assert_int_equal(pl->features.features[0].ops[0].op, PR_FOP_LOG1P);
    assert_int_equal(pl->features.features[3].n_ops, 2);
    assert_int_equal(pl->features.features[3].ops[1].op, PR_FOP_VOCAB);
    pr_config_free(cfg);
    cfg = load_ok(MINIMAL "    transform: { columns: { C3: { modulus: 77 } } }\n");
    assert_int_equal(feat(&cfg->pipelines[0], "C3")->ops[1].n, 77);
    /* The counts still take overrides, and the preset follows them. */
    assert_int_equal(pr_config_set(cfg, "pipelines[0].schema.sparse", "3", err, sizeof(err)), 0);
    assert_int_equal(cfg->pipelines[0].spec.n_sparse, 3);
    assert_int_equal(cfg->pipelines[0].features.n_features, 1 + 13 + 3);
    assert_int_equal(pr_config_set(cfg, "pipelines[0].schema.dense", "x", err, sizeof(err)),
                     PR_EINVAL);
    assert_non_null(strstr(err, "pipelines[0].schema.dense: expected an integer, got 'x'"));
    pr_config_free(cfg);
}

/* Placement is checked against engine.backend, also after an override. */
/* Shared vocabularies: members map to their owner's engine column (named
 * after it, with its transform.columns options; a map's values among
 * them), a feature naming itself owns its table, the owner keeps the
 * fingerprint it has alone. */
static void test_schema_tables(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(SCHEMA "      sparse:\n"
                                    "        - { name: h, path: h, list: { max_len: 4 }, ops: "
                                    "[vocab], table: it }\n"
                                    "        - { name: it, path: i, ops: [vocab] }\n"
                                    "        - { name: u, path: u, ops: [vocab], table: u }\n"
                                    "        - { name: x, path: x, ops: [ { hash: 9 } ] }\n"
                                    "        - { name: c, path: c.id, list: { max_len: 2 }, ops: "
                                    "[vocab], table: it }\n"
                                    "        - { name: sv, path: slots, list: { max_len: 3, from: "
                                    "values }, ops: [vocab], table: it }\n"
                                    "    transform:\n      vocab: { profile: default }\n"
                                    "      columns: { it: { capacity: 50, eviction: lru } }\n");
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_pipeline_spec es;
    char err[256];
    assert_int_equal(pr_feature_engine_spec(fs, &cfg->pipelines[0].spec, &es, err, sizeof(err)), 0);
    assert_int_equal(es.n_sparse, 2);
    assert_string_equal(es.sparse[0].name, "it");
    assert_string_equal(es.sparse[1].name, "u");
    assert_int_equal(es.sparse[0].capacity, 50);
    assert_int_equal(es.sparse[0].eviction, PR_EVICT_LRU);
    assert_true(es.sparse[0].input_fp == pr_feature_vocab_input_fp(&fs->features[1]));
    assert_string_equal(fs->features[2].table, ""); /* naming itself: its own */
    pr_fside *sd = pr_feature_side_new(fs, 8);
    assert_non_null(sd);
    static const int16_t cols[] = {0, 0, 1, -1, 0, 0};
    assert_memory_equal(sd->vocab_col, cols, sizeof(cols));
    assert_true(sd->shared);
    /* a map's values (list: { from: values }) are ids as any list's: a member */
    const pr_feature_spec *sv = &fs->features[5];
    assert_true(sv->from_values && sv->from_keys && !sv->from_entries);
    /* a record puts up to 4 + 1 + 2 + 3 keys in the table's column */
    assert_true(pr_feature_block_scap(fs, 1) >= 10);
    pr_fside_free(sd);
    pr_config_free(cfg);
}

/* weights.ops: the numeric operators, parsed by the ops: parser, in order;
 * the default kept as written (a double, the chain's input). */
static void test_schema_weight_ops(void **state)
{
    (void)state;
    pr_config *cfg = load_ok(
        MINIMAL "    schema:\n      sparse:\n"
                "        - { name: h, path: h, list: { max_len: 4 }, ops: [vocab],\n"
                "            weights: { path: w, default: 0.1, ops: [neg2zero, log1p, { clip: "
                "[0, 5] }, { standardize: { mean: 1.5, std: 2 } }] } }\n"
                "        - { name: m, path: m, list: { max_len: 4, from: keys }, ops: [vocab],\n"
                "            weights: { from: values, ops: [log1p] } }\n"
                "        - { name: u, path: u, list: { max_len: 4 }, weights: { path: v },\n"
                "            ops: [vocab] }\n");
    const pr_pipeline_cfg *pl = &cfg->pipelines[0];
    const pr_feature_spec *f = feat(pl, "h");
    assert_true(f->has_weight_default && f->weight_default == 0.1);
    assert_int_equal(f->n_weight_ops, 4);
    assert_int_equal(f->weight_ops[0].op, PR_FOP_NEG2ZERO);
    assert_int_equal(f->weight_ops[1].op, PR_FOP_LOG1P);
    assert_int_equal(f->weight_ops[2].op, PR_FOP_CLIP);
    assert_true(f->weight_ops[2].a == 0 && f->weight_ops[2].b == 5);
    assert_int_equal(f->weight_ops[3].op, PR_FOP_STANDARDIZE);
    assert_true(f->weight_ops[3].a == 1.5 && f->weight_ops[3].b == 2);
    assert_int_equal(f->n_ops, 1); /* the ids' chain is its own */
    f = feat(pl, "m");
    assert_true(f->weights_from_values && f->n_weight_ops == 1);
    assert_int_equal(f->weight_ops[0].op, PR_FOP_LOG1P);
    assert_int_equal(feat(pl, "u")->n_weight_ops, 0);
    /* the weights' operators may run on the cpu beside an FPGA backend */
    char err[2048];
    assert_int_equal(pr_config_set(cfg, "pipelines[0].schema.cpu_ops",
                                   "[vocab, neg2zero, log1p, clip, "
                                   "standardize]",
                                   err, sizeof(err)),
                     0);
    assert_int_equal(pr_config_set(cfg, "engine.backend", "hls-sim", err, sizeof(err)), 0);
    pr_config_free(cfg);
    for (int op = 0; op < PR_FOP__COUNT; op++) /* the numeric operators, by the table */
        assert_int_equal(pr_fop_weight_op((pr_fop)op), op == PR_FOP_CLIP || op == PR_FOP_NEG2ZERO ||
                                                           op == PR_FOP_LOG1P ||
                                                           op == PR_FOP_STANDARDIZE);
}

static void test_schema_placement(void **state)
{
    (void)state;
    static const char yaml[] =
        MINIMAL "    schema:\n      dense: [ { name: p, path: p, ops: [ neg2zero, { clip: [0, "
                "1] } ] } ]\n      sparse: [ { name: s, path: s, ops: [hex2int, { modulus: 9 }, "
                "vocab] } ]\n";
    pr_config *cfg = load_ok(yaml);
    char err[2048];
    assert_int_equal(pr_config_set(cfg, "engine.backend", "xrt", err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "feature 'p': operator 'clip' cannot run on backend xrt"));
    assert_string_equal(cfg->engine.backend, "cpu"); /* unchanged */
    assert_int_equal(pr_config_set(cfg, "pipelines[0].schema.cpu_ops", "[clip]", err, sizeof(err)),
                     0);
    assert_int_equal(pr_config_set(cfg, "engine.backend", "xrt", err, sizeof(err)), 0);
    assert_int_equal(cfg->pipelines[0].features.cpu_ops, 1u << PR_FOP_CLIP);
    pr_config_free(cfg);
    /* The Criteo preset runs on every backend, and loads as before even where
     * the kernel cannot run it (the engine refuses it when it starts). */
    cfg = load_ok(MINIMAL "engine: { backend: hls-sim }\n");
    pr_config_free(cfg);
    cfg =
        load_ok(MINIMAL "    transform: { sparse: [hex2int, vocab] }\nengine: { backend: xrt }\n");
    pr_config_free(cfg);
    /* Overrides before validation make a refused file load. */
    char path[] = "/tmp/pr_test_schema_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    static const char bad[] = MINIMAL "    schema:\n      dense: [ { name: p, path: p, ops: [ "
                                      "{ clip: [0, 1] } ] } ]\nengine: { backend: hls-sim }\n";
    assert_int_equal(write(fd, bad, sizeof(bad) - 1), (ssize_t)(sizeof(bad) - 1));
    close(fd);
    assert_int_equal(pr_config_load_file(path, &cfg, err, sizeof(err)), PR_EINVAL);
    char *ovp[1] = {"engine.backend"}, *ovv[1] = {"cpu"};
    assert_int_equal(pr_config_load_file_with(path, ovp, ovv, 1, &cfg, err, sizeof(err)), 0);
    assert_string_equal(cfg->engine.backend, "cpu");
    pr_config_free(cfg);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_loads),
        cmocka_unit_test(test_minimal_defaults),
        cmocka_unit_test(test_full_config),
        cmocka_unit_test(test_group_id_default),
        cmocka_unit_test(test_disabled_sections),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_errors_collected),
        cmocka_unit_test(test_size_units),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_properties_passthrough),
        cmocka_unit_test(test_property_references),
        cmocka_unit_test(test_kafka_clients_checked),
        cmocka_unit_test(test_files_dirs_refused),
        cmocka_unit_test(test_column_overrides),
        cmocka_unit_test(test_ttl_s),
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_reference_documented),
        cmocka_unit_test(test_combinations_refused),
        cmocka_unit_test(test_component_defaults_match_loader),
        cmocka_unit_test(test_schema_declared),
        cmocka_unit_test(test_schema_dense_vectors),
        cmocka_unit_test(test_schema_filter),
        cmocka_unit_test(test_schema_downsample),
        cmocka_unit_test(test_schema_preset),
        cmocka_unit_test(test_schema_placement),
        cmocka_unit_test(test_schema_weight_ops),
        cmocka_unit_test(test_schema_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
