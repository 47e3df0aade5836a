/*
 * cmd_produce.c — `piperec produce`: load events into a Kafka topic, from a
 * Criteo TSV file (or stdin) or from the synthetic generator (pr_gen.h), in
 * any of the source formats piperec reads:
 *
 *   criteo_tsv            N lines per message (--lines-per-message, default 1)
 *   protobuf_event        one piperec.v1.Event per message
 *   protobuf_event_batch  one EventBatch of N events (--events-per-message, 256)
 *
 * TSV input becomes protobuf events field by field (label, dense numbers,
 * sparse hex strings; empty = missing), so a malformed line still becomes a
 * (malformed) event that piperec will reject and dead-letter: handy for tests.
 * Generated rows use sparse_id (the integer the 8 hex digits spell).
 *
 * The producer is idempotent (acks=all, no duplicates on retry); --rate paces
 * events per second; the summary reports events/s and delivery failures and
 * the exit code is 1 when anything failed.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "piperec.pb-c.h"
#include "pr_cli.h"
#include "pr_clock.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_log.h"

#define PR__MAX_PROPS 64

typedef struct pr__prod {
    rd_kafka_t *rk;
    const char *topic;
    int32_t partition;
    pr_msg_format format;
    uint32_t per_msg; /* lines or events per message */
    double rate;      /* events/s, 0 = as fast as possible */
    uint64_t events, messages, bytes;
    uint64_t delivered, failed;
    int64_t t0_ns;
    /* message under construction */
    char *tsv; /* criteo_tsv: lines joined by '\n' */
    size_t tsv_len, tsv_cap;
    uint32_t pending; /* events in the message under construction */
    Piperec__V1__Event *evs;
    Piperec__V1__Event **evp;
    struct pr__evbuf *bufs;
    uint8_t *pb;
    size_t pb_cap;
} pr__prod;

/* Storage behind one Event (no malloc per event). */
typedef struct pr__evbuf {
    double dense[PR_MAX_DENSE];
    uint32_t dense_missing[PR_MAX_DENSE];
    char *hexp[PR_MAX_SPARSE];
    char hex[PR_MAX_SPARSE][20];
    uint64_t ids[PR_MAX_SPARSE];
    uint32_t sparse_missing[PR_MAX_SPARSE];
} pr__evbuf;

static void pr__dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr__prod *p = opaque;
    if (m->err) {
        p->failed++;
        if (p->failed <= 5)
            pr_err("produce: delivery failed: %s", rd_kafka_err2str(m->err));
    } else {
        p->delivered++;
    }
}

static int pr__send(pr__prod *p, const void *buf, size_t len)
{
    for (;;) {
        rd_kafka_resp_err_t err =
            rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(p->topic), RD_KAFKA_V_PARTITION(p->partition),
                              RD_KAFKA_V_VALUE((void *)buf, len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
        if (!err)
            break;
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            pr_err("produce: %s", rd_kafka_err2str(err));
            p->failed++;
            return PR_EKAFKA;
        }
        rd_kafka_poll(p->rk, 50); /* make room: serve delivery reports */
    }
    p->messages++;
    p->bytes += len;
    rd_kafka_poll(p->rk, 0);
    return 0;
}

/* Pace to --rate: sleep until `events` are due. */
static void pr__pace(pr__prod *p)
{
    if (p->rate <= 0)
        return;
    const pr_clock *c = pr_clock_real();
    int64_t due_ns = p->t0_ns + (int64_t)((double)p->events / p->rate * 1e9);
    int64_t now = pr_clock_mono_ns(c);
    while (now < due_ns) {
        int64_t wait = due_ns - now;
        int ms = (int)(wait / 1000000);
        rd_kafka_poll(p->rk, ms > 0 ? (ms > 100 ? 100 : ms) : 0);
        if (ms == 0) {
            struct timespec ts = {0, (long)wait};
            nanosleep(&ts, NULL);
        }
        now = pr_clock_mono_ns(c);
    }
}

static int pr__flush_msg(pr__prod *p)
{
    if (!p->pending)
        return 0;
    int rc;
    if (p->format == PR_MSG_CRITEO_TSV) {
        rc = pr__send(p, p->tsv, p->tsv_len);
        p->tsv_len = 0;
    } else if (p->format == PR_MSG_PROTOBUF_EVENT) {
        size_t n = piperec__v1__event__pack(&p->evs[0], p->pb);
        rc = pr__send(p, p->pb, n);
    } else {
        Piperec__V1__EventBatch eb = PIPEREC__V1__EVENT_BATCH__INIT;
        eb.n_events = p->pending;
        eb.events = p->evp;
        size_t need = piperec__v1__event_batch__get_packed_size(&eb);
        if (need > p->pb_cap) {
            uint8_t *nb = realloc(p->pb, need);
            if (!nb)
                return PR_ENOMEM;
            p->pb = nb;
            p->pb_cap = need;
        }
        size_t n = piperec__v1__event_batch__pack(&eb, p->pb);
        rc = pr__send(p, p->pb, n);
    }
    p->events += p->pending;
    p->pending = 0;
    pr__pace(p);
    return rc;
}

