/*
 * feature_ops.c — the per-feature operators (issue 20): their table, the
 * type check of a chain, placement on the engine's backends, the Criteo
 * preset, and the CPU implementation of every operator over columns of
 * pr_fval.
 *
 * The table (pr_fop_table) is the single description of an operator: the
 * config parses arguments by its `arg`, the chain check follows its types,
 * placement its backends, and docs/configuration.md is generated from it.
 *
 * The operators are pure functions of their inputs: no state, no clock, no
 * threads, so a result never depends on batch boundaries or thread count.
 * They favour clarity over speed (a switch per value): the engine's hot
 * Criteo path stays cpu_backend.c; these are the reference semantics and the
 * CPU fallback for everything else.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack (no malloc per call) */
#include <xxhash.h>

#include "pr_engine.h"
#include "pr_kernel.h" /* the kernel's limits (PR_K_HBM_MAX_DOMAIN) */

/* ---------------------------------------------------------------- names and the table */

const char *const pr_feature_kind_names[] = {"label", "dense",      "sparse",
                                             "list",  "event_time", NULL};
const char *const pr_time_unit_names[] = {"s", "ms", "us", "rfc3339", NULL};
const char *const pr_vec_encoding_names[] = {"list", "f32", NULL};
const char *const pr_filter_op_names[] = {"in", "not_in", "present", "absent", NULL};

#define NUM  PR_FTYPE_NUM
#define INT  PR_FTYPE_INT
#define STR  PR_FTYPE_STR
#define CPU  PR_BACKEND_BIT_CPU
#define KERN (PR_BACKEND_BIT_CPU | PR_BACKEND_BITS_FPGA)

const pr_fop_info pr_fop_table[PR_FOP__COUNT] = {
    [PR_FOP_FILL] = {"fill", PR_FARG_VALUE, true, NUM | INT | STR, 0, CPU, "{ fill: V }",
                     "A missing value becomes V (a number on dense features, a string or an "
                     "integer on sparse ones); present values pass unchanged."},
    [PR_FOP_CLIP] = {"clip", PR_FARG_RANGE, true, NUM, 0, CPU, "{ clip: [LO, HI] }",
                     "min(max(x, LO), HI), LO <= HI; -inf/+inf become LO/HI; NaN stays NaN."},
    [PR_FOP_NEG2ZERO] = {"neg2zero", PR_FARG_NONE, false, NUM, 0, KERN, "neg2zero",
                         "x < 0 (and -0.0, -inf) becomes +0.0; NaN stays NaN."},
    [PR_FOP_LOG1P] = {"log1p", PR_FARG_NONE, false, NUM, 0, KERN, "log1p",
                      "log(x + 1) in double (float32 when the value leaves the engine); "
                      "-0.0 gives +0.0, -1 gives -inf, x < -1 and NaN give NaN, +inf stays."},
    [PR_FOP_STANDARDIZE] = {"standardize", PR_FARG_STATS, true, NUM, 0, CPU,
                            "{ standardize: { mean: M, std: S } }",
                            "(x - M) / S with fixed statistics, S > 0; NaN stays NaN."},
    [PR_FOP_BUCKETIZE] = {"bucketize", PR_FARG_BOUNDS, true, NUM | INT, INT, CPU,
                          "{ bucketize: [B1, B2, ...] }",
                          "1 + the number of boundaries <= x (so x < B1 gives 1, x == B1 gives "
                          "2, x >= Bn gives n + 1); boundaries finite and strictly increasing, "
                          "at most 64; a missing value or NaN gives missing (index 0 stays "
                          "\"missing\"); an integer is compared as a double."},
    [PR_FOP_HASH] = {"hash", PR_FARG_COUNT, true, NUM | INT | STR, INT, CPU, "{ hash: N }",
                     "XXH64(bytes(x), seed) mod N, N >= 1; bytes and seed under \"Hash bytes\" "
                     "below."},
    [PR_FOP_MODULUS] = {"modulus", PR_FARG_COUNT, true, INT, 0, KERN, "{ modulus: N }",
                        "v mod N as unsigned 64-bit, N >= 1."},
    [PR_FOP_HEX2INT] = {"hex2int", PR_FARG_NONE, false, STR | INT, INT, KERN, "hex2int",
                        "A hex string (upper or lower case, 1..16 digits, no prefix) to an "
                        "unsigned 64-bit integer; the empty string is missing; anything else "
                        "rejects the record (bad hex). An integer passes unchanged."},
    [PR_FOP_CROSS] = {"cross", PR_FARG_NONE, false, NUM | INT | STR, INT, CPU,
                      "cross: [PATH, PATH, ...] (the feature's key, not in ops)",
                      "XXH64(cross bytes of the values, seed) as a 64-bit integer: follow it "
                      "with hash or modulus (or vocab). Missing when any value is missing."},
    [PR_FOP_HOUR_OF_DAY] = {"hour_of_day", PR_FARG_UNIT, false, NUM | INT | STR, INT, CPU,
                            "hour_of_day or { hour_of_day: UNIT }",
                            "1 + the UTC hour (1..24) of a time read in UNIT (s, ms, us or "
                            "rfc3339; default schema.event_time.unit); an unreadable time "
                            "rejects the record (bad time)."},
    [PR_FOP_DAY_OF_WEEK] = {"day_of_week", PR_FARG_UNIT, false, NUM | INT | STR, INT, CPU,
                            "day_of_week or { day_of_week: UNIT }",
                            "The ISO weekday in UTC, Monday 1 .. Sunday 7, of a time read as "
                            "for hour_of_day (proleptic Gregorian calendar, negative epochs "
                            "included)."},
    [PR_FOP_VOCAB] = {"vocab", PR_FARG_NONE, false, INT | STR, INT, KERN, "vocab",
                      "The continuous vocabulary (transform.vocab: profile, min_count, "
                      "capacity, eviction, seed, vocab_log): a stable index per value, list "
                      "elements left to right; at most once per feature."},
    [PR_FOP_AT_LEAST] = {"at_least", PR_FARG_NUMBER, true, NUM, NUM, CPU, "{ at_least: T }",
                         "1 when x >= T, else 0 (T finite): a label or a 0/1 flag from a "
                         "number (dwell seconds, a rating); NaN stays NaN, a missing value "
                         "stays missing (its default or a fill before decides)."},
    [PR_FOP_AGE] = {"age", PR_FARG_UNIT, false, NUM | INT | STR, NUM, CPU, "age or { age: UNIT }",
                    "The record's event time (schema.event_time, which it needs) minus a time "
                    "read in UNIT as for hour_of_day, in seconds (an item's or an account's "
                    "age when the event happened; negative for a time after it); a record "
                    "without its own event time gives missing (offline and streaming alike: "
                    "never the message timestamp); an unreadable time rejects the record (bad "
                    "time). A label or dense feature starting with it reads a string under "
                    "rfc3339."},
};

