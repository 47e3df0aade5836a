/*
 * consumer.c — pr_consumer: one librdkafka high-level consumer per pipeline,
 * decoding messages straight into the caller's pr_block.
 *
 * Shape (see pr_ingest.h for the contract):
 *   - rd_kafka_consumer_poll only; a message that does not fit the block's
 *     remaining rows is kept as `pending` and goes first next time, so a poll
 *     never loses or reorders one;
 *   - with decode threads (decode_par.h) a poll collects messages while
 *     helpers decode them aside, then merges them in poll order (rows,
 *     rejects, consumed offset, as the serial decode does per message); what
 *     does not fit waits in `backlog`, undecoded, ahead of the next polls;
 *   - the librdkafka client comes from the builder (pr_kafka.h, role
 *     PR_KAFKA_GROUP_CONSUMER), which holds its forced properties;
 *   - offsets: enable.auto.offset.store=false (the service stores offset + 1
 *     of acknowledged rows), enable.auto.commit=true commits what was stored,
 *     pr_consumer_commit() commits synchronously on revoke and shutdown;
 *   - cooperative-sticky rebalancing: the rebalance callback tells the owner
 *     (on_revoke BEFORE committing and unassigning), then does the incremental
 *     (or eager) assignment change, and keeps pause state for new partitions;
 *   - a partition table (one entry per topic-partition ever assigned, never
 *     removed, so indexes stay valid) holds consumed/stored/committed offsets;
 *     it and the topic table are guarded by `lock` for readers on other
 *     threads (metrics); counters are relaxed atomics.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decode_par.h"
#include "poll_threads.h"
#include "pr_env.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "reaper.h"

/* The client's properties (enable.auto.offset.store=false, cooperative-sticky,
 * session.timeout.ms 6 s, queued.min.messages ...) are pr_kafka.h's group
 * consumer role: kafka/kafka.c lists them with the reasons. */

#define PR__ADD(field, n) __atomic_add_fetch(&(field), (n), __ATOMIC_RELAXED)
#define PR__LOAD(field)   __atomic_load_n(&(field), __ATOMIC_RELAXED)

/* The `opaque` of a restart entry (pr_consumer.restart) whose start is
 * decided by pr__start_fresh: no committed offset, auto.offset.reset latest. */
static char pr__fresh_mark, pr__start_mark;
#define PR__FRESH ((void *)&pr__fresh_mark)
/* ... and of one pr__start_fresh resolved to the log end: its offset is
 * committed once it is assigned there (pr__commit_starts). */
#define PR__START ((void *)&pr__start_mark)

typedef struct pr__part {
    int tidx;
    int32_t partition;
    int32_t key;
    bool assigned;
    uint8_t inst;          /* the instance (rks[]) that holds it */
    int64_t consumed_next; /* offset after the last message handed out completely */
    int64_t stored;        /* last next-offset stored */
    int64_t committed;     /* last next-offset committed */
    uint64_t resets;       /* offset out of range -> jumped (on_offset_reset) */
    /* The offset after the last message taken from librdkafka (polled; it
     * may still wait in pending, the backlog or the pool), and a trailing
     * stretch [gap_from, gap_to) that holds no record for us, seen at the
     * partition's end: consumed_next goes to gap_to once the message before
     * gap_from is handed out (pr__partition_end). Consumer thread only. */
    int64_t taken_next, gap_from, gap_to;
} pr__part;

/* The message being decoded, for the reject callback. */
typedef struct pr__cur {
    const char *topic;
    int32_t partition;
    int32_t key;
    int64_t offset;
    int nrec;
    const void *mkey; /* the message's Kafka key, for its dead letters */
    size_t mkey_len;
} pr__cur;

struct pr_consumer {
    rd_kafka_t *rk; /* the first instance (rks[0]) */
    /* source.consumers: this many members of the group in one process, each
     * its own librdkafka client (fetchers, queue), polled in turn by the one
     * polling thread; a partition is served by the instance that holds it
     * (pr__part.inst). Everything else (partition table, dead letters,
     * stats, callbacks) is shared, so the owner sees one consumer. */
    rd_kafka_t *rks[PR_CONSUMER_MAX_INSTANCES];
    unsigned n_rk, next_rk;
    /* With several instances each is polled by a thread of its own
     * (poll_threads.h); the pipeline thread reads their rings. `held`: data
     * messages taken from the rings during a decode wait, in order, served
     * before the rings (the wait cannot stop the rings, and an event may sit
     * behind them). */
    pr__pt *pt;
    /* With polling threads: consumed messages the polling threads decoded
     * are destroyed by a reaper thread (reaper.h), flushed before close;
     * NULL: destroyed where consumed. */
    pr__reaper *reaper;
    /* The message pr__next gave last and what its polling thread found
     * (pr__pt_prep), used once by the collect or the decode that follows
     * (pr__msg_facts); NULL when it came another way. pre_e: the ring's
     * entry, taken straight into here (pre_e.f: the facts; a copy of them
     * per message was ~6% of the pipeline thread, issue 21). */
    const rd_kafka_message_t *pre_m;
    pr__pt_entry pre_e;
    /* Rings taken in spans (pr__collect_ring; PIPEREC_RING_SPANS, read
     * once), the messages so taken and the spans: logged at close. */
    bool ring_spans;
    uint64_t span_msgs, spans;
    /* Per instance, with polling threads and parallel decode (decode_par.h):
     * the runs its polling thread decodes its messages into (decode_par.h),
     * set once by the consumer thread when the pool opens (atomic), and the
     * topic handle -> index cache of that polling thread (its own). */
    pr__druns *druns[PR_CONSUMER_MAX_INSTANCES];
    const rd_kafka_topic_t *pt_rkt[PR_CONSUMER_MAX_INSTANCES];
    int pt_tidx[PR_CONSUMER_MAX_INSTANCES];
    rd_kafka_message_t **held;
    size_t n_held, held_head, cap_held;
    bool ever[PR_CONSUMER_MAX_INSTANCES]; /* per instance: an assignment arrived */
    /* Close with several instances (pr__leave_all): a revoke runs on_revoke
     * and the commit, but its answer (the unassign) is held until every
     * instance's revoke ran: no instance leaves before all have committed.
     * close_revoked[k]: instance k's revoke ran; held_revoke[k]: its
     * answer waits; held_incr[k]: the partitions to unassign incrementally
     * (cooperative), else NULL. */
    bool hold_revokes;
    bool close_revoked[PR_CONSUMER_MAX_INSTANCES];
    bool held_revoke[PR_CONSUMER_MAX_INSTANCES];
    rd_kafka_topic_partition_list_t *held_incr[PR_CONSUMER_MAX_INSTANCES];
    pr_msg_format format;
    const pr_pipeline_spec *spec;
    pr_json_decoder *json; /* PR_MSG_JSON, _AVRO, _PROTOBUF; borrowed */
    const pr_clock *clock;
    pr_partitions_cb on_assign, on_revoke;
    pr_msg_reject_cb on_reject;
    void *opaque;
    pr_dlq *dlq;
    pr_arena *arena;

    pthread_mutex_t lock; /* topics[], parts[] (their layout and fields) */
    char **topics;
    int n_topics, cap_topics;
    pr__part *parts;
    size_t n_parts, cap_parts;
    /* parts[] by key: open addressing, -1 = empty, at most half full. A
     * poll looked up every message's partition by a scan of parts[] (the
     * last one cached), ~1.5% of the pipeline thread at 64 partitions and
     * growing with them; changed under lock by the poll thread only. */
    int32_t *pix;
    size_t pix_cap; /* a power of two, or 0 */

    /* Poll-thread state. */
    rd_kafka_message_t *pending;
    uint32_t pending_rec;
    /* Parallel decode (decode_par.h): decode_threads > 1 makes the pool at
     * the first poll (it needs the block's capacity); the backlog holds
     * messages polled but not merged (the block filled first), in order,
     * ahead of anything polled next. */
    unsigned decode_threads;
    const pr_feature_schema *features;
    const pr_source_cfg *source; /* avro, protobuf: each decoder's reader (borrowed) */
    pr__dpool *dp;
    bool dp_failed;
    bool collecting; /* the pool holds this poll's messages */
    rd_kafka_message_t **backlog;
    size_t n_backlog, backlog_head;
    /* Topic handle -> topic index, the last few (each instance has its own
     * handle for a topic, and polls alternate between instances). */
    const rd_kafka_topic_t *rkt_seen[PR_CONSUMER_MAX_INSTANCES];
    int rkt_tidx[PR_CONSUMER_MAX_INSTANCES];
    unsigned rkt_next;
    size_t last_part;
    pr__cur cur;
    bool paused;
    /* The pending message's reader answered PR_EAGAIN (e.g. the schema
     * registry is down): every assigned partition is paused, the message is
     * retried at retry_at_ns; the reason is read by other threads under lock. */
    bool waiting;
    int64_t retry_at_ns;
    char wait_why[160];
    char last_error[160]; /* the client's last error (pr__error_cb); under lock */
    bool closed;
    /* Left to process exit: closed mid-join (destroying would abort,
     * librdkafka #4312) or a close that did not finish (#4527). */
    bool leak_rk[PR_CONSUMER_MAX_INSTANCES];
    /* Per instance: partitions an offset reset restarts (offset = where),
     * waiting for the instance's queue to hold no event (pr__restart_due);
     * NULL when none. Touched by the thread polling that instance only. */
    rd_kafka_topic_partition_list_t *restart[PR_CONSUMER_MAX_INSTANCES];
    /* Per instance: start offsets whose commit failed (a rebalance in
     * progress while the group's members join), tried again from the
     * polling turns every PR__START_RETRY_MS (pr__retry_starts); NULL when
     * none. Same thread as restart[]. */
    rd_kafka_topic_partition_list_t *start_retry[PR_CONSUMER_MAX_INSTANCES];
    int64_t start_retry_at_ns[PR_CONSUMER_MAX_INSTANCES];
    unsigned start_tries[PR_CONSUMER_MAX_INSTANCES];
    pr_offset_reset on_offset_reset;
    int64_t initial_reset; /* logical offset for a partition with no committed offset */
    int session_timeout_ms;
    pr_ratelimit rl_reject, rl_err;
    pr_ratelimit rl_cb; /* librdkafka's callbacks (polling threads too); under lock */
    char *member_file;  /* see pr_consumer_conf.member_file; NULL = off */
    char *group_id;     /* for the member file */
    char *member_saved[PR_CONSUMER_MAX_INSTANCES]; /* per instance: its id in member_file */
    /* read_file (pr_consumer_conf): its lines "group\ttopic", under
     * read_lock (a file write, with an fsync, must not hold `lock`: the
     * consumer thread and metrics take it). */
    pthread_mutex_t read_lock;
    char *read_file, *read_group;
    char **read_lines;
    size_t n_read, cap_read;

    pr_consumer_stats st; /* counters as atomics; gauges computed on read */
    /* Messages and bytes polled, added to st once per pr_consumer_poll
     * (per message, two atomic adds were a visible share of the pipeline
     * thread's per-message path). Consumer thread only. */
    uint64_t acc_messages, acc_bytes;
};

/* ---------------------------------------------------------------- tables */

/* Index of topic `name`, added when new. Poll thread only (writer). */
static int pr__topic_index(pr_consumer *c, const char *name)
{
    for (int i = 0; i < c->n_topics; i++)
        if (!strcmp(c->topics[i], name))
            return i;
    char *dup = strdup(name);
    if (!dup)
        return -1;
    pthread_mutex_lock(&c->lock);
    if (c->n_topics == c->cap_topics) {
        int nc = c->cap_topics ? 2 * c->cap_topics : 4;
        char **nt = realloc(c->topics, (size_t)nc * sizeof(*nt));
        if (!nt) {
            pthread_mutex_unlock(&c->lock);
            free(dup);
            return -1;
        }
        c->topics = nt;
        c->cap_topics = nc;
    }
    c->topics[c->n_topics] = dup;
    int idx = c->n_topics++;
    pthread_mutex_unlock(&c->lock);
    if (idx > 0x7fff)
        pr_warn("consumer: more than 32768 topics; partition keys overflow");
    return idx;
}

static size_t pr__pix_slot(int32_t key, size_t cap)
{
    return (size_t)(((uint32_t)key * UINT32_C(2654435761)) >> 7) & (cap - 1);
}

static ssize_t pr__part_find(const pr_consumer *c, int32_t key)
{
    size_t last = __atomic_load_n(&c->last_part, __ATOMIC_RELAXED);
    if (last < c->n_parts && c->parts[last].key == key)
        return (ssize_t)last;
    if (!c->pix_cap)
        return -1;
    for (size_t h = pr__pix_slot(key, c->pix_cap);; h = (h + 1) & (c->pix_cap - 1)) {
        int32_t i = c->pix[h];
        if (i < 0)
            return -1;
        if (c->parts[i].key == key)
            return i;
    }
}

/* parts[i] into the index, grown to keep it at most half full. Under lock. */
static int pr__pix_add(pr_consumer *c, size_t i)
{
    if (2 * (c->n_parts + 1) > c->pix_cap) {
        size_t nc = c->pix_cap ? 2 * c->pix_cap : 64;
        int32_t *np = malloc(nc * sizeof(*np));
        if (!np)
            return PR_ENOMEM;
        memset(np, 0xff, nc * sizeof(*np));
        free(c->pix);
        c->pix = np;
        c->pix_cap = nc;
        for (size_t k = 0; k < c->n_parts; k++)
            if (k != i)
                pr__pix_add(c, k);
    }
    size_t h = pr__pix_slot(c->parts[i].key, c->pix_cap);
    while (c->pix[h] >= 0)
        h = (h + 1) & (c->pix_cap - 1);
    c->pix[h] = (int32_t)i;
    return 0;
}

/* Entry for (tidx, partition), created when new. Poll thread only. */
static ssize_t pr__part_get(pr_consumer *c, int tidx, int32_t partition)
{
    int32_t key = PR_PART_KEY(tidx, partition);
    ssize_t i = pr__part_find(c, key);
    if (i >= 0) {
        /* stored only when it moves: per message, the store dirtied a line
         * other threads' lookups read */
        if (__atomic_load_n(&c->last_part, __ATOMIC_RELAXED) != (size_t)i)
            __atomic_store_n(&c->last_part, (size_t)i, __ATOMIC_RELAXED);
        return i;
    }
    pthread_mutex_lock(&c->lock);
    if (c->n_parts == c->cap_parts) {
        size_t nc = c->cap_parts ? 2 * c->cap_parts : 16;
        pr__part *np = realloc(c->parts, nc * sizeof(*np));
        if (!np) {
            pthread_mutex_unlock(&c->lock);
            return -1;
        }
        c->parts = np;
        c->cap_parts = nc;
    }
    c->parts[c->n_parts] = (pr__part){.tidx = tidx,
                                      .partition = partition,
                                      .key = key,
                                      .consumed_next = -1,
                                      .taken_next = -1,
                                      .gap_from = -1,
                                      .gap_to = -1,
                                      .stored = -1,
                                      .committed = -1};
    if (pr__pix_add(c, c->n_parts)) {
        pthread_mutex_unlock(&c->lock);
        return -1;
    }
    i = (ssize_t)c->n_parts++;
    pthread_mutex_unlock(&c->lock);
    __atomic_store_n(&c->last_part, (size_t)i, __ATOMIC_RELAXED);
    return i;
}

/* auto.offset.reset value -> logical offset (librdkafka's names). */
static int pr__reset_from_name(const char *v, int64_t *out)
{
    if (!strcmp(v, "earliest") || !strcmp(v, "smallest") || !strcmp(v, "beginning"))
        *out = RD_KAFKA_OFFSET_BEGINNING;
    else if (!strcmp(v, "latest") || !strcmp(v, "largest") || !strcmp(v, "end"))
        *out = RD_KAFKA_OFFSET_END;
    else if (!strcmp(v, "error"))
        *out = RD_KAFKA_OFFSET_INVALID;
    else
        return PR_EINVAL;
    return 0;
}

/* ---------------------------------------------------------------- callbacks */

static void pr__log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    pr_log_level l = level <= 3   ? PR_LOG_ERROR
                     : level <= 4 ? PR_LOG_WARN
                     : level <= 6 ? PR_LOG_INFO
                                  : PR_LOG_DEBUG;
    /* A connection's FAIL is also a client error (pr__error_cb: counted,
     * rate-limited): said once there, not twice. */
    if (strcmp(fac, "FAIL") == 0)
        l = PR_LOG_DEBUG;
    pr_log(l, "librdkafka %s: %s", fac, buf);
}

/* Client-level errors (a broker down, all brokers down, ...): once
 * rd_kafka_poll_set_consumer() is on, librdkafka hands them to this callback
 * from consumer_poll(), never as a message; without it they were only logged
 * and piperec_consumer_errors_total did not show an outage (tests/fault/
 * test_fault_broker.sh). Fatal errors still come as consumer errors. */
