/*
 * bench_avro.c — Avro decode + extract per core (issue 23), three ways over
 * the same events (the clickstream of `piperec gen --format json`, encoded
 * under examples/clickstream.avsc, one plain Avro body per message):
 *
 *   reader   the plan alone: each record into a pr_json_block row (decode +
 *            extract, no schema rules), the generic path's equivalent;
 *   plan     piperec's reader (ingest/avro_reader.c: the compiled per-schema
 *            plan) through the declared schema's decoder, i.e. decode +
 *            extract + the schema's type rules + each feature's operators up
 *            to vocab, rows staged into 4096-row blocks: what `piperec run`
 *            does per message;
 *   generic  avro-c's generic values (avro_value_read of the whole record
 *            into a reused generic value, then each wanted path looked up
 *            through records, unions and arrays): the library's own way,
 *            without any of the schema's work;
 *   json     the same events as JSON text through the JSON decoder, for
 *            reference.
 *
 *   bench_avro [--events N] [--config YAML] [--schema AVSC] [--seed S]
 *
 * Times are this thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID): per core on
 * a shared machine. MB/s counts the bytes of each format's own messages.
 * bench/bench_avro.sh runs this beside a Python consumer (python3-avro).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <avro.h>

#include "pr_config.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_log.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct corpus {
    size_t n;
    uint8_t *avro;
    size_t *aoff, *alen, abytes;
    char *json;
    size_t *joff, *jlen, jbytes;
} corpus;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "bench_avro: cannot open %s\n", path);
        exit(1);
    }
    char *b = calloc(1, 1 << 20);
    size_t n = fread(b, 1, (1 << 20) - 1, f);
    fclose(f);
    b[n] = 0;
    return b;
}

static void build(corpus *c, size_t n, uint64_t seed, const char *schema)
{
    char err[256];
    pr_avro_writer *w = pr_avro_writer_new(schema, err, sizeof(err));
    if (!w) {
        fprintf(stderr, "bench_avro: %s\n", err);
        exit(1);
    }
    c->n = n;
    c->avro = malloc(n * PR_GEN_JSON_LINE_MAX);
    c->json = malloc(n * PR_GEN_JSON_LINE_MAX);
    c->aoff = malloc(n * sizeof(size_t));
    c->alen = malloc(n * sizeof(size_t));
    c->joff = malloc(n * sizeof(size_t));
    c->jlen = malloc(n * sizeof(size_t));
    uint8_t *rec = NULL;
    size_t rlen, rcap = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = pr_gen_json_event(seed, i, c->json + c->jbytes, PR_GEN_JSON_LINE_MAX);
        if (pr_avro_from_json(w, c->json + c->jbytes, l, -1, &rec, &rlen, &rcap, err,
                              sizeof(err))) {
            fprintf(stderr, "bench_avro: event %zu: %s\n", i, err);
            exit(1);
        }
        c->joff[i] = c->jbytes;
        c->jlen[i] = l;
        c->jbytes += l;
        memcpy(c->avro + c->abytes, rec, rlen);
        c->aoff[i] = c->abytes;
        c->alen[i] = rlen;
        c->abytes += rlen;
    }
    free(rec);
    pr_avro_writer_free(w);
}

static void count_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                         int64_t recno)
{
    (void)reason;
    (void)rec;
    (void)len;
    (void)recno;
    if (++*(uint64_t *)opaque == 1)
        fprintf(stderr, "bench_avro: reject: %s\n", detail);
}

/* Seconds of one pass through the declared schema's decoder: Avro (plan)
 * when `schema` is set, else JSON. */
