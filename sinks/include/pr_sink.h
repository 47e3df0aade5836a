/*
 * pr_sink.h — where batches go: sinks behind one ops table, and the sink set
 * that turns "every sink acknowledged batch N" into one ack for the batcher.
 *
 * Sinks (one const pr_sink_ops each, listed by pr_sink_ops_at()):
 *   trainer  TCP server streaming TrainingBatch frames to trainers
 *            (docs/trainer-protocol.md): credit window per trainer, ack by
 *            sequence, unacked batches of a trainer that goes away are sent to
 *            another one; each batch goes to exactly one trainer. Own I/O thread.
 *   kafka    idempotent producer (enable.idempotence=true, acks=all); value =
 *            TrainingBatch, key = pipeline, header "piperec.sequence"; a batch
 *            is acked by its delivery report.
 *   files    the offline .npy layout, DIR/batches-<epoch>-<first>-<last>/ rolled every
 *            roll_batches batches; batches are acked only once their roll is
 *            written, fsync'd and renamed into place (see sink_files.c).
 *
 * Contract of every sink:
 *   send()   non-blocking. 0 = accepted (the sink took its own pr_batch_ref);
 *            PR_EAGAIN = full, try later (backpressure); other < 0 = error.
 *            The batch is already encoded (b->pb) when a sink gets it.
 *   poll()   non-blocking; reports newly acknowledged sequences through the
 *            callback (each at most once), returns how many or < 0.
 *   ready()  for /readyz: the sink can make progress (listening; producer
 *            has no fatal error; directory writable).
 *   free_()  stops threads, drops references, frees. Unacked batches are
 *            simply dropped: their offsets were never committed.
 * All calls come from one thread (the pipeline thread); get_stats may be
 * called from any thread.
 *
 * Beyond that contract a sink declares capabilities (pr_sink_cap: readers'
 * acks, redelivery, checkpoint delivery, a listening port) with optional
 * callbacks in its ops table; the core asks pr_sink_caps() and the
 * capability calls, and never names a sink.
 */
#ifndef PR_SINK_H
#define PR_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pr_batcher.h"
#include "pr_cfgmap.h"
#include "pr_clock.h"
#include "pr_error.h"

/* ---------------------------------------------------------------- settings (sink_cfg.c) */

/* Each sink's settings, exactly the keys of its `sinks.<name>` section. The
 * keys, ranges, defaults and docs are the tables below (one per sink), which
 * the YAML loader applies and docs/configuration.md is generated from;
 * pr_cfgmap_set_defaults(&pr_sink_trainer_cfgmap, &cfg.trainer) gives the
 * documented defaults. Entries flagged PR_CFG_INTERNAL are tuning knobs that
 * are not YAML keys. For API compatibility a sink treats a 0 / NULL field as
 * its table default (pr_cfgmap_default_zero), except where noted.
 * Strings are borrowed: they must outlive create(). */
/* sinks.trainer.delivery; config names in pr_trainer_delivery_names. */
typedef enum pr_trainer_delivery {
    PR_TRAINER_DELIVERY_ACK = 0,        /* "ack": an Ack releases the batch's offsets */
    PR_TRAINER_DELIVERY_CHECKPOINT = 1, /* "checkpoint": only a CheckpointCommit covering it does */
} pr_trainer_delivery;
extern const char *const pr_trainer_delivery_names[];

typedef struct pr_trainer_sink_cfg {
    bool enabled;                 /* the section is present (and enabled: true) */
    const char *listen;           /* "host:port", port 0 = any; default 127.0.0.1:7070 */
    const char *unix_path;        /* also listen on this Unix domain socket; NULL = no */
    uint32_t max_unacked_batches; /* credit window per trainer; default 64 */
    int64_t ack_timeout_ms;       /* unacked this long -> trainer dropped, batch re-sent; default
                                   * 30000; 0 = never (not reachable from YAML, which needs >= 1) */
    int64_t keepalive_ms;         /* internal: server Ping interval; default 10000 */
    uint32_t max_queued_batches;  /* send() refuses beyond this many unacked; 0 = unbounded */
    /* Network hardening (docs/operations.md "Security"). */
    uint32_t max_connections;          /* open connections, subscribed or not; default 64 */
    int64_t handshake_timeout_ms;      /* accept -> SubscribeOk (TLS included); default 10000 */
    int64_t idle_timeout_ms;           /* nothing received this long -> closed; default 60000 */
    uint32_t max_frame_bytes;          /* largest client frame; default 1 MiB */
    uint64_t max_receive_buffer_bytes; /* receive buffers over all connections beyond each
                                        * one's first 4 KiB; default 16 MiB */
    pr_trainer_delivery delivery;      /* ack (default) | checkpoint (docs/trainer-protocol.md) */
    struct pr_trainer_tls_cfg {
        bool enabled;            /* the `tls` section is present (and enabled: true) */
        const char *cert_file;   /* PEM certificate chain; required */
        const char *key_file;    /* PEM private key; required */
        const char *ca_file;     /* PEM CAs for client certificates: set = mutual TLS */
        const char *min_version; /* "1.2" (default) or "1.3" */
    } tls;
    struct pr_trainer_auth_cfg {
        const char *token_file; /* bearer tokens, one per line; set = Subscribe needs one */
    } auth;
} pr_trainer_sink_cfg;
typedef struct pr_trainer_tls_cfg pr_trainer_tls_cfg;
typedef struct pr_trainer_auth_cfg pr_trainer_auth_cfg;

