/*
 * config_infer_pb.c — `piperec infer --descriptor-set --message`: Protobuf
 * messages as sample events.
 *
 * The inference (config_infer.c) judges JSON objects. Each varint-delimited
 * message (as `piperec process` reads source.format protobuf) becomes the
 * object whose paths the Protobuf reader shows the features
 * (ingest/pbuser_decode.c; docs/formats.md, "Protobuf events"), so the
 * config says what the reader will read: fields by name, nested messages
 * objects, a map an object keyed by the key's text (integers in decimal,
 * true/false), repeated fields (packed or not) and repeated messages lists,
 * an enum its name (its number when unnamed), integers of every encoding
 * integers (a uint64 above 2^63 - 1 its int64 bits), float/double numbers,
 * bool true/false, string a string, bytes a string (lowercase hex when not
 * UTF-8, which a JSON string cannot hold: as many distinct values), a
 * google.protobuf.Timestamp its RFC 3339 text and a Duration its seconds
 * (read whole, as the reader reads a path naming one; out of range a
 * marker, the reader's bad_time). Presence as the reader's: a proto3 field
 * with implicit presence is its default whenever its message is there, a
 * repeated field absent is [] (the reader's length 0), explicit presence
 * absent is absent; the last value wins, a message met twice merges, a
 * oneof member clears the others, a map key met twice keeps its last entry.
 * Groups are skipped (no path names one).
 *
 * The reader's descriptor tables are ingest's internals, and its plan reads
 * only the configured paths where a sample wants every field: the set is
 * checked by pr_pbuser_desc_load (the refusals `process` gives), unpacked
 * again here with protobuf-c, and types are found by name as met (a sample
 * is small). A message is rejected where the reader would reject it once
 * its fields are configured: malformed wire bytes (the reader checks every
 * field's framing), a known field with a wire type it cannot have, a string
 * not UTF-8, registry framing (framing: auto) naming another message.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "pr_config_int.h"
#include "pr_varint.h"

#define PR__T(x)         GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__TYPE__TYPE_##x
#define PR__IP_MAX_DEPTH 100        /* nesting, as the reader's PR__PB_MAX_DEPTH */
#define PR__IP_MAX_FIELD 536870911u /* 2^29 - 1 */

typedef Google__Protobuf__FieldDescriptorProto pr__ipfd;
typedef Google__Protobuf__FileDescriptorSet pr__ipset;

/* A message or enum type of the set; a message's file proto3 or not. */
typedef struct pr__ipt {
    const Google__Protobuf__DescriptorProto *m;
    const Google__Protobuf__EnumDescriptorProto *e;
    bool proto3;
} pr__ipt;

/* Wire types by field type (descriptor.proto's numbering), as the reader's. */
static const int8_t pr__ip_wire[19] = {
    [PR__T(DOUBLE)] = 1,   [PR__T(FLOAT)] = 5,    [PR__T(FIXED64)] = 1, [PR__T(FIXED32)] = 5,
    [PR__T(STRING)] = 2,   [PR__T(GROUP)] = 3,    [PR__T(MESSAGE)] = 2, [PR__T(BYTES)] = 2,
    [PR__T(SFIXED32)] = 5, [PR__T(SFIXED64)] = 1, /* the others are varints */
};

static bool pr__ip_repeated(const pr__ipfd *fd)
{
    return fd->label == GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED;
}

/* ---------------------------------------------------------------- the descriptor set */

/* The type named `name` ("pkg.Outer.Inner", a leading dot allowed), found
 * segment by segment; a message's index path in its file into path[]
 * (NULL: not wanted). pr_pbuser_desc_load checked that every type is there. */
