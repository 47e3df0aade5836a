/*
 * npy.c — numpy .npy v1.0 writer and reader (see pr_npy.h for the shapes).
 *
 * The header is always padded to 128 bytes in total (numpy pads to a multiple
 * of 64; the longest dict we write, with a 20-digit N, fits in 118), so the
 * streaming writer can reserve it, write data after it and rewrite it with
 * the final N at close without moving anything. Data goes through one 1 MiB
 * buffer and pwrite(2): the offline driver writes gigabytes, and stdio's
 * small buffer would cost a syscall per 4 KiB.
 *
 * PR_NPY_DIRECT writes with O_DIRECT. Filling the page cache with a new file
 * costs the kernel more than copying the data, and the offline outputs are
 * written once and not read back by this process. The buffers are 4 KiB-
 * aligned and hold file offset `off` at their start (the header included),
 * so every flush writes whole 4 KiB blocks from an aligned address at an
 * aligned offset and carries the partial block over; at close O_DIRECT is
 * switched off for the tail and the header rewrite. An O_DIRECT write waits
 * for the device, so it runs on a helper thread of the writer while the
 * caller fills the second buffer (double buffering): the caller waits only
 * when the device is slower than it. Where the file is not a regular file or
 * the filesystem refuses O_DIRECT (tmpfs before Linux 6.6, some FUSE), the
 * writer silently uses buffered writes.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_npy.h"

#define PR__NPY_HDR 128
#define PR__NPY_BUF (1u << 20)
/* O_DIRECT alignment of offsets, lengths and addresses: the page size covers
 * every logical block size in use (512 B and 4 KiB). */
#define PR__NPY_ALIGN 4096u

struct pr_npy_writer {
    int fd;
    char *path;
    pr_npy_dtype dt;
    size_t esz;
    uint32_t cols;
    uint64_t rows;
    char *buf;   /* PR__NPY_BUF bytes, PR__NPY_ALIGN-aligned, being filled */
    size_t used; /* bytes in buf */
    off_t off;   /* file offset of buf[0] */
    bool direct; /* fd has O_DIRECT; off is PR__NPY_ALIGN-aligned */
    bool failed;
    /* Direct mode's I/O thread (started at the first direct flush): it writes
     * io_buf[io_len] at io_off while the caller fills buf. Under mu: io_busy
     * (a write handed over, not done), io_errno (its failure), io_stop. The
     * thread touches fd, io_* and direct only while io_busy. */
    char *io_buf;
    size_t io_len;
    off_t io_off;
    pthread_t io_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool io_started, io_busy, io_stop;
    int io_errno;
};

static const char *const pr__npy_descr[] = {"<f4", "<i4", "<i8"};

size_t pr_npy_dtype_size(pr_npy_dtype dt)
{
    return dt == PR_NPY_I64 ? 8 : 4;
}

static int pr__write_all(int fd, const void *p, size_t n, off_t at)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = pwrite(fd, c, n, at);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        c += k;
        n -= (size_t)k;
        at += k;
    }
    return 0;
}

/* Switch O_DIRECT on or off for w->fd; on is refused (false) unless the fd
 * is a regular file (O_DIRECT on a pipe means packet mode) and the
 * filesystem accepts it. */
static bool pr__npy_set_direct(pr_npy_writer *w, bool on)
{
    struct stat st;
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || (on && (fstat(w->fd, &st) < 0 || !S_ISREG(st.st_mode))))
        return false;
    if (fcntl(w->fd, F_SETFL, on ? fl | O_DIRECT : fl & ~O_DIRECT) < 0)
        return false;
    w->direct = on;
    return true;
}

/* Build the 128-byte header for shape (n,) or (n, cols). */
static void pr__npy_header(char hdr[PR__NPY_HDR], pr_npy_dtype dt, uint64_t n, uint32_t cols,
                           bool fortran)
{
    char dict[PR__NPY_HDR];
    int len;
    if (cols == 0)
        len = snprintf(dict, sizeof(dict),
                       "{'descr': '%s', 'fortran_order': %s, 'shape': (%" PRIu64 ",), }",
                       pr__npy_descr[dt], fortran ? "True" : "False", n);
    else
        len =
            snprintf(dict, sizeof(dict),
                     "{'descr': '%s', 'fortran_order': %s, 'shape': (%" PRIu64 ", %" PRIu32 "), }",
                     pr__npy_descr[dt], fortran ? "True" : "False", n, cols);
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    uint16_t hlen = PR__NPY_HDR - 10;
    hdr[8] = (char)(hlen & 0xff);
    hdr[9] = (char)(hlen >> 8);
    memset(hdr + 10, ' ', PR__NPY_HDR - 10);
    memcpy(hdr + 10, dict, (size_t)len);
    hdr[PR__NPY_HDR - 1] = '\n';
}

