/*
 * proto_ref.c — the reference protobuf decoders: piperec.v1.Event and
 * EventBatch through protobuf-c's unpack, the slow obvious way, into a
 * pr_block with the same rows and reject decisions the product's hand-written
 * wire-format decoders (ingest/proto_decode.c) must give.
 *
 * Test code: tests/ingest/test_proto_fast.c and tests/fuzz/fuzz_proto.c
 * compare the fast decoders with these. They were in the product library
 * only as that reference; nothing in the product calls them.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "piperec.pb-c.h"
#include "pr_hex.h"
#include "proto_ref.h"

#define PR__DETAIL_MAX 160

static void pr__reject(const pr_decode_ctx *ctx, int reason, const char *detail, const void *rec,
                       size_t len, int64_t recno)
{
    if (ctx->on_reject)
        ctx->on_reject(ctx->opaque, reason, detail, rec, len, recno);
}

static void pr__u64_to_slot(char *slot, uint64_t v)
{
    static const char hexdig[16] = "0123456789abcdef";
    for (int i = PR_HEX_SLOT - 1; i >= 0; i--) {
        slot[i] = hexdig[v & 15];
        v >>= 4;
    }
}

/* The block column's encoding for this event's kind: a column keeps the
 * encoding of its first row; an empty block takes the event's. */
static uint8_t pr__col_enc(const pr_decode_ctx *ctx, pr_block *b, uint32_t c, bool ids)
{
    if (b->rows == 0)
        b->sparse_enc[c] = ids || ctx->parse_hex ? PR_SPARSE_U64 : PR_SPARSE_HEX;
    return b->sparse_enc[c];
}

/* Validate an event against the spec. Returns PR_DEC_OK or a reason. */
/* Is index i in the list (dense_missing: a missing slot's value is no value)? */
static bool pr__listed(const uint32_t *list, size_t n, size_t i)
{
    for (size_t k = 0; k < n; k++)
        if (list[k] == i)
            return true;
    return false;
}

static int pr__check_event(const pr_decode_ctx *ctx, const pr_block *b,
                           const Piperec__V1__Event *ev, char *detail, size_t dsz)
{
    const pr_pipeline_spec *spec = ctx->spec;
    if (ev->n_dense != spec->n_dense) {
        snprintf(detail, dsz, "%zu dense values, expected %u", ev->n_dense, spec->n_dense);
        return PR_DEC_BAD_SHAPE;
    }
    for (size_t i = 0; i < ev->n_dense_missing; i++)
        if (ev->dense_missing[i] >= spec->n_dense) {
            snprintf(detail, dsz, "dense_missing index %" PRIu32 " out of range (n_dense %u)",
                     ev->dense_missing[i], spec->n_dense);
            return PR_DEC_BAD_SHAPE;
        }
    if (ev->n_sparse_hex && ev->n_sparse_id) {
        snprintf(detail, dsz, "both sparse_hex (%zu) and sparse_id (%zu) set", ev->n_sparse_hex,
                 ev->n_sparse_id);
        return PR_DEC_BAD_SHAPE;
    }
    size_t ns = ev->n_sparse_hex ? ev->n_sparse_hex : ev->n_sparse_id;
    if (ns != spec->n_sparse) {
        snprintf(detail, dsz, "%zu sparse values, expected %u", ns, spec->n_sparse);
        return PR_DEC_BAD_SHAPE;
    }
    for (size_t i = 0; i < ev->n_sparse_missing; i++)
        if (ev->sparse_missing[i] >= spec->n_sparse) {
            snprintf(detail, dsz, "sparse_missing index %" PRIu32 " out of range (n_sparse %u)",
                     ev->sparse_missing[i], spec->n_sparse);
            return PR_DEC_BAD_SHAPE;
        }
    for (size_t i = 0; i < ev->n_dense && i < b->n_dense; i++)
        if (!isfinite(ev->dense[i]) && !pr__listed(ev->dense_missing, ev->n_dense_missing, i)) {
            snprintf(detail, dsz, "dense[%zu]: %g is not a finite number", i, ev->dense[i]);
            return PR_DEC_BAD_DENSE;
        }
    if (ev->event_time_ms > 0 && pr_decode_check_ahead(ctx, ev->event_time_ms, detail, dsz))
        return PR_DEC_BAD_TIME;
    for (size_t i = 0; i < ev->n_sparse_hex; i++) {
        const char *s = ev->sparse_hex[i];
        size_t l = strlen(s);
        if (l > PR_HEX_SLOT) {
            snprintf(detail, dsz, "sparse_hex[%zu]: %zu digits (max 16)", i, l);
            return PR_DEC_LONG_HEX;
        }
        /* Hex headed for a u64 column is parsed here, so check it here. */
        bool to_u64 = b->rows > 0 ? b->sparse_enc[i] == PR_SPARSE_U64 : ctx->parse_hex;
        if (to_u64 && pr_hex_first_bad(s, l) < l) {
            snprintf(detail, dsz, "sparse_hex[%zu]: non-hex character", i);
            return PR_DEC_BAD_HEX;
        }
    }
    return PR_DEC_OK;
}

