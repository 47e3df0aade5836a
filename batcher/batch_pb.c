/*
 * batch_pb.c — pr_batch <-> piperec.v1.TrainingBatch (schemas/piperec.proto).
 *
 * Hand-written wire code instead of protobuf-c for this one message, because
 * the message is almost all tensor bytes: the encoder sizes the message
 * first and copies each tensor exactly once into the output buffer, and the
 * decoder returns views that point into the received buffer instead of
 * copying tensors out (protobuf-c's unpack duplicates every `bytes` field).
 * tests/batcher/test_batch_pb.c checks both directions against protobuf-c's
 * generated code so the two can never drift apart.
 *
 * Canonical proto3: zero scalars and empty fields are not written; the
 * decoder accepts any field order, skips unknown fields and takes repeated
 * vocab_sizes packed or not. A jagged batch (declared schema) writes fields
 * 22-30 instead of 7-9; a Criteo batch never writes them, so its bytes are
 * those of before. Host byte order must be little-endian (x86,
 * arm64): tensors are copied as they are in memory.
 */
#include <stdlib.h>
#include <string.h>

#include "batcher_int.h"
#include "pr_varint.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "piperec tensors are little-endian on the wire; big-endian hosts need byte swapping"
#endif

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* TrainingBatch field numbers. */
enum {
    F_PIPELINE = 1,
    F_SEQUENCE,
    F_ROWS,
    F_N_DENSE,
    F_N_SPARSE,
    F_SPARSE_WIDTH,
    F_LABELS,
    F_DENSE,
    F_SPARSE,
    F_OFFSETS,
    F_MIN_ET,
    F_MAX_ET,
    F_EMIT,
    F_VOCAB,
    F_SPARSE_NAMES,
    F_EPOCH,         /* 16 */
    F_REPLICA,       /* 17 */
    F_RECYCLED = 18, /* RecycledIndices */
    F_POPULAR = 20,
    F_HOT_VERSION = 21,
    F_JAGGED = 22, /* declared-schema batches: 22-30 */
    F_FEATURE_KEYS,
    F_VALUES,
    F_LENGTHS,
    F_N_LABELS,
    F_LABEL_MAT,
    F_DENSE_MAT,
    F_LABEL_NAMES,
    F_DENSE_NAMES, /* 30 */
    F_WEIGHTS,     /* 31: weighted features (`weights:`) */
    F_WEIGHTED_KEYS,
    F_FEATURE_TABLES /* 33: shared vocabularies (`table:`) */
};
/* RecycledIndices field numbers (packed parallel arrays). */
enum { N_COLUMN = 1, N_INDEX, N_ROW, N_NUMBER };
/* OffsetRange field numbers. */
enum { R_TOPIC = 1, R_PARTITION, R_FIRST, R_LAST, R_ROWS };

static inline size_t pr__tag_size(uint32_t field)
{
    return pr_varint_size((uint64_t)field << 3);
}
static inline size_t pr__sz_varint_field(uint32_t f, uint64_t v)
{
    return v ? pr__tag_size(f) + pr_varint_size(v) : 0;
}
static inline size_t pr__sz_len_field(uint32_t f, size_t len)
{
    return len ? pr__tag_size(f) + pr_varint_size(len) + len : 0;
}

static inline uint8_t *pr__put_tag(uint8_t *p, uint32_t f, int wt)
{
    return pr_varint_put(p, ((uint64_t)f << 3) | (unsigned)wt);
}
static inline uint8_t *pr__put_varint_field(uint8_t *p, uint32_t f, uint64_t v)
{
    if (!v)
        return p;
    return pr_varint_put(pr__put_tag(p, f, WT_VARINT), v);
}
static inline uint8_t *pr__put_len_field(uint8_t *p, uint32_t f, const void *data, size_t len)
{
    if (!len)
        return p;
    p = pr_varint_put(pr__put_tag(p, f, WT_LEN), len);
    memcpy(p, data, len);
    return p + len;
}

static const char *pr__range_topic(const pr_batch *b, const pr_batch_range *r)
{
    int ti = PR_PART_KEY_TOPIC(r->partition);
    return (uint32_t)ti < b->n_topics ? b->topics[ti] : "";
}

static size_t pr__range_body_size(const pr_batch *b, const pr_batch_range *r)
{
    return pr__sz_len_field(R_TOPIC, strlen(pr__range_topic(b, r))) +
           pr__sz_varint_field(R_PARTITION,
                               (uint64_t)(int64_t)PR_PART_KEY_PARTITION(r->partition)) +
           pr__sz_varint_field(R_FIRST, (uint64_t)r->first_offset) +
           pr__sz_varint_field(R_LAST, (uint64_t)r->last_offset) +
           pr__sz_varint_field(R_ROWS, r->rows);
}

static size_t pr__vocab_body_size(const pr_batch *b)
{
    size_t n = 0;
    if (!b->vocab_sizes)
        return 0;
    for (uint32_t i = 0; i < b->n_sparse; i++)
        n += pr_varint_size(b->vocab_sizes[i]);
    return n;
}

