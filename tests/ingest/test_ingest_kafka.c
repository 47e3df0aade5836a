/*
 * test_ingest_kafka.c — pr_consumer and pr_dlq against librdkafka's mock
 * cluster, in-process: exactly-once consumption with partition/offset
 * metadata, pause/resume, stored+committed offsets and a second consumer
 * resuming there, a cooperative-sticky rebalance between two consumers that
 * loses and duplicates nothing, and dead letters with their reason headers.
 *
 * Group joins on the mock cluster take ~3 s each, so the tests share joins
 * (four in all). Waits are bounded loops over pr_consumer_poll, never sleeps;
 * the bound only turns a hang into a failure.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "piperec.pb-c.h"
#include "pr_ingest.h"
#include "pr_log.h"

#define MAXREC 2000

static pr_mock_broker *g_mb;
static pr_pipeline_spec g_spec;

/* ---------------------------------------------------------------- helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Record i as a TSV line of the small spec: dense[0] = i identifies it. */
static int make_line(char *buf, size_t sz, int i)
{
    return snprintf(buf, sz, "%d\t%d\t%d\t%x\t%x\t%x", i % 2, i, -i, i, i * 3, i + 7);
}

static void produce_lines(const char *topic, int first, int n, int n_parts)
{
    char errstr[256];
    rd_kafka_t *p = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, pr_mock_broker_bootstrap(g_mb),
                                        NULL, 0, errstr, sizeof(errstr));
    assert_non_null(p);
    for (int i = first; i < first + n; i++) {
        char line[256];
        int len = make_line(line, sizeof(line), i);
        assert_int_equal(
            rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(i % n_parts),
                              RD_KAFKA_V_VALUE(line, (size_t)len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
            0);
    }
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
}

static void produce_raw(const char *topic, const char *const *payloads, int n)
{
    char errstr[256];
    rd_kafka_t *p = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, pr_mock_broker_bootstrap(g_mb),
                                        NULL, 0, errstr, sizeof(errstr));
    assert_non_null(p);
    for (int i = 0; i < n; i++)
        assert_int_equal(
            rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                              RD_KAFKA_V_VALUE((void *)payloads[i], strlen(payloads[i])),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
            0);
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
}

typedef struct seen {
    int count[MAXREC];
    int total;
    int dups;
    int assigned_events, revoked_events;
    size_t assigned_parts, revoked_parts;
    int64_t last_offset[8]; /* per partition key, for order checks */
    int order_errors;
} seen;

static void on_assign(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
{
    (void)c;
    seen *s = opaque;
    s->assigned_events++;
    s->assigned_parts += n;
    for (size_t i = 0; i < n; i++) {
        assert_non_null(parts[i].topic);
        assert_int_equal(parts[i].key, parts[i].partition); /* single topic: key == partition */
    }
}

/* What the service does on revoke: store the safe offset (here everything
 * consumed, since the test "acknowledges" every row at once). */
static void on_revoke(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
{
    seen *s = opaque;
    s->revoked_events++;
    s->revoked_parts += n;
    for (size_t i = 0; i < n; i++)
        if (parts[i].offset >= 0)
            pr_consumer_store_offset(c, parts[i].topic, parts[i].partition, parts[i].offset);
}

/* Consumer options the issue-11 tests vary (reset by each test that sets them). */
static pr_offset_reset g_on_reset;
static const char *g_initial_reset; /* auto.offset.reset; NULL = earliest */
static const char *g_read_file;     /* pr_consumer_conf.read_file */
static const char *g_dlq_file;

/* Decode threads of every consumer the tests make: the group runs twice,
 * on the polling thread only (0) and with the parallel decode (issue 21). */
static unsigned g_decode_threads;
/* Consumer instances (source.consumers) of every consumer: a third run of
 * the group has two. */
static unsigned g_consumers;

static pr_consumer *new_consumer(const char *topic, const char *group, seen *s, const char *dlq)
{
    static const pr_kv_ref props_tmpl[] = {
        {"bootstrap.servers", NULL},
        {"auto.offset.reset", "earliest"},
        /* the mock coordinator waits session.timeout.ms - 1 s for members
         * to rejoin after one leaves: keep it short */
        {"session.timeout.ms", "4000"},
        {"heartbeat.interval.ms", "300"},
        {"log_level", "4"},
    };
    pr_kv_ref props[6];
    memcpy(props, props_tmpl, sizeof(props_tmpl));
    props[0].value = pr_mock_broker_bootstrap(g_mb);
    if (g_initial_reset)
        props[1].value = g_initial_reset;
    size_t np = 5;
    if (getenv("PR_TEST_KAFKA_DEBUG")) /* e.g. "cgrp,topic" while investigating */
        props[np++] = (pr_kv_ref){"debug", getenv("PR_TEST_KAFKA_DEBUG")};
    const char *topics[1] = {topic};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = group,
                             .props = props,
                             .n_props = np,
                             .format = PR_MSG_CRITEO_TSV,
                             .spec = &g_spec,
                             .dead_letter_topic = dlq,
                             .dead_letter_file = g_dlq_file,
                             .on_offset_reset = g_on_reset,
                             .read_file = g_read_file,
                             .decode_threads = g_decode_threads,
                             .consumers = g_consumers,
                             .on_assign = on_assign,
                             .on_revoke = on_revoke,
                             .opaque = s};
    char errstr[512];
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c)
        fail_msg("pr_consumer_new: %s", errstr);
    return c;
}

/* Record the rows of a block into `s`, checking metadata; returns rows. */
static int take_rows(seen *s, pr_block *b, bool store, pr_consumer *c)
{
    for (uint32_t r = 0; r < b->rows; r++) {
        int id = (int)b->dense[r]; /* dense column 0 */
        assert_true(id >= 0 && id < MAXREC);
        if (s->count[id]++)
            s->dups++;
        s->total++;
        int32_t key = b->partition[r];
        assert_true(key >= 0 && key < 8);
        if (b->offset[r] <= s->last_offset[key])
            s->order_errors++;
        s->last_offset[key] = b->offset[r];
        assert_true(b->event_time_ms[r] > 1600000000000LL); /* broker timestamp */
        if (store)
            assert_int_equal(pr_consumer_store_offset_key(c, key, b->offset[r] + 1), 0);
    }
    int n = (int)b->rows;
    pr_block_reset(b);
    return n;
}

/* Poll until `want` more rows arrived (or the bound passes). */
static int poll_rows(pr_consumer *c, pr_block *b, seen *s, int want, double bound_s, bool store)
{
    char errstr[256];
    int got = 0;
    double end = now_s() + bound_s;
    while (got < want && now_s() < end) {
        int r = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
        if (r < 0)
            fail_msg("poll: %s", errstr);
        got += take_rows(s, b, store, c);
    }
    return got;
}

static void reset_seen(seen *s)
{
    memset(s, 0, sizeof(*s));
    for (int i = 0; i < 8; i++)
        s->last_offset[i] = -1;
}

/* ---------------------------------------------------------------- tests */

