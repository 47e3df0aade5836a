/*
 * cpu_backend.c — the default backend: the operator dataflow on CPU threads.
 *
 * Shape (chosen for throughput, see DESIGN.md "Numbers to design for"):
 * - Column-major, operator-at-a-time: each operator is one tight loop over a
 *   column of the block, so loops stay simple enough for the compiler and the
 *   per-operator time can be measured (pr_mono_ns around each loop).
 * - Two phases per block. Phase 1 (parallel by column): Hex2Int (+ validation)
 *   and Modulus for every sparse column into a u64 scratch column, and the
 *   dense operators. Then, serially, the per-column "bad hex" bits are OR-ed
 *   into the row reject bitmap. Phase 2 (parallel by column): VocabGen+Map,
 *   skipping rejected rows, so a rejected row never touches vocabulary state.
 * - One column is one task, run start to end by one worker in row order, so
 *   outputs and vocabularies are identical for any thread count; no locks on
 *   the hot path (tasks are claimed through an atomic counter, see pool.c).
 * - Hex2Int is SWAR: a 16-byte slot is two 8-byte words, validated and
 *   nibble-packed with a handful of word operations, no per-character branch.
 * - Modulus uses a precomputed multiplicative inverse (a mask for powers of
 *   two), not a division.
 * - After Modulus the domain is [0, M): when M <= 2^24 the vocabulary is a
 *   direct-indexed array (index + 1, zero = no index, so it lives in
 *   untouched zero pages until used); otherwise an open-addressing hash table
 *   (linear probing, multiplicative hash, grown at 50% load). Counts are kept
 *   only when min_count > 1.
 * - Logarithm is log1p in double, rounded to float; integer inputs below 65536
 *   (most Criteo counts) come from a table holding exactly those results.
 * - Bounded vocabularies (eviction lru/lfu/ttl) take a separate per-value
 *   path (pr__ev_lookup), so columns without eviction keep the loops above
 *   unchanged. Per index "slot" (index - base) they keep the record clock of
 *   the last lookup and a use count; lru/ttl keep a doubly linked list (most
 *   recent first), lfu a min-heap on (count, last lookup) which is a total
 *   order, so the victim does not depend on the heap's layout and a snapshot
 *   restores the exact same future choices. The clock is the column's count
 *   of lookups: decisions follow the data order, never time or threads. An
 *   evicted value's index goes straight to the new value (no free list), and
 *   the assignment is logged for the engine's journal and notices.
 * - ttl by event time (ttl_s) adds a second clock per column, the newest
 *   event_time_ms it looked up (a maximum, so late rows never move it back),
 *   and stamps each slot with it at every lookup. The list stays ordered by
 *   the record clock; since the stamps only grow along it, the tail also has
 *   the oldest stamp, so checking the tail alone is still exact.
 * - A bounded column in a shared vocabulary (frozen): processing only looks
 *   up (pr__ev_peek) and counts uses per slot in pend_use, leaving clock and
 *   statistics to the log (vocab_apply evicts through pr__ev_lookup,
 *   vocab_touch records the drained uses), so replicas stay identical.
 * - A block in two halves (pr_engine_process_par/_seq, the offline driver's
 *   many blocks at once): everything but first appearances on any thread,
 *   then the values without an index per column, in order (see "a block in
 *   two halves" below).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_int.h"
#include "pr_clock.h"
#include "pr_hex.h"

#define PR__DIRECT_MAX  (1ULL << 24)
#define PR__LOG_TBL     65536
#define PR__PREFETCH    16
#define PR__CHUNK       4096 /* rows per chunk: one column's values stay in L1/L2 */
#define PR__HSLOT_EMPTY INT64_MIN

/* ---------------------------------------------------------------- helpers */

static float pr__log1p_tbl[PR__LOG_TBL];
static pthread_once_t pr__log1p_once = PTHREAD_ONCE_INIT;

static void pr__log1p_init(void)
{
    for (int i = 0; i < PR__LOG_TBL; i++)
        pr__log1p_tbl[i] = (float)log1p((double)i);
}

/* Logarithm of one value: integers in [0, 65536) from the table (so -0.0
 * gives +0.0f, as the hls kernel does), the rest through log1p. */
static inline float pr__log1p_one(double y)
{
    if (y >= 0 && y < PR__LOG_TBL) {
        int i = (int)y;
        if ((double)i == y)
            return pr__log1p_tbl[i];
    }
    return (float)log1p(y);
}

/* Logarithm of a column; with n2z, Neg2Zero first (x < 0 -> 0) in the same
 * pass, so the common dense pipeline [neg2zero, log1p] reads its input once
 * and needs no temporary column. */
static void pr__log1p_col(const double *src, float *o, uint32_t n, bool n2z)
{
    if (n2z)
        for (uint32_t r = 0; r < n; r++)
            o[r] = pr__log1p_one(src[r] < 0 ? 0.0 : src[r]);
    else
        for (uint32_t r = 0; r < n; r++)
            o[r] = pr__log1p_one(src[r]);
}

/* ---------------------------------------------------------------- modulus */

typedef struct pr__divider {
    uint64_t d;
    uint64_t magic;
    uint8_t shift;
    uint8_t kind; /* 0: power of two (mask), 1: mulhi >> shift, 2: mulhi with add */
} pr__divider;

static void pr__divider_init(pr__divider *dv, uint64_t d)
{
    memset(dv, 0, sizeof(*dv));
    dv->d = d;
    if ((d & (d - 1)) == 0) {
        dv->kind = 0;
        return;
    }
    int l = 63 - __builtin_clzll(d);
    unsigned __int128 num = (unsigned __int128)1 << (64 + l);
    uint64_t m = (uint64_t)(num / d);
    uint64_t rem = (uint64_t)(num % d);
    uint64_t e = d - rem;
    if (e < (1ULL << l)) {
        dv->magic = m + 1;
        dv->shift = (uint8_t)l;
        dv->kind = 1;
    } else {
        m += m; /* wraps: the 65th bit is implicit in the add step */
        uint64_t twice = rem + rem;
        if (twice >= d || twice < rem)
            m += 1;
        dv->magic = m + 1;
        dv->shift = (uint8_t)l;
        dv->kind = 2;
    }
}

static inline uint64_t pr__mulhi(uint64_t a, uint64_t b)
{
    return (uint64_t)(((unsigned __int128)a * b) >> 64);
}

/* v[r] = src[r] mod d (src may be v: in place; a separate src saves the copy
 * of a column decoders already parsed to uint64). */
static void pr__modulus_col(const pr__divider *dv, const uint64_t *src, uint64_t *v, uint32_t rows)
{
    uint64_t d = dv->d, magic = dv->magic;
    unsigned sh = dv->shift;
    switch (dv->kind) {
    case 0: {
        uint64_t mask = d - 1;
        for (uint32_t r = 0; r < rows; r++)
            v[r] = src[r] & mask;
        break;
    }
    case 1:
        for (uint32_t r = 0; r < rows; r++) {
            uint64_t x = src[r];
            uint64_t q = pr__mulhi(x, magic) >> sh;
            v[r] = x - q * d;
        }
        break;
    default:
        for (uint32_t r = 0; r < rows; r++) {
            uint64_t x = src[r];
            uint64_t q = pr__mulhi(x, magic);
            q = (((x - q) >> 1) + q) >> sh;
            v[r] = x - q * d;
        }
        break;
    }
}

/* ---------------------------------------------------------------- hex2int */

/* pr_hex_valid8 / pr_hex_pack8 (common/include/pr_hex.h) are the SWAR forms the
 * vector loops fall back to; the SSE2/AVX2 loops below are engine-only. */

/* Rows of [r0, r1) (at most 64) whose slot holds a non-hex byte, as a bit
 * mask relative to r0: the row-by-row re-check the vector loops fall back to
 * only when their running check saw a bad byte somewhere in the group. */
static inline uint64_t pr__hex_bad_rows(const char *slots, uint32_t r0, uint32_t r1)
{
    uint64_t badw = 0;
    for (uint32_t r = r0; r < r1; r++) {
        uint64_t a, b;
        memcpy(&a, slots + (size_t)r * PR_HEX_SLOT, 8);
        memcpy(&b, slots + (size_t)r * PR_HEX_SLOT + 8, 8);
        if ((pr_hex_valid8(a) & pr_hex_valid8(b)) != PR_HEX_SPLAT(0x80))
            badw |= 1ULL << (r - r0);
    }
    return badw;
}

/* Parse a column of slots into v[], set bit r of bad[] for invalid slots.
 * SSE2 (x86-64 baseline, so no dispatch): one 16-byte slot per register;
 * validity is AND-ed over 64 rows and only a failing group is re-checked
 * row by row with the SWAR helpers. Elsewhere: the SWAR form. */
#if defined(__SSE2__)
#include <immintrin.h>
static void pr__hex2int_col(const char *slots, uint64_t *v, uint32_t rows, uint64_t *bad)
{
    const __m128i lo0 = _mm_set1_epi8('0' - 1), hi9 = _mm_set1_epi8('9' + 1);
    const __m128i loa = _mm_set1_epi8('a' - 1), hif = _mm_set1_epi8('f' + 1);
    const __m128i case20 = _mm_set1_epi8(0x20), m0f = _mm_set1_epi8(0x0f), nine = _mm_set1_epi8(9);
    const __m128i m00ff = _mm_set1_epi16(0x00ff);
    size_t words = pr_bitmap_words(rows);
    for (size_t w = 0; w < words; w++) {
        uint32_t r0 = (uint32_t)(w * 64), r1 = r0 + 64 < rows ? r0 + 64 : rows;
        __m128i ok = _mm_set1_epi8(-1);
        for (uint32_t r = r0; r < r1; r++) {
            __m128i x = _mm_load_si128((const __m128i *)(slots + (size_t)r * PR_HEX_SLOT));
            __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(x, lo0), _mm_cmpgt_epi8(hi9, x));
            __m128i y = _mm_or_si128(x, case20);
            __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(y, loa), _mm_cmpgt_epi8(hif, y));
            ok = _mm_and_si128(ok, _mm_or_si128(digit, letter));
            __m128i nib = _mm_add_epi8(_mm_and_si128(x, m0f), _mm_and_si128(letter, nine));
            /* 16-bit lane = d0 | d1 << 8 (d0 more significant) -> d0 << 4 | d1 */
            __m128i p =
                _mm_and_si128(_mm_or_si128(_mm_slli_epi16(nib, 4), _mm_srli_epi16(nib, 8)), m00ff);
            p = _mm_packus_epi16(p, p);
            v[r] = __builtin_bswap64((uint64_t)_mm_cvtsi128_si64(p));
        }
        uint64_t badw = 0;
        if (_mm_movemask_epi8(ok) != 0xffff)
            badw |= pr__hex_bad_rows(slots, r0, r1);
        bad[w] = badw;
    }
}

/* AVX2 form, chosen at run time when the CPU has it (the build stays
 * baseline x86-64): two slots per 256-bit register, digit pairs joined with
 * maddubs and the 8 bytes of each value reversed into place with one pshufb. */
__attribute__((target("avx2"))) static void pr__hex2int_col_avx2(const char *slots, uint64_t *v,
                                                                 uint32_t rows, uint64_t *bad)
{
    const __m256i lo0 = _mm256_set1_epi8('0' - 1), hi9 = _mm256_set1_epi8('9' + 1);
    const __m256i loa = _mm256_set1_epi8('a' - 1), hif = _mm256_set1_epi8('f' + 1);
    const __m256i case20 = _mm256_set1_epi8(0x20), m0f = _mm256_set1_epi8(0x0f);
    const __m256i nine = _mm256_set1_epi8(9), w16_1 = _mm256_set1_epi16(0x0110);
    /* 16-bit lanes hold byte values; take their low bytes last-first */
    const __m256i rev = _mm256_setr_epi8(14, 12, 10, 8, 6, 4, 2, 0, -1, -1, -1, -1, -1, -1, -1, -1,
                                         14, 12, 10, 8, 6, 4, 2, 0, -1, -1, -1, -1, -1, -1, -1, -1);
    size_t words = pr_bitmap_words(rows);
    for (size_t w = 0; w < words; w++) {
        uint32_t r0 = (uint32_t)(w * 64), r1 = r0 + 64 < rows ? r0 + 64 : rows;
        __m256i ok = _mm256_set1_epi8(-1);
        uint32_t r = r0;
        for (; r + 2 <= r1; r += 2) {
            __m256i x = _mm256_load_si256((const __m256i *)(slots + (size_t)r * PR_HEX_SLOT));
            __m256i digit = _mm256_and_si256(_mm256_cmpgt_epi8(x, lo0), _mm256_cmpgt_epi8(hi9, x));
            __m256i y = _mm256_or_si256(x, case20);
            __m256i letter = _mm256_and_si256(_mm256_cmpgt_epi8(y, loa), _mm256_cmpgt_epi8(hif, y));
            ok = _mm256_and_si256(ok, _mm256_or_si256(digit, letter));
            __m256i nib = _mm256_add_epi8(_mm256_and_si256(x, m0f), _mm256_and_si256(letter, nine));
            __m256i pairs = _mm256_maddubs_epi16(nib, w16_1); /* d0 * 16 + d1 */
            __m256i val = _mm256_shuffle_epi8(pairs, rev);
            val = _mm256_permute4x64_epi64(val, 0x08); /* qwords 0 and 2 to the low half */
            _mm_storeu_si128((__m128i *)(v + r), _mm256_castsi256_si128(val));
        }
        uint64_t badw = 0;
        if (r < r1) { /* odd tail row */
            uint64_t a, b;
            memcpy(&a, slots + (size_t)r * PR_HEX_SLOT, 8);
            memcpy(&b, slots + (size_t)r * PR_HEX_SLOT + 8, 8);
            v[r] = (pr_hex_pack8(a) << 32) | pr_hex_pack8(b);
            if ((pr_hex_valid8(a) & pr_hex_valid8(b)) != PR_HEX_SPLAT(0x80))
                badw |= 1ULL << (r - r0);
        }
        if ((uint32_t)_mm256_movemask_epi8(ok) != 0xffffffffu)
            badw |= pr__hex_bad_rows(slots, r0, r1);
        bad[w] = badw;
    }
}
/* Logarithm, 4 values at a time: when all 4 are table integers (the same
 * test as pr__log1p_one, lane by lane: truncate, convert back, compare; NaN
 * and out-of-range lanes fail it) one gather, else the scalar form. */
