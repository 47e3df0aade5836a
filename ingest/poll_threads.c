/*
 * poll_threads.c — one polling thread per consumer instance (poll_threads.h
 * says what and why).
 *
 * Each instance has a single-producer single-consumer ring: its thread is
 * the producer, the consumer's (pipeline) thread the only reader. Head and
 * tail are atomics; the two sides sleep only when the ring is empty (the
 * reader, on one condition for all rings) or full (the producer, on its
 * instance's), each announcing it with a flag the other side checks after
 * its own store (sequentially consistent, so one of them sees the other);
 * every sleep is also bounded, so a missed wakeup costs milliseconds, never
 * progress. A rebalance event is an entry like a message; the producer
 * then waits on `done`, which only the reader sets.
 *
 * Both wakeups are per batch, not per entry: the reader is woken when a
 * batch waits (below), a producer on a full ring once the reader has taken
 * half of it (woken per pop, the two threads took turns per message: a
 * futex wake and a context switch each, the pipeline thread's largest cost
 * in a perf profile of issue 21).
 *
 * Runs are bounded by rows as well as by messages: the decoded rows a
 * polling thread may hold are its instance's runs (consumer.c sizes them
 * for a block and a ring of one-line messages), so with batched messages
 * (EventBatch, 16 Criteo lines a message) they, not the ring, are the bound
 * on how far a polling thread runs ahead. The thread hands its open run
 * over at PR__PT_RUN_ROWS rows (it holds no more than a few runs the reader
 * cannot take), and when every run is held it sleeps until the reader
 * starts its next poll (the previous poll's runs are released by then:
 * pr__pt_next wakes it), bounded by PR__PT_FULL_MS a sleep. It used to nap
 * PR__PT_NAP_US and look again, ~450-1,200 times per instance on a 200K-row
 * EventBatch stream, each nap handing over a short run (issue 21);
 * PIPEREC_POLL_RUNS=nap keeps that behaviour, to measure against.
 */
#define _GNU_SOURCE
#include "poll_threads.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pr_clock.h"
#include "pr_error.h"
#include "pr_log.h"

#define PR__PT_MASK    (PR__PT_RING - 1)
#define PR__PT_POLL_MS 50 /* a polling thread's longest poll: how soon it sees stop */
#define PR__PT_FULL_MS 2  /* longest sleep on a full ring before looking again */
/* The reader is woken for a batch, not per message: when this many entries
 * wait, or when a polling thread found librdkafka's queue empty (nothing
 * more is coming soon). Woken per message it would take one message per
 * poll, as fast as it comes, and hand the engine blocks of one row. */
#define PR__PT_BATCH 256
/* Messages decoded into a run wait on their polling thread, at most this
 * many, until the run is handed over (poll_threads.h, pr__pt_prep_fn). */
#define PR__PT_RUN_MAX PR__PT_BATCH
/* A polling thread whose runs are all held waits for the reader to release
 * some, in naps of PR__PT_NAP_US, at most PR__PT_BUSY_MS per message (the
 * reader releases them at the end of each poll; a longer wait means it is
 * busy elsewhere, and the message then goes over undecoded). */
#define PR__PT_NAP_US  200
#define PR__PT_BUSY_MS 50
/* The open run goes over once it holds this many decoded rows (one-line
 * messages reach PR__PT_RUN_MAX first, 16-row ones at 64 messages). */
#define PR__PT_RUN_ROWS (4 * PR__PT_BATCH)
/* The reader publishes what it took at least every this many entries: per
 * entry, the store, its fence and the producer's rereading of the line
 * were the largest cost of the pipeline thread's per-message path (a perf
 * profile of issue 21). The producer waits for room only at half a ring. */
#define PR__PT_PUB 32
/* Fields that two threads write go on cache lines of their own. */
#define PR__PT_LINE _Alignas(64)

