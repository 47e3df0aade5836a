/*
 * avro_writer.c — JSON objects to Avro binary under a writer schema, plain
 * or registry-framed (issue 23; contract: "Avro writer" in pr_ingest.h).
 *
 * For tools and tests, not the hot path: `piperec produce --format avro`
 * and `piperec gen --format avro` encode the same generated clickstream the
 * JSON path reads, so that the two formats can be compared event for event.
 * The JSON is parsed with jansson and walked in step with avro-c's schema
 * tree; a union takes null for a missing or null value, else its first
 * branch that fits the JSON value's kind.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>

#include "pr_ingest.h"

struct pr_avro_writer {
    avro_schema_t schema;
    json_t *sj;    /* the schema's JSON (decimal scales) */
    json_t *names; /* named type -> its JSON object */
};

typedef struct pr__out {
    uint8_t *buf;
    size_t len, cap;
    char *err;
    size_t err_size;
} pr__out;

static int pr__room(pr__out *o, size_t n)
{
    if (o->len + n <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n)
        cap *= 2;
    uint8_t *b = realloc(o->buf, cap);
    if (!b)
        return pr_seterr(o->err, o->err_size, PR_ENOMEM, "avro: out of memory");
    o->buf = b;
    o->cap = cap;
    return 0;
}

static int pr__put(pr__out *o, const void *p, size_t n)
{
    int rc = pr__room(o, n);
    if (!rc && n) {
        memcpy(o->buf + o->len, p, n);
        o->len += n;
    }
    return rc;
}

static int pr__put_long(pr__out *o, int64_t v)
{
    uint8_t b[10];
    size_t n = 0;
    uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    do {
        b[n] = (uint8_t)(u & 0x7f);
        u >>= 7;
        if (u)
            b[n] |= 0x80;
        n++;
    } while (u);
    return pr__put(o, b, n);
}

/* Named types' JSON, for links and logical types. */
static void pr__wnames(json_t *names, json_t *j)
{
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) pr__wnames(names, v);
        return;
    }
    if (!json_is_object(j))
        return;
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *type = json_string_value(json_object_get(j, "type"));
    if (name && type &&
        (!strcmp(type, "record") || !strcmp(type, "enum") || !strcmp(type, "fixed"))) {
        const char *dot = strrchr(name, '.');
        json_object_set(names, dot ? dot + 1 : name, j);
    }
    json_t *t = json_object_get(j, "type");
    if (json_is_object(t) || json_is_array(t))
        pr__wnames(names, t);
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(j, "fields"), i, f)
        pr__wnames(names, json_object_get(f, "type"));
    pr__wnames(names, json_object_get(j, "items"));
    pr__wnames(names, json_object_get(j, "values"));
}

static json_t *pr__wobj(const pr_avro_writer *w, json_t *j)
{
    if (json_is_string(j)) {
        const char *n = json_string_value(j);
        const char *dot = strrchr(n, '.');
        json_t *o = json_object_get(w->names, dot ? dot + 1 : n);
        return o ? o : j;
    }
    if (json_is_object(j)) {
        json_t *t = json_object_get(j, "type");
        if (json_is_object(t) || json_is_array(t))
            return t;
    }
    return j;
}

/* Does JSON value v fit schema s (a union's branch choice)? */
static bool pr__fits(avro_schema_t s, json_t *v)
{
    switch (avro_typeof(s)) {
    case AVRO_NULL:
        return json_is_null(v);
    case AVRO_BOOLEAN:
        return json_is_boolean(v);
    case AVRO_INT32:
    case AVRO_INT64:
        return json_is_integer(v);
    case AVRO_FLOAT:
    case AVRO_DOUBLE:
        return json_is_number(v);
    case AVRO_STRING:
    case AVRO_BYTES:
    case AVRO_ENUM:
    case AVRO_FIXED:
        return json_is_string(v);
    case AVRO_RECORD:
    case AVRO_MAP:
        return json_is_object(v);
    case AVRO_ARRAY:
        return json_is_array(v);
    default:
        return false;
    }
}

