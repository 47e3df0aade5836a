/*
 * cmd_demo.c — `piperec demo`: the whole product in one process.
 *
 *   mock broker (ingest's pr_mock_broker, loopback)
 *     <- producer thread: synthetic Criteo-like events (pr_gen) at --rate
 *     -> the streaming service on the embedded default config
 *     -> built-in trainer client (pr_trainer_client) that acks every batch
 *   + HTTP /metrics /healthz /readyz /v1/status
 *
 * A status line per second; at the end (--duration, or Ctrl-C) a summary and
 * an exactly-once check: from the offset ranges of the acknowledged batches,
 * every produced event was acknowledged once (no gap, no duplicate).
 *
 * Default duration: until Ctrl-C when stdin and stdout are terminals, 30 s
 * otherwise (so `make run` in CI or a pipe ends by itself).
 *
 * The mock broker keeps only ~5 MB per partition, so the producer never runs
 * more than a bounded number of events ahead of the pipeline (it slows down
 * instead, and says so in the summary): losing data to the broker's
 * retention would make the exactly-once check meaningless.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_gen.h"
#include "pr_kafka.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "pr_service.h"
#include "pr_trainer_client.h"

#define PR__DEMO_MAX_PARTS       64
#define PR__DEMO_TOPIC           "events"
#define PR__EVENTS_PER_BATCH_MSG 64
/* Payload bytes the producer may run ahead of the pipeline, per partition:
 * well under the ~5 MB the mock broker keeps per partition. */
#define PR__AHEAD_BYTES_PER_PART (3u << 20)

typedef struct pr__range {
    int64_t first, last;
    uint32_t rows;
} pr__range;

typedef struct pr__range_list {
    pr__range *v;
    size_t n, cap;
} pr__range_list;

typedef struct pr__demo {
    /* options */
    double duration_s; /* 0 = until signal */
    double rate;
    int partitions;
    int format; /* pr_source_format */
    const char *backend;
    uint64_t seed;
    bool verbose;
    bool tty;

    pr_mock_broker *broker;
    pr_config *cfg;
    pr_service *svc;
    pr_gen *gen;

    /* producer */
    pthread_t prod_thread;
    atomic_bool prod_stop;
    _Atomic uint64_t produced_events;  /* handed to librdkafka */
    _Atomic uint64_t delivered_events; /* delivery confirmed */
    _Atomic uint64_t failed_msgs;
    _Atomic uint64_t throttled_ms;
    uint64_t part_events[PR__DEMO_MAX_PARTS]; /* delivered, producer thread only */
    int64_t part_msgs[PR__DEMO_MAX_PARTS];
    char prod_err[600];

    /* trainer client */
    pthread_t trainer_thread;
    atomic_bool trainer_stop;
    _Atomic uint64_t acked_rows;
    _Atomic uint64_t acked_batches;
    _Atomic uint64_t reconnects;
    pthread_mutex_t ranges_lock;
    pr__range_list ranges[PR__DEMO_MAX_PARTS];
    uint64_t dup_seqs;
    uint64_t last_seq;
    uint64_t bad_ranges;
    char trainer_err[600];
} pr__demo;

static int64_t pr__mono_ms(void)
{
    return pr_clock_mono_ns(pr_clock_real()) / 1000000;
}

static void pr__sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------- producer */

static void pr__dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr__demo *d = opaque;
    uint64_t events = (uint64_t)(uintptr_t)m->_private;
    if (m->err) {
        atomic_fetch_add(&d->failed_msgs, 1);
        if (!d->prod_err[0])
            snprintf(d->prod_err, sizeof(d->prod_err), "%s", rd_kafka_err2str(m->err));
        return;
    }
    if (m->partition >= 0 && m->partition < PR__DEMO_MAX_PARTS) {
        d->part_events[m->partition] += events;
        if (m->offset + 1 > d->part_msgs[m->partition])
            d->part_msgs[m->partition] = m->offset + 1;
    }
    atomic_fetch_add(&d->delivered_events, events);
}

/* One message for `format` holding events [row, row + n); returns its length. */
static size_t pr__make_message(pr__demo *d, uint64_t row, uint32_t n, uint8_t *buf, size_t cap)
{
    return pr_gen_message(d->gen, d->format, row, n, buf, cap);
}

