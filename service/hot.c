/*
 * hot.c — the hot-set sketch (pr_hot.h): space-saving top-K with decay driven
 * by record counts.
 *
 * Layout: K = PR_HOT_SLACK * top_k slots (index, count, error), a min-heap of slot numbers ordered
 * by count (the slot to evict is heap[0]) and an open-addressing table from index to slot (linear
 * probing, at most half full, backward-shift deletion so no tombstones pile up on a stream that
 * evicts on most values).
 *
 * Decay: instead of multiplying K counters by 2^(-n/half_life) per block, new
 * observations weigh w, and w grows by 2^(n/half_life) per block; shares are
 * ratios to the decayed total, so only the ratio matters. When w passes 2^64
 * every count, error and the total are divided by w (a uniform scaling keeps
 * the heap order). The order of operations depends only on the values and
 * block sizes, so the sketch is deterministic.
 *
 * Hot sets (pr_hot_popular_rows): a snapshot of the sketch's top, rebuilt
 * every few thousand values, in a table of its own so that a membership
 * test never touches the sketch (whose contents change on every value).
 */
#include "pr_hot.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PR__HOT_RESCALE 18446744073709551616.0 /* 2^64 */

struct pr_hot {
    uint32_t top_k; /* largest k answered */
    uint32_t k;     /* slots: PR_HOT_SLACK * top_k */
    uint32_t used;  /* slots holding an index */
    uint32_t tab_mask;
    int tab_shift; /* 64 - log2(table size) */
    uint64_t half_life;
    uint64_t rows;  /* values observed, not decayed */
    double w;       /* weight of the next observation */
    double total;   /* decayed sum of all weights observed */
    int64_t *key;   /* [k] */
    double *cnt;    /* [k] upper bound of the decayed count */
    double *err;    /* [k] count inherited at takeover (over-estimation bound) */
    uint32_t *heap; /* [k] slot numbers, min-heap on cnt */
    uint32_t *pos;  /* [k] position of a slot in heap */
    uint32_t *tab;  /* [tab_mask+1] slot + 1, 0 = empty */

    /* hot set: open addressing over set_mask+1 indices, PR__HOT_NONE = empty */
    bool set_on;       /* kept (pr_hot_popular_rows asked for it) */
    uint64_t set_rows; /* rows observed at the last rebuild */
    uint32_t set_n;
    uint64_t set_version; /* rebuilds so far (pr_hot_set_version) */
    uint32_t set_mask;
    int set_shift;
    int64_t *set_key;
};

#define PR__HOT_NONE INT64_MIN /* indices are >= 0 */

pr_hot *pr_hot_new(uint32_t top_k, uint64_t half_life)
{
    if (top_k == 0 || top_k > PR_HOT_MAX_TOP_K)
        return NULL;
    pr_hot *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->top_k = top_k;
    top_k *= PR_HOT_SLACK;
    uint32_t ts = 4;
    int bits = 2;
    while (ts < 2 * top_k) {
        ts <<= 1;
        bits++;
    }
    h->k = top_k;
    h->tab_mask = ts - 1;
    h->tab_shift = 64 - bits;
    h->half_life = half_life;
    h->w = 1.0;
    h->key = calloc(top_k, sizeof(*h->key));
    h->cnt = calloc(top_k, sizeof(*h->cnt));
    h->err = calloc(top_k, sizeof(*h->err));
    h->heap = calloc(top_k, sizeof(*h->heap));
    h->pos = calloc(top_k, sizeof(*h->pos));
    h->tab = calloc(ts, sizeof(*h->tab));
    /* Hot set: at most top_k of the K counters, table at most half full. */
    uint32_t ss = 4;
    int sbits = 2;
    while (ss < 2 * h->top_k) {
        ss <<= 1;
        sbits++;
    }
    h->set_mask = ss - 1;
    h->set_shift = 64 - sbits;
    h->set_key = malloc(ss * sizeof(*h->set_key));
    if (h->set_key)
        for (uint32_t i = 0; i < ss; i++)
            h->set_key[i] = PR__HOT_NONE;
    if (!h->key || !h->cnt || !h->err || !h->heap || !h->pos || !h->tab || !h->set_key) {
        pr_hot_free(h);
        return NULL;
    }
    return h;
}

