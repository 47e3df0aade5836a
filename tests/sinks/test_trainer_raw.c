/*
 * test_trainer_raw.c — the raw tensor layout of the trainer stream (issue
 * 22, docs/trainer-protocol.md "Raw batch layout"): a raw batch holds the
 * same content as the TrainingBatch of the same rows, for Criteo batches
 * (int32 and int64 sparse) and jagged (declared-schema) batches; sections
 * are 64-byte aligned from the frame start; the metadata section is the
 * TrainingBatch without its tensors. Over a real trainer sink: a client
 * that asks for the raw layout gets it (SubscribeOk.layout = 1), and one
 * that does not gets exactly the TrainingBatch bytes, as before. Round 2:
 * a raw frame is built without the queue lock (the pipeline side is not
 * blocked meanwhile), the Unix domain socket listener (sinks.trainer.
 * unix_path: layouts, tokens, stale and foreign files), and the C client's
 * raw_layout, whose views equal the TrainingBatch's byte for byte.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_sink.h"
#include "pr_trainer_client.h"
#include "trainer.pb-c.h"
#include "pr_varint.h"
#include "trainer_wire.h"

static pr_batch *criteo_batch(uint32_t rows, uint8_t width)
{
    pr_batch *b = pr_batch_new("criteo", rows, 3, 2, width);
    assert_non_null(b);
    b->seq = 7;
    b->epoch = 3;
    b->popular = 1;
    b->hot_version = 9;
    b->emit_time_ms = 1234;
    snprintf(b->replica, sizeof(b->replica), "r1");
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(r % 2);
        for (uint32_t c = 0; c < 3; c++)
            b->dense[c * rows + r] = (float)r + 0.25f * (float)c;
        for (uint32_t c = 0; c < 2; c++) {
            int64_t v = 1000 * c + r + (width == 8 ? (1ll << 40) : 0);
            if (width == 8)
                ((int64_t *)b->sparse)[c * rows + r] = v;
            else
                ((int32_t *)b->sparse)[c * rows + r] = (int32_t)v;
        }
    }
    b->vocab_sizes[0] = 11;
    b->vocab_sizes[1] = 22;
    b->recycled = calloc(2, sizeof(*b->recycled));
    b->recycled[0] = (pr_recycled){.col = 1, .row = 2, .index = 5, .number = 41};
    b->recycled[1] = (pr_recycled){.col = 0, .row = 0, .index = 6, .number = 42};
    b->n_recycled = 2;
    assert_int_equal(pr_batch_encode(b), 0);
    return b;
}

/* 4 rows, 2 labels, 2 dense, features "id" (one value a row) and "hist"
 * (r % 3 values in row r). */
static pr_batch *jagged_batch(void)
{
    enum { R = 4 };
    uint64_t nv = R + 0 + 1 + 2 + 0;
    pr_batch *b = pr_batch_new_jagged("events", R, 2, 2, 2, nv);
    assert_non_null(b);
    b->seq = 5;
    snprintf(b->feature_keys[0], PR_NAME_MAX, "id");
    snprintf(b->feature_keys[1], PR_NAME_MAX, "hist");
    uint64_t k = 0;
    for (uint32_t r = 0; r < R; r++) {
        b->label_mat[r * 2] = (float)(r % 2);
        b->label_mat[r * 2 + 1] = 0.5f;
        b->dense_mat[r * 2] = (float)r;
        b->dense_mat[r * 2 + 1] = -(float)r;
        b->lengths[r] = 1;
        b->values[k++] = 10 * r;
    }
    for (uint32_t r = 0; r < R; r++) {
        b->lengths[R + r] = (int32_t)(r % 3);
        for (uint32_t j = 0; j < r % 3; j++)
            b->values[k++] = 100 * r + j;
    }
    b->n_values = k;
    assert_int_equal(k, nv);
    assert_int_equal(pr_batch_encode(b), 0);
    return b;
}

/* jagged_batch with "hist" weighted (weights:): 0.5 + value on its values,
 * 1 on id's. */
static pr_batch *weighted_batch(void)
{
    pr_batch *b = jagged_batch();
    b->weights = malloc(b->n_values * sizeof(float));
    b->weighted = calloc(2, 1);
    assert_true(b->weights && b->weighted);
    b->weighted[1] = 1;
    for (uint64_t k = 0; k < b->n_values; k++)
        b->weights[k] = k < 4 ? 1.0f : 0.5f + (float)b->values[k];
    free(b->pb);
    b->pb = NULL;
    assert_int_equal(pr_batch_encode(b), 0);
    return b;
}

/* A weighted batch without a single value (every row's list empty): its
 * weights field is empty, so absent on the wire, beside weighted_keys. */
