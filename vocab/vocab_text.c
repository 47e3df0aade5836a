/*
 * vocab_text.c — vocabularies as text: export (one DIR/<column>.tsv per
 * sparse column, "index<TAB>value_hex<TAB>count", plus the eviction state
 * when the pipeline evicts) and import (the same format read back, or
 * another system's dictionary written in it).
 *
 * Import checks every file in full before any table changes, so a bad file
 * leaves the engine as it was; errors name file:line.
 */
#define _GNU_SOURCE
#include "pr_vocab.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_clock.h"
#include "pr_log.h"
#include "vocab_int.h"

/* --- the eviction state in text
 *
 * A pipeline that evicts writes its state with the entries, so an import
 * continues with the same evictions and notice numbers (issue 19):
 *
 *   #! piperec-state notice_next N clock R [event_ms E]
 *   index<TAB>value_hex<TAB>count<TAB>last_use[<TAB>last_use_ms]
 *
 * The state line is a '#' line (older importers skip it); the extra columns
 * make older importers refuse the file ("4 fields") rather than load it
 * without its statistics. A pipeline without eviction writes neither (its
 * export is byte for byte what it was), and files without a state line,
 * such as other systems' dictionaries, import as before: fresh statistics,
 * notice numbers unchanged. */

#define PR__STATE_TAG "#! piperec-state"
enum { PR__TX_CLOCK = 1, PR__TX_EVENT = 2 }; /* state a file carries */

static uint32_t pr__text_fields(const pr_engine *eng)
{
    return (pr__evicts(eng) ? PR__TX_CLOCK : 0) | (pr__event_ttl(eng) ? PR__TX_EVENT : 0);
}

static const char *pr__text_fields_name(uint32_t fields)
{
    static const char *const names[] = {
        [0] = "no eviction",
        [PR__TX_CLOCK] = "eviction by lookups (lru, lfu, ttl_records)",
        [PR__TX_EVENT] = "eviction by event time (ttl_s)",
        [PR__TX_CLOCK | PR__TX_EVENT] = "eviction by event time (ttl_s)",
    };
    return names[fields & 3];
}

/* --- text export */

typedef struct {
    FILE *f;
    uint32_t fields; /* PR__TX_*: the statistics columns written */
} pr__export_ctx;

/* Digits of v in `base` (10 or 16, lowercase), written backwards ending at
 * `end`; returns the first character. (Hand-formatted: fprintf's format
 * parsing was ~300 instructions a line and an offline run exports up to
 * n_sparse * modulus lines, serially, after the last block.) */
static char *pr__fmt_u64(char *end, uint64_t v, unsigned base)
{
    do {
        *--end = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    return end;
}

/* The same for a signed decimal. */
static char *pr__fmt_i64(char *end, int64_t v)
{
    char *p = pr__fmt_u64(end, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, 10);
    if (v < 0)
        *--p = '-';
    return p;
}

/* One entry's line, written backwards ending at `end` (at most
 * PR__LINE_MAX bytes); returns its first character. */
#define PR__LINE_MAX 128
static char *pr__export_line(const pr_vocab_entry *e, uint32_t fields, char *end)
{
    char *p = end;
    *--p = '\n';
    if (fields & PR__TX_EVENT) {
        p = pr__fmt_i64(p, e->last_use_ms);
        *--p = '\t';
    }
    if (fields & PR__TX_CLOCK) {
        p = pr__fmt_u64(p, e->last_use, 10);
        *--p = '\t';
    }
    p = pr__fmt_u64(p, e->count, 10);
    *--p = '\t';
    p = pr__fmt_u64(p, e->value, 16);
    *--p = '\t';
    return pr__fmt_i64(p, e->index);
}

static int pr__export_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__export_ctx *x = opaque;
    char line[PR__LINE_MAX], *end = line + sizeof(line);
    char *p = pr__export_line(e, x->fields, end);
    return fwrite(p, 1, (size_t)(end - p), x->f) == (size_t)(end - p) ? 0 : PR_EIO;
}

