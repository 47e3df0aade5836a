/*
 * engine.c — the engine core: name tables, spec defaults and validation,
 * block/output allocation, the pr_engine object (which delegates the work to
 * a backend through pr_backend_ops), statistics, and every vocabulary file
 * format: text export and import, binary snapshot, and the append-only journal.
 *
 * File formats live here, not in the backends, so that a snapshot written by
 * one backend loads into another: backends only expose vocab_read/vocab_load
 * in index order. Snapshots are written to "<path>.tmp", fsync'd, renamed over
 * <path> and the directory fsync'd, so a crash leaves either the old or the
 * new snapshot, never a torn one. Binary files are little-endian (the only
 * byte order piperec builds for) and end with an FNV-1a checksum.
 */
#define _GNU_SOURCE
#include "pr_engine.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_int.h"
#include "pr_log.h"

/* ---------------------------------------------------------------- name tables */

static const char *const pr__op_names[PR_OP__COUNT] = {
    [PR_OP_NEG2ZERO] = "neg2zero", [PR_OP_LOG1P] = "log1p", [PR_OP_HEX2INT] = "hex2int",
    [PR_OP_MODULUS] = "modulus",   [PR_OP_VOCAB] = "vocab",
};

static const char *const pr__profile_names[] = {
    [PR_VOCAB_DLRM] = "dlrm",
    [PR_VOCAB_DEFAULT] = "default",
};
#define PR__N_PROFILES (sizeof(pr__profile_names) / sizeof(pr__profile_names[0]))

const char *const pr_vocab_eviction_names[] = {
    [PR_EVICT_NONE] = "none", [PR_EVICT_LRU] = "lru",   [PR_EVICT_LFU] = "lfu",
    [PR_EVICT_TTL] = "ttl",   [PR_EVICT__COUNT] = NULL,
};

const char *pr_op_name(pr_op op)
{
    if ((unsigned)op >= PR_OP__COUNT)
        return "?";
    return pr__op_names[op];
}

int pr_op_from_name(const char *name)
{
    for (int i = 0; name && i < PR_OP__COUNT; i++)
        if (strcmp(name, pr__op_names[i]) == 0)
            return i;
    return -1;
}

const char *pr_vocab_profile_name(pr_vocab_profile p)
{
    if ((unsigned)p >= PR__N_PROFILES)
        return "?";
    return pr__profile_names[p];
}

int pr_vocab_profile_from_name(const char *name)
{
    for (size_t i = 0; name && i < PR__N_PROFILES; i++)
        if (strcmp(name, pr__profile_names[i]) == 0)
            return (int)i;
    return -1;
}

/* ---------------------------------------------------------------- spec */

void pr_pipeline_spec_default(pr_pipeline_spec *spec)
{
    memset(spec, 0, sizeof(*spec));
    snprintf(spec->name, sizeof(spec->name), "criteo");
    spec->has_label = true;
    spec->n_dense = 13;
    spec->n_sparse = 26;
    spec->n_dense_ops = 2;
    spec->dense_ops[0] = PR_OP_NEG2ZERO;
    spec->dense_ops[1] = PR_OP_LOG1P;
    spec->n_sparse_ops = 3;
    spec->sparse_ops[0] = PR_OP_HEX2INT;
    spec->sparse_ops[1] = PR_OP_MODULUS;
    spec->sparse_ops[2] = PR_OP_VOCAB;
    spec->profile = PR_VOCAB_DLRM;
    spec->count_mode = PR_COUNT_STREAMING;
    for (int c = 0; c < PR_MAX_SPARSE; c++) {
        snprintf(spec->sparse[c].name, PR_NAME_MAX, "C%d", c + 1);
        spec->sparse[c].modulus = 524288;
        spec->sparse[c].min_count = 1;
        spec->sparse[c].capacity = 0;
    }
}

static bool pr__ops_has(const uint8_t *ops, unsigned n, pr_op op)
{
    for (unsigned i = 0; i < n; i++)
        if (ops[i] == op)
            return true;
    return false;
}

bool pr_spec_has_op(const pr_pipeline_spec *spec, pr_op op)
{
    return pr__ops_has(spec->dense_ops,
                       spec->n_dense_ops < PR_MAX_OPS ? spec->n_dense_ops : PR_MAX_OPS, op) ||
           pr__ops_has(spec->sparse_ops,
                       spec->n_sparse_ops < PR_MAX_OPS ? spec->n_sparse_ops : PR_MAX_OPS, op);
}

uint64_t pr__spec_col_capacity(const pr_pipeline_spec *spec, uint32_t col)
{
    const pr_sparse_col_spec *c = &spec->sparse[col];
    if (c->capacity)
        return c->capacity;
    if (pr_spec_has_op(spec, PR_OP_MODULUS) && c->modulus) {
        uint64_t extra = (uint64_t)pr__profile_base(spec->profile);
        return c->modulus > UINT64_MAX - extra ? UINT64_MAX : c->modulus + extra;
    }
    return INT32_MAX;
}

uint8_t pr__spec_sparse_width(const pr_pipeline_spec *spec)
{
    bool vocab = pr_spec_has_op(spec, PR_OP_VOCAB);
    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        if (vocab) {
            if (pr__spec_col_capacity(spec, c) - 1 > (uint64_t)INT32_MAX)
                return 8;
        } else if (!mod || spec->sparse[c].modulus - 1 > (uint64_t)INT32_MAX) {
            return 8;
        }
    }
    return 4;
}

/* Check that `ops` is a subsequence of `order` (no repeats, in that order). */
static int pr__check_ops(const char *what, const uint8_t *ops, unsigned n, const pr_op *order,
                         unsigned n_order, char *errstr, size_t errstr_size)
{
    if (n > PR_MAX_OPS)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: %u operators, at most %d", what, n,
                         PR_MAX_OPS);
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; k < i; k++)
            if (ops[i] == ops[k])
                return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: operator '%s' appears twice",
                                 what, pr_op_name((pr_op)ops[i]));
    int last = -1;
    for (unsigned i = 0; i < n; i++) {
        int pos = -1;
        for (unsigned k = 0; k < n_order; k++)
            if (ops[i] == order[k])
                pos = (int)k;
        if (pos < 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s: operator '%s' does not apply here", what,
                             pr_op_name((pr_op)ops[i]));
        if (pos == last)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: operator '%s' appears twice",
                             what, pr_op_name((pr_op)ops[i]));
        if (pos < last)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: %s before %s", what,
                             pr_op_name(order[last]), pr_op_name((pr_op)ops[i]));
        last = pos;
    }
    return 0;
}

