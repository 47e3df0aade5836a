/*
 * service.c — the streaming runtime (pr_service.h): per pipeline a thread
 * that polls the consumer and decodes, and a worker thread that runs the
 * engine, feeds the batcher and drives the sinks' send path, plus the
 * at-least-once offset bookkeeping, backpressure, the vocabulary store
 * (pr_vocab.h: local journal and snapshot, or the shared log), the hot-set sketches
 * (pr_hot.h), and the HTTP views (/metrics, /healthz, /readyz, /v1/status,
 * /v1/hot).
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
 * checkpoint intervals use the real monotonic clock so a test that freezes
 * time does not also freeze /healthz.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "pr_service.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pr_batcher.h"
#include "pr_hot.h"
#include "pr_http.h"
#include "pr_ingest.h"
#include "pr_grow.h"
#include "pr_log.h"
#include "pr_sink.h"
#include "pr_vocab.h"

#ifndef PR_VERSION
#define PR_VERSION "0.0.0"
#endif

#define PR__BLOCK_ROWS   4096
#define PR__MAX_PARTS    1024
#define PR__ACK_POLL_MS  2
#define PR__VLOG_WAIT_MS 5 /* per loop turn while a block waits for the vocab log */

/* The worker's state (pr__pipe.wstate). */
enum pr__wstate {
    PR__W_IDLE,    /* wblk empty */
    PR__W_RUNNING, /* the worker runs wblk */
    PR__W_DONE,    /* run finished (wrc); the pipeline thread collects it */
    PR__W_HELD,    /* wblk waits for the vocab log: run again */
};

typedef struct pr__pipe pr__pipe;

struct pr__pipe {
    pr_service *svc;
    const pr_pipeline_cfg *cfg;
    size_t idx;

    pr_engine *eng;
    pr_consumer *cons;
    pr_batcher *bat;
    pr_sinkset *sinks;
    int trainer_port;
    pr_sink *ckpt_sink; /* the trainer sink in checkpoint delivery, else NULL */
    uint8_t *skip;      /* per row of blk: in a checkpoint already (pr__skip_checkpointed) */
    size_t skip_cap;
    _Atomic uint64_t ckpt_skipped; /* rows skipped because a checkpoint holds them */
    /* Two row blocks (see "The loop"): the consumer fills `blk` on the
     * pipeline thread while the worker runs engine + batcher on `wblk`
     * (into `wout`); they swap when the worker is done. */
    pr_block *blk;
    pr_block *wblk;
    pr_out *wout;
    pthread_t wthread;
    bool wthread_started;
    pthread_mutex_t wlock;
    pthread_cond_t wcond;
    int wstate;          /* pr__wstate, under wlock */
    int wrc;             /* the last run's result, under wlock */
    bool wquit;          /* under wlock */
    bool w_skip_done;    /* checkpoint filter already applied to wblk */
    uint32_t ahead_rows; /* rows of blk whose values were proposed ahead (vocab log) */
    /* Rows the batcher dropped as late while the worker ran: dead-lettered
     * by the pipeline thread when it collects the block. */
    struct pr__late {
        int32_t key;
        int64_t offset, event_time_ms;
    } * late;
    size_t n_late, late_cap;
    /* The vocabulary's durability and sharing (pr_vocab.h): local journal +
     * snapshot, or the shared vocab log. */
    pr_vocab_store *vs;
    /* Lowest offset per partition key of the rows still in blk/wblk, built
     * once per round of offset stores (pr__unproc_build): a scan of both
     * blocks per partition was 6% of the pipeline thread at 144 partitions. */
    struct pr__unproc *unproc;
    bool unproc_valid;

    /* Names for sinks (borrowed from cfg). */
    const char *dense_names[PR_MAX_DENSE];
    const char *sparse_names[PR_MAX_SPARSE];

    /* Partitions revoked since the block was last prepared: rows of theirs
     * already in a block must not reach the batcher. As many as were
     * revoked (a fixed-size list once dropped every row of the block past
     * 64 keys, partitions still owned included, whose offsets could then be
     * committed unprocessed); overflow only when memory runs out, and then
     * the pipeline stops. */
    int32_t *revoked_keys;
    size_t n_revoked, cap_revoked;
    bool revoked_overflow;

    int64_t next_ckpt_ns;            /* next vocabulary checkpoint (pr_vocab_store_persistent) */
    _Atomic uint64_t epoch;          /* restart epoch stamped on every batch (pr__epoch_bump) */
    char dead_letter_file[PATH_MAX]; /* <state.dir>/<name>.deadletters, or "" */
    char member_file[PATH_MAX];      /* <state.dir>/<name>.member (consumer member id), or "" */
    char instance_id[256];           /* group.instance.id, or "" */

    pthread_t thread;
    bool thread_started;
    bool bp_paused;
    bool drained;
    bool stored_since_commit;

    _Atomic int64_t last_turn_ns;
    _Atomic uint64_t loop_turns;
    _Atomic uint64_t poll_empty_ns, poll_rows_ns, worker_wait_ns; /* pr_pipeline_stats */
    _Atomic uint64_t inflight;
    _Atomic uint64_t inflight_peak;
    _Atomic uint64_t pauses;
    _Atomic uint64_t engine_rejects[PR_REJECT__ENGINE_COUNT];
    _Atomic uint64_t emit_errors;
    _Atomic uint64_t offsets_stored;
    _Atomic uint64_t commits;
    _Atomic uint64_t checkpoints;
    _Atomic int fatal; /* 0 or a PR_E* code */
    _Atomic bool done;
    char fatal_msg[640];

    /* Cache refreshed by the pipeline thread, read by others. */
    pthread_mutex_t lock;
    pr_engine_stats est;
    uint64_t vocab[PR_MAX_SPARSE];
    bool sinks_any_ready;
    size_t n_sink_stats;
    const char *sink_names[4];
    pr_sink_stats sink_stats[4];
    double rate_records, rate_rows_out, rate_batches;
    int64_t rate_t0_ns;
    uint64_t rate_records0, rate_rows0, rate_batches0;
    int drain_rc;

    /* Hot sets: one sketch per sparse column, NULL when hot.top_k is 0. The
     * pipeline thread updates them per block under hot_lock (its own lock so
     * a /v1/hot sort never holds up the stats cache); readers take it too. */
    pthread_mutex_t hot_lock;
    pr_hot **hot;
};

struct pr_service {
    const pr_config *cfg;
    pr_service_opts opts;
    const pr_clock *clock;
    pr__pipe *pipes;
    size_t n_pipes;
    pr_http *http;
    volatile sig_atomic_t stop_requested;
    bool started;
    bool stopped;
    int stop_rc;
    int64_t start_wall_ms;
};

static int64_t pr__now_ns(void)
{
    return pr_clock_mono_ns(pr_clock_real());
}

static void pr__sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void pr__set_fatal(pr__pipe *p, int rc, const char *msg)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&p->fatal, &expected, rc)) {
        snprintf(p->fatal_msg, sizeof(p->fatal_msg), "%s", msg);
        pr_err("pipeline %s: %s", p->cfg->name, msg);
    }
}

/* ---------------------------------------------------------------- callbacks */

static uint64_t pr__vocab_cb(void *opaque, uint32_t col)
{
    pr__pipe *p = opaque;
    return pr_engine_vocab_size(p->eng, col);
}

static void pr__emit_cb(void *opaque, pr_batch *b)
{
    pr__pipe *p = opaque;
    int rc = pr_sinkset_send(p->sinks, b);
    if (rc < 0) {
        atomic_fetch_add(&p->emit_errors, 1);
        static pr_ratelimit rl = PR_RATELIMIT_INIT(1);
        pr_log_ratelimited(&rl, PR_LOG_ERROR, "pipeline %s: batch %llu: sink error: %s",
                           p->cfg->name, (unsigned long long)b->seq, pr_strerror(rc));
    }
}

static void pr__ack_cb(void *opaque, uint64_t seq)
{
    pr__pipe *p = opaque;
    pr_batcher_ack(p->bat, seq);
}

/* A late row (batcher, in the worker): queued; the pipeline thread, which
 * owns the consumer and its dead-letter producer, sends it when it collects
 * the block (before any offset is stored again). */
static void pr__late_cb(void *opaque, const pr_block *in, const pr_out *out, uint32_t row)
{
    (void)out;
    pr__pipe *p = opaque;
    if (!pr_consumer_dlq(p->cons))
        return;
    if (p->n_late == p->late_cap) {
        size_t nc = p->late_cap ? p->late_cap * 2 : 64;
        struct pr__late *n = realloc(p->late, nc * sizeof(*n));
        if (!n) {
            static pr_ratelimit rl = PR_RATELIMIT_INIT(1);
            pr_log_ratelimited(&rl, PR_LOG_ERROR,
                               "pipeline %s: late row not dead-lettered: out of "
                               "memory",
                               p->cfg->name);
            return;
        }
        p->late = n;
        p->late_cap = nc;
    }
    p->late[p->n_late++] =
        (struct pr__late){in->partition[row], in->offset[row], in->event_time_ms[row]};
}

static void pr__send_late(pr__pipe *p)
{
    pr_dlq *d = pr_consumer_dlq(p->cons);
    for (size_t i = 0; d && i < p->n_late; i++) {
        char payload[128];
        int n = snprintf(payload, sizeof(payload), "late row: event_time_ms=%lld",
                         (long long)p->late[i].event_time_ms);
        int32_t key = p->late[i].key;
        const char *topic = pr_consumer_topic(p->cons, PR_PART_KEY_TOPIC(key));
        pr_dlq_send(d, key, payload, (size_t)n, "late", "event time older than the watermark",
                    topic ? topic : "", PR_PART_KEY_PARTITION(key), p->late[i].offset, -1);
    }
    p->n_late = 0;
}

/* Rows still in the pipeline's block have left the consumer (consumed_next
 * is past them, and a reject later in the same poll may have moved the
 * batcher past them too) but are not in the batcher yet: a revoke inside the
 * poll, or a fatal error before the block was processed. Never store beyond
 * the first of them. */
#define PR__UNPROC_SLOTS 4096 /* > 2 x PR__MAX_PARTS: open addressing stays short */
struct pr__unproc {
    uint32_t gen;
    uint32_t slot_gen[PR__UNPROC_SLOTS];
    int32_t key[PR__UNPROC_SLOTS];
    int64_t min[PR__UNPROC_SLOTS];
};

static size_t pr__unproc_slot(const struct pr__unproc *u, int32_t key)
{
    size_t i = ((uint32_t)key * 2654435761u) % PR__UNPROC_SLOTS;
    while (u->slot_gen[i] == u->gen && u->key[i] != key)
        i = (i + 1) % PR__UNPROC_SLOTS;
    return i;
}

/* One pass over both blocks (pipeline thread, worker not running). */
static void pr__unproc_build(pr__pipe *p)
{
    struct pr__unproc *u = p->unproc;
    p->unproc_valid = false;
    if (!u)
        return;
    if (++u->gen == 0) {
        memset(u->slot_gen, 0, sizeof(u->slot_gen));
        u->gen = 1;
    }
    size_t used = 0;
    const pr_block *blocks[2] = {p->blk, p->wblk};
    for (int i = 0; i < 2; i++) {
        const pr_block *b = blocks[i];
        for (uint32_t r = 0; b && r < b->rows; r++) {
            size_t k = pr__unproc_slot(u, b->partition[r]);
            if (u->slot_gen[k] != u->gen) {
                if (++used > PR__UNPROC_SLOTS / 2)
                    return; /* more keys than expected: the slow path */
                u->slot_gen[k] = u->gen;
                u->key[k] = b->partition[r];
                u->min[k] = b->offset[r];
            } else if (b->offset[r] < u->min[k]) {
                u->min[k] = b->offset[r];
            }
        }
    }
    p->unproc_valid = true;
}

static int64_t pr__cap_unprocessed(const pr__pipe *p, int32_t key, int64_t safe)
{
    if (p->unproc_valid) {
        size_t k = pr__unproc_slot(p->unproc, key);
        if (p->unproc->slot_gen[k] == p->unproc->gen && p->unproc->min[k] < safe)
            safe = p->unproc->min[k];
    } else {
        const pr_block *blocks[2] = {p->blk, p->wblk};
        for (int i = 0; i < 2; i++) {
            const pr_block *b = blocks[i];
            for (uint32_t r = 0; b && r < b->rows; r++)
                if (b->partition[r] == key && b->offset[r] < safe)
                    safe = b->offset[r];
        }
    }
    /* A rejected record counts as done only once its dead letter is in the
     * topic or the dead-letter file: until then it holds its offset. */
    int64_t hold = pr_dlq_hold(pr_consumer_dlq(p->cons), key);
    if (hold < safe)
        safe = hold;
    return safe;
}

static void pr__store_cb(void *opaque, int32_t key, int64_t safe)
{
    pr__pipe *p = opaque;
    /* A message split across two blocks has rows acknowledged while the rest
     * of it is still inside the consumer: never store past what the consumer
     * handed out completely. */
    int64_t cn = pr_consumer_consumed_next(p->cons, key);
    if (safe < 0 || cn < 0)
        return;
    if (safe > cn)
        safe = cn;
    safe = pr__cap_unprocessed(p, key, safe);
    if (pr_consumer_store_offset_key(p->cons, key, safe) == 0) {
        atomic_fetch_add(&p->offsets_stored, 1);
        p->stored_since_commit = true;
    }
}