static pr__ipt pr__ip_type(const pr__ipset *s, const char *name, int32_t *path, uint32_t *n_path)
{
    name += name && name[0] == '.';
    for (size_t f = 0; name && f < s->n_file; f++) {
        const Google__Protobuf__FileDescriptorProto *fp = s->file[f];
        size_t pl = fp->package ? strlen(fp->package) : 0, n_msg = fp->n_message_type;
        if (pl && (strncmp(name, fp->package, pl) || name[pl] != '.'))
            continue;
        Google__Protobuf__DescriptorProto *const *msg = fp->message_type;
        Google__Protobuf__EnumDescriptorProto *const *enm = fp->enum_type;
        size_t n_enm = fp->n_enum_type;
        uint32_t depth = 0;
        for (const char *p = name + (pl ? pl + 1 : 0), *dot;; p = dot + 1) {
            size_t sl = (dot = strchr(p, '.')) ? (size_t)(dot - p) : strlen(p), i = 0;
            for (; !dot && i < n_enm; i++)
                if (strlen(enm[i]->name) == sl && !strncmp(enm[i]->name, p, sl))
                    return (pr__ipt){.e = enm[i]};
            for (i = 0; i < n_msg && (strlen(msg[i]->name) != sl || strncmp(msg[i]->name, p, sl));)
                i++;
            if (i == n_msg || depth == PR__IP_MAX_DEPTH)
                break;
            if (path)
                path[depth] = (int32_t)i;
            depth++;
            if (!dot) {
                if (n_path)
                    *n_path = depth;
                return (pr__ipt){.m = msg[i],
                                 .proto3 = fp->syntax && !strcmp(fp->syntax, "proto3")};
            }
            n_enm = msg[i]->n_enum_type;
            enm = msg[i]->enum_type;
            n_msg = msg[i]->n_nested_type;
            msg = msg[i]->nested_type;
        }
    }
    return (pr__ipt){0};
}

static bool pr__ip_is_map(const pr__ipt *t)
{
    return t->m && t->m->options && t->m->options->has_map_entry && t->m->options->map_entry;
}

/* The set in file as checked by pr_pbuser_desc_load (the refusals of
 * `process`), unpacked again here where its field tables can be read. */
static int pr__ip_load(const char *file, const char *message, pr__ipset **out, char *errstr,
                       size_t errstr_size)
{
    pr_pbuser_desc *d = pr_pbuser_desc_load(file, message, errstr, errstr_size);
    if (!d)
        return PR_EINVAL;
    pr_pbuser_desc_free(d);
    FILE *f = fopen(file, "rb");
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, got = 1;
    int rc = f ? 0 : PR_EINVAL;
    while (!rc && got) {
        uint8_t *nb = n < cap ? buf : realloc(buf, cap = cap ? 2 * cap : 65536);
        if (!nb)
            rc = PR_ENOMEM;
        else
            n += (got = fread((buf = nb) + n, 1, cap - n, f));
    }
    if (f && ferror(f))
        rc = PR_EINVAL;
    if (f)
        fclose(f);
    if (!rc && !(*out = google__protobuf__file_descriptor_set__unpack(NULL, n, buf)))
        rc = PR_EINVAL; /* it loaded a moment ago */
    free(buf);
    return rc ? pr_seterr(errstr, errstr_size, rc, "%s: %s", file,
                          rc == PR_ENOMEM ? "out of memory" : "unreadable, or changed while read")
              : 0;
}

/* ---------------------------------------------------------------- the wire */

/* One value of wire type wt at *pp: its bits in *u; for LEN, *u bytes at *s. */
static bool pr__ip_read(int wt, const uint8_t **pp, const uint8_t *end, uint64_t *u,
                        const uint8_t **s)
{
    const uint8_t *p = *pp;
    size_t k = wt == 1 ? 8 : 4;
    *u = 0;
    if (wt == 0 || wt == 2) {
        if (!(k = pr_varint_get(p, end, u)) || (wt == 2 && *u > (uint64_t)(end - p) - k))
            return false;
        *s = p + k;
        p += k + (wt == 2 ? *u : 0);
    } else if ((wt == 1 || wt == 5) && (size_t)(end - p) >= k) {
        for (size_t i = 0; i < k; i++)
            *u |= (uint64_t)p[i] << (8 * i);
        p += k;
    } else {
        return false;
    }
    *pp = p;
    return true;
}

/* Skip one field of wire type wt (a group up to its end tag). */
static bool pr__ip_skip(int wt, uint64_t num, const uint8_t **pp, const uint8_t *end,
                        unsigned depth)
{
    uint64_t u, tag;
    const uint8_t *s;
    if (wt != 3)
        return pr__ip_read(wt, pp, end, &u, &s);
    for (size_t k; depth < PR__IP_MAX_DEPTH && (k = pr_varint_get(*pp, end, &tag));) {
        *pp += k;
        if ((tag & 7) == 4)
            return tag >> 3 == num;
        if (!pr__ip_skip((int)(tag & 7), tag >> 3, pp, end, depth + 1))
            return false;
    }
    return false;
}

