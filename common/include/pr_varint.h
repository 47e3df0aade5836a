/*
 * pr_varint.h — protobuf base-128 varints, the one copy every hand-written
 * encoder and decoder uses (batch encoding, trainer framing, the generator,
 * the protobuf fallback decoders).
 *
 * Values are uint64; a varint is at most 10 bytes (PR_VARINT_MAX). Readers
 * drop bits past 64 like protobuf-c does and reject anything truncated or
 * longer than 10 bytes. The hot Event decoder in ingest/ keeps its own
 * branch-free 8-byte reader; it is checked against pr_varint_get in tests.
 */
#ifndef PR_VARINT_H
#define PR_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define PR_VARINT_MAX 10

/* Bytes needed to encode v (1..10). */
static inline size_t pr_varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Write v at p (room for pr_varint_size(v) bytes); returns the end. */
static inline uint8_t *pr_varint_put(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Read a varint from [p, end); returns the bytes used, or 0 when truncated
 * or longer than PR_VARINT_MAX bytes (*v is then unchanged). */
static inline size_t pr_varint_get(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    uint64_t r = 0;
    for (size_t i = 0; i < PR_VARINT_MAX && p + i < end; i++) {
        r |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = r;
            return i + 1;
        }
    }
    return 0;
}

#endif