/* The comment lines above a column's entries (and its state line). */
static void pr__export_header(const pr_engine *eng, uint32_t c, uint32_t fields, FILE *f)
{
    const pr_pipeline_spec *spec = pr_engine_spec(eng);
    const pr_sparse_col_spec *s = &spec->sparse[c];
    fprintf(
        f, "# piperec vocabulary: pipeline %s column %s profile %s min_count %u size %" PRIu64 "\n",
        spec->name, s->name, pr_vocab_profile_name(spec->profile), s->min_count,
        pr_engine_vocab_size(eng, c));
    if (!fields) {
        fputs("# index\tvalue_hex\tcount\n", f);
        return;
    }
    pr_vocab_clock clock = pr_engine_vocab_clock(eng, c);
    fprintf(f, PR__STATE_TAG " notice_next %" PRIu64 " clock %" PRIu64, pr__notice_next(eng),
            clock.records);
    if (fields & PR__TX_EVENT)
        fprintf(f, " event_ms %" PRId64, clock.event_ms);
    fputs(fields & PR__TX_EVENT ? "\n# index\tvalue_hex\tcount\tlast_use\tlast_use_ms\n"
                                : "\n# index\tvalue_hex\tcount\tlast_use\n",
          f);
}

int pr_vocab_export_column(const pr_engine *eng, const char *dir, uint32_t col, char *errstr,
                           size_t errstr_size)
{
    if (!pr__has_vocab(eng) || col >= pr_engine_spec(eng)->n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab export: pipeline '%s' has no vocabulary column %u",
                         pr_engine_spec(eng)->name, col);
    const pr_sparse_col_spec *s = &pr_engine_spec(eng)->sparse[col];
    uint32_t fields = pr__text_fields(eng);
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.tsv", dir, s->name);
    FILE *f = fopen(path, "w");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: %s: %s", path,
                         strerror(errno));
    pr__export_header(eng, col, fields, f);
    pr__export_ctx x = {f, fields};
    int rc = pr_engine_vocab_read(eng, col, pr__export_cb, &x);
    if (fclose(f) && !rc)
        rc = PR_EIO;
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "vocab export: writing %s failed", path);
    return 0;
}

int pr_vocab_export(const pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab export: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: mkdir %s: %s", dir,
                         strerror(errno));
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        int rc = pr_vocab_export_column(eng, dir, c, errstr, errstr_size);
        if (rc)
            return rc;
    }
    return 0;
}

/* --- the export as a job on several threads (issue 21, offline)
 *
 * Tasks are whole columns (pr_vocab_export_column, straight to the file)
 * or pieces of a large one: index ranges [lo, hi) formatted into memory
 * (the same lines and header as above), the last piece
 * also holding the pending entries (index -1, after every assigned one, as
 * pr_engine_vocab_read gives them). A finished piece is written by the
 * thread that finishes it once every piece before it is written (the
 * column's lock; the file is opened at piece 0), so at most the pieces in
 * flight sit in memory and the file's bytes come in order. Tasks run
 * largest column first, a column's pieces in order. */

typedef struct {
    char *buf; /* formatted, not yet written (NULL once written) */
    size_t len;
    bool done;
} pr__xpiece;

typedef struct {
    uint32_t col;
    uint64_t size; /* pr_engine_vocab_size: the order of the tasks */
    uint32_t n_piece;
    int64_t step; /* indices per piece */
    pr__xpiece *piece;
    uint32_t next_write; /* first piece not written */
    int fd;
    char path[4096];
    pthread_mutex_t mu;
} pr__xcol;

typedef struct {
    uint32_t xc;    /* index into job->col */
    uint32_t piece; /* UINT32_MAX: the whole column, unsplit */
} pr__xtask;

struct pr_vocab_export_job {
    const pr_engine *eng;
    const char *dir;
    uint32_t fields;
    pr__xcol *col;
    uint32_t n_col;
    pr__xtask *task;
    uint32_t n_task;
    uint32_t next; /* the next task (atomic) */
    int64_t longest_ns;
    pthread_mutex_t mu; /* rc, err, longest_ns */
    int rc;
    char err[512];
};

typedef struct {
    char *buf; /* room for every line of the range: (hi - lo) x PR__LINE_MAX */
    size_t len, cap;
    uint32_t fields;
    int64_t lo, hi; /* indices written: [lo, hi), and pending when last */
    bool last;
} pr__xrange;

/* Entries of one piece: assigned ones in [lo, hi) (stops the read with
 * PR_EAGAIN past hi), pending ones when the piece is the last (these grow
 * the buffer: their number is not known ahead). */
