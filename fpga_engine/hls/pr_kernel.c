/*
 * pr_kernel.c — the preprocessing dataflow as a Vitis HLS kernel (Piper's
 * MiniPipe operators), written in the common subset of C and C++.
 *
 * Two builds of the same source:
 *   - C simulation: gcc compiles this file into libpr_engine; the hls-sim
 *     backend calls pr_kernel() block by block exactly as the host calls the
 *     card. The HLS pragmas are ignored, streams are FIFO structs, and the
 *     processes of the dataflow region run one after the other, once per tile
 *     of PR_K_TILE_ROWS rows (so a C-sim stream holds one tile).
 *   - Synthesis: v++ -c compiles pr_kernel_top.cpp (which includes this
 *     file) with __SYNTHESIS__ defined: streams become hls::stream, the region
 *     runs once per call with every process looping over the tiles, and
 *     on-chip state becomes static URAM/BRAM arrays that persist across calls.
 *
 * Shape of a PROCESS call: one DATAFLOW region (README.md has the IIs)
 *
 *   rd_in ──dense──► neg2zero ─► log1p ─────────────────────────────┐
 *     └──sparse──► hex2int ─► validate ─┬─► lane 0: mod ─► vocab ──┤
 *                                       ├─► lane 1: mod ─► vocab ──┼─► wr_out
 *                                       └─► lane L-1 ...  ─────────┘
 *
 *   - rd_in is the only reader of `in` (64 B/cycle), wr_out the only writer
 *     of `out` and `newv`; every other stage works on 64-byte words.
 *   - validate sees every sparse column of a tile before any lane updates a
 *     vocabulary for it: it forwards the values to the lanes (a stream deep
 *     enough for one tile per lane) and then sends each lane the tile's
 *     per-row ok mask, which the lane reads first. A row with a bad hex field
 *     in any column never touches any vocabulary (the cpu backend's two
 *     phases), and the lanes stay independent.
 *   - lane l owns the sparse columns c with c % PR_K_VOCAB_LANES == l, their
 *     table memory (an on-chip URAM bank, or HBM port tab<l> on its own
 *     pseudo-channel) and their running state (indices handed out). Lanes
 *     run in parallel: Piper's one vocabulary pipeline per column.
 *   - dense values of rejected rows are not zeroed here: the host zeroes
 *     them from the reject column (rare rows, and it keeps the dense chain
 *     from waiting for validation).
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

#define PR_K_GROUPS  (PR_K_TILE_ROWS / 8) /* 8-value groups per tile */
#define PR_K_LANES_N PR_K_VOCAB_LANES
#define PR_K_FWD     32 /* HBM lanes: updates in flight covered by the forwarding window */

/* A stream element: one word plus a 32-bit side channel (like AXI4-Stream
 * TUSER): flags of the 8 lanes of a value group, or a count. */
typedef struct pr_kvf {
    pr_kw w;
    uint32_t f;
} pr_kvf;

#define PR_KF_MISSING(f) ((f)&0xffu)           /* lane value missing (empty field) */
#define PR_KF_SKIP(f)    (((f) >> 8) & 0xffu)  /* lane is padding (or rejected): no state change */
#define PR_KF_BAD(f)     (((f) >> 16) & 0xffu) /* lane is not valid hex */
#define PR_KF_LAST       0x100u                /* new-index packet: last of a column tile */

/* ------------------------------------------------------------ streams */

#ifdef __SYNTHESIS__
typedef hls::stream<pr_kvf> pr_ks;
#define PR_KS_PARAM(n)     hls::stream<pr_kvf> &n
#define PR_KS_ARR_PARAM(n) hls::stream<pr_kvf> n[PR_K_LANES_N]
#define PR_KS_ARG(n)       n
#define PR_KS_AT(n, i)     n[i]
#define PR_KS_WRITE(s, v)  (s).write(v)
#define PR_KS_READ(s)      (s).read()
#else
/* Plain-C stand-in: a FIFO whose storage comes from the simulated device
 * (pr_ksim_dev.fifo), sized for what one tile puts through it. */
typedef struct pr_ks {
    pr_kvf *d;
    uint32_t cap, rd, wr;
} pr_ks;
#define PR_KS_PARAM(n)     pr_ks *n
#define PR_KS_ARR_PARAM(n) pr_ks *n
#define PR_KS_ARG(n)       (&n)
#define PR_KS_AT(n, i)     (&(n)[i])
#define PR_KS_WRITE(s, v)  pr__ks_write(s, v)
#define PR_KS_READ(s)      pr__ks_read(s)

typedef char pr__kvf_is_9_words[sizeof(pr_kvf) == 9 * sizeof(uint64_t) ? 1 : -1];

static void pr__ks_init(pr_ks *s, pr_ksim_dev *ksim, uint32_t *used, uint32_t cap)
{
    cap = cap ? cap : 1;
    assert(*used + cap <= PR_KSIM_FIFO_ENTRIES);
    s->d = (pr_kvf *)(void *)ksim->fifo[*used];
    *used += cap;
    s->cap = cap;
    s->rd = s->wr = 0;
}
static inline void pr__ks_write(pr_ks *s, pr_kvf v)
{
    assert(s->wr - s->rd < s->cap);
    s->d[s->wr++ % s->cap] = v;
}
static inline pr_kvf pr__ks_read(pr_ks *s)
{
    assert(s->rd != s->wr);
    return s->d[s->rd++ % s->cap];
}
#endif

