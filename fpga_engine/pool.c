/*
 * pool.c — a persistent worker pool for the cpu backend.
 *
 * Threads are created once with the engine, not per block. The cpu backend
 * runs a block as a few dozen "phases" (two per row chunk, see cpu_backend.c),
 * each one pr__pool_run of tens of microseconds, so a run must start and end
 * in about a microsecond:
 * - Tasks are claimed with a compare-and-swap on one 64-bit word holding
 *   (run generation, next task). A helper that wakes up late cannot claim a
 *   task of a later run with the description of an earlier one: its CAS fails
 *   as soon as the generation moved on.
 * - A run ends when `n_tasks` tasks have *completed*, not when every helper has
 *   checked in. On a machine whose other core is busy (other processes), a
 *   descheduled helper that claimed nothing costs the run nothing; before, the
 *   caller waited for every helper to wake up and acknowledge, which is why 2
 *   threads ran slower than 1 on a loaded 2-core machine.
 * - Waiting spins briefly (a run usually follows the previous one within
 *   microseconds), then sleeps on a futex; wake-ups are only issued when
 *   someone is known to sleep (Dekker-style: announce, then re-check).
 * - The words written in the hot path (claim word, completion counter) live
 *   on their own cache lines; the run description is written once per run.
 * Which worker runs which task varies from run to run; callers make results
 * independent of that (one column = one task, processed in row order).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "engine_int.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PR__CPU_RELAX() _mm_pause()
#else
#define PR__CPU_RELAX() atomic_signal_fence(memory_order_seq_cst)
#endif

/* Spin iterations before sleeping (a pause is ~10-140 cycles: some tens of
 * microseconds in all, about one chunk phase). */
#define PR__SPIN 4000

struct pr__pool {
    int threads;
    pthread_t *tids;
    /* run description: written by the caller before it publishes the run */
    pr__task_fn fn;
    void *ctx;
    _Alignas(64) _Atomic uint64_t claim; /* gen << 32 | n_tasks << 16 | next task */
    _Alignas(64) atomic_uint gen;        /* futex word helpers sleep on */
    atomic_int sleepers;
    atomic_bool stop;
    _Alignas(64) atomic_uint done; /* tasks completed in the current run; futex word */
    atomic_int caller_sleeping;
};

typedef struct {
    pr__pool *p;
    int worker;
} pr__pool_arg;

static void pr__futex_wait(atomic_uint *w, unsigned val)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void pr__futex_wake(atomic_uint *w)
{
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claim and run tasks of generation `gen` until none is left. The task count
 * sits in the claim word: checking "next < n" and claiming must be one atomic
 * step, or a helper late from the previous run could pair that run's claim
 * word with the next run's count. */
static void pr__pool_work(pr__pool *p, uint32_t gen, int worker)
{
    uint64_t w = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(w >> 32) != gen)
            return;
        uint32_t t = (uint32_t)w & 0xffff, n = ((uint32_t)w >> 16) & 0xffff;
        if (t >= n)
            return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &w, w + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* the run cannot end before this task completes: fn and ctx are its */
        p->fn(p->ctx, t, worker);
        unsigned d = atomic_fetch_add_explicit(&p->done, 1, memory_order_seq_cst) + 1;
        if (d == n && atomic_load_explicit(&p->caller_sleeping, memory_order_seq_cst))
            pr__futex_wake(&p->done);
        /* after the last completion the caller may start the next run at once */
        w = atomic_load_explicit(&p->claim, memory_order_acquire);
    }
}

static void *pr__pool_main(void *arg)
{
    pr__pool_arg a = *(pr__pool_arg *)arg;
    free(arg);
    pr__pool *p = a.p;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < PR__SPIN; i++) {
            PR__CPU_RELAX();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen && !atomic_load(&p->stop)) {
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pr__futex_wait(&p->gen, seen);
            atomic_fetch_sub(&p->sleepers, 1);
        }
        if (atomic_load(&p->stop))
            break;
        seen = g;
        pr__pool_work(p, g, a.worker);
    }
    return NULL;
}

pr__pool *pr__pool_new(int threads)
{
    if (threads < 1)
        threads = 1;
    pr__pool *p = pr__zalloc_aligned(sizeof(*p));
    if (!p)
        return NULL;
    p->threads = threads;
    atomic_init(&p->claim, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->done, 0);
    atomic_init(&p->caller_sleeping, 0);
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
    if (p->threads == 1 || n_tasks <= 1 || n_tasks > PR__POOL_MAX_TASKS) {
        for (uint32_t t = 0; t < n_tasks; t++)
            fn(ctx, t, 0);
        return;
    }
    /* Every task of the previous run has completed, so no helper reads the
     * description now; a late helper still holding the old generation fails
     * its CAS in pr__pool_work. */
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->claim, (uint64_t)g << 32 | (uint64_t)n_tasks << 16,
                          memory_order_release);
    atomic_store_explicit(&p->gen, g, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst))
        pr__futex_wake(&p->gen);
    pr__pool_work(p, g, 0);
    unsigned d = atomic_load_explicit(&p->done, memory_order_acquire);
    for (int i = 0; d != n_tasks && i < PR__SPIN; i++) {
        PR__CPU_RELAX();
        d = atomic_load_explicit(&p->done, memory_order_acquire);
    }
    if (d != n_tasks) {
        atomic_store_explicit(&p->caller_sleeping, 1, memory_order_seq_cst);
        while ((d = atomic_load_explicit(&p->done, memory_order_seq_cst)) != n_tasks)
            pr__futex_wait(&p->done, d);
        atomic_store_explicit(&p->caller_sleeping, 0, memory_order_relaxed);
    }
}

int pr__pool_threads(const pr__pool *p)
{
    return p->threads;
}

void pr__pool_free(pr__pool *p)
{
    if (!p)
        return;
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
    pr__futex_wake(&p->gen);
    for (int i = 1; i < p->threads && p->tids; i++)
        pthread_join(p->tids[i], NULL);
    free(p->tids);
    pr__free_aligned(p);
}