static void test_consume_pause_commit_resume(void **state)
{
    (void)state;
    char errstr[256];
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "t3", 3, errstr, sizeof(errstr)), 0);
    produce_lines("t3", 0, 300, 3);

    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_consumer *c = new_consumer("t3", "g-resume", s, NULL);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    /* Every record exactly once, in offset order per partition. */
    assert_int_equal(poll_rows(c, b, s, 300, 30, false), 300);
    assert_int_equal(s->dups, 0);
    assert_int_equal(s->order_errors, 0);
    for (int i = 0; i < 300; i++)
        assert_int_equal(s->count[i], 1);
    for (int p = 0; p < 3; p++) {
        assert_int_equal(s->last_offset[p], 99);
        assert_int_equal(pr_consumer_consumed_next(c, p), 100);
    }
    assert_int_equal(s->assigned_parts, 3);
    pr_tp asg[8];
    assert_int_equal(pr_consumer_assignment(c, asg, 8), 3);

    /* Row metadata: id i went to partition i % 3 at offset i / 3. */
    produce_lines("t3", 300, 3, 3);
    int seen_meta = 0;
    double end = now_s() + 10;
    while (seen_meta < 3 && now_s() < end) {
        assert_true(pr_consumer_poll(c, b, 100, errstr, sizeof(errstr)) >= 0);
        for (uint32_t r = 0; r < b->rows; r++) {
            int id = (int)b->dense[r];
            assert_int_equal(b->partition[r], id % 3);
            assert_int_equal(b->offset[r], id / 3);
            seen_meta++;
        }
        pr_block_reset(b);
    }
    assert_int_equal(seen_meta, 3);

    /* Pause: nothing arrives; resume: everything does. */
    assert_int_equal(pr_consumer_pause(c), 0);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_true(st.paused);
    assert_int_equal(st.paused_partitions, 3);
    produce_lines("t3", 303, 30, 3);
    int during_pause = 0;
    for (int i = 0; i < 10; i++) {
        assert_true(pr_consumer_poll(c, b, 100, errstr, sizeof(errstr)) >= 0);
        during_pause += (int)b->rows;
        pr_block_reset(b);
    }
    assert_int_equal(during_pause, 0);
    assert_int_equal(pr_consumer_resume(c), 0);
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.paused_partitions, 0);
    reset_seen(s);
    assert_int_equal(poll_rows(c, b, s, 30, 15, false), 30);
    assert_int_equal(s->dups, 0);
    for (int i = 303; i < 333; i++)
        assert_int_equal(s->count[i], 1);

    /* Store next offsets (offset + 1 of the last processed row), commit. */
    assert_int_equal(pr_consumer_store_offset(c, "t3", 0, 50), 0);
    assert_int_equal(pr_consumer_store_offset(c, "t3", 1, 111), 0);
    assert_int_equal(pr_consumer_store_offset_key(c, 2, 111), 0);
    assert_int_equal(pr_consumer_store_offset(c, "nope", 0, 1), PR_ESTATE);
    /* The same offset again: stored already, nothing to do (1). */
    assert_int_equal(pr_consumer_store_offset(c, "t3", 0, 50), 1);
    assert_int_equal(pr_consumer_store_offset_key(c, 2, 111), 1);
    assert_int_equal(pr_consumer_store_offset(c, "t3", 0, 49), 0);
    assert_int_equal(pr_consumer_store_offset(c, "t3", 0, 50), 0);
    assert_int_equal(pr_consumer_commit(c, errstr, sizeof(errstr)), 0);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(3);
    for (int p = 0; p < 3; p++)
        rd_kafka_topic_partition_list_add(l, "t3", p);
    assert_int_equal(rd_kafka_committed(pr_consumer_handle(c), l, 5000), 0);
    assert_int_equal(l->elems[0].offset, 50);
    assert_int_equal(l->elems[1].offset, 111);
    assert_int_equal(l->elems[2].offset, 111);
    rd_kafka_topic_partition_list_destroy(l);

    pr_partition_lag lag[8];
    assert_int_equal(pr_consumer_lag(c, lag, 8), 3);
    for (int i = 0; i < 3; i++) {
        int p = lag[i].tp.partition;
        assert_int_equal(lag[i].committed, p == 0 ? 50 : 111);
        assert_int_equal(lag[i].high_watermark, 111);
        assert_int_equal(lag[i].position, 111);
        assert_int_equal(lag[i].lag, p == 0 ? 61 : 0);
    }
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.messages, 333);
    assert_int_equal(st.records, 333);
    assert_int_equal(st.assigned_partitions, 3);

    /* Close: on_revoke stores consumed_next (111 everywhere, as the service
     * does once everything is acknowledged), then the consumer commits.
     * test_resume_from_stored_offset covers a close without that store. */
    pr_consumer_free(c);
    /* With several instances too: each revokes its own partitions once, and
     * none takes a sibling's over while the consumer closes (they all commit
     * before any leaves, then leave together). */
    assert_int_equal(s->revoked_parts, 3);

    /* A second consumer of the same group resumes at the committed offsets:
     * only records produced after this point arrive. */
    produce_lines("t3", 333, 6, 3);
    reset_seen(s);
    c = new_consumer("t3", "g-resume", s, NULL);
    assert_int_equal(poll_rows(c, b, s, 6, 30, false), 6);
    for (int i = 333; i < 339; i++)
        assert_int_equal(s->count[i], 1);
    for (int p = 0; p < 3; p++)
        assert_int_equal(s->last_offset[p], 112);
    /* nothing older comes back */
    assert_int_equal(poll_rows(c, b, s, 1, 0.5, false), 0);
    assert_int_equal(s->total, 6);
    pr_consumer_free(c);
    pr_block_free(b);
    free(s);
}

/* Offsets committed without the revoke callback's help: a consumer with no
 * on_revoke commits exactly what was stored (offset + 1), and the next
 * member of the group starts there. */
static void test_resume_from_stored_offset(void **state)
{
    (void)state;
    char errstr[256];
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "t1", 1, errstr, sizeof(errstr)), 0);
    produce_lines("t1", 0, 20, 1);
    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    const char *dbg = getenv("PR_TEST_KAFKA_DEBUG");
    pr_kv_ref props[] = {{"bootstrap.servers", pr_mock_broker_bootstrap(g_mb)},
                         {"auto.offset.reset", "earliest"},
                         {"session.timeout.ms", "4000"},
                         {"heartbeat.interval.ms", "300"},
                         {"debug", dbg ? dbg : "generic"}};
    const char *topics[] = {"t1"};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = "g-stored",
                             .props = props,
                             .n_props = 5,
                             .format = PR_MSG_CRITEO_TSV,
                             .spec = &g_spec};
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c)
        fail_msg("%s", errstr);
    assert_int_equal(poll_rows(c, b, s, 20, 30, false), 20);
    /* rows 0..11 "acknowledged": store 12 */
    assert_int_equal(pr_consumer_store_offset_key(c, 0, 12), 0);
    pr_consumer_free(c); /* revoke -> commit of what is stored */

    reset_seen(s);
    c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    assert_non_null(c);
    assert_int_equal(poll_rows(c, b, s, 8, 30, false), 8);
    for (int i = 12; i < 20; i++)
        assert_int_equal(s->count[i], 1);
    assert_int_equal(s->total, 8);
    pr_consumer_free(c);
    pr_block_free(b);
    free(s);
}

/* Records 0..n-1 that A or B saw at least once. */
static int pr__seen_distinct(const seen *a, const seen *b, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        k += a->count[i] + b->count[i] > 0;
    return k;
}

