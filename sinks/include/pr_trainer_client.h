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
 */
#ifndef PR_TRAINER_CLIENT_H
#define PR_TRAINER_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"

#define PR_TRAINER_PROTOCOL_VERSION 1

typedef struct pr_trainer_client pr_trainer_client;

typedef struct pr_trainer_client_opts {
    const char *connect; /* "host:port" */
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

/* Acknowledge a batch (replenishes one credit). */
int pr_trainer_client_ack(pr_trainer_client *c, uint64_t seq);

/* Close the socket without acking (what a crashed trainer looks like). */
void pr_trainer_client_close(pr_trainer_client *c);

#endif
