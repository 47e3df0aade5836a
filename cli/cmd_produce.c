/*
 * cmd_produce.c — `piperec produce`: load events into a Kafka topic, from a
 * Criteo TSV file (or stdin) or from the synthetic generator (pr_gen.h), in
 * any of the source formats piperec reads:
 *
 *   criteo_tsv            N lines per message (--lines-per-message, default 1)
 *   protobuf_event        one piperec.v1.Event per message
 *   protobuf_event_batch  one EventBatch of N events (--events-per-message, 256)
 *   json                  one JSON object per message, from JSON lines (--input)
 *                         or the generated clickstream (--gen N, pr_gen_json_event)
 *   avro                  the same JSON objects as Avro records (--avro-schema,
 *                         registry-framed with --schema-id, or plain)
 *   protobuf              the same JSON objects written as the user's message
 *                         (--descriptor-set F --message M, pr_pbuser_encode_json),
 *                         registry-framed with --schema-id N (default: plain)
 *
 * Messages are spread over the topic's partitions: JSON-like ones keyed by
 * the value at --key-path (librdkafka's partitioner hashes the key, so one
 * user's events stay in order on one partition), everything else (and records
 * without the key) round-robin; --partition pins them all. Unkeyed sticky
 * batching would burst one test-broker partition past its ~5 MB.
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
#include <stdbool.h>
#include <stddef.h>
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
#include "pr_kafka.h"
#include "pr_log.h"

#define PR__MAX_PROPS 64

typedef struct pr__prod {
    rd_kafka_t *rk;
    pr_avro_writer *aw; /* avro: JSON objects encoded under --avro-schema */
    int64_t schema_id;  /* avro, protobuf: registry framing with this id, -1 = plain */
    uint8_t *abuf;
    size_t alen, acap;
    pr_pbuser_desc *pbd; /* protobuf: JSON objects re-encoded as the user's message */
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
    /* json */
    int32_t n_parts; /* the topic's partitions (round-robin), 0 = unknown */
    uint64_t rr;
    pr_json_extractor *keyx; /* --key-path */
    pr_json_block *keyb;
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

static void pr__pace(pr__prod *p);