static void test_cooperative_rebalance(void **state)
{
    (void)state;
    char errstr[256];
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "rb", 4, errstr, sizeof(errstr)), 0);
    produce_lines("rb", 0, 400, 4);
    seen *sa = calloc(1, sizeof(*sa)), *sb = calloc(1, sizeof(*sb)), *all = calloc(1, sizeof(*all));
    reset_seen(sa);
    reset_seen(sb);
    reset_seen(all);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    pr_consumer *a = new_consumer("rb", "g-rb", sa, NULL);
    /* A reads a part, acknowledging (storing) every row as it goes. With two
     * instances, one can have read 100 rows before the other's assignment
     * arrived (seen under load): wait for all 4 partitions to be A's. */
    int got = 0;
    pr_tp held[8];
    double end = now_s() + 30;
    while ((got < 100 || pr_consumer_assignment(a, held, 8) < 4) && now_s() < end) {
        assert_true(pr_consumer_poll(a, b, 100, errstr, sizeof(errstr)) >= 0);
        got += take_rows(sa, b, true, a);
    }
    assert_true(got >= 100);
    assert_int_equal(pr_consumer_assignment(a, held, 8), 4);
    if (g_consumers <= 1)
        assert_int_equal(sa->assigned_parts, 4);

    /* B joins; both are polled (by this one thread) until everything,
     * including records produced during the rebalance, has arrived. */
    pr_consumer *bc = new_consumer("rb", "g-rb", sb, NULL);
    end = now_s() + 40;
    while (sb->assigned_parts == 0 && now_s() < end) {
        assert_true(pr_consumer_poll(a, b, 50, errstr, sizeof(errstr)) >= 0);
        take_rows(sa, b, true, a);
        assert_true(pr_consumer_poll(bc, b, 50, errstr, sizeof(errstr)) >= 0);
        take_rows(sb, b, true, bc);
    }
    assert_true(sb->assigned_parts > 0);
    produce_lines("rb", 400, 200, 4);
    end = now_s() + 40;
    /* Until every record was seen once: rows read twice after a refused
     * commit on revoke must not end the wait early (they are not progress). */
    while (pr__seen_distinct(sa, sb, 600) < 600 && now_s() < end) {
        assert_true(pr_consumer_poll(a, b, 50, errstr, sizeof(errstr)) >= 0);
        take_rows(sa, b, true, a);
        assert_true(pr_consumer_poll(bc, b, 50, errstr, sizeof(errstr)) >= 0);
        take_rows(sb, b, true, bc);
    }
    /* Let the group settle a little more: stragglers would be duplicates. */
    for (int i = 0; i < 5; i++) {
        pr_consumer_poll(a, b, 50, errstr, sizeof(errstr));
        take_rows(sa, b, true, a);
        pr_consumer_poll(bc, b, 50, errstr, sizeof(errstr));
        take_rows(sb, b, true, bc);
    }
    int dups = 0, missing = 0;
    for (int i = 0; i < 600; i++) {
        int n = sa->count[i] + sb->count[i];
        missing += n == 0;
        dups += n > 1;
    }
    print_message("rebalance: A %d rows, B %d rows, A revoked %zu, B assigned %zu\n", sa->total,
                  sb->total, sa->revoked_parts, sb->assigned_parts);
    assert_int_equal(missing, 0);
    /* Exactly once when the commit on revoke went through. Under load the
     * mock coordinator can refuse it (REBALANCE_IN_PROGRESS while the group
     * is joining): then the rows after A's last commit are read again by B,
     * as at-least-once allows, and the failure is counted. */
    pr_consumer_stats sta;
    pr_consumer_get_stats(a, &sta);
    if (sta.commit_failures == 0)
        assert_int_equal(dups, 0);
    else
        print_message("rebalance: %d duplicates after %llu refused commit(s)\n", dups,
                      (unsigned long long)sta.commit_failures);
    assert_true(sb->assigned_parts > 0);
    assert_true(sa->revoked_parts > 0);
    assert_true(sb->total > 0);
    pr_consumer_stats st;
    pr_consumer_get_stats(a, &st);
    assert_int_equal(st.assigned_partitions + 0u, 4 - (uint32_t)sa->revoked_parts);

    pr_consumer_free(bc);
    pr_consumer_free(a);
    pr_block_free(b);
    free(sa);
    free(sb);
    free(all);
}

typedef struct rejects {
    int n;
    int reason[8];
    int64_t offset[8];
} rejects;

static void on_reject(void *opaque, pr_consumer *c, const pr_reject_info *ri)
{
    (void)c;
    rejects *r = opaque;
    if (r->n < 8) {
        r->reason[r->n] = ri->reason;
        r->offset[r->n] = ri->offset;
    }
    r->n++;
}

static const char *hdr(rd_kafka_headers_t *h, const char *name, char *buf, size_t sz)
{
    const void *v;
    size_t len;
    if (rd_kafka_header_get_last(h, name, &v, &len))
        return NULL;
    snprintf(buf, sz, "%.*s", (int)len, (const char *)v);
    return buf;
}

static void test_dead_letters(void **state)
{
    (void)state;
    char errstr[256];
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "bad", 1, errstr, sizeof(errstr)), 0);
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "bad.dlq", 1, errstr, sizeof(errstr)), 0);
    char good0[128], good1[128], two[300];
    make_line(good0, sizeof(good0), 0);
    make_line(good1, sizeof(good1), 1);
    snprintf(two, sizeof(two), "%s\n1\tx\t2\t3\t4\t5\n", good1); /* line 2: bad dense */
    const char *msgs[] = {good0, "a\tb", two, "1\t2\t3\t4\t5\t123456789012345678"};
    produce_raw("bad", msgs, 4);

    rejects rj = {0};
    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_kv_ref props[] = {{"bootstrap.servers", pr_mock_broker_bootstrap(g_mb)},
                         {"auto.offset.reset", "earliest"},
                         {"enable.auto.commit", "false"}};
    const char *topics[] = {"bad"};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = "g-dlq",
                             .props = props,
                             .n_props = 3,
                             .format = PR_MSG_CRITEO_TSV,
                             .spec = &g_spec,
                             .dead_letter_topic = "bad.dlq",
                             .on_reject = on_reject,
                             .opaque = &rj};
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c)
        fail_msg("%s", errstr);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    double end = now_s() + 30;
    while (pr_consumer_consumed_next(c, 0) < 4 && now_s() < end) {
        assert_true(pr_consumer_poll(c, b, 100, errstr, sizeof(errstr)) >= 0);
        take_rows(s, b, false, c);
    }
    assert_int_equal(pr_consumer_consumed_next(c, 0), 4); /* rejects count as consumed */
    assert_int_equal(s->total, 2);
    assert_int_equal(rj.n, 3);
    assert_int_equal(rj.reason[0], PR_DEC_FIELD_COUNT);
    assert_int_equal(rj.offset[0], 1);
    assert_int_equal(rj.reason[1], PR_DEC_BAD_DENSE);
    assert_int_equal(rj.offset[1], 2);
    assert_int_equal(rj.reason[2], PR_DEC_LONG_HEX);
    assert_int_equal(pr_dlq_flush(pr_consumer_dlq(c), 10000), 0);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.rejected_records, 3);
    assert_int_equal(st.rejects[PR_DEC_FIELD_COUNT], 1);
    assert_int_equal(st.rejects[PR_DEC_BAD_DENSE], 1);
    assert_int_equal(st.rejects[PR_DEC_LONG_HEX], 1);
    assert_int_equal(st.dlq_sent, 3);
    assert_int_equal(st.dlq_failed, 0);
    pr_consumer_free(c);

    /* Read the dead-letter topic back (plain assign, no group). */
    const pr_kv reader[] = {{"group.id", "dlq-reader"}};
    rd_kafka_t *rk = pr_kafka_new_simple(PR_KAFKA_PLAIN_CONSUMER, pr_mock_broker_bootstrap(g_mb),
                                         reader, 1, errstr, sizeof(errstr));
    assert_non_null(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, "bad.dlq", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(rk, l), 0);
    rd_kafka_topic_partition_list_destroy(l);
    int n = 0;
    end = now_s() + 15;
    while (n < 3 && now_s() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_headers_t *h = NULL;
        assert_int_equal(rd_kafka_message_headers(m, &h), 0);
        char v[256];
        assert_non_null(hdr(h, "piperec-source-topic", v, sizeof(v)));
        assert_string_equal(v, "bad");
        assert_non_null(hdr(h, "piperec-partition", v, sizeof(v)));
        assert_string_equal(v, "0");
        assert_non_null(hdr(h, "piperec-detail", v, sizeof(v)));
        char reason[64], off[32];
        assert_non_null(hdr(h, "piperec-reason", reason, sizeof(reason)));
        assert_non_null(hdr(h, "piperec-offset", off, sizeof(off)));
        if (n == 0) {
            assert_string_equal(reason, "field_count");
            assert_string_equal(off, "1");
            assert_int_equal(m->len, 3);
            assert_memory_equal(m->payload, "a\tb", 3);
            assert_null(hdr(h, "piperec-record-index", v, sizeof(v)));
        } else if (n == 1) {
            assert_string_equal(reason, "bad_dense");
            assert_string_equal(off, "2");
            assert_memory_equal(m->payload, "1\tx\t2", 5); /* the bad line only */
            assert_non_null(hdr(h, "piperec-record-index", v, sizeof(v)));
            assert_string_equal(v, "1");
        } else {
            assert_string_equal(reason, "long_hex");
            assert_string_equal(off, "3");
        }
        n++;
        rd_kafka_message_destroy(m);
    }
    assert_int_equal(n, 3);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    pr_block_free(b);
    free(s);
}

