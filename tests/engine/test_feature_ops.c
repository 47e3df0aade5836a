/*
 * test_feature_ops.c — the per-feature operator library (fpga_engine/feature_ops.c):
 * every operator's edge cases (NaN, infinities, negatives, boundaries equal
 * to x, empty strings, leap years and negative epochs, RFC 3339 offsets), the
 * documented hash bytes and seed (golden values), the chain type check,
 * placement on the backends, the Criteo preset, and the operator table
 * (every operator documented, docs/configuration.md generated from it).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_engine.h"

static pr_fval num(double x)
{
    pr_fval v = {.type = PR_FVAL_NUM, .num = x};
    return v;
}
static pr_fval integer(int64_t x)
{
    pr_fval v = {.type = PR_FVAL_INT, .u = (uint64_t)x};
    return v;
}
static pr_fval str(const char *s)
{
    pr_fval v = {.type = PR_FVAL_STR, .len = (uint32_t)strlen(s), .str = s};
    return v;
}
static pr_fval missing(void)
{
    pr_fval v = {.type = PR_FVAL_MISSING};
    return v;
}
static pr_fop_step step(pr_fop op)
{
    pr_fop_step s;
    memset(&s, 0, sizeof(s));
    s.op = op;
    return s;
}
/* One value through one step; *why gets the reject reason. */
static pr_fval one(const pr_fop_step *s, pr_fval v, uint8_t *why)
{
    uint8_t r = 0;
    assert_true(pr_fop_apply(s, &v, 1, &r) >= 0);
    if (why)
        *why = r;
    return v;
}

static void test_fill(void **state)
{
    (void)state;
    pr_fop_step s = step(PR_FOP_FILL);
    s.value_type = PR_FTYPE_NUM;
    s.a = 7.5;
    pr_fval v[3] = {missing(), num(-1), num(NAN)};
    assert_int_equal(pr_fop_apply(&s, v, 3, NULL), 0);
    assert_int_equal(v[0].type, PR_FVAL_NUM);
    assert_true(v[0].num == 7.5);
    assert_true(v[1].num == -1); /* present values pass, NaN included */
    assert_true(isnan(v[2].num));
    s.value_type = PR_FTYPE_STR;
    snprintf(s.str, sizeof(s.str), "none");
    pr_fval w = one(&s, missing(), NULL);
    assert_int_equal(w.type, PR_FVAL_STR);
    assert_int_equal(w.len, 4);
    assert_memory_equal(w.str, "none", 4);
    w = one(&s, str(""), NULL); /* the empty string is a value, not missing */
    assert_int_equal(w.len, 0);
    s.value_type = PR_FTYPE_INT;
    s.n = 42;
    assert_int_equal(one(&s, missing(), NULL).u, 42);
}

static void test_clip_neg2zero_log1p_standardize(void **state)
{
    (void)state;
    pr_fop_step c = step(PR_FOP_CLIP);
    c.a = 0;
    c.b = 10;
    assert_true(one(&c, num(-5), NULL).num == 0);
    assert_true(one(&c, num(10), NULL).num == 10);
    assert_true(one(&c, num(3.25), NULL).num == 3.25);
    assert_true(one(&c, num(INFINITY), NULL).num == 10);
    assert_true(one(&c, num(-INFINITY), NULL).num == 0);
    assert_true(isnan(one(&c, num(NAN), NULL).num));
    uint8_t why;
    pr_fval r = one(&c, str("3"), &why); /* a string is not a number */
    assert_int_equal(r.type, PR_FVAL_MISSING);
    assert_int_equal(why, PR_FOP_REJECT_TYPE);

    pr_fop_step n = step(PR_FOP_NEG2ZERO);
    assert_true(one(&n, num(-1), NULL).num == 0);
    pr_fval z = one(&n, num(-0.0), NULL);
    assert_true(z.num == 0 && !signbit(z.num));
    assert_true(one(&n, num(-INFINITY), NULL).num == 0);
    assert_true(one(&n, num(INFINITY), NULL).num == INFINITY);
    assert_true(isnan(one(&n, num(NAN), NULL).num));
    assert_true(one(&n, num(2.5), NULL).num == 2.5);
    assert_int_equal(one(&n, missing(), NULL).type, PR_FVAL_MISSING);

    pr_fop_step l = step(PR_FOP_LOG1P);
    assert_true(one(&l, num(0), NULL).num == 0);
    z = one(&l, num(-0.0), NULL);
    assert_true(z.num == 0 && !signbit(z.num));
    assert_true(fabs(one(&l, num(M_E - 1), NULL).num - 1.0) < 1e-15);
    assert_true(one(&l, num(-1), NULL).num == -INFINITY);
    assert_true(isnan(one(&l, num(-2), NULL).num));
    assert_true(isnan(one(&l, num(NAN), NULL).num));
    assert_true(one(&l, num(INFINITY), NULL).num == INFINITY);

    pr_fop_step s = step(PR_FOP_STANDARDIZE);
    s.a = 10;
    s.b = 4;
    assert_true(one(&s, num(18), NULL).num == 2);
    assert_true(one(&s, num(-2), NULL).num == -3);
    assert_true(isnan(one(&s, num(NAN), NULL).num));
    assert_true(one(&s, num(INFINITY), NULL).num == INFINITY);
}

