/*
 * pr_clock.h — injectable clocks.
 *
 * Everything that reads time (batcher deadlines, freshness, rate limits) takes a
 * pr_clock so tests drive time explicitly instead of sleeping. The real clock
 * reads CLOCK_MONOTONIC for intervals and CLOCK_REALTIME for wall time.
 */
#ifndef PR_CLOCK_H
#define PR_CLOCK_H

#include <stdint.h>

typedef struct pr_clock {
    /* Monotonic nanoseconds (intervals, deadlines). */
    int64_t (*mono_ns)(void *ctx);
    /* Wall-clock milliseconds since the Unix epoch (event/emit times). */
    int64_t (*wall_ms)(void *ctx);
    void *ctx;
} pr_clock;

/* CLOCK_MONOTONIC in nanoseconds: the one reading for code that times itself
 * (statistics, benchmarks, kernel timing) and takes no injected clock. */
int64_t pr_mono_ns(void);
/* The calling thread's CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID):
 * the per-phase profiles (PIPEREC_WORKER_PROF). */
int64_t pr_thread_cpu_ns(void);

/* The process clock; a static object, never freed. */
const pr_clock *pr_clock_real(void);

/* A manual clock for tests: starts at the given times, moves only when told. */
typedef struct pr_manual_clock {
    pr_clock clock;
    int64_t mono_ns;
    int64_t wall_ms;
} pr_manual_clock;

void pr_manual_clock_init(pr_manual_clock *mc, int64_t wall_ms);
/* Advance both readings by `ms` milliseconds. */
void pr_manual_clock_advance_ms(pr_manual_clock *mc, int64_t ms);

static inline int64_t pr_clock_mono_ns(const pr_clock *c)
{
    return c->mono_ns(c->ctx);
}
static inline int64_t pr_clock_wall_ms(const pr_clock *c)
{
    return c->wall_ms(c->ctx);
}

#endif