static void pr__error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    pr_consumer *c = opaque;
    PR__ADD(c->st.kafka_errors, 1);
    pthread_mutex_lock(&c->lock);
    pr_log_ratelimited(&c->rl_cb, PR_LOG_WARN, "consumer: %s: %s",
                       rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    snprintf(c->last_error, sizeof(c->last_error), "%s: %s",
             rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    pthread_mutex_unlock(&c->lock);
}

static void pr__read_note(pr_consumer *c, const char *topic); /* the read file, below */

static void pr__commit_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t *offsets, void *opaque)
{
    (void)rk;
    pr_consumer *c = opaque;
    if (err && err != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        PR__ADD(c->st.commit_failures, 1);
        pthread_mutex_lock(&c->lock);
        pr_log_ratelimited(&c->rl_cb, PR_LOG_WARN, "consumer: commit failed: %s",
                           rd_kafka_err2str(err));
        pthread_mutex_unlock(&c->lock);
    }
    if (!offsets)
        return;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < offsets->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &offsets->elems[i];
        if (tp->err || tp->offset < 0)
            continue;
        for (int t = 0; t < c->n_topics; t++) {
            if (strcmp(c->topics[t], tp->topic))
                continue;
            ssize_t k = pr__part_find(c, PR_PART_KEY(t, tp->partition));
            if (k >= 0)
                c->parts[k].committed = tp->offset;
        }
    }
    pthread_mutex_unlock(&c->lock);
    for (int i = 0; c->read_file && i < offsets->cnt; i++)
        if (!offsets->elems[i].err && offsets->elems[i].offset >= 0)
            pr__read_note(c, offsets->elems[i].topic);
}

/* Fill `out` (n entries) from a librdkafka list; registers new partitions. */
static size_t pr__tps_from_list(pr_consumer *c, const rd_kafka_topic_partition_list_t *l,
                                pr_tp *out, bool assigned, unsigned inst)
{
    size_t n = 0;
    for (int i = 0; i < l->cnt; i++) {
        int tidx = pr__topic_index(c, l->elems[i].topic);
        if (tidx < 0)
            continue;
        ssize_t k = pr__part_get(c, tidx, l->elems[i].partition);
        if (k < 0)
            continue;
        pthread_mutex_lock(&c->lock);
        pr__part *p = &c->parts[k];
        if (assigned) {
            p->consumed_next = -1;
            p->taken_next = p->gap_from = p->gap_to = -1;
            p->stored = -1;
            p->committed = -1;
        }
        out[n] = (pr_tp){.topic = c->topics[tidx],
                         .partition = p->partition,
                         .key = p->key,
                         .offset = assigned ? -1 : p->consumed_next};
        if (assigned) {
            p->assigned = true; /* revoked ones stay assigned until unassigned */
            p->inst = (uint8_t)inst;
        }
        pthread_mutex_unlock(&c->lock);
        n++;
    }
    return n;
}

static void pr__mark_unassigned(pr_consumer *c, const pr_tp *tps, size_t n)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < n; i++) {
        ssize_t k = pr__part_find(c, tps[i].key);
        if (k >= 0)
            c->parts[k].assigned = false;
    }
    pthread_mutex_unlock(&c->lock);
}

/* ---- decoding that must wait (a reader's PR_EAGAIN) ----
 * The message stays pending and every assigned partition is paused, so that
 * nothing behind it is read (librdkafka drops what it prefetched for a paused
 * partition and fetches again from the position, the offset after the
 * pending message, on resume). The pipeline keeps polling: rebalance events
 * are served; a message that still arrives (a partition assigned meanwhile)
 * is pushed back (seek to its offset, partition paused). */

#define PR__WAIT_RETRY_NS (100 * 1000000LL)

/* Pause or resume every instance's assignment (source.consumers): for the
 * decode wait and for backpressure. Every instance is tried; the first error
 * is returned. */
static rd_kafka_resp_err_t pr__pause_assignment(pr_consumer *c, bool pause)
{
    rd_kafka_resp_err_t first = RD_KAFKA_RESP_ERR_NO_ERROR;
    for (unsigned k = 0; k < c->n_rk; k++) {
        rd_kafka_t *rk = c->rks[k];
        rd_kafka_topic_partition_list_t *l = NULL;
        rd_kafka_resp_err_t err = rd_kafka_assignment(rk, &l);
        if (!err && l->cnt)
            err = pause ? rd_kafka_pause_partitions(rk, l) : rd_kafka_resume_partitions(rk, l);
        if (l)
            rd_kafka_topic_partition_list_destroy(l);
        if (!first)
            first = err;
    }
    return first;
}

static void pr__wait_begin(pr_consumer *c, const char *why)
{
    PR__ADD(c->st.decode_waits, 1);
    c->retry_at_ns = pr_mono_ns() + PR__WAIT_RETRY_NS;
    pthread_mutex_lock(&c->lock); /* the latest reason (down, then slow, ...) */
    snprintf(c->wait_why, sizeof(c->wait_why), "%s", why && why[0] ? why : "source not ready");
    pthread_mutex_unlock(&c->lock);
    if (c->waiting)
        return;
    __atomic_store_n(&c->waiting, true, __ATOMIC_RELAXED);
    pr_warn("consumer: decoding waits (partitions paused): %s", c->wait_why);
    (void)pr__pause_assignment(c, true);
}

/* The wait is over (decoded, or the message was revoked): resume, unless
 * backpressure holds the partitions paused. */
static void pr__wait_end(pr_consumer *c)
{
    if (!c->waiting)
        return;
    __atomic_store_n(&c->waiting, false, __ATOMIC_RELAXED);
    pr_info("consumer: decoding resumed");
    if (!c->paused)
        (void)pr__pause_assignment(c, false);
}

/* A message read while waiting (from instance rk): back to where it was,
 * its partition paused. */
static void pr__push_back(rd_kafka_t *rk, rd_kafka_message_t *m)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(m->rkt), m->partition)->offset =
        m->offset;
    rd_kafka_pause_partitions(rk, l);
    rd_kafka_error_t *e = rd_kafka_seek_partitions(rk, l, 2000);
    if (e) {
        pr_warn("consumer: seek back to %s[%d]@%" PRId64 ": %s", rd_kafka_topic_name(m->rkt),
                (int)m->partition, m->offset, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_message_destroy(m);
}

/* While waiting and before the retry time: serve librdkafka's events (for up
 * to timeout_ms), read nothing. */
static void pr__wait_poll(pr_consumer *c, int timeout_ms)
{
    int64_t left = c->retry_at_ns - pr_mono_ns();
    int wait = (int)(left / 1000000);
    if (wait > timeout_ms)
        wait = timeout_ms;
    for (unsigned k = 0; k < c->n_rk; k++) { /* the first instance waits, the others are served */
        rd_kafka_t *rk = c->rks[k];
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, k == 0 && wait > 0 ? wait : 0);
        if (m && !m->err && m->rkt)
            pr__push_back(rk, m);
        else if (m)
            rd_kafka_message_destroy(m);
    }
}

static bool pr__msg_in_list(const rd_kafka_message_t *m, const rd_kafka_topic_partition_list_t *l)
{
    const char *t = rd_kafka_topic_name(m->rkt);
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].partition == m->partition && !strcmp(l->elems[i].topic, t))
            return true;
    return false;
}

/* Messages polled but not in the caller's block yet (the backlog, and what
 * a parallel poll collected before this revoke): those of the revoked
 * partitions go, unstored, as the pending message does below; the new
 * owner reads them again. Collected ones are only marked: a decode thread
 * may still read them; the merge destroys them. */
/* Destroys the messages of msgs[head, *n) in the partitions of `l`, keeping
 * the others in order. */
static void pr__drop_msgs_of(rd_kafka_message_t **msgs, size_t head, size_t *n,
                             const rd_kafka_topic_partition_list_t *l)
{
    size_t w = head;
    for (size_t i = head; i < *n; i++) {
        if (pr__msg_in_list(msgs[i], l))
            rd_kafka_message_destroy(msgs[i]);
        else
            msgs[w++] = msgs[i];
    }
    *n = w;
}

static void pr__drop_collected_of(pr_consumer *c, const rd_kafka_topic_partition_list_t *l)
{
    pr__drop_msgs_of(c->backlog, c->backlog_head, &c->n_backlog, l);
    pr__drop_msgs_of(c->held, c->held_head, &c->n_held, l);
    for (size_t i = 0; c->collecting && i < pr__dpool_count(c->dp); i++) {
        pr__dmsg *dm = pr__dpool_msg(c->dp, i);
        if (!dm->dropped && pr__msg_in_list(dm->m, l))
            dm->dropped = true;
    }
}

static void pr__drop_pending_of(pr_consumer *c, const rd_kafka_topic_partition_list_t *l)
{
    pr__drop_collected_of(c, l);
    if (!c->pending)
        return;
    const char *t = rd_kafka_topic_name(c->pending->rkt);
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].partition == c->pending->partition && !strcmp(l->elems[i].topic, t)) {
            rd_kafka_message_destroy(c->pending);
            c->pending = NULL;
            c->pending_rec = 0;
            pr__wait_end(c);
            return;
        }
}

/* ---------------------------------------------------------------- member file */

/* Under dynamic membership a SIGKILLed process leaves its members in the
 * group until their sessions expire, and the coordinator holds the next
 * rebalance for them (on librdkafka's mock, twice). So the member ids are
 * kept in a small file, a line per consumer instance ("piperec-member 1 TAB
 * group TAB member-id"), rewritten when an assignment comes with a new id
 * and removed by a clean close (which sent LeaveGroup itself). A new
 * consumer that finds the file sends each predecessor member's LeaveGroup
 * for it (pr_kafka_leave_group) before joining. (It used to keep the first
 * instance's only: with source.consumers > 1 a restart after SIGKILL waited
 * out the others' sessions.) */
#define PR__MEMBER_MAGIC    "piperec-member 1"
#define PR__MEMBER_LEAVE_MS 3000

static void pr__member_save(pr_consumer *c, unsigned inst)
{
    if (!c->member_file)
        return;
    char *mid = rd_kafka_memberid(c->rks[inst]);
    if (!mid || !*mid || (c->member_saved[inst] && !strcmp(c->member_saved[inst], mid))) {
        free(mid);
        return;
    }
    free(c->member_saved[inst]);
    c->member_saved[inst] = mid;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", c->member_file);
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    for (unsigned k = 0; ok && k < c->n_rk; k++)
        if (c->member_saved[k])
            ok = fprintf(f, "%s\t%s\t%s\n", PR__MEMBER_MAGIC, c->group_id, c->member_saved[k]) > 0;
    if (f && fclose(f))
        ok = false;
    if (ok && rename(tmp, c->member_file) == 0)
        return;
    pr_warn("consumer: cannot keep the member id in %s: %s (a restart after SIGKILL will wait "
            "out the old session)",
            c->member_file, strerror(errno));
    unlink(tmp);
    free(c->member_saved[inst]); /* tried again at the next assignment */
    c->member_saved[inst] = NULL;
}

/* ---------------------------------------------------------------- the read file
 *
 * Which topics the group committed on (pr_consumer_conf.read_file): a group
 * whose offsets on a topic are all gone (expired after the broker's
 * offsets.retention.minutes while the pipeline was down, deleted, the topic
 * recreated) looks new to the broker, and auto.offset.reset latest would
 * skip everything since. The file remembers that it is not. */
#define PR__READ_MAX_LINE 1024

/* Is the group's line for `topic` there? Under lock. */
static bool pr__read_has_locked(const pr_consumer *c, const char *topic)
{
    size_t gl = strlen(c->read_group);
    for (size_t i = 0; i < c->n_read; i++) {
        const char *l = c->read_lines[i];
        if (!strncmp(l, c->read_group, gl) && l[gl] == '\t' && !strcmp(l + gl + 1, topic))
            return true;
    }
    return false;
}

static bool pr__read_has(pr_consumer *c, const char *topic)
{
    if (!c->read_file)
        return false;
    pthread_mutex_lock(&c->read_lock);
    bool has = pr__read_has_locked(c, topic);
    pthread_mutex_unlock(&c->read_lock);
    return has;
}

/* Append `line` (taken over) to the lines; false when out of memory. */
static bool pr__read_add(pr_consumer *c, char *line)
{
    if (c->n_read == c->cap_read) {
        size_t nc = c->cap_read ? 2 * c->cap_read : 8;
        char **nl = realloc(c->read_lines, nc * sizeof(*nl));
        if (!nl) {
            free(line);
            return false;
        }
        c->read_lines = nl;
        c->cap_read = nc;
    }
    c->read_lines[c->n_read++] = line;
    return true;
}

/* The group committed on `topic`: its line goes into the file the first
 * time (a temporary, fsync'd, renamed). A failure warns, and the line is
 * tried again at the next commit; until then an expiry of this topic's
 * offsets goes unnoticed, as without the file. */
static void pr__read_note(pr_consumer *c, const char *topic)
{
    if (!c->read_file)
        return;
    pthread_mutex_lock(&c->read_lock);
    size_t gl = strlen(c->read_group), tl = strlen(topic);
    if (pr__read_has_locked(c, topic) || gl + tl + 2 > PR__READ_MAX_LINE) {
        pthread_mutex_unlock(&c->read_lock); /* a name too long for a line: not kept */
        return;
    }
    char *line = malloc(gl + tl + 2);
    if (line) {
        memcpy(line, c->read_group, gl);
        line[gl] = '\t';
        memcpy(line + gl + 1, topic, tl + 1);
    }
    bool ok = line && pr__read_add(c, line);
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", c->read_file);
    FILE *f = ok ? fopen(tmp, "w") : NULL;
    bool written = f != NULL;
    for (size_t i = 0; written && i < c->n_read; i++)
        written = fprintf(f, "%s\n", c->read_lines[i]) > 0;
    written = written && fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f))
        written = false;
    written = written && rename(tmp, c->read_file) == 0;
    if (!written) {
        int e = errno;
        if (ok) /* tried again at the next commit */
            free(c->read_lines[--c->n_read]);
        pr_warn("consumer: cannot note in %s that group %s read %s: %s (should its offsets "
                "expire, the topic would start at auto.offset.reset as if new)",
                c->read_file, c->read_group, topic, ok ? strerror(e) : "out of memory");
        unlink(tmp);
    }
    pthread_mutex_unlock(&c->read_lock);
}

/* Read the file's lines (an absent file: none yet). */
static int pr__read_load(pr_consumer *c, const pr_consumer_conf *conf, char *errstr,
                         size_t errstr_size)
{
    if (!conf->read_file || !*conf->read_file || !conf->group_id)
        return 0;
    c->read_file = strdup(conf->read_file);
    c->read_group = strdup(conf->group_id);
    if (!c->read_file || !c->read_group)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
    FILE *f = fopen(c->read_file, "r");
    if (!f)
        return errno == ENOENT ? 0
                               : pr_seterr(errstr, errstr_size, PR_EIO, "consumer: %s: %s",
                                           c->read_file, strerror(errno));
    char buf[PR__READ_MAX_LINE];
    int rc = 0;
    while (!rc && fgets(buf, sizeof(buf), f)) {
        buf[strcspn(buf, "\r\n")] = '\0';
        if (!strchr(buf, '\t'))
            continue; /* not a line of ours */
        char *line = strdup(buf);
        if (!line || !pr__read_add(c, line))
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
    }
    fclose(f);
    return rc;
}

static void pr__member_forget(pr_consumer *c)
{
    if (c->member_file && unlink(c->member_file) && errno != ENOENT)
        pr_warn("consumer: cannot remove %s: %s", c->member_file, strerror(errno));
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++) {
        free(c->member_saved[k]);
        c->member_saved[k] = NULL;
    }
}

/* One predecessor member (a line of the member file): ask the coordinator to
 * drop it. Never fatal: the worst case is the old wait. */
static void pr__member_leave_one(pr_consumer *c, const pr_consumer_conf *conf, const char *mid)
{
    char es[512];
    bool was = false;
    int64_t t0 = pr_clock_mono_ns(pr_clock_real());
    int rc = pr_kafka_leave_group(conf->props, conf->n_props, c->group_id, mid, PR__MEMBER_LEAVE_MS,
                                  &was, es, sizeof(es));
    int ms = (int)((pr_clock_mono_ns(pr_clock_real()) - t0) / 1000000);
    if (rc)
        pr_warn("consumer: the previous process (member %s of group %s) did not leave the group, "
                "and asking its coordinator to drop it failed: %s; its partitions come back when "
                "its session expires (session.timeout.ms %d)",
                mid, c->group_id, es, c->session_timeout_ms);
    else if (was)
        pr_info("consumer: the previous process did not leave group %s; its member %s was "
                "dropped on its behalf (%d ms), so the group rebalances now",
                c->group_id, mid, ms);
    else
        pr_info("consumer: the previous process's member %s is no longer in group %s", mid,
                c->group_id);
    PR__ADD(c->st.stale_members[rc ? PR_STALE_FAILED : was ? PR_STALE_DROPPED : PR_STALE_GONE], 1);
}

/* The predecessor's members, when its file is there: each line's member is
 * dropped (pr__member_leave_one); then the file goes. */
static void pr__member_leave_old(pr_consumer *c, const pr_consumer_conf *conf)
{
    FILE *f = fopen(c->member_file, "r");
    if (!f)
        return;
    char line[2048];
    unsigned n = 0;
    bool ours = true;
    while (n < PR_CONSUMER_MAX_INSTANCES && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *grp = strchr(line, '\t'), *mid = grp ? strchr(grp + 1, '\t') : NULL;
        if (!grp || !mid || strncmp(line, PR__MEMBER_MAGIC, strlen(PR__MEMBER_MAGIC))) {
            pr_warn("consumer: %s: not a member file; ignored", c->member_file);
            ours = n > 0; /* a file not ours is left alone */
            break;
        }
        *grp++ = 0;
        *mid++ = 0;
        if (strcmp(grp, c->group_id)) {
            pr_info("consumer: %s names group '%s', not '%s'; ignored", c->member_file, grp,
                    c->group_id);
            break;
        }
        pr__member_leave_one(c, conf, mid);
        n++;
    }
    fclose(f);
    if (ours)
        unlink(c->member_file);
}

