/*
 * cmd_explain.c — `piperec explain [--config FILE] [--pipeline NAME] [--backend B]
 * [--reference]`.
 *
 * Prints, per pipeline, each feature (kind, name, path) and its operator
 * chain with the backend that runs each operator under the configured
 * engine.backend (pr_feature_place in fpga_engine/include/pr_engine.h), then
 * a weighted list's weights.ops (always on the cpu). A config that asks a
 * backend for an operator it cannot run does not load: the loader's message
 * names the pipeline, the feature, the operator and why, and the exit code is
 * 2, the same refusal `run` and `process` give. --backend overrides
 * engine.backend (as `process --backend` does) to see another placement.
 * --reference prints the generated tables of docs/configuration.md (keys,
 * then operators) for regenerating the page.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pr_cli.h"
#include "pr_config.h"

static void pr__explain_usage(FILE *f)
{
    fprintf(f, "usage: piperec explain [--config FILE] [--pipeline NAME]\n"
               "                       [--backend cpu|hls-sim|xrt|auto] [--reference]\n"
               "  Print each pipeline's features (kind, name, path) and their operator\n"
               "  chains with the backend that runs each operator. A backend asked for an\n"
               "  operator it cannot run is refused (exit 2) unless schema.cpu_ops lets the\n"
               "  cpu run it. Without --config the embedded default config is explained.\n"
               "  --reference prints the generated reference tables of\n"
               "  docs/configuration.md instead.\n");
}

/* "hash 65536", "clip [0, 10000]": an operator with its argument. */
static void pr__step_text(const pr_fop_step *st, char *b, size_t bn)
{
    const pr_fop_info *in = &pr_fop_table[st->op];
    size_t len = (size_t)snprintf(b, bn, "%s", in->name);
    switch (in->arg) {
    case PR_FARG_VALUE:
        if (st->value_type == PR_FTYPE_NUM)
            snprintf(b + len, bn - len, " %g", st->a);
        else if (st->value_type == PR_FTYPE_INT)
            snprintf(b + len, bn - len, " %llu", (unsigned long long)st->n);
        else
            snprintf(b + len, bn - len, " \"%s\"", st->str);
        break;
    case PR_FARG_RANGE:
        snprintf(b + len, bn - len, " [%g, %g]", st->a, st->b);
        break;
    case PR_FARG_STATS:
        snprintf(b + len, bn - len, " mean %g std %g", st->a, st->b);
        break;
    case PR_FARG_BOUNDS:
        for (uint16_t i = 0; i < st->n_bounds && len < bn; i++)
            len += (size_t)snprintf(b + len, bn - len, "%s%g", i ? ", " : " [", st->bounds[i]);
        if (len < bn)
            snprintf(b + len, bn - len, "]");
        break;
    case PR_FARG_COUNT:
        snprintf(b + len, bn - len, " %llu", (unsigned long long)st->n);
        break;
    case PR_FARG_UNIT:
        snprintf(b + len, bn - len, " (%s)", pr_time_unit_names[st->unit]);
        break;
    case PR_FARG_NUMBER:
        snprintf(b + len, bn - len, " %g", st->a);
        break;
    default:
        break;
    }
}

/* The feature's line: kind, name, source and its options. */
static void pr__feature_line(const pr_feature_spec *f)
{
    char src[PR_FEAT_MAX_CROSS * PR_FEAT_PATH_MAX + 16];
    size_t len = 0;
    if (f->n_paths > 1) {
        for (uint8_t i = 0; i < f->n_paths; i++)
            len += (size_t)snprintf(src + len, sizeof(src) - len, "%s%s", i ? ", " : "cross(",
                                    f->paths[i]);
        snprintf(src + len, sizeof(src) - len, ")");
    } else {
        snprintf(src, sizeof(src), "%s",
                 f->weight ? "(1 / downsample.rate on a kept sampled row, else 1)" : f->paths[0]);
    }
    printf("  %-10s %-20s %s", pr_feature_kind_names[f->kind], f->name, src);
    if (f->kind == PR_FEAT_EVENT_TIME)
        printf("  unit %s", pr_time_unit_names[f->unit]);
    if (f->kind == PR_FEAT_LIST)
        printf("  max_len %u keep %s%s", f->max_len, f->keep_last ? "last" : "first",
               f->from_entries  ? " (the map's entries: each key crossed with its value)"
               : f->from_values ? " (the map's values)"
               : f->from_keys   ? " (the map's keys)"
                                : "");
    if (pr_feature_weighted(f)) {
        printf("  weights %s%s", f->weights_path,
               f->weights_from_values ? " (the map's values)" : "");
        if (f->has_weight_default)
            printf(" (default %g)", (double)f->weight_default);
    }
    if (f->table[0])
        printf("  table %s (shares its vocabulary)", f->table);
    if (f->dim)
        printf("  dim %u%s (columns %s[0]..%s[%u])", f->dim,
               f->encoding == PR_VEC_F32 ? " f32 bytes" : "", f->name, f->name, f->dim - 1u);
    if (f->in.n)
        printf("  1 when in [%s] else 0", f->in.text);
    if (f->has_default) {
        char d[128];
        pr__step_text(&f->deflt, d, sizeof(d));
        printf("  default%s", d + strlen("fill"));
    }
    printf("\n");
}

