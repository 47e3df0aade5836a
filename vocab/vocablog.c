/*
 * vocablog.c — pr_vocablog: replicas share one vocabulary through a
 * single-partition Kafka topic (contract: pr_vocab.h, "shared log"; the argument why it
 * is correct: docs/vocab-log.md).
 *
 * Shape: an idempotent producer (acks=all, retried forever) appends
 * Proposals; a reader assigned to partition 0 (no consumer group) applies
 * every record in offset order to the engine. Both are driven from the
 * pipeline thread, so the engine is only ever touched by that thread and a
 * record is applied whole before anything else looks at the vocabulary.
 *
 * A waiting block: its distinct unknown values (deduplicated, occurrences
 * counted, in first-appearance order per column) go out as one or more
 * records; the block is ready once every record was acknowledged by the
 * broker (which gives its offset) and the reader has applied the log past
 * the largest of those offsets. A record that failed to deliver (only
 * permanent errors: the producer retries transient ones forever) is sent
 * again, with the values still unknown.
 *
 * Eviction (columns with eviction lru/lfu/ttl): the log decides it too.
 * Applying a proposal into a full column evicts by the column's statistics,
 * and those statistics change only through the log: lookups while
 * processing count uses per slot, which go out every usage_interval_ms as
 * a Usage record that every replica applies (pr_engine_vocab_touch). So all
 * replicas make the same evictions at the same log positions and number the
 * same recycled-index notices alike. A value evicted again while its block
 * waited is proposed again (PR__MAX_ROUNDS rounds); past that the block is
 * processed with it as OOV (counted), never with an invented index.
 *
 * Liveness: an idle replica fetches nothing new, so deliveries and reads
 * alone cannot tell "up" from "quietly down". A probe thread asks the
 * broker for the log's end offset once a second (librdkafka handles are
 * thread-safe; the probe touches only atomics of ours), which keeps
 * piperec_vocab_log_up and the log lag true while no block is waiting.
 */
#define _GNU_SOURCE
#include "pr_vocab.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "pr_clock.h"
#include "pr_grow.h"
#include "pr_ingest.h"
#include "pr_log.h"
#include "vocab_int.h"
#include "vocablog.pb-c.h"

#define PR__REC_MAX_ENTRIES 16384 /* entries per Proposals record (~200 KB at most) */
#define PR__UP_WINDOW_NS    5000000000LL
#define PR__PROBE_EVERY_MS  1000
#define PR__MAX_ROUNDS      8 /* proposal rounds of one block (evicting columns) */
#define PR__TAG_MAGIC       "PRVLOG1"

/* Deduplicated misses of one block: open addressing over (col, key). */
typedef struct pr__miss {
    uint64_t key;
    uint32_t col;
    uint32_t count;
} pr__miss;

struct pr_vocablog {
    char *pipeline, *replica, *topic, *snap_path;
    uint64_t epoch;
    int64_t startup_timeout_ms;
    bool read_only; /* never writes (pr_vocablog_opts.read_only) */
    pr_engine *eng;
    const pr_pipeline_spec *spec;
    rd_kafka_t *prod;
    rd_kafka_t *cons;

    bool have_settings;
    uint64_t log_id;
    int64_t next; /* next offset to apply */

    /* eviction through the log */
    bool evict;                /* some column evicts */
    int64_t usage_interval_ns; /* Usage records this often */
    int64_t last_usage_ns;
    int rounds;      /* proposal rounds of the waiting block */
    bool oov_set;    /* undecided values map to OOV for the block being processed */
    pr__miss *usage; /* drained usage (col, key, count), then packed */
    size_t n_usage, usage_cap;

    /* look-ahead: the next block's values, proposed while this one waits
     * (only where proposals are idempotent: no counting, no eviction) */
    bool counting;            /* some column has min_count > 1 */
    int ahead_inflight;       /* look-ahead records without a delivery report */
    int64_t ahead_max_offset; /* largest offset of a delivered look-ahead record */
    int64_t t_ahead_wait_ns;  /* when the next block began waiting for them; 0 = not */

    /* the waiting block */
    bool pending;
    bool resend;         /* a record of it failed: propose what is still unknown */
    int inflight;        /* records without a delivery report */
    int64_t max_offset;  /* largest offset of its delivered records */
    int64_t t_submit_ns; /* first proposal */

    /* misses of the current block */
    pr__miss *miss; /* entries in first-appearance order */
    size_t n_miss, miss_cap;
    uint32_t *slots; /* hash slots: entry index + 1, 0 = free */
    size_t n_slots;  /* power of two */

    pr_ratelimit rl;
    pr_histogram wait; /* has its own lock */
    _Atomic int64_t st_applied, st_end;
    _Atomic uint64_t st_records, st_values, st_assigned, st_proposals, st_prop_records,
        st_blocks_waited, st_ahead_values, st_corrupt, st_produce_err, st_consume_err, st_waiting,
        st_usage_records, st_usage_values, st_rounds_exhausted;
    _Atomic int64_t last_ok_ns, last_err_ns;

    /* tests (pr__vocablog_hold_from): records from this offset on are not
     * applied yet, as if the reader were slow; INT64_MAX: none held */
    int64_t hold_from;
    rd_kafka_message_t *held; /* the first record held back */

    /* the liveness probe */
    pthread_t probe;
    bool probe_started;
    pthread_mutex_t probe_mu;
    pthread_cond_t probe_cv;
    bool probe_stop; /* under probe_mu */
};

/* ---------------------------------------------------------------- settings */

static void pr__log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    pr_log_level l = level <= 3 ? PR_LOG_ERROR : level <= 4 ? PR_LOG_WARN : PR_LOG_DEBUG;
    pr_log(l, "vocab log: librdkafka %s: %s", fac, buf);
}

static void pr__error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    pr_vocablog *vl = opaque;
    atomic_fetch_add(&vl->st_consume_err, 1);
    atomic_store(&vl->last_err_ns, pr_mono_ns());
    pr_log_ratelimited(&vl->rl, PR_LOG_WARN, "pipeline %s: vocab log %s: %s: %s", vl->pipeline,
                       vl->topic, rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* The per-message opaque of Usage records: they are not a waiting block's. */
static char pr__usage_tag;
static char pr__ahead_tag;

static void pr__dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr_vocablog *vl = opaque;
    if (m->_private == &pr__ahead_tag) {
        /* A look-ahead proposal: the block it was for proposes whatever the
         * log has not decided when its turn comes, so a lost one costs only
         * that round trip. Its offset is what that block waits for first. */
        if (vl->ahead_inflight > 0)
            vl->ahead_inflight--;
        if (m->err) {
            atomic_fetch_add(&vl->st_produce_err, 1);
            atomic_store(&vl->last_err_ns, pr_mono_ns());
        } else {
            atomic_store(&vl->last_ok_ns, pr_mono_ns());
            if (m->offset > vl->ahead_max_offset)
                vl->ahead_max_offset = m->offset;
        }
        return;
    }
    if (m->_private == &pr__usage_tag) {
        /* A lost Usage record is lost for every replica alike: statistics
         * stay identical, only less precise. Counted, not sent again. */
        if (m->err) {
            atomic_fetch_add(&vl->st_produce_err, 1);
            atomic_store(&vl->last_err_ns, pr_mono_ns());
            pr_log_ratelimited(&vl->rl, PR_LOG_WARN,
                               "pipeline %s: vocab log %s: a Usage record was not stored (%s)",
                               vl->pipeline, vl->topic, rd_kafka_err2str(m->err));
        } else {
            atomic_store(&vl->last_ok_ns, pr_mono_ns());
        }
        return;
    }
    if (vl->inflight > 0)
        vl->inflight--;
    if (m->err) {
        vl->resend = true;
        atomic_fetch_add(&vl->st_produce_err, 1);
        atomic_store(&vl->last_err_ns, pr_mono_ns());
        pr_log_ratelimited(&vl->rl, PR_LOG_WARN,
                           "pipeline %s: vocab log %s: a proposal was not stored (%s); proposing "
                           "again",
                           vl->pipeline, vl->topic, rd_kafka_err2str(m->err));
        return;
    }
    atomic_store(&vl->last_ok_ns, pr_mono_ns());
    if (m->offset > vl->max_offset)
        vl->max_offset = m->offset;
}