static Piperec__V1__Event *pr__next_event(pr__prod *p, pr__evbuf **eb)
{
    Piperec__V1__Event *ev = &p->evs[p->pending];
    piperec__v1__event__init(ev);
    *eb = &p->bufs[p->pending];
    return ev;
}

/* One TSV line (no newline) into the message under construction. */
static int pr__add_line(pr__prod *p, const char *line, size_t len)
{
    if (p->format == PR_MSG_CRITEO_TSV) {
        size_t need = p->tsv_len + len + 1;
        if (need > p->tsv_cap) {
            size_t nc = need * 2;
            char *nb = realloc(p->tsv, nc);
            if (!nb)
                return PR_ENOMEM;
            p->tsv = nb;
            p->tsv_cap = nc;
        }
        if (p->tsv_len)
            p->tsv[p->tsv_len++] = '\n';
        memcpy(p->tsv + p->tsv_len, line, len);
        p->tsv_len += len;
    } else {
        pr__evbuf *b;
        Piperec__V1__Event *ev = pr__next_event(p, &b);
        /* label, then dense until the first field that looks like hex or
         * the 13th, then sparse: the Criteo layout 1 + 13 + 26. */
        const char *s = line, *end = line + len;
        size_t field = 0;
        while (s <= end) {
            const char *t = memchr(s, '\t', (size_t)(end - s));
            const char *fe = t ? t : end;
            size_t fl = (size_t)(fe - s);
            char tmp[64];
            size_t cl = fl < sizeof(tmp) - 1 ? fl : sizeof(tmp) - 1;
            memcpy(tmp, s, cl);
            tmp[cl] = 0;
            if (field == 0) {
                ev->label = (int32_t)strtol(tmp, NULL, 10);
            } else if (field <= PR_GEN_N_DENSE) {
                size_t i = ev->n_dense++;
                b->dense[i] = fl ? strtod(tmp, NULL) : 0.0;
                if (!fl)
                    b->dense_missing[ev->n_dense_missing++] = (uint32_t)i;
            } else if (ev->n_sparse_hex < PR_MAX_SPARSE) {
                size_t i = ev->n_sparse_hex++;
                size_t hl = fl < sizeof(b->hex[i]) - 1 ? fl : sizeof(b->hex[i]) - 1;
                memcpy(b->hex[i], s, hl);
                b->hex[i][hl] = 0;
                b->hexp[i] = b->hex[i];
            }
            field++;
            if (!t)
                break;
            s = t + 1;
        }
        ev->dense = b->dense;
        ev->dense_missing = b->dense_missing;
        ev->sparse_hex = b->hexp;
    }
    if (++p->pending >= p->per_msg)
        return pr__flush_msg(p);
    return 0;
}

static int pr__add_gen_row(pr__prod *p, const pr_gen_row *r)
{
    pr__evbuf *b;
    Piperec__V1__Event *ev = pr__next_event(p, &b);
    ev->label = r->label;
    ev->n_dense = PR_GEN_N_DENSE;
    ev->dense = b->dense;
    ev->dense_missing = b->dense_missing;
    for (int i = 0; i < PR_GEN_N_DENSE; i++) {
        b->dense[i] = (double)r->dense[i];
        if (r->dense_missing >> i & 1)
            b->dense_missing[ev->n_dense_missing++] = (uint32_t)i;
    }
    ev->n_sparse_id = PR_GEN_N_SPARSE;
    ev->sparse_id = b->ids;
    ev->sparse_missing = b->sparse_missing;
    for (int c = 0; c < PR_GEN_N_SPARSE; c++) {
        b->ids[c] = r->sparse[c];
        if (r->sparse_missing >> c & 1)
            b->sparse_missing[ev->n_sparse_missing++] = (uint32_t)c;
    }
    if (++p->pending >= p->per_msg)
        return pr__flush_msg(p);
    return 0;
}