static void pr__worker_join(pr__pipe *p);
static int pr__wstate(pr__pipe *p);
static void pr__block_drop_revoked(pr__pipe *p, pr_block *b, const uint8_t *skip);
static bool pr__key_revoked(const pr__pipe *p, int32_t key);

static void pr__on_assign(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
{
    (void)c;
    pr__pipe *p = opaque;
    pr__worker_join(p); /* the batcher is the worker's while it runs */
    /* A partition that comes back while the block still holds rows read
     * before its revoke (the block is prepared only when the worker's block
     * is done, which may take long while that one waits for the vocab log):
     * those rows go now, or they would be kept beside the same rows read
     * again from the committed offset. */
    bool back = false;
    for (size_t i = 0; i < n && !back; i++)
        back = pr__key_revoked(p, parts[i].key);
    if (back && p->blk->rows) {
        pr__block_drop_revoked(p, p->blk, NULL);
        p->ahead_rows = 0;
    }
    for (size_t i = 0; i < n; i++) {
        pr_batcher_assign(p->bat, parts[i].key);
        /* A partition that comes back is no longer "revoked" for the rows of
         * this poll: rows fetched after the assign are legitimately ours. */
        for (size_t j = 0; j < p->n_revoked; j++)
            if (p->revoked_keys[j] == parts[i].key)
                p->revoked_keys[j] = p->revoked_keys[--p->n_revoked];
    }
    pr_info("pipeline %s: %zu partition(s) assigned", p->cfg->name, n);
}

static void pr__on_revoke(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
{
    pr__pipe *p = opaque;
    pr__worker_join(p);
    /* Collect acks that already arrived so fewer batches are redelivered. */
    pr_sinkset_poll(p->sinks, pr__ack_cb, p);
    for (size_t i = 0; i < n; i++) {
        int64_t safe = -1;
        pr_batcher_revoke(p->bat, parts[i].key, &safe);
        /* parts[i].offset = the consumer's consumed_next: everything before
         * it was handed out whole; the batcher knows what is still in flight.
         * When no message of the partition was handed out whole (-1), store
         * nothing: the batcher's figure may cover only the acked head of a
         * message split across blocks, whose tail is dropped here. */
        if (parts[i].offset < 0)
            safe = -1;
        else if (safe < 0 || parts[i].offset < safe)
            safe = parts[i].offset;
        if (safe >= 0)
            safe = pr__cap_unprocessed(p, parts[i].key, safe);
        if (safe >= 0)
            pr_consumer_store_offset_key(c, parts[i].key, safe);
        if (pr_grow((void **)&p->revoked_keys, &p->cap_revoked, p->n_revoked + 1,
                    sizeof(*p->revoked_keys)) == 0) {
            p->revoked_keys[p->n_revoked++] = parts[i].key;
        } else if (!p->revoked_overflow) {
            p->revoked_overflow = true;
            pr__set_fatal(p, PR_ENOMEM, "out of memory for the list of revoked partitions");
        }
    }
    /* A block that waits for the vocab log (rows are read meanwhile, so a
     * revoke can come now): its rows of these partitions go too; the new
     * owner reads them again from the offsets stored above. What is left
     * of it is a different block, so its new values are looked for again. */
    if (pr__wstate(p) == PR__W_HELD && p->wblk->rows) {
        uint32_t before = p->wblk->rows;
        pr__block_drop_revoked(p, p->wblk, NULL);
        if (p->wblk->rows != before)
            pr_vocab_store_abandon(p->vs);
    }
    pr_info("pipeline %s: %zu partition(s) revoked", p->cfg->name, n);
}

static void pr__on_reject(void *opaque, pr_consumer *c, const pr_reject_info *ri)
{
    (void)c;
    pr__pipe *p = opaque;
    pr__worker_join(p); /* rows before it, in wblk, enter the batcher first */
    pr_batcher_note_done(p->bat, ri->key, ri->offset);
}

/* ---------------------------------------------------------------- block helpers */

static bool pr__key_revoked(const pr__pipe *p, int32_t key)
{
    for (size_t i = 0; i < p->n_revoked; i++)
        if (p->revoked_keys[i] == key)
            return true;
    return false;
}

/* Remove rows of revoked partitions from the block (rare: only when a revoke
 * happened inside the poll that filled it), or with `skip`, the rows whose
 * skip[r] is set. Keeps the order of the rest. */
static void pr__block_drop_revoked(pr__pipe *p, pr_block *b, const uint8_t *skip)
{
    uint32_t w = 0;
    const size_t bw = pr_bitmap_words(b->cap);
    for (uint32_t r = 0; r < b->rows; r++) {
        bool drop = skip ? skip[r] : pr__key_revoked(p, b->partition[r]);
        if (drop)
            continue;
        if (w != r) {
            if (b->labels)
                b->labels[w] = b->labels[r];
            for (uint32_t c = 0; c < b->n_dense; c++) {
                b->dense[(size_t)c * b->cap + w] = b->dense[(size_t)c * b->cap + r];
                uint64_t *m = b->dense_missing + (size_t)c * bw;
                if (pr_bit_test(m, r))
                    pr_bit_set(m, w);
                else
                    pr_bit_clear(m, w);
            }
            for (uint32_t c = 0; c < b->n_sparse; c++) {
                memcpy(pr_block_hex(b, c, w), pr_block_hex(b, c, r), PR_HEX_SLOT);
                b->sparse_u64[(size_t)c * b->cap + w] = b->sparse_u64[(size_t)c * b->cap + r];
                uint64_t *m = b->sparse_missing + (size_t)c * bw;
                if (pr_bit_test(m, r))
                    pr_bit_set(m, w);
                else
                    pr_bit_clear(m, w);
            }
            b->partition[w] = b->partition[r];
            b->offset[w] = b->offset[r];
            b->event_time_ms[w] = b->event_time_ms[r];
        }
        w++;
    }
    /* Clear the bitmap bits above the new row count. */
    for (uint32_t r = w; r < b->rows; r++) {
        for (uint32_t c = 0; c < b->n_dense; c++)
            pr_bit_clear(b->dense_missing + (size_t)c * bw, r);
        for (uint32_t c = 0; c < b->n_sparse; c++)
            pr_bit_clear(b->sparse_missing + (size_t)c * bw, r);
    }
    b->rows = w;
}

/* Dead-letter the rows the engine rejected. The original message bytes are
 * gone by now (the block holds decoded values), so the payload names the
 * column and slot; the headers carry topic/partition/offset for tracing. */
static void pr__dead_letter_engine_rejects(pr__pipe *p, const pr_block *in, const pr_out *out)
{
    pr_dlq *d = pr_consumer_dlq(p->cons);
    static pr_ratelimit rl = PR_RATELIMIT_INIT(1);
    for (uint32_t r = 0; r < out->rows; r++) {
        if (!pr_bit_test(out->rejected, r))
            continue;
        unsigned reason = out->reject_reason[r];
        if (reason < PR_REJECT__ENGINE_COUNT)
            atomic_fetch_add(&p->engine_rejects[reason], 1);
        uint16_t col = out->reject_col[r];
        const char *cname = col < p->cfg->spec.n_sparse ? p->cfg->spec.sparse[col].name : "?";
        char slot[PR_HEX_SLOT + 1] = {0};
        if (col < in->n_sparse && in->sparse_enc[col] == PR_SPARSE_HEX)
            memcpy(slot, pr_block_hex((pr_block *)in, col, r), PR_HEX_SLOT);
        for (size_t i = 0; i < PR_HEX_SLOT; i++)
            if ((unsigned char)slot[i] < 0x20 || (unsigned char)slot[i] > 0x7e)
                slot[i] = '?';
        int32_t key = in->partition[r];
        const char *topic = pr_consumer_topic(p->cons, PR_PART_KEY_TOPIC(key));
        char detail[160];
        snprintf(detail, sizeof(detail), "%s: non-hex value '%s'", cname, slot);
        pr_log_ratelimited(&rl, PR_LOG_WARN, "pipeline %s: rejected %s[%d]@%lld: %s", p->cfg->name,
                           topic ? topic : "?", PR_PART_KEY_PARTITION(key),
                           (long long)in->offset[r], detail);
        if (d)
            pr_dlq_send(d, key, detail, strlen(detail), "bad_hex", detail, topic ? topic : "",
                        PR_PART_KEY_PARTITION(key), in->offset[r], -1);
    }
}

/* ---------------------------------------------------------------- state */

static int pr__mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *s = tmp + 1; *s; s++) {
        if (*s == '/') {
            *s = '\0';
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return -1;
            *s = '/';
        }
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return -1;
    return 0;
}

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
    if (pr__mkdir_p(st->dir))
        return pr_seterr(errstr, errstr_size, PR_EIO, "state.dir '%s': %s", st->dir,
                         strerror(errno));
    char path[PATH_MAX], tmp[PATH_MAX + 8];
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
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
        p->next_ckpt_ns = pr__now_ns() + st->checkpoint_interval_s * 1000000000LL;
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
    p->next_ckpt_ns = pr__now_ns() + p->cfg->state.checkpoint_interval_s * 1000000000LL;
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
    if (p->blk)
        pr_block_free(p->blk);
    if (p->wblk)
        pr_block_free(p->wblk);
    free(p->skip);
    free(p->late);
    free(p->unproc);
    free(p->revoked_keys);
    p->unproc = NULL;
    if (p->wout)
        pr_out_free(p->wout);
    p->blk = p->wblk = NULL;
    p->wout = NULL;
    pthread_mutex_destroy(&p->wlock);
    pthread_cond_destroy(&p->wcond);
    pthread_mutex_destroy(&p->lock);
    if (p->hot)
        for (uint32_t c = 0; c < p->cfg->spec.n_sparse; c++)
            pr_hot_free(p->hot[c]);
    free(p->hot);
    p->hot = NULL;
    pthread_mutex_destroy(&p->hot_lock);
}

static int pr__sinks_open(pr__pipe *p, const pr_clock *clock, char *errstr, size_t errstr_size)
{
    const pr_pipeline_cfg *pc = p->cfg;
    pr_sink_cfg sc;
    memset(&sc, 0, sizeof(sc));
    sc.pipeline = pc->name;
    sc.n_dense = pc->spec.n_dense;
    sc.n_sparse = pc->spec.n_sparse;
    sc.sparse_width = pr_engine_sparse_width(p->eng);
    for (uint32_t i = 0; i < pc->spec.n_dense; i++)
        p->dense_names[i] = pc->dense_names[i];
    for (uint32_t i = 0; i < pc->spec.n_sparse; i++)
        p->sparse_names[i] = pc->spec.sparse[i].name;
    sc.dense_names = p->dense_names;
    sc.sparse_names = p->sparse_names;
    sc.clock = clock;
    /* The loader filled the sinks' own settings (defaults included; the
     * Kafka sink's bootstrap.servers falls back to the source's there). */
    sc.trainer = pc->sinks.trainer;
    sc.kafka = pc->sinks.kafka;
    sc.files = pc->sinks.files;

    p->sinks = pr_sinkset_new();
    if (!p->sinks)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    static const struct {
        const char *name;
        size_t enabled_off;
    } table[] = {
        {"trainer", offsetof(pr_sinks_cfg, trainer.enabled)},
        {"kafka", offsetof(pr_sinks_cfg, kafka.enabled)},
        {"files", offsetof(pr_sinks_cfg, files.enabled)},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (!*(const bool *)((const char *)&pc->sinks + table[i].enabled_off))
            continue;
        const pr_sink_ops *ops = pr_sink_find(table[i].name);
        if (!ops)
            return pr_seterr(errstr, errstr_size, PR_ENOTSUP, "pipelines[%s].sinks.%s: not built",
                             pc->name, table[i].name);
        pr_sink *s = NULL;
        char e[256] = "";
        int rc = pr_sink_new(ops, &sc, &s, e, sizeof(e));
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].sinks.%s: %s", pc->name,
                             table[i].name, e);
        if (!strcmp(table[i].name, "trainer")) {
            p->trainer_port = pr_sink_trainer_port(s);
            if (pr_sink_trainer_checkpoint_mode(s))
                p->ckpt_sink = s;
        }
        rc = pr_sinkset_add(p->sinks, s);
        if (rc) {
            pr_sink_free(s);
            return pr_seterr(errstr, errstr_size, rc, "pipelines[%s]: cannot add sink %s", pc->name,
                             table[i].name);
        }
    }
    return 0;
}

/* group.instance.id for static membership: the config's value as is ("" =
 * dynamic), else $PIPEREC_INSTANCE_ID or $POD_NAME (the Helm chart sets it)
 * with "-<pipeline>" appended (pipelines may share a group), else none. */
static const char *pr__instance_id(pr__pipe *p, const pr_pipeline_cfg *pc)
{
    const char *v = pc->source.kafka.group_instance_id;
    if (v)
        snprintf(p->instance_id, sizeof(p->instance_id), "%s", v);
    else {
        const char *env = getenv("PIPEREC_INSTANCE_ID");
        if (!env || !*env)
            env = getenv("POD_NAME");
        if (env && *env)
            snprintf(p->instance_id, sizeof(p->instance_id), "%s-%s", env, pc->name);
    }
    return p->instance_id[0] ? p->instance_id : NULL;
}

/* TrainingBatch.replica: the replica that builds this pipeline's batches —
 * the source's group_instance_id when set (non-empty), else $POD_NAME, else
 * the host name ("" when even that fails). */
