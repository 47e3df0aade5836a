/*
 * pr_npy.h — numpy .npy (format version 1.0) files: a streaming writer, a
 * whole-array writer and a small reader (for tests and tools).
 *
 * Arrays are float32, int32 or int64, little-endian, of shape [N] (cols == 0)
 * or [N, cols]. The engine produces column-major tensors (column c of a block
 * at data[c*stride + r]); there are two ways to store them:
 *
 *   - pr_npy_write_array(..., fortran = true): the whole column-major array at
 *     once, header 'fortran_order': True; np.load gives shape [N, cols].
 *   - the streaming writer (pr_npy_open/append/close): N is not known until
 *     the end and a Fortran-order file stores all of column 0 first, so it
 *     cannot be streamed. The writer transposes each appended block into C
 *     order ('fortran_order': False) instead, which is also the layout
 *     DLRM/TorchRec loaders expect. The header is reserved with room for any
 *     N and rewritten with the final shape at close.
 *
 * Threads: a writer is used by one thread at a time (a PR_NPY_DIRECT writer
 * also runs its own I/O thread, joined at close or abort). Errors: 0 or a negative
 * PR_E* code with a reason (path and strerror) in errstr.
 */
#ifndef PR_NPY_H
#define PR_NPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_engine.h" /* pr_fside (the offline layout writer) */
#include "pr_error.h"

typedef enum pr_npy_dtype {
    PR_NPY_F32 = 0, /* '<f4' */
    PR_NPY_I32 = 1, /* '<i4' */
    PR_NPY_I64 = 2, /* '<i8' */
} pr_npy_dtype;

/* Bytes per element of a dtype. */
size_t pr_npy_dtype_size(pr_npy_dtype dt);

typedef struct pr_npy_writer pr_npy_writer;

/* Create (truncate) `path` for an array of `cols` columns (0 = 1-D). */
int pr_npy_open(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols, char *errstr,
                size_t errstr_size);

/* pr_npy_open with flags:
 *   PR_NPY_DIRECT: write the data with O_DIRECT (whole 4 KiB blocks from the
 *   writer's buffer; the last partial block and the header buffered, at
 *   close), which spares the kernel filling the page cache with a file
 *   nobody reads back soon. Each flush then waits for the device. Buffered
 *   writes instead, silently, where O_DIRECT is refused (not a regular file,
 *   a filesystem without it), and from pr_npy_sync on.
 * The file's bytes are the same with or without flags. */
#define PR_NPY_DIRECT 0x1u
int pr_npy_open_flags(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols,
                      unsigned flags, char *errstr, size_t errstr_size);

/* Append `rows` rows given column-major: element (r, c) at
 * data[c*stride + r] (in elements of the writer's dtype; stride >= rows).
 * For a 1-D writer this is just `rows` contiguous elements. */
int pr_npy_append_cols(pr_npy_writer *w, const void *data, size_t stride, uint32_t rows,
                       char *errstr, size_t errstr_size);

/* The transpose pr_npy_append_cols does, on its own: `rows` rows of
 * column-major `src` (element (r, c) at src[c*stride + r]) into row-major
 * `dst` ([rows][cols]), for a caller that transposes on several threads
 * and appends the result with pr_npy_append_rows (same bytes). Any thread. */
void pr_npy_transpose(void *dst, const void *src, size_t stride, uint32_t rows, uint32_t cols,
                      pr_npy_dtype dt);

/* Append `rows` rows given row-major (C order): element (r, c) at data[r*cols + c]. */
int pr_npy_append_rows(pr_npy_writer *w, const void *data, uint32_t rows, char *errstr,
                       size_t errstr_size);

uint64_t pr_npy_rows(const pr_npy_writer *w);

