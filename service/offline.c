/*
 * offline.c — the offline driver (contract: pr_service.h, "offline").
 *
 * Pipeline, per pass, over a ring of job slots (slot = seq % n_slots):
 *
 *   source (mmap or read()) --chunks of whole lines--> decode (any worker,
 *       in parallel) --> engine, first half (any worker, in parallel:
 *       pr_engine_process_par: dense operators, Modulus, lookups of values
 *       that already have an index) --> engine, in order (first appearances:
 *       each sparse column keeps its own input order, different columns on
 *       different workers; a job the first half could not do runs the whole
 *       engine here, all columns at once) --> format (any worker, in
 *       parallel: transposes to row order and, with several workers, writes
 *       the rows at their place in the .npy files) --> write stage (one worker
 *       at a time, in order: appends with one worker, recycled.npy,
 *       rejects.tsv)
 *
 * Issue 21: only what the semantics order is serial. The vocabulary's
 * first-appearance assignment must follow the input, but per column (the
 * columns' tables are independent), and only for values not seen before;
 * a job's place in the output is a prefix sum of row counts, known once it
 * leaves the engine (pr__place, in order), so its bytes can be written by any
 * worker. The time spent holding an order is reported (serial_engine_s: whole
 * jobs plus the longest column chain; serial_write_s), the serial fraction
 * that bounds the speed-up at more threads.
 *
 * N workers (the calling thread and N - 1 more) each take whatever is ready,
 * in that priority: the in-order engine pieces, the write stage, format, the
 * engine's first half, else decode the next chunk (pr__worker), so no thread
 * sits idle while another has queued work. Decoders parse hex fields to
 * uint64 themselves (pr_decode_ctx.parse_hex, when the sparse ops start with
 * hex2int): same output, one pass less over the block, and nothing left for
 * the engine to reject. A job owns its chunk's text until it has been
 * written, so rejects (decoder and engine ones) can quote the original line
 * without copying anything, and its own engine output tensors, so the engine
 * can run ahead of the writer. Line numbers (block->offset, rejects) are
 * chunk-local, 1-based, since a decoder cannot know how many lines came
 * before; the write stage, which sees chunks in order, adds the count of
 * earlier lines. Per-stage thread-seconds go to pr_offline_result (decode,
 * engine, write, wait).
 *
 * Bounded vocabularies (some column with eviction lru/lfu/ttl): the engine
 * lists each block's recycled indices (pr_out.recycled, block rows); the
 * engine stage moves their rows past the rejected rows it drops, and the
 * write stage, which knows how many rows came before, appends them to
 * recycled.npy as (column, output row, index, number). Both stages run in
 * input order, so the file, like the tensors, never depends on --threads.
 * No run ever restarts from a snapshot here, so the engine stage tells the
 * engine every notice is delivered (it would keep them all otherwise).
 */
#define _GNU_SOURCE /* memrchr */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_clock.h"
#include "pr_log.h"
#include "pr_npy.h"
#include "pr_service.h"
#include "pr_vocab.h"

#define PR__BYTES_PER_ROW 200 /* chunk size = block_rows * this (Criteo ~240 B/line) */
#define PR__ERR           512

/* Engine reject reasons as decoder reasons (one vocabulary in rejects.tsv). */
static const int pr__engine_reason[PR_REJECT__ENGINE_COUNT] = {
    [PR_REJECT_NONE] = PR_DEC_OK,
    [PR_REJECT_BAD_HEX] = PR_DEC_BAD_HEX,
};

typedef struct pr__reject {
    int64_t line; /* chunk-local while in a job */
    int reason;   /* pr_decode_reason */
    char *detail;
    int col;         /* sparse column of an engine reject; -1 for decoder rejects */
    const char *rec; /* into the job's text; NULL until found (engine rejects) */
    size_t len;
} pr__reject;

/* A slot's life: FREE -> BUSY (a worker decodes into it) -> DECODED -> (the
 * engine's first half, any worker) PRE_BUSY -> PRED -> (engine stage, in
 * order) ENGINED -> (format, any worker) FMT_BUSY -> FORMATTED -> (write
 * stage, in order) FREE. */
typedef enum {
    PR__SLOT_FREE = 0,
    PR__SLOT_BUSY,      /* decoding */
    PR__SLOT_DECODED,   /* -> engine first half (any worker) */
    PR__SLOT_PRE_BUSY,  /* engine first half running */
    PR__SLOT_PRED,      /* -> engine stage (in order) */
    PR__SLOT_ENGINED,   /* -> format (any worker) */
    PR__SLOT_FMT_BUSY,  /* transposing */
    PR__SLOT_FORMATTED, /* -> write stage (in order) */
} pr__slot_state;

typedef struct pr__job {
    pr__slot_state state;
    uint64_t seq;
    const char *text;
    size_t len;
    char *own; /* read() buffer (stream source) */
    size_t own_cap;
    pr_block **blocks;
    uint32_t n_blocks, cap_blocks;
    pr_out **outs;              /* engine output of blocks[i] (allocated on first use) */
    pr_engine_split **splits;   /* blocks[i] between the engine's halves */
    uint32_t cap_outs;          /* of outs and splits */
    bool whole;                 /* the engine stage runs the job in one piece (pr__engine_job) */
    uint64_t row0;              /* output rows before this job's (set in order, once engined) */
    uint32_t cols_left;         /* else: columns whose in-order half is still to run */
    char *rm_dense, *rm_sparse; /* the job's kept rows, row-major (format) */
    size_t rm_dense_cap, rm_sparse_cap;
    uint32_t rm_rows;
    int64_t lines;
    pr__reject *rej;
    size_t n_rej, cap_rej;
    int64_t decode_ns; /* time this job spent decoding */
    int err;
    char errstr[PR__ERR];
} pr__job;

typedef struct pr__run {
    const pr_pipeline_spec *spec;
    pr_engine *eng;
    pr_vocab_store *vs; /* local, nothing persists: the seed, notices */
    const pr_offline_opts *opts;
    const char *in_name;
    uint32_t block_rows;
    size_t chunk_bytes;
    bool counting; /* pass 1 of two_pass */

    /* Source (guarded by mu). */
    bool mapped;
    const char *map;
    size_t map_size, map_pos;
    int fd;
    char *carry;
    size_t carry_len, carry_cap;
    bool src_eof;
    bool src_done;
    uint64_t next_seq;  /* next chunk a decoder takes */
    uint64_t total_seq; /* chunks in all, valid once src_done */
    uint64_t eng_seq;   /* next chunk for the engine stage */
    uint64_t wr_seq;    /* next chunk for the write stage */
    bool eng_busy, wr_busy;
    int rc; /* first failure of the pass */
    char errstr[PR__ERR];

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    pr__job *jobs;
    uint32_t n_slots;

    /* In-order stages. */
    pr_npy_writer *w_dense, *w_sparse, *w_labels;
    pr_npy_writer *w_recycled; /* recycled.npy; NULL when no column evicts */
    FILE *rejects;
    pr_offline_result *res;
    int64_t line_base;
    int64_t t0_ns, last_progress_ns;
    uint64_t bytes_done;
    int64_t decode_ns, engine_ns, write_ns, idle_ns; /* stage timers, pr_offline_result */
    int64_t eng_serial_ns, wr_serial_ns;             /* ... of which holding the order */
    /* The engine stage by column (jobs not whole): column c's next job in
     * input order, whether a worker runs it, the time column c held it. */
    uint64_t *col_seq;
    bool *col_busy;
    int64_t *col_ns;
    /* Several workers: format writes each job's rows at their place in the
     * .npy files itself (pr_npy_pwrite_rows at row0), rows_assigned being
     * the prefix sum of the jobs' rows in input order; one worker appends. */
    bool positional;
    uint64_t rows_assigned;
} pr__run;

