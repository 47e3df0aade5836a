/*
 * worker.c — the worker of one pipeline and its state machine.
 *
 * One block at a time goes from the pipeline thread (which owns the
 * consumer, its dead-letter producer and every offset decision) to the
 * worker (engine, batcher, sinks' send path) and back; the pipeline thread
 * touches the engine, the batcher and the sinks only while the worker is
 * not running (its duties, the rebalance callbacks after pr__worker_join).
 * So the order of blocks, and with it every result, is that of one thread;
 * the overlap is reading and decoding the next block meanwhile, and
 * encoding and sending the batches the worker emitted ("Deferred sends":
 * then the sinks are the pipeline thread's alone).
 *
 * The handoff is the four-state machine pr__wstate (pipe.h): every change
 * goes through pr__wstate_set, under wlock, which logs the transition at
 * debug level, so a trace shows each block's way through the worker.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipe.h"
#include "pr_env.h"
#include "pr_log.h"

static const char *const pr__wstate_names[PR__W__COUNT] = {
    [PR__W_IDLE] = "idle",
    [PR__W_RUNNING] = "running",
    [PR__W_DONE] = "done",
    [PR__W_HELD] = "held",
};

const char *pr__wstate_name(pr__wstate st)
{
    return st >= 0 && st < PR__W__COUNT ? pr__wstate_names[st] : "?";
}

/* The one place wstate changes. @locks wlock MUST be held (or, with
 * engine.overlap off, no worker thread exists). */
static void pr__wstate_set(pr__pipe *p, pr__wstate st)
{
    if (p->wstate == st)
        return;
    pr_debug("pipeline %s: worker %s -> %s (%u rows)", p->cfg->name, pr__wstate_name(p->wstate),
             pr__wstate_name(st), p->wblk ? p->wblk->rows : 0);
    p->wstate = st;
}

/* ---------------------------------------------------------------- phase profile
 *
 * PIPEREC_WORKER_PROF=1: the worker's thread CPU and wall time per phase of
 * a block (issue 21: its serial part per row is the 16-core bound of a
 * pipeline), logged when the worker stops (at warn level: the benches log
 * warnings only, and the switch is asked for). The engine phase
 * is the one the pool shares (the worker takes columns like any pool
 * worker); every other phase runs on the worker alone. */

enum pr__wprof {
    PR__WP_VOCAB_CPU,
    PR__WP_VOCAB_WALL,
    PR__WP_ENGINE_CPU,
    PR__WP_ENGINE_WALL,
    PR__WP_HOT_CPU, /* schema side tables + hot sets */
    PR__WP_BATCHER_CPU,
    PR__WP_COPY_CPU,     /* of BATCHER: column copies */
    PR__WP_EMIT_CPU,     /* of BATCHER: emission bookkeeping */
    PR__WP_CALLBACK_CPU, /* of BATCHER: on_emit (encoding, sink offers) */
    PR__WP_RUN_CPU,
    PR__WP_RUN_WALL,
    PR__WP_ROWS,
    PR__WP_BLOCKS,
    PR__WP__COUNT
};
_Static_assert(PR__WP__COUNT <= sizeof(((pr__pipe *)0)->wprof) / sizeof(uint64_t),
               "pr__pipe.wprof holds every slot");

typedef struct pr__wmark {
    uint64_t cpu, wall;
} pr__wmark;

static pr__wmark pr__wprof_mark(const pr__pipe *p)
{
    pr__wmark m = {0, 0};
    if (p->wprof_on) {
        m.cpu = (uint64_t)pr_thread_cpu_ns();
        m.wall = (uint64_t)pr_mono_ns();
    }
    return m;
}

/* Add the time since m to slot cpu (and wall, >= 0); m becomes now. */
static void pr__wprof_add(pr__pipe *p, pr__wmark *m, int cpu, int wall)
{
    if (!p->wprof_on)
        return;
    pr__wmark n = pr__wprof_mark(p);
    p->wprof[cpu] += n.cpu - m->cpu;
    if (wall >= 0)
        p->wprof[wall] += n.wall - m->wall;
    *m = n;
}

