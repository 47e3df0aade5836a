/*
 * sink_files.c — the files sink: batches written in the offline .npy layout,
 * one directory per roll of batches:
 *
 *     DIR/batches-<epoch>-<first_seq>-<last_seq>/{dense.npy, sparse.npy, labels.npy,
 *                                                 meta.json}
 *
 * The epoch (pr_batch.epoch: bumped at every start with a state dir, 0
 * without one) keeps the rolls of successive runs apart, since sequence
 * numbers restart at 1 in each epoch; readers order rolls by (epoch, first).
 *
 * dense.npy is float32 [rows, n_dense], sparse.npy int32/int64 [rows,
 * n_sparse], labels.npy int32 [rows] (sinks/include/pr_npy.h's streaming writer,
 * C order), meta.json lists every batch: sequence, row range in the files,
 * offset ranges, event-time bounds, vocabulary sizes, and (bounded
 * vocabularies) its recycled-index notices as "recycled": [[column, row,
 * index, number], ...] with `row` numbered like row_start (a row of the
 * roll's files), so a reader resets the index before that row. The key is
 * left out of a batch without notices, so without eviction meta.json is what
 * it always was.
 *
 * Jagged batches (a declared schema, issue 20; pr_batch.jagged) get the
 * declared schema's offline layout in each roll instead (pr_npy.h, "jagged
 * set"): labels.npy float32 [rows, n_labels], dense.npy float32 [rows,
 * n_dense], sparse/<feature>.values.npy int64 and sparse/<feature>.lengths.npy
 * int32 [rows], with meta.json saying "jagged": true and naming the features
 * (feature_keys), labels and dense columns; vocab_sizes and the notices'
 * columns index the features. The first batch of a roll decides its layout;
 * a batch of another shape closes the roll first.
 *
 * Acknowledgement (what keeps at-least-once honest): a roll is written into
 * DIR/.tmp-batches-<epoch>-<first_seq>/; when it has roll_batches batches (or is
 * older than roll_max_ms at a poll, so commits do not wait forever) the
 * files are closed and fsync'd, the directory is renamed to its final name
 * and DIR is fsync'd; only then are its batches acknowledged. A crash before
 * that leaves a .tmp- directory that readers ignore, and the batches' input
 * offsets were never committed, so they are read and written again. Closing
 * the sink with a roll open removes its .tmp- directory for the same reason,
 * and opening it removes those a crash left (pr__sweep_tmp).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <stdio.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_grow.h"
#include "pr_log.h"
#include "pr_npy.h"
#include "pr_sink.h"
#include "sink_acks.h"

#define NS_PER_MS 1000000LL

typedef struct files_sink {
    pr_sink base;
    char *dir;
    int lock_fd; /* DIR opened and flock'd for the sink's life; -1 none */
    uint32_t roll_batches;
    int64_t roll_max_ns;
    const pr_clock *clock;
    uint16_t n_dense, n_sparse;
    uint8_t sparse_width;
    char **sparse_names;

    /* open roll */
    bool open;
    char tmp[4096];
    uint64_t epoch, first_seq, last_seq;
    int64_t opened_ns;
    uint64_t rows;
    pr_npy_writer *w_dense, *w_sparse, *w_labels;
    pr_npy_jagged *jag; /* a roll of jagged batches: its files instead of the three above */
    uint16_t j_labels, j_dense, j_feat;
    char (*j_keys)[PR_NAME_MAX], (*j_label_names)[PR_NAME_MAX], (*j_dense_names)[PR_NAME_MAX];
    char (*j_tables)[PR_NAME_MAX]; /* each feature's vocabulary table; NULL = none shared */
    uint8_t *j_weighted; /* [j_feat] the features with weights (first batch's); NULL none */
    FILE *meta;          /* batch entries, joined into meta.json at close */
    char meta_path[4200];
    uint64_t *seqs; /* batches in the roll */
    size_t n_seqs, cap_seqs;
    uint64_t *last_vocab;
    uint32_t n_vocab; /* entries of last_vocab */

    /* closed rolls: acks not yet reported */
    pr__acks acked;
    bool failed;
    pr_sink_stats st; /* pipeline thread's copy */
    pthread_mutex_t mu;
    pr_sink_stats pub; /* published under mu for get_stats */
} files_sink;

