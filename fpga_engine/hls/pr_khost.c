/*
 * pr_khost.c — host side of the FPGA kernel (see pr_khost.h): spec limits and
 * table placement, block packing/unpacking, the double-buffered call loop and
 * the vocabulary read/load protocol, shared by hls-sim and xrt.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_int.h"
#include "pr_clock.h"
#include "pr_khost.h"

#define PR__CHUNK PR_K_MAX_ROWS

static inline uint64_t pr__lane(const pr_kw *w, uint64_t i)
{
    return w[i / 8].l[i % 8];
}

/* ------------------------------------------------------------ plan */

int pr__khost_plan(pr__khost *h, const pr_pipeline_spec *spec, char *errstr, size_t errstr_size)
{
    memset(h->mem, 0, sizeof(h->mem));
    h->spec = *spec;
    h->width = pr__spec_sparse_width(spec);
    h->has_vocab = pr_spec_has_op(spec, PR_OP_VOCAB);
    h->first_index = pr__profile_base(spec->profile);
    memset(h->onchip_used, 0, sizeof(h->onchip_used));
    memset(h->hbm_used, 0, sizeof(h->hbm_used));
    h->two_pass = 0;
    h->count_done = 0;
    for (uint32_t c = 0; c < spec->n_sparse && h->has_vocab; c++)
        if (spec->sparse[c].min_count > 1 && spec->count_mode == PR_COUNT_TWO_PASS)
            h->two_pass = 1; /* as the cpu backend: two-pass only matters when some column counts */
    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);

    if (h->has_vocab && !mod)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "pipeline '%s': the FPGA kernel keeps vocabularies in direct-indexed "
                         "tables and needs the modulus operator before vocab (hash-table "
                         "vocabularies for unbounded domains are not supported on the device); "
                         "add modulus or use engine.backend: cpu",
                         spec->name);
    /* Column c belongs to lane c % L. Small domains go to the lane's on-chip
     * bank while it has room (in column order), the rest to the lane's HBM
     * pseudo-channel. */
    for (uint32_t c = 0; c < spec->n_sparse && h->has_vocab; c++) {
        const pr_sparse_col_spec *s = &spec->sparse[c];
        uint32_t l = c % PR_K_VOCAB_LANES;
        if (s->modulus > PR_K_HBM_MAX_DOMAIN)
            return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                             "sparse.%s.modulus: %" PRIu64 " exceeds the device limit of %" PRIu64
                             " (2^26) table entries per column; use a smaller modulus or "
                             "engine.backend: cpu",
                             s->name, s->modulus, (uint64_t)PR_K_HBM_MAX_DOMAIN);
        h->domain[c] = s->modulus;
        uint64_t cap = pr__spec_col_capacity(spec, c);
        uint64_t most = s->modulus + (uint64_t)h->first_index;
        h->cap[c] = cap < most ? cap : most; /* more can never be handed out */
        if (s->modulus <= PR_K_ONCHIP_MAX_DOMAIN &&
            h->onchip_used[l] + s->modulus <= PR_K_LANE_ONCHIP_ENTRIES) {
            h->mem[c] = PR_KMEM_ONCHIP;
            h->base[c] = h->onchip_used[l];
            h->onchip_used[l] += s->modulus;
        } else {
            if (h->hbm_used[l] + s->modulus > PR_K_LANE_HBM_ENTRIES)
                return pr_seterr(
                    errstr, errstr_size, PR_ENOTSUP,
                    "sparse.%s: vocabulary lane %u (columns %u, %u+%u, ...) needs more "
                    "than its HBM pseudo-channel's %" PRIu64 " entries (512 MiB); use "
                    "smaller moduli or engine.backend: cpu",
                    s->name, l, l, l, PR_K_VOCAB_LANES, (uint64_t)PR_K_LANE_HBM_ENTRIES);
            h->mem[c] = PR_KMEM_HBM;
            h->base[c] = h->hbm_used[l];
            h->hbm_used[l] += s->modulus;
        }
    }

    uint32_t rp = PR__CHUNK;
    for (int s = 0; s < 2; s++) {
        h->size[PR_KBUF_IN0 + s] =
            pr_k_in_words(rp, spec->n_dense, spec->n_sparse) * PR_K_WORD_BYTES;
        h->size[PR_KBUF_OUT0 + s] =
            pr_k_out_words(rp, spec->n_dense, spec->n_sparse, h->width) * PR_K_WORD_BYTES;
        h->size[PR_KBUF_NEWV0 + s] =
            pr_k_newv_words(rp, spec->n_sparse) * PR_K_WORD_BYTES + PR_K_WORD_BYTES;
    }
    h->size[PR_KBUF_CFG] = pr_k_cfg_words(spec->n_sparse) * PR_K_WORD_BYTES;
    h->size[PR_KBUF_XFER] = pr_k_xfer_words() * PR_K_WORD_BYTES;
    /* Never zero-sized: XRT refuses empty buffers. */
    for (uint32_t l = 0; l < PR_K_VOCAB_LANES; l++)
        h->size[PR_KBUF_TAB0 + l] = (h->hbm_used[l] ? h->hbm_used[l] : 8) * sizeof(uint64_t);
    return 0;
}

