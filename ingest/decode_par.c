/*
 * decode_par.c — parallel decoding for the consumer (contract: decode_par.h).
 *
 * Why this shape: one librdkafka consumer hands out messages one at a time
 * on one thread; decoding them (a Criteo line ~0.25 us, a JSON event through
 * a declared schema ~1.5 us) on that thread made it the pipeline's critical
 * path. Here the polling thread keeps polling while helpers decode the slots
 * it has filled, then it decodes what is left itself, so a poll costs about
 * poll + decode / threads. Each slot decodes into its own scratch block and
 * logs its rejects; the merge back is on the polling thread, message by
 * message in poll order, so the caller's block, the rejects and the offsets
 * see exactly the sequence the serial decode gives (the copy costs ~0.05 us
 * per Criteo row). The pool lives inside one pr_consumer_poll call: nothing
 * is in flight between calls, so rebalances, pause and close see what they
 * saw before.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_par.h"
#include "pr_env.h"
#include "pr_log.h"

/* A poll this small decodes serially: waking helpers would cost more. */
#define PR__PAR_MIN_RECS 32
/* The merge's deferred copies: at most this many rows a task (a run is 256
 * rows; a slot up to its slot_recs), and a merge of fewer rows copies them
 * itself. */
#define PR__COPY_TASK_ROWS 512
#define PR__COPY_MIN_ROWS  1024

/* One deferred copy: rows [s0, s0 + n) of src into [d0, d0 + n) of dst,
 * every column but the missing-value bitmaps (their words are shared by
 * neighbouring tasks' rows: the merge copies them itself, in order). */
typedef struct pr__dcopy {
    pr_block *dst;
    const pr_block *src;
    uint32_t d0, s0, n;
} pr__dcopy;

/* A logged reject, text in the slot's buffer (offsets: it may grow). */
typedef struct pr__rej {
    int reason;
    int64_t recno;
    size_t detail_off, detail_len, rec_off, rec_len;
} pr__rej;

typedef struct pr__dslot {
    pr_block *blk;   /* scratch, 2 x slot_recs rows */
    uint32_t m0, m1; /* messages [m0, m1) */
    uint32_t recs;   /* records of its queued messages */
    pr__rej *rej;
    size_t n_rej, cap_rej;
    char *text;
    size_t n_text, cap_text;
    bool oom;         /* the reject log could not grow: the rest goes serial */
    uint32_t cur;     /* message being decoded (the reject callback's) */
    uint32_t off_row; /* merge: the walking offsets below are those of this row */
    uint32_t *off;    /* [n_feat] elements / values before off_row (jagged) */
} pr__dslot;

struct pr__dpool {
    pr__dsrc src;
    const pr__dfmt *ft;
    bool parse_hex;
    unsigned n_threads;
    pthread_t *th;
    unsigned n_started;
    void **dec; /* [n_threads]: each thread's decoder (pr__dfmt) */
    pr__dslot *slots;
    unsigned n_slots;
    uint32_t slot_recs;
    uint16_t n_feat;
    pr__dmsg *msgs;
    uint32_t n_msgs, cap_msgs;
    unsigned open; /* the slot being filled; n_slots: none left */

    pthread_mutex_t mu;
    pthread_cond_t work, done_cv;
    unsigned posted, claimed, done; /* slots [0, posted) posted, in order */
    bool quit;
    /* The merge's column copies (Criteo layout), deferred to the end of the
     * merge and shared with the helpers (pr__dpool_copies_run). */
    bool defer;
    pr__dcopy *copies;
    size_t n_copies, cap_copies;
    size_t cposted, cclaimed, cdone; /* under mu */
    uint64_t copy_rows, copy_rows_helpers;
    /* Where the work went (logged at free, info level): slots decoded by
     * helpers and by the polling thread, polls decoded serially. */
    uint64_t by_helpers, by_poller, serial_polls;
};

/* ---------------------------------------------------------------- decoding */

static int pr__text_put(pr__dslot *s, const char *p, size_t n, size_t *off)
{
    if (s->n_text + n > s->cap_text) {
        size_t nc = s->cap_text ? s->cap_text * 2 : 4096;
        while (nc < s->n_text + n)
            nc *= 2;
        char *t = realloc(s->text, nc);
        if (!t)
            return PR_ENOMEM;
        s->text = t;
        s->cap_text = nc;
    }
    if (n)
        memcpy(s->text + s->n_text, p, n);
    *off = s->n_text;
    s->n_text += n;
    return 0;
}