/* ------------------------------------------------------------ small helpers */

static inline double pr__bits_f64(uint64_t b)
{
    union {
        uint64_t u;
        double d;
    } x;
    x.u = b;
    return x.d;
}
static inline uint32_t pr__f32_bits(float f)
{
    union {
        float f;
        uint32_t u;
    } x;
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

/* One lane's share of the configuration: its columns, by slot c / L. Each
 * lane gets its own copy so that no array is read by two processes. */
typedef struct pr__klcfg {
    uint64_t mod[PR_K_LANE_COLS];
    uint64_t min_count[PR_K_LANE_COLS];
    uint64_t cap[PR_K_LANE_COLS];
    uint64_t mem[PR_K_LANE_COLS];
    uint64_t base[PR_K_LANE_COLS];
    uint64_t domain[PR_K_LANE_COLS];
} pr__klcfg;

typedef struct pr__kcfg {
    uint32_t n_dense, n_sparse, dense_ops, sparse_ops, profile, count_mode, width;
    pr__klcfg lc[PR_K_LANES_N];
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
#pragma HLS PIPELINE II = 1
        pr_kw w = cfg[1 + c];
        pr__klcfg *lc = &k->lc[c % PR_K_LANES_N];
        uint32_t j = c / PR_K_LANES_N;
        lc->mod[j] = w.l[PR_KCOL_MODULUS];
        lc->min_count[j] = w.l[PR_KCOL_MIN_COUNT];
        lc->cap[j] = w.l[PR_KCOL_CAPACITY];
        lc->mem[j] = w.l[PR_KCOL_MEM];
        lc->base[j] = w.l[PR_KCOL_BASE];
        lc->domain[j] = w.l[PR_KCOL_DOMAIN];
    }
    return 0;
}

/* Call geometry, passed by value to every process (scalars only). */
typedef struct pr__kgeo {
    uint32_t rows, rp, nd, ns, width, check_hex, mod_on, has_vocab, is_default, counting_pass,
        two_pass, dense_ops;
    uint64_t enc[4];   /* bit c: sparse column c holds u64 values */
    uint64_t sp_off;   /* in: first sparse word */
    uint64_t miss_u64; /* in: first missing-bitmap u64 */
    uint64_t out_sp, out_rej;
} pr__kgeo;

static inline uint32_t pr__is_hex(const pr__kgeo *g, uint32_t c)
{
    return !(g->enc[c / 64] >> (c % 64) & 1u);
}
static inline uint32_t pr__tile_rows(const pr__kgeo *g, uint32_t t0)
{
    return g->rp - t0 < PR_K_TILE_ROWS ? g->rp - t0 : PR_K_TILE_ROWS;
}

/* ------------------------------------------------------------ read stage */

/* The only reader of `in`, one 64-byte word per cycle: per tile, the dense
 * columns (8 doubles a word), then the sparse columns (a group of 8 values
 * is 2 hex words or 1 u64 word) tagged with their missing/padding flags. The
 * missing bitmap word (512 rows) is fetched once and reused. */
static void pr__rd_in(const pr_kw *in, pr__kgeo g, uint32_t tb, uint32_t te, PR_KS_PARAM(s_dense),
                      PR_KS_PARAM(s_raw))
{
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t tr = pr__tile_rows(&g, t0);
        for (uint32_t d = 0; d < g.nd; d++) {
            for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 1
                pr_kvf x;
                x.w = in[pr_k_in_dense() + (uint64_t)d * (g.rp / 8) + t0 / 8 + j];
                x.f = 0;
                PR_KS_WRITE(s_dense, x);
            }
        }
        for (uint32_t c = 0; c < g.ns; c++) {
            uint32_t is_hex = pr__is_hex(&g, c);
            uint64_t data = g.sp_off + (uint64_t)c * (g.rp / 4);
            uint64_t mbase = g.miss_u64 + (uint64_t)c * (g.rp / 64);
            uint64_t mword_at = ~0ull;
            pr_kw mword;
            for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 2
                uint32_t r0 = t0 + 8 * j;
                uint64_t mi = mbase + r0 / 64;
                if (mi / 8 != mword_at) {
                    mword = in[mi / 8];
                    mword_at = mi / 8;
                }
                uint32_t miss = (uint32_t)(mword.l[mi % 8] >> (r0 % 64)) & 0xffu;
                uint32_t pad = 0;
                for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                    if (r0 + k >= g.rows)
                        pad |= 1u << k;
                }
                pr_kvf x;
                x.f = miss | pad << 8;
                if (is_hex) {
                    x.w = in[data + r0 / 4];
                    PR_KS_WRITE(s_raw, x);
                    x.w = in[data + r0 / 4 + 1];
                    PR_KS_WRITE(s_raw, x);
                } else {
                    x.w = in[data + r0 / 8];
                    PR_KS_WRITE(s_raw, x);
                }
            }
        }
    }
}

