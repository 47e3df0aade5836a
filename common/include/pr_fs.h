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

#endif
