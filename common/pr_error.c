/* pr_error.c — text for the PR_E* codes and the errstr helper. */
#include "pr_error.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const pr_error_text[] = {
    [0] = "success",       [1] = "invalid argument",   [2] = "out of memory",
    [3] = "I/O error",     [4] = "capacity exhausted", [5] = "malformed record",
    [6] = "not supported", [7] = "no such device",     [8] = "invalid state",
    [9] = "try again",     [10] = "timed out",         [11] = "kafka error",
};

const char *pr_strerror(int err)
{
    int i = -err;
    if (i < 0 || (size_t)i >= sizeof(pr_error_text) / sizeof(pr_error_text[0]))
        return "unknown error";
    return pr_error_text[i];
}

int pr_seterr(char *errstr, size_t errstr_size, int err, const char *fmt, ...)
{
    if (errstr && errstr_size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errstr, errstr_size, fmt, ap);
        va_end(ap);
    }
    return err;
}
