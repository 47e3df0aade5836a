/*
 * test_ingest_decode.c — Kafka message decoders (ingest/proto_decode.c):
 * criteo_tsv messages of several lines, protobuf Event and EventBatch, every
 * reject reason, messages split across blocks, and random/mutated bytes that
 * must never crash and must account for every record.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "piperec.pb-c.h"
#include "pr_ingest.h"

typedef struct rej_log {
    int n;
    int reason[64];
    int64_t recno[64];
    size_t len[64];
    uint8_t rec[64][512];
    int by_reason[PR_DEC__COUNT];
    char detail[64][256];
} rej_log;

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    rej_log *l = opaque;
    assert_non_null(detail);
    assert_true(reason > 0 && reason < PR_DEC__COUNT);
    l->by_reason[reason]++;
    if (l->n < 64) {
        l->reason[l->n] = reason;
        l->recno[l->n] = recno;
        l->len[l->n] = len;
        memcpy(l->rec[l->n], rec, len < 512 ? len : 512);
        snprintf(l->detail[l->n], sizeof(l->detail[0]), "%s", detail);
    }
    l->n++;
}

/* Small shape: label, 2 dense, 3 sparse. */
static pr_pipeline_spec small_spec(void)
{
    pr_pipeline_spec s;
    pr_pipeline_spec_default(&s);
    s.n_dense = 2;
    s.n_sparse = 3;
    return s;
}

static pr_decode_ctx make_ctx(const pr_pipeline_spec *spec, rej_log *l)
{
    pr_decode_ctx ctx = {.spec = spec,
                         .on_reject = on_rej,
                         .opaque = l,
                         .partition = 7,
                         .offset = 1234,
                         .default_event_time_ms = 999};
    return ctx;
}

/* Pack an event; returns a malloc'd buffer. */
static uint8_t *pack_event(const Piperec__V1__Event *ev, size_t *len)
{
    *len = piperec__v1__event__get_packed_size(ev);
    uint8_t *buf = malloc(*len + 1);
    piperec__v1__event__pack(ev, buf);
    return buf;
}

static bool bit(const uint64_t *bm, const pr_block *b, uint32_t col, uint32_t row)
{
    return pr_bit_test(bm + col * pr_bitmap_words(b->cap), row);
}

/* ---------------------------------------------------------------- criteo */

static void test_criteo_multi_line(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    FILE *f = fopen(PR_TEST_DATA "/criteo_sample_100.tsv", "r");
    assert_non_null(f);
    char l1[4096], l2[4096];
    assert_non_null(fgets(l1, sizeof(l1), f));
    assert_non_null(fgets(l2, sizeof(l2), f));
    fclose(f);
    char msg[10000];
    /* good line, bad line (3 fields), empty line (skipped), good line without '\n' */
    snprintf(msg, sizeof(msg), "%sa\tb\tc\n\n%s", l1, l2);
    size_t len = strlen(msg);
    if (msg[len - 1] == '\n')
        msg[--len] = 0;
    pr_block *b = pr_block_new(spec.n_dense, spec.n_sparse, 64, true);
    assert_int_equal(pr_message_record_count(PR_MSG_CRITEO_TSV, msg, len, NULL), 3);
    uint32_t next = 0;
    int r = pr_decode_message(PR_MSG_CRITEO_TSV, &ctx, b, msg, len, &next, NULL);
    assert_int_equal(r, 2);
    assert_int_equal(b->rows, 2);
    assert_int_equal(next, 3);
    assert_int_equal(rl.n, 1);
    assert_int_equal(rl.reason[0], PR_DEC_FIELD_COUNT);
    assert_int_equal(rl.recno[0], 1);
    assert_int_equal(rl.len[0], 5);
    assert_memory_equal(rl.rec[0], "a\tb\tc", 5);
    for (uint32_t i = 0; i < 2; i++) {
        assert_int_equal(b->offset[i], 1234); /* the Kafka offset, not a line number */
        assert_int_equal(b->partition[i], 7);
        assert_int_equal(b->event_time_ms[i], 999);
    }
    assert_int_equal(b->labels[0], 0);
    assert_int_equal(b->labels[1], 1);
    /* a message of nothing but line breaks is one record, rejected empty */
    static const char *const blanks[] = {"\n", "\r\n\r\n", "\n\n\n"};
    for (size_t i = 0; i < 3; i++) {
        size_t bl = strlen(blanks[i]);
        assert_int_equal(pr_message_record_count(PR_MSG_CRITEO_TSV, blanks[i], bl, NULL), 1);
        rl.n = 0;
        next = 0;
        assert_int_equal(pr_decode_message(PR_MSG_CRITEO_TSV, &ctx, b, blanks[i], bl, &next, NULL),
                         0);
        assert_int_equal(next, 1);
        assert_int_equal(rl.n, 1);
        assert_int_equal(rl.reason[0], PR_DEC_EMPTY);
        assert_int_equal(rl.len[0], bl); /* the original bytes, for the dead letter */
    }
    assert_int_equal(b->rows, 2);
    pr_block_free(b);
}