__attribute__((target("avx2"), always_inline)) static inline void
pr__log1p_avx2_body(const double *src, float *o, uint32_t n, const bool n2z)
{
    const __m256d zero = _mm256_setzero_pd(), lim = _mm256_set1_pd(PR__LOG_TBL);
    uint32_t r = 0;
    for (; r + 4 <= n; r += 4) {
        __m256d y = _mm256_loadu_pd(src + r);
        if (n2z) /* x < 0 -> 0, exactly as Neg2Zero: -0.0 and NaN stay */
            y = _mm256_blendv_pd(y, zero, _mm256_cmp_pd(y, zero, _CMP_LT_OQ));
        __m128i i = _mm256_cvttpd_epi32(y);
        __m256d ok = _mm256_and_pd(
            _mm256_cmp_pd(_mm256_cvtepi32_pd(i), y, _CMP_EQ_OQ),
            _mm256_and_pd(_mm256_cmp_pd(y, zero, _CMP_GE_OQ), _mm256_cmp_pd(y, lim, _CMP_LT_OQ)));
        if (__builtin_expect(_mm256_movemask_pd(ok) == 0xf, 1)) {
            _mm_storeu_ps(o + r, _mm_i32gather_ps(pr__log1p_tbl, i, 4));
        } else {
            for (uint32_t k = r; k < r + 4; k++)
                o[k] = pr__log1p_one(n2z && src[k] < 0 ? 0.0 : src[k]);
        }
    }
    for (; r < n; r++)
        o[r] = pr__log1p_one(n2z && src[r] < 0 ? 0.0 : src[r]);
}
__attribute__((target("avx2"))) static void pr__log1p_col_avx2(const double *src, float *o,
                                                               uint32_t n, bool n2z)
{
    if (n2z)
        pr__log1p_avx2_body(src, o, n, true);
    else
        pr__log1p_avx2_body(src, o, n, false);
}
#define PR__HAVE_AVX2_PATH 1
#else
static void pr__hex2int_col(const char *slots, uint64_t *v, uint32_t rows, uint64_t *bad)
{
    size_t words = pr_bitmap_words(rows);
    for (size_t w = 0; w < words; w++) {
        uint32_t r0 = (uint32_t)(w * 64), r1 = r0 + 64 < rows ? r0 + 64 : rows;
        uint64_t ok = PR_HEX_SPLAT(0x80);
        for (uint32_t r = r0; r < r1; r++) {
            uint64_t a, b;
            memcpy(&a, slots + (size_t)r * PR_HEX_SLOT, 8);
            memcpy(&b, slots + (size_t)r * PR_HEX_SLOT + 8, 8);
            ok &= pr_hex_valid8(a) & pr_hex_valid8(b);
            v[r] = (pr_hex_pack8(a) << 32) | pr_hex_pack8(b);
        }
        uint64_t badw = 0;
        if (ok != PR_HEX_SPLAT(0x80)) {
            for (uint32_t r = r0; r < r1; r++) {
                uint64_t a, b;
                memcpy(&a, slots + (size_t)r * PR_HEX_SLOT, 8);
                memcpy(&b, slots + (size_t)r * PR_HEX_SLOT + 8, 8);
                if ((pr_hex_valid8(a) & pr_hex_valid8(b)) != PR_HEX_SPLAT(0x80))
                    badw |= 1ULL << (r - r0);
            }
        }
        bad[w] = badw;
    }
}
#endif

/* ---------------------------------------------------------------- vocabulary */

typedef struct pr__hslot {
    uint64_t key;
    int64_t idx; /* >= 0 assigned, -1 pending (counted, no index), EMPTY */
} pr__hslot;

typedef struct pr__vcol {
    int64_t base;
    uint64_t cap; /* max indices including reserved ones */
    uint32_t min_count;
    bool counting; /* min_count > 1 */
    bool direct;
    uint64_t dom;   /* direct: domain size M */
    bool huge;      /* dmap, dcnt on huge pages (pr_engine_opts.huge_tables) */
    int32_t *dmap;  /* direct: [dom], index + 1; 0 = no index */
    uint32_t *dcnt; /* direct + counting: [dom] */
    pr__hslot *ht;  /* hash: [1 << hbits] */
    uint64_t *hcnt; /* hash + counting: parallel to ht */
    unsigned hbits;
    uint64_t hused;
    uint64_t *keys; /* value of index base+i, i < n */
    uint64_t n, keys_cap;
    bool frozen; /* shared vocabulary: lookups never insert or count (pr__vocab_peek) */
    /* bounded vocabularies (pr_vocab_eviction); slot = index - base */
    uint8_t evict;
    uint64_t ttl, decay;
    int64_t ttl_ms;       /* ttl by event time (ttl_s * 1000); 0 = by records */
    uint64_t clock;       /* lookups so far (the record clock) */
    int64_t clock_ms;     /* ttl_ms: newest event time looked up (the event clock) */
    uint64_t *last;       /* [slots] clock at the last lookup */
    int64_t *last_ms;     /* ttl_ms: [slots] event clock at the last lookup */
    uint32_t *ecnt;       /* [slots] lookups since admission (lfu: halved every decay) */
    int32_t *prev, *next; /* lru/ttl: list of slots, head = most recent */
    int32_t head, tail;   /* -1 when empty */
    int32_t *heap, *hpos; /* lfu: min-heap of slots on (ecnt, last), slot -> position */
    pr__vasg *log;        /* this block's assignments (pr_backend_ops.vocab_block_log) */
    size_t n_log, log_cap;
    /* bounded and shared (frozen): frozen lookups leave the statistics alone
     * and count uses here instead, for the log (pr_engine_vocab_drain_usage) */
    uint32_t *pend_use;   /* [slots] uses since the last drain, saturating */
    bool pend_any;        /* some pend_use[] may be non-zero */
    bool undec_oov;       /* frozen: a value without an index maps to OOV */
    uint64_t n_undec_oov; /* ... how many did in this process() call */
    /* Serving (pr_engine_vocab_serve): frozen, and a value without an index
     * (unseen, below min_count, or past a full dlrm table) maps to OOV, or
     * under dlrm (no OOV index) to `unseen`; counted in n_undec_oov. */
    bool serve;
    int64_t unseen;
} pr__vcol;

static inline uint64_t pr__hash(uint64_t k, unsigned bits)
{
    return (k * 0x9E3779B97F4A7C15ULL) >> (64 - bits);
}

static pr__hslot *pr__ht_find(const pr__vcol *vc, uint64_t key)
{
    uint64_t mask = (1ULL << vc->hbits) - 1;
    for (uint64_t i = pr__hash(key, vc->hbits);; i = (i + 1) & mask) {
        pr__hslot *s = &vc->ht[i];
        if (s->idx == PR__HSLOT_EMPTY)
            return NULL;
        if (s->key == key)
            return s;
    }
}

