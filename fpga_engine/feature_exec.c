/*
 * feature_exec.c — executing a declared feature schema on the engine (issue
 * 20): the side tables (pr_fside) that carry labels, dense values and jagged
 * sparse/list features next to the engine's columns, the blocks and outputs
 * shaped for a schema, the engine spec derived from it, and
 * pr_feature_finish, which turns the engine's per-element indices back into
 * per-feature lengths and values.
 *
 * Why a separate side: the engine's hot path (cpu_backend.c) stays the
 * Criteo one (fixed-width columns); a declared schema only gives it the
 * vocabulary work, one U64 column per vocab feature with col_rows elements,
 * and everything else travels in the side tables untouched by the engine.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "engine_int.h"
#include "pr_engine.h"

/* ---------------------------------------------------------------- side tables */

pr_fside *pr_fside_new(uint16_t n_labels, uint16_t n_dense, uint16_t n_feat, uint32_t cap)
{
    if (cap == 0)
        return NULL;
    pr_fside *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n_labels = n_labels;
    s->n_dense = n_dense;
    s->n_feat = n_feat;
    s->cap = cap;
    s->labels = calloc((size_t)cap * n_labels + 1, sizeof(float));
    s->dense = calloc((size_t)cap * n_dense + 1, sizeof(float));
    s->lengths = calloc((size_t)cap * n_feat + 1, sizeof(int32_t));
    s->vocab_col = malloc(((size_t)n_feat + 1) * sizeof(int16_t));
    s->values = calloc((size_t)n_feat + 1, sizeof(int64_t *));
    s->n_values = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    s->values_cap = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    s->weights = calloc((size_t)n_feat + 1, sizeof(float *));
    s->n_weights = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    s->weights_cap = calloc((size_t)n_feat + 1, sizeof(uint32_t));
    bool ok = s->labels && s->dense && s->lengths && s->vocab_col && s->values && s->n_values &&
              s->values_cap && s->weights && s->n_weights && s->weights_cap;
    for (uint16_t f = 0; ok && f < n_feat; f++) {
        s->vocab_col[f] = -1;
        s->values[f] = malloc((size_t)cap * sizeof(int64_t));
        s->values_cap[f] = cap;
        ok = s->values[f] != NULL;
    }
    if (!ok) {
        pr_fside_free(s);
        return NULL;
    }
    return s;
}

void pr_fside_free(pr_fside *s)
{
    if (!s)
        return;
    for (uint16_t f = 0; s->values && f < s->n_feat; f++)
        free(s->values[f]);
    for (uint16_t f = 0; s->weights && f < s->n_feat; f++)
        free(s->weights[f]);
    free(s->weights);
    free(s->n_weights);
    free(s->weights_cap);
    free(s->labels);
    free(s->dense);
    free(s->lengths);
    free(s->vocab_col);
    free(s->values);
    free(s->n_values);
    free(s->values_cap);
    free(s->absent);
    free(s);
}

void pr_fside_reset(pr_fside *s)
{
    memset(s->lengths, 0, (size_t)s->cap * s->n_feat * sizeof(int32_t));
    memset(s->n_values, 0, (size_t)s->n_feat * sizeof(uint32_t));
    memset(s->n_weights, 0, (size_t)s->n_feat * sizeof(uint32_t));
    if (s->absent)
        memset(s->absent, 0, (size_t)s->n_schema * pr_bitmap_words(s->cap) * sizeof(uint64_t));
}

int pr_fside_weigh(pr_fside *s, uint16_t f)
{
    if (f >= s->n_feat)
        return PR_EINVAL;
    if (s->weights[f])
        return 0;
    s->weights[f] = malloc((size_t)s->cap * sizeof(float));
    if (!s->weights[f])
        return PR_ENOMEM;
    s->weights_cap[f] = s->cap;
    s->n_weights[f] = 0;
    return 0;
}

bool pr_fside_weighted(const pr_fside *s)
{
    for (uint16_t f = 0; s && f < s->n_feat; f++)
        if (s->weights[f])
            return true;
    return false;
}

int pr_fside_reserve_weights(pr_fside *s, uint16_t f, uint32_t more)
{
    if (!s->weights[f])
        return PR_EINVAL;
    uint64_t need = (uint64_t)s->n_weights[f] + more;
    if (need <= s->weights_cap[f])
        return 0;
    if (need > UINT32_MAX)
        return PR_ENOMEM;
    uint64_t nc = (uint64_t)s->weights_cap[f] * 2;
    if (nc < need)
        nc = need;
    if (nc > UINT32_MAX)
        nc = UINT32_MAX;
    float *p = realloc(s->weights[f], (size_t)nc * sizeof(float));
    if (!p)
        return PR_ENOMEM;
    s->weights[f] = p;
    s->weights_cap[f] = (uint32_t)nc;
    return 0;
}