#undef NUM
#undef INT
#undef STR
#undef CPU
#undef KERN

int pr_fop_from_name(const char *name)
{
    for (int i = 0; name && i < PR_FOP__COUNT; i++)
        if (strcmp(pr_fop_table[i].name, name) == 0)
            return i;
    return -1;
}

/* ---------------------------------------------------------------- chain check */

static const char *pr__type_text(unsigned t)
{
    static const char *const text[8] = {
        "nothing",
        "a number",
        "an integer",
        "a number or an integer",
        "a string",
        "a number or a string",
        "a string or an integer",
        "any value",
    };
    return text[t & 7u];
}

void pr_ftype_text(unsigned mask, char *buf, size_t size)
{
    static const struct {
        unsigned bit;
        const char *text;
    } names[] = {
        {PR_FTYPE_NUM, "a number"}, {PR_FTYPE_INT, "an integer"}, {PR_FTYPE_STR, "a string"}};
    size_t len = 0;
    if (size)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((mask & names[i].bit) && len < size)
            len +=
                (size_t)snprintf(buf + len, size - len, "%s%s", len ? " or " : "", names[i].text);
}

int pr_feature_check_input(const pr_feature_spec *f, unsigned types, char *errstr,
                           size_t errstr_size)
{
    const unsigned all = PR_FTYPE_NUM | PR_FTYPE_INT | PR_FTYPE_STR;
    unsigned t = types & all;
    char gives[48], needs[48];
    if (!t || f->n_paths > 1 || f->kind == PR_FEAT_EVENT_TIME || f->in.n)
        return 0; /* `in:` matches any value (its set's types decide) */
    pr_ftype_text(t, gives, sizeof(gives));
    if (pr_feature_vector_bytes(f)) { /* raw bytes: a text field must be UTF-8, floats are not */
        if (types & PR_FTYPE_BYTES)
            return 0;
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "it gives %s, and a dense vector with encoding f32 needs bytes (Avro "
                         "bytes or fixed, Protobuf bytes)",
                         gives);
    }
    if (f->kind == PR_FEAT_LABEL || f->kind == PR_FEAT_DENSE) {
        bool str_time = pr_feature_input_type(f) == PR_FTYPE_STR; /* age of rfc3339 strings */
        if (t & (str_time ? PR_FTYPE_STR : PR_FTYPE_NUM | PR_FTYPE_INT))
            return 0;
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "it gives %s, and %s needs %s", gives,
                         f->kind == PR_FEAT_LABEL ? "a label" : "a dense feature",
                         str_time ? "a string (its first operator is age in rfc3339)" : "a number");
    }
    for (uint32_t i = 0; i < f->n_ops; i++) {
        const pr_fop_info *in = &pr_fop_table[f->ops[i].op];
        if (!(t & in->accepts)) {
            pr_ftype_text(in->accepts, needs, sizeof(needs));
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "it gives %s, and '%s'%s needs %s",
                             gives, in->name, i ? " (after the steps before it)" : "", needs);
        }
        t = in->output ? in->output : (t & in->accepts);
        pr_ftype_text(t, gives, sizeof(gives));
    }
    return 0;
}

