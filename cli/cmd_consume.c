/*
 * cmd_consume.c — `piperec consume`: the reference trainer client.
 *
 *   piperec consume --connect HOST:PORT --pipeline P [--count N] [--credits K]
 *                   [--output DIR] [--client-id ID] [--idle-timeout-ms MS]
 *                   [--connect-timeout-ms MS] [--quiet]
 *                   [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]
 *                   [--token-file FILE]
 *
 * Subscribes to a pipeline's trainer stream (sinks/include/pr_trainer_client.h),
 * receives batches, checks their sequence numbers (a repeat is an error; a
 * lower number than one already seen is counted as out of order, which is
 * normal after another trainer's batches were redelivered to this one),
 * acks each one after it is written, optionally appends every batch to one
 * .npy set in DIR (dense.npy, sparse.npy, labels.npy, meta.json), and prints
 * a summary. Stops after N batches, on EOF from the server, after an idle
 * timeout, or on SIGINT/SIGTERM. Exit: 0 ok, 1 runtime error, 2 usage.
 *
 * Connecting is retried with exponential backoff (100 ms doubling to 2 s)
 * until --connect-timeout-ms, so a trainer started before piperec (or during
 * its restart) waits instead of failing; a server Error (unknown pipeline,
 * bad version) is not retried. The summary's rows/s is printed only over a
 * window of at least one second and two batches ("n/a" otherwise): a rate
 * taken over a few microseconds says nothing.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "pr_cli.h"
#include "pr_log.h"
#include "pr_npy.h"
#include "pr_trainer_client.h"

static volatile sig_atomic_t consume_stop;

static void on_signal(int sig)
{
    (void)sig;
    consume_stop = 1;
}

typedef struct consume_opts {
    const char *connect;
    const char *pipeline;
    uint64_t count;
    uint32_t credits;
    const char *output;
    const char *client_id;
    int64_t idle_timeout_ms;
    int64_t connect_timeout_ms;
    int quiet;
    int tls;
    const char *tls_ca, *tls_cert, *tls_key, *token_file;
} consume_opts;

static const struct option consume_longopts[] = {
    {"connect", required_argument, NULL, 'c'},
    {"pipeline", required_argument, NULL, 'p'},
    {"count", required_argument, NULL, 'n'},
    {"credits", required_argument, NULL, 'k'},
    {"output", required_argument, NULL, 'o'},
    {"client-id", required_argument, NULL, 'i'},
    {"idle-timeout-ms", required_argument, NULL, 't'},
    {"connect-timeout-ms", required_argument, NULL, 'T'},
    {"quiet", no_argument, NULL, 'q'},
    {"tls", no_argument, NULL, 'S'},
    {"tls-ca", required_argument, NULL, 'A'},
    {"tls-cert", required_argument, NULL, 'C'},
    {"tls-key", required_argument, NULL, 'K'},
    {"token-file", required_argument, NULL, 'F'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void consume_usage(FILE *f)
{
    fprintf(
        f,
        "usage: piperec consume --connect HOST:PORT --pipeline P [options]\n"
        "  --count N            stop after N batches (default: until EOF or SIGINT)\n"
        "  --credits K          credit window: unacked batches in flight (default 8)\n"
        "  --output DIR         append every batch to DIR/{dense,sparse,labels}.npy + meta.json\n"
        "  --client-id ID       name shown in the server's logs\n"
        "  --idle-timeout-ms MS stop when no batch came for MS ms (default: wait forever)\n"
        "  --connect-timeout-ms MS  keep retrying the connection for MS ms (default 30000;\n"
        "                       0: try once)\n"
        "  --quiet              only the summary\n"
        "  --tls                TLS, server checked against the system CAs\n"
        "  --tls-ca FILE        TLS, server checked against the CAs in FILE (PEM)\n"
        "  --tls-cert FILE      client certificate for mutual TLS (with --tls-key)\n"
        "  --tls-key FILE       its private key\n"
        "  --token-file FILE    send the bearer token in FILE (first non-comment line)\n");
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The optional .npy output: one set of files, batches appended in arrival order. */
typedef struct npy_out {
    pr_npy_writer *dense, *sparse, *labels;
    FILE *meta;
    char meta_path[4096];
    void *scratch;
    size_t scratch_cap;
    uint64_t rows;
    uint64_t batches;
} npy_out;