static int pr__ht_alloc(pr__vcol *vc, unsigned bits)
{
    size_t n = (size_t)1 << bits;
    pr__hslot *ht = malloc(n * sizeof(*ht));
    uint64_t *cnt = vc->counting ? calloc(n, sizeof(*cnt)) : NULL;
    if (!ht || (vc->counting && !cnt)) {
        free(ht);
        free(cnt);
        return PR_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        ht[i].idx = PR__HSLOT_EMPTY;
    free(vc->ht);
    free(vc->hcnt);
    vc->ht = ht;
    vc->hcnt = cnt;
    vc->hbits = bits;
    vc->hused = 0;
    return 0;
}

/* Insert a key known to be absent; returns its slot. */
static pr__hslot *pr__ht_put(pr__vcol *vc, uint64_t key, int64_t idx, uint64_t cnt)
{
    uint64_t mask = (1ULL << vc->hbits) - 1;
    uint64_t i = pr__hash(key, vc->hbits);
    while (vc->ht[i].idx != PR__HSLOT_EMPTY)
        i = (i + 1) & mask;
    vc->ht[i].key = key;
    vc->ht[i].idx = idx;
    if (vc->hcnt)
        vc->hcnt[i] = cnt;
    vc->hused++;
    return &vc->ht[i];
}

static int pr__ht_grow(pr__vcol *vc)
{
    pr__hslot *old = vc->ht;
    uint64_t *oldc = vc->hcnt;
    size_t n = (size_t)1 << vc->hbits;
    vc->ht = NULL;
    vc->hcnt = NULL;
    if (pr__ht_alloc(vc, vc->hbits + 1)) {
        vc->ht = old;
        vc->hcnt = oldc;
        return PR_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        if (old[i].idx != PR__HSLOT_EMPTY)
            pr__ht_put(vc, old[i].key, old[i].idx, oldc ? oldc[i] : 0);
    free(old);
    free(oldc);
    return 0;
}

/* Insert, growing first when at 50% load. NULL on allocation failure. */
static pr__hslot *pr__ht_insert(pr__vcol *vc, uint64_t key, int64_t idx, uint64_t cnt)
{
    if ((vc->hused + 1) * 2 > (1ULL << vc->hbits) && pr__ht_grow(vc))
        return NULL;
    return pr__ht_put(vc, key, idx, cnt);
}

static uint64_t *pr__ht_cnt(pr__vcol *vc, pr__hslot *s)
{
    return &vc->hcnt[s - vc->ht];
}

static int pr__keys_push(pr__vcol *vc, uint64_t v)
{
    if (vc->n == vc->keys_cap) {
        uint64_t nc = vc->keys_cap ? vc->keys_cap * 2 : 1024;
        uint64_t *k = realloc(vc->keys, nc * sizeof(*k));
        if (!k)
            return PR_ENOMEM;
        vc->keys = k;
        vc->keys_cap = nc;
    }
    vc->keys[vc->n++] = v;
    return 0;
}

static void pr__vcol_free(pr__vcol *vc)
{
    pr__table_free(vc->dmap, vc->dom * sizeof(int32_t), vc->huge);
    pr__table_free(vc->dcnt, vc->dom * sizeof(uint32_t), vc->huge);
    free(vc->ht);
    free(vc->hcnt);
    free(vc->keys);
    free(vc->last);
    free(vc->last_ms);
    free(vc->ecnt);
    free(vc->prev);
    free(vc->next);
    free(vc->heap);
    free(vc->hpos);
    free(vc->log);
    free(vc->pend_use);
    memset(vc, 0, sizeof(*vc));
}

/* Remove slot s from an open-addressing table (backward-shift deletion:
 * later entries of the probe run move up, so lookups need no tombstones). */
static void pr__ht_del(pr__vcol *vc, pr__hslot *s)
{
    uint64_t mask = (1ULL << vc->hbits) - 1;
    uint64_t i = (uint64_t)(s - vc->ht), j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (vc->ht[j].idx == PR__HSLOT_EMPTY)
            break;
        uint64_t k = pr__hash(vc->ht[j].key, vc->hbits);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        vc->ht[i] = vc->ht[j];
        if (vc->hcnt)
            vc->hcnt[i] = vc->hcnt[j];
        i = j;
    }
    vc->ht[i].idx = PR__HSLOT_EMPTY;
    if (vc->hcnt)
        vc->hcnt[i] = 0;
    vc->hused--;
}

static int pr__vcol_init(pr__vcol *vc, const pr_pipeline_spec *spec, uint32_t c, bool huge)
{
    memset(vc, 0, sizeof(*vc));
    vc->huge = huge;
    vc->base = pr__profile_base(spec->profile);
    vc->cap = pr__spec_col_capacity(spec, c);
    vc->min_count = spec->sparse[c].min_count;
    vc->counting = vc->min_count > 1;
    vc->evict = (uint8_t)spec->sparse[c].eviction;
    if (vc->evict) {
        size_t slots = (size_t)(vc->cap - (uint64_t)vc->base);
        vc->ttl = spec->sparse[c].ttl_records;
        vc->decay = spec->sparse[c].decay_records;
        if (vc->evict == PR_EVICT_TTL)
            vc->ttl_ms = (int64_t)spec->sparse[c].ttl_s * 1000; /* validated to fit */
        vc->head = vc->tail = -1;
        /* calloc: pages of slots never used cost no memory */
        vc->last = calloc(slots, sizeof(*vc->last));
        vc->ecnt = calloc(slots, sizeof(*vc->ecnt));
        vc->pend_use = calloc(slots, sizeof(*vc->pend_use));
        if (!vc->last || !vc->ecnt || !vc->pend_use)
            return PR_ENOMEM;
        if (vc->ttl_ms && !(vc->last_ms = calloc(slots, sizeof(*vc->last_ms))))
            return PR_ENOMEM;
        if (vc->evict == PR_EVICT_LFU) {
            vc->heap = calloc(slots, sizeof(*vc->heap));
            vc->hpos = calloc(slots, sizeof(*vc->hpos));
            if (!vc->heap || !vc->hpos)
                return PR_ENOMEM;
        } else {
            vc->prev = calloc(slots, sizeof(*vc->prev));
            vc->next = calloc(slots, sizeof(*vc->next));
            if (!vc->prev || !vc->next)
                return PR_ENOMEM;
        }
    }
    uint64_t m = spec->sparse[c].modulus;
    vc->direct = pr_spec_has_op(spec, PR_OP_MODULUS) && m <= PR__DIRECT_MAX;
    if (vc->direct) {
        vc->dom = m;
        vc->dmap = pr__table_alloc(m * sizeof(int32_t), vc->huge);
        if (!vc->dmap)
            return PR_ENOMEM;
        if (vc->counting && !(vc->dcnt = pr__table_alloc(m * sizeof(uint32_t), vc->huge)))
            return PR_ENOMEM;
        return 0;
    }
    return pr__ht_alloc(vc, 10);
}

#define PR__FULL      (-1)
#define PR__NOMEM     (-2)
#define PR__UNDECIDED (-3)

/* Frozen lookup (a vocabulary decided elsewhere, pr_engine_vocab_set_shared):
 * the value's index; OOV when it has none yet but cannot get one here (below
 * min_count, or the table is full: PR__FULL under dlrm); PR__UNDECIDED when
 * it was never seen at all (the caller should have had it decided first). */
static int64_t pr__vocab_peek_raw(const pr__vcol *vc, uint64_t v)
{
    bool full = (uint64_t)vc->base + vc->n >= vc->cap;
    if (vc->direct) {
        if (vc->dmap[v])
            return (int64_t)vc->dmap[v] - 1;
        if (full)
            return vc->base ? PR_INDEX_OOV : PR__FULL;
        return vc->counting && vc->dcnt[v] ? PR_INDEX_OOV : PR__UNDECIDED;
    }
    const pr__hslot *s = pr__ht_find(vc, v);
    if (s && s->idx >= 0)
        return s->idx;
    if (full)
        return vc->base ? PR_INDEX_OOV : PR__FULL;
    return s ? PR_INDEX_OOV : PR__UNDECIDED;
}

/* pr__vocab_peek_raw, and in serving mode an answer for every value. */
static int64_t pr__vocab_peek(pr__vcol *vc, uint64_t v)
{
    int64_t i = pr__vocab_peek_raw(vc, v);
    if (!vc->serve)
        return i;
    if (i == PR__UNDECIDED || i == PR__FULL) {
        vc->n_undec_oov++;
        return vc->base ? PR_INDEX_OOV : vc->unseen;
    }
    if (i == PR_INDEX_OOV && vc->base)
        vc->n_undec_oov++; /* below min_count, or a full table */
    return i;
}

/* The value's own index (not OOV), or -1. */
static int64_t pr__vocab_own(const pr__vcol *vc, uint64_t v)
{
    if (vc->direct)
        return (int64_t)vc->dmap[v] - 1;
    const pr__hslot *s = pr__ht_find(vc, v);
    return s && s->idx >= 0 ? s->idx : -1;
}

/* Has a value without an index been counted (min_count > 1, still below it)? */
static bool pr__vocab_counted(const pr__vcol *vc, uint64_t v)
{
    if (!vc->counting)
        return false;
    if (vc->direct)
        return vc->dcnt[v] != 0;
    return pr__ht_find(vc, v) != NULL;
}

/* The general lookup-or-insert for one value (every case: direct or hash,
 * counting or not, two-pass or streaming, table full). Returns the index to
 * output, PR__FULL when a dlrm table is full, PR__NOMEM. */
static int64_t pr__vocab_one(pr__vcol *vc, uint64_t v, bool streaming)
{
    if (vc->frozen)
        return pr__vocab_peek(vc, v);
    int64_t oov = vc->base ? PR_INDEX_OOV : PR__FULL;
    bool room = (uint64_t)vc->base + vc->n < vc->cap;
    if (vc->direct) {
        int64_t i = (int64_t)vc->dmap[v] - 1;
        if (vc->counting && streaming && vc->dcnt[v] != UINT32_MAX)
            vc->dcnt[v]++;
        if (i >= 0)
            return i;
        if (vc->counting && vc->dcnt[v] < vc->min_count)
            return PR_INDEX_OOV;
        if (!room)
            return oov;
        if (pr__keys_push(vc, v))
            return PR__NOMEM;
        i = vc->base + (int64_t)vc->n - 1;
        /* atomic: pr__split_lookup reads dmap from other threads meanwhile */
        __atomic_store_n(&vc->dmap[v], (int32_t)(i + 1), __ATOMIC_RELAXED);
        return i;
    }
    pr__hslot *s = pr__ht_find(vc, v);
    if (s && s->idx >= 0) {
        if (vc->counting && streaming)
            (*pr__ht_cnt(vc, s))++;
        return s->idx;
    }
    if (vc->counting) {
        if (!s) {
            if (!streaming)
                return PR_INDEX_OOV; /* never counted: below any threshold */
            if (!(s = pr__ht_insert(vc, v, -1, 0)))
                return PR__NOMEM;
        }
        uint64_t *c = pr__ht_cnt(vc, s);
        if (streaming)
            (*c)++;
        if (*c < vc->min_count)
            return PR_INDEX_OOV;
        if (!room)
            return oov;
        if (pr__keys_push(vc, v))
            return PR__NOMEM;
        s->idx = vc->base + (int64_t)vc->n - 1;
        return s->idx;
    }
    if (!room)
        return oov;
    if (pr__keys_push(vc, v))
        return PR__NOMEM;
    int64_t i = vc->base + (int64_t)vc->n - 1;
    if (!pr__ht_insert(vc, v, i, 0)) {
        vc->n--;
        return PR__NOMEM;
    }
    return i;
}

/* Count one value (two-pass, first pass). */
static int pr__vocab_count_one(pr__vcol *vc, uint64_t v)
{
    if (vc->direct) {
        if (vc->dcnt[v] != UINT32_MAX)
            vc->dcnt[v]++;
        return 0;
    }
    pr__hslot *s = pr__ht_find(vc, v);
    if (!s && !(s = pr__ht_insert(vc, v, -1, 0)))
        return PR_ENOMEM;
    (*pr__ht_cnt(vc, s))++;
    return 0;
}

/* ---------------------------------------------------------------- bounded vocabularies */

/* lru/ttl list: head = most recently used. */
static void pr__lru_unlink(pr__vcol *vc, int32_t s)
{
    int32_t p = vc->prev[s], n = vc->next[s];
    if (p >= 0)
        vc->next[p] = n;
    else
        vc->head = n;
    if (n >= 0)
        vc->prev[n] = p;
    else
        vc->tail = p;
}

static void pr__lru_push_front(pr__vcol *vc, int32_t s)
{
    vc->prev[s] = -1;
    vc->next[s] = vc->head;
    if (vc->head >= 0)
        vc->prev[vc->head] = s;
    vc->head = s;
    if (vc->tail < 0)
        vc->tail = s;
}

/* lfu heap order: fewer uses first, then older last lookup (unique per slot). */
static inline bool pr__lfu_less(const pr__vcol *vc, int32_t a, int32_t b)
{
    if (vc->ecnt[a] != vc->ecnt[b])
        return vc->ecnt[a] < vc->ecnt[b];
    return vc->last[a] < vc->last[b];
}

static void pr__lfu_set(pr__vcol *vc, size_t pos, int32_t s)
{
    vc->heap[pos] = s;
    vc->hpos[s] = (int32_t)pos;
}

static void pr__lfu_up(pr__vcol *vc, size_t pos)
{
    int32_t s = vc->heap[pos];
    while (pos > 0) {
        size_t par = (pos - 1) / 2;
        if (!pr__lfu_less(vc, s, vc->heap[par]))
            break;
        pr__lfu_set(vc, pos, vc->heap[par]);
        pos = par;
    }
    pr__lfu_set(vc, pos, s);
}

static void pr__lfu_down(pr__vcol *vc, size_t pos)
{
    size_t n = vc->n;
    int32_t s = vc->heap[pos];
    for (;;) {
        size_t l = 2 * pos + 1, m = pos;
        int32_t best = s;
        if (l < n && pr__lfu_less(vc, vc->heap[l], best))
            m = l, best = vc->heap[l];
        if (l + 1 < n && pr__lfu_less(vc, vc->heap[l + 1], best))
            m = l + 1, best = vc->heap[l + 1];
        if (m == pos)
            break;
        pr__lfu_set(vc, pos, best);
        pos = m;
    }
    pr__lfu_set(vc, pos, s);
}

static void pr__lfu_heapify(pr__vcol *vc)
{
    for (size_t i = vc->n / 2; i-- > 0;)
        pr__lfu_down(vc, i);
}

/* Every decay lookups all counts halve; (ecnt, last) ties change, so the
 * heap is rebuilt (O(n) once per `decay` lookups). */
static void pr__lfu_decay(pr__vcol *vc)
{
    for (uint64_t i = 0; i < vc->n; i++)
        vc->ecnt[i] >>= 1;
    pr__lfu_heapify(vc);
}

/* Rebuild the eviction order of a column from last/ecnt (after a load). */
static int pr__ev_rebuild(pr__vcol *vc)
{
    if (vc->evict == PR_EVICT_LFU) {
        for (uint64_t i = 0; i < vc->n; i++)
            pr__lfu_set(vc, i, (int32_t)i);
        pr__lfu_heapify(vc);
        return 0;
    }
    int32_t *order = malloc((vc->n ? vc->n : 1) * sizeof(*order));
    if (!order)
        return PR_ENOMEM;
    for (uint64_t i = 0; i < vc->n; i++)
        order[i] = (int32_t)i;
    /* push oldest first, so the newest ends at the head: sort slots by last
     * lookup (unique per slot), a shell sort */
    const uint64_t *last = vc->last;
    size_t n = vc->n;
    for (size_t gap = n / 2; gap > 0; gap /= 2)
        for (size_t i = gap; i < n; i++) {
            int32_t t = order[i];
            size_t j = i;
            while (j >= gap && last[order[j - gap]] > last[t]) {
                order[j] = order[j - gap];
                j -= gap;
            }
            order[j] = t;
        }
    vc->head = vc->tail = -1;
    for (size_t i = 0; i < n; i++)
        pr__lru_push_front(vc, order[i]);
    free(order);
    return 0;
}

/* A looked-up value that has an index: record `uses` uses at clock `now`. */
static inline void pr__ev_touch_n(pr__vcol *vc, int32_t s, uint64_t now, uint32_t uses)
{
    vc->last[s] = now;
    if (vc->last_ms)
        vc->last_ms[s] = vc->clock_ms;
    vc->ecnt[s] = uses > UINT32_MAX - vc->ecnt[s] ? UINT32_MAX : vc->ecnt[s] + uses;
    if (vc->evict == PR_EVICT_LFU) {
        pr__lfu_down(vc, (size_t)vc->hpos[s]);
    } else if (vc->head != s) {
        pr__lru_unlink(vc, s);
        pr__lru_push_front(vc, s);
    }
}

static inline void pr__ev_touch(pr__vcol *vc, int32_t s, uint64_t now)
{
    pr__ev_touch_n(vc, s, now, 1);
}

/* The slot to recycle, or -1 (ttl: the least recently used value is younger
 * than ttl lookups, or than ttl_ms of event time). */
static inline int32_t pr__ev_victim(const pr__vcol *vc, uint64_t now)
{
    if (vc->evict == PR_EVICT_LFU)
        return vc->n ? vc->heap[0] : -1;
    int32_t t = vc->tail;
    if (t >= 0 && vc->evict == PR_EVICT_TTL &&
        (vc->ttl_ms ? vc->clock_ms - vc->last_ms[t] < vc->ttl_ms : now - vc->last[t] < vc->ttl))
        return -1;
    return t;
}

static int pr__ev_log(pr__vcol *vc, uint32_t row, bool recycled, int64_t i, uint64_t v,
                      uint64_t now)
{
    if (vc->n_log == vc->log_cap) {
        size_t nc = vc->log_cap ? vc->log_cap * 2 : 256;
        pr__vasg *p = realloc(vc->log, nc * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        vc->log = p;
        vc->log_cap = nc;
    }
    vc->log[vc->n_log++] = (pr__vasg){row, recycled, i, v, now, vc->clock_ms};
    return 0;
}

/* One record of a bounded column: the clock advances (lfu: counts halve
 * every `decay` records). Returns the new clock. */
static inline uint64_t pr__ev_tick(pr__vcol *vc)
{
    uint64_t now = ++vc->clock;
    if (vc->evict == PR_EVICT_LFU && vc->decay && now % vc->decay == 0)
        pr__lfu_decay(vc);
    return now;
}

/* Lookup-or-insert in a bounded column (block row `row`, for the log; `ms`
 * its event time, read only by ttl_ms columns). Returns the index, OOV,
 * PR__FULL (dlrm, ttl with no expired value: not reachable, validation needs
 * profile default for ttl) or PR__NOMEM. */
static int64_t pr__ev_lookup(pr__vcol *vc, uint64_t v, uint32_t row, int64_t ms)
{
    if (ms > vc->clock_ms)
        vc->clock_ms = ms; /* the newest event time so far: late rows keep it */
    uint64_t now = pr__ev_tick(vc);
    pr__hslot *s = NULL;
    int64_t i;
    if (vc->direct) {
        i = (int64_t)vc->dmap[v] - 1;
    } else {
        s = pr__ht_find(vc, v);
        i = s && s->idx >= 0 ? s->idx : -1;
    }
    if (i >= 0) {
        pr__ev_touch(vc, (int32_t)(i - vc->base), now);
        return i;
    }
    if (vc->counting) { /* min_count admission, as without eviction */
        if (vc->direct) {
            if (vc->dcnt[v] != UINT32_MAX)
                vc->dcnt[v]++;
            if (vc->dcnt[v] < vc->min_count)
                return PR_INDEX_OOV;
        } else {
            if (!s && !(s = pr__ht_insert(vc, v, -1, 0)))
                return PR__NOMEM;
            if (++*pr__ht_cnt(vc, s) < vc->min_count)
                return PR_INDEX_OOV;
        }
    }
    int32_t slot;
    bool recycled = false;
    if ((uint64_t)vc->base + vc->n < vc->cap) {
        if (pr__keys_push(vc, v))
            return PR__NOMEM;
        slot = (int32_t)(vc->n - 1);
        if (vc->evict == PR_EVICT_LFU)
            pr__lfu_set(vc, (size_t)slot, slot); /* placed below, with its key */
    } else {
        slot = pr__ev_victim(vc, now);
        if (slot < 0)
            return vc->base ? PR_INDEX_OOV : PR__FULL;
        recycled = true;
        vc->pend_use[slot] = 0; /* uses of the evicted value, not of the new one */
        uint64_t old = vc->keys[slot];
        if (vc->direct) {
            vc->dmap[old] = 0;
            if (vc->counting)
                vc->dcnt[old] = 0; /* it must earn its admission again */
        } else {
            pr__ht_del(vc, pr__ht_find(vc, old));
        }
        vc->keys[slot] = v;
        if (vc->evict != PR_EVICT_LFU)
            pr__lru_unlink(vc, slot);
    }
    i = vc->base + slot;
    if (vc->direct) {
        vc->dmap[v] = (int32_t)(i + 1);
    } else if (vc->counting) {
        pr__ht_find(vc, v)->idx = i; /* its pending slot (may have moved) */
    } else if (!pr__ht_insert(vc, v, i, 0)) {
        return PR__NOMEM;
    }
    vc->last[slot] = now;
    if (vc->last_ms)
        vc->last_ms[slot] = vc->clock_ms;
    vc->ecnt[slot] = 1;
    if (vc->evict == PR_EVICT_LFU) {
        size_t pos = (size_t)vc->hpos[slot];
        pr__lfu_up(vc, pos);
        pr__lfu_down(vc, (size_t)vc->hpos[slot]);
    } else {
        pr__lru_push_front(vc, slot);
    }
    if (pr__ev_log(vc, row, recycled, i, v, now))
        return PR__NOMEM;
    return i;
}

/* Frozen lookup in a bounded column (shared vocabulary): only the log may
 * change the statistics and the clock (pr_engine_vocab_apply/touch), so that
 * replicas stay identical; a use is counted in pend_use for the log instead.
 * A value without an index is PR__UNDECIDED even in a full table (the log
 * may evict to make room), OOV while min_count is still counting it, and OOV
 * (counted) under undec_oov. Serving counts the min_count case too, and
 * under dlrm answers `unseen`: PR_INDEX_OOV (1) is a value's index there. */
static int64_t pr__ev_peek(pr__vcol *vc, uint64_t v)
{
    int64_t i = pr__vocab_own(vc, v);
    if (i >= 0 && vc->serve) /* serving: a use for nobody's eviction order */
        return i;
    if (i >= 0) {
        uint32_t *u = &vc->pend_use[i - vc->base];
        if (*u != UINT32_MAX)
            (*u)++;
        vc->pend_any = true;
        return i;
    }
    if (pr__vocab_counted(vc, v)) {
        vc->n_undec_oov += vc->serve;
        return PR_INDEX_OOV;
    }
    if (vc->undec_oov) {
        vc->n_undec_oov++;
        return vc->serve && !vc->base ? vc->unseen : PR_INDEX_OOV;
    }
    return PR__UNDECIDED;
}

/* Map a bounded column's chunk (rows row0.. of the block; ms: their event
 * times, NULL unless the column evicts by event time). */
static int64_t pr__vocab_col_ev(pr__vcol *vc, const uint64_t *vals, uint32_t rows,
                                const uint64_t *rej, const uint64_t *miss, const int64_t *ms,
                                void *outp, int width, uint32_t row0, int *err)
{
    int32_t *o32 = outp;
    int64_t *o64 = outp;
    for (uint32_t r = 0; r < rows; r++) {
        uint64_t skip = (rej ? rej[r / 64] : 0) | (miss ? miss[r / 64] : 0);
        int64_t i = 0;
        if (!((skip >> (r % 64)) & 1)) {
            i = vc->frozen ? pr__ev_peek(vc, vals[r])
                           : pr__ev_lookup(vc, vals[r], row0 + r, ms ? ms[r] : 0);
            if (i < 0) {
                *err = (int)i;
                return r;
            }
        }
        if (width == 4)
            o32[r] = (int32_t)i;
        else
            o64[r] = i;
    }
    return -1;
}

/* Map a column. skip(w) = rows to leave alone (output 0). Returns -1 when all
 * rows were done, else the failing row (and *err). Inlined twice, once per
 * output width. */
static inline __attribute__((always_inline)) int64_t
pr__vocab_col(pr__vcol *vc, const uint64_t *vals, uint32_t rows, const uint64_t *rej,
              const uint64_t *miss, void *outp, int width, bool streaming, int *err)
{
    int32_t *o32 = outp;
    int64_t *o64 = outp;
    size_t words = pr_bitmap_words(rows);
    bool fast = vc->direct && !vc->counting;
    for (size_t w = 0; w < words; w++) {
        uint32_t r0 = (uint32_t)(w * 64), r1 = r0 + 64 < rows ? r0 + 64 : rows;
        uint64_t skip = (rej ? rej[w] : 0) | (miss ? miss[w] : 0);
        if (fast && !skip) {
            const int32_t *dmap = vc->dmap;
            for (uint32_t r = r0; r < r1; r++) {
                /* the table outgrows L2 at large moduli: hide the miss */
                if (r + PR__PREFETCH < rows)
                    __builtin_prefetch(&dmap[vals[r + PR__PREFETCH]]);
                int64_t i = (int64_t)dmap[vals[r]] - 1;
                if (__builtin_expect(i < 0, 0)) {
                    i = pr__vocab_one(vc, vals[r], streaming);
                    if (i < 0) {
                        *err = (int)i;
                        return r;
                    }
                }
                if (width == 4)
                    o32[r] = (int32_t)i;
                else
                    o64[r] = i;
            }
            continue;
        }
        for (uint32_t r = r0; r < r1; r++) {
            int64_t i = 0;
            if (!((skip >> (r - r0)) & 1)) {
                i = pr__vocab_one(vc, vals[r], streaming);
                if (i < 0) {
                    *err = (int)i;
                    return r;
                }
            }
            if (width == 4)
                o32[r] = (int32_t)i;
            else
                o64[r] = i;
        }
    }
    return -1;
}

static int64_t pr__vocab_col32(pr__vcol *vc, const uint64_t *vals, uint32_t rows,
                               const uint64_t *rej, const uint64_t *miss, void *out, bool streaming,
                               int *err)
{
    return pr__vocab_col(vc, vals, rows, rej, miss, out, 4, streaming, err);
}

static int64_t pr__vocab_col64(pr__vcol *vc, const uint64_t *vals, uint32_t rows,
                               const uint64_t *rej, const uint64_t *miss, void *out, bool streaming,
                               int *err)
{
    return pr__vocab_col(vc, vals, rows, rej, miss, out, 8, streaming, err);
}

/* ---------------------------------------------------------------- backend */

typedef struct pr__wstats {
    uint64_t ns[PR_OP__COUNT];
    uint64_t vals[PR_OP__COUNT];
} __attribute__((aligned(64))) pr__wstats;

struct pr_backend {
    pr_pipeline_spec spec;
    uint8_t width;
    bool has[PR_OP__COUNT];
    bool two_pass; /* two-pass mode with some column counting */
    bool evicting; /* some column has eviction lru/lfu/ttl */
    bool serving;  /* pr_engine_vocab_serve: lookups only, every value answered */
    bool count_done;
    pr__pool *pool;
    int threads;
    bool huge;      /* pr_engine_opts.huge_tables */
    uint32_t chunk; /* rows per chunk: a multiple of 64 */
    pr__vcol *cols;
    pr__divider *div;
    uint32_t *order2; /* vocab columns, most expensive first */
    uint32_t n_order2;
    /* scratch: block-sized bitmaps, chunk-sized value columns */
    uint32_t scap;
    uint64_t *vals;    /* [n_sparse][chunk] values after Hex2Int/Modulus */
    uint64_t *bad;     /* [n_sparse][words(scap)] */
    uint64_t *rej;     /* [words(scap)] */
    double *dtmp;      /* [threads][chunk] */
    pr__wstats *ws;    /* [threads] */
    int64_t *fail_row; /* [n_sparse] */
    int *fail_err;     /* [n_sparse] */
    /* the block and chunk being worked on */
    const pr_block *in;
    pr_out *out;
    bool counting_pass;
    uint32_t r0, r1; /* current chunk (pr__chunk_task) */
    uint32_t n_rejected;
    void (*hex2int)(const char *slots, uint64_t *v, uint32_t rows, uint64_t *bad);
    void (*log1p)(const double *src, float *o, uint32_t n, bool n2z);
};

static void pr__cpu_free(pr_backend *be)
{
    if (!be)
        return;
    pr__pool_free(be->pool);
    if (be->cols)
        for (uint32_t c = 0; c < be->spec.n_sparse; c++)
            pr__vcol_free(&be->cols[c]);
    free(be->cols);
    free(be->div);
    free(be->order2);
    pr__free_aligned(be->vals);
    pr__free_aligned(be->bad);
    pr__free_aligned(be->rej);
    pr__free_aligned(be->dtmp);
    pr__free_aligned(be->ws);
    free(be->fail_row);
    free(be->fail_err);
    free(be);
}

static uint64_t pr__col_cost(const pr__vcol *vc)
{
    return vc->direct ? vc->dom : UINT64_MAX / 2 + (vc->counting ? 1 : 0);
}

/* Rows per chunk: PR_ENGINE_CHUNK_ROWS (a tuning knob for bench runs) or the
 * default, rounded up to a multiple of 64. */
static uint32_t pr__chunk_rows(void)
{
    const char *s = getenv("PR_ENGINE_CHUNK_ROWS");
    unsigned long v = s ? strtoul(s, NULL, 10) : 0;
    if (v == 0 || v > (1u << 24))
        v = PR__CHUNK;
    return (uint32_t)((v + 63) & ~63ul);
}

static int pr__cpu_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts, pr_backend **out,
                       char *errstr, size_t errstr_size)
{
    pthread_once(&pr__log1p_once, pr__log1p_init);
    pr_backend *be = calloc(1, sizeof(*be));
    if (!be)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "cpu backend: out of memory");
    be->spec = *spec;
    be->width = pr__spec_sparse_width(spec);
    for (int op = 0; op < PR_OP__COUNT; op++)
        be->has[op] = pr_spec_has_op(spec, (pr_op)op);
    be->threads = opts && opts->threads > 0 ? opts->threads : 1;
    be->huge = opts && opts->huge_tables;
    be->chunk = pr__chunk_rows();
    be->hex2int = pr__hex2int_col;
    be->log1p = pr__log1p_col;
#ifdef PR__HAVE_AVX2_PATH
    if (!getenv("PR_ENGINE_NO_AVX2") && __builtin_cpu_supports("avx2")) {
        be->hex2int = pr__hex2int_col_avx2;
        be->log1p = pr__log1p_col_avx2;
    }
#endif
    uint32_t ns = spec->n_sparse;
    be->cols = calloc(ns ? ns : 1, sizeof(*be->cols));
    be->div = calloc(ns ? ns : 1, sizeof(*be->div));
    be->order2 = calloc(ns ? ns : 1, sizeof(*be->order2));
    be->fail_row = calloc(ns ? ns : 1, sizeof(*be->fail_row));
    be->fail_err = calloc(ns ? ns : 1, sizeof(*be->fail_err));
    be->ws = pr__zalloc_aligned((size_t)be->threads * sizeof(pr__wstats));
    be->pool = pr__pool_new(be->threads);
    if (!be->cols || !be->div || !be->order2 || !be->fail_row || !be->fail_err || !be->ws ||
        !be->pool)
        goto nomem;
    for (uint32_t c = 0; c < ns; c++) {
        if (be->has[PR_OP_MODULUS])
            pr__divider_init(&be->div[c], spec->sparse[c].modulus);
        if (be->has[PR_OP_VOCAB]) {
            if (pr__vcol_init(&be->cols[c], spec, c, be->huge))
                goto nomem;
            if (be->cols[c].counting && spec->count_mode == PR_COUNT_TWO_PASS)
                be->two_pass = true;
            if (be->cols[c].evict)
                be->evicting = true;
            /* insertion sort by cost, most expensive first; ties by column */
            uint32_t k = be->n_order2++;
            while (k > 0 &&
                   pr__col_cost(&be->cols[be->order2[k - 1]]) < pr__col_cost(&be->cols[c])) {
                be->order2[k] = be->order2[k - 1];
                k--;
            }
            be->order2[k] = c;
        }
    }
    *out = be;
    return 0;
nomem:
    pr__cpu_free(be);
    return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                     "cpu backend: out of memory for %u columns (vocabulary tables)", ns);
}