/* The decoders' reject callback inside a slot: logged, replayed at merge. */
static void pr__rej_log(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                        int64_t recno)
{
    pr__dslot *s = opaque;
    if (s->oom)
        return;
    if (s->n_rej == s->cap_rej) {
        size_t nc = s->cap_rej ? s->cap_rej * 2 : 16;
        pr__rej *r = realloc(s->rej, nc * sizeof(*r));
        if (!r) {
            s->oom = true;
            return;
        }
        s->rej = r;
        s->cap_rej = nc;
    }
    pr__rej *r = &s->rej[s->n_rej];
    const char *d = detail ? detail : "";
    r->reason = reason;
    r->recno = recno;
    r->detail_len = strlen(d);
    r->rec_len = len;
    /* The detail with its NUL: it is read as a C string (the log line, the
     * dead letter's header); without it those read on into the next text. */
    if (pr__text_put(s, d, r->detail_len + 1, &r->detail_off) ||
        pr__text_put(s, rec, len, &r->rec_off)) {
        s->oom = true;
        return;
    }
    s->n_rej++;
}

/* Decode one message into slot s's block with decoder dec of table ft, its
 * rejects into s's log (ctx: partition, offset and default event time set).
 * 0 with rows [*row0, *row0 + *nrows) and rejects [*rej0, ...) logged; < 0
 * when it did not decode whole (scratch full, memory, a reader that cannot
 * decode it yet): its rejects are forgotten. */
static int pr__msg_decode(const pr__dfmt *ft, void *dec, pr_decode_ctx *ctx, pr__dslot *s,
                          const void *buf, size_t len, uint32_t *row0, uint32_t *nrows,
                          uint32_t *rej0, uint32_t *nrej)
{
    static const char empty[1] = "";
    uint32_t r0 = s->blk->rows;
    size_t j0 = s->n_rej;
    ctx->on_reject = pr__rej_log;
    ctx->opaque = s;
    int rc = ft->decode(dec, ctx, s->blk, buf ? buf : empty, len);
    if (rc < 0 || s->oom) {
        s->n_rej = j0;
        return rc < 0 ? rc : PR_ENOMEM;
    }
    *row0 = r0;
    *nrows = s->blk->rows - r0;
    *rej0 = (uint32_t)j0;
    *nrej = (uint32_t)(s->n_rej - j0);
    return 0;
}

static void pr__slot_clear(pr__dslot *s)
{
    pr_block_reset(s->blk);
    s->n_rej = 0;
    s->n_text = 0;
    s->oom = false;
    s->off_row = UINT32_MAX; /* walking offsets: recomputed at first use */
}

/* Decode slot k on thread t (helper or the polling thread). */
static void pr__slot_decode(pr__dpool *dp, unsigned t, unsigned k)
{
    pr__dslot *s = &dp->slots[k];
    pr__slot_clear(s);
    bool serial_rest = false;
    pr_decode_ctx ctx = {.spec = dp->src.spec,
                         .parse_hex = dp->parse_hex,
                         .max_event_ahead_ms = pr__event_ahead_ms(dp->src.source)};
    for (uint32_t i = s->m0; i < s->m1; i++) {
        pr__dmsg *dm = &dp->msgs[i];
        if (dm->state != PR__DM_QUEUED)
            continue;
        if (serial_rest) {
            dm->state = PR__DM_SERIAL;
            continue;
        }
        s->cur = i;
        ctx.partition = dm->key;
        ctx.offset = dm->offset;
        ctx.default_event_time_ms = dm->event_ms;
        if (pr__msg_decode(dp->ft, dp->dec[t], &ctx, s, dm->m->payload, dm->m->len, &dm->row0,
                           &dm->nrows, &dm->rej0, &dm->nrej)) {
            /* The scratch filled up (or memory ran out): this message and the
             * rest of the slot are decoded at merge, into the caller's block. */
            serial_rest = true;
            dm->state = PR__DM_SERIAL;
            continue;
        }
        dm->state = PR__DM_DECODED;
    }
}

static void pr__meta_copy(pr_block *dst, uint32_t d0, const pr_block *src, uint32_t s0, uint32_t n)
{
    if (dst->partition && src->partition)
        memcpy(dst->partition + d0, src->partition + s0, n * sizeof(*dst->partition));
    if (dst->offset && src->offset)
        memcpy(dst->offset + d0, src->offset + s0, n * sizeof(*dst->offset));
    if (dst->event_time_ms && src->event_time_ms)
        memcpy(dst->event_time_ms + d0, src->event_time_ms + s0, n * sizeof(*dst->event_time_ms));
}

/* A deferred copy (pr__dcopy): every column but the bitmaps. */
static void pr__copy_run(const pr__dcopy *t)
{
    pr_block *dst = t->dst;
    const pr_block *src = t->src;
    uint32_t d0 = t->d0, s0 = t->s0, n = t->n;
    if (dst->labels && src->labels)
        memcpy(dst->labels + d0, src->labels + s0, n * sizeof(*dst->labels));
    for (uint32_t c = 0; c < src->n_dense; c++)
        memcpy(dst->dense + (size_t)c * dst->cap + d0, src->dense + (size_t)c * src->cap + s0,
               n * sizeof(double));
    for (uint32_t c = 0; c < src->n_sparse; c++) {
        if (src->sparse_enc[c] == PR_SPARSE_HEX)
            memcpy(pr_block_hex(dst, c, d0), pr_block_hex((pr_block *)src, c, s0),
                   (size_t)n * PR_HEX_SLOT);
        else
            memcpy(dst->sparse_u64 + (size_t)c * dst->scap + d0,
                   src->sparse_u64 + (size_t)c * src->scap + s0, n * sizeof(uint64_t));
    }
    pr__meta_copy(dst, d0, src, s0, n);
}