static pr_batch *weighted_empty_batch(void)
{
    pr_batch *b = pr_batch_new_jagged("events", 3, 2, 2, 2, 0);
    assert_non_null(b);
    b->seq = 6;
    snprintf(b->feature_keys[0], PR_NAME_MAX, "cats");
    snprintf(b->feature_keys[1], PR_NAME_MAX, "hist");
    b->weights = malloc(4);
    b->weighted = calloc(2, 1);
    assert_true(b->weights && b->weighted);
    b->weighted[0] = b->weighted[1] = 1;
    assert_int_equal(pr_batch_encode(b), 0);
    return b;
}

/* Build the raw frame of b, check its preamble and alignment, parse it. */
static uint8_t *raw_of_c(const pr_batch *b, bool offsets, bool compact, pr__raw_view *v)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(pr__raw_frame(b, offsets, compact, &buf, &len), 0);
    uint32_t n;
    memcpy(&n, buf, 4);
    assert_int_equal((size_t)n + 4, len);
    /* a generic protobuf reader sees Frame{raw_batch} */
    Piperec__Trainer__V1__Frame *fr = piperec__trainer__v1__frame__unpack(NULL, n, buf + 4);
    assert_non_null(fr);
    assert_int_equal(fr->msg_case, PIPEREC__TRAINER__V1__FRAME__MSG_RAW_BATCH);
    size_t pre = 5 + pr_varint_size(fr->raw_batch.len);
    assert_int_equal(pre + fr->raw_batch.len, len);
    assert_memory_equal(fr->raw_batch.data, buf + pre, fr->raw_batch.len);
    piperec__trainer__v1__frame__free_unpacked(fr, NULL);
    assert_int_equal(pr__raw_parse(buf + pre, len - pre, v), 0);
    for (int s = 0; s < PR__RAW_NSEC_MAX; s++) /* and from the frame start */
        if (s < PR__RAW_NSEC || v->sec[s])
            assert_int_equal((size_t)(v->sec[s] - buf) % PR__RAW_ALIGN, 0);
    return buf;
}

static uint8_t *raw_of(const pr_batch *b, bool offsets, pr__raw_view *v)
{
    return raw_of_c(b, offsets, false, v);
}

/* The metadata section decodes as a TrainingBatch equal to pb minus tensors. */
static void check_meta(const pr__raw_view *v, const pr_batch_view *pv)
{
    Piperec__V1__TrainingBatch *m =
        piperec__v1__training_batch__unpack(NULL, v->sec_len[PR__RAW_META], v->sec[PR__RAW_META]);
    assert_non_null(m);
    assert_int_equal(m->sequence, pv->seq);
    assert_int_equal(m->epoch, pv->epoch);
    assert_int_equal(m->rows, pv->rows);
    assert_int_equal(m->labels.len + m->dense.len + m->sparse.len + m->values.len + m->lengths.len +
                         m->label_matrix.len + m->dense_matrix.len,
                     0);
    assert_int_equal(m->n_vocab_sizes, pv->n_vocab_sizes);
    for (size_t i = 0; i < m->n_vocab_sizes; i++)
        assert_int_equal(m->vocab_sizes[i], pv->vocab_sizes[i]);
    assert_int_equal(m->popular, pv->popular);
    assert_int_equal(m->hot_set_version, pv->hot_version);
    assert_int_equal(m->n_feature_keys, pv->n_feature_keys);
    piperec__v1__training_batch__free_unpacked(m, NULL);
}

