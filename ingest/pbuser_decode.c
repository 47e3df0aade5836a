/*
 * pbuser_decode.c — the table-driven reader of a user's Protobuf messages
 * (source.format protobuf, issue 23): one message's wire bytes -> one row of
 * the JSON decoder's pr_json_block (pr_json_row_*), so json_decode.c applies
 * the declared schema to it exactly as to a JSON event.
 *
 * Plan. The decoder's paths (pr_json_decoder_paths) are compiled once into a
 * tree of nodes, one per message reached on a configured path; each node
 * lists its configured field numbers with an action: emit to column i,
 * descend into a nested message node, or (a map) look the entry's key up
 * among the configured keys and continue in its value. Every other field is
 * skipped by wire type without looking at its bytes (framing is still
 * checked, so a truncated message is refused wherever it breaks).
 *
 * One pass. The bytes are walked once; values are staged per column (raw
 * bits, strings pointing into the message), because protobuf's rules need
 * the whole message before a column's value is known: a singular field that
 * occurs twice keeps its last value, a nested message that occurs twice is
 * merged, a oneof member clears its siblings, and a proto3 field with
 * implicit presence is its default value when absent but its message is
 * there. Only then is the row written, converted by the field's type.
 *
 * Values (pr_json_any): integers of every width and encoding (varint,
 * zigzag, fixed) as INT64 (a uint64 above 2^63 - 1 keeps its bits: the same
 * vocabulary key, a negative number as a label or dense value); float and
 * double as DOUBLE; bool as BOOL; strings and bytes as strings (a string
 * must be UTF-8, bad_utf8 otherwise; bytes are raw); an enum as its symbol
 * name (a number the descriptor does not name: INT64).
 *
 * Lists of messages. A path through a repeated message (`imp.ad_id`) maps
 * over its elements: the column is a list with one value per element, each
 * element read with the rules above as if it were the whole message (last
 * value wins inside the element, oneof, implicit presence giving the
 * default when the element lacks the field). Such a column remembers where
 * the current element's values begin (elem0), so clearing inside an element
 * clears that element only. A PR_JSON_ALIGNED column (a weighted list's ids
 * or weights) keeps one position per element: an element that gives it no
 * value (an explicit-presence field it lacks, a message on the way it lacks,
 * a map key it lacks) stages a hole, pr_json_row_hole when the row is
 * written, as JSON's extractor does for an object without the key. A proto3
 * implicit field the element lacks is no hole but its zero value (0, 0.0,
 * "", the enum's 0), exactly as a LIST column of it reads: the wire cannot
 * tell 0 from absent, so such an id is kept and such a weight is 0, never
 * the feature's weights default (declare the field `optional` for that).
 *
 * Maps read by their entries. A PR_JSON_KEYS path names a map field itself
 * (list: { from: keys }): one entry (PR__PE_KEYS) stages each map entry's
 * key on the keys column and, when the same path's PR_JSON_VALUES column is
 * asked for, its value on that one, in wire order, so position k of both is
 * entry k. A key that occurs again (protobuf's merge: the last value wins)
 * keeps its first position and overwrites its staged value there, as JSON's
 * extractor does for a repeated object key; past PR__MAP_LINEAR keys the
 * earlier ones are found through a hash table. Keys are written as strings
 * (an integer key in decimal), an entry without its value stages the value
 * type's 0 (map values have no presence: never a hole). Such a map is a
 * list level of its own: never under a repeated message (compile error).
 *
 * Well-known types read whole (pbuser_wkt.c). A path ending at a
 * google.protobuf.Timestamp or Duration field is a column of that message
 * (pr__pbcol.wkt): its node entry (PR__PE_NODE, the same one `ts.seconds`
 * descends through) also stages the message's seconds and nanos on the
 * column, merged as protobuf merges a message met twice, and the row gets
 * the Timestamp's RFC 3339 text (the string a JSON event would carry, so
 * `unit: rfc3339` reads both alike) or the Duration's seconds. The range is
 * checked when the row is written, after every merge: out of it the record
 * is rejected bad_time, naming the field.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pbuser_int.h"
#include "pr_varint.h"

enum { PR__PE_COL, PR__PE_NODE, PR__PE_MAP, PR__PE_KEYS };

typedef struct pr__pbkey {
    const char *key; /* map key as text (decimal for integer keys, true/false) */
    uint32_t len;
    uint32_t node; /* marks the entry seen; the value message's node */
    int32_t col;   /* a scalar value's column, -1 for a message value */
} pr__pbkey;

typedef struct pr__pbent {
    uint32_t number;
    uint8_t kind;
    const pr__pbfield *f;
    uint32_t col;  /* PR__PE_COL */
    uint32_t node; /* PR__PE_NODE */
    uint32_t n_keys;
    pr__pbkey *keys;            /* PR__PE_MAP */
    const pr__pbfield *kf, *vf; /* PR__PE_MAP, PR__PE_KEYS: the entry's key and value */
    int32_t kcol, vcol;         /* PR__PE_KEYS: the keys' and the values' columns, -1 none */
    int32_t tcol;               /* PR__PE_NODE: a well-known message read whole, its column */
} pr__pbent;

#define PR__DIRECT 32 /* field numbers below this find their entry by index */

typedef struct pr__pbnode {
    int32_t msg; /* -1: a map key's scalar value (presence only) */
    uint32_t n_ent;
    pr__pbent *ent;
    bool has_oneof;
    uint16_t direct[PR__DIRECT]; /* field number -> entry index + 1, 0 = not configured */
} pr__pbnode;

typedef struct pr__pbval {
    uint64_t u;
    const uint8_t *s;
    uint32_t len;
} pr__pbval;

typedef struct pr__pbcol {
    const pr__pbfield *f; /* the leaf (a map's value field for a map key) */
    uint32_t parent;      /* the node whose presence gives an implicit leaf its default */
    bool implicit;
    bool list;
    bool mapped;        /* crosses a repeated message: one value per element */
    bool aligned;       /* mapped, PR_JSON_ALIGNED: an element without a value is a hole */
    uint32_t elem_node; /* mapped: the repeated message's node */
    uint32_t elem0;     /* mapped: where the current element's values begin; else 0 */
    int8_t want;        /* the wire type of one value */
    uint8_t wkt;        /* pr_pb_wkt: a message read whole, seconds in v.u and nanos in v.len */
    uint32_t max;       /* staged values bound: max_list + 1 (the writer refuses the last) */
    uint32_t n, cap;
    pr__pbval *v;
    /* a map read by its entries (PR__PE_KEYS): the keys' or the values' column */
    const pr__pbfield *map; /* the map field, else NULL */
    bool keys;              /* the keys' column: written as strings (pr__put_keys) */
    bool mh_stale;          /* the keys' hash table holds another map's keys */
    uint32_t mh_cap, mh_n;  /* table slots (a power of 2); keys v[0, mh_n) are in it */
    uint32_t *mh;           /* key index + 1 per slot, 0 empty (open addressing) */
} pr__pbcol;