typedef struct pr_kafka_sink_cfg {
    bool enabled;
    const char *topic;           /* required */
    pr_kv_list properties;       /* librdkafka producer properties */
    uint32_t max_queued_batches; /* internal: send() refuses beyond this; default 10000 */
} pr_kafka_sink_cfg;

typedef struct pr_files_sink_cfg {
    bool enabled;
    const char *dir;       /* required */
    uint32_t roll_batches; /* batches per file set; default 100 */
    int64_t roll_max_ms;   /* internal: close a roll this old at poll; default 1000 */
} pr_files_sink_cfg;

/* A pipeline's `sinks` section. */
typedef struct pr_sinks_cfg {
    pr_trainer_sink_cfg trainer;
    pr_kafka_sink_cfg kafka;
    pr_files_sink_cfg files;
} pr_sinks_cfg;

extern const pr_cfgmap pr_sink_trainer_cfgmap;
extern const pr_cfgmap pr_sink_trainer_tls_cfgmap;  /* sinks.trainer.tls */
extern const pr_cfgmap pr_sink_trainer_auth_cfgmap; /* sinks.trainer.auth */
extern const pr_cfgmap pr_sink_kafka_cfgmap;
extern const pr_cfgmap pr_sink_files_cfgmap;

typedef struct pr_sink_cfg {
    const char *pipeline;
    uint16_t n_dense;
    uint16_t n_sparse;
    uint8_t sparse_width;
    const char *const *dense_names;  /* [n_dense] or NULL */
    const char *const *sparse_names; /* [n_sparse] or NULL */
    const pr_clock *clock;           /* NULL = real */
    pr_trainer_sink_cfg trainer;
    pr_kafka_sink_cfg kafka;
    pr_files_sink_cfg files;
} pr_sink_cfg;

typedef struct pr_sink pr_sink;

typedef void (*pr_sink_ack_cb)(void *opaque, uint64_t seq);

typedef struct pr_sink_stats {
    uint64_t batches_sent; /* accepted by send() */
    uint64_t batches_acked;
    uint64_t bytes_sent;      /* bytes written out (frames, messages, files) */
    uint64_t batches_refused; /* send() returned PR_EAGAIN */
    uint64_t redeliveries;    /* trainer: batches re-sent after a trainer left */
    uint64_t errors;
    uint64_t queued_batches; /* gauge: accepted, not yet acked */
    uint64_t clients;        /* trainer: connected subscribed trainers */
    /* Trainer sink only (zero for other sinks): the network surface. Arrays
     * are indexed by the reason enums below; pr_trainer_*_reason_name()
     * gives the metric label. */
    uint64_t connections;          /* gauge: open sockets, subscribed or not */
    uint64_t receive_buffer_bytes; /* gauge: bytes held by receive buffers */
    uint64_t io_wakeups;           /* I/O thread loop turns (a spin shows here) */
    uint64_t refused[6];           /* pr_trainer_refuse_reason */
    uint64_t dropped[6];           /* pr_trainer_drop_reason */
    uint64_t auth_failures[3];     /* pr_trainer_auth_reason */
} pr_sink_stats;

/* Connections the trainer sink closed before they reached the protocol. */
typedef enum pr_trainer_refuse_reason {
    PR_TRAINER_REFUSE_MAX_CONNECTIONS, /* sinks.trainer.max_connections reached */
    PR_TRAINER_REFUSE_FD_EXHAUSTED,    /* accept() hit EMFILE/ENFILE: accepted and closed */
    PR_TRAINER_REFUSE_TLS_HANDSHAKE,   /* TLS handshake failed (not a client-cert problem) */
    PR_TRAINER_REFUSE_PLAINTEXT,       /* plain TCP client on a TLS port */
    PR_TRAINER_REFUSE__COUNT
} pr_trainer_refuse_reason;

