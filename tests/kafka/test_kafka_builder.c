/*
 * test_kafka_builder.c — pr_kafka.h's builder gives every client role the
 * configuration piperec's hand-built clients had.
 *
 * For each role, the expected configuration is built the way the client was
 * built before the builder (the same rd_kafka_conf_set calls in the same
 * order, written out below as sequences) and compared with the builder's,
 * property by property, through rd_kafka_conf_dump and the default topic
 * configuration's dump. The user properties given to each role exercise the
 * pass-through rules: owned keys, consumer properties in a producer's shared
 * list, defaults a user overrides. Also: the scope table agrees with
 * librdkafka's own, and errors name the property.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "pr_error.h"
#include "pr_kafka.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* The list of properties producers built from a consumer's list skipped
 * before the builder (ingest/dlq.c's pr__consumer_only). */
static const char *const old_consumer_only[] = {
    "group.id",
    "group.instance.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.commit.interval.ms",
    "partition.assignment.strategy",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "enable.partition.eof",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "fetch.wait.max.ms",
    "max.partition.fetch.bytes",
    "fetch.message.max.bytes",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "isolation.level",
    "check.crcs",
    "group.protocol.type",
    "coordinator.query.interval.ms",
    "enable.idempotence",
    "acks",
};

static bool old_skipped(const char *key)
{
    for (size_t i = 0; i < N(old_consumer_only); i++)
        if (!strcmp(key, old_consumer_only[i]))
            return true;
    return false;
}

/* A conf made by setting `seq` in order (every set must succeed). */
static rd_kafka_conf_t *conf_of(const pr_kv *seq, size_t n)
{
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    for (size_t i = 0; i < n; i++) {
        if (rd_kafka_conf_set(c, seq[i].key, seq[i].value, err, sizeof(err)) != RD_KAFKA_CONF_OK)
            fail_msg("expected sequence: %s=%s: %s", seq[i].key, seq[i].value, err);
    }
    return c;
}

/* Dumps equal, key by key (both are in librdkafka's property order). */
static void same_dump(const char **a, size_t na, const char **b, size_t nb, const char *what)
{
    if (na != nb)
        fail_msg("%s: %zu vs %zu dumped values", what, na / 2, nb / 2);
    for (size_t i = 0; i < na; i += 2) {
        assert_string_equal(a[i], b[i]);
        if (!strncmp(a[i + 1], "0x", 2) && !strncmp(b[i + 1], "0x", 2))
            continue; /* a pointer (default_topic_conf, a callback): set in both */
        if (strcmp(a[i + 1], b[i + 1]))
            fail_msg("%s: %s is '%s' today, '%s' from the builder", what, a[i], a[i + 1], b[i + 1]);
    }
}

static void assert_same_conf(rd_kafka_conf_t *want, rd_kafka_conf_t *got, const char *role)
{
    size_t na, nb;
    const char **a = rd_kafka_conf_dump(want, &na), **b = rd_kafka_conf_dump(got, &nb);
    same_dump(a, na, b, nb, role);
    rd_kafka_conf_dump_free(a, na);
    rd_kafka_conf_dump_free(b, nb);
    const rd_kafka_topic_conf_t *ta = rd_kafka_conf_get_default_topic_conf(want);
    const rd_kafka_topic_conf_t *tb = rd_kafka_conf_get_default_topic_conf(got);
    assert_true(!ta == !tb);
    if (!ta)
        return;
    a = rd_kafka_topic_conf_dump((rd_kafka_topic_conf_t *)ta, &na);
    b = rd_kafka_topic_conf_dump((rd_kafka_topic_conf_t *)tb, &nb);
    same_dump(a, na, b, nb, role);
    rd_kafka_conf_dump_free(a, na);
    rd_kafka_conf_dump_free(b, nb);
}

static rd_kafka_conf_t *built(const pr_kafka_client_conf *cc)
{
    char err[512];
    rd_kafka_conf_t *c = NULL;
    if (pr_kafka_conf_new(cc, &c, err, sizeof(err)))
        fail_msg("builder: %s", err);
    return c;
}

