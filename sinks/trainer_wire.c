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

/* Bytes of the value of a field with wire type key & 7 at p, or 0 when it
 * does not fit in [p, end) (a varint value is at least one byte). */
static size_t pr__field_value_len(const uint8_t *p, const uint8_t *end, uint64_t key)
{
    uint64_t v;
    size_t n;
    switch (key & 7) {
    case 0:
        return pr_varint_get(p, end, &v);
    case 1:
        return end - p >= 8 ? 8 : 0;
    case 5:
        return end - p >= 4 ? 4 : 0;
    case 2:
        if (!(n = pr_varint_get(p, end, &v)) || v > (uint64_t)(end - p) - n)
            return 0;
        return n + (size_t)v;
    default:
        return 0;
    }
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
        if ((key >> 3) == PR__FRAME_FIELD_BATCH && (key & 7) == 2) {
            if (!(n = pr_varint_get(p, end, &v)) || v > (uint64_t)(end - p) - n)
                return PR_EBADREC;
            *batch = p + n;
            *batch_len = (size_t)v;
            return 0;
        }
        if (!(n = pr__field_value_len(p, end, key)))
            return PR_EBADREC;
        p += n;
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

/* ---------------------------------------------------------------- raw tensor layout */

typedef struct raw_plan {
    size_t off[PR__RAW_NSEC_MAX], len[PR__RAW_NSEC_MAX];
    int nsec;       /* PR__RAW_NSEC, or PR__RAW_NSEC_MAX with weights */
    size_t pre;     /* frame bytes before the payload: 4 + tag + varint */
    size_t payload; /* payload bytes (may end with zero padding) */
} raw_plan;

/* TrainingBatch fields that hold tensors: the raw sections replace them. */
static bool pr__tensor_field(uint64_t num)
{
    static const uint8_t tensor[32] = {
        [7] = 1, [8] = 1, [9] = 1, [24] = 1, [25] = 1, [27] = 1, [28] = 1, [31] = 1};
    return num < 32 && tensor[num];
}

/* Copy the top-level fields of an encoded TrainingBatch, its tensors left
 * out, to out (NULL: count only). SIZE_MAX when pb does not parse. */
static size_t pr__meta_copy(const uint8_t *pb, size_t len, uint8_t *out)
{
    const uint8_t *p = pb, *end = pb + len;
    size_t n_out = 0;
    while (p < end) {
        const uint8_t *start = p;
        uint64_t key;
        size_t n = pr_varint_get(p, end, &key);
        if (!n || !(n += pr__field_value_len(p + n, end, key)) || p + n > end)
            return SIZE_MAX;
        p += n;
        if (pr__tensor_field(key >> 3))
            continue;
        if (out)
            memcpy(out + n_out, start, n);
        n_out += n;
    }
    return n_out;
}

static size_t pr__align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Place the sections after the header, each 64-byte aligned from the
 * frame's first byte, for a preamble of `pre` bytes. */
static void pr__raw_place(raw_plan *pl, size_t pre)
{
    size_t at = PR__RAW_HDR;
    for (int s = 0; s < pl->nsec; s++) {
        at = pr__align_up(pre + at, PR__RAW_ALIGN) - pre;
        pl->off[s] = at;
        at += pl->len[s];
    }
    pl->pre = pre;
    pl->payload = at;
}

/* The preamble holds the payload's length as a varint, and the payload's
 * padding depends on the preamble: settle both. A payload whose varint came
 * out shorter than the one assumed is padded up to that varint's range. */
static void pr__raw_plan(raw_plan *pl)
{
    size_t v = 1;
    for (;;) {
        pr__raw_place(pl, 5 + v);
        size_t need = pr_varint_size(pl->payload);
        if (need == v)
            return;
        if (need < v) {
            pl->payload = (size_t)1 << (7 * (v - 1));
            return;
        }
        v = need;
    }
}

static void pr__put32(uint8_t *p, uint32_t x)
{
    memcpy(p, &x, 4); /* little-endian hosts (x86, ARM), as the rest of the wire code */
}

static void pr__put64(uint8_t *p, uint64_t x)
{
    memcpy(p, &x, 8);
}

static void pr__raw_header(const pr_batch *b, const raw_plan *pl, uint32_t flags, uint32_t n_labels,
                           uint64_t n_values, uint8_t *h)
{
    memset(h, 0, PR__RAW_HDR);
    pr__put32(h, PR__RAW_MAGIC);
    uint16_t ver = PR__RAW_VERSION, hb = PR__RAW_HDR;
    memcpy(h + 4, &ver, 2);
    memcpy(h + 6, &hb, 2);
    pr__put32(h + 8, flags);
    pr__put32(h + 12, b->rows);
    pr__put32(h + 16, b->n_dense);
    pr__put32(h + 20, n_labels);
    pr__put32(h + 24, b->n_sparse);
    pr__put32(h + 28, (uint32_t)pl->pre);
    pr__put64(h + 32, b->epoch);
    pr__put64(h + 40, b->seq);
    pr__put64(h + 48, n_values);
    pr__put32(h + 56, b->n_recycled);
    pr__put32(h + 60, (uint32_t)pl->nsec);
    _Static_assert(64 + 8 * PR__RAW_NSEC_MAX <= PR__RAW_HDR, "section table fits the header");
    for (int s = 0; s < pl->nsec; s++) {
        pr__put32(h + 64 + 8 * s, (uint32_t)pl->off[s]);
        pr__put32(h + 68 + 8 * s, (uint32_t)pl->len[s]);
    }
}

/* Criteo tensors: dense [n_dense][rows] -> [rows][n_dense], labels int32 ->
 * float32 [rows][1], sparse [n_sparse][rows] int32/int64 -> int64 values
 * (already key-major), lengths all 1. */
static void pr__raw_fill_criteo(const pr_batch *b, uint8_t *pay, const raw_plan *pl)
{
    size_t rows = b->rows, nd = b->n_dense, ns = b->n_sparse;
    float *dense = (float *)(pay + pl->off[PR__RAW_DENSE]);
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < nd; c++)
            dense[r * nd + c] = b->dense[c * rows + r];
    float *labels = (float *)(pay + pl->off[PR__RAW_LABELS]);
    for (size_t r = 0; r < rows; r++)
        labels[r] = b->labels ? (float)b->labels[r] : 0.0f;
    int32_t *lengths = (int32_t *)(pay + pl->off[PR__RAW_LENGTHS]);
    if (pl->len[PR__RAW_LENGTHS]) /* else compact: every length is 1 */
        for (size_t i = 0; i < ns * rows; i++)
            lengths[i] = 1;
    int64_t *values = (int64_t *)(pay + pl->off[PR__RAW_VALUES]);
    if (b->sparse_width == 8 || pl->len[PR__RAW_VALUES] == ns * rows * 4) /* same width */
        memcpy(values, b->sparse, pl->len[PR__RAW_VALUES]);
    else
        for (size_t i = 0; i < ns * rows; i++)
            values[i] = ((const int32_t *)b->sparse)[i];
}