static int pr__commit_one(pr_consumer *c, rd_kafka_t *rk, char *errstr, size_t errstr_size);

/* Which of c's instances rk is. */
static unsigned pr__inst_of(const pr_consumer *c, const rd_kafka_t *rk)
{
    for (unsigned k = 0; k < c->n_rk; k++)
        if (c->rks[k] == rk)
            return k;
    return 0;
}

/* Does rk's assignment hold any partition of `parts`? */
static bool pr__holds_any(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *parts)
{
    rd_kafka_topic_partition_list_t *held = NULL;
    bool any = false;
    if (rd_kafka_assignment(rk, &held) == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = 0; i < parts->cnt && !any; i++)
            any = rd_kafka_topic_partition_list_find(held, parts->elems[i].topic,
                                                     parts->elems[i].partition) != NULL;
    if (held)
        rd_kafka_topic_partition_list_destroy(held);
    return any;
}

/* Stale events: librdkafka 2.0.2 takes any assign/unassign call made while
 * a rebalance event waits for the application as that event's answer (see
 * pr__restart_due). In rd_kafka_consumer_close, an ASSIGN event still queued
 * is turned into an unassign that answers the close's revoke, which then
 * reaches this callback stale, possibly after the group terminated:
 *   - a revoke whose partitions are no longer held commits and unassigns
 *     nothing (the commit raced the termination: "rd_kafka_cgrp_terminated:
 *     assert: !rd_kafka_assignment_in_progress");
 *   - once terminated, rd_kafka_rebalance_protocol() is NULL (strcmp on it
 *     was the segfault): the owner still hears of a revoke; nothing is
 *     assigned, unassigned or committed.
 * A rebalance event of instance inst, on the consumer's (pipeline) thread:
 * the owner's callbacks, the commit on revoke, the assignment change. */
static void pr__rebalance(pr_consumer *c, rd_kafka_t *rk, unsigned inst, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t *parts)
{
    const char *proto = rd_kafka_rebalance_protocol(rk);
    bool gone = proto == NULL;
    bool coop = !gone && !strcmp(proto, "COOPERATIVE");
    rd_kafka_error_t *e = NULL;
    rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
    pr_tp *tps = parts->cnt ? calloc((size_t)parts->cnt, sizeof(*tps)) : NULL;
    size_t n = 0;
    PR__ADD(c->st.rebalances, 1);

    switch (err) {
    case RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS:
        if (gone) {
            pr_info("consumer: %d partition(s) assigned after the group ended; ignored",
                    parts->cnt);
            break;
        }
        c->ever[inst] = true;
        pr__member_save(c, inst);
        if (tps)
            n = pr__tps_from_list(c, parts, tps, true, inst);
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            kerr = rd_kafka_assign(rk, parts);
        /* Paused for backpressure, or a decode wait (nothing behind the
         * waiting message is read; the wait's end resumes them). */
        if ((c->paused || c->waiting) && parts->cnt)
            rd_kafka_pause_partitions(rk, parts);
        pr_info("consumer: assigned %d partition(s)%s", parts->cnt, c->paused ? " (paused)" : "");
        if (c->on_assign && n)
            c->on_assign(c->opaque, c, tps, n);
        break;

    case RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS:
        pr__drop_pending_of(c, parts);
        for (int i = 0; c->restart[inst] && i < parts->cnt; i++) /* not ours to restart now */
            rd_kafka_topic_partition_list_del(c->restart[inst], parts->elems[i].topic,
                                              parts->elems[i].partition);
        if (tps)
            n = pr__tps_from_list(c, parts, tps, false, inst);
        /* The owner drops/stores first, then the stored offsets are
         * committed while the partitions are still ours. */
        if (c->on_revoke && n)
            c->on_revoke(c->opaque, c, tps, n);
        /* Not held: answered already (stale); nothing to commit or unassign
         * (a commit raced the group's end, an unassign could wait forever
         * on a group that ended meanwhile). */
        bool held = !gone && pr__holds_any(rk, parts);
        if (!held) {
            pr_info("consumer: revoke of %d partition(s) no longer held; nothing to commit",
                    parts->cnt);
        } else if (!rd_kafka_assignment_lost(rk)) {
            char es[256];
            if (pr__commit_one(c, rk, es, sizeof(es)))
                pr_warn("consumer: commit on revoke: %s", es);
        } else {
            pr_warn("consumer: %d partition(s) lost; offsets not committed", parts->cnt);
        }
        c->close_revoked[inst] = c->close_revoked[inst] || c->hold_revokes;
        if (held && c->hold_revokes) { /* answered by pr__answer_revokes */
            c->held_revoke[inst] = true;
            if (coop && !c->held_incr[inst])
                c->held_incr[inst] = rd_kafka_topic_partition_list_copy(parts);
            else if (coop) /* a second revoke before the answer: both go */
                for (int i = 0; i < parts->cnt; i++)
                    if (!rd_kafka_topic_partition_list_find(
                            c->held_incr[inst], parts->elems[i].topic, parts->elems[i].partition))
                        rd_kafka_topic_partition_list_add(c->held_incr[inst], parts->elems[i].topic,
                                                          parts->elems[i].partition);
        } else if (held && coop) {
            e = rd_kafka_incremental_unassign(rk, parts);
        } else if (held) {
            kerr = rd_kafka_assign(rk, NULL);
        }
        pr__mark_unassigned(c, tps, n);
        pr_info("consumer: revoked %d partition(s)", parts->cnt);
        break;

    default:
        pr_warn("consumer: rebalance error: %s", rd_kafka_err2str(err));
        if (!gone)
            kerr = rd_kafka_assign(rk, NULL);
        break;
    }
    if (e) {
        pr_err("consumer: %s", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    } else if (kerr) {
        pr_err("consumer: assign: %s", rd_kafka_err2str(kerr));
    }
    free(tps);
}

/* librdkafka's rebalance callback. On an instance's polling thread the event
 * goes to the consumer's thread, in order behind the messages polled before
 * it, and this thread waits until it was handled (poll_threads.h); else
 * (one instance, or polls by the closing thread) it is handled here. */
static void pr__rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                             rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    pr_consumer *c = opaque;
    unsigned inst = pr__inst_of(c, rk);
    if (pr__pt_on_poller(c->pt, inst))
        pr__pt_handoff(c->pt, inst, err, parts);
    else
        pr__rebalance(c, rk, inst, err, parts);
}

/* The decoders' reject callback: count, log, tell the owner, dead-letter
 * (a filtered or sampled-out record: count only). */
static void pr__on_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                          int64_t recno)
{
    pr_consumer *c = opaque;
    if (pr_decode_dropped(reason)) { /* dropped on purpose: counted, nothing else */
        if (reason == PR_DEC_FILTERED)
            PR__ADD(c->st.filtered, 1);
        else
            PR__ADD(c->st.sampled_out, 1);
        return;
    }
    if (reason < 0 || reason >= PR_DEC__COUNT)
        reason = 0;
    PR__ADD(c->st.rejects[reason], 1);
    PR__ADD(c->st.rejected_records, 1);
    pr_log_ratelimited(&c->rl_reject, PR_LOG_WARN,
                       "%s [%" PRId32 "] offset %" PRId64 " record %" PRId64 ": %s: %s",
                       c->cur.topic, c->cur.partition, c->cur.offset, recno,
                       pr_decode_reason_name(reason), detail);
    if (c->on_reject) {
        pr_reject_info ri = {.reason = reason,
                             .detail = detail,
                             .topic = c->cur.topic,
                             .partition = c->cur.partition,
                             .key = c->cur.key,
                             .offset = c->cur.offset,
                             .record_index = recno,
                             .rec = rec,
                             .len = len};
        c->on_reject(c->opaque, c, &ri);
    }
    if (c->dlq)
        pr_dlq_send_keyed(c->dlq, c->cur.key, c->cur.mkey, c->cur.mkey_len, rec, len,
                          pr_decode_reason_name(reason), detail, c->cur.topic, c->cur.partition,
                          c->cur.offset, c->cur.nrec > 1 ? recno : -1);
}

/* ---------------------------------------------------------------- lifecycle */

/* The librdkafka configuration of c's client (pr_kafka.h's group consumer
 * role) from conf's properties; *have_instance: the user set
 * group.instance.id. NULL and a reason on failure. */
static rd_kafka_conf_t *pr__client_conf(pr_consumer *c, const pr_consumer_conf *conf,
                                        const char *instance_id, bool *have_instance, char *errstr,
                                        size_t errstr_size)
{
    /* auto.offset.reset is kept here for partitions with no committed offset;
     * librdkafka itself gets "error" (pr_kafka.h's group consumer role) so
     * that every reset passes through pr__offset_reset. */
    for (size_t i = 0; i < conf->n_props; i++)
        if (!strcmp(conf->props[i].key, "auto.offset.reset") &&
            pr__reset_from_name(conf->props[i].value, &c->initial_reset)) {
            pr_seterr(errstr, errstr_size, PR_EINVAL,
                      "consumer: property auto.offset.reset: unknown value '%s'",
                      conf->props[i].value);
            return NULL;
        }
    pr_kv_list user = {(pr_kv *)conf->props, conf->n_props};
    *have_instance = pr_kv_get(&user, "group.instance.id") != NULL;
    pr_kv instance = {"group.instance.id", instance_id};
    bool static_member = !*have_instance && instance_id && *instance_id;
    pr_kv group = {"group.id", conf->group_id};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_GROUP_CONSUMER,
                               .props = conf->props,
                               .n_props = conf->n_props,
                               .defaults = &instance,
                               .n_defaults = static_member ? 1 : 0,
                               .set = &group,
                               .n_set = 1,
                               .opaque = c,
                               .log_cb = pr__log_cb,
                               .error_cb = pr__error_cb,
                               .rebalance_cb = pr__rebalance_cb,
                               .offset_commit_cb = pr__commit_cb};
    rd_kafka_conf_t *kc = NULL;
    if (pr_kafka_conf_new(&cc, &kc, errstr, errstr_size))
        return NULL;
    if (static_member)
        pr_info("consumer: static group membership as '%s'", instance_id);
    /* The session the builder settled on (piperec's default or the user's):
     * it bounds how long a close waits for a first assignment. */
    char sess[32];
    size_t sess_size = sizeof(sess);
    if (rd_kafka_conf_get(kc, "session.timeout.ms", sess, &sess_size) == RD_KAFKA_CONF_OK)
        c->session_timeout_ms = atoi(sess);
    return kc;
}

/* Subscribe `topics` on rk. */
static int pr__subscribe(rd_kafka_t *rk, const pr_consumer_conf *conf, char *errstr,
                         size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new((int)conf->n_topics);
    for (size_t i = 0; i < conf->n_topics; i++)
        rd_kafka_topic_partition_list_add(sub, conf->topics[i], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: subscribe: %s",
                         rd_kafka_err2str(err));
    return 0;
}

/* Instance k (> 0) of source.consumers: another member of the group, with
 * the same properties (a static member's id gets "-k"). */
static int pr__instance_open(pr_consumer *c, const pr_consumer_conf *conf, unsigned k, char *errstr,
                             size_t errstr_size)
{
    char id[300] = "", kerr[512];
    if (conf->group_instance_id && *conf->group_instance_id)
        snprintf(id, sizeof(id), "%s-%u", conf->group_instance_id, k);
    bool have_instance;
    rd_kafka_conf_t *kc = pr__client_conf(c, conf, id, &have_instance, errstr, errstr_size);
    if (!kc)
        return PR_EINVAL;
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, kerr, sizeof(kerr));
    if (!rk) {
        rd_kafka_conf_destroy(kc);
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: %s", kerr);
    }
    rd_kafka_poll_set_consumer(rk);
    c->rks[c->n_rk++] = rk;
    return pr__subscribe(rk, conf, errstr, errstr_size);
}

/* What pr_consumer_new needs from its caller, checked before anything is made. */
static int pr__conf_check(const pr_consumer_conf *conf, char *errstr, size_t errstr_size)
{
    if (!conf || !conf->spec || !conf->n_topics || !conf->group_id || !*conf->group_id)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "consumer: needs a spec, at least one topic and a group.id");
    if ((unsigned)conf->format >= PR_MSG__COUNT)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "consumer: unknown format %d",
                         conf->format);
    if ((conf->format == PR_MSG_JSON || conf->format == PR_MSG_AVRO ||
         conf->format == PR_MSG_PROTOBUF) &&
        !conf->json)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "consumer: format %s needs a JSON decoder (a declared schema)",
                         pr_msg_format_name(conf->format));
    return 0;
}

/* Several instances get a polling thread each (poll_threads.h) unless
 * PIPEREC_POLL_THREADS=0: the switch the benches use to measure the one
 * polling thread beside it; it changes no output. */
static bool pr__poll_threads_wanted(void)
{
    return pr_env_switch("PIPEREC_POLL_THREADS", true);
}

/* With polling threads, each decodes its own instance's messages into runs
 * (every format of the decode table, with decode threads) unless
 * PIPEREC_POLL_DECODE=0: the old
 * path, where the pipeline thread's pool decodes them, kept as the bench's
 * baseline; it changes no output. */
static bool pr__poll_decode_wanted(void)
{
    return pr_env_switch("PIPEREC_POLL_DECODE", true);
}

/* With polling threads, a poll takes the messages waiting in a ring in
 * spans, in place (pr__collect_ring), unless PIPEREC_RING_SPANS=0: one
 * pr__next per message, as before (for comparisons; it changes no output). */
static bool pr__ring_spans_wanted(void)
{
    return pr_env_switch("PIPEREC_RING_SPANS", true);
}

/* PIPEREC_REAPER=0 destroys consumed messages on the pipeline thread, as
 * before the reaper (for comparisons). */
static bool pr__reaper_wanted(void)
{
    return pr_env_switch("PIPEREC_REAPER", true);
}

static int pr__pt_prep(void *opaque, unsigned inst, const rd_kafka_message_t *m, pr__pt_entry *e);
static void pr__pt_seal(void *opaque, unsigned inst);

/* Dead letters: the topic (those it cannot take to the file), else the
 * file alone, else none (rejects counted and logged only). */
static int pr__dlq_open(pr_consumer *c, const pr_consumer_conf *conf, char *errstr,
                        size_t errstr_size)
{
    if (conf->dead_letter_topic && *conf->dead_letter_topic) {
        c->dlq =
            pr_dlq_new(conf->dead_letter_topic, conf->props, conf->n_props, errstr, errstr_size);
        if (!c->dlq)
            return PR_EINVAL;
        if (pr_dlq_set_file(c->dlq, conf->dead_letter_file, conf->dead_letter_file_max_bytes))
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
    } else if (conf->dead_letter_file && *conf->dead_letter_file) {
        c->dlq = pr_dlq_new_file(conf->dead_letter_file, conf->dead_letter_file_max_bytes, errstr,
                                 errstr_size);
        if (!c->dlq)
            return PR_EINVAL;
    }
    return 0;
}

pr_consumer *pr_consumer_new(const pr_consumer_conf *conf, char *errstr, size_t errstr_size)
{
    char kerr[512];
    if (pr__conf_check(conf, errstr, errstr_size))
        return NULL;
    pr_consumer *c = calloc(1, sizeof(*c));
    if (!c) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->read_lock, NULL);
    c->format = conf->format;
    c->spec = conf->spec;
    c->json = conf->json;
    c->clock = conf->clock ? conf->clock : pr_clock_real();
    c->on_assign = conf->on_assign;
    c->on_revoke = conf->on_revoke;
    c->on_reject = conf->on_reject;
    c->opaque = conf->opaque;
    c->on_offset_reset = conf->on_offset_reset;
    c->decode_threads = conf->decode_threads;
    c->features = conf->features;
    c->source = conf->source;
    c->initial_reset = RD_KAFKA_OFFSET_END; /* librdkafka's default: latest */
    c->rl_reject = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    c->rl_err = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    c->rl_cb = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    c->arena = pr_arena_new(64 * 1024);
    if (!c->arena) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
        goto out_free;
    }
    /* Known topics get indexes in config order, so keys are predictable. */
    for (size_t i = 0; i < conf->n_topics; i++)
        if (conf->topics[i][0] != '^' && pr__topic_index(c, conf->topics[i]) < 0) {
            pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
            goto out_free;
        }

    bool have_instance;
    rd_kafka_conf_t *kc =
        pr__client_conf(c, conf, conf->group_instance_id, &have_instance, errstr, errstr_size);
    if (!kc)
        goto out_free;
    if (have_instance && conf->consumers > 1) {
        pr_seterr(errstr, errstr_size, PR_EINVAL,
                  "consumer: %u consumers need one group.instance.id each: set "
                  "group_instance_id (each instance gets -1, -2, ... after it), not the "
                  "group.instance.id property",
                  conf->consumers);
        goto out_conf;
    }

    if (pr__dlq_open(c, conf, errstr, errstr_size) || pr__read_load(c, conf, errstr, errstr_size))
        goto out_conf;

    /* The member file: a line per instance (pr__member_save). */
    bool dynamic = !have_instance && !(conf->group_instance_id && *conf->group_instance_id);
    if (dynamic && conf->member_file && *conf->member_file) {
        c->member_file = strdup(conf->member_file);
        c->group_id = strdup(conf->group_id);
        if (!c->member_file || !c->group_id) {
            pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
            goto out_conf;
        }
        pr__member_leave_old(c, conf);
    }

    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, kerr, sizeof(kerr));
    if (!c->rk) {
        pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: %s", kerr);
        goto out_conf;
    }
    kc = NULL; /* owned by rk now */
    rd_kafka_poll_set_consumer(c->rk);
    c->rks[0] = c->rk;
    c->n_rk = 1;
    if (pr__subscribe(c->rk, conf, errstr, errstr_size))
        goto out_rk;
    for (unsigned k = 1; k < conf->consumers && k < PR_CONSUMER_MAX_INSTANCES; k++)
        if (pr__instance_open(c, conf, k, errstr, errstr_size))
            goto out_rk;
    if (c->n_rk > 1 && pr__poll_threads_wanted()) {
        c->pt = pr__pt_start(c->rks, c->n_rk, pr__pt_prep, pr__pt_seal, c, errstr, errstr_size);
        if (!c->pt)
            goto out_rk;
        pr_info("consumer: %u instances, each polled by its own thread", c->n_rk);
        c->ring_spans = pr__ring_spans_wanted();
        if (pr__reaper_wanted())
            c->reaper = pr__reaper_start(); /* NULL: destroyed where consumed */
    }
    return c;