int pr_fside_reserve(pr_fside *s, uint16_t f, uint32_t more)
{
    uint64_t need = (uint64_t)s->n_values[f] + more;
    if (need <= s->values_cap[f])
        return 0;
    if (need > UINT32_MAX)
        return PR_ENOMEM;
    uint64_t nc = (uint64_t)s->values_cap[f] * 2;
    if (nc < need)
        nc = need;
    if (nc > UINT32_MAX)
        nc = UINT32_MAX;
    int64_t *p = realloc(s->values[f], (size_t)nc * sizeof(int64_t));
    if (!p)
        return PR_ENOMEM;
    s->values[f] = p;
    s->values_cap[f] = (uint32_t)nc;
    return 0;
}

int pr_fside_copy_rows(pr_fside *dst, uint32_t d0, const pr_fside *src, uint32_t s0, uint32_t n,
                       uint32_t *src_off)
{
    if (dst->n_labels != src->n_labels || dst->n_dense != src->n_dense ||
        dst->n_feat != src->n_feat || (uint64_t)d0 + n > dst->cap || (uint64_t)s0 + n > src->cap)
        return PR_EINVAL;
    memcpy(dst->labels + (size_t)d0 * dst->n_labels, src->labels + (size_t)s0 * src->n_labels,
           (size_t)n * src->n_labels * sizeof(float));
    memcpy(dst->dense + (size_t)d0 * dst->n_dense, src->dense + (size_t)s0 * src->n_dense,
           (size_t)n * src->n_dense * sizeof(float));
    for (uint16_t f = 0; f < src->n_feat; f++) {
        const int32_t *sl = src->lengths + (size_t)f * src->cap;
        uint64_t off = 0, k = 0;
        if (src_off)
            off = src_off[f];
        else
            for (uint32_t r = 0; r < s0; r++)
                off += (uint32_t)sl[r];
        for (uint32_t r = s0; r < s0 + n; r++)
            k += (uint32_t)sl[r];
        if (off + k > src->n_values[f] || !dst->weights[f] != !src->weights[f] ||
            (src->weights[f] && off + k > src->n_weights[f]))
            return PR_EINVAL;
        if (pr_fside_reserve(dst, f, (uint32_t)k) ||
            (dst->weights[f] && pr_fside_reserve_weights(dst, f, (uint32_t)k)))
            return PR_ENOMEM;
        memcpy(dst->lengths + (size_t)f * dst->cap + d0, sl + s0, (size_t)n * sizeof(int32_t));
        memcpy(dst->values[f] + dst->n_values[f], src->values[f] + off, k * sizeof(int64_t));
        dst->n_values[f] += (uint32_t)k;
        if (src->weights[f]) {
            memcpy(dst->weights[f] + dst->n_weights[f], src->weights[f] + off, k * sizeof(float));
            dst->n_weights[f] += (uint32_t)k;
        }
        if (src_off)
            src_off[f] = (uint32_t)(off + k);
    }
    return 0;
}

/* ---------------------------------------------------------------- schema shapes */

static bool pr__feat_is_sparse(const pr_feature_spec *f)
{
    return f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST;
}

int pr_feature_side_index(const pr_feature_schema *schema, uint32_t i)
{
    if (i >= schema->n_features || !pr__feat_is_sparse(&schema->features[i]))
        return -1;
    int k = 0;
    for (uint32_t j = 0; j < i; j++)
        k += pr__feat_is_sparse(&schema->features[j]);
    return k;
}

int pr_feature_vocab_step(const pr_feature_spec *f)
{
    for (uint8_t k = 0; k < f->n_ops; k++)
        if (f->ops[k].op == PR_FOP_VOCAB)
            return k;
    return -1;
}

int pr_feature_table_owner(const pr_feature_schema *schema, uint32_t i)
{
    if (i >= schema->n_features || pr_feature_vocab_step(&schema->features[i]) < 0)
        return -1;
    const char *t = schema->features[i].table;
    if (!t[0])
        return (int)i;
    for (uint32_t j = 0; j < schema->n_features; j++) {
        const pr_feature_spec *o = &schema->features[j];
        if (pr__feat_is_sparse(o) && !strcmp(o->name, t) && !o->table[0] &&
            pr_feature_vocab_step(o) >= 0)
            return (int)j;
    }
    return -1;
}

