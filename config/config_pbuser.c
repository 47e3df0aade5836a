/*
 * config_pbuser.c — the load-time checks of `source.protobuf` (issue 23): a
 * pipeline with source.format protobuf loads its descriptor set once here,
 * so that a wrong file, message or feature path fails `piperec run`,
 * `process` and `explain` alike with the key named
 * ("schema.sparse[2].path: message shop.Click has no field 'usr'") instead
 * of rejecting every record later. The keys themselves are ingest's table
 * (pr_pbuser_cfgmap).
 */
#include <stdio.h>
#include <string.h>

#include "pr_config_int.h"

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

/* What a feature can read (PR_FTYPE_*; 0 = anything): labels and dense
 * features a number (integers and bools convert), a sparse or list feature
 * what its first operator takes (an id: a string or an integer, without
 * one); crosses and the event time are not checked here. */
static unsigned pr__accepts(const pr_feature_spec *f)
{
    if (f->kind == PR_FEAT_EVENT_TIME || f->n_paths > 1)
        return 0;
    if (f->kind == PR_FEAT_LABEL || f->kind == PR_FEAT_DENSE)
        return PR_FTYPE_NUM | PR_FTYPE_INT;
    return f->n_ops ? pr_fop_table[f->ops[0].op].accepts : PR_FTYPE_STR | PR_FTYPE_INT;
}

static void pr__check_paths(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl,
                            const pr_pbuser_desc *d)
{
    size_t seen[PR_FEAT_EVENT_TIME + 1] = {0};
    for (uint32_t i = 0; i < pl->features.n_features; i++) {
        const pr_feature_spec *f = &pl->features.features[i];
        const char *list = pr__kind_list(f->kind);
        size_t idx = seen[f->kind == PR_FEAT_LIST ? PR_FEAT_SPARSE : f->kind]++;
        for (uint8_t k = 0; k < f->n_paths; k++) {
            char e[300], sub[96];
            if (pr_pbuser_check_path(d, f->paths[k], f->kind == PR_FEAT_LIST, pr__accepts(f), e,
                                     sizeof(e)) == 0)
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
    }
}

void pr__check_protobuf(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl)
{
    const pr_pbuser_cfg *pc = &pl->source.protobuf;
    yaml_node_t *src = pr__map_find(c, map, "source");
    yaml_node_t *pn = src ? pr__map_find(c, src, "protobuf") : NULL;
    if (pl->source.format != PR_FORMAT_PROTOBUF) {
        if (pc->enabled)
            pr__cfg_error(c, pn, "source.protobuf", "applies only to source.format: protobuf");
        return;
    }
    if (pl->source.schema_registry.enabled)
        pr__cfg_error(c, src ? pr__map_find(c, src, "schema_registry") : NULL,
                      "source.schema_registry",
                      "not used by format protobuf: the descriptor set is the schema (a registry "
                      "schema id in a message is read, not looked up)");
    if (!pc->enabled || !pc->descriptor_set || !pc->message) {
        pr__cfg_error(c, pn ? pn : src, "source.protobuf",
                      "missing: format protobuf needs { descriptor_set: FILE (protoc "
                      "--descriptor_set_out=FILE --include_imports), message: pkg.Name }");
        return;
    }
    char e[400];
    pr_pbuser_desc *d = pr_pbuser_desc_load(pc->descriptor_set, pc->message, e, sizeof(e));
    if (!d) {
        bool msg = strncmp(e, "message ", 8) == 0;
        const char *key = msg ? "message" : "descriptor_set";
        pr__cfg_error(c, pr__map_find(c, pn, key),
                      msg ? "source.protobuf.message" : "source.protobuf.descriptor_set", "%s", e);
        return;
    }
    if (pl->features.declared)
        pr__check_paths(c, map, pl, d);
    pr_pbuser_desc_free(d);
}
