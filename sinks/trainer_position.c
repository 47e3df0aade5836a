/*
 * trainer_position.c — the client side's checkpoint position
 * (pr_trainer_position in pr_trainer_client.h): the same merged interval
 * sets as the server's (trainer_ckpt.c), plus an ordered range list for
 * CheckpointCommit / Subscribe.resume and a JSON form.
 *
 * The JSON form is the Python client's Position.to_dict(),
 * {"topic/partition": [[first, last], ...]}, so a checkpoint written by
 * `piperec consume` can be read by a Python trainer and the other way
 * round. The parser reads exactly that shape (an object of arrays of
 * two-integer arrays) and nothing more general: it is not a JSON library.
 */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pr_error.h"
#include "pr_grow.h"
#include "pr_trainer_client.h"
#include "trainer_ckpt.h"

struct pr_trainer_position {
    pr__posset set;
    pr_trainer_range *list; /* ordered view of set, rebuilt when dirty */
    size_t n_list, cap_list;
    bool dirty;
};

pr_trainer_position *pr_trainer_position_new(void)
{
    pr_trainer_position *p = calloc(1, sizeof(*p));
    if (p)
        pr__posset_init(&p->set);
    return p;
}

void pr_trainer_position_free(pr_trainer_position *p)
{
    if (!p)
        return;
    pr__posset_fini(&p->set);
    free(p->list);
    free(p);
}

int pr_trainer_position_add(pr_trainer_position *p, const char *topic, int32_t partition,
                            int64_t first, int64_t last)
{
    p->dirty = true;
    return pr__posset_add(&p->set, topic, partition, first, last);
}

int pr_trainer_position_add_batch(pr_trainer_position *p, const pr_batch_view *v)
{
    char topic[256];
    for (uint32_t i = 0; i < v->n_ranges; i++) {
        const pr_batch_view_range *r = &v->ranges[i];
        size_t tl = r->topic_len < sizeof(topic) ? r->topic_len : sizeof(topic) - 1;
        memcpy(topic, r->topic, tl);
        topic[tl] = '\0';
        int err = pr_trainer_position_add(p, topic, r->partition, r->first_offset, r->last_offset);
        if (err < 0)
            return err;
    }
    return 0;
}

int pr_trainer_position_merge(pr_trainer_position *p, const pr_trainer_position *o)
{
    for (size_t i = 0; i < o->set.n; i++) {
        const pr__pospart *pp = &o->set.parts[i];
        for (size_t j = 0; j < pp->n; j++) {
            int err = pr_trainer_position_add(p, pp->topic, pp->partition, pp->iv[j].first,
                                              pp->iv[j].last);
            if (err < 0)
                return err;
        }
    }
    return 0;
}

