/*
 * service.c — the streaming runtime (pr_service.h): builds every pipeline
 * of a config (engine, vocabulary state, batcher, sinks, consumer), starts
 * and stops their threads, and keeps the state dir's epoch and vocabulary
 * checkpoints. The rest of the runtime lives beside it (pipe.h lists the
 * files): a pipeline's consumer and sinks (pipe_ends.c), the pipeline
 * thread (pipeline.c), the worker (worker.c), the HTTP views
 * (http_views.c) and the metric families (metrics_*.c).
 *
 * Why this shape: the engine, the batcher, the sink set and the consumer are
 * all single-driver objects, and the order poll -> engine -> batcher is the
 * order the vocabulary and the offsets need. The worker takes one block at a
 * time, in read order, and the pipeline thread touches the engine, batcher
 * and sinks only while the worker is idle ("the worker" below), so every
 * result is that of one thread; the overlap is reading and decoding the next
 * block meanwhile (engine.overlap; off = both on the pipeline thread). More
 * parallelism comes from the engine's own workers, librdkafka's threads and
 * the sinks' I/O threads. Other threads (HTTP, the demo's status line) only
 * read: component stats through their thread-safe getters, and a small cache
 * (engine stats, vocab sizes, readiness, rates) that the pipeline thread
 * refreshes under a mutex, because the engine and the sinks' ready() may not
 * be called from other threads.
 *
 * Time: the injected clock (opts.clock) drives everything with semantics
 * (batch deadlines, event-time fallback, ack timeouts); liveness, rates and
 * checkpoint intervals use the real monotonic clock (pr_mono_ns) so a test
 * that freezes time does not also freeze /healthz.
 */
#include "pr_service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipe.h"
#include "pr_clock.h"
#include "pr_log.h"
#include "pr_fs.h"

/* ---------------------------------------------------------------- state */

/* The restart epoch: <state.dir>/<pipeline>.epoch holds the last one (a
 * decimal number). Each start reads it, writes +1 to a temporary file,
 * fsyncs it, renames it over the old one and fsyncs the directory, all before
 * the consumer joins, so no batch of this run can leave with an epoch that a
 * crash could hand out again. Sequence numbers restart at 1 in every epoch;
 * (epoch, seq) strictly increases across restarts. Without state.dir the
 * epoch is 0 ("unknown") and a trainer cannot tell a restart from a gap. */
static int pr__epoch_bump(pr__pipe *p, char *errstr, size_t errstr_size)
{
    const pr_state_cfg *st = &p->cfg->state;
    p->epoch = 0;
    if (!st->enabled || !st->dir) {
        pr_warn("pipeline %s: no state.dir: batches carry epoch 0 and sequence numbers restart "
                "at 1 on every start (a trainer cannot tell a replay from new data)",
                p->cfg->name);
        return 0;
    }
    if (pr_mkdir_p(st->dir, NULL, 0))
        return pr_seterr(errstr, errstr_size, PR_EIO, "state.dir '%s': %s", st->dir,
                         strerror(errno));
    char path[PATH_MAX], tmp[PATH_MAX + 8];
    /* One process per pipeline's state: a second would hand out the same
     * indices to other values and overwrite the first's snapshot. */
    snprintf(path, sizeof(path), "%s/%s.lock", st->dir, p->cfg->name);
    char le[PATH_MAX + 64];
    int fd = pr_lock_file(path, le, sizeof(le));
    if (fd == PR_ENOTSUP)
        pr_warn("pipeline %s: %s: this file system takes no locks, so a second process on "
                "this state.dir would not be stopped",
                p->cfg->name, le);
    else if (fd < 0)
        return pr_seterr(errstr, errstr_size, fd == PR_ESTATE ? PR_ESTATE : PR_EIO, "%s%s", le,
                         fd == PR_ESTATE ? ": another piperec runs this pipeline on the same "
                                           "state.dir (two would give the same indices to "
                                           "different values); stop it, or give this one its "
                                           "own state.dir"
                                         : "");
    p->lock_fd = fd;
    p->have_lock = fd >= 0;
    snprintf(path, sizeof(path), "%s/%s.epoch", st->dir, p->cfg->name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    uint64_t last = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        char line[64] = "", *end = NULL;
        bool ok = fgets(line, sizeof(line), f) != NULL;
        fclose(f);
        errno = 0;
        if (ok)
            last = strtoull(line, &end, 10);
        if (!ok || errno || end == line || (*end && *end != '\n'))
            return pr_seterr(errstr, errstr_size, PR_EIO,
                             "%s: not an epoch number; restore it (the last epoch handed out) "
                             "or set a higher one by hand: epochs must never go back",
                             path);
    } else if (errno != ENOENT) {
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    }
    uint64_t next = last + 1;
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%llu\n", (unsigned long long)next);
    bool ok = fd >= 0 && write(fd, buf, (size_t)n) == n && fsync(fd) == 0;
    if (fd >= 0 && close(fd))
        ok = false;
    if (!ok || rename(tmp, path))
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: cannot write the epoch: %s", path,
                         strerror(errno));
    int dfd = open(st->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || fsync(dfd))
        ok = false;
    if (dfd >= 0)
        close(dfd);
    if (!ok)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: cannot fsync: %s", st->dir,
                         strerror(errno));
    p->epoch = next;
    pr_info("pipeline %s: epoch %llu (sequence numbers restart at 1)", p->cfg->name,
            (unsigned long long)next);
    return 0;
}