unsigned pr_feature_input_type(const pr_feature_spec *f)
{
    switch (f->kind) { /* a vector of f32 bytes: numbers by the time its chain runs */
    case PR_FEAT_LABEL:
    case PR_FEAT_DENSE: /* age of an rfc3339 string: the string */
        return f->n_ops && f->ops[0].op == PR_FOP_AGE && f->ops[0].unit == PR_TIME_RFC3339 &&
                       !f->dim
                   ? PR_FTYPE_STR
                   : PR_FTYPE_NUM;
    case PR_FEAT_SPARSE:
    case PR_FEAT_LIST: /* a map's entries: their cross, an integer */
        return f->from_entries ? PR_FTYPE_INT : PR_FTYPE_STR | PR_FTYPE_INT;
    default:
        return PR_FTYPE_NUM | PR_FTYPE_INT | PR_FTYPE_STR;
    }
}

/* Structural rules of one step, before types: cross only first and only on
 * a cross, vocab once. */
static int pr__check_step(const pr_feature_spec *f, uint32_t i, bool *seen_vocab, char *errstr,
                          size_t errstr_size)
{
    pr_fop op = f->ops[i].op;
    if (op == PR_FOP_CROSS && (i != 0 || f->n_paths < 2))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'cross' is not written in ops: give the feature `cross: [path, path, "
                         "...]` instead of `path`");
    if (op != PR_FOP_CROSS && i == 0 && f->n_paths >= 2)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "a cross starts with its cross step");
    if (op == PR_FOP_VOCAB && *seen_vocab)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'vocab' appears twice: a feature has one vocabulary");
    *seen_vocab |= op == PR_FOP_VOCAB;
    return 0;
}

/* age where its input cannot be a time: a dense vector's elements are
 * numbers (not rfc3339 strings), float32 bytes cannot hold a time to the
 * second, and a default (a number) before an age of strings would be
 * refused as a time on every record without the field. */
static int pr__check_age(const pr_feature_spec *f, uint32_t i, unsigned t, char *errstr,
                         size_t errstr_size)
{
    const pr_fop_step *st = &f->ops[i];
    if (st->op != PR_FOP_AGE)
        return 0;
    if (f->dim && st->unit == PR_TIME_RFC3339)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'age' reads rfc3339 strings, and a dense vector's elements are numbers");
    if (pr_feature_vector_bytes(f))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "'age' on float32 bytes (encoding f32): a float32 cannot hold a time to "
                         "the second; read the times as a list of numbers");
    if (i == 0 && t == PR_FTYPE_STR && f->has_default)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "a default is a number, and this feature reads an rfc3339 string for "
                         "'age': drop the default and put { fill: V } after age");
    return 0;
}

int pr_feature_check_chain(const pr_feature_spec *f, uint32_t *bad_op, char *errstr,
                           size_t errstr_size)
{
    *bad_op = 0;
    if (f->kind == PR_FEAT_EVENT_TIME && f->n_ops)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "event_time takes no operators");
    unsigned t = pr_feature_input_type(f);
    bool seen_vocab = false;
    for (uint32_t i = 0; i < f->n_ops; i++) {
        const pr_fop_step *st = &f->ops[i];
        const pr_fop_info *in = &pr_fop_table[st->op];
        *bad_op = i;
        int rc = pr__check_age(f, i, t, errstr, errstr_size);
        if (rc < 0)
            return rc;
        rc = pr__check_step(f, i, &seen_vocab, errstr, errstr_size);
        if (rc < 0)
            return rc;
        char after[PR_NAME_MAX + 16] = "";
        if (i > 0)
            snprintf(after, sizeof(after), " (after '%s')", pr_fop_table[f->ops[i - 1].op].name);
        if (!(t & in->accepts))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' needs %s, but the value here is %s%s", in->name,
                             pr__type_text(in->accepts), pr__type_text(t), after);
        if (st->op == PR_FOP_FILL && !(st->value_type & t))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "the fill value is %s, but the value here is %s%s",
                             pr__type_text(st->value_type), pr__type_text(t), after);
        t = in->output ? in->output : (t & in->accepts);
    }
    *bad_op = f->n_ops;
    if (f->kind == PR_FEAT_DENSE && t != PR_FTYPE_NUM)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "a dense feature must end in a number, this chain ends in %s "
                         "(declare it under sparse)",
                         pr__type_text(t));
    if (f->kind == PR_FEAT_LABEL && t != PR_FTYPE_NUM)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "a label must end in a number, this chain ends in %s", pr__type_text(t));
    if ((f->kind == PR_FEAT_SPARSE || f->kind == PR_FEAT_LIST) && t != PR_FTYPE_INT)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "a sparse feature must end in an integer id, this chain ends in %s: "
                         "end it with vocab, hash or hex2int",
                         pr__type_text(t));
    return 0;
}

bool pr_fop_weight_op(pr_fop op)
{
    const pr_fop_info *in = &pr_fop_table[op];
    /* at_least would zero a weight: weights scale, they do not select */
    return op != PR_FOP_FILL && op != PR_FOP_AT_LEAST && op != PR_FOP_AGE &&
           (in->accepts & PR_FTYPE_NUM) && (in->output == 0 || in->output == PR_FTYPE_NUM);
}

