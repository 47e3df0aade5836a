/*
 * sinkset.c — the sink table and the "acknowledged by every sink"
 * aggregation (contract: pr_sink.h).
 *
 * A pipeline may write to several sinks; a batch's offsets may be committed
 * only once all of them have it. The set keeps one entry per batch in flight
 * (sorted by sequence, found by binary search) with a count of sinks still to
 * acknowledge, and one retry queue per sink for batches it refused with
 * PR_EAGAIN. Retry queues preserve sequence order, so a sink never sees
 * batch N+1 before batch N.
 *
 * The capability calls (pr_sink_port, pr_sink_resume_filter, ...) live here
 * too: they dispatch on the ops table's capability flags, so neither the
 * core nor this file needs to know which sink has which.
 */
#include <stdlib.h>
#include <string.h>

#include "pr_grow.h"
#include "pr_log.h"
#include "pr_sink.h"

static const pr_sink_ops *const sink_table[] = {&pr_sink_trainer_ops, &pr_sink_kafka_ops,
                                                &pr_sink_files_ops, NULL};

const pr_sink_ops *pr_sink_ops_at(size_t i)
{
    return i < sizeof(sink_table) / sizeof(sink_table[0]) ? sink_table[i] : NULL;
}

int pr_sink_new(const pr_sink_ops *ops, const pr_sink_cfg *cfg, pr_sink **out, char *errstr,
                size_t errstr_size)
{
    *out = NULL;
    int err = ops->new_(cfg, out, errstr, errstr_size);
    if (err == 0 && *out)
        (*out)->ops = ops;
    return err;
}

void pr_sink_free(pr_sink *s)
{
    if (s)
        s->ops->free_(s);
}

/* ---------------------------------------------------------------- capabilities */

static bool pr__has_cap(const pr_sink *s, unsigned cap)
{
    return s && (s->ops->caps & cap);
}

int pr_sink_port(pr_sink *s)
{
    return pr__has_cap(s, PR_SINK_CAP_LISTENER) ? s->ops->port(s) : -1;
}

uint64_t pr_sink_buffered_bytes(pr_sink *s)
{
    return pr__has_cap(s, PR_SINK_CAP_LISTENER) ? s->ops->buffered_bytes(s) : 0;
}

bool pr_sink_checkpoint_mode(pr_sink *s)
{
    return pr__has_cap(s, PR_SINK_CAP_CHECKPOINT) && s->ops->checkpoint_mode(s);
}

bool pr_sink_resume_known(pr_sink *s)
{
    return !pr_sink_checkpoint_mode(s) || s->ops->resume_known(s);
}

uint32_t pr_sink_resume_filter(pr_sink *s, const char *const *topics, size_t n_topics,
                               const int32_t *keys, const int64_t *offsets, uint32_t n,
                               uint8_t *skip)
{
    if (!pr_sink_checkpoint_mode(s))
        return 0;
    return s->ops->resume_filter(s, topics, n_topics, keys, offsets, n, skip);
}

/* ---------------------------------------------------------------- sink set */

typedef struct ss_entry {
    uint64_t seq;
    pr_batch *b;
    uint32_t remaining;
} ss_entry;

typedef struct ss_queue {
    pr_batch **q;
    size_t head, len, cap;
} ss_queue;

struct pr_sinkset {
    pr_sink **sinks;
    ss_queue *retry;
    size_t n;
    ss_entry *pend;
    size_t n_pend, cap_pend;
    size_t n_done; /* entries with remaining == 0 not yet reported */
};

pr_sinkset *pr_sinkset_new(void)
{
    return calloc(1, sizeof(pr_sinkset));
}

int pr_sinkset_add(pr_sinkset *ss, pr_sink *s)
{
    pr_sink **ns = realloc(ss->sinks, (ss->n + 1) * sizeof(*ns));
    if (!ns)
        return PR_ENOMEM;
    ss->sinks = ns;
    ss_queue *nq = realloc(ss->retry, (ss->n + 1) * sizeof(*nq));
    if (!nq)
        return PR_ENOMEM;
    ss->retry = nq;
    memset(&ss->retry[ss->n], 0, sizeof(ss_queue));
    ss->sinks[ss->n++] = s;
    return 0;
}

size_t pr_sinkset_count(const pr_sinkset *ss)
{
    return ss->n;
}
pr_sink *pr_sinkset_get(pr_sinkset *ss, size_t i)
{
    return i < ss->n ? ss->sinks[i] : NULL;
}

static int pr__q_push(ss_queue *q, pr_batch *b)
{
    if (q->len == q->cap) {
        size_t nc = q->cap ? q->cap * 2 : 16;
        pr_batch **n = malloc(nc * sizeof(*n));
        if (!n)
            return PR_ENOMEM;
        for (size_t i = 0; i < q->len; i++)
            n[i] = q->q[(q->head + i) % q->cap];
        free(q->q);
        q->q = n;
        q->cap = nc;
        q->head = 0;
    }
    q->q[(q->head + q->len) % q->cap] = pr_batch_ref(b);
    q->len++;
    return 0;
}