/* The vocabulary store (local or shared, pr_vocab.h) and its recovery; the
 * checkpoint timer starts when it has a state dir to write to. */
static int pr__vocab_open(pr__pipe *p, const char *replica, char *errstr, size_t errstr_size)
{
    const pr_state_cfg *st = &p->cfg->state;
    pr_vocab_store_opts vo = {.eng = p->eng,
                              .pipeline = p->cfg->name,
                              .state_dir = st->enabled ? st->dir : NULL,
                              .seed = p->cfg->vocab_seed,
                              .log = &p->cfg->vocab_log,
                              .replica = replica};
    int rc = pr_vocab_store_new(&vo, &p->vs, errstr, errstr_size);
    if (!rc)
        rc = pr_vocab_store_recover(p->vs, p->epoch, errstr, errstr_size);
    if (!rc && pr_vocab_store_persistent(p->vs))
        p->next_ckpt_ns = pr_mono_ns() + st->checkpoint_interval_s * 1000000000LL;
    return rc;
}

static void pr__checkpoint(pr__pipe *p)
{
    if (!pr_vocab_store_persistent(p->vs))
        return;
    char err[256];
    int rc = pr_vocab_store_checkpoint(p->vs, err, sizeof(err));
    if (rc)
        pr_err("pipeline %s: vocabulary checkpoint failed: %s (the journal keeps the state)",
               p->cfg->name, err);
    else
        atomic_fetch_add(&p->checkpoints, 1);
    p->next_ckpt_ns = pr_mono_ns() + p->cfg->state.checkpoint_interval_s * 1000000000LL;
}

/* The state section's checkpoint, for the pipeline thread (pipeline.c). */
void pr__pipe_checkpoint(pr__pipe *p)
{
    pr__checkpoint(p);
}

/* ---------------------------------------------------------------- construction */

static void pr__pipe_free(pr__pipe *p)
{
    if (p->cons)
        pr_consumer_free(p->cons);
    p->cons = NULL;
    pr_vocab_store_free(p->vs);
    p->vs = NULL;
    pr_sinkset_free(p->sinks);
    p->sinks = NULL;
    if (p->bat)
        pr_batcher_free(p->bat);
    p->bat = NULL;
    pr_engine_free(p->eng);
    p->eng = NULL;
    pr_fhealth_fini(&p->health);
    if (p->blk)
        pr_block_free(p->blk);
    if (p->wblk)
        pr_block_free(p->wblk);
    free(p->skip);
    free(p->late);
    free(p->unproc);
    free(p->revoked_keys);
    free(p->tps);
    p->unproc = NULL;
    if (p->wout)
        pr_out_free(p->wout);
    p->blk = p->wblk = NULL;
    p->wout = NULL;
    pr__worker_fini(p);
    pthread_mutex_destroy(&p->wlock);
    pthread_cond_destroy(&p->wcond);
    pthread_mutex_destroy(&p->lock);
    if (p->hot)
        for (uint32_t c = 0; c < p->spec->n_sparse; c++)
            pr_hot_free(p->hot[c]);
    free(p->hot);
    p->hot = NULL;
    pthread_mutex_destroy(&p->hot_lock);
    pr_json_decoder_free(p->json);
    p->json = NULL;
    if (p->have_lock)
        close(p->lock_fd);
    p->have_lock = false;
}

