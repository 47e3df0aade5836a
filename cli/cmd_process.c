/*
 * cmd_process.c — `piperec process --config FILE --input PATH|- --output DIR
 * [--pipeline NAME] [--threads N] [--block-rows N] [--backend B] [--progress|--no-progress]
 * [--buffered-io]`.
 *
 * Offline mode: raw Criteo TSV (or, for a declared feature schema, JSON
 * lines: pr_offline_run_schema) through the engine into .npy files
 * (service/include/pr_service.h), plus recycled.npy, the recycled-index
 * notices, when a column evicts (docs/formats.md). Without --config the
 * embedded default config is used. Exit codes: 0 done, 1 I/O or runtime
 * failure (the path and strerror are printed) or every record rejected, 2
 * usage or config error (the config's own message) or an input that is not
 * what the config reads (compressed, JSON for TSV, ...). Progress goes to stderr only when stderr
 * is a terminal; the one-line summary is always printed to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_service.h"

/* The options of one `piperec process` run. */
typedef struct pr__process_args {
    const char *input, *output, *pipeline, *backend;
    long threads;        /* 0: by default */
    uint32_t block_rows; /* 0: by default */
    int progress;        /* -1: when stderr is a terminal */
    bool buffered_io, fit;
    const char *vocab; /* --vocab DIR: the vocabulary to start from (else transform.vocab.seed) */
    bool frozen;       /* --frozen: look up only (pr_engine_vocab_serve) */
    int64_t unseen;    /* --unseen: profile dlrm's index of an id without one */
} pr__process_args;

static void pr__process_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec process [--config FILE] [--set PATH=VALUE]... --input PATH|-\n"
            "                       --output DIR [--pipeline NAME] [--threads N] [--block-rows N]\n"
            "                       [--backend cpu|hls-sim|xrt|auto] [--progress|--no-progress]\n"
            "                       [--buffered-io] [--vocab DIR [--frozen [--unseen INDEX]]]\n"
            "       piperec process --config FILE [--pipeline NAME] --input EVENTS --fit\n"
            "                       [--output FILE]\n"
            "  Raw Criteo TSV (label, dense ints, sparse hex) -> DIR/dense.npy, sparse.npy,\n"
            "  labels.npy, vocab/<col>.tsv, rejects.tsv, meta.json (rows, names, vocabulary\n"
            "  sizes), and recycled.npy when a column evicts (int64 [K, 4]: column, output\n"
            "  row, index, notice number; reset that embedding row before that row). The\n"
            "  files an earlier run left in DIR under these names are removed first, so\n"
            "  none is stale. Without --config the embedded default config is used;\n"
            "  --set overrides one setting, as for `piperec run`\n"
            "  (--fit prints the --set lines that put its numbers in). --threads N: N\n"
            "  workers sharing decoding, the engine and writing (default: the online\n"
            "  CPUs); the engine itself uses 1 thread\n"
            "  below 8 workers, N/4 from 8 on. Results do not depend on N.\n"
            "  The .npy files are written with O_DIRECT where the filesystem allows it\n"
            "  (less kernel CPU, no page cache filled); --buffered-io writes them through\n"
            "  the page cache instead (the process may then end before the data reaches\n"
            "  the disk). The files' bytes are the same either way.\n"
            "  --vocab DIR: start from this vocabulary (a process output, its vocab/, or a\n"
            "  `vocab export`) instead of transform.vocab.seed; --frozen: add nothing to\n"
            "  it (a held-out day with the training day's indices): an id without an index\n"
            "  gets OOV (1), under profile dlrm --unseen INDEX (default 0), and vocab/ is\n"
            "  the vocabulary given; schema.filter and downsample still apply.\n"
            "  A pipeline with a declared schema reads JSON lines (source.format json), or\n"
            "  varint-delimited records (avro, protobuf) instead and writes\n"
            "  DIR/labels.npy [N, L], dense.npy [N, D], sparse/<name>.values.npy (int64)\n"
            "  and sparse/<name>.lengths.npy (int32) per sparse feature (a weighted list:\n"
            "  sparse/<name>.weights.npy, float32), vocab/, rejects.tsv\n"
            "  (and recycled.npy: feature, row, index, number), decoding each line as\n"
            "  `piperec run` does (source.format json); --threads N is then N workers\n"
            "  sharing decoding, the engine by column and writing (default: the online\n"
            "  CPUs), and the engine's own threads (default engine.threads) where it\n"
            "  runs whole (eviction, streaming min_count). Results do not depend on N.\n"
            "  With source.format protobuf the input is length-delimited messages (a\n"
            "  varint length, then the message).\n"
            "  --fit reads the events the same way (JSON lines, or Avro / Protobuf\n"
            "  records for source.format avro / protobuf) and prints, for each\n"
            "  `standardize` step, the mean and std of the values reaching it as YAML\n"
            "  (stdout or --output FILE) with the --set lines that put them in.\n");
}

