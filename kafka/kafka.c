/*
 * kafka.c — the client builder of pr_kafka.h: a scope table of the
 * properties piperec touches, one settings table per client role, and the
 * three steps (defaults, the user's properties, forced values) that turn
 * them into a librdkafka configuration. The user's values are resolved here
 * (${env:NAME}, ${file:PATH}: pr_kv_ref_resolve), so only a command that
 * builds a client needs the secrets they name.
 *
 * The values below are the ones each client was built with before this
 * builder existed (tests/kafka/test_kafka_builder.c compares the resulting
 * configurations with those hand-built ones, property by property); the
 * comments say why each value is piperec's.
 */
#include <stdlib.h>
#include <string.h>

#include "pr_cfgmap.h"
#include "pr_error.h"
#include "pr_kafka.h"
#include "pr_log.h"

#define PR__C    PR_KAFKA_SCOPE_CONSUMER
#define PR__P    PR_KAFKA_SCOPE_PRODUCER
#define PR__CP   PR_KAFKA_SCOPE_BOTH
#define PR__N(a) (sizeof(a) / sizeof((a)[0]))

/* ---------------------------------------------------------------- scopes */

typedef struct pr__scope {
    const char *key;
    unsigned scope;
} pr__scope;

/* librdkafka's scope ("C/P" in rd_kafka_conf_properties_show) of every
 * property a role below sets, plus the consumer properties that producers
 * built from a consumer's list have always skipped. */
static const pr__scope pr__scopes[] = {
    {"bootstrap.servers", PR__CP},
    {"metadata.broker.list", PR__CP},
    {"log_level", PR__CP},
    {"message.max.bytes", PR__CP},
    {"max.in.flight", PR__CP},
    {"group.id", PR__C},
    {"group.instance.id", PR__C},
    {"group.protocol.type", PR__C},
    {"partition.assignment.strategy", PR__C},
    {"session.timeout.ms", PR__C},
    {"heartbeat.interval.ms", PR__C},
    {"coordinator.query.interval.ms", PR__C},
    {"max.poll.interval.ms", PR__C},
    {"enable.auto.commit", PR__C},
    {"auto.commit.interval.ms", PR__C},
    {"enable.auto.offset.store", PR__C},
    {"auto.offset.reset", PR__C},
    {"enable.partition.eof", PR__C},
    {"check.crcs", PR__C},
    {"isolation.level", PR__C},
    {"queued.min.messages", PR__C},
    {"queued.max.messages.kbytes", PR__C},
    {"fetch.wait.max.ms", PR__C},
    {"fetch.message.max.bytes", PR__C},
    {"max.partition.fetch.bytes", PR__C},
    {"fetch.max.bytes", PR__C},
    {"fetch.min.bytes", PR__C},
    {"fetch.error.backoff.ms", PR__C},
    {"enable.idempotence", PR__P},
    {"acks", PR__P},
    {"linger.ms", PR__P},
    {"message.timeout.ms", PR__P},
    {"batch.num.messages", PR__P},
    {"batch.size", PR__P},
    {"queue.buffering.max.messages", PR__P},
    {"queue.buffering.max.kbytes", PR__P},
};

unsigned pr_kafka_prop_scope(const char *key)
{
    for (size_t i = 0; i < PR__N(pr__scopes); i++)
        if (!strcmp(key, pr__scopes[i].key))
            return pr__scopes[i].scope;
    return 0;
}

/* ---------------------------------------------------------------- roles */

typedef enum pr__how {
    PR__DEFAULT,    /* set before the user's properties, which may override it */
    PR__FORCED,     /* set after them: a user's value is checked, then replaced */
    PR__OWNED,      /* the user's value is dropped; ours is set after them */
    PR__OWNED_WARN, /* the same, with a warning that the user's value is ignored */
    PR__DROPPED,    /* the user's value is dropped; nothing is set */
} pr__how;

typedef struct pr__setting {
    const char *key, *value;
    pr__how how;
    const char *unless; /* PR__DEFAULT: not applied when the user sets this key */
} pr__setting;