static int pr__cpu_scratch(pr_backend *be, uint32_t cap)
{
    if (cap <= be->scap)
        return 0;
    pr__free_aligned(be->vals);
    pr__free_aligned(be->bad);
    pr__free_aligned(be->rej);
    pr__free_aligned(be->dtmp);
    size_t words = pr_bitmap_words(cap);
    size_t ns = be->spec.n_sparse ? be->spec.n_sparse : 1;
    be->vals = pr__zalloc_aligned(ns * be->chunk * sizeof(uint64_t));
    be->bad = pr__zalloc_aligned(ns * words * sizeof(uint64_t));
    be->rej = pr__zalloc_aligned(words * sizeof(uint64_t));
    be->dtmp = pr__zalloc_aligned((size_t)be->threads * be->chunk * sizeof(double));
    if (!be->vals || !be->bad || !be->rej || !be->dtmp) {
        be->scap = 0;
        return PR_ENOMEM;
    }
    be->scap = cap;
    return 0;
}

static inline void pr__acc(pr__wstats *ws, pr_op op, uint64_t t0, uint64_t t1, uint64_t n)
{
    ws->ns[op] += t1 - t0;
    ws->vals[op] += n;
}

/* Sparse column c, rows [r0, r1) (r0 a multiple of 64): Hex2Int (+ validation,
 * bad bits into be->bad) and Modulus into the column's chunk of be->vals
 * (L1/L2-resident); without a vocabulary the value goes straight to the
 * output. */