static void pr__replica_name(const pr_pipeline_cfg *pc, char *out, size_t n)
{
    const char *v = pc->source.kafka.group_instance_id;
    if (!v || !*v)
        v = getenv("POD_NAME");
    if (v && *v) {
        snprintf(out, n, "%s", v);
        return;
    }
    out[0] = 0;
    if (gethostname(out, n) != 0)
        out[0] = 0;
    out[n - 1] = 0;
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
    char e[1024] = "";
    int rc;

    pr_engine_opts eo = pr_config_engine_opts(svc->cfg);
    p->eng = pr_engine_new(&pc->spec, &eo, e, sizeof(e));
    if (!p->eng)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "pipelines[%s]: engine: %s", pc->name, e);
    rc = pr__epoch_bump(p, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].state: %s", pc->name, e);
    char replica[PR_REPLICA_MAX];
    pr__replica_name(pc, replica, sizeof(replica));
    rc = pr__vocab_open(p, replica, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].%s: %s", pc->name,
                         pc->vocab_log.enabled ? "vocab_log" : "state", e);
    if (svc->cfg->hot.top_k && pc->spec.n_sparse) {
        p->hot = calloc(pc->spec.n_sparse, sizeof(*p->hot));
        for (uint32_t c = 0; p->hot && c < pc->spec.n_sparse; c++)
            if (!(p->hot[c] = pr_hot_new(svc->cfg->hot.top_k, svc->cfg->hot.half_life_records)))
                return pr_seterr(errstr, errstr_size, PR_ENOMEM,
                                 "pipelines[%s]: hot sets: out of memory (hot.top_k %u)", pc->name,
                                 svc->cfg->hot.top_k);
        if (!p->hot)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "pipelines[%s]: out of memory",
                             pc->name);
    }

    /* One block may overshoot the in-flight limit before the pause takes
     * effect (two with engine.overlap: the worker's and the one read
     * meanwhile), so a small limit gets small blocks: together at most a
     * quarter of this pipeline's share of the limit (batch-format bytes per
     * row). */
    uint32_t block_rows = PR__BLOCK_ROWS;
    uint64_t limit = svc->cfg->limits.max_inflight_bytes;
    if (limit) {
        uint64_t row_bytes = 4 + 4ull * pc->spec.n_dense +
                             (uint64_t)pr_engine_sparse_width(p->eng) * pc->spec.n_sparse + 24;
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
        for (uint32_t c = 0; c < pc->spec.n_sparse; c++) {
            if (pc->spec.sparse[c].eviction == PR_EVICT_NONE)
                continue;
            uint64_t rows = pc->spec.sparse[c].capacity / 4;
            if (rows < 64)
                rows = 64;
            if (rows < block_rows)
                block_rows = (uint32_t)(rows & ~63ull);
        }
    p->blk = pr_block_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows, true);
    p->wblk = pr_block_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows, true);
    p->unproc = calloc(1, sizeof(*p->unproc)); /* NULL is fine: the slow path */
    p->wout =
        pr_out_new(pc->spec.n_dense, pc->spec.n_sparse, block_rows, pr_engine_sparse_width(p->eng));
    if (!p->blk || !p->wblk || !p->wout)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");

    pr_batcher_cfg bc;
    memset(&bc, 0, sizeof(bc));
    bc.pipeline = pc->name;
    /* Topic index = config order; see the note on partition keys in pr_ingest.h. */
    bc.topics = (const char *const *)pc->source.kafka.topics;
    bc.n_topics = pc->source.kafka.n_topics;
    bc.n_dense = pc->spec.n_dense;
    bc.n_sparse = pc->spec.n_sparse;
    bc.sparse_width = pr_engine_sparse_width(p->eng);
    bc.batch = pc->batch;
    bc.clock = svc->clock;
    bc.on_emit = pr__emit_cb;
    bc.on_late = pr__late_cb;
    bc.vocab_size = pr_spec_has_op(&pc->spec, PR_OP_VOCAB) ? pr__vocab_cb : NULL;
    bc.opaque = p;
    bc.epoch = p->epoch;
    bc.replica = replica; /* copied by the batcher */
    rc = pr_batcher_new(&bc, &p->bat, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].batch: %s", pc->name, e);

    rc = pr__sinks_open(p, svc->clock, errstr, errstr_size);
    if (rc)
        return rc;

    /* Consumer last: it joins the group, and should only do so once
     * everything downstream exists. */
    pr_consumer_conf cc;
    memset(&cc, 0, sizeof(cc));
    cc.topics = (const char *const *)pc->source.kafka.topics;
    cc.n_topics = pc->source.kafka.n_topics;
    cc.group_id = pc->source.kafka.group_id;
    cc.props = pc->source.kafka.properties.items;
    cc.n_props = pc->source.kafka.properties.n;
    cc.format = pc->source.format;
    cc.spec = &pc->spec;
    cc.dead_letter_topic = pc->source.dead_letter_topic;
    cc.on_offset_reset = pc->source.kafka.on_offset_reset;
    cc.group_instance_id = pr__instance_id(p, pc);
    if (pc->state.enabled && pc->state.dir) {
        snprintf(p->dead_letter_file, sizeof(p->dead_letter_file), "%s/%s.deadletters",
                 pc->state.dir, pc->name);
        cc.dead_letter_file = p->dead_letter_file;
        snprintf(p->member_file, sizeof(p->member_file), "%s/%s.member", pc->state.dir, pc->name);
        cc.member_file = p->member_file;
    }
    cc.clock = svc->clock;
    cc.on_assign = pr__on_assign;
    cc.on_revoke = pr__on_revoke;
    cc.on_reject = pr__on_reject;
    cc.opaque = p;
    p->cons = pr_consumer_new(&cc, e, sizeof(e));
    if (!p->cons)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "pipelines[%s].source: %s", pc->name, e);
    atomic_store(&p->last_turn_ns, pr__now_ns());
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

/* ---------------------------------------------------------------- the loop */

static uint64_t pr__total_inflight(pr_service *svc)
{
    uint64_t t = 0;
    for (size_t i = 0; i < svc->n_pipes; i++)
        t += atomic_load(&svc->pipes[i].inflight);
    return t;
}

static void pr__refresh_cache(pr__pipe *p, int64_t now_ns, bool force)
{
    pr_engine_stats est;
    pr_engine_get_stats(p->eng, &est);
    pthread_mutex_lock(&p->lock);
    p->est = est;
    for (uint32_t c = 0; c < p->cfg->spec.n_sparse; c++)
        p->vocab[c] = pr_engine_vocab_size(p->eng, c);
    bool any = false;
    size_t ns = pr_sinkset_count(p->sinks);
    if (ns > 4)
        ns = 4;
    for (size_t i = 0; i < ns; i++) {
        pr_sink *s = pr_sinkset_get(p->sinks, i);
        if (pr_sink_ready(s))
            any = true;
        p->sink_names[i] = pr_sink_name(s);
        pr_sink_get_stats(s, &p->sink_stats[i]);
    }
    p->n_sink_stats = ns;
    p->sinks_any_ready = any;
    if (force || now_ns - p->rate_t0_ns >= 1000000000LL) {
        pr_consumer_stats cs;
        pr_batcher_stats bs;
        pr_consumer_get_stats(p->cons, &cs);
        pr_batcher_get_stats(p->bat, &bs);
        double dt = (double)(now_ns - p->rate_t0_ns) / 1e9;
        if (p->rate_t0_ns && dt > 0) {
            p->rate_records = (double)(cs.records - p->rate_records0) / dt;
            p->rate_rows_out = (double)(bs.rows_out - p->rate_rows0) / dt;
            p->rate_batches = (double)(bs.batches_emitted - p->rate_batches0) / dt;
        }
        p->rate_t0_ns = now_ns;
        p->rate_records0 = cs.records;
        p->rate_rows0 = bs.rows_out;
        p->rate_batches0 = bs.batches_emitted;
    }
    pthread_mutex_unlock(&p->lock);
}

static void pr__store_safe_offsets(pr__pipe *p)
{
    /* Messages that bring no row (empty at a partition's tail, or a partition
     * with only empty messages) never reach the batcher: tell it how far the
     * consumer got, or their offsets would wait for the next row to commit.
     * Every row below consumed_next was added to the batcher already (same
     * thread, block processed before this), so rows in flight still hold. */
    pr_tp tps[256];
    pr__unproc_build(p);
    size_t n = pr_consumer_assignment(p->cons, tps, sizeof(tps) / sizeof(tps[0]));
    for (size_t i = 0; i < n && i < sizeof(tps) / sizeof(tps[0]); i++) {
        int64_t cn = pr_consumer_consumed_next(p->cons, tps[i].key);
        if (cn > 0)
            cn = pr__cap_unprocessed(p, tps[i].key, cn);
        if (cn > 0)
            pr_batcher_note_consumed(p->bat, tps[i].key, cn);
    }
    pr_batcher_safe_offsets(p->bat, pr__store_cb, p);
    p->unproc_valid = false;
    /* Recycled-index notices acknowledged with their batches need no
     * re-announcement after a restart (pr_engine_vocab_notices_delivered). */
    uint64_t floor = pr_batcher_notice_floor(p->bat);
    if (floor == UINT64_MAX)
        floor = pr_engine_vocab_recycled_total(p->eng) + 1;
    pr_vocab_store_commit(p->vs, floor);
}

static void pr__update_inflight(pr__pipe *p)
{
    /* Batches, plus what trainer connections buffer (bounded by the sink's
     * max_receive_buffer_bytes): both are memory a peer can make us hold. */
    uint64_t infl = pr_batcher_inflight_bytes(p->bat) + pr_sinkset_buffered_bytes(p->sinks);
    atomic_store(&p->inflight, infl);
    uint64_t peak = atomic_load(&p->inflight_peak);
    if (infl > peak)
        atomic_store(&p->inflight_peak, infl);
}

/* Pause every assigned partition over the limit, resume below half of it. */
static void pr__backpressure(pr__pipe *p)
{
    uint64_t limit = p->svc->cfg->limits.max_inflight_bytes;
    if (!limit)
        return;
    uint64_t total = pr__total_inflight(p->svc);
    if (!p->bp_paused && total > limit) {
        if (pr_consumer_pause(p->cons) == 0) {
            p->bp_paused = true;
            atomic_fetch_add(&p->pauses, 1);
            pr_debug("pipeline %s: paused (in flight %llu > %llu bytes)", p->cfg->name,
                     (unsigned long long)total, (unsigned long long)limit);
        }
    } else if (p->bp_paused && total < limit / 2) {
        if (pr_consumer_resume(p->cons) == 0) {
            p->bp_paused = false;
            pr_debug("pipeline %s: resumed (in flight %llu bytes)", p->cfg->name,
                     (unsigned long long)total);
        }
    }
}

/* Checkpoint delivery: rows a trainer's durable checkpoint already holds
 * (the resume position trainers send, docs/trainer-protocol.md) are neither
 * batched nor sent again; their offsets count as done, like an empty
 * message's. They come back after a crash that lost the commit of a
 * checkpoint that did become durable. */
static void pr__skip_checkpointed(pr__pipe *p, pr_block *b)
{
    if (!p->skip || p->skip_cap < b->rows) {
        uint8_t *n = realloc(p->skip, b->cap);
        if (!n)
            return; /* nothing skipped: at-least-once still holds */
        p->skip = n;
        p->skip_cap = b->cap;
    }
    const pr_pipeline_cfg *pc = p->cfg;
    uint32_t k = pr_sink_trainer_resume_filter(
        p->ckpt_sink, (const char *const *)pc->source.kafka.topics, pc->source.kafka.n_topics,
        b->partition, b->offset, b->rows, p->skip);
    if (!k)
        return;
    for (uint32_t r = 0; r < b->rows; r++)
        if (p->skip[r])
            pr_batcher_note_consumed(p->bat, b->partition[r], b->offset[r] + 1);
    pr__block_drop_revoked(p, b, p->skip);
    atomic_fetch_add(&p->ckpt_skipped, k);
}

/* A block the consumer filled, before it goes to the worker (pipeline
 * thread): rows of partitions revoked during the polls that filled it go. */
static void pr__block_prepare(pr__pipe *p, pr_block *b)
{
    if (p->n_revoked || p->revoked_overflow) {
        pr__block_drop_revoked(p, b, NULL);
        p->ahead_rows = 0; /* rows moved: proposing some twice is harmless */
    }
    p->n_revoked = 0;
    p->revoked_overflow = false;
}

/* Engine + batcher for one block (the worker, or the pipeline thread when
 * engine.overlap is off). With a shared vocabulary PR_EAGAIN while the
 * block's new values wait for the log (each call waits a few ms): run it
 * again. Dead letters are left to pr__worker_collect (pipeline thread). */
