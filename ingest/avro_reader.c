/*
 * avro_reader.c — Avro records into the JSON decoder's columns (issue 23;
 * contract: "Avro reader" in pr_ingest.h).
 *
 * Why a compiled plan and not avro-c's values: avro-c parses and checks the
 * writer schema (avro_schema_from_json_length) and we walk its schema tree,
 * but reading each record through avro-c's generic values (avro_value_read:
 * every field of every record decoded into a tree, strings copied) costs
 * several times the decode of the wanted values alone; measured in
 * bench/bench_avro.c, numbers in bench/RESULTS.md and docs/architecture.md.
 * So each writer schema is compiled once, together with the trie of wanted
 * paths, into a plan: one node per (schema node, path position). A node
 * either skips its value (a skip node per schema node, shared, recursion
 * allowed), writes it to a column (a leaf), descends (records, wanted map
 * keys, unions), reads a map whole (a list: { from: keys } path: every key
 * to one column, every value to another or skipped; a repeated key found
 * in the keys read so far, past 16 through a hash table made with the
 * reader), or says the value cannot be what the path needs (wrong type,
 * raised only when such a value is actually present, as the JSON extractor
 * does). A wanted map key met again in one map takes back what its first
 * occurrence wrote (pr_json_row_mark / _undo on the columns below it), so
 * the last occurrence wins as in JSON. Reading a record is then one pass over its bytes with no
 * allocation: blocks of arrays and maps that carry their byte size are
 * skipped in one jump.
 *
 * avro-c keeps no logicalType, so the schema text is also read with jansson
 * (avro-c's own JSON library) in step with avro-c's tree, for decimal's
 * scale and for the time logical types: a timestamp-millis / -micros,
 * local-timestamp-millis / -micros or date value goes to its column tagged
 * with its unit (pr_json_any.unit), so that the writer schema, not the
 * feature's configured unit, says what the number counts (schema evolution
 * from millis to micros keeps the same event time).
 */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <avro.h>

#include "decode_par.h"
#include "pr_clock.h"
#include "pr_ingest.h"
#include "pr_log.h"

#define PR__AV_MAX_DEPTH   64                  /* nested containers in one record */
#define PR__AV_MAX_EMPTY   (1u << 20)          /* items of a zero-byte type in one block */
#define PR__AV_NEG_TTL_NS  (10 * 1000000000LL) /* an unknown id is asked again after */
#define PR__AV_MAX_DECIMAL 64                  /* bytes of a decimal's unscaled value */
#define PR__AV_KNOWN_MAX   4096                /* writer schemas published to other threads */
#define PR__AV_MAP_LINEAR  16 /* a map's keys looked up one by one; past it, hashed */

enum {
    AV_NULL,
    AV_BOOL,
    AV_LONG,
    AV_FLOAT,
    AV_DOUBLE,
    AV_BYTES,
    AV_FIXED,
    AV_ENUM,
    AV_RECORD,
    AV_ARRAY,
    AV_MAP,
    AV_UNION
};
enum {
    ACT_SKIP,
    ACT_LEAF,
    ACT_DESCEND,
    ACT_WRONG,
    ACT_KEYS, /* AV_MAP read whole: its keys to col, its values to vcol (list: { from: keys }) */
};

typedef struct av av;
struct av {
    uint8_t kind, act;
    uint8_t unit;     /* AV_LONG with a time logicalType: its pr_json_unit */
    bool zero_size;   /* encodes in no bytes (bounds counts of such items) */
    bool decimal;     /* AV_BYTES / AV_FIXED with logicalType decimal */
    bool utf8;        /* AV_BYTES from an Avro string: must be UTF-8 (bad_utf8) */
    int32_t col;      /* ACT_LEAF, ACT_WRONG: the column (its path names rejects);
                       * ACT_KEYS: the keys' column */
    int32_t vcol;     /* ACT_KEYS: the values' column, -1 none (values skipped) */
    int32_t scale;    /* decimal */
    int64_t size;     /* AV_FIXED: bytes; AV_ENUM: symbols */
    const char *what; /* ACT_WRONG: why */
    uint32_t n;       /* kids: record fields, union branches, array items / map values (1) */
    av **kid;
    uint32_t n_keys; /* AV_MAP, ACT_DESCEND: wanted keys and their value nodes */
    const char **key;
    uint32_t *key_len;
    av **key_val;
    uint32_t *key_cols_at; /* key k's columns (below it) are key_cols[key_cols_at[k], [k + 1]) */
    int32_t *key_cols;
    uint32_t n_key_cols;
    uint64_t *key_seen; /* key k: the map instance (pr_avro_reader.map_gen) that last read it */
    const char **sym;   /* AV_ENUM leaf: symbols */
    uint32_t *sym_len;
    uint32_t n_aligned; /* AV_ARRAY of records: PR_JSON_ALIGNED columns below, */
    int32_t *aligned;   /* each given a hole by an item without a value there */
};

/* The wanted paths as a trie: node 0 is the record; a leaf has a column; a
 * map read whole (PR_JSON_KEYS, PR_JSON_VALUES paths) has its keys' column
 * and its values' (-1 none), and no children. */
typedef struct pr__ptrie {
    const char *seg;
    uint32_t seg_len;
    int32_t col;
    int32_t kcol, vcol;
    uint32_t first, next; /* first child, next sibling (0 = none) */
} pr__ptrie;

/* One compiled writer schema. */
typedef struct pr__plan {
    avro_schema_t schema;
    json_t *json;
    av *root;
    av **nodes; /* every node, for freeing */
    size_t n_nodes, cap_nodes;
    struct {
        avro_schema_t s;
        av *n;
    } * skip; /* skip node per schema node */
    size_t n_skip, cap_skip;
    json_t *names; /* named type -> its JSON object (links) */
} pr__plan;

typedef struct pr__entry {
    uint32_t id;
    pr__plan *plan;       /* NULL: unknown id (negative entry) */
    int64_t neg_until_ns; /* negative entry: ask again after */
    uint64_t used;
} pr__entry;

/* The writer schemas (id -> text) that a registry reader fetched and
 * compiled, published to the readers of the other decoding threads (issue
 * 21), per registry config: append-only, an entry written whole before the
 * count that covers it is stored (release), read under an acquire load of
 * the count; texts freed with the table, when its last reader goes. */
typedef struct pr__known {
    const pr_registry_cfg *cfg;
    unsigned refs;          /* under pr__known_lock */
    struct pr__known *next; /* under pr__known_lock */
    uint32_t n;             /* published entries (atomic) */
    struct {
        uint32_t id;
        char *text;
    } ent[PR__AV_KNOWN_MAX];
} pr__known;

static pr__known *pr__knowns;
static pthread_mutex_t pr__known_lock = PTHREAD_MUTEX_INITIALIZER;

struct pr_avro_reader {
    const pr_json_path *paths;
    size_t n_paths;
    pr__ptrie *trie;
    uint32_t n_trie;
    pr_registry *reg;
    pr__known *known; /* with reg: publishes to it; without: reads from it */
    bool own_reg, framed;
    pr__plan *fixed;      /* schema_file */
    av *fixed_skip;       /* fixed's skip node, with plain framing: tests a framing hint */
    const void *hint_key; /* the pipeline's source (else the reader): hint logged once */
    pr__entry *cache;
    uint32_t n_cache, cache_max;
    uint64_t tick;
    int32_t last; /* cache index of the last hit, -1 */
    /* one record */
    uint32_t *elem_start; /* [n_paths]: an aligned column's values before the current item
                           * of an array of records (one list level: never nested) */
    struct {
        uint32_t gen, idx;
    } * mh;                         /* a map read whole, past PR__AV_MAP_LINEAR keys: its key
                                     * indexes by hash (entries of generation mh_gen) */
    uint32_t mh_mask, mh_gen, mh_n; /* mh_n: the map's keys in mh so far */
    uint64_t map_gen;               /* map instances on the way to paths read so far (pr__map) */
    pr_json_row_at *at; /* [n_paths]: a column's state before its key's first occurrence */
    const uint8_t *p, *end, *start;
    pr_json_block *jb;
    pr_json_reject *rej;
};

/* ---------------------------------------------------------------- path trie */

static uint32_t pr__trie_child(const pr_avro_reader *r, uint32_t t, const char *seg, size_t len)
{
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next)
        if (r->trie[k].seg_len == len && memcmp(r->trie[k].seg, seg, len) == 0)
            return k;
    return 0;
}

static int pr__trie_build(pr_avro_reader *r)
{
    size_t max = 1;
    for (size_t i = 0; i < r->n_paths; i++)
        max += strlen(r->paths[i].path) + 1;
    r->trie = calloc(max, sizeof(*r->trie));
    if (!r->trie)
        return PR_ENOMEM;
    r->trie[0] = (pr__ptrie){.col = -1, .kcol = -1, .vcol = -1};
    r->n_trie = 1;
    for (size_t i = 0; i < r->n_paths; i++) {
        const char *s = r->paths[i].path;
        uint32_t t = 0;
        for (;;) {
            const char *dot = strchr(s, '.');
            size_t len = dot ? (size_t)(dot - s) : strlen(s);
            uint32_t k = pr__trie_child(r, t, s, len);
            if (!k) {
                k = r->n_trie++;
                r->trie[k] = (pr__ptrie){
                    .seg = s, .seg_len = (uint32_t)len, .col = -1, .kcol = -1, .vcol = -1};
                r->trie[k].next = r->trie[t].first;
                r->trie[t].first = k;
            }
            t = k;
            if (!dot)
                break;
            s = dot + 1;
        }
        *(r->paths[i].part == PR_JSON_KEYS     ? &r->trie[t].kcol
          : r->paths[i].part == PR_JSON_VALUES ? &r->trie[t].vcol
                                               : &r->trie[t].col) = (int32_t)i;
    }
    return 0;
}

/* A map read whole is read as a map only: no value at its path, no key
 * named under it, its values with its keys (the decoder's JSON extractor
 * refuses the same paths). */
static int pr__trie_maps_ok(const pr_avro_reader *r, char *errstr, size_t errstr_size)
{
    for (uint32_t t = 1; t < r->n_trie; t++) {
        const pr__ptrie *tn = &r->trie[t];
        if (tn->kcol < 0 && tn->vcol < 0)
            continue;
        const char *path = r->paths[tn->kcol >= 0 ? tn->kcol : tn->vcol].path;
        if (tn->kcol < 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "avro: '%s': a map's values are read with its keys", path);
        if (tn->col >= 0 || tn->first)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "avro: '%s' is read as a map (its keys): no path may read it as a "
                             "value or name a key under it",
                             path);
    }
    return 0;
}

/* ---------------------------------------------------------------- compiling */

static av *pr__node(pr__plan *pl, uint8_t kind, uint8_t act)
{
    if (pl->n_nodes == pl->cap_nodes) {
        size_t cap = pl->cap_nodes ? pl->cap_nodes * 2 : 32;
        av **n = realloc(pl->nodes, cap * sizeof(*n));
        if (!n)
            return NULL;
        pl->nodes = n;
        pl->cap_nodes = cap;
    }
    av *n = calloc(1, sizeof(*n));
    if (n) {
        n->kind = kind;
        n->act = act;
        n->col = -1;
        n->vcol = -1;
        n->zero_size = kind == AV_NULL;
        pl->nodes[pl->n_nodes++] = n;
    }
    return n;
}