static void test_bucketize(void **state)
{
    (void)state;
    pr_fop_step b = step(PR_FOP_BUCKETIZE);
    double bounds[] = {30, 90, 365, 1000};
    memcpy(b.bounds, bounds, sizeof(bounds));
    b.n_bounds = 4;
    struct {
        double x;
        uint64_t want;
    } cases[] = {{-1e300, 1}, {29.999, 1}, {30, 2},  {89.9, 2},      {90, 3},      {365, 4},
                 {999, 4},    {1000, 5},   {1e9, 5}, {-INFINITY, 1}, {INFINITY, 5}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pr_fval v = one(&b, num(cases[i].x), NULL);
        assert_int_equal(v.type, PR_FVAL_INT);
        assert_int_equal(v.u, cases[i].want);
    }
    assert_int_equal(one(&b, integer(90), NULL).u, 3);
    assert_int_equal(one(&b, integer(-5), NULL).u, 1);
    uint8_t why = 9;
    pr_fval v = one(&b, num(NAN), &why); /* NaN is missing, not a rejection */
    assert_int_equal(v.type, PR_FVAL_MISSING);
    assert_int_equal(why, 0);
    assert_int_equal(one(&b, missing(), NULL).type, PR_FVAL_MISSING);
    b.n_bounds = 0; /* no boundaries: everything in bucket 1 */
    assert_int_equal(one(&b, num(5), NULL).u, 1);
}

static void test_hash_bytes_and_golden(void **state)
{
    (void)state;
    /* The library itself (the XXH64 test vector) and our seed. */
    assert_true(pr_fop_hash64("", 0) != 0xef46db3751d8e999ull); /* seeded, not 0 */
    assert_int_equal(PR_FOP_HASH_SEED, 0x7069706572656300ull);
    assert_true(pr_fop_hash64("abc", 3) == 0xeda4db88af0557a5ull);
    uint8_t b[32];
    pr_fval i5 = integer(5);
    assert_int_equal(pr_fop_value_bytes(&i5, b, sizeof(b)), 8);
    uint8_t le5[8] = {5, 0, 0, 0, 0, 0, 0, 0};
    assert_memory_equal(b, le5, 8);
    assert_true(pr_fop_hash64(b, 8) == 0x19035fc8176147c6ull);
    pr_fval neg = integer(-1);
    pr_fop_value_bytes(&neg, b, sizeof(b));
    for (int i = 0; i < 8; i++)
        assert_int_equal(b[i], 0xff);
    /* Doubles: -0.0 as +0.0, every NaN as the canonical quiet NaN. */
    uint8_t p0[8], m0[8], nan1[8], nan2[8];
    pr_fval v = num(0.0);
    pr_fop_value_bytes(&v, p0, 8);
    v = num(-0.0);
    pr_fop_value_bytes(&v, m0, 8);
    assert_memory_equal(p0, m0, 8);
    v = num(NAN);
    pr_fop_value_bytes(&v, nan1, 8);
    v = num(-NAN);
    pr_fop_value_bytes(&v, nan2, 8);
    assert_memory_equal(nan1, nan2, 8);
    uint8_t qnan[8] = {0, 0, 0, 0, 0, 0, 0xf8, 0x7f};
    assert_memory_equal(nan1, qnan, 8);
    v = num(1.0);
    pr_fop_value_bytes(&v, b, 8);
    uint8_t one_le[8] = {0, 0, 0, 0, 0, 0, 0xf0, 0x3f};
    assert_memory_equal(b, one_le, 8);
    /* Strings: their bytes, no terminator; empty = zero bytes. */
    pr_fval s = str("abc");
    assert_int_equal(pr_fop_value_bytes(&s, b, sizeof(b)), 3);
    assert_memory_equal(b, "abc", 3);
    s = str("");
    assert_int_equal(pr_fop_value_bytes(&s, b, sizeof(b)), 0);

    pr_fop_step h = step(PR_FOP_HASH);
    h.n = 1000003;
    assert_int_equal(one(&h, str("abc"), NULL).u, 0xeda4db88af0557a5ull % 1000003);
    assert_int_equal(one(&h, integer(5), NULL).u, 0x19035fc8176147c6ull % 1000003);
    assert_int_equal(one(&h, str(""), NULL).u, pr_fop_hash64("", 0) % 1000003);
    assert_true(one(&h, str("5"), NULL).u != one(&h, integer(5), NULL).u);
    assert_int_equal(one(&h, num(-0.0), NULL).u, one(&h, num(0.0), NULL).u);
    assert_int_equal(one(&h, missing(), NULL).type, PR_FVAL_MISSING);
    h.n = 1;
    assert_int_equal(one(&h, str("anything"), NULL).u, 0);
    h.n = 0; /* hash 0 buckets is refused, never a division by zero */
    pr_fval x = str("a");
    assert_int_equal(pr_fop_apply(&h, &x, 1, NULL), PR_EINVAL);
}