struct pr_pbuser_reader {
    const pr_pbuser_desc *d;
    pr_pbuser_desc *own; /* freed with the reader (pr_pbuser_set_reader), or NULL */
    pr_pb_framing framing;
    uint32_t n_nodes, n_cols;
    pr__pbnode *nodes;
    pr__pbcol *cols;
    uint8_t *seen; /* [n_nodes], per record */
    const uint8_t *base;
    char *detail; /* the record's reject detail */
    size_t detail_size;
};

/* ---------------------------------------------------------------- compiling */

static int pr__node_new(pr_pbuser_reader *r, int32_t msg, uint32_t *out)
{
    pr__pbnode *nn = realloc(r->nodes, (r->n_nodes + 1) * sizeof(*nn));
    if (!nn)
        return PR_ENOMEM;
    r->nodes = nn;
    nn[r->n_nodes] = (pr__pbnode){.msg = msg};
    *out = r->n_nodes++;
    return 0;
}

/* The entry of `node` for field number num, NULL when none. */
static pr__pbent *pr__entry_of(pr_pbuser_reader *r, uint32_t node, uint32_t num)
{
    pr__pbnode *n = &r->nodes[node];
    for (uint32_t i = 0; i < n->n_ent; i++)
        if (n->ent[i].number == num)
            return &n->ent[i];
    return NULL;
}

/* The entry of `node` for field f (made when missing). */
static pr__pbent *pr__entry(pr_pbuser_reader *r, uint32_t node, const pr__pbfield *f, uint8_t kind)
{
    pr__pbnode *n = &r->nodes[node];
    pr__pbent *old = pr__entry_of(r, node, f->number);
    if (old)
        return old->kind == kind ? old : NULL;
    pr__pbent *ne = realloc(n->ent, (n->n_ent + 1) * sizeof(*ne));
    if (!ne)
        return NULL;
    n->ent = ne;
    ne[n->n_ent] = (pr__pbent){.number = f->number, .kind = kind, .f = f, .tcol = -1};
    n->has_oneof |= f->oneof >= 0;
    if (kind == PR__PE_NODE && pr__node_new(r, f->msg, &ne[n->n_ent].node))
        return NULL;
    return &r->nodes[node].ent[r->nodes[node].n_ent++];
}

/* The key entry of a map entry e (made when missing). */
static pr__pbkey *pr__map_key(pr_pbuser_reader *r, pr__pbent *e, const pr__pbstep *st)
{
    for (uint32_t i = 0; i < e->n_keys; i++)
        if (e->keys[i].len == st->key_len && !memcmp(e->keys[i].key, st->key, st->key_len))
            return &e->keys[i];
    pr__pbkey *nk = realloc(e->keys, (e->n_keys + 1) * sizeof(*nk));
    if (!nk)
        return NULL;
    e->keys = nk;
    pr__pbkey *k = &nk[e->n_keys];
    *k = (pr__pbkey){.key = st->key, .len = st->key_len, .col = -1};
    uint32_t node;
    if (pr__node_new(r, e->vf->msg, &node))
        return NULL;
    k->node = node;
    e->n_keys++;
    return k;
}

/* A map read by its entries and one of its keys: not both. */
static int pr__map_clash(const pr_json_path *jp, const pr__pbfield *f, char *errstr,
                         size_t errstr_size)
{
    return pr_seterr(errstr, errstr_size, PR_EINVAL,
                     "%s: '%s' is read as a map (list: { from: keys }): no path may name a key "
                     "under it",
                     jp->path, f->name);
}

/* Column col reads the entries of map field f of `node` (jp->part): its
 * keys or its values; one PR__PE_KEYS entry serves both columns. */
static int pr__map_col(pr_pbuser_reader *r, uint32_t node, const pr__pbfield *f,
                       const pr_json_path *jp, uint32_t col, char *errstr, size_t errstr_size)
{
    bool keys = jp->part == PR_JSON_KEYS;
    if (jp->shape != PR_JSON_ALIGNED && (!keys || jp->shape != PR_JSON_LIST))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: a map's %s are read as a list%s",
                         jp->path, keys ? "keys" : "values", keys ? "" : " aligned with its keys");
    pr__pbent *e = pr__entry_of(r, node, f->number);
    if (e && e->kind != PR__PE_KEYS)
        return pr__map_clash(jp, f, errstr, errstr_size);
    if (!e) {
        if (!(e = pr__entry(r, node, f, PR__PE_KEYS)))
            return PR_ENOMEM;
        e->kcol = e->vcol = -1;
        e->kf = pr__pb_field_by_number(r->d, f->msg, 1);
        e->vf = pr__pb_field_by_number(r->d, f->msg, 2);
    }
    if (!e->kf || !e->vf)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: map entry without key/value",
                         jp->path);
    if (!keys && e->vf->msg >= 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s: the map's values are messages (%s): its keys only are a list",
                         jp->path, r->d->msgs[e->vf->msg].full);
    int32_t *at = keys ? &e->kcol : &e->vcol;
    if (*at >= 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: the map's %s read twice", jp->path,
                         keys ? "keys" : "values");
    *at = (int32_t)col;
    r->cols[col] = (pr__pbcol){
        .f = keys ? e->kf : e->vf, .parent = node, .list = true, .map = f, .keys = keys};
    return 0;
}