int pr_feature_vocab_col(const pr_feature_schema *schema, uint32_t i)
{
    int o = pr_feature_table_owner(schema, i), col = 0;
    for (int j = 0; j < o; j++)
        col += pr__feat_is_sparse(&schema->features[j]) &&
               pr_feature_table_owner(schema, (uint32_t)j) == j;
    return o < 0 ? -1 : col;
}

uint32_t pr_fside_col_len(const pr_fside *s, int c, uint32_t r)
{
    uint32_t n = 0;
    for (uint16_t f = 0; f < s->n_feat; f++)
        if (s->vocab_col[f] == c)
            n += (uint32_t)s->lengths[(size_t)f * s->cap + r];
    return n;
}

size_t pr_fop_step_yaml(const pr_fop_step *st, char *out, size_t n)
{
    const pr_fop_info *in = &pr_fop_table[st->op];
    size_t k = 0;
#define PR__APP(...)                                                                               \
    do {                                                                                           \
        if (k < n) {                                                                               \
            int ww = snprintf(out + k, n - k, __VA_ARGS__);                                        \
            k += ww > 0 ? (size_t)ww : 0;                                                          \
        }                                                                                          \
    } while (0)
    if (in->arg == PR_FARG_NONE)
        PR__APP("%s", in->name);
    else
        PR__APP("{ %s: ", in->name);
    switch (in->arg) {
    case PR_FARG_VALUE:
        if (st->value_type == PR_FTYPE_STR) {
            PR__APP("\"");
            for (const char *c = st->str; *c; c++)
                PR__APP(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
            PR__APP("\"");
        } else if (st->value_type == PR_FTYPE_INT) {
            PR__APP("%" PRId64, (int64_t)st->n);
        } else {
            PR__APP("%.17g", st->a);
        }
        break;
    case PR_FARG_RANGE:
        PR__APP("[%.17g, %.17g]", st->a, st->b);
        break;
    case PR_FARG_STATS:
        PR__APP("{ mean: %.17g, std: %.17g }", st->a, st->b);
        break;
    case PR_FARG_BOUNDS:
        PR__APP("[");
        for (uint16_t i = 0; i < st->n_bounds; i++)
            PR__APP("%s%.17g", i ? ", " : "", st->bounds[i]);
        PR__APP("]");
        break;
    case PR_FARG_COUNT:
        PR__APP("%" PRIu64, st->n);
        break;
    case PR_FARG_UNIT:
        PR__APP("%s", pr_time_unit_names[st->unit]);
        break;
    case PR_FARG_NUMBER:
        PR__APP("%.17g", st->a);
        break;
    case PR_FARG_NONE:
        break;
    }
    if (in->arg != PR_FARG_NONE)
        PR__APP(" }");
#undef PR__APP
    return k < n ? k : (n ? n - 1 : 0);
}

void pr_feature_vocab_input(const pr_feature_spec *f, char *out, size_t n)
{
    if (!n)
        return;
    size_t k = 0;
    out[0] = '\0';
    k += (size_t)snprintf(out, n, "paths");
    for (uint8_t i = 0; i < f->n_paths && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%s", i ? "," : " ", f->paths[i]);
    if (k < n)
        k += (size_t)snprintf(out + k, n - k, "; default ");
    if (k < n && f->has_default) {
        k += pr_fop_step_yaml(&f->deflt, out + k, n - k);
    } else if (k < n) {
        k += (size_t)snprintf(out + k, n - k, "-");
    }
    if (k < n)
        k += (size_t)snprintf(out + k, n - k, "; ops");
    int v = pr_feature_vocab_step(f);
    for (int i = 0; i < (v < 0 ? f->n_ops : v) && k < n; i++) {
        k += (size_t)snprintf(out + k, n - k, "%s", i ? ", " : " ");
        if (k < n)
            k += pr_fop_step_yaml(&f->ops[i], out + k, n - k);
    }
}

/* The fingerprint's encoding, frozen: snapshots and vocab logs keep its
 * value, so it never follows the display text above. Version 1: each field
 * little-endian, in this order (a string as its bytes and a zero byte, a
 * double as its IEEE-754 bits): u32 1, u32 n_paths, the paths; u8
 * has_default, the default step; u32 n (the ops before vocab), each step;
 * a list of a map's entries, "from entries" (nothing for any other
 * feature: each keeps the value it had before).
 * A step: its operator's config name, u8 value_type, u8 unit, u64 n, f64 a,
 * f64 b, the string value, u16 n_bounds, the bounds. */
typedef struct {
    uint8_t buf[16384];
    size_t n;
} pr__fpbuf;

static void pr__fp_put(pr__fpbuf *b, const void *p, size_t n)
{
    if (b->n + n <= sizeof(b->buf))
        memcpy(b->buf + b->n, p, n);
    b->n += n; /* past the end: hashed as it stands, never overrun */
}

static void pr__fp_u64(pr__fpbuf *b, uint64_t v, size_t width)
{
    uint8_t le[8];
    for (size_t i = 0; i < width; i++)
        le[i] = (uint8_t)(v >> (8 * i));
    pr__fp_put(b, le, width);
}

static void pr__fp_str(pr__fpbuf *b, const char *s)
{
    pr__fp_put(b, s, strlen(s) + 1);
}

static void pr__fp_f64(pr__fpbuf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    pr__fp_u64(b, u, 8);
}

static void pr__fp_step(pr__fpbuf *b, const pr_fop_step *st)
{
    pr__fp_str(b, pr_fop_table[st->op].name);
    pr__fp_u64(b, st->value_type, 1);
    pr__fp_u64(b, (uint64_t)st->unit, 1);
    pr__fp_u64(b, st->n, 8);
    pr__fp_f64(b, st->a);
    pr__fp_f64(b, st->b);
    pr__fp_str(b, st->str);
    pr__fp_u64(b, st->n_bounds, 2);
    for (uint16_t i = 0; i < st->n_bounds && i < PR_FOP_MAX_BOUNDS; i++)
        pr__fp_f64(b, st->bounds[i]);
}

uint64_t pr_feature_vocab_input_fp(const pr_feature_spec *f)
{
    pr__fpbuf *b = calloc(1, sizeof(*b));
    if (!b)
        return 1;
    pr__fp_u64(b, 1, 4);
    pr__fp_u64(b, f->n_paths, 4);
    for (uint8_t i = 0; i < f->n_paths && i < PR_FEAT_MAX_CROSS; i++)
        pr__fp_str(b, f->paths[i]);
    pr__fp_u64(b, f->has_default, 1);
    if (f->has_default)
        pr__fp_step(b, &f->deflt);
    int v = pr_feature_vocab_step(f);
    uint32_t n = (uint32_t)(v < 0 ? f->n_ops : v);
    pr__fp_u64(b, n, 4);
    for (uint32_t i = 0; i < n; i++)
        pr__fp_step(b, &f->ops[i]);
    if (f->from_entries) /* a map's entries: other keys than its keys */
        pr__fp_str(b, "from entries");
    uint64_t h = pr_fop_hash64(b->buf, b->n < sizeof(b->buf) ? b->n : sizeof(b->buf)) | 1;
    free(b);
    return h;
}

/* Same keys: the steps up to and including vocab encoded alike. */
bool pr_feature_same_keys(const pr_feature_spec *a, const pr_feature_spec *b)
{
    int va = pr_feature_vocab_step(a), vb = pr_feature_vocab_step(b);
    if (va < 0 || va != vb || a->from_entries != b->from_entries) /* a map's keys or entries */
        return false;
    pr__fpbuf *x = calloc(1, sizeof(*x)), *y = calloc(1, sizeof(*y));
    bool same = x && y;
    for (int i = 0; same && i <= va; i++) {
        x->n = y->n = 0;
        pr__fp_step(x, &a->ops[i]);
        pr__fp_step(y, &b->ops[i]);
        same = x->n == y->n && x->n <= sizeof(x->buf) && !memcmp(x->buf, y->buf, x->n);
    }
    free(x);
    free(y);
    return same;
}

/* Counts of a schema's labels, dense, sparse+list features and vocab
 * columns (one per table: its owner's). */
typedef struct pr__shape {
    uint16_t labels, dense, feat, vocab;
    uint32_t max_list; /* the most keys one record puts in a column holding a vocab list
                        * feature (a shared table: its features' max_len and 1s summed) */
} pr__shape;

/* The most keys one record puts in the column of owner feature o: 0 for a
 * single-valued feature alone (one key a row, as a block's rows). */
static uint32_t pr__table_max(const pr_feature_schema *schema, uint32_t o)
{
    uint32_t n = 0;
    bool list = false;
    for (uint32_t i = 0; i < schema->n_features; i++)
        if (pr_feature_table_owner(schema, i) == (int)o) {
            const pr_feature_spec *f = &schema->features[i];
            list |= f->kind == PR_FEAT_LIST;
            n += f->kind == PR_FEAT_LIST ? f->max_len : 1;
        }
    return list || n > 1 ? n : 0;
}

static pr__shape pr__schema_shape(const pr_feature_schema *schema)
{
    pr__shape sh = {0};
    for (uint32_t i = 0; i < schema->n_features; i++) {
        const pr_feature_spec *f = &schema->features[i];
        if (f->kind == PR_FEAT_LABEL)
            sh.labels++;
        else if (f->kind == PR_FEAT_DENSE)
            sh.dense += (uint16_t)pr_feature_dense_cols(f);
        else if (pr__feat_is_sparse(f)) {
            sh.feat++;
            if (pr_feature_table_owner(schema, i) == (int)i) {
                sh.vocab++;
                uint32_t m = pr__table_max(schema, i);
                if (m > sh.max_list)
                    sh.max_list = m;
            }
        }
    }
    return sh;
}

pr_fside *pr_feature_side_new(const pr_feature_schema *schema, uint32_t cap)
{
    pr__shape sh = pr__schema_shape(schema);
    pr_fside *s = pr_fside_new(sh.labels, sh.dense, sh.feat, cap);
    if (!s)
        return NULL;
    s->n_schema = schema->n_features;
    if (!(s->absent = calloc((size_t)s->n_schema * pr_bitmap_words(cap) + 1, sizeof(uint64_t)))) {
        pr_fside_free(s);
        return NULL;
    }
    for (uint32_t i = 0; i < schema->n_features; i++) {
        int f = pr_feature_side_index(schema, i), o = pr_feature_table_owner(schema, i);
        if (f >= 0 && o >= 0) {
            s->vocab_col[f] = (int16_t)pr_feature_vocab_col(schema, i);
            s->shared |= o != (int)i;
        }
        if (f >= 0 && pr_feature_weighted(&schema->features[i]) && pr_fside_weigh(s, (uint16_t)f)) {
            pr_fside_free(s);
            return NULL;
        }
    }
    return s;
}

uint32_t pr_feature_block_scap(const pr_feature_schema *schema, uint32_t cap)
{
    pr__shape sh = pr__schema_shape(schema);
    uint64_t avg = sh.max_list < 8 ? sh.max_list : 8;
    uint64_t scap = (uint64_t)cap * (avg > 1 ? avg : 1);
    if (scap < sh.max_list)
        scap = sh.max_list;
    if (scap > UINT32_MAX - 63)
        scap = UINT32_MAX - 63;
    return (uint32_t)scap;
}

pr_block *pr_feature_block_new(const pr_feature_schema *schema, uint32_t cap, bool with_meta)
{
    pr__shape sh = pr__schema_shape(schema);
    pr_block *b =
        pr_block_new_jagged(0, sh.vocab, cap, pr_feature_block_scap(schema, cap), with_meta);
    if (!b)
        return NULL;
    b->side = pr_feature_side_new(schema, b->cap);
    if (!b->side) {
        pr_block_free(b);
        return NULL;
    }
    memset(b->sparse_enc, PR_SPARSE_U64, sh.vocab);
    return b;
}

pr_out *pr_feature_out_new(const pr_feature_schema *schema, uint32_t cap, uint8_t sparse_width)
{
    pr__shape sh = pr__schema_shape(schema);
    return pr_out_new_jagged(0, sh.vocab, cap, pr_feature_block_scap(schema, cap), sparse_width);
}

/* ---------------------------------------------------------------- engine spec */

/* base's column named `name`, or NULL. */
static const pr_sparse_col_spec *pr__base_col(const pr_pipeline_spec *base, const char *name)
{
    for (uint32_t c = 0; base && c < base->n_sparse && c < PR_MAX_SPARSE; c++)
        if (strcmp(base->sparse[c].name, name) == 0)
            return &base->sparse[c];
    return NULL;
}

int pr_feature_engine_spec(const pr_feature_schema *schema, const pr_pipeline_spec *base,
                           pr_pipeline_spec *spec, char *errstr, size_t errstr_size)
{
    pr_pipeline_spec def;
    pr_pipeline_spec_default(&def);
    memset(spec, 0, sizeof(*spec));
    snprintf(spec->name, sizeof(spec->name), "%s", base ? base->name : def.name);
    spec->profile = base ? base->profile : def.profile;
    spec->count_mode = base ? base->count_mode : def.count_mode;
    spec->has_label = false;
    spec->n_dense = 0;
    spec->n_sparse_ops = 1;
    spec->sparse_ops[0] = PR_OP_VOCAB;
    uint32_t n = 0;
    for (uint32_t i = 0; i < schema->n_features; i++) {
        const pr_feature_spec *f = &schema->features[i];
        if (!pr__feat_is_sparse(f) || pr_feature_table_owner(schema, i) != (int)i)
            continue;
        if (n == PR_MAX_SPARSE)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "schema: more than %d features with a vocabulary", PR_MAX_SPARSE);
        pr_sparse_col_spec *cs = &spec->sparse[n++];
        const pr_sparse_col_spec *bc = pr__base_col(base, f->name);
        *cs = bc ? *bc : def.sparse[0];
        snprintf(cs->name, sizeof(cs->name), "%s", f->name);
        cs->modulus = def.sparse[0].modulus;         /* unused: no modulus operator */
        cs->input_fp = pr_feature_vocab_input_fp(f); /* a table's: its owner's (members
                                                      * have its operators: same keys) */
        for (uint32_t j = 0; j < schema->n_features; j++) {
            const pr_feature_spec *m = &schema->features[j];
            if (pr_feature_table_owner(schema, j) == (int)i && m->kind == PR_FEAT_LIST &&
                cs->eviction == PR_EVICT_TTL && cs->ttl_s)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "transform.columns.%s.ttl_s: list feature '%s' cannot evict by "
                                 "event time (its elements have no time of their own yet); use "
                                 "ttl_records, or eviction lru or lfu",
                                 f->name, m->name);
        }
    }
    spec->n_sparse = (uint16_t)n;
    spec->n_features = schema->n_features;
    return pr_pipeline_spec_validate(spec, errstr, errstr_size);
}

