/*
 * vocab_journal.c — the local vocabulary journal: every index a block hands
 * out, appended and fdatasync'd from the engine's block hook before
 * pr_engine_process returns (so no index leaves the engine before it is
 * durable), replayed over the last snapshot after a crash, truncated to its
 * header by a checkpoint. Formats (versions 1-3) are described below.
 */
#define _GNU_SOURCE
#include "pr_vocab.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_log.h"
#include "vocab_int.h"

/* The open journal: the engine's block hook data. */
typedef struct pr__journal {
    int fd;
    char *path;
    int64_t next[PR_MAX_SPARSE]; /* first index not yet journaled, per column */
} pr__journal;

static int pr__journal_hook(pr_engine *eng, void *opaque, char *errstr, size_t errstr_size);

static void pr__journal_release(void *opaque)
{
    pr__journal *j = opaque;
    close(j->fd);
    free(j->path);
    free(j);
}

void pr__journal_sync_col(pr_engine *eng, uint32_t col)
{
    pr__journal *j = pr_engine_block_hook_data(eng, pr__journal_hook);
    if (j && col < PR_MAX_SPARSE)
        j->next[col] = (int64_t)pr_engine_vocab_size(eng, col);
}

static void pr__journal_sync(pr_engine *eng)
{
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++)
        pr__journal_sync_col(eng, c);
}

int pr__vocab_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return PR_EIO;
        }
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* --- journal
 *
 *   header: "PRVJRNL1" u64 fingerprint u32 n_sparse u32 0            (24 bytes)
 *   record: u32 col u32 check u64 value i64 index                   (24 bytes)
 * check = low 32 bits of FNV-1a over (col, value, index): a torn or
 * garbage tail record fails it and ends the replay there.
 */

static const char pr__jr_magic[8] = {'P', 'R', 'V', 'J', 'R', 'N', 'L', '1'};
#define PR__JR_HDR 24

/* Version 2 (only when some column evicts): the same header with magic
 * "PRVJRNL2", then 40-byte records
 *   u32 kind << 28 | col, u32 check, u64 value, i64 index, u64 tick, u64 number
 * kind 0 ASSIGN: `index` of column `col` now holds `value` (a fresh index, or
 *   a recycled one when number > 0: the notice's number), looked up at record
 *   clock `tick`;
 * kind 1 COMMIT: end of one block's records (number = the next notice number).
 * check = low 32 bits of FNV-1a over the other 36 bytes. A block's records go
 * out in one write; replay applies whole blocks only (up to the last COMMIT),
 * in file order, so an index recycled twice ends with its last value.
 *
 * Version 3 (only when some column evicts by event time, ttl_s): magic
 * "PRVJRNL3", 48-byte records: version 2's plus i64 tick_ms, the column's
 * event clock at the assignment (0 in columns without ttl_s); check covers
 * the other 44 bytes. Version 2 journals stay byte-for-byte what they were. */
static const char pr__jr2_magic[8] = {'P', 'R', 'V', 'J', 'R', 'N', 'L', '2'};
static const char pr__jr3_magic[8] = {'P', 'R', 'V', 'J', 'R', 'N', 'L', '3'};
enum { PR__JR2_ASSIGN = 0, PR__JR2_COMMIT = 1 };

/* A version 2 or 3 record in memory; on disk version 2 ends before tick_ms. */
typedef struct {
    uint32_t kc;
    uint32_t check;
    uint64_t value;
    int64_t index;
    uint64_t tick;
    uint64_t number;
    int64_t tick_ms;
} pr__jr2_rec;

/* Journal version of an engine: 1 without eviction, 2 with, 3 with ttl_s. */
static int pr__jr_version(const pr_engine *eng)
{
    return pr__event_ttl(eng) ? 3 : pr__evicts(eng) ? 2 : 1;
}

static const char *pr__jr_magic_of(int version)
{
    return version == 3 ? pr__jr3_magic : version == 2 ? pr__jr2_magic : pr__jr_magic;
}