static int pr__send_keyed(pr__prod *p, const void *buf, size_t len, int32_t partition,
                          const void *key, size_t key_len)
{
    for (;;) {
        rd_kafka_resp_err_t err = rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(p->topic), RD_KAFKA_V_PARTITION(partition),
            RD_KAFKA_V_KEY((void *)key, key_len), RD_KAFKA_V_VALUE((void *)buf, len),
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

/* An unkeyed message (TSV lines, protobuf events and batches): round-robin
 * over the topic's partitions, or --partition. */
static int pr__send(pr__prod *p, const void *buf, size_t len)
{
    int32_t part = p->partition;
    if (part == RD_KAFKA_PARTITION_UA && p->n_parts > 0)
        part = (int32_t)(p->rr++ % (uint64_t)p->n_parts);
    return pr__send_keyed(p, buf, len, part, NULL, 0);
}

/* One JSON object as one message: keyed by --key-path's value when it has
 * one, else round-robin (or --partition). Not validated here: piperec
 * rejects (and dead-letters) what does not decode. */
static int pr__send_json(pr__prod *p, const char *doc, size_t len)
{
    int32_t part = p->partition;
    const char *key = NULL;
    size_t key_len = 0;
    if (p->keyx) {
        pr_json_block_reset(p->keyb);
        const pr_json_col *c = &p->keyb->cols[0];
        if (pr_json_extract(p->keyx, p->keyb, doc, len, NULL) == 0 && c->count[0] == 1) {
            key = p->keyb->arena + c->str[0].off;
            key_len = c->str[0].len;
        }
    }
    if (!key && part == RD_KAFKA_PARTITION_UA && p->n_parts > 0)
        part = (int32_t)(p->rr++ % (uint64_t)p->n_parts);
    char err[256];
    if (p->pbd) { /* format protobuf: the object as the user's message */
        int n = pr_pbuser_encode_json(p->pbd, doc, len, p->schema_id >= 0,
                                      (uint32_t)(p->schema_id >= 0 ? p->schema_id : 0), &p->abuf,
                                      &p->acap, err, sizeof(err));
        if (n < 0) {
            fprintf(stderr, "piperec produce: event %" PRIu64 " as %s: %s\n", p->events + 1,
                    pr_pbuser_desc_message(p->pbd), err);
            return PR_EINVAL;
        }
        p->alen = (size_t)n;
    }
    if (p->aw && pr_avro_from_json(p->aw, doc, len, p->schema_id, &p->abuf, &p->alen, &p->acap, err,
                                   sizeof(err))) {
        fprintf(stderr, "piperec produce: event %" PRIu64 ": %s\n", p->events + 1, err);
        return PR_EINVAL;
    }
    int rc = p->aw || p->pbd ? pr__send_keyed(p, (const char *)p->abuf, p->alen, part, key, key_len)
                             : pr__send_keyed(p, doc, len, part, key, key_len);
    p->events++;
    pr__pace(p);
    return rc;
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
    if (p->format == PR_MSG_JSON || p->format == PR_MSG_AVRO || p->format == PR_MSG_PROTOBUF)
        return pr__send_json(p, line, len);
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
        "                       [--format "
        "criteo_tsv|protobuf_event|protobuf_event_batch|json|avro|protobuf]\n"
        "                       [--avro-schema FILE] [--schema-id N|plain]\n"
        "                       [--descriptor-set FILE --message M]\n"
        "                       [--lines-per-message N] [--events-per-message N] [--key-path P]\n"
        "                       [--rate EVENTS_PER_S] [--partition P] [-X key=value]...\n"
        "\n"
        "Loads events into Kafka with an idempotent producer (acks=all) and prints\n"
        "totals and events/s. --input reads Criteo TSV (label, 13 dense, 26 sparse\n"
        "hex); --gen makes N synthetic Criteo-shaped rows (same data as `piperec gen`).\n"
        "--format json: --input is JSON lines, one object per message; --gen makes the\n"
        "JSON clickstream of `piperec gen --format json`. Messages go round-robin over\n"
        "the topic's partitions, or keyed by the value at --key-path (e.g. user.id).\n"
        "--format avro: the same JSON (lines or --gen) encoded under --avro-schema FILE\n"
        "(e.g. examples/clickstream.avsc), registry-framed with --schema-id N (default\n"
        "1; 'plain': the bare Avro body).\n"
        "--format protobuf: the same JSON objects, each written as message M of the\n"
        "descriptor set FILE (protoc --descriptor_set_out=FILE --include_imports);\n"
        "plain, or registry-framed (0, id N, message indexes) with --schema-id N.\n"
        "-X passes a librdkafka property (security.protocol, sasl.*, linger.ms...);\n"
        "a bulk load (a file or --gen, no --rate) batches with linger.ms 100.\n"
        "The test broker (`piperec broker`) keeps only ~5 MB per partition.\n");
}

/* What the command line asked for. */
typedef struct pr__produce_args {
    const char *bootstrap, *topic, *input, *key_path, *avro_schema, *schema_id;
    const char *descriptor_set, *message; /* format protobuf */
    const char *props[PR__MAX_PROPS];
    int n_props;
    int format; /* pr_msg_format */
    unsigned long lines_per, events_per;
    double rate;
    long long gen; /* rows to generate, -1 = read --input */
    unsigned long long seed;
    long partition;
} pr__produce_args;

static bool pr__produce_check(const pr__produce_args *a);

/* Parse argv into a. Returns true when the command should run; otherwise
 * *status is the exit code (0 after --help, 2 on a usage error). */
/* The options taken as given: short option -> field of pr__produce_args. */
static const struct {
    int ch;
    size_t off;
} pr__produce_strs[] = {
    {'b', offsetof(pr__produce_args, bootstrap)},      {'t', offsetof(pr__produce_args, topic)},
    {'i', offsetof(pr__produce_args, input)},          {'K', offsetof(pr__produce_args, key_path)},
    {'A', offsetof(pr__produce_args, avro_schema)},    {'S', offsetof(pr__produce_args, schema_id)},
    {'D', offsetof(pr__produce_args, descriptor_set)}, {'M', offsetof(pr__produce_args, message)},
};

static const char **pr__produce_str(pr__produce_args *a, int ch)
{
    for (size_t i = 0; i < sizeof(pr__produce_strs) / sizeof(pr__produce_strs[0]); i++)
        if (pr__produce_strs[i].ch == ch)
            return (const char **)((char *)a + pr__produce_strs[i].off);
    return NULL;
}

static bool pr__produce_parse(int argc, char **argv, pr__produce_args *a, int *status)
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
        {"key-path", required_argument, NULL, 'K'},
        {"avro-schema", required_argument, NULL, 'A'},
        {"schema-id", required_argument, NULL, 'S'},
        {"descriptor-set", required_argument, NULL, 'D'},
        {"message", required_argument, NULL, 'M'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *a = (pr__produce_args){.format = PR_MSG_CRITEO_TSV,
                            .lines_per = 1,
                            .events_per = 256,
                            .gen = -1,
                            .seed = 1,
                            .partition = RD_KAFKA_PARTITION_UA};
    *status = 2;
    int ch;
    char *end;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "b:t:i:f:r:g:s:p:X:h", opts, NULL)) != -1) {
        const char **str = pr__produce_str(a, ch);
        if (str) {
            *str = optarg;
            continue;
        }
        switch (ch) {
        case 'f':
            a->format = pr_msg_format_from_name(optarg);
            if (a->format < 0) {
                fprintf(stderr,
                        "piperec produce: --format: unknown '%s' (criteo_tsv, "
                        "protobuf_event, protobuf_event_batch, json, avro, protobuf)\n",
                        optarg);
                return false;
            }
            break;
        case 'L':
        case 'E': {
            unsigned long v = strtoul(optarg, &end, 10);
            if (*end || v < 1 || v > 1000000) {
                fprintf(stderr, "piperec produce: --%s: expected 1..1000000, got '%s'\n",
                        ch == 'L' ? "lines-per-message" : "events-per-message", optarg);
                return false;
            }
            *(ch == 'L' ? &a->lines_per : &a->events_per) = v;
            break;
        }
        case 'r':
            a->rate = strtod(optarg, &end);
            if (*end || a->rate < 0) {
                fprintf(stderr, "piperec produce: --rate: expected events/s >= 0, got '%s'\n",
                        optarg);
                return false;
            }
            break;
        case 'g':
            a->gen = strtoll(optarg, &end, 10);
            if (*end || a->gen < 0) {
                fprintf(stderr, "piperec produce: --gen: expected a row count, got '%s'\n", optarg);
                return false;
            }
            break;
        case 's':
            a->seed = strtoull(optarg, &end, 10);
            if (*end) {
                fprintf(stderr, "piperec produce: --seed: expected an integer, got '%s'\n", optarg);
                return false;
            }
            break;
        case 'p':
            a->partition = strtol(optarg, &end, 10);
            if (*end || a->partition < 0) {
                fprintf(stderr, "piperec produce: --partition: expected >= 0, got '%s'\n", optarg);
                return false;
            }
            break;
        case 'X':
            if (a->n_props >= PR__MAX_PROPS || !strchr(optarg, '=')) {
                fprintf(stderr, "piperec produce: -X: expected key=value, got '%s'\n", optarg);
                return false;
            }
            a->props[a->n_props++] = optarg;
            break;
        case 'h':
            pr__produce_usage(stdout);
            *status = 0;
            return false;
        default:
            pr__produce_usage(stderr);
            return false;
        }
    }
    return pr__produce_check(a);
}

