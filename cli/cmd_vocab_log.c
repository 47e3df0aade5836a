/*
 * cmd_vocab_log.c — `piperec vocab import` and `vocab export --from-log`
 * for a pipeline that shares its
 * vocabulary through `vocab_log` (docs/vocab-log.md, "Seeding the log"):
 * the vocabulary of a text directory (the vocab/ folder of `piperec
 * process`, or a `piperec vocab export`) becomes the log's, so that every
 * replica started afterwards rebuilds it from the log and keeps those
 * indices (an offline run's, or the previous log's across a change of the
 * features).
 *
 * Why through proposals, not a record of its own: applying Proposals in log
 * order gives the next free index to each new value, so the values of a
 * column proposed in increasing index order get exactly their indices when
 * the column's indices have no gap (no eviction) and the log held no value
 * before. The import then is an ordinary writer of the log, replayed by the
 * replicas' existing code (startup rebuild, snapshots, rebalance), and a
 * replica of an older release reads it too. It:
 *   1. reads DIR into a scratch engine (pr_vocab_import: every check the
 *      local import makes);
 *   2. refuses columns that evict (their indices have gaps and their
 *      statistics are the log's; every other column's indices run without a
 *      gap, which pr_vocab_import checks);
 *   3. opens the log as a replica does (pr_vocablog_new: checks the topic,
 *      writes the Settings record into an empty log, checks the settings of
 *      a log that has one); a log that gave indices must hold the start of
 *      this same import (one that stopped half way, or ran to its end
 *      already), which is then continued; any other is refused;
 *   4. proposes each column's values (those the log lacks) in index order through
 *      pr_vocablog_resolve_keys (each value min_count times, so it gets its
 *      index at once; a pending value, below min_count, its own count), and
 *      waits until the log decided them all;
 *   5. compares: every value must have its DIR index in the engine the log
 *      built. A replica that wrote to the log at the same time (or one
 *      started before the import) shows up here: the import says so, and the
 *      topic must be recreated and imported again with no replica running.
 *
 * `vocab export --from-log` reads the log to its end into an empty engine,
 * as a replica with an empty state dir does, but never writes it (an empty
 * log stays empty), and exports that: every index the log gave, with no
 * replica's state dir (whose snapshot may be a checkpoint interval behind).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_cli.h"
#include "pr_clock.h"
#include "pr_config.h"
#include "pr_engine.h"
#include "pr_grow.h"
#include "pr_vocab.h"

#define PR__LOG_CHUNK       65536 /* values proposed per resolve */
#define PR__LOG_WAIT_MS     1000  /* one resolve's wait */
#define PR__LOG_PATIENCE_MS 60000 /* no progress for this long: give up */

typedef struct pr__ents {
    pr_vocab_entry *e;
    size_t n, cap;
} pr__ents;

static int pr__ents_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__ents *s = opaque;
    if (pr_grow((void **)&s->e, &s->cap, s->n + 1, sizeof(*s->e)) < 0)
        return PR_ENOMEM;
    s->e[s->n++] = *e;
    return 0;
}

/* Column c's entries (assigned ones in index order, then pending ones). */
static int pr__column(const pr_engine *eng, uint32_t c, pr__ents *s)
{
    s->n = 0;
    return pr_engine_vocab_read(eng, c, pr__ents_cb, s);
}

/* A value below min_count (index -1) is proposed its count times and must
 * stay pending with that count: a count of 0 (none in the file) cannot be
 * proposed, and one of min_count or more would be admitted (a file from a
 * config with a higher min_count). Refused before the log is opened, or
 * the import would write them and then fail its comparison. 0 or 2
 * (message printed), 1 when out of memory. */
