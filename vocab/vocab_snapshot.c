/*
 * vocab_snapshot.c — the binary vocabulary snapshot: every table, the
 * eviction statistics and clocks, the notices not known delivered, and an
 * optional caller tag (the shared log's position), in one atomic file.
 *
 * Written to "<path>.tmp", fsync'd, renamed over <path> and the directory
 * fsync'd, so a crash leaves either the old or the new snapshot, never a torn
 * one. Files are little-endian (the only byte order piperec builds for) and
 * end with an FNV-1a checksum, verified before any table changes on load.
 * Tables go through the engine's primitives (pr_engine_vocab_read /
 * pr_engine_vocab_load_column), so a snapshot of one backend loads into
 * another.
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

int pr__vocab_fsync_dir_of(const char *path)
{
    char *dup = strdup(path);
    if (!dup)
        return PR_ENOMEM;
    int fd = open(dirname(dup), O_RDONLY | O_DIRECTORY);
    free(dup);
    if (fd < 0)
        return PR_EIO;
    int rc = fsync(fd) ? PR_EIO : 0;
    close(fd);
    return rc;
}

/* --- binary snapshot
 *
 *   "PRVSNAP1" u32 version (1 or 2) u32 n_sparse u64 fingerprint
 *   version 2 only: u32 tag_len, tag_len bytes of the caller's tag
 *   per column: u64 n, then n x {u64 value, i64 index, u64 count}
 *   u64 FNV-1a of everything before it
 *
 * Version 3, written (only) when some column evicts (pr_vocab_eviction):
 *   "PRVSNAP1" u32 3 u32 n_sparse u64 fingerprint u32 tag_len, tag
 *   u64 notice_next, u32 n_pend, n_pend x {u32 col, u32 0, i64 index, u64 number}
 *   per column: u64 clock, u64 n, then n x {u64 value, i64 index, u64 count, u64 last_use}
 *   u64 FNV-1a of everything before it
 *
 * Version 4, written (only) when some column evicts by event time (ttl_s):
 * version 3 with the event clocks added (0 in columns that do not use them)
 *   per column: u64 clock, i64 event clock, u64 n, then
 *   n x {u64 value, i64 index, u64 count, u64 last_use, i64 last_use_ms}
 * so files of pipelines without ttl_s stay byte-for-byte what they were.
 */

static const char pr__snap_magic[8] = {'P', 'R', 'V', 'S', 'N', 'A', 'P', '1'};

typedef struct {
    FILE *f;
    uint64_t h;
    int err;
} pr__writer;

static void pr__w(pr__writer *w, const void *p, size_t n)
{
    if (w->err || n == 0)
        return; /* (p may be NULL for an empty section: fwrite must not see it) */
    w->h = pr__fnv(w->h, p, n);
    if (fwrite(p, 1, n, w->f) != n)
        w->err = PR_EIO;
}

typedef struct {
    pr__writer *w;
    uint64_t n;
} pr__count_ctx;

static int pr__count_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    ((pr__count_ctx *)opaque)->n++;
    return 0;
}

static int pr__snap_entry_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__writer *w = opaque;
    uint64_t rec[3] = {e->value, (uint64_t)e->index, e->count};
    pr__w(w, rec, sizeof(rec));
    return w->err;
}

static int pr__snap_entry4_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__writer *w = opaque;
    uint64_t rec[4] = {e->value, (uint64_t)e->index, e->count, e->last_use};
    pr__w(w, rec, sizeof(rec));
    return w->err;
}

static int pr__snap_entry5_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__writer *w = opaque;
    uint64_t rec[5] = {e->value, (uint64_t)e->index, e->count, e->last_use,
                       (uint64_t)e->last_use_ms};
    pr__w(w, rec, sizeof(rec));
    return w->err;
}

static int pr__snap_notice_cb(const pr_recycled *r, void *opaque)
{
    pr__writer *w = opaque;
    uint32_t cz[2] = {r->col, 0};
    pr__w(w, cz, 8);
    pr__w(w, &r->index, 8);
    pr__w(w, &r->number, 8);
    return w->err;
}

int pr_vocab_save(const pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    return pr_vocab_save_tagged(eng, path, NULL, 0, errstr, errstr_size);
}

