/*
 * criteo_tsv.c — the Criteo TSV decoder: one text line -> one pr_block row.
 *
 * Layout (Kaggle): label, n_dense integer fields, n_sparse hex fields, all
 * tab-separated; an empty field is a missing value. The shape comes from the
 * pipeline spec (has_label, n_dense, n_sparse), so other TSVs of the same kind
 * decode too.
 *
 * Shaped for speed, because decoding is the offline driver's bottleneck.
 * Two paths:
 *   - pr__decode_fast, the common case: tab positions come from SSE2
 *     compares 64 bytes at a time, dense integers of up to 8 digits are
 *     parsed branch-free (SWAR), 8-character hex fields are moved with two
 *     8-byte stores into their 16-byte slots — or, with fused Hex2Int
 *     (ctx->parse_hex, pr_hex.h), parsed to uint64 eight characters at a
 *     time while they are in cache, which halves a row's stores and saves
 *     the engine a pass. Anything unusual (a float, a long number, a wrong
 *     field count, a bad value) makes it give up;
 *   - pr__decode_line, the general decoder: one forward scan, strtod for
 *     floats, every reject reason and its detail.
 * pr_decode_criteo_lines() decodes a whole buffer. With AVX-512 (BW, VBMI2;
 * chosen at run time) one pass over each 64 bytes finds the line end and the
 * tab positions together (pr__scan_line_avx512, positions compressed into
 * place); elsewhere line ends come from memchr and tabs from the SSE2 loop.
 * No strtok/sscanf, no allocation.
 * A row is only committed (rows++) once the whole line has decoded, and a
 * rejected line leaves no trace in the block (its missing bits are cleared).
 * Hex digits are validated here only with fused Hex2Int (pr_ingest.h);
 * otherwise the engine's Hex2Int rejects them.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_hex.h"
#include "pr_ingest.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define PR__DETAIL_MAX 160
#define PR__SHOW_MAX   40 /* characters of a bad value quoted in a reject detail */

static inline uint64_t pr__load64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* True when any byte of x equals 0x09 (tab): the classic "has zero byte"
 * test applied to x ^ 0x0909...; exact (no false positives for the
 * any-byte question). */
static inline bool pr__has_tab8(uint64_t x)
{
    uint64_t y = x ^ 0x0909090909090909ull;
    return ((y - 0x0101010101010101ull) & ~y & 0x8080808080808080ull) != 0;
}

/* Number of leading ASCII digits in the 8 bytes of x (first byte = lowest),
 * 8 when all are digits. A byte is a digit when its high nibble is 3 and its
 * low nibble + 6 does not carry into the high nibble; a carry out of a
 * non-digit byte can only disturb bytes after it, which do not matter. */
static inline unsigned pr__swar_digits(uint64_t x)
{
    const uint64_t hi = 0xf0f0f0f0f0f0f0f0ull, three = 0x3030303030303030ull;
    uint64_t bad = ((x & hi) ^ three) | (((x + 0x0606060606060606ull) & hi) ^ three);
    /* High bit of each byte set where bad is non-zero. */
    uint64_t nz =
        (((bad & 0x7f7f7f7f7f7f7f7full) + 0x7f7f7f7f7f7f7f7full) | bad) & 0x8080808080808080ull;
    return nz ? (unsigned)__builtin_ctzll(nz) >> 3 : 8;
}

/* Value of the first n (1..7) digits of x: move them to the top so the
 * missing leading digits read as zeros, then combine pairs, quads, octets. */
static inline uint64_t pr__swar_value(uint64_t x, unsigned n)
{
    if (n == 0)
        return 0;
    x = (x - 0x3030303030303030ull) << (8 * (8 - n));
    x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffull;
    x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffull;
    x = (x * 10000 + (x >> 32)) & 0x00000000ffffffffull;
    return x;
}

/* Quote a field for a reject detail: at most PR__SHOW_MAX characters, control
 * characters (tab, newline, NUL...) shown as '?', so rejects.tsv stays one
 * line with four fields. */