static int pr__block_run(pr__pipe *p, pr_block *b, pr_out *o)
{
    char e[512] = "";
    int rc;
    if (p->ckpt_sink && !p->w_skip_done) {
        p->w_skip_done = true;
        if (b->rows)
            pr__skip_checkpointed(p, b);
    }
    if (b->rows == 0)
        return 0;
    rc = pr_vocab_store_resolve(p->vs, b, PR__VLOG_WAIT_MS, e, sizeof(e));
    if (rc == PR_EAGAIN)
        return rc;
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof(msg), "vocab log: %s (%s)", e, pr_strerror(rc));
        pr__set_fatal(p, rc, msg);
        return rc;
    }
    rc = pr_engine_process(p->eng, b, o, e, sizeof(e));
    if (rc) {
        char msg[600];
        snprintf(msg, sizeof(msg), "engine: %s (%s)", e, pr_strerror(rc));
        pr__set_fatal(p, rc, msg);
        return rc;
    }
    /* Hot sets first, so that batch.split popular classifies each row
     * against sets that have seen its block (pr_hot.h). */
    uint64_t *popular = NULL;
    if (p->hot) {
        pthread_mutex_lock(&p->hot_lock);
        for (uint32_t c = 0; c < o->n_sparse; c++)
            pr_hot_observe_out(p->hot[c], o, c);
        /* Checkpoint delivery needs exact offset ranges per batch, which two
         * interleaved streams cannot give: it keeps one stream. */
        if (p->cfg->batch.split == PR_BATCH_SPLIT_POPULAR && !p->ckpt_sink)
            popular = pr_hot_popular_rows(p->hot, o); /* NULL: none popular */
        pthread_mutex_unlock(&p->hot_lock);
    }
    rc = pr_batcher_add_split(p->bat, b, o, popular);
    free(popular);
    if (rc) {
        pr__set_fatal(p, rc, "batcher refused rows");
        return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- the worker
 *
 * One block at a time goes from the pipeline thread (which owns the
 * consumer, its dead-letter producer and every offset decision) to the
 * worker (engine, batcher, sinks' send path) and back; the pipeline thread
 * touches the engine, the batcher and the sinks only while the worker is
 * not running (its duties, the rebalance callbacks after pr__worker_join).
 * So the order of blocks, and with it every result, is that of one thread;
 * the overlap is reading and decoding the next block meanwhile. */

static void *pr__worker_main(void *arg)
{
    pr__pipe *p = arg;
    char tname[16];
    snprintf(tname, sizeof(tname), "pr:%.9s-w", p->cfg->name);
    pthread_setname_np(pthread_self(), tname);
    pthread_mutex_lock(&p->wlock);
    for (;;) {
        while (p->wstate != PR__W_RUNNING && !p->wquit)
            pthread_cond_wait(&p->wcond, &p->wlock);
        if (p->wquit)
            break;
        pthread_mutex_unlock(&p->wlock);
        int rc = pr__block_run(p, p->wblk, p->wout);
        pthread_mutex_lock(&p->wlock);
        p->wrc = rc;
        p->wstate = PR__W_DONE;
        pthread_cond_broadcast(&p->wcond);
    }
    pthread_mutex_unlock(&p->wlock);
    return NULL;
}

static int pr__wstate(pr__pipe *p)
{
    pthread_mutex_lock(&p->wlock);
    int st = p->wstate;
    pthread_mutex_unlock(&p->wlock);
    return st;
}

/* A finished run, on the pipeline thread: dead letters of its engine
 * rejects and late rows, then the block is free again (or held, when it
 * waits for the vocab log; or kept, rows and all, after a fatal error so
 * that its offsets are never stored). Returns the worker's state after
 * that: IDLE, HELD or RUNNING, never DONE. The caller must act on this
 * value, not on a second look at wstate: a run that ends between the two
 * would read DONE, and treating DONE as "not running" swapped in the
 * finished block before it was reset, so its rows ran twice. */
static int pr__worker_collect(pr__pipe *p)
{
    pthread_mutex_lock(&p->wlock);
    if (p->wstate != PR__W_DONE) {
        int st = p->wstate;
        pthread_mutex_unlock(&p->wlock);
        return st;
    }
    int rc = p->wrc;
    int st = rc == PR_EAGAIN ? PR__W_HELD : PR__W_IDLE;
    p->wstate = st;
    pthread_mutex_unlock(&p->wlock);
    if (rc == PR_EAGAIN)
        return st;
    if (p->n_late)
        pr__send_late(p);
    if (rc)
        return st;
    if (p->wout->n_rejected && p->wblk->rows)
        pr__dead_letter_engine_rejects(p, p->wblk, p->wout);
    pr_block_reset(p->wblk);
    p->wout->n_rejected = 0;
    return st;
}

/* Hand wblk to the worker (or run it here when engine.overlap is off). */
static void pr__worker_dispatch(pr__pipe *p)
{
    if (!p->wthread_started) {
        p->wrc = pr__block_run(p, p->wblk, p->wout);
        p->wstate = PR__W_DONE;
        pr__worker_collect(p);
        return;
    }
    pthread_mutex_lock(&p->wlock);
    p->wstate = PR__W_RUNNING;
    pthread_cond_broadcast(&p->wcond);
    pthread_mutex_unlock(&p->wlock);
}

/* Wait until the worker is not running, up to timeout_ms (< 0: for good),
 * and collect what it finished. */
static void pr__worker_wait(pr__pipe *p, int timeout_ms)
{
    pthread_mutex_lock(&p->wlock);
    if (timeout_ms < 0) {
        while (p->wstate == PR__W_RUNNING)
            pthread_cond_wait(&p->wcond, &p->wlock);
    } else if (p->wstate == PR__W_RUNNING) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)timeout_ms * 1000000L;
        ts.tv_sec += ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&p->wcond, &p->wlock, &ts);
    }
    pthread_mutex_unlock(&p->wlock);
    pr__worker_collect(p);
}

static void pr__worker_join(pr__pipe *p)
{
    pr__worker_wait(p, -1);
}

/* Swap the filled block in as the worker's and start it. */
static void pr__worker_start_block(pr__pipe *p)
{
    pr_block *t = p->wblk;
    p->wblk = p->blk;
    p->blk = t;
    p->ahead_rows = 0;
    p->w_skip_done = false;
    pr__worker_dispatch(p);
}

static void pr__drain(pr__pipe *p)
{
    pr_service *svc = p->svc;
    /* Stop fetching; what is in the block still goes out. */
    pr_consumer_pause(p->cons);
    int64_t deadline = pr__now_ns() + svc->opts.drain_timeout_ms * 1000000LL;
    /* The worker's block, then the one read meanwhile (rows may have been
     * read while the worker's block waited for the vocab log); a block
     * waiting for the vocab log gets until the drain deadline. */
    for (;;) {
        pr__worker_join(p);
        while (pr__wstate(p) == PR__W_HELD && pr__now_ns() < deadline && !atomic_load(&p->fatal)) {
            atomic_store(&p->last_turn_ns, pr__now_ns());
            pr__worker_dispatch(p);
            pr__worker_join(p);
        }
        if (atomic_load(&p->fatal) || pr__wstate(p) != PR__W_IDLE ||
            !(p->blk->rows || p->n_revoked))
            break;
        pr__block_prepare(p, p->blk);
        if (!p->blk->rows)
            break;
        pr__worker_start_block(p);
    }
    if (pr__wstate(p) == PR__W_HELD) {
        /* Its rows stay in the block, which holds their offsets back (as
         * do the rows read after it): they are read again after the
         * restart. */
        pr_vocab_store_abandon(p->vs);
        pr_warn("pipeline %s: %u row(s) still wait for the vocab log at shutdown (and %u "
                "read after them); they will be read again after restart",
                p->cfg->name, p->wblk->rows, p->blk->rows);
    }
    pr_batcher_flush(p->bat);
    /* Dead letters hold their offsets: let them land before the final commit. */
    if (pr_dlq_flush(pr_consumer_dlq(p->cons), (int)svc->opts.drain_timeout_ms))
        pr_warn("pipeline %s: dead letters still pending at shutdown; their offsets stay "
                "uncommitted (read again after restart)",
                p->cfg->name);
    while (pr_batcher_unacked_batches(p->bat) > 0 && pr__now_ns() < deadline) {
        pr_sinkset_poll(p->sinks, pr__ack_cb, p);
        pr__store_safe_offsets(p);
        atomic_store(&p->last_turn_ns, pr__now_ns());
        if (pr_batcher_unacked_batches(p->bat) > 0)
            pr__sleep_ms(PR__ACK_POLL_MS);
    }
    pr_sinkset_poll(p->sinks, pr__ack_cb, p);
    pr__store_safe_offsets(p);
    uint64_t left = pr_batcher_unacked_batches(p->bat);
    p->drain_rc = left ? PR_ETIMEDOUT : 0;
    if (left)
        pr_warn("pipeline %s: %llu batch(es) not acknowledged at shutdown; their records "
                "will be delivered again after restart",
                p->cfg->name, (unsigned long long)left);
    char e[512] = "";
    if (pr_consumer_commit(p->cons, e, sizeof(e)))
        pr_warn("pipeline %s: final commit: %s", p->cfg->name, e);
    else
        atomic_fetch_add(&p->commits, 1);
    pr__checkpoint(p);
    pr__update_inflight(p);
    pr__refresh_cache(p, pr__now_ns(), true);
    if (pr_consumer_close(p->cons, e, sizeof(e)))
        pr_warn("pipeline %s: leaving the group: %s", p->cfg->name, e);
    p->drained = true;
}

static void *pr__pipe_main(void *arg)
{
    pr__pipe *p = arg;
    pr_service *svc = p->svc;
    char e[512];
    int64_t last_store_ns = 0;
    char tname[16];
    snprintf(tname, sizeof(tname), "pr:%.12s", p->cfg->name);
    pthread_setname_np(pthread_self(), tname);
    /* engine.overlap: a worker runs engine + batcher while this thread reads. */
    if (svc->cfg->engine.overlap && pthread_create(&p->wthread, NULL, pr__worker_main, p) == 0)
        p->wthread_started = true;
    while (!svc->stop_requested && !atomic_load(&p->fatal)) {
        int64_t now = pr__now_ns();
        atomic_store(&p->last_turn_ns, now);
        atomic_fetch_add(&p->loop_turns, 1);

        /* Checkpoint delivery: read nothing until a trainer has said where
         * its checkpoint stands, or batches would be cut from rows it holds
         * (a batch cannot be trimmed once cut). */
        if (p->ckpt_sink && !pr_sink_trainer_resume_known(p->ckpt_sink)) {
            pr__sleep_ms(20);
            pr__refresh_cache(p, now, false);
            continue;
        }

        /* The worker's finished block: dead letters, block free again. */
        int ws = pr__worker_collect(p);
        if (atomic_load(&p->fatal))
            break;
        e[0] = '\0';
        if (ws != PR__W_RUNNING) {
            /* Duties: engine, batcher and sinks are free now. */
            if (ws == PR__W_IDLE) {
                /* Learn the other replicas' values between blocks. */
                int rc = pr_vocab_store_poll(p->vs, 0, e, sizeof(e));
                if (rc) {
                    char msg[600];
                    snprintf(msg, sizeof(msg), "vocab log: %s", e);
                    pr__set_fatal(p, rc, msg);
                    break;
                }
            }
            if (pr_sinkset_poll(p->sinks, pr__ack_cb, p) > 0 || now - last_store_ns > 100000000LL) {
                pr__store_safe_offsets(p);
                last_store_ns = now;
            }
            pr_batcher_poll(p->bat);
            pr__update_inflight(p);
            pr__backpressure(p);
            if (pr_vocab_store_persistent(p->vs) && now >= p->next_ckpt_ns)
                pr__checkpoint(p);
            pr__refresh_cache(p, now, false);
            /* Next run: the held block again, or the block the polls filled. */
            if (ws == PR__W_HELD) {
                /* While it waits, the next block's new values can go to the
                 * log already (the engine is idle between runs). */
                if (p->blk->rows > p->ahead_rows) {
                    int rc =
                        pr_vocab_store_propose_ahead(p->vs, p->blk, p->ahead_rows, e, sizeof(e));
                    if (rc) {
                        char msg[600];
                        snprintf(msg, sizeof(msg), "vocab log: %s", e);
                        pr__set_fatal(p, rc, msg);
                        break;
                    }
                    p->ahead_rows = p->blk->rows;
                }
                pr__worker_dispatch(p);
            } else if (p->blk->rows > 0 || p->n_revoked) {
                pr__block_prepare(p, p->blk);
                if (p->blk->rows > 0)
                    pr__worker_start_block(p);
            }
            if (atomic_load(&p->fatal))
                break;
            ws = pr__worker_collect(p); /* a run may have ended already */
        }

        if (ws == PR__W_RUNNING && p->blk->rows == p->blk->cap) {
            /* Nothing to read into: wait for the worker. (While its block
             * waits for the vocab log, reading goes on: a revoke then drops
             * the waiting block's rows of those partitions too.) */
            int64_t t0 = pr__now_ns();
            pr__worker_wait(p, PR__ACK_POLL_MS);
            atomic_fetch_add(&p->worker_wait_ns, (uint64_t)(pr__now_ns() - t0));
            continue;
        }
        if (ws == PR__W_HELD) {
            /* engine.overlap off: the block still waits for the vocab log
             * (each run above waited a few ms); duties, then again. */
            continue;
        }
        /* Read: briefly while the worker runs (its end is the next event),
         * else until the next batch deadline or ack poll. */
        int64_t wait = svc->opts.max_poll_wait_ms;
        if (ws == PR__W_RUNNING) {
            wait = 1;
        } else {
            int64_t due = pr_batcher_poll(p->bat);
            if (due >= 0 && due < wait)
                wait = due;
            if (pr_batcher_unacked_batches(p->bat) > 0 && wait > PR__ACK_POLL_MS)
                wait = PR__ACK_POLL_MS;
        }
        int64_t t_poll = pr__now_ns();
        int n = pr_consumer_poll(p->cons, p->blk, (int)wait, e, sizeof(e));
        atomic_fetch_add(n > 0 ? &p->poll_rows_ns : &p->poll_empty_ns,
                         (uint64_t)(pr__now_ns() - t_poll));
        if (n < 0) {
            char msg[600];
            snprintf(msg, sizeof(msg), "consumer: %s", e);
            pr__set_fatal(p, n, msg);
            break;
        }
    }
    pr__drain(p);
    if (p->wthread_started) {
        pthread_mutex_lock(&p->wlock);
        p->wquit = true;
        pthread_cond_broadcast(&p->wcond);
        pthread_mutex_unlock(&p->wlock);
        pthread_join(p->wthread, NULL);
        p->wthread_started = false;
    }
    atomic_store(&p->done, true);
    return NULL;
}