/* Decoding workers by default: the online CPUs (1..64). */
static int pr__process_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

/* " (reason=count ...)" of the rejects by reason, or "" when none. */
static void pr__process_rejects_by(const pr_offline_result *res, char *by, size_t size)
{
    size_t n = 0;
    by[0] = 0;
    for (int r = 1; r < PR_DEC__COUNT; r++)
        if (res->rejected_by[r] && n < size)
            n += (size_t)snprintf(by + n, size - n, "%s%s=%" PRIu64, n ? " " : " (",
                                  pr_decode_reason_name(r), res->rejected_by[r]);
    if (n && n < size)
        snprintf(by + n, size - n, ")");
}

/* Does the schema declare an event time? */
static bool pr__has_event_time(const pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_features; i++)
        if (fs->features[i].kind == PR_FEAT_EVENT_TIME)
            return true;
    return false;
}

/* Where the time went (pr_offline_result), the same line for both layouts. */
static void pr__process_stages(const pr_offline_result *res)
{
    fprintf(stderr,
            "piperec process: thread-seconds per stage: decode %.2f, engine %.2f, write %.2f, "
            "idle %.2f, vocab export %.2f\n",
            res->decode_s, res->engine_s, res->write_s, res->idle_s, res->vocab_s);
    if (res->vocab_thread_s > 0)
        fprintf(stderr,
                "piperec process: after the pass (wall): close %.3f s, vocab export %.3f s "
                "(%.3f thread-s, longest task %.3f s)\n",
                res->close_s, res->vocab_s, res->vocab_thread_s, res->vocab_longest_s);
    double work = res->decode_s + res->engine_s + res->write_s;
    if (res->serial_engine_s + res->serial_write_s > 0 && work > 0)
        fprintf(stderr,
                "piperec process: in input order (serial): engine %.2f, write %.2f "
                "thread-seconds, %.1f%% of decode + engine + write\n",
                res->serial_engine_s, res->serial_write_s,
                100.0 * (res->serial_engine_s + res->serial_write_s) / work);
    if (res->chain_s > 0)
        fprintf(stderr,
                "piperec process: first appearances, longest column chain per round (beside "
                "the next round's decoding): %.2f s in all\n",
                res->chain_s);
}

/* A declared feature schema (issue 20): JSON lines into the offline layout
 * (pr_offline_run_schema). --threads N decodes on N workers (default: the
 * online CPUs) and gives the engine N threads (default engine.threads);
 * results do not depend on either. */
/* ---- the input, looked at before a pass: what a wrong file would
 * otherwise turn into (every line rejected, exit 0, or a reason that names
 * the wrong cause). */

