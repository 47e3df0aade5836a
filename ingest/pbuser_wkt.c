/*
 * pbuser_wkt.c — the Protobuf well-known types read as one value, not as
 * the message they are (source.format protobuf; docs/formats.md, "Well-known
 * types"): a google.protobuf.Timestamp as its RFC 3339 text, which is
 * protobuf's own JSON mapping of it, so `unit: rfc3339` reads it exactly as
 * it reads the same instant in a JSON event (to the microsecond, the
 * fraction past it cut, as pr_fop_parse_rfc3339 cuts it); a
 * google.protobuf.Duration as its number of seconds.
 *
 * One owner for what these types are: the descriptor marks their messages
 * (pr_pb_wkt_of, by name and fields), the reader stages their seconds and nanos and writes the
 * value through these functions, and `piperec infer` shows a sample's
 * values through the same functions, so what it proposes is what the
 * reader reads. The ranges are protobuf's (timestamp.proto, duration.proto):
 * a value outside them is no time at all, and its record is rejected
 * (bad_time) rather than read as some other instant.
 */
#include <string.h>

#include "pbuser_int.h"

#define PR__TS_MIN     (-62135596800LL) /* 0001-01-01T00:00:00Z */
#define PR__TS_MAX     253402300799LL   /* 9999-12-31T23:59:59Z */
#define PR__DUR_MAX    315576000000LL   /* 10000 years of seconds */
#define PR__NANOS_SPAN 1000000000

/* The well-known messages read whole, by full name (their fields: int64
 * seconds = 1, int32 nanos = 2). */
static const struct {
    const char *full;
    pr_pb_wkt wkt;
} pr__wkts[] = {
    {"google.protobuf.Timestamp", PR_PB_WKT_TIMESTAMP},
    {"google.protobuf.Duration", PR_PB_WKT_DURATION},
};

pr_pb_wkt pr_pb_wkt_of(const char *full, int t1, int t2)
{
    full += full[0] == '.';
    if (t1 != PR__PBT_INT64 || t2 != PR__PBT_INT32) /* a set may define the name otherwise */
        return PR_PB_WKT_NONE;
    for (size_t i = 0; i < sizeof(pr__wkts) / sizeof(pr__wkts[0]); i++)
        if (!strcmp(full, pr__wkts[i].full))
            return pr__wkts[i].wkt;
    return PR_PB_WKT_NONE;
}

/* Days since 1970-01-01 -> proleptic Gregorian year, month, day (the inverse
 * of feature_ops.c's days_from_civil; H. Hinnant's algorithm). */
static void pr__civil(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

/* v in n decimal digits, zero-padded, at p; p past them. */
static char *pr__digits(char *p, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--, v /= 10)
        p[i] = (char)('0' + v % 10);
    return p + n;
}

size_t pr_pb_timestamp_text(int64_t seconds, int32_t nanos, char text[PR_PB_TIME_TEXT_MAX])
{
    if (seconds < PR__TS_MIN || seconds > PR__TS_MAX || nanos < 0 || nanos >= PR__NANOS_SPAN)
        return 0;
    int64_t days = (seconds >= 0 ? seconds : seconds - 86399) / 86400, y;
    int64_t sod = seconds - days * 86400;
    unsigned mo, d;
    pr__civil(days, &y, &mo, &d);
    char *p = pr__digits(text, (uint64_t)y, 4);
    *p++ = '-';
    p = pr__digits(p, mo, 2);
    *p++ = '-';
    p = pr__digits(p, d, 2);
    *p++ = 'T';
    p = pr__digits(p, (uint64_t)(sod / 3600), 2);
    *p++ = ':';
    p = pr__digits(p, (uint64_t)(sod / 60 % 60), 2);
    *p++ = ':';
    p = pr__digits(p, (uint64_t)(sod % 60), 2);
    if (nanos) { /* the fewest of 3, 6 or 9 digits that hold it, as protobuf writes it */
        *p++ = '.';
        p = nanos % 1000000 == 0 ? pr__digits(p, (uint64_t)nanos / 1000000, 3)
            : nanos % 1000 == 0  ? pr__digits(p, (uint64_t)nanos / 1000, 6)
                                 : pr__digits(p, (uint64_t)nanos, 9);
    }
    *p++ = 'Z';
    *p = '\0';
    return (size_t)(p - text);
}

bool pr_pb_duration_seconds(int64_t seconds, int32_t nanos, double *out)
{
    if (seconds < -PR__DUR_MAX || seconds > PR__DUR_MAX || nanos <= -PR__NANOS_SPAN ||
        nanos >= PR__NANOS_SPAN || (seconds && nanos && (seconds < 0) != (nanos < 0)))
        return false;
    *out = (double)seconds + (double)nanos / 1e9;
    return true;
}
