/*
 * serve.c — `piperec serve`: the transform (transform.c) behind HTTP, for a
 * model server that asks for the rows of the events it scores
 * (pr_service.h, "serve").
 *
 * Why a server and not a library call: the decoder, the operators and the
 * vocabulary are piperec's, in C, with the vocabulary as large as the
 * training side made it; a serving stack in any language posts the events
 * it has (JSON, Avro, Protobuf as they are on Kafka) and reads JSON rows
 * back, and a vocabulary that grows in training reaches it by reload, not by
 * a rebuild of the serving code.
 *
 * Routes (the service's HTTP listener, pr_http.h, a thread per
 * connection): POST /v1/transform (events in, one JSON line per event
 * out), GET /healthz, /metrics (Prometheus text), /v1/status (JSON).
 *
 * Up to pr_serve_opts.threads requests run at once: each takes a transform
 * of its own from the pool (pr_serve_opts.threads of them: a decoder, block
 * and output each; a request waits for one only when all are busy, and a
 * probe or a scrape takes none) and `vocab`
 * for reading, so decoding, the operators, the lookups of known ids and the
 * JSON rows run in parallel; the engine's second half of each block (ids
 * the first half did not find: the unseen answer, counted) runs under
 * `seq_mu` (pr_transform_opts.seq_mu). A reload's swap and a vocabulary
 * log's records take `vocab` for writing (writers first, so a stream of
 * requests cannot hold a reload off): a request sees one vocabulary from
 * start to end, and a log's backlog is applied in steps between requests.
 *
 * Framing of a request body (query `framing`, default by source.format):
 * `lines` (json, criteo_tsv: one record a line, blank lines skipped),
 * `delimited` (avro, protobuf, protobuf_event[_batch]: each record an
 * unsigned LEB128 length and its bytes, as `piperec process` reads files),
 * or `single` (the body is one record: a pretty-printed JSON object, one
 * Protobuf message).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "pr_fhealth.h"
#include "pr_http.h"
#include "pr_log.h"
#include "pr_metrics.h"
#include "pr_service.h"

static const double pr__req_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                        0.05,   0.1,   0.25,   0.5,   1,    2.5};

struct pr_serve {
    pr_serve_opts o;
    pr_http *http;
    pthread_rwlock_t vocab; /* the engine: read by requests, written by swaps and the log */
    pthread_mutex_t seq_mu; /* the engine's second halves (pr_transform_opts.seq_mu) */
    pr_engine *eng;
    pthread_mutex_t pool_mu; /* the free transforms */
    pthread_cond_t pool_cv;
    pr_transform **tr; /* [n_tr]: requests at once */
    uint32_t n_tr;
    uint32_t *free_tr, n_free;  /* indices into tr */
    pthread_mutex_t mu;         /* the counters below */
    pr_transform_counts counts; /* events of the requests answered (200, 422) */
    uint64_t requests[3];       /* answered 2xx, 4xx, 5xx */
    uint64_t loads, load_failures;
    int64_t loaded_ms; /* wall time of the vocabulary's last load */
    char load_error[512];
    int64_t log_applied, log_end; /* a vocabulary log followed: its position (-1: none) */
    pr_histogram req_s;
    pr_fhealth health_base; /* feature health of the engines reloads replaced (under vocab) */
};

/* ---------------------------------------------------------------- transform */

/* A transform of the pool (waits while all are in use). */
static uint32_t pr__tr_take(pr_serve *s)
{
    pthread_mutex_lock(&s->pool_mu);
    while (!s->n_free)
        pthread_cond_wait(&s->pool_cv, &s->pool_mu);
    uint32_t k = s->free_tr[--s->n_free];
    pthread_mutex_unlock(&s->pool_mu);
    return k;
}

static void pr__tr_give(pr_serve *s, uint32_t k)
{
    pthread_mutex_lock(&s->pool_mu);
    s->free_tr[s->n_free++] = k;
    pthread_cond_signal(&s->pool_cv);
    pthread_mutex_unlock(&s->pool_mu);
}

static void pr__counts_add(pr_transform_counts *a, const pr_transform_counts *b)
{
    a->events += b->events;
    a->rows += b->rows;
    a->rejected += b->rejected;
    a->unseen += b->unseen;
    for (int r = 0; r < PR_DEC__COUNT; r++)
        a->by_reason[r] += b->by_reason[r];
}

