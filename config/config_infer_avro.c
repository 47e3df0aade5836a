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
 * Decoded here, straight into jansson, not with avro-c's generic values:
 * avro_value_read trusts the lengths and counts it reads (a corrupt varint
 * becomes a malloc of any size; a short read leaks the string it was
 * filling), and infer reads whatever file it is given. avro-c only parses
 * and checks the writer schema; its tree is compiled once into nodes (one
 * per schema node, a named type shared so recursion ends at its own node),
 * with what avro-c does not keep (logicalType decimal) read from the
 * schema's JSON in step, as the reader does.
 *
 * Safe on any bytes: every length and count is checked against the bytes
 * left before anything is allocated, so a record costs memory in proportion
 * to its length. Rejected as ingest/avro_reader.c's pr__read rejects:
 * truncated, a varint over 10 bytes, a length or block count beyond the
 * record (items of a zero-byte type: 2^20 per block), a union branch or enum
 * index out of range, a boolean not 0 or 1, a string not UTF-8, a decimal
 * over 64 bytes, more than 64 levels of nesting counted as the reader counts
 * them (a record's fields, an array's items, a map's values one level
 * deeper, a union none), bytes after the record. One limit more: 2^20 items
 * of a zero-byte type per record, not per block, as here each is a JSON
 * value (the reader stores none).
 */
#include <avro.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_config_int.h"

#define PR__IA_MAX_DEPTH   64         /* nested values, as the reader's PR__AV_MAX_DEPTH */
#define PR__IA_MAX_EMPTY   (1u << 20) /* items of a zero-byte type, as PR__AV_MAX_EMPTY */
#define PR__IA_MAX_DECIMAL 64         /* bytes of a decimal's unscaled value */

/* One schema node, links resolved. */
typedef struct pr__ian pr__ian;
struct pr__ian {
    avro_schema_t s; /* with jo, what a named type's node is shared under */
    json_t *jo;      /* its JSON as pr__ia_jobj gives it (logicalType) */
    avro_type_t type;
    bool zero_size; /* encodes in no bytes: such items are bounded by count */
    bool decimal;   /* bytes or fixed with logicalType decimal */
    double scale10; /* decimal: 10^scale */
    int64_t size;   /* fixed: bytes; enum: symbols */
    uint32_t n;     /* kids: record fields, union branches, array items / map values (1) */
    pr__ian **kid;
    const char **name; /* record: field names (NULL: not UTF-8, no path can name it) */
};

typedef struct pr__ia {
    avro_schema_t schema;
    json_t *sj;    /* the schema's JSON, walked in step with avro-c's tree */
    json_t *names; /* named type -> its JSON object */
    pr__ian *root;
    pr__ian **nodes; /* every node, for freeing and sharing */
    size_t n_nodes, cap_nodes;
    uint64_t n_plain, n_registry; /* records read each way */
} pr__ia;

/* One record body being decoded. */
typedef struct pr__iar {
    const uint8_t *p, *end;
    uint32_t empty; /* items of a zero-byte type still allowed in this record */
} pr__iar;

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

/* ---------------------------------------------------------------- compiling */

static pr__ian *pr__ia_node(pr__ia *ia)
{
    if (ia->n_nodes == ia->cap_nodes) {
        size_t cap = ia->cap_nodes ? ia->cap_nodes * 2 : 32;
        pr__ian **m = realloc(ia->nodes, cap * sizeof(*m));
        if (!m)
            return NULL;
        ia->nodes = m;
        ia->cap_nodes = cap;
    }
    pr__ian *n = calloc(1, sizeof(*n));
    if (n)
        ia->nodes[ia->n_nodes++] = n;
    return n;
}

static int pr__ia_kids(pr__ian *n, size_t count)
{
    n->n = (uint32_t)count;
    n->kid = calloc(count ? count : 1, sizeof(*n->kid));
    return n->kid ? 0 : PR_ENOMEM;
}

/* The node of schema node s, written as j in the schema's JSON; NULL: out
 * of memory. A named type's node is made once and registered before its
 * kids, so a recursive type refers to itself (its zero_size then reads as
 * the reader's does, true while its fields are compiled). */
