/*
 * pr_config_int.h — internal to config/: the loader's context and key-table
 * types, and the helpers every part of the loader uses (pr_config.c: the
 * walker, the structure and the service's sections; config_schema.c: the
 * declared feature schema). Not part of the public contract (pr_config.h).
 *
 * A handler (key_fn) parses one YAML value into its struct through these
 * helpers and reports problems with pr__cfg_error(), which prefixes the
 * file, line and key path. Loading is single-threaded.
 */
#ifndef PR_CONFIG_INT_H
#define PR_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#include "pr_config.h"

#define PR__PATH_MAX 512

typedef struct cfg_ctx {
    yaml_document_t *doc;
    int n_loaded; /* nodes from the text; later ones come from overrides */
    const char *origin;
    char *err;
    size_t errn;
    size_t errlen;
    int n_errors;
    char path[PR__PATH_MAX];
    size_t pathlen;
    yaml_node_t *map;  /* mapping being applied (for handlers that look at siblings) */
    bool off;          /* inside a section switched off (enabled: false): values not needed */
    int line_hint;     /* line used when an error has no node (post-load checks) */
    yaml_node_t synth; /* scalar node used to apply a default */
    pr_config *cfg;
    pr_pipeline_cfg *pl; /* pipeline being built */
} cfg_ctx;

/* ---------------------------------------------------------------- key tables */

enum key_type {
    KT_BOOL,
    KT_INT,      /* signed or unsigned integer field of `width` bytes */
    KT_STR,      /* owned char *; `names` restricts the values */
    KT_NAME,     /* char[width] holding a pr__valid_name() */
    KT_ENUM,     /* int-sized enum; value = index in `names` */
    KT_SIZE,     /* uint64_t bytes, with units */
    KT_HOSTPORT, /* owned char * "host:port" */
    KT_STRLIST,  /* owned char ** at off, size_t count at off2 */
    KT_KV,       /* pr_kv_list of scalar pairs */
    KT_MAP,      /* sub-table applied to base + off */
    KT_CUSTOM,   /* fn */
};

#define KF_REQUIRED    1u  /* must be present (when the enclosing mapping is) */
#define KF_DOC_DEFAULT 2u  /* `def` documents a value set by init code */
#define KF_LIST        4u  /* custom: a list of `sub` mappings (reference/set paths) */
#define KF_DICT        8u  /* custom: a mapping of user names -> `sub` mappings */
#define KF_NONEMPTY    16u /* KT_STRLIST/KT_STR: at least one item / one char */
#define KF_SUB         32u /* custom: one `sub` mapping (reference paths) */

typedef struct cfg_key cfg_key;
typedef struct cfg_table cfg_table;
typedef void (*key_fn)(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);

struct cfg_key {
    const char *name;
    enum key_type type;
    unsigned flags;
    size_t off;
    size_t off2; /* KT_STRLIST count; KT_MAP: offset of `enabled` + 1 (0 = none) */
    uint8_t width;
    bool is_signed;
    int64_t min;
    uint64_t max; /* 0 = the field's own limit */
    const char *const *names;
    const cfg_table *sub;
    key_fn fn;
    const char *def;      /* YAML text of the default; NULL = none */
    const char *type_doc; /* custom keys: the type column of the reference */
    const char *doc;
};

/* A mapping level: the loader's own keys (structure, custom keys) followed by
 * the keys of a component's table (pr_cfgmap.h), both addressing `base`. */
struct cfg_table {
    const cfg_key *keys;
    size_t n;
    /* Cross-key checks after every key was applied; map is NULL when absent. */
    void (*finish)(cfg_ctx *c, yaml_node_t *map, void *base, bool present);
    const pr_cfgmap *cmap; /* NULL = none */
};

#define FSIZE(T, f)   sizeof(((T *)0)->f)
#define FSIGNED(T, f) ((__typeof__(((T *)0)->f))-1 < (__typeof__(((T *)0)->f))1)

#define K_INT(nm, T, f, lo, hi, d, dc)                                                             \
    {                                                                                              \
        .name = nm, .type = KT_INT, .off = offsetof(T, f), .width = FSIZE(T, f),                   \
        .is_signed = FSIGNED(T, f), .min = lo, .max = hi, .def = d, .doc = dc                      \
    }
#define K_BOOL(nm, T, f, d, dc)                                                                    \
    {                                                                                              \
        .name = nm, .type = KT_BOOL, .off = offsetof(T, f), .def = d, .doc = dc                    \
    }