static int pr__xrange_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__xrange *r = opaque;
    if (e->index >= 0 && e->index < r->lo)
        return 0;
    if (e->index >= r->hi || (e->index < 0 && !r->last))
        return r->last ? 0 : PR_EAGAIN;
    char line[PR__LINE_MAX], *end = line + sizeof(line);
    char *p = pr__export_line(e, r->fields, end);
    size_t n = (size_t)(end - p);
    if (r->len + n > r->cap) { /* pending entries only */
        size_t cap = 2 * r->cap + PR__LINE_MAX;
        char *nb = realloc(r->buf, cap);
        if (!nb)
            return PR_ENOMEM;
        r->buf = nb;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, p, n);
    r->len += n;
    return 0;
}

/* Format piece k of column xc into memory: lines straight into one buffer
 * of the worst-case size (pages never touched cost nothing), the header
 * (piece 0) through stdio first. */
static int pr__xpiece_format(pr_vocab_export_job *job, pr__xcol *xc, uint32_t k)
{
    pr__xpiece *p = &xc->piece[k];
    char *head = NULL;
    size_t head_len = 0;
    if (k == 0) {
        FILE *f = open_memstream(&head, &head_len);
        if (!f)
            return PR_ENOMEM;
        pr__export_header(job->eng, xc->col, job->fields, f);
        if (fclose(f)) {
            free(head);
            return PR_ENOMEM;
        }
    }
    pr__xrange r = {.fields = job->fields,
                    .lo = (int64_t)k * xc->step,
                    .hi = (int64_t)(k + 1) * xc->step,
                    .last = k + 1 == xc->n_piece};
    r.cap = head_len + (size_t)xc->step * PR__LINE_MAX;
    if (!(r.buf = malloc(r.cap))) {
        free(head);
        return PR_ENOMEM;
    }
    if (head_len) /* only the first piece has a header */
        memcpy(r.buf, head, head_len);
    r.len = head_len;
    free(head);
    int rc;
    /* The last piece of a column that counts (min_count > 1) reads the whole
     * table for its pending entries; the others read from their start. */
    if (r.last && pr_engine_spec(job->eng)->sparse[xc->col].min_count > 1)
        rc = pr_engine_vocab_read(job->eng, xc->col, pr__xrange_cb, &r);
    else
        rc = pr_engine_vocab_read_from(job->eng, xc->col, r.lo, pr__xrange_cb, &r);
    if (rc == PR_EAGAIN && !r.last)
        rc = 0;
    p->buf = r.buf;
    p->len = r.len;
    return rc;
}

/* Piece k is formatted: write it and every formatted piece after it whose
 * turn has come (the column's lock held). */
static int pr__xpiece_commit(pr__xcol *xc, uint32_t k, char *errstr, size_t errstr_size)
{
    int rc = 0;
    pthread_mutex_lock(&xc->mu);
    xc->piece[k].done = true;
    while (!rc && xc->next_write < xc->n_piece && xc->piece[xc->next_write].done) {
        pr__xpiece *p = &xc->piece[xc->next_write];
        if (xc->next_write > 0 && xc->fd < 0) {
            /* The file could not be opened: that error (its piece 0's worker
             * reported it) stands; a later piece has nowhere to go. Writing
             * it to fd -1 gave "Bad file descriptor", which could be the
             * error the job kept. */
            free(p->buf);
            p->buf = NULL;
            xc->next_write++;
            continue;
        }
        if (xc->next_write == 0 &&
            (xc->fd = open(xc->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666)) < 0)
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: %s: %s", xc->path,
                           strerror(errno));
        for (size_t at = 0; !rc && at < p->len;) {
            ssize_t n = write(xc->fd, p->buf + at, p->len - at);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: writing %s failed: %s",
                               xc->path, n < 0 ? strerror(errno) : "short write");
            else
                at += (size_t)n;
        }
        free(p->buf);
        p->buf = NULL;
        xc->next_write++;
    }
    if (!rc && xc->next_write == xc->n_piece && xc->fd >= 0) {
        if (close(xc->fd))
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: writing %s failed: %s",
                           xc->path, strerror(errno));
        xc->fd = -1;
    }
    pthread_mutex_unlock(&xc->mu);
    return rc;
}