static void *pr__producer_main(void *arg)
{
    pr__demo *d = arg;
    char err[512];
    /* Idempotent, acks=all, large batches (pr_kafka.h's PR_KAFKA_DEMO_PRODUCER). */
    pr_kv boot = {"bootstrap.servers", pr_mock_broker_bootstrap(d->broker)};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_DEMO_PRODUCER,
                               .defaults = &boot,
                               .n_defaults = 1,
                               .opaque = d,
                               .dr_msg_cb = pr__dr_cb};
    rd_kafka_t *rk;
    if (pr_kafka_client_new(&cc, &rk, err, sizeof(err))) {
        snprintf(d->prod_err, sizeof(d->prod_err), "%s", err);
        return NULL;
    }
    uint32_t per_msg = d->format == PR_FORMAT_PROTOBUF_EVENT_BATCH ? PR__EVENTS_PER_BATCH_MSG : 1;
    size_t cap = pr_gen_pb_max(per_msg) + (size_t)per_msg * PR_GEN_TSV_LINE_MAX + 64;
    uint8_t *buf = malloc(cap);
    uint64_t row = 0;
    uint64_t msgno = 0;
    uint64_t bytes = 0;
    /* Start producing once the pipeline owns its partitions (the first group
     * join takes a few seconds), so the figures show steady state. */
    for (;;) {
        pr_pipeline_stats st;
        pr_service_pipeline_stats(d->svc, 0, &st);
        if (st.assigned_partitions > 0 || atomic_load(&d->prod_stop))
            break;
        rd_kafka_poll(rk, 10);
    }
    int64_t t0 = pr__mono_ms();
    while (buf && !atomic_load(&d->prod_stop)) {
        int64_t now = pr__mono_ms();
        uint64_t due = (uint64_t)((double)(now - t0) / 1000.0 * d->rate);
        /* Never run further ahead of the pipeline than the broker keeps. */
        pr_pipeline_stats st;
        pr_service_pipeline_stats(d->svc, 0, &st);
        double ev_bytes = row ? (double)bytes / (double)row : 300.0;
        uint64_t ahead_cap =
            (uint64_t)((double)d->partitions * PR__AHEAD_BYTES_PER_PART / ev_bytes);
        if (row > st.records_in + st.rejected + ahead_cap) {
            rd_kafka_poll(rk, 1);
            atomic_fetch_add(&d->throttled_ms, 1);
            /* Throttling is not "owed" rate: shift the schedule. */
            t0 += 1;
            continue;
        }
        if (row + per_msg > due) {
            rd_kafka_poll(rk, 1);
            continue;
        }
        /* Produce up to 1 ms worth, then look at the clock again. */
        uint64_t burst = 0;
        while (row + per_msg <= due && burst < 20000 && !atomic_load(&d->prod_stop)) {
            size_t len = pr__make_message(d, row, per_msg, buf, cap);
            if (!len) {
                snprintf(d->prod_err, sizeof(d->prod_err), "cannot encode event %" PRIu64, row);
                atomic_store(&d->prod_stop, true);
                break;
            }
            int32_t part = (int32_t)(msgno % (uint64_t)d->partitions);
            rd_kafka_resp_err_t e;
            for (;;) {
                e = rd_kafka_producev(
                    rk, RD_KAFKA_V_TOPIC(PR__DEMO_TOPIC), RD_KAFKA_V_PARTITION(part),
                    RD_KAFKA_V_VALUE(buf, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                    RD_KAFKA_V_OPAQUE((void *)(uintptr_t)per_msg), RD_KAFKA_V_END);
                if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || atomic_load(&d->prod_stop))
                    break;
                rd_kafka_poll(rk, 5);
            }
            if (e) {
                if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                    snprintf(d->prod_err, sizeof(d->prod_err), "%s", rd_kafka_err2str(e));
                break;
            }
            row += per_msg;
            bytes += len;
            msgno++;
            burst += per_msg;
            atomic_store(&d->produced_events, row);
        }
        rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 10000);
    rd_kafka_destroy(rk);
    free(buf);
    return NULL;
}

/* ---------------------------------------------------------------- trainer */