static void pr__write_cfg(const pr__khost *h, pr_kw *cfg)
{
    const pr_pipeline_spec *spec = &h->spec;
    memset(cfg, 0, h->size[PR_KBUF_CFG]);
    cfg[0].l[PR_KCFG_MAGIC] = PR_K_CFG_MAGIC;
    cfg[0].l[PR_KCFG_SHAPE] = (uint64_t)spec->n_dense | (uint64_t)spec->n_sparse << 16;
    cfg[0].l[PR_KCFG_DENSE_OPS] = (pr_spec_has_op(spec, PR_OP_NEG2ZERO) ? PR_KOP_NEG2ZERO : 0) |
                                  (pr_spec_has_op(spec, PR_OP_LOG1P) ? PR_KOP_LOG1P : 0);
    cfg[0].l[PR_KCFG_SPARSE_OPS] = (pr_spec_has_op(spec, PR_OP_HEX2INT) ? PR_KOP_HEX2INT : 0) |
                                   (pr_spec_has_op(spec, PR_OP_MODULUS) ? PR_KOP_MODULUS : 0) |
                                   (h->has_vocab ? PR_KOP_VOCAB : 0);
    cfg[0].l[PR_KCFG_PROFILE] = spec->profile == PR_VOCAB_DEFAULT;
    cfg[0].l[PR_KCFG_COUNT_MODE] = h->two_pass;
    cfg[0].l[PR_KCFG_WIDTH] = h->width;
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        pr_kw *w = &cfg[1 + c];
        w->l[PR_KCOL_MODULUS] = spec->sparse[c].modulus;
        w->l[PR_KCOL_MIN_COUNT] = spec->sparse[c].min_count;
        w->l[PR_KCOL_CAPACITY] = h->cap[c];
        w->l[PR_KCOL_MEM] = h->mem[c];
        w->l[PR_KCOL_BASE] = h->base[c];
        w->l[PR_KCOL_DOMAIN] = h->domain[c];
    }
}

/* One synchronous kernel call on slot 0 (state modes); reads back the header. */
static int pr__call(pr__khost *h, uint32_t mode, uint32_t col, uint32_t first, uint32_t count)
{
    int rc = h->xp->start(h, 0, mode, 0, col, first, count);
    if (!rc)
        rc = h->xp->wait(h, 0);
    size_t hdr = (pr_k_out_dense(h->spec.n_sparse)) * PR_K_WORD_BYTES;
    if (!rc)
        rc = h->xp->from_dev(h, PR_KBUF_OUT0, 0, hdr);
    if (rc)
        return rc;
    const pr_kw *out = h->buf[PR_KBUF_OUT0];
    if (out[0].l[0] != PR_KST_OK)
        return PR_EIO;
    for (uint32_t c = 0; c < h->spec.n_sparse; c++)
        h->n_assigned[c] = pr__lane(out, pr_k_out_next() * 8 + c);
    return 0;
}

int pr__khost_start(pr__khost *h, int clear_tables, char *errstr, size_t errstr_size)
{
    pr__write_cfg(h, h->buf[PR_KBUF_CFG]);
    int rc = h->xp->to_dev(h, PR_KBUF_CFG, 0, h->size[PR_KBUF_CFG]);
    for (uint32_t c = 0; !rc && c < h->spec.n_sparse; c++) {
        h->n_assigned[c] = 0;
        if (clear_tables && h->mem[c] != PR_KMEM_NONE)
            rc = pr__call(h, PR_KMODE_CLEAR, c, 0, 0);
    }
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "fpga kernel: initialising the vocabulary tables failed (%s)",
                         pr_strerror(rc));
    return 0;
}

