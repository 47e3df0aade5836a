/*
 * bench_e2e.c — the whole streaming path: embedded broker -> pr_service
 * (consumer, decode, engine, batcher, trainer sink) -> a trainer client that
 * acks every batch. One JSON line per measurement.
 *
 *   bench_e2e [--format F|all] [--events N] [--partitions P] [--seconds S]
 *             [--batch-events K] [--max-delay-ms D]
 *
 * Per format (criteo_tsv one line per message, protobuf_event, and
 * protobuf_event_batch with K events per message):
 *
 *   1. max rate: N events are produced up front (spread over P partitions so
 *      each stays under the ~5 MB the mock broker keeps), then the service
 *      starts on the default config; the clock runs from the first
 *      acknowledged row to the last (so the ~3 s group join is not counted).
 *   2. the live maximum: the same, with a paced producer thread feeding the
 *      service (it shares the cores here, as the test broker does): the
 *      highest of 100%, 90%, ... 30% of the preloaded rate that is kept up
 *      with (acked >= 97% of the target over 2 s, p99 under 1 s).
 *   3. freshness at 50%, 80% and 90% of the live maximum: the paced producer
 *      runs for S seconds at the target rate while the service consumes; every
 *      batch's emit_time - min(event time) (event time = the Kafka message
 *      timestamp set when produced) is collected exactly at the trainer, and
 *      emit -> ack from the service's histogram. The producer shares the two
 *      cores with the pipeline here, which a real deployment would not.
 *   1b. where that run's time went: CPU seconds per thread kind (e2e_cpu).
 *   4. peak RSS of the process (getrusage) after the format's runs.
 *
 * Not a test: no pass/fail, no assertion on time.
 */
#include <ctype.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "pr_clock.h"
#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "pr_service.h"
#include "pr_trainer_client.h"

typedef struct bench {
    int format;
    uint64_t events;
    int partitions;
    double seconds;
    uint32_t batch_events;
    int64_t max_delay_ms;

    pr_mock_broker *mb;
    pr_config *cfg;
    pr_service *svc;
    pr_gen *gen;
    rd_kafka_t *prod;
    uint64_t next_row;
    uint64_t msgno;

    /* trainer */
    pthread_t trainer;
    atomic_bool trainer_stop;
    _Atomic uint64_t acked_rows;
    _Atomic int64_t first_ack_ns;
    pthread_mutex_t lock;
    double *fresh_ms; /* per batch: emit - min event time */
    size_t n_fresh, cap_fresh;
    atomic_bool record_fresh;

    /* paced producer */
    pthread_t pacer;
    atomic_bool pacer_stop;
    double pace_rate;
    _Atomic uint64_t paced_events;
} bench;

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint32_t per_msg(const bench *b)
{
    return b->format == PR_FORMAT_PROTOBUF_EVENT_BATCH ? b->batch_events : 1;
}

/* One message with events [row, row+n) in b->format; returns its length. */
static size_t make_msg(bench *b, uint64_t row, uint32_t n, uint8_t *buf, size_t cap)
{
    return pr_gen_message(b->gen, b->format, row, n, buf, cap);
}