/* Connections the trainer sink dropped after accepting them. */
typedef enum pr_trainer_drop_reason {
    PR_TRAINER_DROP_HANDSHAKE_TIMEOUT, /* no Subscribe within handshake_timeout_ms */
    PR_TRAINER_DROP_IDLE_TIMEOUT,      /* nothing received within idle_timeout_ms */
    PR_TRAINER_DROP_ACK_TIMEOUT,       /* a batch unacked past ack_timeout_ms */
    PR_TRAINER_DROP_FRAME_TOO_LARGE,   /* a frame above max_frame_bytes */
    PR_TRAINER_DROP_RECEIVE_BUFFER,    /* max_receive_buffer_bytes exhausted */
    PR_TRAINER_DROP_PROTOCOL,          /* bad frame, wrong message, version, pipeline */
    PR_TRAINER_DROP__COUNT
} pr_trainer_drop_reason;

typedef enum pr_trainer_auth_reason {
    PR_TRAINER_AUTH_MISSING_TOKEN, /* token required, Subscribe had none */
    PR_TRAINER_AUTH_BAD_TOKEN,     /* not one of the token file's tokens */
    PR_TRAINER_AUTH_CLIENT_CERT,   /* mutual TLS: no or untrusted client certificate */
    PR_TRAINER_AUTH__COUNT
} pr_trainer_auth_reason;

const char *pr_trainer_refuse_reason_name(int r);
const char *pr_trainer_drop_reason_name(int r);
const char *pr_trainer_auth_reason_name(int r);

/* What a sink can do beyond send/poll/ready/stats, declared in its ops
 * table: the core asks for a capability, never for a sink by name.
 *
 * PR_SINK_CAP_ACKS        a batch is acknowledged by its reader (a trainer's
 *                         ack), not when it is written out; poll() reports
 *                         the acks as they come.
 * PR_SINK_CAP_REDELIVERY  a batch a reader left unacknowledged goes again to
 *                         another reader (pr_sink_stats.redeliveries).
 * PR_SINK_CAP_CHECKPOINT  checkpoint delivery (docs/trainer-protocol.md):
 *                         checkpoint_mode, resume_known, resume_filter.
 * PR_SINK_CAP_LISTENER    readers connect to a port: port, buffered_bytes,
 *                         and the connection counters of pr_sink_stats.
 * PR_SINK_CAP_ENCODES     send() takes a batch not yet encoded
 *                         (pr_batch_encode) and encodes it on the sink's own
 *                         thread when it needs the bytes; a sink set whose
 *                         only sink has it leaves the encoding to it (issue
 *                         21: off the pipeline thread). */
typedef enum pr_sink_cap {
    PR_SINK_CAP_ACKS = 1u << 0,
    PR_SINK_CAP_REDELIVERY = 1u << 1,
    PR_SINK_CAP_CHECKPOINT = 1u << 2,
    PR_SINK_CAP_LISTENER = 1u << 3,
    PR_SINK_CAP_ENCODES = 1u << 4,
} pr_sink_cap;

typedef struct pr_sink_ops {
    const char *name; /* "trainer", "kafka", "files": the config key under sinks */
    const char *doc;  /* one line, for --help and docs */
    /* offsetof(pr_sinks_cfg, <name>.enabled): whether a pipeline's config
     * turns this sink on. */
    size_t enabled_off;
    unsigned caps; /* pr_sink_cap flags */
    int (*new_)(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t errstr_size);
    int (*send)(pr_sink *s, pr_batch *b);
    int (*poll)(pr_sink *s, pr_sink_ack_cb cb, void *opaque);
    bool (*ready)(pr_sink *s);
    void (*get_stats)(pr_sink *s, pr_sink_stats *st);
    void (*free_)(pr_sink *s);
    /* PR_SINK_CAP_LISTENER (NULL otherwise). */
    int (*port)(pr_sink *s);
    uint64_t (*buffered_bytes)(pr_sink *s);
    /* PR_SINK_CAP_CHECKPOINT (NULL otherwise). */
    bool (*checkpoint_mode)(pr_sink *s);
    bool (*resume_known)(pr_sink *s);
    uint32_t (*resume_filter)(pr_sink *s, const char *const *topics, size_t n_topics,
                              const int32_t *keys, const int64_t *offsets, uint32_t n,
                              uint8_t *skip);
} pr_sink_ops;

/* Every sink struct starts with this header. */
struct pr_sink {
    const pr_sink_ops *ops;
};

extern const pr_sink_ops pr_sink_trainer_ops;
extern const pr_sink_ops pr_sink_kafka_ops;
extern const pr_sink_ops pr_sink_files_ops;

/* The built sinks, in table order: i = 0, 1, ... until NULL. */
const pr_sink_ops *pr_sink_ops_at(size_t i);

/* Convenience wrappers over s->ops. */
int pr_sink_new(const pr_sink_ops *ops, const pr_sink_cfg *cfg, pr_sink **out, char *errstr,
                size_t errstr_size);
