/*
 * pbuser_desc.c — a user's FileDescriptorSet (`protoc --descriptor_set_out=F
 * --include_imports`) loaded for source.format protobuf (issue 23): the
 * message and enum tables the reader compiles its plan from, and the path
 * resolver behind the config's checks ("message shop.Click has no field
 * 'usr'").
 *
 * The set is unpacked once with protobuf-c (descriptor.proto compiled by
 * protoc-c at build time) and flattened: messages and enums get indexes,
 * field type names (fully qualified, as protoc writes them) are resolved to
 * those indexes, and each field's presence rule is decided here, once:
 * proto2 fields, proto3 `optional` fields, oneof members and message fields
 * have explicit presence (absent = missing); other proto3 singular fields
 * have implicit presence (absent = the type's default: 0, "", false, the
 * enum's 0 value). The well-known messages a path may end at, read whole
 * (pbuser_wkt.c: google.protobuf.Timestamp, Duration), are marked here,
 * once their fields are seen to be the type's. Loading is not on any hot
 * path: names are found by linear search.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbuser_int.h"

#define PR__PB_MAX_FILE (256u << 20) /* a descriptor set larger than this is refused */

/* ---------------------------------------------------------------- names */

static const char *const pr__pb_type_names[PR__PBT__COUNT] = {
    [PR__PBT_DOUBLE] = "a double",     [PR__PBT_FLOAT] = "a float",
    [PR__PBT_INT64] = "an int64",      [PR__PBT_UINT64] = "a uint64",
    [PR__PBT_INT32] = "an int32",      [PR__PBT_FIXED64] = "a fixed64",
    [PR__PBT_FIXED32] = "a fixed32",   [PR__PBT_BOOL] = "a bool",
    [PR__PBT_STRING] = "a string",     [PR__PBT_GROUP] = "a group",
    [PR__PBT_MESSAGE] = "a message",   [PR__PBT_BYTES] = "bytes",
    [PR__PBT_UINT32] = "a uint32",     [PR__PBT_ENUM] = "an enum",
    [PR__PBT_SFIXED32] = "a sfixed32", [PR__PBT_SFIXED64] = "a sfixed64",
    [PR__PBT_SINT32] = "a sint32",     [PR__PBT_SINT64] = "a sint64",
};

const char *pr__pb_type_name(uint8_t type)
{
    return type > 0 && type < PR__PBT__COUNT ? pr__pb_type_names[type] : "an unknown type";
}

static const int8_t pr__pb_wire_of[PR__PBT__COUNT] = {
    [PR__PBT_DOUBLE] = PR__WT_I64,    [PR__PBT_FLOAT] = PR__WT_I32,
    [PR__PBT_INT64] = PR__WT_VARINT,  [PR__PBT_UINT64] = PR__WT_VARINT,
    [PR__PBT_INT32] = PR__WT_VARINT,  [PR__PBT_FIXED64] = PR__WT_I64,
    [PR__PBT_FIXED32] = PR__WT_I32,   [PR__PBT_BOOL] = PR__WT_VARINT,
    [PR__PBT_STRING] = PR__WT_LEN,    [PR__PBT_GROUP] = PR__WT_SGROUP,
    [PR__PBT_MESSAGE] = PR__WT_LEN,   [PR__PBT_BYTES] = PR__WT_LEN,
    [PR__PBT_UINT32] = PR__WT_VARINT, [PR__PBT_ENUM] = PR__WT_VARINT,
    [PR__PBT_SFIXED32] = PR__WT_I32,  [PR__PBT_SFIXED64] = PR__WT_I64,
    [PR__PBT_SINT32] = PR__WT_VARINT, [PR__PBT_SINT64] = PR__WT_VARINT,
};

int pr__pb_wire_type(uint8_t t)
{
    return t > 0 && t < PR__PBT__COUNT ? pr__pb_wire_of[t] : -1;
}

/* ---------------------------------------------------------------- loading */

static char *pr__join(const char *prefix, const char *name)
{
    size_t a = prefix ? strlen(prefix) : 0, b = strlen(name ? name : "");
    char *s = malloc(a + b + 2);
    if (!s)
        return NULL;
    if (a) {
        memcpy(s, prefix, a);
        s[a++] = '.';
    }
    memcpy(s + a, name ? name : "", b + 1);
    return s;
}

