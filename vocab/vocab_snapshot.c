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

/* --- binary snapshot
 *
 * Written from now on (version 7 for a declared schema, version 6, without
 * the input fingerprints, for the Criteo layout, so that the release before
 * still reads it), one layout for every pipeline:
 *
 *   "PRVSNAP1" u32 7 u32 n_sparse u64 fingerprint u32 fields
 *   u32 names_len, the columns' names, each ended by a zero byte
 *   [u32 n_sparse, n_sparse x u64 input fingerprint]    (version 7)
 *   u32 tag_len, tag_len bytes of the caller's tag (0 without)
 *   u64 notice_next, u32 n, n x {u32 col, u32 0, i64 index, u64 number}
 *   per column: [u64 clock] [i64 event clock] u64 n, then
 *     n x {u64 value, i64 index, u64 count, [u64 last_use], [i64 last_use_ms]}
 *   u64 FNV-1a of everything before it
 *
 * `fields` says which bracketed parts are there: PR__SF_CLOCK (some column
 * evicts: record clocks, last_use) and PR__SF_EVENT (some column evicts by
 * ttl_s: event clocks, last_use_ms), so a pipeline without eviction keeps
 * its 24-byte entries.
 *
 * The names make a snapshot refuse a config whose vocab features moved:
 * the fingerprint covers each column's settings, not its name, so features
 * swapped, renamed or replaced by one of the same settings would otherwise
 * load each other's indices. The input fingerprints
 * (pr_feature_vocab_input_fp) make it refuse a declared feature whose
 * paths, default or operators before vocab changed: the same name, but its
 * values get other keys (a modulus 1000 for 1000000: item 1000 would take
 * item 0's index).
 *
 * Read as well, and rewritten as version 6 or 7 by the next snapshot, the formats
 * of earlier releases, each the same layout with parts left out:
 *   1  no fields word, no names, no tag, no notices, fields 0
 *   2  no fields word, no names, a tag, no notices, fields 0
 *   3  no fields word, no names, a tag, notices, fields CLOCK
 *   4  no fields word, no names, a tag, notices, fields CLOCK | EVENT
 *   5  no names, no input fingerprints
 *   6  no input fingerprints
 */

static const char pr__snap_magic[8] = {'P', 'R', 'V', 'S', 'N', 'A', 'P', '1'};
#define PR__SNAP_VERSION 7
#define PR__SNAP_NAMES   6 /* the first version with the column names */
#define PR__SNAP_INPUTS  7 /* the first version with the input fingerprints */
enum { PR__SF_CLOCK = 1, PR__SF_EVENT = 2 };

/* What a snapshot of a given version holds. */
typedef struct {
    uint32_t version;
    bool has_tag;
    bool has_notices;
    uint32_t fields;
} pr__snap_layout;

/* The column names of a snapshot (version >= PR__SNAP_NAMES), each ended by
 * a zero byte. */
typedef struct {
    bool has;
    uint32_t len;
    char buf[PR_MAX_SPARSE * PR_NAME_MAX];
    bool has_inputs; /* version >= PR__SNAP_INPUTS */
    uint64_t input[PR_MAX_SPARSE];
} pr__snap_names;

static pr__snap_layout pr__snap_layout_of(uint32_t version, uint32_t fields)
{
    static const pr__snap_layout legacy[] = {
        {0, false, false, 0},
        {1, false, false, 0},
        {2, true, false, 0},
        {3, true, true, PR__SF_CLOCK},
        {4, true, true, PR__SF_CLOCK | PR__SF_EVENT},
    };
    if (version < 5)
        return legacy[version];
    return (pr__snap_layout){version, true, true, fields};
}

/* The fields an engine's snapshot needs. */
static uint32_t pr__snap_fields(const pr_engine *eng)
{
    return (pr__evicts(eng) ? PR__SF_CLOCK : 0) | (pr__event_ttl(eng) ? PR__SF_EVENT : 0);
}

static size_t pr__snap_entry_size(uint32_t fields)
{
    return 24 + (fields & PR__SF_CLOCK ? 8 : 0) + (fields & PR__SF_EVENT ? 8 : 0);
}

typedef struct {
    FILE *f;
    uint64_t h;
    int err;
    uint32_t fields; /* entry layout */
} pr__writer;

static void pr__w(pr__writer *w, const void *p, size_t n)
{
    if (w->err || n == 0)
        return; /* (p may be NULL for an empty section: fwrite must not see it) */
    w->h = pr__fnv(w->h, p, n);
    if (fwrite(p, 1, n, w->f) != n)
        w->err = PR_EIO;
}

static int pr__count_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    (*(uint64_t *)opaque)++;
    return 0;
}

