/*
 * json_extract.c — single-pass JSON field extractor (contract: the JSON
 * section at the end of pr_ingest.h).
 *
 * Why not a library: jansson, json-c, cJSON and yajl build a tree (one
 * allocation per value) before anything can be looked up, and a clickstream
 * event is ~70% bytes nobody asked for; measured on the bench event they
 * stay well under the 400 MB/s per core the ingest path needs
 * (docs/architecture.md, bench/RESULTS.md). jsmn allocates nothing but only
 * tokenizes: no UTF-8 validation, no escapes, no numbers, so all of that
 * would be written here anyway. This file reads the document once, left to
 * right, and writes only the configured paths into their columns.
 *
 * Shape: the paths are compiled into a trie (node 0 = the top-level object;
 * the children of a node are contiguous, so a key lookup is a short scan
 * comparing (length, first 8 bytes) in one go). Objects under trie nodes
 * are walked by walk_object(); any other value goes to skip_value(), which
 * validates it fully (syntax, UTF-8, escapes, depth) but stores nothing.
 * Strings are scanned eight bytes at a time (SWAR) until a quote,
 * backslash, control or non-ASCII byte, which take the slow path; integers
 * of up to 7 digits are read as one word. A repeated key resets the leaves
 * below its trie node (each node remembers the row that last saw it), so
 * the last occurrence wins. Values are appended to their
 * columns as they are read; a rejected document is undone by resetting each
 * column's value count and the arena to where the row began. The arena is
 * reserved for the whole document up front (an unescaped string is never
 * longer than its JSON form), so string scanning never checks room.
 *
 * An array met where the trie expects an object is a list of objects
 * (pr__map_list): each element is walked under the same node, and every
 * leaf below appends one value per element that has it, so a list feature
 * "imp.ad_id" reads the ad_id of each impression in the same single pass.
 * Each element gets its own gen (stamp) so that a key repeated inside one
 * element resets that element only.
 *
 * A map read by its keys (PR_JSON_KEYS / PR_JSON_VALUES paths, a list
 * feature's `list: { from: keys }`) is a node whose children are two pseudo
 * leaves (segments \x01 and \x02, which no configured path can hold): its
 * object is walked by pr__take_map, out of line, appending every key and
 * value in order; a repeated key keeps its first place and takes its last
 * value (found by a scan, past 16 keys through a hash table).
 *
 * The row writer at the end (pr_json_row_*) lets another format's reader
 * (Avro, Protobuf) fill one row of the same columns, with the same type and
 * shape rules, so that json_decode.c turns every format's rows into block
 * rows alike.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_ingest.h"

#define NO_NODE UINT32_MAX
#define E_NOMEM (-1000) /* internal: allocation failed, maps to PR_ENOMEM */

typedef struct jnode {
    const char *key; /* segment, inside a path string the extractor owns */
    uint32_t key_len;
    int32_t path;                 /* leaf: index of its path; -1 for an inner node */
    uint32_t child0, n_children;  /* children: nodes[child0, child0 + n_children) */
    uint32_t slot_lo, slot_hi;    /* leaves below: slot_path[slot_lo, slot_hi) */
    uint32_t name_path, name_len; /* full dotted name = paths[name_path].path[0, name_len) */
    uint64_t k8;                  /* the key's first 8 bytes, zero-padded */
    bool all_list;                /* every leaf below takes a list: may map over an array */
    bool has_aligned;             /* a PR_JSON_ALIGNED leaf below: mapping keeps holes */
    bool is_map;                  /* a map's node: its children are its PR_JSON_KEYS and
                                   * VALUES leaves (pr__map_nodes) */
} jnode;

/* The trie segment under a map's node for its keys' and its values' path
 * (a control byte: no configured path can have it). */
#define MAP_KEYS_SEG '\x01'
#define MAP_VALS_SEG '\x02'

struct pr_json_extractor {
    size_t n_paths;
    pr_json_path *paths; /* path strings copied */
    char **tpaths;       /* [paths] a map part's trie string ("user.tags" + ".\x01"), else NULL */
    jnode *nodes;
    uint32_t n_nodes;
    uint32_t *slot_path; /* leaves in trie order: a subtree's leaves are contiguous */
    uint32_t max_depth;
};

struct pr__json_scratch {
    uint32_t *row_start;  /* [paths] a column's n_values when the row began */
    uint8_t *present;     /* [paths] this row */
    uint32_t *count;      /* [paths] this row */
    uint32_t *stamp;      /* [nodes] gen of the row (or list element) that last saw the node */
    uint32_t gen;         /* the current row's or list element's */
    uint32_t gen_hi;      /* the highest gen handed out */
    uint32_t *elem_start; /* [paths] a column's n_values when the list element began */
    char *key_buf;        /* unescaped keys */
    size_t key_cap;
    char *num_buf; /* NUL-terminated copies of numbers for strtod */
    size_t num_cap;
    /* a big map's keys (pr__map_dup): entry index + 1 by key hash, open
     * addressing, for the map now read (keys column mh_col, mh_n of its
     * entries in; mh_col UINT32_MAX: none) */
    uint32_t *mh;
    uint32_t mh_cap, mh_col, mh_n;
    uint32_t mh_size; /* slots in use: twice the map's entries or more, from 64, doubled
                       * (and rebuilt) as it grows, so a map costs its own size */
    /* the row writer (another format's reader fills a row) */
    const pr_json_extractor *x; /* the block's extractor: each column's type and shape */
    size_t row_arena;           /* arena_len when the open row began */
    bool row_open;
};

static const char *const pr_json_reason_names[PR_JSON__REASONS] = {
    [PR_JSON_OK] = "ok",
    [PR_JSON_NOT_JSON] = "not_json",
    [PR_JSON_NOT_OBJECT] = "not_object",
    [PR_JSON_TRUNCATED] = "truncated",
    [PR_JSON_BAD_UTF8] = "bad_utf8",
    [PR_JSON_BAD_ESCAPE] = "bad_escape",
    [PR_JSON_TOO_DEEP] = "too_deep",
    [PR_JSON_NUMBER_OUT_OF_RANGE] = "number_out_of_range",
    [PR_JSON_LIST_TOO_LONG] = "list_too_long",
    [PR_JSON_WRONG_TYPE] = "wrong_type",
};

static const char *const pr_json_type_names[] = {
    [PR_JSON_INT64] = "expected an int64",
    [PR_JSON_DOUBLE] = "expected a number",
    [PR_JSON_BOOL] = "expected a bool",
    [PR_JSON_STRING] = "expected a string",
    [PR_JSON_KEY] = "expected a string or an int64",
    [PR_JSON_ANY] = "expected a string, a number or a bool",
};

const char *pr_json_reason_name(int reason)
{
    if (reason < 0 || reason >= PR_JSON__REASONS)
        return "unknown";
    return pr_json_reason_names[reason];
}

/* A key's first 8 bytes, zero-padded (reads stay inside [key, end)). */
static inline uint64_t pr__key_word(const char *key, size_t len, const char *end)
{
    uint64_t w = 0;
    if (end - key >= 8) {
        memcpy(&w, key, 8);
        if (len < 8)
            w &= (1ULL << (8 * len)) - 1;
    } else {
        memcpy(&w, key, len < 8 ? len : 8);
    }
    return w;
}

/* ------------------------------------------------------------ compiling */

/* Temporary trie while compiling: children as linked lists. */
typedef struct tnode {
    const char *key;
    uint32_t key_len;
    int32_t path;
    uint32_t first, next; /* first child, next sibling (NO_NODE: none) */
    uint32_t name_path, name_len;
} tnode;

static int pr__trie_insert(tnode *t, uint32_t *n_t, const char *path, const char *shown,
                           uint32_t pi, char *errstr, size_t errstr_size)
{
    uint32_t cur = 0;
    const char *seg = path;
    for (;;) {
        const char *dot = strchr(seg, '.');
        size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
        if (len == 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "json path '%s': empty segment",
                             shown);
        if (t[cur].path >= 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "json path '%s': '%.*s' is a path too",
                             shown, (int)t[cur].name_len,
                             t[cur].key - (t[cur].name_len - t[cur].key_len));
        uint32_t c = t[cur].first, last = NO_NODE;
        while (c != NO_NODE && !(t[c].key_len == len && !memcmp(t[c].key, seg, len))) {
            last = c;
            c = t[c].next;
        }
        if (c == NO_NODE) {
            c = (*n_t)++;
            t[c] = (tnode){.key = seg,
                           .key_len = (uint32_t)len,
                           .path = -1,
                           .first = NO_NODE,
                           .next = NO_NODE,
                           .name_path = pi,
                           .name_len = (uint32_t)(seg + len - path)};
            if (last == NO_NODE)
                t[cur].first = c;
            else
                t[last].next = c;
        }
        cur = c;
        if (!dot)
            break;
        seg = dot + 1;
    }
    if (t[cur].path >= 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "json path '%s' given twice", shown);
    if (t[cur].first != NO_NODE)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "json path '%s' is a prefix of another path", shown);
    t[cur].path = (int32_t)pi;
    return 0;
}