static int out_open(npy_out *o, const char *dir, const pr_trainer_info *in, char *err, size_t es)
{
    char p[4096];
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return pr_seterr(err, es, PR_EIO, "--output: cannot create %s: %s", dir, strerror(errno));
    int rc;
    snprintf(p, sizeof(p), "%s/dense.npy", dir);
    if ((rc = pr_npy_open(&o->dense, p, PR_NPY_F32, in->n_dense, err, es)) < 0)
        return rc;
    snprintf(p, sizeof(p), "%s/sparse.npy", dir);
    if ((rc = pr_npy_open(&o->sparse, p, in->sparse_width == 8 ? PR_NPY_I64 : PR_NPY_I32,
                          in->n_sparse, err, es)) < 0)
        return rc;
    snprintf(p, sizeof(p), "%s/labels.npy", dir);
    if ((rc = pr_npy_open(&o->labels, p, PR_NPY_I32, 0, err, es)) < 0)
        return rc;
    snprintf(o->meta_path, sizeof(o->meta_path), "%s/meta.json", dir);
    if (!(o->meta = fopen(o->meta_path, "w")))
        return pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
    fprintf(o->meta, "{\n  \"pipeline\": \"%s\",\n  \"batches\": [", in->pipeline);
    return 0;
}

/* Tensors in a view may be unaligned: copy into aligned scratch first. */
static const void *aligned(npy_out *o, const uint8_t *p, size_t n)
{
    if (n > o->scratch_cap) {
        free(o->scratch);
        o->scratch_cap = n * 2;
        o->scratch = aligned_alloc(64, (o->scratch_cap + 63) & ~(size_t)63);
        if (!o->scratch) {
            o->scratch_cap = 0;
            return NULL;
        }
    }
    memcpy(o->scratch, p, n);
    return o->scratch;
}