/* ---------------------------------------------------------------- finish */

/* Apply the steps after vocab (from step k0 on) to n indices in place: as
 * INT values through the operator library. An index is never missing; a
 * step that leaves a value missing gives 0. */
static int pr__post_vocab(const pr_feature_spec *f, int k0, int64_t *v, uint32_t n, pr_fval *tmp)
{
    if (k0 >= f->n_ops || n == 0)
        return 0;
    for (uint32_t j = 0; j < n; j++)
        tmp[j] = (pr_fval){.type = PR_FVAL_INT, .u = (uint64_t)v[j]};
    for (int k = k0; k < f->n_ops; k++) {
        int rc = pr_fop_apply(&f->ops[k], tmp, n, NULL);
        if (rc < 0)
            return rc;
    }
    for (uint32_t j = 0; j < n; j++)
        v[j] = tmp[j].type == PR_FVAL_INT ? (int64_t)tmp[j].u : 0;
    return 0;
}

uint64_t pr_feature_value_range(const pr_feature_spec *f)
{
    if (!f->n_ops)
        return 0;
    const pr_fop_step *st = &f->ops[f->n_ops - 1];
    switch (st->op) {
    case PR_FOP_HASH:
    case PR_FOP_MODULUS:
        return st->n;
    case PR_FOP_BUCKETIZE:
        return (uint64_t)st->n_bounds + 2; /* 0 missing, 1 .. n_bounds + 1 */
    case PR_FOP_HOUR_OF_DAY:
        return 25; /* 1..24, 0 missing */
    case PR_FOP_DAY_OF_WEEK:
        return 8; /* 1..7, 0 missing */
    default:
        return 0;
    }
}