/* ------------------------------------------------------------ sparse stages */

/* Hex2Int: 8 slots (two words) -> 8 u64 per group, II 1 per word; non-hex
 * lanes flagged bad. Missing and padding lanes become 0 (dlrm's key 0). */
static void pr__hex2int(pr__kgeo g, uint32_t tb, uint32_t te, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t groups = pr__tile_rows(&g, t0) / 8;
        for (uint32_t c = 0; c < g.ns; c++) {
            uint32_t is_hex = pr__is_hex(&g, c);
            for (uint32_t j = 0; j < groups; j++) {
#pragma HLS PIPELINE II = 2
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
    }
}

/* Validate: per tile, record the first failing column of every row while
 * forwarding each column's values to its lane; then hand every lane the
 * tile's reject mask (all lanes in the same cycle) and send the reject
 * column words to the writer. */
static void pr__validate(pr__kgeo g, uint32_t tb, uint32_t te, uint32_t *n_rej, PR_KS_PARAM(s_in),
                         PR_KS_ARR_PARAM(s_lane), PR_KS_ARR_PARAM(s_ok), PR_KS_PARAM(s_rej))
{
    uint16_t rej[PR_K_TILE_ROWS];
#pragma HLS ARRAY_PARTITION variable = rej cyclic factor = 8
    uint32_t nr = 0;
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t tr = pr__tile_rows(&g, t0);
        for (uint32_t r = 0; r < tr; r++) {
#pragma HLS PIPELINE II = 1
            rej[r] = PR_K_NO_REJECT;
        }
        for (uint32_t c = 0; c < g.ns; c++) {
            uint32_t check = g.check_hex && pr__is_hex(&g, c);
            for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 1
                pr_kvf x = PR_KS_READ(s_in);
                uint32_t bad = check ? PR_KF_BAD(x.f) : 0;
                for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                    if ((bad >> k & 1u) && rej[8 * j + k] == PR_K_NO_REJECT)
                        rej[8 * j + k] = (uint16_t)c;
                }
                PR_KS_WRITE(PR_KS_AT(s_lane, c % PR_K_LANES_N), x);
            }
        }
        for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 1
            pr_kvf m;
            for (uint32_t k = 0; k < 8; k++)
                m.w.l[k] = 0;
            m.f = 0;
            for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                if (rej[8 * j + k] != PR_K_NO_REJECT)
                    m.f |= 1u << k;
            }
            for (uint32_t l = 0; l < PR_K_LANES_N; l++) {
#pragma HLS UNROLL
                PR_KS_WRITE(PR_KS_AT(s_ok, l), m);
            }
        }
        for (uint32_t w = 0; w < tr / 32; w++) {
#pragma HLS PIPELINE II = 1
            pr_kvf x;
            x.f = 0;
            for (uint32_t j = 0; j < 8; j++) {
                uint32_t r = 32 * w + 4 * j;
                x.w.l[j] = (uint64_t)rej[r] | (uint64_t)rej[r + 1] << 16 |
                           (uint64_t)rej[r + 2] << 32 | (uint64_t)rej[r + 3] << 48;
            }
            for (uint32_t r = 32 * w; r < 32 * w + 32; r++)
                nr += t0 + r < g.rows && rej[r] != PR_K_NO_REJECT;
            PR_KS_WRITE(s_rej, x);
        }
    }
    *n_rej = nr;
}

/* ------------------------------------------------------------ vocabulary lanes */

/* Running state of one column inside its lane. `next` counts the indices
 * handed out (device state, so a zeroed device is an empty vocabulary under
 * either profile); index = first_index + next. */
typedef struct pr__kvoc {
    uint32_t has_vocab, is_default, counting_pass, two_pass, mod_on;
    uint64_t mod, min_count, cap, base, first_index, next;
    uint32_t stopped, full_row;
} pr__kvoc;

/* VocabGen+VocabMap for one value: lookup-or-insert on entry *e. Returns the
 * index; sets *dirty when *e changed and *is_new when v took a new index.
 * Counts are kept only for columns with min_count > 1. Streaming: every
 * sighting counts and the value is OOV until its count reaches min_count,
 * then takes the next index. Two-pass: the COUNT calls filled the counts;
 * PROCESS assigns at first sight when the total reached min_count. A full
 * table gives OOV under default and stops the column under dlrm
 * (s->stopped; the host reports PR_EFULL). */
static inline int64_t pr__vocab_one(pr__kvoc *s, uint64_t *e, uint32_t row, uint32_t *dirty,
                                    uint32_t *is_new)
{
    uint64_t ent = *e;
    int64_t idx = pr_k_entry_index(ent);
    uint64_t cnt = pr_k_entry_count(ent);
    uint32_t counting = s->min_count > 1;
    int64_t oov = s->is_default ? 1 : 0;
    *dirty = 0;
    *is_new = 0;
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
    s->next++;
    *e = pr_k_entry(idx, cnt);
    *dirty = 1;
    *is_new = 1;
    return idx;
}

