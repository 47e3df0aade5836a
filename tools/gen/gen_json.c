/*
 * gen_json.c — the synthetic JSON clickstream (`piperec gen --format json`,
 * `piperec produce --format json --gen N`; contract in pr_gen.h).
 *
 * Every event is a pure function of (seed, row): user-level facts (favourite
 * categories, age) hash the user id, item-level facts (category, price, tags)
 * hash the item id, and everything else draws from the row's own generator.
 * So any range of rows can be made by any number of threads, in any order,
 * and comes out the same.
 *
 * The planted signal is what a recommender should find: each user has two
 * favourite categories; a click is Bernoulli(sigmoid(logit)) with the logit
 * rising when the item's category is the user's first or second favourite
 * and with the number of history items of the item's category (histories
 * lean towards the favourites too, so they reveal the affinity of users seen
 * rarely). The numbers are in pr__gen_json_logit and docs/formats.md.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pr_gen.h"

#define PR__GJ_CATS           24
#define PR__GJ_ITEMS_PER_CAT  4000
#define PR__GJ_USERS          200000
#define PR__GJ_HISTORY_MAX    20
#define PR__GJ_TS0            1732600000000ull /* 2024-11-26T05:46:40Z, ms */

static const char *const pr__gj_cats[PR__GJ_CATS] = {
    "electronics", "books",   "fashion", "shoes",  "home",    "kitchen", "garden",  "toys",
    "sports",      "beauty",  "health",  "grocery", "music",  "movies",  "games",   "office",
    "pets",        "baby",    "auto",    "tools",  "jewelry", "outdoor", "crafts",  "travel"};

static const char *const pr__gj_tags[] = {
    "sale",  "new",     "bestseller", "eco",   "gift",   "limited", "refurb", "bundle",
    "crème", "premium", "budget",     "local", "import", "vegan",   "kids",   "pro"};
#define PR__GJ_N_TAGS (sizeof(pr__gj_tags) / sizeof(pr__gj_tags[0]))

static const char *const pr__gj_devices[] = {"ios", "android", "web", "tv"};

static uint64_t pr__gj_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A fact about `what` (a user, an item) under key `k`: stable across rows. */
static uint64_t pr__gj_fact(uint64_t seed, uint64_t what, uint64_t k)
{
    return pr__gj_mix(seed * 0x9e3779b97f4a7c15ull ^ pr__gj_mix(what * 0xff51afd7ed558ccdull + k));
}

/* The row's own generator (splitmix64). */
typedef struct pr__gj_rng {
    uint64_t s;
} pr__gj_rng;

static uint64_t pr__gj_next(pr__gj_rng *r)
{
    return pr__gj_mix(r->s += 0x9e3779b97f4a7c15ull);
}

/* Uniform in [0, 1). */
static double pr__gj_unit(pr__gj_rng *r)
{
    return (double)(pr__gj_next(r) >> 11) * 0x1.0p-53;
}

/* A power-law rank in [0, n): a few ranks are very frequent. */
static uint64_t pr__gj_rank(pr__gj_rng *r, uint64_t n)
{
    double u = pr__gj_unit(r);
    uint64_t k = (uint64_t)((double)n * u * u * u);
    return k < n ? k : n - 1;
}

/* An item of category `cat`: ids are cat + CATS * k, so the category is a
 * function of the id. */
static uint64_t pr__gj_item(pr__gj_rng *r, unsigned cat)
{
    return cat + PR__GJ_CATS * (1 + pr__gj_rank(r, PR__GJ_ITEMS_PER_CAT));
}

/* A category for user `u`: the favourites with the given odds, else any. */
static unsigned pr__gj_pick_cat(pr__gj_rng *r, unsigned fav1, unsigned fav2, double p1, double p2)
{
    double u = pr__gj_unit(r);
    if (u < p1)
        return fav1;
    if (u < p1 + p2)
        return fav2;
    return (unsigned)(pr__gj_next(r) % PR__GJ_CATS);
}

typedef struct pr__gj_buf {
    char *p;
    size_t len, cap;
    bool overflow;
} pr__gj_buf;

static void pr__gj_put(pr__gj_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pr__gj_put(pr__gj_buf *b, const char *fmt, ...)
{
    if (b->overflow)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= b->cap - b->len)
        b->overflow = true;
    else
        b->len += (size_t)n;
}

double pr_gen_json_logit(bool fav1, bool fav2, unsigned same_cat_history, bool mobile)
{
    unsigned h = same_cat_history < 4 ? same_cat_history : 4;
    return -3.0 + 2.2 * fav1 + 1.2 * fav2 + 0.35 * h + 0.3 * mobile;
}

/* Everything an event says, drawn before it is written. */
typedef struct pr__gj_event {
    uint64_t user, item, ts;
    unsigned cat, fav1, fav2, device, n_hist, same_cat;
    bool has_age, has_device, has_hist, has_purchase, label_first;
    uint64_t age_days;
    uint64_t hist[PR__GJ_HISTORY_MAX];
    int click, purchase;
    double dwell;
} pr__gj_event;

