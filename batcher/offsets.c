/*
 * offsets.c — per-partition in-flight offset tracking for at-least-once
 * commits.
 *
 * Kafka hands a consumer each partition's records in offset order, so the
 * offsets still in flight form a queue per partition: push at arrival, mark
 * done when the batch holding the row is acknowledged (acks may come out of
 * order, hence a done flag), pop done entries from the front. The safe value
 * to store is the front's offset (the lowest one still in flight), or
 * highest seen + 1 when the queue is empty. Records done at arrival (rejects,
 * late drops) only move `highest`: they can never be the lowest in-flight
 * offset. Memory is 9 bytes per in-flight row, bounded by the service's
 * in-flight byte limit. Lookup: the last slot, else a hash of the key (a
 * linear scan was O(partitions) per miss, and the pipeline looks up every
 * assigned partition after each ack: O(partitions^2) at 256 of them).
 */
#include <stdlib.h>
#include <string.h>

#include "batcher_int.h"
#include "pr_grow.h"

void pr__offsets_init(pr__offsets *o)
{
    memset(o, 0, sizeof(*o));
}

void pr__offsets_fini(pr__offsets *o)
{
    for (size_t i = 0; i < o->n; i++) {
        free(o->parts[i].off);
        free(o->parts[i].done);
    }
    free(o->parts);
    free(o->ix);
    memset(o, 0, sizeof(*o));
}

/* The key's home slot in an index of 2^bits slots: the product's high bits
 * (its low bits depend only on the key's low bits, and keys of several
 * topics share their partition numbers there: tidx << 16 | partition). */
static size_t pr__ix_home(int32_t key, unsigned bits)
{
    return ((uint32_t)key * 2654435761u) >> (32 - bits);
}

/* Slot i (key parts[i].key) into the index, grown to stay at most half full. */
static int pr__ix_add(pr__offsets *o, size_t i)
{
    if (2 * (o->n + 1) > o->ix_cap) {
        size_t nc = o->ix_cap ? 2 * o->ix_cap : 64;
        uint32_t *nx = calloc(nc, sizeof(*nx));
        if (!nx)
            return -1;
        free(o->ix);
        o->ix = nx;
        o->ix_cap = nc;
        o->ix_bits = (unsigned)__builtin_ctzll(nc);
        for (size_t j = 0; j < o->n; j++)
            if (j != i) {
                size_t h = pr__ix_home(o->parts[j].key, o->ix_bits);
                while (nx[h])
                    h = (h + 1) & (nc - 1);
                nx[h] = (uint32_t)j + 1;
            }
    }
    size_t h = pr__ix_home(o->parts[i].key, o->ix_bits);
    while (o->ix[h])
        h = (h + 1) & (o->ix_cap - 1);
    o->ix[h] = (uint32_t)i + 1;
    return 0;
}

int pr__offsets_slot(pr__offsets *o, int32_t key, bool create)
{
    if (o->last < o->n && o->parts[o->last].key == key)
        goto found;
    for (size_t h = o->ix_cap ? pr__ix_home(key, o->ix_bits) : 0; o->ix_cap && o->ix[h];
         h = (h + 1) & (o->ix_cap - 1)) {
        size_t i = o->ix[h] - 1;
        if (o->parts[i].key == key) {
            o->last = i;
            goto found;
        }
    }
    if (!create)
        return -1;
    if (pr_grow((void **)&o->parts, &o->cap, o->n + 1, sizeof(*o->parts)) < 0)
        return -1;
    pr__ptrack *t = &o->parts[o->n];
    memset(t, 0, sizeof(*t));
    t->key = key;
    t->highest = -1;
    /* Indexed before it counts: a failure leaves the table as it was. */
    if (pr__ix_add(o, o->n) < 0)
        return -1;
    o->last = o->n++;
found:
    if (create)
        o->parts[o->last].active = true;
    return (int)o->last;
}

