/*
 * pr_kernel.c — the preprocessing dataflow as a Vitis HLS kernel (Piper's
 * MiniPipe operators), written in the common subset of C and C++.
 *
 * Two builds of the same source:
 *   - C simulation: gcc compiles this file into libpr_engine; the hls-sim
 *     backend calls pr_kernel() block by block exactly as the host calls the
 *     card. The HLS pragmas are ignored and streams are small FIFO structs.
 *     Stages of a dataflow region run one after the other, so a C-sim FIFO
 *     holds one tile (PR_K_TILE_ROWS rows of one column).
 *   - Synthesis: v++ -c compiles pr_kernel_top.cpp (which includes this
 *     file) with __SYNTHESIS__ defined: streams become hls::stream, on-chip
 *     state becomes static URAM/BRAM arrays that persist across calls.
 *
 * Shape of a PROCESS call (see README.md for the initiation intervals):
 *   1. validate: every hex sparse column through read -> hex2int -> check,
 *      recording the first failing column per row (on-chip reject array).
 *      No vocabulary is touched, so a rejected row never changes state.
 *   2. dense, per column and tile: read -> neg2zero -> log1p -> write
 *   3. sparse, per column and tile: read -> hex2int -> modulus -> vocab -> write
 * All stages move 64-byte words (8 values of 8 bytes, or 4 hex slots of 16
 * bytes) with II=1 per word, except the vocab stage, which is a read-modify-
 * write of one table entry per value: II=2 on-chip, ~6 in HBM (as in Piper).
 *
 * Semantics are those of the cpu backend, bit for bit: Logarithm is
 * (float)log1p((double)x); on hardware hls::log1p(double) is correctly
 * rounded to within 1 ulp of double, which can (rarely) change the float32
 * result by 1 ulp — see README.md.
 */
#ifndef __SYNTHESIS__
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#include <assert.h>
#include <math.h>
#include <string.h>
#else
#include <hls_math.h>
#include <hls_stream.h>
#endif

#include "pr_kernel.h"

#define PR_K_GROUPS (PR_K_TILE_ROWS / 8) /* 8-value groups per tile */

/* A stream element: one word plus a 32-bit side channel (like AXI4-Stream
 * TUSER): flags of the 8 lanes of a value group. */
typedef struct pr_kvf {
    pr_kw w;
    uint32_t f;
} pr_kvf;

#define PR_KF_MISSING(f) ((f)&0xffu)          /* lane value missing (empty field) */
#define PR_KF_SKIP(f) (((f) >> 8) & 0xffu)    /* lane rejected or padding: no state change */
#define PR_KF_BAD(f) (((f) >> 16) & 0xffu)    /* lane is not valid hex */
#define PR_KF_FULL 0x80000000u                /* vocab stage stopped: dlrm table full */

/* ------------------------------------------------------------ streams */

#ifdef __SYNTHESIS__
typedef hls::stream<pr_kvf> pr_ks;
#define PR_KS_PARAM(n) hls::stream<pr_kvf> &n
#define PR_KS_ARG(n) n
#define PR_KS_WRITE(s, v) (s).write(v)
#define PR_KS_READ(s) (s).read()
#else
/* Plain-C stand-in: a FIFO deep enough for one tile (2 hex words a group). */
#define PR_K_SIM_FIFO (2 * PR_K_GROUPS)
typedef struct pr_ks {
    pr_kvf d[PR_K_SIM_FIFO];
    uint32_t rd, wr;
} pr_ks;
#define PR_KS_PARAM(n) pr_ks *n
#define PR_KS_ARG(n) (&n)
#define PR_KS_WRITE(s, v) pr__ks_write(s, v)
#define PR_KS_READ(s) pr__ks_read(s)

static inline void pr__ks_write(pr_ks *s, pr_kvf v)
{
    assert(s->wr - s->rd < PR_K_SIM_FIFO);
    s->d[s->wr++ % PR_K_SIM_FIFO] = v;
}
static inline pr_kvf pr__ks_read(pr_ks *s)
{
    assert(s->rd != s->wr);
    return s->d[s->rd++ % PR_K_SIM_FIFO];
}
#endif

/* ------------------------------------------------------------ small helpers */

static inline uint64_t pr__lane_get(const pr_kw *buf, uint64_t i) { return buf[i / 8].l[i % 8]; }