static void test_modulus_hex2int(void **state)
{
    (void)state;
    pr_fop_step m = step(PR_FOP_MODULUS);
    m.n = 7;
    assert_int_equal(one(&m, integer(-1), NULL).u, UINT64_MAX % 7);
    assert_int_equal(one(&m, integer(14), NULL).u, 0);
    uint8_t why;
    assert_int_equal(one(&m, str("14"), &why).type, PR_FVAL_MISSING);
    assert_int_equal(why, PR_FOP_REJECT_TYPE);
    assert_int_equal(one(&m, num(14), &why).type, PR_FVAL_MISSING);

    pr_fop_step h = step(PR_FOP_HEX2INT);
    assert_int_equal(one(&h, str("a1"), NULL).u, 0xa1);
    assert_int_equal(one(&h, str("A1"), NULL).u, 0xa1);
    assert_int_equal(one(&h, str("ffffffffffffffff"), NULL).u, UINT64_MAX);
    assert_int_equal(one(&h, str("0000000000000000"), NULL).u, 0);
    assert_int_equal(one(&h, str(""), &why).type, PR_FVAL_MISSING);
    assert_int_equal(why, 0);
    assert_int_equal(one(&h, str("10000000000000000"), &why).type, PR_FVAL_MISSING);
    assert_int_equal(why, PR_FOP_REJECT_HEX);
    assert_int_equal(one(&h, str("0x1"), &why).type, PR_FVAL_MISSING);
    assert_int_equal(why, PR_FOP_REJECT_HEX);
    assert_int_equal(one(&h, str("g"), &why).type, PR_FVAL_MISSING);
    assert_int_equal(one(&h, integer(77), NULL).u, 77); /* integers pass */
    /* Rejections count, and the first reason of a row stays. */
    pr_fval col[3] = {str("zz"), str("1"), str("")};
    uint8_t reason[3] = {0, 0, 0};
    assert_int_equal(pr_fop_apply(&h, col, 3, reason), 1);
    assert_int_equal(reason[0], PR_FOP_REJECT_HEX);
    assert_int_equal(col[1].u, 1);
    pr_fop_step v = step(PR_FOP_VOCAB); /* the engine's, not the library's */
    assert_int_equal(pr_fop_apply(&v, col, 3, reason), PR_EINVAL);
}

static void test_cross(void **state)
{
    (void)state;
    pr_fval a[3] = {str("abc"), str("abc"), missing()};
    pr_fval b[3] = {integer(5), str("x"), integer(5)};
    const pr_fval *cols[2] = {a, b};
    pr_fval out[3];
    assert_int_equal(pr_fop_cross(cols, 2, 3, out, NULL), 0);
    /* Layout: tag 3, u32 LE length, bytes; tag 2, 8 bytes LE. */
    uint8_t want[] = {3, 3, 0, 0, 0, 'a', 'b', 'c', 2, 5, 0, 0, 0, 0, 0, 0, 0};
    uint8_t got[64];
    pr_fval pair[2] = {a[0], b[0]};
    assert_int_equal(pr_fop_cross_bytes(pair, 2, got, sizeof(got)), sizeof(want));
    assert_memory_equal(got, want, sizeof(want));
    assert_int_equal(out[0].type, PR_FVAL_INT);
    assert_true(out[0].u == 0x0386bac1349fb0a8ull);
    assert_true(out[0].u == pr_fop_hash64(want, sizeof(want)));
    assert_true(out[1].u != out[0].u);
    assert_int_equal(out[2].type, PR_FVAL_MISSING);
    /* Order matters; a 2-byte "ab"+"c" differs from "a"+"bc". */
    const pr_fval *rev[2] = {b, a};
    pr_fval out2[3];
    pr_fop_cross(rev, 2, 1, out2, NULL);
    assert_true(out2[0].u != out[0].u);
    pr_fval p[1] = {str("ab")}, q[1] = {str("c")}, r[1] = {str("a")}, t[1] = {str("bc")};
    const pr_fval *c1[2] = {p, q}, *c2[2] = {r, t};
    pr_fval o1, o2;
    pr_fop_cross(c1, 2, 1, &o1, NULL);
    pr_fop_cross(c2, 2, 1, &o2, NULL);
    assert_true(o1.u != o2.u);
    assert_int_equal(pr_fop_cross(cols, 1, 1, out, NULL), PR_EINVAL);
}

static int64_t rfc(const char *s)
{
    int64_t us = 0;
    if (pr_fop_parse_rfc3339(s, strlen(s), &us) < 0)
        fail_msg("rfc3339 refused: %s", s);
    return us;
}

