/*
 * pr_cfgmap.h — a component's configuration keys described as data: one
 * table per settings struct (key name, type, offsetof, default as text,
 * range or allowed values, one-line doc).
 *
 * Why a table: the component that reads a setting also owns its default, in
 * exactly one place. The YAML loader (config/) applies a file through these
 * tables, docs/configuration.md is generated from them, and a module created
 * programmatically (a test, a tool) gets the same values through
 * pr_cfgmap_set_defaults(), so docs, loader and module cannot disagree.
 *
 * An entry flagged PR_CFG_INTERNAL is a tuning knob that is not a YAML key:
 * it has a default here (applied by pr_cfgmap_set_defaults and by modules
 * for a zero field) but the loader and the docs skip it.
 *
 * Ownership: the tables are static and read-only. String defaults set by
 * pr_cfgmap_set_defaults point at the table's text (static; never free them).
 * Thread-safe: nothing here has state.
 *
 * Errors: 0 or a negative PR_E* code (pr_error.h).
 */
#ifndef PR_CFGMAP_H
#define PR_CFGMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------------- key/value lists */

/* Ordered string key/value pairs, passed through to librdkafka untouched
 * (YAML numbers and booleans arrive here as their text: "5", "true"). The
 * strings belong to whoever filled the list (pr_config owns its own). */
typedef struct pr_kv {
    const char *key;
    const char *value;
} pr_kv;

typedef struct pr_kv_list {
    pr_kv *items;
    size_t n;
} pr_kv_list;

/* Value of `key`, or NULL. The last occurrence wins. */
const char *pr_kv_get(const pr_kv_list *l, const char *key);

/* A librdkafka property's value may name where it is kept instead of holding
 * it, so that secrets stay out of the config file: the whole value
 * `${env:NAME}` is that environment variable, `${file:PATH}` that file's
 * content, trailing newlines dropped (a mounted Kubernetes Secret); `$${...}`
 * is the literal `${...}`. Lists keep the value as written: it is resolved
 * only where a Kafka client is built (pr_kafka), so commands that build none
 * (process, explain, vocab) need no secret.
 *
 * pr_kv_ref_check: 0, or PR_EINVAL when `raw` begins with ${ but is neither
 * reference (the message never quotes the value: it may be a secret).
 * pr_kv_ref_resolve: the value to use, malloc'd into *out; PR_EINVAL (an
 * unset variable, a malformed reference), PR_EIO (an unreadable file),
 * PR_ENOMEM, errstr saying which. */
