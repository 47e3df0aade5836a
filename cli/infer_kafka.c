/*
 * infer_kafka.c — `piperec infer --bootstrap ADDR --topic T`: the sample
 * events read straight from the topic instead of a file.
 *
 * Why: users have a topic, not a sample file; dumping one first (kcat, a
 * consumer script) is a step that gets framing and formats wrong. This reads
 * the topic once from its beginning and hands each message to the same
 * reader the file path uses, so a topic and a file of the same messages give
 * the same config.
 *
 * How: one consumer from the project's builder (pr_kafka.h; the plain role:
 * exactly the properties set here) that never joins a group and never
 * stores or commits an offset: no group.id at all, so librdkafka's
 * partition-level consumer (rd_kafka_consume_start_queue on every
 * partition, at its beginning, into one queue) rather than rd_kafka_assign,
 * which in librdkafka wants a group.id (vocab/vocablog.c gives its reader
 * one for that). The partitions come from a metadata request for all topics:
 * a request naming the topic may create it (a broker with
 * auto.create.topics.enable answering an old request version; the test
 * broker always does), and an unknown topic must be an error.
 * enable.partition.eof says when a partition is read to its end. Reading
 * stops at the first of: the events wanted, every partition at its end, the
 * timeout (one deadline for the metadata request and the reading). Messages
 * are taken in the order librdkafka delivers them, so a sample spreads over
 * the partitions rather than taking all of partition 0 first.
 *
 * Per message: a NULL payload (a tombstone) is skipped; JSON goes to
 * pr_infer_add_json, bare or in schema-registry framing (first byte 0, at
 * least 5 bytes: the 5-byte header skipped, as the service's JSON decoder
 * does); Avro and Protobuf messages are gathered as `varint(len) + payload`
 * in memory and read through pr_infer_add_avro_records /
 * pr_infer_add_pb_messages over fmemopen, the readers of the file path
 * (both readers take plain bodies and bodies behind a registry header).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "pr_cli.h"
#include "pr_clock.h"
#include "pr_config.h"
#include "pr_error.h"
#include "pr_kafka.h"
#include "pr_log.h"

/* Binary messages of which none decodes before reading stops (the wrong
 * schema): enough that a topic's oldest messages in an older schema do not
 * stop it. */
#define PR__IK_GIVE_UP 10000

/* The client's last error, for a message naming why the broker was not reached. */
typedef struct pr__ik_client {
    char last_error[256];
} pr__ik_client;

static void pr__ik_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    (void)err;
    pr__ik_client *c = opaque;
    snprintf(c->last_error, sizeof(c->last_error), "%s", reason);
}

/* Messages of a binary format gathered as the file path's input would hold
 * them: varint(len) + payload each. */
typedef struct pr__ik_buf {
    char *p;
    size_t len, cap;
    uint64_t n; /* messages in it */
} pr__ik_buf;

static int pr__ik_append(pr__ik_buf *b, const void *payload, size_t len)
{
    if (b->len + len + 10 > b->cap) {
        size_t cap = b->cap ? b->cap : 64 * 1024;
        while (cap < b->len + len + 10)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return PR_ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    uint64_t v = len;
    do {
        uint8_t byte = v & 0x7f;
        v >>= 7;
        b->p[b->len++] = (char)(v ? byte | 0x80 : byte);
    } while (v);
    memcpy(b->p + b->len, payload, len);
    b->len += len;
    b->n++;
    return 0;
}

/* The gathered messages through the format's reader, at most max events;
 * the buffer is emptied. 0 or the exit code after filling err. */
static int pr__ik_flush(pr__ik_buf *b, pr_infer *inf, const pr_infer_opts *o, uint64_t max,
                        char *err, size_t errn)
{
    if (!b->len)
        return 0;
    FILE *f = fmemopen(b->p, b->len, "rb");
    if (!f) {
        snprintf(err, errn, "fmemopen: %m");
        return 1;
    }
    char rerr[512];
    int rc = o->avro_schema_file
                 ? pr_infer_add_avro_records(inf, o->avro_schema_file, f, max, rerr, sizeof(rerr))
                 : pr_infer_add_pb_messages(inf, o->pb_descriptor_set, o->pb_message, f, max, rerr,
                                            sizeof(rerr));
    fclose(f);
    b->len = 0;
    b->n = 0;
    if (rc) {
        snprintf(err, errn, "%s", rc == PR_EINVAL || rc == PR_EIO ? rerr : pr_strerror(rc));
        return rc == PR_EINVAL ? 2 : 1;
    }
    return 0;
}

/* The consumer: bootstrap, no group, nothing stored, end of partition
 * reported. NULL after filling err. */
static rd_kafka_t *pr__ik_consumer(const char *bootstrap, const pr_infer_opts *o, pr__ik_client *c,
                                   char *err, size_t errn)
{
    const pr_kv defaults[] = {{"bootstrap.servers", bootstrap}};
    const pr_kv set[] = {
        {"enable.partition.eof", "true"},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"auto.offset.reset", "earliest"}, /* the beginning moved on meanwhile (retention) */
    };
    pr_kafka_client_conf cc = {.role = PR_KAFKA_PLAIN_CONSUMER,
                               .props = o->kafka_props,
                               .n_props = o->n_kafka_props,
                               .defaults = defaults,
                               .n_defaults = 1,
                               .set = set,
                               .n_set = sizeof(set) / sizeof(set[0]),
                               .opaque = c,
                               .log_cb = pr_kafka_log_quiet_connect,
                               .error_cb = pr__ik_error_cb};
    rd_kafka_t *rk = NULL;
    if (pr_kafka_client_new(&cc, &rk, err, errn))
        return NULL;
    return rk;
}

