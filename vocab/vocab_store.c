/*
 * vocab_store.c — one interface, two ways to keep the promise: a pipeline's
 * vocabulary is either local (journal + snapshot in the state dir) or shared
 * (the replicas' Kafka log, vocablog.c). Drivers (the streaming service, the
 * offline run) call pr_vocab_store_* and never ask which one they hold.
 *
 * Each implementation is a const table of operations (like the engine's
 * backends); the store object holds what both need: the engine, the
 * pipeline's name, the state dir's file names, the seed. Local durability
 * itself is the journal's (vocab_journal.c: the engine's block hook appends
 * a block's new indices before pr_engine_process returns), so local resolve
 * has nothing to wait for; shared resolve is the log round trip.
 */
#define _GNU_SOURCE
#include "pr_vocab.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_log.h"
#include "vocab_int.h"
#include "pr_fs.h"

typedef struct pr__vstore_ops {
    const char *name;
    int (*recover)(pr_vocab_store *vs, char *errstr, size_t errstr_size);
    int (*resolve)(pr_vocab_store *vs, const pr_block *in, const pr_vocab_keys *cols, size_t n_cols,
                   int timeout_ms, char *errstr, size_t errstr_size);
    int (*propose_ahead)(pr_vocab_store *vs, const pr_block *next, uint32_t from_row, char *errstr,
                         size_t errstr_size);
    void (*abandon)(pr_vocab_store *vs);
    int (*checkpoint)(pr_vocab_store *vs, char *errstr, size_t errstr_size);
    int (*poll)(pr_vocab_store *vs, int timeout_ms, char *errstr, size_t errstr_size);
} pr__vstore_ops;

struct pr_vocab_store {
    const pr__vstore_ops *ops;
    pr_engine *eng;
    char *pipeline;
    char *state_dir; /* NULL: nothing persists */
    char *seed;      /* NULL: no seed */
    char *replica;
    const pr_vocablog_cfg *log_cfg;
    uint64_t epoch;
    char snap_path[PATH_MAX]; /* "" until recover sets it: no checkpoints */
    char journal_path[PATH_MAX];
    pr_vocablog *vl; /* shared only */
};

static int pr__state_dir(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    if (pr_mkdir_p(vs->state_dir, NULL, 0))
        return pr_seterr(errstr, errstr_size, PR_EIO, "pipelines[%s].state.dir '%s': %s",
                         vs->pipeline, vs->state_dir, strerror(errno));
    return 0;
}

void pr_vocab_state_paths(const char *dir, const char *pipeline, bool shared, char *snap,
                          size_t snap_size, char *journal, size_t journal_size)
{
    snprintf(snap, snap_size, "%s/%s.%s", dir, pipeline, shared ? "vocablog" : "vocab");
    snprintf(journal, journal_size, "%s/%s.journal", dir, pipeline);
}

/* ---------------------------------------------------------------- local */

/* Seed a state dir that holds no vocabulary yet (no snapshot, no journal):
 * saved as the first snapshot before the journal exists, so a crash cannot
 * seed twice or lose it. */
static int pr__local_seed(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    if (access(vs->snap_path, F_OK) == 0 || access(vs->journal_path, F_OK) == 0) {
        pr_info("pipeline %s: %s already holds a vocabulary; vocab.seed %s not used", vs->pipeline,
                vs->state_dir, vs->seed);
        return 0;
    }
    int rc;
    if ((rc = pr_vocab_import(vs->eng, vs->seed, errstr, errstr_size)) ||
        (rc = pr_vocab_save(vs->eng, vs->snap_path, errstr, errstr_size)))
        return rc;
    pr_info("pipeline %s: vocabulary seeded from %s", vs->pipeline, vs->seed);
    return 0;
}

/* Seed (first start only), snapshot, journal replay, journal open (from now
 * on every block's new indices are durable before pr_engine_process
 * returns), and a checkpoint folding the replayed journal into a fresh
 * snapshot. Without a state dir (or a vocab operator) only the seed. */
