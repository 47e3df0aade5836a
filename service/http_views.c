/*
 * http_views.c — what the service shows over HTTP: the handlers of
 * /metrics, /healthz, /readyz, /v1/status and /v1/hot, the health and
 * readiness rules behind them, the pipeline stats (pr_service.h) and the
 * /v1/status JSON. The HTTP server itself is http.c; the /metrics families
 * are registered by their owners (metrics_*.c, metric_families.h).
 *
 * Threads: everything here runs on the HTTP server's threads (or the demo's
 * status line) and only reads: component stats through their thread-safe
 * getters, and the cache the pipeline thread refreshes under p->lock.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipe.h"
#include "pr_clock.h"

/* ---------------------------------------------------------------- handlers */

static int pr__h_metrics(void *opaque, pr_mbuf *body, const char **ctype)
{
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    pr_service_render_metrics(opaque, body);
    return 200;
}

static int pr__h_healthz(void *opaque, pr_mbuf *body, const char **ctype)
{
    (void)ctype;
    char why[256];
    if (pr_service_healthy(opaque, why, sizeof(why))) {
        pr_mbuf_puts(body, "ok\n");
        return 200;
    }
    pr_mbuf_printf(body, "unhealthy: %s\n", why);
    return 503;
}

static int pr__h_readyz(void *opaque, pr_mbuf *body, const char **ctype)
{
    (void)ctype;
    char why[256];
    if (pr_service_ready(opaque, why, sizeof(why))) {
        pr_mbuf_puts(body, "ready\n");
        return 200;
    }
    pr_mbuf_printf(body, "not ready: %s\n", why);
    return 503;
}

static int pr__h_status(void *opaque, pr_mbuf *body, const char **ctype)
{
    *ctype = "application/json";
    pr_service_render_status(opaque, body);
    return 200;
}

/* GET /v1/hot?pipeline=P&column=C&k=K: the column's top k (default 10) from
 * its hot-set sketch (a declared schema: C is a vocab feature's name, also
 * accepted as feature=C, and a list's shares are shares of its elements; a
 * shared table's member answers its table's, named in "column"). Unknown pipeline or
 * column, or hot sets off: 404; a missing parameter or k outside 1..hot.top_k: 400; errors are
 * JSON. */