static void check_criteo(uint8_t width)
{
    pr_batch *b = criteo_batch(37, width);
    pr_batch_view pv;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &pv, err, sizeof(err)), 0);
    pr__raw_view v;
    uint8_t *buf = raw_of(b, true, &v);
    assert_int_equal(v.flags, PR__RAW_F_POPULAR | PR__RAW_F_OFFSETS);
    assert_int_equal(v.rows, 37);
    assert_int_equal(v.n_dense, 3);
    assert_int_equal(v.n_labels, 1);
    assert_int_equal(v.n_keys, 2);
    assert_int_equal(v.n_values, 74);
    assert_int_equal(v.seq, 7);
    assert_int_equal(v.epoch, 3);
    const float *dense = (const float *)v.sec[PR__RAW_DENSE];
    const float *labels = (const float *)v.sec[PR__RAW_LABELS];
    const int32_t *lengths = (const int32_t *)v.sec[PR__RAW_LENGTHS];
    const int32_t *offs = (const int32_t *)v.sec[PR__RAW_OFFSETS];
    const int64_t *values = (const int64_t *)v.sec[PR__RAW_VALUES];
    for (uint32_t r = 0; r < pv.rows; r++) {
        int32_t lab;
        memcpy(&lab, pv.labels + 4 * r, 4);
        assert_true(labels[r] == (float)lab);
        for (uint32_t c = 0; c < pv.n_dense; c++) {
            float d;
            memcpy(&d, pv.dense + 4 * ((size_t)c * pv.rows + r), 4);
            assert_true(dense[(size_t)r * pv.n_dense + c] == d);
        }
        for (uint32_t c = 0; c < pv.n_sparse; c++) {
            int64_t s = 0;
            size_t at = (size_t)c * pv.rows + r;
            if (width == 8)
                memcpy(&s, pv.sparse + 8 * at, 8);
            else {
                int32_t s32;
                memcpy(&s32, pv.sparse + 4 * at, 4);
                s = s32;
            }
            assert_true(values[at] == s);
            assert_int_equal(lengths[at], 1);
            assert_int_equal(offs[at], (int32_t)at);
        }
    }
    assert_int_equal(offs[74], 74);
    assert_int_equal(v.n_notices, pv.n_recycled);
    const int64_t *nt = (const int64_t *)v.sec[PR__RAW_NOTICES];
    for (uint32_t i = 0; i < pv.n_recycled; i++) {
        assert_int_equal(nt[4 * i], pv.recycled[i].col);
        assert_int_equal(nt[4 * i + 1], pv.recycled[i].index);
        assert_int_equal(nt[4 * i + 2], pv.recycled[i].row);
        assert_int_equal(nt[4 * i + 3], (int64_t)pv.recycled[i].number);
    }
    check_meta(&v, &pv);
    free(buf);
    pr_batch_view_fini(&pv);
    pr_batch_unref(b);
}

static void test_criteo_int32(void **state)
{
    (void)state;
    check_criteo(4);
}

static void test_criteo_int64(void **state)
{
    (void)state;
    check_criteo(8);
}

static void test_jagged(void **state)
{
    (void)state;
    pr_batch *b = jagged_batch();
    pr_batch_view pv;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &pv, err, sizeof(err)), 0);
    pr__raw_view v;
    uint8_t *buf = raw_of(b, false, &v);
    assert_int_equal(v.flags, PR__RAW_F_JAGGED);
    assert_int_equal(v.n_labels, 2);
    assert_int_equal(v.n_keys, 2);
    assert_int_equal(v.n_values, pv.values_len / 8);
    assert_int_equal(v.sec_len[PR__RAW_OFFSETS], 0);
    assert_memory_equal(v.sec[PR__RAW_DENSE], pv.dense_mat, pv.dense_mat_len);
    assert_int_equal(v.sec_len[PR__RAW_DENSE], pv.dense_mat_len);
    assert_memory_equal(v.sec[PR__RAW_LABELS], pv.label_mat, pv.label_mat_len);
    assert_int_equal(v.sec_len[PR__RAW_LABELS], pv.label_mat_len);
    assert_memory_equal(v.sec[PR__RAW_LENGTHS], pv.lengths, pv.lengths_len);
    assert_memory_equal(v.sec[PR__RAW_VALUES], pv.values, pv.values_len);
    check_meta(&v, &pv);
    free(buf);
    pr_batch_view_fini(&pv);
    pr_batch_unref(b);
}

/* Weights: flag 32 and an 8th section (float32, one per value, aligned),
 * left out of the metadata, which keeps weighted_keys; a batch without
 * them has 7 sections, as before. */