static void check(const pr_kv *want, size_t n, const pr_kafka_client_conf *cc)
{
    rd_kafka_conf_t *a = conf_of(want, n), *b = built(cc);
    assert_same_conf(a, b, pr_kafka_role_name(cc->role));
    rd_kafka_conf_destroy(a);
    rd_kafka_conf_destroy(b);
}

/* A source.kafka.properties list as users write it: consumer, producer and
 * shared properties, and the keys piperec owns. */
static const pr_kv source_props[] = {
    {"bootstrap.servers", "127.0.0.1:9"},
    {"client.id", "mine"},
    {"group.id", "users-group"},
    {"session.timeout.ms", "10000"},
    {"auto.offset.reset", "earliest"},
    {"enable.auto.offset.store", "true"},
    {"partition.assignment.strategy", "range"},
    {"queued.max.messages.kbytes", "1024"},
    {"acks", "1"},
    {"enable.idempotence", "false"},
    {"linger.ms", "100"},
    {"socket.keepalive.enable", "true"},
};

/* ingest/consumer.c before: enable.auto.commit, the user's properties less
 * auto.offset.reset and the two it warned about, its defaults where the user
 * set none, the forced values, group.id. */
static void test_group_consumer(void **state)
{
    (void)state;
    pr_kv want[32];
    size_t n = 0;
    want[n++] = (pr_kv){"enable.auto.commit", "true"};
    for (size_t i = 0; i < N(source_props); i++)
        if (strcmp(source_props[i].key, "auto.offset.reset") &&
            strcmp(source_props[i].key, "enable.auto.offset.store") &&
            strcmp(source_props[i].key, "partition.assignment.strategy"))
            want[n++] = source_props[i];
    /* session.timeout.ms given: no session or heartbeat default */
    want[n++] = (pr_kv){"queued.min.messages", "1000000"};
    want[n++] = (pr_kv){"fetch.wait.max.ms", "10"};
    want[n++] = (pr_kv){"group.instance.id", "replica-1"};
    want[n++] = (pr_kv){"enable.auto.offset.store", "false"};
    want[n++] = (pr_kv){"partition.assignment.strategy", "cooperative-sticky"};
    want[n++] = (pr_kv){"auto.offset.reset", "error"};
    want[n++] = (pr_kv){"enable.partition.eof", "true"};
    want[n++] = (pr_kv){"group.id", "pipeline-group"};
    pr_kv inst = {"group.instance.id", "replica-1"}, group = {"group.id", "pipeline-group"};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_GROUP_CONSUMER,
                               .props = source_props,
                               .n_props = N(source_props),
                               .defaults = &inst,
                               .n_defaults = 1,
                               .set = &group,
                               .n_set = 1};
    check(want, n, &cc);

    /* Only bootstrap.servers: every default applies. */
    const pr_kv want2[] = {
        {"enable.auto.commit", "true"},
        {"bootstrap.servers", "127.0.0.1:9"},
        {"session.timeout.ms", "6000"},
        {"heartbeat.interval.ms", "2000"},
        {"queued.min.messages", "1000000"},
        {"queued.max.messages.kbytes", "262144"},
        {"fetch.wait.max.ms", "10"},
        {"enable.auto.offset.store", "false"},
        {"partition.assignment.strategy", "cooperative-sticky"},
        {"auto.offset.reset", "error"},
        {"enable.partition.eof", "true"},
        {"group.id", "pipeline-group"},
    };
    cc.n_props = 1;
    cc.n_defaults = 0;
    check(want2, N(want2), &cc);

    /* A heartbeat of the user's own, no session: the session default stays. */
    const pr_kv hb[] = {{"bootstrap.servers", "127.0.0.1:9"}, {"heartbeat.interval.ms", "1000"}};
    const pr_kv want3[] = {
        {"enable.auto.commit", "true"},
        {"bootstrap.servers", "127.0.0.1:9"},
        {"heartbeat.interval.ms", "1000"},
        {"session.timeout.ms", "6000"},
        {"queued.min.messages", "1000000"},
        {"queued.max.messages.kbytes", "262144"},
        {"fetch.wait.max.ms", "10"},
        {"enable.auto.offset.store", "false"},
        {"partition.assignment.strategy", "cooperative-sticky"},
        {"auto.offset.reset", "error"},
        {"enable.partition.eof", "true"},
        {"group.id", "pipeline-group"},
    };
    cc.props = hb;
    cc.n_props = N(hb);
    check(want3, N(want3), &cc);
}

