/*
 * pipeline.c — the pipeline thread of one pipeline: it polls the consumer
 * and decodes into a row block, hands blocks to the worker (worker.c),
 * and between blocks does the duties only it may do: acks from the sinks,
 * the at-least-once offset bookkeeping, backpressure, dead letters, the
 * rebalance callbacks, checkpoints and the stats cache that other threads
 * read. At stop it drains: what was read still goes out, acks are awaited
 * up to the drain timeout, offsets are committed.
 *
 * Why here and not in the worker: the consumer, its dead-letter producer
 * and every offset decision belong to this thread, and the engine, the
 * batcher and the sinks are touched here only while the worker is not
 * running, so every result is that of one thread (service.c has the
 * longer story).
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipe.h"
#include "pr_clock.h"
#include "pr_grow.h"
#include "pr_log.h"

static void pr__sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void pr__set_fatal(pr__pipe *p, int rc, const char *msg)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&p->fatal, &expected, rc)) {
        snprintf(p->fatal_msg, sizeof(p->fatal_msg), "%s", msg);
        pr_err("pipeline %s: %s", p->cfg->name, msg);
    }
}

/* ---------------------------------------------------------------- callbacks */

uint64_t pr__vocab_cb(void *opaque, uint32_t col)
{
    pr__pipe *p = opaque;
    return pr_engine_vocab_size(p->eng, col);
}

void pr__emit_cb(void *opaque, pr_batch *b)
{
    pr__pipe *p = opaque;
    if (pr__emit_defer(p, b))
        return;        /* the pipeline thread sends it (worker.c) */
    pr__emit_drain(p); /* earlier sequences first */
    pr__emit_send(p, b);
}

