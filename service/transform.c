/*
 * transform.c — the row each event becomes, for a model in serving (or a
 * held-out set) with the vocabulary as it stands: `piperec transform` and
 * `piperec serve` (pr_service.h, "transform").
 *
 * Why: a model trained on piperec's batches must see, at inference, the
 * same features built the same way: the same decoder, the same operators,
 * the same index for the same id. A team that rebuilds them in its serving
 * code (log1p here, a bucket boundary there, a hash and a table lookup)
 * gets training/serving skew the day one of them differs. Here the events
 * go through the pipeline's own decoder and engine, with the engine's
 * vocabulary frozen (pr_engine_vocab_serve): a known id gets its index, an
 * id the vocabulary has not given one gets OOV (profile dlrm: the caller's
 * `unseen` index), and nothing is added or counted.
 *
 * What differs from training, on purpose: schema.filter and schema.downsample
 * do not apply (a request is answered, never dropped or sampled; the weight
 * label is 1), and a record without its own event time is timed at the
 * request (the message time's place in streaming).
 *
 * Output: one JSON line per event, in input order (rows and rejects
 * interleaved as the events came):
 *   {"labels":{..},"dense":{"price":0.69,"emb":[..]},"sparse":{"item":17,
 *    "history":[3,9]},"weights":{"cats":[0.5,1]}}
 *   {"error":"bad_json","detail":"..."}
 * A single-valued sparse feature (or a cross) is a number, a list feature an
 * array; a dense vector an array; "weights" only for weighted lists.
 *
 * Events are decoded into a block until it is full or the input ends, then
 * the block goes through the engine (and pr_feature_finish for a declared
 * schema) and its rows are written; `slots` keeps the events' order across
 * rows and rejects.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pr_batcher.h"
#include "pr_service.h"
#include "pr_sink.h"

#define PR__TR_CAP 1024 /* rows per block */

/* One event of the block being filled: its row, or its reject. */
typedef struct pr__tslot {
    int32_t row;    /* >= 0: the block row; -1: rejected by the decoder */
    int reason;     /* pr_decode_reason when rejected */
    size_t at, len; /* the reject's detail in details */
} pr__tslot;

/* The rows of a raw-layout answer (pr_transform_raw_begin), kept until
 * pr_transform_raw_end makes them one batch. Declared schema: the
 * batcher's own jagged build (pr_jagged_build), fed each flushed block's
 * kept rows. Criteo layout: labels int32, dense float [rows][D] (transposed
 * at the end), per column its indices (the engine's width). */
typedef struct pr__raw {
    bool on;
    int err;         /* the first failure (PR_ENOMEM, a side the build refused) */
    uint64_t events; /* events of the answer so far: the next error line's index */
    pr_jagged_build *jb;
    uint32_t idx[PR__TR_CAP]; /* declared: the flushed block's kept rows */
    uint32_t n_idx;
    uint32_t rows, n_cols; /* Criteo */
    pr_mbuf labels, dense;
    pr_mbuf *vals; /* [n_cols] */
} pr__raw;

struct pr_transform {
    const pr_pipeline_cfg *pc;
    pr_feature_schema schema; /* pc's, without filter and downsample */
    bool declared;
    pr_msg_format fmt;
    const pr_pipeline_spec *espec;
    pr_engine *eng;
    pr_json_decoder *dec;
    pr_decode_ctx ctx;
    pr_block *blk;
    pr_out *out;
    pr__tslot *slots;
    size_t n_slots, slots_cap;
    uint32_t given; /* block rows already given a slot */
    pr_mbuf details;
    int64_t *pos; /* [n_feat]: each feature's next value in out->side (declared) */
    int *side;    /* [n_features]: pr_feature_side_index of each (declared) */
    bool failed;  /* out of memory in the reject callback */
    int64_t unseen;
    pr_transform_counts counts;
    /* An engine shared with other transforms (pr_transform_opts.seq_mu):
     * the block's first half here, its second half under seq_mu. */
    pthread_mutex_t *seq_mu;
    pr_engine_split *sp;
    pr_engine *eng_old; /* before the last pr_transform_set_engine (engine_back) */
    pr_engine_split *sp_old;
    pr__raw raw; /* pr_transform_raw_begin: the rows kept as one batch */
};

