/*
 * metrics_registry.c — the /metrics page (pr_service_render_metrics): the
 * families the metric modules registered (metric_families.h), in page order.
 *
 * The registry knows no component's stats: per scrape it asks every module
 * for one snapshot of each pipeline, then writes every family (HELP and
 * TYPE once, then each pipeline's samples), then the process_* families.
 * Registration runs once, on the first render (pthread_once), by calling
 * each owner's registration function; the ranks give the order.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "metric_families.h"
#include "pr_clock.h"
#include "pr_log.h"

#define PR__MAX_MODULES  16
#define PR__MAX_FAMILIES 128

static const pr__metric_module *pr__modules[PR__MAX_MODULES];
static size_t pr__n_modules;

/* Every registered family in rank order, with its module's index. */
static struct pr__slot {
    const pr__family *f;
    size_t module;
} pr__slots[PR__MAX_FAMILIES];
static size_t pr__n_slots;

static pthread_once_t pr__once = PTHREAD_ONCE_INIT;

void pr__metrics_register(const pr__metric_module *m)
{
    if (pr__n_modules == PR__MAX_MODULES || pr__n_slots + m->n_families > PR__MAX_FAMILIES) {
        pr_err("metrics: module %s not registered: raise PR__MAX_MODULES/FAMILIES", m->name);
        return;
    }
    size_t mi = pr__n_modules++;
    pr__modules[mi] = m;
    for (size_t k = 0; k < m->n_families; k++) {
        /* Insertion by rank: a few dozen families, once per process. */
        size_t at = pr__n_slots;
        while (at > 0 && pr__slots[at - 1].f->rank > m->families[k].rank) {
            pr__slots[at] = pr__slots[at - 1];
            at--;
        }
        if (at > 0 && pr__slots[at - 1].f->rank == m->families[k].rank)
            pr_err("metrics: %s and %s share rank %d", pr__slots[at - 1].f->name,
                   m->families[k].name, m->families[k].rank);
        pr__slots[at] = (struct pr__slot){&m->families[k], mi};
        pr__n_slots++;
    }
}

/* The owners' registration calls. */
static void pr__metrics_init(void)
{
    static void (*const inits[])(void) = {
        pr__metrics_process_init, pr__metrics_pipeline_init,  pr__metrics_consumer_init,
        pr__metrics_batcher_init, pr__metrics_engine_init,    pr__metrics_vocablog_init,
        pr__metrics_sinks_init,   pr__metrics_schemareg_init,
    };
    for (size_t i = 0; i < PR__N(inits); i++)
        inits[i]();
}

const char *pr__metric_pipe_name(const pr__metric_ctx *c)
{
    return c->p->cfg->name;
}

double pr__metric_scaled(const pr__family *f, double v)
{
    return f->div != 0 ? v / f->div : v;
}

/* The default emitter: one {pipeline} sample read from snapshot + off. */
static void pr__emit_value(pr_mbuf *mb, const pr__family *f, const pr__metric_ctx *c)
{
    const char *at = (const char *)c->snap + f->off;
    double v = f->kind == PR__V_U32 ? *(const uint32_t *)at : (double)*(const uint64_t *)at;
    pr_label l[] = {{f->labels[0], pr__metric_pipe_name(c)}};
    pr__metric_sample(mb, f->name, l, 1, pr__metric_scaled(f, v));
}

/* Snapshots of every module for every pipeline: snaps[i * n_modules + m]. */
static void **pr__scrape_all(pr_service *svc)
{
    size_t n = svc->n_pipes * pr__n_modules;
    void **snaps = calloc(n ? n : 1, sizeof(*snaps));
    if (!snaps)
        return NULL;
    for (size_t i = 0; i < svc->n_pipes; i++)
        for (size_t m = 0; m < pr__n_modules; m++) {
            const pr__metric_module *mod = pr__modules[m];
            if (!mod->snap_size || (mod->shown && !mod->shown(&svc->pipes[i])))
                continue;
            void *s = calloc(1, mod->snap_size);
            if (!s)
                continue; /* that module's samples of this pipeline are left out */
            mod->scrape(&svc->pipes[i], s);
            snaps[i * pr__n_modules + m] = s;
        }
    return snaps;
}

static void pr__release_all(pr_service *svc, void **snaps)
{
    for (size_t i = 0; i < svc->n_pipes; i++)
        for (size_t m = 0; m < pr__n_modules; m++) {
            void *s = snaps[i * pr__n_modules + m];
            if (s && pr__modules[m]->release)
                pr__modules[m]->release(s);
            free(s);
        }
    free(snaps);
}

/* Whether some pipeline has a snapshot of module m (a module with `shown`). */
static bool pr__any_shown(const pr_service *svc, size_t m, void **snaps)
{
    for (size_t i = 0; i < svc->n_pipes; i++)
        if (snaps[i * pr__n_modules + m])
            return true;
    return false;
}

void pr_service_render_metrics(pr_service *svc, pr_mbuf *mb)
{
    pthread_once(&pr__once, pr__metrics_init);
    void **snaps = pr__scrape_all(svc);
    if (!snaps) {
        mb->err = PR_ENOMEM;
        return;
    }
    int64_t now = pr_mono_ns();
    for (size_t k = 0; k < pr__n_slots; k++) {
        const pr__family *f = pr__slots[k].f;
        size_t m = pr__slots[k].module;
        if (pr__modules[m]->shown && !pr__any_shown(svc, m, snaps))
            continue;
        pr__metric_family(mb, f->name, f->type, f->help);
        if (f->proc) {
            f->proc(mb, f, svc);
            continue;
        }
        for (size_t i = 0; i < svc->n_pipes; i++) {
            pr__metric_ctx c = {&svc->pipes[i], now, snaps[i * pr__n_modules + m]};
            if (pr__modules[m]->snap_size && !c.snap)
                continue;
            (f->emit ? f->emit : pr__emit_value)(mb, f, &c);
        }
    }
    pr__process_metrics(mb); /* process_* families, the standard collector's names */
    pr__release_all(svc, snaps);
}
