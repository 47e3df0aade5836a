/*
 * fhealth.c — feature health snapshots and their rendering (pr_fhealth.h):
 * missing features per event, vocabulary lookups and OOV answers per
 * column, for `run`'s and `serve`'s /metrics and /v1/status alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_error.h"
#include "pr_fhealth.h"
#include "pr_metrics.h"

static const struct {
    const char *name, *label, *help;
} pr__fam[PR_FHEALTH__COUNT] = {
    [PR_FHEALTH_MISSING] = {"piperec_feature_missing_total", "feature", PR_FHEALTH_HELP_MISSING},
    [PR_FHEALTH_LOOKUPS] = {"piperec_vocab_lookups_total", "column", PR_FHEALTH_HELP_LOOKUPS},
    [PR_FHEALTH_OOV] = {"piperec_vocab_oov_total", "column", PR_FHEALTH_HELP_OOV},
};

static bool pr__declared(const pr_fhealth *h)
{
    return h->pc->features.declared;
}

int pr_fhealth_init(pr_fhealth *h, const pr_pipeline_cfg *pc, const pr_pipeline_spec *spec)
{
    memset(h, 0, sizeof(*h));
    h->pc = pc;
    h->spec = spec;
    h->n_feat = pc->features.declared ? pc->features.n_features
                                      : (uint32_t)pc->spec.n_dense + pc->spec.n_sparse;
    h->missing = calloc((size_t)h->n_feat + 1, sizeof(uint64_t));
    return h->missing ? 0 : PR_ENOMEM;
}

void pr_fhealth_fini(pr_fhealth *h)
{
    free(h->missing);
    h->missing = NULL;
}

void pr_fhealth_copy(pr_fhealth *dst, const pr_fhealth *src)
{
    dst->rows = src->rows;
    memcpy(dst->lookups, src->lookups, sizeof(dst->lookups));
    memcpy(dst->oov, src->oov, sizeof(dst->oov));
    for (uint32_t i = 0; i < dst->n_feat; i++)
        dst->missing[i] = i < src->n_feat ? src->missing[i] : 0;
}

void pr_fhealth_add_engine(pr_fhealth *h, const pr_engine *eng)
{
    pr_engine_stats st;
    pr_engine_get_stats(eng, &st);
    h->rows += st.rows_in - st.rows_rejected;
    for (uint32_t c = 0; c < PR_MAX_SPARSE; c++) {
        h->lookups[c] += st.col_values[c];
        h->oov[c] += st.col_oov[c];
    }
    uint64_t *m = malloc(((size_t)h->n_feat + 1) * sizeof(uint64_t));
    uint32_t n = m ? pr_engine_missing(eng, m, h->n_feat) : 0;
    for (uint32_t i = 0; i < h->n_feat && i < n; i++)
        h->missing[i] += m[i];
    free(m);
}

void pr_fhealth_read(pr_fhealth *h, const pr_engine *eng, const pr_fhealth *base)
{
    if (base) {
        pr_fhealth_copy(h, base);
    } else {
        h->rows = 0;
        memset(h->lookups, 0, sizeof(h->lookups));
        memset(h->oov, 0, sizeof(h->oov));
        memset(h->missing, 0, (size_t)h->n_feat * sizeof(uint64_t));
    }
    pr_fhealth_add_engine(h, eng);
}

/* Feature i's name, or NULL when it reads no path (never missing). */
static const char *pr__feat_name(const pr_fhealth *h, uint32_t i)
{
    const pr_pipeline_cfg *pc = h->pc;
    if (pr__declared(h))
        return pc->features.features[i].n_paths ? pc->features.features[i].name : NULL;
    if (i < pc->spec.n_dense)
        return pc->dense_names[i];
    return pc->spec.sparse[i - pc->spec.n_dense].name;
}

static bool pr__has_vocab(const pr_fhealth *h)
{
    return pr_spec_has_op(h->spec, PR_OP_VOCAB);
}

void pr_fhealth_samples(pr_mbuf *mb, int which, const char *pipe, const pr_fhealth *h)
{
    const char *name = pr__fam[which].name;
    if (which == PR_FHEALTH_MISSING) {
        for (uint32_t i = 0; i < h->n_feat; i++) {
            const char *fn = pr__feat_name(h, i);
            pr_label l[] = {{"pipeline", pipe}, {pr__fam[which].label, fn}};
            if (fn)
                pr__metric_sample(mb, name, l, 2, (double)h->missing[i]);
        }
        return;
    }
    for (uint32_t c = 0; pr__has_vocab(h) && c < h->spec->n_sparse; c++) {
        pr_label l[] = {{"pipeline", pipe}, {pr__fam[which].label, h->spec->sparse[c].name}};
        pr__metric_sample(mb, name, l, 2,
                          (double)(which == PR_FHEALTH_OOV ? h->oov[c] : h->lookups[c]));
    }
}

void pr_fhealth_metrics(pr_mbuf *mb, const char *pipe, const pr_fhealth *h)
{
    for (int w = 0; w < PR_FHEALTH__COUNT; w++) {
        if (w != PR_FHEALTH_MISSING && !pr__has_vocab(h))
            continue;
        pr__metric_family(mb, pr__fam[w].name, PR_METRIC_COUNTER, pr__fam[w].help);
        pr_fhealth_samples(mb, w, pipe, h);
    }
}

static void pr__share(pr_mbuf *mb, uint64_t num, uint64_t den)
{
    if (den)
        pr_mbuf_printf(mb, "%.6g", (double)num / (double)den);
    else
        pr_mbuf_puts(mb, "null");
}

void pr_fhealth_json(pr_mbuf *mb, const pr_fhealth *h)
{
    pr_mbuf_printf(mb, "{\"rows\":%llu,\"features\":[", (unsigned long long)h->rows);
    bool first = true;
    for (uint32_t i = 0; i < h->n_feat; i++) {
        const char *fn = pr__feat_name(h, i);
        if (!fn)
            continue;
        pr_mbuf_puts(mb, first ? "{\"name\":" : ",{\"name\":");
        first = false;
        pr_mbuf_json_str(mb, fn);
        pr_mbuf_printf(mb,
                       ",\"missing\":%llu,\"missing_share\":", (unsigned long long)h->missing[i]);
        pr__share(mb, h->missing[i], h->rows);
        pr_mbuf_puts(mb, "}");
    }
    pr_mbuf_puts(mb, "],\"columns\":[");
    for (uint32_t c = 0; pr__has_vocab(h) && c < h->spec->n_sparse; c++) {
        pr_mbuf_puts(mb, c ? ",{\"name\":" : "{\"name\":");
        pr_mbuf_json_str(mb, h->spec->sparse[c].name);
        pr_mbuf_printf(mb, ",\"lookups\":%llu,\"oov\":%llu,\"oov_share\":",
                       (unsigned long long)h->lookups[c], (unsigned long long)h->oov[c]);
        pr__share(mb, h->oov[c], h->lookups[c]);
        pr_mbuf_puts(mb, "}");
    }
    pr_mbuf_puts(mb, "]}");
}
