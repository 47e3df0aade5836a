/*
 * dlq.c — the dead-letter producer: a rejected record goes to a Kafka topic
 * with its original bytes and headers saying why and where it came from.
 *
 * Shape: one idempotent producer (acks=all) per dead-letter topic, fed from
 * the pipeline thread and never blocking it. Every dead letter stays on a
 * pending list (with a copy of its bytes) until the broker confirmed it, and
 * while it is pending it HOLDS its source offset: pr_dlq_hold() tells the
 * service the lowest such offset per partition key, and nothing at or past it
 * is stored for commit. A full local queue or a failed delivery is retried
 * (at most once a second per letter) from pr_dlq_poll(); a letter the topic
 * can never take (larger than message.max.bytes, or refused by the broker as
 * too large) goes to the dead-letter file instead (pr_dlq_set_file; fsync'd
 * before it stops holding), and without a file the producer turns fatal
 * (pr_dlq_fatal) so the pipeline stops rather than commit past a record that
 * is nowhere. Delivery reports are served by pr_dlq_poll(), which the consumer
 * calls on every poll; counters are atomics so metrics can read them from any
 * thread; the pending list belongs to the polling thread.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "pr_ingest.h"
#include "pr_log.h"

/* One dead letter not yet confirmed by the broker (nor written to the file). */
typedef struct pr__letter {
    struct pr__letter *next;
    int32_t key; /* source partition key: the hold */
    int64_t offset;
    int32_t partition;
    int64_t record_index;
    char *reason, *detail, *src_topic;
    void *payload;
    size_t len;
    bool in_queue;       /* handed to librdkafka, delivery report pending */
    int64_t next_try_ns; /* retry not before (monotonic) */
} pr__letter;

struct pr_dlq {
    rd_kafka_t *rk;
    char *topic;
    char *file; /* dead-letter file for letters the topic cannot take; NULL = none */
    uint64_t sent, failed, pending, to_file; /* atomics */
    pr__letter *letters;                     /* pending list; polling thread only */
    char fatal[512];                         /* set when a letter can go nowhere */
    bool closing; /* pr_dlq_free: delivery reports no longer touch letters */
    pr_ratelimit rl;
};

static void pr__letter_free(pr__letter *l)
{
    free(l->reason);
    free(l->detail);
    free(l->src_topic);
    free(l->payload);
    free(l);
}

