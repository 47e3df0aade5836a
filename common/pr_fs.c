/* pr_fs.c — file-system helpers (pr_fs.h). */
#include "pr_fs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
