/*
 * pr_vocab.h — the vocabulary's contract: where an index is made durable,
 * shared and evicted (docs/architecture.md, docs/vocab-log.md).
 *
 * The promise: once an index has gone out in a batch, its value keeps it for
 * the life of the pipeline's state, across restarts and across replicas.
 * The engine (pr_engine.h) executes the tables (lookup-or-insert, eviction
 * by the column's policy, recycled-index notices); this component keeps the
 * promise around it:
 *
 *   durable  — locally, every index a block hands out is appended to the
 *              journal and fdatasync'd before pr_engine_process returns
 *              (pr_vocab_journal_open installs the engine's block hook); a
 *              checkpoint writes a snapshot and truncates the journal;
 *              recovery is snapshot + journal replay;
 *   shared   — replicas agree through one Kafka log (pr_vocablog_*): no
 *              replica invents an index, each applies the log in order;
 *   evicted  — by the engine, in data order, deterministically; the journal
 *              or the log records every recycle with its notice number.
 *
 * Every vocabulary file format lives here: text export/import, the binary
 * snapshot and the journal.
 *
 * Threads: one driver thread per engine calls everything, except
 * pr_vocablog_get_stats, which any thread may call.
 *
 * Errors: 0 or a negative PR_E* code (pr_error.h) with a reason in errstr.
 */
#ifndef PR_VOCAB_H
#define PR_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_cfgmap.h"
#include "pr_engine.h"
#include "pr_error.h"
#include "pr_hist.h"

/* Keys of one sparse column to resolve, already through Hex2Int and Modulus:
 * any number, repeats allowed (a block's column is one case, the elements of
 * a jagged list feature another). Borrowed for the call. */
typedef struct pr_vocab_keys {
    uint32_t col;
    const uint64_t *key;
    size_t n;
} pr_vocab_keys;

/* ---------------------------------------------------------------- text files */

/* Write all vocabularies as text: one file per sparse column, DIR/<name>.tsv,
 * lines "index<TAB>value_hex<TAB>count", header comment first. A pipeline
 * that evicts also writes its eviction state: a "#! piperec-state
 * notice_next N clock R [event_ms E]" line and last_use[, last_use_ms]
 * columns (docs/formats.md), which pr_vocab_import restores. */
int pr_vocab_export(const pr_engine *eng, const char *dir, char *errstr, size_t errstr_size);
/* One column of pr_vocab_export into the existing directory `dir` (same
 * bytes). It only reads the engine: different columns may be exported from
 * several threads at once while nothing changes the engine, when
 * pr_engine_vocab_read_concurrent says the backend allows it. */
int pr_vocab_export_column(const pr_engine *eng, const char *dir, uint32_t col, char *errstr,
                           size_t errstr_size);

/* pr_vocab_export on several threads (issue 21, offline: the export after a
 * pass must not hold one core while the others wait). A job splits the
 * columns into tasks, largest column first; a column of more than
 * `piece_entries` entries (0: PR_VOCAB_EXPORT_PIECE when `threads` > 1, no
 * limit at 1) is cut into index ranges that are formatted apart into memory
 * and written to the file in order, so the bytes are pr_vocab_export's at
 * any thread count or piece size. A fixed piece size keeps the longest
 * task (~16K lines, a few ms) the same at every thread count. Create it
 * with the directory existing and nothing changing the engine until
 * pr_vocab_export_job_free; then call pr_vocab_export_job_work from up to
 * `threads` threads at once (when pr_engine_vocab_read_concurrent says the
 * backend allows it, else from one); each returns when no task is left, or
 * the job's first error (with its message) once one failed. The job keeps
 * `dir` (borrowed). */
#define PR_VOCAB_EXPORT_PIECE 16384
typedef struct pr_vocab_export_job pr_vocab_export_job;
int pr_vocab_export_job_new(const pr_engine *eng, const char *dir, int threads,
                            size_t piece_entries, pr_vocab_export_job **out, char *errstr,
                            size_t errstr_size);
int pr_vocab_export_job_work(pr_vocab_export_job *job, char *errstr, size_t errstr_size);
/* The longest single task (one column, or one piece of one) in ns: the
 * export's wall time on unlimited threads is at least this. */
int64_t pr_vocab_export_job_longest_ns(const pr_vocab_export_job *job);
void pr_vocab_export_job_free(pr_vocab_export_job *job);

