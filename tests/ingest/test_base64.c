/*
 * test_base64.c — pr_base64_decode (common/base64.c), the decoder of a dense
 * vector's float32 bytes in JSON text (encoding f32): the RFC 4648 test
 * vectors padded and not, the URL-safe alphabet, every refusal (a bad
 * character, whitespace, a stray or extra "=", a final group of one
 * character, non-zero bits past the last byte, no room), and random bytes
 * through an encoder written here from the RFC.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pr_base64.h"

static const char std_alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t encode(const unsigned char *b, size_t n, char *out, int url, int pad)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < n ? (uint32_t)b[i + 1] << 8 : 0) |
                     (i + 2 < n ? b[i + 2] : 0);
        size_t chars = n - i >= 3 ? 4 : n - i + 1;
        for (size_t k = 0; k < chars; k++) {
            char c = std_alpha[(v >> (18 - 6 * k)) & 63];
            out[o++] = url && c == '+' ? '-' : url && c == '/' ? '_' : c;
        }
        for (size_t k = chars; pad && k < 4; k++)
            out[o++] = '=';
    }
    return o;
}

static int dec(const char *s, unsigned char *out, size_t cap, size_t *n)
{
    return pr_base64_decode(s, strlen(s), out, cap, n);
}

static void test_rfc_vectors(void **state)
{
    (void)state;
    static const char *const plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    static const char *const padded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                         "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    static const char *const bare[] = {"", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"};
    unsigned char out[16];
    size_t n;
    for (int i = 0; i < 7; i++) {
        assert_int_equal(dec(padded[i], out, sizeof(out), &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(out, plain[i], n);
        assert_int_equal(dec(bare[i], out, sizeof(out), &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(out, plain[i], n);
    }
    /* URL-safe: 0xfb 0xff -> "+/8=" standard, "-_8=" URL-safe */
    assert_int_equal(dec("-_8=", out, sizeof(out), &n), 0);
    assert_int_equal(n, 2);
    assert_true(out[0] == 0xfb && out[1] == 0xff);
    assert_int_equal(dec("+/8", out, sizeof(out), &n), 0);
    assert_true(n == 2 && out[0] == 0xfb && out[1] == 0xff);
}

static void test_refusals(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "Zg=",      /* padding that does not complete a group */
        "Z===",     /* one character and three "=" */
        "Zg===",    /* too much padding */
        "Z",        /* one character is no byte */
        "Zm9vY",    /* ... after whole groups too */
        "Zh==",     /* bits past the last byte not zero */
        "Zm9=",     /* ... of a two-byte group */
        "Zm 9v",    /* whitespace */
        "Zm9v\n",   /* ... at the end */
        "Zm=v",     /* "=" inside */
        "Zm9v!A==", /* a character of neither alphabet */
        "====",
    };
    unsigned char out[16];
    size_t n;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (dec(bad[i], out, sizeof(out), &n) == 0)
            fail_msg("'%s' accepted", bad[i]);
    assert_int_equal(dec("Zm9vYmFy", out, 5, &n), -1); /* 6 bytes, room for 5 */
    assert_int_equal(dec("Zm9vYmFy", out, 6, &n), 0);
}

static void test_random_round_trip(void **state)
{
    (void)state;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    unsigned char b[64], out[64];
    char text[100];
    for (int it = 0; it < 20000; it++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t n = x % 64;
        for (size_t i = 0; i < n; i++)
            b[i] = (unsigned char)(x >> (8 * (i % 8))) ^ (unsigned char)(i * 37);
        size_t t = encode(b, n, text, (int)(x >> 40) & 1, (int)(x >> 41) & 1);
        size_t got;
        assert_int_equal(pr_base64_decode(text, t, out, sizeof(out), &got), 0);
        assert_int_equal(got, n);
        assert_memory_equal(out, b, n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc_vectors),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_random_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