static void pr__count(const Google__Protobuf__DescriptorProto *m, uint32_t *nm, uint32_t *ne)
{
    (*nm)++;
    *ne += (uint32_t)m->n_enum_type;
    for (size_t i = 0; i < m->n_nested_type; i++)
        pr__count(m->nested_type[i], nm, ne);
}

static int pr__add_enum(pr_pbuser_desc *d, const char *prefix,
                        const Google__Protobuf__EnumDescriptorProto *e)
{
    pr__pbenum *pe = &d->enums[d->n_enums++];
    if (!(pe->full = pr__join(prefix, e->name)))
        return PR_ENOMEM;
    pe->n = (uint32_t)e->n_value;
    int32_t *num = calloc(pe->n + 1, sizeof(*num));
    const char **name = calloc(pe->n + 1, sizeof(*name));
    pe->num = num;
    pe->name = name;
    if (!num || !name)
        return PR_ENOMEM;
    for (uint32_t i = 0; i < pe->n; i++) {
        num[i] = e->value[i]->number;
        name[i] = e->value[i]->name ? e->value[i]->name : "";
        if (num[i] == 0 && !pe->zero)
            pe->zero = name[i];
    }
    return 0;
}

/* Message m (and its nested types, depth first) gets the next indexes. */
static int pr__add_msg(pr_pbuser_desc *d, uint32_t file, const char *prefix,
                       const Google__Protobuf__DescriptorProto *m, int32_t parent, uint32_t pos)
{
    int32_t me = (int32_t)d->n_msgs++;
    pr__pbmsg *pm = &d->msgs[me];
    if (!(pm->full = pr__join(prefix, m->name)))
        return PR_ENOMEM;
    pm->file = file;
    pm->parent = parent;
    pm->pos = pos;
    pm->map_entry = m->options && m->options->has_map_entry && m->options->map_entry;
    pm->n_nested = (uint32_t)m->n_nested_type;
    if (!(pm->nested = calloc(pm->n_nested + 1, sizeof(int32_t))))
        return PR_ENOMEM;
    for (size_t i = 0; i < m->n_enum_type; i++)
        if (pr__add_enum(d, d->msgs[me].full, m->enum_type[i]))
            return PR_ENOMEM;
    for (uint32_t i = 0; i < d->msgs[me].n_nested; i++) {
        d->msgs[me].nested[i] = (int32_t)d->n_msgs;
        int rc = pr__add_msg(d, file, d->msgs[me].full, m->nested_type[i], me, i);
        if (rc)
            return rc;
    }
    return 0;
}

static int32_t pr__find_msg(const pr_pbuser_desc *d, const char *full)
{
    for (uint32_t i = 0; i < d->n_msgs; i++)
        if (!strcmp(d->msgs[i].full, full))
            return (int32_t)i;
    return -1;
}

static int32_t pr__find_enum(const pr_pbuser_desc *d, const char *full)
{
    for (uint32_t i = 0; i < d->n_enums; i++)
        if (!strcmp(d->enums[i].full, full))
            return (int32_t)i;
    return -1;
}

/* One field's types and presence; errstr names the field on failure. */
static int pr__field(pr_pbuser_desc *d, const pr__pbmsg *pm, bool proto3,
                     const Google__Protobuf__FieldDescriptorProto *fp, pr__pbfield *f, char *errstr,
                     size_t errstr_size)
{
    f->name = fp->name ? fp->name : "";
    f->json_name = fp->json_name ? fp->json_name : f->name;
    f->number = (uint32_t)fp->number;
    f->type = (uint8_t)fp->type;
    f->repeated = fp->label == GOOGLE__PROTOBUF__FIELD_DESCRIPTOR_PROTO__LABEL__LABEL_REPEATED;
    bool p3opt = fp->has_proto3_optional && fp->proto3_optional;
    f->oneof = fp->has_oneof_index && !p3opt ? fp->oneof_index : -1;
    f->explicit_presence = !f->repeated && (!proto3 || p3opt || fp->has_oneof_index ||
                                            f->type == PR__PBT_MESSAGE || f->type == PR__PBT_GROUP);
    f->msg = f->enm = -1;
    if (f->type == 0 || f->type >= PR__PBT__COUNT)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s.%s: unknown field type %d", pm->full,
                         f->name, (int)f->type);
    if (f->type != PR__PBT_MESSAGE && f->type != PR__PBT_GROUP && f->type != PR__PBT_ENUM)
        return 0;
    const char *tn = fp->type_name ? fp->type_name : "";
    if (tn[0] != '.')
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s.%s: type '%s' is not fully qualified (write the set with protoc "
                         "--descriptor_set_out)",
                         pm->full, f->name, tn);
    if (f->type == PR__PBT_ENUM)
        f->enm = pr__find_enum(d, tn + 1);
    else
        f->msg = pr__find_msg(d, tn + 1);
    if (f->enm < 0 && f->msg < 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s.%s: type %s is not in the descriptor set (protoc --include_imports)",
                         pm->full, f->name, tn + 1);
    return 0;
}

