/*
 * vocab_replay.c — applying a journal's records over a restored snapshot.
 *
 * What a record means depends on the pipeline, not on the file's version
 * (vocab_journal.c reads every version into the same pr__jrec list):
 *
 *   append-only (no column evicts): indices only ever grow, so a column's
 *     records continue its table; a record below the table's size must agree
 *     with it (else the snapshot is not this journal's), one past it is new,
 *     anything further is a gap. A value that was still counting (pending,
 *     min_count) and got its index keeps its count.
 *   blocks (some column evicts): whole blocks only, each ASSIGN overwriting
 *     its index in file order, so an index recycled twice ends with its last
 *     value; clocks become the newest of the snapshot's and the records';
 *     notices newer than the snapshot's counter are queued again.
 *
 * Records already in the snapshot (a crash between a checkpoint's rename and
 * its truncation) rewrite the same final values either way.
 */
#include "pr_vocab.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pr_log.h"
#include "vocab_int.h"

/* A column's current entries, collected through pr_engine_vocab_read. */
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

/* Read column c, then move its pending entries (index < 0, after the
 * assigned ones) out into *pending; cur keeps the assigned ones. */
static int pr__ents_split(pr_engine *eng, uint32_t c, pr__ents *cur, pr_vocab_entry **pending,
                          size_t *n_pending)
{
    int rc;
    cur->n = 0;
    *pending = NULL;
    *n_pending = 0;
    if ((rc = pr_engine_vocab_read(eng, c, pr__ents_cb, cur)) || (rc = cur->err))
        return rc;
    size_t n_assigned = 0;
    while (n_assigned < cur->n && cur->e[n_assigned].index >= 0)
        n_assigned++;
    size_t np = cur->n - n_assigned;
    if (np) {
        if (!(*pending = malloc(np * sizeof(**pending))))
            return PR_ENOMEM;
        memcpy(*pending, cur->e + n_assigned, np * sizeof(**pending));
    }
    *n_pending = np;
    cur->n = n_assigned;
    return 0;
}

static int pr__u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int pr__ent_value_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pr_vocab_entry *)a)->value, y = ((const pr_vocab_entry *)b)->value;
    return x < y ? -1 : x > y;
}

static int pr__jrec_cmp(const void *a, const void *b)
{
    const pr__jrec *x = a, *y = b;
    if (PR__JR_COL(x) != PR__JR_COL(y))
        return PR__JR_COL(x) < PR__JR_COL(y) ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int pr__recycled_number_cmp(const void *a, const void *b)
{
    uint64_t x = ((const pr_recycled *)a)->number, y = ((const pr_recycled *)b)->number;
    return x < y ? -1 : x > y;
}

/* ---------------------------------------------------------------- append-only */

/* Column c's records (sorted by index) continue its table. */
static int pr__replay_col_append(pr_engine *eng, const char *path, uint32_t c, const pr__jrec *recs,
                                 size_t n, pr__ents *cur, char *errstr, size_t errstr_size)
{
    const char *name = pr_engine_spec(eng)->sparse[c].name;
    pr_vocab_entry *pending;
    size_t n_pending, n_new = 0;
    int rc = pr__ents_split(eng, c, cur, &pending, &n_pending);
    uint64_t *newvals = rc ? NULL : malloc((n ? n : 1) * sizeof(*newvals));
    if (!rc && !newvals)
        rc = PR_ENOMEM;
    int64_t base = pr__vbase(pr_engine_spec(eng)->profile);
    int64_t next = base + (int64_t)cur->n;
    size_t n_assigned = cur->n;
    for (size_t k = 0; k < n && !rc; k++) {
        if (recs[k].index < next) {
            size_t at = (size_t)(recs[k].index - base);
            if (recs[k].index < base || cur->e[at].value != recs[k].value)
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s index %" PRId64
                               " disagrees with the snapshot; wrong snapshot for this journal?",
                               path, name, recs[k].index);
            continue;
        }
        if (recs[k].index > next) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "vocab journal: %s: column %s jumps from index %" PRId64 " to %" PRId64
                           "; the snapshot is older than the journal's start",
                           path, name, next, recs[k].index);
            break;
        }
        pr_vocab_entry e = {recs[k].value, recs[k].index, 0, 0, 0};
        rc = pr__ents_push(cur, &e);
        newvals[n_new++] = recs[k].value;
        next++;
    }
    if (!rc && n_new) {
        qsort(newvals, n_new, sizeof(*newvals), pr__u64_cmp);
        for (size_t k = 0; k < n_pending && !cur->err; k++) {
            if (!bsearch(&pending[k].value, newvals, n_new, sizeof(*newvals), pr__u64_cmp)) {
                pr__ents_push(cur, &pending[k]);
                continue;
            }
            /* Now assigned: keep its count on the assigned entry. */
            for (size_t q = n_assigned; q < cur->n; q++)
                if (cur->e[q].value == pending[k].value)
                    cur->e[q].count = pending[k].count;
        }
        if (!(rc = cur->err) && (rc = pr_engine_vocab_load_column(eng, c, cur->e, cur->n)))
            rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s",
                           name, pr_engine_backend_name(eng), pr_strerror(rc));
    }
    if (!rc)
        pr__journal_sync_col(eng, c);
    free(pending);
    free(newvals);
    return rc;
}

