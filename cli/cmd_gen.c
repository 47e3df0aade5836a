/*
 * cmd_gen.c — `piperec gen --rows N --seed S --output PATH|- [--format tsv|binary|json]
 * [--batch-events N] [--threads N] [--first-row R] [--signal 0|1] [--zipf S]`: synthetic
 * Criteo-shaped data, or a JSON clickstream (tools/gen/include/pr_gen.h; formats in
 * docs/formats.md).
 *
 * Rows are pure functions of (seed, row), so generation is split into fixed
 * chunks that worker threads fill in parallel while this thread writes them
 * out in order; the output never depends on --threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_varint.h"

#define PR__GEN_CHUNK_ROWS 16384u
#define PR__GEN_SLOTS      8

typedef enum {
    PR__GEN_TSV = 0,
    PR__GEN_BINARY = 1,
    PR__GEN_JSON = 2,
    PR__GEN_AVRO = 3,
    PR__GEN_PROTOBUF = 4,
    PR__GEN__COUNT
} pr__gen_format;

static const char *const pr__gen_formats[PR__GEN__COUNT] = {"tsv", "binary", "json", "avro",
                                                            "protobuf"};

typedef struct pr__gen_slot {
    uint64_t chunk; /* chunk index held, valid when ready */
    bool ready;
    char *buf;
    size_t len;
} pr__gen_slot;

typedef struct pr__gen_job {
    const pr_gen *gen;
    uint64_t seed; /* json, avro */
    pr__gen_format format;
    const char *avro_schema;   /* avro: the writer schema's text */
    int64_t schema_id;         /* avro: registry framing with this id, -1 = plain */
    bool failed;               /* avro, protobuf: a row did not encode (atomic) */
    const pr_pbuser_desc *pbd; /* protobuf: the message (read only: shared by workers) */
    uint64_t first_row, rows;
    uint32_t batch_events;
    uint64_t n_chunks;
    size_t buf_cap;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t next_chunk; /* next chunk a worker takes */
    uint64_t written;    /* chunks written out so far */
    pr__gen_slot slots[PR__GEN_SLOTS];
} pr__gen_job;

/* Rows [r0, r0 + n) of the JSON clickstream as varint-delimited Avro records
 * (each an unsigned LEB128 length, then the message as on Kafka). A writer
 * per chunk: workers share nothing. 0 when a row does not fit the schema. */
static size_t pr__gen_avro_chunk(pr__gen_job *j, uint64_t r0, uint64_t n, char *buf)
{
    char err[256], ev[PR_GEN_JSON_LINE_MAX];
    pr_avro_writer *w = pr_avro_writer_new(j->avro_schema, err, sizeof(err));
    uint8_t *rec = NULL;
    size_t len = 0, rlen = 0, rcap = 0;
    for (uint64_t i = 0; w && i < n; i++) {
        size_t el = pr_gen_json_event(j->seed, r0 + i, ev, sizeof(ev));
        if (pr_avro_from_json(w, ev, el, j->schema_id, &rec, &rlen, &rcap, err, sizeof(err)) ||
            len + rlen + 10 > j->buf_cap) {
            fprintf(stderr, "piperec gen: row %" PRIu64 ": %s\n", r0 + i, err);
            __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
            len = 0;
            break;
        }
        uint64_t u = rlen;
        do {
            buf[len++] = (char)((u & 0x7f) | (u > 0x7f ? 0x80 : 0));
            u >>= 7;
        } while (u);
        memcpy(buf + len, rec, rlen);
        len += rlen;
    }
    if (!w) {
        fprintf(stderr, "piperec gen: --avro-schema: %s\n", err);
        __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
    }
    free(rec);
    pr_avro_writer_free(w);
    return len;
}

/* Rows [r0, r0 + n) of the JSON clickstream as varint-delimited messages of
 * the user's .proto (pr_pbuser_encode_json), framed when schema_id >= 0. */