/* Number the leaves in trie order so that every subtree's leaves form one
 * range (a repeated key resets exactly that range). */
static void pr__assign_slots(pr_json_extractor *x, uint32_t n, uint32_t *slot)
{
    jnode *nd = &x->nodes[n];
    nd->slot_lo = *slot;
    if (nd->path >= 0)
        x->slot_path[(*slot)++] = (uint32_t)nd->path;
    for (uint32_t i = 0; i < nd->n_children; i++)
        pr__assign_slots(x, nd->child0 + i, slot);
    nd->slot_hi = *slot;
    nd->all_list = true;
    nd->has_aligned = false;
    for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++) {
        pr_json_shape sh = x->paths[x->slot_path[k]].shape;
        if (sh == PR_JSON_SCALAR || sh == PR_JSON_VECTOR)
            nd->all_list = false;
        if (sh == PR_JSON_ALIGNED)
            nd->has_aligned = true;
    }
}

/* Flatten the temporary trie breadth-first: a node's children get
 * consecutive indices. */
static int pr__trie_flatten(pr_json_extractor *x, const tnode *t, uint32_t n_t)
{
    uint32_t *queue = malloc(n_t * sizeof(*queue));
    x->nodes = calloc(n_t, sizeof(*x->nodes));
    x->slot_path = calloc(x->n_paths, sizeof(*x->slot_path));
    if (!queue || !x->nodes || !x->slot_path) {
        free(queue);
        return PR_ENOMEM;
    }
    uint32_t head = 0, tail = 0;
    queue[tail++] = 0;
    while (head < tail) {
        uint32_t ti = queue[head], fi = head++;
        jnode *nd = &x->nodes[fi];
        *nd = (jnode){.key = t[ti].key,
                      .key_len = t[ti].key_len,
                      .path = t[ti].path,
                      .child0 = tail,
                      .name_path = t[ti].name_path,
                      .name_len = t[ti].name_len};
        if (nd->key) /* not the root */
            nd->k8 = pr__key_word(nd->key, nd->key_len, nd->key + nd->key_len);
        for (uint32_t c = t[ti].first; c != NO_NODE; c = t[c].next) {
            queue[tail++] = c;
            nd->n_children++;
        }
    }
    x->n_nodes = n_t;
    free(queue);
    uint32_t slot = 0;
    pr__assign_slots(x, 0, &slot);
    return 0;
}

/* A map's node: its children are its keys' and values' leaves only, and
 * its values come with its keys (which say where a repeated key's value
 * goes). */
static int pr__map_nodes(pr_json_extractor *x, char *errstr, size_t errstr_size)
{
    for (uint32_t i = 0; i < x->n_nodes; i++) {
        jnode *nd = &x->nodes[i];
        int32_t keys = -1, vals = -1;
        bool named = false;
        for (uint32_t k = 0; k < nd->n_children; k++) {
            const jnode *c = &x->nodes[nd->child0 + k];
            bool part = c->key_len == 1 && (c->key[0] == MAP_KEYS_SEG || c->key[0] == MAP_VALS_SEG);
            if (part && c->key[0] == MAP_KEYS_SEG)
                keys = c->path;
            else if (part)
                vals = c->path;
            named |= !part;
        }
        nd->is_map = keys >= 0 || vals >= 0;
        if (nd->is_map && named)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "json path '%s' is read as a map (its keys): no path may name a key "
                             "under it",
                             x->paths[keys >= 0 ? keys : vals].path);
        if (vals >= 0 && keys < 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "json path '%s': a map's values are read with its keys",
                             x->paths[vals].path);
    }
    return 0;
}

/* Checks one path's type, shape and part; its trie string into *tpath
 * (allocated for a map part). */
static int pr__path_ok(const pr_json_path *p, size_t i, char **tpath, char *errstr,
                       size_t errstr_size)
{
    *tpath = NULL;
    if (!p->path || p->type < PR_JSON_INT64 || p->type > PR_JSON_ANY || p->shape < PR_JSON_SCALAR ||
        p->shape > PR_JSON_ALIGNED || (p->shape == PR_JSON_ALIGNED && p->type != PR_JSON_ANY) ||
        p->part > PR_JSON_VALUES ||
        (p->part != PR_JSON_AT &&
         (p->type != PR_JSON_ANY || (p->shape != PR_JSON_LIST && p->shape != PR_JSON_ALIGNED))) ||
        (p->part == PR_JSON_VALUES && p->shape != PR_JSON_ALIGNED))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "json path %zu: %s", i,
                         p->path ? "bad type, shape or part" : "no path");
    if (p->part == PR_JSON_AT)
        return 0;
    size_t len = strlen(p->path);
    if (!(*tpath = malloc(len + 3)))
        return PR_ENOMEM;
    memcpy(*tpath, p->path, len);
    (*tpath)[len] = '.';
    (*tpath)[len + 1] = p->part == PR_JSON_KEYS ? MAP_KEYS_SEG : MAP_VALS_SEG;
    (*tpath)[len + 2] = '\0';
    return 0;
}

pr_json_extractor *pr_json_extractor_new(const pr_json_path *paths, size_t n, uint32_t max_depth,
                                         char *errstr, size_t errstr_size)
{
    if (n == 0 || n > 65535 || max_depth > PR_JSON_MAX_DEPTH_LIMIT) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "json: %s",
                  n == 0 || n > 65535 ? "need 1 to 65535 paths" : "max_depth over 1024");
        return NULL;
    }
    pr_json_extractor *x = calloc(1, sizeof(*x));
    size_t max_nodes = 1;
    for (size_t i = 0; i < n; i++)
        max_nodes += paths[i].path ? strlen(paths[i].path) / 2 + 2 : 1; /* + a map part's */
    tnode *t = malloc(max_nodes * sizeof(*t));
    if (!x || !t)
        goto out_nomem;
    x->max_depth = max_depth ? max_depth : PR_JSON_DEFAULT_MAX_DEPTH;
    x->n_paths = n;
    x->paths = calloc(n, sizeof(*x->paths));
    x->tpaths = calloc(n, sizeof(*x->tpaths));
    if (!x->paths || !x->tpaths)
        goto out_nomem;
    uint32_t n_t = 1;
    t[0] = (tnode){.path = -1, .first = NO_NODE, .next = NO_NODE};
    for (size_t i = 0; i < n; i++) {
        const pr_json_path *p = &paths[i];
        int rc = pr__path_ok(p, i, &x->tpaths[i], errstr, errstr_size);
        if (rc == PR_ENOMEM)
            goto out_nomem;
        if (rc)
            goto out_free;
        x->paths[i] = *p;
        if (!x->paths[i].max_list)
            x->paths[i].max_list = PR_JSON_DEFAULT_MAX_LIST;
        if (!(x->paths[i].path = strdup(p->path)))
            goto out_nomem;
        const char *tp = x->tpaths[i] ? x->tpaths[i] : x->paths[i].path;
        if (pr__trie_insert(t, &n_t, tp, x->paths[i].path, (uint32_t)i, errstr, errstr_size))
            goto out_free;
    }
    if (pr__trie_flatten(x, t, n_t))
        goto out_nomem;
    if (pr__map_nodes(x, errstr, errstr_size))
        goto out_free;
    free(t);
    return x;

out_nomem:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "json: out of memory");
out_free:
    free(t);
    pr_json_extractor_free(x);
    return NULL;
}

void pr_json_extractor_free(pr_json_extractor *x)
{
    if (!x)
        return;
    for (size_t i = 0; x->paths && i < x->n_paths; i++)
        free((char *)x->paths[i].path);
    for (size_t i = 0; x->tpaths && i < x->n_paths; i++)
        free(x->tpaths[i]);
    free(x->tpaths);
    free(x->paths);
    free(x->nodes);
    free(x->slot_path);
    free(x);
}

size_t pr_json_extractor_paths(const pr_json_extractor *x)
{
    return x->n_paths;
}

/* ------------------------------------------------------------ blocks */

static size_t pr__value_size(pr_json_type t)
{
    switch (t) {
    case PR_JSON_INT64:
        return sizeof(int64_t);
    case PR_JSON_DOUBLE:
        return sizeof(double);
    case PR_JSON_BOOL:
        return 1;
    case PR_JSON_ANY:
        return sizeof(pr_json_any);
    default:
        return sizeof(pr_json_str);
    }
}

static void **pr__value_array(pr_json_col *c, pr_json_type t)
{
    switch (t) {
    case PR_JSON_INT64:
        return (void **)&c->i64;
    case PR_JSON_DOUBLE:
        return (void **)&c->f64;
    case PR_JSON_BOOL:
        return (void **)&c->b;
    case PR_JSON_ANY:
        return (void **)&c->any;
    default:
        return (void **)&c->str;
    }
}

