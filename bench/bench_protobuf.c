/*
 * bench_protobuf.c — the user's own Protobuf messages (issue 23): decode +
 * extract, MB/s and events/s per core, on the example clickstream written as
 * shop.Click (tests/data/pbuser_clickstream.proto), beside the JSON decoder
 * on the same events in the same process. bench/bench_protobuf.sh runs it
 * beside the Python consumer (bench/baseline_protobuf.py) on the same
 * messages.
 *
 *   bench_protobuf --desc FILE [--events N] [--rounds R] [--config FILE]
 *                  [--write FILE] [--only pbuser_extract|pbuser_decode|json_decode]
 *
 * Events: `piperec gen --format json` (seed 1), N of them, each encoded once
 * with pr_pbuser_encode_json (plain messages, no framing). Measurements (one
 * core, the thread's CPU seconds, best of R passes over all messages):
 *   pbuser_extract  pr_pbuser_read alone: the wire walk and the row of the
 *                   schema's 12 paths in a 4096-row pr_json_block (what the
 *                   Python baseline does: parse, then read those fields);
 *   pbuser_decode   the full decoder (pr_decode_message, PR_MSG_PROTOBUF):
 *                   read + the schema's type rules + every feature's operators
 *                   up to vocab, rows into 4096-row blocks: what a `piperec
 *                   run` polling thread does per message before the engine;
 *   json_decode     the same events as JSON text through the same schema.
 * --write FILE writes the messages length-delimited (varint length, message)
 * for the baseline and exits. Output: one JSON line per measurement.
 */
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
#include "pr_varint.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Records back to back: record i is buf[off[i], off[i + 1]). */
typedef struct recs {
    uint8_t *buf;
    size_t len, cap;
    size_t *off;
    size_t n;
    uint64_t bytes;
} recs;

