/*
 * pr_config.c — YAML config -> pr_config, driven by key tables.
 *
 * Each mapping level of the config has a table of keys (name, type, where the
 * value goes, range, default, one-line doc). One walker applies a YAML
 * mapping to a struct through its table, so the checks every key needs
 * (unknown keys, duplicates, wrong types, ranges, enums, defaults) are written
 * once, and the same tables generate the key reference
 * (pr_config_write_reference) and free owned strings.
 *
 * A section that belongs to a component (batch, sinks.*, source, engine) is
 * described by that component's own table (pr_cfgmap.h, exported from its
 * public header) and filled straight into its struct, so its defaults exist
 * once and the service only wires the structs through. This file keeps the
 * structure (pipelines, schema, transform) and the service's sections (http,
 * limits, state, log), whose owner sits above this layer.
 *
 * The declared feature schema (schema.event_time / labels / dense: [...] /
 * sparse: [...] / cpu_ops) is read by config_schema.c through the same walker
 * (pr_config_int.h); without one, finish_pipeline builds the Criteo preset
 * of the spec, and the root's finish checks operator placement against
 * engine.backend.
 *
 * Keys are applied in TABLE order, not document order: `schema` is read before
 * `transform` and `vocab` before `columns`, so a per-column override always
 * lands on top of the pipeline-wide values whatever order the user wrote.
 *
 * The YAML is loaded as a libyaml document (a node tree with line marks).
 * pr_config_set() edits that tree (it keeps the source text and the list of
 * overrides) and rebuilds the whole config, so an override goes through
 * exactly the checks a file does.
 *
 * Errors are collected (up to PR__MAX_ERRORS) as "origin:line: path: problem"
 * lines, and loading fails if there was any.
 */
#include "pr_config.h"
#include "pr_config_int.h"
#include "pr_hostport.h"
#include "pr_kafka.h"
#include "pr_log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define PR__MAX_ERRORS      20
#define PR__DEFAULT_MODULUS 524288u

/* ---------------------------------------------------------------- enum names */

/* source.format, batch.ordering and batch.late_policy names belong to the
 * components: pr_msg_format_names (ingest), pr_batch_*_names (batcher). */
static const char *const count_mode_names[] = {"streaming", "two_pass", NULL};
/* Indexed by pr_log_level. */
static const char *const log_level_names[] = {"error", "warn", "info", "debug", NULL};

int pr__names_find(const char *const *names, const char *s)
{
    return pr_cfgmap_name_index(names, s);
}

static const char *pr__names_get(const char *const *names, int count, int v)
{
    return v >= 0 && v < count ? names[v] : "?";
}

const char *pr_source_format_name(pr_source_format f)
{
    return pr__names_get(pr_msg_format_names, PR_FORMAT__COUNT, (int)f);
}
int pr_source_format_from_name(const char *s)
{
    return s ? pr__names_find(pr_msg_format_names, s) : -1;
}

/* ---------------------------------------------------------------- the default config */

static const char default_yaml[] =
    "# piperec default config: the Criteo Kaggle/Terabyte layout, DLRM-style.\n"
    "pipelines:\n"
    "  - name: criteo\n"
    "    source:\n"
    "      kafka:\n"
    "        topics: [events]\n"
    "        group.id: piperec-criteo\n"
    "        properties:\n"
    "          bootstrap.servers: \"127.0.0.1:0\"   # unroutable; `piperec demo` sets it\n"
    "          auto.offset.reset: earliest\n"
    "      format: criteo_tsv\n"
    "    schema: { label: true, dense: 13, sparse: 26 }\n"
    "    transform:\n"
    "      dense: [neg2zero, log1p]\n"
    "      sparse: [hex2int, { modulus: 524288 }, vocab]\n"
    "      vocab: { profile: dlrm, min_count: 1, capacity: 0, count_mode: streaming }\n"
    "    batch: { size: 4096, max_delay_ms: 100, ordering: partition }\n"
    "    sinks:\n"
    "      trainer: { listen: \"127.0.0.1:7070\", max_unacked_batches: 64, ack_timeout_ms: 30000 "
    "}\n"
    "http: { listen: \"127.0.0.1:9464\" }\n"
    "engine: { backend: cpu, threads: 2 }\n"
    "limits: { max_inflight_bytes: 256MiB }\n"
    "log: { level: info }\n";

const char *pr_config_default_yaml(void)
{
    return default_yaml;
}

/* The loader context (cfg_ctx) and the key-table types are in pr_config_int.h. */

int pr__node_line(const cfg_ctx *c, const yaml_node_t *n)
{
    if (!n || n == &c->synth || !c->doc)
        return 0;
    ptrdiff_t idx = n - c->doc->nodes.start;
    if (idx < 0 || idx >= c->n_loaded)
        return 0;
    return (int)n->start_mark.line + 1;
}

/* Record one error for the current path (or `sub` appended to it). */
void pr__cfg_error(cfg_ctx *c, const yaml_node_t *n, const char *sub, const char *fmt, ...)
{
    c->n_errors++;
    if (!c->err || c->errn == 0 || c->n_errors > PR__MAX_ERRORS + 1)
        return;
    char msg[1400];
    if (c->n_errors == PR__MAX_ERRORS + 1) {
        snprintf(msg, sizeof(msg), "(more errors not shown)");
    } else {
        char where[64] = "";
        int line = n ? pr__node_line(c, n) : c->line_hint;
        if (line > 0)
            snprintf(where, sizeof(where), ":%d", line);
        else if (n && n != &c->synth && c->doc && n - c->doc->nodes.start >= c->n_loaded)
            snprintf(where, sizeof(where), " (override)");
        char path[PR__PATH_MAX + 80];
        snprintf(path, sizeof(path), "%s%s%s", c->path,
                 sub && c->pathlen && sub[0] != '[' ? "." : "", sub ? sub : "");
        char text[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        snprintf(msg, sizeof(msg), "%s%s: %s%s%s", c->origin, where, path, path[0] ? ": " : "",
                 text);
    }
    if (c->errlen >= c->errn - 1)
        return;
    int w = snprintf(c->err + c->errlen, c->errn - c->errlen, "%s%s", c->errlen ? "\n" : "", msg);
    if (w > 0)
        c->errlen += (size_t)w < c->errn - c->errlen ? (size_t)w : c->errn - c->errlen - 1;
}

size_t pr__path_push(cfg_ctx *c, const char *key)
{
    size_t old = c->pathlen;
    int w = snprintf(c->path + old, sizeof(c->path) - old, "%s%s", old && key[0] != '[' ? "." : "",
                     key);
    if (w > 0)
        c->pathlen = old + (size_t)w < sizeof(c->path) ? old + (size_t)w : sizeof(c->path) - 1;
    return old;
}

size_t pr__path_push_index(cfg_ctx *c, size_t i)
{
    char b[32];
    snprintf(b, sizeof(b), "[%zu]", i);
    return pr__path_push(c, b);
}

void pr__path_pop(cfg_ctx *c, size_t old)
{
    c->pathlen = old;
    c->path[old] = '\0';
}

/* ---------------------------------------------------------------- node helpers */

yaml_node_t *pr__node_get(cfg_ctx *c, int idx)
{
    return yaml_document_get_node(c->doc, idx);
}

const char *pr__scalar(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

bool pr__is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = pr__scalar(n);
    return !s[0] || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

static const char *pr__node_kind(const yaml_node_t *n)
{
    switch (n->type) {
    case YAML_MAPPING_NODE:
        return "a mapping";
    case YAML_SEQUENCE_NODE:
        return "a list";
    default:
        return pr__is_null(n) ? "nothing" : "a scalar";
    }
}

/* Describe what was found: 'abc' for scalars, "a list" otherwise. */
void pr__got(const yaml_node_t *n, char *b, size_t bn)
{
    if (n->type == YAML_SCALAR_NODE && !pr__is_null(n))
        snprintf(b, bn, "'%.80s'", pr__scalar(n));
    else
        snprintf(b, bn, "%s", pr__node_kind(n));
}

/* Scalar text of n, or NULL after recording "expected <what>, got ...". */
const char *pr__want_scalar(cfg_ctx *c, yaml_node_t *n, const char *what)
{
    if (n->type == YAML_SCALAR_NODE && !pr__is_null(n))
        return pr__scalar(n);
    char g[96];
    pr__got(n, g, sizeof(g));
    pr__cfg_error(c, n, NULL, "expected %s, got %s", what, g);
    return NULL;
}

yaml_node_t *pr__map_find(cfg_ctx *c, yaml_node_t *map, const char *key)
{
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = pr__node_get(c, p->key);
        if (k && k->type == YAML_SCALAR_NODE && strcmp(pr__scalar(k), key) == 0)
            return pr__node_get(c, p->value);
    }
    return NULL;
}

/* A name for pipelines and columns: used in metric labels, file names, paths. */
static bool pr__valid_name(const char *s, size_t cap)
{
    size_t n = strlen(s);
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static void pr__join_names(const char *const *names, char *b, size_t bn)
{
    size_t len = 0;
    b[0] = '\0';
    for (int i = 0; names[i] && len < bn; i++) {
        int w = snprintf(b + len, bn - len, "%s%s", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* A component entry as a loader key. */
static cfg_key pr__key_from_entry(const pr_cfgmap_entry *e)
{
    static const enum key_type types[] = {
        [PR_CFG_BOOL] = KT_BOOL,       [PR_CFG_INT] = KT_INT,   [PR_CFG_STR] = KT_STR,
        [PR_CFG_ENUM] = KT_ENUM,       [PR_CFG_SIZE] = KT_SIZE, [PR_CFG_HOSTPORT] = KT_HOSTPORT,
        [PR_CFG_STRLIST] = KT_STRLIST, [PR_CFG_KV] = KT_KV,
    };
    cfg_key k = {
        .name = e->name,
        .type = types[e->type],
        .flags = ((e->flags & PR_CFG_REQUIRED) ? KF_REQUIRED : 0) |
                 ((e->flags & PR_CFG_NONEMPTY) ? KF_NONEMPTY : 0),
        .off = e->off,
        .off2 = e->off2,
        .width = e->width,
        .is_signed = e->is_signed,
        .min = e->min,
        .max = e->max,
        .names = e->names,
        .def = e->def,
        .doc = e->doc,
    };
    return k;
}

/* Keys of a level: its own, then the component's YAML keys (internal
 * entries are not YAML keys). */
static size_t pr__table_n(const cfg_table *t)
{
    size_t n = t->n;
    for (size_t i = 0; t->cmap && i < t->cmap->n; i++)
        n += !(t->cmap->entries[i].flags & PR_CFG_INTERNAL);
    return n;
}

static cfg_key pr__table_key(const cfg_table *t, size_t i)
{
    if (i < t->n)
        return t->keys[i];
    i -= t->n;
    for (size_t j = 0; t->cmap && j < t->cmap->n; j++) {
        const pr_cfgmap_entry *e = &t->cmap->entries[j];
        if (e->flags & PR_CFG_INTERNAL)
            continue;
        if (i-- == 0)
            return pr__key_from_entry(e);
    }
    abort(); /* i out of range: a bug in a caller */
}

/* ---------------------------------------------------------------- scalar parsers */

int pr_config_parse_size(const char *s, uint64_t *out)
{
    return pr_cfgmap_parse_size(s, out);
}

static bool pr__parse_bool(const char *s, bool *out)
{
    return pr_cfgmap_parse_bool(s, out);
}

/* Parse an integer scalar and check it against k's range and field width. */
bool pr__parse_int_key(cfg_ctx *c, yaml_node_t *n, const cfg_key *k, uint64_t *out)
{
    const char *s = pr__want_scalar(c, n, "an integer");
    if (!s)
        return false;
    char *end;
    errno = 0;
    bool neg = s[0] == '-';
    int64_t sv = 0;
    uint64_t uv = 0;
    if (neg)
        sv = strtoll(s, &end, 10);
    else
        uv = strtoull(s, &end, 10);
    if (end == s || *end || !(isdigit((unsigned char)s[0]) || s[0] == '-' || s[0] == '+')) {
        pr__cfg_error(c, n, NULL, "expected an integer, got '%.80s'", s);
        return false;
    }
    if (errno) {
        pr__cfg_error(c, n, NULL, "%.80s is out of range", s);
        return false;
    }
    uint64_t fmax = k->is_signed ? (uint64_t)INT64_MAX >> (64 - 8 * k->width)
                                 : UINT64_MAX >> (64 - 8 * k->width);
    uint64_t max = k->max && k->max < fmax ? k->max : fmax;
    bool low = neg ? sv < k->min : (k->min > 0 && uv < (uint64_t)k->min);
    if (low || (!neg && uv > max)) {
        if (max == fmax && k->min == 0)
            pr__cfg_error(c, n, NULL, "must be >= 0 and <= %" PRIu64 ", got %s", max, s);
        else if (max == fmax)
            pr__cfg_error(c, n, NULL, "must be >= %" PRId64 ", got %s", k->min, s);
        else
            pr__cfg_error(c, n, NULL, "must be between %" PRId64 " and %" PRIu64 ", got %s", k->min,
                          max, s);
        return false;
    }
    *out = neg ? (uint64_t)sv : uv;
    return true;
}

static char *pr__xstrdup(const char *s)
{
    char *d = strdup(s);
    if (!d)
        abort(); /* config loading is startup-only; no sensible recovery */
    return d;
}

static void *pr__xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        abort();
    return p;
}

static void pr__set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? pr__xstrdup(s) : NULL;
}

static void pr__kv_free(pr_kv_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free((void *)l->items[i].key);
        free((void *)l->items[i].value);
    }
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

static void pr__strlist_free(char ***v, size_t *n)
{
    for (size_t i = 0; i < *n; i++)
        free((*v)[i]);
    free(*v);
    *v = NULL;
    *n = 0;
}

/* ---------------------------------------------------------------- applying one key */

/* One setter per key type: parse node n (a YAML value) into the field of k
 * at base, or report why not with pr__cfg_error(). pr__apply_key() dispatches
 * through key_setters[]. */
static void pr__set_bool(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    if (!(s = pr__want_scalar(c, n, "true or false")))
        return;
    if (!pr__parse_bool(s, (bool *)p))
        pr__cfg_error(c, n, NULL, "expected true or false, got '%.80s'", s);
}

static void pr__set_int(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    uint64_t v;
    if (pr__parse_int_key(c, n, k, &v))
        pr_cfgmap_store_int(p, k->width, v);
}

static void pr__set_str_key(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    char b[256];
    if (n->type == YAML_SCALAR_NODE && pr__is_null(n) && !(k->flags & KF_NONEMPTY) && !k->names) {
        pr__set_str((char **)p, NULL);
        return;
    }
    if (!(s = pr__want_scalar(c, n, "a string")))
        return;
    /* dir: "" would pass here and fail later without naming the key (in a
     * section switched off, nothing reads it). */
    if (!*s && (k->flags & KF_NONEMPTY) && !c->off) {
        pr__cfg_error(c, n, NULL, "must not be an empty string");
        return;
    }
    if (k->names && pr__names_find(k->names, s) < 0) {
        pr__join_names(k->names, b, sizeof(b));
        pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: %s)", s, b);
        return;
    }
    pr__set_str((char **)p, s);
}

static void pr__set_name(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    if (!(s = pr__want_scalar(c, n, "a name")))
        return;
    if (!pr__valid_name(s, k->width)) {
        pr__cfg_error(c, n, NULL, "invalid name '%.80s' (1..%d characters of A-Z a-z 0-9 _ -)", s,
                      k->width - 1);
        return;
    }
    snprintf(p, k->width, "%s", s);
}

static void pr__set_enum(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    char b[256];
    if (!(s = pr__want_scalar(c, n, "a string")))
        return;
    int v = pr__names_find(k->names, s);
    if (v < 0) {
        pr__join_names(k->names, b, sizeof(b));
        pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: %s)", s, b);
        return;
    }
    *(int *)p = v;
}

static void pr__set_size(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    uint64_t v;
    if (!(s = pr__want_scalar(c, n, "a size")))
        return;
    if (pr_config_parse_size(s, &v) < 0) {
        pr__cfg_error(c, n, NULL,
                      "expected a size (a number, optionally with B, KiB, MiB, GiB, TiB, KB, MB, "
                      "GB or TB), got '%.80s'",
                      s);
        return;
    }
    if (v < (uint64_t)k->min || (k->max && v > k->max)) {
        if (k->max)
            pr__cfg_error(c, n, NULL, "must be between %" PRId64 " and %" PRIu64 " bytes, got %s",
                          k->min, k->max, s);
        else
            pr__cfg_error(c, n, NULL, "must be at least %" PRId64 " bytes, got %s", k->min, s);
        return;
    }
    *(uint64_t *)p = v;
}

static void pr__set_hostport(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    if (!(s = pr__want_scalar(c, n, "an address host:port")))
        return;
    if (pr_hostport_parse(s, NULL, 0, NULL) < 0) {
        pr__cfg_error(c, n, NULL,
                      "expected an address host:port (e.g. \"0.0.0.0:7070\" or \"[::1]:7070\"), "
                      "got '%.80s'",
                      s);
        return;
    }
    pr__set_str((char **)p, s);
}

static void pr__set_strlist(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    char b[256];
    char ***v = (char ***)p;
    size_t *cnt = (size_t *)((char *)base + k->off2);
    if (n->type == YAML_SCALAR_NODE && !pr__is_null(n)) { /* one item: topics: events */
        if (!*pr__scalar(n) && (k->flags & KF_NONEMPTY)) {
            pr__cfg_error(c, n, NULL, "must not be an empty string");
            return;
        }
        pr__strlist_free(v, cnt);
        *v = pr__xcalloc(1, sizeof(char *));
        (*v)[0] = pr__xstrdup(pr__scalar(n));
        *cnt = 1;
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, b, sizeof(b));
        pr__cfg_error(c, n, NULL, "expected a list of strings, got %s", b);
        return;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items == 0 && (k->flags & KF_NONEMPTY)) {
        pr__cfg_error(c, n, NULL, "must not be empty");
        return;
    }
    pr__strlist_free(v, cnt);
    *v = pr__xcalloc(items, sizeof(char *));
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        if ((s = pr__want_scalar(c, it, "a string"))) {
            /* topics: [''] would subscribe to nothing and fail only at run time. */
            if (!*s && (k->flags & KF_NONEMPTY))
                pr__cfg_error(c, it, NULL, "must not be an empty string");
            else
                (*v)[(*cnt)++] = pr__xstrdup(s);
        }
        pr__path_pop(c, old);
    }
}