static inline double pr__bits_f64(uint64_t b)
{
    union { uint64_t u; double d; } x;
    x.u = b;
    return x.d;
}
static inline uint32_t pr__f32_bits(float f)
{
    union { float f; uint32_t u; } x;
    x.f = f;
    return x.u;
}

static inline float pr__log1p_f32(double x)
{
#ifdef __SYNTHESIS__
    return (float)hls::log1p(x);
#else
    return (float)log1p(x);
#endif
}

/* One hex digit: its value, or 16 when the byte is not a hex digit. */
static inline uint32_t pr__nibble(uint32_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return 16;
}

/* Parse slot k (bytes 16k..16k+15, most significant digit first) of a word. */
static inline uint64_t pr__hex_slot(const pr_kw *w, uint32_t k, uint32_t *bad)
{
    uint64_t v = 0;
    uint32_t b = 0;
    for (uint32_t j = 0; j < 16; j++) {
#pragma HLS UNROLL
        uint32_t byte = 16 * k + j;
        uint32_t c = (uint32_t)(w->l[byte / 8] >> (8 * (byte % 8))) & 0xffu;
        uint32_t n = pr__nibble(c);
        b |= n >> 4;
        v = (v << 4) | (n & 15u);
    }
    *bad = b;
    return v;
}

/* ------------------------------------------------------------ config */

typedef struct pr__kcfg {
    uint32_t n_dense, n_sparse, dense_ops, sparse_ops, profile, count_mode, width;
    uint64_t mod[PR_K_MAX_SPARSE];
    uint64_t min_count[PR_K_MAX_SPARSE];
    uint64_t cap[PR_K_MAX_SPARSE];
    uint64_t mem[PR_K_MAX_SPARSE];
    uint64_t base[PR_K_MAX_SPARSE];
    uint64_t domain[PR_K_MAX_SPARSE];
} pr__kcfg;

static int pr__read_cfg(const pr_kw *cfg, pr__kcfg *k)
{
    pr_kw w0 = cfg[0];
    if (w0.l[PR_KCFG_MAGIC] != PR_K_CFG_MAGIC)
        return -1;
    k->n_dense = (uint32_t)(w0.l[PR_KCFG_SHAPE] & 0xffffu);
    k->n_sparse = (uint32_t)(w0.l[PR_KCFG_SHAPE] >> 16 & 0xffffu);
    k->dense_ops = (uint32_t)w0.l[PR_KCFG_DENSE_OPS];
    k->sparse_ops = (uint32_t)w0.l[PR_KCFG_SPARSE_OPS];
    k->profile = (uint32_t)w0.l[PR_KCFG_PROFILE];
    k->count_mode = (uint32_t)w0.l[PR_KCFG_COUNT_MODE];
    k->width = (uint32_t)w0.l[PR_KCFG_WIDTH];
    if (k->n_dense > PR_K_MAX_DENSE || k->n_sparse > PR_K_MAX_SPARSE ||
        (k->width != 4 && k->width != 8))
        return -1;
    for (uint32_t c = 0; c < k->n_sparse; c++) {
#pragma HLS PIPELINE II=1
        pr_kw w = cfg[1 + c];
        k->mod[c] = w.l[PR_KCOL_MODULUS];
        k->min_count[c] = w.l[PR_KCOL_MIN_COUNT];
        k->cap[c] = w.l[PR_KCOL_CAPACITY];
        k->mem[c] = w.l[PR_KCOL_MEM];
        k->base[c] = w.l[PR_KCOL_BASE];
        k->domain[c] = w.l[PR_KCOL_DOMAIN];
    }
    return 0;
}

/* ------------------------------------------------------------ sparse stages */

/* Read stage: 1 (u64 column) or 2 (hex column) words per 8-value group, with
 * the lanes' missing/skip flags. Skip = padding row or a row the validate
 * pass rejected (`reject` is NULL during the validate pass itself). */
