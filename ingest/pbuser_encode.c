/*
 * pbuser_encode.c — one JSON object -> the wire bytes of a user's message
 * (pr_pbuser_encode_json): what `piperec produce --format protobuf`, the
 * tests and the benches use to write the same events in both formats.
 *
 * A small recursive reader of JSON text that writes protobuf as it goes,
 * driven by the descriptor set: each object is a message (keys are field
 * names or json_names), an array a repeated field (packable scalars packed),
 * an object on a map field a map, a string on an enum field its symbol.
 * null writes nothing, so an absent key and null read back the same; a
 * number may come as a string, as protobuf's JSON mapping writes 64-bit
 * integers ("ts_ms": "1732615200123"); a google.protobuf.Timestamp or
 * Duration may come as its JSON mapping's string ("2024-11-26T06:00:00Z",
 * "1.5s") or as {"seconds", "nanos"}. Not a
 * hot path: each nested message is written to its own buffer and then copied
 * behind its length. Integers are read exactly (strtoll / strtoull), floats
 * with strtod, as the JSON extractor reads them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbuser_int.h"
#include "pr_varint.h"

typedef struct pr__wbuf {
    uint8_t *b;
    size_t len, cap;
    int err;
} pr__wbuf;

typedef struct pr__jr {
    const char *p, *end, *start;
    const pr_pbuser_desc *d;
    char *err;
    size_t errn;
    const char *key; /* the key being written, for errors */
    size_t key_len;
} pr__jr;

static void pr__wb_put(pr__wbuf *w, const void *p, size_t n)
{
    if (w->err || n == 0) /* an empty sub-message: its buffer is still NULL */
        return;
    if (w->len + n > w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 256;
        while (nc < w->len + n)
            nc *= 2;
        uint8_t *nb = realloc(w->b, nc);
        if (!nb) {
            w->err = PR_ENOMEM;
            return;
        }
        w->b = nb;
        w->cap = nc;
    }
    memcpy(w->b + w->len, p, n);
    w->len += n;
}

static void pr__wb_varint(pr__wbuf *w, uint64_t v)
{
    uint8_t t[PR_VARINT_MAX];
    pr__wb_put(w, t, (size_t)(pr_varint_put(t, v) - t));
}

static void pr__wb_tag(pr__wbuf *w, uint32_t num, int wt)
{
    pr__wb_varint(w, ((uint64_t)num << 3) | (uint64_t)wt);
}

static int pr__jerr(pr__jr *j, const char *what)
{
    return pr_seterr(j->err, j->errn, PR_EINVAL, "key '%.*s': %s (at byte %zu)", (int)j->key_len,
                     j->key ? j->key : "", what, (size_t)(j->p - j->start));
}

static void pr__ws(pr__jr *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static bool pr__lit(pr__jr *j, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, s, n)) {
        j->p += n;
        return true;
    }
    return false;
}

static void pr__utf8_put(pr__wbuf *w, uint32_t cp)
{
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xc0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xe0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xf0 | cp >> 18);
        b[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        b[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        b[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    pr__wb_put(w, b, n);
}

static int pr__hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A JSON string, unescaped, into s (reset first). */
static int pr__jstr(pr__jr *j, pr__wbuf *s)
{
    s->len = 0;
    pr__ws(j);
    if (j->p >= j->end || *j->p != '"')
        return pr__jerr(j, "a string expected");
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p != '\\') {
            pr__wb_put(s, j->p++, 1);
            continue;
        }
        if (j->end - j->p < 2)
            break;
        char c = j->p[1];
        j->p += 2;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = strchr(from, c);
        if (c && k) {
            pr__wb_put(s, &to[k - from], 1);
            continue;
        }
        uint32_t cp, lo;
        if (c != 'u' || j->end - j->p < 4 || pr__hex4(j->p, &cp))
            return pr__jerr(j, "bad escape");
        j->p += 4;
        if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' &&
            j->p[1] == 'u' && !pr__hex4(j->p + 2, &lo) && lo >= 0xdc00 && lo < 0xe000) {
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            j->p += 6;
        }
        pr__utf8_put(s, cp);
    }
    if (j->p >= j->end)
        return pr__jerr(j, "unterminated string");
    j->p++;
    return s->err;
}

/* The text of a JSON number (or of a bare literal) at p. */
static size_t pr__jnum(pr__jr *j, char *buf, size_t cap)
{
    pr__ws(j);
    size_t n = 0;
    while (j->p + n < j->end && strchr("+-.0123456789eE", j->p[n]) && n + 1 < cap)
        n++;
    memcpy(buf, j->p, n);
    buf[n] = '\0';
    j->p += n;
    return n;
}