/* A writer with its buffer and path, fd not yet set. */
static pr_npy_writer *pr__npy_alloc(const char *path, pr_npy_dtype dt, uint32_t cols)
{
    pr_npy_writer *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    void *buf = NULL;
    w->path = strdup(path);
    if (!w->path || posix_memalign(&buf, PR__NPY_ALIGN, PR__NPY_BUF) != 0) {
        free(w->path);
        free(w);
        return NULL;
    }
    w->buf = buf;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->fd = -1;
    w->dt = dt;
    w->esz = pr_npy_dtype_size(dt);
    w->cols = cols;
    return w;
}

/* Write n bytes at `at`, redone buffered when O_DIRECT refuses them
 * (EINVAL: an alignment this filesystem does not take). 0 or an errno. */
static int pr__npy_pwrite(pr_npy_writer *w, const char *p, size_t n, off_t at)
{
    if (pr__write_all(w->fd, p, n, at) == 0)
        return 0;
    int e = errno;
    if (e != EINVAL || !w->direct || !pr__npy_set_direct(w, false))
        return e;
    return pr__write_all(w->fd, p, n, at) == 0 ? 0 : errno;
}

static void *pr__npy_io_main(void *arg)
{
    pr_npy_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->io_busy && !w->io_stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->io_busy)
            break;
        pthread_mutex_unlock(&w->mu);
        int e = pr__npy_pwrite(w, w->io_buf, w->io_len, w->io_off);
        pthread_mutex_lock(&w->mu);
        if (e && !w->io_errno)
            w->io_errno = e;
        w->io_busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Start the I/O thread and its buffer; false (stay synchronous) when either
 * cannot be had. */
static bool pr__npy_io_start(pr_npy_writer *w)
{
    if (w->io_started)
        return true;
    void *buf = NULL;
    if (posix_memalign(&buf, PR__NPY_ALIGN, PR__NPY_BUF) != 0)
        return false;
    w->io_buf = buf;
    if (pthread_create(&w->io_thread, NULL, pr__npy_io_main, w) != 0) {
        free(w->io_buf);
        w->io_buf = NULL;
        return false;
    }
    w->io_started = true;
    return true;
}

/* Wait for the write in flight: 0 or the errno of a failed one. */
static int pr__npy_io_wait(pr_npy_writer *w)
{
    if (!w->io_started)
        return 0;
    pthread_mutex_lock(&w->mu);
    while (w->io_busy)
        pthread_cond_wait(&w->cv, &w->mu);
    int e = w->io_errno;
    pthread_mutex_unlock(&w->mu);
    return e;
}

/* Let the write in flight finish and end the thread (before fd is closed). */
static void pr__npy_io_stop(pr_npy_writer *w)
{
    if (!w->io_started)
        return;
    pthread_mutex_lock(&w->mu);
    w->io_stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->io_thread, NULL);
    w->io_started = false;
}

static void pr__npy_free(pr_npy_writer *w)
{
    pr__npy_io_stop(w);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->path);
    free(w->buf);
    free(w->io_buf);
    free(w);
}

int pr_npy_open_flags(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols,
                      unsigned flags, char *errstr, size_t errstr_size)
{
    *out = NULL;
    if ((unsigned)dt > PR_NPY_I64)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: unknown npy dtype %d", path, (int)dt);
    if (flags & ~PR_NPY_DIRECT)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: unknown npy flags 0x%x", path, flags);
    pr_npy_writer *w = pr__npy_alloc(path, dt, cols);
    if (!w)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        int e = errno;
        pr__npy_free(w);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(e));
    }
    if (flags & PR_NPY_DIRECT)
        pr__npy_set_direct(w, true); /* else buffered */
    /* Reserve the header; a valid (empty) array until the first close. */
    pr__npy_header(w->buf, dt, 0, cols, false);
    w->used = PR__NPY_HDR;
    *out = w;
    return 0;
}

int pr_npy_open(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols, char *errstr,
                size_t errstr_size)
{
    return pr_npy_open_flags(out, path, dt, cols, 0, errstr, errstr_size);
}

/* Write the buffer out at w->off. In direct mode without `all`, only its
 * whole blocks, handed to the I/O thread (the partial last block moves to the
 * front of the other buffer, with w->off still aligned); `all` waits for the
 * thread, writes everything here and leaves direct mode when the buffer does
 * not end on a block. */