void pr_hot_free(pr_hot *h)
{
    if (!h)
        return;
    free(h->key);
    free(h->cnt);
    free(h->err);
    free(h->heap);
    free(h->pos);
    free(h->tab);
    free(h->set_key);
    free(h);
}

uint32_t pr_hot_top_k(const pr_hot *h)
{
    return h->top_k;
}

uint64_t pr_hot_rows_observed(const pr_hot *h)
{
    return h->rows;
}

/* ---------------------------------------------------------------- table */

static inline uint32_t pr__hot_hash(const pr_hot *h, int64_t key)
{
    return (uint32_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> h->tab_shift);
}

/* The table position holding `key`, or the empty position where it would go. */
static inline uint32_t pr__hot_find(const pr_hot *h, int64_t key)
{
    uint32_t i = pr__hot_hash(h, key);
    while (h->tab[i] && h->key[h->tab[i] - 1] != key)
        i = (i + 1) & h->tab_mask;
    return i;
}

/* Remove the entry at table position i, shifting later members of its probe
 * run back so lookups never stop early. */
static void pr__hot_tab_delete(pr_hot *h, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        h->tab[i] = 0;
        for (;;) {
            j = (j + 1) & h->tab_mask;
            if (!h->tab[j])
                return;
            uint32_t home = pr__hot_hash(h, h->key[h->tab[j] - 1]);
            /* Keep j where it is when its home lies cyclically in (i, j]. */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            break;
        }
        h->tab[i] = h->tab[j];
        i = j;
    }
}

/* ---------------------------------------------------------------- heap */

static inline void pr__hot_swap(pr_hot *h, uint32_t a, uint32_t b)
{
    uint32_t sa = h->heap[a], sb = h->heap[b];
    h->heap[a] = sb;
    h->heap[b] = sa;
    h->pos[sb] = a;
    h->pos[sa] = b;
}

static void pr__hot_sift_down(pr_hot *h, uint32_t i)
{
    uint32_t n = h->used;
    for (;;) {
        uint32_t l = 2 * i + 1, m = i;
        if (l < n && h->cnt[h->heap[l]] < h->cnt[h->heap[m]])
            m = l;
        if (l + 1 < n && h->cnt[h->heap[l + 1]] < h->cnt[h->heap[m]])
            m = l + 1;
        if (m == i)
            return;
        pr__hot_swap(h, i, m);
        i = m;
    }
}

static void pr__hot_sift_up(pr_hot *h, uint32_t i)
{
    while (i > 0) {
        uint32_t parent = (i - 1) / 2;
        if (h->cnt[h->heap[parent]] <= h->cnt[h->heap[i]])
            return;
        pr__hot_swap(h, i, parent);
        i = parent;
    }
}

/* ---------------------------------------------------------------- observe */

static inline void pr__hot_add(pr_hot *h, int64_t key)
{
    double w = h->w;
    uint32_t t = pr__hot_find(h, key);
    uint32_t s;
    if (h->tab[t]) {
        s = h->tab[t] - 1;
        h->cnt[s] += w;
        pr__hot_sift_down(h, h->pos[s]);
        return;
    }
    if (h->used < h->k) {
        s = h->used++;
        h->key[s] = key;
        h->cnt[s] = w;
        h->err[s] = 0;
        h->tab[t] = s + 1;
        h->heap[s] = s;
        h->pos[s] = s;
        pr__hot_sift_up(h, s);
        return;
    }
    /* Take over the smallest counter. */
    s = h->heap[0];
    pr__hot_tab_delete(h, pr__hot_find(h, h->key[s]));
    h->key[s] = key;
    h->err[s] = h->cnt[s];
    h->cnt[s] += w;
    h->tab[pr__hot_find(h, key)] = s + 1;
    pr__hot_sift_down(h, 0);
}

/* Grow the weight by n records of decay; rescale when it gets large. */
static void pr__hot_step(pr_hot *h, size_t n)
{
    if (h->half_life && n)
        h->w *= exp2((double)n / (double)h->half_life);
    if (h->w < PR__HOT_RESCALE)
        return;
    double inv = 1.0 / h->w;
    for (uint32_t s = 0; s < h->used; s++) {
        h->cnt[s] *= inv;
        h->err[s] *= inv;
    }
    h->total *= inv;
    h->w = 1.0;
}