static void pr__wprof_batcher(pr__pipe *p, const uint64_t before[PR_BATCHER_PROF__COUNT])
{
    uint64_t now[PR_BATCHER_PROF__COUNT];
    pr_batcher_prof(p->bat, now);
    p->wprof[PR__WP_COPY_CPU] += now[PR_BATCHER_PROF_COPY] - before[PR_BATCHER_PROF_COPY];
    p->wprof[PR__WP_EMIT_CPU] += now[PR_BATCHER_PROF_EMIT] - before[PR_BATCHER_PROF_EMIT];
    p->wprof[PR__WP_CALLBACK_CPU] +=
        now[PR_BATCHER_PROF_CALLBACK] - before[PR_BATCHER_PROF_CALLBACK];
}

/* The log line at stop: ns per row of each phase; "serial" is the worker's
 * CPU outside the engine phase (what the pool cannot take). */
static void pr__wprof_log(const pr__pipe *p)
{
    const uint64_t *w = p->wprof;
    if (!p->wprof_on || !w[PR__WP_ROWS])
        return;
    double r = (double)w[PR__WP_ROWS];
    pr_warn("pipeline %s: worker profile: %" PRIu64 " rows %" PRIu64
            " blocks; ns/row: run cpu %.1f wall %.1f, serial cpu %.1f; vocab cpu %.1f "
            "wall %.1f; engine cpu %.1f wall %.1f; hot %.1f; batcher %.1f (copy %.1f, emit "
            "%.1f, on_emit %.1f, append %.1f)",
            p->cfg->name, w[PR__WP_ROWS], w[PR__WP_BLOCKS], w[PR__WP_RUN_CPU] / r,
            w[PR__WP_RUN_WALL] / r, (w[PR__WP_RUN_CPU] - w[PR__WP_ENGINE_CPU]) / r,
            w[PR__WP_VOCAB_CPU] / r, w[PR__WP_VOCAB_WALL] / r, w[PR__WP_ENGINE_CPU] / r,
            w[PR__WP_ENGINE_WALL] / r, w[PR__WP_HOT_CPU] / r, w[PR__WP_BATCHER_CPU] / r,
            w[PR__WP_COPY_CPU] / r, w[PR__WP_EMIT_CPU] / r, w[PR__WP_CALLBACK_CPU] / r,
            ((double)w[PR__WP_BATCHER_CPU] - w[PR__WP_COPY_CPU] - w[PR__WP_EMIT_CPU] -
             w[PR__WP_CALLBACK_CPU]) /
                r);
}

/* ---------------------------------------------------------------- one block */

/* Checkpoint delivery: rows a trainer's durable checkpoint already holds
 * (the resume position trainers send, docs/trainer-protocol.md) are neither
 * batched nor sent again; their offsets count as done, like an empty
 * message's. They come back after a crash that lost the commit of a
 * checkpoint that did become durable. */
static void pr__skip_checkpointed(pr__pipe *p, pr_block *b)
{
    if (!p->skip || p->skip_cap < b->rows) {
        uint8_t *n = realloc(p->skip, b->cap);
        if (!n)
            return; /* nothing skipped: at-least-once still holds */
        p->skip = n;
        p->skip_cap = b->cap;
    }
    const pr_pipeline_cfg *pc = p->cfg;
    uint32_t k =
        pr_sink_resume_filter(p->ckpt_sink, (const char *const *)pc->source.kafka.topics,
                              pc->source.kafka.n_topics, b->partition, b->offset, b->rows, p->skip);
    if (!k)
        return;
    for (uint32_t r = 0; r < b->rows; r++)
        if (p->skip[r])
            pr_batcher_note_consumed(p->bat, b->partition[r], b->offset[r] + 1);
    pr__block_drop_revoked(p, b, p->skip);
    atomic_fetch_add(&p->ckpt_skipped, k);
}

/* Engine + batcher for one block (the worker, or the pipeline thread when
 * engine.overlap is off). With a shared vocabulary PR_EAGAIN while the
 * block's new values wait for the log (each call waits a few ms): run it
 * again. Dead letters are left to pr__worker_collect (pipeline thread). */
