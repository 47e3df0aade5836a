/*
 * npy_jagged.c — a declared schema's offline layout (issue 20) as a set of
 * streaming .npy writers (contract: pr_npy.h, "jagged set"):
 *
 *     DIR/labels.npy                  float32 [N, n_labels]
 *     DIR/dense.npy                   float32 [N, n_dense]
 *     DIR/sparse/<name>.values.npy    int64   [sum of lengths]
 *     DIR/sparse/<name>.lengths.npy   int32   [N]
 *     DIR/sparse/<name>.weights.npy   float32 [sum of lengths]  (weighted features)
 *
 * (labels.npy / dense.npy only when the schema has labels / dense
 * features). This is the one writer of that layout: `piperec process`
 * (from the engine's side tables, pr_npy_jagged_append_side), the files sink
 * (one set per roll) and `piperec consume --output` (from jagged batches,
 * pr_npy_jagged_append) all write through it, so their files are the same
 * bytes for the same rows. Row-major tensors go in as they are; each
 * feature's values are a slice of the batch's key-major values, or of the
 * side table's per-feature values. Resuming cuts every
 * file back to a row count: the values file to the sum of the kept rows'
 * lengths, read back from the lengths file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_npy.h"

struct pr_npy_jagged {
    char dir[4096];
    uint16_t n_labels, n_dense, n_feat;
    char **names;
    unsigned flags; /* pr_npy_open_flags, for new files */
    uint64_t rows;
    pr_npy_writer *labels, *dense;
    pr_npy_writer **values, **lengths; /* [n_feat] */
    pr_npy_writer **weights;           /* [n_feat]: NULL for an unweighted feature */
    uint8_t *weighted;                 /* [n_feat]: 1 = has a weights file (kept past close) */
};

static bool pr__name_ok(const char *s)
{
    return s && *s && *s != '.' && !strchr(s, '/') && strlen(s) < 200;
}

static int pr__path_of(const pr_npy_jagged *j, int f, const char *what, char *p, size_t n)
{
    if (f < 0)
        return snprintf(p, n, "%s/%s.npy", j->dir, what);
    return snprintf(p, n, "%s/sparse/%s.%s.npy", j->dir, j->names[f], what);
}

/* One file: new, or continued at keep rows. */
static int pr__open_one(pr_npy_jagged *j, pr_npy_writer **w, int f, const char *what,
                        pr_npy_dtype dt, uint32_t cols, bool resume, uint64_t keep, char *errstr,
                        size_t es)
{
    char p[4400];
    pr__path_of(j, f, what, p, sizeof(p));
    return resume ? pr_npy_open_append(w, p, dt, cols, keep, errstr, es)
                  : pr_npy_open_flags(w, p, dt, cols, j->flags, errstr, es);
}

/* Values to keep of feature f: the sum of its first `rows` lengths. */
static int pr__kept_values(pr_npy_jagged *j, int f, uint64_t rows, uint64_t *sum, char *errstr,
                           size_t es)
{
    char p[4400];
    pr__path_of(j, f, "lengths", p, sizeof(p));
    pr_npy_array a;
    int rc = pr_npy_read(p, &a, errstr, es);
    if (rc < 0)
        return rc;
    *sum = 0;
    if (a.dtype != PR_NPY_I32 || a.ndim != 1 || a.n < rows)
        rc = pr_seterr(errstr, es, PR_EINVAL, "%s: not int32 [>= %llu]", p,
                       (unsigned long long)rows);
    for (uint64_t r = 0; rc == 0 && r < rows; r++)
        *sum += (uint64_t)((const int32_t *)a.data)[r];
    pr_npy_array_fini(&a);
    return rc;
}