static void pr__rd_sparse(const pr_kw *in, uint64_t data_off, uint64_t miss_idx, uint32_t is_hex,
                          uint32_t t0, uint32_t tr, uint32_t rows, const uint16_t *reject,
                          PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < tr / 8; g++) {
#pragma HLS PIPELINE II=1
        uint32_t r0 = t0 + 8 * g;
        uint32_t miss = (uint32_t)(pr__lane_get(in, miss_idx + r0 / 64) >> (r0 % 64)) & 0xffu;
        uint32_t skip = 0;
        for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
            if (r0 + k >= rows || (reject && reject[r0 + k] != PR_K_NO_REJECT))
                skip |= 1u << k;
        }
        pr_kvf x;
        x.f = miss | skip << 8;
        if (is_hex) {
            x.w = in[data_off + r0 / 4];
            PR_KS_WRITE(s_out, x);
            x.w = in[data_off + r0 / 4 + 1];
            PR_KS_WRITE(s_out, x);
        } else {
            x.w = in[data_off + r0 / 8];
            PR_KS_WRITE(s_out, x);
        }
    }
}

/* Hex2Int: 8 slots (two words) -> 8 u64 per group; non-hex lanes flagged
 * bad. Missing and skipped lanes become 0 (dlrm's key 0 for missing). */
static void pr__hex2int(uint32_t is_hex, uint32_t groups, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=2
        pr_kvf a = PR_KS_READ(s_in);
        pr_kvf y;
        uint32_t bad = 0;
        if (is_hex) {
            pr_kvf b = PR_KS_READ(s_in);
            for (uint32_t k = 0; k < 4; k++) {
#pragma HLS UNROLL
                uint32_t ba, bb;
                y.w.l[k] = pr__hex_slot(&a.w, k, &ba);
                y.w.l[4 + k] = pr__hex_slot(&b.w, k, &bb);
                bad |= ba << k | bb << (4 + k);
            }
        } else {
            y.w = a.w;
        }
        uint32_t zero = PR_KF_MISSING(a.f) | PR_KF_SKIP(a.f);
        for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
            if (zero >> k & 1u)
                y.w.l[k] = 0;
        }
        y.f = a.f | (bad & ~zero & 0xffu) << 16;
        PR_KS_WRITE(s_out, y);
    }
}

/* Validate pass sink: record the first failing column of every row. */
static void pr__check(uint32_t col, uint32_t t0, uint32_t groups, uint16_t *reject, PR_KS_PARAM(s_in))
{
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        uint32_t bad = PR_KF_BAD(x.f);
        for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
            uint32_t r = t0 + 8 * g + k;
            if ((bad >> k & 1u) && reject[r] == PR_K_NO_REJECT)
                reject[r] = (uint16_t)col;
        }
    }
}

/* Modulus: v mod M per lane, M > 0. */
static void pr__modulus(uint32_t on, uint64_t m, uint32_t groups, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        if (on) {
            for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                x.w.l[k] = x.w.l[k] % m;
            }
        }
        PR_KS_WRITE(s_out, x);
    }
}

/* Per-column vocabulary parameters and running state of the vocab stage.
 * `next` counts the indices handed out (device state, so a zeroed device is
 * an empty vocabulary under either profile); index = first_index + next. */
typedef struct pr__kvoc {
    uint32_t has_vocab, is_default, counting_pass, two_pass;
    uint64_t min_count, cap, base, first_index, next0, next, newv_off;
    uint32_t stopped, full_row;
} pr__kvoc;

/* VocabGen+VocabMap for one value: lookup-or-insert on entry *e. Returns the
 * index; sets *dirty when *e changed. Counts are kept only for columns with
 * min_count > 1. Streaming: every sighting counts and the value is OOV until
 * its count reaches min_count, then takes the next index. Two-pass: the COUNT
 * calls filled the counts; PROCESS assigns at first sight when the total
 * reached min_count. A full table gives OOV under default and stops the
 * column under dlrm (s->stopped; the host reports PR_EFULL). */
