/*
 * cmd_vocab_lookup.c — `piperec vocab lookup`: the index each of a team's ids
 * has in a pipeline's vocabulary, read-only, without processing anything.
 *
 * Why: a model trained on piperec's batches knows its ids only by index. A
 * serving system, a retrieval index (top-k rows back to item ids) or a person
 * inspecting a user's row needs the mapping for the ids it holds, and the
 * vocabulary files keep a key (an integer id, or a hash of a string id after
 * the feature's operators), not the id. This command maps ids to indices
 * exactly as a row would get them: each id goes through the pipeline's own
 * decoder and operator chain (JSON decoder for a declared schema, the Criteo
 * decoder with Hex2Int and Modulus otherwise), its key is looked up in the
 * vocabulary (a `piperec process` / `vocab export` folder, or a state dir as
 * the service recovers it), and the operators after vocab run on the index.
 * Index -> id is the same table read the other way: look up your catalog.
 *
 * Nothing is inserted: an id the vocabulary has not seen is reported
 * `unseen` (under profile default with the OOV index 1 a row would get if
 * no index were left; a new id in a live stream gets the next index).
 *
 * Output: one line per input line, "id<TAB>index<TAB>status" (a list
 * feature in --events mode: the indices and statuses comma-separated; the id
 * column is the line number in --events mode, else the line with a TAB
 * written as \t). Exit 0, 1 on I/O failure, 2
 * on usage or config errors.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pr_cli.h"
#include "pr_ingest.h"
#include "pr_mbuf.h"
#include "pr_vocab.h"

static void pr__lookup_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec vocab lookup [--config FILE] [--pipeline P] --feature F\n"
            "                            (--input DIR | --state DIR) [--ids PATH|-]\n"
            "                            [--strings | --events] [--output PATH|-]\n"
            "  The index each id has in feature F's vocabulary, as a row would get it: the\n"
            "  id goes through F's decoder and operators, its key is looked up, the\n"
            "  operators after vocab run on the index. Nothing is added to the vocabulary.\n"
            "  --input DIR: a `piperec process` output (its vocab/) or a `vocab export`;\n"
            "  --state DIR: a state dir (snapshot + journal), default the pipeline's state.dir.\n"
            "  --ids (default -): one id per line, written as the event's field has it in\n"
            "           JSON: \"sku-17\" (a string id), 981 (an integer id), null (missing);\n"
            "           a Criteo column: the field's hex text.\n"
            "  --strings: each line is a string id as is (no quotes).\n"
            "  --events:  each line is a whole event (a JSON object, or a Criteo TSV line);\n"
            "           needed for a cross. The first column is then the line number.\n"
            "  Output (default -): id<TAB>index<TAB>status, status one of\n"
            "    known            the vocabulary has the id: index is its index\n"
            "    unseen           it has not: profile default gives 1 (OOV), dlrm -\n"
            "    below_min_count  seen fewer than min_count times: 1 (OOV)\n"
            "    missing          null / empty: default gives 0, dlrm key 0's index\n"
            "    rejected         the id cannot be this feature's value (stderr says why)\n"
            "    empty            --events, a list feature: the event's list has no value\n"
            "  Index -> id: look up your catalog and read the table the other way.\n");
}

/* ---------------------------------------------------------------- key -> index */

/* Open addressing, linear probing; the vocabulary's keys are hashes or ids,
 * so they are mixed first. */
typedef struct pr__kmap {
    uint64_t *key;
    int64_t *idx;
    uint8_t *used;
    size_t mask, n;
} pr__kmap;

static size_t pr__kslot(const pr__kmap *m, uint64_t key)
{
    uint64_t h = key ^ (key >> 33);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    size_t i = (size_t)h & m->mask;
    while (m->used[i] && m->key[i] != key)
        i = (i + 1) & m->mask;
    return i;
}

static int pr__kmap_init(pr__kmap *m, uint64_t entries)
{
    size_t cap = 64;
    while (cap < entries * 2 + 64)
        cap <<= 1;
    m->mask = cap - 1;
    m->n = 0;
    m->key = malloc(cap * sizeof(*m->key));
    m->idx = malloc(cap * sizeof(*m->idx));
    m->used = calloc(cap, 1);
    return m->key && m->idx && m->used ? 0 : PR_ENOMEM;
}

