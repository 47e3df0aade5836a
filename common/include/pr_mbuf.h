/*
 * pr_mbuf.h — a growing text buffer: Prometheus exposition, JSON bodies,
 * status pages. Writers never fail mid-way: an allocation failure sets
 * mb->err (PR_ENOMEM) and later writes are dropped, so check mb->err once at
 * the end. A pr_mbuf belongs to one thread.
 */
#ifndef PR_MBUF_H
#define PR_MBUF_H

#include <stdarg.h>
#include <stddef.h>

#include "pr_error.h"

/* A growing text buffer (always NUL-terminated when buf != NULL). */
typedef struct pr_mbuf {
    char *buf;
    size_t len;
    size_t cap;
    int err; /* 0 or PR_ENOMEM */
} pr_mbuf;

void pr_mbuf_init(pr_mbuf *mb);
void pr_mbuf_fini(pr_mbuf *mb);
void pr_mbuf_reset(pr_mbuf *mb); /* len = 0, keeps the memory */
void pr_mbuf_append(pr_mbuf *mb, const char *s, size_t len);
void pr_mbuf_puts(pr_mbuf *mb, const char *s);
void pr_mbuf_printf(pr_mbuf *mb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void pr_mbuf_vprintf(pr_mbuf *mb, const char *fmt, va_list ap);
/* A JSON string literal with quotes and escapes. */
void pr_mbuf_json_str(pr_mbuf *mb, const char *s);
/* The same for the n bytes at s (zero bytes included, as \u0000). */
void pr_mbuf_json_strn(pr_mbuf *mb, const char *s, size_t n);

#endif