static int out_write(npy_out *o, const pr_batch_view *v, char *err, size_t es)
{
    const void *d;
    int rc;
    if (!(d = aligned(o, v->dense, v->dense_len)) ||
        (rc = pr_npy_append_cols(o->dense, d, v->rows, v->rows, err, es)) < 0)
        return d ? rc : PR_ENOMEM;
    if (!(d = aligned(o, v->sparse, v->sparse_len)) ||
        (rc = pr_npy_append_cols(o->sparse, d, v->rows, v->rows, err, es)) < 0)
        return d ? rc : PR_ENOMEM;
    if (v->labels_len) {
        if (!(d = aligned(o, v->labels, v->labels_len)) ||
            (rc = pr_npy_append_cols(o->labels, d, v->rows, v->rows, err, es)) < 0)
            return d ? rc : PR_ENOMEM;
    } else {
        int32_t zero[256] = {0};
        for (uint32_t r = 0; r < v->rows; r += 256) {
            uint32_t k = v->rows - r < 256 ? v->rows - r : 256;
            if ((rc = pr_npy_append_cols(o->labels, zero, k, k, err, es)) < 0)
                return rc;
        }
    }
    fprintf(o->meta,
            "%s\n    {\"epoch\": %llu, \"seq\": %llu, \"rows\": %u, \"row_start\": %llu, "
            "\"min_event_time_ms\": %lld, "
            "\"max_event_time_ms\": %lld, \"emit_time_ms\": %lld, \"offsets\": [",
            o->batches ? "," : "", (unsigned long long)v->epoch, (unsigned long long)v->seq,
            v->rows, (unsigned long long)o->rows, (long long)v->min_event_time_ms,
            (long long)v->max_event_time_ms, (long long)v->emit_time_ms);
    for (uint32_t i = 0; i < v->n_ranges; i++) {
        const pr_batch_view_range *r = &v->ranges[i];
        fprintf(o->meta,
                "%s{\"topic\": \"%.*s\", \"partition\": %d, \"first\": %lld, \"last\": %lld, "
                "\"rows\": %u}",
                i ? ", " : "", (int)r->topic_len, r->topic, r->partition,
                (long long)r->first_offset, (long long)r->last_offset, r->rows);
    }
    fprintf(o->meta, "], \"replica\": \"");
    for (size_t i = 0; i < v->replica_len; i++) {
        unsigned char ch = (unsigned char)v->replica[i];
        if (ch == '"' || ch == '\\')
            fprintf(o->meta, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(o->meta, "\\u%04x", ch);
        else
            fputc(ch, o->meta);
    }
    fprintf(o->meta, "\", \"vocab_sizes\": [");
    for (uint32_t i = 0; i < v->n_vocab_sizes; i++)
        fprintf(o->meta, "%s%llu", i ? ", " : "", (unsigned long long)v->vocab_sizes[i]);
    fprintf(o->meta, "]}");
    o->rows += v->rows;
    o->batches++;
    return 0;
}

static int out_close(npy_out *o, char *err, size_t es)
{
    int rc = 0, r;
    if (o->dense && (r = pr_npy_close(o->dense, err, es)) < 0)
        rc = r;
    if (o->sparse && (r = pr_npy_close(o->sparse, err, es)) < 0)
        rc = r;
    if (o->labels && (r = pr_npy_close(o->labels, err, es)) < 0)
        rc = r;
    if (o->meta) {
        fprintf(o->meta, "\n  ],\n  \"rows\": %llu\n}\n", (unsigned long long)o->rows);
        if (fclose(o->meta) != 0 && rc == 0)
            rc = pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
    }
    free(o->scratch);
    memset(o, 0, sizeof(*o));
    return rc;
}

/* Parse argv into opt. Returns true when the command should run; otherwise
 * *status is the exit code (0 after --help, 2 on a usage error). */
static bool consume_parse(int argc, char **argv, consume_opts *opt, int *status)
{
    *opt = (consume_opts){.credits = 8, .idle_timeout_ms = -1, .connect_timeout_ms = 30000};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:p:n:k:o:i:t:T:qSA:C:K:F:h", consume_longopts, NULL)) !=
           -1) {
        switch (ch) {
        case 'c':
            opt->connect = optarg;
            break;
        case 'p':
            opt->pipeline = optarg;
            break;
        case 'n':
            opt->count = strtoull(optarg, NULL, 10);
            break;
        case 'k':
            opt->credits = (uint32_t)strtoul(optarg, NULL, 10);
            break;
        case 'o':
            opt->output = optarg;
            break;
        case 'i':
            opt->client_id = optarg;
            break;
        case 't':
            opt->idle_timeout_ms = strtoll(optarg, NULL, 10);
            break;
        case 'T':
            opt->connect_timeout_ms = strtoll(optarg, NULL, 10);
            break;
        case 'q':
            opt->quiet = 1;
            break;
        case 'S':
            opt->tls = 1;
            break;
        case 'A':
            opt->tls_ca = optarg;
            break;
        case 'C':
            opt->tls_cert = optarg;
            break;
        case 'K':
            opt->tls_key = optarg;
            break;
        case 'F':
            opt->token_file = optarg;
            break;
        case 'h':
            consume_usage(stdout);
            *status = 0;
            return false;
        default:
            consume_usage(stderr);
            *status = 2;
            return false;
        }
    }
    if (!opt->connect || !opt->pipeline || opt->credits == 0) {
        fprintf(stderr,
                "piperec consume: --connect and --pipeline are required (and --credits >= 1)\n");
        consume_usage(stderr);
        *status = 2;
        return false;
    }
    return true;
}

/* What was received, for the sequence checks and the summary. */
typedef struct consume_tally {
    uint64_t batches, rows, first_seq, last_seq, max_seq, out_of_order, repeats;
    uint64_t epoch; /* of the batches being tallied: a higher one starts afresh */
    uint64_t *seen; /* bitmap of sequences received: catches repeats */
    size_t seen_cap;
    double t_first, t_last;
} consume_tally;

/* Record sequence number seq: a repeat is reported, a number not above the
 * highest seen counts as out of order. PR_ENOMEM when the bitmap cannot grow. */