static void pr__gj_draw(uint64_t seed, uint64_t row, pr__gj_event *e)
{
    pr__gj_rng r = {pr__gj_mix(seed ^ pr__gj_mix(row + 0x6a736f6eull))};
    memset(e, 0, sizeof(*e));
    e->ts = PR__GJ_TS0 + row * 50 + pr__gj_next(&r) % 50;
    e->user = 1 + pr__gj_rank(&r, PR__GJ_USERS);
    e->fav1 = (unsigned)(pr__gj_fact(seed, e->user, 1) % PR__GJ_CATS);
    e->fav2 = (unsigned)((e->fav1 + 1 + pr__gj_fact(seed, e->user, 2) % (PR__GJ_CATS - 1)) %
                         PR__GJ_CATS);
    e->age_days = pr__gj_fact(seed, e->user, 3) % 3650;
    e->has_age = pr__gj_unit(&r) >= 0.10;
    e->cat = pr__gj_pick_cat(&r, e->fav1, e->fav2, 0.45, 0.20);
    e->item = pr__gj_item(&r, e->cat);
    e->device = (unsigned)(pr__gj_next(&r) % 4);
    e->has_device = pr__gj_unit(&r) >= 0.05;
    e->has_hist = pr__gj_unit(&r) >= 0.08;
    if (e->has_hist) {
        e->n_hist = (unsigned)(pr__gj_next(&r) % (PR__GJ_HISTORY_MAX + 1));
        for (unsigned i = 0; i < e->n_hist; i++) {
            unsigned c = pr__gj_pick_cat(&r, e->fav1, e->fav2, 0.40, 0.30);
            e->hist[i] = pr__gj_item(&r, c);
            e->same_cat += c == e->cat;
        }
    }
    double logit = pr_gen_json_logit(e->cat == e->fav1, e->cat == e->fav2, e->same_cat,
                                     e->has_device && e->device <= 1);
    e->click = pr__gj_unit(&r) < 1.0 / (1.0 + exp(-logit));
    e->purchase = e->click && pr__gj_unit(&r) < 0.15;
    e->has_purchase = pr__gj_unit(&r) >= 0.30;
    double u = pr__gj_unit(&r);
    e->dwell = e->click ? round((3.0 - 20.0 * log(1.0 - u)) * 10.0) / 10.0 : 0.0;
    e->label_first = pr__gj_unit(&r) < 0.20; /* field order varies */
}

static void pr__gj_labels(pr__gj_buf *b, const pr__gj_event *e)
{
    pr__gj_put(b, "\"label\":{\"click\":%d,", e->click);
    if (e->has_purchase)
        pr__gj_put(b, "\"purchase\":%d,", e->purchase);
    pr__gj_put(b, "\"dwell_s\":%.1f}", e->dwell);
}

static void pr__gj_item_obj(pr__gj_buf *b, uint64_t seed, const pr__gj_event *e)
{
    uint64_t h = pr__gj_fact(seed, e->item, 7);
    double price = (double)(1 + h % 20000) / 100.0 * (1 + e->cat % 5);
    pr__gj_put(b, "\"item\":{\"id\":%" PRIu64 ",\"category\":\"%s\",\"price\":%.2f", e->item,
               pr__gj_cats[e->cat], price);
    if (h % 7 != 0) { /* one item in seven has no tags key */
        unsigned n = (unsigned)(h >> 8) % 4; /* 0..3: some lists are empty */
        pr__gj_put(b, ",\"tags\":[");
        for (unsigned i = 0; i < n; i++)
            pr__gj_put(b, "%s\"%s\"", i ? "," : "", pr__gj_tags[(h >> (16 + 5 * i)) % PR__GJ_N_TAGS]);
        pr__gj_put(b, "]");
    }
    pr__gj_put(b, "}");
}

size_t pr_gen_json_event(uint64_t seed, uint64_t row, char *buf, size_t cap)
{
    pr__gj_event e;
    pr__gj_draw(seed, row, &e);
    pr__gj_buf b = {.p = buf, .cap = cap};
    pr__gj_put(&b, "{");
    if (e.label_first) {
        pr__gj_labels(&b, &e);
        pr__gj_put(&b, ",");
    }
    pr__gj_put(&b, "\"event_id\":\"e%016" PRIx64 "\",\"ts\":%" PRIu64 ",", pr__gj_mix(seed * 0x9e3779b97f4a7c15ull + row),
               e.ts);
    pr__gj_put(&b, "\"user\":{\"id\":\"u%" PRIu64 "\"", e.user);
    if (e.has_age)
        pr__gj_put(&b, ",\"age_days\":%" PRIu64, e.age_days);
    pr__gj_put(&b, "},");
    pr__gj_item_obj(&b, seed, &e);
    if (e.has_device)
        pr__gj_put(&b, ",\"context\":{\"device\":\"%s\",\"page\":%u}", pr__gj_devices[e.device],
                   (unsigned)(row % 9));
    if (e.has_hist) {
        pr__gj_put(&b, ",\"history\":[");
        for (unsigned i = 0; i < e.n_hist; i++)
            pr__gj_put(&b, "%s%" PRIu64, i ? "," : "", e.hist[i]);
        pr__gj_put(&b, "]");
    }
    if (!e.label_first) {
        pr__gj_put(&b, ",");
        pr__gj_labels(&b, &e);
    }
    pr__gj_put(&b, "}");
    return b.overflow ? 0 : b.len;
}

size_t pr_gen_json_lines(uint64_t seed, uint64_t row0, uint64_t n, char *buf, size_t cap,
                         uint64_t *rows_out)
{
    size_t len = 0;
    uint64_t i = 0;
    for (; i < n && cap - len >= PR_GEN_JSON_LINE_MAX; i++) {
        size_t l = pr_gen_json_event(seed, row0 + i, buf + len, cap - len - 1);
        if (!l)
            break;
        len += l;
        buf[len++] = '\n';
    }
    if (rows_out)
        *rows_out = i;
    return len;
}