/* Bytes per record on disk. */
static size_t pr__jr_rec_size(const pr_engine *eng)
{
    static const size_t size[] = {0, 24, 40, sizeof(pr__jr2_rec)};
    return size[pr__jr_version(eng)];
}

/* Check of a version 2 or 3 record of `size` bytes on disk. */
static uint32_t pr__jr2_check(const pr__jr2_rec *r, size_t size)
{
    uint64_t h = pr__fnv(PR__FNV_INIT, &r->kc, 4);
    h = pr__fnv(h, &r->value, size - 8);
    return (uint32_t)(h ^ (h >> 32));
}

/* (check is filled in when the block is written: pr__journal_append2) */
static pr__jr2_rec pr__jr2_make(uint32_t kind, uint32_t col, uint64_t value, int64_t index,
                                uint64_t tick, uint64_t number, int64_t tick_ms)
{
    return (pr__jr2_rec){kind << 28 | col, 0, value, index, tick, number, tick_ms};
}

typedef struct {
    uint32_t col;
    uint32_t check;
    uint64_t value;
    int64_t index;
} pr__jr_rec;

static uint32_t pr__jr_check(uint32_t col, uint64_t value, int64_t index)
{
    uint64_t h = pr__fnv(PR__FNV_INIT, &col, 4);
    h = pr__fnv(h, &value, 8);
    h = pr__fnv(h, &index, 8);
    return (uint32_t)(h ^ (h >> 32));
}

static int pr__jr_header_check(const pr_engine *eng, const unsigned char *hdr, const char *path,
                               char *errstr, size_t errstr_size)
{
    uint64_t fp;
    uint32_t ns;
    memcpy(&fp, hdr + 8, 8);
    memcpy(&ns, hdr + 16, 4);
    static const char *const what[] = {"", "without eviction", "with eviction by lookups",
                                       "with eviction by event time (ttl_s)"};
    int want = pr__jr_version(eng);
    if (memcmp(hdr, pr__jr_magic_of(want), 8)) {
        for (int v = 1; v <= 3; v++)
            if (!memcmp(hdr, pr__jr_magic_of(v), 8))
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "vocab journal: %s was written %s, this pipeline evicts %s "
                                 "(the indices it holds do not apply)",
                                 path, what[v],
                                 want == 1   ? "nothing"
                                 : want == 2 ? "by lookups"
                                             : "by event time (ttl_s)");
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s is not a piperec journal", path);
    }
    if (fp != pr_engine_vocab_fingerprint(eng) || ns != pr_engine_spec(eng)->n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s was written for a different pipeline spec "
                         "(fingerprint %016" PRIx64 ", this pipeline %016" PRIx64 ")",
                         path, fp, pr_engine_vocab_fingerprint(eng));
    return 0;
}

static void pr__jr_header(const pr_engine *eng, unsigned char *hdr)
{
    memset(hdr, 0, PR__JR_HDR);
    memcpy(hdr, pr__jr_magic_of(pr__jr_version(eng)), 8);
    uint64_t fp = pr_engine_vocab_fingerprint(eng);
    memcpy(hdr + 8, &fp, 8);
    uint32_t ns = pr_engine_spec(eng)->n_sparse;
    memcpy(hdr + 16, &ns, 4);
}

static bool pr__jr_rec_valid(const pr_engine *eng, const pr__jr_rec *r)
{
    return r->col < pr_engine_spec(eng)->n_sparse && r->index >= 0 &&
           r->check == pr__jr_check(r->col, r->value, r->index);
}

static bool pr__jr2_rec_valid(const pr_engine *eng, const pr__jr2_rec *r)
{
    uint32_t kind = r->kc >> 28, col = r->kc & 0x0fffffffu;
    if (r->check != pr__jr2_check(r, pr__jr_rec_size(eng)))
        return false;
    if (kind == PR__JR2_COMMIT)
        return true;
    return kind == PR__JR2_ASSIGN && col < pr_engine_spec(eng)->n_sparse && r->index >= 0;
}