typedef struct pr__pt_inst {
    pr__pt *pt;
    unsigned k;
    rd_kafka_t *rk;
    pthread_t tid;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* room in the ring, or `done` */
    bool done;         /* the rebalance event was handled (under mu) */
    /* The producer's side (its polling thread writes these; the reader
     * reads tail and the flags): a cache line apart from the reader's. */
    PR__PT_LINE size_t tail; /* next to write (atomic) */
    size_t phead;            /* head as the producer last read it (producer's only) */
    int full_wait;           /* the producer sleeps on a full ring (atomic) */
    int exited;              /* the thread returned; its last entry is in (atomic) */
    int draining;            /* its last poll found a message: more may follow at once (atomic) */
    int handing;             /* in its rebalance callback, until pr__pt_done (atomic) */
    int starved;             /* its runs are all held: sleeps on cv until a poll starts (atomic) */
    size_t n_run;            /* entries in run[] (producer's only) */
    uint32_t run_rows;       /* rows decoded into them (producer's only) */
    /* Logged at free (producer's until then): hand-overs of runs, times
     * every run was held, sleeps for them (woken by a poll / timed out). */
    uint64_t handovers, held, woken, timeouts;
    /* The reader's side: entries it took (rhead) are published to the
     * producer (head) every PR__PT_PUB entries, when the ring looks empty,
     * when it turns to another instance and before it sleeps; it rereads
     * tail only when it has taken everything it saw (rtail). */
    PR__PT_LINE size_t head; /* entries taken, as published (atomic) */
    size_t rhead;            /* entries taken (reader's only) */
    size_t rtail;            /* tail as the reader last read it (reader's only) */
    PR__PT_LINE pr__pt_entry run[PR__PT_RUN_MAX];
    pr__pt_entry ring[PR__PT_RING];
} pr__pt_inst;

struct pr__pt {
    unsigned n, next;
    unsigned streak;     /* entries taken in a row from inst[next] (reader's) */
    pr__pt_prep_fn prep; /* per message, on its polling thread; NULL: none */
    pr__pt_seal_fn seal;
    void *prep_opaque;
    bool nap; /* PIPEREC_POLL_RUNS=nap: the former nap loop and message-only runs */
    int stop; /* atomic */
    int gate; /* atomic: 1 = poll, -1 = leave without polling, 0 = wait */
    int idle; /* the reader sleeps on empty rings (atomic) */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* an entry arrived, a thread exited, the gate opened */
    pr__pt_inst inst[];
};

static void pr__pt_deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += (long)ms * 1000000L;
    ts->tv_sec += ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

/* Wake whoever sleeps on cv (under mu, so a sleeper that checked its
 * condition before our change is already waiting). */
static void pr__pt_wake(pthread_mutex_t *mu, pthread_cond_t *cv)
{
    pthread_mutex_lock(mu);
    pthread_cond_broadcast(cv);
    pthread_mutex_unlock(mu);
}

static void pr__pt_wake_reader(pr__pt *pt)
{
    if (__atomic_load_n(&pt->idle, __ATOMIC_SEQ_CST)) {
        pr__pt_wake(&pt->mu, &pt->cv);
    }
}

/* Producer: is the ring full? (Reads the published head only when the one
 * it last read says so.) */
static bool pr__pt_full(pr__pt_inst *in)
{
    size_t t = __atomic_load_n(&in->tail, __ATOMIC_RELAXED);
    if (t - in->phead < PR__PT_RING)
        return false;
    in->phead = __atomic_load_n(&in->head, __ATOMIC_ACQUIRE);
    return t - in->phead >= PR__PT_RING;
}

/* Entries in the ring, as the producer sees it. */
static size_t pr__pt_fill(pr__pt_inst *in)
{
    return __atomic_load_n(&in->tail, __ATOMIC_RELAXED) -
           __atomic_load_n(&in->head, __ATOMIC_ACQUIRE);
}

/* Producer: sleep (bounded) on a full ring until the reader has taken half
 * of it (it wakes us then, once: pr__pt_publish). */
static void pr__pt_wait_room(pr__pt_inst *in)
{
    pthread_mutex_lock(&in->mu);
    __atomic_store_n(&in->full_wait, 1, __ATOMIC_SEQ_CST);
    if (pr__pt_fill(in) > PR__PT_RING / 2) {
        struct timespec ts;
        pr__pt_deadline(&ts, PR__PT_FULL_MS);
        pthread_cond_timedwait(&in->cv, &in->mu, &ts);
    }
    __atomic_store_n(&in->full_wait, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&in->mu);
}

/* Producer: append e, waiting for room (the reader drains even while
 * stopping, so the wait ends). */
