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
void pr__offsets_free(pr__offsets *o);
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

/* ---------------------------------------------------------------- batch_pb.c */

/* Split a partition key into topic index and Kafka partition (PR_PART_KEY). */
static inline int pr__key_topic(int32_t key)
{
    return (int)((uint32_t)key >> 16);
}
static inline int32_t pr__key_partition(int32_t key)
{
    return (int32_t)((uint32_t)key & 0xffffu);
}

/* Protobuf wire helpers (also used by the trainer protocol code). */
size_t pr__pb_varint_size(uint64_t v);
uint8_t *pr__pb_put_varint(uint8_t *p, uint64_t v);
/* Read a varint; returns bytes used or 0 on error. */
size_t pr__pb_get_varint(const uint8_t *p, const uint8_t *end, uint64_t *v);

/* ---------------------------------------------------------------- trainer_wire.c */

/* Frames on the trainer stream: u32 LE length + one piperec.trainer.v1.Frame message. */
#define PR__FRAME_MAX_CTRL    (1u << 20) /* control frames (server side limit) */
#define PR__FRAME_MAX         (1u << 31) /* any frame (client side limit) */
#define PR__FRAME_FIELD_BATCH 3

struct Piperec__Trainer__V1__Frame;

/* Serialize a control frame with its length prefix into a new buffer. */
int pr__frame_pack(const struct Piperec__Trainer__V1__Frame *f, uint8_t **out, size_t *out_len);

/* Header of a batch frame (length prefix + Frame.batch tag + length):
 * the frame is these bytes followed by b->pb. Returns the header length (<= 16). */
size_t pr__batch_frame_header(const pr_batch *b, uint8_t hdr[16]);

/* Parse one frame body (without the length prefix). A batch frame gives the
 * TrainingBatch slice in *batch, *batch_len (zero copy) and *ctrl = NULL;
 * any other frame is unpacked with protobuf-c into *ctrl (free with
 * pr__frame_free). Returns 0 or PR_EBADREC. */
int pr__frame_parse(const uint8_t *data, size_t len, const uint8_t **batch, size_t *batch_len,
                    struct Piperec__Trainer__V1__Frame **ctrl);
void pr__frame_free(struct Piperec__Trainer__V1__Frame *f);

/* "host:port" / "[v6]:port" / ":port" -> host (may be "") and port. */
int pr__parse_hostport(const char *s, char *host, size_t host_size, uint16_t *port);

#endif