static inline int64_t pr__vocab_one(pr__kvoc *s, uint64_t *e, uint64_t v, uint64_t *newv,
                                    uint32_t row, uint32_t *dirty)
{
    uint64_t ent = *e;
    int64_t idx = pr_k_entry_index(ent);
    uint64_t cnt = pr_k_entry_count(ent);
    uint32_t counting = s->min_count > 1;
    int64_t oov = s->is_default ? 1 : 0;
    *dirty = 0;
    if (s->counting_pass) {
        if (counting) {
            *e = pr_k_entry(idx, cnt + 1);
            *dirty = 1;
        }
        return 0;
    }
    if (counting && !s->two_pass) {
        cnt = cnt + 1; /* saturates at 2^32-1 in pr_k_entry, as the cpu backend's u32 */
        *e = pr_k_entry(idx, cnt);
        *dirty = 1;
    }
    if (idx >= 0)
        return idx;
    if (counting && cnt < s->min_count)
        return oov;
    if (s->first_index + s->next >= s->cap) {
        if (!s->is_default) {
            s->stopped = 1;
            s->full_row = row;
        }
        return oov;
    }
    idx = (int64_t)(s->first_index + s->next);
    newv[s->newv_off + (s->next - s->next0)] = v;
    s->next++;
    *e = pr_k_entry(idx, cnt);
    *dirty = 1;
    return idx;
}

/* The lane loop shared by both memory kinds. MEM is an array expression. */
#define PR__VOCAB_BODY(MEM)                                                                   \
    for (uint32_t g = 0; g < groups; g++) {                                                   \
        pr_kvf x = PR_KS_READ(s_in);                                                          \
        pr_kvf y;                                                                             \
        y.f = x.f;                                                                            \
        for (uint32_t k = 0; k < 8; k++) {                                                    \
            uint64_t v = x.w.l[k];                                                            \
            int64_t idx = 0;                                                                  \
            if (s->stopped || (PR_KF_SKIP(x.f) >> k & 1u)) {                                  \
                idx = 0;                                                                      \
            } else if ((PR_KF_MISSING(x.f) >> k & 1u) && s->is_default) {                     \
                idx = 0; /* PR_INDEX_MISSING */                                               \
            } else if (!s->has_vocab) {                                                       \
                idx = (int64_t)v;                                                             \
            } else {                                                                          \
                uint64_t ent = MEM[s->base + v];                                              \
                uint32_t dirty;                                                               \
                idx = pr__vocab_one(s, &ent, v, newv, t0 + 8 * g + k, &dirty);                \
                if (dirty)                                                                    \
                    MEM[s->base + v] = ent;                                                   \
                if (s->stopped)                                                               \
                    y.f |= PR_KF_FULL;                                                        \
            }                                                                                 \
            y.w.l[k] = (uint64_t)idx;                                                         \
        }                                                                                     \
        PR_KS_WRITE(s_out, y);                                                                \
    }

/* On-chip table: a URAM read-modify-write per value; the read-after-write
 * distance makes II=2 (Piper's VocabGen on-chip figure). */
static void pr__vocab_onchip(pr__kvoc *s, uint64_t *onchip, uint64_t *newv, uint32_t t0,
                             uint32_t groups, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
#pragma HLS PIPELINE II=2 style=flp
    PR__VOCAB_BODY(onchip)
}

/* HBM table: one AXI read and one write per value; with the HBM latency
 * partly hidden by outstanding requests, II ~6 (Piper's off-chip figure). */
static void pr__vocab_hbm(pr__kvoc *s, uint64_t *tab, uint64_t *newv, uint32_t t0, uint32_t groups,
                          PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
#pragma HLS PIPELINE II=6 style=flp
    PR__VOCAB_BODY(tab)
}

/* Write stage: indices packed 16 (int32) or 8 (int64) per word. */
static void pr__wr_sparse(pr_kw *out, uint64_t off, uint32_t width, uint32_t t0, uint32_t groups,
                          uint32_t *full, PR_KS_PARAM(s_in))
{
    pr_kw acc;
    uint32_t f = 0;
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        f |= x.f & PR_KF_FULL;
        if (width == 8) {
            out[off + t0 / 8 + g] = x.w;
        } else {
            uint32_t half = g & 1u;
            for (uint32_t k = 0; k < 4; k++) {
#pragma HLS UNROLL
                acc.l[4 * half + k] = (x.w.l[2 * k] & 0xffffffffull) | (x.w.l[2 * k + 1] << 32);
            }
            if (half)
                out[off + t0 / 16 + g / 2] = acc;
        }
    }
    *full = f != 0;
}

