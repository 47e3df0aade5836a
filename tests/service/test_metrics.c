/*
 * test_metrics.c — the Prometheus text writer and histograms (service/metrics.c):
 * exact exposition lines, label escaping, number formatting, cumulative
 * buckets with +Inf, quantile estimation and snapshot differences.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pr_metrics.h"

static void test_family_and_samples(void **state)
{
    (void)state;
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr__metric_family(&mb, "piperec_x_total", PR_METRIC_COUNTER, "Things.\nMore \\ text.");
    pr_label l[] = {{"pipeline", "a\"b\\c\nd"}, {"partition", "3"}};
    pr__metric_sample(&mb, "piperec_x_total", l, 2, 42);
    pr__metric_sample(&mb, "piperec_x_total", NULL, 0, 0.1);
    pr__metric_sample(&mb, "piperec_x_total", NULL, 0, INFINITY);
    pr__metric_sample(&mb, "piperec_x_total", NULL, 0, NAN);
    assert_int_equal(mb.err, 0);
    assert_string_equal(mb.buf, "# HELP piperec_x_total Things.\\nMore \\\\ text.\n"
                                "# TYPE piperec_x_total counter\n"
                                "piperec_x_total{pipeline=\"a\\\"b\\\\c\\nd\",partition=\"3\"} 42\n"
                                "piperec_x_total 0.1\n"
                                "piperec_x_total +Inf\n"
                                "piperec_x_total NaN\n");
    pr_mbuf_fini(&mb);
}

static void test_histogram_render(void **state)
{
    (void)state;
    pr_histogram h;
    const double b[] = {0.5, 1, 2};
    assert_int_equal(pr_histogram_init(&h, b, 3), 0);
    pr_histogram_observe(&h, 0.25);
    pr_histogram_observe(&h, 1); /* le semantics: lands in the 1 bucket */
    pr_histogram_observe_n(&h, 5, 2);
    pr_hist_snapshot s;
    pr_histogram_snapshot(&h, &s);
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr_label l[] = {{"pipeline", "p"}};
    pr__metric_histogram(&mb, "piperec_h_seconds", l, 1, &s);
    assert_string_equal(mb.buf, "piperec_h_seconds_bucket{pipeline=\"p\",le=\"0.5\"} 1\n"
                                "piperec_h_seconds_bucket{pipeline=\"p\",le=\"1\"} 2\n"
                                "piperec_h_seconds_bucket{pipeline=\"p\",le=\"2\"} 2\n"
                                "piperec_h_seconds_bucket{pipeline=\"p\",le=\"+Inf\"} 4\n"
                                "piperec_h_seconds_sum{pipeline=\"p\"} 11.25\n"
                                "piperec_h_seconds_count{pipeline=\"p\"} 4\n");
    pr_mbuf_fini(&mb);
    pr_histogram_fini(&h);
}

static void test_histogram_bad_bounds(void **state)
{
    (void)state;
    pr_histogram h;
    const double b[] = {1, 1};
    assert_int_equal(pr_histogram_init(&h, b, 2), PR_EINVAL);
    const double c[] = {1, INFINITY};
    assert_int_equal(pr_histogram_init(&h, c, 2), PR_EINVAL);
}

static void test_quantile_and_diff(void **state)
{
    (void)state;
    pr_histogram h;
    const double b[] = {10, 20, 30, 40};
    assert_int_equal(pr_histogram_init(&h, b, 4), 0);
    pr_hist_snapshot empty, s0, s1, d;
    pr_histogram_snapshot(&h, &empty);
    assert_true(isnan(pr_hist_snapshot_quantile(&empty, 0.5)));
    pr_histogram_observe_n(&h, 5, 100); /* all in (0, 10] */
    pr_histogram_snapshot(&h, &s0);
    assert_true(fabs(pr_hist_snapshot_quantile(&s0, 0.5) - 5.0) < 1e-9);
    pr_histogram_observe_n(&h, 25, 100); /* window: all in (20, 30] */
    pr_histogram_snapshot(&h, &s1);
    pr_hist_snapshot_diff(&s1, &s0, &d);
    assert_int_equal(d.count, 100);
    assert_true(fabs(pr_hist_snapshot_quantile(&d, 0.5) - 25.0) < 1e-9);
    assert_true(fabs(pr_hist_snapshot_quantile(&d, 0.99) - 29.9) < 1e-9);
    /* Whole: median at the boundary of the two groups. */
    assert_true(fabs(pr_hist_snapshot_quantile(&s1, 0.5) - 10.0) < 1e-9);
    pr_histogram_observe_n(&h, 1000, 1000); /* +Inf: clamps to the last bound */
    pr_histogram_snapshot(&h, &s1);
    assert_true(fabs(pr_hist_snapshot_quantile(&s1, 0.99) - 40.0) < 1e-9);
    pr_histogram_fini(&h);
}

static void test_mbuf_growth_and_json(void **state)
{
    (void)state;
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    for (int i = 0; i < 10000; i++)
        pr_mbuf_printf(&mb, "%d,", i);
    assert_int_equal(mb.err, 0);
    assert_int_equal(strlen(mb.buf), mb.len);
    pr_mbuf_reset(&mb);
    pr_mbuf_json_str(&mb, "a\"\\\n\x01");
    assert_string_equal(mb.buf, "\"a\\\"\\\\\\n\\u0001\"");
    pr_mbuf_fini(&mb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_family_and_samples),   cmocka_unit_test(test_histogram_render),
        cmocka_unit_test(test_histogram_bad_bounds), cmocka_unit_test(test_quantile_and_diff),
        cmocka_unit_test(test_mbuf_growth_and_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