/* The partition count of topic at bootstrap within timeout_ms, from the
 * metadata of all topics (see the top); 0 or the exit code (2: the broker
 * not reached, the topic unknown or without partitions) after filling err. */
static int pr__ik_partitions(rd_kafka_t *rk, pr__ik_client *c, const char *bootstrap,
                             const char *topic, int timeout_ms, int32_t *n, char *err, size_t errn)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms);
    if (e) {
        rd_kafka_poll(rk, 0); /* the client's errors (error_cb): why it was not reached */
        snprintf(err, errn, "cannot read the metadata of topic %s from --bootstrap %s in %d s: %s",
                 topic, bootstrap, (timeout_ms + 999) / 1000,
                 c->last_error[0] ? c->last_error : rd_kafka_err2str(e));
        return 2;
    }
    const struct rd_kafka_metadata_topic *t = NULL;
    for (int i = 0; i < md->topic_cnt && !t; i++)
        if (!strcmp(md->topics[i].topic, topic))
            t = &md->topics[i];
    int code = 2;
    if (!t || t->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
        snprintf(err, errn, "topic %s does not exist at --bootstrap %s", topic, bootstrap);
    else if (t->err)
        snprintf(err, errn, "topic %s at --bootstrap %s: %s", topic, bootstrap,
                 rd_kafka_err2str(t->err));
    else if (t->partition_cnt <= 0)
        snprintf(err, errn, "topic %s at --bootstrap %s has no partition", topic, bootstrap);
    else {
        *n = t->partition_cnt;
        code = 0;
    }
    rd_kafka_metadata_destroy(md);
    return code;
}

/* One message into inf (JSON) or b (binary), counted in *taken or
 * *tombstones; 0 or the exit code after filling err. */
static int pr__ik_take(const rd_kafka_message_t *m, const char *topic, bool binary, pr_infer *inf,
                       pr__ik_buf *b, uint64_t *taken, uint64_t *tombstones, char *err, size_t errn)
{
    if (!m->payload) {
        (*tombstones)++;
        return 0;
    }
    (*taken)++;
    if (binary) {
        if (pr__ik_append(b, m->payload, m->len)) {
            snprintf(err, errn, "%s", pr_strerror(PR_ENOMEM));
            return 1;
        }
        return 0;
    }
    const char *t = m->payload;
    size_t len = m->len;
    if (len >= 5 && t[0] == 0) { /* registry framing: 0, a 4-byte schema id (not looked up) */
        t += 5;
        len -= 5;
    }
    int rc = pr_infer_add_json(inf, t, len);
    if (rc == PR_EBADREC && pr_infer_rejected(inf) <= 3)
        fprintf(stderr, "piperec infer: topic %s [%" PRId32 "] offset %" PRId64 ": %s; skipped\n",
                topic, m->partition, m->offset, pr_infer_last_error(inf));
    else if (rc && rc != PR_EBADREC) {
        snprintf(err, errn, "%s", pr_strerror(rc));
        return 1;
    }
    return 0;
}