/* Compressed files by their magic bytes: piperec reads uncompressed input. */
static const struct {
    const char *magic;
    size_t len;
    const char *name, *cat;
} pr__compressed[] = {
    {"\x1f\x8b", 2, "gzip", "zcat"},
    {"\x28\xb5\x2f\xfd", 4, "zstd", "zstdcat"},
    {"BZh", 3, "bzip2", "bzcat"},
    {"\xfd\x37\x7a\x58\x5a\x00", 6, "xz", "xzcat"},
    {"\x04\x22\x4d\x18", 4, "lz4", "lz4cat"},
    {"PK\x03\x04", 4, "zip", "unzip -p"},
};

/* What the input expects: the Criteo layout's TSV lines, a declared
 * schema's JSON lines, or varint-delimited records (avro, protobuf). */
typedef enum { PR__IN_TSV, PR__IN_JSON, PR__IN_DELIMITED } pr__in_kind;

/* 0, or 2 after saying why `input` cannot be what `kind` reads. Only a
 * regular file is looked at (pread, so nothing is consumed): standard input,
 * a pipe (/dev/stdin, <(zcat ...)) or a FIFO would lose what was read, and
 * what cannot be opened is left to the pass. Varint-delimited records are
 * binary: no magic bytes are tested on them. */
static int pr__process_sniff(const char *input, pr__in_kind kind)
{
    struct stat st;
    if (!strcmp(input, "-") || stat(input, &st) != 0 || !S_ISREG(st.st_mode))
        return 0; /* not even opened: opening a FIFO would let its writer go */
    int fd = open(input, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    unsigned char head[64];
    ssize_t got =
        fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, head, sizeof(head), 0) : -1;
    close(fd);
    size_t n = got > 0 ? (size_t)got : 0;
    for (size_t i = 0;
         kind != PR__IN_DELIMITED && i < sizeof(pr__compressed) / sizeof(pr__compressed[0]); i++)
        if (n >= pr__compressed[i].len &&
            !memcmp(head, pr__compressed[i].magic, pr__compressed[i].len)) {
            fprintf(stderr,
                    "piperec process: %s is %s-compressed: piperec reads uncompressed input; "
                    "decompress it first, or on the fly: %s %s | piperec process --input - ...\n",
                    input, pr__compressed[i].name, pr__compressed[i].cat, input);
            return 2;
        }
    bool bom = n >= 3 && !memcmp(head, "\xef\xbb\xbf", 3);
    size_t k = bom ? 3 : 0;
    while (k < n && (head[k] == ' ' || head[k] == '\t' || head[k] == '\r' || head[k] == '\n'))
        k++;
    bool object = k < n && head[k] == '{';
    if (kind == PR__IN_TSV && bom) {
        fprintf(stderr,
                "piperec process: %s:1: starts with a UTF-8 byte order mark, which would be read "
                "as part of the first label: remove it, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' "
                "FILE\n",
                input);
        return 2;
    }
    if (kind == PR__IN_TSV && object) {
        fprintf(stderr,
                "piperec process: %s looks like JSON lines (it begins with an object), and the "
                "Criteo layout reads TSV lines: JSON events need a declared schema "
                "(source.format: json and schema: { event_time, labels, dense, sparse }; "
                "docs/configuration.md \"Feature schema\", examples/clickstream.yaml)\n",
                input);
        return 2;
    }
    if (kind == PR__IN_DELIMITED && object) {
        fprintf(stderr,
                "piperec process: %s looks like JSON lines (it begins with an object), and "
                "source.format avro and protobuf read varint-delimited records: set "
                "source.format: json for JSON lines\n",
                input);
        return 2;
    }
    return 0;
}

/* 0, or 1 after saying so when every record of the input was rejected:
 * the outputs are written (rejects.tsv says why), but there is nothing to
 * train on, and a script's next step must not carry on as if there was. */
static int pr__process_all_rejected(const pr_offline_result *res, const char *output)
{
    if (res->rows || !res->rejected)
        return 0;
    uint64_t dropped = res->filtered + res->sampled_out;
    if (dropped)
        fprintf(stderr,
                "piperec process: every record schema.filter / downsample kept was rejected "
                "(%" PRIu64 "; %" PRIu64 " dropped on purpose): nothing to train on; "
                "%s/rejects.tsv says why for each\n",
                res->rejected, dropped, output);
    else
        fprintf(stderr,
                "piperec process: every record was rejected (%" PRIu64 "): nothing to train on; "
                "%s/rejects.tsv says why for each (is the input in the format the config "
                "reads?)\n",
                res->rejected, output);
    return 1;
}