void pr__khost_fini(pr__khost *h)
{
    for (uint32_t c = 0; c < PR_MAX_SPARSE; c++) {
        free(h->mirror[c]);
        h->mirror[c] = NULL;
        h->mirror_cap[c] = 0;
    }
}

/* ------------------------------------------------------------ packing */

void pr__kpack_block(const pr__khost *h, const pr_block *b, uint32_t row0, uint32_t rows, pr_kw *in)
{
    uint32_t nd = h->spec.n_dense, ns = h->spec.n_sparse;
    uint32_t rp = pr_k_rows_pad(rows);
    size_t bw = pr_bitmap_words(b->cap);

    memset(&in[0], 0, 2 * sizeof(pr_kw));
    in[0].l[0] = PR_K_CFG_MAGIC;
    in[0].l[1] = rows;
    for (uint32_t c = 0; c < ns; c++)
        if (b->sparse_enc[c] == PR_SPARSE_U64)
            in[1].l[c / 64] |= 1ull << (c % 64);

    for (uint32_t d = 0; d < nd; d++) {
        double *dst = (double *)(in + pr_k_in_dense() + (size_t)d * (rp / 8));
        const double *src = b->dense + (size_t)d * b->cap + row0;
        const uint64_t *miss = b->dense_missing + d * bw;
        memcpy(dst, src, (size_t)rows * sizeof(double));
        for (uint32_t r = 0; r < rows; r++)
            if (pr_bit_test(miss, (size_t)row0 + r))
                dst[r] = 0.0; /* missing dense = 0 */
        memset(dst + rows, 0, (size_t)(rp - rows) * sizeof(double));
    }
    uint64_t sp = pr_k_in_sparse(rp, nd);
    for (uint32_t c = 0; c < ns; c++) {
        unsigned char *dst = (unsigned char *)(in + sp + (size_t)c * (rp / 4));
        size_t used;
        if (b->sparse_enc[c] == PR_SPARSE_U64) {
            used = (size_t)rows * 8;
            memcpy(dst, b->sparse_u64 + (size_t)c * b->cap + row0, used);
        } else {
            used = (size_t)rows * PR_HEX_SLOT;
            memcpy(dst, b->sparse_hex + ((size_t)c * b->cap + row0) * PR_HEX_SLOT, used);
        }
        memset(dst + used, 0, (size_t)rp * PR_HEX_SLOT - used);
    }
    /* Missing bitmaps: row0 is a multiple of 64, so whole u64 words copy. */
    uint64_t *miss = (uint64_t *)(in + pr_k_in_missing(rp, nd, ns));
    for (uint32_t c = 0; c < ns; c++) {
        uint64_t *dst = miss + (size_t)c * (rp / 64);
        memcpy(dst, b->sparse_missing + c * bw + row0 / 64, (size_t)(rp / 64) * 8);
        if (rows % 64)
            dst[rows / 64] &= (1ull << (rows % 64)) - 1;
    }
    size_t tail = (size_t)ns * (rp / 64);
    while (tail % 8)
        miss[tail++] = 0;
}

/* ------------------------------------------------------------ process */

static size_t pr__in_bytes(const pr__khost *h, uint32_t rows)
{
    return pr_k_in_words(pr_k_rows_pad(rows), h->spec.n_dense, h->spec.n_sparse) * PR_K_WORD_BYTES;
}
static size_t pr__out_bytes(const pr__khost *h, uint32_t rows)
{
    return pr_k_out_words(pr_k_rows_pad(rows), h->spec.n_dense, h->spec.n_sparse, h->width) *
           PR_K_WORD_BYTES;
}
static size_t pr__hdr_bytes(const pr__khost *h)
{
    return pr_k_out_dense(h->spec.n_sparse) * PR_K_WORD_BYTES;
}

/* After a call on `slot`: read the header, pull the new-index log into the
 * mirror. Returns the kernel status. */