/* ---------------------------------------------------------------- slots */

static int pr__slot_push(pr_transform *t, int32_t row, int reason, const char *detail)
{
    if (t->n_slots == t->slots_cap) {
        size_t cap = t->slots_cap ? 2 * t->slots_cap : 2 * PR__TR_CAP;
        pr__tslot *ns = realloc(t->slots, cap * sizeof(*ns));
        if (!ns)
            return PR_ENOMEM;
        t->slots = ns;
        t->slots_cap = cap;
    }
    pr__tslot *s = &t->slots[t->n_slots++];
    *s = (pr__tslot){.row = row, .reason = reason, .at = t->details.len};
    if (detail)
        pr_mbuf_puts(&t->details, detail);
    s->len = t->details.len - s->at;
    return 0;
}

/* Slots for the rows the decoder appended since the last call. */
static int pr__slot_rows(pr_transform *t)
{
    for (; t->given < t->blk->rows; t->given++)
        if (pr__slot_push(t, (int32_t)t->given, 0, NULL))
            return PR_ENOMEM;
    return 0;
}

static void pr__on_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                          int64_t recno)
{
    (void)rec, (void)len, (void)recno;
    pr_transform *t = opaque;
    if (pr_decode_dropped(reason)) /* no filter or downsample here: never */
        return;
    if (pr__slot_rows(t) || pr__slot_push(t, -1, reason, detail))
        t->failed = true;
}

/* ---------------------------------------------------------------- JSON */

static void pr__json_i64(pr_mbuf *mb, int64_t v)
{
    char buf[24], *e = buf + sizeof(buf), *p = e;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    pr_mbuf_append(mb, p, (size_t)(e - p));
}

/* v in plain decimal with the fewest digits after the point that read back
 * as v (|v| in [1e-4, 1e9); 0 otherwise): the candidates by double
 * arithmetic, the one found checked by strtof, so a double rounding that
 * misjudged it costs the slow path, never a wrong digit. Returns the length. */
static int pr__f32_fast(float v, char *buf)
{
    static const double p10[] = {1,   1e1, 1e2,  1e3,  1e4,  1e5,  1e6, 1e7,
                                 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14};
    float av = fabsf(v);
    double a = (double)av;
    if (!(a >= 1e-4 && a < 1e9))
        return 0;
    int ip = 0; /* digits before the point */
    while (ip < 9 && a >= p10[ip])
        ip++;
    for (int k = 0; k <= 14 && (ip + k <= 9 || ip == 0); k++) {
        double m = nearbyint(a * p10[k]);
        if ((float)(m / p10[k]) != av)
            continue;
        char dig[24], *e = dig + sizeof(dig), *d = e;
        for (uint64_t u = (uint64_t)m; u; u /= 10)
            *--d = (char)('0' + u % 10);
        int nd = (int)(e - d), n = 0;
        if (v < 0)
            buf[n++] = '-';
        if (nd <= k) { /* 0.000ddd */
            buf[n++] = '0';
            buf[n++] = '.';
            for (int z = 0; z < k - nd; z++)
                buf[n++] = '0';
            memcpy(buf + n, d, (size_t)nd);
            n += nd;
        } else {
            memcpy(buf + n, d, (size_t)(nd - k));
            n += nd - k;
            if (k) {
                buf[n++] = '.';
                memcpy(buf + n, e - k, (size_t)k);
                n += k;
            }
        }
        buf[n] = '\0';
        return strtof(buf, NULL) == v ? n : 0;
    }
    return 0;
}

/* The shortest decimal that reads back as the same float32 (an integer
 * value as an integer); null for a value JSON cannot hold. */