static void pr__record_batch(pr__demo *d, const pr_batch_view *v)
{
    pthread_mutex_lock(&d->ranges_lock);
    if (v->seq <= d->last_seq)
        d->dup_seqs++;
    else
        d->last_seq = v->seq;
    for (uint32_t i = 0; i < v->n_ranges; i++) {
        const pr_batch_view_range *r = &v->ranges[i];
        if (r->partition < 0 || r->partition >= PR__DEMO_MAX_PARTS) {
            d->bad_ranges++;
            continue;
        }
        pr__range_list *l = &d->ranges[r->partition];
        if (l->n == l->cap) {
            size_t nc = l->cap ? l->cap * 2 : 256;
            pr__range *nv = realloc(l->v, nc * sizeof(*nv));
            if (!nv) {
                d->bad_ranges++;
                continue;
            }
            l->v = nv;
            l->cap = nc;
        }
        l->v[l->n++] = (pr__range){r->first_offset, r->last_offset, r->rows};
    }
    pthread_mutex_unlock(&d->ranges_lock);
}

static void *pr__trainer_main(void *arg)
{
    pr__demo *d = arg;
    char connect[64];
    snprintf(connect, sizeof(connect), "127.0.0.1:%u",
             (unsigned)pr_service_trainer_port(d->svc, 0));
    pr_trainer_client *c = NULL;
    char err[256];
    while (!atomic_load(&d->trainer_stop)) {
        if (!c) {
            pr_trainer_client_opts o = {.connect = connect,
                                        .pipeline = d->cfg->pipelines[0].name,
                                        .credits = 16,
                                        .client_id = "piperec-demo-trainer",
                                        .timeout_ms = 2000};
            if (pr_trainer_client_open(&o, &c, err, sizeof(err))) {
                c = NULL;
                snprintf(d->trainer_err, sizeof(d->trainer_err), "%s", err);
                pr__sleep_ms(100);
                continue;
            }
        }
        pr_batch_view v;
        int rc = pr_trainer_client_next(c, &v, 100, err, sizeof(err));
        if (rc == 1) {
            pr__record_batch(d, &v);
            uint64_t seq = v.seq, rows = v.rows;
            pr_batch_view_fini(&v);
            if (pr_trainer_client_ack(c, seq) == 0) {
                atomic_fetch_add(&d->acked_rows, rows);
                atomic_fetch_add(&d->acked_batches, 1);
            }
        } else if (rc < 0) {
            snprintf(d->trainer_err, sizeof(d->trainer_err), "%s", err);
            pr_trainer_client_close(c);
            c = NULL;
            atomic_fetch_add(&d->reconnects, 1);
        }
    }
    if (c)
        pr_trainer_client_close(c);
    return NULL;
}

/* ---------------------------------------------------------------- check */

static int pr__range_cmp(const void *a, const void *b)
{
    const pr__range *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first ? 1 : 0;
}

/* Every delivered event acknowledged exactly once? Writes a verdict. */
static bool pr__exactly_once(pr__demo *d, char *msg, size_t size)
{
    bool split_ok = d->format == PR_FORMAT_PROTOBUF_EVENT_BATCH;
    uint64_t total_rows = 0, total_events = 0;
    pthread_mutex_lock(&d->ranges_lock);
    bool ok = d->dup_seqs == 0 && d->bad_ranges == 0;
    if (!ok)
        snprintf(msg, size, "%" PRIu64 " repeated sequence numbers, %" PRIu64 " bad ranges",
                 d->dup_seqs, d->bad_ranges);
    for (int p = 0; ok && p < d->partitions; p++) {
        pr__range_list *l = &d->ranges[p];
        qsort(l->v, l->n, sizeof(*l->v), pr__range_cmp);
        uint64_t rows = 0;
        int64_t expect = 0;
        for (size_t i = 0; i < l->n; i++) {
            rows += l->v[i].rows;
            bool contiguous =
                l->v[i].first == expect || (split_ok && i > 0 && l->v[i].first == expect - 1);
            if (!contiguous) {
                snprintf(msg, size,
                         "partition %d: offsets %s at %" PRId64 " (next range starts at %" PRId64
                         ")",
                         p, l->v[i].first > expect ? "missing" : "repeated", expect, l->v[i].first);
                ok = false;
                break;
            }
            expect = l->v[i].last + 1;
        }
        if (!ok)
            break;
        if (expect != d->part_msgs[p] || rows != d->part_events[p]) {
            snprintf(msg, size,
                     "partition %d: %" PRIu64 " events in %" PRId64 " messages produced, %" PRIu64
                     " rows acknowledged up to offset %" PRId64,
                     p, d->part_events[p], d->part_msgs[p], rows, expect - 1);
            ok = false;
        }
        total_rows += rows;
        total_events += d->part_events[p];
    }
    pthread_mutex_unlock(&d->ranges_lock);
    if (ok)
        snprintf(msg, size,
                 "OK: %" PRIu64 " events produced, %" PRIu64 " acknowledged, each exactly once",
                 total_events, total_rows);
    return ok;
}

