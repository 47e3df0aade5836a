/*
 * proto_decode.c — Kafka message payloads -> pr_block rows: protobuf Event,
 * protobuf EventBatch, and a multi-line wrapper over the Criteo TSV line
 * decoder (criteo_tsv.c).
 *
 * Shape: every message decoder takes a record cursor (*next_rec) so a message
 * with more records than the block holds can continue in the next block; the
 * consumer only relies on that for messages larger than a whole block.
 *
 * The protobuf formats: pr_decode_protobuf_event[_batch] are hand-written
 * wire-format decoders (see "fast decoders" below): no allocation, values go
 * straight into the block, ids and (with ctx->parse_hex) hex strings become
 * uint64 columns; ~2.3x faster than protobuf-c's unpack on Criteo-shaped
 * batches. The reference they are tested against (over protobuf-c) lives
 * with the tests: tests/ingest/proto_ref.c.
 * Either way a rejected event leaves no trace in the block (no stray
 * missing bits), and a malformed message appends nothing.
 */
#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_hex.h"
#include "piperec.pb-c.h"
#include "pr_varint.h"
#include "pr_ingest.h"

#define PR__DETAIL_MAX 160

/* ---------------------------------------------------------------- arena */

typedef struct pr__chunk {
    struct pr__chunk *next;
    max_align_t data[];
} pr__chunk;

struct pr_arena {
    char *buf;
    size_t cap;
    size_t used;
    pr__chunk *extra; /* overflow chunks of the current message */
    size_t extra_bytes;
    ProtobufCAllocator pc; /* allocator_data = this arena */
};

static void *pr__arena_alloc(void *opaque, size_t size)
{
    pr_arena *a = opaque;
    size = (size + 15) & ~(size_t)15;
    if (size <= a->cap - a->used) {
        void *p = a->buf + a->used;
        a->used += size;
        return p;
    }
    pr__chunk *c = malloc(sizeof(*c) + size);
    if (!c)
        return NULL;
    c->next = a->extra;
    a->extra = c;
    a->extra_bytes += size;
    return c->data;
}

static void pr__arena_free_cb(void *opaque, void *p)
{
    (void)opaque;
    (void)p; /* released all at once by pr__arena_reset */
}

pr_arena *pr_arena_new(size_t initial_bytes)
{
    pr_arena *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->cap = initial_bytes < 4096 ? 4096 : (initial_bytes + 15) & ~(size_t)15;
    a->buf = aligned_alloc(16, a->cap);
    if (!a->buf) {
        free(a);
        return NULL;
    }
    a->pc.alloc = pr__arena_alloc;
    a->pc.free = pr__arena_free_cb;
    a->pc.allocator_data = a;
    return a;
}

/* Forget everything allocated; when the last message overflowed, grow the
 * main buffer so the next one like it fits in one piece. */
static void pr__arena_reset(pr_arena *a)
{
    size_t want = a->used + a->extra_bytes;
    while (a->extra) {
        pr__chunk *n = a->extra->next;
        free(a->extra);
        a->extra = n;
    }
    if (a->extra_bytes) {
        size_t cap = ((want * 3 / 2) + 4095) & ~(size_t)4095;
        char *nb = aligned_alloc(16, cap);
        if (nb) {
            free(a->buf);
            a->buf = nb;
            a->cap = cap;
        }
    }
    a->extra_bytes = 0;
    a->used = 0;
}

void pr_arena_free(pr_arena *a)
{
    if (!a)
        return;
    pr__arena_reset(a);
    free(a->buf);
    free(a);
}

/* ---------------------------------------------------------------- helpers */

static void pr__reject(const pr_decode_ctx *ctx, int reason, const char *detail, const void *rec,
                       size_t len, int64_t recno)
{
    if (ctx->on_reject)
        ctx->on_reject(ctx->opaque, reason, detail, rec, len, recno);
}

static const char pr__hexdig[16] = "0123456789abcdef";

static void pr__u64_to_slot(char *slot, uint64_t v)
{
    for (int i = PR_HEX_SLOT - 1; i >= 0; i--) {
        slot[i] = pr__hexdig[v & 15];
        v >>= 4;
    }
}

