/*
 * bench_json.c — JSON decode + extract, MB/s per core, beside the Criteo TSV
 * decoder measured in the same process (issue 20: >= 400 MB/s per core on a
 * realistic clickstream event; the TSV decoder does ~1 GB/s).
 *
 *   bench_json [--events N] [--rounds R] [--libs 0|1] [--tsv 0|1] [--emit N]
 *              [--config FILE]
 *
 * The event (~300-600 bytes, synthetic, seed 1): a user object (string id,
 * age, unknown country and a nested segment object), an item (integer id,
 * category, price, 1-4 tags, sometimes an escaped or non-ASCII tag), a 10-50
 * element integer history, three labels, a millisecond timestamp, a context
 * object and unknown fields (event id, user agent, an experiments list of
 * objects) to skip; now and then a field is missing. 12 paths are extracted
 * (pr_json_extract into a 4096-row pr_json_block, one core, best of R passes
 * over all events). decode_tsv is pr_decode_criteo_lines over
 * generated Criteo rows (hex slots, and fused Hex2Int as offline does).
 * With --libs 1 (default), the DOM libraries Debian ships (jansson, cJSON,
 * json-c, yajl; loaded with dlopen when installed, so nothing links them)
 * parse + free the same events (no lookups; those would only add): the measurement behind
 * the choice in docs/architecture.md. --emit N prints N events, one a line,
 * and exits (seeds for tests/fuzz/corpus/json).
 *
 * On the example clickstream (`piperec gen --format json`, seed 1, the
 * same N events; the goal's corpus) two more figures: json_extract_clickstream,
 * pr_json_extract of the 12 paths examples/clickstream.yaml reads, and
 * json_decode_clickstream, the full pr_json_decoder (pr_decode_json_lines:
 * extract + the schema's type rules + every feature's operators up to its
 * vocab step, rows staged into 4096-row blocks) with the declared schema of
 * --config (default: the source tree's examples/clickstream.yaml): what a
 * `piperec run` polling thread does per message before the engine.
 *
 * Times are the measuring thread's CPU seconds (CLOCK_THREAD_CPUTIME_ID), so
 * MB/s is per core even when other processes share the machine.
 * Output: one JSON line per measurement, then json_vs_tsv with the ratios.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pr_config.h"
#include "pr_engine.h"
#include "pr_gen.h"
#include "pr_ingest.h"
#include "pr_log.h"

/* CPU seconds of this thread: "per core" on a shared machine, where wall
 * time also counts the time other processes held the core. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static const char *const categories[] = {"electronics/audio", "home/kitchen", "books/fiction",
                                         "fashion/shoes",     "toys",         "garden/tools"};
static const char *const tags[] = {"sale",           "new",   "bestseller", "eco",
                                   "caf\\u00e9",     "gift",  "limited",    "b\xc3\xbcro",
                                   "\\\"quoted\\\"", "refurb"};
static const char *const devices[] = {"mobile", "desktop", "tablet", "tv"};

/* One clickstream event into out (at least 2048 bytes); returns its length. */
static size_t gen_event(uint64_t *s, uint64_t row, char *out)
{
    char *p = out;
    uint64_t r = rnd(s);
    p += sprintf(p, "{\"event_id\":\"ev-%016" PRIx64 "\",\"ts\":%" PRIu64 ",", rnd(s),
                 (uint64_t)1732600000000 + row * 37);
    p += sprintf(p,
                 "\"user\":{\"id\":\"u%07" PRIu64 "\",\"age_days\":%" PRIu64
                 ",\"segment\":{\"tier\":\"gold\",\"since\":2019}},",
                 rnd(s) % 5000000, rnd(s) % 4000);
    p += sprintf(p, "\"item\":{\"id\":%" PRIu64 ",\"category\":\"%s\",\"price\":%" PRIu64 ".%02u,",
                 rnd(s) % 2000000, categories[r % 6], rnd(s) % 2000, (unsigned)(r >> 8) % 100);
    p += sprintf(p, "\"tags\":[");
    for (unsigned i = 0, n = 1 + (unsigned)(r >> 16) % 4; i < n; i++)
        p += sprintf(p, "%s\"%s\"", i ? "," : "", tags[rnd(s) % 10]);
    p += sprintf(p, "],\"brand\":\"brand-%u\"},\"history\":[", (unsigned)(r >> 20) % 900);
    for (unsigned i = 0, n = 10 + (unsigned)(r >> 24) % 41; i < n; i++)
        p += sprintf(p, "%s%" PRIu64, i ? "," : "", rnd(s) % 200000);
    p += sprintf(p, "],\"label\":{\"click\":%u,", (unsigned)(r >> 32) & 1);
    if ((r >> 33) % 4) /* purchase is sometimes missing */
        p += sprintf(p, "\"purchase\":%u,", (unsigned)(r >> 35) % 7 == 0);
    p += sprintf(p, "\"dwell_ms\":%" PRIu64 "},", rnd(s) % 60000);
    p += sprintf(p,
                 "\"context\":{\"device\":\"%s\",\"os\":\"android 14\",\"app\":\"5.12.%u\","
                 "\"session\":\"s-%08x\"},",
                 devices[(r >> 40) % 4], (unsigned)(r >> 42) % 30, (unsigned)(r >> 44));
    p += sprintf(p, "\"experiments\":[{\"id\":\"exp-17\",\"arm\":null}],\"ua\":\"Mozilla/5.0\"}");
    return (size_t)(p - out);
}