static void pr__raw_fill_jagged(const pr_batch *b, uint8_t *pay, const raw_plan *pl)
{
    if (pl->len[PR__RAW_DENSE])
        memcpy(pay + pl->off[PR__RAW_DENSE], b->dense_mat, pl->len[PR__RAW_DENSE]);
    if (pl->len[PR__RAW_LABELS])
        memcpy(pay + pl->off[PR__RAW_LABELS], b->label_mat, pl->len[PR__RAW_LABELS]);
    if (pl->len[PR__RAW_LENGTHS])
        memcpy(pay + pl->off[PR__RAW_LENGTHS], b->lengths, pl->len[PR__RAW_LENGTHS]);
    if (pl->len[PR__RAW_VALUES])
        memcpy(pay + pl->off[PR__RAW_VALUES], b->values, pl->len[PR__RAW_VALUES]);
    if (pl->nsec > PR__RAW_WEIGHTS && pl->len[PR__RAW_WEIGHTS])
        memcpy(pay + pl->off[PR__RAW_WEIGHTS], b->weights, pl->len[PR__RAW_WEIGHTS]);
}

/* Offsets (0, then the running sum of the lengths) and notices. */
static void pr__raw_fill_rest(const pr_batch *b, uint8_t *pay, const raw_plan *pl)
{
    if (pl->len[PR__RAW_OFFSETS]) {
        const int32_t *len = (const int32_t *)(pay + pl->off[PR__RAW_LENGTHS]);
        int32_t *off = (int32_t *)(pay + pl->off[PR__RAW_OFFSETS]);
        size_t n = pl->len[PR__RAW_OFFSETS] / 4 - 1;
        off[0] = 0;
        for (size_t i = 0; i < n; i++) /* no lengths section: every length is 1 */
            off[i + 1] = off[i] + (pl->len[PR__RAW_LENGTHS] ? len[i] : 1);
    }
    int64_t *nt = (int64_t *)(pay + pl->off[PR__RAW_NOTICES]);
    for (uint32_t i = 0; i < b->n_recycled; i++) {
        nt[4 * i] = b->recycled[i].col;
        nt[4 * i + 1] = b->recycled[i].index;
        nt[4 * i + 2] = b->recycled[i].row;
        nt[4 * i + 3] = (int64_t)b->recycled[i].number;
    }
}

