/*
 * cmd_consume.c — `piperec consume`: the reference trainer client.
 *
 *   piperec consume --connect HOST:PORT --pipeline P [--count N] [--credits K]
 *                   [--output DIR] [--client-id ID] [--idle-timeout-ms MS]
 *                   [--connect-timeout-ms MS] [--quiet]
 *                   [--tls] [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]
 *                   [--token-file FILE] [--verbose]
 *                   [--checkpoint-file F [--checkpoint-every N]]
 *                   [--layout protobuf|raw]
 *
 * --connect takes unix:PATH too (the server's sinks.trainer.unix_path).
 * --layout raw subscribes with the raw tensor layout (docs/trainer-protocol.md
 * "Raw batch layout"); the client library checks each raw frame and turns it
 * back into the TrainingBatch it carries, so --output writes the same bytes
 * as with the default layout (tests/service/test_consume_raw.sh).
 *
 * Subscribes to a pipeline's trainer stream (sinks/include/pr_trainer_client.h),
 * receives batches, checks their sequence numbers (a repeat is an error; a
 * lower number than one already seen is counted as out of order, which is
 * normal after another trainer's batches were redelivered to this one),
 * acks each one after it is written, optionally appends every batch to one
 * .npy set in DIR (dense.npy, sparse.npy, labels.npy, meta.json; for the
 * jagged batches of a declared schema the declared schema's offline layout
 * instead, the one `piperec process` writes: labels.npy float32 [N, L],
 * dense.npy float32 [N, D], sparse/<feature>.values.npy int64,
 * sparse/<feature>.lengths.npy int32, and meta.json), and prints
 * a summary. Stops after N batches, on EOF from the server, after an idle
 * timeout, or on SIGINT/SIGTERM. Exit: 0 ok, 1 runtime error, 2 usage.
 *
 * Connecting is retried with exponential backoff (100 ms doubling to 2 s)
 * until --connect-timeout-ms, so a trainer started before piperec (or during
 * its restart) waits instead of failing; a server Error (unknown pipeline,
 * bad version) is not retried. The summary's rows/s is printed only over a
 * window of at least one second and two batches ("n/a" otherwise): a rate
 * taken over a few microseconds says nothing.
 *
 * Checkpoint delivery (server `sinks.trainer.delivery: checkpoint`,
 * docs/trainer-protocol.md): with --checkpoint-file F, consume is a trainer
 * whose "model" is its output. It keeps the position (input offsets) of
 * every batch it wrote; every N batches and at a clean stop it makes a
 * checkpoint: fsync the output (npy headers rewritten with the rows so
 * far), write F (temporary file, fsync, rename, fsync the directory), then
 * send CheckpointCommit and wait for CheckpointOk. At start it reads F,
 * subscribes with its position as Subscribe.resume and, when F names the
 * same --output directory, cuts the output back to F's rows and appends.
 * So a consume killed (-9) between checkpoints and run again gets exactly
 * the batches after its last checkpoint: none skipped, none twice, and its
 * output holds every row once. F is JSON, {"version": 1, "pipeline",
 * "delivery": "checkpoint", "checkpoint", "batches", "rows", "output",
 * "position"}: the Python StreamDataset's checkpoint state_dict() plus
 * consume's own fields, so either can resume from the other's position.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_log.h"
#include "pr_npy.h"
#include "pr_trainer_client.h"

static volatile sig_atomic_t consume_stop;

static void pr__on_signal(int sig)
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
    int verbose;
    const char *ckpt_file; /* checkpoint delivery: the position file */
    uint64_t ckpt_every;   /* batches between checkpoints; 0 = only at a clean stop */
    int layout;            /* index in consume_layouts: 0 protobuf, 1 raw */
} consume_opts;

/* --layout values, in Subscribe.layout order. */
static const char *const consume_layouts[] = {"protobuf", "raw", NULL};

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
    {"verbose", no_argument, NULL, 'v'},
    {"checkpoint-file", required_argument, NULL, 'P'},
    {"checkpoint-every", required_argument, NULL, 'E'},
    {"layout", required_argument, NULL, 'L'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void pr__consume_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec consume --connect HOST:PORT --pipeline P [options]\n"
            "  --count N            stop after N batches (default: until EOF or SIGINT)\n"
            "  --credits K          credit window: unacked batches in flight (default 8)\n"
            "  --output DIR         append every batch to DIR/{dense,sparse,labels}.npy (a\n"
            "                       declared schema: labels, dense, sparse/<name>.values.npy\n"
            "                       and .lengths.npy, a weighted list's .weights.npy) +\n"
            "                       meta.json; files of an earlier run in\n"
            "                       DIR are replaced unless --checkpoint-file resumes them\n"
            "  --client-id ID       name shown in the server's logs\n"
            "  --idle-timeout-ms MS stop when no batch came for MS ms (default: wait forever)\n"
            "  --connect-timeout-ms MS  keep retrying the connection for MS ms (default 30000;\n"
            "                       0: try once)\n"
            "  --quiet              only the summary\n"
            "  --tls                TLS, server checked against the system CAs\n"
            "  --tls-ca FILE        TLS, server checked against the CAs in FILE (PEM)\n"
            "  --tls-cert FILE      client certificate for mutual TLS (with --tls-key)\n"
            "  --tls-key FILE       its private key\n"
            "  --token-file FILE    send the bearer token in FILE (first non-comment line)\n"
            "  --verbose            one line per batch on stderr: epoch/seq, rows, offsets\n"
            "  --checkpoint-file F  checkpoint delivery: resume from the position in F, and\n"
            "                       write F (then CheckpointCommit) at each checkpoint and at a\n"
            "                       clean stop; with --output, the output resumes too\n"
            "  --checkpoint-every N checkpoint every N batches (needs --checkpoint-file),\n"
            "                       and when no batch came for 1 s (the tail gets committed)\n"
            "  --layout L           protobuf (default) or raw: the raw tensor layout, checked\n"
            "                       and written as the same .npy bytes\n"
            "  (--connect also takes unix:PATH, the server's sinks.trainer.unix_path)\n");
}