int pr_pipeline_spec_validate(const pr_pipeline_spec *spec, char *errstr, size_t errstr_size)
{
    static const pr_op dense_order[] = {PR_OP_NEG2ZERO, PR_OP_LOG1P};
    static const pr_op sparse_order[] = {PR_OP_HEX2INT, PR_OP_MODULUS, PR_OP_VOCAB};
    int rc;

    if (!spec)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "spec: NULL");
    if (spec->n_dense > PR_MAX_DENSE)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "n_dense: %u, at most %d", spec->n_dense,
                         PR_MAX_DENSE);
    if (spec->n_sparse > PR_MAX_SPARSE)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "n_sparse: %u, at most %d", spec->n_sparse,
                         PR_MAX_SPARSE);
    if ((rc = pr__check_ops("dense_ops", spec->dense_ops, spec->n_dense_ops, dense_order, 2, errstr,
                            errstr_size)))
        return rc;
    if ((rc = pr__check_ops("sparse_ops", spec->sparse_ops, spec->n_sparse_ops, sparse_order, 3,
                            errstr, errstr_size)))
        return rc;
    if ((unsigned)spec->profile >= PR__N_PROFILES)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "profile: %d is not dlrm or default",
                         (int)spec->profile);
    if ((unsigned)spec->count_mode > PR_COUNT_TWO_PASS)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "count_mode: %d is not streaming or two_pass", (int)spec->count_mode);

    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);
    bool vocab = pr_spec_has_op(spec, PR_OP_VOCAB);
    uint64_t base = (uint64_t)pr__profile_base(spec->profile);
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        const pr_sparse_col_spec *s = &spec->sparse[c];
        size_t nl = strnlen(s->name, PR_NAME_MAX);
        if (nl == 0 || nl == PR_NAME_MAX)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "sparse[%u].name: must be 1..%d characters", c, PR_NAME_MAX - 1);
        if (strchr(s->name, '/') || strcmp(s->name, ".") == 0 || strcmp(s->name, "..") == 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "sparse.%s.name: must not contain '/' (it names the vocabulary file)",
                             s->name);
        for (uint32_t k = 0; k < c; k++)
            if (strncmp(spec->sparse[k].name, s->name, PR_NAME_MAX) == 0)
                return pr_seterr(errstr, errstr_size, PR_EINVAL, "sparse.%s.name: used twice",
                                 s->name);
        if (mod && s->modulus == 0)
            return pr_seterr(
                errstr, errstr_size, PR_EINVAL,
                "sparse.%s.modulus: must be > 0 when the pipeline has the modulus operator",
                s->name);
        if (s->min_count < 1)
            return pr_seterr(errstr, errstr_size, PR_EINVAL, "sparse.%s.min_count: must be >= 1",
                             s->name);
        if (s->min_count > 1 && !vocab)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "sparse.%s.min_count: %u needs the vocab operator", s->name,
                             s->min_count);
        if (s->min_count > 1 && spec->profile != PR_VOCAB_DEFAULT)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "sparse.%s.min_count: %u needs profile default (dlrm has no "
                             "out-of-vocabulary index); use min_count 1 or profile default",
                             s->name, s->min_count);
        const char *en =
            (unsigned)s->eviction < PR_EVICT__COUNT ? pr_vocab_eviction_names[s->eviction] : "?";
        if (s->ttl_s && s->eviction != PR_EVICT_TTL)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "sparse.%s.ttl_s: %" PRIu64 " needs eviction ttl (the column's "
                             "eviction is %s); remove it or set it to 0 for this column",
                             s->name, s->ttl_s, en);
        if (s->eviction != PR_EVICT_NONE) {
            if ((unsigned)s->eviction >= PR_EVICT__COUNT)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.eviction: %d is not none, lru, lfu or ttl", s->name,
                                 (int)s->eviction);
            if (!vocab)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.eviction: %s needs the vocab operator", s->name, en);
            if (!s->capacity)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.eviction: %s needs an explicit capacity (the bound "
                                 "the table is kept under)",
                                 s->name, en);
            if (s->capacity - base > (uint64_t)INT32_MAX)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.capacity: at most %" PRIu64 " with eviction %s",
                                 s->name, (uint64_t)INT32_MAX + base, en);
            if (spec->count_mode != PR_COUNT_STREAMING)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.eviction: %s needs count_mode streaming (two_pass "
                                 "fixes the vocabulary before mapping)",
                                 s->name, en);
            if (s->eviction == PR_EVICT_TTL && s->ttl_records && s->ttl_s)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.ttl_s: eviction ttl takes ttl_records (lookups) or "
                                 "ttl_s (seconds of event time), not both (ttl_records %" PRIu64
                                 ", ttl_s %" PRIu64 "); set the other to 0 for this column",
                                 s->name, s->ttl_records, s->ttl_s);
            if (s->eviction == PR_EVICT_TTL && !s->ttl_records && !s->ttl_s)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.ttl_records: eviction ttl needs ttl_records > 0 "
                                 "(lookups of the column) or ttl_s > 0 (seconds of event time)",
                                 s->name);
            if (s->ttl_s > (uint64_t)INT64_MAX / 1000)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.ttl_s: at most %" PRIu64 " seconds", s->name,
                                 (uint64_t)INT64_MAX / 1000);
            if (s->eviction == PR_EVICT_TTL && spec->profile != PR_VOCAB_DEFAULT)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.eviction: ttl needs profile default (a full table "
                                 "of values younger than the ttl maps new values to OOV, "
                                 "which dlrm does not have); use lru or lfu under dlrm",
                                 s->name);
        }
        if (vocab && s->capacity) {
            if (s->capacity < base + 1)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.capacity: %" PRIu64 " leaves no room for an index "
                                 "(at least %" PRIu64 " under profile %s)",
                                 s->name, s->capacity, base + 1,
                                 pr_vocab_profile_name(spec->profile));
            if (s->capacity > (uint64_t)INT64_MAX)
                return pr_seterr(errstr, errstr_size, PR_EINVAL,
                                 "sparse.%s.capacity: at most %" PRId64, s->name, INT64_MAX);
        }
    }
    return 0;
}

/* FNV-1a, 64 bits: checksums and fingerprints (not security). */
static uint64_t pr__fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define PR__FNV_INIT 0xcbf29ce484222325ULL

uint64_t pr__spec_fingerprint(const pr_pipeline_spec *spec)
{
    uint64_t h = PR__FNV_INIT;
    uint32_t v[4] = {spec->n_sparse, spec->n_sparse_ops, (uint32_t)spec->profile,
                     (uint32_t)spec->count_mode};
    h = pr__fnv(h, v, sizeof(v));
    h = pr__fnv(h, spec->sparse_ops, spec->n_sparse_ops);
    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        uint64_t w[3] = {mod ? spec->sparse[c].modulus : 0, spec->sparse[c].min_count,
                         pr__spec_col_capacity(spec, c)};
        h = pr__fnv(h, w, sizeof(w));
        /* Only when set, so fingerprints without eviction stay what they were. */
        const pr_sparse_col_spec *cs = &spec->sparse[c];
        if (cs->eviction != PR_EVICT_NONE) {
            uint64_t e[3] = {(uint64_t)cs->eviction,
                             cs->eviction == PR_EVICT_TTL ? cs->ttl_records : 0,
                             cs->eviction == PR_EVICT_LFU ? cs->decay_records : 0};
            h = pr__fnv(h, e, sizeof(e));
            /* Likewise ttl_s: fingerprints of ttl_records columns are unchanged. */
            if (cs->eviction == PR_EVICT_TTL && cs->ttl_s) {
                uint64_t t[2] = {0x74746c5f73 /* "ttl_s" */, cs->ttl_s};
                h = pr__fnv(h, t, sizeof(t));
            }
        }
    }
    return h;
}

bool pr_spec_has_eviction(const pr_pipeline_spec *spec)
{
    if (!pr_spec_has_op(spec, PR_OP_VOCAB))
        return false;
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].eviction != PR_EVICT_NONE)
            return true;
    return false;
}

bool pr__spec_has_event_ttl(const pr_pipeline_spec *spec)
{
    if (!pr_spec_has_op(spec, PR_OP_VOCAB))
        return false;
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].eviction == PR_EVICT_TTL && spec->sparse[c].ttl_s)
            return true;
    return false;
}

/* ---------------------------------------------------------------- aligned memory */

void *pr__zalloc_aligned(size_t size)
{
    /* calloc gives fresh zero pages for large sizes; keep the original pointer
     * just before the aligned one. */
    unsigned char *raw = calloc(1, size + 64 + sizeof(void *));
    if (!raw)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
    ((void **)a)[-1] = raw;
    return (void *)a;
}

void pr__free_aligned(void *p)
{
    if (p)
        free(((void **)p)[-1]);
}

/* ---------------------------------------------------------------- blocks */

static pr_block *pr__block_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                               bool with_meta, bool jagged)
{
    if (cap == 0 || cap > UINT32_MAX - 63 || scap > UINT32_MAX - 63)
        return NULL;
    cap = (cap + 63) & ~63u;
    scap = scap < cap ? cap : (scap + 63) & ~63u;
    pr_block *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = cap;
    b->scap = scap;
    b->n_dense = n_dense;
    b->n_sparse = n_sparse;
    size_t bw = pr_bitmap_words(cap), sbw = pr_bitmap_words(scap);
    b->labels = pr__zalloc_aligned((size_t)cap * sizeof(int32_t));
    b->dense = pr__zalloc_aligned((size_t)n_dense * cap * sizeof(double) + 8);
    b->dense_missing = pr__zalloc_aligned((size_t)n_dense * bw * 8 + 8);
    b->sparse_enc = pr__zalloc_aligned((size_t)n_sparse + 8);
    b->sparse_hex = pr__zalloc_aligned((size_t)n_sparse * scap * PR_HEX_SLOT + 8);
    b->sparse_u64 = pr__zalloc_aligned((size_t)n_sparse * scap * sizeof(uint64_t) + 8);
    b->sparse_missing = pr__zalloc_aligned((size_t)n_sparse * sbw * 8 + 8);
    bool ok = b->labels && b->dense && b->dense_missing && b->sparse_enc && b->sparse_hex &&
              b->sparse_u64 && b->sparse_missing;
    if (jagged) {
        b->col_rows = calloc((size_t)n_sparse + 1, sizeof(uint32_t));
        ok = ok && b->col_rows;
    }
    if (with_meta) {
        b->partition = pr__zalloc_aligned((size_t)cap * sizeof(int32_t));
        b->offset = pr__zalloc_aligned((size_t)cap * sizeof(int64_t));
        b->event_time_ms = pr__zalloc_aligned((size_t)cap * sizeof(int64_t));
        ok = ok && b->partition && b->offset && b->event_time_ms;
    }
    if (!ok) {
        pr_block_free(b);
        return NULL;
    }
    return b;
}