/* What one journal record means for the valid prefix: the scan stops at a
 * BAD one; replay may end after an END one (every record of version 1, a
 * COMMIT of versions 2 and 3: a whole block). */
enum { PR__JR_BAD, PR__JR_MID, PR__JR_END };

static int pr__jr_kind(const pr_engine *eng, const void *rec)
{
    return pr__jr_rec_valid(eng, rec) ? PR__JR_END : PR__JR_BAD;
}

static int pr__jr2_kind(const pr_engine *eng, const void *rec)
{
    pr__jr2_rec r = {0}; /* a version 2 record is shorter than the struct */
    memcpy(&r, rec, pr__jr_rec_size(eng));
    if (!pr__jr2_rec_valid(eng, &r))
        return PR__JR_BAD;
    return r.kc >> 28 == PR__JR2_COMMIT ? PR__JR_END : PR__JR_MID;
}

/* End of the journal's valid prefix: header, then records up to the last
 * END before the first torn or invalid one (the point where replay stops).
 * -1 on a read error. */
static off_t pr__jr_valid_end(const pr_engine *eng, int fd, off_t size)
{
    size_t rec_size = pr__jr_rec_size(eng);
    int (*kind)(const pr_engine *, const void *) = pr__evicts(eng) ? pr__jr2_kind : pr__jr_kind;
    uint64_t buf[3 * 1024]; /* 24 KiB: whole records of any size, 8-byte aligned */
    size_t per = sizeof(buf) / rec_size;
    off_t at = PR__JR_HDR, end = PR__JR_HDR;
    while (at + (off_t)rec_size <= size) {
        ssize_t got = pread(fd, buf, per * rec_size, at);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t n = (size_t)got / rec_size;
        if (n == 0)
            break;
        for (size_t i = 0; i < n; i++) {
            int k = kind(eng, (const char *)buf + i * rec_size);
            if (k == PR__JR_BAD)
                return end;
            at += (off_t)rec_size;
            if (k == PR__JR_END)
                end = at;
        }
    }
    return end;
}

int pr_vocab_journal_open(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    if (pr_engine_vocab_is_shared(eng) && pr__evicts(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' shares a vocabulary that evicts; the "
                         "shared log is its journal",
                         pr_engine_spec(eng)->name);
    pr_vocab_journal_close(eng);
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                         strerror(errno));
    struct stat st;
    unsigned char hdr[PR__JR_HDR];
    int rc = 0;
    if (fstat(fd, &st)) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path, strerror(errno));
    } else if (st.st_size < PR__JR_HDR) {
        /* New (or header torn by a crash at creation): start it afresh. */
        pr__jr_header(eng, hdr);
        if (ftruncate(fd, 0) || pr__vocab_write_all(fd, hdr, sizeof(hdr)) || fdatasync(fd) ||
            pr__vocab_fsync_dir_of(path))
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                           strerror(errno));
    } else if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path, strerror(errno));
    } else {
        rc = pr__jr_header_check(eng, hdr, path, errstr, errstr_size);
        /* Keep only the valid prefix (what replay reads): a torn tail, or a
         * whole record of garbage left by a crash, would otherwise hide every
         * record appended after it from the next replay. */
        off_t whole = rc ? st.st_size : pr__jr_valid_end(eng, fd, st.st_size);
        if (!rc && whole < 0)
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                           strerror(errno));
        else if (!rc && whole != st.st_size && ftruncate(fd, whole))
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                           strerror(errno));
    }
    if (rc) {
        close(fd);
        return rc;
    }
    pr__journal *j = calloc(1, sizeof(*j));
    if (!j || !(j->path = strdup(path))) {
        free(j);
        close(fd);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab journal: out of memory");
    }
    j->fd = fd;
    pr_engine_set_block_hook(eng, pr__journal_hook, pr__journal_release, j);
    pr__journal_sync(eng);
    return 0;
}

void pr_vocab_journal_close(pr_engine *eng)
{
    if (pr_engine_block_hook_data(eng, pr__journal_hook))
        pr_engine_set_block_hook(eng, NULL, NULL, NULL);
}