static void pr__plan_free(pr__plan *pl)
{
    if (!pl)
        return;
    for (size_t i = 0; i < pl->n_nodes; i++) {
        av *n = pl->nodes[i];
        free(n->kid);
        free(n->key);
        free(n->key_len);
        free(n->key_val);
        free(n->key_cols_at);
        free(n->key_cols);
        free(n->key_seen);
        free(n->sym);
        free(n->sym_len);
        free(n->aligned);
        free(n);
    }
    free(pl->nodes);
    free(pl->skip);
    if (pl->schema)
        avro_schema_decref(pl->schema);
    json_decref(pl->json);
    json_decref(pl->names);
    free(pl);
}

/* Collect every named type's JSON object under its name and full name. */
static void pr__names(json_t *names, json_t *j, const char *ns)
{
    if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) pr__names(names, v, ns);
        return;
    }
    if (!json_is_object(j))
        return;
    const char *name = json_string_value(json_object_get(j, "name"));
    const char *space = json_string_value(json_object_get(j, "namespace"));
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!space)
        space = ns;
    if (name && type &&
        (!strcmp(type, "record") || !strcmp(type, "enum") || !strcmp(type, "fixed") ||
         !strcmp(type, "error"))) {
        json_object_set(names, name, j);
        if (space && space[0] && !strchr(name, '.')) {
            char full[512];
            snprintf(full, sizeof(full), "%s.%s", space, name);
            json_object_set(names, full, j);
        }
    }
    json_t *t = json_object_get(j, "type");
    if (json_is_object(t) || json_is_array(t))
        pr__names(names, t, space);
    json_t *fields = json_object_get(j, "fields");
    size_t i;
    json_t *f;
    json_array_foreach(fields, i, f) pr__names(names, json_object_get(f, "type"), space);
    pr__names(names, json_object_get(j, "items"), space);
    pr__names(names, json_object_get(j, "values"), space);
}

/* The JSON object describing schema node s (j as written: a name, an object,
 * a union's array). */
static json_t *pr__jobj(const pr__plan *pl, json_t *j)
{
    if (json_is_string(j)) {
        json_t *o = json_object_get(pl->names, json_string_value(j));
        return o ? o : j;
    }
    if (json_is_object(j)) {
        json_t *t = json_object_get(j, "type");
        if (json_is_object(t) || json_is_array(t))
            return t;
    }
    return j;
}

typedef struct pr__cmp {
    pr_avro_reader *r;
    pr__plan *pl;
    int depth;
    bool in_elem; /* under an array of records: the paths below map over its items */
} pr__cmp;

static av *pr__compile(pr__cmp *c, avro_schema_t s, json_t *j, int64_t t, bool in_list);

static int pr__kind(avro_schema_t s)
{
    switch (avro_typeof(s)) {
    case AVRO_STRING:
    case AVRO_BYTES:
        return AV_BYTES;
    case AVRO_INT32:
    case AVRO_INT64:
        return AV_LONG;
    case AVRO_FLOAT:
        return AV_FLOAT;
    case AVRO_DOUBLE:
        return AV_DOUBLE;
    case AVRO_BOOLEAN:
        return AV_BOOL;
    case AVRO_NULL:
        return AV_NULL;
    case AVRO_RECORD:
        return AV_RECORD;
    case AVRO_ENUM:
        return AV_ENUM;
    case AVRO_FIXED:
        return AV_FIXED;
    case AVRO_MAP:
        return AV_MAP;
    case AVRO_ARRAY:
        return AV_ARRAY;
    case AVRO_UNION:
        return AV_UNION;
    default:
        return -1;
    }
}

/* Kids of a container node: compiled against trie node t each (-1 skip). */
static int pr__kids(av *n, uint32_t count)
{
    n->n = count;
    n->kid = calloc(count ? count : 1, sizeof(*n->kid));
    return n->kid ? 0 : PR_ENOMEM;
}

/* The time logical types, by name. */
static const struct {
    const char *name;
    uint8_t unit;
} pr__time_types[] = {
    {"timestamp-millis", PR_JSON_UNIT_MS},
    {"timestamp-micros", PR_JSON_UNIT_US},
    {"local-timestamp-millis", PR_JSON_UNIT_MS},
    {"local-timestamp-micros", PR_JSON_UNIT_US},
    {"date", PR_JSON_UNIT_DAYS},
};

static uint8_t pr__time_unit(const char *lt)
{
    for (size_t i = 0; lt && i < sizeof(pr__time_types) / sizeof(pr__time_types[0]); i++)
        if (!strcmp(lt, pr__time_types[i].name))
            return pr__time_types[i].unit;
    return PR_JSON_UNIT_NONE;
}

/* Decimal scale, time units and enum symbols: what the plain avro-c tree lacks. */
static int pr__annotate(av *n, avro_schema_t s, json_t *jo)
{
    if (n->kind == AV_LONG && json_is_object(jo))
        n->unit = pr__time_unit(json_string_value(json_object_get(jo, "logicalType")));
    if ((n->kind == AV_BYTES || n->kind == AV_FIXED) && json_is_object(jo)) {
        const char *lt = json_string_value(json_object_get(jo, "logicalType"));
        if (lt && !strcmp(lt, "decimal")) {
            n->decimal = true;
            n->scale = (int32_t)json_integer_value(json_object_get(jo, "scale"));
        }
    }
    n->utf8 = avro_typeof(s) == AVRO_STRING;
    if (n->kind == AV_FIXED)
        n->size = avro_schema_fixed_size(s);
    if (n->kind == AV_ENUM) {
        n->size = avro_schema_enum_number_of_symbols(s);
        if (n->act == ACT_LEAF) {
            n->sym = calloc((size_t)n->size + 1, sizeof(*n->sym));
            n->sym_len = calloc((size_t)n->size + 1, sizeof(*n->sym_len));
            if (!n->sym || !n->sym_len)
                return PR_ENOMEM;
            for (int64_t k = 0; k < n->size; k++) {
                n->sym[k] = avro_schema_enum_get(s, (int)k);
                n->sym_len[k] = n->sym[k] ? (uint32_t)strlen(n->sym[k]) : 0;
            }
        }
    }
    return 0;
}

/* The shared skip node of schema node s. */
static av *pr__skip_node(pr__cmp *c, avro_schema_t s, json_t *j)
{
    pr__plan *pl = c->pl;
    for (size_t i = 0; i < pl->n_skip; i++)
        if (pl->skip[i].s == s)
            return pl->skip[i].n;
    int kind = pr__kind(s);
    av *n = kind < 0 ? NULL : pr__node(pl, (uint8_t)kind, ACT_SKIP);
    if (!n)
        return NULL;
    if (pl->n_skip == pl->cap_skip) {
        size_t cap = pl->cap_skip ? pl->cap_skip * 2 : 16;
        void *m = realloc(pl->skip, cap * sizeof(*pl->skip));
        if (!m)
            return NULL;
        pl->skip = m;
        pl->cap_skip = cap;
    }
    pl->skip[pl->n_skip].s = s;
    pl->skip[pl->n_skip++].n = n; /* before the kids: recursive types end here */
    json_t *jo = pr__jobj(pl, j);
    if (pr__annotate(n, s, jo))
        return NULL;
    n->zero_size = kind == AV_NULL || (kind == AV_FIXED && n->size == 0);
    if (kind == AV_RECORD) {
        size_t nf = avro_schema_record_size(s);
        json_t *fields = json_object_get(jo, "fields");
        if (pr__kids(n, (uint32_t)nf))
            return NULL;
        n->zero_size = true;
        for (size_t i = 0; i < nf; i++) {
            json_t *fj = json_object_get(json_array_get(fields, i), "type");
            n->kid[i] =
                pr__compile(c, avro_schema_record_field_get_by_index(s, (int)i), fj, -1, false);
            if (!n->kid[i])
                return NULL;
            n->zero_size = n->zero_size && n->kid[i]->zero_size;
        }
    } else if (kind == AV_UNION) {
        size_t nb = avro_schema_union_size(s);
        if (pr__kids(n, (uint32_t)nb))
            return NULL;
        for (size_t i = 0; i < nb; i++)
            if (!(n->kid[i] = pr__compile(c, avro_schema_union_branch(s, (int)i),
                                          json_array_get(jo, i), -1, false)))
                return NULL;
    } else if (kind == AV_ARRAY || kind == AV_MAP) {
        avro_schema_t is =
            kind == AV_ARRAY ? avro_schema_array_items(s) : avro_schema_map_values(s);
        if (pr__kids(n, 1) ||
            !(n->kid[0] = pr__compile(
                  c, is, json_object_get(jo, kind == AV_ARRAY ? "items" : "values"), -1, false)))
            return NULL;
    }
    return n;
}

static av *pr__wrong(pr__cmp *c, uint8_t kind, int32_t col, const char *what)
{
    av *n = pr__node(c->pl, kind, ACT_WRONG);
    if (n) {
        n->col = col;
        n->what = what;
    }
    return n;
}

/* The columns at or below trie node t (a leaf's, a map's keys and values),
 * appended to n->key_cols: what a map's key met again must take back. */
static int pr__cols_below(const pr_avro_reader *r, uint32_t t, av *n)
{
    const int32_t cols[3] = {r->trie[t].col, r->trie[t].kcol, r->trie[t].vcol};
    for (int i = 0; i < 3; i++) {
        if (cols[i] < 0)
            continue;
        int32_t *a = realloc(n->key_cols, (n->n_key_cols + 1) * sizeof(*a));
        if (!a)
            return PR_ENOMEM;
        n->key_cols = a;
        a[n->n_key_cols++] = cols[i];
    }
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next)
        if (pr__cols_below(r, k, n))
            return PR_ENOMEM;
    return 0;
}

/* A record's fields or a map's wanted keys against trie node t. */
static av *pr__descend(pr__cmp *c, av *n, avro_schema_t s, json_t *jo, uint32_t t)
{
    pr_avro_reader *r = c->r;
    if (n->kind == AV_RECORD) {
        size_t nf = avro_schema_record_size(s);
        json_t *fields = json_object_get(jo, "fields");
        if (pr__kids(n, (uint32_t)nf))
            return NULL;
        for (size_t i = 0; i < nf; i++) {
            const char *name = avro_schema_record_field_name(s, (int)i);
            uint32_t k = name ? pr__trie_child(r, t, name, strlen(name)) : 0;
            json_t *fj = json_object_get(json_array_get(fields, i), "type");
            if (!(n->kid[i] = pr__compile(c, avro_schema_record_field_get_by_index(s, (int)i), fj,
                                          k ? (int64_t)k : -1, false)))
                return NULL;
        }
        return n;
    }
    /* a map: its wanted keys are t's children */
    avro_schema_t vs = avro_schema_map_values(s);
    json_t *vj = json_object_get(jo, "values");
    uint32_t nk = 0;
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next)
        nk++;
    n->key = calloc(nk + 1, sizeof(*n->key));
    n->key_len = calloc(nk + 1, sizeof(*n->key_len));
    n->key_val = calloc(nk + 1, sizeof(*n->key_val));
    if (!n->key || !n->key_len || !n->key_val || pr__kids(n, 1) ||
        !(n->kid[0] = pr__compile(c, vs, vj, -1, false)))
        return NULL;
    if (!(n->key_cols_at = calloc(nk + 1, sizeof(*n->key_cols_at))) ||
        !(n->key_seen = calloc(nk + 1, sizeof(*n->key_seen))))
        return NULL;
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next, n->n_keys++) {
        n->key[n->n_keys] = r->trie[k].seg;
        n->key_len[n->n_keys] = r->trie[k].seg_len;
        if (!(n->key_val[n->n_keys] = pr__compile(c, vs, vj, k, false)) || pr__cols_below(r, k, n))
            return NULL;
        n->key_cols_at[n->n_keys + 1] = n->n_key_cols;
    }
    return n;
}

