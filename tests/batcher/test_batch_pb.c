/*
 * test_batch_pb.c — the hand-written TrainingBatch codec (batch_pb.c)
 * checked against protobuf-c's generated code in both directions, plus the
 * trainer frame helpers and malformed input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batcher_int.h"
#include "pr_hostport.h"
#include "trainer_wire.h"
#include "piperec.pb-c.h"
#include "trainer.pb-c.h"

static pr_batch *sample_batch(uint8_t w)
{
    pr_batch *b = pr_batch_new("criteo", 5, 3, 2, w);
    assert_non_null(b);
    b->seq = 300; /* multi-byte varint */
    for (uint32_t r = 0; r < 5; r++) {
        b->labels[r] = (int32_t)r - 1; /* a negative label */
        for (int c = 0; c < 3; c++)
            b->dense[c * 5 + r] = 0.5f * (float)(r + 10 * c);
        for (int c = 0; c < 2; c++) {
            if (w == 4)
                ((int32_t *)b->sparse)[c * 5 + r] = (int32_t)(r * 100 + c);
            else
                ((int64_t *)b->sparse)[c * 5 + r] = (int64_t)r * 10000000000LL + c;
        }
    }
    b->n_topics = 2;
    b->topics = calloc(2, sizeof(char *));
    b->topics[0] = strdup("events");
    b->topics[1] = strdup("clicks");
    b->n_ranges = 2;
    b->ranges = calloc(2, sizeof(pr_batch_range));
    b->ranges[0] = (pr_batch_range){3, 100, 102, 3};
    b->ranges[1] = (pr_batch_range){(1 << 16) | 7, 5000000000LL, 5000000001LL, 2};
    b->min_event_time_ms = -5; /* negative int64: ten-byte varint */
    b->max_event_time_ms = 1700000000123LL;
    b->emit_time_ms = 1700000000999LL;
    b->vocab_sizes[0] = 524288;
    b->vocab_sizes[1] = 0;
    return b;
}

static void test_encode_matches_protobuf_c(void **state)
{
    (void)state;
    uint8_t widths[] = {4, 8};
    for (int k = 0; k < 2; k++) {
        pr_batch *b = sample_batch(widths[k]);
        assert_int_equal(pr_batch_encode(b), 0);
        Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
        assert_non_null(m);
        assert_string_equal(m->pipeline, "criteo");
        assert_int_equal(m->sequence, 300);
        assert_int_equal(m->rows, 5);
        assert_int_equal(m->n_dense, 3);
        assert_int_equal(m->n_sparse, 2);
        assert_int_equal(m->sparse_width, widths[k]);
        assert_int_equal(m->labels.len, 20);
        assert_memory_equal(m->labels.data, b->labels, 20);
        assert_int_equal(m->dense.len, 60);
        assert_memory_equal(m->dense.data, b->dense, 60);
        assert_int_equal(m->sparse.len, 10 * widths[k]);
        assert_memory_equal(m->sparse.data, b->sparse, 10 * widths[k]);
        assert_int_equal(m->n_offsets, 2);
        assert_string_equal(m->offsets[0]->topic, "events");
        assert_int_equal(m->offsets[0]->partition, 3);
        assert_int_equal(m->offsets[0]->first_offset, 100);
        assert_int_equal(m->offsets[0]->last_offset, 102);
        assert_int_equal(m->offsets[0]->rows, 3);
        assert_string_equal(m->offsets[1]->topic, "clicks");
        assert_int_equal(m->offsets[1]->partition, 7);
        assert_int_equal(m->offsets[1]->first_offset, 5000000000LL);
        assert_int_equal(m->min_event_time_ms, -5);
        assert_int_equal(m->max_event_time_ms, 1700000000123LL);
        assert_int_equal(m->emit_time_ms, 1700000000999LL);
        assert_int_equal(m->n_vocab_sizes, 2);
        assert_int_equal(m->vocab_sizes[0], 524288);
        assert_int_equal(m->vocab_sizes[1], 0);
        /* Byte-identical to protobuf-c's own serialization (canonical order). */
        size_t n = piperec__v1__training_batch__get_packed_size(m);
        uint8_t *again = malloc(n);
        piperec__v1__training_batch__pack(m, again);
        assert_int_equal(n, b->pb_len);
        assert_memory_equal(again, b->pb, n);
        free(again);
        piperec__v1__training_batch__free_unpacked(m, NULL);
        pr_batch_unref(b);
    }
}

