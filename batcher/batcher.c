/*
 * batcher.c — the freshness-aware batcher (contract: pr_batcher.h).
 *
 * Shape: one batch under construction (`cur`, tensors with stride
 * batch.size) that rows are copied into column by column; at emission the
 * columns are compacted to stride `rows` so the tensors can go to protobuf
 * and .npy without another copy. Emitted batches wait in a ring indexed by
 * sequence number until every sink acknowledged them; each row carries a
 * handle into the per-partition offset queues (offsets.c) which the ack
 * releases.
 *
 * Ordering `partition` copies rows straight into `cur` in arrival order.
 * Ordering `event_time` parks rows in a pool ordered by a min-heap on
 * (event_time, partition, offset) and moves them into `cur` once the
 * watermark passes them; a FIFO over the same rows in arrival order finds
 * the ones whose max_delay_ms ran out, which force the watermark forward
 * (so a silent partition delays output by at most max_delay_ms).
 *
 * Popular split (batch.split: popular, issue 14): the caller flags rows
 * whose sparse indices all lie in the hot sets (pr_batcher_add_split). Such
 * rows go to a second batch under construction, so there are two builds
 * (regular, popular), each with its own deadline; both draw sequence
 * numbers from the one counter and share the offset queues, which already
 * take acks in any order. Rows are routed in arrival order, so each stream
 * keeps offset order per partition, and a row enters exactly one build.
 *
 * Recycled-index notices (issue 14) ride with the rows. Under partition
 * order they are exact in the merged stream (issue 19): every notice goes
 * into the regular build, at the build row it precedes. With the popular
 * split two things keep that exact: a row flagged popular that uses an index
 * whose notice still waits in the regular build (`pend_keys`) is demoted to
 * the regular stream, so it cannot go out before its notice; and a popular
 * build holding rows of the old value when a notice arrives is emitted at
 * once, so those rows go out before it. Under event_time the rows are
 * reordered, so a notice waits in the event-time heap as an entry of its
 * own, just before its row, and rows of the new value are held behind the
 * old value's (see "notices under event_time"): exact there too.
 *
 * Restored notices (a restart: cfg.notice_restart_next) that were
 * acknowledged before it (below cfg.notice_floor, or in cfg.notice_acked)
 * are dropped; the others wait in a backlog sorted by (column, index) and
 * go out at most batch.reannounce_max per batch at row 0, lowest numbers
 * first (`bl_ord`), or earlier, in front of the first row that uses their
 * index (a binary search per value while the backlog lasts; under
 * event_time `loose` carries them to row 0 of the next batch emitted,
 * which is before that row). Every acknowledged batch's numbers join
 * `acked` (notice_floor.c), so a start that stops with part of the backlog
 * acknowledged saves exactly which (pr_batcher_notice_acks); sending the
 * row-0 share in number order keeps that set a few ranges: the notices rows
 * took ahead, and batches acknowledged out of order.
 *
 * batch.popular_min_rows: a popular build that reaches its deadline (or a
 * flush) with fewer rows is merged into the regular build in arrival order
 * (`ser`, a counter stamped on every row as it enters a build), which keeps
 * each stream's per-partition order, and the regular build goes out.
 *
 * Single-threaded except the stats snapshot, which is published under a
 * mutex at the end of each public call.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "batcher_int.h"
#include "pr_env.h"
#include "pr_log.h"

#define NS_PER_MS 1000000LL

/* ---------------------------------------------------------------- batches */

static size_t pr__align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* ---------------------------------------------------------------- tensor pool
 *
 * Issue 21: a batch's tensor block (~1.3 MB for 8192 Criteo rows) freed
 * after its acks and a fresh one allocated for the next batch cost the
 * worker page faults on every first write (the column copies), about as
 * much as the copies themselves. The batcher keeps up to PR__TPOOL_MAX
 * blocks of its one size that acked batches gave back, and takes them
 * first. The pool outlives the batcher while batches hold it (refs); the
 * last one frees it. The contents of a reused block are overwritten before
 * emission exactly as a fresh one's (never zeroed either).
 * PIPEREC_BATCHER_RECYCLE=0: every block fresh (the baseline). */

#define PR__TPOOL_MAX 8

typedef struct pr__tpool {
    pthread_mutex_t lock;
    size_t size;
    int refs; /* the batcher + each batch whose block came from here */
    int n;
    void *blk[PR__TPOOL_MAX];
} pr__tpool;

static pr__tpool *pr__tpool_new(size_t size)
{
    pr__tpool *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    pthread_mutex_init(&t->lock, NULL);
    t->size = size;
    t->refs = 1;
    return t;
}

/* Drop one reference; with a block (or NULL), give it back first. */
static void pr__tpool_put(pr__tpool *t, void *blk)
{
    pthread_mutex_lock(&t->lock);
    if (blk && t->n < PR__TPOOL_MAX) {
        t->blk[t->n++] = blk;
        blk = NULL;
    }
    bool last = --t->refs == 0;
    pthread_mutex_unlock(&t->lock);
    free(blk);
    if (!last)
        return;
    for (int i = 0; i < t->n; i++)
        free(t->blk[i]);
    pthread_mutex_destroy(&t->lock);
    free(t);
}

void *pr__tpool_take(pr__tpool *t, size_t need)
{
    if (need > t->size)
        return NULL;
    void *blk = NULL;
    pthread_mutex_lock(&t->lock);
    if (t->n)
        blk = t->blk[--t->n];
    pthread_mutex_unlock(&t->lock);
    return blk ? blk : aligned_alloc(64, t->size);
}

static void pr__tpool_ref(pr__tpool *t)
{
    pthread_mutex_lock(&t->lock);
    t->refs++;
    pthread_mutex_unlock(&t->lock);
}

/* A block of t->size bytes (64-aligned) and a reference for its batch. */
static void *pr__tpool_get(pr__tpool *t)
{
    void *blk = pr__tpool_take(t, t->size);
    if (blk)
        pr__tpool_ref(t);
    return blk;
}

static size_t pr__tensor_bytes(uint32_t cap, uint16_t n_dense, uint16_t n_sparse, uint8_t w)
{
    size_t total = pr__align64((size_t)cap * 4) + pr__align64((size_t)cap * n_dense * 4) +
                   pr__align64((size_t)cap * n_sparse * w);
    return total ? total : 64;
}

/* Allocate a batch whose tensors hold `cap` rows; rows is set to cap. With
 * a pool (of this size), the tensor block comes from it. */
static pr_batch *pr__batch_alloc(const char *pipeline, uint32_t cap, uint16_t n_dense,
                                 uint16_t n_sparse, uint8_t w, bool zero, pr__tpool *pool)
{
    pr_batch *bt = calloc(1, sizeof(*bt));
    if (!bt)
        return NULL;
    size_t lab = pr__align64((size_t)cap * 4);
    size_t den = pr__align64((size_t)cap * n_dense * 4);
    size_t total = pr__tensor_bytes(cap, n_dense, n_sparse, w);
    uint8_t *mem = pool ? pr__tpool_get(pool) : aligned_alloc(64, total);
    bt->tpool = mem ? pool : NULL;
    if (!mem) {
        free(bt);
        return NULL;
    }
    if (zero)
        memset(mem, 0, total);
    snprintf(bt->pipeline, sizeof(bt->pipeline), "%s", pipeline ? pipeline : "");
    bt->labels = (int32_t *)mem;
    bt->dense = (float *)(mem + lab);
    bt->sparse = mem + lab + den;
    bt->rows = cap;
    bt->n_dense = n_dense;
    bt->n_sparse = n_sparse;
    bt->sparse_width = w;
    bt->refcnt = 1;
    return bt;
}

pr_batch *pr_batch_new(const char *pipeline, uint32_t rows, uint16_t n_dense, uint16_t n_sparse,
                       uint8_t sparse_width)
{
    if (sparse_width != 4 && sparse_width != 8)
        return NULL;
    pr_batch *bt = pr__batch_alloc(pipeline, rows, n_dense, n_sparse, sparse_width, true, NULL);
    if (!bt)
        return NULL;
    bt->vocab_sizes = calloc(n_sparse ? n_sparse : 1, sizeof(uint64_t));
    if (!bt->vocab_sizes) {
        pr_batch_unref(bt);
        return NULL;
    }
    bt->bytes = pr_batch_labels_bytes(bt) + pr_batch_dense_bytes(bt) + pr_batch_sparse_bytes(bt);
    return bt;
}

/* A jagged batch whose row tensors (label_mat | dense_mat | lengths, one
 * 64-byte aligned block starting at label_mat) hold `cap` rows and whose
 * values hold `vcap` values; rows = cap, n_values = 0, names zeroed. */
static pr_batch *pr__jagged_alloc(const char *pipeline, uint32_t cap, uint16_t n_labels,
                                  uint16_t n_dense, uint16_t n_feat, uint64_t vcap, bool zero)
{
    pr_batch *bt = calloc(1, sizeof(*bt));
    if (!bt)
        return NULL;
    size_t lab = pr__align64((size_t)cap * n_labels * 4);
    size_t den = pr__align64((size_t)cap * n_dense * 4);
    size_t len = pr__align64((size_t)cap * n_feat * 4);
    size_t total = lab + den + len;
    uint8_t *mem = aligned_alloc(64, total ? total : 64);
    bt->values = malloc((vcap ? vcap : 1) * sizeof(int64_t));
    bt->feature_keys = calloc(n_feat ? n_feat : 1, PR_NAME_MAX);
    bt->label_mat = (float *)mem;
    if (!mem || !bt->values || !bt->feature_keys) {
        bt->refcnt = 1;
        pr_batch_unref(bt);
        return NULL;
    }
    if (zero) {
        memset(mem, 0, total);
        memset(bt->values, 0, vcap * sizeof(int64_t));
    }
    snprintf(bt->pipeline, sizeof(bt->pipeline), "%s", pipeline ? pipeline : "");
    bt->dense_mat = (float *)(mem + lab);
    bt->lengths = (int32_t *)(mem + lab + den);
    bt->jagged = 1;
    bt->rows = cap;
    bt->n_labels = n_labels;
    bt->n_dense = n_dense;
    bt->n_sparse = n_feat;
    bt->sparse_width = 8;
    bt->refcnt = 1;
    return bt;
}

pr_batch *pr_batch_new_jagged(const char *pipeline, uint32_t rows, uint16_t n_labels,
                              uint16_t n_dense, uint16_t n_feat, uint64_t n_values)
{
    pr_batch *bt = pr__jagged_alloc(pipeline, rows, n_labels, n_dense, n_feat, n_values, true);
    if (!bt)
        return NULL;
    bt->n_values = n_values;
    bt->vocab_sizes = calloc(n_feat ? n_feat : 1, sizeof(uint64_t));
    if (!bt->vocab_sizes) {
        pr_batch_unref(bt);
        return NULL;
    }
    bt->bytes = pr_batch_label_mat_bytes(bt) + pr_batch_dense_mat_bytes(bt) +
                pr_batch_lengths_bytes(bt) + pr_batch_values_bytes(bt);
    return bt;
}

pr_batch *pr_batch_ref(pr_batch *b)
{
    __atomic_add_fetch(&b->refcnt, 1, __ATOMIC_RELAXED);
    return b;
}