/* ---------------------------------------------------------------- status */

static void pr__fmt_rate(char *out, size_t size, double v)
{
    if (v >= 1e6)
        snprintf(out, size, "%.2fM", v / 1e6);
    else if (v >= 1e3)
        snprintf(out, size, "%.1fK", v / 1e3);
    else
        snprintf(out, size, "%.0f", v);
}

static void pr__fmt_ms(char *out, size_t size, double s)
{
    if (isnan(s))
        snprintf(out, size, "-");
    else
        snprintf(out, size, "%.0fms", s * 1000.0);
}

typedef struct pr__tick {
    int64_t t_ms;
    uint64_t produced, consumed, batches;
    pr_hist_snapshot fresh;
} pr__tick;

static void pr__status_line(pr__demo *d, pr__tick *prev, int64_t start_ms)
{
    pr_pipeline_stats st;
    pr_service_pipeline_stats(d->svc, 0, &st);
    pr__tick now = {pr__mono_ms(), atomic_load(&d->produced_events), st.records_in,
                    st.batches_emitted, st.fresh_emit};
    double dt = (double)(now.t_ms - prev->t_ms) / 1000.0;
    if (dt <= 0)
        dt = 1;
    pr_hist_snapshot win;
    pr_hist_snapshot_diff(&now.fresh, &prev->fresh, &win);
    char prod[16], cons[16], p50[16], p99[16];
    pr__fmt_rate(prod, sizeof(prod), (double)(now.produced - prev->produced) / dt);
    pr__fmt_rate(cons, sizeof(cons), (double)(now.consumed - prev->consumed) / dt);
    pr__fmt_ms(p50, sizeof(p50), pr_hist_snapshot_quantile(&win, 0.5));
    pr__fmt_ms(p99, sizeof(p99), pr_hist_snapshot_quantile(&win, 0.99));
    char lag[24];
    if (st.lag < 0)
        snprintf(lag, sizeof(lag), "-");
    else
        snprintf(lag, sizeof(lag), "%lld", (long long)st.lag);
    char line[400];
    snprintf(line, sizeof(line),
             "[%5.0fs] produced %7s/s  consumed %7s/s  lag %6s  batches %5.0f/s  "
             "fresh p50 %6s p99 %6s  vocab %8llu  acked %llu  %s%s",
             (double)(now.t_ms - start_ms) / 1000.0, prod, cons, lag,
             (double)(now.batches - prev->batches) / dt, p50, p99,
             (unsigned long long)st.vocab_size_total,
             (unsigned long long)atomic_load(&d->acked_rows), st.backend,
             st.paused_partitions ? "  PAUSED" : "");
    if (d->tty) {
        printf("\r\033[K%s", line);
    } else {
        printf("%s\n", line);
    }
    fflush(stdout);
    *prev = now;
}

/* ---------------------------------------------------------------- main */

static void pr__demo_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec demo [--duration S] [--rate EV/S] [--backend cpu|hls-sim]\n"
            "                    [--partitions N] [--format "
            "criteo_tsv|protobuf_event|protobuf_event_batch]\n"
            "                    [--seed N] [--verbose]\n"
            "\n"
            "Embedded broker + producer of synthetic Criteo events + the pipeline on the\n"
            "default config + a trainer client that acks every batch. Prints a status\n"
            "line every second and, at the end, a summary with an exactly-once check.\n"
            "  --duration S    seconds to run; 0 = until Ctrl-C. Default: until Ctrl-C on a\n"
            "                  terminal, 30 when stdin/stdout is not a terminal\n"
            "  --rate EV/S     events produced per second (default 50000)\n"
            "  --backend B     engine backend (default cpu)\n"
            "  --partitions N  partitions of topic 'events' (default 3, max %d)\n"
            "  --format F      message format (default criteo_tsv, one line per message;\n"
            "                  protobuf_event_batch packs %d events per message)\n"
            "  --seed N        generator seed (default 1)\n"
            "  --verbose       service logs at info level (default: warnings only)\n",
            PR__DEMO_MAX_PARTS, PR__EVENTS_PER_BATCH_MSG);
}