static ss_entry *pr__find(pr_sinkset *ss, uint64_t seq)
{
    size_t lo = 0, hi = ss->n_pend;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (ss->pend[mid].seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < ss->n_pend && ss->pend[lo].seq == seq ? &ss->pend[lo] : NULL;
}

int pr_sinkset_send(pr_sinkset *ss, pr_batch *b)
{
    /* One sink that encodes on its own thread: the encoding is its. With
     * several, the bytes are shared: encoded here, once, before any sink's
     * thread can see the batch. */
    if (!(ss->n == 1 && pr__has_cap(ss->sinks[0], PR_SINK_CAP_ENCODES))) {
        int err = pr_batch_encode(b);
        if (err < 0)
            return err;
    }
    if (ss->n_pend && ss->pend[ss->n_pend - 1].seq >= b->seq)
        return PR_EINVAL; /* sequences must increase */
    if (pr_grow((void **)&ss->pend, &ss->cap_pend, ss->n_pend + 1, sizeof(*ss->pend)) < 0)
        return PR_ENOMEM;
    ss->pend[ss->n_pend++] = (ss_entry){b->seq, pr_batch_ref(b), (uint32_t)ss->n};
    int first_err = 0;
    for (size_t i = 0; i < ss->n; i++) {
        int rc = PR_EAGAIN;
        if (ss->retry[i].len == 0)
            rc = pr_sink_send(ss->sinks[i], b);
        if (rc == PR_EAGAIN)
            rc = pr__q_push(&ss->retry[i], b);
        if (rc < 0) {
            pr_err("sink %s: cannot send batch %llu: %s", pr_sink_name(ss->sinks[i]),
                   (unsigned long long)b->seq, pr_strerror(rc));
            if (!first_err)
                first_err = rc;
        }
    }
    return first_err;
}

static void pr__on_sink_ack(void *opaque, uint64_t seq)
{
    pr_sinkset *ss = opaque;
    ss_entry *e = pr__find(ss, seq);
    if (e && e->remaining > 0 && --e->remaining == 0)
        ss->n_done++;
}

int pr_sinkset_poll(pr_sinkset *ss, pr_sink_ack_cb cb, void *opaque)
{
    int first_err = 0;
    for (size_t i = 0; i < ss->n; i++) {
        ss_queue *q = &ss->retry[i];
        while (q->len) {
            pr_batch *b = q->q[q->head];
            int rc = pr_sink_send(ss->sinks[i], b);
            if (rc == PR_EAGAIN)
                break;
            if (rc < 0 && !first_err)
                first_err = rc;
            q->head = (q->head + 1) % q->cap;
            q->len--;
            pr_batch_unref(b);
        }
        int rc = pr_sink_poll(ss->sinks[i], pr__on_sink_ack, ss);
        if (rc < 0 && !first_err)
            first_err = rc;
    }
    if (ss->n == 0) /* no sink: everything counts as delivered */
        for (size_t i = 0; i < ss->n_pend; i++)
            if (ss->pend[i].remaining == 0)
                ss->n_done++;
    int acked = 0;
    if (ss->n_done) {
        size_t j = 0;
        for (size_t i = 0; i < ss->n_pend; i++) {
            ss_entry e = ss->pend[i];
            if (e.remaining == 0) {
                if (cb)
                    cb(opaque, e.seq);
                pr_batch_unref(e.b);
                acked++;
            } else {
                ss->pend[j++] = e;
            }
        }
        ss->n_pend = j;
        ss->n_done = 0;
    }
    return first_err < 0 ? first_err : acked;
}

bool pr_sinkset_ready(pr_sinkset *ss)
{
    if (ss->n == 0)
        return false;
    for (size_t i = 0; i < ss->n; i++)
        if (!pr_sink_ready(ss->sinks[i]))
            return false;
    return true;
}

uint64_t pr_sinkset_buffered_bytes(pr_sinkset *ss)
{
    uint64_t t = 0;
    for (size_t i = 0; ss && i < ss->n; i++)
        t += pr_sink_buffered_bytes(ss->sinks[i]);
    return t;
}

void pr_sinkset_free(pr_sinkset *ss)
{
    if (!ss)
        return;
    for (size_t i = 0; i < ss->n; i++) {
        ss_queue *q = &ss->retry[i];
        for (size_t k = 0; k < q->len; k++)
            pr_batch_unref(q->q[(q->head + k) % q->cap]);
        free(q->q);
        pr_sink_free(ss->sinks[i]);
    }
    for (size_t i = 0; i < ss->n_pend; i++)
        pr_batch_unref(ss->pend[i].b);
    free(ss->pend);
    free(ss->retry);
    free(ss->sinks);
    free(ss);
}