int pr_kv_ref_check(const char *raw, char *errstr, size_t errstr_size);
int pr_kv_ref_resolve(const char *raw, char **out, char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- tables */

typedef enum pr_cfg_type {
    PR_CFG_BOOL,     /* bool */
    PR_CFG_INT,      /* signed or unsigned integer field (width from the field) */
    PR_CFG_STR,      /* const char *; `names` (when set) restricts the values */
    PR_CFG_ENUM,     /* int-sized enum; value = index in `names` */
    PR_CFG_SIZE,     /* uint64_t bytes; the text may carry a unit (KiB, MB...) */
    PR_CFG_HOSTPORT, /* const char * "host:port" (pr_hostport.h) */
    PR_CFG_STRLIST,  /* char ** at off, size_t count at off2 */
    PR_CFG_KV,       /* pr_kv_list */
} pr_cfg_type;

#define PR_CFG_REQUIRED 1u /* must be present when the enclosing mapping is */
#define PR_CFG_NONEMPTY 2u /* STR: at least one character; STRLIST: one item */
#define PR_CFG_INTERNAL 4u /* not a YAML key: a default for programmatic users only */

typedef struct pr_cfgmap_entry {
    const char *name; /* YAML key within its section */
    pr_cfg_type type;
    unsigned flags;           /* PR_CFG_* */
    size_t off;               /* offsetof the field in the settings struct */
    size_t off2;              /* STRLIST: offsetof the size_t count */
    uint8_t width;            /* INT: sizeof the field */
    bool is_signed;           /* INT */
    int64_t min;              /* INT, SIZE */
    uint64_t max;             /* INT, SIZE; 0 = the field's own limit */
    const char *const *names; /* ENUM, STR: NULL-terminated allowed values */
    const char *def;          /* default as YAML text; NULL = none (field stays 0) */
    const char *doc;          /* one line for docs/configuration.md */
} pr_cfgmap_entry;

typedef struct pr_cfgmap {
    const pr_cfgmap_entry *entries;
    size_t n;
} pr_cfgmap;

#define PR__CFG_FSIZE(T, f)   sizeof(((T *)0)->f)
#define PR__CFG_FSIGNED(T, f) ((__typeof__(((T *)0)->f))-1 < (__typeof__(((T *)0)->f))1)

/* Entry builders: KEY, struct type, field, ..., default text (or NULL), doc. */
#define PR_CFG_E_INT(nm, fl, T, f, lo, hi, d, dc)                                                  \
    {                                                                                              \
        .name = nm, .type = PR_CFG_INT, .flags = fl, .off = offsetof(T, f),                        \
        .width = PR__CFG_FSIZE(T, f), .is_signed = PR__CFG_FSIGNED(T, f), .min = lo, .max = hi,    \
        .def = d, .doc = dc                                                                        \
    }
#define PR_CFG_E_BOOL(nm, T, f, d, dc)                                                             \
    {                                                                                              \
        .name = nm, .type = PR_CFG_BOOL, .off = offsetof(T, f), .def = d, .doc = dc                \
    }
#define PR_CFG_E_STR(nm, fl, T, f, d, dc)                                                          \
    {                                                                                              \
        .name = nm, .type = PR_CFG_STR, .flags = fl, .off = offsetof(T, f), .def = d, .doc = dc    \
    }
#define PR_CFG_E_CHOICE(nm, T, f, nms, d, dc)                                                      \
    {                                                                                              \
        .name = nm, .type = PR_CFG_STR, .off = offsetof(T, f), .names = nms, .def = d, .doc = dc   \
    }
#define PR_CFG_E_ENUM(nm, T, f, nms, d, dc)                                                        \
    {                                                                                              \
        .name = nm, .type = PR_CFG_ENUM, .off = offsetof(T, f), .names = nms, .def = d, .doc = dc  \
    }
#define PR_CFG_E_HOSTPORT(nm, T, f, d, dc)                                                         \
    {                                                                                              \
        .name = nm, .type = PR_CFG_HOSTPORT, .off = offsetof(T, f), .def = d, .doc = dc            \
    }
#define PR_CFG_E_KV(nm, T, f, dc)                                                                  \
    {                                                                                              \
        .name = nm, .type = PR_CFG_KV, .off = offsetof(T, f), .doc = dc                            \
    }
#define PR_CFGMAP(arr)                                                                             \
    {                                                                                              \
        arr, sizeof(arr) / sizeof(arr[0])                                                          \
    }

/* Set every field of `base` that has a default to that default (string
 * fields point at the table's text). Fields without one are left alone.
 * PR_EINVAL when a default text does not parse (a bug in the table). */
int pr_cfgmap_set_defaults(const pr_cfgmap *m, void *base);

/* The same, only for fields that are 0 / NULL: for modules whose API keeps
 * "0 = the default" so that a zeroed struct still means the documented
 * values. Booleans and enums are left alone (0 is a real value there). */
int pr_cfgmap_default_zero(const pr_cfgmap *m, void *base);

/* Index of `s` in a NULL-terminated list of names, or -1. */
int pr_cfgmap_name_index(const char *const *names, const char *s);

/* Parse a size: plain number or with a unit B, KiB, MiB, GiB, TiB, KB, MB,
 * GB, TB (optional space before the unit). Returns 0 or PR_EINVAL. */
int pr_cfgmap_parse_size(const char *s, uint64_t *out);

/* Parse a YAML boolean (true/yes/on, false/no/off, any case). */
bool pr_cfgmap_parse_bool(const char *s, bool *out);
/* Store v into an unsigned/signed integer field of `width` bytes (1, 2, 4, 8). */
void pr_cfgmap_store_int(void *p, int width, uint64_t v);

#endif