static void test_criteo_split_across_blocks(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    FILE *f = fopen(PR_TEST_DATA "/criteo_sample_100.tsv", "r");
    assert_non_null(f);
    char *all = calloc(1, 1 << 20);
    size_t len = fread(all, 1, (1 << 20) - 1, f);
    fclose(f);
    int total = pr_message_record_count(PR_MSG_CRITEO_TSV, all, len, NULL);
    assert_int_equal(total, 100);
    pr_block *b = pr_block_new(spec.n_dense, spec.n_sparse, 64, true);
    uint32_t next = 0;
    int r = pr_decode_message(PR_MSG_CRITEO_TSV, &ctx, b, all, len, &next, NULL);
    assert_int_equal(r, PR_EFULL);
    uint32_t first = b->rows;
    assert_int_equal(first, 64);
    assert_int_equal(next, 64 + (uint32_t)rl.n);
    pr_block_reset(b);
    r = pr_decode_message(PR_MSG_CRITEO_TSV, &ctx, b, all, len, &next, NULL);
    assert_true(r >= 0);
    assert_int_equal(next, 100);
    assert_int_equal(first + b->rows + (uint32_t)rl.n, 100);
    free(all);
    pr_block_free(b);
}

/* ---------------------------------------------------------------- protobuf */

static void test_event_hex(void **state)
{
    (void)state;
    pr_pipeline_spec spec = small_spec();
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    pr_arena *arena = pr_arena_new(0);
    pr_block *b = pr_block_new(2, 3, 64, true);

    double dense[2] = {3.5, -2};
    uint32_t dmiss[1] = {1};
    char *hex[3] = {"a1", "", "FFFFFFFFFFFFFFFF"};
    Piperec__V1__Event ev = PIPEREC__V1__EVENT__INIT;
    ev.label = 1;
    ev.event_time_ms = 5555;
    ev.n_dense = 2;
    ev.dense = dense;
    ev.n_dense_missing = 1;
    ev.dense_missing = dmiss;
    ev.n_sparse_hex = 3;
    ev.sparse_hex = hex;
    size_t len;
    uint8_t *buf = pack_event(&ev, &len);
    assert_int_equal(pr_message_record_count(PR_MSG_PROTOBUF_EVENT, buf, len, arena), 1);
    uint32_t next = 0;
    assert_int_equal(pr_decode_message(PR_MSG_PROTOBUF_EVENT, &ctx, b, buf, len, &next, arena), 1);
    assert_int_equal(rl.n, 0);
    assert_int_equal(b->rows, 1);
    assert_int_equal(b->labels[0], 1);
    assert_true(b->dense[0] == 3.5);
    assert_true(b->dense[b->cap] == 0.0); /* missing holds 0 */
    assert_false(bit(b->dense_missing, b, 0, 0));
    assert_true(bit(b->dense_missing, b, 1, 0));
    assert_int_equal(b->sparse_enc[0], PR_SPARSE_HEX);
    assert_memory_equal(pr_block_hex(b, 0, 0), "00000000000000a1", 16);
    assert_true(bit(b->sparse_missing, b, 1, 0));
    assert_memory_equal(pr_block_hex(b, 2, 0), "FFFFFFFFFFFFFFFF", 16);
    assert_int_equal(b->event_time_ms[0], 5555);
    assert_int_equal(b->offset[0], 1234);
    assert_int_equal(b->partition[0], 7);

    /* No event time: the message/default time is used. */
    ev.event_time_ms = 0;
    free(buf);
    buf = pack_event(&ev, &len);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, buf, len, &next, arena), 1);
    assert_int_equal(b->event_time_ms[1], 999);
    free(buf);
    pr_block_free(b);
    pr_arena_free(arena);
}