static void pr__hot_set_maybe_refresh(pr_hot *h);

void pr_hot_observe(pr_hot *h, const int64_t *idx, size_t n)
{
    pr__hot_step(h, n);
    for (size_t i = 0; i < n; i++)
        pr__hot_add(h, idx[i]);
    h->rows += n;
    h->total += h->w * (double)n;
    pr__hot_set_maybe_refresh(h);
}

/* A recycled index names a new value: its counter starts again from 0
 * (the sketch counts values, not slots). The counter stays, the smallest
 * now, so the next new index takes it over. True when the index was in the
 * hot set (which must then be rebuilt without it). */
static bool pr__hot_forget(pr_hot *h, int64_t index)
{
    uint32_t t = pr__hot_find(h, index);
    if (!h->tab[t])
        return false;
    uint32_t s = h->tab[t] - 1;
    h->cnt[s] = 0;
    h->err[s] = 0;
    pr__hot_sift_up(h, h->pos[s]);
    return pr_hot_is_hot(h, index);
}

void pr_hot_observe_out(pr_hot *h, const pr_out *o, uint32_t col)
{
    size_t n = o->rows - o->n_rejected;
    pr__hot_step(h, n);
    size_t base = (size_t)col * o->cap;
    uint32_t ni = 0; /* o->recycled is in row order */
    bool was_hot = false;
    for (uint32_t r = 0; r < o->rows; r++) {
        for (; ni < o->n_recycled && o->recycled[ni].row <= r; ni++)
            if (o->recycled[ni].col == col)
                was_hot |= pr__hot_forget(h, o->recycled[ni].index);
        if (o->n_rejected && (o->rejected[r >> 6] >> (r & 63) & 1))
            continue;
        pr__hot_add(h, o->sparse_width == 8 ? ((const int64_t *)o->sparse)[base + r]
                                            : ((const int32_t *)o->sparse)[base + r]);
    }
    for (; ni < o->n_recycled; ni++)
        if (o->recycled[ni].col == col)
            was_hot |= pr__hot_forget(h, o->recycled[ni].index);
    h->rows += n;
    h->total += h->w * (double)n;
    if (was_hot)
        pr_hot_set_refresh(h); /* a recycled index is not hot for its new value */
    else
        pr__hot_set_maybe_refresh(h);
}

void pr_hot_observe_side(pr_hot *h, const pr_out *o, uint16_t f)
{
    const pr_fside *sd = o->side;
    if (!sd || f >= sd->n_feat)
        return;
    const int32_t *len = sd->lengths + (size_t)f * sd->cap;
    const int64_t *v = sd->values[f];
    size_t n = 0;
    for (uint32_t r = 0; r < o->rows; r++)
        if (!(o->n_rejected && (o->rejected[r >> 6] >> (r & 63) & 1)))
            n += (size_t)len[r];
    pr__hot_step(h, n);
    size_t off = 0;
    uint32_t ni = 0; /* o->recycled: (row, feature) order after pr_feature_finish */
    bool was_hot = false;
    for (uint32_t r = 0; r < o->rows; r++) {
        for (; ni < o->n_recycled && o->recycled[ni].row <= r; ni++)
            if (o->recycled[ni].col == f)
                was_hot |= pr__hot_forget(h, o->recycled[ni].index);
        size_t l = (size_t)len[r];
        if (!(o->n_rejected && (o->rejected[r >> 6] >> (r & 63) & 1)))
            for (size_t i = 0; i < l && off + i < sd->n_values[f]; i++)
                pr__hot_add(h, v[off + i]);
        off += l;
    }
    for (; ni < o->n_recycled; ni++)
        if (o->recycled[ni].col == f)
            was_hot |= pr__hot_forget(h, o->recycled[ni].index);
    h->rows += n;
    h->total += h->w * (double)n;
    if (was_hot)
        pr_hot_set_refresh(h);
    else
        pr__hot_set_maybe_refresh(h);
}

/* ---------------------------------------------------------------- read */

typedef struct pr__hot_ent {
    int64_t key;
    double est;
} pr__hot_ent;

static int pr__hot_cmp(const void *a, const void *b)
{
    const pr__hot_ent *x = a, *y = b;
    if (x->est != y->est)
        return x->est > y->est ? -1 : 1;
    return (x->key > y->key) - (x->key < y->key);
}