/* A librdkafka client of `role` (pr_kafka.h: PR_KAFKA_VOCAB_PRODUCER or
 * PR_KAFKA_VOCAB_READER) from the vocab log's properties; `set` (the
 * reader's group.id) goes last. */
static rd_kafka_t *pr__handle(pr_vocablog *vl, pr_kafka_role role, const pr_kv_list *props,
                              const pr_kv *set, size_t n_set, char *errstr, size_t errstr_size)
{
    pr_kafka_client_conf cc = {.role = role,
                               .props = props->items,
                               .n_props = props->n,
                               .set = set,
                               .n_set = n_set,
                               .opaque = vl,
                               .log_cb = pr__log_cb,
                               .error_cb = pr__error_cb,
                               .dr_msg_cb = role == PR_KAFKA_VOCAB_PRODUCER ? pr__dr_cb : NULL};
    rd_kafka_t *rk;
    return pr_kafka_client_new(&cc, &rk, errstr, errstr_size) ? NULL : rk;
}

/* The Settings record this pipeline would write. Strings point into spec. */
typedef struct pr__settings {
    Piperec__Vocablog__V1__Settings s;
    Piperec__Vocablog__V1__Column cols[PR_MAX_SPARSE];
    Piperec__Vocablog__V1__Column *colp[PR_MAX_SPARSE];
    char *ops[PR_MAX_OPS];
} pr__settings;

static void pr__settings_build(const pr_vocablog *vl, pr__settings *ps)
{
    const pr_pipeline_spec *sp = vl->spec;
    piperec__vocablog__v1__settings__init(&ps->s);
    ps->s.format_version = 1;
    ps->s.pipeline = vl->pipeline;
    ps->s.profile = (char *)pr_vocab_profile_name(sp->profile);
    for (unsigned i = 0; i < sp->n_sparse_ops; i++)
        ps->ops[i] = (char *)pr_op_name((pr_op)sp->sparse_ops[i]);
    ps->s.n_sparse_ops = sp->n_sparse_ops;
    ps->s.sparse_ops = ps->ops;
    bool mod = pr_spec_has_op(sp, PR_OP_MODULUS);
    for (uint32_t c = 0; c < sp->n_sparse; c++) {
        piperec__vocablog__v1__column__init(&ps->cols[c]);
        ps->cols[c].name = (char *)sp->sparse[c].name;
        ps->cols[c].modulus = mod ? sp->sparse[c].modulus : 0;
        ps->cols[c].min_count = sp->sparse[c].min_count;
        ps->cols[c].capacity = sp->sparse[c].capacity;
        ps->cols[c].input_fingerprint = sp->sparse[c].input_fp;
        if (sp->sparse[c].eviction != PR_EVICT_NONE) {
            ps->cols[c].eviction = (char *)pr_vocab_eviction_names[sp->sparse[c].eviction];
            ps->cols[c].ttl_records = sp->sparse[c].ttl_records;
            ps->cols[c].decay_records = sp->sparse[c].decay_records;
        }
        ps->colp[c] = &ps->cols[c];
    }
    ps->s.n_columns = sp->n_sparse;
    ps->s.columns = ps->colp;
    ps->s.created_by = vl->replica;
}

/* First difference between the log's settings and ours, or "" when none. */
static void pr__settings_diff(const Piperec__Vocablog__V1__Settings *log,
                              const Piperec__Vocablog__V1__Settings *mine, char *out, size_t n)
{
    out[0] = 0;
    if (strcmp(log->profile, mine->profile)) {
        snprintf(out, n, "profile is %s in the log, %s here", log->profile, mine->profile);
        return;
    }
    char a[128] = "", b[128] = "";
    for (size_t i = 0; i < log->n_sparse_ops; i++)
        snprintf(a + strlen(a), sizeof(a) - strlen(a), "%s%s", i ? "," : "", log->sparse_ops[i]);
    for (size_t i = 0; i < mine->n_sparse_ops; i++)
        snprintf(b + strlen(b), sizeof(b) - strlen(b), "%s%s", i ? "," : "", mine->sparse_ops[i]);
    if (strcmp(a, b)) {
        snprintf(out, n, "transform.sparse is [%s] in the log, [%s] here", a, b);
        return;
    }
    if (log->n_columns != mine->n_columns) {
        snprintf(out, n, "%zu sparse columns in the log, %zu here", log->n_columns,
                 mine->n_columns);
        return;
    }
    for (size_t c = 0; c < log->n_columns; c++) {
        const Piperec__Vocablog__V1__Column *l = log->columns[c], *m = mine->columns[c];
        if (strcmp(l->name, m->name))
            snprintf(out, n, "sparse column %zu is %s in the log, %s here", c + 1, l->name,
                     m->name);
        else if (l->modulus != m->modulus)
            snprintf(out, n, "column %s modulus is %" PRIu64 " in the log, %" PRIu64 " here",
                     l->name, l->modulus, m->modulus);
        else if (l->min_count != m->min_count)
            snprintf(out, n, "column %s min_count is %u in the log, %u here", l->name, l->min_count,
                     m->min_count);
        else if (l->capacity != m->capacity)
            snprintf(out, n, "column %s capacity is %" PRIu64 " in the log, %" PRIu64 " here",
                     l->name, l->capacity, m->capacity);
        else if (strcmp(l->eviction, m->eviction))
            snprintf(out, n, "column %s eviction is %s in the log, %s here", l->name,
                     *l->eviction ? l->eviction : "none", *m->eviction ? m->eviction : "none");
        else if (l->ttl_records != m->ttl_records)
            snprintf(out, n, "column %s ttl_records is %" PRIu64 " in the log, %" PRIu64 " here",
                     l->name, l->ttl_records, m->ttl_records);
        else if (l->decay_records != m->decay_records)
            snprintf(out, n, "column %s decay_records is %" PRIu64 " in the log, %" PRIu64 " here",
                     l->name, l->decay_records, m->decay_records);
        else if (l->input_fingerprint && m->input_fingerprint &&
                 l->input_fingerprint != m->input_fingerprint)
            snprintf(out, n,
                     "feature %s gives its values other keys here than in the log: its paths, "
                     "default or operators before vocab differ (input fingerprint %016" PRIx64
                     " in the log, %016" PRIx64 " here; `piperec explain` shows the chain)",
                     l->name, l->input_fingerprint, m->input_fingerprint);
        if (out[0])
            return;
    }
}

/* ---------------------------------------------------------------- applying */

static int pr__apply_settings(pr_vocablog *vl, const Piperec__Vocablog__V1__Settings *s,
                              int64_t off, char *errstr, size_t errstr_size)
{
    pr__settings mine;
    pr__settings_build(vl, &mine);
    char diff[512];
    pr__settings_diff(s, &mine.s, diff, sizeof(diff));
    if (vl->have_settings) {
        if (diff[0] || s->log_id != vl->log_id)
            pr_info("pipeline %s: vocab log %s offset %" PRId64
                    ": another Settings record (from replica '%s'%s%s) ignored: the first "
                    "one fixes the log",
                    vl->pipeline, vl->topic, off, s->created_by, diff[0] ? "; " : "", diff);
        return 0;
    }
    if (diff[0])
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "pipelines[%s].vocab_log: this replica's vocabulary settings differ "
                         "from the log's (topic %s, first record, written by replica '%s'): %s. "
                         "Replicas sharing a log need the same transform settings: fix the "
                         "config, or give this pipeline its own vocab_log.topic",
                         vl->pipeline, vl->topic, s->created_by, diff);
    vl->have_settings = true;
    vl->log_id = s->log_id;
    pr_info("pipeline %s: vocab log %s: settings from replica '%s' match (log id %016" PRIx64 ")",
            vl->pipeline, vl->topic, s->created_by, s->log_id);
    return 0;
}

/* A Proposals or Usage record that cannot be applied (arrays of different
 * lengths, or before any Settings record): counted and skipped, alike on
 * every replica. Returns 0. */