/* Read vocabularies back from text (pr_vocab_export's format, or
 * another system's dictionary in it): DIR/<name>.tsv for every sparse column
 * (a missing file is an error; a file with only comments means an empty
 * column). Lines: "index<TAB>value_hex[<TAB>count]"; '#' lines and empty
 * lines are skipped; value_hex is the key after Hex2Int and Modulus (1..16
 * hex digits, below the column's modulus). Indices are kept exactly: they must
 * be contiguous from the profile's first index (0 for dlrm, 2 for default,
 * where 0 and 1 are reserved), in any line order, without duplicate values or
 * indices, and within capacity; index -1 (a value still below min_count) is
 * allowed only with min_count > 1 and count_mode streaming. New values then
 * get the indices after the largest imported one. Every file is checked before
 * anything is loaded; errors name file:line (PR_EBADREC for syntax, PR_EINVAL
 * for a bad mapping, PR_EFULL past capacity). Fails with PR_ESTATE when a
 * column already has entries (import into a fresh engine, before processing
 * and before pr_vocab_journal_open) and PR_ENOTSUP under count_mode
 * two_pass. A file with the eviction state (pr_vocab_export of an evicting
 * pipeline) also restores the column clocks, every value's last use and the
 * notice counter, so processing continues with the same indices and notice
 * numbers; it must fit this pipeline's eviction settings and every file must
 * carry the same counter (PR_EINVAL otherwise). Files without it import with
 * fresh statistics and the counter unchanged. Notices not yet known
 * delivered are not carried. Imported indices are not journaled: save a
 * snapshot after. */