/* EventBatch messages against a small block: a message that does not fit the
 * remaining rows waits for the next poll, one larger than the whole block is
 * split, and every event arrives once, in order, with its message's offset. */
static void test_batches_fill_blocks(void **state)
{
    (void)state;
    char errstr[256];
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "eb", 1, errstr, sizeof(errstr)), 0);
    static const int sizes[] = {50, 50, 200, 10, 64, 1};
    enum { NMSG = sizeof(sizes) / sizeof(sizes[0]) };
    double dense[2];
    uint64_t ids[3] = {1, 2, 3};
    Piperec__V1__Event evs[200], *ptrs[200];
    char *payloads[NMSG];
    size_t lens[NMSG];
    int id = 0;
    for (int m = 0; m < NMSG; m++) {
        for (int i = 0; i < sizes[m]; i++) {
            piperec__v1__event__init(&evs[i]);
            evs[i].label = id++; /* event id in the label */
            evs[i].n_dense = 2;
            evs[i].dense = dense;
            evs[i].n_sparse_id = 3;
            evs[i].sparse_id = ids;
            ptrs[i] = &evs[i];
        }
        Piperec__V1__EventBatch eb = PIPEREC__V1__EVENT_BATCH__INIT;
        eb.n_events = (size_t)sizes[m];
        eb.events = ptrs;
        lens[m] = piperec__v1__event_batch__get_packed_size(&eb);
        payloads[m] = malloc(lens[m]);
        piperec__v1__event_batch__pack(&eb, (uint8_t *)payloads[m]);
    }
    rd_kafka_t *p = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, pr_mock_broker_bootstrap(g_mb),
                                        NULL, 0, errstr, sizeof(errstr));
    for (int m = 0; m < NMSG; m++)
        assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC("eb"), RD_KAFKA_V_PARTITION(0),
                                           RD_KAFKA_V_VALUE(payloads[m], lens[m]),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
                                           RD_KAFKA_V_END),
                         0);
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);

    pr_kv_ref props[] = {{"bootstrap.servers", pr_mock_broker_bootstrap(g_mb)},
                         {"auto.offset.reset", "earliest"},
                         {"session.timeout.ms", "4000"}};
    const char *topics[] = {"eb"};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = "g-eb",
                             .props = props,
                             .n_props = 3,
                             .format = PR_MSG_PROTOBUF_EVENT_BATCH,
                             .spec = &g_spec};
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c)
        fail_msg("%s", errstr);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    int next_id = 0, polls_with_rows = 0;
    double end = now_s() + 30;
    while (next_id < id && now_s() < end) {
        assert_true(pr_consumer_poll(c, b, 100, errstr, sizeof(errstr)) >= 0);
        if (b->rows)
            polls_with_rows++;
        for (uint32_t r = 0; r < b->rows; r++) {
            assert_int_equal(b->labels[r], next_id); /* once each, in order */
            /* offset = index of the message holding the event */
            int m = 0, acc = sizes[0];
            while (next_id >= acc)
                acc += sizes[++m];
            assert_int_equal(b->offset[r], m);
            assert_int_equal(b->sparse_enc[0], PR_SPARSE_U64);
            next_id++;
        }
        /* A block never ends inside a message unless the message is bigger
         * than a block: then consumed_next still points at that message. */
        if (next_id == 50 + 50 + 64)
            assert_int_equal(pr_consumer_consumed_next(c, 0), 2);
        pr_block_reset(b);
    }
    assert_int_equal(next_id, id);
    assert_int_equal(pr_consumer_consumed_next(c, 0), NMSG);
    /* 50 | 50 | 64 | 64 | 64+... : at least six blocks for 375 events */
    assert_true(polls_with_rows >= 6);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.messages, NMSG);
    assert_int_equal(st.records, (uint64_t)id);
    pr_consumer_free(c);
    pr_block_free(b);
}

static void test_bad_config(void **state)
{
    (void)state;
    char errstr[256];
    const char *topics[] = {"x"};
    pr_kv_ref props[] = {{"bootstrap.servers", "127.0.0.1:1"}, {"no.such.property", "1"}};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = "g",
                             .props = props,
                             .n_props = 2,
                             .spec = &g_spec};
    assert_null(pr_consumer_new(&conf, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "no.such.property"));
    conf.n_props = 0;
    assert_null(pr_consumer_new(&conf, errstr, sizeof(errstr)));
    assert_non_null(strstr(errstr, "bootstrap.servers"));
    conf.n_props = 1;
    conf.group_id = NULL;
    assert_null(pr_consumer_new(&conf, errstr, sizeof(errstr)));
}

/* Commit `offset` for `group` on topic/0 before any member joined (the mock
 * takes a commit for a group it does not know yet). */
static void commit_for_group(const char *group, const char *topic, int64_t offset)
{
    char errstr[256];
    const pr_kv props[] = {{"group.id", group}};
    rd_kafka_t *k = pr_kafka_new_simple(PR_KAFKA_PLAIN_CONSUMER, pr_mock_broker_bootstrap(g_mb),
                                        props, 1, errstr, sizeof(errstr));
    assert_non_null(k);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, 0)->offset = offset;
    assert_int_equal(rd_kafka_commit(k, l, 0), 0);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(k);
}

/* Issue 11, point 6: a committed offset that is no longer in the log stops
 * the consumer with the offsets named (fail, the default), or is reset to the
 * log start, logged and counted (earliest). It used to jump silently. */
static void test_offset_out_of_range(void **state)
{
    (void)state;
    seen s;
    reset_seen(&s);
    char errstr[512];
    produce_lines("oor", 0, 5, 1);
    commit_for_group("oor-g", "oor", 100);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    g_on_reset = PR_OFFSET_RESET_FAIL;
    pr_consumer *c = new_consumer("oor", "oor-g", &s, NULL);
    int r = 0;
    for (double end = now_s() + 20; r >= 0 && now_s() < end;)
        r = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
    assert_true(r < 0);
    assert_non_null(strstr(errstr, "oor [0]: offset 100 is out of range"));
    assert_non_null(strstr(errstr, "available offsets 0..5"));
    assert_non_null(strstr(errstr, "on_offset_reset"));
    assert_int_equal(b->rows, 0);
    pr_consumer_free(c);

    g_on_reset = PR_OFFSET_RESET_EARLIEST;
    reset_seen(&s);
    c = new_consumer("oor", "oor-g", &s, NULL);
    assert_int_equal(poll_rows(c, b, &s, 5, 20, false), 5);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.offset_resets, 1);
    pr_tp tp;
    uint64_t n;
    assert_int_equal(pr_consumer_offset_resets(c, &tp, &n, 1), 1);
    assert_string_equal(tp.topic, "oor");
    assert_int_equal(tp.partition, 0);
    assert_int_equal(n, 1);
    pr_consumer_free(c);
    g_on_reset = PR_OFFSET_RESET_FAIL;
    pr_block_free(b);
}

