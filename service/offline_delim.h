/*
 * offline_delim.h — internal to service/: reading a file of varint-delimited
 * records (source.format avro and protobuf offline: each record an unsigned
 * LEB128 length, then the message bytes as on Kafka; protobuf's
 * writeDelimitedTo), for `piperec process` (offline_schema.c) and
 * `piperec process --fit` (offline_fit.c).
 *
 * Why one reader: both must read the same files the same way (a record's
 * number, the errors for a bad length or a truncated record, the refusal of
 * an Avro object container file), so --fit fits exactly the records the run
 * writes. A record's bytes are handed over as they are; a zero-length one is
 * left to the caller (rejected `empty`, as an empty Kafka message is).
 * config/config_infer.c keeps its own reader: inference counts a bad tail as
 * a reject and reads at most --max-events records, an ending the offline
 * run refuses.
 */
#ifndef PR__OFFLINE_DELIM_H
#define PR__OFFLINE_DELIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct pr__delim {
    FILE *f;           /* borrowed */
    const char *input; /* its name in messages */
    char *rec;         /* the last record read: rec[0, len) (NULL before one is longer than 0) */
    size_t cap;
    int64_t recno; /* records read so far: the last one's number, from 1 */
} pr__delim;

/* Start reading f (named `input` in messages) at its current position. With
 * `avro`, an Avro object container file ("Obj" 1 at the start of a file that
 * can be read again from there) is refused: PR_EINVAL with errstr. 0, or
 * PR_EIO when f cannot be rewound. */
int pr__delim_start(pr__delim *d, FILE *f, const char *input, bool avro, char *errstr,
                    size_t errstr_size);

/* The next record: 1 with it in d->rec[0, *len) (numbered d->recno), 0 at the
 * end of the input, or PR_EINVAL ("INPUT: record N: bad or truncated length",
 * "...: truncated") / PR_ENOMEM with errstr. Read errors are left to the
 * caller (ferror(f)). */
int pr__delim_next(pr__delim *d, size_t *len, char *errstr, size_t errstr_size);

/* The record buffer. */
void pr__delim_free(pr__delim *d);

/* A decoder's PR_EAGAIN (a schema registry not reachable yet): wait 100 ms
 * and count it in *waits; false, without waiting, once a minute of waits is
 * used up (the caller then fails on PR_EAGAIN). */
bool pr__offline_eagain_wait(uint32_t *waits);

#endif