static void test_event_ids_and_mixing(void **state)
{
    (void)state;
    pr_pipeline_spec spec = small_spec();
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    pr_block *b = pr_block_new(2, 3, 64, true);
    double dense[2] = {1, 2};
    uint64_t ids[3] = {42, 0xdeadbeefULL, 7};
    uint32_t smiss[1] = {2};
    char *hex[3] = {"ff", "", "10"};
    char *badhex[3] = {"zz", "1", "2"};

    Piperec__V1__Event idev = PIPEREC__V1__EVENT__INIT;
    idev.n_dense = 2;
    idev.dense = dense;
    idev.n_sparse_id = 3;
    idev.sparse_id = ids;
    idev.n_sparse_missing = 1;
    idev.sparse_missing = smiss;
    Piperec__V1__Event hexev = PIPEREC__V1__EVENT__INIT;
    hexev.n_dense = 2;
    hexev.dense = dense;
    hexev.n_sparse_hex = 3;
    hexev.sparse_hex = hex;
    size_t l1, l2;
    uint8_t *b1 = pack_event(&idev, &l1), *b2 = pack_event(&hexev, &l2);

    /* ids first: u64 column; hex strings are parsed into it. */
    uint32_t next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, b1, l1, &next, NULL), 1);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, b2, l2, &next, NULL), 1);
    assert_int_equal(b->sparse_enc[0], PR_SPARSE_U64);
    assert_int_equal(b->sparse_u64[0], 42);
    assert_int_equal(b->sparse_u64[b->cap], 0xdeadbeefULL);
    assert_true(bit(b->sparse_missing, b, 2, 0));
    assert_false(bit(b->sparse_missing, b, 1, 0));
    assert_int_equal(b->sparse_u64[1], 0xff);
    assert_true(bit(b->sparse_missing, b, 1, 1));
    assert_int_equal(b->sparse_u64[2 * b->cap + 1], 0x10);
    /* non-hex into a u64 column is caught here */
    hexev.sparse_hex = badhex;
    uint8_t *b3;
    size_t l3;
    b3 = pack_event(&hexev, &l3);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, b3, l3, &next, NULL), 0);
    assert_int_equal(rl.reason[0], PR_DEC_BAD_HEX);
    assert_int_equal(b->rows, 2);

    /* hex first: ids become 16-digit hex slots. */
    pr_block_reset(b);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, b2, l2, &next, NULL), 1);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, b1, l1, &next, NULL), 1);
    assert_int_equal(b->sparse_enc[1], PR_SPARSE_HEX);
    assert_memory_equal(pr_block_hex(b, 0, 1), "000000000000002a", 16);
    assert_memory_equal(pr_block_hex(b, 1, 1), "00000000deadbeef", 16);
    assert_true(bit(b->sparse_missing, b, 2, 1));
    free(b1);
    free(b2);
    free(b3);
    pr_block_free(b);
}