#define K_STR(nm, T, f, fl, d, dc)                                                                 \
    {                                                                                              \
        .name = nm, .type = KT_STR, .flags = fl, .off = offsetof(T, f), .def = d, .doc = dc        \
    }
#define K_CHOICE(nm, T, f, nms, d, dc)                                                             \
    {                                                                                              \
        .name = nm, .type = KT_STR, .off = offsetof(T, f), .names = nms, .def = d, .doc = dc       \
    }
#define K_ENUM(nm, T, f, nms, d, dc)                                                               \
    {                                                                                              \
        .name = nm, .type = KT_ENUM, .off = offsetof(T, f), .names = nms, .def = d, .doc = dc      \
    }
#define K_HOSTPORT(nm, T, f, d, dc)                                                                \
    {                                                                                              \
        .name = nm, .type = KT_HOSTPORT, .off = offsetof(T, f), .def = d, .doc = dc                \
    }
#define K_MAP(nm, T, f, tab, dc)                                                                   \
    {                                                                                              \
        .name = nm, .type = KT_MAP, .off = offsetof(T, f), .sub = &tab, .doc = dc                  \
    }
/* A mapping level whose table addresses the same struct as its parent. */
#define K_MAP_FLAT(nm, tab, dc)                                                                    \
    {                                                                                              \
        .name = nm, .type = KT_MAP, .off = 0, .sub = &tab, .doc = dc                               \
    }
#define K_MAP_EN(nm, T, f, en, tab, dc)                                                            \
    {                                                                                              \
        .name = nm, .type = KT_MAP, .off = offsetof(T, f), .off2 = offsetof(T, en) + 1,            \
        .sub = &tab, .doc = dc                                                                     \
    }
#define K_CUSTOM(nm, fl, fnc, tdoc, d, dc)                                                         \
    {                                                                                              \
        .name = nm, .type = KT_CUSTOM, .flags = fl, .fn = fnc, .type_doc = tdoc, .def = d,         \
        .doc = dc                                                                                  \
    }
#define TABLE(arr, fin)                                                                            \
    {                                                                                              \
        arr, sizeof(arr) / sizeof(arr[0]), fin, NULL                                               \
    }
/* A level described by a component's table, optionally after own keys. */
#define CTABLE(cm, fin)                                                                            \
    {                                                                                              \
        NULL, 0, fin, &cm                                                                          \
    }
#define CTABLE_WITH(arr, cm, fin)                                                                  \
    {                                                                                              \
        arr, sizeof(arr) / sizeof(arr[0]), fin, &cm                                                \
    }

/* ---------------------------------------------------------------- helpers (pr_config.c) */