out_conf:
    if (kc)
        rd_kafka_conf_destroy(kc);
out_rk:
    if (c->rk) {
        c->closed = true; /* never joined */
        for (unsigned k = 0; k < c->n_rk; k++)
            rd_kafka_destroy(c->rks[k]);
        c->rk = NULL;
        c->n_rk = 0;
    }
out_free:
    pr_consumer_free(c);
    return NULL;
}

static void pr__held_clear(pr_consumer *c);
static void pr__pt_serve(void *opaque, const pr__pt_entry *e);

/* Unmerged messages are not handed out: their offsets stay unstored. */
static void pr__backlog_clear(pr_consumer *c)
{
    for (size_t i = c->backlog_head; i < c->n_backlog; i++)
        rd_kafka_message_destroy(c->backlog[i]);
    c->n_backlog = c->backlog_head = 0;
}

/* librdkafka 2.0.2 (fixed in 2.3.0, #4312/#4381): once a JoinGroup answer
 * picked cooperative-sticky, destroying the handle before the first
 * assignment (SyncGroup) arrived aborts in
 * rd_kafka_sticky_assignor_state_destroy ("Assertion 'assignor_state'
 * failed"). That is exactly a SIGTERM during the first join, e.g. while a
 * second member joins. So a consumer that has a member id but never saw an
 * assignment keeps serving its rebalance callback (the assignment is taken
 * and, on close, revoked again) for up to 2 session timeouts; should that
 * not be enough, the handle is not destroyed (left to process exit). */
static void pr__finish_join(pr_consumer *c, unsigned k)
{
    rd_kafka_t *rk = c->rks[k];
    if (c->ever[k])
        return;
    char *mid = rd_kafka_memberid(rk);
    bool joined = mid && *mid;
    free(mid); /* rd_kafka_memberid strdups; rd_kafka_mem_free is free here */
    if (!joined)
        return; /* no JoinGroup answer yet: no assignor chosen, destroy is safe */
    const pr_clock *rt = pr_clock_real();
    int64_t deadline = pr_clock_mono_ns(rt) + 2LL * c->session_timeout_ms * 1000000;
    pr_info("consumer: closing mid-join; waiting for the assignment first (up to %d ms)",
            2 * c->session_timeout_ms);
    while (!c->ever[k] && pr_clock_mono_ns(rt) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (m)
            rd_kafka_message_destroy(m); /* not handed out: its offset stays unstored */
    }
    if (!c->ever[k]) {
        c->leak_rk[k] = true;
        pr_warn("consumer: no assignment arrived while closing; the librdkafka handle is left "
                "to process exit (destroying it would abort: librdkafka #4312)");
    }
}

/* Polls every instance once, up to `ms` each: their rebalance callbacks are
 * served; messages are not handed out (their offsets stay unstored, the next
 * owner reads them again). */
static void pr__serve_all(pr_consumer *c, int ms)
{
    for (unsigned k = 0; k < c->n_rk; k++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rks[k], ms);
        if (m)
            rd_kafka_message_destroy(m);
    }
}

/* Does rk hold no partition? */
static bool pr__holds_none(rd_kafka_t *rk)
{
    rd_kafka_topic_partition_list_t *l = NULL;
    bool empty = rd_kafka_assignment(rk, &l) == RD_KAFKA_RESP_ERR_NO_ERROR && l->cnt == 0;
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    return empty;
}

/* Has rk left its group: nothing assigned and no member id (a leave clears
 * it)? */
static bool pr__has_left(rd_kafka_t *rk)
{
    char *mid = rd_kafka_memberid(rk);
    bool gone = !mid || !*mid;
    free(mid); /* rd_kafka_memberid strdups; rd_kafka_mem_free is free here */
    return gone && pr__holds_none(rk);
}

/* Answers every revoke pr__rebalance held (pr_consumer.hold_revokes): each
 * instance unassigns, and librdkafka sends its LeaveGroup after that. */
static void pr__answer_revokes(pr_consumer *c)
{
    c->hold_revokes = false;
    for (unsigned k = 0; k < c->n_rk; k++) {
        if (!c->held_revoke[k])
            continue;
        c->held_revoke[k] = false;
        rd_kafka_error_t *e = NULL;
        rd_kafka_resp_err_t kerr = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (c->held_incr[k]) {
            e = rd_kafka_incremental_unassign(c->rks[k], c->held_incr[k]);
            rd_kafka_topic_partition_list_destroy(c->held_incr[k]);
            c->held_incr[k] = NULL;
        } else {
            kerr = rd_kafka_assign(c->rks[k], NULL);
        }
        if (e) {
            pr_err("consumer: instance %u: unassign: %s", k, rd_kafka_error_string(e));
            rd_kafka_error_destroy(e);
        } else if (kerr) {
            pr_err("consumer: instance %u: unassign: %s", k, rd_kafka_err2str(kerr));
        }
    }
}

/* Every instance leaves the group and closes, together, in bounded time.
 *
 * Commits first, leaves after. A commit on revoke that meets a rebalancing
 * group can be refused, and what the owner stored in on_revoke would be read
 * again. So the instances that hold partitions unsubscribe, and their
 * revokes (on_revoke, then the commit) run while no member of this process
 * has left: each revoke's answer, the unassign that lets librdkafka send the
 * LeaveGroup, is held (pr_consumer.hold_revokes) until every such instance
 * revoked. An instance assigned partitions meanwhile (a rebalance under way
 * when the close began) unsubscribes too. Then all revokes are answered and
 * the instances holding nothing unsubscribe: one rebalance for the whole
 * process. The instances used to leave one after another, each waiting until
 * the others had taken its partitions over: one rebalance per instance, ~5 s
 * each on the test broker (issue 21).
 *
 * librdkafka 2.0.2 (#4527, fixed in 2.4) hangs rd_kafka_consumer_close for
 * good when an assign event is served once the group is terminating: the
 * assign becomes an unassign and the group waits for an assign call that
 * never comes. So an instance closes only once it holds nothing and has
 * left, with nothing left to revoke. Each wait is bounded by the session
 * timeout; a close that still does not finish leaves its handle to process
 * exit (warned: a stop must never hang; what was committed on revoke stays,
 * the rest is read again: at least once). */
static rd_kafka_resp_err_t pr__leave_all(pr_consumer *c)
{
    const pr_clock *rt = pr_clock_real();
    int64_t wait_ns = (int64_t)c->session_timeout_ms * 1000000;
    int64_t t0 = pr_clock_mono_ns(rt), deadline = t0 + wait_ns;
    bool unsub[PR_CONSUMER_MAX_INSTANCES] = {0};
    c->hold_revokes = true;
    for (;;) { /* 1: the holders revoke and commit; nobody leaves yet */
        bool all = true;
        for (unsigned k = 0; k < c->n_rk; k++) {
            if (!unsub[k] && !pr__holds_none(c->rks[k])) {
                rd_kafka_resp_err_t e = rd_kafka_unsubscribe(c->rks[k]);
                if (e)
                    pr_warn("consumer: instance %u: unsubscribe: %s", k, rd_kafka_err2str(e));
                unsub[k] = true;
            }
            all = all && (!unsub[k] || c->close_revoked[k] || pr__has_left(c->rks[k]));
        }
        if (all || pr_clock_mono_ns(rt) >= deadline)
            break;
        pr__serve_all(c, 5);
    }
    int64_t t_rev = pr_clock_mono_ns(rt);
    pr__answer_revokes(c); /* 2: now they all leave */
    for (unsigned k = 0; k < c->n_rk; k++) {
        if (unsub[k])
            continue;
        rd_kafka_resp_err_t e = rd_kafka_unsubscribe(c->rks[k]);
        if (e)
            pr_warn("consumer: instance %u: unsubscribe: %s", k, rd_kafka_err2str(e));
    }
    for (;;) {
        bool all = true;
        for (unsigned k = 0; k < c->n_rk && all; k++)
            all = pr__has_left(c->rks[k]);
        if (all || pr_clock_mono_ns(rt) >= deadline)
            break;
        pr__serve_all(c, 5);
        pr__answer_revokes(c); /* a revoke served late: answered at once */
    }
    for (unsigned k = 0; k < c->n_rk; k++)
        if (!pr__has_left(c->rks[k]))
            pr_warn("consumer: instance %u has not left the group %d ms after unsubscribing; "
                    "closing it anyway",
                    k, c->session_timeout_ms);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    rd_kafka_queue_t *q[PR_CONSUMER_MAX_INSTANCES] = {0};
    for (unsigned k = 0; k < c->n_rk; k++) { /* 3: close, all at once */
        q[k] = rd_kafka_queue_new(c->rks[k]);
        rd_kafka_error_t *e = rd_kafka_consumer_close_queue(c->rks[k], q[k]);
        if (e) {
            if (!err)
                err = rd_kafka_error_code(e);
            rd_kafka_error_destroy(e);
            rd_kafka_queue_destroy(q[k]);
            q[k] = NULL;
        }
    }
    int64_t t1 = pr_clock_mono_ns(rt);
    deadline = t1 + wait_ns;
    for (;;) {
        bool all = true;
        for (unsigned k = 0; k < c->n_rk; k++)
            if (q[k] && !rd_kafka_consumer_closed(c->rks[k])) {
                all = false;
                rd_kafka_queue_poll_callback(q[k], 5);
            }
        if (all || pr_clock_mono_ns(rt) >= deadline)
            break;
    }
    for (unsigned k = 0; k < c->n_rk; k++) {
        if (!q[k])
            continue;
        if (!rd_kafka_consumer_closed(c->rks[k])) {
            c->leak_rk[k] = true; /* its group still points at q: keep both */
            pr_warn("consumer: instance %u did not finish closing in %d ms (librdkafka #4527); "
                    "its handle is left to process exit",
                    k, c->session_timeout_ms);
            continue;
        }
        rd_kafka_queue_poll_callback(q[k], 0); /* the close's own reply */
        rd_kafka_queue_destroy(q[k]);
    }
    pr_info("consumer: %u instance(s) revoked and committed in %d ms, left the group in %d ms, "
            "closed in %d ms",
            c->n_rk, (int)((t_rev - t0) / 1000000), (int)((t1 - t_rev) / 1000000),
            (int)((pr_clock_mono_ns(rt) - t1) / 1000000));
    return err;
}

/* Stops the reaper once every message handed to it is destroyed. */
static void pr__reaper_close(pr_consumer *c)
{
    if (!c->reaper)
        return;
    unsigned long long n = pr__reaper_stop(c->reaper);
    c->reaper = NULL;
    if (n)
        pr_info("consumer: %llu consumed message(s) destroyed on the pipeline thread (the reaper "
                "was behind)",
                n);
}

static void pr__log_suppressed(pr_consumer *c, bool now);

/* At close, one line: the records rejected over the consumer's life, by
 * reason, and where their dead letters went. */
static void pr__log_rejects(pr_consumer *c)
{
    uint64_t total = PR__LOAD(c->st.rejected_records);
    if (!total)
        return;
    char by[512];
    size_t n = 0;
    by[0] = 0;
    for (int i = 0; i < PR_DEC__COUNT && n < sizeof(by); i++) {
        uint64_t v = PR__LOAD(c->st.rejects[i]);
        if (v)
            n += (size_t)snprintf(by + n, sizeof(by) - n, "%s%s %llu", n ? ", " : "",
                                  pr_decode_reason_name(i), (unsigned long long)v);
    }
    pr_dlq_stats ds;
    pr_dlq_get_stats(c->dlq, &ds);
    pr_warn("consumer: %llu record(s) rejected (%s); dead letters: %llu to the topic, %llu to "
            "the file%s",
            (unsigned long long)total, by, (unsigned long long)ds.sent,
            (unsigned long long)ds.to_file,
            c->dlq ? "" : " (no dead-letter topic nor file: counted and logged only)");
}

int pr_consumer_close(pr_consumer *c, char *errstr, size_t errstr_size)
{
    if (!c || c->closed || !c->rk)
        return 0;
    pr__reaper_close(c); /* every consumed message destroyed before anything leaves */
    if (c->pt) {         /* from here on this thread polls the instances itself */
        if (c->spans)
            pr_info("consumer: %llu message(s) taken from the polling threads' rings in %llu "
                    "span(s)",
                    (unsigned long long)c->span_msgs, (unsigned long long)c->spans);
        pr__pt_stop(c->pt, pr__pt_serve, c);
        pr__pt_free(c->pt);
        c->pt = NULL;
        pr__held_clear(c);
    }
    for (unsigned k = 0; k < c->n_rk; k++)
        pr__finish_join(c, k);
    c->closed = true;
    rd_kafka_resp_err_t err = pr__leave_all(c);
    if (c->pending) {
        rd_kafka_message_destroy(c->pending);
        c->pending = NULL;
    }
    pr__backlog_clear(c);
    pr__log_suppressed(c, true);
    pr__log_rejects(c);
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer close: %s",
                         rd_kafka_err2str(err));
    bool left = true;
    for (unsigned k = 0; k < c->n_rk; k++)
        left = left && !c->leak_rk[k];
    if (left) /* else the next start asks the coordinator to drop the member */
        pr__member_forget(c);
    return 0;
}

void pr_consumer_free(pr_consumer *c)
{
    if (!c)
        return;
    if (c->rk) { /* the close stops the reaper first */
        char es[256];
        if (pr_consumer_close(c, es, sizeof(es)))
            pr_warn("%s", es);
        for (unsigned k = 0; k < c->n_rk; k++)
            if (!c->leak_rk[k])
                rd_kafka_destroy(c->rks[k]);
    }
    if (c->pending)
        rd_kafka_message_destroy(c->pending);
    pr__backlog_clear(c);
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++) {
        if (c->restart[k])
            rd_kafka_topic_partition_list_destroy(c->restart[k]);
        if (c->start_retry[k])
            rd_kafka_topic_partition_list_destroy(c->start_retry[k]);
    }
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++)
        if (c->held_incr[k]) /* a close that failed before answering */
            rd_kafka_topic_partition_list_destroy(c->held_incr[k]);
    free(c->backlog);
    pr__held_clear(c);
    free(c->held);
    pr__dpool_free(c->dp);
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++)
        pr__druns_free(c->druns[k]); /* the polling threads are gone */
    pr_dlq_free(c->dlq);
    pr_arena_free(c->arena);
    for (int i = 0; i < c->n_topics; i++)
        free(c->topics[i]);
    free(c->topics);
    free(c->parts);
    free(c->pix);
    free(c->member_file);
    for (size_t i = 0; i < c->n_read; i++)
        free(c->read_lines[i]);
    free(c->read_lines);
    free(c->read_file);
    free(c->read_group);
    free(c->group_id);
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++)
        free(c->member_saved[k]);
    pthread_mutex_destroy(&c->lock);
    pthread_mutex_destroy(&c->read_lock);
    free(c);
}

/* ---------------------------------------------------------------- poll */

/* A partition jumped (on_offset_reset): counted for it and in all
 * (piperec_offset_resets_total). */
static void pr__count_reset(pr_consumer *c, const char *topic, int32_t partition)
{
    int tidx = pr__topic_index(c, topic);
    ssize_t k = tidx >= 0 ? pr__part_get(c, tidx, partition) : -1; /* locks itself */
    if (k >= 0) {
        pthread_mutex_lock(&c->lock);
        c->parts[k].resets++;
        pthread_mutex_unlock(&c->lock);
    }
    PR__ADD(c->st.offset_resets, 1);
}

/* librdkafka runs with auto.offset.reset=error, so a partition whose position
 * is not in the log stops with RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET (m->offset
 * = the offset it could not fetch, or INVALID when the group has none) and its
 * fetcher idles. Here the policy decides: a group with no committed offset
 * starts where auto.offset.reset says (not counted: nothing is skipped;
 * latest is resolved with the group's other offsets, pr__start_fresh); an
 * out-of-range offset is logged and counted, then either fails the pipeline
 * (on_offset_reset: fail) or restarts the partition at the log start or end.
 * The restart is an incremental unassign + assign at that offset (a seek is
 * refused in the fetcher's stopped state), left to pr__restart_due: not
 * while a rebalance event may be queued. Returns 0 or PR_EKAFKA (errstr). */
