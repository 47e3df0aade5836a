/*
 * config_schema.c — the declared feature schema (issue 20).
 *
 * schema.event_time / labels / dense: [...] / sparse: [...] / cpu_ops fill
 * pl->features (pr_engine.h's pr_feature_schema) one item at a time through
 * the item tables below; the engine's own pr_feature_check_chain then checks
 * each chain's types, so the rules live once, beside the operator table.
 * Without a declared schema finish_pipeline (pr_config.c) builds the Criteo
 * preset. Split from pr_config.c, whose walker and helpers it uses through
 * pr_config_int.h.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_config_int.h"

/* A finite number. */
static bool pr__parse_number(cfg_ctx *c, yaml_node_t *n, double *out)
{
    const char *s = pr__want_scalar(c, n, "a number");
    if (!s)
        return false;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(d)) {
        pr__cfg_error(c, n, NULL, "expected a finite number, got '%.80s'", s);
        return false;
    }
    *out = d;
    return true;
}

bool pr__is_int_text(const char *s)
{
    size_t i = s[0] == '-' || s[0] == '+';
    if (!s[i])
        return false;
    for (; s[i]; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* The scalar text s of node n as an id value (a fill step's): an integer
 * (plain; ids up to 2^64-1) or a string; `what` begins the refusal of a
 * plain number ("a sparse value is a string or an integer"). */
static bool pr__id_text(cfg_ctx *c, yaml_node_t *n, const char *s, const char *what,
                        pr_fop_step *st)
{
    bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (plain && pr__is_int_text(s)) {
        static const cfg_key ik = {
            .name = "value", .type = KT_INT, .width = 8, .is_signed = true, .min = INT64_MIN};
        uint64_t v;
        if (s[0] != '-' && strtoull(s, NULL, 10) > (uint64_t)INT64_MAX) {
            errno = 0;
            v = strtoull(s, NULL, 10); /* ids up to 2^64-1 */
            if (errno) {
                pr__cfg_error(c, n, NULL, "%.80s is out of range", s);
                return false;
            }
        } else if (!pr__parse_int_key(c, n, &ik, &v)) {
            return false;
        }
        st->value_type = PR_FTYPE_INT;
        st->n = v;
        return true;
    }
    char *end;
    if (plain && (strtod(s, &end), end != s && !*end)) {
        pr__cfg_error(c, n, NULL, "%s, got '%.80s' (quote it to mean the string)", what, s);
        return false;
    }
    if (strlen(s) >= PR_FOP_STR_MAX) {
        pr__cfg_error(c, n, NULL, "at most %d bytes, got %zu", PR_FOP_STR_MAX - 1, strlen(s));
        return false;
    }
    st->value_type = PR_FTYPE_STR;
    snprintf(st->str, sizeof(st->str), "%s", s);
    return true;
}

/* A fill or default value for a feature of `kind`, as a fill step: a number
 * for labels and dense features; an integer (plain) or a string otherwise. */
static bool pr__parse_value(cfg_ctx *c, yaml_node_t *n, pr_feature_kind kind, pr_fop_step *st)
{
    st->op = PR_FOP_FILL;
    if (kind == PR_FEAT_LABEL || kind == PR_FEAT_DENSE) {
        st->value_type = PR_FTYPE_NUM;
        return pr__parse_number(c, n, &st->a);
    }
    const char *s = pr__want_scalar(c, n, "a string or an integer");
    return s && pr__id_text(c, n, s, "a sparse value is a string or an integer", st);
}

/* A dotted path into the event: segments non-empty, no spaces or controls. */
static bool pr__parse_path(cfg_ctx *c, yaml_node_t *n, char *dst)
{
    const char *s = pr__want_scalar(c, n, "a path (e.g. user.id)");
    if (!s)
        return false;
    size_t len = strlen(s);
    bool ok =
        len > 0 && len < PR_FEAT_PATH_MAX && s[0] != '.' && s[len - 1] != '.' && !strstr(s, "..");
    for (size_t i = 0; ok && i < len; i++)
        ok = (unsigned char)s[i] > 0x20 && s[i] != 0x7f;
    if (!ok) {
        pr__cfg_error(c, n, NULL,
                      "invalid path '%.80s' (dotted keys such as user.id: 1..%d characters, "
                      "no empty segment, no spaces)",
                      s, PR_FEAT_PATH_MAX - 1);
        return false;
    }
    snprintf(dst, PR_FEAT_PATH_MAX, "%s", s);
    return true;
}

/* ---- operator arguments, one parser per pr_fop_arg */

typedef bool (*pr__farg_fn)(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f,
                            pr_fop_step *st);

static bool pr__farg_none(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    pr__cfg_error(c, arg, NULL, "'%s' takes no argument", pr_fop_table[st->op].name);
    return false;
}

static bool pr__farg_value(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    return pr__parse_value(c, arg, f->kind, st);
}

/* A list of numbers: exactly `want` of them, or 1..max when want is 0. */
static bool pr__num_list(cfg_ctx *c, yaml_node_t *n, size_t want, size_t max, double *out,
                         size_t *count)
{
    char g[96];
    size_t items = n->type == YAML_SEQUENCE_NODE
                       ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
                       : 0;
    if (n->type != YAML_SEQUENCE_NODE || (want && items != want) || (!want && !items) ||
        items > max) {
        pr__got(n, g, sizeof(g));
        if (want)
            pr__cfg_error(c, n, NULL, "expected a list of %zu numbers, got %s%s", want,
                          n->type == YAML_SEQUENCE_NODE ? "a list of another length" : g, "");
        else
            pr__cfg_error(c, n, NULL, "expected a list of 1..%zu numbers, got %s", max,
                          n->type == YAML_SEQUENCE_NODE && items ? "more" : g);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; i < items; i++) {
        size_t old = pr__path_push_index(c, i);
        ok &= pr__parse_number(c, pr__node_get(c, n->data.sequence.items.start[i]), &out[i]);
        pr__path_pop(c, old);
    }
    *count = items;
    return ok;
}

static bool pr__farg_range(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    double v[2];
    size_t n;
    if (!pr__num_list(c, arg, 2, 2, v, &n))
        return false;
    if (v[0] > v[1]) {
        pr__cfg_error(c, arg, NULL, "[lo, hi] needs lo <= hi, got [%g, %g]", v[0], v[1]);
        return false;
    }
    st->a = v[0];
    st->b = v[1];
    return true;
}

static bool pr__farg_stats(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    char g[96];
    if (arg->type != YAML_MAPPING_NODE) {
        pr__got(arg, g, sizeof(g));
        pr__cfg_error(c, arg, NULL, "expected { mean: M, std: S }, got %s", g);
        return false;
    }
    bool ok = true;
    for (yaml_node_pair_t *p = arg->data.mapping.pairs.start; p < arg->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = pr__node_get(c, p->key);
        if (kn->type != YAML_SCALAR_NODE ||
            (strcmp(pr__scalar(kn), "mean") != 0 && strcmp(pr__scalar(kn), "std") != 0)) {
            pr__cfg_error(c, kn, NULL, "unknown key (valid: mean, std)");
            ok = false;
        }
    }
    yaml_node_t *mean = pr__map_find(c, arg, "mean"), *std = pr__map_find(c, arg, "std");
    if (!ok)
        return false;
    if (!mean || !std) {
        pr__cfg_error(c, arg, NULL, "needs both mean and std");
        return false;
    }
    size_t old = pr__path_push(c, "mean");
    ok &= pr__parse_number(c, mean, &st->a);
    pr__path_pop(c, old);
    old = pr__path_push(c, "std");
    if (pr__parse_number(c, std, &st->b) && !(st->b > 0)) {
        pr__cfg_error(c, std, NULL, "must be > 0, got %g", st->b);
        ok = false;
    }
    pr__path_pop(c, old);
    return ok;
}

static bool pr__farg_bounds(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    size_t n;
    if (!pr__num_list(c, arg, 0, PR_FOP_MAX_BOUNDS, st->bounds, &n))
        return false;
    for (size_t i = 1; i < n; i++) {
        if (!(st->bounds[i] > st->bounds[i - 1])) {
            yaml_node_t *it = pr__node_get(c, arg->data.sequence.items.start[i]);
            size_t old = pr__path_push_index(c, i);
            pr__cfg_error(c, it, NULL, "boundaries must be strictly increasing: %g comes after %g",
                          st->bounds[i], st->bounds[i - 1]);
            pr__path_pop(c, old);
            return false;
        }
    }
    st->n_bounds = (uint16_t)n;
    return true;
}

static bool pr__farg_count(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    static const cfg_key nk = {.name = "N", .type = KT_INT, .width = 8, .min = 1};
    return pr__parse_int_key(c, arg, &nk, &st->n);
}

static bool pr__farg_unit(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    const char *s = pr__want_scalar(c, arg, "a time unit (s, ms, us, rfc3339)");
    int u = s ? pr__names_find(pr_time_unit_names, s) : -1;
    if (s && u < 0)
        pr__cfg_error(c, arg, NULL, "unknown unit '%.80s' (valid: s, ms, us, rfc3339)", s);
    if (u < 0)
        return false;
    st->unit = (pr_time_unit)u;
    return true;
}

static bool pr__farg_number(cfg_ctx *c, yaml_node_t *arg, const pr_feature_spec *f, pr_fop_step *st)
{
    (void)f;
    return pr__parse_number(c, arg, &st->a);
}

static const pr__farg_fn pr__farg_parsers[] = {
    [PR_FARG_NONE] = pr__farg_none,     [PR_FARG_VALUE] = pr__farg_value,
    [PR_FARG_RANGE] = pr__farg_range,   [PR_FARG_STATS] = pr__farg_stats,
    [PR_FARG_BOUNDS] = pr__farg_bounds, [PR_FARG_COUNT] = pr__farg_count,
    [PR_FARG_UNIT] = pr__farg_unit,     [PR_FARG_NUMBER] = pr__farg_number,
};

/* The event time of the pipeline being read (declared before the features). */
static const pr_feature_spec *pr__event_time(const cfg_ctx *c)
{
    for (uint32_t i = 0; c->pl && i < c->pl->features.n_features; i++)
        if (c->pl->features.features[i].kind == PR_FEAT_EVENT_TIME)
            return &c->pl->features.features[i];
    return NULL;
}

/* Operator names for messages; `cross` only where it can be named (cpu_ops). */
static void pr__fop_names(bool with_cross, char *b, size_t bn)
{
    size_t len = 0;
    b[0] = '\0';
    for (int op = 0; op < PR_FOP__COUNT; op++)
        if (op != PR_FOP_CROSS || with_cross)
            len += (size_t)snprintf(b + len, len < bn ? bn - len : 0, "%s%s", len ? ", " : "",
                                    pr_fop_table[op].name);
}

/* One item of `ops:`: a name, or { name: argument }. */
static bool pr__feat_op(cfg_ctx *c, yaml_node_t *it, const pr_feature_spec *f, pr_fop_step *st)
{
    char g[96], valid[256];
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
    int op = pr_fop_from_name(name);
    pr__fop_names(false, valid, sizeof(valid));
    if (!name) {
        pr__got(it, g, sizeof(g));
        pr__cfg_error(c, it, NULL, "expected an operator name or { operator: argument }, got %s",
                      g);
        return false;
    }
    if (op < 0 || op == PR_FOP_CROSS) {
        pr__cfg_error(c, it, NULL, "%s '%.80s' (valid: %s)",
                      op < 0 ? "unknown operator" : "not an operator in ops:", name, valid);
        return false;
    }
    memset(st, 0, sizeof(*st));
    st->op = (pr_fop)op;
    const pr_fop_info *in = &pr_fop_table[op];
    if (op == PR_FOP_AGE && !pr__event_time(c)) {
        pr__cfg_error(c, it, NULL,
                      "'age' counts to the record's event time: declare schema.event_time "
                      "({ path: ..., unit: ... })");
        return false;
    }
    if (arg) {
        size_t old = pr__path_push(c, name);
        bool ok = pr__farg_parsers[in->arg](c, arg, f, st);
        pr__path_pop(c, old);
        return ok;
    }
    if (in->arg_required) {
        pr__cfg_error(c, it, NULL, "'%s' needs an argument: %s", name, in->syntax);
        return false;
    }
    if (in->arg == PR_FARG_UNIT) {
        const pr_feature_spec *et = pr__event_time(c);
        if (!et) {
            pr__cfg_error(c, it, NULL,
                          "'%s' needs a time unit: declare schema.event_time or write "
                          "{ %s: ms } (s, ms, us, rfc3339)",
                          name, name);
            return false;
        }
        st->unit = et->unit;
    }
    return true;
}

/* The items of an `ops:` list after steps[0, *count): at most
 * PR_FEAT_MAX_OPS in all; an item that does not parse poisons *count
 * (PR_FEAT_MAX_OPS + 1: no chain check on top). */
static void pr__ops_list(cfg_ctx *c, yaml_node_t *n, const pr_feature_spec *f, pr_fop_step *steps,
                         uint8_t *count)
{
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of operators, got %s", g);
        return;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items + *count > PR_FEAT_MAX_OPS) {
        pr__cfg_error(c, n, NULL, "%zu operators, at most %d", items, PR_FEAT_MAX_OPS - *count);
        return;
    }
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        pr_fop_step st;
        if (pr__feat_op(c, it, f, &st))
            steps[(*count)++] = st;
        else
            *count = PR_FEAT_MAX_OPS + 1;
        pr__path_pop(c, old);
        if (*count > PR_FEAT_MAX_OPS)
            break;
    }
}

static void pr__h_feat_ops(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    pr__ops_list(c, n, f, f->ops, &f->n_ops);
}

static void pr__h_feat_path(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    if (pr__parse_path(c, n, f->paths[0]))
        f->n_paths = 1;
}

static void pr__h_feat_cross(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    char g[96];
    size_t items = n->type == YAML_SEQUENCE_NODE
                       ? (size_t)(n->data.sequence.items.top - n->data.sequence.items.start)
                       : 0;
    if (items < 2 || items > PR_FEAT_MAX_CROSS) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of 2..%d paths, got %s", PR_FEAT_MAX_CROSS,
                      n->type == YAML_SEQUENCE_NODE ? "another length" : g);
        return;
    }
    if (f->n_paths) {
        pr__cfg_error(c, n, NULL, "give either path or cross, not both");
        return;
    }
    bool ok = true;
    for (size_t i = 0; i < items; i++) {
        size_t old = pr__path_push_index(c, i);
        ok &= pr__parse_path(c, pr__node_get(c, n->data.sequence.items.start[i]), f->paths[i]);
        pr__path_pop(c, old);
    }
    if (!ok)
        return;
    f->n_paths = (uint8_t)items;
    memset(&f->ops[0], 0, sizeof(f->ops[0]));
    f->ops[0].op = PR_FOP_CROSS;
    f->n_ops = 1;
}