typedef struct pr__role {
    const char *name;        /* errors and logs: "<name>: ..." */
    const char *prop_prefix; /* a user property in errors: "<prefix><key>: ..." */
    rd_kafka_type_t type;
    bool shared_list;    /* the user's list is a client's of the other type too */
    bool need_bootstrap; /* refuse a configuration without bootstrap.servers */
    const pr__setting *settings;
    size_t n_settings;
} pr__role;

/* Offsets are stored by the service (offset + 1 of acknowledged rows) and
 * committed by librdkafka's timer; every reset goes through the consumer
 * (auto.offset.reset=error; it keeps the user's value itself); incremental
 * rebalancing. session.timeout.ms 6 s (librdkafka: 45 s) bounds the stall of
 * a restart under dynamic membership (the brokers' minimum), heartbeats a
 * third of that unless the user picked the session; queued.min.messages 1M
 * (librdkafka: 100k) keeps fetching small messages instead of idling between
 * round trips (bench/bench_stream.sh: rows/s x2; memory still bounded by
 * queued.max.messages.kbytes). queued.max.messages.kbytes 256 MiB (librdkafka
 * 2.0: 64 MiB): that limit applies to the one queue all partitions share, and
 * once a fetch finds it reached, the fetcher sleeps a fixed 1 s (librdkafka
 * < 2.4 has no fetch.queue.backoff.ms; draining the queue does not wake it).
 * A pipeline that empties the queue in less than that waits out the rest:
 * 16-line messages (3.9 KB) ran at ~64 MiB/s whatever the cores
 * (bench/RESULTS.md, issue 21). The queue should hold ~1 s of input.
 * fetch.wait.max.ms 10 (librdkafka: 500): how long a broker may hold a fetch
 * that finds no new data; a record produced meanwhile waits for it where the
 * broker does not answer early (the test broker never does), and requests
 * queued behind it on the connection wait too. Freshness is promised within
 * batch.max_delay_ms + 20 ms; an idle consumer then sends ~100 small fetches
 * per second per broker. enable.partition.eof: a partition's end tells the
 * consumer how far the log goes past its last record (transaction markers,
 * aborted records), so that its committed offset reaches the end. */
static const pr__setting pr__group_consumer[] = {
    {"enable.auto.commit", "true", PR__DEFAULT, NULL},
    {"session.timeout.ms", "6000", PR__DEFAULT, NULL},
    {"heartbeat.interval.ms", "2000", PR__DEFAULT, "session.timeout.ms"},
    {"queued.min.messages", "1000000", PR__DEFAULT, NULL},
    {"queued.max.messages.kbytes", "262144", PR__DEFAULT, NULL},
    {"fetch.wait.max.ms", "10", PR__DEFAULT, NULL},
    {"enable.auto.offset.store", "false", PR__OWNED_WARN, NULL},
    {"partition.assignment.strategy", "cooperative-sticky", PR__OWNED_WARN, NULL},
    {"auto.offset.reset", "error", PR__OWNED, NULL},
    {"enable.partition.eof", "true", PR__OWNED, NULL},
};

/* A dead letter holds its source offset until confirmed: never lost, never
 * duplicated by a retry. */
static const pr__setting pr__dlq_producer[] = {
    {"enable.idempotence", "true", PR__OWNED, NULL},
    {"acks", "all", PR__OWNED, NULL},
    {"linger.ms", "20", PR__FORCED, NULL},
};

/* A batch is acked by its delivery report; the user may trade that away. */
static const pr__setting pr__sink_producer[] = {
    {"enable.idempotence", "true", PR__DEFAULT, NULL},
    {"acks", "all", PR__DEFAULT, NULL},
    {"linger.ms", "5", PR__DEFAULT, NULL},
    {"message.max.bytes", "67108864", PR__DEFAULT, NULL},
};

/* Proposals are never lost or reordered, and an outage makes blocks wait
 * instead of failing them: no message timeout. */
static const pr__setting pr__vocab_producer[] = {
    {"enable.idempotence", "true", PR__OWNED, NULL}, {"acks", "all", PR__OWNED, NULL},
    {"message.timeout.ms", "0", PR__FORCED, NULL},   {"linger.ms", "0", PR__FORCED, NULL},
    {"max.in.flight", "5", PR__FORCED, NULL},
};