/* ---------------------------------------------------------------- fast decoders
 *
 * Hand-written piperec.v1.Event / EventBatch decoding: no allocation, no
 * intermediate message; values go straight into row b->rows of the block and
 * the row is committed (missing bits set, rows++) only once the whole event
 * has been read and checked, so a rejected event leaves nothing behind
 * (values written into the uncommitted row are simply overwritten later).
 *
 * It must accept and reject exactly what protobuf_c_message_unpack does (the
 * *_ref decoders above, compared on generated and mutated messages by
 * tests/ingest/test_proto_fast.c): tags as protobuf-c reads them (up to 5
 * bytes, field 0 in the first byte rejected), varints up to 10 bytes,
 * length prefixes up to 5 bytes and inside the buffer, packed and unpacked
 * repeated scalars (also mixed, values appended in wire order), a known
 * field with the wrong wire type is malformed, unknown fields skipped by
 * wire type, groups (wire types 3, 4) and 6, 7 malformed; a scalar seen
 * twice keeps the last value; a string is cut at its first NUL (protobuf-c
 * hands out C strings). Hosts are little-endian (doubles are copied). */

typedef enum { PR__W_VARINT = 0, PR__W_64 = 1, PR__W_LEN = 2, PR__W_32 = 5 } pr__wire;

/* The 7-bit groups of 8 little-endian varint bytes, joined (56 bits). */
static inline uint64_t pr__pb_join7(uint64_t w)
{
    uint64_t x = w & 0x7f7f7f7f7f7f7f7fULL;
    x = ((x & 0x7f007f007f007f00ULL) >> 1) | (x & 0x007f007f007f007fULL);
    x = ((x & 0x3fff00003fff0000ULL) >> 2) | (x & 0x00003fff00003fffULL);
    return ((x & 0x0fffffff00000000ULL) >> 4) | (x & 0x000000000fffffffULL);
}

/* Varint of up to 10 bytes (bits past 64 dropped, as protobuf-c does).
 * With 8 bytes readable: one load, the terminator from the high bits,
 * the groups joined in a register (ids are often 8-10 bytes long). */
static inline __attribute__((always_inline)) bool pr__pb_varint(const uint8_t **pp,
                                                                const uint8_t *end, uint64_t *v)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        *v = *p;
        *pp = p + 1;
        return true;
    }
    if (end - p >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        uint64_t stop = ~w & 0x8080808080808080ULL;
        if (stop) {
            *v = pr__pb_join7(w & (stop ^ (stop - 1)));
            *pp = p + ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
            return true;
        }
        uint64_t x = pr__pb_join7(w);
        p += 8;
        if (p < end && *p < 0x80) {
            *v = x | (uint64_t)*p << 56;
            *pp = p + 1;
            return true;
        }
        if (end - p >= 2 && p[1] < 0x80) {
            *v = x | (uint64_t)(p[0] & 0x7f) << 56 | (uint64_t)p[1] << 63;
            *pp = p + 2;
            return true;
        }
        return false;
    }
    uint64_t x = 0;
    for (unsigned i = 0; i < 10 && p < end; i++) {
        uint8_t c = *p++;
        x |= (uint64_t)(c & 0x7f) << (7 * i);
        if (!(c & 0x80)) {
            *v = x;
            *pp = p;
            return true;
        }
    }
    return false;
}

/* Field number and wire type; p < end. */
static inline bool pr__pb_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field,
                              unsigned *wire)
{
    const uint8_t *p = *pp;
    uint8_t c = p[0];
    if ((c & 0xf8) == 0)
        return false;
    *wire = c & 7;
    if (!(c & 0x80)) {
        *field = c >> 3;
        *pp = p + 1;
        return true;
    }
    uint32_t tag = (uint32_t)(c & 0x7f) >> 3;
    unsigned shift = 4;
    size_t max = (size_t)(end - p) < 5 ? (size_t)(end - p) : 5;
    for (size_t i = 1; i < max; i++) {
        if (p[i] & 0x80) {
            tag |= (uint32_t)(p[i] & 0x7f) << shift;
            shift += 7;
        } else {
            tag |= (uint32_t)p[i] << shift;
            *field = tag;
            *pp = p + i + 1;
            return true;
        }
    }
    return false;
}

/* Length prefix (up to 5 bytes) whose data fits in the buffer. */
static inline bool pr__pb_len(const uint8_t **pp, const uint8_t *end, size_t *len)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) {
        if (*p > (size_t)(end - p - 1))
            return false;
        *len = *p;
        *pp = p + 1;
        return true;
    }
    size_t max = (size_t)(end - p) < 5 ? (size_t)(end - p) : 5, v = 0;
    for (size_t i = 0; i < max; i++) {
        v |= (size_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            p += i + 1;
            if (v > (size_t)(end - p))
                return false;
            *len = v;
            *pp = p;
            return true;
        }
    }
    return false;
}

