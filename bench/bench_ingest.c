/*
 * bench_ingest.c — Kafka ingest throughput: events/s consumed AND decoded
 * into pr_blocks by pr_consumer through the embedded broker (librdkafka's
 * mock cluster, in-process), for each source format:
 *
 *   criteo_tsv            one TSV line per message
 *   protobuf_event        one Event per message
 *   protobuf_event_batch  --batch events (default 256) per message
 *
 *   bench_ingest [--events N] [--rounds R] [--batch K] [--partitions P] [--format F]
 *
 * Prints one JSON line per format: the median (and best) events/s over R
 * rounds. Data is synthetic (pr_gen.h, seed 1). Each round produces N events
 * (default 100K, spread over enough partitions to stay well under the mock's
 * ~5 MB per partition), then one long-lived consumer reads them; the clock
 * runs from the round's first decoded row to its last, so the group join
 * (~3 s on the mock) and the producing are not counted. idle_polls counts
 * polls that found nothing (waiting on the broker). No engine: this is the
 * ingest stage alone.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_clock.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_log.h"

typedef struct bench_cfg {
    uint64_t events; /* per round */
    int rounds;
    uint32_t batch;
    int partitions;
} bench_cfg;

/* Read a varint; returns bytes used. */
static size_t get_varint(const uint8_t *p, uint64_t *v)
{
    size_t i = 0;
    *v = 0;
    for (int sh = 0; sh < 64; sh += 7) {
        uint8_t b = p[i++];
        *v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80))
            break;
    }
    return i;
}