/* ---------------------------------------------------------------- HTTP handlers */

static int pr__h_metrics(void *opaque, pr_mbuf *body, const char **ctype)
{
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    pr_service_render_metrics(opaque, body);
    return 200;
}

static int pr__h_healthz(void *opaque, pr_mbuf *body, const char **ctype)
{
    (void)ctype;
    char why[256];
    if (pr_service_healthy(opaque, why, sizeof(why))) {
        pr_mbuf_puts(body, "ok\n");
        return 200;
    }
    pr_mbuf_printf(body, "unhealthy: %s\n", why);
    return 503;
}

static int pr__h_readyz(void *opaque, pr_mbuf *body, const char **ctype)
{
    (void)ctype;
    char why[256];
    if (pr_service_ready(opaque, why, sizeof(why))) {
        pr_mbuf_puts(body, "ready\n");
        return 200;
    }
    pr_mbuf_printf(body, "not ready: %s\n", why);
    return 503;
}

static int pr__h_status(void *opaque, pr_mbuf *body, const char **ctype)
{
    *ctype = "application/json";
    pr_service_render_status(opaque, body);
    return 200;
}

/* GET /v1/hot?pipeline=P&column=C&k=K: the column's top k (default 10) from
 * its hot-set sketch. Unknown pipeline or column, or hot sets off: 404; a
 * missing parameter or k outside 1..hot.top_k: 400; errors are JSON. */
static int pr__h_hot(void *opaque, const pr__http_query *q, pr_mbuf *body, const char **ctype)
{
    pr_service *svc = opaque;
    *ctype = "application/json";
    const char *pn = pr__http_query_get(q, "pipeline");
    const char *cn = pr__http_query_get(q, "column");
    const char *ks = pr__http_query_get(q, "k");
    uint32_t top_k = svc->cfg->hot.top_k;
    char msg[300];
    int status = 400;
    if (!pn || !cn) {
        snprintf(msg, sizeof(msg), "pipeline and column are required (?pipeline=P&column=C&k=K)");
        goto out_error;
    }
    pr__pipe *p = NULL;
    for (size_t i = 0; i < svc->n_pipes && !p; i++)
        if (!strcmp(svc->pipes[i].cfg->name, pn))
            p = &svc->pipes[i];
    status = 404;
    if (!p) {
        snprintf(msg, sizeof(msg), "unknown pipeline '%.100s'", pn);
        goto out_error;
    }
    const pr_pipeline_spec *spec = &p->cfg->spec;
    uint32_t col = spec->n_sparse;
    for (uint32_t c = 0; c < spec->n_sparse && col == spec->n_sparse; c++)
        if (!strcmp(spec->sparse[c].name, cn))
            col = c;
    if (col == spec->n_sparse) {
        snprintf(msg, sizeof(msg), "pipeline '%.100s' has no sparse column '%.100s'", pn, cn);
        goto out_error;
    }
    if (!p->hot) {
        snprintf(msg, sizeof(msg), "hot sets are off (hot.top_k: 0)");
        goto out_error;
    }
    status = 400;
    unsigned long k = 10;
    if (ks) {
        char *end;
        errno = 0;
        k = strtoul(ks, &end, 10);
        if (errno || end == ks || *end || ks[0] == '-' || k < 1 || k > top_k) {
            snprintf(msg, sizeof(msg), "k must be an integer in 1..%u (hot.top_k), got '%.40s'",
                     top_k, ks);
            goto out_error;
        }
    } else if (k > top_k) {
        k = top_k;
    }
    pr_hot_item *items = malloc(k * sizeof(*items));
    if (!items) {
        body->err = PR_ENOMEM;
        return 500;
    }
    double coverage;
    pthread_mutex_lock(&p->hot_lock);
    uint64_t rows = pr_hot_rows_observed(p->hot[col]);
    size_t n = pr_hot_top(p->hot[col], k, items, &coverage);
    pthread_mutex_unlock(&p->hot_lock);
    pr_mbuf_puts(body, "{\"pipeline\":");
    pr_mbuf_json_str(body, p->cfg->name);
    pr_mbuf_puts(body, ",\"column\":");
    pr_mbuf_json_str(body, spec->sparse[col].name);
    pr_mbuf_printf(body, ",\"k\":%lu,\"rows_observed\":%llu,\"items\":[", k,
                   (unsigned long long)rows);
    for (size_t i = 0; i < n; i++)
        pr_mbuf_printf(body, "%s{\"index\":%lld,\"share\":%.6g}", i ? "," : "",
                       (long long)items[i].index, items[i].share);
    pr_mbuf_printf(body, "],\"coverage\":%.6g}\n", coverage);
    free(items);
    return 200;

out_error:
    pr_mbuf_puts(body, "{\"error\":");
    pr_mbuf_json_str(body, msg);
    pr_mbuf_puts(body, "}\n");
    return status;
}

/* ---------------------------------------------------------------- lifecycle */

int pr_service_start(pr_service *svc, char *errstr, size_t errstr_size)
{
    if (svc->started)
        return pr_seterr(errstr, errstr_size, PR_ESTATE, "service already started");
    if (svc->cfg->http.enabled && !svc->opts.no_http) {
        const pr__http_route routes[] = {
            {"/metrics", pr__h_metrics, svc, NULL}, {"/healthz", pr__h_healthz, svc, NULL},
            {"/readyz", pr__h_readyz, svc, NULL},   {"/v1/status", pr__h_status, svc, NULL},
            {"/v1/hot", NULL, svc, pr__h_hot},
        };
        const pr_http_tls_cfg *ht = &svc->cfg->http.tls;
        const pr__http_tls tls = {ht->cert_file, ht->key_file, ht->ca_file};
        int rc =
            pr__http_start_tls(svc->cfg->http.listen, ht->enabled ? &tls : NULL, routes,
                               sizeof(routes) / sizeof(routes[0]), &svc->http, errstr, errstr_size);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        atomic_store(&p->last_turn_ns, pr__now_ns());
        pr__refresh_cache(p, pr__now_ns(), true);
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

int pr_service_pipeline_stats(pr_service *svc, size_t i, pr_pipeline_stats *st)
{
    if (i >= svc->n_pipes)
        return PR_EINVAL;
    pr__pipe *p = &svc->pipes[i];
    memset(st, 0, sizeof(*st));
    snprintf(st->name, sizeof(st->name), "%s", p->cfg->name);
    st->backend = pr_engine_backend_name(p->eng);
    pr_consumer_stats cs;
    pr_batcher_stats bs;
    pr_consumer_get_stats(p->cons, &cs);
    pr_batcher_get_stats(p->bat, &bs);
    st->records_in = cs.records;
    st->messages_in = cs.messages;
    st->bytes_in = cs.bytes;
    st->rejected = cs.rejected_records;
    for (int r = 0; r < PR_REJECT__ENGINE_COUNT; r++)
        st->rejected += atomic_load(&p->engine_rejects[r]);
    st->rows_out = bs.rows_out;
    st->batches_emitted = bs.batches_emitted;
    st->batches_acked = bs.batches_acked;
    st->inflight_bytes = atomic_load(&p->inflight);
    st->inflight_peak_bytes = atomic_load(&p->inflight_peak);
    st->assigned_partitions = cs.assigned_partitions;
    st->paused_partitions = cs.paused_partitions;
    st->pauses = atomic_load(&p->pauses);
    st->loop_turns = atomic_load(&p->loop_turns);
    st->poll_empty_ns = atomic_load(&p->poll_empty_ns);
    st->poll_rows_ns = atomic_load(&p->poll_rows_ns);
    st->worker_wait_ns = atomic_load(&p->worker_wait_ns);
    pr_partition_lag *lags = calloc(PR__MAX_PARTS, sizeof(*lags));
    size_t nl = lags ? pr_consumer_lag(p->cons, lags, PR__MAX_PARTS) : 0;
    st->lag = nl ? 0 : -1;
    for (size_t k = 0; k < nl && k < PR__MAX_PARTS; k++) {
        int64_t l = (lags[k].high_watermark >= 0 && lags[k].position >= 0)
                        ? lags[k].high_watermark - lags[k].position
                        : -1;
        if (l < 0) {
            st->lag = -1;
            break;
        }
        st->lag += l;
    }
    free(lags);
    pthread_mutex_lock(&p->lock);
    for (uint32_t c = 0; c < p->cfg->spec.n_sparse; c++)
        st->vocab_size_total += p->vocab[c];
    pthread_mutex_unlock(&p->lock);
    st->fresh_emit = bs.event_to_emit_s;
    st->fresh_ack = bs.emit_to_ack_s;
    return 0;
}

bool pr_service_healthy(pr_service *svc, char *why, size_t why_size)
{
    int64_t now = pr__now_ns();
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        if (atomic_load(&p->fatal)) {
            snprintf(why, why_size, "pipeline %s failed: %s", p->cfg->name, p->fatal_msg);
            return false;
        }
        if (atomic_load(&p->done))
            continue; /* stopped on request: not a health problem */
        int64_t age_ms = (now - atomic_load(&p->last_turn_ns)) / 1000000;
        if (age_ms > svc->opts.health_stall_ms) {
            snprintf(why, why_size, "pipeline %s loop stalled for %lld ms", p->cfg->name,
                     (long long)age_ms);
            return false;
        }
    }
    snprintf(why, why_size, "ok");
    return true;
}

bool pr_service_ready(pr_service *svc, char *why, size_t why_size)
{
    if (svc->stop_requested) {
        snprintf(why, why_size, "shutting down");
        return false;
    }
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        if (atomic_load(&p->fatal)) {
            snprintf(why, why_size, "pipeline %s failed", p->cfg->name);
            return false;
        }
        pr_consumer_stats cs;
        pr_consumer_get_stats(p->cons, &cs);
        if (cs.assigned_partitions == 0) {
            snprintf(why, why_size, "pipeline %s has no partitions assigned", p->cfg->name);
            return false;
        }
        pthread_mutex_lock(&p->lock);
        bool ok = p->sinks_any_ready;
        pthread_mutex_unlock(&p->lock);
        if (!ok) {
            snprintf(why, why_size, "pipeline %s has no sink able to accept batches", p->cfg->name);
            return false;
        }
    }
    snprintf(why, why_size, "ok");
    return true;
}

/* ---------------------------------------------------------------- /metrics */

static const char *const pr__reason_labels[PR_BATCH__REASONS] = {
    [PR_BATCH_FULL] = "full",
    [PR_BATCH_DEADLINE] = "deadline",
    [PR_BATCH_FLUSH] = "flush",
};

/* Engine reject reasons map onto the decoder's reason names, so one
 * `reason` label covers both stages. */
static const char *pr__engine_reject_name(int r)
{
    switch (r) {
    case PR_REJECT_BAD_HEX:
        return pr_decode_reason_name(PR_DEC_BAD_HEX);
    default:
        return "engine";
    }
}

/* What each pipeline contributes, gathered once per scrape. */
typedef struct pr__scrape {
    pr__pipe *p;
    int64_t now_ns; /* scrape time, the same for every pipeline */
    pr_consumer_stats cs;
    pr_batcher_stats bs;
    pr_engine_stats est;
    uint64_t vocab[PR_MAX_SPARSE];
    size_t n_sinks;
    const char *sink_names[4];
    pr_sink_stats ss[4];
    pr_partition_lag *lags;
    size_t n_lags;
    pr_dlq_stats dq;
    bool has_dlq;
    pr_vocablog_stats vls;
    bool has_vlog;
} pr__scrape;

/* Take one consistent read of pipeline p's stats. Lags stay empty when their
 * array cannot be allocated (the lag families then have no sample). */
static void pr__scrape_pipe(pr__pipe *p, pr__scrape *s)
{
    s->p = p;
    pr_consumer_get_stats(p->cons, &s->cs);
    pr_batcher_get_stats(p->bat, &s->bs);
    pthread_mutex_lock(&p->lock);
    s->est = p->est;
    memcpy(s->vocab, p->vocab, sizeof(s->vocab));
    s->n_sinks = p->n_sink_stats;
    memcpy(s->sink_names, p->sink_names, sizeof(s->sink_names));
    memcpy(s->ss, p->sink_stats, sizeof(s->ss));
    pthread_mutex_unlock(&p->lock);
    s->lags = calloc(PR__MAX_PARTS, sizeof(pr_partition_lag));
    if (s->lags)
        s->n_lags = pr_consumer_lag(p->cons, s->lags, PR__MAX_PARTS);
    if (s->n_lags > PR__MAX_PARTS)
        s->n_lags = PR__MAX_PARTS;
    pr_dlq *d = pr_consumer_dlq(p->cons);
    if (d) {
        pr_dlq_get_stats(d, &s->dq);
        s->has_dlq = true;
    }
    s->has_vlog = pr_vocab_store_log_stats(p->vs, &s->vls);
}

/*
 * The /metrics page as a table of families, rendered in table order (the
 * order docs/operations.md lists them in). Each family is announced once
 * (HELP, TYPE), then:
 *   - `proc` set: one process-wide sample set, written by proc;
 *   - `emit` set: emit writes that pipeline's samples (labels, histograms,
 *     one sample per partition, reason, operator, column or sink);
 *   - neither: one sample per pipeline, {pipeline="..."}, whose value is the
 *     integer at `off` in the struct `src` names, divided by `div` when set.
 * `labels` names the family's labels in order; emitters take their label
 * names from it, so the table is the one place they are spelled.
 */