/* ingest/dlq.c before: the consumer's list less the consumer-only list, then
 * idempotence, acks=all, linger.ms=20. */
static void test_dlq_producer(void **state)
{
    (void)state;
    pr_kv want[32];
    size_t n = 0;
    for (size_t i = 0; i < N(source_props); i++)
        if (!old_skipped(source_props[i].key))
            want[n++] = source_props[i];
    want[n++] = (pr_kv){"enable.idempotence", "true"};
    want[n++] = (pr_kv){"acks", "all"};
    want[n++] = (pr_kv){"linger.ms", "20"};
    pr_kafka_client_conf cc = {
        .role = PR_KAFKA_DLQ_PRODUCER, .props = source_props, .n_props = N(source_props)};
    check(want, n, &cc);
}

/* sinks/sink_kafka.c before: its defaults, then the user's properties (which
 * may override them), consumer properties included (librdkafka ignores them). */
static void test_sink_producer(void **state)
{
    (void)state;
    const pr_kv props[] = {
        {"bootstrap.servers", "127.0.0.1:9"}, {"linger.ms", "50"}, {"group.id", "x"}};
    const pr_kv want[] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "5"},
        {"message.max.bytes", "67108864"},
        {"bootstrap.servers", "127.0.0.1:9"},
        {"linger.ms", "50"},
        {"group.id", "x"},
    };
    pr_kafka_client_conf cc = {.role = PR_KAFKA_SINK_PRODUCER, .props = props, .n_props = N(props)};
    check(want, N(want), &cc);
}

/* vocablog/vocablog.c before: the vocab log's list less the consumer-only
 * list, then its forced values; the reader: the list less group.id and
 * group.instance.id, its own group.id, then its forced values. */
static void test_vocab_clients(void **state)
{
    (void)state;
    pr_kv want[32];
    size_t n = 0;
    for (size_t i = 0; i < N(source_props); i++)
        if (!old_skipped(source_props[i].key))
            want[n++] = source_props[i];
    static const pr_kv prod_forced[] = {
        {"enable.idempotence", "true"}, {"acks", "all"},
        {"message.timeout.ms", "0"},    {"linger.ms", "0"},
        {"max.in.flight", "5"},
    };
    for (size_t i = 0; i < N(prod_forced); i++)
        want[n++] = prod_forced[i];
    pr_kafka_client_conf cc = {
        .role = PR_KAFKA_VOCAB_PRODUCER, .props = source_props, .n_props = N(source_props)};
    check(want, n, &cc);

    n = 0;
    for (size_t i = 0; i < N(source_props); i++)
        if (strcmp(source_props[i].key, "group.id") &&
            strcmp(source_props[i].key, "group.instance.id"))
            want[n++] = source_props[i];
    want[n++] = (pr_kv){"group.id", "piperec-vocablog-p"};
    static const pr_kv cons_forced[] = {
        {"enable.auto.commit", "false"},  {"enable.partition.eof", "true"},
        {"auto.offset.reset", "error"},   {"fetch.wait.max.ms", "10"},
        {"fetch.error.backoff.ms", "20"},
    };
    for (size_t i = 0; i < N(cons_forced); i++)
        want[n++] = cons_forced[i];
    pr_kv gid = {"group.id", "piperec-vocablog-p"};
    pr_kafka_client_conf rc = {.role = PR_KAFKA_VOCAB_READER,
                               .props = source_props,
                               .n_props = N(source_props),
                               .set = &gid,
                               .n_set = 1};
    check(want, n, &rc);
}