static double run_decoder(const corpus *c, const pr_feature_schema *fs, const char *schema)
{
    char err[256];
    pr_json_decoder *d = pr_json_decoder_new(fs, err, sizeof(err));
    pr_avro_reader *r = d && schema ? pr_avro_reader_new(d, schema, NULL, PR_AVRO_FRAMING_PLAIN, 0,
                                                         err, sizeof(err))
                                    : NULL;
    if (!d || (schema && !r)) {
        fprintf(stderr, "bench_avro: %s\n", err);
        exit(1);
    }
    if (r)
        pr_json_decoder_set_reader(d, pr_avro_read, r);
    pr_block *b = pr_feature_block_new(fs, 4096, true);
    uint64_t rejects = 0, rows = 0;
    pr_decode_ctx ctx = {.json = d, .on_reject = count_reject, .opaque = &rejects};
    pr_msg_format fmt = schema ? PR_MSG_AVRO : PR_MSG_JSON;
    double t0 = now_s();
    for (size_t i = 0; i < c->n; i++) {
        uint32_t next = 0;
        const void *m = schema ? (const void *)(c->avro + c->aoff[i]) : c->json + c->joff[i];
        size_t len = schema ? c->alen[i] : c->jlen[i];
        if (pr_decode_message(fmt, &ctx, b, m, len, &next, NULL) == PR_EFULL) {
            rows += b->rows;
            pr_block_reset(b);
            i--;
        }
    }
    rows += b->rows;
    double t = now_s() - t0;
    if (rejects || rows != c->n) {
        fprintf(stderr, "bench_avro: %" PRIu64 " rows, %" PRIu64 " rejects\n", rows, rejects);
        exit(1);
    }
    pr_block_free(b);
    pr_json_decoder_free(d);
    pr_avro_reader_free(r);
    return t;
}

/* The reader alone (no schema rules, no operators): each record into one
 * row of a pr_json_block of the decoder's paths, as the generic path's
 * equivalent. */
static double run_reader(const corpus *c, pr_json_decoder *d, const char *schema)
{
    char err[256];
    const pr_json_path *paths;
    size_t n_paths = pr_json_decoder_paths(d, &paths);
    pr_json_extractor *x = pr_json_extractor_new(paths, n_paths, 0, err, sizeof(err));
    pr_json_block *jb = x ? pr_json_block_new(x, 1) : NULL;
    pr_avro_reader *r =
        jb ? pr_avro_reader_new(d, schema, NULL, PR_AVRO_FRAMING_PLAIN, 0, err, sizeof(err)) : NULL;
    if (!r) {
        fprintf(stderr, "bench_avro: %s\n", err);
        exit(1);
    }
    pr_json_reject rej;
    double t0 = now_s();
    for (size_t i = 0; i < c->n; i++) {
        pr_json_block_reset(jb);
        if (pr_avro_read(r, jb, c->avro + c->aoff[i], c->alen[i], &rej)) {
            fprintf(stderr, "bench_avro: reader %zu: %s\n", i, rej.detail);
            exit(1);
        }
    }
    double t = now_s() - t0;
    pr_avro_reader_free(r);
    pr_json_block_free(jb);
    pr_json_extractor_free(x);
    return t;
}

/* One dotted path in a generic value: records by name, unions through their
 * branch; arrays summed over. */
static uint64_t lookup(avro_value_t *v, const char *path)
{
    avro_value_t cur = *v, next, branch;
    char seg[64];
    while (*path) {
        size_t n = strcspn(path, ".");
        snprintf(seg, sizeof(seg), "%.*s", (int)n, path);
        path += n + (path[n] == '.');
        if (avro_value_get_type(&cur) == AVRO_UNION) {
            if (avro_value_get_current_branch(&cur, &branch))
                return 0;
            cur = branch;
        }
        if (avro_value_get_type(&cur) != AVRO_RECORD ||
            avro_value_get_by_name(&cur, seg, &next, NULL))
            return 0;
        cur = next;
    }
    if (avro_value_get_type(&cur) == AVRO_UNION && !avro_value_get_current_branch(&cur, &branch))
        cur = branch;
    int64_t l = 0;
    double d = 0;
    const char *s = NULL;
    size_t sz = 0;
    switch (avro_value_get_type(&cur)) {
    case AVRO_INT64:
        avro_value_get_long(&cur, &l);
        return (uint64_t)l;
    case AVRO_DOUBLE:
        avro_value_get_double(&cur, &d);
        return (uint64_t)d;
    case AVRO_STRING:
        avro_value_get_string(&cur, &s, &sz);
        return sz ? (uint8_t)s[0] : 0;
    case AVRO_ARRAY: {
        size_t k = 0;
        avro_value_get_size(&cur, &k);
        uint64_t acc = 0;
        for (size_t i = 0; i < k; i++) {
            avro_value_t e;
            if (!avro_value_get_by_index(&cur, i, &e, NULL) &&
                avro_value_get_type(&e) == AVRO_INT64 && !avro_value_get_long(&e, &l))
                acc += (uint64_t)l;
        }
        return acc;
    }
    default:
        return 1;
    }
}