static int pr__open_all(pr_npy_jagged *j, bool resume, uint64_t keep, char *errstr, size_t es)
{
    int rc;
    if ((j->n_labels && (rc = pr__open_one(j, &j->labels, -1, "labels", PR_NPY_F32, j->n_labels,
                                           resume, keep, errstr, es)) < 0) ||
        (j->n_dense && (rc = pr__open_one(j, &j->dense, -1, "dense", PR_NPY_F32, j->n_dense, resume,
                                          keep, errstr, es)) < 0))
        return rc;
    for (int f = 0; f < j->n_feat; f++) {
        uint64_t nv = 0;
        if (resume && (rc = pr__kept_values(j, f, keep, &nv, errstr, es)) < 0)
            return rc;
        if (!resume) { /* pr_npy_jagged_weigh makes it again for a weighted feature: never
                        * an earlier run's weights beside these values */
            char p[4400];
            pr__path_of(j, f, "weights", p, sizeof(p));
            unlink(p);
        }
        if ((rc = pr__open_one(j, &j->lengths[f], f, "lengths", PR_NPY_I32, 0, resume, keep, errstr,
                               es)) < 0 ||
            (rc = pr__open_one(j, &j->values[f], f, "values", PR_NPY_I64, 0, resume, nv, errstr,
                               es)) < 0)
            return rc;
    }
    return 0;
}

static void pr__free_set(pr_npy_jagged *j)
{
    for (uint16_t f = 0; j->names && f < j->n_feat; f++)
        free(j->names[f]);
    free(j->names);
    free(j->values);
    free(j->lengths);
    free(j->weights);
    free(j->weighted);
    free(j);
}

int pr_npy_jagged_open(pr_npy_jagged **out, const char *dir, uint16_t n_labels, uint16_t n_dense,
                       uint16_t n_feat, const char *const *names, bool resume, uint64_t keep_rows,
                       char *errstr, size_t es)
{
    return pr_npy_jagged_open_flags(out, dir, n_labels, n_dense, n_feat, names, resume, keep_rows,
                                    0, errstr, es);
}

int pr_npy_jagged_open_flags(pr_npy_jagged **out, const char *dir, uint16_t n_labels,
                             uint16_t n_dense, uint16_t n_feat, const char *const *names,
                             bool resume, uint64_t keep_rows, unsigned flags, char *errstr,
                             size_t es)
{
    *out = NULL;
    for (uint16_t f = 0; f < n_feat; f++)
        if (!pr__name_ok(names[f]))
            return pr_seterr(errstr, es, PR_EINVAL,
                             "feature name '%s' cannot name a file (empty, starts with '.', has "
                             "'/' or is too long)",
                             names[f] ? names[f] : "");
    pr_npy_jagged *j = calloc(1, sizeof(*j));
    if (!j)
        return pr_seterr(errstr, es, PR_ENOMEM, "out of memory");
    snprintf(j->dir, sizeof(j->dir), "%s", dir);
    j->n_labels = n_labels;
    j->n_dense = n_dense;
    j->n_feat = n_feat;
    j->flags = flags;
    j->rows = resume ? keep_rows : 0;
    size_t nf = n_feat ? n_feat : 1;
    j->names = calloc(nf, sizeof(char *));
    j->values = calloc(nf, sizeof(*j->values));
    j->lengths = calloc(nf, sizeof(*j->lengths));
    j->weights = calloc(nf, sizeof(*j->weights));
    j->weighted = calloc(nf, 1);
    bool ok = j->names && j->values && j->lengths && j->weights && j->weighted;
    for (uint16_t f = 0; ok && f < n_feat; f++)
        ok = (j->names[f] = strdup(names[f])) != NULL;
    if (!ok) {
        pr__free_set(j);
        return pr_seterr(errstr, es, PR_ENOMEM, "out of memory");
    }
    char p[4400];
    snprintf(p, sizeof(p), "%s/sparse", dir);
    if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || (mkdir(p, 0755) < 0 && errno != EEXIST)) {
        int e = errno;
        pr__free_set(j);
        return pr_seterr(errstr, es, PR_EIO, "cannot create %s: %s", p, strerror(e));
    }
    int rc = pr__open_all(j, resume, keep_rows, errstr, es);
    if (rc < 0) {
        pr_npy_jagged_abort(j);
        return rc;
    }
    *out = j;
    return 0;
}

