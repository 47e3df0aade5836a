/*
 * engine.c — the engine core: name tables, spec defaults and validation,
 * block/output allocation, the pr_engine object (which delegates the work to
 * a backend through pr_backend_ops), statistics, recycled-index notices,
 * and the vocabulary primitives vocab/ builds durability and sharing on.
 *
 * The engine executes; it never writes a file. Every vocabulary file format
 * (text export/import, snapshot, journal) lives in vocab/ (pr_vocab.h), which
 * reads and restores tables through the primitives at the end of this file
 * and makes a block's new indices durable from the block hook that
 * pr_engine_process calls before it returns.
 */
#define _GNU_SOURCE
#include "pr_engine.h"

#include <inttypes.h>
#include <stdlib.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <string.h>
#include <sys/mman.h>

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

uint64_t pr_spec_col_capacity(const pr_pipeline_spec *spec, uint32_t col)
{
    return pr__spec_col_capacity(spec, col);
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

/* A bounded column's eviction settings (eviction other than none). */
static int pr__check_eviction(const pr_pipeline_spec *spec, const pr_sparse_col_spec *s, bool vocab,
                              char *errstr, size_t errstr_size)
{
    uint64_t base = (uint64_t)pr__profile_base(spec->profile);
    const char *en =
        (unsigned)s->eviction < PR_EVICT__COUNT ? pr_vocab_eviction_names[s->eviction] : "?";
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
                         "sparse.%s.capacity: at most %" PRIu64 " with eviction %s", s->name,
                         (uint64_t)INT32_MAX + base, en);
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
        if (s->eviction != PR_EVICT_NONE &&
            (rc = pr__check_eviction(spec, s, vocab, errstr, errstr_size)))
            return rc;
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

#define PR__HUGE ((size_t)2 << 20)

static size_t pr__table_len(size_t size)
{
    return (size + PR__HUGE - 1) & ~(PR__HUGE - 1);
}

void *pr__table_alloc(size_t size, bool huge)
{
    if (!huge || size < PR__HUGE / 2) /* under 1 MiB: not worth a huge page */
        return pr__zalloc_aligned(size);
    size_t len = pr__table_len(size);
    if (len < size)
        return NULL;
    /* Over-map by one huge page, then trim to a 2 MiB aligned range. */
    unsigned char *raw =
        mmap(NULL, len + PR__HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)raw + PR__HUGE - 1) & ~(uintptr_t)(PR__HUGE - 1);
    size_t head = a - (uintptr_t)raw;
    if (head)
        munmap(raw, head);
    if (PR__HUGE - head)
        munmap((void *)(a + len), PR__HUGE - head);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)a, len, MADV_HUGEPAGE); /* advice: fine if refused */
#endif
    return (void *)a;
}