/* Copy the counters for other threads (end of send and poll). */
static void pr__publish(files_sink *f)
{
    pthread_mutex_lock(&f->mu);
    f->pub = f->st;
    f->pub.queued_batches = f->n_seqs;
    pthread_mutex_unlock(&f->mu);
}

static int pr__fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PR_EIO;
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? 0 : PR_EIO;
}

static void pr__rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[4400];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            if (unlink(p) < 0 && (errno == EISDIR || errno == EPERM))
                pr__rm_tree(p); /* a jagged roll's sparse/ */
        }
        closedir(d);
    }
    rmdir(dir);
}

/* The unfinished rolls a crash (kill -9, power loss) left in dir: their
 * batches were never acknowledged, so they are written again; the
 * directories would otherwise pile up, one per crash. The directory is this
 * sink's alone (the config refuses two pipelines in one; across processes,
 * the flock on DIR itself, taken first). */
static void pr__sweep_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    static const char prefix[] = ".tmp-batches-";
    char p[4400];
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, sizeof(prefix) - 1)) {
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            pr__rm_tree(p);
            n++;
        }
    closedir(d);
    if (n)
        pr_info("files sink: removed %u unfinished roll(s) an earlier run left in %s (never "
                "acknowledged: their batches are written again)",
                n, dir);
}

static void pr__free_jnames(files_sink *f)
{
    free(f->j_keys);
    free(f->j_label_names);
    free(f->j_dense_names);
    free(f->j_tables);
    free(f->j_weighted);
    f->j_weighted = NULL;
    f->j_keys = f->j_label_names = f->j_dense_names = f->j_tables = NULL;
}

static void pr__roll_abort(files_sink *f)
{
    pr_npy_abort(f->w_dense);
    pr_npy_abort(f->w_sparse);
    pr_npy_abort(f->w_labels);
    f->w_dense = f->w_sparse = f->w_labels = NULL;
    pr_npy_jagged_abort(f->jag);
    f->jag = NULL;
    pr__free_jnames(f);
    if (f->meta)
        fclose(f->meta);
    f->meta = NULL;
    if (f->open)
        pr__rm_tree(f->tmp);
    f->open = false;
    f->n_seqs = 0;
}

/* A jagged roll's files and names, shaped by its first batch. */
static int pr__roll_open_jagged(files_sink *f, const pr_batch *b, char *errstr, size_t es)
{
    f->j_labels = b->n_labels;
    f->j_dense = b->n_dense;
    f->j_feat = b->n_sparse;
    size_t nk = (size_t)(b->n_sparse ? b->n_sparse : 1) * PR_NAME_MAX;
    const char **names = calloc(b->n_sparse ? b->n_sparse : 1, sizeof(char *));
    f->j_keys = malloc(nk);
    if (b->label_names && (f->j_label_names = malloc((size_t)b->n_labels * PR_NAME_MAX + 1)))
        memcpy(f->j_label_names, b->label_names, (size_t)b->n_labels * PR_NAME_MAX);
    if (b->dense_names && (f->j_dense_names = malloc((size_t)b->n_dense * PR_NAME_MAX + 1)))
        memcpy(f->j_dense_names, b->dense_names, (size_t)b->n_dense * PR_NAME_MAX);
    if (b->feature_tables && (f->j_tables = malloc(nk)))
        memcpy(f->j_tables, b->feature_tables, (size_t)b->n_sparse * PR_NAME_MAX);
    int rc = 0;
    if (!names || !f->j_keys || (b->label_names && !f->j_label_names) ||
        (b->dense_names && !f->j_dense_names) || (b->feature_tables && !f->j_tables))
        rc = pr_seterr(errstr, es, PR_ENOMEM, "files sink: out of memory");
    for (uint32_t i = 0; rc == 0 && i < b->n_sparse; i++) {
        memcpy(f->j_keys[i], b->feature_keys[i], PR_NAME_MAX);
        f->j_keys[i][PR_NAME_MAX - 1] = 0;
        names[i] = f->j_keys[i];
    }
    if (rc == 0)
        rc = pr_npy_jagged_open(&f->jag, f->tmp, b->n_labels, b->n_dense, b->n_sparse, names, false,
                                0, errstr, es);
    if (rc == 0 && b->weighted) {
        if (!(f->j_weighted = malloc(b->n_sparse ? b->n_sparse : 1)))
            rc = pr_seterr(errstr, es, PR_ENOMEM, "files sink: out of memory");
        else
            memcpy(f->j_weighted, b->weighted, b->n_sparse);
    }
    if (rc == 0 && f->j_weighted)
        rc = pr_npy_jagged_weigh(f->jag, f->j_weighted, false, errstr, es);
    free(names);
    return rc;
}