/* Skip the value of an unknown field. */
static inline bool pr__pb_skip(const uint8_t **pp, const uint8_t *end, unsigned wire)
{
    uint64_t v;
    size_t n;
    switch (wire) {
    case PR__W_VARINT:
        return pr__pb_varint(pp, end, &v);
    case PR__W_64:
        n = 8;
        break;
    case PR__W_32:
        n = 4;
        break;
    case PR__W_LEN:
        if (!pr__pb_len(pp, end, &n))
            return false;
        *pp += n;
        return true;
    default:
        return false;
    }
    if ((size_t)(end - *pp) < n)
        return false;
    *pp += n;
    return true;
}

/* A packed run of varints [p, end): each terminated within the run. */
static bool pr__pb_packed_ok(const uint8_t *p, const uint8_t *end)
{
    uint64_t v;
    while (p < end)
        if (!pr__pb_varint(&p, end, &v))
            return false;
    return true;
}

/* Wire-format check of one Event, writing nothing. */
static bool pr__event_wire_ok(const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        uint32_t f;
        unsigned w;
        size_t n;
        if (!pr__pb_tag(&p, end, &f, &w))
            return false;
        switch (f) {
        case 1:
        case 2:
            if (w != PR__W_VARINT || !pr__pb_skip(&p, end, w))
                return false;
            break;
        case 3:
            if (w == PR__W_LEN) {
                if (!pr__pb_len(&p, end, &n) || n % 8)
                    return false;
                p += n;
            } else if (w != PR__W_64 || !pr__pb_skip(&p, end, w)) {
                return false;
            }
            break;
        case 4:
        case 6:
        case 7:
            if (w == PR__W_LEN) {
                if (!pr__pb_len(&p, end, &n) || !pr__pb_packed_ok(p, p + n))
                    return false;
                p += n;
            } else if (w != PR__W_VARINT || !pr__pb_skip(&p, end, w)) {
                return false;
            }
            break;
        case 5:
            if (w != PR__W_LEN || !pr__pb_skip(&p, end, w))
                return false;
            break;
        default:
            if (!pr__pb_skip(&p, end, w))
                return false;
        }
    }
    return true;
}

/* Wire-format check of EventBatch fields from p on. */
static bool pr__batch_wire_ok(const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        uint32_t f;
        unsigned w;
        size_t n;
        if (!pr__pb_tag(&p, end, &f, &w))
            return false;
        if (f == 1) {
            if (w != PR__W_LEN || !pr__pb_len(&p, end, &n) || !pr__event_wire_ok(p, p + n))
                return false;
            p += n;
        } else if (!pr__pb_skip(&p, end, w)) {
            return false;
        }
    }
    return true;
}

#define PR__BM_WORDS ((PR_MAX_SPARSE > PR_MAX_DENSE ? PR_MAX_SPARSE : PR_MAX_DENSE) / 64)

/* What one event said, beyond the values already written into the row. */
typedef struct pr__ev {
    int32_t label;
    int64_t event_time_ms;
    size_t n_dense, n_hex, n_id;
    int64_t dmiss_bad, smiss_bad; /* first out-of-range index, -1 = none */
    int64_t dense_bad;            /* first dense value that is NaN or infinite, -1 = none
                                   * (one listed in dense_missing is no value: it goes) */
    uint64_t dmiss[PR__BM_WORDS]; /* dense_missing indices */
    uint64_t smiss[PR__BM_WORDS]; /* sparse_missing indices and empty hex strings */
    int64_t hex_bad;              /* first sparse_hex index with a problem, -1 = none */
    int hex_bad_reason;
    size_t hex_bad_len;
    bool enc_set; /* block column encodings fixed for this event */
} pr__ev;

/* Fix the column encodings of an empty block from the event's first sparse
 * value (ids: u64, hex: slots, or u64 with fused Hex2Int), as the
 * reference does at its first row. */
static inline void pr__ev_enc(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, bool ids)
{
    if (e->enc_set)
        return;
    e->enc_set = true;
    if (b->rows == 0)
        memset(b->sparse_enc, ids || ctx->parse_hex ? PR_SPARSE_U64 : PR_SPARSE_HEX, b->n_sparse);
}