static int pr__skip_record(pr_vocablog *vl, int64_t off, const char *kind)
{
    atomic_fetch_add(&vl->st_corrupt, 1);
    pr_log_ratelimited(&vl->rl, PR_LOG_ERROR,
                       "pipeline %s: vocab log %s offset %" PRId64
                       ": %s record %s; skipped (every replica skips it alike)",
                       vl->pipeline, vl->topic, off, kind,
                       vl->have_settings ? "with arrays of different lengths"
                                         : "before any Settings record");
    return 0;
}

static int pr__apply_proposals(pr_vocablog *vl, const Piperec__Vocablog__V1__Proposals *p,
                               int64_t off, char *errstr, size_t errstr_size)
{
    if (!vl->have_settings || p->n_column != p->n_value || (p->n_count && p->n_count != p->n_value))
        return pr__skip_record(vl, off, "proposals");
    uint64_t assigned = 0;
    for (size_t i = 0; i < p->n_value; i++) {
        uint32_t col = p->column[i];
        uint32_t cnt = p->n_count ? p->count[i] : 1;
        if (col >= vl->spec->n_sparse || cnt == 0) {
            atomic_fetch_add(&vl->st_corrupt, 1);
            continue;
        }
        uint64_t before = pr_engine_vocab_size(vl->eng, col);
        int64_t idx;
        char e[256];
        int rc = pr_engine_vocab_apply(vl->eng, col, p->value[i], cnt, &idx, e, sizeof(e));
        if (rc == PR_EINVAL) {
            atomic_fetch_add(&vl->st_corrupt, 1);
            pr_log_ratelimited(&vl->rl, PR_LOG_ERROR,
                               "pipeline %s: vocab log %s offset %" PRId64
                               ": entry %zu skipped: %s",
                               vl->pipeline, vl->topic, off, i, e);
            continue;
        }
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "vocab log %s offset %" PRId64 ": %s",
                             vl->topic, off, e);
        assigned += pr_engine_vocab_size(vl->eng, col) - before;
    }
    atomic_fetch_add(&vl->st_values, p->n_value);
    atomic_fetch_add(&vl->st_assigned, assigned);
    return 0;
}

/* A Usage record: uses of values that have an index, as statistics. */
static int pr__apply_usage(pr_vocablog *vl, const Piperec__Vocablog__V1__Usage *u, int64_t off,
                           char *errstr, size_t errstr_size)
{
    if (!vl->have_settings || u->n_column != u->n_value || u->n_count != u->n_value)
        return pr__skip_record(vl, off, "usage");
    for (size_t i = 0; i < u->n_value; i++) {
        char e[256];
        int rc = u->column[i] < vl->spec->n_sparse && u->count[i]
                     ? pr_engine_vocab_touch(vl->eng, u->column[i], u->value[i], u->count[i], e,
                                             sizeof(e))
                     : PR_EINVAL;
        if (rc == PR_EINVAL) {
            atomic_fetch_add(&vl->st_corrupt, 1);
            continue;
        }
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "vocab log %s offset %" PRId64 ": %s",
                             vl->topic, off, e);
    }
    return 0;
}

/* Apply one fetched message (or note an error). Returns a fatal code only. */
static int pr__apply_msg(pr_vocablog *vl, const rd_kafka_message_t *m, char *errstr,
                         size_t errstr_size)
{
    if (m->err) {
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            atomic_store(&vl->st_end, m->offset);
            atomic_store(&vl->last_ok_ns, pr_mono_ns());
            return 0;
        }
        atomic_fetch_add(&vl->st_consume_err, 1);
        atomic_store(&vl->last_err_ns, pr_mono_ns());
        if (m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE ||
            m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
            return pr_seterr(
                errstr, errstr_size, PR_EKAFKA,
                "vocab log %s: %s at offset %" PRId64
                ": the log lost records this replica still needs (retention, or "
                "the topic was deleted); see docs/vocab-log.md, \"Errors and what they look like\"",
                vl->topic, rd_kafka_err2str(m->err), vl->next);
        pr_log_ratelimited(&vl->rl, PR_LOG_WARN, "pipeline %s: vocab log %s: %s", vl->pipeline,
                           vl->topic, rd_kafka_message_errstr(m));
        return 0;
    }
    atomic_store(&vl->last_ok_ns, pr_mono_ns());
    if (m->offset < vl->next)
        return 0; /* already applied (a re-delivery after a seek) */
    int rc = 0;
    Piperec__Vocablog__V1__Record *r =
        piperec__vocablog__v1__record__unpack(NULL, m->len, (const uint8_t *)m->payload);
    if (!r || r->kind_case == PIPEREC__VOCABLOG__V1__RECORD__KIND__NOT_SET) {
        atomic_fetch_add(&vl->st_corrupt, 1);
        pr_log_ratelimited(&vl->rl, PR_LOG_ERROR,
                           "pipeline %s: vocab log %s offset %" PRId64
                           ": not a vocabulary record (%zu bytes); skipped (every replica "
                           "skips it alike)",
                           vl->pipeline, vl->topic, m->offset, m->len);
    } else if (r->kind_case == PIPEREC__VOCABLOG__V1__RECORD__KIND_SETTINGS) {
        rc = pr__apply_settings(vl, r->settings, m->offset, errstr, errstr_size);
    } else if (r->kind_case == PIPEREC__VOCABLOG__V1__RECORD__KIND_USAGE) {
        rc = pr__apply_usage(vl, r->usage, m->offset, errstr, errstr_size);
    } else {
        rc = pr__apply_proposals(vl, r->proposals, m->offset, errstr, errstr_size);
    }
    if (r)
        piperec__vocablog__v1__record__free_unpacked(r, NULL);
    if (rc)
        return rc;
    vl->next = m->offset + 1;
    atomic_store(&vl->st_applied, vl->next);
    atomic_fetch_add(&vl->st_records, 1);
    if (atomic_load(&vl->st_end) < vl->next)
        atomic_store(&vl->st_end, vl->next);
    return 0;
}

/* Read and apply; wait up to timeout_ms for the first message, then take
 * what is already there (bounded, so a long log does not starve the loop). */
static int pr__read(pr_vocablog *vl, int timeout_ms, char *errstr, size_t errstr_size)
{
    for (int i = 0; i < 4096; i++) {
        rd_kafka_message_t *m = vl->held;
        vl->held = NULL;
        if (!m)
            m = rd_kafka_consumer_poll(vl->cons, i ? 0 : timeout_ms);
        if (!m)
            break;
        if (!m->err && m->offset >= vl->hold_from) {
            vl->held = m;
            break;
        }
        int rc = pr__apply_msg(vl, m, errstr, errstr_size);
        rd_kafka_message_destroy(m);
        if (rc)
            return rc;
    }
    int64_t lo, hi;
    if (rd_kafka_get_watermark_offsets(vl->cons, vl->topic, 0, &lo, &hi) ==
            RD_KAFKA_RESP_ERR_NO_ERROR &&
        hi >= 0)
        atomic_store(&vl->st_end, hi > vl->next ? hi : vl->next);
    return 0;
}

/* ---------------------------------------------------------------- proposing */

static int pr__miss_cb(uint32_t col, uint64_t key, void *opaque)
{
    pr_vocablog *vl = opaque;
    if ((vl->n_miss + 1) * 2 > vl->n_slots) {
        size_t ns = vl->n_slots ? vl->n_slots * 2 : 4096;
        uint32_t *s = calloc(ns, sizeof(*s));
        if (!s)
            return PR_ENOMEM;
        for (size_t i = 0; i < vl->n_miss; i++) {
            uint64_t h = (vl->miss[i].key * 0x9E3779B97F4A7C15ULL) ^ vl->miss[i].col;
            size_t j = (size_t)(h >> 17) & (ns - 1);
            while (s[j])
                j = (j + 1) & (ns - 1);
            s[j] = (uint32_t)i + 1;
        }
        free(vl->slots);
        vl->slots = s;
        vl->n_slots = ns;
    }
    uint64_t h = (key * 0x9E3779B97F4A7C15ULL) ^ col;
    size_t j = (size_t)(h >> 17) & (vl->n_slots - 1);
    for (; vl->slots[j]; j = (j + 1) & (vl->n_slots - 1)) {
        pr__miss *e = &vl->miss[vl->slots[j] - 1];
        if (e->key == key && e->col == col) {
            if (e->count < UINT32_MAX)
                e->count++;
            return 0;
        }
    }
    if (pr_grow((void **)&vl->miss, &vl->miss_cap, vl->n_miss + 1, sizeof(*vl->miss)) < 0)
        return PR_ENOMEM;
    vl->miss[vl->n_miss] = (pr__miss){key, col, 1};
    vl->slots[j] = (uint32_t)++vl->n_miss;
    return 0;
}