static void test_time(void **state)
{
    (void)state;
    const int64_t S = 1000000;
    assert_int_equal(rfc("1970-01-01T00:00:00Z"), 0);
    assert_int_equal(pr_fop_day_of_week(0), 4); /* Thursday */
    assert_int_equal(pr_fop_hour_of_day(0), 1);
    assert_int_equal(pr_fop_day_of_week(-1), 3); /* 1969-12-31T23:59:59.999999, Wednesday */
    assert_int_equal(pr_fop_hour_of_day(-1), 24);
    assert_int_equal(rfc("1969-12-31T23:59:59.999999Z"), -1);
    /* Leap years: 2000 is one (÷400), 1900 is not (÷100), 2024 is. */
    assert_int_equal(pr_fop_day_of_week(rfc("2000-02-29T12:00:00Z")), 2); /* Tuesday */
    assert_int_equal(pr_fop_day_of_week(rfc("2024-02-29T00:00:00Z")), 4); /* Thursday */
    assert_int_equal(pr_fop_day_of_week(rfc("1900-03-01T00:00:00Z")), 4); /* Thursday */
    assert_int_equal(pr_fop_day_of_week(rfc("1600-01-01T00:00:00Z")), 6); /* Saturday */
    assert_int_equal(pr_fop_day_of_week(rfc("2024-11-25T10:00:00Z")), 1); /* Monday */
    assert_int_equal(pr_fop_day_of_week(rfc("2024-12-01T10:00:00Z")), 7); /* Sunday */
    int64_t dummy;
    assert_true(pr_fop_parse_rfc3339("1900-02-29T00:00:00Z", 20, &dummy) < 0);
    assert_true(pr_fop_parse_rfc3339("2023-02-29T00:00:00Z", 20, &dummy) < 0);
    /* Offsets: local time minus the offset. */
    int64_t t = rfc("2024-02-29T23:30:00-01:00"); /* = 2024-03-01T00:30Z */
    assert_int_equal(t, rfc("2024-03-01T00:30:00Z"));
    assert_int_equal(pr_fop_day_of_week(t), 5);
    assert_int_equal(pr_fop_hour_of_day(t), 1);
    assert_int_equal(rfc("2024-01-01T05:30:00+05:30"), rfc("2024-01-01T00:00:00Z"));
    assert_int_equal(rfc("2024-01-01t00:00:00z"), rfc("2024-01-01T00:00:00Z"));
    assert_int_equal(rfc("2024-01-01 00:00:00+00:00"), rfc("2024-01-01T00:00:00Z"));
    /* Fractions: up to microseconds, more digits truncated. */
    assert_int_equal(rfc("1970-01-01T00:00:01.5Z"), 3 * S / 2);
    assert_int_equal(rfc("1970-01-01T00:00:00.123456789Z"), 123456);
    assert_int_equal(rfc("1969-12-31T23:59:59.5Z"), -S / 2);
    /* A leap second reads as the last microsecond of its minute. */
    assert_int_equal(rfc("2016-12-31T23:59:60Z"), rfc("2017-01-01T00:00:00Z") - 1);
    const char *bad[] = {"",
                         "2024-01-01",
                         "2024-01-01T00:00:00",      /* no offset */
                         "2024-13-01T00:00:00Z",     /* month */
                         "2024-00-10T00:00:00Z",     /* month */
                         "2024-04-31T00:00:00Z",     /* day */
                         "2024-01-01T24:00:00Z",     /* hour */
                         "2024-01-01T00:60:00Z",     /* minute */
                         "2024-01-01T00:00:61Z",     /* second */
                         "2024-01-01T00:00:00.Z",    /* empty fraction */
                         "2024-01-01T00:00:00+0100", /* offset without colon */
                         "2024-01-01T00:00:00+24:00",
                         "2024-01-01T00:00:00Zjunk",
                         "24-01-01T00:00:00Z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (pr_fop_parse_rfc3339(bad[i], strlen(bad[i]), &dummy) == 0)
            fail_msg("accepted: '%s'", bad[i]);

    /* Units. */
    int64_t us;
    pr_fval v = integer(1700000000);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), 0);
    assert_int_equal(us, 1700000000 * S);
    v = integer(1700000000123);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_MS, &us), 0);
    assert_int_equal(us, 1700000000123000);
    v = integer(-1);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_US, &us), 0);
    assert_int_equal(us, -1);
    v = num(1.5);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), 0);
    assert_int_equal(us, 3 * S / 2);
    v = num(-0.5e-6); /* floored */
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), 0);
    assert_int_equal(us, -1);
    v = integer(INT64_MAX / 2); /* seconds past 2^63 us */
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), PR_EINVAL);
    v = num(NAN);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), PR_EINVAL);
    v = num(INFINITY);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_MS, &us), PR_EINVAL);
    v = str("2024-01-01T00:00:00Z");
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_S, &us), PR_EINVAL); /* a string needs rfc3339 */
    v = integer(0);
    assert_int_equal(pr_fop_time_us(&v, PR_TIME_RFC3339, &us), PR_EINVAL);

    /* Through the operators. */
    pr_fop_step h = step(PR_FOP_HOUR_OF_DAY), d = step(PR_FOP_DAY_OF_WEEK);
    h.unit = PR_TIME_MS;
    d.unit = PR_TIME_RFC3339;
    assert_int_equal(one(&h, integer(13 * 3600 * 1000LL + 5), NULL).u, 14);
    assert_int_equal(one(&d, str("2024-11-25T23:59:59-02:00"), NULL).u, 2); /* Tuesday UTC */
    uint8_t why;
    assert_int_equal(one(&d, str("yesterday"), &why).type, PR_FVAL_MISSING);
    assert_int_equal(why, PR_FOP_REJECT_TIME);
    assert_int_equal(one(&h, missing(), NULL).type, PR_FVAL_MISSING);

    /* age: the record's event time minus the value's, in seconds; missing
     * without an event time (pr_fop_apply); an unreadable or overflowing
     * time rejects. */
    pr_fop_step a = step(PR_FOP_AGE);
    a.unit = PR_TIME_MS;
    const int64_t ev = 1700000000000000LL; /* us */
    pr_fval x = integer(1700000000000LL - 90500);
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, NULL, ev), 0);
    assert_int_equal(x.type, PR_FVAL_NUM);
    assert_true(x.num == 90.5);
    x = num(1700000000500.0); /* after the event: negative */
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, NULL, ev), 0);
    assert_true(x.num == -0.5);
    a.unit = PR_TIME_RFC3339;
    x = str("2023-11-13T22:13:20Z"); /* a day before 1700000000 s */
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, NULL, ev), 0);
    assert_true(x.num == 86400.0);
    x = str("2023-11-13T22:13:20Z");
    assert_int_equal(pr_fop_apply(&a, &x, 1, NULL), 0); /* no event time */
    assert_int_equal(x.type, PR_FVAL_MISSING);
    x = str("soon");
    why = 0;
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, &why, ev), 1);
    assert_int_equal(why, PR_FOP_REJECT_TIME);
    a.unit = PR_TIME_US;
    x = integer(INT64_MAX); /* event - value overflows */
    why = 0;
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, &why, -ev), 1);
    assert_int_equal(why, PR_FOP_REJECT_TIME);
    x = missing();
    assert_int_equal(pr_fop_apply_at(&a, &x, 1, NULL, ev), 0);
    assert_int_equal(x.type, PR_FVAL_MISSING);
}