int pr_feature_check_weight_ops(const pr_feature_spec *f, uint32_t *bad_op, char *errstr,
                                size_t errstr_size)
{
    char valid[128] = "";
    size_t len = 0;
    for (int op = 0; op < PR_FOP__COUNT; op++)
        if (pr_fop_weight_op((pr_fop)op))
            len += (size_t)snprintf(valid + len, len < sizeof(valid) ? sizeof(valid) - len : 0,
                                    "%s%s", len ? ", " : "", pr_fop_table[op].name);
    for (uint32_t i = 0; i < f->n_weight_ops; i++) {
        pr_fop op = f->weight_ops[i].op;
        const pr_fop_info *in = &pr_fop_table[op];
        *bad_op = i;
        if (op == PR_FOP_FILL)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'fill' is not a weights operator: weights.default gives a missing "
                             "weight its value (valid: %s)",
                             valid);
        if (!pr_fop_weight_op(op))
            return pr_seterr(
                errstr, errstr_size, PR_EINVAL, "'%s' %s %s, and a weight is a number (valid: %s)",
                in->name, in->accepts & PR_FTYPE_NUM ? "gives" : "takes",
                pr__type_text(in->accepts & PR_FTYPE_NUM ? in->output : in->accepts), valid);
    }
    *bad_op = f->n_weight_ops;
    return 0;
}

/* ---------------------------------------------------------------- placement */

/* Position of op in the FPGA kernel's fixed chain for f, or -1 when the
 * kernel does not run it on such a feature (*why says why). */
static int pr__kernel_pos(const pr_feature_spec *f, pr_fop op, const char **why)
{
    static const pr_fop dense_chain[] = {PR_FOP_NEG2ZERO, PR_FOP_LOG1P};
    static const pr_fop hex_chain[] = {PR_FOP_HEX2INT, PR_FOP_MODULUS, PR_FOP_VOCAB};
    for (int i = 0; i < 2; i++)
        if (dense_chain[i] == op) {
            *why = "the kernel runs neg2zero and log1p only on dense features";
            return f->kind == PR_FEAT_DENSE ? i : -1;
        }
    for (int i = 0; i < 3; i++)
        if (hex_chain[i] == op) {
            *why = "the kernel runs hex2int, modulus and vocab only on single-valued sparse "
                   "features (not lists, not crosses)";
            return f->kind == PR_FEAT_SPARSE && f->n_paths == 1 ? i : -1;
        }
    *why = "the FPGA kernel runs only the dense chain (neg2zero, log1p) and the hex chain "
           "(hex2int, modulus, vocab)";
    return -1;
}

int pr_feature_place(const pr_feature_spec *f, const char *backend, uint32_t cpu_ops,
                     const char **on, char *errstr, size_t errstr_size)
{
    static const char *const fpga[] = {"hls-sim", "xrt", "auto"};
    bool is_fpga = false;
    for (size_t i = 0; backend && i < 3; i++)
        is_fpga |= strcmp(backend, fpga[i]) == 0;
    if (!backend || (!is_fpga && strcmp(backend, "cpu") != 0))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "unknown backend '%s'",
                         backend ? backend : "(none)");
    const char *name = strcmp(backend, "auto") == 0 ? "xrt" : backend;
    bool prefix = true; /* every earlier step ran on the kernel */
    int last = -1;
    for (uint32_t i = 0; i < f->n_ops; i++) {
        pr_fop op = f->ops[i].op;
        on[i] = "cpu";
        if (!is_fpga)
            continue;
        const char *why = NULL;
        int pos = pr__kernel_pos(f, op, &why);
        if (pos >= 0 && op == PR_FOP_VOCAB &&
            (i == 0 || f->ops[i - 1].op != PR_FOP_MODULUS || strcmp(on[i - 1], "cpu") == 0 ||
             f->ops[i - 1].n > PR_K_HBM_MAX_DOMAIN)) {
            why = "the kernel's vocabularies are direct-indexed tables: vocab needs a modulus "
                  "of at most 2^26 right before it on the kernel";
            pos = -1;
        } else if (pos >= 0 && !prefix) {
            why = "it follows an operator that runs on the cpu (the kernel reads the raw column)";
            pos = -1;
        } else if (pos >= 0 && pos <= last) {
            why = "the kernel's chains run in the order neg2zero, log1p and hex2int, modulus, "
                  "vocab";
            pos = -1;
        }
        if (pos >= 0) {
            on[i] = name;
            last = pos;
            continue;
        }
        prefix = false;
        if (!(cpu_ops & (1u << op)))
            return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                             "feature '%s': operator '%s' cannot run on backend %s: %s; list it "
                             "in schema.cpu_ops to run it on the cpu, or set engine.backend: cpu",
                             f->name, pr_fop_table[op].name, name, why);
    }
    for (uint32_t i = 0; is_fpga && i < f->n_weight_ops; i++) { /* always the cpu's */
        pr_fop op = f->weight_ops[i].op;
        if (!(cpu_ops & (1u << op)))
            return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                             "feature '%s': weights operator '%s' cannot run on backend %s: the "
                             "kernel has no weights; list it in schema.cpu_ops to run it on the "
                             "cpu, or set engine.backend: cpu",
                             f->name, pr_fop_table[op].name, name);
    }
    return 0;
}