/* One packed array of the notices: field f of every notice. */
static uint64_t pr__notice_field(const pr_recycled *r, int f)
{
    switch (f) {
    case N_COLUMN:
        return r->col;
    case N_INDEX:
        return (uint64_t)r->index;
    case N_ROW:
        return r->row;
    default:
        return r->number;
    }
}

static size_t pr__packed_size(const pr_batch *b, int f)
{
    size_t n = 0;
    for (uint32_t i = 0; i < b->n_recycled; i++)
        n += pr_varint_size(pr__notice_field(&b->recycled[i], f));
    return n;
}

static size_t pr__recycled_body_size(const pr_batch *b)
{
    size_t n = 0;
    if (!b->n_recycled)
        return 0;
    for (int f = N_COLUMN; f <= N_NUMBER; f++) {
        size_t len = pr__packed_size(b, f); /* >= 1 byte per notice: never empty */
        n += pr__tag_size((uint32_t)f) + pr_varint_size(len) + len;
    }
    return n;
}

/* Repeated strings (names): every element is written, empty or not. */
static size_t pr__names_size(uint32_t f, const char (*names)[PR_NAME_MAX], uint32_t n)
{
    size_t s = 0;
    for (uint32_t i = 0; names && i < n; i++) {
        size_t len = strnlen(names[i], PR_NAME_MAX);
        s += pr__tag_size(f) + pr_varint_size(len) + len;
    }
    return s;
}

static uint8_t *pr__put_names(uint8_t *p, uint32_t f, const char (*names)[PR_NAME_MAX], uint32_t n)
{
    for (uint32_t i = 0; names && i < n; i++) {
        size_t len = strnlen(names[i], PR_NAME_MAX);
        p = pr_varint_put(pr__put_tag(p, f, WT_LEN), len);
        memcpy(p, names[i], len);
        p += len;
    }
    return p;
}

/* Fields 31-32: the weights and the names of the features that carry them
 * (nothing when no feature does). */
static size_t pr__weights_size(const pr_batch *b)
{
    if (!b->weights || !b->weighted)
        return 0;
    size_t n = pr__sz_len_field(F_WEIGHTS, pr_batch_weights_bytes(b));
    for (uint32_t f = 0; f < b->n_sparse; f++)
        if (b->weighted[f])
            n += pr__names_size(F_WEIGHTED_KEYS, &b->feature_keys[f], 1);
    return n;
}

static uint8_t *pr__put_weights(const pr_batch *b, uint8_t *p)
{
    if (!b->weights || !b->weighted)
        return p;
    p = pr__put_len_field(p, F_WEIGHTS, b->weights, pr_batch_weights_bytes(b));
    for (uint32_t f = 0; f < b->n_sparse; f++)
        if (b->weighted[f])
            p = pr__put_names(p, F_WEIGHTED_KEYS, &b->feature_keys[f], 1);
    return p;
}

/* Fields 22-32 (all zero / empty for a Criteo batch: nothing written). */
static size_t pr__jagged_size(const pr_batch *b)
{
    if (!b->jagged)
        return 0;
    return pr__weights_size(b) + pr__sz_varint_field(F_JAGGED, 1) +
           pr__names_size(F_FEATURE_KEYS, b->feature_keys, b->n_sparse) +
           pr__sz_len_field(F_VALUES, pr_batch_values_bytes(b)) +
           pr__sz_len_field(F_LENGTHS, pr_batch_lengths_bytes(b)) +
           pr__sz_varint_field(F_N_LABELS, b->n_labels) +
           pr__sz_len_field(F_LABEL_MAT, pr_batch_label_mat_bytes(b)) +
           pr__sz_len_field(F_DENSE_MAT, pr_batch_dense_mat_bytes(b)) +
           pr__names_size(F_LABEL_NAMES, b->label_names, b->n_labels) +
           pr__names_size(F_DENSE_NAMES, b->dense_names, b->n_dense) +
           (b->feature_tables ? pr__names_size(F_FEATURE_TABLES, b->feature_tables, b->n_sparse)
                              : 0);
}

static uint8_t *pr__put_jagged(const pr_batch *b, uint8_t *p)
{
    if (!b->jagged)
        return p;
    p = pr__put_varint_field(p, F_JAGGED, 1);
    p = pr__put_names(p, F_FEATURE_KEYS, b->feature_keys, b->n_sparse);
    p = pr__put_len_field(p, F_VALUES, b->values, pr_batch_values_bytes(b));
    p = pr__put_len_field(p, F_LENGTHS, b->lengths, pr_batch_lengths_bytes(b));
    p = pr__put_varint_field(p, F_N_LABELS, b->n_labels);
    p = pr__put_len_field(p, F_LABEL_MAT, b->label_mat, pr_batch_label_mat_bytes(b));
    p = pr__put_len_field(p, F_DENSE_MAT, b->dense_mat, pr_batch_dense_mat_bytes(b));
    p = pr__put_names(p, F_LABEL_NAMES, b->label_names, b->n_labels);
    p = pr__put_names(p, F_DENSE_NAMES, b->dense_names, b->n_dense);
    if (b->feature_tables)
        p = pr__put_names(p, F_FEATURE_TABLES, b->feature_tables, b->n_sparse);
    return pr__put_weights(b, p);
}

