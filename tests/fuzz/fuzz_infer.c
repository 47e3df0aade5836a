/*
 * fuzz_infer.c — libFuzzer target for `piperec infer` (config/config_infer.c):
 * the config it writes must load, and must read the events it was inferred
 * from.
 *
 * Input: one flags byte, then events separated by '\n' (each one line of
 * JSON, as `piperec infer` reads them).
 *   bit 0: --labels with the first line's first key (as a path) given
 *   bit 1: --time none
 *   bit 2: --ignore the second key of the first line
 *   bit 3: --labels by value on the first line's first key instead
 *          (KEY=click|1|a:b #c: a string, an integer, one YAML must quote)
 * Checks, beyond no crash / leak / UB / hang:
 *   - pr_infer_write returns 0, or PR_EINVAL only when no event was learnt,
 *     no field can be a feature, or an option named a path no event has (or
 *     a label that is no number);
 *   - what it writes loads through the config loader (the promise `infer`
 *     checks at run time, here for any events);
 *   - every event it learnt from decodes through the loaded config's JSON
 *     decoder into a row, except for the reasons the rules cannot see from
 *     the sample's statistics alone: too_deep (the decoder's 64 levels are
 *     counted over the whole event), list_too_long (a list over 4096
 *     elements rejects the record whatever its max_len), number_out_of_range
 *     (a dense or label value beyond float32), and the decoder's own stricter
 *     reading of text jansson accepts (not_json, bad_utf8, bad_escape,
 *     truncated: \u0000 in keys, a lone surrogate), counted so that a new
 *     reason shows.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_config.h"
#include "pr_ingest.h"
#include "pr_log.h"

#define FUZZ_MAX_EVENTS 64

/* The first line's k-th key (0-based), when it is a plain one. */
static bool first_key(const char *doc, size_t len, int k, char *out, size_t n)
{
    int seen = -1;
    for (size_t i = 0; i + 1 < len && doc[i] != '\n'; i++) {
        if (doc[i] != '"')
            continue;
        size_t j = i + 1;
        while (j < len && doc[j] != '"' && doc[j] != '\\' && doc[j] != '\n')
            j++;
        if (j >= len || doc[j] != '"')
            return false;
        size_t e = j + 1;
        while (e < len && doc[e] == ' ')
            e++;
        if (e < len && doc[e] == ':' && ++seen == k) {
            if (j - i - 1 == 0 || j - i - 1 >= n)
                return false;
            memcpy(out, doc + i + 1, j - i - 1);
            out[j - i - 1] = 0;
            return true;
        }
        i = j;
    }
    return false;
}

static bool allowed_reject(int reason)
{
    static const char *const ok[] = {"too_deep", "list_too_long", "number_out_of_range", "not_json",
                                     "bad_utf8", "bad_escape",    "truncated",           NULL};
    const char *name = pr_decode_reason_name(reason);
    for (size_t i = 0; ok[i]; i++)
        if (!strcmp(name, ok[i]))
            return true;
    fprintf(stderr, "fuzz_infer: an event learnt from is rejected: %s\n", name);
    return false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        pr_log_set_level(PR_LOG_ERROR);
        quiet = true;
    }
    if (size < 1)
        return 0;
    const char *doc = (const char *)data + 1;
    size_t len = size - 1;
    pr_infer *inf = NULL;
    FUZZ_CHECK(pr_infer_new(&inf) == 0);
    /* the lines, and which were learnt */
    size_t starts[FUZZ_MAX_EVENTS], lens[FUZZ_MAX_EVENTS], n = 0;
    bool learnt[FUZZ_MAX_EVENTS];
    for (size_t at = 0; at < len && n < FUZZ_MAX_EVENTS;) {
        const char *nl = memchr(doc + at, '\n', len - at);
        size_t l = nl ? (size_t)(nl - (doc + at)) : len - at;
        int rc = pr_infer_add_json(inf, doc + at, l);
        FUZZ_CHECK(rc == 0 || rc == PR_EBADREC);
        starts[n] = at;
        lens[n] = l;
        learnt[n++] = rc == 0;
        at += l + 1;
    }
    char label[PR_FEAT_PATH_MAX + 32], ignore[PR_FEAT_PATH_MAX];
    pr_infer_opts o = {0};
    if (data[0] & 9 && first_key(doc, len, 0, label, PR_FEAT_PATH_MAX)) {
        if (data[0] & 8)
            strcat(label, "=click|1|a:b #c");
        o.labels = label;
    }
    if (data[0] & 2)
        o.time_path = "";
    if (data[0] & 4 && first_key(doc, len, 1, ignore, sizeof(ignore)))
        o.ignore = ignore;
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr_infer_summary sum;
    char err[512];
    int rc = pr_infer_write(inf, &o, &mb, &sum, err, sizeof(err));
    FUZZ_CHECK(rc == 0 || rc == PR_EINVAL);
    if (rc == PR_EINVAL)
        FUZZ_CHECK(pr_infer_events(inf) == 0 || o.labels || o.ignore ||
                   strstr(err, "can be a dense or sparse feature"));
    pr_config *cfg = NULL;
    if (rc == 0) {
        char lerr[4096];
        if (pr_config_load_string(mb.buf, mb.len, "<inferred>", &cfg, lerr, sizeof(lerr))) {
            fprintf(stderr, "fuzz_infer: does not load: %s\n%s\n", lerr, mb.buf);
            abort();
        }
        char derr[512];
        pr_json_decoder *dec = pr_json_decoder_new(&cfg->pipelines[0].features, derr, sizeof(derr));
        FUZZ_CHECK(dec != NULL);
        pr_block *b = pr_feature_block_new(&cfg->pipelines[0].features, FUZZ_MAX_EVENTS, true);
        FUZZ_CHECK(b != NULL);
        for (size_t i = 0; i < n; i++) {
            if (!learnt[i])
                continue;
            fuzz_rejects rl = {0};
            pr_decode_ctx ctx = {.json = dec, .on_reject = fuzz_on_reject, .opaque = &rl};
            int d = pr_decode_json_line(&ctx, b, doc + starts[i], lens[i], (int64_t)i + 1);
            if (d != 1) {
                FUZZ_CHECK(d == 0 && rl.n == 1);
                if (!allowed_reject(rl.reason[0])) {
                    fprintf(stderr, "%s\nevent: %.*s\n%s\n", rl.detail[0], (int)lens[i],
                            doc + starts[i], mb.buf);
                    abort();
                }
            }
        }
        pr_block_free(b);
        pr_json_decoder_free(dec);
    }
    pr_config_free(cfg);
    pr_mbuf_fini(&mb);
    pr_infer_free(inf);
    return 0;
}