static void test_decode_zero_copy(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.pipeline_len, 6);
    assert_memory_equal(v.pipeline, "criteo", 6);
    assert_int_equal(v.seq, 300);
    assert_int_equal(v.rows, 5);
    /* Tensors point into the encoded buffer. */
    assert_true(v.labels >= b->pb && v.labels + v.labels_len <= b->pb + b->pb_len);
    assert_true(v.dense >= b->pb && v.dense + v.dense_len <= b->pb + b->pb_len);
    assert_memory_equal(v.dense, b->dense, 60);
    assert_memory_equal(v.sparse, b->sparse, 40);
    assert_int_equal(v.n_ranges, 2);
    assert_int_equal(v.ranges[1].partition, 7);
    assert_int_equal(v.ranges[1].topic_len, 6);
    assert_memory_equal(v.ranges[1].topic, "clicks", 6);
    assert_int_equal(v.min_event_time_ms, -5);
    assert_int_equal(v.n_vocab_sizes, 2);
    assert_int_equal(v.vocab_sizes[0], 524288);
    /* Back to an owning batch, and encoded again: same bytes. */
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    c->seq = v.seq;
    assert_int_equal(pr_batch_encode(c), 0);
    assert_int_equal(c->pb_len, b->pb_len);
    assert_memory_equal(c->pb, b->pb, b->pb_len);
    pr_batch_view_fini(&v);
    pr_batch_unref(c);
    pr_batch_unref(b);
}

static void test_decode_protobuf_c_output(void **state)
{
    (void)state;
    /* A message built by protobuf-c, unpacked vocab (not packed) is also accepted. */
    Piperec__V1__TrainingBatch m = PIPEREC__V1__TRAINING_BATCH__INIT;
    int32_t labels[2] = {1, 0};
    float dense[2] = {1.5f, 2.5f};
    int64_t sparse[2] = {1LL << 40, 3};
    uint64_t vocab[1] = {77};
    m.pipeline = "p";
    m.sequence = 9;
    m.rows = 2;
    m.n_dense = 1;
    m.n_sparse = 1;
    m.sparse_width = 8;
    m.labels = (ProtobufCBinaryData){sizeof(labels), (uint8_t *)labels};
    m.dense = (ProtobufCBinaryData){sizeof(dense), (uint8_t *)dense};
    m.sparse = (ProtobufCBinaryData){sizeof(sparse), (uint8_t *)sparse};
    m.n_vocab_sizes = 1;
    m.vocab_sizes = vocab;
    size_t n = piperec__v1__training_batch__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    piperec__v1__training_batch__pack(&m, buf);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), 0);
    assert_int_equal(v.seq, 9);
    assert_int_equal(v.sparse_width, 8);
    int64_t s0;
    memcpy(&s0, v.sparse, 8);
    assert_int_equal(s0, 1LL << 40);
    assert_int_equal(v.vocab_sizes[0], 77);
    pr_batch_view_fini(&v);
    /* Truncated: every prefix fails cleanly or decodes a shorter message
     * whose shape checks then fail. */
    for (size_t cut = 1; cut < n; cut++) {
        int rc = pr_batch_decode(buf, cut, &v, err, sizeof(err));
        if (rc == 0)
            pr_batch_view_fini(&v);
        else
            assert_int_equal(rc, PR_EBADREC);
    }
    assert_int_equal(pr_batch_decode(buf, n - 1, &v, err, sizeof(err)), PR_EBADREC);
    free(buf);
    /* Shape mismatch. */
    m.rows = 3;
    n = piperec__v1__training_batch__get_packed_size(&m);
    buf = malloc(n);
    piperec__v1__training_batch__pack(&m, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "length"));
    free(buf);
}