/* The counters as (index, estimated decayed count), hottest first; NULL when
 * out of memory or empty. The estimate is the middle of the space-saving
 * bounds [cnt - err, cnt]. */
static pr__hot_ent *pr__hot_sorted(const pr_hot *h)
{
    if (!h->used)
        return NULL;
    pr__hot_ent *e = malloc(h->used * sizeof(*e));
    if (!e)
        return NULL;
    for (uint32_t s = 0; s < h->used; s++) {
        e[s].key = h->key[s];
        e[s].est = h->cnt[s] - 0.5 * h->err[s];
    }
    qsort(e, h->used, sizeof(*e), pr__hot_cmp);
    return e;
}

size_t pr_hot_top(const pr_hot *h, size_t k, pr_hot_item *items, double *coverage)
{
    if (coverage)
        *coverage = 0;
    pr__hot_ent *e = pr__hot_sorted(h);
    if (!e || h->total <= 0) {
        free(e);
        return 0;
    }
    if (k > h->top_k)
        k = h->top_k;
    if (k > h->used)
        k = h->used;
    double sum = 0;
    for (size_t i = 0; i < k; i++) {
        items[i].index = e[i].key;
        items[i].share = e[i].est / h->total;
        sum += e[i].est;
    }
    free(e);
    if (coverage)
        *coverage = sum / h->total > 1 ? 1 : sum / h->total;
    return k;
}

void pr_hot_coverage(const pr_hot *h, const size_t *ks, size_t n, double *out)
{
    pr__hot_ent *e = pr__hot_sorted(h);
    for (size_t j = 0; j < n; j++) {
        double sum = 0;
        if (e && h->total > 0) {
            size_t k = ks[j] < h->top_k ? ks[j] : h->top_k;
            if (k > h->used)
                k = h->used;
            for (size_t i = 0; i < k; i++)
                sum += e[i].est;
            sum /= h->total;
        }
        out[j] = sum > 1 ? 1 : sum;
    }
    free(e);
}

/* ---------------------------------------------------------------- hot sets */

static inline uint32_t pr__hot_set_hash(const pr_hot *h, int64_t key)
{
    return (uint32_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> h->set_shift);
}

/* Move the k largest est of e[0..n) to e[0..k) (any order): quickselect
 * with a three-way partition, O(n) expected; the pivot rule is fixed, so the
 * result is deterministic. Invariant: e[0..lo) >= e[lo..n), e[0..hi) >=
 * e[hi..n), lo <= k <= hi. */
static void pr__hot_select(pr__hot_ent *e, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1) {
        double piv = e[lo + (hi - lo) / 2].est;
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            pr__hot_ent t = e[i];
            if (t.est > piv) {
                e[i++] = e[lt];
                e[lt++] = t;
            } else if (t.est < piv) {
                e[i] = e[--gt];
                e[gt] = t;
            } else {
                i++;
            }
        }
        /* e[lo..lt) > piv, e[lt..gt) == piv, e[gt..hi) < piv */
        if (k <= lt)
            hi = lt;
        else if (k <= gt)
            return;
        else
            lo = gt;
    }
}

void pr_hot_set_refresh(pr_hot *h)
{
    h->set_on = true;
    h->set_version++;
    h->set_rows = h->rows;
    for (uint32_t i = 0; i <= h->set_mask; i++)
        h->set_key[i] = PR__HOT_NONE;
    h->set_n = 0;
    if (!h->used)
        return;
    pr__hot_ent *e = malloc(h->used * sizeof(*e));
    if (!e)
        return; /* out of memory: an empty set is always safe */
    /* Candidates: counters whose guaranteed part (cnt - err) reaches the
     * floor; then the top_k of them by estimate (cnt - err/2), selected in
     * linear time (a sort of all K counters per column per rebuild cost a
     * third of the pipeline's throughput). */
    double floor = PR_HOT_SET_MIN_COUNT * h->w;
    size_t n = 0;
    for (uint32_t s = 0; s < h->used; s++)
        if (h->cnt[s] - h->err[s] >= floor)
            e[n++] = (pr__hot_ent){h->key[s], h->cnt[s] - 0.5 * h->err[s]};
    size_t k = n < h->top_k ? n : h->top_k;
    if (k < n)
        pr__hot_select(e, n, k);
    for (size_t i = 0; i < k; i++) {
        uint32_t j = pr__hot_set_hash(h, e[i].key);
        while (h->set_key[j] != PR__HOT_NONE)
            j = (j + 1) & h->set_mask;
        h->set_key[j] = e[i].key;
    }
    h->set_n = (uint32_t)k;
    free(e);
}