static int pr__col_grow(pr_json_col *c, pr_json_type t, uint32_t need)
{
    uint64_t cap = c->values_cap ? c->values_cap : 64;
    while (cap < need)
        cap *= 2;
    if (cap > UINT32_MAX)
        return PR_ENOMEM;
    void **arr = pr__value_array(c, t);
    void *p = realloc(*arr, (size_t)cap * pr__value_size(t));
    if (!p)
        return PR_ENOMEM;
    *arr = p;
    c->values_cap = (uint32_t)cap;
    return 0;
}

pr_json_block *pr_json_block_new(const pr_json_extractor *x, uint32_t cap)
{
    if (!x || cap == 0)
        return NULL;
    pr_json_block *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = cap;
    b->n_cols = (uint32_t)x->n_paths;
    b->cols = calloc(x->n_paths, sizeof(*b->cols));
    pr__json_scratch *s = b->scratch = calloc(1, sizeof(*s));
    if (!b->cols || !s)
        goto out_free;
    for (uint32_t i = 0; i < b->n_cols; i++) {
        pr_json_col *c = &b->cols[i];
        c->present = calloc(cap, 1);
        c->count = calloc(cap, sizeof(*c->count));
        if (!c->present || !c->count || pr__col_grow(c, x->paths[i].type, cap))
            goto out_free;
    }
    s->row_start = calloc(x->n_paths, sizeof(*s->row_start));
    s->present = calloc(x->n_paths, 1);
    s->count = calloc(x->n_paths, sizeof(*s->count));
    s->stamp = calloc(x->n_nodes, sizeof(*s->stamp));
    s->elem_start = calloc(x->n_paths, sizeof(*s->elem_start));
    s->x = x;
    if (!s->row_start || !s->present || !s->count || !s->stamp || !s->elem_start)
        goto out_free;
    return b;
out_free:
    pr_json_block_free(b);
    return NULL;
}

void pr_json_block_reset(pr_json_block *b)
{
    b->rows = 0;
    b->arena_len = 0;
    for (uint32_t i = 0; i < b->n_cols; i++)
        b->cols[i].n_values = 0;
}

void pr_json_block_free(pr_json_block *b)
{
    if (!b)
        return;
    for (uint32_t i = 0; b->cols && i < b->n_cols; i++) {
        pr_json_col *c = &b->cols[i];
        free(c->present);
        free(c->count);
        free(c->i64);
        free(c->f64);
        free(c->b);
        free(c->str);
        free(c->any);
    }
    free(b->cols);
    free(b->arena);
    pr__json_scratch *s = b->scratch;
    if (s) {
        free(s->row_start);
        free(s->present);
        free(s->count);
        free(s->stamp);
        free(s->elem_start);
        free(s->key_buf);
        free(s->num_buf);
        free(s->mh);
        free(s);
    }
    free(b);
}

/* ------------------------------------------------------------ parsing */

typedef struct jp {
    const uint8_t *p, *end, *start;
    const pr_json_extractor *x;
    pr_json_block *b;
    pr__json_scratch *s;
    /* the first problem */
    const uint8_t *err_at;
    const char *err_msg;
    int64_t err_node; /* node whose name prefixes the detail, -1 none */
    bool in_elem;     /* inside an element of a list of objects (pr__map_list) */
} jp;

static int pr__fail(jp *j, int reason, const uint8_t *at, int64_t node, const char *msg)
{
    j->err_at = at;
    j->err_msg = msg;
    j->err_node = node;
    return reason;
}

/* End of input where more was needed: truncated. */
static int pr__fail_end_or(jp *j, int reason, const char *msg)
{
    if (j->p >= j->end)
        return pr__fail(j, PR_JSON_TRUNCATED, j->p, -1, "document ends early");
    return pr__fail(j, reason, j->p, -1, msg);
}

static inline void pr__skip_ws(jp *j)
{
    const uint8_t *p = j->p, *end = j->end;
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    j->p = p;
}

/* Bytes that a string scan copies as they are: ASCII 0x20-0x7f except '"' and '\'. */
static inline bool pr__plain_byte(uint8_t c)
{
    return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

#define ONES  0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Non-zero when any of the 8 bytes is '"', '\', < 0x20 or >= 0x80 (the
 * has-zero-byte / has-less-than tricks are exact for "any byte"). */
static inline uint64_t pr__swar_special(uint64_t w)
{
    uint64_t q = w ^ (ONES * '"'), bs = w ^ (ONES * '\\');
    return (((q - ONES) & ~q) | ((bs - ONES) & ~bs) | ((w - ONES * 0x20) & ~w) | w) & HIGHS;
}

/* Length of the valid UTF-8 sequence at p (2-4), 0 when invalid (Unicode
 * table 3-7: no overlongs, no surrogates, nothing above U+10FFFF), -1 when
 * the input ends inside it. */
static int pr__utf8_seq(const uint8_t *p, const uint8_t *end)
{
    uint8_t c = p[0], lo = 0x80, hi = 0xbf;
    int n;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if (p + i >= end)
            return -1;
        if (p[i] < lo || p[i] > hi)
            return 0;
        lo = 0x80;
        hi = 0xbf;
    }
    return n;
}

static int pr__hex4(jp *j, const uint8_t *p, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        if (p + i >= j->end)
            return pr__fail(j, PR_JSON_TRUNCATED, p + i, -1, "document ends early");
        uint8_t c = p[i], d;
        if (c >= '0' && c <= '9')
            d = (uint8_t)(c - '0');
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (uint8_t)((c | 0x20) - 'a' + 10);
        else
            return pr__fail(j, PR_JSON_BAD_ESCAPE, p + i, -1, "\\u needs 4 hex digits");
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* One escape at *pp (a backslash); writes its UTF-8 to *dd when non-NULL. */
static int pr__unescape(jp *j, const uint8_t **pp, char **dd)
{
    static const char simple[256] = {['"'] = '"',  ['\\'] = '\\', ['/'] = '/',  ['b'] = '\b',
                                     ['f'] = '\f', ['n'] = '\n',  ['r'] = '\r', ['t'] = '\t'};
    const uint8_t *p = *pp;
    if (p + 1 >= j->end)
        return pr__fail(j, PR_JSON_TRUNCATED, p, -1, "document ends early");
    if (simple[p[1]]) {
        if (*dd)
            *(*dd)++ = simple[p[1]];
        *pp = p + 2;
        return 0;
    }
    if (p[1] != 'u')
        return pr__fail(j, PR_JSON_BAD_ESCAPE, p, -1, "unknown escape");
    uint32_t cp, lo;
    int r = pr__hex4(j, p + 2, &cp);
    if (r)
        return r;
    p += 6;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return pr__fail(j, PR_JSON_BAD_ESCAPE, p - 6, -1, "lone low surrogate escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (p + 2 > j->end)
            return pr__fail(j, PR_JSON_TRUNCATED, p, -1, "document ends early");
        if (p[0] != '\\' || p[1] != 'u')
            return pr__fail(j, PR_JSON_BAD_ESCAPE, p - 6, -1, "lone high surrogate escape");
        if ((r = pr__hex4(j, p + 2, &lo)))
            return r;
        if (lo < 0xdc00 || lo > 0xdfff)
            return pr__fail(j, PR_JSON_BAD_ESCAPE, p - 6, -1, "lone high surrogate escape");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        p += 6;
    }
    *pp = p;
    char *d = *dd;
    if (!d)
        return 0;
    if (cp < 0x80) {
        *d++ = (char)cp;
    } else if (cp < 0x800) {
        *d++ = (char)(0xc0 | cp >> 6);
        *d++ = (char)(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
        *d++ = (char)(0xe0 | cp >> 12);
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *d++ = (char)(0x80 | (cp & 0x3f));
    } else {
        *d++ = (char)(0xf0 | cp >> 18);
        *d++ = (char)(0x80 | ((cp >> 12) & 0x3f));
        *d++ = (char)(0x80 | ((cp >> 6) & 0x3f));
        *d++ = (char)(0x80 | (cp & 0x3f));
    }
    *dd = d;
    return 0;
}

/* The string whose opening quote is just before j->p: validated, and
 * unescaped into dst when dst is non-NULL (room for the raw length is the
 * caller's job). On return j->p is past the closing quote. Plain bytes go
 * eight at a time: each word is stored before it is checked (dst has room:
 * the arena holds the rest of the document), and the first special byte of
 * a word is found from its mask (the lowest flagged byte is always a real one). */
static inline __attribute__((always_inline)) int
pr__scan_string_inl(jp *j, char *dst, size_t *out_len, bool *had_escape, const bool copy)
{
    const uint8_t *p = j->p, *end = j->end;
    char *d = dst;
    for (;;) {
        while (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (copy)
                memcpy(d, &w, 8);
            uint64_t m = pr__swar_special(w);
            if (m) {
                unsigned k = (unsigned)__builtin_ctzll(m) >> 3;
                p += k;
                if (copy)
                    d += k;
                goto special;
            }
            p += 8;
            if (copy)
                d += 8;
        }
        while (p < end && pr__plain_byte(*p)) {
            if (copy)
                *d++ = (char)*p;
            p++;
        }
        if (p >= end)
            return pr__fail(j, PR_JSON_TRUNCATED, p, -1, "document ends inside a string");
    special:;
        uint8_t c = *p;
        if (c == '"')
            break;
        if (c == '\\') {
            if (had_escape)
                *had_escape = true;
            char *dd = copy ? d : NULL;
            int r = pr__unescape(j, &p, &dd);
            if (r)
                return r;
            if (copy)
                d = dd;
        } else if (c < 0x20) {
            return pr__fail(j, PR_JSON_NOT_JSON, p, -1, "control character in a string");
        } else {
            int n = pr__utf8_seq(p, end);
            if (n < 0)
                return pr__fail(j, PR_JSON_TRUNCATED, p, -1, "document ends inside a string");
            if (n == 0)
                return pr__fail(j, PR_JSON_BAD_UTF8, p, -1, "invalid UTF-8");
            if (copy) {
                memcpy(d, p, (size_t)n);
                d += n;
            }
            p += n;
        }
    }
    j->p = p + 1;
    if (out_len)
        *out_len = (size_t)(d - dst);
    return 0;
}

static int pr__scan_string_copy(jp *j, char *dst, size_t *out_len)
{
    return pr__scan_string_inl(j, dst, out_len, NULL, true);
}

static int pr__scan_string(jp *j, bool *had_escape)
{
    return pr__scan_string_inl(j, NULL, NULL, had_escape, false);
}

static int pr__literal(jp *j, const char *word, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (j->p + i >= j->end)
            return pr__fail(j, PR_JSON_TRUNCATED, j->p + i, -1, "document ends early");
        if (j->p[i] != (uint8_t)word[i])
            return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "bad literal");
    }
    j->p += n;
    return 0;
}