static void pr__show(char *dst, size_t dsz, const char *s, size_t len)
{
    size_t n = len < PR__SHOW_MAX ? len : PR__SHOW_MAX;
    size_t j = 0;
    for (size_t i = 0; i < n && j + 1 < dsz; i++) {
        unsigned char c = (unsigned char)s[i];
        dst[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    if (len > n && j + 3 < dsz) {
        memcpy(dst + j, "...", 3);
        j += 3;
    }
    dst[j < dsz ? j : dsz - 1] = '\0';
}

/* Quote a non-hex sparse value the way the offline driver quotes one the
 * engine rejected (service/offline.c pr__field), so rejects.tsv does not
 * depend on where Hex2Int ran: at most 40 characters, controls as '?'. */
static void pr__show_field(char *dst, size_t dsz, const char *s, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && i < 40 && j + 1 < dsz; i++)
        dst[j++] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
    dst[j] = '\0';
}

static size_t pr__count_fields(const char *s, size_t len)
{
    size_t n = 1;
    for (const char *p = s, *end = s + len; (p = memchr(p, '\t', (size_t)(end - p))) != NULL; p++)
        n++;
    return n;
}

/* A dense value that is not a plain integer: a finite decimal float. Only
 * [0-9+-.eE] are allowed so strtod's "nan", "inf" and hex floats are not. */
static bool pr__parse_float(const char *s, size_t len, double *out)
{
    char tmp[64];
    if (len == 0 || len >= sizeof(tmp))
        return false;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'))
            return false;
    }
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(tmp, &end);
    /* ERANGE: overflow (HUGE_VAL) is refused; an underflow (1e-400) is the
     * nearest double, 0 or subnormal, as any tiny decimal would be. */
    if (end != tmp + len || (errno == ERANGE && isinf(v)) || v != v)
        return false;
    *out = v;
    return true;
}