/* ---------------------------------------------------------------- source */

/* Take the next chunk into `job` (mu held). Returns 1 with a chunk, 0 when the
 * input is exhausted, or a negative PR_E* code (job->errstr says why). */
static int pr__take_chunk(pr__run *run, pr__job *job)
{
    if (run->src_done)
        return 0;
    if (run->mapped) {
        if (run->map_pos >= run->map_size) {
            run->src_done = true;
            return 0;
        }
        size_t end = run->map_pos + run->chunk_bytes;
        if (end >= run->map_size) {
            end = run->map_size;
        } else {
            const char *q = memchr(run->map + end, '\n', run->map_size - end);
            end = q ? (size_t)(q - run->map) + 1 : run->map_size;
        }
        job->text = run->map + run->map_pos;
        job->len = end - run->map_pos;
        run->map_pos = end;
        return 1;
    }
    /* Stream: carry (a partial line) + fresh reads, cut at the last newline. */
    size_t want = run->chunk_bytes;
    size_t len = 0;
    if (job->own_cap < run->carry_len + want) {
        size_t cap = run->carry_len + want;
        char *nb = realloc(job->own, cap);
        if (!nb)
            return pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM, "out of memory");
        job->own = nb;
        job->own_cap = cap;
    }
    if (run->carry_len)
        memcpy(job->own, run->carry, run->carry_len);
    len = run->carry_len;
    run->carry_len = 0;
    for (;;) {
        while (len < job->own_cap && !run->src_eof) {
            ssize_t n = read(run->fd, job->own + len, job->own_cap - len);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return pr_seterr(job->errstr, sizeof(job->errstr), PR_EIO, "%s: %s", run->in_name,
                                 strerror(errno));
            }
            if (n == 0)
                run->src_eof = true;
            len += (size_t)n;
            if (len >= want)
                break;
        }
        if (len == 0 && run->src_eof) {
            run->src_done = true;
            return 0;
        }
        const char *nl = memrchr(job->own, '\n', len);
        if (nl || run->src_eof) {
            size_t keep = nl ? (size_t)(nl - job->own) + 1 : len;
            if (run->src_eof)
                keep = len; /* last chunk: everything, unterminated line included */
            size_t rest = len - keep;
            if (rest > run->carry_cap) {
                char *nc = realloc(run->carry, rest);
                if (!nc)
                    return pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM, "out of memory");
                run->carry = nc;
                run->carry_cap = rest;
            }
            if (rest)
                memcpy(run->carry, job->own + keep, rest);
            run->carry_len = rest;
            job->text = job->own;
            job->len = keep;
            return 1;
        }
        /* One line longer than the buffer: grow and keep reading. */
        size_t cap = job->own_cap * 2;
        char *nb = realloc(job->own, cap);
        if (!nb)
            return pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM, "out of memory");
        job->own = nb;
        job->own_cap = cap;
        want = cap;
    }
}

/* ---------------------------------------------------------------- decoding */

static int pr__add_reject(pr__job *job, int64_t line, int reason, const char *detail, int col,
                          const char *rec, size_t len)
{
    if (job->n_rej == job->cap_rej) {
        size_t cap = job->cap_rej ? job->cap_rej * 2 : 16;
        pr__reject *nr = realloc(job->rej, cap * sizeof(*nr));
        if (!nr)
            return PR_ENOMEM;
        job->rej = nr;
        job->cap_rej = cap;
    }
    char *d = strdup(detail ? detail : "");
    if (!d)
        return PR_ENOMEM;
    job->rej[job->n_rej++] = (pr__reject){line, reason, d, col, rec, len};
    return 0;
}

static void pr__on_reject(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                          int64_t recno)
{
    pr__job *job = opaque;
    if (pr__add_reject(job, recno, reason, detail, -1, rec, len) < 0 && !job->err)
        job->err = pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM, "out of memory");
}

static void pr__decode_job(pr__run *run, pr__job *job)
{
    pr_decode_ctx ctx = {.spec = run->spec,
                         .on_reject = pr__on_reject,
                         .opaque = job,
                         .parse_hex = pr_decode_want_parse_hex(run->spec)};
    const char *p = job->text;
    size_t left = job->len;
    job->n_blocks = 0;
    job->lines = 0;
    while (left > 0 && !job->err) {
        if (job->n_blocks == job->cap_blocks) {
            uint32_t cap = job->cap_blocks ? job->cap_blocks * 2 : 2;
            pr_block **nb = realloc(job->blocks, cap * sizeof(*nb));
            if (!nb)
                goto oom;
            memset(nb + job->cap_blocks, 0, (cap - job->cap_blocks) * sizeof(*nb));
            job->blocks = nb;
            job->cap_blocks = cap;
        }
        pr_block *b = job->blocks[job->n_blocks];
        if (!b) {
            b = pr_block_new(run->spec->n_dense, run->spec->n_sparse, run->block_rows, true);
            if (!b)
                goto oom;
            job->blocks[job->n_blocks] = b;
        }
        pr_block_reset(b);
        job->n_blocks++;
        int64_t lines = 0;
        size_t used = pr_decode_criteo_lines(&ctx, b, p, left, true, job->lines + 1, &lines);
        p += used;
        left -= used;
        job->lines += lines;
    }
    return;
oom:
    job->err = pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM,
                         "out of memory (blocks of %u rows)", run->block_rows);
}

/* ---------------------------------------------------------------- consuming */

static int pr__cmp_reject(const void *a, const void *b)
{
    const pr__reject *x = a, *y = b;
    return (x->line > y->line) - (x->line < y->line);
}

/* Fill in rec/len of engine rejects by one scan of the chunk (rejects sorted). */
static void pr__find_lines(pr__job *job)
{
    const char *p = job->text, *end = job->text + job->len;
    int64_t line = 1;
    for (size_t i = 0; i < job->n_rej; i++) {
        pr__reject *r = &job->rej[i];
        if (r->rec)
            continue;
        while (line < r->line && p < end) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            p = nl ? nl + 1 : end;
            line++;
        }
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = (size_t)((nl ? nl : end) - p);
        if (len > 0 && p[len - 1] == '\r')
            len--;
        r->rec = p;
        r->len = len;
    }
}

