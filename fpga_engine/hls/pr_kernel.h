/*
 * pr_kernel.h — the device side of the FPGA engine: the HLS kernel's
 * interface (arguments, modes, buffer layouts) shared by the kernel itself
 * (pr_kernel.c), the host packing code (pr_khost.c) and both hosts that call
 * it (hls_sim_backend.c calls it as a C function, xrt/xrt_backend.c through
 * XRT on an Alveo card).
 *
 * Everything crossing the kernel boundary is a buffer of 64-byte words
 * (pr_kw, one 512-bit AXI beat, the data width of Piper's MiniPipe) plus a
 * few 32-bit scalars on s_axilite. The layouts below are pure functions of
 * (rows, n_dense, n_sparse, sparse width) so host and kernel agree without a
 * negotiated descriptor. This header is plain C that also compiles as C++
 * (Vitis HLS synthesises the kernel through pr_kernel_top.cpp).
 */
#ifndef PR_KERNEL_H
#define PR_KERNEL_H

#include <stdint.h>

/* ------------------------------------------------------------ hardware limits */

#define PR_K_WORD_BYTES 64
#define PR_K_MAX_ROWS   65536u /* rows per kernel call; hosts split bigger blocks */
#define PR_K_TILE_ROWS  1024u  /* rows per dataflow invocation (one column) */
#define PR_K_MAX_DENSE  256u
#define PR_K_MAX_SPARSE 256u
/* Vocabulary lanes: one VocabGen+VocabMap pipeline per lane, all running in
 * parallel inside the DATAFLOW region (Piper's one-pipeline-per-column
 * organisation). Sparse column c belongs to lane c % PR_K_VOCAB_LANES and
 * lives in that lane's memories: its on-chip bank (URAM) when the domain is
 * small and the bank has room, else its own HBM pseudo-channel (port tab<l>).
 * Compile-time: 26 (Criteo's sparse columns) by default, 1..26 (the U55C has
 * 32 pseudo-channels; 5 carry in/out/cfg/newv/xfer, one stays spare). */
#ifndef PR_K_VOCAB_LANES
#define PR_K_VOCAB_LANES 26
#endif
#if PR_K_VOCAB_LANES < 1 || PR_K_VOCAB_LANES > 26
#error "PR_K_VOCAB_LANES must be 1..26 (HBM pseudo-channels)"
#endif
#define PR_K_LANE_COLS                                                                             \
    ((PR_K_MAX_SPARSE + PR_K_VOCAB_LANES - 1) / PR_K_VOCAB_LANES) /* cols per lane, max */
#define PR_K_ONCHIP_MAX_DOMAIN   (1u << 16)   /* per column, URAM-resident table */
#define PR_K_LANE_ONCHIP_ENTRIES (1u << 16)   /* per lane bank: 512 KiB = 16 URAM blocks */
#define PR_K_HBM_MAX_DOMAIN      (1ull << 26) /* per column, HBM-resident table */
#define PR_K_LANE_HBM_ENTRIES    (1ull << 26) /* per lane: one 512 MiB pseudo-channel */
#define PR_K_XFER_ENTRIES        65536u       /* entries per read/load call */
#define PR_K_CLOCK_HZ            200000000ull /* Piper's achieved kernel clock */

/* One 512-bit word. A struct of 8 lanes so that plain C, C++ and HLS all see
 * the same little-endian byte layout (byte j = lane j/8, bits 8*(j%8)). */
typedef struct pr_kw {
    uint64_t l[8];
} pr_kw;

/* ------------------------------------------------------------ modes (scalar `mode`) */

enum {
    PR_KMODE_PROCESS = 0, /* in -> out, vocabularies updated (lookup-or-insert) */
    PR_KMODE_COUNT = 1,   /* two-pass first pass: validate, then count values only */
    PR_KMODE_READ = 2,    /* copy table entries [first, first+count) of column `col` to xfer */
    PR_KMODE_LOAD = 3,    /* write `count` (value, entry) pairs from xfer into column `col` */
    PR_KMODE_CLEAR = 4,   /* zero column `col`'s table, set its handed-out count to `first` */
};