/* What a resolve decides: the sparse values of a row block, or columns of
 * keys already through Hex2Int and Modulus (any number per column). */
typedef struct pr__want {
    const pr_block *block;
    const pr_vocab_keys *cols;
    size_t n_cols;
} pr__want;

static int pr__collect(pr_vocablog *vl, const pr__want *w, char *errstr, size_t errstr_size)
{
    if (vl->n_slots)
        memset(vl->slots, 0, vl->n_slots * sizeof(*vl->slots));
    vl->n_miss = 0;
    int rc = 0;
    if (w->block)
        rc = pr_engine_vocab_misses(vl->eng, w->block, pr__miss_cb, vl, errstr, errstr_size);
    for (size_t i = 0; i < w->n_cols && !rc; i++)
        rc = pr_engine_vocab_misses_keys(vl->eng, w->cols[i].col, w->cols[i].key, w->cols[i].n,
                                         pr__miss_cb, vl, errstr, errstr_size);
    if (rc == PR_ENOMEM)
        return pr_seterr(errstr, errstr_size, rc, "vocab log: out of memory for new values");
    return rc;
}

/* What a record is to its sender: part of the waiting block (the block is
 * ready once it is applied), a look-ahead proposal for the next block, or a
 * Usage record. The delivery report tells them apart by the opaque tag. */
enum pr__rec_kind { PR__REC_BLOCK, PR__REC_AHEAD, PR__REC_USAGE };

static void *pr__rec_tag(enum pr__rec_kind kind)
{
    return kind == PR__REC_USAGE   ? (void *)&pr__usage_tag
           : kind == PR__REC_AHEAD ? (void *)&pr__ahead_tag
                                   : NULL;
}

/* Append one record of the given kind. */
static int pr__produce(pr_vocablog *vl, const void *buf, size_t len, enum pr__rec_kind kind,
                       char *errstr, size_t errstr_size)
{
    rd_kafka_resp_err_t err;
    for (;;) {
        err = rd_kafka_producev(vl->prod, RD_KAFKA_V_TOPIC(vl->topic), RD_KAFKA_V_PARTITION(0),
                                RD_KAFKA_V_VALUE((void *)buf, len),
                                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                RD_KAFKA_V_OPAQUE(pr__rec_tag(kind)), RD_KAFKA_V_END);
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL)
            break;
        rd_kafka_poll(vl->prod, 10);
    }
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "vocab log %s: cannot append: %s",
                         vl->topic, rd_kafka_err2str(err));
    if (kind == PR__REC_BLOCK)
        vl->inflight++;
    else if (kind == PR__REC_AHEAD)
        vl->ahead_inflight++;
    return 0;
}

/* Entries (column, value, count) as records of PR__REC_MAX_ENTRIES at most:
 * Proposals (counts only when `counts`), or Usage records (PR__REC_USAGE,
 * always with counts). Counts the records sent. */
static int pr__send_entries(pr_vocablog *vl, enum pr__rec_kind kind, bool counts, uint32_t *cols,
                            uint64_t *vals, uint32_t *cnts, size_t n, char *errstr,
                            size_t errstr_size)
{
    bool usage = kind == PR__REC_USAGE;
    uint8_t *buf = NULL;
    int rc = 0;
    for (size_t off = 0; off < n && !rc; off += PR__REC_MAX_ENTRIES) {
        size_t m = n - off < PR__REC_MAX_ENTRIES ? n - off : PR__REC_MAX_ENTRIES;
        Piperec__Vocablog__V1__Proposals p = PIPEREC__VOCABLOG__V1__PROPOSALS__INIT;
        Piperec__Vocablog__V1__Usage u = PIPEREC__VOCABLOG__V1__USAGE__INIT;
        Piperec__Vocablog__V1__Record r = PIPEREC__VOCABLOG__V1__RECORD__INIT;
        if (usage) {
            u.replica = vl->replica;
            u.n_column = u.n_value = u.n_count = m;
            u.column = cols + off;
            u.value = vals + off;
            u.count = cnts + off;
            r.kind_case = PIPEREC__VOCABLOG__V1__RECORD__KIND_USAGE;
            r.usage = &u;
        } else {
            p.replica = vl->replica;
            p.epoch = vl->epoch;
            p.n_column = p.n_value = m;
            p.column = cols + off;
            p.value = vals + off;
            if (counts) {
                p.n_count = m;
                p.count = cnts + off;
            }
            r.kind_case = PIPEREC__VOCABLOG__V1__RECORD__KIND_PROPOSALS;
            r.proposals = &p;
        }
        size_t len = piperec__vocablog__v1__record__get_packed_size(&r);
        uint8_t *nb = realloc(buf, len ? len : 1);
        if (!nb) {
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab log: out of memory");
            break;
        }
        buf = nb;
        piperec__vocablog__v1__record__pack(&r, buf);
        if (!(rc = pr__produce(vl, buf, len, kind, errstr, errstr_size)))
            atomic_fetch_add(usage ? &vl->st_usage_records : &vl->st_prop_records, 1);
    }
    free(buf);
    return rc;
}

/* The parallel arrays of n entries (NULL on failure, all freed). */
static bool pr__entry_arrays(size_t n, uint32_t **cols, uint64_t **vals, uint32_t **cnts)
{
    *cols = malloc((n ? n : 1) * sizeof(**cols));
    *vals = malloc((n ? n : 1) * sizeof(**vals));
    *cnts = malloc((n ? n : 1) * sizeof(**cnts));
    if (*cols && *vals && *cnts)
        return true;
    free(*cols);
    free(*vals);
    free(*cnts);
    return false;
}

/* Send the collected misses as Proposals records: the waiting block's
 * (PR__REC_BLOCK, with counts when a column counts) or look-ahead ones
 * (PR__REC_AHEAD, never counting: look-ahead is off where columns count). */
static int pr__propose(pr_vocablog *vl, enum pr__rec_kind kind, char *errstr, size_t errstr_size)
{
    size_t n = vl->n_miss;
    uint32_t *cols, *cnts;
    uint64_t *vals;
    if (!pr__entry_arrays(n, &cols, &vals, &cnts))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab log: out of memory");
    /* Column by column, first appearance order inside each: the order a
     * single process would have inserted them in. */
    size_t k = 0;
    for (uint32_t c = 0; c < vl->spec->n_sparse; c++)
        for (size_t i = 0; i < n; i++)
            if (vl->miss[i].col == c) {
                cols[k] = c;
                vals[k] = vl->miss[i].key;
                cnts[k] = vl->miss[i].count;
                k++;
            }
    int rc = pr__send_entries(vl, kind, kind == PR__REC_BLOCK && vl->counting, cols, vals, cnts, n,
                              errstr, errstr_size);
    if (!rc) {
        atomic_fetch_add(&vl->st_proposals, n);
        if (kind == PR__REC_AHEAD)
            atomic_fetch_add(&vl->st_ahead_values, n);
        rd_kafka_poll(vl->prod, 0);
    }
    free(cols);
    free(cnts);
    free(vals);
    return rc;
}

static int pr__usage_cb(uint32_t col, uint64_t key, uint32_t count, void *opaque)
{
    pr_vocablog *vl = opaque;
    if (pr_grow((void **)&vl->usage, &vl->usage_cap, vl->n_usage + 1, sizeof(*vl->usage)) < 0)
        return PR_ENOMEM;
    vl->usage[vl->n_usage++] = (pr__miss){key, col, count};
    return 0;
}

/* Evicting columns: every usage_interval_ms, the uses this replica looked up
 * go out as Usage records (engine thread, between blocks). */
