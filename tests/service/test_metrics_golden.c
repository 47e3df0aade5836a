/*
 * test_metrics_golden.c — the /metrics page of a running pipeline, byte for
 * byte, against a checked-in golden file (tests/service/metrics_golden.txt).
 *
 * Why: the page is an interface (dashboards, alerts, promtool): family names,
 * HELP, TYPE, label names and order, sample order. Refactoring who renders
 * which family (issue 18 item 3: each component registers its own) must not
 * move a byte. The test runs one pipeline on the in-process mock broker with
 * known traffic (generated rows, malformed lines, bad hex values) into every
 * sink (trainer, kafka, files) with hot sets, a state dir and a dead-letter
 * topic, so that every emitter writes samples, then renders the page after
 * the drain, when every counter is final.
 *
 * Normalised: only values that vary with time or scheduling (start time,
 * loop age, timing histograms, engine seconds and block counts, in-flight
 * peaks, refusals and I/O wake-ups, process_* figures; while running, the
 * consumer's positions) and the build version label; those become "<v>".
 * Hot-set coverage ratios are compared to 6 significant digits (their last
 * bits follow the block boundaries). Everything else must match.
 *
 * PR_GOLDEN_UPDATE=1 rewrites the golden file (then review the diff).
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <librdkafka/rdkafka.h>

#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_metrics.h"
#include "pr_service.h"
#include "pr_trainer_client.h"

#define GOLDEN  PR_SOURCE_DIR "/tests/service/metrics_golden.txt"
#define N_ROWS  2000 /* good rows: 4 full batches of 500 */
#define N_PARTS 1    /* one read order: the hot-set sketches' sums are exact */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void rm_rf(const char *path)
{
    DIR *dir = opendir(path);
    if (!dir) {
        unlink(path);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dir))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        rm_rf(p);
    }
    closedir(dir);
    rmdir(path);
}

static void produce(rd_kafka_t *rk, const char *topic, int32_t part, const char *buf, size_t len)
{
    for (;;) {
        rd_kafka_resp_err_t e =
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(part),
                              RD_KAFKA_V_VALUE((void *)buf, len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            assert_int_equal(e, 0);
            return;
        }
        rd_kafka_poll(rk, 10);
    }
}

/* Good rows round robin over the partitions, then per partition one line
 * with too few fields and one with a non-hex sparse value. */
static void produce_traffic(const char *bootstrap)
{
    char err[512];
    rd_kafka_conf_t *c = rd_kafka_conf_new();
    assert_int_equal(rd_kafka_conf_set(c, "bootstrap.servers", bootstrap, err, sizeof(err)), 0);
    assert_int_equal(rd_kafka_conf_set(c, "enable.idempotence", "true", err, sizeof(err)), 0);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, c, err, sizeof(err));
    assert_non_null(rk);
    pr_gen *g = pr_gen_new(7);
    char line[PR_GEN_TSV_LINE_MAX];
    for (uint64_t i = 0; i < N_ROWS; i++) {
        uint64_t got = 0;
        size_t len = pr_gen_tsv(g, i, 1, line, sizeof(line), &got);
        assert_int_equal(got, 1);
        if (len && line[len - 1] == '\n')
            len--;
        produce(rk, "golden", (int32_t)(i % N_PARTS), line, len);
    }
    for (int32_t p = 0; p < N_PARTS; p++) {
        const char *short_line = "1\t2\t3";
        produce(rk, "golden", p, short_line, strlen(short_line));
        uint64_t got = 0;
        size_t len = pr_gen_tsv(g, 0, 1, line, sizeof(line), &got);
        if (len && line[len - 1] == '\n')
            line[--len] = 0;
        /* The last field (C26) becomes non-hex. */
        char *tab = strrchr(line, '\t');
        assert_non_null(tab);
        snprintf(tab + 1, sizeof(line) - (size_t)(tab + 1 - line), "zzzz");
        produce(rk, "golden", p, line, strlen(line));
    }
    assert_int_equal(rd_kafka_flush(rk, 20000), 0);
    rd_kafka_destroy(rk);
    pr_gen_free(g);
}