/* The text of sparse field `col` of a line, for an engine reject detail. */
static void pr__field(const pr_pipeline_spec *spec, const char *rec, size_t len, uint32_t col,
                      char *dst, size_t dsz)
{
    size_t idx = (size_t)spec->has_label + spec->n_dense + col;
    const char *p = rec, *end = rec + len;
    while (idx > 0 && p < end) {
        const char *t = memchr(p, '\t', (size_t)(end - p));
        p = t ? t + 1 : end;
        idx--;
    }
    const char *t = memchr(p, '\t', (size_t)(end - p));
    size_t n = (size_t)((t ? t : end) - p), j = 0;
    for (size_t i = 0; i < n && i < 40 && j + 1 < dsz; i++)
        dst[j++] = (unsigned char)p[i] < 0x20 ? '?' : p[i];
    dst[j] = '\0';
}

/* Before pr__compact: a notice's row becomes the row its block row will have
 * once the rejected rows are gone (the first kept row at or after it; a
 * rejected row touches no vocabulary, so that is where the new value is first
 * used). The notices are in row order: one sweep. */
static void pr__remap_recycled(pr_out *o)
{
    uint32_t kept = 0, r = 0;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        pr_recycled *n = &o->recycled[i];
        for (; r < n->row && r < o->rows; r++)
            kept += !pr_bit_test(o->rejected, r);
        n->row = kept;
    }
}

/* Drop rejected rows from the engine output, keeping order. */
static void pr__compact(pr_out *o, const pr_pipeline_spec *spec)
{
    uint32_t w = 0;
    size_t sw = o->sparse_width;
    for (uint32_t r = 0; r < o->rows; r++) {
        if (pr_bit_test(o->rejected, r))
            continue;
        if (w != r) {
            o->labels[w] = o->labels[r];
            for (uint32_t c = 0; c < spec->n_dense; c++)
                o->dense[(size_t)c * o->cap + w] = o->dense[(size_t)c * o->cap + r];
            for (uint32_t c = 0; c < spec->n_sparse; c++)
                memcpy((char *)o->sparse + ((size_t)c * o->cap + w) * sw,
                       (char *)o->sparse + ((size_t)c * o->cap + r) * sw, sw);
        }
        w++;
    }
    o->rows = w;
}

static void pr__progress(pr__run *run, bool final)
{
    int64_t now = pr_clock_mono_ns(pr_clock_real());
    if (!final && now - run->last_progress_ns < 500000000)
        return;
    run->last_progress_ns = now;
    double s = (now - run->t0_ns) / 1e9;
    if (s <= 0)
        return;
    double rps = run->res->rows / s, mbps = run->bytes_done / s / 1e6;
    char eta[32] = "";
    if (run->mapped && run->bytes_done > 0 && !run->counting) {
        double left = (double)(run->map_size - run->bytes_done) / (run->bytes_done / s);
        snprintf(eta, sizeof(eta), "  ETA %.0fs", left);
    }
    fprintf(stderr, "\r%s%" PRIu64 " rows  %.2fM rows/s  %.0f MB/s%s   ",
            run->counting ? "counting: " : "", run->res->rows, rps / 1e6, mbps, eta);
    if (final)
        fputc('\n', stderr);
}

/* The engine's first half (any worker, many jobs at once:
 * pr_engine_process_par): the job's output tensors and split states, then
 * every block's dense operators, Modulus and lookups of known values. A
 * failure here (out of memory) is the job's, reported in order by the engine
 * stage. Nothing to do in the counting pass. */
static void pr__pre_job(pr__run *run, pr__job *job)
{
    const pr_pipeline_spec *spec = run->spec;
    /* One worker gains nothing from the halves (it would run both): the
     * whole engine in order, as before, and then format has nothing to do. */
    job->whole = job->err || run->counting || spec->n_sparse == 0 || !run->positional;
    job->cols_left = spec->n_sparse;
    if (job->err || run->counting)
        return;
    if (job->cap_outs < job->n_blocks) {
        pr_out **no = realloc(job->outs, job->n_blocks * sizeof(*no));
        if (no)
            job->outs = no;
        pr_engine_split **ns = no ? realloc(job->splits, job->n_blocks * sizeof(*ns)) : NULL;
        if (!ns)
            goto oom;
        job->splits = ns;
        for (uint32_t i = job->cap_outs; i < job->n_blocks; i++) {
            no[i] = NULL;
            ns[i] = NULL;
        }
        job->cap_outs = job->n_blocks;
    }
    for (uint32_t i = 0; i < job->n_blocks; i++) {
        pr_block *b = job->blocks[i];
        if (b->rows == 0)
            continue;
        if (!job->outs[i] && !(job->outs[i] = pr_out_new(spec->n_dense, spec->n_sparse,
                                                         run->block_rows, run->res->sparse_width)))
            goto oom;
        if (!job->splits[i] && !(job->splits[i] = pr_engine_split_new(run->eng)))
            goto oom;
        if (run->positional)
            pr_engine_process_par(run->eng, b, job->outs[i], job->splits[i]);
        if (pr_engine_split_whole(job->splits[i]))
            job->whole = true;
    }
    return;
oom:
    job->err = pr_seterr(job->errstr, sizeof(job->errstr), PR_ENOMEM, "out of memory");
}

/* Engine stage (one thread at a time, jobs in input order): every block of the
 * job through the engine's second half (pr_engine_process_seq: first
 * appearances) into the job's own output tensors; engine rejects join the
 * job's decoder rejects, their rows are dropped from the output. */
static int pr__engine_job(pr__run *run, pr__job *job, char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = run->spec;
    int rc = 0;
    if (job->err)
        return pr_seterr(errstr, errstr_size, job->err, "%s", job->errstr);
    for (uint32_t i = 0; i < job->n_blocks; i++) {
        pr_block *b = job->blocks[i];
        if (b->rows == 0)
            continue;
        if (run->counting) {
            rc = pr_engine_count(run->eng, b);
            if (rc)
                return pr_seterr(errstr, errstr_size, rc, "engine count: %s", pr_strerror(rc));
            continue;
        }
        pr_out *o = job->outs[i];
        rc = pr_engine_process_seq(run->eng, b, o, job->splits[i], errstr, errstr_size);
        if (rc)
            return rc;
        if (o->n_recycled) /* recycled.npy holds them: nothing to re-announce */
            pr_vocab_store_commit(run->vs, pr_engine_vocab_recycled_total(run->eng) + 1);
        if (o->n_rejected) {
            for (uint32_t r = 0; r < o->rows; r++) {
                if (!pr_bit_test(o->rejected, r))
                    continue;
                int why = o->reject_reason[r] < PR_REJECT__ENGINE_COUNT
                              ? pr__engine_reason[o->reject_reason[r]]
                              : PR_DEC_BAD_HEX;
                int col = o->reject_col[r] < spec->n_sparse ? o->reject_col[r] : 0;
                if (pr__add_reject(job, b->offset[r], why, NULL, col, NULL, 0) < 0)
                    return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
            }
            pr__remap_recycled(o);
            pr__compact(o, spec);
        }
    }
    return 0;
}

/* A block's notices to recycled.npy, rows made global: `row0` is the number
 * of rows written before the block. */