static void pr__kmap_free(pr__kmap *m)
{
    free(m->key);
    free(m->idx);
    free(m->used);
}

static int pr__kmap_put_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__kmap *m = opaque;
    if ((m->n + 1) * 2 > m->mask + 1)
        return PR_EFULL;
    size_t i = pr__kslot(m, e->value);
    if (!m->used[i])
        m->n++;
    m->used[i] = 1;
    m->key[i] = e->value;
    m->idx[i] = e->index;
    return 0;
}

static int pr__count_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    (*(uint64_t *)opaque)++;
    return 0;
}

/* ---------------------------------------------------------------- statuses */

typedef enum {
    PR__LK_KNOWN = 0,
    PR__LK_UNSEEN,
    PR__LK_BELOW,
    PR__LK_MISSING,
    PR__LK_REJECTED,
    PR__LK_EMPTY,
    PR__LK__COUNT
} pr__lk_status;

static const char *const pr__lk_names[PR__LK__COUNT] = {
    [PR__LK_KNOWN] = "known",           [PR__LK_UNSEEN] = "unseen",
    [PR__LK_BELOW] = "below_min_count", [PR__LK_MISSING] = "missing",
    [PR__LK_REJECTED] = "rejected",     [PR__LK_EMPTY] = "empty",
};

/* ---------------------------------------------------------------- the lookup */

typedef struct pr__lookup {
    const pr_pipeline_cfg *pc;
    const pr_pipeline_spec *espec;
    bool declared, events, strings;
    /* declared schema: the feature alone, decoded by the JSON decoder */
    const pr_feature_spec *feat;
    pr_feature_spec alone; /* feat with its own table (a shared one's member reads it) */
    pr_feature_schema one;
    pr_pipeline_spec spec1;
    pr_json_decoder *dec;
    /* both */
    uint32_t col;        /* the engine column of the feature's vocabulary */
    uint32_t criteo_col; /* Criteo: the sparse column */
    pr_block *blk;
    pr_decode_ctx ctx;
    pr__kmap map;
    /* this line's reject */
    int reason;
    char detail[512];
    pr_mbuf doc;
    pr_fval *tmp;   /* [PR_FEAT_MAX_LIST] scratch of the operators after vocab */
    uint64_t *keys; /* [PR_FEAT_MAX_LIST] this row's keys */
    uint8_t *miss;  /* [PR_FEAT_MAX_LIST] ... missing or not */
    int64_t *vals;  /* [PR_FEAT_MAX_LIST] ... their indices (-1: none) */
    uint8_t *st;    /* [PR_FEAT_MAX_LIST] ... their pr__lk_status */
    uint64_t counts[PR__LK__COUNT];
    uint64_t lines, rejects_shown;
} pr__lookup;

static void pr__on_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                          int64_t recno)
{
    (void)rec;
    (void)len;
    (void)recno;
    pr__lookup *lk = opaque;
    lk->reason = reason;
    snprintf(lk->detail, sizeof(lk->detail), "%s", detail ? detail : "");
}

/* A JSON scalar as the whole line (so that nothing else can ride along into
 * the event): a string with its escapes, or a token of number / literal
 * characters. */
static bool pr__json_scalar(const char *s, size_t n)
{
    if (n == 0)
        return false;
    if (s[0] == '"') {
        size_t i = 1;
        while (i < n && s[i] != '"')
            i += s[i] == '\\' ? 2 : 1;
        return i == n - 1;
    }
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789+-.eEtrufalsn", s[i]))
            return false;
    return true;
}

/* The event that carries `id` at the feature's path: {"a":{"b":ID}} for
 * path a.b, the id in a one-element list for a list feature. */