static int pr__npy_flush(pr_npy_writer *w, bool all, char *errstr, size_t errstr_size)
{
    if (w->failed)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: an earlier write failed", w->path);
    int e = pr__npy_io_wait(w); /* from here on the thread is idle */
    if (e) {
        w->failed = true;
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(e));
    }
    size_t n = w->used;
    if (w->direct && !all)
        n &= ~(size_t)(PR__NPY_ALIGN - 1);
    else if (w->direct && n % PR__NPY_ALIGN)
        pr__npy_set_direct(w, false);
    if (n == 0)
        return 0;
    if (w->direct && !all && pr__npy_io_start(w)) {
        char *full = w->buf;
        w->buf = w->io_buf;
        memcpy(w->buf, full + n, w->used - n);
        pthread_mutex_lock(&w->mu);
        w->io_buf = full;
        w->io_len = n;
        w->io_off = w->off;
        w->io_busy = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    } else {
        if ((e = pr__npy_pwrite(w, w->buf, n, w->off)) != 0) {
            w->failed = true;
            return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(e));
        }
        memmove(w->buf, w->buf + n, w->used - n);
    }
    w->used -= n;
    w->off += (off_t)n;
    return 0;
}

/* Flush everything and rewrite the header with the rows so far (buffered,
 * like the last partial block: 128 bytes at offset 0 cannot go through
 * O_DIRECT). */
static int pr__npy_finish(pr_npy_writer *w, char *errstr, size_t errstr_size)
{
    int rc = pr__npy_flush(w, false, errstr, errstr_size); /* whole blocks direct */
    if (rc == 0)
        rc = pr__npy_flush(w, true, errstr, errstr_size);
    if (rc < 0)
        return rc;
    char hdr[PR__NPY_HDR];
    pr__npy_header(hdr, w->dt, w->rows, w->cols, false);
    if ((w->direct && !pr__npy_set_direct(w, false)) ||
        pr__write_all(w->fd, hdr, sizeof(hdr), 0) < 0) {
        w->failed = true;
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(errno));
    }
    return 0;
}

/* Transpose [ncol][stride] (first n rows) into [n][ncol], in tiles of 64
 * rows: a tile's output (at most 64 x ncol elements) stays in L1 while the
 * columns are read sequentially, instead of one strided pass per column over
 * the whole output buffer. */
#define PR__TILE 64
#define PR__DEFINE_TRANSPOSE(name, T)                                                              \
    static void name(void *dst, const T *src, size_t stride, uint32_t n, uint32_t ncol)            \
    {                                                                                              \
        T *d = dst;                                                                                \
        for (uint32_t t = 0; t < n; t += PR__TILE) {                                               \
            uint32_t m = n - t < PR__TILE ? n - t : PR__TILE;                                      \
            for (uint32_t c = 0; c < ncol; c++) {                                                  \
                const T *s = src + (size_t)c * stride + t;                                         \
                T *o = d + (size_t)t * ncol + c;                                                   \
                for (uint32_t i = 0; i < m; i++)                                                   \
                    o[(size_t)i * ncol] = s[i];                                                    \
            }                                                                                      \
        }                                                                                          \
    }
PR__DEFINE_TRANSPOSE(pr__transpose32, uint32_t)
PR__DEFINE_TRANSPOSE(pr__transpose64, uint64_t)

void pr_npy_transpose(void *dst, const void *src, size_t stride, uint32_t rows, uint32_t cols,
                      pr_npy_dtype dt)
{
    if (pr_npy_dtype_size(dt) == 4)
        pr__transpose32(dst, src, stride, rows, cols ? cols : 1);
    else
        pr__transpose64(dst, src, stride, rows, cols ? cols : 1);
}