/* The offset `group` committed on topic/partition (-1001 = none). */
static int64_t committed_of(const char *group, const char *topic, int32_t partition)
{
    char errstr[256];
    const pr_kv props[] = {{"group.id", group}};
    rd_kafka_t *k = pr_kafka_new_simple(PR_KAFKA_PLAIN_CONSUMER, pr_mock_broker_bootstrap(g_mb),
                                        props, 1, errstr, sizeof(errstr));
    assert_non_null(k);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition);
    assert_int_equal(rd_kafka_committed(k, l, 5000), 0);
    int64_t off = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(k);
    return off;
}

/* auto.offset.reset latest loses nothing once the group reads a topic:
 *   - a partition with no committed offset, in a group that committed on
 *     other partitions of the topic (one added to the topic, or one whose
 *     first owner stopped before committing), starts at its log start: it
 *     used to start at its end, skipping every record already in it;
 *   - a group's first start at the log end is committed at once, so a
 *     second member (or a restart) resumes there: it used to start at the
 *     end again, skipping what was written in between. */
static void test_latest_skips_nothing(void **state)
{
    (void)state;
    char errstr[256];
    seen *s = calloc(1, sizeof(*s));
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    g_initial_reset = "latest";

    /* np/0 holds rows 0 2 4 6 8, np/1 rows 1 3 5 7 9; the group committed
     * np/0 at 3 only. */
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "np", 2, errstr, sizeof(errstr)), 0);
    produce_lines("np", 0, 10, 2);
    commit_for_group("np-g", "np", 3);
    reset_seen(s);
    pr_consumer *c = new_consumer("np", "np-g", s, NULL);
    assert_int_equal(poll_rows(c, b, s, 7, 20, false), 7);
    for (int i = 0; i < 10; i++)
        assert_int_equal(s->count[i], i % 2 || i >= 6);
    pr_consumer_free(c);

    /* A new group on la (rows 0..4 in it) starts at offset 5 and commits 5
     * before it reads anything, though its first commits fail (a rebalance
     * in progress, as while a group's members join: it was given up);
     * the next member reads rows 5..9. */
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "la", 1, errstr, sizeof(errstr)), 0);
    produce_lines("la", 0, 5, 1);
    pr_mock_broker_fail_next(g_mb, 8 /* OffsetCommit */, 3,
                             RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS);
    reset_seen(s);
    c = new_consumer("la", "la-g", s, NULL);
    for (double end = now_s() + 20; committed_of("la-g", "la", 0) != 5 && now_s() < end;)
        poll_rows(c, b, s, 1, 0.2, false);
    assert_int_equal(committed_of("la-g", "la", 0), 5);
    assert_int_equal(s->total, 0);
    pr_consumer_free(c);
    produce_lines("la", 5, 5, 1);
    reset_seen(s);
    c = new_consumer("la", "la-g", s, NULL);
    assert_int_equal(poll_rows(c, b, s, 5, 20, false), 5);
    for (int i = 0; i < 10; i++)
        assert_int_equal(s->count[i], i >= 5);
    pr_consumer_free(c);

    g_initial_reset = NULL;
    pr_block_free(b);
    free(s);
}

/* A new group of two instances (as two replicas) under latest: the first
 * instance's start offsets must not make the other's partitions look "new
 * to a group that reads the topic" (they did, and started at their log
 * start: half the history re-read). Start offsets carry piperec's commit
 * metadata and do not count as reading; every partition starts at its end,
 * committed, and what is written afterwards arrives. */
static void test_latest_new_group_instances(void **state)
{
    (void)state;
    char errstr[256];
    seen *s = calloc(1, sizeof(*s));
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    g_initial_reset = "latest";
    unsigned keep = g_consumers;
    g_consumers = 2;
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "fr", 4, errstr, sizeof(errstr)), 0);
    produce_lines("fr", 0, 40, 4);
    reset_seen(s);
    pr_consumer *c = new_consumer("fr", "fr-g", s, NULL);
    int started = 0;
    for (double end = now_s() + 30; started < 4 && now_s() < end;) {
        poll_rows(c, b, s, 1, 0.2, false);
        started = 0;
        for (int p = 0; p < 4; p++)
            started += committed_of("fr-g", "fr", p) == 10;
    }
    assert_int_equal(started, 4);
    assert_int_equal(s->total, 0);
    produce_lines("fr", 40, 8, 4);
    assert_int_equal(poll_rows(c, b, s, 8, 20, false), 8);
    for (int i = 0; i < 48; i++)
        assert_int_equal(s->count[i], i >= 40);
    pr_consumer_free(c);
    g_consumers = keep;
    g_initial_reset = NULL;
    pr_block_free(b);
    free(s);
}

/* A group whose offsets on a topic are all gone (expired after the
 * broker's offsets.retention.minutes, deleted, the topic recreated) looked
 * new: auto.offset.reset latest skipped everything written since. The read
 * file remembers which topics the group committed on: the first commit
 * writes its line, and a topic listed there with no offset left is
 * on_offset_reset's to decide (fail: stopped, naming why; earliest: the
 * log start, counted). */
static void test_expired_offsets(void **state)
{
    (void)state;
    char errstr[512], path[64];
    snprintf(path, sizeof(path), "/tmp/pr-test-read-%d", (int)getpid());
    unlink(path);
    seen *s = calloc(1, sizeof(*s));
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    g_initial_reset = "latest";
    g_read_file = path;
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "ex", 1, errstr, sizeof(errstr)), 0);
    produce_lines("ex", 0, 5, 1);

    /* The start's commit (offset 5) writes the group's line. */
    reset_seen(s);
    pr_consumer *c = new_consumer("ex", "ex-g", s, NULL);
    for (double end = now_s() + 20; committed_of("ex-g", "ex", 0) != 5 && now_s() < end;)
        poll_rows(c, b, s, 1, 0.2, false);
    pr_consumer_free(c);
    char line[128] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof(line), f));
    fclose(f);
    assert_string_equal(line, "ex-g\tex\n");

    /* ex-g2 committed on ex before (its line), and holds nothing now. */
    f = fopen(path, "a");
    assert_non_null(f);
    fprintf(f, "ex-g2\tex\n");
    fclose(f);
    g_on_reset = PR_OFFSET_RESET_FAIL;
    reset_seen(s);
    c = new_consumer("ex", "ex-g2", s, NULL);
    int r = 0;
    for (double end = now_s() + 20; r >= 0 && now_s() < end;)
        r = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
    assert_true(r < 0);
    assert_non_null(strstr(errstr, "ex [0]: group ex-g2 has no committed offset on ex, but it "
                                   "committed there before"));
    assert_non_null(strstr(errstr, "on_offset_reset: fail"));
    assert_int_equal(b->rows, 0);
    pr_consumer_free(c);
    g_on_reset = PR_OFFSET_RESET_EARLIEST;
    reset_seen(s);
    c = new_consumer("ex", "ex-g2", s, NULL);
    assert_int_equal(poll_rows(c, b, s, 5, 20, false), 5);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.offset_resets, 1);
    pr_consumer_free(c);

    g_on_reset = PR_OFFSET_RESET_FAIL;
    g_initial_reset = NULL;
    g_read_file = NULL;
    unlink(path);
    pr_block_free(b);
    free(s);
}

