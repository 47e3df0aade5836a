/*
 * reaper.c — the thread that destroys consumed librdkafka messages for the
 * pipeline thread (reaper.h says why and when it is safe).
 *
 * The pipeline thread fills a private batch; a full batch is appended to
 * the shared array under the mutex (or destroyed inline when that array is
 * full), and the reaper is signalled. The reaper swaps the shared array
 * with its spare one, destroys outside the lock, and tells a waiting flush
 * when it has nothing left.
 */
#define _GNU_SOURCE
#include "reaper.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PR__REAP_BATCH 256
#define PR__REAP_CAP   8192

struct pr__reaper {
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;                    /* the reaper: work or stop */
    pthread_cond_t idle;                  /* a flush: the reaper has nothing left */
    rd_kafka_message_t **shared, **spare; /* PR__REAP_CAP each */
    size_t n_shared;                      /* under mu */
    bool busy, stop;                      /* under mu */
    /* The pipeline thread's own. */
    rd_kafka_message_t *pend[PR__REAP_BATCH];
    unsigned n_pend;
    unsigned long long inline_n;
};

static void *pr__reaper_main(void *arg)
{
    pr__reaper *r = arg;
    pthread_setname_np(pthread_self(), "pr:reap");
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->n_shared && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
        if (!r->n_shared)
            break; /* stop, and nothing left */
        rd_kafka_message_t **take = r->shared;
        size_t n = r->n_shared;
        r->shared = r->spare;
        r->n_shared = 0;
        r->busy = true;
        pthread_mutex_unlock(&r->mu);
        for (size_t i = 0; i < n; i++)
            rd_kafka_message_destroy(take[i]);
        pthread_mutex_lock(&r->mu);
        r->spare = take;
        r->busy = false;
        if (!r->n_shared)
            pthread_cond_broadcast(&r->idle);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

pr__reaper *pr__reaper_start(void)
{
    pr__reaper *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->shared = malloc(PR__REAP_CAP * sizeof(*r->shared));
    r->spare = malloc(PR__REAP_CAP * sizeof(*r->spare));
    if (!r->shared || !r->spare)
        goto out_free;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    pthread_cond_init(&r->idle, NULL);
    if (pthread_create(&r->tid, NULL, pr__reaper_main, r) != 0) {
        pthread_cond_destroy(&r->idle);
        pthread_cond_destroy(&r->cv);
        pthread_mutex_destroy(&r->mu);
        goto out_free;
    }
    return r;
out_free:
    free(r->shared);
    free(r->spare);
    free(r);
    return NULL;
}

/* The pipeline thread's batch to the reaper, or destroyed here when the
 * reaper is PR__REAP_CAP behind. */
static void pr__reaper_hand(pr__reaper *r)
{
    unsigned n = r->n_pend;
    r->n_pend = 0;
    pthread_mutex_lock(&r->mu);
    bool room = r->n_shared + n <= PR__REAP_CAP;
    if (room) {
        memcpy(r->shared + r->n_shared, r->pend, n * sizeof(*r->pend));
        r->n_shared += n;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (!room) {
        for (unsigned i = 0; i < n; i++)
            rd_kafka_message_destroy(r->pend[i]);
        r->inline_n += n;
    }
}

void pr__reaper_put(pr__reaper *r, rd_kafka_message_t *m)
{
    r->pend[r->n_pend++] = m;
    if (r->n_pend == PR__REAP_BATCH)
        pr__reaper_hand(r);
}

void pr__reaper_kick(pr__reaper *r)
{
    if (r->n_pend)
        pr__reaper_hand(r);
}

void pr__reaper_flush(pr__reaper *r)
{
    if (!r)
        return;
    if (r->n_pend)
        pr__reaper_hand(r);
    pthread_mutex_lock(&r->mu);
    while (r->n_shared || r->busy)
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

unsigned long long pr__reaper_stop(pr__reaper *r)
{
    if (!r)
        return 0;
    pr__reaper_flush(r);
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->tid, NULL);
    unsigned long long n = r->inline_n;
    pthread_cond_destroy(&r->idle);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->shared);
    free(r->spare);
    free(r);
    return n;
}