/* avro-c's generic values: read every record, look up the wanted paths. */
static double run_generic(const corpus *c, const char *schema_text, const pr_json_path *paths,
                          size_t n_paths)
{
    avro_schema_t s;
    if (avro_schema_from_json_length(schema_text, strlen(schema_text), &s)) {
        fprintf(stderr, "bench_avro: %s\n", avro_strerror());
        exit(1);
    }
    avro_value_iface_t *iface = avro_generic_class_from_schema(s);
    avro_value_t v;
    avro_generic_value_new(iface, &v);
    avro_reader_t rd = avro_reader_memory((const char *)c->avro, 0);
    volatile uint64_t sink = 0;
    double t0 = now_s();
    for (size_t i = 0; i < c->n; i++) {
        avro_reader_memory_set_source(rd, (const char *)c->avro + c->aoff[i], (int64_t)c->alen[i]);
        if (avro_value_read(rd, &v)) {
            fprintf(stderr, "bench_avro: generic read %zu: %s\n", i, avro_strerror());
            exit(1);
        }
        for (size_t k = 0; k < n_paths; k++)
            sink += lookup(&v, paths[k].path);
    }
    double t = now_s() - t0;
    (void)sink;
    avro_reader_free(rd);
    avro_value_decref(&v);
    avro_value_iface_decref(iface);
    avro_schema_decref(s);
    return t;
}

static void report(const char *what, const corpus *c, size_t bytes, double t)
{
    printf("%-44s %8.1f MB/s %9.0f records/s per core (%zu records, %.1f MB, %.3f s)\n", what,
           (double)bytes / t / 1e6, (double)c->n / t, c->n, (double)bytes / 1e6, t);
}

int main(int argc, char **argv)
{
    size_t n = 200000;
    uint64_t seed = 7;
    const char *config = PR_BENCH_CLICKSTREAM_YAML, *schema_path = PR_BENCH_CLICKSTREAM_AVSC;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--events"))
            n = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--config"))
            config = argv[i + 1];
        else if (!strcmp(argv[i], "--schema"))
            schema_path = argv[i + 1];
        else if (!strcmp(argv[i], "--seed"))
            seed = strtoull(argv[i + 1], NULL, 10);
    }
    pr_log_set_level(PR_LOG_ERROR);
    char err[512];
    pr_config *cfg = NULL;
    if (pr_config_load_file(config, &cfg, err, sizeof(err))) {
        fprintf(stderr, "bench_avro: %s\n", err);
        return 1;
    }
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    char *schema = slurp(schema_path);
    corpus c = {0};
    build(&c, n, seed, schema);
    /* the decoder's paths, for the generic lookups */
    pr_json_decoder *d = pr_json_decoder_new(fs, err, sizeof(err));
    const pr_json_path *paths;
    size_t n_paths = pr_json_decoder_paths(d, &paths);
    for (int rep = 0; rep < 2; rep++) { /* the second pass is the one reported (warm) */
        double tp = run_decoder(&c, fs, schema);
        double tr = run_reader(&c, d, schema);
        double tg = run_generic(&c, schema, paths, n_paths);
        double tj = run_decoder(&c, fs, NULL);
        if (rep == 0)
            continue;
        report("avro plan (decode+extract+ops to vocab)", &c, c.abytes, tp);
        report("avro plan reader alone (decode+extract)", &c, c.abytes, tr);
        report("avro-c generic (avro_value_read+lookups)", &c, c.abytes, tg);
        report("json decoder, same events (reference)", &c, c.jbytes, tj);
        printf("plan reader vs avro-c generic: %.1fx\n", tg / tr);
    }
    pr_json_decoder_free(d);
    pr_config_free(cfg);
    free(schema);
    return 0;
}