int pr__raw_frame(const pr_batch *b, bool offsets, bool compact, uint8_t **out, size_t *out_len)
{
    size_t rows = b->rows, nk = b->n_sparse;
    uint32_t n_labels = b->jagged ? b->n_labels : 1;
    uint64_t n_values = b->jagged ? b->n_values : (uint64_t)rows * nk;
    bool unit = compact && !b->jagged, v32 = unit && b->sparse_width == 4;
    size_t meta = pr__meta_copy(b->pb, b->pb_len, NULL);
    if (meta == SIZE_MAX)
        return PR_EINVAL;
    bool wts = b->jagged && b->weights;
    raw_plan pl = {.len = {rows * b->n_dense * 4, rows * n_labels * 4, unit ? 0 : nk * rows * 4,
                           (size_t)n_values * (v32 ? 4 : 8), offsets ? (nk * rows + 1) * 4 : 0,
                           (size_t)b->n_recycled * 32, meta, wts ? (size_t)n_values * 4 : 0},
                   .nsec = wts ? PR__RAW_NSEC_MAX : PR__RAW_NSEC};
    pr__raw_plan(&pl);
    size_t total = pl.pre + pl.payload;
    if (total - 4 > PR__FRAME_MAX)
        return PR_EINVAL;
    uint8_t *buf = aligned_alloc(PR__RAW_ALIGN, pr__align_up(total, PR__RAW_ALIGN));
    if (!buf)
        return PR_ENOMEM;
    pr__put32(buf, (uint32_t)(total - 4));
    buf[4] = (PR__FRAME_FIELD_RAW << 3) | 2;
    pr_varint_put(buf + 5, pl.payload);
    uint8_t *pay = buf + pl.pre;
    uint32_t flags = (b->jagged ? PR__RAW_F_JAGGED : 0) | (b->popular ? PR__RAW_F_POPULAR : 0) |
                     (offsets ? PR__RAW_F_OFFSETS : 0) | (unit ? PR__RAW_F_UNIT : 0) |
                     (v32 ? PR__RAW_F_VALUES32 : 0) | (wts ? PR__RAW_F_WEIGHTS : 0);
    pr__raw_header(b, &pl, flags, n_labels, n_values, pay);
    size_t at = PR__RAW_HDR; /* zero the padding between sections */
    for (int s = 0; s < pl.nsec; s++) {
        memset(pay + at, 0, pl.off[s] - at);
        at = pl.off[s] + pl.len[s];
    }
    memset(pay + at, 0, pl.payload - at);
    if (b->jagged)
        pr__raw_fill_jagged(b, pay, &pl);
    else
        pr__raw_fill_criteo(b, pay, &pl);
    pr__raw_fill_rest(b, pay, &pl);
    pr__meta_copy(b->pb, b->pb_len, pay + pl.off[PR__RAW_META]);
    *out = buf;
    *out_len = total;
    return 0;
}