/* With mu held: claim and run one posted task, a deferred copy first, else a
 * slot to decode (decoder t: 0 the polling thread's, helpers 1..n-1), and
 * return with mu held; false when nothing is left to claim. The helpers and
 * the thread that posted the work (pr__dpool_finish, pr__dpool_copies_run)
 * take tasks the same way. */
static bool pr__run_one(pr__dpool *dp, unsigned t)
{
    if (dp->cclaimed < dp->cposted) {
        size_t i = dp->cclaimed++;
        pthread_mutex_unlock(&dp->mu);
        pr__copy_run(&dp->copies[i]);
        pthread_mutex_lock(&dp->mu);
        if (t)
            dp->copy_rows_helpers += dp->copies[i].n;
        if (++dp->cdone == dp->cposted)
            pthread_cond_broadcast(&dp->done_cv);
        return true;
    }
    if (dp->claimed < dp->posted) {
        unsigned k = dp->claimed++;
        if (t)
            dp->by_helpers++;
        else
            dp->by_poller++;
        pthread_mutex_unlock(&dp->mu);
        pr__slot_decode(dp, t, k);
        pthread_mutex_lock(&dp->mu);
        if (++dp->done == dp->posted)
            pthread_cond_broadcast(&dp->done_cv);
        return true;
    }
    return false;
}

/* A helper's loop; `t` its decoder index. */
struct pr__helper_arg {
    pr__dpool *dp;
    unsigned t;
};

static void *pr__helper_run(void *arg)
{
    struct pr__helper_arg a = *(struct pr__helper_arg *)arg;
    free(arg);
    pr__dpool *dp = a.dp;
    char name[16];
    snprintf(name, sizeof(name), "pr:decode-%u", a.t);
    pthread_setname_np(pthread_self(), name);
    pthread_mutex_lock(&dp->mu);
    while (!dp->quit)
        if (!pr__run_one(dp, a.t))
            pthread_cond_wait(&dp->work, &dp->mu);
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

/* ---------------------------------------------------------------- lifecycle */

/* A scratch block of table ft's layout, with the walking offsets a jagged
 * one needs (*n_feat: its features). false: out of memory. */
static bool pr__scratch_new(pr__dslot *s, const pr__dfmt *ft, const pr__dsrc *src, uint32_t cap,
                            uint16_t *n_feat)
{
    s->blk = ft->scratch_new(src, cap);
    if (!s->blk)
        return false;
    s->off_row = UINT32_MAX;
    if (!s->blk->side)
        return true;
    *n_feat = s->blk->side->n_feat;
    s->off = calloc(*n_feat ? *n_feat : 1, sizeof(uint32_t));
    return s->off != NULL;
}

pr__dpool *pr__dpool_new(unsigned n_threads, const pr__dsrc *src, uint32_t block_cap, char *errstr,
                         size_t errstr_size)
{
    const pr__dfmt *ft = pr__dfmt_of(src);
    if (n_threads < 2 || block_cap == 0 || !ft)
        return NULL;
    pr__dpool *dp = calloc(1, sizeof(*dp));
    if (!dp)
        goto out_nomem;
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->work, NULL);
    pthread_cond_init(&dp->done_cv, NULL);
    dp->src = *src;
    dp->ft = ft;
    dp->parse_hex = pr_decode_want_parse_hex(src->spec);
    dp->n_threads = n_threads;
    dp->defer = pr_env_switch("PIPEREC_MERGE_COPY", true);
    /* A slot is ~60-100 us of decoding: short enough that helpers start soon
     * after the poll does, long enough that the handoff is noise. */
    dp->slot_recs = ft->slot_recs;
    if (dp->slot_recs > block_cap)
        dp->slot_recs = block_cap;
    dp->n_slots = block_cap / dp->slot_recs + 2;
    dp->cap_msgs = (block_cap > 1024 ? block_cap : 1024) + 1;
    dp->msgs = calloc(dp->cap_msgs, sizeof(*dp->msgs));
    dp->slots = calloc(dp->n_slots, sizeof(*dp->slots));
    if (!dp->msgs || !dp->slots)
        goto out_free;
    for (unsigned k = 0; k < dp->n_slots; k++)
        if (!pr__scratch_new(&dp->slots[k], ft, src, 2 * dp->slot_recs, &dp->n_feat))
            goto out_free;
    dp->dec = calloc(n_threads, sizeof(*dp->dec));
    if (!dp->dec)
        goto out_free;
    for (unsigned t = 0; t < n_threads; t++)
        if (!(dp->dec[t] = pr__dfmt_dec_new(ft, src, errstr, errstr_size)))
            goto out_err;
    dp->th = calloc(n_threads, sizeof(*dp->th));
    if (!dp->th)
        goto out_free;
    for (unsigned t = 1; t < n_threads; t++) {
        struct pr__helper_arg *a = malloc(sizeof(*a));
        if (!a)
            goto out_free;
        *a = (struct pr__helper_arg){dp, t};
        if (pthread_create(&dp->th[dp->n_started], NULL, pr__helper_run, a)) {
            free(a);
            goto out_free;
        }
        dp->n_started++;
    }
    pr__dpool_begin(dp);
    return dp;

out_free:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory for %u decode threads",
              n_threads);