/* The per-value loop of a lane over one column tile: Modulus, then the
 * table read-modify-write, then the index packed into output words (16
 * int32 or 8 int64) and new values into new-index packets of 8. LOOKUP and
 * UPDATE are statements on `key`/`ent` for the table memory at hand. */
#define PR__LANE_LOOP(LOOKUP, UPDATE)                                                              \
    pr_kvf x, y, nw;                                                                               \
    uint32_t n_new = 0;                                                                            \
    x.f = 0;                                                                                       \
    y.f = 0;                                                                                       \
    nw.f = 0;                                                                                      \
    for (uint32_t i = 0; i < tr; i++) {                                                            \
        uint32_t k = i % 8;                                                                        \
        if (k == 0)                                                                                \
            x = PR_KS_READ(s_in);                                                                  \
        uint64_t v = x.w.l[k];                                                                     \
        uint32_t skip = (PR_KF_SKIP(x.f) | okm[i / 8]) >> k & 1u;                                  \
        int64_t idx = 0;                                                                           \
        if (s->mod_on)                                                                             \
            v = v % s->mod;                                                                        \
        if (s->stopped || skip) {                                                                  \
            idx = 0;                                                                               \
        } else if ((PR_KF_MISSING(x.f) >> k & 1u) && s->is_default) {                              \
            idx = 0; /* PR_INDEX_MISSING */                                                        \
        } else if (!s->has_vocab) {                                                                \
            idx = (int64_t)v;                                                                      \
        } else {                                                                                   \
            uint64_t key = s->base + v, ent;                                                       \
            uint32_t dirty, is_new;                                                                \
            LOOKUP;                                                                                \
            idx = pr__vocab_one(s, &ent, t0 + i, &dirty, &is_new);                                 \
            if (dirty) {                                                                           \
                UPDATE;                                                                            \
            }                                                                                      \
            if (is_new) {                                                                          \
                nw.w.l[n_new++] = v;                                                               \
                if (n_new == 8) {                                                                  \
                    nw.f = 8;                                                                      \
                    PR_KS_WRITE(s_new, nw);                                                        \
                    n_new = 0;                                                                     \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (width == 8) {                                                                          \
            y.w.l[k] = (uint64_t)idx;                                                              \
            if (k == 7)                                                                            \
                PR_KS_WRITE(s_out, y);                                                             \
        } else {                                                                                   \
            uint32_t h = i % 16;                                                                   \
            uint64_t lo = (uint64_t)idx & 0xffffffffull;                                           \
            y.w.l[h / 2] = h % 2 ? (y.w.l[h / 2] | lo << 32) : lo;                                 \
            if (h == 15)                                                                           \
                PR_KS_WRITE(s_out, y);                                                             \
        }                                                                                          \
    }                                                                                              \
    nw.f = n_new | PR_KF_LAST;                                                                     \
    PR_KS_WRITE(s_new, nw);

/* On-chip bank: a URAM read-modify-write per value; the read-after-write
 * distance of URAM makes II=2 (Piper's on-chip VocabGen figure). */
static void pr__lane_onchip(pr__kvoc *s, uint64_t *bank, const uint8_t *okm, uint32_t width,
                            uint32_t t0, uint32_t tr, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out),
                            PR_KS_PARAM(s_new))
{
#pragma HLS PIPELINE II = 2 style = flp
    PR__LANE_LOOP(ent = bank[key], bank[key] = ent)
}

/* HBM pseudo-channel: reads issued back to back with many outstanding
 * (latency hidden), writes posted. The RAW hazard on a key updated less than
 * the HBM latency ago is resolved by a forwarding window of the last
 * PR_K_FWD updates (newest wins), so the loop carries no memory dependence
 * and reaches II ~6 (Piper's off-chip figure). The window is exact in C
 * simulation too (write-through), so it is checked by every hls-sim test. */
static void pr__lane_hbm(pr__kvoc *s, uint64_t *tab, const uint8_t *okm, uint32_t width,
                         uint32_t t0, uint32_t tr, uint64_t *fkey, uint64_t *fent,
                         PR_KS_PARAM(s_in), PR_KS_PARAM(s_out), PR_KS_PARAM(s_new))
{
#pragma HLS PIPELINE II = 6 style = flp
#pragma HLS DEPENDENCE variable = tab inter false
    /* clang-format would glue the _Pragma lines to the next statement. */
    /* clang-format off */
    PR__LANE_LOOP(
        {
            ent = tab[key];
            for (uint32_t f = 0; f < PR_K_FWD; f++) {
                _Pragma("HLS UNROLL") /* #pragma is not allowed in a macro argument (clang) */
                if (fkey[f] == key + 1)
                    ent = fent[f]; /* slots are in age order: the newest match is last */
            }
        },
        {
            tab[key] = ent;
            for (uint32_t f = 0; f + 1 < PR_K_FWD; f++) {
                _Pragma("HLS UNROLL")
                fkey[f] = fkey[f + 1];
                fent[f] = fent[f + 1];
            }
            fkey[PR_K_FWD - 1] = key + 1;
            fent[PR_K_FWD - 1] = ent;
        })
    /* clang-format on */
}

/* One vocabulary lane: its columns c = lane, lane + L, ... in order, per
 * tile, after the tile's reject mask. State (indices handed out, dlrm stop)
 * lives in the lane's own arrays. */
static void pr__lane(uint32_t lane, pr__kgeo g, const pr__klcfg *lc, uint64_t *bank, uint64_t *tab,
                     uint64_t *lnext, uint32_t *lstop, uint32_t *lfrow, uint32_t tb, uint32_t te,
                     PR_KS_PARAM(s_in), PR_KS_PARAM(s_ok), PR_KS_PARAM(s_out), PR_KS_PARAM(s_new))
{
    uint8_t okm[PR_K_GROUPS];
    uint64_t fkey[PR_K_FWD], fent[PR_K_FWD];
#pragma HLS ARRAY_PARTITION variable = fkey complete
#pragma HLS ARRAY_PARTITION variable = fent complete
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t tr = pr__tile_rows(&g, t0);
        for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 1
            okm[j] = (uint8_t)PR_KS_READ(s_ok).f;
        }
        for (uint32_t c = lane, j = 0; c < g.ns; c += PR_K_LANES_N, j++) {
            pr__kvoc s;
            s.has_vocab = g.has_vocab;
            s.is_default = g.is_default;
            s.counting_pass = g.counting_pass;
            s.two_pass = g.two_pass;
            s.mod_on = g.mod_on;
            s.mod = lc->mod[j];
            s.min_count = lc->min_count[j];
            s.cap = lc->cap[j];
            s.base = lc->base[j];
            s.first_index = g.is_default ? 2 : 0;
            s.next = lnext[j];
            s.stopped = lstop[j];
            s.full_row = lfrow[j];
            if (lc->mem[j] == PR_KMEM_HBM) {
                for (uint32_t f = 0; f < PR_K_FWD; f++)
                    fkey[f] = 0; /* 0 = empty slot; keys are stored + 1 */
                pr__lane_hbm(&s, tab, okm, g.width, t0, tr, fkey, fent, s_in, s_out, s_new);
            } else {
                pr__lane_onchip(&s, bank, okm, g.width, t0, tr, s_in, s_out, s_new);
            }
            lnext[j] = s.next;
            lstop[j] = s.stopped;
            lfrow[j] = s.full_row;
        }
    }
}