static const pr_json_path bench_paths[] = {
    {"ts", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.age_days", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.category", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.price", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.tags", PR_JSON_STRING, PR_JSON_LIST, 16, PR_JSON_AT},
    {"history", PR_JSON_INT64, PR_JSON_LIST, 64, PR_JSON_AT},
    {"label.click", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"label.purchase", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"label.dwell_ms", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"context.device", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
};

/* The distinct paths examples/clickstream.yaml reads (its schema), typed as
 * the features use them: the extract-only figure on the example clickstream. */
static const pr_json_path click_paths[] = {
    {"ts", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.age_days", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.category", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.price", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.tags", PR_JSON_STRING, PR_JSON_LIST, 16, PR_JSON_AT},
    {"history", PR_JSON_INT64, PR_JSON_LIST, 64, PR_JSON_AT},
    {"label.click", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"label.purchase", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"label.dwell_s", PR_JSON_DOUBLE, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"context.device", PR_JSON_STRING, PR_JSON_SCALAR, 0, PR_JSON_AT},
};

typedef struct corpus {
    char *buf;
    size_t *off; /* [n + 1] */
    size_t n, bytes;
} corpus;

static void emit(const char *name, uint64_t rows, size_t bytes, double s, const char *extra)
{
    printf("{\"bench\": \"%s\", \"threads\": 1, \"rows\": %" PRIu64 ", \"seconds\": %.4f, "
           "\"rows_per_s\": %.0f, \"mb_per_s\": %.1f%s}\n",
           name, rows, s, (double)rows / s, (double)bytes / s / 1e6, extra ? extra : "");
    fflush(stdout);
}

/* Best seconds of `rounds` passes of pr_json_extract of paths[0, n_paths)
 * over every event. */
static double run_extract(const corpus *c, const pr_json_path *paths, size_t n_paths, int rounds,
                          uint64_t *values_out)
{
    char errstr[256];
    pr_json_extractor *x = pr_json_extractor_new(paths, n_paths, 0, errstr, sizeof(errstr));
    if (!x) {
        fprintf(stderr, "bench_json: %s\n", errstr);
        exit(1);
    }
    pr_json_block *b = pr_json_block_new(x, 4096);
    double best = 0;
    uint64_t rejects = 0, values = 0;
    for (int round = 0; round < rounds; round++) {
        pr_json_block_reset(b);
        values = 0;
        double t0 = now_s();
        for (size_t i = 0; i < c->n; i++) {
            int rc = pr_json_extract(x, b, c->buf + c->off[i], c->off[i + 1] - c->off[i] - 1, NULL);
            if (rc == PR_EFULL) {
                for (uint32_t k = 0; k < b->n_cols; k++)
                    values += b->cols[k].n_values;
                pr_json_block_reset(b);
                rc = pr_json_extract(x, b, c->buf + c->off[i], c->off[i + 1] - c->off[i] - 1, NULL);
            }
            rejects += rc != 0;
        }
        double t = now_s() - t0;
        for (uint32_t k = 0; k < b->n_cols; k++)
            values += b->cols[k].n_values;
        if (round == 0 || t < best)
            best = t;
    }
    if (rejects) {
        fprintf(stderr, "bench_json: %" PRIu64 " events rejected\n", rejects);
        exit(1);
    }
    *values_out = values;
    pr_json_block_free(b);
    pr_json_extractor_free(x);
    return best;
}

/* 200K generated Criteo rows, made once. */
static char *tsv_buf;
static size_t tsv_size;
static uint64_t tsv_gen_rows;

static double run_tsv(int rounds, bool fused, uint64_t *rows_out, size_t *bytes_out)
{
    if (!tsv_buf) {
        const uint64_t rows = 200000;
        pr_gen *g = pr_gen_new(1);
        size_t cap = rows * PR_GEN_TSV_LINE_MAX;
        tsv_buf = malloc(cap);
        tsv_size = pr_gen_tsv(g, 0, rows, tsv_buf, cap, &tsv_gen_rows);
        pr_gen_free(g);
    }
    char *buf = tsv_buf;
    size_t size = tsv_size;
    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    pr_block *b = pr_block_new(spec.n_dense, spec.n_sparse, 4096, true);
    pr_decode_ctx ctx = {.spec = &spec, .parse_hex = fused};
    double best = 0;
    for (int round = 0; round < rounds; round++) {
        double t0 = now_s();
        size_t pos = 0;
        while (pos < size) {
            pr_block_reset(b);
            int64_t lines;
            pos += pr_decode_criteo_lines(&ctx, b, buf + pos, size - pos, true, 1, &lines);
        }
        double t = now_s() - t0;
        if (round == 0 || t < best)
            best = t;
    }
    pr_block_free(b);
    *rows_out = tsv_gen_rows;
    *bytes_out = size;
    return best;
}

/* ---- the example clickstream through the full pr_json_decoder ---- */

static void count_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                         int64_t recno)
{
    (void)reason, (void)rec, (void)len, (void)recno;
    if ((*(uint64_t *)opaque)++ == 0)
        fprintf(stderr, "bench_json: first reject: %s\n", detail);
}