static int pr__write_recycled(pr__run *run, const pr_out *o, uint64_t row0, char *errstr,
                              size_t errstr_size)
{
    int64_t buf[64][4];
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        const pr_recycled *r = &o->recycled[i];
        buf[n][0] = r->col;
        buf[n][1] = (int64_t)(row0 + r->row);
        buf[n][2] = r->index;
        buf[n][3] = (int64_t)r->number;
        if (++n == 64 || i + 1 == o->n_recycled) {
            int rc = pr_npy_append_rows(run->w_recycled, buf, n, errstr, errstr_size);
            if (rc)
                return rc;
            n = 0;
        }
    }
    return 0;
}

/* Grow a row-major buffer to `need` bytes. */
static int pr__reserve(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    char *nb = realloc(*buf, need);
    if (!nb)
        return PR_ENOMEM;
    *buf = nb;
    *cap = need;
    return 0;
}

/* Format (any worker, many jobs at once, after the engine stage; several
 * workers only): the job's dense and sparse tensors transposed into
 * row-major buffers, block after block, and written at their place in the
 * files (positional, labels too). With one worker the write stage appends
 * (the writers transpose). */
static int pr__format_job(pr__run *run, pr__job *job, char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = run->spec;
    job->rm_rows = 0;
    if (run->counting || !run->positional)
        return 0;
    size_t rows = 0;
    for (uint32_t i = 0; i < job->n_blocks; i++)
        if (job->blocks[i]->rows && job->outs[i])
            rows += job->outs[i]->rows;
    /* A writer of 0 columns is 1-D and takes one element per row, as
     * pr_npy_append_cols would have read it. */
    uint32_t nd = spec->n_dense ? spec->n_dense : 1, ns = spec->n_sparse ? spec->n_sparse : 1;
    size_t drow = (size_t)nd * sizeof(float), srow = (size_t)ns * run->res->sparse_width;
    if (pr__reserve(&job->rm_dense, &job->rm_dense_cap, rows * drow + 1) ||
        pr__reserve(&job->rm_sparse, &job->rm_sparse_cap, rows * srow + 1))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    pr_npy_dtype sdt = run->res->sparse_width == 8 ? PR_NPY_I64 : PR_NPY_I32;
    size_t r0 = 0;
    for (uint32_t i = 0; i < job->n_blocks; i++) {
        const pr_out *o = job->outs[i];
        if (job->blocks[i]->rows == 0 || !o)
            continue;
        pr_npy_transpose(job->rm_dense + r0 * drow, o->dense, o->cap, o->rows, nd, PR_NPY_F32);
        pr_npy_transpose(job->rm_sparse + r0 * srow, o->sparse, o->cap, o->rows, ns, sdt);
        int rc;
        if (run->positional && run->w_labels &&
            (rc = pr_npy_pwrite_rows(run->w_labels, job->row0 + r0, o->labels, o->rows, errstr,
                                     errstr_size)))
            return rc;
        r0 += o->rows;
    }
    job->rm_rows = (uint32_t)rows;
    int rc;
    if (run->positional && rows &&
        ((rc = pr_npy_pwrite_rows(run->w_dense, job->row0, job->rm_dense, job->rm_rows, errstr,
                                  errstr_size)) ||
         (rc = pr_npy_pwrite_rows(run->w_sparse, job->row0, job->rm_sparse, job->rm_rows, errstr,
                                  errstr_size))))
        return rc;
    return 0;
}

/* Write stage (one thread at a time, jobs in input order, after format): with
 * one worker the job's tensors appended to the .npy files, its notices to
 * recycled.npy, its rejects to rejects.tsv with file-wide line numbers. */
static int pr__write_job(pr__run *run, pr__job *job, char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = run->spec;
    pr_offline_result *res = run->res;
    int rc = 0;
    for (uint32_t i = 0; i < job->n_blocks && !run->counting; i++) {
        pr_out *o = job->outs[i];
        if (job->blocks[i]->rows == 0 || !o)
            continue;
        /* One worker: the writers transpose as they append (O_DIRECT). */
        if ((!run->positional &&
             ((rc = pr_npy_append_cols(run->w_dense, o->dense, o->cap, o->rows, errstr,
                                       errstr_size)) ||
              (rc = pr_npy_append_cols(run->w_sparse, o->sparse, o->cap, o->rows, errstr,
                                       errstr_size)) ||
              (run->w_labels && (rc = pr_npy_append_cols(run->w_labels, o->labels, o->cap, o->rows,
                                                         errstr, errstr_size))))) ||
            (run->w_recycled && (rc = pr__write_recycled(run, o, res->rows, errstr, errstr_size))))
            return rc;
        res->rows += o->rows;
    }
    if (!run->counting) {
        res->lines += (uint64_t)job->lines;
        if (job->n_rej) {
            qsort(job->rej, job->n_rej, sizeof(*job->rej), pr__cmp_reject);
            pr__find_lines(job);
            for (size_t i = 0; i < job->n_rej; i++) {
                pr__reject *r = &job->rej[i];
                if (r->col >= 0) {
                    char field[48];
                    pr__field(spec, r->rec, r->len, (uint32_t)r->col, field, sizeof(field));
                    fprintf(run->rejects, "%" PRId64 "\t%s\t%s: '%s' is not hex\t",
                            run->line_base + r->line, pr_decode_reason_name(r->reason),
                            spec->sparse[r->col].name, field);
                } else
                    fprintf(run->rejects, "%" PRId64 "\t%s\t%s\t", run->line_base + r->line,
                            pr_decode_reason_name(r->reason), r->detail);
                fwrite(r->rec, 1, r->len, run->rejects);
                fputc('\n', run->rejects);
                res->rejected++;
                if (r->reason >= 0 && r->reason < PR_DEC__COUNT)
                    res->rejected_by[r->reason]++;
            }
            if (ferror(run->rejects))
                return pr_seterr(errstr, errstr_size, PR_EIO, "%s/rejects.tsv: %s",
                                 run->opts->output_dir, strerror(errno));
        }
    }
    for (size_t i = 0; i < job->n_rej; i++)
        free(job->rej[i].detail);
    job->n_rej = 0;
    run->line_base += job->lines;
    run->bytes_done += job->len;
    if (run->opts->progress)
        pr__progress(run, false);
    return 0;
}

/* Record the first failure of a pass and stop every worker (mu held). */
static void pr__fail(pr__run *run, int rc, const char *msg)
{
    if (!run->rc) {
        run->rc = rc;
        snprintf(run->errstr, sizeof(run->errstr), "%s", msg);
    }
    run->stop = true;
    pthread_cond_broadcast(&run->cv);
}

/* The oldest job in `state` (mu held), or NULL. */
static pr__job *pr__oldest(pr__run *run, pr__slot_state state)
{
    pr__job *best = NULL;
    for (uint32_t s = 0; s < run->n_slots; s++) {
        pr__job *j = &run->jobs[s];
        if (j->state == state && (!best || j->seq < best->seq))
            best = j;
    }
    return best;
}