int pr_vocab_import(pr_engine *eng, const char *dir, char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- snapshot and journal */

/* Binary snapshot of all vocabulary state (for crash recovery): written to a
 * temp file, fsync'd and renamed over `path`. pr_vocab_load restores it
 * into a fresh engine with the same spec; it fails with PR_EINVAL when the
 * snapshot's spec fingerprint differs. */
int pr_vocab_save(const pr_engine *eng, const char *path, char *errstr, size_t errstr_size);
int pr_vocab_load(pr_engine *eng, const char *path, char *errstr, size_t errstr_size);

/* Vocabulary journal (crash-safe index stability between snapshots). After
 * pr_vocab_journal_open, every index pr_engine_process hands out is
 * appended to the journal as (column, value, index), and the file is
 * fdatasync'd before pr_engine_process returns (only when something was
 * appended), so no index leaves the engine before it is durable. Recovery:
 * pr_vocab_load(snapshot) then pr_vocab_journal_replay(journal)
 * restores every index ever handed out (a torn last record is ignored).
 * A missing journal file is created; an existing one must carry the same spec
 * fingerprint (PR_EINVAL otherwise). Counts of values still below min_count
 * are not journaled: after a crash they restart from the snapshot's counts.
 * pr_vocab_checkpoint saves a snapshot (as pr_vocab_save) and
 * then truncates the journal at `journal_path` (NULL: the open journal) to
 * its header. pr_engine_free closes the journal. */
int pr_vocab_journal_open(pr_engine *eng, const char *path, char *errstr, size_t errstr_size);
int pr_vocab_journal_replay(pr_engine *eng, const char *path, char *errstr, size_t errstr_size);
int pr_vocab_checkpoint(pr_engine *eng, const char *snapshot_path, const char *journal_path,
                        char *errstr, size_t errstr_size);
void pr_vocab_journal_close(pr_engine *eng);

/* Bounded vocabularies (pr_vocab_eviction) and persistence. Snapshots keep
 * the usage statistics (last_use, last_use_ms, lfu counts, each column's
 * record and event clocks) and the notice counter, so loading one and
 * processing the same blocks gives the same indices and notices as the saved
 * engine would have. The journal (a second record format, "PRVJRNL2", or
 * "PRVJRNL3" when some column evicts by ttl_s, used only when a column
 * evicts) records every index handed out or recycled, with its notice number
 * and the clocks of the assignment, and one commit record per block; replay
 * stops at the last complete block. Replay restores the mapping exactly and
 * queues the notices it replayed: the next pr_engine_process puts them first
 * in pr_out.recycled (row 0, same numbers), so a consumer that lost them with
 * an unacknowledged batch gets them again (apply each number once). Usage
 * statistics of values looked up after the snapshot are not journaled (only
 * assignments are): after a replay later eviction choices follow the
 * snapshot's statistics plus assignments (and the clocks those carry). */

/* Snapshots that carry the caller's position with them (e.g. the log offset
 * the vocabulary reflects), written and read in one atomic file: `tag` is
 * up to PR_SNAPSHOT_TAG_MAX opaque bytes. pr_vocab_load_tagged fills
 * tag (capacity tag_cap) and *tag_len (0 for an untagged snapshot). */
#define PR_SNAPSHOT_TAG_MAX 4096
int pr_vocab_save_tagged(const pr_engine *eng, const char *path, const void *tag, uint32_t tag_len,
                         char *errstr, size_t errstr_size);
int pr_vocab_load_tagged(pr_engine *eng, const char *path, void *tag, uint32_t tag_cap,
                         uint32_t *tag_len, char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- shared log
 *
 * Every replica of a pipeline keeps its own engine vocabulary, but none of
 * them invents an index: a value an engine does not know is appended to a
 * single-partition topic (a Proposals record, schemas/vocablog.proto), and
 * every replica applies the log's records in log order to its engine with
 * pr_engine_vocab_apply. Because the apply is a deterministic function of
 * the records in order, every replica computes the same (column, value) ->
 * index mapping: the first proposal of a value decides its index (the one
 * that brings its count to min_count when min_count > 1); later duplicates
 * change nothing. Kafka is the sequencer; nothing else coordinates.
 *
 * Per block, the driver (the pipeline thread) calls pr_vocablog_resolve
 * until it returns 0, then processes the block with pr_engine_process (the
 * engine is in shared mode: lookups only). Values the engine already knows
 * cost no log round trip; a block with new values waits until the log has
 * applied its proposals (read-your-writes), so no batch ever carries an
 * index the log did not decide.
 *
 * Startup (pr_vocablog_new): checks the topic (exists, one partition), loads
 * the snapshot (state dir) with the log position it reflects, checks that
 * position against the log (records deleted by retention, or a recreated
 * topic, are errors), writes the Settings record when the log is empty,
 * checks this pipeline's settings against the log's first Settings record,
 * and reads the log up to its end.
 *
 * Threads: one driver thread calls everything except pr_vocablog_get_stats,
 * which any thread may call. The engine is borrowed and driven only from the
 * driver thread.
 */

/* A pipeline's `vocab_log` section (keys, defaults and docs:
 * pr_vocablog_cfgmap, vocablog_cfg.c). */
typedef struct pr_vocablog_cfg {
    bool enabled;               /* the section is present */
    const char *topic;          /* required: one partition, unlimited retention */
    pr_kv_list properties;      /* librdkafka properties; the loader copies the source's
                                 * when none are given */
    int64_t startup_timeout_ms; /* how long startup waits for the log; default 60000 */
    int64_t usage_interval_ms;  /* evicting columns: Usage records this often; default 1000 */
} pr_vocablog_cfg;

extern const pr_cfgmap pr_vocablog_cfgmap;

typedef struct pr_vocablog_opts {
    const pr_vocablog_cfg *cfg; /* borrowed for the call */
    const char *pipeline;       /* for messages and the Settings record */
    const char *replica;        /* written into the records (audit) */
    uint64_t epoch;             /* this start's epoch, written into proposals */
    pr_engine *eng;             /* borrowed for life; put in shared mode */
    const char *snapshot_path;  /* NULL: no snapshot (rebuild from the log on every start) */
    bool read_only;             /* read the log, never write it (no Settings record into an
                                 * empty log): `vocab export --from-log` */
} pr_vocablog_opts;

typedef struct pr_vocablog pr_vocablog;

/* Connect, check, load, catch up (see the file comment). On failure *out is
 * NULL and errstr says what is wrong and what to do. */
int pr_vocablog_new(const pr_vocablog_opts *o, pr_vocablog **out, char *errstr, size_t errstr_size);
void pr_vocablog_free(pr_vocablog *vl);

/* Decide the new values of block `in`: 0 when it may be processed now;
 * PR_EAGAIN while its proposals wait for the log (call again with the same,
 * unchanged block: the first call proposes, the later ones only wait, each
 * for at most timeout_ms); another PR_E* code is fatal for the pipeline
 * (e.g. a dlrm column full, a settings conflict). */
int pr_vocablog_resolve(pr_vocablog *vl, const pr_block *in, int timeout_ms, char *errstr,
                        size_t errstr_size);

/* pr_vocablog_resolve for columns of keys already through Hex2Int and
 * Modulus (pr_vocab_keys: any number per column, e.g. a list feature's
 * elements); the same waiting rules, with the same, unchanged columns on
 * every call. Needs a backend with pr_engine_vocab_misses_keys. */
int pr_vocablog_resolve_keys(pr_vocablog *vl, const pr_vocab_keys *cols, size_t n_cols,
                             int timeout_ms, char *errstr, size_t errstr_size);

/* Forget a block that waits (the driver drops it, e.g. at shutdown). Its
 * proposals still reach the log and are applied like any others. */
void pr_vocablog_abandon(pr_vocablog *vl);

/* While the current block waits (PR_EAGAIN from pr_vocablog_resolve), the
 * block that will be resolved next may have its new values proposed already
 * (the driver calls this with the engine idle, on the thread that resolves):
 * rows [from_row, rows) of `next` (from_row is rounded down to a multiple of
 * 64; rows before it were proposed ahead by an earlier call). Nothing waits
 * here; when `next` comes to pr_vocablog_resolve, it first lets the log
 * decide these proposals, then proposes only what is still unknown. 0 when
 * the rows were taken (the next call starts after them). PR_EAGAIN when the
 * waiting block has no proposal of its own in the log yet (it still waits
 * for its own look-ahead records, or was abandoned): nothing is proposed,
 * since `next`'s values must follow all of its values, and the driver asks
 * again with the same from_row at a later turn. A no-op answering 0 when
 * proposals are not idempotent (a column with min_count > 1 counts
 * occurrences; an evicting column needs rounds), or for a jagged `next`
 * (col_rows set: no row view of its columns): such a block proposes all its
 * values on its own turn. */
int pr_vocablog_propose_ahead(pr_vocablog *vl, const pr_block *next, uint32_t from_row,
                              char *errstr, size_t errstr_size);

/* Apply what the log holds now (other replicas' values), waiting up to
 * timeout_ms for the first record. Errors as pr_vocablog_resolve. */
int pr_vocablog_poll(pr_vocablog *vl, int timeout_ms, char *errstr, size_t errstr_size);

/* Save the engine's vocabulary with the log position it reflects (atomic;
 * the next start reads only the log after it). No-op without a snapshot
 * path. */
int pr_vocablog_checkpoint(pr_vocablog *vl, char *errstr, size_t errstr_size);

/* Counters for metrics; any thread. */
typedef struct pr_vocablog_stats {
    int64_t applied_offset;    /* next log offset to apply */
    int64_t end_offset;        /* log end (high watermark) last seen; -1 unknown */
    uint64_t records_applied;  /* records read and applied (or skipped) */
    uint64_t values_applied;   /* proposal entries applied */
    uint64_t indices_assigned; /* indices the log assigned (all replicas) */
    uint64_t proposals;        /* entries this replica proposed */
    uint64_t proposal_records; /* records this replica appended */
    uint64_t blocks_waited;    /* blocks that had to wait for the log */
    uint64_t ahead_values;     /* entries proposed ahead, for the next block (in proposals) */
    uint64_t corrupt_records;  /* records (or entries) skipped: undecodable or invalid */
    uint64_t produce_errors;   /* proposals that failed and were sent again */
    uint64_t consume_errors;   /* fetch errors (broker down...) */
    uint64_t values_waiting;   /* distinct values of the waiting block */
    uint64_t usage_records;    /* Usage records this replica appended (evicting columns) */
    uint64_t usage_values;     /* entries in them */
    uint64_t rounds_exhausted; /* blocks whose values kept being evicted while they waited:
                                * processed with those values as OOV */
    bool up;                   /* the log answered in the last few seconds */
    pr_hist_snapshot wait;     /* seconds from proposal to decided, per waiting block */
} pr_vocablog_stats;

void pr_vocablog_get_stats(pr_vocablog *vl, pr_vocablog_stats *st);

/* ---------------------------------------------------------------- the store
 *
 * One interface over the two ways to keep the promise; a driver holds a
 * pr_vocab_store and never asks which:
 *
 *   local  — the engine decides while it processes; the journal (the
 *            engine's block hook) makes each block's new indices durable
 *            before pr_engine_process returns; checkpoints write a snapshot
 *            and truncate the journal (state dir: <pipeline>.vocab,
 *            <pipeline>.journal). Without a state dir nothing persists.
 *   shared — the Kafka log decides (pr_vocablog_*); the engine only looks
 *            up; checkpoints write a snapshot tagged with the log position
 *            (<pipeline>.vocablog).
 *
 * Per block the driver calls resolve until it returns 0 (PR_EAGAIN: wait,
 * call again with the same block), then pr_engine_process, then releases
 * the output; commit tells the store which recycled-index notices reached
 * their consumer. checkpoint on its timer and at shutdown, poll while idle.
 *
 * Threads: the driver thread, like the engine; pr_vocab_store_log_stats
 * from any thread. */
typedef struct pr_vocab_store pr_vocab_store;

typedef struct pr_vocab_store_opts {
    pr_engine *eng;             /* borrowed for the store's life (free the store first) */
    const char *pipeline;       /* names state files and messages */
    const char *state_dir;      /* NULL: nothing persists across starts */
    const char *seed;           /* transform.vocab.seed (a pr_vocab_export dir) or NULL:
                                 * used while the state dir holds no vocabulary */
    const pr_vocablog_cfg *log; /* enabled: shared through the log (borrowed for life);
                                 * NULL or disabled: local */
    const char *replica;        /* shared: written into the log's records */
} pr_vocab_store_opts;

/* The state dir's file names for a pipeline: the snapshot ("<dir>/<p>.vocab",
 * or "<dir>/<p>.vocablog" for a shared vocabulary, which keeps no journal)
 * and the journal ("<dir>/<p>.journal"). */
void pr_vocab_state_paths(const char *dir, const char *pipeline, bool shared, char *snap,
                          size_t snap_size, char *journal, size_t journal_size);

/* Create (no I/O). *out is NULL on failure. */
int pr_vocab_store_new(const pr_vocab_store_opts *o, pr_vocab_store **out, char *errstr,
                       size_t errstr_size);
void pr_vocab_store_free(pr_vocab_store *vs);

/* Bring the engine's vocabulary back: local = seed (first start only),
 * snapshot, journal replay, journal open and a fresh snapshot; shared =
 * pr_vocablog_new (epoch: this start's, written into proposals). */
int pr_vocab_store_recover(pr_vocab_store *vs, uint64_t epoch, char *errstr, size_t errstr_size);

/* Decide the new values of block `in` before it is processed: 0 ready,
 * PR_EAGAIN wait (at most timeout_ms per call; call again with the same,
 * unchanged block), another PR_E* code is fatal for the pipeline. Always 0
 * for a local store. */
int pr_vocab_store_resolve(pr_vocab_store *vs, const pr_block *in, int timeout_ms, char *errstr,
                           size_t errstr_size);
/* The same for columns of keys already through Hex2Int and Modulus, of any
 * length (e.g. the elements of jagged list features). */
int pr_vocab_store_resolve_keys(pr_vocab_store *vs, const pr_vocab_keys *cols, size_t n_cols,
                                int timeout_ms, char *errstr, size_t errstr_size);
/* While a block waits, propose the next one's values ahead
 * (pr_vocablog_propose_ahead: 0 the rows were taken, PR_EAGAIN not yet, ask
 * again from the same row); a no-op answering 0 for a local store. */
int pr_vocab_store_propose_ahead(pr_vocab_store *vs, const pr_block *next, uint32_t from_row,
                                 char *errstr, size_t errstr_size);
/* Forget a waiting block (dropped by the driver). */
void pr_vocab_store_abandon(pr_vocab_store *vs);

/* Every recycled-index notice numbered below delivered_floor reached its
 * consumer (its batch was acknowledged): snapshots stop keeping them
 * (pr_engine_vocab_notices_delivered). */
void pr_vocab_store_commit(pr_vocab_store *vs, uint64_t delivered_floor);

/* Has somewhere to checkpoint to (a state dir, after recover). */
bool pr_vocab_store_persistent(const pr_vocab_store *vs);
/* Snapshot now (local: then truncate the journal; shared: with the log
 * position). No-op when not persistent. */
int pr_vocab_store_checkpoint(pr_vocab_store *vs, char *errstr, size_t errstr_size);
/* Apply what others decided meanwhile (shared: the log's new records,
 * waiting up to timeout_ms). 0 at once for a local store. */
int pr_vocab_store_poll(pr_vocab_store *vs, int timeout_ms, char *errstr, size_t errstr_size);

/* The log's counters (true), or false for a local store (or NULL). */
bool pr_vocab_store_log_stats(pr_vocab_store *vs, pr_vocablog_stats *st);

#endif