/* The column of a single-valued path (or a dense vector's: its positions
 * must hold, so it reads no list of records) at or below trie node t, -1
 * none. */
static int32_t pr__scalar_below(const pr_avro_reader *r, uint32_t t)
{
    if (r->trie[t].col >= 0) {
        pr_json_shape sh = r->paths[r->trie[t].col].shape;
        return sh == PR_JSON_SCALAR || sh == PR_JSON_VECTOR ? r->trie[t].col : -1;
    }
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next) {
        int32_t col = pr__scalar_below(r, k);
        if (col >= 0)
            return col;
    }
    return -1;
}

/* The PR_JSON_ALIGNED columns at or below trie node t, into n->aligned. */
static int pr__aligned_below(const pr_avro_reader *r, uint32_t t, av *n)
{
    if (r->trie[t].col >= 0) {
        if (r->paths[r->trie[t].col].shape != PR_JSON_ALIGNED)
            return 0;
        int32_t *a = realloc(n->aligned, (n->n_aligned + 1) * sizeof(*a));
        if (!a)
            return PR_ENOMEM;
        n->aligned = a;
        a[n->n_aligned++] = r->trie[t].col;
        return 0;
    }
    for (uint32_t k = r->trie[t].first; k; k = r->trie[k].next)
        if (pr__aligned_below(r, k, n))
            return PR_ENOMEM;
    return 0;
}

/* An array on the way to paths (trie node t): an array of records whose
 * items the paths below map over (each leaf reads one list element per
 * item), as the JSON extractor does. One list level per path, and only
 * paths that take lists may cross it: otherwise a wrong-type node. */
static av *pr__compile_objlist(pr__cmp *c, avro_schema_t s, json_t *jo, uint32_t t)
{
    int32_t scalar = pr__scalar_below(c->r, t);
    if (c->in_elem)
        return pr__wrong(c, AV_ARRAY, -1,
                         "a list inside a list of records (one list level per path)");
    if (scalar >= 0)
        return pr__wrong(c, AV_ARRAY, scalar,
                         "a list of records, under a single-valued path (or a dense vector's)");
    av *n = pr__node(c->pl, AV_ARRAY, ACT_DESCEND);
    if (!n || pr__kids(n, 1) || pr__aligned_below(c->r, t, n))
        return NULL;
    c->in_elem = true;
    n->kid[0] = pr__compile(c, avro_schema_array_items(s), json_object_get(jo, "items"), t, false);
    c->in_elem = false;
    return n->kid[0] ? n : NULL;
}

/* A map's value schema s (JSON j) read into values column vcol: a scalar as
 * a leaf's (the decoder judges a weight: a number, else wrong_type), null a
 * hole (pr__map_value), a record, array or map wrong, as JSON's. */
static av *pr__compile_value(pr__cmp *c, avro_schema_t s, json_t *j, int32_t vcol, int depth)
{
    while (s && is_avro_link(s))
        s = avro_schema_link_target(s);
    int kind = s ? pr__kind(s) : -1;
    if (kind < 0 || depth > PR__AV_MAX_DEPTH)
        return NULL;
    if (kind == AV_RECORD || kind == AV_ARRAY || kind == AV_MAP)
        return pr__wrong(c, (uint8_t)kind, vcol,
                         "a list or record as a map's value (read as a weight or an id: a scalar)");
    json_t *jo = pr__jobj(c->pl, j);
    av *n = pr__node(c->pl, (uint8_t)kind, kind == AV_UNION ? ACT_DESCEND : ACT_LEAF);
    if (!n)
        return NULL;
    n->col = vcol;
    if (kind == AV_UNION) {
        size_t nb = avro_schema_union_size(s);
        if (pr__kids(n, (uint32_t)nb))
            return NULL;
        for (size_t i = 0; i < nb; i++)
            if (!(n->kid[i] = pr__compile_value(c, avro_schema_union_branch(s, (int)i),
                                                json_array_get(jo, i), vcol, depth + 1)))
                return NULL;
    }
    if (pr__annotate(n, s, jo))
        return NULL;
    if (kind == AV_FIXED)
        n->zero_size = n->size == 0;
    return n;
}

/* Schema node s (JSON j) at a map read whole, trie node tn (list: { from:
 * keys }): a map, its keys to tn->kcol and its values to tn->vcol or
 * skipped; null: absent; anything else, or a map under an array of
 * records (one list level per path), wrong, as the JSON extractor's
 * pr__take_map. */
static av *pr__compile_keys(pr__cmp *c, avro_schema_t s, json_t *j, int kind, const pr__ptrie *tn)
{
    if (kind == AV_NULL)
        return pr__skip_node(c, s, j);
    if (c->in_elem)
        return pr__wrong(c, (uint8_t)kind, tn->kcol,
                         "a map inside a list of records (one list level per path)");
    if (kind != AV_MAP)
        return pr__wrong(c, (uint8_t)kind, tn->kcol, "a map expected");
    json_t *jo = pr__jobj(c->pl, j), *vj = json_object_get(jo, "values");
    avro_schema_t vs = avro_schema_map_values(s);
    av *n = pr__node(c->pl, AV_MAP, ACT_KEYS);
    if (!n || pr__kids(n, 1))
        return NULL;
    n->col = tn->kcol;
    n->vcol = tn->vcol;
    n->kid[0] =
        tn->vcol >= 0 ? pr__compile_value(c, vs, vj, tn->vcol, 0) : pr__skip_node(c, vs, vj);
    return n->kid[0] ? n : NULL;
}

/* Schema node s (JSON j) at trie node t (-1: not wanted, skip); in_list: an
 * element of a list at a leaf. Under an array of records (c->in_elem) a
 * leaf takes one scalar per item, and null there adds nothing. */
static av *pr__compile(pr__cmp *c, avro_schema_t s, json_t *j, int64_t t, bool in_list)
{
    pr__plan *pl = c->pl;
    while (s && is_avro_link(s))
        s = avro_schema_link_target(s);
    int kind = s ? pr__kind(s) : -1;
    if (kind < 0)
        return NULL;
    if (t < 0)
        return pr__skip_node(c, s, j);
    if (++c->depth > PR__AV_MAX_DEPTH * 4) /* a path is finite: only unions recurse here */
        return NULL;
    json_t *jo = pr__jobj(pl, j);
    const pr__ptrie *tn = &c->r->trie[t];
    bool leaf = tn->col >= 0;
    pr_json_shape shape = leaf ? c->r->paths[tn->col].shape : PR_JSON_SCALAR;
    av *n = NULL;
    if (kind == AV_UNION) {
        n = pr__node(pl, AV_UNION, ACT_DESCEND);
        size_t nb = avro_schema_union_size(s);
        if (!n || pr__kids(n, (uint32_t)nb))
            return NULL;
        for (size_t i = 0; i < nb; i++)
            if (!(n->kid[i] = pr__compile(c, avro_schema_union_branch(s, (int)i),
                                          json_array_get(jo, i), t, in_list)))
                return NULL;
    } else if (tn->kcol >= 0) {
        n = pr__compile_keys(c, s, j, kind, tn);
    } else if (!leaf) {
        if (kind == AV_NULL)
            n = pr__skip_node(c, s, j); /* null on the way: the path is absent */
        else if (kind == AV_ARRAY)
            n = pr__compile_objlist(c, s, jo, (uint32_t)t);
        else if (kind == AV_RECORD || kind == AV_MAP)
            n = (n = pr__node(pl, (uint8_t)kind, ACT_DESCEND))
                    ? pr__descend(c, n, s, jo, (uint32_t)t)
                    : NULL;
        else
            n = pr__wrong(c, (uint8_t)kind, -1, "not a record or map on the way to a path");
    } else if (kind == AV_RECORD || kind == AV_MAP) {
        n = pr__wrong(c, (uint8_t)kind, tn->col, "an object is not a value");
    } else if (in_list && (kind == AV_NULL || kind == AV_ARRAY)) {
        n = pr__wrong(c, (uint8_t)kind, tn->col, "a list holds scalars only");
    } else if (c->in_elem && kind == AV_ARRAY) {
        n = pr__wrong(c, (uint8_t)kind, tn->col,
                      "a list inside a list of records (one list level per path)");
    } else if (c->in_elem && kind == AV_NULL) {
        n = pr__skip_node(c, s, j); /* a missing element: dropped */
    } else if (kind == AV_ARRAY) {
        if (shape == PR_JSON_SCALAR)
            return pr__wrong(c, AV_ARRAY, tn->col, "a scalar expected, not a list");
        n = pr__node(pl, AV_ARRAY, ACT_LEAF);
        if (!n || pr__kids(n, 1) ||
            !(n->kid[0] = pr__compile(c, avro_schema_array_items(s), json_object_get(jo, "items"),
                                      t, true)))
            return NULL;
        n->col = tn->col;
    } else if (kind != AV_NULL &&
               (shape == PR_JSON_LIST || shape == PR_JSON_VECTOR || shape == PR_JSON_ALIGNED) &&
               !in_list && !c->in_elem) {
        n = pr__wrong(c, (uint8_t)kind, tn->col, "a list expected");
    } else {
        n = pr__node(pl, (uint8_t)kind, ACT_LEAF);
        if (n)
            n->col = tn->col;
    }
    c->depth--;
    if (n && n->act != ACT_SKIP && pr__annotate(n, s, jo))
        return NULL;
    if (n && n->kind == AV_FIXED)
        n->zero_size = n->size == 0;
    return n;
}

/* Parse one writer schema (avro-c's tree and its JSON, nothing compiled);
 * NULL with errstr. */
static pr__plan *pr__plan_parse(const char *text, char *errstr, size_t errstr_size)
{
    pr__plan *pl = calloc(1, sizeof(*pl));
    if (!pl) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        return NULL;
    }
    json_error_t jerr;
    if (avro_schema_from_json_length(text, strlen(text), &pl->schema)) {
        pl->schema = NULL;
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: %s", avro_strerror());
        goto out_free;
    }
    if (!(pl->json = json_loads(text, JSON_DECODE_ANY, &jerr)) || !(pl->names = json_object())) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: %s", jerr.text);
        goto out_free;
    }
    pr__names(pl->names, pl->json, NULL);
    return pl;
out_free:
    pr__plan_free(pl);
    return NULL;
}

/* Parse and compile one writer schema; NULL with errstr. */
static pr__plan *pr__plan_new(pr_avro_reader *r, const char *text, char *errstr, size_t errstr_size)
{
    pr__plan *pl = pr__plan_parse(text, errstr, errstr_size);
    if (!pl)
        return NULL;
    pr__cmp c = {.r = r, .pl = pl};
    if (!(pl->root = pr__compile(&c, pl->schema, pl->json, 0, false))) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: cannot compile (out of memory?)");
        goto out_free;
    }
    if (pl->root->kind != AV_RECORD) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro schema: the top level must be a record");
        goto out_free;
    }
    return pl;
out_free:
    pr__plan_free(pl);
    return NULL;
}

/* ---------------------------------------------------------------- reading */

static int pr__bad(pr_avro_reader *r, int reason, const char *what, int32_t col)
{
    size_t at = (size_t)(r->p - r->start);
    if (col >= 0)
        snprintf(r->rej->detail, sizeof(r->rej->detail), "%s: %s at byte %zu", r->paths[col].path,
                 what, at);
    else
        snprintf(r->rej->detail, sizeof(r->rej->detail), "avro: %s at byte %zu", what, at);
    r->rej->offset = at;
    r->rej->reason = reason;
    return reason;
}