/* A job just engined (mu held, jobs in input order): where its rows go. */
static void pr__place(pr__run *run, pr__job *job)
{
    job->row0 = run->rows_assigned;
    for (uint32_t i = 0; i < job->n_blocks && !run->counting; i++)
        if (job->blocks[i]->rows && job->outs[i])
            run->rows_assigned += job->outs[i]->rows;
}

/* Run one of the two in-order stages on `job` (mu held on entry and exit;
 * released while it works): the engine stage (`engine`) or the write
 * stage. Their time is the serial time of the pass (Amdahl's fraction). */
static void pr__serial_stage(pr__run *run, pr__job *job, bool engine)
{
    char err[PR__ERR];
    bool *busy = engine ? &run->eng_busy : &run->wr_busy;
    *busy = true;
    pthread_mutex_unlock(&run->mu);
    int64_t t0 = pr_mono_ns();
    int rc = engine ? pr__engine_job(run, job, err, sizeof(err))
                    : pr__write_job(run, job, err, sizeof(err));
    int64_t t1 = pr_mono_ns();
    pthread_mutex_lock(&run->mu);
    if (engine) {
        run->engine_ns += t1 - t0;
        run->eng_serial_ns += t1 - t0;
        run->decode_ns += job->decode_ns;
        pr__place(run, job);
        job->state = PR__SLOT_ENGINED;
        run->eng_seq++;
        for (uint32_t c = 0; c < run->spec->n_sparse; c++)
            run->col_seq[c] = run->eng_seq;
    } else {
        run->write_ns += t1 - t0;
        run->wr_serial_ns += t1 - t0;
        job->state = PR__SLOT_FREE;
        run->wr_seq++;
    }
    *busy = false;
    pthread_cond_broadcast(&run->cv);
    if (rc)
        pr__fail(run, rc, err);
}

/* A column whose in-order half can run now (mu held): -1, or the column,
 * with its job in *jobp. */
static int pr__column_ready(pr__run *run, pr__job **jobp)
{
    for (uint32_t c = 0; c < run->spec->n_sparse; c++) {
        if (run->col_busy[c])
            continue;
        pr__job *j = &run->jobs[run->col_seq[c] % run->n_slots];
        if (j->seq == run->col_seq[c] && j->state == PR__SLOT_PRED && !j->whole) {
            *jobp = j;
            return (int)c;
        }
    }
    return -1;
}

/* The engine stage of one column of a job that is not whole (mu held on
 * entry and exit): its first appearances, block after block. The columns'
 * vocabularies are independent, so each column keeps its own input order
 * (col_seq) and different columns run on different workers. The worker that
 * finishes a job's last column ends its blocks (statistics, errors) under mu;
 * since column c of a job starts only after column c of the job before, jobs
 * end in input order. */
static void pr__column_stage(pr__run *run, pr__job *job, uint32_t c)
{
    char err[PR__ERR];
    int rc = 0;
    run->col_busy[c] = true;
    pthread_mutex_unlock(&run->mu);
    int64_t t0 = pr_mono_ns();
    for (uint32_t i = 0; i < job->n_blocks; i++)
        if (job->blocks[i]->rows)
            pr_engine_process_seq_col(run->eng, job->blocks[i], job->outs[i], job->splits[i], c);
    int64_t t1 = pr_mono_ns();
    pthread_mutex_lock(&run->mu);
    run->col_busy[c] = false;
    run->col_seq[c]++;
    run->col_ns[c] += t1 - t0;
    run->engine_ns += t1 - t0;
    if (--job->cols_left == 0) {
        for (uint32_t i = 0; i < job->n_blocks; i++)
            if (job->blocks[i]->rows) {
                int brc = pr_engine_process_seq_end(run->eng, job->blocks[i], job->outs[i],
                                                    job->splits[i], err, sizeof(err));
                if (brc && !rc)
                    rc = brc;
            }
        run->decode_ns += job->decode_ns;
        pr__place(run, job);
        job->state = PR__SLOT_ENGINED;
        run->eng_seq++;
    }
    pthread_cond_broadcast(&run->cv);
    if (rc)
        pr__fail(run, rc, err);
}

/* Run one of the parallel stages on `job` (mu held on entry and exit): the
 * engine's first half (DECODED) or format (ENGINED). */
static void pr__parallel_stage(pr__run *run, pr__job *job)
{
    char err[PR__ERR];
    bool pre = job->state == PR__SLOT_DECODED;
    job->state = pre ? PR__SLOT_PRE_BUSY : PR__SLOT_FMT_BUSY;
    pthread_mutex_unlock(&run->mu);
    int64_t t0 = pr_mono_ns();
    int rc = 0;
    if (pre)
        pr__pre_job(run, job);
    else
        rc = pr__format_job(run, job, err, sizeof(err));
    int64_t t1 = pr_mono_ns();
    pthread_mutex_lock(&run->mu);
    if (pre)
        run->engine_ns += t1 - t0;
    else
        run->write_ns += t1 - t0;
    job->state = pre ? PR__SLOT_PRED : PR__SLOT_FORMATTED;
    pthread_cond_broadcast(&run->cv);
    if (rc)
        pr__fail(run, rc, err);
}

/* Decode the next chunk into the free slot `jd` (mu held on entry and exit). */
static void pr__decode_stage(pr__run *run, pr__job *jd)
{
    int got = pr__take_chunk(run, jd);
    if (got == 0) {
        run->total_seq = run->next_seq;
        pthread_cond_broadcast(&run->cv);
        return;
    }
    jd->seq = run->next_seq++;
    jd->state = PR__SLOT_BUSY;
    if (got < 0) {
        /* The engine stage reports it in order; nobody reads on. */
        jd->err = got;
        jd->text = NULL;
        jd->len = 0;
        jd->n_blocks = 0;
        jd->lines = 0;
        jd->decode_ns = 0;
        run->src_done = true;
        run->total_seq = run->next_seq;
    } else {
        pthread_mutex_unlock(&run->mu);
        int64_t t0 = pr_mono_ns();
        pr__decode_job(run, jd);
        jd->decode_ns = pr_mono_ns() - t0;
        pthread_mutex_lock(&run->mu);
    }
    jd->state = PR__SLOT_DECODED;
    pthread_cond_broadcast(&run->cv);
}

/* A pass worker (the calling thread is one too). Under mu it picks, in this
 * order: the engine stage for the next job in input order when its first
 * half is done and no one else holds the stage (a whole job), or one
 * column's engine stage (pr__column_stage); the write stage likewise
 * once the job is formatted; format of the oldest engined job; the engine's
 * first half of the oldest decoded job; else decoding the next chunk into a
 * free slot; else it waits. The two in-order stages always have a thread
 * when they have work and are kept short (first appearances; appending
 * bytes), everything else runs on any worker for any job at once: with N
 * workers on N cores no thread spins or waits while there is work (1 worker
 * runs every stage in turn). */
