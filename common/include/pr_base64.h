/*
 * pr_base64.h — base64 text -> bytes (RFC 4648), for values a JSON event can
 * only carry as text: a dense vector's float32 bytes (`encoding: f32`).
 * Both alphabets are read (standard "+/" and URL-safe "-_"), with or
 * without "=" padding; anything else (whitespace, a stray "=", a misplaced
 * character, a final group of one character, non-zero bits past the last
 * byte) is refused, so one text has one meaning.
 */
#ifndef PR_BASE64_H
#define PR_BASE64_H

#include <stddef.h>

/* Decode len characters of src into dst (room for cap bytes): 0 with
 * *out_len the bytes written, or -1 (not base64, or more than cap bytes). */
int pr_base64_decode(const char *src, size_t len, unsigned char *dst, size_t cap, size_t *out_len);

#endif /* PR_BASE64_H */