/* ---- transaction markers ----
 * librdkafka 2.0.2's mock writes no control records for a transaction's
 * commit or abort (and never filters aborted records), so a marker is
 * appended here as a transactional producer's broker would: a raw
 * ProduceRequest (v3) holding one control batch (RecordBatch v2, attributes
 * transactional | control) with a COMMIT or ABORT marker. It takes an
 * offset of the log, as on a real broker, and no consumer ever sees it. */

static uint32_t crc32c(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

typedef struct wbuf {
    uint8_t b[512];
    size_t n;
} wbuf;

static void w_be(wbuf *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        w->b[w->n++] = (uint8_t)(v >> (8 * i));
}

static void w_varint(wbuf *w, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        w->b[w->n++] = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    w->b[w->n++] = (uint8_t)z;
}

static void w_put_be(uint8_t *at, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        at[bytes - 1 - i] = (uint8_t)(v >> (8 * i));
}

/* One control batch: a marker of type (0 abort, 1 commit). */
static size_t control_batch(uint8_t *out, int type)
{
    wbuf r = {.n = 0};
    w_varint(&r, 0); /* attributes */
    w_varint(&r, 0); /* timestamp delta */
    w_varint(&r, 0); /* offset delta */
    w_varint(&r, 4); /* key: version, type */
    w_be(&r, 0, 2);
    w_be(&r, (uint64_t)type, 2);
    w_varint(&r, 6); /* value: version, coordinator epoch */
    w_be(&r, 0, 2);
    w_be(&r, 0, 4);
    w_varint(&r, 0); /* headers */
    wbuf b = {.n = 0};
    int64_t now = (int64_t)time(NULL) * 1000;
    w_be(&b, 0, 8); /* base offset (the broker sets it) */
    w_be(&b, 0, 4); /* batch length, below */
    w_be(&b, 0, 4); /* partition leader epoch */
    w_be(&b, 2, 1); /* magic */
    w_be(&b, 0, 4); /* crc, below */
    size_t crc_from = b.n;
    w_be(&b, 0x30, 2); /* attributes: transactional | control */
    w_be(&b, 0, 4);    /* last offset delta */
    w_be(&b, (uint64_t)now, 8);
    w_be(&b, (uint64_t)now, 8);
    w_be(&b, 4242, 8);         /* producer id */
    w_be(&b, 0, 2);            /* producer epoch */
    w_be(&b, (uint64_t)-1, 4); /* base sequence */
    w_be(&b, 1, 4);            /* records */
    w_varint(&b, (int64_t)r.n);
    memcpy(b.b + b.n, r.b, r.n);
    b.n += r.n;
    w_put_be(b.b + 8, b.n - 12, 4);
    w_put_be(b.b + 17, crc32c(b.b + crc_from, b.n - crc_from), 4);
    memcpy(out, b.b, b.n);
    return b.n;
}

static void produce_marker(const char *topic, int32_t partition, int type)
{
    char host[128];
    snprintf(host, sizeof(host), "%s", pr_mock_broker_bootstrap(g_mb));
    char *colon = strrchr(host, ':');
    assert_non_null(colon);
    *colon = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    assert_int_equal(inet_pton(AF_INET, host, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    uint8_t batch[256];
    size_t bn = control_batch(batch, type);
    wbuf q = {.n = 0};
    w_be(&q, 0, 4); /* size, below */
    w_be(&q, 0, 2); /* Produce */
    w_be(&q, 3, 2); /* v3 */
    w_be(&q, 7, 4); /* correlation id */
    w_be(&q, 4, 2); /* client id */
    memcpy(q.b + q.n, "test", 4);
    q.n += 4;
    w_be(&q, (uint64_t)-1, 2); /* transactional id: null */
    w_be(&q, 1, 2);            /* acks */
    w_be(&q, 5000, 4);         /* timeout */
    w_be(&q, 1, 4);            /* topics */
    w_be(&q, strlen(topic), 2);
    memcpy(q.b + q.n, topic, strlen(topic));
    q.n += strlen(topic);
    w_be(&q, 1, 4); /* partitions */
    w_be(&q, (uint64_t)partition, 4);
    w_be(&q, bn, 4);
    memcpy(q.b + q.n, batch, bn);
    q.n += bn;
    w_put_be(q.b, q.n - 4, 4);
    assert_int_equal(write(fd, q.b, q.n), (ssize_t)q.n);
    /* The answer: size, correlation id, 1 topic, 1 partition, error code. */
    uint8_t resp[256];
    size_t got = 0;
    while (got < 4 || got < 4 + ((size_t)resp[0] << 24 | (size_t)resp[1] << 16 |
                                 (size_t)resp[2] << 8 | resp[3])) {
        ssize_t k = read(fd, resp + got, sizeof(resp) - got);
        assert_true(k > 0);
        got += (size_t)k;
    }
    close(fd);
    size_t at = 4 + 4 + 4 + 2 + strlen(topic) + 4 + 4; /* to the error code */
    assert_int_equal(resp[at] << 8 | resp[at + 1], 0);
}

/* Transactional producers upstream: each commit (or abort) writes a marker
 * that takes an offset of the log and never reaches a consumer, and a
 * producer's last marker is its partitions' last offset. consumed_next
 * stopped at the last record, so the committed offset stayed below the log
 * end for good (lag 1 per partition, an aborted transaction's size + 1 on a
 * real broker) and a restart read the markers again. It now reaches the end. */
static void test_transaction_markers(void **state)
{
    (void)state;
    /* Two instances and one partition: the second instance's join can move
     * the partition in the middle (the clean-clone CI of 50a4417 saw the
     * store refused under ILLEGAL_GENERATION). The end's bookkeeping is per
     * partition, the same with one instance or two: the serial and the
     * parallel-decode groups run it. */
    if (g_consumers >= 2)
        skip();
    char errstr[256];
    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "tx", 1, errstr, sizeof(errstr)), 0);
    /* Reading the empty topic (its end, 0, seen), then paused. */
    pr_consumer *c = new_consumer("tx", "tx-g", s, NULL);
    for (double end = now_s() + 20; pr_consumer_consumed_next(c, 0) != 0 && now_s() < end;)
        poll_rows(c, b, s, 1, 0.1, false);
    assert_int_equal(pr_consumer_pause(c), 0);
    /* rows 0..4 at 0..4, a commit at 5, rows 5..7 at 6..8, an abort at 9 and
     * a commit at 10: the log ends at 11 */
    produce_lines("tx", 0, 5, 1);
    produce_marker("tx", 0, 1);
    produce_lines("tx", 5, 3, 1);
    produce_marker("tx", 0, 0);
    produce_marker("tx", 0, 1);
    /* Resumed without a poll: with one instance its queue then holds the
     * records, the markers and the partition's end (13 entries in all), and
     * the next poll sees the end while the records are still in the
     * consumer (with parallel decode: in the pool, pr__consumed's path). */
    assert_int_equal(pr_consumer_resume(c), 0);
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(pr_consumer_handle(c));
    for (double end = now_s() + 5;
         g_consumers < 2 && rd_kafka_queue_length(q) < 13 && now_s() < end;)
        usleep(10000);
    rd_kafka_queue_destroy(q);
    assert_int_equal(poll_rows(c, b, s, 8, 20, false), 8);
    assert_int_equal(s->dups, 0);
    assert_int_equal(s->order_errors, 0);
    assert_int_equal(s->last_offset[0], 8);
    for (double end = now_s() + 10; pr_consumer_consumed_next(c, 0) != 11 && now_s() < end;)
        poll_rows(c, b, s, 1, 0.1, false);
    assert_int_equal(pr_consumer_consumed_next(c, 0), 11);
    assert_int_equal(pr_consumer_store_offset_key(c, 0, 11), 0);
    assert_int_equal(pr_consumer_commit(c, errstr, sizeof(errstr)), 0);
    pr_partition_lag lag[2];
    assert_int_equal(pr_consumer_lag(c, lag, 2), 1);
    assert_int_equal(lag[0].committed, 11);
    assert_int_equal(lag[0].high_watermark, 11);
    assert_int_equal(lag[0].lag, 0);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.kafka_errors, 0); /* a partition's end is no error */
    assert_int_equal(st.messages, 8);

    /* Records after the markers move it on as before. */
    produce_lines("tx", 8, 2, 1);
    assert_int_equal(poll_rows(c, b, s, 2, 20, false), 2);
    assert_int_equal(pr_consumer_consumed_next(c, 0), 13);
    assert_int_equal(s->total, 10);
    pr_consumer_free(c);
    pr_block_free(b);
    free(s);
}