static pr__ian *pr__ia_compile(pr__ia *ia, avro_schema_t s, json_t *j)
{
    while (s && is_avro_link(s))
        s = avro_schema_link_target(s);
    if (!s)
        return NULL;
    json_t *jo = pr__ia_jobj(ia, j);
    avro_type_t t = avro_typeof(s);
    if (t == AVRO_RECORD || t == AVRO_ENUM || t == AVRO_FIXED)
        for (size_t i = 0; i < ia->n_nodes; i++)
            if (ia->nodes[i]->s == s && ia->nodes[i]->jo == jo)
                return ia->nodes[i];
    pr__ian *n = pr__ia_node(ia);
    if (!n)
        return NULL;
    *n = (pr__ian){.s = s, .jo = jo, .type = t, .zero_size = t == AVRO_NULL};
    const char *lt = json_string_value(json_object_get(jo, "logicalType"));
    if ((t == AVRO_BYTES || t == AVRO_FIXED) && lt && !strcmp(lt, "decimal")) {
        n->decimal = true;
        n->scale10 = pow(10.0, (double)json_integer_value(json_object_get(jo, "scale")));
    }
    switch (t) {
    case AVRO_FIXED:
        n->size = avro_schema_fixed_size(s);
        n->zero_size = n->size == 0;
        break;
    case AVRO_ENUM:
        n->size = avro_schema_enum_number_of_symbols(s);
        break;
    case AVRO_RECORD: {
        size_t nf = avro_schema_record_size(s);
        json_t *fields = json_object_get(jo, "fields");
        if (pr__ia_kids(n, nf) || !(n->name = calloc(nf ? nf : 1, sizeof(*n->name))))
            return NULL;
        n->zero_size = true;
        for (size_t i = 0; i < nf; i++) {
            const char *name = avro_schema_record_field_name(s, (int)i);
            n->name[i] = name && pr_utf8_valid(name, strlen(name)) ? name : NULL;
            n->kid[i] = pr__ia_compile(ia, avro_schema_record_field_get_by_index(s, (int)i),
                                       json_object_get(json_array_get(fields, i), "type"));
            if (!n->kid[i])
                return NULL;
            n->zero_size = n->zero_size && n->kid[i]->zero_size;
        }
        break;
    }
    case AVRO_UNION: {
        size_t nb = avro_schema_union_size(s);
        if (pr__ia_kids(n, nb))
            return NULL;
        for (size_t i = 0; i < nb; i++)
            if (!(n->kid[i] = pr__ia_compile(ia, avro_schema_union_branch(s, (int)i),
                                             json_array_get(jo, i))))
                return NULL;
        break;
    }
    case AVRO_ARRAY:
    case AVRO_MAP:
        if (pr__ia_kids(n, 1) ||
            !(n->kid[0] = pr__ia_compile(
                  ia, t == AVRO_ARRAY ? avro_schema_array_items(s) : avro_schema_map_values(s),
                  json_object_get(jo, t == AVRO_ARRAY ? "items" : "values"))))
            return NULL;
        break;
    default:
        break;
    }
    return n;
}

/* ---------------------------------------------------------------- decoding */

/* A zigzag varint long, as the reader's pr__long: 10 bytes at most. */
static int pr__ia_long(pr__iar *r, int64_t *v)
{
    uint64_t u = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return PR_EBADREC; /* truncated */
        uint8_t b = *r->p++;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 0;
        }
    }
    return PR_EBADREC;
}

static int pr__ia_take(pr__iar *r, size_t n, const uint8_t **s)
{
    if ((size_t)(r->end - r->p) < n)
        return PR_EBADREC; /* truncated */
    *s = r->p;
    r->p += n;
    return 0;
}

/* A length (bytes, string, map key) and its bytes, all in the record. */
static int pr__ia_len(pr__iar *r, const uint8_t **s, size_t *len)
{
    int64_t n;
    if (pr__ia_long(r, &n) || n < 0 || n > r->end - r->p)
        return PR_EBADREC; /* bad length */
    *len = (size_t)n;
    return pr__ia_take(r, *len, s);
}