/* A property's value as written; a malformed ${...} reference is an error
 * here, and a well-formed one is resolved only when a Kafka client is built
 * (pr_kv_ref_resolve), so a command that builds none needs no secret.
 * Returns a malloc'd copy, or NULL after recording the error. */
static char *pr__kv_value(cfg_ctx *c, yaml_node_t *n, const char *s)
{
    char err[256];
    if (pr_kv_ref_check(s, err, sizeof(err))) {
        pr__cfg_error(c, n, NULL, "%s", err);
        return NULL;
    }
    return pr__xstrdup(s);
}

static void pr__set_kv(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    const char *s;
    char b[256];
    pr_kv_list *l = (pr_kv_list *)p;
    if (n->type == YAML_SCALAR_NODE && pr__is_null(n))
        return;
    if (n->type != YAML_MAPPING_NODE) {
        pr__got(n, b, sizeof(b));
        pr__cfg_error(c, n, NULL, "expected a mapping of name: value, got %s", b);
        return;
    }
    pr__kv_free(l);
    size_t items = (size_t)(n->data.mapping.pairs.top - n->data.mapping.pairs.start);
    l->items = pr__xcalloc(items, sizeof(pr_kv));
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *kn = pr__node_get(c, n->data.mapping.pairs.start[i].key);
        yaml_node_t *vn = pr__node_get(c, n->data.mapping.pairs.start[i].value);
        const char *ks = pr__want_scalar(c, kn, "a property name");
        if (!ks)
            continue;
        size_t old = pr__path_push(c, ks);
        /* Numbers and booleans keep their text: librdkafka wants strings. */
        char *v;
        if ((s = pr__want_scalar(c, vn, "a value (string, number or boolean)")) &&
            (v = pr__kv_value(c, vn, s))) {
            l->items[l->n].key = pr__xstrdup(ks);
            l->items[l->n].value = v;
            l->n++;
        }
        pr__path_pop(c, old);
    }
}

static void pr__set_map(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    char *p = (char *)base + k->off;
    if (k->off2)
        *(bool *)((char *)base + k->off2 - 1) = true;
    if (n->type == YAML_SCALAR_NODE && pr__is_null(n)) /* `trainer:` alone = all defaults */
        n = NULL;
    pr__apply_map(c, n, k->sub, p);
}

static void pr__set_custom(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    k->fn(c, n, base, k);
}

static void (*const key_setters[])(cfg_ctx *, yaml_node_t *, void *, const cfg_key *) = {
    [KT_BOOL] = pr__set_bool,         [KT_INT] = pr__set_int,         [KT_STR] = pr__set_str_key,
    [KT_NAME] = pr__set_name,         [KT_ENUM] = pr__set_enum,       [KT_SIZE] = pr__set_size,
    [KT_HOSTPORT] = pr__set_hostport, [KT_STRLIST] = pr__set_strlist, [KT_KV] = pr__set_kv,
    [KT_MAP] = pr__set_map,           [KT_CUSTOM] = pr__set_custom,
};

static void pr__apply_key(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    key_setters[k->type](c, n, base, k);
}

static bool pr__key_takes_scalar_default(const cfg_key *k)
{
    return k->def && !(k->flags & KF_DOC_DEFAULT) && k->type != KT_MAP && k->type != KT_KV &&
           k->type != KT_STRLIST;
}

static void pr__apply_default(cfg_ctx *c, void *base, const cfg_key *k)
{
    memset(&c->synth, 0, sizeof(c->synth));
    c->synth.type = YAML_SCALAR_NODE;
    c->synth.data.scalar.value = (yaml_char_t *)k->def;
    c->synth.data.scalar.length = strlen(k->def);
    c->synth.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
    pr__apply_key(c, &c->synth, base, k);
}

static void pr__list_keys(const cfg_table *t, char *b, size_t bn)
{
    size_t len = 0;
    b[0] = '\0';
    for (size_t i = 0; i < pr__table_n(t) && len < bn; i++) {
        int w = snprintf(b + len, bn - len, "%s%s", i ? ", " : "", pr__table_key(t, i).name);
        if (w < 0)
            break;
        len += (size_t)w;
    }
}

/* Apply mapping `map` (NULL = absent: defaults only) to `base` through `t`. */
void pr__apply_map(cfg_ctx *c, yaml_node_t *map, const cfg_table *t, void *base)
{
    bool present = map != NULL;
    if (map && map->type != YAML_MAPPING_NODE) {
        char g[96];
        pr__got(map, g, sizeof(g));
        pr__cfg_error(c, map, NULL, "expected a mapping, got %s", g);
        return;
    }
    /* A section switched off (`kafka: { enabled: false }`) needs none of its
     * required keys: it is not used. */
    bool off = false;
    yaml_node_t *en = pr__map_find(c, map, "enabled");
    if (en && en->type == YAML_SCALAR_NODE && !pr__is_null(en)) {
        bool on;
        off = pr__parse_bool(pr__scalar(en), &on) && !on;
    }
    yaml_node_t *saved_map = c->map;
    bool saved_off = c->off;
    c->map = map;
    c->off = off || saved_off;
    /* Unknown and duplicate keys. */
    if (map) {
        for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
             p++) {
            yaml_node_t *kn = pr__node_get(c, p->key);
            if (kn->type != YAML_SCALAR_NODE) {
                pr__cfg_error(c, kn, NULL, "keys must be plain names, got %s", pr__node_kind(kn));
                continue;
            }
            const char *ks = pr__scalar(kn);
            bool known = false;
            for (size_t i = 0; i < pr__table_n(t) && !known; i++)
                known = strcmp(pr__table_key(t, i).name, ks) == 0;
            if (!known) {
                char valid[512];
                pr__list_keys(t, valid, sizeof(valid));
                pr__cfg_error(c, kn, ks, "unknown key (valid: %s)", valid);
                continue;
            }
            for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
                yaml_node_t *qk = pr__node_get(c, q->key);
                if (qk->type == YAML_SCALAR_NODE && strcmp(pr__scalar(qk), ks) == 0) {
                    pr__cfg_error(c, kn, ks, "duplicate key (first at line %d)",
                                  pr__node_line(c, qk));
                    break;
                }
            }
        }
    }
    for (size_t i = 0; i < pr__table_n(t); i++) {
        const cfg_key key = pr__table_key(t, i), *k = &key;
        yaml_node_t *v = pr__map_find(c, map, k->name);
        size_t old = pr__path_push(c, k->name);
        if (v) {
            pr__apply_key(c, v, base, k);
        } else if ((k->flags & KF_REQUIRED) && present && !off) {
            pr__cfg_error(c, map, NULL, "missing (required)");
        } else if (k->type == KT_MAP) {
            pr__apply_map(c, NULL, k->sub, (char *)base + k->off);
        } else if (pr__key_takes_scalar_default(k)) {
            pr__apply_default(c, base, k);
        }
        pr__path_pop(c, old);
        c->map = map;
    }
    if (t->finish)
        t->finish(c, map, base, present);
    c->map = saved_map;
    c->off = saved_off;
}