static void pr__h_feat_default(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    if (f->kind == PR_FEAT_LIST) {
        pr__cfg_error(c, n, NULL, "a list has no default: an absent list has length 0");
        return;
    }
    if (f->n_paths > 1) {
        pr__cfg_error(c, n, NULL, "a cross has no default: it is missing when a value is");
        return;
    }
    f->has_default = pr__parse_value(c, n, f->kind, &f->deflt);
}

static void pr__h_feat_keep(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    static const char *const keep_names[] = {"first", "last", NULL};
    pr_feature_spec *f = base;
    const char *s = pr__want_scalar(c, n, "first or last");
    int v = s ? pr__names_find(keep_names, s) : -1;
    if (s && v < 0)
        pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: first, last)", s);
    f->keep_last = v == 1;
}

/* list.from: keys (the path names a map whose keys are the list), entries
 * (its keys crossed with their values), values (its values are the list)
 * or value (the default: the list at the path). */
static void pr__h_list_from(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    static const char *const from_names[] = {"value", "keys", "entries", "values", NULL};
    const char *s = pr__want_scalar(c, n, "value, keys, entries or values");
    int v = s ? pr__names_find(from_names, s) : -1;
    if (s && v < 0)
        pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: value, keys, entries, values)", s);
    ((pr_feature_spec *)base)->from_keys = v >= 1;
    ((pr_feature_spec *)base)->from_entries = v == 2;
    ((pr_feature_spec *)base)->from_values = v == 3;
}

static void pr__finish_list(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)c;
    (void)map;
    if (present)
        ((pr_feature_spec *)base)->kind = PR_FEAT_LIST;
}