int pr_vocab_save_tagged(const pr_engine *eng, const char *path, const void *tag, uint32_t tag_len,
                         char *errstr, size_t errstr_size)
{
    if (tag_len > PR_SNAPSHOT_TAG_MAX)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab save: tag of %u bytes (max %d)",
                         tag_len, PR_SNAPSHOT_TAG_MAX);
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab save: path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab save: %s: %s", tmp, strerror(errno));
    pr__writer w = {f, PR__FNV_INIT, 0};
    uint32_t hdr[2] = {pr__event_ttl(eng) ? 4
                       : pr__evicts(eng)  ? 3
                       : tag_len          ? 2
                                          : 1,
                       pr_engine_spec(eng)->n_sparse};
    pr__w(&w, pr__snap_magic, sizeof(pr__snap_magic));
    pr__w(&w, hdr, sizeof(hdr));
    uint64_t fp = pr_engine_vocab_fingerprint(eng);
    pr__w(&w, &fp, 8);
    if (tag_len || pr__evicts(eng)) {
        pr__w(&w, &tag_len, 4);
        pr__w(&w, tag, tag_len);
    }
    if (pr__evicts(eng)) {
        /* To announce after a restart: the replayed ones not sent yet, and
         * those sent but not known delivered (they may sit in a batch the
         * crash loses, while the snapshot already holds their effect). */
        uint32_t n = pr_engine_vocab_notices_held(eng);
        uint64_t next = pr__notice_next(eng);
        pr__w(&w, &next, 8);
        pr__w(&w, &n, 4);
        pr_engine_vocab_notices_each(eng, pr__snap_notice_cb, &w);
    }
    int rc = 0;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !rc && !w.err; c++) {
        pr__count_ctx cc = {&w, 0};
        if (pr__evicts(eng)) {
            pr_vocab_clock clock = pr_engine_vocab_clock(eng, c);
            pr__w(&w, &clock.records, 8);
            if (pr__event_ttl(eng))
                pr__w(&w, &clock.event_ms, 8);
        }
        if (pr__has_vocab(eng))
            rc = pr_engine_vocab_read(eng, c, pr__count_cb, &cc);
        pr__w(&w, &cc.n, 8);
        pr_vocab_cb entry_cb = pr__event_ttl(eng) ? pr__snap_entry5_cb
                               : pr__evicts(eng)  ? pr__snap_entry4_cb
                                                  : pr__snap_entry_cb;
        if (!rc && pr__has_vocab(eng))
            rc = pr_engine_vocab_read(eng, c, entry_cb, &w);
    }
    uint64_t sum = w.h;
    pr__w(&w, &sum, 8);
    if (!rc)
        rc = w.err;
    if (!rc && (fflush(f) || fsync(fileno(f))))
        rc = PR_EIO;
    if (fclose(f) && !rc)
        rc = PR_EIO;
    if (!rc && rename(tmp, path))
        rc = PR_EIO;
    if (!rc)
        rc = pr__vocab_fsync_dir_of(path);
    if (rc) {
        int e = errno;
        unlink(tmp);
        return pr_seterr(errstr, errstr_size, rc, "vocab save: %s: %s", path,
                         rc == PR_EIO ? strerror(e) : pr_strerror(rc));
    }
    return 0;
}

static int pr__read_exact(FILE *f, void *p, size_t n, uint64_t *h)
{
    if (fread(p, 1, n, f) != n)
        return PR_EIO;
    if (h)
        *h = pr__fnv(*h, p, n);
    return 0;
}

int pr_vocab_load(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    uint32_t len;
    return pr_vocab_load_tagged(eng, path, NULL, 0, &len, errstr, errstr_size);
}