static void *pr__worker(void *arg)
{
    pr__run *run = arg;
    pthread_mutex_lock(&run->mu);
    while (!run->stop) {
        pr__job *je = &run->jobs[run->eng_seq % run->n_slots];
        pr__job *jw = &run->jobs[run->wr_seq % run->n_slots];
        pr__job *jd = &run->jobs[run->next_seq % run->n_slots];
        pr__job *jp;
        int col;
        if (run->wr_seq >= run->total_seq)
            break; /* everything written */
        if (!run->eng_busy && run->eng_seq < run->total_seq && je->state == PR__SLOT_PRED &&
            je->seq == run->eng_seq && je->whole)
            pr__serial_stage(run, je, true);
        else if ((col = pr__column_ready(run, &jp)) >= 0)
            pr__column_stage(run, jp, (uint32_t)col);
        else if (!run->wr_busy && jw->state == PR__SLOT_FORMATTED && jw->seq == run->wr_seq)
            pr__serial_stage(run, jw, false);
        else if ((jp = pr__oldest(run, PR__SLOT_ENGINED)) ||
                 (jp = pr__oldest(run, PR__SLOT_DECODED)))
            pr__parallel_stage(run, jp);
        else if (!run->src_done && jd->state == PR__SLOT_FREE)
            pr__decode_stage(run, jd);
        else {
            int64_t w0 = pr_mono_ns();
            pthread_cond_wait(&run->cv, &run->mu);
            run->idle_ns += pr_mono_ns() - w0;
        }
    }
    pthread_mutex_unlock(&run->mu);
    return NULL;
}

/* One pass over the input: `threads` workers (this thread and threads - 1
 * more) share every stage (pr__worker). */
static int pr__pass(pr__run *run, char *errstr, size_t errstr_size)
{
    int threads = run->opts->threads > 0 ? run->opts->threads : 1;
    if (threads > 64)
        threads = 64;
    run->map_pos = 0;
    run->src_done = false;
    run->src_eof = false;
    run->carry_len = 0;
    run->next_seq = 0;
    run->eng_seq = 0;
    run->wr_seq = 0;
    run->eng_busy = false;
    run->wr_busy = false;
    run->total_seq = UINT64_MAX;
    run->stop = false;
    run->rc = 0;
    run->line_base = 0;
    run->bytes_done = 0;
    run->rows_assigned = 0;
    for (uint32_t s = 0; s < run->n_slots; s++)
        run->jobs[s].state = PR__SLOT_FREE;
    for (uint32_t c = 0; c < run->spec->n_sparse; c++) {
        run->col_seq[c] = 0;
        run->col_busy[c] = false;
    }

    pthread_t tids[64];
    int started = 0;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tids[started], NULL, pr__worker, run) == 0)
            started++;
    pr__worker(run);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    for (uint32_t s = 0; s < run->n_slots; s++) {
        pr__job *job = &run->jobs[s];
        for (size_t i = 0; i < job->n_rej; i++)
            free(job->rej[i].detail);
        job->n_rej = 0;
    }
    if (run->rc)
        return pr_seterr(errstr, errstr_size, run->rc, "%s", run->errstr);
    return 0;
}

/* ---------------------------------------------------------------- setup */

static int pr__mkdir_p(const char *dir, char *errstr, size_t errstr_size)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", dir);
    for (char *p = tmp + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
                return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", dir,
                         errno ? strerror(errno) : "not a directory");
    return 0;
}

/* Copy stdin into an unlinked temp file in `dir` (two-pass needs to read twice). */
static int pr__spool(int in, const char *dir, int *out_fd, char *errstr, size_t errstr_size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/.piperec-spool-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    unlink(path);
    size_t cap = 1 << 22;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    }
    int rc = 0;
    for (;;) {
        ssize_t n = read(in, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "<stdin>: %s", strerror(errno));
            break;
        }
        if (n == 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t k = write(fd, buf + off, (size_t)(n - off));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0) {
                rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
                break;
            }
            off += k;
        }
        if (rc)
            break;
    }
    free(buf);
    if (rc) {
        close(fd);
        return rc;
    }
    *out_fd = fd;
    return 0;
}

static bool pr__needs_two_pass(const pr_pipeline_spec *spec)
{
    if (spec->count_mode != PR_COUNT_TWO_PASS || !pr_spec_has_op(spec, PR_OP_VOCAB))
        return false;
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].min_count > 1)
            return true;
    return false;
}

/* An input given as a symlink is read (datasets are often linked into place),
 * but never silently: when the link leads outside the directory it sits in,
 * say where the bytes really come from. */
static void pr__warn_symlink_input(const char *input)
{
    struct stat lst;
    if (lstat(input, &lst) < 0 || !S_ISLNK(lst.st_mode))
        return;
    char target[PATH_MAX], dir_copy[PATH_MAX], dir[PATH_MAX];
    snprintf(dir_copy, sizeof(dir_copy), "%s", input);
    if (!realpath(input, target) || !realpath(dirname(dir_copy), dir))
        return;
    size_t n = strlen(dir);
    if (!strncmp(target, dir, n) && target[n] == '/')
        return;
    pr_warn("process: input %s is a symlink to %s, outside %s; reading it", input, target, dir);
}

/* Open the input: mmap regular files; stream pipes unless two passes are
 * needed (then spool them to a file first). Sets run->fd and the mapping;
 * on failure the caller still closes run->fd when it was set. */
static int pr__open_input(pr__run *run, bool two_pass, char *errstr, size_t errstr_size)
{
    const pr_offline_opts *opts = run->opts;
    if (strcmp(opts->input, "-"))
        pr__warn_symlink_input(opts->input);
    int fd = !strcmp(opts->input, "-") ? 0 : open(opts->input, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", opts->input, strerror(errno));
    int rc;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", run->in_name, strerror(errno));
        goto out_close;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", run->in_name, strerror(EISDIR));
        goto out_close;
    }
    if (!S_ISREG(st.st_mode) && two_pass) {
        int sfd = -1;
        if ((rc = pr__spool(fd, opts->output_dir, &sfd, errstr, errstr_size)))
            goto out_close;
        if (fd != 0)
            close(fd);
        fd = sfd;
        if (fstat(fd, &st) < 0) {
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "spool: %s", strerror(errno));
            goto out_close;
        }
    }
    run->fd = fd;
    if (S_ISREG(st.st_mode)) {
        run->mapped = true;
        run->map_size = (size_t)st.st_size;
        if (run->map_size > 0) {
            void *m = mmap(NULL, run->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (m == MAP_FAILED)
                return pr_seterr(errstr, errstr_size, PR_EIO, "%s: mmap: %s", run->in_name,
                                 strerror(errno));
            madvise(m, run->map_size, MADV_SEQUENTIAL);
            run->map = m;
        }
    }
    return 0;

out_close:
    if (fd > 0)
        close(fd);
    return rc;
}