static int pr__xtask_run(pr_vocab_export_job *job, const pr__xtask *t, char *errstr,
                         size_t errstr_size)
{
    pr__xcol *xc = &job->col[t->xc];
    if (t->piece == UINT32_MAX)
        return pr_vocab_export_column(job->eng, job->dir, xc->col, errstr, errstr_size);
    int rc = pr__xpiece_format(job, xc, t->piece);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "vocab export: formatting %s failed", xc->path);
    return pr__xpiece_commit(xc, t->piece, errstr, errstr_size);
}

int pr_vocab_export_job_work(pr_vocab_export_job *job, char *errstr, size_t errstr_size)
{
    char err[512];
    uint32_t i;
    while (!__atomic_load_n(&job->rc, __ATOMIC_RELAXED) &&
           (i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->n_task) {
        int64_t t0 = pr_mono_ns();
        int rc = pr__xtask_run(job, &job->task[i], err, sizeof(err));
        int64_t ns = pr_mono_ns() - t0;
        pthread_mutex_lock(&job->mu);
        if (ns > job->longest_ns)
            job->longest_ns = ns;
        if (rc && !job->rc) {
            snprintf(job->err, sizeof(job->err), "%s", err);
            __atomic_store_n(&job->rc, rc, __ATOMIC_RELAXED);
        }
        pthread_mutex_unlock(&job->mu);
    }
    int rc = __atomic_load_n(&job->rc, __ATOMIC_ACQUIRE);
    if (!rc)
        return 0;
    pthread_mutex_lock(&job->mu);
    rc = pr_seterr(errstr, errstr_size, job->rc, "%s", job->err);
    pthread_mutex_unlock(&job->mu);
    return rc;
}

int64_t pr_vocab_export_job_longest_ns(const pr_vocab_export_job *job)
{
    return job->longest_ns;
}

/* Columns by vocabulary size, largest first (ties: column order). */
static int pr__xcol_by_size(const void *a, const void *b)
{
    const pr__xcol *x = a, *y = b;
    if (x->size != y->size)
        return x->size < y->size ? 1 : -1;
    return (x->col > y->col) - (x->col < y->col);
}

/* Each column's pieces (one whole-column task when it fits one piece),
 * then the task list in order. */
static int pr__xjob_plan(pr_vocab_export_job *job, size_t piece_entries)
{
    size_t n_task = 0;
    for (uint32_t i = 0; i < job->n_col; i++) {
        pr__xcol *xc = &job->col[i];
        uint64_t size = xc->size;
        xc->n_piece =
            size > piece_entries ? (uint32_t)((size + piece_entries - 1) / piece_entries) : 1;
        xc->step = (int64_t)piece_entries;
        xc->fd = -1;
        snprintf(xc->path, sizeof(xc->path), "%s/%s.tsv", job->dir,
                 pr_engine_spec(job->eng)->sparse[xc->col].name);
        pthread_mutex_init(&xc->mu, NULL);
        if (xc->n_piece > 1 && !(xc->piece = calloc(xc->n_piece, sizeof(*xc->piece))))
            return PR_ENOMEM;
        n_task += xc->n_piece;
    }
    if (!(job->task = calloc(n_task ? n_task : 1, sizeof(*job->task))))
        return PR_ENOMEM;
    for (uint32_t i = 0; i < job->n_col; i++)
        for (uint32_t k = 0; k < job->col[i].n_piece; k++)
            job->task[job->n_task++] = (pr__xtask){i, job->col[i].n_piece > 1 ? k : UINT32_MAX};
    return 0;
}

int pr_vocab_export_job_new(const pr_engine *eng, const char *dir, int threads,
                            size_t piece_entries, pr_vocab_export_job **out, char *errstr,
                            size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab export: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    uint32_t n = pr_engine_spec(eng)->n_sparse;
    /* One thread gains nothing from pieces (only a copy): whole columns. */
    if (!piece_entries)
        piece_entries = threads > 1 ? PR_VOCAB_EXPORT_PIECE : SIZE_MAX;
    pr_vocab_export_job *job = calloc(1, sizeof(*job));
    if (!job || !(job->col = calloc(n ? n : 1, sizeof(*job->col)))) {
        free(job);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab export: out of memory");
    }
    job->eng = eng;
    job->dir = dir;
    job->fields = pr__text_fields(eng);
    pthread_mutex_init(&job->mu, NULL);
    job->n_col = n;
    for (uint32_t c = 0; c < n; c++)
        job->col[c] = (pr__xcol){.col = c, .size = pr_engine_vocab_size(eng, c), .fd = -1};
    qsort(job->col, n, sizeof(*job->col), pr__xcol_by_size);
    if (pr__xjob_plan(job, piece_entries)) {
        pr_vocab_export_job_free(job);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab export: out of memory");
    }
    *out = job;
    return 0;
}

void pr_vocab_export_job_free(pr_vocab_export_job *job)
{
    if (!job)
        return;
    for (uint32_t i = 0; i < job->n_col; i++) {
        pr__xcol *xc = &job->col[i];
        for (uint32_t k = 0; xc->piece && k < xc->n_piece; k++)
            free(xc->piece[k].buf);
        free(xc->piece);
        if (xc->fd >= 0)
            close(xc->fd);
        pthread_mutex_destroy(&xc->mu);
    }
    pthread_mutex_destroy(&job->mu);
    free(job->col);
    free(job->task);
    free(job);
}

/* --- text import (the export format read back; also seeds from other systems)
 *
 * Every column is parsed and checked in full before any state changes, so a
 * bad file leaves the engine as it was. Checks name file:line: field syntax,
 * values not below the modulus, indices reserved by the profile, duplicate
 * values, duplicate indices, gaps, the column's capacity, and a state line
 * that does not fit this pipeline's eviction settings. */

typedef struct {
    uint64_t value;
    int64_t index;
    uint64_t count;
    uint64_t last_use;
    int64_t last_use_ms;
    size_t line;
} pr__imp_ent;

typedef struct {
    pr__imp_ent *e;
    size_t n, cap;
    /* the state line, when the file has one */
    bool stateful;
    uint32_t fields; /* PR__TX_*: statistics columns on every line */
    uint64_t notice_next;
    pr_vocab_clock clock;
    size_t state_line;
} pr__imp_col;

/* What pr__imp_parse checks a line against. */
typedef struct {
    const char *path;
    const pr_sparse_col_spec *s;
    int64_t base;
    uint64_t cap;
    bool mod;
    bool pending_ok;
    uint32_t fields; /* this pipeline's: pr__text_fields */
} pr__imp_rules;

static int pr__imp_by_value(const void *a, const void *b)
{
    const pr__imp_ent *x = a, *y = b;
    return x->value < y->value   ? -1
           : x->value > y->value ? 1
                                 : (x->line > y->line) - (x->line < y->line);
}

/* Assigned entries by index, then pending (index < 0) ones by value. */
static int pr__imp_by_index(const void *a, const void *b)
{
    const pr__imp_ent *x = a, *y = b;
    if ((x->index < 0) != (y->index < 0))
        return x->index < 0 ? 1 : -1;
    if (x->index < 0)
        return x->value < y->value ? -1 : x->value > y->value;
    return x->index < y->index   ? -1
           : x->index > y->index ? 1
                                 : (x->line > y->line) - (x->line < y->line);
}

static bool pr__imp_u64(const char *s, size_t len, unsigned base, uint64_t *out)
{
    if (!len || (base == 16 && len > 16) || (base == 10 && len > 20))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int d;
        char ch = s[i];
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (base == 16 && ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (base == 16 && ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return false;
        if (v > (UINT64_MAX - (uint64_t)d) / base)
            return false;
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return true;
}

/* A signed decimal that fits int64_t. */
static bool pr__imp_i64(const char *s, size_t len, int64_t *out)
{
    bool neg = len > 0 && s[0] == '-';
    uint64_t v;
    if (!pr__imp_u64(s + neg, len - neg, 10, &v) || v > (uint64_t)INT64_MAX)
        return false;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* "#! piperec-state notice_next N clock R [event_ms E]" into ic. */
static int pr__imp_state(const pr__imp_rules *r, char *text, size_t line, pr__imp_col *ic,
                         char *errstr, size_t errstr_size)
{
    static const struct {
        const char *key;
        uint32_t field; /* the PR__TX_* it stands for (0: always there) */
    } keys[] = {{"notice_next", 0}, {"clock", PR__TX_CLOCK}, {"event_ms", PR__TX_EVENT}};
    int64_t val[3];
    bool seen[3] = {false, false, false};
    char *save = NULL;
    if (ic->stateful || ic->n)
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: the state line must come once, before the entries", r->path,
                         line);
    for (char *k = strtok_r(text, " ", &save); k; k = strtok_r(NULL, " ", &save)) {
        char *v = strtok_r(NULL, " ", &save);
        size_t i = 0;
        while (i < 3 && strcmp(k, keys[i].key))
            i++;
        if (i == 3 || !v || seen[i] || !pr__imp_i64(v, strlen(v), &val[i]) || (i < 2 && val[i] < 0))
            return pr_seterr(errstr, errstr_size, PR_EBADREC,
                             "%s:%zu: bad state line at '%s' (expected notice_next N clock R "
                             "[event_ms E])",
                             r->path, line, k);
        seen[i] = true;
        ic->fields |= keys[i].field;
    }
    if (!seen[0] || !seen[1] || val[0] < 1)
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: the state line needs notice_next (>= 1) and clock", r->path,
                         line);
    if (ic->fields != r->fields)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%zu: the file carries the eviction state of a pipeline with %s, "
                         "column %s here has %s; to import the dictionary alone, with fresh "
                         "statistics, drop the state line and keep 3 columns (cut -f1-3)",
                         r->path, line, pr__text_fields_name(ic->fields), r->s->name,
                         pr__text_fields_name(r->fields));
    ic->stateful = true;
    ic->state_line = line;
    ic->notice_next = (uint64_t)val[0];
    ic->clock = (pr_vocab_clock){(uint64_t)val[1], seen[2] ? val[2] : 0};
    return 0;
}

/* Split a line at tabs: up to 6 fields kept, *nf the real count. */
static void pr__imp_split(char *buf, const char **fld, size_t *fl, size_t *nf)
{
    *nf = 0;
    for (char *p = buf;; (*nf)++) {
        char *t = strchr(p, '\t');
        if (*nf < 6) {
            fld[*nf] = p;
            fl[*nf] = t ? (size_t)(t - p) : strlen(p);
        }
        if (!t) {
            (*nf)++;
            return;
        }
        p = t + 1;
    }
}

/* One entry line into *e, checked against the rules and the state line. */
static int pr__imp_entry(const pr__imp_rules *r, const pr__imp_col *ic, char *buf, size_t line,
                         pr__imp_ent *e, char *errstr, size_t errstr_size)
{
    const char *fld[6];
    size_t fl[6], nf;
    pr__imp_split(buf, fld, fl, &nf);
    *e = (pr__imp_ent){0, 0, 0, 0, 0, line};
    uint64_t iv;
    bool neg = fl[0] > 0 && fld[0][0] == '-';
    size_t want = 3 + !!(ic->fields & PR__TX_CLOCK) + !!(ic->fields & PR__TX_EVENT);
    const char *path = r->path;
#define PR__FLD(i) (int)(fl[i] > 40 ? 40 : fl[i]), fld[i]
    if (ic->stateful && nf != want)
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: %zu fields, expected %zu (index, value_hex, count, last_use%s: "
                         "the state line on line %zu says the entries carry their statistics)",
                         path, line, nf, want, want == 5 ? ", last_use_ms" : "", ic->state_line);
    if (!ic->stateful && (nf < 2 || nf > 3))
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: %zu fields, expected index<TAB>value_hex[<TAB>count]%s", path,
                         line, nf,
                         nf > 3 ? " (statistics columns need the '" PR__STATE_TAG "' line)" : "");
    if (!pr__imp_u64(fld[0] + neg, fl[0] - neg, 10, &iv) || iv > (uint64_t)INT64_MAX)
        return pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: index '%.*s' is not an integer",
                         path, line, PR__FLD(0));
    if (!pr__imp_u64(fld[1], fl[1], 16, &e->value))
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: value '%.*s' is not 1 to 16 hex digits", path, line, PR__FLD(1));
    if (nf >= 3 && !pr__imp_u64(fld[2], fl[2], 10, &e->count))
        return pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: count '%.*s' is not an integer",
                         path, line, PR__FLD(2));
    if (nf >= 4 &&
        (!pr__imp_u64(fld[3], fl[3], 10, &e->last_use) || e->last_use > ic->clock.records))
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: last_use '%.*s' is not an integer up to the clock %" PRIu64, path,
                         line, PR__FLD(3), ic->clock.records);
    if (nf >= 5 && !pr__imp_i64(fld[4], fl[4], &e->last_use_ms))
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s:%zu: last_use_ms '%.*s' is not an integer", path, line, PR__FLD(4));
#undef PR__FLD
    if (r->mod && e->value >= r->s->modulus)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%zu: value %" PRIx64 " is not below column %s's modulus %" PRIu64
                         " (values are keys after Hex2Int and Modulus)",
                         path, line, e->value, r->s->name, r->s->modulus);
    if (neg && (iv != 1 || !r->pending_ok))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%zu: index -%" PRIu64 ": only -1 is allowed (a value still below "
                         "min_count), and only when min_count > 1 with count_mode streaming",
                         path, line, iv);
    if (!neg && (int64_t)iv < r->base)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s:%zu: index %" PRIu64 " is reserved by profile default (0 = missing, "
                         "1 = out-of-vocabulary); vocabulary indices start at 2",
                         path, line, iv);
    if (!neg && iv >= r->cap)
        return pr_seterr(errstr, errstr_size, PR_EFULL,
                         "%s:%zu: index %" PRIu64 " does not fit column %s's capacity %" PRIu64,
                         path, line, iv, r->s->name, r->cap);
    e->index = neg ? -1 : (int64_t)iv;
    return 0;
}

