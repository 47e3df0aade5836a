/*
 * batcher_int.h — internals shared by batcher.c, offsets.c and the sinks
 * (not part of the public contract; pr__ names).
 */
#ifndef PR_BATCHER_INT_H
#define PR_BATCHER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

/* ---------------------------------------------------------------- offsets.c */

/* One tracked partition: the offsets of its rows still in flight, in arrival
 * (= offset) order, each with a done flag for out-of-order acks. Rejected
 * records never enter the queue: they only move `highest`. */
typedef struct pr__ptrack {
    int32_t key;
    uint32_t gen;    /* bumped on revoke: handles of older generations are ignored */
    bool active;     /* assigned (seen or pr_batcher_assign), not revoked */
    int64_t highest; /* highest offset seen; -1 = none */
    /* watermark input (event_time ordering) */
    bool has_et;
    int64_t max_et;
    /* ring of pending entries */
    int64_t *off;
    uint8_t *done;
    size_t cap, head, len;
    uint64_t head_abs; /* absolute index of off[head] */
} pr__ptrack;

/* Handle of one in-flight row: which tracker slot, its generation, its entry. */
typedef struct pr__rowh {
    uint32_t slot;
    uint32_t gen;
    uint64_t abs;
} pr__rowh;

typedef struct pr__offsets {
    pr__ptrack *parts;
    size_t n, cap;
    size_t last; /* lookup cache */
} pr__offsets;

void pr__offsets_init(pr__offsets *o);
void pr__offsets_fini(pr__offsets *o);
/* Slot of partition key, creating (and activating) it when `create`; -1 when absent / ENOMEM. */
int pr__offsets_slot(pr__offsets *o, int32_t key, bool create);
/* A pending row: returns its handle (abs = -1 on ENOMEM). */
int pr__offsets_push(pr__offsets *o, int slot, int64_t offset, pr__rowh *h);
/* A record done at once (rejected, late-dropped). */
void pr__offsets_seen_done(pr__offsets *o, int slot, int64_t offset);
/* The row of handle h is acknowledged. */
void pr__offsets_done(pr__offsets *o, const pr__rowh *h);
/* Offset+1 safe to store for the slot; -1 when nothing was ever seen. */
int64_t pr__offsets_safe(const pr__offsets *o, int slot);
/* Forget the slot's state (revoke): clears the queue, bumps gen, deactivates. */
void pr__offsets_reset(pr__offsets *o, int slot);

#endif
