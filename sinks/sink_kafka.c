/*
 * sink_kafka.c — the Kafka sink: each batch is one message on a topic, for
 * trainers that read Kafka directly (any language, any Kafka client).
 *
 *   value   = piperec.v1.TrainingBatch (the batch's encoded bytes, handed to
 *             librdkafka without a copy: the message holds a batch reference
 *             until its delivery report)
 *   key     = pipeline name (one partition keeps the stream in order)
 *   headers = piperec.sequence (decimal), piperec.pipeline
 *
 * Delivery: enable.idempotence=true and acks=all are set before the user's
 * properties (which may override them, at their own risk); a batch is
 * acknowledged by its successful delivery report, seen in poll() on the
 * pipeline thread. A failed delivery (message timeout, fatal error) is not
 * acked: the batch is produced again at the next poll, so its input offsets
 * stay uncommitted until it is really in Kafka.
 */
#include <stdio.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "pr_kafka.h"
#include "pr_log.h"
#include "pr_sink.h"
#include "sink_acks.h"

typedef struct kafka_sink {
    pr_sink base;
    rd_kafka_t *rk;
    char *topic;
    char pipeline[PR_NAME_MAX];
    uint32_t max_queued;
    uint64_t in_flight;
    /* filled by the delivery callback (inside rd_kafka_poll, pipeline thread) */
    pr__acks acked;
    pr_batch **retry;
    size_t n_retry, cap_retry;
    bool fatal;
    pr_sink_stats st; /* pipeline thread's copy */
    pthread_mutex_t mu;
    pr_sink_stats pub; /* published under mu for get_stats */
} kafka_sink;

/* Copy the counters for other threads (end of send and poll). */
static void pr__publish(kafka_sink *k)
{
    pthread_mutex_lock(&k->mu);
    k->pub = k->st;
    k->pub.queued_batches = k->in_flight + k->n_retry;
    pthread_mutex_unlock(&k->mu);
}

static void pr__dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    kafka_sink *k = opaque;
    pr_batch *b = m->_private;
    if (!b)
        return;
    k->in_flight--;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        if (pr__acks_push(&k->acked, &b->seq, 1) < 0)
            pr_err("kafka sink: out of memory recording the ack of batch %llu",
                   (unsigned long long)b->seq);
        pr_batch_unref(b);
        return;
    }
    k->st.errors++;
    pr_warn("kafka sink: batch %llu not delivered to %s: %s; producing it again",
            (unsigned long long)b->seq, k->topic, rd_kafka_err2str(m->err));
    if (k->n_retry == k->cap_retry) {
        size_t nc = k->cap_retry ? k->cap_retry * 2 : 16;
        pr_batch **n = realloc(k->retry, nc * sizeof(*n));
        if (!n) {
            pr_batch_unref(b);
            return;
        }
        k->retry = n;
        k->cap_retry = nc;
    }
    k->retry[k->n_retry++] = b; /* keeps the reference */
}

static void pr__error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    kafka_sink *k = opaque;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof(buf));
        pr_err("kafka sink: fatal producer error: %s", buf);
        k->fatal = true;
    } else {
        pr_warn("kafka sink: %s", reason);
    }
}

static void pr__kafka_free(pr_sink *s);

static int pr__kafka_new(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t es)
{
    if (!cfg->kafka.topic || !*cfg->kafka.topic)
        return pr_seterr(errstr, es, PR_EINVAL, "sinks.kafka.topic: required");
    kafka_sink *k = calloc(1, sizeof(*k));
    if (!k)
        return pr_seterr(errstr, es, PR_ENOMEM, "kafka sink: out of memory");
    k->base.ops = &pr_sink_kafka_ops;
    pthread_mutex_init(&k->mu, NULL);
    k->topic = strdup(cfg->kafka.topic);
    snprintf(k->pipeline, sizeof(k->pipeline), "%s", cfg->pipeline ? cfg->pipeline : "");
    pr_kafka_sink_cfg kc = cfg->kafka;
    pr_cfgmap_default_zero(&pr_sink_kafka_cfgmap, &kc); /* 0 = the documented default */
    k->max_queued = kc.max_queued_batches;

    /* enable.idempotence=true, acks=all, linger.ms=5, message.max.bytes=64 MiB
     * under the user's properties (pr_kafka.h's PR_KAFKA_SINK_PRODUCER). */
    pr_kafka_client_conf cc = {.role = PR_KAFKA_SINK_PRODUCER,
                               .props = kc.properties.items,
                               .n_props = kc.properties.n,
                               .opaque = k,
                               .dr_msg_cb = pr__dr_cb,
                               .error_cb = pr__error_cb};
    int rc = pr_kafka_client_new(&cc, &k->rk, errstr, es);
    if (rc) {
        pr__kafka_free(&k->base);
        return rc;
    }
    *out = &k->base;
    return 0;
}