out_err:
    pr__dpool_free(dp);
    return NULL;
out_nomem:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "consumer: out of memory");
    return NULL;
}

void pr__dpool_free(pr__dpool *dp)
{
    if (!dp)
        return;
    pthread_mutex_lock(&dp->mu);
    if (dp->n_started)
        pr_info("consumer: decode slots: %llu by %u helper(s), %llu by the polling thread; %llu "
                "small poll(s) decoded serially",
                (unsigned long long)dp->by_helpers, dp->n_started,
                (unsigned long long)dp->by_poller, (unsigned long long)dp->serial_polls);
    if (dp->n_started && dp->copy_rows)
        pr_info("consumer: merge copies: %llu row(s), %llu of them by the helpers",
                (unsigned long long)dp->copy_rows, (unsigned long long)dp->copy_rows_helpers);
    dp->quit = true;
    pthread_cond_broadcast(&dp->work);
    pthread_mutex_unlock(&dp->mu);
    for (unsigned t = 0; t < dp->n_started; t++)
        pthread_join(dp->th[t], NULL);
    free(dp->th);
    for (unsigned k = 0; dp->slots && k < dp->n_slots; k++) {
        pr_block_free(dp->slots[k].blk);
        free(dp->slots[k].rej);
        free(dp->slots[k].text);
        free(dp->slots[k].off);
    }
    free(dp->slots);
    for (unsigned t = 0; dp->dec && t < dp->n_threads; t++)
        pr__dfmt_dec_free(dp->ft, dp->dec[t]);
    free(dp->dec);
    free(dp->msgs);
    free(dp->copies);
    pthread_cond_destroy(&dp->work);
    pthread_cond_destroy(&dp->done_cv);
    pthread_mutex_destroy(&dp->mu);
    free(dp);
}

unsigned pr__dpool_threads(const pr__dpool *dp)
{
    return dp ? dp->n_threads : 1;
}

/* ---------------------------------------------------------------- decoded runs
 *
 * The polling thread fills the open run and, when it is full or sealed,
 * takes the first free one (lowest index: hot in the caches); a run is free
 * once its holds (`refs`: messages decoded into it, not yet released)
 * are back to 0. A hold is taken by the polling thread before the message
 * goes into the ring and given back by the consumer thread after its last
 * read of the run (acquire/release on refs), so a run is never reset while
 * read. When every run is held the caller hears PR_EAGAIN (the polling
 * thread hands its own over and naps: poll_threads.c); the consumer thread
 * never waits on a polling thread. */

struct pr__drun {
    pr__dslot s;
    int refs; /* atomic */
};

struct pr__druns {
    pr__dsrc src;
    const pr__dfmt *ft;
    void *dec; /* the polling thread's decoder */
    uint16_t n_feat;
    bool parse_hex;
    unsigned n, open;
    bool sealed; /* the open run's messages were handed over: write no more */
    uint32_t rows;
    pr__drun *run;
    /* Where the messages went (logged at free, info level): decoded into
     * runs; times every run was held (the polling thread waited). */
    uint64_t decoded, no_run, runs;
};

static pr__dslot *pr__src(const pr__dpool *dp, const pr__dmsg *dm)
{
    return dm->run ? &dm->run->s : &dp->slots[dm->slot];
}

pr__druns *pr__druns_new(const pr__dsrc *src, unsigned n_runs, uint32_t run_rows)
{
    const pr__dfmt *ft = pr__dfmt_of(src);
    if (!ft || n_runs < 2 || run_rows == 0)
        return NULL;
    pr__druns *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    *d = (pr__druns){.src = *src,
                     .ft = ft,
                     .parse_hex = pr_decode_want_parse_hex(src->spec),
                     .n = n_runs,
                     .rows = run_rows,
                     .sealed = true};
    char e[256] = "";
    if (!(d->dec = pr__dfmt_dec_new(ft, src, e, sizeof(e)))) {
        pr_warn("consumer: no decoder for a polling thread (%s)", e);
        goto out_free;
    }
    d->run = calloc(n_runs, sizeof(*d->run));
    if (!d->run)
        goto out_free;
    for (unsigned k = 0; k < n_runs; k++)
        if (!pr__scratch_new(&d->run[k].s, ft, src, run_rows, &d->n_feat))
            goto out_free;
    d->open = n_runs - 1; /* sealed: the first decode takes run 0 */
    return d;
out_free:
    pr__druns_free(d);
    return NULL;
}