/* Does a jagged batch fit the open jagged roll's layout? */
static bool pr__same_jagged(const files_sink *f, const pr_batch *b)
{
    if (!b->jagged || !f->jag || b->n_labels != f->j_labels || b->n_dense != f->j_dense ||
        b->n_sparse != f->j_feat)
        return false;
    for (uint32_t i = 0; i < b->n_sparse; i++)
        if (strncmp(b->feature_keys[i], f->j_keys[i], PR_NAME_MAX))
            return false;
    return true;
}

static int pr__roll_open(files_sink *f, const pr_batch *b, char *errstr, size_t es)
{
    uint64_t epoch = b->epoch, first_seq = b->seq;
    snprintf(f->tmp, sizeof(f->tmp), "%s/.tmp-batches-%llu-%llu", f->dir, (unsigned long long)epoch,
             (unsigned long long)first_seq);
    pr__rm_tree(f->tmp); /* leftover of a crash */
    if (mkdir(f->tmp, 0755) < 0)
        return pr_seterr(errstr, es, PR_EIO, "files sink: mkdir %s: %s", f->tmp, strerror(errno));
    f->open = true;
    f->epoch = epoch;
    f->first_seq = first_seq;
    f->rows = 0;
    f->n_seqs = 0;
    f->opened_ns = pr_clock_mono_ns(f->clock);
    char p[4200];
    int err;
    if (b->jagged) {
        if ((err = pr__roll_open_jagged(f, b, errstr, es)) < 0)
            goto fail;
        goto meta;
    }
    snprintf(p, sizeof(p), "%s/dense.npy", f->tmp);
    if ((err = pr_npy_open(&f->w_dense, p, PR_NPY_F32, f->n_dense, errstr, es)) < 0)
        goto fail;
    snprintf(p, sizeof(p), "%s/sparse.npy", f->tmp);
    if ((err = pr_npy_open(&f->w_sparse, p, f->sparse_width == 8 ? PR_NPY_I64 : PR_NPY_I32,
                           f->n_sparse, errstr, es)) < 0)
        goto fail;
    snprintf(p, sizeof(p), "%s/labels.npy", f->tmp);
    if ((err = pr_npy_open(&f->w_labels, p, PR_NPY_I32, 0, errstr, es)) < 0)
        goto fail;
meta:
    snprintf(f->meta_path, sizeof(f->meta_path), "%s/meta.json", f->tmp);
    if (!(f->meta = fopen(f->meta_path, "w"))) {
        err = pr_seterr(errstr, es, PR_EIO, "files sink: %s: %s", f->meta_path, strerror(errno));
        goto fail;
    }
    return 0;
fail:
    pr__roll_abort(f);
    return err;
}

static void pr__json_str(FILE *o, const char *s, size_t n)
{
    fputc('"', o);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            fprintf(o, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(o, "\\u%04x", ch);
        else
            fputc(ch, o);
    }
    fputc('"', o);
}

static void pr__json_names(FILE *o, const char *key, const char (*names)[PR_NAME_MAX], uint32_t n)
{
    fprintf(o, ",\n  \"%s\": [", key);
    for (uint32_t i = 0; i < n; i++) {
        fprintf(o, "%s", i ? ", " : "");
        pr__json_str(o, names[i], strnlen(names[i], PR_NAME_MAX));
    }
    fprintf(o, "]");
}