void pr_batch_unref(pr_batch *b)
{
    if (!b || __atomic_sub_fetch(&b->refcnt, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (b->tpool) /* the tensor block starts with labels (Criteo) */
        pr__tpool_put(b->tpool, b->labels);
    else
        free(b->labels);
    free(b->label_mat); /* ... or with label_mat (jagged) */
    free(b->values);
    free(b->weights);
    free(b->weighted);
    free(b->feature_keys);
    free(b->feature_tables);
    free(b->label_names);
    free(b->dense_names);
    for (uint32_t i = 0; i < b->n_topics; i++)
        free(b->topics[i]);
    free(b->topics);
    free(b->ranges);
    free(b->vocab_sizes);
    free(b->recycled);
    if (b->pbpool)
        pr__tpool_put(b->pbpool, b->pb_pooled ? b->pb : NULL);
    if (!b->pb_pooled)
        free(b->pb);
    free(b->priv_rows);
    free(b);
}

/* ---------------------------------------------------------------- histograms */

static const double fill_bounds[] = {0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0};
static const double sec_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                    0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};

/* ---------------------------------------------------------------- batcher */

/* Release order of a pending entry (event_time): (et, part, off) of the
 * row itself, or of the barrier it was raised behind (a notice's row, see
 * "Notices under event_time" below); then `ser` (arrival order) and `kind`
 * (a notice just before the row it precedes). */
typedef struct pr__pkey {
    int64_t et;
    int64_t off;
    int32_t part;
    uint8_t kind; /* PR__PK_NOTE before PR__PK_ROW */
    uint64_t ser;
    uint64_t sub; /* notices in front of one row: in number order */
} pr__pkey;

enum { PR__PK_NOTE = 0, PR__PK_ROW = 1 };

typedef struct pend_meta {
    int64_t et;
    int64_t off;
    int64_t arrival;
    int32_t key;
    uint32_t serial;
    bool in_use;
    bool note;   /* a notice waiting for its place (p_note[slot]), not a row */
    uint8_t cls; /* PR__REGULAR or PR__POPULAR */
    uint64_t hv; /* hot-set version the row was judged against */
    pr__rowh h;
} pend_meta;

/* A growable list of notices. */
typedef struct pr__notes {
    pr_recycled *v;
    uint32_t n, cap;
} pr__notes;

static int pr__notes_push(pr__notes *l, const pr_recycled *r, uint32_t row)
{
    if (l->n == l->cap) {
        uint32_t nc = l->cap ? l->cap * 2 : 64;
        pr_recycled *p = realloc(l->v, (size_t)nc * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        l->v = p;
        l->cap = nc;
    }
    l->v[l->n] = *r;
    l->v[l->n++].row = row;
    return 0;
}

/* A set of (column, index) keys: open addressing, linear probing, the key
 * + 1 stored so that 0 marks an empty slot. Keys of indices beyond 2^48
 * may collide; a false hit only demotes a row or cuts a batch early. */
typedef struct pr__kset {
    uint64_t *k;
    uint32_t cap, n; /* cap: 0 or a power of two */
} pr__kset;

static uint64_t pr__kset_key(uint32_t col, int64_t index)
{
    return ((uint64_t)col << 48 ^ (uint64_t)index) + 1;
}

static uint32_t pr__kset_slot(const pr__kset *s, uint64_t key)
{
    uint32_t m = s->cap - 1, i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m;
    while (s->k[i] && s->k[i] != key)
        i = (i + 1) & m;
    return i;
}

static int pr__kset_add(pr__kset *s, uint64_t key)
{
    if ((s->n + 1) * 2 > s->cap) {
        pr__kset g = {calloc(s->cap ? s->cap * 2 : 64, sizeof(uint64_t)), s->cap ? s->cap * 2 : 64,
                      0};
        if (!g.k)
            return PR_ENOMEM;
        for (uint32_t i = 0; i < s->cap; i++)
            if (s->k[i]) {
                g.k[pr__kset_slot(&g, s->k[i])] = s->k[i];
                g.n++;
            }
        free(s->k);
        *s = g;
    }
    uint32_t i = pr__kset_slot(s, key);
    if (!s->k[i]) {
        s->k[i] = key;
        s->n++;
    }
    return 0;
}

static bool pr__kset_has(const pr__kset *s, uint64_t key)
{
    return s->n && s->k[pr__kset_slot(s, key)] == key;
}

static void pr__kset_clear(pr__kset *s)
{
    if (s->n)
        memset(s->k, 0, (size_t)s->cap * sizeof(uint64_t));
    s->n = 0;
}

/* Under event_time, per (column, index) key (pr__kset_key): `v`, an upper
 * bound of the release keys of the pending entries that use the index (rows
 * and notices), and the index's newest notice (`slot`/`serial`, when `note`;
 * while it waits, rows using the index sort behind `v`, see pr__et_live).
 * The same probing as pr__kset. */
typedef struct pr__kmap_ent {
    uint64_t key; /* 0 = empty */
    uint32_t slot, serial;
    bool note;
    uint64_t gen; /* b->rel_gen when v last grew */
    pr__pkey v;
} pr__kmap_ent;

typedef struct pr__kmap {
    pr__kmap_ent *e;
    uint32_t cap, n; /* cap: 0 or a power of two */
} pr__kmap;

static uint32_t pr__kmap_slot(const pr__kmap *m, uint64_t key)
{
    uint32_t mask = m->cap - 1, i = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
    while (m->e[i].key && m->e[i].key != key)
        i = (i + 1) & mask;
    return i;
}

static pr__kmap_ent *pr__kmap_find(const pr__kmap *m, uint64_t key)
{
    if (!m->n)
        return NULL;
    pr__kmap_ent *e = &m->e[pr__kmap_slot(m, key)];
    return e->key == key ? e : NULL;
}

/* Room for `extra` more entries. Growing keeps only the entries keep()
 * accepts, so stale ones do not pile up. 0 or PR_ENOMEM. */
static int pr__kmap_reserve(pr__kmap *m, uint32_t extra,
                            bool (*keep)(const void *, const pr__kmap_ent *), const void *ctx)
{
    if ((m->n + extra) * 2 > m->cap) {
        uint32_t kept = 0;
        for (uint32_t i = 0; i < m->cap; i++)
            kept += m->e[i].key && (!keep || keep(ctx, &m->e[i]));
        uint32_t nc = 64;
        while ((kept + extra) * 2 > nc / 2)
            nc *= 2;
        pr__kmap g = {calloc(nc, sizeof(pr__kmap_ent)), nc, 0};
        if (!g.e)
            return PR_ENOMEM;
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->e[i].key && (!keep || keep(ctx, &m->e[i]))) {
                g.e[pr__kmap_slot(&g, m->e[i].key)] = m->e[i];
                g.n++;
            }
        free(m->e);
        *m = g;
    }
    return 0;
}

/* The entry of `key`, inserted (zeroed but for the key) when absent. Room
 * must have been made (pr__kmap_reserve): entries never move here. */
static pr__kmap_ent *pr__kmap_put(pr__kmap *m, uint64_t key)
{
    pr__kmap_ent *e = &m->e[pr__kmap_slot(m, key)];
    if (!e->key) {
        memset(e, 0, sizeof(*e));
        e->key = key;
        m->n++;
    }
    return e;
}

/* The two streams of batch.split: popular. */
enum { PR__REGULAR = 0, PR__POPULAR = 1, PR__NCLASS = 2 };

/* One batch under construction: tensors with stride batch.size,
 * `cur->rows` = rows filled, row metadata beside them. */
typedef struct pr__build {
    pr_batch *cur;
    int32_t *key;
    int64_t *off;
    int64_t *et;
    pr__rowh *h;
    uint64_t *ser;        /* per row: order of entry into a build (batch.popular_min_rows merge) */
    uint64_t hot_version; /* latest hot-set version of the rows in cur */
    int64_t oldest;       /* min arrival (mono ns) of the rows in cur */
    uint32_t *idx;        /* scratch: rows of the current pr_out bound for cur */
    pr__notes notes;      /* notices for cur, row = row of cur they precede */
    pr__jbuild jb;        /* declared schema: the values of cur's rows (batch_jagged.c) */
} pr__build;

typedef struct pr__blord {
    uint64_t number;
    uint32_t pos; /* in backlog.v */
} pr__blord;

typedef struct fifo_ent {
    uint32_t slot;
    uint32_t serial;
} fifo_ent;

struct pr_batcher {
    pr_batcher_cfg cfg;
    char pipeline[PR_NAME_MAX];
    char replica[PR_REPLICA_MAX];
    char **topics;
    size_t n_topics;
    const pr_clock *clock;
    pr__jag *jag;     /* declared schema (cfg.schema): jagged rows; NULL = Criteo */
    int jag_err;      /* a failed jagged row copy (ENOMEM), returned by the public call */
    size_t row_bytes; /* tensor bytes per row (jagged: an estimate, 1 value per feature) */
    int64_t delay_ns;
    pr__offsets offs;

    /* batches under construction: [PR__REGULAR], and [PR__POPULAR] under
     * batch.split popular (its arrays NULL otherwise) */
    pr__build bld[PR__NCLASS];
    int n_class;
    pr__notes loose;           /* notices for the next emitted batch (event_time) */
    pr__kset pend_keys;        /* split: (column, index) of the notices in the regular build */
    pr__notes backlog;         /* restored notices not sent yet, by (column, index, number);
                                  number 0 = sent */
    pr__blord *bl_ord;         /* backlog positions by number: the row-0 spreading's order */
    uint32_t bl_ocap, bl_nord; /* bl_ord: allocated, valid entries */
    uint32_t bl_next, bl_live; /* bl_ord: where the row-0 spreading goes on; live entries */
    pr__ackset acked;          /* notices acknowledged above the floor (pr_batcher_notice_acks) */
    pr__notes scratch;         /* a block's notices without the restored ones */
    bool hint_live;            /* no block added yet: notice_floor also holds the restored */
    bool row_runs;     /* runs of rows of one partition at once (PIPEREC_BATCHER_RUNS=0: per row) */
    bool prof;         /* PIPEREC_WORKER_PROF=1: thread CPU per phase (pr_batcher_prof) */
    pr__tpool *tpool;  /* tensor blocks of acked batches (NULL: jagged, or RECYCLE=0) */
    pr__tpool *pbpool; /* their encodings' blocks (tensors + 64 KiB for the rest) */
    uint64_t prof_ns[PR_BATCHER_PROF__COUNT];
    uint64_t next_ser;
    uint64_t hot_version; /* pr_batcher_hot_version */

    uint64_t next_seq;

    /* emitted, unacked batches: ring indexed by seq - ua_base */
    pr_batch **ua;
    size_t ua_cap, ua_head, ua_len;
    uint64_t ua_base;
    uint64_t n_unacked;
    uint64_t unacked_bytes;

    /* event_time: pending row pool, heap, arrival FIFO */
    size_t prow_bytes;
    uint8_t *p_data;
    pend_meta *p_meta;
    uint32_t p_cap;
    uint32_t *p_free;
    uint32_t p_nfree;
    uint32_t *heap;
    size_t heap_len;
    fifo_ent *fifo;
    size_t f_cap, f_head, f_len;
    bool wm_set;
    int64_t wm;
    /* event_time notices (see "Notices under event_time"): the notices
     * waiting in the heap (p_note[slot] of entries with note set), the
     * barriers of their indices, the barriers of the block being added, and
     * a row's (column, index) keys */
    pr_recycled *p_note;
    pr__pkey *p_key; /* heap order of each pool slot */
    uint32_t heap_notes;
    uint64_t pser; /* arrival serial of pending entries */
    pr__kmap et_last;
    bool et_track;         /* et_last kept (from the first notice on) */
    pr__kmap_ent **et_ent; /* a row's entries (pr__et_row_key) */
    uint32_t et_ent_cap;
    uint64_t rel_gen; /* completed releases */
    int64_t rel_wm;   /* the watermark the last one released up to */
    uint64_t *rk;
    uint32_t rk_n, rk_cap;

    pr_batcher_stats st; /* pipeline thread's copy */
    pthread_mutex_t mu;
    pr_batcher_stats pub; /* published under mu */
};

static uint64_t pr__built_rows(const pr_batcher *b)
{
    uint64_t n = 0;
    for (int k = 0; k < b->n_class; k++)
        n += b->bld[k].cur ? b->bld[k].cur->rows : 0;
    return n;
}

static void pr__publish(pr_batcher *b)
{
    b->st.buffered_rows = pr__built_rows(b) + b->heap_len - b->heap_notes;
    b->st.buffered_bytes = b->st.buffered_rows * b->row_bytes;
    b->st.unacked_batches = b->n_unacked;
    b->st.unacked_bytes = b->unacked_bytes;
    b->st.inflight_bytes = b->st.buffered_bytes + b->unacked_bytes;
    b->st.last_seq = b->next_seq - 1;
    b->st.popular_share_ppm =
        b->st.rows_out ? (uint64_t)((double)b->st.rows_out_popular * 1e6 / b->st.rows_out) : 0;
    b->st.watermark_ms = b->wm_set ? b->wm : INT64_MIN;
    pthread_mutex_lock(&b->mu);
    b->pub = b->st;
    pthread_mutex_unlock(&b->mu);
}

void pr_batcher_get_stats(pr_batcher *b, pr_batcher_stats *st)
{
    pthread_mutex_lock(&b->mu);
    *st = b->pub;
    pthread_mutex_unlock(&b->mu);
}

uint64_t pr_batcher_inflight_bytes(const pr_batcher *b)
{
    uint64_t buffered = pr__built_rows(b) + b->heap_len - b->heap_notes;
    return buffered * b->row_bytes + b->unacked_bytes;
}

uint64_t pr_batcher_unacked_batches(const pr_batcher *b)
{
    return b->n_unacked;
}

static uint64_t pr__notes_min(const pr_recycled *v, uint32_t n, uint64_t m)
{
    for (uint32_t i = 0; i < n; i++)
        if (v[i].number < m)
            m = v[i].number;
    return m;
}

uint64_t pr_batcher_notice_floor(const pr_batcher *b)
{
    uint64_t m = pr__notes_min(b->loose.v, b->loose.n, UINT64_MAX);
    if (b->hint_live)
        m = b->cfg.notice_floor > 1 ? b->cfg.notice_floor : 1;
    for (uint32_t i = 0; b->bl_live && i < b->backlog.n; i++)
        if (b->backlog.v[i].number && b->backlog.v[i].number < m)
            m = b->backlog.v[i].number;
    for (int k = 0; k < b->n_class; k++)
        m = pr__notes_min(b->bld[k].notes.v, b->bld[k].notes.n, m);
    for (size_t i = 0; b->heap_notes && i < b->heap_len; i++)
        if (b->p_meta[b->heap[i]].note)
            m = pr__notes_min(&b->p_note[b->heap[i]], 1, m);
    for (size_t i = 0; i < b->ua_len; i++) {
        const pr_batch *bt = b->ua[(b->ua_head + i) % b->ua_cap];
        if (bt)
            m = pr__notes_min(bt->recycled, bt->n_recycled, m);
    }
    return m;
}

void pr_batcher_notice_acks(pr_batcher *b, uint64_t top, pr_notice_acks *out)
{
    uint64_t floor = pr_batcher_notice_floor(b);
    if (floor > top)
        floor = top;
    pr__ackset_clip(&b->acked, floor, top);
    *out = (pr_notice_acks){.floor = floor, .r = b->acked.r, .n = b->acked.n};
}

uint32_t pr_batcher_reannounce_max(const pr_batcher *b)
{
    return b->cfg.batch.reannounce_max ? b->cfg.batch.reannounce_max : PR_BATCH_REANNOUNCE_MAX;
}

uint64_t pr_batcher_notice_top(const pr_batcher *b, uint64_t recycled_total,
                               uint32_t engine_pending)
{
    uint64_t top = recycled_total + 1 - engine_pending;
    if (b->hint_live && top < b->cfg.notice_restart_next)
        top = b->cfg.notice_restart_next;
    return top;
}

static int pr__ensure_cur(pr_batcher *b, int cls)
{
    pr__build *bd = &b->bld[cls];
    if (bd->cur)
        return 0;
    const pr_batcher_cfg *c = &b->cfg;
    /* Not zeroed: every row is written before emission, and emission compacts. */
    bd->cur = b->jag ? pr__jag_batch(b->jag, b->pipeline, c->batch.size)
                     : pr__batch_alloc(b->pipeline, c->batch.size, c->n_dense, c->n_sparse,
                                       c->sparse_width, false, b->tpool);
    bd->h = malloc((size_t)c->batch.size * sizeof(*bd->h));
    if (!bd->cur || !bd->h) {
        pr_batch_unref(bd->cur);
        free(bd->h);
        bd->cur = NULL;
        bd->h = NULL;
        return PR_ENOMEM;
    }
    bd->cur->popular = cls == PR__POPULAR;
    bd->cur->rows = 0;
    if (b->pbpool) { /* the encoding's block (pr_batch_encode) */
        pr__tpool_ref(b->pbpool);
        bd->cur->pbpool = b->pbpool;
    }
    return 0;
}

static int pr__build_init(pr__build *bd, size_t n)
{
    bd->key = malloc(n * sizeof(*bd->key));
    bd->off = malloc(n * sizeof(*bd->off));
    bd->et = malloc(n * sizeof(*bd->et));
    bd->idx = malloc(n * sizeof(*bd->idx));
    bd->ser = malloc(n * sizeof(*bd->ser));
    return bd->key && bd->off && bd->et && bd->idx && bd->ser ? 0 : PR_ENOMEM;
}

static void pr__build_fini(pr__build *bd)
{
    pr_batch_unref(bd->cur);
    free(bd->h);
    free(bd->key);
    free(bd->off);
    free(bd->et);
    free(bd->idx);
    free(bd->ser);
    free(bd->notes.v);
}

int pr_batcher_new(const pr_batcher_cfg *cfg, pr_batcher **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    if (!cfg || !cfg->on_emit)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batcher: on_emit callback is required");
    if (cfg->batch.size < 1)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batch.size: must be >= 1");
    if (cfg->batch.max_delay_ms < 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batch.max_delay_ms: must be >= 0");
    if (cfg->sparse_width != 4 && cfg->sparse_width != 8)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "batcher: sparse_width must be 4 or 8, got %u", cfg->sparse_width);
    if (cfg->batch.ordering != PR_BATCH_ORDER_PARTITION &&
        cfg->batch.ordering != PR_BATCH_ORDER_EVENT_TIME)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batch.ordering: unknown value %d",
                         (int)cfg->batch.ordering);
    if (cfg->batch.allowed_lateness_ms < 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batch.allowed_lateness_ms: must be >= 0");
    if (cfg->batch.split != PR_BATCH_SPLIT_NONE && cfg->batch.split != PR_BATCH_SPLIT_POPULAR)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "batch.split: unknown value %d",
                         (int)cfg->batch.split);
    if (cfg->batch.popular_min_rows > cfg->batch.size)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "batch.popular_min_rows: %u is more than batch.size %u (a popular "
                         "batch could never go out)",
                         cfg->batch.popular_min_rows, cfg->batch.size);

    pr_batcher *b = calloc(1, sizeof(*b));
    if (!b)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "batcher: out of memory");
    b->cfg = *cfg;
    snprintf(b->pipeline, sizeof(b->pipeline), "%s", cfg->pipeline ? cfg->pipeline : "");
    b->cfg.pipeline = b->pipeline;
    snprintf(b->replica, sizeof(b->replica), "%s", cfg->replica ? cfg->replica : "");
    b->cfg.replica = b->replica;
    b->clock = cfg->clock ? cfg->clock : pr_clock_real();
    b->row_bytes = 4 + (size_t)cfg->n_dense * 4 + (size_t)cfg->n_sparse * cfg->sparse_width;
    b->prow_bytes = (b->row_bytes + 7) & ~(size_t)7;
    b->cfg.schema = NULL; /* copied into b->jag below */
    if (cfg->schema) {
        if (pr__jag_new(cfg->schema, &b->jag) < 0) {
            free(b);
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "batcher: out of memory");
        }
        b->row_bytes = pr__jag_row_bytes(b->jag) + (size_t)cfg->schema->n_feat * 8;
        b->prow_bytes = (pr__jag_row_bytes(b->jag) + 7) & ~(size_t)7;
    }
    b->delay_ns = cfg->batch.max_delay_ms * NS_PER_MS;
    b->next_seq = 1;
    b->ua_base = 1;
    b->hint_live = cfg->notice_restart_next > 0;
    b->cfg.notice_acked = NULL; /* copied into b->acked below */
    b->cfg.n_notice_acked = 0;
    pr__offsets_init(&b->offs);
    pthread_mutex_init(&b->mu, NULL);
    const size_t n_fill = sizeof(fill_bounds) / sizeof(fill_bounds[0]);
    const size_t n_sec = sizeof(sec_bounds) / sizeof(sec_bounds[0]);
    (void)pr_hist_snapshot_init(&b->st.fill_ratio, fill_bounds, n_fill);
    (void)pr_hist_snapshot_init(&b->st.event_to_emit_s, sec_bounds, n_sec);
    (void)pr_hist_snapshot_init(&b->st.wait_s, sec_bounds, n_sec);
    (void)pr_hist_snapshot_init(&b->st.emit_to_ack_s, sec_bounds, n_sec);

    size_t n = cfg->batch.size;
    b->n_class = cfg->batch.split == PR_BATCH_SPLIT_POPULAR ? PR__NCLASS : 1;
    b->row_runs = pr_env_switch("PIPEREC_BATCHER_RUNS", true); /* 0: per row (the baseline) */
    /* PIPEREC_BATCHER_RECYCLE=0: fresh blocks (the baseline) */
    if (!b->jag && pr_env_switch("PIPEREC_BATCHER_RECYCLE", true) &&
        (!(b->tpool = pr__tpool_new(pr__tensor_bytes(cfg->batch.size, cfg->n_dense, cfg->n_sparse,
                                                     cfg->sparse_width))) ||
         !(b->pbpool = pr__tpool_new(b->tpool->size + 65536))))
        goto nomem;
    b->prof = pr_env_switch("PIPEREC_WORKER_PROF", false);
    bool built = true;
    for (int k = 0; k < b->n_class; k++)
        if (pr__build_init(&b->bld[k], n) < 0 ||
            (b->jag && pr__jbuild_init(b->jag, &b->bld[k].jb) < 0))
            built = false;
    if (cfg->n_topics) {
        b->topics = calloc(cfg->n_topics, sizeof(char *));
        if (b->topics) {
            b->n_topics = cfg->n_topics;
            for (size_t i = 0; i < cfg->n_topics; i++)
                if (!(b->topics[i] = strdup(cfg->topics[i] ? cfg->topics[i] : "")))
                    goto nomem;
        }
    }
    b->cfg.topics = NULL;
    if (!built || (cfg->n_topics && !b->topics) || pr__ensure_cur(b, PR__REGULAR) < 0 ||
        pr__ackset_seed(&b->acked, cfg->notice_acked, cfg->n_notice_acked) < 0)
        goto nomem;
    pr__publish(b);
    *out = b;
    return 0;