static void pr__sparse_chunk(pr_backend *be, uint32_t c, uint32_t r0, uint32_t r1, pr__wstats *ws)
{
    const pr_block *in = be->in;
    uint32_t n = r1 - r0;
    size_t words = pr_bitmap_words(n), w0 = r0 / 64;
    uint64_t *v = be->vals + (size_t)c * be->chunk;
    uint64_t *bad = be->bad + c * pr_bitmap_words(be->scap) + w0;
    const uint64_t *miss = in->sparse_missing + c * pr_bitmap_words(in->scap) + w0;

    uint64_t t0 = pr_mono_ns();
    /* Values parsed by the decoder (uint64) go through Modulus straight from
     * the block: no copy first (time booked to Modulus; missing rows are
     * zeroed afterwards, which is the same since 0 mod M = 0). */
    bool fused = in->sparse_enc[c] != PR_SPARSE_HEX && be->has[PR_OP_MODULUS];
    if (in->sparse_enc[c] == PR_SPARSE_HEX) {
        be->hex2int(in->sparse_hex + ((size_t)c * in->scap + r0) * PR_HEX_SLOT, v, n, bad);
    } else {
        const uint64_t *src = in->sparse_u64 + (size_t)c * in->scap + r0;
        if (fused)
            pr__modulus_col(&be->div[c], src, v, n);
        else
            memcpy(v, src, (size_t)n * sizeof(uint64_t));
        memset(bad, 0, words * sizeof(uint64_t));
    }
    /* Missing = key 0 (dlrm; under default it never reaches the vocabulary
     * and outputs 0 anyway) and never "bad". */
    for (size_t w = 0; w < words; w++) {
        uint64_t m = miss[w];
        if (!m)
            continue;
        bad[w] &= ~m;
        while (m) {
            v[w * 64 + (uint64_t)__builtin_ctzll(m)] = 0;
            m &= m - 1;
        }
    }
    uint64_t t1 = pr_mono_ns();
    if (fused) {
        if (be->has[PR_OP_HEX2INT])
            pr__acc(ws, PR_OP_HEX2INT, t0, t0, n);
        pr__acc(ws, PR_OP_MODULUS, t0, t1, n);
    } else {
        if (be->has[PR_OP_HEX2INT])
            pr__acc(ws, PR_OP_HEX2INT, t0, t1, n);
        if (be->has[PR_OP_MODULUS]) {
            pr__modulus_col(&be->div[c], v, v, n);
            uint64_t t2 = pr_mono_ns();
            pr__acc(ws, PR_OP_MODULUS, t1, t2, n);
        }
    }
    if (!be->has[PR_OP_VOCAB] && !be->counting_pass) {
        /* The (modded) value is the output; rejected rows are zeroed later. */
        if (be->width == 4) {
            int32_t *o = pr_out_sparse32(be->out, c) + r0;
            for (uint32_t r = 0; r < n; r++)
                o[r] = (int32_t)v[r];
        } else {
            int64_t *o = pr_out_sparse64(be->out, c) + r0;
            for (uint32_t r = 0; r < n; r++)
                o[r] = (int64_t)v[r];
        }
    }
}

/* Dense column d of `in`, rows [r0, r1): Neg2Zero into `tmp` (a chunk's
 * room), Logarithm from it into `out`, missing = 0. Reads only the spec and
 * the function pointers of `be`: any thread. */
static void pr__dense_rows(const pr_backend *be, const pr_block *in, pr_out *out, uint32_t d,
                           uint32_t r0, uint32_t r1, double *tmp, pr__wstats *ws)
{
    uint32_t n = r1 - r0;
    const double *src = in->dense + (size_t)d * in->cap + r0;
    float *o = out->dense + (size_t)d * out->cap + r0;
    if (be->spec.n_dense_ops == 2 && be->spec.dense_ops[0] == PR_OP_NEG2ZERO &&
        be->spec.dense_ops[1] == PR_OP_LOG1P) {
        /* The usual pipeline, fused: one pass, no temporary column. Its time
         * is booked to Logarithm; Neg2Zero counts its values at 0 ns. */
        uint64_t t0 = pr_mono_ns();
        be->log1p(src, o, n, true);
        uint64_t t1 = pr_mono_ns();
        pr__acc(ws, PR_OP_NEG2ZERO, t0, t0, n);
        pr__acc(ws, PR_OP_LOG1P, t0, t1, n);
        src = NULL;
    } else
        for (unsigned k = 0; k < be->spec.n_dense_ops; k++) {
            uint64_t t0 = pr_mono_ns();
            if (be->spec.dense_ops[k] == PR_OP_NEG2ZERO) {
                double *t = tmp;
                for (uint32_t r = 0; r < n; r++)
                    t[r] = src[r] < 0 ? 0.0 : src[r];
                src = t;
                pr__acc(ws, PR_OP_NEG2ZERO, t0, pr_mono_ns(), n);
            } else { /* PR_OP_LOG1P */
                be->log1p(src, o, n, false);
                src = NULL;
                pr__acc(ws, PR_OP_LOG1P, t0, pr_mono_ns(), n);
            }
        }
    if (src)
        for (uint32_t r = 0; r < n; r++)
            o[r] = (float)src[r];
    const uint64_t *miss = in->dense_missing + d * pr_bitmap_words(in->cap) + r0 / 64;
    size_t words = pr_bitmap_words(n);
    for (size_t w = 0; w < words; w++)
        for (uint64_t m = miss[w]; m; m &= m - 1)
            o[w * 64 + (uint64_t)__builtin_ctzll(m)] = 0.0f;
}

/* Dense column d of the current block, rows [r0, r1), on pool worker `worker`. */
static void pr__dense_chunk(pr_backend *be, uint32_t d, uint32_t r0, uint32_t r1, int worker,
                            pr__wstats *ws)
{
    pr__dense_rows(be, be->in, be->out, d, r0, r1, be->dtmp + (size_t)worker * be->chunk, ws);
}

/* VocabGen+Map (or two-pass counting) of sparse column c over the current
 * chunk's values, skipping rejected (and, under default, missing) rows. */
static void pr__vocab_chunk(pr_backend *be, uint32_t c, uint32_t r0, uint32_t r1, pr__wstats *ws)
{
    const pr_block *in = be->in;
    uint32_t n = r1 - r0;
    size_t w0 = r0 / 64;
    pr__vcol *vc = &be->cols[c];
    const uint64_t *v = be->vals + (size_t)c * be->chunk;
    const uint64_t *rej = be->rej + w0;
    const uint64_t *miss = be->spec.profile == PR_VOCAB_DEFAULT
                               ? in->sparse_missing + c * pr_bitmap_words(in->scap) + w0
                               : NULL;
    if (be->fail_row[c] >= 0)
        return; /* failed in an earlier chunk: leave the rest of the column alone */
    uint64_t t0 = pr_mono_ns();
    if (be->counting_pass) {
        if (!vc->counting)
            return;
        size_t words = pr_bitmap_words(n);
        for (size_t w = 0; w < words; w++) {
            uint64_t skip = rej[w] | (miss ? miss[w] : 0);
            uint32_t a = (uint32_t)(w * 64), b = a + 64 < n ? a + 64 : n;
            for (uint32_t r = a; r < b; r++)
                if (!((skip >> (r - a)) & 1) && pr__vocab_count_one(vc, v[r])) {
                    be->fail_row[c] = r0 + r;
                    be->fail_err[c] = PR__NOMEM;
                    return;
                }
        }
        return;
    }
    int err = 0;
    void *o = be->width == 4 ? (void *)(pr_out_sparse32(be->out, c) + r0)
                             : (void *)(pr_out_sparse64(be->out, c) + r0);
    bool streaming = !be->two_pass;
    int64_t fr;
    if (vc->evict) {
        const int64_t *ms = vc->ttl_ms && in->event_time_ms ? in->event_time_ms + r0 : NULL;
        fr = pr__vocab_col_ev(vc, v, n, rej, miss, ms, o, be->width, r0, &err);
    } else {
        fr = be->width == 4 ? pr__vocab_col32(vc, v, n, rej, miss, o, streaming, &err)
                            : pr__vocab_col64(vc, v, n, rej, miss, o, streaming, &err);
    }
    if (fr >= 0) {
        be->fail_row[c] = r0 + fr;
        be->fail_err[c] = err;
    }
    pr__acc(ws, PR_OP_VOCAB, t0, pr_mono_ns(), fr >= 0 ? (uint64_t)fr : n);
}

/* Without a vocabulary there is no cross-column dependency: one task per
 * column runs the whole block chunk by chunk. Tasks: sparse columns, then
 * dense ones. */
static void pr__column_task(void *ctx, uint32_t task, int worker)
{
    pr_backend *be = ctx;
    pr__wstats *ws = &be->ws[worker];
    uint32_t rows = task < be->spec.n_sparse ? pr_block_col_rows(be->in, task) : be->in->rows;
    for (uint32_t r0 = 0; r0 < rows; r0 += be->chunk) {
        uint32_t r1 = rows - r0 > be->chunk ? r0 + be->chunk : rows;
        if (task < be->spec.n_sparse)
            pr__sparse_chunk(be, task, r0, r1, ws);
        else
            pr__dense_chunk(be, task - be->spec.n_sparse, r0, r1, worker, ws);
    }
}

/* With a vocabulary and every sparse column already uint64 (decoders with
 * fused Hex2Int): no value can be rejected here, so no column waits for the
 * others' reject bits. One task per column runs the whole block chunk by
 * chunk, Modulus then VocabGen+Map (most expensive columns first, then the
 * dense columns as fillers): one pool run per block instead of two per chunk,
 * and each column's values stay in cache between the two operators. */
static void pr__fused_column_task(void *ctx, uint32_t task, int worker)
{
    pr_backend *be = ctx;
    pr__wstats *ws = &be->ws[worker];
    uint32_t rows =
        task < be->n_order2 ? pr_block_col_rows(be->in, be->order2[task]) : be->in->rows;
    for (uint32_t r0 = 0; r0 < rows; r0 += be->chunk) {
        uint32_t r1 = rows - r0 > be->chunk ? r0 + be->chunk : rows;
        if (task < be->n_order2) {
            pr__sparse_chunk(be, be->order2[task], r0, r1, ws);
            pr__vocab_chunk(be, be->order2[task], r0, r1, ws);
        } else {
            pr__dense_chunk(be, task - be->n_order2, r0, r1, worker, ws);
        }
    }
}

/* With a vocabulary, per chunk: phase A (Hex2Int+Modulus of every sparse
 * column), the rejects of the chunk, then phase B (vocab columns, most
 * expensive first, then the dense columns as fillers). */
static void pr__chunk_a_task(void *ctx, uint32_t task, int worker)
{
    pr_backend *be = ctx;
    pr__sparse_chunk(be, task, be->r0, be->r1, &be->ws[worker]);
}

static void pr__chunk_b_task(void *ctx, uint32_t task, int worker)
{
    pr_backend *be = ctx;
    if (task < be->n_order2)
        pr__vocab_chunk(be, be->order2[task], be->r0, be->r1, &be->ws[worker]);
    else
        pr__dense_chunk(be, task - be->n_order2, be->r0, be->r1, worker, &be->ws[worker]);
}

/* Row reject bits of rows [r0, r1) from the per-column bad bits; returns the
 * rejected count. A row's reason names the lowest failing column. */
static uint32_t pr__collect_rejects(pr_backend *be, uint32_t r0, uint32_t r1, pr_out *out)
{
    size_t w0 = r0 / 64, w1 = pr_bitmap_words(r1);
    size_t sbw = pr_bitmap_words(be->scap);
    uint32_t n = 0;
    memset(be->rej + w0, 0, (w1 - w0) * sizeof(uint64_t));
    for (uint32_t c = 0; c < be->spec.n_sparse; c++) {
        const uint64_t *bad = be->bad + c * sbw;
        for (size_t w = w0; w < w1; w++) {
            uint64_t nb = bad[w] & ~be->rej[w];
            if (!nb)
                continue;
            be->rej[w] |= nb;
            for (; nb; nb &= nb - 1) {
                uint32_t r = (uint32_t)(w * 64) + (uint32_t)__builtin_ctzll(nb);
                n++;
                if (out) {
                    out->reject_reason[r] = PR_REJECT_BAD_HEX;
                    out->reject_col[r] = (uint16_t)c;
                }
            }
        }
    }
    return n;
}

