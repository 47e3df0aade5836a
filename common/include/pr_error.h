/*
 * pr_error.h — the one error convention of piperec.
 *
 * Every function that acts returns 0 on success or a negative PR_E* code on
 * failure; functions that answer a question return bool. Where a caller needs
 * a human-readable reason, the function also takes `char *errstr, size_t
 * errstr_size` (librdkafka style) and writes a message the user can act on
 * ("pipelines[0].transform.columns.C3.modulus: must be > 0").
 */
#ifndef PR_ERROR_H
#define PR_ERROR_H

#include <stddef.h>

enum {
    PR_OK = 0,
    PR_EINVAL = -1,  /* invalid argument or configuration */
    PR_ENOMEM = -2,  /* allocation failed */
    PR_EIO = -3,     /* read/write/socket failure */
    PR_EFULL = -4,   /* a bounded structure is full (vocabulary under dlrm, queue) */
    PR_EBADREC = -5, /* malformed input record */
    PR_ENOTSUP = -6, /* feature not available in this build or on this machine */
    PR_ENODEV = -7,  /* device (FPGA) not present */
    PR_ESTATE = -8,  /* call not valid in the object's current state */
    PR_EAGAIN = -9,  /* try again later (would block, no credit) */
    PR_ETIMEDOUT = -10,
    PR_EKAFKA = -11, /* librdkafka reported an error; errstr has its text */
};

/* Static text for a PR_E* code; never NULL. */
const char *pr_strerror(int err);

/* snprintf into errstr when errstr is non-NULL; returns `err` so callers can
 * write `return pr_seterr(errstr, n, PR_EINVAL, "key %s: ...", k);`. */
int pr_seterr(char *errstr, size_t errstr_size, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