static int pr__h_hot(void *opaque, const pr__http_query *q, pr_mbuf *body, const char **ctype)
{
    pr_service *svc = opaque;
    *ctype = "application/json";
    const char *pn = pr__http_query_get(q, "pipeline");
    const char *cn = pr__http_query_get(q, "column");
    if (!cn) /* a declared schema's columns are features: either name works */
        cn = pr__http_query_get(q, "feature");
    const char *ks = pr__http_query_get(q, "k");
    uint32_t top_k = svc->cfg->hot.top_k;
    char msg[300];
    int status = 400;
    if (!pn || !cn) {
        snprintf(msg, sizeof(msg), "pipeline and column are required (?pipeline=P&column=C&k=K)");
        goto out_error;
    }
    pr__pipe *p = NULL;
    for (size_t i = 0; i < svc->n_pipes && !p; i++)
        if (!strcmp(svc->pipes[i].cfg->name, pn))
            p = &svc->pipes[i];
    status = 404;
    if (!p) {
        snprintf(msg, sizeof(msg), "unknown pipeline '%.100s'", pn);
        goto out_error;
    }
    const pr_pipeline_spec *spec = p->spec;
    uint32_t col = spec->n_sparse;
    for (uint32_t c = 0; c < spec->n_sparse && col == spec->n_sparse; c++)
        if (!strcmp(spec->sparse[c].name, cn))
            col = c;
    const pr_feature_schema *fs = &p->cfg->features;
    for (uint32_t i = 0; p->json && col == spec->n_sparse && i < fs->n_features; i++)
        if (!strcmp(fs->features[i].name, cn) && pr_feature_vocab_col(fs, i) >= 0)
            col = (uint32_t)pr_feature_vocab_col(fs, i); /* a table's member: its table */
    if (col == spec->n_sparse && p->json) { /* a declared schema: columns are vocab features */
        snprintf(msg, sizeof(msg),
                 "pipeline '%.100s' has no vocab feature '%.100s' (hot sets track the "
                 "features with a vocab operator)",
                 pn, cn);
        goto out_error;
    }
    if (col == spec->n_sparse) {
        snprintf(msg, sizeof(msg), "pipeline '%.100s' has no sparse column '%.100s'", pn, cn);
        goto out_error;
    }
    if (!p->hot) {
        snprintf(msg, sizeof(msg), "hot sets are off (hot.top_k: 0)");
        goto out_error;
    }
    status = 400;
    unsigned long k = 10;
    if (ks) {
        char *end;
        errno = 0;
        k = strtoul(ks, &end, 10);
        if (errno || end == ks || *end || ks[0] == '-' || k < 1 || k > top_k) {
            snprintf(msg, sizeof(msg), "k must be an integer in 1..%u (hot.top_k), got '%.40s'",
                     top_k, ks);
            goto out_error;
        }
    } else if (k > top_k) {
        k = top_k;
    }
    pr_hot_item *items = malloc(k * sizeof(*items));
    if (!items) {
        body->err = PR_ENOMEM;
        return 500;
    }
    double coverage;
    pthread_mutex_lock(&p->hot_lock);
    uint64_t rows = pr_hot_rows_observed(p->hot[col]);
    size_t n = pr_hot_top(p->hot[col], k, items, &coverage);
    uint64_t version = pr_hot_sets_version(p->hot, spec->n_sparse);
    pthread_mutex_unlock(&p->hot_lock);
    pr_mbuf_puts(body, "{\"pipeline\":");
    pr_mbuf_json_str(body, p->cfg->name);
    pr_mbuf_puts(body, ",\"column\":");
    pr_mbuf_json_str(body, spec->sparse[col].name);
    pr_mbuf_printf(body, ",\"k\":%lu,\"rows_observed\":%llu,\"items\":[", k,
                   (unsigned long long)rows);
    for (size_t i = 0; i < n; i++)
        pr_mbuf_printf(body, "%s{\"index\":%lld,\"share\":%.6g}", i ? "," : "",
                       (long long)items[i].index, items[i].share);
    pr_mbuf_printf(body, "],\"coverage\":%.6g,\"version\":%llu}\n", coverage,
                   (unsigned long long)version);
    free(items);
    return 200;

out_error:
    pr_mbuf_puts(body, "{\"error\":");
    pr_mbuf_json_str(body, msg);
    pr_mbuf_puts(body, "}\n");
    return status;
}

/* ---------------------------------------------------------------- the endpoint */

/* Start the HTTP endpoint with the routes above (http.enabled and not
 * opts.no_http; the caller checks). */
int pr__http_views_start(pr_service *svc, char *errstr, size_t errstr_size)
{
    const pr__http_route routes[] = {
        {"/metrics", pr__h_metrics, svc, NULL, NULL}, {"/healthz", pr__h_healthz, svc, NULL, NULL},
        {"/readyz", pr__h_readyz, svc, NULL, NULL},   {"/v1/status", pr__h_status, svc, NULL, NULL},
        {"/v1/hot", NULL, svc, pr__h_hot, NULL},
    };
    const pr_http_tls_cfg *ht = &svc->cfg->http.tls;
    const pr__http_tls tls = {ht->cert_file, ht->key_file, ht->ca_file};
    return pr__http_start_tls(svc->cfg->http.listen, ht->enabled ? &tls : NULL, routes,
                              sizeof(routes) / sizeof(routes[0]), &svc->http, errstr, errstr_size);
}

/* ---------------------------------------------------------------- queries */