static int pr__part_cmp(const void *a, const void *b)
{
    const pr__pospart *x = *(const pr__pospart *const *)a, *y = *(const pr__pospart *const *)b;
    int c = strcmp(x->topic, y->topic);
    return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

int64_t pr_trainer_position_ranges(pr_trainer_position *p, const pr_trainer_range **out)
{
    if (p->dirty || !p->list) {
        const pr__pospart **order = malloc((p->set.n ? p->set.n : 1) * sizeof(*order));
        if (!order)
            return PR_ENOMEM;
        size_t total = 0;
        for (size_t i = 0; i < p->set.n; i++) {
            order[i] = &p->set.parts[i];
            total += p->set.parts[i].n;
        }
        qsort(order, p->set.n, sizeof(*order), pr__part_cmp);
        if (pr_grow((void **)&p->list, &p->cap_list, total ? total : 1, sizeof(*p->list)) < 0) {
            free(order);
            return PR_ENOMEM;
        }
        p->n_list = 0;
        for (size_t i = 0; i < p->set.n; i++)
            for (size_t j = 0; j < order[i]->n; j++)
                p->list[p->n_list++] =
                    (pr_trainer_range){order[i]->topic, order[i]->partition, order[i]->iv[j].first,
                                       order[i]->iv[j].last};
        free(order);
        p->dirty = false;
    }
    *out = p->list;
    return (int64_t)p->n_list;
}

uint64_t pr_trainer_position_count(const pr_trainer_position *p)
{
    uint64_t n = 0;
    for (size_t i = 0; i < p->set.n; i++)
        for (size_t j = 0; j < p->set.parts[i].n; j++)
            n += (uint64_t)(p->set.parts[i].iv[j].last - p->set.parts[i].iv[j].first) + 1;
    return n;
}

int pr_trainer_position_write_json(const pr_trainer_position *cp, FILE *f)
{
    pr_trainer_position *p = (pr_trainer_position *)cp; /* the ordered view is a cache */
    const pr_trainer_range *r;
    int64_t n = pr_trainer_position_ranges(p, &r);
    if (n < 0)
        return (int)n;
    fputc('{', f);
    for (int64_t i = 0; i < n; i++) {
        bool first_of_part = i == 0 || r[i].partition != r[i - 1].partition ||
                             strcmp(r[i].topic, r[i - 1].topic) != 0;
        if (first_of_part) {
            fputs(i ? "]], \"" : "\"", f);
            for (const char *t = r[i].topic; *t; t++) {
                if (*t == '"' || *t == '\\')
                    fputc('\\', f);
                fputc(*t, f);
            }
            fprintf(f, "/%d\": [[", (int)r[i].partition);
        } else {
            fputs("], [", f);
        }
        fprintf(f, "%lld, %lld", (long long)r[i].first, (long long)r[i].last);
    }
    fputs(n ? "]]}" : "}", f);
    return ferror(f) ? PR_EIO : 0;
}

/* ---------------------------------------------------------------- parsing */

typedef struct jp {
    const char *s, *start;
    char *errstr;
    size_t es;
} jp;

static void pr__ws(jp *j)
{
    while (isspace((unsigned char)*j->s))
        j->s++;
}

static int pr__jerr(jp *j, const char *what)
{
    return pr_seterr(j->errstr, j->es, PR_EBADREC, "position JSON, byte %zu: %s",
                     (size_t)(j->s - j->start), what);
}

static int pr__expect(jp *j, char ch)
{
    pr__ws(j);
    if (*j->s != ch) {
        char m[32];
        snprintf(m, sizeof(m), "expected '%c'", ch);
        return pr__jerr(j, m);
    }
    j->s++;
    return 0;
}

/* A string without \u escapes into out[n]. */
static int pr__jstring(jp *j, char *out, size_t n)
{
    if (pr__expect(j, '"') < 0)
        return PR_EBADREC;
    size_t k = 0;
    for (;;) {
        char ch = *j->s++;
        if (!ch)
            return pr__jerr(j, "unterminated string");
        if (ch == '"')
            break;
        if (ch == '\\') {
            ch = *j->s++;
            if (ch != '"' && ch != '\\' && ch != '/')
                return pr__jerr(j, "unsupported escape in a key");
        }
        if (k + 1 >= n)
            return pr__jerr(j, "key too long");
        out[k++] = ch;
    }
    out[k] = '\0';
    return 0;
}

static int pr__jint(jp *j, int64_t *v)
{
    pr__ws(j);
    char *e;
    errno = 0;
    long long x = strtoll(j->s, &e, 10);
    if (e == j->s || errno)
        return pr__jerr(j, "expected an integer");
    j->s = e;
    *v = x;
    return 0;
}

int pr_trainer_position_parse_json(pr_trainer_position *p, const char *s, const char **end,
                                   char *errstr, size_t es)
{
    jp j = {s, s, errstr, es};
    if (pr__expect(&j, '{') < 0)
        return PR_EBADREC;
    pr__ws(&j);
    if (*j.s == '}') {
        j.s++;
        goto out_done;
    }
    for (;;) {
        char key[512];
        if (pr__jstring(&j, key, sizeof(key)) < 0)
            return PR_EBADREC;
        char *slash = strrchr(key, '/'), *pe;
        long part = slash ? strtol(slash + 1, &pe, 10) : 0;
        if (!slash || pe == slash + 1 || *pe || part < 0 || part > INT32_MAX)
            return pr__jerr(&j, "a key is not \"topic/partition\"");
        *slash = '\0';
        if (pr__expect(&j, ':') < 0 || pr__expect(&j, '[') < 0)
            return PR_EBADREC;
        pr__ws(&j);
        if (*j.s == ']') {
            j.s++;
        } else {
            for (;;) {
                int64_t a, b;
                if (pr__expect(&j, '[') < 0 || pr__jint(&j, &a) < 0 || pr__expect(&j, ',') < 0 ||
                    pr__jint(&j, &b) < 0 || pr__expect(&j, ']') < 0)
                    return PR_EBADREC;
                int err = pr_trainer_position_add(p, key, (int32_t)part, a, b);
                if (err == PR_ENOMEM)
                    return pr_seterr(errstr, es, err, "out of memory");
                if (err < 0)
                    return pr__jerr(&j, "a range is not [first, last] with 0 <= first <= last");
                pr__ws(&j);
                if (*j.s == ',') {
                    j.s++;
                    continue;
                }
                if (pr__expect(&j, ']') < 0)
                    return PR_EBADREC;
                break;
            }
        }
        pr__ws(&j);
        if (*j.s == ',') {
            j.s++;
            continue;
        }
        if (pr__expect(&j, '}') < 0)
            return PR_EBADREC;
        break;
    }
out_done:
    if (end)
        *end = j.s;
    return 0;
}