int pr_feature_after_vocab(const pr_feature_spec *f, int64_t *v, uint32_t n, pr_fval *tmp)
{
    int k = pr_feature_vocab_step(f);
    return k < 0 ? 0 : pr__post_vocab(f, k + 1, v, n, tmp);
}

/* Element e of vocab column c: the row holding it, from the feature's lengths
 * (a running cursor over rows, elements come in row order). */
typedef struct pr__elem_row {
    const int32_t *len;
    uint32_t rows, row, end; /* end: first element past `row` */
} pr__elem_row;

static uint32_t pr__row_of(pr__elem_row *er, uint32_t e)
{
    while (er->row < er->rows && e >= er->end) {
        er->row++;
        if (er->row < er->rows)
            er->end += (uint32_t)er->len[er->row];
    }
    return er->row;
}

/* Shared tables (in->side->shared): every vocab feature's indices taken
 * out of its column, row by row, each row's run split among the column's
 * features in feature order (as the decoder wrote them). */
static int pr__finish_shared(const pr_block *in, pr_out *out, char *errstr, size_t errstr_size)
{
    const pr_fside *is = in->side;
    pr_fside *os = out->side;
    uint32_t pos[PR_MAX_SPARSE] = {0};
    for (uint16_t f = 0; f < is->n_feat; f++) {
        if (is->vocab_col[f] < 0)
            continue;
        uint64_t sum = 0;
        for (uint32_t r = 0; r < in->rows; r++)
            sum += (uint32_t)is->lengths[(size_t)f * is->cap + r];
        os->n_values[f] = 0;
        if (sum > UINT32_MAX || pr_fside_reserve(os, f, (uint32_t)sum))
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "shared table: out of memory");
    }
    for (uint32_t r = 0; r < in->rows; r++)
        for (uint16_t f = 0; f < is->n_feat; f++) {
            int c = is->vocab_col[f];
            if (c < 0)
                continue;
            uint32_t l = (uint32_t)is->lengths[(size_t)f * is->cap + r];
            if ((uint64_t)pos[c] + l > pr_block_col_rows(in, (uint32_t)c))
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "shared table: lengths pass the %u keys of column %d",
                                 pr_block_col_rows(in, (uint32_t)c), c);
            for (uint32_t k = 0; k < l; k++)
                os->values[f][os->n_values[f]++] = pr_out_index(out, (uint32_t)c, pos[c] + k);
            pos[c] += l;
        }
    for (uint32_t c = 0; c < in->n_sparse && c < PR_MAX_SPARSE; c++)
        if (pos[c] != pr_block_col_rows(in, c))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "shared table: lengths sum to %u but column %u holds %u keys", pos[c],
                             c, pr_block_col_rows(in, c));
    return 0;
}