/* The options that go together. */
static bool pr__produce_check(const pr__produce_args *a)
{
    if (!a->bootstrap || !a->topic || (!a->input && a->gen < 0) || (a->input && a->gen >= 0)) {
        fprintf(stderr, "piperec produce: need --bootstrap, --topic and one of --input / --gen\n");
        pr__produce_usage(stderr);
        return false;
    }
    bool pb = a->format == PR_MSG_PROTOBUF;
    if (a->key_path && a->format != PR_MSG_JSON && a->format != PR_MSG_AVRO && !pb) {
        fprintf(stderr, "piperec produce: --key-path needs --format json, avro or protobuf\n");
        return false;
    }
    if (pb != (a->descriptor_set && a->message) || (!pb && (a->descriptor_set || a->message))) {
        fprintf(stderr, "piperec produce: --format protobuf goes with --descriptor-set and "
                        "--message (and they with it)\n");
        return false;
    }
    if ((a->format == PR_MSG_AVRO) != (a->avro_schema != NULL)) {
        fprintf(stderr, "piperec produce: --avro-schema goes with --format avro (and it needs "
                        "one)\n");
        return false;
    }
    return true;
}

static void pr__prod_free(pr__prod *p)
{
    free(p->tsv);
    free(p->evs);
    free(p->evp);
    free(p->bufs);
    free(p->pb);
    pr_json_block_free(p->keyb);
    pr_json_extractor_free(p->keyx);
    pr_avro_writer_free(p->aw);
    pr_pbuser_desc_free(p->pbd);
    free(p->abuf);
}

