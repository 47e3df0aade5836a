/*
 * metrics_process.c — the process-wide families: build, start time and the
 * in-flight limit (metric_families.h). The process_* families of the
 * standard collector are process_metrics.c's and close the page.
 */
#include "metric_families.h"

static void pr__proc_build_info(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    (void)svc;
    pr_label l[] = {{f->labels[0], PR_VERSION}};
    pr__metric_sample(mb, f->name, l, 1, 1);
}

static void pr__proc_start_time(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    pr__metric_sample(mb, f->name, NULL, 0, (double)svc->start_wall_ms / 1000.0);
}

static void pr__proc_inflight_limit(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    pr__metric_sample(mb, f->name, NULL, 0, (double)svc->cfg->limits.max_inflight_bytes);
}

static const pr__family pr__families[] = {
    {10, "piperec_build_info", PR_METRIC_GAUGE, "Build information; the value is always 1.",
     PR__L_VERSION, .proc = pr__proc_build_info},
    {20, "piperec_start_time_seconds", PR_METRIC_GAUGE,
     "Process start time, seconds since the Unix epoch.", PR__L_NONE, .proc = pr__proc_start_time},
    {30, "piperec_inflight_limit_bytes", PR_METRIC_GAUGE,
     "limits.max_inflight_bytes: above it every partition is paused.", PR__L_NONE,
     .proc = pr__proc_inflight_limit},
};

static const pr__metric_module pr__module = {
    .name = "process", .families = pr__families, .n_families = PR__N(pr__families)};

void pr__metrics_process_init(void)
{
    pr__metrics_register(&pr__module);
}