/* ---------------------------------------------------------------- the Criteo preset */

static pr_fop pr__fop_of_op(uint8_t op)
{
    static const pr_fop map[PR_OP__COUNT] = {
        [PR_OP_NEG2ZERO] = PR_FOP_NEG2ZERO, [PR_OP_LOG1P] = PR_FOP_LOG1P,
        [PR_OP_HEX2INT] = PR_FOP_HEX2INT,   [PR_OP_MODULUS] = PR_FOP_MODULUS,
        [PR_OP_VOCAB] = PR_FOP_VOCAB,
    };
    return map[op];
}

uint32_t pr_feature_criteo_preset(const pr_pipeline_spec *spec,
                                  const char (*dense_names)[PR_NAME_MAX], pr_feature_spec *out)
{
    uint32_t n = 0;
    if (spec->has_label) {
        memset(&out[n], 0, sizeof(out[n]));
        snprintf(out[n].name, PR_NAME_MAX, "label");
        out[n].kind = PR_FEAT_LABEL;
        n++;
    }
    for (uint32_t i = 0; i < spec->n_dense; i++, n++) {
        pr_feature_spec *f = &out[n];
        memset(f, 0, sizeof(*f));
        if (dense_names)
            snprintf(f->name, PR_NAME_MAX, "%s", dense_names[i]);
        else
            snprintf(f->name, PR_NAME_MAX, "I%u", i + 1);
        f->kind = PR_FEAT_DENSE;
        for (uint32_t k = 0; k < spec->n_dense_ops && k < PR_FEAT_MAX_OPS; k++)
            f->ops[f->n_ops++].op = pr__fop_of_op(spec->dense_ops[k]);
    }
    for (uint32_t i = 0; i < spec->n_sparse; i++, n++) {
        pr_feature_spec *f = &out[n];
        memset(f, 0, sizeof(*f));
        snprintf(f->name, PR_NAME_MAX, "%s", spec->sparse[i].name);
        f->kind = PR_FEAT_SPARSE;
        for (uint32_t k = 0; k < spec->n_sparse_ops && k < PR_FEAT_MAX_OPS; k++) {
            pr_fop_step *st = &f->ops[f->n_ops++];
            st->op = pr__fop_of_op(spec->sparse_ops[k]);
            if (st->op == PR_FOP_MODULUS)
                st->n = spec->sparse[i].modulus;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        out[i].n_paths = 1;
        memcpy(out[i].paths[0], out[i].name, PR_NAME_MAX);
    }
    return n;
}

/* ---------------------------------------------------------------- hash bytes */

uint64_t pr_fop_hash64(const void *p, size_t len)
{
    return XXH64(p, len, PR_FOP_HASH_SEED);
}

static void pr__le64(uint8_t *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
}

uint32_t pr_feature_select_paths(const pr_feature_schema *fs, const char **paths)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < fs->n_filter && n < PR_FILTER_MAX_CONDS; i++)
        paths[n++] = fs->filter[i].path;
    const pr_downsample *ds = &fs->downsample;
    if (ds->enabled && ds->has_where)
        paths[n++] = ds->where.path;
    if (ds->enabled && ds->key[0])
        paths[n++] = ds->key;
    return n;
}

/* Column c of dense feature f's name: NAME, or NAME[c] for a vector. */
static void pr__dense_col_name(const pr_feature_spec *f, uint32_t c, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s", f->name);
    if (f->dim && n >= 0 && (size_t)n < size)
        snprintf(buf + n, size - (size_t)n, "[%u]", c);
}

uint32_t pr_feature_schema_dense_cols(const pr_feature_schema *fs)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < fs->n_features; i++)
        n += pr_feature_dense_cols(&fs->features[i]);
    return n;
}

uint32_t pr_feature_dense_names(const pr_feature_schema *fs, char (*names)[PR_NAME_MAX],
                                uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        for (uint32_t c = 0; c < pr_feature_dense_cols(f); c++, n++)
            if (n < cap)
                pr__dense_col_name(f, c, names[n], PR_NAME_MAX);
    }
    return n;
}

uint64_t pr_downsample_hash_id(uint64_t id)
{
    uint8_t b[8];
    pr__le64(b, id);
    return pr_fop_hash64(b, sizeof(b));
}

static uint64_t pr__num_bits(double d)
{
    uint64_t u;
    if (isnan(d))
        return 0x7ff8000000000000ull;
    if (d == 0)
        d = 0.0; /* -0.0 hashes as +0.0 */
    memcpy(&u, &d, 8);
    return u;
}

/* Writes what fits in cap, returns the full length. */
static size_t pr__put(uint8_t *buf, size_t cap, size_t at, const void *p, size_t len)
{
    if (at < cap)
        memcpy(buf + at, p, len < cap - at ? len : cap - at);
    return at + len;
}

size_t pr_fop_value_bytes(const pr_fval *v, uint8_t *buf, size_t cap)
{
    uint8_t b[8];
    switch (v->type) {
    case PR_FVAL_NUM:
        pr__le64(b, pr__num_bits(v->num));
        return pr__put(buf, cap, 0, b, 8);
    case PR_FVAL_INT:
        pr__le64(b, v->u);
        return pr__put(buf, cap, 0, b, 8);
    case PR_FVAL_STR:
        return pr__put(buf, cap, 0, v->str, v->len);
    default:
        return 0;
    }
}