static int pr__imp_push(pr__imp_col *ic, const pr__imp_ent *e)
{
    if (ic->n == ic->cap) {
        size_t nc = ic->cap ? ic->cap * 2 : 1024;
        pr__imp_ent *p = realloc(ic->e, nc * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        ic->e = p;
        ic->cap = nc;
    }
    ic->e[ic->n++] = *e;
    return 0;
}

/* The column as a whole: no duplicate values or indices, no gaps. */
static int pr__imp_check(const pr__imp_rules *r, pr__imp_col *ic, char *errstr, size_t errstr_size)
{
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_value);
    for (size_t i = 1; i < ic->n; i++)
        if (ic->e[i].value == ic->e[i - 1].value)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate value %" PRIx64 " (also on line %zu)", r->path,
                             ic->e[i].line, ic->e[i].value, ic->e[i - 1].line);
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_index);
    int64_t want = r->base;
    for (size_t i = 0; i < ic->n && ic->e[i].index >= 0; i++, want++) {
        const pr__imp_ent *x = &ic->e[i];
        if (i && x->index == ic->e[i - 1].index)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate index %" PRId64 " (also on line %zu)", r->path,
                             x->line, x->index, ic->e[i - 1].line);
        if (x->index != want)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: index %" PRId64 " leaves a gap: index %" PRId64
                             " is missing (indices must be contiguous from %" PRId64 ")",
                             r->path, x->line, x->index, want, r->base);
    }
    return 0;
}

