/*
 * vocab_journal.c — the local vocabulary journal: every index a block hands
 * out, appended and fdatasync'd from the engine's block hook before
 * pr_engine_process returns (so no index leaves the engine before it is
 * durable), replayed over the last snapshot after a crash, truncated to its
 * header by a checkpoint. One format is written (version 4); the formats of
 * earlier releases (1-3) are read, and converted to version 4 when a journal
 * is opened for appending. Replay semantics: vocab_replay.c.
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

/* --- formats
 *
 * Written from now on (version 4):
 *   header: "PRVJRNL4" u64 fingerprint u32 n_sparse u32 fields       (24 bytes)
 *   record: u32 kind << 28 | col, u32 check, u64 value, i64 index, u64 tick,
 *           u64 number, [i64 tick_ms]                         (40 or 48 bytes)
 * fields: PR__JF_EVICT (some column evicts: replay whole blocks, see
 * vocab_replay.c) and PR__JF_EVENT (some column evicts by ttl_s: records
 * carry tick_ms, the column's event clock at the assignment).
 * kind 0 ASSIGN: `index` of column `col` now holds `value` (a fresh index,
 *   or a recycled one when number > 0: the notice's number), looked up at
 *   record clock `tick` (0 without eviction);
 * kind 1 COMMIT: end of one block's records (number = the next notice
 *   number). A block's records go out in one write and one fdatasync;
 *   replay applies whole blocks only (up to the last COMMIT).
 * check = low 32 bits of FNV-1a over the other 36 (or 44) bytes: a torn or
 * garbage record fails it and ends the valid prefix there.
 *
 * Read as well (earlier releases), the same header with another magic and
 * the last word 0:
 *   1 "PRVJRNL1" no eviction; 24-byte records u32 col, u32 check, u64 value,
 *     i64 index, check over (col, value, index); every record complete;
 *   2 "PRVJRNL2" eviction by lookups; version 4's 40-byte records;
 *   3 "PRVJRNL3" eviction by ttl_s; version 4's 48-byte records.
 */

static const char pr__jr_magics[5][8] = {
    {0},
    {'P', 'R', 'V', 'J', 'R', 'N', 'L', '1'},
    {'P', 'R', 'V', 'J', 'R', 'N', 'L', '2'},
    {'P', 'R', 'V', 'J', 'R', 'N', 'L', '3'},
    {'P', 'R', 'V', 'J', 'R', 'N', 'L', '4'},
};
#define PR__JR_HDR     24
#define PR__JR_VERSION 4
enum { PR__JF_EVICT = 1, PR__JF_EVENT = 2 };

/* A journal file's format: its version, fields and record size. */
typedef struct {
    int version;
    uint32_t fields;
    size_t rec_size;
} pr__jr_fmt;

static pr__jr_fmt pr__jr_fmt_make(int version, uint32_t fields)
{
    size_t size = version == 1 ? 24 : fields & PR__JF_EVENT ? sizeof(pr__jrec) : 40;
    return (pr__jr_fmt){version, fields, size};
}

static uint32_t pr__jr_fields(const pr_engine *eng)
{
    return (pr__evicts(eng) ? PR__JF_EVICT : 0) | (pr__event_ttl(eng) ? PR__JF_EVENT : 0);
}

static pr__jr_fmt pr__jr_fmt_of_engine(const pr_engine *eng)
{
    return pr__jr_fmt_make(PR__JR_VERSION, pr__jr_fields(eng));
}

/* Check of a version 2-4 record of `size` bytes on disk. */
static uint32_t pr__jr_check(const pr__jrec *r, size_t size)
{
    uint64_t h = pr__fnv(PR__FNV_INIT, &r->kc, 4);
    h = pr__fnv(h, &r->value, size - 8);
    return (uint32_t)(h ^ (h >> 32));
}

/* Check of a version 1 record. */
static uint32_t pr__jr1_check(uint32_t col, uint64_t value, int64_t index)
{
    uint64_t h = pr__fnv(PR__FNV_INIT, &col, 4);
    h = pr__fnv(h, &value, 8);
    h = pr__fnv(h, &index, 8);
    return (uint32_t)(h ^ (h >> 32));
}

/* (check is filled in when the block is written: pr__journal_append) */
static pr__jrec pr__jr_make(uint32_t kind, uint32_t col, uint64_t value, int64_t index,
                            uint64_t tick, uint64_t number, int64_t tick_ms)
{
    return (pr__jrec){kind << 28 | col, 0, value, index, tick, number, tick_ms};
}