/* The engine and the job slots. */
static int pr__run_engine(pr__run *run, const pr_engine_opts *eopts, char *errstr,
                          size_t errstr_size)
{
    const pr_pipeline_spec *spec = run->spec;
    /* One pass touches the direct maps whole: on huge pages (pr_engine.h). */
    pr_engine_opts eo = eopts ? *eopts : (pr_engine_opts){0};
    eo.huge_tables = true;
    run->eng = pr_engine_new(spec, &eo, errstr, errstr_size);
    if (!run->eng)
        return PR_EINVAL;
    pr_vocab_store_opts vo = {
        .eng = run->eng, .pipeline = spec->name, .seed = run->opts->vocab_seed};
    int rc = pr_vocab_store_new(&vo, &run->vs, errstr, errstr_size);
    if (!rc)
        rc = pr_vocab_store_recover(run->vs, 0, errstr, errstr_size);
    if (rc)
        return rc;
    if (run->opts->frozen) {
        int frc = pr_engine_vocab_serve(run->eng, run->opts->unseen, errstr, errstr_size);
        if (frc)
            return frc;
    }
    run->res->sparse_width = pr_engine_sparse_width(run->eng);
    int threads = run->opts->threads > 0 ? run->opts->threads : 1;
    if (threads > 64)
        threads = 64;
    /* Room for a chunk in a parallel stage per worker plus one in each
     * in-order stage and as many waiting for them, so decoders rarely find
     * no free slot. */
    run->n_slots = 3 * (uint32_t)threads + 2;
    run->positional = threads > 1;
    run->jobs = calloc(run->n_slots, sizeof(*run->jobs));
    size_t ns = spec->n_sparse ? spec->n_sparse : 1;
    run->col_seq = calloc(ns, sizeof(*run->col_seq));
    run->col_busy = calloc(ns, sizeof(*run->col_busy));
    run->col_ns = calloc(ns, sizeof(*run->col_ns));
    if (!run->jobs || !run->col_seq || !run->col_busy || !run->col_ns)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    return 0;
}

/* Pass 1 of two: the engine counts values (for ops that need totals first). */
static int pr__count_pass(pr__run *run, char *errstr, size_t errstr_size)
{
    int rc;
    run->counting = true;
    if ((rc = pr__pass(run, errstr, errstr_size)))
        return rc;
    if ((rc = pr_engine_count_done(run->eng))) {
        pr_seterr(errstr, errstr_size, rc, "engine count: %s", pr_strerror(rc));
        return rc;
    }
    run->counting = false;
    run->res->rows = 0;
    return 0;
}

/* dense.npy, sparse.npy, labels.npy (when the spec has a label), recycled.npy
 * (when a column evicts; else a stale one from an earlier run is removed, so
 * that its absence always means no eviction), rejects.tsv. */