/* meta.json's header of a jagged roll (after vocab_sizes). */
static void pr__meta_jagged(files_sink *f, FILE *o)
{
    fprintf(o, ",\n  \"jagged\": true,\n  \"n_labels\": %u", f->j_labels);
    pr__json_names(o, "feature_keys", f->j_keys, f->j_feat);
    if (f->j_label_names)
        pr__json_names(o, "label_names", f->j_label_names, f->j_labels);
    if (f->j_dense_names)
        pr__json_names(o, "dense_names", f->j_dense_names, f->j_dense);
    if (f->j_weighted) {
        fprintf(o, ",\n  \"weighted_keys\": [");
        for (uint32_t i = 0, k = 0; i < f->j_feat; i++)
            if (f->j_weighted[i]) {
                fprintf(o, "%s", k++ ? ", " : "");
                pr__json_str(o, f->j_keys[i], strnlen(f->j_keys[i], PR_NAME_MAX));
            }
        fprintf(o, "]");
    }
    if (f->j_tables) /* shared vocabularies, as `piperec process` writes them */
        pr__json_names(o, "feature_tables", f->j_tables, f->j_feat);
}

/* Close the roll's arrays: the jagged set (fsync'd by its close) or the
 * three Criteo files (fsync'd by roll_close). */
static int pr__close_arrays(files_sink *f, char *errstr, size_t es)
{
    if (f->jag) {
        int rc = pr_npy_jagged_close(f->jag, true, errstr, es);
        f->jag = NULL;
        return rc;
    }
    int err = pr_npy_close(f->w_dense, errstr, es);
    f->w_dense = NULL;
    int e2 = pr_npy_close(f->w_sparse, errstr, es);
    f->w_sparse = NULL;
    int e3 = pr_npy_close(f->w_labels, errstr, es);
    f->w_labels = NULL;
    return err ? err : e2 ? e2 : e3;
}

static int pr__roll_close(files_sink *f, char *errstr, size_t es)
{
    bool jagged = f->j_keys != NULL;
    uint32_t n_dense = jagged ? f->j_dense : f->n_dense,
             n_sparse = jagged ? f->j_feat : f->n_sparse;
    int err = pr__close_arrays(f, errstr, es);
    /* meta.json: header fields, then the batch list written so far. */
    FILE *o = f->meta;
    f->meta = NULL;
    if (o) {
        fprintf(o,
                "\n  ],\n  \"epoch\": %llu,\n  \"first_seq\": %llu,\n  \"last_seq\": %llu,\n  "
                "\"rows\": %llu,\n",
                (unsigned long long)f->epoch, (unsigned long long)f->first_seq,
                (unsigned long long)f->last_seq, (unsigned long long)f->rows);
        fprintf(o, "  \"n_dense\": %u,\n  \"n_sparse\": %u,\n  \"sparse_width\": %u,\n", n_dense,
                n_sparse, jagged ? 8u : f->sparse_width);
        fprintf(o, "  \"vocab_sizes\": [");
        for (uint32_t i = 0; i < n_sparse; i++)
            fprintf(o, "%s%llu", i ? ", " : "",
                    (unsigned long long)(f->last_vocab ? f->last_vocab[i] : 0));
        fprintf(o, "]");
        if (jagged)
            pr__meta_jagged(f, o);
        else if (f->sparse_names) {
            fprintf(o, ",\n  \"sparse_names\": [");
            for (uint32_t i = 0; i < f->n_sparse; i++) {
                fprintf(o, "%s", i ? ", " : "");
                pr__json_str(o, f->sparse_names[i], strlen(f->sparse_names[i]));
            }
            fprintf(o, "]");
        }
        fprintf(o, "\n}\n");
        if (fflush(o) != 0 || fsync(fileno(o)) != 0)
            err = err ? err
                      : pr_seterr(errstr, es, PR_EIO, "files sink: %s: %s", f->meta_path,
                                  strerror(errno));
        fclose(o);
    }
    static const char *const names[] = {"dense.npy", "sparse.npy", "labels.npy"};
    for (size_t i = 0; i < 3 && err == 0 && !jagged; i++) {
        char p[4200];
        snprintf(p, sizeof(p), "%s/%s", f->tmp, names[i]);
        if (pr__fsync_path(p) < 0)
            err = pr_seterr(errstr, es, PR_EIO, "files sink: fsync %s: %s", p, strerror(errno));
    }
    char final[4200];
    snprintf(final, sizeof(final), "%s/batches-%llu-%llu-%llu", f->dir,
             (unsigned long long)f->epoch, (unsigned long long)f->first_seq,
             (unsigned long long)f->last_seq);
    if (err == 0 && pr__fsync_path(f->tmp) < 0)
        err = pr_seterr(errstr, es, PR_EIO, "files sink: fsync %s: %s", f->tmp, strerror(errno));
    if (err == 0 && rename(f->tmp, final) < 0)
        err =
            pr_seterr(errstr, es, PR_EIO, "files sink: rename to %s: %s%s", final, strerror(errno),
                      errno == ENOTEMPTY || errno == EEXIST
                          ? " (a roll of an earlier run: without state.dir every start is "
                            "epoch 0 and numbers batches from 1; give the pipeline a "
                            "state.dir, or a fresh sink dir per run)"
                          : "");
    if (err == 0 && pr__fsync_path(f->dir) < 0)
        err = pr_seterr(errstr, es, PR_EIO, "files sink: fsync %s: %s", f->dir, strerror(errno));
    if (err < 0) {
        pr__roll_abort(f);
        return err;
    }
    f->open = false;
    pr__free_jnames(f);
    /* The roll is durable: acknowledge its batches. */
    if (pr__acks_push(&f->acked, f->seqs, f->n_seqs) < 0)
        return PR_ENOMEM;
    f->n_seqs = 0;
    return 0;
}