static void pr__letter_unlink(pr_dlq *d, pr__letter *l)
{
    for (pr__letter **pp = &d->letters; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    __atomic_sub_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    pr__letter_free(l);
}

/* Errors no retry can cure: the letter goes to the file. */
static bool pr__permanent(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

/* Append letter l to the dead-letter file and fsync it: one text header line
 *   piperec-dead-letter<TAB>reason<TAB>source-topic<TAB>partition<TAB>offset
 *   <TAB>record-index<TAB>length<TAB>detail<TAB>why-not-in-the-topic
 * then exactly `length` payload bytes and a newline. 0, or PR_EIO. */
static int pr__to_file(pr_dlq *d, pr__letter *l, rd_kafka_resp_err_t why)
{
    if (!d->file)
        return PR_ENODEV;
    int fd = open(d->file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return PR_EIO;
    char hdr[1024];
    int n = snprintf(hdr, sizeof(hdr),
                     "piperec-dead-letter\t%s\t%s\t%" PRId32 "\t%" PRId64 "\t%" PRId64
                     "\t%zu\t%s\t%s\n",
                     l->reason, l->src_topic, l->partition, l->offset, l->record_index, l->len,
                     l->detail, rd_kafka_err2str(why));
    if (n < 0 || n >= (int)sizeof(hdr))
        n = (int)sizeof(hdr) - 1;
    bool ok = write(fd, hdr, (size_t)n) == n &&
              (l->len == 0 || write(fd, l->payload, l->len) == (ssize_t)l->len) &&
              write(fd, "\n", 1) == 1 && fsync(fd) == 0;
    if (close(fd))
        ok = false;
    return ok ? 0 : PR_EIO;
}

/* A letter the topic will never take: to the file, or fatal. */
static void pr__give_up_topic(pr_dlq *d, pr__letter *l, rd_kafka_resp_err_t why)
{
    int rc = pr__to_file(d, l, why);
    if (rc == 0) {
        __atomic_add_fetch(&d->to_file, 1, __ATOMIC_RELAXED);
        pr_warn("dead-letter topic %s cannot take %s [%" PRId32 "] offset %" PRId64
                " (%zu bytes: %s); written to %s",
                d->topic, l->src_topic, l->partition, l->offset, l->len, rd_kafka_err2str(why),
                d->file);
        pr__letter_unlink(d, l);
        return;
    }
    if (!d->fatal[0]) {
        snprintf(d->fatal, sizeof(d->fatal),
                 "dead letter of %s [%" PRId32 "] offset %" PRId64
                 " (%zu bytes) can reach neither topic %s (%s) nor a dead-letter file (%s%s); "
                 "stopping before its offset is committed",
                 l->src_topic, l->partition, l->offset, l->len, d->topic, rd_kafka_err2str(why),
                 d->file ? d->file : "no state.dir", d->file ? ": write failed" : "");
        pr_err("%s", d->fatal);
    }
    l->next_try_ns = INT64_MAX; /* keeps holding its offset */
}

static int64_t pr__mono_ns(void)
{
    return pr_clock_mono_ns(pr_clock_real());
}

/* Hand letter l to librdkafka. On a local refusal the letter stays pending:
 * retried later, or given up to the file when it can never fit. */
static int pr__produce(pr_dlq *d, pr__letter *l)
{
    char part[16], off[24], idx[24];
    snprintf(part, sizeof(part), "%" PRId32, l->partition);
    snprintf(off, sizeof(off), "%" PRId64, l->offset);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "piperec-reason", -1, l->reason, -1);
    rd_kafka_header_add(h, "piperec-detail", -1, l->detail, -1);
    rd_kafka_header_add(h, "piperec-source-topic", -1, l->src_topic, -1);
    rd_kafka_header_add(h, "piperec-partition", -1, part, -1);
    rd_kafka_header_add(h, "piperec-offset", -1, off, -1);
    if (l->record_index >= 0) {
        snprintf(idx, sizeof(idx), "%" PRId64, l->record_index);
        rd_kafka_header_add(h, "piperec-record-index", -1, idx, -1);
    }
    rd_kafka_resp_err_t err =
        rd_kafka_producev(d->rk, RD_KAFKA_V_TOPIC(d->topic), RD_KAFKA_V_VALUE(l->payload, l->len),
                          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                          RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END);
    if (!err) {
        l->in_queue = true;
        return 0;
    }
    rd_kafka_headers_destroy(h); /* not taken over on failure */
    __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
    if (pr__permanent(err)) {
        pr__give_up_topic(d, l, err);
        return PR_EKAFKA;
    }
    pr_log_ratelimited(&d->rl, PR_LOG_WARN,
                       "dead-letter topic %s: %s; will retry (the source offset is held)", d->topic,
                       rd_kafka_err2str(err));
    l->next_try_ns = pr__mono_ns() + 1000000000LL;
    return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? PR_EAGAIN : PR_EKAFKA;
}

static void pr__dlq_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr_dlq *d = opaque;
    pr__letter *l = d->closing ? NULL : m->_private;
    if (d->closing)
        return;
    if (l)
        l->in_queue = false;
    if (m->err) {
        __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
        if (l && pr__permanent(m->err)) {
            pr__give_up_topic(d, l, m->err);
            return;
        }
        pr_log_ratelimited(&d->rl, PR_LOG_WARN,
                           "dead-letter topic %s: delivery failed: %s; will retry (the source "
                           "offset is held)",
                           d->topic, rd_kafka_err2str(m->err));
        if (l)
            l->next_try_ns = pr__mono_ns() + 1000000000LL;
    } else {
        __atomic_add_fetch(&d->sent, 1, __ATOMIC_RELAXED);
        if (l)
            pr__letter_unlink(d, l);
    }
}

pr_dlq *pr_dlq_new(const char *topic, const pr_kv_ref *props, size_t n_props, char *errstr,
                   size_t errstr_size)
{
    if (!topic || !*topic) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter topic: empty name");
        return NULL;
    }
    pr_dlq *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->rl = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    d->topic = strdup(topic);
    if (!d->topic) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "dead-letter producer: out of memory");
        goto out_free;
    }
    /* Idempotent, acks=all, linger 20 ms; the consumer's list without its
     * consumer properties (pr_kafka.h's PR_KAFKA_DLQ_PRODUCER). */
    pr_kafka_client_conf cc = {.role = PR_KAFKA_DLQ_PRODUCER,
                               .props = props,
                               .n_props = n_props,
                               .opaque = d,
                               .dr_msg_cb = pr__dlq_dr};
    if (pr_kafka_client_new(&cc, &d->rk, errstr, errstr_size))
        goto out_free;
    return d;