static int tally_seq(consume_tally *t, uint64_t epoch, uint64_t seq)
{
    if (epoch < t->epoch) {
        /* (epoch, seq) only grows: an older epoch is a replay from before a restart. */
        t->out_of_order++;
        return 0;
    }
    if (epoch > t->epoch) {
        if (t->batches)
            fprintf(stderr, "piperec consume: server restarted: epoch %llu -> %llu\n",
                    (unsigned long long)t->epoch, (unsigned long long)epoch);
        t->epoch = epoch;
        t->max_seq = 0;
        if (t->seen)
            memset(t->seen, 0, t->seen_cap * sizeof(*t->seen));
    }
    if (seq >= t->seen_cap * 64) {
        size_t nc = (size_t)(seq / 64 + 1) * 2;
        uint64_t *ns = realloc(t->seen, nc * sizeof(*ns));
        if (!ns)
            return PR_ENOMEM;
        memset(ns + t->seen_cap, 0, (nc - t->seen_cap) * sizeof(*ns));
        t->seen = ns;
        t->seen_cap = nc;
    }
    if (t->seen[seq / 64] >> (seq % 64) & 1) {
        t->repeats++;
        fprintf(stderr, "piperec consume: batch %llu received twice\n", (unsigned long long)seq);
    }
    t->seen[seq / 64] |= (uint64_t)1 << (seq % 64);
    if (seq <= t->max_seq)
        t->out_of_order++;
    else
        t->max_seq = seq;
    return 0;
}

/* One received batch: check its sequence, write it out, ack it. Clears v.
 * Returns 0, or 1 after a runtime error. */