int pr_service_pipeline_stats(pr_service *svc, size_t i, pr_pipeline_stats *st)
{
    if (i >= svc->n_pipes)
        return PR_EINVAL;
    pr__pipe *p = &svc->pipes[i];
    memset(st, 0, sizeof(*st));
    snprintf(st->name, sizeof(st->name), "%s", p->cfg->name);
    st->backend = pr_engine_backend_name(p->eng);
    pr_consumer_stats cs;
    pr_batcher_stats bs;
    pr_consumer_get_stats(p->cons, &cs);
    pr_batcher_get_stats(p->bat, &bs);
    st->records_in = cs.records;
    st->messages_in = cs.messages;
    st->bytes_in = cs.bytes;
    st->rejected = cs.rejected_records;
    st->filtered = cs.filtered;
    st->sampled_out = cs.sampled_out;
    for (int r = 0; r < PR_REJECT__ENGINE_COUNT; r++)
        st->rejected += atomic_load(&p->engine_rejects[r]);
    st->rows_out = bs.rows_out;
    st->batches_emitted = bs.batches_emitted;
    st->batches_acked = bs.batches_acked;
    st->inflight_bytes = atomic_load(&p->inflight);
    st->inflight_peak_bytes = atomic_load(&p->inflight_peak);
    st->assigned_partitions = cs.assigned_partitions;
    st->paused_partitions = cs.paused_partitions;
    st->pauses = atomic_load(&p->pauses);
    st->loop_turns = atomic_load(&p->loop_turns);
    st->poll_empty_ns = atomic_load(&p->poll_empty_ns);
    st->poll_rows_ns = atomic_load(&p->poll_rows_ns);
    st->worker_wait_ns = atomic_load(&p->worker_wait_ns);
    pr_partition_lag *lags = calloc(PR__MAX_PARTS, sizeof(*lags));
    size_t nl = lags ? pr_consumer_lag(p->cons, lags, PR__MAX_PARTS) : 0;
    st->lag = nl ? 0 : -1;
    for (size_t k = 0; k < nl && k < PR__MAX_PARTS; k++) {
        int64_t l = (lags[k].high_watermark >= 0 && lags[k].position >= 0)
                        ? lags[k].high_watermark - lags[k].position
                        : -1;
        if (l < 0) {
            st->lag = -1;
            break;
        }
        st->lag += l;
    }
    free(lags);
    pthread_mutex_lock(&p->lock);
    for (uint32_t c = 0; c < p->spec->n_sparse; c++)
        st->vocab_size_total += p->vocab[c];
    pthread_mutex_unlock(&p->lock);
    st->fresh_emit = bs.event_to_emit_s;
    st->fresh_ack = bs.emit_to_ack_s;
    return 0;
}

bool pr_service_healthy(pr_service *svc, char *why, size_t why_size)
{
    int64_t now = pr_mono_ns();
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        if (atomic_load(&p->fatal)) {
            snprintf(why, why_size, "pipeline %s failed: %s", p->cfg->name, p->fatal_msg);
            return false;
        }
        if (atomic_load(&p->done))
            continue; /* stopped on request: not a health problem */
        int64_t age_ms = (now - atomic_load(&p->last_turn_ns)) / 1000000;
        if (age_ms > svc->opts.health_stall_ms) {
            snprintf(why, why_size, "pipeline %s loop stalled for %lld ms", p->cfg->name,
                     (long long)age_ms);
            return false;
        }
    }
    snprintf(why, why_size, "ok");
    return true;
}

bool pr_service_ready(pr_service *svc, char *why, size_t why_size)
{
    if (svc->stop_requested) {
        snprintf(why, why_size, "shutting down");
        return false;
    }
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        if (atomic_load(&p->fatal)) {
            snprintf(why, why_size, "pipeline %s failed", p->cfg->name);
            return false;
        }
        pr_consumer_stats cs;
        pr_consumer_get_stats(p->cons, &cs);
        if (cs.assigned_partitions == 0) {
            /* With the brokers down the client's last error says why. */
            snprintf(why, why_size, "pipeline %s has no partitions assigned%s%s%s", p->cfg->name,
                     cs.last_kafka_error[0] ? " (last Kafka error: " : "", cs.last_kafka_error,
                     cs.last_kafka_error[0] ? ")" : "");
            return false;
        }
        if (cs.decode_waiting) { /* e.g. the schema registry is down: nothing moves */
            snprintf(why, why_size, "pipeline %s waits to decode: %s", p->cfg->name,
                     cs.decode_wait_why);
            return false;
        }
        pthread_mutex_lock(&p->lock);
        bool ok = p->sinks_any_ready;
        pthread_mutex_unlock(&p->lock);
        if (!ok) {
            snprintf(why, why_size, "pipeline %s has no sink able to accept batches", p->cfg->name);
            return false;
        }
    }
    snprintf(why, why_size, "ok");
    return true;
}