typedef struct {
    pr__jr_rec *recs;
    size_t n, cap;
    uint32_t col;
    int64_t from;
    int err;
} pr__jr_buf;

static int pr__jr_collect_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__jr_buf *b = opaque;
    if (e->index < 0)
        return 1; /* pending entries follow the assigned ones: done */
    if (e->index < b->from)
        return 0;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        pr__jr_rec *r = realloc(b->recs, nc * sizeof(*r));
        if (!r) {
            b->err = PR_ENOMEM;
            return 1;
        }
        b->recs = r;
        b->cap = nc;
    }
    b->recs[b->n++] =
        (pr__jr_rec){b->col, pr__jr_check(b->col, e->value, e->index), e->value, e->index};
    return 0;
}

static int pr__journal_append2(pr_engine *eng, pr__journal *j, char *errstr, size_t errstr_size);

static int pr__journal_append(pr_engine *eng, pr__journal *j, char *errstr, size_t errstr_size)
{
    if (pr__evicts(eng))
        return pr__journal_append2(eng, j, errstr, errstr_size);
    pr__jr_buf b = {0};
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        int64_t size = (int64_t)pr_engine_vocab_size(eng, c);
        if (size <= j->next[c])
            continue;
        b.col = c;
        b.from = j->next[c];
        pr_engine_vocab_read_from(eng, c, b.from, pr__jr_collect_cb, &b);
        if (b.err)
            break;
        j->next[c] = size;
    }
    int rc = b.err;
    if (!rc && b.n) {
        if (pr__vocab_write_all(j->fd, b.recs, b.n * sizeof(*b.recs)) || fdatasync(j->fd))
            rc = PR_EIO;
    }
    free(b.recs);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "vocab journal: %s: append failed (%s); indices of this block are not "
                         "durable, stop the pipeline",
                         j->path, rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
    return 0;
}

/* Collect a column's current entries. */
typedef struct {
    pr_vocab_entry *e;
    size_t n, cap;
    int err;
} pr__ents;

static int pr__ents_push(pr__ents *v, const pr_vocab_entry *e)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 1024;
        pr_vocab_entry *p = realloc(v->e, nc * sizeof(*p));
        if (!p)
            return v->err = PR_ENOMEM;
        v->e = p;
        v->cap = nc;
    }
    v->e[v->n++] = *e;
    return 0;
}

static int pr__ents_cb(const pr_vocab_entry *e, void *opaque)
{
    return pr__ents_push(opaque, e);
}

