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

/* A google.protobuf.Timestamp (PR_FTYPE_TIME) reads as its RFC 3339 text:
 * the event time, and a first step that reads a time (hour_of_day,
 * day_of_week, age: the operators with a unit), read it in unit rfc3339; in
 * s, ms or us every record would be rejected bad_time. */
static int pr__pb_check_timestamp(const void *schema, const pr_feature_spec *f, const char *path,
                                  char *errstr, size_t errstr_size)
{
    bool et = f->kind == PR_FEAT_EVENT_TIME;
    const pr_fop_step *st = f->n_ops ? &f->ops[0] : NULL;
    if (!et && (!st || pr_fop_table[st->op].arg != PR_FARG_UNIT))
        return 0;
    pr_time_unit unit = et ? f->unit : st->unit;
    if (unit == PR_TIME_RFC3339)
        return 0;
    char want[64];
    if (et)
        snprintf(want, sizeof(want), "unit: rfc3339");
    else
        snprintf(want, sizeof(want), "{ %s: rfc3339 }", pr_fop_table[st->op].name);
    return pr_seterr(errstr, errstr_size, PR_EINVAL,
                     "'%s' in message %s is a google.protobuf.Timestamp, read as its RFC 3339 "
                     "text (not in %s): give %s (or the path %s.seconds, to the second)",
                     path, pr_pbuser_desc_message(schema), pr_time_unit_names[unit], want, path);
}

/* The path, then whether the feature can take the field's type (a dense
 * feature on a string field would reject every record wrong_type). */
static int pr__pb_check(const void *schema, const pr_feature_spec *f, uint8_t k, char *errstr,
                        size_t errstr_size)
{
    unsigned types = 0;
    char why[200];
    /* A weighted list's weights (pr__check_feature_paths passes k ==
     * PR_FEAT_WEIGHTS_PATH): a repeated field, or a field of a repeated
     * message, of numbers. A string, bytes or enum field reads as a string,
     * and a bool as true / false, which the decoder rejects as a weight. */
    if (k == PR_FEAT_WEIGHTS_PATH) {
        if (f->weights_from_values) { /* a map's values; a path error is the ids' */
            int rc = pr_pbuser_check_path(schema, f->weights_path, PR_JSON_ALIGNED, PR_JSON_VALUES,
                                          &types, errstr, errstr_size);
            if (rc == 0 && (!types || (types & (PR_FTYPE_STR | PR_FTYPE_BYTES | PR_FTYPE_BOOL))))
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "'%s' in message %s: a map of %s values, and weights are numbers "
                                 "(a map whose value type is an integer, float or double)",
                                 f->weights_path, pr_pbuser_desc_message(schema),
                                 types ? "string, bytes, enum or bool" : "message");
            return 0;
        }
        int rc = pr_pbuser_check_path(schema, f->weights_path, PR_JSON_ALIGNED, PR_JSON_AT, &types,
                                      errstr, errstr_size);
        if (rc == 0 && (types & (PR_FTYPE_STR | PR_FTYPE_BYTES | PR_FTYPE_BOOL)))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' in message %s: a string, bytes, enum or bool field, and "
                             "weights are numbers (an integer, float or double field)",
                             f->weights_path, pr_pbuser_desc_message(schema));
        return rc;
    }
    /* the ids of a weighted list: as a list's (PR_JSON_ALIGNED reads alike) */
    pr_json_shape shape = f->in.n ? PR_JSON_SCALAR_OR_LIST /* `in:` matches elements too */
                          : f->kind == PR_FEAT_DENSE && f->dim && !pr_feature_vector_bytes(f)
                              ? PR_JSON_VECTOR
                          : pr_feature_weighted(f)   ? PR_JSON_ALIGNED
                          : pr_feature_reads_list(f) ? PR_JSON_LIST
                                                     : PR_JSON_SCALAR;
    /* list: { from: keys }: a map field, its keys strings (integers in decimal);
     * from: entries crosses them with its values, from: values reads those */
    pr_json_part part = f->from_keys ? PR_JSON_KEYS : PR_JSON_AT;
    int rc = pr_pbuser_check_path(schema, f->paths[k], shape, part, &types, errstr, errstr_size);
    if (rc == 0 && f->from_entries) { /* each key crossed with its value: a scalar */
        unsigned vt = 0;
        if (pr_pbuser_check_path(schema, f->paths[k], PR_JSON_ALIGNED, PR_JSON_VALUES, &vt, errstr,
                                 errstr_size) == 0 &&
            !vt)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' in message %s: a map of message values, and from: entries "
                             "crosses each key with a scalar value",
                             f->paths[k], pr_pbuser_desc_message(schema));
        types = PR_FTYPE_INT; /* the crosses */
    } else if (rc == 0 && f->from_values) {
        /* the values are the ids: scalars, their types the chain's input */
        rc = pr_pbuser_check_path(schema, f->paths[k], PR_JSON_ALIGNED, PR_JSON_VALUES, &types,
                                  errstr, errstr_size);
        if (rc == 0 && !types)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "'%s' in message %s: a map of message values, and from: values "
                             "makes each value an id (a string or an integer, a scalar)",
                             f->paths[k], pr_pbuser_desc_message(schema));
    }
    if (rc == 0 && (types & PR_FTYPE_TIME) && f->n_paths == 1 &&
        (rc = pr__pb_check_timestamp(schema, f, f->paths[k], errstr, errstr_size)))
        return rc;
    if (rc == 0 && pr_feature_check_input(f, types, why, sizeof(why)))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "'%s' in message %s: %s", f->paths[k],
                         pr_pbuser_desc_message(schema), why);
    return rc;
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
        pr__check_feature_paths(c, map, pl, pr__pb_check, d);
    pr_pbuser_desc_free(d);
}