/* The reader only assigns and never commits (its group.id is the caller's,
 * per pipeline); it fetches eagerly: a waiting block's latency is its round
 * trip. */
static const pr__setting pr__vocab_reader[] = {
    {"group.id", NULL, PR__DROPPED, NULL},
    {"group.instance.id", NULL, PR__DROPPED, NULL},
    {"enable.auto.commit", "false", PR__FORCED, NULL},
    {"enable.partition.eof", "true", PR__FORCED, NULL},
    {"auto.offset.reset", "error", PR__FORCED, NULL},
    {"fetch.wait.max.ms", "10", PR__FORCED, NULL},
    {"fetch.error.backoff.ms", "20", PR__FORCED, NULL},
};

static const pr__setting pr__cli_producer[] = {
    {"enable.idempotence", "true", PR__DEFAULT, NULL},
    {"acks", "all", PR__DEFAULT, NULL},
    {"linger.ms", "5", PR__DEFAULT, NULL},
    {"batch.num.messages", "10000", PR__DEFAULT, NULL},
    {"queue.buffering.max.kbytes", "262144", PR__DEFAULT, NULL},
};

static const pr__setting pr__demo_producer[] = {
    {"linger.ms", "5", PR__DEFAULT, NULL},
    {"batch.num.messages", "10000", PR__DEFAULT, NULL},
    {"queue.buffering.max.messages", "500000", PR__DEFAULT, NULL},
    {"acks", "all", PR__DEFAULT, NULL},
    {"enable.idempotence", "true", PR__DEFAULT, NULL},
};

/* The mock cluster's host handle talks to nobody: keep its logs quiet. */
static const pr__setting pr__test_broker[] = {
    {"log_level", "3", PR__DEFAULT, NULL},
};

#define PR__ROLE(name, prefix, type, shared, boot, settings)                                       \
    {                                                                                              \
        name, prefix, type, shared, boot, settings, PR__N(settings)                                \
    }

static const pr__role pr__roles[PR_KAFKA_ROLE__COUNT] = {
    [PR_KAFKA_GROUP_CONSUMER] = PR__ROLE("consumer", "consumer: property ", RD_KAFKA_CONSUMER,
                                         false, true, pr__group_consumer),
    [PR_KAFKA_DLQ_PRODUCER] = PR__ROLE("dead-letter producer", "dead-letter producer: property ",
                                       RD_KAFKA_PRODUCER, true, false, pr__dlq_producer),
    [PR_KAFKA_SINK_PRODUCER] = PR__ROLE("kafka sink producer", "sinks.kafka.properties.",
                                        RD_KAFKA_PRODUCER, false, false, pr__sink_producer),
    [PR_KAFKA_VOCAB_PRODUCER] = PR__ROLE("vocab log producer", "vocab_log.properties.",
                                         RD_KAFKA_PRODUCER, true, false, pr__vocab_producer),
    [PR_KAFKA_VOCAB_READER] = PR__ROLE("vocab log reader", "vocab_log.properties.",
                                       RD_KAFKA_CONSUMER, false, false, pr__vocab_reader),
    [PR_KAFKA_CLI_PRODUCER] =
        PR__ROLE("producer", "-X ", RD_KAFKA_PRODUCER, false, false, pr__cli_producer),
    [PR_KAFKA_DEMO_PRODUCER] = PR__ROLE("demo producer", "demo producer: property ",
                                        RD_KAFKA_PRODUCER, false, false, pr__demo_producer),
    [PR_KAFKA_TEST_BROKER] = PR__ROLE("mock broker", "mock broker: property ", RD_KAFKA_PRODUCER,
                                      false, false, pr__test_broker),
    [PR_KAFKA_PLAIN_PRODUCER] = {"producer", "property ", RD_KAFKA_PRODUCER, false, false, NULL, 0},
    [PR_KAFKA_PLAIN_CONSUMER] = {"consumer", "property ", RD_KAFKA_CONSUMER, false, false, NULL, 0},
};