typedef struct acker {
    pthread_t th;
    uint16_t port;
    _Atomic bool stop;
    _Atomic uint64_t rows;
} acker;

/* A trainer that acknowledges every batch. */
static void *acker_main(void *arg)
{
    acker *a = arg;
    char addr[64], err[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)a->port);
    pr_trainer_client *cl = NULL;
    while (!atomic_load(&a->stop)) {
        if (!cl) {
            pr_trainer_client_opts o = {
                .connect = addr, .pipeline = "golden", .credits = 8, .timeout_ms = 2000};
            if (pr_trainer_client_open(&o, &cl, err, sizeof(err))) {
                cl = NULL;
                nap_ms(20);
                continue;
            }
        }
        pr_batch_view v;
        int rc = pr_trainer_client_next(cl, &v, 20, err, sizeof(err));
        if (rc < 0) {
            pr_trainer_client_close(cl);
            cl = NULL;
            continue;
        }
        if (rc == 0)
            continue;
        uint64_t seq = v.seq, rows = v.rows;
        pr_batch_view_fini(&v);
        assert_int_equal(pr_trainer_client_ack(cl, seq), 0);
        atomic_fetch_add(&a->rows, rows);
    }
    if (cl)
        pr_trainer_client_close(cl);
    return NULL;
}

static pr_config *golden_config(const char *bootstrap, const char *dir)
{
    char y[4096];
    snprintf(y, sizeof(y),
             "pipelines:\n"
             "  - name: golden\n"
             "    source:\n"
             "      kafka:\n"
             "        topics: [golden]\n"
             "        group.id: g-golden\n"
             "        properties:\n"
             "          bootstrap.servers: \"%s\"\n"
             "          auto.offset.reset: earliest\n"
             "          fetch.wait.max.ms: 10\n"
             "          session.timeout.ms: 4000\n"
             "          heartbeat.interval.ms: 300\n"
             "      format: criteo_tsv\n"
             "      dead_letter_topic: golden-dlq\n"
             "    batch: { size: 500, max_delay_ms: 3600000 }\n"
             "    state: { dir: \"%s/state\", checkpoint_interval_s: 3600 }\n"
             "    sinks:\n"
             "      trainer: { listen: \"127.0.0.1:0\" }\n"
             "      kafka: { topic: golden-out }\n"
             "      files: { dir: \"%s/files\", roll_batches: 2 }\n"
             /* A half-life far beyond the traffic: the sketch's decay per
              * block (so its dependence on block boundaries) is negligible. */
             "hot: { top_k: 1000, half_life_records: 1000000000000 }\n"
             "http: { enabled: false }\n"
             "engine: { backend: cpu, threads: 1 }\n"
             "limits: { max_inflight_bytes: 256MiB }\n"
             "log: { level: warn }\n",
             bootstrap, dir, dir);
    pr_config *cfg = NULL;
    char err[2048];
    if (pr_config_load_string(y, strlen(y), "<golden>", &cfg, err, sizeof(err)))
        fail_msg("config: %s\n%s", err, y);
    if (pr_config_check_streaming(cfg, err, sizeof(err)))
        fail_msg("config: %s", err);
    return cfg;
}

/* Families (by prefix of the sample name) whose values follow the clock or
 * the scheduler, not the traffic. */
static const char *const varying[] = {
    "piperec_start_time_seconds",
    "piperec_loop_age_seconds",
    "piperec_inflight_peak_bytes",
    "piperec_batch_wait_seconds",
    "piperec_freshness_event_to_emit_seconds",
    "piperec_freshness_emit_to_ack_seconds",
    "piperec_engine_operator_seconds_total",
    "piperec_engine_blocks_total",
    "piperec_sink_refused_total",
    "piperec_trainer_io_wakeups_total",
    "process_",
};

/* While the pipeline runs, also the consumer's positions and commits. */
static const char *const varying_running[] = {
    "piperec_consumer_",
};