/* One tile of one sparse column, PROCESS or COUNT. */
static void pr__sparse_tile(const pr_kw *in, pr_kw *out, uint64_t *onchip, uint64_t *tab,
                            uint64_t *newv, const uint16_t *reject, pr__kvoc *s, uint64_t data_off,
                            uint64_t miss_idx, uint64_t out_off, uint32_t is_hex, uint32_t mod_on,
                            uint64_t m, uint32_t is_hbm, uint32_t width, uint32_t t0, uint32_t tr,
                            uint32_t rows, uint32_t *full)
{
#pragma HLS DATAFLOW
    pr_ks s_raw, s_val, s_mod, s_idx;
#pragma HLS STREAM variable=s_raw depth=32
#pragma HLS STREAM variable=s_val depth=32
#pragma HLS STREAM variable=s_mod depth=32
#pragma HLS STREAM variable=s_idx depth=32
#ifndef __SYNTHESIS__
    s_raw.rd = s_raw.wr = s_val.rd = s_val.wr = 0;
    s_mod.rd = s_mod.wr = s_idx.rd = s_idx.wr = 0;
#endif
    uint32_t groups = tr / 8;
    pr__rd_sparse(in, data_off, miss_idx, is_hex, t0, tr, rows, reject, PR_KS_ARG(s_raw));
    pr__hex2int(is_hex, groups, PR_KS_ARG(s_raw), PR_KS_ARG(s_val));
    pr__modulus(mod_on, m, groups, PR_KS_ARG(s_val), PR_KS_ARG(s_mod));
    if (is_hbm)
        pr__vocab_hbm(s, tab, newv, t0, groups, PR_KS_ARG(s_mod), PR_KS_ARG(s_idx));
    else
        pr__vocab_onchip(s, onchip, newv, t0, groups, PR_KS_ARG(s_mod), PR_KS_ARG(s_idx));
    pr__wr_sparse(out, out_off, width, t0, groups, full, PR_KS_ARG(s_idx));
}

/* One tile of the validate pass. */
static void pr__validate_tile(const pr_kw *in, uint16_t *reject, uint32_t col, uint64_t data_off,
                              uint64_t miss_idx, uint32_t t0, uint32_t tr, uint32_t rows)
{
#pragma HLS DATAFLOW
    pr_ks s_raw, s_val;
#pragma HLS STREAM variable=s_raw depth=32
#pragma HLS STREAM variable=s_val depth=32
#ifndef __SYNTHESIS__
    s_raw.rd = s_raw.wr = s_val.rd = s_val.wr = 0;
#endif
    pr__rd_sparse(in, data_off, miss_idx, 1, t0, tr, rows, 0, PR_KS_ARG(s_raw));
    pr__hex2int(1, tr / 8, PR_KS_ARG(s_raw), PR_KS_ARG(s_val));
    pr__check(col, t0, tr / 8, reject, PR_KS_ARG(s_val));
}

/* ------------------------------------------------------------ dense stages */

static void pr__rd_dense(const pr_kw *in, uint64_t off, const uint16_t *reject, uint32_t t0,
                         uint32_t tr, uint32_t rows, PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < tr / 8; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x;
        x.w = in[off + t0 / 8 + g];
        x.f = 0;
        for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
            uint32_t r = t0 + 8 * g + k;
            if (r >= rows || reject[r] != PR_K_NO_REJECT)
                x.w.l[k] = 0; /* +0.0: rejected rows come out as 0 */
        }
        PR_KS_WRITE(s_out, x);
    }
}

static void pr__neg2zero(uint32_t on, uint32_t groups, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        if (on) {
            for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                if (pr__bits_f64(x.w.l[k]) < 0.0)
                    x.w.l[k] = 0;
            }
        }
        PR_KS_WRITE(s_out, x);
    }
}

/* Logarithm (or the plain narrowing when the op is absent): double in,
 * float32 bits out in the low half of each lane. */
static void pr__log1p(uint32_t on, uint32_t groups, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
            double d = pr__bits_f64(x.w.l[k]);
            /* log1p(-0.0) is -0.0, but the cpu backend's exact-integer table
             * gives +0.0 for both zeros: so does the kernel (a zero test in
             * front of the log unit). */
            float f = on ? (d == 0.0 ? 0.0f : pr__log1p_f32(d)) : (float)d;
            x.w.l[k] = pr__f32_bits(f);
        }
        PR_KS_WRITE(s_out, x);
    }
}