/* Fields of message (index base + i) for every message of one file. */
static int pr__fields_of(pr_pbuser_desc *d, const Google__Protobuf__DescriptorProto *m,
                         int32_t *next, bool proto3, char *errstr, size_t errstr_size)
{
    pr__pbmsg *pm = &d->msgs[(*next)++];
    pm->n_fields = (uint32_t)m->n_field;
    if (!(pm->fields = calloc(pm->n_fields + 1, sizeof(*pm->fields))))
        return PR_ENOMEM;
    for (uint32_t i = 0; i < pm->n_fields; i++) {
        int rc = pr__field(d, pm, proto3, m->field[i], &pm->fields[i], errstr, errstr_size);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < m->n_nested_type; i++) {
        int rc = pr__fields_of(d, m->nested_type[i], next, proto3, errstr, errstr_size);
        if (rc)
            return rc;
    }
    return 0;
}

static int pr__read_file(const char *path, uint8_t **buf, size_t *len, char *errstr,
                         size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    uint8_t *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0 || n > PR__PB_MAX_FILE)
            break;
        if (n == cap) {
            uint8_t *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f) || n > PR__PB_MAX_FILE;
    fclose(f);
    if (!b)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    if (bad) {
        free(b);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: unreadable or larger than 256 MiB",
                         path);
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Message m is a well-known type read whole when its name and its fields
 * say so (pr_pb_wkt_of); otherwise a message like any other. */
static uint8_t pr__wkt(const pr_pbuser_desc *d, int32_t m)
{
    const pr__pbfield *s = pr__pb_field_by_number(d, m, 1), *n = pr__pb_field_by_number(d, m, 2);
    return (uint8_t)pr_pb_wkt_of(d->msgs[m].full, s && !s->repeated ? s->type : 0,
                                 n && !n->repeated ? n->type : 0);
}

/* Messages and enums of every file, then every field resolved. */
static int pr__flatten(pr_pbuser_desc *d, char *errstr, size_t errstr_size)
{
    const Google__Protobuf__FileDescriptorSet *s = d->fds;
    uint32_t nm = 0, ne = 0;
    for (size_t i = 0; i < s->n_file; i++) {
        ne += (uint32_t)s->file[i]->n_enum_type;
        for (size_t k = 0; k < s->file[i]->n_message_type; k++)
            pr__count(s->file[i]->message_type[k], &nm, &ne);
    }
    d->msgs = calloc(nm + 1, sizeof(*d->msgs));
    d->enums = calloc(ne + 1, sizeof(*d->enums));
    if (!d->msgs || !d->enums)
        return PR_ENOMEM;
    for (size_t i = 0; i < s->n_file; i++) {
        const Google__Protobuf__FileDescriptorProto *fp = s->file[i];
        for (size_t k = 0; k < fp->n_enum_type; k++)
            if (pr__add_enum(d, fp->package, fp->enum_type[k]))
                return PR_ENOMEM;
        for (size_t k = 0; k < fp->n_message_type; k++)
            if (pr__add_msg(d, (uint32_t)i, fp->package, fp->message_type[k], -1, (uint32_t)k))
                return PR_ENOMEM;
    }
    int32_t next = 0;
    for (size_t i = 0; i < s->n_file; i++) {
        const Google__Protobuf__FileDescriptorProto *fp = s->file[i];
        bool proto3 = fp->syntax && !strcmp(fp->syntax, "proto3");
        for (size_t k = 0; k < fp->n_message_type; k++) {
            int rc = pr__fields_of(d, fp->message_type[k], &next, proto3, errstr, errstr_size);
            if (rc)
                return rc;
        }
    }
    for (uint32_t m = 0; m < d->n_msgs; m++)
        d->msgs[m].wkt = pr__wkt(d, (int32_t)m);
    return 0;
}