static const cfg_key list_keys[] = {
    {.name = "max_len",
     .type = KT_INT,
     .flags = KF_REQUIRED,
     .off = offsetof(pr_feature_spec, max_len),
     .width = FSIZE(pr_feature_spec, max_len),
     .min = 1,
     .max = PR_FEAT_MAX_LIST,
     .doc = "Values kept per record (1..4096); longer lists are cut."},
    K_CUSTOM("keep", 0, pr__h_feat_keep, "one of: first, last", "first",
             "Which end of a longer list is kept."),
    K_CUSTOM("from", 0, pr__h_list_from, "one of: value, keys, entries, values", "value",
             "keys: the path names a map (a JSON object, an Avro map, a Protobuf map field) and "
             "its keys, in the event's order, are the list (a tag set, a user's category "
             "scores); entries: each key crossed with its value into one id (an attribute map "
             "{\"color\": \"red\"}: color=red), a null value left out; values: its values, "
             "in the event's order, are the list (a slot map {\"top\": \"adA\"}: adA), a "
             "null value left out; value: the list at the path."),
};
static const cfg_table pr__list_tab = TABLE(list_keys, pr__finish_list);

static void pr__h_weights_path(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr__parse_path(c, n, ((pr_feature_spec *)base)->weights_path);
}

static void pr__h_weights_default(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    double d;
    if (!pr__parse_number(c, n, &d))
        return;
    if (!isfinite((float)d)) {
        pr__cfg_error(c, n, NULL, "%g is beyond float32", d);
        return;
    }
    f->has_weight_default = true;
    f->weight_default = d;
}

/* weights.ops: the `ops:` parser, then the engine's rule (numbers only). */
static void pr__h_weights_ops(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_feature_spec *f = base;
    pr__ops_list(c, n, f, f->weight_ops, &f->n_weight_ops);
    uint32_t bad;
    char e[300];
    if (f->n_weight_ops > PR_FEAT_MAX_OPS ||
        pr_feature_check_weight_ops(f, &bad, e, sizeof(e)) == 0)
        return;
    size_t old = pr__path_push_index(c, bad);
    pr__cfg_error(c, pr__node_get(c, n->data.sequence.items.start[bad]), NULL, "%s", e);
    pr__path_pop(c, old);
}

static void pr__h_weights_from(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    const char *s = pr__want_scalar(c, n, "values");
    if (s && strcmp(s, "values") != 0)
        pr__cfg_error(c, n, NULL, "unknown value '%.80s' (valid: values)", s);
    ((pr_feature_spec *)base)->weights_from_values = s && !strcmp(s, "values");
}

/* Exactly one of weights.path and weights.from. */
static void pr__finish_weights(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)base;
    if (!present)
        return;
    bool path = pr__map_find(c, map, "path") != NULL, from = pr__map_find(c, map, "from") != NULL;
    if (path == from)
        pr__cfg_error(c, map, NULL,
                      path ? "give path or from, not both"
                           : "missing path (the weights' field), or from: values (the values of "
                             "a map whose keys are the ids)");
}

static const cfg_key weights_keys[] = {
    K_CUSTOM("path", 0, pr__h_weights_path, "path", NULL,
             "Dotted path of the weights: a list of numbers, one per id, position by position "
             "(a field beside the ids in a list of objects, or a list as long as the ids'). "
             "Give path or from."),
    K_CUSTOM("from", 0, pr__h_weights_from, "values", NULL,
             "values: with list: { from: keys }, each key's value in the map is its weight. "
             "Give path or from."),
    K_CUSTOM("default", 0, pr__h_weights_default, "number", NULL,
             "Weight of an id that has none (its object lacks the field, or null there; its map "
             "value null; or no "
             "weights list); without it such a record is rejected (wrong_type)."),
    K_CUSTOM("ops", KF_DOC_DEFAULT, pr__h_weights_ops, "list of operators", "[]",
             "The weights' operator chain, numeric operators only (neg2zero, log1p, clip, "
             "standardize): each kept weight, the default applied first, in float64, then "
             "float32; a result that is not finite rejects the record (number_out_of_range)."),
};
static const cfg_table pr__weights_tab = TABLE(weights_keys, pr__finish_weights);

/* Cross-key checks of one feature, then its chain's types (the engine's). */
static void pr__finish_feature(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    pr_feature_spec *f = base;
    if (!present || f->n_ops > PR_FEAT_MAX_OPS)
        return;
    if (!f->n_paths) {
        if ((f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST) &&
            !pr__map_find(c, map, "path") && !pr__map_find(c, map, "cross"))
            pr__cfg_error(c, map, NULL, "missing path%s",
                          f->kind == PR_FEAT_SPARSE ? " (or cross: [path, path, ...])" : "");
        return;
    }
    if (f->kind == PR_FEAT_LIST && f->n_paths > 1) {
        pr__cfg_error(c, map, "list", "a cross is single-valued; it cannot be a list");
        return;
    }
    if (f->from_keys && f->kind != PR_FEAT_LIST) { /* only under list: */
        pr__cfg_error(c, map, "list.from", "keys makes a list; give list:");
        return;
    }
    if (f->from_entries && (f->weights_from_values || f->weights_path[0])) {
        pr__cfg_error(c, pr__map_find(c, map, "weights"), "weights",
                      "from: entries makes ids of the keys and their values: nothing is left "
                      "to weigh them (from: keys with weights: { from: values } reads values "
                      "as weights)");
        return;
    }
    if (f->from_values && (f->weights_from_values || f->weights_path[0])) {
        pr__cfg_error(c, pr__map_find(c, map, "weights"),
                      f->weights_from_values ? "weights.from" : "weights.path",
                      "list: { from: values } makes ids of the map's values: they cannot be "
                      "their own weights, and a map's entries line up with no other list (list: "
                      "{ from: keys } with weights: { from: values } weighs its keys by them)");
        return;
    }
    if (f->weights_from_values) {
        if (!f->from_keys) {
            pr__cfg_error(c, pr__map_find(c, map, "weights"), "weights.from",
                          "values are the weights of a map's keys: give list: { from: keys }");
            return;
        }
        snprintf(f->weights_path, sizeof(f->weights_path), "%s", f->paths[0]);
    } else if (f->from_keys && f->weights_path[0]) {
        pr__cfg_error(c, pr__map_find(c, map, "weights"), "weights.path",
                      "a map's keys are weighted by its values: weights: { from: values }");
        return;
    }
    if (f->weights_path[0] && f->kind != PR_FEAT_LIST) {
        pr__cfg_error(c, pr__map_find(c, map, "weights"), "weights",
                      "only a list feature (with list:) carries weights, one per id");
        return;
    }
    if (f->weights_path[0] && !f->weights_from_values &&
        strcmp(f->weights_path, f->paths[0]) == 0) {
        pr__cfg_error(c, pr__map_find(c, map, "weights"), "weights.path",
                      "'%s' is the ids' own path: the weights are another field", f->paths[0]);
        return;
    }
    if (!f->name[0])
        return;
    if (f->in.n && f->dim)
        pr__cfg_error(c, pr__map_find(c, map, "in"), "in",
                      "makes one number of the field; a vector (dim) has dim of them");
    if (f->encoding != PR_VEC_LIST && !f->dim)
        pr__cfg_error(c, pr__map_find(c, map, "encoding"), "encoding",
                      "applies to a dense vector: give dim too");
    if (f->dim) { /* its columns' names, NAME[dim-1] the longest, must fit */
        char last[PR_NAME_MAX + 16];
        int len = snprintf(last, sizeof(last), "%s[%u]", f->name, f->dim - 1u);
        if (len >= PR_NAME_MAX)
            pr__cfg_error(c, pr__map_find(c, map, "name"), "name",
                          "with dim %u the columns are named %s[0]..%s: at most %d characters "
                          "each, so the name at most %d",
                          f->dim, f->name, last, PR_NAME_MAX - 1,
                          PR_NAME_MAX - 1 - (len - (int)strlen(f->name)));
    }
    uint32_t bad;
    char e[300];
    if (pr_feature_check_chain(f, &bad, e, sizeof(e)) == 0)
        return;
    yaml_node_t *ops = pr__map_find(c, map, "ops");
    uint32_t first = f->n_paths > 1; /* the implicit cross step is not in ops: */
    if (ops && bad >= first && bad < f->n_ops) {
        char sub[32];
        snprintf(sub, sizeof(sub), "ops[%u]", bad - first);
        pr__cfg_error(c, pr__node_get(c, ops->data.sequence.items.start[bad - first]), sub, "%s",
                      e);
    } else {
        pr__cfg_error(c, ops ? ops : map, ops ? "ops" : NULL, "%s", e);
    }
}