/* The most elements a sparse column of `in` holds (rows without col_rows). */
static uint32_t pr__max_col_rows(const pr_block *in)
{
    uint32_t m = in->rows;
    for (uint32_t c = 0; in->col_rows && c < in->n_sparse; c++)
        if (in->col_rows[c] > m)
            m = in->col_rows[c];
    return m;
}

/* Run a block (process or, with counting_pass, two-pass counting). */
static void pr__run_block(pr_backend *be, pr_out *out)
{
    uint32_t rows = be->in->rows;
    uint32_t ns = be->spec.n_sparse;
    uint32_t nd = be->counting_pass ? 0 : be->spec.n_dense;
    be->n_rejected = 0;
    if (!be->has[PR_OP_VOCAB]) {
        pr__pool_run(be->pool, ns + nd, pr__column_task, be);
        be->n_rejected = pr__collect_rejects(be, 0, rows, out);
        return;
    }
    /* Jagged columns (col_rows) are uint64 keys (pr_engine_process checks). */
    bool all_u64 = be->n_order2 == ns;
    for (uint32_t c = 0; c < ns && all_u64; c++)
        all_u64 = be->in->sparse_enc[c] != PR_SPARSE_HEX;
    if (all_u64) {
        uint32_t elems = pr__max_col_rows(be->in);
        memset(be->rej, 0, pr_bitmap_words(elems) * sizeof(uint64_t)); /* nothing rejected */
        pr__pool_run(be->pool, be->n_order2 + nd, pr__fused_column_task, be);
        return;
    }
    for (uint32_t r0 = 0; r0 < rows; r0 += be->chunk) {
        be->r0 = r0;
        be->r1 = rows - r0 > be->chunk ? r0 + be->chunk : rows;
        pr__pool_run(be->pool, ns, pr__chunk_a_task, be);
        be->n_rejected += pr__collect_rejects(be, be->r0, be->r1, out);
        pr__pool_run(be->pool, be->n_order2 + nd, pr__chunk_b_task, be);
    }
}

/* The block's recycled indices into out->recycled, in (row, col) order:
 * a merge of the columns' logs (each in row order). */
static int pr__cpu_notices(pr_backend *be, pr_out *out)
{
    uint32_t ns = be->spec.n_sparse;
    size_t *at = calloc(ns ? ns : 1, sizeof(*at));
    if (!at)
        return PR_ENOMEM;
    int rc = 0;
    for (;;) {
        uint32_t best = UINT32_MAX, brow = UINT32_MAX;
        for (uint32_t c = 0; c < ns; c++) {
            const pr__vcol *vc = &be->cols[c];
            while (at[c] < vc->n_log && !vc->log[at[c]].recycled)
                at[c]++;
            if (at[c] < vc->n_log && vc->log[at[c]].row < brow) {
                brow = vc->log[at[c]].row;
                best = c;
            }
        }
        if (best == UINT32_MAX)
            break;
        pr_recycled r = {best, brow, be->cols[best].log[at[best]].index, 0};
        if ((rc = pr__out_recycled_push(out, &r)))
            break;
        at[best]++;
    }
    free(at);
    return rc;
}

/* The error of column c, whose vocabulary failed (`err`, a PR__ code) at
 * block row `row`. */
static int pr__col_failure(const pr_backend *be, uint32_t c, int64_t row, int err, char *errstr,
                           size_t errstr_size)
{
    const char *nm = be->spec.sparse[c].name;
    if (err == PR__NOMEM)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                         "engine: out of memory growing the vocabulary of column %s", nm);
    if (err == PR__UNDECIDED)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "engine: column %s: a value at block row %" PRId64
                         " has no index yet and the vocabulary is shared (decide it with "
                         "pr_engine_vocab_apply before processing)",
                         nm, row);
    return pr_seterr(errstr, errstr_size, PR_EFULL,
                     "engine: vocabulary of column %s is full (capacity %" PRIu64
                     " indices, profile dlrm has no out-of-vocabulary index) at block row %" PRId64
                     "; raise transform.columns.%s.capacity (or transform.vocab.capacity), bound "
                     "the column with a smaller modulus, or use profile default to map overflow "
                     "to the OOV index",
                     nm, be->cols[c].cap, row, nm);
}

/* Column c's n values of a block answered without an index into the
 * stats; under dlrm into col_oov too (the engine counts the OOV index of
 * profile default itself; dlrm's `unseen` answer is no index of its own).
 * Rows the engine rejects for another column's bad hex are in n. */
static void pr__undecided_add(const pr_backend *be, pr_engine_stats *st, uint32_t c, uint64_t n)
{
    st->undecided_oov += n;
    if (be->spec.profile == PR_VOCAB_DLRM)
        st->col_oov[c] += n;
}

static int pr__cpu_process(pr_backend *be, const pr_block *in, pr_out *out, pr_engine_stats *st,
                           char *errstr, size_t errstr_size)
{
    if (be->two_pass && !be->count_done)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "engine: count_mode two_pass: call pr_engine_count on every block and "
                         "pr_engine_count_done before processing");
    uint32_t rows = in->rows;
    if (pr__cpu_scratch(be, in->scap))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "cpu backend: out of memory for scratch");
    be->in = in;
    be->out = out;
    be->counting_pass = false;
    uint32_t ns = be->spec.n_sparse;
    for (uint32_t c = 0; c < ns; c++)
        be->fail_row[c] = -1;
    memset(be->ws, 0, (size_t)be->threads * sizeof(pr__wstats));

    size_t words = pr_bitmap_words(rows);
    memset(out->reject_reason, 0, rows);
    if (be->has[PR_OP_VOCAB])
        for (uint32_t c = 0; c < ns; c++) {
            be->cols[c].n_log = 0;
            be->cols[c].n_undec_oov = 0;
        }
    pr__run_block(be, out);
    if (be->evicting || be->serving)
        for (uint32_t c = 0; c < ns; c++)
            pr__undecided_add(be, st, c, be->cols[c].n_undec_oov);
    if (be->evicting && pr__cpu_notices(be, out))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "cpu backend: out of memory for notices");
    out->n_rejected = be->n_rejected;
    memcpy(out->rejected, be->rej, words * sizeof(uint64_t));
    if (be->spec.has_label && in->labels)
        memcpy(out->labels, in->labels, (size_t)rows * sizeof(int32_t));
    else
        memset(out->labels, 0, (size_t)rows * sizeof(int32_t));

    /* A column whose vocabulary failed outputs 0 from the failing row on. */
    for (uint32_t c = 0; c < ns; c++) {
        int64_t fr = be->fail_row[c];
        if (fr >= 0) {
            char *o =
                be->width == 4 ? (char *)pr_out_sparse32(out, c) : (char *)pr_out_sparse64(out, c);
            uint32_t n = pr_block_col_rows(in, c);
            memset(o + (size_t)fr * be->width, 0, (size_t)(n - fr) * be->width);
        }
    }
    /* Rejected rows: every tensor value 0. */
    if (out->n_rejected) {
        for (size_t w = 0; w < words; w++)
            for (uint64_t m = be->rej[w]; m; m &= m - 1) {
                uint32_t r = (uint32_t)(w * 64) + (uint32_t)__builtin_ctzll(m);
                out->labels[r] = 0;
                for (uint32_t d = 0; d < be->spec.n_dense; d++)
                    out->dense[(size_t)d * out->cap + r] = 0.0f;
                for (uint32_t c = 0; c < ns; c++) {
                    if (be->width == 4)
                        pr_out_sparse32(out, c)[r] = 0;
                    else
                        pr_out_sparse64(out, c)[r] = 0;
                }
            }
    }
    for (int t = 0; t < be->threads; t++)
        for (int op = 0; op < PR_OP__COUNT; op++) {
            st->op_ns[op] += be->ws[t].ns[op];
            st->op_values[op] += be->ws[t].vals[op];
        }
    for (uint32_t c = 0; c < ns; c++)
        if (be->fail_row[c] >= 0)
            return pr__col_failure(be, c, be->fail_row[c], be->fail_err[c], errstr, errstr_size);
    return 0;
}

static int pr__cpu_count(pr_backend *be, const pr_block *in)
{
    if (be->count_done)
        return PR_ESTATE;
    if (!be->two_pass)
        return 0; /* nothing counts: min_count is 1 everywhere */
    if (pr__cpu_scratch(be, in->scap))
        return PR_ENOMEM;
    be->in = in;
    be->out = NULL;
    be->counting_pass = true;
    uint32_t ns = be->spec.n_sparse;
    for (uint32_t c = 0; c < ns; c++)
        be->fail_row[c] = -1;
    memset(be->ws, 0, (size_t)be->threads * sizeof(pr__wstats));
    pr__run_block(be, NULL);
    be->counting_pass = false;
    for (uint32_t c = 0; c < ns; c++)
        if (be->fail_row[c] >= 0)
            return PR_ENOMEM;
    return 0;
}

static int pr__cpu_count_done(pr_backend *be)
{
    be->count_done = true;
    return 0;
}

static uint64_t pr__cpu_vocab_size(const pr_backend *be, uint32_t col)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return 0;
    const pr__vcol *vc = &be->cols[col];
    return (uint64_t)vc->base + vc->n;
}

static uint64_t pr__vcol_count_of(const pr__vcol *vc, uint64_t v)
{
    if (!vc->counting)
        return 0;
    if (vc->direct)
        return vc->dcnt[v];
    pr__hslot *s = pr__ht_find(vc, v);
    return s ? vc->hcnt[s - vc->ht] : 0;
}

static int pr__cpu_vocab_read_from(const pr_backend *be, uint32_t col, int64_t from, pr_vocab_cb cb,
                                   void *opaque)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return 0;
    const pr__vcol *vc = &be->cols[col];
    uint64_t i0 = from > vc->base ? (uint64_t)(from - vc->base) : 0;
    for (uint64_t i = i0; i < vc->n; i++) {
        pr_vocab_entry e = {vc->keys[i], vc->base + (int64_t)i, pr__vcol_count_of(vc, vc->keys[i]),
                            0, 0};
        if (vc->evict) {
            e.count = vc->ecnt[i];
            e.last_use = vc->last[i];
            e.last_use_ms = vc->last_ms ? vc->last_ms[i] : 0;
        }
        int rc = cb(&e, opaque);
        if (rc)
            return rc;
    }
    return 0;
}

static int pr__u64cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int pr__cpu_vocab_read(const pr_backend *be, uint32_t col, pr_vocab_cb cb, void *opaque)
{
    int rc = pr__cpu_vocab_read_from(be, col, 0, cb, opaque);
    if (rc || !be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return rc;
    const pr__vcol *vc = &be->cols[col];
    if (!vc->counting)
        return 0;
    /* Pending entries (counted, no index yet), by value. */
    if (vc->direct) {
        for (uint64_t v = 0; v < vc->dom; v++) {
            if (vc->dcnt[v] && !vc->dmap[v]) {
                pr_vocab_entry e = {v, -1, vc->dcnt[v], 0, 0};
                if ((rc = cb(&e, opaque)))
                    return rc;
            }
        }
        return 0;
    }
    size_t n = 0, size = (size_t)1 << vc->hbits;
    for (size_t i = 0; i < size; i++)
        n += vc->ht[i].idx == -1;
    if (!n)
        return 0;
    uint64_t *keys = malloc(n * sizeof(*keys));
    if (!keys)
        return PR_ENOMEM;
    n = 0;
    for (size_t i = 0; i < size; i++)
        if (vc->ht[i].idx == -1)
            keys[n++] = vc->ht[i].key;
    qsort(keys, n, sizeof(*keys), pr__u64cmp);
    for (size_t i = 0; i < n && !rc; i++) {
        pr_vocab_entry e = {keys[i], -1, pr__vcol_count_of(vc, keys[i]), 0, 0};
        rc = cb(&e, opaque);
    }
    free(keys);
    return rc;
}

static int pr__cpu_vocab_load(pr_backend *be, uint32_t col, const pr_vocab_entry *e, size_t n)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return PR_EINVAL;
    pr__vcol *vc = &be->cols[col];
    pr__vcol mode = *vc; /* modes, not state */
    pr__vcol_free(vc);
    int rc = pr__vcol_init(vc, &be->spec, col, be->huge);
    vc->frozen = mode.frozen;
    vc->undec_oov = mode.undec_oov;
    vc->serve = mode.serve;
    vc->unseen = mode.unseen;
    if (rc)
        return rc;
    for (size_t k = 0; k < n; k++) {
        uint64_t v = e[k].value;
        if (vc->direct && v >= vc->dom)
            return PR_EINVAL;
        if (e[k].index >= 0) {
            if (e[k].index != vc->base + (int64_t)vc->n || (uint64_t)e[k].index >= vc->cap)
                return PR_EINVAL;
            if (vc->direct) {
                if (vc->dmap[v])
                    return PR_EINVAL;
                vc->dmap[v] = (int32_t)(e[k].index + 1);
                if (vc->counting)
                    vc->dcnt[v] = e[k].count > UINT32_MAX ? UINT32_MAX : (uint32_t)e[k].count;
            } else {
                if (pr__ht_find(vc, v))
                    return PR_EINVAL;
                if (!pr__ht_insert(vc, v, e[k].index, e[k].count))
                    return PR_ENOMEM;
            }
            if (pr__keys_push(vc, v))
                return PR_ENOMEM;
            if (vc->evict) {
                vc->ecnt[vc->n - 1] = e[k].count > UINT32_MAX ? UINT32_MAX : (uint32_t)e[k].count;
                vc->last[vc->n - 1] = e[k].last_use;
                if (vc->last_ms)
                    vc->last_ms[vc->n - 1] = e[k].last_use_ms;
            }
        } else if (vc->counting) {
            if (vc->direct) {
                if (vc->dmap[v] || vc->dcnt[v])
                    return PR_EINVAL;
                vc->dcnt[v] = e[k].count > UINT32_MAX ? UINT32_MAX : (uint32_t)e[k].count;
            } else {
                if (pr__ht_find(vc, v))
                    return PR_EINVAL;
                if (!pr__ht_insert(vc, v, -1, e[k].count))
                    return PR_ENOMEM;
            }
        }
    }
    return vc->evict ? pr__ev_rebuild(vc) : 0;
}