pr_pbuser_desc *pr_pbuser_desc_load(const char *file, const char *message, char *errstr,
                                    size_t errstr_size)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!file || !message || !message[0]) {
        pr_seterr(errstr, errstr_size, PR_EINVAL,
                  "protobuf: descriptor_set and message are needed");
        return NULL;
    }
    if (pr__read_file(file, &buf, &len, errstr, errstr_size))
        return NULL;
    pr_pbuser_desc *d = calloc(1, sizeof(*d));
    if (!d) {
        free(buf);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "protobuf: out of memory");
        return NULL;
    }
    d->fds = google__protobuf__file_descriptor_set__unpack(NULL, len, buf);
    free(buf);
    if (!d->fds || d->fds->n_file == 0) {
        pr_seterr(errstr, errstr_size, PR_EINVAL,
                  "%s: not a FileDescriptorSet (write it with protoc --descriptor_set_out=FILE "
                  "--include_imports)",
                  file);
        goto out_free;
    }
    int rc = pr__flatten(d, errstr, errstr_size);
    if (rc == PR_ENOMEM)
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "protobuf: out of memory");
    if (rc)
        goto out_free;
    d->root = pr__find_msg(d, message[0] == '.' ? message + 1 : message);
    if (d->root < 0 || d->msgs[d->root].map_entry) {
        /* The name without its package ("Event" for team.v1.Event): say
         * which full name is meant. */
        const char *like = NULL;
        size_t ml = strlen(message);
        for (uint32_t m = 0; m < d->n_msgs && !like; m++) {
            const char *full = d->msgs[m].full;
            size_t fl = strlen(full);
            if (!d->msgs[m].map_entry && fl > ml && full[fl - ml - 1] == '.' &&
                strcmp(full + fl - ml, message) == 0)
                like = full;
        }
        pr_seterr(errstr, errstr_size, PR_EINVAL, "message %s is not in %s%s%s%s", message, file,
                  like ? " (give the full name: " : "", like ? like : "", like ? ")" : "");
        goto out_free;
    }
    /* Its registry message-index path: positions from the file's top level. */
    int32_t chain[PR__PB_MAX_DEPTH], n = 0;
    for (int32_t m = d->root; m >= 0 && n < PR__PB_MAX_DEPTH; m = d->msgs[m].parent)
        chain[n++] = m;
    d->root_n_path = (uint32_t)n;
    for (int32_t i = 0; i < n; i++)
        d->root_path[i] = (int32_t)d->msgs[chain[n - 1 - i]].pos;
    return d;
out_free:
    pr_pbuser_desc_free(d);
    return NULL;
}

void pr_pbuser_desc_free(pr_pbuser_desc *d)
{
    if (!d)
        return;
    for (uint32_t i = 0; d->msgs && i < d->n_msgs; i++) {
        free(d->msgs[i].full);
        free(d->msgs[i].fields);
        free(d->msgs[i].nested);
    }
    for (uint32_t i = 0; d->enums && i < d->n_enums; i++) {
        free(d->enums[i].full);
        free((void *)d->enums[i].num);
        free((void *)d->enums[i].name);
    }
    free(d->msgs);
    free(d->enums);
    if (d->fds)
        google__protobuf__file_descriptor_set__free_unpacked(d->fds, NULL);
    free(d);
}

const char *pr_pbuser_desc_message(const pr_pbuser_desc *d)
{
    return d->msgs[d->root].full;
}

/* ---------------------------------------------------------------- lookups */

const pr__pbfield *pr__pb_field_by_name(const pr_pbuser_desc *d, int32_t m, const char *name,
                                        size_t len)
{
    const pr__pbmsg *pm = &d->msgs[m];
    for (uint32_t i = 0; i < pm->n_fields; i++) {
        const pr__pbfield *f = &pm->fields[i];
        if ((strlen(f->name) == len && !memcmp(f->name, name, len)) ||
            (strlen(f->json_name) == len && !memcmp(f->json_name, name, len)))
            return f;
    }
    return NULL;
}