nomem:
    pr_batcher_free(b);
    return pr_seterr(errstr, errstr_size, PR_ENOMEM, "batcher: out of memory");
}

void pr_batcher_free(pr_batcher *b)
{
    if (!b)
        return;
    for (int k = 0; k < PR__NCLASS; k++) {
        if (b->jag)
            pr__jbuild_fini(b->jag, &b->bld[k].jb);
        pr__build_fini(&b->bld[k]);
    }
    pr__jag_free(b->jag);
    for (size_t i = 0; i < b->ua_len; i++)
        pr_batch_unref(b->ua[(b->ua_head + i) % b->ua_cap]);
    free(b->ua);
    free(b->p_data);
    free(b->p_meta);
    free(b->p_free);
    free(b->heap);
    free(b->fifo);
    free(b->p_note);
    free(b->p_key);
    free(b->et_last.e);
    free(b->et_ent);
    free(b->rk);
    for (size_t i = 0; i < b->n_topics; i++)
        free(b->topics[i]);
    free(b->topics);
    free(b->loose.v);
    free(b->pend_keys.k);
    free(b->backlog.v);
    free(b->bl_ord);
    pr__ackset_fini(&b->acked);
    free(b->scratch.v);
    pr__offsets_fini(&b->offs);
    if (b->tpool) /* after every batch of ours above: the blocks go back first */
        pr__tpool_put(b->tpool, NULL);
    if (b->pbpool)
        pr__tpool_put(b->pbpool, NULL);
    pthread_mutex_destroy(&b->mu);
    free(b);
}

/* ---------------------------------------------------------------- emission */

static int pr__range_cmp(const void *a, const void *b)
{
    int32_t x = ((const pr_batch_range *)a)->partition, y = ((const pr_batch_range *)b)->partition;
    return (x > y) - (x < y);
}

static int pr__build_ranges(const pr__build *bd, pr_batch *bt)
{
    uint32_t n = bt->rows, nr = 0, cap = 4;
    pr_batch_range *r = malloc(cap * sizeof(*r));
    if (!r)
        return PR_ENOMEM;
    uint32_t last = 0;
    for (uint32_t i = 0; i < n; i++) {
        int32_t k = bd->key[i];
        int64_t o = bd->off[i];
        uint32_t j;
        if (nr && r[last].partition == k) {
            j = last;
        } else {
            for (j = 0; j < nr && r[j].partition != k; j++)
                ;
            if (j == nr) {
                if (nr == cap) {
                    pr_batch_range *nrp = realloc(r, cap * 2 * sizeof(*r));
                    if (!nrp) {
                        free(r);
                        return PR_ENOMEM;
                    }
                    r = nrp;
                    cap *= 2;
                }
                r[nr].partition = k;
                r[nr].first_offset = o;
                r[nr].last_offset = o;
                r[nr].rows = 0;
                nr++;
            }
            last = j;
        }
        if (o < r[j].first_offset)
            r[j].first_offset = o;
        if (o > r[j].last_offset)
            r[j].last_offset = o;
        r[j].rows++;
    }
    qsort(r, nr, sizeof(*r), pr__range_cmp);
    bt->ranges = r;
    bt->n_ranges = nr;
    return 0;
}

static int pr__ua_push(pr_batcher *b, pr_batch *bt)
{
    if (b->ua_len == b->ua_cap) {
        size_t nc = b->ua_cap ? b->ua_cap * 2 : 64;
        pr_batch **n = malloc(nc * sizeof(*n));
        if (!n)
            return PR_ENOMEM;
        for (size_t i = 0; i < b->ua_len; i++)
            n[i] = b->ua[(b->ua_head + i) % b->ua_cap];
        free(b->ua);
        b->ua = n;
        b->ua_cap = nc;
        b->ua_head = 0;
    }
    b->ua[(b->ua_head + b->ua_len) % b->ua_cap] = bt;
    b->ua_len++;
    return 0;
}

/* The batch's notices: the loose ones and up to batch.reannounce_max of
 * the backlog (the lowest numbers: what was acknowledged stays, but for the
 * notices rows took ahead, a prefix, see pr_notice_acks), at row 0, then the
 * build's own in row order. */
static int pr__notes_to_batch(pr_batcher *b, pr__build *bd, pr_batch *bt)
{
    uint32_t cap = pr_batcher_reannounce_max(b);
    uint32_t nb = b->bl_live < cap ? b->bl_live : cap;
    uint32_t nn = b->loose.n + nb + bd->notes.n, o = b->loose.n;
    if (!nn)
        return 0;
    bt->recycled = malloc((size_t)nn * sizeof(*bt->recycled));
    if (!bt->recycled)
        return PR_ENOMEM;
    if (b->loose.n)
        memcpy(bt->recycled, b->loose.v, (size_t)b->loose.n * sizeof(pr_recycled));
    for (; nb && b->bl_next < b->bl_nord; b->bl_next++) {
        pr_recycled *r = &b->backlog.v[b->bl_ord[b->bl_next].pos];
        if (!r->number)
            continue;
        bt->recycled[o] = *r;
        bt->recycled[o++].row = 0;
        r->number = 0;
        b->bl_live--;
        nb--;
    }
    if (!b->bl_live)
        b->backlog.n = b->bl_next = b->bl_nord = 0;
    if (bd->notes.n)
        memcpy(bt->recycled + o, bd->notes.v, (size_t)bd->notes.n * sizeof(pr_recycled));
    bt->n_recycled = o + bd->notes.n;
    b->loose.n = 0;
    bd->notes.n = 0;
    b->st.recycled_out += bt->n_recycled;
    return 0;
}