/* Positional writes, for a caller whose rows are ready out of order on
 * several threads but whose places in the file are known (a prefix sum of
 * row counts): pr_npy_begin_positional before anything is appended (it
 * turns O_DIRECT off: rows land at any offset, so writes go through the
 * page cache), then pr_npy_pwrite_rows from any threads at once, rows
 * given row-major, each range written once; pr_npy_set_rows(total) before
 * close, which writes the header for that many rows. Do not mix with the
 * append calls. Same bytes as appending the rows in order. */
int pr_npy_begin_positional(pr_npy_writer *w, char *errstr, size_t errstr_size);
int pr_npy_pwrite_rows(pr_npy_writer *w, uint64_t row0, const void *data, uint32_t rows,
                       char *errstr, size_t errstr_size);
void pr_npy_set_rows(pr_npy_writer *w, uint64_t rows);

/* Make what was appended durable: flush, write the header with the rows so
 * far, fsync. A process killed afterwards leaves a file that numpy loads
 * with at least those rows (data appended later lies beyond the header's
 * shape). */
int pr_npy_sync(pr_npy_writer *w, char *errstr, size_t errstr_size);

/* Continue a file this writer made: check its header (dtype, width), cut it
 * to its first `keep_rows` rows and append after them. PR_EINVAL when the
 * file is not such a file or holds fewer rows. */
int pr_npy_open_append(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols,
                       uint64_t keep_rows, char *errstr, size_t errstr_size);

/* Flush, write the final header, close and free. The writer is freed even on
 * failure. */
int pr_npy_close(pr_npy_writer *w, char *errstr, size_t errstr_size);

/* Close, free and delete the file (error paths). NULL is fine. */
void pr_npy_abort(pr_npy_writer *w);

/* Write a whole array: `n` rows of `cols` columns (0 = 1-D), column-major
 * with 'fortran_order': True when `fortran`, else row-major. */
int pr_npy_write_array(const char *path, pr_npy_dtype dt, const void *data, uint64_t n,
                       uint32_t cols, bool fortran, char *errstr, size_t errstr_size);

/* ---------------------------------------------------------------- jagged set (npy_jagged.c)
 *
 * The offline layout of a declared feature schema (issue 20), and its one
 * writer: `piperec process`, the files sink and `piperec consume --output`
 * all write it through this set, so the same rows give the same bytes:
 *   DIR/labels.npy                  float32 [N, L]   (only when L > 0)
 *   DIR/dense.npy                   float32 [N, D]   (only when D > 0)
 *   DIR/sparse/<name>.values.npy    int64 [sum of lengths], row-major values
 *   DIR/sparse/<name>.lengths.npy   int32 [N], values of each row
 *   DIR/sparse/<name>.weights.npy   float32 [sum of lengths], a weighted
 *                                   feature's weights (pr_npy_jagged_weigh)
 * one values/lengths pair per sparse or list feature, in schema order (a
 * single-valued feature has length 1 in every row). Vocabularies, rejects
 * and notices are the caller's (as for the Criteo layout). */
typedef struct pr_npy_jagged pr_npy_jagged;

/* Create DIR and DIR/sparse and the files (names: the features' names,
 * which must be usable as file names). With `resume`, continue the files a
 * previous set left instead, cut back to their first keep_rows rows (each
 * values file to the sum of those rows' lengths). */
int pr_npy_jagged_open(pr_npy_jagged **out, const char *dir, uint16_t n_labels, uint16_t n_dense,
                       uint16_t n_feat, const char *const *names, bool resume, uint64_t keep_rows,
                       char *errstr, size_t errstr_size);
/* pr_npy_jagged_open with pr_npy_open_flags' flags (PR_NPY_DIRECT) for the
 * files it creates (a resumed file is written buffered); same bytes. */
int pr_npy_jagged_open_flags(pr_npy_jagged **out, const char *dir, uint16_t n_labels,
                             uint16_t n_dense, uint16_t n_feat, const char *const *names,
                             bool resume, uint64_t keep_rows, unsigned flags, char *errstr,
                             size_t errstr_size);