size_t pr_fop_cross_bytes(const pr_fval *vals, size_t k, uint8_t *buf, size_t cap)
{
    static const uint8_t tag[8] = {[PR_FVAL_NUM] = 1, [PR_FVAL_INT] = 2, [PR_FVAL_STR] = 3};
    size_t at = 0;
    for (size_t i = 0; i < k; i++) {
        const pr_fval *v = &vals[i];
        at = pr__put(buf, cap, at, &tag[v->type & 7u], 1);
        if (v->type == PR_FVAL_STR) {
            uint8_t l[4] = {(uint8_t)v->len, (uint8_t)(v->len >> 8), (uint8_t)(v->len >> 16),
                            (uint8_t)(v->len >> 24)};
            at = pr__put(buf, cap, at, l, 4);
        }
        at += pr_fop_value_bytes(v, at < cap ? buf + at : NULL, at < cap ? cap - at : 0);
    }
    return at;
}

static uint64_t pr__hash_value(const pr_fval *v)
{
    if (v->type == PR_FVAL_STR)
        return pr_fop_hash64(v->str, v->len);
    uint8_t b[8];
    pr_fop_value_bytes(v, b, 8);
    return pr_fop_hash64(b, 8);
}

/* ---------------------------------------------------------------- time */

static int64_t pr__floor_div(int64_t a, int64_t b)
{
    return a / b - (a % b != 0 && (a < 0) != (b < 0));
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's method). */
static int64_t pr__days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = pr__floor_div(y, 400);
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

static bool pr__digits(const char *s, size_t len, size_t at, int n, unsigned *out)
{
    unsigned v = 0;
    if (at + (size_t)n > len)
        return false;
    for (int i = 0; i < n; i++) {
        char ch = s[at + (size_t)i];
        if (ch < '0' || ch > '9')
            return false;
        v = v * 10 + (unsigned)(ch - '0');
    }
    *out = v;
    return true;
}

/* Offset in seconds east of UTC from "Z" or "+HH:MM" at s[at..len). */
static bool pr__rfc3339_offset(const char *s, size_t len, size_t at, int64_t *off)
{
    unsigned oh, om;
    if (at + 1 == len && (s[at] == 'Z' || s[at] == 'z')) {
        *off = 0;
        return true;
    }
    if (at + 6 != len || (s[at] != '+' && s[at] != '-') || s[at + 3] != ':' ||
        !pr__digits(s, len, at + 1, 2, &oh) || !pr__digits(s, len, at + 4, 2, &om) || oh > 23 ||
        om > 59)
        return false;
    *off = (s[at] == '-' ? -1 : 1) * (int64_t)(oh * 3600 + om * 60);
    return true;
}

int pr_fop_parse_rfc3339(const char *s, size_t len, int64_t *us)
{
    static const unsigned mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    unsigned y, mo, d, h, mi, sec;
    if (!pr__digits(s, len, 0, 4, &y) || len < 20 || s[4] != '-' || s[7] != '-' ||
        !pr__digits(s, len, 5, 2, &mo) || !pr__digits(s, len, 8, 2, &d) ||
        (s[10] != 'T' && s[10] != 't' && s[10] != ' ') || !pr__digits(s, len, 11, 2, &h) ||
        s[13] != ':' || !pr__digits(s, len, 14, 2, &mi) || s[16] != ':' ||
        !pr__digits(s, len, 17, 2, &sec))
        return PR_EINVAL;
    bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || (mo == 2 && d == 29 && !leap) ||
        h > 23 || mi > 59 || sec > 60)
        return PR_EINVAL;
    size_t at = 19;
    int64_t frac = 0;
    if (at < len && s[at] == '.') {
        int nd = 0;
        for (at++; at < len && s[at] >= '0' && s[at] <= '9'; at++, nd++)
            if (nd < 6)
                frac = frac * 10 + (s[at] - '0');
        if (nd == 0)
            return PR_EINVAL;
        for (; nd < 6; nd++)
            frac *= 10;
    }
    int64_t off;
    if (!pr__rfc3339_offset(s, len, at, &off))
        return PR_EINVAL;
    if (sec == 60) { /* a leap second: the last microsecond of its minute */
        sec = 59;
        frac = 999999;
    }
    int64_t secs = pr__days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - off;
    *us = secs * 1000000 + frac;
    return 0;
}

int pr_fop_time_us(const pr_fval *v, pr_time_unit unit, int64_t *us)
{
    static const int64_t scale[PR_TIME__COUNT] = {1000000, 1000, 1, 0};
    if (unit == PR_TIME_RFC3339)
        return v->type == PR_FVAL_STR ? pr_fop_parse_rfc3339(v->str, v->len, us) : PR_EINVAL;
    if (v->type == PR_FVAL_INT) {
        if (__builtin_mul_overflow((int64_t)v->u, scale[unit], us))
            return PR_EINVAL;
        return 0;
    }
    if (v->type == PR_FVAL_NUM) {
        double x = floor(v->num * (double)scale[unit]);
        if (!(x >= -9.2e18 && x <= 9.2e18)) /* NaN and +-inf too */
            return PR_EINVAL;
        *us = (int64_t)x;
        return 0;
    }
    return PR_EINVAL;
}