static void test_event_rejects(void **state)
{
    (void)state;
    pr_pipeline_spec spec = small_spec();
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    pr_block *b = pr_block_new(2, 3, 64, true);
    double dense[3] = {1, 2, 3};
    char *hex[3] = {"1", "2", "3"};
    char *longhex[3] = {"1", "12345678901234567", "3"};
    uint64_t ids[3] = {1, 2, 3};
    uint32_t bad_idx[1] = {9};

    struct {
        int n_dense, n_hex, n_id, bad_dmiss, bad_smiss, longh, want;
    } cases[] = {
        {3, 3, 0, 0, 0, 0, PR_DEC_BAD_SHAPE}, /* too many dense */
        {0, 3, 0, 0, 0, 0, PR_DEC_BAD_SHAPE}, /* none */
        {2, 2, 0, 0, 0, 0, PR_DEC_BAD_SHAPE}, /* too few sparse */
        {2, 3, 3, 0, 0, 0, PR_DEC_BAD_SHAPE}, /* hex and id */
        {2, 0, 0, 0, 0, 0, PR_DEC_BAD_SHAPE}, /* no sparse */
        {2, 3, 0, 1, 0, 0, PR_DEC_BAD_SHAPE}, /* dense_missing out of range */
        {2, 0, 3, 0, 1, 0, PR_DEC_BAD_SHAPE}, /* sparse_missing out of range */
        {2, 3, 0, 0, 0, 1, PR_DEC_LONG_HEX},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        Piperec__V1__Event ev = PIPEREC__V1__EVENT__INIT;
        ev.n_dense = (size_t)cases[i].n_dense;
        ev.dense = dense;
        ev.n_sparse_hex = (size_t)cases[i].n_hex;
        ev.sparse_hex = cases[i].longh ? longhex : hex;
        ev.n_sparse_id = (size_t)cases[i].n_id;
        ev.sparse_id = ids;
        if (cases[i].bad_dmiss) {
            ev.n_dense_missing = 1;
            ev.dense_missing = bad_idx;
        }
        if (cases[i].bad_smiss) {
            ev.n_sparse_missing = 1;
            ev.sparse_missing = bad_idx;
        }
        size_t len;
        uint8_t *buf = pack_event(&ev, &len);
        uint32_t next = 0;
        rl.n = 0;
        assert_int_equal(pr_decode_protobuf_event(&ctx, b, buf, len, &next, NULL), 0);
        assert_int_equal(rl.n, 1);
        assert_int_equal(rl.reason[0], cases[i].want);
        assert_int_equal(rl.len[0], len); /* the original bytes */
        assert_memory_equal(rl.rec[0], buf, len);
        free(buf);
    }
    assert_int_equal(b->rows, 0);
    /* a rejected event leaves no missing bits behind */
    for (uint32_t c = 0; c < 3; c++)
        assert_false(bit(b->sparse_missing, b, c, 0));

    /* A dense value the TSV text could not carry (nan, inf) is bad_dense; an
     * event time more than the bound ahead of the message's is bad_time. */
    double nan_dense[2] = {1, NAN}, inf_dense[2] = {-INFINITY, 2};
    const struct {
        double *dense;
        int64_t event_ms, ahead_ms;
        int want;
        const char *detail;
    } more[] = {
        {nan_dense, 0, 0, PR_DEC_BAD_DENSE, "dense[1]: nan is not a finite number"},
        {inf_dense, 0, 0, PR_DEC_BAD_DENSE, "dense[0]: -inf is not a finite number"},
        {dense, 999 + 86400000 + 1, 86400000, PR_DEC_BAD_TIME, NULL},
        {dense, 999 + 86400000, 86400000, PR_DEC_OK, NULL},
        {dense, 4102444800000, 0, PR_DEC_OK, NULL},
        {nan_dense, 0, 0, PR_DEC_OK, NULL}, /* dense[1] listed missing: its NaN is no value */
    };
    for (size_t i = 0; i < sizeof(more) / sizeof(more[0]); i++) {
        Piperec__V1__Event ev = PIPEREC__V1__EVENT__INIT;
        ev.n_dense = 2;
        ev.dense = more[i].dense;
        ev.n_sparse_hex = 3;
        ev.sparse_hex = hex;
        ev.event_time_ms = more[i].event_ms;
        ctx.max_event_ahead_ms = more[i].ahead_ms;
        uint32_t miss1[1] = {1};
        if (i == sizeof(more) / sizeof(more[0]) - 1) {
            ev.n_dense_missing = 1;
            ev.dense_missing = miss1;
        }
        size_t len;
        uint8_t *buf = pack_event(&ev, &len);
        uint32_t next = 0, rows = b->rows;
        rl.n = 0;
        int ok = more[i].want == PR_DEC_OK;
        assert_int_equal(pr_decode_protobuf_event(&ctx, b, buf, len, &next, NULL), ok);
        assert_int_equal(rl.n, !ok);
        assert_int_equal(b->rows, rows + (uint32_t)ok);
        if (!ok) {
            assert_int_equal(rl.reason[0], more[i].want);
            if (more[i].detail)
                assert_string_equal(rl.detail[0], more[i].detail);
            else
                assert_non_null(strstr(rl.detail[0], "ahead of the message's timestamp"));
        }
        free(buf);
    }
    ctx.max_event_ahead_ms = 0;
    b->rows = 0;

    /* Unparsable payloads. */
    const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    uint32_t next = 0;
    rl.n = 0;
    assert_int_equal(pr_decode_protobuf_event(&ctx, b, junk, sizeof(junk), &next, NULL), 0);
    assert_int_equal(rl.reason[0], PR_DEC_BAD_PROTOBUF);
    next = 0;
    assert_int_equal(pr_decode_protobuf_event_batch(&ctx, b, junk, sizeof(junk), &next, NULL), 0);
    assert_int_equal(rl.reason[1], PR_DEC_BAD_PROTOBUF);
    assert_int_equal(rl.n, 2);
    pr_block_free(b);
}