static int pr__message(pr__jr *j, int32_t msg, pr__wbuf *out, uint32_t depth);

/* A Duration's JSON text ("1.5s", "-0.000000001s", "3s"): seconds and
 * nanos of the same sign. 0, or -1 when it is not one. */
static int pr__duration(const char *s, size_t n, int64_t *secs, int32_t *nanos)
{
    size_t at = 0;
    bool neg = n && s[0] == '-';
    at += neg;
    uint64_t sec = 0, frac = 0;
    int nd = 0, fd = 0;
    for (; at < n && s[at] >= '0' && s[at] <= '9' && nd < 12; at++, nd++)
        sec = sec * 10 + (uint64_t)(s[at] - '0');
    if (at < n && s[at] == '.')
        for (at++; at < n && s[at] >= '0' && s[at] <= '9' && fd < 9; at++, fd++)
            frac = frac * 10 + (uint64_t)(s[at] - '0');
    if (!nd || at + 1 != n || s[at] != 's' || sec > 315576000000ULL)
        return -1;
    for (; fd < 9; fd++)
        frac *= 10;
    *secs = neg ? -(int64_t)sec : (int64_t)sec;
    *nanos = neg ? -(int32_t)frac : (int32_t)frac;
    return 0;
}

/* A Timestamp or Duration written from its JSON mapping's string (an RFC
 * 3339 time, to the microsecond as piperec reads it; "1.5s"), as the
 * message: seconds (1), nanos (2), each left out when 0. */
static int pr__wkt_string(pr__jr *j, pr_pb_wkt wkt, pr__wbuf *sub)
{
    pr__wbuf s = {0};
    int rc = pr__jstr(j, &s);
    int64_t secs = 0, us = 0;
    int32_t nanos = 0;
    if (!rc && wkt == PR_PB_WKT_TIMESTAMP) {
        if (!s.len || pr_fop_parse_rfc3339((const char *)s.b, s.len, &us))
            rc = pr__jerr(j, "an RFC 3339 time (2024-11-26T06:00:00.5Z) expected");
        secs = us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000); /* floor */
        nanos = (int32_t)(us - secs * 1000000) * 1000;
    } else if (!rc && pr__duration((const char *)s.b, s.len, &secs, &nanos)) {
        rc = pr__jerr(j, "a duration in seconds (\"1.5s\") expected");
    }
    free(s.b);
    if (rc)
        return rc;
    if (secs) {
        pr__wb_tag(sub, 1, PR__WT_VARINT);
        pr__wb_varint(sub, (uint64_t)secs);
    }
    if (nanos) {
        pr__wb_tag(sub, 2, PR__WT_VARINT);
        pr__wb_varint(sub, (uint64_t)(int64_t)nanos);
    }
    return 0;
}

/* One value of field f (not the repeated / map wrapping): its tag and bytes,
 * or with `packed` the bare value. */
