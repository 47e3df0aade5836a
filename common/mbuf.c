/*
 * mbuf.c — the growing text buffer (contract: pr_mbuf.h).
 */
#include "pr_mbuf.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pr_mbuf_init(pr_mbuf *mb)
{
    memset(mb, 0, sizeof(*mb));
}

void pr_mbuf_fini(pr_mbuf *mb)
{
    free(mb->buf);
    memset(mb, 0, sizeof(*mb));
}

void pr_mbuf_reset(pr_mbuf *mb)
{
    mb->len = 0;
    if (mb->buf)
        mb->buf[0] = '\0';
}

static bool pr__mbuf_reserve(pr_mbuf *mb, size_t extra)
{
    if (mb->err)
        return false;
    if (mb->len + extra + 1 <= mb->cap)
        return true;
    size_t cap = mb->cap ? mb->cap : 1024;
    while (cap < mb->len + extra + 1)
        cap *= 2;
    char *nb = realloc(mb->buf, cap);
    if (!nb) {
        mb->err = PR_ENOMEM;
        return false;
    }
    mb->buf = nb;
    mb->cap = cap;
    return true;
}

void pr_mbuf_append(pr_mbuf *mb, const char *s, size_t len)
{
    if (!pr__mbuf_reserve(mb, len))
        return;
    memcpy(mb->buf + mb->len, s, len);
    mb->len += len;
    mb->buf[mb->len] = '\0';
}

void pr_mbuf_puts(pr_mbuf *mb, const char *s)
{
    pr_mbuf_append(mb, s, strlen(s));
}

void pr_mbuf_vprintf(pr_mbuf *mb, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    if (n < 0) {
        va_end(ap2);
        return;
    }
    if ((size_t)n < sizeof(small)) {
        pr_mbuf_append(mb, small, (size_t)n);
    } else if (pr__mbuf_reserve(mb, (size_t)n)) {
        vsnprintf(mb->buf + mb->len, (size_t)n + 1, fmt, ap2);
        mb->len += (size_t)n;
    }
    va_end(ap2);
}

void pr_mbuf_printf(pr_mbuf *mb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pr_mbuf_vprintf(mb, fmt, ap);
    va_end(ap);
}

void pr_mbuf_json_str(pr_mbuf *mb, const char *s)
{
    pr_mbuf_json_strn(mb, s ? s : "", s ? strlen(s) : 0);
}

void pr_mbuf_json_strn(pr_mbuf *mb, const char *s, size_t n)
{
    pr_mbuf_append(mb, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s, *end = p + n; p < end; p++) {
        switch (*p) {
        case '"':
            pr_mbuf_append(mb, "\\\"", 2);
            break;
        case '\\':
            pr_mbuf_append(mb, "\\\\", 2);
            break;
        case '\n':
            pr_mbuf_append(mb, "\\n", 2);
            break;
        case '\r':
            pr_mbuf_append(mb, "\\r", 2);
            break;
        case '\t':
            pr_mbuf_append(mb, "\\t", 2);
            break;
        default:
            if (*p < 0x20)
                pr_mbuf_printf(mb, "\\u%04x", *p);
            else
                pr_mbuf_append(mb, (const char *)p, 1);
        }
    }
    pr_mbuf_append(mb, "\"", 1);
}