pr_block *pr_block_new_jagged(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                              bool with_meta)
{
    return pr__block_new(n_dense, n_sparse, cap, scap, with_meta, true);
}

pr_block *pr_block_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, bool with_meta)
{
    return pr__block_new(n_dense, n_sparse, cap, 0, with_meta, false);
}

void pr_block_free(pr_block *b)
{
    if (!b)
        return;
    pr__free_aligned(b->labels);
    pr__free_aligned(b->dense);
    pr__free_aligned(b->dense_missing);
    pr__free_aligned(b->sparse_enc);
    pr__free_aligned(b->sparse_hex);
    pr__free_aligned(b->sparse_u64);
    pr__free_aligned(b->sparse_missing);
    pr__free_aligned(b->partition);
    pr__free_aligned(b->offset);
    pr__free_aligned(b->event_time_ms);
    free(b->col_rows);
    pr_fside_free(b->side);
    free(b);
}

void pr_block_reset(pr_block *b)
{
    size_t bw = pr_bitmap_words(b->cap);
    b->rows = 0;
    memset(b->dense_missing, 0, (size_t)b->n_dense * bw * 8);
    memset(b->sparse_missing, 0, (size_t)b->n_sparse * pr_bitmap_words(b->scap) * 8);
    /* A declared schema's block (side tables) holds keys, never hex. */
    memset(b->sparse_enc, b->side ? PR_SPARSE_U64 : PR_SPARSE_HEX, b->n_sparse);
    if (b->col_rows)
        memset(b->col_rows, 0, (size_t)b->n_sparse * sizeof(uint32_t));
    if (b->side)
        pr_fside_reset(b->side);
}

bool pr_block_fits(const pr_block *b, const uint32_t *need)
{
    if (b->rows >= b->cap)
        return false;
    for (uint32_t c = 0; c < b->n_sparse; c++)
        if ((uint64_t)pr_block_col_rows(b, c) + (need ? need[c] : 1) > b->scap)
            return false;
    return true;
}

void pr_block_put_hex(pr_block *b, uint32_t col, uint32_t row, const char *s, size_t len)
{
    char *slot = pr_block_hex(b, col, row);
    uint64_t *miss = b->sparse_missing + (size_t)col * pr_bitmap_words(b->scap);
    if (len == 0) {
        memset(slot, '0', PR_HEX_SLOT);
        pr_bit_set(miss, row);
        return;
    }
    pr_bit_clear(miss, row);
    if (len > PR_HEX_SLOT) {
        /* Not representable: make Hex2Int reject the row rather than
         * silently truncate the value. */
        memset(slot, 'x', PR_HEX_SLOT);
        return;
    }
    memset(slot, '0', PR_HEX_SLOT - len);
    memcpy(slot + PR_HEX_SLOT - len, s, len);
}

static pr_out *pr__out_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                           uint8_t sparse_width, bool jagged)
{
    if (cap == 0 || cap > UINT32_MAX - 63 || scap > UINT32_MAX - 63 ||
        (sparse_width != 4 && sparse_width != 8))
        return NULL;
    cap = (cap + 63) & ~63u;
    scap = scap < cap ? cap : (scap + 63) & ~63u;
    pr_out *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->cap = cap;
    o->scap = scap;
    o->n_dense = n_dense;
    o->n_sparse = n_sparse;
    o->sparse_width = sparse_width;
    o->labels = pr__zalloc_aligned((size_t)cap * sizeof(int32_t));
    o->dense = pr__zalloc_aligned((size_t)n_dense * cap * sizeof(float) + 8);
    o->sparse = pr__zalloc_aligned((size_t)n_sparse * scap * sparse_width + 8);
    o->rejected = pr__zalloc_aligned(pr_bitmap_words(cap) * 8);
    o->reject_reason = pr__zalloc_aligned(cap);
    o->reject_col = pr__zalloc_aligned((size_t)cap * sizeof(uint16_t));
    if (jagged)
        o->col_rows = calloc((size_t)n_sparse + 1, sizeof(uint32_t));
    if (!o->labels || !o->dense || !o->sparse || !o->rejected || !o->reject_reason ||
        !o->reject_col || (jagged && !o->col_rows)) {
        pr_out_free(o);
        return NULL;
    }
    return o;
}

pr_out *pr_out_new_jagged(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint32_t scap,
                          uint8_t sparse_width)
{
    return pr__out_new(n_dense, n_sparse, cap, scap, sparse_width, true);
}

pr_out *pr_out_new(uint16_t n_dense, uint16_t n_sparse, uint32_t cap, uint8_t sparse_width)
{
    return pr__out_new(n_dense, n_sparse, cap, 0, sparse_width, false);
}

void pr_out_free(pr_out *o)
{
    if (!o)
        return;
    pr__free_aligned(o->labels);
    pr__free_aligned(o->dense);
    pr__free_aligned(o->sparse);
    pr__free_aligned(o->rejected);
    pr__free_aligned(o->reject_reason);
    pr__free_aligned(o->reject_col);
    free(o->recycled);
    free(o->col_rows);
    pr_fside_free(o->side);
    free(o);
}

int pr__out_recycled_push(pr_out *o, const pr_recycled *r)
{
    if (o->n_recycled == o->recycled_cap) {
        uint32_t nc = o->recycled_cap ? o->recycled_cap * 2 : 64;
        pr_recycled *p = realloc(o->recycled, (size_t)nc * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        o->recycled = p;
        o->recycled_cap = nc;
    }
    o->recycled[o->n_recycled++] = *r;
    return 0;
}

/* ---------------------------------------------------------------- engine */

struct pr_engine {
    pr_pipeline_spec spec;
    const pr_backend_ops *ops;
    pr_backend *be;
    uint8_t sparse_width;
    bool has_vocab;
    bool has_hex2int;
    pr_engine_stats stats;
    uint64_t fingerprint;
    /* journal */
    int jr_fd;
    char *jr_path;
    int64_t jr_next[PR_MAX_SPARSE]; /* first index not yet journaled, per column */
    /* bounded vocabularies (pr_vocab_eviction) */
    bool evict;                    /* some column evicts: journal v2, snapshot v3 */
    bool shared;                   /* pr_engine_vocab_set_shared(true) */
    bool event_ttl;                /* some column evicts by ttl_s: journal v3, snapshot v4 */
    uint64_t notice_next;          /* number of the next recycled-index notice (from 1) */
    pr_recycled *pend;             /* notices replayed from the journal, re-announced by */
    uint32_t n_pend, pend_cap;     /* the next pr_engine_process (row 0) */
    pr_recycled *recent;           /* notices handed out and not yet known delivered */
    uint32_t n_recent, recent_cap; /* (pr_engine_vocab_notices_delivered): snapshots keep
                                    * them, so a restart announces them again */
};

static int pr__backend_new(pr_engine *eng, const pr_backend_ops *ops, const pr_engine_opts *opts,
                           char *errstr, size_t errstr_size)
{
    pr_backend *be = NULL;
    int rc = ops->new_(&eng->spec, opts, &be, errstr, errstr_size);
    if (rc)
        return rc;
    eng->ops = ops;
    eng->be = be;
    return 0;
}

pr_engine *pr_engine_new(const pr_pipeline_spec *spec, const pr_engine_opts *opts, char *errstr,
                         size_t errstr_size)
{
    pr_engine_opts defopts = {0};
    if (!opts)
        opts = &defopts;
    if (pr_pipeline_spec_validate(spec, errstr, errstr_size))
        return NULL;
    pr_engine *eng = calloc(1, sizeof(*eng));
    if (!eng) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "engine: out of memory");
        return NULL;
    }
    eng->spec = *spec;
    eng->sparse_width = pr__spec_sparse_width(spec);
    eng->has_vocab = pr_spec_has_op(spec, PR_OP_VOCAB);
    eng->has_hex2int = pr_spec_has_op(spec, PR_OP_HEX2INT);
    eng->fingerprint = pr__spec_fingerprint(spec);
    eng->jr_fd = -1;
    eng->evict = pr_spec_has_eviction(spec);
    eng->event_ttl = pr__spec_has_event_ttl(spec);
    eng->notice_next = 1;

    /* Zero fields mean the documented defaults (pr_engine_cfgmap). */
    pr_engine_opts o = *opts;
    if (o.backend && !o.backend[0])
        o.backend = NULL;
    pr_cfgmap_default_zero(&pr_engine_cfgmap, &o);
    opts = &o;
    const char *name = o.backend;
    int rc;
    if (strcmp(name, "auto") == 0) {
        /* auto: the device when there is one, else the cpu backend. */
        const pr_backend_ops *xrt = pr__backend_lookup("xrt");
        char why[256] = "not built with XRT";
        rc = xrt ? pr__backend_new(eng, xrt, opts, why, sizeof(why)) : PR_ENOTSUP;
        if (rc) {
            pr_warn("engine: backend auto: xrt unavailable (%s); using cpu", why);
            rc = pr__backend_new(eng, pr__backend_lookup("cpu"), opts, errstr, errstr_size);
        }
    } else {
        const pr_backend_ops *ops = pr__backend_lookup(name);
        if (!ops) {
            char names[256] = "";
            for (const char *const *n = pr_engine_backends(); *n; n++)
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s",
                         names[0] ? ", " : "", *n);
            pr_seterr(errstr, errstr_size, PR_EINVAL,
                      "engine.backend: unknown backend '%s' (built-in: %s, auto)", name, names);
            free(eng);
            return NULL;
        }
        rc = pr__backend_new(eng, ops, opts, errstr, errstr_size);
    }
    if (rc) {
        free(eng);
        return NULL;
    }
    if (eng->evict && (!eng->ops->vocab_block_log || !eng->ops->vocab_clock)) {
        pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                  "engine: backend %s has no bounded vocabularies (transform eviction lru, lfu "
                  "or ttl); use engine.backend cpu, or eviction none",
                  eng->ops->name);
        pr_engine_free(eng);
        return NULL;
    }
    return eng;
}