static void test_jagged_weights(void **state)
{
    (void)state;
    pr_batch *b = weighted_batch();
    pr_batch_view pv;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &pv, err, sizeof(err)), 0);
    assert_int_equal(pv.weights_len, b->n_values * 4);
    pr__raw_view v;
    uint8_t *buf = raw_of(b, false, &v);
    assert_int_equal(v.flags, PR__RAW_F_JAGGED | PR__RAW_F_WEIGHTS);
    assert_int_equal(v.sec_len[PR__RAW_WEIGHTS], b->n_values * 4);
    assert_memory_equal(v.sec[PR__RAW_WEIGHTS], b->weights, b->n_values * 4);
    uint32_t nsec;
    memcpy(&nsec, buf + v.preamble + 60, 4); /* the header's section count */
    assert_int_equal(nsec, 8);
    check_meta(&v, &pv);
    Piperec__V1__TrainingBatch *m =
        piperec__v1__training_batch__unpack(NULL, v.sec_len[PR__RAW_META], v.sec[PR__RAW_META]);
    assert_non_null(m);
    assert_int_equal(m->weights.len, 0);
    assert_int_equal(m->n_weighted_keys, 1);
    assert_string_equal(m->weighted_keys[0], "hist");
    piperec__v1__training_batch__free_unpacked(m, NULL);
    free(buf);
    pr_batch_view_fini(&pv);
    pr_batch_unref(b);
    b = weighted_empty_batch(); /* no value: weighted_keys, no weights field, both ways */
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &pv, err, sizeof(err)), 0);
    assert_int_equal(pv.weights_len, 0);
    assert_int_equal(pv.n_weighted_keys, 2);
    pr_batch *back = pr_batch_from_view(&pv);
    assert_true(back && back->weights && back->weighted && back->weighted[1]);
    pr_batch_unref(back);
    pr_batch_view_fini(&pv);
    buf = raw_of(b, false, &v);
    assert_int_equal(v.flags, PR__RAW_F_JAGGED | PR__RAW_F_WEIGHTS);
    assert_int_equal(v.sec_len[PR__RAW_WEIGHTS], 0);
    free(buf);
    pr_batch_unref(b);
    b = jagged_batch(); /* no weights: 7 sections, no flag */
    buf = raw_of(b, false, &v);
    assert_int_equal(v.flags, PR__RAW_F_JAGGED);
    assert_null(v.sec[PR__RAW_WEIGHTS]);
    memcpy(&nsec, buf + v.preamble + 60, 4);
    assert_int_equal(nsec, 7);
    free(buf);
    pr_batch_unref(b);
}

/* Subscribe.compact: a Criteo batch without the all-ones lengths and, for
 * int32 columns, with int32 values; a jagged batch is not changed. */
static void check_compact(uint8_t width)
{
    pr_batch *b = criteo_batch(37, width);
    pr_batch_view pv;
    char err[256];
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &pv, err, sizeof(err)), 0);
    pr__raw_view v;
    uint8_t *buf = raw_of_c(b, true, true, &v);
    uint32_t want = PR__RAW_F_POPULAR | PR__RAW_F_OFFSETS | PR__RAW_F_UNIT;
    if (width == 4)
        want |= PR__RAW_F_VALUES32;
    assert_int_equal(v.flags, want);
    assert_int_equal(v.sec_len[PR__RAW_LENGTHS], 0);
    assert_int_equal(v.sec_len[PR__RAW_VALUES], 74 * (size_t)width);
    assert_memory_equal(v.sec[PR__RAW_VALUES], pv.sparse, pv.sparse_len); /* same bytes */
    const int32_t *offs = (const int32_t *)v.sec[PR__RAW_OFFSETS];
    for (int i = 0; i <= 74; i++)
        assert_int_equal(offs[i], i);
    const float *dense = (const float *)v.sec[PR__RAW_DENSE];
    float d;
    memcpy(&d, pv.dense + 4 * ((size_t)2 * pv.rows + 5), 4); /* column 2, row 5 */
    assert_true(dense[5 * 3 + 2] == d);
    check_meta(&v, &pv);
    free(buf);
    pr_batch_view_fini(&pv);
    pr_batch_unref(b);
}

static void test_criteo_compact(void **state)
{
    (void)state;
    check_compact(4);
    check_compact(8);
    pr_batch *j = jagged_batch(); /* compact leaves jagged batches as they are */
    pr__raw_view v;
    uint8_t *buf = raw_of_c(j, false, true, &v);
    assert_int_equal(v.flags, PR__RAW_F_JAGGED);
    assert_int_equal(v.sec_len[PR__RAW_VALUES], v.n_values * 8);
    free(buf);
    pr_batch_unref(j);
}

/* Every preamble size the varint can take settles (payload sizes around
 * the one- and two-byte varint limits). */
static void test_preamble_sizes(void **state)
{
    (void)state;
    for (uint32_t rows = 0; rows < 700; rows += 3) {
        pr_batch *b = criteo_batch(rows, 4);
        pr__raw_view v;
        uint8_t *buf = raw_of(b, rows % 2, &v);
        assert_int_equal(v.rows, rows);
        free(buf);
        pr_batch_unref(b);
    }
}

static void test_parse_rejects(void **state)
{
    (void)state;
    pr_batch *b = criteo_batch(5, 4);
    pr__raw_view v;
    uint8_t *buf = raw_of(b, false, &v);
    uint8_t *pay = buf + v.preamble;
    size_t len = (size_t)(v.sec[PR__RAW_META] + v.sec_len[PR__RAW_META] - pay);
    assert_int_equal(pr__raw_parse(pay, len - 1, &v), PR_EBADREC); /* section cut */
    assert_int_equal(pr__raw_parse(pay, 100, &v), PR_EBADREC);     /* header cut */
    pay[12] = 6; /* rows: sections no longer match the shape */
    assert_int_equal(pr__raw_parse(pay, len, &v), PR_EBADREC);
    pay[12] = 5;
    pay[0] ^= 1; /* magic */
    assert_int_equal(pr__raw_parse(pay, len, &v), PR_EBADREC);
    free(buf);
    pr_batch_unref(b);
}

