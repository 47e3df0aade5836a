/*
 * offline_delim.c — the varint-delimited record reader the offline drivers
 * share (offline_delim.h): `piperec process` and `piperec process --fit`
 * read source.format avro and protobuf files through it, so both see the
 * same records, numbered the same, with the same errors.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "offline_delim.h"
#include "pr_error.h"

int pr__delim_start(pr__delim *d, FILE *f, const char *input, bool avro, char *errstr,
                    size_t errstr_size)
{
    *d = (pr__delim){.f = f, .input = input};
    /* An Avro object container file (.avro: "Obj" 1, a header, blocks) is
     * not a sequence of records: say so rather than "truncated" somewhere.
     * Only where the input can be read again from the start (a file). */
    char magic[4];
    long at = avro ? ftell(f) : -1;
    if (at == 0 && fread(magic, 1, 4, f) == 4 && memcmp(magic, "Obj\x01", 4) == 0)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s: an Avro object container file; piperec process reads "
                         "varint-delimited records, one Kafka message each (docs/formats.md, "
                         "\"Avro container files\", converts one)",
                         input);
    if (at == 0 && fseek(f, 0, SEEK_SET) != 0)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", input, strerror(errno));
    return 0;
}

int pr__delim_next(pr__delim *d, size_t *len_out, char *errstr, size_t errstr_size)
{
    int c = getc(d->f);
    if (c == EOF)
        return 0;
    uint64_t len = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (c == EOF || shift > 35)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s: record %" PRId64 ": bad or truncated length", d->input,
                             d->recno + 1);
        len |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80))
            break;
        c = getc(d->f);
    }
    if (len > d->cap) {
        char *nb = realloc(d->rec, len);
        if (!nb)
            return pr_seterr(errstr, errstr_size, PR_ENOMEM, "offline: out of memory");
        d->rec = nb;
        d->cap = len;
    }
    if (fread(d->rec, 1, len, d->f) != len)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "%s: record %" PRId64 ": truncated",
                         d->input, d->recno + 1);
    d->recno++;
    *len_out = (size_t)len;
    return 1;
}

void pr__delim_free(pr__delim *d)
{
    free(d->rec);
    d->rec = NULL;
    d->cap = 0;
}

bool pr__offline_eagain_wait(uint32_t *waits)
{
    if (*waits >= 600)
        return false;
    (*waits)++;
    nanosleep(&(struct timespec){.tv_nsec = 100000000}, NULL);
    return true;
}