enum { NUM_INT, NUM_BIGINT, NUM_FLOAT };
typedef struct jnum {
    int kind;
    int64_t i;
    double d;
} jnum;

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static inline bool pr__is_digit(const uint8_t *p, const uint8_t *end)
{
    return p < end && *p >= '0' && *p <= '9';
}

/* The double of s[0, len) by strtod (correctly rounded), on a NUL-terminated copy. */
static int pr__number_strtod(jp *j, const uint8_t *s, size_t len, double *out)
{
    pr__json_scratch *sc = j->s;
    if (len + 1 > sc->num_cap) {
        char *nb = realloc(sc->num_buf, len + 64);
        if (!nb)
            return E_NOMEM;
        sc->num_buf = nb;
        sc->num_cap = len + 64;
    }
    memcpy(sc->num_buf, s, len);
    sc->num_buf[len] = 0;
    *out = strtod(sc->num_buf, NULL);
    if (isinf(*out))
        return pr__fail(j, PR_JSON_NUMBER_OUT_OF_RANGE, s, -1, "number beyond double range");
    return 0;
}

/* A JSON number at j->p (RFC 8259 grammar: no leading zeros, no '+', a digit
 * on both sides of '.'). With out == NULL only the syntax is checked. */
static int pr__parse_number(jp *j, jnum *out)
{
    const uint8_t *s = j->p, *p = s, *end = j->end;
    bool neg = *p == '-';
    p += neg;
    uint64_t m = 0;
    int nd = 0, frac = 0, n_int;
    if (!pr__is_digit(p, end))
        return j->p = p, pr__fail_end_or(j, PR_JSON_NOT_JSON, "bad number");
    if (*p == '0') {
        p++;
        if (pr__is_digit(p, end))
            return pr__fail(j, PR_JSON_NOT_JSON, s, -1, "leading zero in a number");
    } else {
        for (; pr__is_digit(p, end); p++, nd++)
            if (nd < 19)
                m = m * 10 + (uint64_t)(*p - '0');
    }
    n_int = nd;
    bool is_float = false;
    if (p < end && *p == '.') {
        is_float = true;
        if (!pr__is_digit(++p, end))
            return j->p = p, pr__fail_end_or(j, PR_JSON_NOT_JSON, "digit expected after '.'");
        for (; pr__is_digit(p, end); p++, nd++, frac++)
            if (nd < 19)
                m = m * 10 + (uint64_t)(*p - '0');
    }
    int64_t ex = 0;
    if (p < end && (*p | 0x20) == 'e') {
        is_float = true;
        p++;
        bool eneg = p < end && *p == '-';
        p += p < end && (*p == '-' || *p == '+');
        if (!pr__is_digit(p, end))
            return j->p = p, pr__fail_end_or(j, PR_JSON_NOT_JSON, "digit expected in exponent");
        for (; pr__is_digit(p, end); p++)
            if (ex < 100000)
                ex = ex * 10 + (*p - '0');
        ex = eneg ? -ex : ex;
    }
    j->p = p;
    if (!out)
        return 0;
    if (!is_float && n_int <= 19 &&
        (m <= (uint64_t)INT64_MAX || (neg && m == (uint64_t)INT64_MAX + 1))) {
        out->kind = NUM_INT;
        out->i = neg ? (int64_t)(0 - m) : (int64_t)m;
        out->d = (double)out->i;
        return 0;
    }
    out->kind = is_float ? NUM_FLOAT : NUM_BIGINT;
    int64_t e10 = ex - frac;
    if (nd <= 19 && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        double d = (double)m; /* exact: Clinger's fast path */
        d = e10 < 0 ? d / pow10_exact[-e10] : d * pow10_exact[e10];
        out->d = neg ? -d : d;
        return 0;
    }
    return pr__number_strtod(j, s, (size_t)(p - s), &out->d);
}

/* Count of leading ASCII digits in the 8 bytes of w (8 when all are). A byte
 * is a digit when its high nibble is 3 and adding 6 keeps it 3; a carry out of
 * a non-digit byte can only disturb bytes after it. */
static inline unsigned pr__swar_digits(uint64_t w)
{
    uint64_t bad = ((w & (ONES * 0xf0)) ^ (ONES * 0x30)) |
                   (((w + ONES * 0x06) & (ONES * 0xf0)) ^ (ONES * 0x30));
    return bad ? (unsigned)__builtin_ctzll(bad) >> 3 : 8;
}

/* The value of 8 digit bytes (first digit in the lowest byte), pairwise:
 * 8 x 1 digit -> 4 x 2 -> 2 x 4 -> 1 x 8. */
static inline uint64_t pr__swar_value8(uint64_t w)
{
    w &= ONES * 0x0f;
    w = (w * 10 + (w >> 8)) & 0x00ff00ff00ff00ffULL;
    w = (w * 100 + (w >> 16)) & 0x0000ffff0000ffffULL;
    return (w * 10000 + (w >> 32)) & 0xffffffffULL;
}

/* The common case of a number: an integer of 1 to 7 digits, read as one
 * word, with at least 10 bytes of input left. Returns the bytes it took, or
 * 0 for anything else (every error included: the full parser decides). */
static inline size_t pr__fast_int(const uint8_t *p, const uint8_t *end, int64_t *v)
{
    if (end - p < 10)
        return 0;
    bool neg = *p == '-';
    const uint8_t *q = p + neg;
    uint64_t w;
    memcpy(&w, q, 8);
    unsigned n = pr__swar_digits(w);
    uint8_t c = q[n];
    if (n == 0 || n == 8 || (q[0] == '0' && n > 1) || c == '.' || (c | 0x20) == 'e')
        return 0;
    uint64_t m = pr__swar_value8(w << (8 * (8 - n)));
    *v = neg ? -(int64_t)m : (int64_t)m;
    return neg + n;
}

static inline int pr__parse_number_fast(jp *j, jnum *out)
{
    size_t n = pr__fast_int(j->p, j->end, &out->i);
    if (!n)
        return pr__parse_number(j, out);
    out->kind = NUM_INT;
    out->d = (double)out->i;
    j->p += n;
    return 0;
}

static int pr__skip_value(jp *j, uint32_t depth);

/* Skip the rest of a container opened at depth `depth` (j->p after '{' or
 * '['), validating everything. */
static int pr__skip_container(jp *j, uint32_t depth, bool object)
{
    const uint8_t close = object ? '}' : ']';
    pr__skip_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 0;
    }
    for (;;) {
        int r;
        pr__skip_ws(j);
        if (object) {
            if (j->p >= j->end || *j->p != '"')
                return pr__fail_end_or(j, PR_JSON_NOT_JSON, "key expected");
            j->p++;
            if ((r = pr__scan_string(j, NULL)))
                return r;
            pr__skip_ws(j);
            if (j->p >= j->end || *j->p != ':')
                return pr__fail_end_or(j, PR_JSON_NOT_JSON, "':' expected");
            j->p++;
            pr__skip_ws(j);
        }
        if ((r = pr__skip_value(j, depth + 1)))
            return r;
        pr__skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 0;
        }
        return pr__fail_end_or(j, PR_JSON_NOT_JSON,
                               object ? "',' or '}' expected" : "',' or ']' expected");
    }
}