/* A zigzag varint long. */
static inline int pr__long(pr_avro_reader *r, int64_t *v)
{
    uint64_t u = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return pr__bad(r, PR_DEC_BAD_AVRO, "truncated", -1);
        uint8_t b = *r->p++;
        u |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 0;
        }
    }
    return pr__bad(r, PR_DEC_BAD_AVRO, "varint longer than 10 bytes", -1);
}

/* A length (bytes, string) with its bytes in the record. */
static inline int pr__bytes(pr_avro_reader *r, const uint8_t **s, size_t *len)
{
    int64_t n;
    int rc = pr__long(r, &n);
    if (rc)
        return rc;
    if (n < 0 || n > r->end - r->p)
        return pr__bad(r, PR_DEC_BAD_AVRO, "bad length", -1);
    *s = r->p;
    *len = (size_t)n;
    r->p += n;
    return 0;
}

static inline int pr__take(pr_avro_reader *r, size_t n, const uint8_t **s)
{
    if ((size_t)(r->end - r->p) < n)
        return pr__bad(r, PR_DEC_BAD_AVRO, "truncated", -1);
    *s = r->p;
    r->p += n;
    return 0;
}

/* The count of the next block of an array or map (0 = the end); *size the
 * block's byte size when the writer gave it, else -1. */
static int pr__block(pr_avro_reader *r, const av *item, int64_t *count, int64_t *size)
{
    int rc = pr__long(r, count);
    *size = -1;
    if (rc || *count == 0)
        return rc;
    if (*count < 0) {
        if (*count == INT64_MIN)
            return pr__bad(r, PR_DEC_BAD_AVRO, "bad block count", -1);
        *count = -*count;
        if ((rc = pr__long(r, size)))
            return rc;
        if (*size < 0 || *size > r->end - r->p)
            return pr__bad(r, PR_DEC_BAD_AVRO, "bad block size", -1);
    }
    if (item->zero_size ? *count > PR__AV_MAX_EMPTY : *count > r->end - r->p)
        return pr__bad(r, PR_DEC_BAD_AVRO, "block count beyond the record", -1);
    return 0;
}

static int pr__skip(pr_avro_reader *r, const av *n, int depth);

static int pr__skip_blocks(pr_avro_reader *r, const av *n, int depth)
{
    const av *item = n->kid[0];
    for (;;) {
        int64_t count, size;
        int rc = pr__block(r, item, &count, &size);
        if (rc || count == 0)
            return rc;
        if (size >= 0) { /* the writer gave the block's size: one jump */
            r->p += size;
            continue;
        }
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *s;
            size_t len;
            if (n->kind == AV_MAP && (rc = pr__bytes(r, &s, &len)))
                return rc;
            if ((rc = pr__skip(r, item, depth + 1)))
                return rc;
        }
    }
}

static int pr__skip(pr_avro_reader *r, const av *n, int depth)
{
    const uint8_t *s;
    size_t len;
    int64_t v;
    int rc;
    if (depth > PR__AV_MAX_DEPTH)
        return pr__bad(r, PR_DEC_TOO_DEEP, "nesting too deep", -1);
    switch (n->kind) {
    case AV_NULL:
        return 0;
    case AV_BOOL:
        return pr__take(r, 1, &s);
    case AV_LONG:
    case AV_ENUM:
        return pr__long(r, &v);
    case AV_FLOAT:
        return pr__take(r, 4, &s);
    case AV_DOUBLE:
        return pr__take(r, 8, &s);
    case AV_BYTES:
        return pr__bytes(r, &s, &len);
    case AV_FIXED:
        return pr__take(r, (size_t)n->size, &s);
    case AV_RECORD:
        for (uint32_t i = 0; i < n->n; i++)
            if ((rc = pr__skip(r, n->kid[i], depth + 1)))
                return rc;
        return 0;
    case AV_UNION:
        if ((rc = pr__long(r, &v)))
            return rc;
        if (v < 0 || v >= n->n)
            return pr__bad(r, PR_DEC_BAD_AVRO, "union branch out of range", -1);
        return pr__skip(r, n->kid[v], depth); /* no level, as in pr__read */
    default:                                  /* AV_ARRAY, AV_MAP */
        return pr__skip_blocks(r, n, depth);
    }
}

/* A decimal's unscaled big-endian two's complement bytes / 10^scale. */
static double pr__decimal(const uint8_t *s, size_t len, int32_t scale)
{
    double v = 0;
    bool neg = len > 0 && (s[0] & 0x80);
    for (size_t i = 0; i < len; i++)
        v = v * 256.0 + (double)(neg ? (uint8_t)~s[i] : s[i]);
    if (neg)
        v = -(v + 1.0);
    return v / pow(10.0, scale);
}

static int pr__put_rc(pr_avro_reader *r, int rc, int32_t col)
{
    if (rc > 0)
        return pr__bad(r, pr_decode_reason_of_json(rc),
                       rc == PR_JSON_LIST_TOO_LONG ? "list too long" : "wrong type", col);
    return rc;
}

/* One scalar value of a leaf into its column. */
static int pr__leaf_scalar(pr_avro_reader *r, const av *n)
{
    const uint8_t *s;
    size_t len;
    int rc;
    pr_json_any a = {.type = PR_JSON_INT64};
    switch (n->kind) {
    case AV_NULL:
        return pr__put_rc(r, pr_json_row_null(r->jb, (uint32_t)n->col), n->col);
    case AV_BOOL:
        if ((rc = pr__take(r, 1, &s)))
            return rc;
        if (*s > 1)
            return pr__bad(r, PR_DEC_BAD_AVRO, "boolean not 0 or 1", n->col);
        a = (pr_json_any){.type = PR_JSON_BOOL, .i = *s};
        break;
    case AV_LONG:
        if ((rc = pr__long(r, &a.i)))
            return rc;
        a.unit = n->unit;
        break;
    case AV_FLOAT: {
        float f;
        if ((rc = pr__take(r, 4, &s)))
            return rc;
        memcpy(&f, s, 4); /* little-endian, as this host */
        a = (pr_json_any){.type = PR_JSON_DOUBLE, .d = f};
        break;
    }
    case AV_DOUBLE:
        if ((rc = pr__take(r, 8, &s)))
            return rc;
        a.type = PR_JSON_DOUBLE;
        memcpy(&a.d, s, 8);
        break;
    case AV_ENUM:
        if ((rc = pr__long(r, &a.i)))
            return rc;
        if (a.i < 0 || a.i >= n->size)
            return pr__bad(r, PR_DEC_BAD_AVRO, "enum index out of range", n->col);
        return pr__put_rc(
            r, pr_json_row_put_str(r->jb, (uint32_t)n->col, n->sym[a.i], n->sym_len[a.i]), n->col);
    default: /* AV_BYTES, AV_FIXED: strings (ids), or decimals */
        if ((rc = n->kind == AV_FIXED ? (len = (size_t)n->size, pr__take(r, len, &s))
                                      : pr__bytes(r, &s, &len)))
            return rc;
        if (n->utf8 && !pr_utf8_valid(s, len))
            return pr__bad(r, PR_DEC_BAD_UTF8, "invalid UTF-8", n->col);
        if (!n->decimal)
            return pr__put_rc(r, pr_json_row_put_str(r->jb, (uint32_t)n->col, (const char *)s, len),
                              n->col);
        if (len > PR__AV_MAX_DECIMAL)
            return pr__bad(r, PR_DEC_NUMBER_OUT_OF_RANGE, "decimal too long", n->col);
        a = (pr_json_any){.type = PR_JSON_DOUBLE, .d = pr__decimal(s, len, n->scale)};
        break;
    }
    return pr__put_rc(r, pr_json_row_put(r->jb, (uint32_t)n->col, &a), n->col);
}

static int pr__read(pr_avro_reader *r, const av *n, int depth);

/* A list at a leaf: each element through the item node. */
static int pr__leaf_list(pr_avro_reader *r, const av *n, int depth)
{
    const av *item = n->kid[0];
    for (;;) {
        int64_t count, size;
        int rc = pr__block(r, item, &count, &size);
        if (rc || count == 0)
            return rc;
        for (int64_t i = 0; i < count; i++)
            if ((rc = pr__read(r, item, depth + 1)))
                return rc;
    }
}

/* After one item of an array of records: each PR_JSON_ALIGNED column below
 * that the item gave no value (no such field in its record branch, null
 * there or on the way, a null item of a nullable union) gets a hole, so that
 * its positions stay the items', as the JSON extractor's pr__fill_holes. */
static int pr__objlist_holes(pr_avro_reader *r, const av *n)
{
    for (uint32_t k = 0; k < n->n_aligned; k++) {
        uint32_t col = (uint32_t)n->aligned[k];
        int rc = r->jb->cols[col].n_values == r->elem_start[col]
                     ? pr__put_rc(r, pr_json_row_hole(r->jb, col), n->aligned[k])
                     : 0;
        if (rc)
            return rc;
    }
    return 0;
}

/* An array of records on the way to paths: each item read (its leaves
 * append one list element each; aligned columns a hole where it has none). */
static int pr__objlist(pr_avro_reader *r, const av *n, int depth)
{
    for (;;) {
        int64_t count, size;
        int rc = pr__block(r, n->kid[0], &count, &size);
        if (rc || count == 0)
            return rc;
        for (int64_t i = 0; i < count; i++) {
            for (uint32_t k = 0; k < n->n_aligned; k++)
                r->elem_start[n->aligned[k]] = r->jb->cols[n->aligned[k]].n_values;
            if ((rc = pr__read(r, n->kid[0], depth + 1)) ||
                (n->n_aligned && (rc = pr__objlist_holes(r, n))))
                return rc;
        }
    }
}

/* Wanted key k of map node n read in map instance `inst`: its first
 * occurrence there marks the columns below it; one met again takes back
 * what the earlier one put (the last occurrence wins, as the JSON
 * extractor's repeated key). A column lies below one key of a map, and a
 * map below a key first met is new, so the marks nested maps take of a
 * column are all the state before the outer key's first occurrence. */
static void pr__map_key_met(pr_avro_reader *r, const av *n, uint32_t k, uint64_t inst)
{
    bool again = n->key_seen[k] == inst;
    n->key_seen[k] = inst;
    for (uint32_t i = n->key_cols_at[k]; i < n->key_cols_at[k + 1]; i++) {
        uint32_t col = (uint32_t)n->key_cols[i];
        if (again)
            pr_json_row_undo(r->jb, col, &r->at[col]);
        else
            pr_json_row_mark(r->jb, col, &r->at[col]);
    }
}

/* A map on the way to paths: wanted keys read, the others skipped. */
static int pr__map(pr_avro_reader *r, const av *n, int depth)
{
    const uint64_t inst = ++r->map_gen;
    for (;;) {
        int64_t count, size;
        int rc = pr__block(r, n->kid[0], &count, &size);
        if (rc || count == 0)
            return rc;
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *key;
            size_t len;
            if ((rc = pr__bytes(r, &key, &len)))
                return rc;
            const av *v = n->kid[0];
            for (uint32_t k = 0; k < n->n_keys; k++)
                if (n->key_len[k] == len && memcmp(n->key[k], key, len) == 0) {
                    v = n->key_val[k];
                    pr__map_key_met(r, n, k, inst);
                    break;
                }
            if ((rc = pr__read(r, v, depth + 1)))
                return rc;
        }
    }
}

/* ---- a map read whole (ACT_KEYS) ---- */

static uint32_t pr__key_hash(const uint8_t *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ key[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ (h >> 32));
}

/* The key (key, len) among the keys of the map being read (keys column
 * kcol's values from k0): its value index, or -1. One by one up to
 * PR__AV_MAP_LINEAR keys, past it through r->mh, which catches up with the
 * keys first (a map of 1000 item counts stays linear, not quadratic). */