static void pr__json_f32(pr_mbuf *mb, float v)
{
    if (!isfinite(v)) {
        pr_mbuf_append(mb, "null", 4);
        return;
    }
    if (fabsf(v) < 1e7f && v == (float)(int32_t)v && !(v == 0 && signbit(v))) {
        pr__json_i64(mb, (int32_t)v);
        return;
    }
    char buf[40];
    int n = pr__f32_fast(v, buf);
    for (int prec = 6; !n && prec <= 9; prec++) {
        int w = snprintf(buf, sizeof(buf), "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v)
            n = w;
    }
    pr_mbuf_append(mb, buf, (size_t)n);
}

/* ,"name": (names are [A-Za-z0-9_-], and NAME[c]: nothing to escape) */
static void pr__json_key(pr_mbuf *mb, bool *first, const char *name)
{
    pr_mbuf_append(mb, ",\"" + *first, *first ? 1 : 2);
    *first = false;
    pr_mbuf_append(mb, name, strlen(name));
    pr_mbuf_append(mb, "\":", 2);
}

/* Row r of a Criteo-layout output. */
static void pr__row_criteo(const pr_transform *t, uint32_t r, pr_mbuf *mb)
{
    const pr_out *o = t->out;
    const pr_pipeline_spec *s = t->espec;
    pr_mbuf_puts(mb, "{\"labels\":{");
    if (s->has_label)
        pr_mbuf_printf(mb, "\"label\":%d", (int)o->labels[r]);
    pr_mbuf_puts(mb, "},\"dense\":{");
    bool first = true;
    for (uint32_t k = 0; k < s->n_dense; k++) {
        pr__json_key(mb, &first, t->pc->dense_names[k]);
        pr__json_f32(mb, o->dense[(size_t)k * o->cap + r]);
    }
    pr_mbuf_puts(mb, "},\"sparse\":{");
    first = true;
    for (uint32_t c = 0; c < s->n_sparse; c++) {
        pr__json_key(mb, &first, s->sparse[c].name);
        pr__json_i64(mb, pr_out_index(o, c, r));
    }
    pr_mbuf_puts(mb, "}}\n");
}

/* A declared schema's features of one kind, row r, as "name":value pairs. */
static void pr__row_numbers(const pr_transform *t, uint32_t r, pr_feature_kind kind,
                            const float *vals, uint32_t width, pr_mbuf *mb)
{
    bool first = true;
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->schema.n_features; i++) {
        const pr_feature_spec *f = &t->schema.features[i];
        if (f->kind != kind)
            continue;
        pr__json_key(mb, &first, f->name);
        const float *v = vals + (size_t)r * width + k;
        if (kind == PR_FEAT_DENSE && f->dim) {
            pr_mbuf_puts(mb, "[");
            for (uint32_t d = 0; d < f->dim; d++) {
                pr_mbuf_puts(mb, d ? "," : "");
                pr__json_f32(mb, v[d]);
            }
            pr_mbuf_puts(mb, "]");
            k += f->dim;
        } else {
            pr__json_f32(mb, *v);
            k++;
        }
    }
}

/* The sparse and list features of row r (ids, then weights), moving each
 * feature's position in its values past the row. */