void pr_engine_free(pr_engine *eng)
{
    if (!eng)
        return;
    pr_engine_vocab_journal_close(eng);
    if (eng->ops)
        eng->ops->free_(eng->be);
    free(eng->pend);
    free(eng->recent);
    free(eng);
}

const pr_pipeline_spec *pr_engine_spec(const pr_engine *eng)
{
    return &eng->spec;
}
const char *pr_engine_backend_name(const pr_engine *eng)
{
    return eng->ops->name;
}
uint8_t pr_engine_sparse_width(const pr_engine *eng)
{
    return eng->sparse_width;
}

/* A jagged block (col_rows, declared schemas): a backend that takes them,
 * uint64 keys only (Hex2Int rejects would be per element, not per row), and
 * element counts within the block's stride. */
static int pr__check_jagged(const pr_engine *eng, const pr_block *in, char *errstr,
                            size_t errstr_size)
{
    if (!eng->ops->jagged)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: backend %s cannot run jagged sparse columns (a declared "
                         "schema's list features and vocab keys: its kernel reads one value per "
                         "row and column); use engine.backend cpu",
                         eng->ops->name);
    if (in->scap < in->cap)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: block element capacity %u below its row capacity %u", in->scap,
                         in->cap);
    for (uint32_t c = 0; c < in->n_sparse; c++) {
        const char *nm = eng->spec.sparse[c].name;
        if (in->sparse_enc[c] != PR_SPARSE_U64)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: jagged column %s must hold uint64 keys (PR_SPARSE_U64)", nm);
        if (in->col_rows[c] > in->scap)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: column %s holds %u elements, past its capacity %u", nm,
                             in->col_rows[c], in->scap);
    }
    return 0;
}

static int pr__check_block(const pr_engine *eng, const pr_block *in, char *errstr,
                           size_t errstr_size)
{
    if (!in)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "engine: NULL block");
    if (in->n_dense != eng->spec.n_dense || in->n_sparse != eng->spec.n_sparse)
        return pr_seterr(
            errstr, errstr_size, PR_EINVAL,
            "engine: block has %u dense/%u sparse columns, pipeline '%s' expects %u/%u",
            in->n_dense, in->n_sparse, eng->spec.name, eng->spec.n_dense, eng->spec.n_sparse);
    if (in->rows > in->cap)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "engine: block rows %u > cap %u", in->rows,
                         in->cap);
    for (uint32_t c = 0; c < in->n_sparse; c++) {
        if (in->sparse_enc[c] > PR_SPARSE_U64)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: column %s has unknown encoding %u", eng->spec.sparse[c].name,
                             in->sparse_enc[c]);
        if (in->sparse_enc[c] == PR_SPARSE_HEX && !eng->has_hex2int)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: column %s holds hex strings but pipeline '%s' has no hex2int "
                             "operator; add hex2int to sparse_ops",
                             eng->spec.sparse[c].name, eng->spec.name);
    }
    return in->col_rows ? pr__check_jagged(eng, in, errstr, errstr_size) : 0;
}

static int pr__journal_append(pr_engine *eng, char *errstr, size_t errstr_size);

/* Eviction by ttl_s reads every row's event time: a block without them
 * (offline TSV has none, `piperec process` leaves them 0) is refused before
 * anything changes, rather than never expiring a value. */
static int pr__check_event_times(const pr_engine *eng, const pr_block *in, char *errstr,
                                 size_t errstr_size)
{
    uint32_t c = 0;
    while (c < eng->spec.n_sparse &&
           !(eng->spec.sparse[c].eviction == PR_EVICT_TTL && eng->spec.sparse[c].ttl_s))
        c++;
    const char *nm = c < eng->spec.n_sparse ? eng->spec.sparse[c].name : "?";
    /* The clock reads the event time of element i as that of row i: only a
     * column with one element per row can evict by time. */
    for (uint32_t k = c; in->col_rows && k < eng->spec.n_sparse; k++)
        if (eng->spec.sparse[k].eviction == PR_EVICT_TTL && eng->spec.sparse[k].ttl_s &&
            in->col_rows[k] != in->rows)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: column %s evicts by event time (ttl_s) but holds %u "
                             "elements for %u rows (a list feature has no per-element time); "
                             "use ttl_records, or eviction lru or lfu",
                             eng->spec.sparse[k].name, in->col_rows[k], in->rows);
    for (uint32_t r = 0; r < in->rows; r++)
        if (!in->event_time_ms || in->event_time_ms[r] <= 0)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "engine: column %s evicts by event time (ttl_s) but block row %u "
                             "has no event time (%s); offline files (piperec process) carry "
                             "none: use ttl_records there, or eviction lru or lfu",
                             nm, r, in->event_time_ms ? "event_time_ms <= 0" : "no row metadata");
    return 0;
}

