/*
 * vocab_int.h — internals shared by vocab/'s files (text, snapshot, journal,
 * the durable store and the shared log). Not part of the contract.
 *
 * The engine keeps the tables; these helpers read its spec the way every
 * vocabulary file needs it (profile base, eviction kinds, the next notice
 * number) and keep the open journal's marks in step when a restore (snapshot
 * load, text import, journal replay) changes a table behind its back.
 */
#ifndef PR_VOCAB_INT_H
#define PR_VOCAB_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_fs.h" /* pr_write_all, pr_fsync_dir_of */
#include "pr_vocab.h"

/* FNV-1a, 64 bits: file checksums (not security). */
#define PR__FNV_INIT 0xcbf29ce484222325ULL
static inline uint64_t pr__fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* First index handed to a value: 0 under dlrm, 2 under default. */
static inline int64_t pr__vbase(pr_vocab_profile p)
{
    return p == PR_VOCAB_DEFAULT ? 2 : 0;
}

static inline bool pr__has_vocab(const pr_engine *eng)
{
    return pr_spec_has_op(pr_engine_spec(eng), PR_OP_VOCAB);
}

/* Some column evicts (journal version 2, snapshot version 3). */
static inline bool pr__evicts(const pr_engine *eng)
{
    return pr_spec_has_eviction(pr_engine_spec(eng));
}

/* Some column evicts by event time, ttl_s (journal version 3, snapshot 4). */
static inline bool pr__event_ttl(const pr_engine *eng)
{
    const pr_pipeline_spec *spec = pr_engine_spec(eng);
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].eviction == PR_EVICT_TTL && spec->sparse[c].ttl_s)
            return true;
    return false;
}

/* Number the engine gives its next recycled-index notice. */
static inline uint64_t pr__notice_next(const pr_engine *eng)
{
    return pr_engine_vocab_recycled_total(eng) + 1;
}

/* One journal record in memory, whatever the version on disk (the layout
 * of versions 2-4 on disk, tick_ms last: vocab_journal.c). */
typedef struct pr__jrec {
    uint32_t kc; /* kind << 28 | column */
    uint32_t check;
    uint64_t value;
    int64_t index;
    uint64_t tick;
    uint64_t number;
    int64_t tick_ms;
} pr__jrec;
enum { PR__JR_ASSIGN = 0, PR__JR_COMMIT = 1 };
#define PR__JR_KIND(r) ((r)->kc >> 28)
#define PR__JR_COL(r)  ((r)->kc & 0x0fffffffu)

/* Apply a journal's complete records over the restored tables
 * (vocab_replay.c): append-only for a pipeline without eviction, whole
 * blocks for one with. Errors name the file and column. */
int pr__replay_append_only(pr_engine *eng, const char *path, const pr__jrec *recs, size_t n,
                           char *errstr, size_t errstr_size);
int pr__replay_blocks(pr_engine *eng, const char *path, const pr__jrec *recs, size_t n,
                      char *errstr, size_t errstr_size);

/* A restore changed column `col` (or every column): the open journal, if
 * any, starts its next append after the table's current size. */
void pr__journal_sync_col(pr_engine *eng, uint32_t col);

/* Tests only: the log reader applies no record at or past `offset` (it keeps
 * the first one until the limit moves), as if it were slow; INT64_MAX (the
 * default) holds nothing. Lets a test put a delivered proposal between
 * "in the log" and "applied" for as long as it needs (test_vocablog_ahead.c). */
void pr__vocablog_hold_from(pr_vocablog *vl, int64_t offset);

#endif