static void produce_one(bench *b, const uint8_t *buf, size_t len)
{
    int32_t part = (int32_t)(b->msgno++ % (uint64_t)b->partitions);
    for (;;) {
        rd_kafka_resp_err_t e =
            rd_kafka_producev(b->prod, RD_KAFKA_V_TOPIC("bench"), RD_KAFKA_V_PARTITION(part),
                              RD_KAFKA_V_VALUE((void *)buf, len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            if (e)
                fprintf(stderr, "bench_e2e: produce: %s\n", rd_kafka_err2str(e));
            return;
        }
        rd_kafka_poll(b->prod, 5);
    }
}

static void *trainer_main(void *arg)
{
    bench *b = arg;
    char addr[64], err[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)pr_service_trainer_port(b->svc, 0));
    pr_trainer_client *c = NULL;
    while (!atomic_load(&b->trainer_stop)) {
        if (!c) {
            pr_trainer_client_opts o = {.connect = addr, .pipeline = "criteo", .credits = 64};
            if (pr_trainer_client_open(&o, &c, err, sizeof(err))) {
                c = NULL;
                nap_ms(20);
                continue;
            }
        }
        pr_batch_view v;
        int rc = pr_trainer_client_next(c, &v, 50, err, sizeof(err));
        if (rc < 0) {
            pr_trainer_client_close(c);
            c = NULL;
            continue;
        }
        if (rc == 0)
            continue;
        if (atomic_load(&b->record_fresh)) {
            pthread_mutex_lock(&b->lock);
            if (b->n_fresh == b->cap_fresh) {
                b->cap_fresh = b->cap_fresh ? 2 * b->cap_fresh : 4096;
                b->fresh_ms = realloc(b->fresh_ms, b->cap_fresh * sizeof(double));
            }
            b->fresh_ms[b->n_fresh++] = (double)(v.emit_time_ms - v.min_event_time_ms);
            pthread_mutex_unlock(&b->lock);
        }
        uint64_t seq = v.seq, rows = v.rows;
        pr_batch_view_fini(&v);
        pr_trainer_client_ack(c, seq);
        int64_t zero = 0;
        atomic_compare_exchange_strong(&b->first_ack_ns, &zero, pr_mono_ns());
        atomic_fetch_add(&b->acked_rows, rows);
    }
    if (c)
        pr_trainer_client_close(c);
    return NULL;
}

static void *pacer_main(void *arg)
{
    bench *b = arg;
    uint32_t k = per_msg(b);
    size_t cap = pr_gen_pb_max(k) + (size_t)k * PR_GEN_TSV_LINE_MAX + 64;
    uint8_t *buf = malloc(cap);
    int64_t t0 = pr_mono_ns();
    uint64_t sent = 0;
    while (!atomic_load(&b->pacer_stop)) {
        double due = (double)(pr_mono_ns() - t0) / 1e9 * b->pace_rate;
        if ((double)(sent + k) > due) {
            rd_kafka_poll(b->prod, 0);
            nap_ms(1);
            continue;
        }
        while ((double)(sent + k) <= due) {
            size_t len = make_msg(b, b->next_row, k, buf, cap);
            produce_one(b, buf, len);
            b->next_row += k;
            sent += k;
        }
        atomic_store(&b->paced_events, sent);
        rd_kafka_poll(b->prod, 0);
    }
    free(buf);
    return NULL;
}

/* A JSON number, or null for NaN (no measurement). buf holds 32 bytes. */
static const char *jnum(char *buf, double v)
{
    if (isnan(v) || isinf(v))
        return "null";
    snprintf(buf, 32, "%.1f", v);
    return buf;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double q)
{
    if (!n)
        return NAN;
    size_t i = (size_t)ceil(q * (double)n) - 1;
    if (i >= n)
        i = n - 1;
    return v[i];
}

/* One paced window: the producer thread at `rate` events/s, 0.5 s of
 * warm-up, then `seconds` recorded; afterwards the pipeline catches up (up
 * to 20 s) so the next window starts empty. */
typedef struct paced {
    double target, acked_rate;
    size_t batches;
    double p50, p99, max;    /* event -> emit, ms, at the trainer */
    double ack_p50, ack_p99; /* emit -> ack, ms, from the service */
} paced;