/* Parse an integer label in [INT32_MIN, INT32_MAX]. */
static bool pr__parse_label(const char *s, size_t len, int32_t *out)
{
    size_t i = 0;
    bool neg = false;
    if (len > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    if (i == len || len - i > 10)
        return false;
    int64_t v = 0;
    for (; i < len; i++) {
        unsigned d = (unsigned)(unsigned char)s[i] - '0';
        if (d > 9)
            return false;
        v = v * 10 + d;
    }
    if (neg)
        v = -v;
    if (v < INT32_MIN || v > INT32_MAX)
        return false;
    *out = (int32_t)v;
    return true;
}

/* Row r is complete: write its metadata (when the block keeps it) and count it. */
static inline void pr__finish_row(const pr_decode_ctx *ctx, pr_block *b, uint32_t r, int64_t recno)
{
    if (b->offset)
        b->offset[r] = recno;
    if (b->partition)
        b->partition[r] = ctx->partition;
    if (b->event_time_ms)
        b->event_time_ms[r] = ctx->default_event_time_ms;
    b->rows = r + 1;
}

/* Undo the missing bits a partly decoded (then rejected) row left behind. */
static void pr__clear_row(pr_block *b, uint32_t r)
{
    size_t words = pr_bitmap_words(b->cap);
    for (uint32_t c = 0; c < b->n_dense; c++)
        pr_bit_clear(b->dense_missing + c * words, r);
    for (uint32_t c = 0; c < b->n_sparse; c++)
        pr_bit_clear(b->sparse_missing + c * words, r);
}

/* The first sparse value that is not hex (fused Hex2Int): reported only once
 * the rest of the line is known good. */
typedef struct pr__bad_hex {
    int col; /* -1 = none */
    const char *field;
    size_t len;
} pr__bad_hex;

/* Label field [p, fe): an integer. */
static inline int pr__line_label(pr_block *b, uint32_t r, const char *p, const char *fe,
                                 char *detail, size_t dsz)
{
    int32_t lab;
    if (!pr__parse_label(p, (size_t)(fe - p), &lab)) {
        char show[PR__SHOW_MAX + 8];
        size_t n = (size_t)(fe - p), sign = n && (*p == '-' || *p == '+');
        bool digits = n > sign;
        for (size_t i = sign; i < n && digits; i++)
            digits = p[i] >= '0' && p[i] <= '9';
        pr__show(show, sizeof(show), p, n);
        snprintf(detail, dsz,
                 digits ? "label: '%s' is out of range (an int32 label)"
                        : "label: '%s' is not an integer",
                 show);
        return PR_DEC_BAD_LABEL;
    }
    b->labels[r] = lab;
    return PR_DEC_OK;
}

/* Dense column c of row r from the field at p (up to the next tab or end):
 * empty = missing, else an integer or a float. *fe = the field's end. */
static inline int pr__line_dense(pr_block *b, uint32_t c, uint32_t r, size_t words, const char *p,
                                 const char *end, const char **fe, char *detail, size_t dsz)
{
    double *dst = b->dense + (size_t)c * b->cap + r;
    if (p == end || *p == '\t') { /* empty: missing */
        *dst = 0.0;
        pr_bit_set(b->dense_missing + c * words, r);
        *fe = p;
        return PR_DEC_OK;
    }
    /* Fast path: optional '-' and up to 18 digits, then tab or end.
     * With 8 bytes readable, up to 7 digits are found and converted
     * branch-free (SWAR); the digit count varies row to row, so a
     * per-digit loop would mispredict its exit on almost every field. */
    const char *s = p;
    const char *q = p + (*p == '-');
    const char *digits = q;
    int64_t v = 0;
    unsigned n8 = end - q >= 8 ? pr__swar_digits(pr__load64(q)) : 8;
    if (n8 < 8) {
        v = (int64_t)pr__swar_value(pr__load64(q), n8);
        q += n8;
    } else {
        while (q < end && (unsigned)(unsigned char)*q - '0' <= 9 && q - digits < 18)
            v = v * 10 + (*q++ - '0');
    }
    if (q > digits && (q == end || *q == '\t')) {
        *dst = (double)(*s == '-' ? -v : v);
    } else {
        const char *t = memchr(s, '\t', (size_t)(end - s));
        q = t ? t : end;
        if (!pr__parse_float(s, (size_t)(q - s), dst)) {
            char show[PR__SHOW_MAX + 8];
            pr__show(show, sizeof(show), s, (size_t)(q - s));
            snprintf(detail, dsz, "I%u: '%s' is not a number", c + 1, show);
            return PR_DEC_BAD_DENSE;
        }
    }
    *fe = q;
    return PR_DEC_OK;
}

/* Sparse column c of row r, a uint64 column (fused Hex2Int) from [p, p+flen).
 * A non-hex value only notes itself in *bad (the first one). */
static inline void pr__line_hex_u64(pr_block *b, uint32_t c, uint32_t r, size_t words,
                                    const char *p, size_t flen, pr__bad_hex *bad)
{
    uint64_t v = 0;
    size_t nb = pr_hex_first_bad(p, flen);
    for (size_t k = 0; k < flen && k < nb; k++) {
        unsigned char ch = (unsigned char)p[k];
        v = (v << 4) | (uint64_t)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    if (nb < flen && bad->col < 0) {
        bad->col = (int)c;
        bad->field = p;
        bad->len = flen;
    }
    b->sparse_u64[(size_t)c * b->cap + r] = v;
    if (flen == 0)
        pr_bit_set(b->sparse_missing + c * words, r);
}

/* Sparse column c of row r from the field at p: into its 16-byte hex slot,
 * or parsed (uint64 columns). *fe = the field's end. */
static inline int pr__line_sparse(const pr_pipeline_spec *spec, pr_block *b, uint32_t c, uint32_t r,
                                  size_t words, const char *p, const char *end, const char **fe_out,
                                  pr__bad_hex *bad, char *detail, size_t dsz)
{
    bool u64 = b->sparse_enc[c] == PR_SPARSE_U64;
    char *slot = u64 ? NULL : pr_block_hex(b, c, r);
    /* Fast path: exactly 8 characters, no tab among them. */
    if (!u64 && end - p >= 8 && !pr__has_tab8(pr__load64(p)) && (end - p == 8 || p[8] == '\t')) {
        static const char zeros[8] = {'0', '0', '0', '0', '0', '0', '0', '0'};
        memcpy(slot, zeros, 8);
        memcpy(slot + 8, p, 8);
        *fe_out = p + 8;
        return PR_DEC_OK;
    }
    const char *q = memchr(p, '\t', (size_t)(end - p));
    const char *fe = q ? q : end;
    size_t flen = (size_t)(fe - p);
    if (flen > PR_HEX_SLOT) {
        char show[PR__SHOW_MAX + 8];
        pr__show(show, sizeof(show), p, flen);
        snprintf(detail, dsz, "%s: %zu characters (at most %d hex digits): '%s'",
                 spec->sparse[c].name, flen, PR_HEX_SLOT, show);
        return PR_DEC_LONG_HEX;
    }
    if (u64) {
        /* A non-hex value is only reported once the rest of the line is
         * known good: a wrong field count or a bad field further on wins,
         * as it did when the engine found the non-hex. */
        pr__line_hex_u64(b, c, r, words, p, flen, bad);
    } else if (flen == 0) {
        memset(slot, '0', PR_HEX_SLOT);
        pr_bit_set(b->sparse_missing + c * words, r);
    } else {
        memset(slot, '0', PR_HEX_SLOT - flen);
        memcpy(slot + PR_HEX_SLOT - flen, p, flen);
    }
    *fe_out = fe;
    return PR_DEC_OK;
}

/* Decode one line (no '\n'; a trailing '\r' is stripped) into row b->rows.
 * Returns PR_DEC_OK with the row committed, or a reason with `detail` set. */
static int pr__decode_line(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                           int64_t recno, char *detail, size_t dsz)
{
    const pr_pipeline_spec *spec = ctx->spec;
    const uint32_t r = b->rows;
    const size_t words = pr_bitmap_words(b->cap);
    const size_t want = (size_t)spec->has_label + spec->n_dense + spec->n_sparse;

    if (len > 0 && line[len - 1] == '\r')
        len--;
    const char *p = line, *end = line + len;
    const char *fe;
    int reason;
    pr__bad_hex bad = {.col = -1};

    if (spec->n_dense != b->n_dense || spec->n_sparse != b->n_sparse) {
        snprintf(detail, dsz, "block shape %u/%u does not match the spec %u/%u", b->n_dense,
                 b->n_sparse, spec->n_dense, spec->n_sparse);
        return PR_DEC_FIELD_COUNT;
    }
    if (want == 0)
        goto field_count;

    /* Fields are [p, fe) up to the next tab or the end; `more` says whether a
     * field starts at p (an empty line is one empty field). */
    bool more = true;
#define PR__NEXT(fe)                                                                               \
    do {                                                                                           \
        more = (fe) < end;                                                                         \
        p = (fe) + 1;                                                                              \
    } while (0)

    if (spec->has_label) {
        const char *q = memchr(p, '\t', (size_t)(end - p));
        fe = q ? q : end;
        if ((reason = pr__line_label(b, r, p, fe, detail, dsz)) != PR_DEC_OK)
            goto reject;
        PR__NEXT(fe);
    }
    for (uint32_t c = 0; c < spec->n_dense; c++) {
        if (!more)
            goto field_count;
        if ((reason = pr__line_dense(b, c, r, words, p, end, &fe, detail, dsz)) != PR_DEC_OK)
            goto reject;
        PR__NEXT(fe);
    }
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        if (!more)
            goto field_count;
        reason = pr__line_sparse(spec, b, c, r, words, p, end, &fe, &bad, detail, dsz);
        if (reason != PR_DEC_OK)
            goto reject;
        PR__NEXT(fe);
    }
#undef PR__NEXT
    if (more)
        goto field_count;
    if (bad.col >= 0) {
        char show[PR__SHOW_MAX + 8];
        pr__show_field(show, sizeof(show), bad.field, bad.len);
        snprintf(detail, dsz, "%s: '%s' is not hex", spec->sparse[bad.col].name, show);
        pr__clear_row(b, r);
        return PR_DEC_BAD_HEX;
    }

    pr__finish_row(ctx, b, r, recno);
    return PR_DEC_OK;

reject:
    /* A wrong field count explains everything else: report it first. */
    if (pr__count_fields(line, len) == want)
        goto out;
field_count:
    snprintf(detail, dsz, "%zu fields, expected %zu", pr__count_fields(line, len), want);
    reason = PR_DEC_FIELD_COUNT;
out:
    pr__clear_row(b, r);
    return reason;
}

/* ---------------------------------------------------------------- fast path */

#define PR__FAST_MAX 448 /* longest line (bytes) the fast path takes */
/* Tab positions of a fast-path line: at most PR__FAST_MAX, plus the line end,
 * plus the 64 a vector scan may store past the last one. */
#define PR__TP_MAX (PR__FAST_MAX + 2 + 64)

/* Bit i set when p[i] is a tab, for 64 bytes. */
static inline uint64_t pr__tabs64(const char *p)
{
#if defined(__SSE2__)
    const __m128i tab = _mm_set1_epi8('\t');
    uint64_t m = 0;
    for (int k = 0; k < 4; k++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * k));
        m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, tab)) << (16 * k);
    }
    return m;