static int pr__snap_entry_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__writer *w = opaque;
    uint64_t rec[5] = {e->value, (uint64_t)e->index, e->count};
    size_t n = 3;
    if (w->fields & PR__SF_CLOCK)
        rec[n++] = e->last_use;
    if (w->fields & PR__SF_EVENT)
        rec[n++] = (uint64_t)e->last_use_ms;
    pr__w(w, rec, n * 8);
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

/* Everything between the magic and the checksum. */
static int pr__snap_write_body(const pr_engine *eng, pr__writer *w, const void *tag,
                               uint32_t tag_len)
{
    /* Version 7 only where it says more: a pipeline without input
     * fingerprints (the Criteo layout) keeps writing version 6, which the
     * release before this one reads (a rollback keeps its state dir). */
    bool inputs = false;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++)
        inputs |= pr_engine_spec(eng)->sparse[c].input_fp != 0;
    uint32_t hdr[2] = {inputs ? PR__SNAP_VERSION : PR__SNAP_NAMES, pr_engine_spec(eng)->n_sparse};
    uint64_t fp = pr_engine_vocab_fingerprint(eng);
    pr__w(w, hdr, sizeof(hdr));
    pr__w(w, &fp, 8);
    pr__w(w, &w->fields, 4);
    uint32_t names_len = 0;
    for (uint32_t c = 0; c < hdr[1]; c++)
        names_len += (uint32_t)strlen(pr_engine_spec(eng)->sparse[c].name) + 1;
    pr__w(w, &names_len, 4);
    for (uint32_t c = 0; c < hdr[1]; c++)
        pr__w(w, pr_engine_spec(eng)->sparse[c].name,
              strlen(pr_engine_spec(eng)->sparse[c].name) + 1);
    if (inputs) {
        pr__w(w, &hdr[1], 4);
        for (uint32_t c = 0; c < hdr[1]; c++)
            pr__w(w, &pr_engine_spec(eng)->sparse[c].input_fp, 8);
    }
    pr__w(w, &tag_len, 4);
    pr__w(w, tag, tag_len);
    /* To announce after a restart: the replayed ones not sent yet, and
     * those sent but not known delivered (they may sit in a batch the
     * crash loses, while the snapshot already holds their effect). */
    uint32_t n = pr_engine_vocab_notices_held(eng);
    uint64_t next = pr__notice_next(eng);
    pr__w(w, &next, 8);
    pr__w(w, &n, 4);
    pr_engine_vocab_notices_each(eng, pr__snap_notice_cb, w);
    int rc = 0;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !rc && !w->err; c++) {
        pr_vocab_clock clock = pr_engine_vocab_clock(eng, c);
        if (w->fields & PR__SF_CLOCK)
            pr__w(w, &clock.records, 8);
        if (w->fields & PR__SF_EVENT)
            pr__w(w, &clock.event_ms, 8);
        uint64_t cnt = 0;
        rc = pr_engine_vocab_read(eng, c, pr__count_cb, &cnt);
        pr__w(w, &cnt, 8);
        if (!rc)
            rc = pr_engine_vocab_read(eng, c, pr__snap_entry_cb, w);
    }
    return rc ? rc : w->err;
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
    pr__writer w = {f, PR__FNV_INIT, 0, pr__snap_fields(eng)};
    pr__w(&w, pr__snap_magic, sizeof(pr__snap_magic));
    int rc = pr__snap_write_body(eng, &w, tag, tag_len);
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
        rc = pr_fsync_dir_of(path);
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

/* Magic, version, spec and tag; *lay the file's layout. Leaves f at the
 * body (the notices, or the first column) and *h over what it read. */