int pr_cli_infer_kafka(const char *bootstrap, const char *topic, int timeout_s, uint64_t rows,
                       pr_infer *inf, const pr_infer_opts *o, char *err, size_t errn)
{
    const int64_t deadline = pr_mono_ns() + (int64_t)timeout_s * 1000000000;
    const bool binary = o->avro_schema_file || o->pb_descriptor_set;
    pr__ik_client c = {{0}};
    pr__ik_buf b = {0};
    bool *eof = NULL;
    rd_kafka_topic_t *rkt = NULL;
    rd_kafka_queue_t *rkq = NULL;
    int32_t n_parts = 0, n_started = 0, n_eof = 0;
    uint64_t taken = 0, tombstones = 0;
    int code;

    rd_kafka_t *rk = pr__ik_consumer(bootstrap, o, &c, err, errn);
    if (!rk)
        return 2;
    if ((code = pr__ik_partitions(rk, &c, bootstrap, topic, timeout_s * 1000, &n_parts, err, errn)))
        goto out_destroy;

    code = 1;
    eof = calloc((size_t)n_parts, sizeof(*eof));
    rkt = rd_kafka_topic_new(rk, topic, NULL);
    rkq = rd_kafka_queue_new(rk);
    if (!eof || !rkt || !rkq) {
        snprintf(err, errn, "topic %s: %s", topic,
                 rkt ? pr_strerror(PR_ENOMEM) : rd_kafka_err2str(rd_kafka_last_error()));
        goto out_stop;
    }
    for (; n_started < n_parts; n_started++)
        if (rd_kafka_consume_start_queue(rkt, n_started, RD_KAFKA_OFFSET_BEGINNING, rkq)) {
            snprintf(err, errn, "topic %s [%" PRId32 "]: cannot start reading: %s", topic,
                     n_started, rd_kafka_err2str(rd_kafka_last_error()));
            goto out_stop;
        }

    /* Events wanted: the file path's --rows counts events added (a message
     * that does not decode is skipped, not counted), so binary messages are
     * read in rounds of as many messages as events are still wanted. */
    code = 0;
    bool timed_out = false, undecodable = false;
    while (!code && n_eof < n_parts) {
        uint64_t have = pr_infer_events(inf);
        if (have + b.n >= rows) {
            if (!b.n)
                break;
            code = pr__ik_flush(&b, inf, o, rows, err, errn);
            /* nothing decoded in many messages: the wrong schema; reading on
             * to the end or the timeout would not help (a topic whose oldest
             * messages are in an older schema decodes later ones) */
            if (!code && !pr_infer_events(inf) && pr_infer_rejected(inf) >= PR__IK_GIVE_UP) {
                undecodable = true;
                break;
            }
            continue;
        }
        int64_t left_ms = (deadline - pr_mono_ns()) / 1000000;
        if (left_ms <= 0) {
            timed_out = true;
            break;
        }
        rd_kafka_poll(rk, 0); /* error_cb */
        rd_kafka_message_t *m = rd_kafka_consume_queue(rkq, left_ms < 200 ? (int)left_ms : 200);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            if (m->partition >= 0 && m->partition < n_parts && !eof[m->partition]) {
                eof[m->partition] = true;
                n_eof++;
            }
        } else if (m->err) {
            /* a partition's fetch error: librdkafka retries; said once each */
            const char *why = rd_kafka_message_errstr(m);
            if (strcmp(c.last_error, why))
                fprintf(stderr, "piperec infer: topic %s [%" PRId32 "]: %s\n", topic, m->partition,
                        why);
            snprintf(c.last_error, sizeof(c.last_error), "%s", why);
        } else {
            code = pr__ik_take(m, topic, binary, inf, &b, &taken, &tombstones, err, errn);
        }
        rd_kafka_message_destroy(m);
    }
    if (!code && !undecodable)
        code = pr__ik_flush(&b, inf, o, rows, err, errn);

    if (!code) {
        const char *why = undecodable                    ? "none of the first messages decoded"
                          : pr_infer_events(inf) >= rows ? "--rows reached"
                          : timed_out                    ? "--timeout reached"
                                                         : "every partition at its end";
        fprintf(stderr,
                "piperec infer: read %" PRIu64 " messages of topic %s at %s (%" PRId32
                " partition%s, %" PRId32 " read to the end; %s)",
                taken, topic, bootstrap, n_parts, n_parts == 1 ? "" : "s", n_eof, why);
        if (tombstones)
            fprintf(stderr, "; %" PRIu64 " tombstones skipped", tombstones);
        fputc('\n', stderr);
        if (timed_out)
            fprintf(stderr,
                    "piperec infer: --timeout %d s passed before every partition was read to "
                    "its end; inferring from the %" PRIu64 " messages read%s%s%s\n",
                    timeout_s, taken, c.last_error[0] ? " (last error: " : "", c.last_error,
                    c.last_error[0] ? ")" : "");
    }
out_stop:
    for (int32_t p = 0; p < n_started; p++)
        rd_kafka_consume_stop(rkt, p);
    if (rkq)
        rd_kafka_queue_destroy(rkq);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    free(eof);
    free(b.p);
out_destroy:
    rd_kafka_destroy(rk);
    return code;
}