static int pr__local_recover(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    if (!vs->state_dir || !pr__has_vocab(vs->eng))
        return vs->seed ? pr_vocab_import(vs->eng, vs->seed, errstr, errstr_size) : 0;
    int rc = pr__state_dir(vs, errstr, errstr_size);
    if (rc)
        return rc;
    pr_vocab_state_paths(vs->state_dir, vs->pipeline, false, vs->snap_path, sizeof(vs->snap_path),
                         vs->journal_path, sizeof(vs->journal_path));
    if (vs->seed && (rc = pr__local_seed(vs, errstr, errstr_size)))
        return rc;
    if (access(vs->snap_path, F_OK) == 0 &&
        (rc = pr_vocab_load(vs->eng, vs->snap_path, errstr, errstr_size)))
        return rc;
    if (access(vs->journal_path, F_OK) == 0 &&
        (rc = pr_vocab_journal_replay(vs->eng, vs->journal_path, errstr, errstr_size)))
        return rc;
    if ((rc = pr_vocab_journal_open(vs->eng, vs->journal_path, errstr, errstr_size)) ||
        (rc = pr_vocab_checkpoint(vs->eng, vs->snap_path, NULL, errstr, errstr_size)))
        return rc;
    /* Values, not embedding rows: the profile's reserved indices (missing,
     * OOV) are in every vocabulary size, restored or not. */
    const pr_pipeline_spec *spec = pr_engine_spec(vs->eng);
    uint64_t total = 0, reserved = spec->profile == PR_VOCAB_DEFAULT ? PR_INDEX_OOV + 1 : 0;
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        uint64_t n = pr_engine_vocab_size(vs->eng, c);
        total += n > reserved ? n - reserved : 0;
    }
    pr_info("pipeline %s: vocabulary state in %s (%llu values restored; %u recycled-index "
            "notice(s) to announce again)",
            vs->pipeline, vs->state_dir, (unsigned long long)total,
            pr_engine_vocab_notices_pending(vs->eng));
    return 0;
}

/* The engine decides locally while it processes; nothing to wait for. */
static int pr__local_resolve(pr_vocab_store *vs, const pr_block *in, const pr_vocab_keys *cols,
                             size_t n_cols, int timeout_ms, char *errstr, size_t errstr_size)
{
    (void)vs, (void)in, (void)cols, (void)n_cols, (void)timeout_ms, (void)errstr;
    (void)errstr_size;
    return 0;
}

static int pr__local_propose_ahead(pr_vocab_store *vs, const pr_block *next, uint32_t from_row,
                                   char *errstr, size_t errstr_size)
{
    (void)vs, (void)next, (void)from_row, (void)errstr, (void)errstr_size;
    return 0;
}

static void pr__local_abandon(pr_vocab_store *vs)
{
    (void)vs;
}

static int pr__local_checkpoint(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    return pr_vocab_checkpoint(vs->eng, vs->snap_path, NULL, errstr, errstr_size);
}

static int pr__local_poll(pr_vocab_store *vs, int timeout_ms, char *errstr, size_t errstr_size)
{
    (void)vs, (void)timeout_ms, (void)errstr, (void)errstr_size;
    return 0;
}

static const pr__vstore_ops pr__vstore_local = {
    .name = "local",
    .recover = pr__local_recover,
    .resolve = pr__local_resolve,
    .propose_ahead = pr__local_propose_ahead,
    .abandon = pr__local_abandon,
    .checkpoint = pr__local_checkpoint,
    .poll = pr__local_poll,
};

/* ---------------------------------------------------------------- shared */

/* The log is the journal; the state dir keeps only a snapshot with the log
 * position it reflects (pr_vocablog_checkpoint). */
static int pr__shared_recover(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    int rc;
    if (vs->state_dir) {
        if ((rc = pr__state_dir(vs, errstr, errstr_size)))
            return rc;
        pr_vocab_state_paths(vs->state_dir, vs->pipeline, true, vs->snap_path,
                             sizeof(vs->snap_path), vs->journal_path, sizeof(vs->journal_path));
    }
    pr_vocablog_opts vo = {.cfg = vs->log_cfg,
                           .pipeline = vs->pipeline,
                           .replica = vs->replica,
                           .epoch = vs->epoch,
                           .eng = vs->eng,
                           .snapshot_path = vs->snap_path[0] ? vs->snap_path : NULL};
    return pr_vocablog_new(&vo, &vs->vl, errstr, errstr_size);
}

static int pr__shared_resolve(pr_vocab_store *vs, const pr_block *in, const pr_vocab_keys *cols,
                              size_t n_cols, int timeout_ms, char *errstr, size_t errstr_size)
{
    if (in)
        return pr_vocablog_resolve(vs->vl, in, timeout_ms, errstr, errstr_size);
    return pr_vocablog_resolve_keys(vs->vl, cols, n_cols, timeout_ms, errstr, errstr_size);
}

static int pr__shared_propose_ahead(pr_vocab_store *vs, const pr_block *next, uint32_t from_row,
                                    char *errstr, size_t errstr_size)
{
    return pr_vocablog_propose_ahead(vs->vl, next, from_row, errstr, errstr_size);
}