/* The body's events through transform tr (vocab held for reading). The
 * HTTP status. */
static int pr__transform_body(pr_transform *tr, pr_framing fr, const char *body, size_t len,
                              pr_mbuf *out)
{
    char err[1024], err2[1024];
    const char *rec;
    size_t n, at = 0;
    int rc = 0;
    /* The framing first, whole: a broken body is refused before any event. */
    if (pr_framing_check(fr, body, len, err, sizeof(err))) {
        pr_mbuf_printf(out, "framing %s: %s\n", pr_framing_names[fr], err);
        return 400;
    }
    while (!rc && pr_framing_next(fr, body, len, &at, &rec, &n, err, sizeof(err)) == 1)
        rc = pr_transform_event(tr, rec, n, out, err, sizeof(err));
    int frc = pr_transform_flush(tr, out, err2, sizeof(err2));
    if (!rc && frc) {
        rc = frc;
        memcpy(err, err2, sizeof(err));
    }
    if (!rc)
        return 200;
    pr_mbuf_reset(out);
    pr_mbuf_printf(out, "%s\n", err);
    return rc == PR_EINVAL ? 400 : rc == PR_EAGAIN ? 503 : 500;
}

/* ?layout=raw: the rows as one batch in the trainer stream's raw layout
 * (the whole frame), or 422 with the rejected events' lines when the body
 * had any (a batch has a row per event or none). */
static int pr__raw_answer(pr_transform *tr, int status, uint64_t rejected, pr_mbuf *out,
                          const char **ctype)
{
    char err[512];
    uint8_t *frame = NULL;
    size_t len = 0, at = 0;
    if (status != 200 || rejected) {
        pr_transform_raw_end(tr, NULL, NULL, NULL, NULL, 0);
        if (status == 200)
            *ctype = "application/x-ndjson"; /* the rejected events' lines */
        return status != 200 ? status : 422;
    }
    if (pr_transform_raw_end(tr, &frame, &len, &at, err, sizeof(err))) {
        pr_mbuf_reset(out);
        pr_mbuf_printf(out, "%s\n", err);
        return 500;
    }
    pr_mbuf_reset(out);
    pr_mbuf_append(out, (const char *)frame, len);
    free(frame);
    *ctype = "application/x-piperec-raw";
    return 200;
}

/* The index in names[0..n) of query key `key` (absent: dflt), or -1 after
 * a 400's text in out. */
static int pr__query_choice(const pr__http_query *q, const char *key, const char *const *names,
                            int n, int dflt, pr_mbuf *out)
{
    const char *v = pr__http_query_get(q, key);
    if (!v)
        return dflt;
    for (int k = 0; k < n; k++)
        if (!strcmp(v, names[k]))
            return k;
    pr_mbuf_printf(out, "%s '%s': one of", key, v);
    for (int k = 0; k < n; k++)
        pr_mbuf_printf(out, "%s %s", k ? "," : "", names[k]);
    pr_mbuf_puts(out, "\n");
    return -1;
}

static const char *const pr__layout_names[] = {"json", "raw"}; /* ?layout= */