/* ---------------------------------------------------------------- source, batch, sinks, state */

static void pr__finish_kafka_source(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)map;
    (void)present;
    pr_kafka_source_cfg *k = base;
    if (!k->group_id && c->pl) {
        char b[PR_NAME_MAX + 16];
        snprintf(b, sizeof(b), "piperec-%s", c->pl->name);
        k->group_id = pr__xstrdup(b);
    }
}

static const cfg_table kafka_source_tab = CTABLE(pr_kafka_source_cfgmap, pr__finish_kafka_source);

static const cfg_table avro_source_tab = CTABLE(pr_avro_source_cfgmap, NULL);
static const cfg_table registry_tab = CTABLE(pr_registry_cfgmap, NULL);
static const cfg_table pbuser_tab = CTABLE(pr_pbuser_cfgmap, NULL);

static const cfg_key source_keys[] = {
    K_MAP_EN("kafka", pr_source_cfg, kafka, kafka.enabled, kafka_source_tab,
             "The Kafka consumer. Needed by `run`; `process` reads a file instead."),
    K_MAP_EN("avro", pr_source_cfg, avro, avro.enabled, avro_source_tab,
             "format avro: the writer schema file and the framing (docs/formats.md, Avro)."),
    K_MAP_EN("schema_registry", pr_source_cfg, schema_registry, schema_registry.enabled,
             registry_tab,
             "A schema registry: each framed message's schema id selects its writer schema "
             "(format avro)."),
    K_MAP_EN("protobuf", pr_source_cfg, protobuf, protobuf.enabled, pbuser_tab,
             "format protobuf: the events' descriptor set and message (docs/formats.md, "
             "Protobuf events)."),
};
/* Is `topic` one the source reads: a name in the list, or a match of a
 * "^regex" entry (librdkafka's subscription patterns, POSIX extended)? */
static bool pr__source_reads(const pr_kafka_source_cfg *k, const char *topic)
{
    for (size_t i = 0; i < k->n_topics; i++) {
        const char *t = k->topics[i];
        if (t[0] != '^') {
            if (!strcmp(t, topic))
                return true;
            continue;
        }
        regex_t re;
        if (regcomp(&re, t, REG_EXTENDED | REG_NOSUB) == 0) {
            bool m = regexec(&re, topic, 0, NULL, 0) == 0;
            regfree(&re);
            if (m)
                return true;
        }
    }
    return false;
}

/* Avro needs a writer schema from somewhere; plain framing cannot carry ids.
 * The dead-letter topic is never one the source reads: each rejected record
 * would come back, be rejected and be produced again, forever. */
static void pr__finish_source(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)present;
    pr_source_cfg *s = base;
    if (s->dead_letter_topic && pr__source_reads(&s->kafka, s->dead_letter_topic))
        pr__cfg_error(c, pr__map_find(c, map, "dead_letter_topic"), "dead_letter_topic",
                      "'%s' is a topic this source reads: every rejected record would be read "
                      "again, rejected again and produced again, without end; give the dead "
                      "letters a topic of their own",
                      s->dead_letter_topic);
    bool reg = s->schema_registry.enabled, file = s->avro.enabled && s->avro.schema_file;
    if (s->format != PR_FORMAT_AVRO) {
        if (s->avro.enabled)
            pr__cfg_error(c, pr__map_find(c, map, "avro"), "avro", "only for format avro");
        return;
    }
    if (!reg && !file)
        pr__cfg_error(c, pr__map_find(c, map, "format"), "format",
                      "avro needs a writer schema: source.avro.schema_file or "
                      "source.schema_registry");
    if (reg && !file && s->avro.framing == PR_AVRO_FRAMING_PLAIN)
        pr__cfg_error(c, pr__map_find(c, map, "avro"), "avro.framing",
                      "plain messages carry no schema id: the registry needs framing registry "
                      "(or auto), or give source.avro.schema_file");
}

/* kafka, avro, schema_registry, then the component's keys: format, dead_letter_topic. */
static const cfg_table source_tab = CTABLE_WITH(source_keys, pr_source_cfgmap, pr__finish_source);

static void pr__finish_batch(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)present;
    pr_batch_cfg *b = base;
    if (b->late_policy == PR_LATE_DROP_TO_DLQ && c->pl && !c->pl->source.dead_letter_topic)
        pr__cfg_error(c, pr__map_find(c, map, "late_policy"), "late_policy",
                      "drop_to_dlq needs source.dead_letter_topic");
}

static const cfg_table batch_tab = CTABLE(pr_batch_cfgmap, pr__finish_batch);

static const cfg_table trainer_tls_tab = CTABLE(pr_sink_trainer_tls_cfgmap, NULL);
static const cfg_table trainer_auth_tab = CTABLE(pr_sink_trainer_auth_cfgmap, NULL);
static const cfg_key trainer_keys[] = {
    K_MAP_EN("tls", pr_trainer_sink_cfg, tls, tls.enabled, trainer_tls_tab,
             "TLS on the trainer port (OpenSSL); off = plain TCP. See docs/operations.md, "
             "Security."),
    K_MAP("auth", pr_trainer_sink_cfg, auth, trainer_auth_tab,
          "Who may subscribe: bearer tokens (and/or tls.ca_file for client certificates)."),
};
/* tls and auth, then the sink's own keys (listen, limits, timeouts). */
static const cfg_table trainer_tab = CTABLE_WITH(trainer_keys, pr_sink_trainer_cfgmap, NULL);
static const cfg_table kafka_sink_tab = CTABLE(pr_sink_kafka_cfgmap, NULL);
static const cfg_table files_tab = CTABLE(pr_sink_files_cfgmap, NULL);

static const cfg_key sinks_keys[] = {
    K_MAP_EN("trainer", pr_sinks_cfg, trainer, trainer.enabled, trainer_tab,
             "Stream batches to GPU trainers over TCP, with acknowledgements."),
    K_MAP_EN("kafka", pr_sinks_cfg, kafka, kafka.enabled, kafka_sink_tab,
             "Produce batches to a Kafka topic."),
    K_MAP_EN("files", pr_sinks_cfg, files, files.enabled, files_tab,
             "Write batches as .npy files."),
};
static const cfg_table sinks_tab = TABLE(sinks_keys, NULL);

static const cfg_key state_keys[] = {
    K_BOOL("enabled", pr_state_cfg, enabled, NULL,
           "Set false to keep the section but switch persistence off."),
    K_STR("dir", pr_state_cfg, dir, KF_REQUIRED | KF_NONEMPTY, NULL,
          "Directory for vocabulary snapshots and the journal (index stability across "
          "restarts)."),
    K_INT("checkpoint_interval_s", pr_state_cfg, checkpoint_interval_s, 1, 86400 * 7, "60",
          "Seconds between vocabulary snapshots; the journal covers the time in between."),
};
static const cfg_table state_tab = TABLE(state_keys, NULL);
static const cfg_table vocab_log_tab = CTABLE(pr_vocablog_cfgmap, NULL);

/* ---------------------------------------------------------------- schema */

static bool pr__names_list(cfg_ctx *c, yaml_node_t *n, size_t max, char (*dst)[PR_NAME_MAX],
                           size_t *count)
{
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of names, got %s", g);
        return false;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items > max) {
        pr__cfg_error(c, n, NULL, "%zu names, at most %zu allowed", items, max);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        const char *s = pr__want_scalar(c, it, "a name");
        if (s && !pr__valid_name(s, PR_NAME_MAX)) {
            pr__cfg_error(c, it, NULL, "invalid name '%.80s' (1..%d characters of A-Z a-z 0-9 _ -)",
                          s, PR_NAME_MAX - 1);
            s = NULL;
        }
        for (size_t j = 0; s && j < i; j++) {
            if (strcmp(dst[j], s) == 0) {
                pr__cfg_error(c, it, NULL, "duplicate name '%s'", s);
                s = NULL;
            }
        }
        if (s)
            snprintf(dst[i], PR_NAME_MAX, "%s", s);
        else
            ok = false;
        pr__path_pop(c, old);
    }
    *count = items;
    return ok;
}

static void pr__h_dense_names(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    size_t cnt;
    if (!pr__names_list(c, n, PR_MAX_DENSE, pl->dense_names, &cnt))
        return;
    if (pr__map_find(c, c->map, "dense") && cnt != pl->spec.n_dense)
        pr__cfg_error(c, n, NULL, "%zu names but dense is %u", cnt, (unsigned)pl->spec.n_dense);
    else
        pl->spec.n_dense = (uint16_t)cnt;
}

static void pr__h_sparse_names(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    size_t cnt;
    char tmp[PR_MAX_SPARSE][PR_NAME_MAX];
    if (!pr__names_list(c, n, PR_MAX_SPARSE, tmp, &cnt))
        return;
    if (pr__map_find(c, c->map, "sparse") && cnt != pl->spec.n_sparse) {
        pr__cfg_error(c, n, NULL, "%zu names but sparse is %u", cnt, (unsigned)pl->spec.n_sparse);
        return;
    }
    pl->spec.n_sparse = (uint16_t)cnt;
    for (size_t i = 0; i < cnt; i++)
        memcpy(pl->spec.sparse[i].name, tmp[i], PR_NAME_MAX);
}

static const cfg_key schema_keys[] = {
    {.name = "event_time",
     .type = KT_CUSTOM,
     .flags = KF_SUB,
     .fn = pr__h_event_time,
     .sub = &pr__event_time_tab,
     .type_doc = "mapping",
     .doc = "Declared schema: the record's event time (at most one)."},
    {.name = "labels",
     .type = KT_CUSTOM,
     .flags = KF_LIST,
     .fn = pr__h_labels,
     .sub = &pr__label_item_tab,
     .type_doc = "list of labels",
     .doc = "Declared schema: the labels (several allowed), float32."},
    K_BOOL("label", pr_pipeline_cfg, spec.has_label, "true",
           "Records carry a label (the first TSV field)."),
    {.name = "dense",
     .type = KT_CUSTOM,
     .flags = KF_LIST | KF_DOC_DEFAULT,
     .fn = pr__h_schema_count,
     .sub = &pr__dense_item_tab,
     .type_doc = "integer 0..256, or list of features",
     .def = "13",
     .doc = "Number of dense (numeric) features, named I1..In; or, declared, the dense "
            "features."},
    {.name = "sparse",
     .type = KT_CUSTOM,
     .flags = KF_LIST | KF_DOC_DEFAULT,
     .fn = pr__h_schema_count,
     .sub = &pr__sparse_item_tab,
     .type_doc = "integer 0..256, or list of features",
     .def = "26",
     .doc = "Number of sparse (categorical, hex) features, named C1..Cn; or, declared, the "
            "sparse features (single values, lists, crosses)."},
    K_CUSTOM("dense_names", 0, pr__h_dense_names, "list of names", NULL,
             "Names of the dense features instead of I1..In (sets `dense` when it is absent)."),
    K_CUSTOM("sparse_names", 0, pr__h_sparse_names, "list of names", NULL,
             "Names of the sparse features instead of C1..Cn (sets `sparse` when it is "
             "absent); transform.columns keys on them."),
    {.name = "filter",
     .type = KT_CUSTOM,
     .flags = KF_LIST,
     .fn = pr__h_filter,
     .sub = &pr__filter_item_tab,
     .type_doc = "list of conditions",
     .doc = "Declared schema: which records become rows; all conditions must hold (see "
            "Record filter). A record that fails is dropped, counted, not rejected."},
    {.name = "downsample",
     .type = KT_MAP,
     .off = offsetof(pr_pipeline_cfg, features.downsample),
     .sub = &pr__downsample_tab,
     .doc = "Declared schema: keep a share of some records (negative downsampling), decided "
            "by a hash, with an optional weight label (see Downsampling)."},
    K_CUSTOM("cpu_ops", 0, pr__h_cpu_ops, "`all` or list of operators", NULL,
             "Operators the cpu may run when engine.backend (hls-sim, xrt) cannot; without it "
             "such an operator is an error (no silent fallback)."),
};
static const cfg_table schema_tab = TABLE(schema_keys, pr__finish_schema);

/* ---------------------------------------------------------------- transform */

static void pr__op_names(bool sparse, char *b, size_t bn)
{
    size_t len = 0;
    b[0] = '\0';
    for (int op = 0; op < PR_OP__COUNT; op++) {
        bool is_sparse = op >= PR_OP_HEX2INT;
        if (is_sparse != sparse)
            continue;
        int w = snprintf(b + len, bn - len, "%s%s", len ? ", " : "", pr_op_name((pr_op)op));
        if (w < 0 || (size_t)w >= bn - len)
            break;
        len += (size_t)w;
    }
}