#define FEAT_NAME_KEY                                                                              \
    {                                                                                              \
        .name = "name", .type = KT_NAME, .flags = KF_REQUIRED,                                     \
        .off = offsetof(pr_feature_spec, name), .width = PR_NAME_MAX,                              \
        .doc = "Unique feature name (A-Z a-z 0-9 _ -): tensor keys, file and vocabulary names."    \
    }
#define FEAT_PATH_KEY(fl)                                                                          \
    K_CUSTOM("path", fl, pr__h_feat_path, "path", NULL,                                            \
             "Dotted path of the field in the event, e.g. user.id.")
#define FEAT_DEFAULT_KEY(tdoc, dc) K_CUSTOM("default", 0, pr__h_feat_default, tdoc, NULL, dc)
#define FEAT_OPS_KEY                                                                               \
    K_CUSTOM("ops", KF_DOC_DEFAULT, pr__h_feat_ops, "list of operators", "[]",                     \
             "The feature's operator chain, in order (see Feature schema, Operators).")

static void pr__h_feat_in(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k);
#define FEAT_IN_KEY(what)                                                                          \
    K_CUSTOM(                                                                                      \
        "in", 0, pr__h_feat_in, "list of 1..64 values", NULL,                                      \
        "Present: the " what " is 1 when the field's value (a list: one of its elements) "         \
        "is one of these (strings, integers, true/false, matched as schema.filter "                \
        "matches), else 0; absent, null or []: default, else missing. The field may hold any "     \
        "type (an event type string: `in: [click]`).")

static const cfg_key label_item_keys[] = {
    FEAT_NAME_KEY,
    FEAT_PATH_KEY(KF_REQUIRED),
    FEAT_DEFAULT_KEY("number", "Value of a missing label; without it the label is missing."),
    FEAT_IN_KEY("label"),
    FEAT_OPS_KEY,
};
const cfg_table pr__label_item_tab = TABLE(label_item_keys, pr__finish_feature);

static const cfg_key dense_item_keys[] = {
    FEAT_NAME_KEY,
    FEAT_PATH_KEY(KF_REQUIRED),
    {.name = "dim",
     .type = KT_INT,
     .off = offsetof(pr_feature_spec, dim),
     .width = FSIZE(pr_feature_spec, dim),
     .min = 1,
     .max = PR_FEAT_MAX_DIM,
     .doc = "Present: the field is a vector of dim numbers (an embedding: a list, or float32 "
            "bytes with encoding f32), each through ops, into dim dense columns "
            "NAME[0]..NAME[dim-1] (1..4096)."},
    {.name = "encoding",
     .type = KT_ENUM,
     .off = offsetof(pr_feature_spec, encoding),
     .names = pr_vec_encoding_names,
     .def = "list",
     .doc = "A vector's form in the event: list (numbers) or f32 (dim float32 little-endian as "
            "bytes: Avro bytes/fixed, Protobuf bytes; base64 in JSON)."},
    FEAT_DEFAULT_KEY("number", "Value of a missing field, before the operators."),
    FEAT_IN_KEY("value (before the operators)"),
    FEAT_OPS_KEY,
};
const cfg_table pr__dense_item_tab = TABLE(dense_item_keys, pr__finish_feature);

static const cfg_key sparse_item_keys[] = {
    FEAT_NAME_KEY,
    FEAT_PATH_KEY(0),
    K_CUSTOM("cross", 0, pr__h_feat_cross, "list of 2..8 paths", NULL,
             "Instead of path: the values at these paths crossed (hashed together) into one "
             "64-bit id, then ops."),
    {.name = "list",
     .type = KT_MAP,
     .off = 0,
     .sub = &pr__list_tab,
     .doc = "Present: the field is a list (multi-hot), each element through ops."},
    {.name = "weights",
     .type = KT_MAP,
     .off = 0,
     .sub = &pr__weights_tab,
     .doc = "A list feature's weights (an id-score list: a KeyedJaggedTensor's weights): one "
            "float32 per id, read at weights.path, or a map's values (weights.from)."},
    FEAT_DEFAULT_KEY("string or integer",
                     "Value of a missing field, before the operators (not for lists or "
                     "crosses)."),
    FEAT_OPS_KEY,
    {.name = "table",
     .type = KT_NAME,
     .off = offsetof(pr_feature_spec, table),
     .width = PR_NAME_MAX,
     .doc = "A shared vocabulary: the name of another sparse feature whose vocabulary (and "
            "so embedding table) this one uses, e.g. a click history's items in the "
            "candidate item's table; the same value gets the same index in both. Both need "
            "vocab and the same operators up to it; that feature names no table itself. "
            "Unset: the feature's own."},
};
const cfg_table pr__sparse_item_tab = TABLE(sparse_item_keys, pr__finish_feature);

static const cfg_key event_time_keys[] = {
    FEAT_PATH_KEY(KF_REQUIRED),
    {.name = "unit",
     .type = KT_ENUM,
     .flags = KF_REQUIRED,
     .off = offsetof(pr_feature_spec, unit),
     .names = pr_time_unit_names,
     .doc = "s, ms, us (since the epoch) or rfc3339 (a string with an offset; a Protobuf "
            "google.protobuf.Timestamp field reads as one)."},
};
const cfg_table pr__event_time_tab = TABLE(event_time_keys, pr__finish_feature);

/* Add a parsed feature to the pipeline; names are unique across the schema. */
static void pr__feature_add(cfg_ctx *c, yaml_node_t *it, pr_pipeline_cfg *pl,
                            const pr_feature_spec *f)
{
    pr_feature_schema *fs = &pl->features;
    for (uint32_t i = 0; f->name[0] && i < fs->n_features; i++)
        if (strcmp(fs->features[i].name, f->name) == 0) {
            pr__cfg_error(c, pr__map_find(c, it, "name"), "name",
                          "duplicate feature name '%s' (also a %s feature)", f->name,
                          pr_feature_kind_names[fs->features[i].kind]);
            return;
        }
    pr_feature_spec *a = realloc(fs->features, (fs->n_features + 1) * sizeof(*a));
    if (!a)
        abort(); /* startup only, as pr__xcalloc */
    fs->features = a;
    fs->features[fs->n_features++] = *f;
}

void pr__h_event_time(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    pr_feature_spec f;
    memset(&f, 0, sizeof(f));
    f.kind = PR_FEAT_EVENT_TIME;
    snprintf(f.name, sizeof(f.name), "event_time");
    pl->features.declared = true;
    int before = c->n_errors;
    pr__apply_map(c, n, &pr__event_time_tab, &f);
    if (c->n_errors == before)
        pr__feature_add(c, n, pl, &f);
}

/* schema.labels, and schema.dense / schema.sparse as lists of features. */
static void pr__feature_list(cfg_ctx *c, yaml_node_t *n, pr_pipeline_cfg *pl, pr_feature_kind kind)
{
    static const cfg_table *const tabs[] = {[PR_FEAT_LABEL] = &pr__label_item_tab,
                                            [PR_FEAT_DENSE] = &pr__dense_item_tab,
                                            [PR_FEAT_SPARSE] = &pr__sparse_item_tab};
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of features ({ name, path, ... }), got %s", g);
        return;
    }
    pl->features.declared = true;
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        pr_feature_spec f;
        memset(&f, 0, sizeof(f));
        f.kind = kind;
        int before = c->n_errors;
        if (it->type != YAML_MAPPING_NODE) {
            pr__got(it, g, sizeof(g));
            pr__cfg_error(c, it, NULL, "expected a feature { name, path, ... }, got %s", g);
        } else {
            pr__apply_map(c, it, tabs[kind], &f);
        }
        if (c->n_errors == before)
            pr__feature_add(c, it, pl, &f);
        pr__path_pop(c, old);
    }
}

void pr__h_labels(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr__feature_list(c, n, base, PR_FEAT_LABEL);
}

/* schema.dense / schema.sparse: a count (the Criteo layout) or a feature list. */
void pr__h_schema_count(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    pr_pipeline_cfg *pl = base;
    bool sparse = strcmp(k->name, "sparse") == 0;
    if (n->type == YAML_SEQUENCE_NODE) {
        pr__feature_list(c, n, pl, sparse ? PR_FEAT_SPARSE : PR_FEAT_DENSE);
        return;
    }
    const cfg_key ik = {
        .name = k->name, .type = KT_INT, .width = 2, .max = sparse ? PR_MAX_SPARSE : PR_MAX_DENSE};
    uint64_t v;
    if (!pr__parse_int_key(c, n, &ik, &v))
        return;
    if (sparse)
        pl->spec.n_sparse = (uint16_t)v;
    else
        pl->spec.n_dense = (uint16_t)v;
}