/* ---------------------------------------------------------------- phase profile
 *
 * PIPEREC_WORKER_PROF=1: the calling thread's CPU time spent in the column
 * copies, the emission's bookkeeping and the on_emit callback (encoding and
 * sink offers), so that the worker can tell its serial time per phase. */

static uint64_t pr__thread_ns(const pr_batcher *b)
{
    return b->prof ? (uint64_t)pr_thread_cpu_ns() : 0;
}

static void pr__prof_add(pr_batcher *b, int phase, uint64_t t0)
{
    if (b->prof)
        b->prof_ns[phase] += pr__thread_ns(b) - t0;
}

void pr_batcher_prof(const pr_batcher *b, uint64_t ns[PR_BATCHER_PROF__COUNT])
{
    memcpy(ns, b->prof_ns, sizeof(b->prof_ns));
}

static int pr__emit_batch(pr_batcher *b, int cls, pr_batch_reason reason);

/* Emit the build's cur; the emission's own CPU time, less the callback's,
 * goes to PR_BATCHER_PROF_EMIT. */
static int pr__emit(pr_batcher *b, int cls, pr_batch_reason reason)
{
    uint64_t t0 = pr__thread_ns(b), cb0 = b->prof_ns[PR_BATCHER_PROF_CALLBACK];
    int err = pr__emit_batch(b, cls, reason);
    if (b->prof)
        b->prof_ns[PR_BATCHER_PROF_EMIT] +=
            pr__thread_ns(b) - t0 - (b->prof_ns[PR_BATCHER_PROF_CALLBACK] - cb0);
    return err;
}

/* Hand the class's `cur` out as the next batch. */
static int pr__emit_batch(pr_batcher *b, int cls, pr_batch_reason reason)
{
    pr__build *bd = &b->bld[cls];
    pr_batch *bt = bd->cur;
    if (!bt || bt->rows == 0)
        return 0;
    const pr_batcher_cfg *c = &b->cfg;
    uint32_t n = bt->rows, cap = c->batch.size;
    size_t w = c->sparse_width;

    /* Compact columns to stride n (moving down, so memmove in column order is safe). */
    if (b->jag) {
        if (pr__jag_finish(b->jag, &bd->jb, bt, cap) < 0)
            return PR_ENOMEM;
    } else if (n < cap) {
        for (uint32_t col = 1; col < c->n_dense; col++)
            memmove(bt->dense + (size_t)col * n, bt->dense + (size_t)col * cap, (size_t)n * 4);
        uint8_t *sp = bt->sparse;
        for (uint32_t col = 1; col < c->n_sparse; col++)
            memmove(sp + (size_t)col * n * w, sp + (size_t)col * cap * w, (size_t)n * w);
    }
    if (!b->jag)
        bt->bytes = (size_t)n * b->row_bytes;
    if (pr__build_ranges(bd, bt) < 0)
        return PR_ENOMEM;
    bt->min_event_time_ms = INT64_MAX;
    bt->max_event_time_ms = INT64_MIN;
    for (uint32_t i = 0; i < n; i++) {
        if (bd->et[i] < bt->min_event_time_ms)
            bt->min_event_time_ms = bd->et[i];
        if (bd->et[i] > bt->max_event_time_ms)
            bt->max_event_time_ms = bd->et[i];
    }
    uint32_t n_cols = b->jag ? b->jag->n_feat : c->n_sparse; /* vocab_sizes entries */
    bt->vocab_sizes = calloc(n_cols ? n_cols : 1, sizeof(uint64_t));
    if (b->n_topics) {
        bt->topics = calloc(b->n_topics, sizeof(char *));
        if (bt->topics) {
            bt->n_topics = (uint32_t)b->n_topics;
            for (size_t i = 0; i < b->n_topics; i++)
                if (!(bt->topics[i] = strdup(b->topics[i])))
                    return PR_ENOMEM;
        }
    }
    if (!bt->vocab_sizes || (b->n_topics && !bt->topics) || pr__ua_push(b, bt) < 0)
        return PR_ENOMEM;
    for (uint32_t col = 0; col < n_cols; col++)
        bt->vocab_sizes[col] = b->jag ? pr__jag_vocab_size(b->jag, col, c->vocab_size, c->opaque)
                               : c->vocab_size ? c->vocab_size(c->opaque, col)
                                               : 0;
    if (pr__notes_to_batch(b, bd, bt) < 0)
        return PR_ENOMEM;
    if (cls == PR__REGULAR)
        pr__kset_clear(&b->pend_keys); /* their notices leave now: no row needs demoting */
    bt->hot_version = bd->hot_version;
    bd->hot_version = 0;

    bt->seq = b->next_seq++;
    bt->epoch = c->epoch;
    memcpy(bt->replica, b->replica, sizeof(bt->replica));
    bt->reason = (uint8_t)reason;
    bt->emit_time_ms = pr_clock_wall_ms(b->clock);
    bt->emit_mono_ns = pr_clock_mono_ns(b->clock);
    bt->oldest_mono_ns = bd->oldest;
    bt->priv_rows = bd->h;
    bd->cur = NULL;
    bd->h = NULL;
    b->n_unacked++;
    b->unacked_bytes += bt->bytes;

    pr_batcher_stats *st = &b->st;
    st->batches_emitted++;
    st->batches_by_reason[reason]++;
    st->rows_out += n;
    if (bt->popular) {
        st->batches_popular++;
        st->rows_out_popular += n;
    }
    pr_hist_snapshot_observe(&st->fill_ratio, (double)n / cap);
    pr_hist_snapshot_observe(&st->event_to_emit_s,
                             (double)(bt->emit_time_ms - bt->min_event_time_ms) / 1e3);
    pr_hist_snapshot_observe(&st->wait_s, (double)(bt->emit_mono_ns - bd->oldest) / 1e9);

    int err = pr__ensure_cur(b, cls); /* before the callback: it may call back into us */
    uint64_t t0 = pr__thread_ns(b);
    pr_batch_ref(bt);
    c->on_emit(c->opaque, bt);
    pr_batch_unref(bt);
    pr__prof_add(b, PR_BATCHER_PROF_CALLBACK, t0);
    return err;
}

/* ---------------------------------------------------------------- copying rows */

static inline void pr__put_meta(pr_batcher *b, pr__build *bd, uint32_t n, int32_t key, int64_t off,
                                int64_t et, const pr__rowh *h, int64_t arrival, uint64_t hv)
{
    bd->ser[n] = b->next_ser++;
    if (hv > bd->hot_version)
        bd->hot_version = hv;
    bd->key[n] = key;
    bd->off[n] = off;
    bd->et[n] = et;
    bd->h[n] = *h;
    if (n == 0 || arrival < bd->oldest)
        bd->oldest = arrival;
}

/* Copy rows idx[0..k) of `out` into the build's cur (column by column). */
static void pr__copy_rows(pr_batcher *b, pr__build *bd, const pr_out *out, const uint32_t *idx,
                          uint32_t k)
{
    pr_batch *bt = bd->cur;
    uint32_t cap = b->cfg.batch.size, n0 = bt->rows;
    if (k == 0)
        return;
    if (b->jag) {
        int err = pr__jag_copy_rows(b->jag, &bd->jb, bt, cap, out, idx, k);
        if (err < 0)
            b->jag_err = err;
        return;
    }
    if (idx[k - 1] - idx[0] == k - 1) {
        /* No rejects in this run: plain column copies. */
        uint32_t r0 = idx[0];
        size_t w = b->cfg.sparse_width;
        if (out->labels)
            memcpy(bt->labels + n0, out->labels + r0, (size_t)k * 4);
        else
            memset(bt->labels + n0, 0, (size_t)k * 4);
        for (uint32_t col = 0; col < b->cfg.n_dense; col++)
            memcpy(bt->dense + (size_t)col * cap + n0, out->dense + (size_t)col * out->cap + r0,
                   (size_t)k * 4);
        for (uint32_t col = 0; col < b->cfg.n_sparse; col++)
            memcpy((uint8_t *)bt->sparse + ((size_t)col * cap + n0) * w,
                   (const uint8_t *)out->sparse + ((size_t)col * out->cap + r0) * w, (size_t)k * w);
        return;
    }
    for (uint32_t i = 0; i < k; i++)
        bt->labels[n0 + i] = out->labels ? out->labels[idx[i]] : 0;
    for (uint32_t col = 0; col < b->cfg.n_dense; col++) {
        const float *src = out->dense + (size_t)col * out->cap;
        float *dst = bt->dense + (size_t)col * cap + n0;
        for (uint32_t i = 0; i < k; i++)
            dst[i] = src[idx[i]];
    }
    if (b->cfg.sparse_width == 4) {
        for (uint32_t col = 0; col < b->cfg.n_sparse; col++) {
            const int32_t *src = (const int32_t *)out->sparse + (size_t)col * out->cap;
            int32_t *dst = (int32_t *)bt->sparse + (size_t)col * cap + n0;
            for (uint32_t i = 0; i < k; i++)
                dst[i] = src[idx[i]];
        }
    } else {
        for (uint32_t col = 0; col < b->cfg.n_sparse; col++) {
            const int64_t *src = (const int64_t *)out->sparse + (size_t)col * out->cap;
            int64_t *dst = (int64_t *)bt->sparse + (size_t)col * cap + n0;
            for (uint32_t i = 0; i < k; i++)
                dst[i] = src[idx[i]];
        }
    }
}

/* Pending-row layout (event_time): label | dense[n_dense] | sparse[n_sparse] (width w). */
static void pr__out_to_pending(pr_batcher *b, const pr_out *out, uint32_t r, uint8_t *dst)
{
    int32_t lab = out->labels ? out->labels[r] : 0;
    memcpy(dst, &lab, 4);
    float *d = (float *)(dst + 4);
    for (uint32_t col = 0; col < b->cfg.n_dense; col++)
        d[col] = out->dense[(size_t)col * out->cap + r];
    uint8_t *s = dst + 4 + (size_t)b->cfg.n_dense * 4;
    size_t w = b->cfg.sparse_width;
    for (uint32_t col = 0; col < b->cfg.n_sparse; col++)
        memcpy(s + col * w, (const uint8_t *)out->sparse + ((size_t)col * out->cap + r) * w, w);
}

static void pr__pending_to_cur(pr_batcher *b, pr__build *bd, const uint8_t *src)
{
    pr_batch *bt = bd->cur;
    uint32_t cap = b->cfg.batch.size, n = bt->rows;
    memcpy(&bt->labels[n], src, 4);
    const float *d = (const float *)(src + 4);
    for (uint32_t col = 0; col < b->cfg.n_dense; col++)
        bt->dense[(size_t)col * cap + n] = d[col];
    const uint8_t *s = src + 4 + (size_t)b->cfg.n_dense * 4;
    size_t w = b->cfg.sparse_width;
    for (uint32_t col = 0; col < b->cfg.n_sparse; col++)
        memcpy((uint8_t *)bt->sparse + ((size_t)col * cap + n) * w, s + col * w, w);
}

/* ---------------------------------------------------------------- partition ordering */

/* Is row r of the block flagged popular (and does this batcher split)? */
static inline int pr__row_class(const pr_batcher *b, const uint64_t *popular, uint32_t r)
{
    return b->n_class > 1 && popular && pr_bit_test(popular, r) ? PR__POPULAR : PR__REGULAR;
}

/* Rows k of the build collected from `out` go into its cur. */
static void pr__commit_rows(pr_batcher *b, int cls, const pr_out *out, uint32_t *k)
{
    pr__build *bd = &b->bld[cls];
    uint64_t t0 = pr__thread_ns(b);
    pr__copy_rows(b, bd, out, bd->idx, *k);
    pr__prof_add(b, PR_BATCHER_PROF_COPY, t0);
    bd->cur->rows += *k;
    b->st.rows_in += *k;
    *k = 0;
}

/* The index of sparse column `col` in row r of an engine output. */
static inline int64_t pr__out_index(const pr_out *out, uint32_t col, uint32_t r)
{
    size_t i = (size_t)col * out->cap + r;
    return out->sparse_width == 8 ? ((const int64_t *)out->sparse)[i]
                                  : ((const int32_t *)out->sparse)[i];
}

/* Does the build's cur hold a row with `index` in column `col` (a declared
 * schema: any value of feature `col`, the notices' column there)? */
