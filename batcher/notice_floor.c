/*
 * notice_floor.c — the recycled-index notice floor kept across restarts
 * (contract: pr_batcher.h, pr_batcher_notice_floor_load/_save).
 *
 * Every notice numbered below the floor was acknowledged with its batch, so
 * a restart need not announce it again (issue 19 item 5). The file holds one
 * decimal number and a newline. It is written to a temporary file and
 * renamed, without fsync: after a power loss it may hold an older floor (or
 * be missing), and a lower floor only makes the next start re-announce more,
 * never less, so the cost of an fsync per store cycle buys nothing.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_batcher.h"

int pr_batcher_notice_floor_load(const char *path, uint64_t *floor, char *errstr,
                                 size_t errstr_size)
{
    *floor = 0;
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    }
    char line[64] = "";
    char *end = NULL;
    bool ok = fgets(line, sizeof(line), f) != NULL;
    fclose(f);
    unsigned long long v = ok ? strtoull(line, &end, 10) : 0;
    if (!ok || end == line || (*end != '\n' && *end != '\0'))
        return pr_seterr(errstr, errstr_size, PR_EBADREC,
                         "%s: not a notice number; delete the file to announce every restored "
                         "recycled-index notice again",
                         path);
    *floor = v;
    return 0;
}

int pr_batcher_notice_floor_save(const char *path, uint64_t floor, char *errstr, size_t errstr_size)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", tmp, strerror(errno));
    int bad = fprintf(f, "%" PRIu64 "\n", floor) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        (void)remove(tmp);
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(e));
    }
    return 0;
}