/* The format of a header, checked against this engine. */
static int pr__jr_header_check(const pr_engine *eng, const unsigned char *hdr, const char *path,
                               pr__jr_fmt *fmt, char *errstr, size_t errstr_size)
{
    static const uint32_t legacy_fields[] = {0, 0, PR__JF_EVICT, PR__JF_EVICT | PR__JF_EVENT};
    static const char *const what[] = {"without eviction", "with eviction by lookups", "",
                                       "with eviction by event time (ttl_s)"};
    uint64_t fp;
    uint32_t ns, fields;
    memcpy(&fp, hdr + 8, 8);
    memcpy(&ns, hdr + 16, 4);
    memcpy(&fields, hdr + 20, 4);
    int v = 1;
    while (v <= PR__JR_VERSION && memcmp(hdr, pr__jr_magics[v], 8))
        v++;
    if (v > PR__JR_VERSION || (v == PR__JR_VERSION && fields > 3))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s is not a piperec journal", path);
    *fmt = pr__jr_fmt_make(v, v < PR__JR_VERSION ? legacy_fields[v] : fields);
    uint32_t want = pr__jr_fields(eng);
    if (fmt->fields != want)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s was written %s, this pipeline evicts %s "
                         "(the indices it holds do not apply)",
                         path, what[fmt->fields],
                         want == 0              ? "nothing"
                         : want == PR__JF_EVICT ? "by lookups"
                                                : "by event time (ttl_s)");
    if (fp != pr_engine_vocab_fingerprint(eng) || ns != pr_engine_spec(eng)->n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s was written for a different pipeline spec "
                         "(fingerprint %016" PRIx64 ", this pipeline %016" PRIx64
                         "): after a change of the features, `piperec vocab migrate --from "
                         "OLD_CONFIG` carries every kept feature's indices over",
                         path, fp, pr_engine_vocab_fingerprint(eng));
    return 0;
}

static void pr__jr_header(const pr_engine *eng, unsigned char *hdr)
{
    memset(hdr, 0, PR__JR_HDR);
    memcpy(hdr, pr__jr_magics[PR__JR_VERSION], 8);
    uint64_t fp = pr_engine_vocab_fingerprint(eng);
    uint32_t ns = pr_engine_spec(eng)->n_sparse, fields = pr__jr_fields(eng);
    memcpy(hdr + 8, &fp, 8);
    memcpy(hdr + 16, &ns, 4);
    memcpy(hdr + 20, &fields, 4);
}

/* What one record on disk means for the valid prefix: the scan stops at a
 * BAD one; replay may end after an END one (every record of version 1, a
 * COMMIT of the others: a whole block). *out: the record in memory. */
enum { PR__JR_BAD, PR__JR_MID, PR__JR_END };

static int pr__jr_decode(const pr_engine *eng, const pr__jr_fmt *fmt, const void *raw,
                         pr__jrec *out)
{
    uint32_t ns = pr_engine_spec(eng)->n_sparse;
    if (fmt->version == 1) {
        struct {
            uint32_t col, check;
            uint64_t value;
            int64_t index;
        } r;
        memcpy(&r, raw, sizeof(r));
        if (r.col >= ns || r.index < 0 || r.check != pr__jr1_check(r.col, r.value, r.index))
            return PR__JR_BAD;
        *out = pr__jr_make(PR__JR_ASSIGN, r.col, r.value, r.index, 0, 0, 0);
        return PR__JR_END;
    }
    memset(out, 0, sizeof(*out)); /* a 40-byte record has no tick_ms */
    memcpy(out, raw, fmt->rec_size);
    if (out->check != pr__jr_check(out, fmt->rec_size))
        return PR__JR_BAD;
    if (PR__JR_KIND(out) == PR__JR_COMMIT)
        return PR__JR_END;
    return PR__JR_KIND(out) == PR__JR_ASSIGN && PR__JR_COL(out) < ns && out->index >= 0
               ? PR__JR_MID
               : PR__JR_BAD;
}

/* --- reading */

/* Records of the valid prefix from `at` (past the header): *recs (grown,
 * caller frees), *n read, *n_ok up to the last END; *end the file offset
 * after that END. PR_EIO on a read error (errno), PR_ENOMEM. */