/* --frozen: how many ids found no index (their rows hold OOV or --unseen). */
static void pr__process_frozen(const pr__process_args *a, const pr_offline_result *res)
{
    if (a->frozen)
        fprintf(stderr,
                "piperec process: --frozen: %" PRIu64 " ids without an index (OOV, or --unseen "
                "under profile dlrm); the vocabulary is the one given (%s)\n",
                res->unseen, a->vocab ? a->vocab : "transform.vocab.seed");
}

static int pr__process_schema(const pr_pipeline_cfg *pc, const pr_config *cfg,
                              const pr__process_args *a)
{
    const char *input = a->input, *output = a->output, *backend = a->backend;
    int threads = (int)a->threads;
    const char *fmt = pr_source_format_name(pc->source.format);
    bool pb = pc->source.format == PR_FORMAT_PROTOBUF; /* length-delimited messages */
    if (strncmp(fmt, "protobuf_", 9) == 0) {
        fprintf(stderr,
                "piperec process: pipelines[%s]: a declared schema reads JSON lines, not "
                "source.format %s\n",
                pc->name, fmt);
        return 2;
    }
    for (uint32_t c = 0; c < pc->spec.n_sparse; c++)
        if (pc->spec.sparse[c].eviction == PR_EVICT_TTL && pc->spec.sparse[c].ttl_s &&
            !pr__has_event_time(&pc->features)) {
            fprintf(stderr,
                    "piperec process: pipelines[%s] feature %s: eviction ttl with ttl_s needs "
                    "event times; declare schema.event_time, or use ttl_records\n",
                    pc->name, pc->spec.sparse[c].name);
            return 2;
        }
    pr_engine_opts eopts = pr_config_engine_opts(cfg);
    if (threads)
        eopts.threads = threads;
    if (backend)
        eopts.backend = backend;
    pr_offline_opts oo = {
        .input = input,
        .output_dir = output,
        .threads = threads > 0 ? threads : pr__process_online_cpus(),
        .block_rows = a->block_rows,
        .progress = a->progress >= 0 ? a->progress : isatty(2),
        .vocab_seed = a->vocab ? a->vocab : pc->vocab_seed,
        .buffered_io = a->buffered_io,
        .source = &pc->source,
        .frozen = a->frozen,
        .unseen = a->unseen,
    };
    pr_pipeline_spec spec = pc->spec;
    if (a->frozen) /* nothing to count: the vocabulary is the one given */
        spec.count_mode = PR_COUNT_STREAMING;
    pr_offline_result res;
    char err[4096];
    int rc = pr_offline_clear_outputs(output, oo.vocab_seed, err, sizeof(err));
    if (!rc)
        rc = pr_offline_run_schema(&pc->features, &spec, &eopts, &oo, &res, err, sizeof(err));
    if (!rc)
        rc = pr_offline_write_meta(output, pc->name, &pc->spec, pc->dense_names, &pc->features,
                                   &res, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec process: %s\n", err);
        return rc == PR_EINVAL || rc == PR_ENOTSUP || rc == PR_ENODEV ? 2 : 1;
    }
    char by[512], filt[96] = "";
    pr__process_rejects_by(&res, by, sizeof(by));
    int fl = 0;
    if (pc->features.n_filter)
        fl = snprintf(filt, sizeof(filt), ", %" PRIu64 " filtered", res.filtered);
    if (pc->features.downsample.enabled)
        snprintf(filt + fl, sizeof(filt) - (size_t)fl, ", %" PRIu64 " sampled out",
                 res.sampled_out);
    fprintf(stderr,
            "piperec process: %" PRIu64 " rows, %" PRIu64 " rejected%s%s, %.2f s, %.0f rows/s -> "
            "%s (declared schema: %s)\n",
            res.rows, res.rejected, by, filt, res.seconds,
            res.seconds > 0 ? (double)res.lines / res.seconds : 0.0, output,
            pb                                    ? "length-delimited Protobuf messages"
            : pc->source.format == PR_FORMAT_AVRO ? "Avro records"
                                                  : "JSON lines");
    pr__process_stages(&res);
    pr__process_frozen(a, &res);
    if (!res.rows && !res.rejected && res.filtered + res.sampled_out)
        fprintf(stderr,
                "piperec process: schema.filter / downsample dropped every record (%" PRIu64
                " filtered, %" PRIu64 " sampled out): no row written; check the conditions "
                "against the input\n",
                res.filtered, res.sampled_out);
    return pr__process_all_rejected(&res, output);
}