static int pr__take_header(pr__khost *h, int slot, uint32_t rows, uint64_t hdr[4])
{
    int rc = h->xp->from_dev(h, PR_KBUF_OUT0 + slot, 0, pr__hdr_bytes(h));
    if (rc)
        return rc;
    const pr_kw *out = h->buf[PR_KBUF_OUT0 + slot];
    for (int i = 0; i < 4; i++)
        hdr[i] = out[0].l[i];
    uint32_t rp = pr_k_rows_pad(rows);
    for (uint32_t c = 0; c < h->spec.n_sparse; c++) {
        uint64_t n = pr__lane(out, pr_k_out_next() * 8 + c), old = h->n_assigned[c];
        if (n <= old)
            continue;
        if (n > h->mirror_cap[c]) {
            size_t cap = h->mirror_cap[c] ? h->mirror_cap[c] : 1024;
            while (cap < n)
                cap *= 2;
            uint64_t *m = realloc(h->mirror[c], cap * sizeof(*m));
            if (!m)
                return PR_ENOMEM;
            h->mirror[c] = m;
            h->mirror_cap[c] = cap;
        }
        size_t off = ((size_t)c * rp + 0) * sizeof(uint64_t);
        if ((rc = h->xp->from_dev(h, PR_KBUF_NEWV0 + slot, off, (n - old) * sizeof(uint64_t))))
            return rc;
        memcpy(h->mirror[c] + old, (const uint64_t *)h->buf[PR_KBUF_NEWV0 + slot] + (size_t)c * rp,
               (n - old) * sizeof(uint64_t));
        h->n_assigned[c] = n;
    }
    return 0;
}

static void pr__unpack(const pr__khost *h, int slot, uint32_t row0, uint32_t rows, pr_out *o)
{
    uint32_t nd = h->spec.n_dense, ns = h->spec.n_sparse, rp = pr_k_rows_pad(rows);
    const pr_kw *out = h->buf[PR_KBUF_OUT0 + slot];
    for (uint32_t d = 0; d < nd; d++)
        memcpy(o->dense + (size_t)d * o->cap + row0,
               out + pr_k_out_dense(ns) + (size_t)d * (rp / 16), (size_t)rows * sizeof(float));
    const unsigned char *sp = (const unsigned char *)(out + pr_k_out_sparse(rp, nd, ns));
    for (uint32_t c = 0; c < ns; c++)
        memcpy((unsigned char *)o->sparse + ((size_t)c * o->cap + row0) * h->width,
               sp + (size_t)c * rp * h->width, (size_t)rows * h->width);
    const uint16_t *rej = (const uint16_t *)(out + pr_k_out_reject(rp, nd, ns, h->width));
    for (uint32_t r = 0; r < rows; r++) {
        size_t row = (size_t)row0 + r;
        if (rej[r] == PR_K_NO_REJECT) {
            o->reject_reason[row] = PR_REJECT_NONE;
        } else {
            pr_bit_set(o->rejected, row);
            o->reject_reason[row] = PR_REJECT_BAD_HEX;
            o->reject_col[row] = rej[r];
            o->labels[row] = 0; /* a rejected row is all zeros: the kernel leaves its */
            for (uint32_t d = 0; d < nd; d++) /* dense values to the host */
                o->dense[(size_t)d * o->cap + row] = 0.0f;
            o->n_rejected++;
        }
    }
}

static int pr__full_err(const pr__khost *h, const uint64_t hdr[4], uint32_t row0, char *errstr,
                        size_t errstr_size)
{
    uint32_t c = (uint32_t)hdr[1];
    return pr_seterr(errstr, errstr_size, PR_EFULL,
                     "sparse.%s: vocabulary full (capacity %" PRIu64 ") at block row %" PRIu64
                     "; profile dlrm has no out-of-vocabulary index: raise capacity/modulus or use "
                     "profile default",
                     c < h->spec.n_sparse ? h->spec.sparse[c].name : "?",
                     h->cap[c < PR_MAX_SPARSE ? c : 0], (uint64_t)row0 + hdr[2]);
}

/* The call loop for PROCESS and COUNT: pack and send call i+1 while call i
 * runs; unpack call i while call i+1 runs. A call starts only after the
 * previous one finished and reported OK, so a full dlrm vocabulary stops the
 * block exactly at the failing call. */