static void test_frames(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    uint8_t hdr[16];
    size_t hl = pr__batch_frame_header(b, hdr);
    size_t total = hl + b->pb_len;
    uint8_t *frame = malloc(total);
    memcpy(frame, hdr, hl);
    memcpy(frame + hl, b->pb, b->pb_len);
    uint32_t len;
    memcpy(&len, frame, 4);
    assert_int_equal(len, total - 4);
    /* protobuf-c sees a Frame whose batch is our TrainingBatch. */
    Piperec__Trainer__V1__Frame *f = piperec__trainer__v1__frame__unpack(NULL, len, frame + 4);
    assert_non_null(f);
    assert_int_equal(f->msg_case, PIPEREC__TRAINER__V1__FRAME__MSG_BATCH);
    assert_int_equal(f->batch->sequence, 300);
    piperec__trainer__v1__frame__free_unpacked(f, NULL);
    /* Our parser hands back the slice without unpacking. */
    const uint8_t *bp;
    size_t bl;
    Piperec__Trainer__V1__Frame *ctrl;
    assert_int_equal(pr__frame_parse(frame + 4, len, &bp, &bl, &ctrl), 0);
    assert_null(ctrl);
    assert_ptr_equal(bp, frame + hl);
    assert_int_equal(bl, b->pb_len);
    free(frame);
    /* A control frame round trip. */
    Piperec__Trainer__V1__Ack ack = PIPEREC__TRAINER__V1__ACK__INIT;
    uint64_t seqs[2] = {5, 6};
    ack.n_sequences = 2;
    ack.sequences = seqs;
    Piperec__Trainer__V1__Frame af = PIPEREC__TRAINER__V1__FRAME__INIT;
    af.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_ACK;
    af.ack = &ack;
    uint8_t *buf;
    size_t n;
    assert_int_equal(pr__frame_pack(&af, &buf, &n), 0);
    assert_int_equal(pr__frame_parse(buf + 4, n - 4, &bp, &bl, &ctrl), 0);
    assert_null(bp);
    assert_non_null(ctrl);
    assert_int_equal(ctrl->msg_case, PIPEREC__TRAINER__V1__FRAME__MSG_ACK);
    assert_int_equal(ctrl->ack->n_sequences, 2);
    assert_int_equal(ctrl->ack->sequences[1], 6);
    pr__frame_free(ctrl);
    free(buf);
    assert_int_equal(pr__frame_parse((const uint8_t *)"\xff", 1, &bp, &bl, &ctrl), PR_EBADREC);
    pr_batch_unref(b);
}

static void test_hostport(void **state)
{
    (void)state;
    char h[64];
    uint16_t p;
    assert_int_equal(pr_hostport_parse("127.0.0.1:7070", h, sizeof(h), &p), 0);
    assert_string_equal(h, "127.0.0.1");
    assert_int_equal(p, 7070);
    assert_int_equal(pr_hostport_parse("[::1]:0", h, sizeof(h), &p), 0);
    assert_string_equal(h, "::1");
    assert_int_equal(pr_hostport_parse(":9", h, sizeof(h), &p), 0);
    assert_string_equal(h, "");
    assert_int_equal(pr_hostport_parse("host", h, sizeof(h), &p), PR_EINVAL);
    assert_int_equal(pr_hostport_parse("host:70000", h, sizeof(h), &p), PR_EINVAL);
    assert_int_equal(pr_hostport_parse("host:", h, sizeof(h), &p), PR_EINVAL);
}

/* Found by tests/fuzz (fuzz_trainer_wire): column counts whose length
 * products wrap around size_t (2^31 rows x 2^31 dense x 4 = 0 bytes) were
 * accepted, and pr_batch_from_view passed a NULL tensor to memcpy. */
