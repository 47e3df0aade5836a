/*
 * pr_backend.h — the backend interface (internal to fpga_engine/).
 *
 * pr_engine (engine.c) validates the spec and owns stats; a backend does the
 * work. Vocabulary files are vocab/'s (pr_vocab.h), through the engine's
 * primitives over vocab_read/vocab_load. Backends: cpu
 * (cpu_backend.c, default), hls-sim (hls/, the HLS kernel compiled as plain C
 * and called block by block as the host would call the device), xrt (xrt/,
 * Alveo cards). Each is one const pr_backend_ops table.
 *
 * Contract every backend keeps (tests/engine/test_backend_contract.c runs it
 * against each one): identical output for identical input streams; a rejected
 * row never touches vocabulary state; vocab_read returns entries in index
 * order; vocab_load followed by process continues exactly as the saved engine
 * would have.
 */
#ifndef PR_BACKEND_H
#define PR_BACKEND_H

#include "pr_engine.h"

typedef struct pr_backend pr_backend;             /* each backend defines its own struct */
typedef struct pr_backend_split pr_backend_split; /* its per-block split state */

/* A block's assignments and a column's clocks (pr_engine.h's vocabulary
 * primitives), under the names the backends use. */
typedef pr_vocab_assignment pr__vasg;
typedef pr_vocab_clock pr__vclock;

