/* pr_log.c — stderr logger; one fprintf per line so threads do not interleave. */
#include "pr_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static pr_log_level pr_log_level_cur = PR_LOG_INFO;
static const char *const pr_log_names[] = {"error", "warn", "info", "debug"};

void pr_log_set_level(pr_log_level lvl)
{
    pr_log_level_cur = lvl;
}

static void pr_vlog(pr_log_level lvl, const char *suffix, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    fprintf(stderr, "piperec: %s: %s%s\n", pr_log_names[lvl], msg, suffix);
}

void pr_log(pr_log_level lvl, const char *fmt, ...)
{
    if (lvl > pr_log_level_cur)
        return;
    va_list ap;
    va_start(ap, fmt);
    pr_vlog(lvl, "", fmt, ap);
    va_end(ap);
}

void pr_log_ratelimited(pr_ratelimit *rl, pr_log_level lvl, const char *fmt, ...)
{
    if (lvl > pr_log_level_cur)
        return;
    int64_t now = (int64_t)time(NULL);
    if (now != rl->window_s) {
        rl->window_s = now;
        rl->used = 0;
    }
    if (rl->used >= rl->per_sec) {
        rl->suppressed++;
        return;
    }
    rl->used++;
    char suffix[64] = "";
    if (rl->suppressed) {
        snprintf(suffix, sizeof(suffix), " (%llu similar messages suppressed)",
                 (unsigned long long)rl->suppressed);
        rl->suppressed = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    pr_vlog(lvl, suffix, fmt, ap);
    va_end(ap);
}

uint64_t pr_log_ratelimited_flush(pr_ratelimit *rl, pr_log_level lvl, const char *what, bool now)
{
    if (!rl->suppressed || (!now && (int64_t)time(NULL) == rl->window_s))
        return 0;
    uint64_t n = rl->suppressed;
    rl->suppressed = 0;
    if (lvl <= pr_log_level_cur)
        pr_log(lvl, "%s: %llu similar messages suppressed", what, (unsigned long long)n);
    return n;
}