out_free:
    free(d->topic);
    free(d);
    return NULL;
}

static char *pr__dup(const char *s)
{
    return strdup(s ? s : "");
}

int pr_dlq_send(pr_dlq *d, int32_t key, const void *payload, size_t len, const char *reason,
                const char *detail, const char *src_topic, int32_t partition, int64_t offset,
                int64_t record_index)
{
    pr__letter *l = calloc(1, sizeof(*l));
    if (!l)
        return PR_ENOMEM;
    l->key = key;
    l->offset = offset;
    l->partition = partition;
    l->record_index = record_index;
    l->reason = pr__dup(reason ? reason : "unknown");
    l->detail = pr__dup(detail);
    l->src_topic = pr__dup(src_topic);
    l->payload = malloc(len ? len : 1);
    l->len = len;
    if (!l->reason || !l->detail || !l->src_topic || !l->payload) {
        pr__letter_free(l);
        if (!d->fatal[0])
            snprintf(d->fatal, sizeof(d->fatal), "dead letter of offset %" PRId64 ": out of memory",
                     offset);
        return PR_ENOMEM;
    }
    if (len)
        memcpy(l->payload, payload, len);
    l->next = d->letters;
    d->letters = l;
    __atomic_add_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    return pr__produce(d, l);
}

void pr_dlq_poll(pr_dlq *d)
{
    if (!d)
        return;
    rd_kafka_poll(d->rk, 0);
    int64_t now = pr__mono_ns();
    for (pr__letter *l = d->letters, *next; l; l = next) {
        next = l->next; /* pr__produce may unlink l */
        if (!l->in_queue && l->next_try_ns <= now)
            pr__produce(d, l);
    }
}

int64_t pr_dlq_hold(const pr_dlq *d, int32_t key)
{
    int64_t hold = INT64_MAX;
    if (!d)
        return hold;
    for (const pr__letter *l = d->letters; l; l = l->next)
        if (l->key == key && l->offset < hold)
            hold = l->offset;
    return hold;
}

int pr_dlq_set_file(pr_dlq *d, const char *path)
{
    char *f = path && *path ? strdup(path) : NULL;
    if (path && *path && !f)
        return PR_ENOMEM;
    free(d->file);
    d->file = f;
    return 0;
}

const char *pr_dlq_fatal(const pr_dlq *d)
{
    return d && d->fatal[0] ? d->fatal : NULL;
}

int pr_dlq_flush(pr_dlq *d, int timeout_ms)
{
    if (!d)
        return 0;
    int64_t deadline = pr__mono_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        pr_dlq_poll(d);
        bool waiting = false;
        for (pr__letter *l = d->letters; l; l = l->next)
            if (l->next_try_ns != INT64_MAX)
                waiting = true;
        if (!waiting)
            return d->letters ? PR_ETIMEDOUT : 0;
        if (pr__mono_ns() >= deadline)
            return PR_ETIMEDOUT;
        rd_kafka_flush(d->rk, 50);
    }
}

void pr_dlq_free(pr_dlq *d)
{
    if (!d)
        return;
    if (pr_dlq_flush(d, 5000))
        pr_warn("dead-letter topic %s: %" PRIu64 " dead letters not delivered at shutdown (their "
                "offsets were not committed: they will be read again)",
                d->topic, __atomic_load_n(&d->pending, __ATOMIC_RELAXED));
    d->closing = true;
    rd_kafka_destroy(d->rk);
    while (d->letters) {
        pr__letter *l = d->letters;
        d->letters = l->next;
        pr__letter_free(l);
    }
    free(d->file);
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
    st->to_file = __atomic_load_n(&d->to_file, __ATOMIC_RELAXED);
}
