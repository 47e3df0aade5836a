/* decode_reasons.c — names of the decoder reject reasons (metric labels,
 * rejects.tsv, dead-letter headers), and the JSON extractor's reasons mapped
 * onto them (same names, so a JSON reject reads the same everywhere). */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "pr_ingest.h"

static const char *const pr_decode_reason_names[PR_DEC__COUNT] = {
    [PR_DEC_OK] = "ok",
    [PR_DEC_FIELD_COUNT] = "field_count",
    [PR_DEC_BAD_LABEL] = "bad_label",
    [PR_DEC_BAD_DENSE] = "bad_dense",
    [PR_DEC_BAD_HEX] = "bad_hex",
    [PR_DEC_LONG_HEX] = "long_hex",
    [PR_DEC_BAD_PROTOBUF] = "bad_protobuf",
    [PR_DEC_BAD_SHAPE] = "bad_shape",
    [PR_DEC_EMPTY] = "empty",
    [PR_DEC_NOT_JSON] = "not_json",
    [PR_DEC_NOT_OBJECT] = "not_object",
    [PR_DEC_TRUNCATED] = "truncated",
    [PR_DEC_BAD_UTF8] = "bad_utf8",
    [PR_DEC_BAD_ESCAPE] = "bad_escape",
    [PR_DEC_TOO_DEEP] = "too_deep",
    [PR_DEC_NUMBER_OUT_OF_RANGE] = "number_out_of_range",
    [PR_DEC_LIST_TOO_LONG] = "list_too_long",
    [PR_DEC_WRONG_TYPE] = "wrong_type",
    [PR_DEC_BAD_TIME] = "bad_time",
    [PR_DEC_UNKNOWN_SCHEMA_ID] = "unknown_schema_id",
    [PR_DEC_BAD_FRAMING] = "bad_framing",
    [PR_DEC_BAD_AVRO] = "bad_avro",
};

static const int pr_decode_of_json[PR_JSON__REASONS] = {
    [PR_JSON_OK] = PR_DEC_OK,
    [PR_JSON_NOT_JSON] = PR_DEC_NOT_JSON,
    [PR_JSON_NOT_OBJECT] = PR_DEC_NOT_OBJECT,
    [PR_JSON_TRUNCATED] = PR_DEC_TRUNCATED,
    [PR_JSON_BAD_UTF8] = PR_DEC_BAD_UTF8,
    [PR_JSON_BAD_ESCAPE] = PR_DEC_BAD_ESCAPE,
    [PR_JSON_TOO_DEEP] = PR_DEC_TOO_DEEP,
    [PR_JSON_NUMBER_OUT_OF_RANGE] = PR_DEC_NUMBER_OUT_OF_RANGE,
    [PR_JSON_LIST_TOO_LONG] = PR_DEC_LIST_TOO_LONG,
    [PR_JSON_WRONG_TYPE] = PR_DEC_WRONG_TYPE,
};

const char *pr_decode_reason_name(int reason)
{
    if (reason < 0 || reason >= PR_DEC__COUNT)
        return "unknown";
    return pr_decode_reason_names[reason];
}

int pr_decode_reason_of_json(int json_reason)
{
    if (json_reason <= 0 || json_reason >= PR_JSON__REASONS)
        return PR_DEC_NOT_JSON;
    return pr_decode_of_json[json_reason];
}

/* ms since the epoch as RFC 3339 UTC with milliseconds. */
static void pr__rfc3339_ms(int64_t ms, char *buf, size_t size)
{
    time_t t = (time_t)(ms >= 0 ? ms / 1000 : -((-ms + 999) / 1000));
    struct tm tm;
    if (!gmtime_r(&t, &tm) || !strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm)) {
        snprintf(buf, size, "%" PRId64 " ms", ms);
        return;
    }
    size_t n = strlen(buf);
    snprintf(buf + n, size - n, ".%03dZ", (int)(ms - (int64_t)t * 1000));
}

int pr_decode_check_ahead(const pr_decode_ctx *ctx, int64_t event_ms, char *what, size_t size)
{
    int64_t ref = ctx->default_event_time_ms;
    if (ctx->max_event_ahead_ms <= 0 || ref <= 0 || event_ms <= ref ||
        event_ms - ref <= ctx->max_event_ahead_ms)
        return 0;
    char et[48], mt[48];
    pr__rfc3339_ms(event_ms, et, sizeof(et));
    pr__rfc3339_ms(ref, mt, sizeof(mt));
    snprintf(what, size,
             "event time %s is %.1f days ahead of the message's timestamp %s "
             "(source.max_event_time_ahead_s %" PRId64 ")",
             et, (double)(event_ms - ref) / 86400000.0, mt, ctx->max_event_ahead_ms / 1000);
    return PR_DEC_BAD_TIME;
}

/* Strict UTF-8 (no overlongs, no surrogates, at most U+10FFFF). */
bool pr_utf8_valid(const void *p, size_t n)
{
    const uint8_t *s = p;
    size_t i = 0;
    for (uint64_t w; i + 8 <= n; i += 8) { /* ASCII, eight bytes at a time */
        memcpy(&w, s + i, 8);
        if (w & 0x8080808080808080ull)
            break;
    }
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = c >= 0xc2 && c <= 0xdf   ? 1
                   : c >= 0xe0 && c <= 0xef ? 2
                   : c >= 0xf0 && c <= 0xf4 ? 3
                                            : 0;
        if (!k || n - i <= k)
            return false;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
        else if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return false;
        for (size_t j = 2; j <= k; j++)
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
        i += k + 1;
    }
    return true;
}