static int pr__offset_reset(pr_consumer *c, rd_kafka_t *rk, const rd_kafka_message_t *m,
                            char *errstr, size_t errstr_size)
{
    const char *topic = rd_kafka_topic_name(m->rkt);
    int32_t part = m->partition;
    int64_t lo = -1, hi = -1, target;
    bool no_commit = m->offset < 0;
    bool fresh = false;
    /* Only an out-of-range reset needs the log's bounds (a blocking query). */
    rd_kafka_resp_err_t qerr =
        no_commit ? RD_KAFKA_RESP_ERR_NO_ERROR
                  : rd_kafka_query_watermark_offsets(rk, topic, part, &lo, &hi, 5000);
    if (no_commit) {
        if (c->initial_reset == RD_KAFKA_OFFSET_INVALID)
            return pr_seterr(errstr, errstr_size, PR_EKAFKA,
                             "consumer: %s [%" PRId32 "]: no committed offset and "
                             "auto.offset.reset=error",
                             topic, part);
        target = c->initial_reset;
        /* latest: decided with the group's other offsets (pr__start_fresh) */
        fresh = target == RD_KAFKA_OFFSET_END;
        if (!fresh)
            pr_info("consumer: %s [%" PRId32 "]: no committed offset for this group; starting "
                    "at the log start (auto.offset.reset)",
                    topic, part);
    } else {
        char avail[96];
        if (qerr)
            snprintf(avail, sizeof(avail), "unknown (%s)", rd_kafka_err2str(qerr));
        else
            snprintf(avail, sizeof(avail), "%" PRId64 "..%" PRId64, lo, hi);
        if (c->on_offset_reset == PR_OFFSET_RESET_FAIL)
            return pr_seterr(errstr, errstr_size, PR_EKAFKA,
                             "consumer: %s [%" PRId32 "]: offset %" PRId64
                             " is out of range (available offsets %s): the records were deleted "
                             "(retention) or the topic was recreated; refusing to jump "
                             "(source.kafka.on_offset_reset: fail). Set it to earliest or latest, "
                             "or move the group's offset, to go on",
                             topic, part, m->offset, avail);
        bool earliest = c->on_offset_reset == PR_OFFSET_RESET_EARLIEST;
        target = earliest ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_END;
        pr_warn("consumer: %s [%" PRId32 "]: offset %" PRId64 " is out of range (available "
                "offsets %s); resetting to the %s (source.kafka.on_offset_reset: %s)%s",
                topic, part, m->offset, avail, earliest ? "log start" : "log end",
                pr_offset_reset_names[c->on_offset_reset],
                !qerr && earliest && m->offset < lo ? ": records in between were never read" : "");
        pr__count_reset(c, topic, part);
    }
    unsigned inst = pr__inst_of(c, rk);
    if (!c->restart[inst])
        c->restart[inst] = rd_kafka_topic_partition_list_new(4);
    rd_kafka_topic_partition_t *tp =
        rd_kafka_topic_partition_list_find(c->restart[inst], topic, part);
    if (!tp)
        tp = rd_kafka_topic_partition_list_add(c->restart[inst], topic, part);
    tp->offset = target;
    tp->opaque = fresh ? PR__FRESH : NULL;
    return 0;
}

/* The metadata of a start offset piperec committed (pr__commit_starts).
 * Such an offset says where a fresh partition began, not that anything was
 * read: a group whose commits on a topic are all starts is at its birth. */
#define PR__START_META "piperec-start"

/* What the group committed on a topic (pr__group_view). */
typedef enum pr__seen {
    PR__SEEN_NONE = 0, /* nothing */
    PR__SEEN_STARTS,   /* only piperec's start offsets: the group is being born */
    PR__SEEN_PROGRESS, /* offsets past records it read */
} pr__seen;

/* Per PR__FRESH entry of l, what the group committed on every partition of
 * its topic. 0, or -1 when the topic metadata or the offsets could not be
 * read (said in a warning). */
static int pr__group_view(rd_kafka_t *rk, const rd_kafka_topic_partition_list_t *l, pr__seen *seen)
{
    rd_kafka_topic_partition_list_t *q = rd_kafka_topic_partition_list_new(16);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
    const char *what = "committed offsets", *topic = NULL;
    for (int i = 0; i < l->cnt && !err; i++) {
        topic = l->elems[i].topic;
        if (l->elems[i].opaque != PR__FRESH || rd_kafka_topic_partition_list_find(q, topic, 0))
            continue;
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
        const struct rd_kafka_metadata *md = NULL;
        err = rkt ? rd_kafka_metadata(rk, 0, rkt, &md, 5000) : rd_kafka_last_error();
        if (!err && (md->topic_cnt != 1 || md->topics[0].err))
            err = md->topic_cnt == 1 ? md->topics[0].err : RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC;
        for (int p = 0; !err && p < md->topics[0].partition_cnt; p++)
            rd_kafka_topic_partition_list_add(q, topic, md->topics[0].partitions[p].id);
        if (md)
            rd_kafka_metadata_destroy(md);
        if (rkt)
            rd_kafka_topic_destroy(rkt);
        what = err ? "topic metadata" : what;
    }
    if (!err)
        err = rd_kafka_committed(rk, q, 5000);
    const size_t ml = strlen(PR__START_META);
    for (int i = 0; i < l->cnt && !err; i++) {
        seen[i] = PR__SEEN_NONE;
        for (int k = 0; k < q->cnt && l->elems[i].opaque == PR__FRESH; k++) {
            const rd_kafka_topic_partition_t *x = &q->elems[k];
            if (strcmp(x->topic, l->elems[i].topic) || x->offset < 0)
                continue;
            bool start = x->metadata_size == ml && !memcmp(x->metadata, PR__START_META, ml);
            pr__seen v = start ? PR__SEEN_STARTS : PR__SEEN_PROGRESS;
            seen[i] = v > seen[i] ? v : seen[i];
        }
    }
    if (err)
        pr_warn("consumer: %s: the group's %s could not be read (%s) for partitions with no "
                "committed offset",
                topic, what, rd_kafka_err2str(err));
    rd_kafka_topic_partition_list_destroy(q);
    return err ? -1 : 0;
}

/* A fresh partition of a topic the group committed on before (the read
 * file) and holds no offset on now: its offsets expired after
 * offsets.retention.minutes while the pipeline was down, were deleted, or
 * the topic was recreated (why: that, or that the group's offsets could not
 * be read). Latest would skip everything since as if the group were new, so
 * on_offset_reset decides, as for an offset out of range: fail (PR_EKAFKA),
 * the log start, or the end (*end set); counted. */
static int pr__start_expired(pr_consumer *c, rd_kafka_topic_partition_t *e, const char *why,
                             bool *end, char *errstr, size_t errstr_size)
{
    if (c->on_offset_reset == PR_OFFSET_RESET_FAIL)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA,
                         "consumer: %s [%" PRId32 "]: group %s has no committed offset on %s, "
                         "but it committed there before (%s): %s; refusing to start at the log "
                         "end as if new (source.kafka.on_offset_reset: fail). Set it to "
                         "earliest or latest, or commit the group's offsets, to go on",
                         e->topic, e->partition, c->read_group, e->topic, c->read_file, why);
    *end = c->on_offset_reset == PR_OFFSET_RESET_LATEST;
    pr_warn("consumer: %s [%" PRId32 "]: group %s has no committed offset on %s, but it "
            "committed there before (%s): %s; starting at the log %s "
            "(source.kafka.on_offset_reset: %s)",
            e->topic, e->partition, c->read_group, e->topic, c->read_file, why,
            *end ? "end" : "start", pr_offset_reset_names[c->on_offset_reset]);
    if (!*end)
        e->offset = RD_KAFKA_OFFSET_BEGINNING;
    pr__count_reset(c, e->topic, e->partition);
    return 0;
}

/* The log end of the partitions in `ends` (ListOffsets by timestamp -1, one
 * request), written into their entries of l, marked PR__START (committed
 * once assigned there); an end that could not be read stays the logical
 * end, uncommitted, as before. */
static void pr__resolve_ends(rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l,
                             rd_kafka_topic_partition_list_t *ends)
{
    rd_kafka_resp_err_t err = ends->cnt ? rd_kafka_offsets_for_times(rk, ends, 5000) : 0;
    for (int i = 0; i < ends->cnt && !err; i++) {
        rd_kafka_topic_partition_t *x = &ends->elems[i];
        rd_kafka_topic_partition_t *e =
            rd_kafka_topic_partition_list_find(l, x->topic, x->partition);
        if (x->err || x->offset < 0 || !e)
            continue;
        e->offset = x->offset;
        e->opaque = PR__START;
        pr_info("consumer: %s [%" PRId32 "]: starting at the log end, offset %" PRId64
                ", committed at once",
                x->topic, x->partition, x->offset);
    }
    if (err)
        pr_warn("consumer: %s [%" PRId32 "]: no committed offset; the log end could not be read "
                "(%s): starting at the log end, not committed",
                ends->elems[0].topic, ends->elems[0].partition, rd_kafka_err2str(err));
}

/* The start of each partition pr__offset_reset marked PR__FRESH (no
 * committed offset, auto.offset.reset latest), by what the group committed
 * on its topic:
 *   - offsets past records it read (on other partitions): the group reads
 *     the topic already, so the partition is new to it (added to the topic,
 *     seen up to a metadata refresh later). Latest would skip what was
 *     written to it before now; it starts at its log start instead;
 *   - only piperec's start offsets: the group is being born (another
 *     instance or replica resolved its partitions first), so this one starts
 *     at the log end like them;
 *   - nothing, for a topic the read file lists: pr__start_expired;
 *   - nothing: a new group, at the log end.
 * A log end is resolved to an offset and committed once the partition is
 * assigned there (pr__commit_starts): a restart, or another replica after a
 * rebalance, resumes at that offset rather than at a later end (the records
 * in between were lost before). When the group's offsets cannot be read, a
 * topic the read file lists goes to pr__start_expired, any other starts at
 * the logical end, uncommitted. 0, or PR_EKAFKA (errstr). */
static int pr__start_fresh(pr_consumer *c, rd_kafka_t *rk, rd_kafka_topic_partition_list_t *l,
                           char *errstr, size_t errstr_size)
{
    pr__seen *seen = calloc((size_t)l->cnt + 1, sizeof(*seen));
    int view = seen ? pr__group_view(rk, l, seen) : -1;
    rd_kafka_topic_partition_list_t *ends = rd_kafka_topic_partition_list_new(l->cnt);
    int rc = 0;
    for (int i = 0; i < l->cnt; i++) {
        rd_kafka_topic_partition_t *e = &l->elems[i];
        bool fresh = e->opaque == PR__FRESH, end = true;
        if (!fresh || rc)
            continue;
        e->opaque = NULL;
        if (view < 0) {
            if (pr__read_has(c, e->topic))
                rc = pr__start_expired(c, e, "the group's offsets could not be read", &end, errstr,
                                       errstr_size);
            continue; /* the logical end, uncommitted */
        }
        if (seen[i] == PR__SEEN_PROGRESS) {
            e->offset = RD_KAFKA_OFFSET_BEGINNING;
            end = false;
            pr_info("consumer: %s [%" PRId32 "]: no committed offset, but the group has "
                    "committed on other partitions of %s: the partition is new to it; starting at "
                    "its log start so that none of its records is skipped",
                    e->topic, e->partition, e->topic);
        } else if (seen[i] == PR__SEEN_NONE && pr__read_has(c, e->topic)) {
            rc = pr__start_expired(c, e,
                                   "its offsets expired (offsets.retention.minutes), were "
                                   "deleted, or the topic was recreated",
                                   &end, errstr, errstr_size);
        } else {
            pr_info("consumer: %s [%" PRId32 "]: no committed offset for this group "
                    "(auto.offset.reset latest)%s",
                    e->topic, e->partition,
                    seen[i] == PR__SEEN_STARTS ? "; the group is starting on it" : "");
        }
        if (end && !rc) /* ListOffsets by timestamp -1: the end */
            rd_kafka_topic_partition_list_add(ends, e->topic, e->partition)->offset = -1;
    }
    free(seen);
    if (!rc)
        pr__resolve_ends(rk, l, ends);
    rd_kafka_topic_partition_list_destroy(ends);
    return rc;
}

/* Add a start offset to l, with PR__START_META (freed with the list). */
static void pr__start_add(rd_kafka_topic_partition_list_t *l, const char *topic, int32_t partition,
                          int64_t offset)
{
    rd_kafka_topic_partition_t *a = rd_kafka_topic_partition_list_add(l, topic, partition);
    a->offset = offset;
    a->metadata = strdup(PR__START_META);
    a->metadata_size = a->metadata ? strlen(PR__START_META) : 0;
}

#define PR__START_RETRY_MS  500
#define PR__START_RETRY_MAX 120 /* a minute of tries */

/* Commit `starts` (offsets with PR__START_META) synchronously; each one
 * committed is noted (committed offset, the read file), each one that
 * failed goes (back) into start_retry[inst] to be tried again. */
static void pr__commit_start_list(pr_consumer *c, rd_kafka_t *rk, unsigned inst,
                                  rd_kafka_topic_partition_list_t *starts)
{
    rd_kafka_resp_err_t err = starts->cnt ? rd_kafka_commit(rk, starts, 0) : 0;
    for (int i = 0; i < starts->cnt; i++) {
        rd_kafka_topic_partition_t *a = &starts->elems[i];
        rd_kafka_resp_err_t e = err ? err : a->err;
        if (e) {
            if (!c->start_retry[inst])
                c->start_retry[inst] = rd_kafka_topic_partition_list_new(starts->cnt);
            pr__start_add(c->start_retry[inst], a->topic, a->partition, a->offset);
            if (!c->start_tries[inst])
                pr_info("consumer: %s [%" PRId32 "]: committing its start (offset %" PRId64
                        "): %s; tried again",
                        a->topic, a->partition, a->offset, rd_kafka_err2str(e));
            continue;
        }
        int tidx = pr__topic_index(c, a->topic);
        pthread_mutex_lock(&c->lock);
        ssize_t k = tidx < 0 ? -1 : pr__part_find(c, PR_PART_KEY(tidx, a->partition));
        if (k >= 0 && c->parts[k].committed < a->offset)
            c->parts[k].committed = a->offset;
        pthread_mutex_unlock(&c->lock);
        pr__read_note(c, a->topic);
    }
}

/* Commit the starts pr__resolve_ends marked in l (with PR__START_META:
 * they must not count as reading), synchronously: a crash right after
 * must not lose them. One that fails (a rebalance in progress while the
 * members join) is tried again (pr__retry_starts). */
static void pr__commit_starts(pr_consumer *c, rd_kafka_t *rk, unsigned inst,
                              const rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_topic_partition_list_t *starts = rd_kafka_topic_partition_list_new(l->cnt);
    for (int i = 0; i < l->cnt; i++)
        if (l->elems[i].opaque == PR__START)
            pr__start_add(starts, l->elems[i].topic, l->elems[i].partition, l->elems[i].offset);
    pr__commit_start_list(c, rk, inst, starts);
    rd_kafka_topic_partition_list_destroy(starts);
}

/* The starts whose commit failed, again, every PR__START_RETRY_MS: those
 * of partitions still assigned to the instance and not stored past (a
 * commit of what was read replaces them); given up after
 * PR__START_RETRY_MAX tries, with the warning of what that costs. */