static void paced_run(bench *b, double rate, double seconds, paced *r)
{
    pthread_mutex_lock(&b->lock);
    b->n_fresh = 0;
    pthread_mutex_unlock(&b->lock);
    pr_pipeline_stats s0, s1;
    pr_service_pipeline_stats(b->svc, 0, &s0);
    uint64_t acked0 = atomic_load(&b->acked_rows);
    b->pace_rate = rate;
    atomic_store(&b->pacer_stop, false);
    atomic_store(&b->paced_events, 0);
    pthread_create(&b->pacer, NULL, pacer_main, b);
    nap_ms(500);
    atomic_store(&b->record_fresh, true);
    int64_t t0 = pr_mono_ns();
    uint64_t a0 = atomic_load(&b->acked_rows);
    nap_ms((int)(seconds * 1000));
    uint64_t a1 = atomic_load(&b->acked_rows);
    double dt = (double)(pr_mono_ns() - t0) / 1e9;
    atomic_store(&b->record_fresh, false);
    atomic_store(&b->pacer_stop, true);
    pthread_join(b->pacer, NULL);
    rd_kafka_flush(b->prod, 30000);
    uint64_t sent = atomic_load(&b->paced_events);
    int64_t deadline = pr_mono_ns() + 20000000000LL;
    while (atomic_load(&b->acked_rows) < acked0 + sent && pr_mono_ns() < deadline)
        nap_ms(5);
    pr_service_pipeline_stats(b->svc, 0, &s1);
    pr_hist_snapshot ack;
    pr_hist_snapshot_diff(&s1.fresh_ack, &s0.fresh_ack, &ack);
    pthread_mutex_lock(&b->lock);
    qsort(b->fresh_ms, b->n_fresh, sizeof(double), cmp_double);
    r->target = rate;
    r->acked_rate = (double)(a1 - a0) / dt;
    r->batches = b->n_fresh;
    r->p50 = pct(b->fresh_ms, b->n_fresh, 0.5);
    r->p99 = pct(b->fresh_ms, b->n_fresh, 0.99);
    r->max = b->n_fresh ? b->fresh_ms[b->n_fresh - 1] : NAN;
    pthread_mutex_unlock(&b->lock);
    r->ack_p50 = pr_hist_snapshot_quantile(&ack, 0.5) * 1000.0;
    r->ack_p99 = pr_hist_snapshot_quantile(&ack, 0.99) * 1000.0;
}

/* CPU seconds per thread name of this process (/proc/self/task), to show
 * where a run's time goes: the test broker (rdk:mock), librdkafka's client
 * threads, the pipeline thread and its worker, the engine workers, the
 * trainer client. Trailing digits are dropped so that threads of one kind
 * (rdk:broker3, rdk:broker4) add up. Threads that ended are not counted. */
#define TCPU_MAX 48
typedef struct tcpu {
    char name[20];
    double s;
} tcpu;

static size_t thread_cpu(tcpu *t)
{
    size_t n = 0;
    long hz = sysconf(_SC_CLK_TCK);
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[288], name[32] = "", buf[1024];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (!fgets(name, sizeof(name), f))
            name[0] = 0;
        fclose(f);
        size_t nl = strcspn(name, "\n");
        while (nl > 0 && isdigit((unsigned char)name[nl - 1]))
            nl--;
        name[nl] = 0;
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        size_t len = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[len] = 0;
        char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (!p ||
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
            continue;
        size_t i = 0;
        while (i < n && strcmp(t[i].name, name))
            i++;
        if (i == n) {
            if (n == TCPU_MAX)
                continue;
            snprintf(t[n].name, sizeof(t[n].name), "%s", name);
            t[n++].s = 0;
        }
        t[i].s += (double)(ut + st) / (double)hz;
    }
    if (d)
        closedir(d);
    return n;
}

/* Print the CPU each thread kind used between two snapshots, and where the
 * pipeline thread's wall time went meanwhile (pr_pipeline_stats). */