int pr__replay_append_only(pr_engine *eng, const char *path, const pr__jrec *in, size_t n_in,
                           char *errstr, size_t errstr_size)
{
    pr__jrec *recs = malloc((n_in ? n_in : 1) * sizeof(*recs));
    pr__ents cur = {0};
    if (!recs)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab journal: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < n_in; i++)
        if (PR__JR_KIND(&in[i]) == PR__JR_ASSIGN)
            recs[n++] = in[i];
    if (n) /* qsort(NULL, 0) is undefined: an empty journal has no records */
        qsort(recs, n, sizeof(*recs), pr__jrec_cmp);
    int rc = 0;
    char why[512] = "";
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i;
        while (j < n && PR__JR_COL(&recs[j]) == PR__JR_COL(&recs[i]))
            j++;
        rc = pr__replay_col_append(eng, path, PR__JR_COL(&recs[i]), recs + i, j - i, &cur, why,
                                   sizeof(why));
        i = j;
    }
    if (rc && why[0])
        pr_seterr(errstr, errstr_size, rc, "%s", why);
    else if (rc)
        pr_seterr(errstr, errstr_size, rc, "vocab journal: replaying %s: %s", path,
                  pr_strerror(rc));
    free(cur.e);
    free(recs);
    return rc;
}

/* ---------------------------------------------------------------- blocks */

/* Column c's ASSIGN records overwrite its table in file order; recycles
 * newer than the snapshot go to notes. */