static int pr__enc(const pr_avro_writer *w, pr__out *o, avro_schema_t s, json_t *sj, json_t *v,
                   const char *where);

static int pr__enc_record(const pr_avro_writer *w, pr__out *o, avro_schema_t s, json_t *jo,
                          json_t *v)
{
    json_t *fields = json_object_get(jo, "fields");
    for (size_t i = 0; i < avro_schema_record_size(s); i++) {
        const char *name = avro_schema_record_field_name(s, (int)i);
        json_t *fv = json_object_get(v, name);
        json_t *fj = json_array_get(fields, i);
        if (!fv)
            fv = json_object_get(fj, "default"); /* NULL: missing (a union takes null) */
        int rc = pr__enc(w, o, avro_schema_record_field_get_by_index(s, (int)i),
                         json_object_get(fj, "type"), fv, name);
        if (rc)
            return rc;
    }
    return 0;
}

static int pr__enc_blocks(const pr_avro_writer *w, pr__out *o, avro_schema_t s, json_t *jo,
                          json_t *v, const char *where)
{
    int rc;
    bool map = avro_typeof(s) == AVRO_MAP;
    size_t n = map ? json_object_size(v) : json_array_size(v);
    if (n && (rc = pr__put_long(o, (int64_t)n)))
        return rc;
    avro_schema_t is = map ? avro_schema_map_values(s) : avro_schema_array_items(s);
    json_t *ij = json_object_get(jo, map ? "values" : "items");
    if (map) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x)
        {
            if ((rc = pr__put_long(o, (int64_t)strlen(k))) || (rc = pr__put(o, k, strlen(k))) ||
                (rc = pr__enc(w, o, is, ij, x, where)))
                return rc;
        }
    } else {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if ((rc = pr__enc(w, o, is, ij, x, where)))
                return rc;
        }
    }
    return pr__put_long(o, 0);
}

/* bytes / fixed: the string's bytes, or a decimal's unscaled value. */
static int pr__enc_bytes(pr__out *o, avro_schema_t s, json_t *jo, json_t *v, const char *where)
{
    const char *lt = json_string_value(json_object_get(jo, "logicalType"));
    uint8_t dec[16];
    const void *p;
    size_t n;
    if (lt && !strcmp(lt, "decimal") && json_is_number(v)) {
        int scale = (int)json_integer_value(json_object_get(jo, "scale"));
        int64_t u = (int64_t)llround(json_number_value(v) * pow(10.0, scale));
        n = is_avro_fixed(s) ? (size_t)avro_schema_fixed_size(s) : 8;
        if (n > sizeof(dec))
            return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: decimal too wide", where);
        for (size_t i = 0; i < n; i++)
            dec[n - 1 - i] = i < 8 ? (uint8_t)((uint64_t)u >> (8 * i)) : (u < 0 ? 0xff : 0);
        p = dec;
    } else if (json_is_string(v)) {
        p = json_string_value(v);
        n = json_string_length(v);
    } else {
        return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: a string expected", where);
    }
    int rc = 0;
    if (is_avro_fixed(s) && n != (size_t)avro_schema_fixed_size(s))
        return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: fixed of the wrong size", where);
    if (!is_avro_fixed(s))
        rc = pr__put_long(o, (int64_t)n);
    return rc ? rc : pr__put(o, p, n);
}

static int pr__enc_union(const pr_avro_writer *w, pr__out *o, avro_schema_t s, json_t *jo,
                         json_t *v, const char *where)
{
    json_t *nul = json_null();
    if (!v)
        v = nul;
    for (size_t i = 0; i < avro_schema_union_size(s); i++) {
        avro_schema_t b = avro_schema_union_branch(s, (int)i);
        while (is_avro_link(b))
            b = avro_schema_link_target(b);
        json_t *bo = pr__wobj(w, json_array_get(jo, i));
        const char *lt = json_string_value(json_object_get(bo, "logicalType"));
        bool decimal = lt && !strcmp(lt, "decimal") && json_is_number(v) &&
                       (is_avro_bytes(b) || is_avro_fixed(b));
        if (pr__fits(b, v) || decimal) {
            int rc = pr__put_long(o, (int64_t)i);
            return rc ? rc : pr__enc(w, o, b, json_array_get(jo, i), v, where);
        }
    }
    return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: no union branch fits the value", where);
}