static int pr__h_transform(void *opaque, const pr__http_query *q, const char *body, size_t len,
                           pr_mbuf *out, const char **ctype)
{
    pr_serve *s = opaque;
    int fr = pr__query_choice(q, "framing", pr_framing_names, PR_FRAMING__COUNT,
                              pr_framing_default((pr_msg_format)s->o.pc->source.format), out);
    int layout = fr < 0 ? -1 : pr__query_choice(q, "layout", pr__layout_names, 2, 0, out);
    if (fr < 0 || layout < 0) {
        pthread_mutex_lock(&s->mu);
        s->requests[1]++;
        pthread_mutex_unlock(&s->mu);
        return 400;
    }
    bool raw = layout == 1;
    int64_t t0 = pr_mono_ns();
    static const pr_transform_counts zero;
    uint32_t k = pr__tr_take(s);
    pr_transform_counts c;
    pr_transform_set_counts(s->tr[k], &zero);
    pthread_rwlock_rdlock(&s->vocab); /* from here the transform's engine stays */
    if (raw)
        pr_transform_raw_begin(s->tr[k]);
    int status = pr__transform_body(s->tr[k], (pr_framing)fr, body, len, out);
    pr_transform_get_counts(s->tr[k], &c);
    if (raw) { /* the batch's vocab sizes are read from the engine: before the unlock */
        status = pr__raw_answer(s->tr[k], status, c.rejected, out, ctype);
        if (status == 422) /* no event got its row: the batch was dropped */
            c.rows = 0;
    }
    pthread_rwlock_unlock(&s->vocab);
    pr__tr_give(s, k);
    pthread_mutex_lock(&s->mu);
    /* a request answered with an error counts none of its events; 422 (raw,
     * some rejected) answered each of them */
    if (status == 200 || status == 422)
        pr__counts_add(&s->counts, &c);
    s->requests[status / 100 == 2 ? 0 : status / 100 == 4 ? 1 : 2]++;
    pthread_mutex_unlock(&s->mu);
    pr_histogram_observe(&s->req_s, (double)(pr_mono_ns() - t0) / 1e9);
    if (status == 200 && !raw)
        *ctype = "application/x-ndjson";
    return status;
}

/* ---------------------------------------------------------------- views */

static int pr__h_healthz(void *opaque, pr_mbuf *out, const char **ctype)
{
    (void)opaque, (void)ctype;
    pr_mbuf_puts(out, "ok\n");
    return 200;
}

static void pr__metrics_counts(pr_mbuf *mb, const pr_transform_counts *c)
{
    pr__metric_single(mb, "piperec_serve_events_total", PR_METRIC_COUNTER,
                      "Events received by POST /v1/transform.", (double)c->events);
    pr__metric_single(mb, "piperec_serve_rows_total", PR_METRIC_COUNTER,
                      "Events answered with a row.", (double)c->rows);
    pr__metric_family(mb, "piperec_serve_rejected_total", PR_METRIC_COUNTER,
                      "Events answered with an error line, by reason.");
    for (int r = 1; r < PR_DEC__COUNT; r++) {
        pr_label l = {"reason", pr_decode_reason_name(r)};
        pr__metric_sample(mb, "piperec_serve_rejected_total", &l, 1, (double)c->by_reason[r]);
    }
    pr__metric_single(mb, "piperec_serve_unseen_ids_total", PR_METRIC_COUNTER,
                      "Ids without an index in the vocabulary (answered OOV, or --unseen under "
                      "profile dlrm).",
                      (double)c->unseen);
}

/* Feature health of the serving traffic (pr_fhealth.h), the engines a
 * reload replaced included, as metrics or as /v1/status's key: with vocab
 * held for reading (the spec it names columns by is the engine's) and the
 * engine's shared step, whose counts it reads, held off. */
static void pr__health(pr_serve *s, pr_mbuf *out, bool status)
{
    pr_fhealth h;
    pthread_rwlock_rdlock(&s->vocab);
    if (pr_fhealth_init(&h, s->o.pc, pr_engine_spec(s->eng)) == 0) {
        pthread_mutex_lock(&s->seq_mu);
        pr_fhealth_read(&h, s->eng, &s->health_base);
        pthread_mutex_unlock(&s->seq_mu);
        if (status) {
            pr_mbuf_puts(out, ",\"feature_health\":");
            pr_fhealth_json(out, &h);
        } else {
            pr_fhealth_metrics(out, s->o.pc->name, &h);
        }
    }
    pthread_rwlock_unlock(&s->vocab);
    pr_fhealth_fini(&h);
}