void pr__druns_free(pr__druns *d)
{
    if (!d)
        return;
    if (d->decoded || d->no_run)
        pr_info("consumer: a polling thread decoded %llu message(s) into %llu run(s); %llu "
                "time(s) every run was held",
                (unsigned long long)d->decoded, (unsigned long long)d->runs,
                (unsigned long long)d->no_run);
    for (unsigned k = 0; d->run && k < d->n; k++) {
        pr_block_free(d->run[k].s.blk);
        free(d->run[k].s.rej);
        free(d->run[k].s.text);
        free(d->run[k].s.off);
    }
    free(d->run);
    pr__dfmt_dec_free(d->ft, d->dec);
    free(d);
}

/* The open run, or the next one when the open one is sealed or lacks room
 * for `need` rows; NULL when that one is still held. */
static pr__drun *pr__druns_room(pr__druns *d, uint32_t need)
{
    pr__drun *r = &d->run[d->open];
    if (!d->sealed && r->s.blk->rows + need <= d->rows)
        return r;
    /* The first free run: the same few stay in the caches (taken in turn,
     * every run's rows were cold again by its next use, and the merge's
     * reads of them were the pipeline thread's largest cost). */
    unsigned k = 0;
    for (; k < d->n; k++)
        if ((k != d->open || d->sealed) && __atomic_load_n(&d->run[k].refs, __ATOMIC_ACQUIRE) == 0)
            break;
    if (k == d->n)
        return NULL;
    r = &d->run[k];
    pr__slot_clear(&r->s);
    d->runs++;
    d->open = k;
    d->sealed = false;
    return r;
}

int pr__druns_decode(pr__druns *d, const rd_kafka_message_t *m, int nrec, int32_t key,
                     int64_t event_ms, pr__ddec *out)
{
    *out = (pr__ddec){0};
    if (nrec <= 0 || (uint32_t)nrec > d->rows)
        return 0;
    pr__drun *r = pr__druns_room(d, (uint32_t)nrec);
    if (!r) {
        d->no_run++;
        return PR_EAGAIN;
    }
    pr_decode_ctx ctx = {.spec = d->src.spec,
                         .partition = key,
                         .offset = m->offset,
                         .default_event_time_ms = event_ms,
                         .max_event_ahead_ms = pr__event_ahead_ms(d->src.source),
                         .parse_hex = d->parse_hex};
    pr__ddec dec = {.run = r};
    if (pr__msg_decode(d->ft, d->dec, &ctx, &r->s, m->payload, m->len, &dec.row0, &dec.nrows,
                       &dec.rej0, &dec.nrej)) {
        d->sealed = true; /* its rows are partial: the next decode starts a fresh run */
        return 0;
    }
    __atomic_add_fetch(&r->refs, 1, __ATOMIC_RELAXED); /* published by the ring's push */
    d->decoded++;
    *out = dec;
    return 1;
}

void pr__druns_seal(pr__druns *d)
{
    d->sealed = true;
}

void pr__ddec_release(pr__ddec *dec)
{
    if (!dec->run)
        return;
    __atomic_sub_fetch(&dec->run->refs, 1, __ATOMIC_RELEASE);
    dec->run = NULL;
}

void pr__drun_release_n(pr__drun *run, uint32_t n)
{
    if (run && n)
        __atomic_sub_fetch(&run->refs, n, __ATOMIC_RELEASE);
}

/* ---------------------------------------------------------------- one poll */

void pr__dpool_begin(pr__dpool *dp)
{
    dp->n_msgs = 0;
    dp->open = 0;
    pthread_mutex_lock(&dp->mu); /* the helpers read these (all idle now) */
    dp->posted = dp->claimed = dp->done = 0;
    pthread_mutex_unlock(&dp->mu);
    dp->slots[0].m0 = dp->slots[0].m1 = 0;
    dp->slots[0].recs = 0;
}

static void pr__post(pr__dpool *dp, unsigned k)
{
    pthread_mutex_lock(&dp->mu);
    dp->posted = k + 1;
    pthread_cond_signal(&dp->work);
    pthread_mutex_unlock(&dp->mu);
}

