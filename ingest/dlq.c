/*
 * dlq.c — the dead-letter producer: a rejected record goes to a Kafka topic
 * with its original bytes and headers saying why and where it came from.
 *
 * Shape: one idempotent producer (acks=all) per dead-letter topic, fed from
 * the pipeline thread and never blocking it: a full local queue is counted as
 * a failure instead of waiting (dead letters must not stall the stream).
 * Delivery reports are served by pr_dlq_poll(), which the consumer calls on
 * every poll; counters are atomics so metrics can read them from any thread.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_ingest.h"
#include "pr_log.h"

struct pr_dlq {
    rd_kafka_t *rk;
    char *topic;
    uint64_t sent, failed, pending; /* atomics */
    pr_ratelimit rl;
};

/* Properties of a consumer that make no sense to a producer: skipped so one
 * property list configures both (librdkafka would warn about each). */
static const char *const pr__consumer_only[] = {
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

static bool pr__skip_prop(const char *key)
{
    for (size_t i = 0; i < sizeof(pr__consumer_only) / sizeof(pr__consumer_only[0]); i++)
        if (!strcmp(key, pr__consumer_only[i]))
            return true;
    return false;
}

static void pr__dlq_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr_dlq *d = opaque;
    __atomic_sub_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    if (m->err) {
        __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
        pr_log_ratelimited(&d->rl, PR_LOG_WARN, "dead-letter topic %s: delivery failed: %s",
                           d->topic, rd_kafka_err2str(m->err));
    } else {
        __atomic_add_fetch(&d->sent, 1, __ATOMIC_RELAXED);
    }
}

pr_dlq *pr_dlq_new(const char *topic, const pr_kv_ref *props, size_t n_props, char *errstr,
                   size_t errstr_size)
{
    char kerr[512];
    if (!topic || !*topic) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter topic: empty name");
        return NULL;
    }
    pr_dlq *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->rl = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    d->topic = strdup(topic);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (!d->topic || !conf)
        goto out_free;
    for (size_t i = 0; i < n_props; i++) {
        if (pr__skip_prop(props[i].key))
            continue;
        if (rd_kafka_conf_set(conf, props[i].key, props[i].value, kerr, sizeof(kerr)) !=
            RD_KAFKA_CONF_OK) {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter producer: property %s: %s",
                      props[i].key, kerr);
            goto out_conf;
        }
    }
    static const pr_kv_ref forced[] = {
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "20"},
    };
    for (size_t i = 0; i < sizeof(forced) / sizeof(forced[0]); i++)
        if (rd_kafka_conf_set(conf, forced[i].key, forced[i].value, kerr, sizeof(kerr)) !=
            RD_KAFKA_CONF_OK) {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter producer: %s", kerr);
            goto out_conf;
        }
    rd_kafka_conf_set_dr_msg_cb(conf, pr__dlq_dr);
    rd_kafka_conf_set_opaque(conf, d);
    d->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, kerr, sizeof(kerr));
    if (!d->rk) {
        pr_seterr(errstr, errstr_size, PR_EKAFKA, "dead-letter producer: %s", kerr);
        goto out_conf;
    }
    return d;

out_conf:
    rd_kafka_conf_destroy(conf);
out_free:
    free(d->topic);
    free(d);
    return NULL;
}

int pr_dlq_send(pr_dlq *d, const void *payload, size_t len, const char *reason, const char *detail,
                const char *src_topic, int32_t partition, int64_t offset, int64_t record_index)
{
    char part[16], off[24], idx[24];
    snprintf(part, sizeof(part), "%" PRId32, partition);
    snprintf(off, sizeof(off), "%" PRId64, offset);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "piperec-reason", -1, reason ? reason : "unknown", -1);
    rd_kafka_header_add(h, "piperec-detail", -1, detail ? detail : "", -1);
    rd_kafka_header_add(h, "piperec-source-topic", -1, src_topic ? src_topic : "", -1);
    rd_kafka_header_add(h, "piperec-partition", -1, part, -1);
    rd_kafka_header_add(h, "piperec-offset", -1, off, -1);
    if (record_index >= 0) {
        snprintf(idx, sizeof(idx), "%" PRId64, record_index);
        rd_kafka_header_add(h, "piperec-record-index", -1, idx, -1);
    }
    rd_kafka_resp_err_t err = rd_kafka_producev(
        d->rk, RD_KAFKA_V_TOPIC(d->topic), RD_KAFKA_V_VALUE((void *)payload, len),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
    if (err) {
        rd_kafka_headers_destroy(h); /* not taken over on failure */
        __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
        pr_log_ratelimited(&d->rl, PR_LOG_WARN, "dead-letter topic %s: %s", d->topic,
                           rd_kafka_err2str(err));
        return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? PR_EAGAIN : PR_EKAFKA;
    }
    __atomic_add_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    return 0;
}

void pr_dlq_poll(pr_dlq *d)
{
    if (d)
        rd_kafka_poll(d->rk, 0);
}

int pr_dlq_flush(pr_dlq *d, int timeout_ms)
{
    if (!d)
        return 0;
    return rd_kafka_flush(d->rk, timeout_ms) ? PR_ETIMEDOUT : 0;
}

void pr_dlq_free(pr_dlq *d)
{
    if (!d)
        return;
    if (pr_dlq_flush(d, 5000))
        pr_warn("dead-letter topic %s: %" PRIu64 " dead letters not delivered at shutdown",
                d->topic, __atomic_load_n(&d->pending, __ATOMIC_RELAXED));
    rd_kafka_destroy(d->rk);
    free(d->topic);
    free(d);
}

void pr_dlq_get_stats(const pr_dlq *d, pr_dlq_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!d)
        return;
    st->sent = __atomic_load_n(&d->sent, __ATOMIC_RELAXED);
    st->failed = __atomic_load_n(&d->failed, __ATOMIC_RELAXED);
    st->pending = __atomic_load_n(&d->pending, __ATOMIC_RELAXED);
}
