/*
 * pr_kafka.h — the one place piperec makes a librdkafka client: a builder
 * that knows each property's scope (consumer, producer, both) and the
 * project's own settings for every client role.
 *
 * Why: each client (group consumer, dead-letter producer, Kafka sink,
 * vocab-log producer and reader, `piperec produce`/`demo`, the test broker's
 * host handle, test and bench clients) used to be built by hand with its own
 * list of forced values, and a hand-kept list said which properties a
 * producer sharing a consumer's property list must skip. Now a role names
 * its client type and its settings, and one table says each property's scope.
 *
 * How a client's configuration is made (pr_kafka_conf_new), in this order:
 *   1. the role's defaults (a default may stand back when the user sets a
 *      related key: heartbeat.interval.ms when session.timeout.ms is given),
 *      then the caller's run-time defaults (`defaults`: a CLI --bootstrap);
 *   2. the user's properties (`props`, passed through to librdkafka, which
 *      checks names and values), except
 *        - a key the role owns: dropped (with a warning where the role says
 *          so), the role's value is set in step 3;
 *        - for a role whose list is another client's too (`shared list`: the
 *          dead-letter and vocab-log producers take a consumer's list), a key
 *          whose scope in the table below is the other client type only;
 *      a key the table does not know goes to librdkafka as is (librdkafka
 *      warns at creation about a property of the other client type and
 *      ignores it);
 *   3. the role's forced and owned values, then the caller's run-time values
 *      (`set`: a group.id), which no user property overrides.
 *
 * Scope table: the properties piperec sets, forces or keeps away from
 * producers, with librdkafka's own scope (its "C/P" column;
 * tests/kafka/test_kafka_builder.c checks the table against librdkafka).
 * The roles and their values are listed in kafka.c (one table each) and in
 * docs/architecture.md.
 *
 * Errors: 0 or a negative PR_E* (pr_error.h) with errstr naming the property
 * and what is wrong: "<role's property prefix><key>: <librdkafka's reason>"
 * for a user property (e.g. "sinks.kafka.properties.linger.ms: ..."),
 * "<role name>: <reason>" otherwise.
 *
 * Ownership: strings are copied by librdkafka; a conf returned is the
 * caller's until handed to rd_kafka_new (which takes it on success only).
 * Thread-safe: the tables are read-only.
 */
#ifndef PR_KAFKA_H
#define PR_KAFKA_H

#include <stdbool.h>
#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "pr_cfgmap.h" /* pr_kv */

/* Which client type understands a property (bit set). */
typedef enum pr_kafka_scope {
    PR_KAFKA_SCOPE_CONSUMER = 1,
    PR_KAFKA_SCOPE_PRODUCER = 2,
    PR_KAFKA_SCOPE_BOTH = 3,
} pr_kafka_scope;

/* Every client piperec makes. */
typedef enum pr_kafka_role {
    PR_KAFKA_GROUP_CONSUMER, /* ingest: the pipeline's consumer group member */
    PR_KAFKA_DLQ_PRODUCER,   /* ingest: dead letters, from the consumer's list */
    PR_KAFKA_SINK_PRODUCER,  /* sinks: the Kafka sink */
    PR_KAFKA_VOCAB_PRODUCER, /* vocab log: proposals, from the vocab log's list */
    PR_KAFKA_VOCAB_READER,   /* vocab log: assign-only reader of the log */
    PR_KAFKA_CLI_PRODUCER,   /* `piperec produce` */
    PR_KAFKA_DEMO_PRODUCER,  /* `piperec demo`'s event producer */
    PR_KAFKA_TEST_BROKER,    /* the host handle of the loopback test broker */
    PR_KAFKA_PLAIN_PRODUCER, /* tests, benches: exactly the given properties */
    PR_KAFKA_PLAIN_CONSUMER, /* tests, benches: exactly the given properties */
    PR_KAFKA_ROLE__COUNT
} pr_kafka_role;

/* What to build. Only `role` is required; NULL callbacks are not set. */
typedef struct pr_kafka_client_conf {
    pr_kafka_role role;
    const pr_kv *props; /* the user's properties (config, -X), see above */
    size_t n_props;
    const pr_kv *defaults; /* run-time defaults, before props (props win) */
    size_t n_defaults;
    const pr_kv *set; /* run-time values, last (nothing overrides them) */
    size_t n_set;
    void *opaque;
    void (*log_cb)(const rd_kafka_t *rk, int level, const char *fac, const char *buf);
    void (*error_cb)(rd_kafka_t *rk, int err, const char *reason, void *opaque);
    void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque);
    void (*rebalance_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque);
    void (*offset_commit_cb)(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *offsets, void *opaque);
} pr_kafka_client_conf;

/* The configuration of a client of cc->role, callbacks and opaque set; *out
 * is the caller's (rd_kafka_conf_destroy, or hand it to rd_kafka_new).
 * PR_EINVAL with the property named, PR_ENOMEM. */
int pr_kafka_conf_new(const pr_kafka_client_conf *cc, rd_kafka_conf_t **out, char *errstr,
                      size_t errstr_size);

/* pr_kafka_conf_new, then rd_kafka_new of the role's client type.
 * PR_EKAFKA ("<role name>: <librdkafka's reason>") when librdkafka refuses
 * to create it. */
int pr_kafka_client_new(const pr_kafka_client_conf *cc, rd_kafka_t **out, char *errstr,
                        size_t errstr_size);

/* Shorthand for tests, benches and tools: a client of `role` with
 * bootstrap.servers (a default; NULL = none) and `props`. NULL and a reason
 * on failure. */
rd_kafka_t *pr_kafka_new_simple(pr_kafka_role role, const char *bootstrap, const pr_kv *props,
                                size_t n_props, char *errstr, size_t errstr_size);

/* A log_cb for a client whose failure to reach the brokers its caller
 * reports itself (`run --check`, `infer --topic`): librdkafka's connection
 * failures (FAIL, ERROR) at debug level, the rest at their own level. */
void pr_kafka_log_quiet_connect(const rd_kafka_t *rk, int level, const char *fac, const char *buf);

/* RD_KAFKA_CONSUMER or RD_KAFKA_PRODUCER. */
rd_kafka_type_t pr_kafka_role_type(pr_kafka_role role);

/* "consumer", "dead-letter producer", ...: how errors and logs name it. */
const char *pr_kafka_role_name(pr_kafka_role role);

/* The scope of a property in the table, or 0 when the table does not know it. */
unsigned pr_kafka_prop_scope(const char *key);

/* True when a user's `key` never reaches a client of `role` (owned by the
 * role, or of the other scope in a shared list). */
bool pr_kafka_prop_dropped(pr_kafka_role role, const char *key);

#endif