/* A vocab feature's values: the engine's indices of its column (already
 * taken out with a shared table's), then the operators after vocab. */
static int pr__finish_vocab_feat(const pr_feature_spec *f, const pr_block *in, pr_out *out,
                                 uint16_t fi, int col, char *errstr, size_t errstr_size)
{
    pr_fside *os = out->side;
    uint32_t n = in->side->shared ? os->n_values[fi] : pr_block_col_rows(in, (uint32_t)col);
    uint64_t sum = 0;
    const int32_t *len = pr_fside_lengths(in->side, fi);
    for (uint32_t r = 0; r < in->rows; r++)
        sum += (uint32_t)len[r];
    if (sum != n)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "feature %s: lengths sum to %" PRIu64 " but its column holds %u keys",
                         f->name, sum, n);
    if (!in->side->shared) {
        os->n_values[fi] = 0;
        if (pr_fside_reserve(os, fi, n))
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "feature %s: out of memory", f->name);
        for (uint32_t e = 0; e < n; e++)
            os->values[fi][e] = pr_out_index(out, (uint32_t)col, e);
        os->n_values[fi] = n;
    }
    int64_t *v = os->values[fi];
    int k = pr_feature_vocab_step(f);
    if (k + 1 < f->n_ops && n) {
        pr_fval *tmp = malloc((size_t)n * sizeof(*tmp));
        int rc = tmp ? pr__post_vocab(f, k + 1, v, n, tmp) : PR_ENOMEM;
        free(tmp);
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "feature %s: operators after vocab: %s",
                             f->name, pr_strerror(rc));
    }
    return 0;
}