static const pr__role *pr__role_of(pr_kafka_role role)
{
    return (unsigned)role < PR_KAFKA_ROLE__COUNT ? &pr__roles[role] : NULL;
}

rd_kafka_type_t pr_kafka_role_type(pr_kafka_role role)
{
    const pr__role *r = pr__role_of(role);
    return r ? r->type : RD_KAFKA_PRODUCER;
}

void pr_kafka_log_quiet_connect(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    bool conn = !strcmp(fac, "FAIL") || !strcmp(fac, "ERROR");
    pr_log(conn         ? PR_LOG_DEBUG
           : level <= 3 ? PR_LOG_ERROR
           : level <= 4 ? PR_LOG_WARN
                        : PR_LOG_DEBUG,
           "librdkafka %s: %s", fac, buf);
}

const char *pr_kafka_role_name(pr_kafka_role role)
{
    const pr__role *r = pr__role_of(role);
    return r ? r->name : "kafka client";
}

static const pr__setting *pr__setting_of(const pr__role *r, const char *key)
{
    for (size_t i = 0; i < r->n_settings; i++)
        if (!strcmp(r->settings[i].key, key))
            return &r->settings[i];
    return NULL;
}

/* Step 2's filter: why the user's `key` does not reach the client, or NULL. */
static const char *pr__drop_reason(const pr__role *r, const char *key)
{
    const pr__setting *s = pr__setting_of(r, key);
    if (s && s->how >= PR__OWNED)
        return "owned";
    unsigned want = r->type == RD_KAFKA_CONSUMER ? PR__C : PR__P;
    unsigned scope = pr_kafka_prop_scope(key);
    if (r->shared_list && scope && !(scope & want))
        return "scope";
    return NULL;
}

bool pr_kafka_prop_dropped(pr_kafka_role role, const char *key)
{
    const pr__role *r = pr__role_of(role);
    return r && key && pr__drop_reason(r, key);
}

/* ---------------------------------------------------------------- building */

static bool pr__has(const pr_kv *kv, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(kv[i].key, key))
            return true;
    return false;
}

/* One rd_kafka_conf_set; a failure is named "<name><key>: <reason>". */
static int pr__set(rd_kafka_conf_t *conf, const char *key, const char *value, const char *name,
                   bool user, char *errstr, size_t errstr_size)
{
    char kerr[512];
    if (rd_kafka_conf_set(conf, key, value, kerr, sizeof(kerr)) == RD_KAFKA_CONF_OK)
        return 0;
    if (user)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s%s: %s", name, key, kerr);
    return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: %s", name, kerr);
}

/* Steps 1 and 3: the role's settings of one kind (`late`: forced and
 * owned), then the caller's list. */
static int pr__apply_role(const pr__role *r, const pr_kafka_client_conf *cc, bool late,
                          rd_kafka_conf_t *conf, char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < r->n_settings; i++) {
        const pr__setting *s = &r->settings[i];
        if (!s->value || (s->how == PR__DEFAULT) == late)
            continue;
        if (s->unless && pr__has(cc->props, cc->n_props, s->unless))
            continue;
        int rc = pr__set(conf, s->key, s->value, r->name, false, errstr, errstr_size);
        if (rc)
            return rc;
    }
    const pr_kv *kv = late ? cc->set : cc->defaults;
    size_t n = late ? cc->n_set : cc->n_defaults;
    for (size_t i = 0; i < n; i++) {
        int rc = pr__set(conf, kv[i].key, kv[i].value, r->name, false, errstr, errstr_size);
        if (rc)
            return rc;
    }
    return 0;
}

