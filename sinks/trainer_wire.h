/*
 * trainer_wire.h — framing of the trainer stream (docs/trainer-protocol.md),
 * shared by the server (sink_trainer.c) and the reference client
 * (trainer_client.c). Private to sinks/.
 */
#ifndef PR_TRAINER_WIRE_H
#define PR_TRAINER_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

/* Frames on the trainer stream: u32 LE length + one piperec.trainer.v1.Frame message. */
#define PR__FRAME_MAX_CTRL    (1u << 20) /* control frames (server side limit) */
#define PR__FRAME_MAX         (1u << 31) /* any frame (client side limit) */
#define PR__FRAME_FIELD_BATCH 3
#define PR__FRAME_FIELD_RAW   11 /* Frame.raw_batch */

/* ---------------------------------------------------------------- raw tensor layout
 * Subscribe.layout = 1 (docs/trainer-protocol.md, "Raw batch layout"): a
 * batch frame is Frame{raw_batch: payload}; the payload is a fixed 128-byte
 * little-endian header and sections placed so that each starts 64-byte
 * aligned counted from the first byte of the frame's length prefix (the
 * header's `preamble` is the frame bytes before the payload). */
#define PR__LAYOUT_PB      0
#define PR__LAYOUT_RAW     1
#define PR__RAW_MAGIC      0x54425250u /* "PRBT" as stored (LE) */
#define PR__RAW_VERSION    1
#define PR__RAW_HDR        128
#define PR__RAW_ALIGN      64
#define PR__RAW_F_JAGGED   1u  /* a declared-schema batch */
#define PR__RAW_F_POPULAR  2u  /* TrainingBatch.popular */
#define PR__RAW_F_OFFSETS  4u  /* the offsets section is present */
#define PR__RAW_F_UNIT     8u  /* every length is 1: the lengths section is empty (compact) */
#define PR__RAW_F_VALUES32 16u /* values are int32, not int64 (compact) */
#define PR__RAW_F_WEIGHTS  32u /* section 7 holds the weights (8 sections) */

/* Sections, in payload order; the header's table has one (offset, bytes)
 * pair each, offsets counted from the payload start. */
enum {
    PR__RAW_DENSE,   /* float32 [rows][n_dense], row-major */
    PR__RAW_LABELS,  /* float32 [rows][n_labels], row-major (Criteo: n_labels 1) */
    PR__RAW_LENGTHS, /* int32 [n_keys][rows], key-major (empty with PR__RAW_F_UNIT) */
    PR__RAW_VALUES,  /* int64 [n_values], key-major (int32 with PR__RAW_F_VALUES32) */
    PR__RAW_OFFSETS, /* int32 [n_keys * rows + 1]: 0 and the running sum of lengths */
    PR__RAW_NOTICES, /* int64 [n_notices][4]: column, index, row, number */
    PR__RAW_META,    /* TrainingBatch without its tensor fields (7-9, 24, 25, 27, 28, 31) */
    PR__RAW_NSEC,    /* the sections every raw batch has (7) */
    PR__RAW_WEIGHTS = PR__RAW_NSEC, /* float32 [n_values] with PR__RAW_F_WEIGHTS */
    PR__RAW_NSEC_MAX
};

/* A parsed raw payload: pointers into it (64-byte aligned when the frame
 * was received at a 64-byte aligned address). */
typedef struct pr__raw_view {
    uint32_t flags, rows, n_dense, n_labels, n_keys, preamble, n_notices;
    uint64_t epoch, seq, n_values;
    const uint8_t *sec[PR__RAW_NSEC_MAX]; /* sec[PR__RAW_WEIGHTS] NULL without weights */
    size_t sec_len[PR__RAW_NSEC_MAX];
} pr__raw_view;

/* Build the whole raw frame of `b` (length prefix included) in a new
 * 64-byte aligned buffer (free()); `offsets`: add the KJT offsets section;
 * `compact` (Subscribe.compact): a Criteo batch without the all-ones
 * lengths and, when its sparse columns are int32, with int32 values.
 * Needs b->pb (pr_batch_encode) for the metadata. 0 or PR_ENOMEM. */
int pr__raw_frame(const pr_batch *b, bool offsets, bool compact, uint8_t **out, size_t *out_len);

/* Parse and check a raw payload (the bytes of Frame.raw_batch): sizes
 * against the shape, sections inside the payload. 0 or PR_EBADREC. */
int pr__raw_parse(const uint8_t *payload, size_t len, pr__raw_view *v);

/* Tests only: when set, the trainer sink's I/O thread calls it with the
 * arg just before it builds a raw frame for a trainer (sink_trainer.c),
 * so a test can prove the pipeline thread is not blocked meanwhile. */
extern void (*pr__trainer_frame_hook)(void *arg);
extern void *pr__trainer_frame_hook_arg;

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

/* Map the result of an SSL_read_ex/SSL_write_ex (rc, n bytes) to the
 * recv()/send() convention shared by the server and the client: n on success,
 * 0 on a clean TLS close, -1 with errno EAGAIN (and *want = POLLIN or
 * POLLOUT: what the socket must become before retrying) or ECONNRESET. */
typedef struct ssl_st SSL;
long pr__tls_result(SSL *ssl, int rc, size_t n, short *want);

#endif