/* ---------------------------------------------------------------- over the sink */

static void read_all(int fd, uint8_t *p, size_t n)
{
    while (n) {
        ssize_t r = read(fd, p, n);
        if (r <= 0)
            fail_msg("read: %s", r ? strerror(errno) : "EOF");
        p += r;
        n -= (size_t)r;
    }
}

/* Send Subscribe on fd (`token` may be NULL) and read the answer: its
 * frame case, SubscribeOk.layout in *granted. */
static int subscribe_on(int fd, int layout, const char *token, uint32_t *granted);

/* Connect and subscribe with `layout` (-1: the field left out, as old
 * clients do); returns the socket, SubscribeOk.layout in *granted. */
static int subscribe(int port, int layout, uint32_t *granted)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(subscribe_on(fd, layout, NULL, granted),
                     PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK);
    return fd;
}

static int subscribe_on(int fd, int layout, const char *token, uint32_t *granted)
{
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    Piperec__Trainer__V1__Subscribe sub = PIPEREC__TRAINER__V1__SUBSCRIBE__INIT;
    sub.protocol_version = PR_TRAINER_PROTOCOL_VERSION;
    sub.pipeline = "criteo";
    sub.credits = 4;
    if (layout >= 0)
        sub.layout = (uint32_t)layout;
    if (token)
        sub.token = (char *)token;
    Piperec__Trainer__V1__Frame fr = PIPEREC__TRAINER__V1__FRAME__INIT;
    fr.msg_case = PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE;
    fr.subscribe = &sub;
    uint8_t buf[256];
    uint32_t n = (uint32_t)piperec__trainer__v1__frame__pack(&fr, buf + 4);
    memcpy(buf, &n, 4);
    assert_int_equal(write(fd, buf, 4 + n), (ssize_t)(4 + n));
    read_all(fd, (uint8_t *)&n, 4);
    assert_true(n <= sizeof(buf));
    read_all(fd, buf, n);
    Piperec__Trainer__V1__Frame *ok = piperec__trainer__v1__frame__unpack(NULL, n, buf);
    assert_non_null(ok);
    int kind = ok->msg_case;
    if (kind == PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK)
        *granted = ok->subscribe_ok->layout;
    piperec__trainer__v1__frame__free_unpacked(ok, NULL);
    return kind;
}

/* The next frame, whole (length prefix included), into a 64-byte aligned buffer. */
static uint8_t *next_frame(int fd, size_t *len)
{
    uint32_t n;
    read_all(fd, (uint8_t *)&n, 4);
    uint8_t *buf = aligned_alloc(64, ((size_t)n + 4 + 63) / 64 * 64);
    memcpy(buf, &n, 4);
    read_all(fd, buf + 4, n);
    *len = (size_t)n + 4;
    return buf;
}