void pr__h_cpu_ops(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    char g[96], valid[256];
    if (n->type == YAML_SCALAR_NODE && !pr__is_null(n) && strcmp(pr__scalar(n), "all") == 0) {
        pl->features.cpu_ops = (1u << PR_FOP__COUNT) - 1;
        return;
    }
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected `all` or a list of operators, got %s", g);
        return;
    }
    pr__fop_names(true, valid, sizeof(valid));
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        const char *s = pr__want_scalar(c, it, "an operator name");
        int op = s ? pr_fop_from_name(s) : -1;
        if (s && op < 0)
            pr__cfg_error(c, it, NULL, "unknown operator '%.80s' (valid: %s)", s, valid);
        if (op >= 0)
            pl->features.cpu_ops |= 1u << op;
        pr__path_pop(c, old);
    }
}

/* ---------------------------------------------------------------- schema.filter */

/* One value of an `in` / `not_in` list: an integer (plain), true / false (1 /
 * 0, as an id reads them) or a string (a quoted number is a string). */
static bool pr__filter_value(cfg_ctx *c, yaml_node_t *n, pr_filter_value *v)
{
    if (pr__is_null(n)) {
        pr__cfg_error(c, n, NULL,
                      "null is not a value to match: absent and null are the same "
                      "(`present: false` keeps them)");
        return false;
    }
    const char *s = pr__want_scalar(c, n, "a string, an integer, true or false");
    if (!s)
        return false;
    bool plain = n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    if (plain && (strcmp(s, "true") == 0 || strcmp(s, "false") == 0)) {
        v->type = PR_FTYPE_INT;
        v->i = s[0] == 't';
        return true;
    }
    if (plain && pr__is_int_text(s)) {
        errno = 0;
        strtoll(s, NULL, 10);
        if (errno == ERANGE) {
            pr__cfg_error(c, n, NULL,
                          "%.80s is beyond int64 (-9223372036854775808..9223372036854775807): "
                          "an event's integer that large is not read as one",
                          s);
            return false;
        }
    }
    pr_fop_step st;
    memset(&st, 0, sizeof(st));
    if (!pr__id_text(c, n, s, "a filter value is a string, an integer, true or false", &st))
        return false;
    v->type = st.value_type;
    v->i = (int64_t)st.n;
    v->len = (uint8_t)strlen(st.str);
    memcpy(v->str, st.str, sizeof(v->str));
    return true;
}

/* A list of 1..max values to match (`in` / `not_in`), each read by
 * pr__filter_value and handed to add, which answers false for one already
 * listed (said here, with the item's key). */
typedef bool (*pr__value_add_fn)(void *opaque, const pr_filter_value *v);

static void pr__value_list(cfg_ctx *c, yaml_node_t *n, size_t max, pr__value_add_fn add,
                           void *opaque)
{
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of values ([click, view], [1, 2]), got %s", g);
        return;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items == 0 || items > max) {
        pr__cfg_error(c, n, NULL, "1..%zu values, got %zu", max, items);
        return;
    }
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        pr_filter_value v;
        memset(&v, 0, sizeof(v));
        if (pr__filter_value(c, it, &v) && !add(opaque, &v))
            pr__cfg_error(c, it, NULL, "'%s' is listed twice",
                          v.type == PR_FTYPE_STR ? v.str : pr__scalar(it));
        pr__path_pop(c, old);
    }
}

/* A label's or dense number's `in` (pr_feature_in): a string kept as its
 * pr_fop_hash64, and the values as written in `text` for explain (cut
 * with "..." where they do not fit). */
static bool pr__feat_in_add(void *opaque, const pr_filter_value *v)
{
    pr_feature_in *in = opaque;
    uint64_t key = v->type == PR_FTYPE_STR ? pr_fop_hash64(v->str, v->len) : (uint64_t)v->i;
    for (uint16_t j = 0; j < in->n; j++)
        if (in->type[j] == v->type && in->key[j] == key)
            return false;
    in->type[in->n] = v->type;
    in->key[in->n++] = key;
    size_t used = strlen(in->text), room = sizeof(in->text) - used;
    char item[PR_FOP_STR_MAX + 8];
    if (v->type == PR_FTYPE_STR)
        snprintf(item, sizeof(item), "%s\"%s\"", in->n > 1 ? ", " : "", v->str);
    else
        snprintf(item, sizeof(item), "%s%" PRId64, in->n > 1 ? ", " : "", v->i);
    if (used >= 3 && !strcmp(in->text + used - 3, "..."))
        return true;              /* cut already */
    if (strlen(item) + 6 <= room) /* leaves room for ", ..." */
        memcpy(in->text + used, item, strlen(item) + 1);
    else
        snprintf(in->text + used, room, "%s...", in->n > 1 ? ", " : "");
    return true;
}

static void pr__h_feat_in(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr__value_list(c, n, PR_FEAT_MAX_IN, pr__feat_in_add, &((pr_feature_spec *)base)->in);
}

static void pr__h_filter_path(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr__parse_path(c, n, ((pr_filter_cond *)base)->path);
}

static bool pr__filter_add(void *opaque, const pr_filter_value *v)
{
    pr_filter_cond *fc = opaque;
    for (uint16_t j = 0; j < fc->n_values; j++)
        if (fc->values[j].type == v->type && fc->values[j].i == v->i &&
            strcmp(fc->values[j].str, v->str) == 0)
            return false;
    fc->values[fc->n_values++] = *v;
    return true;
}

/* in: [...] / not_in: [...]: the values, distinct. */
static void pr__h_filter_values(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    pr_filter_cond *fc = base;
    fc->op = strcmp(k->name, "in") == 0 ? PR_FILTER_IN : PR_FILTER_NOT_IN;
    pr__value_list(c, n, PR_FILTER_MAX_VALUES, pr__filter_add, fc);
}

static void pr__h_filter_present(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    const char *s = pr__want_scalar(c, n, "true or false");
    if (!s)
        return;
    if (strcmp(s, "true") && strcmp(s, "false")) {
        pr__cfg_error(c, n, NULL, "expected true or false, got '%.80s'", s);
        return;
    }
    ((pr_filter_cond *)base)->op = s[0] == 't' ? PR_FILTER_PRESENT : PR_FILTER_ABSENT;
}

/* Exactly one test per condition. */
static void pr__finish_filter_cond(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)base;
    if (!present || !map)
        return;
    static const char *const tests[] = {"in", "not_in", "present"};
    int n = 0;
    for (size_t i = 0; i < 3; i++)
        n += pr__map_find(c, map, tests[i]) != NULL;
    if (n != 1)
        pr__cfg_error(c, map, NULL,
                      "%s: a condition has one test, `in: [...]`, `not_in: [...]` or "
                      "`present: true|false`",
                      n ? "more than one test" : "no test");
}

static const cfg_key filter_item_keys[] = {
    K_CUSTOM("path", KF_REQUIRED, pr__h_filter_path, "path", NULL,
             "Dotted path of the field the condition reads, e.g. type or user.is_bot."),
    K_CUSTOM("in", 0, pr__h_filter_values, "list of 1..64 values", NULL,
             "The record passes when the value (a list: one of its elements) is one of these "
             "(strings, integers, true/false); absent or null does not pass."),
    K_CUSTOM("not_in", 0, pr__h_filter_values, "list of 1..64 values", NULL,
             "The record passes when the value (every element of a list) is none of these; "
             "absent or null passes."),
    K_CUSTOM("present", 0, pr__h_filter_present, "boolean", NULL,
             "true: the record passes when the path holds a value that is not null (an empty "
             "list too); false: when it is absent or null."),
};
const cfg_table pr__filter_item_tab = TABLE(filter_item_keys, pr__finish_filter_cond);