void pr__table_free(void *p, size_t size, bool huge)
{
    if (!huge || size < PR__HUGE / 2)
        pr__free_aligned(p);
    else if (p)
        munmap(p, pr__table_len(size));
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
    /* durability hook (pr_engine_set_block_hook): vocab/'s journal */
    pr_engine_block_hook hook;
    void (*hook_release)(void *opaque);
    void *hook_data;
    /* bounded vocabularies (pr_vocab_eviction) */
    bool evict;                    /* some column evicts: journal v2, snapshot v3 */
    bool shared;                   /* pr_engine_vocab_set_shared(true) */
    bool serving;                  /* pr_engine_vocab_serve: lookups only */
    bool event_ttl;                /* some column evicts by ttl_s: journal v3, snapshot v4 */
    uint64_t notice_next;          /* number of the next recycled-index notice (from 1) */
    pr_recycled *pend;             /* notices replayed from the journal, re-announced by */
    uint32_t n_pend, pend_cap;     /* the next pr_engine_process (row 0) */
    pr_recycled *recent;           /* notices handed out and not yet known delivered */
    uint32_t n_recent, recent_cap; /* (pr_engine_vocab_notices_delivered): snapshots keep
                                    * them, so a restart announces them again */
    /* feature health (pr_engine_missing): rows lacking each feature, the
     * Criteo layout's n_dense + n_sparse columns or spec.n_features */
    uint64_t *missing;
    uint32_t n_missing;
    bool popcnt; /* the CPU has POPCNT (the health counts' bitmaps) */
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
    eng->evict = pr_spec_has_eviction(spec);
    eng->event_ttl = pr__spec_has_event_ttl(spec);
    eng->notice_next = 1;
    eng->popcnt = __builtin_cpu_supports("popcnt");
    eng->n_missing = spec->n_features ? spec->n_features : (uint32_t)spec->n_dense + spec->n_sparse;
    if (!(eng->missing = calloc((size_t)eng->n_missing + 1, sizeof(uint64_t)))) {
        free(eng);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "engine: out of memory");
        return NULL;
    }

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
            free(eng->missing);
            free(eng);
            return NULL;
        }
        rc = pr__backend_new(eng, ops, opts, errstr, errstr_size);
    }
    if (rc) {
        free(eng->missing);
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
    pr_engine_set_block_hook(eng, NULL, NULL, NULL);
    if (eng->ops)
        eng->ops->free_(eng->be);
    free(eng->pend);
    free(eng->recent);
    free(eng->missing);
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

typedef struct pr__jnote {
    uint32_t row, col, at; /* block row of the element, column, place in the backend's list */
} pr__jnote;

static int pr__jnote_cmp(const void *a, const void *b)
{
    const pr__jnote *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return (x->at > y->at) - (x->at < y->at);
}

/* A jagged block (a declared schema: side tables, col_rows): the backend
 * lists notices by (element, column), and element positions of different
 * columns are not comparable, so numbering them in that order made the
 * numbers depend on where blocks end. Put them in (block row of the
 * element, column) order first, each column's in element order. Out of
 * memory: the backend's order stays. */
static void pr__order_jagged_notices(const pr_block *in, pr_out *out)
{
    const pr_fside *s = in->side;
    if (!s || !in->col_rows || out->n_recycled < 2 || !in->rows)
        return;
    pr__jnote *k = malloc(out->n_recycled * sizeof(*k));
    pr_recycled *v = malloc(out->n_recycled * sizeof(*v));
    if (!k || !v)
        goto out_free;
    for (uint32_t i = 0; i < out->n_recycled; i++)
        k[i] = (pr__jnote){0, out->recycled[i].col, i};
    for (uint16_t f = 0; f < s->n_feat; f++) {
        if (s->vocab_col[f] < 0)
            continue;
        uint32_t c = (uint32_t)s->vocab_col[f], r = 0;
        bool first_of_col = true; /* a shared table's column: once, by its row runs */
        for (uint16_t g = 0; s->shared && g < f; g++)
            first_of_col &= s->vocab_col[g] != (int)c;
        if (!first_of_col)
            continue;
        const int32_t *len = s->lengths + (size_t)f * s->cap;
#define PR__RUN(r) ((uint64_t)(s->shared ? pr_fside_col_len(s, (int)c, (r)) : (uint32_t)len[(r)]))
        uint64_t first = 0, end = PR__RUN(0); /* row r holds elements [first, end) */
        for (uint32_t i = 0; i < out->n_recycled; i++) {
            uint64_t e = out->recycled[i].row;
            if (out->recycled[i].col != c)
                continue;
            if (e < first) { /* not in element order: scan again from row 0 */
                r = 0;
                first = 0;
                end = PR__RUN(0);
            }
            while (e >= end && r + 1 < in->rows) {
                first = end;
                ++r;
                end += PR__RUN(r);
            }
            k[i].row = r;
        }
#undef PR__RUN
    }
    qsort(k, out->n_recycled, sizeof(*k), pr__jnote_cmp);
    for (uint32_t i = 0; i < out->n_recycled; i++)
        v[i] = out->recycled[k[i].at];
    memcpy(out->recycled, v, out->n_recycled * sizeof(*v));
out_free:
    free(k);
    free(v);
}

/* Number the block's notices (the backend lists them in (row, col) order;
 * a jagged block's are put in that order first) and put the re-announcements
 * of a journal replay first, at row 0. */
static int pr__number_notices(pr_engine *eng, const pr_block *in, pr_out *out)
{
    pr__order_jagged_notices(in, out);
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

/* ---------------------------------------------------------------- feature health */

/* Set bits of bitmap m over [0, n), those set in rej (when not NULL) left
 * out: hw, the POPCNT instruction (pr__bits_hw), else pr_popcount64. */
__attribute__((always_inline)) static inline uint64_t pr__pc(uint64_t x, bool hw)
{
    return hw ? (uint64_t)__builtin_popcountll(x) : pr_popcount64(x);
}

__attribute__((always_inline)) static inline uint64_t
pr__bits_body(const uint64_t *m, const uint64_t *rej, uint32_t n, bool hw)
{
    uint64_t k = 0;
    size_t w = n / 64;
    for (size_t i = 0; i < w; i++)
        k += pr__pc(rej ? m[i] & ~rej[i] : m[i], hw);
    if (n % 64) {
        uint64_t t = m[w] & (((uint64_t)1 << (n % 64)) - 1);
        k += pr__pc(rej ? t & ~rej[w] : t, hw);
    }
    return k;
}

__attribute__((target("popcnt"))) static uint64_t pr__bits_hw(const uint64_t *m,
                                                              const uint64_t *rej, uint32_t n)
{
    return pr__bits_body(m, rej, n, true);
}

static uint64_t pr__bits(const pr_engine *eng, const uint64_t *m, const uint64_t *rej, uint32_t n)
{
    return eng->popcnt ? pr__bits_hw(m, rej, n) : pr__bits_body(m, rej, n, false);
}

/* int32 values equal to x in v[0, n): four lanes at a time (SSE2, the
 * x86-64 baseline; -O2 leaves a counting loop scalar), the tail one by one.
 * A lane's count stays below 2^31 (a block column has fewer elements). */
static uint64_t pr__count_eq32(const int32_t *v, uint32_t n, int32_t x)
{
    uint64_t k = 0;
    uint32_t i = 0;
#ifdef __SSE2__
    __m128i want = _mm_set1_epi32(x), acc = _mm_setzero_si128();
    for (; i + 4 <= n; i += 4)
        acc = _mm_sub_epi32(acc, _mm_cmpeq_epi32(_mm_loadu_si128((const __m128i *)(v + i)), want));
    uint32_t lane[4];
    _mm_storeu_si128((__m128i *)lane, acc);
    k = (uint64_t)lane[0] + lane[1] + lane[2] + lane[3];
#endif
    for (; i < n; i++)
        k += v[i] == x;
    return k;
}

/* Elements of output column c equal to PR_INDEX_OOV over [0, n), rows in
 * rej (a Criteo block: element = row) left out. */
static uint64_t pr__oov_count(const pr_engine *eng, pr_out *out, uint32_t c, uint32_t n,
                              const uint64_t *rej)
{
    uint64_t k = 0;
    if (eng->sparse_width == 4) {
        k = pr__count_eq32(pr_out_sparse32(out, c), n, PR_INDEX_OOV);
    } else {
        const int64_t *v = pr_out_sparse64(out, c);
        for (uint32_t i = 0; i < n; i++)
            k += v[i] == PR_INDEX_OOV;
    }
    for (uint32_t i = 0; rej && i < n; i++) /* rare: a block with rows the engine rejected */
        k -= pr_bit_test(rej, i) && pr_out_index(out, c, i) == PR_INDEX_OOV;
    return k;
}

/* A processed block's feature health into the stats (pr_engine_stats
 * col_values / col_oov, pr_engine_missing). Under dlrm the backend counts
 * col_oov itself (its unseen answers are indices of other values too). */
static void pr__health_add(pr_engine *eng, const pr_block *in, pr_out *out)
{
    const uint64_t *rej = out->n_rejected && !in->col_rows ? out->rejected : NULL;
    uint64_t nrej = rej ? pr__bits(eng, rej, NULL, in->rows) : 0;
    bool oov = eng->has_vocab && eng->spec.profile == PR_VOCAB_DEFAULT;
    bool by_feature = eng->spec.n_features > 0;
    size_t sw = pr_bitmap_words(in->scap), dw = pr_bitmap_words(in->cap);
    for (uint32_t c = 0; c < in->n_sparse; c++) {
        uint32_t n = pr_block_col_rows(in, c);
        uint64_t miss = pr__bits(eng, in->sparse_missing + c * sw, rej, n);
        eng->stats.col_values[c] += n - nrej - miss;
        if (oov)
            eng->stats.col_oov[c] += pr__oov_count(eng, out, c, n, rej);
        if (!by_feature)
            eng->missing[in->n_dense + c] += miss;
    }
    if (by_feature) {
        const pr_fside *sd = in->side;
        size_t aw = sd ? pr_bitmap_words(sd->cap) : 0;
        if (!sd || !sd->absent || in->rows > sd->cap) /* a side built without them */
            return;
        for (uint32_t i = 0; i < sd->n_schema && i < eng->n_missing; i++)
            eng->missing[i] += pr__bits(eng, sd->absent + i * aw, NULL, in->rows);
        return;
    }
    for (uint32_t d = 0; d < in->n_dense; d++)
        eng->missing[d] += pr__bits(eng, in->dense_missing + d * dw, rej, in->rows);
}

uint32_t pr_engine_missing(const pr_engine *eng, uint64_t *out, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        out[i] = i < eng->n_missing ? eng->missing[i] : 0;
    return eng->n_missing;
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
    if (!rc)
        pr__health_add(eng, in, out);
    if (eng->evict) {
        int nrc = pr__number_notices(eng, in, out);
        if (nrc && !rc)
            rc = pr_seterr(errstr, errstr_size, nrc, "engine: out of memory for notices");
    }
    eng->stats.rows_in += in->rows;
    eng->stats.rows_rejected += out->n_rejected;
    eng->stats.blocks++;
    if (eng->hook) {
        /* Indices handed out before a failure are made durable too: they may
         * already sit in the caller's output. */
        char jerr[256];
        int jrc = eng->hook(eng, eng->hook_data, jerr, sizeof(jerr));
        if (jrc && !rc)
            rc = pr_seterr(errstr, errstr_size, jrc, "%s", jerr);
    }
    return rc;
}

/* ---------------------------------------------------------------- a block in two halves */

struct pr_engine_split {
    const pr_backend_ops *ops;
    pr_backend_split *bs; /* NULL: the backend has no halves */
    bool whole;           /* the second half runs all of pr_engine_process */
    bool exclusive;       /* no second half runs while this first half does */
};

pr_engine_split *pr_engine_split_new(const pr_engine *eng)
{
    pr_engine_split *sp = calloc(1, sizeof(*sp));
    if (!sp)
        return NULL;
    sp->ops = eng->ops;
    sp->whole = true;
    if (eng->ops->split_new && !(sp->bs = eng->ops->split_new(eng->be))) {
        free(sp);
        return NULL;
    }
    return sp;
}

void pr_engine_split_free(pr_engine_split *sp)
{
    if (!sp)
        return;
    if (sp->bs)
        sp->ops->split_free(sp->bs);
    free(sp);
}

/* Only reads the engine: the checks pr_engine_process makes are made again
 * by it when they fail here (the block is then left whole). */
int pr_engine_process_par(const pr_engine *eng, const pr_block *in, pr_out *out,
                          pr_engine_split *sp)
{
    sp->whole = true;
    /* Serving: a shared table only looks up, like any other serving one. */
    if (!sp->bs || eng->evict || (eng->shared && !eng->serving) || eng->hook || !in || !out ||
        pr__check_block(eng, in, NULL, 0) || out->cap < in->rows || out->n_dense != in->n_dense ||
        out->n_sparse != in->n_sparse || out->sparse_width != eng->sparse_width ||
        (in->col_rows && (!out->col_rows || out->scap < in->scap)))
        return 0;
    out->rows = in->rows;
    if (in->col_rows)
        memcpy(out->col_rows, in->col_rows, (size_t)in->n_sparse * sizeof(uint32_t));
    out->n_rejected = 0;
    out->n_recycled = 0;
    sp->whole = eng->ops->process_par(eng->be, in, out, sp->bs, sp->exclusive) != 1;
    return 0;
}

void pr_engine_split_set_exclusive(pr_engine_split *sp, bool exclusive)
{
    sp->exclusive = exclusive;
}

bool pr_engine_split_whole(const pr_engine_split *sp)
{
    return sp->whole;
}

void pr_engine_process_seq_col(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                               uint32_t col)
{
    if (!sp->whole && col < eng->spec.n_sparse)
        eng->ops->process_seq_col(eng->be, in, out, sp->bs, col);
}

int pr_engine_process_seq_end(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                              char *errstr, size_t errstr_size)
{
    if (sp->whole)
        return pr_engine_process(eng, in, out, errstr, errstr_size);
    int rc = eng->ops->process_seq_end(eng->be, in, out, sp->bs, &eng->stats, errstr, errstr_size);
    if (!rc)
        pr__health_add(eng, in, out);
    eng->stats.rows_in += in->rows;
    eng->stats.rows_rejected += out->n_rejected;
    eng->stats.blocks++;
    sp->whole = true;
    return rc;
}

int pr_engine_process_seq(pr_engine *eng, const pr_block *in, pr_out *out, pr_engine_split *sp,
                          char *errstr, size_t errstr_size)
{
    for (uint32_t c = 0; !sp->whole && c < eng->spec.n_sparse; c++)
        pr_engine_process_seq_col(eng, in, out, sp, c);
    return pr_engine_process_seq_end(eng, in, out, sp, errstr, errstr_size);
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
    if (shared && eng->evict && eng->hook)
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

int pr_engine_vocab_serve(pr_engine *eng, int64_t unseen, char *errstr, size_t errstr_size)
{
    if (!eng->has_vocab)
        return 0;
    if (!eng->ops->vocab_freeze || !eng->ops->vocab_serve)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: backend %s cannot look up without inserting (use "
                         "engine.backend cpu)",
                         eng->ops->name);
    /* 4-byte indices would keep the low half of a larger one: another index */
    int64_t top = eng->sparse_width == 4 ? INT32_MAX : INT64_MAX;
    if (unseen < 0 || unseen > top)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "engine: the index of unseen values must be 0..%lld, not %lld",
                         (long long)top, (long long)unseen);
    eng->ops->vocab_freeze(eng->be, true);
    eng->ops->vocab_serve(eng->be, unseen);
    eng->serving = true;
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

int pr_engine_vocab_misses_keys(pr_engine *eng, uint32_t col, const uint64_t *keys, size_t n,
                                pr_vocab_miss_cb cb, void *opaque, char *errstr, size_t errstr_size)
{
    int rc = pr__shared_supported(eng, errstr, errstr_size);
    if (rc)
        return rc;
    if (col >= eng->spec.n_sparse)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "engine: no sparse column %u", col);
    if (!eng->ops->vocab_misses_keys)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "engine: backend %s cannot look up key columns (use engine.backend cpu)",
                         eng->ops->name);
    rc = eng->ops->vocab_misses_keys(eng->be, col, keys, n, cb, opaque);
    if (rc == PR_EINVAL)
        return pr_seterr(errstr, errstr_size, rc,
                         "engine: column %s: a key is not below its modulus %" PRIu64,
                         eng->spec.sparse[col].name, eng->spec.sparse[col].modulus);
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

bool pr_engine_vocab_read_concurrent(const pr_engine *eng)
{
    return eng->ops->vocab_read_concurrent;
}

/* ---------------------------------------------------------------- primitives for vocab/ */

uint64_t pr_engine_vocab_fingerprint(const pr_engine *eng)
{
    return eng->fingerprint;
}

int pr_engine_vocab_read_from(const pr_engine *eng, uint32_t col, int64_t from_index,
                              pr_vocab_cb cb, void *opaque)
{
    if (col >= eng->spec.n_sparse)
        return PR_EINVAL;
    if (!eng->has_vocab)
        return 0;
    if (eng->ops->vocab_read_from)
        return eng->ops->vocab_read_from(eng->be, col, from_index, cb, opaque);
    return eng->ops->vocab_read(eng->be, col, cb, opaque);
}

int pr_engine_vocab_load_column(pr_engine *eng, uint32_t col, const pr_vocab_entry *e, size_t n)
{
    if (col >= eng->spec.n_sparse)
        return PR_EINVAL;
    if (!eng->has_vocab)
        return 0;
    return eng->ops->vocab_load(eng->be, col, e, n);
}

pr_vocab_clock pr_engine_vocab_clock(const pr_engine *eng, uint32_t col)
{
    pr_vocab_clock zero = {0, 0};
    if (!eng->evict || col >= eng->spec.n_sparse)
        return zero;
    return eng->ops->vocab_clock(eng->be, col);
}

void pr_engine_vocab_set_clock(pr_engine *eng, uint32_t col, pr_vocab_clock clock)
{
    if (eng->evict && col < eng->spec.n_sparse)
        eng->ops->vocab_set_clock(eng->be, col, clock);
}

void pr_engine_vocab_block_log(const pr_engine *eng, uint32_t col, const pr_vocab_assignment **log,
                               size_t *n)
{
    *log = NULL;
    *n = 0;
    if (eng->evict && col < eng->spec.n_sparse)
        eng->ops->vocab_block_log(eng->be, col, log, n);
}

int pr_engine_vocab_notices_each(const pr_engine *eng, pr_notice_cb cb, void *opaque)
{
    int rc = 0;
    for (uint32_t i = 0; i < eng->n_pend && !rc; i++)
        rc = cb(&eng->pend[i], opaque);
    for (uint32_t i = 0; i < eng->n_recent && !rc; i++)
        rc = cb(&eng->recent[i], opaque);
    return rc;
}

uint32_t pr_engine_vocab_notices_held(const pr_engine *eng)
{
    return eng->n_pend + eng->n_recent;
}

void pr_engine_vocab_notices_clear(pr_engine *eng)
{
    eng->n_pend = 0;
}

int pr_engine_vocab_notices_queue(pr_engine *eng, const pr_recycled *r)
{
    return pr__pend_push(eng, r);
}

void pr_engine_vocab_notices_set_next(pr_engine *eng, uint64_t next)
{
    if (next)
        eng->notice_next = next;
}

bool pr_engine_vocab_is_shared(const pr_engine *eng)
{
    return eng->shared;
}

void pr_engine_set_block_hook(pr_engine *eng, pr_engine_block_hook hook,
                              void (*release)(void *opaque), void *opaque)
{
    if (eng->hook_release)
        eng->hook_release(eng->hook_data);
    eng->hook = hook;
    eng->hook_release = hook ? release : NULL;
    eng->hook_data = hook ? opaque : NULL;
}

void *pr_engine_block_hook_data(const pr_engine *eng, pr_engine_block_hook hook)
{
    return eng->hook && eng->hook == hook ? eng->hook_data : NULL;
}