typedef struct pr_backend_ops {
    const char *name;
    /* Create backend state for a validated spec. On failure return a PR_E*
     * code and a reason in errstr; *out is untouched. */
    int (*new_)(const pr_pipeline_spec *spec, const pr_engine_opts *opts, pr_backend **out,
                char *errstr, size_t errstr_size);
    void (*free_)(pr_backend *be);
    /* Process one block; add operator times and value counts into st. */
    int (*process)(pr_backend *be, const pr_block *in, pr_out *out, pr_engine_stats *st,
                   char *errstr, size_t errstr_size);
    /* Two-pass counting (PR_COUNT_TWO_PASS). */
    int (*count)(pr_backend *be, const pr_block *in);
    int (*count_done)(pr_backend *be);
    uint64_t (*vocab_size)(const pr_backend *be, uint32_t col);
    int (*vocab_read)(const pr_backend *be, uint32_t col, pr_vocab_cb cb, void *opaque);
    /* vocab_read of different columns may run on several threads at once
     * (the CPU tables; not a kernel's, whose reads share one transfer
     * buffer). */
    bool vocab_read_concurrent;
    /* Replace column `col`'s state with n entries: assigned ones in index
     * order, then pending ones (index < 0). */
    int (*vocab_load)(pr_backend *be, uint32_t col, const pr_vocab_entry *e, size_t n);
    /* Optional (may be NULL): like vocab_read, but only the assigned entries
     * with index >= from_index, in index order. The vocabulary journal uses it
     * to find the indices a block handed out without walking the whole table;
     * without it the engine filters vocab_read. */
    int (*vocab_read_from)(const pr_backend *be, uint32_t col, int64_t from_index, pr_vocab_cb cb,
                           void *opaque);
    /* Optional, all three or none: a vocabulary decided outside the engine
     * (pr_engine_vocab_set_shared). vocab_misses reports every occurrence of
     * a value without an index; vocab_apply does `count` streaming
     * lookup-or-inserts of one value; vocab_freeze(true) makes processing
     * lookup-only. */
    int (*vocab_misses)(pr_backend *be, const pr_block *in, pr_vocab_miss_cb cb, void *opaque);
    /* Optional: vocab_misses for one column of keys after Hex2Int and
     * Modulus, any number of them (pr_engine_vocab_misses_keys). */
    int (*vocab_misses_keys)(pr_backend *be, uint32_t col, const uint64_t *keys, size_t n,
                             pr_vocab_miss_cb cb, void *opaque);
    int (*vocab_apply)(pr_backend *be, uint32_t col, uint64_t key, uint32_t count, int64_t *index);
    void (*vocab_freeze)(pr_backend *be, bool frozen);
    /* Optional, all three or none: bounded vocabularies (pr_vocab_eviction).
     * process() then appends the block's recycled indices to out->recycled
     * in (row, col) order with number 0 (the engine numbers them);
     * vocab_block_log gives column `col`'s assignments of the last process()
     * call, or of the last vocab_apply() on that column when one came after
     * it (valid until the next of either; none for a column that does not
     * evict);
     * vocab_clock/vocab_set_clock read and restore a column's clocks
     * (snapshots). vocab_read reports count, last_use and last_use_ms;
     * vocab_load takes them back and rebuilds the eviction order from them. */
    void (*vocab_block_log)(const pr_backend *be, uint32_t col, const pr__vasg **log, size_t *n);
    pr__vclock (*vocab_clock)(const pr_backend *be, uint32_t col);
    void (*vocab_set_clock)(pr_backend *be, uint32_t col, pr__vclock clock);
    /* Optional, all three or none: a shared vocabulary that evicts. Frozen
     * processing of a bounded column leaves its statistics and clock alone and
     * counts uses per slot instead; vocab_drain_usage reports and clears them
     * (pr_engine_vocab_drain_usage); vocab_touch records uses from the log
     * (pr_engine_vocab_touch); vocab_undecided_oov(true) makes frozen
     * processing map a bounded column's undecided values to OOV, adding them
     * to pr_engine_stats.undecided_oov. vocab_apply on a bounded column
     * evicts as processing would, its recycle reported by vocab_block_log. */
    int (*vocab_touch)(pr_backend *be, uint32_t col, uint64_t key, uint32_t count);
    int (*vocab_drain_usage)(pr_backend *be, pr_vocab_usage_cb cb, void *opaque);
    void (*vocab_undecided_oov)(pr_backend *be, bool on);
    /* Optional: serving (pr_engine_vocab_serve): every column frozen, and a
     * value without an index maps to OOV (profile dlrm: to `unseen`),
     * counted in pr_engine_stats.undecided_oov. For good. */
    void (*vocab_serve)(pr_backend *be, int64_t unseen);
    /* Optional, all five or none: a block in two halves (pr_engine_process_par
     * and _seq, pr_engine.h). split_new gives the backend's per-block state;
     * process_par returns 1 when it did the first half (then process_seq_col
     * for every sparse column, any order, columns on any threads, then
     * process_seq_end finish the block), 0 when the block needs the whole
     * process(); it only reads backend state that the second half does not
     * write, or writes with atomic stores (the vocabulary's known indices);
     * with `exclusive` (no second half runs meanwhile) it may also read
     * state the second half writes (hash-table vocabularies). */
    pr_backend_split *(*split_new)(const pr_backend *be);
    void (*split_free)(pr_backend_split *bs);
    int (*process_par)(const pr_backend *be, const pr_block *in, pr_out *out, pr_backend_split *bs,
                       bool exclusive);
    void (*process_seq_col)(pr_backend *be, const pr_block *in, pr_out *out, pr_backend_split *bs,
                            uint32_t col);
    int (*process_seq_end)(pr_backend *be, const pr_block *in, pr_out *out, pr_backend_split *bs,
                           pr_engine_stats *st, char *errstr, size_t errstr_size);
    /* process(), count() and vocab_misses() take jagged blocks (col_rows:
     * sparse column c holds col_rows[c] uint64 keys at stride scap). A backend
     * without it gets PR_ENOTSUP from pr_engine_process for such a block. */
    bool jagged;
} pr_backend_ops;

extern const pr_backend_ops pr__backend_cpu;
extern const pr_backend_ops pr__backend_hls_sim; /* fpga_engine/hls/ */
extern const pr_backend_ops pr__backend_xrt;     /* fpga_engine/xrt/ (only when built with XRT) */

/* Effective capacity of a sparse column (resolves capacity 0 = automatic). */
uint64_t pr__spec_col_capacity(const pr_pipeline_spec *spec, uint32_t col);

#endif