size_t pr_batch_pb_size(const pr_batch *b)
{
    size_t n =
        pr__sz_len_field(F_PIPELINE, strlen(b->pipeline)) +
        pr__sz_varint_field(F_SEQUENCE, b->seq) + pr__sz_varint_field(F_ROWS, b->rows) +
        pr__sz_varint_field(F_N_DENSE, b->n_dense) + pr__sz_varint_field(F_N_SPARSE, b->n_sparse) +
        pr__sz_varint_field(F_SPARSE_WIDTH, b->sparse_width) +
        pr__sz_len_field(F_LABELS, pr_batch_labels_bytes(b)) +
        pr__sz_len_field(F_DENSE, pr_batch_dense_bytes(b)) +
        pr__sz_len_field(F_SPARSE, pr_batch_sparse_bytes(b)) +
        pr__sz_varint_field(F_MIN_ET, (uint64_t)b->min_event_time_ms) +
        pr__sz_varint_field(F_MAX_ET, (uint64_t)b->max_event_time_ms) +
        pr__sz_varint_field(F_EMIT, (uint64_t)b->emit_time_ms) +
        pr__sz_varint_field(F_EPOCH, b->epoch) + pr__sz_len_field(F_REPLICA, strlen(b->replica)) +
        pr__sz_varint_field(F_POPULAR, b->popular) +
        pr__sz_varint_field(F_HOT_VERSION, b->hot_version);
    for (uint32_t i = 0; i < b->n_ranges; i++) {
        size_t body = pr__range_body_size(b, &b->ranges[i]);
        n += pr__tag_size(F_OFFSETS) + pr_varint_size(body) + body;
    }
    n += pr__sz_len_field(F_VOCAB, pr__vocab_body_size(b));
    n += pr__sz_len_field(F_RECYCLED, pr__recycled_body_size(b));
    return n + pr__jagged_size(b);
}

size_t pr_batch_pb_write(const pr_batch *b, uint8_t *out)
{
    uint8_t *p = out;
    p = pr__put_len_field(p, F_PIPELINE, b->pipeline, strlen(b->pipeline));
    p = pr__put_varint_field(p, F_SEQUENCE, b->seq);
    p = pr__put_varint_field(p, F_ROWS, b->rows);
    p = pr__put_varint_field(p, F_N_DENSE, b->n_dense);
    p = pr__put_varint_field(p, F_N_SPARSE, b->n_sparse);
    p = pr__put_varint_field(p, F_SPARSE_WIDTH, b->sparse_width);
    p = pr__put_len_field(p, F_LABELS, b->labels, pr_batch_labels_bytes(b));
    p = pr__put_len_field(p, F_DENSE, b->dense, pr_batch_dense_bytes(b));
    p = pr__put_len_field(p, F_SPARSE, b->sparse, pr_batch_sparse_bytes(b));
    for (uint32_t i = 0; i < b->n_ranges; i++) {
        const pr_batch_range *r = &b->ranges[i];
        const char *topic = pr__range_topic(b, r);
        p = pr_varint_put(pr__put_tag(p, F_OFFSETS, WT_LEN), pr__range_body_size(b, r));
        p = pr__put_len_field(p, R_TOPIC, topic, strlen(topic));
        p = pr__put_varint_field(p, R_PARTITION,
                                 (uint64_t)(int64_t)PR_PART_KEY_PARTITION(r->partition));
        p = pr__put_varint_field(p, R_FIRST, (uint64_t)r->first_offset);
        p = pr__put_varint_field(p, R_LAST, (uint64_t)r->last_offset);
        p = pr__put_varint_field(p, R_ROWS, r->rows);
    }
    p = pr__put_varint_field(p, F_MIN_ET, (uint64_t)b->min_event_time_ms);
    p = pr__put_varint_field(p, F_MAX_ET, (uint64_t)b->max_event_time_ms);
    p = pr__put_varint_field(p, F_EMIT, (uint64_t)b->emit_time_ms);
    size_t vb = pr__vocab_body_size(b);
    if (vb) {
        p = pr_varint_put(pr__put_tag(p, F_VOCAB, WT_LEN), vb);
        for (uint32_t i = 0; i < b->n_sparse; i++)
            p = pr_varint_put(p, b->vocab_sizes[i]);
    }
    p = pr__put_varint_field(p, F_EPOCH, b->epoch); /* 0 is not written: old bytes */
    p = pr__put_len_field(p, F_REPLICA, b->replica, strlen(b->replica)); /* "" is not written */
    size_t rb = pr__recycled_body_size(b); /* none: not written, old bytes */
    if (rb) {
        p = pr_varint_put(pr__put_tag(p, F_RECYCLED, WT_LEN), rb);
        for (int f = N_COLUMN; f <= N_NUMBER; f++) {
            p = pr_varint_put(pr__put_tag(p, (uint32_t)f, WT_LEN), pr__packed_size(b, f));
            for (uint32_t i = 0; i < b->n_recycled; i++)
                p = pr_varint_put(p, pr__notice_field(&b->recycled[i], f));
        }
    }
    p = pr__put_varint_field(p, F_POPULAR, b->popular); /* false is not written: old bytes */
    p = pr__put_varint_field(p, F_HOT_VERSION, b->hot_version); /* 0 is not written: old bytes */
    p = pr__put_jagged(b, p);
    return (size_t)(p - out);
}