static int pr__jr_read(const pr_engine *eng, int fd, const pr__jr_fmt *fmt, pr__jrec **recs,
                       size_t *n, size_t *n_ok, off_t *end)
{
    uint64_t buf[3 * 1024]; /* 24 KiB: whole records of any size, 8-byte aligned */
    size_t per = sizeof(buf) / fmt->rec_size, cap = 0;
    off_t at = PR__JR_HDR;
    *n = *n_ok = 0;
    *end = PR__JR_HDR;
    for (;;) {
        ssize_t got = pread(fd, buf, per * fmt->rec_size, at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return PR_EIO;
        size_t k = (size_t)got / fmt->rec_size;
        if (k == 0)
            return 0;
        for (size_t i = 0; i < k; i++) {
            pr__jrec r;
            int kind = pr__jr_decode(eng, fmt, (const char *)buf + i * fmt->rec_size, &r);
            if (kind == PR__JR_BAD)
                return 0;
            if (*n == cap) {
                cap = cap ? cap * 2 : 4096;
                pr__jrec *p = realloc(*recs, cap * sizeof(*p));
                if (!p)
                    return PR_ENOMEM;
                *recs = p;
            }
            (*recs)[(*n)++] = r;
            at += (off_t)fmt->rec_size;
            if (kind == PR__JR_END) {
                *n_ok = *n;
                *end = at;
            }
        }
    }
}

/* --- open */

/* Rewrite a journal of an earlier release as version 4 (its complete
 * records; version 1's, which had none, get one COMMIT after them) through
 * "<path>.tmp", fsync and rename, so a crash leaves one or the other. */
static int pr__jr_convert(const pr_engine *eng, const char *path, const pr__jrec *recs, size_t n,
                          bool add_commit)
{
    pr__jr_fmt fmt = pr__jr_fmt_of_engine(eng);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return PR_EINVAL;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return PR_EIO;
    unsigned char hdr[PR__JR_HDR];
    pr__jr_header(eng, hdr);
    int rc = pr_write_all(fd, hdr, sizeof(hdr));
    for (size_t i = 0; i <= n && !rc; i++) {
        pr__jrec r;
        if (i < n)
            r = recs[i];
        else if (add_commit && n)
            r = pr__jr_make(PR__JR_COMMIT, 0, 0, 0, 0, pr__notice_next(eng), 0);
        else
            break;
        r.check = pr__jr_check(&r, fmt.rec_size);
        rc = pr_write_all(fd, &r, fmt.rec_size);
    }
    if (!rc && fdatasync(fd))
        rc = PR_EIO;
    if (close(fd) && !rc)
        rc = PR_EIO;
    if (!rc && rename(tmp, path))
        rc = PR_EIO;
    if (!rc)
        rc = pr_fsync_dir_of(path);
    if (rc)
        unlink(tmp);
    return rc;
}

/* An existing journal: check its header, keep only its valid prefix (a torn
 * tail, or a whole record of garbage left by a crash, would otherwise hide
 * every record appended after it from the next replay), and convert one of
 * an earlier release. */
static int pr__jr_open_existing(const pr_engine *eng, int fd, const char *path, off_t size,
                                char *errstr, size_t errstr_size)
{
    unsigned char hdr[PR__JR_HDR];
    pr__jr_fmt fmt;
    if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                         strerror(errno));
    int rc = pr__jr_header_check(eng, hdr, path, &fmt, errstr, errstr_size);
    if (rc)
        return rc;
    pr__jrec *recs = NULL;
    size_t n, n_ok;
    off_t whole;
    rc = pr__jr_read(eng, fd, &fmt, &recs, &n, &n_ok, &whole);
    if (!rc && fmt.version != PR__JR_VERSION)
        rc = pr__jr_convert(eng, path, recs, n_ok, fmt.version == 1);
    else if (!rc && whole != size && ftruncate(fd, whole))
        rc = PR_EIO;
    free(recs);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "vocab journal: %s: %s", path,
                         rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
    return 0;
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
    struct stat st;
    int rc = 0, fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 || fstat(fd, &st)) {
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path, strerror(errno));
    } else if (st.st_size < PR__JR_HDR) {
        /* New (or header torn by a crash at creation): start it afresh. */
        unsigned char hdr[PR__JR_HDR];
        pr__jr_header(eng, hdr);
        if (ftruncate(fd, 0) || pr_write_all(fd, hdr, sizeof(hdr)) || fdatasync(fd) ||
            pr_fsync_dir_of(path))
            rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                           strerror(errno));
    } else {
        rc = pr__jr_open_existing(eng, fd, path, st.st_size, errstr, errstr_size);
    }
    if (fd >= 0)
        close(fd);
    /* Appends go through O_APPEND on the file now at `path` (a conversion
     * renamed a new one there). */
    fd = rc ? -1 : open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (!rc && fd < 0)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path, strerror(errno));
    if (rc)
        return rc;
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

/* --- replay */