static int pr__h_metrics(void *opaque, pr_mbuf *out, const char **ctype)
{
    pr_serve *s = opaque;
    pthread_mutex_lock(&s->mu);
    pr_transform_counts c = s->counts;
    uint64_t req[3] = {s->requests[0], s->requests[1], s->requests[2]};
    uint64_t loads = s->loads, fails = s->load_failures;
    int64_t loaded_ms = s->loaded_ms, log_applied = s->log_applied, log_end = s->log_end;
    pthread_mutex_unlock(&s->mu);
    pr__metric_family(out, "piperec_serve_requests_total", PR_METRIC_COUNTER,
                      "POST /v1/transform requests, by HTTP status class.");
    static const char *const cls[3] = {"2xx", "4xx", "5xx"};
    for (int i = 0; i < 3; i++) {
        pr_label l = {"code", cls[i]};
        pr__metric_sample(out, "piperec_serve_requests_total", &l, 1, (double)req[i]);
    }
    pr_hist_snapshot hs;
    pr_histogram_snapshot(&s->req_s, &hs);
    pr__metric_family(out, "piperec_serve_request_seconds", PR_METRIC_HISTOGRAM,
                      "Time to answer a POST /v1/transform, waits included (for a free "
                      "transform, a reload's swap, the engine's shared step).");
    pr__metric_histogram(out, "piperec_serve_request_seconds", NULL, 0, &hs);
    pr__metrics_counts(out, &c);
    pr__metric_single(out, "piperec_serve_vocab_loads_total", PR_METRIC_COUNTER,
                      "Vocabulary loads (the first, and reloads that found it changed).",
                      (double)loads);
    pr__metric_single(out, "piperec_serve_vocab_load_failures_total", PR_METRIC_COUNTER,
                      "Reloads that failed (the vocabulary loaded before stays in use).",
                      (double)fails);
    pr__metric_single(out, "piperec_serve_vocab_loaded_timestamp_seconds", PR_METRIC_GAUGE,
                      "When the vocabulary in use was loaded (Unix time).",
                      (double)loaded_ms / 1000.0);
    if (log_applied >= 0) {
        pr__metric_single(out, "piperec_serve_vocab_log_applied_offset", PR_METRIC_GAUGE,
                          "--from-log: the next vocabulary log offset to apply.",
                          (double)log_applied);
        pr__metric_single(out, "piperec_serve_vocab_log_lag_records", PR_METRIC_GAUGE,
                          "--from-log: vocabulary log records not applied yet.",
                          (double)(log_end > log_applied ? log_end - log_applied : 0));
    }
    pr__health(s, out, false);
    pr__process_metrics(out);
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    return 200;
}

/* The batch layout a model trained on, as meta.json has it: "layout", and
 * per sparse key (schema order) its embedding rows ("vocab_sizes": a vocab
 * table's size now, else the operator's range) and, when some share one,
 * its table ("feature_tables"). With vocab held. */
static void pr__status_layout(const pr_serve *s, pr_mbuf *out)
{
    const pr_feature_schema *fs = &s->o.pc->features;
    const pr_pipeline_spec *es = pr_engine_spec(s->eng);
    pr_mbuf_printf(out, ",\"layout\":\"%s\",\"keys\":[", fs->declared ? "jagged" : "criteo");
    bool shared = false;
    for (uint32_t i = 0, k = 0; fs->declared && i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
            continue;
        pr_mbuf_puts(out, k++ ? "," : "");
        pr_mbuf_json_str(out, f->name);
        shared |= f->table[0] != '\0';
    }
    for (uint32_t c = 0; !fs->declared && c < es->n_sparse; c++) {
        pr_mbuf_puts(out, c ? "," : "");
        pr_mbuf_json_str(out, es->sparse[c].name);
    }
    pr_mbuf_puts(out, "],\"vocab_sizes\":[");
    for (uint32_t i = 0, k = 0; fs->declared && i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
            continue;
        int c = pr_feature_vocab_col(fs, i);
        uint64_t n = c >= 0 ? pr_engine_vocab_size(s->eng, (uint32_t)c) : pr_feature_value_range(f);
        pr_mbuf_printf(out, "%s%" PRIu64, k++ ? "," : "", n);
    }
    for (uint32_t c = 0; !fs->declared && c < es->n_sparse; c++)
        pr_mbuf_printf(out, "%s%" PRIu64, c ? "," : "", pr_engine_vocab_size(s->eng, c));
    pr_mbuf_puts(out, "]");
    if (!shared)
        return;
    pr_mbuf_puts(out, ",\"feature_tables\":[");
    for (uint32_t i = 0, k = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
            continue;
        pr_mbuf_puts(out, k++ ? "," : "");
        pr_mbuf_json_str(out, pr_feature_table_name(f));
    }
    pr_mbuf_puts(out, "]");
}

