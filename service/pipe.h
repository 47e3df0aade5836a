/*
 * pipe.h — the service's private types: one pipeline (pr__pipe: consumer,
 * engine, batcher, sinks, the two row blocks and the worker that runs them)
 * and the service that holds the pipelines, shared by the files that make
 * up the runtime:
 *
 *   service.c        construction, lifecycle, state dir (pr_service.h)
 *   pipe_ends.c      a pipeline's consumer and sinks
 *   pipeline.c       the pipeline thread: poll, offsets, rebalances, drain
 *   worker.c         the worker and its state machine (pr__wstate)
 *   http_views.c     /metrics, /healthz, /readyz, /v1/status, /v1/hot
 *   metrics_*.c      metric families, registered by the owner of the stats
 *
 * Threads: fields say which thread writes them; "under wlock" / "under lock"
 * name the mutex a reader must hold. See service.c for why the pipeline and
 * its worker split the work the way they do.
 */
#ifndef PR__PIPE_H
#define PR__PIPE_H

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pr_batcher.h"
#include "pr_fhealth.h"
#include "pr_hot.h"
#include "pr_http.h"
#include "pr_ingest.h"
#include "pr_service.h"
#include "pr_sink.h"
#include "pr_vocab.h"

#ifndef PR_VERSION
#define PR_VERSION "0.0.0"
#endif

#define PR__BLOCK_ROWS   4096
#define PR__MAX_PARTS    1024
#define PR__ACK_POLL_MS  2
#define PR__VLOG_WAIT_MS 5 /* per loop turn while a block waits for the vocab log */

/* The worker's state (pr__pipe.wstate): one block at a time goes from the
 * pipeline thread to the worker and back (worker.c).
 *
 *   IDLE --dispatch--> RUNNING --run ends--> DONE --collect--> IDLE
 *                                             |
 *                        (vocab log: wait) --collect--> HELD --dispatch--> RUNNING
 *
 * Every change goes through pr__wstate_set (under wlock), which logs it at
 * debug level. */
typedef enum pr__wstate {
    PR__W_IDLE,    /* wblk empty */
    PR__W_RUNNING, /* the worker runs wblk */
    PR__W_DONE,    /* run finished (wrc); the pipeline thread collects it */
    PR__W_HELD,    /* wblk waits for the vocab log: run again */
    PR__W__COUNT
} pr__wstate;

typedef struct pr__pipe pr__pipe;

struct pr__pipe {
    pr_service *svc;
    const pr_pipeline_cfg *cfg;
    size_t idx;

    pr_engine *eng;
    /* The engine's spec: the config's, or for a declared schema the one
     * pr_feature_engine_spec derives (espec); json: its decoder, used by the
     * consumer on the pipeline thread (pipe_schema.c). */
    const pr_pipeline_spec *spec;
    pr_pipeline_spec espec;
    pr_json_decoder *json;
    pr_consumer *cons;
    pr_batcher *bat;
    pr_sinkset *sinks;
    int trainer_port;
    pr_sink *ckpt_sink; /* the sink in checkpoint delivery (PR_SINK_CAP_CHECKPOINT), else NULL */
    uint8_t *skip;      /* per row of blk: in a checkpoint already (pr__skip_checkpointed) */
    size_t skip_cap;
    _Atomic uint64_t ckpt_skipped; /* rows skipped because a checkpoint holds them */
    /* Two row blocks (see "The loop"): the consumer fills `blk` on the
     * pipeline thread while the worker runs engine + batcher on `wblk`
     * (into `wout`); they swap when the worker is done. */
    pr_block *blk;
    pr_block *wblk;
    pr_out *wout;
    pthread_t wthread;
    bool wthread_started;
    pthread_mutex_t wlock;
    pthread_cond_t wcond;
    pr__wstate wstate;   /* under wlock; changed only by pr__wstate_set */
    int wrc;             /* the last run's result, under wlock */
    bool wquit;          /* under wlock */
    bool w_skip_done;    /* checkpoint filter already applied to wblk */
    uint32_t ahead_rows; /* rows of blk whose values were proposed ahead (vocab log) */
    bool wprof_on;       /* PIPEREC_WORKER_PROF=1: worker.c's phase counters, logged at stop */
    uint64_t wprof[16];  /* worker.c's pr__wprof slots (the worker's thread only) */
    /* Batches the worker emitted, in sequence order, for the pipeline
     * thread to encode and send while the worker runs the next block
     * (worker.c, "Deferred sends"; PIPEREC_WORKER_DEFER_EMIT=0: off). */
    bool emitq_on;
    pthread_mutex_t emitq_lock;
    pr_batch *emitq_head, *emitq_tail; /* linked by send_next; each holds a reference */
    /* Rows the batcher dropped as late while the worker ran: dead-lettered
     * by the pipeline thread when it collects the block. */
    struct pr__late {
        int32_t key;
        int64_t offset, event_time_ms;
    } * late;
    size_t n_late, late_cap;
    /* The vocabulary's durability and sharing (pr_vocab.h): local journal +
     * snapshot, or the shared vocab log. */
    pr_vocab_store *vs;
    /* Lowest offset per partition key of the rows still in blk/wblk, built
     * once per round of offset stores (pr__unproc_build): a scan of both
     * blocks per partition was 6% of the pipeline thread at 144 partitions. */
    struct pr__unproc *unproc;
    bool unproc_valid;