static int pr__write_batch(files_sink *f, const pr_batch *b, char *errstr, size_t es)
{
    int err;
    if (f->jag) {
        if ((err = pr_npy_jagged_append_weighted(f->jag, b->rows, b->label_mat, b->dense_mat,
                                                 b->lengths, b->values, b->weights, errstr, es)) <
            0)
            return err;
    } else if ((err = pr_npy_append_cols(f->w_dense, b->dense, b->rows, b->rows, errstr, es)) < 0 ||
               (err = pr_npy_append_cols(f->w_sparse, b->sparse, b->rows, b->rows, errstr, es)) <
                   0 ||
               (err = pr_npy_append_cols(f->w_labels, b->labels, b->rows, b->rows, errstr, es)) < 0)
        return err;
    FILE *o = f->meta;
    if (f->n_seqs == 0) {
        fprintf(o, "{\n  \"pipeline\": ");
        pr__json_str(o, b->pipeline, strlen(b->pipeline));
        fprintf(o, ",\n  \"batches\": [\n");
    }
    fprintf(o,
            "%s    {\"seq\": %llu, \"rows\": %u, \"row_start\": %llu, \"min_event_time_ms\": %lld, "
            "\"max_event_time_ms\": %lld, \"emit_time_ms\": %lld, \"offsets\": [",
            f->n_seqs ? ",\n" : "", (unsigned long long)b->seq, b->rows,
            (unsigned long long)f->rows, (long long)b->min_event_time_ms,
            (long long)b->max_event_time_ms, (long long)b->emit_time_ms);
    for (uint32_t i = 0; i < b->n_ranges; i++) {
        const pr_batch_range *r = &b->ranges[i];
        int ti = PR_PART_KEY_TOPIC(r->partition);
        const char *topic = (uint32_t)ti < b->n_topics ? b->topics[ti] : "";
        fprintf(o, "%s{\"topic\": ", i ? ", " : "");
        pr__json_str(o, topic, strlen(topic));
        fprintf(o, ", \"partition\": %d, \"first\": %lld, \"last\": %lld, \"rows\": %u}",
                PR_PART_KEY_PARTITION(r->partition), (long long)r->first_offset,
                (long long)r->last_offset, r->rows);
    }
    fprintf(o, "]");
    if (b->n_recycled) {
        fprintf(o, ", \"recycled\": [");
        for (uint32_t i = 0; i < b->n_recycled; i++) {
            const pr_recycled *r = &b->recycled[i];
            fprintf(o, "%s[%u, %llu, %lld, %llu]", i ? ", " : "", r->col,
                    (unsigned long long)(f->rows + r->row), (long long)r->index,
                    (unsigned long long)r->number);
        }
        fprintf(o, "]");
    }
    fprintf(o, "}");
    if (ferror(o))
        return pr_seterr(errstr, es, PR_EIO, "files sink: %s: write failed", f->meta_path);
    if (b->jagged && b->n_sparse > f->n_sparse && b->vocab_sizes) { /* room for the features */
        uint64_t *lv = realloc(f->last_vocab, (size_t)b->n_sparse * sizeof(uint64_t));
        if (!lv)
            return pr_seterr(errstr, es, PR_ENOMEM, "files sink: out of memory");
        f->last_vocab = lv;
        f->n_vocab = b->n_sparse;
    }
    if (b->vocab_sizes && f->last_vocab)
        memcpy(f->last_vocab, b->vocab_sizes,
               (size_t)(b->n_sparse < f->n_vocab ? b->n_sparse : f->n_vocab) * sizeof(uint64_t));
    f->rows += b->rows;
    f->last_seq = b->seq;
    return 0;
}