static int pr__u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int pr__jr_rec_cmp(const void *a, const void *b)
{
    const pr__jr_rec *x = a, *y = b;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int pr__journal_replay2(pr_engine *eng, const char *path, FILE *f, char *errstr,
                               size_t errstr_size);

int pr_vocab_journal_replay(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                         strerror(errno));
    unsigned char hdr[PR__JR_HDR];
    int rc = 0;
    pr__jr_rec *recs = NULL;
    size_t n = 0, cap = 0;
    pr__ents cur = {0};
    uint64_t *newvals = NULL;
    if (fread(hdr, 1, sizeof(hdr), f) != sizeof(hdr)) {
        /* A crash while creating it: nothing was ever journaled. */
        fclose(f);
        return 0;
    }
    if ((rc = pr__jr_header_check(eng, hdr, path, errstr, errstr_size))) {
        fclose(f);
        return rc;
    }
    if (pr__evicts(eng)) {
        rc = pr__journal_replay2(eng, path, f, errstr, errstr_size);
        fclose(f);
        return rc;
    }
    pr__jr_rec r;
    while (fread(&r, 1, sizeof(r), f) == sizeof(r)) {
        if (!pr__jr_rec_valid(eng, &r)) {
            pr_warn("vocab journal: %s: invalid record %zu, ignoring it and the rest", path, n);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            pr__jr_rec *p = realloc(recs, cap * sizeof(*p));
            if (!p) {
                rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab journal: out of memory");
                goto out;
            }
            recs = p;
        }
        recs[n++] = r;
    }
    /* Records of one column are in index order already; a stable grouping by
     * column keeps that (indices are unique per column). */
    if (n) /* qsort(NULL, 0) is undefined: an empty journal has no records */
        qsort(recs, n, sizeof(*recs), pr__jr_rec_cmp);
    int64_t base = pr__vbase(pr_engine_spec(eng)->profile);
    for (size_t i = 0; i < n;) {
        uint32_t c = recs[i].col;
        size_t j = i;
        while (j < n && recs[j].col == c)
            j++;
        cur.n = 0;
        if ((rc = pr_engine_vocab_read(eng, c, pr__ents_cb, &cur)) || (rc = cur.err))
            goto fail;
        size_t n_assigned = 0;
        while (n_assigned < cur.n && cur.e[n_assigned].index >= 0)
            n_assigned++;
        int64_t next = base + (int64_t)n_assigned;
        size_t n_new = 0;
        free(newvals);
        newvals = malloc((j - i) * sizeof(*newvals));
        if (!newvals) {
            rc = PR_ENOMEM;
            goto fail;
        }
        /* Split: pending entries move behind the new assigned ones. */
        size_t n_pending = cur.n - n_assigned;
        pr_vocab_entry *pending = NULL;
        if (n_pending) {
            pending = malloc(n_pending * sizeof(*pending));
            if (!pending) {
                rc = PR_ENOMEM;
                goto fail;
            }
            memcpy(pending, cur.e + n_assigned, n_pending * sizeof(*pending));
        }
        cur.n = n_assigned;
        for (size_t k = i; k < j; k++) {
            if (recs[k].index < next) {
                size_t at = (size_t)(recs[k].index - base);
                if (recs[k].index < base || cur.e[at].value != recs[k].value) {
                    free(pending);
                    rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                                   "vocab journal: %s: column %s index %" PRId64
                                   " disagrees with the snapshot; wrong snapshot for this journal?",
                                   path, pr_engine_spec(eng)->sparse[c].name, recs[k].index);
                    goto out;
                }
                continue;
            }
            if (recs[k].index > next) {
                free(pending);
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s jumps from index %" PRId64
                               " to %" PRId64 "; the snapshot is older than the journal's start",
                               path, pr_engine_spec(eng)->sparse[c].name, next, recs[k].index);
                goto out;
            }
            pr_vocab_entry e = {recs[k].value, recs[k].index, 0, 0, 0};
            if (pr__ents_push(&cur, &e)) {
                free(pending);
                rc = PR_ENOMEM;
                goto fail;
            }
            newvals[n_new++] = recs[k].value;
            next++;
        }
        qsort(newvals, n_new, sizeof(*newvals), pr__u64_cmp);
        for (size_t k = 0; k < n_pending && !cur.err; k++) {
            if (n_new &&
                bsearch(&pending[k].value, newvals, n_new, sizeof(*newvals), pr__u64_cmp)) {
                /* Now assigned: keep its count on the assigned entry. */
                for (size_t q = n_assigned; q < cur.n; q++)
                    if (cur.e[q].value == pending[k].value)
                        cur.e[q].count = pending[k].count;
                continue;
            }
            pr__ents_push(&cur, &pending[k]);
        }
        free(pending);
        if ((rc = cur.err))
            goto fail;
        if (n_new && (rc = pr_engine_vocab_load_column(eng, c, cur.e, cur.n))) {
            rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s",
                           pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                           pr_strerror(rc));
            goto out;
        }
        pr__journal_sync_col(eng, c);
        i = j;
    }
    goto out;
fail:
    pr_seterr(errstr, errstr_size, rc, "vocab journal: replaying %s: %s", path, pr_strerror(rc));
out:
    free(newvals);
    free(cur.e);
    free(recs);
    fclose(f);
    return rc;
}

/* --- journal version 2 (evicting columns) */

typedef struct {
    pr__jr2_rec *r;
    size_t n, cap;
    uint32_t col;
    int64_t from;
    int err;
} pr__jr2_buf;