static void pr__wr_dense(pr_kw *out, uint64_t off, uint32_t t0, uint32_t groups, PR_KS_PARAM(s_in))
{
    pr_kw acc;
    for (uint32_t g = 0; g < groups; g++) {
#pragma HLS PIPELINE II=1
        pr_kvf x = PR_KS_READ(s_in);
        uint32_t half = g & 1u;
        for (uint32_t k = 0; k < 4; k++) {
#pragma HLS UNROLL
            acc.l[4 * half + k] = (x.w.l[2 * k] & 0xffffffffull) | (x.w.l[2 * k + 1] << 32);
        }
        if (half)
            out[off + t0 / 16 + g / 2] = acc;
    }
}

static void pr__dense_tile(const pr_kw *in, pr_kw *out, const uint16_t *reject, uint64_t in_off,
                           uint64_t out_off, uint32_t ops, uint32_t t0, uint32_t tr, uint32_t rows)
{
#pragma HLS DATAFLOW
    pr_ks s_raw, s_pos, s_log;
#pragma HLS STREAM variable=s_raw depth=32
#pragma HLS STREAM variable=s_pos depth=32
#pragma HLS STREAM variable=s_log depth=32
#ifndef __SYNTHESIS__
    s_raw.rd = s_raw.wr = s_pos.rd = s_pos.wr = s_log.rd = s_log.wr = 0;
#endif
    uint32_t groups = tr / 8;
    pr__rd_dense(in, in_off, reject, t0, tr, rows, PR_KS_ARG(s_raw));
    pr__neg2zero(ops & PR_KOP_NEG2ZERO, groups, PR_KS_ARG(s_raw), PR_KS_ARG(s_pos));
    pr__log1p((ops & PR_KOP_LOG1P) != 0, groups, PR_KS_ARG(s_pos), PR_KS_ARG(s_log));
    pr__wr_dense(out, out_off, t0, groups, PR_KS_ARG(s_log));
}

/* ------------------------------------------------------------ state modes */

static void pr__mode_read(const pr__kcfg *k, uint64_t *onchip, const uint64_t *tab, pr_kw *xfer,
                          uint32_t col, uint32_t first, uint32_t count)
{
    uint32_t hbm = k->mem[col] == PR_KMEM_HBM;
    uint64_t base = k->base[col] + first;
    pr_kw acc;
    for (uint32_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=1
        acc.l[i % 8] = hbm ? tab[base + i] : onchip[base + i];
        if (i % 8 == 7 || i + 1 == count)
            xfer[i / 8] = acc;
    }
}

static void pr__mode_load(const pr__kcfg *k, uint64_t *onchip, uint64_t *tab, const pr_kw *xfer,
                          uint32_t col, uint32_t count)
{
    uint32_t hbm = k->mem[col] == PR_KMEM_HBM;
    for (uint32_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II=2
        pr_kw w = xfer[i / 4];
        uint64_t v = w.l[2 * (i % 4)], e = w.l[2 * (i % 4) + 1];
        if (v >= k->domain[col])
            continue; /* the host checks; never write outside the column */
        if (hbm)
            tab[k->base[col] + v] = e;
        else
            onchip[k->base[col] + v] = e;
    }
}

static void pr__mode_clear(const pr__kcfg *k, uint64_t *onchip, uint64_t *tab, uint32_t col)
{
    uint32_t hbm = k->mem[col] == PR_KMEM_HBM;
    for (uint64_t i = 0; i < k->domain[col]; i++) {
#pragma HLS PIPELINE II=1
        if (hbm)
            tab[k->base[col] + i] = 0;
        else
            onchip[k->base[col] + i] = 0;
    }
}

/* ------------------------------------------------------------ top */

static void pr__write_header(pr_kw *out, uint32_t n_sparse, const uint64_t *next, uint64_t st,
                             uint64_t d1, uint64_t d2, uint64_t n_rej)
{
    pr_kw h;
    for (uint32_t k = 0; k < 8; k++)
        h.l[k] = 0;
    h.l[0] = st;
    h.l[1] = d1;
    h.l[2] = d2;
    h.l[3] = n_rej;
    out[0] = h;
    for (uint32_t c = 0; c < n_sparse; c += 8) {
        pr_kw w;
        for (uint32_t k = 0; k < 8; k++)
            w.l[k] = c + k < n_sparse ? next[c + k] : 0;
        out[pr_k_out_next() + c / 8] = w;
    }
}