int pr_fop_hour_of_day(int64_t us)
{
    int64_t day_us = 86400LL * 1000000;
    int64_t in_day = us - pr__floor_div(us, day_us) * day_us;
    return 1 + (int)(in_day / (3600LL * 1000000));
}

int pr_fop_day_of_week(int64_t us)
{
    int64_t days = pr__floor_div(us, 86400LL * 1000000);
    int64_t w = (days + 3) % 7; /* 1970-01-01 was a Thursday (ISO 4) */
    return 1 + (int)(w < 0 ? w + 7 : w);
}

/* ---------------------------------------------------------------- column operators */

static int pr__reject(pr_fval *v, uint8_t *reason, size_t r, pr_fop_reject why)
{
    v->type = PR_FVAL_MISSING;
    if (reason && reason[r] == PR_FOP_OK)
        reason[r] = (uint8_t)why;
    return 1;
}

static void pr__set_int(pr_fval *v, uint64_t u)
{
    v->type = PR_FVAL_INT;
    v->len = 0;
    v->u = u;
}

static bool pr__hex2int(const char *s, uint32_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (len > 16)
        return false;
    for (uint32_t i = 0; i < len; i++) {
        char ch = s[i];
        unsigned d;
        if (ch >= '0' && ch <= '9')
            d = (unsigned)(ch - '0');
        else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
            d = (unsigned)((ch | 0x20) - 'a' + 10);
        else
            return false;
        v = v << 4 | d;
    }
    *out = v;
    return true;
}

