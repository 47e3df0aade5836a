/*
 * pr_sink.h — where batches go: sinks behind one ops table, and the sink set
 * that turns "every sink acknowledged batch N" into one ack for the batcher.
 *
 * Sinks (one const pr_sink_ops each, found by name with pr_sink_find()):
 *   trainer  TCP server streaming TrainingBatch frames to trainers
 *            (docs/trainer-protocol.md): credit window per trainer, ack by
 *            sequence, unacked batches of a trainer that goes away are sent to
 *            another one; each batch goes to exactly one trainer. Own I/O thread.
 *   kafka    idempotent producer (enable.idempotence=true, acks=all); value =
 *            TrainingBatch, key = pipeline, header "piperec.sequence"; a batch
 *            is acked by its delivery report.
 *   files    the offline .npy layout, DIR/batches-<first>-<last>/ rolled every
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
typedef struct pr_trainer_sink_cfg {
    bool enabled;                 /* the section is present (and enabled: true) */
    const char *listen;           /* "host:port", port 0 = any; default 127.0.0.1:7070 */
    uint32_t max_unacked_batches; /* credit window per trainer; default 64 */
    int64_t ack_timeout_ms;       /* unacked this long -> trainer dropped, batch re-sent; default
                                   * 30000; 0 = never (not reachable from YAML, which needs >= 1) */
    int64_t keepalive_ms;         /* internal: server Ping interval; default 10000 */
    uint32_t max_queued_batches;  /* send() refuses beyond this many unacked; 0 = unbounded */
} pr_trainer_sink_cfg;

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
} pr_sink_stats;

typedef struct pr_sink_ops {
    const char *name; /* "trainer", "kafka", "files" */
    const char *doc;  /* one line, for --help and docs */
    int (*new_)(const pr_sink_cfg *cfg, pr_sink **out, char *errstr, size_t errstr_size);
    int (*send)(pr_sink *s, pr_batch *b);
    int (*poll)(pr_sink *s, pr_sink_ack_cb cb, void *opaque);
    bool (*ready)(pr_sink *s);
    void (*get_stats)(pr_sink *s, pr_sink_stats *st);
    void (*free_)(pr_sink *s);
} pr_sink_ops;

/* Every sink struct starts with this header. */
struct pr_sink {
    const pr_sink_ops *ops;
};

extern const pr_sink_ops pr_sink_trainer_ops;
extern const pr_sink_ops pr_sink_kafka_ops;
extern const pr_sink_ops pr_sink_files_ops;

/* Lookup by name ("trainer", "kafka", "files"); NULL when unknown. */
const pr_sink_ops *pr_sink_find(const char *name);

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

/* Trainer sink: the TCP port actually bound (useful with port 0), or -1. */
int pr_sink_trainer_port(pr_sink *s);

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
void pr_sinkset_free(pr_sinkset *ss);

#endif