/* ---------------------------------------------------------------- shared vocabulary */

/* The values of `in` a frozen lookup could not answer: every occurrence, per
 * chunk column by column in row order, of a value without an index in a
 * column that still has room (rejected rows, and missing values under
 * default, are skipped as processing skips them). Runs Hex2Int and Modulus
 * on the workers, then looks up in this thread. */
static int pr__cpu_vocab_misses(pr_backend *be, const pr_block *in, pr_vocab_miss_cb cb,
                                void *opaque)
{
    if (!be->has[PR_OP_VOCAB])
        return 0;
    if (pr__cpu_scratch(be, in->scap))
        return PR_ENOMEM;
    be->in = in;
    be->out = NULL;
    be->counting_pass = true; /* phase A only writes be->vals, never the output */
    uint32_t ns = be->spec.n_sparse;
    size_t ibw = pr_bitmap_words(in->scap);
    uint32_t elems = pr__max_col_rows(in);
    int rc = 0;
    /* Jagged columns: chunks run over the longest column; each column stops
     * at its own element count (values past it are never looked at). */
    for (uint32_t r0 = 0; r0 < elems && !rc; r0 += be->chunk) {
        be->r0 = r0;
        be->r1 = elems - r0 > be->chunk ? r0 + be->chunk : elems;
        memset(be->ws, 0, (size_t)be->threads * sizeof(pr__wstats));
        pr__pool_run(be->pool, ns, pr__chunk_a_task, be);
        pr__collect_rejects(be, be->r0, be->r1, NULL);
        for (uint32_t c = 0; c < ns && !rc; c++) {
            uint32_t cn = pr_block_col_rows(in, c);
            uint32_t n = cn > r0 ? (cn < be->r1 ? cn : be->r1) - r0 : 0;
            pr__vcol *vc = &be->cols[c];
            if (!vc->evict && (uint64_t)vc->base + vc->n >= vc->cap)
                continue; /* full: what it lacks is OOV (or a dlrm error) everywhere */
            const uint64_t *v = be->vals + (size_t)c * be->chunk;
            const uint64_t *miss = be->spec.profile == PR_VOCAB_DEFAULT
                                       ? in->sparse_missing + c * ibw + r0 / 64
                                       : NULL;
            const uint64_t *rej = be->rej + r0 / 64;
            for (uint32_t r = 0; r < n && !rc; r++) {
                uint64_t skip = rej[r / 64] | (miss ? miss[r / 64] : 0);
                if ((skip >> (r % 64)) & 1)
                    continue;
                if (pr__vocab_own(vc, v[r]) < 0)
                    rc = cb(c, v[r], opaque);
            }
        }
    }
    be->counting_pass = false;
    return rc;
}

/* pr__cpu_vocab_misses for one column of decided keys (after Hex2Int and
 * Modulus): every occurrence without an index, in key order, unless the
 * column is full and does not evict. A key outside the column's domain
 * stops the scan (PR_EINVAL). */
static int pr__cpu_vocab_misses_keys(pr_backend *be, uint32_t col, const uint64_t *keys, size_t n,
                                     pr_vocab_miss_cb cb, void *opaque)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return be->has[PR_OP_VOCAB] ? PR_EINVAL : 0;
    const pr__vcol *vc = &be->cols[col];
    if (!vc->evict && (uint64_t)vc->base + vc->n >= vc->cap)
        return 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (vc->direct && keys[i] >= vc->dom)
            return PR_EINVAL;
        if (pr__vocab_own(vc, keys[i]) < 0)
            rc = cb(col, keys[i], opaque);
    }
    return rc;
}

/* Lookup-or-insert of `count` occurrences of one decided value, exactly as
 * streaming processing would do them (counting, min_count, capacity), with
 * the column unfrozen for the call. *index: the value's index after, or -1.
 * A bounded column does its lookups with eviction (pr__ev_lookup: the clock
 * advances, a full table recycles its victim, a value with an index is
 * touched once) and stops at admission; the
 * column's block log then holds this call's assignment alone (row 0), which
 * is how the engine learns of a recycle. */
static int pr__cpu_vocab_apply(pr_backend *be, uint32_t col, uint64_t key, uint32_t count,
                               int64_t *index)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return PR_EINVAL;
    pr__vcol *vc = &be->cols[col];
    if (vc->direct && key >= vc->dom)
        return PR_EINVAL;
    /* Past min_count more occurrences change nothing but a statistic. */
    uint32_t k = vc->counting ? (count < vc->min_count ? count : vc->min_count) : 1;
    if (vc->evict) {
        vc->n_log = 0;
        int64_t i = 0;
        for (uint32_t j = 0; j < k; j++) /* at least one: a value with an index is touched */
            if ((i = pr__ev_lookup(vc, key, 0, 0)) < 0 || pr__vocab_own(vc, key) >= 0)
                break;
        if (i == PR__NOMEM)
            return PR_ENOMEM;
        if (i < 0)
            return PR_EFULL; /* dlrm: refused by pr_engine_vocab_set_shared */
        *index = pr__vocab_own(vc, key);
        return 0;
    }
    bool frozen = vc->frozen;
    vc->frozen = false;
    int64_t i = -1;
    for (uint32_t j = 0; j < k; j++)
        if ((i = pr__vocab_one(vc, key, true)) < 0)
            break;
    vc->frozen = frozen;
    if (i == PR__NOMEM)
        return PR_ENOMEM;
    if (i == PR__FULL)
        return PR_EFULL;
    *index = pr__vocab_own(vc, key);
    return 0;
}

static void pr__cpu_vocab_freeze(pr_backend *be, bool frozen)
{
    if (!be->has[PR_OP_VOCAB])
        return;
    for (uint32_t c = 0; c < be->spec.n_sparse; c++)
        be->cols[c].frozen = frozen;
}

/* Uses of a value reported through the log: one record of the column's
 * clock and `count` uses, as a lookup with an index records them. A value
 * without an index (evicted since) changes nothing, not even the clock. */
static int pr__cpu_vocab_touch(pr_backend *be, uint32_t col, uint64_t key, uint32_t count)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return PR_EINVAL;
    pr__vcol *vc = &be->cols[col];
    if (vc->direct && key >= vc->dom)
        return PR_EINVAL;
    if (!vc->evict)
        return 0;
    int64_t i = pr__vocab_own(vc, key);
    if (i < 0)
        return 0;
    uint64_t now = pr__ev_tick(vc);
    pr__ev_touch_n(vc, (int32_t)(i - vc->base), now, count);
    return 0;
}

/* Every bounded column's pending uses, column then slot ascending. A slot is
 * cleared once its callback returned 0; after a non-zero return it and the
 * later ones stay for the next drain. Walks the used slots of columns with
 * something pending (O(slots in use) per such column). */
static int pr__cpu_vocab_drain_usage(pr_backend *be, pr_vocab_usage_cb cb, void *opaque)
{
    if (!be->has[PR_OP_VOCAB])
        return 0;
    for (uint32_t c = 0; c < be->spec.n_sparse; c++) {
        pr__vcol *vc = &be->cols[c];
        if (!vc->evict || !vc->pend_any)
            continue;
        for (uint64_t s = 0; s < vc->n; s++) {
            if (!vc->pend_use[s])
                continue;
            int rc = cb(c, vc->keys[s], vc->pend_use[s], opaque);
            if (rc)
                return rc;
            vc->pend_use[s] = 0;
        }
        vc->pend_any = false;
    }
    return 0;
}

static void pr__cpu_vocab_undecided_oov(pr_backend *be, bool on)
{
    if (!be->has[PR_OP_VOCAB])
        return;
    for (uint32_t c = 0; c < be->spec.n_sparse; c++)
        be->cols[c].undec_oov = on;
}

static void pr__cpu_vocab_serve(pr_backend *be, int64_t unseen)
{
    if (!be->has[PR_OP_VOCAB])
        return;
    be->serving = true;
    for (uint32_t c = 0; c < be->spec.n_sparse; c++) {
        pr__vcol *vc = &be->cols[c];
        vc->frozen = vc->undec_oov = vc->serve = true;
        vc->unseen = unseen;
    }
}

/* ---------------------------------------------------------------- bounded vocabularies */

static void pr__cpu_vocab_block_log(const pr_backend *be, uint32_t col, const pr__vasg **log,
                                    size_t *n)
{
    *log = NULL;
    *n = 0;
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return;
    *log = be->cols[col].log;
    *n = be->cols[col].n_log;
}

static pr__vclock pr__cpu_vocab_clock(const pr_backend *be, uint32_t col)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return (pr__vclock){0, 0};
    return (pr__vclock){be->cols[col].clock, be->cols[col].clock_ms};
}

static void pr__cpu_vocab_set_clock(pr_backend *be, uint32_t col, pr__vclock clock)
{
    if (!be->has[PR_OP_VOCAB] || col >= be->spec.n_sparse)
        return;
    be->cols[col].clock = clock.records;
    be->cols[col].clock_ms = clock.event_ms;
}

/* ---------------------------------------------------------------- a block in two halves
 *
 * The first half (process_par, any thread, many blocks at once) runs the
 * dense operators and Modulus and looks every value up in the direct-indexed
 * tables without inserting: a value with an index gets it (indices never
 * change once given: no eviction here), one without one is queued (row,
 * value) per column and outputs 0 for now. The second half (process_seq, one
 * block at a time in input order) gives the queued values their indices with
 * the usual lookup-or-insert, column by column in row order: the same
 * first-appearance order as process(), since a value the first half found
 * was given its index by an earlier block. The table reads race with the
 * second half's inserts, so both are relaxed atomics (plain moves on x86):
 * a read sees either no index (queued, decided in order) or the final one.
 * Hash-table columns (modulus above 2^24 or none) could move under a
 * reader while they grow, so a spec with one keeps the whole process(). */

typedef struct pr__pending {
    uint32_t row;
    uint64_t value;
} pr__pending;

struct pr_backend_split {
    uint32_t ns;
    pr__pending **q; /* [ns] values without an index, in row order */
    uint32_t *n_q, *cap_q;
    uint64_t *vals; /* [chunk] */
    double *dtmp;   /* [chunk] */
    pr__wstats ws;
    /* the second half, per column (columns may run on different threads) */
    int64_t *fail_row; /* [ns] -1, or where the vocabulary failed */
    int *fail_err;     /* [ns] its PR__ code */
    uint64_t *seq_ns;  /* [ns] time in the second half */
    uint64_t *n_undec; /* [ns] this block's values without an index (the column's
                        * n_undec_oov after its second half: a later block's second
                        * half may run before this block's end) */
};

static void pr__cpu_split_free(pr_backend_split *bs)
{
    if (!bs)
        return;
    for (uint32_t c = 0; bs->q && c < bs->ns; c++)
        free(bs->q[c]);
    free(bs->q);
    free(bs->n_q);
    free(bs->cap_q);
    free(bs->fail_row);
    free(bs->fail_err);
    free(bs->seq_ns);
    free(bs->n_undec);
    pr__free_aligned(bs->vals);
    pr__free_aligned(bs->dtmp);
    free(bs);
}

static pr_backend_split *pr__cpu_split_new(const pr_backend *be)
{
    pr_backend_split *bs = calloc(1, sizeof(*bs));
    if (!bs)
        return NULL;
    size_t ns = be->spec.n_sparse ? be->spec.n_sparse : 1;
    bs->ns = be->spec.n_sparse;
    bs->q = calloc(ns, sizeof(*bs->q));
    bs->n_q = calloc(ns, sizeof(*bs->n_q));
    bs->cap_q = calloc(ns, sizeof(*bs->cap_q));
    bs->vals = pr__zalloc_aligned(be->chunk * sizeof(uint64_t));
    bs->dtmp = pr__zalloc_aligned(be->chunk * sizeof(double));
    bs->fail_row = calloc(ns, sizeof(*bs->fail_row));
    bs->fail_err = calloc(ns, sizeof(*bs->fail_err));
    bs->seq_ns = calloc(ns, sizeof(*bs->seq_ns));
    bs->n_undec = calloc(ns, sizeof(*bs->n_undec));
    if (!bs->q || !bs->n_q || !bs->cap_q || !bs->vals || !bs->dtmp || !bs->fail_row ||
        !bs->fail_err || !bs->seq_ns || !bs->n_undec) {
        pr__cpu_split_free(bs);
        return NULL;
    }
    return bs;
}