/* Rows per block for pipeline pc (see the comments inside). */
static uint32_t pr__block_rows(const pr_service *svc, const pr_pipeline_cfg *pc,
                               const pr_pipeline_spec *spec, const pr_engine *eng)
{
    /* One block may overshoot the in-flight limit before the pause takes
     * effect (two with engine.overlap: the worker's and the one read
     * meanwhile), so a small limit gets small blocks: together at most a
     * quarter of this pipeline's share of the limit (batch-format bytes per
     * row). */
    uint32_t block_rows = PR__BLOCK_ROWS;
    uint64_t limit = svc->cfg->limits.max_inflight_bytes;
    if (limit) {
        uint64_t row_bytes = 4 + 4ull * pc->spec.n_dense +
                             (uint64_t)pr_engine_sparse_width(eng) * pc->spec.n_sparse + 24;
        /* (a declared schema: pc->spec counts its dense columns, a vector's
         * dim each, and its sparse features) */
        uint64_t rows =
            limit / svc->cfg->n_pipelines / (svc->cfg->engine.overlap ? 8 : 4) / row_bytes;
        if (rows < 64)
            rows = 64;
        if (rows < block_rows)
            block_rows = (uint32_t)(rows & ~63ull);
    }
    /* Eviction through the vocab log maps a block at one point of the log,
     * so all its values must fit in a column at once: a block holds at most
     * a quarter of the smallest evicting capacity (values evicted again
     * while it waits would otherwise go around the proposal rounds and end
     * as OOV; docs/vocab-log.md). */
    if (pc->vocab_log.enabled)
        for (uint32_t c = 0; c < spec->n_sparse; c++) {
            if (spec->sparse[c].eviction == PR_EVICT_NONE)
                continue;
            uint64_t rows = spec->sparse[c].capacity / 4;
            if (rows < 64)
                rows = 64;
            if (rows < block_rows)
                block_rows = (uint32_t)(rows & ~63ull);
        }
    return block_rows;
}

/* Recycled-index notices across restarts (issue 19 item 5): those restored
 * by the vocabulary (numbered up to its counter) go out again, except the
 * ones the last run saw acknowledged, below the floor or in the ranges of
 * <state.dir>/<name>.notices (written at every offset store, pr__store);
 * bc points into *acks until pr_notice_acks_fini. */
static int pr__notice_floor_open(pr__pipe *p, pr_batcher_cfg *bc, pr_notice_acks *acks,
                                 char *errstr, size_t errstr_size)
{
    const pr_state_cfg *st = &p->cfg->state;
    if (!pr_spec_has_eviction(p->spec))
        return 0;
    bc->notice_restart_next = pr_engine_vocab_recycled_total(p->eng) + 1;
    if (!st->enabled || !st->dir)
        return 0;
    snprintf(p->floor_file, sizeof(p->floor_file), "%s/%s.notices", st->dir, p->cfg->name);
    int rc = pr_batcher_notice_floor_load(p->floor_file, acks, errstr, errstr_size);
    if (rc)
        return rc;
    bc->notice_floor = acks->floor;
    bc->notice_acked = acks->r;
    bc->n_notice_acked = acks->n;
    p->floor_saved = pr_notice_acks_digest(acks);
    uint32_t pend = pr_engine_vocab_notices_pending(p->eng);
    if (pend)
        pr_info("pipeline %s: %u restored recycled-index notice(s); those below #%llu were "
                "acknowledged before and are not sent again, the others go out spread over the "
                "first batches (at most %u per batch besides those a row needs first)",
                p->cfg->name, pend, (unsigned long long)bc->notice_floor,
                bc->batch.reannounce_max ? bc->batch.reannounce_max : PR_BATCH_REANNOUNCE_MAX);
    return 0;
}