/* A declared schema with an event time (what ttl_s eviction reads offline). */
static bool pr__process_has_event_time(const pr_feature_schema *fs)
{
    for (uint32_t i = 0; i < fs->n_features; i++)
        if (fs->features[i].kind == PR_FEAT_EVENT_TIME)
            return true;
    return false;
}

/* Event-time TTL needs event times, which offline files do not have:
 * refuse (with a message) before any output is written. */
static int pr__process_refuse_ttl_s(const pr_pipeline_cfg *pc)
{
    for (uint32_t c = 0; c < pc->spec.n_sparse; c++)
        if (pc->spec.sparse[c].eviction == PR_EVICT_TTL && pc->spec.sparse[c].ttl_s) {
            fprintf(stderr,
                    "piperec process: pipelines[%s] column %s: eviction ttl with ttl_s needs "
                    "event times, which offline input has none of; use ttl_records for "
                    "process\n",
                    pc->name, pc->spec.sparse[c].name);
            return -1;
        }
    return 0;
}

/* The run's summary on stderr: rows, rejects by reason, rates, stage times. */
static void pr__process_report(const pr_offline_result *res, const char *output)
{
    char by[512];
    pr__process_rejects_by(res, by, sizeof(by));
    fprintf(stderr,
            "piperec process: %" PRIu64 " rows, %" PRIu64 " rejected%s, %.2f s, %.0f rows/s, "
            "%.1f MB/s -> %s\n",
            res->rows, res->rejected, by, res->seconds,
            res->seconds > 0 ? res->lines / res->seconds : 0.0,
            res->seconds > 0 ? res->bytes / res->seconds / 1e6 : 0.0, output);
    pr__process_stages(res);
}

/* --fit (issue 20): standardize statistics from the data (pr_offline_fit) as
 * YAML on stdout or --output FILE; a summary on stderr. The input is read as
 * `piperec process` reads it: JSON lines, or varint-delimited Avro records /
 * Protobuf messages for source.format avro / protobuf. */