static inline void pr__ev_id(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, uint64_t v)
{
    size_t c = e->n_id++;
    pr__ev_enc(ctx, b, e, true);
    if (c >= b->n_sparse)
        return;
    if (b->sparse_enc[c] == PR_SPARSE_U64)
        b->sparse_u64[c * b->cap + b->rows] = v;
    else
        pr__u64_to_slot(pr_block_hex(b, (uint32_t)c, b->rows), v);
}

static inline void pr__ev_hex(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, const uint8_t *s,
                              size_t l, size_t avail)
{
    size_t c = e->n_hex++;
    pr__ev_enc(ctx, b, e, false);
    if (c >= b->n_sparse)
        return;
    const char *str = (const char *)s;
    if (l > PR_HEX_SLOT) {
        l = strnlen(str, l); /* protobuf-c's C string ends at a NUL */
        if (l > PR_HEX_SLOT) {
            if (e->hex_bad < 0) {
                e->hex_bad = (int64_t)c;
                e->hex_bad_reason = PR_DEC_LONG_HEX;
                e->hex_bad_len = l;
            }
            return;
        }
    }
    uint32_t r = b->rows;
    if (b->sparse_enc[c] == PR_SPARSE_U64) {
        uint64_t *dst = b->sparse_u64 + c * b->cap + r;
        if (l > 0 && !pr_hex_parse_safe(str, l, avail, dst)) {
            size_t l0 = strnlen(str, l); /* protobuf-c's C string ends at a NUL */
            if (l0 == l || (l0 > 0 && !pr_hex_parse_safe(str, l0, avail, dst))) {
                if (e->hex_bad < 0) {
                    e->hex_bad = (int64_t)c;
                    e->hex_bad_reason = PR_DEC_BAD_HEX;
                }
                return;
            }
            l = l0;
        }
        if (l == 0) {
            *dst = 0;
            pr_bit_set(e->smiss, c);
        }
    } else {
        l = strnlen(str, l);
        char *slot = pr_block_hex(b, (uint32_t)c, r);
        memset(slot, '0', PR_HEX_SLOT - l);
        memcpy(slot + PR_HEX_SLOT - l, str, l);
        if (l == 0)
            pr_bit_set(e->smiss, c);
    }
}

/* A packed run of sparse ids [*pp, end): the hot loop of id events. */
static bool pr__ev_ids_packed(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, const uint8_t **pp,
                              const uint8_t *end)
{
    const uint8_t *p = *pp;
    if (p == end)
        return true;
    pr__ev_enc(ctx, b, e, true);
    const size_t cap = b->cap, ns = b->n_sparse;
    uint64_t *col = b->sparse_u64 + b->rows;
    while (p < end) {
        uint64_t v;
        if (!pr__pb_varint(&p, end, &v))
            return false;
        size_t c = e->n_id++;
        if (c < ns) {
            if (b->sparse_enc[c] == PR_SPARSE_U64)
                col[c * cap] = v;
            else
                pr__u64_to_slot(pr_block_hex(b, (uint32_t)c, b->rows), v);
        }
    }
    *pp = p;
    return true;
}

static inline void pr__ev_index(uint64_t v, uint32_t n, uint64_t *bm, int64_t *bad)
{
    uint32_t i = (uint32_t)v; /* uint32 fields keep the low 32 bits */
    if (i < n)
        pr_bit_set(bm, i);
    else if (*bad < 0)
        *bad = i;
}

/* Field 3, dense: packed doubles or one fixed64 into row b->rows (columns
 * past nd are counted, not stored). False when malformed. */
static inline bool pr__ev_dense(pr_block *b, pr__ev *e, uint32_t nd, unsigned w, const uint8_t **pp,
                                const uint8_t *end)
{
    const uint8_t *p = *pp;
    const uint32_t r = b->rows, cap = b->cap;
    size_t n;
    if (w == PR__W_LEN) {
        if (!pr__pb_len(&p, end, &n) || n % 8)
            return false;
    } else if (w == PR__W_64 && end - p >= 8) {
        n = 8;
    } else {
        return false;
    }
    for (const uint8_t *q = p, *qe = p + n; q < qe; q += 8) {
        size_t c = e->n_dense++;
        if (c < nd) {
            double *d = b->dense + c * cap + r;
            memcpy(d, q, 8);
            if (!isfinite(*d) && e->dense_bad < 0) /* as the TSV decoder's "nan" / "inf" */
                e->dense_bad = (int64_t)c;
        }
    }
    *pp = p + n;
    return true;
}