static void pr__jr2_push(pr__jr2_buf *b, pr__jr2_rec r)
{
    if (b->err)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        pr__jr2_rec *p = realloc(b->r, nc * sizeof(*p));
        if (!p) {
            b->err = PR_ENOMEM;
            return;
        }
        b->r = p;
        b->cap = nc;
    }
    b->r[b->n++] = r;
}

static int pr__jr2_fresh_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__jr2_buf *b = opaque;
    if (e->index < 0)
        return 1;
    if (e->index >= b->from)
        pr__jr2_push(b, pr__jr2_make(PR__JR2_ASSIGN, b->col, e->value, e->index, e->last_use, 0,
                                     e->last_use_ms));
    return b->err;
}

typedef struct {
    uint32_t row, col;
    size_t pos;
} pr__jr2_note;

static int pr__jr2_note_cmp(const void *a, const void *b)
{
    const pr__jr2_note *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

/* One block: the evicting columns' assignments from the backend's block log
 * (recycled ones numbered as pr__number_notices numbered them: (row, col)
 * order, ending at notice_next - 1), the other columns' new indices, then a
 * COMMIT; one write, one fdatasync, nothing when the block assigned nothing. */
static int pr__journal_append2(pr_engine *eng, pr__journal *j, char *errstr, size_t errstr_size)
{
    pr__jr2_buf b = {0};
    pr__jr2_note *notes = NULL;
    size_t n_notes = 0, notes_cap = 0;
    int rc = 0;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !b.err && !rc; c++) {
        int64_t size = (int64_t)pr_engine_vocab_size(eng, c);
        if (pr_engine_spec(eng)->sparse[c].eviction == PR_EVICT_NONE) {
            if (size > j->next[c]) {
                b.col = c;
                b.from = j->next[c];
                pr_engine_vocab_read_from(eng, c, b.from, pr__jr2_fresh_cb, &b);
            }
            j->next[c] = size;
            continue;
        }
        const pr_vocab_assignment *log;
        size_t n;
        pr_engine_vocab_block_log(eng, c, &log, &n);
        for (size_t i = 0; i < n && !b.err; i++) {
            if (log[i].recycled) {
                if (n_notes == notes_cap) {
                    notes_cap = notes_cap ? notes_cap * 2 : 256;
                    pr__jr2_note *p = realloc(notes, notes_cap * sizeof(*p));
                    if (!p) {
                        rc = PR_ENOMEM;
                        break;
                    }
                    notes = p;
                }
                notes[n_notes++] = (pr__jr2_note){log[i].row, c, b.n};
            }
            pr__jr2_push(&b, pr__jr2_make(PR__JR2_ASSIGN, c, log[i].value, log[i].index,
                                          log[i].tick, 0, log[i].tick_ms));
        }
        j->next[c] = size;
    }
    if (!rc)
        rc = b.err;
    if (!rc && b.n) {
        if (n_notes)
            qsort(notes, n_notes, sizeof(*notes), pr__jr2_note_cmp);
        uint64_t first = pr__notice_next(eng) - n_notes;
        for (size_t k = 0; k < n_notes; k++)
            b.r[notes[k].pos].number = first + k;
        pr__jr2_push(&b, pr__jr2_make(PR__JR2_COMMIT, 0, 0, 0, 0, pr__notice_next(eng), 0));
        rc = b.err;
        /* Checks, then the on-disk layout: version 2 records are packed to
         * their 40 bytes in place (each moves down, never over a later one). */
        size_t rec_size = pr__jr_rec_size(eng);
        for (size_t i = 0; i < b.n && !rc; i++) {
            b.r[i].check = pr__jr2_check(&b.r[i], rec_size);
            if (rec_size != sizeof(*b.r))
                memmove((char *)b.r + i * rec_size, &b.r[i], rec_size);
        }
        if (!rc && (pr__vocab_write_all(j->fd, b.r, b.n * rec_size) || fdatasync(j->fd)))
            rc = PR_EIO;
    }
    free(b.r);
    free(notes);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "vocab journal: %s: append failed (%s); indices of this block are not "
                         "durable, stop the pipeline",
                         j->path, rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
    return 0;
}