/* Capacity stays a power of two so ring indices are masks, not divisions. */
static int pr__grow(pr__ptrack *t)
{
    size_t nc = t->cap ? t->cap * 2 : 256;
    int64_t *off = malloc(nc * sizeof(*off));
    uint8_t *done = malloc(nc);
    if (!off || !done) {
        free(off);
        free(done);
        return PR_ENOMEM;
    }
    for (size_t i = 0; i < t->len; i++) {
        size_t j = (t->head + i) & (t->cap - 1);
        off[i] = t->off[j];
        done[i] = t->done[j];
    }
    free(t->off);
    free(t->done);
    t->off = off;
    t->done = done;
    t->cap = nc;
    t->head = 0;
    return 0;
}

/* m pending rows of one partition at once (a run of the batcher's fast
 * path): the same entries and handles as m calls of pr__offsets_push. */
int pr__offsets_push_run(pr__offsets *o, int slot, const int64_t *offset, uint32_t m, pr__rowh *h)
{
    pr__ptrack *t = &o->parts[slot];
    while (t->len + m > t->cap)
        if (pr__grow(t) < 0)
            return PR_ENOMEM;
    size_t mask = t->cap - 1, j = t->head + t->len;
    uint64_t abs = t->head_abs + t->len;
    int64_t hi = t->highest;
    for (uint32_t i = 0; i < m; i++) {
        t->off[(j + i) & mask] = offset[i];
        t->done[(j + i) & mask] = 0;
        h[i].slot = (uint32_t)slot;
        h[i].gen = t->gen;
        h[i].abs = abs + i;
        if (offset[i] > hi)
            hi = offset[i];
    }
    t->len += m;
    t->highest = hi;
    return 0;
}

int pr__offsets_push(pr__offsets *o, int slot, int64_t offset, pr__rowh *h)
{
    return pr__offsets_push_run(o, slot, &offset, 1, h);
}

void pr__offsets_seen_done(pr__offsets *o, int slot, int64_t offset)
{
    pr__ptrack *t = &o->parts[slot];
    if (offset > t->highest)
        t->highest = offset;
}

/* Handles that follow each other in a batch are mostly a run of one
 * partition (the batcher appends rows by runs): each run is marked whole
 * and its partition's head advanced once (per row, this was ~3.5% of the
 * pipeline thread at one line a message, issue 21). */
void pr__offsets_done(pr__offsets *o, const pr__rowh *h, size_t n)
{
    for (size_t r = 0; r < n;) {
        size_t k = 1;
        while (r + k < n && h[r + k].slot == h[r].slot && h[r + k].gen == h[r].gen &&
               h[r + k].abs == h[r].abs + k)
            k++;
        const pr__rowh *a = &h[r];
        r += k;
        if (a->slot >= o->n)
            continue;
        pr__ptrack *t = &o->parts[a->slot];
        if (t->gen != a->gen)
            continue; /* revoked since */
        uint64_t lo = a->abs, hi = a->abs + k, end = t->head_abs + t->len;
        if (lo < t->head_abs)
            lo = t->head_abs; /* already popped */
        if (hi > end)
            hi = end;
        for (uint64_t x = lo; x < hi; x++)
            t->done[(t->head + (x - t->head_abs)) & (t->cap - 1)] = 1;
        while (t->len > 0 && t->done[t->head]) {
            t->head = (t->head + 1) & (t->cap - 1);
            t->len--;
            t->head_abs++;
        }
    }
}

int64_t pr__offsets_safe(const pr__offsets *o, int slot)
{
    if (slot < 0 || (size_t)slot >= o->n)
        return -1;
    const pr__ptrack *t = &o->parts[slot];
    if (t->len > 0)
        return t->off[t->head];
    return t->highest < 0 ? -1 : t->highest + 1;
}

void pr__offsets_reset(pr__offsets *o, int slot)
{
    pr__ptrack *t = &o->parts[slot];
    t->gen++;
    t->active = false;
    t->highest = -1;
    t->has_et = false;
    t->max_et = 0;
    t->head_abs += t->len;
    t->head = 0;
    t->len = 0;
}