/* The item count of the next block of an array or map (0: the end), as the
 * reader's pr__block; a negative count is followed by the block's byte
 * size, which must lie in the record. */
static int pr__ia_block(pr__iar *r, const pr__ian *n, int64_t *count)
{
    const pr__ian *item = n->kid[0];
    int64_t size;
    if (pr__ia_long(r, count))
        return PR_EBADREC;
    if (*count == 0)
        return 0;
    if (*count < 0) {
        if (*count == INT64_MIN || pr__ia_long(r, &size) || size < 0 || size > r->end - r->p)
            return PR_EBADREC; /* bad block count or size */
        *count = -*count;
    }
    if (item->zero_size ? *count > PR__IA_MAX_EMPTY : *count > r->end - r->p)
        return PR_EBADREC; /* block count beyond the record */
    if (n->type == AVRO_MAP && *count > r->end - r->p)
        return PR_EBADREC; /* each entry has a key length: it would be truncated */
    if (item->zero_size && n->type == AVRO_ARRAY) {
        if ((uint64_t)*count > r->empty)
            return PR_EBADREC;
        r->empty -= (uint32_t)*count;
    }
    return 0;
}

/* A number, or for NaN and the infinities (no JSON number; the decoder
 * rejects them) the marker the statistics count as such. */
static json_t *pr__ia_real(double x)
{
    return isfinite(x) ? json_real(x)
                       : json_stringn(PR__INF_MARK_NONFINITE, sizeof(PR__INF_MARK_NONFINITE) - 1);
}

/* bytes or fixed: a decimal's number, else a string of the bytes; bytes
 * that are not UTF-8 (a JSON string cannot hold them, and the sample value
 * goes into a YAML comment) as lowercase hex: still a string with as many
 * distinct values, so the inference decides as for the reader's string. */
static int pr__ia_bytes(const pr__ian *n, const uint8_t *s, size_t len, json_t **out)
{
    if (n->decimal) {
        if (len > PR__IA_MAX_DECIMAL)
            return PR_EBADREC; /* number_out_of_range */
        bool neg = len > 0 && (s[0] & 0x80);
        double x = 0;
        for (size_t i = 0; i < len; i++)
            x = x * 256.0 + (double)(neg ? (uint8_t)~s[i] : s[i]);
        *out = pr__ia_real((neg ? -(x + 1.0) : x) / n->scale10);
    } else if (pr_utf8_valid(s, len)) {
        *out = json_stringn((const char *)s, len);
    } else {
        char *hex = malloc(2 * len + 1); /* len is within the record */
        for (size_t i = 0; hex && i < len; i++)
            snprintf(hex + 2 * i, 3, "%02x", s[i]);
        *out = hex ? json_stringn(hex, 2 * len) : NULL;
        free(hex);
    }
    return *out ? 0 : PR_ENOMEM;
}

static int pr__ia_value(pr__iar *r, const pr__ian *n, int depth, json_t **out);

/* x under key (len bytes) in map, the last of a repeated key kept
 * as jansson keeps a repeated JSON key; a key no path can name (not UTF-8, a
 * NUL in it) is dropped with its value. Takes x. */
static int pr__ia_put(json_t *map, const uint8_t *key, size_t len, json_t *x)
{
    char small[256], *k = small;
    if (memchr(key, 0, len) || !pr_utf8_valid(key, len)) {
        json_decref(x);
        return 0;
    }
    if (len >= sizeof(small) && !(k = malloc(len + 1))) { /* len is within the record */
        json_decref(x);
        return PR_ENOMEM;
    }
    memcpy(k, key, len);
    k[len] = 0;
    int rc = json_object_set_new(map, k, x) ? PR_ENOMEM : 0;
    if (k != small)
        free(k);
    return rc;
}