static void pr__hot_set_maybe_refresh(pr_hot *h)
{
    if (!h->set_on)
        return;
    uint64_t period = h->set_rows / 4;
    if (period < PR_HOT_SET_REFRESH_MIN)
        period = PR_HOT_SET_REFRESH_MIN;
    if (period > PR_HOT_SET_REFRESH_MAX)
        period = PR_HOT_SET_REFRESH_MAX;
    if (h->rows - h->set_rows >= period)
        pr_hot_set_refresh(h);
}

bool pr_hot_is_hot(const pr_hot *h, int64_t index)
{
    if (!h->set_n)
        return false;
    uint32_t j = pr__hot_set_hash(h, index);
    for (;;) {
        int64_t k = h->set_key[j];
        if (k == index)
            return true;
        if (k == PR__HOT_NONE)
            return false;
        j = (j + 1) & h->set_mask;
    }
}

size_t pr_hot_set_size(const pr_hot *h)
{
    return h->set_n;
}

uint64_t pr_hot_set_version(const pr_hot *h)
{
    return h->set_version;
}

uint64_t pr_hot_sets_version(pr_hot *const *hot, uint32_t n)
{
    uint64_t v = 0;
    for (uint32_t c = 0; hot && c < n; c++)
        v += hot[c]->set_version;
    return v;
}

/* A declared schema's rows (o->side): row r stays popular only when every
 * element of every vocab feature (vocab_col[f] = c, judged against hot[c])
 * is hot; a feature without vocab is not judged, an empty list passes. */
static void pr__hot_popular_side(pr_hot *const *hot, const pr_out *o, uint64_t *pop)
{
    const pr_fside *sd = o->side;
    for (uint16_t f = 0; f < sd->n_feat; f++) {
        int c = sd->vocab_col[f];
        if (c < 0 || (uint32_t)c >= o->n_sparse)
            continue;
        pr_hot *h = hot[c];
        if (!h->set_on)
            pr_hot_set_refresh(h);
        const int32_t *len = sd->lengths + (size_t)f * sd->cap;
        const int64_t *v = sd->values[f];
        size_t off = 0;
        for (uint32_t r = 0; r < o->rows; r++) {
            size_t l = len[r] > 0 ? (size_t)len[r] : 0;
            if (pr_bit_test(pop, r))
                for (size_t i = 0; i < l; i++)
                    if (off + i >= sd->n_values[f] || !pr_hot_is_hot(h, v[off + i])) {
                        pr_bit_clear(pop, r);
                        break;
                    }
            off += l;
        }
    }
}

uint64_t *pr_hot_popular_rows(pr_hot *const *hot, const pr_out *o)
{
    size_t words = pr_bitmap_words(o->rows ? o->rows : 1);
    uint64_t *pop = malloc(words * sizeof(*pop));
    if (!pop)
        return NULL;
    memset(pop, 0xff, words * sizeof(*pop));
    if (o->side) {
        pr__hot_popular_side(hot, o, pop);
        return pop;
    }
    for (uint32_t c = 0; c < o->n_sparse; c++) {
        pr_hot *h = hot[c];
        if (!h->set_on)
            pr_hot_set_refresh(h);
        size_t base = (size_t)c * o->cap;
        /* Word by word: once a word has no popular row left, skip it. */
        for (size_t wi = 0; wi < words; wi++) {
            uint64_t w = pop[wi];
            while (w) {
                uint32_t r = (uint32_t)(wi * 64 + (size_t)__builtin_ctzll(w));
                w &= w - 1;
                if (r >= o->rows)
                    break;
                int64_t idx = o->sparse_width == 8 ? ((const int64_t *)o->sparse)[base + r]
                                                   : ((const int32_t *)o->sparse)[base + r];
                if (!pr_hot_is_hot(h, idx))
                    pop[wi] &= ~(1ull << (r & 63));
            }
        }
    }
    return pop;
}