/* ---------------------------------------------------------------- table, chains, placement */

static void test_table_documented(void **state)
{
    (void)state;
    for (int i = 0; i < PR_FOP__COUNT; i++) {
        const pr_fop_info *in = &pr_fop_table[i];
        assert_non_null(in->name);
        assert_non_null(in->syntax);
        assert_non_null(in->doc);
        assert_true(strlen(in->doc) > 20);
        assert_true(in->accepts != 0);
        assert_true(in->backends & PR_BACKEND_BIT_CPU); /* the cpu runs everything */
        assert_int_equal(pr_fop_from_name(in->name), i);
    }
    assert_int_equal(pr_fop_from_name("nope"), -1);
    assert_int_equal(pr_fop_from_name(NULL), -1);
    /* The FPGA kernel's operators are exactly today's chains. */
    unsigned fpga = 0;
    for (int i = 0; i < PR_FOP__COUNT; i++)
        if (pr_fop_table[i].backends & PR_BACKEND_BITS_FPGA)
            fpga |= 1u << i;
    assert_int_equal(fpga, (1u << PR_FOP_NEG2ZERO) | (1u << PR_FOP_LOG1P) | (1u << PR_FOP_HEX2INT) |
                               (1u << PR_FOP_MODULUS) | (1u << PR_FOP_VOCAB));

    /* docs/configuration.md carries every generated row verbatim. */
    char *ref = NULL;
    size_t ref_len = 0;
    FILE *m = open_memstream(&ref, &ref_len);
    pr_fop_write_reference(m);
    fclose(m);
    FILE *f = fopen(PR_SOURCE_DIR "/docs/configuration.md", "r");
    assert_non_null(f);
    char *doc = calloc(1, 1 << 20);
    size_t n = fread(doc, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 0);
    int rows = 0;
    for (char *p = ref; (p = strstr(p, "\n| `")); p++, rows++) {
        char *e = strchr(p + 1, '\n');
        char row[2048];
        snprintf(row, sizeof(row), "%.*s", (int)(e - p), p);
        if (!strstr(doc, row))
            fail_msg("docs/configuration.md lacks or differs on this operator row (regenerate "
                     "with pr_fop_write_reference()):%s",
                     row);
    }
    assert_int_equal(rows, PR_FOP__COUNT);
    free(doc);
    free(ref);
}

static pr_feature_spec feature(pr_feature_kind kind, const pr_fop *ops, int n)
{
    pr_feature_spec f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "f");
    f.kind = kind;
    f.n_paths = 1;
    snprintf(f.paths[0], sizeof(f.paths[0]), "a.b");
    for (int i = 0; i < n; i++) {
        f.ops[i].op = ops[i];
        f.ops[i].n = 10;
        f.ops[i].value_type = kind == PR_FEAT_DENSE ? PR_FTYPE_NUM : PR_FTYPE_STR;
    }
    f.n_ops = (uint8_t)n;
    return f;
}