static void pr__retry_starts(pr_consumer *c, rd_kafka_t *rk, unsigned inst)
{
    rd_kafka_topic_partition_list_t *l = c->start_retry[inst];
    int64_t now = pr_mono_ns();
    if (!l || now < c->start_retry_at_ns[inst])
        return;
    c->start_retry[inst] = NULL;
    rd_kafka_topic_partition_list_t *held = NULL;
    if (rd_kafka_assignment(rk, &held) != RD_KAFKA_RESP_ERR_NO_ERROR)
        held = NULL;
    for (int i = l->cnt - 1; i >= 0; i--) {
        const rd_kafka_topic_partition_t *a = &l->elems[i];
        int tidx = pr__topic_index(c, a->topic);
        pthread_mutex_lock(&c->lock);
        ssize_t k = tidx < 0 ? -1 : pr__part_find(c, PR_PART_KEY(tidx, a->partition));
        bool moved = k >= 0 && (c->parts[k].stored >= 0 || c->parts[k].committed >= a->offset);
        pthread_mutex_unlock(&c->lock);
        if (moved || !held || !rd_kafka_topic_partition_list_find(held, a->topic, a->partition))
            rd_kafka_topic_partition_list_del_by_idx(l, i);
    }
    if (held)
        rd_kafka_topic_partition_list_destroy(held);
    if (++c->start_tries[inst] > PR__START_RETRY_MAX) {
        for (int i = 0; i < l->cnt; i++)
            pr_warn("consumer: %s [%" PRId32 "]: its start (offset %" PRId64
                    ") could not be committed; a restart before its first commit starts at the "
                    "log end again",
                    l->elems[i].topic, l->elems[i].partition, l->elems[i].offset);
        l->cnt = 0;
    }
    if (l->cnt)
        pr__commit_start_list(c, rk, inst, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (c->start_retry[inst])
        c->start_retry_at_ns[inst] = now + PR__START_RETRY_MS * 1000000LL;
    else
        c->start_tries[inst] = 0;
}

/* The restarts pr__offset_reset decided for instance `inst` (rk), done only
 * once rk's queue is empty: then every rebalance event librdkafka posted has
 * been served by pr__rebalance_cb (the rebalance op is posted together with
 * the group's switch to waiting for the application, on librdkafka's main
 * thread). librdkafka 2.0.2 takes ANY incremental_assign/unassign call made
 * while it waits for the application's answer to a rebalance event as that
 * answer (rd_kafka_cgrp_incremental_(un)assign: WAIT_ASSIGN_CALL -> STEADY,
 * WAIT_UNASSIGN_CALL -> WAIT_INCR_UNASSIGN_TO_COMPLETE, fetchers resumed).
 * The restart's unassign + assign, made while a revoke or assign event was
 * still queued behind the reset's error, thus answered it: the group went
 * on (rejoined, or terminated in a close) and the real event, now stale,
 * reached the rebalance callback later; its commit on revoke during a close
 * then raced the group's termination ("rd_kafka_cgrp_terminated: assert:
 * !rd_kafka_assignment_in_progress"), and the group's view of our partitions
 * was wrong meanwhile (tests/ingest/ingest_kafka_loaded.sh found both).
 * A partition revoked meanwhile was dropped from the list by the callback;
 * one no longer assigned is skipped. Returns 0 or PR_EKAFKA (errstr). */
static int pr__restart_due(pr_consumer *c, rd_kafka_t *rk, unsigned inst, char *errstr,
                           size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *l = c->restart[inst];
    if (!l)
        return 0;
    rd_kafka_queue_t *q = rd_kafka_queue_get_consumer(rk);
    size_t queued = q ? rd_kafka_queue_length(q) : 0;
    if (q)
        rd_kafka_queue_destroy(q);
    if (queued)
        return 0; /* serve what is queued first (the next turns poll it) */
    /* With polling threads, also what the instance's ring holds and a
     * rebalance event its thread is handing over (pr__pt_quiet). */
    if (c->pt && !pr__pt_quiet(c->pt, inst))
        return 0;
    bool fresh = false;
    for (int i = 0; i < l->cnt && !fresh; i++)
        fresh = l->elems[i].opaque == PR__FRESH;
    if (fresh) { /* round trips: events may queue meanwhile, so assign at a later turn */
        int rc = pr__start_fresh(c, rk, l, errstr, errstr_size);
        if (rc) {
            c->restart[inst] = NULL;
            rd_kafka_topic_partition_list_destroy(l);
        }
        return rc;
    }
    c->restart[inst] = NULL;
    /* Unassigned and assigned again below: what librdkafka stored for them
     * is gone, so nothing counts as stored (pr_consumer_store_offset_key). */
    for (int i = 0; i < l->cnt; i++) {
        int tidx = pr__topic_index(c, l->elems[i].topic);
        pthread_mutex_lock(&c->lock);
        ssize_t k = tidx < 0 ? -1 : pr__part_find(c, PR_PART_KEY(tidx, l->elems[i].partition));
        if (k >= 0) /* and a gap seen in the log before (it may be another log now) */
            c->parts[k].stored = c->parts[k].gap_from = c->parts[k].gap_to = -1;
        pthread_mutex_unlock(&c->lock);
    }
    rd_kafka_topic_partition_list_t *held = NULL;
    if (rd_kafka_assignment(rk, &held) == RD_KAFKA_RESP_ERR_NO_ERROR)
        for (int i = l->cnt - 1; i >= 0; i--)
            if (!rd_kafka_topic_partition_list_find(held, l->elems[i].topic, l->elems[i].partition))
                rd_kafka_topic_partition_list_del_by_idx(l, i);
    if (held)
        rd_kafka_topic_partition_list_destroy(held);
    int rc = 0;
    rd_kafka_error_t *e = NULL;
    if (l->cnt) {
        rd_kafka_topic_partition_list_t *at = rd_kafka_topic_partition_list_copy(l);
        e = rd_kafka_incremental_unassign(rk, l);
        if (!e)
            e = rd_kafka_incremental_assign(rk, at);
        if (!e && (c->paused || c->waiting))
            rd_kafka_pause_partitions(rk, at);
        rd_kafka_topic_partition_list_destroy(at);
    }
    if (e) {
        rc = pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: %s [%" PRId32 "]: reset: %s",
                       l->elems[0].topic, l->elems[0].partition, rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    } else {
        pr__commit_starts(c, rk, inst, l);
    }
    rd_kafka_topic_partition_list_destroy(l);
    return rc;
}

/* On a polling thread (poll_threads.h's prep): a message's facts, read
 * beside the consumer thread. Reads only m and c->format (set before the
 * threads start); the record count uses no arena. */
static void pr__pt_prep_facts(const pr_consumer *c, const rd_kafka_message_t *m, pr__pt_entry *e)
{
    rd_kafka_timestamp_type_t tst;
    e->f = (pr__pt_facts){
        .nrec = m->len ? pr_message_record_count(c->format, m->payload, m->len, NULL) : 0,
        .partition = m->partition,
        .ts = rd_kafka_message_timestamp(m, &tst),
        .offset = m->offset,
        .len = m->len,
        .rkt = m->rkt};
}

/* On instance inst's polling thread: the topic index of handle rkt (its own
 * cache; the table is read under the lock), -1 when not known yet. */
static int pr__pt_topic(pr_consumer *c, unsigned inst, const rd_kafka_topic_t *rkt)
{
    if (rkt && c->pt_rkt[inst] == rkt)
        return c->pt_tidx[inst];
    const char *name = rkt ? rd_kafka_topic_name(rkt) : NULL;
    int tidx = -1;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; name && i < c->n_topics; i++)
        if (!strcmp(c->topics[i], name)) {
            tidx = i;
            break;
        }
    pthread_mutex_unlock(&c->lock);
    if (tidx >= 0) {
        c->pt_rkt[inst] = rkt;
        c->pt_tidx[inst] = tidx;
    }
    return tidx;
}

/* pr__pt_prep_fn: on the polling thread, beside the consumer thread. Reads
 * m, c->format (set before the threads start) and the topic table under the
 * lock; the record count uses no arena. A message with its own timestamp
 * (the default event time does not then depend on the poll's clock) is
 * decoded into the instance's runs once the pool is open. */
static int pr__pt_prep(void *opaque, unsigned inst, const rd_kafka_message_t *m, pr__pt_entry *e)
{
    pr_consumer *c = opaque;
    pr__pt_prep_facts(c, m, e);
    pr__druns *d = __atomic_load_n(&c->druns[inst], __ATOMIC_ACQUIRE);
    if (!d || e->f.nrec <= 0 || e->f.ts <= 0)
        return PR__PT_NOW;
    int tidx = pr__pt_topic(c, inst, m->rkt);
    if (tidx < 0)
        return PR__PT_NOW;
    int rc = pr__druns_decode(d, m, e->f.nrec, PR_PART_KEY(tidx, m->partition), e->f.ts, &e->f.dec);
    return rc == 1 ? PR__PT_RUN : rc == PR_EAGAIN ? PR__PT_BUSY : PR__PT_NOW;
}

/* pr__pt_seal_fn: the open run's messages go into the ring now. */
static void pr__pt_seal(void *opaque, unsigned inst)
{
    pr_consumer *c = opaque;
    pr__druns *d = __atomic_load_n(&c->druns[inst], __ATOMIC_ACQUIRE);
    if (d)
        pr__druns_seal(d);
}

/* m's facts (record count, timestamp, ...): what its polling thread found
 * when m is the message pr__next just gave (valid until the next pr__next),
 * else read here into *local. Once per message: the facts are forgotten
 * after (an address can come again). Their dec.run is NULL. */
static const pr__pt_facts *pr__msg_facts(pr_consumer *c, const rd_kafka_message_t *m,
                                         pr__pt_facts *local)
{
    const pr__pt_facts *f = local;
    if (m == c->pre_m && c->pre_e.f.nrec >= 0) {
        pr__ddec_release(&c->pre_e.f.dec); /* not taken (pr__collect takes it first) */
        f = &c->pre_e.f;
    } else {
        rd_kafka_timestamp_type_t tst;
        *local = (pr__pt_facts){
            .nrec = m->len ? pr_message_record_count(c->format, m->payload, m->len, c->arena) : 0,
            .partition = m->partition,
            .ts = rd_kafka_message_timestamp(m, &tst),
            .offset = m->offset,
            .len = m->len,
            .rkt = m->rkt};
    }
    c->pre_m = NULL;
    return f;
}

static int pr__rkt_topic(pr_consumer *c, const rd_kafka_topic_t *rkt);

/* Partition pi's messages up to offset next - 1 are handed out completely:
 * its consumed_next, moved over a stretch without records that follows
 * (pr__partition_end). Only this thread moves parts[] (under the lock), so
 * a plain atomic store is enough; readers on other threads hold the lock. */
static void pr__consumed(pr_consumer *c, ssize_t pi, int64_t next)
{
    if (pi < 0)
        return;
    pr__part *p = &c->parts[pi];
    if (next == p->gap_from && p->gap_to > next) {
        next = p->gap_to;
        p->gap_from = p->gap_to = -1;
    }
    __atomic_store_n(&p->consumed_next, next, __ATOMIC_RELAXED);
}

/* A message of (rkt, partition) at `offset` was taken from librdkafka. */
static void pr__taken(pr_consumer *c, const rd_kafka_topic_t *rkt, int32_t partition,
                      int64_t offset)
{
    ssize_t pi = pr__part_get(c, pr__rkt_topic(c, rkt), partition);
    if (pi >= 0)
        c->parts[pi].taken_next = offset + 1;
}

/* A partition's end (enable.partition.eof): librdkafka's fetch position
 * reached the log's end, m->offset (the last stable offset under
 * read_committed). Offsets between the last message taken and there hold
 * no record for us: transaction markers (a transaction's commit or abort
 * takes an offset of its own, and a transactional producer's last one is
 * the partition's last offset) and records of aborted transactions, which
 * librdkafka skips. consumed_next stopped before them, so the committed
 * offset stayed 1 (or an aborted transaction's size + 1) below the end for
 * good: piperec_consumer_lag_records never reached 0, and a restart read
 * the markers again. Now consumed_next moves to the end: at once when every
 * message taken is handed out, else when the last of them is
 * (pr__consumed). Every message polled before the end comes before it in
 * the instance's queue, so none is skipped. */
static void pr__partition_end(pr_consumer *c, const rd_kafka_message_t *m)
{
    if (!m->rkt || m->offset < 0)
        return;
    ssize_t pi = pr__part_get(c, pr__rkt_topic(c, m->rkt), m->partition);
    if (pi < 0)
        return;
    pr__part *p = &c->parts[pi];
    if (m->offset <= p->taken_next)
        return; /* nothing between */
    if (__atomic_load_n(&p->consumed_next, __ATOMIC_RELAXED) == p->taken_next) {
        p->gap_from = p->gap_to = -1;
        __atomic_store_n(&p->consumed_next, m->offset, __ATOMIC_RELAXED);
    } else {
        p->gap_from = p->taken_next;
        p->gap_to = m->offset;
    }
}

/* An empty payload (or a tombstone) holds no record: count it under its own
 * reason, dead-letter it like any reject, and move on. */
static void pr__deliver_empty(pr_consumer *c, rd_kafka_message_t *m, int tidx, ssize_t pi)
{
    c->cur = (pr__cur){.topic = c->topics[tidx],
                       .partition = m->partition,
                       .key = PR_PART_KEY(tidx, m->partition),
                       .offset = m->offset,
                       .nrec = 1,
                       .mkey = m->key,
                       .mkey_len = m->key_len};
    /* A tombstone (a null value) keeps its null in the dead letter. */
    pr__on_reject(c, PR_DEC_EMPTY, m->payload ? "empty message" : "tombstone (null value)",
                  m->payload ? "" : NULL, 0, 0);
    pr__consumed(c, pi, m->offset + 1);
    if (c->pending == m) {
        c->pending = NULL;
        c->pending_rec = 0;
    }
    rd_kafka_message_destroy(m);
}

/* The topic index of handle rkt (cached for the last few handles). */
static int pr__rkt_topic(pr_consumer *c, const rd_kafka_topic_t *rkt)
{
    for (unsigned k = 0; k < PR_CONSUMER_MAX_INSTANCES; k++)
        if (c->rkt_seen[k] == rkt && rkt)
            return c->rkt_tidx[k];
    int tidx = pr__topic_index(c, rd_kafka_topic_name(rkt));
    tidx = tidx < 0 ? 0 : tidx;
    unsigned k = c->rkt_next++ % PR_CONSUMER_MAX_INSTANCES;
    c->rkt_seen[k] = rkt;
    c->rkt_tidx[k] = tidx;
    return tidx;
}

/* m's topic index. */
static int pr__msg_topic(pr_consumer *c, const rd_kafka_message_t *m)
{
    return pr__rkt_topic(c, m->rkt);
}

/* Decode message m (or continue it). Returns rows appended; sets *keep when
 * the message (or its rest) waits for the next block. */
static int pr__deliver(pr_consumer *c, pr_block *b, rd_kafka_message_t *m, int64_t now_ms,
                       bool *keep)
{
    *keep = false;
    int tidx = pr__msg_topic(c, m);
    ssize_t pi = pr__part_get(c, tidx, m->partition);
    if (m->len == 0) {
        c->pre_m = NULL;
        pr__deliver_empty(c, m, tidx, pi);
        return 0;
    }
    /* A message already split over blocks continues where it stopped; any
     * other goes whole into this block, or waits for the next one. A message
     * larger than a whole block is split from an empty block. */
    bool resuming = c->pending == m && c->pending_rec > 0;
    pr__pt_facts local;
    const pr__pt_facts *f = pr__msg_facts(c, m, &local);
    int nrec = f->nrec;
    int64_t ts = f->ts;
    if (!resuming && b->rows > 0 && (uint32_t)nrec > b->cap - b->rows) {
        c->pending = m;
        c->pending_rec = 0;
        *keep = true;
        return 0;
    }

    c->cur = (pr__cur){.topic = c->topics[tidx],
                       .partition = m->partition,
                       .key = PR_PART_KEY(tidx, m->partition),
                       .offset = m->offset,
                       .nrec = nrec,
                       .mkey = m->key,
                       .mkey_len = m->key_len};
    pr_decode_ctx ctx = {.spec = c->spec,
                         .json = c->json,
                         .on_reject = pr__on_reject,
                         .opaque = c,
                         .partition = c->cur.key,
                         .offset = m->offset,
                         .default_event_time_ms = ts > 0 ? ts : now_ms,
                         .max_event_ahead_ms = pr__event_ahead_ms(c->source),
                         .parse_hex = pr_decode_want_parse_hex(c->spec)};
    uint32_t before = b->rows;
    if (!resuming)
        c->pending_rec = 0;
    int r = pr_decode_message(c->format, &ctx, b, m->payload, m->len, &c->pending_rec, c->arena);
    int added = (int)(b->rows - before);
    PR__ADD(c->st.records, (uint64_t)added);
    if (r == PR_EAGAIN) { /* not decodable yet: the message waits, nothing consumed */
        c->pending = m;
        c->pending_rec = 0;
        pr__wait_begin(c, pr_json_decoder_last_detail(c->json));
        *keep = true;
        return added;
    }
    pr__wait_end(c);
    if (r == PR_EFULL) {
        c->pending = m; /* the rest goes into the next block */
        *keep = true;
        return added;
    }
    pr__consumed(c, pi, m->offset + 1);
    c->pending = NULL;
    c->pending_rec = 0;
    rd_kafka_message_destroy(m);
    return added;
}

bool pr_consumer_has_pending(const pr_consumer *c)
{
    return c->pending != NULL || c->backlog_head < c->n_backlog;
}

/* One turn of a poll: the next message (1, *out), nothing within `wait` ms
 * (0), or an event handled here (2: an offset reset, a partition's end, a
 * consumer error that is not fatal); < 0 (errstr) when the consumer cannot
 * go on. */
static int pr__polled(pr_consumer *c, rd_kafka_t *rk, rd_kafka_message_t *m,
                      rd_kafka_message_t **out, char *errstr, size_t errstr_size)
{
    int rc;
    if (m == c->pre_m) { /* its polling thread read it: no error */
        c->acc_messages++;
        c->acc_bytes += c->pre_e.f.len;
        pr__taken(c, c->pre_e.f.rkt, c->pre_e.f.partition, c->pre_e.f.offset);
        *out = m;
        return 1;
    }
    if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && m->rkt) {
        rc = pr__offset_reset(c, rk, m, errstr, errstr_size);
        rd_kafka_message_destroy(m);
        return rc ? rc : 2;
    }
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        pr__partition_end(c, m);
        rd_kafka_message_destroy(m);
        return 2;
    }
    if (m->err) {
        char es[512];
        snprintf(es, sizeof(es), "%s", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        char fs[512];
        if (rd_kafka_fatal_error(rk, fs, sizeof(fs)))
            return pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: fatal: %s", fs);
        PR__ADD(c->st.kafka_errors, 1);
        pr_log_ratelimited(&c->rl_err, PR_LOG_WARN, "consumer: %s", es);
        return 2;
    }
    c->acc_messages++;
    c->acc_bytes += m->len;
    pr__taken(c, m->rkt, m->partition, m->offset);
    *out = m;
    return 1;
}