int pr_batch_encode(pr_batch *b)
{
    if (b->pb)
        return 0;
    size_t n = pr_batch_pb_size(b);
    /* A batcher's batch: a block of its pool when the encoding fits (no page
     * faults on a fresh block; batcher.c, "tensor pool"). */
    uint8_t *buf = b->pbpool ? pr__tpool_take(b->pbpool, n ? n : 1) : NULL;
    bool pooled = buf != NULL;
    if (!buf && !(buf = malloc(n ? n : 1)))
        return PR_ENOMEM;
    size_t w = pr_batch_pb_write(b, buf);
    if (w != n) {
        free(buf);        /* a pool's block too: taking one holds no reference */
        return PR_EINVAL; /* cannot happen: size and write walk the same fields */
    }
    b->pb = buf;
    b->pb_pooled = pooled;
    b->pb_len = n;
    return 0;
}

/* ---------------------------------------------------------------- decoding */

typedef struct pb_field {
    uint32_t num;
    int wt;
    uint64_t v;          /* varint / fixed value */
    const uint8_t *data; /* WT_LEN payload */
    size_t len;
} pb_field;

/* Read one field at *pp; returns 1, 0 at end, -1 on malformed input. */
static int pr__next_field(const uint8_t **pp, const uint8_t *end, pb_field *f)
{
    const uint8_t *p = *pp;
    if (p >= end)
        return 0;
    uint64_t key;
    size_t n = pr_varint_get(p, end, &key);
    if (!n || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
        return -1;
    p += n;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    f->v = 0;
    f->data = NULL;
    f->len = 0;
    switch (f->wt) {
    case WT_VARINT:
        if (!(n = pr_varint_get(p, end, &f->v)))
            return -1;
        p += n;
        break;
    case WT_I64:
        if (end - p < 8)
            return -1;
        memcpy(&f->v, p, 8);
        p += 8;
        break;
    case WT_I32: {
        uint32_t v32;
        if (end - p < 4)
            return -1;
        memcpy(&v32, p, 4);
        f->v = v32;
        p += 4;
        break;
    }
    case WT_LEN: {
        uint64_t len;
        if (!(n = pr_varint_get(p, end, &len)) || len > (uint64_t)(end - p - (ptrdiff_t)n))
            return -1;
        p += n;
        f->data = p;
        f->len = (size_t)len;
        p += len;
        break;
    }
    default:
        return -1;
    }
    *pp = p;
    return 1;
}

void pr_batch_view_fini(pr_batch_view *v)
{
    free(v->ranges);
    free(v->vocab_sizes);
    free(v->recycled);
    free(v->feature_keys);
    free(v->label_names);
    free(v->dense_names);
    free(v->weighted_keys);
    free(v->feature_tables);
    memset(v, 0, sizeof(*v));
}

static int pr__decode_range(const uint8_t *p, const uint8_t *end, pr_batch_view_range *r)
{
    pb_field f;
    int rc;
    memset(r, 0, sizeof(*r));
    r->topic = "";
    while ((rc = pr__next_field(&p, end, &f)) > 0) {
        if (f.num == R_TOPIC && f.wt == WT_LEN) {
            r->topic = (const char *)f.data;
            r->topic_len = f.len;
        } else if (f.wt == WT_VARINT) {
            switch (f.num) {
            case R_PARTITION:
                r->partition = (int32_t)f.v;
                break;
            case R_FIRST:
                r->first_offset = (int64_t)f.v;
                break;
            case R_LAST:
                r->last_offset = (int64_t)f.v;
                break;
            case R_ROWS:
                r->rows = (uint32_t)f.v;
                break;
            default:
                break;
            }
        }
    }
    return rc;
}

static int pr__push_vocab(pr_batch_view *v, uint32_t *cap, uint64_t x)
{
    if (v->n_vocab_sizes == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 32;
        uint64_t *n = realloc(v->vocab_sizes, nc * sizeof(*n));
        if (!n)
            return PR_ENOMEM;
        v->vocab_sizes = n;
        *cap = nc;
    }
    v->vocab_sizes[v->n_vocab_sizes++] = x;
    return 0;
}

/* RecycledIndices: four arrays, each packed or not, of equal length. */
static int pr__decode_recycled(const uint8_t *p, const uint8_t *end, pr_batch_view *v)
{
    uint64_t *arr[4] = {NULL, NULL, NULL, NULL};
    uint32_t cnt[4] = {0}, cap[4] = {0};
    pb_field f;
    int rc, err = 0;
    while ((rc = pr__next_field(&p, end, &f)) > 0 && !err) {
        if (f.num < N_COLUMN || f.num > N_NUMBER)
            continue;
        int k = (int)f.num - 1;
        const uint8_t *q = NULL, *qe = NULL;
        if (f.wt == WT_LEN) {
            q = f.data;
            qe = f.data + f.len;
        }
        uint64_t x = f.v;
        for (;;) {
            if (f.wt == WT_LEN) {
                if (q >= qe)
                    break;
                size_t n = pr_varint_get(q, qe, &x);
                if (!n) {
                    err = -1;
                    break;
                }
                q += n;
            } else if (f.wt != WT_VARINT) {
                break;
            }
            if (cnt[k] == cap[k]) {
                uint32_t nc = cap[k] ? cap[k] * 2 : 64;
                uint64_t *a = realloc(arr[k], nc * sizeof(*a));
                if (!a) {
                    err = -2;
                    break;
                }
                arr[k] = a;
                cap[k] = nc;
            }
            arr[k][cnt[k]++] = x;
            if (f.wt == WT_VARINT)
                break;
        }
    }
    if (rc < 0 || (!err && (cnt[1] != cnt[0] || cnt[2] != cnt[0] || cnt[3] != cnt[0])))
        err = -1;
    if (!err && cnt[0]) {
        v->recycled = malloc((size_t)cnt[0] * sizeof(*v->recycled));
        if (!v->recycled)
            err = -2;
        for (uint32_t i = 0; !err && i < cnt[0]; i++)
            v->recycled[i] = (pr_recycled){(uint32_t)arr[0][i], (uint32_t)arr[2][i],
                                           (int64_t)arr[1][i], arr[3][i]};
        if (!err)
            v->n_recycled = cnt[0];
    }
    for (int k = 0; k < 4; k++)
        free(arr[k]);
    return err;
}

static int pr__push_str(pr_batch_view_str **arr, uint32_t *n, const pb_field *f)
{
    if ((*n & (*n - 1)) == 0) { /* 0, 1, 2, 4, ...: grow to the next power of two */
        pr_batch_view_str *a = realloc(*arr, (*n ? *n * 2 : 1) * sizeof(**arr));
        if (!a)
            return PR_ENOMEM;
        *arr = a;
    }
    (*arr)[(*n)++] = (pr_batch_view_str){(const char *)f->data, f->len};
    return 0;
}

/* Fields 22-30 of a length-delimited kind: 1 taken, 0 not ours, < 0 ENOMEM. */
static int pr__decode_jagged_len(pr_batch_view *v, const pb_field *f)
{
    switch (f->num) {
    case F_FEATURE_KEYS:
        return pr__push_str(&v->feature_keys, &v->n_feature_keys, f) < 0 ? PR_ENOMEM : 1;
    case F_LABEL_NAMES:
        return pr__push_str(&v->label_names, &v->n_label_names, f) < 0 ? PR_ENOMEM : 1;
    case F_DENSE_NAMES:
        return pr__push_str(&v->dense_names, &v->n_dense_names, f) < 0 ? PR_ENOMEM : 1;
    case F_WEIGHTED_KEYS:
        return pr__push_str(&v->weighted_keys, &v->n_weighted_keys, f) < 0 ? PR_ENOMEM : 1;
    case F_FEATURE_TABLES:
        return pr__push_str(&v->feature_tables, &v->n_feature_tables, f) < 0 ? PR_ENOMEM : 1;
    case F_WEIGHTS:
        v->weights = f->data;
        v->weights_len = f->len;
        return 1;
    case F_VALUES:
        v->values = f->data;
        v->values_len = f->len;
        return 1;
    case F_LENGTHS:
        v->lengths = f->data;
        v->lengths_len = f->len;
        return 1;
    case F_LABEL_MAT:
        v->label_mat = f->data;
        v->label_mat_len = f->len;
        return 1;
    case F_DENSE_MAT:
        v->dense_mat = f->data;
        v->dense_mat_len = f->len;
        return 1;
    default:
        return 0;
    }
}

int pr_batch_view_key_index(const pr_batch_view *v, const pr_batch_view_str *name)
{
    for (uint32_t i = 0; i < v->n_feature_keys; i++)
        if (v->feature_keys[i].len == name->len &&
            memcmp(v->feature_keys[i].s, name->s, name->len) == 0)
            return (int)i;
    return -1;
}

/* Shapes of a jagged batch; NULL when they hold, else why not. */
static const char *pr__check_jagged(const pr_batch_view *v)
{
    if (v->labels_len || v->dense_len || v->sparse_len)
        return "a jagged batch carries labels, dense or sparse (fields 7-9)";
    if (v->n_feature_keys != v->n_sparse)
        return "feature_keys count does not match n_sparse";
    if (v->n_feature_tables && v->n_feature_tables != v->n_feature_keys)
        return "feature_tables count does not match feature_keys";
    if (v->n_labels > UINT16_MAX)
        return "n_labels above 65535";
    if (v->lengths_len != (size_t)v->rows * v->n_sparse * 4)
        return "lengths length does not match rows x n_features x 4";
    if (v->label_mat_len != (size_t)v->rows * v->n_labels * 4)
        return "label_matrix length does not match rows x n_labels x 4";
    if (v->dense_mat_len != (size_t)v->rows * v->n_dense * 4)
        return "dense_matrix length does not match rows x n_dense x 4";
    if ((v->n_label_names && v->n_label_names != v->n_labels) ||
        (v->n_dense_names && v->n_dense_names != v->n_dense))
        return "label_names or dense_names count does not match n_labels or n_dense";
    uint64_t sum = 0;
    for (size_t i = 0; i < v->lengths_len / 4; i++) {
        int32_t l;
        memcpy(&l, v->lengths + i * 4, 4);
        if (l < 0)
            return "negative length";
        sum += (uint64_t)l;
    }
    if (v->values_len % 8 || v->values_len / 8 != sum)
        return "values length does not match the sum of lengths x 8";
    if (v->weights_len && v->weights_len != sum * 4)
        return "weights length does not match the sum of lengths x 4";
    /* an empty bytes field is absent on the wire: a weighted batch without a
     * value (every list empty) has weighted_keys and no weights */
    if (v->weights_len ? !v->n_weighted_keys : v->n_weighted_keys && sum)
        return "weights without weighted_keys, or the reverse";
    for (uint32_t i = 0; i < v->n_weighted_keys; i++)
        if (pr_batch_view_key_index(v, &v->weighted_keys[i]) < 0)
            return "a weighted_keys name that is not a feature key";
    return NULL;
}

/* One varint field of a TrainingBatch: 0, or PR_ENOMEM. */
static int pr__decode_varint_field(pr_batch_view *v, const pb_field *f, uint32_t *vcap)
{
    switch (f->num) {
    case F_SEQUENCE:
        v->seq = f->v;
        break;
    case F_EPOCH:
        v->epoch = f->v;
        break;
    case F_POPULAR:
        v->popular = f->v != 0;
        break;
    case F_HOT_VERSION:
        v->hot_version = f->v;
        break;
    case F_JAGGED:
        v->jagged = f->v != 0;
        break;
    case F_N_LABELS:
        v->n_labels = (uint32_t)f->v;
        break;
    case F_ROWS:
        v->rows = (uint32_t)f->v;
        break;
    case F_N_DENSE:
        v->n_dense = (uint32_t)f->v;
        break;
    case F_N_SPARSE:
        v->n_sparse = (uint32_t)f->v;
        break;
    case F_SPARSE_WIDTH:
        v->sparse_width = (uint32_t)f->v;
        break;
    case F_MIN_ET:
        v->min_event_time_ms = (int64_t)f->v;
        break;
    case F_MAX_ET:
        v->max_event_time_ms = (int64_t)f->v;
        break;
    case F_EMIT:
        v->emit_time_ms = (int64_t)f->v;
        break;
    case F_VOCAB:
        if (pr__push_vocab(v, vcap, f->v) < 0)
            return PR_ENOMEM;
        break;
    default:
        break;
    }
    return 0;
}

/* One length-delimited field of a TrainingBatch (fields 1-21; the jagged
 * ones are decode_jagged_len's): 0, PR_ENOMEM, or PR_EBADREC with *why. */
static int pr__decode_len_field(pr_batch_view *v, const pb_field *f, uint32_t *rcap, uint32_t *vcap,
                                const char **why)
{
    switch (f->num) {
    case F_PIPELINE:
        v->pipeline = (const char *)f->data;
        v->pipeline_len = f->len;
        break;
    case F_REPLICA:
        v->replica = (const char *)f->data;
        v->replica_len = f->len;
        break;
    case F_LABELS:
        v->labels = f->data;
        v->labels_len = f->len;
        break;
    case F_DENSE:
        v->dense = f->data;
        v->dense_len = f->len;
        break;
    case F_SPARSE:
        v->sparse = f->data;
        v->sparse_len = f->len;
        break;
    case F_OFFSETS:
        if (v->n_ranges == *rcap) {
            uint32_t nc = *rcap ? *rcap * 2 : 4;
            pr_batch_view_range *n = realloc(v->ranges, nc * sizeof(*n));
            if (!n)
                return PR_ENOMEM;
            v->ranges = n;
            *rcap = nc;
        }
        if (pr__decode_range(f->data, f->data + f->len, &v->ranges[v->n_ranges]) < 0) {
            *why = "malformed OffsetRange";
            return PR_EBADREC;
        }
        v->n_ranges++;
        break;
    case F_RECYCLED: {
        free(v->recycled); /* a repeated message field: the last one wins */
        v->recycled = NULL;
        v->n_recycled = 0;
        int e = pr__decode_recycled(f->data, f->data + f->len, v);
        if (e == -2)
            return PR_ENOMEM;
        if (e) {
            *why = "malformed RecycledIndices";
            return PR_EBADREC;
        }
        break;
    }
    case F_VOCAB: {
        const uint8_t *q = f->data, *qe = f->data ? f->data + f->len : NULL;
        while (q < qe) {
            uint64_t x;
            size_t n = pr_varint_get(q, qe, &x);
            if (!n) {
                *why = "malformed packed vocab_sizes";
                return PR_EBADREC;
            }
            q += n;
            if (pr__push_vocab(v, vcap, x) < 0)
                return PR_ENOMEM;
        }
        break;
    }
    default:
        break;
    }
    return 0;
}

/* The shapes of a decoded batch; NULL when they hold, else why not. */
static const char *pr__check_shapes(const pr_batch_view *v)
{
    const char *why;
    if (v->rows && v->n_sparse && !v->jagged && v->sparse_width != 4 && v->sparse_width != 8)
        return "sparse_width must be 4 or 8";
    /* pr_batch holds 16-bit column counts; this also keeps the length
     * products below from wrapping around (found by tests/fuzz). */
    if (v->n_dense > UINT16_MAX || v->n_sparse > UINT16_MAX)
        return "n_dense or n_sparse above 65535";
    if (v->jagged && (why = pr__check_jagged(v)) != NULL)
        return why;
    if (v->labels_len != (size_t)v->rows * 4 && v->labels_len != 0)
        return "labels length does not match rows";
    if (!v->jagged && v->dense_len != (size_t)v->rows * v->n_dense * 4)
        return "dense length does not match rows x n_dense x 4";
    if (!v->jagged &&
        v->sparse_len != (size_t)v->rows * v->n_sparse * (v->n_sparse ? v->sparse_width : 0))
        return "sparse length does not match rows x n_sparse x sparse_width";
    if (v->n_vocab_sizes && v->n_vocab_sizes != v->n_sparse)
        return "vocab_sizes count does not match n_sparse";
    for (uint32_t i = 0; i < v->n_recycled; i++)
        if (v->recycled[i].col >= v->n_sparse || v->recycled[i].row > v->rows)
            return "recycled notice names a column or row the batch does not have";
    return NULL;
}

int pr_batch_decode(const uint8_t *buf, size_t len, pr_batch_view *v, char *errstr,
                    size_t errstr_size)
{
    memset(v, 0, sizeof(*v));
    v->pipeline = "";
    v->replica = "";
    const uint8_t *p = buf, *end = buf + len;
    pb_field f;
    int rc = 0, e = 0;
    uint32_t rcap = 0, vcap = 0;
    const char *why = NULL;
    while (!e && (rc = pr__next_field(&p, end, &f)) > 0) {
        if (f.wt == WT_VARINT)
            e = pr__decode_varint_field(v, &f, &vcap);
        else if (f.wt == WT_LEN && (e = pr__decode_jagged_len(v, &f)) >= 0)
            e = e ? 0 : pr__decode_len_field(v, &f, &rcap, &vcap, &why);
    }
    if (e == PR_ENOMEM)
        goto nomem;
    if (e)
        goto bad;
    if (rc < 0) {
        why = "malformed protobuf";
        goto bad;
    }
    if ((why = pr__check_shapes(v)) != NULL)
        goto bad;
    return 0;
bad:
    pr_batch_view_fini(v);
    return pr_seterr(errstr, errstr_size, PR_EBADREC, "TrainingBatch: %s", why);
nomem:
    pr_batch_view_fini(v);
    return pr_seterr(errstr, errstr_size, PR_ENOMEM, "TrainingBatch: out of memory");
}

static void pr__copy_names(char (*dst)[PR_NAME_MAX], const pr_batch_view_str *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        size_t l = src[i].len < PR_NAME_MAX - 1 ? src[i].len : PR_NAME_MAX - 1;
        memcpy(dst[i], src[i].s, l);
        dst[i][l] = 0;
    }
}

