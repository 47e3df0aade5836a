/*
 * trainer_ckpt.h — input positions for checkpoint delivery: per (topic,
 * partition) a set of inclusive offset intervals, the rows a checkpoint
 * holds (docs/trainer-protocol.md "Checkpoint delivery"). Private to sinks/;
 * the trainer sink keeps one under its mutex.
 */
#ifndef PR_TRAINER_CKPT_H
#define PR_TRAINER_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

typedef struct pr__iv {
    int64_t first, last; /* inclusive */
} pr__iv;

typedef struct pr__pospart {
    char *topic;
    int32_t partition;
    pr__iv *iv; /* sorted, disjoint, not touching (merged) */
    size_t n, cap;
} pr__pospart;

typedef struct pr__posset {
    pr__pospart *parts;
    size_t n, cap;
} pr__posset;

void pr__posset_init(pr__posset *s);
void pr__posset_fini(pr__posset *s);
/* Add [first, last] of (topic, partition); merges overlapping and touching
 * intervals. 0, PR_EINVAL (first > last) or PR_ENOMEM. */
int pr__posset_add(pr__posset *s, const char *topic, int32_t partition, int64_t first,
                   int64_t last);
/* Every offset of [first, last] is in the set. */
bool pr__posset_covers(const pr__posset *s, const char *topic, int32_t partition, int64_t first,
                       int64_t last);
/* Every range of batch b is in the set (false for a batch without ranges). */
bool pr__posset_covers_batch(const pr__posset *s, const pr_batch *b);

#endif