static double pr__mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The optional .npy output: one set of files, batches appended in arrival order. */
typedef struct npy_out {
    pr_npy_writer *dense, *sparse, *labels;
    /* Jagged batches (declared schema): the layout is known at the first
     * batch, which replaces the (still empty) Criteo files by this set. */
    pr_npy_jagged *jag;
    bool jag_resume; /* DIR holds a jagged set to continue at the first batch */
    char dir[4096];
    uint64_t at_rows; /* rows to keep when jag_resume */
    uint16_t j_labels, j_dense, j_feat;
    char (*j_keys)[PR_NAME_MAX];
    uint8_t *j_weighted; /* [j_feat] 1 = carries weights (the first batch's weighted_keys) */
    char (*j_tables)[PR_NAME_MAX]; /* [j_feat] each feature's vocabulary table; NULL: none shared */
    FILE *meta;
    char meta_path[4096];
    const pr_trainer_info *info; /* the subscription: names, shape */
    uint64_t *vocab;             /* the last batch's vocab_sizes, for the closing keys */
    uint32_t n_vocab;
    void *scratch;
    size_t scratch_cap;
    uint64_t rows;
    uint64_t batches;
} npy_out;

/* Where an output stood at a checkpoint: enough to cut it back there. */
typedef struct out_mark {
    uint64_t batches, rows;
    uint64_t meta_bytes; /* meta.json up to the last batch, without the closing text */
} out_mark;

/* One array file: new, or (at != NULL) continued from a checkpoint's rows. */
static int pr__out_array(pr_npy_writer **w, const char *dir, const char *name, pr_npy_dtype dt,
                         uint32_t cols, const out_mark *at, char *err, size_t es)
{
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return at ? pr_npy_open_append(w, p, dt, cols, at->rows, err, es)
              : pr_npy_open(w, p, dt, cols, err, es);
}

/* Open DIR's files: new ones, or with `at` the ones a checkpoint left,
 * cut back to it (what was written after it is not in the checkpoint). */
static int pr__out_open(npy_out *o, const char *dir, const pr_trainer_info *in, const out_mark *at,
                        char *err, size_t es)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return pr_seterr(err, es, PR_EIO, "--output: cannot create %s: %s", dir, strerror(errno));
    snprintf(o->dir, sizeof(o->dir), "%s", dir);
    o->info = in;
    char sp[4200];
    struct stat st;
    snprintf(sp, sizeof(sp), "%s/sparse", dir);
    if (at && stat(sp, &st) == 0 && S_ISDIR(st.st_mode)) {
        o->jag_resume = true; /* a jagged set: continued when the first batch names it */
        o->at_rows = at->rows;
    }
    int rc;
    if (!o->jag_resume &&
        ((rc = pr__out_array(&o->dense, dir, "dense.npy", PR_NPY_F32, in->n_dense, at, err, es)) <
             0 ||
         (rc = pr__out_array(&o->sparse, dir, "sparse.npy",
                             in->sparse_width == 8 ? PR_NPY_I64 : PR_NPY_I32, in->n_sparse, at, err,
                             es)) < 0 ||
         (rc = pr__out_array(&o->labels, dir, "labels.npy", PR_NPY_I32, 0, at, err, es)) < 0))
        return rc;
    snprintf(o->meta_path, sizeof(o->meta_path), "%s/meta.json", dir);
    if (at) {
        if (!(o->meta = fopen(o->meta_path, "r+")) ||
            ftruncate(fileno(o->meta), (off_t)at->meta_bytes) < 0 ||
            fseeko(o->meta, (off_t)at->meta_bytes, SEEK_SET) < 0)
            return pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
        o->batches = at->batches;
        o->rows = at->rows;
        return 0;
    }
    if (!(o->meta = fopen(o->meta_path, "w")))
        return pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
    fprintf(o->meta, "{\n  \"pipeline\": \"%s\",\n  \"batches\": [", in->pipeline);
    return 0;
}

/* Make everything written so far durable and say where the output stands. */
static int pr__out_sync(npy_out *o, out_mark *m, char *err, size_t es)
{
    int rc;
    if (o->jag && (rc = pr_npy_jagged_sync(o->jag, err, es)) < 0)
        return rc;
    if (o->dense &&
        ((rc = pr_npy_sync(o->dense, err, es)) < 0 || (rc = pr_npy_sync(o->sparse, err, es)) < 0 ||
         (rc = pr_npy_sync(o->labels, err, es)) < 0))
        return rc;
    off_t at;
    if (fflush(o->meta) != 0 || fsync(fileno(o->meta)) < 0 || (at = ftello(o->meta)) < 0)
        return pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
    *m = (out_mark){o->batches, o->rows, (uint64_t)at};
    return 0;
}

static void *pr__scratch(npy_out *o, const uint8_t *p, size_t copy, size_t n);

/* Tensors in a view may be unaligned: copy into aligned scratch first. */
static const void *pr__aligned(npy_out *o, const uint8_t *p, size_t n)
{
    return pr__scratch(o, p, n, n);
}

/* Aligned scratch of n bytes, its first `copy` bytes from p (NULL with copy 0). */
static void *pr__scratch(npy_out *o, const uint8_t *p, size_t copy, size_t n)
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
    if (copy)
        memcpy(o->scratch, p, copy);
    return o->scratch;
}

/* The first jagged batch: its layout replaces the empty Criteo files (or
 * continues the jagged set a checkpoint left). */
