/* pr_fs.c — file-system helpers (pr_fs.h). */
#include "pr_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include "pr_error.h"

int pr_mkdir_p(const char *dir, char *errstr, size_t errstr_size)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", dir);
    for (char *s = tmp + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(tmp, 0755) && errno != EEXIST)
            goto out_err;
        *s = '/';
    }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        goto out_err;
    return 0;
out_err:;
    int e = errno;
    pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(e));
    errno = e;
    return PR_EIO;
}

int pr_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return PR_EIO;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

int pr_fsync_dir_of(const char *path)
{
    char *dup = strdup(path);
    if (!dup)
        return PR_ENOMEM;
    int fd = open(dirname(dup), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dup);
    if (fd < 0)
        return PR_EIO;
    int rc = fsync(fd) ? PR_EIO : 0;
    close(fd);
    return rc;
}

int pr_lock_file(const char *path, char *errstr, size_t errstr_size)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof(pid) - 1, 0) : -1;
        close(fd);
        if (e != EWOULDBLOCK)
            return pr_seterr(errstr, errstr_size,
                             e == ENOLCK || e == EOPNOTSUPP || e == EINVAL ? PR_ENOTSUP : PR_EIO,
                             "%s: lock: %s", path, strerror(e));
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        return pr_seterr(errstr, errstr_size, PR_ESTATE, "%s is locked by another process%s%s",
                         path, pid[0] ? ", pid " : "", pid);
    }
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(e));
    }
    return fd;
}

int pr_read_text_file(const char *path, size_t max, char **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad || n > max) {
        free(buf);
        if (bad)
            return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(e));
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: larger than %zu bytes", path, max);
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: holds a NUL byte", path);
    }
    *out = buf;
    return 0;
}
