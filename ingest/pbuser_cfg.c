/*
 * pbuser_cfg.c — the keys of `source.protobuf` (the user's own Protobuf
 * messages, issue 23) in one table, and the step that gives a JSON decoder
 * its Protobuf reader (pr_pbuser_attach). Kept apart from the reader so the
 * config loader links the table without it.
 */
#include "pbuser_int.h"

const char *const pr_pb_framing_names[] = {
    [PR_PB_FRAMING_AUTO] = "auto",
    [PR_PB_FRAMING_NONE] = "none",
    [PR_PB_FRAMING_REGISTRY] = "registry",
    NULL,
};

static const pr_cfgmap_entry pbuser_entries[] = {
    PR_CFG_E_STR("descriptor_set", PR_CFG_NONEMPTY, pr_pbuser_cfg, descriptor_set, NULL,
                 "The events' FileDescriptorSet: `protoc --descriptor_set_out=FILE "
                 "--include_imports x.proto` (a path relative to the working directory). "
                 "Required with format protobuf."),
    PR_CFG_E_STR("message", PR_CFG_NONEMPTY, pr_pbuser_cfg, message, NULL,
                 "The events' message, fully qualified (`shop.Click`). Feature paths are its "
                 "field names, dotted through nested messages and map keys."),
    PR_CFG_E_ENUM("framing", pr_pbuser_cfg, framing, pr_pb_framing_names, "auto",
                  "none: plain messages; registry: every message has schema-registry framing "
                  "(byte 0, 4-byte big-endian schema id, zigzag-varint message indexes), else "
                  "bad_framing; auto: registry framing when the first byte is 0 (a plain message "
                  "never starts with 0). The indexes must name `message`; the schema id is not "
                  "looked up (the descriptor set is the schema)."),
};
const pr_cfgmap pr_pbuser_cfgmap = PR_CFGMAP(pbuser_entries);

static void pr__reader_free(void *rd)
{
    pr_pbuser_reader_free(rd);
}

int pr_pbuser_set_reader(pr_json_decoder *dec, const pr_pbuser_cfg *cfg, char *errstr,
                         size_t errstr_size)
{
    pr_pbuser_desc *d;
    pr_pbuser_reader *r;
    int rc = pr_pbuser_attach(dec, cfg, &d, &r, errstr, errstr_size);
    if (rc)
        return rc;
    pr__pb_reader_own(r, d);
    pr_json_decoder_set_reader_owned(dec, pr_pbuser_read, r, pr__reader_free);
    return 0;
}

int pr_pbuser_attach(pr_json_decoder *dec, const pr_pbuser_cfg *cfg, pr_pbuser_desc **desc,
                     pr_pbuser_reader **reader, char *errstr, size_t errstr_size)
{
    *desc = NULL;
    *reader = NULL;
    if (!cfg->enabled || !cfg->descriptor_set || !cfg->message)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "source.protobuf: descriptor_set and message are needed");
    pr_pbuser_desc *d = pr_pbuser_desc_load(cfg->descriptor_set, cfg->message, errstr, errstr_size);
    if (!d)
        return PR_EINVAL;
    const pr_json_path *paths;
    size_t n = pr_json_decoder_paths(dec, &paths);
    pr_pbuser_reader *r = pr_pbuser_reader_new(d, cfg->framing, paths, n, errstr, errstr_size);
    if (!r) {
        pr_pbuser_desc_free(d);
        return PR_EINVAL;
    }
    pr_json_decoder_set_reader(dec, pr_pbuser_read, r);
    *desc = d;
    *reader = r;
    return 0;
}