static int pr__flush_usage(pr_vocablog *vl, char *errstr, size_t errstr_size)
{
    int64_t now = pr_mono_ns();
    if (!vl->evict || vl->read_only || now - vl->last_usage_ns < vl->usage_interval_ns)
        return 0; /* a reader (export, serve --from-log) reports no uses */
    vl->last_usage_ns = now;
    vl->n_usage = 0;
    int rc = pr_engine_vocab_drain_usage(vl->eng, pr__usage_cb, vl);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "vocab log: usage: %s", pr_strerror(rc));
    size_t n = vl->n_usage;
    uint32_t *cols, *cnts;
    uint64_t *vals;
    if (!pr__entry_arrays(n, &cols, &vals, &cnts))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab log: out of memory");
    for (size_t i = 0; i < n; i++) {
        cols[i] = vl->usage[i].col;
        vals[i] = vl->usage[i].key;
        cnts[i] = vl->usage[i].count;
    }
    rc = pr__send_entries(vl, PR__REC_USAGE, true, cols, vals, cnts, n, errstr, errstr_size);
    if (!rc)
        atomic_fetch_add(&vl->st_usage_values, n);
    free(cols);
    free(cnts);
    free(vals);
    return rc;
}

static int pr__resolve(pr_vocablog *vl, const pr__want *in, int timeout_ms, char *errstr,
                       size_t errstr_size)
{
    int rc;
    if (vl->oov_set) { /* the previous block's fallback is over */
        vl->oov_set = false;
        if ((rc = pr_engine_vocab_set_undecided_oov(vl->eng, false, errstr, errstr_size)))
            return rc;
    }
    if (!vl->pending && (rc = pr__flush_usage(vl, errstr, errstr_size)))
        return rc;
    if (!vl->pending) {
        int64_t t_ahead = vl->t_ahead_wait_ns;
        if ((rc = pr__collect(vl, in, errstr, errstr_size)))
            return rc;
        if (vl->n_miss && (vl->ahead_inflight > 0 || vl->next <= vl->ahead_max_offset)) {
            /* Look-ahead proposals went out for this block while the one
             * before waited: let the log decide them before proposing, or
             * the same values would go out a second time. */
            if (!t_ahead)
                vl->t_ahead_wait_ns = t_ahead = pr_mono_ns();
            atomic_store(&vl->st_waiting, vl->n_miss);
            int64_t deadline = pr_mono_ns() + (int64_t)timeout_ms * 1000000LL;
            while (vl->ahead_inflight > 0 || vl->next <= vl->ahead_max_offset) {
                rd_kafka_poll(vl->prod, 0);
                int64_t left = (deadline - pr_mono_ns()) / 1000000LL;
                if (left <= 0)
                    return PR_EAGAIN;
                if ((rc = pr__read(vl, vl->ahead_inflight ? 1 : (int)(left < 5 ? left : 5), errstr,
                                   errstr_size)))
                    return rc;
            }
            if ((rc = pr__collect(vl, in, errstr, errstr_size)))
                return rc;
        }
        vl->t_ahead_wait_ns = 0;
        if (vl->n_miss == 0) {
            if (t_ahead) { /* it waited, for its look-ahead proposals */
                atomic_store(&vl->st_waiting, 0);
                atomic_fetch_add(&vl->st_blocks_waited, 1);
                pr_histogram_observe(&vl->wait, (double)(pr_mono_ns() - t_ahead) / 1e9);
            }
            return 0; /* every value known: no (further) round trip */
        }
        /* vl->inflight is not reset: records of a block given up on
         * (pr_vocablog_abandon, e.g. after a revoke took some of its rows)
         * may still be in flight, and their reports must not be taken for
         * this block's. Waiting for them too costs nothing: they are ahead
         * of this block's records in the log. */
        vl->pending = true;
        vl->rounds = 0;
        vl->resend = false;
        vl->max_offset = -1;
        vl->t_submit_ns = t_ahead ? t_ahead : pr_mono_ns();
        atomic_store(&vl->st_waiting, vl->n_miss);
        atomic_fetch_add(&vl->st_blocks_waited, 1);
        if ((rc = pr__propose(vl, PR__REC_BLOCK, errstr, errstr_size)))
            return rc;
    }
    int64_t deadline = pr_mono_ns() + (int64_t)timeout_ms * 1000000LL;
    for (;;) {
        rd_kafka_poll(vl->prod, 0);
        if (vl->resend && vl->inflight == 0) {
            /* Propose again what the log has not decided meanwhile. */
            vl->resend = false;
            if ((rc = pr__collect(vl, in, errstr, errstr_size)))
                return rc;
            if (vl->n_miss && (rc = pr__propose(vl, PR__REC_BLOCK, errstr, errstr_size)))
                return rc;
        }
        if (vl->inflight == 0 && !vl->resend && vl->next > vl->max_offset && vl->evict) {
            /* Decided, but the log may have evicted some of them again
             * meanwhile (other replicas' values): propose those again. */
            if ((rc = pr__collect(vl, in, errstr, errstr_size)))
                return rc;
            if (vl->n_miss && ++vl->rounds < PR__MAX_ROUNDS) {
                vl->max_offset = -1;
                if ((rc = pr__propose(vl, PR__REC_BLOCK, errstr, errstr_size)))
                    return rc;
                continue;
            }
            if (vl->n_miss) {
                atomic_fetch_add(&vl->st_rounds_exhausted, 1);
                pr_log_ratelimited(&vl->rl, PR_LOG_WARN,
                                   "pipeline %s: vocab log %s: %zu value(s) of a block were "
                                   "evicted again in each of %d rounds; they map to OOV in this "
                                   "block (capacity too small for the rate of new values?)",
                                   vl->pipeline, vl->topic, vl->n_miss, PR__MAX_ROUNDS);
                if ((rc = pr_engine_vocab_set_undecided_oov(vl->eng, true, errstr, errstr_size)))
                    return rc;
                vl->oov_set = true;
            }
        }
        if (vl->inflight == 0 && !vl->resend && vl->next > vl->max_offset) {
            vl->pending = false;
            atomic_store(&vl->st_waiting, 0);
            pr_histogram_observe(&vl->wait, (double)(pr_mono_ns() - vl->t_submit_ns) / 1e9);
            return 0;
        }
        int64_t left = (deadline - pr_mono_ns()) / 1000000LL;
        if (left <= 0)
            return PR_EAGAIN;
        /* The reader waits for the broker's fetch answer; delivery reports
         * come from the producer's own poll above. */
        if ((rc = pr__read(vl, vl->inflight ? 1 : (int)(left < 5 ? left : 5), errstr, errstr_size)))
            return rc;
    }
}

int pr_vocablog_resolve(pr_vocablog *vl, const pr_block *in, int timeout_ms, char *errstr,
                        size_t errstr_size)
{
    pr__want w = {in, NULL, 0};
    return pr__resolve(vl, &w, timeout_ms, errstr, errstr_size);
}

int pr_vocablog_resolve_keys(pr_vocablog *vl, const pr_vocab_keys *cols, size_t n_cols,
                             int timeout_ms, char *errstr, size_t errstr_size)
{
    pr__want w = {NULL, cols, n_cols};
    return pr__resolve(vl, &w, timeout_ms, errstr, errstr_size);
}

void pr_vocablog_abandon(pr_vocablog *vl)
{
    vl->pending = false;
    atomic_store(&vl->st_waiting, 0);
}

