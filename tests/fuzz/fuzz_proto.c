/*
 * fuzz_proto.c — libFuzzer target for the protobuf decoders
 * (ingest/proto_decode.c): piperec.v1.Event and EventBatch, the hand-written
 * fast path against the protobuf-c reference (the *_ref functions).
 *
 * Input: one flags byte, then the message bytes.
 *   bit 0: EventBatch (else one Event)
 *   bit 1: fused Hex2Int (ctx.parse_hex)
 *   bits 2-3: the block's starting state: empty, holding one sparse_id row,
 *             or one sparse_hex row (so column encodings differ)
 *   bit 4: blocks of 64 rows, else 256
 *   bit 5: small shape (label, 2 dense, 3 sparse) instead of 13 + 26
 * Both decoders get the same bytes (an exact-size copy) and the same starting
 * block and must agree on the return value, the resume cursor, every row and
 * every reject (reason, record index, detail). Batches are resumed through
 * fresh blocks on PR_EFULL, and pr_decode_message / pr_message_record_count
 * must agree with the direct calls.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "proto_ref.h" /* tests/ingest/: the reference decoders */

static pr_arena *arena;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pr_log_set_level(PR_LOG_ERROR);
    arena = pr_arena_new(0);
    return 0;
}

/* Minimal Event encoder for the starting rows: label 1, dense 1..n, sparse
 * as ids (field 6, packed) or as hex strings (field 5). */
static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t starting_event(const pr_pipeline_spec *spec, bool ids, uint8_t *out)
{
    size_t n = 0;
    out[n++] = 0x08; /* label */
    out[n++] = 1;
    out[n++] = 0x1a; /* dense, packed doubles */
    n += put_varint(out + n, (uint64_t)spec->n_dense * 8);
    for (uint32_t i = 0; i < spec->n_dense; i++) {
        double d = i + 1;
        memcpy(out + n, &d, 8);
        n += 8;
    }
    if (ids) {
        uint8_t tmp[PR_MAX_SPARSE * 10];
        size_t t = 0;
        for (uint32_t i = 0; i < spec->n_sparse; i++)
            t += put_varint(tmp + t, 100 + i);
        out[n++] = 0x32; /* sparse_id, packed */
        n += put_varint(out + n, t);
        memcpy(out + n, tmp, t);
        n += t;
    } else {
        for (uint32_t i = 0; i < spec->n_sparse; i++) {
            out[n++] = 0x2a; /* sparse_hex */
            out[n++] = 2;
            out[n++] = 'a';
            out[n++] = '0';
        }
    }
    return n;
}

static void prefill(const pr_decode_ctx *ctx, pr_block *b, int state)
{
    pr_block_reset(b);
    if (state == 0 || state == 3)
        return;
    static uint8_t ev[16 + PR_MAX_DENSE * 8 + PR_MAX_SPARSE * 10];
    size_t n = starting_event(ctx->spec, state == 1, ev);
    pr_decode_ctx plain = *ctx;
    plain.parse_hex = false;
    plain.on_reject = NULL;
    uint32_t next = 0;
    FUZZ_CHECK(pr_decode_protobuf_event_ref(&plain, b, ev, n, &next, NULL) == 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const unsigned flags = data[0];
    const bool batch = flags & 1;
    const int state = (flags >> 2) & 3;
    const size_t len = size - 1;
    uint8_t *msg = malloc(len ? len : 1);
    memcpy(msg, data + 1, len);

    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    if (flags & 32) {
        spec.n_dense = 2;
        spec.n_sparse = 3;
    }
    const uint32_t cap = (flags & 16) ? 64 : 256;
    fuzz_rejects rr = {0}, rf = {0};
    pr_decode_ctx cr = {.spec = &spec,
                        .on_reject = fuzz_on_reject,
                        .opaque = &rr,
                        .partition = 3,
                        .offset = 77,
                        .default_event_time_ms = 1234,
                        .parse_hex = flags & 2};
    pr_decode_ctx cf = cr;
    cf.opaque = &rf;
    const unsigned slot = (flags >> 4) & 3;
    pr_block *br = fuzz_block(2 * slot, spec.n_dense, spec.n_sparse, cap);
    pr_block *bf = fuzz_block(2 * slot + 1, spec.n_dense, spec.n_sparse, cap);
    prefill(&cr, br, state);
    prefill(&cf, bf, state);

    uint32_t nr = 0, nf = 0;
    for (int round = 0;; round++) {
        int r1, r2;
        if (batch) {
            r1 = pr_decode_protobuf_event_batch_ref(&cr, br, msg, len, &nr, arena);
            r2 = pr_decode_protobuf_event_batch(&cf, bf, msg, len, &nf, NULL);
        } else {
            r1 = pr_decode_protobuf_event_ref(&cr, br, msg, len, &nr, arena);
            r2 = pr_decode_protobuf_event(&cf, bf, msg, len, &nf, NULL);
        }
        FUZZ_CHECK(r1 == r2);
        FUZZ_CHECK(nr == nf);
        FUZZ_CHECK(r1 >= 0 || r1 == PR_EFULL);
        fuzz_compare_rejects(&rr, &rf);
        fuzz_compare_blocks(br, bf);
        rr.n = rf.n = 0;
        if (r1 != PR_EFULL)
            break;
        FUZZ_CHECK(batch && round < 1000000);
        pr_block_reset(br);
        pr_block_reset(bf);
    }

    /* The dispatching entry point and the record count agree with the above. */
    pr_block_reset(bf);
    rf.n = 0;
    uint32_t next = 0;
    int64_t rows2 = 0;
    const pr_msg_format fmt = batch ? PR_MSG_PROTOBUF_EVENT_BATCH : PR_MSG_PROTOBUF_EVENT;
    for (;;) {
        int rc = pr_decode_message(fmt, &cf, bf, msg, len, &next, arena);
        rows2 += bf->rows;
        if (rc != PR_EFULL)
            break;
        pr_block_reset(bf);
    }
    int count = pr_message_record_count(fmt, msg, len, arena);
    FUZZ_CHECK(count >= 0);
    if (batch && count > 0)
        FUZZ_CHECK(rows2 <= count);

    free(msg);
    return 0;
}