/* ---------------------------------------------------------------- values */

/* An integer type's value from its bits, as the reader's pr__put. */
static int64_t pr__ip_int(int t, uint64_t u)
{
    uint32_t w = (uint32_t)u;
    if (t == PR__T(INT32) || t == PR__T(SFIXED32) || t == PR__T(ENUM))
        return (int32_t)w;
    if (t == PR__T(UINT32) || t == PR__T(FIXED32))
        return w;
    if (t == PR__T(SINT32))
        return (int32_t)((w >> 1) ^ (0u - (w & 1)));
    if (t == PR__T(SINT64))
        return (int64_t)((u >> 1) ^ (0 - (u & 1)));
    return (int64_t)u; /* int64, sfixed64; uint64 and fixed64 their bits */
}

/* A scalar field's value (u its bits; for LEN, u bytes at s) into *out (a
 * string not UTF-8, NaN or an infinity as the statistics' marker): 0 or
 * PR_ENOMEM. */
static int pr__ip_scalar(const pr__ipset *set, const pr__ipfd *fd, uint64_t u, const uint8_t *s,
                         json_t **out)
{
    uint32_t w = (uint32_t)u;
    float fl;
    double db;
    *out = NULL;
    if (fd->type == PR__T(STRING) || fd->type == PR__T(BYTES)) {
        if (pr_utf8_valid(s, u))
            *out = json_stringn((const char *)s, u);
        else if (fd->type == PR__T(STRING)) /* the decoder rejects it at a feature's path */
            *out = json_stringn(PR__INF_MARK_BADUTF8, sizeof(PR__INF_MARK_BADUTF8) - 1);
        else { /* bytes: lowercase hex */
            char *hex = malloc(2 * u + 1);
            for (size_t i = 0; hex && i < u; i++)
                snprintf(hex + 2 * i, 3, "%02x", s[i]);
            *out = hex ? json_stringn(hex, 2 * u) : NULL;
            free(hex);
        }
    } else if (fd->type == PR__T(ENUM)) {
        pr__ipt t = pr__ip_type(set, fd->type_name, NULL, NULL);
        for (size_t i = 0; t.e && !*out && i < t.e->n_value; i++)
            if (t.e->value[i]->number == (int32_t)w)
                *out = json_string(t.e->value[i]->name);
        if (!*out)
            *out = json_integer((int32_t)w);
    } else if (fd->type == PR__T(BOOL)) {
        *out = json_boolean(u != 0);
    } else if (fd->type == PR__T(FLOAT) || fd->type == PR__T(DOUBLE)) {
        memcpy(&fl, &w, sizeof(fl));
        memcpy(&db, &u, sizeof(db));
        db = fd->type == PR__T(FLOAT) ? fl : db;
        *out = isfinite(db)
                   ? json_real(db) /* else the decoder rejects it: a marker */
                   : json_stringn(PR__INF_MARK_NONFINITE, sizeof(PR__INF_MARK_NONFINITE) - 1);
    } else {
        *out = json_integer(pr__ip_int(fd->type, u));
    }
    return *out ? 0 : PR_ENOMEM;
}

/* v (taken) as obj's field `name`, or appended to its list. */
static int pr__ip_put(json_t *obj, const char *name, bool list, json_t *v)
{
    json_t *a = json_object_get(obj, name);
    if (!list)
        return json_object_set_new(obj, name, v) ? PR_ENOMEM : 0;
    if (!json_is_array(a) && (!(a = json_array()) || json_object_set_new(obj, name, a))) {
        json_decref(v);
        return PR_ENOMEM;
    }
    if (json_array_size(a) > PR_FEAT_MAX_LIST) { /* over 4096 is all the rules need */
        json_decref(v);
        return 0;
    }
    return json_array_append_new(a, v) ? PR_ENOMEM : 0;
}

/* The fields message t lacks, as the reader reads them when t is there:
 * implicit presence the type's default, repeated (not a map) empty. */