/* The tensors of a jagged view, copied into a new jagged batch. */
static pr_batch *pr__jagged_from_view(const char *name, const pr_batch_view *v)
{
    pr_batch *b = pr_batch_new_jagged(name, v->rows, (uint16_t)v->n_labels, (uint16_t)v->n_dense,
                                      (uint16_t)v->n_sparse, v->values_len / 8);
    if (!b)
        return NULL;
    if (v->n_label_names && !(b->label_names = calloc(v->n_labels, PR_NAME_MAX)))
        goto nomem;
    if (v->n_dense_names && !(b->dense_names = calloc(v->n_dense, PR_NAME_MAX)))
        goto nomem;
    pr__copy_names(b->feature_keys, v->feature_keys, v->n_feature_keys);
    if (v->n_feature_tables) {
        if (!(b->feature_tables = calloc(v->n_sparse, PR_NAME_MAX)))
            goto nomem;
        pr__copy_names(b->feature_tables, v->feature_tables, v->n_feature_tables);
    }
    if (b->label_names)
        pr__copy_names(b->label_names, v->label_names, v->n_label_names);
    if (b->dense_names)
        pr__copy_names(b->dense_names, v->dense_names, v->n_dense_names);
    if (v->values_len)
        memcpy(b->values, v->values, v->values_len);
    if (v->lengths_len)
        memcpy(b->lengths, v->lengths, v->lengths_len);
    if (v->label_mat_len)
        memcpy(b->label_mat, v->label_mat, v->label_mat_len);
    if (v->dense_mat_len)
        memcpy(b->dense_mat, v->dense_mat, v->dense_mat_len);
    if (v->n_weighted_keys) {
        b->weights = malloc(v->weights_len ? v->weights_len : 4);
        b->weighted = calloc(v->n_sparse ? v->n_sparse : 1, 1);
        if (!b->weights || !b->weighted)
            goto nomem;
        if (v->weights_len)
            memcpy(b->weights, v->weights, v->weights_len);
        for (uint32_t i = 0; i < v->n_weighted_keys; i++)
            b->weighted[pr_batch_view_key_index(v, &v->weighted_keys[i])] = 1;
        b->bytes += v->weights_len;
    }
    return b;
nomem:
    pr_batch_unref(b);
    return NULL;
}