int pr_vocab_journal_replay(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab journal: %s: %s", path,
                         strerror(errno));
    unsigned char hdr[PR__JR_HDR];
    pr__jr_fmt fmt;
    pr__jrec *recs = NULL;
    size_t n = 0, n_ok = 0;
    off_t end;
    int rc = 0;
    if (pread(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr))
        goto out; /* a crash while creating it: nothing was ever journaled */
    if ((rc = pr__jr_header_check(eng, hdr, path, &fmt, errstr, errstr_size)))
        goto out;
    rc = pr__jr_read(eng, fd, &fmt, &recs, &n, &n_ok, &end);
    if (rc) {
        rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: replaying %s: %s", path,
                       rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
        goto out;
    }
    off_t size = lseek(fd, 0, SEEK_END);
    if (size >= (off_t)(PR__JR_HDR + (n + 1) * fmt.rec_size))
        pr_warn("vocab journal: %s: invalid record %zu, ignoring it and the rest", path, n);
    if (n_ok < n)
        pr_warn("vocab journal: %s: %zu records of an unfinished block ignored", path, n - n_ok);
    rc = fmt.fields & PR__JF_EVICT
             ? pr__replay_blocks(eng, path, recs, n_ok, errstr, errstr_size)
             : pr__replay_append_only(eng, path, recs, n_ok, errstr, errstr_size);
out:
    free(recs);
    close(fd);
    return rc;
}

/* --- append */

typedef struct {
    pr__jrec *r;
    size_t n, cap;
    uint32_t col;
    int64_t from;
    int err;
} pr__jr_buf;

static void pr__jr_push(pr__jr_buf *b, pr__jrec r)
{
    if (b->err)
        return;
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        pr__jrec *p = realloc(b->r, nc * sizeof(*p));
        if (!p) {
            b->err = PR_ENOMEM;
            return;
        }
        b->r = p;
        b->cap = nc;
    }
    b->r[b->n++] = r;
}

static int pr__jr_fresh_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__jr_buf *b = opaque;
    if (e->index < 0)
        return 1;
    if (e->index >= b->from)
        pr__jr_push(b, pr__jr_make(PR__JR_ASSIGN, b->col, e->value, e->index, e->last_use, 0,
                                   e->last_use_ms));
    return b->err;
}

typedef struct {
    uint32_t row, col;
    size_t pos;
} pr__jr_note;

static int pr__jr_note_cmp(const void *a, const void *b)
{
    const pr__jr_note *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

/* One block: the evicting columns' assignments from the backend's block log
 * (recycled ones numbered as pr__number_notices numbered them: (row, col)
 * order, ending at notice_next - 1), the other columns' new indices, then a
 * COMMIT; one write, one fdatasync, nothing when the block assigned nothing. */
static int pr__journal_append(pr_engine *eng, pr__journal *j, char *errstr, size_t errstr_size)
{
    pr__jr_buf b = {0};
    pr__jr_note *notes = NULL;
    size_t n_notes = 0, notes_cap = 0;
    int rc = 0;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !b.err && !rc; c++) {
        int64_t size = (int64_t)pr_engine_vocab_size(eng, c);
        if (pr_engine_spec(eng)->sparse[c].eviction == PR_EVICT_NONE) {
            if (size > j->next[c]) {
                b.col = c;
                b.from = j->next[c];
                pr_engine_vocab_read_from(eng, c, b.from, pr__jr_fresh_cb, &b);
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
                    pr__jr_note *p = realloc(notes, notes_cap * sizeof(*p));
                    if (!p) {
                        rc = PR_ENOMEM;
                        break;
                    }
                    notes = p;
                }
                notes[n_notes++] = (pr__jr_note){log[i].row, c, b.n};
            }
            pr__jr_push(&b, pr__jr_make(PR__JR_ASSIGN, c, log[i].value, log[i].index, log[i].tick,
                                        0, log[i].tick_ms));
        }
        j->next[c] = size;
    }
    if (!rc)
        rc = b.err;
    if (!rc && b.n) {
        if (n_notes)
            qsort(notes, n_notes, sizeof(*notes), pr__jr_note_cmp);
        uint64_t first = pr__notice_next(eng) - n_notes;
        for (size_t k = 0; k < n_notes; k++)
            b.r[notes[k].pos].number = first + k;
        pr__jr_push(&b, pr__jr_make(PR__JR_COMMIT, 0, 0, 0, 0, pr__notice_next(eng), 0));
        rc = b.err;
        /* Checks, then the on-disk layout: version 2 records are packed to
         * their 40 bytes in place (each moves down, never over a later one). */
        size_t rec_size = pr__jr_fmt_of_engine(eng).rec_size;
        for (size_t i = 0; i < b.n && !rc; i++) {
            b.r[i].check = pr__jr_check(&b.r[i], rec_size);
            if (rec_size != sizeof(*b.r))
                memmove((char *)b.r + i * rec_size, &b.r[i], rec_size);
        }
        if (!rc && (pr_write_all(j->fd, b.r, b.n * rec_size) || fdatasync(j->fd)))
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