static size_t pr__gen_protobuf_chunk(pr__gen_job *j, uint64_t r0, uint64_t n, char *buf)
{
    char err[256], ev[PR_GEN_JSON_LINE_MAX];
    uint8_t *rec = NULL;
    size_t len = 0, rcap = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t el = pr_gen_json_event(j->seed, r0 + i, ev, sizeof(ev));
        int rl = pr_pbuser_encode_json(j->pbd, ev, el, j->schema_id >= 0,
                                       (uint32_t)(j->schema_id >= 0 ? j->schema_id : 0), &rec,
                                       &rcap, err, sizeof(err));
        if (rl < 0 || len + (size_t)rl + 10 > j->buf_cap) {
            fprintf(stderr, "piperec gen: row %" PRIu64 ": %s\n", r0 + i,
                    rl < 0 ? err : "too large");
            __atomic_store_n(&j->failed, true, __ATOMIC_RELAXED);
            len = 0;
            break;
        }
        uint8_t *p = pr_varint_put((uint8_t *)buf + len, (uint64_t)rl);
        len = (size_t)((char *)p - buf);
        memcpy(buf + len, rec, (size_t)rl);
        len += (size_t)rl;
    }
    free(rec);
    return len;
}

static size_t pr__gen_chunk(pr__gen_job *j, uint64_t k, char *buf)
{
    uint64_t r0 = j->first_row + k * PR__GEN_CHUNK_ROWS;
    uint64_t n = j->rows - k * PR__GEN_CHUNK_ROWS;
    if (n > PR__GEN_CHUNK_ROWS)
        n = PR__GEN_CHUNK_ROWS;
    if (j->format == PR__GEN_TSV)
        return pr_gen_tsv(j->gen, r0, n, buf, j->buf_cap, NULL);
    if (j->format == PR__GEN_JSON)
        return pr_gen_json_lines(j->seed, r0, n, buf, j->buf_cap, NULL);
    if (j->format == PR__GEN_AVRO)
        return pr__gen_avro_chunk(j, r0, n, buf);
    if (j->format == PR__GEN_PROTOBUF)
        return pr__gen_protobuf_chunk(j, r0, n, buf);
    size_t len = 0;
    for (uint64_t i = 0; i < n; i += j->batch_events) {
        uint32_t m = (uint32_t)(n - i < j->batch_events ? n - i : j->batch_events);
        len += pr_gen_pb_batch(j->gen, r0 + i, m, (uint8_t *)buf + len, j->buf_cap - len);
    }
    return len;
}

static void *pr__gen_worker(void *arg)
{
    pr__gen_job *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        /* A chunk may only go into its slot once the chunk that last used
         * the slot has been written. */
        while (j->next_chunk < j->n_chunks && j->next_chunk >= j->written + PR__GEN_SLOTS)
            pthread_cond_wait(&j->cv, &j->mu);
        if (j->next_chunk >= j->n_chunks)
            break;
        uint64_t k = j->next_chunk++;
        pr__gen_slot *s = &j->slots[k % PR__GEN_SLOTS];
        pthread_mutex_unlock(&j->mu);
        size_t len = pr__gen_chunk(j, k, s->buf);
        pthread_mutex_lock(&j->mu);
        s->len = len;
        s->chunk = k;
        s->ready = true;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static int pr__write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static void pr__gen_usage(FILE *f)
{
    fprintf(f, "usage: piperec gen --rows N --output PATH|- [--seed S]\n"
               "                   [--format tsv|binary|json|avro|protobuf]\n"
               "                   [--avro-schema FILE] [--schema-id N|plain] [--batch-events N] "
               "[--threads N] [--first-row R]\n"
               "                   [--descriptor-set FILE --message M]\n"
               "                   [--signal 0|1] [--zipf S]\n"
               "  Criteo-Kaggle-shaped synthetic data, deterministic for (seed, row).\n"
               "  tsv: label, 13 ints, 26 hex (like the Kaggle train.txt).\n"
               "  binary: varint-length-delimited piperec.v1.EventBatch messages of\n"
               "  --batch-events events each (default 256); see docs/formats.md.\n"
               "  json: a clickstream, one JSON object per line (users, items,\n"
               "  categories, tags, histories, labels click/purchase/dwell_s, missing\n"
               "  fields, a planted user x category and history signal), for\n"
               "  examples/clickstream.yaml; --signal and --zipf do not apply.\n"
               "  avro: the same clickstream as Avro records under --avro-schema FILE\n"
               "  (examples/clickstream.avsc), registry-framed with --schema-id N\n"
               "  (default 1; 'plain': no framing), each record varint-length-prefixed\n"
               "  (the file `piperec process` reads for source.format avro).\n"
               "  protobuf: the same clickstream as message M of --descriptor-set FILE\n"
               "  (e.g. tests/data/pbuser_clickstream.proto's shop.Click), plain or framed\n"
               "  with --schema-id N, each varint-length-prefixed (source.format protobuf).\n"
               "  --signal 1: labels depend on a few sparse and dense features plus\n"
               "  noise (about 20%% positive, learnable: held-out AUC near 0.88) instead\n"
               "  of an independent 3%% coin; features are unchanged. Default 0.\n"
               "  --zipf S: sparse ranks from an exact Zipf law with exponent S\n"
               "  (0 < S <= 10; P(rank r) ~ (r+1)^-S over each column's cardinality)\n"
               "  instead of the default power law, e.g. for hot-set tests.\n");
}

static int pr__parse_u64(const char *s, uint64_t *out)
{
    char *e;
    if (!s || !*s || *s == '-')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &e, 0);
    if (errno || *e)
        return -1;
    *out = v;
    return 0;
}