static int pr__enc(const pr_avro_writer *w, pr__out *o, avro_schema_t s, json_t *sj, json_t *v,
                   const char *where)
{
    while (is_avro_link(s))
        s = avro_schema_link_target(s);
    json_t *jo = pr__wobj(w, sj);
    if (is_avro_union(s))
        return pr__enc_union(w, o, s, jo, v, where);
    if (!v || (!pr__fits(s, v) && !(is_avro_bytes(s) || is_avro_fixed(s))))
        return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: %s expected", where,
                         avro_schema_type_name(s));
    switch (avro_typeof(s)) {
    case AVRO_NULL:
        return 0;
    case AVRO_BOOLEAN: {
        uint8_t b = json_is_true(v);
        return pr__put(o, &b, 1);
    }
    case AVRO_INT32:
    case AVRO_INT64:
        return pr__put_long(o, (int64_t)json_integer_value(v));
    case AVRO_FLOAT: {
        float f = (float)json_number_value(v);
        return pr__put(o, &f, 4);
    }
    case AVRO_DOUBLE: {
        double d = json_number_value(v);
        return pr__put(o, &d, 8);
    }
    case AVRO_STRING:
        return pr__enc_bytes(o, s, jo, v, where);
    case AVRO_BYTES:
    case AVRO_FIXED:
        return pr__enc_bytes(o, s, jo, v, where);
    case AVRO_ENUM: {
        int k = avro_schema_enum_get_by_name(s, json_string_value(v));
        if (k < 0)
            return pr_seterr(o->err, o->err_size, PR_EINVAL, "%s: not a symbol", where);
        return pr__put_long(o, k);
    }
    case AVRO_RECORD:
        return pr__enc_record(w, o, s, jo, v);
    default: /* AVRO_MAP, AVRO_ARRAY */
        return pr__enc_blocks(w, o, s, jo, v, where);
    }
}

pr_avro_writer *pr_avro_writer_new(const char *schema_json, char *errstr, size_t errstr_size)
{
    pr_avro_writer *w = calloc(1, sizeof(*w));
    json_error_t jerr;
    if (!w) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        return NULL;
    }
    if (avro_schema_from_json_length(schema_json, strlen(schema_json), &w->schema)) {
        w->schema = NULL;
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: %s", avro_strerror());
        goto out_free;
    }
    if (!(w->sj = json_loads(schema_json, JSON_DECODE_ANY, &jerr)) || !(w->names = json_object())) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: %s", jerr.text);
        goto out_free;
    }
    pr__wnames(w->names, w->sj);
    return w;
out_free:
    pr_avro_writer_free(w);
    return NULL;
}

void pr_avro_writer_free(pr_avro_writer *w)
{
    if (!w)
        return;
    if (w->schema)
        avro_schema_decref(w->schema);
    json_decref(w->sj);
    json_decref(w->names);
    free(w);
}

int pr_avro_from_json(pr_avro_writer *w, const char *json, size_t len, int64_t framed_id,
                      uint8_t **buf, size_t *out_len, size_t *cap, char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    json_t *v = json_loadb(json, len, 0, &jerr);
    if (!v)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "not JSON: %s", jerr.text);
    pr__out o = {.buf = *buf, .cap = *cap, .err = errstr, .err_size = errstr_size};
    int rc = 0;
    if (framed_id >= 0) {
        uint8_t h[5] = {0, (uint8_t)(framed_id >> 24), (uint8_t)(framed_id >> 16),
                        (uint8_t)(framed_id >> 8), (uint8_t)framed_id};
        rc = pr__put(&o, h, 5);
    }
    if (!rc)
        rc = pr__enc(w, &o, w->schema, w->sj, v, "record");
    json_decref(v);
    *buf = o.buf;
    *cap = o.cap;
    *out_len = o.len;
    return rc;
}