static int pr__open_outputs(pr__run *run, char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = run->spec;
    const char *dir = run->opts->output_dir;
    /* The outputs are written once and not read back here: O_DIRECT spares
     * the kernel the page cache for them (pr_npy.h). */
    unsigned fl = run->opts->buffered_io ? 0 : PR_NPY_DIRECT;
    char path[4200];
    int rc;
    snprintf(path, sizeof(path), "%s/dense.npy", dir);
    if ((rc = pr_npy_open_flags(&run->w_dense, path, PR_NPY_F32, spec->n_dense, fl, errstr,
                                errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/sparse.npy", dir);
    if ((rc = pr_npy_open_flags(&run->w_sparse, path,
                                run->res->sparse_width == 8 ? PR_NPY_I64 : PR_NPY_I32,
                                spec->n_sparse, fl, errstr, errstr_size)))
        return rc;
    if (spec->has_label) {
        snprintf(path, sizeof(path), "%s/labels.npy", dir);
        if ((rc = pr_npy_open_flags(&run->w_labels, path, PR_NPY_I32, 0, fl, errstr, errstr_size)))
            return rc;
    }
    if (run->positional &&
        ((rc = pr_npy_begin_positional(run->w_dense, errstr, errstr_size)) ||
         (rc = pr_npy_begin_positional(run->w_sparse, errstr, errstr_size)) ||
         (run->w_labels && (rc = pr_npy_begin_positional(run->w_labels, errstr, errstr_size)))))
        return rc;
    snprintf(path, sizeof(path), "%s/recycled.npy", dir);
    if (!pr_spec_has_eviction(spec)) {
        if (unlink(path) < 0 && errno != ENOENT)
            return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    } else if ((rc = pr_npy_open_flags(&run->w_recycled, path, PR_NPY_I64, 4, fl, errstr,
                                       errstr_size)))
        return rc;
    snprintf(path, sizeof(path), "%s/rejects.tsv", dir);
    run->rejects = fopen(path, "w");
    if (!run->rejects)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    setvbuf(run->rejects, NULL, _IOFBF, 1 << 16);
    return 0;
}

/* Finish the .npy headers and rejects.tsv; the first error wins. After an
 * error the writers not yet closed stay for pr__abort_outputs, and the .npy
 * files already closed are removed too (a write handed to an O_DIRECT writer's
 * I/O thread can fail as late as its close), so a failed run leaves none. */
static int pr__close_outputs(pr__run *run, char *errstr, size_t errstr_size)
{
    if (run->positional) {
        pr_npy_set_rows(run->w_dense, run->res->rows);
        pr_npy_set_rows(run->w_sparse, run->res->rows);
        if (run->w_labels)
            pr_npy_set_rows(run->w_labels, run->res->rows);
    }
    int rc = pr_npy_close(run->w_dense, errstr, errstr_size);
    run->w_dense = NULL;
    if (!rc) {
        rc = pr_npy_close(run->w_sparse, errstr, errstr_size);
        run->w_sparse = NULL;
    }
    if (!rc) {
        rc = pr_npy_close(run->w_labels, errstr, errstr_size);
        run->w_labels = NULL;
    }
    if (!rc) {
        rc = pr_npy_close(run->w_recycled, errstr, errstr_size);
        run->w_recycled = NULL;
    }
    if (fclose(run->rejects) != 0 && !rc)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s/rejects.tsv: %s", run->opts->output_dir,
                       strerror(errno));
    run->rejects = NULL;
    if (rc) {
        static const char *const names[] = {"dense.npy", "sparse.npy", "labels.npy",
                                            "recycled.npy"};
        char path[4200];
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            snprintf(path, sizeof(path), "%s/%s", run->opts->output_dir, names[i]);
            unlink(path);
        }
    }
    return rc;
}

/* After a failure: drop half-written .npy files, close rejects.tsv. */
static void pr__abort_outputs(pr__run *run)
{
    pr_npy_abort(run->w_dense);
    pr_npy_abort(run->w_sparse);
    pr_npy_abort(run->w_labels);
    pr_npy_abort(run->w_recycled);
    if (run->rejects)
        fclose(run->rejects);
}

/* An export worker: the job's tasks until none is left or one failed. */
typedef struct pr__vexp {
    pr_vocab_export_job *job;
    int64_t *cpu_ns; /* thread-seconds, summed (atomic) */
    int rc;
    char errstr[PR__ERR];
} pr__vexp;

static void *pr__vexp_main(void *arg)
{
    pr__vexp *x = arg;
    int64_t t0 = pr_mono_ns();
    x->rc = pr_vocab_export_job_work(x->job, x->errstr, sizeof(x->errstr));
    __atomic_fetch_add(x->cpu_ns, pr_mono_ns() - t0, __ATOMIC_RELAXED);
    return NULL;
}

/* DIR/vocab/, when the pipeline has a vocab operator: one file per column,
 * on up to `threads` workers (the export only reads the engine; its time is
 * after the pass, so on one core it would be serial): largest column first,
 * a large column in pieces (pr_vocab_export_job); the bytes do not depend
 * on the thread count. */
static int pr__write_vocab(pr__run *run, char *errstr, size_t errstr_size)
{
    if (!pr_spec_has_op(run->spec, PR_OP_VOCAB))
        return 0;
    char path[4200];
    int rc;
    snprintf(path, sizeof(path), "%s/vocab", run->opts->output_dir);
    if ((rc = pr__mkdir_p(path, errstr, errstr_size)))
        return rc;
    int threads = run->opts->threads > 0 ? run->opts->threads : 1;
    if (threads > 64)
        threads = 64;
    if (!pr_engine_vocab_read_concurrent(run->eng))
        threads = 1; /* hls-sim, xrt: one transfer buffer for every read */
    pr_vocab_export_job *job;
    if ((rc = pr_vocab_export_job_new(run->eng, path, threads, 0, &job, errstr, errstr_size)))
        return rc;
    int64_t cpu_ns = 0;
    pr__vexp x[64];
    pthread_t tids[64];
    bool started[64] = {false};
    for (int t = 0; t < threads; t++)
        x[t] = (pr__vexp){.job = job, .cpu_ns = &cpu_ns};
    for (int t = 1; t < threads; t++)
        started[t] = pthread_create(&tids[t], NULL, pr__vexp_main, &x[t]) == 0;
    pr__vexp_main(&x[0]); /* and the job's tasks a thread did not start for */
    for (int t = 1; t < threads; t++)
        if (started[t])
            pthread_join(tids[t], NULL);
    run->res->vocab_thread_s = cpu_ns / 1e9;
    run->res->vocab_longest_s = pr_vocab_export_job_longest_ns(job) / 1e9;
    pr_vocab_export_job_free(job);
    for (int t = 0; t < threads; t++)
        if (x[t].rc)
            return pr_seterr(errstr, errstr_size, x[t].rc, "%s", x[t].errstr);
    return 0;
}

static void pr__free_jobs(pr__run *run)
{
    for (uint32_t s = 0; s < run->n_slots; s++) {
        pr__job *job = &run->jobs[s];
        for (uint32_t i = 0; i < job->cap_blocks; i++)
            pr_block_free(job->blocks[i]);
        for (uint32_t i = 0; i < job->cap_outs; i++) {
            pr_out_free(job->outs[i]);
            pr_engine_split_free(job->splits[i]);
        }
        free(job->blocks);
        free(job->outs);
        free(job->splits);
        free(job->rm_dense);
        free(job->rm_sparse);
        free(job->rej);
        free(job->own);
    }
}

int pr_offline_engine_threads(int workers)
{
    return workers >= 8 ? workers / 4 : 1;
}

int pr_offline_run(const pr_pipeline_spec *spec, const pr_engine_opts *eopts,
                   const pr_offline_opts *opts, pr_offline_result *res, char *errstr,
                   size_t errstr_size)
{
    pr__run run;
    memset(&run, 0, sizeof(run));
    memset(res, 0, sizeof(*res));
    run.spec = spec;
    run.opts = opts;
    run.res = res;
    run.fd = -1;
    run.t0_ns = pr_clock_mono_ns(pr_clock_real());
    run.block_rows = opts->block_rows ? opts->block_rows : PR_OFFLINE_BLOCK_ROWS;
    run.block_rows = (run.block_rows + 63) & ~63u;
    run.chunk_bytes = (size_t)run.block_rows * PR__BYTES_PER_ROW;
    run.in_name = !strcmp(opts->input, "-") ? "<stdin>" : opts->input;
    bool two_pass = pr__needs_two_pass(spec);
    int rc;

    if ((rc = pr__mkdir_p(opts->output_dir, errstr, errstr_size)))
        return rc;
    if ((rc = pr__open_input(&run, two_pass, errstr, errstr_size)))
        goto out_input;
    if ((rc = pr__run_engine(&run, eopts, errstr, errstr_size)))
        goto out_engine;
    pthread_mutex_init(&run.mu, NULL);
    pthread_cond_init(&run.cv, NULL);

    if (two_pass && (rc = pr__count_pass(&run, errstr, errstr_size)))
        goto out_jobs;
    if ((rc = pr__open_outputs(&run, errstr, errstr_size)) ||
        (rc = pr__pass(&run, errstr, errstr_size)))
        goto out_outputs;
    if (opts->progress)
        pr__progress(&run, true);
    int64_t c0 = pr_mono_ns();
    rc = pr__close_outputs(&run, errstr, errstr_size);
    res->close_s = (pr_mono_ns() - c0) / 1e9;
    if (rc)
        goto out_outputs;
    int64_t v0 = pr_mono_ns();
    rc = pr__write_vocab(&run, errstr, errstr_size);
    res->vocab_s = (pr_mono_ns() - v0) / 1e9;
    if (rc)
        goto out_outputs;
    res->bytes = run.mapped ? run.map_size : run.bytes_done;

out_outputs:
    if (rc)
        pr__abort_outputs(&run);
out_jobs:
    pr__free_jobs(&run);
    pthread_mutex_destroy(&run.mu);
    pthread_cond_destroy(&run.cv);
out_engine:
    free(run.jobs);
    free(run.col_seq);
    free(run.col_busy);
    pr_vocab_store_free(run.vs);
    if (run.eng && !rc) {
        pr_engine_stats est;
        pr_engine_get_stats(run.eng, &est);
        res->unseen = run.opts->frozen ? est.undecided_oov : 0;
        res->n_vocab = pr_engine_spec(run.eng)->n_sparse;
        for (uint32_t c = 0; c < res->n_vocab; c++) {
            res->vocab_sizes[c] = pr_engine_vocab_size(run.eng, c);
            memcpy(res->vocab_names[c], pr_engine_spec(run.eng)->sparse[c].name, PR_NAME_MAX);
        }
    }
    pr_engine_free(run.eng);
out_input:
    if (run.map)
        munmap((void *)run.map, run.map_size);
    free(run.carry);
    if (run.fd > 0)
        close(run.fd);
    res->seconds = (pr_clock_mono_ns(pr_clock_real()) - run.t0_ns) / 1e9;
    res->decode_s = run.decode_ns / 1e9;
    res->engine_s = run.engine_ns / 1e9;
    res->write_s = run.write_ns / 1e9;
    res->idle_s = run.idle_ns / 1e9;
    /* The engine's serial part: whole jobs, plus the longest column chain
     * (the columns' chains run beside each other). */
    int64_t chain = 0;
    for (uint32_t c = 0; run.col_ns && c < spec->n_sparse; c++)
        if (run.col_ns[c] > chain)
            chain = run.col_ns[c];
    free(run.col_ns);
    res->serial_engine_s = (run.eng_serial_ns + chain) / 1e9;
    res->serial_write_s = run.wr_serial_ns / 1e9;
    return rc;
}