bool pr__dpool_add(pr__dpool *dp, rd_kafka_message_t *m, int64_t offset, int32_t key, int tidx,
                   int64_t event_ms, int nrec)
{
    if (dp->open >= dp->n_slots || dp->n_msgs >= dp->cap_msgs)
        return false;
    pr__dslot *s = &dp->slots[dp->open];
    bool queued = nrec > 0 && (uint32_t)nrec <= dp->slot_recs;
    dp->msgs[dp->n_msgs] = (pr__dmsg){.m = m,
                                      .offset = offset,
                                      .key = key,
                                      .tidx = tidx,
                                      .event_ms = event_ms,
                                      .nrec = nrec,
                                      .state = queued ? PR__DM_QUEUED : PR__DM_SERIAL,
                                      .slot = (uint16_t)dp->open};
    s->m1 = ++dp->n_msgs;
    if (queued)
        s->recs += (uint32_t)nrec;
    if (s->recs >= dp->slot_recs) {
        pr__post(dp, dp->open);
        if (++dp->open < dp->n_slots) {
            pr__dslot *n = &dp->slots[dp->open];
            n->m0 = n->m1 = dp->n_msgs;
            n->recs = 0;
        }
    }
    return true;
}

bool pr__dpool_add_decoded(pr__dpool *dp, rd_kafka_message_t *m, int64_t offset, int32_t key,
                           int tidx, int64_t event_ms, int nrec, const pr__ddec *dec)
{
    if (dp->open >= dp->n_slots || dp->n_msgs >= dp->cap_msgs)
        return false;
    dp->msgs[dp->n_msgs++] = (pr__dmsg){.m = m,
                                        .offset = offset,
                                        .key = key,
                                        .tidx = tidx,
                                        .event_ms = event_ms,
                                        .nrec = nrec,
                                        .state = PR__DM_DECODED,
                                        .run = dec->run,
                                        .slot = (uint16_t)dp->open,
                                        .row0 = dec->row0,
                                        .nrows = dec->nrows,
                                        .rej0 = dec->rej0,
                                        .nrej = dec->nrej};
    dp->slots[dp->open].m1 = dp->n_msgs; /* the slot's decode skips it */
    return true;
}

void pr__dpool_finish(pr__dpool *dp)
{
    if (dp->open < dp->n_slots) {
        pr__dslot *s = &dp->slots[dp->open];
        if (s->m1 > s->m0 && s->recs > 0) {
            if (dp->posted == 0 && s->recs < PR__PAR_MIN_RECS) {
                dp->serial_polls++;
                for (uint32_t i = s->m0; i < s->m1; i++)
                    if (dp->msgs[i].state == PR__DM_QUEUED)
                        dp->msgs[i].state = PR__DM_SERIAL;
            } else {
                pr__post(dp, dp->open);
            }
        }
    }
    pthread_mutex_lock(&dp->mu);
    while (dp->done < dp->posted)
        if (!pr__run_one(dp, 0))
            pthread_cond_wait(&dp->done_cv, &dp->mu);
    pthread_mutex_unlock(&dp->mu);
    for (unsigned k = 0; k < dp->posted; k++)
        dp->slots[k].off_row = UINT32_MAX; /* walking offsets: recomputed at first use */
}

size_t pr__dpool_count(const pr__dpool *dp)
{
    return dp->n_msgs;
}

pr__dmsg *pr__dpool_msg(pr__dpool *dp, size_t i)
{
    return &dp->msgs[i];
}

void pr__dpool_reject(const pr__dpool *dp, const pr__dmsg *dm, uint32_t k, pr__drej *out)
{
    const pr__dslot *s = pr__src(dp, dm);
    const pr__rej *r = &s->rej[dm->rej0 + k];
    *out = (pr__drej){.reason = r->reason,
                      .recno = r->recno,
                      .detail = s->text + r->detail_off,
                      .rec = s->text + r->rec_off,
                      .len = r->rec_len};
}

/* ---------------------------------------------------------------- merge */

/* n (<= 64) bits of w from bit i. */
static inline uint64_t pr__bits_get(const uint64_t *w, size_t i, unsigned n)
{
    size_t q = i >> 6;
    unsigned r = (unsigned)(i & 63);
    uint64_t v = w[q] >> r;
    if (r && r + n > 64)
        v |= w[q + 1] << (64 - r);
    return n == 64 ? v : v & ((UINT64_C(1) << n) - 1);
}

/* OR n (<= 64) bits v into w from bit i. */
static inline void pr__bits_or(uint64_t *w, size_t i, uint64_t v, unsigned n)
{
    size_t q = i >> 6;
    unsigned r = (unsigned)(i & 63);
    w[q] |= v << r;
    if (r && r + n > 64)
        w[q + 1] |= v >> (64 - r);
}

/* Bits [s0, s0 + n) of src into dst from d0; dst's bits there are clear
 * (blocks fill in order from a reset, and a drop clears what it frees). */
static void pr__bits_copy(uint64_t *dst, size_t d0, const uint64_t *src, size_t s0, size_t n)
{
    for (size_t k = 0; k < n; k += 64) {
        unsigned m = n - k < 64 ? (unsigned)(n - k) : 64;
        uint64_t v = pr__bits_get(src, s0 + k, m);
        if (v)
            pr__bits_or(dst, d0 + k, v, m);
    }
}