/* Parse DIR/<col>.tsv into *ic and check it against the spec. */
static int pr__imp_parse(const pr_engine *eng, uint32_t c, const char *path, pr__imp_col *ic,
                         char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = pr_engine_spec(eng);
    const pr_sparse_col_spec *s = &spec->sparse[c];
    pr__imp_rules r = {path,
                       s,
                       pr__vbase(spec->profile),
                       pr_spec_col_capacity(spec, c),
                       pr_spec_has_op(spec, PR_OP_MODULUS),
                       s->min_count > 1 && spec->count_mode == PR_COUNT_STREAMING,
                       pr__text_fields(eng)};
    FILE *f = fopen(path, "r");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s (every sparse column needs a file)",
                         path, strerror(errno));
    char *buf = NULL;
    size_t bufcap = 0, line = 0, tag_len = strlen(PR__STATE_TAG);
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = 0;
        if (line == 1 && len >= 3 && !memcmp(buf, "\xef\xbb\xbf", 3)) {
            rc = pr_seterr(errstr, errstr_size, PR_EBADREC,
                           "%s:1: starts with a UTF-8 byte order mark (an editor saved it so): "
                           "remove it, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE",
                           path);
            break;
        }
        if (!strncmp(buf, PR__STATE_TAG " ", tag_len + 1)) {
            rc = pr__imp_state(&r, buf + tag_len + 1, line, ic, errstr, errstr_size);
            continue;
        }
        if (len == 0 || buf[0] == '#')
            continue;
        pr__imp_ent e;
        if (!(rc = pr__imp_entry(&r, ic, buf, line, &e, errstr, errstr_size)) &&
            (rc = pr__imp_push(ic, &e)))
            rc = pr_seterr(errstr, errstr_size, rc, "%s: out of memory", path);
    }
    if (!rc && ferror(f))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: read error: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    if (rc || !ic->n)
        return rc;
    return pr__imp_check(&r, ic, errstr, errstr_size);
}