typedef enum pr__src {
    PR__SRC_CONSUMER,     /* uint64_t in pr_consumer_stats */
    PR__SRC_CONSUMER_U32, /* uint32_t in pr_consumer_stats */
    PR__SRC_BATCHER,      /* uint64_t in pr_batcher_stats */
    PR__SRC_ENGINE,       /* uint64_t in pr_engine_stats */
    PR__SRC_PIPE,         /* _Atomic uint64_t in pr__pipe, read at render time */
} pr__src;

typedef struct pr__family pr__family;

struct pr__family {
    const char *name;
    pr__metric_type type;
    const char *help;
    const char *labels[3];
    pr__src src;
    size_t off; /* value, histogram or per-operator array offset in src */
    double div; /* 0: value as is */
    int arg;    /* emitter-specific: lag kind; vocab 1 = capacity */
    void (*emit)(pr_mbuf *mb, const pr__family *f, const pr__scrape *s);
    void (*proc)(pr_mbuf *mb, const pr__family *f, const pr_service *svc);
};

static const char *pr__pipe_name(const pr__scrape *s)
{
    return s->p->cfg->name;
}

static double pr__scaled(const pr__family *f, double v)
{
    return f->div != 0 ? v / f->div : v;
}

/* The default emitter: one {pipeline} sample read from src + off. */
static void pr__emit_value(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    double v;
    switch (f->src) {
    case PR__SRC_CONSUMER:
        v = (double)*(const uint64_t *)((const char *)&s->cs + f->off);
        break;
    case PR__SRC_CONSUMER_U32:
        v = *(const uint32_t *)((const char *)&s->cs + f->off);
        break;
    case PR__SRC_BATCHER:
        v = (double)*(const uint64_t *)((const char *)&s->bs + f->off);
        break;
    case PR__SRC_ENGINE:
        v = (double)*(const uint64_t *)((const char *)&s->est + f->off);
        break;
    default:
        v = (double)atomic_load((_Atomic uint64_t *)((char *)s->p + f->off));
        break;
    }
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
    pr__metric_sample(mb, f->name, l, 1, pr__scaled(f, v));
}

static void pr__proc_build_info(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    (void)svc;
    pr_label l[] = {{f->labels[0], PR_VERSION}};
    pr__metric_sample(mb, f->name, l, 1, 1);
}

static void pr__proc_start_time(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    pr__metric_sample(mb, f->name, NULL, 0, (double)svc->start_wall_ms / 1000.0);
}

static void pr__proc_inflight_limit(pr_mbuf *mb, const pr__family *f, const pr_service *svc)
{
    pr__metric_sample(mb, f->name, NULL, 0, (double)svc->cfg->limits.max_inflight_bytes);
}

static void pr__emit_backend(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)},
                    {f->labels[1], pr_engine_backend_name(s->p->eng)}};
    pr__metric_sample(mb, f->name, l, 2, 1);
}

static void pr__emit_up(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    bool up = !atomic_load(&s->p->fatal) && !atomic_load(&s->p->done);
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
    pr__metric_sample(mb, f->name, l, 1, up ? 1 : 0);
}

static void pr__emit_loop_age(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
    pr__metric_sample(mb, f->name, l, 1,
                      (double)(s->now_ns - atomic_load(&s->p->last_turn_ns)) / 1e9);
}

enum { PR__LAG_COMMITTED, PR__LAG_POSITION, PR__LAG_HIGH_WATERMARK, PR__LAG_COMMITTED_OFFSET };

/* One sample per partition; a value not known yet (-1) has no sample rather
 * than a fake number. */
static void pr__emit_lag(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    for (size_t k = 0; k < s->n_lags; k++) {
        const pr_partition_lag *L = &s->lags[k];
        int64_t v;
        switch (f->arg) {
        case PR__LAG_COMMITTED:
            v = (L->high_watermark >= 0 && L->committed >= 0) ? L->high_watermark - L->committed
                                                              : -1;
            break;
        case PR__LAG_POSITION:
            v = (L->high_watermark >= 0 && L->position >= 0) ? L->high_watermark - L->position : -1;
            break;
        case PR__LAG_HIGH_WATERMARK:
            v = L->high_watermark;
            break;
        default:
            v = L->committed;
            break;
        }
        if (v < 0)
            continue;
        char part[16];
        snprintf(part, sizeof(part), "%d", L->tp.partition);
        pr_label l[] = {
            {f->labels[0], pr__pipe_name(s)}, {f->labels[1], L->tp.topic}, {f->labels[2], part}};
        pr__metric_sample(mb, f->name, l, 3, (double)v);
    }
}

/* A killed predecessor's group member, by what became of it. */
static void pr__emit_stale_members(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    static const char *const names[PR_STALE__COUNT] = {
        [PR_STALE_DROPPED] = "dropped", [PR_STALE_GONE] = "gone", [PR_STALE_FAILED] = "failed"};
    for (int r = 0; r < PR_STALE__COUNT; r++) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], names[r]}};
        pr__metric_sample(mb, f->name, l, 2, (double)s->cs.stale_members[r]);
    }
}

/* Decoder reasons and engine reasons under one `reason` label (merged by
 * name), then the batcher's late drops. */
static void pr__emit_rejects(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    uint64_t eng[PR_DEC__COUNT] = {0};
    uint64_t eng_other = 0;
    for (int r = 1; r < PR_REJECT__ENGINE_COUNT; r++) {
        uint64_t v = atomic_load(&s->p->engine_rejects[r]);
        if (r == PR_REJECT_BAD_HEX)
            eng[PR_DEC_BAD_HEX] += v;
        else
            eng_other += v;
    }
    for (int r = 1; r < PR_DEC__COUNT; r++) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], pr_decode_reason_name(r)}};
        pr__metric_sample(mb, f->name, l, 2, (double)(s->cs.rejects[r] + eng[r]));
    }
    if (eng_other) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)},
                        {f->labels[1], pr__engine_reject_name(-1)}};
        pr__metric_sample(mb, f->name, l, 2, (double)eng_other);
    }
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], "late_dropped"}};
    pr__metric_sample(mb, f->name, l, 2, (double)s->bs.rows_late_dropped);
}

static void pr__emit_dead_letters(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    if (!s->has_dlq)
        return;
    pr_label l1[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], "sent"}};
    pr__metric_sample(mb, f->name, l1, 2, (double)s->dq.sent);
    pr_label l2[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], "failed"}};
    pr__metric_sample(mb, f->name, l2, 2, (double)s->dq.failed);
    pr_label l3[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], "file"}};
    pr__metric_sample(mb, f->name, l3, 2, (double)s->dq.to_file);
}

static void pr__emit_dead_letters_pending(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    if (!s->has_dlq)
        return;
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
    pr__metric_sample(mb, f->name, l, 1, (double)s->dq.pending);
}

/* One sample per partition that was ever reset (a counter that never moved
 * has no sample: the family stays small). */
static void pr__emit_offset_resets(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    pr_tp tps[64];
    uint64_t counts[64];
    size_t n = pr_consumer_offset_resets(s->p->cons, tps, counts, 64);
    for (size_t k = 0; k < n && k < 64; k++) {
        char part[16];
        snprintf(part, sizeof(part), "%d", tps[k].partition);
        pr_label l[] = {
            {f->labels[0], pr__pipe_name(s)}, {f->labels[1], tps[k].topic}, {f->labels[2], part}};
        pr__metric_sample(mb, f->name, l, 3, (double)counts[k]);
    }
}

static void pr__emit_batch_reasons(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    for (int r = 0; r < PR_BATCH__REASONS; r++) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], pr__reason_labels[r]}};
        pr__metric_sample(mb, f->name, l, 2, (double)s->bs.batches_by_reason[r]);
    }
}

/* A pr_hist_snapshot at `off` in the batcher stats. */
static void pr__emit_hist(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    const pr_hist_snapshot *h = (const pr_hist_snapshot *)((const char *)&s->bs + f->off);
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
    pr__metric_histogram(mb, f->name, l, 1, h);
}

/* A column's vocabulary capacity by the rule pr_engine.h documents for
 * pr_sparse_col_spec.capacity: the configured one, else modulus (+2 reserved
 * indices under the default profile) when the column is bounded, else
 * INT32_MAX. */
static uint64_t pr__vocab_capacity(const pr_pipeline_spec *spec, uint32_t c)
{
    const pr_sparse_col_spec *col = &spec->sparse[c];
    if (col->capacity)
        return col->capacity;
    if (pr_spec_has_op(spec, PR_OP_MODULUS) && col->modulus) {
        uint64_t extra = spec->profile == PR_VOCAB_DEFAULT ? 2 : 0;
        return col->modulus > UINT64_MAX - extra ? UINT64_MAX : col->modulus + extra;
    }
    return INT32_MAX;
}

/* One sample per sparse column, when the pipeline has a vocab operator. */
static void pr__emit_vocab(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    const pr_pipeline_spec *spec = &s->p->cfg->spec;
    if (!pr_spec_has_op(spec, PR_OP_VOCAB))
        return;
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], spec->sparse[c].name}};
        /* arg 1: the column's capacity instead of its size (alerts use the ratio). */
        double v = f->arg ? (double)pr__vocab_capacity(spec, c) : (double)s->vocab[c];
        pr__metric_sample(mb, f->name, l, 2, v);
    }
}

/* One sample per operator the pipeline uses, from the uint64_t[PR_OP__COUNT]
 * array at `off` in the engine stats. */
static void pr__emit_per_operator(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    const uint64_t *v = (const uint64_t *)((const char *)&s->est + f->off);
    for (int op = 0; op < PR_OP__COUNT; op++) {
        if (!pr_spec_has_op(&s->p->cfg->spec, (pr_op)op))
            continue;
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], pr_op_name((pr_op)op)}};
        pr__metric_sample(mb, f->name, l, 2, pr__scaled(f, (double)v[op]));
    }
}

/* One sample per sink, from the uint64_t at `off` in pr_sink_stats. */
static void pr__emit_per_sink(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    for (size_t k = 0; k < s->n_sinks; k++) {
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], s->sink_names[k]}};
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        pr__metric_sample(mb, f->name, l, 2, (double)*v);
    }
}

/* The trainer sink's per-reason counters: one sample per reason, from the
 * uint64_t array at `off` in pr_sink_stats; `arg` picks the reason names
 * (0 refused, 1 dropped, 2 auth). Only pipelines with a trainer sink. */
static void pr__emit_trainer_reasons(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    static const int counts[] = {PR_TRAINER_REFUSE__COUNT, PR_TRAINER_DROP__COUNT,
                                 PR_TRAINER_AUTH__COUNT};
    const char *(*const names[])(int) = {pr_trainer_refuse_reason_name, pr_trainer_drop_reason_name,
                                         pr_trainer_auth_reason_name};
    for (size_t k = 0; k < s->n_sinks; k++) {
        if (strcmp(s->sink_names[k], "trainer") != 0)
            continue;
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        for (int r = 0; r < counts[f->arg]; r++) {
            pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], names[f->arg](r)}};
            pr__metric_sample(mb, f->name, l, 2, (double)v[r]);
        }
    }
}

/* A trainer-sink value (uint64_t at `off` in pr_sink_stats), labelled by pipeline. */
static void pr__emit_trainer_value(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    for (size_t k = 0; k < s->n_sinks; k++) {
        if (strcmp(s->sink_names[k], "trainer") != 0)
            continue;
        pr_label l[] = {{f->labels[0], pr__pipe_name(s)}};
        const uint64_t *v = (const uint64_t *)((const char *)&s->ss[k] + f->off);
        pr__metric_sample(mb, f->name, l, 1, (double)*v);
    }
}

/* Hot-set coverage for a fixed few k (those <= hot.top_k), per sparse column:
 * low cardinality whatever top_k is. */
static void pr__emit_hot_coverage(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    static const size_t ks[] = {100, 1000};
    static const char *const kn[] = {"100", "1000"};
    pr__pipe *p = s->p;
    if (!p->hot)
        return;
    const pr_pipeline_spec *spec = &p->cfg->spec;
    uint32_t top_k = p->svc->cfg->hot.top_k;
    for (uint32_t c = 0; c < spec->n_sparse; c++) {
        double cov[2];
        pthread_mutex_lock(&p->hot_lock);
        pr_hot_coverage(p->hot[c], ks, 2, cov);
        pthread_mutex_unlock(&p->hot_lock);
        for (size_t j = 0; j < 2; j++) {
            if (ks[j] > top_k)
                continue;
            pr_label l[] = {{f->labels[0], pr__pipe_name(s)},
                            {f->labels[1], spec->sparse[c].name},
                            {f->labels[2], kn[j]}};
            pr__metric_sample(mb, f->name, l, 3, cov[j]);
        }
    }
}

/* Shared vocabulary (vocab_log) families, only for pipelines that have one:
 * arg 0 the uint64_t at off in pr_vocablog_stats, 1 the log lag, 2 up,
 * 3 errors by kind, 4 the wait histogram. */