/* Status codes in out word 0, lane 0. */
enum {
    PR_KST_OK = 0,
    PR_KST_FULL = 1,   /* dlrm vocabulary full: lane 1 = first full column, lane 2 = its row */
    PR_KST_BADARG = 2, /* bad scalar or config (lane 1 says which) */
};

/* ------------------------------------------------------------ config buffer (cfg) */

/* Word 0 lanes. */
enum {
    PR_KCFG_MAGIC = 0,
    PR_KCFG_SHAPE,
    PR_KCFG_DENSE_OPS,
    PR_KCFG_SPARSE_OPS,
    PR_KCFG_PROFILE,
    PR_KCFG_COUNT_MODE,
    PR_KCFG_WIDTH
};
#define PR_K_CFG_MAGIC 0x70726b3100000002ull /* "prk1", layout version 2 (per-lane bases) */

/* Dense op bits. */
#define PR_KOP_NEG2ZERO 1u
#define PR_KOP_LOG1P    2u
/* Sparse op bits. */
#define PR_KOP_HEX2INT 1u
#define PR_KOP_MODULUS 2u
#define PR_KOP_VOCAB   4u

/* Word 1 + c: sparse column c. BASE is the entry offset inside the memory of
 * the column's lane (c % PR_K_VOCAB_LANES): its on-chip bank or its HBM port. */
enum {
    PR_KCOL_MODULUS = 0,
    PR_KCOL_MIN_COUNT,
    PR_KCOL_CAPACITY,
    PR_KCOL_MEM,
    PR_KCOL_BASE,
    PR_KCOL_DOMAIN
};
enum { PR_KMEM_NONE = 0, PR_KMEM_ONCHIP = 1, PR_KMEM_HBM = 2 };

static inline uint32_t pr_k_cfg_words(uint32_t n_sparse)
{
    return 1 + n_sparse;
}

/* ------------------------------------------------------------ table entries */

/* A vocabulary entry is one u64: low 32 bits index + 1 (0 = no index yet),
 * high 32 bits the times the value was seen (saturating). A zeroed table is an
 * empty vocabulary. */
static inline uint64_t pr_k_entry(int64_t index, uint64_t count)
{
    uint64_t c = count > 0xffffffffull ? 0xffffffffull : count;
    return (c << 32) | (index < 0 ? 0u : (uint64_t)(index + 1));
}
static inline int64_t pr_k_entry_index(uint64_t e)
{
    return (int64_t)(e & 0xffffffffu) - 1;
}
static inline uint64_t pr_k_entry_count(uint64_t e)
{
    return e >> 32;
}

/* ------------------------------------------------------------ buffer layouts */

/* Rows padded so every column starts on a word and bitmaps on a u64. */
static inline uint32_t pr_k_rows_pad(uint32_t rows)
{
    return (rows + 63u) & ~63u;
}

/* Input buffer (in), in words:
 *   w0            header: lane 0 magic, lane 1 rows
 *   w1            sparse encoding bitmap: bit c set = column c holds u64 values
 *   dense         n_dense columns of rp doubles (8 per word), missing already 0.0
 *   sparse        n_sparse columns of rp/4 words: 4 hex slots of 16 bytes per
 *                 word, or (u64 columns) 8 values per word in the first half
 *   missing       n_sparse bitmaps of rp/64 u64 each, packed, rounded up to a word */