/* Append a notice to a growable list (the engine's pending and recent lists). */
static int pr__notice_push(pr_recycled **v, uint32_t *n, uint32_t *cap, const pr_recycled *r)
{
    if (*n == *cap) {
        uint32_t nc = *cap ? *cap * 2 : 64;
        pr_recycled *p = realloc(*v, (size_t)nc * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        *v = p;
        *cap = nc;
    }
    (*v)[(*n)++] = *r;
    return 0;
}

static int pr__recent_push(pr_engine *eng, const pr_recycled *r)
{
    return pr__notice_push(&eng->recent, &eng->n_recent, &eng->recent_cap, r);
}

/* Number the block's notices (the backend lists them in (row, col) order)
 * and put the re-announcements of a journal replay first, at row 0. */
static int pr__number_notices(pr_engine *eng, pr_out *out)
{
    for (uint32_t i = 0; i < out->n_recycled; i++) {
        out->recycled[i].number = eng->notice_next++;
        if (pr__recent_push(eng, &out->recycled[i]))
            return PR_ENOMEM;
    }
    for (uint32_t i = 0; i < eng->n_pend; i++) /* announced again: not delivered yet */
        if (pr__recent_push(eng, &eng->pend[i]))
            return PR_ENOMEM;
    if (!eng->n_pend)
        return 0;
    uint32_t n = out->n_recycled;
    for (uint32_t i = 0; i < eng->n_pend; i++) /* grow by n_pend */
        if (pr__out_recycled_push(out, &eng->pend[i]))
            return PR_ENOMEM;
    memmove(out->recycled + eng->n_pend, out->recycled, (size_t)n * sizeof(pr_recycled));
    for (uint32_t i = 0; i < eng->n_pend; i++) {
        out->recycled[i] = eng->pend[i];
        out->recycled[i].row = 0;
    }
    eng->n_pend = 0;
    return 0;
}

static int pr__pend_push(pr_engine *eng, const pr_recycled *r)
{
    return pr__notice_push(&eng->pend, &eng->n_pend, &eng->pend_cap, r);
}

uint32_t pr_engine_vocab_notices_pending(const pr_engine *eng)
{
    return eng->n_pend;
}

void pr_engine_vocab_notices_delivered(pr_engine *eng, uint64_t floor)
{
    uint32_t w = 0;
    for (uint32_t i = 0; i < eng->n_recent; i++)
        if (eng->recent[i].number >= floor)
            eng->recent[w++] = eng->recent[i];
    eng->n_recent = w;
}

uint64_t pr_engine_vocab_recycled_total(const pr_engine *eng)
{
    return eng->notice_next - 1;
}

int pr_engine_process(pr_engine *eng, const pr_block *in, pr_out *out, char *errstr,
                      size_t errstr_size)
{
    int rc = pr__check_block(eng, in, errstr, errstr_size);
    if (!rc && eng->event_ttl)
        rc = pr__check_event_times(eng, in, errstr, errstr_size);
    if (rc)
        return rc;
    if (!out || out->cap < in->rows || out->n_dense != in->n_dense ||
        out->n_sparse != in->n_sparse || out->sparse_width != eng->sparse_width ||
        (in->col_rows && (!out->col_rows || out->scap < in->scap)))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: output tensors do not fit (need cap >= %u, %u/%u columns, "
                         "sparse width %u%s; allocate with pr_out_new and pr_engine_sparse_width)",
                         in->rows, in->n_dense, in->n_sparse, eng->sparse_width,
                         in->col_rows ? ", jagged columns of the block's scap" : "");
    out->rows = in->rows;
    if (in->col_rows)
        memcpy(out->col_rows, in->col_rows, (size_t)in->n_sparse * sizeof(uint32_t));
    out->n_rejected = 0;
    out->n_recycled = 0;
    rc = eng->ops->process(eng->be, in, out, &eng->stats, errstr, errstr_size);
    if (eng->evict) {
        int nrc = pr__number_notices(eng, out);
        if (nrc && !rc)
            rc = pr_seterr(errstr, errstr_size, nrc, "engine: out of memory for notices");
    }
    eng->stats.rows_in += in->rows;
    eng->stats.rows_rejected += out->n_rejected;
    eng->stats.blocks++;
    if (eng->jr_fd >= 0) {
        /* Indices handed out before a failure are journaled too: they may
         * already sit in the caller's output. */
        char jerr[256];
        int jrc = pr__journal_append(eng, jerr, sizeof(jerr));
        if (jrc && !rc)
            rc = pr_seterr(errstr, errstr_size, jrc, "%s", jerr);
    }
    return rc;
}

/* ---------------------------------------------------------------- shared vocabulary */

static int pr__shared_supported(const pr_engine *eng, char *errstr, size_t errstr_size)
{
    if (!eng->has_vocab)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: pipeline '%s' has no vocab operator to share", eng->spec.name);
    if (!eng->ops->vocab_misses || !eng->ops->vocab_apply || !eng->ops->vocab_freeze)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: backend %s cannot share its vocabulary (use engine.backend cpu)",
                         eng->ops->name);
    if (eng->spec.count_mode != PR_COUNT_STREAMING)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: a shared vocabulary needs count_mode streaming");
    if (!eng->evict)
        return 0;
    if (eng->spec.profile != PR_VOCAB_DEFAULT)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: a shared vocabulary with eviction needs profile default "
                         "(profile dlrm has no out-of-vocabulary index for values the log has "
                         "not decided); use profile default, or eviction none");
    if (eng->event_ttl)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: a shared vocabulary cannot evict by event time (ttl_s: event "
                         "times would have to travel in the log); use ttl_records, or eviction "
                         "lru or lfu");
    if (!eng->ops->vocab_touch || !eng->ops->vocab_drain_usage || !eng->ops->vocab_undecided_oov)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: backend %s cannot share a vocabulary that evicts (use "
                         "engine.backend cpu)",
                         eng->ops->name);
    return 0;
}

int pr_engine_vocab_set_shared(pr_engine *eng, bool shared, char *errstr, size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (rc)
        return rc;
    if (shared && eng->evict && eng->jr_fd >= 0)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "engine: a shared vocabulary that evicts is not journaled (the log is "
                         "the journal); close the vocabulary journal first");
    eng->ops->vocab_freeze(eng->be, shared);
    eng->shared = shared;
    return 0;
}

int pr_engine_vocab_set_undecided_oov(pr_engine *eng, bool on, char *errstr, size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (rc)
        return rc;
    if (eng->evict)
        eng->ops->vocab_undecided_oov(eng->be, on);
    return 0;
}

/* Number the recycle a vocab_apply just made in column col (the backend's
 * block log then holds that call's assignment alone) and queue its notice
 * for the next pr_engine_process, in apply order. */
static int pr__apply_notices(pr_engine *eng, uint32_t col)
{
    const pr__vasg *log;
    size_t n;
    eng->ops->vocab_block_log(eng->be, col, &log, &n);
    for (size_t i = 0; i < n; i++) {
        if (!log[i].recycled)
            continue;
        pr_recycled r = {col, 0, log[i].index, eng->notice_next};
        if (pr__pend_push(eng, &r))
            return PR_ENOMEM;
        eng->notice_next++;
    }
    return 0;
}

int pr_engine_vocab_misses(pr_engine *eng, const pr_block *in, pr_vocab_miss_cb cb, void *opaque,
                           char *errstr, size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (!rc)
        rc = pr__check_block(eng, in, errstr, errstr_size);
    if (rc)
        return rc;
    rc = eng->ops->vocab_misses(eng->be, in, cb, opaque);
    if (rc == PR_ENOMEM)
        return pr_seterr(errstr, errstr_size, rc, "engine: out of memory for scratch");
    return rc;
}

int pr_engine_vocab_apply(pr_engine *eng, uint32_t col, uint64_t key, uint32_t count,
                          int64_t *index, char *errstr, size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (rc)
        return rc;
    if (col >= eng->spec.n_sparse || count == 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "engine: no sparse column %u", col);
    const pr_sparse_col_spec *cs = &eng->spec.sparse[col];
    if (pr_spec_has_op(&eng->spec, PR_OP_MODULUS) && key >= cs->modulus)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: column %s: value %" PRIx64 " is not below its modulus %" PRIu64,
                         cs->name, key, cs->modulus);
    rc = eng->ops->vocab_apply(eng->be, col, key, count, index);
    if (!rc && cs->eviction != PR_EVICT_NONE)
        rc = pr__apply_notices(eng, col);
    if (rc == PR_EFULL)
        return pr_seterr(errstr, errstr_size, rc,
                         "engine: vocabulary of column %s is full (capacity %" PRIu64
                         ", profile dlrm has no out-of-vocabulary index)",
                         cs->name, pr__spec_col_capacity(&eng->spec, col));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "engine: column %s: cannot apply value %" PRIx64 " (%s)", cs->name, key,
                         pr_strerror(rc));
    return 0;
}

int pr_engine_vocab_touch(pr_engine *eng, uint32_t col, uint64_t key, uint32_t count, char *errstr,
                          size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (rc)
        return rc;
    if (col >= eng->spec.n_sparse || count == 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: vocab touch: no sparse column %u, or count 0", col);
    const pr_sparse_col_spec *cs = &eng->spec.sparse[col];
    if (pr_spec_has_op(&eng->spec, PR_OP_MODULUS) && key >= cs->modulus)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: column %s: value %" PRIx64 " is not below its modulus %" PRIu64,
                         cs->name, key, cs->modulus);
    if (cs->eviction == PR_EVICT_NONE)
        return 0;
    rc = eng->ops->vocab_touch(eng->be, col, key, count);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "engine: column %s: cannot record uses of value %" PRIx64 " (%s)",
                         cs->name, key, pr_strerror(rc));
    return 0;
}

int pr_engine_vocab_drain_usage(pr_engine *eng, pr_vocab_usage_cb cb, void *opaque)
{
    if (!eng->evict || !eng->ops->vocab_drain_usage)
        return 0;
    return eng->ops->vocab_drain_usage(eng->be, cb, opaque);
}

int pr_engine_count(pr_engine *eng, const pr_block *in)
{
    if (eng->spec.count_mode != PR_COUNT_TWO_PASS)
        return PR_ESTATE;
    if (pr__check_block(eng, in, NULL, 0))
        return PR_EINVAL;
    if (!eng->ops->count)
        return PR_ENOTSUP;
    return eng->ops->count(eng->be, in);
}

int pr_engine_count_done(pr_engine *eng)
{
    if (eng->spec.count_mode != PR_COUNT_TWO_PASS)
        return PR_ESTATE;
    if (!eng->ops->count_done)
        return PR_ENOTSUP;
    return eng->ops->count_done(eng->be);
}