/* --zipf S: 0 < S <= PR_GEN_ZIPF_MAX, or -1. */
static int pr__parse_zipf(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v <= 0 || v > PR_GEN_ZIPF_MAX)
        return -1;
    *out = v;
    return 0;
}

/* --avro-schema (read whole) and --schema-id (a number, or plain = -1). */
static int pr__gen_avro_args(const char *path, const char *id, char **text, int64_t *sid)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "piperec gen: --format avro needs --avro-schema FILE%s%s\n",
                path ? ": cannot open " : "", path ? path : "");
        return 2;
    }
    size_t cap = 1 << 20, n;
    *text = calloc(1, cap + 1);
    n = *text ? fread(*text, 1, cap, f) : 0;
    fclose(f);
    if (!*text || n == cap) {
        fprintf(stderr, "piperec gen: --avro-schema: too large\n");
        return 2;
    }
    char *end;
    *sid = !strcmp(id, "plain") ? -1 : strtoll(id, &end, 10);
    if (strcmp(id, "plain") && (*end || *sid < 0 || *sid > UINT32_MAX)) {
        fprintf(stderr, "piperec gen: --schema-id: a 32-bit id or plain, got '%s'\n", id);
        return 2;
    }
    return 0;
}

/* --descriptor-set and --message (loaded), --schema-id (absent or plain: -1). */
static pr_pbuser_desc *pr__gen_protobuf_args(const char *file, const char *message, const char *id,
                                             int64_t *sid)
{
    char err[512], *end = NULL;
    *sid = !id || !strcmp(id, "plain") ? -1 : strtoll(id, &end, 10);
    if (end && (*end || *sid < 0 || *sid > UINT32_MAX)) {
        fprintf(stderr, "piperec gen: --schema-id: a 32-bit id or plain, got '%s'\n", id);
        return NULL;
    }
    if (!file || !message) {
        fprintf(stderr, "piperec gen: --format protobuf needs --descriptor-set FILE and "
                        "--message M\n");
        return NULL;
    }
    pr_pbuser_desc *d = pr_pbuser_desc_load(file, message, err, sizeof(err));
    if (!d)
        fprintf(stderr, "piperec gen: %s\n", err);
    return d;
}

/* The output: stdout for "-", else the file, created or truncated; -1 after
 * saying why. */
static int pr__gen_open(const char *output)
{
    if (!strcmp(output, "-"))
        return 1;
    int fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fprintf(stderr, "piperec gen: %s: %s\n", output, strerror(errno));
    return fd;
}