/* Issue 11: the restart epoch travels as TrainingBatch.epoch (field 16),
 * read by protobuf-c and by our decoder; epoch 0 is not written, so a server
 * without state.dir sends the same bytes as before. */
static void test_epoch_field(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    size_t len0 = b->pb_len;
    pr_batch_unref(b);

    b = sample_batch(4);
    b->epoch = 70000; /* multi-byte varint */
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(b->pb_len, len0 + 2 + 3); /* tag 16 (2 bytes) + varint */
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_int_equal(m->epoch, 70000);
    assert_int_equal(m->sequence, 300);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.epoch, 70000);
    assert_int_equal(v.seq, 300);
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_int_equal(c->epoch, 70000);
    pr_batch_unref(c);
    pr_batch_view_fini(&v);
    pr_batch_unref(b);
}

/* TrainingBatch.replica (field 17): the replica that built the batch, read
 * by protobuf-c and by our decoder, kept by pr_batch_from_view; "" is not
 * written (offline output keeps its bytes), and a batch from protobuf-c
 * with a replica decodes to it. */
static void test_replica_field(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    size_t len0 = b->pb_len;
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.replica_len, 0);
    assert_string_equal(v.replica, "");
    pr_batch_view_fini(&v);
    pr_batch_unref(b);

    b = sample_batch(4);
    snprintf(b->replica, sizeof(b->replica), "%s", "piperec-2");
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(b->pb_len, len0 + 2 + 1 + 9); /* tag 17 (2 bytes) + length + bytes */
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_string_equal(m->replica, "piperec-2");
    assert_int_equal(m->sequence, 300);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.replica_len, 9);
    assert_memory_equal(v.replica, "piperec-2", 9);
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_string_equal(c->replica, "piperec-2");
    pr_batch_unref(c);
    pr_batch_view_fini(&v);
    pr_batch_unref(b);

    /* protobuf-c's bytes of a batch with a replica, through our decoder. */
    Piperec__V1__TrainingBatch pm = PIPEREC__V1__TRAINING_BATCH__INIT;
    pm.pipeline = "p";
    pm.sequence = 7;
    pm.replica = "pod-a";
    size_t n = piperec__v1__training_batch__get_packed_size(&pm);
    uint8_t *buf = malloc(n);
    piperec__v1__training_batch__pack(&pm, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), 0);
    assert_int_equal(v.replica_len, 5);
    assert_memory_equal(v.replica, "pod-a", 5);
    pr_batch_view_fini(&v);
    free(buf);
}

/* TrainingBatch.popular (field 20, batch.split popular): read by protobuf-c,
 * our decoder and pr_batch_from_view; false is not written, so a regular
 * batch keeps the bytes older clients know. */
static void test_popular_field(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    size_t len0 = b->pb_len;
    pr_batch_unref(b);
    b = sample_batch(4);
    b->popular = 1;
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(b->pb_len, len0 + 2 + 1); /* tag 20 (2 bytes) + varint 1 */
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_true(m->popular);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_true(v.popular);
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_int_equal(c->popular, 1);
    pr_batch_unref(c);
    pr_batch_view_fini(&v);
    pr_batch_unref(b);
}

/* TrainingBatch.hot_set_version (field 21, issue 19 item 6): read by
 * protobuf-c, our decoder and pr_batch_from_view; 0 is not written, so a
 * batch without a split keeps the bytes older clients know. */
static void test_hot_version_field(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    size_t len0 = b->pb_len;
    pr_batch_unref(b);
    b = sample_batch(4);
    b->hot_version = 300;
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(b->pb_len, len0 + 2 + 2); /* tag 21 (2 bytes) + varint 300 */
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_int_equal(m->hot_set_version, 300);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_int_equal(v.hot_version, 300);
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_int_equal(c->hot_version, 300);
    pr_batch_unref(c);
    pr_batch_view_fini(&v);
    pr_batch_unref(b);
}

/* TrainingBatch.recycled (field 18, issue 14): packed parallel arrays that
 * protobuf-c reads as we wrote them, that protobuf-c's own (packed) output
 * decodes to the same notices, and that survive pr_batch_from_view; absent
 * when there are none (old bytes); bad columns/rows are refused. */