void pr_engine_get_stats(const pr_engine *eng, pr_engine_stats *st)
{
    *st = eng->stats;
}

/* ---------------------------------------------------------------- vocabulary */

uint64_t pr_engine_vocab_size(const pr_engine *eng, uint32_t col)
{
    if (!eng->has_vocab || col >= eng->spec.n_sparse)
        return 0;
    return eng->ops->vocab_size(eng->be, col);
}

int pr_engine_vocab_read(const pr_engine *eng, uint32_t col, pr_vocab_cb cb, void *opaque)
{
    if (col >= eng->spec.n_sparse)
        return PR_EINVAL;
    if (!eng->has_vocab)
        return 0;
    return eng->ops->vocab_read(eng->be, col, cb, opaque);
}

static int pr__fsync_dir_of(const char *path)
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

/* --- text export */

typedef struct {
    FILE *f;
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

static int pr__export_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__export_ctx *x = opaque;
    char line[80], *end = line + sizeof(line), *p = end;
    *--p = '\n';
    p = pr__fmt_u64(p, e->count, 10);
    *--p = '\t';
    p = pr__fmt_u64(p, e->value, 16);
    *--p = '\t';
    p = pr__fmt_u64(p, e->index < 0 ? 0 - (uint64_t)e->index : (uint64_t)e->index, 10);
    if (e->index < 0)
        *--p = '-';
    return fwrite(p, 1, (size_t)(end - p), x->f) == (size_t)(end - p) ? 0 : PR_EIO;
}

int pr_engine_vocab_export(const pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!eng->has_vocab)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab export: pipeline '%s' has no vocab operator", eng->spec.name);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: mkdir %s: %s", dir,
                         strerror(errno));
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++) {
        const pr_sparse_col_spec *s = &eng->spec.sparse[c];
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.tsv", dir, s->name);
        FILE *f = fopen(path, "w");
        if (!f)
            return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: %s: %s", path,
                             strerror(errno));
        fprintf(f,
                "# piperec vocabulary: pipeline %s column %s profile %s min_count %u size %" PRIu64
                "\n# index\tvalue_hex\tcount\n",
                eng->spec.name, s->name, pr_vocab_profile_name(eng->spec.profile), s->min_count,
                pr_engine_vocab_size(eng, c));
        pr__export_ctx x = {f};
        int rc = eng->ops->vocab_read(eng->be, c, pr__export_cb, &x);
        if (fclose(f) && !rc)
            rc = PR_EIO;
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "vocab export: writing %s failed", path);
    }
    return 0;
}

/* --- text import (the export format read back; also seeds from other systems)
 *
 * Every column is parsed and checked in full before any state changes, so a
 * bad file leaves the engine as it was. Checks name file:line: field syntax,
 * values not below the modulus, indices reserved by the profile, duplicate
 * values, duplicate indices, gaps, and the column's capacity. */

typedef struct {
    uint64_t value;
    int64_t index;
    uint64_t count;
    size_t line;
} pr__imp_ent;

typedef struct {
    pr__imp_ent *e;
    size_t n, cap;
} pr__imp_col;

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

/* Parse DIR/<col>.tsv into *ic and check it against the spec. */
static int pr__imp_parse(const pr_engine *eng, uint32_t c, const char *path, pr__imp_col *ic,
                         char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = &eng->spec;
    const pr_sparse_col_spec *s = &spec->sparse[c];
    int64_t base = pr__profile_base(spec->profile);
    uint64_t cap = pr__spec_col_capacity(spec, c);
    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);
    bool pending_ok = s->min_count > 1 && spec->count_mode == PR_COUNT_STREAMING;
    FILE *f = fopen(path, "r");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s (every sparse column needs a file)",
                         path, strerror(errno));
    char *buf = NULL;
    size_t bufcap = 0, line = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = 0;
        if (len == 0 || buf[0] == '#')
            continue;
        const char *fld[4];
        size_t fl[4], nf = 0;
        for (char *p = buf;; nf++) {
            char *t = strchr(p, '\t');
            if (nf < 4) {
                fld[nf] = p;
                fl[nf] = t ? (size_t)(t - p) : strlen(p);
            }
            if (!t) {
                nf++;
                break;
            }
            p = t + 1;
        }
        pr__imp_ent e = {0, 0, 0, line};
        uint64_t iv;
        bool neg = fl[0] > 0 && fld[0][0] == '-';
        if (nf < 2 || nf > 3) {
            rc = pr_seterr(errstr, errstr_size, PR_EBADREC,
                           "%s:%zu: %zu fields, expected index<TAB>value_hex[<TAB>count]", path,
                           line, nf);
        } else if (!pr__imp_u64(fld[0] + neg, fl[0] - neg, 10, &iv) || iv > (uint64_t)INT64_MAX) {
            rc =
                pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: index '%.*s' is not an integer",
                          path, line, (int)(fl[0] > 40 ? 40 : fl[0]), fld[0]);
        } else if (!pr__imp_u64(fld[1], fl[1], 16, &e.value)) {
            rc = pr_seterr(errstr, errstr_size, PR_EBADREC,
                           "%s:%zu: value '%.*s' is not 1 to 16 hex digits", path, line,
                           (int)(fl[1] > 40 ? 40 : fl[1]), fld[1]);
        } else if (nf == 3 && !pr__imp_u64(fld[2], fl[2], 10, &e.count)) {
            rc =
                pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: count '%.*s' is not an integer",
                          path, line, (int)(fl[2] > 40 ? 40 : fl[2]), fld[2]);
        } else if (mod && e.value >= s->modulus) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: value %" PRIx64 " is not below column %s's modulus %" PRIu64
                           " (values are keys after Hex2Int and Modulus)",
                           path, line, e.value, s->name, s->modulus);
        } else if (neg && (iv != 1 || !pending_ok)) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: index -%" PRIu64 ": only -1 is allowed (a value still below "
                           "min_count), and only when min_count > 1 with count_mode streaming",
                           path, line, iv);
        } else if (!neg && (int64_t)iv < base) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: index %" PRIu64 " is reserved by profile default (0 = missing, "
                           "1 = out-of-vocabulary); vocabulary indices start at 2",
                           path, line, iv);
        } else if (!neg && iv >= cap) {
            rc = pr_seterr(errstr, errstr_size, PR_EFULL,
                           "%s:%zu: index %" PRIu64 " does not fit column %s's capacity %" PRIu64,
                           path, line, iv, s->name, cap);
        } else {
            e.index = neg ? -1 : (int64_t)iv;
            if (ic->n == ic->cap) {
                size_t nc = ic->cap ? ic->cap * 2 : 1024;
                pr__imp_ent *p = realloc(ic->e, nc * sizeof(*p));
                if (!p) {
                    rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
                    break;
                }
                ic->e = p;
                ic->cap = nc;
            }
            ic->e[ic->n++] = e;
        }
    }
    if (!rc && ferror(f))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: read error: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    if (rc || !ic->n)
        return rc;
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_value);
    for (size_t i = 1; i < ic->n; i++)
        if (ic->e[i].value == ic->e[i - 1].value)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate value %" PRIx64 " (also on line %zu)", path,
                             ic->e[i].line, ic->e[i].value, ic->e[i - 1].line);
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_index);
    int64_t want = base;
    for (size_t i = 0; i < ic->n && ic->e[i].index >= 0; i++, want++) {
        const pr__imp_ent *x = &ic->e[i];
        if (i && x->index == ic->e[i - 1].index)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate index %" PRId64 " (also on line %zu)", path,
                             x->line, x->index, ic->e[i - 1].line);
        if (x->index != want)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: index %" PRId64 " leaves a gap: index %" PRId64
                             " is missing (indices must be contiguous from %" PRId64 ")",
                             path, x->line, x->index, want, base);
    }
    return 0;
}

static int pr__nonempty_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    (void)opaque;
    return 1;
}