static int pr__ip_defaults(const pr__ipset *set, const pr__ipt *t, json_t *obj)
{
    for (size_t i = 0; i < t->m->n_field; i++) {
        const pr__ipfd *fd = t->m->field[i];
        json_t *v = NULL;
        int rc = 0;
        if (json_object_get(obj, fd->name) || fd->type == PR__T(GROUP))
            continue;
        if (pr__ip_repeated(fd)) {
            pr__ipt ft = pr__ip_type(set, fd->type_name, NULL, NULL);
            if (pr__ip_is_map(&ft))
                continue;
            v = json_array();
        } else if (!t->proto3 || fd->has_oneof_index || fd->type == PR__T(MESSAGE)) {
            continue; /* explicit presence (proto3 `optional`: a synthetic oneof) */
        } else if ((rc = pr__ip_scalar(set, fd, 0, (const uint8_t *)"", &v))) {
            return rc;
        }
        if (!v || json_object_set_new(obj, fd->name, v))
            return PR_ENOMEM;
    }
    return 0;
}

static int pr__ip_msg(const pr__ipset *set, const pr__ipt *t, const uint8_t *p, const uint8_t *end,
                      json_t *obj, unsigned depth);

/* Message t at s[0, n) into `into` (merged) or a new object, then its
 * defaults: a reference in *out. */
static int pr__ip_sub(const pr__ipset *set, const pr__ipt *t, const uint8_t *s, uint64_t n,
                      json_t *into, unsigned depth, json_t **out)
{
    json_t *o = into ? json_incref(into) : json_object();
    int rc = !o ? PR_ENOMEM : pr__ip_msg(set, t, s, s + n, o, depth);
    if (!rc)
        rc = pr__ip_defaults(set, t, o);
    if (rc)
        json_decref(o);
    *out = rc ? NULL : o;
    return rc;
}

/* One entry (message e) of map field fd at p[0, end) into the object
 * obj[fd->name], under the key's text as the reader matches path segments. */
static int pr__ip_map(const pr__ipset *set, const pr__ipfd *fd, const pr__ipt *e, const uint8_t *p,
                      const uint8_t *end, json_t *obj, unsigned depth)
{
    const pr__ipfd *kf = NULL, *vf = NULL;
    for (size_t i = 0; i < e->m->n_field; i++)
        if (e->m->field[i]->number == 1 || e->m->field[i]->number == 2)
            *(e->m->field[i]->number == 1 ? &kf : &vf) = e->m->field[i];
    uint64_t key = 0, val = 0, tag;
    const uint8_t *ks = (const uint8_t *)"", *vs = ks;
    int vwt = -1;
    for (size_t k; p < end;) {
        if (!(k = pr_varint_get(p, end, &tag)))
            return PR_EBADREC;
        p += k;
        int wt = (int)(tag & 7);
        bool ok = kf && tag >> 3 == 1 && wt == pr__ip_wire[kf->type]
                      ? pr__ip_read(wt, &p, end, &key, &ks)
                  : tag >> 3 == 2 ? pr__ip_read(vwt = wt, &p, end, &val, &vs)
                                  : pr__ip_skip(wt, tag >> 3, &p, end, depth + 1);
        if (!ok)
            return PR_EBADREC;
    }
    if (!kf || !vf)
        return 0;
    if (vwt >= 0 && vwt != pr__ip_wire[vf->type])
        return PR_EBADREC;
    char text[PR_FEAT_PATH_MAX];
    if (kf->type == PR__T(STRING)) { /* a key no path can name is left out */
        if (key >= sizeof(text) || memchr(ks, 0, key) || !pr_utf8_valid(ks, key))
            return 0;
        memcpy(text, ks, key);
        text[key] = 0;
    } else if (kf->type == PR__T(BOOL)) {
        snprintf(text, sizeof(text), "%s", key ? "true" : "false");
    } else if (kf->type == PR__T(UINT64) || kf->type == PR__T(FIXED64)) {
        snprintf(text, sizeof(text), "%" PRIu64, key);
    } else {
        snprintf(text, sizeof(text), "%" PRId64, pr__ip_int(kf->type, key));
    }
    json_t *v = NULL, *map = json_object_get(obj, fd->name);
    pr__ipt vt = pr__ip_type(set, vf->type_name, NULL, NULL);
    int rc = vf->type != PR__T(MESSAGE) ? pr__ip_scalar(set, vf, val, vs, &v) /* or its default */
             : vt.m                     ? pr__ip_sub(set, &vt, vs, val, NULL, depth + 1, &v)
                                        : 0;
    if (rc || !v)
        return rc;
    if (!json_is_object(map) &&
        (!(map = json_object()) || json_object_set_new(obj, fd->name, map))) {
        json_decref(v);
        return PR_ENOMEM;
    }
    return json_object_set_new(map, text, v) ? PR_ENOMEM : 0;
}