static int pr__next1(pr_consumer *c, rd_kafka_t *rk, int wait, rd_kafka_message_t **out,
                     char *errstr, size_t errstr_size)
{
    *out = NULL;
    unsigned inst = pr__inst_of(c, rk);
    int rc = pr__restart_due(c, rk, inst, errstr, errstr_size);
    if (rc)
        return rc;
    if (c->start_retry[inst])
        pr__retry_starts(c, rk, inst);
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, wait);
    return m ? pr__polled(c, rk, m, out, errstr, errstr_size) : 0;
}

/* ---- polling threads (c->pt, poll_threads.h) ----
 * The rings give what consumer_poll gave; their rebalance events are handled
 * here, on this thread, as the callback handles them without threads. */

/* pr__next1 over the rings: 1 message, 0 none within wait ms, 2 an event. */
static int pr__ring_next(pr_consumer *c, int wait, rd_kafka_message_t **out, char *errstr,
                         size_t errstr_size)
{
    *out = NULL;
    pr__pt_entry *e = &c->pre_e;
    pr__ddec_release(&e->f.dec); /* the last message's, if nobody took it */
    for (unsigned k = 0; k < c->n_rk; k++) {
        int rc = c->restart[k] ? pr__restart_due(c, c->rks[k], k, errstr, errstr_size) : 0;
        if (rc)
            return rc;
        if (c->start_retry[k])
            pr__retry_starts(c, c->rks[k], k);
    }
    if (!pr__pt_next(c->pt, wait, e))
        return 0;
    if (e->kind == PR__PT_REBALANCE) {
        e->f.dec.run = NULL; /* not a message: nothing to release */
        pr__rebalance(c, c->rks[e->inst], e->inst, e->err, e->parts);
        pr__pt_done(c->pt, e->inst);
        return 2;
    }
    if (e->f.nrec >= 0) /* read by its polling thread (pr__pt_prep) */
        c->pre_m = e->m;
    else
        pr__ddec_release(&e->f.dec);
    return pr__polled(c, c->rks[e->inst], e->m, out, errstr, errstr_size);
}

/* The messages held during a decode wait come first, in order. */
static int pr__next_pt(pr_consumer *c, int wait, rd_kafka_message_t **out, char *errstr,
                       size_t errstr_size)
{
    if (c->held_head < c->n_held) {
        *out = c->held[c->held_head++];
        if (c->held_head == c->n_held)
            c->held_head = c->n_held = 0;
        return 1;
    }
    return pr__ring_next(c, wait, out, errstr, errstr_size);
}

static int pr__hold(pr_consumer *c, rd_kafka_message_t *m)
{
    if (c->n_held == c->cap_held) {
        size_t nc = c->cap_held ? 2 * c->cap_held : 256;
        rd_kafka_message_t **nh = realloc(c->held, nc * sizeof(*nh));
        if (!nh)
            return PR_ENOMEM;
        c->held = nh;
        c->cap_held = nc;
    }
    c->held[c->n_held++] = m;
    return 0;
}

static void pr__held_clear(pr_consumer *c)
{
    for (size_t i = c->held_head; i < c->n_held; i++)
        rd_kafka_message_destroy(c->held[i]);
    c->n_held = c->held_head = 0;
}

/* A decode wait with polling threads: rebalance events and errors are
 * served; messages (what the rings held when the partitions were paused,
 * bounded by the rings' size) are held, in order, for after the wait. */
static int pr__wait_poll_pt(pr_consumer *c, int wait, char *errstr, size_t errstr_size)
{
    for (size_t turn = 0; turn < (size_t)c->n_rk * PR__PT_RING; turn++) {
        rd_kafka_message_t *m;
        int r = pr__ring_next(c, turn == 0 ? wait : 0, &m, errstr, errstr_size);
        if (r <= 0)
            return r;
        if (r == 1 && pr__hold(c, m)) {
            rd_kafka_message_destroy(m);
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
        }
    }
    return 0;
}

/* pr__pt_stop's server while closing: events handled, messages dropped
 * (not handed out: their offsets stay unstored). */
static void pr__pt_serve(void *opaque, const pr__pt_entry *e)
{
    pr_consumer *c = opaque;
    if (e->kind == PR__PT_REBALANCE) {
        pr__rebalance(c, c->rks[e->inst], e->inst, e->err, e->parts);
        pr__pt_done(c->pt, e->inst);
    } else if (e->m) {
        pr__ddec dec = e->f.dec;
        pr__ddec_release(&dec);
        rd_kafka_message_destroy(e->m);
    }
}

/* pr__next1 over the instances: one turn without waiting over each, from
 * the next in turn (each partition is one instance's, whose queue keeps its
 * order); when none had anything, a wait of at most 1 ms on the next one,
 * so that a message arriving at another waits no longer than that. */
static int pr__next(pr_consumer *c, int wait, rd_kafka_message_t **out, char *errstr,
                    size_t errstr_size)
{
    c->pre_m = NULL;
    pr__ddec_release(&c->pre_e.f.dec);
    if (c->pt)
        return pr__next_pt(c, wait, out, errstr, errstr_size);
    if (c->n_rk <= 1)
        return pr__next1(c, c->rk, wait, out, errstr, errstr_size);
    for (unsigned k = 0; k < c->n_rk; k++) {
        rd_kafka_t *rk = c->rks[c->next_rk];
        c->next_rk = (c->next_rk + 1) % c->n_rk;
        int r = pr__next1(c, rk, 0, out, errstr, errstr_size);
        if (r != 0)
            return r;
    }
    if (wait <= 0)
        return 0;
    rd_kafka_t *rk = c->rks[c->next_rk];
    c->next_rk = (c->next_rk + 1) % c->n_rk;
    return pr__next1(c, rk, 1, out, errstr, errstr_size);
}

/* How long the next turn may wait: only for the first message of a poll. */
static int pr__turn_wait(bool first, int64_t deadline)
{
    if (!first)
        return 0;
    int64_t left = deadline - pr_clock_mono_ns(pr_clock_real());
    return left > 0 ? (int)((left + 999999) / 1000000) : 0;
}

/* ---------------------------------------------------------------- parallel poll
 *
 * With decode threads (pr_consumer_conf.decode_threads > 1, criteo_tsv or
 * json) a poll collects messages into the decode pool (decode_par.h) while
 * its helpers decode the full slots, then merges them into the block in
 * poll order: rows, then the message's rejects (the reject callback, the
 * dead letter), then its consumed offset, as the serial path does per
 * message. What does not fit the block waits in the backlog, ahead of
 * anything polled later. */

/* Into the pool, unless it would overfill the block (room: records) or the
 * pool is full: false, the message stays with the caller. */
static bool pr__collect_facts(pr_consumer *c, rd_kafka_message_t *m, const pr__pt_facts *f,
                              pr__ddec dec, int64_t now_ms, uint32_t room, uint32_t *recs)
{
    int nrec = f->nrec;
    int32_t partition = f->partition;
    int64_t ts = f->ts, offset = f->offset;
    int tidx = pr__rkt_topic(c, f->rkt);
    ssize_t pi = pr__part_get(c, tidx, partition);
    uint32_t need = nrec > 0 ? (uint32_t)nrec : 0;
    bool first = pr__dpool_count(c->dp) == 0;
    if (!first && *recs + need > room) {
        pr__ddec_release(&dec);
        return false;
    }
    /* A first message larger than the room goes the serial way (it waits
     * for the next block, or is split over blocks). */
    bool serial = *recs + need > room;
    if (serial)
        pr__ddec_release(&dec);
    bool added = dec.run ? pr__dpool_add_decoded(c->dp, m, offset, PR_PART_KEY(tidx, partition),
                                                 tidx, ts, nrec, &dec)
                         : pr__dpool_add(c->dp, m, offset, PR_PART_KEY(tidx, partition), tidx,
                                         ts > 0 ? ts : now_ms, serial ? -1 : nrec);
    if (!added) {
        pr__ddec_release(&dec);
        return false;
    }
    pr__dpool_msg(c->dp, pr__dpool_count(c->dp) - 1)->part = pi;
    *recs += need;
    return true;
}

/* pr__collect_facts with m's facts (dec: the run its polling thread
 * decoded it into, a hold the pool takes over, or none). */
static bool pr__collect(pr_consumer *c, rd_kafka_message_t *m, int64_t now_ms, uint32_t room,
                        uint32_t *recs)
{
    pr__ddec dec = {0};
    if (m == c->pre_m) { /* decoded by its polling thread: the hold is ours now */
        dec = c->pre_e.f.dec;
        c->pre_e.f.dec.run = NULL;
    }
    pr__pt_facts local;
    const pr__pt_facts *f = pr__msg_facts(c, m, &local);
    return pr__collect_facts(c, m, f, dec, now_ms, room, recs);
}

/* With polling threads: the messages that wait in the ring of the instance
 * in turn, collected in place (pr__pt_span: no copy of their entries, one
 * turn for all), each as pr__next + pr__collect take one; at most max. Stops
 * at an event, an error or a message its polling thread did not read (the
 * caller's pr__next serves those). Returns the messages taken; *left: the
 * last of them when it did not fit (it goes to the backlog). */
static uint32_t pr__collect_ring(pr_consumer *c, int64_t now_ms, uint32_t room, uint32_t *recs,
                                 uint32_t max, rd_kafka_message_t **left)
{
    pr__pt_entry *e;
    size_t n = pr__pt_span(c->pt, max, &e), k = 0;
    while (k < n && e[k].f.nrec >= 0) {
        const pr__pt_entry *x = &e[k++];
        c->acc_messages++;
        c->acc_bytes += x->f.len;
        pr__taken(c, x->f.rkt, x->f.partition, x->f.offset);
        if (!pr__collect_facts(c, x->m, &x->f, x->f.dec, now_ms, room, recs)) {
            *left = x->m;
            break;
        }
    }
    pr__pt_span_taken(c->pt, k);
    c->span_msgs += k;
    c->spans += k > 0;
    return (uint32_t)k;
}

/* A decoded message now in the block: its rejects, offset (its records are
 * counted by the caller, once per merge). */
static int pr__merged(pr_consumer *c, const pr__dmsg *dm)
{
    rd_kafka_message_t *m = dm->m;
    if (dm->nrej) /* the reject callback's message */
        c->cur = (pr__cur){.topic = c->topics[dm->tidx],
                           .partition = m->partition,
                           .key = dm->key,
                           .offset = m->offset,
                           .nrec = dm->nrec,
                           .mkey = m->key,
                           .mkey_len = m->key_len};
    for (uint32_t k = 0; k < dm->nrej; k++) {
        pr__drej r;
        pr__dpool_reject(c->dp, dm, k, &r);
        pr__on_reject(c, r.reason, r.detail, r.rec, r.len, r.recno);
    }
    pr__consumed(c, dm->part, dm->offset + 1);
    if (c->reaper)
        pr__reaper_put(c->reaper, m);
    else
        rd_kafka_message_destroy(m);
    return (int)dm->nrows;
}

/* How many messages from i on are decoded, not dropped, of one slot with
 * rows that follow each other. */
static size_t pr__decoded_run(pr__dpool *dp, size_t i, size_t n)
{
    const pr__dmsg *a = pr__dpool_msg(dp, i);
    if (a->state != PR__DM_DECODED)
        return 0;
    uint32_t next = a->row0 + a->nrows;
    size_t j = i + 1;
    for (; j < n; j++) {
        const pr__dmsg *d = pr__dpool_msg(dp, j);
        if (d->dropped || d->state != PR__DM_DECODED || d->run != a->run || d->slot != a->slot ||
            d->row0 != next)
            break;
        next += d->nrows;
    }
    return j - i;
}

/* The collected messages into b, in order; from the first that does not
 * fit on, they (then `left`, then the rest of the old backlog) are the
 * backlog. Returns rows appended. */
static int pr__merge(pr_consumer *c, pr_block *b, int64_t now_ms, rd_kafka_message_t *left)
{
    size_t n = pr__dpool_count(c->dp), stop = n;
    int appended = 0, merged = 0;
    for (size_t i = 0; i < n && stop == n; i++) {
        pr__dmsg *dm = pr__dpool_msg(c->dp, i);
        if (dm->dropped) {
            rd_kafka_message_destroy(dm->m);
            continue;
        }
        size_t run = pr__decoded_run(c->dp, i, n);
        if (run > 1) {
            /* A run of decoded messages of one slot, rows in a row: one
             * copy, then each message's rejects and offset in order (no
             * offset decision can fall between the two). */
            uint32_t rows = 0;
            for (size_t k = i; k < i + run; k++)
                rows += pr__dpool_msg(c->dp, k)->nrows;
            if (pr__dpool_merge(c->dp, b, dm, rows) == 0) {
                for (size_t k = i; k < i + run; k++)
                    merged += pr__merged(c, pr__dpool_msg(c->dp, k));
                i += run - 1;
                continue;
            }
        }
        if (dm->state == PR__DM_DECODED) {
            int rc = pr__dpool_merge(c->dp, b, dm, dm->nrows);
            if (rc == 0) {
                merged += pr__merged(c, dm);
                continue;
            }
            if (rc == PR_EFULL && b->rows > 0) {
                stop = i;
                break;
            }
            /* Too large for an empty block, or another encoding: as serial. */
        }
        bool keep = false;
        appended += pr__deliver(c, b, dm->m, now_ms, &keep);
        if (keep) /* now c->pending */
            stop = i + 1;
    }
    pr__dpool_copies_run(c->dp); /* the rows' columns, before anyone reads them */
    PR__ADD(c->st.records, (uint64_t)merged);
    appended += merged;
    size_t k = 0, rest = c->n_backlog - c->backlog_head;
    for (size_t i = stop; i < n; i++)
        k += !pr__dpool_msg(c->dp, i)->dropped;
    k += left != NULL;
    memmove(c->backlog + k, c->backlog + c->backlog_head, rest * sizeof(*c->backlog));
    c->backlog_head = 0;
    c->n_backlog = k + rest;
    k = 0;
    for (size_t i = stop; i < n; i++) {
        pr__dmsg *dm = pr__dpool_msg(c->dp, i);
        if (dm->dropped)
            rd_kafka_message_destroy(dm->m);
        else
            c->backlog[k++] = dm->m;
    }
    if (left)
        c->backlog[k] = left;
    /* The polling threads' runs are read no more (a message now in the
     * backlog is decoded again when its turn comes). */
    pr__drun *run = NULL;
    uint32_t holds = 0;
    for (size_t i = 0; i < n; i++) {
        pr__dmsg *dm = pr__dpool_msg(c->dp, i);
        if (dm->run != run) {
            pr__drun_release_n(run, holds);
            run = dm->run;
            holds = 0;
        }
        holds += run != NULL;
        dm->run = NULL;
    }
    pr__drun_release_n(run, holds);
    return appended;
}

/* The pool, at the first poll (it needs the block's capacity); serial when
 * it cannot be made. The backlog holds at most one poll's messages + 1. */
static void pr__pool_open(pr_consumer *c, const pr_block *b)
{
    char e[256] = "";
    const pr__dsrc src = {
        .fmt = c->format, .spec = c->spec, .schema = c->features, .source = c->source};
    c->dp = pr__dpool_new(c->decode_threads, &src, b->cap, e, sizeof(e));
    size_t cap = (b->cap > 1024 ? b->cap : 1024) + 2;
    c->backlog = c->dp ? calloc(cap, sizeof(*c->backlog)) : NULL;
    if (!c->dp || !c->backlog) {
        pr__dpool_free(c->dp);
        c->dp = NULL;
        c->dp_failed = true;
        if (e[0] || pr__dfmt_of(&src))
            pr_warn("consumer: no parallel decode (%s); decoding on the polling thread only",
                    e[0] ? e : "out of memory");
        return;
    }
    pr_info("consumer: %u decode threads", pr__dpool_threads(c->dp));
    if (!c->pt || !pr__poll_decode_wanted())
        return;
    /* Runs for a block and a ring of one-line messages per instance (Criteo,
     * block 8192: 42 runs, ~8 MB allocated): a poll's messages and the
     * ring's fit; with larger messages the ring holds fewer (a polling thread
     * whose runs are all held waits: poll_threads.c). An instance without
     * runs (out of memory) leaves its messages to the pool. */
    uint32_t run_rows = 256;
    unsigned n_runs = (unsigned)((b->cap + PR__PT_RING) / run_rows + 2);
    for (unsigned k = 0; k < c->n_rk; k++) {
        pr__druns *d = pr__druns_new(&src, n_runs, run_rows);
        if (!d)
            break;
        __atomic_store_n(&c->druns[k], d, __ATOMIC_RELEASE);
    }
    if (c->druns[0])
        pr_info("consumer: each polling thread decodes its own messages (%u runs of %u rows)",
                n_runs, run_rows);
}