int pr_npy_append_cols(pr_npy_writer *w, const void *data, size_t stride, uint32_t rows,
                       char *errstr, size_t errstr_size)
{
    uint32_t ncol = w->cols ? w->cols : 1;
    size_t row_bytes = w->esz * ncol;
    uint32_t r = 0;
    while (r < rows) {
        if (PR__NPY_BUF - w->used < row_bytes) {
            int rc = pr__npy_flush(w, false, errstr, errstr_size);
            if (!rc && PR__NPY_BUF - w->used < row_bytes) /* a row wider than buf - 4 KiB */
                rc = pr__npy_flush(w, true, errstr, errstr_size);
            if (rc)
                return rc;
        }
        uint32_t n = (uint32_t)((PR__NPY_BUF - w->used) / row_bytes);
        if (n > rows - r)
            n = rows - r;
        char *dst = w->buf + w->used;
        if (ncol == 1) {
            memcpy(dst, (const char *)data + (size_t)r * w->esz, (size_t)n * w->esz);
        } else if (w->esz == 4) {
            pr__transpose32(dst, (const uint32_t *)data + r, stride, n, ncol);
        } else {
            pr__transpose64(dst, (const uint64_t *)data + r, stride, n, ncol);
        }
        w->used += (size_t)n * row_bytes;
        r += n;
    }
    w->rows += rows;
    return 0;
}

int pr_npy_append_rows(pr_npy_writer *w, const void *data, uint32_t rows, char *errstr,
                       size_t errstr_size)
{
    size_t bytes = (size_t)rows * w->esz * (w->cols ? w->cols : 1);
    const char *p = data;
    while (bytes > 0) {
        if (w->used == PR__NPY_BUF) {
            int rc = pr__npy_flush(w, false, errstr, errstr_size);
            if (rc)
                return rc;
        }
        size_t n = PR__NPY_BUF - w->used;
        if (n > bytes)
            n = bytes;
        memcpy(w->buf + w->used, p, n);
        w->used += n;
        p += n;
        bytes -= n;
    }
    w->rows += rows;
    return 0;
}

int pr_npy_begin_positional(pr_npy_writer *w, char *errstr, size_t errstr_size)
{
    if (w->rows || w->used != PR__NPY_HDR || w->off != 0)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "%s: positional writes must start before any append", w->path);
    if (w->direct && !pr__npy_set_direct(w, false))
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(errno));
    return 0;
}

int pr_npy_pwrite_rows(pr_npy_writer *w, uint64_t row0, const void *data, uint32_t rows,
                       char *errstr, size_t errstr_size)
{
    size_t row_bytes = w->esz * (w->cols ? w->cols : 1);
    off_t at = (off_t)(PR__NPY_HDR + row0 * row_bytes);
    if (pr__write_all(w->fd, data, (size_t)rows * row_bytes, at) == 0)
        return 0;
    int e = errno;
    __atomic_store_n(&w->failed, true, __ATOMIC_RELAXED);
    return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(e));
}

void pr_npy_set_rows(pr_npy_writer *w, uint64_t rows)
{
    w->rows = rows;
}

uint64_t pr_npy_rows(const pr_npy_writer *w)
{
    return w->rows;
}

int pr_npy_close(pr_npy_writer *w, char *errstr, size_t errstr_size)
{
    if (!w)
        return 0;
    int rc = pr__npy_finish(w, errstr, errstr_size);
    pr__npy_io_stop(w); /* idle after finish, even on failure */
    if (close(w->fd) < 0 && rc == 0)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(errno));
    pr__npy_free(w);
    return rc;
}

int pr_npy_sync(pr_npy_writer *w, char *errstr, size_t errstr_size)
{
    int rc = pr__npy_finish(w, errstr, errstr_size);
    if (rc < 0)
        return rc;
    if (fsync(w->fd) < 0) {
        w->failed = true;
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", w->path, strerror(errno));
    }
    return 0;
}

int pr_npy_open_append(pr_npy_writer **out, const char *path, pr_npy_dtype dt, uint32_t cols,
                       uint64_t keep_rows, char *errstr, size_t errstr_size)
{
    *out = NULL;
    if ((unsigned)dt > PR_NPY_I64)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: unknown npy dtype %d", path, (int)dt);
    /* The file must be one of ours: the 128-byte header of this dtype and
     * width (any N), and at least keep_rows rows of data after it. */
    char want[PR__NPY_HDR], have[PR__NPY_HDR];
    pr__npy_header(want, dt, 0, cols, false);
    size_t same = (size_t)(strstr(want + 10, "'shape'") - want);
    size_t row_bytes = pr_npy_dtype_size(dt) * (cols ? cols : 1);
    off_t keep = PR__NPY_HDR + (off_t)(keep_rows * row_bytes);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    ssize_t got = pread(fd, have, sizeof(have), 0);
    off_t size = lseek(fd, 0, SEEK_END);
    int rc = 0;
    if (got != (ssize_t)sizeof(have) || memcmp(want, have, same) != 0)
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "%s: not a .npy file of this dtype and width written by piperec", path);
    else if (size < keep)
        rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                       "%s: %lld bytes, too short for the %llu rows to keep", path, (long long)size,
                       (unsigned long long)keep_rows);
    else if (ftruncate(fd, keep) < 0 || lseek(fd, keep, SEEK_SET) != keep)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    pr_npy_writer *w = rc ? NULL : pr__npy_alloc(path, dt, cols);
    if (!rc && !w)
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    if (rc) {
        close(fd);
        return rc;
    }
    w->fd = fd;
    w->off = keep;
    w->rows = keep_rows;
    *out = w;
    return 0;
}