static void test_batch(void **state)
{
    (void)state;
    pr_pipeline_spec spec = small_spec();
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    pr_arena *arena = pr_arena_new(0); /* tiny: forces overflow chunks and growth */
    enum { N = 1000 };
    double dense[2] = {1, 2};
    char *hex[3] = {"1", "2", "3"};
    Piperec__V1__Event *evs = calloc(N, sizeof(*evs));
    Piperec__V1__Event **ptrs = calloc(N, sizeof(*ptrs));
    for (int i = 0; i < N; i++) {
        piperec__v1__event__init(&evs[i]);
        evs[i].label = i;
        evs[i].event_time_ms = 1000 + i;
        evs[i].n_dense = i == 17 ? 1 : 2; /* event 17 has a bad shape */
        evs[i].dense = dense;
        evs[i].n_sparse_hex = 3;
        evs[i].sparse_hex = hex;
        ptrs[i] = &evs[i];
    }
    Piperec__V1__EventBatch eb = PIPEREC__V1__EVENT_BATCH__INIT;
    eb.n_events = N;
    eb.events = ptrs;
    size_t len = piperec__v1__event_batch__get_packed_size(&eb);
    uint8_t *buf = malloc(len);
    piperec__v1__event_batch__pack(&eb, buf);
    assert_int_equal(pr_message_record_count(PR_MSG_PROTOBUF_EVENT_BATCH, buf, len, arena), N);

    pr_block *b = pr_block_new(2, 3, 640, true);
    uint32_t next = 0;
    int r = pr_decode_message(PR_MSG_PROTOBUF_EVENT_BATCH, &ctx, b, buf, len, &next, arena);
    assert_int_equal(r, PR_EFULL);
    assert_int_equal(b->rows, 640);
    assert_int_equal(next, 641); /* 640 rows + the rejected event */
    assert_int_equal(rl.n, 1);
    assert_int_equal(rl.reason[0], PR_DEC_BAD_SHAPE);
    assert_int_equal(rl.recno[0], 17);
    /* the dead letter is the single event, re-encoded */
    Piperec__V1__Event *back = piperec__v1__event__unpack(NULL, rl.len[0], rl.rec[0]);
    assert_non_null(back);
    assert_int_equal(back->label, 17);
    piperec__v1__event__free_unpacked(back, NULL);
    assert_int_equal(b->labels[16], 16);
    assert_int_equal(b->labels[17], 18);
    assert_int_equal(b->event_time_ms[17], 1018);
    pr_block_reset(b);
    r = pr_decode_message(PR_MSG_PROTOBUF_EVENT_BATCH, &ctx, b, buf, len, &next, arena);
    assert_int_equal(r, N - 641);
    assert_int_equal(b->rows, N - 641);
    assert_int_equal(b->labels[0], 641);
    assert_int_equal(next, N);
    free(buf);
    free(evs);
    free(ptrs);
    pr_block_free(b);
    pr_arena_free(arena);
}