static void test_recycled_field(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    size_t len0 = b->pb_len;
    pr_batch_unref(b);
    b = sample_batch(4);
    b->n_recycled = 3;
    b->recycled = calloc(3, sizeof(pr_recycled));
    b->recycled[0] = (pr_recycled){0, 0, 2, 1};
    b->recycled[1] = (pr_recycled){1, 3, 300000, 2};
    b->recycled[2] = (pr_recycled){0, 5, 7, 4000000000ULL};
    assert_int_equal(pr_batch_encode(b), 0);
    assert_true(b->pb_len > len0);
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_non_null(m->recycled);
    assert_int_equal(m->recycled->n_column, 3);
    assert_int_equal(m->recycled->n_index, 3);
    assert_int_equal(m->recycled->index[1], 300000);
    assert_int_equal(m->recycled->row[2], 5);
    assert_int_equal(m->recycled->number[2], 4000000000ULL);
    assert_int_equal(m->recycled->column[1], 1);
    /* protobuf-c's encoding of the same message decodes to the same notices */
    size_t n = piperec__v1__training_batch__get_packed_size(m);
    uint8_t *buf = malloc(n);
    piperec__v1__training_batch__pack(m, buf);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), 0);
    assert_int_equal(v.n_recycled, 3);
    assert_memory_equal(v.recycled, b->recycled, 3 * sizeof(pr_recycled));
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_int_equal(c->n_recycled, 3);
    assert_memory_equal(c->recycled, b->recycled, 3 * sizeof(pr_recycled));
    pr_batch_unref(c);
    pr_batch_view_fini(&v);
    free(buf);
    /* a notice for a column the batch does not have */
    pr_batch_unref(b);
    b = sample_batch(4);
    b->n_recycled = 1;
    b->recycled = calloc(1, sizeof(pr_recycled));
    b->recycled[0] = (pr_recycled){2, 0, 2, 1};
    assert_int_equal(pr_batch_encode(b), 0);
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "recycled"));
    pr_batch_unref(b);
}

/* Repeated scalars may arrive unpacked (one varint field per element, as
 * older protobuf writers emit them): the recycled notices decode the same,
 * and a varint field never feeds the length-delimited path (the fuzzer
 * found pointer arithmetic on a varint field's unset data pointer). */
static void test_recycled_unpacked(void **state)
{
    (void)state;
    pr_batch *b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    static const uint8_t notice[] = {0x92, 0x01, 8, 0x08, 0x01, 0x10, 0x07, 0x18, 0x03, 0x20, 0x02};
    size_t n = b->pb_len + sizeof(notice);
    uint8_t *buf = malloc(n);
    memcpy(buf, b->pb, b->pb_len);
    memcpy(buf + b->pb_len, notice, sizeof(notice));
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), 0);
    assert_int_equal(v.n_recycled, 1);
    assert_int_equal(v.recycled[0].col, 1);
    assert_int_equal(v.recycled[0].row, 3);
    assert_int_equal(v.recycled[0].index, 7);
    assert_int_equal(v.recycled[0].number, 2);
    pr_batch_view_fini(&v);
    /* unequal array lengths are refused */
    buf[b->pb_len + 2] = 6;
    assert_int_equal(pr_batch_decode(buf, b->pb_len + 9, &v, err, sizeof(err)), PR_EBADREC);
    free(buf);
    pr_batch_unref(b);
}

