/*
 * config_infer_avro.c — `piperec infer --avro-schema`: Avro records as sample events.
 *
 * The inference (config_infer.c) judges JSON objects. Each varint-delimited
 * Avro body (plain, as `piperec process` reads source.format avro) becomes
 * the object whose paths the Avro reader shows the features (avro_reader.c;
 * docs/formats.md, "Avro events"), so the config says what the reader will
 * read: records and maps are objects (a map key is a path segment), a union
 * its branch, an enum its symbol, arrays lists, int/long integers (time
 * logical types as written: the inference tells ms from us by magnitude),
 * float/double numbers, a decimal a number, other bytes/fixed strings.
 *
 * Decoded with avro-c's generic values, not the reader's compiled plans: a
 * sample is read once and every field is wanted. avro-c keeps no
 * logicalType, so the schema's JSON is walked in step (decimals), as the
 * reader does. Records the reader rejects are rejected here where avro-c
 * shows why: truncated, bytes after the record, a union branch, enum index
 * or boolean out of range, a string not UTF-8, a decimal over 64 bytes, over
 * 64 nested values. (A garbage block count over items that encode in no
 * bytes makes avro-c append that many items; such schemas are rare.)
 */
#include <avro.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_config_int.h"

#define PR__IA_MAX_DEPTH   64 /* nested values, as the reader's too_deep */
#define PR__IA_MAX_DECIMAL 64 /* bytes of a decimal's unscaled value */
#define PR__IA_CHUNK       (1u << 20)

typedef struct pr__ia {
    avro_schema_t schema;
    avro_value_iface_t *iface;
    avro_value_t val;
    avro_reader_t rd;
    json_t *sj;    /* the schema's JSON, walked in step with the values */
    json_t *names; /* named type -> its JSON object */
} pr__ia;

/* Every named type's JSON object under its name and full name. */
static void pr__ia_names(json_t *names, json_t *j, const char *ns)
{
    size_t i;
    json_t *v;
    if (json_is_array(j))
        json_array_foreach(j, i, v) pr__ia_names(names, v, ns);
    if (!json_is_object(j))
        return;
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *space = json_string_value(json_object_get(j, "namespace"));
    if (!space)
        space = ns;
    const char *type = json_string_value(json_object_get(j, "type"));
    if (name && type &&
        (!strcmp(type, "record") || !strcmp(type, "enum") || !strcmp(type, "fixed") ||
         !strcmp(type, "error"))) {
        json_object_set(names, name, j);
        char full[512];
        if (space && space[0] && !strchr(name, '.') &&
            snprintf(full, sizeof(full), "%s.%s", space, name) < (int)sizeof(full))
            json_object_set(names, full, j);
    }
    json_t *t = json_object_get(j, "type");
    if (json_is_object(t) || json_is_array(t))
        pr__ia_names(names, t, space);
    json_array_foreach(json_object_get(j, "fields"), i, v)
        pr__ia_names(names, json_object_get(v, "type"), space);
    pr__ia_names(names, json_object_get(j, "items"), space);
    pr__ia_names(names, json_object_get(j, "values"), space);
}

/* The JSON object describing a schema node written as j (a name, an object). */
static json_t *pr__ia_jobj(const pr__ia *ia, json_t *j)
{
    if (json_is_string(j)) {
        json_t *o = json_object_get(ia->names, json_string_value(j));
        return o ? o : j;
    }
    json_t *t = json_object_get(j, "type");
    return json_is_object(t) || json_is_array(t) ? t : j;
}

/* bytes or fixed: a decimal's number, else a string of the bytes; bytes
 * that are not UTF-8 (a JSON string cannot hold them, and the sample value
 * goes into a YAML comment) as lowercase hex: still a string with as many
 * distinct values, so the inference decides as for the reader's string. */
static int pr__ia_bytes(json_t *jo, const unsigned char *s, size_t n, json_t **out)
{
    const char *lt = json_string_value(json_object_get(jo, "logicalType"));
    if (lt && !strcmp(lt, "decimal")) {
        if (n > PR__IA_MAX_DECIMAL)
            return PR_EBADREC; /* number_out_of_range */
        bool neg = n > 0 && (s[0] & 0x80);
        double x = 0;
        for (size_t i = 0; i < n; i++)
            x = x * 256.0 + (double)(neg ? (unsigned char)~s[i] : s[i]);
        x = (neg ? -(x + 1.0) : x) /
            pow(10.0, (double)json_integer_value(json_object_get(jo, "scale")));
        *out = isfinite(x) ? json_real(x) : json_null();
    } else if (pr_utf8_valid(s, n)) {
        *out = json_stringn((const char *)s, n);
    } else {
        char *hex = malloc(2 * n + 1);
        for (size_t i = 0; hex && i < n; i++)
            snprintf(hex + 2 * i, 3, "%02x", s[i]);
        *out = hex ? json_stringn(hex, 2 * n) : NULL;
        free(hex);
    }
    return *out ? 0 : PR_ENOMEM;
}