int pr_vocab_load_tagged(pr_engine *eng, const char *path, void *tag, uint32_t tag_cap,
                         uint32_t *tag_len, char *errstr, size_t errstr_size)
{
    *tag_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab load: %s: %s", path, strerror(errno));
    int rc = 0;
    pr_vocab_entry *ents = NULL;
    uint64_t h = PR__FNV_INIT;
    char magic[8];
    uint32_t hdr[2];
    uint64_t fp;
    if (pr__read_exact(f, magic, 8, &h) || memcmp(magic, pr__snap_magic, 8) ||
        pr__read_exact(f, hdr, sizeof(hdr), &h) || hdr[0] < 1 || hdr[0] > 4 ||
        pr__read_exact(f, &fp, 8, &h)) {
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab load: %s is not a piperec snapshot",
                       path);
        goto out;
    }
    if (fp != pr_engine_vocab_fingerprint(eng) || hdr[1] != pr_engine_spec(eng)->n_sparse) {
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "vocab load: %s was written for a different pipeline spec (fingerprint "
                       "%016" PRIx64 ", this pipeline %016" PRIx64
                       "): sparse ops, profile, modulus, min_count, capacity or eviction "
                       "settings (eviction, ttl_records, ttl_s, decay_records) changed; "
                       "the indices it holds do not apply",
                       path, fp, pr_engine_vocab_fingerprint(eng));
        goto out;
    }
    if ((hdr[0] >= 3) != pr__evicts(eng) || (hdr[0] == 4) != pr__event_ttl(eng)) {
        /* the fingerprint already differs; be explicit */
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "vocab load: %s: snapshot version %u does not match this pipeline's "
                       "eviction settings",
                       path, hdr[0]);
        goto out;
    }
    if (hdr[0] >= 2) {
        uint32_t n = 0;
        unsigned char tb[PR_SNAPSHOT_TAG_MAX];
        if (pr__read_exact(f, &n, 4, &h) || n > PR_SNAPSHOT_TAG_MAX ||
            pr__read_exact(f, tb, n, &h)) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab load: %s: bad tag", path);
            goto out;
        }
        if (n > tag_cap) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "vocab load: %s carries a %u-byte tag this reader does not expect "
                           "(a snapshot of a shared vocabulary: vocab_log)",
                           path, n);
            goto out;
        }
        if (n)
            memcpy(tag, tb, n);
        *tag_len = n;
    }
    /* Pass 1: verify the checksum before touching any state. */
    long body = ftell(f);
    unsigned char buf[1 << 16];
    uint64_t sum;
    {
        if (fseek(f, -8, SEEK_END) || (sum = 0, 0)) {
            rc = PR_EIO;
            goto bad;
        }
        long end = ftell(f);
        if (end < body || pr__read_exact(f, &sum, 8, NULL) || fseek(f, body, SEEK_SET)) {
            rc = PR_EIO;
            goto bad;
        }
        long left = end - body;
        while (left > 0) {
            size_t n = left > (long)sizeof(buf) ? sizeof(buf) : (size_t)left;
            if (pr__read_exact(f, buf, n, &h)) {
                rc = PR_EIO;
                goto bad;
            }
            left -= (long)n;
        }
        if (h != sum) {
            rc = PR_EINVAL;
            goto bad;
        }
        if (fseek(f, body, SEEK_SET)) {
            rc = PR_EIO;
            goto bad;
        }
    }
    /* Pass 2: load column by column. */
    if (hdr[0] >= 3) {
        uint64_t nn;
        uint32_t np;
        if (pr__read_exact(f, &nn, 8, NULL) || pr__read_exact(f, &np, 4, NULL) || nn == 0) {
            rc = PR_EIO;
            goto bad;
        }
        pr_engine_vocab_notices_set_next(eng, nn);
        pr_engine_vocab_notices_clear(eng);
        for (uint32_t i = 0; i < np; i++) {
            uint32_t cz[2];
            pr_recycled r = {0};
            if (pr__read_exact(f, cz, 8, NULL) || pr__read_exact(f, &r.index, 8, NULL) ||
                pr__read_exact(f, &r.number, 8, NULL)) {
                rc = PR_EIO;
                goto bad;
            }
            r.col = cz[0];
            if (pr_engine_vocab_notices_queue(eng, &r)) {
                rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab load: out of memory");
                goto out;
            }
        }
    }
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        uint64_t n;
        pr_vocab_clock clock = {0, 0};
        if ((hdr[0] >= 3 && pr__read_exact(f, &clock.records, 8, NULL)) ||
            (hdr[0] == 4 && pr__read_exact(f, &clock.event_ms, 8, NULL)) ||
            pr__read_exact(f, &n, 8, NULL) || n > (uint64_t)SIZE_MAX / sizeof(*ents)) {
            rc = PR_EIO;
            goto bad;
        }
        free(ents);
        ents = malloc((n ? n : 1) * sizeof(*ents));
        if (!ents) {
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab load: out of memory");
            goto out;
        }
        size_t rec_size = hdr[0] == 4 ? 40 : hdr[0] == 3 ? 32 : 24;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t rec[5] = {0};
            if (pr__read_exact(f, rec, rec_size, NULL)) {
                rc = PR_EIO;
                goto bad;
            }
            ents[i].value = rec[0];
            ents[i].index = (int64_t)rec[1];
            ents[i].count = rec[2];
            ents[i].last_use = rec[3];
            ents[i].last_use_ms = (int64_t)rec[4];
        }
        if (pr__has_vocab(eng) && (rc = pr_engine_vocab_load_column(eng, c, ents, n))) {
            rc = pr_seterr(errstr, errstr_size, rc,
                           "vocab load: %s: column %s: entries rejected by backend %s (%s)", path,
                           pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                           pr_strerror(rc));
            goto out;
        }
        if (pr__evicts(eng))
            pr_engine_vocab_set_clock(eng, c, clock);
        pr__journal_sync_col(eng, c);
    }
    goto out;
bad:
    pr_seterr(errstr, errstr_size, rc, "vocab load: %s is truncated or corrupt (%s)", path,
              pr_strerror(rc));
out:
    free(ents);
    fclose(f);
    return rc;
}