static void test_decode_hostile_shapes(void **state)
{
    (void)state;
    Piperec__V1__TrainingBatch m = PIPEREC__V1__TRAINING_BATCH__INIT;
    m.pipeline = "p";
    m.rows = 1u << 31;
    m.n_dense = 1u << 31;
    size_t n = piperec__v1__training_batch__get_packed_size(&m);
    uint8_t *buf = malloc(n);
    piperec__v1__training_batch__pack(&m, buf);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "65535"));
    free(buf);
    /* Rows without dense or sparse tensors: a valid view with NULL tensors. */
    m.rows = 2;
    m.n_dense = 0;
    int32_t labels[2] = {1, 0};
    m.labels = (ProtobufCBinaryData){sizeof(labels), (uint8_t *)labels};
    n = piperec__v1__training_batch__get_packed_size(&m);
    buf = malloc(n);
    piperec__v1__training_batch__pack(&m, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), 0);
    assert_null(v.dense);
    pr_batch *b = pr_batch_from_view(&v);
    assert_non_null(b);
    assert_int_equal(b->rows, 2);
    assert_int_equal(b->labels[0], 1);
    pr_batch_unref(b);
    pr_batch_view_fini(&v);
    free(buf);
}

/* A jagged batch (declared schema, fields 22-30): 3 rows, labels click and
 * buy, one dense, features user (single) and history (a list, lengths 2, 0,
 * 3). */
static pr_batch *jagged_sample(void)
{
    pr_batch *b = pr_batch_new_jagged("clicks", 3, 2, 1, 2, 8);
    assert_non_null(b);
    b->seq = 7;
    snprintf(b->feature_keys[0], PR_NAME_MAX, "user");
    snprintf(b->feature_keys[1], PR_NAME_MAX, "history");
    b->label_names = calloc(2, PR_NAME_MAX);
    snprintf(b->label_names[0], PR_NAME_MAX, "click");
    snprintf(b->label_names[1], PR_NAME_MAX, "buy");
    static const int32_t lengths[6] = {1, 1, 1, 2, 0, 3};
    static const int64_t values[8] = {2, 3, 2, 5000000000LL, 4, 4, 0, 9};
    static const float labels[6] = {1, 0, 0, 0, 1, 1}, dense[3] = {0.5f, -1, 2};
    memcpy(b->lengths, lengths, sizeof(lengths));
    memcpy(b->values, values, sizeof(values));
    memcpy(b->label_mat, labels, sizeof(labels));
    memcpy(b->dense_mat, dense, sizeof(dense));
    b->vocab_sizes[0] = 4;
    b->vocab_sizes[1] = 10;
    b->n_recycled = 1;
    b->recycled = calloc(1, sizeof(pr_recycled));
    b->recycled[0] = (pr_recycled){1, 2, 4, 1}; /* feature history, batch row 2 */
    return b;
}

/* Jagged fields: what protobuf-c reads, byte-identical to its own encoding,
 * zero-copy decode, pr_batch_from_view round trip; a Criteo batch writes none
 * of them (its bytes are unchanged); inconsistent shapes are refused. */
