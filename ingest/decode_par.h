/*
 * decode_par.h — internal to ingest: parallel decoding of the messages one
 * pr_consumer_poll collects (issue 21). The consumer's polling thread adds
 * the messages it polls, in poll order, to numbered slots of a few hundred
 * records; decode threads (the pool's helpers, and the polling thread itself
 * once it stops polling) decode whole slots into private scratch blocks and
 * log each message's rejects instead of reporting them. Nothing they do is
 * visible outside the pool: the polling thread then walks the messages in
 * poll order (pr__dpool_msg) and merges each one into the caller's block,
 * replays its rejects and moves its consumed offset, exactly where the
 * serial decode would have done those things. So rows, rejects, dead letters
 * and offsets come out in the same order whatever the thread count.
 * With polling threads (consumers > 1) most messages come
 * already decoded, into their instance's runs (pr__druns below), and join
 * the poll's list as decoded (pr__dpool_add_decoded): merged the same way.
 *
 * Threads: every function is called by the consumer's polling thread; the
 * helpers touch only the slots they claimed, between post and done.
 */
#ifndef PR__DECODE_PAR_H
#define PR__DECODE_PAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pr_ingest.h"

typedef struct pr__dpool pr__dpool;

/* ---- the per-format decode table (decode_fmt.c; issue 21): what the pool
 * and the runs need of a format, so both decode every format through it.
 * A decoder is per thread (its state is never shared). */
typedef struct pr__dsrc {
    pr_msg_format fmt;
    const pr_pipeline_spec *spec;
    const pr_feature_schema *schema; /* json, avro, protobuf: the declared schema */
    const pr_source_cfg *source;     /* avro, protobuf: the reader's config (files) */
} pr__dsrc;

/* pr_decode_ctx.max_event_ahead_ms from the source config (NULL: no bound). */
static inline int64_t pr__event_ahead_ms(const pr_source_cfg *source)
{
    return source ? (int64_t)source->max_event_time_ahead_s * 1000 : 0;
}

typedef struct pr__dfmt {
    uint32_t slot_recs; /* records per slot / run of this format */
    bool needs_schema;  /* no entry without src->schema */
    bool needs_source;  /* ... or without src->source (the reader's files) */
    /* Per-thread decoder state (NULL: none); NULL with errstr on failure. */
    void *(*dec_new)(const struct pr__dsrc *src, char *errstr, size_t errstr_size);
    void (*dec_free)(void *dec);
    /* A scratch block of cap rows in the layout the caller's block has. */
    pr_block *(*scratch_new)(const struct pr__dsrc *src, uint32_t cap);
    /* One whole message into b (ctx: reject callback, partition, offset,
     * default event time set): as pr_decode_message with a fresh record
     * cursor; < 0 when it did not decode whole. */
    int (*decode)(void *dec, pr_decode_ctx *ctx, pr_block *b, const void *buf, size_t len);
} pr__dfmt;

/* src's entry; NULL when that format (or configuration: no declared schema)
 * decodes on the pipeline thread only. */
const pr__dfmt *pr__dfmt_of(const pr__dsrc *src);
/* A decoder for one thread (non-NULL for a format without state); NULL
 * with errstr on failure. Freed by pr__dfmt_dec_free (NULL ok). */
void *pr__dfmt_dec_new(const pr__dfmt *ft, const pr__dsrc *src, char *errstr, size_t errstr_size);
void pr__dfmt_dec_free(const pr__dfmt *ft, void *dec);

/* Registry-framed Avro off the pipeline thread (avro_reader.c; issue 21):
 * set on d an Avro reader with no registry client, which decodes a message
 * whose writer schema id the registry reader of the same config (src's
 * schema_registry, on the pipeline thread) has already fetched and compiled
 * (published to it), and answers PR_EAGAIN, reporting nothing, for any other
 * id: that message then decodes on the pipeline thread, which fetches. */
int pr__avro_reader_offload(pr_json_decoder *d, const pr_source_cfg *src, char *errstr,
                            size_t errstr_size);

/* ---- decoded runs (issue 21): with polling threads (poll_threads.h), each
 * instance's thread decodes its own messages into runs of its own, so the
 * pipeline thread only merges them. A run is a scratch block and a reject
 * log; an instance has a few, reused in turn once every message decoded
 * into one has been released by the consumer thread. The polling thread
 * writes a run only while none of its messages has been handed over
 * (pr__druns_seal before the hand-over), so the two never touch one run at
 * once. Every format of the decode table (pr__dfmt), each instance with a
 * decoder of its own. */
typedef struct pr__drun pr__drun;
typedef struct pr__druns pr__druns;

/* What a polling thread decoded of one message: rows [row0, row0 + nrows)
 * of `run`, rejects [rej0, rej0 + nrej) of its log. run NULL: not decoded. */
typedef struct pr__ddec {
    pr__drun *run;
    uint32_t row0, nrows, rej0, nrej;
} pr__ddec;

/* n_runs runs of run_rows rows for one instance (src is copied; what it
 * points to must outlive the runs); NULL for a format without an entry in
 * the decode table, or a failure (memory, a reader's files). */
pr__druns *pr__druns_new(const pr__dsrc *src, unsigned n_runs, uint32_t run_rows);
void pr__druns_free(pr__druns *d); /* NULL ok; every message released or gone */
/* Polling thread: decode `nrec` records of m (partition key, default event
 * time) into the open run, or a free one. 1: decoded (*out). 0 (*out
 * cleared): not here, the consumer thread decodes it (larger than a run, or
 * it does not decode whole). PR_EAGAIN: every run is held (by messages in
 * the ring or in the consumer thread's poll): try again once some are
 * released. */