static void pr__pt_push(pr__pt_inst *in, const pr__pt_entry *e)
{
    while (pr__pt_full(in))
        pr__pt_wait_room(in);
    size_t t = __atomic_load_n(&in->tail, __ATOMIC_RELAXED);
    in->ring[t & PR__PT_MASK] = *e;
    __atomic_store_n(&in->tail, t + 1, __ATOMIC_SEQ_CST);
    /* A batch is ready, or this entry must not wait (an event, whose thread
     * now blocks; the draining flag tells the rest). */
    if (t + 1 - in->phead >= PR__PT_BATCH) /* acquire: pr__pt_full trusts phead for room */
        in->phead = __atomic_load_n(&in->head, __ATOMIC_ACQUIRE);
    if (e->kind != PR__PT_MSG || !__atomic_load_n(&in->draining, __ATOMIC_RELAXED) ||
        t + 1 - in->phead >= PR__PT_BATCH)
        pr__pt_wake_reader(in->pt);
}

/* Producer: hand the open run's messages over, in order (sealed first, so
 * the thread writes no more into a run the reader may read). */
static void pr__pt_flush(pr__pt_inst *in)
{
    if (!in->n_run)
        return;
    if (in->pt->seal)
        in->pt->seal(in->pt->prep_opaque, in->k);
    for (size_t i = 0; i < in->n_run; i++)
        pr__pt_push(in, &in->run[i]);
    in->n_run = 0;
    in->run_rows = 0;
    in->handovers++;
}

/* Producer: every run is held (what this thread held is handed over):
 * sleep until the reader starts a poll (pr__pt_wake_starved) or
 * PR__PT_FULL_MS passed. */
static void pr__pt_wait_runs(pr__pt_inst *in)
{
    pthread_mutex_lock(&in->mu);
    __atomic_store_n(&in->starved, 1, __ATOMIC_SEQ_CST);
    struct timespec ts;
    pr__pt_deadline(&ts, PR__PT_FULL_MS);
    int e = 0;
    while (__atomic_load_n(&in->starved, __ATOMIC_SEQ_CST) && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&in->cv, &in->mu, &ts);
    __atomic_store_n(&in->starved, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&in->mu);
    if (e == ETIMEDOUT)
        in->timeouts++;
    else
        in->woken++;
}

/* Reader, at the start of a poll (its previous poll's runs are released):
 * wake the polling threads that wait for a run. */
static void pr__pt_wake_starved(pr__pt *pt)
{
    for (unsigned k = 0; k < pt->n; k++) {
        pr__pt_inst *in = &pt->inst[k];
        if (__atomic_load_n(&in->starved, __ATOMIC_SEQ_CST) &&
            __atomic_exchange_n(&in->starved, 0, __ATOMIC_SEQ_CST)) {
            pr__pt_wake(&in->mu, &in->cv);
        }
    }
}

/* Producer: message m, through prep, into the ring or the open run. */
static void pr__pt_put(pr__pt_inst *in, rd_kafka_message_t *m)
{
    pr__pt *pt = in->pt;
    pr__pt_entry e = {.kind = PR__PT_MSG, .inst = in->k, .m = m, .f.nrec = -1};
    int rc = PR__PT_NOW;
    int64_t until = 0;
    for (unsigned naps = 0; pt->prep && !m->err; naps++) {
        rc = pt->prep(pt->prep_opaque, in->k, m, &e);
        if (rc != PR__PT_BUSY)
            break;
        /* Every run is held: what this thread holds goes over first (the
         * reader cannot release it otherwise), then a wait; after
         * PR__PT_BUSY_MS the reader is busy elsewhere: m goes undecoded. */
        in->held++;
        pr__pt_flush(in);
        int64_t now = pt->nap ? 0 : pr_mono_ns() / 1000;
        if (!until)
            until = now + PR__PT_BUSY_MS * 1000;
        if ((pt->nap ? naps >= PR__PT_BUSY_MS * 1000 / PR__PT_NAP_US : now >= until) ||
            __atomic_load_n(&pt->stop, __ATOMIC_ACQUIRE)) {
            rc = PR__PT_NOW;
            break;
        }
        if (pt->nap)
            nanosleep(&(struct timespec){.tv_nsec = PR__PT_NAP_US * 1000L}, NULL);
        else
            pr__pt_wait_runs(in);
    }
    if (rc == PR__PT_RUN) {
        in->run[in->n_run++] = e;
        in->run_rows += e.f.dec.nrows;
        if (in->n_run == PR__PT_RUN_MAX || (!pt->nap && in->run_rows >= PR__PT_RUN_ROWS))
            pr__pt_flush(in);
        return;
    }
    pr__pt_flush(in);
    pr__pt_push(in, &e);
}