void pr_npy_abort(pr_npy_writer *w)
{
    if (!w)
        return;
    pr__npy_io_stop(w);
    close(w->fd);
    unlink(w->path);
    pr__npy_free(w);
}

int pr_npy_write_array(const char *path, pr_npy_dtype dt, const void *data, uint64_t n,
                       uint32_t cols, bool fortran, char *errstr, size_t errstr_size)
{
    if ((unsigned)dt > PR_NPY_I64)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: unknown npy dtype %d", path, (int)dt);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    char hdr[PR__NPY_HDR];
    pr__npy_header(hdr, dt, n, cols, fortran);
    size_t bytes = (size_t)n * pr_npy_dtype_size(dt) * (cols ? cols : 1);
    int rc = 0;
    if (pr__write_all(fd, hdr, sizeof(hdr), 0) < 0 ||
        pr__write_all(fd, data, bytes, PR__NPY_HDR) < 0)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    if (close(fd) < 0 && rc == 0)
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    return rc;
}

/* ---------------------------------------------------------------- reader */

/* Find `'key':` in the header dict and return the text after it. */
static const char *pr__dict_value(const char *dict, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "'%s':", key);
    const char *p = strstr(dict, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ')
        p++;
    return p;
}

int pr_npy_read(const char *path, pr_npy_array *a, char *errstr, size_t errstr_size)
{
    memset(a, 0, sizeof(*a));
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    unsigned char pre[12];
    char *dict = NULL;
    int rc = PR_EINVAL;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: not a .npy file", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: truncated header", path);
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
    } else {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: npy version %d not supported", path, pre[6]);
        goto out;
    }
    if (hlen > (1u << 20) || !(dict = malloc(hlen + 1)) || fread(dict, 1, hlen, f) != hlen) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: bad header", path);
        goto out;
    }
    dict[hlen] = '\0';
    const char *d = pr__dict_value(dict, "descr");
    const char *fo = pr__dict_value(dict, "fortran_order");
    const char *sh = pr__dict_value(dict, "shape");
    int dt = -1;
    for (int i = 0; d && i < 3; i++)
        if (!strncmp(d + 1, pr__npy_descr[i], 3) && d[4] == d[0])
            dt = i;
    if (dt < 0 || !fo || !sh || *sh != '(') {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: unsupported header: %s", path, dict);
        goto out;
    }
    a->dtype = (pr_npy_dtype)dt;
    a->fortran = !strncmp(fo, "True", 4);
    char *e;
    a->n = strtoull(sh + 1, &e, 10);
    while (*e == ' ' || *e == ',')
        e++;
    a->ndim = 1;
    if (*e != ')') {
        a->cols = (uint32_t)strtoul(e, &e, 10);
        a->ndim = 2;
        while (*e == ' ' || *e == ',')
            e++;
        if (*e != ')') {
            pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: only 1-D and 2-D arrays are supported",
                      path);
            goto out;
        }
    }
    size_t bytes = (size_t)a->n * pr_npy_dtype_size(a->dtype) * (a->ndim == 2 ? a->cols : 1);
    a->data = malloc(bytes ? bytes : 1);
    if (!a->data) {
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
        goto out;
    }
    if (fread(a->data, 1, bytes, f) != bytes) {
        free(a->data);
        a->data = NULL;
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: truncated data", path);
        goto out;
    }
    rc = 0;
out:
    free(dict);
    fclose(f);
    return rc;
}

void pr_npy_array_fini(pr_npy_array *a)
{
    free(a->data);
    a->data = NULL;
}

double pr_npy_get(const pr_npy_array *a, uint64_t r, uint32_t c)
{
    uint64_t cols = a->ndim == 2 ? a->cols : 1;
    size_t i = a->fortran ? (size_t)(c * a->n + r) : (size_t)(r * cols + c);
    switch (a->dtype) {
    case PR_NPY_F32:
        return ((const float *)a->data)[i];
    case PR_NPY_I32:
        return ((const int32_t *)a->data)[i];
    default:
        return (double)((const int64_t *)a->data)[i];
    }
}