static void expect_chain(pr_feature_kind kind, const pr_fop *ops, int n, int bad_op,
                         const char *text)
{
    pr_feature_spec f = feature(kind, ops, n);
    char err[256] = "";
    uint32_t bad = 99;
    int rc = pr_feature_check_chain(&f, &bad, err, sizeof(err));
    if (bad_op < 0) {
        if (rc != 0)
            fail_msg("chain refused: %s", err);
        return;
    }
    assert_int_equal(rc, PR_EINVAL);
    assert_int_equal(bad, (uint32_t)bad_op);
    if (!strstr(err, text))
        fail_msg("'%s' not in '%s'", text, err);
}

/* What decides a feature's vocabulary keys, as text and fingerprint: paths,
 * default, the operators before vocab with their arguments; not the name,
 * the kind, the list length or the steps after vocab. */
static void test_vocab_input(void **state)
{
    (void)state;
    pr_feature_spec f;
    memset(&f, 0, sizeof(f));
    snprintf(f.name, sizeof(f.name), "item");
    f.kind = PR_FEAT_SPARSE;
    f.n_paths = 1;
    snprintf(f.paths[0], sizeof(f.paths[0]), "item.id");
    f.n_ops = 3;
    f.ops[0] = (pr_fop_step){.op = PR_FOP_MODULUS, .n = 1000000};
    f.ops[1] = (pr_fop_step){.op = PR_FOP_VOCAB};
    f.ops[2] = (pr_fop_step){.op = PR_FOP_HASH, .n = 7};
    char t[512];
    pr_feature_vocab_input(&f, t, sizeof(t));
    assert_string_equal(t, "paths item.id; default -; ops { modulus: 1000000 }");
    uint64_t fp = pr_feature_vocab_input_fp(&f);
    assert_true(fp != 0);
    /* frozen: snapshots and vocab logs keep these values (a change of the
     * encoding would refuse every declared feature's state dir and log) */
    assert_true(fp == 0xa7d3d9f1c0f3214full);
    pr_feature_spec g = f; /* the same keys: name, kind, list, steps after vocab */
    snprintf(g.name, sizeof(g.name), "other");
    g.kind = PR_FEAT_LIST;
    g.max_len = 5;
    g.ops[2].n = 9;
    assert_true(pr_feature_vocab_input_fp(&g) == fp);
    g = f; /* other keys: the modulus, the path, a default, a step before vocab */
    g.ops[0].n = 1000;
    assert_true(pr_feature_vocab_input_fp(&g) != fp);
    g = f;
    snprintf(g.paths[0], sizeof(g.paths[0]), "item.sku");
    assert_true(pr_feature_vocab_input_fp(&g) != fp);
    g = f;
    g.has_default = true;
    g.deflt = (pr_fop_step){.op = PR_FOP_FILL, .value_type = PR_FTYPE_STR, .str = "unknown"};
    pr_feature_vocab_input(&g, t, sizeof(t));
    assert_string_equal(t,
                        "paths item.id; default { fill: \"unknown\" }; ops { modulus: 1000000 }");
    assert_true(pr_feature_vocab_input_fp(&g) != fp);
    assert_true(pr_feature_vocab_input_fp(&g) == 0x5c9fc1eebf0bad0dull);
    g = f;
    g.n_ops = 4;
    memmove(&g.ops[1], &g.ops[0], 3 * sizeof(g.ops[0]));
    g.ops[0] = (pr_fop_step){.op = PR_FOP_BUCKETIZE, .n_bounds = 2, .bounds = {1.5, 10}};
    pr_feature_vocab_input(&g, t, sizeof(t));
    assert_string_equal(
        t, "paths item.id; default -; ops { bucketize: [1.5, 10] }, { modulus: 1000000 }");
    assert_true(pr_feature_vocab_input_fp(&g) != fp);
}