void pr__emit_send(pr__pipe *p, pr_batch *b)
{
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
void pr__late_cb(void *opaque, const pr_block *in, const pr_out *out, uint32_t row)
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

void pr__send_late(pr__pipe *p)
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

struct pr__unproc *pr__unproc_new(void)
{
    return calloc(1, sizeof(struct pr__unproc));
}

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

static bool pr__key_revoked(const pr__pipe *p, int32_t key);

void pr__on_assign(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
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

void pr__on_revoke(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n)
{
    pr__pipe *p = opaque;
    pr__worker_join(p);
    /* Collect acks that already arrived so fewer batches are redelivered;
     * dead letters written to the file become durable, so their offsets
     * may be stored now (else the new owner reads them again). */
    pr_sinkset_poll(p->sinks, pr__ack_cb, p);
    pr_dlq_sync(pr_consumer_dlq(p->cons));
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
    if (pr__wstate_get(p) == PR__W_HELD && p->wblk->rows) {
        uint32_t before = p->wblk->rows;
        pr__block_drop_revoked(p, p->wblk, NULL);
        if (p->wblk->rows != before)
            pr_vocab_store_abandon(p->vs);
    }
    pr_info("pipeline %s: %zu partition(s) revoked", p->cfg->name, n);
}

void pr__on_reject(void *opaque, pr_consumer *c, const pr_reject_info *ri)
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
/* pr__schema_drop_rows's question for pr__block_drop_revoked. */
struct pr__drop_q {
    pr__pipe *p;
    const uint8_t *skip;
};

static bool pr__drop_row(void *opaque, const pr_block *b, uint32_t r)
{
    const struct pr__drop_q *q = opaque;
    return q->skip ? q->skip[r] : pr__key_revoked(q->p, b->partition[r]);
}

void pr__block_drop_revoked(pr__pipe *p, pr_block *b, const uint8_t *skip)
{
    if (b->side) { /* a declared schema's block: jagged columns, side tables */
        struct pr__drop_q q = {p, skip};
        pr__schema_drop_rows(b, pr__drop_row, &q);
        return;
    }
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
                pr_bit_move(b->dense_missing + (size_t)c * bw, r, w);
            }
            for (uint32_t c = 0; c < b->n_sparse; c++) {
                memcpy(pr_block_hex(b, c, w), pr_block_hex(b, c, r), PR_HEX_SLOT);
                b->sparse_u64[(size_t)c * b->cap + w] = b->sparse_u64[(size_t)c * b->cap + r];
                pr_bit_move(b->sparse_missing + (size_t)c * bw, r, w);
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
void pr__dead_letter_engine_rejects(pr__pipe *p, const pr_block *in, const pr_out *out)
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
        const char *cname = col < p->spec->n_sparse ? p->spec->sparse[col].name : "?";
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

/* ---------------------------------------------------------------- the loop's duties */

static uint64_t pr__total_inflight(pr_service *svc)
{
    uint64_t t = 0;
    for (size_t i = 0; i < svc->n_pipes; i++)
        t += atomic_load(&svc->pipes[i].inflight);
    return t;
}

void pr__refresh_cache(pr__pipe *p, int64_t now_ns, bool force)
{
    pthread_mutex_lock(&p->lock);
    for (uint32_t c = 0; c < p->spec->n_sparse; c++)
        p->vocab[c] = pr_engine_vocab_size(p->eng, c);
    /* The engine's statistics (~4 KB with the per-column health counts) only
     * every 100 ms: the loop turns far more often than anyone scrapes. */
    if (force || now_ns - p->est_ns >= 100000000LL) {
        pr_engine_get_stats(p->eng, &p->est);
        pr_fhealth_read(&p->health, p->eng, NULL);
        p->est_ns = now_ns;
    }
    bool any = false;
    size_t ns = pr_sinkset_count(p->sinks);
    if (ns > 4)
        ns = 4;
    for (size_t i = 0; i < ns; i++) {
        pr_sink *s = pr_sinkset_get(p->sinks, i);
        if (pr_sink_ready(s))
            any = true;
        p->sink_names[i] = pr_sink_name(s);
        p->sink_caps[i] = pr_sink_caps(s);
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
    pr__unproc_build(p);
    /* Every assigned partition (a fixed array of 256 left the rest out). */
    size_t n = pr_consumer_assignment(p->cons, p->tps, p->cap_tps);
    while (n > p->cap_tps) {
        if (pr_grow((void **)&p->tps, &p->cap_tps, n, sizeof(*p->tps)) < 0) {
            n = p->cap_tps; /* the others wait for the next store */
            break;
        }
        n = pr_consumer_assignment(p->cons, p->tps, p->cap_tps);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t cn = pr_consumer_consumed_next(p->cons, p->tps[i].key);
        if (cn > 0)
            cn = pr__cap_unprocessed(p, p->tps[i].key, cn);
        if (cn > 0)
            pr_batcher_note_consumed(p->bat, p->tps[i].key, cn);
    }
    pr_batcher_safe_offsets(p->bat, pr__store_cb, p);
    p->unproc_valid = false;
    /* Recycled-index notices acknowledged with their batches need no
     * re-announcement after a restart (pr_vocab_store_commit). */
    uint64_t top = pr_batcher_notice_top(p->bat, pr_engine_vocab_recycled_total(p->eng),
                                         pr_engine_vocab_notices_pending(p->eng));
    pr_notice_acks acks; /* the floor, and those acknowledged above it */
    pr_batcher_notice_acks(p->bat, top, &acks);
    pr_vocab_store_commit(p->vs, acks.floor);
    /* Saved for the next start, which then re-announces only the others;
     * at most every 200 ms while acks stream in (a stale file only
     * re-announces more), at once when everything is acknowledged. */
    char e[512];
    int64_t now = pr_mono_ns();
    uint64_t digest = pr_notice_acks_digest(&acks);
    if (p->floor_file[0] && digest != p->floor_saved &&
        (acks.floor == top || now - p->floor_saved_ns >= 200000000LL)) {
        if (pr_batcher_notice_floor_save(p->floor_file, &acks, e, sizeof(e)))
            pr_warn("pipeline %s: %s", p->cfg->name, e);
        else
            p->floor_saved = digest;
        p->floor_saved_ns = now;
    }
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

/* Stop: what was read still goes out, then acks up to the drain timeout,
 * the final commit and checkpoint, and the group is left. */
static void pr__drain(pr__pipe *p)
{
    pr_service *svc = p->svc;
    /* Stop fetching; what is in the block still goes out. */
    pr_consumer_pause(p->cons);
    int64_t deadline = pr_mono_ns() + svc->opts.drain_timeout_ms * 1000000LL;
    /* The worker's block, then the one read meanwhile (rows may have been
     * read while the worker's block waited for the vocab log); a block
     * waiting for the vocab log gets until the drain deadline. */
    for (;;) {
        pr__worker_join(p);
        while (pr__wstate_get(p) == PR__W_HELD && pr_mono_ns() < deadline &&
               !atomic_load(&p->fatal)) {
            atomic_store(&p->last_turn_ns, pr_mono_ns());
            pr__worker_dispatch(p);
            pr__worker_join(p);
        }
        if (atomic_load(&p->fatal) || pr__wstate_get(p) != PR__W_IDLE ||
            !(p->blk->rows || p->n_revoked))
            break;
        pr__block_prepare(p, p->blk);
        if (!p->blk->rows)
            break;
        pr__worker_start_block(p);
    }
    if (pr__wstate_get(p) == PR__W_HELD) {
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
    /* Say what the drain waits for (a trainer that went away acks nothing,
     * and the drain then takes its whole timeout): now and every 5 s. */
    int64_t said_ns = 0;
    while (pr_batcher_unacked_batches(p->bat) > 0 && pr_mono_ns() < deadline) {
        if (pr_mono_ns() - said_ns >= 5000000000LL) {
            said_ns = pr_mono_ns();
            pr_info("pipeline %s: draining: %llu batch(es) wait for their acknowledgement "
                    "(%.1f s left of the drain timeout)",
                    p->cfg->name, (unsigned long long)pr_batcher_unacked_batches(p->bat),
                    (double)(deadline - said_ns) / 1e9);
        }
        pr_sinkset_poll(p->sinks, pr__ack_cb, p);
        pr__store_safe_offsets(p);
        atomic_store(&p->last_turn_ns, pr_mono_ns());
        if (pr_batcher_unacked_batches(p->bat) > 0)
            pr__sleep_ms(PR__ACK_POLL_MS);
    }
    pr_sinkset_poll(p->sinks, pr__ack_cb, p);
    p->floor_saved_ns = 0; /* the last store writes the notice file, whatever its age */
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
    pr__pipe_checkpoint(p);
    pr__update_inflight(p);
    pr__refresh_cache(p, pr_mono_ns(), true);
    if (pr_consumer_close(p->cons, e, sizeof(e)))
        pr_warn("pipeline %s: leaving the group: %s", p->cfg->name, e);
    p->drained = true;
}

/* Batches wait for a trainer and none is connected: say so every 5 minutes
 * from 30 s on (reading stops at limits.max_inflight_bytes, and nothing
 * else in the log would say why). */
static void pr__trainer_watch(pr__pipe *p, int64_t now)
{
    if (!p->cfg->sinks.trainer.enabled || now < p->trainer_check_ns)
        return;
    p->trainer_check_ns = now + 1000000000LL;
    uint64_t waiting = pr_batcher_unacked_batches(p->bat), clients = 0;
    for (size_t i = 0; i < pr_sinkset_count(p->sinks); i++) {
        pr_sink *s = pr_sinkset_get(p->sinks, i);
        if (!strcmp(pr_sink_name(s), "trainer")) {
            pr_sink_stats st = {0};
            pr_sink_get_stats(s, &st);
            clients += st.clients;
        }
    }
    if (!waiting || clients) {
        p->no_trainer_since_ns = 0;
        return;
    }
    if (!p->no_trainer_since_ns)
        p->no_trainer_since_ns = now;
    int64_t idle = now - p->no_trainer_since_ns;
    if (idle < 30000000000LL ||
        (p->no_trainer_warned_ns && now - p->no_trainer_warned_ns < 300000000000LL))
        return;
    p->no_trainer_warned_ns = now;
    pr_warn("pipeline %s: %llu batch(es) wait for a trainer and none has been connected to %s "
            "for %lld s%s",
            p->cfg->name, (unsigned long long)waiting, p->cfg->sinks.trainer.listen,
            (long long)(idle / 1000000000LL),
            p->bp_paused ? "; reading is paused (limits.max_inflight_bytes reached)" : "");
}

/* The pipeline thread's duties between runs (the worker is not running:
 * engine, batcher and sinks are free): acks and offsets, batch deadlines,
 * in-flight bytes and backpressure, checkpoints, the stats cache. */
static void pr__duties(pr__pipe *p, int64_t now, int64_t *last_store_ns)
{
    if (pr_sinkset_poll(p->sinks, pr__ack_cb, p) > 0 || now - *last_store_ns > 100000000LL) {
        pr__store_safe_offsets(p);
        *last_store_ns = now;
    }
    pr_batcher_poll(p->bat);
    pr__update_inflight(p);
    pr__backpressure(p);
    pr__trainer_watch(p, now);
    if (pr_vocab_store_persistent(p->vs) && now >= p->next_ckpt_ns)
        pr__pipe_checkpoint(p);
    pr__refresh_cache(p, now, false);
}

/* Read into blk: briefly while the worker runs (its end is the next
 * event), else until the next batch deadline or ack poll. Returns the
 * consumer's answer; < 0 has made the pipeline fail. */
static int pr__read(pr__pipe *p, pr__wstate ws)
{
    char e[512] = "";
    int64_t wait = p->svc->opts.max_poll_wait_ms;
    if (ws == PR__W_RUNNING) {
        wait = 1;
    } else {
        int64_t due = pr_batcher_poll(p->bat);
        if (due >= 0 && due < wait)
            wait = due;
        if (pr_batcher_unacked_batches(p->bat) > 0 && wait > PR__ACK_POLL_MS)
            wait = PR__ACK_POLL_MS;
    }
    int64_t t_poll = pr_mono_ns();
    int n = pr_consumer_poll(p->cons, p->blk, (int)wait, e, sizeof(e));
    atomic_fetch_add(n > 0 ? &p->poll_rows_ns : &p->poll_empty_ns,
                     (uint64_t)(pr_mono_ns() - t_poll));
    if (n < 0) {
        char msg[600];
        snprintf(msg, sizeof(msg), "%s%s", strncmp(e, "consumer: ", 10) ? "consumer: " : "", e);
        pr__set_fatal(p, n, msg);
    }
    return n;
}

void *pr__pipe_main(void *arg)
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
        int64_t now = pr_mono_ns();
        atomic_store(&p->last_turn_ns, now);
        atomic_fetch_add(&p->loop_turns, 1);

        /* Checkpoint delivery: read nothing until a trainer has said where
         * its checkpoint stands, or batches would be cut from rows it holds
         * (a batch cannot be trimmed once cut). */
        if (p->ckpt_sink && !pr_sink_resume_known(p->ckpt_sink)) {
            pr__sleep_ms(20);
            pr__refresh_cache(p, now, false);
            continue;
        }

        /* The worker's finished block: dead letters, block free again. */
        pr__wstate ws = pr__worker_collect(p);
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
            pr__duties(p, now, &last_store_ns);
            /* Next run: the held block again, or the block the polls filled. */
            if (ws == PR__W_HELD) {
                /* While it waits, the next block's new values can go to the
                 * log already (the engine is idle between runs). PR_EAGAIN:
                 * not behind this block yet; the same rows at a later turn. */
                if (p->blk->rows > p->ahead_rows) {
                    int rc =
                        pr_vocab_store_propose_ahead(p->vs, p->blk, p->ahead_rows, e, sizeof(e));
                    if (rc && rc != PR_EAGAIN) {
                        char msg[600];
                        snprintf(msg, sizeof(msg), "vocab log: %s", e);
                        pr__set_fatal(p, rc, msg);
                        break;
                    }
                    if (!rc)
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

        /* (A declared schema's block can be full before its rows are: its
         * lists' element room; the consumer then holds the next message.) */
        if (ws == PR__W_RUNNING &&
            (p->blk->rows == p->blk->cap || (p->json && pr_consumer_has_pending(p->cons)))) {
            /* Nothing to read into: wait for the worker. (While its block
             * waits for the vocab log, reading goes on: a revoke then drops
             * the waiting block's rows of those partitions too.) */
            int64_t t0 = pr_mono_ns();
            pr__worker_wait(p, PR__ACK_POLL_MS);
            atomic_fetch_add(&p->worker_wait_ns, (uint64_t)(pr_mono_ns() - t0));
            continue;
        }
        if (ws == PR__W_HELD) {
            /* engine.overlap off: the block still waits for the vocab log
             * (each run above waited a few ms); duties, then again. */
            continue;
        }
        if (pr__read(p, ws) < 0)
            break;
    }
    pr__drain(p);
    pr__worker_quit(p);
    atomic_store(&p->done, true);
    return NULL;
}
