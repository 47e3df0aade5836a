/*
 * trainer_ckpt.c — interval sets of input offsets per (topic, partition),
 * the position a trainer checkpoint holds (contract: trainer_ckpt.h).
 *
 * Positions are small: one interval per partition while a single trainer
 * trains in order, a few more with several ranks or rejected records (gaps
 * that no batch holds). Partitions are few, so lookup is linear and each
 * partition's intervals are a sorted array searched by bisection.
 */
#include "trainer_ckpt.h"

#include <stdlib.h>
#include <string.h>

#include "pr_engine.h"
#include "pr_error.h"
#include "pr_grow.h"

void pr__posset_init(pr__posset *s)
{
    memset(s, 0, sizeof(*s));
}

void pr__posset_fini(pr__posset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->parts[i].topic);
        free(s->parts[i].iv);
    }
    free(s->parts);
    memset(s, 0, sizeof(*s));
}

static pr__pospart *pr__find(const pr__posset *s, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->parts[i].partition == partition && !strcmp(s->parts[i].topic, topic))
            return &s->parts[i];
    return NULL;
}

int pr__posset_add(pr__posset *s, const char *topic, int32_t partition, int64_t first, int64_t last)
{
    if (!topic)
        topic = "";
    if (first > last || first < 0)
        return PR_EINVAL;
    pr__pospart *p = pr__find(s, topic, partition);
    if (!p) {
        if (pr_grow((void **)&s->parts, &s->cap, s->n + 1, sizeof(*s->parts)) < 0)
            return PR_ENOMEM;
        p = &s->parts[s->n];
        memset(p, 0, sizeof(*p));
        if (!(p->topic = strdup(topic)))
            return PR_ENOMEM;
        p->partition = partition;
        s->n++;
    }
    if (pr_grow((void **)&p->iv, &p->cap, p->n + 1, sizeof(*p->iv)) < 0)
        return PR_ENOMEM;
    /* First interval that ends at or after first-1 (could merge with us). */
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->iv[mid].last < first - 1)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* Swallow every interval that starts at or before last+1 (no overflow:
     * a range may end at INT64_MAX, e.g. from a hostile Subscribe.resume). */
    size_t end = lo;
    while (end < p->n && (last == INT64_MAX || p->iv[end].first <= last + 1)) {
        if (p->iv[end].first < first)
            first = p->iv[end].first;
        if (p->iv[end].last > last)
            last = p->iv[end].last;
        end++;
    }
    if (end == lo) { /* insert */
        memmove(&p->iv[lo + 1], &p->iv[lo], (p->n - lo) * sizeof(*p->iv));
        p->n++;
    } else { /* replace [lo, end) by one */
        memmove(&p->iv[lo + 1], &p->iv[end], (p->n - end) * sizeof(*p->iv));
        p->n -= end - lo - 1;
    }
    p->iv[lo] = (pr__iv){first, last};
    return 0;
}

bool pr__posset_covers(const pr__posset *s, const char *topic, int32_t partition, int64_t first,
                       int64_t last)
{
    const pr__pospart *p = pr__find(s, topic ? topic : "", partition);
    if (!p)
        return false;
    size_t lo = 0, hi = p->n;
    while (lo < hi) { /* first interval with last >= first */
        size_t mid = (lo + hi) / 2;
        if (p->iv[mid].last < first)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && p->iv[lo].first <= first && p->iv[lo].last >= last;
}

bool pr__posset_covers_batch(const pr__posset *s, const pr_batch *b)
{
    if (!b->n_ranges || !s->n)
        return false;
    for (uint32_t i = 0; i < b->n_ranges; i++) {
        const pr_batch_range *r = &b->ranges[i];
        int ti = PR_PART_KEY_TOPIC(r->partition);
        const char *topic = (uint32_t)ti < b->n_topics && b->topics ? b->topics[ti] : "";
        if (!pr__posset_covers(s, topic, PR_PART_KEY_PARTITION(r->partition), r->first_offset,
                               r->last_offset))
            return false;
    }
    return true;
}