static int pr__ent_value_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pr_vocab_entry *)a)->value, y = ((const pr_vocab_entry *)b)->value;
    return x < y ? -1 : x > y;
}

static int pr__recycled_number_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pr_recycled *)a)->number, y = ((const pr_recycled *)b)->number;
    return x < y ? -1 : x > y;
}

/* Replay a version-2 or 3 journal (f is past the header): whole blocks
 * only, each ASSIGN overwriting its index in file order, then one vocab_load
 * per column; the clocks become the newest of the snapshot's and the
 * records'; notices newer than the snapshot's counter are queued for
 * re-announcement. Records already in the snapshot (a crash between a
 * checkpoint's rename and its truncation) rewrite the same final values. */
static int pr__journal_replay2(pr_engine *eng, const char *path, FILE *f, char *errstr,
                               size_t errstr_size)
{
    pr__jr2_rec *recs = NULL;
    size_t n = 0, cap = 0, n_ok = 0;
    pr__ents cur = {0};
    pr_vocab_entry *sorted = NULL;
    pr_recycled *notes = NULL;
    size_t n_notes = 0;
    uint64_t next_number = pr__notice_next(eng);
    int rc = 0;
    size_t rec_size = pr__jr_rec_size(eng);
    pr__jr2_rec r = {0}; /* tick_ms stays 0 in version 2 records */
    while (fread(&r, 1, rec_size, f) == rec_size) {
        if (!pr__jr2_rec_valid(eng, &r)) {
            pr_warn("vocab journal: %s: invalid record %zu, ignoring it and the rest", path, n);
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            pr__jr2_rec *p = realloc(recs, cap * sizeof(*p));
            if (!p) {
                rc = PR_ENOMEM;
                goto fail;
            }
            recs = p;
        }
        recs[n++] = r;
        if (r.kc >> 28 == PR__JR2_COMMIT) {
            n_ok = n;
            if (r.number > next_number)
                next_number = r.number;
        }
    }
    if (n_ok < n)
        pr_warn("vocab journal: %s: %zu records of an unfinished block ignored", path, n - n_ok);
    notes = malloc((n_ok ? n_ok : 1) * sizeof(*notes));
    if (!notes) {
        rc = PR_ENOMEM;
        goto fail;
    }
    int64_t base = pr__vbase(pr_engine_spec(eng)->profile);
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        bool touched = false;
        for (size_t i = 0; i < n_ok && !touched; i++)
            touched = recs[i].kc == ((uint32_t)PR__JR2_ASSIGN << 28 | c);
        if (!touched)
            continue;
        cur.n = 0;
        if ((rc = pr_engine_vocab_read(eng, c, pr__ents_cb, &cur)) || (rc = cur.err))
            goto fail;
        size_t n_assigned = 0;
        while (n_assigned < cur.n && cur.e[n_assigned].index >= 0)
            n_assigned++;
        size_t n_pending = cur.n - n_assigned;
        pr_vocab_entry *pending = NULL;
        if (n_pending) {
            if (!(pending = malloc(n_pending * sizeof(*pending)))) {
                rc = PR_ENOMEM;
                goto fail;
            }
            memcpy(pending, cur.e + n_assigned, n_pending * sizeof(*pending));
        }
        cur.n = n_assigned;
        pr_vocab_clock clock = pr_engine_vocab_clock(eng, c);
        for (size_t i = 0; i < n_ok; i++) {
            const pr__jr2_rec *q = &recs[i];
            if (q->kc != ((uint32_t)PR__JR2_ASSIGN << 28 | c))
                continue;
            if (q->tick > clock.records)
                clock.records = q->tick;
            if (q->tick_ms > clock.event_ms)
                clock.event_ms = q->tick_ms;
            if (q->number >= pr__notice_next(eng))
                notes[n_notes++] = (pr_recycled){c, 0, q->index, q->number};
            pr_vocab_entry e = {q->value, q->index, 1, q->tick, q->tick_ms};
            size_t at = (size_t)(q->index - base);
            if (q->index < base || at > cur.n) {
                free(pending);
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s jumps to index %" PRId64
                               " (the vocabulary has %zu); the snapshot is older than the "
                               "journal's start",
                               path, pr_engine_spec(eng)->sparse[c].name, q->index, cur.n);
                goto out;
            }
            if (at == cur.n) {
                pr__ents_push(&cur, &e);
            } else if (cur.e[at].value == q->value) {
                if (q->tick > cur.e[at].last_use)
                    cur.e[at].last_use = q->tick;
                if (q->tick_ms > cur.e[at].last_use_ms)
                    cur.e[at].last_use_ms = q->tick_ms;
            } else {
                cur.e[at] = e;
            }
        }
        /* Each value at one index; values now assigned are no longer pending. */
        free(sorted);
        sorted = malloc((cur.n ? cur.n : 1) * sizeof(*sorted));
        if (!sorted || cur.err) {
            free(pending);
            rc = PR_ENOMEM;
            goto fail;
        }
        memcpy(sorted, cur.e, cur.n * sizeof(*sorted));
        qsort(sorted, cur.n, sizeof(*sorted), pr__ent_value_cmp);
        for (size_t k = 1; k < cur.n; k++)
            if (sorted[k].value == sorted[k - 1].value) {
                free(pending);
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s: value %" PRIx64
                               " ends up at two indices; wrong snapshot for this journal?",
                               path, pr_engine_spec(eng)->sparse[c].name, sorted[k].value);
                goto out;
            }
        size_t n_assigned_now = cur.n;
        for (size_t k = 0; k < n_pending; k++)
            if (!bsearch(&pending[k], sorted, n_assigned_now, sizeof(*sorted), pr__ent_value_cmp))
                pr__ents_push(&cur, &pending[k]);
        free(pending);
        if ((rc = cur.err))
            goto fail;
        if ((rc = pr_engine_vocab_load_column(eng, c, cur.e, cur.n))) {
            rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s",
                           pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                           pr_strerror(rc));
            goto out;
        }
        if (pr__evicts(eng))
            pr_engine_vocab_set_clock(eng, c, clock);
        pr__journal_sync_col(eng, c);
    }
    /* Re-announce, in number order, what the journal recycled. */
    if (n_notes)
        qsort(notes, n_notes, sizeof(*notes), pr__recycled_number_cmp);
    for (size_t k = 0; k < n_notes; k++)
        if (pr_engine_vocab_notices_queue(eng, &notes[k])) {
            rc = PR_ENOMEM;
            goto fail;
        }
    pr_engine_vocab_notices_set_next(eng, next_number);
    goto out;