/* Every column's file carries the same notice counter, or none does. */
static int pr__imp_same_state(const pr_engine *eng, const char *dir, const pr__imp_col *cols,
                              uint32_t ns, char *errstr, size_t errstr_size)
{
    for (uint32_t c = 1; c < ns; c++)
        if (cols[c].stateful != cols[0].stateful || cols[c].notice_next != cols[0].notice_next)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab import: %s/%s.tsv and %s.tsv come from different exports "
                             "(state line: notice_next %" PRIu64 " vs %" PRIu64
                             ", 0 = none); import the files of one export",
                             dir, pr_engine_spec(eng)->sparse[0].name,
                             pr_engine_spec(eng)->sparse[c].name, cols[0].notice_next,
                             cols[c].notice_next);
    return 0;
}

static int pr__nonempty_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    (void)opaque;
    return 1;
}

/* Load the parsed columns, their clocks and the notice counter; on a
 * backend's refusal leave every column empty again. */
static int pr__imp_load(pr_engine *eng, const char *dir, const pr__imp_col *cols, char *errstr,
                        size_t errstr_size)
{
    uint32_t ns = pr_engine_spec(eng)->n_sparse;
    pr_vocab_entry *ents = NULL;
    int rc = 0;
    for (uint32_t c = 0; c < ns && !rc; c++) {
        free(ents);
        ents = malloc((cols[c].n ? cols[c].n : 1) * sizeof(*ents));
        if (!ents)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
        for (size_t i = 0; i < cols[c].n; i++) {
            const pr__imp_ent *x = &cols[c].e[i];
            ents[i] = (pr_vocab_entry){x->value, x->index, x->count, x->last_use, x->last_use_ms};
        }
        if ((rc = pr_engine_vocab_load_column(eng, c, ents, cols[c].n))) {
            rc = pr_seterr(errstr, errstr_size, rc,
                           "vocab import: %s/%s.tsv: entries rejected by backend %s (%s)", dir,
                           pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                           pr_strerror(rc));
            /* Leave no half-imported column behind. */
            for (uint32_t k = 0; k <= c; k++) {
                pr_engine_vocab_load_column(eng, k, NULL, 0);
                if (cols[k].stateful)
                    pr_engine_vocab_set_clock(eng, k, (pr_vocab_clock){0, 0});
            }
            break;
        }
        if (cols[c].stateful)
            pr_engine_vocab_set_clock(eng, c, cols[c].clock);
        pr__journal_sync_col(eng, c);
    }
    free(ents);
    if (!rc && ns && cols[0].stateful)
        pr_engine_vocab_notices_set_next(eng, cols[0].notice_next);
    return rc;
}