static int pr__run_block(pr__khost *h, uint32_t mode, const pr_block *in, pr_out *out, char *errstr,
                         size_t errstr_size)
{
    uint32_t rows = in->rows;
    uint32_t n_calls = (rows + PR__CHUNK - 1) / PR__CHUNK;
    int running = -1; /* slot of the call in flight */
    int rc = 0;
    if (n_calls == 0)
        return 0;
    uint32_t n0 = rows < PR__CHUNK ? rows : PR__CHUNK;
    pr__kpack_block(h, in, 0, n0, h->buf[PR_KBUF_IN0]);
    if ((rc = h->xp->to_dev(h, PR_KBUF_IN0, 0, pr__in_bytes(h, n0))) ||
        (rc = h->xp->start(h, 0, mode, n0, 0, 0, 0)))
        goto fail;
    running = 0;
    for (uint32_t i = 0; i < n_calls; i++) {
        int slot = (int)(i & 1u);
        uint32_t row0 = i * PR__CHUNK, n = rows - row0 < PR__CHUNK ? rows - row0 : PR__CHUNK;
        uint32_t nrow0 = row0 + n, nn = 0;
        if (i + 1 < n_calls) { /* overlaps call i */
            nn = rows - nrow0 < PR__CHUNK ? rows - nrow0 : PR__CHUNK;
            pr__kpack_block(h, in, nrow0, nn, h->buf[PR_KBUF_IN0 + !slot]);
            if ((rc = h->xp->to_dev(h, PR_KBUF_IN0 + !slot, 0, pr__in_bytes(h, nn))))
                goto fail;
        }
        uint64_t hdr[4];
        rc = h->xp->wait(h, slot);
        running = -1;
        if (rc || (rc = pr__take_header(h, slot, n, hdr)))
            goto fail;
        if (hdr[0] == PR_KST_FULL) {
            if (out && !h->xp->from_dev(h, PR_KBUF_OUT0 + slot, 0, pr__out_bytes(h, n)))
                pr__unpack(h, slot, row0, n, out);
            return pr__full_err(h, hdr, row0, errstr, errstr_size);
        }
        if (hdr[0] != PR_KST_OK)
            return pr_seterr(errstr, errstr_size, PR_EIO,
                             "fpga kernel: call failed with status %" PRIu64 " (detail %" PRIu64
                             ")",
                             hdr[0], hdr[1]);
        if (i + 1 < n_calls) {
            if ((rc = h->xp->start(h, !slot, mode, nn, 0, 0, 0)))
                goto fail;
            running = !slot;
        }
        if (out) { /* overlaps call i+1 */
            if ((rc = h->xp->from_dev(h, PR_KBUF_OUT0 + slot, 0, pr__out_bytes(h, n))))
                goto fail;
            pr__unpack(h, slot, row0, n, out);
        }
    }
    return 0;
fail:
    if (running >= 0)
        h->xp->wait(h, running);
    return pr_seterr(errstr, errstr_size, rc, "fpga kernel: %s", pr_strerror(rc));
}

int pr__khost_process(pr__khost *h, const pr_block *in, pr_out *out, pr_engine_stats *st,
                      char *errstr, size_t errstr_size)
{
    if (h->two_pass && !h->count_done)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "engine: count_mode two_pass: call pr_engine_count on every block and "
                         "pr_engine_count_done before processing");
    uint64_t t0 = pr_mono_ns();
    /* Labels never go to the device. */
    if (h->spec.has_label && in->labels)
        memcpy(out->labels, in->labels, (size_t)in->rows * sizeof(int32_t));
    else
        memset(out->labels, 0, (size_t)in->rows * sizeof(int32_t));
    memset(out->rejected, 0, pr_bitmap_words(in->rows) * sizeof(uint64_t));
    int rc = pr__run_block(h, PR_KMODE_PROCESS, in, out, errstr, errstr_size);
    uint64_t dt = pr_mono_ns() - t0;
    /* The kernel is one dataflow: its time is shared out over the operators
     * that ran, in proportion to the values each one saw. */
    uint64_t vals[PR_OP__COUNT] = {0}, total = 0;
    for (unsigned i = 0; i < h->spec.n_dense_ops; i++)
        vals[h->spec.dense_ops[i]] += (uint64_t)in->rows * h->spec.n_dense;
    for (unsigned i = 0; i < h->spec.n_sparse_ops; i++)
        vals[h->spec.sparse_ops[i]] += (uint64_t)in->rows * h->spec.n_sparse;
    for (int op = 0; op < PR_OP__COUNT; op++)
        total += vals[op];
    for (int op = 0; op < PR_OP__COUNT && total; op++) {
        st->op_values[op] += vals[op];
        st->op_ns[op] += (uint64_t)((double)dt * (double)vals[op] / (double)total);
    }
    return rc;
}

