/*
 * pr_log.h — leveled logging to stderr, with a rate-limited variant for
 * per-record problems (malformed input must be visible but must not flood).
 */
#ifndef PR_LOG_H
#define PR_LOG_H

#include <stdint.h>

typedef enum { PR_LOG_ERROR = 0, PR_LOG_WARN, PR_LOG_INFO, PR_LOG_DEBUG } pr_log_level;

void pr_log_set_level(pr_log_level lvl);
void pr_log(pr_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A token bucket: at most `per_sec` messages a second; the rest are counted and
 * reported as "(N similar messages suppressed)" with the next one let through. */
typedef struct pr_ratelimit {
    int per_sec;
    int64_t window_s;
    int used;
    uint64_t suppressed;
} pr_ratelimit;

#define PR_RATELIMIT_INIT(n)                                                                       \
    {                                                                                              \
        (n), 0, 0, 0                                                                               \
    }

void pr_log_ratelimited(pr_ratelimit *rl, pr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define pr_err(...)   pr_log(PR_LOG_ERROR, __VA_ARGS__)
#define pr_warn(...)  pr_log(PR_LOG_WARN, __VA_ARGS__)
#define pr_info(...)  pr_log(PR_LOG_INFO, __VA_ARGS__)
#define pr_debug(...) pr_log(PR_LOG_DEBUG, __VA_ARGS__)

#endif