static int pr__process_fit(const pr_pipeline_cfg *pc, const char *input, const char *output)
{
    char err[1024];
    pr_fit_result res;
    bool avro = pc->source.format == PR_FORMAT_AVRO, pb = pc->source.format == PR_FORMAT_PROTOBUF;
    if (pc->source.format != PR_FORMAT_JSON && !avro && !pb) {
        fprintf(stderr,
                "piperec process --fit: pipelines[%s]: --fit reads the events as JSON lines "
                "(source.format json) or varint-delimited records (avro, protobuf); "
                "source.format is %s (give --fit the same events as JSON lines)\n",
                pc->name, pr_source_format_name(pc->source.format));
        return 2;
    }
    const char *unit = avro || pb ? "records" : "lines";
    const char *what = avro ? "varint-delimited Avro records"
                       : pb ? "varint-delimited Protobuf messages"
                            : "JSON lines";
    FILE *out = output ? fopen(output, "w") : stdout;
    if (!out) {
        fprintf(stderr, "piperec process --fit: cannot write %s\n", output);
        return 1;
    }
    int rc =
        pr_offline_fit(&pc->features, &pc->source, pc->name, input, out, &res, err, sizeof(err));
    if (output && fclose(out) != 0 && !rc)
        rc = pr_seterr(err, sizeof(err), PR_EIO, "cannot write %s", output);
    if (rc) {
        fprintf(stderr, "piperec process: pipelines[%s]: %s\n", pc->name, err);
        return rc == PR_EIO ? 1 : 2;
    }
    if (res.lines > 0 && res.rejected + res.filtered == res.lines) {
        fprintf(stderr,
                "piperec process --fit: pipelines[%s]: all %" PRIu64 " %s were rejected (%" PRIu64
                ") or filtered (%" PRIu64
                "), so nothing was fitted: is %s the events as %s, and does schema.filter "
                "keep any?\n",
                pc->name, res.lines, unit, res.rejected, res.filtered, input, what);
        return 2;
    }
    fprintf(stderr,
            "piperec process --fit: %" PRIu64 " %s, %" PRIu64 " rejected (skipped), %" PRIu64
            " filtered (schema.filter, downsample), %" PRIu32 " standardize feature(s) fitted\n",
            res.lines, unit, res.rejected, res.filtered, res.features - res.degenerate);
    if (res.degenerate)
        fprintf(stderr,
                "piperec process --fit: %" PRIu32 " feature(s) have std 0 or no value; the "
                "config refuses std 0, so drop their standardize step or fix the data\n",
                res.degenerate);
    return 0;
}

/* A declared schema whose ttl_s eviction needs each line's event time, but
 * declares none: refuse (with a message) before anything is read. */
static bool pr__process_refuse_no_time(const pr_pipeline_cfg *pc)
{
    if (!pc->features.declared || !pc->features.time_required ||
        pr__process_has_event_time(&pc->features))
        return false;
    fprintf(stderr,
            "piperec process: pipelines[%s]: eviction ttl with ttl_s needs each line's "
            "event time: declare schema.event_time, or use ttl_records for process\n",
            pc->name);
    return true;
}

/* The Criteo layout (pr_offline_run): TSV into dense/sparse/labels.npy. */
static int pr__process_criteo(const pr_pipeline_cfg *pc, const pr_config *cfg,
                              const pr__process_args *a)
{
    char err[4096];
    const char *output = a->output;
    long threads = a->threads;
    /* Offline, N workers share decoding and the in-order engine and write
     * stages (service/offline.c), so by default there is one per CPU; the
     * engine's own threads follow pr_offline_engine_threads. */
    if (!threads) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        threads = ncpu >= 1 ? ncpu : 1;
        if (threads > 64)
            threads = 64;
    }
    pr_engine_opts eopts = pr_config_engine_opts(cfg);
    eopts.threads = pr_offline_engine_threads((int)threads);
    if (a->backend)
        eopts.backend = a->backend;

    pr_offline_opts oo = {
        .input = a->input,
        .output_dir = output,
        .threads = (int)threads,
        .block_rows = a->block_rows,
        .progress = a->progress >= 0 ? a->progress : isatty(2),
        .vocab_seed = a->vocab ? a->vocab : pc->vocab_seed,
        .buffered_io = a->buffered_io,
        .frozen = a->frozen,
        .unseen = a->unseen,
    };
    pr_pipeline_spec spec = pc->spec;
    if (a->frozen) /* nothing to count: the vocabulary is the one given */
        spec.count_mode = PR_COUNT_STREAMING;
    pr_offline_result res;
    int rc = pr_offline_clear_outputs(output, oo.vocab_seed, err, sizeof(err));
    if (!rc)
        rc = pr_offline_run(&spec, &eopts, &oo, &res, err, sizeof(err));
    if (!rc)
        rc = pr_offline_write_meta(output, pc->name, &pc->spec, pc->dense_names, NULL, &res, err,
                                   sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec process: %s\n", err);
        /* An engine that cannot be built for this spec/backend is a config problem. */
        return rc == PR_EINVAL || rc == PR_ENOTSUP || rc == PR_ENODEV ? 2 : 1;
    }

    pr__process_report(&res, output);
    pr__process_frozen(a, &res);
    return pr__process_all_rejected(&res, output);
}