int pr_npy_jagged_weigh(pr_npy_jagged *j, const uint8_t *weighted, bool resume, char *errstr,
                        size_t es)
{
    int rc;
    for (int f = 0; weighted && f < j->n_feat; f++) {
        if (!weighted[f] || j->weights[f])
            continue;
        uint64_t nv = 0;
        if (resume && (rc = pr__kept_values(j, f, j->rows, &nv, errstr, es)) < 0)
            return rc;
        if ((rc = pr__open_one(j, &j->weights[f], f, "weights", PR_NPY_F32, 0, resume, nv, errstr,
                               es)) < 0)
            return rc;
        j->weighted[f] = 1;
    }
    return 0;
}

int pr_npy_jagged_append(pr_npy_jagged *j, uint32_t rows, const float *labels, const float *dense,
                         const int32_t *lengths, const int64_t *values, char *errstr, size_t es)
{
    return pr_npy_jagged_append_weighted(j, rows, labels, dense, lengths, values, NULL, errstr, es);
}

int pr_npy_jagged_append_weighted(pr_npy_jagged *j, uint32_t rows, const float *labels,
                                  const float *dense, const int32_t *lengths, const int64_t *values,
                                  const float *weights, char *errstr, size_t es)
{
    int rc;
    if ((j->labels && (rc = pr_npy_append_rows(j->labels, labels, rows, errstr, es)) < 0) ||
        (j->dense && (rc = pr_npy_append_rows(j->dense, dense, rows, errstr, es)) < 0))
        return rc;
    const int64_t *v = values;
    for (uint16_t f = 0; f < j->n_feat; f++) {
        const int32_t *len = lengths + (size_t)f * rows;
        uint64_t n = 0;
        for (uint32_t r = 0; r < rows; r++)
            n += (uint64_t)len[r];
        if ((rc = pr_npy_append_rows(j->lengths[f], len, rows, errstr, es)) < 0 ||
            (n && (rc = pr_npy_append_rows(j->values[f], v, (uint32_t)n, errstr, es)) < 0))
            return rc;
        if (j->weights[f] && !weights)
            return pr_seterr(errstr, es, PR_EINVAL,
                             "jagged set: feature %s is weighted, the batch has no weights",
                             j->names[f]);
        if (j->weights[f] && n &&
            (rc = pr_npy_append_rows(j->weights[f], weights + (v - values), (uint32_t)n, errstr,
                                     es)) < 0)
            return rc;
        v += n;
    }
    j->rows += rows;
    return 0;
}

int pr_npy_jagged_append_side(pr_npy_jagged *j, const pr_fside *side, uint32_t r0, uint32_t rows,
                              char *errstr, size_t es)
{
    if (side->n_labels != j->n_labels || side->n_dense != j->n_dense || side->n_feat != j->n_feat ||
        (uint64_t)r0 + rows > side->cap)
        return pr_seterr(errstr, es, PR_EINVAL,
                         "jagged set: side tables of another shape, or rows %u+%u past %u", r0,
                         rows, side->cap);
    int rc;
    if ((j->labels && (rc = pr_npy_append_rows(j->labels, side->labels + (size_t)r0 * j->n_labels,
                                               rows, errstr, es)) < 0) ||
        (j->dense && (rc = pr_npy_append_rows(j->dense, side->dense + (size_t)r0 * j->n_dense, rows,
                                              errstr, es)) < 0))
        return rc;
    for (uint16_t f = 0; f < j->n_feat; f++) {
        const int32_t *len = side->lengths + (size_t)f * side->cap;
        uint64_t v0 = 0, n = 0;
        for (uint32_t r = 0; r < r0; r++)
            v0 += (uint32_t)len[r];
        for (uint32_t r = r0; r < r0 + rows; r++)
            n += (uint32_t)len[r];
        if (v0 + n > side->n_values[f])
            return pr_seterr(errstr, es, PR_EINVAL,
                             "jagged set: feature %u: lengths sum past its %u values", f,
                             side->n_values[f]);
        if ((rc = pr_npy_append_rows(j->lengths[f], len + r0, rows, errstr, es)) < 0 ||
            (n && (rc = pr_npy_append_rows(j->values[f], side->values[f] + v0, (uint32_t)n, errstr,
                                           es)) < 0))
            return rc;
        if (j->weights[f] && (!side->weights[f] || v0 + n > side->n_weights[f]))
            return pr_seterr(errstr, es, PR_EINVAL, "jagged set: feature %s: weights missing",
                             j->names[f]);
        if (j->weights[f] && n &&
            (rc = pr_npy_append_rows(j->weights[f], side->weights[f] + v0, (uint32_t)n, errstr,
                                     es)) < 0)
            return rc;
    }
    j->rows += rows;
    return 0;
}

