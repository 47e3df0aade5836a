/*
 * pool.c — a persistent worker pool for the cpu backend.
 *
 * Threads are created once with the engine, not per block: a block of 64K
 * rows takes about a millisecond, thread creation would be a visible part of
 * it. Each pr__pool_run is one "phase": tasks are claimed through an atomic
 * counter (no lock on the hot path), the caller works too, and the call
 * returns once every task is done. Which worker runs which task varies from
 * run to run; callers make results independent of that (one column = one
 * task, processed in row order).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "engine_int.h"

struct pr__pool {
    int threads;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start_cv;
    pthread_cond_t done_cv;
    uint64_t generation; /* bumped per run, under mu */
    int finished;        /* helper threads done with the current run, under mu */
    bool stop;
    /* current run */
    pr__task_fn fn;
    void *ctx;
    uint32_t n_tasks;
    atomic_uint next;
};

typedef struct {
    pr__pool *p;
    int worker;
} pr__pool_arg;

static void pr__pool_work(pr__pool *p, int worker)
{
    for (;;) {
        unsigned t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks)
            return;
        p->fn(p->ctx, t, worker);
    }
}

static void *pr__pool_main(void *arg)
{
    pr__pool_arg a = *(pr__pool_arg *)arg;
    free(arg);
    pr__pool *p = a.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->start_cv, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        pr__pool_work(p, a.worker);
        pthread_mutex_lock(&p->mu);
        if (++p->finished == p->threads - 1)
            pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

pr__pool *pr__pool_new(int threads)
{
    if (threads < 1)
        threads = 1;
    pr__pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->start_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    atomic_init(&p->next, 0);
    p->tids = calloc((size_t)threads, sizeof(*p->tids));
    if (!p->tids)
        goto fail;
    for (int i = 1; i < threads; i++) {
        pr__pool_arg *a = malloc(sizeof(*a));
        if (!a || (a->p = p, a->worker = i, pthread_create(&p->tids[i], NULL, pr__pool_main, a))) {
            free(a);
            p->threads = i; /* only join the ones that exist */
            goto fail;
        }
    }
    return p;
fail:
    pr__pool_free(p);
    return NULL;
}

void pr__pool_run(pr__pool *p, uint32_t n_tasks, pr__task_fn fn, void *ctx)
{
    if (p->threads == 1 || n_tasks <= 1) {
        for (uint32_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->finished = 0;
    p->generation++;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    pr__pool_work(p, 0);
    pthread_mutex_lock(&p->mu);
    while (p->finished < p->threads - 1)
        pthread_cond_wait(&p->done_cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

int pr__pool_threads(const pr__pool *p) { return p->threads; }

void pr__pool_free(pr__pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->start_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->threads && p->tids; i++)
        pthread_join(p->tids[i], NULL);
    free(p->tids);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->start_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}
