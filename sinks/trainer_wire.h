/*
 * trainer_wire.h — framing of the trainer stream (docs/trainer-protocol.md),
 * shared by the server (sink_trainer.c) and the reference client
 * (trainer_client.c). Private to sinks/.
 */
#ifndef PR_TRAINER_WIRE_H
#define PR_TRAINER_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

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

/* Map the result of an SSL_read_ex/SSL_write_ex (rc, n bytes) to the
 * recv()/send() convention shared by the server and the client: n on success,
 * 0 on a clean TLS close, -1 with errno EAGAIN (and *want = POLLIN or
 * POLLOUT: what the socket must become before retrying) or ECONNRESET. */
typedef struct ssl_st SSL;
long pr__tls_result(SSL *ssl, int rc, size_t n, short *want);

#endif