static void pr__row_ids(pr_transform *t, uint32_t r, pr_mbuf *mb)
{
    const pr_fside *sd = t->out->side;
    bool first = true, any_w = false;
    pr_mbuf_puts(mb, ",\"sparse\":{");
    for (uint32_t i = 0; i < t->schema.n_features; i++) {
        const pr_feature_spec *f = &t->schema.features[i];
        int fi = t->side[i];
        if (fi < 0)
            continue;
        uint32_t n = (uint32_t)sd->lengths[(size_t)fi * sd->cap + r];
        const int64_t *v = sd->values[fi] + t->pos[fi];
        pr__json_key(mb, &first, f->name);
        bool list = f->kind == PR_FEAT_LIST;
        pr_mbuf_puts(mb, list ? "[" : "");
        for (uint32_t k = 0; k < n; k++) {
            if (k)
                pr_mbuf_append(mb, ",", 1);
            pr__json_i64(mb, v[k]);
        }
        pr_mbuf_puts(mb, list ? "]" : (n ? "" : "null"));
        any_w |= sd->weights && sd->weights[fi];
    }
    pr_mbuf_puts(mb, "}");
    if (any_w) {
        first = true;
        pr_mbuf_puts(mb, ",\"weights\":{");
        for (uint32_t i = 0; i < t->schema.n_features; i++) {
            int fi = t->side[i];
            if (fi < 0 || !sd->weights[fi])
                continue;
            uint32_t n = (uint32_t)sd->lengths[(size_t)fi * sd->cap + r];
            pr__json_key(mb, &first, t->schema.features[i].name);
            pr_mbuf_puts(mb, "[");
            for (uint32_t k = 0; k < n; k++) {
                pr_mbuf_puts(mb, k ? "," : "");
                pr__json_f32(mb, sd->weights[fi][t->pos[fi] + k]);
            }
            pr_mbuf_puts(mb, "]");
        }
        pr_mbuf_puts(mb, "}");
    }
    for (uint32_t f = 0; f < sd->n_feat; f++)
        t->pos[f] += sd->lengths[(size_t)f * sd->cap + r];
}

static void pr__row_declared(pr_transform *t, uint32_t r, pr_mbuf *mb)
{
    const pr_fside *sd = t->out->side;
    pr_mbuf_puts(mb, "{\"labels\":{");
    pr__row_numbers(t, r, PR_FEAT_LABEL, sd->labels, sd->n_labels, mb);
    pr_mbuf_puts(mb, "},\"dense\":{");
    pr__row_numbers(t, r, PR_FEAT_DENSE, sd->dense, sd->n_dense, mb);
    pr_mbuf_puts(mb, "}");
    pr__row_ids(t, r, mb);
    pr_mbuf_puts(mb, "}\n");
}

static void pr__row_error(pr_transform *t, pr_mbuf *mb, const char *reason, const char *detail,
                          size_t n)
{
    pr_mbuf_puts(mb, "{");
    if (t->raw.on) /* only the errors are written: each says which event it is */
        pr_mbuf_printf(mb, "\"index\":%" PRIu64 ",", t->raw.events - 1);
    pr_mbuf_puts(mb, "\"error\":");
    pr_mbuf_json_str(mb, reason);
    pr_mbuf_puts(mb, ",\"detail\":");
    pr_mbuf_json_strn(mb, detail, n);
    pr_mbuf_puts(mb, "}\n");
}

/* ---------------------------------------------------------------- raw layout */

static pr_mbuf *pr__mbufs(uint32_t n)
{
    pr_mbuf *m = calloc(n ? n : 1, sizeof(*m));
    for (uint32_t i = 0; m && i < n; i++)
        pr_mbuf_init(&m[i]);
    return m;
}

/* The kept rows dropped (the declared schema's build stays for the next
 * answer). */
static void pr__raw_reset(pr__raw *w)
{
    pr_mbuf_fini(&w->labels);
    pr_mbuf_fini(&w->dense);
    for (uint32_t c = 0; w->vals && c < w->n_cols; c++)
        pr_mbuf_fini(&w->vals[c]);
    free(w->vals);
    pr_jagged_build *jb = w->jb;
    memset(w, 0, sizeof(*w));
    w->jb = jb;
}

static void pr__put(pr_mbuf *m, const void *p, size_t n)
{
    pr_mbuf_append(m, (const char *)p, n);
}

/* Row r kept for the batch: a declared schema's row index (the block's
 * rows go to the build together, pr__raw_block), a Criteo row's values. */
