/*
 * metrics_fixture.c — prints a synthetic /metrics exposition built with the
 * same helpers the service uses (every metric type, labels needing escapes,
 * histograms with +Inf), so test_promtool.sh can hand it to `promtool check
 * metrics` without a running pipeline.
 */
#include <stdio.h>

#include "pr_metrics.h"

int main(void)
{
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr__metric_family(&mb, "piperec_build_info", PR_METRIC_GAUGE, "Build information; always 1.");
    pr_label v[] = {{"version", "0.1.0"}};
    pr__metric_sample(&mb, "piperec_build_info", v, 1, 1);
    pr__metric_family(&mb, "piperec_records_in_total", PR_METRIC_COUNTER, "Records decoded.");
    pr_label p[] = {{"pipeline", "criteo"}};
    pr__metric_sample(&mb, "piperec_records_in_total", p, 1, 123456789);
    pr__metric_family(&mb, "piperec_consumer_lag_records", PR_METRIC_GAUGE, "Lag per partition.");
    for (int i = 0; i < 3; i++) {
        char part[8];
        snprintf(part, sizeof(part), "%d", i);
        pr_label l[] = {{"pipeline", "criteo"}, {"topic", "ev\"ents"}, {"partition", part}};
        pr__metric_sample(&mb, "piperec_consumer_lag_records", l, 3, i * 10);
    }
    pr_histogram h;
    pr_histogram_init(&h, pr_buckets_freshness_s, pr_buckets_freshness_n);
    for (int i = 0; i < 1000; i++)
        pr_histogram_observe(&h, i / 1000.0);
    pr_hist_snapshot s;
    pr_histogram_snapshot(&h, &s);
    pr__metric_family(&mb, "piperec_freshness_event_to_emit_seconds", PR_METRIC_HISTOGRAM,
                      "Event time to batch emission.");
    pr__metric_histogram(&mb, "piperec_freshness_event_to_emit_seconds", p, 1, &s);
    pr_histogram_fini(&h);
    fwrite(mb.buf, 1, mb.len, stdout);
    int rc = mb.err ? 1 : 0;
    pr_mbuf_fini(&mb);
    return rc;
}