static void test_chain_check(void **state)
{
    (void)state;
    const pr_fop criteo_d[] = {PR_FOP_NEG2ZERO, PR_FOP_LOG1P};
    const pr_fop criteo_s[] = {PR_FOP_HEX2INT, PR_FOP_MODULUS, PR_FOP_VOCAB};
    expect_chain(PR_FEAT_DENSE, criteo_d, 2, -1, NULL);
    expect_chain(PR_FEAT_SPARSE, criteo_s, 3, -1, NULL);
    const pr_fop price[] = {PR_FOP_FILL, PR_FOP_CLIP, PR_FOP_LOG1P, PR_FOP_STANDARDIZE};
    expect_chain(PR_FEAT_DENSE, price, 4, -1, NULL);
    const pr_fop vh[] = {PR_FOP_VOCAB, PR_FOP_HASH}; /* vocab before hash: fine */
    expect_chain(PR_FEAT_SPARSE, vh, 2, -1, NULL);
    const pr_fop hv[] = {PR_FOP_HASH, PR_FOP_VOCAB};
    expect_chain(PR_FEAT_LIST, hv, 2, -1, NULL);
    const pr_fop hour[] = {PR_FOP_HOUR_OF_DAY, PR_FOP_VOCAB};
    expect_chain(PR_FEAT_SPARSE, hour, 2, -1, NULL);
    const pr_fop age[] = {PR_FOP_BUCKETIZE};
    expect_chain(PR_FEAT_SPARSE, age, 1, -1, NULL);
    /* log1p on a string (a sparse value) makes no sense. */
    const pr_fop ls[] = {PR_FOP_LOG1P};
    expect_chain(PR_FEAT_SPARSE, ls, 1, 0,
                 "'log1p' needs a number, but the value here is a "
                 "string or an integer");
    const pr_fop after[] = {PR_FOP_VOCAB, PR_FOP_LOG1P};
    expect_chain(PR_FEAT_SPARSE, after, 2, 1, "(after 'vocab')");
    const pr_fop hexd[] = {PR_FOP_HEX2INT};
    expect_chain(PR_FEAT_DENSE, hexd, 1, 0, "'hex2int' needs a string or an integer");
    const pr_fop bd[] = {PR_FOP_BUCKETIZE};
    expect_chain(PR_FEAT_DENSE, bd, 1, 1, "a dense feature must end in a number");
    expect_chain(PR_FEAT_SPARSE, NULL, 0, 0, "must end in an integer id");
    const pr_fop vv[] = {PR_FOP_VOCAB, PR_FOP_VOCAB};
    expect_chain(PR_FEAT_SPARSE, vv, 2, 1, "'vocab' appears twice");
    const pr_fop cr[] = {PR_FOP_CROSS, PR_FOP_HASH};
    expect_chain(PR_FEAT_SPARSE, cr, 2, 0, "'cross' is not written in ops");
    const pr_fop mod[] = {PR_FOP_MODULUS};
    expect_chain(PR_FEAT_SPARSE, mod, 1, -1, NULL); /* integer ids */
    const pr_fop fill_str[] = {PR_FOP_FILL};
    pr_feature_spec f = feature(PR_FEAT_DENSE, fill_str, 1);
    f.ops[0].value_type = PR_FTYPE_STR;
    char err[256];
    uint32_t bad;
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "fill value is a string"));
    /* A label takes numeric operators and must end in a number. */
    f = feature(PR_FEAT_LABEL, criteo_d, 1);
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), 0);
    const pr_fop lab_bucket[] = {PR_FOP_LOG1P, PR_FOP_BUCKETIZE};
    f = feature(PR_FEAT_LABEL, lab_bucket, 2);
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "a label must end in a number"));
    const pr_fop lab_at[] = {PR_FOP_CLIP, PR_FOP_AT_LEAST};
    f = feature(PR_FEAT_LABEL, lab_at, 2);
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), 0);
    f = feature(PR_FEAT_EVENT_TIME, criteo_d, 1);
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "event_time takes no operators"));
    /* A real cross: the implicit cross step first. */
    f = feature(PR_FEAT_SPARSE, cr, 2);
    f.n_paths = 2;
    assert_int_equal(pr_feature_check_chain(&f, &bad, err, sizeof(err)), 0);
}

static void test_placement(void **state)
{
    (void)state;
    const char *on[PR_FEAT_MAX_OPS];
    char err[512];
    /* The Criteo preset runs wholly on the kernel. */
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_feature_spec *fs = calloc(1 + PR_MAX_DENSE + PR_MAX_SPARSE, sizeof(*fs));
    uint32_t n = pr_feature_criteo_preset(&spec, NULL, fs);
    assert_int_equal(n, 40);
    const char *backends[] = {"hls-sim", "xrt", "cpu"};
    for (int b = 0; b < 3; b++)
        for (uint32_t i = 0; i < n; i++) {
            assert_int_equal(pr_feature_place(&fs[i], backends[b], 0, on, err, sizeof(err)), 0);
            for (uint32_t k = 0; k < fs[i].n_ops; k++)
                assert_string_equal(on[k], backends[b]);
        }
    assert_int_equal(pr_feature_place(&fs[1], "auto", 0, on, err, sizeof(err)), 0);
    assert_string_equal(on[0], "xrt");
    assert_int_equal(pr_feature_place(&fs[1], "gpu", 0, on, err, sizeof(err)), PR_EINVAL);

    /* clip on an FPGA backend: refused, naming feature, operator, backend. */
    const pr_fop price[] = {PR_FOP_NEG2ZERO, PR_FOP_CLIP, PR_FOP_LOG1P};
    pr_feature_spec f = feature(PR_FEAT_DENSE, price, 3);
    snprintf(f.name, sizeof(f.name), "price");
    assert_int_equal(pr_feature_place(&f, "hls-sim", 0, on, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "feature 'price': operator 'clip' cannot run on backend hls-sim"));
    assert_non_null(strstr(err, "schema.cpu_ops"));
    /* Allowed on the cpu: clip goes there, and log1p after it too (not a prefix). */
    uint32_t allow = 1u << PR_FOP_CLIP;
    assert_int_equal(pr_feature_place(&f, "hls-sim", allow, on, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "operator 'log1p'"));
    assert_non_null(strstr(err, "follows an operator that runs on the cpu"));
    allow |= 1u << PR_FOP_LOG1P;
    assert_int_equal(pr_feature_place(&f, "xrt", allow, on, err, sizeof(err)), 0);
    assert_string_equal(on[0], "xrt");
    assert_string_equal(on[1], "cpu");
    assert_string_equal(on[2], "cpu");
    assert_int_equal(pr_feature_place(&f, "cpu", 0, on, err, sizeof(err)), 0);
    for (int k = 0; k < 3; k++)
        assert_string_equal(on[k], "cpu");
    /* vocab of a list: not in the kernel. */
    const pr_fop v[] = {PR_FOP_VOCAB};
    f = feature(PR_FEAT_LIST, v, 1);
    assert_int_equal(pr_feature_place(&f, "hls-sim", 0, on, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "single-valued sparse"));
    assert_int_equal(pr_feature_place(&f, "hls-sim", 1u << PR_FOP_VOCAB, on, err, sizeof(err)), 0);
    assert_string_equal(on[0], "cpu");
    /* Order against the kernel's chain: log1p then neg2zero. */
    const pr_fop rev[] = {PR_FOP_LOG1P, PR_FOP_NEG2ZERO};
    f = feature(PR_FEAT_DENSE, rev, 2);
    assert_int_equal(pr_feature_place(&f, "hls-sim", 0, on, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "operator 'neg2zero'"));
    /* The sparse modulus+vocab chain without hex2int (integer ids) runs on the kernel. */
    const pr_fop mv[] = {PR_FOP_MODULUS, PR_FOP_VOCAB};
    f = feature(PR_FEAT_SPARSE, mv, 2);
    assert_int_equal(pr_feature_place(&f, "hls-sim", 0, on, err, sizeof(err)), 0);
    assert_string_equal(on[1], "hls-sim");
    /* The kernel's vocab needs its modulus (direct-indexed tables, <= 2^26). */
    const pr_fop hxv[] = {PR_FOP_HEX2INT, PR_FOP_VOCAB};
    f = feature(PR_FEAT_SPARSE, hxv, 2);
    assert_int_equal(pr_feature_place(&f, "xrt", 0, on, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "operator 'vocab'"));
    assert_non_null(strstr(err, "modulus of at most 2^26"));
    f = feature(PR_FEAT_SPARSE, mv, 2);
    f.ops[0].n = (1ull << 26) + 1;
    assert_int_equal(pr_feature_place(&f, "xrt", 0, on, err, sizeof(err)), PR_ENOTSUP);
    f.ops[0].n = 1ull << 26;
    assert_int_equal(pr_feature_place(&f, "xrt", 0, on, err, sizeof(err)), 0);
    free(fs);
}