static void test_jagged_fields(void **state)
{
    (void)state;
    pr_batch *b = jagged_sample();
    assert_int_equal(pr_batch_encode(b), 0);
    Piperec__V1__TrainingBatch *m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_non_null(m);
    assert_true(m->jagged);
    assert_int_equal(m->rows, 3);
    assert_int_equal(m->n_dense, 1);
    assert_int_equal(m->n_sparse, 2);
    assert_int_equal(m->sparse_width, 8);
    assert_int_equal(m->labels.len, 0);
    assert_int_equal(m->dense.len, 0);
    assert_int_equal(m->sparse.len, 0);
    assert_int_equal(m->n_feature_keys, 2);
    assert_string_equal(m->feature_keys[1], "history");
    assert_int_equal(m->values.len, 64);
    assert_memory_equal(m->values.data, b->values, 64);
    assert_int_equal(m->lengths.len, 24);
    assert_memory_equal(m->lengths.data, b->lengths, 24);
    assert_int_equal(m->n_labels, 2);
    assert_memory_equal(m->label_matrix.data, b->label_mat, 24);
    assert_memory_equal(m->dense_matrix.data, b->dense_mat, 12);
    assert_int_equal(m->n_label_names, 2);
    assert_string_equal(m->label_names[1], "buy");
    assert_int_equal(m->n_dense_names, 0);
    assert_int_equal(m->recycled->column[0], 1);
    size_t n = piperec__v1__training_batch__get_packed_size(m);
    uint8_t *again = malloc(n);
    piperec__v1__training_batch__pack(m, again);
    assert_int_equal(n, b->pb_len);
    assert_memory_equal(again, b->pb, n);
    free(again);
    piperec__v1__training_batch__free_unpacked(m, NULL);

    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &v, err, sizeof(err)), 0);
    assert_true(v.jagged);
    assert_int_equal(v.n_labels, 2);
    assert_true(v.values >= b->pb && v.values + v.values_len <= b->pb + b->pb_len);
    assert_int_equal(v.values_len, 64);
    assert_int_equal(v.n_feature_keys, 2);
    assert_memory_equal(v.feature_keys[0].s, "user", 4);
    assert_int_equal(v.n_label_names, 2);
    pr_batch *c = pr_batch_from_view(&v);
    assert_non_null(c);
    assert_true(c->jagged);
    assert_int_equal(c->n_values, 8);
    assert_string_equal(c->feature_keys[1], "history");
    assert_int_equal(pr_batch_encode(c), 0);
    assert_int_equal(c->pb_len, b->pb_len);
    assert_memory_equal(c->pb, b->pb, b->pb_len);
    pr_batch_unref(c);
    pr_batch_view_fini(&v);

    /* A length that does not add up to the values is refused. */
    Piperec__V1__TrainingBatch *bad = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    ((int32_t *)bad->lengths.data)[5] = 4;
    n = piperec__v1__training_batch__get_packed_size(bad);
    uint8_t *buf = malloc(n);
    piperec__v1__training_batch__pack(bad, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "sum of lengths"));
    ((int32_t *)bad->lengths.data)[5] = 3;
    bad->n_feature_keys = 1; /* keys and n_sparse disagree */
    n = piperec__v1__training_batch__get_packed_size(bad);
    piperec__v1__training_batch__pack(bad, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "feature_keys"));
    bad->n_feature_keys = 2;
    free(buf);
    piperec__v1__training_batch__free_unpacked(bad, NULL);
    pr_batch_unref(b);

    /* Hostile counts: refused before any length product could wrap. */
    Piperec__V1__TrainingBatch h = PIPEREC__V1__TRAINING_BATCH__INIT;
    h.jagged = true;
    h.rows = 1u << 31;
    h.n_sparse = 1u << 31;
    n = piperec__v1__training_batch__get_packed_size(&h);
    buf = malloc(n);
    piperec__v1__training_batch__pack(&h, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    assert_non_null(strstr(err, "65535"));
    h.n_sparse = 0;
    h.n_labels = 1u << 20;
    n = piperec__v1__training_batch__get_packed_size(&h);
    piperec__v1__training_batch__pack(&h, buf);
    assert_int_equal(pr_batch_decode(buf, n, &v, err, sizeof(err)), PR_EBADREC);
    free(buf);

    /* The Criteo sample writes no jagged field. */
    b = sample_batch(4);
    assert_int_equal(pr_batch_encode(b), 0);
    m = piperec__v1__training_batch__unpack(NULL, b->pb_len, b->pb);
    assert_false(m->jagged);
    assert_int_equal(m->n_feature_keys, 0);
    assert_int_equal(m->values.len, 0);
    piperec__v1__training_batch__free_unpacked(m, NULL);
    pr_batch_unref(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_hostile_shapes),
        cmocka_unit_test(test_epoch_field),
        cmocka_unit_test(test_replica_field),
        cmocka_unit_test(test_popular_field),
        cmocka_unit_test(test_hot_version_field),
        cmocka_unit_test(test_recycled_field),
        cmocka_unit_test(test_recycled_unpacked),
        cmocka_unit_test(test_encode_matches_protobuf_c),
        cmocka_unit_test(test_decode_zero_copy),
        cmocka_unit_test(test_decode_protobuf_c_output),
        cmocka_unit_test(test_frames),
        cmocka_unit_test(test_hostport),
        cmocka_unit_test(test_jagged_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