/* Queue a copy task (pr__dcopy) in pieces of at most PR__COPY_TASK_ROWS
 * rows. false: out of memory (the caller copies itself). */
static bool pr__copy_defer(pr__dpool *dp, pr_block *dst, const pr_block *src, uint32_t d0,
                           uint32_t s0, uint32_t n)
{
    size_t pieces = (n + PR__COPY_TASK_ROWS - 1) / PR__COPY_TASK_ROWS;
    if (dp->n_copies + pieces > dp->cap_copies) {
        size_t nc = dp->cap_copies ? 2 * dp->cap_copies : 64;
        while (nc < dp->n_copies + pieces)
            nc *= 2;
        pr__dcopy *t = realloc(dp->copies, nc * sizeof(*t));
        if (!t)
            return false;
        dp->copies = t;
        dp->cap_copies = nc;
    }
    for (uint32_t k = 0; k < n; k += PR__COPY_TASK_ROWS) {
        uint32_t m = n - k < PR__COPY_TASK_ROWS ? n - k : PR__COPY_TASK_ROWS;
        dp->copies[dp->n_copies++] = (pr__dcopy){dst, src, d0 + k, s0 + k, m};
    }
    return true;
}

/* The Criteo layout: every column holds `rows` elements. The bitmaps are
 * copied here, in order; the columns too, or (dp deferring) by
 * pr__dpool_copies_run before the merge returns. */
static int pr__append_criteo(pr__dpool *dp, pr_block *dst, const pr_block *src, uint32_t s0,
                             uint32_t n)
{
    if (dst->n_dense != src->n_dense || dst->n_sparse != src->n_sparse)
        return PR_EINVAL;
    if (dst->rows + n > dst->cap)
        return PR_EFULL;
    if (dst->rows > 0 && memcmp(dst->sparse_enc, src->sparse_enc, src->n_sparse))
        return PR_EINVAL;
    uint32_t d0 = dst->rows;
    size_t dbw = pr_bitmap_words(dst->cap), sbw = pr_bitmap_words(src->cap);
    for (uint32_t c = 0; c < src->n_dense; c++)
        pr__bits_copy(dst->dense_missing + c * dbw, d0, src->dense_missing + c * sbw, s0, n);
    size_t dsw = pr_bitmap_words(dst->scap), ssw = pr_bitmap_words(src->scap);
    for (uint32_t c = 0; c < src->n_sparse; c++) {
        dst->sparse_enc[c] = src->sparse_enc[c];
        pr__bits_copy(dst->sparse_missing + c * dsw, d0, src->sparse_missing + c * ssw, s0, n);
    }
    if (dp && dp->defer && pr__copy_defer(dp, dst, src, d0, s0, n))
        dp->copy_rows += n;
    else
        pr__copy_run(&(pr__dcopy){dst, src, d0, s0, n});
    dst->rows += n;
    return 0;
}

uint64_t pr__dpool_copies_pending(const pr__dpool *dp)
{
    uint64_t rows = 0;
    for (size_t i = 0; dp && i < dp->n_copies; i++)
        rows += dp->copies[i].n;
    return rows;
}

void pr__dpool_copies_run(pr__dpool *dp)
{
    if (!dp || !dp->n_copies)
        return;
    if (dp->n_started == 0 || dp->n_copies < 2 ||
        pr__dpool_copies_pending(dp) < PR__COPY_MIN_ROWS) {
        for (size_t i = 0; i < dp->n_copies; i++)
            pr__copy_run(&dp->copies[i]);
        dp->n_copies = 0;
        return;
    }
    pthread_mutex_lock(&dp->mu);
    dp->cposted = dp->n_copies;
    dp->cclaimed = dp->cdone = 0;
    pthread_cond_broadcast(&dp->work);
    while (dp->cdone < dp->cposted)
        if (!pr__run_one(dp, 0))
            pthread_cond_wait(&dp->done_cv, &dp->mu);
    dp->cposted = dp->cclaimed = dp->cdone = 0;
    pthread_mutex_unlock(&dp->mu);
    dp->n_copies = 0;
}

/* Per feature, elements (vocab) or values (others) of src's rows before row. */
static void pr__walk_offsets(const pr_block *src, uint32_t row, uint32_t *off)
{
    const pr_fside *s = src->side;
    for (uint16_t f = 0; f < s->n_feat; f++) {
        const int32_t *len = s->lengths + (size_t)f * s->cap;
        uint32_t o = 0;
        for (uint32_t r = 0; r < row; r++)
            o += (uint32_t)len[r];
        off[f] = o;
    }
}

/* A declared schema's jagged block: side tables (labels, dense, lengths,
 * values of features without a vocabulary) and one key column per vocab
 * table, elements row-major (a shared table's features interleaved row by
 * row: its column's elements before row s0 are its features' offsets
 * summed, and rows s0.. are one run). off: the walking offsets of row s0. */
