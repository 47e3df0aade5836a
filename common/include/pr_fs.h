/*
 * pr_fs.h — small file-system helpers shared by the components that keep
 * files (the state dir, offline output).
 */
#ifndef PR_FS_H
#define PR_FS_H

#include <stddef.h>

/* mkdir -p: create `dir` and its missing parents (mode 0755). Returns 0, or
 * PR_EIO with errno left as the failing mkdir set it and errstr naming the
 * path ("<path>: <reason>"); PR_EINVAL for a path longer than PATH_MAX. */
int pr_mkdir_p(const char *dir, char *errstr, size_t errstr_size);

/* write(2) all n bytes (EINTR retried). 0, or PR_EIO with errno set. */
int pr_write_all(int fd, const void *p, size_t n);

/* fsync the directory holding `path`, so a file created or renamed there
 * survives a crash. 0, PR_EIO (errno set) or PR_ENOMEM. */
int pr_fsync_dir_of(const char *path);

/* Take an exclusive lock on `path` (created if absent) for the life of the
 * returned fd (flock: released by close or by the process's death, kill -9
 * included) and write this process's pid into it. Returns the fd (>= 0);
 * PR_ESTATE when another process holds it (errstr names the path and the
 * holder's pid); PR_ENOTSUP when the file system has no such locks (some
 * network file systems); PR_EIO on another failure (errstr says why). */
int pr_lock_file(const char *path, char *errstr, size_t errstr_size);

/* A small text file's content, malloc'd into *out (the caller frees it),
 * its trailing newlines (\n, \r\n) dropped: a secret or a certificate
 * mounted from a Kubernetes Secret. Returns 0; PR_EIO (errstr: "<path>:
 * <reason>"), PR_EINVAL for a file over `max` bytes or holding a NUL byte,
 * PR_ENOMEM. */
int pr_read_text_file(const char *path, size_t max, char **out, char *errstr, size_t errstr_size);

#endif