pr_batch *pr_batch_from_view(const pr_batch_view *v)
{
    char name[PR_NAME_MAX];
    size_t nl = v->pipeline_len < sizeof(name) - 1 ? v->pipeline_len : sizeof(name) - 1;
    memcpy(name, v->pipeline, nl);
    name[nl] = 0;
    uint8_t w = v->n_sparse ? (uint8_t)v->sparse_width : 4;
    pr_batch *b = v->jagged
                      ? pr__jagged_from_view(name, v)
                      : pr_batch_new(name, v->rows, (uint16_t)v->n_dense, (uint16_t)v->n_sparse, w);
    if (!b)
        return NULL;
    b->seq = v->seq;
    b->epoch = v->epoch;
    b->popular = v->popular;
    b->hot_version = v->hot_version;
    size_t rl = v->replica_len < sizeof(b->replica) - 1 ? v->replica_len : sizeof(b->replica) - 1;
    if (rl)
        memcpy(b->replica, v->replica, rl);
    b->replica[rl] = 0;
    if (v->labels_len)
        memcpy(b->labels, v->labels, v->labels_len);
    if (v->dense_len) /* absent tensors are NULL: no memcpy from NULL */
        memcpy(b->dense, v->dense, v->dense_len);
    if (v->sparse_len)
        memcpy(b->sparse, v->sparse, v->sparse_len);
    for (uint32_t i = 0; i < v->n_vocab_sizes && i < v->n_sparse; i++)
        b->vocab_sizes[i] = v->vocab_sizes[i];
    if (v->n_recycled) {
        if (!(b->recycled = malloc((size_t)v->n_recycled * sizeof(*b->recycled)))) {
            pr_batch_unref(b);
            return NULL;
        }
        memcpy(b->recycled, v->recycled, (size_t)v->n_recycled * sizeof(*b->recycled));
        b->n_recycled = v->n_recycled;
    }
    b->min_event_time_ms = v->min_event_time_ms;
    b->max_event_time_ms = v->max_event_time_ms;
    b->emit_time_ms = v->emit_time_ms;
    if (v->n_ranges) {
        b->ranges = calloc(v->n_ranges, sizeof(*b->ranges));
        b->topics = calloc(v->n_ranges, sizeof(char *));
        if (!b->ranges || !b->topics) {
            pr_batch_unref(b);
            return NULL;
        }
        /* One topic entry per distinct name, in order of appearance. */
        for (uint32_t i = 0; i < v->n_ranges; i++) {
            const pr_batch_view_range *r = &v->ranges[i];
            uint32_t t;
            for (t = 0; t < b->n_topics; t++)
                if (strlen(b->topics[t]) == r->topic_len &&
                    !memcmp(b->topics[t], r->topic, r->topic_len))
                    break;
            if (t == b->n_topics) {
                if (!(b->topics[t] = strndup(r->topic, r->topic_len))) {
                    pr_batch_unref(b);
                    return NULL;
                }
                b->n_topics++;
            }
            b->ranges[i].partition =
                (int32_t)(((uint32_t)t << 16) | ((uint32_t)r->partition & 0xffffu));
            b->ranges[i].first_offset = r->first_offset;
            b->ranges[i].last_offset = r->last_offset;
            b->ranges[i].rows = r->rows;
        }
        b->n_ranges = v->n_ranges;
    }
    return b;
}