static void pr__raw_row(pr_transform *t, uint32_t r)
{
    pr__raw *w = &t->raw;
    if (t->declared) {
        w->idx[w->n_idx++] = r;
        return;
    }
    pr_out *o = t->out;
    const pr_pipeline_spec *s = t->espec;
    int32_t lab = s->has_label ? o->labels[r] : 0;
    w->rows++;
    pr__put(&w->labels, &lab, 4);
    for (uint32_t k = 0; k < s->n_dense; k++)
        pr__put(&w->dense, &o->dense[(size_t)k * o->cap + r], 4);
    for (uint32_t c = 0; w->vals && c < w->n_cols; c++)
        pr__put(&w->vals[c],
                o->sparse_width == 4 ? (const void *)(pr_out_sparse32(o, c) + r)
                                     : (const void *)(pr_out_sparse64(o, c) + r),
                o->sparse_width);
}

/* A declared schema's kept rows of the flushed block into the build. */
static void pr__raw_block(pr_transform *t)
{
    pr__raw *w = &t->raw;
    if (w->n_idx && !w->err)
        w->err = pr_jagged_build_add(w->jb, t->out, w->idx, w->n_idx);
    w->n_idx = 0;
}

void pr_transform_raw_begin(pr_transform *t)
{
    pr__raw *w = &t->raw;
    pr__raw_reset(w);
    w->on = true;
    pr_mbuf_init(&w->labels);
    pr_mbuf_init(&w->dense);
    if (!t->declared) {
        w->n_cols = t->espec->n_sparse;
        w->err = (w->vals = pr__mbufs(w->n_cols)) ? 0 : PR_ENOMEM;
        return;
    }
    if (!w->jb) { /* the batcher's own build, named and sized as its batches */
        pr_batch_schema bs;
        w->err = pr_batch_schema_from_features(&t->schema, &bs);
        if (!w->err)
            w->err = pr_jagged_build_new(&bs, &w->jb);
        pr_batch_schema_fini(&bs);
    }
    if (!w->err)
        w->err = pr_jagged_build_begin(w->jb, t->pc->name);
}

static uint64_t pr__vocab_size_cb(void *opaque, uint32_t col)
{
    return pr_engine_vocab_size(opaque, col);
}

/* The kept Criteo-layout rows as a batch: labels, dense transposed to
 * column-major, the columns' indices; vocab sizes as /v1/status has them. */
static pr_batch *pr__raw_batch_criteo(pr_transform *t)
{
    const pr__raw *w = &t->raw;
    const pr_pipeline_spec *s = t->espec;
    uint8_t width = pr_engine_sparse_width(t->eng);
    bool bad = w->labels.err || w->dense.err;
    for (uint32_t c = 0; c < w->n_cols; c++)
        bad |= w->vals[c].err;
    pr_batch *b = bad ? NULL : pr_batch_new(t->pc->name, w->rows, s->n_dense, s->n_sparse, width);
    if (!b)
        return NULL;
    size_t rows = w->rows;
    if (rows)
        memcpy(b->labels, w->labels.buf, rows * 4);
    const float *dense = (const float *)w->dense.buf;
    for (size_t r = 0; r < rows; r++)
        for (size_t k = 0; k < s->n_dense; k++)
            b->dense[k * rows + r] = dense[r * s->n_dense + k];
    for (uint32_t c = 0; c < s->n_sparse; c++) {
        if (rows)
            memcpy((char *)b->sparse + (size_t)c * rows * width, w->vals[c].buf, rows * width);
        b->vocab_sizes[c] = pr__vocab_size_cb(t->eng, c);
    }
    return b;
}

int pr_transform_raw_end(pr_transform *t, uint8_t **frame, size_t *len, size_t *payload_at,
                         char *errstr, size_t errstr_size)
{
    pr__raw *w = &t->raw;
    int rc = w->err;
    if (frame && !rc) {
        *frame = NULL;
        pr_batch *b = t->declared ? pr_jagged_build_end(w->jb, pr__vocab_size_cb, t->eng)
                                  : pr__raw_batch_criteo(t);
        pr__raw_reset(w); /* the batch holds the rows now */
        rc = b ? pr_batch_raw_frame(b, frame, len, payload_at) : PR_ENOMEM;
        pr_batch_unref(b);
    }
    if (frame && rc)
        rc = pr_seterr(errstr, errstr_size, rc, "transform: the raw batch: %s", pr_strerror(rc));
    pr__raw_reset(w);
    return frame ? rc : 0;
}