/* Skip one value at j->p; `depth` is the depth it has if it is a container. */
static int pr__skip_value(jp *j, uint32_t depth)
{
    if (j->p >= j->end)
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "value expected");
    switch (*j->p) {
    case '"':
        j->p++;
        return pr__scan_string(j, NULL);
    case '{':
    case '[':
        if (depth > j->x->max_depth)
            return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
        return pr__skip_container(j, depth, *j->p++ == '{');
    case 't':
        return pr__literal(j, "true", 4);
    case 'f':
        return pr__literal(j, "false", 5);
    case 'n':
        return pr__literal(j, "null", 4);
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
            return pr__parse_number(j, NULL);
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "value expected");
    }
}

/* ------------------------------------------------------------ extraction */

enum { VK_BAD, VK_STRING, VK_NUMBER, VK_BOOL, VK_NULL, VK_ARRAY, VK_OBJECT };

static inline int pr__value_kind(uint8_t c)
{
    switch (c) {
    case '"':
        return VK_STRING;
    case 't':
    case 'f':
        return VK_BOOL;
    case 'n':
        return VK_NULL;
    case '[':
        return VK_ARRAY;
    case '{':
        return VK_OBJECT;
    default:
        return c == '-' || (c >= '0' && c <= '9') ? VK_NUMBER : VK_BAD;
    }
}

static inline int pr__reserve_value(pr_json_col *c, pr_json_type t)
{
    if (c->n_values < c->values_cap)
        return 0;
    return pr__col_grow(c, t, c->n_values + 1) ? E_NOMEM : 0;
}

/* Decimal text of v into d (at most 20 bytes); returns its length. */
static uint32_t pr__format_i64(char *d, int64_t v)
{
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    uint32_t len = 0;
    if (v < 0)
        d[len++] = '-';
    while (n)
        d[len++] = tmp[--n];
    return len;
}

/* A PR_JSON_ANY scalar of kind vk at j->p (room reserved): strings and
 * bools as such, integers in int64 range as INT64, other numbers as DOUBLE. */
static int pr__take_any(jp *j, pr_json_col *c, int vk)
{
    pr_json_block *b = j->b;
    pr_json_any *a = &c->any[c->n_values];
    int r;
    if (vk == VK_STRING) {
        size_t len;
        j->p++;
        if ((r = pr__scan_string_copy(j, b->arena + b->arena_len, &len)))
            return r;
        *a = (pr_json_any){.type = PR_JSON_STRING, .s = {(uint32_t)b->arena_len, (uint32_t)len}};
        b->arena_len += len;
    } else if (vk == VK_BOOL) {
        bool t = *j->p == 't';
        if ((r = t ? pr__literal(j, "true", 4) : pr__literal(j, "false", 5)))
            return r;
        *a = (pr_json_any){.type = PR_JSON_BOOL, .i = t};
    } else {
        jnum num;
        if ((r = pr__parse_number_fast(j, &num)))
            return r;
        if (num.kind == NUM_INT)
            *a = (pr_json_any){.type = PR_JSON_INT64, .i = num.i};
        else
            *a = (pr_json_any){
                .type = PR_JSON_DOUBLE, .big_int = num.kind == NUM_BIGINT, .d = num.d};
    }
    c->n_values++;
    return 0;
}

/* One scalar of path `pi`'s type at j->p, appended to its column. */
static int pr__take_scalar(jp *j, uint32_t pi, uint32_t node)
{
    const pr_json_path *pa = &j->x->paths[pi];
    pr_json_col *c = &j->b->cols[pi];
    int vk = pr__value_kind(*j->p), r;
    bool any = pa->type == PR_JSON_ANY;
    bool want_str = pa->type == PR_JSON_STRING || pa->type == PR_JSON_KEY || any;
    bool want_num =
        pa->type == PR_JSON_INT64 || pa->type == PR_JSON_DOUBLE || pa->type == PR_JSON_KEY || any;
    if (vk == VK_BAD)
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "value expected");
    if ((vk == VK_STRING && !want_str) || (vk == VK_NUMBER && !want_num) ||
        (vk == VK_BOOL && pa->type != PR_JSON_BOOL && !any) || vk == VK_NULL || vk >= VK_ARRAY)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, pr_json_type_names[pa->type]);
    if ((r = pr__reserve_value(c, pa->type)))
        return r;
    if (any)
        return pr__take_any(j, c, vk);
    pr_json_block *b = j->b;
    if (vk == VK_STRING) {
        size_t len;
        j->p++;
        if ((r = pr__scan_string_copy(j, b->arena + b->arena_len, &len)))
            return r;
        c->str[c->n_values++] = (pr_json_str){(uint32_t)b->arena_len, (uint32_t)len};
        b->arena_len += len;
        return 0;
    }
    if (vk == VK_BOOL) {
        bool t = *j->p == 't';
        if ((r = t ? pr__literal(j, "true", 4) : pr__literal(j, "false", 5)))
            return r;
        c->b[c->n_values++] = t;
        return 0;
    }
    const uint8_t *at = j->p;
    jnum num;
    if ((r = pr__parse_number_fast(j, &num)))
        return r;
    if (pa->type == PR_JSON_DOUBLE) {
        c->f64[c->n_values++] = num.d;
        return 0;
    }
    if (num.kind == NUM_FLOAT)
        return pr__fail(j, PR_JSON_WRONG_TYPE, at, node, pr_json_type_names[pa->type]);
    if (num.kind == NUM_BIGINT)
        return pr__fail(j, PR_JSON_NUMBER_OUT_OF_RANGE, at, node, "integer beyond int64");
    if (pa->type == PR_JSON_INT64) {
        c->i64[c->n_values++] = num.i;
        return 0;
    }
    /* A key: the integer's decimal text (never longer than its JSON form,
     * so it fits the arena reserved for the document). */
    uint32_t len = pr__format_i64(b->arena + b->arena_len, num.i);
    c->str[c->n_values++] = (pr_json_str){(uint32_t)b->arena_len, len};
    b->arena_len += len;
    return 0;
}

/* The value of leaf `node` (path pi) at j->p: null, a scalar or a list. */
static int pr__take_leaf(jp *j, uint32_t node, uint32_t pi, uint32_t depth)
{
    const pr_json_path *pa = &j->x->paths[pi];
    pr__json_scratch *s = j->s;
    int vk = pr__value_kind(*j->p), r;
    if (vk == VK_NULL) {
        if ((r = pr__literal(j, "null", 4)))
            return r;
        s->present[pi] = PR_JSON_NULL;
        return 0;
    }
    if (vk == VK_OBJECT)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "an object is not a value");
    if (vk != VK_ARRAY) {
        if (vk != VK_BAD && (pa->shape == PR_JSON_LIST || pa->shape == PR_JSON_VECTOR ||
                             pa->shape == PR_JSON_ALIGNED))
            return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "a list expected");
        if ((r = pr__take_scalar(j, pi, node)))
            return r;
        s->present[pi] = PR_JSON_PRESENT;
        s->count[pi] = 1;
        return 0;
    }
    if (pa->shape == PR_JSON_SCALAR)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "a scalar expected, not a list");
    if (depth > j->x->max_depth)
        return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
    uint32_t n = 0;
    j->p++;
    pr__skip_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
    } else {
        for (;;) {
            pr__skip_ws(j);
            if (j->p >= j->end)
                return pr__fail_end_or(j, PR_JSON_NOT_JSON, "value expected");
            if (++n > pa->max_list)
                return pr__fail(j, PR_JSON_LIST_TOO_LONG, j->p, node, "list too long");
            pr_json_col *c = &j->b->cols[pi];
            int64_t v;
            size_t len;
            if (pa->type == PR_JSON_INT64 && c->n_values < c->values_cap &&
                (len = pr__fast_int(j->p, j->end, &v))) { /* int lists (histories) */
                c->i64[c->n_values++] = v;
                j->p += len;
            } else if (pa->type == PR_JSON_ANY && c->n_values < c->values_cap &&
                       (len = pr__fast_int(j->p, j->end, &v))) {
                c->any[c->n_values++] = (pr_json_any){.type = PR_JSON_INT64, .i = v};
                j->p += len;
            } else if ((r = pr__take_scalar(j, pi, node))) {
                return r;
            }
            pr__skip_ws(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == ']') {
                j->p++;
                break;
            }
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "',' or ']' expected");
        }
    }
    s->present[pi] = PR_JSON_PRESENT;
    s->count[pi] = n;
    return 0;
}

/* A repeated key: drop what its earlier occurrence gave (last one wins).
 * Inside an element of a list of objects only that element's values go:
 * the list stays present with the elements before. */
static void pr__reset_subtree(jp *j, const jnode *nd)
{
    pr__json_scratch *s = j->s;
    for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++) {
        uint32_t pi = j->x->slot_path[k];
        if (j->in_elem) {
            j->b->cols[pi].n_values = s->elem_start[pi];
            s->count[pi] = s->elem_start[pi] - s->row_start[pi];
            continue;
        }
        j->b->cols[pi].n_values = s->row_start[pi];
        s->present[pi] = PR_JSON_ABSENT;
        s->count[pi] = 0;
    }
}