static bool pr__build_uses(const pr_batcher *b, const pr__build *bd, uint32_t col, int64_t index)
{
    if (b->jag) {
        if (col >= b->jag->n_feat)
            return false;
        const int64_t *v = bd->jb.fv[col];
        for (uint64_t i = 0; i < bd->jb.fn[col]; i++)
            if (v[i] == index)
                return true;
        return false;
    }
    size_t base = (size_t)col * b->cfg.batch.size;
    for (uint32_t i = 0; i < bd->cur->rows; i++) {
        int64_t v = b->cfg.sparse_width == 8 ? ((const int64_t *)bd->cur->sparse)[base + i]
                                             : ((const int32_t *)bd->cur->sparse)[base + i];
        if (v == index)
            return true;
    }
    return false;
}

static int pr__demote_popular(pr_batcher *b, pr_batch_reason reason);

/* Notice n precedes the next row of the regular build (k: rows collected
 * from the current block and not yet copied). Under the split, rows of the
 * old value in the popular build go out first, and the key is remembered so
 * that popular rows of the new value are demoted until the notice is out. */
static int pr__place_notice(pr_batcher *b, const pr_recycled *n, uint32_t *k, const pr_out *out)
{
    pr__build *rb = &b->bld[PR__REGULAR], *pb = &b->bld[PR__POPULAR];
    int err = pr__ensure_cur(b, PR__REGULAR);
    if (err < 0)
        return err;
    if (pr__notes_push(&rb->notes, n, rb->cur->rows + k[PR__REGULAR]) < 0)
        return PR_ENOMEM;
    if (b->n_class == 1)
        return 0;
    if (pr__kset_add(&b->pend_keys, pr__kset_key(n->col, n->index)) < 0)
        return PR_ENOMEM;
    if (k[PR__POPULAR])
        pr__commit_rows(b, PR__POPULAR, out, &k[PR__POPULAR]);
    if (!pb->cur || !pr__build_uses(b, pb, n->col, n->index))
        return 0;
    if (pb->cur->rows >= b->cfg.batch.popular_min_rows)
        return pr__emit(b, PR__POPULAR, PR_BATCH_DEADLINE); /* counted with the early ones */
    if (k[PR__REGULAR])
        pr__commit_rows(b, PR__REGULAR, out, &k[PR__REGULAR]);
    return pr__demote_popular(b, PR_BATCH_DEADLINE);
}

/* First entry of the backlog at or after (col, index). */
static uint32_t pr__backlog_lower(const pr_batcher *b, uint32_t col, int64_t index)
{
    uint32_t lo = 0, hi = b->backlog.n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const pr_recycled *r = &b->backlog.v[mid];
        if (r->col < col || (r->col == col && r->index < index))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The backlog's notices for (col, index) leave now, in front of a row that
 * uses the index: before the next regular row (k, out: partition order) or
 * in `loose` (k NULL: event_time). */
static int pr__backlog_take(pr_batcher *b, uint32_t col, int64_t index, uint32_t *k,
                            const pr_out *out)
{
    for (uint32_t i = pr__backlog_lower(b, col, index); i < b->backlog.n; i++) {
        pr_recycled r = b->backlog.v[i];
        if (r.col != col || r.index != index)
            break;
        if (!r.number)
            continue;
        b->backlog.v[i].number = 0; /* before placing: an emission spreads the backlog */
        b->bl_live--;
        int err = k ? pr__place_notice(b, &r, k, out) : pr__notes_push(&b->loose, &r, 0);
        if (err < 0)
            return err;
    }
    return 0;
}

/* Declared schema: the backlog's notices (col = feature) for every value of
 * the row's vocab features. `out` (block row r) or pool slot `slot` (src). */
static int pr__backlog_jagged(pr_batcher *b, const pr_out *out, uint32_t r, uint32_t slot,
                              const uint8_t *src, uint32_t *k)
{
    int err = 0;
    for (uint32_t f = 0; f < b->jag->n_feat && b->bl_live && !err; f++) {
        if (b->jag->vocab_col[f] < 0)
            continue;
        uint32_t n;
        const int64_t *v = out ? pr__jag_row_values(b->jag, out, f, r, &n)
                               : pr__jag_pending_values(b->jag, slot, src, f, &n);
        for (uint32_t i = 0; i < n && b->bl_live && !err; i++)
            err = pr__backlog_take(b, f, v[i], k, out);
    }
    return err;
}

static int pr__backlog_row(pr_batcher *b, const pr_out *out, uint32_t r, uint32_t *k)
{
    int err = 0;
    if (b->jag)
        return pr__backlog_jagged(b, out, r, 0, NULL, k);
    for (uint32_t c = 0; c < out->n_sparse && b->bl_live && !err; c++)
        err = pr__backlog_take(b, c, pr__out_index(out, c, r), k, out);
    return err;
}

/* The same for a pending row (event_time layout, see out_to_pending). */
static int pr__backlog_pending_row(pr_batcher *b, uint32_t slot, const uint8_t *src)
{
    if (b->jag)
        return pr__backlog_jagged(b, NULL, 0, slot, src, NULL);
    const uint8_t *s = src + 4 + (size_t)b->cfg.n_dense * 4;
    int err = 0;
    for (uint32_t c = 0; c < b->cfg.n_sparse && b->bl_live && !err; c++) {
        int64_t v;
        if (b->cfg.sparse_width == 8) {
            memcpy(&v, s + (size_t)c * 8, 8);
        } else {
            int32_t v32;
            memcpy(&v32, s + (size_t)c * 4, 4);
            v = v32;
        }
        err = pr__backlog_take(b, c, v, NULL, NULL);
    }
    return err;
}

/* Does row r use an index whose notice waits in the regular build? (A
 * declared schema: any element of a vocab feature; notices name features.) */
static bool pr__row_pending(const pr_batcher *b, const pr_out *out, uint32_t r)
{
    if (b->jag) {
        for (uint32_t f = 0; f < b->jag->n_feat; f++) {
            if (b->jag->vocab_col[f] < 0)
                continue;
            uint32_t n;
            const int64_t *v = pr__jag_row_values(b->jag, out, f, r, &n);
            for (uint32_t i = 0; i < n; i++)
                if (pr__kset_has(&b->pend_keys, pr__kset_key(f, v[i])))
                    return true;
        }
        return false;
    }
    for (uint32_t c = 0; c < out->n_sparse; c++)
        if (pr__kset_has(&b->pend_keys, pr__kset_key(c, pr__out_index(out, c, r))))
            return true;
    return false;
}

/* The stream of kept row r: its flag, unless it must follow a notice that
 * waits in the regular build. */
static int pr__route_row(pr_batcher *b, const uint64_t *popular, const pr_out *out, uint32_t r)
{
    int cls = pr__row_class(b, popular, r);
    if (cls == PR__POPULAR && b->pend_keys.n && pr__row_pending(b, out, r)) {
        b->st.rows_demoted++;
        return PR__REGULAR;
    }
    return cls;
}

/* Rows [r, e) of one partition (slot), kept, with no notice, backlog or
 * stream choice between them (pr__run_end), all to the regular build: the
 * same offsets, handles, metadata and batches as the per-row loop below,
 * a batch's worth of rows at a time (no per-row calls). */
static int pr__add_run(pr_batcher *b, const pr_block *in, const pr_out *out, int slot, uint32_t r,
                       uint32_t e, uint32_t *k, int64_t now)
{
    pr__build *bd = &b->bld[PR__REGULAR];
    int err;
    while (r < e) {
        if ((err = pr__ensure_cur(b, PR__REGULAR)) < 0)
            return err;
        uint32_t n = bd->cur->rows + *k;
        uint32_t m = b->cfg.batch.size - n;
        if (m > e - r)
            m = e - r;
        if (pr__offsets_push_run(&b->offs, slot, in->offset + r, m, bd->h + n) < 0)
            return PR_ENOMEM;
        if (b->hot_version > bd->hot_version)
            bd->hot_version = b->hot_version;
        if (n == 0 || now < bd->oldest)
            bd->oldest = now;
        for (uint32_t i = 0; i < m; i++) {
            bd->ser[n + i] = b->next_ser++;
            bd->key[n + i] = in->partition[r + i];
            bd->off[n + i] = in->offset[r + i];
            bd->et[n + i] = in->event_time_ms[r + i];
            bd->idx[*k + i] = r + i;
        }
        *k += m;
        r += m;
        if (bd->cur->rows + *k == b->cfg.batch.size) {
            pr__commit_rows(b, PR__REGULAR, out, k);
            if ((err = pr__emit(b, PR__REGULAR, PR_BATCH_FULL)) < 0)
                return err;
        }
    }
    return 0;
}

/* End of the run pr__add_run may take from row r (kept, the regular
 * stream): the next row of another partition, a reject or the row of the
 * next notice (placed in front of it by the per-row loop). r itself when
 * the fast path does not apply. */
static uint32_t pr__run_end(const pr_batcher *b, const pr_block *in, const pr_out *out,
                            const uint64_t *popular, uint32_t r, uint32_t next_notice)
{
    if (!b->row_runs || b->bl_live || (b->n_class > 1 && popular))
        return r;
    uint32_t e = r;
    int32_t key = in->partition[r];
    while (e < out->rows && e < next_notice && in->partition[e] == key &&
           !(out->rejected && pr_bit_test(out->rejected, e)))
        e++;
    return e;
}

/* One pass in arrival order: offsets are pushed in offset order per
 * partition (the queues need it) while each row's data goes to its class's
 * build in runs, copied column by column when a build fills or at the end.
 * Notices (nv, in row order) are placed in front of their row. */
static int pr__add_partition_order(pr_batcher *b, const pr_block *in, const pr_out *out,
                                   const uint64_t *popular, const pr_recycled *nv, uint32_t nn,
                                   int64_t now)
{
    uint32_t k[PR__NCLASS] = {0};
    int slot = -1, err;
    int32_t slot_key = 0;
    uint32_t ni = 0; /* next notice of nv */
    for (uint32_t r = 0; r < out->rows; r++) {
        if (slot < 0 || in->partition[r] != slot_key) {
            slot_key = in->partition[r];
            if ((slot = pr__offsets_slot(&b->offs, slot_key, true)) < 0)
                return PR_ENOMEM;
        }
        if (out->rejected && pr_bit_test(out->rejected, r)) {
            pr__offsets_seen_done(&b->offs, slot, in->offset[r]);
            b->st.rows_rejected++;
            continue;
        }
        if (b->bl_live && (err = pr__backlog_row(b, out, r, k)) < 0)
            return err;
        for (; ni < nn && nv[ni].row <= r; ni++)
            if ((err = pr__place_notice(b, &nv[ni], k, out)) < 0)
                return err;
        uint32_t e = pr__run_end(b, in, out, popular, r, ni < nn ? nv[ni].row : UINT32_MAX);
        if (e > r + 1) {
            if ((err = pr__add_run(b, in, out, slot, r, e, &k[PR__REGULAR], now)) < 0)
                return err;
            r = e - 1;
            continue;
        }
        int cls = pr__route_row(b, popular, out, r);
        pr__build *bd = &b->bld[cls];
        if ((err = pr__ensure_cur(b, cls)) < 0)
            return err;
        pr__rowh h;
        if (pr__offsets_push(&b->offs, slot, in->offset[r], &h) < 0)
            return PR_ENOMEM;
        pr__put_meta(b, bd, bd->cur->rows + k[cls], in->partition[r], in->offset[r],
                     in->event_time_ms[r], &h, now, b->hot_version);
        bd->idx[k[cls]++] = r;
        if (bd->cur->rows + k[cls] == b->cfg.batch.size) {
            pr__commit_rows(b, cls, out, &k[cls]);
            if ((err = pr__emit(b, cls, PR_BATCH_FULL)) < 0)
                return err;
        }
    }
    for (int c = 0; c < b->n_class; c++)
        if (k[c])
            pr__commit_rows(b, c, out, &k[c]);
    /* Notices past the last kept row precede the next row to come. */
    for (; ni < nn; ni++)
        if ((err = pr__place_notice(b, &nv[ni], k, out)) < 0)
            return err;
    return 0;
}

/* ---------------------------------------------------------------- event_time ordering */

static inline int pr__pkey_cmp(const pr__pkey *p, const pr__pkey *q)
{
    if (p->et != q->et)
        return p->et < q->et ? -1 : 1;
    if (p->part != q->part)
        return p->part < q->part ? -1 : 1;
    if (p->off != q->off)
        return p->off < q->off ? -1 : 1;
    if (p->ser != q->ser)
        return p->ser < q->ser ? -1 : 1;
    if (p->kind != q->kind)
        return p->kind < q->kind ? -1 : 1;
    return (p->sub > q->sub) - (p->sub < q->sub);
}

static bool pr__pend_less(const pr_batcher *b, uint32_t x, uint32_t y)
{
    return pr__pkey_cmp(&b->p_key[x], &b->p_key[y]) < 0;
}

static void pr__heap_up(pr_batcher *b, size_t i)
{
    uint32_t v = b->heap[i];
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pr__pend_less(b, v, b->heap[parent]))
            break;
        b->heap[i] = b->heap[parent];
        i = parent;
    }
    b->heap[i] = v;
}