/* Write a validated event as row b->rows. */
static void pr__put_event(const pr_decode_ctx *ctx, pr_block *b, const Piperec__V1__Event *ev)
{
    const pr_pipeline_spec *spec = ctx->spec;
    const uint32_t r = b->rows, cap = b->cap;
    const size_t words = pr_bitmap_words(cap);

    b->labels[r] = spec->has_label ? ev->label : 0;
    for (uint32_t c = 0; c < spec->n_dense; c++) {
        b->dense[(size_t)c * cap + r] = ev->dense[c];
        pr_bit_clear(b->dense_missing + c * words, r);
    }
    for (size_t i = 0; i < ev->n_dense_missing; i++) {
        uint32_t c = ev->dense_missing[i];
        b->dense[(size_t)c * cap + r] = 0.0;
        pr_bit_set(b->dense_missing + c * words, r);
    }

    bool ids = ev->n_sparse_id > 0;
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        uint64_t *miss = b->sparse_missing + c * words;
        uint8_t enc = pr__col_enc(ctx, b, c, ids);
        if (ids) {
            uint64_t v = ev->sparse_id[c];
            if (enc == PR_SPARSE_U64) {
                b->sparse_u64[(size_t)c * cap + r] = v;
                pr_bit_clear(miss, r);
            } else {
                pr__u64_to_slot(pr_block_hex(b, c, r), v);
                pr_bit_clear(miss, r);
            }
        } else {
            const char *s = ev->sparse_hex[c];
            size_t l = strlen(s);
            if (enc == PR_SPARSE_HEX) {
                pr_block_put_hex(b, c, r, s, l);
            } else {
                uint64_t v = 0; /* validated above; "" reads as missing */
                if (l > 0)
                    pr_hex_parse_safe(s, l, l, &v);
                b->sparse_u64[(size_t)c * cap + r] = v;
                if (l == 0)
                    pr_bit_set(miss, r);
                else
                    pr_bit_clear(miss, r);
            }
        }
    }
    for (size_t i = 0; i < ev->n_sparse_missing; i++) {
        uint32_t c = ev->sparse_missing[i];
        if (b->sparse_enc[c] == PR_SPARSE_U64) {
            b->sparse_u64[(size_t)c * cap + r] = 0;
            pr_bit_set(b->sparse_missing + c * words, r);
        } else {
            pr_block_put_hex(b, c, r, "", 0);
        }
    }

    if (b->partition)
        b->partition[r] = ctx->partition;
    if (b->offset)
        b->offset[r] = ctx->offset;
    if (b->event_time_ms)
        b->event_time_ms[r] =
            ev->event_time_ms > 0 ? ev->event_time_ms : ctx->default_event_time_ms;
    b->rows = r + 1;
}

/* Decode one unpacked event: 1 appended, 0 rejected (`rec` is what the
 * reject callback gets; NULL = re-encode the event). */
static int pr__event(const pr_decode_ctx *ctx, pr_block *b, const Piperec__V1__Event *ev,
                     const void *rec, size_t rec_len, int64_t recno)
{
    char detail[PR__DETAIL_MAX];
    int reason = pr__check_event(ctx, b, ev, detail, sizeof(detail));
    if (reason == PR_DEC_OK) {
        pr__put_event(ctx, b, ev);
        return 1;
    }
    if (!ctx->on_reject)
        return 0;
    if (rec) {
        pr__reject(ctx, reason, detail, rec, rec_len, recno);
        return 0;
    }
    size_t n = piperec__v1__event__get_packed_size(ev);
    uint8_t *buf = malloc(n ? n : 1);
    if (buf) {
        piperec__v1__event__pack(ev, buf);
        pr__reject(ctx, reason, detail, buf, n, recno);
    } else {
        pr__reject(ctx, reason, detail, "", 0, recno);
    }
    free(buf);
    return 0;
}

int pr_decode_protobuf_event_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len,
                                 uint32_t *next_rec, pr_arena *arena)
{
    if (*next_rec >= 1)
        return 0;
    if (b->rows >= b->cap)
        return PR_EFULL;
    (void)arena; /* protobuf-c's own allocator: speed is not the point here */
    ProtobufCAllocator *al = NULL;
    Piperec__V1__Event *ev = piperec__v1__event__unpack(al, len, buf);
    *next_rec = 1;
    if (!ev) {
        pr__reject(ctx, PR_DEC_BAD_PROTOBUF, "not a piperec.v1.Event", buf, len, 0);
        return 0;
    }
    int n = pr__event(ctx, b, ev, buf, len, 0);
    piperec__v1__event__free_unpacked(ev, al);
    return n;
}

int pr_decode_protobuf_event_batch_ref(const pr_decode_ctx *ctx, pr_block *b, const void *buf,
                                       size_t len, uint32_t *next_rec, pr_arena *arena)
{
    if (b->rows >= b->cap)
        return PR_EFULL;
    (void)arena; /* protobuf-c's own allocator: speed is not the point here */
    ProtobufCAllocator *al = NULL;
    Piperec__V1__EventBatch *eb = piperec__v1__event_batch__unpack(al, len, buf);
    if (!eb) {
        if (*next_rec == 0)
            pr__reject(ctx, PR_DEC_BAD_PROTOBUF, "not a piperec.v1.EventBatch", buf, len, 0);
        *next_rec = 1;
        return 0;
    }
    int appended = 0, ret;
    size_t i = *next_rec;
    for (; i < eb->n_events; i++) {
        if (b->rows >= b->cap)
            break;
        appended += pr__event(ctx, b, eb->events[i], NULL, 0, (int64_t)i);
    }
    *next_rec = (uint32_t)i;
    ret = i < eb->n_events ? PR_EFULL : appended;
    piperec__v1__event_batch__free_unpacked(eb, al);
    return ret;
}