static int pr__h_status(void *opaque, pr_mbuf *out, const char **ctype)
{
    pr_serve *s = opaque;
    pthread_rwlock_rdlock(&s->vocab); /* the engine, for the layout */
    pthread_mutex_lock(&s->mu);
    pr_transform_counts c = s->counts;
    pr_mbuf_puts(out, "{\"pipeline\":");
    pr_mbuf_json_str(out, s->o.pc->name);
    pr_mbuf_printf(out,
                   ",\"format\":\"%s\",\"profile\":\"%s\",\"unseen\":%" PRId64
                   ",\"threads\":%u,\"layouts\":[\"json\",\"raw\"],\"vocab\":{",
                   pr_msg_format_name(s->o.pc->source.format),
                   pr_vocab_profile_name(s->o.pc->spec.profile), s->o.unseen, s->n_tr);
    pr_mbuf_puts(out, "\"source\":");
    pr_mbuf_json_str(out, s->o.vocab_source ? s->o.vocab_source : "");
    pr_mbuf_printf(out,
                   ",\"loaded_ms\":%" PRId64 ",\"loads\":%" PRIu64 ",\"load_failures\":%" PRIu64
                   ",\"last_error\":",
                   s->loaded_ms, s->loads, s->load_failures);
    pr_mbuf_json_str(out, s->load_error);
    if (s->log_applied >= 0)
        pr_mbuf_printf(out, ",\"log_offset\":%" PRId64 ",\"log_end\":%" PRId64, s->log_applied,
                       s->log_end);
    pr_mbuf_puts(out, "}");
    pr__status_layout(s, out);
    pr_mbuf_printf(out,
                   ",\"events\":%" PRIu64 ",\"rows\":%" PRIu64 ",\"rejected\":%" PRIu64
                   ",\"unseen_ids\":%" PRIu64,
                   c.events, c.rows, c.rejected, c.unseen);
    pthread_mutex_unlock(&s->mu);
    pthread_rwlock_unlock(&s->vocab);
    pr__health(s, out, true);
    pr_mbuf_puts(out, "}\n");
    *ctype = "application/json";
    return 200;
}

/* ---------------------------------------------------------------- life */

/* The pool: pr_serve_opts.threads transforms, all on the engine s->eng. */
static int pr__pool_new(pr_serve *s, char *errstr, size_t errstr_size)
{
    s->n_tr = s->o.threads ? s->o.threads : 1;
    s->tr = calloc(s->n_tr, sizeof(*s->tr));
    s->free_tr = calloc(s->n_tr, sizeof(*s->free_tr));
    if (!s->tr || !s->free_tr)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "serve: out of memory");
    pr_transform_opts to = {
        .pc = s->o.pc, .eng = s->eng, .unseen = s->o.unseen, .seq_mu = &s->seq_mu};
    for (uint32_t k = 0; k < s->n_tr; k++) {
        int rc = pr_transform_new(&to, &s->tr[k], errstr, errstr_size);
        if (rc)
            return rc;
        s->free_tr[s->n_free++] = k;
    }
    return 0;
}