static void pr__shared_abandon(pr_vocab_store *vs)
{
    pr_vocablog_abandon(vs->vl);
}

static int pr__shared_checkpoint(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    return pr_vocablog_checkpoint(vs->vl, errstr, errstr_size);
}

static int pr__shared_poll(pr_vocab_store *vs, int timeout_ms, char *errstr, size_t errstr_size)
{
    return pr_vocablog_poll(vs->vl, timeout_ms, errstr, errstr_size);
}

static const pr__vstore_ops pr__vstore_shared = {
    .name = "shared",
    .recover = pr__shared_recover,
    .resolve = pr__shared_resolve,
    .propose_ahead = pr__shared_propose_ahead,
    .abandon = pr__shared_abandon,
    .checkpoint = pr__shared_checkpoint,
    .poll = pr__shared_poll,
};

/* ---------------------------------------------------------------- the store */

static char *pr__dup(const char *s, bool *oom)
{
    if (!s)
        return NULL;
    char *d = strdup(s);
    if (!d)
        *oom = true;
    return d;
}

int pr_vocab_store_new(const pr_vocab_store_opts *o, pr_vocab_store **out, char *errstr,
                       size_t errstr_size)
{
    *out = NULL;
    if (!o->eng || !o->pipeline)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab store: no engine or pipeline");
    pr_vocab_store *vs = calloc(1, sizeof(*vs));
    if (!vs)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab store: out of memory");
    bool oom = false;
    vs->ops = o->log && o->log->enabled ? &pr__vstore_shared : &pr__vstore_local;
    vs->eng = o->eng;
    vs->log_cfg = o->log;
    vs->pipeline = pr__dup(o->pipeline, &oom);
    vs->state_dir = pr__dup(o->state_dir, &oom);
    vs->seed = pr__dup(o->seed, &oom);
    vs->replica = pr__dup(o->replica ? o->replica : "", &oom);
    if (oom) {
        pr_vocab_store_free(vs);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab store: out of memory");
    }
    *out = vs;
    return 0;
}

int pr_vocab_store_recover(pr_vocab_store *vs, uint64_t epoch, char *errstr, size_t errstr_size)
{
    vs->epoch = epoch;
    return vs->ops->recover(vs, errstr, errstr_size);
}

int pr_vocab_store_resolve(pr_vocab_store *vs, const pr_block *in, int timeout_ms, char *errstr,
                           size_t errstr_size)
{
    return vs->ops->resolve(vs, in, NULL, 0, timeout_ms, errstr, errstr_size);
}

int pr_vocab_store_resolve_keys(pr_vocab_store *vs, const pr_vocab_keys *cols, size_t n_cols,
                                int timeout_ms, char *errstr, size_t errstr_size)
{
    return vs->ops->resolve(vs, NULL, cols, n_cols, timeout_ms, errstr, errstr_size);
}

int pr_vocab_store_propose_ahead(pr_vocab_store *vs, const pr_block *next, uint32_t from_row,
                                 char *errstr, size_t errstr_size)
{
    return vs->ops->propose_ahead(vs, next, from_row, errstr, errstr_size);
}

void pr_vocab_store_abandon(pr_vocab_store *vs)
{
    vs->ops->abandon(vs);
}

void pr_vocab_store_commit(pr_vocab_store *vs, uint64_t delivered_floor)
{
    pr_engine_vocab_notices_delivered(vs->eng, delivered_floor);
}

bool pr_vocab_store_persistent(const pr_vocab_store *vs)
{
    return vs->snap_path[0] != '\0';
}

int pr_vocab_store_checkpoint(pr_vocab_store *vs, char *errstr, size_t errstr_size)
{
    if (!pr_vocab_store_persistent(vs))
        return 0;
    return vs->ops->checkpoint(vs, errstr, errstr_size);
}

int pr_vocab_store_poll(pr_vocab_store *vs, int timeout_ms, char *errstr, size_t errstr_size)
{
    return vs->ops->poll(vs, timeout_ms, errstr, errstr_size);
}

bool pr_vocab_store_log_stats(pr_vocab_store *vs, pr_vocablog_stats *st)
{
    if (!vs || !vs->vl)
        return false;
    pr_vocablog_get_stats(vs->vl, st);
    return true;
}

void pr_vocab_store_free(pr_vocab_store *vs)
{
    if (!vs)
        return;
    pr_vocablog_free(vs->vl);
    free(vs->pipeline);
    free(vs->state_dir);
    free(vs->seed);
    free(vs->replica);
    free(vs);
}