static int pr__block_steps(pr__pipe *p, pr_block *b, pr_out *o)
{
    char e[512] = "";
    int rc;
    pr__wmark m = pr__wprof_mark(p);
    if (p->ckpt_sink && !p->w_skip_done) {
        p->w_skip_done = true;
        if (b->rows)
            pr__skip_checkpointed(p, b);
    }
    if (b->rows == 0)
        return 0;
    rc = pr_vocab_store_resolve(p->vs, b, PR__VLOG_WAIT_MS, e, sizeof(e));
    pr__wprof_add(p, &m, PR__WP_VOCAB_CPU, PR__WP_VOCAB_WALL);
    if (rc == PR_EAGAIN)
        return rc;
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof(msg), "vocab log: %s (%s)", e, pr_strerror(rc));
        pr__set_fatal(p, rc, msg);
        return rc;
    }
    rc = pr_engine_process(p->eng, b, o, e, sizeof(e));
    pr__wprof_add(p, &m, PR__WP_ENGINE_CPU, PR__WP_ENGINE_WALL);
    if (!rc)
        rc = pr__schema_finish(p, b, o, e, sizeof(e)); /* a declared schema's side tables */
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s%s (%s)", strncmp(e, "engine: ", 8) ? "engine: " : "", e,
                 pr_strerror(rc));
        pr__set_fatal(p, rc, msg);
        return rc;
    }
    /* Hot sets first, so that batch.split popular classifies each row
     * against sets that have seen its block (pr_hot.h). */
    uint64_t *popular = NULL;
    if (p->hot) {
        pthread_mutex_lock(&p->hot_lock);
        if (o->side) /* a declared schema: one sketch per vocab feature */
            for (uint16_t f = 0; f < o->side->n_feat; f++) {
                int c = o->side->vocab_col[f];
                if (c >= 0 && (uint32_t)c < o->n_sparse)
                    pr_hot_observe_side(p->hot[c], o, f);
            }
        else
            for (uint32_t c = 0; c < o->n_sparse; c++)
                pr_hot_observe_out(p->hot[c], o, c);
        /* Checkpoint delivery needs exact offset ranges per batch, which two
         * interleaved streams cannot give: it keeps one stream. */
        if (p->cfg->batch.split == PR_BATCH_SPLIT_POPULAR && !p->ckpt_sink) {
            popular = pr_hot_popular_rows(p->hot, o); /* NULL: none popular */
            pr_batcher_hot_version(p->bat, pr_hot_sets_version(p->hot, o->n_sparse));
        }
        pthread_mutex_unlock(&p->hot_lock);
    }
    uint64_t bprof[PR_BATCHER_PROF__COUNT];
    pr_batcher_prof(p->bat, bprof);
    pr__wprof_add(p, &m, PR__WP_HOT_CPU, -1);
    rc = pr_batcher_add_split(p->bat, b, o, popular);
    pr__wprof_add(p, &m, PR__WP_BATCHER_CPU, -1);
    if (p->wprof_on)
        pr__wprof_batcher(p, bprof);
    free(popular);
    if (rc) {
        pr__set_fatal(p, rc, "batcher refused rows");
        return rc;
    }
    return 0;
}

static int pr__block_run(pr__pipe *p, pr_block *b, pr_out *o)
{
    pr__wmark m = pr__wprof_mark(p);
    uint32_t rows = b->rows;
    int rc = pr__block_steps(p, b, o);
    if (p->wprof_on && rc != PR_EAGAIN) {
        pr__wprof_add(p, &m, PR__WP_RUN_CPU, PR__WP_RUN_WALL);
        p->wprof[PR__WP_ROWS] += rows;
        p->wprof[PR__WP_BLOCKS]++;
    }
    return rc;
}