int pr_vocablog_propose_ahead(pr_vocablog *vl, const pr_block *next, uint32_t from_row,
                              char *errstr, size_t errstr_size)
{
    if (vl->counting || vl->evict || !next)
        return 0;
    /* A jagged block (a declared schema's list features) has no row view:
     * row r0's first element sits at a different offset in each column. Its
     * values go to the log when its own turn comes, as a waiting block's. */
    if (next->col_rows)
        return 0;
    /* Only behind a block whose own proposals are in the log: the values of
     * `next` must come after every value of the block before it. A held
     * block with nothing pending (it waits for its own look-ahead records
     * first, or was abandoned after a revoke) proposes its remaining values
     * later, so these rows must wait: PR_EAGAIN, and the driver asks again
     * from the same row. (Answering 0 here made the driver skip these rows
     * for good; later rows' values then reached the log first and got the
     * lower indices: test_vocablog_ahead.c.) */
    if (!vl->pending)
        return PR_EAGAIN;
    /* Rows [r0, rows) as a view of the same block: columns keep their
     * stride (cap), so only the starting points move; r0 is a multiple of
     * 64 so the bitmaps move by whole words and alignment holds. */
    uint32_t r0 = from_row & ~63u;
    if (r0 >= next->rows)
        return 0;
    pr_block v = *next;
    v.rows = next->rows - r0;
    if (next->labels)
        v.labels = next->labels + r0;
    if (next->dense)
        v.dense = next->dense + r0;
    if (next->dense_missing)
        v.dense_missing = next->dense_missing + r0 / 64;
    if (next->sparse_hex)
        v.sparse_hex = next->sparse_hex + (size_t)r0 * PR_HEX_SLOT;
    if (next->sparse_u64)
        v.sparse_u64 = next->sparse_u64 + r0;
    if (next->sparse_missing)
        v.sparse_missing = next->sparse_missing + r0 / 64;
    if (next->partition)
        v.partition = next->partition + r0;
    if (next->offset)
        v.offset = next->offset + r0;
    if (next->event_time_ms)
        v.event_time_ms = next->event_time_ms + r0;
    /* The waiting block's misses are collected again whenever they are
     * needed (a resend), so the list may be reused here. */
    pr__want w = {&v, NULL, 0};
    int rc = pr__collect(vl, &w, errstr, errstr_size);
    if (rc || vl->n_miss == 0)
        return rc;
    return pr__propose(vl, PR__REC_AHEAD, errstr, errstr_size);
}

void pr__vocablog_hold_from(pr_vocablog *vl, int64_t offset)
{
    vl->hold_from = offset;
}

int pr_vocablog_poll(pr_vocablog *vl, int timeout_ms, char *errstr, size_t errstr_size)
{
    if (!vl->pending) {
        int rc = pr__flush_usage(vl, errstr, errstr_size);
        if (rc)
            return rc;
    }
    rd_kafka_poll(vl->prod, 0);
    return pr__read(vl, timeout_ms, errstr, errstr_size);
}

/* ---------------------------------------------------------------- snapshots */

/* Tag: magic[8] u64 log_id i64 next u32 topic_len topic. */
int pr_vocablog_checkpoint(pr_vocablog *vl, char *errstr, size_t errstr_size)
{
    if (!vl->snap_path)
        return 0;
    unsigned char tag[8 + 8 + 8 + 4 + 256];
    uint32_t tl = (uint32_t)strlen(vl->topic);
    if (tl > 255)
        tl = 255;
    memcpy(tag, PR__TAG_MAGIC, 8);
    memcpy(tag + 8, &vl->log_id, 8);
    memcpy(tag + 16, &vl->next, 8);
    memcpy(tag + 24, &tl, 4);
    memcpy(tag + 28, vl->topic, tl);
    return pr_vocab_save_tagged(vl->eng, vl->snap_path, tag, 28 + tl, errstr, errstr_size);
}

/* Load the snapshot when there is one: *found, and the position it read to. */
static int pr__snap_load(pr_vocablog *vl, bool *found, char *errstr, size_t errstr_size)
{
    *found = false;
    if (!vl->snap_path || access(vl->snap_path, F_OK) != 0)
        return 0;
    unsigned char tag[PR_SNAPSHOT_TAG_MAX];
    uint32_t tl = 0;
    char e[512];
    int rc = pr_vocab_load_tagged(vl->eng, vl->snap_path, tag, sizeof(tag), &tl, e, sizeof(e));
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "%s", e);
    uint32_t topic_len = 0;
    if (tl >= 28)
        memcpy(&topic_len, tag + 24, 4);
    if (tl < 28 || memcmp(tag, PR__TAG_MAGIC, 8) || 28 + topic_len != tl)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s is not a snapshot of a shared vocabulary (vocab_log); move it away "
                         "to rebuild from the log",
                         vl->snap_path);
    if (topic_len != strlen(vl->topic) || memcmp(tag + 28, vl->topic, topic_len))
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "%s was read from vocab log topic '%.*s', the config names '%s': empty "
                         "the state dir to rebuild from the new topic",
                         vl->snap_path, (int)topic_len, (const char *)tag + 28, vl->topic);
    memcpy(&vl->log_id, tag + 8, 8);
    memcpy(&vl->next, tag + 16, 8);
    vl->have_settings = true;
    *found = true;
    return 0;
}

/* ---------------------------------------------------------------- startup */

/* Metadata: the topic exists and has exactly one partition. */
static int pr__check_topic(pr_vocablog *vl, int64_t deadline, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(vl->cons, vl->topic, NULL);
    if (!rkt)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "vocab log: topic handle: %s",
                         rd_kafka_err2str(rd_kafka_last_error()));
    int rc = 0;
    for (;;) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t err = rd_kafka_metadata(vl->cons, 0, rkt, &md, 2000);
        if (!err && md->topic_cnt == 1) {
            rd_kafka_resp_err_t terr = md->topics[0].err;
            int parts = md->topics[0].partition_cnt;
            rd_kafka_metadata_destroy(md);
            if (terr == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab_log.topic '%s' does not exist: create it with one "
                               "partition and unlimited retention (retention.ms=-1, "
                               "retention.bytes=-1; docs/vocab-log.md)",
                               vl->topic);
            else if (terr == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE) {
                usleep(200000);
                if (pr_mono_ns() < deadline)
                    continue;
                rc = pr_seterr(errstr, errstr_size, PR_EKAFKA,
                               "vocab_log.topic '%s': no leader (%s)", vl->topic,
                               rd_kafka_err2str(terr));
            } else if (terr)
                rc = pr_seterr(errstr, errstr_size, PR_EKAFKA, "vocab_log.topic '%s': %s",
                               vl->topic, rd_kafka_err2str(terr));
            else if (parts != 1)
                rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                               "vocab_log.topic '%s' has %d partitions; a vocabulary log needs "
                               "exactly 1 (one total order of proposals)",
                               vl->topic, parts);
            break;
        }
        if (md)
            rd_kafka_metadata_destroy(md);
        if (pr_mono_ns() >= deadline) {
            char bs[512] = "";
            size_t bsz = sizeof(bs);
            if (rd_kafka_conf_get(rd_kafka_conf(vl->cons), "bootstrap.servers", bs, &bsz) !=
                RD_KAFKA_CONF_OK)
                snprintf(bs, sizeof(bs), "(unset)");
            rc = pr_seterr(errstr, errstr_size, PR_EKAFKA,
                           "vocab log %s unreachable for %lld ms (%s) at bootstrap.servers %s "
                           "(vocab_log.properties, else the source's kafka properties)",
                           vl->topic, (long long)vl->startup_timeout_ms, rd_kafka_err2str(err), bs);
            break;
        }
        pr_log_ratelimited(&vl->rl, PR_LOG_WARN, "pipeline %s: vocab log %s: %s; retrying",
                           vl->pipeline, vl->topic, rd_kafka_err2str(err));
        usleep(200000);
    }
    rd_kafka_topic_destroy(rkt);
    return rc;
}

static int pr__watermarks(pr_vocablog *vl, int64_t deadline, int64_t *lo, int64_t *hi, char *errstr,
                          size_t errstr_size)
{
    for (;;) {
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(vl->cons, vl->topic, 0, lo, hi, 2000);
        if (!err)
            return 0;
        if (pr_mono_ns() >= deadline)
            return pr_seterr(errstr, errstr_size, PR_EKAFKA,
                             "vocab log %s: cannot read its offsets: %s", vl->topic,
                             rd_kafka_err2str(err));
        usleep(200000);
    }
}

static int pr__assign(pr_vocablog *vl, int64_t offset, char *errstr, size_t errstr_size)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, vl->topic, 0)->offset = offset;
    rd_kafka_resp_err_t err = rd_kafka_assign(vl->cons, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "vocab log %s: assign: %s", vl->topic,
                         rd_kafka_err2str(err));
    return 0;
}