/* Field i of message t, of wire type wt, at *pp into obj. */
static int pr__ip_field(const pr__ipset *set, const pr__ipt *t, size_t i, int wt,
                        const uint8_t **pp, const uint8_t *end, json_t *obj, unsigned depth)
{
    const pr__ipfd *fd = t->m->field[i];
    int want = pr__ip_wire[fd->type], rc = 0;
    bool rep = pr__ip_repeated(fd);
    uint64_t u;
    const uint8_t *s = NULL;
    json_t *v = NULL;
    if (!pr__ip_read(wt, pp, end, &u, &s))
        return PR_EBADREC;
    if (fd->has_oneof_index && !(fd->has_proto3_optional && fd->proto3_optional))
        for (size_t k = 0; k < t->m->n_field; k++) /* a oneof member clears the others */
            if (k != i && t->m->field[k]->has_oneof_index &&
                t->m->field[k]->oneof_index == fd->oneof_index)
                json_object_del(obj, t->m->field[k]->name);
    if (wt != want && (!rep || wt != 2 || want == 2))
        return PR_EBADREC;
    if (wt != want) { /* a packed run */
        for (const uint8_t *q = s, *qe = s + u; !rc && q < qe;) {
            if (!pr__ip_read(want, &q, qe, &u, &s))
                return PR_EBADREC;
            if (!(rc = pr__ip_scalar(set, fd, u, s, &v)))
                rc = pr__ip_put(obj, fd->name, true, v);
        }
        return rc;
    }
    if (fd->type != PR__T(MESSAGE)) {
        rc = pr__ip_scalar(set, fd, u, s, &v);
    } else {
        pr__ipt ft = pr__ip_type(set, fd->type_name, NULL, NULL);
        json_t *had = rep ? NULL : json_object_get(obj, fd->name); /* met twice: merged */
        if (pr__ip_is_map(&ft))
            return pr__ip_map(set, fd, &ft, s, s + u, obj, depth + 1);
        if (ft.m)
            rc = pr__ip_sub(set, &ft, s, u, json_is_object(had) ? had : NULL, depth + 1, &v);
    }
    return rc || !v ? rc : pr__ip_put(obj, fd->name, rep, v);
}

/* Message t's fields at p[0, end) into obj (what it holds stays unless set
 * again). 0, PR_EBADREC, PR_ENOMEM. */