static int pr__append_jagged(pr_block *dst, const pr_block *src, uint32_t s0, uint32_t n,
                             uint32_t *off)
{
    const pr_fside *ss = src->side;
    pr_fside *ds = dst->side;
    if (!ds || ds->n_feat != ss->n_feat || ds->n_labels != ss->n_labels ||
        ds->n_dense != ss->n_dense || dst->n_sparse != src->n_sparse ||
        ss->n_feat > 2 * PR_MAX_SPARSE)
        return PR_EINVAL;
    if (dst->rows + n > dst->cap)
        return PR_EFULL;
    uint32_t k[2 * PR_MAX_SPARSE], kc[PR_MAX_SPARSE] = {0}, oc[PR_MAX_SPARSE] = {0};
    for (uint16_t f = 0; f < ss->n_feat; f++) {
        const int32_t *len = ss->lengths + (size_t)f * ss->cap;
        k[f] = 0;
        for (uint32_t r = s0; r < s0 + n; r++)
            k[f] += (uint32_t)len[r];
        int c = ss->vocab_col[f];
        if (c >= 0) {
            kc[c] += k[f];
            oc[c] += off[f];
        }
    }
    for (uint32_t c = 0; c < src->n_sparse && c < PR_MAX_SPARSE; c++)
        if ((uint64_t)dst->col_rows[c] + kc[c] > dst->scap)
            return PR_EFULL;
    for (uint16_t f = 0; f < ss->n_feat; f++)
        if ((ss->vocab_col[f] < 0 && pr_fside_reserve(ds, f, k[f])) ||
            (!ss->weights[f] != !ds->weights[f]) ||
            (ss->weights[f] && pr_fside_reserve_weights(ds, f, k[f])))
            return PR_ENOMEM;
    uint32_t d0 = dst->rows;
    memcpy(ds->labels + (size_t)d0 * ds->n_labels, ss->labels + (size_t)s0 * ss->n_labels,
           (size_t)n * ss->n_labels * sizeof(float));
    memcpy(ds->dense + (size_t)d0 * ds->n_dense, ss->dense + (size_t)s0 * ss->n_dense,
           (size_t)n * ss->n_dense * sizeof(float));
    size_t dsw = pr_bitmap_words(dst->scap), ssw = pr_bitmap_words(src->scap);
    for (uint16_t f = 0; f < ss->n_feat; f++) {
        memcpy(ds->lengths + (size_t)f * ds->cap + d0, ss->lengths + (size_t)f * ss->cap + s0,
               n * sizeof(int32_t));
        int c = ss->vocab_col[f];
        if (ss->weights[f]) {
            memcpy(ds->weights[f] + ds->n_weights[f], ss->weights[f] + off[f],
                   k[f] * sizeof(float));
            ds->n_weights[f] += k[f];
        }
        if (c < 0) {
            memcpy(ds->values[f] + ds->n_values[f], ss->values[f] + off[f], k[f] * sizeof(int64_t));
            ds->n_values[f] += k[f];
        }
        off[f] += k[f];
    }
    for (uint32_t c = 0; c < src->n_sparse && c < PR_MAX_SPARSE; c++) {
        uint32_t at = dst->col_rows[c];
        memcpy(dst->sparse_u64 + (size_t)c * dst->scap + at,
               src->sparse_u64 + (size_t)c * src->scap + oc[c], kc[c] * sizeof(uint64_t));
        pr__bits_copy(dst->sparse_missing + c * dsw, at, src->sparse_missing + c * ssw, oc[c],
                      kc[c]);
        dst->col_rows[c] = at + kc[c];
    }
    if (ds->absent && ss->absent && ds->n_schema == ss->n_schema) {
        size_t dw = pr_bitmap_words(ds->cap), sw = pr_bitmap_words(ss->cap);
        for (uint32_t i = 0; i < ss->n_schema; i++)
            pr__bits_copy(ds->absent + i * dw, d0, ss->absent + i * sw, s0, n);
    }
    pr__meta_copy(dst, d0, src, s0, n);
    dst->rows += n;
    return 0;
}

int pr__dpool_merge(pr__dpool *dp, pr_block *dst, const pr__dmsg *dm, uint32_t nrows)
{
    pr__dslot *s = pr__src(dp, dm);
    if (nrows == 0)
        return 0;
    if (!s->blk->side)
        return pr__append_criteo(dp, dst, s->blk, dm->row0, nrows);
    if (s->off_row != dm->row0) {
        pr__walk_offsets(s->blk, dm->row0, s->off);
        s->off_row = dm->row0;
    }
    uint32_t save[2 * PR_MAX_SPARSE];
    memcpy(save, s->off, dp->n_feat * sizeof(uint32_t));
    int rc = pr__append_jagged(dst, s->blk, dm->row0, nrows, s->off);
    if (rc)
        memcpy(s->off, save, dp->n_feat * sizeof(uint32_t));
    else
        s->off_row = dm->row0 + nrows;
    return rc;
}