static void pr__id_event(pr__lookup *lk, const char *id, size_t n)
{
    pr_mbuf *b = &lk->doc;
    int depth = 0;
    for (const char *p = lk->feat->paths[0], *dot;; p = dot + 1) {
        dot = strchr(p, '.');
        pr_mbuf_append(b, "{", 1);
        pr_mbuf_json_strn(b, p, dot ? (size_t)(dot - p) : strlen(p));
        pr_mbuf_append(b, ":", 1);
        depth++;
        if (!dot)
            break;
    }
    bool list = lk->feat->kind == PR_FEAT_LIST;
    if (list)
        pr_mbuf_append(b, "[", 1);
    if (lk->strings)
        pr_mbuf_json_strn(b, id, n);
    else
        pr_mbuf_append(b, id, n);
    if (list)
        pr_mbuf_append(b, "]", 1);
    while (depth--)
        pr_mbuf_append(b, "}", 1);
}

/* The Criteo line that carries `id` in the column (label 0, the rest empty). */
static void pr__id_tsv(pr__lookup *lk, const char *id, size_t n)
{
    pr_mbuf *b = &lk->doc;
    const pr_pipeline_spec *s = &lk->pc->spec;
    uint32_t fields = (s->has_label ? 1u : 0u) + s->n_dense + s->n_sparse;
    uint32_t at = (s->has_label ? 1u : 0u) + s->n_dense + lk->criteo_col;
    if (s->has_label)
        pr_mbuf_append(b, "0", 1);
    for (uint32_t i = 0; i < fields; i++) {
        if (i > 0)
            pr_mbuf_append(b, "\t", 1);
        if (i == at)
            pr_mbuf_append(b, id, n);
    }
}

/* The keys of the decoded row: n keys into keys[], missing[] per key. */
static uint32_t pr__row_keys(pr__lookup *lk)
{
    const pr_block *b = lk->blk;
    if (lk->declared) {
        uint32_t n = pr_block_col_rows(b, 0);
        n = n < PR_FEAT_MAX_LIST ? n : PR_FEAT_MAX_LIST;
        for (uint32_t k = 0; k < n; k++) {
            lk->keys[k] = b->sparse_u64[k];
            lk->miss[k] = pr_bit_test(b->sparse_missing, k);
        }
        return n;
    }
    uint32_t c = lk->criteo_col;
    lk->miss[0] = pr_bit_test(b->sparse_missing + (size_t)c * pr_bitmap_words(b->scap), 0);
    lk->keys[0] = lk->miss[0] ? 0 : b->sparse_u64[(size_t)c * b->scap];
    if (pr_spec_has_op(lk->espec, PR_OP_MODULUS))
        lk->keys[0] %= lk->espec->sparse[lk->col].modulus;
    return 1;
}

/* One key -> its index and status. */
static pr__lk_status pr__resolve(const pr__lookup *lk, uint64_t key, bool missing, int64_t *idx)
{
    bool dflt = lk->espec->profile == PR_VOCAB_DEFAULT;
    if (missing && dflt) {
        *idx = PR_INDEX_MISSING;
        return PR__LK_MISSING;
    }
    size_t i = pr__kslot(&lk->map, key);
    pr__lk_status st;
    if (lk->map.used[i] && lk->map.idx[i] >= 0) {
        *idx = lk->map.idx[i];
        st = PR__LK_KNOWN;
    } else {
        *idx = dflt ? PR_INDEX_OOV : -1;
        st = lk->map.used[i] ? PR__LK_BELOW : PR__LK_UNSEEN;
    }
    return missing ? PR__LK_MISSING : st;
}

