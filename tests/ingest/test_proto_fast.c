/*
 * test_proto_fast.c — the hand-written protobuf decoders (ingest/proto_decode.c
 * pr_decode_protobuf_event[_batch]) against the protobuf-c reference
 * (pr_decode_protobuf_event[_batch]_ref), and fused Hex2Int in the TSV decoder
 * against the engine's Hex2Int.
 *
 * Differential, not example-based: events are generated from a small model,
 * encoded by our own test encoder in every legal way (packed, unpacked, split
 * packed runs, fields interleaved, unknown fields of every wire type,
 * over-long varints), then mutated (bit flips, truncation, insertion,
 * duplication). Both decoders get the same message and the same starting
 * block (empty, or holding an id row or a hex row, so column encodings
 * differ), in both parse_hex modes, and must agree on the return value,
 * cursor, every row value and bit, the column encodings and every reject
 * (reason, record number, detail). Batches larger than the block check the
 * PR_EFULL / resume path. Deterministic (fixed seeds).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_ingest.h"
#include "proto_ref.h"

/* ---------------------------------------------------------------- helpers */

static uint64_t rng_state;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static unsigned rn(unsigned n)
{
    return (unsigned)(rnd() % n);
}

#define MAX_REJ 512
typedef struct rej_log {
    int n;
    int reason[MAX_REJ];
    int64_t recno[MAX_REJ];
    char detail[MAX_REJ][160];
    size_t len[MAX_REJ];
} rej_log;