/* Families whose values are exact up to rounding that follows the block
 * boundaries (the hot-set sketch decays per block): compared to 6 digits. */
static const char *const rounded[] = {
    "piperec_hot_coverage_ratio",
};

static bool is_rounded(const char *line)
{
    for (size_t i = 0; i < sizeof(rounded) / sizeof(rounded[0]); i++)
        if (!strncmp(line, rounded[i], strlen(rounded[i])))
            return true;
    return false;
}

static bool is_varying(const char *line, bool running)
{
    for (size_t i = 0; running && i < sizeof(varying_running) / sizeof(varying_running[0]); i++)
        if (!strncmp(line, varying_running[i], strlen(varying_running[i])))
            return true;
    for (size_t i = 0; i < sizeof(varying) / sizeof(varying[0]); i++)
        if (!strncmp(line, varying[i], strlen(varying[i])))
            return true;
    return false;
}

/* Normalise the page line by line into out. */
static void normalise(const char *page, bool running, pr_mbuf *out)
{
    const char *s = page;
    while (*s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        char line[2048];
        snprintf(line, sizeof(line), "%.*s", (int)len, s);
        if (line[0] != '#' && !strncmp(line, "piperec_build_info{version=\"", 28)) {
            pr_mbuf_puts(out, "piperec_build_info{version=\"<v>\"} 1\n");
        } else if (line[0] != '#' && is_varying(line, running)) {
            char *sp = strrchr(line, ' ');
            assert_non_null(sp);
            *sp = 0;
            pr_mbuf_printf(out, "%s <v>\n", line);
        } else if (line[0] != '#' && is_rounded(line)) {
            char *sp = strrchr(line, ' ');
            assert_non_null(sp);
            *sp = 0;
            pr_mbuf_printf(out, "%s %.6g\n", line, strtod(sp + 1, NULL));
        } else {
            pr_mbuf_printf(out, "%s\n", line);
        }
        s += len + (nl ? 1 : 0);
    }
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    return b;
}

/* The first differing line, for a readable failure. */
static void report_diff(const char *want, const char *got)
{
    int line = 1;
    while (*want && *got && *want == *got) {
        if (*want == '\n')
            line++;
        want++;
        got++;
    }
    const char *we = strchr(want, '\n'), *ge = strchr(got, '\n');
    fail_msg("metrics differ from %s at line %d:\n  want: %.*s\n  got:  %.*s", GOLDEN, line,
             (int)(we ? we - want : (long)strlen(want)), want,
             (int)(ge ? ge - got : (long)strlen(got)), got);
}

/* The running page is taken once the traffic has gone through: every sink
 * acknowledged every batch (the sinks' figures come from a cache the
 * pipeline thread refreshes each turn) and the per-partition families have
 * their samples (the high watermarks are known). */
static bool settled(const char *page)
{
    static const char *const want[] = {
        "piperec_batches_acked_total{pipeline=\"golden\"} 4\n",
        "piperec_unacked_batches{pipeline=\"golden\"} 0\n",
        "piperec_sink_batches_acked_total{pipeline=\"golden\",sink=\"trainer\"} 4\n",
        "piperec_sink_batches_acked_total{pipeline=\"golden\",sink=\"kafka\"} 4\n",
        "piperec_sink_batches_acked_total{pipeline=\"golden\",sink=\"files\"} 4\n",
        "piperec_sink_queued_batches{pipeline=\"golden\",sink=\"trainer\"} 0\n",
        "piperec_sink_queued_batches{pipeline=\"golden\",sink=\"kafka\"} 0\n",
        "piperec_sink_queued_batches{pipeline=\"golden\",sink=\"files\"} 0\n",
        "piperec_dead_letters_pending{pipeline=\"golden\"} 0\n",
        "piperec_consumer_high_watermark_offset{",
        "piperec_consumer_committed_offset{",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(page, want[i]))
            return false;
    return true;
}