static int64_t pr__key_find(pr_avro_reader *r, uint32_t kcol, uint32_t k0, const uint8_t *key,
                            size_t len)
{
    const pr_json_col *c = &r->jb->cols[kcol];
    const char *arena = r->jb->arena;
    uint32_t n = c->n_values - k0;
    if (n <= PR__AV_MAP_LINEAR) {
        for (uint32_t e = k0; e < c->n_values; e++)
            if (c->any[e].s.len == len && (!len || !memcmp(arena + c->any[e].s.off, key, len)))
                return e;
        return -1;
    }
    for (; r->mh_n < n; r->mh_n++) {
        const pr_json_any *a = &c->any[k0 + r->mh_n];
        uint32_t h = pr__key_hash((const uint8_t *)arena + a->s.off, a->s.len) & r->mh_mask;
        while (r->mh[h].gen == r->mh_gen)
            h = (h + 1) & r->mh_mask;
        r->mh[h].gen = r->mh_gen;
        r->mh[h].idx = r->mh_n;
    }
    for (uint32_t h = pr__key_hash(key, len) & r->mh_mask; r->mh[h].gen == r->mh_gen;
         h = (h + 1) & r->mh_mask) {
        const pr_json_any *a = &c->any[k0 + r->mh[h].idx];
        if (a->s.len == len && (!len || !memcmp(arena + a->s.off, key, len)))
            return k0 + r->mh[h].idx;
    }
    return -1;
}

/* A string value of a repeated key (a map of strings, enums or bytes: the
 * decoder refuses it as a weight, as JSON's) over values[slot] of column
 * col, its bytes put at the end of the block's arena, grown as the row
 * writer grows it (the value replaces an entry in place, which
 * pr_json_row_put_str cannot do). */
static int pr__str_at(pr_avro_reader *r, int32_t col, uint32_t slot, const void *s, size_t len)
{
    pr_json_block *b = r->jb;
    if (len > UINT32_MAX - b->arena_len)
        return PR_ENOMEM;
    if (b->arena_len + len > b->arena_cap) {
        size_t cap = b->arena_cap ? b->arena_cap : 4096;
        while (cap < b->arena_len + len)
            cap *= 2;
        char *a = realloc(b->arena, cap);
        if (!a)
            return PR_ENOMEM;
        b->arena = a;
        b->arena_cap = cap;
    }
    if (len)
        memcpy(b->arena + b->arena_len, s, len);
    b->cols[col].any[slot] =
        (pr_json_any){.type = PR_JSON_STRING, .s = {(uint32_t)b->arena_len, (uint32_t)len}};
    b->arena_len += len;
    return 0;
}

/* A map's value (leaf n, not a union) decoded as pr__leaf_scalar reads it:
 * *a (type PR_JSON_HOLE for null), or a string (*s, *len) when a->type is
 * PR_JSON_STRING. Not pr__leaf_scalar itself: a second caller would make
 * GCC call it out of line on the hot path. */
static int pr__map_scalar(pr_avro_reader *r, const av *n, pr_json_any *a, const uint8_t **s,
                          size_t *len)
{
    int rc = 0;
    float f;
    *a = (pr_json_any){.type = PR_JSON_HOLE};
    switch (n->kind) {
    case AV_NULL:
        return 0;
    case AV_BOOL:
        if ((rc = pr__take(r, 1, s)))
            return rc;
        if (**s > 1)
            return pr__bad(r, PR_DEC_BAD_AVRO, "boolean not 0 or 1", n->col);
        *a = (pr_json_any){.type = PR_JSON_BOOL, .i = **s};
        return 0;
    case AV_LONG:
        *a = (pr_json_any){.type = PR_JSON_INT64, .unit = n->unit};
        return pr__long(r, &a->i);
    case AV_FLOAT:
        if ((rc = pr__take(r, 4, s)))
            return rc;
        memcpy(&f, *s, 4); /* little-endian, as this host */
        *a = (pr_json_any){.type = PR_JSON_DOUBLE, .d = f};
        return 0;
    case AV_DOUBLE:
        a->type = PR_JSON_DOUBLE;
        if (!(rc = pr__take(r, 8, s)))
            memcpy(&a->d, *s, 8);
        return rc;
    case AV_ENUM:
        if ((rc = pr__long(r, &a->i)))
            return rc;
        if (a->i < 0 || a->i >= n->size)
            return pr__bad(r, PR_DEC_BAD_AVRO, "enum index out of range", n->col);
        *s = (const uint8_t *)n->sym[a->i];
        *len = n->sym_len[a->i];
        a->type = PR_JSON_STRING;
        return 0;
    default: /* AV_BYTES, AV_FIXED: strings, or decimals */
        if ((rc = n->kind == AV_FIXED ? (*len = (size_t)n->size, pr__take(r, *len, s))
                                      : pr__bytes(r, s, len)))
            return rc;
        if (n->utf8 && !pr_utf8_valid(*s, *len))
            return pr__bad(r, PR_DEC_BAD_UTF8, "invalid UTF-8", n->col);
        if (!n->decimal)
            a->type = PR_JSON_STRING;
        else if (*len > PR__AV_MAX_DECIMAL)
            return pr__bad(r, PR_DEC_NUMBER_OUT_OF_RANGE, "decimal too long", n->col);
        else
            *a = (pr_json_any){.type = PR_JSON_DOUBLE, .d = pr__decimal(*s, *len, n->scale)};
        return 0;
    }
}

/* A map's value (node n) into its values column: appended for a new key
 * (slot -1), or over the value of the key's first place, values[slot], for
 * a repeated key (the last value wins, as the JSON extractor's
 * pr__map_value; a row writer put would append); null: a hole. */
static int pr__map_value(pr_avro_reader *r, const av *n, int64_t slot)
{
    int64_t b;
    int rc;
    while (n->kind == AV_UNION && n->act == ACT_DESCEND) {
        if ((rc = pr__long(r, &b)))
            return rc;
        if (b < 0 || b >= n->n)
            return pr__bad(r, PR_DEC_BAD_AVRO, "union branch out of range", -1);
        n = n->kid[b];
    }
    if (n->act == ACT_WRONG)
        return pr__bad(r, PR_DEC_WRONG_TYPE, n->what, n->col);
    pr_json_any a;
    const uint8_t *s = NULL;
    size_t len = 0;
    if ((rc = pr__map_scalar(r, n, &a, &s, &len)))
        return rc;
    uint32_t col = (uint32_t)n->col;
    if (slot < 0)
        return pr__put_rc(r,
                          a.type == PR_JSON_HOLE ? pr_json_row_hole(r->jb, col)
                          : a.type == PR_JSON_STRING
                              ? pr_json_row_put_str(r->jb, col, (const char *)s, len)
                              : pr_json_row_put(r->jb, col, &a),
                          n->col);
    if (a.type == PR_JSON_STRING)
        return pr__str_at(r, n->col, (uint32_t)slot, s, len);
    r->jb->cols[col].any[slot] = a;
    return 0;
}

/* A map read whole (ACT_KEYS): each entry's key, a string, to column
 * n->col and its value to n->vcol (or skipped), in the encoded order; a
 * repeated key keeps its first place and takes its last value; more keys
 * than the column's max_list: list_too_long. As the JSON extractor's
 * pr__take_map, so both give the decoder the same row. Kept out of line:
 * pr__read, the hot loop, stays as it was. */
static __attribute__((noinline)) int pr__map_keys(pr_avro_reader *r, const av *n, int depth)
{
    pr_json_block *jb = r->jb;
    uint32_t kcol = (uint32_t)n->col;
    int rc;
    /* the map a second time in one record (its key repeated in a map on the
     * way): the last one is read, as JSON's last occurrence */
    if ((rc = pr_json_row_null(jb, kcol)) ||
        (n->vcol >= 0 && (rc = pr_json_row_null(jb, (uint32_t)n->vcol))))
        return rc;
    uint32_t k0 = jb->cols[kcol].n_values, v0 = n->vcol >= 0 ? jb->cols[n->vcol].n_values : 0;
    r->mh_n = 0;
    if (++r->mh_gen == 0) { /* wrapped: entries of an old generation could match */
        memset(r->mh, 0, ((size_t)r->mh_mask + 1) * sizeof(*r->mh));
        r->mh_gen = 1;
    }
    for (;;) {
        int64_t count, size;
        if ((rc = pr__block(r, n->kid[0], &count, &size)) || count == 0)
            return rc;
        for (int64_t i = 0; i < count; i++) {
            const uint8_t *key;
            size_t len;
            if ((rc = pr__bytes(r, &key, &len)))
                return rc;
            if (!pr_utf8_valid(key, len))
                return pr__bad(r, PR_DEC_BAD_UTF8, "invalid UTF-8 in a map key", n->col);
            int64_t dup = pr__key_find(r, kcol, k0, key, len);
            if (dup < 0 &&
                (rc = pr__put_rc(r, pr_json_row_put_str(jb, kcol, (const char *)key, len), n->col)))
                return rc;
            if ((rc = n->vcol < 0 ? pr__skip(r, n->kid[0], depth + 1)
                                  : pr__map_value(r, n->kid[0], dup < 0 ? -1 : v0 + dup - k0)))
                return rc;
        }
    }
}

static int pr__read(pr_avro_reader *r, const av *n, int depth)
{
    int rc;
    int64_t v;
    if (depth > PR__AV_MAX_DEPTH)
        return pr__bad(r, PR_DEC_TOO_DEEP, "nesting too deep", -1);
    switch (n->act) {
    case ACT_SKIP:
        return pr__skip(r, n, depth);
    case ACT_WRONG:
        return pr__bad(r, PR_DEC_WRONG_TYPE, n->what, n->col);
    case ACT_LEAF:
        return n->kind == AV_ARRAY ? pr__leaf_list(r, n, depth) : pr__leaf_scalar(r, n);
    case ACT_KEYS:
        return pr__map_keys(r, n, depth);
    default:
        break;
    }
    switch (n->kind) {
    case AV_RECORD:
        for (uint32_t i = 0; i < n->n; i++)
            if ((rc = pr__read(r, n->kid[i], depth + 1)))
                return rc;
        return 0;
    case AV_UNION:
        if ((rc = pr__long(r, &v)))
            return rc;
        if (v < 0 || v >= n->n)
            return pr__bad(r, PR_DEC_BAD_AVRO, "union branch out of range", -1);
        return pr__read(r, n->kid[v], depth); /* a union is no level of nesting */
    case AV_ARRAY:
        return pr__objlist(r, n, depth);
    default:
        return pr__map(r, n, depth);
    }
}

/* ---------------------------------------------------------------- plans by id */

/* cfg's table, made on first use; one reference more. NULL: out of memory. */
static pr__known *pr__known_get(const pr_registry_cfg *cfg)
{
    pthread_mutex_lock(&pr__known_lock);
    pr__known *k = pr__knowns;
    while (k && k->cfg != cfg)
        k = k->next;
    if (!k && (k = calloc(1, sizeof(*k)))) {
        k->cfg = cfg;
        k->next = pr__knowns;
        pr__knowns = k;
    }
    if (k)
        k->refs++;
    pthread_mutex_unlock(&pr__known_lock);
    return k;
}

static void pr__known_put(pr__known *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&pr__known_lock);
    bool last = --k->refs == 0;
    if (last) {
        pr__known **pp = &pr__knowns;
        while (*pp != k)
            pp = &(*pp)->next;
        *pp = k->next;
    }
    pthread_mutex_unlock(&pr__known_lock);
    if (!last)
        return;
    for (uint32_t i = 0; i < k->n; i++)
        free(k->ent[i].text);
    free(k);
}