    /* Names for sinks (borrowed from cfg). */
    const char *dense_names[PR_MAX_DENSE_COLS];
    const char *sparse_names[PR_MAX_SPARSE];

    /* Partitions revoked since the block was last prepared: rows of theirs
     * already in a block must not reach the batcher. As many as were
     * revoked (a fixed-size list once dropped every row of the block past
     * 64 keys, partitions still owned included, whose offsets could then be
     * committed unprocessed); overflow only when memory runs out, and then
     * the pipeline stops. */
    int32_t *revoked_keys;
    size_t n_revoked, cap_revoked;
    pr_tp *tps; /* the assignment, read by each store of safe offsets */
    size_t cap_tps;
    bool revoked_overflow;

    int64_t next_ckpt_ns;            /* next vocabulary checkpoint (pr_vocab_store_persistent) */
    _Atomic uint64_t epoch;          /* restart epoch stamped on every batch (pr__epoch_bump) */
    int lock_fd;                     /* <state.dir>/<pipeline>.lock, held for life */
    bool have_lock;                  /* lock_fd is open */
    char dead_letter_file[PATH_MAX]; /* <state.dir>/<name>.deadletters, or "" */
    char member_file[PATH_MAX];      /* <state.dir>/<name>.member (consumer member id), or "" */
    char read_file[PATH_MAX];        /* <state.dir>/<name>.read: topics the group committed on */
    char floor_file[PATH_MAX]; /* <state.dir>/<name>.notices (pr_batcher_notice_floor), or "" */
    uint64_t floor_saved;      /* what was last written there (pr_notice_acks_digest) */
    int64_t floor_saved_ns;    /* when (pr_mono_ns) */
    char instance_id[256];     /* group.instance.id, or "" */

    pthread_t thread;
    bool thread_started;
    bool bp_paused;
    int64_t trainer_check_ns;     /* next look for waiting batches without a trainer */
    int64_t no_trainer_since_ns;  /* batches wait and no trainer is connected, since; 0 = not */
    int64_t no_trainer_warned_ns; /* last warning about it */
    bool drained;
    bool stored_since_commit;

    _Atomic int64_t last_turn_ns;
    _Atomic uint64_t loop_turns;
    _Atomic uint64_t poll_empty_ns, poll_rows_ns, worker_wait_ns; /* pr_pipeline_stats */
    _Atomic uint64_t inflight;
    _Atomic uint64_t inflight_peak;
    _Atomic uint64_t pauses;
    _Atomic uint64_t engine_rejects[PR_REJECT__ENGINE_COUNT];
    _Atomic uint64_t emit_errors;
    _Atomic uint64_t offsets_stored;
    _Atomic uint64_t commits;
    _Atomic uint64_t checkpoints;
    _Atomic int fatal; /* 0 or a PR_E* code */
    _Atomic bool done;
    char fatal_msg[640];

    /* Cache refreshed by the pipeline thread, read by others. */
    pthread_mutex_t lock;
    pr_engine_stats est;
    uint64_t vocab[PR_MAX_SPARSE];
    pr_fhealth health; /* feature health */
    int64_t est_ns;    /* est's and health's last refresh (pr_mono_ns): at most every 100 ms,
                        * and when forced (the end) */
    bool sinks_any_ready;
    size_t n_sink_stats;
    const char *sink_names[4];
    unsigned sink_caps[4]; /* pr_sink_caps */
    pr_sink_stats sink_stats[4];
    double rate_records, rate_rows_out, rate_batches;
    int64_t rate_t0_ns;
    uint64_t rate_records0, rate_rows0, rate_batches0;
    int drain_rc;