/* Reader: tell the producer what was taken (rhead); a producer on a full
 * ring waits until half of it is free (pr__pt_wait_room): woken then, not
 * per entry. */
static void pr__pt_publish(pr__pt_inst *in)
{
    size_t h = in->rhead;
    if (__atomic_load_n(&in->head, __ATOMIC_RELAXED) == h)
        return;
    __atomic_store_n(&in->head, h, __ATOMIC_SEQ_CST);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&in->full_wait, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&in->tail, __ATOMIC_SEQ_CST) - h <= PR__PT_RING / 2) {
        pr__pt_wake(&in->mu, &in->cv);
    }
}

/* Reader: how many entries of instance in wait (tail is reread only when
 * the reader's copy says none). */
static size_t pr__pt_avail(pr__pt_inst *in)
{
    if (in->rhead == in->rtail) {
        pr__pt_publish(in);
        in->rtail = __atomic_load_n(&in->tail, __ATOMIC_ACQUIRE);
    }
    return in->rtail - in->rhead;
}

/* Reader: n entries of instance in were taken; published every
 * PR__PT_PUB. */
static void pr__pt_took(pr__pt_inst *in, size_t n)
{
    in->rhead += n;
    if (in->rhead - __atomic_load_n(&in->head, __ATOMIC_RELAXED) >= PR__PT_PUB)
        pr__pt_publish(in);
}

/* Reader: the instance whose entries come next, up to a batch of one
 * before the next one's turn (pt->streak), or NULL when no ring has any. */
static pr__pt_inst *pr__pt_turn(pr__pt *pt)
{
    for (unsigned i = 0; i <= pt->n; i++) {
        pr__pt_inst *in = &pt->inst[pt->next];
        if (pt->streak < PR__PT_BATCH && pr__pt_avail(in))
            return in;
        pr__pt_publish(in);
        pt->next = (pt->next + 1) % pt->n;
        pt->streak = 0;
    }
    return NULL;
}

/* Enough to read now: a batch in some ring, or entries while no thread is
 * still moving librdkafka's queue over (or one waits on an event). */
static bool pr__pt_ready(pr__pt *pt)
{
    size_t avail = 0;
    bool draining = false;
    for (unsigned k = 0; k < pt->n; k++) {
        pr__pt_inst *in = &pt->inst[k];
        size_t n = __atomic_load_n(&in->tail, __ATOMIC_SEQ_CST) - in->rhead;
        if (n >= PR__PT_BATCH)
            return true;
        avail += n;
        if (n && in->ring[(__atomic_load_n(&in->tail, __ATOMIC_ACQUIRE) - 1) & PR__PT_MASK].kind !=
                     PR__PT_MSG)
            return true;
        draining |= __atomic_load_n(&in->draining, __ATOMIC_SEQ_CST) != 0;
    }
    return avail > 0 && !draining;
}

/* Producer: the draining flag, stored only when it changes (per message,
 * the store and the line it dirties cost the reader a miss). */
static void pr__pt_set_draining(pr__pt_inst *in, int v)
{
    if (__atomic_load_n(&in->draining, __ATOMIC_RELAXED) != v)
        __atomic_store_n(&in->draining, v, __ATOMIC_SEQ_CST);
}

static void *pr__pt_main(void *arg)
{
    pr__pt_inst *in = arg;
    pr__pt *pt = in->pt;
    char name[16];
    snprintf(name, sizeof(name), "pr:poll-%u", in->k);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&pt->mu);
    while (__atomic_load_n(&pt->gate, __ATOMIC_ACQUIRE) == 0)
        pthread_cond_wait(&pt->cv, &pt->mu);
    pthread_mutex_unlock(&pt->mu);
    if (__atomic_load_n(&pt->gate, __ATOMIC_ACQUIRE) > 0)
        while (!__atomic_load_n(&pt->stop, __ATOMIC_ACQUIRE)) {
            if (pr__pt_full(in)) {
                pr__pt_wait_room(in);
                continue;
            }
            /* What librdkafka has queued goes over without waking the
             * reader per message; once its queue is empty the reader is
             * told, then this thread waits in librdkafka. */
            rd_kafka_message_t *m = rd_kafka_consumer_poll(in->rk, 0);
            if (!m) {
                pr__pt_flush(in);
                pr__pt_set_draining(in, 0);
                pr__pt_wake_reader(pt);
                m = rd_kafka_consumer_poll(in->rk, PR__PT_POLL_MS);
            }
            pr__pt_set_draining(in, m != NULL);
            if (m)
                pr__pt_put(in, m);
        }
    pr__pt_flush(in);
    pr__pt_set_draining(in, 0);
    __atomic_store_n(&in->exited, 1, __ATOMIC_SEQ_CST);
    pr__pt_wake(&pt->mu, &pt->cv);
    return NULL;
}