/* Step 2: the user's properties through the role's filter. */
static int pr__apply_user(const pr__role *r, const pr_kafka_client_conf *cc, rd_kafka_conf_t *conf,
                          char *errstr, size_t errstr_size)
{
    for (size_t i = 0; i < cc->n_props; i++) {
        const char *k = cc->props[i].key, *v = cc->props[i].value;
        const pr__setting *s = pr__setting_of(r, k);
        if (pr__drop_reason(r, k)) {
            if (s && s->how == PR__OWNED_WARN)
                pr_warn("%s: property %s=%s ignored: piperec sets it", r->name, k, v);
            continue;
        }
        char *val, why[700];
        int rc = pr_kv_ref_resolve(v, &val, why, sizeof(why));
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "%s%s: %s", r->prop_prefix, k, why);
        rc = pr__set(conf, k, val, r->prop_prefix, true, errstr, errstr_size);
        free(val);
        if (rc)
            return rc;
    }
    return 0;
}

static bool pr__has_bootstrap(const pr_kafka_client_conf *cc)
{
    static const char *const keys[] = {"bootstrap.servers", "metadata.broker.list"};
    for (size_t i = 0; i < PR__N(keys); i++)
        if (pr__has(cc->props, cc->n_props, keys[i]) ||
            pr__has(cc->defaults, cc->n_defaults, keys[i]) || pr__has(cc->set, cc->n_set, keys[i]))
            return true;
    return false;
}

static void pr__set_callbacks(const pr_kafka_client_conf *cc, rd_kafka_conf_t *conf)
{
    if (cc->log_cb)
        rd_kafka_conf_set_log_cb(conf, cc->log_cb);
    if (cc->error_cb)
        rd_kafka_conf_set_error_cb(conf, cc->error_cb);
    if (cc->dr_msg_cb)
        rd_kafka_conf_set_dr_msg_cb(conf, cc->dr_msg_cb);
    if (cc->rebalance_cb)
        rd_kafka_conf_set_rebalance_cb(conf, cc->rebalance_cb);
    if (cc->offset_commit_cb)
        rd_kafka_conf_set_offset_commit_cb(conf, cc->offset_commit_cb);
    if (cc->opaque)
        rd_kafka_conf_set_opaque(conf, cc->opaque);
}

int pr_kafka_conf_new(const pr_kafka_client_conf *cc, rd_kafka_conf_t **out, char *errstr,
                      size_t errstr_size)
{
    *out = NULL;
    const pr__role *r = cc ? pr__role_of(cc->role) : NULL;
    if (!r)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "kafka client: unknown role");
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!conf)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", r->name);
    int rc = pr__apply_role(r, cc, false, conf, errstr, errstr_size);
    if (!rc)
        rc = pr__apply_user(r, cc, conf, errstr, errstr_size);
    if (!rc && r->need_bootstrap && !pr__has_bootstrap(cc))
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: bootstrap.servers is not set", r->name);
    if (!rc)
        rc = pr__apply_role(r, cc, true, conf, errstr, errstr_size);
    if (rc) {
        rd_kafka_conf_destroy(conf);
        return rc;
    }
    pr__set_callbacks(cc, conf);
    *out = conf;
    return 0;
}

int pr_kafka_client_new(const pr_kafka_client_conf *cc, rd_kafka_t **out, char *errstr,
                        size_t errstr_size)
{
    char kerr[512];
    rd_kafka_conf_t *conf;
    *out = NULL;
    int rc = pr_kafka_conf_new(cc, &conf, errstr, errstr_size);
    if (rc)
        return rc;
    rd_kafka_t *rk = rd_kafka_new(pr_kafka_role_type(cc->role), conf, kerr, sizeof(kerr));
    if (!rk) {
        rd_kafka_conf_destroy(conf); /* rd_kafka_new takes it on success only */
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "%s: %s", pr_kafka_role_name(cc->role),
                         kerr);
    }
    *out = rk;
    return 0;
}

rd_kafka_t *pr_kafka_new_simple(pr_kafka_role role, const char *bootstrap, const pr_kv *props,
                                size_t n_props, char *errstr, size_t errstr_size)
{
    pr_kv boot = {"bootstrap.servers", bootstrap};
    pr_kafka_client_conf cc = {.role = role,
                               .props = props,
                               .n_props = n_props,
                               .defaults = &boot,
                               .n_defaults = bootstrap ? 1 : 0};
    rd_kafka_t *rk;
    return pr_kafka_client_new(&cc, &rk, errstr, errstr_size) ? NULL : rk;
}