static int pr__check_pending(const pr_engine *seed, uint32_t c)
{
    const pr_sparse_col_spec *s = &pr_engine_spec(seed)->sparse[c];
    pr__ents es = {0};
    int ret = pr__column(seed, c, &es) ? 1 : 0;
    for (size_t i = 0; !ret && i < es.n; i++)
        if (es.e[i].index < 0 && (es.e[i].count == 0 || es.e[i].count >= s->min_count)) {
            fprintf(stderr,
                    "piperec vocab import: %s.tsv: value %" PRIx64 " is below min_count (index "
                    "-1) with count %" PRIu64 ", but column %s's min_count is %u: a pending "
                    "value needs a count from 1 to %u (a file of a config with another "
                    "min_count?); nothing written to the log\n",
                    s->name, es.e[i].value, es.e[i].count, s->name, s->min_count, s->min_count - 1);
            ret = 2;
        }
    if (ret == 1)
        fprintf(stderr, "piperec vocab import: out of memory\n");
    free(es.e);
    return ret;
}

/* Step 2: what a log cannot be given; 0 or the exit code (message printed).
 * Gaps need no check here: pr_vocab_import refuses them unless a column
 * evicts. */
static int pr__check_seed(const pr_engine *seed)
{
    const pr_pipeline_spec *spec = pr_engine_spec(seed);
    int ret = 0;
    for (uint32_t c = 0; c < spec->n_sparse && !ret; c++) {
        if (spec->sparse[c].eviction != PR_EVICT_NONE) {
            fprintf(stderr,
                    "piperec vocab import: column %s evicts (transform.vocab.eviction): a shared "
                    "log decides its evictions from the log's own history, so it cannot be "
                    "seeded; start the log empty\n",
                    spec->sparse[c].name);
            return 2;
        }
        ret = pr__check_pending(seed, c);
    }
    return ret;
}

/* Pending values (index < 0) by value: their order is the backend's. */
static int pr__by_pending_value(const void *x, const void *y)
{
    const pr_vocab_entry *a = x, *b = y;
    if ((a->index < 0) != (b->index < 0))
        return a->index < 0 ? 1 : -1;
    if (a->index >= 0)
        return a->index < b->index ? -1 : a->index > b->index;
    return a->value < b->value ? -1 : a->value > b->value;
}

/* What the log holds already of one column's import: its first `assigned`
 * values (in index order), and the pending values it holds (by value). */
typedef struct pr__held {
    size_t assigned;
    pr__ents pending;
    pr_vocab_entry *owned; /* the allocation pending points into */
    size_t seed_n;         /* the seed column's values (assigned and pending) */
} pr__held;

/* Does the log's pending entry list (sorted by value) hold e, count and all? */
static bool pr__held_pending(const pr__held *h, const pr_vocab_entry *e)
{
    size_t lo = 0, hi = h->pending.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->pending.e[mid].value < e->value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < h->pending.n && h->pending.e[lo].value == e->value &&
           h->pending.e[lo].count == e->count;
}

/* Step 3 for column c: what the log (got) holds must be the start of this
 * import, as an import that stopped half way leaves it (killed, broker
 * lost): its values at the seed's first indices, in order, and pending
 * values with the seed's counts (each went in one record). Then *h says
 * what to skip, and the import goes on from there. Anything else (a
 * replica's values, another vocabulary's) is refused: 0, 1 when out of
 * memory, or 2 (message printed). */