fail:
    pr_seterr(errstr, errstr_size, rc, "vocab journal: replaying %s: %s", path, pr_strerror(rc));
out:
    free(sorted);
    free(notes);
    free(cur.e);
    free(recs);
    return rc;
}

int pr_vocab_checkpoint(pr_engine *eng, const char *snapshot_path, const char *journal_path,
                        char *errstr, size_t errstr_size)
{
    int rc = pr_vocab_save(eng, snapshot_path, errstr, errstr_size);
    if (rc)
        return rc;
    if (!journal_path) {
        pr__journal *j = pr_engine_block_hook_data(eng, pr__journal_hook);
        journal_path = j ? j->path : NULL;
    }
    if (!journal_path)
        return 0;
    /* The snapshot is durable: the journal's records are all in it now. */
    int fd = open(journal_path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab checkpoint: %s: %s", journal_path,
                         strerror(errno));
    }
    rc = (ftruncate(fd, PR__JR_HDR) || fdatasync(fd)) ? PR_EIO : 0;
    close(fd);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "vocab checkpoint: truncating %s: %s",
                         journal_path, strerror(errno));
    return 0;
}

static int pr__journal_hook(pr_engine *eng, void *opaque, char *errstr, size_t errstr_size)
{
    return pr__journal_append(eng, opaque, errstr, errstr_size);
}