/* cli/cmd_produce.c and cmd_demo.c before: the fixed list (with the
 * bootstrap address), then -X properties; ingest/mock.c: log_level 3. */
static void test_cli_and_test_clients(void **state)
{
    (void)state;
    const pr_kv x[] = {{"linger.ms", "0"}, {"security.protocol", "plaintext"}};
    const pr_kv want[] = {
        {"bootstrap.servers", "127.0.0.1:9"},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.kbytes", "262144"},
        {"linger.ms", "0"},
        {"security.protocol", "plaintext"},
    };
    pr_kv boot = {"bootstrap.servers", "127.0.0.1:9"};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_CLI_PRODUCER,
                               .props = x,
                               .n_props = N(x),
                               .defaults = &boot,
                               .n_defaults = 1};
    check(want, N(want), &cc);

    const pr_kv demo[] = {
        {"bootstrap.servers", "127.0.0.1:9"},
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "500000"},
        {"acks", "all"},
        {"enable.idempotence", "true"},
    };
    pr_kafka_client_conf dc = {.role = PR_KAFKA_DEMO_PRODUCER, .defaults = &boot, .n_defaults = 1};
    check(demo, N(demo), &dc);

    const pr_kv host[] = {{"log_level", "3"}};
    pr_kafka_client_conf hc = {.role = PR_KAFKA_TEST_BROKER};
    check(host, N(host), &hc);

    pr_kafka_client_conf pc = {.role = PR_KAFKA_PLAIN_CONSUMER, .props = x, .n_props = N(x)};
    check(x, N(x), &pc);
}

/* What a producer sharing a consumer's list drops: today's list, plus the
 * consumer properties the scope table knows (fetch.error.backoff.ms, which
 * librdkafka ignored in a producer with a warning). Producers with a list
 * of their own, and consumers, drop nothing of the kind. */
static void test_dropped(void **state)
{
    (void)state;
    for (size_t i = 0; i < N(old_consumer_only); i++) {
        assert_true(pr_kafka_prop_dropped(PR_KAFKA_DLQ_PRODUCER, old_consumer_only[i]));
        assert_true(pr_kafka_prop_dropped(PR_KAFKA_VOCAB_PRODUCER, old_consumer_only[i]));
    }
    assert_true(pr_kafka_prop_dropped(PR_KAFKA_DLQ_PRODUCER, "fetch.error.backoff.ms"));
    static const char *const kept[] = {"bootstrap.servers", "client.id",         "linger.ms",
                                       "message.max.bytes", "security.protocol", "sasl.mechanism",
                                       "no.such.property"};
    for (size_t i = 0; i < N(kept); i++) {
        assert_false(pr_kafka_prop_dropped(PR_KAFKA_DLQ_PRODUCER, kept[i]));
    }
    assert_false(pr_kafka_prop_dropped(PR_KAFKA_SINK_PRODUCER, "group.id"));
    assert_false(pr_kafka_prop_dropped(PR_KAFKA_CLI_PRODUCER, "session.timeout.ms"));
    assert_false(pr_kafka_prop_dropped(PR_KAFKA_GROUP_CONSUMER, "acks"));
    assert_true(pr_kafka_prop_dropped(PR_KAFKA_GROUP_CONSUMER, "enable.auto.offset.store"));
    assert_true(pr_kafka_prop_dropped(PR_KAFKA_VOCAB_READER, "group.id"));
    assert_false(pr_kafka_prop_dropped(PR_KAFKA_GROUP_CONSUMER, "group.id"));
}

/* Every key a role sets or drops is in the scope table, with librdkafka's
 * own scope (its C/P column: C, P or *). */