static void pr__emit_vlog(pr_mbuf *mb, const pr__family *f, const pr__scrape *s)
{
    if (!s->has_vlog)
        return;
    const pr_vocablog_stats *v = &s->vls;
    pr_label l[] = {{f->labels[0], pr__pipe_name(s)}, {f->labels[1], NULL}};
    switch (f->arg) {
    case 1: {
        int64_t lag = v->end_offset > v->applied_offset ? v->end_offset - v->applied_offset : 0;
        pr__metric_sample(mb, f->name, l, 1, (double)lag);
        break;
    }
    case 2:
        pr__metric_sample(mb, f->name, l, 1, v->up ? 1 : 0);
        break;
    case 3: {
        static const char *const kinds[] = {"corrupt", "produce", "fetch"};
        const uint64_t vals[] = {v->corrupt_records, v->produce_errors, v->consume_errors};
        for (size_t k = 0; k < 3; k++) {
            l[1].value = kinds[k];
            pr__metric_sample(mb, f->name, l, 2, (double)vals[k]);
        }
        break;
    }
    case 4:
        pr__metric_histogram(mb, f->name, l, 1, &v->wait);
        break;
    default:
        pr__metric_sample(mb, f->name, l, 1, (double)*(const uint64_t *)((const char *)v + f->off));
    }
}

/* Label sets: "pipeline" first, then the family's own label. */
/* clang-format off */
#define PR__L_NONE        {0}
#define PR__L_VERSION     {"version"}
#define PR__L_PIPE        {"pipeline"}
#define PR__L_PIPE_AND(x) {"pipeline", x}
#define PR__L_PARTITION   {"pipeline", "topic", "partition"}
/* clang-format on */
#define PR__CS(field)   .src = PR__SRC_CONSUMER, .off = offsetof(pr_consumer_stats, field)
#define PR__CS32(field) .src = PR__SRC_CONSUMER_U32, .off = offsetof(pr_consumer_stats, field)
#define PR__BS(field)   .src = PR__SRC_BATCHER, .off = offsetof(pr_batcher_stats, field)
#define PR__ES(field)   .src = PR__SRC_ENGINE, .off = offsetof(pr_engine_stats, field)
#define PR__PIPE(field) .src = PR__SRC_PIPE, .off = offsetof(pr__pipe, field)
#define PR__HIST(field) .emit = pr__emit_hist, .off = offsetof(pr_batcher_stats, field)
#define PR__SINK(field) .emit = pr__emit_per_sink, .off = offsetof(pr_sink_stats, field)
#define PR__LAG(kind)   .emit = pr__emit_lag, .arg = (kind)
#define PR__VLOG(field) .emit = pr__emit_vlog, .off = offsetof(pr_vocablog_stats, field)