/* An operator list: names in the order of the dataflow, each at most once. */
static void pr__h_ops(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    pr_pipeline_cfg *pl = base;
    bool sparse = strcmp(k->name, "sparse") == 0;
    uint8_t *ops = sparse ? pl->spec.sparse_ops : pl->spec.dense_ops;
    uint8_t *nops = sparse ? &pl->spec.n_sparse_ops : &pl->spec.n_dense_ops;
    char g[96], valid[128];
    pr__op_names(sparse, valid, sizeof(valid));
    if (pl->features.declared) {
        pr__cfg_error(c, n, NULL,
                      "a declared schema gives each feature its own chain "
                      "(schema.%s[].ops); transform.%s is for the Criteo layout",
                      k->name, k->name);
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of operators (%s), got %s", valid, g);
        return;
    }
    uint8_t out[PR_MAX_OPS];
    size_t cnt = 0;
    bool ok = true;
    int prev = -1;
    uint64_t modulus = 0;
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        yaml_node_t *arg = NULL;
        const char *name = NULL;
        if (it->type == YAML_MAPPING_NODE &&
            it->data.mapping.pairs.top - it->data.mapping.pairs.start == 1) {
            yaml_node_t *kn = pr__node_get(c, it->data.mapping.pairs.start[0].key);
            arg = pr__node_get(c, it->data.mapping.pairs.start[0].value);
            name = kn->type == YAML_SCALAR_NODE ? pr__scalar(kn) : NULL;
        } else if (it->type == YAML_SCALAR_NODE && !pr__is_null(it)) {
            name = pr__scalar(it);
        }
        int op = name ? pr_op_from_name(name) : -1;
        if (!name) {
            pr__got(it, g, sizeof(g));
            pr__cfg_error(c, it, NULL, "expected an operator name or { modulus: N }, got %s", g);
            ok = false;
        } else if (op < 0 || (op >= PR_OP_HEX2INT) != sparse) {
            pr__cfg_error(c, it, NULL, "unknown %s operator '%.80s' (valid: %s)",
                          sparse ? "sparse" : "dense", name, valid);
            ok = false;
        } else if (arg && op != PR_OP_MODULUS) {
            pr__cfg_error(c, it, NULL, "operator '%s' takes no value", name);
            ok = false;
        } else if (op <= prev) {
            pr__cfg_error(c, it, NULL, "'%s' %s (the order is %s, each at most once)", name,
                          op == prev ? "appears twice" : "is out of order", valid);
            ok = false;
        } else {
            if (arg) {
                static const cfg_key mod_key = {
                    .name = "modulus", .type = KT_INT, .width = 8, .min = 1};
                size_t o2 = pr__path_push(c, "modulus");
                if (!pr__parse_int_key(c, arg, &mod_key, &modulus))
                    ok = false;
                pr__path_pop(c, o2);
            }
            if (cnt < PR_MAX_OPS)
                out[cnt++] = (uint8_t)op;
            prev = op;
        }
        pr__path_pop(c, old);
    }
    if (!ok)
        return;
    memcpy(ops, out, cnt);
    *nops = (uint8_t)cnt;
    if (modulus)
        for (size_t i = 0; i < PR_MAX_SPARSE; i++)
            pl->spec.sparse[i].modulus = modulus;
}

static void pr__h_profile(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    const char *s = pr__want_scalar(c, n, "a vocabulary profile");
    if (!s)
        return;
    int p = pr_vocab_profile_from_name(s);
    if (p < 0) {
        pr__cfg_error(c, n, NULL, "unknown profile '%.80s' (valid: %s, %s)", s,
                      pr_vocab_profile_name(PR_VOCAB_DLRM),
                      pr_vocab_profile_name(PR_VOCAB_DEFAULT));
        return;
    }
    pl->spec.profile = (pr_vocab_profile)p;
}

/* vocab.min_count / capacity / eviction / ttl_records / ttl_s / decay_records:
 * the value for every column (transform.columns.<C> overrides it). */
static void pr__h_all_columns(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    pr_pipeline_cfg *pl = base;
    if (strcmp(k->name, "eviction") == 0) {
        const char *s = pr__want_scalar(c, n, "an eviction policy");
        int e = s ? pr__names_find(pr_vocab_eviction_names, s) : -1;
        if (s && e < 0) {
            char b[128];
            pr__join_names(pr_vocab_eviction_names, b, sizeof(b));
            pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: %s)", s, b);
        }
        for (size_t i = 0; e >= 0 && i < PR_MAX_SPARSE; i++)
            pl->spec.sparse[i].eviction = (pr_vocab_eviction)e;
        return;
    }
    bool is_min = strcmp(k->name, "min_count") == 0;
    const cfg_key ik = {
        .name = k->name, .type = KT_INT, .width = is_min ? 4 : 8, .min = is_min ? 1 : 0};
    uint64_t v;
    if (!pr__parse_int_key(c, n, &ik, &v))
        return;
    for (size_t i = 0; i < PR_MAX_SPARSE; i++) {
        pr_sparse_col_spec *cs = &pl->spec.sparse[i];
        if (is_min)
            cs->min_count = (uint32_t)v;
        else if (strcmp(k->name, "capacity") == 0)
            cs->capacity = v;
        else if (strcmp(k->name, "ttl_records") == 0)
            cs->ttl_records = v;
        else if (strcmp(k->name, "ttl_s") == 0)
            cs->ttl_s = v;
        else
            cs->decay_records = v;
    }
}

static const cfg_key vocab_keys[] = {
    K_CUSTOM("profile", 0, pr__h_profile, "one of: dlrm, default", "dlrm",
             "dlrm: missing = key 0, indices from 0, no reserved index (Meta DLRM). default: "
             "0 = missing, 1 = out-of-vocabulary, first appearances from 2 (TorchRec)."),
    K_CUSTOM("min_count", 0, pr__h_all_columns, "integer >= 1", "1",
             "Occurrences before a value gets its own index (OOV until then; > 1 needs profile "
             "default). For all columns."),
    K_CUSTOM("capacity", 0, pr__h_all_columns, "integer >= 0", "0",
             "Maximum indices per column, reserved ones included; 0 = automatic (modulus, +2 "
             "under default, when bounded). For all columns."),
    K_CUSTOM("eviction", 0, pr__h_all_columns, "one of: none, lru, lfu, ttl", "none",
             "What a full column does with a new value: none = OOV (default) or an error "
             "(dlrm); lru / lfu / ttl evict a value and recycle its index for the new one (the "
             "batch carries a recycled-index notice). Needs an explicit capacity; cpu backend; "
             "with vocab_log decided through the log (profile default, not ttl_s). For all "
             "columns (docs/formats.md)."),
    K_CUSTOM("ttl_records", 0, pr__h_all_columns, "integer >= 0", "0",
             "eviction ttl: a value may be evicted once it was not looked up for this many "
             "lookups of its column (the record clock, never wall time); a full column of "
             "younger values maps new ones to OOV (profile default). For all columns."),
    K_CUSTOM("ttl_s", 0, pr__h_all_columns, "integer >= 0", "0",
             "eviction ttl by event time, instead of ttl_records (set exactly one): a value may "
             "be evicted once its column's event clock (the newest event time the column has "
             "looked up; late rows do not move it back) is this many seconds past the clock at "
             "the value's last lookup. Never wall time. Needs event times: `run`, or `process` "
             "on JSON lines with schema.event_time (Criteo files have none; `process` refuses "
             "it); a JSON record without a time after 1970 is rejected (bad_time). 0 = not "
             "set. For all columns."),
    K_CUSTOM("decay_records", 0, pr__h_all_columns, "integer >= 0", "0",
             "eviction lfu: use counts halve every this many lookups of the column, so values "
             "that went cold can be evicted; 0 = no decay. For all columns."),
    K_ENUM("count_mode", pr_pipeline_cfg, spec.count_mode, count_mode_names, "streaming",
           "How min_count > 1 is applied: streaming (one pass) or two_pass (offline only: "
           "count all data first, TorchRec-exact)."),
    K_STR("seed", pr_pipeline_cfg, vocab_seed, KF_NONEMPTY, NULL,
          "Directory of <column>.tsv files (the vocab/ folder written by piperec process, or "
          "piperec vocab export) to start the vocabularies from: their indices are kept and "
          "new values continue after the largest. Used only while the state dir holds no "
          "vocabulary yet (docs/formats.md). Not with vocab_log: `piperec vocab import` puts "
          "a vocabulary into the log once (docs/vocab-log.md)."),
};
static const cfg_table vocab_tab = TABLE(vocab_keys, NULL);

/* A declared feature named `name` that has a vocab step (vocabulary options
 * mean nothing on a feature without one). */
static bool pr__feature_has_vocab(const pr_feature_schema *fs, const char *name)
{
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        if (strcmp(f->name, name) != 0)
            continue;
        for (uint8_t k = 0; k < f->n_ops; k++)
            if (f->ops[k].op == PR_FOP_VOCAB)
                return true;
    }
    return false;
}

static void pr__finish_column(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)present;
    const pr_pipeline_spec *spec = &c->pl->spec;
    const pr_sparse_col_spec *col = base;
    if (pr__map_find(c, map, "modulus") && c->pl->features.declared)
        pr__cfg_error(c, pr__map_find(c, map, "modulus"), "modulus",
                      "a declared schema gives the modulus in the feature's chain "
                      "({ modulus: N })");
    else if (pr__map_find(c, map, "modulus") && !pr_spec_has_op(spec, PR_OP_MODULUS))
        pr__cfg_error(c, pr__map_find(c, map, "modulus"), "modulus",
                      "transform.sparse has no modulus operator");
    static const char *const vocab_only[] = {
        "min_count", "capacity", "eviction", "ttl_records", "ttl_s", "decay_records", NULL};
    bool declared = c->pl->features.declared;
    for (int i = 0; vocab_only[i]; i++) {
        yaml_node_t *kn = pr__map_find(c, map, vocab_only[i]);
        if (kn && !declared && !pr_spec_has_op(spec, PR_OP_VOCAB))
            pr__cfg_error(c, kn, vocab_only[i], "transform.sparse has no vocab operator");
        else if (kn && declared && !pr__feature_has_vocab(&c->pl->features, col->name))
            pr__cfg_error(c, kn, vocab_only[i],
                          "feature '%s' has no vocab operator (vocabulary options apply to "
                          "features whose ops include vocab)",
                          col->name);
    }
}

static const cfg_key column_keys[] = {
    K_INT("modulus", pr_sparse_col_spec, modulus, 1, 0, NULL,
          "This column's modulus (> 0), instead of the one in transform.sparse."),
    K_INT("min_count", pr_sparse_col_spec, min_count, 1, 0, NULL,
          "This column's min_count, instead of vocab.min_count."),
    K_INT("capacity", pr_sparse_col_spec, capacity, 0, 0, NULL,
          "This column's capacity, instead of vocab.capacity."),
    K_ENUM("eviction", pr_sparse_col_spec, eviction, pr_vocab_eviction_names, NULL,
           "This column's eviction (none, lru, lfu, ttl), instead of vocab.eviction."),
    K_INT("ttl_records", pr_sparse_col_spec, ttl_records, 0, 0, NULL,
          "This column's ttl_records, instead of vocab.ttl_records."),
    K_INT("ttl_s", pr_sparse_col_spec, ttl_s, 0, 0, NULL,
          "This column's ttl_s, instead of vocab.ttl_s (0 = not set)."),
    K_INT("decay_records", pr_sparse_col_spec, decay_records, 0, 0, NULL,
          "This column's decay_records, instead of vocab.decay_records."),
};
static const cfg_table column_tab = TABLE(column_keys, pr__finish_column);