/* The text published for `id`, or NULL. Any thread. */
static const char *pr__known_text(const pr__known *k, uint32_t id)
{
    uint32_t n = __atomic_load_n(&k->n, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (k->ent[i].id == id)
            return k->ent[i].text;
    return NULL;
}

/* Publish id's text (a schema this reader compiled). Full, or out of
 * memory: not published (those messages keep decoding where it was fetched). */
static void pr__known_add(pr__known *k, uint32_t id, const char *text)
{
    pthread_mutex_lock(&pr__known_lock); /* one writer at a time */
    uint32_t n = k->n;
    if (n < PR__AV_KNOWN_MAX && !pr__known_text(k, id) && (k->ent[n].text = strdup(text))) {
        k->ent[n].id = id;
        __atomic_store_n(&k->n, n + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pr__known_lock);
}

/* Cache slot `victim` (free, stale or least recently used) takes id's plan
 * (NULL: a negative entry). */
static void pr__cache_put(pr_avro_reader *r, uint32_t victim, uint32_t id, pr__plan *pl)
{
    if (r->n_cache < r->cache_max) {
        victim = r->n_cache++;
        pr_registry_note_cache(r->reg, 1, 0);
    } else if (r->cache[victim].id == id) {
        pr__plan_free(r->cache[victim].plan); /* the id's stale entry, replaced */
    } else {
        pr__plan_free(r->cache[victim].plan);
        pr_registry_note_cache(r->reg, 0, 1);
    }
    r->cache[victim] = (pr__entry){
        .id = id, .plan = pl, .neg_until_ns = pr_mono_ns() + PR__AV_NEG_TTL_NS, .used = r->tick};
    r->last = (int32_t)victim;
}

/* A reader of another thread (no registry): id's plan compiled from the
 * text its registry reader published. PR_EAGAIN when there is none yet
 * (nothing reported: the message goes to the thread that fetches). */
static int pr__plan_known(pr_avro_reader *r, uint32_t id, uint32_t victim, pr__plan **out)
{
    const char *text = pr__known_text(r->known, id);
    char err[256];
    pr__plan *pl = text ? pr__plan_new(r, text, err, sizeof(err)) : NULL;
    if (!pl) {
        snprintf(r->rej->detail, sizeof(r->rej->detail), "schema id %u: not fetched yet", id);
        return PR_EAGAIN;
    }
    pr__cache_put(r, victim, id, pl);
    *out = pl;
    return 0;
}

/* The plan of schema id `id`: cached, or fetched and compiled. 0, a reason
 * (> 0, rej filled), PR_EAGAIN or PR_ENOMEM. */
static int pr__plan_of(pr_avro_reader *r, uint32_t id, pr__plan **out)
{
    r->tick++;
    if (r->last >= 0 && r->cache[r->last].id == id && r->cache[r->last].plan) {
        r->cache[r->last].used = r->tick;
        *out = r->cache[r->last].plan;
        return 0;
    }
    uint32_t victim = 0;
    for (uint32_t i = 0; i < r->n_cache; i++) {
        pr__entry *e = &r->cache[i];
        if (e->id == id && (e->plan || pr_mono_ns() < e->neg_until_ns)) {
            e->used = r->tick;
            r->last = (int32_t)i;
            if (!e->plan) { /* a 404 (or an unusable schema) within the last 10 s */
                snprintf(r->rej->detail, sizeof(r->rej->detail),
                         "schema id %u: not in the registry (asked less than 10 s ago)", id);
                r->rej->reason = PR_DEC_UNKNOWN_SCHEMA_ID;
                return PR_DEC_UNKNOWN_SCHEMA_ID;
            }
            *out = e->plan;
            return 0;
        }
        if (e->id == id || e->used < r->cache[victim].used)
            victim = i; /* a stale entry of this id, else the least recently used */
    }
    if (!r->reg && r->known)
        return pr__plan_known(r, id, victim, out);
    if (!r->reg)
        return pr__bad(r, PR_DEC_UNKNOWN_SCHEMA_ID, "a schema id, and no registry", -1);
    char *text = NULL, type[32], err[256];
    int rc = pr_registry_fetch(r->reg, id, &text, type, sizeof(type), err, sizeof(err));
    pr__plan *pl = NULL;
    if (rc == PR_EAGAIN || rc == PR_ENOMEM) {
        snprintf(r->rej->detail, sizeof(r->rej->detail), "schema id %u: %.100s", id, err);
        return rc;
    }
    if (rc == 0 && strcmp(type, "AVRO") != 0) {
        snprintf(err, sizeof(err), "schema id %u is %s, not AVRO", id, type);
        rc = PR_EINVAL;
    }
    if (rc == 0 && !(pl = pr__plan_new(r, text, err, sizeof(err))))
        rc = PR_EINVAL;
    if (pl && r->known)
        pr__known_add(r->known, id, text);
    free(text);
    pr__cache_put(r, victim, id, pl);
    if (!pl) { /* 404, or a schema that is not usable Avro: the id is unknown to us */
        snprintf(r->rej->detail, sizeof(r->rej->detail), "schema id %u: %.100s", id,
                 rc == PR_EBADREC ? "not in the registry" : err);
        r->rej->reason = PR_DEC_UNKNOWN_SCHEMA_ID;
        return PR_DEC_UNKNOWN_SCHEMA_ID;
    }
    *out = pl;
    return 0;
}

/* The sources whose framing hint was logged (a few pipelines a process). */
static const void *pr__hinted[64];
static unsigned pr__n_hinted;
static pthread_mutex_t pr__hint_lock = PTHREAD_MUTEX_INITIALIZER;

/* A plain-framed message rejected as bad_avro that is really registry
 * framed (`piperec gen|produce --format avro` frame by default): byte 0 is
 * 0 and the bytes after the 5-byte header are one whole record of the
 * writer schema. Then the detail says so and the pipeline logs it once
 * (the reject stands: the config is what must change). */
static void pr__framing_hint(pr_avro_reader *r, const uint8_t *buf, size_t len)
{
    uint32_t id;
    size_t body;
    if (!r->fixed_skip || !pr_registry_frame(buf, len, &id, &body))
        return;
    pr_json_reject saved = *r->rej; /* pr__skip writes its own rejects there */
    r->start = r->p = buf + body;
    r->end = buf + len;
    bool whole = pr__skip(r, r->fixed_skip, 0) == 0 && r->p == r->end;
    *r->rej = saved;
    if (!whole)
        return;
    char hint[128];
    int n = snprintf(hint, sizeof(hint),
                     " (the message looks registry-framed: magic byte 0, schema id %u; set "
                     "source.avro.framing: registry)",
                     id);
    size_t room = sizeof(r->rej->detail) - 1, have = strlen(r->rej->detail);
    if (have + (size_t)n > room)
        have = room > (size_t)n ? room - (size_t)n : 0;
    snprintf(r->rej->detail + have, sizeof(r->rej->detail) - have, "%s", hint);
    bool first = true;
    pthread_mutex_lock(&pr__hint_lock);
    for (unsigned i = 0; i < pr__n_hinted && first; i++)
        first = pr__hinted[i] != r->hint_key;
    if (first && pr__n_hinted < sizeof(pr__hinted) / sizeof(pr__hinted[0]))
        pr__hinted[pr__n_hinted++] = r->hint_key;
    else
        first = false; /* logged already, or past the table: the details still say it */
    pthread_mutex_unlock(&pr__hint_lock);
    if (first)
        pr_log(PR_LOG_WARN,
               "avro: records rejected as bad_avro look registry-framed (magic byte 0, schema id "
               "%u, then a valid body) but source.avro.framing is plain: set "
               "source.avro.framing: registry, or produce plain bodies (piperec gen|produce "
               "--format avro --schema-id plain)",
               id);
}

int pr_avro_read(void *rd, pr_json_block *jb, const void *buf, size_t len, pr_json_reject *rej)
{
    pr_avro_reader *r = rd;
    r->start = r->p = buf;
    r->end = r->p + len;
    r->jb = jb;
    r->rej = rej;
    pr__plan *pl = r->fixed;
    if (r->framed) {
        uint32_t id;
        size_t body;
        if (!pr_registry_frame(buf, len, &id, &body))
            return pr__bad(r, PR_DEC_BAD_FRAMING, "no registry framing (magic byte 0, id)", -1);
        r->p += body;
        if (r->reg || r->known || !r->fixed) { /* the id picks the writer schema */
            int rc = pr__plan_of(r, id, &pl);
            if (rc)
                return rc;
        }
    }
    int rc = pr_json_row_begin(jb);
    if (rc)
        return rc;
    rc = pr__read(r, pl->root, 0);
    if (!rc && r->p != r->end)
        rc = pr__bad(r, PR_DEC_BAD_AVRO, "bytes after the record", -1);
    if (rc) {
        pr_json_row_abort(jb);
        if (rc == PR_DEC_BAD_AVRO && !r->framed)
            pr__framing_hint(r, buf, len);
        return rc;
    }
    pr_json_row_end(jb);
    return 0;
}

/* ---------------------------------------------------------------- building */

/* The hash table of the maps read whole (none: no table): room for twice
 * the most keys a map may have (max_list), so probes stay short. */
static int pr__map_table(pr_avro_reader *r)
{
    uint32_t keys = 0, cap = 64;
    for (size_t i = 0; i < r->n_paths; i++)
        if (r->paths[i].part == PR_JSON_KEYS) {
            uint32_t m = r->paths[i].max_list ? r->paths[i].max_list : PR_JSON_DEFAULT_MAX_LIST;
            keys = m > keys ? m : keys;
        }
    if (!keys)
        return 0;
    while (cap < 2 * (keys + 1))
        cap *= 2;
    r->mh_mask = cap - 1;
    r->mh = calloc(cap, sizeof(*r->mh));
    return r->mh ? 0 : PR_ENOMEM;
}

/* pr_avro_reader_new, or with `known` (a reference the reader takes over):
 * a registry reader publishes to it, a reader without a registry reads
 * writer schemas from it. */
static pr_avro_reader *pr__reader_new(const pr_json_decoder *d, const char *schema_json,
                                      pr_registry *reg, pr__known *known, pr_avro_framing framing,
                                      uint32_t cache_max, char *errstr, size_t errstr_size)
{
    if (!schema_json && !reg && !known) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "avro: needs a writer schema or a registry");
        return NULL;
    }
    pr_avro_reader *r = calloc(1, sizeof(*r));
    if (!r) {
        pr__known_put(known);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        return NULL;
    }
    r->n_paths = pr_json_decoder_paths(d, &r->paths);
    r->reg = reg;
    r->known = known;
    r->framed =
        framing == PR_AVRO_FRAMING_REGISTRY || (framing == PR_AVRO_FRAMING_AUTO && (reg || known));
    r->cache_max = cache_max ? cache_max : 1000;
    r->last = -1;
    if (pr__trie_build(r) || !(r->cache = calloc(r->cache_max, sizeof(*r->cache))) ||
        !(r->elem_start = calloc(r->n_paths + 1, sizeof(*r->elem_start))) ||
        !(r->at = calloc(r->n_paths + 1, sizeof(*r->at))) || pr__map_table(r)) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        goto out_free;
    }
    if (pr__trie_maps_ok(r, errstr, errstr_size))
        goto out_free;
    if (schema_json && !(r->fixed = pr__plan_new(r, schema_json, errstr, errstr_size)))
        goto out_free;
    r->hint_key = r;
    if (r->fixed && !r->framed) {
        pr__cmp c = {.r = r, .pl = r->fixed};
        if (!(r->fixed_skip = pr__skip_node(&c, r->fixed->schema, r->fixed->json))) {
            pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
            goto out_free;
        }
    }
    return r;