static int pr__replay_col_blocks(pr_engine *eng, const char *path, uint32_t c, const pr__jrec *recs,
                                 size_t n, pr__ents *cur, pr_recycled *notes, size_t *n_notes,
                                 char *errstr, size_t errstr_size)
{
    const char *name = pr_engine_spec(eng)->sparse[c].name;
    pr_vocab_entry *pending, *sorted = NULL;
    size_t n_pending;
    int rc = pr__ents_split(eng, c, cur, &pending, &n_pending);
    int64_t base = pr__vbase(pr_engine_spec(eng)->profile);
    uint64_t first_new = pr__notice_next(eng);
    pr_vocab_clock clock = pr_engine_vocab_clock(eng, c);
    for (size_t i = 0; i < n && !rc; i++) {
        const pr__jrec *q = &recs[i];
        if (PR__JR_KIND(q) != PR__JR_ASSIGN || PR__JR_COL(q) != c)
            continue;
        clock.records = q->tick > clock.records ? q->tick : clock.records;
        clock.event_ms = q->tick_ms > clock.event_ms ? q->tick_ms : clock.event_ms;
        if (q->number >= first_new)
            notes[(*n_notes)++] = (pr_recycled){c, 0, q->index, q->number};
        pr_vocab_entry e = {q->value, q->index, 1, q->tick, q->tick_ms};
        size_t at = (size_t)(q->index - base);
        if (q->index < base || at > cur->n) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "vocab journal: %s: column %s jumps to index %" PRId64
                           " (the vocabulary has %zu); the snapshot is older than the "
                           "journal's start",
                           path, name, q->index, cur->n);
        } else if (at == cur->n) {
            pr__ents_push(cur, &e);
        } else if (cur->e[at].value == q->value) {
            if (q->tick > cur->e[at].last_use)
                cur->e[at].last_use = q->tick;
            if (q->tick_ms > cur->e[at].last_use_ms)
                cur->e[at].last_use_ms = q->tick_ms;
        } else {
            cur->e[at] = e;
        }
    }
    /* Each value at one index; values now assigned are no longer pending. */
    if (!rc && (cur->err || !(sorted = malloc((cur->n ? cur->n : 1) * sizeof(*sorted)))))
        rc = PR_ENOMEM;
    if (!rc) {
        memcpy(sorted, cur->e, cur->n * sizeof(*sorted));
        qsort(sorted, cur->n, sizeof(*sorted), pr__ent_value_cmp);
        for (size_t k = 1; k < cur->n && !rc; k++)
            if (sorted[k].value == sorted[k - 1].value)
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab journal: %s: column %s: value %" PRIx64
                               " ends up at two indices; wrong snapshot for this journal?",
                               path, name, sorted[k].value);
    }
    size_t n_assigned = cur->n;
    for (size_t k = 0; k < n_pending && !rc; k++)
        if (!bsearch(&pending[k], sorted, n_assigned, sizeof(*sorted), pr__ent_value_cmp))
            pr__ents_push(cur, &pending[k]);
    if (!rc && !(rc = cur->err) && (rc = pr_engine_vocab_load_column(eng, c, cur->e, cur->n)))
        rc = pr_seterr(errstr, errstr_size, rc, "vocab journal: column %s: backend %s: %s", name,
                       pr_engine_backend_name(eng), pr_strerror(rc));
    if (!rc) {
        pr_engine_vocab_set_clock(eng, c, clock);
        pr__journal_sync_col(eng, c);
    }
    free(sorted);
    free(pending);
    return rc;
}

int pr__replay_blocks(pr_engine *eng, const char *path, const pr__jrec *recs, size_t n,
                      char *errstr, size_t errstr_size)
{
    uint64_t next_number = pr__notice_next(eng);
    for (size_t i = 0; i < n; i++)
        if (PR__JR_KIND(&recs[i]) == PR__JR_COMMIT && recs[i].number > next_number)
            next_number = recs[i].number;
    pr_recycled *notes = malloc((n ? n : 1) * sizeof(*notes));
    pr__ents cur = {0};
    size_t n_notes = 0;
    int rc = notes ? 0 : PR_ENOMEM;
    char why[512] = "";
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse && !rc; c++) {
        bool touched = false;
        for (size_t i = 0; i < n && !touched; i++)
            touched = recs[i].kc == ((uint32_t)PR__JR_ASSIGN << 28 | c);
        if (touched)
            rc = pr__replay_col_blocks(eng, path, c, recs, n, &cur, notes, &n_notes, why,
                                       sizeof(why));
    }
    /* Re-announce, in number order, what the journal recycled. */
    if (!rc && n_notes)
        qsort(notes, n_notes, sizeof(*notes), pr__recycled_number_cmp);
    for (size_t k = 0; k < n_notes && !rc; k++)
        rc = pr_engine_vocab_notices_queue(eng, &notes[k]);
    if (!rc)
        pr_engine_vocab_notices_set_next(eng, next_number);
    if (rc && why[0])
        pr_seterr(errstr, errstr_size, rc, "%s", why);
    else if (rc)
        pr_seterr(errstr, errstr_size, rc, "vocab journal: replaying %s: %s", path,
                  pr_strerror(rc));
    free(cur.e);
    free(notes);
    return rc;
}