#else
    uint64_t m = 0;
    for (int i = 0; i < 64; i++)
        m |= (uint64_t)(p[i] == '\t') << i;
    return m;
#endif
}

/* True when every sparse column of the block takes uint64 values. */
static inline bool pr__all_u64(const pr_block *b)
{
    for (uint32_t c = 0; c < b->n_sparse; c++)
        if (b->sparse_enc[c] != PR_SPARSE_U64)
            return false;
    return b->n_sparse > 0;
}

/* Two gathered fields (8 hex characters each, first = most significant)
 * -> their values; *bad collects non-hex characters (checked once per
 * line). SSE2: both words in one register (built from registers: a store
 * and a 16-byte reload would defeat store forwarding), classify, turn
 * characters into nibbles, join nibble pairs into bytes, pack. */
#if defined(__SSE2__)
typedef __m128i pr__hexacc;
static inline pr__hexacc pr__hexacc_init(void)
{
    return _mm_set1_epi8(-1);
}
static inline bool pr__hexacc_ok(pr__hexacc ok)
{
    return _mm_movemask_epi8(ok) == 0xffff;
}
static inline void pr__hex_pair(uint64_t w0, uint64_t w1, pr__hexacc *ok, uint64_t *v0,
                                uint64_t *v1)
{
    const __m128i lo0 = _mm_set1_epi8('0' - 1), hi9 = _mm_set1_epi8('9' + 1);
    const __m128i loa = _mm_set1_epi8('a' - 1), hif = _mm_set1_epi8('f' + 1);
    const __m128i case20 = _mm_set1_epi8(0x20), m0f = _mm_set1_epi8(0x0f), nine = _mm_set1_epi8(9);
    const __m128i m00ff = _mm_set1_epi16(0x00ff);
    __m128i x = _mm_set_epi64x((long long)w1, (long long)w0);
    __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(x, lo0), _mm_cmpgt_epi8(hi9, x));
    __m128i y = _mm_or_si128(x, case20);
    __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(y, loa), _mm_cmpgt_epi8(hif, y));
    *ok = _mm_and_si128(*ok, _mm_or_si128(digit, letter));
    __m128i nib = _mm_add_epi8(_mm_and_si128(x, m0f), _mm_and_si128(letter, nine));
    /* 16-bit lane = d0 | d1 << 8 (d0 more significant) -> d0 << 4 | d1 */
    __m128i pr = _mm_and_si128(_mm_or_si128(_mm_slli_epi16(nib, 4), _mm_srli_epi16(nib, 8)), m00ff);
    uint64_t two = (uint64_t)_mm_cvtsi128_si64(_mm_packus_epi16(pr, pr));
    *v0 = __builtin_bswap32((uint32_t)two);
    *v1 = __builtin_bswap32((uint32_t)(two >> 32));
}
#else
typedef uint64_t pr__hexacc;
static inline pr__hexacc pr__hexacc_init(void)
{
    return PR_HEX_SPLAT(0x80);
}
static inline bool pr__hexacc_ok(pr__hexacc ok)
{
    return ok == PR_HEX_SPLAT(0x80);
}
static inline void pr__hex_pair(uint64_t w0, uint64_t w1, pr__hexacc *ok, uint64_t *v0,
                                uint64_t *v1)
{
    *ok &= pr_hex_valid8(w0) & pr_hex_valid8(w1);
    *v0 = pr_hex_pack8(w0);
    *v1 = pr_hex_pack8(w1);
}
#endif