/* ---------------------------------------------------------------- blocks */

/* The block and its slots emptied, whatever happened to them. */
static void pr__discard(pr_transform *t)
{
    pr_block_reset(t->blk);
    t->n_slots = 0;
    t->given = 0;
    t->failed = false;
    pr_mbuf_reset(&t->details);
}

/* The block through the engine, and every slot's line into mb; the block
 * and the slots emptied (on an error too: a failed block's events are not
 * carried into the next call). */
static int pr__flush(pr_transform *t, pr_mbuf *mb, char *errstr, size_t errstr_size)
{
    if (pr__slot_rows(t)) {
        pr__discard(t);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
    }
    int rc = 0;
    if (t->blk->rows) {
        pr_engine_stats before, after;
        if (t->seq_mu) {
            pr_engine_process_par(t->eng, t->blk, t->out, t->sp);
            pthread_mutex_lock(t->seq_mu);
            pr_engine_get_stats(t->eng, &before);
            rc = pr_engine_process_seq(t->eng, t->blk, t->out, t->sp, errstr, errstr_size);
            pr_engine_get_stats(t->eng, &after);
            pthread_mutex_unlock(t->seq_mu);
        } else {
            pr_engine_get_stats(t->eng, &before);
            rc = pr_engine_process(t->eng, t->blk, t->out, errstr, errstr_size);
            pr_engine_get_stats(t->eng, &after);
        }
        if (!rc && t->declared)
            rc = pr_feature_finish(&t->schema, t->blk, t->out, errstr, errstr_size);
        if (rc) {
            pr__discard(t);
            return rc;
        }
        t->counts.unseen += after.undecided_oov - before.undecided_oov;
        if (t->declared)
            memset(t->pos, 0, t->out->side->n_feat * sizeof(*t->pos));
    }
    for (size_t i = 0; i < t->n_slots; i++) {
        const pr__tslot *s = &t->slots[i];
        t->counts.events++;
        t->raw.events++;
        if (s->row < 0) {
            t->counts.rejected++;
            t->counts.by_reason[s->reason < PR_DEC__COUNT ? s->reason : 0]++;
            pr__row_error(t, mb, pr_decode_reason_name(s->reason), t->details.buf + s->at, s->len);
            continue;
        }
        uint32_t r = (uint32_t)s->row;
        if (pr_bit_test(t->out->rejected, r)) {
            /* The engine's own reject (bad hex): its values were not looked up. */
            t->counts.rejected++;
            t->counts.by_reason[PR_DEC_BAD_HEX]++;
            const char *d = "a sparse field is not hex";
            pr__row_error(t, mb, pr_decode_reason_name(PR_DEC_BAD_HEX), d, strlen(d));
            if (t->declared)
                for (uint32_t f = 0; f < t->out->side->n_feat; f++)
                    t->pos[f] += t->out->side->lengths[(size_t)f * t->out->side->cap + r];
            continue;
        }
        t->counts.rows++;
        if (t->raw.on)
            pr__raw_row(t, r);
        else if (t->declared)
            pr__row_declared(t, r, mb);
        else
            pr__row_criteo(t, r, mb);
    }
    if (t->raw.on && t->declared)
        pr__raw_block(t);
    pr__discard(t);
    return mb->err ? pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory") : 0;
}