static void pr__h_columns(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    char g[96];
    if (n->type == YAML_SCALAR_NODE && pr__is_null(n))
        return;
    if (n->type != YAML_MAPPING_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a mapping of column name: overrides, got %s", g);
        return;
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = pr__node_get(c, p->key);
        const char *name = pr__want_scalar(c, kn, "a column name");
        if (!name)
            continue;
        size_t col = 0;
        while (col < pl->spec.n_sparse && strcmp(pl->spec.sparse[col].name, name) != 0)
            col++;
        const pr_feature_spec *sf = NULL; /* a feature using another's table */
        for (uint32_t i = 0; i < pl->features.n_features && !sf; i++)
            if (!strcmp(pl->features.features[i].name, name) && pl->features.features[i].table[0] &&
                strcmp(pl->features.features[i].table, name))
                sf = &pl->features.features[i];
        if (sf) {
            pr__cfg_error(c, kn, name,
                          "'%s' uses the vocabulary of '%s' (its table): set the options under "
                          "transform.columns.%s",
                          name, sf->table, sf->table);
            continue;
        }
        if (col == pl->spec.n_sparse) {
            if (pl->spec.n_sparse == 0)
                pr__cfg_error(c, kn, name, "unknown column (the schema has no sparse columns)");
            else
                pr__cfg_error(c, kn, name, "unknown column (sparse columns are %s .. %s)",
                              pl->spec.sparse[0].name, pl->spec.sparse[pl->spec.n_sparse - 1].name);
            continue;
        }
        for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *qk = pr__node_get(c, q->key);
            if (qk->type == YAML_SCALAR_NODE && strcmp(pr__scalar(qk), name) == 0)
                pr__cfg_error(c, kn, name, "duplicate column (first at line %d)",
                              pr__node_line(c, qk));
        }
        size_t old = pr__path_push(c, name);
        yaml_node_t *v = pr__node_get(c, p->value);
        if (pr__is_null(v))
            v = NULL;
        pr__apply_map(c, v, &column_tab, &pl->spec.sparse[col]);
        pr__path_pop(c, old);
    }
}

static const cfg_key transform_keys[] = {
    K_CUSTOM("dense", KF_DOC_DEFAULT, pr__h_ops, "list of operators", "[neg2zero, log1p]",
             "Dense operators, a subsequence of [neg2zero, log1p]. [] = values cast to float32."),
    K_CUSTOM("sparse", KF_DOC_DEFAULT, pr__h_ops, "list of operators",
             "[hex2int, {modulus: 524288}, vocab]",
             "Sparse operators, a subsequence of [hex2int, modulus, vocab]; modulus may be "
             "written { modulus: N } (N > 0) to set it for every column (bare `modulus` keeps "
             "524288 or the per-column values)."),
    K_MAP_FLAT("vocab", vocab_tab, "Vocabulary (VocabGen + VocabMap) settings."),
    {.name = "columns",
     .type = KT_CUSTOM,
     .flags = KF_DICT,
     .fn = pr__h_columns,
     .sub = &column_tab,
     .type_doc = "mapping",
     .doc = "Per-column overrides keyed by sparse column name (C1.. or schema.sparse_names); "
            "an unknown name is an error."},
};
static const cfg_table transform_tab = TABLE(transform_keys, NULL);

/* The engine names a column's setting "sparse.<column>.<key>: why": point
 * at the key the user wrote, transform.columns.<column>.<key> when the file
 * has it, else transform.vocab.<key> (every column's value), so the message
 * names a path of the file; anything else stays under `transform`. */
static void pr__engine_error(cfg_ctx *c, yaml_node_t *map, const char *e)
{
    yaml_node_t *tr = pr__map_find(c, map, "transform");
    bool col_rule = strncmp(e, "sparse.", 7) == 0;
    const char *name = col_rule ? e + 7 : e, *dot = col_rule ? strchr(name, '.') : NULL;
    const char *colon = dot ? strstr(dot, ": ") : NULL;
    char col[PR_NAME_MAX], key[32], path[160];
    if (!colon || (size_t)(dot - name) >= sizeof(col) || (size_t)(colon - dot - 1) >= sizeof(key)) {
        pr__cfg_error(c, tr, "transform", "%s", e);
        return;
    }
    snprintf(col, sizeof(col), "%.*s", (int)(dot - name), name);
    snprintf(key, sizeof(key), "%.*s", (int)(colon - dot - 1), dot + 1);
    yaml_node_t *cols = pr__map_find(c, tr, "columns");
    yaml_node_t *n = pr__map_find(c, pr__map_find(c, cols, col), key);
    if (n) {
        snprintf(path, sizeof(path), "transform.columns.%s.%s", col, key);
        pr__cfg_error(c, n, path, "%s", colon + 2);
        return;
    }
    n = pr__map_find(c, pr__map_find(c, tr, "vocab"), key);
    snprintf(path, sizeof(path), "transform.vocab.%s", key);
    if (n)
        pr__cfg_error(c, n, path, "%s (column %s)", colon + 2, col);
    else
        pr__cfg_error(c, tr, "transform", "%s", e);
}

/* ---------------------------------------------------------------- pipelines */

/* Append a copy of key=value to l. */
static void pr__kv_add(pr_kv_list *l, const char *key, const char *value)
{
    pr_kv *items = realloc(l->items, (l->n + 1) * sizeof(pr_kv));
    if (!items)
        abort();
    l->items = items;
    l->items[l->n].key = pr__xstrdup(key);
    l->items[l->n].value = pr__xstrdup(value);
    l->n++;
}

/* Does a producer take source property `key` (a Kafka sink on the source's
 * cluster)? Every one but the consumer's own (librdkafka's scope C, as far
 * as pr_kafka knows it): the brokers, TLS, SASL, client tuning. */
static bool pr__producer_key(const char *key)
{
    return pr_kafka_prop_scope(key) != PR_KAFKA_SCOPE_CONSUMER;
}

/* Add to `l` each of `from`'s properties it does not set itself (and that
 * `want` takes, when given). */
static void pr__kv_inherit(pr_kv_list *l, const pr_kv_list *from, bool (*want)(const char *))
{
    size_t own = l->n;
    for (size_t i = 0; i < from->n; i++) {
        const char *k = from->items[i].key;
        bool set = false;
        for (size_t j = 0; j < own && !set; j++)
            set = !strcmp(l->items[j].key, k);
        if (!set && (!want || want(k)))
            pr__kv_add(l, k, from->items[i].value);
    }
}

static void pr__finish_pipeline(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)present;
    pr_pipeline_cfg *pl = base;
    memcpy(pl->spec.name, pl->name, PR_NAME_MAX);
    /* The Kafka sink and the vocabulary log talk to the source's cluster
     * unless they name brokers of their own, and then as the source does:
     * its properties (TLS, SASL, ...; the sink those a producer takes),
     * their own keys winning. */
    pr_kv_list *sp = &pl->sinks.kafka.properties;
    const pr_kv_list *srcp = &pl->source.kafka.properties;
    if (pl->sinks.kafka.enabled && pr_kv_get(srcp, "bootstrap.servers") &&
        !pr_kv_get(sp, "bootstrap.servers"))
        pr__kv_inherit(sp, srcp, pr__producer_key);
    pr_kv_list *vp = &pl->vocab_log.properties;
    if (pl->vocab_log.enabled && !pr_kv_get(vp, "bootstrap.servers"))
        pr__kv_inherit(vp, srcp, NULL);
    if (pl->vocab_log.enabled) {
        if (!pr_spec_has_op(&pl->spec, PR_OP_VOCAB))
            pr__cfg_error(c, pr__map_find(c, map, "vocab_log"), "vocab_log",
                          "transform.sparse has no vocab operator to share");
        else if (pl->spec.count_mode != PR_COUNT_STREAMING)
            pr__cfg_error(c, pr__map_find(c, map, "vocab_log"), "vocab_log",
                          "needs transform.vocab.count_mode streaming");
        if (pl->vocab_seed)
            pr__cfg_error(c, pr__map_find(c, map, "vocab_log"), "vocab_log",
                          "cannot be combined with transform.vocab.seed: replicas would seed "
                          "differently; put the vocabulary into the log once instead, with "
                          "`piperec vocab import --config FILE --input DIR` before the first "
                          "replica starts (docs/vocab-log.md, \"Seeding the log\")");
        /* Eviction through the log: decided when each replica applies the
         * log, so it needs an OOV index (profile default: a value that
         * cannot keep an index through its round trip maps there) and a
         * clock the log carries (records, not event time). */
        for (uint32_t i = 0; i < pl->spec.n_sparse; i++) {
            const pr_sparse_col_spec *cs = &pl->spec.sparse[i];
            if (cs->eviction == PR_EVICT_NONE)
                continue;
            if (pl->spec.profile != PR_VOCAB_DEFAULT) {
                pr__cfg_error(c, pr__map_find(c, map, "vocab_log"), "vocab_log",
                              "with eviction %s (column %s) needs transform.vocab.profile default: "
                              "a value evicted again before its proposal came back maps to OOV, "
                              "which profile dlrm does not have (docs/vocab-log.md)",
                              pr_vocab_eviction_names[cs->eviction], cs->name);
                break;
            }
            if (cs->eviction == PR_EVICT_TTL && cs->ttl_s) {
                pr__cfg_error(c, pr__map_find(c, map, "vocab_log"), "vocab_log",
                              "cannot be combined with ttl_s (column %s): event times do not "
                              "travel through the log; use ttl_records (docs/vocab-log.md)",
                              cs->name);
                break;
            }
        }
    }
    pr__check_protobuf(c, map, pl);
    pr__check_avro(c, map, pl);
    /* Without a declared schema, the features are the Criteo preset of the
     * final spec (transform and per-column values applied). */
    if (!pl->features.declared) {
        free(pl->features.features);
        pl->features.features =
            pr__xcalloc(1u + pl->spec.n_dense + pl->spec.n_sparse, sizeof(pr_feature_spec));
        pl->features.n_features = pr_feature_criteo_preset(
            &pl->spec, (const char(*)[PR_NAME_MAX])pl->dense_names, pl->features.features);
    }
    /* The engine's own checks (min_count vs profile, capacity room...), once
     * everything else is right so that its message is not a consequence. A
     * declared schema runs the engine spec pr_feature_engine_spec derives
     * (its vocab features' transform.columns.<feature> options); that also
     * refuses eviction ttl_s on a list feature (no per-element event time). */
    if (c->n_errors == 0) {
        char e[400];
        pr_pipeline_spec es, chk = pl->spec;
        if (pl->features.declared) /* its dense columns are the decoder's (PR_MAX_DENSE_COLS,
                                    * checked with the features), none is the engine's */
            chk.n_dense = 0;
        if (pr_pipeline_spec_validate(&chk, e, sizeof(e)) < 0 ||
            (pl->features.declared &&
             pr_feature_engine_spec(&pl->features, &pl->spec, &es, e, sizeof(e)) < 0))
            pr__engine_error(c, map, e);
        else if (pl->features.declared)
            for (uint32_t k = 0; k < es.n_sparse; k++)
                if (es.sparse[k].eviction == PR_EVICT_TTL && es.sparse[k].ttl_s)
                    pl->features.time_required = true;
    }
}

static const cfg_key pipeline_keys[] = {
    {.name = "name",
     .type = KT_NAME,
     .flags = KF_REQUIRED,
     .off = offsetof(pr_pipeline_cfg, name),
     .width = PR_NAME_MAX,
     .doc = "Unique pipeline name (A-Z a-z 0-9 _ -); used in metrics labels, file names and "
            "the default group.id."},
    K_MAP("source", pr_pipeline_cfg, source, source_tab, "Where records come from."),
    K_MAP_FLAT("schema", schema_tab,
               "The record layout: the Criteo counts, or the declared features (see Feature "
               "schema)."),
    K_MAP_FLAT("transform", transform_tab, "The preprocessing operators."),
    K_MAP("batch", pr_pipeline_cfg, batch, batch_tab, "Batching, freshness and ordering."),
    K_MAP("sinks", pr_pipeline_cfg, sinks, sinks_tab,
          "Where batches go; `run` needs at least one enabled sink."),
    K_MAP_EN("state", pr_pipeline_cfg, state, state.enabled, state_tab,
             "Vocabulary persistence. Without it, indices restart from scratch after a restart."),
    K_MAP_EN("vocab_log", pr_pipeline_cfg, vocab_log, vocab_log.enabled, vocab_log_tab,
             "Share the vocabulary with the other replicas of this pipeline through a Kafka log "
             "(docs/vocab-log.md). Without it each process owns its vocabulary (one replica)."),
};
static const cfg_table pipeline_tab = TABLE(pipeline_keys, pr__finish_pipeline);

static void pr__pipeline_init(pr_pipeline_cfg *pl)
{
    pr_pipeline_spec_default(&pl->spec);
    pl->spec.has_label = true;
    pl->spec.n_dense = 13;
    pl->spec.n_sparse = 26;
    pl->spec.profile = PR_VOCAB_DLRM;
    pl->spec.count_mode = PR_COUNT_STREAMING;
    pl->spec.n_dense_ops = 2;
    pl->spec.dense_ops[0] = PR_OP_NEG2ZERO;
    pl->spec.dense_ops[1] = PR_OP_LOG1P;
    pl->spec.n_sparse_ops = 3;
    pl->spec.sparse_ops[0] = PR_OP_HEX2INT;
    pl->spec.sparse_ops[1] = PR_OP_MODULUS;
    pl->spec.sparse_ops[2] = PR_OP_VOCAB;
    for (int i = 0; i < PR_MAX_SPARSE; i++) {
        snprintf(pl->spec.sparse[i].name, PR_NAME_MAX, "C%d", i + 1);
        pl->spec.sparse[i].modulus = PR__DEFAULT_MODULUS;
        pl->spec.sparse[i].min_count = 1;
        pl->spec.sparse[i].capacity = 0;
    }
    for (int i = 0; i < PR_MAX_DENSE; i++)
        snprintf(pl->dense_names[i], PR_NAME_MAX, "I%d", i + 1);
}