static void pr__pt_open_gate(pr__pt *pt, int v)
{
    pthread_mutex_lock(&pt->mu);
    __atomic_store_n(&pt->gate, v, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pt->cv);
    pthread_mutex_unlock(&pt->mu);
}

pr__pt *pr__pt_start(rd_kafka_t *const *rks, unsigned n, pr__pt_prep_fn prep, pr__pt_seal_fn seal,
                     void *prep_opaque, char *errstr, size_t errstr_size)
{
    size_t size = sizeof(pr__pt) + n * sizeof(pr__pt_inst);
    void *mem = NULL;
    pr__pt *pt = posix_memalign(&mem, 64, size) ? NULL : mem;
    if (pt)
        memset(pt, 0, size);
    if (!pt) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
        return NULL;
    }
    pt->n = n;
    pt->prep = prep;
    pt->seal = seal;
    pt->prep_opaque = prep_opaque;
    const char *v = getenv("PIPEREC_POLL_RUNS");
    pt->nap = v && !strcmp(v, "nap");
    pthread_mutex_init(&pt->mu, NULL);
    pthread_cond_init(&pt->cv, NULL);
    for (unsigned k = 0; k < n; k++) {
        pr__pt_inst *in = &pt->inst[k];
        *in = (pr__pt_inst){.pt = pt, .k = k, .rk = rks[k]};
        pthread_mutex_init(&in->mu, NULL);
        pthread_cond_init(&in->cv, NULL);
    }
    /* Threads wait at the gate until all exist: a failure leaves nothing
     * polled (no rebalance event waiting for a reader). */
    for (unsigned k = 0; k < n; k++) {
        int e = pthread_create(&pt->inst[k].tid, NULL, pr__pt_main, &pt->inst[k]);
        if (e) {
            pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: polling thread: %s", strerror(e));
            pr__pt_open_gate(pt, -1);
            pr__pt_free(pt);
            return NULL;
        }
        pt->inst[k].started = true;
    }
    pr__pt_open_gate(pt, 1);
    return pt;
}

bool pr__pt_on_poller(const pr__pt *pt, unsigned inst)
{
    return pt && inst < pt->n && pt->inst[inst].started &&
           pthread_equal(pthread_self(), pt->inst[inst].tid);
}

void pr__pt_handoff(pr__pt *pt, unsigned inst, rd_kafka_resp_err_t err,
                    rd_kafka_topic_partition_list_t *parts)
{
    pr__pt_inst *in = &pt->inst[inst];
    pr__pt_flush(in); /* the messages polled before the event come before it */
    __atomic_store_n(&in->handing, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&in->mu);
    in->done = false;
    pthread_mutex_unlock(&in->mu);
    pr__pt_push(
        in, &(pr__pt_entry){.kind = PR__PT_REBALANCE, .inst = inst, .err = err, .parts = parts});
    pthread_mutex_lock(&in->mu);
    while (!in->done)
        pthread_cond_wait(&in->cv, &in->mu);
    pthread_mutex_unlock(&in->mu);
}

bool pr__pt_quiet(pr__pt *pt, unsigned inst)
{
    pr__pt_inst *in = &pt->inst[inst];
    return !__atomic_load_n(&in->handing, __ATOMIC_SEQ_CST) &&
           in->rhead == __atomic_load_n(&in->tail, __ATOMIC_SEQ_CST);
}

void pr__pt_done(pr__pt *pt, unsigned inst)
{
    pr__pt_inst *in = &pt->inst[inst];
    __atomic_store_n(&in->handing, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&in->mu);
    in->done = true;
    pthread_cond_broadcast(&in->cv);
    pthread_mutex_unlock(&in->mu);
}