int pr_serve_start(const pr_serve_opts *o, pr_engine *eng, pr_serve **out, char *errstr,
                   size_t errstr_size)
{
    *out = NULL;
    pr_serve *s = calloc(1, sizeof(*s));
    if (!s)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "serve: out of memory");
    s->o = *o;
    s->eng = eng;
    s->log_applied = s->log_end = -1;
    pthread_rwlockattr_t ra;
    pthread_rwlockattr_init(&ra);
    pthread_rwlockattr_setkind_np(&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&s->vocab, &ra);
    pthread_rwlockattr_destroy(&ra);
    pthread_mutex_init(&s->seq_mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->pool_cv, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pr_histogram_init(&s->req_s, pr__req_bounds, sizeof(pr__req_bounds) / sizeof(*pr__req_bounds));
    int rc = o->threads > PR_SERVE_MAX_THREADS
                 ? pr_seterr(errstr, errstr_size, PR_EINVAL, "serve: threads must be 1..%d, not %u",
                             PR_SERVE_MAX_THREADS, o->threads)
             : pr_fhealth_init(&s->health_base, o->pc, pr_engine_spec(eng))
                 ? pr_seterr(errstr, errstr_size, PR_ENOMEM, "serve: out of memory")
                 : pr__pool_new(s, errstr, errstr_size);
    s->health_base.spec = NULL; /* counts only: never rendered (its engine may go) */
    if (!rc) {
        s->loads = 1;
        s->loaded_ms = pr_clock_wall_ms(pr_clock_real());
        const pr__http_route routes[] = {
            {"/v1/transform", NULL, s, NULL, pr__h_transform},
            {"/metrics", pr__h_metrics, s, NULL, NULL},
            {"/healthz", pr__h_healthz, s, NULL, NULL},
            {"/v1/status", pr__h_status, s, NULL, NULL},
        };
        pr__http_tls tls = {o->tls_cert, o->tls_key, o->tls_ca};
        rc = pr__http_start_pool(o->listen, o->tls_cert ? &tls : NULL, PR_HTTP_PER_CONNECTION,
                                 routes, sizeof(routes) / sizeof(routes[0]), &s->http, errstr,
                                 errstr_size);
    }
    if (rc) {
        s->eng = NULL; /* the caller's again */
        pr_serve_stop(s);
        return rc;
    }
    *out = s;
    return 0;
}

uint16_t pr_serve_port(const pr_serve *s)
{
    return pr__http_port(s->http);
}

unsigned pr_serve_threads(const pr_serve *s)
{
    return s->n_tr;
}

int pr_serve_swap(pr_serve *s, pr_engine *eng, char *errstr, size_t errstr_size)
{
    pthread_rwlock_wrlock(&s->vocab); /* no request runs */
    pr_engine *old = s->eng;
    int rc = 0;
    uint32_t k = 0;
    for (; !rc && k < s->n_tr; k++)
        rc = pr_transform_set_engine(s->tr[k], eng, errstr, errstr_size);
    for (uint32_t j = 0; rc && j + 1 < k; j++) /* those already moved: back, no allocation */
        pr_transform_engine_back(s->tr[j]);
    if (!rc) { /* the old engine's feature health carries over (no request runs) */
        pr_fhealth_add_engine(&s->health_base, old);
        s->eng = eng;
    }
    pthread_rwlock_unlock(&s->vocab);
    if (!rc) {
        pthread_mutex_lock(&s->mu);
        s->loads++;
        s->loaded_ms = pr_clock_wall_ms(pr_clock_real());
        s->load_error[0] = '\0';
        pthread_mutex_unlock(&s->mu);
    }
    pr_engine_free(rc ? eng : old);
    return rc;
}

void pr_serve_load_failed(pr_serve *s, const char *why)
{
    pthread_mutex_lock(&s->mu);
    s->load_failures++;
    snprintf(s->load_error, sizeof(s->load_error), "%s", why);
    pthread_mutex_unlock(&s->mu);
}

void pr_serve_locked(pr_serve *s, void (*fn)(void *opaque, pr_engine *eng), void *opaque)
{
    pthread_rwlock_wrlock(&s->vocab);
    fn(opaque, s->eng);
    pthread_rwlock_unlock(&s->vocab);
}

void pr_serve_set_log_position(pr_serve *s, int64_t applied, int64_t end)
{
    pthread_mutex_lock(&s->mu);
    s->log_applied = applied;
    s->log_end = end;
    pthread_mutex_unlock(&s->mu);
}

void pr_serve_get_counts(pr_serve *s, pr_transform_counts *c)
{
    pthread_mutex_lock(&s->mu);
    *c = s->counts;
    pthread_mutex_unlock(&s->mu);
}

void pr_serve_stop(pr_serve *s)
{
    if (!s)
        return;
    pr__http_stop(s->http); /* waits for the requests in flight */
    for (uint32_t k = 0; s->tr && k < s->n_tr; k++)
        pr_transform_free(s->tr[k]);
    free(s->tr);
    free(s->free_tr);
    pr_engine_free(s->eng);
    pr_histogram_fini(&s->req_s);
    pr_fhealth_fini(&s->health_base);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->pool_cv);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_mutex_destroy(&s->seq_mu);
    pthread_rwlock_destroy(&s->vocab);
    free(s);
}