static int pr__out_open_jagged(npy_out *o, const pr_batch_view *v, char *err, size_t es)
{
    if (o->batches && !o->jag_resume)
        return pr_seterr(err, es, PR_EINVAL,
                         "--output %s: a jagged batch after Criteo ones (another pipeline?)",
                         o->dir);
    pr_npy_abort(o->dense); /* empty, and not this stream's layout */
    pr_npy_abort(o->sparse);
    pr_npy_abort(o->labels);
    o->dense = o->sparse = o->labels = NULL;
    o->j_labels = (uint16_t)v->n_labels;
    o->j_dense = (uint16_t)v->n_dense;
    o->j_feat = (uint16_t)v->n_sparse;
    const char **names = calloc(v->n_sparse ? v->n_sparse : 1, sizeof(char *));
    o->j_keys = calloc(v->n_sparse ? v->n_sparse : 1, PR_NAME_MAX);
    if (!names || !o->j_keys) {
        free(names);
        return pr_seterr(err, es, PR_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < v->n_sparse; i++) {
        snprintf(o->j_keys[i], PR_NAME_MAX, "%.*s", (int)v->feature_keys[i].len,
                 v->feature_keys[i].s);
        names[i] = o->j_keys[i];
    }
    int rc = pr_npy_jagged_open(&o->jag, o->dir, o->j_labels, o->j_dense, o->j_feat, names,
                                o->jag_resume, o->at_rows, err, es);
    free(names);
    if (rc == 0 && v->n_feature_tables == v->n_sparse && v->n_sparse) {
        if (!(o->j_tables = calloc(v->n_sparse, PR_NAME_MAX)))
            return pr_seterr(err, es, PR_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < v->n_sparse; i++)
            snprintf(o->j_tables[i], PR_NAME_MAX, "%.*s", (int)v->feature_tables[i].len,
                     v->feature_tables[i].s);
    }
    if (rc == 0 && v->n_weighted_keys) {
        if (!(o->j_weighted = calloc(v->n_sparse ? v->n_sparse : 1, 1)))
            return pr_seterr(err, es, PR_ENOMEM, "out of memory");
        for (uint32_t i = 0; i < v->n_weighted_keys; i++)
            o->j_weighted[pr_batch_view_key_index(v, &v->weighted_keys[i])] = 1;
        rc = pr_npy_jagged_weigh(o->jag, o->j_weighted, o->jag_resume, err, es);
    }
    return rc;
}

/* The tensors of a jagged view, aligned (one scratch, four 64-byte aligned parts). */
static int pr__out_write_jagged(npy_out *o, const pr_batch_view *v, char *err, size_t es)
{
    int rc;
    if (!o->jag && (rc = pr__out_open_jagged(o, v, err, es)) < 0)
        return rc;
    if (v->n_labels != o->j_labels || v->n_dense != o->j_dense || v->n_sparse != o->j_feat)
        return pr_seterr(err, es, PR_EINVAL, "batch %llu: another shape than the first batch's",
                         (unsigned long long)v->seq);
    size_t a = (v->label_mat_len + 63) & ~(size_t)63, b = (v->dense_mat_len + 63) & ~(size_t)63;
    size_t c = (v->lengths_len + 63) & ~(size_t)63, d = (v->values_len + 63) & ~(size_t)63;
    uint8_t *m = pr__scratch(o, v->label_mat, v->label_mat_len, a + b + c + d + v->weights_len);
    if (!m)
        return pr_seterr(err, es, PR_ENOMEM, "out of memory");
    if (v->dense_mat_len)
        memcpy(m + a, v->dense_mat, v->dense_mat_len);
    if (v->lengths_len)
        memcpy(m + a + b, v->lengths, v->lengths_len);
    if (v->values_len)
        memcpy(m + a + b + c, v->values, v->values_len);
    if (v->weights_len)
        memcpy(m + a + b + c + d, v->weights, v->weights_len);
    return pr_npy_jagged_append_weighted(
        o->jag, v->rows, (const float *)m, (const float *)(m + a), (const int32_t *)(m + a + b),
        (const int64_t *)(m + a + b + c),
        v->weights_len ? (const float *)(m + a + b + c + d) : NULL, err, es);
}

static int pr__out_write(npy_out *o, const pr_batch_view *v, char *err, size_t es)
{
    const void *d;
    int rc;
    if (v->jagged) {
        if ((rc = pr__out_write_jagged(o, v, err, es)) < 0)
            return rc;
        goto meta;
    }
    if (o->jag || o->jag_resume)
        return pr_seterr(err, es, PR_EINVAL,
                         "--output %s: a Criteo batch in a jagged output (another pipeline?)",
                         o->dir);
    if (!(d = pr__aligned(o, v->dense, v->dense_len)) ||
        (rc = pr_npy_append_cols(o->dense, d, v->rows, v->rows, err, es)) < 0)
        return d ? rc : PR_ENOMEM;
    if (!(d = pr__aligned(o, v->sparse, v->sparse_len)) ||
        (rc = pr_npy_append_cols(o->sparse, d, v->rows, v->rows, err, es)) < 0)
        return d ? rc : PR_ENOMEM;
    if (v->labels_len) {
        if (!(d = pr__aligned(o, v->labels, v->labels_len)) ||
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
meta:
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
    fprintf(o->meta, "]");
    /* Bounded vocabularies: the batch's recycled-index notices, as the files
     * sink writes them, with `row` a row of the output's files: rows from it
     * on use `index` of `column` for a new value (reset that embedding row). */
    if (v->n_recycled) {
        fprintf(o->meta, ", \"recycled\": [");
        for (uint32_t i = 0; i < v->n_recycled; i++) {
            const pr_recycled *r = &v->recycled[i];
            fprintf(o->meta, "%s[%u, %llu, %lld, %llu]", i ? ", " : "", r->col,
                    (unsigned long long)(o->rows + r->row), (long long)r->index,
                    (unsigned long long)r->number);
        }
        fprintf(o->meta, "]");
    }
    fprintf(o->meta, "}");
    if (v->n_vocab_sizes != o->n_vocab) {
        uint64_t *nv = realloc(o->vocab, (v->n_vocab_sizes + 1) * sizeof(*nv));
        if (!nv)
            return PR_ENOMEM;
        o->vocab = nv;
        o->n_vocab = v->n_vocab_sizes;
    }
    for (uint32_t i = 0; i < v->n_vocab_sizes; i++)
        o->vocab[i] = v->vocab_sizes[i];
    o->rows += v->rows;
    o->batches++;
    return 0;
}

static void pr__json_str(FILE *f, const char *s);

/* ,\n  "key": ["a", ...] (names NULL: the key is left out). */
static void pr__json_names(FILE *f, const char *key, char *const *names, uint32_t n)
{
    if (!names)
        return;
    fprintf(f, ",\n  \"%s\": [", key);
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, "%s", i ? ", " : "");
        pr__json_str(f, names[i]);
    }
    fprintf(f, "]");
}

static int pr__out_close(npy_out *o, char *err, size_t es)
{
    int rc = 0, r;
    if (o->dense && (r = pr_npy_close(o->dense, err, es)) < 0)
        rc = r;
    if (o->sparse && (r = pr_npy_close(o->sparse, err, es)) < 0)
        rc = r;
    if (o->labels && (r = pr_npy_close(o->labels, err, es)) < 0)
        rc = r;
    if (o->jag && (r = pr_npy_jagged_close(o->jag, false, err, es)) < 0)
        rc = r;
    if (o->meta) {
        /* The files sink's closing keys (docs/formats.md), so one loader
         * reads both: the shape, the last batch's vocab_sizes, the names. */
        fprintf(o->meta, "\n  ],\n  \"rows\": %llu", (unsigned long long)o->rows);
        if (o->j_keys) {
            fprintf(o->meta,
                    ",\n  \"jagged\": true,\n  \"n_labels\": %u,\n  \"n_dense\": %u,\n  "
                    "\"n_sparse\": %u,\n  \"sparse_width\": 8,\n  \"feature_keys\": [",
                    o->j_labels, o->j_dense, o->j_feat);
            for (uint32_t i = 0; i < o->j_feat; i++)
                fprintf(o->meta, "%s\"%s\"", i ? ", " : "", o->j_keys[i]);
            fprintf(o->meta, "]");
            if (o->j_weighted) {
                fprintf(o->meta, ",\n  \"weighted_keys\": [");
                for (uint32_t i = 0, k = 0; i < o->j_feat; i++)
                    if (o->j_weighted[i])
                        fprintf(o->meta, "%s\"%s\"", k++ ? ", " : "", o->j_keys[i]);
                fprintf(o->meta, "]");
            }
            if (o->j_tables) { /* shared vocabularies, as the server names them */
                fprintf(o->meta, ",\n  \"feature_tables\": [");
                for (uint32_t i = 0; i < o->j_feat; i++)
                    fprintf(o->meta, "%s\"%s\"", i ? ", " : "", o->j_tables[i]);
                fprintf(o->meta, "]");
            }
            /* the server's column names (Subscribe): a vector's NAME[0].. */
            if (o->info && o->info->dense_names && o->info->n_dense == o->j_dense)
                pr__json_names(o->meta, "dense_names", o->info->dense_names, o->info->n_dense);
        } else if (o->info) {
            fprintf(o->meta, ",\n  \"n_dense\": %u,\n  \"n_sparse\": %u,\n  \"sparse_width\": %u",
                    o->info->n_dense, o->info->n_sparse, o->info->sparse_width);
            pr__json_names(o->meta, "dense_names", o->info->dense_names, o->info->n_dense);
            pr__json_names(o->meta, "sparse_names", o->info->sparse_names, o->info->n_sparse);
        }
        fprintf(o->meta, ",\n  \"vocab_sizes\": [");
        for (uint32_t i = 0; i < o->n_vocab; i++)
            fprintf(o->meta, "%s%llu", i ? ", " : "", (unsigned long long)o->vocab[i]);
        fprintf(o->meta, "]\n}\n");
        if (fclose(o->meta) != 0 && rc == 0)
            rc = pr_seterr(err, es, PR_EIO, "%s: %s", o->meta_path, strerror(errno));
    }
    free(o->scratch);
    free(o->j_keys);
    free(o->j_weighted);
    free(o->j_tables);
    free(o->vocab);
    memset(o, 0, sizeof(*o));
    return rc;
}

/* ---------------------------------------------------------------- checkpoints */

/* The checkpoint lineage: what the output ("the model") holds. */
typedef struct consume_ckpt {
    pr_trainer_position *pos; /* every row written: the restored checkpoint's and since */
    uint64_t id;              /* checkpoints made so far (the CheckpointCommit id) */
    uint64_t batches, rows;   /* totals in the lineage */
    uint64_t since;           /* batches written since the last checkpoint */
    bool have_out;            /* the last checkpoint holds an --output directory */
    char out_dir[4096];
    out_mark out;
    bool no_ok; /* a commit went unanswered (server in ack delivery?): stop waiting */
} consume_ckpt;

/* A reader of the checkpoint file's JSON: exactly the shape ck_write makes
 * (an object of integers, strings, "output" and "position" objects). */
typedef struct ck_reader {
    const char *s, *start, *path;
    char *err;
    size_t es;
} ck_reader;

static int pr__ck_bad(ck_reader *r, const char *what)
{
    return pr_seterr(r->err, r->es, PR_EBADREC, "checkpoint file %s, byte %zu: %s", r->path,
                     (size_t)(r->s - r->start), what);
}

static void pr__ck_ws(ck_reader *r)
{
    while (*r->s == ' ' || *r->s == '\n' || *r->s == '\t' || *r->s == '\r')
        r->s++;
}

static int pr__ck_string(ck_reader *r, char *out, size_t n)
{
    pr__ck_ws(r);
    if (*r->s != '"')
        return pr__ck_bad(r, "expected a string");
    r->s++;
    size_t k = 0;
    for (; *r->s != '"'; r->s++) {
        if (!*r->s)
            return pr__ck_bad(r, "unterminated string");
        if (*r->s == '\\' && *++r->s == '\0')
            return pr__ck_bad(r, "unterminated string");
        if (k + 1 < n)
            out[k++] = *r->s;
    }
    r->s++;
    out[k] = '\0';
    return 0;
}

static int pr__ck_uint(ck_reader *r, uint64_t *v)
{
    pr__ck_ws(r);
    char *e;
    errno = 0;
    *v = strtoull(r->s, &e, 10);
    if (e == r->s || errno || *r->s == '-')
        return pr__ck_bad(r, "expected an unsigned integer");
    r->s = e;
    return 0;
}

/* One object's members, at depth 0 (the file) or 1 ("output"). */
static int pr__ck_object(ck_reader *r, consume_ckpt *ck, char *pipeline, size_t pn, int depth)
{
    pr__ck_ws(r);
    if (*r->s++ != '{')
        return pr__ck_bad(r, "expected an object");
    pr__ck_ws(r);
    if (*r->s == '}') {
        r->s++;
        return 0;
    }
    for (;;) {
        char key[64], str[4096];
        uint64_t v = 0;
        int rc = pr__ck_string(r, key, sizeof(key));
        pr__ck_ws(r);
        if (rc < 0 || *r->s++ != ':')
            return rc < 0 ? rc : pr__ck_bad(r, "expected ':'");
        pr__ck_ws(r);
        if (depth == 0 && !strcmp(key, "position")) {
            if ((rc = pr_trainer_position_parse_json(ck->pos, r->s, &r->s, r->err, r->es)) < 0)
                return rc;
        } else if (depth == 0 && !strcmp(key, "output")) {
            ck->have_out = true;
            if ((rc = pr__ck_object(r, ck, pipeline, pn, 1)) < 0)
                return rc;
        } else if (*r->s == '"') {
            if ((rc = pr__ck_string(r, str, sizeof(str))) < 0)
                return rc;
            if (depth == 0 && !strcmp(key, "pipeline")) {
                size_t l = strnlen(str, pn - 1);
                memcpy(pipeline, str, l);
                pipeline[l] = '\0';
            } else if (depth == 0 && !strcmp(key, "delivery") && strcmp(str, "checkpoint") != 0)
                return pr__ck_bad(r, "not a checkpoint-delivery position");
            else if (depth == 1 && !strcmp(key, "dir"))
                snprintf(ck->out_dir, sizeof(ck->out_dir), "%s", str);
        } else {
            if ((rc = pr__ck_uint(r, &v)) < 0)
                return rc;
            if (depth == 0 && !strcmp(key, "version") && v != 1)
                return pr__ck_bad(r, "unsupported version");
            uint64_t *dst = depth == 0 ? (!strcmp(key, "checkpoint") ? &ck->id
                                          : !strcmp(key, "batches")  ? &ck->batches
                                          : !strcmp(key, "rows")     ? &ck->rows
                                                                     : NULL)
                                       : (!strcmp(key, "batches")      ? &ck->out.batches
                                          : !strcmp(key, "rows")       ? &ck->out.rows
                                          : !strcmp(key, "meta_bytes") ? &ck->out.meta_bytes
                                                                       : NULL);
            if (dst)
                *dst = v;
        }
        pr__ck_ws(r);
        if (*r->s == ',') {
            r->s++;
            continue;
        }
        if (*r->s++ != '}')
            return pr__ck_bad(r, "expected ',' or '}'");
        return 0;
    }
}

/* Read the checkpoint file, if there is one: 0 (ck filled or fresh), or a
 * PR_E* code for an unreadable file or another pipeline's. */
static int pr__ck_load(consume_ckpt *ck, const char *path, const char *pipeline, char *err,
                       size_t es)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : pr_seterr(err, es, PR_EIO, "%s: %s", path, strerror(errno));
    char *text = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n + 65537 > cap) {
            char *nt = realloc(text, cap = cap * 2 + 65537);
            if (!nt) {
                rc = pr_seterr(err, es, PR_ENOMEM, "%s: out of memory", path);
                break;
            }
            text = nt;
        }
        size_t k = fread(text + n, 1, 65536, f);
        n += k;
        if (k < 65536)
            break;
    }
    if (!rc && ferror(f))
        rc = pr_seterr(err, es, PR_EIO, "%s: %s", path, strerror(errno));
    fclose(f);
    if (!rc) {
        text[n] = '\0';
        char pl[PR_NAME_MAX] = "";
        ck_reader r = {text, text, path, err, es};
        rc = pr__ck_object(&r, ck, pl, sizeof(pl), 0);
        if (!rc && strcmp(pl, pipeline) != 0)
            rc = pr_seterr(err, es, PR_EINVAL, "%s holds a position of pipeline '%s', not '%s'",
                           path, pl, pipeline);
    }
    free(text);
    return rc;
}