static int pr__snap_read_header(pr_engine *eng, FILE *f, const char *path, pr__snap_layout *lay,
                                pr__snap_names *nm, void *tag, uint32_t tag_cap, uint32_t *tag_len,
                                uint64_t *h, char *errstr, size_t errstr_size)
{
    char magic[8];
    uint32_t hdr[2], fields = 0;
    uint64_t fp;
    if (pr__read_exact(f, magic, 8, h) || memcmp(magic, pr__snap_magic, 8) ||
        pr__read_exact(f, hdr, sizeof(hdr), h) || hdr[0] < 1)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab load: %s is not a piperec snapshot",
                         path);
    if (hdr[0] > PR__SNAP_VERSION)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab load: %s was written by a newer piperec (snapshot version %u; "
                         "this one reads up to %u): run that release, or move the vocabulary "
                         "with its `piperec vocab export` and this one's `vocab import`",
                         path, hdr[0], PR__SNAP_VERSION);
    if (pr__read_exact(f, &fp, 8, h) || (hdr[0] >= 5 && pr__read_exact(f, &fields, 4, h)))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab load: %s is not a piperec snapshot",
                         path);
    if (fp != pr_engine_vocab_fingerprint(eng) || hdr[1] != pr_engine_spec(eng)->n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab load: %s was written for a different pipeline spec (fingerprint "
                         "%016" PRIx64 ", this pipeline %016" PRIx64
                         "): sparse ops, profile, modulus, min_count, capacity or eviction "
                         "settings (eviction, ttl_records, ttl_s, decay_records) changed, or the "
                         "features with a vocabulary (added, removed, renamed); the indices it "
                         "holds do not apply as they are: `piperec vocab migrate --from "
                         "OLD_CONFIG` carries every kept feature's indices over",
                         path, fp, pr_engine_vocab_fingerprint(eng));
    *lay = pr__snap_layout_of(hdr[0], fields);
    if (lay->fields != pr__snap_fields(eng)) /* the fingerprint already differs; be explicit */
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab load: %s: snapshot version %u does not match this pipeline's "
                         "eviction settings",
                         path, hdr[0]);
    if (hdr[0] >= PR__SNAP_NAMES) { /* compared once the checksum is known good */
        if (pr__read_exact(f, &nm->len, 4, h) || nm->len > sizeof(nm->buf) ||
            pr__read_exact(f, nm->buf, nm->len, h))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab load: %s is truncated or corrupt (names)", path);
        nm->has = true;
    }
    if (hdr[0] >= PR__SNAP_INPUTS) {
        uint32_t n = 0;
        if (pr__read_exact(f, &n, 4, h) || n != hdr[1] ||
            pr__read_exact(f, nm->input, (size_t)n * 8, h))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab load: %s is truncated or corrupt (input fingerprints)", path);
        nm->has_inputs = true;
    }
    if (!lay->has_tag)
        return 0;
    uint32_t n = 0;
    unsigned char tb[PR_SNAPSHOT_TAG_MAX];
    if (pr__read_exact(f, &n, 4, h) || n > PR_SNAPSHOT_TAG_MAX || pr__read_exact(f, tb, n, h))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab load: %s: bad tag", path);
    if (n > tag_cap)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab load: %s carries a %u-byte tag this reader does not expect "
                         "(a snapshot of a shared vocabulary: vocab_log)",
                         path, n);
    if (n)
        memcpy(tag, tb, n);
    *tag_len = n;
    return 0;
}

/* The snapshot's column names against this engine's: a feature moved,
 * renamed or replaced by one of the same settings has the same
 * fingerprint, and would load another feature's indices. */
static int pr__snap_check_names(const pr_engine *eng, const char *path, const pr__snap_names *nm,
                                char *errstr, size_t errstr_size)
{
    const char *p = nm->buf, *end = nm->buf + nm->len;
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        const char *z = p < end ? memchr(p, 0, (size_t)(end - p)) : NULL;
        const char *want = pr_engine_spec(eng)->sparse[c].name;
        if (!z)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab load: %s is truncated or corrupt (names)", path);
        if (strcmp(p, want))
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab load: %s: column %u is %.64s in the snapshot, %s in this "
                             "config (vocab features reordered, renamed or replaced): its indices "
                             "belong to another feature; `piperec vocab migrate --from "
                             "OLD_CONFIG` carries every kept feature's indices over by name",
                             path, c, p, want);
        uint64_t mine = pr_engine_spec(eng)->sparse[c].input_fp;
        if (nm->has_inputs && nm->input[c] && mine && nm->input[c] != mine)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "vocab load: %s: feature %s gives its values other keys than when "
                             "the snapshot was written: its paths, default or operators before "
                             "vocab changed (`piperec explain` shows them), so its indices would "
                             "name other values; `piperec vocab migrate --from OLD_CONFIG` keeps "
                             "every other feature's indices and starts this one empty",
                             path, want);
        p = z + 1;
    }
    return 0;
}

/* Check the trailing FNV-1a over the whole file (h holds the header's
 * share), then leave f back at the body. PR_EIO when short, PR_EINVAL when
 * it does not match. */
static int pr__snap_verify(FILE *f, uint64_t h)
{
    long body = ftell(f);
    uint64_t sum = 0;
    if (body < 0 || fseek(f, -8, SEEK_END))
        return PR_EIO;
    long end = ftell(f);
    if (end < body || pr__read_exact(f, &sum, 8, NULL) || fseek(f, body, SEEK_SET))
        return PR_EIO;
    unsigned char buf[1 << 16];
    for (long left = end - body; left > 0;) {
        size_t n = left > (long)sizeof(buf) ? sizeof(buf) : (size_t)left;
        if (pr__read_exact(f, buf, n, &h))
            return PR_EIO;
        left -= (long)n;
    }
    if (h != sum)
        return PR_EINVAL;
    return fseek(f, body, SEEK_SET) ? PR_EIO : 0;
}