/* ---------------------------------------------------------------- /v1/status */

static void pr__json_num(pr_mbuf *mb, double v)
{
    if (!isfinite(v))
        pr_mbuf_puts(mb, "null");
    else if (v == floor(v) && fabs(v) < 9e15)
        pr_mbuf_printf(mb, "%.0f", v);
    else
        pr_mbuf_printf(mb, "%.6g", v);
}

/* A declared schema's features with the backend that runs each operator
 * (pr_feature_place, the same placement `piperec explain` prints). */
static void pr__status_features(pr_mbuf *mb, const pr__pipe *p, const char *backend)
{
    const pr_feature_schema *fs = &p->cfg->features;
    if (!fs->declared)
        return;
    pr_mbuf_puts(mb, ",\"features\":[");
    for (uint32_t i = 0; i < fs->n_features; i++) {
        const pr_feature_spec *f = &fs->features[i];
        const char *on[PR_FEAT_MAX_OPS];
        char err[256];
        bool placed = pr_feature_place(f, backend, fs->cpu_ops, on, err, sizeof(err)) == 0;
        pr_mbuf_puts(mb, i ? ",{\"name\":" : "{\"name\":");
        pr_mbuf_json_str(mb, f->name);
        pr_mbuf_puts(mb, ",\"kind\":");
        pr_mbuf_json_str(mb, pr_feature_kind_names[f->kind]);
        pr_mbuf_puts(mb, ",\"ops\":[");
        for (uint8_t k = 0; k < f->n_ops; k++) {
            pr_mbuf_puts(mb, k ? ",{\"op\":" : "{\"op\":");
            pr_mbuf_json_str(mb, pr_fop_table[f->ops[k].op].name);
            pr_mbuf_puts(mb, ",\"on\":");
            pr_mbuf_json_str(mb, placed ? on[k] : "none");
            pr_mbuf_puts(mb, "}");
        }
        pr_mbuf_puts(mb, "]}");
    }
    pr_mbuf_puts(mb, "]");
}