static const pr__family pr__families[] = {
    /* Process. */
    {"piperec_build_info", PR_METRIC_GAUGE, "Build information; the value is always 1.",
     PR__L_VERSION, .proc = pr__proc_build_info},
    {"piperec_start_time_seconds", PR_METRIC_GAUGE,
     "Process start time, seconds since the Unix epoch.", PR__L_NONE, .proc = pr__proc_start_time},
    {"piperec_inflight_limit_bytes", PR_METRIC_GAUGE,
     "limits.max_inflight_bytes: above it every partition is paused.", PR__L_NONE,
     .proc = pr__proc_inflight_limit},

    /* Pipeline. */
    {"piperec_engine_backend_info", PR_METRIC_GAUGE,
     "Engine backend in use per pipeline; the value is always 1.", PR__L_PIPE_AND("backend"),
     .emit = pr__emit_backend},
    {"piperec_pipeline_up", PR_METRIC_GAUGE,
     "1 while the pipeline loop runs, 0 after a fatal error or stop.", PR__L_PIPE,
     .emit = pr__emit_up},
    {"piperec_loop_age_seconds", PR_METRIC_GAUGE,
     "Seconds since the pipeline loop last turned (/healthz uses it).", PR__L_PIPE,
     .emit = pr__emit_loop_age},

    /* Consumer and batcher counters and gauges. */
    {"piperec_messages_in_total", PR_METRIC_COUNTER, "Kafka messages consumed.", PR__L_PIPE,
     PR__CS(messages)},
    {"piperec_bytes_in_total", PR_METRIC_COUNTER, "Kafka message payload bytes consumed.",
     PR__L_PIPE, PR__CS(bytes)},
    {"piperec_records_in_total", PR_METRIC_COUNTER,
     "Records decoded from messages into row blocks.", PR__L_PIPE, PR__CS(records)},
    {"piperec_consumer_errors_total", PR_METRIC_COUNTER,
     "Non-fatal Kafka consumer errors seen by poll.", PR__L_PIPE, PR__CS(kafka_errors)},
    {"piperec_rebalances_total", PR_METRIC_COUNTER, "Partition assign and revoke events.",
     PR__L_PIPE, PR__CS(rebalances)},
    {"piperec_commit_failures_total", PR_METRIC_COUNTER,
     "Offset commits the broker refused (e.g. during a rebalance); rows after the last "
     "successful commit may be delivered again.",
     PR__L_PIPE, PR__CS(commit_failures)},
    {"piperec_stale_members_total", PR_METRIC_COUNTER,
     "Group members of a killed predecessor found at startup (state dir), by result: dropped "
     "(LeaveGroup sent on its behalf), gone (its session had expired), failed (the restart "
     "waits out its session).",
     PR__L_PIPE_AND("result"), .emit = pr__emit_stale_members},
    {"piperec_records_out_total", PR_METRIC_COUNTER, "Rows emitted in training batches.",
     PR__L_PIPE, PR__BS(rows_out)},
    {"piperec_batches_acked_total", PR_METRIC_COUNTER,
     "Batches acknowledged by every sink (their offsets may be committed).", PR__L_PIPE,
     PR__BS(batches_acked)},
    {"piperec_late_records_total", PR_METRIC_COUNTER,
     "Rows older than the event-time watermark (ordering event_time).", PR__L_PIPE,
     PR__BS(rows_late)},
    {"piperec_revoke_dropped_records_total", PR_METRIC_COUNTER,
     "Buffered rows dropped because their partition was revoked (the new owner re-reads them).",
     PR__L_PIPE, PR__BS(rows_dropped_revoke)},
    {"piperec_buffered_records", PR_METRIC_GAUGE, "Rows waiting in the batcher.", PR__L_PIPE,
     PR__BS(buffered_rows)},
    {"piperec_unacked_batches", PR_METRIC_GAUGE,
     "Batches emitted and not yet acknowledged by every sink.", PR__L_PIPE,
     PR__BS(unacked_batches)},
    {"piperec_inflight_bytes", PR_METRIC_GAUGE,
     "Bytes held for delivery: buffered rows plus unacknowledged batches.", PR__L_PIPE,
     PR__BS(inflight_bytes)},
    {"piperec_last_sequence", PR_METRIC_GAUGE, "Sequence number of the last emitted batch.",
     PR__L_PIPE, PR__BS(last_seq)},
    {"piperec_epoch", PR_METRIC_GAUGE,
     "Restart epoch stamped on batches (bumped at every start; 0 without state.dir).", PR__L_PIPE,
     PR__PIPE(epoch)},
    {"piperec_inflight_peak_bytes", PR_METRIC_GAUGE, "Highest in-flight bytes seen since start.",
     PR__L_PIPE, PR__PIPE(inflight_peak)},
    {"piperec_assigned_partitions", PR_METRIC_GAUGE,
     "Partitions currently assigned to this process.", PR__L_PIPE, PR__CS32(assigned_partitions)},
    {"piperec_paused_partitions", PR_METRIC_GAUGE, "Assigned partitions paused by backpressure.",
     PR__L_PIPE, PR__CS32(paused_partitions)},
    {"piperec_backpressure_pauses_total", PR_METRIC_COUNTER,
     "Times in-flight bytes went over the limit and fetching was paused.", PR__L_PIPE,
     PR__PIPE(pauses)},

    /* Lag, per partition. */
    {"piperec_consumer_lag_records", PR_METRIC_GAUGE,
     "High watermark minus committed offset, per partition.", PR__L_PARTITION,
     PR__LAG(PR__LAG_COMMITTED)},
    {"piperec_consumer_position_lag_records", PR_METRIC_GAUGE,
     "High watermark minus the consumer's fetch position, per partition.", PR__L_PARTITION,
     PR__LAG(PR__LAG_POSITION)},
    {"piperec_consumer_high_watermark_offset", PR_METRIC_GAUGE,
     "Partition high watermark (next offset to be written).", PR__L_PARTITION,
     PR__LAG(PR__LAG_HIGH_WATERMARK)},
    {"piperec_consumer_committed_offset", PR_METRIC_GAUGE,
     "Last committed offset (next offset to read after a restart).", PR__L_PARTITION,
     PR__LAG(PR__LAG_COMMITTED_OFFSET)},

    /* Rejects, dead letters, batches by reason. */
    {"piperec_rejected_records_total", PR_METRIC_COUNTER,
     "Records rejected (malformed), by reason; each also goes to the dead-letter "
     "topic when one is configured.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_rejects},
    {"piperec_dead_letters_total", PR_METRIC_COUNTER,
     "Dead letters by result: sent (delivery confirmed), failed (attempts refused or failed; "
     "retried), file (too large for the topic: written to the dead-letter file).",
     PR__L_PIPE_AND("result"), .emit = pr__emit_dead_letters},
    {"piperec_dead_letters_pending", PR_METRIC_GAUGE,
     "Dead letters not yet confirmed by the topic nor written to the dead-letter file; each "
     "holds its source offset uncommitted.",
     PR__L_PIPE, .emit = pr__emit_dead_letters_pending},
    {"piperec_offset_resets_total", PR_METRIC_COUNTER,
     "Positions found out of range (retention, recreated topic) and reset per "
     "source.kafka.on_offset_reset, per partition.",
     PR__L_PARTITION, .emit = pr__emit_offset_resets},
    {"piperec_batches_emitted_total", PR_METRIC_COUNTER,
     "Training batches emitted, by reason: full, deadline (max_delay_ms), flush.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_batch_reasons},
    {"piperec_popular_batches_total", PR_METRIC_COUNTER,
     "Popular batches emitted (batch.split popular; included in piperec_batches_emitted_total).",
     PR__L_PIPE, PR__BS(batches_popular)},
    {"piperec_popular_records_total", PR_METRIC_COUNTER,
     "Rows emitted in popular batches (included in piperec_records_out_total).", PR__L_PIPE,
     PR__BS(rows_out_popular)},
    {"piperec_popular_share_ratio", PR_METRIC_GAUGE,
     "Share of the rows emitted since start that went out in popular batches (batch.split "
     "popular; 0 otherwise).",
     PR__L_PIPE, PR__BS(popular_share_ppm), .div = 1e6},

    /* Histograms (le is added by the writer). */
    {"piperec_batch_fill_ratio", PR_METRIC_HISTOGRAM,
     "Rows per emitted batch divided by batch.size.", PR__L_PIPE, PR__HIST(fill_ratio)},
    {"piperec_freshness_event_to_emit_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: emit time minus the oldest event time in it (Kafka timestamp when the "
     "event has none).",
     PR__L_PIPE, PR__HIST(event_to_emit_s)},
    {"piperec_batch_wait_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: how long its oldest row waited in the batcher.", PR__L_PIPE, PR__HIST(wait_s)},
    {"piperec_freshness_emit_to_ack_seconds", PR_METRIC_HISTOGRAM,
     "Per batch: emission to acknowledgement by every sink.", PR__L_PIPE, PR__HIST(emit_to_ack_s)},

    /* Vocabulary. */
    {"piperec_vocab_size", PR_METRIC_GAUGE,
     "Indices handed out per sparse column, reserved ones included (embedding "
     "rows a trainer needs).",
     PR__L_PIPE_AND("column"), .emit = pr__emit_vocab},
    {"piperec_vocab_capacity", PR_METRIC_GAUGE,
     "Most indices a sparse column can hand out, reserved ones included (vocab capacity, or "
     "the automatic one from modulus).",
     PR__L_PIPE_AND("column"), .emit = pr__emit_vocab, .arg = 1},
    {"piperec_vocab_recycled_total", PR_METRIC_COUNTER,
     "Recycled-index notices sent in batches (bounded vocabularies with eviction): indices "
     "reused for a new value, whose embedding rows a trainer resets.",
     PR__L_PIPE, PR__BS(recycled_out)},
    {"piperec_vocab_log_lag_records", PR_METRIC_GAUGE,
     "Records of the shared vocabulary log not applied yet (vocab_log only).", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = 1},
    {"piperec_vocab_log_up", PR_METRIC_GAUGE,
     "1 when the vocabulary log answered in the last 5 s (vocab_log only).", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = 2},
    {"piperec_vocab_log_records_total", PR_METRIC_COUNTER,
     "Vocabulary log records applied (from every replica).", PR__L_PIPE, PR__VLOG(records_applied)},
    {"piperec_vocab_log_indices_assigned_total", PR_METRIC_COUNTER,
     "Indices the vocabulary log assigned (to values proposed by any replica).", PR__L_PIPE,
     PR__VLOG(indices_assigned)},
    {"piperec_vocab_log_proposals_total", PR_METRIC_COUNTER,
     "Values this replica proposed to the vocabulary log (rate: proposals/s).", PR__L_PIPE,
     PR__VLOG(proposals)},
    {"piperec_vocab_log_ahead_proposals_total", PR_METRIC_COUNTER,
     "Values proposed ahead: the next block's new values, sent while the block before it "
     "waited for the log (part of piperec_vocab_log_proposals_total; only without min_count "
     "> 1 and eviction).",
     PR__L_PIPE, PR__VLOG(ahead_values)},
    {"piperec_vocab_log_blocks_waited_total", PR_METRIC_COUNTER,
     "Blocks that waited for the vocabulary log to decide new values.", PR__L_PIPE,
     PR__VLOG(blocks_waited)},
    {"piperec_vocab_log_values_waiting", PR_METRIC_GAUGE,
     "Distinct values of the block now waiting for the vocabulary log.", PR__L_PIPE,
     PR__VLOG(values_waiting)},
    {"piperec_vocab_log_usage_records_total", PR_METRIC_COUNTER,
     "Usage records this replica appended (columns with eviction: the uses that keep every "
     "replica's eviction statistics alike).",
     PR__L_PIPE, PR__VLOG(usage_records)},
    {"piperec_vocab_log_oov_blocks_total", PR_METRIC_COUNTER,
     "Blocks (columns with eviction) whose new values were evicted again in every proposal "
     "round while they waited: those values went out as OOV in that block.",
     PR__L_PIPE, PR__VLOG(rounds_exhausted)},
    {"piperec_vocab_log_oov_values_total", PR_METRIC_COUNTER,
     "Values of such blocks that went out as OOV (columns with eviction and vocab_log).",
     PR__L_PIPE, PR__ES(undecided_oov)},
    {"piperec_vocab_log_wait_seconds", PR_METRIC_HISTOGRAM,
     "Time from proposing a block's new values to their indices being known.", PR__L_PIPE,
     .emit = pr__emit_vlog, .arg = 4},
    {"piperec_vocab_log_errors_total", PR_METRIC_COUNTER,
     "Vocabulary log problems: corrupt (records or entries skipped), produce (proposals sent "
     "again), fetch (read errors, e.g. broker down).",
     PR__L_PIPE_AND("kind"), .emit = pr__emit_vlog, .arg = 3},
    {"piperec_vocab_checkpoints_total", PR_METRIC_COUNTER,
     "Vocabulary snapshots written to state.dir.", PR__L_PIPE, PR__PIPE(checkpoints)},
    {"piperec_hot_coverage_ratio",
     PR_METRIC_GAUGE,
     "Estimated share of a sparse column's lookups covered by its k hottest indices (decayed "
     "hot-set sketch; k 100 and 1000, those <= hot.top_k).",
     {"pipeline", "column", "k"},
     .emit = pr__emit_hot_coverage},

    /* Engine. */
    {"piperec_engine_operator_seconds_total", PR_METRIC_COUNTER,
     "Engine time per operator (summed over worker threads).", PR__L_PIPE_AND("operator"),
     .emit = pr__emit_per_operator, .off = offsetof(pr_engine_stats, op_ns), .div = 1e9},
    {"piperec_engine_operator_values_total", PR_METRIC_COUNTER, "Values processed per operator.",
     PR__L_PIPE_AND("operator"), .emit = pr__emit_per_operator,
     .off = offsetof(pr_engine_stats, op_values)},
    {"piperec_engine_rows_total", PR_METRIC_COUNTER, "Rows that went through the engine.",
     PR__L_PIPE, PR__ES(rows_in)},
    {"piperec_engine_blocks_total", PR_METRIC_COUNTER, "Row blocks processed by the engine.",
     PR__L_PIPE, PR__ES(blocks)},

    /* Sinks, one sample per sink. */
    {"piperec_sink_batches_sent_total", PR_METRIC_COUNTER, "Batches accepted by the sink.",
     PR__L_PIPE_AND("sink"), PR__SINK(batches_sent)},
    {"piperec_sink_batches_acked_total", PR_METRIC_COUNTER, "Batches the sink acknowledged.",
     PR__L_PIPE_AND("sink"), PR__SINK(batches_acked)},
    {"piperec_sink_bytes_sent_total", PR_METRIC_COUNTER, "Bytes the sink wrote out.",
     PR__L_PIPE_AND("sink"), PR__SINK(bytes_sent)},
    {"piperec_sink_refused_total", PR_METRIC_COUNTER,
     "Times the sink was full and a batch had to wait.", PR__L_PIPE_AND("sink"),
     PR__SINK(batches_refused)},
    {"piperec_sink_redeliveries_total", PR_METRIC_COUNTER,
     "Batches sent again after a trainer went away unacknowledged.", PR__L_PIPE_AND("sink"),
     PR__SINK(redeliveries)},
    {"piperec_sink_errors_total", PR_METRIC_COUNTER, "Sink errors.", PR__L_PIPE_AND("sink"),
     PR__SINK(errors)},
    {"piperec_sink_queued_batches", PR_METRIC_GAUGE,
     "Batches accepted by the sink and not yet acknowledged.", PR__L_PIPE_AND("sink"),
     PR__SINK(queued_batches)},
    {"piperec_sink_clients", PR_METRIC_GAUGE, "Connected trainers (trainer sink).",
     PR__L_PIPE_AND("sink"), PR__SINK(clients)},

    /* Trainer port: the network surface (docs/operations.md, Security). */
    {"piperec_trainer_connections", PR_METRIC_GAUGE, "Open trainer connections, subscribed or not.",
     PR__L_PIPE, .emit = pr__emit_trainer_value, .off = offsetof(pr_sink_stats, connections)},
    {"piperec_trainer_connections_refused_total", PR_METRIC_COUNTER,
     "Trainer connections closed before the protocol started, by reason.", PR__L_PIPE_AND("reason"),
     .emit = pr__emit_trainer_reasons, .off = offsetof(pr_sink_stats, refused), .arg = 0},
    {"piperec_trainer_connections_dropped_total", PR_METRIC_COUNTER,
     "Trainer connections closed by the server (timeouts, limits, protocol errors), by reason.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_trainer_reasons,
     .off = offsetof(pr_sink_stats, dropped), .arg = 1},
    {"piperec_trainer_auth_failures_total", PR_METRIC_COUNTER,
     "Trainer connections refused by authentication (token, client certificate), by reason.",
     PR__L_PIPE_AND("reason"), .emit = pr__emit_trainer_reasons,
     .off = offsetof(pr_sink_stats, auth_failures), .arg = 2},
    {"piperec_trainer_receive_buffer_bytes", PR_METRIC_GAUGE,
     "Bytes held by trainer connections' receive buffers (counted in the in-flight bytes).",
     PR__L_PIPE, .emit = pr__emit_trainer_value,
     .off = offsetof(pr_sink_stats, receive_buffer_bytes)},
    {"piperec_trainer_io_wakeups_total", PR_METRIC_COUNTER,
     "Turns of the trainer sink's I/O loop (about 10/s when idle; a busy loop shows here).",
     PR__L_PIPE, .emit = pr__emit_trainer_value, .off = offsetof(pr_sink_stats, io_wakeups)},
};

void pr_service_render_metrics(pr_service *svc, pr_mbuf *mb)
{
    size_t n = svc->n_pipes;
    pr__scrape *sc = calloc(n ? n : 1, sizeof(*sc));
    if (!sc) {
        mb->err = PR_ENOMEM;
        return;
    }
    for (size_t i = 0; i < n; i++)
        pr__scrape_pipe(&svc->pipes[i], &sc[i]);
    int64_t now = pr__now_ns();
    for (size_t i = 0; i < n; i++)
        sc[i].now_ns = now;

    for (size_t k = 0; k < sizeof(pr__families) / sizeof(pr__families[0]); k++) {
        const pr__family *f = &pr__families[k];
        pr__metric_family(mb, f->name, f->type, f->help);
        if (f->proc) {
            f->proc(mb, f, svc);
            continue;
        }
        for (size_t i = 0; i < n; i++)
            (f->emit ? f->emit : pr__emit_value)(mb, f, &sc[i]);
    }
    pr__process_metrics(mb); /* process_* families, the standard collector's names */

    for (size_t i = 0; i < n; i++)
        free(sc[i].lags);
    free(sc);
}

/* ---------------------------------------------------------------- /v1/status */

static void pr__json_num(pr_mbuf *mb, double v)
{
    if (!isfinite(v))
        pr_mbuf_puts(mb, "null");
    else if (v == floor(v) && fabs(v) < 9e15)
        pr_mbuf_printf(mb, "%.0f", v);
    else
        pr_mbuf_printf(mb, "%.6g", v);
}

void pr_service_render_status(pr_service *svc, pr_mbuf *mb)
{
    char why[256];
    bool healthy = pr_service_healthy(svc, why, sizeof(why));
    bool ready = pr_service_ready(svc, why, sizeof(why));
    pr_mbuf_printf(mb, "{\"version\":\"%s\",\"healthy\":%s,\"ready\":%s,\"uptime_seconds\":",
                   PR_VERSION, healthy ? "true" : "false", ready ? "true" : "false");
    pr__json_num(mb, (double)(pr_clock_wall_ms(pr_clock_real()) - svc->start_wall_ms) / 1000.0);
    pr_mbuf_puts(mb, ",\"max_inflight_bytes\":");
    pr__json_num(mb, (double)svc->cfg->limits.max_inflight_bytes);
    pr_mbuf_puts(mb, ",\"pipelines\":[");
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        pr_pipeline_stats st;
        pr_service_pipeline_stats(svc, i, &st);
        if (i)
            pr_mbuf_puts(mb, ",");
        pr_mbuf_puts(mb, "{\"name\":");
        pr_mbuf_json_str(mb, p->cfg->name);
        pr_mbuf_puts(mb, ",\"backend\":");
        pr_mbuf_json_str(mb, st.backend);
        pr_mbuf_puts(mb, ",\"format\":");
        pr_mbuf_json_str(mb, pr_source_format_name(p->cfg->source.format));
        pr_mbuf_printf(mb, ",\"up\":%s",
                       (!atomic_load(&p->fatal) && !atomic_load(&p->done)) ? "true" : "false");
        if (atomic_load(&p->fatal)) {
            pr_mbuf_puts(mb, ",\"error\":");
            pr_mbuf_json_str(mb, p->fatal_msg);
        }
        pr_mbuf_printf(mb, ",\"trainer_port\":%d,\"epoch\":%llu", p->trainer_port,
                       (unsigned long long)atomic_load(&p->epoch));
        pr_mbuf_puts(mb, ",\"assignment\":[");
        pr_partition_lag *lags = calloc(PR__MAX_PARTS, sizeof(*lags));
        size_t nl = lags ? pr_consumer_lag(p->cons, lags, PR__MAX_PARTS) : 0;
        if (nl > PR__MAX_PARTS)
            nl = PR__MAX_PARTS;
        for (size_t k = 0; k < nl; k++) {
            if (k)
                pr_mbuf_puts(mb, ",");
            pr_mbuf_puts(mb, "{\"topic\":");
            pr_mbuf_json_str(mb, lags[k].tp.topic);
            pr_mbuf_printf(mb,
                           ",\"partition\":%d,\"high_watermark\":%lld,\"position\":%lld,"
                           "\"committed\":%lld,\"lag\":%lld,\"paused\":%s}",
                           lags[k].tp.partition, (long long)lags[k].high_watermark,
                           (long long)lags[k].position, (long long)lags[k].committed,
                           (long long)lags[k].lag, lags[k].paused ? "true" : "false");
        }
        free(lags);
        pr_mbuf_puts(mb, "]");
        pthread_mutex_lock(&p->lock);
        double rr = p->rate_records, ro = p->rate_rows_out, rb = p->rate_batches;
        uint64_t vocab[PR_MAX_SPARSE];
        memcpy(vocab, p->vocab, sizeof(vocab));
        pthread_mutex_unlock(&p->lock);
        pr_mbuf_printf(mb,
                       ",\"records_in\":%llu,\"messages_in\":%llu,\"bytes_in\":%llu,"
                       "\"rejected\":%llu,\"records_out\":%llu,\"batches_emitted\":%llu,"
                       "\"batches_acked\":%llu,\"inflight_bytes\":%llu,\"paused_partitions\":%u,"
                       "\"lag\":%lld",
                       (unsigned long long)st.records_in, (unsigned long long)st.messages_in,
                       (unsigned long long)st.bytes_in, (unsigned long long)st.rejected,
                       (unsigned long long)st.rows_out, (unsigned long long)st.batches_emitted,
                       (unsigned long long)st.batches_acked, (unsigned long long)st.inflight_bytes,
                       st.paused_partitions, (long long)st.lag);
        pr_mbuf_puts(mb, ",\"rates\":{\"records_in_per_second\":");
        pr__json_num(mb, rr);
        pr_mbuf_puts(mb, ",\"records_out_per_second\":");
        pr__json_num(mb, ro);
        pr_mbuf_puts(mb, ",\"batches_per_second\":");
        pr__json_num(mb, rb);
        pr_mbuf_puts(mb, "},\"freshness_seconds\":{\"event_to_emit_p50\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_emit, 0.5));
        pr_mbuf_puts(mb, ",\"event_to_emit_p99\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_emit, 0.99));
        pr_mbuf_puts(mb, ",\"emit_to_ack_p50\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_ack, 0.5));
        pr_mbuf_puts(mb, ",\"emit_to_ack_p99\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_ack, 0.99));
        pr_mbuf_puts(mb, "},\"vocab_sizes\":{");
        for (uint32_t c = 0; c < p->cfg->spec.n_sparse; c++) {
            if (c)
                pr_mbuf_puts(mb, ",");
            pr_mbuf_json_str(mb, p->cfg->spec.sparse[c].name);
            pr_mbuf_printf(mb, ":%llu", (unsigned long long)vocab[c]);
        }
        pr_mbuf_puts(mb, "}}");
    }
    pr_mbuf_puts(mb, "]}\n");
}
