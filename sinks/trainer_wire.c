/*
 * trainer_wire.c — framing shared by the trainer sink (server) and the
 * trainer client: u32 little-endian length + one piperec.trainer.v1.Frame
 * (schemas/trainer.proto, docs/trainer-protocol.md).
 *
 * Control messages go through protobuf-c. Batch frames do not: the server
 * writes a tiny header (length, Frame.batch tag, TrainingBatch length) and
 * then the batch's already-encoded bytes, and the client hands the
 * TrainingBatch slice to the zero-copy decoder (batch_pb.c). A Frame with
 * field 3 is byte-for-byte what protobuf would produce, so clients in other
 * languages just parse Frame.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/ssl.h>

#include "pr_varint.h"
#include "trainer_wire.h"
#include "trainer.pb-c.h"

int pr__frame_pack(const Piperec__Trainer__V1__Frame *f, uint8_t **out, size_t *out_len)
{
    size_t n = piperec__trainer__v1__frame__get_packed_size(f);
    uint8_t *buf = malloc(4 + n);
    if (!buf)
        return PR_ENOMEM;
    uint32_t le = (uint32_t)n;
    memcpy(buf, &le, 4);
    piperec__trainer__v1__frame__pack(f, buf + 4);
    *out = buf;
    *out_len = 4 + n;
    return 0;
}

size_t pr__batch_frame_header(const pr_batch *b, uint8_t hdr[16])
{
    uint8_t tmp[12];
    tmp[0] = (PR__FRAME_FIELD_BATCH << 3) | 2;
    size_t t = (size_t)(pr_varint_put(tmp + 1, b->pb_len) - tmp);
    uint32_t le = (uint32_t)(t + b->pb_len);
    memcpy(hdr, &le, 4);
    memcpy(hdr + 4, tmp, t);
    return 4 + t;
}

int pr__frame_parse(const uint8_t *data, size_t len, const uint8_t **batch, size_t *batch_len,
                    Piperec__Trainer__V1__Frame **ctrl)
{
    *batch = NULL;
    *batch_len = 0;
    *ctrl = NULL;
    /* Look for Frame.batch among the top-level fields. */
    const uint8_t *p = data, *end = data + len;
    while (p < end) {
        uint64_t key, v;
        size_t n = pr_varint_get(p, end, &key);
        if (!n)
            return PR_EBADREC;
        p += n;
        switch (key & 7) {
        case 0:
            if (!(n = pr_varint_get(p, end, &v)))
                return PR_EBADREC;
            p += n;
            break;
        case 1:
            if (end - p < 8)
                return PR_EBADREC;
            p += 8;
            break;
        case 5:
            if (end - p < 4)
                return PR_EBADREC;
            p += 4;
            break;
        case 2:
            if (!(n = pr_varint_get(p, end, &v)) || v > (uint64_t)(end - p) - n)
                return PR_EBADREC;
            p += n;
            if ((key >> 3) == PR__FRAME_FIELD_BATCH) {
                *batch = p;
                *batch_len = (size_t)v;
                return 0;
            }
            p += v;
            break;
        default:
            return PR_EBADREC;
        }
    }
    *ctrl = piperec__trainer__v1__frame__unpack(NULL, len, data);
    return *ctrl ? 0 : PR_EBADREC;
}

void pr__frame_free(Piperec__Trainer__V1__Frame *f)
{
    if (f)
        piperec__trainer__v1__frame__free_unpacked(f, NULL);
}

long pr__tls_result(SSL *ssl, int rc, size_t n, short *want)
{
    if (rc == 1)
        return (long)n;
    switch (SSL_get_error(ssl, rc)) {
    case SSL_ERROR_WANT_READ:
        *want = POLLIN;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_WANT_WRITE:
        *want = POLLOUT;
        errno = EAGAIN;
        return -1;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    default:
        errno = ECONNRESET;
        return -1;
    }
}
