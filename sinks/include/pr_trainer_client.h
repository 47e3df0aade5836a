/*
 * pr_trainer_client.h — the reference trainer-stream client in C: connect,
 * subscribe to a pipeline with a credit window, receive batches, ack them.
 * `piperec consume` and `piperec demo` use it; docs/trainer-protocol.md is
 * the protocol it speaks.
 *
 * Blocking I/O with timeouts on one socket; one thread per client.
 * Received batches are zero-copy views into the client's frame buffer,
 * valid until the next pr_trainer_client_next() or close. Each view carries
 * `epoch` and `seq`: (epoch, seq) strictly increases per pipeline across
 * server restarts (docs/trainer-protocol.md, "Epochs"); acks name seq only,
 * which is unique within the connection's epoch.
 *
 * Checkpoint delivery (server `sinks.trainer.delivery: checkpoint`,
 * docs/trainer-protocol.md "Checkpoint delivery"): a trainer keeps a
 * pr_trainer_position (the input offsets of every row its model holds),
 * subscribes with the position of the checkpoint it was restored from
 * (opts.resume) and, once a checkpoint is durable, reports it with
 * pr_trainer_client_checkpoint(). Positions are offsets, not sequences:
 * batch boundaries change across server restarts, offsets do not.
 */
#ifndef PR_TRAINER_CLIENT_H
#define PR_TRAINER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pr_batcher.h"

#define PR_TRAINER_PROTOCOL_VERSION 1

typedef struct pr_trainer_client pr_trainer_client;

/* An inclusive range of input offsets of one (topic, partition): one piece
 * of a checkpoint's position. */
typedef struct pr_trainer_range {
    const char *topic;
    int32_t partition;
    int64_t first, last; /* inclusive, 0 <= first <= last */
} pr_trainer_range;

typedef struct pr_trainer_client_opts {
    const char *connect; /* "host:port", or "unix:PATH" (sinks.trainer.unix_path) */
    const char *pipeline;
    uint32_t credits;      /* credit window; 0 = 8 */
    const char *client_id; /* NULL = "piperec-<pid>" */
    int timeout_ms;        /* connect + handshake; 0 = 10000 */
    /* Security (docs/operations.md "Security"). TLS is used when `tls` is set
     * or any tls_* file is given; the server certificate is checked against
     * tls_ca (else the system CAs) and the host name or IP of `connect`. */
    bool tls;
    const char *tls_ca;   /* PEM CA bundle that signed the server certificate */
    const char *tls_cert; /* PEM client certificate, for mutual TLS */
    const char *tls_key;  /* its private key */
    const char *token;    /* bearer token sent in Subscribe, or NULL */
    /* Checkpoint delivery: the position of the checkpoint the model was
     * restored from (Subscribe.resume); the server never sends those rows
     * again. NULL/0 for a fresh model. Copied during open. */
    const pr_trainer_range *resume;
    size_t n_resume;
    /* Ask for the raw tensor layout (Subscribe.layout = 1). Batches still
     * come out of pr_trainer_client_next as the TrainingBatch view they
     * hold (each raw frame is checked and turned back into one), so a
     * caller sees no difference; pr_trainer_info.layout says what the
     * server granted (an older server answers 0 and sends TrainingBatch). */
    bool raw_layout;
} pr_trainer_client_opts;

/* Read a token file (first non-empty, non-# line, trimmed) into out.
 * Returns 0 or PR_EIO/PR_EINVAL with a reason. */
int pr_trainer_client_read_token(const char *path, char *out, size_t out_size, char *errstr,
                                 size_t errstr_size);

/* What SubscribeOk said. Strings owned by the client. */
typedef struct pr_trainer_info {
    char pipeline[PR_NAME_MAX];
    uint32_t protocol_version;
    uint32_t n_dense;
    uint32_t n_sparse;
    uint32_t sparse_width;
    uint32_t credits;    /* window granted (may be lower than asked) */
    char **dense_names;  /* [n_dense] or NULL */
    char **sparse_names; /* [n_sparse] or NULL */
    uint32_t layout;     /* SubscribeOk.layout: 0 TrainingBatch, 1 raw tensors */
} pr_trainer_info;

/* Connect and subscribe. On failure returns PR_EIO/PR_EINVAL/PR_ETIMEDOUT
 * with a reason (a server Error message is quoted). */