/* Re-express the engine's notices (col = engine column, row = element) as
 * (col = side feature index, row = block row), keeping their order, then
 * order them by (row, col) with a stable insertion sort (notices are few). */
/* A walk over a shared column's elements: (row, feature) runs in order. */
typedef struct pr__shared_at {
    uint32_t row, start, end; /* the run of feature f in row `row`: elements [start, end) */
    uint16_t f;
    bool on;
} pr__shared_at;

/* Element e of shared column c: its row and the feature that holds it
 * (a walk w kept per column, restarted when e lies before it). */
static void pr__shared_place(const pr_block *in, uint32_t c, uint32_t e, pr__shared_at *w)
{
    const pr_fside *s = in->side;
    if (!w->on || e < w->start)
        *w = (pr__shared_at){.on = true};
    else if (e < w->end)
        return;
    else
        w->f++; /* past this run: on from the next feature */
    w->start = w->end;
    for (; w->row < in->rows; w->row++, w->f = 0)
        for (; w->f < s->n_feat; w->f++) {
            if (s->vocab_col[w->f] != (int)c)
                continue;
            uint32_t l = (uint32_t)s->lengths[(size_t)w->f * s->cap + w->row];
            w->start = w->end;
            w->end += l;
            if (e < w->end)
                return;
        }
    /* past the end (never: the engine's notices name its own elements) */
    w->row = in->rows ? in->rows - 1 : 0;
    for (w->f = 0; w->f + 1 < s->n_feat && s->vocab_col[w->f] != (int)c; w->f++)
        ;
    w->on = false;
}

static void pr__finish_notices(const pr_block *in, pr_out *out, const int16_t *feat_of_col)
{
    pr__shared_at walk[PR_MAX_SPARSE];
    if (in->side->shared)
        memset(walk, 0, sizeof(walk));
    for (uint32_t i = 0; i < out->n_recycled; i++) {
        pr_recycled *r = &out->recycled[i];
        if (in->side->shared && r->col < PR_MAX_SPARSE) {
            pr__shared_place(in, r->col, r->row, &walk[r->col]);
            r->row = walk[r->col].row;
            r->col = walk[r->col].f;
            continue;
        }
        uint16_t fi = (uint16_t)feat_of_col[r->col];
        pr__elem_row er = {pr_fside_lengths(in->side, fi), in->rows, 0,
                           in->rows ? (uint32_t)pr_fside_lengths(in->side, fi)[0] : 0};
        r->row = pr__row_of(&er, r->row);
        if (r->row >= in->rows && in->rows)
            r->row = in->rows - 1;
        r->col = fi;
    }
    for (uint32_t i = 1; i < out->n_recycled; i++) {
        pr_recycled x = out->recycled[i];
        uint32_t j = i;
        for (; j > 0 && (out->recycled[j - 1].row > x.row ||
                         (out->recycled[j - 1].row == x.row && out->recycled[j - 1].col > x.col));
             j--)
            out->recycled[j] = out->recycled[j - 1];
        out->recycled[j] = x;
    }
}

