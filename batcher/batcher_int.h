/*
 * batcher_int.h — internals shared by batcher.c, offsets.c and the sinks
 * (not part of the public contract; pr__ names).
 */
#ifndef PR_BATCHER_INT_H
#define PR_BATCHER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

/* ---------------------------------------------------------------- notice_floor.c */

/* The recycled-index notice numbers acknowledged above the floor, as sorted
 * ranges (pr_notice_range), at most PR_NOTICE_ACKS_MAX (the highest go
 * first: forgetting one only re-announces it). Pipeline thread. */
typedef struct pr__ackset {
    pr_notice_range *r, *tmp; /* tmp: the next merge's output, swapped in */
    uint32_t n, cap, tcap;
    uint64_t *num; /* an acknowledged batch's numbers, sorted */
    uint32_t ncap;
} pr__ackset;

/* Start from a saved set (pr_notice_acks.r, validated by the loader). */
int pr__ackset_seed(pr__ackset *s, const pr_notice_range *r, uint32_t n);
/* Add an acknowledged batch's notice numbers (out of memory: they are not
 * added, which only re-announces them after a restart). */
void pr__ackset_add(pr__ackset *s, const pr_recycled *v, uint32_t n);
bool pr__ackset_has(const pr__ackset *s, uint64_t number);
/* Keep only the numbers in (floor, top). */
void pr__ackset_clip(pr__ackset *s, uint64_t floor, uint64_t top);
void pr__ackset_fini(pr__ackset *s);

/* ---------------------------------------------------------------- offsets.c */

/* One tracked partition: the offsets of its rows still in flight, in arrival
 * (= offset) order, each with a done flag for out-of-order acks. Rejected
 * records never enter the queue: they only move `highest`. */
typedef struct pr__ptrack {
    int32_t key;
    uint32_t gen;    /* bumped on revoke: handles of older generations are ignored */
    bool active;     /* assigned (seen or pr_batcher_assign), not revoked */
    int64_t highest; /* highest offset seen; -1 = none */
    /* watermark input (event_time ordering) */
    bool has_et;
    int64_t max_et;
    /* ring of pending entries */
    int64_t *off;
    uint8_t *done;
    size_t cap, head, len;
    uint64_t head_abs; /* absolute index of off[head] */
} pr__ptrack;

/* Handle of one in-flight row: which tracker slot, its generation, its entry. */
typedef struct pr__rowh {
    uint32_t slot;
    uint32_t gen;
    uint64_t abs;
} pr__rowh;

typedef struct pr__offsets {
    pr__ptrack *parts;
    size_t n, cap;
    size_t last; /* lookup cache */
    /* key -> slot + 1 (0: empty), open addressing, at most half full: the
     * store of safe offsets looks up every assigned partition per ack. */
    uint32_t *ix;
    size_t ix_cap;
    unsigned ix_bits; /* ix_cap = 2^ix_bits */
} pr__offsets;

/* The batcher's block pools (batcher.c, "tensor pool"): a block of the
 * pool's size, from the pool or fresh (no reference taken), or NULL when
 * `need` is larger. */
void *pr__tpool_take(struct pr__tpool *t, size_t need);

void pr__offsets_init(pr__offsets *o);
void pr__offsets_fini(pr__offsets *o);
/* Slot of partition key, creating (and activating) it when `create`; -1 when absent / ENOMEM. */
int pr__offsets_slot(pr__offsets *o, int32_t key, bool create);
/* A pending row: returns its handle (abs = -1 on ENOMEM). */
int pr__offsets_push(pr__offsets *o, int slot, int64_t offset, pr__rowh *h);
/* m pending rows of one partition (offsets in arrival order): handles into h[0..m). */
int pr__offsets_push_run(pr__offsets *o, int slot, const int64_t *offset, uint32_t m, pr__rowh *h);
/* A record done at once (rejected, late-dropped). */
void pr__offsets_seen_done(pr__offsets *o, int slot, int64_t offset);
/* The rows of handles h[0, n) are acknowledged. */
void pr__offsets_done(pr__offsets *o, const pr__rowh *h, size_t n);
/* Offset+1 safe to store for the slot; -1 when nothing was ever seen. */
int64_t pr__offsets_safe(const pr__offsets *o, int slot);
/* Forget the slot's state (revoke): clears the queue, bumps gen, deactivates. */
void pr__offsets_reset(pr__offsets *o, int slot);