static int pr__held_column(const pr_engine *got, const pr_engine *seed, uint32_t c,
                           const char *topic, const char *dir, pr__held *h)
{
    const char *name = pr_engine_spec(seed)->sparse[c].name;
    pr__ents a = {0}, b = {0};
    if (pr__column(got, c, &a) || pr__column(seed, c, &b)) {
        free(a.e), free(b.e);
        fprintf(stderr, "piperec vocab import: out of memory\n");
        return 1;
    }
    if (a.n) /* an empty column has no array (qsort wants one) */
        qsort(a.e, a.n, sizeof(*a.e), pr__by_pending_value);
    if (b.n)
        qsort(b.e, b.n, sizeof(*b.e), pr__by_pending_value);
    size_t na = 0, nb = 0;
    while (na < a.n && a.e[na].index >= 0)
        na++;
    while (nb < b.n && b.e[nb].index >= 0)
        nb++;
    *h = (pr__held){na, {a.e + na, a.n - na, 0}, a.e, b.n};
    char what[256] = "";
    for (size_t i = 0; i < na && !what[0]; i++)
        if (i >= nb)
            snprintf(what, sizeof(what),
                     "the log has value %" PRIx64 " at index %" PRId64 ", past the file's last",
                     a.e[i].value, a.e[i].index);
        else if (a.e[i].value != b.e[i].value || a.e[i].index != b.e[i].index)
            snprintf(what, sizeof(what),
                     "the log has value %" PRIx64 " at index %" PRId64 ", %s.tsv value %" PRIx64
                     " at %" PRId64,
                     a.e[i].value, a.e[i].index, name, b.e[i].value, b.e[i].index);
    pr__held bh = {0, {b.e + nb, b.n - nb, 0}, NULL, 0};
    for (size_t i = na; i < a.n && !what[0]; i++)
        if (!pr__held_pending(&bh, &a.e[i]))
            snprintf(what, sizeof(what),
                     "the log has value %" PRIx64 " pending with count %" PRIu64
                     ", which %s.tsv does not",
                     a.e[i].value, a.e[i].count, name);
    free(b.e);
    if (!what[0])
        return 0;
    free(h->owned);
    *h = (pr__held){0};
    fprintf(stderr,
            "piperec vocab import: vocab log %s already holds values that are not the start of "
            "this import (column %s: %s; from %s): only an empty log, or one that an import of "
            "the same files left half way, can be seeded; use a new topic\n",
            topic, name, what, dir);
    return 2;
}

/* Does the log hold every value of the seed (held, per column)? */
static bool pr__held_all(const pr__held *held, uint32_t n_cols)
{
    for (uint32_t c = 0; c < n_cols; c++)
        if (held[c].assigned + held[c].pending.n != held[c].seed_n)
            return false;
    return true;
}

/* Propose keys[0..n) of column c and wait until the log decided them.
 * 0, or the exit code (message printed). */
static int pr__propose_wait(pr_vocablog *vl, uint32_t c, const uint64_t *keys, size_t n,
                            const char *topic)
{
    char err[1024];
    pr_vocab_keys k = {c, keys, n};
    int64_t waited = 0;
    for (;;) {
        int rc = pr_vocablog_resolve_keys(vl, &k, 1, PR__LOG_WAIT_MS, err, sizeof(err));
        if (rc == 0)
            return 0;
        if (rc != PR_EAGAIN) {
            fprintf(stderr, "piperec vocab import: vocab log %s: %s\n", topic, err);
            return pr_cli_exit_code(rc);
        }
        if ((waited += PR__LOG_WAIT_MS) >= PR__LOG_PATIENCE_MS) {
            fprintf(stderr,
                    "piperec vocab import: vocab log %s: the log did not decide %zu proposed "
                    "values within %d s (broker down?); the log may hold part of them: run "
                    "the same import again once the broker is back, it continues there\n",
                    topic, n, PR__LOG_PATIENCE_MS / 1000);
            return 1;
        }
    }
}

/* Step 4 for column c: its values in index order, chunk by chunk; then its
 * pending ones; none that the log holds already (h). 0 or the exit code;
 * *n_values counts what was proposed. */
