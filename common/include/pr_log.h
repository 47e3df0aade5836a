/*
 * pr_log.h — leveled logging to stderr, with a rate-limited variant for
 * per-record problems (malformed input must be visible but must not flood).
 */
#ifndef PR_LOG_H
#define PR_LOG_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { PR_LOG_ERROR = 0, PR_LOG_WARN, PR_LOG_INFO, PR_LOG_DEBUG } pr_log_level;

void pr_log_set_level(pr_log_level lvl);
void pr_log(pr_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A token bucket: at most `per_sec` messages a second; the rest are counted and
 * reported as "(N similar messages suppressed)" with the next one let through,
 * or by pr_log_ratelimited_flush once their window has closed (a burst that
 * ends would otherwise never be reported). Not thread-safe: one owner, or the
 * owner's lock, per bucket. */
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

/* Report messages `rl` suppressed in a window that has closed (or, with
 * `now`, whatever it suppressed) as one line "WHAT: N similar messages
 * suppressed", and forget them. Call it at least once a second from the
 * bucket's owner (a poll loop), and with now = true at stop. Returns the
 * count reported (0: nothing to say). */
uint64_t pr_log_ratelimited_flush(pr_ratelimit *rl, pr_log_level lvl, const char *what, bool now);

#define pr_err(...)   pr_log(PR_LOG_ERROR, __VA_ARGS__)
#define pr_warn(...)  pr_log(PR_LOG_WARN, __VA_ARGS__)
#define pr_info(...)  pr_log(PR_LOG_INFO, __VA_ARGS__)
#define pr_debug(...) pr_log(PR_LOG_DEBUG, __VA_ARGS__)

#endif