int pr_vocab_import(pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab import: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    if (pr_engine_spec(eng)->count_mode == PR_COUNT_TWO_PASS)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "vocab import: pipeline '%s' uses count_mode two_pass, which assigns "
                         "indices from its own counting pass; importing is only supported with "
                         "count_mode streaming",
                         pr_engine_spec(eng)->name);
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++)
        if (pr_engine_vocab_read(eng, c, pr__nonempty_cb, NULL))
            return pr_seterr(errstr, errstr_size, PR_ESTATE,
                             "vocab import: column %s already has a vocabulary",
                             pr_engine_spec(eng)->sparse[c].name);
    uint32_t ns = pr_engine_spec(eng)->n_sparse;
    pr__imp_col *cols = calloc(ns ? ns : 1, sizeof(*cols));
    if (!cols)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
    int rc = 0;
    char path[4096];
    for (uint32_t c = 0; c < ns && !rc; c++) {
        if (snprintf(path, sizeof(path), "%s/%s.tsv", dir, pr_engine_spec(eng)->sparse[c].name) >=
            (int)sizeof(path))
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab import: path too long");
        else
            rc = pr__imp_parse(eng, c, path, &cols[c], errstr, errstr_size);
    }
    if (!rc)
        rc = pr__imp_same_state(eng, dir, cols, ns, errstr, errstr_size);
    if (!rc)
        rc = pr__imp_load(eng, dir, cols, errstr, errstr_size);
    for (uint32_t c = 0; c < ns; c++)
        free(cols[c].e);
    free(cols);
    return rc;
}