/* ---------------------------------------------------------------- batch_jagged.c */

/* A declared schema's rows in the batcher (cfg.schema): its shape, and the
 * block being added (per feature, where each row's values start in
 * out->side->values[f]). */
typedef struct pr__jag {
    uint16_t n_labels, n_dense, n_feat;
    char (*keys)[PR_NAME_MAX];
    char (*label_names)[PR_NAME_MAX]; /* NULL = not sent */
    char (*dense_names)[PR_NAME_MAX]; /* NULL = not sent */
    char (*tables)[PR_NAME_MAX];      /* each feature's vocabulary table; NULL = none shared */
    int16_t *vocab_col;
    uint64_t *sizes;
    uint8_t *weighted; /* [n_feat] 1 = the feature carries weights; NULL = none does */
    uint64_t *voff;    /* [n_feat][voff_cap]: start of row r's values (the block's) */
    uint32_t voff_cap;
    /* event_time pending rows: each pool slot's values (all features), then
     * the weighted features' weights as float32 (in the same allocation) */
    int64_t **p_vals;
    uint32_t *p_vcap;
    uint32_t p_cap;
} pr__jag;

/* The values of one build's rows, per feature (lengths live in the batch). */
typedef struct pr__jbuild {
    int64_t **fv;
    float **fw;         /* [n_feat]: a weighted feature's weights beside fv (fcap); else NULL */
    const uint8_t *wtd; /* the jag's weighted, NULL = none */
    uint64_t *fn, *fcap;
} pr__jbuild;

int pr__jag_new(const pr_batch_schema *s, pr__jag **out);
void pr__jag_free(pr__jag *j);
/* Bytes of a pending row's fixed part (labels, dense, lengths). */
size_t pr__jag_row_bytes(const pr__jag *j);
int pr__jbuild_init(const pr__jag *j, pr__jbuild *jb);
void pr__jbuild_fini(const pr__jag *j, pr__jbuild *jb);
/* An empty jagged batch for `cap` rows (rows 0), names filled. */
pr_batch *pr__jag_batch(const pr__jag *j, const char *pipeline, uint32_t cap);
/* Check out->side against the schema and index the block's values. */
int pr__jag_block(pr__jag *j, const pr_out *out);
/* Append rows idx[0..k) of the indexed block to `bt` (at bt->rows, stride cap). */
int pr__jag_copy_rows(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                      const pr_out *out, const uint32_t *idx, uint32_t k);
/* Row r's values of feature f in the indexed block. */
const int64_t *pr__jag_row_values(const pr__jag *j, const pr_out *out, uint32_t f, uint32_t r,
                                  uint32_t *n);
/* event_time: row r of the indexed block into pool slot `slot` (fixed part
 * at dst), and back into `bt`; values of a pending row of feature f. */
int pr__jag_pool_grow(pr__jag *j, uint32_t cap);
int pr__jag_to_pending(pr__jag *j, const pr_out *out, uint32_t r, uint32_t slot, uint8_t *dst);
int pr__jag_from_pending(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                         uint32_t slot, const uint8_t *src);
const int64_t *pr__jag_pending_values(const pr__jag *j, uint32_t slot, const uint8_t *src,
                                      uint32_t f, uint32_t *n);
/* Keep the rows of `bt` (stride cap) whose keep[i] is set, in order. */
void pr__jag_keep_rows(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap,
                       const uint8_t *keep);
/* Append row i of build (sjb, s) to (djb, d) at d->rows (both stride cap):
 * labels, dense, lengths and values; vat[f] is where row i's values of
 * feature f start in sjb, advanced past them (a caller moving a build's rows
 * in order starts from zeros). PR_ENOMEM. */
int pr__jag_move_row(const pr__jag *j, pr__jbuild *djb, pr_batch *d, const pr__jbuild *sjb,
                     const pr_batch *s, uint32_t cap, uint32_t i, uint64_t *vat);
/* Emission: lengths to stride rows, values gathered key-major, bytes set;
 * the build's values emptied. */
int pr__jag_finish(const pr__jag *j, pr__jbuild *jb, pr_batch *bt, uint32_t cap);
/* Embedding rows of feature f for the batch's vocab_sizes. */
uint64_t pr__jag_vocab_size(const pr__jag *j, uint32_t f, pr_batch_vocab_cb cb, void *opaque);

#endif