/* Record one error for the current path (or `sub` appended to it) at n's line. */
void pr__cfg_error(cfg_ctx *c, const yaml_node_t *n, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int pr__node_line(const cfg_ctx *c, const yaml_node_t *n);
/* Path of the value being read: push returns the old length for pop. */
size_t pr__path_push(cfg_ctx *c, const char *key);
size_t pr__path_push_index(cfg_ctx *c, size_t i);
void pr__path_pop(cfg_ctx *c, size_t old);
yaml_node_t *pr__node_get(cfg_ctx *c, int idx);
const char *pr__scalar(const yaml_node_t *n);
bool pr__is_null(const yaml_node_t *n);
/* Describe what was found ('abc', "a list") for "expected X, got Y". */
void pr__got(const yaml_node_t *n, char *b, size_t bn);
/* Scalar text of n, or NULL after recording "expected <what>, got ...". */
const char *pr__want_scalar(cfg_ctx *c, yaml_node_t *n, const char *what);
yaml_node_t *pr__map_find(cfg_ctx *c, yaml_node_t *map, const char *key);
int pr__names_find(const char *const *names, const char *s);
/* An integer scalar checked against k's range and field width. */
bool pr__parse_int_key(cfg_ctx *c, yaml_node_t *n, const cfg_key *k, uint64_t *out);
/* Apply mapping `map` (NULL = absent: defaults only) to `base` through `t`. */
void pr__apply_map(cfg_ctx *c, yaml_node_t *map, const cfg_table *t, void *base);

/* ---------------------------------------------------------------- the declared schema
 * (config_schema.c) */

/* [-+]digits: the text of a plain YAML integer, as an id or a value to
 * match reads it (true for "-0"; no range check). */
bool pr__is_int_text(const char *s);

/* Keys of schema.* that make a schema declared, and their item tables. */
extern const cfg_table pr__event_time_tab;
extern const cfg_table pr__label_item_tab;
extern const cfg_table pr__dense_item_tab;
extern const cfg_table pr__sparse_item_tab;
void pr__h_event_time(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
void pr__h_labels(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
/* schema.dense / schema.sparse: a Criteo count or a list of features. */
void pr__h_schema_count(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
void pr__h_cpu_ops(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
/* schema.filter: the record filter's conditions (pl->features.filter). */
extern const cfg_table pr__filter_item_tab;
void pr__h_filter(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
/* schema.downsample's keys (pl->features.downsample; its weight label is
 * added by pr__finish_schema). */
extern const cfg_table pr__downsample_tab;
/* The schema level's cross-key checks; a declared schema sets the spec. */
void pr__finish_schema(cfg_ctx *c, yaml_node_t *map, void *base, bool present);

/* source.protobuf (config_pbuser.c): the descriptor set loads, the message is
 * in it and every feature path names a field of the right shape. */
void pr__check_protobuf(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl);

/* source.avro with a fixed schema_file (config_avro.c): the writer schema
 * parses and, without a registry, every feature path resolves in it. */
void pr__check_avro(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl);

/* A format whose schema is known at load (config_schema.c): fn checks path
 * k of feature f against `schema` (0, or an error with errstr); each
 * failure is a config error at the path's key (schema.sparse[2].path,
 * schema.sparse[0].cross[1], schema.event_time.path). */
typedef int (*pr__path_check_fn)(const void *schema, const pr_feature_spec *f, uint8_t k,
                                 char *errstr, size_t errstr_size);
void pr__check_feature_paths(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl,
                             pr__path_check_fn fn, const void *schema);

/* ---------------------------------------------------------------- inference */

/* One event as a JSON object (config_infer.c): what pr_infer_add_json does
 * after parsing, for readers that make the object themselves (the Avro
 * records of config_infer_avro.c). The caller keeps root. 0 or PR_ENOMEM. */
struct json_t;
int pr__infer_add_root(pr_infer *inf, const struct json_t *root);
/* Markers a reader puts where a value no feature can read was: a string
 * starting with a zero byte and "piperec:", counted as such (NaN or an
 * infinity; a string that is not UTF-8; a Timestamp or Duration out of its
 * range), so that the field is left out with the reason while the record's
 * other fields are learnt. */
#define PR__INF_MARK_NONFINITE "\0piperec:non-finite"
#define PR__INF_MARK_BADUTF8   "\0piperec:not UTF-8"
#define PR__INF_MARK_BADTIME   "\0piperec:bad time" /* a Protobuf Timestamp or Duration */

/* A record that did not decode: counted as pr_infer_rejected. */
void pr__infer_reject(pr_infer *inf);
/* The Avro records were in schema-registry framing: the config says so. */
void pr__infer_set_avro_registry(pr_infer *inf);
/* With a writer schema or descriptor set the events' maps are known: while
 * records are added, map_at(schema, path) says whether the object at a
 * path may be a map (list: { from: keys }); one that cannot (a record, a
 * message) is never proposed as one, however many fields it has. NULL:
 * JSON, judged by its keys alone. time_at(schema, path) says whether the
 * value at a path is a time by its type (a Protobuf Timestamp read whole),
 * so that one no time word names can still be the event time (ranked after
 * every time-named field); NULL: by the name alone. */
typedef bool (*pr__infer_map_fn)(const void *schema, const char *path);
void pr__infer_set_schema(pr_infer *inf, const void *schema, pr__infer_map_fn map_at,
                          pr__infer_map_fn time_at);
/* One varint-delimited record's body: added, or counted as rejected; 0 or
 * PR_ENOMEM. */
typedef int (*pr__infer_record_fn)(void *ctx, pr_infer *inf, const uint8_t *body, size_t len);
/* The varint-delimited records of f (lengths of 6 bytes at most, as
 * `piperec process` reads them), each through one, until max_events events
 * were added or f ends; a length unreadable or beyond the input is counted
 * as a rejected record and ends the reading. 0, PR_EIO or PR_ENOMEM with
 * errstr ("WHAT: ..."). */
int pr__infer_read_delimited(pr_infer *inf, FILE *f, uint64_t max_events, pr__infer_record_fn one,
                             void *ctx, const char *what, char *errstr, size_t errstr_size);

#endif