static void on_rej(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                   int64_t recno)
{
    rej_log *l = opaque;
    (void)rec;
    if (l->n >= MAX_REJ)
        return;
    l->reason[l->n] = reason;
    l->recno[l->n] = recno;
    snprintf(l->detail[l->n], sizeof(l->detail[0]), "%s", detail);
    l->len[l->n] = len;
    l->n++;
}

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n)
{
    if (n == 0)
        return;
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_byte(buf *b, uint8_t c)
{
    put(b, &c, 1);
}
/* A varint, now and then padded with redundant continuation bytes. */
static void put_varint(buf *b, uint64_t v, int pad)
{
    int len = 0;
    uint8_t tmp[10];
    do {
        tmp[len++] = (uint8_t)(v & 0x7f) | 0x80;
        v >>= 7;
    } while (v && len < 10);
    while (pad-- > 0 && len < 10)
        tmp[len++] = 0x80;
    tmp[len - 1] &= 0x7f;
    put(b, tmp, (size_t)len);
}
static void put_tag(buf *b, uint32_t field, unsigned wire)
{
    put_varint(b, (uint64_t)field << 3 | wire, 0);
}

/* ---------------------------------------------------------------- model */

typedef struct model {
    int32_t label;
    int64_t et;
    size_t nd, ndm, nh, ni, nsm;
    double dense[8];
    uint32_t dm[4], sm[4];
    char hex[8][24];
    size_t hl[8];
    uint64_t ids[8];
} model;

#define ND 3
#define NS 4

static void rand_hex(char *s, size_t *len)
{
    static const char dig[] = "0123456789abcdefABCDEF";
    size_t l = rn(10) ? rn(9) : rn(20);
    for (size_t i = 0; i < l; i++)
        s[i] = dig[rn(sizeof(dig) - 1)];
    if (l && !rn(12))
        s[rn((unsigned)l)] = "gz \t\0\xff-x"[rn(8)];
    *len = l;
}

static void rand_model(model *m)
{
    memset(m, 0, sizeof(*m));
    m->label = rn(4) ? (int32_t)rn(2) : (int32_t)rnd();
    m->et = rn(3) ? 0 : (int64_t)(rnd() % 2000000000000ull) - (rn(4) ? 0 : 1000);
    m->nd = rn(8) ? ND : rn(6);
    for (size_t i = 0; i < m->nd; i++)
        m->dense[i] = rn(5) ? (double)rn(1000) : (double)rnd() / 3.0 - 1e18;
    m->ndm = rn(3) ? 0 : rn(4);
    for (size_t i = 0; i < m->ndm; i++)
        m->dm[i] = rn(10) ? rn(ND) : (rn(2) ? ND + rn(3) : (uint32_t)rnd());
    bool ids = rn(2);
    size_t ns = rn(8) ? NS : rn(7);
    if (ids) {
        m->ni = ns;
        for (size_t i = 0; i < ns; i++)
            m->ids[i] = rn(3) ? rn(100000) : rnd();
    } else {
        m->nh = ns;
        for (size_t i = 0; i < ns; i++)
            rand_hex(m->hex[i], &m->hl[i]);
    }
    if (!rn(20)) { /* both kinds */
        m->ni = 1 + rn(NS);
        for (size_t i = 0; i < m->ni; i++)
            m->ids[i] = rnd();
    }
    m->nsm = rn(3) ? 0 : rn(4);
    for (size_t i = 0; i < m->nsm; i++)
        m->sm[i] = rn(10) ? rn(NS) : NS + rn(5);
}

/* Chunks of one field, in the order their values must stay. */
typedef struct chunk {
    uint32_t field;
    buf b;
} chunk;

static void unknown_field(buf *b)
{
    uint32_t f = 8 + rn(200);
    switch (rn(4)) {
    case 0:
        put_tag(b, f, 0);
        put_varint(b, rnd(), 0);
        break;
    case 1:
        put_tag(b, f, 1);
        put(b, "\1\2\3\4\5\6\7\10", 8);
        break;
    case 2:
        put_tag(b, f, 2);
        put_varint(b, 3, 0);
        put(b, "abc", 3);
        break;
    default:
        put_tag(b, f, 5);
        put(b, "\1\2\3\4", 4);
    }
}

/* Encode a repeated varint field: packed, unpacked, or split/mixed. */
static void enc_varints(chunk *ch, int *nch, uint32_t field, const uint64_t *v, size_t n)
{
    if (n == 0) {
        if (!rn(6)) { /* an empty packed run */
            chunk *c = &ch[(*nch)++];
            c->field = field;
            put_tag(&c->b, field, 2);
            put_varint(&c->b, 0, 0);
        }
        return;
    }
    unsigned mode = rn(4);
    size_t i = 0;
    while (i < n) {
        size_t take = mode == 0 ? n - i : mode == 1 ? 1 : 1 + rn((unsigned)(n - i));
        bool packed = mode == 0 || (mode >= 2 && rn(2));
        if (mode == 1)
            packed = false;
        chunk *c = &ch[(*nch)++];
        c->field = field;
        if (packed) {
            buf tmp = {0};
            for (size_t k = 0; k < take; k++)
                put_varint(&tmp, v[i + k], rn(10) ? 0 : 1);
            put_tag(&c->b, field, 2);
            put_varint(&c->b, tmp.n, 0);
            put(&c->b, tmp.p, tmp.n);
            free(tmp.p);
        } else {
            for (size_t k = 0; k < take; k++) {
                put_tag(&c->b, field, 0);
                put_varint(&c->b, v[i + k], rn(10) ? 0 : 1);
            }
        }
        i += take;
    }
}

/* Encode a model in a random legal way. */
static void encode(const model *m, buf *out)
{
    chunk ch[64];
    int nch = 0;
    memset(ch, 0, sizeof(ch));
    if (m->label || !rn(4)) {
        chunk *c = &ch[nch++];
        c->field = 1;
        put_tag(&c->b, 1, 0);
        put_varint(&c->b, (uint64_t)(int64_t)m->label, 0);
    }
    if (m->et || !rn(4)) {
        chunk *c = &ch[nch++];
        c->field = 2;
        put_tag(&c->b, 2, 0);
        put_varint(&c->b, (uint64_t)m->et, rn(8) ? 0 : 1);
    }
    if (m->nd) {
        unsigned mode = rn(3);
        size_t i = 0;
        while (i < m->nd) {
            size_t take = mode == 0 ? m->nd - i : 1 + rn((unsigned)(m->nd - i));
            chunk *c = &ch[nch++];
            c->field = 3;
            if (mode == 1 && take == 1) {
                put_tag(&c->b, 3, 1);
                put(&c->b, &m->dense[i], 8);
            } else {
                put_tag(&c->b, 3, 2);
                put_varint(&c->b, take * 8, 0);
                put(&c->b, &m->dense[i], take * 8);
            }
            i += take;
        }
    }
    uint64_t v[8];
    for (size_t i = 0; i < m->ndm; i++)
        v[i] = m->dm[i];
    enc_varints(ch, &nch, 4, v, m->ndm);
    for (size_t i = 0; i < m->nh; i++) {
        chunk *c = &ch[nch++];
        c->field = 5;
        put_tag(&c->b, 5, 2);
        put_varint(&c->b, m->hl[i], 0);
        put(&c->b, m->hex[i], m->hl[i]);
    }
    enc_varints(ch, &nch, 6, m->ids, m->ni);
    for (size_t i = 0; i < m->nsm; i++)
        v[i] = m->sm[i];
    enc_varints(ch, &nch, 7, v, m->nsm);
    int nunk = rn(4) ? 0 : 1 + rn(3);
    for (int k = 0; k < nunk; k++) {
        chunk *c = &ch[nch++];
        c->field = 1000; /* unknown: never reordered against itself */
        unknown_field(&c->b);
    }
    /* Interleave: shuffle slots, then give each field its chunks in order. */
    int order[64];
    for (int i = 0; i < nch; i++)
        order[i] = i;
    if (rn(3) == 0)
        for (int i = nch - 1; i > 0; i--) {
            int j = (int)rn((unsigned)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    int next_of[1001];
    memset(next_of, 0, sizeof(next_of));
    for (int i = 0; i < nch; i++) {
        uint32_t f = ch[order[i]].field;
        int k = next_of[f]++, seen = 0;
        for (int j = 0; j < nch; j++)
            if (ch[j].field == f && seen++ == k) {
                put(out, ch[j].b.p, ch[j].b.n);
                break;
            }
    }
    for (int i = 0; i < nch; i++)
        free(ch[i].b.p);
}

static void mutate(buf *b)
{
    int n = 1 + (int)rn(3);
    for (int k = 0; k < n && b->n; k++) {
        size_t at = rn((unsigned)b->n);
        switch (rn(5)) {
        case 0:
            b->p[at] ^= (uint8_t)(1u << rn(8));
            break;
        case 1:
            b->n = at;
            break;
        case 2:
            b->p[at] = (uint8_t)rnd();
            break;
        case 3: { /* insert a byte */
            put_byte(b, 0);
            memmove(b->p + at + 1, b->p + at, b->n - at - 1);
            b->p[at] = (uint8_t)rnd();
            break;
        }
        default: { /* duplicate a short segment */
            size_t l = 1 + rn(8);
            if (at + l > b->n)
                l = b->n - at;
            uint8_t seg[8];
            memcpy(seg, b->p + at, l);
            put(b, seg, l);
        }
        }
    }
}

/* ---------------------------------------------------------------- compare */

typedef struct side {
    pr_block *b;
    rej_log rl;
    pr_decode_ctx ctx;
} side;

static void compare_blocks(const pr_block *x, const pr_block *y)
{
    assert_int_equal(x->rows, y->rows);
    size_t words = pr_bitmap_words(x->cap);
    for (uint32_t c = 0; c < x->n_sparse; c++)
        if (x->rows)
            assert_int_equal(x->sparse_enc[c], y->sparse_enc[c]);
    for (uint32_t r = 0; r < x->rows; r++) {
        assert_int_equal(x->labels[r], y->labels[r]);
        assert_int_equal(x->partition[r], y->partition[r]);
        assert_int_equal(x->offset[r], y->offset[r]);
        assert_int_equal(x->event_time_ms[r], y->event_time_ms[r]);
        for (uint32_t c = 0; c < x->n_dense; c++) {
            size_t i = (size_t)c * x->cap + r;
            assert_memory_equal(&x->dense[i], &y->dense[i], sizeof(double));
            assert_int_equal(pr_bit_test(x->dense_missing + c * words, r),
                             pr_bit_test(y->dense_missing + c * words, r));
        }
        for (uint32_t c = 0; c < x->n_sparse; c++) {
            size_t i = (size_t)c * x->cap + r;
            if (x->sparse_enc[c] == PR_SPARSE_U64)
                assert_int_equal(x->sparse_u64[i], y->sparse_u64[i]);
            else
                assert_memory_equal(x->sparse_hex + i * PR_HEX_SLOT,
                                    y->sparse_hex + i * PR_HEX_SLOT, PR_HEX_SLOT);
            assert_int_equal(pr_bit_test(x->sparse_missing + c * words, r),
                             pr_bit_test(y->sparse_missing + c * words, r));
        }
    }
    /* Nothing beyond the rows (a rejected record leaves no bits). */
    for (uint32_t r = x->rows; r < x->cap; r++) {
        for (uint32_t c = 0; c < x->n_dense; c++)
            assert_false(pr_bit_test(y->dense_missing + c * words, r));
        for (uint32_t c = 0; c < x->n_sparse; c++)
            assert_false(pr_bit_test(y->sparse_missing + c * words, r));
    }
}

static void compare_rejects(const rej_log *x, const rej_log *y, bool same_rec_len)
{
    assert_int_equal(x->n, y->n);
    for (int i = 0; i < x->n; i++) {
        assert_int_equal(x->reason[i], y->reason[i]);
        assert_int_equal(x->recno[i], y->recno[i]);
        assert_string_equal(x->detail[i], y->detail[i]);
        if (same_rec_len)
            assert_int_equal(x->len[i], y->len[i]);
    }
}

static const pr_pipeline_spec *small_spec(void)
{
    static pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    spec.n_dense = ND;
    spec.n_sparse = NS;
    return &spec;
}

/* Bring a block into one of three starting states, the same on both sides. */
static void prefill(side *s, int state)
{
    pr_block_reset(s->b);
    if (state == 0)
        return;
    model m;
    memset(&m, 0, sizeof(m));
    m.nd = ND;
    if (state == 1) {
        m.ni = NS;
        for (int i = 0; i < NS; i++)
            m.ids[i] = 100 + (uint64_t)i;
    } else {
        m.nh = NS;
        for (int i = 0; i < NS; i++) {
            memcpy(m.hex[i], "a0", 2);
            m.hl[i] = 2;
        }
    }
    buf e = {0};
    encode(&m, &e);
    uint32_t next = 0;
    pr_decode_ctx plain = s->ctx;
    plain.parse_hex = false;
    assert_int_equal(pr_decode_protobuf_event_ref(&plain, s->b, e.p, e.n, &next, NULL), 1);
    free(e.p);
}

static void run_event(side *ref, side *fast, const buf *msg, int state)
{
    prefill(ref, state);
    prefill(fast, state);
    ref->rl.n = fast->rl.n = 0;
    uint32_t n1 = 0, n2 = 0;
    pr_arena *arena = pr_arena_new(0);
    int r1 = pr_decode_protobuf_event_ref(&ref->ctx, ref->b, msg->p, msg->n, &n1, arena);
    int r2 = pr_decode_protobuf_event(&fast->ctx, fast->b, msg->p, msg->n, &n2, NULL);
    pr_arena_free(arena);
    assert_int_equal(r1, r2);
    assert_int_equal(n1, n2);
    compare_rejects(&ref->rl, &fast->rl, true);
    compare_blocks(ref->b, fast->b);
}

/* Decode a batch to the end through blocks of the sides' capacity. */
static void run_batch(side *ref, side *fast, const buf *msg, int state)
{
    prefill(ref, state);
    prefill(fast, state);
    ref->rl.n = fast->rl.n = 0;
    uint32_t n1 = 0, n2 = 0;
    pr_arena *arena = pr_arena_new(0);
    for (int round = 0; round < 100; round++) {
        int r1 = pr_decode_protobuf_event_batch_ref(&ref->ctx, ref->b, msg->p, msg->n, &n1, arena);
        int r2 = pr_decode_protobuf_event_batch(&fast->ctx, fast->b, msg->p, msg->n, &n2, NULL);
        assert_int_equal(r1, r2);
        assert_int_equal(n1, n2);
        compare_rejects(&ref->rl, &fast->rl, false);
        compare_blocks(ref->b, fast->b);
        if (r1 != PR_EFULL)
            break;
        pr_block_reset(ref->b);
        pr_block_reset(fast->b);
    }
    pr_arena_free(arena);
}

static void sides(side *ref, side *fast, uint32_t cap, bool parse_hex)
{
    memset(ref, 0, sizeof(*ref));
    memset(fast, 0, sizeof(*fast));
    ref->b = pr_block_new(ND, NS, cap, true);
    fast->b = pr_block_new(ND, NS, cap, true);
    side *s[2] = {ref, fast};
    for (int i = 0; i < 2; i++) {
        s[i]->ctx = (pr_decode_ctx){.spec = small_spec(),
                                    .on_reject = on_rej,
                                    .opaque = &s[i]->rl,
                                    .partition = 3,
                                    .offset = 77,
                                    .default_event_time_ms = 1234,
                                    .parse_hex = parse_hex};
    }
}

/* ---------------------------------------------------------------- tests */

static void test_events_differential(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        side ref, fast;
        sides(&ref, &fast, 64, mode);
        rng_state = 0x9e3779b97f4a7c15ull + (uint64_t)mode;
        for (int it = 0; it < 20000; it++) {
            model m;
            rand_model(&m);
            buf e = {0};
            encode(&m, &e);
            if (rn(3) == 0)
                mutate(&e);
            run_event(&ref, &fast, &e, (int)rn(3));
            free(e.p);
        }
        pr_block_free(ref.b);
        pr_block_free(fast.b);
    }
}

static void test_batches_differential(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        side ref, fast;
        sides(&ref, &fast, 64, mode);
        rng_state = 0x1234567ull + (uint64_t)mode;
        for (int it = 0; it < 3000; it++) {
            buf msg = {0};
            int n = rn(10) ? (int)rn(6) : 60 + (int)rn(100); /* some exceed a block */
            for (int k = 0; k < n; k++) {
                model m;
                rand_model(&m);
                if (n >= 60 || rn(2)) { /* good events: big batches reach PR_EFULL clean */
                    m.nd = ND;
                    m.ndm = m.nsm = 0;
                    m.nh = m.nh ? NS : 0;
                    m.ni = m.nh ? 0 : NS;
                    for (int c = 0; c < NS; c++)
                        m.hl[c] = m.hl[c] > 16 ? 16 : m.hl[c];
                    for (int c = 0; c < NS; c++)
                        for (size_t k = 0; k < m.hl[c]; k++)
                            m.hex[c][k] = "0123456789abcdef"[m.hex[c][k] & 15];
                }
                buf e = {0};
                encode(&m, &e);
                put_tag(&msg, 1, 2);
                put_varint(&msg, e.n, 0);
                put(&msg, e.p, e.n);
                free(e.p);
                if (!rn(20))
                    unknown_field(&msg);
            }
            if (rn(4) == 0)
                mutate(&msg);
            run_batch(&ref, &fast, &msg, (int)rn(3));
            free(msg.p);
        }
        pr_block_free(ref.b);
        pr_block_free(fast.b);
    }
}

/* Pure noise must be rejected or decoded the same way, never crash. */
static void test_noise(void **state)
{
    (void)state;
    side ref, fast;
    sides(&ref, &fast, 64, true);
    rng_state = 42;
    for (int it = 0; it < 20000; it++) {
        buf msg = {0};
        size_t n = rn(40);
        for (size_t i = 0; i < n; i++)
            put_byte(&msg, (rn(2) ? (uint8_t)rnd()
                                  : (uint8_t) "\x08\x10\x1a\x22\x2a\x30\x38\x0a\x80\x01"[rn(10)]));
        if (n == 0)
            put_byte(&msg, 0); /* keep msg.p non-NULL */
        run_event(&ref, &fast, &(buf){msg.p, n, n}, 0);
        run_batch(&ref, &fast, &(buf){msg.p, n, n}, 0);
        free(msg.p);
    }
    pr_block_free(ref.b);
    pr_block_free(fast.b);
}

/* Fused Hex2Int in the TSV decoder: same values as the engine's Hex2Int on
 * the slot path for every length and case, non-hex rejected as bad_hex with
 * the engine's wording, and a worse problem later on the line still wins. */
static void test_tsv_parse_hex(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_engine_opts eo = {.backend = "cpu", .threads = 1};
    char err[256];
    spec.n_sparse_ops = 1; /* hex2int only: the output is the value itself */
    spec.sparse_ops[0] = PR_OP_HEX2INT;
    pr_engine *eng = pr_engine_new(&spec, &eo, err, sizeof(err));
    assert_non_null(eng);
    pr_block *b1 = pr_block_new(13, 26, 256, true), *b2 = pr_block_new(13, 26, 256, true);
    pr_out *o1 = pr_out_new(13, 26, 256, pr_engine_sparse_width(eng));
    pr_out *o2 = pr_out_new(13, 26, 256, pr_engine_sparse_width(eng));
    rej_log rl1 = {0}, rl2 = {0};
    pr_decode_ctx c1 = {.spec = &spec, .on_reject = on_rej, .opaque = &rl1};
    pr_decode_ctx c2 = {.spec = &spec, .on_reject = on_rej, .opaque = &rl2, .parse_hex = true};
    rng_state = 7;
    static const char dig[] = "0123456789abcdefABCDEF";
    char text[200 * 600];
    size_t tl = 0;
    for (int row = 0; row < 200; row++) {
        tl += (size_t)snprintf(text + tl, sizeof(text) - tl, "%d", row & 1);
        for (int d = 0; d < 13; d++)
            tl += (size_t)snprintf(text + tl, sizeof(text) - tl, "\t%u", rn(100));
        for (int c = 0; c < 26; c++) {
            text[tl++] = '\t';
            size_t l = rn(18);
            for (size_t k = 0; k < l; k++)
                text[tl++] = dig[rn(sizeof(dig) - 1)];
        }
        text[tl++] = '\n';
    }
    int64_t lines;
    pr_decode_criteo_lines(&c1, b1, text, tl, true, 1, &lines);
    pr_decode_criteo_lines(&c2, b2, text, tl, true, 1, &lines);
    assert_int_equal(b2->sparse_enc[0], PR_SPARSE_U64);
    assert_int_equal(b1->rows, b2->rows);
    assert_true(b1->rows > 20 && b1->rows < 200); /* 17-digit fields reject some */
    compare_rejects(&rl1, &rl2, true);
    assert_int_equal(pr_engine_process(eng, b1, o1, err, sizeof(err)), 0);
    assert_int_equal(pr_engine_process(eng, b2, o2, err, sizeof(err)), 0);
    assert_int_equal(o1->n_rejected, 0);
    for (uint32_t c = 0; c < 26; c++)
        for (uint32_t r = 0; r < b1->rows; r++)
            assert_int_equal(pr_out_index(o1, c, r), pr_out_index(o2, c, r));

    /* Non-hex: the decoder rejects what the engine would. */
    rl1.n = rl2.n = 0;
    pr_block_reset(b1);
    pr_block_reset(b2);
    const char *bad =
        "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t"
        "a\tb\tc\td\te\tf\tzz\t1\t2\t3\t4\t5\t6\t7\t8\t9\t0\ta\tb\tc\td\te\tf\t1\t2\tq\n"
        "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t"
        "a\tb\tc\td\te\tf\tzz\t1\t2\t3\t4\t5\t6\t7\t8\t9\t0\ta\tb\tc\td\te\tf\t1\t2\t"
        "0123456789abcdef0\n"
        "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\t"
        "a\tb\tc\td\te\tf\tzz\t1\t2\t3\t4\t5\t6\t7\t8\t9\t0\ta\tb\tc\td\te\tf\t1\t2\n";
    pr_decode_criteo_lines(&c2, b2, bad, strlen(bad), true, 1, &lines);
    assert_int_equal(lines, 3);
    assert_int_equal(b2->rows, 0);
    assert_int_equal(rl2.n, 3);
    assert_int_equal(rl2.reason[0], PR_DEC_BAD_HEX);
    assert_string_equal(rl2.detail[0], "C7: 'zz' is not hex");
    assert_int_equal(rl2.reason[1], PR_DEC_LONG_HEX); /* the long C26 wins over C7 */
    assert_int_equal(rl2.reason[2], PR_DEC_FIELD_COUNT);
    pr_decode_criteo_lines(&c1, b1, bad, strlen(bad), true, 1, &lines);
    assert_int_equal(b1->rows, 1); /* the slot path leaves the first to the engine */
    assert_int_equal(pr_engine_process(eng, b1, o1, err, sizeof(err)), 0);
    assert_int_equal(o1->n_rejected, 1);
    assert_int_equal(o1->reject_col[0], 6);

    pr_out_free(o1);
    pr_out_free(o2);
    pr_block_free(b1);
    pr_block_free(b2);
    pr_engine_free(eng);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_events_differential),
        cmocka_unit_test(test_batches_differential),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_tsv_parse_hex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