static int pr__poll_par(pr_consumer *c, pr_block *b, int64_t now_ms, int64_t deadline, int appended,
                        char *errstr, size_t errstr_size)
{
    pr__dpool_begin(c->dp);
    c->collecting = true;
    uint32_t room = b->cap - b->rows, recs = 0;
    uint32_t budget = b->cap > 1024 ? b->cap : 1024;
    rd_kafka_message_t *left = NULL;
    int rc = 0;
    while (c->backlog_head < c->n_backlog &&
           pr__collect(c, c->backlog[c->backlog_head], now_ms, room, &recs))
        c->backlog_head++;
    bool more = c->backlog_head == c->n_backlog;
    for (uint32_t msgs = 0; more && recs < room && msgs < budget;) {
        bool first = appended == 0 && msgs == 0 && pr__dpool_count(c->dp) == 0;
        int wait = pr__turn_wait(first, deadline);
        rd_kafka_message_t *m;
        int r = pr__next(c, wait, &m, errstr, errstr_size);
        if (r < 0) {
            rc = r;
            break;
        }
        if (r == 0) {
            if (wait > 0 && pr_clock_mono_ns(pr_clock_real()) < deadline)
                continue; /* woken by a rebalance or log event: wait on */
            break;
        }
        if (r == 2)
            continue;
        msgs++;
        if (!pr__collect(c, m, now_ms, room, &recs)) {
            left = m;
            break;
        }
        /* What else waits in the rings, taken in spans (not while messages
         * held by a decode wait come first). */
        while (c->pt && c->ring_spans && c->held_head == c->n_held && recs < room &&
               msgs < budget) {
            uint32_t k = pr__collect_ring(c, now_ms, room, &recs, budget - msgs, &left);
            msgs += k;
            if (!k || left)
                break;
        }
        if (left)
            break;
    }
    pr__dpool_finish(c->dp);
    appended += pr__merge(c, b, now_ms, left);
    c->collecting = false;
    pr__dpool_begin(c->dp);
    return rc < 0 ? rc : appended;
}

/* The counters of what pr__polled saw, into st. */
static void pr__acc_flush(pr_consumer *c)
{
    if (c->acc_messages) {
        PR__ADD(c->st.messages, c->acc_messages);
        PR__ADD(c->st.bytes, c->acc_bytes);
        c->acc_messages = c->acc_bytes = 0;
    }
}

static int pr__consumer_poll(pr_consumer *c, pr_block *b, int timeout_ms, char *errstr,
                             size_t errstr_size);

/* Rate-limited warnings whose window closed with some suppressed: said now,
 * or a burst that ends would never be reported (`now`: at close, all). */
static void pr__log_suppressed(pr_consumer *c, bool now)
{
    pr_log_ratelimited_flush(&c->rl_reject, PR_LOG_WARN, "consumer: rejected records", now);
    pr_log_ratelimited_flush(&c->rl_err, PR_LOG_WARN, "consumer: errors", now);
    pthread_mutex_lock(&c->lock);
    pr_log_ratelimited_flush(&c->rl_cb, PR_LOG_WARN, "consumer: librdkafka", now);
    pthread_mutex_unlock(&c->lock);
}

int pr_consumer_poll(pr_consumer *c, pr_block *b, int timeout_ms, char *errstr, size_t errstr_size)
{
    int rc = pr__consumer_poll(c, b, timeout_ms, errstr, errstr_size);
    pr__acc_flush(c);
    pr__log_suppressed(c, false);
    if (rc <= 0 && c->reaper) /* idle: the reaper's partial batch need not wait for more */
        pr__reaper_kick(c->reaper);
    return rc;
}

static int pr__consumer_poll(pr_consumer *c, pr_block *b, int timeout_ms, char *errstr,
                             size_t errstr_size)
{
    if (c->closed)
        return pr_seterr(errstr, errstr_size, PR_ESTATE, "consumer: closed");
    if (b->n_dense != c->spec->n_dense || b->n_sparse != c->spec->n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "consumer: block shape %u/%u differs from the pipeline's %u/%u",
                         b->n_dense, b->n_sparse, c->spec->n_dense, c->spec->n_sparse);
    if (c->decode_threads > 1 && !c->dp && !c->dp_failed)
        pr__pool_open(c, b);
    pr_dlq_poll(c->dlq);
    int64_t now_ms = pr_clock_wall_ms(c->clock);
    int appended = 0;
    bool keep = false;

    if (c->pending && c->waiting && pr_mono_ns() < c->retry_at_ns) {
        if (c->pt) {
            int64_t left = (c->retry_at_ns - pr_mono_ns()) / 1000000;
            int rc = pr__wait_poll_pt(c, left < timeout_ms ? (int)left : timeout_ms, errstr,
                                      errstr_size);
            return rc < 0 ? rc : 0;
        }
        pr__wait_poll(c, timeout_ms);
        return 0;
    }
    if (c->pending) {
        appended += pr__deliver(c, b, c->pending, now_ms, &keep);
        if (keep)
            return appended;
    }
    /* Wait (real time: librdkafka's own) for the first message only; a
     * bounded number of messages per call keeps the caller's loop turning
     * even when everything is rejected. */
    int64_t deadline =
        pr_clock_mono_ns(pr_clock_real()) + (int64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000;
    int rc = 0;
    if (c->dp) {
        rc = pr__poll_par(c, b, now_ms, deadline, appended, errstr, errstr_size);
        if (rc < 0)
            return rc;
        appended = rc;
    } else {
        uint32_t budget = b->cap > 1024 ? b->cap : 1024;
        for (uint32_t msgs = 0; b->rows < b->cap && msgs < budget;) {
            int wait = pr__turn_wait(appended == 0 && msgs == 0, deadline);
            rd_kafka_message_t *m;
            int r = pr__next(c, wait, &m, errstr, errstr_size);
            if (r < 0)
                return r;
            if (r == 0) {
                if (wait > 0 && pr_clock_mono_ns(pr_clock_real()) < deadline)
                    continue; /* woken by a rebalance or log event: wait on */
                break;
            }
            if (r == 2)
                continue;
            msgs++;
            appended += pr__deliver(c, b, m, now_ms, &keep);
            if (keep)
                break;
        }
    }
    pr_dlq_poll(c->dlq);
    const char *df = pr_dlq_fatal(c->dlq);
    if (df)
        return pr_seterr(errstr, errstr_size, PR_EIO, "consumer: %s", df);
    return appended;
}

/* ---------------------------------------------------------------- control */

static int pr__pause_resume(pr_consumer *c, bool pause)
{
    rd_kafka_resp_err_t err = pr__pause_assignment(c, pause);
    if (err) {
        pr_warn("consumer: %s: %s", pause ? "pause" : "resume", rd_kafka_err2str(err));
        return PR_EKAFKA;
    }
    __atomic_store_n(&c->paused, pause, __ATOMIC_RELAXED);
    return 0;
}

int pr_consumer_pause(pr_consumer *c)
{
    return pr__pause_resume(c, true);
}

int pr_consumer_resume(pr_consumer *c)
{
    return pr__pause_resume(c, false);
}

bool pr_consumer_paused(const pr_consumer *c)
{
    return __atomic_load_n(&c->paused, __ATOMIC_RELAXED);
}

int pr_consumer_store_offset_key(pr_consumer *c, int32_t key, int64_t next_offset)
{
    pthread_mutex_lock(&c->lock);
    ssize_t i = pr__part_find(c, key);
    if (i < 0 || !c->parts[i].assigned) {
        pthread_mutex_unlock(&c->lock);
        return PR_ESTATE;
    }
    /* Stored already: librdkafka holds it. Sound because stores, assigns and
     * restarts (which reset `stored` where librdkafka forgets its copy) all
     * run on this one thread (pr_ingest.h, Threads). */
    if (c->parts[i].stored == next_offset) {
        pthread_mutex_unlock(&c->lock);
        return 1;
    }
    const char *topic = c->topics[c->parts[i].tidx];
    int32_t partition = c->parts[i].partition;
    rd_kafka_t *rk = c->rks[c->parts[i].inst];
    pthread_mutex_unlock(&c->lock);

    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, topic, partition)->offset = next_offset;
    rd_kafka_resp_err_t err = rd_kafka_offsets_store(rk, l);
    if (!err)
        err = l->elems[0].err;
    rd_kafka_topic_partition_list_destroy(l);
    if (err)
        return err == RD_KAFKA_RESP_ERR__STATE || err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION
                   ? PR_ESTATE
                   : PR_EKAFKA;
    pthread_mutex_lock(&c->lock);
    c->parts[i].stored = next_offset;
    pthread_mutex_unlock(&c->lock);
    return 0;
}

int pr_consumer_store_offset(pr_consumer *c, const char *topic, int32_t partition,
                             int64_t next_offset)
{
    int tidx = -1;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->n_topics; i++)
        if (!strcmp(c->topics[i], topic))
            tidx = i;
    pthread_mutex_unlock(&c->lock);
    if (tidx < 0)
        return PR_ESTATE;
    return pr_consumer_store_offset_key(c, PR_PART_KEY(tidx, partition), next_offset);
}

int64_t pr_consumer_consumed_next(const pr_consumer *c, int32_t key)
{
    pr_consumer *mc = (pr_consumer *)c;
    pthread_mutex_lock(&mc->lock);
    ssize_t i = pr__part_find(c, key);
    int64_t v = i >= 0 ? __atomic_load_n(&c->parts[i].consumed_next, __ATOMIC_RELAXED) : -1;
    pthread_mutex_unlock(&mc->lock);
    return v;
}

/* Commit what instance rk stored, synchronously. */
static int pr__commit_one(pr_consumer *c, rd_kafka_t *rk, char *errstr, size_t errstr_size)
{
    rd_kafka_resp_err_t err = rd_kafka_commit(rk, NULL, 0);
    if (err == RD_KAFKA_RESP_ERR__NO_OFFSET)
        return 0;
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "consumer: commit: %s",
                         rd_kafka_err2str(err));
    unsigned inst = pr__inst_of(c, rk);
    bool *noted = c->read_file ? calloc((size_t)c->n_topics + 1, sizeof(*noted)) : NULL;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_parts; i++)
        if (c->parts[i].assigned && c->parts[i].inst == inst && c->parts[i].stored >= 0) {
            c->parts[i].committed = c->parts[i].stored;
            if (noted && c->parts[i].tidx < c->n_topics)
                noted[c->parts[i].tidx] = true;
        }
    int n_topics = c->n_topics;
    pthread_mutex_unlock(&c->lock);
    for (int t = 0; noted && t < n_topics; t++)
        if (noted[t])
            pr__read_note(c, c->topics[t]);
    free(noted);
    return 0;
}

int pr_consumer_commit(pr_consumer *c, char *errstr, size_t errstr_size)
{
    int rc = 0;
    for (unsigned k = 0; k < c->n_rk; k++) {
        int r = pr__commit_one(c, c->rks[k], errstr, errstr_size);
        if (!rc)
            rc = r;
    }
    return rc;
}

/* ---------------------------------------------------------------- queries */

const char *pr_consumer_topic(const pr_consumer *c, int idx)
{
    pr_consumer *mc = (pr_consumer *)c;
    pthread_mutex_lock(&mc->lock);
    const char *t = idx >= 0 && idx < c->n_topics ? c->topics[idx] : NULL;
    pthread_mutex_unlock(&mc->lock);
    return t;
}

rd_kafka_t *pr_consumer_handle(pr_consumer *c)
{
    return c->rk;
}

pr_dlq *pr_consumer_dlq(pr_consumer *c)
{
    return c->dlq;
}

void pr_consumer_get_stats(const pr_consumer *c, pr_consumer_stats *st)
{
    pr_consumer *mc = (pr_consumer *)c;
    memset(st, 0, sizeof(*st));
    st->messages = PR__LOAD(mc->st.messages);
    st->bytes = PR__LOAD(mc->st.bytes);
    st->records = PR__LOAD(mc->st.records);
    for (int i = 0; i < PR_DEC__COUNT; i++)
        st->rejects[i] = PR__LOAD(mc->st.rejects[i]);
    st->rejected_records = PR__LOAD(mc->st.rejected_records);
    st->filtered = PR__LOAD(mc->st.filtered);
    st->sampled_out = PR__LOAD(mc->st.sampled_out);
    st->kafka_errors = PR__LOAD(mc->st.kafka_errors);
    st->rebalances = PR__LOAD(mc->st.rebalances);
    st->offset_resets = PR__LOAD(mc->st.offset_resets);
    st->commit_failures = PR__LOAD(mc->st.commit_failures);
    for (int i = 0; i < PR_STALE__COUNT; i++)
        st->stale_members[i] = PR__LOAD(mc->st.stale_members[i]);
    pr_dlq_stats ds;
    pr_dlq_get_stats(c->dlq, &ds);
    st->dlq_sent = ds.sent;
    st->dlq_failed = ds.failed;
    st->dlq_file = ds.to_file;
    st->dlq_file_dropped = ds.file_dropped;
    st->dlq_pending = ds.pending;
    st->paused = pr_consumer_paused(c);
    pthread_mutex_lock(&mc->lock);
    for (size_t i = 0; i < c->n_parts; i++)
        st->assigned_partitions += c->parts[i].assigned;
    st->decode_waits = PR__LOAD(mc->st.decode_waits);
    st->decode_waiting = __atomic_load_n(&mc->waiting, __ATOMIC_RELAXED);
    if (st->decode_waiting)
        snprintf(st->decode_wait_why, sizeof(st->decode_wait_why), "%s", mc->wait_why);
    snprintf(st->last_kafka_error, sizeof(st->last_kafka_error), "%s", mc->last_error);
    pthread_mutex_unlock(&mc->lock);
    st->paused_partitions = st->paused ? st->assigned_partitions : 0;
}

size_t pr_consumer_offset_resets(const pr_consumer *c, pr_tp *out, uint64_t *counts, size_t max)
{
    pr_consumer *mc = (pr_consumer *)c;
    size_t n = 0;
    pthread_mutex_lock(&mc->lock);
    for (size_t i = 0; i < c->n_parts; i++) {
        if (!c->parts[i].resets)
            continue;
        if (n < max) {
            out[n] = (pr_tp){.topic = c->topics[c->parts[i].tidx],
                             .partition = c->parts[i].partition,
                             .key = c->parts[i].key,
                             .offset = -1};
            counts[n] = c->parts[i].resets;
        }
        n++;
    }
    pthread_mutex_unlock(&mc->lock);
    return n;
}

size_t pr_consumer_assignment(const pr_consumer *c, pr_tp *out, size_t max)
{
    pr_consumer *mc = (pr_consumer *)c;
    size_t n = 0;
    pthread_mutex_lock(&mc->lock);
    for (size_t i = 0; i < c->n_parts; i++) {
        if (!c->parts[i].assigned)
            continue;
        if (n < max)
            out[n] = (pr_tp){.topic = c->topics[c->parts[i].tidx],
                             .partition = c->parts[i].partition,
                             .key = c->parts[i].key,
                             .offset = -1};
        n++;
    }
    pthread_mutex_unlock(&mc->lock);
    return n;
}

/* The instance holding partition `key` (0 when unknown). */
static unsigned pr__lag_inst(pr_consumer *c, int32_t key)
{
    pthread_mutex_lock(&c->lock);
    ssize_t i = pr__part_find(c, key);
    unsigned k = i >= 0 ? c->parts[i].inst : 0;
    pthread_mutex_unlock(&c->lock);
    return k < c->n_rk ? k : 0;
}

size_t pr_consumer_lag(pr_consumer *c, pr_partition_lag *out, size_t max)
{
    size_t n = 0, total = 0;
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->n_parts; i++) {
        if (!c->parts[i].assigned)
            continue;
        if (n < max) {
            out[n] = (pr_partition_lag){.tp = {.topic = c->topics[c->parts[i].tidx],
                                               .partition = c->parts[i].partition,
                                               .key = c->parts[i].key,
                                               .offset = -1},
                                        .committed = c->parts[i].committed};
            n++;
        }
        total++;
    }
    pthread_mutex_unlock(&c->lock);
    if (!n)
        return total;
    /* Each partition asked of the instance that holds it. */
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n);
    for (size_t i = 0; i < n; i++)
        rd_kafka_topic_partition_list_add(l, out[i].tp.topic, out[i].tp.partition);
    rd_kafka_position(c->rk, l);
    bool paused = pr_consumer_paused(c);
    for (size_t i = 0; i < n; i++) {
        int64_t lo = -1, hi = -1;
        rd_kafka_t *rk = c->rks[pr__lag_inst(c, out[i].tp.key)];
        if (rk != c->rk) {
            rd_kafka_topic_partition_list_t *one = rd_kafka_topic_partition_list_new(1);
            rd_kafka_topic_partition_list_add(one, out[i].tp.topic, out[i].tp.partition);
            rd_kafka_position(rk, one);
            l->elems[i].err = one->elems[0].err;
            l->elems[i].offset = one->elems[0].offset;
            rd_kafka_topic_partition_list_destroy(one);
        }
        if (rd_kafka_get_watermark_offsets(rk, out[i].tp.topic, out[i].tp.partition, &lo, &hi) ||
            hi < 0)
            hi = -1;
        int64_t pos = l->elems[i].err || l->elems[i].offset < 0 ? -1 : l->elems[i].offset;
        out[i].high_watermark = hi;
        out[i].position = pos;
        out[i].paused = paused;
        if (hi >= 0 && out[i].committed >= 0)
            out[i].lag = hi - out[i].committed;
        else if (hi >= 0 && pos >= 0)
            out[i].lag = hi - pos;
        else
            out[i].lag = -1;
        if (out[i].lag < 0 && out[i].lag != -1)
            out[i].lag = 0;
    }
    rd_kafka_topic_partition_list_destroy(l);
    return total;
}