/* One input line -> one output line. 0, or an error (no memory). */
static int pr__lookup_line(pr__lookup *lk, const char *line, size_t n, FILE *out)
{
    lk->lines++;
    lk->reason = 0;
    lk->detail[0] = 0;
    pr_mbuf_reset(&lk->doc);
    if (lk->events) {
        pr_mbuf_append(&lk->doc, line, n);
    } else if (!lk->declared) {
        pr__id_tsv(lk, line, n);
    } else if (!lk->strings && !pr__json_scalar(line, n)) {
        lk->reason = -1;
        snprintf(lk->detail, sizeof(lk->detail),
                 "not one JSON value (a string id is written \"sku-17\"; --strings reads "
                 "lines as they are)");
    } else {
        pr__id_event(lk, line, n);
    }
    if (lk->doc.err)
        return lk->doc.err;
    uint32_t nk = 0;
    if (!lk->reason) {
        pr_block_reset(lk->blk);
        int got = lk->declared ? pr_decode_json_line(&lk->ctx, lk->blk, lk->doc.buf, lk->doc.len,
                                                     (int64_t)lk->lines)
                               : pr_decode_criteo_line(&lk->ctx, lk->blk, lk->doc.buf, lk->doc.len,
                                                       (int64_t)lk->lines);
        if (got < 0)
            return got;
        if (got == 1)
            nk = pr__row_keys(lk);
        else if (!lk->reason)
            lk->reason = -1;
    }
    if (lk->events)
        fprintf(out, "%" PRIu64 "\t", lk->lines);
    else /* the id as given; a TAB inside it would split the column */
    {
        for (size_t i = 0; i < n; i++)
            if (line[i] == '\t')
                fputs("\\t", out);
            else
                fputc(line[i], out);
        fputc('\t', out);
    }
    if (lk->reason) {
        lk->counts[PR__LK_REJECTED]++;
        if (lk->rejects_shown++ < 20)
            fprintf(stderr, "piperec vocab lookup: line %" PRIu64 " rejected (%s): %s\n", lk->lines,
                    lk->reason > 0 ? pr_decode_reason_name(lk->reason) : "not_json", lk->detail);
        fputs("-\trejected\n", out);
        return 0;
    }
    uint32_t m = 0; /* the indices a row would carry, compacted for the operators after vocab */
    int64_t *after = (int64_t *)lk->keys;
    for (uint32_t k = 0; k < nk; k++) {
        lk->st[k] = (uint8_t)pr__resolve(lk, lk->keys[k], lk->miss[k], &lk->vals[k]);
        if (lk->vals[k] >= 0)
            after[m++] = lk->vals[k];
    }
    int rc = lk->declared ? pr_feature_after_vocab(lk->feat, after, m, lk->tmp) : 0;
    if (rc)
        return rc;
    m = 0;
    for (uint32_t k = 0; k < nk; k++) {
        if (lk->vals[k] >= 0) {
            lk->vals[k] = after[m++];
            fprintf(out, k ? ",%" PRId64 : "%" PRId64, lk->vals[k]);
        } else {
            fputs(k ? ",-" : "-", out);
        }
    }
    fputc('\t', out);
    for (uint32_t k = 0; k < nk; k++) {
        lk->counts[lk->st[k]]++;
        fprintf(out, "%s%s", k ? "," : "", pr__lk_names[lk->st[k]]);
    }
    if (!nk)
        lk->counts[PR__LK_EMPTY]++;
    fputs(nk ? "\n" : "empty\n", out);
    return 0;
}