/* ------------------------------------------------------------ dense stages */

static void pr__neg2zero(pr__kgeo g, uint32_t tb, uint32_t te, PR_KS_PARAM(s_in),
                         PR_KS_PARAM(s_out))
{
    uint32_t on = g.dense_ops & PR_KOP_NEG2ZERO;
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t n = g.nd * (pr__tile_rows(&g, t0) / 8);
        for (uint32_t j = 0; j < n; j++) {
#pragma HLS PIPELINE II = 1
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
}

/* Logarithm (or the plain narrowing when the op is absent): double in,
 * float32 bits out in the low half of each lane. */
static void pr__log1p(pr__kgeo g, uint32_t tb, uint32_t te, PR_KS_PARAM(s_in), PR_KS_PARAM(s_out))
{
    uint32_t on = (g.dense_ops & PR_KOP_LOG1P) != 0;
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t n = g.nd * (pr__tile_rows(&g, t0) / 8);
        for (uint32_t j = 0; j < n; j++) {
#pragma HLS PIPELINE II = 1
            pr_kvf x = PR_KS_READ(s_in);
            for (uint32_t k = 0; k < 8; k++) {
#pragma HLS UNROLL
                double d = pr__bits_f64(x.w.l[k]);
                /* log1p(-0.0) is -0.0, but the cpu backend's exact-integer
                 * table gives +0.0 for both zeros: so does the kernel (a zero
                 * test in front of the log unit). */
                float f = on ? (d == 0.0 ? 0.0f : pr__log1p_f32(d)) : (float)d;
                x.w.l[k] = pr__f32_bits(f);
            }
            PR_KS_WRITE(s_out, x);
        }
    }
}

/* ------------------------------------------------------------ write stage */

/* The only writer of `out` and `newv`, one word per cycle: per tile, the
 * dense columns (two groups of floats a word), each sparse column's index
 * words and new-index packets from its lane, then the reject column. */