/* The config (the embedded default without --config) with the --set
 * overrides applied: 0, or 2 after the message (a config that cannot be read
 * is a usage error, as for run). */
static int pr__process_load(const char *config, char **ov_path, char **ov_value, size_t n_ov,
                            pr_config **cfg)
{
    char err[4096];
    int rc = config
                 ? pr_config_load_file_with(config, ov_path, ov_value, n_ov, cfg, err, sizeof(err))
                 : pr_config_load_default(cfg, err, sizeof(err));
    for (size_t k = 0; !rc && !config && k < n_ov; k++)
        rc = pr_config_set(*cfg, ov_path[k], ov_value[k], err, sizeof(err));
    if (!rc)
        return 0;
    fprintf(stderr, "piperec process: %s\n", err);
    pr_config_free(*cfg);
    *cfg = NULL;
    return 2;
}

static int pr__process_main(const pr_config *cfg, pr__process_args *a, const char *threads_s,
                            const char *block_rows_s, const char *unseen_s);

int pr_cli_cmd_process(int argc, char **argv)
{
    const char *config = NULL, *threads_s = NULL, *block_rows_s = NULL, *unseen_s = NULL;
    pr__process_args pa = {.progress = -1};
    struct {
        const char *name;
        const char **val;
    } opts[] = {
        {"--config", &config},        {"--input", &pa.input},    {"--output", &pa.output},
        {"--pipeline", &pa.pipeline}, {"--threads", &threads_s}, {"--block-rows", &block_rows_s},
        {"--backend", &pa.backend},   {"--vocab", &pa.vocab},    {"--unseen", &unseen_s},
    };
    char *ov_path[PR_CLI_MAX_SET], *ov_value[PR_CLI_MAX_SET];
    size_t n_ov = 0;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__process_usage(stdout);
            rc = -1;
            break;
        }
        if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            rc = pr_cli_add_set("process", argv[++i], ov_path, ov_value, &n_ov);
            continue;
        }
        if (!strcmp(argv[i], "--progress") || !strcmp(argv[i], "--no-progress")) {
            pa.progress = argv[i][2] == 'p';
            continue;
        }
        if (!strcmp(argv[i], "--buffered-io") || !strcmp(argv[i], "--fit") ||
            !strcmp(argv[i], "--frozen")) {
            *(argv[i][3] == 'r'   ? &pa.frozen
              : argv[i][2] == 'f' ? &pa.fit
                                  : &pa.buffered_io) = true;
            continue;
        }
        size_t k = 0, nk = sizeof(opts) / sizeof(opts[0]);
        while (k < nk && strcmp(argv[i], opts[k].name))
            k++;
        if (k == nk || i + 1 >= argc) {
            fprintf(stderr, "piperec process: %s '%s'\n",
                    k == nk ? "unknown option" : "missing value for", argv[i]);
            pr__process_usage(stderr);
            rc = 2;
            break;
        }
        *opts[k].val = argv[++i];
    }
    pr_config *cfg = NULL;
    if (!rc)
        rc = pr__process_load(config, ov_path, ov_value, n_ov, &cfg);
    for (size_t k = 0; k < n_ov; k++)
        free(ov_path[k]); /* ov_value[k] points into the same allocation */
    if (rc)
        return rc < 0 ? 0 : rc;
    rc = pr__process_main(cfg, &pa, threads_s, block_rows_s, unseen_s);
    pr_config_free(cfg);
    return rc;
}

/* --vocab, --frozen and --unseen: 0, or 2 after the message. A process
 * output's DIR stands for its vocab/. */