/* A number, or null for NaN and the infinities (no JSON number: absent). */
static json_t *pr__ia_real(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* v (its schema written as j) as the JSON value the reader shows at its
 * path, into *out: 0, PR_EBADREC (the reader rejects the record), PR_ENOMEM. */
static int pr__ia_value(const pr__ia *ia, avro_value_t *v, json_t *j, int depth, json_t **out)
{
    json_t *jo = pr__ia_jobj(ia, j);
    avro_type_t t = avro_value_get_type(v);
    avro_value_t kid;
    const void *b = NULL;
    const char *s = NULL;
    size_t n = 0;
    int rc = 0, k = -1;
    int32_t i32 = 0;
    int64_t i64 = 0;
    float f = 0;
    double d = 0;
    *out = NULL;
    if (depth > PR__IA_MAX_DEPTH)
        return PR_EBADREC; /* too_deep */
    switch (t) {
    case AVRO_NULL:
        *out = json_null();
        break;
    case AVRO_BOOLEAN:
        avro_value_get_boolean(v, &k);
        if (k != 0 && k != 1)
            return PR_EBADREC;
        *out = json_boolean(k);
        break;
    case AVRO_INT32:
        avro_value_get_int(v, &i32);
        *out = json_integer(i32);
        break;
    case AVRO_INT64:
        avro_value_get_long(v, &i64);
        *out = json_integer(i64);
        break;
    case AVRO_FLOAT:
        avro_value_get_float(v, &f);
        *out = pr__ia_real(f);
        break;
    case AVRO_DOUBLE:
        avro_value_get_double(v, &d);
        *out = pr__ia_real(d);
        break;
    case AVRO_ENUM:
        avro_value_get_enum(v, &k);
        if (k < 0 || k >= avro_schema_enum_number_of_symbols(avro_value_get_schema(v)))
            return PR_EBADREC;
        *out = json_string(avro_schema_enum_get(avro_value_get_schema(v), k));
        break;
    case AVRO_STRING:
        avro_value_get_string(v, &s, &n); /* n counts the NUL */
        n = n ? n - 1 : 0;
        if (!s || !pr_utf8_valid(s, n))
            return PR_EBADREC; /* bad_utf8, as a JSON line that is not UTF-8 */
        *out = json_stringn(s, n);
        break;
    case AVRO_BYTES:
    case AVRO_FIXED:
        if (t == AVRO_BYTES ? avro_value_get_bytes(v, &b, &n) : avro_value_get_fixed(v, &b, &n))
            return PR_EBADREC;
        return pr__ia_bytes(jo, b ? b : "", n, out);
    case AVRO_UNION:
        if (avro_value_get_discriminant(v, &k) || avro_value_get_current_branch(v, &kid))
            return PR_EBADREC;
        return pr__ia_value(ia, &kid, json_array_get(jo, (size_t)k), depth + 1, out);
    case AVRO_RECORD:
    case AVRO_MAP:
    case AVRO_ARRAY: {
        json_t *kj = json_object_get(jo, t == AVRO_ARRAY ? "items" : "values"), *x;
        *out = t == AVRO_ARRAY ? json_array() : json_object();
        avro_value_get_size(v, &n);
        for (size_t i = 0; *out && !rc && i < n; i++) {
            avro_value_get_by_index(v, i, &kid, &s);
            if (t == AVRO_RECORD)
                kj = json_object_get(json_array_get(json_object_get(jo, "fields"), i), "type");
            if ((rc = pr__ia_value(ia, &kid, kj, depth + 1, &x)))
                break;
            if (t == AVRO_ARRAY)
                rc = json_array_append_new(*out, x) ? PR_ENOMEM : 0;
            else if (s && pr_utf8_valid(s, strlen(s))) /* else no path can name it */
                rc = json_object_set_new(*out, s, x) ? PR_ENOMEM : 0;
            else
                json_decref(x);
        }
        break;
    }
    default:
        return PR_EBADREC;
    }
    if (rc) {
        json_decref(*out);
        *out = NULL;
    }
    return rc ? rc : *out ? 0 : PR_ENOMEM;
}

/* One record body: added, or counted as rejected. 0 or PR_ENOMEM. */
static int pr__ia_record(pr__ia *ia, pr_infer *inf, const char *buf, size_t len)
{
    json_t *root = NULL;
    char extra;
    int rc = PR_EBADREC;
    avro_reader_memory_set_source(ia->rd, len ? buf : "", (int64_t)len);
    if (!avro_value_read(ia->rd, &ia->val) && avro_read(ia->rd, &extra, 1) /* none left */)
        rc = pr__ia_value(ia, &ia->val, ia->sj, 0, &root);
    if (!rc)
        rc = pr__infer_add_root(inf, root);
    json_decref(root);
    if (rc == PR_EBADREC)
        pr__infer_reject(inf);
    return rc == PR_EBADREC ? 0 : rc;
}

static void pr__ia_fini(pr__ia *ia)
{
    if (ia->val.iface)
        avro_value_decref(&ia->val);
    if (ia->iface)
        avro_value_iface_decref(ia->iface);
    if (ia->rd)
        avro_reader_free(ia->rd);
    if (ia->schema)
        avro_schema_decref(ia->schema);
    json_decref(ia->sj);
    json_decref(ia->names);
}

/* The writer schema in path, parsed by jansson (its JSON, for logicalType)
 * and by avro-c (the tree the values follow), and one value to read into. */
static int pr__ia_init(pr__ia *ia, const char *path, char *errstr, size_t errstr_size)
{
    json_error_t jerr;
    char *text = NULL;
    if (!(ia->sj = json_load_file(path, JSON_DECODE_ANY, &jerr)))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "cannot read the writer schema %s: %s",
                         path, jerr.text);
    if (!(ia->names = json_object()) ||
        !(text = json_dumps(ia->sj, JSON_ENCODE_ANY | JSON_COMPACT)))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    int rc = 0;
    if (avro_schema_from_json_length(text, strlen(text), &ia->schema)) {
        ia->schema = NULL;
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "%s is not a usable Avro schema: %s", path,
                       avro_strerror());
    } else if (avro_typeof(ia->schema) != AVRO_RECORD) {
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "%s: the top level of a writer schema must be a record", path);
    } else if (!(ia->iface = avro_generic_class_from_schema(ia->schema)) ||
               avro_generic_value_new(ia->iface, &ia->val) ||
               !(ia->rd = avro_reader_memory("", 0))) {
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    }
    free(text);
    if (!rc)
        pr__ia_names(ia->names, ia->sj, NULL);
    return rc;
}

