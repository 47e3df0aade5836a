/*
 * metrics_schemareg.c — the schema registry client's families
 * (metric_families.h): schemas fetched, failed requests by kind, the
 * readers' schema caches (size, evictions). Stats: pr_registry_totals
 * (pr_ingest.h), kept per pipeline's source.schema_registry by the client.
 *
 * Only pipelines with a schema registry have samples, and the families are
 * left off the page when no pipeline has one (the module's `shown`), so a
 * deployment without a registry sees the same page as before.
 */
#include <stddef.h>

#include "metric_families.h"

typedef struct pr__schemareg_snap {
    pr_registry_totals t;
} pr__schemareg_snap;

static bool pr__schemareg_shown(const pr__pipe *p)
{
    return p->cfg->source.schema_registry.enabled;
}

static void pr__schemareg_scrape(pr__pipe *p, void *snap)
{
    pr__schemareg_snap *s = snap;
    pr_registry_totals_of(&p->cfg->source.schema_registry, &s->t); /* zeros before a client */
}

/* One sample per failure kind, zeros included (a fixed, small set). */
static void pr__emit_failures(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__schemareg_snap *s = c->snap;
    for (int k = 0; k < PR_REG_FAIL__COUNT; k++) {
        pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)},
                        {f->labels[1], pr_registry_fail_names[k]}};
        pr__metric_sample(mb, f->name, l, 2, (double)s->t.fail[k]);
    }
}

static void pr__emit_cached(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const pr__schemareg_snap *s = c->snap;
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_sample(mb, f->name, l, 1, (double)(s->t.cached > 0 ? s->t.cached : 0));
}

static const pr__family pr__families[] = {
    {136, "piperec_schema_registry_fetches_total", PR_METRIC_COUNTER,
     "Writer schemas fetched from the schema registry (requests answered 200).", PR__L_PIPE,
     .off = offsetof(pr__schemareg_snap, t.fetches)},
    {137, "piperec_schema_registry_failures_total", PR_METRIC_COUNTER,
     "Schema registry requests that failed, by kind: refused (connection refused), timeout, "
     "5xx, 404 (unknown schema id: its records are rejected), other (DNS, TLS, another status, "
     "an answer without a schema).",
     PR__L_PIPE_AND("kind"), .emit = pr__emit_failures},
    {256, "piperec_schema_registry_cache_schemas", PR_METRIC_GAUGE,
     "Writer schemas (and remembered unknown ids) in the decoders' schema caches.", PR__L_PIPE,
     .emit = pr__emit_cached},
    {257, "piperec_schema_registry_cache_evictions_total", PR_METRIC_COUNTER,
     "Schemas dropped from a full schema cache (source.schema_registry.cache_max), least "
     "recently used first.",
     PR__L_PIPE, .off = offsetof(pr__schemareg_snap, t.cache_evictions)},
};

static const pr__metric_module pr__module = {.name = "schema_registry",
                                             .snap_size = sizeof(pr__schemareg_snap),
                                             .scrape = pr__schemareg_scrape,
                                             .shown = pr__schemareg_shown,
                                             .families = pr__families,
                                             .n_families = PR__N(pr__families)};

void pr__metrics_schemareg_init(void)
{
    pr__metrics_register(&pr__module);
}