static void print_thread_cpu(const char *format, const tcpu *a, size_t na, const tcpu *b, size_t nb,
                             double secs, const pr_pipeline_stats *s0, const pr_pipeline_stats *s1)
{
    printf("{\"bench\": \"e2e_cpu\", \"format\": \"%s\", \"seconds\": %.3f, "
           "\"cores\": %ld, \"cpu_seconds_by_thread\": {",
           format, secs, sysconf(_SC_NPROCESSORS_ONLN));
    double total = 0;
    for (size_t i = 0; i < nb; i++) {
        double before = 0;
        for (size_t j = 0; j < na; j++)
            if (!strcmp(a[j].name, b[i].name))
                before = a[j].s;
        double d = b[i].s - before;
        total += d;
        printf("%s\"%s\": %.2f", i ? ", " : "", b[i].name, d);
    }
    printf("}, \"cpu_seconds\": %.2f, \"pipeline_thread_wall_s\": {\"poll_no_rows\": %.2f, "
           "\"poll_rows\": %.2f, \"wait_worker\": %.2f}}\n",
           total, (double)(s1->poll_empty_ns - s0->poll_empty_ns) / 1e9,
           (double)(s1->poll_rows_ns - s0->poll_rows_ns) / 1e9,
           (double)(s1->worker_wait_ns - s0->worker_wait_ns) / 1e9);
    fflush(stdout);
}