static void pr__h_pipelines(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_config *cfg = base;
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of pipelines, got %s", g);
        return;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items == 0) {
        pr__cfg_error(c, n, NULL, "at least one pipeline is needed");
        return;
    }
    cfg->pipelines = pr__xcalloc(items, sizeof(pr_pipeline_cfg));
    cfg->n_pipelines = items;
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        pr_pipeline_cfg *pl = &cfg->pipelines[i];
        size_t old = pr__path_push_index(c, i);
        pr__pipeline_init(pl);
        pl->line = pr__node_line(c, it);
        c->pl = pl;
        pr__apply_map(c, it, &pipeline_tab, pl);
        c->pl = NULL;
        for (size_t j = 0; j < i && pl->name[0]; j++)
            if (strcmp(cfg->pipelines[j].name, pl->name) == 0)
                pr__cfg_error(c, pr__map_find(c, it, "name"), "name",
                              "duplicate pipeline name '%s' (also pipelines[%zu])", pl->name, j);
        pr__path_pop(c, old);
    }
}

/* ---------------------------------------------------------------- top level */

static const cfg_key http_tls_keys[] = {
    K_BOOL("enabled", pr_http_tls_cfg, enabled, NULL,
           "Set false to keep the section but serve plain HTTP."),
    K_STR("cert_file", pr_http_tls_cfg, cert_file, KF_REQUIRED | KF_NONEMPTY, NULL,
          "PEM server certificate (chain) for HTTPS; read at start (restart to replace)."),
    K_STR("key_file", pr_http_tls_cfg, key_file, KF_REQUIRED | KF_NONEMPTY, NULL,
          "PEM private key of cert_file."),
    K_STR("ca_file", pr_http_tls_cfg, ca_file, 0, NULL,
          "PEM CA bundle; when set, every request needs a client certificate signed by it "
          "(mutual TLS), else 403."),
};
static const cfg_table http_tls_tab = TABLE(http_tls_keys, NULL);

static const cfg_key http_keys[] = {
    K_BOOL("enabled", pr_http_cfg, enabled, "true", "Serve /metrics, /healthz and /readyz."),
    K_HOSTPORT("listen", pr_http_cfg, listen, "127.0.0.1:9464", "HTTP address (host:port)."),
    K_MAP_EN("tls", pr_http_cfg, tls, tls.enabled, http_tls_tab,
             "HTTPS on the HTTP endpoint (libmicrohttpd with GnuTLS, TLS 1.2+); off = plain "
             "HTTP. Prometheus then scrapes with scheme https. See docs/operations.md, Security."),
};
static const cfg_table http_tab = TABLE(http_keys, NULL);

static const cfg_table engine_tab = CTABLE(pr_engine_cfgmap, NULL);

static const cfg_key limits_keys[] = {
    {.name = "max_inflight_bytes",
     .type = KT_SIZE,
     .off = offsetof(pr_limits_cfg, max_inflight_bytes),
     .min = 1 << 20,
     .def = "256MiB",
     .doc = "Memory bound on blocks and batches in flight; when reached, consumption pauses "
            "(backpressure). At least 1MiB; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB."},
};
static const cfg_table limits_tab = TABLE(limits_keys, NULL);

static const cfg_key hot_keys[] = {
    K_INT("top_k", pr_hot_cfg, top_k, 0, 65536, "0",
          "Hot sets: per sparse column a decayed sketch of the most looked-up indices, served "
          "by GET /v1/hot up to k = top_k (8 counters per k, about 330 KiB per column at 1024). "
          "0 (the default) turns it off: the sketch costs ~86 ns per value in the pipeline "
          "thread, ~2.2 us per Criteo row, so enable it where that is affordable."),
    K_INT("half_life_records", pr_hot_cfg, half_life_records, 1000, 1000000000000LL, "10000000",
          "Hot sets decay: a lookup this many records ago weighs half of one now (driven by "
          "record counts, never by wall time)."),
};
static const cfg_table hot_tab = TABLE(hot_keys, NULL);

static const cfg_key log_keys[] = {
    K_ENUM("level", pr_config, log_level, log_level_names, "info", "error, warn, info or debug."),
};
static const cfg_table log_tab = TABLE(log_keys, NULL);

static const cfg_key root_keys[] = {
    {.name = "pipelines",
     .type = KT_CUSTOM,
     .flags = KF_REQUIRED | KF_LIST,
     .fn = pr__h_pipelines,
     .sub = &pipeline_tab,
     .type_doc = "list",
     .doc = "The pipelines (at least one)."},
    K_MAP("http", pr_config, http, http_tab, "The HTTP endpoint."),
    K_MAP("engine", pr_config, engine, engine_tab, "The preprocessing engine."),
    K_MAP("limits", pr_config, limits, limits_tab, "Resource bounds."),
    K_MAP("hot", pr_config, hot, hot_tab, "Hot sets per sparse column (GET /v1/hot)."),
    K_MAP_FLAT("log", log_tab, "Logging."),
};
/* Placement: every operator of every feature runs on the configured engine
 * backend, or on the cpu where schema.cpu_ops allows it (no silent fallback). */
static void pr__finish_root(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)map;
    (void)present;
    pr_config *cfg = base;
    const char *backend = cfg->engine.backend ? cfg->engine.backend : "cpu";
    const char *on[PR_FEAT_MAX_OPS];
    for (size_t i = 0; i < cfg->n_pipelines && c->n_errors == 0; i++) {
        const pr_pipeline_cfg *pl = &cfg->pipelines[i];
        char sub[64], e[600];
        snprintf(sub, sizeof(sub), "pipelines[%zu].schema", i);
        c->line_hint = pl->line;
        /* The Criteo preset keeps today's behaviour: the engine checks its
         * backend when it starts (pr_engine_new); explain shows placement. */
        for (uint32_t f = 0; pl->features.declared && f < pl->features.n_features; f++)
            if (pr_feature_place(&pl->features.features[f], backend, pl->features.cpu_ops, on, e,
                                 sizeof(e)) < 0)
                pr__cfg_error(c, NULL, sub, "%s (engine.backend: %s)", e, backend);
    }
}

static const cfg_table root_tab = TABLE(root_keys, pr__finish_root);

/* ---------------------------------------------------------------- freeing */

static void pr__free_by_table(const cfg_table *t, void *base)
{
    for (size_t i = 0; i < pr__table_n(t); i++) {
        const cfg_key key = pr__table_key(t, i), *k = &key;
        char *p = (char *)base + k->off;
        switch (k->type) {
        case KT_STR:
        case KT_HOSTPORT:
            pr__set_str((char **)p, NULL);
            break;
        case KT_STRLIST:
            pr__strlist_free((char ***)p, (size_t *)((char *)base + k->off2));
            break;
        case KT_KV:
            pr__kv_free((pr_kv_list *)p);
            break;
        case KT_MAP:
            pr__free_by_table(k->sub, p);
            break;
        default:
            break;
        }
    }
}

struct pr__config_src {
    char *text;
    size_t len;
    char **ov_path;
    char **ov_value;
    size_t n_ov;
};

static void pr__src_free(struct pr__config_src *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_ov; i++) {
        free(s->ov_path[i]);
        free(s->ov_value[i]);
    }
    free(s->ov_path);
    free(s->ov_value);
    free(s->text);
    free(s);
}

void pr_config_free(pr_config *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        pr__free_by_table(&pipeline_tab, &cfg->pipelines[i]);
        free(cfg->pipelines[i].features.features);
        free(cfg->pipelines[i].features.filter);
    }
    free(cfg->pipelines);
    pr__free_by_table(&root_tab, cfg);
    free(cfg->origin);
    pr__src_free(cfg->src);
    free(cfg);
}

/* ---------------------------------------------------------------- overrides (edit the tree) */

static int pr__pair_value(cfg_ctx *c, int map_idx, const char *key)
{
    yaml_node_t *m = pr__node_get(c, map_idx);
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = pr__node_get(c, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(pr__scalar(k), key) == 0)
            return p->value;
    }
    return 0;
}

static bool pr__set_pair(cfg_ctx *c, int map_idx, const char *key, int val_idx)
{
    yaml_node_t *m = pr__node_get(c, map_idx);
    for (yaml_node_pair_t *p = m->data.mapping.pairs.start; p < m->data.mapping.pairs.top; p++) {
        yaml_node_t *k = pr__node_get(c, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp(pr__scalar(k), key) == 0) {
            p->value = val_idx;
            return true;
        }
    }
    int k = yaml_document_add_scalar(c->doc, NULL, (const yaml_char_t *)key, -1,
                                     YAML_PLAIN_SCALAR_STYLE);
    return k && yaml_document_append_mapping_pair(c->doc, map_idx, k, val_idx);
}

/* The mapping under `key` in map_idx, created when absent or null; 0 on error. */
static int pr__ensure_map(cfg_ctx *c, int map_idx, const char *key)
{
    int v = pr__pair_value(c, map_idx, key);
    if (v && pr__node_get(c, v)->type == YAML_MAPPING_NODE)
        return v;
    if (v && !pr__is_null(pr__node_get(c, v))) {
        pr__cfg_error(c, NULL, key, "is not a mapping in the config; cannot set a key below it");
        return 0;
    }
    int m = yaml_document_add_mapping(c->doc, NULL, YAML_BLOCK_MAPPING_STYLE);
    if (!m || !pr__set_pair(c, map_idx, key, m))
        return 0;
    return m;
}

static int pr__copy_node(yaml_document_t *dst, yaml_document_t *src, int idx)
{
    yaml_node_t *n = yaml_document_get_node(src, idx);
    int r = 0;
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return yaml_document_add_scalar(dst, NULL, n->data.scalar.value, (int)n->data.scalar.length,
                                        n->data.scalar.style);
    case YAML_SEQUENCE_NODE:
        r = yaml_document_add_sequence(dst, NULL, YAML_FLOW_SEQUENCE_STYLE);
        for (yaml_node_item_t *it = n->data.sequence.items.start;
             r && it < n->data.sequence.items.top; it++) {
            int ci = pr__copy_node(dst, src, *it);
            if (!ci || !yaml_document_append_sequence_item(dst, r, ci))
                return 0;
            n = yaml_document_get_node(src, idx);
        }
        return r;
    case YAML_MAPPING_NODE:
        r = yaml_document_add_mapping(dst, NULL, YAML_FLOW_MAPPING_STYLE);
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; r && p < n->data.mapping.pairs.top;
             p++) {
            int ck = pr__copy_node(dst, src, p->key);
            int cv = ck ? pr__copy_node(dst, src, p->value) : 0;
            if (!cv || !yaml_document_append_mapping_pair(dst, r, ck, cv))
                return 0;
        }
        return r;
    default:
        return 0;
    }
}