static void test_sink_layouts(void **state)
{
    (void)state;
    pr_sink_cfg cfg = {.pipeline = "criteo", .n_dense = 3, .n_sparse = 2, .sparse_width = 4};
    cfg.trainer.listen = "127.0.0.1:0";
    pr_sink *sink;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &sink, err, sizeof(err)), 0);
    pr_sinkset *ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(ss, sink), 0);
    int port = pr_sink_port(sink);
    uint32_t g_old, g_pb, g_raw, g_future;
    int fd_old = subscribe(port, -1, &g_old), fd_pb = subscribe(port, 0, &g_pb);
    int fd_raw = subscribe(port, 1, &g_raw), fd_future = subscribe(port, 99, &g_future);
    assert_int_equal(g_old, 0);
    assert_int_equal(g_pb, 0);
    assert_int_equal(g_raw, 1);
    assert_int_equal(g_future, 0); /* a layout the server does not know: TrainingBatch */
    for (int i = 0; i < 4; i++) {  /* round robin: one batch to each client */
        pr_batch *c = criteo_batch(9, 4);
        c->seq = (uint64_t)i + 1;
        free(c->pb); /* re-encode with this sequence */
        c->pb = NULL;
        assert_int_equal(pr_batch_encode(c), 0);
        assert_int_equal(pr_sinkset_send(ss, c), 0);
        pr_batch_unref(c);
    }
    int fds[4] = {fd_old, fd_pb, fd_raw, fd_future};
    int raw_seen = 0;
    for (int i = 0; i < 4; i++) {
        size_t len;
        uint8_t *f = next_frame(fds[i], &len);
        if (fds[i] == fd_raw) {
            pr__raw_view v;
            assert_int_equal(f[4], (PR__FRAME_FIELD_RAW << 3) | 2);
            uint64_t plen = 0;
            size_t vn = pr_varint_get(f + 5, f + len, &plen);
            assert_true(vn > 0);
            assert_int_equal(pr__raw_parse(f + 5 + vn, (size_t)plen, &v), 0);
            assert_int_equal(v.preamble, 5 + vn);
            assert_int_equal(v.rows, 9);
            assert_int_equal((size_t)(v.sec[PR__RAW_VALUES] - f) % 64, 0);
            raw_seen++;
        } else {
            /* exactly the TrainingBatch bytes, framed as always */
            uint8_t hdr[16];
            pr_batch *c = criteo_batch(9, 4);
            pr_batch_view pv;
            const uint8_t *tb;
            size_t tlen;
            Piperec__Trainer__V1__Frame *ctrl;
            assert_int_equal(pr__frame_parse(f + 4, len - 4, &tb, &tlen, &ctrl), 0);
            assert_non_null(tb);
            assert_int_equal(pr_batch_decode(tb, tlen, &pv, err, sizeof(err)), 0);
            c->seq = pv.seq;
            free(c->pb);
            c->pb = NULL;
            assert_int_equal(pr_batch_encode(c), 0);
            size_t hl = pr__batch_frame_header(c, hdr);
            assert_int_equal(len, hl + c->pb_len);
            assert_memory_equal(f, hdr, hl);
            assert_memory_equal(f + hl, c->pb, c->pb_len);
            pr_batch_view_fini(&pv);
            pr_batch_unref(c);
        }
        free(f);
    }
    assert_int_equal(raw_seen, 1);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    pr_sinkset_free(ss);
}

/* Task 2 of issue 22 (round 2): a raw frame is built on the I/O thread
 * without the sink's queue lock. The hook holds the I/O thread inside the
 * frame build until the pipeline thread's next send() has returned; were
 * the lock held there, send() would block until the hook gave up (5 s). */
static struct hold {
    int entered, released, timed_out, calls;
} hold;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void hold_hook(void *arg)
{
    struct hold *h = arg;
    if (__atomic_fetch_add(&h->calls, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    __atomic_store_n(&h->entered, 1, __ATOMIC_RELEASE);
    int64_t until = now_ms() + 5000;
    while (!__atomic_load_n(&h->released, __ATOMIC_ACQUIRE)) {
        if (now_ms() > until) {
            __atomic_store_n(&h->timed_out, 1, __ATOMIC_RELEASE);
            return;
        }
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
}

static pr_batch *criteo_seq(uint64_t seq)
{
    pr_batch *c = criteo_batch(9, 4);
    c->seq = seq;
    free(c->pb);
    c->pb = NULL;
    assert_int_equal(pr_batch_encode(c), 0);
    return c;
}

static void test_frame_outside_lock(void **state)
{
    (void)state;
    pr_sink_cfg cfg = {.pipeline = "criteo", .n_dense = 3, .n_sparse = 2, .sparse_width = 4};
    cfg.trainer.listen = "127.0.0.1:0";
    pr_sink *sink;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &sink, err, sizeof(err)), 0);
    pr_sinkset *ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(ss, sink), 0);
    memset(&hold, 0, sizeof(hold));
    pr__trainer_frame_hook_arg = &hold;
    __atomic_store_n(&pr__trainer_frame_hook, hold_hook, __ATOMIC_RELEASE);
    uint32_t granted;
    int fd = subscribe(pr_sink_port(sink), 1, &granted);
    assert_int_equal(granted, 1);
    pr_batch *b1 = criteo_seq(1), *b2 = criteo_seq(2);
    assert_int_equal(pr_sinkset_send(ss, b1), 0);
    int64_t until = now_ms() + 5000;
    while (!__atomic_load_n(&hold.entered, __ATOMIC_ACQUIRE) && now_ms() < until) {
        struct timespec d = {0, 1000000};
        nanosleep(&d, NULL);
    }
    assert_true(__atomic_load_n(&hold.entered, __ATOMIC_ACQUIRE));
    /* the I/O thread is inside the frame build: the pipeline side goes on */
    int64_t t0 = now_ms();
    assert_int_equal(pr_sinkset_send(ss, b2), 0);
    pr_sink_stats st;
    pr_sink_get_stats(sink, &st);
    int64_t waited = now_ms() - t0;
    __atomic_store_n(&hold.released, 1, __ATOMIC_RELEASE);
    assert_false(__atomic_load_n(&hold.timed_out, __ATOMIC_ACQUIRE));
    assert_int_equal(st.queued_batches, 2);
    print_message("send() + stats while a raw frame was being built: %lld ms\n", (long long)waited);
    /* both arrive, in order, as raw frames */
    for (uint64_t seq = 1; seq <= 2; seq++) {
        size_t len;
        uint8_t *f = next_frame(fd, &len);
        pr__raw_view v;
        uint64_t plen = 0;
        size_t vn = pr_varint_get(f + 5, f + len, &plen);
        assert_true(vn > 0);
        assert_int_equal(pr__raw_parse(f + 5 + vn, (size_t)plen, &v), 0);
        assert_int_equal(v.seq, seq);
        free(f);
    }
    __atomic_store_n(&pr__trainer_frame_hook, NULL, __ATOMIC_RELEASE);
    pr_batch_unref(b1);
    pr_batch_unref(b2);
    close(fd);
    pr_sinkset_free(ss);
}