static int pr__finish_check(const pr_feature_schema *schema, const pr_block *in, pr_out *out,
                            char *errstr, size_t errstr_size)
{
    if (!in->side)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "pr_feature_finish: the block has no side tables (not a declared "
                         "schema's block)");
    pr__shape sh = pr__schema_shape(schema);
    const pr_fside *is = in->side;
    if (is->n_labels != sh.labels || is->n_dense != sh.dense || is->n_feat != sh.feat ||
        in->n_sparse != sh.vocab || out->n_sparse != sh.vocab || in->rows > is->cap)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "pr_feature_finish: block shaped for another schema (%u labels, %u "
                         "dense, %u features, %u vocab columns; the schema has %u, %u, %u, %u)",
                         is->n_labels, is->n_dense, is->n_feat, in->n_sparse, sh.labels, sh.dense,
                         sh.feat, sh.vocab);
    if (out->side && out->side->cap < in->rows) {
        pr_fside_free(out->side);
        out->side = NULL;
    }
    if (!out->side) {
        out->side = pr_feature_side_new(schema, in->cap > out->cap ? in->cap : out->cap);
        if (!out->side)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                             "pr_feature_finish: out of memory for side tables");
    }
    return 0;
}

/* A weighted feature's weights, as the block has them (the engine never
 * sees them): one per element, in the order of its values. */
static int pr__finish_weights(const pr_feature_spec *f, const pr_fside *is, pr_fside *os,
                              uint16_t fi, char *errstr, size_t errstr_size)
{
    if (!is->weights[fi] != !os->weights[fi])
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "feature %s: weighted in the block but not the output, or the reverse",
                         f->name);
    if (!is->weights[fi])
        return 0;
    uint32_t n = is->n_weights[fi];
    os->n_weights[fi] = 0;
    if (pr_fside_reserve_weights(os, fi, n))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "feature %s: out of memory", f->name);
    memcpy(os->weights[fi], is->weights[fi], (size_t)n * sizeof(float));
    os->n_weights[fi] = n;
    return 0;
}

int pr_feature_finish(const pr_feature_schema *schema, const pr_block *in, pr_out *out,
                      char *errstr, size_t errstr_size)
{
    int rc = pr__finish_check(schema, in, out, errstr, errstr_size);
    if (rc)
        return rc;
    const pr_fside *is = in->side;
    pr_fside *os = out->side;
    uint32_t rows = in->rows;
    memcpy(os->labels, is->labels, (size_t)rows * is->n_labels * sizeof(float));
    memcpy(os->dense, is->dense, (size_t)rows * is->n_dense * sizeof(float));
    int16_t feat_of_col[PR_MAX_SPARSE];
    if (is->shared && (rc = pr__finish_shared(in, out, errstr, errstr_size)))
        return rc;
    for (uint32_t i = 0; i < schema->n_features; i++) {
        int fi = pr_feature_side_index(schema, i);
        if (fi < 0)
            continue;
        const pr_feature_spec *f = &schema->features[i];
        memcpy(pr_fside_lengths(os, (uint16_t)fi), pr_fside_lengths((pr_fside *)is, (uint16_t)fi),
               (size_t)rows * sizeof(int32_t));
        if ((rc = pr__finish_weights(f, is, os, (uint16_t)fi, errstr, errstr_size)))
            return rc;
        int col = is->vocab_col[fi];
        if (col >= 0) {
            feat_of_col[col] = (int16_t)fi;
            rc = pr__finish_vocab_feat(f, in, out, (uint16_t)fi, col, errstr, errstr_size);
            if (rc)
                return rc;
            continue;
        }
        uint32_t n = is->n_values[fi];
        os->n_values[fi] = 0;
        if (pr_fside_reserve(os, (uint16_t)fi, n))
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "feature %s: out of memory", f->name);
        memcpy(os->values[fi], is->values[fi], (size_t)n * sizeof(int64_t));
        os->n_values[fi] = n;
    }
    pr__finish_notices(in, out, feat_of_col);
    return 0;
}