/* `piperec gen --format json` events [0, n) (seed 1) as JSON lines. */
static void click_corpus(corpus *c, size_t n)
{
    c->n = n;
    c->buf = malloc(n * PR_GEN_JSON_LINE_MAX);
    c->off = malloc((n + 1) * sizeof(*c->off));
    uint64_t rows = 0;
    c->bytes = pr_gen_json_lines(1, 0, n, c->buf, n * PR_GEN_JSON_LINE_MAX, &rows);
    if (!c->buf || !c->off || rows != n) {
        fprintf(stderr, "bench_json: cannot generate %zu clickstream events\n", n);
        exit(1);
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        c->off[i] = at;
        at = (size_t)((char *)memchr(c->buf + at, '\n', c->bytes - at) - c->buf) + 1;
    }
    c->off[n] = at;
}

/* The first pipeline's declared schema of a config file (the example's). */
static pr_config *load_schema(const char *path)
{
    char errstr[512];
    pr_config *cfg = NULL;
    if (pr_config_load_file(path, &cfg, errstr, sizeof(errstr)) != 0 ||
        !cfg->pipelines[0].features.n_features) {
        fprintf(stderr, "bench_json: %s: %s\n", path,
                cfg ? "no declared schema in its first pipeline" : errstr);
        exit(1);
    }
    return cfg;
}

/* Seconds of one pass of pr_decode_json_lines (extract + the schema's type
 * rules + every feature's operators up to its vocab step, staged rows into
 * 4096-row blocks) over the corpus. */
static double run_decode(const corpus *c, const pr_feature_schema *fs)
{
    char errstr[256];
    pr_json_decoder *d = pr_json_decoder_new(fs, errstr, sizeof(errstr));
    pr_block *b = d ? pr_feature_block_new(fs, 4096, true) : NULL;
    if (!b) {
        fprintf(stderr, "bench_json: decoder: %s\n", d ? "no memory" : errstr);
        exit(1);
    }
    uint64_t rejects = 0, rows = 0;
    pr_decode_ctx ctx = {.json = d, .on_reject = count_reject, .opaque = &rejects};
    double t0 = now_s();
    size_t pos = 0;
    while (pos < c->bytes) {
        pr_block_reset(b);
        int64_t lines;
        size_t used =
            pr_decode_json_lines(&ctx, b, c->buf + pos, c->bytes - pos, true, (int64_t)pos, &lines);
        rows += b->rows;
        if (used == 0) {
            fprintf(stderr, "bench_json: decoder made no progress at byte %zu\n", pos);
            exit(1);
        }
        pos += used;
    }
    double t = now_s() - t0;
    if (rejects || rows != c->n) {
        fprintf(stderr, "bench_json: decoder: %" PRIu64 " rows, %" PRIu64 " rejects of %zu\n", rows,
                rejects, c->n);
        exit(1);
    }
    pr_block_free(b);
    pr_json_decoder_free(d);
    return t;
}

/* ---- DOM libraries through dlopen: parse, free. ---- */

typedef struct dom_lib {
    const char *name, *soname;
    const char *syms[4]; /* f[0] parse, f[1] free, more where the library needs them */
    void *(*parse)(struct dom_lib *l, const char *s, size_t len);
    void (*release)(struct dom_lib *l, void *doc);
    void *f[4];
    void *tok; /* json-c's tokener */
} dom_lib;