static void recs_add(recs *r, const void *p, size_t n)
{
    if (r->len + n > r->cap) {
        r->cap = (r->len + n) * 2;
        if (!(r->buf = realloc(r->buf, r->cap)))
            abort();
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    r->off[++r->n] = r->len;
    r->bytes += n;
}

static void emit(const char *name, const recs *r, double s, const char *extra)
{
    printf("{\"bench\": \"%s\", \"events\": %zu, \"bytes\": %" PRIu64 ", \"cpu_s\": %.4f, "
           "\"mb_per_s\": %.1f, \"events_per_s\": %.0f%s}\n",
           name, r->n, r->bytes, s, (double)r->bytes / s / 1e6, (double)r->n / s, extra);
    fflush(stdout);
}

static double run_extract(pr_pbuser_reader *rd, pr_json_block *jb, const recs *r, int rounds)
{
    double best = 1e30;
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        pr_json_block_reset(jb);
        for (size_t i = 0; i < r->n; i++) {
            if (jb->rows == jb->cap)
                pr_json_block_reset(jb);
            if (pr_pbuser_read(rd, jb, r->buf + r->off[i], r->off[i + 1] - r->off[i], NULL))
                abort();
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static double run_decode(pr_msg_format fmt, pr_json_decoder *dec, pr_block *b, const recs *r,
                         int rounds)
{
    double best = 1e30;
    pr_decode_ctx ctx = {.json = dec};
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        pr_block_reset(b);
        for (size_t i = 0; i < r->n; i++) {
            uint32_t next = 0;
            int rc = pr_decode_message(fmt, &ctx, b, r->buf + r->off[i], r->off[i + 1] - r->off[i],
                                       &next, NULL);
            if (rc == PR_EFULL) {
                pr_block_reset(b);
                i--;
                continue;
            }
            if (rc != 1)
                abort();
        }
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

static int write_delimited(const recs *r, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 1;
    for (size_t i = 0; i < r->n; i++) {
        uint8_t h[PR_VARINT_MAX];
        size_t len = r->off[i + 1] - r->off[i];
        fwrite(h, 1, (size_t)(pr_varint_put(h, len) - h), f);
        fwrite(r->buf + r->off[i], 1, len, f);
    }
    return fclose(f) ? 1 : 0;
}

int main(int argc, char **argv)
{
    const char *desc_file = NULL, *config = PR_BENCH_CLICKSTREAM_YAML, *write = NULL;
    const char *only = ""; /* run only the measurement of this name */
    size_t n = 200000;
    int rounds = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--desc"))
            desc_file = argv[i + 1];
        else if (!strcmp(argv[i], "--events"))
            n = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--config"))
            config = argv[i + 1];
        else if (!strcmp(argv[i], "--write"))
            write = argv[i + 1];
        else if (!strcmp(argv[i], "--only"))
            only = argv[i + 1];
    }
    if (!desc_file || n == 0 || rounds < 1) {
        fprintf(stderr, "usage: bench_protobuf --desc FILE [--events N] [--rounds R] "
                        "[--config FILE] [--write FILE]\n");
        return 2;
    }
    pr_log_set_level(PR_LOG_ERROR);
    char err[1024];
    pr_config *cfg = NULL;
    if (pr_config_load_file(config, &cfg, err, sizeof(err))) {
        fprintf(stderr, "bench_protobuf: %s\n", err);
        return 2;
    }
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_pbuser_desc *d = pr_pbuser_desc_load(desc_file, "shop.Click", err, sizeof(err));
    pr_json_decoder *dp = pr_json_decoder_new(fs, err, sizeof(err));
    pr_json_decoder *dj = pr_json_decoder_new(fs, err, sizeof(err));
    if (!d || !dp || !dj) {
        fprintf(stderr, "bench_protobuf: %s\n", err);
        return 2;
    }
    const pr_json_path *paths;
    size_t np = pr_json_decoder_paths(dp, &paths);
    pr_pbuser_reader *rd = pr_pbuser_reader_new(d, PR_PB_FRAMING_AUTO, paths, np, err, sizeof(err));
    pr_json_extractor *x = pr_json_extractor_new(paths, np, 0, err, sizeof(err));
    if (!rd || !x) {
        fprintf(stderr, "bench_protobuf: %s\n", err);
        return 2;
    }
    pr_json_decoder_set_reader(dp, pr_pbuser_read, rd);

    recs pb = {.off = calloc(n + 1, sizeof(size_t))}, js = {.off = calloc(n + 1, sizeof(size_t))};
    char ev[PR_GEN_JSON_LINE_MAX];
    uint8_t *enc = NULL;
    size_t enc_cap = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = pr_gen_json_event(1, i, ev, sizeof(ev));
        int m = pr_pbuser_encode_json(d, ev, len, false, 0, &enc, &enc_cap, err, sizeof(err));
        if (m < 0) {
            fprintf(stderr, "bench_protobuf: event %zu: %s\n", i, err);
            return 1;
        }
        recs_add(&pb, enc, (size_t)m);
        recs_add(&js, ev, len);
    }
    if (write)
        return write_delimited(&pb, write);

    pr_json_block *jb = pr_json_block_new(x, 4096);
    pr_block *b = pr_feature_block_new(fs, 4096, true);
    char extra[256];
    snprintf(extra, sizeof(extra), ", \"paths\": %zu, \"avg_event_bytes\": %.0f", np,
             (double)pb.bytes / (double)n);
    if (!only[0] || !strcmp(only, "pbuser_extract"))
        emit("pbuser_extract", &pb, run_extract(rd, jb, &pb, rounds), extra);
    if (!only[0] || !strcmp(only, "pbuser_decode"))
        emit("pbuser_decode", &pb, run_decode(PR_MSG_PROTOBUF, dp, b, &pb, rounds), extra);
    snprintf(extra, sizeof(extra), ", \"avg_event_bytes\": %.0f", (double)js.bytes / (double)n);
    if (!only[0] || !strcmp(only, "json_decode"))
        emit("json_decode", &js, run_decode(PR_MSG_JSON, dj, b, &js, rounds), extra);

    pr_block_free(b);
    pr_json_block_free(jb);
    pr_json_extractor_free(x);
    pr_json_decoder_free(dp);
    pr_json_decoder_free(dj);
    pr_pbuser_reader_free(rd);
    pr_pbuser_desc_free(d);
    pr_config_free(cfg);
    free(enc);
    free(pb.buf);
    free(pb.off);
    free(js.buf);
    free(js.off);
    return 0;
}