/* One path into the plan as column `col`. */
static int pr__compile_path(pr_pbuser_reader *r, const pr_json_path *jp, uint32_t col, char *errstr,
                            size_t errstr_size)
{
    pr__pbstep st[PR__PB_MAX_DEPTH];
    uint32_t n = 0;
    if (pr__pb_resolve(r->d, jp->path, jp->part != PR_JSON_AT, st, &n, errstr, errstr_size))
        return PR_EINVAL;
    uint32_t node = 0, elem_node = 0;
    bool mapped = false;
    pr__pbcol *c = &r->cols[col];
    for (uint32_t i = 0; i < n; i++) {
        bool last = i + 1 == n;
        const pr__pbfield *f = st[i].f;
        if (st[i].key) {
            const pr__pbent *o = pr__entry_of(r, node, f->number);
            if (o && o->kind == PR__PE_KEYS)
                return pr__map_clash(jp, f, errstr, errstr_size);
            pr__pbent *e = pr__entry(r, node, f, PR__PE_MAP);
            if (!e)
                return PR_ENOMEM;
            e->kf = pr__pb_field_by_number(r->d, f->msg, 1);
            e->vf = pr__pb_field_by_number(r->d, f->msg, 2);
            if (!e->kf || !e->vf)
                return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: map entry without key/value",
                                 jp->path);
            pr__pbkey *k = pr__map_key(r, e, &st[i]);
            if (!k)
                return PR_ENOMEM;
            node = k->node;
            if (last) { /* an entry without its value: the value's default */
                k->col = (int32_t)col;
                *c = (pr__pbcol){.f = e->vf, .parent = node, .implicit = true};
                c->wkt = e->vf->msg >= 0 ? r->d->msgs[e->vf->msg].wkt : PR_PB_WKT_NONE;
            }
        } else if (last && jp->part != PR_JSON_AT) { /* a map read by its entries */
            int rc = pr__map_col(r, node, f, jp, col, errstr, errstr_size);
            if (rc)
                return rc;
        } else if (last && f->msg >= 0) { /* a well-known message (pr__pb_resolve) */
            pr__pbent *e = pr__entry(r, node, f, PR__PE_NODE);
            if (!e)
                return PR_ENOMEM;
            e->tcol = (int32_t)col;
            *c = (pr__pbcol){
                .f = f, .parent = node, .list = f->repeated, .wkt = r->d->msgs[f->msg].wkt};
        } else if (last) {
            pr__pbent *e = pr__entry(r, node, f, PR__PE_COL);
            if (!e)
                return PR_ENOMEM;
            e->col = col;
            *c = (pr__pbcol){.f = f,
                             .parent = node,
                             .implicit = !f->explicit_presence && !f->repeated,
                             .list = f->repeated};
        } else {
            pr__pbent *e = pr__entry(r, node, f, PR__PE_NODE);
            if (!e)
                return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: out of memory", jp->path);
            node = e->node;
            if (f->repeated) { /* a list of messages (pr__pb_resolve allows one) */
                mapped = true;
                elem_node = node;
            }
        }
    }
    if (mapped) {
        c->list = c->mapped = true;
        c->elem_node = elem_node;
    }
    c->max = (jp->max_list ? jp->max_list : PR_JSON_DEFAULT_MAX_LIST) + 1;
    c->want = (int8_t)pr__pb_wire_type(c->f->type);
    if (!c->list && !(c->v = calloc(1, sizeof(*c->v))))
        return PR_ENOMEM;
    c->cap = c->list ? 0 : 1;
    bool listy =
        jp->shape == PR_JSON_LIST || jp->shape == PR_JSON_VECTOR || jp->shape == PR_JSON_ALIGNED;
    c->aligned = c->mapped && jp->shape == PR_JSON_ALIGNED;
    if (jp->shape == PR_JSON_VECTOR && c->mapped)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s: the path goes through a repeated message: a dense vector reads one "
                         "repeated number field (its positions must hold)",
                         jp->path);
    /* `in:` (a label or flag by value, a filter's path) reads a field or a
     * repeated one alike: SCALAR_OR_LIST takes either */
    if (!listy && c->list && jp->shape != PR_JSON_SCALAR_OR_LIST)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s: the %s: declare a list feature, or a dense vector (dim: N)", jp->path,
                         c->mapped ? "path goes through a repeated message" : "field is repeated");
    if (listy && !c->list)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s: the field is not repeated: a list feature (or a dense vector) "
                         "needs a repeated field",
                         jp->path);
    return 0;
}

pr_pbuser_reader *pr_pbuser_reader_new(const pr_pbuser_desc *d, pr_pb_framing framing,
                                       const pr_json_path *paths, size_t n, char *errstr,
                                       size_t errstr_size)
{
    pr_pbuser_reader *r = calloc(1, sizeof(*r));
    uint32_t root;
    if (!r || !(r->cols = calloc(n + 1, sizeof(*r->cols))) || pr__node_new(r, d->root, &root))
        goto out_nomem;
    r->d = d;
    r->framing = framing;
    r->n_cols = (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        char e[256] = "";
        int rc = pr__compile_path(r, &paths[i], (uint32_t)i, e, sizeof(e));
        if (rc == PR_ENOMEM || (rc && !e[0]))
            goto out_nomem;
        if (rc) {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "%s", e);
            goto out_free;
        }
    }
    if (!(r->seen = calloc(r->n_nodes, 1)))
        goto out_nomem;
    for (uint32_t i = 0; i < r->n_nodes; i++) /* entries are final: index them */
        for (uint32_t k = 0; k < r->nodes[i].n_ent; k++) {
            const pr__pbent *ek = &r->nodes[i].ent[k];
            if (ek->kind == PR__PE_KEYS && ek->kcol < 0) { /* its entries come with the keys */
                pr_seterr(errstr, errstr_size, PR_EINVAL,
                          "protobuf: map '%s': its values are read with its keys (no keys path)",
                          ek->f->name);
                goto out_free;
            }
            if (ek->number < PR__DIRECT)
                r->nodes[i].direct[ek->number] = (uint16_t)(k + 1);
        }
    return r;
out_nomem:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "protobuf: out of memory");
out_free:
    pr_pbuser_reader_free(r);
    return NULL;
}

void pr_pbuser_reader_free(pr_pbuser_reader *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->n_nodes; i++) {
        for (uint32_t k = 0; k < r->nodes[i].n_ent; k++)
            free(r->nodes[i].ent[k].keys);
        free(r->nodes[i].ent);
    }
    for (uint32_t i = 0; r->cols && i < r->n_cols; i++) {
        free(r->cols[i].v);
        free(r->cols[i].mh);
    }
    free(r->nodes);
    free(r->cols);
    free(r->seen);
    pr_pbuser_desc_free(r->own);
    free(r);
}

void pr__pb_reader_own(pr_pbuser_reader *r, pr_pbuser_desc *d)
{
    r->own = d;
}

/* ---------------------------------------------------------------- the wire walk */

#define PR__BAD (-1000) /* malformed: r->detail says where */