static void test_scope_table(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    rd_kafka_conf_properties_show(f);
    fclose(f);
    size_t found = 0, known = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[128], cp[8];
        if (sscanf(line, "%127s | %7s |", name, cp) != 2)
            continue;
        unsigned mine = pr_kafka_prop_scope(name);
        if (!mine)
            continue;
        unsigned theirs = !strcmp(cp, "C")   ? PR_KAFKA_SCOPE_CONSUMER
                          : !strcmp(cp, "P") ? PR_KAFKA_SCOPE_PRODUCER
                                             : PR_KAFKA_SCOPE_BOTH;
        if (mine != theirs)
            fail_msg("%s: scope %u in pr_kafka's table, %s in librdkafka's", name, mine, cp);
        found++;
    }
    free(text);
    static const char *const set_by_roles[] = {"bootstrap.servers",
                                               "log_level",
                                               "message.max.bytes",
                                               "max.in.flight",
                                               "linger.ms",
                                               "message.timeout.ms",
                                               "batch.num.messages",
                                               "queue.buffering.max.messages",
                                               "queue.buffering.max.kbytes",
                                               "fetch.error.backoff.ms"};
    for (size_t i = 0; i < N(old_consumer_only); i++)
        known += pr_kafka_prop_scope(old_consumer_only[i]) != 0;
    for (size_t i = 0; i < N(set_by_roles); i++)
        known += pr_kafka_prop_scope(set_by_roles[i]) != 0;
    assert_int_equal(known, N(old_consumer_only) + N(set_by_roles));
    assert_true(found >= known); /* a misspelled entry is not in librdkafka's table */
}

/* Errors name the property and librdkafka's reason; a group consumer needs
 * bootstrap.servers; a refused creation names the role. */
static void test_errors(void **state)
{
    (void)state;
    char err[512];
    rd_kafka_conf_t *c = NULL;
    const pr_kv bad[] = {{"bootstrap.servers", "127.0.0.1:9"}, {"no.such.property", "1"}};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_SINK_PRODUCER, .props = bad, .n_props = N(bad)};
    assert_int_equal(pr_kafka_conf_new(&cc, &c, err, sizeof(err)), PR_EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, "sinks.kafka.properties.no.such.property: "));
    const pr_kv badval[] = {{"linger.ms", "-3"}};
    cc = (pr_kafka_client_conf){.role = PR_KAFKA_CLI_PRODUCER, .props = badval, .n_props = 1};
    assert_int_equal(pr_kafka_conf_new(&cc, &c, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "-X linger.ms: "));
    cc = (pr_kafka_client_conf){.role = PR_KAFKA_GROUP_CONSUMER, .props = bad, .n_props = 1};
    assert_int_equal(pr_kafka_conf_new(&cc, &c, err, sizeof(err)), 0);
    rd_kafka_conf_destroy(c);
    cc.n_props = 0;
    assert_int_equal(pr_kafka_conf_new(&cc, &c, err, sizeof(err)), PR_EINVAL);
    assert_string_equal(err, "consumer: bootstrap.servers is not set");
    cc.role = PR_KAFKA_ROLE__COUNT;
    assert_int_equal(pr_kafka_conf_new(&cc, &c, err, sizeof(err)), PR_EINVAL);

    /* rd_kafka_new refuses: a transactional producer without idempotence. */
    const pr_kv tx[] = {{"transactional.id", "t"}, {"enable.idempotence", "false"}};
    rd_kafka_t *rk = NULL;
    cc = (pr_kafka_client_conf){.role = PR_KAFKA_SINK_PRODUCER, .props = tx, .n_props = N(tx)};
    assert_int_equal(pr_kafka_client_new(&cc, &rk, err, sizeof(err)), PR_EKAFKA);
    assert_null(rk);
    assert_non_null(strstr(err, "kafka sink producer: "));

    const pr_kv quiet[] = {{"log_level", "0"}};
    rk = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, "127.0.0.1:9", quiet, 1, err, sizeof(err));
    assert_non_null(rk);
    assert_int_equal(rd_kafka_type(rk), RD_KAFKA_PRODUCER);
    rd_kafka_destroy(rk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_consumer),       cmocka_unit_test(test_dlq_producer),
        cmocka_unit_test(test_sink_producer),        cmocka_unit_test(test_vocab_clients),
        cmocka_unit_test(test_cli_and_test_clients), cmocka_unit_test(test_dropped),
        cmocka_unit_test(test_scope_table),          cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