static inline int pr_sink_send(pr_sink *s, pr_batch *b)
{
    return s->ops->send(s, b);
}
static inline int pr_sink_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
{
    return s->ops->poll(s, cb, opaque);
}
static inline bool pr_sink_ready(pr_sink *s)
{
    return s->ops->ready(s);
}
static inline void pr_sink_get_stats(pr_sink *s, pr_sink_stats *st)
{
    s->ops->get_stats(s, st);
}
static inline const char *pr_sink_name(const pr_sink *s)
{
    return s->ops->name;
}
void pr_sink_free(pr_sink *s); /* NULL-safe */

static inline unsigned pr_sink_caps(const pr_sink *s)
{
    return s->ops->caps;
}

/* Capability calls: each answers for any sink, with the neutral answer for a
 * sink without the capability. Any thread.
 *
 * pr_sink_port (LISTENER): the TCP port actually bound (useful with port 0),
 * or -1.
 *
 * pr_sink_buffered_bytes (LISTENER): bytes its receive buffers hold now
 * (lock-free), else 0. The service counts them in limits.max_inflight_bytes.
 *
 * pr_sink_checkpoint_mode (CHECKPOINT): the sink runs in checkpoint delivery
 * (sinks.trainer.delivery: checkpoint; docs/trainer-protocol.md "Checkpoint
 * delivery"); false for other sinks and in ack mode.
 *
 * pr_sink_resume_known (CHECKPOINT): a reader has subscribed since the sink
 * started, so the resume position (the union of the positions trainers sent
 * in Subscribe) is known; true when not in checkpoint mode. Until then the
 * service reads nothing, so that no batch is cut from rows a trainer's
 * checkpoint already holds.
 *
 * pr_sink_resume_filter (CHECKPOINT): for each of the `n` rows (topic name by
 * topic index of its partition key, PR_PART_KEY in pr_engine.h; offset), set
 * skip[r] to 1 when the row lies in the resume position (a durable
 * checkpoint holds it: it must not be delivered again and its offset may be
 * committed), else 0. Returns how many were set (0 when not in checkpoint
 * mode, skip untouched). */
int pr_sink_port(pr_sink *s);
uint64_t pr_sink_buffered_bytes(pr_sink *s);
bool pr_sink_checkpoint_mode(pr_sink *s);
bool pr_sink_resume_known(pr_sink *s);
uint32_t pr_sink_resume_filter(pr_sink *s, const char *const *topics, size_t n_topics,
                               const int32_t *keys, const int64_t *offsets, uint32_t n,
                               uint8_t *skip);

/* ---------------------------------------------------------------- sink set */

/* A pipeline's sinks. send() encodes the batch once and offers it to every
 * sink; a sink that answers PR_EAGAIN gets it again at the next poll (in
 * sequence order), so the caller never has to retry. poll() polls every sink
 * and calls `cb(seq)` once a batch has been acknowledged by all of them
 * (in whatever order that happens). Pipeline thread only. */
typedef struct pr_sinkset pr_sinkset;

pr_sinkset *pr_sinkset_new(void);
/* Takes ownership of `s` (freed by pr_sinkset_free). */
int pr_sinkset_add(pr_sinkset *ss, pr_sink *s);
size_t pr_sinkset_count(const pr_sinkset *ss);
pr_sink *pr_sinkset_get(pr_sinkset *ss, size_t i);
/* Returns 0, or a sink's hard error (the batch may have reached other sinks). */
int pr_sinkset_send(pr_sinkset *ss, pr_batch *b);
int pr_sinkset_poll(pr_sinkset *ss, pr_sink_ack_cb cb, void *opaque);
/* All sinks ready (and at least one sink). */
bool pr_sinkset_ready(pr_sinkset *ss);
/* Sum of pr_sink_buffered_bytes() over the set (any thread). */
uint64_t pr_sinkset_buffered_bytes(pr_sinkset *ss);
void pr_sinkset_free(pr_sinkset *ss);

/* ---------------------------------------------------------------- raw layout */

/* `b` as the trainer stream sends it to a raw client (docs/trainer-protocol.md,
 * "Raw batch layout"): the whole frame (u32 length, tag, varint, payload),
 * allocated 64-byte aligned (free()), sections aligned when the frame is;
 * *payload_at: where the payload (its 128-byte header) starts. Encodes b's
 * TrainingBatch first (pr_batch_encode) for the metadata section. 0,
 * PR_ENOMEM, or PR_EINVAL for a batch over the frame limit. (`piperec serve`
 * answers ?layout=raw with it.) */
int pr_batch_raw_frame(pr_batch *b, uint8_t **frame, size_t *len, size_t *payload_at);

#endif