static int pr__ip_msg(const pr__ipset *set, const pr__ipt *t, const uint8_t *p, const uint8_t *end,
                      json_t *obj, unsigned depth)
{
    if (depth >= PR__IP_MAX_DEPTH)
        return PR_EBADREC;
    while (p < end) {
        uint64_t tag;
        size_t k = pr_varint_get(p, end, &tag), i = 0;
        int wt = (int)(tag & 7), rc = 0;
        if (!k || tag >> 3 == 0 || tag >> 3 > PR__IP_MAX_FIELD || wt == 4 || wt > 5)
            return PR_EBADREC;
        p += k;
        while (i < t->m->n_field && (uint64_t)t->m->field[i]->number != tag >> 3)
            i++;
        if (i == t->m->n_field || t->m->field[i]->type == PR__T(GROUP)) /* skipped */
            rc = pr__ip_skip(wt, tag >> 3, &p, end, depth) ? 0 : PR_EBADREC;
        else
            rc = pr__ip_field(set, t, i, wt, &p, end, obj, depth);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- well-known types */

/* The well-known type of message t, the type of field fd (pr_pb_wkt_of: its
 * name and its fields). */
static pr_pb_wkt pr__ip_wkt_of(const pr__ipfd *fd, const pr__ipt *t)
{
    int ty[3] = {0};
    for (size_t i = 0; i < t->m->n_field; i++) {
        const pr__ipfd *f = t->m->field[i];
        if ((f->number == 1 || f->number == 2) && !pr__ip_repeated(f))
            ty[f->number] = f->type;
    }
    return pr_pb_wkt_of(fd->type_name, ty[1], ty[2]);
}

/* A well-known message's object {seconds, nanos} (its defaults filled) as
 * the reader writes it: a Timestamp's RFC 3339 text, a Duration's seconds;
 * out of the type's range the bad-time marker. A new reference in *out; 0
 * or PR_ENOMEM. */
static int pr__ip_wkt_value(pr_pb_wkt w, const json_t *o, json_t **out)
{
    int64_t s = json_integer_value(json_object_get(o, "seconds"));
    int32_t ns = (int32_t)json_integer_value(json_object_get(o, "nanos"));
    char text[PR_PB_TIME_TEXT_MAX];
    double secs;
    size_t n = w == PR_PB_WKT_TIMESTAMP ? pr_pb_timestamp_text(s, ns, text) : 0;
    if (n)
        *out = json_stringn(text, n);
    else if (w == PR_PB_WKT_DURATION && pr_pb_duration_seconds(s, ns, &secs))
        *out = json_real(secs);
    else
        *out = json_stringn(PR__INF_MARK_BADTIME, sizeof(PR__INF_MARK_BADTIME) - 1);
    return *out ? 0 : PR_ENOMEM;
}

static int pr__ip_wkts(const pr__ipset *set, const pr__ipt *t, json_t *obj, unsigned depth);

/* One message m of type t (well-known type w): its value in *repl (a new
 * reference) when w is one, else the well-known messages under it. */
static int pr__ip_wkt_one(const pr__ipset *set, const pr__ipt *t, pr_pb_wkt w, json_t *m,
                          json_t **repl, unsigned depth)
{
    *repl = NULL;
    if (!json_is_object(m))
        return 0;
    return w ? pr__ip_wkt_value(w, m, repl) : pr__ip_wkts(set, t, m, depth + 1);
}

/* The well-known messages in message t's object obj, at every level (a
 * field, a repeated field's elements, a map's values), replaced by their
 * values as the reader reads them. After the whole record, so that a
 * message met twice was merged first. 0 or PR_ENOMEM. */
static int pr__ip_wkts(const pr__ipset *set, const pr__ipt *t, json_t *obj, unsigned depth)
{
    for (size_t i = 0; depth < PR__IP_MAX_DEPTH && i < t->m->n_field; i++) {
        const pr__ipfd *fd = t->m->field[i], *vf = fd;
        json_t *v = fd->type == PR__T(MESSAGE) ? json_object_get(obj, fd->name) : NULL, *r;
        pr__ipt ft = v ? pr__ip_type(set, fd->type_name, NULL, NULL) : (pr__ipt){0};
        bool map = pr__ip_is_map(&ft);
        if (map) { /* its values' type */
            vf = NULL;
            for (size_t k = 0; k < ft.m->n_field; k++)
                if (ft.m->field[k]->number == 2)
                    vf = ft.m->field[k];
            ft = vf && vf->type == PR__T(MESSAGE) ? pr__ip_type(set, vf->type_name, NULL, NULL)
                                                  : (pr__ipt){0};
        }
        if (!ft.m)
            continue;
        pr_pb_wkt w = pr__ip_wkt_of(vf, &ft);
        int rc = 0;
        if (map) {
            for (void *it = json_object_iter(v); !rc && it; it = json_object_iter_next(v, it))
                if (!(rc = pr__ip_wkt_one(set, &ft, w, json_object_iter_value(it), &r, depth)) && r)
                    rc = json_object_iter_set_new(v, it, r) ? PR_ENOMEM : 0;
        } else if (json_is_array(v)) {
            for (size_t k = 0; !rc && k < json_array_size(v); k++)
                if (!(rc = pr__ip_wkt_one(set, &ft, w, json_array_get(v, k), &r, depth)) && r)
                    rc = json_array_set_new(v, k, r) ? PR_ENOMEM : 0;
        } else if (!(rc = pr__ip_wkt_one(set, &ft, w, v, &r, depth)) && r) {
            rc = json_object_set_new(obj, fd->name, r) ? PR_ENOMEM : 0;
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- records */

typedef struct pr__ipb {
    pr__ipset *set;
    pr__ipt root;
    uint32_t n_path;
    int32_t path[PR__IP_MAX_DEPTH]; /* the root's message indexes in its file */
} pr__ipb;

/* Registry framing (byte 0, a 4-byte schema id, zigzag message indexes),
 * which framing: auto reads on a first byte 0: passed when the indexes
 * name the root message, as the reader's pr__unframe. */
static bool pr__ip_unframe(const pr__ipb *b, const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp + 5;
    uint64_t z;
    size_t k = end - *pp >= 6 ? pr_varint_get(p, end, &z) : 0;
    int64_t count = k ? (int64_t)((z >> 1) ^ (0 - (z & 1))) : -1;
    if (count < 0 || count > PR__IP_MAX_DEPTH || (uint32_t)(count ? count : 1) != b->n_path ||
        (!count && b->path[0] != 0)) /* no index: [0] */
        return false;
    p += k;
    for (int64_t i = 0; i < count; i++, p += k)
        if (!(k = pr_varint_get(p, end, &z)) || (z & 1) || z > 2u * INT32_MAX ||
            (int32_t)(z >> 1) != b->path[i])
            return false;
    *pp = p;
    return true;
}

/* One message: added, or counted as rejected. 0 or PR_ENOMEM. */
static int pr__ip_record(void *ctx, pr_infer *inf, const uint8_t *p, size_t len)
{
    const pr__ipb *b = ctx;
    const uint8_t *end = p + len;
    json_t *root = NULL;
    int rc = len && !p[0] && !pr__ip_unframe(b, &p, end) ? PR_EBADREC : 0;
    if (!rc)
        rc = pr__ip_sub(b->set, &b->root, p, (uint64_t)(end - p), NULL, 0, &root);
    if (!rc)
        rc = pr__ip_wkts(b->set, &b->root, root, 0);
    if (!rc)
        rc = pr__infer_add_root(inf, root);
    json_decref(root);
    if (rc == PR_EBADREC)
        pr__infer_reject(inf);
    return rc == PR_EBADREC ? 0 : rc;
}

/* May the object at `path` be a map: is it a map field (not a message)? */
static bool pr__ip_map_at(const void *schema, const char *path)
{
    unsigned types;
    char e[256];
    return pr_pbuser_check_path(schema, path, PR_JSON_LIST, PR_JSON_KEYS, &types, e, sizeof(e)) ==
           0;
}

/* Is the value at `path` a Timestamp read whole (a time by its type)? */
static bool pr__ip_time_at(const void *schema, const char *path)
{
    unsigned types = 0;
    char e[256];
    if (pr_pbuser_check_path(schema, path, PR_JSON_SCALAR, PR_JSON_AT, &types, e, sizeof(e)))
        return false;
    return (types & PR_FTYPE_TIME) != 0;
}

int pr_infer_add_pb_messages(pr_infer *inf, const char *descriptor_set, const char *message,
                             FILE *f, uint64_t max_events, char *errstr, size_t errstr_size)
{
    pr__ipb b = {0};
    pr_pbuser_desc *d = NULL;
    int rc = pr__ip_load(descriptor_set, message, &b.set, errstr, errstr_size);
    if (!rc && !(b.root = pr__ip_type(b.set, message, b.path, &b.n_path)).m)
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "message %s is not in %s", message,
                       descriptor_set); /* it was a moment ago: the file changed */
    if (!rc && !(d = pr_pbuser_desc_load(descriptor_set, message, errstr, errstr_size)))
        rc = PR_EINVAL;
    pr__infer_set_schema(inf, d, pr__ip_map_at, pr__ip_time_at);
    if (!rc)
        rc = pr__infer_read_delimited(inf, f, max_events, pr__ip_record, &b, "Protobuf messages",
                                      errstr, errstr_size);
    pr__infer_set_schema(inf, NULL, NULL, NULL);
    pr_pbuser_desc_free(d);
    if (b.set)
        google__protobuf__file_descriptor_set__free_unpacked(b.set, NULL);
    return rc;
}