/* ---------------------------------------------------------------- deferred sends
 *
 * Issue 21: encoding a batch (pr_batch_encode: a full copy of its tensors
 * into fresh memory) and offering it to the sinks was about half of the
 * worker's serial CPU per row. The batches the worker emits now go, in
 * sequence order, to a queue the pipeline thread drains: right after it
 * hands the worker its next block (so the encoding overlaps that block's
 * engine and batcher), whenever it finds no block to start, and before
 * anything else it emits or does with the sinks (pr__emit_cb, join). The
 * batches, their sequence numbers and the order of sends are the same; only
 * the thread that encodes and offers them changes, and with deferral on the
 * sinks are used by the pipeline thread alone. Offsets are unaffected: a
 * batch's offsets become safe only when every sink acked it, after its
 * send. Checkpoint delivery keeps the old path (the worker filters rows
 * through the checkpoint sink). PIPEREC_WORKER_DEFER_EMIT=0: the worker
 * sends as before (the baseline). */

/* The pipeline's worker-side state: the send queue and the two switches,
 * read once here (pr_env.h). */
void pr__worker_init(pr__pipe *p)
{
    pthread_mutex_init(&p->emitq_lock, NULL);
    p->emitq_on = pr_env_switch("PIPEREC_WORKER_DEFER_EMIT", true);
    p->wprof_on = pr_env_switch("PIPEREC_WORKER_PROF", false);
}

void pr__worker_fini(pr__pipe *p)
{
    while (p->emitq_head) {
        pr_batch *b = p->emitq_head;
        p->emitq_head = b->send_next;
        pr_batch_unref(b);
    }
    p->emitq_tail = NULL;
    pthread_mutex_destroy(&p->emitq_lock);
}

/* On the worker thread (deferral on): queue b (a reference of its own) and
 * return true. Elsewhere: false (send now). */
bool pr__emit_defer(pr__pipe *p, pr_batch *b)
{
    if (!p->emitq_on || p->ckpt_sink || !p->wthread_started ||
        !pthread_equal(pthread_self(), p->wthread))
        return false;
    b->send_next = NULL;
    pr_batch_ref(b);
    pthread_mutex_lock(&p->emitq_lock);
    if (p->emitq_tail)
        p->emitq_tail->send_next = b;
    else
        p->emitq_head = b;
    p->emitq_tail = b;
    pthread_mutex_unlock(&p->emitq_lock);
    return true;
}

/* Send the queued batches, oldest first (the pipeline thread; the worker
 * only finds it empty). */
void pr__emit_drain(pr__pipe *p)
{
    for (;;) {
        pthread_mutex_lock(&p->emitq_lock);
        pr_batch *b = p->emitq_head;
        if (b) {
            p->emitq_head = b->send_next;
            if (!p->emitq_head)
                p->emitq_tail = NULL;
            b->send_next = NULL;
        }
        pthread_mutex_unlock(&p->emitq_lock);
        if (!b)
            return;
        pr__emit_send(p, b);
        pr_batch_unref(b);
    }
}

/* ---------------------------------------------------------------- the worker
 *
 * One block at a time goes from the pipeline thread (which owns the
 * consumer, its dead-letter producer and every offset decision) to the
 * worker (engine, batcher, sinks' send path) and back; the pipeline thread
 * touches the engine, the batcher and the sinks only while the worker is
 * not running (its duties, the rebalance callbacks after pr__worker_join).
 * So the order of blocks, and with it every result, is that of one thread;
 * the overlap is reading and decoding the next block meanwhile. */

void *pr__worker_main(void *arg)
{
    pr__pipe *p = arg;
    char tname[16];
    snprintf(tname, sizeof(tname), "pr:%.9s-w", p->cfg->name);
    pthread_setname_np(pthread_self(), tname);
    pthread_mutex_lock(&p->wlock);
    for (;;) {
        while (p->wstate != PR__W_RUNNING && !p->wquit)
            pthread_cond_wait(&p->wcond, &p->wlock);
        if (p->wquit)
            break;
        pthread_mutex_unlock(&p->wlock);
        int rc = pr__block_run(p, p->wblk, p->wout);
        pthread_mutex_lock(&p->wlock);
        p->wrc = rc;
        pr__wstate_set(p, PR__W_DONE);
        pthread_cond_broadcast(&p->wcond);
    }
    pthread_mutex_unlock(&p->wlock);
    return NULL;
}

pr__wstate pr__wstate_get(pr__pipe *p)
{
    pthread_mutex_lock(&p->wlock);
    pr__wstate st = p->wstate;
    pthread_mutex_unlock(&p->wlock);
    return st;
}