/* The format's own options: avro's writer schema, protobuf's message; the
 * framing's schema id (avro: default 1; protobuf: default plain). 0 or 2. */
static int pr__gen_format_args(int fmt, const char *avro_schema, const char *schema_id,
                               const char *descriptor_set, const char *message, char **avsc,
                               pr_pbuser_desc **pbd, int64_t *sid)
{
    if (fmt == PR__GEN_AVRO)
        return pr__gen_avro_args(avro_schema, schema_id ? schema_id : "1", avsc, sid);
    if (fmt == PR__GEN_PROTOBUF)
        return (*pbd = pr__gen_protobuf_args(descriptor_set, message, schema_id, sid)) ? 0 : 2;
    return 0;
}

/* Start `threads` generators on j and write their chunks to fd in order
 * (all here when no thread starts). 0, or 1 after a write error. */
static int pr__gen_run(pr__gen_job *j, uint64_t threads, int fd, const char *output)
{
    int rc = 0;
    pthread_t tids[64];
    int started = 0;
    for (uint64_t t = 0; t < threads; t++)
        if (pthread_create(&tids[started], NULL, pr__gen_worker, j) == 0)
            started++;
    if (!started)
        pr__gen_worker(j); /* no threads: generate everything here, in order */
    pthread_mutex_lock(&j->mu);
    while (j->written < j->n_chunks) {
        pr__gen_slot *s = &j->slots[j->written % PR__GEN_SLOTS];
        while (!(s->ready && s->chunk == j->written))
            pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
        int wr = rc ? 0 : pr__write_all(fd, s->buf, s->len);
        if (wr < 0 && !rc) {
            fprintf(stderr, "piperec gen: %s: %s\n", output, strerror(errno));
            rc = 1;
        }
        pthread_mutex_lock(&j->mu);
        s->ready = false;
        j->written++;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    return rc;
}

/* The format's index, or -1 after saying what is wrong with the options. */
static int pr__gen_check(const char *format, bool have_rows, const char *output, uint64_t threads,
                         uint64_t batch_events, uint64_t signal)
{
    int fmt = -1;
    for (int k = 0; k < PR__GEN__COUNT; k++)
        if (!strcmp(format, pr__gen_formats[k]))
            fmt = k;
    if (!have_rows || !output || fmt < 0 || threads < 1 || threads > 64 || batch_events < 1 ||
        batch_events > 1u << 20 || signal > PR_GEN_SIGNAL_MAX) {
        fprintf(stderr, "piperec gen: %s\n",
                !have_rows ? "--rows is required"
                : !output  ? "--output is required"
                : fmt < 0  ? "--format must be tsv, binary, json, avro or protobuf"
                : threads < 1 || threads > 64 ? "--threads must be 1..64"
                : signal > PR_GEN_SIGNAL_MAX  ? "--signal must be 0 (none) or 1 (planted signal)"
                                              : "--batch-events must be 1..1048576");
        pr__gen_usage(stderr);
        return -1;
    }
    return fmt;
}

int pr_cli_cmd_gen(int argc, char **argv)
{
    uint64_t rows = 0, seed = 1, threads = 2, batch_events = 256, first_row = 0, signal = 0;
    const char *output = NULL, *format = "tsv", *zipf = NULL, *avro_schema = NULL,
               *schema_id = NULL;
    const char *descriptor_set = NULL, *message = NULL;
    bool have_rows = false;

    struct {
        const char *name;
        uint64_t *u;
        const char **s;
    } opts[] = {
        {"--rows", &rows, NULL},           {"--seed", &seed, NULL},
        {"--threads", &threads, NULL},     {"--batch-events", &batch_events, NULL},
        {"--first-row", &first_row, NULL}, {"--output", NULL, &output},
        {"--format", NULL, &format},       {"--signal", &signal, NULL},
        {"--zipf", NULL, &zipf},           {"--avro-schema", NULL, &avro_schema},
        {"--schema-id", NULL, &schema_id}, {"--descriptor-set", NULL, &descriptor_set},
        {"--message", NULL, &message},
    };
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__gen_usage(stdout);
            return 0;
        }
        size_t k = 0, nk = sizeof(opts) / sizeof(opts[0]);
        while (k < nk && strcmp(argv[i], opts[k].name))
            k++;
        if (k == nk || i + 1 >= argc) {
            fprintf(stderr, "piperec gen: %s '%s'\n",
                    k == nk ? "unknown option" : "missing value for", argv[i]);
            pr__gen_usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        if (opts[k].s) {
            *opts[k].s = v;
        } else if (pr__parse_u64(v, opts[k].u) < 0) {
            fprintf(stderr, "piperec gen: %s: expected a non-negative integer, got '%s'\n",
                    opts[k].name, v);
            return 2;
        }
        if (opts[k].u == &rows)
            have_rows = true;
    }
    int fmt = pr__gen_check(format, have_rows, output, threads, batch_events, signal);
    if (fmt < 0)
        return 2;
    char *avsc = NULL;
    int64_t sid = -1;
    pr_pbuser_desc *pbd = NULL;
    if (pr__gen_format_args(fmt, avro_schema, schema_id, descriptor_set, message, &avsc, &pbd,
                            &sid))
        return 2;

    double zipf_s = 0;
    if (zipf && pr__parse_zipf(zipf, &zipf_s)) {
        fprintf(stderr, "piperec gen: --zipf: expected an exponent in (0, %g], got '%s'\n",
                PR_GEN_ZIPF_MAX, zipf);
        return 2;
    }

    int fd = pr__gen_open(output);
    if (fd < 0)
        return 1;

    pr__gen_job j = {0};
    int rc = 0;
    pr_gen *gen = pr_gen_new(seed);
    if (gen)
        pr_gen_set_signal(gen, (uint32_t)signal); /* range checked above */
    if (gen && zipf_s > 0 && pr_gen_set_zipf(gen, zipf_s)) {
        pr_gen_free(gen);
        gen = NULL; /* reported as out of memory below */
    }
    j.gen = gen;
    j.seed = seed;
    j.format = (pr__gen_format)fmt;
    j.avro_schema = avsc;
    j.pbd = pbd;
    j.schema_id = sid;
    j.first_row = first_row;
    j.rows = rows;
    j.batch_events = (uint32_t)batch_events;
    j.n_chunks = (rows + PR__GEN_CHUNK_ROWS - 1) / PR__GEN_CHUNK_ROWS;
    j.buf_cap =
        fmt == PR__GEN_TSV ? (size_t)PR__GEN_CHUNK_ROWS * PR_GEN_TSV_LINE_MAX
        : fmt == PR__GEN_JSON || fmt == PR__GEN_AVRO || fmt == PR__GEN_PROTOBUF
            ? (size_t)PR__GEN_CHUNK_ROWS * PR_GEN_JSON_LINE_MAX
            : pr_gen_pb_max(PR__GEN_CHUNK_ROWS) + 16 * (PR__GEN_CHUNK_ROWS / batch_events + 1);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.cv, NULL);
    bool oom = !j.gen;
    for (int s = 0; s < PR__GEN_SLOTS; s++)
        if (!(j.slots[s].buf = malloc(j.buf_cap)))
            oom = true;
    if (oom) {
        fprintf(stderr, "piperec gen: out of memory\n");
        rc = 1;
        goto out;
    }

    rc = pr__gen_run(&j, threads, fd, output);
    if (j.failed)
        rc = 1;
out:
    if (fd != 1 && close(fd) < 0 && !rc) {
        fprintf(stderr, "piperec gen: %s: %s\n", output, strerror(errno));
        rc = 1;
    }
    for (int s = 0; s < PR__GEN_SLOTS; s++)
        free(j.slots[s].buf);
    pr_gen_free((pr_gen *)j.gen);
    pthread_mutex_destroy(&j.mu);
    pthread_cond_destroy(&j.cv);
    free(avsc);
    pr_pbuser_desc_free(pbd);
    return rc;
}