static int pr__bad(pr_pbuser_reader *r, const uint8_t *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int pr__bad(pr_pbuser_reader *r, const uint8_t *at, const char *fmt, ...)
{
    char what[120];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    snprintf(r->detail, r->detail_size, "%s at byte %zu", what, (size_t)(at - r->base));
    return PR__BAD;
}

/* One value of wire type wt at *pp: the bits (varint, fixed) or the bytes
 * (LEN). 0, or PR__BAD. */
static inline int pr__read(pr_pbuser_reader *r, int wt, const uint8_t **pp, const uint8_t *end,
                           pr__pbval *v)
{
    const uint8_t *p = *pp;
    uint64_t u = 0;
    size_t k;
    switch (wt) {
    case PR__WT_VARINT:
        if (p < end && *p < 0x80) { /* one byte: most values */
            v->u = *p;
            *pp = p + 1;
            return 0;
        }
        if (!(k = pr_varint_get(p, end, &u)))
            return pr__bad(r, p, "truncated varint");
        p += k;
        break;
    case PR__WT_I64:
    case PR__WT_I32:
        k = wt == PR__WT_I64 ? 8 : 4;
        if ((size_t)(end - p) < k)
            return pr__bad(r, p, "truncated fixed%zu", k * 8);
        for (size_t i = 0; i < k; i++)
            u |= (uint64_t)p[i] << (8 * i);
        p += k;
        break;
    case PR__WT_LEN:
        if (p < end && *p < 0x80)
            u = *p, k = 1;
        else if (!(k = pr_varint_get(p, end, &u)))
            return pr__bad(r, p, "truncated length");
        if (u > (uint64_t)(end - p - (ptrdiff_t)k))
            return pr__bad(r, p, "length %" PRIu64 " past the end", u);
        v->s = p + k;
        v->len = (uint32_t)u;
        p += k + u;
        break;
    default:
        return pr__bad(r, p, "wire type %d", wt);
    }
    v->u = u;
    *pp = p;
    return 0;
}

/* Skip one field of wire type wt (a group up to its end tag). */
static int pr__skip(pr_pbuser_reader *r, int wt, uint64_t num, const uint8_t **pp,
                    const uint8_t *end, uint32_t depth)
{
    pr__pbval v = {0};
    if (wt != PR__WT_SGROUP)
        return pr__read(r, wt, pp, end, &v);
    if (depth >= PR__PB_MAX_DEPTH)
        return pr__bad(r, *pp, "nesting deeper than %d", PR__PB_MAX_DEPTH);
    for (;;) {
        uint64_t tag;
        size_t k = *pp < end ? pr_varint_get(*pp, end, &tag) : 0;
        if (!k)
            return pr__bad(r, *pp, "group %" PRIu64 " without its end", num);
        *pp += k;
        if ((tag & 7) == PR__WT_EGROUP)
            return (tag >> 3) == num ? 0 : pr__bad(r, *pp, "end of group %" PRIu64, tag >> 3);
        int rc = pr__skip(r, (int)(tag & 7), tag >> 3, pp, end, depth + 1);
        if (rc)
            return rc;
    }
}

static inline int pr__stage(pr_pbuser_reader *r, pr__pbcol *c, const pr__pbval *v)
{
    if (!c->list) {
        c->v[0] = *v;
        c->n = 1;
        return 0;
    }
    if (c->mapped && !c->f->repeated && c->n > c->elem0) { /* again in one element */
        c->v[c->n - 1] = *v;
        return 0;
    }
    if (c->n >= c->max) /* already one past max_list: the writer refuses the row */
        return 0;
    if (c->n == c->cap) {
        uint32_t nc = c->cap ? c->cap * 2 : 8;
        pr__pbval *nv = realloc(c->v, nc * sizeof(*nv));
        if (!nv)
            return PR_ENOMEM;
        c->v = nv;
        c->cap = nc;
    }
    (void)r;
    c->v[c->n++] = *v;
    return 0;
}

/* A value (or a packed run of values) of column c's field at *pp. */
static int pr__col_value(pr_pbuser_reader *r, pr__pbcol *c, int wt, const uint8_t **pp,
                         const uint8_t *end)
{
    const pr__pbfield *f = c->f;
    int want = c->want;
    pr__pbval v = {0};
    int rc;
    if (wt == want) {
        if ((rc = pr__read(r, wt, pp, end, &v)))
            return rc;
        return pr__stage(r, c, &v);
    }
    if (wt != PR__WT_LEN || !f->repeated || !pr__pb_packable(f->type))
        return pr__bad(r, *pp, "field '%s' (%u): wire type %d, expected %d", f->name, f->number, wt,
                       want);
    pr__pbval run = {0};
    if ((rc = pr__read(r, wt, pp, end, &run)))
        return rc;
    const uint8_t *p = run.s, *pe = run.s + run.len;
    while (p < pe) {
        if ((rc = pr__read(r, want, &p, pe, &v)) || (rc = pr__stage(r, c, &v)))
            return rc;
    }
    return 0;
}

/* A well-known message (Timestamp, Duration) at p[0, end) onto its column
 * c: field 1 (seconds) and 2 (nanos), varints; other fields skipped, their
 * framing checked as pr__walk checks it. Met again as the same singular
 * field it merges into the value staged (protobuf's rule for a message):
 * the fields it carries replace those. */
static int pr__wkt_stage(pr_pbuser_reader *r, pr__pbcol *c, const uint8_t *p, const uint8_t *end,
                         uint32_t depth)
{
    static const char *const part[] = {"", "seconds", "nanos"};
    pr__pbval t = {0};
    if (depth >= PR__PB_MAX_DEPTH)
        return pr__bad(r, p, "nesting deeper than %d", PR__PB_MAX_DEPTH);
    if (!c->f->repeated && c->n > c->elem0)
        t = c->v[c->n - 1];
    while (p < end) {
        uint64_t tag;
        size_t k = pr_varint_get(p, end, &tag);
        if (!k)
            return pr__bad(r, p, "truncated tag");
        uint64_t num = tag >> 3;
        int wt = (int)(tag & 7), rc;
        if (num == 0 || num > PR__PB_MAX_FIELD)
            return pr__bad(r, p, "field number %" PRIu64, num);
        if (wt == PR__WT_EGROUP || wt > PR__WT_I32)
            return pr__bad(r, p, "wire type %d", wt);
        p += k;
        pr__pbval v = {0};
        if (num > 2) {
            rc = pr__skip(r, wt, num, &p, end, depth);
        } else if (wt != PR__WT_VARINT) {
            return pr__bad(r, p, "field '%s.%s' (%u): wire type %d, expected 0", c->f->name,
                           part[num], (unsigned)num, wt);
        } else if (!(rc = pr__read(r, wt, &p, end, &v))) {
            if (num == 1)
                t.u = v.u;
            else
                t.len = (uint32_t)v.u; /* an int32: its low 32 bits, as protobuf reads it */
        }
        if (rc)
            return rc;
    }
    return pr__stage(r, c, &t);
}

static void pr__clear_node(pr_pbuser_reader *r, uint32_t node);

static void pr__clear_entry(pr_pbuser_reader *r, const pr__pbent *e)
{
    if (e->kind == PR__PE_COL) {
        r->cols[e->col].n = r->cols[e->col].elem0;
    } else if (e->kind == PR__PE_NODE) {
        if (e->tcol >= 0) /* a well-known message read whole */
            r->cols[e->tcol].n = r->cols[e->tcol].elem0;
        pr__clear_node(r, e->node);
    } else if (e->kind == PR__PE_KEYS) { /* not under a repeated message: elem0 is 0 */
        for (int32_t i = 0; i < 2; i++) {
            int32_t col = i ? e->vcol : e->kcol;
            if (col >= 0)
                r->cols[col].n = 0;
        }
    } else {
        for (uint32_t k = 0; k < e->n_keys; k++) {
            pr__clear_node(r, e->keys[k].node);
            if (e->keys[k].col >= 0)
                r->cols[e->keys[k].col].n = r->cols[e->keys[k].col].elem0;
        }
    }
}

static void pr__clear_node(pr_pbuser_reader *r, uint32_t node)
{
    r->seen[node] = 0;
    for (uint32_t i = 0; i < r->nodes[node].n_ent; i++)
        pr__clear_entry(r, &r->nodes[node].ent[i]);
}

/* A oneof member arrived: its configured siblings are gone. */
static void pr__oneof(pr_pbuser_reader *r, const pr__pbnode *n, const pr__pbent *e)
{
    for (uint32_t i = 0; i < n->n_ent; i++)
        if (&n->ent[i] != e && n->ent[i].f->oneof == e->f->oneof)
            pr__clear_entry(r, &n->ent[i]);
}

static int pr__walk(pr_pbuser_reader *r, uint32_t node, const uint8_t *p, const uint8_t *end,
                    uint32_t depth);

/* A map key's integer as its type reads it (sign-extended, zigzag
 * decoded; a uint64's bits; a bool 0 / 1), so that equal keys compare
 * equal. */
static uint64_t pr__key_norm(uint8_t type, uint64_t u)
{
    switch (type) {
    case PR__PBT_INT32:
    case PR__PBT_SFIXED32:
        return (uint64_t)(int64_t)(int32_t)(uint32_t)u;
    case PR__PBT_UINT32:
    case PR__PBT_FIXED32:
        return (uint32_t)u;
    case PR__PBT_SINT32:
        return (uint64_t)(int64_t)(int32_t)(((uint32_t)u >> 1) ^ (0u - ((uint32_t)u & 1)));
    case PR__PBT_SINT64:
        return (u >> 1) ^ (0 - (u & 1));
    case PR__PBT_BOOL:
        return u != 0;
    default: /* int64, uint64, fixed64, sfixed64: the bits */
        return u;
    }
}

/* The text of a map key, its integer normalized (pr__key_norm): the string,
 * an integer in decimal, true / false; into buf. */
static size_t pr__key_text(const pr__pbfield *kf, const pr__pbval *v, char *buf, size_t cap,
                           const char **out)
{
    switch (kf->type) {
    case PR__PBT_STRING: /* an entry without its key: "" */
        *out = v->s ? (const char *)v->s : "";
        return v->len;
    case PR__PBT_BOOL:
        *out = v->u ? "true" : "false";
        return strlen(*out);
    case PR__PBT_UINT64:
    case PR__PBT_FIXED64:
        *out = buf;
        return (size_t)snprintf(buf, cap, "%" PRIu64, v->u);
    default:
        *out = buf;
        return (size_t)snprintf(buf, cap, "%" PRId64, (int64_t)v->u);
    }
}

/* The key (field 1 of the key's wire type; another is skipped, as an
 * unknown field) and the value (field 2: its wire type in *val_wt, left
 * -1 when absent, where its bytes begin in *vat) of one map entry
 * p[0, end); the last of each wins; a key of another wire type is
 * bad_protobuf, as protobuf's own parsers refuse it. */
static int pr__entry_fields(pr_pbuser_reader *r, const pr__pbent *e, const uint8_t *p,
                            const uint8_t *end, uint32_t depth, pr__pbval *key, pr__pbval *val,
                            int *val_wt, const uint8_t **vat)
{
    while (p < end) {
        uint64_t tag;
        size_t k = pr_varint_get(p, end, &tag);
        if (!k)
            return pr__bad(r, p, "truncated tag in map entry");
        p += k;
        int wt = (int)(tag & 7), rc;
        if (tag >> 3 == 1 && wt == pr__pb_wire_type(e->kf->type)) {
            rc = pr__read(r, wt, &p, end, key);
        } else if (tag >> 3 == 1) { /* as protobuf's parsers: not an unknown field */
            return pr__bad(r, p, "map '%s' key: wire type %d, expected %d", e->f->name, wt,
                           pr__pb_wire_type(e->kf->type));
        } else if (tag >> 3 == 2) {
            *vat = p;
            *val_wt = wt;
            rc = pr__read(r, wt, &p, end, val);
        } else {
            rc = pr__skip(r, wt, tag >> 3, &p, end, depth + 1);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* One map entry of a configured map field. */
static int pr__map_entry(pr_pbuser_reader *r, const pr__pbent *e, const uint8_t *p,
                         const uint8_t *end, uint32_t depth)
{
    pr__pbval key = {0}, val = {0};
    int val_wt = -1;
    const uint8_t *vat = p;
    int rc = pr__entry_fields(r, e, p, end, depth, &key, &val, &val_wt, &vat);
    if (rc)
        return rc;
    key.u = pr__key_norm(e->kf->type, key.u);
    char buf[32];
    const char *kt;
    size_t kl = pr__key_text(e->kf, &key, buf, sizeof(buf), &kt);
    for (uint32_t i = 0; i < e->n_keys; i++) {
        const pr__pbkey *k = &e->keys[i];
        if (k->len != kl || memcmp(k->key, kt, kl))
            continue;
        pr__clear_node(r, k->node); /* a later entry with the key replaces it */
        pr__pbcol *c = k->col >= 0 ? &r->cols[k->col] : NULL;
        if (c)
            c->n = c->elem0;
        r->seen[k->node] = 1;
        if (val_wt < 0)
            return 0;
        if (c && !c->wkt) {
            const uint8_t *vp = vat;
            return pr__col_value(r, c, val_wt, &vp, end);
        }
        if (val_wt != PR__WT_LEN)
            return pr__bad(r, vat, "map '%s' value: wire type %d, expected 2", e->f->name, val_wt);
        int rc = c ? pr__wkt_stage(r, c, val.s, val.s + val.len, depth + 1) : 0;
        return rc ? rc : pr__walk(r, k->node, val.s, val.s + val.len, depth + 1);
    }
    return 0;
}

#define PR__MAP_LINEAR 16 /* a map's keys past this many are found by hash */

static bool pr__key_eq(bool str, const pr__pbval *a, const pr__pbval *b)
{
    if (!str)
        return a->u == b->u;
    return a->len == b->len && (!a->len || !memcmp(a->s, b->s, a->len));
}

static uint32_t pr__key_hash(bool str, const pr__pbval *k)
{
    uint64_t h = k->u * 0x9e3779b97f4a7c15ull;
    if (str) {
        h = 0xcbf29ce484222325ull; /* FNV-1a */
        for (uint32_t i = 0; i < k->len; i++)
            h = (h ^ k->s[i]) * 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Key k (normalized) among the keys staged on keys column kc: its index,
 * -1 when new, PR_ENOMEM. Past PR__MAP_LINEAR keys through a hash table
 * kept at most half full (grown and rebuilt past that), which first takes
 * the keys staged since its last use, or all of them for a new map
 * (mh_stale). */
static int64_t pr__keys_find(pr__pbcol *kc, bool str, const pr__pbval *k)
{
    if (kc->n <= PR__MAP_LINEAR) {
        for (uint32_t i = 0; i < kc->n; i++)
            if (pr__key_eq(str, &kc->v[i], k))
                return i;
        return -1;
    }
    bool grow = 2 * (uint64_t)kc->n >= kc->mh_cap;
    if (grow || kc->mh_stale) {
        if (grow) {
            uint64_t cap = kc->mh_cap ? kc->mh_cap : 64;
            while (cap <= 2 * (uint64_t)kc->n)
                cap *= 2;
            uint32_t *t = cap <= UINT32_MAX ? realloc(kc->mh, cap * sizeof(*t)) : NULL;
            if (!t)
                return PR_ENOMEM;
            kc->mh = t;
            kc->mh_cap = (uint32_t)cap;
        }
        memset(kc->mh, 0, kc->mh_cap * sizeof(*kc->mh));
        kc->mh_n = 0;
        kc->mh_stale = false;
    }
    uint32_t mask = kc->mh_cap - 1;
    for (; kc->mh_n < kc->n; kc->mh_n++) {
        uint32_t at = pr__key_hash(str, &kc->v[kc->mh_n]) & mask;
        while (kc->mh[at])
            at = (at + 1) & mask;
        kc->mh[at] = kc->mh_n + 1;
    }
    for (uint32_t at = pr__key_hash(str, k) & mask; kc->mh[at]; at = (at + 1) & mask)
        if (pr__key_eq(str, &kc->v[kc->mh[at] - 1], k))
            return kc->mh[at] - 1;
    return -1;
}

/* One entry of a map read by its entries (PR__PE_KEYS), in wire order: its
 * key to the keys column, its value to the values column when a path reads
 * them (an entry without one: the value type's 0, map values having no
 * presence). A key staged before keeps its place and takes this value
 * (protobuf's rule for a repeated key, and JSON's for an object's). */
static int pr__keys_entry(pr_pbuser_reader *r, const pr__pbent *e, const uint8_t *p,
                          const uint8_t *end, uint32_t depth)
{
    static const uint8_t none[1]; /* as pr__put_default: "", 0 */
    pr__pbval key = {0}, val = {.s = none};
    int val_wt = -1;
    const uint8_t *vat = p;
    int rc = pr__entry_fields(r, e, p, end, depth, &key, &val, &val_wt, &vat);
    if (rc)
        return rc;
    pr__pbcol *kc = &r->cols[e->kcol], *vc = e->vcol >= 0 ? &r->cols[e->vcol] : NULL;
    if (vc && val_wt >= 0 && val_wt != vc->want)
        return pr__bad(r, vat, "map '%s' value: wire type %d, expected %d", e->f->name, val_wt,
                       vc->want);
    bool str = e->kf->type == PR__PBT_STRING;
    key.u = str ? 0 : pr__key_norm(e->kf->type, key.u);
    int64_t dup = pr__keys_find(kc, str, &key);
    if (dup == PR_ENOMEM)
        return PR_ENOMEM;
    if (dup >= 0) {
        if (vc && (uint64_t)dup < vc->n)
            vc->v[dup] = val;
        return 0;
    }
    if (kc->n >= kc->max) /* one past max_list already: the writer refuses the row */
        return 0;
    if (kc->n == 0) /* a new map (a record, or the map cleared): its own hash table */
        kc->mh_stale = true;
    if ((rc = pr__stage(r, kc, &key)) || !vc)
        return rc;
    return pr__stage(r, vc, &val);
}

/* A staged hole (pr__pbval.s): an element of a repeated message without a
 * value for an aligned column (pr_json_row_hole when the row is written). */
static const uint8_t pr__hole[1];

/* One element of a repeated message (node `node`) at p[0, end): walked as
 * a message of its own; each column that maps over it gets the element's
 * value (the default for an implicit field the element lacks: proto3
 * cannot tell 0 from absent), or nothing, or for an aligned column (a
 * weighted list's ids and weights) a hole that keeps the positions. */
static int pr__element(pr_pbuser_reader *r, uint32_t node, const uint8_t *p, const uint8_t *end,
                       uint32_t depth)
{
    for (uint32_t i = 0; i < r->n_cols; i++)
        if (r->cols[i].mapped && r->cols[i].elem_node == node)
            r->cols[i].elem0 = r->cols[i].n;
    pr__clear_node(r, node); /* seen flags below: this element's */
    r->seen[node] = 1;
    int rc = pr__walk(r, node, p, end, depth);
    for (uint32_t i = 0; i < r->n_cols && !rc; i++) {
        pr__pbcol *c = &r->cols[i];
        if (!c->mapped || c->elem_node != node)
            continue;
        static const uint8_t none[1];
        const pr__pbval dflt = {.s = none}; /* as pr__put_default */
        const pr__pbval hole = {.s = pr__hole};
        if (c->implicit && c->n == c->elem0 && r->seen[c->parent])
            rc = pr__stage(r, c, &dflt);
        else if (c->aligned && c->n == c->elem0)
            rc = pr__stage(r, c, &hole);
        c->elem0 = 0;
    }
    return rc;
}

/* One configured field (entry e) of a node at *pp. */
static int pr__field_value(pr_pbuser_reader *r, const pr__pbent *e, int wt, const uint8_t **pp,
                           const uint8_t *end, uint32_t depth)
{
    if (e->kind == PR__PE_COL)
        return pr__col_value(r, &r->cols[e->col], wt, pp, end);
    if (wt != PR__WT_LEN)
        return pr__bad(r, *pp, "field '%s' (%u): wire type %d, expected 2", e->f->name,
                       e->f->number, wt);
    pr__pbval v = {0};
    int rc = pr__read(r, wt, pp, end, &v);
    if (rc)
        return rc;
    if (e->kind == PR__PE_MAP)
        return pr__map_entry(r, e, v.s, v.s + v.len, depth + 1);
    if (e->kind == PR__PE_KEYS)
        return pr__keys_entry(r, e, v.s, v.s + v.len, depth + 1);
    if (e->tcol >= 0) { /* read whole; walked too only when a path names a field of it */
        if ((rc = pr__wkt_stage(r, &r->cols[e->tcol], v.s, v.s + v.len, depth + 1)) ||
            !r->nodes[e->node].n_ent)
            return rc;
    }
    if (e->f->repeated)
        return pr__element(r, e->node, v.s, v.s + v.len, depth + 1);
    r->seen[e->node] = 1; /* a message occurring twice merges: nothing cleared */
    return pr__walk(r, e->node, v.s, v.s + v.len, depth + 1);
}

static int pr__walk(pr_pbuser_reader *r, uint32_t node, const uint8_t *p, const uint8_t *end,
                    uint32_t depth)
{
    if (depth >= PR__PB_MAX_DEPTH)
        return pr__bad(r, p, "nesting deeper than %d", PR__PB_MAX_DEPTH);
    const pr__pbnode *n = &r->nodes[node];
    while (p < end) {
        uint64_t tag = p[0];
        size_t k = 1;
        if (tag >= 0x80 && !(k = pr_varint_get(p, end, &tag)))
            return pr__bad(r, p, "truncated tag");
        uint64_t num = tag >> 3;
        int wt = (int)(tag & 7);
        if (num == 0 || num > PR__PB_MAX_FIELD)
            return pr__bad(r, p, "field number %" PRIu64, num);
        if (wt == PR__WT_EGROUP || wt > PR__WT_I32)
            return pr__bad(r, p, "wire type %d", wt);
        p += k;
        const pr__pbent *e = NULL;
        if (num < PR__DIRECT)
            e = n->direct[num] ? &n->ent[n->direct[num] - 1] : NULL;
        else
            for (uint32_t i = 0; i < n->n_ent; i++)
                if (n->ent[i].number == num) {
                    e = &n->ent[i];
                    break;
                }
        int rc;
        if (!e) {
            rc = pr__skip(r, wt, num, &p, end, depth);
        } else {
            if (n->has_oneof && e->f->oneof >= 0)
                pr__oneof(r, n, e);
            rc = pr__field_value(r, e, wt, &p, end, depth);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- the row */

#define PR__BAD_TIME (-1001) /* a well-known type out of its range: r->detail says which */

/* A well-known message's staged seconds (v->u) and nanos (v->len) as its
 * value: a Timestamp's RFC 3339 text, a Duration's seconds; PR__BAD_TIME
 * out of the type's range (checked here, after every merge). */
static int pr__put_wkt(pr_pbuser_reader *r, pr_json_block *jb, uint32_t col, const pr__pbval *v)
{
    const pr__pbcol *c = &r->cols[col];
    int64_t s = (int64_t)v->u;
    int32_t ns = (int32_t)v->len;
    char text[PR_PB_TIME_TEXT_MAX];
    pr_json_any a = {.type = PR_JSON_DOUBLE};
    size_t n = 0;
    if (c->wkt == PR_PB_WKT_TIMESTAMP && (n = pr_pb_timestamp_text(s, ns, text)))
        return pr_json_row_put_str(jb, col, text, n);
    if (c->wkt == PR_PB_WKT_DURATION && pr_pb_duration_seconds(s, ns, &a.d))
        return pr_json_row_put(jb, col, &a);
    snprintf(r->detail, r->detail_size,
             "field '%s': %s out of its range (seconds %" PRId64 ", nanos %" PRId32 ")", c->f->name,
             r->d->msgs[c->f->msg].full, s, ns);
    return PR__BAD_TIME;
}

/* Column c's value v into the open row, converted by the field's type. */
static int pr__put(pr_pbuser_reader *r, pr_json_block *jb, uint32_t col, const pr__pbval *v)
{
    const pr__pbfield *f = r->cols[col].f;
    pr_json_any a = {.type = PR_JSON_INT64};
    uint64_t u = v->u;
    if (v->s == pr__hole)
        return pr_json_row_hole(jb, col);
    switch (f->type) {
    case PR__PBT_MESSAGE: /* a well-known type read whole: the only message a column holds */
        return pr__put_wkt(r, jb, col, v);
    case PR__PBT_STRING:
        if (!pr_utf8_valid(v->s, v->len)) {
            snprintf(r->detail, r->detail_size, "field '%s': invalid UTF-8 at byte %zu", f->name,
                     (size_t)(v->s - r->base));
            return PR_JSON_BAD_UTF8;
        }
        /* fallthrough */
    case PR__PBT_BYTES:
        return pr_json_row_put_str(jb, col, (const char *)v->s, v->len);
    case PR__PBT_ENUM: {
        const pr__pbenum *en = &r->d->enums[f->enm];
        for (uint32_t i = 0; i < en->n; i++)
            if (en->num[i] == (int32_t)(uint32_t)u)
                return pr_json_row_put_str(jb, col, en->name[i], strlen(en->name[i]));
        a.i = (int32_t)(uint32_t)u;
        break;
    }
    case PR__PBT_INT32:
    case PR__PBT_SFIXED32:
        a.i = (int32_t)(uint32_t)u;
        break;
    case PR__PBT_UINT32:
    case PR__PBT_FIXED32:
        a.i = (uint32_t)u;
        break;
    case PR__PBT_SINT32:
        a.i = (int32_t)(((uint32_t)u >> 1) ^ (0u - ((uint32_t)u & 1)));
        break;
    case PR__PBT_SINT64:
        a.i = (int64_t)((u >> 1) ^ (0 - (u & 1)));
        break;
    case PR__PBT_BOOL:
        a.type = PR_JSON_BOOL;
        a.i = u != 0;
        break;
    case PR__PBT_FLOAT: {
        uint32_t b32 = (uint32_t)u;
        float fl;
        memcpy(&fl, &b32, sizeof(fl));
        a.type = PR_JSON_DOUBLE;
        a.d = fl;
        break;
    }
    case PR__PBT_DOUBLE:
        a.type = PR_JSON_DOUBLE;
        memcpy(&a.d, &u, sizeof(a.d));
        break;
    default: /* int64, uint64 (its bits), fixed64, sfixed64 */
        a.i = (int64_t)u;
        break;
    }
    return pr_json_row_put(jb, col, &a);
}

/* The type's default (implicit presence): 0, 0.0, false, "", the enum's 0. */
static int pr__put_default(pr_pbuser_reader *r, pr_json_block *jb, uint32_t col)
{
    const pr__pbfield *f = r->cols[col].f;
    if (f->type == PR__PBT_ENUM && r->d->enums[f->enm].zero) {
        const char *z = r->d->enums[f->enm].zero;
        return pr_json_row_put_str(jb, col, z, strlen(z));
    }
    static const uint8_t none[1];
    pr__pbval v = {.s = none};
    return pr__put(r, jb, col, &v);
}

/* The keys staged on keys column col, as strings (integers in decimal). */
static int pr__put_keys(pr_pbuser_reader *r, pr_json_block *jb, uint32_t col)
{
    const pr__pbcol *c = &r->cols[col];
    int rc = 0;
    for (uint32_t k = 0; k < c->n && !rc; k++) {
        const pr__pbval *v = &c->v[k];
        char buf[32];
        const char *kt;
        size_t kl = pr__key_text(c->f, v, buf, sizeof(buf), &kt);
        if (c->f->type == PR__PBT_STRING && !pr_utf8_valid(kt, kl)) {
            snprintf(r->detail, r->detail_size, "map '%s': a key of invalid UTF-8 at byte %zu",
                     c->map->name, (size_t)(v->s - r->base));
            return PR_JSON_BAD_UTF8;
        }
        rc = pr_json_row_put_str(jb, col, kt, kl);
    }
    return rc;
}

/* The staged record as the block's next row. */
static int pr__emit(pr_pbuser_reader *r, pr_json_block *jb)
{
    int rc = pr_json_row_begin(jb);
    if (rc)
        return rc;
    for (uint32_t i = 0; i < r->n_cols && !rc; i++) {
        const pr__pbcol *c = &r->cols[i];
        if (c->keys)
            rc = pr__put_keys(r, jb, i);
        else
            for (uint32_t k = 0; k < c->n && !rc; k++)
                rc = pr__put(r, jb, i, &c->v[k]);
        if (!c->n && c->implicit && !c->mapped && r->seen[c->parent])
            rc = pr__put_default(r, jb, i);
        if (rc > 0 && rc != PR_JSON_BAD_UTF8)
            snprintf(r->detail, r->detail_size, "field '%s': %s",
                     c->map ? c->map->name : c->f->name, pr_json_reason_name(rc));
    }
    if (rc) {
        pr_json_row_abort(jb);
        return rc == PR__BAD_TIME ? PR_DEC_BAD_TIME : rc > 0 ? pr_decode_reason_of_json(rc) : rc;
    }
    pr_json_row_end(jb);
    return 0;
}

/* ---------------------------------------------------------------- framing */

/* Registry framing: 0, a 4-byte big-endian schema id, then the message
 * indexes as zigzag varints (a count, then the indexes; a count of 0 is
 * [0]). The indexes must name the configured message in its file. */
static int pr__unframe(pr_pbuser_reader *r, const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    if (end - p < 6 || p[0] != 0) {
        snprintf(r->detail, r->detail_size,
                 "no registry framing (magic byte 0, 4-byte schema id, message indexes)");
        return PR_DEC_BAD_FRAMING;
    }
    p += 5;
    uint64_t zc, zi;
    size_t k = pr_varint_get(p, end, &zc);
    int64_t count = k ? (int64_t)((zc >> 1) ^ (0 - (zc & 1))) : -1;
    if (!k || count < 0 || count > PR__PB_MAX_DEPTH) {
        snprintf(r->detail, r->detail_size, "bad message-index count at byte 5");
        return PR_DEC_BAD_FRAMING;
    }
    p += k;
    int32_t path[PR__PB_MAX_DEPTH] = {0};
    uint32_t n = count ? (uint32_t)count : 1;
    for (int64_t i = 0; i < count; i++) {
        if (!(k = pr_varint_get(p, end, &zi)) || (zi & 1) || zi > 2u * INT32_MAX) {
            snprintf(r->detail, r->detail_size, "bad message index at byte %zu",
                     (size_t)(p - r->base));
            return PR_DEC_BAD_FRAMING;
        }
        path[i] = (int32_t)(zi >> 1);
        p += k;
    }
    const pr_pbuser_desc *d = r->d;
    if (n != d->root_n_path || memcmp(path, d->root_path, n * sizeof(int32_t))) {
        snprintf(r->detail, r->detail_size,
                 "the message indexes name another message than %s (schema id %u)",
                 d->msgs[d->root].full,
                 (unsigned)((uint32_t)(*pp)[1] << 24 | (uint32_t)(*pp)[2] << 16 |
                            (uint32_t)(*pp)[3] << 8 | (*pp)[4]));
        return PR_DEC_BAD_FRAMING;
    }
    *pp = p;
    return 0;
}

int pr_pbuser_read(void *rd, pr_json_block *jb, const void *buf, size_t len, pr_json_reject *rej)
{
    pr_pbuser_reader *r = rd;
    pr_json_reject scratch;
    if (!rej)
        rej = &scratch;
    rej->reason = 0;
    rej->offset = 0;
    rej->detail[0] = '\0';
    r->detail = rej->detail;
    r->detail_size = sizeof(rej->detail);
    const uint8_t *p = buf, *end = p + len;
    r->base = p;
    if (r->framing == PR_PB_FRAMING_REGISTRY ||
        (r->framing == PR_PB_FRAMING_AUTO && len && !p[0])) {
        int rc = pr__unframe(r, &p, end);
        if (rc)
            return rc;
    }
    for (uint32_t i = 0; i < r->n_cols; i++)
        r->cols[i].n = r->cols[i].elem0 = 0;
    memset(r->seen, 0, r->n_nodes);
    r->seen[0] = 1;
    int rc = pr__walk(r, 0, p, end, 0);
    if (rc == PR__BAD)
        return PR_DEC_BAD_PROTOBUF;
    return rc ? rc : pr__emit(r, jb);
}