static void *jansson_parse(dom_lib *l, const char *s, size_t len)
{
    char err[256]; /* json_error_t is 208 bytes */
    return ((void *(*)(const char *, size_t, size_t, void *))l->f[0])(s, len, 0, err);
}
static void *cjson_parse(dom_lib *l, const char *s, size_t len)
{
    return ((void *(*)(const char *, size_t))l->f[0])(s, len);
}
static void *jsonc_parse(dom_lib *l, const char *s, size_t len)
{
    if (!l->tok)
        l->tok = ((void *(*)(void))l->f[3])(); /* json_tokener_new */
    ((void (*)(void *))l->f[2])(l->tok);       /* json_tokener_reset */
    return ((void *(*)(void *, const char *, int))l->f[0])(l->tok, s, (int)len);
}
static void *yajl_parse(dom_lib *l, const char *s, size_t len)
{
    static char copy[8192]; /* yajl_tree_parse wants a NUL-terminated string */
    if (len >= sizeof(copy))
        return NULL;
    memcpy(copy, s, len);
    copy[len] = 0;
    return ((void *(*)(const char *, char *, size_t))l->f[0])(copy, NULL, 0);
}
static void dom_release(dom_lib *l, void *d)
{
    ((void (*)(void *))l->f[1])(d); /* json_object_put's int result is ignored */
}

static dom_lib dom_libs[] = {
    {.name = "jansson",
     .soname = "libjansson.so.4",
     .syms = {"json_loadb", "json_delete"},
     .parse = jansson_parse,
     .release = dom_release},
    {.name = "cjson",
     .soname = "libcjson.so.1",
     .syms = {"cJSON_ParseWithLength", "cJSON_Delete"},
     .parse = cjson_parse,
     .release = dom_release},
    {.name = "json-c",
     .soname = "libjson-c.so.5",
     .syms = {"json_tokener_parse_ex", "json_object_put", "json_tokener_reset", "json_tokener_new"},
     .parse = jsonc_parse,
     .release = dom_release},
    {.name = "yajl",
     .soname = "libyajl.so.2",
     .syms = {"yajl_tree_parse", "yajl_tree_free"},
     .parse = yajl_parse,
     .release = dom_release},
};

static bool dom_open(dom_lib *l)
{
    void *h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return false;
    for (int i = 0; i < 4; i++)
        if (l->syms[i] && !(l->f[i] = dlsym(h, l->syms[i])))
            return false;
    return true;
}

static void run_dom(const corpus *c, int rounds)
{
    for (size_t k = 0; k < sizeof(dom_libs) / sizeof(dom_libs[0]); k++) {
        dom_lib *l = &dom_libs[k];
        if (!dom_open(l)) {
            fprintf(stderr, "bench_json: %s not installed, skipped\n", l->name);
            continue;
        }
        double best = 0;
        uint64_t fails = 0;
        for (int round = 0; round < rounds; round++) {
            double t0 = now_s();
            for (size_t i = 0; i < c->n; i++) {
                void *d = l->parse(l, c->buf + c->off[i], c->off[i + 1] - c->off[i] - 1);
                if (d)
                    l->release(l, d);
                else
                    fails++;
            }
            double t = now_s() - t0;
            if (round == 0 || t < best)
                best = t;
        }
        char extra[160];
        snprintf(extra, sizeof(extra),
                 ", \"pipeline\": \"DOM parse + free only (no lookups)\", \"failed\": %" PRIu64,
                 fails);
        char name[64];
        snprintf(name, sizeof(name), "json_dom_%s", l->name);
        emit(name, c->n, c->bytes, best, extra);
    }
}