/* One varint of field 4 (dense_missing), 6 (sparse_id) or 7 (sparse_missing). */
static inline void pr__ev_varint_field(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, uint32_t f,
                                       uint64_t v)
{
    if (f == 6)
        pr__ev_id(ctx, b, e, v);
    else if (f == 4)
        pr__ev_index(v, ctx->spec->n_dense, e->dmiss, &e->dmiss_bad);
    else
        pr__ev_index(v, ctx->spec->n_sparse, e->smiss, &e->smiss_bad);
}

/* Fields 4, 6, 7: packed (ids take the hot loop) or one varint. */
static inline bool pr__ev_varints(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, uint32_t f,
                                  unsigned w, const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    uint64_t v;
    size_t n;
    if (w == PR__W_LEN && f == 6) {
        if (!pr__pb_len(&p, end, &n))
            return false;
        if (!pr__ev_ids_packed(ctx, b, e, &p, p + n))
            return false;
    } else if (w == PR__W_LEN) {
        if (!pr__pb_len(&p, end, &n))
            return false;
        const uint8_t *qe = p + n;
        while (p < qe) {
            if (!pr__pb_varint(&p, qe, &v))
                return false;
            pr__ev_varint_field(ctx, b, e, f, v);
        }
    } else if (w == PR__W_VARINT) {
        if (!pr__pb_varint(&p, end, &v))
            return false;
        pr__ev_varint_field(ctx, b, e, f, v);
    } else {
        return false;
    }
    *pp = p;
    return true;
}

/* Walk the Event's fields [p, end), values straight into row b->rows; what
 * needs checking afterwards is noted in e. False when the bytes are not an
 * Event. */
static inline bool pr__ev_parse(const pr_decode_ctx *ctx, pr_block *b, pr__ev *e, const uint8_t *p,
                                const uint8_t *end)
{
    const pr_pipeline_spec *spec = ctx->spec;
    const uint32_t nd = spec->n_dense < b->n_dense ? spec->n_dense : b->n_dense;
    while (p < end) {
        uint32_t f;
        unsigned w;
        uint64_t v;
        size_t n;
        if (!pr__pb_tag(&p, end, &f, &w))
            return false;
        switch (f) {
        case 1: /* label */
            if (w != PR__W_VARINT || !pr__pb_varint(&p, end, &v))
                return false;
            e->label = (int32_t)(uint32_t)v;
            break;
        case 2: /* event_time_ms */
            if (w != PR__W_VARINT || !pr__pb_varint(&p, end, &v))
                return false;
            e->event_time_ms = (int64_t)v;
            break;
        case 3: /* dense */
            if (!pr__ev_dense(b, e, nd, w, &p, end))
                return false;
            break;
        case 4: /* dense_missing */
        case 6: /* sparse_id */
        case 7: /* sparse_missing */
            if (!pr__ev_varints(ctx, b, e, f, w, &p, end))
                return false;
            break;
        case 5: /* sparse_hex */
            if (w != PR__W_LEN || !pr__pb_len(&p, end, &n))
                return false;
            pr__ev_hex(ctx, b, e, p, n, (size_t)(end - p));
            p += n;
            break;
        default:
            if (!pr__pb_skip(&p, end, w))
                return false;
        }
    }
    return true;
}

/* The shape checks, in pr__check_event's order and words: PR_DEC_OK or a
 * reject reason with `detail`. */