void pr__h_filter(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_pipeline_cfg *pl = base;
    pr_feature_schema *fs = &pl->features;
    char g[96];
    if (n->type != YAML_SEQUENCE_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a list of conditions ({ path, in: [...] }), got %s", g);
        return;
    }
    size_t items = (size_t)(n->data.sequence.items.top - n->data.sequence.items.start);
    if (items == 0 || items > PR_FILTER_MAX_CONDS) {
        pr__cfg_error(c, n, NULL, "1..%d conditions, got %zu", PR_FILTER_MAX_CONDS, items);
        return;
    }
    free(fs->filter);
    fs->filter = calloc(items, sizeof(*fs->filter));
    if (!fs->filter)
        abort(); /* startup only, as pr__feature_add */
    fs->n_filter = 0;
    for (size_t i = 0; i < items; i++) {
        yaml_node_t *it = pr__node_get(c, n->data.sequence.items.start[i]);
        size_t old = pr__path_push_index(c, i);
        pr_filter_cond *fc = &fs->filter[fs->n_filter];
        int before = c->n_errors;
        if (it->type != YAML_MAPPING_NODE) {
            pr__got(it, g, sizeof(g));
            pr__cfg_error(c, it, NULL, "expected a condition { path, in: [...] }, got %s", g);
        } else {
            pr__apply_map(c, it, &pr__filter_item_tab, fc);
        }
        if (c->n_errors == before)
            fs->n_filter++;
        pr__path_pop(c, old);
    }
}

/* ---------------------------------------------------------------- schema.downsample */

static void pr__h_ds_rate(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_downsample *ds = base;
    double r;
    if (!pr__parse_number(c, n, &r))
        return;
    if (!(r > 0 && r <= 1)) {
        pr__cfg_error(c, n, NULL, "the share of records kept: > 0 and <= 1, got %g", r);
        return;
    }
    ds->rate = r;
    /* keep when hash < rate * 2^64 (r < 1: below 2^64) */
    ds->threshold = r >= 1 ? UINT64_MAX : (uint64_t)ldexp(r, 64);
}

static void pr__h_ds_where(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr_downsample *ds = base;
    char g[96];
    if (n->type != YAML_MAPPING_NODE) {
        pr__got(n, g, sizeof(g));
        pr__cfg_error(c, n, NULL, "expected a condition { path, in: [...] }, got %s", g);
        return;
    }
    int before = c->n_errors;
    pr__apply_map(c, n, &pr__filter_item_tab, &ds->where);
    ds->has_where = c->n_errors == before;
}

static void pr__h_ds_key(cfg_ctx *c, yaml_node_t *n, void *base, const cfg_key *k)
{
    (void)k;
    pr__parse_path(c, n, ((pr_downsample *)base)->key);
}

static void pr__finish_ds(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)c;
    (void)map;
    if (present)
        ((pr_downsample *)base)->enabled = true;
}

static const cfg_key downsample_keys[] = {
    K_CUSTOM("rate", KF_REQUIRED, pr__h_ds_rate, "number in (0, 1]", NULL,
             "The share of the selected records kept (0.1: one in ten)."),
    K_CUSTOM("where", 0, pr__h_ds_where, "condition", NULL,
             "Which records are sampled, one condition as in filter ({ path, and in, not_in or "
             "present }); without it every record. The others are all kept."),
    K_CUSTOM("key", 0, pr__h_ds_key, "path", NULL,
             "The field whose value decides (e.g. an event or request id): the same value is "
             "kept or dropped everywhere. Without it, or where a record has none, the "
             "record's bytes decide."),
    {.name = "weight",
     .type = KT_NAME,
     .off = offsetof(pr_downsample, weight),
     .width = PR_NAME_MAX,
     .doc = "A label of this name added after the others: 1 / rate on a kept selected row, 1 "
            "on every other row (for a weighted loss)."},
};
const cfg_table pr__downsample_tab = TABLE(downsample_keys, pr__finish_ds);

/* The weight label of schema.downsample, added after the declared labels. */
static void pr__downsample_weight(cfg_ctx *c, yaml_node_t *map, pr_pipeline_cfg *pl)
{
    const pr_downsample *ds = &pl->features.downsample;
    if (!ds->enabled || !ds->weight[0])
        return;
    pr_feature_spec f;
    memset(&f, 0, sizeof(f));
    f.kind = PR_FEAT_LABEL;
    f.weight = true;
    snprintf(f.name, sizeof(f.name), "%s", ds->weight);
    yaml_node_t *dn = pr__map_find(c, map, "downsample");
    for (uint32_t i = 0; i < pl->features.n_features; i++)
        if (strcmp(pl->features.features[i].name, f.name) == 0) {
            pr__cfg_error(c, dn ? pr__map_find(c, dn, "weight") : map, "downsample.weight",
                          "'%s' is also the name of a %s feature", f.name,
                          pr_feature_kind_names[pl->features.features[i].kind]);
            return;
        }
    pr__feature_add(c, dn ? dn : map, pl, &f);
}

static int pr__kind_rank(pr_feature_kind k)
{
    static const int rank[PR_FEAT__COUNT] = {[PR_FEAT_EVENT_TIME] = 0,
                                             [PR_FEAT_LABEL] = 1,
                                             [PR_FEAT_DENSE] = 2,
                                             [PR_FEAT_SPARSE] = 3,
                                             [PR_FEAT_LIST] = 3};
    return rank[k];
}

static void pr__feature_key(const pr_feature_schema *fs, uint32_t i, uint8_t k, char *b, size_t bn);

/* A dense vector's path is its own: another feature reading it would take
 * the list as a single value or map it over a list of objects, and the
 * vector's shape (one list, its positions kept) could not hold for both. */
static void pr__vector_paths_own(cfg_ctx *c, yaml_node_t *map, const pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *v = &fs->features[i];
        if (v->kind != PR_FEAT_DENSE || !v->dim)
            continue;
        for (uint32_t j = 0; j < fs->n_features; j++)
            for (uint8_t k = 0; j != i && k < fs->features[j].n_paths; k++)
                if (strcmp(fs->features[j].paths[k], v->paths[0]) == 0) {
                    char key[64];
                    pr__feature_key(fs, i, 0, key, sizeof(key));
                    pr__cfg_error(c, map, key,
                                  "dense vector '%s' reads '%s', and so does %s feature '%s': a "
                                  "vector's path is its own",
                                  v->name, v->paths[0], pr_feature_kind_names[fs->features[j].kind],
                                  fs->features[j].name);
                    return;
                }
    }
}

/* A weighted list reads its ids and weights position by position (holes
 * kept, PR_JSON_ALIGNED): a path of theirs cannot also be a single-valued
 * feature's, a dense vector's or a cross's, whose shapes differ. */
static void pr__weights_paths(cfg_ctx *c, yaml_node_t *map, const pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *w = &fs->features[i];
        if (!pr_feature_weighted(w))
            continue;
        const char *own[2] = {w->paths[0], w->weights_path};
        for (uint32_t j = 0; j < fs->n_features; j++) {
            const pr_feature_spec *o = &fs->features[j];
            if (j == i || (o->kind == PR_FEAT_LIST && o->n_paths == 1))
                continue;
            for (uint8_t k = 0; k < o->n_paths; k++)
                for (int p = 0; p < 2; p++)
                    if (strcmp(o->paths[k], own[p]) == 0) {
                        char key[64];
                        pr__feature_key(fs, i, 0, key, sizeof(key));
                        pr__cfg_error(c, map, key,
                                      "weighted list '%s' reads '%s', and so does %s feature "
                                      "'%s': a weighted list's paths are read by list features "
                                      "only",
                                      w->name, own[p], pr_feature_kind_names[o->kind], o->name);
                        return;
                    }
        }
    }
}

/* A map read by its keys (list: { from: keys }, entries or values) is read
 * as a map only: no other feature, filter or downsample reads the same path
 * as a value. */
static void pr__map_paths_own(cfg_ctx *c, yaml_node_t *map, const pr_feature_schema *fs)
{
    const char *xp[PR_SELECT_PATHS_MAX];
    uint32_t nx = pr_feature_select_paths(fs, xp);
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *m = &fs->features[i];
        if (!m->from_keys)
            continue;
        const char *other = NULL;
        for (uint32_t j = 0; j < fs->n_features && !other; j++) {
            const pr_feature_spec *o = &fs->features[j];
            for (uint8_t k = 0; k < o->n_paths && !o->from_keys; k++)
                if (!strcmp(o->paths[k], m->paths[0]))
                    other = o->name;
            if (o->weights_path[0] && !o->weights_from_values &&
                !strcmp(o->weights_path, m->paths[0])) /* its weights.path */
                other = o->name;
        }
        for (uint32_t j = 0; j < nx && !other; j++)
            if (!strcmp(xp[j], m->paths[0]))
                other = "a filter or downsample condition";
        if (other) {
            char key[64];
            pr__feature_key(fs, i, 0, key, sizeof(key));
            pr__cfg_error(c, map, key,
                          "'%s' is read as a map (list: { from: %s }) by '%s' and as a value "
                          "by %s%s: a map is read by from: keys, entries or values lists only",
                          m->paths[0],
                          m->from_values    ? "values"
                          : m->from_entries ? "entries"
                                            : "keys",
                          m->name, strchr(other, ' ') ? "" : "feature ", other);
            return;
        }
    }
}