static inline uint64_t pr_k_in_dense(void)
{
    return 2;
}
static inline uint64_t pr_k_in_sparse(uint32_t rp, uint32_t n_dense)
{
    return 2 + (uint64_t)n_dense * (rp / 8);
}
static inline uint64_t pr_k_in_missing(uint32_t rp, uint32_t n_dense, uint32_t n_sparse)
{
    return pr_k_in_sparse(rp, n_dense) + (uint64_t)n_sparse * (rp / 4);
}
static inline uint64_t pr_k_in_words(uint32_t rp, uint32_t n_dense, uint32_t n_sparse)
{
    return pr_k_in_missing(rp, n_dense, n_sparse) + ((uint64_t)n_sparse * (rp / 64) + 7) / 8;
}

/* Output buffer (out), in words:
 *   w0            status: lane 0 PR_KST_*, lanes 1-2 detail, lane 3 rows rejected
 *   next          indices handed out so far, per sparse column (8 per word; the
 *                 vocabulary size minus the profile's reserved indices),
 *                 refreshed by every call whatever the mode
 *   dense         n_dense columns of rp float32 (16 per word)
 *   sparse        n_sparse columns of rp indices, int32 (16/word) or int64 (8/word)
 *   reject        rp uint16 (32 per word): first failing sparse column, 0xffff = none */
static inline uint64_t pr_k_out_next(void)
{
    return 1;
}
static inline uint64_t pr_k_out_dense(uint32_t n_sparse)
{
    return 1 + (n_sparse + 7) / 8;
}
static inline uint64_t pr_k_out_sparse(uint32_t rp, uint32_t n_dense, uint32_t n_sparse)
{
    return pr_k_out_dense(n_sparse) + (uint64_t)n_dense * (rp / 16);
}
static inline uint64_t pr_k_out_reject(uint32_t rp, uint32_t n_dense, uint32_t n_sparse,
                                       uint32_t width)
{
    return pr_k_out_sparse(rp, n_dense, n_sparse) + (uint64_t)n_sparse * (rp * width / 64);
}
static inline uint64_t pr_k_out_words(uint32_t rp, uint32_t n_dense, uint32_t n_sparse,
                                      uint32_t width)
{
    return pr_k_out_reject(rp, n_dense, n_sparse, width) + rp / 32;
}
#define PR_K_NO_REJECT 0xffffu

/* New-index log (newv): column c's values that received an index during the
 * call, in index order, at u64 offset c * rp. Their indices follow the
 * column's count before the call, so the host learns the new vocabulary
 * entries without reading the table back. */
static inline uint64_t pr_k_newv_words(uint32_t rp, uint32_t n_sparse)
{
    return (uint64_t)n_sparse * rp / 8;
}

/* Transfer buffer (xfer): READ writes entries (8 per word); LOAD reads
 * (value, entry) pairs (4 per word). */
static inline uint64_t pr_k_xfer_words(void)
{
    return (uint64_t)PR_K_XFER_ENTRIES * 2 / 8;
}

/* ------------------------------------------------------------ the top function */

/* X-macro over the lanes: PR_K_LANES(X) expands to X(0) X(1) ... X(L-1), so
 * that every lane is its own dataflow process with its own fixed AXI port
 * (HLS cannot select among m_axi ports at run time). */
#define PR__KL1(X)    X(0)
#define PR__KL2(X)    PR__KL1(X) X(1)
#define PR__KL3(X)    PR__KL2(X) X(2)
#define PR__KL4(X)    PR__KL3(X) X(3)
#define PR__KL5(X)    PR__KL4(X) X(4)
#define PR__KL6(X)    PR__KL5(X) X(5)
#define PR__KL7(X)    PR__KL6(X) X(6)
#define PR__KL8(X)    PR__KL7(X) X(7)
#define PR__KL9(X)    PR__KL8(X) X(8)
#define PR__KL10(X)   PR__KL9(X) X(9)
#define PR__KL11(X)   PR__KL10(X) X(10)
#define PR__KL12(X)   PR__KL11(X) X(11)
#define PR__KL13(X)   PR__KL12(X) X(12)
#define PR__KL14(X)   PR__KL13(X) X(13)
#define PR__KL15(X)   PR__KL14(X) X(14)
#define PR__KL16(X)   PR__KL15(X) X(15)
#define PR__KL17(X)   PR__KL16(X) X(16)
#define PR__KL18(X)   PR__KL17(X) X(17)
#define PR__KL19(X)   PR__KL18(X) X(18)
#define PR__KL20(X)   PR__KL19(X) X(19)
#define PR__KL21(X)   PR__KL20(X) X(20)
#define PR__KL22(X)   PR__KL21(X) X(21)
#define PR__KL23(X)   PR__KL22(X) X(22)
#define PR__KL24(X)   PR__KL23(X) X(23)
#define PR__KL25(X)   PR__KL24(X) X(24)
#define PR__KL26(X)   PR__KL25(X) X(25)
#define PR__KLCAT(n)  PR__KL##n
#define PR__KLN(n)    PR__KLCAT(n)
#define PR_K_LANES(X) PR__KLN(PR_K_VOCAB_LANES)(X)