/* Can the first half do this block? Every sparse column uint64 (decoders
 * with fused Hex2Int: nothing to reject; jagged columns are), and every
 * vocabulary direct-indexed (or a hash table when the split is exclusive:
 * no insert can move a slot under the reader), without eviction or a
 * shared (frozen) table, and counting only in a finished two-pass count
 * (streaming min_count counts known values too). A serving column
 * (pr_engine_vocab_serve) qualifies whatever its table: its second half
 * only looks up (pr__vocab_peek) and counts nothing, so no insert can race
 * the first half's reads, and a value without an index of its own is
 * queued for the peek to answer, as process() would. */
static bool pr__split_ok(const pr_backend *be, const pr_block *in, bool exclusive)
{
    if (be->two_pass && !be->count_done && !be->serving)
        return false;
    for (uint32_t c = 0; c < be->spec.n_sparse; c++) {
        if (in->sparse_enc[c] == PR_SPARSE_HEX)
            return false;
        const pr__vcol *vc = &be->cols[c];
        if (!be->has[PR_OP_VOCAB] || (vc->serve && vc->frozen && !vc->evict))
            continue;
        if ((!vc->direct && !exclusive) || vc->evict || vc->frozen ||
            (vc->counting && !be->two_pass))
            return false;
    }
    return true;
}

static int pr__split_queue(pr_backend_split *bs, uint32_t c, uint32_t row, uint64_t v)
{
    if (bs->n_q[c] == bs->cap_q[c]) {
        uint32_t cap = bs->cap_q[c] ? bs->cap_q[c] * 2 : 256;
        pr__pending *nq = realloc(bs->q[c], cap * sizeof(*nq));
        if (!nq)
            return PR_ENOMEM;
        bs->q[c] = nq;
        bs->cap_q[c] = cap;
    }
    bs->q[c][bs->n_q[c]++] = (pr__pending){row, v};
    return 0;
}

/* Look up rows [r0, r0 + n) of column c (values in v): known indices into
 * `o`, the rest queued. Missing rows under profile default output 0.
 * Inlined once per output width, like pr__vocab_col. */
static inline __attribute__((always_inline)) int
pr__split_lookup_w(const pr_backend *be, pr_backend_split *bs, const pr_block *in, void *outp,
                   uint32_t c, uint32_t r0, uint32_t n, int width)
{
    const int32_t *dmap = be->cols[c].dmap;
    const uint64_t *v = bs->vals;
    int32_t *o32 = outp;
    int64_t *o64 = outp;
    const uint64_t *miss = be->spec.profile == PR_VOCAB_DEFAULT
                               ? in->sparse_missing + c * pr_bitmap_words(in->scap) + r0 / 64
                               : NULL;
    for (size_t w = 0; w < pr_bitmap_words(n); w++) {
        uint32_t a = (uint32_t)(w * 64), b = a + 64 < n ? a + 64 : n;
        uint64_t skip = miss ? miss[w] : 0;
        for (uint32_t r = a; r < b; r++) {
            if (r + PR__PREFETCH < n)
                __builtin_prefetch(&dmap[v[r + PR__PREFETCH]]);
            int64_t i = (int64_t)__atomic_load_n(&dmap[v[r]], __ATOMIC_RELAXED) - 1;
            if (__builtin_expect(i < 0 || ((skip >> (r - a)) & 1), 0)) {
                if ((skip >> (r - a)) & 1)
                    i = 0;
                else if (pr__split_queue(bs, c, r0 + r, v[r]))
                    return PR_ENOMEM;
                else
                    i = 0;
            }
            if (width == 4)
                o32[r] = (int32_t)i;
            else
                o64[r] = i;
        }
    }
    return 0;
}

/* pr__split_lookup_w for a hash-table column (an exclusive split: nothing
 * inserts meanwhile). A slot with a negative index (counted, below
 * min_count) is queued too: the second half decides it as process() does. */
static int pr__split_lookup_hash(const pr_backend *be, pr_backend_split *bs, const pr_block *in,
                                 void *outp, uint32_t c, uint32_t r0, uint32_t n)
{
    const pr__vcol *vc = &be->cols[c];
    const uint64_t *v = bs->vals;
    const uint64_t *miss = be->spec.profile == PR_VOCAB_DEFAULT
                               ? in->sparse_missing + c * pr_bitmap_words(in->scap) + r0 / 64
                               : NULL;
    for (uint32_t r = 0; r < n; r++) {
        int64_t i = 0;
        if (!(miss && ((miss[r / 64] >> (r % 64)) & 1))) {
            const pr__hslot *s = pr__ht_find(vc, v[r]);
            if (s && s->idx >= 0)
                i = s->idx;
            else if (pr__split_queue(bs, c, r0 + r, v[r]))
                return PR_ENOMEM;
        }
        if (be->width == 4)
            ((int32_t *)outp)[r] = (int32_t)i;
        else
            ((int64_t *)outp)[r] = i;
    }
    return 0;
}

static int pr__split_lookup(const pr_backend *be, pr_backend_split *bs, const pr_block *in, void *o,
                            uint32_t c, uint32_t r0, uint32_t n)
{
    if (!be->cols[c].direct)
        return pr__split_lookup_hash(be, bs, in, o, c, r0, n);
    return be->width == 4 ? pr__split_lookup_w(be, bs, in, o, c, r0, n, 4)
                          : pr__split_lookup_w(be, bs, in, o, c, r0, n, 8);
}

/* Sparse column c, rows [r0, r1): Modulus (or the value as is), missing =
 * 0, then the lookup, or the value itself without a vocabulary. */
static int pr__split_sparse(const pr_backend *be, pr_backend_split *bs, const pr_block *in,
                            pr_out *out, uint32_t c, uint32_t r0, uint32_t r1)
{
    uint32_t n = r1 - r0;
    const uint64_t *src = in->sparse_u64 + (size_t)c * in->scap + r0;
    const uint64_t *miss = in->sparse_missing + c * pr_bitmap_words(in->scap) + r0 / 64;
    uint64_t *v = bs->vals;
    uint64_t t0 = pr_mono_ns();
    if (be->has[PR_OP_MODULUS])
        pr__modulus_col(&be->div[c], src, v, n);
    else
        memcpy(v, src, (size_t)n * sizeof(uint64_t));
    for (size_t w = 0; w < pr_bitmap_words(n); w++)
        for (uint64_t m = miss[w]; m; m &= m - 1)
            v[w * 64 + (uint64_t)__builtin_ctzll(m)] = 0;
    uint64_t t1 = pr_mono_ns();
    if (be->has[PR_OP_HEX2INT])
        pr__acc(&bs->ws, PR_OP_HEX2INT, t0, t0, n);
    if (be->has[PR_OP_MODULUS])
        pr__acc(&bs->ws, PR_OP_MODULUS, t0, t1, n);
    void *o = be->width == 4 ? (void *)(pr_out_sparse32(out, c) + r0)
                             : (void *)(pr_out_sparse64(out, c) + r0);
    if (be->has[PR_OP_VOCAB]) {
        int rc = pr__split_lookup(be, bs, in, o, c, r0, n);
        pr__acc(&bs->ws, PR_OP_VOCAB, t1, pr_mono_ns(), n);
        return rc;
    }
    for (uint32_t r = 0; r < n; r++)
        if (be->width == 4)
            ((int32_t *)o)[r] = (int32_t)v[r];
        else
            ((int64_t *)o)[r] = (int64_t)v[r];
    return 0;
}

static int pr__cpu_process_par(const pr_backend *be, const pr_block *in, pr_out *out,
                               pr_backend_split *bs, bool exclusive)
{
    if (!pr__split_ok(be, in, exclusive))
        return 0;
    uint32_t rows = in->rows;
    memset(&bs->ws, 0, sizeof(bs->ws));
    for (uint32_t c = 0; c < bs->ns; c++) {
        bs->n_q[c] = 0;
        bs->fail_row[c] = -1;
        bs->seq_ns[c] = 0;
    }
    memset(out->reject_reason, 0, rows);
    memset(out->rejected, 0, pr_bitmap_words(rows) * sizeof(uint64_t));
    if (be->spec.has_label && in->labels)
        memcpy(out->labels, in->labels, (size_t)rows * sizeof(int32_t));
    else
        memset(out->labels, 0, (size_t)rows * sizeof(int32_t));
    /* Column by column over the whole block, as pr__fused_column_task: a
     * column's popular values stay in cache from one chunk to the next. A
     * jagged column runs over its elements. */
    for (uint32_t c = 0; c < bs->ns; c++) {
        uint32_t n = pr_block_col_rows(in, c);
        for (uint32_t r0 = 0; r0 < n; r0 += be->chunk) {
            uint32_t r1 = n - r0 > be->chunk ? r0 + be->chunk : n;
            if (pr__split_sparse(be, bs, in, out, c, r0, r1))
                return 0; /* out of memory: the whole process() will say so */
        }
    }
    for (uint32_t d = 0; d < be->spec.n_dense; d++)
        for (uint32_t r0 = 0; r0 < rows; r0 += be->chunk) {
            uint32_t r1 = rows - r0 > be->chunk ? r0 + be->chunk : rows;
            pr__dense_rows(be, in, out, d, r0, r1, bs->dtmp, &bs->ws);
        }
    return 1;
}

/* The queued values of column c in row order (one thread per column at a
 * time, blocks in input order; different columns on any threads: each only
 * touches its own table). A column whose vocabulary fails outputs 0 from that
 * row on and stops, as in process(). */
static void pr__cpu_process_seq_col(pr_backend *be, const pr_block *in, pr_out *out,
                                    pr_backend_split *bs, uint32_t c)
{
    bool streaming = !be->two_pass;
    uint64_t t0 = pr_mono_ns();
    pr__vcol *vc = &be->cols[c];
    const pr__pending *q = bs->q[c];
    vc->n_undec_oov = 0; /* serving: the values this block answers unseen */
    for (uint32_t k = 0; k < bs->n_q[c]; k++) {
        const pr__pending *p = &q[k];
        /* the table is far out of cache by now: hide its misses (a hash
         * table's home slot: a hint, harmless if an insert regrows it) */
        if (vc->direct && k + PR__PREFETCH < bs->n_q[c])
            __builtin_prefetch(&vc->dmap[q[k + PR__PREFETCH].value]);
        else if (vc->ht && k + PR__PREFETCH < bs->n_q[c])
            __builtin_prefetch(&vc->ht[pr__hash(q[k + PR__PREFETCH].value, vc->hbits)]);
        int64_t i = pr__vocab_one(vc, p->value, streaming);
        if (i < 0) {
            bs->fail_row[c] = p->row;
            bs->fail_err[c] = (int)i;
            char *o =
                be->width == 4 ? (char *)pr_out_sparse32(out, c) : (char *)pr_out_sparse64(out, c);
            memset(o + (size_t)p->row * be->width, 0,
                   (size_t)(pr_block_col_rows(in, c) - p->row) * be->width);
            break;
        }
        if (be->width == 4)
            pr_out_sparse32(out, c)[p->row] = (int32_t)i;
        else
            pr_out_sparse64(out, c)[p->row] = i;
    }
    bs->seq_ns[c] = pr_mono_ns() - t0;
    bs->n_undec[c] = vc->n_undec_oov;
}

/* After every column's second half: the block's statistics, and the first
 * failing column's error, as process() reports it. */
static int pr__cpu_process_seq_end(pr_backend *be, const pr_block *in, pr_out *out,
                                   pr_backend_split *bs, pr_engine_stats *st, char *errstr,
                                   size_t errstr_size)
{
    (void)in;
    for (uint32_t c = 0; c < bs->ns && be->has[PR_OP_VOCAB]; c++)
        bs->ws.ns[PR_OP_VOCAB] += bs->seq_ns[c];
    for (int op = 0; op < PR_OP__COUNT; op++) {
        st->op_ns[op] += bs->ws.ns[op];
        st->op_values[op] += bs->ws.vals[op];
    }
    for (uint32_t c = 0; c < bs->ns && be->serving; c++)
        pr__undecided_add(be, st, c, bs->n_undec[c]);
    out->n_rejected = 0;
    for (uint32_t c = 0; c < bs->ns; c++)
        if (bs->fail_row[c] >= 0)
            return pr__col_failure(be, c, bs->fail_row[c], bs->fail_err[c], errstr, errstr_size);
    return 0;
}

const pr_backend_ops pr__backend_cpu = {
    .name = "cpu",
    .new_ = pr__cpu_new,
    .free_ = pr__cpu_free,
    .process = pr__cpu_process,
    .count = pr__cpu_count,
    .count_done = pr__cpu_count_done,
    .vocab_size = pr__cpu_vocab_size,
    .vocab_read = pr__cpu_vocab_read,
    .vocab_read_concurrent = true,
    .vocab_load = pr__cpu_vocab_load,
    .vocab_read_from = pr__cpu_vocab_read_from,
    .vocab_misses = pr__cpu_vocab_misses,
    .vocab_misses_keys = pr__cpu_vocab_misses_keys,
    .vocab_apply = pr__cpu_vocab_apply,
    .vocab_freeze = pr__cpu_vocab_freeze,
    .vocab_block_log = pr__cpu_vocab_block_log,
    .vocab_clock = pr__cpu_vocab_clock,
    .vocab_set_clock = pr__cpu_vocab_set_clock,
    .vocab_touch = pr__cpu_vocab_touch,
    .vocab_drain_usage = pr__cpu_vocab_drain_usage,
    .vocab_undecided_oov = pr__cpu_vocab_undecided_oov,
    .vocab_serve = pr__cpu_vocab_serve,
    .split_new = pr__cpu_split_new,
    .split_free = pr__cpu_split_free,
    .process_par = pr__cpu_process_par,
    .process_seq_col = pr__cpu_process_seq_col,
    .process_seq_end = pr__cpu_process_seq_end,
    .jagged = true,
};