int pr_engine_vocab_import(pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!eng->has_vocab)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab import: pipeline '%s' has no vocab operator", eng->spec.name);
    if (eng->spec.count_mode == PR_COUNT_TWO_PASS)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "vocab import: pipeline '%s' uses count_mode two_pass, which assigns "
                         "indices from its own counting pass; importing is only supported with "
                         "count_mode streaming",
                         eng->spec.name);
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++)
        if (eng->ops->vocab_read(eng->be, c, pr__nonempty_cb, NULL))
            return pr_seterr(errstr, errstr_size, PR_ESTATE,
                             "vocab import: column %s already has a vocabulary",
                             eng->spec.sparse[c].name);
    uint32_t ns = eng->spec.n_sparse;
    pr__imp_col *cols = calloc(ns ? ns : 1, sizeof(*cols));
    pr_vocab_entry *ents = NULL;
    if (!cols)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
    int rc = 0;
    char path[4096];
    for (uint32_t c = 0; c < ns && !rc; c++) {
        if (snprintf(path, sizeof(path), "%s/%s.tsv", dir, eng->spec.sparse[c].name) >=
            (int)sizeof(path))
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab import: path too long");
        else
            rc = pr__imp_parse(eng, c, path, &cols[c], errstr, errstr_size);
    }
    for (uint32_t c = 0; c < ns && !rc; c++) {
        free(ents);
        ents = malloc((cols[c].n ? cols[c].n : 1) * sizeof(*ents));
        if (!ents) {
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
            break;
        }
        for (size_t i = 0; i < cols[c].n; i++)
            ents[i] =
                (pr_vocab_entry){cols[c].e[i].value, cols[c].e[i].index, cols[c].e[i].count, 0, 0};
        if ((rc = eng->ops->vocab_load(eng->be, c, ents, cols[c].n))) {
            rc = pr_seterr(errstr, errstr_size, rc,
                           "vocab import: %s/%s.tsv: entries rejected by backend %s (%s)", dir,
                           eng->spec.sparse[c].name, eng->ops->name, pr_strerror(rc));
            /* Leave no half-imported column behind. */
            for (uint32_t k = 0; k <= c; k++)
                eng->ops->vocab_load(eng->be, k, NULL, 0);
            break;
        }
        eng->jr_next[c] = (int64_t)pr_engine_vocab_size(eng, c);
    }
    free(ents);
    for (uint32_t c = 0; c < ns; c++)
        free(cols[c].e);
    free(cols);
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

int pr_engine_vocab_save(const pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    return pr_engine_vocab_save_tagged(eng, path, NULL, 0, errstr, errstr_size);
}

int pr_engine_vocab_save_tagged(const pr_engine *eng, const char *path, const void *tag,
                                uint32_t tag_len, char *errstr, size_t errstr_size)
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
    uint32_t hdr[2] = {eng->event_ttl ? 4 : eng->evict ? 3 : tag_len ? 2 : 1, eng->spec.n_sparse};
    pr__w(&w, pr__snap_magic, sizeof(pr__snap_magic));
    pr__w(&w, hdr, sizeof(hdr));
    pr__w(&w, &eng->fingerprint, 8);
    if (tag_len || eng->evict) {
        pr__w(&w, &tag_len, 4);
        pr__w(&w, tag, tag_len);
    }
    if (eng->evict) {
        /* To announce after a restart: the replayed ones not sent yet, and
         * those sent but not known delivered (they may sit in a batch the
         * crash loses, while the snapshot already holds their effect). */
        uint32_t n = eng->n_pend + eng->n_recent;
        pr__w(&w, &eng->notice_next, 8);
        pr__w(&w, &n, 4);
        for (uint32_t i = 0; i < n; i++) {
            const pr_recycled *r = i < eng->n_pend ? &eng->pend[i] : &eng->recent[i - eng->n_pend];
            uint32_t cz[2] = {r->col, 0};
            pr__w(&w, cz, 8);
            pr__w(&w, &r->index, 8);
            pr__w(&w, &r->number, 8);
        }
    }
    int rc = 0;
    for (uint32_t c = 0; c < eng->spec.n_sparse && !rc && !w.err; c++) {
        pr__count_ctx cc = {&w, 0};
        if (eng->evict) {
            pr__vclock clock = eng->ops->vocab_clock(eng->be, c);
            pr__w(&w, &clock.records, 8);
            if (eng->event_ttl)
                pr__w(&w, &clock.event_ms, 8);
        }
        if (eng->has_vocab)
            rc = eng->ops->vocab_read(eng->be, c, pr__count_cb, &cc);
        pr__w(&w, &cc.n, 8);
        pr_vocab_cb entry_cb = eng->event_ttl ? pr__snap_entry5_cb
                               : eng->evict   ? pr__snap_entry4_cb
                                              : pr__snap_entry_cb;
        if (!rc && eng->has_vocab)
            rc = eng->ops->vocab_read(eng->be, c, entry_cb, &w);
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
        rc = pr__fsync_dir_of(path);
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

int pr_engine_vocab_load(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    uint32_t len;
    return pr_engine_vocab_load_tagged(eng, path, NULL, 0, &len, errstr, errstr_size);
}

int pr_engine_vocab_load_tagged(pr_engine *eng, const char *path, void *tag, uint32_t tag_cap,
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
    if (fp != eng->fingerprint || hdr[1] != eng->spec.n_sparse) {
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "vocab load: %s was written for a different pipeline spec (fingerprint "
                       "%016" PRIx64 ", this pipeline %016" PRIx64
                       "): sparse ops, profile, modulus, min_count, capacity or eviction "
                       "settings (eviction, ttl_records, ttl_s, decay_records) changed; "
                       "the indices it holds do not apply",
                       path, fp, eng->fingerprint);
        goto out;
    }
    if ((hdr[0] >= 3) != eng->evict || (hdr[0] == 4) != eng->event_ttl) {
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
        eng->notice_next = nn;
        eng->n_pend = 0;
        for (uint32_t i = 0; i < np; i++) {
            uint32_t cz[2];
            pr_recycled r = {0};
            if (pr__read_exact(f, cz, 8, NULL) || pr__read_exact(f, &r.index, 8, NULL) ||
                pr__read_exact(f, &r.number, 8, NULL)) {
                rc = PR_EIO;
                goto bad;
            }
            r.col = cz[0];
            if (pr__pend_push(eng, &r)) {
                rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab load: out of memory");
                goto out;
            }
        }
    }
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++) {
        uint64_t n;
        pr__vclock clock = {0, 0};
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
        if (eng->has_vocab && (rc = eng->ops->vocab_load(eng->be, c, ents, n))) {
            rc = pr_seterr(errstr, errstr_size, rc,
                           "vocab load: %s: column %s: entries rejected by backend %s (%s)", path,
                           eng->spec.sparse[c].name, eng->ops->name, pr_strerror(rc));
            goto out;
        }
        if (eng->evict)
            eng->ops->vocab_set_clock(eng->be, c, clock);
        eng->jr_next[c] = (int64_t)pr_engine_vocab_size(eng, c);
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
    return eng->event_ttl ? 3 : eng->evict ? 2 : 1;
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
    if (fp != eng->fingerprint || ns != eng->spec.n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "vocab journal: %s was written for a different pipeline spec "
                         "(fingerprint %016" PRIx64 ", this pipeline %016" PRIx64 ")",
                         path, fp, eng->fingerprint);
    return 0;
}

static void pr__jr_header(const pr_engine *eng, unsigned char *hdr)
{
    memset(hdr, 0, PR__JR_HDR);
    memcpy(hdr, pr__jr_magic_of(pr__jr_version(eng)), 8);
    memcpy(hdr + 8, &eng->fingerprint, 8);
    uint32_t ns = eng->spec.n_sparse;
    memcpy(hdr + 16, &ns, 4);
}

static int pr__write_all(int fd, const void *p, size_t n)
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

static bool pr__jr_rec_valid(const pr_engine *eng, const pr__jr_rec *r)
{
    return r->col < eng->spec.n_sparse && r->index >= 0 &&
           r->check == pr__jr_check(r->col, r->value, r->index);
}

static bool pr__jr2_rec_valid(const pr_engine *eng, const pr__jr2_rec *r)
{
    uint32_t kind = r->kc >> 28, col = r->kc & 0x0fffffffu;
    if (r->check != pr__jr2_check(r, pr__jr_rec_size(eng)))
        return false;
    if (kind == PR__JR2_COMMIT)
        return true;
    return kind == PR__JR2_ASSIGN && col < eng->spec.n_sparse && r->index >= 0;
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
    int (*kind)(const pr_engine *, const void *) = eng->evict ? pr__jr2_kind : pr__jr_kind;
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

int pr_engine_vocab_journal_open(pr_engine *eng, const char *path, char *errstr, size_t errstr_size)
{
    if (!eng->has_vocab)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' has no vocab operator", eng->spec.name);
    if (eng->shared && eng->evict)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' shares a vocabulary that evicts; the "
                         "shared log is its journal",
                         eng->spec.name);
    pr_engine_vocab_journal_close(eng);
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
        if (ftruncate(fd, 0) || pr__write_all(fd, hdr, sizeof(hdr)) || fdatasync(fd) ||
            pr__fsync_dir_of(path))
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
    eng->jr_path = strdup(path);
    eng->jr_fd = fd;
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++)
        eng->jr_next[c] = (int64_t)pr_engine_vocab_size(eng, c);
    return 0;
}