int pr_infer_add_avro_records(pr_infer *inf, const char *schema_file, FILE *f, uint64_t max_events,
                              char *errstr, size_t errstr_size)
{
    pr__ia ia = {0};
    int rc = pr__ia_init(&ia, schema_file, errstr, errstr_size), c;
    char *rec = NULL;
    size_t cap = 0;
    while (!rc && pr_infer_events(inf) < max_events && (c = getc(f)) != EOF) {
        uint64_t len = 0;
        unsigned shift = 0;
        for (; c != EOF && (c & 0x80) && shift < 35; shift += 7, c = getc(f))
            len |= (uint64_t)(c & 0x7f) << shift; /* as the offline reader: 6 bytes at most */
        bool ok = c != EOF && !(c & 0x80);
        len |= ok ? (uint64_t)c << shift : 0;
        /* grown as the bytes come: a garbage length costs no more than the input has */
        for (size_t got = 0, want; ok && got < len; got += want) {
            want = len - got < PR__IA_CHUNK ? (size_t)(len - got) : PR__IA_CHUNK;
            if (got + want > cap) {
                char *nb = realloc(rec, got + want);
                if (!nb) {
                    rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro records: out of memory");
                    break;
                }
                rec = nb;
                cap = got + want;
            }
            ok = fread(rec + got, 1, want, f) == want;
        }
        if (rc || ferror(f))
            break;
        if (!ok) { /* a length unreadable or beyond the input: no next record */
            pr__infer_reject(inf);
            break;
        }
        if ((rc = pr__ia_record(&ia, inf, rec, (size_t)len)))
            pr_seterr(errstr, errstr_size, rc, "avro records: out of memory");
    }
    if (!rc && ferror(f))
        rc =
            pr_seterr(errstr, errstr_size, PR_EIO, "reading the Avro records: %s", strerror(errno));
    free(rec);
    pr__ia_fini(&ia);
    return rc;
}