static int pr__snap_read_notices(pr_engine *eng, FILE *f)
{
    uint64_t nn;
    uint32_t np;
    if (pr__read_exact(f, &nn, 8, NULL) || pr__read_exact(f, &np, 4, NULL) || nn == 0)
        return PR_EIO;
    pr_engine_vocab_notices_set_next(eng, nn);
    pr_engine_vocab_notices_clear(eng);
    for (uint32_t i = 0; i < np; i++) {
        uint32_t cz[2];
        pr_recycled r = {0};
        if (pr__read_exact(f, cz, 8, NULL) || pr__read_exact(f, &r.index, 8, NULL) ||
            pr__read_exact(f, &r.number, 8, NULL))
            return PR_EIO;
        r.col = cz[0];
        if (pr_engine_vocab_notices_queue(eng, &r))
            return PR_ENOMEM;
    }
    return 0;
}

/* One column: clocks, entries, into the engine. *ents is scratch, grown. */
static int pr__snap_read_column(pr_engine *eng, FILE *f, uint32_t c, uint32_t fields,
                                pr_vocab_entry **ents, const char *path, char *errstr,
                                size_t errstr_size)
{
    uint64_t n;
    pr_vocab_clock clock = {0, 0};
    if ((fields & PR__SF_CLOCK && pr__read_exact(f, &clock.records, 8, NULL)) ||
        (fields & PR__SF_EVENT && pr__read_exact(f, &clock.event_ms, 8, NULL)) ||
        pr__read_exact(f, &n, 8, NULL) || n > (uint64_t)SIZE_MAX / sizeof(**ents))
        return PR_EIO;
    free(*ents);
    *ents = malloc((n ? n : 1) * sizeof(**ents));
    if (!*ents)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab load: out of memory");
    size_t rec_size = pr__snap_entry_size(fields);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t rec[5] = {0};
        if (pr__read_exact(f, rec, rec_size, NULL))
            return PR_EIO;
        pr_vocab_entry *e = &(*ents)[i];
        *e = (pr_vocab_entry){rec[0], (int64_t)rec[1], rec[2], 0, 0};
        size_t k = 3;
        if (fields & PR__SF_CLOCK)
            e->last_use = rec[k++];
        if (fields & PR__SF_EVENT)
            e->last_use_ms = (int64_t)rec[k++];
    }
    int rc = pr__has_vocab(eng) ? pr_engine_vocab_load_column(eng, c, *ents, n) : 0;
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "vocab load: %s: column %s: entries rejected by backend %s (%s)", path,
                         pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                         pr_strerror(rc));
    if (fields & PR__SF_CLOCK)
        pr_engine_vocab_set_clock(eng, c, clock);
    pr__journal_sync_col(eng, c);
    return 0;
}

int pr_vocab_load_tagged(pr_engine *eng, const char *path, void *tag, uint32_t tag_cap,
                         uint32_t *tag_len, char *errstr, size_t errstr_size)
{
    *tag_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab load: %s: %s", path, strerror(errno));
    pr_vocab_entry *ents = NULL;
    uint64_t h = PR__FNV_INIT;
    pr__snap_layout lay = {0};
    pr__snap_names *nm = calloc(1, sizeof(*nm));
    int rc = nm ? pr__snap_read_header(eng, f, path, &lay, nm, tag, tag_cap, tag_len, &h, errstr,
                                       errstr_size)
                : pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab load: out of memory");
    if (rc)
        goto out;
    /* Verify the checksum before touching any state. */
    if ((rc = pr__snap_verify(f, h)))
        goto bad;
    if (nm->has && (rc = pr__snap_check_names(eng, path, nm, errstr, errstr_size)))
        goto out;
    if (lay.has_notices && (rc = pr__snap_read_notices(eng, f))) {
        if (rc == PR_ENOMEM) {
            rc = pr_seterr(errstr, errstr_size, rc, "vocab load: out of memory");
            goto out;
        }
        goto bad;
    }
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !rc; c++) {
        char why[512] = "";
        rc = pr__snap_read_column(eng, f, c, lay.fields, &ents, path, why, sizeof(why));
        if (rc && why[0]) {
            pr_seterr(errstr, errstr_size, rc, "%s", why);
            goto out;
        }
    }
    if (!rc)
        goto out;
bad:
    pr_seterr(errstr, errstr_size, rc, "vocab load: %s is truncated or corrupt (%s)", path,
              pr_strerror(rc));
out:
    free(ents);
    free(nm);
    fclose(f);
    return rc;
}