/* --format protobuf: the message of the descriptor set; plain unless --schema-id N. */
static int pr__prod_protobuf(pr__prod *p, const pr__produce_args *a)
{
    char err[512], *end = NULL;
    const char *id = a->schema_id ? a->schema_id : "plain";
    p->schema_id = !strcmp(id, "plain") ? -1 : strtoll(id, &end, 10);
    if (end && (*end || p->schema_id < 0 || p->schema_id > UINT32_MAX)) {
        fprintf(stderr, "piperec produce: --schema-id: a 32-bit id or plain, got '%s'\n", id);
        return PR_EINVAL;
    }
    if (!(p->pbd = pr_pbuser_desc_load(a->descriptor_set, a->message, err, sizeof(err)))) {
        fprintf(stderr, "piperec produce: %s\n", err);
        return PR_EINVAL;
    }
    return 0;
}

/* --format avro: the writer for --avro-schema, the framing of --schema-id. */
static int pr__prod_avro(pr__prod *p, const pr__produce_args *a)
{
    FILE *f = fopen(a->avro_schema, "rb");
    static char text[1 << 20];
    size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f)
        fclose(f);
    text[n] = 0;
    char err[256], *end = NULL;
    const char *id = a->schema_id ? a->schema_id : "1";
    p->schema_id = !strcmp(id, "plain") ? -1 : strtoll(id, &end, 10);
    if (end && (*end || p->schema_id < 0 || p->schema_id > UINT32_MAX)) {
        fprintf(stderr, "piperec produce: --schema-id: a 32-bit id or plain, got '%s'\n", id);
        return PR_EINVAL;
    }
    if (!f || !(p->aw = pr_avro_writer_new(text, err, sizeof(err)))) {
        fprintf(stderr, "piperec produce: --avro-schema %s: %s\n", a->avro_schema,
                f ? err : "cannot read");
        return PR_EINVAL;
    }
    return 0;
}

/* Size the message under construction; protobuf formats get per_msg events
 * with their storage. */
static int pr__prod_init(pr__prod *p, const pr__produce_args *a)
{
    *p = (pr__prod){.topic = a->topic,
                    .partition = (int32_t)a->partition,
                    .format = a->format,
                    .rate = a->rate};
    p->per_msg = a->format == PR_MSG_CRITEO_TSV       ? (uint32_t)a->lines_per
                 : a->format == PR_MSG_PROTOBUF_EVENT ? 1
                                                      : (uint32_t)a->events_per;
    if (a->format == PR_MSG_AVRO && pr__prod_avro(p, a))
        return PR_EINVAL;
    if (a->format == PR_MSG_PROTOBUF && pr__prod_protobuf(p, a))
        return PR_EINVAL;
    bool json_like =
        a->format == PR_MSG_JSON || a->format == PR_MSG_AVRO || a->format == PR_MSG_PROTOBUF;
    if (json_like && a->key_path) {
        pr_json_path kp = {.path = a->key_path, .type = PR_JSON_KEY, .shape = PR_JSON_SCALAR};
        char err[256];
        p->keyx = pr_json_extractor_new(&kp, 1, 0, err, sizeof(err));
        if (!p->keyx) {
            fprintf(stderr, "piperec produce: --key-path: %s\n", err);
            return PR_EINVAL;
        }
        if (!(p->keyb = pr_json_block_new(p->keyx, 1)))
            return PR_ENOMEM;
    }
    if (a->format == PR_MSG_CRITEO_TSV || json_like)
        return 0;
    p->evs = calloc(p->per_msg, sizeof(*p->evs));
    p->evp = calloc(p->per_msg, sizeof(*p->evp));
    p->bufs = calloc(p->per_msg, sizeof(*p->bufs));
    p->pb_cap = 64 * 1024;
    p->pb = malloc(p->pb_cap);
    if (!p->evs || !p->evp || !p->bufs || !p->pb)
        return PR_ENOMEM;
    for (uint32_t i = 0; i < p->per_msg; i++)
        p->evp[i] = &p->evs[i];
    return 0;
}