static int pr__produce(kafka_sink *k, pr_batch *b)
{
    char seq[24];
    snprintf(seq, sizeof(seq), "%llu", (unsigned long long)b->seq);
    rd_kafka_resp_err_t err = rd_kafka_producev(
        k->rk, RD_KAFKA_V_TOPIC(k->topic), RD_KAFKA_V_VALUE(b->pb, b->pb_len),
        RD_KAFKA_V_KEY(k->pipeline, strlen(k->pipeline)),
        RD_KAFKA_V_HEADER("piperec.sequence", seq, (ssize_t)strlen(seq)),
        RD_KAFKA_V_HEADER("piperec.pipeline", k->pipeline, (ssize_t)strlen(k->pipeline)),
        RD_KAFKA_V_OPAQUE(b), RD_KAFKA_V_END);
    if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
        return PR_EAGAIN;
    if (err) {
        k->st.errors++;
        pr_err("kafka sink: produce batch %llu to %s: %s", (unsigned long long)b->seq, k->topic,
               rd_kafka_err2str(err));
        return PR_EKAFKA;
    }
    k->in_flight++;
    k->st.bytes_sent += b->pb_len;
    return 0;
}

static int pr__kafka_send(pr_sink *s, pr_batch *b)
{
    kafka_sink *k = (kafka_sink *)s;
    if (!b->pb)
        return PR_EINVAL;
    if (k->n_retry || k->in_flight >= k->max_queued) {
        k->st.batches_refused++;
        return PR_EAGAIN; /* keep order: retries first */
    }
    pr_batch_ref(b);
    int rc = pr__produce(k, b);
    if (rc < 0) {
        pr_batch_unref(b);
        if (rc == PR_EAGAIN)
            k->st.batches_refused++;
    } else {
        k->st.batches_sent++;
    }
    pr__publish(k);
    return rc;
}

static int pr__kafka_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
{
    kafka_sink *k = (kafka_sink *)s;
    rd_kafka_poll(k->rk, 0);
    /* Re-produce failed batches, in order. */
    size_t i = 0;
    for (; i < k->n_retry; i++) {
        if (pr__produce(k, k->retry[i]) < 0)
            break;
        k->st.redeliveries++;
    }
    if (i) {
        memmove(k->retry, k->retry + i, (k->n_retry - i) * sizeof(*k->retry));
        k->n_retry -= i;
    }
    size_t n = pr__acks_drain(&k->acked, cb, opaque);
    k->st.batches_acked += n;
    pr__publish(k);
    return (int)n;
}

static bool pr__kafka_ready(pr_sink *s)
{
    kafka_sink *k = (kafka_sink *)s;
    return k->rk && !k->fatal;
}

static void pr__kafka_stats(pr_sink *s, pr_sink_stats *st)
{
    kafka_sink *k = (kafka_sink *)s;
    pthread_mutex_lock(&k->mu);
    *st = k->pub;
    pthread_mutex_unlock(&k->mu);
}

static void pr__kafka_free(pr_sink *s)
{
    kafka_sink *k = (kafka_sink *)s;
    if (!k)
        return;
    if (k->rk) {
        /* Give in-flight messages a moment, then drop: unacked batches'
         * offsets were never committed. */
        rd_kafka_flush(k->rk, 2000);
        rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(k->rk, 0); /* delivery reports release the batch references */
        rd_kafka_destroy(k->rk);
    }
    for (size_t i = 0; i < k->n_retry; i++)
        pr_batch_unref(k->retry[i]);
    free(k->retry);
    pr__acks_fini(&k->acked);
    free(k->topic);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

const pr_sink_ops pr_sink_kafka_ops = {
    .name = "kafka",
    .doc = "idempotent producer: one TrainingBatch message per batch, acked by delivery report",
    .new_ = pr__kafka_new,
    .send = pr__kafka_send,
    .poll = pr__kafka_poll,
    .ready = pr__kafka_ready,
    .get_stats = pr__kafka_stats,
    .free_ = pr__kafka_free,
    /* No capabilities: acked by the delivery report of the write itself. */
    .enabled_off = offsetof(pr_sinks_cfg, kafka.enabled),
};