static void pr__feature_item(const pr_feature_schema *fs, uint32_t i, const char *what, char *b,
                             size_t bn);

/* `table:` names the owner of a shared vocabulary: a sparse feature of the
 * schema with vocab and no table of its own, whose operators up to vocab
 * are the same (so a value is the same key in both). A feature naming
 * itself has its own table. */
static void pr__tables_check(cfg_ctx *c, yaml_node_t *map, pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_features; i++) {
        pr_feature_spec *f = &fs->features[i];
        if (!f->table[0])
            continue;
        if (!strcmp(f->table, f->name)) {
            f->table[0] = '\0';
            continue;
        }
        char key[80];
        pr__feature_item(fs, i, "table", key, sizeof(key));
        const pr_feature_spec *o = NULL;
        for (uint32_t j = 0; j < fs->n_features && !o; j++)
            if ((fs->features[j].kind == PR_FEAT_SPARSE || fs->features[j].kind == PR_FEAT_LIST) &&
                !strcmp(fs->features[j].name, f->table))
                o = &fs->features[j];
        if (pr_feature_vocab_step(f) < 0)
            pr__cfg_error(c, map, key,
                          "'%s' has no vocab step: a shared table is a vocabulary (add vocab "
                          "to its ops)",
                          f->name);
        else if (!o)
            pr__cfg_error(c, map, key, "no sparse feature is named '%s'", f->table);
        else if (pr_feature_vocab_step(o) < 0)
            pr__cfg_error(c, map, key, "'%s' has no vocab step: only a vocabulary is shared",
                          o->name);
        else if (o->table[0] && strcmp(o->table, o->name))
            pr__cfg_error(c, map, key,
                          "'%s' uses the table of '%s' itself: name '%s' (a table has one "
                          "owner)",
                          o->name, o->table, o->table);
        else if (!pr_feature_same_keys(f, o))
            pr__cfg_error(c, map, key,
                          "'%s' and '%s' must have the same operators up to and including "
                          "vocab (and a map read the same way, keys or entries), so that a "
                          "value is the same key in both",
                          f->name, o->name);
        else if (pr_feature_vocab_step(f) + 1 < f->n_ops || pr_feature_vocab_step(o) + 1 < o->n_ops)
            pr__cfg_error(c, map, key,
                          "'%s' has operators after vocab: a shared table's features end with "
                          "vocab, so that their values are the table's indices",
                          pr_feature_vocab_step(f) + 1 < f->n_ops ? f->name : o->name);
        else
            continue;
        return;
    }
}

/* A declared schema drives today's spec: counts, names and the union of the
 * engine operators its sparse features use (for the vocabulary settings and
 * their checks). */
static void pr__spec_from_features(cfg_ctx *c, yaml_node_t *map, pr_pipeline_cfg *pl)
{
    pr_feature_schema *fs = &pl->features;
    pr_pipeline_spec *sp = &pl->spec;
    /* dense columns (their names), sparse features, dense features */
    uint32_t nd = pr_feature_dense_names(fs, pl->dense_names, PR_MAX_DENSE_COLS), ns = 0, nf = 0;
    bool has[PR_FOP__COUNT] = {false};
    sp->has_label = false;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        sp->has_label |= f->kind == PR_FEAT_LABEL;
        nf += f->kind == PR_FEAT_DENSE;
        if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
            continue;
        for (uint32_t k = 0; k < f->n_ops; k++) {
            has[f->ops[k].op] = true;
            if (f->ops[k].op == PR_FOP_MODULUS && ns < PR_MAX_SPARSE)
                sp->sparse[ns].modulus = f->ops[k].n;
        }
        if (ns < PR_MAX_SPARSE)
            snprintf(sp->sparse[ns].name, PR_NAME_MAX, "%s", f->name);
        ns++;
    }
    if (nf > PR_MAX_DENSE || ns > PR_MAX_SPARSE)
        pr__cfg_error(c, map, NULL, "%u dense and %u sparse features, at most %d of each", nf, ns,
                      PR_MAX_DENSE);
    else if (nd > PR_MAX_DENSE_COLS)
        pr__cfg_error(c, map, NULL, "%u dense columns (a vector takes its dim), at most %d", nd,
                      PR_MAX_DENSE_COLS);
    pr__vector_paths_own(c, map, fs);
    pr__weights_paths(c, map, fs);
    pr__map_paths_own(c, map, fs);
    pr__tables_check(c, map, fs);
    if (nd + ns == 0 && c->n_errors == 0) /* not when the features had errors */
        pr__cfg_error(c, map, NULL, "declares no dense or sparse feature");
    sp->n_dense = (uint16_t)(nd < PR_MAX_DENSE_COLS ? nd : PR_MAX_DENSE_COLS);
    sp->n_sparse = (uint16_t)(ns < PR_MAX_SPARSE ? ns : PR_MAX_SPARSE);
    sp->n_dense_ops = 0;
    sp->n_sparse_ops = 0;
    static const struct {
        pr_fop fop;
        pr_op op;
    } engine_ops[] = {{PR_FOP_HEX2INT, PR_OP_HEX2INT},
                      {PR_FOP_MODULUS, PR_OP_MODULUS},
                      {PR_FOP_VOCAB, PR_OP_VOCAB}};
    for (size_t i = 0; i < 3; i++)
        if (has[engine_ops[i].fop])
            sp->sparse_ops[sp->n_sparse_ops++] = (uint8_t)engine_ops[i].op;
}

static const char *pr__kind_list(pr_feature_kind k);

/* Where path k of feature i (in the sorted list) is written: "sparse[2].path". */
static void pr__feature_key(const pr_feature_schema *fs, uint32_t i, uint8_t k, char *b, size_t bn)
{
    const pr_feature_spec *f = &fs->features[i];
    const char *list = pr__kind_list(f->kind);
    uint32_t idx = 0;
    for (uint32_t j = 0; j < i; j++)
        idx += strcmp(pr__kind_list(fs->features[j].kind), list) == 0;
    if (f->kind == PR_FEAT_EVENT_TIME)
        snprintf(b, bn, "event_time.path");
    else if (f->n_paths > 1)
        snprintf(b, bn, "%s[%u].cross[%u]", list, idx, (unsigned)k);
    else
        snprintf(b, bn, "%s[%u].path", list, idx);
}

/* The key `what` of feature i as written: "sparse[3].table". */
static void pr__feature_item(const pr_feature_schema *fs, uint32_t i, const char *what, char *b,
                             size_t bn)
{
    const char *list = pr__kind_list(fs->features[i].kind);
    uint32_t idx = 0;
    for (uint32_t j = 0; j < i; j++)
        idx += strcmp(pr__kind_list(fs->features[j].kind), list) == 0;
    snprintf(b, bn, "%s[%u].%s", list, idx, what);
}

/* Is a a strict prefix of b at a segment ("user" of "user.id")? */
static bool pr__path_prefix(const char *a, const char *b)
{
    size_t n = strlen(a);
    return strncmp(a, b, n) == 0 && b[n] == '.';
}

/* The key path i of pr_feature_select_paths is written under:
 * "filter[2].path", "downsample.where.path" or "downsample.key". */
static void pr__select_key(const pr_feature_schema *fs, uint32_t i, char *b, size_t bn)
{
    if (i < fs->n_filter)
        snprintf(b, bn, "filter[%u].path", i);
    else if (i == fs->n_filter && fs->downsample.has_where)
        snprintf(b, bn, "downsample.where.path");
    else
        snprintf(b, bn, "downsample.key");
}

/* One event field cannot be read both as a whole and inside ("user" and
 * "user.id": the extractor reads each path once): an error naming both
 * keys, at load rather than when the decoder is built. */