#ifdef __cplusplus
extern "C" {
#endif

void pr_kernel(const pr_kw *in, pr_kw *out, const pr_kw *cfg, uint64_t *tab, uint64_t *newv,
               pr_kw *xfer, uint32_t mode, uint32_t rows, uint32_t col, uint32_t first,
               uint32_t count PR_KSIM_PARAM)
{
#pragma HLS INTERFACE m_axi port=in offset=slave bundle=gmem_in max_read_burst_length=64
#pragma HLS INTERFACE m_axi port=out offset=slave bundle=gmem_out max_write_burst_length=64
#pragma HLS INTERFACE m_axi port=cfg offset=slave bundle=gmem_cfg
#pragma HLS INTERFACE m_axi port=tab offset=slave bundle=gmem_tab num_read_outstanding=16 num_write_outstanding=16
#pragma HLS INTERFACE m_axi port=newv offset=slave bundle=gmem_new
#pragma HLS INTERFACE m_axi port=xfer offset=slave bundle=gmem_xfer
#pragma HLS INTERFACE s_axilite port=mode
#pragma HLS INTERFACE s_axilite port=rows
#pragma HLS INTERFACE s_axilite port=col
#pragma HLS INTERFACE s_axilite port=first
#pragma HLS INTERFACE s_axilite port=count
#pragma HLS INTERFACE s_axilite port=return
#ifdef __SYNTHESIS__
    /* Device-resident state: persists across invocations. */
    static uint64_t onchip[PR_K_ONCHIP_ENTRIES];
#pragma HLS BIND_STORAGE variable=onchip type=ram_2p impl=uram
    static uint64_t next[PR_K_MAX_SPARSE];
    static uint16_t reject[PR_K_MAX_ROWS];
#pragma HLS BIND_STORAGE variable=reject type=ram_2p impl=bram
#else
    uint64_t *onchip = ksim->onchip;
    uint64_t *next = ksim->next;
    uint16_t *reject = ksim->reject;
#endif
    pr__kcfg k; /* read from cfg on every call: ~1 word per sparse column */
    if (pr__read_cfg(cfg, &k) != 0) {
        pr_kw h;
        for (uint32_t i = 0; i < 8; i++)
            h.l[i] = 0;
        h.l[0] = PR_KST_BADARG;
        out[0] = h;
        return;
    }

    if (mode == PR_KMODE_READ || mode == PR_KMODE_LOAD || mode == PR_KMODE_CLEAR) {
        if (col >= k.n_sparse || k.mem[col] == PR_KMEM_NONE || count > PR_K_XFER_ENTRIES ||
            (mode == PR_KMODE_READ && (uint64_t)first + count > k.domain[col])) {
            pr__write_header(out, k.n_sparse, next, PR_KST_BADARG, 1, 0, 0);
            return;
        }
        if (mode == PR_KMODE_READ)
            pr__mode_read(&k, onchip, tab, xfer, col, first, count);
        else if (mode == PR_KMODE_LOAD)
            pr__mode_load(&k, onchip, tab, xfer, col, count);
        else {
            pr__mode_clear(&k, onchip, tab, col);
            next[col] = first;
        }
        pr__write_header(out, k.n_sparse, next, PR_KST_OK, 0, 0, 0);
        return;
    }
    if ((mode != PR_KMODE_PROCESS && mode != PR_KMODE_COUNT) || rows > PR_K_MAX_ROWS) {
        pr__write_header(out, k.n_sparse, next, PR_KST_BADARG, 2, 0, 0);
        return;
    }

    uint32_t rp = pr_k_rows_pad(rows);
    uint64_t enc[4];
    for (uint32_t i = 0; i < 4; i++)
        enc[i] = in[1].l[i];
    uint64_t sp_off = pr_k_in_sparse(rp, k.n_dense);
    uint64_t miss_off = pr_k_in_missing(rp, k.n_dense, k.n_sparse);

    /* 1. validate */
    for (uint32_t r = 0; r < rp; r++) {
#pragma HLS PIPELINE II=1
        reject[r] = PR_K_NO_REJECT;
    }
    if (k.sparse_ops & PR_KOP_HEX2INT) {
        for (uint32_t c = 0; c < k.n_sparse; c++) {
            if (enc[c / 64] >> (c % 64) & 1u)
                continue; /* u64 column: nothing to validate */
            for (uint32_t t0 = 0; t0 < rp; t0 += PR_K_TILE_ROWS) {
                uint32_t tr = rp - t0 < PR_K_TILE_ROWS ? rp - t0 : PR_K_TILE_ROWS;
                pr__validate_tile(in, reject, c, sp_off + (uint64_t)c * (rp / 4),
                                  miss_off * 8 + (uint64_t)c * (rp / 64), t0, tr, rows);
            }
        }
    }
    uint64_t n_rej = 0;
    for (uint32_t r = 0; r < rows; r++)
        n_rej += reject[r] != PR_K_NO_REJECT;

    /* 2. dense */
    if (mode == PR_KMODE_PROCESS) {
        for (uint32_t d = 0; d < k.n_dense; d++) {
            for (uint32_t t0 = 0; t0 < rp; t0 += PR_K_TILE_ROWS) {
                uint32_t tr = rp - t0 < PR_K_TILE_ROWS ? rp - t0 : PR_K_TILE_ROWS;
                pr__dense_tile(in, out, reject, pr_k_in_dense() + (uint64_t)d * (rp / 8),
                               pr_k_out_dense(k.n_sparse) + (uint64_t)d * (rp / 16), k.dense_ops,
                               t0, tr, rows);
            }
        }
    }

    /* 3. sparse */
    uint64_t st = PR_KST_OK, fail_col = 0, fail_row = 0;
    uint64_t out_sp = pr_k_out_sparse(rp, k.n_dense, k.n_sparse);
    for (uint32_t c = 0; c < k.n_sparse; c++) {
        pr__kvoc s;
        s.has_vocab = (k.sparse_ops & PR_KOP_VOCAB) != 0;
        s.is_default = k.profile == 1;
        s.counting_pass = mode == PR_KMODE_COUNT;
        s.two_pass = k.count_mode == 1;
        s.min_count = k.min_count[c];
        s.cap = k.cap[c];
        s.base = k.base[c];
        s.first_index = s.is_default ? 2 : 0;
        s.next0 = next[c];
        s.next = next[c];
        s.newv_off = (uint64_t)c * rp;
        s.stopped = 0;
        s.full_row = 0;
        uint32_t is_hex = !(enc[c / 64] >> (c % 64) & 1u);
        for (uint32_t t0 = 0; t0 < rp; t0 += PR_K_TILE_ROWS) {
            uint32_t tr = rp - t0 < PR_K_TILE_ROWS ? rp - t0 : PR_K_TILE_ROWS;
            uint32_t full = 0;
            pr__sparse_tile(in, out, onchip, tab, newv, reject, &s, sp_off + (uint64_t)c * (rp / 4),
                            miss_off * 8 + (uint64_t)c * (rp / 64),
                            out_sp + (uint64_t)c * (rp * k.width / 64), is_hex,
                            (k.sparse_ops & PR_KOP_MODULUS) != 0, k.mod[c],
                            k.mem[c] == PR_KMEM_HBM, k.width, t0, tr, rows, &full);
        }
        next[c] = s.next;
        if (s.stopped && st == PR_KST_OK) {
            st = PR_KST_FULL;
            fail_col = c;
            fail_row = s.full_row;
        }
    }

    /* 4. reject column per row */
    if (mode == PR_KMODE_PROCESS) {
        uint64_t off = pr_k_out_reject(rp, k.n_dense, k.n_sparse, k.width);
        for (uint32_t w = 0; w < rp / 32; w++) {
#pragma HLS PIPELINE II=1
            pr_kw x;
            for (uint32_t j = 0; j < 8; j++) {
                uint32_t r = 32 * w + 4 * j;
                x.l[j] = (uint64_t)reject[r] | (uint64_t)reject[r + 1] << 16 |
                         (uint64_t)reject[r + 2] << 32 | (uint64_t)reject[r + 3] << 48;
            }
            out[off + w] = x;
        }
    }
    pr__write_header(out, k.n_sparse, next, st, fail_col, fail_row, n_rej);
}

#ifdef __cplusplus
}
#endif