/* The idempotent producer (pr_kafka.h's PR_KAFKA_CLI_PRODUCER), with -X
 * properties over its defaults and --bootstrap. Returns NULL after printing
 * why; *status is then the exit code. */
static rd_kafka_t *pr__producer_new(const pr__produce_args *a, pr__prod *p, int *status)
{
    char errstr[512];
    char kv[PR__MAX_PROPS][1024];
    pr_kv props[PR__MAX_PROPS];
    for (int i = 0; i < a->n_props; i++) {
        snprintf(kv[i], sizeof(kv[i]), "%s", a->props[i]);
        char *eq = strchr(kv[i], '=');
        *eq = 0;
        props[i] = (pr_kv){kv[i], eq + 1};
    }
    /* A bulk load (a file or --gen, no --rate) lingers longer: a slow
     * encoder (Avro from JSON, ~20 us an event) otherwise sends a few
     * messages per partition per batch, and the test broker serves one
     * batch per partition per fetch (a 20x slower topic to read). Live
     * input (stdin, --rate) keeps the role's 5 ms. -X linger.ms wins. */
    bool bulk = a->rate <= 0 && (a->gen >= 0 || strcmp(a->input, "-") != 0);
    pr_kv defs[] = {{"bootstrap.servers", a->bootstrap}, {"linger.ms", "100"}};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_CLI_PRODUCER,
                               .props = props,
                               .n_props = (size_t)a->n_props,
                               .defaults = defs,
                               .n_defaults = bulk ? 2 : 1,
                               .opaque = p,
                               .dr_msg_cb = pr__dr};
    rd_kafka_conf_t *conf;
    *status = 2;
    if (pr_kafka_conf_new(&cc, &conf, errstr, sizeof(errstr))) {
        fprintf(stderr, "piperec produce: %s\n", errstr);
        return NULL;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (!rk) {
        fprintf(stderr, "piperec produce: %s\n", errstr);
        rd_kafka_conf_destroy(conf);
        *status = 1;
    }
    return rk;
}

/* Lines (Criteo TSV, or JSON for --format json) from a file or stdin ("-");
 * blank lines are skipped. */
static int pr__produce_file(pr__prod *p, const char *input)
{
    FILE *f = strcmp(input, "-") ? fopen(input, "r") : stdin;
    if (!f) {
        fprintf(stderr, "piperec produce: %s: %s\n", input, strerror(errno));
        return 1;
    }
    int rc = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while (!rc && (n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (n == 0)
            continue;
        rc = pr__add_line(p, line, (size_t)n);
    }
    free(line);
    /* A read error (a directory: EISDIR) is not the end of the input. */
    if (!rc && ferror(f)) {
        fprintf(stderr, "piperec produce: %s: %s\n", input, strerror(errno));
        rc = 1;
    }
    if (f != stdin)
        fclose(f);
    return rc;
}

/* `rows` generated rows as TSV lines (criteo_tsv). */
static int pr__produce_gen_tsv(pr__prod *p, long long rows, unsigned long long seed)
{
    int rc = 0;
    pr_gen *g = pr_gen_new(seed);
    char *buf = malloc((size_t)PR_GEN_TSV_LINE_MAX * 2);
    if (!g || !buf) {
        fprintf(stderr, "piperec produce: out of memory\n");
        rc = 1;
    }
    for (long long r = 0; !rc && r < rows; r++) {
        uint64_t got = 0;
        size_t len = pr_gen_tsv(g, (uint64_t)r, 1, buf, (size_t)PR_GEN_TSV_LINE_MAX * 2, &got);
        while (len && buf[len - 1] == '\n')
            len--;
        rc = pr__add_line(p, buf, len);
    }
    free(buf);
    pr_gen_free(g);
    return rc;
}

/* `rows` generated clickstream events (json). */
static int pr__produce_gen_json(pr__prod *p, long long rows, unsigned long long seed)
{
    char buf[PR_GEN_JSON_LINE_MAX];
    int rc = 0;
    for (long long r = 0; !rc && r < rows; r++) {
        size_t len = pr_gen_json_event(seed, (uint64_t)r, buf, sizeof(buf));
        rc = pr__send_json(p, buf, len);
    }
    return rc;
}

/* The topic's partition count for round-robin (0 when unknown: librdkafka's
 * partitioner then decides). */
static int32_t pr__topic_partitions(rd_kafka_t *rk, const char *topic)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int32_t n = 0;
    if (rkt && rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err)
        n = md->topics[0].partition_cnt;
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return n;
}