/* Leaf `node` (path pi) inside an element of a list of objects: its value
 * is the next element of the path's list. null contributes nothing (a
 * missing element is dropped, as an element without the key); a list here
 * would be a second list level: refused. */
static __attribute__((noinline)) int pr__take_mapped(jp *j, uint32_t node, uint32_t pi)
{
    const pr_json_path *pa = &j->x->paths[pi];
    int vk = pr__value_kind(*j->p), r;
    if (vk == VK_NULL)
        return pr__literal(j, "null", 4);
    if (vk == VK_ARRAY)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node,
                        "a list inside a list of objects (one list level per path)");
    if (vk == VK_OBJECT)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "an object is not a value");
    if (j->s->count[pi] >= pa->max_list)
        return pr__fail(j, PR_JSON_LIST_TOO_LONG, j->p, node, "list too long");
    if ((r = pr__take_scalar(j, pi, node)))
        return r;
    j->s->count[pi]++;
    return 0;
}

static int pr__walk_object(jp *j, uint32_t node, uint32_t depth);

/* After one element of a list of objects under `nd`: every PR_JSON_ALIGNED
 * leaf below that the element gave no value (no field, null there, or a
 * null element) gets a hole, so that its positions stay the elements'. */
static __attribute__((noinline)) int pr__fill_holes(jp *j, const jnode *nd)
{
    pr__json_scratch *s = j->s;
    for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++) {
        uint32_t pi = j->x->slot_path[k];
        pr_json_col *c = &j->b->cols[pi];
        if (j->x->paths[pi].shape != PR_JSON_ALIGNED || c->n_values != s->elem_start[pi])
            continue;
        if (s->count[pi] >= j->x->paths[pi].max_list)
            return pr__fail(j, PR_JSON_LIST_TOO_LONG, j->p, -1, "list too long");
        if (pr__reserve_value(c, PR_JSON_ANY))
            return E_NOMEM;
        c->any[c->n_values++] = (pr_json_any){.type = PR_JSON_HOLE};
        s->count[pi]++;
    }
    return 0;
}

/* An array at j->p under inner node `node`: a list of objects, each walked
 * under `node`, so that every leaf below reads as a list of the values its
 * path finds in the elements, in order (leaves take list shapes only; one
 * list level per path). Kept out of line (as pr__take_mapped) so that
 * pr__walk_object, the hot loop of every event, stays as compact as it was.
 * Each element gets its own gen so a key repeated
 * inside one element resets that element only; the row's gen comes back
 * after the list (outer keys keep their duplicate check). */
static __attribute__((noinline)) int pr__map_list(jp *j, uint32_t node, uint32_t depth)
{
    const jnode *nd = &j->x->nodes[node];
    pr__json_scratch *s = j->s;
    if (j->in_elem)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node,
                        "a list inside a list of objects (one list level per path)");
    if (!nd->all_list)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node,
                        "a list of objects, under a single-valued path (or a dense vector's)");
    if (depth > j->x->max_depth)
        return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
    for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++)
        s->present[j->x->slot_path[k]] = PR_JSON_PRESENT;
    const uint32_t row_gen = s->gen;
    int r = 0;
    j->p++;
    pr__skip_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return 0;
    }
    for (;;) {
        pr__skip_ws(j);
        if (j->p >= j->end)
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "value expected");
        int vk = pr__value_kind(*j->p);
        if (nd->has_aligned)
            for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++) {
                uint32_t pi = j->x->slot_path[k];
                s->elem_start[pi] = j->b->cols[pi].n_values;
            }
        if (vk == VK_NULL) {
            r = pr__literal(j, "null", 4);
        } else if (vk == VK_OBJECT) {
            if (depth + 1 > j->x->max_depth)
                return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
            s->gen = ++s->gen_hi;
            for (uint32_t k = nd->slot_lo; k < nd->slot_hi; k++) {
                uint32_t pi = j->x->slot_path[k];
                s->elem_start[pi] = j->b->cols[pi].n_values;
            }
            j->in_elem = true;
            r = pr__walk_object(j, node, depth + 1);
            j->in_elem = false;
            s->gen = row_gen;
        } else if (vk == VK_BAD) {
            return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "value expected");
        } else {
            return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "a list of objects expected");
        }
        if (!r && nd->has_aligned)
            r = pr__fill_holes(j, nd);
        if (r)
            return r;
        pr__skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return 0;
        }
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "',' or ']' expected");
    }
}

/* Children are compared on (length, first 8 bytes) first: one compare each
 * for the short keys events are made of. */
static uint32_t pr__find_child(const pr_json_extractor *x, uint32_t node, const char *key,
                               size_t len, const char *end)
{
    const jnode *nd = &x->nodes[node];
    if (!nd->n_children)
        return NO_NODE;
    uint64_t w = pr__key_word(key, len, end);
    for (uint32_t i = 0; i < nd->n_children; i++) {
        const jnode *c = &x->nodes[nd->child0 + i];
        if (c->k8 == w && c->key_len == len && (len <= 8 || !memcmp(c->key + 8, key + 8, len - 8)))
            return nd->child0 + i;
    }
    return NO_NODE;
}

static inline __attribute__((always_inline)) int pr__read_key(jp *j, const char **key, size_t *len);

/* Up to this many entries a map's repeated key is looked for one by one;
 * past it in a hash table (a map of 1000 item counts stays linear). */
#define MAP_LINEAR 16

static uint32_t pr__key_hash(const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)key[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

static bool pr__key_is(const jp *j, const pr_json_any *a, const char *key, size_t len)
{
    return a->s.len == len && !memcmp(j->b->arena + a->s.off, key, len);
}

/* The key (key, len) in the hash table of the map whose entries are keys
 * path kpi's values [lo, lo + n): its index, or -1; the table catches up
 * with the entries first (built whole for a new map). */
static int64_t pr__map_dup_hashed(jp *j, uint32_t kpi, uint32_t lo, uint32_t n, const char *key,
                                  size_t len)
{
    pr__json_scratch *s = j->s;
    const pr_json_col *c = &j->b->cols[kpi];
    bool same = s->mh_col == kpi && s->mh_n <= n; /* the table holds this map's first mh_n */
    uint32_t cap = same && s->mh_size ? s->mh_size : 64;
    while (cap < 2 * (n + 1))
        cap *= 2;
    if (s->mh_cap < cap) {
        uint32_t *t = realloc(s->mh, cap * sizeof(*t));
        if (!t)
            return -2;
        s->mh = t;
        s->mh_cap = cap;
        same = false;
    }
    if (!same || cap != s->mh_size) { /* a new map, or grown: built again */
        memset(s->mh, 0, cap * sizeof(*s->mh));
        s->mh_size = cap;
        s->mh_col = kpi;
        s->mh_n = 0;
    }
    uint32_t mask = s->mh_size - 1;
    for (; s->mh_n < n; s->mh_n++) {
        const pr_json_any *a = &c->any[lo + s->mh_n];
        uint32_t k = pr__key_hash(j->b->arena + a->s.off, a->s.len) & mask;
        while (s->mh[k])
            k = (k + 1) & mask;
        s->mh[k] = s->mh_n + 1;
    }
    for (uint32_t k = pr__key_hash(key, len) & mask; s->mh[k]; k = (k + 1) & mask)
        if (pr__key_is(j, &c->any[lo + s->mh[k] - 1], key, len))
            return (int64_t)(lo + s->mh[k] - 1);
    return -1;
}

/* The key just read (key, len) among the map's entries so far (keys path
 * kpi's values since the row began): its index, -1 for none, -2 out of
 * memory. */
static int64_t pr__map_dup(jp *j, uint32_t kpi, const char *key, size_t len)
{
    const pr_json_col *c = &j->b->cols[kpi];
    uint32_t lo = j->s->row_start[kpi], n = c->n_values - lo;
    if (n > MAP_LINEAR)
        return pr__map_dup_hashed(j, kpi, lo, n, key, len);
    for (uint32_t e = lo; e < c->n_values; e++)
        if (pr__key_is(j, &c->any[e], key, len))
            return (int64_t)e;
    return -1;
}

/* A map's value for entry `dup` (-1: a new entry, appended) of values path
 * vpi: a scalar, or a hole for null. */
static int pr__map_value(jp *j, uint32_t node, uint32_t vpi, int64_t dup)
{
    pr_json_col *c = &j->b->cols[vpi];
    int vk = pr__value_kind(*j->p), r;
    if (vk >= VK_ARRAY)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node,
                        "a list or object as a map's value (read as a weight or an id: a scalar)");
    if (pr__reserve_value(c, PR_JSON_ANY))
        return E_NOMEM;
    if (vk == VK_NULL) {
        if ((r = pr__literal(j, "null", 4)))
            return r;
        c->any[c->n_values++] = (pr_json_any){.type = PR_JSON_HOLE};
    } else if ((r = pr__take_scalar(j, vpi, node))) {
        return r;
    }
    if (dup >= 0)
        c->any[dup] = c->any[--c->n_values];
    return 0;
}