static int pr__pipe_init(pr_service *svc, pr__pipe *p, size_t idx, char *errstr, size_t errstr_size)
{
    const pr_pipeline_cfg *pc = &svc->cfg->pipelines[idx];
    p->svc = svc;
    p->cfg = pc;
    p->idx = idx;
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->hot_lock, NULL);
    pthread_mutex_init(&p->wlock, NULL);
    pthread_cond_init(&p->wcond, NULL);
    pr__worker_init(p);
    char e[1024] = "";
    int rc;

    pr_engine_opts eo = pr_config_engine_opts(svc->cfg);
    if ((rc = pr__schema_spec(p, e, sizeof(e))))
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].schema: %s", pc->name, e);
    p->eng = pr_engine_new(p->spec, &eo, e, sizeof(e));
    if (!p->eng)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "pipelines[%s]: engine: %s", pc->name, e);
    if (pr_fhealth_init(&p->health, pc, p->spec))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "pipelines[%s]: out of memory", pc->name);
    rc = pr__epoch_bump(p, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].state: %s", pc->name, e);
    char replica[PR_REPLICA_MAX];
    pr__replica_name(pc, replica, sizeof(replica));
    rc = pr__vocab_open(p, replica, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].%s: %s", pc->name,
                         pc->vocab_log.enabled ? "vocab_log" : "state", e);
    /* Hot sets: one sketch per engine sparse column: the Criteo layout's
     * columns, or a declared schema's vocab features (named after them; a
     * list counts every element, pr_hot_observe_side). */
    if (svc->cfg->hot.top_k && p->spec->n_sparse) {
        p->hot = calloc(p->spec->n_sparse, sizeof(*p->hot));
        for (uint32_t c = 0; p->hot && c < p->spec->n_sparse; c++)
            if (!(p->hot[c] = pr_hot_new(svc->cfg->hot.top_k, svc->cfg->hot.half_life_records)))
                return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                                 "pipelines[%s]: hot sets: out of memory (hot.top_k %u)", pc->name,
                                 svc->cfg->hot.top_k);
        if (!p->hot)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "pipelines[%s]: out of memory",
                             pc->name);
    }

    uint32_t block_rows = pr__block_rows(svc, pc, p->spec, p->eng);
    if (p->json) {
        if (pr__schema_blocks(p, block_rows))
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    } else {
        p->blk = pr_block_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows, true);
        p->wblk = pr_block_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows, true);
        p->wout = pr_out_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows,
                             pr_engine_sparse_width(p->eng));
    }
    p->unproc = pr__unproc_new(); /* NULL is fine: the slow path */
    if (!p->blk || !p->wblk || !p->wout)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");

    pr_batcher_cfg bc;
    memset(&bc, 0, sizeof(bc));
    bc.pipeline = pc->name;
    /* Topic index = config order; see the note on partition keys in pr_ingest.h. */
    bc.topics = (const char *const *)pc->source.kafka.topics;
    bc.n_topics = pc->source.kafka.n_topics;
    bc.n_dense = p->spec->n_dense; /* the engine's output */
    bc.n_sparse = p->spec->n_sparse;
    bc.sparse_width = pr_engine_sparse_width(p->eng);
    bc.batch = pc->batch;
    bc.clock = svc->clock;
    bc.on_emit = pr__emit_cb;
    bc.on_late = pr__late_cb;
    bc.vocab_size = pr_spec_has_op(p->spec, PR_OP_VOCAB) ? pr__vocab_cb : NULL;
    bc.opaque = p;
    bc.epoch = p->epoch;
    bc.replica = replica; /* copied by the batcher */
    pr_notice_acks acks = {0};
    if ((rc = pr__notice_floor_open(p, &bc, &acks, e, sizeof(e)))) {
        pr_notice_acks_fini(&acks);
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].state: %s", pc->name, e);
    }
    pr_batch_schema bs = {0}; /* a declared schema: jagged batches from the outputs' side tables */
    if (pc->features.declared && pr_batch_schema_from_features(&pc->features, &bs) < 0) {
        pr_notice_acks_fini(&acks);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    }
    bc.schema = pc->features.declared ? &bs : NULL;
    rc = pr_batcher_new(&bc, &p->bat, e, sizeof(e));
    pr_batch_schema_fini(&bs);
    pr_notice_acks_fini(&acks);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].batch: %s", pc->name, e);

    rc = pr__sinks_open(p, svc->clock, errstr, errstr_size);
    if (rc)
        return rc;

    /* Consumer last: it joins the group, and should only do so once
     * everything downstream exists. */
    rc = pr__consumer_open(svc, p, errstr, errstr_size);
    if (rc)
        return rc;
    atomic_store(&p->last_turn_ns, pr_mono_ns());
    return 0;
}

