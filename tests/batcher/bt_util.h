/*
 * bt_util.h — helpers for the batcher tests: hand-built engine blocks and
 * outputs (no engine needed) whose values encode (partition, offset), so a
 * test can check any emitted row, and an emit callback that keeps batches.
 */
#ifndef BT_UTIL_H
#define BT_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "pr_batcher.h"

#define BT_ND 3
#define BT_NS 2

/* Value of dense column c / sparse column c for row (p, off). */
static inline float bt_dense(int32_t p, int64_t off, int c)
{
    return (float)(p * 100000 + off) + 0.25f * c;
}
static inline int32_t bt_sparse(int32_t p, int64_t off, int c)
{
    return (int32_t)(p * 100000 + off + 7 * c);
}

typedef struct bt_io {
    pr_block in;
    pr_out out;
} bt_io;

static inline bt_io *bt_io_new(uint32_t cap)
{
    bt_io *io = calloc(1, sizeof(*io));
    cap = (cap + 63) & ~63u;
    io->in.cap = cap;
    io->in.n_dense = BT_ND;
    io->in.n_sparse = BT_NS;
    io->in.partition = calloc(cap, sizeof(int32_t));
    io->in.offset = calloc(cap, sizeof(int64_t));
    io->in.event_time_ms = calloc(cap, sizeof(int64_t));
    io->out.cap = cap;
    io->out.n_dense = BT_ND;
    io->out.n_sparse = BT_NS;
    io->out.sparse_width = 4;
    io->out.labels = calloc(cap, sizeof(int32_t));
    io->out.dense = calloc((size_t)cap * BT_ND, sizeof(float));
    io->out.sparse = calloc((size_t)cap * BT_NS, sizeof(int32_t));
    io->out.rejected = calloc(pr_bitmap_words(cap), sizeof(uint64_t));
    return io;
}

static inline void bt_io_free(bt_io *io)
{
    free(io->in.partition);
    free(io->in.offset);
    free(io->in.event_time_ms);
    free(io->out.labels);
    free(io->out.dense);
    free(io->out.sparse);
    free(io->out.rejected);
    free(io);
}

static inline void bt_io_reset(bt_io *io)
{
    io->in.rows = io->out.rows = 0;
    io->out.n_rejected = 0;
    memset(io->out.rejected, 0, pr_bitmap_words(io->out.cap) * sizeof(uint64_t));
}

/* Append row (p, off, et); `rejected` marks it as an engine reject. */
static inline void bt_row(bt_io *io, int32_t p, int64_t off, int64_t et, int rejected)
{
    uint32_t r = io->in.rows++;
    io->out.rows = io->in.rows;
    io->in.partition[r] = p;
    io->in.offset[r] = off;
    io->in.event_time_ms[r] = et;
    io->out.labels[r] = (int32_t)(off & 1);
    for (int c = 0; c < BT_ND; c++)
        io->out.dense[(size_t)c * io->out.cap + r] = rejected ? 0 : bt_dense(p, off, c);
    for (int c = 0; c < BT_NS; c++)
        ((int32_t *)io->out.sparse)[(size_t)c * io->out.cap + r] =
            rejected ? 0 : bt_sparse(p, off, c);
    if (rejected) {
        pr_bit_set(io->out.rejected, r);
        io->out.n_rejected++;
    }
}

/* Collected batches. */
typedef struct bt_sink {
    pr_batch *b[1024];
    size_t n;
} bt_sink;

static inline void bt_on_emit(void *opaque, pr_batch *b)
{
    bt_sink *s = opaque;
    s->b[s->n++] = pr_batch_ref(b);
}

static inline void bt_sink_free(bt_sink *s)
{
    for (size_t i = 0; i < s->n; i++)
        pr_batch_unref(s->b[i]);
    s->n = 0;
}

/* (partition, offset) of row i of a batch, from the encoded values; checks
 * every column agrees. Returns 0 when consistent. */
static inline int bt_row_id(const pr_batch *b, uint32_t i, int32_t *p, int64_t *off)
{
    int32_t v = ((const int32_t *)b->sparse)[i];
    *p = v / 100000;
    *off = v % 100000;
    for (int c = 0; c < BT_ND; c++)
        if (b->dense[(size_t)c * b->rows + i] != bt_dense(*p, *off, c))
            return -1;
    for (int c = 0; c < BT_NS; c++)
        if (((const int32_t *)b->sparse)[(size_t)c * b->rows + i] != bt_sparse(*p, *off, c))
            return -1;
    if (b->labels[i] != (int32_t)(*off & 1))
        return -1;
    return 0;
}

#endif
