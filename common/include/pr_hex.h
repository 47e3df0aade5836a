/*
 * pr_hex.h — hex text -> uint64, eight characters at a time (SWAR: "SIMD
 * within a register"). Header-only so every caller inlines it: the ingest
 * decoders' fused Hex2Int (pr_decode_ctx.parse_hex) and the engine's Hex2Int
 * fallback and re-check paths share this one copy, so both accept exactly
 * the same inputs: upper or lower case, 1..16 digits, anything else is a bad
 * value. (The engine's SSE2/AVX2 column loops stay in fpga_engine/.)
 *
 * Byte order: a little-endian 8-byte load puts the first character in the
 * lowest byte; the first character is the most significant digit.
 */
#ifndef PR_HEX_H
#define PR_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x in every byte of a uint64. */
#define PR_HEX_SPLAT(x) (0x0101010101010101ULL * (uint64_t)(x))

static inline uint64_t pr_hex_load8(const char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* 0x80 in every byte of x that is [0-9a-fA-F], 0 elsewhere. Each test adds
 * to 7-bit values, so no carry crosses into the next byte. */
static inline uint64_t pr_hex_valid8(uint64_t x)
{
    uint64_t ascii = ~x & PR_HEX_SPLAT(0x80);
    uint64_t xl = x & PR_HEX_SPLAT(0x7f);
    uint64_t digit = (xl + PR_HEX_SPLAT(0x80 - '0')) & ~(xl + PR_HEX_SPLAT(0x80 - '9' - 1));
    uint64_t y = xl | PR_HEX_SPLAT(0x20); /* fold 'A'-'F' onto 'a'-'f' */
    uint64_t letter = (y + PR_HEX_SPLAT(0x80 - 'a')) & ~(y + PR_HEX_SPLAT(0x80 - 'f' - 1));
    return ascii & (digit | letter) & PR_HEX_SPLAT(0x80);
}

/* Eight hex characters -> their 32-bit value (garbage for non-hex bytes,
 * which the caller rejects with pr_hex_valid8). Letters have bit 6 set,
 * digits do not; then nibbles are joined pairwise, earlier byte on top. */
static inline uint64_t pr_hex_pack8(uint64_t x)
{
    uint64_t nib = (x & PR_HEX_SPLAT(0x0f)) + ((x >> 6) & PR_HEX_SPLAT(0x01)) * 9;
    uint64_t w = ((nib << 4) | (nib >> 8)) & 0x00ff00ff00ff00ffULL;
    w = ((w << 8) | (w >> 16)) & 0x0000ffff0000ffffULL;
    return ((w << 16) | (w >> 32)) & 0xffffffffULL;
}

/* The first n (0..8) bytes of x, right-aligned in 8 and left-padded with
 * '0' characters (so they read as the same number). */
static inline uint64_t pr_hex_align8(uint64_t x, size_t n)
{
    if (n >= 8)
        return x;
    if (n == 0)
        return PR_HEX_SPLAT('0');
    return (x << (8 * (8 - n))) | (PR_HEX_SPLAT('0') >> (8 * n));
}

/* Parse s[0, len), 1 <= len <= 16. Needs 8 readable bytes at s even when
 * len < 8 (callers guarantee padding, or use pr_hex_parse_safe). Returns
 * false when a character is not a hex digit. */
static inline bool pr_hex_parse_padded(const char *s, size_t len, uint64_t *out)
{
    uint64_t hi, lo;
    if (len <= 8) {
        hi = PR_HEX_SPLAT('0');
        lo = pr_hex_align8(pr_hex_load8(s), len);
    } else {
        hi = pr_hex_align8(pr_hex_load8(s), len - 8);
        lo = pr_hex_load8(s + len - 8);
    }
    *out = (pr_hex_pack8(hi) << 32) | pr_hex_pack8(lo);
    return (pr_hex_valid8(hi) & pr_hex_valid8(lo)) == PR_HEX_SPLAT(0x80);
}

/* As above for any buffer: `avail` bytes are readable at s (avail >= len). */
static inline bool pr_hex_parse_safe(const char *s, size_t len, size_t avail, uint64_t *out)
{
    if (len >= 8 || avail >= 8)
        return pr_hex_parse_padded(s, len, out);
    char tmp[8] = {0};
    memcpy(tmp, s, len);
    return pr_hex_parse_padded(tmp, len, out);
}

/* Offset of the first non-hex character of s[0, len) (len when none). */
static inline size_t pr_hex_first_bad(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned char l = c | 0x20;
        if (!((c >= '0' && c <= '9') || (l >= 'a' && l <= 'f')))
            return i;
    }
    return len;
}

#endif
