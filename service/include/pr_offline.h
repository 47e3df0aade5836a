/*
 * pr_offline.h — the offline driver: raw Criteo TSV (file or stdin) through
 * the engine into .npy files. `piperec process` is a thin CLI over it.
 *
 * Output in DIR: dense.npy (float32 [N, n_dense]), sparse.npy (int32 or int64
 * [N, n_sparse], as pr_engine_sparse_width), labels.npy (int32 [N], when the
 * spec has a label), vocab/<col>.tsv (pr_engine_vocab_export) and rejects.tsv
 * (one line per rejected input line: "line<TAB>reason<TAB>detail<TAB>original
 * line", in line order, reasons named by pr_decode_reason_name). N counts
 * accepted rows only; row i of every array is the i-th accepted line.
 *
 * Shape of the run: the input is cut into chunks of whole lines; `threads`
 * decoder threads decode chunks into blocks in parallel, and the calling
 * thread hands the blocks to the engine strictly in input order and writes
 * the results, so output never depends on the thread count. With count_mode
 * two_pass (and min_count > 1) the input is read twice: a pass of
 * pr_engine_count, then the real pass; stdin is first spooled to an unlinked
 * temporary file for that. Regular files are mmap'd.
 *
 * Errors: 0 or a negative PR_E* code with the reason in errstr (PR_EIO with
 * the path and strerror for I/O; PR_EFULL when a vocabulary fills up).
 */
#ifndef PR_OFFLINE_H
#define PR_OFFLINE_H

#include <stdbool.h>
#include <stdint.h>

#include "pr_decode.h"
#include "pr_engine.h"

/* Default rows per block. Small on purpose: a block of 8192 Criteo rows is
 * ~5 MB (hex slots dominate), so the decoder's writes and the engine's reads
 * stay in L2/L3; 65536-row blocks measured ~1.5x slower end to end. */
#define PR_OFFLINE_BLOCK_ROWS 8192

typedef struct pr_offline_opts {
    const char *input;      /* path, or "-" for stdin */
    const char *output_dir; /* created when missing */
    int threads;            /* decoder threads, >= 1 */
    uint32_t block_rows;    /* rows per engine block; 0 = PR_OFFLINE_BLOCK_ROWS */
    bool progress;          /* progress line on stderr while running */
} pr_offline_opts;

typedef struct pr_offline_result {
    uint64_t lines;                      /* input lines seen */
    uint64_t rows;                       /* rows written */
    uint64_t rejected;                   /* lines rejected (all reasons) */
    uint64_t rejected_by[PR_DEC__COUNT]; /* by pr_decode_reason */
    uint64_t bytes;                      /* input bytes */
    double seconds;                      /* wall time of the whole run */
    uint8_t sparse_width;                /* 4 or 8 */
} pr_offline_result;

/* Run the whole job. `eopts` configures the engine (backend, threads). */
int pr_offline_run(const pr_pipeline_spec *spec, const pr_engine_opts *eopts,
                   const pr_offline_opts *opts, pr_offline_result *res, char *errstr,
                   size_t errstr_size);

#endif