static int pr__process_vocab_args(const pr_pipeline_cfg *pc, pr__process_args *a,
                                  const char *unseen_s, char *dir, size_t dir_size)
{
    long unseen = 0;
    const char *bad = a->fit && (a->vocab || a->frozen) ? "--vocab and --frozen are not for --fit"
                      : a->frozen && !a->vocab && !pc->vocab_seed
                          ? "--frozen needs the vocabulary to freeze: --vocab DIR (or "
                            "transform.vocab.seed)"
                      : unseen_s && !a->frozen ? "--unseen is for --frozen"
                      : unseen_s && pr_cli_parse_long(unseen_s, 0, INT32_MAX, &unseen) < 0
                          ? "--unseen: expected an index 0..2147483647"
                          : NULL;
    if (bad) {
        fprintf(stderr, "piperec process: %s\n", bad);
        return 2;
    }
    a->unseen = unseen;
    if (!a->vocab)
        return 0;
    struct stat st;
    if (stat(a->vocab, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "piperec process: --vocab %s: not a directory\n", a->vocab);
        return 2;
    }
    snprintf(dir, dir_size, "%s/vocab", a->vocab);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(dir, dir_size, "%s", a->vocab);
    a->vocab = dir;
    return 0;
}

/* Everything after the options: checks, then the pass (or --fit). */
static int pr__process_main(const pr_config *cfg, pr__process_args *a, const char *threads_s,
                            const char *block_rows_s, const char *unseen_s)
{
    if (!a->input || (!a->output && !a->fit)) {
        fprintf(stderr, "piperec process: %s is required\n", !a->input ? "--input" : "--output");
        pr__process_usage(stderr);
        return 2;
    }
    long block_rows = 0;
    if (threads_s && pr_cli_parse_long(threads_s, 1, 64, &a->threads) < 0) {
        fprintf(stderr, "piperec process: --threads: expected 1..64, got '%s'\n", threads_s);
        return 2;
    }
    if (block_rows_s && pr_cli_parse_long(block_rows_s, 64, 1 << 22, &block_rows) < 0) {
        fprintf(stderr, "piperec process: --block-rows: expected 64..4194304, got '%s'\n",
                block_rows_s);
        return 2;
    }
    a->block_rows = (uint32_t)block_rows;
    const pr_pipeline_cfg *pc =
        a->pipeline ? pr_config_pipeline(cfg, a->pipeline) : &cfg->pipelines[0];
    if (!pc) {
        fprintf(stderr, "piperec process: no pipeline named '%s' in %s\n", a->pipeline,
                cfg->origin);
        return 2;
    }
    char vdir[4200];
    if (pr__process_vocab_args(pc, a, unseen_s, vdir, sizeof(vdir)))
        return 2;
    if (!a->fit && pr__process_refuse_no_time(pc))
        return 2;
    pr__in_kind kind =
        !a->fit && !pc->features.declared ? PR__IN_TSV
        : pc->source.format == PR_FORMAT_AVRO || pc->source.format == PR_FORMAT_PROTOBUF
            ? PR__IN_DELIMITED
            : PR__IN_JSON;
    if (pr__process_sniff(a->input, kind))
        return 2;
    if (a->fit)
        return pr__process_fit(pc, a->input, a->output);
    if (pc->features.declared)
        return pr__process_schema(pc, cfg, a);
    if (pr__process_refuse_ttl_s(pc))
        return 2;
    /* The Criteo layout offline reads TSV lines; an EventBatch / Event file
     * would be read as text and every "line" rejected, exit 0. */
    if (pc->source.format != PR_FORMAT_CRITEO_TSV) {
        fprintf(stderr,
                "piperec process: pipelines[%s]: source.format %s is not read offline: "
                "`piperec process` reads Criteo TSV lines for the Criteo layout (give it the "
                "TSV the events were made from, e.g. `piperec gen` without --format)\n",
                pc->name, pr_source_format_name(pc->source.format));
        return 2;
    }
    return pr__process_criteo(pc, cfg, a);
}