/* "context.device in ["ios", "android"]" (no newline). */
static void pr__cond_text(const pr_filter_cond *fc, int width)
{
    printf("%-*s %s", width, fc->path,
           fc->op == PR_FILTER_PRESENT  ? "present"
           : fc->op == PR_FILTER_ABSENT ? "absent or null"
                                        : pr_filter_op_names[fc->op]);
    for (uint16_t k = 0; k < fc->n_values; k++) {
        const pr_filter_value *v = &fc->values[k];
        if (v->type == PR_FTYPE_STR)
            printf("%s\"%s\"", k ? ", " : " [", v->str);
        else
            printf("%s%" PRId64, k ? ", " : " [", v->i);
    }
    printf("%s", fc->n_values ? "]" : "");
}

/* The record filter, a line per condition, and the downsampling. */
static void pr__filter_lines(const pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_filter; i++) {
        printf("  %-10s ", i ? "and" : "filter");
        pr__cond_text(&fs->filter[i], 20);
        printf("\n");
    }
    const pr_downsample *ds = &fs->downsample;
    if (!ds->enabled)
        return;
    printf("  %-10s keep %g of ", "downsample", ds->rate);
    if (ds->has_where)
        pr__cond_text(&ds->where, 0);
    else
        printf("every record");
    printf(", decided by %s%s%s\n", ds->key[0] ? ds->key : "the record's bytes",
           ds->weight[0] ? ", weight label " : "", ds->weight);
}

static int pr__explain_pipeline(const pr_config *cfg, const pr_pipeline_cfg *pl)
{
    const pr_feature_schema *fs = &pl->features;
    const char *backend = cfg->engine.backend ? cfg->engine.backend : "cpu";
    printf("pipeline %s: %s, %u features, engine.backend %s", pl->name,
           fs->declared ? "declared schema" : "Criteo preset", fs->n_features, backend);
    if (fs->cpu_ops) {
        printf(", cpu_ops:");
        for (int op = 0; op < PR_FOP__COUNT; op++)
            if (fs->cpu_ops & (1u << op))
                printf(" %s", pr_fop_table[op].name);
    }
    printf("\n");
    pr__filter_lines(fs);
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        const char *on[PR_FEAT_MAX_OPS];
        char err[600];
        pr__feature_line(f);
        if (pr_feature_place(f, backend, fs->cpu_ops, on, err, sizeof(err)) < 0) {
            /* Only the Criteo preset gets here (the loader refuses a declared
             * schema the backend cannot run); the engine refuses it at start. */
            fprintf(stderr, "piperec explain: pipeline %s: %s\n", pl->name, err);
            return 2;
        }
        for (uint8_t k = 0; k < f->n_ops; k++) {
            char st[400];
            pr__step_text(&f->ops[k], st, sizeof(st));
            printf("      %-40s on %s\n", st, on[k]);
        }
        for (uint8_t k = 0; k < f->n_weight_ops; k++) { /* the decoder's: the cpu */
            char st[400], line[420];
            pr__step_text(&f->weight_ops[k], st, sizeof(st));
            snprintf(line, sizeof(line), "weights: %s", st);
            printf("      %-40s on cpu\n", line);
        }
    }
    return 0;
}

int pr_cli_cmd_explain(int argc, char **argv)
{
    const char *config = NULL, *pipeline = NULL, *backend = NULL;
    for (int i = 1; i < argc; i++) {
        const char **val = !strcmp(argv[i], "--config")     ? &config
                           : !strcmp(argv[i], "--pipeline") ? &pipeline
                           : !strcmp(argv[i], "--backend")  ? &backend
                                                            : NULL;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__explain_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--reference")) {
            pr_config_write_reference(stdout);
            printf("\n");
            pr_fop_write_reference(stdout);
            return 0;
        }
        if (!val || i + 1 >= argc) {
            fprintf(stderr, "piperec explain: %s '%s'\n",
                    val ? "missing value for" : "unknown option", argv[i]);
            pr__explain_usage(stderr);
            return 2;
        }
        *val = argv[++i];
    }
    char err[4096];
    pr_config *cfg = NULL;
    /* --backend is applied before validation: placement is checked against it. */
    char *ov_path[1] = {"engine.backend"}, *ov_value[1] = {(char *)backend};
    int rc;
    if (config)
        rc = pr_config_load_file_with(config, ov_path, ov_value, backend ? 1 : 0, &cfg, err,
                                      sizeof(err));
    else if ((rc = pr_config_load_default(&cfg, err, sizeof(err))) == 0 && backend)
        rc = pr_config_set(cfg, "engine.backend", backend, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "piperec explain: %s\n", err);
        pr_config_free(cfg);
        return 2;
    }
    if (pipeline && !pr_config_pipeline(cfg, pipeline)) {
        fprintf(stderr, "piperec explain: no pipeline named '%s'\n", pipeline);
        pr_config_free(cfg);
        return 2;
    }
    rc = 0;
    for (size_t i = 0; i < cfg->n_pipelines && rc == 0; i++)
        if (!pipeline || strcmp(cfg->pipelines[i].name, pipeline) == 0)
            rc = pr__explain_pipeline(cfg, &cfg->pipelines[i]);
    pr_config_free(cfg);
    return rc;
}