/* One member of a map (j->p at its key's quote): its key to keys path kpi,
 * its value to values path vpi (or skipped); a repeated key keeps its
 * place and takes the new value. */
static int pr__map_entry(jp *j, uint32_t node, int32_t kpi, int32_t vpi, uint32_t depth)
{
    const char *key;
    size_t klen;
    int r;
    if ((r = pr__read_key(j, &key, &klen)))
        return r;
    pr__skip_ws(j);
    if (j->p >= j->end || *j->p != ':')
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "':' expected");
    j->p++;
    pr__skip_ws(j);
    if (j->p >= j->end)
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "value expected");
    int64_t dup = pr__map_dup(j, (uint32_t)kpi, key, klen);
    if (dup == -2)
        return E_NOMEM;
    if (dup < 0) {
        pr_json_col *kc = &j->b->cols[kpi];
        pr_json_block *b = j->b;
        if (j->s->count[kpi] >= j->x->paths[kpi].max_list)
            return pr__fail(j, PR_JSON_LIST_TOO_LONG, j->p, node, "map with too many keys");
        if (pr__reserve_value(kc, PR_JSON_ANY))
            return E_NOMEM;
        memcpy(b->arena + b->arena_len, key, klen); /* room: the document's length */
        kc->any[kc->n_values++] =
            (pr_json_any){.type = PR_JSON_STRING, .s = {(uint32_t)b->arena_len, (uint32_t)klen}};
        b->arena_len += klen;
        j->s->count[kpi]++;
        if (vpi >= 0)
            j->s->count[vpi]++;
    }
    if (vpi < 0)
        return pr__skip_value(j, depth + 1);
    return pr__map_value(
        j, node, (uint32_t)vpi,
        dup >= 0 ? dup - (int64_t)j->s->row_start[kpi] + (int64_t)j->s->row_start[vpi] : -1);
}

/* The value of a map's node `node` at j->p: an object, whose entries are
 * read in order (pr__map_entry); null reads as absent. Kept out of line
 * (as pr__map_list): the hot loop stays as it was. */
static __attribute__((noinline)) int pr__take_map(jp *j, uint32_t node, uint32_t depth)
{
    const jnode *nd = &j->x->nodes[node];
    int vk = pr__value_kind(*j->p);
    if (vk == VK_NULL)
        return pr__literal(j, "null", 4);
    if (vk == VK_BAD)
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "value expected");
    if (vk != VK_OBJECT || j->in_elem)
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node,
                        j->in_elem ? "a map inside a list of objects (one list level per path)"
                                   : "a map (an object) expected");
    if (depth > j->x->max_depth)
        return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
    int32_t kpi = -1, vpi = -1; /* its children: the keys' leaf and the values' */
    for (uint32_t k = 0; k < nd->n_children; k++) {
        const jnode *c = &j->x->nodes[nd->child0 + k];
        *(c->key[0] == MAP_KEYS_SEG ? &kpi : &vpi) = c->path;
    }
    j->s->mh_col = UINT32_MAX; /* a new map: its own table, if it grows big */
    j->s->present[kpi] = PR_JSON_PRESENT;
    if (vpi >= 0)
        j->s->present[vpi] = PR_JSON_PRESENT;
    j->p++;
    pr__skip_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        int r;
        pr__skip_ws(j);
        if (j->p >= j->end || *j->p != '"')
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "key expected");
        if ((r = pr__map_entry(j, node, kpi, vpi, depth)))
            return r;
        pr__skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 0;
        }
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "',' or '}' expected");
    }
}

/* The value of trie node `node` at j->p (depth: its depth as a container). */
static int pr__take_node(jp *j, uint32_t node, uint32_t depth)
{
    const jnode *nd = &j->x->nodes[node];
    if (j->s->stamp[node] == j->s->gen)
        pr__reset_subtree(j, nd);
    j->s->stamp[node] = j->s->gen;
    if (nd->path >= 0)
        return j->in_elem ? pr__take_mapped(j, node, (uint32_t)nd->path)
                          : pr__take_leaf(j, node, (uint32_t)nd->path, depth);
    if (nd->is_map)
        return pr__take_map(j, node, depth);
    switch (pr__value_kind(*j->p)) {
    case VK_OBJECT:
        if (depth > j->x->max_depth)
            return pr__fail(j, PR_JSON_TOO_DEEP, j->p, -1, "nesting too deep");
        return pr__walk_object(j, node, depth);
    case VK_ARRAY:
        return pr__map_list(j, node, depth);
    case VK_NULL:
        return pr__literal(j, "null", 4);
    case VK_BAD:
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "value expected");
    default:
        return pr__fail(j, PR_JSON_WRONG_TYPE, j->p, node, "an object expected");
    }
}

/* Read one key (j->p at its opening quote); *key is unescaped when needed. */
static inline __attribute__((always_inline)) int pr__read_key(jp *j, const char **key, size_t *len)
{
    const uint8_t *ks = ++j->p;
    bool esc = false;
    int r = pr__scan_string(j, &esc);
    if (r)
        return r;
    *key = (const char *)ks;
    *len = (size_t)(j->p - 1 - ks);
    if (!esc)
        return 0;
    pr__json_scratch *s = j->s;
    if (*len + 8 > s->key_cap) {
        char *kb = realloc(s->key_buf, *len + 64);
        if (!kb)
            return E_NOMEM;
        s->key_buf = kb;
        s->key_cap = *len + 64;
    }
    j->p = ks;
    r = pr__scan_string_copy(j, s->key_buf, len);
    *key = s->key_buf;
    return r;
}

/* An object at j->p ('{') under trie node `node`, at depth `depth`. */
static int pr__walk_object(jp *j, uint32_t node, uint32_t depth)
{
    j->p++;
    pr__skip_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return 0;
    }
    for (;;) {
        const char *key;
        size_t klen;
        int r;
        pr__skip_ws(j);
        if (j->p >= j->end || *j->p != '"')
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "key expected");
        if ((r = pr__read_key(j, &key, &klen)))
            return r;
        uint32_t child = pr__find_child(j->x, node, key, klen,
                                        key == (const char *)j->p - klen - 1 ? (const char *)j->end
                                                                             : key + klen);
        pr__skip_ws(j);
        if (j->p >= j->end || *j->p != ':')
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "':' expected");
        j->p++;
        pr__skip_ws(j);
        if (j->p >= j->end)
            return pr__fail_end_or(j, PR_JSON_NOT_JSON, "value expected");
        r = child == NO_NODE ? pr__skip_value(j, depth + 1) : pr__take_node(j, child, depth + 1);
        if (r)
            return r;
        pr__skip_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return 0;
        }
        return pr__fail_end_or(j, PR_JSON_NOT_JSON, "',' or '}' expected");
    }
}

static int pr__parse_document(jp *j)
{
    pr__skip_ws(j);
    if (j->p >= j->end)
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "empty document");
    int vk = pr__value_kind(*j->p);
    if (vk == VK_BAD)
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "not JSON");
    if (vk != VK_OBJECT) {
        /* not_object only for a JSON value ([1, 2], "x", 7, null): text that
         * merely starts like one ("not json", "nul") is not JSON at all. */
        const uint8_t *at = j->p;
        int r = pr__skip_value(j, 0);
        if (r)
            return r == PR_JSON_TRUNCATED ? pr__fail(j, PR_JSON_NOT_JSON, at, -1, "not JSON") : r;
        pr__skip_ws(j);
        if (j->p != j->end)
            return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "not JSON");
        return pr__fail(j, PR_JSON_NOT_OBJECT, at, -1, "the document is not an object");
    }
    j->s->stamp[0] = j->s->gen;
    int r = pr__walk_object(j, 0, 1);
    if (r)
        return r;
    pr__skip_ws(j);
    if (j->p != j->end)
        return pr__fail(j, PR_JSON_NOT_JSON, j->p, -1, "bytes after the object");
    return 0;
}

static void pr__fill_reject(const jp *j, int reason, pr_json_reject *rej)
{
    rej->reason = reason;
    rej->offset = (size_t)(j->err_at - j->start);
    if (j->err_node >= 0) {
        const jnode *nd = &j->x->nodes[j->err_node];
        snprintf(rej->detail, sizeof(rej->detail), "%.*s: %s at byte %zu", (int)nd->name_len,
                 j->x->paths[nd->name_path].path, j->err_msg, rej->offset);
    } else {
        snprintf(rej->detail, sizeof(rej->detail), "%s at byte %zu", j->err_msg, rej->offset);
    }
}

/* Room for the whole document's strings, unescaped, after arena_len. */
static int pr__reserve_arena(pr_json_block *b, size_t len)
{
    if (len > UINT32_MAX - b->arena_len)
        return b->rows ? PR_EFULL : PR_ENOMEM;
    size_t need = b->arena_len + len;
    if (need <= b->arena_cap)
        return 0;
    size_t cap = b->arena_cap ? b->arena_cap : 4096;
    while (cap < need)
        cap *= 2;
    char *a = realloc(b->arena, cap);
    if (!a)
        return PR_ENOMEM;
    b->arena = a;
    b->arena_cap = cap;
    return 0;
}

