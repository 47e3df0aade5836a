/*
 * notice_floor.c — the recycled-index notices known acknowledged, kept
 * across restarts (contract: pr_batcher.h, pr_batcher_notice_floor_load/_save).
 *
 * Every notice numbered below the floor was acknowledged with its batch, so
 * a restart need not announce it again (issue 19 item 5). One number is not
 * enough: a restart's backlog goes out partly before the notices below it
 * (those its first rows need come first, and batches can be acknowledged
 * out of order), and a start that stops then has acknowledged notices above
 * unacknowledged ones; with the floor alone the next start announced those
 * again (test_evict_vlog_restart: "announced 9669 notice number(s) twice").
 * So the file also lists the acknowledged numbers above the floor, as
 * ranges:
 *
 *     <floor>\n
 *     <lo>-<hi>\n          zero or more, increasing, disjoint, not adjacent,
 *                          every lo above the floor (both ends inclusive)
 *
 * A file without ranges is the one-number file of earlier releases, byte
 * for byte, so a run whose acknowledgements stay a prefix (the usual case)
 * writes what it always wrote, old files load, and an older reader of a new
 * file reads the floor and only re-announces more. The ranges stay few: the
 * backlog goes out in number order, so there are about as many as notices
 * rows needed ahead of it, and at most PR_NOTICE_ACKS_MAX (then the highest
 * are forgotten: more re-announced, never fewer).
 *
 * It is written to a temporary file and renamed, without fsync: after a
 * power loss it may hold an older state (or be missing), which knows fewer
 * acknowledged notices and only makes the next start re-announce more,
 * never less, so the cost of an fsync per store cycle buys nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher_int.h"

#define PR__FLOOR_FIX "delete the file to announce every restored recycled-index notice again"

/* One "<lo>-<hi>" line, above `after` (the floor, or the previous range's hi + 1). */
static bool pr__parse_range(const char *line, uint64_t after, pr_notice_range *r)
{
    char *end = NULL;
    if (*line < '0' || *line > '9')
        return false;
    unsigned long long lo = strtoull(line, &end, 10);
    if (*end != '-' || end[1] < '0' || end[1] > '9')
        return false;
    const char *p = end + 1;
    unsigned long long hi = strtoull(p, &end, 10);
    if (end == p || (*end != '\n' && *end != '\0') || lo > hi || lo <= after)
        return false;
    r->lo = lo;
    r->hi = hi;
    return true;
}

static int pr__load_ranges(FILE *f, const char *path, pr_notice_acks *acks, char *errstr,
                           size_t errstr_size)
{
    char line[64];
    uint32_t cap = 0, no = 1;
    uint64_t after = acks->floor;
    while (fgets(line, sizeof(line), f)) {
        no++;
        pr_notice_range r;
        if (!pr__parse_range(line, after, &r))
            return pr_seterr(errstr, errstr_size, PR_EBADREC,
                             "%s: line %u: not a range of acknowledged notice numbers (lo-hi, "
                             "increasing, above the floor); " PR__FLOOR_FIX,
                             path, no);
        if (acks->n == PR_NOTICE_ACKS_MAX)
            return pr_seterr(errstr, errstr_size, PR_EBADREC,
                             "%s: more than %u ranges of acknowledged notices; " PR__FLOOR_FIX,
                             path, PR_NOTICE_ACKS_MAX);
        if (acks->n == cap) {
            cap = cap ? cap * 2 : 16;
            pr_notice_range *v = realloc(acks->own, cap * sizeof(*v));
            if (!v)
                return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
            acks->own = v;
            acks->r = v;
        }
        acks->own[acks->n++] = r;
        after = r.hi + 1;
    }
    return 0;
}

int pr_batcher_notice_floor_load(const char *path, pr_notice_acks *acks, char *errstr,
                                 size_t errstr_size)
{
    memset(acks, 0, sizeof(*acks));
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    }
    char line[64] = "";
    char *end = NULL;
    bool ok = fgets(line, sizeof(line), f) != NULL;
    unsigned long long v = ok ? strtoull(line, &end, 10) : 0;
    int rc = 0;
    if (!ok || end == line || (*end != '\n' && *end != '\0'))
        rc = pr_seterr(errstr, errstr_size, PR_EBADREC, "%s: not a notice number; " PR__FLOOR_FIX,
                       path);
    acks->floor = rc ? 0 : v;
    if (!rc)
        rc = pr__load_ranges(f, path, acks, errstr, errstr_size);
    fclose(f);
    if (rc) {
        pr_notice_acks_fini(acks);
        acks->floor = 0;
    }
    return rc;
}