/* The feature's engine column, its decoder and block. 0 or an exit code. */
static int pr__lookup_prepare(pr__lookup *lk, const char *name)
{
    char err[1024];
    const pr_feature_schema *fs = &lk->pc->features;
    lk->declared = fs->declared;
    if (lk->declared) {
        uint32_t i = 0;
        while (i < fs->n_features && strcmp(fs->features[i].name, name))
            i++;
        if (i == fs->n_features) {
            fprintf(stderr,
                    "piperec vocab lookup: pipeline %s has no feature '%s'; those with a "
                    "vocabulary:",
                    lk->pc->name, name);
            for (uint32_t c = 0; c < lk->espec->n_sparse; c++)
                fprintf(stderr, " %s", lk->espec->sparse[c].name);
            fputc('\n', stderr);
            return 2;
        }
        lk->feat = &fs->features[i];
        if (pr_feature_vocab_step(lk->feat) < 0) {
            fprintf(stderr,
                    "piperec vocab lookup: feature %s has no vocab operator: its value comes "
                    "from the id alone, no vocabulary holds it (`piperec explain` shows its "
                    "chain)\n",
                    name);
            return 2;
        }
        if (lk->feat->n_paths > 1 && !lk->events) {
            fprintf(stderr,
                    "piperec vocab lookup: feature %s is a cross of %u fields: give whole "
                    "events with --events\n",
                    name, (unsigned)lk->feat->n_paths);
            return 2;
        }
        lk->alone = *lk->feat;
        lk->alone.table[0] = '\0'; /* a member: its keys, looked up in its table's column */
        lk->one = (pr_feature_schema){
            .features = &lk->alone, .n_features = 1, .declared = true, .cpu_ops = fs->cpu_ops};
        if (pr_feature_engine_spec(&lk->one, &lk->pc->spec, &lk->spec1, err, sizeof(err)) < 0 ||
            !(lk->dec = pr_json_decoder_new(&lk->one, err, sizeof(err)))) {
            fprintf(stderr, "piperec vocab lookup: feature %s: %s\n", name, err);
            return 2;
        }
        lk->blk = pr_feature_block_new(&lk->one, 64, false);
        lk->ctx.spec = &lk->spec1;
        lk->ctx.json = lk->dec;
    } else {
        if (!pr_spec_has_op(lk->espec, PR_OP_VOCAB) || !pr_decode_want_parse_hex(lk->espec)) {
            fprintf(stderr,
                    "piperec vocab lookup: pipeline %s's sparse columns have no %s operator\n",
                    lk->pc->name, pr_spec_has_op(lk->espec, PR_OP_VOCAB) ? "hex2int" : "vocab");
            return 2;
        }
        lk->blk = pr_block_new(lk->espec->n_dense, lk->espec->n_sparse, 64, false);
        lk->ctx.spec = lk->espec;
        lk->ctx.parse_hex = true;
    }
    uint32_t c = 0;
    if (lk->declared)
        name = pr_feature_table_name(lk->feat); /* a shared vocabulary: its owner's column */
    while (c < lk->espec->n_sparse && strcmp(lk->espec->sparse[c].name, name))
        c++;
    if (c == lk->espec->n_sparse) {
        fprintf(stderr,
                "piperec vocab lookup: pipeline %s has no column '%s'; its columns:", lk->pc->name,
                name);
        for (uint32_t k = 0; k < lk->espec->n_sparse; k++)
            fprintf(stderr, " %s", lk->espec->sparse[k].name);
        fputc('\n', stderr);
        return 2;
    }
    lk->col = lk->criteo_col = c;
    lk->ctx.on_reject = pr__on_reject;
    lk->ctx.opaque = lk;
    lk->tmp = calloc(PR_FEAT_MAX_LIST, sizeof(*lk->tmp));
    lk->keys = calloc(PR_FEAT_MAX_LIST, sizeof(*lk->keys));
    lk->miss = calloc(PR_FEAT_MAX_LIST, 1);
    lk->vals = calloc(PR_FEAT_MAX_LIST, sizeof(*lk->vals));
    lk->st = calloc(PR_FEAT_MAX_LIST, 1);
    pr_mbuf_init(&lk->doc);
    if (!lk->blk || !lk->tmp || !lk->keys || !lk->miss || !lk->vals || !lk->st) {
        fprintf(stderr, "piperec vocab lookup: out of memory\n");
        return 1;
    }
    return 0;
}