static void test_metrics_golden(void **state)
{
    (void)state;
    char err[512];
    pr_mock_broker *mb = pr_mock_broker_start(1, "", err, sizeof(err));
    assert_non_null(mb);
    const char *bs = pr_mock_broker_bootstrap(mb);
    assert_int_equal(pr_mock_broker_create_topic(mb, "golden", N_PARTS, err, sizeof(err)), 0);
    assert_int_equal(pr_mock_broker_create_topic(mb, "golden-dlq", 1, err, sizeof(err)), 0);
    assert_int_equal(pr_mock_broker_create_topic(mb, "golden-out", 1, err, sizeof(err)), 0);
    char dir[] = "/tmp/pr-golden-XXXXXX";
    assert_non_null(mkdtemp(dir));

    pr_config *cfg = golden_config(bs, dir);
    /* A manual clock: no batch deadline fires, so batches are cut by size
     * (and the rest by the drain's flush), whatever the machine's speed. */
    pr_manual_clock mc;
    pr_manual_clock_init(&mc, 1700000000000LL);
    pr_service_opts o = {.clock = &mc.clock, .drain_timeout_ms = 10000};
    pr_service *svc = NULL;
    if (pr_service_new(cfg, &o, &svc, err, sizeof(err)) || pr_service_start(svc, err, sizeof(err)))
        fail_msg("service: %s", err);
    acker a = {.port = pr_service_trainer_port(svc, 0)};
    assert_int_equal(pthread_create(&a.th, NULL, acker_main, &a), 0);

    produce_traffic(bs);
    int64_t deadline = now_ms() + 60000;
    while (atomic_load(&a.rows) < N_ROWS) {
        if (now_ms() > deadline)
            fail_msg("timed out: %llu of %d rows acknowledged",
                     (unsigned long long)atomic_load(&a.rows), N_ROWS);
        nap_ms(5);
    }
    /* The rejects come after the last good row of each partition: wait
     * until the consumer has seen every message. */
    for (;;) {
        pr_pipeline_stats st;
        assert_int_equal(pr_service_pipeline_stats(svc, 0, &st), 0);
        if (st.messages_in == N_ROWS + 2 * N_PARTS && st.rejected == 2 * N_PARTS)
            break;
        if (now_ms() > deadline)
            fail_msg("timed out: %llu messages, %llu rejected", (unsigned long long)st.messages_in,
                     (unsigned long long)st.rejected);
        nap_ms(5);
    }
    /* The page while running (per-partition families have samples once
     * the high watermarks are known), then after the drain. */
    pr_mbuf page, norm;
    pr_mbuf_init(&page);
    pr_mbuf_init(&norm);
    for (;;) {
        pr_mbuf_reset(&page);
        pr_service_render_metrics(svc, &page);
        if (settled(page.buf))
            break;
        if (now_ms() > deadline)
            fail_msg("timed out waiting for the page to settle:\n%s", page.buf);
        nap_ms(5);
    }
    assert_int_equal(page.err, 0);
    pr_mbuf_puts(&norm, "# --- running\n");
    normalise(page.buf, true, &norm);
    assert_int_equal(pr_service_stop(svc), 0);
    pr_mbuf_reset(&page);
    pr_service_render_metrics(svc, &page);
    assert_int_equal(page.err, 0);
    pr_mbuf_puts(&norm, "# --- stopped\n");
    normalise(page.buf, false, &norm);
    assert_int_equal(norm.err, 0);

    if (getenv("PR_GOLDEN_UPDATE")) {
        FILE *f = fopen(GOLDEN, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(norm.buf, 1, norm.len, f), norm.len);
        fclose(f);
    } else {
        char *want = slurp(GOLDEN);
        if (!want)
            fail_msg("%s missing (PR_GOLDEN_UPDATE=1 writes it)", GOLDEN);
        if (strcmp(want, norm.buf))
            report_diff(want, norm.buf);
        free(want);
    }
    pr_mbuf_fini(&page);
    pr_mbuf_fini(&norm);

    atomic_store(&a.stop, true);
    pthread_join(a.th, NULL);
    pr_service_free(svc);
    pr_config_free(cfg);
    pr_mock_broker_stop(mb);
    rm_rf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_golden),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