int pr_batcher_notice_floor_save(const char *path, const pr_notice_acks *acks, char *errstr,
                                 size_t errstr_size)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%" PRIu64 "\n", acks->floor) < 0;
    for (uint32_t i = 0; i < acks->n && !bad; i++)
        bad = fprintf(f, "%" PRIu64 "-%" PRIu64 "\n", acks->r[i].lo, acks->r[i].hi) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        (void)remove(tmp);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(e));
    }
    return 0;
}

void pr_notice_acks_fini(pr_notice_acks *acks)
{
    free(acks->own);
    acks->own = NULL;
    acks->r = NULL;
    acks->n = 0;
}

uint64_t pr_notice_acks_digest(const pr_notice_acks *acks)
{
    uint64_t h = 14695981039346656037ull; /* FNV-1a over the words */
    h = (h ^ acks->floor) * 1099511628211ull;
    for (uint32_t i = 0; i < acks->n; i++) {
        h = (h ^ acks->r[i].lo) * 1099511628211ull;
        h = (h ^ acks->r[i].hi) * 1099511628211ull;
    }
    return h;
}

/* ---------------------------------------------------------------- the set a batcher keeps */

static bool pr__grow(void **v, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*v, (size_t)nc * size);
    if (!p)
        return false;
    *v = p;
    *cap = nc;
    return true;
}

int pr__ackset_seed(pr__ackset *s, const pr_notice_range *r, uint32_t n)
{
    if (n > PR_NOTICE_ACKS_MAX)
        n = PR_NOTICE_ACKS_MAX;
    if (!pr__grow((void **)&s->r, &s->cap, n, sizeof(*s->r)))
        return PR_ENOMEM;
    if (n)
        memcpy(s->r, r, (size_t)n * sizeof(*r));
    s->n = n;
    return 0;
}

static int pr__num_cmp(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* Append [lo, hi] to out (sorted input), merging with the last range when
 * they overlap or touch. */
static void pr__range_put(pr_notice_range *out, uint32_t *n, uint64_t lo, uint64_t hi)
{
    if (*n && lo <= out[*n - 1].hi + 1) {
        if (hi > out[*n - 1].hi)
            out[*n - 1].hi = hi;
        return;
    }
    out[*n] = (pr_notice_range){lo, hi};
    (*n)++;
}

void pr__ackset_add(pr__ackset *s, const pr_recycled *v, uint32_t n)
{
    if (!n || !pr__grow((void **)&s->num, &s->ncap, n, sizeof(*s->num)) ||
        !pr__grow((void **)&s->tmp, &s->tcap, s->n + n, sizeof(*s->tmp)))
        return;
    for (uint32_t i = 0; i < n; i++)
        s->num[i] = v[i].number;
    qsort(s->num, n, sizeof(*s->num), pr__num_cmp);
    /* one merge of two sorted lists: O(ranges + n) per acknowledged batch */
    uint32_t i = 0, j = 0, o = 0;
    while (i < s->n || j < n) {
        if (j == n || (i < s->n && s->r[i].lo <= s->num[j])) {
            pr__range_put(s->tmp, &o, s->r[i].lo, s->r[i].hi);
            i++;
        } else {
            pr__range_put(s->tmp, &o, s->num[j], s->num[j]);
            j++;
        }
    }
    pr_notice_range *t = s->r;
    uint32_t tc = s->cap;
    s->r = s->tmp;
    s->cap = s->tcap;
    s->tmp = t;
    s->tcap = tc;
    s->n = o < PR_NOTICE_ACKS_MAX ? o : PR_NOTICE_ACKS_MAX;
}

bool pr__ackset_has(const pr__ackset *s, uint64_t number)
{
    uint32_t lo = 0, hi = s->n; /* first range whose hi >= number */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (s->r[mid].hi < number)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n && s->r[lo].lo <= number;
}

void pr__ackset_clip(pr__ackset *s, uint64_t floor, uint64_t top)
{
    uint32_t o = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        pr_notice_range r = s->r[i];
        if (r.lo <= floor)
            r.lo = floor + 1;
        if (top && r.hi >= top)
            r.hi = top - 1;
        if (r.lo <= r.hi && r.lo > floor)
            s->r[o++] = r;
    }
    s->n = o;
}

void pr__ackset_fini(pr__ackset *s)
{
    free(s->r);
    free(s->tmp);
    free(s->num);
    memset(s, 0, sizeof(*s));
}