static inline int pr__ev_check(const pr_decode_ctx *ctx, const pr_block *b, const pr__ev *e,
                               char *detail, size_t dsz)
{
    const pr_pipeline_spec *spec = ctx->spec;
    if (e->n_dense != spec->n_dense) {
        snprintf(detail, dsz, "%zu dense values, expected %u", e->n_dense, spec->n_dense);
        return PR_DEC_BAD_SHAPE;
    }
    if (e->dmiss_bad >= 0) {
        snprintf(detail, dsz, "dense_missing index %" PRIu32 " out of range (n_dense %u)",
                 (uint32_t)e->dmiss_bad, spec->n_dense);
        return PR_DEC_BAD_SHAPE;
    }
    if (e->n_hex && e->n_id) {
        snprintf(detail, dsz, "both sparse_hex (%zu) and sparse_id (%zu) set", e->n_hex, e->n_id);
        return PR_DEC_BAD_SHAPE;
    }
    size_t ns = e->n_hex ? e->n_hex : e->n_id;
    if (ns != spec->n_sparse || ns > b->n_sparse) {
        snprintf(detail, dsz, "%zu sparse values, expected %u", ns, spec->n_sparse);
        return PR_DEC_BAD_SHAPE;
    }
    if (e->smiss_bad >= 0) {
        snprintf(detail, dsz, "sparse_missing index %" PRIu32 " out of range (n_sparse %u)",
                 (uint32_t)e->smiss_bad, spec->n_sparse);
        return PR_DEC_BAD_SHAPE;
    }
    const uint32_t nd = spec->n_dense < b->n_dense ? spec->n_dense : b->n_dense;
    for (int64_t c = e->dense_bad; c >= 0 && c < nd; c++) {
        double v = b->dense[(size_t)c * b->cap + b->rows];
        if (!isfinite(v) && !((e->dmiss[c / 64] >> (c % 64)) & 1)) {
            snprintf(detail, dsz, "dense[%" PRId64 "]: %g is not a finite number", c, v);
            return PR_DEC_BAD_DENSE;
        }
    }
    if (e->event_time_ms > 0 && pr_decode_check_ahead(ctx, e->event_time_ms, detail, dsz))
        return PR_DEC_BAD_TIME;
    if (e->hex_bad >= 0) {
        if (e->hex_bad_reason == PR_DEC_LONG_HEX)
            snprintf(detail, dsz, "sparse_hex[%zu]: %zu digits (max 16)", (size_t)e->hex_bad,
                     e->hex_bad_len);
        else
            snprintf(detail, dsz, "sparse_hex[%zu]: non-hex character", (size_t)e->hex_bad);
        return e->hex_bad_reason;
    }
    return PR_DEC_OK;
}

/* Commit row b->rows. Missing values: dense 0.0; sparse key 0 / all-zero slot. */
static inline void pr__ev_commit(const pr_decode_ctx *ctx, pr_block *b, const pr__ev *e)
{
    const pr_pipeline_spec *spec = ctx->spec;
    const uint32_t r = b->rows, cap = b->cap;
    const uint32_t nd = spec->n_dense < b->n_dense ? spec->n_dense : b->n_dense;
    const size_t words = pr_bitmap_words(cap);
    b->labels[r] = spec->has_label ? e->label : 0;
    for (size_t k = 0; k < PR__BM_WORDS; k++) {
        for (uint64_t m = e->dmiss[k]; m; m &= m - 1) {
            size_t c = k * 64 + (size_t)__builtin_ctzll(m);
            if (c >= nd)
                break;
            b->dense[c * cap + r] = 0.0;
            pr_bit_set(b->dense_missing + c * words, r);
        }
        for (uint64_t m = e->smiss[k]; m; m &= m - 1) {
            size_t c = k * 64 + (size_t)__builtin_ctzll(m);
            if (b->sparse_enc[c] == PR_SPARSE_U64)
                b->sparse_u64[c * cap + r] = 0;
            else
                memset(pr_block_hex(b, (uint32_t)c, r), '0', PR_HEX_SLOT);
            pr_bit_set(b->sparse_missing + c * words, r);
        }
    }
    if (b->partition)
        b->partition[r] = ctx->partition;
    if (b->offset)
        b->offset[r] = ctx->offset;
    if (b->event_time_ms)
        b->event_time_ms[r] = e->event_time_ms > 0 ? e->event_time_ms : ctx->default_event_time_ms;
    b->rows = r + 1;
}

/* Decode one Event [p, end) into row b->rows (< cap). Returns -1 when the
 * bytes are not an Event, PR_DEC_OK with the row committed, or a reject
 * reason with `detail` (same checks, order and words as pr__check_event). */
static int pr__fast_event(const pr_decode_ctx *ctx, pr_block *b, const uint8_t *p,
                          const uint8_t *end, char *detail, size_t dsz)
{
    pr__ev e;
    memset(&e, 0, sizeof(e));
    e.dmiss_bad = e.smiss_bad = e.hex_bad = e.dense_bad = -1;
    if (ctx->parse_hex)
        pr__ev_enc(ctx, b, &e, false);
    if (!pr__ev_parse(ctx, b, &e, p, end))
        return -1;
    int reason = pr__ev_check(ctx, b, &e, detail, dsz);
    if (reason != PR_DEC_OK)
        return reason;
    pr__ev_commit(ctx, b, &e);
    return PR_DEC_OK;
}