static void pr__json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* Write the checkpoint file durably: a temporary file, fsync, rename over
 * `path`, fsync the directory (else the rename itself may be lost). */
static int pr__ck_write(const consume_ckpt *ck, const char *path, const char *pipeline, char *err,
                        size_t es)
{
    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pr_seterr(err, es, PR_EIO, "%s: %s", tmp, strerror(errno));
    fprintf(f, "{\"version\": 1, \"pipeline\": ");
    pr__json_str(f, pipeline);
    fprintf(f,
            ", \"delivery\": \"checkpoint\", \"checkpoint\": %llu, \"batches\": %llu, "
            "\"rows\": %llu,\n",
            (unsigned long long)ck->id, (unsigned long long)ck->batches,
            (unsigned long long)ck->rows);
    if (ck->have_out) {
        fprintf(f, " \"output\": {\"dir\": ");
        pr__json_str(f, ck->out_dir);
        fprintf(f, ", \"batches\": %llu, \"rows\": %llu, \"meta_bytes\": %llu},\n",
                (unsigned long long)ck->out.batches, (unsigned long long)ck->out.rows,
                (unsigned long long)ck->out.meta_bytes);
    }
    fprintf(f, " \"position\": ");
    int rc = pr_trainer_position_write_json(ck->pos, f);
    fprintf(f, "}\n");
    if (rc < 0 || fflush(f) != 0 || fsync(fileno(f)) < 0) {
        rc = pr_seterr(err, es, PR_EIO, "%s: %s", tmp, strerror(errno));
        fclose(f);
        return rc;
    }
    if (fclose(f) != 0 || rename(tmp, path) < 0)
        return pr_seterr(err, es, PR_EIO, "%s: %s", path, strerror(errno));
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd) < 0) {
        rc = pr_seterr(err, es, PR_EIO, "%s: %s", dir, strerror(errno));
        if (dfd >= 0)
            close(dfd);
        return rc;
    }
    close(dfd);
    return 0;
}