    /* Hot sets: one sketch per sparse column, NULL when hot.top_k is 0. The
     * pipeline thread updates them per block under hot_lock (its own lock so
     * a /v1/hot sort never holds up the stats cache); readers take it too. */
    pthread_mutex_t hot_lock;
    pr_hot **hot;
};

struct pr_service {
    const pr_config *cfg;
    pr_service_opts opts;
    const pr_clock *clock;
    pr__pipe *pipes;
    size_t n_pipes;
    pr_http *http;
    volatile sig_atomic_t stop_requested;
    bool started;
    bool stopped;
    int stop_rc;
    int64_t start_wall_ms;
};

/* ---- pipeline.c: the pipeline thread */
void *pr__pipe_main(void *arg);
void pr__set_fatal(pr__pipe *p, int rc, const char *msg);
void pr__refresh_cache(pr__pipe *p, int64_t now_ns, bool force);
/* Batcher, consumer and sink callbacks (pr__pipe_init wires them). */
uint64_t pr__vocab_cb(void *opaque, uint32_t col);
void pr__emit_cb(void *opaque, pr_batch *b);
void pr__emit_send(pr__pipe *p, pr_batch *b); /* encode + offer to the sinks, now */
bool pr__emit_defer(pr__pipe *p, pr_batch *b);
void pr__emit_drain(pr__pipe *p);
void pr__worker_init(pr__pipe *p); /* the send queue, the switches */
void pr__worker_fini(pr__pipe *p);
void pr__late_cb(void *opaque, const pr_block *in, const pr_out *out, uint32_t row);
void pr__on_assign(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n);
void pr__on_revoke(void *opaque, pr_consumer *c, const pr_tp *parts, size_t n);
void pr__on_reject(void *opaque, pr_consumer *c, const pr_reject_info *ri);
void pr__block_drop_revoked(pr__pipe *p, pr_block *b, const uint8_t *skip);

/* pipe_schema.c: a declared feature schema (p->json set). pr__schema_spec
 * sets p->spec (and the decoder); pr__schema_blocks the jagged blocks and
 * output; pr__schema_finish runs pr_feature_finish after the engine (no-op
 * for the Criteo layout); pr__schema_drop_rows removes the rows `drop`
 * says, keeping the order of the rest and their elements. */
int pr__schema_spec(pr__pipe *p, char *errstr, size_t errstr_size);
int pr__schema_blocks(pr__pipe *p, uint32_t block_rows);
int pr__schema_finish(pr__pipe *p, pr_block *b, pr_out *o, char *errstr, size_t errstr_size);
void pr__schema_drop_rows(pr_block *b, bool (*drop)(void *, const pr_block *, uint32_t),
                          void *opaque);
void pr__dead_letter_engine_rejects(pr__pipe *p, const pr_block *in, const pr_out *out);
void pr__send_late(pr__pipe *p);
/* The lowest-unprocessed-offset index (p->unproc; NULL is fine: the slow path). */
struct pr__unproc *pr__unproc_new(void);

/* ---- worker.c: the worker (the pipeline thread calls these) */
const char *pr__wstate_name(pr__wstate st);
void *pr__worker_main(void *arg);
pr__wstate pr__wstate_get(pr__pipe *p);
pr__wstate pr__worker_collect(pr__pipe *p);
void pr__worker_dispatch(pr__pipe *p);
void pr__worker_wait(pr__pipe *p, int timeout_ms);
void pr__worker_join(pr__pipe *p);
void pr__worker_start_block(pr__pipe *p);
void pr__worker_quit(pr__pipe *p);

/* ---- pipe_ends.c: the consumer and the sinks of a pipeline */
int pr__sinks_open(pr__pipe *p, const pr_clock *clock, char *errstr, size_t errstr_size);
int pr__consumer_open(pr_service *svc, pr__pipe *p, char *errstr, size_t errstr_size);
/* TrainingBatch.replica (see pipe_ends.c). */
void pr__replica_name(const pr_pipeline_cfg *pc, char *out, size_t n);

/* ---- service.c: the state dir */
void pr__pipe_checkpoint(pr__pipe *p);

/* ---- http_views.c */
int pr__http_views_start(pr_service *svc, char *errstr, size_t errstr_size);

#endif