/* An array's items or a map's entries, block by block, into out. */
static int pr__ia_blocks(pr__iar *r, const pr__ian *n, int depth, json_t *out)
{
    for (;;) {
        int64_t count;
        int rc = pr__ia_block(r, n, &count);
        if (rc || count == 0)
            return rc;
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *key = NULL;
            size_t len = 0;
            json_t *x;
            if (n->type == AVRO_MAP && (rc = pr__ia_len(r, &key, &len)))
                return rc;
            if ((rc = pr__ia_value(r, n->kid[0], depth + 1, &x)))
                return rc;
            if (n->type == AVRO_ARRAY && json_array_size(out) > PR_FEAT_MAX_LIST)
                json_decref(x); /* over 4096 is all the rules need: no more memory */
            else if (n->type == AVRO_ARRAY)
                rc = json_array_append_new(out, x) ? PR_ENOMEM : 0;
            else
                rc = pr__ia_put(out, key, len, x);
            if (rc)
                return rc;
        }
    }
}

/* The value of node n at nesting depth (the reader's pr__read), as the JSON
 * value the reader shows at its path, into *out: 0, PR_EBADREC (the reader
 * rejects the record), PR_ENOMEM. */
static int pr__ia_value(pr__iar *r, const pr__ian *n, int depth, json_t **out)
{
    const uint8_t *s;
    size_t len;
    int64_t v;
    int rc = 0;
    *out = NULL;
    if (depth > PR__IA_MAX_DEPTH)
        return PR_EBADREC; /* too_deep */
    switch (n->type) {
    case AVRO_NULL:
        *out = json_null();
        break;
    case AVRO_BOOLEAN:
        if (pr__ia_take(r, 1, &s) || *s > 1)
            return PR_EBADREC;
        *out = json_boolean(*s);
        break;
    case AVRO_INT32: /* the reader reads an int as a long */
    case AVRO_INT64:
        if (pr__ia_long(r, &v))
            return PR_EBADREC;
        *out = json_integer(v);
        break;
    case AVRO_FLOAT: {
        float f;
        if (pr__ia_take(r, 4, &s))
            return PR_EBADREC;
        memcpy(&f, s, 4); /* little-endian, as this host (and the reader) */
        *out = pr__ia_real(f);
        break;
    }
    case AVRO_DOUBLE: {
        double d;
        if (pr__ia_take(r, 8, &s))
            return PR_EBADREC;
        memcpy(&d, s, 8);
        *out = pr__ia_real(d);
        break;
    }
    case AVRO_ENUM:
        if (pr__ia_long(r, &v) || v < 0 || v >= n->size)
            return PR_EBADREC;
        *out = json_string(avro_schema_enum_get(n->s, (int)v));
        break;
    case AVRO_STRING:
        if (pr__ia_len(r, &s, &len))
            return PR_EBADREC;
        /* not UTF-8: the decoder rejects it at a feature's path only, so the
         * field is left out by its marker and the record learnt */
        *out = pr_utf8_valid(s, len)
                   ? json_stringn((const char *)s, len)
                   : json_stringn(PR__INF_MARK_BADUTF8, sizeof(PR__INF_MARK_BADUTF8) - 1);
        break;
    case AVRO_BYTES:
    case AVRO_FIXED:
        if (n->type == AVRO_BYTES ? pr__ia_len(r, &s, &len)
                                  : pr__ia_take(r, len = (size_t)n->size, &s))
            return PR_EBADREC;
        return pr__ia_bytes(n, s, len, out);
    case AVRO_UNION:
        if (pr__ia_long(r, &v) || v < 0 || v >= n->n)
            return PR_EBADREC;
        return pr__ia_value(r, n->kid[v], depth, out); /* a union is no level of nesting */
    case AVRO_RECORD:
        if (!(*out = json_object()))
            return PR_ENOMEM;
        for (uint32_t i = 0; !rc && i < n->n; i++) {
            json_t *x;
            if ((rc = pr__ia_value(r, n->kid[i], depth + 1, &x)))
                break;
            if (n->name[i]) /* else no path can name it */
                rc = json_object_set_new(*out, n->name[i], x) ? PR_ENOMEM : 0;
            else
                json_decref(x);
        }
        break;
    case AVRO_ARRAY:
    case AVRO_MAP:
        if (!(*out = n->type == AVRO_ARRAY ? json_array() : json_object()))
            return PR_ENOMEM;
        rc = pr__ia_blocks(r, n, depth, *out);
        break;
    default:
        return PR_EBADREC;
    }
    if (rc) {
        json_decref(*out);
        *out = NULL;
        return rc;
    }
    return *out ? 0 : PR_ENOMEM;
}