/* Make a checkpoint: output durable, then the position file, then (when
 * the connection c is still up) CheckpointCommit. Returns 0, or 1 after a
 * runtime error. */
static int pr__consume_checkpoint(pr_trainer_client *c, const consume_opts *opt, npy_out *out,
                                  consume_ckpt *ck)
{
    char err[512];
    if (opt->output) {
        if (pr__out_sync(out, &ck->out, err, sizeof(err)) < 0) {
            fprintf(stderr, "piperec consume: checkpoint: %s\n", err);
            return 1;
        }
        ck->have_out = true;
        snprintf(ck->out_dir, sizeof(ck->out_dir), "%s", opt->output);
    }
    ck->id++;
    if (pr__ck_write(ck, opt->ckpt_file, opt->pipeline, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: checkpoint: %s\n", err);
        return 1;
    }
    ck->since = 0;
    const pr_trainer_range *r;
    int64_t n = pr_trainer_position_ranges(ck->pos, &r);
    uint32_t released = 0;
    int got = 0;
    if (c && n >= 0) {
        got = pr_trainer_client_checkpoint(c, r, (size_t)n, ck->id, ck->no_ok ? 0 : 10000,
                                           &released, err, sizeof(err));
        if (got < 0) {
            /* F is durable: the next start resumes from it whatever happened here. */
            fprintf(stderr, "piperec consume: checkpoint %llu is durable, its commit failed: %s\n",
                    (unsigned long long)ck->id, err);
            return 1;
        }
        if (got == 0 && !ck->no_ok) {
            fprintf(stderr, "piperec consume: no CheckpointOk in 10 s: is the server's "
                            "sinks.trainer.delivery 'checkpoint'? (not waiting any more)\n");
            ck->no_ok = true;
        }
    }
    if (!opt->quiet) {
        char rel[48] = "not committed (no connection)";
        if (c)
            snprintf(rel, sizeof(rel), got ? "server released %u batches" : "commit sent",
                     released);
        fprintf(stderr,
                "piperec consume: checkpoint %llu: %llu batches, %llu rows, %llu offsets in "
                "%lld ranges; %s\n",
                (unsigned long long)ck->id, (unsigned long long)ck->batches,
                (unsigned long long)ck->rows,
                (unsigned long long)pr_trainer_position_count(ck->pos), (long long)n, rel);
    }
    return 0;
}

/* Parse argv into opt. Returns true when the command should run; otherwise
 * *status is the exit code (0 after --help, 2 on a usage error). */
static bool pr__consume_parse(int argc, char **argv, consume_opts *opt, int *status)
{
    *opt = (consume_opts){.credits = 8, .idle_timeout_ms = -1, .connect_timeout_ms = 30000};
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:p:n:k:o:i:t:T:qSA:C:K:F:vP:E:L:h", consume_longopts,
                             NULL)) != -1) {
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
        case 'v':
            opt->verbose = 1;
            break;
        case 'P':
            opt->ckpt_file = optarg;
            break;
        case 'E': {
            char *e;
            opt->ckpt_every = strtoull(optarg, &e, 10);
            if (*e || !opt->ckpt_every || *optarg == '-') {
                fprintf(stderr, "piperec consume: --checkpoint-every: '%s' is not a count >= 1\n",
                        optarg);
                *status = 2;
                return false;
            }
            break;
        }
        case 'L': {
            int i = 0;
            while (consume_layouts[i] && strcmp(consume_layouts[i], optarg))
                i++;
            if (!consume_layouts[i]) {
                fprintf(stderr, "piperec consume: --layout: '%s' is not protobuf or raw\n", optarg);
                *status = 2;
                return false;
            }
            opt->layout = i;
            break;
        }
        case 'h':
            pr__consume_usage(stdout);
            *status = 0;
            return false;
        default:
            pr__consume_usage(stderr);
            *status = 2;
            return false;
        }
    }
    if (!opt->connect || !opt->pipeline || opt->credits == 0) {
        fprintf(stderr,
                "piperec consume: --connect and --pipeline are required (and --credits >= 1)\n");
        pr__consume_usage(stderr);
        *status = 2;
        return false;
    }
    if (opt->ckpt_every && !opt->ckpt_file) {
        fprintf(stderr, "piperec consume: --checkpoint-every needs --checkpoint-file\n");
        *status = 2;
        return false;
    }
    return true;
}