int pr__pt_next(pr__pt *pt, int wait_ms, pr__pt_entry *out)
{
    if (wait_ms > 0) { /* a poll's first call: the previous one's runs are released */
        pr__pt_wake_starved(pt);
        for (unsigned k = 0; k < pt->n; k++)
            pr__pt_publish(&pt->inst[k]);
    }
    if (wait_ms > 0 && !pr__pt_ready(pt))
        goto sleep;
    /* Up to a batch from one instance before the next one's turn: its
     * messages then follow each other in a poll, so the rows its polling
     * thread decoded into one run are merged with one copy (taken in turn
     * per entry, every merge was of one row; per-partition order is each
     * ring's either way). */
    pr__pt_inst *in = pr__pt_turn(pt);
    if (in) {
        *out = in->ring[in->rhead & PR__PT_MASK];
        pr__pt_took(in, 1);
        pt->streak++;
        return 1;
    }
    if (wait_ms <= 0)
        return 0;
sleep:;
    /* Sleep until a batch is ready (woken by a push or a thread that found
     * librdkafka empty) or wait_ms passed; then take what there is. */
    struct timespec ts;
    pr__pt_deadline(&ts, wait_ms);
    pthread_mutex_lock(&pt->mu);
    __atomic_store_n(&pt->idle, 1, __ATOMIC_SEQ_CST);
    while (!pr__pt_ready(pt) && !__atomic_load_n(&pt->stop, __ATOMIC_ACQUIRE))
        if (pthread_cond_timedwait(&pt->cv, &pt->mu, &ts) == ETIMEDOUT)
            break;
    __atomic_store_n(&pt->idle, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&pt->mu);
    return pr__pt_next(pt, 0, out);
}

size_t pr__pt_span(pr__pt *pt, size_t max, pr__pt_entry **out)
{
    pr__pt_inst *in = pr__pt_turn(pt); /* as pr__pt_next takes them, without waiting */
    if (!in)
        return 0;
    size_t at = in->rhead & PR__PT_MASK;
    size_t lim = PR__PT_RING - at; /* in place: up to the ring's end */
    size_t n = in->rtail - in->rhead, left = PR__PT_BATCH - pt->streak;
    lim = n < lim ? n : lim;
    lim = max < lim ? max : lim;
    lim = left < lim ? left : lim;
    pr__pt_entry *e = &in->ring[at];
    size_t k = 0;
    while (k < lim && e[k].kind == PR__PT_MSG)
        k++;
    *out = e;
    return k; /* 0: an event is next (pr__pt_next's) */
}

void pr__pt_span_taken(pr__pt *pt, size_t n)
{
    pr__pt_took(&pt->inst[pt->next], n);
    pt->streak += (unsigned)n;
}

static bool pr__pt_all_exited(pr__pt *pt)
{
    for (unsigned k = 0; k < pt->n; k++)
        if (pt->inst[k].started && !__atomic_load_n(&pt->inst[k].exited, __ATOMIC_SEQ_CST))
            return false;
    return true;
}

void pr__pt_stop(pr__pt *pt, void (*serve)(void *opaque, const pr__pt_entry *e), void *opaque)
{
    if (!pt)
        return;
    __atomic_store_n(&pt->stop, 1, __ATOMIC_RELEASE);
    for (;;) {
        bool exited = pr__pt_all_exited(pt); /* before looking at the rings */
        pr__pt_entry e;
        int got = pr__pt_next(pt, exited ? 0 : 10, &e);
        if (got) {
            serve(opaque, &e);
            continue;
        }
        if (exited)
            return;
    }
}

void pr__pt_free(pr__pt *pt)
{
    if (!pt)
        return;
    __atomic_store_n(&pt->stop, 1, __ATOMIC_RELEASE);
    for (unsigned k = 0; k < pt->n; k++)
        if (pt->inst[k].started)
            pthread_join(pt->inst[k].tid, NULL);
    pr__pt_entry e;
    while (pr__pt_next(pt, 0, &e))
        if (e.kind == PR__PT_MSG && e.m)
            rd_kafka_message_destroy(e.m);
    for (unsigned k = 0; k < pt->n; k++) {
        pr__pt_inst *in = &pt->inst[k];
        if (in->handovers)
            pr_info("consumer: polling thread %u handed over %llu run(s); every run held %llu "
                    "time(s), %s %llu time(s) (%llu woken by a poll)",
                    k, (unsigned long long)in->handovers, (unsigned long long)in->held,
                    pt->nap ? "napped" : "waited",
                    (unsigned long long)(pt->nap ? in->held : in->woken + in->timeouts),
                    (unsigned long long)in->woken);
        pthread_mutex_destroy(&pt->inst[k].mu);
        pthread_cond_destroy(&pt->inst[k].cv);
    }
    pthread_mutex_destroy(&pt->mu);
    pthread_cond_destroy(&pt->cv);
    free(pt);
}