/* The common case, fast: a line of plain integers and hex fields with the
 * right field count. Tabs are found 64 bytes at a time (SSE2 compares), and
 * fields are read 8 bytes at a time, so at least len + 64 bytes must be
 * readable at `line` (`avail`); lines near the end of a buffer are copied
 * into a padded local buffer first. Returns PR_DEC_OK with the row
 * committed, or -1 (the row's missing bits cleared) for anything else; the
 * general decoder then handles the line and writes any reject detail. */
static int pr__decode_fields(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                             uint16_t *tp, uint32_t nt, int64_t recno, bool all_u64);

static int pr__decode_fast(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                           size_t avail, int64_t recno, bool all_u64)
{
    const pr_pipeline_spec *spec = ctx->spec;
    char pad[PR__FAST_MAX + 64];
    const uint32_t want = (uint32_t)spec->has_label + spec->n_dense + spec->n_sparse;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len > PR__FAST_MAX || spec->n_dense != b->n_dense || spec->n_sparse != b->n_sparse ||
        want < 2)
        return -1;
    if (avail < len + 64) {
        memcpy(pad, line, len);
        memset(pad + len, 0, 64);
        line = pad;
    }
    /* Every tab position first (one tight loop), so the field count is
     * checked once and field f is simply [tp[f-1] + 1, tp[f]). */
    uint16_t tp[PR__TP_MAX];
    uint32_t nt = 0;
    for (size_t base = 0; base < len; base += 64) {
        uint64_t m = pr__tabs64(line + base);
        if (len - base < 64)
            m &= ((uint64_t)1 << (len - base)) - 1;
        for (; m; m &= m - 1)
            tp[nt++] = (uint16_t)(base + (size_t)__builtin_ctzll(m));
    }
    return pr__decode_fields(ctx, b, line, len, tp, nt, recno, all_u64);
}