static bool pr__ov_walk(cfg_ctx *c, int map_idx, const cfg_table *t, const char *p, int val)
{
    cfg_key bestkey;
    const cfg_key *best = NULL;
    size_t blen = 0;
    for (size_t i = 0; i < pr__table_n(t); i++) {
        const cfg_key key = pr__table_key(t, i), *k = &key;
        size_t len = strlen(k->name);
        if (len > blen && strncmp(p, k->name, len) == 0 &&
            (p[len] == '\0' || p[len] == '.' || (p[len] == '[' && (k->flags & KF_LIST)))) {
            bestkey = key;
            best = &bestkey;
            blen = len;
        }
    }
    if (!best) {
        char valid[512];
        pr__list_keys(t, valid, sizeof(valid));
        size_t n = strcspn(p, ".[");
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)(n < 120 ? n : 120), p);
        pr__cfg_error(c, NULL, key, "unknown key (valid: %s)", valid);
        return false;
    }
    const char *rest = p + blen;
    size_t old = pr__path_push(c, best->name);
    bool ok = false;
    if (*rest == '\0') {
        ok = pr__set_pair(c, map_idx, best->name, val);
    } else if (best->type == KT_MAP && *rest == '.') {
        int m = pr__ensure_map(c, map_idx, best->name);
        ok = m && pr__ov_walk(c, m, best->sub, rest + 1, val);
    } else if (best->type == KT_KV && rest[1]) {
        int m = pr__ensure_map(c, map_idx, best->name);
        ok = m && pr__set_pair(c, m, rest + 1, val);
    } else if ((best->flags & KF_DICT) && rest[1]) {
        const char *name = rest + 1;
        size_t nlen = strcspn(name, ".");
        char col[PR_NAME_MAX + 1];
        snprintf(col, sizeof(col), "%.*s", (int)(nlen < PR_NAME_MAX ? nlen : PR_NAME_MAX), name);
        int m = pr__ensure_map(c, map_idx, best->name);
        if (m && name[nlen] == '\0') {
            ok = pr__set_pair(c, m, col, val);
        } else if (m) {
            int cm = pr__ensure_map(c, m, col);
            size_t o2 = pr__path_push(c, col);
            ok = cm && pr__ov_walk(c, cm, best->sub, name + nlen + 1, val);
            pr__path_pop(c, o2);
        }
    } else if ((best->flags & KF_LIST) && *rest == '[') {
        const char *close = strchr(rest, ']');
        int seq = pr__pair_value(c, map_idx, best->name);
        if (!close || close[1] != '.' || !close[2]) {
            pr__cfg_error(c, NULL, NULL, "expected [INDEX], [NAME] or [*] followed by .key");
        } else if (!seq || pr__node_get(c, seq)->type != YAML_SEQUENCE_NODE) {
            pr__cfg_error(c, NULL, NULL, "no list in the config to select from");
        } else {
            char sel[PR_NAME_MAX + 1];
            size_t sl = (size_t)(close - rest - 1);
            snprintf(sel, sizeof(sel), "%.*s", (int)(sl < PR_NAME_MAX ? sl : PR_NAME_MAX),
                     rest + 1);
            char *end;
            long want = strtol(sel, &end, 10);
            bool by_index = sel[0] && !*end;
            yaml_node_t *s = pr__node_get(c, seq);
            size_t items = (size_t)(s->data.sequence.items.top - s->data.sequence.items.start);
            size_t hits = 0;
            ok = true;
            for (size_t i = 0; i < items && ok; i++) {
                int item = pr__node_get(c, seq)->data.sequence.items.start[i];
                yaml_node_t *in = pr__node_get(c, item);
                bool match;
                if (by_index) {
                    match = (long)i == want;
                } else if (strcmp(sel, "*") == 0) {
                    match = true;
                } else {
                    yaml_node_t *nm = pr__map_find(c, in, "name");
                    match = nm && nm->type == YAML_SCALAR_NODE && strcmp(pr__scalar(nm), sel) == 0;
                }
                if (!match)
                    continue;
                if (in->type != YAML_MAPPING_NODE) {
                    pr__cfg_error(c, NULL, NULL, "item %zu is not a mapping", i);
                    ok = false;
                    break;
                }
                size_t o2 = pr__path_push_index(c, i);
                ok = pr__ov_walk(c, item, best->sub, close + 2, val);
                pr__path_pop(c, o2);
                hits++;
            }
            if (ok && hits == 0) {
                pr__cfg_error(c, NULL, NULL, "no item matches [%s] (%zu in the config)", sel,
                              items);
                ok = false;
            }
        }
    } else {
        pr__cfg_error(c, NULL, NULL, "holds a single value; '%s' cannot go below it", rest + 1);
    }
    pr__path_pop(c, old);
    return ok;
}

static bool pr__apply_override(cfg_ctx *c, const char *path, const char *value)
{
    yaml_parser_t parser;
    yaml_document_t vdoc;
    bool ok = false;
    if (!yaml_parser_initialize(&parser))
        return false;
    yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
    if (!yaml_parser_load(&parser, &vdoc)) {
        pr__cfg_error(c, NULL, path, "cannot read value '%.80s' as YAML: %s", value,
                      parser.problem ? parser.problem : "error");
        yaml_parser_delete(&parser);
        return false;
    }
    int val;
    if (yaml_document_get_root_node(&vdoc))
        val = pr__copy_node(c->doc, &vdoc, 1);
    else
        val = yaml_document_add_scalar(c->doc, NULL, (const yaml_char_t *)"", 0,
                                       YAML_PLAIN_SCALAR_STYLE);
    if (!yaml_document_get_root_node(c->doc)) {
        pr__cfg_error(c, NULL, path, "the config is empty; nothing to override");
    } else if (val) {
        /* Problems with the path itself are not in the file. */
        const char *origin = c->origin;
        c->origin = "override";
        size_t old = c->pathlen;
        ok = pr__ov_walk(c, 1, &root_tab, path, val);
        pr__path_pop(c, old);
        c->origin = origin;
    }
    yaml_document_delete(&vdoc);
    yaml_parser_delete(&parser);
    return ok;
}

/* ---------------------------------------------------------------- loading */

/* Report a libyaml parse error and release the parser (and `doc`, if any). */
static int pr__yaml_failed(yaml_parser_t *parser, yaml_document_t *doc, const char *origin,
                           char *errstr, size_t errstr_size)
{
    char ctx[160] = "";
    if (parser->context)
        snprintf(ctx, sizeof(ctx), " (%s, from line %zu)", parser->context,
                 parser->context_mark.line + 1);
    int rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "%s:%zu: malformed YAML: %s%s", origin,
                       parser->problem_mark.line + 1,
                       parser->problem ? parser->problem : "syntax error", ctx);
    if (doc)
        yaml_document_delete(doc);
    yaml_parser_delete(parser);
    return rc;
}

static int pr__load_internal(const char *yaml, size_t len, const char *origin, char *const *ov_path,
                             char *const *ov_value, size_t n_ov, pr_config **out, char *errstr,
                             size_t errstr_size)
{
    *out = NULL;
    if (errstr && errstr_size)
        errstr[0] = '\0';
    if (!origin)
        origin = "<config>";
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: cannot start the YAML parser",
                         origin);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    if (!yaml_parser_load(&parser, &doc))
        return pr__yaml_failed(&parser, NULL, origin, errstr, errstr_size);
    /* A second document would be silently ignored: refuse it. */
    yaml_document_t extra;
    if (!yaml_parser_load(&parser, &extra))
        return pr__yaml_failed(&parser, &doc, origin, errstr, errstr_size);
    bool more = yaml_document_get_root_node(&extra) != NULL;
    size_t extra_line = extra.start_mark.line + 1;
    yaml_document_delete(&extra);
    yaml_parser_delete(&parser);
    if (more) {
        yaml_document_delete(&doc);
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%zu: a second YAML document ('---'); the config is one document",
                         origin, extra_line);
    }

    cfg_ctx c = {.doc = &doc, .origin = origin, .err = errstr, .errn = errstr_size};
    c.n_loaded = (int)(doc.nodes.top - doc.nodes.start);
    for (size_t i = 0; i < n_ov; i++)
        pr__apply_override(&c, ov_path[i], ov_value[i]);

    pr_config *cfg = pr__xcalloc(1, sizeof(*cfg));
    cfg->origin = pr__xstrdup(origin);
    c.cfg = cfg;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (c.n_errors == 0) {
        if (!root)
            pr__cfg_error(&c, NULL, NULL, "empty config (at least `pipelines` is needed)");
        else
            pr__apply_map(&c, root, &root_tab, cfg);
    }
    yaml_document_delete(&doc);
    if (c.n_errors) {
        pr_config_free(cfg);
        return PR_EINVAL;
    }
    struct pr__config_src *src = pr__xcalloc(1, sizeof(*src));
    src->text = pr__xcalloc(len + 1, 1);
    memcpy(src->text, yaml, len);
    src->len = len;
    src->ov_path = pr__xcalloc(n_ov, sizeof(char *));
    src->ov_value = pr__xcalloc(n_ov, sizeof(char *));
    for (size_t i = 0; i < n_ov; i++) {
        src->ov_path[i] = pr__xstrdup(ov_path[i]);
        src->ov_value[i] = pr__xstrdup(ov_value[i]);
    }
    src->n_ov = n_ov;
    cfg->src = src;
    *out = cfg;
    return 0;
}

int pr_config_load_string(const char *yaml, size_t len, const char *origin, pr_config **out,
                          char *errstr, size_t errstr_size)
{
    return pr__load_internal(yaml, len, origin, NULL, NULL, 0, out, errstr, errstr_size);
}

int pr_config_load_default(pr_config **out, char *errstr, size_t errstr_size)
{
    return pr__load_internal(default_yaml, sizeof(default_yaml) - 1, "<default config>", NULL, NULL,
                             0, out, errstr, errstr_size);
}

int pr_config_load_file_with(const char *path, char *const *ov_path, char *const *ov_value,
                             size_t n_ov, pr_config **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len < cap)
            break;
        char *nb = cap > (64u << 20) ? NULL : realloc(buf, cap * 2);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int read_err = ferror(f);
    fclose(f);
    if (!buf)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: too large or out of memory", path);
    if (read_err) {
        free(buf);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: read error", path);
    }
    int rc = pr__load_internal(buf, len, path, ov_path, ov_value, n_ov, out, errstr, errstr_size);
    free(buf);
    return rc;
}

int pr_config_load_file(const char *path, pr_config **out, char *errstr, size_t errstr_size)
{
    return pr_config_load_file_with(path, NULL, NULL, 0, out, errstr, errstr_size);
}

int pr_config_set(pr_config *cfg, const char *path, const char *value, char *errstr,
                  size_t errstr_size)
{
    if (!cfg || !cfg->src || !path || !value)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "pr_config_set: bad arguments");
    struct pr__config_src *s = cfg->src;
    size_t n = s->n_ov + 1;
    char **paths = pr__xcalloc(n, sizeof(char *));
    char **values = pr__xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < s->n_ov; i++) {
        paths[i] = s->ov_path[i];
        values[i] = s->ov_value[i];
    }
    paths[n - 1] = (char *)path;
    values[n - 1] = (char *)value;
    pr_config *nc;
    int rc =
        pr__load_internal(s->text, s->len, cfg->origin, paths, values, n, &nc, errstr, errstr_size);
    free(paths);
    free(values);
    if (rc < 0)
        return rc;
    pr_config tmp = *cfg;
    *cfg = *nc;
    *nc = tmp;
    pr_config_free(nc);
    return 0;
}

/* ---------------------------------------------------------------- streaming checks */

/* Do two listen addresses take the same port (port 0 never clashes; a
 * wildcard host clashes with every host)? */
static bool pr__listen_clash(const char *a, const char *b)
{
    char ha[256], hb[256];
    uint16_t pa, pb;
    if (!a || !b || pr_hostport_parse(a, ha, sizeof(ha), &pa) ||
        pr_hostport_parse(b, hb, sizeof(hb), &pb) || pa == 0 || pa != pb)
        return false;
    static const char *const any[] = {"0.0.0.0", "::", "*", ""};
    for (size_t i = 0; i < sizeof(any) / sizeof(any[0]); i++)
        if (!strcmp(ha, any[i]) || !strcmp(hb, any[i]))
            return true;
    return !strcmp(ha, hb);
}

/* The ports the service listens on: http.listen and every trainer sink; a
 * clash passes --check and fails at start with "Address already in use". */
static void pr__check_listen_clash(cfg_ctx *c, const pr_config *cfg)
{
    c->line_hint = 0; /* the whole config's ports: no one line */
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        const pr_trainer_sink_cfg *t = &cfg->pipelines[i].sinks.trainer;
        if (!t->enabled)
            continue;
        if (cfg->http.enabled && pr__listen_clash(t->listen, cfg->http.listen))
            pr__cfg_error(c, NULL, NULL,
                          "pipelines[%zu].sinks.trainer.listen: %s takes the port of "
                          "http.listen %s",
                          i, t->listen, cfg->http.listen);
        for (size_t j = 0; j < i; j++) {
            const pr_trainer_sink_cfg *u = &cfg->pipelines[j].sinks.trainer;
            if (u->enabled && pr__listen_clash(t->listen, u->listen))
                pr__cfg_error(c, NULL, NULL,
                              "pipelines[%zu].sinks.trainer.listen: %s takes the port of "
                              "pipelines[%zu].sinks.trainer.listen %s",
                              i, t->listen, j, u->listen);
        }
    }
}

/* Is `a` the same directory path as `b` (trailing slashes and "./" aside)? */
static bool pr__same_dir(const char *a, const char *b)
{
    while (!strncmp(a, "./", 2))
        a += 2;
    while (!strncmp(b, "./", 2))
        b += 2;
    size_t la = strlen(a), lb = strlen(b);
    while (la > 1 && a[la - 1] == '/')
        la--;
    while (lb > 1 && b[lb - 1] == '/')
        lb--;
    return la == lb && !memcmp(a, b, la);
}

/* Two pipelines' files sinks in one directory name their rolls alike
 * (batches-<epoch>-<first>-<last>: both start at epoch 1, sequence 1) and
 * each would take the other's unfinished roll for a crash's leftover. */