void pr_service_render_status(pr_service *svc, pr_mbuf *mb)
{
    char why[256];
    bool healthy = pr_service_healthy(svc, why, sizeof(why));
    bool ready = pr_service_ready(svc, why, sizeof(why));
    pr_mbuf_printf(mb, "{\"version\":\"%s\",\"healthy\":%s,\"ready\":%s,\"uptime_seconds\":",
                   PR_VERSION, healthy ? "true" : "false", ready ? "true" : "false");
    pr__json_num(mb, (double)(pr_clock_wall_ms(pr_clock_real()) - svc->start_wall_ms) / 1000.0);
    pr_mbuf_puts(mb, ",\"max_inflight_bytes\":");
    pr__json_num(mb, (double)svc->cfg->limits.max_inflight_bytes);
    pr_mbuf_puts(mb, ",\"pipelines\":[");
    for (size_t i = 0; i < svc->n_pipes; i++) {
        pr__pipe *p = &svc->pipes[i];
        pr_pipeline_stats st;
        pr_service_pipeline_stats(svc, i, &st);
        if (i)
            pr_mbuf_puts(mb, ",");
        pr_mbuf_puts(mb, "{\"name\":");
        pr_mbuf_json_str(mb, p->cfg->name);
        pr_mbuf_puts(mb, ",\"backend\":");
        pr_mbuf_json_str(mb, st.backend);
        pr_mbuf_puts(mb, ",\"format\":");
        pr_mbuf_json_str(mb, pr_source_format_name(p->cfg->source.format));
        pr__status_features(mb, p, st.backend);
        pr_mbuf_printf(mb, ",\"up\":%s",
                       (!atomic_load(&p->fatal) && !atomic_load(&p->done)) ? "true" : "false");
        if (atomic_load(&p->fatal)) {
            pr_mbuf_puts(mb, ",\"error\":");
            pr_mbuf_json_str(mb, p->fatal_msg);
        }
        pr_mbuf_printf(mb, ",\"trainer_port\":%d,\"epoch\":%llu", p->trainer_port,
                       (unsigned long long)atomic_load(&p->epoch));
        pr_mbuf_puts(mb, ",\"assignment\":[");
        pr_partition_lag *lags = calloc(PR__MAX_PARTS, sizeof(*lags));
        size_t nl = lags ? pr_consumer_lag(p->cons, lags, PR__MAX_PARTS) : 0;
        if (nl > PR__MAX_PARTS)
            nl = PR__MAX_PARTS;
        for (size_t k = 0; k < nl; k++) {
            if (k)
                pr_mbuf_puts(mb, ",");
            pr_mbuf_puts(mb, "{\"topic\":");
            pr_mbuf_json_str(mb, lags[k].tp.topic);
            pr_mbuf_printf(mb,
                           ",\"partition\":%d,\"high_watermark\":%lld,\"position\":%lld,"
                           "\"committed\":%lld,\"lag\":%lld,\"paused\":%s}",
                           lags[k].tp.partition, (long long)lags[k].high_watermark,
                           (long long)lags[k].position, (long long)lags[k].committed,
                           (long long)lags[k].lag, lags[k].paused ? "true" : "false");
        }
        free(lags);
        pr_mbuf_puts(mb, "]");
        pthread_mutex_lock(&p->lock);
        double rr = p->rate_records, ro = p->rate_rows_out, rb = p->rate_batches;
        uint64_t vocab[PR_MAX_SPARSE];
        memcpy(vocab, p->vocab, sizeof(vocab));
        pthread_mutex_unlock(&p->lock);
        pr_mbuf_printf(
            mb,
            ",\"records_in\":%llu,\"messages_in\":%llu,\"bytes_in\":%llu,"
            "\"rejected\":%llu,\"filtered\":%llu,\"sampled_out\":%llu,\"records_out\":%llu,"
            "\"batches_emitted\":%llu,\"batches_acked\":%llu,\"inflight_bytes\":%llu,"
            "\"paused_partitions\":%u,\"lag\":%lld",
            (unsigned long long)st.records_in, (unsigned long long)st.messages_in,
            (unsigned long long)st.bytes_in, (unsigned long long)st.rejected,
            (unsigned long long)st.filtered, (unsigned long long)st.sampled_out,
            (unsigned long long)st.rows_out, (unsigned long long)st.batches_emitted,
            (unsigned long long)st.batches_acked, (unsigned long long)st.inflight_bytes,
            st.paused_partitions, (long long)st.lag);
        pr_mbuf_puts(mb, ",\"rates\":{\"records_in_per_second\":");
        pr__json_num(mb, rr);
        pr_mbuf_puts(mb, ",\"records_out_per_second\":");
        pr__json_num(mb, ro);
        pr_mbuf_puts(mb, ",\"batches_per_second\":");
        pr__json_num(mb, rb);
        pr_mbuf_puts(mb, "},\"freshness_seconds\":{\"event_to_emit_p50\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_emit, 0.5));
        pr_mbuf_puts(mb, ",\"event_to_emit_p99\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_emit, 0.99));
        /* The quantiles stop at the histogram's top bound (60 s); the mean
         * does not, so events much older than that read as what they are. */
        pr_mbuf_puts(mb, ",\"event_to_emit_mean\":");
        pr__json_num(mb,
                     st.fresh_emit.count ? st.fresh_emit.sum / (double)st.fresh_emit.count : NAN);
        pr_mbuf_puts(mb, ",\"emit_to_ack_p50\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_ack, 0.5));
        pr_mbuf_puts(mb, ",\"emit_to_ack_p99\":");
        pr__json_num(mb, pr_hist_snapshot_quantile(&st.fresh_ack, 0.99));
        pr_mbuf_puts(mb, "},\"vocab_sizes\":{");
        for (uint32_t c = 0; c < p->spec->n_sparse; c++) {
            if (c)
                pr_mbuf_puts(mb, ",");
            pr_mbuf_json_str(mb, p->spec->sparse[c].name);
            pr_mbuf_printf(mb, ":%llu", (unsigned long long)vocab[c]);
        }
        pr_mbuf_puts(mb, "},\"feature_health\":");
        pthread_mutex_lock(&p->lock);
        pr_fhealth_json(mb, &p->health);
        pthread_mutex_unlock(&p->lock);
        pr_mbuf_puts(mb, "}");
    }
    pr_mbuf_puts(mb, "]}\n");
}