static int pr__value(pr__jr *j, const pr__pbfield *f, pr__wbuf *out, bool packed, uint32_t depth)
{
    char num[64];
    int wt = pr__pb_wire_type(f->type);
    pr__ws(j);
    if (f->type == PR__PBT_MESSAGE) {
        pr__wbuf sub = {0};
        pr_pb_wkt wkt = (pr_pb_wkt)j->d->msgs[f->msg].wkt;
        int rc = wkt && j->p < j->end && *j->p == '"' ? pr__wkt_string(j, wkt, &sub)
                                                      : pr__message(j, f->msg, &sub, depth + 1);
        if (!rc && !sub.err) {
            pr__wb_tag(out, f->number, PR__WT_LEN);
            pr__wb_varint(out, sub.len);
            pr__wb_put(out, sub.b, sub.len);
        }
        free(sub.b);
        return rc ? rc : sub.err;
    }
    if (!packed)
        pr__wb_tag(out, f->number, wt);
    if (f->type == PR__PBT_STRING || f->type == PR__PBT_BYTES) {
        pr__wbuf s = {0};
        int rc = pr__jstr(j, &s);
        if (!rc) {
            pr__wb_varint(out, s.len);
            pr__wb_put(out, s.b, s.len);
        }
        free(s.b);
        return rc;
    }
    if (f->type == PR__PBT_BOOL) {
        if (pr__lit(j, "true") || pr__lit(j, "1"))
            pr__wb_varint(out, 1);
        else if (pr__lit(j, "false") || pr__lit(j, "0"))
            pr__wb_varint(out, 0);
        else
            return pr__jerr(j, "a bool expected");
        return 0;
    }
    uint64_t u = 0;
    if (f->type == PR__PBT_ENUM && j->p < j->end && *j->p == '"') {
        pr__wbuf s = {0};
        int rc = pr__jstr(j, &s);
        const pr__pbenum *en = &j->d->enums[f->enm];
        uint32_t i = 0;
        while (!rc && i < en->n &&
               (strlen(en->name[i]) != s.len || memcmp(en->name[i], s.b, s.len)))
            i++;
        free(s.b);
        if (rc || i == en->n)
            return rc ? rc : pr__jerr(j, "not a symbol of the enum");
        u = (uint64_t)(int64_t)en->num[i];
        pr__wb_varint(out, u);
        return 0;
    }
    if (j->p < j->end && *j->p == '"') {
        /* Protobuf's JSON mapping writes 64-bit integers as strings ("123")
         * and accepts a string for every number ("1.5", "NaN"): read its
         * text as the number. */
        pr__wbuf s = {0};
        int rc = pr__jstr(j, &s);
        bool fits = !rc && s.len > 0 && s.len < sizeof(num);
        if (fits) {
            memcpy(num, s.b, s.len);
            num[s.len] = '\0';
        }
        free(s.b);
        if (rc || !fits)
            return rc ? rc : pr__jerr(j, "a number (or a number in a string) expected");
    } else if (!pr__jnum(j, num, sizeof(num))) {
        return pr__jerr(j, "a number expected");
    }
    char *e = NULL;
    errno = 0;
    double dv = 0;
    switch (f->type) {
    case PR__PBT_DOUBLE:
    case PR__PBT_FLOAT:
        dv = strtod(num, &e);
        break;
    case PR__PBT_UINT64:
    case PR__PBT_FIXED64:
    case PR__PBT_UINT32:
    case PR__PBT_FIXED32:
        u = strtoull(num, &e, 10);
        break;
    default: {
        int64_t i = strtoll(num, &e, 10);
        u = f->type == PR__PBT_SINT32 || f->type == PR__PBT_SINT64
                ? ((uint64_t)i << 1) ^ (uint64_t)(i >> 63)
                : (uint64_t)i;
        break;
    }
    }
    if (!e || *e || errno)
        return pr__jerr(j, "not a number of the field's type");
    if (f->type == PR__PBT_DOUBLE) {
        memcpy(&u, &dv, 8);
    } else if (f->type == PR__PBT_FLOAT) {
        float fl = (float)dv;
        uint32_t b32;
        memcpy(&b32, &fl, 4);
        u = b32;
    }
    uint8_t fx[8];
    for (int i = 0; i < 8; i++)
        fx[i] = (uint8_t)(u >> (8 * i));
    if (wt == PR__WT_VARINT)
        pr__wb_varint(out, f->type == PR__PBT_INT32 ? (uint64_t)(int64_t)(int32_t)u : u);
    else
        pr__wb_put(out, fx, wt == PR__WT_I64 ? 8 : 4);
    return 0;
}

/* A JSON object on a map field: one entry per key. */
static int pr__map(pr__jr *j, const pr__pbfield *f, pr__wbuf *out, uint32_t depth)
{
    const pr__pbfield *kf = pr__pb_field_by_number(j->d, f->msg, 1);
    const pr__pbfield *vf = pr__pb_field_by_number(j->d, f->msg, 2);
    pr__wbuf key = {0}, ent = {0};
    int rc = 0;
    pr__ws(j);
    if (!kf || !vf || j->p >= j->end || *j->p++ != '{')
        return pr__jerr(j, "an object expected for a map");
    pr__ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        if ((rc = pr__jstr(j, &key)))
            break;
        pr__ws(j);
        if (j->p >= j->end || *j->p++ != ':') {
            rc = pr__jerr(j, "':' expected");
            break;
        }
        ent.len = 0;
        pr__wb_tag(&ent, 1, pr__pb_wire_type(kf->type));
        if (kf->type == PR__PBT_STRING) {
            pr__wb_varint(&ent, key.len);
            pr__wb_put(&ent, key.b, key.len);
        } else { /* integer or bool keys: the key text as a JSON value */
            pr__jr kj = *j;
            pr__wb_put(&key, "", 1);
            kj.p = (const char *)key.b;
            kj.end = kj.p + key.len - 1;
            ent.len = 0;
            if ((rc = pr__value(&kj, kf, &ent, false, 0)))
                break;
        }
        if ((rc = pr__value(j, vf, &ent, false, depth)))
            break;
        pr__wb_tag(out, f->number, PR__WT_LEN);
        pr__wb_varint(out, ent.len);
        pr__wb_put(out, ent.b, ent.len);
        pr__ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p >= j->end || *j->p++ != '}')
            rc = pr__jerr(j, "'}' expected");
        break;
    }
    free(key.b);
    free(ent.b);
    return rc ? rc : ent.err;
}