/* The fields of a line whose nt tab positions are tp[0..nt) (tp has room
 * for one more); len excludes any '\r', and len + 64 bytes are readable at
 * line. Returns PR_DEC_OK with the row committed, or -1 as pr__decode_fast. */
static int pr__decode_fields(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                             uint16_t *tp, uint32_t nt, int64_t recno, bool all_u64)
{
    const pr_pipeline_spec *spec = ctx->spec;
    const uint32_t want = (uint32_t)spec->has_label + spec->n_dense + spec->n_sparse;
    if (nt != want - 1 || spec->n_dense != b->n_dense || spec->n_sparse != b->n_sparse || want < 2)
        return -1; /* wrong field count: the general decoder reports it */
    tp[nt] = (uint16_t)len;
    const uint16_t *fend = tp;
    uint32_t long_cols[4], n_long = 0;
    uint64_t long_vals[4];
    const uint32_t r = b->rows;
    const size_t words = pr_bitmap_words(b->cap), cap = b->cap;
    size_t start = 0, fe;
    if (spec->has_label) {
        int32_t lab;
        fe = *fend++;
        if (!pr__parse_label(line, fe, &lab))
            return -1;
        b->labels[r] = lab;
        start = fe + 1;
    }
    double *dd = b->dense + r;
    for (uint32_t c = 0; c < spec->n_dense; c++, dd += cap) {
        fe = *fend++;
        size_t l = fe - start;
        const char *s = line + start;
        start = fe + 1;
        if (l == 0) {
            *dd = 0.0;
            pr_bit_set(b->dense_missing + c * words, r);
            continue;
        }
        size_t neg = s[0] == '-';
        size_t d = l - neg;
        uint64_t x = pr__load64(s + neg);
        if (d == 0 || d > 8 || pr__swar_digits(x) < d)
            goto slow;
        int64_t v = (int64_t)pr__swar_value(x, (unsigned)d);
        *dd = (double)(neg ? -v : v);
    }
    if (all_u64) {
        /* Fused Hex2Int, two phases: gather each field as 8 characters
         * right-aligned and '0'-padded (fields of 9..16 digits, rare, are
         * parsed on the spot), validated and converted two at a time
         * (pr__hex_pair). */
        uint64_t *u = b->sparse_u64 + r, w0 = 0, spare;
        pr__hexacc ok = pr__hexacc_init();
        for (uint32_t c = 0; c < spec->n_sparse; c++) {
            fe = *fend++;
            size_t l = fe - start;
            const char *s = line + start;
            start = fe + 1;
            uint64_t w;
            if (l - 1 < 8) {
                w = pr_hex_align8(pr_hex_load8(s), l);
            } else if (l == 0) {
                w = PR_HEX_SPLAT('0');
                pr_bit_set(b->sparse_missing + c * words, r);
            } else if (l <= PR_HEX_SLOT && n_long < 4) {
                w = PR_HEX_SPLAT('0'); /* converted to 0, then fixed up below */
                if (!pr_hex_parse_padded(s, l, &long_vals[n_long]))
                    goto slow;
                long_cols[n_long++] = c;
            } else {
                goto slow; /* too long, or an unusual line */
            }
            if (c & 1)
                pr__hex_pair(w0, w, &ok, &u[(c - 1) * cap], &u[c * cap]);
            else
                w0 = w;
        }
        if (spec->n_sparse & 1)
            pr__hex_pair(w0, PR_HEX_SPLAT('0'), &ok, &u[(spec->n_sparse - 1) * cap], &spare);
        if (!pr__hexacc_ok(ok))
            goto slow; /* a non-hex character: the general decoder names it */
        for (uint32_t k = 0; k < n_long; k++)
            u[long_cols[k] * cap] = long_vals[k];
        goto done;
    }
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        fe = *fend++;
        size_t l = fe - start;
        const char *s = line + start;
        start = fe + 1;
        if (b->sparse_enc[c] == PR_SPARSE_U64) {
            uint64_t *dst = b->sparse_u64 + (size_t)c * cap + r;
            if (l - 1 < PR_HEX_SLOT) {
                if (!pr_hex_parse_padded(s, l, dst))
                    goto slow; /* the general decoder names the column */
            } else if (l == 0) {
                *dst = 0;
                pr_bit_set(b->sparse_missing + c * words, r);
            } else {
                goto slow;
            }
            continue;
        }
        char *slot = pr_block_hex(b, c, r);
        if (l == 8) {
            static const char zeros[8] = {'0', '0', '0', '0', '0', '0', '0', '0'};
            memcpy(slot, zeros, 8);
            memcpy(slot + 8, s, 8);
        } else if (l == 0) {
            memset(slot, '0', PR_HEX_SLOT);
            pr_bit_set(b->sparse_missing + c * words, r);
        } else if (l <= PR_HEX_SLOT) {
            memset(slot, '0', PR_HEX_SLOT - l);
            memcpy(slot + PR_HEX_SLOT - l, s, l);
        } else {
            goto slow;
        }
    }