int pr_batch_raw_frame(pr_batch *b, uint8_t **frame, size_t *len, size_t *payload_at)
{
    int rc = pr_batch_encode(b);
    if (!rc)
        rc = pr__raw_frame(b, false, false, frame, len);
    if (rc)
        return rc;
    uint64_t n;
    *payload_at = 5 + pr_varint_get(*frame + 5, *frame + *len, &n);
    return 0;
}

static uint32_t pr__get32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    return x;
}

static uint64_t pr__get64(const uint8_t *p)
{
    uint64_t x;
    memcpy(&x, p, 8);
    return x;
}

int pr__raw_parse(const uint8_t *pay, size_t len, pr__raw_view *v)
{
    memset(v, 0, sizeof(*v));
    if (len < PR__RAW_HDR || pr__get32(pay) != PR__RAW_MAGIC)
        return PR_EBADREC;
    uint16_t ver, hb;
    memcpy(&ver, pay + 4, 2);
    memcpy(&hb, pay + 6, 2);
    uint32_t nsec = pr__get32(pay + 60);
    if (ver != PR__RAW_VERSION || hb < PR__RAW_HDR || nsec < PR__RAW_NSEC ||
        64 + (uint64_t)nsec * 8 > hb || hb > len)
        return PR_EBADREC;
    v->flags = pr__get32(pay + 8);
    v->rows = pr__get32(pay + 12);
    v->n_dense = pr__get32(pay + 16);
    v->n_labels = pr__get32(pay + 20);
    v->n_keys = pr__get32(pay + 24);
    v->preamble = pr__get32(pay + 28);
    v->epoch = pr__get64(pay + 32);
    v->seq = pr__get64(pay + 40);
    v->n_values = pr__get64(pay + 48);
    v->n_notices = pr__get32(pay + 56);
    if (v->rows > len || v->n_dense > len || v->n_labels > len || v->n_keys > len ||
        v->n_values > len || v->n_notices > len)
        return PR_EBADREC; /* keeps the products below from wrapping */
    uint64_t rows = v->rows, nk = v->n_keys;
    bool wts = v->flags & PR__RAW_F_WEIGHTS;
    uint64_t want[PR__RAW_NSEC_MAX] = {rows * v->n_dense * 4,
                                       rows * v->n_labels * 4,
                                       (v->flags & PR__RAW_F_UNIT) ? 0 : nk * rows * 4,
                                       v->n_values * ((v->flags & PR__RAW_F_VALUES32) ? 4 : 8),
                                       (v->flags & PR__RAW_F_OFFSETS) ? (nk * rows + 1) * 4 : 0,
                                       (uint64_t)v->n_notices * 32,
                                       0,
                                       v->n_values * 4};
    if (wts && nsec < PR__RAW_NSEC_MAX)
        return PR_EBADREC;
    for (int s = 0; s < (wts ? PR__RAW_NSEC_MAX : PR__RAW_NSEC); s++) {
        uint64_t off = pr__get32(pay + 64 + 8 * s), n = pr__get32(pay + 68 + 8 * s);
        if (off < hb || off + n > len || (s != PR__RAW_META && n != want[s]))
            return PR_EBADREC;
        v->sec[s] = pay + off;
        v->sec_len[s] = (size_t)n;
    }
    return 0;
}
