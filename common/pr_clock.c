/* pr_clock.c — the real clock and the manual (test) clock. */
#include "pr_clock.h"

#include <time.h>

int64_t pr_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t pr_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t pr__real_mono_ns(void *ctx)
{
    (void)ctx;
    return pr_mono_ns();
}

static int64_t pr__real_wall_ms(void *ctx)
{
    (void)ctx;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

static const pr_clock pr_real_clock = {pr__real_mono_ns, pr__real_wall_ms, NULL};

const pr_clock *pr_clock_real(void)
{
    return &pr_real_clock;
}

static int64_t pr__manual_mono_ns(void *ctx)
{
    return ((pr_manual_clock *)ctx)->mono_ns;
}
static int64_t pr__manual_wall_ms(void *ctx)
{
    return ((pr_manual_clock *)ctx)->wall_ms;
}

void pr_manual_clock_init(pr_manual_clock *mc, int64_t wall_ms)
{
    mc->clock.mono_ns = pr__manual_mono_ns;
    mc->clock.wall_ms = pr__manual_wall_ms;
    mc->clock.ctx = mc;
    mc->mono_ns = 1000000000LL;
    mc->wall_ms = wall_ms;
}

void pr_manual_clock_advance_ms(pr_manual_clock *mc, int64_t ms)
{
    mc->mono_ns += ms * 1000000LL;
    mc->wall_ms += ms;
}