static void pr__files_free(pr_sink *s);

static int pr__files_new(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t es)
{
    if (!cfg->files.dir || !*cfg->files.dir)
        return pr_seterr(errstr, es, PR_EINVAL, "sinks.files.dir: required");
    files_sink *f = calloc(1, sizeof(*f));
    if (!f)
        return pr_seterr(errstr, es, PR_ENOMEM, "files sink: out of memory");
    f->base.ops = &pr_sink_files_ops;
    f->lock_fd = -1;
    pthread_mutex_init(&f->mu, NULL);
    f->dir = strdup(cfg->files.dir);
    pr_files_sink_cfg fc = cfg->files;
    pr_cfgmap_default_zero(&pr_sink_files_cfgmap, &fc); /* 0 = the documented default */
    f->roll_batches = fc.roll_batches;
    f->roll_max_ns = fc.roll_max_ms * NS_PER_MS;
    f->clock = cfg->clock ? cfg->clock : pr_clock_real();
    f->n_dense = cfg->n_dense;
    f->n_sparse = cfg->n_sparse;
    f->sparse_width = cfg->sparse_width;
    f->last_vocab = calloc(cfg->n_sparse ? cfg->n_sparse : 1, sizeof(uint64_t));
    f->n_vocab = cfg->n_sparse;
    if (cfg->sparse_names && cfg->n_sparse) {
        f->sparse_names = calloc(cfg->n_sparse, sizeof(char *));
        for (uint32_t i = 0; f->sparse_names && i < cfg->n_sparse; i++)
            f->sparse_names[i] = strdup(cfg->sparse_names[i] ? cfg->sparse_names[i] : "");
    }
    if (!f->dir || !f->last_vocab) {
        pr__files_free(&f->base);
        return pr_seterr(errstr, es, PR_ENOMEM, "files sink: out of memory");
    }
    if (mkdir(f->dir, 0755) < 0 && errno != EEXIST) {
        int e = errno;
        pr__files_free(&f->base);
        return pr_seterr(errstr, es, PR_EIO, "sinks.files.dir: cannot create %s: %s",
                         cfg->files.dir, strerror(e));
    }
    if (access(f->dir, W_OK) < 0) {
        pr__files_free(&f->base);
        return pr_seterr(errstr, es, PR_EIO, "sinks.files.dir: %s is not writable", cfg->files.dir);
    }
    /* The directory is this sink's alone, across processes too (two would
     * name their rolls alike, and each sweep the other's open roll). */
    int fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        fd = -1;
        if (e == EWOULDBLOCK) {
            pr__files_free(&f->base);
            return pr_seterr(errstr, es, PR_ESTATE,
                             "sinks.files.dir: %s is the files sink of another process (it "
                             "holds the directory's lock): give each pipeline and each process a "
                             "directory of its own",
                             cfg->files.dir);
        }
        errno = e;
    }
    if (fd >= 0) {
        f->lock_fd = fd;
        pr__sweep_tmp(f->dir);
    } else {
        pr_warn("files sink: %s: cannot lock it (%s): unfinished rolls an earlier run left are "
                "kept",
                cfg->files.dir, strerror(errno));
    }
    *out = &f->base;
    return 0;
}