static void pr__check_path_prefixes(cfg_ctx *c, yaml_node_t *map, const pr_feature_schema *fs)
{
    typedef struct {
        const char *path;
        char key[48];
    } pr__pkey;
    uint32_t n = PR_SELECT_PATHS_MAX;
    for (uint32_t i = 0; i < fs->n_features; i++)
        n += fs->features[i].n_paths + 1u; /* and a weighted list's weights path */
    pr__pkey *pk = calloc(n ? n : 1, sizeof(*pk));
    if (!pk)
        abort(); /* startup only, as pr__feature_add */
    n = 0;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        for (uint8_t k = 0; k < fs->features[i].n_paths; k++, n++) {
            pk[n].path = fs->features[i].paths[k];
            pr__feature_key(fs, i, k, pk[n].key, sizeof(pk[n].key));
        }
        if (pr_feature_weighted(&fs->features[i])) {
            pk[n].path = fs->features[i].weights_path;
            pr__feature_key(fs, i, 0, pk[n].key, sizeof(pk[n].key)); /* LIST[i].path */
            char *dot = strrchr(pk[n].key, '.');
            snprintf(dot, sizeof(pk[n].key) - (size_t)(dot - pk[n].key), ".weights.path");
            n++;
        }
    }
    const char *xp[PR_SELECT_PATHS_MAX];
    uint32_t nx = pr_feature_select_paths(fs, xp);
    for (uint32_t i = 0; i < nx; i++, n++) {
        pk[n].path = xp[i];
        pr__select_key(fs, i, pk[n].key, sizeof(pk[n].key));
    }
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = 0; b < n; b++)
            if (pr__path_prefix(pk[a].path, pk[b].path))
                pr__cfg_error(c, map, pk[a].key,
                              "'%s' is inside '%s' (%s): a field is read whole or by the paths "
                              "inside it, not both",
                              pk[b].path, pk[a].path, pk[b].key);
    free(pk);
}

void pr__finish_schema(cfg_ctx *c, yaml_node_t *map, void *base, bool present)
{
    (void)present;
    pr_pipeline_cfg *pl = base;
    pr_feature_schema *fs = &pl->features;
    if (!fs->declared) {
        static const char *const declared_only[] = {"filter", "downsample", NULL};
        for (int i = 0; declared_only[i]; i++)
            if (pr__map_find(c, map, declared_only[i]))
                pr__cfg_error(c, pr__map_find(c, map, declared_only[i]), declared_only[i],
                              "needs a declared schema (labels, dense, sparse as lists of "
                              "features): the Criteo layout has no named fields to test");
        return;
    }
    yaml_node_t *dn = pr__map_find(c, map, "downsample");
    if (dn && pr__is_null(dn)) /* an emptied block must not turn the sampling off unseen */
        pr__cfg_error(c, dn, "downsample",
                      "expected a mapping { rate, where, key, weight }, got nothing (remove the "
                      "key to keep every record)");
    pr__downsample_weight(c, map, pl);
    static const char *const criteo_keys[] = {"label",       "dense",        "sparse",
                                              "dense_names", "sparse_names", NULL};
    for (int i = 0; criteo_keys[i]; i++) {
        yaml_node_t *v = pr__map_find(c, map, criteo_keys[i]);
        if (v && (i == 0 || i >= 3 || v->type != YAML_SEQUENCE_NODE))
            pr__cfg_error(c, v, criteo_keys[i],
                          "belongs to the Criteo layout; a declared schema lists its features "
                          "(dense: [ { name, path, ops } ], ...)");
    }
    /* Event time, labels, dense, sparse: the order of tensors and of explain. */
    for (uint32_t i = 1; i < fs->n_features; i++) {
        pr_feature_spec f = fs->features[i];
        uint32_t j = i;
        for (; j > 0 && pr__kind_rank(fs->features[j - 1].kind) > pr__kind_rank(f.kind); j--)
            fs->features[j] = fs->features[j - 1];
        fs->features[j] = f;
    }
    pr__spec_from_features(c, map, pl);
    pr__check_path_prefixes(c, map, fs);
}

/* ---------------------------------------------------------------- paths vs a known schema
 * (a Protobuf descriptor set, a fixed Avro writer schema) */

/* The YAML list of a feature kind and the key holding its path. */
static const char *pr__kind_list(pr_feature_kind k)
{
    return k == PR_FEAT_LABEL        ? "labels"
           : k == PR_FEAT_DENSE      ? "dense"
           : k == PR_FEAT_EVENT_TIME ? "event_time"
                                     : "sparse";
}

/* Node of schema.<list>[i].<key> (NULL when not found: the line hint is used). */
static yaml_node_t *pr__feature_node(cfg_ctx *c, yaml_node_t *pipe, const char *list, size_t i,
                                     const char *key)
{
    yaml_node_t *s = pr__map_find(c, pipe, "schema");
    yaml_node_t *l = s ? pr__map_find(c, s, list) : NULL;
    if (l && l->type == YAML_SEQUENCE_NODE) {
        yaml_node_item_t *it = l->data.sequence.items.start;
        if (i >= (size_t)(l->data.sequence.items.top - it))
            return NULL;
        l = pr__node_get(c, it[i]);
    }
    return l && l->type == YAML_MAPPING_NODE ? pr__map_find(c, l, key) : NULL;
}

void pr__check_feature_paths(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl,
                             pr__path_check_fn fn, const void *schema)
{
    size_t seen[PR_FEAT_EVENT_TIME + 1] = {0};
    for (uint32_t i = 0; i < pl->features.n_features; i++) {
        const pr_feature_spec *f = &pl->features.features[i];
        const char *list = pr__kind_list(f->kind);
        size_t idx = seen[f->kind == PR_FEAT_LIST ? PR_FEAT_SPARSE : f->kind]++;
        for (uint8_t k = 0; k < f->n_paths; k++) {
            char e[400], sub[96];
            if (fn(schema, f, k, e, sizeof(e)) == 0)
                continue;
            const char *key = f->n_paths > 1 ? "cross" : "path";
            if (f->kind == PR_FEAT_EVENT_TIME)
                snprintf(sub, sizeof(sub), "schema.event_time.path");
            else if (f->n_paths > 1)
                snprintf(sub, sizeof(sub), "schema.%s[%zu].cross[%u]", list, idx, (unsigned)k);
            else
                snprintf(sub, sizeof(sub), "schema.%s[%zu].path", list, idx);
            yaml_node_t *n = f->kind == PR_FEAT_EVENT_TIME
                                 ? pr__feature_node(c, map, "event_time", 0, "path")
                                 : pr__feature_node(c, map, list, idx, key);
            pr__cfg_error(c, n, sub, "%s", e);
        }
        char e[400], sub[96];
        if (pr_feature_weighted(f) && fn(schema, f, PR_FEAT_WEIGHTS_PATH, e, sizeof(e)) != 0) {
            const char *wk = f->weights_from_values ? "from" : "path"; /* the key given */
            snprintf(sub, sizeof(sub), "schema.%s[%zu].weights.%s", list, idx, wk);
            yaml_node_t *wn = pr__feature_node(c, map, list, idx, "weights");
            pr__cfg_error(c, wn && wn->type == YAML_MAPPING_NODE ? pr__map_find(c, wn, wk) : wn,
                          sub, "%s", e);
        }
    }
    /* schema.filter's and schema.downsample's paths: in the schema, a single
     * value or a list, of any type (a condition matches by value): read as a
     * scalar, else as a list, and the scalar's reason when neither works ("no
     * field"). */
    const char *xp[PR_SELECT_PATHS_MAX];
    uint32_t nx = pr_feature_select_paths(&pl->features, xp);
    for (uint32_t i = 0; i < nx; i++) {
        pr_feature_spec f;
        memset(&f, 0, sizeof(f));
        snprintf(f.paths[0], sizeof(f.paths[0]), "%s", xp[i]);
        memcpy(f.paths[1], f.paths[0], sizeof(f.paths[0]));
        char e[400], e2[400], key[48], sub[64];
        f.kind = PR_FEAT_SPARSE; /* a path of a cross: a single value, no type check */
        f.n_paths = 2;
        if (fn(schema, &f, 0, e, sizeof(e)) == 0)
            continue;
        f.kind = PR_FEAT_LIST; /* a list of ids */
        f.n_paths = 1;
        if (fn(schema, &f, 0, e2, sizeof(e2)) == 0)
            continue;
        pr__select_key(&pl->features, i, key, sizeof(key));
        snprintf(sub, sizeof(sub), "schema.%s", key);
        yaml_node_t *n =
            i < pl->features.n_filter ? pr__feature_node(c, map, "filter", i, "path") : NULL;
        pr__cfg_error(c, n, sub, "%s", e);
    }
}