int pr_service_new(const pr_config *cfg, const pr_service_opts *opts, pr_service **out,
                   char *errstr, size_t errstr_size)
{
    pr_service *svc = calloc(1, sizeof(*svc));
    if (!svc)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    svc->cfg = cfg;
    if (opts)
        svc->opts = *opts;
    if (svc->opts.drain_timeout_ms <= 0)
        svc->opts.drain_timeout_ms = 10000;
    if (svc->opts.health_stall_ms <= 0)
        svc->opts.health_stall_ms = 5000;
    if (svc->opts.max_poll_wait_ms <= 0)
        svc->opts.max_poll_wait_ms = 100;
    svc->clock = svc->opts.clock ? svc->opts.clock : pr_clock_real();
    svc->start_wall_ms = pr_clock_wall_ms(pr_clock_real());
    svc->pipes = calloc(cfg->n_pipelines, sizeof(*svc->pipes));
    if (!svc->pipes) {
        free(svc);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cfg->n_pipelines; i++) {
        svc->n_pipes = i + 1;
        int rc = pr__pipe_init(svc, &svc->pipes[i], i, errstr, errstr_size);
        if (rc) {
            pr_service_free(svc);
            return rc;
        }
    }
    *out = svc;
    return 0;
}

/* ---------------------------------------------------------------- lifecycle */

int pr_service_start(pr_service *svc, char *errstr, size_t errstr_size)
{
    if (svc->started)
        return pr_seterr(errstr, errstr_size, PR_ESTATE, "service already started");
    if (svc->cfg->http.enabled && !svc->opts.no_http) {
        int rc = pr__http_views_start(svc, errstr, errstr_size);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        atomic_store(&p->last_turn_ns, pr_mono_ns());
        pr__refresh_cache(p, pr_mono_ns(), true);
        if (pthread_create(&p->thread, NULL, pr__pipe_main, p)) {
            pr_service_request_stop(svc);
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "cannot start pipeline thread");
        }
        p->thread_started = true;
    }
    svc->started = true;
    return 0;
}

void pr_service_request_stop(pr_service *svc)
{
    svc->stop_requested = 1;
}

bool pr_service_stopping(const pr_service *svc)
{
    if (svc->stop_requested)
        return true;
    for (size_t i = 0; i < svc->n_pipes; i++)
        if (atomic_load(&svc->pipes[i].done))
            return true;
    return false;
}

int pr_service_stop(pr_service *svc)
{
    if (svc->stopped)
        return svc->stop_rc;
    pr_service_request_stop(svc);
    int rc = 0;
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        if (p->thread_started) {
            pthread_join(p->thread, NULL);
            p->thread_started = false;
        }
        int f = atomic_load(&p->fatal);
        if (f && !rc)
            rc = f;
        if (p->drain_rc && !rc)
            rc = p->drain_rc;
    }
    /* HTTP goes last so the final figures can still be scraped while draining. */
    pr__http_stop(svc->http);
    svc->http = NULL;
    svc->stopped = true;
    svc->stop_rc = rc;
    return rc;
}

void pr_service_free(pr_service *svc)
{
    if (!svc)
        return;
    if (svc->started)
        pr_service_stop(svc);
    pr__http_stop(svc->http);
    for (size_t i = 0; i < svc->n_pipes; i++)
        pr__pipe_free(&svc->pipes[i]);
    free(svc->pipes);
    free(svc);
}

/* ---------------------------------------------------------------- queries */

size_t pr_service_n_pipelines(const pr_service *svc)
{
    return svc->n_pipes;
}

uint16_t pr_service_http_port(const pr_service *svc)
{
    return pr__http_port(svc->http);
}

uint16_t pr_service_trainer_port(const pr_service *svc, size_t pipeline)
{
    if (pipeline >= svc->n_pipes || svc->pipes[pipeline].trainer_port < 0)
        return 0;
    return (uint16_t)svc->pipes[pipeline].trainer_port;
}
