/*
 * fuzz_trainer_wire.c — libFuzzer target for the trainer stream protocol
 * (docs/trainer-protocol.md), both directions, without sockets:
 *   - server side: the frames a client sends, as the trainer sink reads them
 *     (sinks/trainer_wire.c pr__frame_parse with the 1 MiB control-frame
 *     limit, then the fields sink_trainer.c's handle_frame reads);
 *   - client side: the frames a server sends, as the reference client reads
 *     them (sinks/trainer_client.c: pr__frame_parse, SubscribeOk, Ping,
 *     Error, and batch frames through batcher/batch_pb.c pr_batch_decode).
 *
 * Input: one flags byte (bit 0: client side, else server side), then a byte
 * stream of frames: u32 little-endian length + Frame bytes, as on the wire.
 * Every decoded TrainingBatch view must point inside the frame with tensor
 * lengths that really are rows x columns x width (checked without overflow),
 * and a view of a sane size must survive pr_batch_from_view -> encode ->
 * decode unchanged.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_batcher.h"
#include "pr_log.h"
#include "trainer.pb-c.h"
#include "trainer_wire.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pr_log_set_level(PR_LOG_ERROR);
    return 0;
}

static volatile size_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        sink += b[i];
}

static void touch_str(const char *s)
{
    if (s)
        touch(s, strlen(s) + 1);
}

static bool within(const uint8_t *p, size_t n, const uint8_t *lo, const uint8_t *hi)
{
    if (n == 0)
        return true;
    return p >= lo && p <= hi && n <= (size_t)(hi - p);
}

/* rows * a * b fits and equals len (128-bit arithmetic: no wrap-around). */
static bool shape_is(size_t len, uint64_t rows, uint64_t a, uint64_t b)
{
    unsigned __int128 want = (unsigned __int128)rows * a * b;
    return want == len;
}

static void check_batch(const uint8_t *bp, size_t bl)
{
    pr_batch_view v;
    char err[256];
    if (pr_batch_decode(bp, bl, &v, err, sizeof(err)) < 0)
        return;
    const uint8_t *end = bp + bl;
    FUZZ_CHECK(within((const uint8_t *)v.pipeline, v.pipeline_len, bp, end));
    FUZZ_CHECK(within(v.labels, v.labels_len, bp, end));
    FUZZ_CHECK(within(v.dense, v.dense_len, bp, end));
    FUZZ_CHECK(within(v.sparse, v.sparse_len, bp, end));
    FUZZ_CHECK(v.labels_len == 0 || shape_is(v.labels_len, v.rows, 1, 4));
    FUZZ_CHECK(shape_is(v.dense_len, v.rows, v.n_dense, 4));
    FUZZ_CHECK(shape_is(v.sparse_len, v.rows, v.n_sparse, v.n_sparse ? v.sparse_width : 0));
    for (uint32_t i = 0; i < v.n_ranges; i++)
        FUZZ_CHECK(within((const uint8_t *)v.ranges[i].topic, v.ranges[i].topic_len, bp, end));
    touch(v.vocab_sizes, v.n_vocab_sizes * sizeof(uint64_t));

    /* Round trip for views a client could hold in memory. */
    if ((uint64_t)v.rows * (1 + v.n_dense + v.n_sparse) <= (1u << 20) && v.n_ranges <= 1024) {
        pr_batch *b = pr_batch_from_view(&v);
        if (b) {
            FUZZ_CHECK(pr_batch_encode(b) == 0);
            pr_batch_view w;
            FUZZ_CHECK(pr_batch_decode(b->pb, b->pb_len, &w, err, sizeof(err)) == 0);
            FUZZ_CHECK(w.seq == v.seq && w.rows == v.rows);
            FUZZ_CHECK(w.n_dense == v.n_dense && w.n_sparse == v.n_sparse);
            FUZZ_CHECK(w.dense_len == v.dense_len && w.sparse_len == v.sparse_len);
            FUZZ_CHECK(!v.dense_len || !memcmp(w.dense, v.dense, v.dense_len));
            FUZZ_CHECK(!v.sparse_len || !memcmp(w.sparse, v.sparse, v.sparse_len));
            FUZZ_CHECK(w.n_ranges == v.n_ranges);
            pr_batch_view_fini(&w);
            pr_batch_unref(b);
        }
    }
    pr_batch_view_fini(&v);
}

/* What sink_trainer.c's handle_frame reads of a client's control frame. */
static void server_frame(const uint8_t *data, size_t len)
{
    const uint8_t *bp;
    size_t bl;
    Piperec__Trainer__V1__Frame *f;
    if (pr__frame_parse(data, len, &bp, &bl, &f) < 0) {
        FUZZ_CHECK(f == NULL);
        return;
    }
    if (!f) { /* a batch: "clients do not send batches" */
        FUZZ_CHECK(within(bp, bl, data, data + len));
        return;
    }
    char id[64];
    switch (f->msg_case) {
    case PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE:
        snprintf(id, sizeof(id), "%s", f->subscribe->client_id ? f->subscribe->client_id : "");
        touch_str(f->subscribe->pipeline);
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ACK:
        touch(f->ack->sequences, f->ack->n_sequences * sizeof(uint64_t));
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_CREDIT:
        sink += f->credit->credits;
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_PING:
        sink += f->ping->nonce;
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
        touch_str(f->error->message);
        break;
    default:
        break;
    }
    pr__frame_free(f);
}

/* What trainer_client.c reads of a server's frame. */
static void client_frame(const uint8_t *data, size_t len)
{
    const uint8_t *bp;
    size_t bl;
    Piperec__Trainer__V1__Frame *f = NULL;
    if (pr__frame_parse(data, len, &bp, &bl, &f) < 0)
        return;
    if (bp) {
        FUZZ_CHECK(f == NULL && within(bp, bl, data, data + len));
        check_batch(bp, bl);
        return;
    }
    FUZZ_CHECK(f != NULL);
    switch (f->msg_case) {
    case PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK: {
        Piperec__Trainer__V1__SubscribeOk *ok = f->subscribe_ok;
        char name[64];
        snprintf(name, sizeof(name), "%s", ok->pipeline);
        if (ok->n_dense_names == ok->n_dense)
            for (size_t i = 0; i < ok->n_dense_names; i++)
                touch_str(ok->dense_names[i]);
        if (ok->n_sparse_names == ok->n_sparse)
            for (size_t i = 0; i < ok->n_sparse_names; i++)
                touch_str(ok->sparse_names[i]);
        break;
    }
    case PIPEREC__TRAINER__V1__FRAME__MSG_PING:
        sink += f->ping->nonce + (size_t)f->ping->time_ms;
        break;
    case PIPEREC__TRAINER__V1__FRAME__MSG_ERROR:
        touch_str(f->error->message);
        break;
    default:
        break;
    }
    pr__frame_free(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const bool client = data[0] & 1;
    const uint8_t *p = data + 1, *end = data + size;
    while ((size_t)(end - p) >= 4) {
        uint32_t n;
        memcpy(&n, p, 4);
        if (n > (client ? PR__FRAME_MAX : PR__FRAME_MAX_CTRL) || n > (size_t)(end - p) - 4)
            break; /* too large: the peer closes; short: waits for more */
        /* An exact-size copy per frame, as a receive buffer would end there. */
        uint8_t *frame = malloc(n ? n : 1);
        memcpy(frame, p + 4, n);
        if (client)
            client_frame(frame, n);
        else
            server_frame(frame, n);
        free(frame);
        p += 4 + (size_t)n;
    }
    return 0;
}