/* What was received, for the sequence checks and the summary. */
typedef struct consume_tally {
    uint64_t batches, rows, first_seq, last_seq, max_seq, out_of_order, repeats;
    uint64_t notices; /* recycled-index notices the batches carried */
    uint64_t epoch;   /* of the batches being tallied: a higher one starts afresh */
    uint64_t *seen;   /* bitmap of sequences received: catches repeats */
    size_t seen_cap;
    double t_first, t_last;
} consume_tally;

/* Record sequence number seq: a repeat is reported, a number not above the
 * highest seen counts as out of order. PR_ENOMEM when the bitmap cannot grow. */
static int pr__tally_seq(consume_tally *t, uint64_t epoch, uint64_t seq)
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

/* --verbose: the batch's provenance, one line. */
static void pr__print_batch(const pr_batch_view *v)
{
    fprintf(stderr, "piperec consume: batch %llu/%llu: %u rows, offsets",
            (unsigned long long)v->epoch, (unsigned long long)v->seq, v->rows);
    for (uint32_t i = 0; i < v->n_ranges; i++)
        fprintf(stderr, " %.*s/%d:%lld..%lld", (int)v->ranges[i].topic_len, v->ranges[i].topic,
                v->ranges[i].partition, (long long)v->ranges[i].first_offset,
                (long long)v->ranges[i].last_offset);
    fputc('\n', stderr);
}