static int pr__seed_column(pr_vocablog *vl, const pr_engine *seed, uint32_t c, const char *topic,
                           const pr__held *h, uint64_t *n_values)
{
    uint32_t minc = pr_engine_spec(seed)->sparse[c].min_count;
    pr__ents s = {0};
    uint64_t *keys = NULL;
    size_t cap = 0;
    bool oom = pr__column(seed, c, &s) != 0;
    int ret = 0;
    for (size_t i = 0; !ret && !oom && i < s.n;) {
        size_t n = 0;
        for (; i < s.n && n < PR__LOG_CHUNK && !oom; i++) {
            if (s.e[i].index >= 0 ? i < h->assigned : pr__held_pending(h, &s.e[i]))
                continue; /* an earlier import's (pr__held_column) */
            /* An assigned value min_count times (its index at once); a
             * pending one its count, 1..min_count-1 (pr__check_pending):
             * it stays pending, counted. */
            uint64_t times = s.e[i].index >= 0 ? (minc > 1 ? minc : 1) : s.e[i].count;
            oom = pr_grow((void **)&keys, &cap, n + times, sizeof(*keys)) < 0;
            for (uint64_t t = 0; !oom && t < times; t++)
                keys[n++] = s.e[i].value;
            (*n_values) += !oom;
        }
        if (!oom && n)
            ret = pr__propose_wait(vl, c, keys, n, topic);
    }
    if (oom) {
        fprintf(stderr, "piperec vocab import: out of memory\n");
        ret = 1;
    }
    free(keys);
    free(s.e);
    return ret;
}

/* Same entries: assigned ones at the same index; pending ones with the
 * same count (a shared column keeps an assigned value's count at what the
 * log proposed, so those are not compared). */
static bool pr__same_entry(const pr_vocab_entry *a, const pr_vocab_entry *b)
{
    return a->value == b->value && a->index == b->index && (a->index >= 0 || a->count == b->count);
}

/* Step 5: the log's engine holds every value of the seed at its index (and
 * nothing else). 0, or 1 with the first difference printed. */
static int pr__compare(const pr_engine *got, const pr_engine *seed, const char *dir,
                       const char *topic)
{
    const pr_pipeline_spec *spec = pr_engine_spec(seed);
    pr__ents a = {0}, b = {0};
    int ret = 0;
    for (uint32_t c = 0; c < spec->n_sparse && !ret; c++) {
        if (pr__column(got, c, &a) || pr__column(seed, c, &b)) {
            fprintf(stderr, "piperec vocab import: out of memory\n");
            ret = 1;
            break;
        }
        if (a.n) /* an empty column may have no array (qsort wants one) */
            qsort(a.e, a.n, sizeof(*a.e), pr__by_pending_value);
        if (b.n)
            qsort(b.e, b.n, sizeof(*b.e), pr__by_pending_value);
        size_t i = 0;
        while (i < a.n && i < b.n && pr__same_entry(&a.e[i], &b.e[i]))
            i++;
        if (i == a.n && i == b.n)
            continue;
        char what[256];
        if (i < a.n && i < b.n)
            snprintf(what, sizeof(what),
                     "the log has value %" PRIx64 " at index %" PRId64 " (count %" PRIu64
                     "), %s.tsv value %" PRIx64 " at %" PRId64 " (count %" PRIu64 ")",
                     a.e[i].value, a.e[i].index, a.e[i].count, spec->sparse[c].name, b.e[i].value,
                     b.e[i].index, b.e[i].count);
        else
            snprintf(what, sizeof(what), "the log holds %zu values, %s.tsv %zu", a.n,
                     spec->sparse[c].name, b.n);
        fprintf(stderr,
                "piperec vocab import: vocab log %s, column %s: %s (from %s). Something else "
                "wrote to the log during the import (a replica running?): stop every replica, "
                "delete and recreate the topic, and import again\n",
                topic, spec->sparse[c].name, what, dir);
        ret = 1;
    }
    free(a.e);
    free(b.e);
    return ret;
}