/* Kernel argument numbers (XRT sets them by index): the buffers, the
 * scalars, then one HBM table port per lane. */
enum {
    PR_KARG_IN = 0,
    PR_KARG_OUT,
    PR_KARG_CFG,
    PR_KARG_NEWV,
    PR_KARG_XFER,
    PR_KARG_MODE,
    PR_KARG_ROWS,
    PR_KARG_COL,
    PR_KARG_FIRST,
    PR_KARG_COUNT,
    PR_KARG_TAB0
};

#ifndef __SYNTHESIS__
/* C simulation only: the memories that are on-chip (static, persistent
 * across invocations) in hardware live here, one per simulated device, so
 * several engines in one process do not share a vocabulary. `fifo` is the
 * storage of the C-sim streams (see pr_kernel.c): the stages of a dataflow
 * region run one after another there, so a stream holds a whole tile. */
#define PR_KSIM_FIFO_ENTRIES                                                                       \
    (3u * PR_K_MAX_DENSE * (PR_K_TILE_ROWS / 8) +                                                  \
     6u * PR_K_MAX_SPARSE * (PR_K_TILE_ROWS / 8 + 1) + PR_K_VOCAB_LANES * (PR_K_TILE_ROWS / 8) +   \
     PR_K_TILE_ROWS / 32)
typedef struct pr_ksim_dev {
    uint64_t onchip[PR_K_VOCAB_LANES][PR_K_LANE_ONCHIP_ENTRIES];
    uint64_t next[PR_K_VOCAB_LANES][PR_K_LANE_COLS];
    uint32_t stop[PR_K_VOCAB_LANES][PR_K_LANE_COLS];
    uint32_t full_row[PR_K_VOCAB_LANES][PR_K_LANE_COLS];
    uint64_t npos[PR_K_MAX_SPARSE];
    uint64_t fifo[PR_KSIM_FIFO_ENTRIES][9]; /* a 64-byte word + flags each */
} pr_ksim_dev;
#define PR_KSIM_PARAM , pr_ksim_dev *ksim
#else
#define PR_KSIM_PARAM
#endif

#define PR__KTAB_PARAM(l) , uint64_t *tab##l

#ifdef __cplusplus
extern "C" {
#endif

/* The kernel. `in`, `out`, `cfg`, `newv`, `xfer` and the lanes' HBM tables
 * `tab0..tab<L-1>` are device buffers on separate AXI masters; the scalars
 * are s_axilite registers. `rows` is used by PROCESS/COUNT, `col`/`first`/
 * `count` by READ/LOAD/CLEAR. */
void pr_kernel(const pr_kw *in, pr_kw *out, const pr_kw *cfg, uint64_t *newv, pr_kw *xfer,
               uint32_t mode, uint32_t rows, uint32_t col, uint32_t first,
               uint32_t count PR_K_LANES(PR__KTAB_PARAM) PR_KSIM_PARAM);

#ifdef __cplusplus
}
#endif

#endif