static void pr__check_files_dirs(cfg_ctx *c, const pr_config *cfg)
{
    c->line_hint = 0;
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        const pr_files_sink_cfg *f = &cfg->pipelines[i].sinks.files;
        for (size_t j = 0; f->enabled && f->dir && j < i; j++) {
            const pr_files_sink_cfg *g = &cfg->pipelines[j].sinks.files;
            if (g->enabled && g->dir && pr__same_dir(f->dir, g->dir))
                pr__cfg_error(c, NULL, NULL,
                              "pipelines[%zu].sinks.files.dir: %s is also the files sink of "
                              "pipelines[%zu] (%s): their batch files would collide; give each "
                              "pipeline a directory of its own",
                              i, f->dir, j, cfg->pipelines[j].name);
        }
    }
}

/* Every Kafka client of pipeline `pl` built from its properties as the
 * service builds it (pr_kafka_client_new, then destroyed before it did
 * anything): a misspelt property, a bad value or an unreadable TLS file is
 * a config error of `run --check`, not a failed start. A connection's
 * failure is not the config's: the check does not wait for the brokers. */
static void pr__check_kafka_clients(cfg_ctx *c, const pr_pipeline_cfg *pl)
{
    const pr_kv_list *src = &pl->source.kafka.properties;
    const struct {
        bool on;
        pr_kafka_role role;
        const pr_kv_list *props;
        const char *key;
    } clients[] = {
        {pl->source.kafka.enabled && pr_kv_get(src, "bootstrap.servers"), PR_KAFKA_GROUP_CONSUMER,
         src, "source.kafka.properties"},
        {pl->source.kafka.enabled && pl->source.dead_letter_topic, PR_KAFKA_DLQ_PRODUCER, src,
         "source.kafka.properties"},
        {pl->sinks.kafka.enabled, PR_KAFKA_SINK_PRODUCER, &pl->sinks.kafka.properties,
         "sinks.kafka.properties"},
        {pl->vocab_log.enabled, PR_KAFKA_VOCAB_PRODUCER, &pl->vocab_log.properties,
         "vocab_log.properties"},
        {pl->vocab_log.enabled, PR_KAFKA_VOCAB_READER, &pl->vocab_log.properties,
         "vocab_log.properties"},
    };
    /* One report: the sink's and the log's lists carry the source's keys, so
     * a bad source value would otherwise come again under their paths. */
    bool failed = false;
    for (size_t i = 0; i < sizeof(clients) / sizeof(clients[0]) && !failed; i++) {
        if (!clients[i].on)
            continue;
        pr_kafka_client_conf cc = {.role = clients[i].role,
                                   .props = clients[i].props->items,
                                   .n_props = clients[i].props->n,
                                   .log_cb = pr_kafka_log_quiet_connect};
        rd_kafka_t *rk;
        char e[600];
        if (pr_kafka_client_new(&cc, &rk, e, sizeof(e))) {
            /* Roles named by their config path ("sinks.kafka.properties.acks:
             * ...") keep the property in the path. */
            size_t kl = strlen(clients[i].key);
            char *colon = strstr(e, ": ");
            if (!strncmp(e, clients[i].key, kl) && e[kl] == '.' && colon) {
                *colon = '\0';
                pr__cfg_error(c, NULL, e, "%s", colon + 2);
            } else {
                pr__cfg_error(c, NULL, clients[i].key, "%s", e);
            }
            failed = true;
        } else {
            rd_kafka_destroy(rk);
        }
    }
}

/* The ${env:}/${file:} values of the pipeline's Kafka properties resolved
 * (and dropped): an unset variable or an unreadable file is a config error
 * of every start, naming the key, without building a client. One report:
 * the sink's and the log's lists carry the source's keys. */
static void pr__check_kafka_refs(cfg_ctx *c, const pr_pipeline_cfg *pl)
{
    const struct {
        bool on;
        const pr_kv_list *props;
        const char *key;
    } lists[] = {
        {pl->source.kafka.enabled, &pl->source.kafka.properties, "source.kafka.properties"},
        {pl->sinks.kafka.enabled, &pl->sinks.kafka.properties, "sinks.kafka.properties"},
        {pl->vocab_log.enabled, &pl->vocab_log.properties, "vocab_log.properties"},
    };
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        for (size_t k = 0; lists[i].on && k < lists[i].props->n; k++) {
            char *v, err[700], key[PR__PATH_MAX];
            if (!pr_kv_ref_resolve(lists[i].props->items[k].value, &v, err, sizeof(err))) {
                free(v);
                continue;
            }
            snprintf(key, sizeof(key), "%s.%s", lists[i].key, lists[i].props->items[k].key);
            pr__cfg_error(c, NULL, key, "%s", err);
            return;
        }
}

int pr_config_check_kafka(const pr_config *cfg, char *errstr, size_t errstr_size)
{
    if (errstr && errstr_size)
        errstr[0] = '\0';
    cfg_ctx c = {.origin = cfg->origin, .err = errstr, .errn = errstr_size};
    pr__path_push(&c, "pipelines");
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        size_t old = pr__path_push_index(&c, i);
        c.line_hint = cfg->pipelines[i].line;
        pr__check_kafka_clients(&c, &cfg->pipelines[i]);
        pr__path_pop(&c, old);
    }
    pr__path_pop(&c, 0);
    return c.n_errors ? PR_EINVAL : 0;
}

int pr_config_check_streaming(const pr_config *cfg, char *errstr, size_t errstr_size)
{
    if (errstr && errstr_size)
        errstr[0] = '\0';
    cfg_ctx c = {.origin = cfg->origin, .err = errstr, .errn = errstr_size};
    pr__path_push(&c, "pipelines");
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        const pr_pipeline_cfg *pl = &cfg->pipelines[i];
        size_t old = pr__path_push_index(&c, i);
        c.line_hint = pl->line;
        const pr_kafka_source_cfg *k = &pl->source.kafka;
        if (!k->enabled) {
            pr__cfg_error(
                &c, NULL, "source.kafka",
                "missing: streaming needs a Kafka source (topics, properties.bootstrap.servers)");
        } else {
            if (k->n_topics == 0)
                pr__cfg_error(&c, NULL, "source.kafka.topics",
                              "missing: at least one topic is needed");
            const char *bs = pr_kv_get(&k->properties, "bootstrap.servers");
            if (!bs || !bs[0])
                pr__cfg_error(&c, NULL, "source.kafka.properties.bootstrap.servers",
                              "missing: the Kafka brokers to connect to");
        }
        pr__check_kafka_refs(&c, pl);
        /* A declared schema reads JSON, Avro or Protobuf events (the JSON
         * decoder applies it, with the format's reader); the other formats
         * are the Criteo layout. */
        bool by_schema = pl->source.format == PR_FORMAT_JSON ||
                         pl->source.format == PR_FORMAT_AVRO ||
                         pl->source.format == PR_FORMAT_PROTOBUF;
        if (pl->features.declared && !by_schema)
            pr__cfg_error(&c, NULL, "source.format",
                          "a declared schema reads JSON, Avro or Protobuf events: set "
                          "source.format: json, avro or protobuf (%s is the Criteo layout)",
                          pr_source_format_name(pl->source.format));
        if (!pl->features.declared && by_schema)
            pr__cfg_error(&c, NULL, "source.format",
                          "%s needs a declared schema (schema: { event_time, labels, dense: "
                          "[...], sparse: [...] }) to say which fields to read",
                          pr_source_format_name(pl->source.format));
        const pr_sinks_cfg *s = &pl->sinks;
        if (!s->trainer.enabled && !s->kafka.enabled && !s->files.enabled)
            pr__cfg_error(&c, NULL, "sinks",
                          "no enabled sink: configure at least one of trainer, kafka, files");
        if (pl->spec.count_mode == PR_COUNT_TWO_PASS)
            pr__cfg_error(&c, NULL, "transform.vocab.count_mode",
                          "two_pass needs all data up front; streaming supports only `streaming`");
        /* Popular batches are cut by the hot sets; checkpoint delivery needs
         * exact offset ranges per batch, which two streams cannot give. */
        if (pl->batch.split == PR_BATCH_SPLIT_POPULAR && cfg->hot.top_k == 0)
            pr__cfg_error(
                &c, NULL, "batch.split",
                "popular needs hot sets: set hot.top_k > 0 (the hot sets decide which rows "
                "are popular)");
        if (pl->batch.split == PR_BATCH_SPLIT_POPULAR && s->trainer.enabled &&
            s->trainer.delivery == PR_TRAINER_DELIVERY_CHECKPOINT)
            pr__cfg_error(&c, NULL, "batch.split",
                          "popular cannot be combined with sinks.trainer.delivery: checkpoint (a "
                          "checkpoint needs one stream of exact offset ranges)");
        if (pl->batch.popular_min_rows && pl->batch.split != PR_BATCH_SPLIT_POPULAR)
            pr__cfg_error(&c, NULL, "batch.popular_min_rows",
                          "applies only to batch.split: popular (there is no popular stream)");
        if (pl->batch.popular_min_rows > pl->batch.size)
            pr__cfg_error(&c, NULL, "batch.popular_min_rows",
                          "%u is more than batch.size %u (no popular batch could go out)",
                          pl->batch.popular_min_rows, pl->batch.size);
        pr__path_pop(&c, old);
    }
    pr__path_pop(&c, 0);
    pr__check_listen_clash(&c, cfg);
    pr__check_files_dirs(&c, cfg);
    return c.n_errors ? PR_EINVAL : 0;
}

/* ---------------------------------------------------------------- small queries */

const pr_pipeline_cfg *pr_config_pipeline(const pr_config *cfg, const char *name)
{
    for (size_t i = 0; cfg && name && i < cfg->n_pipelines; i++)
        if (strcmp(cfg->pipelines[i].name, name) == 0)
            return &cfg->pipelines[i];
    return NULL;
}

pr_engine_opts pr_config_engine_opts(const pr_config *cfg)
{
    return cfg->engine;
}

/* ---------------------------------------------------------------- reference */

static void pr__type_doc(const cfg_key *k, char *b, size_t bn)
{
    char names[256];
    switch (k->type) {
    case KT_BOOL:
        snprintf(b, bn, "bool");
        break;
    case KT_INT: {
        uint64_t fmax = k->is_signed ? (uint64_t)INT64_MAX >> (64 - 8 * k->width)
                                     : UINT64_MAX >> (64 - 8 * k->width);
        if (k->max && k->max < fmax)
            snprintf(b, bn, "integer %" PRId64 "..%" PRIu64, k->min, k->max);
        else
            snprintf(b, bn, "integer >= %" PRId64, k->min);
        break;
    }
    case KT_STR:
        if (k->names) {
            pr__join_names(k->names, names, sizeof(names));
            snprintf(b, bn, "one of: %s", names);
        } else {
            snprintf(b, bn, "string");
        }
        break;
    case KT_NAME:
        snprintf(b, bn, "name");
        break;
    case KT_ENUM:
        pr__join_names(k->names, names, sizeof(names));
        snprintf(b, bn, "one of: %s", names);
        break;
    case KT_SIZE:
        snprintf(b, bn, "size");
        break;
    case KT_HOSTPORT:
        snprintf(b, bn, "host:port");
        break;
    case KT_STRLIST:
        snprintf(b, bn, "list of strings");
        break;
    case KT_KV:
        snprintf(b, bn, "mapping of strings");
        break;
    case KT_MAP:
        snprintf(b, bn, "mapping");
        break;
    case KT_CUSTOM:
        snprintf(b, bn, "%s", k->type_doc ? k->type_doc : "");
        break;
    }
}

static void pr__write_table(FILE *f, const cfg_table *t, const char *prefix)
{
    for (size_t i = 0; i < pr__table_n(t); i++) {
        const cfg_key key = pr__table_key(t, i), *k = &key;
        char path[256], type[320];
        snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "." : "", k->name);
        pr__type_doc(k, type, sizeof(type));
        fprintf(f, "| `%s` | %s | %s%s%s | %s%s |\n", path, type, k->def ? "`" : "",
                k->def ? k->def : (k->flags & KF_REQUIRED ? "required" : "-"), k->def ? "`" : "",
                k->doc ? k->doc : "", k->off2 && k->type == KT_MAP ? " Enabled when present." : "");
        char sub[300];
        if (k->flags & KF_LIST) {
            snprintf(sub, sizeof(sub), "%s[]", path);
            pr__write_table(f, k->sub, sub);
        } else if (k->flags & KF_DICT) {
            snprintf(sub, sizeof(sub), "%s.<column>", path);
            pr__write_table(f, k->sub, sub);
        } else if (k->type == KT_MAP || (k->flags & KF_SUB)) {
            pr__write_table(f, k->sub, path);
        }
    }
}

void pr_config_write_reference(FILE *f)
{
    fprintf(f, "| key | type | default | meaning |\n|---|---|---|---|\n");
    pr__write_table(f, &root_tab, "");
}