const pr__pbfield *pr__pb_field_by_number(const pr_pbuser_desc *d, int32_t m, uint32_t num)
{
    const pr__pbmsg *pm = &d->msgs[m];
    for (uint32_t i = 0; i < pm->n_fields; i++)
        if (pm->fields[i].number == num)
            return &pm->fields[i];
    return NULL;
}

/* ---------------------------------------------------------------- paths */

int pr__pb_resolve(const pr_pbuser_desc *d, const char *path, bool map, pr__pbstep *steps,
                   uint32_t *n_steps, char *errstr, size_t errstr_size)
{
    int32_t m = d->root;
    const char *p = path;
    uint32_t n = 0;
    const char *crossed = NULL; /* the repeated message the path goes through */
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t sl = dot ? (size_t)(dot - p) : strlen(p);
        const pr__pbfield *f = pr__pb_field_by_name(d, m, p, sl);
        if (!f)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "message %s has no field '%.*s'",
                             d->msgs[m].full, (int)sl, p);
        if (n >= PR__PB_MAX_DEPTH)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "path nests too deep");
        steps[n] = (pr__pbstep){.f = f};
        bool is_map = f->msg >= 0 && f->repeated && d->msgs[f->msg].map_entry;
        if (f->type == PR__PBT_GROUP)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "'%s' is a group (not supported)",
                             f->name);
        if (map && !dot) { /* the map whose entries are read: the path's end */
            if (!is_map)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "'%s' is not a map field (%s%s): list: { from: keys } reads a map",
                                 f->name, f->repeated ? "repeated, " : "",
                                 pr__pb_type_name(f->type));
            if (crossed)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "'%s' is a map inside the repeated message '%s': one list level "
                                 "per path (the map's keys are a list)",
                                 f->name, crossed);
            *n_steps = n + 1;
            return 0;
        }
        if (is_map) {
            if (!dot)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "'%s' is a map: name a key after it ('%s.KEY')", f->name, path);
            p = dot + 1;
            dot = strchr(p, '.');
            sl = dot ? (size_t)(dot - p) : strlen(p);
            steps[n].key = p;
            steps[n].key_len = (uint32_t)sl;
            f = pr__pb_field_by_number(d, f->msg, 2); /* the entry's value */
            if (!f)
                return pr_seterr(errstr, errstr_size, PR_EINVAL, "map entry without a value");
        } else if (f->repeated && crossed) {
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' is repeated inside the repeated message '%s': one list level "
                             "per path",
                             f->name, crossed);
        } else if (f->msg >= 0 && f->repeated && dot) {
            crossed = f->name; /* a list of messages: the path maps over its elements */
        }
        n++;
        /* map: a key of a map, below; a well-known type is read whole */
        if (f->msg >= 0 && !dot && !map && !d->msgs[f->msg].wkt)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' is a message (%s): name one of its fields", f->name,
                             d->msgs[f->msg].full);
        if (!dot)
            break;
        if (f->msg < 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "'%s' is %s: it has no field '%s'",
                             f->name, pr__pb_type_name(f->type), dot + 1);
        m = f->msg;
        p = dot + 1;
    }
    if (map) /* the path ends at a key of a map (`attrs.color`): its value */
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'%s' names a key of the map '%s', not a map field: list: { from: keys } "
                         "reads a map (its path)",
                         path, steps[n - 1].f->name);
    *n_steps = n;
    return 0;
}

/* The PR_FTYPE_* a field's values read as (pbuser_decode.c): enums as their
 * symbol (or the number of one the descriptor does not name), bools as
 * integers; 0 for a message, which no feature reads. */
static unsigned pr__pb_ftypes(uint8_t t)
{
    switch (t) {
    case PR__PBT_DOUBLE:
    case PR__PBT_FLOAT:
        return PR_FTYPE_NUM;
    case PR__PBT_STRING:
        return PR_FTYPE_STR;
    case PR__PBT_BYTES:
        return PR_FTYPE_STR | PR_FTYPE_BYTES;
    case PR__PBT_ENUM:
        return PR_FTYPE_STR | PR_FTYPE_INT;
    case PR__PBT_BOOL:
        return PR_FTYPE_INT | PR_FTYPE_BOOL;
    case PR__PBT_MESSAGE:
    case PR__PBT_GROUP:
        return 0;
    default:
        return PR_FTYPE_INT;
    }
}