/* Undo rows [from, b->rows): a malformed batch leaves no rows behind. */
static void pr__rollback(pr_block *b, uint32_t from)
{
    size_t words = pr_bitmap_words(b->cap);
    for (uint32_t r = from; r < b->rows; r++) {
        for (uint32_t c = 0; c < b->n_dense; c++)
            pr_bit_clear(b->dense_missing + c * words, r);
        for (uint32_t c = 0; c < b->n_sparse; c++)
            pr_bit_clear(b->sparse_missing + c * words, r);
    }
    b->rows = from;
}

int pr_decode_protobuf_event(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                             uint32_t *next_rec, pr_arena *arena)
{
    (void)arena;
    char detail[PR__DETAIL_MAX];
    if (*next_rec >= 1)
        return 0;
    if (b->rows >= b->cap)
        return PR_EFULL;
    *next_rec = 1;
    const uint8_t *p = buf;
    int reason = pr__fast_event(ctx, b, p, p + len, detail, sizeof(detail));
    if (reason == PR_DEC_OK)
        return 1;
    if (reason < 0)
        pr__reject(ctx, PR_DEC_BAD_PROTOBUF, "not a piperec.v1.Event", buf, len, 0);
    else
        pr__reject(ctx, reason, detail, buf, len, 0);
    return 0;
}

int pr_decode_protobuf_event_batch(const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                                   size_t len, uint32_t *next_rec, pr_arena *arena)
{
    (void)arena;
    char detail[PR__DETAIL_MAX];
    if (b->rows >= b->cap)
        return PR_EFULL;
    const uint32_t first = *next_rec, rows0 = b->rows;
    /* Nothing may come out of a malformed message. The first call checks
     * the wire format of what it does not decode (before a reject callback
     * or a PR_EFULL return) so that later calls never meet an error. */
    bool checked = first > 0;
    const uint8_t *p = buf, *end = p + len;
    uint32_t i = 0;
    int appended = 0;
    while (p < end) {
        uint32_t f;
        unsigned w;
        size_t n;
        const uint8_t *at = p;
        if (!pr__pb_tag(&p, end, &f, &w))
            goto malformed;
        if (f != 1) {
            if (!pr__pb_skip(&p, end, w))
                goto malformed;
            continue;
        }
        if (w != PR__W_LEN || !pr__pb_len(&p, end, &n))
            goto malformed;
        const uint8_t *ev = p;
        p += n;
        if (i < first) {
            i++;
            continue;
        }
        if (b->rows >= b->cap) {
            if (!checked && !pr__batch_wire_ok(at, end))
                goto malformed;
            *next_rec = i;
            return PR_EFULL;
        }
        int reason = pr__fast_event(ctx, b, ev, p, detail, sizeof(detail));
        if (reason < 0)
            goto malformed;
        if (reason == PR_DEC_OK) {
            appended++;
        } else {
            if (!checked) {
                if (!pr__batch_wire_ok(p, end))
                    goto malformed;
                checked = true;
            }
            pr__reject(ctx, reason, detail, ev, n, (int64_t)i);
        }
        i++;
    }
    *next_rec = i;
    return appended;

malformed:
    pr__rollback(b, rows0);
    if (first == 0)
        pr__reject(ctx, PR_DEC_BAD_PROTOBUF, "not a piperec.v1.EventBatch", buf, len, 0);
    *next_rec = 1;
    return 0;
}

/* Iterate the non-empty lines of a TSV message. Returns false at the end. */
static bool pr__next_line(const char **p, const char *end, const char **line, size_t *llen)
{
    while (*p < end) {
        const char *s = *p;
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        *p = nl ? nl + 1 : end;
        size_t l = (size_t)(le - s);
        if (l == 0 || (l == 1 && s[0] == '\r'))
            continue;
        *line = s;
        *llen = l;
        return true;
    }
    return false;
}

