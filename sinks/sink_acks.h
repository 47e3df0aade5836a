/*
 * sink_acks.h — the list of acknowledged sequences a sink collects between
 * two polls (delivery reports, durable rolls, trainer acks) and hands to the
 * pr_sink_ack_cb at poll time. Private to sinks/; the caller provides any
 * locking (the trainer sink fills it from its I/O thread under its mutex).
 */
#ifndef PR_SINK_ACKS_H
#define PR_SINK_ACKS_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pr_grow.h"
#include "pr_sink.h"

typedef struct pr__acks {
    uint64_t *seq;
    size_t n, cap;
} pr__acks;

/* Append n sequences; PR_ENOMEM leaves the list unchanged. */
static inline int pr__acks_push(pr__acks *a, const uint64_t *seqs, size_t n)
{
    if (pr_grow((void **)&a->seq, &a->cap, a->n + n, sizeof(*a->seq)) < 0)
        return PR_ENOMEM;
    memcpy(a->seq + a->n, seqs, n * sizeof(*seqs));
    a->n += n;
    return 0;
}

/* Report every collected sequence to cb (in order) and empty the list;
 * returns how many. */
static inline size_t pr__acks_drain(pr__acks *a, pr_sink_ack_cb cb, void *opaque)
{
    size_t n = a->n;
    for (size_t i = 0; i < n; i++)
        cb(opaque, a->seq[i]);
    a->n = 0;
    return n;
}

static inline void pr__acks_fini(pr__acks *a)
{
    free(a->seq);
    a->seq = NULL;
    a->n = a->cap = 0;
}

#endif