/* sinks.trainer.unix_path: the same protocol over a Unix domain socket
 * (issue 22, co-located trainer): a raw and a protobuf subscriber get
 * their layouts; the token rule holds there too; a stale socket file is
 * replaced, a regular file is not, and the file is gone after free. */
static int unix_connect(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

static void test_unix_socket(void **state)
{
    (void)state;
    char dir[] = "/tmp/pr_uds_XXXXXX", path[64], tokens[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/trainer.sock", dir);
    snprintf(tokens, sizeof(tokens), "%s/tokens", dir);
    FILE *f = fopen(tokens, "w");
    assert_non_null(f);
    fputs("s3cret\n", f);
    fclose(f);
    /* a stale socket file, as a killed server leaves it */
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    assert_int_equal(bind(stale, (struct sockaddr *)&sa, sizeof(sa)), 0);
    close(stale);
    pr_sink_cfg cfg = {.pipeline = "criteo", .n_dense = 3, .n_sparse = 2, .sparse_width = 4};
    cfg.trainer.listen = "127.0.0.1:0";
    cfg.trainer.unix_path = path;
    cfg.trainer.auth.token_file = tokens;
    pr_sink *sink, *other;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &sink, err, sizeof(err)), 0);
    /* a second server on the same path is refused: the first one answers */
    assert_true(pr_sink_new(&pr_sink_trainer_ops, &cfg, &other, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "another server"));
    pr_sinkset *ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(ss, sink), 0);
    uint32_t g_raw = 9, g_pb = 9, g_none = 9;
    int fd_none = unix_connect(path);
    assert_int_equal(subscribe_on(fd_none, 1, NULL, &g_none),
                     PIPEREC__TRAINER__V1__FRAME__MSG_ERROR);
    close(fd_none);
    int fd_raw = unix_connect(path), fd_pb = unix_connect(path);
    assert_int_equal(subscribe_on(fd_raw, 1, "s3cret", &g_raw),
                     PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK);
    assert_int_equal(subscribe_on(fd_pb, 0, "s3cret", &g_pb),
                     PIPEREC__TRAINER__V1__FRAME__MSG_SUBSCRIBE_OK);
    assert_int_equal(g_raw, 1);
    assert_int_equal(g_pb, 0);
    for (uint64_t seq = 1; seq <= 2; seq++) {
        pr_batch *c = criteo_seq(seq);
        assert_int_equal(pr_sinkset_send(ss, c), 0);
        pr_batch_unref(c);
    }
    int fds[2] = {fd_raw, fd_pb};
    for (int i = 0; i < 2; i++) {
        size_t len;
        uint8_t *fr = next_frame(fds[i], &len);
        if (fds[i] == fd_raw) {
            pr__raw_view v;
            uint64_t plen = 0;
            size_t vn = pr_varint_get(fr + 5, fr + len, &plen);
            assert_int_equal(fr[4], (PR__FRAME_FIELD_RAW << 3) | 2);
            assert_int_equal(pr__raw_parse(fr + 5 + vn, (size_t)plen, &v), 0);
            assert_int_equal(v.rows, 9);
        } else {
            const uint8_t *tb;
            size_t tlen;
            Piperec__Trainer__V1__Frame *ctrl;
            assert_int_equal(pr__frame_parse(fr + 4, len - 4, &tb, &tlen, &ctrl), 0);
            assert_non_null(tb);
        }
        free(fr);
    }
    close(fd_raw);
    close(fd_pb);
    pr_sinkset_free(ss);
    struct stat st;
    assert_int_equal(stat(path, &st), -1); /* removed at free */
    /* a regular file at the path is not replaced */
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_true(pr_sink_new(&pr_sink_trainer_ops, &cfg, &other, err, sizeof(err)) < 0);
    assert_non_null(strstr(err, "not a socket"));
    unlink(path);
    unlink(tokens);
    rmdir(dir);
}

