/*
 * fault_fs.c — an LD_PRELOAD shim that makes file writes fail under one
 * directory, for the state-dir fault tests (tests/fault/test_fault_state.sh).
 *
 *   PR_FAULT_DIR=/abs/dir       paths under this directory are affected
 *   PR_FAULT_TRIGGER=/abs/file  while this file exists, its first word
 *                               (ENOSPC or EIO) is the errno returned
 *
 * Affected calls: write, pwrite, writev, fsync, fdatasync, ftruncate on a
 * descriptor whose /proc/self/fd link is under PR_FAULT_DIR; rename, open
 * and openat with O_CREAT of a path under it. Everything else passes through.
 * The trigger is re-read at most every 20 ms (a stat per write would cost
 * the sockets too). Each kind of failure is reported once on stderr, so the
 * test log says what was injected. Only for tests: it uses glibc's RTLD_NEXT
 * and /proc, and interposes calls made through the PLT only (stdio's own
 * internal writes are not seen; piperec's state files use write(2)).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static int fault_errno(void)
{
    static __thread long long next_check_ms;
    static __thread int cached;
    const char *trig = getenv("PR_FAULT_TRIGGER");
    if (!trig || !getenv("PR_FAULT_DIR"))
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long long now = ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
    if (now < next_check_ms)
        return cached;
    next_check_ms = now + 20;
    static int (*real_open)(const char *, int, ...);
    static ssize_t (*real_read)(int, void *, size_t);
    if (!real_open)
        real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    if (!real_read)
        real_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    int fd = real_open(trig, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cached = 0;
    char buf[16] = "";
    ssize_t n = real_read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n < 0)
        n = 0;
    buf[n] = '\0';
    cached = !strncmp(buf, "EIO", 3) ? EIO : ENOSPC;
    return cached;
}

static bool under_dir(const char *path)
{
    const char *dir = getenv("PR_FAULT_DIR");
    size_t n = strlen(dir);
    return path && !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

static bool fd_under_dir(int fd)
{
    char link[64], path[4096];
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof(path) - 1);
    if (n <= 0)
        return false;
    path[n] = '\0';
    return under_dir(path);
}

static void report(const char *call, int e)
{
    static int seen[8];
    static const char *const names[] = {"write", "fsync", "rename", "open", "ftruncate"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(names[i], call) && !__atomic_exchange_n(&seen[i], 1, __ATOMIC_RELAXED)) {
            fprintf(stderr, "fault_fs: failing %s under %s with %s\n", call, getenv("PR_FAULT_DIR"),
                    strerror(e));
            break;
        }
}

/* Should this call on fd fail? Sets errno and returns true when it should. */
static bool fail_fd(int fd, const char *call)
{
    int e = fault_errno();
    if (!e || !fd_under_dir(fd))
        return false;
    report(call, e);
    errno = e;
    return true;
}

static bool fail_path(const char *path, const char *call)
{
    int e = fault_errno();
    if (!e || !under_dir(path))
        return false;
    report(call, e);
    errno = e;
    return true;
}

#define REAL(ret, name, ...)                                                                       \
    static ret (*real_##name)(__VA_ARGS__);                                                        \
    if (!real_##name)                                                                              \
        real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name);

ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, write, int, const void *, size_t)
    if (fail_fd(fd, "write"))
        return -1;
    return real_write(fd, buf, n);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite, int, const void *, size_t, off_t)
    if (fail_fd(fd, "write"))
        return -1;
    return real_pwrite(fd, buf, n, off);
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, writev, int, const struct iovec *, int)
    if (fail_fd(fd, "write"))
        return -1;
    return real_writev(fd, iov, cnt);
}

int fsync(int fd)
{
    REAL(int, fsync, int)
    if (fail_fd(fd, "fsync"))
        return -1;
    return real_fsync(fd);
}

int fdatasync(int fd)
{
    REAL(int, fdatasync, int)
    if (fail_fd(fd, "fsync"))
        return -1;
    return real_fdatasync(fd);
}

int ftruncate(int fd, off_t len)
{
    REAL(int, ftruncate, int, off_t)
    if (fail_fd(fd, "ftruncate"))
        return -1;
    return real_ftruncate(fd, len);
}

int rename(const char *from, const char *to)
{
    REAL(int, rename, const char *, const char *)
    if (fail_path(to, "rename") || fail_path(from, "rename"))
        return -1;
    return real_rename(from, to);
}

int open(const char *path, int flags, ...)
{
    REAL(int, open, const char *, int, ...)
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
        if (fail_path(path, "open"))
            return -1;
    }
    return real_open(path, flags, mode);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

int openat(int dirfd, const char *path, int flags, ...)
{
    REAL(int, openat, int, const char *, int, ...)
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
        if (path[0] == '/' && fail_path(path, "open"))
            return -1;
    }
    return real_openat(dirfd, path, flags, mode);
}