static void pr__produce_usage(FILE *f)
{
    fprintf(
        f,
        "usage: piperec produce --bootstrap ADDR --topic T (--input FILE|- | --gen N [--seed S])\n"
        "                       [--format criteo_tsv|protobuf_event|protobuf_event_batch]\n"
        "                       [--lines-per-message N] [--events-per-message N]\n"
        "                       [--rate EVENTS_PER_S] [--partition P] [-X key=value]...\n"
        "\n"
        "Loads events into Kafka with an idempotent producer (acks=all) and prints\n"
        "totals and events/s. --input reads Criteo TSV (label, 13 dense, 26 sparse\n"
        "hex); --gen makes N synthetic Criteo-shaped rows (same data as `piperec gen`).\n"
        "-X passes a librdkafka property (security.protocol, sasl.*, linger.ms...).\n"
        "The test broker (`piperec broker`) keeps only ~5 MB per partition.\n");
}

int pr_cmd_produce(int argc, char **argv)
{
    static const struct option opts[] = {
        {"bootstrap", required_argument, NULL, 'b'},
        {"topic", required_argument, NULL, 't'},
        {"input", required_argument, NULL, 'i'},
        {"format", required_argument, NULL, 'f'},
        {"lines-per-message", required_argument, NULL, 'L'},
        {"events-per-message", required_argument, NULL, 'E'},
        {"rate", required_argument, NULL, 'r'},
        {"gen", required_argument, NULL, 'g'},
        {"seed", required_argument, NULL, 's'},
        {"partition", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *bootstrap = NULL, *topic = NULL, *input = NULL;
    const char *props[PR__MAX_PROPS];
    int n_props = 0;
    int format = PR_MSG_CRITEO_TSV;
    unsigned long lines_per = 1, events_per = 256;
    double rate = 0;
    long long gen = -1;
    unsigned long long seed = 1;
    long partition = RD_KAFKA_PARTITION_UA;
    int ch;
    char *end;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "b:t:i:f:r:g:s:p:X:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'b':
            bootstrap = optarg;
            break;
        case 't':
            topic = optarg;
            break;
        case 'i':
            input = optarg;
            break;
        case 'f':
            format = pr_msg_format_from_name(optarg);
            if (format < 0) {
                fprintf(stderr,
                        "piperec produce: --format: unknown '%s' (criteo_tsv, "
                        "protobuf_event, protobuf_event_batch)\n",
                        optarg);
                return 2;
            }
            break;
        case 'L':
        case 'E': {
            unsigned long v = strtoul(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000) {
                fprintf(stderr, "piperec produce: --%s: expected 1..1000000, got '%s'\n",
                        ch == 'L' ? "lines-per-message" : "events-per-message", optarg);
                return 2;
            }
            *(ch == 'L' ? &lines_per : &events_per) = v;
            break;
        }
        case 'r':
            rate = strtod(optarg, &end);
            if (*end || rate < 0) {
                fprintf(stderr, "piperec produce: --rate: expected events/s >= 0, got '%s'\n",
                        optarg);
                return 2;
            }
            break;
        case 'g':
            gen = strtoll(optarg, &end, 10);
            if (*end || gen < 0) {
                fprintf(stderr, "piperec produce: --gen: expected a row count, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 's':
            seed = strtoull(optarg, &end, 10);
            if (*end) {
                fprintf(stderr, "piperec produce: --seed: expected an integer, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'p':
            partition = strtol(optarg, &end, 10);
            if (*end || partition < 0) {
                fprintf(stderr, "piperec produce: --partition: expected >= 0, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'X':
            if (n_props >= PR__MAX_PROPS || !strchr(optarg, '=')) {
                fprintf(stderr, "piperec produce: -X: expected key=value, got '%s'\n", optarg);
                return 2;
            }
            props[n_props++] = optarg;
            break;
        case 'h':
            pr__produce_usage(stdout);
            return 0;
        default:
            pr__produce_usage(stderr);
            return 2;
        }
    }
    if (!bootstrap || !topic || (!input && gen < 0) || (input && gen >= 0)) {
        fprintf(stderr, "piperec produce: need --bootstrap, --topic and one of --input / --gen\n");
        pr__produce_usage(stderr);
        return 2;
    }

    pr__prod p = {.topic = topic, .partition = (int32_t)partition, .format = format, .rate = rate};
    p.per_msg = format == PR_MSG_CRITEO_TSV       ? (uint32_t)lines_per
                : format == PR_MSG_PROTOBUF_EVENT ? 1
                                                  : (uint32_t)events_per;
    if (format == PR_MSG_CRITEO_TSV && gen >= 0)
        p.per_msg = (uint32_t)lines_per;
    if (format != PR_MSG_CRITEO_TSV) {
        p.evs = calloc(p.per_msg, sizeof(*p.evs));
        p.evp = calloc(p.per_msg, sizeof(*p.evp));
        p.bufs = calloc(p.per_msg, sizeof(*p.bufs));
        p.pb_cap = 64 * 1024;
        p.pb = malloc(p.pb_cap);
        if (!p.evs || !p.evp || !p.bufs || !p.pb) {
            fprintf(stderr, "piperec produce: out of memory\n");
            return 1;
        }
        for (uint32_t i = 0; i < p.per_msg; i++)
            p.evp[i] = &p.evs[i];
    }

    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    const char *fixed[][2] = {
        {"bootstrap.servers", bootstrap},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "5"},
        {"batch.num.messages", "10000"},
        {"queue.buffering.max.kbytes", "262144"},
    };
    for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
        if (rd_kafka_conf_set(conf, fixed[i][0], fixed[i][1], errstr, sizeof(errstr))) {
            fprintf(stderr, "piperec produce: %s\n", errstr);
            rd_kafka_conf_destroy(conf);
            return 2;
        }
    for (int i = 0; i < n_props; i++) {
        char kv[1024];
        snprintf(kv, sizeof(kv), "%s", props[i]);
        char *eq = strchr(kv, '=');
        *eq = 0;
        if (rd_kafka_conf_set(conf, kv, eq + 1, errstr, sizeof(errstr))) {
            fprintf(stderr, "piperec produce: -X %s: %s\n", kv, errstr);
            rd_kafka_conf_destroy(conf);
            return 2;
        }
    }
    rd_kafka_conf_set_dr_msg_cb(conf, pr__dr);
    rd_kafka_conf_set_opaque(conf, &p);
    p.rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!p.rk) {
        fprintf(stderr, "piperec produce: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        return 1;
    }

    int rc = 0;
    p.t0_ns = pr_clock_mono_ns(pr_clock_real());
    if (input) {
        FILE *f = strcmp(input, "-") ? fopen(input, "r") : stdin;
        if (!f) {
            fprintf(stderr, "piperec produce: %s: %s\n", input, strerror(errno));
            rc = 1;
            goto out;
        }
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while (!rc && (n = getline(&line, &cap, f)) >= 0) {
            while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                n--;
            if (n == 0)
                continue;
            rc = pr__add_line(&p, line, (size_t)n);
        }
        free(line);
        if (f != stdin)
            fclose(f);
    } else if (format == PR_MSG_CRITEO_TSV) {
        pr_gen *g = pr_gen_new(seed);
        char *buf = malloc((size_t)PR_GEN_TSV_LINE_MAX * 2);
        if (!g || !buf) {
            fprintf(stderr, "piperec produce: out of memory\n");
            rc = 1;
        }
        for (long long r = 0; !rc && r < gen; r++) {
            uint64_t got = 0;
            size_t len = pr_gen_tsv(g, (uint64_t)r, 1, buf, (size_t)PR_GEN_TSV_LINE_MAX * 2, &got);
            while (len && buf[len - 1] == '\n')
                len--;
            rc = pr__add_line(&p, buf, len);
        }
        free(buf);
        pr_gen_free(g);
    } else {
        pr_gen *g = pr_gen_new(seed);
        if (!g) {
            fprintf(stderr, "piperec produce: out of memory\n");
            rc = 1;
        }
        pr_gen_row row;
        for (long long r = 0; !rc && r < gen; r++) {
            pr_gen_row_at(g, (uint64_t)r, &row);
            rc = pr__add_gen_row(&p, &row);
        }
        pr_gen_free(g);
    }
    if (!rc)
        rc = pr__flush_msg(&p);
out:
    if (rd_kafka_flush(p.rk, 60000))
        pr_err("produce: %d message(s) not delivered after 60 s", rd_kafka_outq_len(p.rk));
    double secs = (double)(pr_clock_mono_ns(pr_clock_real()) - p.t0_ns) / 1e9;
    printf("produced events=%" PRIu64 " messages=%" PRIu64 " bytes=%" PRIu64 " delivered=%" PRIu64
           " failed=%" PRIu64 " seconds=%.3f events_per_s=%.0f\n",
           p.events, p.messages, p.bytes, p.delivered, p.failed, secs,
           secs > 0 ? (double)p.events / secs : 0.0);
    fflush(stdout);
    rd_kafka_destroy(p.rk);
    free(p.tsv);
    free(p.evs);
    free(p.evp);
    free(p.bufs);
    free(p.pb);
    return rc || p.failed || p.delivered != p.messages ? 1 : 0;
}