/* `rows` generated rows as protobuf events (sparse_id). */
static int pr__produce_gen_events(pr__prod *p, long long rows, unsigned long long seed)
{
    int rc = 0;
    pr_gen *g = pr_gen_new(seed);
    if (!g) {
        fprintf(stderr, "piperec produce: out of memory\n");
        rc = 1;
    }
    pr_gen_row row;
    for (long long r = 0; !rc && r < rows; r++) {
        pr_gen_row_at(g, (uint64_t)r, &row);
        rc = pr__add_gen_row(p, &row);
    }
    pr_gen_free(g);
    return rc;
}

/* Wait for delivery reports (up to 60 s) and print the totals line. */
static void pr__produce_finish(pr__prod *p)
{
    if (rd_kafka_flush(p->rk, 60000))
        pr_err("produce: %d message(s) not delivered after 60 s", rd_kafka_outq_len(p->rk));
    double secs = (double)(pr_clock_mono_ns(pr_clock_real()) - p->t0_ns) / 1e9;
    printf("produced events=%" PRIu64 " messages=%" PRIu64 " bytes=%" PRIu64 " delivered=%" PRIu64
           " failed=%" PRIu64 " seconds=%.3f events_per_s=%.0f\n",
           p->events, p->messages, p->bytes, p->delivered, p->failed, secs,
           secs > 0 ? (double)p->events / secs : 0.0);
    fflush(stdout);
}

int pr_cli_cmd_produce(int argc, char **argv)
{
    pr__produce_args a;
    int status;
    if (!pr__produce_parse(argc, argv, &a, &status))
        return status;

    pr__prod p;
    int irc = pr__prod_init(&p, &a);
    if (irc) {
        if (irc == PR_ENOMEM)
            fprintf(stderr, "piperec produce: out of memory\n");
        pr__prod_free(&p);
        return irc == PR_ENOMEM ? 1 : 2;
    }
    p.rk = pr__producer_new(&a, &p, &status);
    if (!p.rk) {
        pr__prod_free(&p);
        return status;
    }

    int rc;
    bool json_like =
        a.format == PR_MSG_JSON || a.format == PR_MSG_AVRO || a.format == PR_MSG_PROTOBUF;
    if (p.partition == RD_KAFKA_PARTITION_UA)
        p.n_parts = pr__topic_partitions(p.rk, a.topic);
    p.t0_ns = pr_clock_mono_ns(pr_clock_real());
    if (a.input)
        rc = pr__produce_file(&p, a.input);
    else if (json_like)
        rc = pr__produce_gen_json(&p, a.gen, a.seed);
    else if (a.format == PR_MSG_CRITEO_TSV)
        rc = pr__produce_gen_tsv(&p, a.gen, a.seed);
    else
        rc = pr__produce_gen_events(&p, a.gen, a.seed);
    if (!rc)
        rc = pr__flush_msg(&p);
    pr__produce_finish(&p);
    rd_kafka_destroy(p.rk);
    pr__prod_free(&p);
    return rc || p.failed || p.delivered != p.messages ? 1 : 0;
}
