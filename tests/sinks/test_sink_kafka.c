/*
 * test_sink_kafka.c — the Kafka sink on librdkafka's mock cluster: batches
 * are acked only by their delivery reports, and what lands on the topic is
 * one TrainingBatch per message, key = pipeline, header piperec.sequence,
 * in sequence order. Waiting is condition-based (poll until acked or a
 * deadline), never a fixed sleep.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "pr_kafka.h"
#include "pr_sink.h"

static uint64_t acked[64];
static size_t n_acked;

static void on_ack(void *opaque, uint64_t seq)
{
    (void)opaque;
    acked[n_acked++] = seq;
}

static void test_kafka_sink_mock(void **state)
{
    (void)state;
    char err[512];
    rd_kafka_t *host = pr_kafka_new_simple(PR_KAFKA_TEST_BROKER, NULL, NULL, 0, err, sizeof(err));
    assert_non_null(host);
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(host, 1);
    assert_non_null(mc);
    assert_int_equal(rd_kafka_mock_topic_create(mc, "batches", 1, 1), 0);
    const char *bootstrap = rd_kafka_mock_cluster_bootstraps(mc);

    pr_kv props[] = {{"bootstrap.servers", bootstrap}, {"linger.ms", "1"}};
    pr_sink_cfg cfg = {.pipeline = "criteo", .n_dense = 1, .n_sparse = 1, .sparse_width = 4};
    cfg.kafka.topic = "batches";
    cfg.kafka.properties = (pr_kv_list){props, 2};
    pr_sink *s;
    assert_int_equal(pr_sink_new(&pr_sink_kafka_ops, &cfg, &s, err, sizeof(err)), 0);
    pr_sinkset *ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(ss, s), 0);
    assert_true(pr_sinkset_ready(ss));

    /* A bad property is reported by name. */
    pr_kv bad[] = {{"no.such.property", "1"}};
    cfg.kafka.properties = (pr_kv_list){bad, 1};
    pr_sink *s2;
    assert_int_equal(pr_sink_new(&pr_sink_kafka_ops, &cfg, &s2, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "no.such.property"));

    for (uint64_t q = 1; q <= 5; q++) {
        pr_batch *b = pr_batch_new("criteo", 2, 1, 1, 4);
        b->seq = q;
        b->labels[0] = (int32_t)q;
        b->dense[1] = 0.5f * (float)q;
        assert_int_equal(pr_sinkset_send(ss, b), 0);
        pr_batch_unref(b);
    }
    for (int i = 0; i < 3000 && n_acked < 5; i++) {
        pr_sinkset_poll(ss, on_ack, NULL);
        if (n_acked < 5)
            poll(NULL, 0, 10);
    }
    assert_int_equal(n_acked, 5);
    pr_sink_stats st;
    pr_sink_get_stats(s, &st);
    assert_int_equal(st.batches_acked, 5);
    assert_int_equal(st.queued_batches, 0);

    /* Read the topic back. */
    const pr_kv verify[] = {{"group.id", "verify"}, {"enable.auto.commit", "false"}};
    rd_kafka_t *cons =
        pr_kafka_new_simple(PR_KAFKA_PLAIN_CONSUMER, bootstrap, verify, 2, err, sizeof(err));
    assert_non_null(cons);
    rd_kafka_topic_partition_list_t *tp = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(tp, "batches", 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    assert_int_equal(rd_kafka_assign(cons, tp), 0);
    rd_kafka_topic_partition_list_destroy(tp);
    uint64_t next = 1;
    for (int i = 0; i < 300 && next <= 5; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(cons, 100);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        assert_int_equal(m->key_len, 6);
        assert_memory_equal(m->key, "criteo", 6);
        rd_kafka_headers_t *h = NULL;
        assert_int_equal(rd_kafka_message_headers(m, &h), 0);
        const void *hv;
        size_t hl;
        assert_int_equal(rd_kafka_header_get_last(h, "piperec.sequence", &hv, &hl), 0);
        char seqs[24];
        snprintf(seqs, sizeof(seqs), "%llu", (unsigned long long)next);
        assert_int_equal(hl, strlen(seqs));
        assert_memory_equal(hv, seqs, hl);
        pr_batch_view v;
        assert_int_equal(pr_batch_decode(m->payload, m->len, &v, err, sizeof(err)), 0);
        assert_int_equal(v.seq, next);
        assert_int_equal(v.rows, 2);
        int32_t lab;
        float d1;
        memcpy(&lab, v.labels, 4);
        memcpy(&d1, v.dense + 4, 4);
        assert_int_equal(lab, (int32_t)next);
        assert_true(d1 == 0.5f * (float)next);
        pr_batch_view_fini(&v);
        rd_kafka_message_destroy(m);
        next++;
    }
    assert_int_equal(next, 6);
    rd_kafka_consumer_close(cons);
    rd_kafka_destroy(cons);
    pr_sinkset_free(ss);
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kafka_sink_mock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