out_free:
    pr_avro_reader_free(r);
    return NULL;
}

pr_avro_reader *pr_avro_reader_new(const pr_json_decoder *d, const char *schema_json,
                                   pr_registry *reg, pr_avro_framing framing, uint32_t cache_max,
                                   char *errstr, size_t errstr_size)
{
    return pr__reader_new(d, schema_json, reg, NULL, framing, cache_max, errstr, errstr_size);
}

void pr_avro_reader_free(pr_avro_reader *r)
{
    if (!r)
        return;
    for (uint32_t i = 0; i < r->n_cache; i++)
        pr__plan_free(r->cache[i].plan);
    pr_registry_note_cache(r->reg, -(int64_t)r->n_cache, 0);
    free(r->cache);
    pr__plan_free(r->fixed);
    free(r->trie);
    free(r->elem_start);
    free(r->at);
    free(r->mh);
    pr__known_put(r->known);
    if (r->own_reg)
        pr_registry_free(r->reg);
    free(r);
}

static void pr__reader_free(void *rd)
{
    pr_avro_reader_free(rd);
}

/* A whole (small) file as a NUL-terminated string. */
static char *pr__slurp(const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    if (!f) {
        pr_seterr(errstr, errstr_size, PR_EIO, "avro: cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    do {
        if (len + 4096 + 1 > cap) {
            char *b = realloc(buf, cap = cap ? cap * 2 : 8192);
            if (!b) {
                free(buf);
                fclose(f);
                pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
                return NULL;
            }
            buf = b;
        }
        n = fread(buf + len, 1, 4096, f);
        len += n;
    } while (n > 0);
    fclose(f);
    buf[len] = 0;
    return buf;
}

/* pr_avro_reader_from_cfg; `offload`: a reader for another decoding thread
 * (issue 21), with no registry client: it decodes the ids that the
 * registry reader of the same config published, PR_EAGAIN for the rest. */
static pr_avro_reader *pr__reader_from_cfg(pr_json_decoder *d, const pr_source_cfg *src,
                                           bool offload, char *errstr, size_t errstr_size)
{
    char *text = NULL;
    pr_registry *reg = NULL;
    pr__known *known = NULL;
    if (src->avro.enabled && src->avro.schema_file &&
        !(text = pr__slurp(src->avro.schema_file, errstr, errstr_size)))
        return NULL;
    if (src->schema_registry.enabled && !offload &&
        !(reg = pr_registry_new(&src->schema_registry, errstr, errstr_size))) {
        free(text);
        return NULL;
    }
    if (src->schema_registry.enabled && !(known = pr__known_get(&src->schema_registry)) &&
        offload) {
        free(text);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        return NULL;
    }
    pr_avro_reader *r = pr__reader_new(d, text, reg, known, src->avro.framing,
                                       src->schema_registry.cache_max, errstr, errstr_size);
    free(text);
    if (!r) { /* known released with it */
        pr_registry_free(reg);
        return NULL;
    }
    r->own_reg = true;
    r->hint_key = src;
    pr_json_decoder_set_reader_owned(d, pr_avro_read, r, pr__reader_free);
    return r;
}

pr_avro_reader *pr_avro_reader_from_cfg(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                                        size_t errstr_size)
{
    return pr__reader_from_cfg(d, src, false, errstr, errstr_size);
}

int pr__avro_reader_offload(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                            size_t errstr_size)
{
    return pr__reader_from_cfg(d, src, true, errstr, errstr_size) ? 0 : PR_EINVAL;
}

/* ---------------------------------------------------------------- load-time checks
 * A fixed writer schema is known when the config loads, so each declared
 * path is resolved against it then, the way pr__compile reads it (unions
 * transparent, a record's field or a map's key per segment, an array of
 * records mapped by a list feature), and a path that no record could ever
 * give its feature is a config error instead of a wrong_type (or an
 * all-missing feature) in every row. A union passes when one branch does:
 * the other branches reject only the records that carry them, as at run
 * time. */

struct pr_avro_schema {
    pr__plan *pl; /* parsed only: no plan compiled */
    char *file;
};

pr_avro_schema *pr_avro_schema_load(const char *file, char *errstr, size_t errstr_size)
{
    char e[256];
    char *text = pr__slurp(file, e, sizeof(e));
    if (!text) {
        pr_seterr(errstr, errstr_size, PR_EIO, "cannot read the writer schema %s (%s)", file, e);
        return NULL;
    }
    pr_avro_schema *s = calloc(1, sizeof(*s));
    if (!s || !(s->file = strdup(file))) {
        free(s);
        free(text);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "avro: out of memory");
        return NULL;
    }
    s->pl = pr__plan_parse(text, e, sizeof(e));
    free(text);
    avro_schema_t root = s->pl ? s->pl->schema : NULL;
    while (root && is_avro_link(root))
        root = avro_schema_link_target(root);
    if (!s->pl)
        pr_seterr(errstr, errstr_size, PR_EINVAL, "%s is not a usable Avro schema: %s", file, e);
    else if (!root || avro_typeof(root) != AVRO_RECORD)
        pr_seterr(errstr, errstr_size, PR_EINVAL,
                  "%s: the top level of a writer schema must be a record", file);
    else
        return s;
    pr_avro_schema_free(s);
    return NULL;
}

void pr_avro_schema_free(pr_avro_schema *s)
{
    if (!s)
        return;
    pr__plan_free(s->pl);
    free(s->file);
    free(s);
}

#define PR__AV_TIME 8u /* beside the PR_FTYPE_* bits: an integer a time logical type tags */

/* One path being resolved. */
typedef struct pr__chk {
    const pr_avro_schema *s;
    const char *path;
    bool list;           /* the feature takes a list */
    bool either;         /* ... or a value: `in:` (a list matches by its elements) */
    bool vector;         /* ... a dense vector's: never through an array of records */
    uint32_t vbytes;     /* a dense vector of float32 bytes: its byte count (a fixed's size) */
    bool in_elem;        /* past an array of records */
    bool map;            /* list: { from: keys }: the path names a map read whole */
    bool map_values;     /* ... and weights: { from: values }: its values are checked */
    bool map_entries;    /* ... or list: { from: entries }: its values must be scalars */
    bool map_ids;        /* ... or list: { from: values }: scalars, the ids' types */
    unsigned types;      /* PR_FTYPE_* | PR__AV_TIME of the values the path can give */
    const char *not_num; /* the first type the path can give that is no number (a
                          * string, bytes, an enum, a boolean), for a weights path */
    char *err;
    size_t errn;
} pr__chk;

/* What an Avro type is called in a message, by avro-c's type. */
static const char *const pr__av_type_names[] = {
    [AVRO_STRING] = "a string",   [AVRO_BYTES] = "bytes",   [AVRO_INT32] = "an int",
    [AVRO_INT64] = "a long",      [AVRO_FLOAT] = "a float", [AVRO_DOUBLE] = "a double",
    [AVRO_BOOLEAN] = "a boolean", [AVRO_NULL] = "null",     [AVRO_RECORD] = "a record",
    [AVRO_ENUM] = "an enum",      [AVRO_FIXED] = "a fixed", [AVRO_MAP] = "a map",
    [AVRO_ARRAY] = "an array",    [AVRO_UNION] = "a union",
};

static const char *pr__av_type_name(avro_schema_t s)
{
    avro_type_t t = avro_typeof(s);
    return (size_t)t < sizeof(pr__av_type_names) / sizeof(pr__av_type_names[0]) &&
                   pr__av_type_names[t]
               ? pr__av_type_names[t]
               : "a value";
}

/* The PR_FTYPE_* a scalar of kind k gives the JSON decoder (pr__leaf_scalar);
 * PR_FTYPE_BYTES too for bytes or fixed, not a string (text is UTF-8). */
static unsigned pr__av_ftype(int kind, bool decimal, bool utf8, uint8_t unit)
{
    switch (kind) {
    case AV_LONG:
        return PR_FTYPE_INT | (unit ? PR__AV_TIME : 0);
    case AV_BOOL:
        return PR_FTYPE_INT;
    case AV_FLOAT:
    case AV_DOUBLE:
        return PR_FTYPE_NUM;
    case AV_BYTES:
    case AV_FIXED:
        return decimal ? PR_FTYPE_NUM : PR_FTYPE_STR | (utf8 ? 0 : PR_FTYPE_BYTES); /* a string */
    case AV_ENUM:
        return PR_FTYPE_STR;
    default:
        return 0;
    }
}