/* The C client with raw_layout (what `piperec consume --layout raw` uses):
 * each raw batch comes out of pr_trainer_client_next as the same view as
 * its TrainingBatch: int64 columns (values above 2^32), int32 columns and a
 * jagged batch, byte for byte in every tensor. */
static void expect_same_view(const pr_batch_view *a, const pr_batch_view *b)
{
    assert_int_equal(a->seq, b->seq);
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->sparse_width, b->sparse_width);
    assert_int_equal(a->jagged, b->jagged);
    const uint8_t *pa[] = {a->labels,  a->dense,     a->sparse,   a->values,
                           a->lengths, a->label_mat, a->dense_mat};
    const uint8_t *pb[] = {b->labels,  b->dense,     b->sparse,   b->values,
                           b->lengths, b->label_mat, b->dense_mat};
    size_t la[] = {a->labels_len,  a->dense_len,     a->sparse_len,   a->values_len,
                   a->lengths_len, a->label_mat_len, a->dense_mat_len};
    size_t lb[] = {b->labels_len,  b->dense_len,     b->sparse_len,   b->values_len,
                   b->lengths_len, b->label_mat_len, b->dense_mat_len};
    for (int i = 0; i < 7; i++) {
        assert_int_equal(la[i], lb[i]);
        if (la[i])
            assert_memory_equal(pa[i], pb[i], la[i]);
    }
    assert_int_equal(a->n_vocab_sizes, b->n_vocab_sizes);
    assert_int_equal(a->n_recycled, b->n_recycled);
    assert_int_equal(a->n_ranges, b->n_ranges);
    assert_int_equal(a->weights_len, b->weights_len);
    if (a->weights_len)
        assert_memory_equal(a->weights, b->weights, a->weights_len);
    assert_int_equal(a->n_weighted_keys, b->n_weighted_keys);
}

static void client_raw_case(pr_batch *b, uint8_t width, bool jagged)
{
    pr_sink_cfg cfg = {.pipeline = jagged ? "events" : "criteo",
                       .n_dense = jagged ? 2 : 3,
                       .n_sparse = 2,
                       .sparse_width = width};
    cfg.trainer.listen = "127.0.0.1:0";
    pr_sink *sink;
    char err[256], addr[32];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &sink, err, sizeof(err)), 0);
    pr_sinkset *ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(ss, sink), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", pr_sink_port(sink));
    pr_trainer_client_opts o = {.connect = addr, .pipeline = cfg.pipeline, .raw_layout = true};
    pr_trainer_client *c;
    assert_int_equal(pr_trainer_client_open(&o, &c, err, sizeof(err)), 0);
    assert_int_equal(pr_trainer_client_info(c)->layout, 1);
    assert_int_equal(pr_sinkset_send(ss, b), 0);
    pr_batch_view got, want;
    assert_int_equal(pr_trainer_client_next(c, &got, 5000, err, sizeof(err)), 1);
    assert_int_equal(pr_batch_decode(b->pb, b->pb_len, &want, err, sizeof(err)), 0);
    expect_same_view(&got, &want);
    assert_int_equal(pr_trainer_client_ack(c, got.seq), 0);
    pr_batch_view_fini(&got);
    pr_batch_view_fini(&want);
    pr_trainer_client_close(c);
    pr_sinkset_free(ss);
}

static void test_client_raw_equals_pb(void **state)
{
    (void)state;
    pr_batch *b8 = criteo_batch(37, 8), *b4 = criteo_batch(37, 4), *bj = jagged_batch();
    pr_batch *bw = weighted_batch();
    client_raw_case(b8, 8, false);
    client_raw_case(b4, 4, false);
    client_raw_case(bj, 8, true);
    client_raw_case(bw, 8, true);
    pr_batch *be = weighted_empty_batch();
    client_raw_case(be, 8, true);
    pr_batch_unref(be);
    pr_batch_unref(b8);
    pr_batch_unref(b4);
    pr_batch_unref(bj);
    pr_batch_unref(bw);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_criteo_int32),   cmocka_unit_test(test_criteo_int64),
        cmocka_unit_test(test_jagged),         cmocka_unit_test(test_preamble_sizes),
        cmocka_unit_test(test_parse_rejects),  cmocka_unit_test(test_sink_layouts),
        cmocka_unit_test(test_criteo_compact), cmocka_unit_test(test_frame_outside_lock),
        cmocka_unit_test(test_unix_socket),    cmocka_unit_test(test_client_raw_equals_pb),
        cmocka_unit_test(test_jagged_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