int pr__druns_decode(pr__druns *d, const rd_kafka_message_t *m, int nrec, int32_t key,
                     int64_t event_ms, pr__ddec *out);
/* Polling thread: the open run's messages are about to be handed over; the
 * next decode starts another run. */
void pr__druns_seal(pr__druns *d);
/* Consumer thread: a message's hold on its run ends (merged, dropped, or to
 * be decoded another way); dec->run is cleared. No-op when run is NULL. */
void pr__ddec_release(pr__ddec *dec);
/* n holds on one run given back at once (consecutive messages of a run). */
void pr__drun_release_n(pr__drun *run, uint32_t n);

/* A collected message's fate. */
typedef enum pr__dm_state {
    PR__DM_QUEUED,  /* in a slot, not decoded yet */
    PR__DM_DECODED, /* rows [row0, row0 + nrows) of the slot's block, rejects logged */
    PR__DM_SERIAL,  /* decode it on the polling thread at merge (empty, too large, a slot
                     * that filled up, no parallel decode for this poll) */
} pr__dm_state;

/* A logged reject: as the decoder reported it (pr_reject_cb). Pointers are
 * valid until the next pr__dpool_begin. */
typedef struct pr__drej {
    int reason;
    int64_t recno;
    const char *detail;
    const char *rec;
    size_t len;
} pr__drej;

typedef struct pr__dmsg {
    rd_kafka_message_t *m;
    int64_t offset; /* m's: the merge and the decode read it here, not in m */
    int32_t key;
    int tidx;
    ssize_t part;     /* the consumer's partition table index, or -1 */
    int64_t event_ms; /* default event time (message timestamp, else the poll's now) */
    int nrec;         /* pr_message_record_count */
    uint8_t state;    /* pr__dm_state, written by the decoding thread */
    pr__drun *run;    /* decoded by its polling thread into this run (else: a slot's) */
    bool dropped;     /* revoked while collected (polling thread only) */
    uint16_t slot;
    uint32_t row0, nrows;
    uint32_t rej0, nrej;
} pr__dmsg;

/* A pool of n_threads decoders (the polling thread is one of them: n - 1
 * helper threads) for src's format (src copied; NULL for a format without
 * an entry in the decode table, n_threads < 2, or a failure: then the
 * consumer decodes serially). One decoder per thread (pr__dfmt). block_cap
 * is the caller's block capacity: one poll collects at most that many
 * records. */
pr__dpool *pr__dpool_new(unsigned n_threads, const pr__dsrc *src, uint32_t block_cap, char *errstr,
                         size_t errstr_size);
void pr__dpool_free(pr__dpool *dp); /* NULL ok; the pool must be idle (after _finish) */
unsigned pr__dpool_threads(const pr__dpool *dp);

/* Start a poll's collection: no message, every slot free. */
void pr__dpool_begin(pr__dpool *dp);
/* Add message m at `offset` (in poll order; nrec 0 for an empty one, < 0
 * to decode it serially). Full slots go to the helpers at once. Returns
 * false when the pool holds no more (the caller keeps m). */
bool pr__dpool_add(pr__dpool *dp, rd_kafka_message_t *m, int64_t offset, int32_t key, int tidx,
                   int64_t event_ms, int nrec);
/* Add m, which its polling thread decoded (dec), as above; the pool keeps
 * dec's hold on the run until the caller releases it (pr__ddec_release on
 * the message's `run`, after its merge or drop). */
bool pr__dpool_add_decoded(pr__dpool *dp, rd_kafka_message_t *m, int64_t offset, int32_t key,
                           int tidx, int64_t event_ms, int nrec, const pr__ddec *dec);
/* Decode what is left (the polling thread helps) and wait for every slot. */
void pr__dpool_finish(pr__dpool *dp);

/* The merge's column copies that pr__dpool_merge deferred (Criteo layout:
 * the bitmaps were copied in order at once), shared with the helpers, which
 * are idle by then; returns once every copy is done. Call before the merged
 * rows are read and before the sources (runs, slots) are released.
 * PIPEREC_MERGE_COPY=0: pr__dpool_merge copies everything itself. */
void pr__dpool_copies_run(pr__dpool *dp);
/* Rows whose copies wait for pr__dpool_copies_run (0 with none deferred). */
uint64_t pr__dpool_copies_pending(const pr__dpool *dp);

size_t pr__dpool_count(const pr__dpool *dp);
pr__dmsg *pr__dpool_msg(pr__dpool *dp, size_t i);
/* dm's k-th logged reject (k < dm->nrej). */
void pr__dpool_reject(const pr__dpool *dp, const pr__dmsg *dm, uint32_t k, pr__drej *out);

/* Append `nrows` decoded rows from dm's first on to dst: dm's, or those of
 * dm and the decoded messages after it in the same slot (their rows follow
 * each other: one copy for a run of messages). dst is the caller's block (same layout as the
 * scratch: the Criteo one, or a declared schema's jagged block with side
 * tables), meta included. PR_EFULL when they do not fit (rows, or a jagged
 * block's elements), PR_EINVAL when dst holds rows of other sparse encodings:
 * nothing copied then. PR_ENOMEM (side values). Messages of one slot must be
 * merged in order (a walking offset per feature). */
int pr__dpool_merge(pr__dpool *dp, pr_block *dst, const pr__dmsg *dm, uint32_t nrows);

#endif