static int run_format(bench *b)
{
    char err[2048];
    pthread_mutex_init(&b->lock, NULL);
    b->mb = pr_mock_broker_start(b->partitions, "bench", err, sizeof(err));
    if (!b->mb) {
        fprintf(stderr, "bench_e2e: broker: %s\n", err);
        return 1;
    }
    const pr_kv props[] = {
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.messages", "1000000"},
    };
    b->prod = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, pr_mock_broker_bootstrap(b->mb), props,
                                  sizeof(props) / sizeof(props[0]), err, sizeof(err));
    b->next_row = 0;
    b->msgno = 0;

    /* 1. produce N up front */
    uint32_t k = per_msg(b);
    size_t cap = pr_gen_pb_max(k) + (size_t)k * PR_GEN_TSV_LINE_MAX + 64;
    uint8_t *buf = malloc(cap);
    uint64_t bytes = 0;
    while (b->next_row < b->events) {
        size_t len = make_msg(b, b->next_row, k, buf, cap);
        produce_one(b, buf, len);
        bytes += len;
        b->next_row += k;
    }
    free(buf);
    rd_kafka_flush(b->prod, 60000);
    uint64_t n = b->next_row;

    /* the service on the default config */
    if (pr_config_load_default(&b->cfg, err, sizeof(err)))
        goto cfg_fail;
    char delay[32];
    snprintf(delay, sizeof(delay), "%lld", (long long)b->max_delay_ms);
    const char *sets[][2] = {
        {"pipelines[*].source.kafka.properties.bootstrap.servers", pr_mock_broker_bootstrap(b->mb)},
        {"pipelines[*].source.kafka.topics", "[bench]"},
        {"pipelines[*].source.format", pr_source_format_name(b->format)},
        {"pipelines[*].source.kafka.properties.fetch.wait.max.ms", "10"},
        {"pipelines[*].source.kafka.properties.fetch.error.backoff.ms", "10"},
        {"pipelines[*].source.kafka.properties.session.timeout.ms", "4000"},
        {"pipelines[*].sinks.trainer.listen", "127.0.0.1:0"},
        {"pipelines[*].batch.max_delay_ms", delay},
        {"http.enabled", "false"},
        {"log.level", "warn"},
    };
    for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++)
        if (pr_config_set(b->cfg, sets[i][0], sets[i][1], err, sizeof(err)))
            goto cfg_fail;
    pr_service_opts so = {0};
    if (pr_service_new(b->cfg, &so, &b->svc, err, sizeof(err)) ||
        pr_service_start(b->svc, err, sizeof(err)))
        goto cfg_fail;
    atomic_store(&b->acked_rows, 0);
    atomic_store(&b->first_ack_ns, 0);
    atomic_store(&b->trainer_stop, false);
    pthread_create(&b->trainer, NULL, trainer_main, b);

    /* wait for N acked rows, or no progress for 5 s */
    uint64_t last = 0;
    int64_t last_change = pr_mono_ns(), t_end = 0;
    tcpu cpu0[TCPU_MAX], cpu1[TCPU_MAX];
    pr_pipeline_stats ps0, ps1;
    size_t ncpu0 = 0;
    bool have_cpu0 = false;
    for (;;) {
        uint64_t a = atomic_load(&b->acked_rows);
        if (a >= n) {
            t_end = pr_mono_ns();
            break;
        }
        if (a > 0 && !have_cpu0) { /* the clock starts at the first ack */
            ncpu0 = thread_cpu(cpu0);
            pr_service_pipeline_stats(b->svc, 0, &ps0);
            have_cpu0 = true;
        }
        if (a != last) {
            last = a;
            last_change = pr_mono_ns();
        } else if (pr_mono_ns() - last_change > 5000000000LL && a > 0) {
            t_end = last_change;
            break;
        } else if (pr_mono_ns() - last_change > 30000000000LL) {
            break;
        }
        nap_ms(1);
    }
    size_t ncpu1 = thread_cpu(cpu1);
    pr_service_pipeline_stats(b->svc, 0, &ps1);
    uint64_t got = atomic_load(&b->acked_rows);
    double secs = t_end ? (double)(t_end - atomic_load(&b->first_ack_ns)) / 1e9 : NAN;
    double max_rate = secs > 0 ? (double)got / secs : 0;
    printf("{\"bench\": \"e2e_max_rate\", \"format\": \"%s\", \"events_per_message\": %u, "
           "\"partitions\": %d, \"events\": %" PRIu64 ", \"acked\": %" PRIu64
           ", \"seconds\": %.4f, \"events_per_s\": %.0f, \"mb_per_s\": %.1f, "
           "\"engine_threads\": %d, \"backend\": \"cpu\"}\n",
           pr_source_format_name(b->format), k, b->partitions, n, got, secs, max_rate,
           secs > 0 ? (double)bytes * ((double)got / (double)n) / secs / 1e6 : 0.0,
           b->cfg->engine.threads);
    fflush(stdout);
    if (have_cpu0)
        print_thread_cpu(pr_source_format_name(b->format), cpu0, ncpu0, cpu1, ncpu1, secs, &ps0,
                         &ps1);

    /* 2. the maximum rate with the producer running beside the pipeline
     * (it shares the two cores here): the freshness loads are fractions of
     * this live maximum, not of the preloaded one, which no paced producer
     * on the same cores can feed. */
    static const double steps[] = {1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3};
    double live_max = 0;
    for (size_t si = 0; si < sizeof(steps) / sizeof(steps[0]) && max_rate > 0; si++) {
        paced r;
        paced_run(b, max_rate * steps[si], 2.0, &r);
        if (r.acked_rate >= 0.97 * r.target && r.p99 <= 1000.0) {
            live_max = r.acked_rate < r.target ? r.acked_rate : r.target;
            printf("{\"bench\": \"e2e_live_max_rate\", \"format\": \"%s\", "
                   "\"events_per_s\": %.0f, \"fraction_of_preloaded_max\": %.2f}\n",
                   pr_source_format_name(b->format), live_max, live_max / max_rate);
            fflush(stdout);
            break;
        }
    }

    /* 3. freshness under paced load */
    static const double loads[] = {0.5, 0.8, 0.9}; /* 0.8: the freshness point */
    for (size_t li = 0; li < sizeof(loads) / sizeof(loads[0]) && live_max > 0; li++) {
        double load = loads[li];
        paced r;
        paced_run(b, live_max * load, b->seconds, &r);
        char j50[32], j99[32], jmax[32], a50[32], a99[32];
        printf("{\"bench\": \"e2e_freshness\", \"format\": \"%s\", \"load\": %.2f, "
               "\"of\": \"live_max\", \"target_events_per_s\": %.0f, "
               "\"acked_events_per_s\": %.0f, \"batches\": %zu, "
               "\"event_to_emit_p50_ms\": %s, \"event_to_emit_p99_ms\": %s, "
               "\"event_to_emit_max_ms\": %s, \"emit_to_ack_p50_ms\": %s, "
               "\"emit_to_ack_p99_ms\": %s, \"max_delay_ms\": %lld, "
               "\"p99_target_ms\": %lld}\n",
               pr_source_format_name(b->format), load, r.target, r.acked_rate, r.batches,
               jnum(j50, r.p50), jnum(j99, r.p99), jnum(jmax, r.max), jnum(a50, r.ack_p50),
               jnum(a99, r.ack_p99), (long long)b->max_delay_ms, (long long)b->max_delay_ms + 20);
        fflush(stdout);
    }

    pr_service_stop(b->svc);
    atomic_store(&b->trainer_stop, true);
    pthread_join(b->trainer, NULL);
    pr_service_free(b->svc);
    b->svc = NULL;
    pr_config_free(b->cfg);
    b->cfg = NULL;
    rd_kafka_destroy(b->prod);
    pr_mock_broker_stop(b->mb);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"bench\": \"e2e_peak_rss\", \"format\": \"%s\", \"peak_rss_mb\": %.1f}\n",
           pr_source_format_name(b->format), (double)ru.ru_maxrss / 1024.0);
    fflush(stdout);
    return 0;