void pr_engine_vocab_journal_close(pr_engine *eng)
{
    if (eng->jr_fd >= 0)
        close(eng->jr_fd);
    eng->jr_fd = -1;
    free(eng->jr_path);
    eng->jr_path = NULL;
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

static int pr__journal_append2(pr_engine *eng, char *errstr, size_t errstr_size);

static int pr__journal_append(pr_engine *eng, char *errstr, size_t errstr_size)
{
    if (eng->evict)
        return pr__journal_append2(eng, errstr, errstr_size);
    pr__jr_buf b = {0};
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++) {
        int64_t size = (int64_t)eng->ops->vocab_size(eng->be, c);
        if (size <= eng->jr_next[c])
            continue;
        b.col = c;
        b.from = eng->jr_next[c];
        if (eng->ops->vocab_read_from)
            eng->ops->vocab_read_from(eng->be, c, b.from, pr__jr_collect_cb, &b);
        else
            eng->ops->vocab_read(eng->be, c, pr__jr_collect_cb, &b);
        if (b.err)
            break;
        eng->jr_next[c] = size;
    }
    int rc = b.err;
    if (!rc && b.n) {
        if (pr__write_all(eng->jr_fd, b.recs, b.n * sizeof(*b.recs)) || fdatasync(eng->jr_fd))
            rc = PR_EIO;
    }
    free(b.recs);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "vocab journal: %s: append failed (%s); indices of this block are not "
                         "durable, stop the pipeline",
                         eng->jr_path, rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
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

int pr_engine_vocab_journal_replay(pr_engine *eng, const char *path, char *errstr,
                                   size_t errstr_size)
{
    if (!eng->has_vocab)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab journal: pipeline '%s' has no vocab operator", eng->spec.name);
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
    if (eng->evict) {
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
    int64_t base = pr__profile_base(eng->spec.profile);
    for (size_t i = 0; i < n;) {
        uint32_t c = recs[i].col;
        size_t j = i;
        while (j < n && recs[j].col == c)
            j++;
        cur.n = 0;
        if ((rc = eng->ops->vocab_read(eng->be, c, pr__ents_cb, &cur)) || (rc = cur.err))
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
                                   path, eng->spec.sparse[c].name, recs[k].index);
                    goto out;
                }
                continue;
            }
            if (recs[k].index > next) {
                free(pending);
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s jumps from index %" PRId64
                               " to %" PRId64 "; the snapshot is older than the journal's start",
                               path, eng->spec.sparse[c].name, next, recs[k].index);
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
        if (n_new && (rc = eng->ops->vocab_load(eng->be, c, cur.e, cur.n))) {
            rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s",
                           eng->spec.sparse[c].name, eng->ops->name, pr_strerror(rc));
            goto out;
        }
        eng->jr_next[c] = (int64_t)pr_engine_vocab_size(eng, c);
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
static int pr__journal_append2(pr_engine *eng, char *errstr, size_t errstr_size)
{
    pr__jr2_buf b = {0};
    pr__jr2_note *notes = NULL;
    size_t n_notes = 0, notes_cap = 0;
    int rc = 0;
    for (uint32_t c = 0; c < eng->spec.n_sparse && !b.err && !rc; c++) {
        int64_t size = (int64_t)eng->ops->vocab_size(eng->be, c);
        if (eng->spec.sparse[c].eviction == PR_EVICT_NONE) {
            if (size > eng->jr_next[c]) {
                b.col = c;
                b.from = eng->jr_next[c];
                eng->ops->vocab_read_from
                    ? eng->ops->vocab_read_from(eng->be, c, b.from, pr__jr2_fresh_cb, &b)
                    : eng->ops->vocab_read(eng->be, c, pr__jr2_fresh_cb, &b);
            }
            eng->jr_next[c] = size;
            continue;
        }
        const pr__vasg *log;
        size_t n;
        eng->ops->vocab_block_log(eng->be, c, &log, &n);
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
        eng->jr_next[c] = size;
    }
    if (!rc)
        rc = b.err;
    if (!rc && b.n) {
        if (n_notes)
            qsort(notes, n_notes, sizeof(*notes), pr__jr2_note_cmp);
        uint64_t first = eng->notice_next - n_notes;
        for (size_t k = 0; k < n_notes; k++)
            b.r[notes[k].pos].number = first + k;
        pr__jr2_push(&b, pr__jr2_make(PR__JR2_COMMIT, 0, 0, 0, 0, eng->notice_next, 0));
        rc = b.err;
        /* Checks, then the on-disk layout: version 2 records are packed to
         * their 40 bytes in place (each moves down, never over a later one). */
        size_t rec_size = pr__jr_rec_size(eng);
        for (size_t i = 0; i < b.n && !rc; i++) {
            b.r[i].check = pr__jr2_check(&b.r[i], rec_size);
            if (rec_size != sizeof(*b.r))
                memmove((char *)b.r + i * rec_size, &b.r[i], rec_size);
        }
        if (!rc && (pr__write_all(eng->jr_fd, b.r, b.n * rec_size) || fdatasync(eng->jr_fd)))
            rc = PR_EIO;
    }
    free(b.r);
    free(notes);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc,
                         "vocab journal: %s: append failed (%s); indices of this block are not "
                         "durable, stop the pipeline",
                         eng->jr_path, rc == PR_EIO ? strerror(errno) : pr_strerror(rc));
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
    uint64_t next_number = eng->notice_next;
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
    int64_t base = pr__profile_base(eng->spec.profile);
    for (uint32_t c = 0; c < eng->spec.n_sparse; c++) {
        bool touched = false;
        for (size_t i = 0; i < n_ok && !touched; i++)
            touched = recs[i].kc == ((uint32_t)PR__JR2_ASSIGN << 28 | c);
        if (!touched)
            continue;
        cur.n = 0;
        if ((rc = eng->ops->vocab_read(eng->be, c, pr__ents_cb, &cur)) || (rc = cur.err))
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
        pr__vclock clock = eng->ops->vocab_clock(eng->be, c);
        for (size_t i = 0; i < n_ok; i++) {
            const pr__jr2_rec *q = &recs[i];
            if (q->kc != ((uint32_t)PR__JR2_ASSIGN << 28 | c))
                continue;
            if (q->tick > clock.records)
                clock.records = q->tick;
            if (q->tick_ms > clock.event_ms)
                clock.event_ms = q->tick_ms;
            if (q->number >= eng->notice_next)
                notes[n_notes++] = (pr_recycled){c, 0, q->index, q->number};
            pr_vocab_entry e = {q->value, q->index, 1, q->tick, q->tick_ms};
            size_t at = (size_t)(q->index - base);
            if (q->index < base || at > cur.n) {
                free(pending);
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s jumps to index %" PRId64
                               " (the vocabulary has %zu); the snapshot is older than the "
                               "journal's start",
                               path, eng->spec.sparse[c].name, q->index, cur.n);
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
                               path, eng->spec.sparse[c].name, sorted[k].value);
                goto out;
            }
        size_t n_assigned_now = cur.n;
        for (size_t k = 0; k < n_pending; k++)
            if (!bsearch(&pending[k], sorted, n_assigned_now, sizeof(*sorted), pr__ent_value_cmp))
                pr__ents_push(&cur, &pending[k]);
        free(pending);
        if ((rc = cur.err))
            goto fail;
        if ((rc = eng->ops->vocab_load(eng->be, c, cur.e, cur.n))) {
            rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s",
                           eng->spec.sparse[c].name, eng->ops->name, pr_strerror(rc));
            goto out;
        }
        if (eng->evict)
            eng->ops->vocab_set_clock(eng->be, c, clock);
        eng->jr_next[c] = (int64_t)pr_engine_vocab_size(eng, c);
    }
    /* Re-announce, in number order, what the journal recycled. */
    if (n_notes)
        qsort(notes, n_notes, sizeof(*notes), pr__recycled_number_cmp);
    for (size_t k = 0; k < n_notes; k++)
        if (pr__pend_push(eng, &notes[k])) {
            rc = PR_ENOMEM;
            goto fail;
        }
    eng->notice_next = next_number;
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

int pr_engine_vocab_checkpoint(pr_engine *eng, const char *snapshot_path, const char *journal_path,
                               char *errstr, size_t errstr_size)
{
    int rc = pr_engine_vocab_save(eng, snapshot_path, errstr, errstr_size);
    if (rc)
        return rc;
    if (!journal_path)
        journal_path = eng->jr_path;
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