static int consume_batch(pr_trainer_client *c, const consume_opts *opt, npy_out *out,
                         consume_tally *t, pr_batch_view *v)
{
    char err[512];
    if (tally_seq(t, v->epoch, v->seq) < 0) {
        pr_batch_view_fini(v);
        return 1;
    }
    if (!t->batches) {
        t->first_seq = v->seq;
        t->t_first = mono_s();
    }
    t->last_seq = v->seq;
    if (opt->output && out_write(out, v, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        pr_batch_view_fini(v);
        return 1;
    }
    t->batches++;
    t->rows += v->rows;
    t->t_last = mono_s();
    uint64_t seq = v->seq;
    pr_batch_view_fini(v);
    /* Ack after the batch is written: the server may then commit its offsets. */
    if (pr_trainer_client_ack(c, seq) < 0) {
        fprintf(stderr, "piperec consume: cannot ack batch %llu\n", (unsigned long long)seq);
        return 1;
    }
    return 0;
}

/* Receive until --count, EOF, the idle timeout, an error or a signal.
 * *end says why it stopped; returns 0, or 1 after a runtime error. */
static int consume_loop(pr_trainer_client *c, const consume_opts *opt, npy_out *out,
                        consume_tally *t, const char **end)
{
    char err[512];
    int rc = 0;
    double idle_since = mono_s();
    *end = "stopped";
    while (!consume_stop && (opt->count == 0 || t->batches < opt->count)) {
        pr_batch_view v;
        int r = pr_trainer_client_next(c, &v, 200, err, sizeof(err));
        if (r == 0) {
            if (opt->idle_timeout_ms >= 0 &&
                (mono_s() - idle_since) * 1e3 >= (double)opt->idle_timeout_ms) {
                *end = "idle timeout";
                break;
            }
            continue;
        }
        if (r < 0) {
            if (r == PR_EIO && !strcmp(err, "server closed the connection")) {
                *end = "server closed the connection";
            } else {
                fprintf(stderr, "piperec consume: %s\n", err);
                rc = 1;
            }
            break;
        }
        idle_since = mono_s();
        if ((rc = consume_batch(c, opt, out, t, &v)) != 0)
            break;
    }
    if (consume_stop)
        *end = "interrupted";
    else if (opt->count && t->batches >= opt->count)
        *end = "count reached";
    return rc;
}

/* rows/s between the first and the last batch, or "n/a" when that window is
 * too short to mean anything (one batch, or under a second). */
static void consume_rate(const consume_tally *t, char *buf, size_t n)
{
    double span = t->t_last - t->t_first;
    if (t->batches < 2 || span < 1.0)
        snprintf(buf, n, "n/a rows/s");
    else
        snprintf(buf, n, "%.0f rows/s", (double)t->rows / span);
}

static void consume_summary(const char *end, const consume_tally *t, double t0)
{
    char rate[48];
    consume_rate(t, rate, sizeof(rate));
    printf("piperec consume: %s: %llu batches, %llu rows, seq %llu..%llu (max %llu), %llu out of "
           "order, "
           "%llu repeated, %s, %.2f s total, epoch %llu\n",
           end, (unsigned long long)t->batches, (unsigned long long)t->rows,
           (unsigned long long)t->first_seq, (unsigned long long)t->last_seq,
           (unsigned long long)t->max_seq, (unsigned long long)t->out_of_order,
           (unsigned long long)t->repeats, rate, mono_s() - t0, (unsigned long long)t->epoch);
}

/* Open with retries: connection-level failures (refused, unreachable, name
 * not resolved yet, no answer in time) are retried with backoff until the
 * deadline; a server Error or a usage problem is final. */
static int consume_open(const consume_opts *opt, const pr_trainer_client_opts *co,
                        pr_trainer_client **c, char *err, size_t es)
{
    double deadline = mono_s() + (double)opt->connect_timeout_ms / 1e3;
    int backoff_ms = 100, tries = 0;
    for (;;) {
        int rc = pr_trainer_client_open(co, c, err, es);
        tries++;
        if (rc == 0 || (rc != PR_EIO && rc != PR_ETIMEDOUT) || consume_stop)
            return rc;
        double left = deadline - mono_s();
        if (left <= 0) {
            if (tries > 1) {
                size_t l = strlen(err);
                snprintf(err + l, es - l, " (gave up after %d tries in %lld ms)", tries,
                         (long long)opt->connect_timeout_ms);
            }
            return rc;
        }
        if (!opt->quiet && tries == 1)
            fprintf(stderr, "piperec consume: %s; retrying for up to %lld ms\n", err,
                    (long long)opt->connect_timeout_ms);
        int ms = backoff_ms < left * 1e3 ? backoff_ms : (int)(left * 1e3) + 1;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff_ms = backoff_ms * 2 > 2000 ? 2000 : backoff_ms * 2;
    }
}

int pr_cli_cmd_consume(int argc, char **argv)
{
    consume_opts opt;
    int status;
    if (!consume_parse(argc, argv, &opt, &status))
        return status;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    consume_stop = 0;

    char err[512];
    pr_trainer_client_opts co = {.connect = opt.connect,
                                 .pipeline = opt.pipeline,
                                 .credits = opt.credits,
                                 .client_id = opt.client_id,
                                 .tls = opt.tls,
                                 .tls_ca = opt.tls_ca,
                                 .tls_cert = opt.tls_cert,
                                 .tls_key = opt.tls_key};
    char token[4096];
    if (opt.token_file) {
        if (pr_trainer_client_read_token(opt.token_file, token, sizeof(token), err, sizeof(err)) <
            0) {
            fprintf(stderr, "piperec consume: --token-file: %s\n", err);
            return 2;
        }
        co.token = token;
    }
    if ((opt.tls_cert != NULL) != (opt.tls_key != NULL)) {
        fprintf(stderr, "piperec consume: --tls-cert and --tls-key go together\n");
        return 2;
    }
    pr_trainer_client *c;
    if (consume_open(&opt, &co, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        return 1;
    }
    const pr_trainer_info *in = pr_trainer_client_info(c);
    if (!opt.quiet)
        fprintf(
            stderr,
            "piperec consume: subscribed to %s at %s: %u dense, %u sparse (int%u), %u credits\n",
            in->pipeline, opt.connect, in->n_dense, in->n_sparse, in->sparse_width * 8,
            in->credits);

    npy_out out = {0};
    if (opt.output && out_open(&out, opt.output, in, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        out_close(&out, err, sizeof(err));
        pr_trainer_client_close(c);
        return 1;
    }

    consume_tally t = {0};
    const char *end;
    double t0 = mono_s();
    int rc = consume_loop(c, &opt, &out, &t, &end);
    if (opt.output && out_close(&out, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        rc = 1;
    }
    pr_trainer_client_close(c);
    free(t.seen);
    consume_summary(end, &t, t0);
    if (t.repeats)
        rc = 1;
    return rc;
}