/* One received batch: check its sequence, write it out, add it to the
 * checkpoint position (ck, when checkpointing), ack it, and checkpoint
 * every --checkpoint-every batches. Clears v. Returns 0, or 1 after a
 * runtime error. */
static int pr__consume_batch(pr_trainer_client *c, const consume_opts *opt, npy_out *out,
                             consume_tally *t, consume_ckpt *ck, pr_batch_view *v)
{
    char err[512];
    if (pr__tally_seq(t, v->epoch, v->seq) < 0) {
        pr_batch_view_fini(v);
        return 1;
    }
    if (!t->batches) {
        t->first_seq = v->seq;
        t->t_first = pr__mono_s();
    }
    t->last_seq = v->seq;
    if (opt->output && pr__out_write(out, v, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        pr_batch_view_fini(v);
        return 1;
    }
    if (opt->verbose)
        pr__print_batch(v);
    if (ck) {
        if (pr_trainer_position_add_batch(ck->pos, v) < 0) {
            fprintf(stderr, "piperec consume: batch %llu: bad offset ranges, or out of memory\n",
                    (unsigned long long)v->seq);
            pr_batch_view_fini(v);
            return 1;
        }
        ck->batches++;
        ck->rows += v->rows;
        ck->since++;
    }
    t->batches++;
    t->rows += v->rows;
    t->notices += v->n_recycled;
    t->t_last = pr__mono_s();
    uint64_t seq = v->seq;
    pr_batch_view_fini(v);
    /* Ack after the batch is written: the server may then commit its offsets. */
    if (pr_trainer_client_ack(c, seq) < 0) {
        fprintf(stderr, "piperec consume: cannot ack batch %llu\n", (unsigned long long)seq);
        return 1;
    }
    if (ck && opt->ckpt_every && ck->since >= opt->ckpt_every)
        return pr__consume_checkpoint(c, opt, out, ck);
    return 0;
}

/* A checkpoint is also taken once no batch came for this long. */
#define PR__CONSUME_IDLE_CHECKPOINT_S 1.0

/* Receive until --count, EOF, the idle timeout, an error or a signal.
 * *end says why it stopped; returns 0, or 1 after a runtime error. */
static int pr__consume_loop(pr_trainer_client *c, const consume_opts *opt, npy_out *out,
                            consume_tally *t, consume_ckpt *ck, const char **end)
{
    char err[512];
    int rc = 0;
    double idle_since = pr__mono_s();
    *end = "stopped";
    while (!consume_stop && (opt->count == 0 || t->batches < opt->count)) {
        pr_batch_view v;
        int r = pr_trainer_client_next(c, &v, 200, err, sizeof(err));
        if (r == 0) {
            double idle = pr__mono_s() - idle_since;
            if (opt->idle_timeout_ms >= 0 && idle * 1e3 >= (double)opt->idle_timeout_ms) {
                *end = "idle timeout";
                break;
            }
            /* The tail after the last --checkpoint-every group: checkpointed
             * once the stream pauses, so the committed offsets catch up
             * (they waited for N more batches, or the stop). */
            if (ck && opt->ckpt_every && ck->since && idle >= PR__CONSUME_IDLE_CHECKPOINT_S &&
                (rc = pr__consume_checkpoint(c, opt, out, ck)) != 0)
                break;
            continue;
        }
        if (r < 0) {
            if (r == PR_EIO && !strcmp(err, "server closed the connection")) {
                *end = "server closed the connection";
            } else if (r == PR_ESTATE && pr_trainer_client_stopping(c)) {
                *end = "server stopping"; /* a clean stop: the last checkpoint follows */
            } else {
                fprintf(stderr, "piperec consume: %s\n", err);
                rc = 1;
            }
            break;
        }
        idle_since = pr__mono_s();
        if ((rc = pr__consume_batch(c, opt, out, t, ck, &v)) != 0)
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
static void pr__consume_rate(const consume_tally *t, char *buf, size_t n)
{
    double span = t->t_last - t->t_first;
    if (t->batches < 2 || span < 1.0)
        snprintf(buf, n, "n/a rows/s");
    else
        snprintf(buf, n, "%.0f rows/s", (double)t->rows / span);
}

static void pr__consume_summary(const char *end, const consume_tally *t, double t0)
{
    char rate[48];
    pr__consume_rate(t, rate, sizeof(rate));
    printf("piperec consume: %s: %llu batches, %llu rows, seq %llu..%llu (max %llu), %llu out of "
           "order, "
           "%llu repeated, %s, %.2f s total, epoch %llu",
           end, (unsigned long long)t->batches, (unsigned long long)t->rows,
           (unsigned long long)t->first_seq, (unsigned long long)t->last_seq,
           (unsigned long long)t->max_seq, (unsigned long long)t->out_of_order,
           (unsigned long long)t->repeats, rate, pr__mono_s() - t0, (unsigned long long)t->epoch);
    if (t->notices) /* bounded vocabularies: meta.json "recycled" with --output */
        printf(", %llu recycled-index notice(s)", (unsigned long long)t->notices);
    printf("\n");
}

/* Open with retries: connection-level failures (refused, unreachable, name
 * not resolved yet, no answer in time) are retried with backoff until the
 * deadline; a server Error or a usage problem is final. */
static int pr__consume_open(const consume_opts *opt, const pr_trainer_client_opts *co,
                            pr_trainer_client **c, char *err, size_t es)
{
    double deadline = pr__mono_s() + (double)opt->connect_timeout_ms / 1e3;
    int backoff_ms = 100, tries = 0;
    for (;;) {
        int rc = pr_trainer_client_open(co, c, err, es);
        tries++;
        if (rc == 0 || (rc != PR_EIO && rc != PR_ETIMEDOUT) || consume_stop)
            return rc;
        double left = deadline - pr__mono_s();
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

/* What SubscribeOk said, on stderr (not with --quiet). */
static void pr__consume_announce(const consume_opts *opt, const pr_trainer_info *in)
{
    fprintf(stderr,
            "piperec consume: subscribed to %s at %s: %u dense, %u sparse (int%u; a declared "
            "schema's jagged values are int64), %u credits\n",
            in->pipeline, opt->connect, in->n_dense, in->n_sparse, in->sparse_width * 8,
            in->credits);
    if (opt->layout == 1)
        fprintf(stderr, "%s",
                in->layout == 1 ? "piperec consume: raw tensor layout\n"
                                : "piperec consume: the server has no raw layout: "
                                  "batches come as TrainingBatch\n");
}

int pr_cli_cmd_consume(int argc, char **argv)
{
    consume_opts opt;
    int status;
    if (!pr__consume_parse(argc, argv, &opt, &status))
        return status;

    struct sigaction sa = {0};
    sa.sa_handler = pr__on_signal;
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
                                 .tls_key = opt.tls_key,
                                 .raw_layout = opt.layout == 1};
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
    consume_ckpt ckst = {0}, *ck = NULL;
    const out_mark *out_at = NULL;
    if (opt.ckpt_file) {
        ck = &ckst;
        if (!(ck->pos = pr_trainer_position_new())) {
            fprintf(stderr, "piperec consume: out of memory\n");
            return 1;
        }
        int lrc = pr__ck_load(ck, opt.ckpt_file, opt.pipeline, err, sizeof(err));
        if (lrc < 0) {
            fprintf(stderr, "piperec consume: --checkpoint-file: %s\n", err);
            pr_trainer_position_free(ck->pos);
            return lrc == PR_EIO || lrc == PR_ENOMEM ? 1 : 2;
        }
        const pr_trainer_range *r;
        int64_t n = pr_trainer_position_ranges(ck->pos, &r);
        if (n < 0) {
            fprintf(stderr, "piperec consume: out of memory\n");
            pr_trainer_position_free(ck->pos);
            return 1;
        }
        co.resume = r;
        co.n_resume = (size_t)n;
        /* The output resumes with the position only when it is the same one. */
        if (ck->have_out && opt.output && !strcmp(ck->out_dir, opt.output))
            out_at = &ck->out;
        else if (ck->have_out && opt.output)
            fprintf(stderr, "piperec consume: checkpoint %llu wrote to %s; starting %s afresh\n",
                    (unsigned long long)ck->id, ck->out_dir, opt.output);
        if (!opt.quiet)
            fprintf(stderr,
                    "piperec consume: resuming after checkpoint %llu of %s: %llu batches, %llu "
                    "rows, %lld offset ranges\n",
                    (unsigned long long)ck->id, opt.ckpt_file, (unsigned long long)ck->batches,
                    (unsigned long long)ck->rows, (long long)n);
        if (!out_at) /* a fresh output holds nothing yet */
            ck->have_out = false;
    }
    pr_trainer_client *c;
    if (pr__consume_open(&opt, &co, &c, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        pr_trainer_position_free(ckst.pos);
        return 1;
    }
    const pr_trainer_info *in = pr_trainer_client_info(c);
    if (!opt.quiet)
        pr__consume_announce(&opt, in);

    npy_out out = {0};
    if (opt.output && pr__out_open(&out, opt.output, in, out_at, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        pr__out_close(&out, err, sizeof(err));
        pr_trainer_client_close(c);
        pr_trainer_position_free(ckst.pos);
        return 1;
    }

    consume_tally t = {0};
    const char *end;
    double t0 = pr__mono_s();
    int rc = pr__consume_loop(c, &opt, &out, &t, ck, &end);
    /* A clean stop is a checkpoint too (a runtime error is not: what was
     * written may not be whole). Without a connection the commit is left to
     * the next start's Subscribe.resume. */
    if (ck && rc == 0 && ck->since)
        rc = pr__consume_checkpoint(strcmp(end, "server closed the connection") ? c : NULL, &opt,
                                    &out, ck);
    if (opt.output && pr__out_close(&out, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec consume: %s\n", err);
        rc = 1;
    }
    pr_trainer_client_close(c);
    pr_trainer_position_free(ckst.pos);
    free(t.seen);
    pr__consume_summary(end, &t, t0);
    if (t.repeats)
        rc = 1;
    return rc;
}