int pr_decode_criteo_message(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                             uint32_t *next_rec)
{
    const char *p = buf, *end = buf + len, *line;
    size_t llen;
    uint32_t rec = 0;
    int appended = 0;
    while (pr__next_line(&p, end, &line, &llen)) {
        if (rec < *next_rec) {
            rec++;
            continue;
        }
        if (b->rows >= b->cap) {
            *next_rec = rec;
            return PR_EFULL;
        }
        uint32_t r = b->rows;
        int got = pr_decode_criteo_line(ctx, b, line, llen, rec);
        if (got == 1) {
            /* The line decoder writes the line number offline; here the row
             * belongs to the Kafka message. */
            if (b->offset)
                b->offset[r] = ctx->offset;
            appended++;
        }
        rec++;
    }
    /* Only line breaks: one record (pr_message_record_count), rejected as
     * empty, so that the message is dead-lettered, not silently consumed. */
    if (rec == 0 && *next_rec == 0 && len > 0) {
        pr__reject(ctx, PR_DEC_EMPTY, "no line: the message holds only line breaks", buf, len, 0);
        rec = 1;
    }
    *next_rec = rec;
    return appended;
}

/* ---------------------------------------------------------------- dispatch */

const char *pr_msg_format_name(int fmt)
{
    if (fmt < 0 || fmt >= PR_MSG__COUNT)
        return "unknown";
    return pr_msg_format_names[fmt];
}

int pr_msg_format_from_name(const char *name)
{
    for (int i = 0; name && i < PR_MSG__COUNT; i++)
        if (!strcmp(name, pr_msg_format_names[i]))
            return i;
    return -1;
}

int pr_decode_message(pr_msg_format fmt, const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                      size_t len, uint32_t *next_rec, pr_arena *arena)
{
    static const char empty[1] = "";
    if (!buf)
        buf = empty;
    switch (fmt) {
    case PR_MSG_CRITEO_TSV:
        return pr_decode_criteo_message(ctx, b, buf, len, next_rec);
    case PR_MSG_PROTOBUF_EVENT:
        return pr_decode_protobuf_event(ctx, b, buf, len, next_rec, arena);
    case PR_MSG_PROTOBUF_EVENT_BATCH:
        return pr_decode_protobuf_event_batch(ctx, b, buf, len, next_rec, arena);
    case PR_MSG_JSON:
    case PR_MSG_AVRO:     /* the JSON decoder with the format's reader set */
    case PR_MSG_PROTOBUF: /* (pr_json_decoder_set_reader) */
        return pr_decode_json_message(ctx, b, buf, len, next_rec);
    default:
        return PR_EINVAL;
    }
}

/* Read a base-128 varint and advance *p; false when truncated or longer
 * than 10 bytes. */
static bool pr__varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    size_t n = pr_varint_get(*p, end, v);
    *p += n;
    return n != 0;
}

/* Count field-1 (events) entries of an EventBatch by walking its wire format,
 * without unpacking: cheap enough to call before deciding where it goes. */
static int pr__count_batch_events(const uint8_t *p, size_t len)
{
    const uint8_t *end = p + len;
    int n = 0;
    while (p < end) {
        uint64_t tag, v;
        if (!pr__varint(&p, end, &tag))
            return -1;
        switch (tag & 7) {
        case 0:
            if (!pr__varint(&p, end, &v))
                return -1;
            break;
        case 1:
            if (end - p < 8)
                return -1;
            p += 8;
            break;
        case 2:
            if (!pr__varint(&p, end, &v) || v > (uint64_t)(end - p))
                return -1;
            p += v;
            if ((tag >> 3) == 1)
                n++;
            break;
        case 5:
            if (end - p < 4)
                return -1;
            p += 4;
            break;
        default:
            return -1;
        }
    }
    return n;
}

int pr_message_record_count(pr_msg_format fmt, const void *buf, size_t len, pr_arena *arena)
{
    (void)arena;
    if (!buf)
        len = 0;
    switch (fmt) {
    case PR_MSG_CRITEO_TSV: {
        const char *p = buf, *end = p + len, *line;
        size_t l;
        int n = 0;
        while (pr__next_line(&p, end, &line, &l))
            n++;
        return n ? n : len > 0; /* only line breaks: one record, rejected as empty */
    }
    case PR_MSG_PROTOBUF_EVENT:
    case PR_MSG_JSON:
    case PR_MSG_AVRO:
    case PR_MSG_PROTOBUF:
        return 1;
    case PR_MSG_PROTOBUF_EVENT_BATCH: {
        int n = pr__count_batch_events(buf, len);
        return n < 0 ? 0 : n;
    }
    default:
        return 0;
    }
}