static void pr__wr_out(pr_kw *out, uint64_t *newv, pr__kgeo g, uint32_t tb, uint32_t te,
                       uint64_t *npos, PR_KS_PARAM(s_dense), PR_KS_ARR_PARAM(s_idx),
                       PR_KS_ARR_PARAM(s_new), PR_KS_PARAM(s_rej))
{
    for (uint32_t t0 = tb; t0 < te; t0 += PR_K_TILE_ROWS) {
        uint32_t tr = pr__tile_rows(&g, t0);
        for (uint32_t d = 0; d < g.nd; d++) {
            pr_kw acc;
            for (uint32_t j = 0; j < tr / 8; j++) {
#pragma HLS PIPELINE II = 1
                pr_kvf x = PR_KS_READ(s_dense);
                uint32_t half = j & 1u;
                for (uint32_t k = 0; k < 4; k++) {
#pragma HLS UNROLL
                    acc.l[4 * half + k] = (x.w.l[2 * k] & 0xffffffffull) | (x.w.l[2 * k + 1] << 32);
                }
                if (half)
                    out[pr_k_out_dense(g.ns) + (uint64_t)d * (g.rp / 16) + t0 / 16 + j / 2] = acc;
            }
        }
        for (uint32_t c = 0; c < g.ns; c++) {
            uint32_t l = c % PR_K_LANES_N;
            uint32_t nw = tr * g.width / 64;
            uint64_t off = g.out_sp + (uint64_t)c * (g.rp * g.width / 64) + t0 * g.width / 64;
            for (uint32_t w = 0; w < nw; w++) {
#pragma HLS PIPELINE II = 1
                out[off + w] = PR_KS_READ(PR_KS_AT(s_idx, l)).w;
            }
            pr_kvf p;
            do {
                p = PR_KS_READ(PR_KS_AT(s_new, l));
                uint32_t n = p.f & 0xffu;
                for (uint32_t i = 0; i < n; i++)
                    newv[(uint64_t)c * g.rp + npos[c] + i] = p.w.l[i];
                npos[c] += n;
            } while (!(p.f & PR_KF_LAST));
        }
        for (uint32_t w = 0; w < tr / 32; w++) {
#pragma HLS PIPELINE II = 1
            out[g.out_rej + t0 / 32 + w] = PR_KS_READ(s_rej).w;
        }
    }
}

/* ------------------------------------------------------------ the dataflow region */

#define PR__KTAB_ARG(l) , tab##l
#define PR__LANE_CALL(l)                                                                           \
    pr__lane(l, g, &lc[l], onchip[l], tab##l, lnext[l], lstop[l], lfrow[l], tb, te,                \
             PR_KS_AT(s_lane, l), PR_KS_AT(s_ok, l), PR_KS_AT(s_idx, l), PR_KS_AT(s_new, l));

/* Tiles [tb, te) (row offsets) of a PROCESS/COUNT call. Synthesis runs it
 * once for the whole call; C simulation once per tile. */
static void pr__df(const pr_kw *in, pr_kw *out, uint64_t *newv, pr__kgeo g, const pr__klcfg *lc,
                   uint64_t (*onchip)[PR_K_LANE_ONCHIP_ENTRIES], uint64_t (*lnext)[PR_K_LANE_COLS],
                   uint32_t (*lstop)[PR_K_LANE_COLS], uint32_t (*lfrow)[PR_K_LANE_COLS],
                   uint64_t *npos, uint32_t tb, uint32_t te,
                   uint32_t *n_rej PR_K_LANES(PR__KTAB_PARAM) PR_KSIM_PARAM)
{
#pragma HLS DATAFLOW
#ifdef __SYNTHESIS__
    pr_ks s_dense, s_pos, s_log, s_raw, s_val, s_rej;
    pr_ks s_lane[PR_K_LANES_N], s_ok[PR_K_LANES_N], s_idx[PR_K_LANES_N], s_new[PR_K_LANES_N];
#pragma HLS STREAM variable = s_dense depth = 32
#pragma HLS STREAM variable = s_pos depth = 32
#pragma HLS STREAM variable = s_log depth = 32
#pragma HLS STREAM variable = s_raw depth = 32
#pragma HLS STREAM variable = s_val depth = 32
#pragma HLS STREAM variable = s_rej depth = 32
    /* A lane's input holds a whole tile of its columns: validation must see
     * every column of the tile before the lane may update its tables. */
#pragma HLS STREAM variable = s_lane depth = 1280 type = fifo
#pragma HLS BIND_STORAGE variable = s_lane type = fifo impl = uram
#pragma HLS STREAM variable = s_ok depth = 128
#pragma HLS STREAM variable = s_idx depth = 64
#pragma HLS STREAM variable = s_new depth = 16
#else
    pr_ks s_dense, s_pos, s_log, s_raw, s_val, s_rej;
    pr_ks s_lane[PR_K_LANES_N], s_ok[PR_K_LANES_N], s_idx[PR_K_LANES_N], s_new[PR_K_LANES_N];
    uint32_t used = 0, groups = pr__tile_rows(&g, tb) / 8;
    pr__ks_init(&s_dense, ksim, &used, g.nd * groups);
    pr__ks_init(&s_pos, ksim, &used, g.nd * groups);
    pr__ks_init(&s_log, ksim, &used, g.nd * groups);
    pr__ks_init(&s_raw, ksim, &used, 2 * g.ns * groups);
    pr__ks_init(&s_val, ksim, &used, g.ns * groups);
    pr__ks_init(&s_rej, ksim, &used, groups / 4);
    for (uint32_t l = 0; l < PR_K_LANES_N; l++) {
        uint32_t cols = g.ns > l ? (g.ns - l + PR_K_LANES_N - 1) / PR_K_LANES_N : 0;
        pr__ks_init(&s_lane[l], ksim, &used, cols * groups);
        pr__ks_init(&s_ok[l], ksim, &used, groups);
        pr__ks_init(&s_idx[l], ksim, &used, cols * groups);
        pr__ks_init(&s_new[l], ksim, &used, cols * (groups + 1));
    }
#endif
    pr__rd_in(in, g, tb, te, PR_KS_ARG(s_dense), PR_KS_ARG(s_raw));
    pr__neg2zero(g, tb, te, PR_KS_ARG(s_dense), PR_KS_ARG(s_pos));
    pr__log1p(g, tb, te, PR_KS_ARG(s_pos), PR_KS_ARG(s_log));
    pr__hex2int(g, tb, te, PR_KS_ARG(s_raw), PR_KS_ARG(s_val));
    pr__validate(g, tb, te, n_rej, PR_KS_ARG(s_val), s_lane, s_ok, PR_KS_ARG(s_rej));
    PR_K_LANES(PR__LANE_CALL)
    pr__wr_out(out, newv, g, tb, te, npos, PR_KS_ARG(s_log), s_idx, s_new, PR_KS_ARG(s_rej));
}

