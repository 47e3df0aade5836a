/*
 * base64.c — RFC 4648 base64 decoding (contract in pr_base64.h). A table of
 * the 64 values of each character (both alphabets; 0xff for the rest),
 * groups of four characters into three bytes.
 */
#include "pr_base64.h"

#include <stdint.h>

#define NO 0xff

static uint8_t pr__b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return (uint8_t)(c - 'A');
    if (c >= 'a' && c <= 'z')
        return (uint8_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9')
        return (uint8_t)(c - '0' + 52);
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return NO;
}

int pr_base64_decode(const char *src, size_t len, unsigned char *dst, size_t cap, size_t *out_len)
{
    const unsigned char *s = (const unsigned char *)src;
    if (len % 4 == 0 && len >= 4 && s[len - 1] == '=') /* padding: 1 or 2 '=' */
        len -= s[len - 2] == '=' ? 2 : 1;
    if (len % 4 == 1)
        return -1; /* one character is not a byte */
    size_t n = len / 4 * 3 + (len % 4 ? len % 4 - 1 : 0);
    if (n > cap)
        return -1;
    uint32_t acc = 0;
    size_t o = 0, i = 0;
    for (; i < len; i++) {
        uint8_t v = pr__b64_value(s[i]);
        if (v == NO)
            return -1;
        acc = acc << 6 | v;
        if (i % 4 == 3) {
            dst[o++] = (unsigned char)(acc >> 16);
            dst[o++] = (unsigned char)(acc >> 8);
            dst[o++] = (unsigned char)acc;
            acc = 0;
        }
    }
    if (len % 4 == 2) { /* 12 bits: one byte, 4 bits that must be 0 */
        if (acc & 0xf)
            return -1;
        dst[o++] = (unsigned char)(acc >> 4);
    } else if (len % 4 == 3) { /* 18 bits: two bytes, 2 bits that must be 0 */
        if (acc & 0x3)
            return -1;
        dst[o++] = (unsigned char)(acc >> 10);
        dst[o++] = (unsigned char)(acc >> 2);
    }
    *out_len = o;
    return 0;
}