static int pr__demo_args(pr__demo *d, int argc, char **argv)
{
    bool dur_set = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            pr__demo_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--verbose") || !strcmp(a, "-v")) {
            d->verbose = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "piperec demo: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "--duration")) {
            d->duration_s = strtod(v, &end);
            dur_set = true;
            if (*end || d->duration_s < 0) {
                fprintf(stderr, "piperec demo: --duration: expected seconds >= 0, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--rate")) {
            d->rate = strtod(v, &end);
            if (*end || !(d->rate > 0)) {
                fprintf(stderr, "piperec demo: --rate: expected events/s > 0, got '%s'\n", v);
                return -1;
            }
        } else if (!strcmp(a, "--partitions")) {
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > PR__DEMO_MAX_PARTS) {
                fprintf(stderr, "piperec demo: --partitions: expected 1..%d, got '%s'\n",
                        PR__DEMO_MAX_PARTS, v);
                return -1;
            }
            d->partitions = (int)n;
        } else if (!strcmp(a, "--format")) {
            d->format = pr_source_format_from_name(v);
            if (d->format < 0) {
                fprintf(stderr,
                        "piperec demo: --format: expected criteo_tsv, protobuf_event or "
                        "protobuf_event_batch, got '%s'\n",
                        v);
                return -1;
            }
        } else if (!strcmp(a, "--backend")) {
            d->backend = v;
        } else if (!strcmp(a, "--seed")) {
            d->seed = strtoull(v, &end, 10);
            if (*end) {
                fprintf(stderr, "piperec demo: --seed: expected an integer, got '%s'\n", v);
                return -1;
            }
        } else {
            fprintf(stderr, "piperec demo: unknown argument '%s'\n", a);
            return -1;
        }
    }
    if (!dur_set)
        d->duration_s = d->tty ? 0 : 30;
    return 0;
}

static int pr__demo_config(pr__demo *d, char *err, size_t errsz)
{
    int rc = pr_config_load_default(&d->cfg, err, errsz);
    if (rc)
        return rc;
    char http[64];
    if (pr_cli_port_free("127.0.0.1", 9464))
        snprintf(http, sizeof(http), "127.0.0.1:9464");
    else
        snprintf(http, sizeof(http), "127.0.0.1:0");
    const char *sets[][2] = {
        {"pipelines[*].source.kafka.properties.bootstrap.servers",
         pr_mock_broker_bootstrap(d->broker)},
        {"pipelines[*].source.format", pr_source_format_name(d->format)},
        {"pipelines[*].sinks.trainer.listen", "127.0.0.1:0"},
        {"http.listen", http},
        {"engine.backend", d->backend},
        /* Freshness: answer fetches as soon as data is there, and do not
         * back off long after an empty fetch (both default to 500 ms). */
        {"pipelines[*].source.kafka.properties.fetch.wait.max.ms", "10"},
        {"pipelines[*].source.kafka.properties.fetch.error.backoff.ms", "10"},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
        rc = pr_config_set(d->cfg, sets[i][0], sets[i][1], err, errsz);
        if (rc)
            return rc;
    }
    return pr_config_check_streaming(d->cfg, err, errsz);
}

static void pr__demo_free(pr__demo *d)
{
    pr_service_free(d->svc);
    pr_config_free(d->cfg);
    pr_gen_free(d->gen);
    pr_mock_broker_stop(d->broker);
    for (int p = 0; p < PR__DEMO_MAX_PARTS; p++)
        free(d->ranges[p].v);
    pthread_mutex_destroy(&d->ranges_lock);
    free(d);
}

/* Broker, config, generator, then the service, started. Returns 0, or the
 * exit code after printing why. */