int pr_json_extract(const pr_json_extractor *x, pr_json_block *b, const char *doc, size_t len,
                    pr_json_reject *rej)
{
    if (b->rows >= b->cap)
        return PR_EFULL;
    int r = pr__reserve_arena(b, len);
    if (r)
        return r;
    pr__json_scratch *s = b->scratch;
    /* a row uses one gen, and one per element of a list of objects (at
     * most len / 2 of them): restart the stamps before they could wrap */
    if (s->gen_hi >= UINT32_MAX - 1 - len / 2) {
        if (len / 2 >= UINT32_MAX - 2)
            return PR_ENOMEM;
        memset(s->stamp, 0, x->n_nodes * sizeof(*s->stamp));
        s->gen_hi = 0;
    }
    s->gen = ++s->gen_hi;
    for (size_t i = 0; i < x->n_paths; i++) {
        s->row_start[i] = b->cols[i].n_values;
        s->present[i] = PR_JSON_ABSENT;
        s->count[i] = 0;
    }
    const size_t arena0 = b->arena_len;
    jp j = {.p = (const uint8_t *)doc,
            .end = (const uint8_t *)doc + len,
            .start = (const uint8_t *)doc,
            .x = x,
            .b = b,
            .s = s};
    r = pr__parse_document(&j);
    if (r) {
        for (size_t i = 0; i < x->n_paths; i++)
            b->cols[i].n_values = s->row_start[i];
        b->arena_len = arena0;
        if (r == E_NOMEM)
            return PR_ENOMEM;
        if (rej)
            pr__fill_reject(&j, r, rej);
        return r;
    }
    for (size_t i = 0; i < x->n_paths; i++) {
        b->cols[i].present[b->rows] = s->present[i];
        b->cols[i].count[b->rows] = s->count[i];
    }
    b->rows++;
    return 0;
}

/* ------------------------------------------------------------ row writer
 * Another format's reader fills one row value by value. The type rules are
 * the extractor's (pr__take_scalar): a column of type ANY keeps what it got,
 * typed columns accept what JSON would give them. A second value of a row
 * makes the path a list: refused on a scalar-only column, and past
 * max_list. */

int pr_json_row_begin(pr_json_block *b)
{
    pr__json_scratch *s = b->scratch;
    if (b->rows >= b->cap)
        return PR_EFULL;
    for (uint32_t i = 0; i < b->n_cols; i++) {
        s->row_start[i] = b->cols[i].n_values;
        s->present[i] = PR_JSON_ABSENT;
        s->count[i] = 0;
    }
    s->row_arena = b->arena_len;
    s->row_open = true;
    return 0;
}

/* Room for one more value of column `col`: wrong_type when the column
 * takes no lists, list_too_long past its max_list. */
static int pr__row_slot(pr_json_block *b, uint32_t col)
{
    pr__json_scratch *s = b->scratch;
    const pr_json_path *pa = &s->x->paths[col];
    if (s->present[col] == PR_JSON_NULL) { /* a value after null: the value wins */
        s->present[col] = PR_JSON_ABSENT;
    }
    if (s->count[col] >= 1 && pa->shape == PR_JSON_SCALAR)
        return PR_JSON_WRONG_TYPE;
    if (s->count[col] >= pa->max_list)
        return PR_JSON_LIST_TOO_LONG;
    return pr__reserve_value(&b->cols[col], pa->type) ? PR_ENOMEM : 0;
}

static void pr__row_took(pr_json_block *b, uint32_t col)
{
    pr__json_scratch *s = b->scratch;
    b->cols[col].n_values++;
    s->present[col] = PR_JSON_PRESENT;
    s->count[col]++;
}

/* Copy len bytes to the arena; the offset in *out. */
static int pr__row_arena_put(pr_json_block *b, const char *p, size_t len, pr_json_str *out)
{
    if (len > UINT32_MAX || pr__reserve_arena(b, len))
        return PR_ENOMEM;
    if (len)
        memcpy(b->arena + b->arena_len, p, len);
    *out = (pr_json_str){(uint32_t)b->arena_len, (uint32_t)len};
    b->arena_len += len;
    return 0;
}

int pr_json_row_put(pr_json_block *b, uint32_t col, const pr_json_any *v)
{
    if (col >= b->n_cols || !b->scratch->row_open)
        return PR_EINVAL;
    pr_json_col *c = &b->cols[col];
    pr_json_type t = b->scratch->x->paths[col].type;
    bool ok = t == PR_JSON_ANY || (t == PR_JSON_BOOL && v->type == PR_JSON_BOOL) ||
              (t == PR_JSON_DOUBLE && (v->type == PR_JSON_INT64 || v->type == PR_JSON_DOUBLE)) ||
              ((t == PR_JSON_INT64 || t == PR_JSON_KEY) && v->type == PR_JSON_INT64);
    if (!ok || v->type == PR_JSON_STRING)
        return PR_JSON_WRONG_TYPE;
    int r = pr__row_slot(b, col);
    if (r)
        return r;
    uint32_t k = c->n_values;
    switch (t) {
    case PR_JSON_ANY:
        c->any[k] = *v;
        break;
    case PR_JSON_BOOL:
        c->b[k] = v->i != 0;
        break;
    case PR_JSON_DOUBLE:
        c->f64[k] = v->type == PR_JSON_INT64 ? (double)v->i : v->d;
        break;
    case PR_JSON_INT64:
        c->i64[k] = v->i;
        break;
    default: { /* a key: the integer's decimal text, as the extractor writes it */
        char txt[24];
        uint32_t len = pr__format_i64(txt, v->i);
        if (pr__row_arena_put(b, txt, len, &c->str[k]))
            return PR_ENOMEM;
        break;
    }
    }
    pr__row_took(b, col);
    return 0;
}

int pr_json_row_put_str(pr_json_block *b, uint32_t col, const char *str, size_t len)
{
    if (col >= b->n_cols || !b->scratch->row_open)
        return PR_EINVAL;
    pr_json_type t = b->scratch->x->paths[col].type;
    if (t != PR_JSON_ANY && t != PR_JSON_STRING && t != PR_JSON_KEY)
        return PR_JSON_WRONG_TYPE;
    int r = pr__row_slot(b, col);
    if (r)
        return r;
    pr_json_col *c = &b->cols[col];
    pr_json_str sv;
    if (pr__row_arena_put(b, str, len, &sv))
        return PR_ENOMEM;
    if (t == PR_JSON_ANY)
        c->any[c->n_values] = (pr_json_any){.type = PR_JSON_STRING, .s = sv};
    else
        c->str[c->n_values] = sv;
    pr__row_took(b, col);
    return 0;
}

int pr_json_row_null(pr_json_block *b, uint32_t col)
{
    pr__json_scratch *s = b->scratch;
    if (col >= b->n_cols || !s->row_open)
        return PR_EINVAL;
    b->cols[col].n_values = s->row_start[col]; /* null replaces what the path had */
    s->present[col] = PR_JSON_NULL;
    s->count[col] = 0;
    return 0;
}

int pr_json_row_hole(pr_json_block *b, uint32_t col)
{
    if (col >= b->n_cols || !b->scratch->row_open)
        return PR_EINVAL;
    if (b->scratch->x->paths[col].shape != PR_JSON_ALIGNED)
        return PR_JSON_WRONG_TYPE;
    int r = pr__row_slot(b, col);
    if (r)
        return r;
    pr_json_col *c = &b->cols[col];
    c->any[c->n_values] = (pr_json_any){.type = PR_JSON_HOLE};
    pr__row_took(b, col);
    return 0;
}

void pr_json_row_mark(const pr_json_block *b, uint32_t col, pr_json_row_at *at)
{
    const pr__json_scratch *s = b->scratch;
    *at = (pr_json_row_at){b->cols[col].n_values, s->count[col], s->present[col]};
}

void pr_json_row_undo(pr_json_block *b, uint32_t col, const pr_json_row_at *at)
{
    pr__json_scratch *s = b->scratch;
    b->cols[col].n_values = at->n_values; /* strings stay in the arena until the row ends */
    s->count[col] = at->count;
    s->present[col] = at->present;
}

void pr_json_row_end(pr_json_block *b)
{
    pr__json_scratch *s = b->scratch;
    if (!s->row_open)
        return;
    for (uint32_t i = 0; i < b->n_cols; i++) {
        b->cols[i].present[b->rows] = s->present[i];
        b->cols[i].count[b->rows] = s->count[i];
    }
    b->rows++;
    s->row_open = false;
}

void pr_json_row_abort(pr_json_block *b)
{
    pr__json_scratch *s = b->scratch;
    if (!s->row_open)
        return;
    for (uint32_t i = 0; i < b->n_cols; i++)
        b->cols[i].n_values = s->row_start[i];
    b->arena_len = s->row_arena;
    s->row_open = false;
}