static int pr__files_send(pr_sink *s, pr_batch *b)
{
    files_sink *f = (files_sink *)s;
    char err[512];
    int rc;
    if (f->open && (b->jagged ? !pr__same_jagged(f, b) : f->jag != NULL) &&
        (rc = pr__roll_close(f, err, sizeof(err))) < 0)
        goto fail; /* another layout: a roll of its own */
    if (!f->open && (rc = pr__roll_open(f, b, err, sizeof(err))) < 0)
        goto fail;
    if (pr_grow((void **)&f->seqs, &f->cap_seqs, f->n_seqs + 1, sizeof(*f->seqs)) < 0)
        return PR_ENOMEM;
    if ((rc = pr__write_batch(f, b, err, sizeof(err))) < 0)
        goto fail;
    f->seqs[f->n_seqs++] = b->seq;
    f->st.batches_sent++;
    f->st.bytes_sent += b->bytes;
    if (f->n_seqs >= f->roll_batches && (rc = pr__roll_close(f, err, sizeof(err))) < 0)
        goto fail;
    pr__publish(f);
    return 0;
fail:
    /* The roll is gone with its batches unacked; the caller sees the error
     * and the pipeline stops before committing their offsets. */
    f->st.errors++;
    f->failed = true;
    pr_err("%s", err);
    pr__roll_abort(f);
    pr__publish(f);
    return rc;
}

static int pr__files_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
{
    files_sink *f = (files_sink *)s;
    if (f->open && f->n_seqs && pr_clock_mono_ns(f->clock) - f->opened_ns >= f->roll_max_ns) {
        char err[512];
        if (pr__roll_close(f, err, sizeof(err)) < 0) {
            pr_err("%s", err);
            f->st.errors++;
            f->failed = true;
            pr__publish(f);
            return PR_EIO;
        }
    }
    size_t n = pr__acks_drain(&f->acked, cb, opaque);
    f->st.batches_acked += n;
    pr__publish(f);
    return (int)n;
}

static bool pr__files_ready(pr_sink *s)
{
    files_sink *f = (files_sink *)s;
    return !f->failed && access(f->dir, W_OK) == 0;
}

static void pr__files_stats(pr_sink *s, pr_sink_stats *st)
{
    files_sink *f = (files_sink *)s;
    pthread_mutex_lock(&f->mu);
    *st = f->pub;
    pthread_mutex_unlock(&f->mu);
}

static void pr__files_free(pr_sink *s)
{
    files_sink *f = (files_sink *)s;
    if (!f)
        return;
    pr__roll_abort(f);
    if (f->sparse_names)
        for (uint32_t i = 0; i < f->n_sparse; i++)
            free(f->sparse_names[i]);
    free(f->sparse_names);
    free(f->last_vocab);
    free(f->seqs);
    pr__acks_fini(&f->acked);
    free(f->dir);
    if (f->lock_fd >= 0)
        close(f->lock_fd);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

const pr_sink_ops pr_sink_files_ops = {
    .name = "files",
    .doc = ".npy rolls in DIR/batches-<epoch>-<first>-<last>/, acked once fsync'd and renamed",
    .new_ = pr__files_new,
    .send = pr__files_send,
    .poll = pr__files_poll,
    .ready = pr__files_ready,
    .get_stats = pr__files_stats,
    .free_ = pr__files_free,
    /* No capabilities: acked once the roll is durable. */
    .enabled_off = offsetof(pr_sinks_cfg, files.enabled),
};