done:
    pr__finish_row(ctx, b, r, recno);
    return PR_DEC_OK;
slow:
    pr__clear_row(b, r);
    return -1;
}

/* One pass over a line for its end and its tabs together (AVX-512: one
 * compare per 64 bytes for each, the tab positions of a window compressed
 * into place with VBMI2 instead of a bit-by-bit loop). Reads whole 64-byte
 * windows, so it needs `avail` >= the window after the line end; returns
 * false when it cannot tell (line longer than PR__FAST_MAX or too close to
 * the end of the buffer): the caller then finds the line end with memchr.
 * On success *len is the line length without '\n' and tp[0..*nt) the tab
 * positions in it. */
typedef bool (*pr__scan_fn)(const char *line, size_t avail, uint16_t *tp, uint32_t *nt,
                            size_t *len);

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx512f,avx512bw,avx512vbmi2,bmi,popcnt"))) static bool
pr__scan_line_avx512(const char *line, size_t avail, uint16_t *tp, uint32_t *nt_out, size_t *len)
{
    const __m512i tab = _mm512_set1_epi8('\t'), nl = _mm512_set1_epi8('\n');
    const __m512i iota = _mm512_set_epi8(
        63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
        40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
        17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    uint32_t nt = 0;
    for (size_t base = 0; base <= PR__FAST_MAX; base += 64) {
        if (avail < base + 128)
            return false; /* keep 64 bytes after the line readable, too */
        __m512i v = _mm512_loadu_si512((const void *)(line + base));
        uint64_t mt = _mm512_cmpeq_epi8_mask(v, tab);
        uint64_t mn = _mm512_cmpeq_epi8_mask(v, nl);
        if (mn)
            mt &= (mn & (0 - mn)) - 1; /* tabs before the newline only */
        __m512i pos = _mm512_maskz_compress_epi8(mt, iota);
        __m512i off = _mm512_set1_epi16((short)base);
        _mm512_storeu_si512(
            (void *)(tp + nt),
            _mm512_add_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(pos)), off));
        unsigned k = (unsigned)__builtin_popcountll(mt);
        if (k > 32)
            _mm512_storeu_si512(
                (void *)(tp + nt + 32),
                _mm512_add_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(pos, 1)), off));
        nt += k;
        if (mn) {
            size_t l = base + (size_t)__builtin_ctzll(mn);
            if (l > PR__FAST_MAX)
                return false;
            *len = l;
            *nt_out = nt;
            return true;
        }
    }
    return false;
}
#endif