static void pr__heap_down(pr_batcher *b, size_t i)
{
    uint32_t v = b->heap[i];
    for (;;) {
        size_t l = 2 * i + 1, m;
        if (l >= b->heap_len)
            break;
        m = l;
        if (l + 1 < b->heap_len && pr__pend_less(b, b->heap[l + 1], b->heap[l]))
            m = l + 1;
        if (!pr__pend_less(b, b->heap[m], v))
            break;
        b->heap[i] = b->heap[m];
        i = m;
    }
    b->heap[i] = v;
}

static int pr__pool_grow(pr_batcher *b)
{
    uint32_t oc = b->p_cap, nc = oc ? oc * 2 : 1024;
    uint8_t *d = realloc(b->p_data, (size_t)nc * b->prow_bytes);
    if (!d)
        return PR_ENOMEM;
    b->p_data = d;
    pend_meta *m = realloc(b->p_meta, (size_t)nc * sizeof(*m));
    if (!m)
        return PR_ENOMEM;
    b->p_meta = m;
    uint32_t *f = realloc(b->p_free, (size_t)nc * sizeof(*f));
    if (!f)
        return PR_ENOMEM;
    b->p_free = f;
    uint32_t *h = realloc(b->heap, (size_t)nc * sizeof(*h));
    if (!h)
        return PR_ENOMEM;
    b->heap = h;
    pr_recycled *pn = realloc(b->p_note, (size_t)nc * sizeof(*pn));
    if (!pn)
        return PR_ENOMEM;
    b->p_note = pn;
    pr__pkey *pk = realloc(b->p_key, (size_t)nc * sizeof(*pk));
    if (!pk)
        return PR_ENOMEM;
    b->p_key = pk;
    if (b->jag && pr__jag_pool_grow(b->jag, nc) < 0)
        return PR_ENOMEM;
    for (uint32_t i = nc; i > oc; i--) {
        b->p_meta[i - 1].in_use = false;
        b->p_meta[i - 1].note = false;
        b->p_meta[i - 1].serial = 0;
        b->p_free[b->p_nfree++] = i - 1;
    }
    b->p_cap = nc;
    return 0;
}

static int pr__fifo_push(pr_batcher *b, uint32_t slot, uint32_t serial)
{
    if (b->f_len == b->f_cap) {
        size_t nc = b->f_cap ? b->f_cap * 2 : 1024;
        fifo_ent *n = malloc(nc * sizeof(*n));
        if (!n)
            return PR_ENOMEM;
        for (size_t i = 0; i < b->f_len; i++)
            n[i] = b->fifo[(b->f_head + i) % b->f_cap];
        free(b->fifo);
        b->fifo = n;
        b->f_cap = nc;
        b->f_head = 0;
    }
    b->fifo[(b->f_head + b->f_len) % b->f_cap] = (fifo_ent){slot, serial};
    b->f_len++;
    return 0;
}

static bool pr__fifo_valid(const pr_batcher *b, const fifo_ent *e)
{
    return b->p_meta[e->slot].in_use && b->p_meta[e->slot].serial == e->serial;
}

/* Drop released rows from the FIFO front. */
static void pr__fifo_trim(pr_batcher *b)
{
    while (b->f_len && !pr__fifo_valid(b, &b->fifo[b->f_head])) {
        b->f_head = (b->f_head + 1) % b->f_cap;
        b->f_len--;
    }
}

static void pr__pend_free(pr_batcher *b, uint32_t slot)
{
    if (b->p_meta[slot].note)
        b->heap_notes--;
    b->p_meta[slot].note = false;
    b->p_meta[slot].in_use = false;
    b->p_meta[slot].serial++;
    b->p_free[b->p_nfree++] = slot;
}

static void pr__update_watermark(pr_batcher *b)
{
    bool any = false;
    int64_t lo = INT64_MAX;
    for (size_t i = 0; i < b->offs.n; i++) {
        const pr__ptrack *t = &b->offs.parts[i];
        if (!t->active)
            continue;
        if (!t->has_et)
            return; /* an assigned partition without data holds the watermark */
        any = true;
        if (t->max_et < lo)
            lo = t->max_et;
    }
    if (!any)
        return;
    int64_t cand = lo - b->cfg.batch.allowed_lateness_ms;
    if (!b->wm_set || cand > b->wm) {
        b->wm = cand;
        b->wm_set = true;
    }
}

/* ---------------------------------------------------------------- notices under event_time
 *
 * Rows leave in release-key order, not in the order the engine saw them, so
 * a notice cannot stay at its block row. It becomes a heap entry of its own,
 * keyed just before its anchor: the first kept row at or after its block
 * row (normally the row that brought the new value). The anchor, and every
 * later row that uses the index while the notice waits, are raised behind a
 * barrier: the largest key among the pending entries that used the index
 * before (rows of the old value, an earlier notice of the index). Raising
 * only moves a row later, so every row of the old value leaves before the
 * notice and every row of the new value after it, and the notice lands in
 * front of the first row of the new value: the same exact place as under
 * partition order. A row that is not raised keeps (event_time, partition,
 * offset) order. The barrier comes from et_last, kept per (column, index)
 * from the first notice on (a pipeline that never recycles pays nothing):
 * an update per (column, index) of every row, and a lookup in et_bar while
 * some notice waits; entries whose rows have all left are dropped when the
 * map grows, so it holds about the pending rows' distinct indices.
 */

/* Index of sparse column c in a pending row (event_time layout, see
 * out_to_pending). */
static int64_t pr__pending_index(const pr_batcher *b, const uint8_t *src, uint32_t c)
{
    const uint8_t *s = src + 4 + (size_t)b->cfg.n_dense * 4;
    if (b->cfg.sparse_width == 8) {
        int64_t v;
        memcpy(&v, s + (size_t)c * 8, 8);
        return v;
    }
    int32_t v32;
    memcpy(&v32, s + (size_t)c * 4, 4);
    return v32;
}

/* The (column, index) keys (pr__kset_key) of block row r of `out`, or of
 * pending slot `slot` (its data at src) when out is NULL, into b->rk. */
static int pr__row_keys(pr_batcher *b, const pr_out *out, uint32_t r, uint32_t slot,
                        const uint8_t *src)
{
    b->rk_n = 0;
    if (!b->jag && b->rk_cap >= b->cfg.n_sparse) { /* the Criteo layout: one index a column */
        for (uint32_t c = 0; c < b->cfg.n_sparse; c++)
            b->rk[c] =
                pr__kset_key(c, out ? pr__out_index(out, c, r) : pr__pending_index(b, src, c));
        b->rk_n = b->cfg.n_sparse;
        return 0;
    }
    uint32_t ncols = b->jag ? b->jag->n_feat : b->cfg.n_sparse;
    for (uint32_t c = 0; c < ncols; c++) {
        int64_t one;
        const int64_t *v = &one;
        uint32_t n = 1;
        if (b->jag && b->jag->vocab_col[c] < 0)
            continue;
        if (b->jag)
            v = out ? pr__jag_row_values(b->jag, out, c, r, &n)
                    : pr__jag_pending_values(b->jag, slot, src, c, &n);
        else
            one = out ? pr__out_index(out, c, r) : pr__pending_index(b, src, c);
        if (b->rk_n + n > b->rk_cap) {
            uint32_t nc = b->rk_cap ? b->rk_cap : 64;
            while (nc < b->rk_n + n)
                nc *= 2;
            uint64_t *g = realloc(b->rk, (size_t)nc * sizeof(*g));
            if (!g)
                return PR_ENOMEM;
            b->rk = g;
            b->rk_cap = nc;
        }
        for (uint32_t i = 0; i < n; i++)
            b->rk[b->rk_n++] = pr__kset_key(c, v[i]);
    }
    return 0;
}

/* Does the entry's notice still wait in the heap? */
static bool pr__et_live(const pr_batcher *b, const pr__kmap_ent *e)
{
    if (!e->note || e->slot >= b->p_cap)
        return false;
    const pend_meta *m = &b->p_meta[e->slot];
    return m->in_use && m->note && m->serial == e->serial;
}

/* k moved behind barrier `bar` when that is later; it keeps its own ser,
 * which is above the ser of every entry the barrier came from. */
static void pr__pkey_raise(pr__pkey *k, const pr__pkey *bar)
{
    pr__pkey r = {bar->et, bar->off, bar->part, PR__PK_ROW, k->ser, 0};
    if (pr__pkey_cmp(&r, k) > 0)
        *k = r;
}

/* An entry some pending entry may still use: it grew since the last
 * completed release, or above what that release let out (a release lets
 * out every entry up to its watermark, so every user of an entry below it
 * that was there then has left; later users grew it). */
static bool pr__et_keep(const void *ctx, const pr__kmap_ent *e)
{
    const pr_batcher *b = ctx;
    return e->gen >= b->rel_gen || e->v.et > b->rel_wm || pr__et_live(b, e);
}

/* A pending entry with release key k uses the entry's index. */
static void pr__et_grow(pr_batcher *b, pr__kmap_ent *e, const pr__pkey *k)
{
    if (e->gen == 0 || pr__pkey_cmp(k, &e->v) > 0) /* gen 0: fresh, v holds nothing */
        e->v = *k;
    e->gen = b->rel_gen;
}

/* The first notice: from now on et_last follows every pending entry; it
 * starts with those already in the heap. Pipelines that never recycle never
 * pay for it. */
static int pr__et_track_start(pr_batcher *b)
{
    b->et_track = true;
    b->rel_gen++; /* >= 1 from now on: gen 0 marks a fresh entry */
    for (size_t h = 0; h < b->heap_len; h++) {
        uint32_t s = b->heap[h];
        if (b->p_meta[s].note)
            continue;
        if (pr__row_keys(b, NULL, 0, s, b->p_data + (size_t)s * b->prow_bytes) < 0 ||
            pr__kmap_reserve(&b->et_last, b->rk_n, pr__et_keep, b) < 0)
            return PR_ENOMEM;
        for (uint32_t i = 0; i < b->rk_n; i++)
            pr__et_grow(b, pr__kmap_put(&b->et_last, b->rk[i]), &b->p_key[s]);
    }
    return 0;
}

/* Notice n waits in the heap at key k (just before its anchor row, or just
 * behind the index's users), and becomes the index's newest notice: rows
 * using the index sort behind it while it waits. Room for its entry must
 * have been made. */
static int pr__et_push_note(pr_batcher *b, const pr_recycled *n, const pr__pkey *k, int64_t now)
{
    if (b->p_nfree == 0 && pr__pool_grow(b) < 0)
        return PR_ENOMEM;
    uint32_t ps = b->p_free[--b->p_nfree];
    pend_meta *m = &b->p_meta[ps];
    m->in_use = true;
    m->note = true;
    pr__pkey *mk = &b->p_key[ps];
    *mk = *k;
    mk->kind = PR__PK_NOTE;
    mk->sub = n->number;
    m->key = 0;
    m->et = k->et;
    m->off = -1;
    m->arrival = now;
    m->cls = PR__REGULAR;
    b->p_note[ps] = *n;
    b->heap_notes++;
    b->heap[b->heap_len++] = ps;
    pr__heap_up(b, b->heap_len - 1);
    pr__kmap_ent *e = pr__kmap_put(&b->et_last, pr__kset_key(n->col, n->index));
    pr__et_grow(b, e, mk);
    e->note = true;
    e->slot = ps;
    e->serial = m->serial;
    return 0;
}

/* Release key of kept block row r: its own, raised behind the users of
 * every index of it whose notice waits, and behind the users of the indices
 * of nv[ni..na) (the notices it anchors, which then wait just before it).
 * One probe per (column, index). */
static int pr__et_row_key(pr_batcher *b, const pr_out *out, uint32_t r, pr__pkey *k,
                          const pr_recycled *nv, uint32_t ni, uint32_t na, int64_t now)
{
    if (!b->et_track)
        return 0;
    if (pr__row_keys(b, out, r, 0, NULL) < 0 ||
        pr__kmap_reserve(&b->et_last, b->rk_n + (na - ni), pr__et_keep, b) < 0)
        return PR_ENOMEM;
    if (b->et_ent_cap < b->rk_n) {
        pr__kmap_ent **g = realloc(b->et_ent, (size_t)b->rk_n * 2 * sizeof(*g));
        if (!g)
            return PR_ENOMEM;
        b->et_ent = g;
        b->et_ent_cap = b->rk_n * 2;
    }
    for (uint32_t i = 0; i < b->rk_n; i++) {
        pr__kmap_ent *e = b->et_ent[i] = pr__kmap_put(&b->et_last, b->rk[i]);
        if (b->heap_notes && pr__et_live(b, e))
            pr__pkey_raise(k, &e->v);
    }
    for (uint32_t j = ni; j < na; j++) {
        const pr__kmap_ent *e = pr__kmap_find(&b->et_last, pr__kset_key(nv[j].col, nv[j].index));
        if (e) /* a bound whose users all left is below the watermark: no delay */
            pr__pkey_raise(k, &e->v);
    }
    for (uint32_t j = ni; j < na; j++) {
        int err = pr__et_push_note(b, &nv[j], k, now);
        if (err < 0)
            return err;
    }
    for (uint32_t i = 0; i < b->rk_n; i++)
        pr__et_grow(b, b->et_ent[i], k);
    return 0;
}

/* Notices past the block's last kept row: behind their index's users in the
 * heap, or, with no pending entry using the index, into the regular build
 * now (every row released so far precedes them, every later one follows). */