static int pr__lookup_run(pr_cli_vocab *v, pr__lookup *lk, const char *config, const char *feature,
                          const char *input, const char *ids, const char *output)
{
    int ret;
    lk->pc = v->pc;
    lk->espec = &v->espec;
    if ((ret = pr_cli_vocab_load(v, config, input)) || (ret = pr__lookup_prepare(lk, feature)))
        return ret;
    uint64_t entries = 0;
    pr_engine_vocab_read(v->eng, lk->col, pr__count_cb, &entries);
    if (pr__kmap_init(&lk->map, entries) ||
        pr_engine_vocab_read(v->eng, lk->col, pr__kmap_put_cb, &lk->map)) {
        fprintf(stderr, "piperec vocab lookup: out of memory\n");
        return 1;
    }
    FILE *in = strcmp(ids, "-") ? fopen(ids, "r") : stdin;
    if (!in) {
        fprintf(stderr, "piperec vocab lookup: --ids %s: %s\n", ids, strerror(errno));
        return 1;
    }
    FILE *out = strcmp(output, "-") ? fopen(output, "w") : stdout;
    if (!out) {
        fprintf(stderr, "piperec vocab lookup: --output %s: %s\n", output, strerror(errno));
        if (in != stdin)
            fclose(in);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int rc = 0;
    bool first = true;
    while (!rc && (n = getline(&line, &cap, in)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        /* A byte order mark would be read as part of the first id (a wrong
         * "unseen"): refused, as everywhere piperec reads text. */
        if (first && n >= 3 && !memcmp(line, "\xef\xbb\xbf", 3)) {
            fprintf(stderr,
                    "piperec vocab lookup: %s:1: starts with a UTF-8 byte order mark, which "
                    "would be read as part of the first id: remove it, e.g. "
                    "sed -i '1s/^\\xEF\\xBB\\xBF//' FILE\n",
                    in == stdin ? "standard input" : ids);
            break;
        }
        first = false;
        rc = pr__lookup_line(lk, line, (size_t)n, out);
    }
    free(line);
    if (first && n >= 0) { /* the byte order mark */
        if (in != stdin)
            fclose(in);
        if (out != stdout)
            fclose(out);
        return 2;
    }
    ret = 0;
    if (rc || ferror(in)) {
        fprintf(stderr, "piperec vocab lookup: %s\n",
                rc ? pr_strerror(rc) : "reading the ids failed");
        ret = 1;
    }
    if (in != stdin)
        fclose(in);
    if ((out == stdout ? fflush(out) : fclose(out)) != 0 && !ret) {
        fprintf(stderr, "piperec vocab lookup: --output %s: %s\n", output, strerror(errno));
        ret = 1;
    }
    fprintf(stderr,
            "piperec vocab lookup: feature %s (pipeline %s, profile %s, %zu keys in the "
            "vocabulary): %" PRIu64 " lines, %" PRIu64 " values: %" PRIu64 " known, %" PRIu64
            " unseen, %" PRIu64 " below_min_count, %" PRIu64 " missing, %" PRIu64
            " rejected, %" PRIu64 " empty\n",
            feature, v->pc->name, pr_vocab_profile_name(v->espec.profile), lk->map.n, lk->lines,
            lk->counts[PR__LK_KNOWN] + lk->counts[PR__LK_UNSEEN] + lk->counts[PR__LK_BELOW] +
                lk->counts[PR__LK_MISSING],
            lk->counts[PR__LK_KNOWN], lk->counts[PR__LK_UNSEEN], lk->counts[PR__LK_BELOW],
            lk->counts[PR__LK_MISSING], lk->counts[PR__LK_REJECTED], lk->counts[PR__LK_EMPTY]);
    return ret;
}

int pr_cli_vocab_lookup(int argc, char **argv)
{
    const char *config = NULL, *pipeline = NULL, *state = NULL, *input = NULL, *feature = NULL,
               *ids = "-", *output = "-";
    bool strings = false, events = false;
    const pr_cli_opt opts[] = {
        {"--config", &config, NULL}, {"--pipeline", &pipeline, NULL}, {"--state", &state, NULL},
        {"--input", &input, NULL},   {"--feature", &feature, NULL},   {"--ids", &ids, NULL},
        {"--output", &output, NULL}, {"--strings", NULL, &strings},   {"--events", NULL, &events},
    };
    int pr = pr_cli_parse_opts("vocab lookup", argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__lookup_usage);
    if (pr)
        return pr == 1 ? 0 : pr;
    const char *bad = !feature            ? "--feature is required"
                      : state && input    ? "give --state or --input, not both"
                      : strings && events ? "give --strings or --events, not both"
                                          : NULL;
    if (bad) {
        fprintf(stderr, "piperec vocab lookup: %s\n", bad);
        pr__lookup_usage(stderr);
        return 2;
    }
    pr_cli_vocab v;
    pr__lookup lk = {.strings = strings, .events = events};
    int ret = pr_cli_vocab_open("lookup", config, pipeline, state, !input, &v);
    if (ret == 0)
        ret = pr__lookup_run(&v, &lk, config, feature, input, ids, output);
    pr__kmap_free(&lk.map);
    pr_block_free(lk.blk);
    pr_json_decoder_free(lk.dec);
    pr_mbuf_fini(&lk.doc);
    free(lk.tmp);
    free(lk.keys);
    free(lk.miss);
    free(lk.vals);
    free(lk.st);
    pr_cli_vocab_close(&v);
    return ret;
}