/* The vector level for this CPU: 2 when AVX-512 BW/VBMI2 are there (and
 * PR_DECODE_NO_AVX512 is not 1), else 1. (Decoding the fields 8 at a time
 * in AVX-512 registers as well was tried and measured ~20% slower than the
 * scalar SWAR fields: building the lanes and spilling them to 39 columns
 * cost more than the arithmetic saved.) */
static int pr__simd_level(void)
{
    static int chosen; /* 0 unknown, 1 none, 2 avx512 */
    int c = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (!c) {
        c = 1;
#if defined(__x86_64__) && defined(__GNUC__)
        const char *off = getenv("PR_DECODE_NO_AVX512");
        if (!(off && *off == '1') && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vbmi2"))
            c = 2;
#endif
        __atomic_store_n(&chosen, c, __ATOMIC_RELAXED);
    }
    return c;
}

/* The scanner for this CPU, or NULL (memchr, then the tab loop). */
static pr__scan_fn pr__scanner(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (pr__simd_level() == 2)
        return pr__scan_line_avx512;
#endif
    return NULL;
}

/* Fix the column encodings of a block this context starts; true when all
 * sparse columns then take uint64 values (fused Hex2Int for the line). */
static bool pr__prepare(const pr_decode_ctx *ctx, pr_block *b)
{
    if (b->rows == 0 && ctx->parse_hex)
        memset(b->sparse_enc, PR_SPARSE_U64, b->n_sparse);
    return pr__all_u64(b);
}

/* A line the fast path did not take: the general decoder, then the reject
 * callback. Returns 1 when the row was committed, else 0. */
static int pr__decode_one_slow(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                               int64_t recno)
{
    char detail[PR__DETAIL_MAX];
    int reason = pr__decode_line(ctx, b, line, len, recno, detail, sizeof(detail));
    if (reason == PR_DEC_OK)
        return 1;
    if (ctx->on_reject) {
        size_t rl = len > 0 && line[len - 1] == '\r' ? len - 1 : len;
        ctx->on_reject(ctx->opaque, reason, detail, line, rl, recno);
    }
    return 0;
}

/* Decode one line with `avail` bytes readable at `line` (>= len);
 * `all_u64` is pr__prepare's answer for the block. */
static int pr__decode_one(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                          size_t avail, int64_t recno, bool all_u64)
{
    if (b->rows >= b->cap)
        return PR_EFULL;
    if (pr__decode_fast(ctx, b, line, len, avail, recno, all_u64) == PR_DEC_OK)
        return 1;
    return pr__decode_one_slow(ctx, b, line, len, recno);
}

int pr_decode_criteo_line(const pr_decode_ctx *ctx, pr_block *b, const char *line, size_t len,
                          int64_t recno)
{
    if (b->rows >= b->cap)
        return PR_EFULL;
    return pr__decode_one(ctx, b, line, len, len, recno, pr__prepare(ctx, b));
}

size_t pr_decode_criteo_lines(const pr_decode_ctx *ctx, pr_block *b, const char *buf, size_t len,
                              bool eof, int64_t first_recno, int64_t *lines_out)
{
    const char *p = buf, *end = buf + len;
    int64_t lines = 0;
    const bool all_u64 = b->rows < b->cap && pr__prepare(ctx, b);
    const pr__scan_fn scan = pr__scanner();
    uint16_t tp[PR__TP_MAX];
    uint32_t nt;
    size_t ll;
    while (p < end && b->rows < b->cap) {
        if (scan && scan(p, (size_t)(end - p), tp, &nt, &ll)) {
            /* Line end and tabs found in one pass; a '\r' before the '\n'
             * is no tab, so only the length changes. */
            size_t fl = ll > 0 && p[ll - 1] == '\r' ? ll - 1 : ll;
            if (pr__decode_fields(ctx, b, p, fl, tp, nt, first_recno + lines, all_u64) != PR_DEC_OK)
                pr__decode_one_slow(ctx, b, p, ll, first_recno + lines);
            lines++;
            p += ll + 1;
            continue;
        }
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl && !eof)
            break;
        const char *le = nl ? nl : end;
        pr__decode_one(ctx, b, p, (size_t)(le - p), (size_t)(end - p), first_recno + lines,
                       all_u64);
        lines++;
        p = nl ? nl + 1 : end;
    }
    if (lines_out)
        *lines_out = lines;
    return (size_t)(p - buf);
}