/* Random and mutated bytes: never crash, every call ends consistently. */
static void test_fuzz(void **state)
{
    (void)state;
    pr_pipeline_spec spec = small_spec();
    rej_log rl = {0};
    pr_decode_ctx ctx = make_ctx(&spec, &rl);
    pr_arena *arena = pr_arena_new(1024);
    pr_block *b = pr_block_new(2, 3, 64, true);
    uint64_t seed = 12345;
    uint8_t buf[600];

    double dense[2] = {1, 2};
    char *hex[3] = {"abc", "", "0123456789abcdef"};
    Piperec__V1__Event ev = PIPEREC__V1__EVENT__INIT;
    ev.n_dense = 2;
    ev.dense = dense;
    ev.n_sparse_hex = 3;
    ev.sparse_hex = hex;
    Piperec__V1__Event *ptrs[4] = {&ev, &ev, &ev, &ev};
    Piperec__V1__EventBatch eb = PIPEREC__V1__EVENT_BATCH__INIT;
    eb.n_events = 4;
    eb.events = ptrs;
    uint8_t good[600];
    size_t glen = piperec__v1__event_batch__pack(&eb, good);

    /* PR_FUZZ_ITERS raises the count for a longer manual run. */
    int iters = getenv("PR_FUZZ_ITERS") ? atoi(getenv("PR_FUZZ_ITERS")) : 6000;
    for (int it = 0; it < iters; it++) {
        size_t len;
        if (it % 2) {
            len = glen;
            memcpy(buf, good, glen);
            for (int k = 0; k < 3; k++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                buf[(seed >> 33) % glen] ^= (uint8_t)(seed >> 20);
            }
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            if ((seed >> 40) % 4 == 0)
                len = (seed >> 20) % glen; /* truncated */
        } else {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            len = (seed >> 33) % sizeof(buf);
            for (size_t i = 0; i < len; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                buf[i] = (uint8_t)(seed >> 56);
            }
        }
        /* json, avro and protobuf need a declared schema's decoder:
         * tests/ingest/test_json_decode.c, test_record_writer.c */
        for (int fmt = 0; fmt < PR_MSG__COUNT; fmt++) {
            if (fmt == PR_MSG_JSON || fmt == PR_MSG_AVRO || fmt == PR_MSG_PROTOBUF)
                continue;
            pr_block_reset(b);
            rl.n = 0;
            uint32_t next = 0;
            int nrec = pr_message_record_count(fmt, buf, len, arena);
            assert_true(nrec >= 0);
            int r;
            uint32_t total = 0;
            do {
                r = pr_decode_message(fmt, &ctx, b, buf, len, &next, arena);
                assert_true(b->rows <= b->cap);
                total += b->rows;
                pr_block_reset(b);
            } while (r == PR_EFULL);
            assert_true(r >= 0);
            /* every record is accounted for: a row or a reject */
            if (fmt == PR_MSG_PROTOBUF_EVENT)
                assert_int_equal(total + (uint32_t)rl.n, 1);
            else if (fmt == PR_MSG_CRITEO_TSV)
                assert_int_equal(total + (uint32_t)rl.n, (uint32_t)nrec);
            else
                assert_true(total + (uint32_t)rl.n == (uint32_t)nrec ||
                            (total == 0 && rl.n == 1 && rl.reason[0] == PR_DEC_BAD_PROTOBUF));
        }
    }
    pr_block_free(b);
    pr_arena_free(arena);
}

static void test_format_names(void **state)
{
    (void)state;
    for (int i = 0; i < PR_MSG__COUNT; i++)
        assert_int_equal(pr_msg_format_from_name(pr_msg_format_name(i)), i);
    assert_int_equal(pr_msg_format_from_name("json"), PR_MSG_JSON);
    assert_int_equal(pr_msg_format_from_name("xml"), -1);
    assert_string_equal(pr_msg_format_name(99), "unknown");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_criteo_multi_line),
        cmocka_unit_test(test_criteo_split_across_blocks),
        cmocka_unit_test(test_event_hex),
        cmocka_unit_test(test_event_ids_and_mixing),
        cmocka_unit_test(test_event_rejects),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_fuzz),
        cmocka_unit_test(test_format_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