int pr_trainer_client_open(const pr_trainer_client_opts *opts, pr_trainer_client **out,
                           char *errstr, size_t errstr_size);
const pr_trainer_info *pr_trainer_client_info(const pr_trainer_client *c);

/* Wait up to timeout_ms (-1 = forever) for the next batch. Returns 1 with *v
 * filled (clear it with pr_batch_view_fini), 0 on timeout, PR_EIO on EOF or
 * socket error ("server closed the connection"), PR_EBADREC on a bad frame,
 * PR_ESTATE when the server sent an Error (quoted in errstr). Server pings
 * are answered inside. */
int pr_trainer_client_next(pr_trainer_client *c, pr_batch_view *v, int timeout_ms, char *errstr,
                           size_t errstr_size);

/* Did the server say it is stopping (Error{SHUTDOWN}, returned as
 * PR_ESTATE by the call that read it)? A clean stop: the connection stays
 * open while the server drains, so acks and a last CheckpointCommit still
 * reach it. */
bool pr_trainer_client_stopping(const pr_trainer_client *c);

/* Acknowledge a batch (replenishes one credit). */
int pr_trainer_client_ack(pr_trainer_client *c, uint64_t seq);

/* Checkpoint delivery: a checkpoint holding every row of `ranges` (the
 * checkpoint's whole position, not the part since the last one) is durable;
 * call only after it is on disk (fsync'd). Sends CheckpointCommit{ranges,
 * id} and, when timeout_ms != 0, waits up to timeout_ms (-1 = forever) for
 * the server's CheckpointOk{id}, answering pings; batches that arrive
 * meanwhile stay buffered for pr_trainer_client_next(). Invalidates the last
 * batch view, as _next() does. Returns 1 when CheckpointOk came (*released =
 * batches the server let go of; may be NULL), 0 when it did not in time (or
 * timeout_ms == 0: sent only; a server in `delivery: ack` never answers),
 * PR_EINVAL for a bad range, PR_EIO/PR_EBADREC/PR_ESTATE as for _next(). */
int pr_trainer_client_checkpoint(pr_trainer_client *c, const pr_trainer_range *ranges, size_t n,
                                 uint64_t id, int timeout_ms, uint32_t *released, char *errstr,
                                 size_t errstr_size);

/* Close the socket without acking (what a crashed trainer looks like). */
void pr_trainer_client_close(pr_trainer_client *c);

/* ------------------------------------------------------------ positions */

/* A set of input offsets per (topic, partition), kept as sorted, merged
 * inclusive ranges: what a checkpoint holds. One thread at a time. */
typedef struct pr_trainer_position pr_trainer_position;

/* NULL when out of memory. Free with pr_trainer_position_free (NULL is fine). */
pr_trainer_position *pr_trainer_position_new(void);
void pr_trainer_position_free(pr_trainer_position *p);
/* Add [first, last]; overlapping and touching ranges merge. 0, PR_EINVAL
 * (first < 0 or first > last) or PR_ENOMEM. */
int pr_trainer_position_add(pr_trainer_position *p, const char *topic, int32_t partition,
                            int64_t first, int64_t last);
/* Add every offsets range of a received batch (after training on it). */
int pr_trainer_position_add_batch(pr_trainer_position *p, const pr_batch_view *v);
/* Add every range of `o` (union of data-parallel ranks). */
int pr_trainer_position_merge(pr_trainer_position *p, const pr_trainer_position *o);
/* The ranges, ordered by (topic, partition, first): *out points into p and
 * stays valid until p changes. Returns the count, or PR_ENOMEM. */
int64_t pr_trainer_position_ranges(pr_trainer_position *p, const pr_trainer_range **out);
/* Offsets held in total (sum of range lengths). */
uint64_t pr_trainer_position_count(const pr_trainer_position *p);
/* Write as a JSON object {"topic/partition": [[first, last], ...], ...}, the
 * format of the Python client's Position.to_dict(). 0 or PR_EIO. */
int pr_trainer_position_write_json(const pr_trainer_position *p, FILE *f);
/* Parse such an object starting at `s` (leading white space skipped) and add
 * its ranges to p; *end (may be NULL) is set past it. 0, PR_EBADREC with a
 * reason, or PR_ENOMEM. */
int pr_trainer_position_parse_json(pr_trainer_position *p, const char *s, const char **end,
                                   char *errstr, size_t errstr_size);

#endif