int pr_cli_vocab_export_log(pr_cli_vocab *v, const char *dir)
{
    char err[4096];
    pr_vocablog *vl = NULL;
    pr_vocablog_opts o = {.cfg = &v->pc->vocab_log,
                          .pipeline = v->pc->name,
                          .replica = "piperec-vocab-export",
                          .eng = v->eng,
                          .read_only = true};
    int rc = pr_vocablog_new(&o, &vl, err, sizeof(err));
    if (!rc)
        rc = pr_vocab_export(v->eng, dir, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec vocab export: pipeline %s: %s\n", v->pc->name, err);
        pr_vocablog_free(vl);
        return pr_cli_exit_code(rc);
    }
    pr_vocablog_stats st;
    pr_vocablog_get_stats(vl, &st);
    uint64_t total = 0;
    for (uint32_t c = 0; c < v->espec.n_sparse; c++)
        total += pr_engine_vocab_size(v->eng, c);
    fprintf(stderr,
            "piperec vocab export: pipeline %s: vocab log %s read to offset %" PRId64 " (%" PRIu64
            " indices in %u columns) -> %s\n",
            v->pc->name, v->pc->vocab_log.topic, st.applied_offset, total,
            (unsigned)v->espec.n_sparse, dir);
    pr_vocablog_free(vl);
    return 0;
}

int pr_cli_vocab_import_log(pr_cli_vocab *v, const char *dir)
{
    char err[4096];
    const char *topic = v->pc->vocab_log.topic;
    pr_engine *seed = pr_engine_new(&v->espec, &v->eo, err, sizeof(err));
    if (!seed) {
        fprintf(stderr, "piperec vocab import: pipeline %s: %s\n", v->pc->name, err);
        return 2;
    }
    int ret = 0, rc;
    if ((rc = pr_vocab_import(seed, dir, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab import: %s\n", err);
        ret = pr_cli_exit_code(rc);
    }
    if (!ret)
        ret = pr__check_seed(seed);
    pr_vocablog *vl = NULL;
    pr_vocablog_opts o = {.cfg = &v->pc->vocab_log,
                          .pipeline = v->pc->name,
                          .replica = "piperec-vocab-import",
                          .eng = v->eng};
    int64_t t0 = pr_mono_ns();
    if (!ret && (rc = pr_vocablog_new(&o, &vl, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab import: pipeline %s: %s\n", v->pc->name, err);
        ret = pr_cli_exit_code(rc);
    }
    const pr_pipeline_spec *spec = &v->espec;
    pr__held *held = calloc(spec->n_sparse ? spec->n_sparse : 1, sizeof(*held));
    if (!held && !ret) {
        fprintf(stderr, "piperec vocab import: out of memory\n");
        ret = 1;
    }
    uint64_t n_held = 0;
    for (uint32_t c = 0; !ret && c < spec->n_sparse; c++) {
        ret = pr__held_column(v->eng, seed, c, topic, dir, &held[c]);
        n_held += held[c].assigned + held[c].pending.n;
    }
    if (!ret && n_held)
        fprintf(stderr,
                "piperec vocab import: vocab log %s holds %" PRIu64 " values of this import "
                "already (%s)\n",
                topic, n_held,
                pr__held_all(held, spec->n_sparse)
                    ? "all of them: nothing to propose"
                    : "one that stopped half way: proposing the others");
    int64_t t1 = pr_mono_ns();
    uint64_t n_values = 0;
    for (uint32_t c = 0; !ret && c < spec->n_sparse; c++)
        ret = pr__seed_column(vl, seed, c, topic, &held[c], &n_values);
    for (uint32_t c = 0; held && c < spec->n_sparse; c++)
        free(held[c].owned);
    free(held);
    if (!ret)
        ret = pr__compare(v->eng, seed, dir, topic);
    if (!ret) {
        pr_vocablog_stats st;
        pr_vocablog_get_stats(vl, &st);
        fprintf(stderr,
                "piperec vocab import: pipeline %s: %" PRIu64 " values of %u columns from %s "
                "are vocab log %s's (read to offset %" PRId64
                "; opening the log %.3f s, proposing and checking %.3f s); replicas started "
                "now rebuild them from it\n",
                v->pc->name, n_values + n_held, (unsigned)spec->n_sparse, dir, topic,
                st.applied_offset, (double)(t1 - t0) / 1e9, (double)(pr_mono_ns() - t1) / 1e9);
    }
    pr_vocablog_free(vl);
    pr_engine_free(seed);
    return ret;
}