/* ------------------------------------------------------------ state modes */

/* READ / LOAD / CLEAR on one column, in the memory of its lane (called once
 * per lane through PR_K_LANES so that each call site has a fixed port). */
static void pr__mode_state(uint32_t mode, const pr__klcfg *lc, uint32_t j, uint64_t *bank,
                           uint64_t *tab, pr_kw *xfer, uint32_t first, uint32_t count)
{
    uint32_t hbm = lc->mem[j] == PR_KMEM_HBM;
    uint64_t base = lc->base[j];
    if (mode == PR_KMODE_READ) {
        pr_kw acc;
        for (uint32_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II = 1
            acc.l[i % 8] = hbm ? tab[base + first + i] : bank[base + first + i];
            if (i % 8 == 7 || i + 1 == count)
                xfer[i / 8] = acc;
        }
    } else if (mode == PR_KMODE_LOAD) {
        for (uint32_t i = 0; i < count; i++) {
#pragma HLS PIPELINE II = 2
            pr_kw w = xfer[i / 4];
            uint64_t v = w.l[2 * (i % 4)], e = w.l[2 * (i % 4) + 1];
            if (v >= lc->domain[j])
                continue; /* the host checks; never write outside the column */
            if (hbm)
                tab[base + v] = e;
            else
                bank[base + v] = e;
        }
    } else {
        for (uint64_t i = 0; i < lc->domain[j]; i++) {
#pragma HLS PIPELINE II = 1
            if (hbm)
                tab[base + i] = 0;
            else
                bank[base + i] = 0;
        }
    }
}

/* ------------------------------------------------------------ top */

static void pr__write_header(pr_kw *out, uint32_t n_sparse, uint64_t (*lnext)[PR_K_LANE_COLS],
                             uint64_t st, uint64_t d1, uint64_t d2, uint64_t n_rej)
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
            w.l[k] = c + k < n_sparse ? lnext[(c + k) % PR_K_LANES_N][(c + k) / PR_K_LANES_N] : 0;
        out[pr_k_out_next() + c / 8] = w;
    }
}

#define PR__PRAGMA(x) _Pragma(#x)
#define PR__KTAB_IFACE(l)                                                                          \
    PR__PRAGMA(HLS INTERFACE m_axi port = tab##l offset = slave bundle =                           \
                   gmem_tab##l num_read_outstanding = 32 num_write_outstanding =                   \
                       32 max_widen_bitwidth = 64)