int main(int argc, char **argv)
{
    size_t events = 20000;
    int rounds = 5, libs = 1, emit_n = 0, tsv = 1;
    const char *config = PR_BENCH_CLICKSTREAM_YAML;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--events"))
            events = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--libs"))
            libs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tsv"))
            tsv = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--emit"))
            emit_n = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--config"))
            config = argv[i + 1];
    }
    if (events == 0 || rounds < 1) {
        fprintf(stderr,
                "usage: bench_json [--events N] [--rounds R] [--libs 0|1] [--tsv 0|1] [--emit N] "
                "[--config FILE]\n");
        return 2;
    }
    uint64_t seed = 1;
    if (emit_n > 0) {
        char ev[4096];
        for (int i = 0; i < emit_n; i++) {
            size_t n = gen_event(&seed, (uint64_t)i, ev);
            fwrite(ev, 1, n, stdout);
            putchar('\n');
        }
        return 0;
    }
    corpus c = {.n = events};
    c.buf = malloc(events * 2048);
    c.off = malloc((events + 1) * sizeof(*c.off));
    for (size_t i = 0; i < events; i++) {
        c.off[i] = c.bytes;
        c.bytes += gen_event(&seed, i, c.buf + c.bytes);
        c.buf[c.bytes++] = '\n';
    }
    c.off[events] = c.bytes;

    corpus cc;
    click_corpus(&cc, events);
    pr_log_set_level(PR_LOG_ERROR);
    pr_config *cfg = load_schema(config);

    uint64_t values = 0, cvalues = 0, tsv_rows = 0;
    size_t tsv_bytes = 0;
    /* Rounds interleave the decoders, so that a busy moment of a shared
     * machine hits them alike; each keeps its quickest pass. */
    double tj = 0, tt = 0, tu = 0, tc = 0, td = 0;
    for (int r = 0; r < rounds; r++) {
        double a =
            run_extract(&c, bench_paths, sizeof(bench_paths) / sizeof(bench_paths[0]), 1, &values);
        tj = r == 0 || a < tj ? a : tj;
        a = run_extract(&cc, click_paths, sizeof(click_paths) / sizeof(click_paths[0]), 1,
                        &cvalues);
        tc = r == 0 || a < tc ? a : tc;
        a = run_decode(&cc, &cfg->pipelines[0].features);
        td = r == 0 || a < td ? a : td;
        if (!tsv)
            continue;
        a = run_tsv(1, false, &tsv_rows, &tsv_bytes);
        tt = r == 0 || a < tt ? a : tt;
        a = run_tsv(1, true, &tsv_rows, &tsv_bytes);
        tu = r == 0 || a < tu ? a : tu;
    }
    char extra[256];
    snprintf(extra, sizeof(extra),
             ", \"pipeline\": \"pr_json_extract, 12 paths\", \"avg_event_bytes\": %.0f, "
             "\"values\": %" PRIu64,
             (double)c.bytes / (double)c.n, values);
    emit("json_extract", c.n, c.bytes, tj, extra);
    snprintf(extra, sizeof(extra),
             ", \"pipeline\": \"pr_json_extract, the 12 paths of examples/clickstream.yaml, "
             "piperec gen --format json events\", \"avg_event_bytes\": %.0f, \"values\": %" PRIu64,
             (double)cc.bytes / (double)cc.n, cvalues);
    emit("json_extract_clickstream", cc.n, cc.bytes, tc, extra);
    snprintf(extra, sizeof(extra),
             ", \"pipeline\": \"pr_json_decoder (pr_decode_json_lines): extract + types + "
             "operators up to vocab, the schema of pipeline %s\", \"avg_event_bytes\": %.0f",
             cfg->pipelines[0].name, (double)cc.bytes / (double)cc.n);
    emit("json_decode_clickstream", cc.n, cc.bytes, td, extra);
    if (!tsv)
        goto done;
    emit("decode_tsv", tsv_rows, tsv_bytes, tt, ", \"pipeline\": \"pr_decode_criteo_lines\"");
    emit("decode_tsv_u64", tsv_rows, tsv_bytes, tu,
         ", \"pipeline\": \"pr_decode_criteo_lines, fused Hex2Int\"");
    double json_mb = (double)c.bytes / tj / 1e6, tsv_mb = (double)tsv_bytes / tt / 1e6;
    double click_mb = (double)cc.bytes / tc / 1e6, dec_mb = (double)cc.bytes / td / 1e6;
    printf("{\"bench\": \"json_vs_tsv\", \"json_mb_per_s\": %.1f, \"tsv_mb_per_s\": %.1f, "
           "\"ratio_json_over_tsv\": %.3f, \"ratio_json_over_tsv_u64\": %.3f, "
           "\"clickstream_extract_mb_per_s\": %.1f, \"clickstream_decode_mb_per_s\": %.1f, "
           "\"ratio_clickstream_extract_over_tsv\": %.3f, \"ratio_clickstream_decode_over_tsv\": "
           "%.3f, \"goal_mb_per_s\": 400, \"goal_met\": %s}\n",
           json_mb, tsv_mb, json_mb / tsv_mb, json_mb / ((double)tsv_bytes / tu / 1e6), click_mb,
           dec_mb, click_mb / tsv_mb, dec_mb / tsv_mb, click_mb >= 400 ? "true" : "false");
    fflush(stdout);
    if (libs)
        run_dom(&c, rounds);
done:
    pr_config_free(cfg);
    free(cc.buf);
    free(cc.off);
    free(c.buf);
    free(c.off);
    free(tsv_buf);
    return 0;
}