/* The PR_FTYPE_* of field f's values: its type's, and a well-known message
 * read whole gives a string that is a time (a Timestamp: PR_FTYPE_TIME) or
 * a number (a Duration). */
static unsigned pr__pb_field_ftypes(const pr_pbuser_desc *d, const pr__pbfield *f)
{
    uint8_t w = f->msg >= 0 ? d->msgs[f->msg].wkt : PR_PB_WKT_NONE;
    return w == PR_PB_WKT_TIMESTAMP  ? PR_FTYPE_STR | PR_FTYPE_TIME
           : w == PR_PB_WKT_DURATION ? PR_FTYPE_NUM
                                     : pr__pb_ftypes(f->type);
}

/* A map field read by its entries: its keys (strings; integer keys in
 * decimal, bool keys true / false) or its values (the value type's). */
static int pr__pb_check_map(const pr_pbuser_desc *d, const char *path, pr_json_part part,
                            unsigned *types, char *errstr, size_t errstr_size)
{
    pr__pbstep steps[PR__PB_MAX_DEPTH];
    uint32_t n = 0;
    int rc = pr__pb_resolve(d, path, true, steps, &n, errstr, errstr_size);
    if (rc)
        return rc;
    const pr__pbfield *f = steps[n - 1].f;
    const pr__pbfield *vf = pr__pb_field_by_number(d, f->msg, 2);
    if (!pr__pb_field_by_number(d, f->msg, 1) || !vf)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "'%s': map entry without key/value",
                         f->name);
    *types = part == PR_JSON_KEYS ? PR_FTYPE_STR : pr__pb_ftypes(vf->type);
    return 0;
}

int pr_pbuser_check_path(const pr_pbuser_desc *d, const char *path, pr_json_shape shape,
                         pr_json_part part, unsigned *types, char *errstr, size_t errstr_size)
{
    if (part != PR_JSON_AT)
        return pr__pb_check_map(d, path, part, types, errstr, errstr_size);
    /* LIST, ALIGNED (a weighted list's ids and weights: the same fields as a
     * list's, holes are the reader's business), VECTOR, SCALAR_OR_LIST */
    bool list = shape != PR_JSON_SCALAR, either = shape == PR_JSON_SCALAR_OR_LIST;
    pr__pbstep steps[PR__PB_MAX_DEPTH];
    uint32_t n = 0;
    int rc = pr__pb_resolve(d, path, false, steps, &n, errstr, errstr_size);
    if (rc)
        return rc;
    const pr__pbstep *last = &steps[n - 1];
    const pr__pbfield *f = last->f;
    if (last->key) /* a map's value: never repeated */
        f = pr__pb_field_by_number(d, f->msg, 2);
    for (uint32_t i = 0; i + 1 < n; i++) {
        if (steps[i].key || !steps[i].f->repeated)
            continue;
        if (shape == PR_JSON_VECTOR)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' is a repeated message: a dense vector reads one repeated "
                             "number field, not one element per message (its positions must "
                             "hold)",
                             steps[i].f->name);
        if (list) { /* one element per message of the repeated field */
            *types = f->repeated ? 0 : pr__pb_field_ftypes(d, f);
            return 0;
        }
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'%s' is a repeated message: a single-valued feature cannot go through "
                         "it (declare a list feature: list: { max_len: N })",
                         steps[i].f->name);
    }
    if (list && !either && !f->repeated)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'%s' is not repeated (%s): a list feature (or a dense vector) needs "
                         "a repeated field",
                         f->name, pr__pb_type_name(f->type));
    if (!list && f->repeated)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'%s' is repeated: declare a list feature (list: { max_len: N }), or a "
                         "dense vector (dim: N)",
                         f->name);
    if (!(*types = pr__pb_field_ftypes(d, f)))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'%s' is a message: a feature's path ends at one of its fields", f->name);
    return 0;
}