int pr_npy_jagged_begin_positional(pr_npy_jagged *j, char *errstr, size_t es)
{
    int rc = 0;
    if ((j->labels && (rc = pr_npy_begin_positional(j->labels, errstr, es))) ||
        (j->dense && (rc = pr_npy_begin_positional(j->dense, errstr, es))))
        return rc;
    for (uint16_t f = 0; f < j->n_feat; f++)
        if ((rc = pr_npy_begin_positional(j->lengths[f], errstr, es)) ||
            (rc = pr_npy_begin_positional(j->values[f], errstr, es)) ||
            (j->weights[f] && (rc = pr_npy_begin_positional(j->weights[f], errstr, es))))
            return rc;
    return 0;
}

int pr_npy_jagged_pwrite_side(pr_npy_jagged *j, const pr_fside *side, uint64_t row0,
                              const uint64_t *val0, uint32_t rows, char *errstr, size_t es)
{
    if (side->n_labels != j->n_labels || side->n_dense != j->n_dense || side->n_feat != j->n_feat ||
        rows > side->cap)
        return pr_seterr(errstr, es, PR_EINVAL,
                         "jagged set: side tables of another shape, or rows %u past %u", rows,
                         side->cap);
    int rc;
    if ((j->labels && (rc = pr_npy_pwrite_rows(j->labels, row0, side->labels, rows, errstr, es))) ||
        (j->dense && (rc = pr_npy_pwrite_rows(j->dense, row0, side->dense, rows, errstr, es))))
        return rc;
    for (uint16_t f = 0; f < j->n_feat; f++) {
        const int32_t *len = side->lengths + (size_t)f * side->cap;
        uint64_t n = 0;
        for (uint32_t r = 0; r < rows; r++)
            n += (uint32_t)len[r];
        if (n > side->n_values[f])
            return pr_seterr(errstr, es, PR_EINVAL,
                             "jagged set: feature %u: lengths sum past its %u values", f,
                             side->n_values[f]);
        if ((rc = pr_npy_pwrite_rows(j->lengths[f], row0, len, rows, errstr, es)) ||
            (n && (rc = pr_npy_pwrite_rows(j->values[f], val0[f], side->values[f], (uint32_t)n,
                                           errstr, es))))
            return rc;
        if (j->weights[f] && (!side->weights[f] || n > side->n_weights[f]))
            return pr_seterr(errstr, es, PR_EINVAL, "jagged set: feature %s: weights missing",
                             j->names[f]);
        if (j->weights[f] && n &&
            (rc = pr_npy_pwrite_rows(j->weights[f], val0[f], side->weights[f], (uint32_t)n, errstr,
                                     es)))
            return rc;
    }
    return 0;
}

void pr_npy_jagged_set_rows(pr_npy_jagged *j, uint64_t rows, const uint64_t *n_values)
{
    if (j->labels)
        pr_npy_set_rows(j->labels, rows);
    if (j->dense)
        pr_npy_set_rows(j->dense, rows);
    for (uint16_t f = 0; f < j->n_feat; f++) {
        pr_npy_set_rows(j->lengths[f], rows);
        pr_npy_set_rows(j->values[f], n_values[f]);
        if (j->weights[f])
            pr_npy_set_rows(j->weights[f], n_values[f]);
    }
    j->rows = rows;
}