static int pr__et_tail_notes(pr_batcher *b, const pr_recycled *nv, uint32_t ni, uint32_t nn,
                             int64_t now)
{
    uint32_t k0[PR__NCLASS] = {0};
    for (uint32_t j = ni; j < nn; j++) {
        if (pr__kmap_reserve(&b->et_last, 1, pr__et_keep, b) < 0)
            return PR_ENOMEM;
        const pr__kmap_ent *e = pr__kmap_find(&b->et_last, pr__kset_key(nv[j].col, nv[j].index));
        int err;
        if (e && pr__et_keep(b, e)) {
            pr__pkey k = e->v;
            k.ser = b->pser++;
            if ((err = pr__et_push_note(b, &nv[j], &k, now)) < 0)
                return err;
        } else if ((err = pr__place_notice(b, &nv[j], k0, NULL)) < 0) {
            return err;
        }
    }
    return 0;
}

/* Split popular: a released popular row that uses an index whose notice
 * waits in the regular build goes to the regular stream (as route_row). */
static int pr__et_route(pr_batcher *b, const pend_meta *m, uint32_t slot, const uint8_t *src)
{
    if (m->cls != PR__POPULAR || !b->pend_keys.n)
        return m->cls;
    if (pr__row_keys(b, NULL, 0, slot, src) < 0)
        return PR__REGULAR; /* out of memory: the regular stream is always safe */
    for (uint32_t i = 0; i < b->rk_n; i++)
        if (pr__kset_has(&b->pend_keys, b->rk[i])) {
            b->st.rows_demoted++;
            return PR__REGULAR;
        }
    return PR__POPULAR;
}

static void pr__heap_pop(pr_batcher *b)
{
    b->heap[0] = b->heap[--b->heap_len];
    if (b->heap_len)
        pr__heap_down(b, 0);
}

/* Move entries with release key <= watermark (all when `all`) into batches:
 * rows into their build, notices in front of the next regular row. */
static int pr__release(pr_batcher *b, bool all)
{
    int err;
    uint32_t k0[PR__NCLASS] = {0};
    while (b->heap_len) {
        uint32_t slot = b->heap[0];
        pend_meta *m = &b->p_meta[slot];
        /* Notices alone (their rows revoked) need no watermark: nothing
         * pending can be of the old value. */
        int64_t ket = b->p_key[slot].et;
        if (!all && (!b->wm_set || ket > b->wm) && b->heap_len > b->heap_notes)
            break;
        if (m->note) {
            pr_recycled n = b->p_note[slot];
            pr__heap_pop(b);
            pr__pend_free(b, slot);
            if ((err = pr__place_notice(b, &n, k0, NULL)) < 0)
                return err;
            continue;
        }
        const uint8_t *src = b->p_data + (size_t)slot * b->prow_bytes;
        int cls = pr__et_route(b, m, slot, src);
        pr__build *bd = &b->bld[cls];
        if ((err = pr__ensure_cur(b, cls)) < 0)
            return err;
        if (!b->jag)
            pr__pending_to_cur(b, bd, src);
        else if ((err = pr__jag_from_pending(b->jag, &bd->jb, bd->cur, b->cfg.batch.size, slot,
                                             src)) < 0)
            return err;
        if (b->bl_live && (err = pr__backlog_pending_row(b, slot, src)) < 0)
            return err;
        pr__put_meta(b, bd, bd->cur->rows, m->key, m->off, m->et, &m->h, m->arrival, m->hv);
        bd->cur->rows++;
        if (all && (!b->wm_set || ket > b->wm)) {
            b->wm = ket;
            b->wm_set = true;
        }
        pr__heap_pop(b);
        pr__pend_free(b, slot);
        if (bd->cur->rows == b->cfg.batch.size && (err = pr__emit(b, cls, PR_BATCH_FULL)) < 0)
            return err;
    }
    pr__fifo_trim(b);
    b->rel_gen++;
    b->rel_wm = b->heap_len ? (b->wm_set ? b->wm : INT64_MIN) : INT64_MAX;
    return 0;
}

/* Is row r late, and (drop_to_dlq) dropped? Updates the partition's clock. */
static bool pr__et_late_drop(pr_batcher *b, const pr_block *in, const pr_out *out, uint32_t r,
                             int slot)
{
    pr__ptrack *t = &b->offs.parts[slot];
    int64_t et = in->event_time_ms[r];
    if (!t->has_et || et > t->max_et) {
        t->max_et = et;
        t->has_et = true;
    }
    if (!b->wm_set || et >= b->wm)
        return false;
    b->st.rows_late++;
    if (b->cfg.batch.late_policy != PR_BATCH_LATE_DROP_TO_DLQ)
        return false;
    b->st.rows_late_dropped++;
    pr__offsets_seen_done(&b->offs, slot, in->offset[r]);
    if (b->cfg.on_late)
        b->cfg.on_late(b->cfg.opaque, in, out, r);
    return true;
}

static int pr__add_event_time(pr_batcher *b, const pr_block *in, const pr_out *out,
                              const uint64_t *popular, const pr_recycled *nv, uint32_t nn,
                              int64_t now)
{
    int err;
    if (nn && !b->et_track && (err = pr__et_track_start(b)) < 0)
        return err;
    uint32_t ni = 0; /* next notice of nv */
    for (uint32_t r = 0; r < out->rows; r++) {
        int32_t key = in->partition[r];
        int64_t off = in->offset[r], et = in->event_time_ms[r];
        int slot = pr__offsets_slot(&b->offs, key, true);
        if (slot < 0)
            return PR_ENOMEM;
        if (out->rejected && pr_bit_test(out->rejected, r)) {
            pr__offsets_seen_done(&b->offs, slot, off);
            b->st.rows_rejected++;
            continue;
        }
        if (pr__et_late_drop(b, in, out, r, slot))
            continue;
        uint32_t na = ni;
        while (na < nn && nv[na].row <= r)
            na++;
        pr__pkey k = {et, off, key, PR__PK_ROW, b->pser++, 0};
        if ((err = pr__et_row_key(b, out, r, &k, nv, ni, na, now)) < 0)
            return err;
        ni = na;
        if (b->p_nfree == 0 && pr__pool_grow(b) < 0)
            return PR_ENOMEM;
        uint32_t ps = b->p_free[--b->p_nfree];
        pend_meta *m = &b->p_meta[ps];
        m->et = et;
        m->off = off;
        m->key = key;
        b->p_key[ps] = k;
        m->arrival = now;
        m->in_use = true;
        m->cls = (uint8_t)pr__row_class(b, popular, r);
        m->hv = b->hot_version;
        if (pr__offsets_push(&b->offs, slot, off, &m->h) < 0 ||
            pr__fifo_push(b, ps, m->serial) < 0) {
            pr__pend_free(b, ps);
            return PR_ENOMEM;
        }
        uint8_t *dst = b->p_data + (size_t)ps * b->prow_bytes;
        if (!b->jag)
            pr__out_to_pending(b, out, r, dst);
        else if (pr__jag_to_pending(b->jag, out, r, ps, dst) < 0)
            b->jag_err = PR_ENOMEM; /* the row still goes out, with no values */
        b->heap[b->heap_len++] = ps;
        pr__heap_up(b, b->heap_len - 1);
        b->st.rows_in++;
    }
    if ((err = pr__et_tail_notes(b, nv, ni, nn, now)) < 0)
        return err;
    pr__update_watermark(b);
    return pr__release(b, false);
}

/* ---------------------------------------------------------------- public calls */

static int pr__backlog_cmp(const void *x, const void *y)
{
    const pr_recycled *p = x, *q = y;
    if (p->col != q->col)
        return p->col < q->col ? -1 : 1;
    if (p->index != q->index)
        return p->index < q->index ? -1 : 1;
    return (p->number > q->number) - (p->number < q->number);
}

static int pr__ord_cmp(const void *x, const void *y)
{
    const pr__blord *p = x, *q = y;
    return (p->number > q->number) - (p->number < q->number);
}

/* bl_ord: the backlog's positions in number order. */
static int pr__backlog_order(pr_batcher *b)
{
    b->bl_nord = 0; /* out of memory: no row-0 share (the add fails anyway) */
    if (b->backlog.n > b->bl_ocap) {
        pr__blord *p = realloc(b->bl_ord, (size_t)b->backlog.cap * sizeof(*p));
        if (!p)
            return PR_ENOMEM;
        b->bl_ord = p;
        b->bl_ocap = b->backlog.cap;
    }
    for (uint32_t i = 0; i < b->backlog.n; i++)
        b->bl_ord[i] = (pr__blord){b->backlog.v[i].number, i};
    qsort(b->bl_ord, b->backlog.n, sizeof(*b->bl_ord), pr__ord_cmp);
    b->bl_nord = b->backlog.n;
    return 0;
}

/* The block's notices without the restored ones (numbered below
 * cfg.notice_restart_next): those acknowledged before the start
 * (cfg.notice_floor) are dropped, the others join the backlog. *nv points
 * into out->recycled or b->scratch. */
static int pr__take_restored(pr_batcher *b, const pr_out *out, const pr_recycled **nv, uint32_t *nn)
{
    *nv = out->recycled;
    *nn = out->n_recycled;
    uint64_t next = b->cfg.notice_restart_next;
    bool any = false;
    for (uint32_t i = 0; next && i < out->n_recycled && !any; i++)
        any = out->recycled[i].number < next;
    if (!any)
        return 0;
    b->scratch.n = 0;
    for (uint32_t i = 0; i < out->n_recycled; i++) {
        const pr_recycled *r = &out->recycled[i];
        int err = 0;
        if (r->number >= next)
            err = pr__notes_push(&b->scratch, r, r->row);
        else if (r->number < b->cfg.notice_floor || pr__ackset_has(&b->acked, r->number))
            b->st.recycled_skipped++;
        else if ((err = pr__notes_push(&b->backlog, r, 0)) == 0)
            b->bl_live++;
        if (err < 0)
            return err;
    }
    qsort(b->backlog.v, b->backlog.n, sizeof(pr_recycled), pr__backlog_cmp);
    uint32_t w = 0; /* drop the entries already sent (number 0) */
    for (uint32_t i = 0; i < b->backlog.n; i++)
        if (b->backlog.v[i].number)
            b->backlog.v[w++] = b->backlog.v[i];
    b->backlog.n = w;
    b->bl_next = 0;
    int err = pr__backlog_order(b);
    if (err < 0)
        return err;
    *nv = b->scratch.v;
    *nn = b->scratch.n;
    return 0;
}

int pr_batcher_add(pr_batcher *b, const pr_block *in, const pr_out *out)
{
    return pr_batcher_add_split(b, in, out, NULL);
}

int pr_batcher_add_split(pr_batcher *b, const pr_block *in, const pr_out *out,
                         const uint64_t *popular)
{
    if (!in || !out || out->rows > in->rows || !in->partition || !in->offset || !in->event_time_ms)
        return PR_EINVAL;
    if (!b->jag && (out->n_dense != b->cfg.n_dense || out->n_sparse != b->cfg.n_sparse ||
                    (out->n_sparse && out->sparse_width != b->cfg.sparse_width)))
        return PR_EINVAL;
    int err = b->jag ? pr__jag_block(b->jag, out) : 0; /* checks out->side, indexes its values */
    if (err < 0)
        return err;
    int64_t now = pr_clock_mono_ns(b->clock);
    const pr_recycled *nv;
    uint32_t nn;
    err = pr__take_restored(b, out, &nv, &nn);
    if (!err)
        err = b->cfg.batch.ordering == PR_BATCH_ORDER_EVENT_TIME
                  ? pr__add_event_time(b, in, out, popular, nv, nn, now)
                  : pr__add_partition_order(b, in, out, popular, nv, nn, now);
    b->hint_live = false; /* the engine hands restored notices to its first block */
    if (!err && b->jag_err)
        err = b->jag_err;
    b->jag_err = 0;
    pr__publish(b);
    return err;
}

void pr_batcher_hot_version(pr_batcher *b, uint64_t version)
{
    if (version > b->hot_version)
        b->hot_version = version;
}

void pr_batcher_note_done(pr_batcher *b, int32_t partition, int64_t offset)
{
    int slot = pr__offsets_slot(&b->offs, partition, true);
    if (slot >= 0)
        pr__offsets_seen_done(&b->offs, slot, offset);
    b->st.rows_rejected++;
    pr__publish(b);
}

void pr_batcher_note_consumed(pr_batcher *b, int32_t partition, int64_t next)
{
    if (next <= 0)
        return;
    int slot = pr__offsets_slot(&b->offs, partition, true);
    if (slot >= 0)
        pr__offsets_seen_done(&b->offs, slot, next - 1);
}

void pr_batcher_assign(pr_batcher *b, int32_t partition)
{
    (void)pr__offsets_slot(&b->offs, partition, true);
}

/* Append row i of build `src` to build `dst`'s cur: tensors and row metadata.
 * A declared schema's row goes through pr__jag_move_row, `vat` being src's
 * value cursor per feature (rows are moved in order from each source);
 * PR_ENOMEM when its values cannot grow. */