int pr_transform_event(pr_transform *t, const void *rec, size_t len, pr_mbuf *out, char *errstr,
                       size_t errstr_size)
{
    uint32_t next = 0;
    if (!t->n_slots && !t->blk->rows) /* a record without its own time: timed now */
        t->ctx.default_event_time_ms = pr_clock_wall_ms(pr_clock_real());
    for (;;) {
        int rc = pr_decode_message(t->fmt, &t->ctx, t->blk, rec, len, &next, NULL);
        if (t->failed)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
        if (rc >= 0)
            return pr__slot_rows(t)
                       ? pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory")
                       : 0;
        if (rc == PR_EAGAIN)
            return pr_seterr(errstr, errstr_size, PR_EAGAIN, "transform: %s",
                             t->dec ? pr_json_decoder_last_detail(t->dec)
                                    : "the record cannot be read yet");
        if (rc != PR_EFULL)
            return pr_seterr(errstr, errstr_size, rc, "transform: decoding failed (%s)",
                             pr_strerror(rc));
        if (!t->blk->rows && !t->n_slots) /* no room even in an empty block */
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "transform: a record holds more values than a block");
        if ((rc = pr__flush(t, out, errstr, errstr_size)))
            return rc;
    }
}

int pr_transform_flush(pr_transform *t, pr_mbuf *out, char *errstr, size_t errstr_size)
{
    return pr__flush(t, out, errstr, errstr_size);
}

/* ---------------------------------------------------------------- framing */

const char *const pr_framing_names[PR_FRAMING__COUNT] = {"lines", "delimited", "single"};

/* The next record of body[*at, len) under framing fr: 1 and rec/n, 0 at the
 * end, or PR_EINVAL with errstr (a truncated length or record). */
int pr_framing_next(pr_framing fr, const char *body, size_t len, size_t *at, const char **rec,
                    size_t *n, char *errstr, size_t errstr_size)
{
    if (fr == PR_FRAMING_SINGLE) {
        if (*at || !len) /* an empty body is no record: *at could not move past it */
            return 0;
        *at = len;
        *rec = body, *n = len;
        return 1;
    }
    if (fr == PR_FRAMING_LINES) {
        for (;;) {
            if (*at >= len)
                return 0;
            const char *s = body + *at, *e = memchr(s, '\n', len - *at);
            size_t l = e ? (size_t)(e - s) : len - *at;
            *at += l + (e != NULL);
            if (l && s[l - 1] == '\r')
                l--;
            size_t k = 0;
            while (k < l && (s[k] == ' ' || s[k] == '\t'))
                k++;
            if (k < l) {
                *rec = s, *n = l;
                return 1;
            }
        }
    }
    if (*at >= len)
        return 0;
    uint64_t l = 0;
    size_t p = *at;
    for (unsigned shift = 0;; shift += 7) {
        if (p >= len || shift > 35) {
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "byte %zu: a bad or truncated record length", *at);
        }
        uint8_t c = (uint8_t)body[p++];
        l |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            break;
    }
    if (l > len - p) {
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "byte %zu: a record of %" PRIu64 " bytes, but %zu are left", *at, l,
                         len - p);
    }
    *rec = body + p, *n = (size_t)l;
    *at = p + (size_t)l;
    return 1;
}

int pr_framing_check(pr_framing fr, const char *buf, size_t len, char *errstr, size_t errstr_size)
{
    const char *rec;
    size_t n, at = 0;
    int got;
    while ((got = pr_framing_next(fr, buf, len, &at, &rec, &n, errstr, errstr_size)) == 1)
        ;
    return got;
}

pr_framing pr_framing_default(pr_msg_format fmt)
{
    return fmt == PR_MSG_JSON || fmt == PR_MSG_CRITEO_TSV ? PR_FRAMING_LINES : PR_FRAMING_DELIMITED;
}

/* ---------------------------------------------------------------- life */

