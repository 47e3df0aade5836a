/*
 * config_avro.c — the load-time checks of `source.avro.schema_file`: a
 * pipeline reading Avro with one fixed writer schema parses that schema
 * when the config loads, so that a missing or unparsable file, or a feature
 * path the schema cannot give (`user.idd`, a single-valued path through an
 * array of records, a dense feature on a string), fails `piperec explain`,
 * `run --check`, `run` and `process` alike with the key named, instead of
 * an all-missing feature or a wrong_type in every row later. A weighted
 * list's weights path is checked too (k == PR_FEAT_WEIGHTS_PATH, key
 * schema.sparse[i].weights.path): a list of int, long, float or double, as
 * its ids are a list (a string, bytes, enum or boolean weight would reject
 * every record that has one). The same shape as Protobuf's
 * (config_pbuser.c); the resolving is the reader's (pr_avro_check_feature,
 * ingest/avro_reader.c). With a schema registry the writer schemas arrive
 * at run time: there a path a schema lacks is schema evolution (absent),
 * not an error, and nothing is checked here.
 */
#include "pr_config_int.h"

static int pr__avro_check(const void *schema, const pr_feature_spec *f, uint8_t k, char *errstr,
                          size_t errstr_size)
{
    return pr_avro_check_feature(schema, f, k, errstr, errstr_size);
}

void pr__check_avro(cfg_ctx *c, yaml_node_t *map, const pr_pipeline_cfg *pl)
{
    const pr_source_cfg *s = &pl->source;
    if (s->format != PR_FORMAT_AVRO || !s->avro.enabled || !s->avro.schema_file)
        return;
    yaml_node_t *src = pr__map_find(c, map, "source");
    yaml_node_t *an = src ? pr__map_find(c, src, "avro") : NULL;
    yaml_node_t *fn = an ? pr__map_find(c, an, "schema_file") : NULL;
    char e[400];
    pr_avro_schema *as = pr_avro_schema_load(s->avro.schema_file, e, sizeof(e));
    if (!as) {
        pr__cfg_error(c, fn ? fn : an, "source.avro.schema_file", "%s", e);
        return;
    }
    if (pl->features.declared && !s->schema_registry.enabled)
        pr__check_feature_paths(c, map, pl, pr__avro_check, as);
    pr_avro_schema_free(as);
}