static int produce_all(const char *bootstrap, const char *topic, pr_msg_format fmt,
                       const bench_cfg *cfg, uint64_t row0, uint64_t *msgs_out, uint64_t *bytes_out)
{
    char errstr[512];
    const pr_kv props[] = {
        {"linger.ms", "10"},
        {"batch.num.messages", "10000"},
        {"batch.size", getenv("BENCH_BATCH_SIZE") ? getenv("BENCH_BATCH_SIZE") : "1000000"},
        {"queue.buffering.max.kbytes", "1048576"},
    };
    rd_kafka_t *rk = pr_kafka_new_simple(PR_KAFKA_PLAIN_PRODUCER, bootstrap, props,
                                         sizeof(props) / sizeof(props[0]), errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "bench_ingest: %s\n", errstr);
        return -1;
    }
    pr_gen *g = pr_gen_new(1);
    uint32_t per = fmt == PR_MSG_PROTOBUF_EVENT_BATCH ? cfg->batch : 1;
    size_t cap = pr_gen_pb_max(per) + PR_GEN_TSV_LINE_MAX * 2;
    uint8_t *buf = malloc(cap);
    uint64_t msgs = 0, bytes = 0;
    for (uint64_t r = 0; r < cfg->events; r += per) {
        uint32_t n = (uint32_t)(cfg->events - r < per ? cfg->events - r : per);
        const uint8_t *payload;
        size_t len;
        if (fmt == PR_MSG_CRITEO_TSV) {
            len = pr_gen_tsv(g, row0 + r, 1, (char *)buf, cap, NULL);
            while (len && buf[len - 1] == '\n')
                len--;
            payload = buf;
        } else {
            /* pr_gen_pb_batch: varint length + EventBatch. */
            pr_gen_pb_batch(g, row0 + r, n, buf, cap);
            uint64_t blen;
            size_t hl = get_varint(buf, &blen);
            payload = buf + hl;
            len = (size_t)blen;
            if (fmt == PR_MSG_PROTOBUF_EVENT) {
                /* One event: strip the EventBatch.events tag and length. */
                uint64_t elen;
                size_t el = get_varint(payload + 1, &elen);
                payload += 1 + el;
                len = (size_t)elen;
            }
        }
        for (;;) {
            rd_kafka_resp_err_t err =
                rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(topic),
                                  RD_KAFKA_V_PARTITION((int32_t)(msgs % (uint64_t)cfg->partitions)),
                                  RD_KAFKA_V_VALUE((void *)payload, len),
                                  RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
            if (!err)
                break;
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                fprintf(stderr, "bench_ingest: produce: %s\n", rd_kafka_err2str(err));
                return -1;
            }
            rd_kafka_poll(rk, 10);
        }
        msgs++;
        bytes += len;
        rd_kafka_poll(rk, 0);
    }
    int rc = rd_kafka_flush(rk, 60000) ? -1 : 0;
    free(buf);
    pr_gen_free(g);
    rd_kafka_destroy(rk);
    *msgs_out = msgs;
    *bytes_out = bytes;
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One consumer per format; each round produces cfg->events new events and
 * times their consumption (the consumer has caught up between rounds, so the
 * mock's per-partition retention is never reached). */
static int run_format(pr_mock_broker *mb, pr_msg_format fmt, const bench_cfg *cfg)
{
    char errstr[512], topic[64], group[64];
    snprintf(topic, sizeof(topic), "bench-%s", pr_msg_format_name(fmt));
    snprintf(group, sizeof(group), "bench-%s", pr_msg_format_name(fmt));
    if (pr_mock_broker_create_topic(mb, topic, cfg->partitions, errstr, sizeof(errstr))) {
        fprintf(stderr, "bench_ingest: %s\n", errstr);
        return -1;
    }
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_kv_ref props[] = {{"bootstrap.servers", pr_mock_broker_bootstrap(mb)},
                         {"auto.offset.reset", "earliest"},
                         {"session.timeout.ms", "6000"},
                         /* let prefetch run ahead: the bench measures the
                          * consumer, not librdkafka's queue back-off */
                         {"queued.max.messages.kbytes", "262144"}};
    const char *topics[] = {topic};
    pr_consumer_conf conf = {.topics = topics,
                             .n_topics = 1,
                             .group_id = group,
                             .props = props,
                             .n_props = 4,
                             .format = fmt,
                             .spec = &spec};
    pr_consumer *c = pr_consumer_new(&conf, errstr, sizeof(errstr));
    if (!c) {
        fprintf(stderr, "bench_ingest: %s\n", errstr);
        return -1;
    }
    pr_block *b = pr_block_new(spec.n_dense, spec.n_sparse, 4096, true);
    double eps[64], mbps[64];
    uint64_t rows = 0, msgs_total = 0, bytes_total = 0, idle_total = 0;
    int rounds = 0, rc = 0;
    for (int round = 0; round < cfg->rounds && !rc; round++) {
        uint64_t msgs, bytes, want = (uint64_t)(round + 1) * cfg->events;
        if (produce_all(pr_mock_broker_bootstrap(mb), topic, fmt, cfg,
                        (uint64_t)round * cfg->events, &msgs, &bytes)) {
            rc = -1;
            break;
        }
        msgs_total += msgs;
        bytes_total += bytes;
        uint64_t first_rows = 0, round_rows = 0;
        int64_t t0 = 0, give_up = pr_mono_ns() + (int64_t)120 * 1000000000;
        while (rows < want && pr_mono_ns() < give_up) {
            int n = pr_consumer_poll(c, b, 100, errstr, sizeof(errstr));
            if (n < 0) {
                fprintf(stderr, "bench_ingest: %s\n", errstr);
                rc = -1;
                break;
            }
            if (n > 0 && !t0) {
                t0 = pr_mono_ns();
                first_rows = (uint64_t)n;
            }
            if (t0 && n == 0)
                idle_total++; /* waited on the broker: fetch-bound, not decode-bound */
            rows += (uint64_t)n;
            round_rows += (uint64_t)n;
            pr_block_reset(b);
        }
        double secs = (double)(pr_mono_ns() - t0) / 1e9;
        if (rows != want || secs <= 0) {
            rc = -1;
            break;
        }
        eps[rounds] = (double)(round_rows - first_rows) / secs;
        mbps[rounds] =
            (double)bytes * (double)(round_rows - first_rows) / (double)round_rows / secs / 1e6;
        rounds++;
    }
    pr_consumer_stats st;
    pr_consumer_get_stats(c, &st);
    if (st.rejected_records)
        rc = -1;
    double med_eps = 0, med_mb = 0, best = 0;
    if (rounds) {
        for (int i = 0; i < rounds; i++)
            best = eps[i] > best ? eps[i] : best;
        qsort(eps, (size_t)rounds, sizeof(double), cmp_double);
        qsort(mbps, (size_t)rounds, sizeof(double), cmp_double);
        med_eps = eps[rounds / 2];
        med_mb = mbps[rounds / 2];
    }
    printf("{\"bench\":\"ingest_%s\",\"threads\":1,\"events_per_message\":%u,"
           "\"events\":%" PRIu64 ",\"messages\":%" PRIu64 ",\"bytes\":%" PRIu64
           ",\"rejected\":%" PRIu64 ",\"partitions\":%d,\"rounds\":%d,\"idle_polls\":%" PRIu64
           ",\"events_per_s\":%.0f,\"events_per_s_best\":%.0f,\"rows_per_s\":%.0f,"
           "\"mb_per_s\":%.1f}\n",
           pr_msg_format_name(fmt), fmt == PR_MSG_PROTOBUF_EVENT_BATCH ? cfg->batch : 1, rows,
           msgs_total, bytes_total, st.rejected_records, cfg->partitions, rounds, idle_total,
           med_eps, best, med_eps, med_mb);
    fflush(stdout);
    pr_block_free(b);
    pr_consumer_free(c);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"events", required_argument, NULL, 'n'},     {"batch", required_argument, NULL, 'k'},
        {"partitions", required_argument, NULL, 'p'}, {"format", required_argument, NULL, 'f'},
        {"rounds", required_argument, NULL, 'r'},     {NULL, 0, NULL, 0},
    };
    bench_cfg cfg = {.events = 100000, .rounds = 5, .batch = 256, .partitions = 0};
    int ch, only = -1;
    while ((ch = getopt_long(argc, argv, "n:k:p:f:r:", opts, NULL)) != -1) {
        switch (ch) {
        case 'n':
            cfg.events = strtoull(optarg, NULL, 10);
            break;
        case 'k':
            cfg.batch = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'p':
            cfg.partitions = atoi(optarg);
            break;
        case 'r':
            cfg.rounds = atoi(optarg);
            break;
        case 'f':
            only = pr_msg_format_from_name(optarg);
            if (only < 0) {
                fprintf(stderr, "bench_ingest: unknown format '%s'\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: bench_ingest [--events N] [--rounds R] [--batch K] "
                            "[--partitions P] [--format F]\n");
            return 2;
        }
    }
    if (!cfg.events || !cfg.batch || cfg.rounds < 1 || cfg.rounds > 64) {
        fprintf(stderr, "bench_ingest: --events, --batch > 0, --rounds 1..64\n");
        return 2;
    }
    /* ~250 bytes an event; keep each partition under ~3 MB of the mock's ~5. */
    if (cfg.partitions <= 0) {
        uint64_t p = cfg.events * 250 / (3u << 20) + 1;
        cfg.partitions = p > 64 ? 64 : (int)p;
    }
    pr_log_set_level(getenv("BENCH_DEBUG") ? PR_LOG_DEBUG : PR_LOG_WARN);
    char errstr[512];
    pr_mock_broker *mb = pr_mock_broker_start(1, NULL, errstr, sizeof(errstr));
    if (!mb) {
        fprintf(stderr, "bench_ingest: %s\n", errstr);
        return 1;
    }
    int rc = 0;
    const pr_msg_format fmts[] = {PR_MSG_CRITEO_TSV, PR_MSG_PROTOBUF_EVENT,
                                  PR_MSG_PROTOBUF_EVENT_BATCH};
    for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++)
        if ((only < 0 || (int)fmts[i] == only) && run_format(mb, fmts[i], &cfg))
            rc = 1;
    pr_mock_broker_stop(mb);
    return rc;
}