/* The Settings record of an empty log (a random log id names it). */
static int pr__write_settings(pr_vocablog *vl, char *errstr, size_t errstr_size)
{
    pr__settings ps;
    pr__settings_build(vl, &ps);
    uint64_t id = 0;
    if (getrandom(&id, sizeof(id), 0) != (ssize_t)sizeof(id))
        id = (uint64_t)pr_mono_ns() ^ ((uint64_t)getpid() << 32);
    ps.s.log_id = id;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ps.s.created_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    Piperec__Vocablog__V1__Record r = PIPEREC__VOCABLOG__V1__RECORD__INIT;
    r.kind_case = PIPEREC__VOCABLOG__V1__RECORD__KIND_SETTINGS;
    r.settings = &ps.s;
    size_t len = piperec__vocablog__v1__record__get_packed_size(&r);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    piperec__vocablog__v1__record__pack(&r, buf);
    int rc = pr__produce(vl, buf, len, PR__REC_BLOCK, errstr, errstr_size);
    free(buf);
    if (rc)
        return rc;
    pr_info("pipeline %s: vocab log %s has no Settings record yet: wrote one (log id %016" PRIx64
            ")",
            vl->pipeline, vl->topic, id);
    return 0;
}

/* Where to start reading, after checking the snapshot's position against
 * the log's offsets. Reads the first record first when it is still there,
 * so a settings conflict shows at every start. */
static int pr__position(pr_vocablog *vl, bool snap, int64_t lo, int64_t hi, char *errstr,
                        size_t errstr_size)
{
    if (snap) {
        if (vl->next < lo)
            return pr_seterr(
                errstr, errstr_size, PR_ESTATE,
                "vocab log %s starts at offset %" PRId64 " but the snapshot %s was read to %" PRId64
                ": the records in between were deleted (retention?). The vocabulary cannot be "
                "completed: restore a newer snapshot from another replica's state dir, and set "
                "retention.ms=-1 and retention.bytes=-1 on the topic (docs/vocab-log.md)",
                vl->topic, lo, vl->snap_path, vl->next);
        if (vl->next > hi)
            return pr_seterr(errstr, errstr_size, PR_ESTATE,
                             "the snapshot %s was read to offset %" PRId64
                             " of vocab log %s, but the log ends at %" PRId64
                             ": the topic was recreated or is another one. Empty the state dir "
                             "to rebuild from this log (indices already sent would change), or "
                             "point vocab_log.topic at the original log",
                             vl->snap_path, vl->next, vl->topic, hi);
        return 0;
    }
    if (lo > 0)
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab log %s starts at offset %" PRId64
                         " (earlier records were deleted, retention?) and this replica has no "
                         "snapshot: the vocabulary cannot be rebuilt. Copy a snapshot from "
                         "another replica's state dir (%s.vocablog), and set retention.ms=-1 and "
                         "retention.bytes=-1 on the topic",
                         vl->topic, lo, vl->pipeline);
    vl->next = 0;
    return 0;
}

static int pr__catch_up(pr_vocablog *vl, int64_t target, bool need_settings, int64_t deadline,
                        char *errstr, size_t errstr_size)
{
    while (vl->next < target || (need_settings && !vl->have_settings)) {
        int rc = pr__read(vl, 100, errstr, errstr_size);
        if (rc)
            return rc;
        rd_kafka_poll(vl->prod, 0);
        if (pr_mono_ns() >= deadline)
            return pr_seterr(errstr, errstr_size, PR_ETIMEDOUT,
                             "vocab log %s: read to offset %" PRId64 " of %" PRId64
                             " within vocab_log.startup_timeout_ms (%lld ms)%s",
                             vl->topic, vl->next, target, (long long)vl->startup_timeout_ms,
                             vl->have_settings ? "" : "; no Settings record seen");
    }
    return 0;
}

/* Check the log's first record against this config when the snapshot is
 * ahead of it: read offset 0 alone, then go on from the snapshot. */
static int pr__check_first(pr_vocablog *vl, int64_t deadline, char *errstr, size_t errstr_size)
{
    int64_t keep = vl->next;
    vl->next = 0;
    vl->have_settings = false;
    uint64_t id = vl->log_id;
    int rc = pr__assign(vl, 0, errstr, errstr_size);
    while (!rc && !vl->have_settings && vl->next == 0) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(vl->cons, 100);
        if (m) {
            if (!m->err && m->offset == 0) {
                /* apply only a Settings record: proposals are in the snapshot */
                Piperec__Vocablog__V1__Record *r = piperec__vocablog__v1__record__unpack(
                    NULL, m->len, (const uint8_t *)m->payload);
                if (r && r->kind_case == PIPEREC__VOCABLOG__V1__RECORD__KIND_SETTINGS)
                    rc = pr__apply_settings(vl, r->settings, 0, errstr, errstr_size);
                if (r)
                    piperec__vocablog__v1__record__free_unpacked(r, NULL);
                vl->next = 1;
            } else if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                pr_log_ratelimited(&vl->rl, PR_LOG_WARN, "pipeline %s: vocab log %s: %s",
                                   vl->pipeline, vl->topic, rd_kafka_message_errstr(m));
            }
            rd_kafka_message_destroy(m);
        }
        if (!rc && pr_mono_ns() >= deadline)
            rc = pr_seterr(errstr, errstr_size, PR_ETIMEDOUT,
                           "vocab log %s: cannot read its first record", vl->topic);
    }
    if (!rc && vl->have_settings && vl->log_id != id)
        rc = pr_seterr(errstr, errstr_size, PR_ESTATE,
                       "the snapshot %s was read from another log (log id %016" PRIx64
                       ", topic %s holds log %016" PRIx64
                       "): the topic was recreated. Empty the state dir to rebuild from it",
                       vl->snap_path, id, vl->topic, vl->log_id);
    vl->have_settings = true;
    vl->log_id = id;
    vl->next = keep;
    return rc;
}