/* A record body decoded into *root; PR_EBADREC when it does not decode. */
static int pr__ia_body(const pr__ia *ia, const uint8_t *p, size_t len, json_t **root)
{
    pr__iar r = {.p = p, .end = p + len, .empty = PR__IA_MAX_EMPTY};
    int rc = pr__ia_value(&r, ia->root, 0, root);
    if (!rc && r.p != r.end)
        rc = PR_EBADREC; /* bytes after the record */
    if (rc) {
        json_decref(*root);
        *root = NULL;
    }
    return rc;
}

/* One record (a pr__infer_record_fn): a plain body, else one behind a
 * schema-registry header (byte 0, a 4-byte schema id; the id is not looked
 * up: the schema is the file's); added, or counted as rejected. */
static int pr__ia_record(void *ctx, pr_infer *inf, const uint8_t *p, size_t len)
{
    pr__ia *ia = ctx;
    json_t *root = NULL;
    int rc = pr__ia_body(ia, p, len, &root);
    if (rc == PR_EBADREC && len >= 5 && p[0] == 0 &&
        (rc = pr__ia_body(ia, p + 5, len - 5, &root)) == 0)
        ia->n_registry++;
    else if (!rc)
        ia->n_plain++;
    if (!rc)
        rc = pr__infer_add_root(inf, root);
    json_decref(root);
    if (rc == PR_EBADREC)
        pr__infer_reject(inf);
    return rc == PR_EBADREC ? 0 : rc;
}

static void pr__ia_fini(pr__ia *ia)
{
    for (size_t i = 0; i < ia->n_nodes; i++) {
        free(ia->nodes[i]->kid);
        free(ia->nodes[i]->name);
        free(ia->nodes[i]);
    }
    free(ia->nodes);
    if (ia->schema)
        avro_schema_decref(ia->schema);
    json_decref(ia->sj);
    json_decref(ia->names);
}

/* The writer schema in path, parsed by jansson (its JSON, for logicalType)
 * and checked by avro-c (the tree the nodes follow), compiled. */
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
    } else {
        pr__ia_names(ia->names, ia->sj, NULL);
        if (!(ia->root = pr__ia_compile(ia, ia->schema, ia->sj)))
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    }
    free(text);
    return rc;
}

/* May the object at `path` be a map: does the reader take it as one
 * (list: { from: keys })? A record is not. */
static bool pr__ia_map_at(const void *schema, const char *path)
{
    pr_feature_spec f = {.kind = PR_FEAT_LIST, .n_paths = 1, .max_len = 1, .from_keys = true};
    snprintf(f.paths[0], sizeof(f.paths[0]), "%s", path);
    char e[256];
    return pr_avro_check_feature(schema, &f, 0, e, sizeof(e)) == 0;
}

int pr_infer_add_avro_records(pr_infer *inf, const char *schema_file, FILE *f, uint64_t max_events,
                              char *errstr, size_t errstr_size)
{
    pr__ia ia = {0};
    int rc = pr__ia_init(&ia, schema_file, errstr, errstr_size);
    pr_avro_schema *as = rc ? NULL : pr_avro_schema_load(schema_file, errstr, errstr_size);
    if (!rc && !as)
        rc = PR_EINVAL;
    pr__infer_set_schema(inf, as, pr__ia_map_at, NULL);
    if (!rc)
        rc = pr__infer_read_delimited(inf, f, max_events, pr__ia_record, &ia, "Avro records",
                                      errstr, errstr_size);
    pr__infer_set_schema(inf, NULL, NULL, NULL);
    pr_avro_schema_free(as);
    /* most records behind a registry header: the config reads them so */
    if (!rc && ia.n_registry > ia.n_plain)
        pr__infer_set_avro_registry(inf);
    pr__ia_fini(&ia);
    return rc;
}