static int pr__demo_setup(pr__demo *d)
{
    char err[2048];
    d->broker = pr_mock_broker_start(d->partitions, PR__DEMO_TOPIC, err, sizeof(err));
    if (!d->broker) {
        fprintf(stderr, "piperec demo: broker: %s\n", err);
        return 1;
    }
    if (pr__demo_config(d, err, sizeof(err))) {
        fprintf(stderr, "piperec demo: config: %s\n", err);
        return 2;
    }
    d->gen = pr_gen_new(d->seed);
    if (!d->gen) {
        fprintf(stderr, "piperec demo: out of memory\n");
        return 1;
    }
    pr_service_opts so = {0};
    if (pr_service_new(d->cfg, &so, &d->svc, err, sizeof(err)) ||
        pr_service_start(d->svc, err, sizeof(err))) {
        fprintf(stderr, "piperec demo: %s\n", err);
        return 1;
    }
    return 0;
}

static void pr__demo_banner(pr__demo *d)
{
    const pr_pipeline_cfg *pc = &d->cfg->pipelines[0];
    printf("piperec demo: broker %s, topic '%s' (%d partitions, %s), rate %.0f events/s, "
           "batch %u rows / %lld ms, backend %s\n",
           pr_mock_broker_bootstrap(d->broker), PR__DEMO_TOPIC, d->partitions,
           pr_source_format_name(d->format), d->rate, pc->batch.size,
           (long long)pc->batch.max_delay_ms, d->backend);
    printf("piperec demo: metrics http://127.0.0.1:%u/metrics  status http://127.0.0.1:%u/v1/status"
           "  trainer port %u\n",
           (unsigned)pr_service_http_port(d->svc), (unsigned)pr_service_http_port(d->svc),
           (unsigned)pr_service_trainer_port(d->svc, 0));
    if (d->duration_s > 0)
        printf("piperec demo: running for %.0f s (Ctrl-C stops earlier)\n", d->duration_s);
    else
        printf("piperec demo: running until Ctrl-C\n");
    fflush(stdout);
}

/* A status line per second until --duration, a signal or a service stop.
 * Returns true when a signal ended it. */
static bool pr__demo_watch(pr__demo *d, sigset_t *sigs, int64_t start)
{
    pr__tick prev = {start, 0, 0, 0, {0}};
    pr_pipeline_stats st0;
    pr_service_pipeline_stats(d->svc, 0, &st0);
    prev.fresh = st0.fresh_emit;
    int64_t next_tick = start + 1000;
    bool interrupted = false;
    for (;;) {
        int64_t now = pr__mono_ms();
        if (d->duration_s > 0 && now - start >= (int64_t)(d->duration_s * 1000))
            break;
        if (pr_service_stopping(d->svc))
            break;
        int wait = (int)(next_tick - now);
        if (wait > 0 && pr_cli_wait_signal(sigs, wait) > 0) {
            interrupted = true;
            break;
        }
        if (pr__mono_ms() >= next_tick) {
            pr__status_line(d, &prev, start);
            next_tick += 1000;
        }
    }
    return interrupted;
}

/* Stop the producer, then let the pipeline consume what was delivered (up
 * to 20 s, or until a second signal). Returns the delivered event count. */
static uint64_t pr__demo_drain(pr__demo *d, sigset_t *sigs)
{
    atomic_store(&d->prod_stop, true);
    pthread_join(d->prod_thread, NULL);
    uint64_t delivered = atomic_load(&d->delivered_events);
    int64_t catch_up = pr__mono_ms() + 20000;
    pr_pipeline_stats st;
    for (;;) {
        pr_service_pipeline_stats(d->svc, 0, &st);
        if (st.records_in + st.rejected >= delivered || pr__mono_ms() > catch_up ||
            pr_service_stopping(d->svc))
            break;
        if (pr_cli_wait_signal(sigs, 20) > 0)
            break; /* a second Ctrl-C: stop waiting for the backlog */
    }
    return delivered;
}

