/*
 * pr_svc_util.h — small helpers shared by `piperec run` and `piperec demo`
 * (internal to service/): synchronous signal handling and free-port probing.
 */
#ifndef PR_SVC_UTIL_H
#define PR_SVC_UTIL_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#ifndef PR_VERSION
#define PR_VERSION "0.0.0"
#endif

/* Block SIGINT, SIGTERM and SIGPIPE in the calling thread (and so in every
 * thread it creates afterwards); *set gets SIGINT+SIGTERM for waiting. */
void pr_svc_block_signals(sigset_t *set);

/* Wait up to timeout_ms for one of `set`; returns the signal or 0. */
int pr_svc_wait_signal(const sigset_t *set, int timeout_ms);

/* True when host:port can be bound right now (a hint, not a promise). */
bool pr_svc_port_free(const char *host, uint16_t port);

#endif