int pr__khost_count(pr__khost *h, const pr_block *in)
{
    if (h->count_done)
        return PR_ESTATE;
    if (!h->two_pass)
        return 0; /* nothing counts: min_count is 1 everywhere */
    char err[256];
    return pr__run_block(h, PR_KMODE_COUNT, in, NULL, err, sizeof(err));
}

int pr__khost_count_done(pr__khost *h)
{
    h->count_done = 1;
    return 0;
}

uint64_t pr__khost_vocab_size(const pr__khost *h, uint32_t col)
{
    if (!h->has_vocab || col >= h->spec.n_sparse)
        return 0;
    return (uint64_t)h->first_index + h->n_assigned[col];
}

/* ------------------------------------------------------------ vocabulary */

int pr__khost_vocab_read_from(const pr__khost *h, uint32_t col, int64_t from_index, pr_vocab_cb cb,
                              void *opaque)
{
    if (!h->has_vocab || col >= h->spec.n_sparse)
        return 0;
    uint64_t i = from_index > h->first_index ? (uint64_t)(from_index - h->first_index) : 0;
    for (; i < h->n_assigned[col]; i++) {
        /* Counts live on the device; the journal only needs value and index. */
        pr_vocab_entry e = {h->mirror[col][i], h->first_index + (int64_t)i, 0, 0, 0};
        int rc = cb(&e, opaque);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct pr__pend {
    uint64_t value, count;
} pr__pend;

int pr__khost_vocab_read(const pr__khost *hc, uint32_t col, pr_vocab_cb cb, void *opaque)
{
    pr__khost *h = (pr__khost *)hc; /* reading runs kernel calls on the transport */
    if (!h->has_vocab || col >= h->spec.n_sparse)
        return 0;
    uint64_t n = h->n_assigned[col];
    int counting = h->spec.sparse[col].min_count > 1;
    uint64_t *vals = malloc((n ? n : 1) * sizeof(*vals));
    uint64_t *cnts = malloc((n ? n : 1) * sizeof(*cnts));
    pr__pend *pend = NULL;
    size_t n_pend = 0, pend_cap = 0;
    int rc = vals && cnts ? 0 : PR_ENOMEM;
    for (uint64_t first = 0; !rc && first < h->domain[col]; first += PR_K_XFER_ENTRIES) {
        uint32_t cnt =
            (uint32_t)(h->domain[col] - first < PR_K_XFER_ENTRIES ? h->domain[col] - first
                                                                  : PR_K_XFER_ENTRIES);
        if ((rc = pr__call(h, PR_KMODE_READ, col, (uint32_t)first, cnt)) ||
            (rc = h->xp->from_dev(h, PR_KBUF_XFER, 0, (size_t)cnt * sizeof(uint64_t))))
            break;
        const uint64_t *x = h->buf[PR_KBUF_XFER];
        for (uint32_t i = 0; i < cnt; i++) {
            if (!x[i])
                continue;
            int64_t idx = pr_k_entry_index(x[i]);
            if (idx >= 0) {
                uint64_t k = (uint64_t)(idx - h->first_index);
                if (idx < h->first_index || k >= n) {
                    rc = PR_EIO; /* the device disagrees with its own counter */
                    break;
                }
                vals[k] = first + i;
                cnts[k] = counting ? pr_k_entry_count(x[i]) : 0;
            } else if (counting) {
                if (n_pend == pend_cap) {
                    pend_cap = pend_cap ? 2 * pend_cap : 1024;
                    pr__pend *p = realloc(pend, pend_cap * sizeof(*p));
                    if (!p) {
                        rc = PR_ENOMEM;
                        break;
                    }
                    pend = p;
                }
                pend[n_pend].value = first + i;
                pend[n_pend++].count = pr_k_entry_count(x[i]);
            }
        }
    }
    for (uint64_t k = 0; !rc && k < n; k++) {
        pr_vocab_entry e = {vals[k], h->first_index + (int64_t)k, cnts[k], 0, 0};
        rc = cb(&e, opaque);
    }
    for (size_t k = 0; !rc && k < n_pend; k++) {
        pr_vocab_entry e = {pend[k].value, -1, pend[k].count, 0, 0};
        rc = cb(&e, opaque);
    }
    free(vals);
    free(cnts);
    free(pend);
    return rc;
}

int pr__khost_vocab_load(pr__khost *h, uint32_t col, const pr_vocab_entry *e, size_t n)
{
    if (!h->has_vocab || col >= h->spec.n_sparse)
        return PR_EINVAL;
    int counting = h->spec.sparse[col].min_count > 1;
    uint64_t dom = h->domain[col];
    /* The cpu backend's rules: assigned entries contiguous from the first
     * index, each value once, every value inside the domain; pending entries
     * only matter when the column counts. */
    uint64_t *seen = calloc((dom + 63) / 64, sizeof(uint64_t));
    if (!seen)
        return PR_ENOMEM;
    uint64_t n_assigned = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        uint64_t v = e[i].value;
        if (v >= dom)
            rc = PR_EINVAL;
        else if (e[i].index >= 0) {
            if (e[i].index != h->first_index + (int64_t)n_assigned ||
                (uint64_t)e[i].index >= h->cap[col] || pr_bit_test(seen, v))
                rc = PR_EINVAL;
            n_assigned++;
            pr_bit_set(seen, v);
        } else if (counting) {
            if (pr_bit_test(seen, v))
                rc = PR_EINVAL;
            pr_bit_set(seen, v);
        }
    }
    free(seen);
    if (rc)
        return rc;
    uint64_t *m = NULL;
    if (n_assigned && !(m = malloc(n_assigned * sizeof(*m))))
        return PR_ENOMEM;
    rc = pr__call(h, PR_KMODE_CLEAR, col, (uint32_t)n_assigned, 0);
    size_t i = 0;
    while (!rc && i < n) {
        uint64_t *x = h->buf[PR_KBUF_XFER];
        uint32_t cnt = 0;
        for (; i < n && cnt < PR_K_XFER_ENTRIES; i++) {
            const pr_vocab_entry *v = &e[i];
            if (v->index < 0 && !counting)
                continue;
            x[2 * cnt] = v->value;
            x[2 * cnt + 1] = pr_k_entry(v->index, counting ? v->count : 0);
            cnt++;
            if (v->index >= 0)
                m[v->index - h->first_index] = v->value;
        }
        if (cnt && !(rc = h->xp->to_dev(h, PR_KBUF_XFER, 0, (size_t)cnt * 2 * sizeof(uint64_t))))
            rc = pr__call(h, PR_KMODE_LOAD, col, 0, cnt);
    }
    if (rc) {
        free(m);
        return rc;
    }
    free(h->mirror[col]);
    h->mirror[col] = m;
    h->mirror_cap[col] = n_assigned;
    h->n_assigned[col] = n_assigned;
    return 0;
}

/* ---------------------------------------------------------------- backend ops */

/* pr_backend starts with its pr__khost (see PR__KHOST_OPS). */
#define PR__H(be)  ((pr__khost *)(be))
#define PR__CH(be) ((const pr__khost *)(be))

int pr__khost_op_process(pr_backend *be, const pr_block *in, pr_out *out, pr_engine_stats *st,
                         char *errstr, size_t errstr_size)
{
    return pr__khost_process(PR__H(be), in, out, st, errstr, errstr_size);
}

int pr__khost_op_count(pr_backend *be, const pr_block *in)
{
    return pr__khost_count(PR__H(be), in);
}

/* Two-pass: the counts are already in the tables; the process pass assigns
 * indices at first sight. Nothing to do on the device. */
int pr__khost_op_count_done(pr_backend *be)
{
    return pr__khost_count_done(PR__H(be));
}

uint64_t pr__khost_op_vocab_size(const pr_backend *be, uint32_t col)
{
    return pr__khost_vocab_size(PR__CH(be), col);
}

int pr__khost_op_vocab_read(const pr_backend *be, uint32_t col, pr_vocab_cb cb, void *opaque)
{
    return pr__khost_vocab_read(PR__CH(be), col, cb, opaque);
}

int pr__khost_op_vocab_read_from(const pr_backend *be, uint32_t col, int64_t from_index,
                                 pr_vocab_cb cb, void *opaque)
{
    return pr__khost_vocab_read_from(PR__CH(be), col, from_index, cb, opaque);
}

int pr__khost_op_vocab_load(pr_backend *be, uint32_t col, const pr_vocab_entry *e, size_t n)
{
    return pr__khost_vocab_load(PR__H(be), col, e, n);
}