#define PR__STATE_CALL(l)                                                                          \
    if (lane == l)                                                                                 \
        pr__mode_state(mode, &k.lc[l], col / PR_K_LANES_N, onchip[l], tab##l, xfer, first, count);

#ifdef __cplusplus
extern "C" {
#endif

void pr_kernel(const pr_kw *in, pr_kw *out, const pr_kw *cfg, uint64_t *newv, pr_kw *xfer,
               uint32_t mode, uint32_t rows, uint32_t col, uint32_t first,
               uint32_t count PR_K_LANES(PR__KTAB_PARAM) PR_KSIM_PARAM)
{
#pragma HLS INTERFACE m_axi port = in offset = slave bundle = gmem_in max_read_burst_length = 64
#pragma HLS INTERFACE m_axi port = out offset = slave bundle = gmem_out max_write_burst_length = 64
#pragma HLS INTERFACE m_axi port = cfg offset = slave bundle = gmem_cfg
#pragma HLS INTERFACE m_axi port = newv offset = slave bundle = gmem_new
#pragma HLS INTERFACE m_axi port = xfer offset = slave bundle = gmem_xfer
    PR_K_LANES(PR__KTAB_IFACE)
#pragma HLS INTERFACE s_axilite port = mode
#pragma HLS INTERFACE s_axilite port = rows
#pragma HLS INTERFACE s_axilite port = col
#pragma HLS INTERFACE s_axilite port = first
#pragma HLS INTERFACE s_axilite port = count
#pragma HLS INTERFACE s_axilite port = return
#ifdef __SYNTHESIS__
    /* Device-resident state: persists across invocations; one bank and one
     * state row per lane (partitioned, so lanes never share a memory). */
    static uint64_t onchip[PR_K_LANES_N][PR_K_LANE_ONCHIP_ENTRIES];
#pragma HLS ARRAY_PARTITION variable = onchip dim = 1 complete
#pragma HLS BIND_STORAGE variable = onchip type = ram_2p impl = uram
    static uint64_t lnext[PR_K_LANES_N][PR_K_LANE_COLS];
    static uint32_t lstop[PR_K_LANES_N][PR_K_LANE_COLS];
    static uint32_t lfrow[PR_K_LANES_N][PR_K_LANE_COLS];
#pragma HLS ARRAY_PARTITION variable = lnext dim = 1 complete
#pragma HLS ARRAY_PARTITION variable = lstop dim = 1 complete
#pragma HLS ARRAY_PARTITION variable = lfrow dim = 1 complete
    static uint64_t npos[PR_K_MAX_SPARSE];
#else
    uint64_t(*onchip)[PR_K_LANE_ONCHIP_ENTRIES] = ksim->onchip;
    uint64_t(*lnext)[PR_K_LANE_COLS] = ksim->next;
    uint32_t(*lstop)[PR_K_LANE_COLS] = ksim->stop;
    uint32_t(*lfrow)[PR_K_LANE_COLS] = ksim->full_row;
    uint64_t *npos = ksim->npos;
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
        uint32_t lane = col % PR_K_LANES_N;
        if (col >= k.n_sparse || k.lc[lane].mem[col / PR_K_LANES_N] == PR_KMEM_NONE ||
            count > PR_K_XFER_ENTRIES ||
            (mode == PR_KMODE_READ &&
             (uint64_t)first + count > k.lc[lane].domain[col / PR_K_LANES_N])) {
            pr__write_header(out, k.n_sparse, lnext, PR_KST_BADARG, 1, 0, 0);
            return;
        }
        PR_K_LANES(PR__STATE_CALL)
        if (mode == PR_KMODE_CLEAR)
            lnext[lane][col / PR_K_LANES_N] = first;
        pr__write_header(out, k.n_sparse, lnext, PR_KST_OK, 0, 0, 0);
        return;
    }
    if ((mode != PR_KMODE_PROCESS && mode != PR_KMODE_COUNT) || rows > PR_K_MAX_ROWS) {
        pr__write_header(out, k.n_sparse, lnext, PR_KST_BADARG, 2, 0, 0);
        return;
    }

    pr__kgeo g;
    g.rows = rows;
    g.rp = pr_k_rows_pad(rows);
    g.nd = mode == PR_KMODE_PROCESS ? k.n_dense : 0; /* COUNT: sparse only */
    g.ns = k.n_sparse;
    g.width = k.width;
    g.check_hex = (k.sparse_ops & PR_KOP_HEX2INT) != 0;
    g.mod_on = (k.sparse_ops & PR_KOP_MODULUS) != 0;
    g.has_vocab = (k.sparse_ops & PR_KOP_VOCAB) != 0;
    g.is_default = k.profile == 1;
    g.counting_pass = mode == PR_KMODE_COUNT;
    g.two_pass = k.count_mode == 1;
    g.dense_ops = k.dense_ops;
    for (uint32_t i = 0; i < 4; i++)
        g.enc[i] = in[1].l[i];
    g.sp_off = pr_k_in_sparse(g.rp, k.n_dense);
    g.miss_u64 = pr_k_in_missing(g.rp, k.n_dense, k.n_sparse) * 8;
    g.out_sp = pr_k_out_sparse(g.rp, k.n_dense, k.n_sparse);
    g.out_rej = pr_k_out_reject(g.rp, k.n_dense, k.n_sparse, k.width);

    for (uint32_t c = 0; c < k.n_sparse; c++) {
        lstop[c % PR_K_LANES_N][c / PR_K_LANES_N] = 0;
        lfrow[c % PR_K_LANES_N][c / PR_K_LANES_N] = 0;
        npos[c] = 0;
    }
    uint64_t n_rej = 0;
#ifdef __SYNTHESIS__
    uint32_t nr;
    pr__df(in, out, newv, g, k.lc, onchip, lnext, lstop, lfrow, npos, 0, g.rp,
           &nr PR_K_LANES(PR__KTAB_ARG));
    n_rej = nr;
#else
    for (uint32_t t0 = 0; t0 < g.rp; t0 += PR_K_TILE_ROWS) {
        uint32_t nr;
        pr__df(in, out, newv, g, k.lc, onchip, lnext, lstop, lfrow, npos, t0,
               t0 + pr__tile_rows(&g, t0), &nr PR_K_LANES(PR__KTAB_ARG), ksim);
        n_rej += nr;
    }
#endif

    uint64_t st = PR_KST_OK, fail_col = 0, fail_row = 0;
    for (uint32_t c = 0; c < k.n_sparse; c++) {
        if (lstop[c % PR_K_LANES_N][c / PR_K_LANES_N] && st == PR_KST_OK) {
            st = PR_KST_FULL;
            fail_col = c;
            fail_row = lfrow[c % PR_K_LANES_N][c / PR_K_LANES_N];
        }
    }
    pr__write_header(out, k.n_sparse, lnext, st, fail_col, fail_row, n_rej);
}

#ifdef __cplusplus
}
#endif