/* Produce one empty message and one of `big` bytes (a single broken TSV line). */
static void produce_empty_and_big(const char *topic, size_t big)
{
    char errstr[256];
    const pr_kv props[] = {{"message.max.bytes", "4000000"}};
    rd_kafka_t *p = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, pr_mock_broker_bootstrap(g_mb),
                                        props, 1, errstr, sizeof(errstr));
    assert_non_null(p);
    char *buf = malloc(big);
    assert_non_null(buf);
    memset(buf, 'x', big);
    assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                       RD_KAFKA_V_VALUE(NULL, 0), RD_KAFKA_V_END),
                     0);
    assert_int_equal(rd_kafka_producev(p, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(0),
                                       RD_KAFKA_V_VALUE(buf, big),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END),
                     0);
    assert_int_equal(rd_kafka_flush(p, 10000), 0);
    rd_kafka_destroy(p);
    free(buf);
}

/* Issue 11, point 7: an empty message is counted under reason "empty"; a bad
 * record too large for the dead-letter topic holds its offset and goes to the
 * dead-letter file, or (no file) stops the consumer: it used to be committed
 * past while in neither place. */
static void test_dead_letters_never_vanish(void **state)
{
    (void)state;
    seen s;
    reset_seen(&s);
    char errstr[512], path[] = "/tmp/pr-dlq-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    produce_empty_and_big("big", 1200000);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    /* No file: the letter cannot go anywhere; its offset (1) stays held. */
    g_dlq_file = NULL;
    pr_consumer *c = new_consumer("big", "big-g1", &s, "big-dlq");
    int r = 0;
    for (double end = now_s() + 20; r >= 0 && now_s() < end;)
        r = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
    assert_true(r < 0);
    assert_non_null(strstr(errstr, "can reach neither topic big-dlq"));
    /* Once the empty message's letter is confirmed, offset 1 alone is held. */
    assert_int_equal(pr_dlq_flush(pr_consumer_dlq(c), 5000), PR_ETIMEDOUT);
    assert_int_equal(pr_dlq_hold(pr_consumer_dlq(c), 0), 1);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.rejects[PR_DEC_EMPTY], 1);
    pr_consumer_free(c);

    /* With a file: written there (fsync'd), counted, hold released. */
    g_dlq_file = path;
    c = new_consumer("big", "big-g2", &s, "big-dlq");
    for (double end = now_s() + 20; now_s() < end;) {
        r = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
        if (r < 0)
            fail_msg("poll: %s", errstr);
        pr_consumer_get_stats(c, &st);
        if (st.dlq_file == 1 && st.dlq_sent == 1)
            break;
    }
    assert_int_equal(st.dlq_file, 1);
    assert_int_equal(st.dlq_sent, 1); /* the empty message's letter */
    assert_int_equal(st.rejects[PR_DEC_EMPTY], 1);
    assert_string_equal(pr_decode_reason_name(PR_DEC_EMPTY), "empty");
    assert_int_equal(pr_dlq_hold(pr_consumer_dlq(c), 0), INT64_MAX);
    pr_consumer_free(c);
    g_dlq_file = NULL;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    assert_non_null(fgets(line, sizeof(line), f));
    assert_non_null(strstr(line, "piperec-dead-letter\tfield_count\tbig\t0\t1\t-1\t1200000\t"));
    fclose(f);
    unlink(path);
    pr_block_free(b);
}

/* Read the member id from a member file ("piperec-member 1 TAB group TAB id"). */
static bool read_member(const char *path, char *id, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[512] = "";
    bool ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    line[strcspn(line, "\n")] = 0;
    char *t = strrchr(line, '\t');
    if (!ok || !t || strncmp(line, "piperec-member 1\tg-leave\t", 25))
        return false;
    snprintf(id, n, "%s", t + 1);
    return true;
}

/* The member-file tests' consumer: one topic, the mock's short sessions
 * (props[4] filled here, the caller's: they must outlive the consumer's
 * creation), its member ids kept in path; consumers 0 = one instance. */
static pr_consumer_conf member_conf(pr_kv_ref props[4], const char *const *topics,
                                    const char *group, const char *path, unsigned consumers)
{
    props[0] = (pr_kv_ref){"bootstrap.servers", pr_mock_broker_bootstrap(g_mb)};
    props[1] = (pr_kv_ref){"auto.offset.reset", "earliest"};
    props[2] = (pr_kv_ref){"session.timeout.ms", "4000"};
    props[3] = (pr_kv_ref){"heartbeat.interval.ms", "300"};
    return (pr_consumer_conf){.topics = topics,
                              .n_topics = 1,
                              .group_id = group,
                              .props = props,
                              .n_props = 4,
                              .format = PR_MSG_CRITEO_TSV,
                              .spec = &g_spec,
                              .consumers = consumers,
                              .member_file = path};
}

/* With several instances (source.consumers) the member file holds every
 * instance's member id, a line each, and a successor drops each of them: a
 * restart after SIGKILL does not wait out the other instances' sessions.
 * The "killed" process is simulated by a live one whose file a second
 * consumer of the group finds. Runs in the two-instance group only. */
static void test_leave_for_predecessor_instances(void **state)
{
    (void)state;
    if (g_consumers < 2)
        skip();
    char errstr[512], dir[] = "/tmp/pr-leave-XXXXXX", path[600], path2[640];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/a.member", dir);
    snprintf(path2, sizeof(path2), "%s/b.member", dir);
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "lvi", 4, errstr, sizeof(errstr)), 0);
    produce_lines("lvi", 0, 40, 4);
    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);
    pr_kv_ref props[4];
    const char *topics[] = {"lvi"};
    pr_consumer_conf conf = member_conf(props, topics, "g-leave-inst", path, 2);
    pr_consumer *a = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!a)
        fail_msg("%s", errstr);
    assert_int_equal(poll_rows(a, b, s, 40, 30, false), 40);
    /* Both instances hold partitions: two lines, two distinct ids, the first
     * instance's among them. */
    char lines[2][512] = {"", ""};
    int n = 0;
    double end = now_s() + 10;
    while (n < 2 && now_s() < end) {
        n = 0;
        FILE *f = fopen(path, "r");
        while (f && n < 2 && fgets(lines[n], sizeof(lines[n]), f))
            n++;
        if (f)
            fclose(f);
        if (n < 2)
            pr_consumer_poll(a, b, 100, errstr, sizeof(errstr));
        pr_block_reset(b);
    }
    assert_int_equal(n, 2);
    assert_string_not_equal(lines[0], lines[1]);
    char *mid = rd_kafka_memberid(pr_consumer_handle(a));
    assert_true(strstr(lines[0], mid) || strstr(lines[1], mid));
    free(mid);
    for (int i = 0; i < 2; i++)
        assert_int_equal(strncmp(lines[i], "piperec-member 1\tg-leave-inst\t", 30), 0);

    /* A successor that finds this file drops both members on their behalf. */
    FILE *f = fopen(path2, "w");
    assert_non_null(f);
    fprintf(f, "%s%s", lines[0], lines[1]);
    fclose(f);
    pr_consumer_conf conf2 = conf;
    conf2.member_file = path2;
    pr_consumer *c2 = pr_consumer_new(&conf2, errstr, sizeof(errstr));
    if (!c2)
        fail_msg("%s", errstr);
    pr_consumer_stats st;
    pr_consumer_get_stats(c2, &st);
    assert_int_equal(st.stale_members[PR_STALE_DROPPED], 2);
    assert_int_equal(st.stale_members[PR_STALE_FAILED], 0);
    pr_consumer_free(c2);
    pr_consumer_free(a);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(access(path2, F_OK), -1);
    rmdir(dir);
    pr_block_free(b);
    free(s);
}