static int pr__transform_blocks(pr_transform *t, char *errstr, size_t errstr_size)
{
    uint8_t width = pr_engine_sparse_width(t->eng);
    const pr_pipeline_spec *s = t->espec;
    if (t->declared) {
        t->blk = pr_feature_block_new(&t->schema, PR__TR_CAP, true);
        t->out = pr_feature_out_new(&t->schema, PR__TR_CAP, width);
        t->pos = calloc(t->schema.n_features + 1, sizeof(*t->pos));
        t->side = calloc(t->schema.n_features + 1, sizeof(*t->side));
        for (uint32_t i = 0; t->side && i < t->schema.n_features; i++)
            t->side[i] = pr_feature_side_index(&t->schema, i);
    } else {
        t->blk = pr_block_new(s->n_dense, s->n_sparse, PR__TR_CAP, true);
        t->out = pr_out_new(s->n_dense, s->n_sparse, PR__TR_CAP, width);
        t->ctx.parse_hex = pr_decode_want_parse_hex(s);
    }
    if (!t->blk || !t->out || (t->declared && (!t->pos || !t->side)))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
    return 0;
}

int pr_transform_new(const pr_transform_opts *o, pr_transform **out, char *errstr,
                     size_t errstr_size)
{
    *out = NULL;
    pr_transform *t = calloc(1, sizeof(*t));
    if (!t)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
    t->pc = o->pc;
    t->eng = o->eng;
    t->unseen = o->unseen;
    t->seq_mu = o->seq_mu;
    t->espec = pr_engine_spec(o->eng);
    t->fmt = (pr_msg_format)o->pc->source.format;
    t->schema = o->pc->features;
    t->schema.filter = NULL;
    t->schema.n_filter = 0;
    t->schema.downsample.enabled = false;
    t->declared = t->schema.declared;
    pr_mbuf_init(&t->details);
    t->ctx = (pr_decode_ctx){.spec = t->espec, .on_reject = pr__on_reject, .opaque = t};
    int rc = pr_engine_vocab_serve(o->eng, o->unseen, errstr, errstr_size);
    if (!rc && t->declared) {
        if (!(t->dec = pr_json_decoder_new(&t->schema, errstr, errstr_size)))
            rc = PR_EINVAL;
        else
            rc = pr_json_decoder_for_source(t->dec, &o->pc->source, errstr, errstr_size);
        t->ctx.json = t->dec;
    }
    if (!rc)
        rc = pr__transform_blocks(t, errstr, errstr_size);
    if (!rc && t->seq_mu && !(t->sp = pr_engine_split_new(o->eng)))
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
    if (rc) {
        pr_transform_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int pr_transform_set_engine(pr_transform *t, pr_engine *eng, char *errstr, size_t errstr_size)
{
    int rc = pr_engine_vocab_serve(eng, t->unseen, errstr, errstr_size);
    if (rc)
        return rc;
    pr_engine_split *sp = NULL;
    if (t->seq_mu && !(sp = pr_engine_split_new(eng))) /* a split is made for its engine */
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "transform: out of memory");
    pr_engine_split_free(t->sp_old);
    t->sp_old = t->sp, t->eng_old = t->eng; /* kept for pr_transform_engine_back */
    t->sp = sp;
    t->eng = eng; /* the old one may be freed once no engine_back can follow */
    t->espec = pr_engine_spec(eng);
    t->ctx.spec = t->espec;
    return 0;
}

void pr_transform_engine_back(pr_transform *t)
{
    pr_engine *e = t->eng;
    pr_engine_split *sp = t->sp;
    t->eng = t->eng_old, t->sp = t->sp_old;
    t->eng_old = e, t->sp_old = sp;
    t->espec = pr_engine_spec(t->eng);
    t->ctx.spec = t->espec;
}

void pr_transform_get_counts(const pr_transform *t, pr_transform_counts *c)
{
    *c = t->counts;
}

void pr_transform_set_counts(pr_transform *t, const pr_transform_counts *c)
{
    t->counts = *c;
}

void pr_transform_free(pr_transform *t)
{
    if (!t)
        return;
    pr_json_decoder_free(t->dec);
    pr_engine_split_free(t->sp);
    pr_engine_split_free(t->sp_old);
    pr__raw_reset(&t->raw);
    pr_jagged_build_free(t->raw.jb);
    pr_block_free(t->blk);
    pr_out_free(t->out);
    free(t->slots);
    free(t->pos);
    free(t->side);
    pr_mbuf_fini(&t->details);
    free(t);
}