/* A finished run, on the pipeline thread: dead letters of its engine
 * rejects and late rows, then the block is free again (or held, when it
 * waits for the vocab log; or kept, rows and all, after a fatal error so
 * that its offsets are never stored). Returns the worker's state after
 * that: IDLE, HELD or RUNNING, never DONE. The caller must act on this
 * value, not on a second look at wstate: a run that ends between the two
 * would read DONE, and treating DONE as "not running" swapped in the
 * finished block before it was reset, so its rows ran twice. */
static pr__wstate pr__collect_run(pr__pipe *p)
{
    pthread_mutex_lock(&p->wlock);
    if (p->wstate != PR__W_DONE) {
        pr__wstate st = p->wstate;
        pthread_mutex_unlock(&p->wlock);
        return st;
    }
    int rc = p->wrc;
    pr__wstate st = rc == PR_EAGAIN ? PR__W_HELD : PR__W_IDLE;
    pr__wstate_set(p, st);
    pthread_mutex_unlock(&p->wlock);
    if (rc == PR_EAGAIN)
        return st;
    if (p->n_late)
        pr__send_late(p);
    if (rc)
        return st;
    if (p->wout->n_rejected && p->wblk->rows)
        pr__dead_letter_engine_rejects(p, p->wblk, p->wout);
    pr_block_reset(p->wblk);
    p->wout->n_rejected = 0;
    return st;
}

/* Deferred sends go out here unless a block is about to be dispatched
 * (which sends them beside its run): the worker is running, or idle with
 * nothing to start. */
pr__wstate pr__worker_collect(pr__pipe *p)
{
    pr__wstate st = pr__collect_run(p);
    if (st == PR__W_RUNNING || (st == PR__W_IDLE && p->blk->rows == 0))
        pr__emit_drain(p);
    return st;
}

/* Hand wblk to the worker (or run it here when engine.overlap is off). */
void pr__worker_dispatch(pr__pipe *p)
{
    if (!p->wthread_started) {
        pr__wstate_set(p, PR__W_RUNNING);
        p->wrc = pr__block_run(p, p->wblk, p->wout);
        pr__wstate_set(p, PR__W_DONE);
        pr__worker_collect(p);
        return;
    }
    pthread_mutex_lock(&p->wlock);
    pr__wstate_set(p, PR__W_RUNNING);
    pthread_cond_broadcast(&p->wcond);
    pthread_mutex_unlock(&p->wlock);
    pr__emit_drain(p); /* the previous blocks' batches, beside this one's run */
}

/* Wait until the worker is not running, up to timeout_ms (< 0: for good),
 * and collect what it finished. */
void pr__worker_wait(pr__pipe *p, int timeout_ms)
{
    pthread_mutex_lock(&p->wlock);
    if (timeout_ms < 0) {
        while (p->wstate == PR__W_RUNNING)
            pthread_cond_wait(&p->wcond, &p->wlock);
    } else if (p->wstate == PR__W_RUNNING) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)timeout_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&p->wcond, &p->wlock, &ts);
    }
    pthread_mutex_unlock(&p->wlock);
    pr__worker_collect(p);
}

void pr__worker_join(pr__pipe *p)
{
    pr__worker_wait(p, -1);
    pr__emit_drain(p); /* the caller may use the sinks or wait for acks */
}

/* Swap the filled block in as the worker's and start it. */
void pr__worker_start_block(pr__pipe *p)
{
    pr_block *t = p->wblk;
    p->wblk = p->blk;
    p->blk = t;
    p->ahead_rows = 0;
    p->w_skip_done = false;
    pr__worker_dispatch(p);
}

/* Stop the worker thread (after the drain: the worker is idle). */
void pr__worker_quit(pr__pipe *p)
{
    pr__wprof_log(p);
    p->wprof[PR__WP_ROWS] = 0; /* logged once */
    if (!p->wthread_started)
        return;
    pthread_mutex_lock(&p->wlock);
    p->wquit = true;
    pthread_cond_broadcast(&p->wcond);
    pthread_mutex_unlock(&p->wlock);
    pthread_join(p->wthread, NULL);
    p->wthread_started = false;
}