static void test_criteo_preset(void **state)
{
    (void)state;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    spec.sparse[2].modulus = 10000000;
    pr_feature_spec *fs = calloc(1 + PR_MAX_DENSE + PR_MAX_SPARSE, sizeof(*fs));
    char names[13][PR_NAME_MAX];
    for (int i = 0; i < 13; i++)
        snprintf(names[i], PR_NAME_MAX, "d%d", i);
    uint32_t n = pr_feature_criteo_preset(&spec, (const char(*)[PR_NAME_MAX])names, fs);
    assert_int_equal(n, 1 + 13 + 26);
    assert_string_equal(fs[0].name, "label");
    assert_int_equal(fs[0].kind, PR_FEAT_LABEL);
    assert_string_equal(fs[1].name, "d0");
    assert_string_equal(fs[1].paths[0], "d0");
    assert_int_equal(fs[1].kind, PR_FEAT_DENSE);
    assert_int_equal(fs[1].n_ops, 2);
    assert_int_equal(fs[1].ops[0].op, PR_FOP_NEG2ZERO);
    assert_int_equal(fs[1].ops[1].op, PR_FOP_LOG1P);
    assert_string_equal(fs[14].name, "C1");
    assert_int_equal(fs[14].kind, PR_FEAT_SPARSE);
    assert_int_equal(fs[14].n_ops, 3);
    assert_int_equal(fs[14].ops[1].op, PR_FOP_MODULUS);
    assert_int_equal(fs[14].ops[1].n, 524288);
    assert_int_equal(fs[16].ops[1].n, 10000000);
    assert_int_equal(fs[14].ops[2].op, PR_FOP_VOCAB);
    uint32_t bad;
    char err[256];
    for (uint32_t i = 0; i < n; i++)
        assert_int_equal(pr_feature_check_chain(&fs[i], &bad, err, sizeof(err)), 0);
    spec.has_label = false;
    spec.n_dense_ops = 0;
    assert_int_equal(pr_feature_criteo_preset(&spec, NULL, fs), 39);
    assert_string_equal(fs[0].name, "I1");
    assert_int_equal(fs[0].n_ops, 0);
    free(fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fill),
        cmocka_unit_test(test_clip_neg2zero_log1p_standardize),
        cmocka_unit_test(test_bucketize),
        cmocka_unit_test(test_hash_bytes_and_golden),
        cmocka_unit_test(test_modulus_hex2int),
        cmocka_unit_test(test_cross),
        cmocka_unit_test(test_time),
        cmocka_unit_test(test_table_documented),
        cmocka_unit_test(test_chain_check),
        cmocka_unit_test(test_vocab_input),
        cmocka_unit_test(test_placement),
        cmocka_unit_test(test_criteo_preset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