/* Give the features with weighted[f] a weights file (new, or with `resume`
 * continued at the set's kept rows' value count), before anything is
 * appended. */
int pr_npy_jagged_weigh(pr_npy_jagged *j, const uint8_t *weighted, bool resume, char *errstr,
                        size_t errstr_size);
/* Append `rows` rows: labels [rows][n_labels] and dense [rows][n_dense]
 * row-major, lengths [n_feat][rows] and values key-major (feature 0's
 * values, then feature 1's ...), as in a jagged pr_batch. */
int pr_npy_jagged_append(pr_npy_jagged *j, uint32_t rows, const float *labels, const float *dense,
                         const int32_t *lengths, const int64_t *values, char *errstr,
                         size_t errstr_size);
/* The same with the batch's weights (float32 beside values, key-major; NULL
 * = none, an error when the set has a weighted feature). */
int pr_npy_jagged_append_weighted(pr_npy_jagged *j, uint32_t rows, const float *labels,
                                  const float *dense, const int32_t *lengths, const int64_t *values,
                                  const float *weights, char *errstr, size_t errstr_size);
/* Append rows [r0, r0 + rows) of the engine's side tables `side` (shaped
 * n_labels, n_dense, n_feat as the set; values of a feature start after the
 * lengths of rows before r0). PR_EINVAL for another shape. */
int pr_npy_jagged_append_side(pr_npy_jagged *j, const pr_fside *side, uint32_t r0, uint32_t rows,
                              char *errstr, size_t errstr_size);
/* Positional writes (as pr_npy_begin_positional, for every file of a new
 * set, before anything is appended), for a caller whose rows are ready out
 * of order on several threads but whose places are known (prefix sums of
 * row counts and of each feature's value counts): rows [0, rows) of `side`
 * at output row row0, feature f's values at value val0[f], from any threads
 * at once, each range written once; then pr_npy_jagged_set_rows(total rows,
 * [n_feat] total values) before close. Same bytes as appending in order. */
int pr_npy_jagged_begin_positional(pr_npy_jagged *j, char *errstr, size_t errstr_size);
int pr_npy_jagged_pwrite_side(pr_npy_jagged *j, const pr_fside *side, uint64_t row0,
                              const uint64_t *val0, uint32_t rows, char *errstr,
                              size_t errstr_size);
void pr_npy_jagged_set_rows(pr_npy_jagged *j, uint64_t rows, const uint64_t *n_values);
/* Rows in the files (kept rows of a resumed set included). */
uint64_t pr_npy_jagged_rows(const pr_npy_jagged *j);
/* pr_npy_sync of every file. */
int pr_npy_jagged_sync(pr_npy_jagged *j, char *errstr, size_t errstr_size);
/* Close every file (and with `durable` fsync them and DIR/sparse); frees j. */
int pr_npy_jagged_close(pr_npy_jagged *j, bool durable, char *errstr, size_t errstr_size);
/* Delete the files (error paths) and free j. NULL is fine. */
void pr_npy_jagged_abort(pr_npy_jagged *j);

/* A loaded array: data holds n*cols (n for 1-D) elements in the file's order. */
typedef struct pr_npy_array {
    pr_npy_dtype dtype;
    int ndim;      /* 1 or 2 */
    uint64_t n;    /* shape[0] */
    uint32_t cols; /* shape[1]; 0 when ndim == 1 */
    bool fortran;
    void *data;
} pr_npy_array;

/* Read a .npy written by numpy or by this writer (v1.0/2.0, '<f4' '<i4'
 * '<i8', 1-D or 2-D). Free with pr_npy_array_fini. */
int pr_npy_read(const char *path, pr_npy_array *a, char *errstr, size_t errstr_size);
void pr_npy_array_fini(pr_npy_array *a);

/* Element (r, c) of a loaded array widened to double, whatever its order. */
double pr_npy_get(const pr_npy_array *a, uint64_t r, uint32_t c);

#endif