/* The number of boundaries <= x, by binary search. */
static uint64_t pr__bucket(const pr_fop_step *st, double x)
{
    size_t lo = 0, hi = st->n_bounds;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (st->bounds[mid] <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static double pr__num_op(const pr_fop_step *st, double x)
{
    switch (st->op) {
    case PR_FOP_CLIP:
        return isnan(x) ? x : x < st->a ? st->a : x > st->b ? st->b : x;
    case PR_FOP_NEG2ZERO:
        return x < 0 || (x == 0 && signbit(x)) ? 0.0 : x;
    case PR_FOP_LOG1P:
        return x == 0 ? 0.0 : log1p(x);
    default: /* standardize */
        return (x - st->a) / st->b;
    }
}

static void pr__fill(const pr_fop_step *st, pr_fval *v)
{
    v->type = st->value_type;
    v->len = 0;
    if (st->value_type == PR_FVAL_NUM) {
        v->num = st->a;
    } else if (st->value_type == PR_FVAL_INT) {
        v->u = st->n;
    } else {
        v->str = st->str;
        v->len = (uint32_t)strlen(st->str);
    }
}

/* age: event_us minus the time v holds, in seconds; missing without an
 * event time. */
static pr_fop_reject pr__age(const pr_fop_step *st, pr_fval *v, int64_t event_us)
{
    int64_t us, d;
    if (event_us == PR_FOP_NO_TIME) {
        v->type = PR_FVAL_MISSING;
        return PR_FOP_OK;
    }
    if (pr_fop_time_us(v, st->unit, &us) < 0 || __builtin_sub_overflow(event_us, us, &d))
        return PR_FOP_REJECT_TIME;
    v->type = PR_FVAL_NUM;
    v->num = (double)d / 1e6;
    return PR_FOP_OK;
}

/* One present value through one step; returns a reject reason or 0. */
static pr_fop_reject pr__apply_one(const pr_fop_step *st, pr_fval *v, int64_t event_us)
{
    int64_t us;
    uint64_t u;
    switch (st->op) {
    case PR_FOP_FILL:
        return PR_FOP_OK;
    case PR_FOP_BUCKETIZE: {
        double x = v->type == PR_FVAL_INT ? (double)(int64_t)v->u : v->num;
        if (isnan(x))
            v->type = PR_FVAL_MISSING;
        else
            pr__set_int(v, 1 + pr__bucket(st, x));
        return PR_FOP_OK;
    }
    case PR_FOP_HASH:
        pr__set_int(v, pr__hash_value(v) % st->n);
        return PR_FOP_OK;
    case PR_FOP_MODULUS:
        v->u %= st->n;
        return PR_FOP_OK;
    case PR_FOP_HEX2INT:
        if (v->type == PR_FVAL_INT)
            return PR_FOP_OK;
        if (v->len == 0) {
            v->type = PR_FVAL_MISSING;
            return PR_FOP_OK;
        }
        if (!pr__hex2int(v->str, v->len, &u))
            return PR_FOP_REJECT_HEX;
        pr__set_int(v, u);
        return PR_FOP_OK;
    case PR_FOP_HOUR_OF_DAY:
    case PR_FOP_DAY_OF_WEEK:
        if (pr_fop_time_us(v, st->unit, &us) < 0)
            return PR_FOP_REJECT_TIME;
        pr__set_int(v, (uint64_t)(st->op == PR_FOP_HOUR_OF_DAY ? pr_fop_hour_of_day(us)
                                                               : pr_fop_day_of_week(us)));
        return PR_FOP_OK;
    case PR_FOP_AT_LEAST:
        if (!isnan(v->num))
            v->num = v->num >= st->a ? 1.0 : 0.0;
        return PR_FOP_OK;
    case PR_FOP_AGE:
        return pr__age(st, v, event_us);
    default: /* clip, neg2zero, log1p, standardize */
        v->num = pr__num_op(st, v->num);
        return PR_FOP_OK;
    }
}

int pr_fop_apply(const pr_fop_step *st, pr_fval *v, size_t n, uint8_t *reason)
{
    return pr_fop_apply_at(st, v, n, reason, PR_FOP_NO_TIME);
}

int pr_fop_apply_at(const pr_fop_step *st, pr_fval *v, size_t n, uint8_t *reason, int64_t event_us)
{
    if (st->op >= PR_FOP__COUNT || st->op == PR_FOP_VOCAB || st->op == PR_FOP_CROSS)
        return PR_EINVAL;
    if ((st->op == PR_FOP_HASH || st->op == PR_FOP_MODULUS) && st->n == 0)
        return PR_EINVAL;
    unsigned accepts = pr_fop_table[st->op].accepts;
    int rejected = 0;
    for (size_t r = 0; r < n; r++) {
        if (v[r].type == PR_FVAL_MISSING) {
            if (st->op == PR_FOP_FILL)
                pr__fill(st, &v[r]);
            continue;
        }
        if (!(v[r].type & accepts)) {
            rejected += pr__reject(&v[r], reason, r, PR_FOP_REJECT_TYPE);
            continue;
        }
        pr_fop_reject why = pr__apply_one(st, &v[r], event_us);
        if (why != PR_FOP_OK)
            rejected += pr__reject(&v[r], reason, r, why);
    }
    return rejected;
}

/* The hash of pr_fop_cross_bytes of vals[0, k): one XXH64 over a stack
 * buffer when the bytes fit (the common case: ids and numbers), else
 * streamed value by value (same bytes, same hash) so long strings need no
 * buffer. */
static uint64_t pr__cross_hash(const pr_fval *vals, size_t k)
{
    uint8_t buf[256];
    size_t len = pr_fop_cross_bytes(vals, k, buf, sizeof(buf));
    if (len <= sizeof(buf))
        return XXH64(buf, len, PR_FOP_HASH_SEED);
    XXH64_state_t s;
    XXH64_reset(&s, PR_FOP_HASH_SEED);
    for (size_t i = 0; i < k; i++) {
        const pr_fval *v = &vals[i];
        uint8_t head[8];
        size_t hl = v->type == PR_FVAL_STR ? 5 : 1;
        pr_fop_cross_bytes(v, 1, head, hl); /* the tag (and length) only */
        XXH64_update(&s, head, hl);
        if (v->type == PR_FVAL_STR) {
            XXH64_update(&s, v->str, v->len);
        } else {
            pr_fop_value_bytes(v, head, 8);
            XXH64_update(&s, head, 8);
        }
    }
    return XXH64_digest(&s);
}

int pr_fop_cross(const pr_fval *const *cols, size_t k, size_t n, pr_fval *out, uint8_t *reason)
{
    if (k < 2 || k > PR_FEAT_MAX_CROSS)
        return PR_EINVAL;
    (void)reason; /* every type is accepted */
    for (size_t r = 0; r < n; r++) {
        pr_fval vals[PR_FEAT_MAX_CROSS];
        bool missing = false;
        for (size_t i = 0; i < k; i++) {
            vals[i] = cols[i][r];
            missing |= vals[i].type == PR_FVAL_MISSING;
        }
        if (missing) {
            out[r].type = PR_FVAL_MISSING;
            continue;
        }
        pr__set_int(&out[r], pr__cross_hash(vals, k));
    }
    return 0;
}

/* ---------------------------------------------------------------- reference */

static void pr__types_doc(unsigned t, char *b, size_t bn)
{
    static const char *const names[3] = {"number", "integer", "string"};
    size_t len = 0;
    b[0] = '\0';
    for (int i = 0; i < 3; i++)
        if (t & (1u << i))
            len += (size_t)snprintf(b + len, bn - len, "%s%s", len ? ", " : "", names[i]);
}

void pr_fop_write_reference(FILE *f)
{
    fprintf(f, "| operator | written | input | output | backends | semantics |\n"
               "|---|---|---|---|---|---|\n");
    for (int i = 0; i < PR_FOP__COUNT; i++) {
        const pr_fop_info *in = &pr_fop_table[i];
        char acc[64], out[64];
        pr__types_doc(in->accepts, acc, sizeof(acc));
        pr__types_doc(in->output ? in->output : in->accepts, out, sizeof(out));
        fprintf(f, "| `%s` | `%s` | %s | %s | %s | %s |\n", in->name, in->syntax, acc,
                in->output ? out : "same as input",
                (in->backends & PR_BACKEND_BITS_FPGA) ? "cpu, hls-sim, xrt (in the kernel's chain)"
                                                      : "cpu",
                in->doc);
    }
}