uint64_t pr_npy_jagged_rows(const pr_npy_jagged *j)
{
    return j->rows;
}

int pr_npy_jagged_sync(pr_npy_jagged *j, char *errstr, size_t es)
{
    int rc;
    if ((j->labels && (rc = pr_npy_sync(j->labels, errstr, es)) < 0) ||
        (j->dense && (rc = pr_npy_sync(j->dense, errstr, es)) < 0))
        return rc;
    for (uint16_t f = 0; f < j->n_feat; f++)
        if ((rc = pr_npy_sync(j->lengths[f], errstr, es)) < 0 ||
            (rc = pr_npy_sync(j->values[f], errstr, es)) < 0 ||
            (j->weights[f] && (rc = pr_npy_sync(j->weights[f], errstr, es)) < 0))
            return rc;
    return 0;
}

static int pr__fsync_path(const char *p, char *errstr, size_t es)
{
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
    int e = errno;
    if (fd >= 0)
        close(fd);
    return rc ? pr_seterr(errstr, es, PR_EIO, "fsync %s: %s", p, strerror(e)) : 0;
}

/* Close one writer into *rc (the first error wins). */
static void pr__close_one(pr_npy_writer **w, int *rc, char *errstr, size_t es)
{
    if (!*w)
        return;
    int r = *rc ? pr_npy_close(*w, NULL, 0) : pr_npy_close(*w, errstr, es);
    if (r < 0 && !*rc)
        *rc = r;
    *w = NULL;
}

int pr_npy_jagged_close(pr_npy_jagged *j, bool durable, char *errstr, size_t es)
{
    if (!j)
        return 0;
    int rc = 0;
    pr__close_one(&j->labels, &rc, errstr, es);
    pr__close_one(&j->dense, &rc, errstr, es);
    for (uint16_t f = 0; f < j->n_feat; f++) {
        pr__close_one(&j->lengths[f], &rc, errstr, es);
        pr__close_one(&j->values[f], &rc, errstr, es);
        pr__close_one(&j->weights[f], &rc, errstr, es);
    }
    char p[4400];
    if (durable && rc == 0 && j->n_labels && pr__path_of(j, -1, "labels", p, sizeof(p)) > 0)
        rc = pr__fsync_path(p, errstr, es);
    if (durable && rc == 0 && j->n_dense && pr__path_of(j, -1, "dense", p, sizeof(p)) > 0)
        rc = pr__fsync_path(p, errstr, es);
    for (int f = 0; durable && rc == 0 && f < (int)j->n_feat; f++) {
        pr__path_of(j, f, "lengths", p, sizeof(p));
        if ((rc = pr__fsync_path(p, errstr, es)) == 0) {
            pr__path_of(j, f, "values", p, sizeof(p));
            rc = pr__fsync_path(p, errstr, es);
        }
        if (rc == 0 && j->weighted[f]) {
            pr__path_of(j, f, "weights", p, sizeof(p));
            rc = pr__fsync_path(p, errstr, es);
        }
    }
    snprintf(p, sizeof(p), "%s/sparse", j->dir);
    if (durable && rc == 0)
        rc = pr__fsync_path(p, errstr, es);
    pr__free_set(j);
    return rc;
}

void pr_npy_jagged_abort(pr_npy_jagged *j)
{
    if (!j)
        return;
    pr_npy_abort(j->labels);
    pr_npy_abort(j->dense);
    for (uint16_t f = 0; f < j->n_feat; f++) {
        pr_npy_abort(j->lengths[f]);
        pr_npy_abort(j->values[f]);
        if (j->weights)
            pr_npy_abort(j->weights[f]);
    }
    char p[4400];
    snprintf(p, sizeof(p), "%s/sparse", j->dir);
    rmdir(p); /* only when empty: never another run's files */
    pr__free_set(j);
}