cfg_fail:
    fprintf(stderr, "bench_e2e: %s\n", err);
    return 1;
}

int main(int argc, char **argv)
{
    bench b = {0};
    b.events = 0;
    b.partitions = 0;
    b.seconds = 4;
    b.batch_events = 64;
    b.max_delay_ms = 100;
    const char *fmt = "all";
    static const struct option opts[] = {
        {"format", required_argument, NULL, 'f'},
        {"events", required_argument, NULL, 'n'},
        {"partitions", required_argument, NULL, 'p'},
        {"seconds", required_argument, NULL, 's'},
        {"batch-events", required_argument, NULL, 'k'},
        {"max-delay-ms", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'f':
            fmt = optarg;
            break;
        case 'n':
            b.events = strtoull(optarg, NULL, 10);
            break;
        case 'p':
            b.partitions = atoi(optarg);
            break;
        case 's':
            b.seconds = atof(optarg);
            break;
        case 'k':
            b.batch_events = (uint32_t)atoi(optarg);
            break;
        case 'd':
            b.max_delay_ms = atoll(optarg);
            break;
        default:
            fprintf(stderr, "usage: bench_e2e [--format F|all] [--events N] [--partitions P] "
                            "[--seconds S] [--batch-events K] [--max-delay-ms D]\n");
            return 2;
        }
    }
    pr_log_set_level(PR_LOG_WARN);
    b.gen = pr_gen_new(1);
    int formats[3], nf = 0;
    if (!strcmp(fmt, "all")) {
        formats[nf++] = PR_FORMAT_CRITEO_TSV;
        formats[nf++] = PR_FORMAT_PROTOBUF_EVENT;
        formats[nf++] = PR_FORMAT_PROTOBUF_EVENT_BATCH;
    } else {
        int f = pr_source_format_from_name(fmt);
        if (f < 0) {
            fprintf(stderr, "bench_e2e: unknown format '%s'\n", fmt);
            return 2;
        }
        formats[nf++] = f;
    }
    int rc = 0;
    for (int i = 0; i < nf; i++) {
        bench r = b;
        r.format = formats[i];
        /* Stay under ~4 MB per partition of the mock broker: TSV lines and
         * single events are ~200-300 bytes. */
        if (!r.events)
            r.events = r.format == PR_FORMAT_PROTOBUF_EVENT_BATCH ? 2000000 : 800000;
        if (!r.partitions)
            r.partitions = (int)((r.events * 300) / (4u << 20)) + 1;
        rc |= run_format(&r);
        free(r.fresh_ms);
    }
    pr_gen_free(b.gen);
    return rc;
}