/* The end-of-run summary; returns whether the exactly-once check passed. */
static bool pr__demo_summary(pr__demo *d, double secs, uint64_t delivered, int stop_rc)
{
    const pr_pipeline_cfg *pc = &d->cfg->pipelines[0];
    pr_pipeline_stats st;
    pr_service_pipeline_stats(d->svc, 0, &st);
    char check[512];
    bool ok = pr__exactly_once(d, check, sizeof(check));
    printf("\n== piperec demo summary (%.1f s, %s, backend %s) ==\n", secs,
           pr_source_format_name(d->format), st.backend);
    printf("  produced      %" PRIu64 " events (%" PRIu64 " delivered, %" PRIu64
           " messages failed); the producer waited %.1f s for the pipeline (broker retention "
           "guard)\n",
           atomic_load(&d->produced_events), delivered, atomic_load(&d->failed_msgs),
           (double)atomic_load(&d->throttled_ms) / 1000.0);
    printf("  consumed      %llu records in %llu messages (%.0f records/s), %llu rejected\n",
           (unsigned long long)st.records_in, (unsigned long long)st.messages_in,
           secs > 0 ? (double)st.records_in / secs : 0.0, (unsigned long long)st.rejected);
    printf("  batches       %llu emitted, %llu acknowledged; %llu rows out, %" PRIu64
           " rows acknowledged by the trainer (%" PRIu64 " reconnects)\n",
           (unsigned long long)st.batches_emitted, (unsigned long long)st.batches_acked,
           (unsigned long long)st.rows_out, atomic_load(&d->acked_rows),
           atomic_load(&d->reconnects));
    char p50[16], p99[16], a50[16], a99[16];
    pr__fmt_ms(p50, sizeof(p50), pr_hist_snapshot_quantile(&st.fresh_emit, 0.5));
    pr__fmt_ms(p99, sizeof(p99), pr_hist_snapshot_quantile(&st.fresh_emit, 0.99));
    pr__fmt_ms(a50, sizeof(a50), pr_hist_snapshot_quantile(&st.fresh_ack, 0.5));
    pr__fmt_ms(a99, sizeof(a99), pr_hist_snapshot_quantile(&st.fresh_ack, 0.99));
    printf("  freshness     event->emit p50 %s p99 %s; emit->ack p50 %s p99 %s\n", p50, p99, a50,
           a99);
    printf("  vocabulary    %llu indices over %u columns\n",
           (unsigned long long)st.vocab_size_total, pc->spec.n_sparse);
    printf("  backpressure  %llu pauses, peak in flight %llu bytes\n",
           (unsigned long long)st.pauses, (unsigned long long)st.inflight_peak_bytes);
    if (d->prod_err[0])
        printf("  producer      last error: %s\n", d->prod_err);
    if (stop_rc && stop_rc != PR_ETIMEDOUT)
        printf("  service       stopped with: %s\n", pr_strerror(stop_rc));
    printf("  exactly-once  %s\n", check);
    return ok;
}

int pr_cli_cmd_demo(int argc, char **argv)
{
    pr__demo *d = calloc(1, sizeof(*d));
    if (!d)
        return 1;
    d->rate = 50000;
    d->partitions = 3;
    d->format = PR_FORMAT_CRITEO_TSV;
    d->backend = "cpu";
    d->seed = 1;
    d->tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    pthread_mutex_init(&d->ranges_lock, NULL);

    int a = pr__demo_args(d, argc, argv);
    if (a) {
        free(d);
        return a > 0 ? 0 : 2;
    }
    pr_log_set_level(d->verbose ? PR_LOG_INFO : PR_LOG_WARN);

    sigset_t sigs;
    pr_cli_block_signals(&sigs);

    int exit_code = pr__demo_setup(d);
    if (exit_code)
        goto out;
    pr__demo_banner(d);
    if (pthread_create(&d->trainer_thread, NULL, pr__trainer_main, d) ||
        pthread_create(&d->prod_thread, NULL, pr__producer_main, d)) {
        fprintf(stderr, "piperec demo: cannot start threads\n");
        pr_service_free(d->svc);
        d->svc = NULL;
        exit_code = 1;
        goto out;
    }

    int64_t start = pr__mono_ms();
    bool interrupted = pr__demo_watch(d, &sigs, start);
    if (d->tty)
        printf("\n");
    printf("piperec demo: %s; stopping the producer and draining\n",
           interrupted ? "interrupted" : "time is up");
    fflush(stdout);

    /* Producer first, then let the pipeline consume what was delivered. */
    uint64_t delivered = pr__demo_drain(d, &sigs);
    int64_t end = pr__mono_ms();
    int src = pr_service_stop(d->svc); /* emits partial batches, waits for acks, commits */
    atomic_store(&d->trainer_stop, true);
    pthread_join(d->trainer_thread, NULL);
    exit_code = pr__demo_summary(d, (double)(end - start) / 1000.0, delivered, src) ? 0 : 1;

out:
    pr__demo_free(d);
    return exit_code;
}