static int pr__move_row(pr_batcher *b, pr__build *dst, const pr__build *src, uint32_t i,
                        uint64_t *vat)
{
    pr_batch *d = dst->cur;
    const pr_batch *s = src->cur;
    uint32_t cap = b->cfg.batch.size, n = d->rows;
    size_t w = b->cfg.sparse_width;
    if (b->jag) {
        int err = pr__jag_move_row(b->jag, &dst->jb, d, &src->jb, s, cap, i, vat);
        if (err < 0)
            return err;
    } else {
        d->labels[n] = s->labels[i];
        for (uint32_t col = 0; col < b->cfg.n_dense; col++)
            d->dense[(size_t)col * cap + n] = s->dense[(size_t)col * cap + i];
        for (uint32_t col = 0; col < b->cfg.n_sparse; col++)
            memcpy((uint8_t *)d->sparse + ((size_t)col * cap + n) * w,
                   (const uint8_t *)s->sparse + ((size_t)col * cap + i) * w, w);
    }
    dst->key[n] = src->key[i];
    dst->off[n] = src->off[i];
    dst->et[n] = src->et[i];
    dst->h[n] = src->h[i];
    dst->ser[n] = src->ser[i];
    d->rows++;
    return 0;
}

/* batch.popular_min_rows: the popular build is too small to go out alone.
 * Its rows and the regular build's, merged in the order they entered the
 * builds (each stream's per-partition order holds), fill fresh regular
 * builds, and the regular stream goes out (`reason`). The regular build's
 * notices keep their place in front of their rows; popular rows never use a
 * pending notice's index (route_row), so they may pass them. */
static int pr__demote_popular(pr_batcher *b, pr_batch_reason reason)
{
    pr__build *pb = &b->bld[PR__POPULAR], *rb = &b->bld[PR__REGULAR];
    pr__build old = *rb;
    memset(rb, 0, sizeof(*rb));
    uint32_t nf = b->jag ? b->jag->n_feat : 0;
    uint64_t *vat = calloc(2 * (size_t)nf + 1, sizeof(*vat)); /* value cursors: old | popular */
    int err = pr__build_init(rb, b->cfg.batch.size);
    if (!err && (!vat || (b->jag && pr__jbuild_init(b->jag, &rb->jb) < 0)))
        err = PR_ENOMEM;
    if (err < 0) {
        if (b->jag)
            pr__jbuild_fini(b->jag, &rb->jb);
        pr__build_fini(rb);
        *rb = old;
        free(vat);
        return err;
    }
    uint32_t nr = old.cur ? old.cur->rows : 0, np = pb->cur->rows, i = 0, j = 0, ni = 0;
    int64_t oldest = nr && old.oldest < pb->oldest ? old.oldest : pb->oldest;
    uint64_t hv = old.hot_version > pb->hot_version ? old.hot_version : pb->hot_version;
    while (!err && (i < nr || j < np || ni < old.notes.n)) {
        if ((err = pr__ensure_cur(b, PR__REGULAR)) < 0)
            break;
        rb->oldest = oldest;
        rb->hot_version = hv;
        /* A notice goes in front of its regular row; those after the last
         * one after every row (popular rows never use their index, but may
         * hold rows of the old value) */
        for (; ni < old.notes.n && !err; ni++) {
            uint32_t at = old.notes.v[ni].row;
            if (at < nr ? at > i : (i < nr || j < np))
                break;
            err = pr__notes_push(&rb->notes, &old.notes.v[ni], rb->cur->rows);
            err = err < 0 ? err
                          : pr__kset_add(&b->pend_keys,
                                         pr__kset_key(old.notes.v[ni].col, old.notes.v[ni].index));
        }
        if (err || (i == nr && j == np))
            break;
        if (j == np || (i < nr && old.ser[i] < pb->ser[j])) {
            err = pr__move_row(b, rb, &old, i++, vat);
        } else {
            err = pr__move_row(b, rb, pb, j++, vat + nf);
            b->st.rows_demoted++;
        }
        if (!err && rb->cur->rows == b->cfg.batch.size)
            err = pr__emit(b, PR__REGULAR, PR_BATCH_FULL);
    }
    pb->cur->rows = 0;
    pb->hot_version = 0;
    for (uint32_t f = 0; f < nf; f++)
        pb->jb.fn[f] = 0;
    if (b->jag)
        pr__jbuild_fini(b->jag, &old.jb);
    pr__build_fini(&old);
    free(vat);
    return err < 0 ? err : pr__emit(b, PR__REGULAR, reason);
}

static int64_t pr__ms_until(int64_t deadline_ns, int64_t now)
{
    if (deadline_ns <= now)
        return 0;
    return (deadline_ns - now + NS_PER_MS - 1) / NS_PER_MS;
}

int64_t pr_batcher_poll(pr_batcher *b)
{
    int64_t now = pr_clock_mono_ns(b->clock);
    if (b->cfg.batch.ordering == PR_BATCH_ORDER_EVENT_TIME) {
        pr__fifo_trim(b);
        /* Rows whose deadline passed force the watermark up to their event time. */
        bool forced = false;
        int64_t fwm = INT64_MIN;
        for (size_t i = 0; i < b->f_len; i++) {
            const fifo_ent *e = &b->fifo[(b->f_head + i) % b->f_cap];
            if (!pr__fifo_valid(b, e))
                continue;
            const pend_meta *m = &b->p_meta[e->slot];
            if (m->arrival + b->delay_ns > now)
                break;
            forced = true;
            if (b->p_key[e->slot].et > fwm) /* raised behind a notice: its barrier's time */
                fwm = b->p_key[e->slot].et;
        }
        if (forced) {
            if (!b->wm_set || fwm > b->wm) {
                b->wm = fwm;
                b->wm_set = true;
            }
            (void)pr__release(b, false);
        }
    }
    int64_t next = -1;
    for (int k = 0; k < b->n_class; k++) {
        pr__build *bd = &b->bld[k];
        if (bd->cur && bd->cur->rows && bd->oldest + b->delay_ns <= now) {
            if (k == PR__POPULAR && bd->cur->rows < b->cfg.batch.popular_min_rows)
                (void)pr__demote_popular(b, PR_BATCH_DEADLINE);
            else
                (void)pr__emit(b, k, PR_BATCH_DEADLINE);
        }
        if (bd->cur && bd->cur->rows) {
            int64_t t = pr__ms_until(bd->oldest + b->delay_ns, now);
            if (next < 0 || t < next)
                next = t;
        }
    }
    pr__fifo_trim(b);
    if (b->f_len) {
        int64_t t = pr__ms_until(b->p_meta[b->fifo[b->f_head].slot].arrival + b->delay_ns, now);
        if (next < 0 || t < next)
            next = t;
    }
    pr__publish(b);
    return next;
}

void pr_batcher_flush(pr_batcher *b)
{
    if (b->cfg.batch.ordering == PR_BATCH_ORDER_EVENT_TIME)
        (void)pr__release(b, true);
    const pr__build *pb = &b->bld[PR__POPULAR];
    if (b->n_class > 1 && pb->cur && pb->cur->rows && pb->cur->rows < b->cfg.batch.popular_min_rows)
        (void)pr__demote_popular(b, PR_BATCH_FLUSH);
    for (int k = 0; k < b->n_class; k++)
        (void)pr__emit(b, k, PR_BATCH_FLUSH);
    pr__publish(b);
}

int pr_batcher_ack(pr_batcher *b, uint64_t seq)
{
    if (seq < b->ua_base || seq >= b->ua_base + b->ua_len)
        return PR_EINVAL;
    size_t i = (b->ua_head + (seq - b->ua_base)) % b->ua_cap;
    pr_batch *bt = b->ua[i];
    if (!bt)
        return PR_EINVAL;
    b->ua[i] = NULL;
    pr__ackset_add(&b->acked, bt->recycled, bt->n_recycled);
    const pr__rowh *h = bt->priv_rows;
    pr__offsets_done(&b->offs, h, bt->rows);
    b->n_unacked--;
    b->unacked_bytes -= bt->bytes;
    b->st.batches_acked++;
    pr_hist_snapshot_observe(&b->st.emit_to_ack_s,
                             (double)(pr_clock_mono_ns(b->clock) - bt->emit_mono_ns) / 1e9);
    while (b->ua_len && !b->ua[b->ua_head]) {
        b->ua_head = (b->ua_head + 1) % b->ua_cap;
        b->ua_len--;
        b->ua_base++;
    }
    pr_batch_unref(bt);
    pr__publish(b);
    return 0;
}

void pr_batcher_safe_offsets(pr_batcher *b, pr_batcher_offset_cb cb, void *opaque)
{
    for (size_t i = 0; i < b->offs.n; i++) {
        if (!b->offs.parts[i].active)
            continue;
        int64_t s = pr__offsets_safe(&b->offs, (int)i);
        if (s >= 0)
            cb(opaque, b->offs.parts[i].key, s);
    }
}

int64_t pr_batcher_safe_offset(pr_batcher *b, int32_t partition)
{
    int slot = pr__offsets_slot(&b->offs, partition, false);
    if (slot < 0 || !b->offs.parts[slot].active)
        return -1;
    return pr__offsets_safe(&b->offs, slot);
}

/* Remove the rows of partition `key` from a build's cur, keeping the others in order. */
static uint64_t pr__drop_cur_rows(pr_batcher *b, pr__build *bd, int32_t key)
{
    pr_batch *bt = bd->cur;
    if (!bt)
        return 0;
    uint32_t n = bt->rows, cap = b->cfg.batch.size, j = 0, x = 0;
    size_t w = b->cfg.sparse_width;
    pr__notes *nt = &bd->notes; /* in row order: each keeps its place among the rows left */
    uint8_t *keep = NULL;
    if (b->jag) { /* the jagged tensors move in one pass after this loop */
        if (!(keep = malloc(n ? n : 1)))
            return 0; /* out of memory: the rows stay (at-least-once still holds) */
        for (uint32_t i = 0; i < n; i++)
            keep[i] = bd->key[i] != key;
    }
    for (uint32_t i = 0; i < n; i++) {
        for (; x < nt->n && nt->v[x].row <= i; x++)
            nt->v[x].row = j;
        if (bd->key[i] == key)
            continue;
        if (i != j && keep) {
            bd->key[j] = bd->key[i];
            bd->off[j] = bd->off[i];
            bd->et[j] = bd->et[i];
            bd->h[j] = bd->h[i];
            bd->ser[j] = bd->ser[i];
        } else if (i != j) {
            bt->labels[j] = bt->labels[i];
            for (uint32_t col = 0; col < b->cfg.n_dense; col++)
                bt->dense[(size_t)col * cap + j] = bt->dense[(size_t)col * cap + i];
            uint8_t *sp = bt->sparse;
            for (uint32_t col = 0; col < b->cfg.n_sparse; col++)
                memcpy(sp + ((size_t)col * cap + j) * w, sp + ((size_t)col * cap + i) * w, w);
            bd->key[j] = bd->key[i];
            bd->off[j] = bd->off[i];
            bd->et[j] = bd->et[i];
            bd->h[j] = bd->h[i];
            bd->ser[j] = bd->ser[i];
        }
        j++;
    }
    for (; x < nt->n; x++)
        nt->v[x].row = j;
    if (keep)
        pr__jag_keep_rows(b->jag, &bd->jb, bt, cap, keep);
    free(keep);
    bt->rows = j;
    /* oldest stays as the earliest arrival among rows that were there: it can
     * only make the deadline earlier, never later, which keeps freshness. */
    return n - j;
}

static uint64_t pr__drop_pending_rows(pr_batcher *b, int32_t key)
{
    size_t j = 0;
    uint64_t dropped = 0;
    for (size_t i = 0; i < b->heap_len; i++) {
        uint32_t s = b->heap[i];
        if (!b->p_meta[s].note && b->p_meta[s].key == key) {
            pr__pend_free(b, s);
            dropped++;
        } else {
            b->heap[j++] = s;
        }
    }
    b->heap_len = j;
    for (size_t i = b->heap_len / 2; i-- > 0;)
        pr__heap_down(b, i);
    pr__fifo_trim(b);
    return dropped;
}

int pr_batcher_revoke(pr_batcher *b, int32_t partition, int64_t *safe_offset)
{
    int slot = pr__offsets_slot(&b->offs, partition, false);
    if (safe_offset)
        *safe_offset = -1;
    if (slot < 0)
        return 0;
    if (safe_offset)
        *safe_offset = pr__offsets_safe(&b->offs, slot);
    uint64_t dropped = 0;
    for (int k = 0; k < b->n_class; k++)
        dropped += pr__drop_cur_rows(b, &b->bld[k], partition);
    if (b->cfg.batch.ordering == PR_BATCH_ORDER_EVENT_TIME)
        dropped += pr__drop_pending_rows(b, partition);
    b->st.rows_dropped_revoke += dropped;
    pr__offsets_reset(&b->offs, slot);
    if (b->cfg.batch.ordering == PR_BATCH_ORDER_EVENT_TIME)
        pr__update_watermark(b);
    if (b->heap_notes && b->heap_len == b->heap_notes)
        (void)pr__release(b, false);
    pr__publish(b);
    return 0;
}