/* Issue 11, restart: the member file follows the consumer's member id, a
 * clean close removes it, pr_kafka_leave_group drops a member by id (and
 * says when it was gone already), a stale file is acted on at startup, and
 * the call refuses what it cannot do (TLS/SASL listeners, no bootstrap). */
static void test_leave_for_predecessor(void **state)
{
    (void)state;
    char errstr[512], dir[] = "/tmp/pr-leave-XXXXXX", path[600], id[256], id2[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/p.member", dir);
    assert_int_equal(pr_mock_broker_create_topic(g_mb, "lv", 1, errstr, sizeof(errstr)), 0);
    produce_lines("lv", 0, 10, 1);
    seen *s = calloc(1, sizeof(*s));
    reset_seen(s);
    pr_block *b = pr_block_new(g_spec.n_dense, g_spec.n_sparse, 64, true);

    /* A stale file from a predecessor whose member the group never had. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "piperec-member 1\tg-leave\tno-such-member\n");
    fclose(f);

    pr_kv_ref props[4];
    const char *topics[] = {"lv"};
    pr_consumer_conf conf = member_conf(props, topics, "g-leave", path, 0);
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c)
        fail_msg("%s", errstr);
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    assert_int_equal(st.stale_members[PR_STALE_GONE], 1);
    assert_int_equal(st.stale_members[PR_STALE_DROPPED], 0);
    assert_int_equal(access(path, F_OK), -1); /* acted on, then removed */

    assert_int_equal(poll_rows(c, b, s, 10, 30, false), 10);
    assert_true(read_member(path, id, sizeof(id)));
    char *mid = rd_kafka_memberid(pr_consumer_handle(c));
    assert_string_equal(id, mid);
    free(mid);

    /* Drop the live member by id, as a restart does for a killed one. */
    bool was = false;
    assert_int_equal(
        pr_kafka_leave_group(props, 4, "g-leave", id, 5000, &was, errstr, sizeof(errstr)), 0);
    assert_true(was);
    assert_int_equal(
        pr_kafka_leave_group(props, 4, "g-leave", id, 5000, &was, errstr, sizeof(errstr)), 0);
    assert_false(was); /* no longer a member */

    /* The consumer finds itself dropped and rejoins (revoke + assign); the
     * file names its member id then (the mock may hand out the same id
     * again: it prints the member's address). */
    pr_consumer_get_stats(c, &st);
    uint64_t rb0 = st.rebalances;
    double end = now_s() + 30;
    while (now_s() < end && st.rebalances < rb0 + 2) {
        assert_true(pr_consumer_poll(c, b, 100, errstr, sizeof(errstr)) >= 0);
        pr_block_reset(b);
        pr_consumer_get_stats(c, &st);
    }
    assert_true(st.rebalances >= rb0 + 2);
    assert_true(read_member(path, id2, sizeof(id2)));
    mid = rd_kafka_memberid(pr_consumer_handle(c));
    assert_string_equal(id2, mid);
    free(mid);

    /* A clean close left the group itself: no file. */
    pr_consumer_free(c);
    assert_int_equal(access(path, F_OK), -1);

    /* Refusals. */
    pr_kv_ref tls[] = {{"bootstrap.servers", pr_mock_broker_bootstrap(g_mb)},
                       {"security.protocol", "SASL_SSL"}};
    assert_int_equal(
        pr_kafka_leave_group(tls, 2, "g-leave", "m", 1000, &was, errstr, sizeof(errstr)),
        PR_ENOTSUP);
    assert_non_null(strstr(errstr, "SASL_SSL"));
    pr_kv_ref plain[] = {{"security.protocol", "plaintext"}};
    assert_int_equal(
        pr_kafka_leave_group(plain, 1, "g-leave", "m", 1000, &was, errstr, sizeof(errstr)),
        PR_EINVAL); /* no bootstrap.servers */
    pr_kv_ref nobody[] = {{"bootstrap.servers", "127.0.0.1:1"}};
    double t0 = now_s();
    assert_int_equal(
        pr_kafka_leave_group(nobody, 1, "g-leave", "m", 500, &was, errstr, sizeof(errstr)),
        PR_ETIMEDOUT);
    assert_true(now_s() - t0 < 3);
    assert_non_null(strstr(errstr, "127.0.0.1:1"));

    rmdir(dir);
    pr_block_free(b);
    free(s);
}

static int setup(void **state)
{
    (void)state;
    char errstr[256];
    pr_pipeline_spec_default(&g_spec);
    g_spec.n_dense = 2;
    g_spec.n_sparse = 3;
    g_mb = pr_mock_broker_start(1, "", errstr, sizeof(errstr));
    if (!g_mb) {
        fprintf(stderr, "mock broker: %s\n", errstr);
        return -1;
    }
    return 0;
}

static int setup_par(void **state)
{
    g_decode_threads = 3;
    return setup(state);
}

static int setup_two(void **state)
{
    g_decode_threads = 3;
    g_consumers = 2;
    return setup(state);
}

static int teardown(void **state)
{
    (void)state;
    pr_mock_broker_stop(g_mb);
    return 0;
}

int main(void)
{
    pr_log_set_level(getenv("PR_TEST_KAFKA_DEBUG") ? PR_LOG_DEBUG : PR_LOG_WARN);
    if (getenv("PR_TEST_FILTER"))
        cmocka_set_test_filter(getenv("PR_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_consume_pause_commit_resume),
        cmocka_unit_test(test_resume_from_stored_offset),
        cmocka_unit_test(test_cooperative_rebalance),
        cmocka_unit_test(test_dead_letters),
        cmocka_unit_test(test_batches_fill_blocks),
        cmocka_unit_test(test_offset_out_of_range),
        cmocka_unit_test(test_latest_skips_nothing),
        cmocka_unit_test(test_latest_new_group_instances),
        cmocka_unit_test(test_expired_offsets),
        cmocka_unit_test(test_transaction_markers),
        cmocka_unit_test(test_dead_letters_never_vanish),
        cmocka_unit_test(test_leave_for_predecessor),
        cmocka_unit_test(test_leave_for_predecessor_instances),
    };
    /* PR_TEST_GROUP picks one group (ctest runs each as its own test, so
     * each has its own time limit); unset runs all three. */
    const char *only = getenv("PR_TEST_GROUP");
    int failed = 0;
    if (!only || !strcmp(only, "serial"))
        failed += cmocka_run_group_tests_name("serial decode", tests, setup, teardown);
    /* Again on a fresh broker with 3 decode threads: the same rows, offsets,
     * rebalances and dead letters. */
    if (!only || !strcmp(only, "parallel"))
        failed += cmocka_run_group_tests_name("parallel decode", tests, setup_par, teardown);
    /* And with two consumer instances in each pr_consumer (issue 21). */
    if (!only || !strcmp(only, "two"))
        failed += cmocka_run_group_tests_name("two instances", tests, setup_two, teardown);
    return failed;
}