/* The liveness probe: the log's end offset once a second (see the top). */
static void *pr__probe_main(void *arg)
{
    pr_vocablog *vl = arg;
    pthread_mutex_lock(&vl->probe_mu);
    while (!vl->probe_stop) {
        pthread_mutex_unlock(&vl->probe_mu);
        int64_t lo, hi;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(vl->cons, vl->topic, 0, &lo, &hi, PR__PROBE_EVERY_MS);
        if (!err) {
            atomic_store(&vl->last_ok_ns, pr_mono_ns());
            int64_t end = atomic_load(&vl->st_end);
            while (hi > end && !atomic_compare_exchange_weak(&vl->st_end, &end, hi))
                ;
        } else {
            atomic_store(&vl->last_err_ns, pr_mono_ns());
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += PR__PROBE_EVERY_MS / 1000;
        pthread_mutex_lock(&vl->probe_mu);
        while (!vl->probe_stop &&
               pthread_cond_timedwait(&vl->probe_cv, &vl->probe_mu, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&vl->probe_mu);
    return NULL;
}

static int pr__probe_start(pr_vocablog *vl, char *errstr, size_t errstr_size)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int e = pthread_cond_init(&vl->probe_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (e || pthread_mutex_init(&vl->probe_mu, NULL))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab log: probe lock: %s", strerror(e));
    if ((e = pthread_create(&vl->probe, NULL, pr__probe_main, vl))) {
        pthread_cond_destroy(&vl->probe_cv);
        pthread_mutex_destroy(&vl->probe_mu);
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab log: probe thread: %s",
                         strerror(e));
    }
    vl->probe_started = true;
    return 0;
}

static void pr__probe_stop(pr_vocablog *vl)
{
    if (!vl->probe_started)
        return;
    pthread_mutex_lock(&vl->probe_mu);
    vl->probe_stop = true;
    pthread_cond_signal(&vl->probe_cv);
    pthread_mutex_unlock(&vl->probe_mu);
    pthread_join(vl->probe, NULL);
    pthread_cond_destroy(&vl->probe_cv);
    pthread_mutex_destroy(&vl->probe_mu);
    vl->probe_started = false;
}

static char *pr__dup(const char *s)
{
    return strdup(s ? s : "");
}

/* Startup's reading: the topic, the snapshot (*snap: found) and the log's
 * position checked against each other, the log read to its end, and our
 * Settings record written when the log has none. */
static int pr__startup_read(pr_vocablog *vl, bool *snap, char *errstr, size_t errstr_size)
{
    int rc;
    int64_t deadline = pr_mono_ns() + vl->startup_timeout_ms * 1000000LL;
    int64_t lo, hi;
    if ((rc = pr__check_topic(vl, deadline, errstr, errstr_size)) ||
        (rc = pr__snap_load(vl, snap, errstr, errstr_size)) ||
        (rc = pr__watermarks(vl, deadline, &lo, &hi, errstr, errstr_size)) ||
        (rc = pr__position(vl, *snap, lo, hi, errstr, errstr_size)))
        return rc;
    if (*snap && lo == 0 && vl->next > 0 &&
        (rc = pr__check_first(vl, deadline, errstr, errstr_size)))
        return rc;
    /* Read what is there; a log without a Settings record yet (empty, or
     * only junk) gets ours. Replicas that start together may all write
     * one: the first in the log counts, the others are ignored. */
    if ((rc = pr__assign(vl, vl->next, errstr, errstr_size)) ||
        (rc = pr__catch_up(vl, hi, false, deadline, errstr, errstr_size)))
        return rc;
    if (!vl->have_settings && vl->read_only)
        return 0; /* an empty log: nothing to read, nothing written */
    if (!vl->have_settings) {
        if ((rc = pr__write_settings(vl, errstr, errstr_size)))
            return rc;
        while (vl->inflight > 0 && pr_mono_ns() < deadline)
            rd_kafka_poll(vl->prod, 50);
        if (vl->inflight > 0 || vl->resend) {
            return pr_seterr(errstr, errstr_size, PR_EKAFKA,
                             "vocab log %s: cannot write the Settings record", vl->topic);
        }
        if ((rc = pr__watermarks(vl, deadline, &lo, &hi, errstr, errstr_size)) ||
            (rc = pr__catch_up(vl, hi, true, deadline, errstr, errstr_size)))
            return rc;
    }
    return 0;
}

int pr_vocablog_new(const pr_vocablog_opts *o, pr_vocablog **out, char *errstr, size_t errstr_size)
{
    *out = NULL;
    const pr_vocablog_cfg *cfg = o->cfg;
    if (!cfg || !cfg->topic || !*cfg->topic)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab_log.topic: missing");
    pr_vocablog *vl = calloc(1, sizeof(*vl));
    if (!vl)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    vl->rl = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    pr_histogram_init(&vl->wait, pr_buckets_freshness_s, pr_buckets_freshness_n);
    vl->pipeline = pr__dup(o->pipeline);
    vl->replica = pr__dup(o->replica);
    vl->topic = pr__dup(cfg->topic);
    vl->snap_path = o->snapshot_path ? strdup(o->snapshot_path) : NULL;
    vl->epoch = o->epoch;
    vl->read_only = o->read_only;
    vl->eng = o->eng;
    vl->spec = pr_engine_spec(o->eng);
    vl->startup_timeout_ms = cfg->startup_timeout_ms > 0 ? cfg->startup_timeout_ms : 60000;
    vl->usage_interval_ns =
        (cfg->usage_interval_ms > 0 ? cfg->usage_interval_ms : 1000) * 1000000LL;
    for (uint32_t c = 0; c < vl->spec->n_sparse; c++) {
        vl->evict |= vl->spec->sparse[c].eviction != PR_EVICT_NONE;
        vl->counting |= vl->spec->sparse[c].min_count > 1;
    }
    vl->ahead_max_offset = -1;
    vl->hold_from = INT64_MAX;
    atomic_store(&vl->st_end, -1);
    int rc = 0;
    if (!vl->pipeline || !vl->replica || !vl->topic || (o->snapshot_path && !vl->snap_path)) {
        rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = pr_engine_vocab_set_shared(vl->eng, true, errstr, errstr_size)))
        goto fail;

    /* Proposals: idempotent, acks=all, no message timeout; the reader
     * fetches eagerly (pr_kafka.h's vocab-log roles). The reader only assigns
     * (never joins a group or commits); librdkafka's consumer API still wants
     * a group id, so it gets its own name. */
    vl->prod =
        pr__handle(vl, PR_KAFKA_VOCAB_PRODUCER, &cfg->properties, NULL, 0, errstr, errstr_size);
    if (!vl->prod) {
        rc = PR_EKAFKA;
        goto fail;
    }
    char gid[PR_NAME_MAX + 32];
    snprintf(gid, sizeof(gid), "piperec-vocablog-%s", vl->pipeline);
    pr_kv group = {"group.id", gid};
    vl->cons =
        pr__handle(vl, PR_KAFKA_VOCAB_READER, &cfg->properties, &group, 1, errstr, errstr_size);
    if (!vl->cons) {
        rc = PR_EKAFKA;
        goto fail;
    }
    rd_kafka_poll_set_consumer(vl->cons);

    bool snap;
    if ((rc = pr__startup_read(vl, &snap, errstr, errstr_size)))
        goto fail;
    atomic_store(&vl->st_applied, vl->next);
    if ((rc = pr__probe_start(vl, errstr, errstr_size)))
        goto fail;
    uint64_t total = 0;
    for (uint32_t c = 0; c < vl->spec->n_sparse; c++)
        total += pr_engine_vocab_size(vl->eng, c);
    pr_info("pipeline %s: vocab log %s read to offset %" PRId64 " (%s; %" PRIu64
            " indices); replica '%s'",
            vl->pipeline, vl->topic, vl->next, snap ? "from the snapshot on" : "from its start",
            total, vl->replica);
    *out = vl;
    return 0;
fail:
    pr_vocablog_free(vl);
    return rc;
}

void pr_vocablog_free(pr_vocablog *vl)
{
    if (!vl)
        return;
    pr__probe_stop(vl);
    if (vl->held)
        rd_kafka_message_destroy(vl->held);
    if (vl->prod) {
        rd_kafka_flush(vl->prod, 2000);
        rd_kafka_destroy(vl->prod);
    }
    if (vl->cons) {
        rd_kafka_consumer_close(vl->cons);
        rd_kafka_destroy(vl->cons);
    }
    if (vl->eng)
        pr_engine_vocab_set_shared(vl->eng, false, NULL, 0);
    pr_histogram_fini(&vl->wait);
    free(vl->miss);
    free(vl->slots);
    free(vl->usage);
    free(vl->pipeline);
    free(vl->replica);
    free(vl->topic);
    free(vl->snap_path);
    free(vl);
}

void pr_vocablog_get_stats(pr_vocablog *vl, pr_vocablog_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->applied_offset = atomic_load(&vl->st_applied);
    st->end_offset = atomic_load(&vl->st_end);
    st->records_applied = atomic_load(&vl->st_records);
    st->values_applied = atomic_load(&vl->st_values);
    st->indices_assigned = atomic_load(&vl->st_assigned);
    st->proposals = atomic_load(&vl->st_proposals);
    st->proposal_records = atomic_load(&vl->st_prop_records);
    st->blocks_waited = atomic_load(&vl->st_blocks_waited);
    st->ahead_values = atomic_load(&vl->st_ahead_values);
    st->corrupt_records = atomic_load(&vl->st_corrupt);
    st->produce_errors = atomic_load(&vl->st_produce_err);
    st->consume_errors = atomic_load(&vl->st_consume_err);
    st->values_waiting = atomic_load(&vl->st_waiting);
    st->usage_records = atomic_load(&vl->st_usage_records);
    st->usage_values = atomic_load(&vl->st_usage_values);
    st->rounds_exhausted = atomic_load(&vl->st_rounds_exhausted);
    int64_t now = pr_mono_ns(), ok = atomic_load(&vl->last_ok_ns);
    int64_t err = atomic_load(&vl->last_err_ns);
    st->up = ok && now - ok < PR__UP_WINDOW_NS && ok >= err;
    pr_histogram_snapshot(&vl->wait, &st->wait);
}