static int pr__chk_fail(pr__chk *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pr__chk_fail(pr__chk *k, const char *fmt, ...)
{
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return pr_seterr(k->err, k->errn, PR_EINVAL, "'%s' in the writer schema %s: %s", k->path,
                     k->s->file, what);
}

/* A record's field names, comma-separated, cut to fit. */
static void pr__field_list(avro_schema_t s, char *b, size_t bn)
{
    size_t n = avro_schema_record_size(s), at = 0;
    b[0] = 0;
    for (size_t i = 0; i < n && at < bn; i++) {
        const char *f = avro_schema_record_field_name(s, (int)i);
        if (at + strlen(f) + 8 >= bn) {
            snprintf(b + at, bn - at, "%s...", i ? ", " : "");
            return;
        }
        at += (size_t)snprintf(b + at, bn - at, "%s%s", i ? ", " : "", f);
    }
}

/* A map's value schema s (JSON j) as weights: { from: values } reads it:
 * int, long, float, double (a decimal, a time type too), or a union of
 * those and null (a hole); as list: { from: entries } or { from: values }
 * reads it, any scalar (from: values adds its type to the ids'); 0, or
 * PR_EINVAL naming the first that is not. */
static int pr__chk_map_values(pr__chk *k, avro_schema_t s, json_t *j, int depth)
{
    while (s && is_avro_link(s))
        s = avro_schema_link_target(s);
    int kind = s ? pr__kind(s) : -1;
    if (kind < 0 || depth > PR__AV_MAX_DEPTH)
        return pr__chk_fail(k, "an unsupported type");
    json_t *jo = pr__jobj(k->s->pl, j);
    if (kind == AV_UNION) {
        size_t nb = avro_schema_union_size(s);
        for (size_t i = 0; i < nb; i++)
            if (pr__chk_map_values(k, avro_schema_union_branch(s, (int)i), json_array_get(jo, i),
                                   depth + 1))
                return PR_EINVAL;
        return 0;
    }
    av n = {.kind = (uint8_t)kind, .act = ACT_SKIP};
    if (pr__annotate(&n, s, jo))
        return pr__chk_fail(k, "out of memory");
    if (k->map_entries || k->map_ids) { /* crossed with the keys, or the ids: any scalar */
        if (kind != AV_RECORD && kind != AV_ARRAY && kind != AV_MAP) {
            if (k->map_ids)
                k->types |= pr__av_ftype(kind, n.decimal, n.utf8, n.unit);
            return 0;
        }
        return pr__chk_fail(k, "the map's values can be %s, and %s", pr__av_type_name(s),
                            k->map_ids ? "from: values makes each value an id (a string or an "
                                         "integer, a scalar)"
                                       : "from: entries crosses each key with a scalar value");
    }
    if (kind == AV_NULL || kind == AV_LONG || kind == AV_FLOAT || kind == AV_DOUBLE || n.decimal)
        return 0;
    return pr__chk_fail(k,
                        "the map's values can be %s, and weights (from: values) are numbers "
                        "(int, long, float, double)",
                        pr__av_type_name(s));
}

/* The value at a map path (list: { from: keys }), as pr__compile_keys reads
 * it: a map, or a union with one (its null branch absent, any other
 * branch rejects the records that carry it); not under an array of
 * records. Its keys are strings; with weights: { from: values } its values
 * numbers, with list: { from: entries } or values scalars. 0, or PR_EINVAL
 * with k->err. */
static int pr__chk_map(pr__chk *k, avro_schema_t s, json_t *j, int depth)
{
    json_t *jo = pr__jobj(k->s->pl, j);
    avro_schema_t m = s;
    const char *other = NULL; /* the union's first branch that is neither null nor a map */
    if (avro_typeof(s) == AVRO_UNION) {
        m = NULL;
        for (size_t i = 0, nb = avro_schema_union_size(s); i < nb && !m; i++) {
            avro_schema_t b = avro_schema_union_branch(s, (int)i);
            while (b && is_avro_link(b))
                b = avro_schema_link_target(b);
            if (b && avro_typeof(b) == AVRO_MAP) {
                m = b;
                jo = pr__jobj(k->s->pl, json_array_get(jo, i));
            } else if (b && !other && avro_typeof(b) != AVRO_NULL) {
                other = pr__av_type_name(b);
            }
        }
    }
    if (!m || avro_typeof(m) != AVRO_MAP)
        return pr__chk_fail(k, "it is %s, not a map: list: { from: keys } reads a map",
                            m       ? pr__av_type_name(m)
                            : other ? other
                                    : "null");
    if (k->in_elem)
        return pr__chk_fail(k, "a map inside an array of records (one list level per path): "
                               "list: { from: keys } reads one map");
    if (!k->map_ids) /* the keys, or their crosses; the values' types below */
        k->types |= k->map_entries ? PR_FTYPE_INT : PR_FTYPE_STR;
    if (!k->map_values && !k->map_entries && !k->map_ids)
        return 0;
    return pr__chk_map_values(k, avro_schema_map_values(m), json_object_get(jo, "values"),
                              depth + 1);
}

static int pr__chk_node(pr__chk *k, avro_schema_t s, json_t *j, const char *seg, bool in_list,
                        int depth);

/* Schema node s (its JSON object jo, a kind other than a union) on the way
 * to the path, `seg` left of it: a record's field or a map's key, or an
 * array of records whose items the path maps over. As pr__chk_node. */
static int pr__chk_way(pr__chk *k, avro_schema_t s, json_t *jo, int kind, const char *seg,
                       int depth)
{
    int at_len = (int)(seg - k->path) - 1; /* the path up to here, for messages */
    const char *dot = strchr(seg, '.');
    size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
    const char *next = dot ? dot + 1 : NULL;
    if (kind == AV_RECORD) {
        size_t nf = avro_schema_record_size(s);
        json_t *fields = json_object_get(jo, "fields");
        for (size_t i = 0; i < nf; i++) {
            const char *name = avro_schema_record_field_name(s, (int)i);
            if (strlen(name) == len && memcmp(name, seg, len) == 0)
                return pr__chk_node(k, avro_schema_record_field_get_by_index(s, (int)i),
                                    json_object_get(json_array_get(fields, i), "type"), next, false,
                                    depth + 1);
        }
        char have[240];
        pr__field_list(s, have, sizeof(have));
        return pr_seterr(k->err, k->errn, PR_EINVAL,
                         "'%s' is not in the writer schema %s (record %.*s has: %s)", k->path,
                         k->s->file, at_len > 0 ? at_len : (int)strlen(avro_schema_name(s)),
                         at_len > 0 ? k->path : avro_schema_name(s), have);
    }
    if (kind == AV_MAP) /* the segment is a key: any key may be there */
        return pr__chk_node(k, avro_schema_map_values(s), json_object_get(jo, "values"), next,
                            false, depth + 1);
    if (kind == AV_ARRAY) {
        if (k->in_elem)
            return pr__chk_fail(k,
                                "%.*s is an array inside an array of records (one list "
                                "level per path)",
                                at_len, k->path);
        if (!k->list && !k->either)
            return pr__chk_fail(k,
                                "%.*s is an array of records: a single-valued feature cannot "
                                "go through it (declare a list feature: list: { max_len: N })",
                                at_len, k->path);
        if (k->vector)
            return pr__chk_fail(k,
                                "%.*s is an array of records: a dense vector reads one array "
                                "of numbers, not one element per record (its positions must "
                                "hold)",
                                at_len, k->path);
        k->in_elem = true; /* the items take the same segment */
        int rc = pr__chk_node(k, avro_schema_array_items(s), json_object_get(jo, "items"), seg,
                              false, depth + 1);
        k->in_elem = false;
        return rc;
    }
    return pr__chk_fail(k, "%.*s is %s, not a record or map on the way to the path", at_len,
                        k->path, pr__av_type_name(s));
}

/* Schema node s (JSON j) reached with `seg` left of the path (NULL: the
 * value at the path); in_list: an element of an array at the path. Mirrors
 * pr__compile; 0, or PR_EINVAL with k->err. */
static int pr__chk_node(pr__chk *k, avro_schema_t s, json_t *j, const char *seg, bool in_list,
                        int depth)
{
    while (s && is_avro_link(s))
        s = avro_schema_link_target(s);
    int kind = s ? pr__kind(s) : -1;
    if (kind < 0 || depth > PR__AV_MAX_DEPTH * 4)
        return pr__chk_fail(k, "an unsupported type");
    if (!seg && k->map)
        return pr__chk_map(k, s, j, depth);
    json_t *jo = pr__jobj(k->s->pl, j);
    if (kind == AV_UNION) {
        size_t nb = avro_schema_union_size(s);
        /* Every branch, not the first that fits: the types the path can
         * give are all its branches' (["null", "string"] gives a string,
         * ["string", "double"] a number too); one branch that fits is enough. */
        char first[400] = "";
        bool tried = false, fits = false;
        for (size_t i = 0; i < nb; i++) {
            avro_schema_t b = avro_schema_union_branch(s, (int)i);
            if (seg && avro_typeof(b) == AVRO_NULL)
                continue; /* null on the way: the path is absent in that record */
            if (pr__chk_node(k, b, json_array_get(jo, i), seg, in_list, depth + 1) == 0) {
                fits = true;
                continue;
            }
            if (!tried)
                snprintf(first, sizeof(first), "%s", k->err);
            tried = true;
        }
        if (tried && !fits)
            return pr_seterr(k->err, k->errn, PR_EINVAL, "%s", first);
        return 0;
    }
    if (seg)
        return pr__chk_way(k, s, jo, kind, seg, depth);
    if (kind == AV_RECORD || kind == AV_MAP)
        return pr__chk_fail(k, "the path ends at %s, not a value", pr__av_type_name(s));
    if (in_list && (kind == AV_NULL || kind == AV_ARRAY))
        return pr__chk_fail(k, "an array of %s: a list holds scalars only",
                            kind == AV_NULL ? "nulls" : "arrays");
    if (k->in_elem && kind == AV_ARRAY)
        return pr__chk_fail(k, "an array inside an array of records (one list level per path)");
    if (kind == AV_NULL)
        return 0; /* always missing, as in JSON */
    if (kind == AV_ARRAY) {
        if (k->vbytes)
            return pr__chk_fail(k, "an array: encoding f32 reads one bytes value (an array of "
                                   "numbers is encoding: list)");
        if (!k->list && !k->either)
            return pr__chk_fail(k, "an array: declare a list feature (list: { max_len: N }), or "
                                   "a dense vector (dim: N)");
        return pr__chk_node(k, avro_schema_array_items(s), json_object_get(jo, "items"), NULL, true,
                            depth + 1);
    }
    if (k->list && !in_list && !k->in_elem)
        return pr__chk_fail(k,
                            "%s, not an array: a list feature (or a dense vector) needs an "
                            "array (or a path through an array of records)",
                            pr__av_type_name(s));
    av n = {.kind = (uint8_t)kind, .act = ACT_SKIP};
    if (pr__annotate(&n, s, jo))
        return pr__chk_fail(k, "out of memory");
    if (k->vbytes && kind == AV_FIXED && !n.decimal && n.size != k->vbytes)
        return pr__chk_fail(k, "a fixed of %u bytes, and a vector of %u float32 is %u bytes",
                            (unsigned)n.size, k->vbytes / 4, k->vbytes);
    unsigned ft = pr__av_ftype(kind, n.decimal, n.utf8, n.unit);
    if (!k->not_num && (kind == AV_BOOL || (ft & PR_FTYPE_STR)))
        k->not_num = pr__av_type_name(s);
    k->types |= ft;
    return 0;
}

/* What a feature reading values of `types` makes of them: 0, or PR_EINVAL
 * when no value the path can give is one the feature (or its first
 * operator that takes it) accepts, as json_decode.c would reject it. */
static int pr__chk_types(pr__chk *k, const pr_feature_spec *f)
{
    unsigned t = k->types & (PR_FTYPE_NUM | PR_FTYPE_INT | PR_FTYPE_STR | PR_FTYPE_BYTES);
    char why[200], gives[48];
    if (!k->types || f->n_paths > 1) /* always null; a cross hashes any value */
        return 0;
    if (f->kind == PR_FEAT_EVENT_TIME) {
        if (f->unit == PR_TIME_RFC3339 ? !(k->types & (PR_FTYPE_STR | PR__AV_TIME))
                                       : !(t & (PR_FTYPE_NUM | PR_FTYPE_INT))) {
            pr_ftype_text(t, gives, sizeof(gives));
            return pr__chk_fail(k, "it gives %s, and event_time with unit %s needs %s", gives,
                                pr_time_unit_names[f->unit],
                                f->unit == PR_TIME_RFC3339 ? "a string (or a time logical type)"
                                                           : "a number");
        }
        return 0;
    }
    if (pr_feature_check_input(f, t, why, sizeof(why)))
        return pr__chk_fail(k, "%s", why);
    return 0;
}

/* k == PR_FEAT_WEIGHTS_PATH: a weighted list's weights path, which must be a
 * list (an array, or a field of an array of records, as the ids) of numbers:
 * int, long, float, double (a decimal, a time type too); the ids path of a
 * weighted list is checked as any list feature's. A list: { from: keys }
 * path must name a map (pr__chk_map), whose values are the numbers with
 * weights: { from: values }. */
int pr_avro_check_feature(const pr_avro_schema *s, const pr_feature_spec *f, uint8_t k,
                          char *errstr, size_t errstr_size)
{
    bool w = k == PR_FEAT_WEIGHTS_PATH; /* a weighted list's weights: a list of numbers */
    const char *path = w ? f->weights_path : f->paths[k];
    pr__chk c = {.s = s,
                 .path = path,
                 .list = w || pr_feature_reads_list(f),
                 .either = !w && f->in.n,
                 .vector = !w && pr_feature_reads_list(f) && f->kind == PR_FEAT_DENSE,
                 .vbytes = !w && pr_feature_vector_bytes(f) ? 4u * f->dim : 0,
                 .map = f->from_keys,
                 .map_values = w && f->weights_from_values,
                 .map_entries = !w && f->from_entries,
                 .map_ids = !w && f->from_values,
                 .err = errstr,
                 .errn = errstr_size};
    int rc = pr__chk_node(&c, s->pl->schema, s->pl->json, path, false, 0);
    if (rc || !w)
        return rc ? rc : pr__chk_types(&c, f);
    if (c.not_num) /* the decoder would reject it wrong_type: a weight is a number, never a bool */
        return pr__chk_fail(&c, "it gives %s, and weights are numbers (int, long, float, double)",
                            c.not_num);
    return 0;
}