/* A JSON array (or one value) on a repeated field. */
static int pr__repeated(pr__jr *j, const pr__pbfield *f, pr__wbuf *out, uint32_t depth)
{
    bool packed = pr__pb_packable(f->type);
    pr__wbuf run = {0};
    int rc = 0;
    pr__ws(j);
    bool array = j->p < j->end && *j->p == '[';
    if (array) {
        j->p++;
        pr__ws(j);
    }
    if (array && j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        if ((rc = pr__value(j, f, packed ? &run : out, packed, depth)) || !array)
            break;
        pr__ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p >= j->end || *j->p++ != ']')
            rc = pr__jerr(j, "']' expected");
        break;
    }
    if (!rc && packed) {
        pr__wb_tag(out, f->number, PR__WT_LEN);
        pr__wb_varint(out, run.len);
        pr__wb_put(out, run.b, run.len);
    }
    free(run.b);
    return rc ? rc : run.err;
}

static int pr__message(pr__jr *j, int32_t msg, pr__wbuf *out, uint32_t depth)
{
    if (depth >= PR__PB_MAX_DEPTH)
        return pr__jerr(j, "nested too deep");
    pr__ws(j);
    if (j->p >= j->end || *j->p++ != '{')
        return pr__jerr(j, "an object expected");
    pr__ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    pr__wbuf key = {0};
    int rc = 0;
    for (;;) {
        if ((rc = pr__jstr(j, &key)))
            break;
        const pr__pbfield *f = pr__pb_field_by_name(j->d, msg, (const char *)key.b, key.len);
        pr__ws(j);
        if (j->p >= j->end || *j->p++ != ':') {
            rc = pr__jerr(j, "':' expected");
            break;
        }
        if (!f) {
            rc = pr_seterr(j->err, j->errn, PR_EINVAL, "message %s has no field '%.*s'",
                           j->d->msgs[msg].full, (int)key.len, (const char *)key.b);
            break;
        }
        j->key = f->name;
        j->key_len = strlen(f->name);
        pr__ws(j);
        if (pr__lit(j, "null"))
            rc = 0;
        else if (f->repeated && f->msg >= 0 && j->d->msgs[f->msg].map_entry)
            rc = pr__map(j, f, out, depth);
        else if (f->repeated)
            rc = pr__repeated(j, f, out, depth);
        else
            rc = pr__value(j, f, out, false, depth);
        if (rc)
            break;
        pr__ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p >= j->end || *j->p++ != '}')
            rc = pr__jerr(j, "'}' expected");
        break;
    }
    free(key.b);
    return rc;
}

int pr_pbuser_encode_json(const pr_pbuser_desc *d, const char *json, size_t len, bool framed,
                          uint32_t schema_id, uint8_t **out, size_t *cap, char *errstr,
                          size_t errstr_size)
{
    pr__wbuf w = {.b = *out, .cap = *cap};
    pr__jr j = {
        .p = json, .end = json + len, .start = json, .d = d, .err = errstr, .errn = errstr_size};
    if (framed) {
        uint8_t h[5] = {0, (uint8_t)(schema_id >> 24), (uint8_t)(schema_id >> 16),
                        (uint8_t)(schema_id >> 8), (uint8_t)schema_id};
        pr__wb_put(&w, h, 5);
        if (d->root_n_path == 1 && d->root_path[0] == 0) {
            pr__wb_varint(&w, 0); /* [0] */
        } else {
            pr__wb_varint(&w, (uint64_t)d->root_n_path << 1);
            for (uint32_t i = 0; i < d->root_n_path; i++)
                pr__wb_varint(&w, (uint64_t)d->root_path[i] << 1);
        }
    }
    int rc = pr__message(&j, d->root, &w, 0);
    *out = w.b;
    *cap = w.cap;
    if (!rc && w.err)
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    if (!rc) {
        pr__ws(&j);
        if (j.p != j.end)
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "bytes after the object");
    }
    return rc ? rc : (int)w.len;
}
