/*
 * pipe_ends.c — the two ends of a pipeline, built by pr__pipe_init
 * (service.c): the sinks it writes (every built sink its config turns on,
 * used by capability, never by name: pr_sink.h) and the Kafka consumer it
 * reads (group membership, dead letters, the rebalance callbacks of
 * pipeline.c), plus the names a replica goes by.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipe.h"
#include "pr_log.h"

/* The sink set of pipeline p: each built sink whose switch the pipeline's
 * config turns on, in table order; a listening sink gives the trainer port,
 * a sink in checkpoint delivery becomes p->ckpt_sink. */
int pr__sinks_open(pr__pipe *p, const pr_clock *clock, char *errstr, size_t errstr_size)
{
    const pr_pipeline_cfg *pc = p->cfg;
    pr_sink_cfg sc;
    memset(&sc, 0, sizeof(sc));
    sc.pipeline = pc->name;
    sc.n_dense = pc->spec.n_dense;
    sc.n_sparse = pc->spec.n_sparse;
    sc.sparse_width = pr_engine_sparse_width(p->eng);
    for (uint32_t i = 0; i < pc->spec.n_dense; i++)
        p->dense_names[i] = pc->dense_names[i];
    for (uint32_t i = 0; i < pc->spec.n_sparse; i++)
        p->sparse_names[i] = pc->spec.sparse[i].name;
    sc.dense_names = p->dense_names;
    sc.sparse_names = p->sparse_names;
    sc.clock = clock;
    /* The loader filled the sinks' own settings (defaults included; the
     * Kafka sink's bootstrap.servers falls back to the source's there). */
    sc.trainer = pc->sinks.trainer;
    sc.kafka = pc->sinks.kafka;
    sc.files = pc->sinks.files;

    p->sinks = pr_sinkset_new();
    if (!p->sinks)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    /* Every built sink the config turns on, in table order; what the
     * pipeline does with one follows from its capabilities. */
    const pr_sink_ops *ops;
    for (size_t i = 0; (ops = pr_sink_ops_at(i)) != NULL; i++) {
        if (!*(const bool *)((const char *)&pc->sinks + ops->enabled_off))
            continue;
        pr_sink *s = NULL;
        char e[256] = "";
        int rc = pr_sink_new(ops, &sc, &s, e, sizeof(e));
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "pipelines[%s].sinks.%s: %s", pc->name,
                             ops->name, e);
        if (pr_sink_caps(s) & PR_SINK_CAP_LISTENER)
            p->trainer_port = pr_sink_port(s);
        if (pr_sink_checkpoint_mode(s))
            p->ckpt_sink = s;
        rc = pr_sinkset_add(p->sinks, s);
        if (rc) {
            pr_sink_free(s);
            return pr_seterr(errstr, errstr_size, rc, "pipelines[%s]: cannot add sink %s", pc->name,
                             ops->name);
        }
    }
    return 0;
}

/* group.instance.id for static membership: the config's value as is ("" =
 * dynamic), else $PIPEREC_INSTANCE_ID or $POD_NAME (the Helm chart sets it)
 * with "-<pipeline>" appended (pipelines may share a group), else none. */
static const char *pr__instance_id(pr__pipe *p, const pr_pipeline_cfg *pc)
{
    const char *v = pc->source.kafka.group_instance_id;
    if (v)
        snprintf(p->instance_id, sizeof(p->instance_id), "%s", v);
    else {
        const char *env = getenv("PIPEREC_INSTANCE_ID");
        if (!env || !*env)
            env = getenv("POD_NAME");
        if (env && *env)
            snprintf(p->instance_id, sizeof(p->instance_id), "%s-%s", env, pc->name);
    }
    return p->instance_id[0] ? p->instance_id : NULL;
}

/* TrainingBatch.replica: the replica that builds this pipeline's batches —
 * the source's group_instance_id when set (non-empty), else $POD_NAME, else
 * the host name ("" when even that fails). */
void pr__replica_name(const pr_pipeline_cfg *pc, char *out, size_t n)
{
    const char *v = pc->source.kafka.group_instance_id;
    if (!v || !*v)
        v = getenv("POD_NAME");
    if (v && *v) {
        snprintf(out, n, "%s", v);
        return;
    }
    out[0] = 0;
    if (gethostname(out, n) != 0)
        out[0] = 0;
    out[n - 1] = 0;
}

/* source.decode_threads, 0 = auto: engine.threads, at most the CPUs; at
 * least 2 with several consumer instances, whose polling threads decode
 * their own messages only with a decode pool (decode_par.h): at
 * engine.threads 1 the pipeline thread decoded every message while K
 * polling threads sat mostly idle (16-core host: 1.2M rows/s against 2.4M
 * at 16 threads, bench/RESULTS.md). */
static unsigned pr__decode_threads(const pr_service *svc, const pr_pipeline_cfg *pc)
{
    if (pc->source.decode_threads)
        return pc->source.decode_threads;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned n = svc->cfg->engine.threads;
    if (ncpu > 0 && n > (unsigned)ncpu)
        n = (unsigned)ncpu;
    if (pc->source.consumers > 1 && n < 2)
        n = 2;
    return n ? n : 1;
}

/* The pipeline's Kafka consumer, wired to its rebalance callbacks. */
int pr__consumer_open(pr_service *svc, pr__pipe *p, char *errstr, size_t errstr_size)
{
    const pr_pipeline_cfg *pc = p->cfg;
    char e[1024] = "";
    pr_consumer_conf cc;
    memset(&cc, 0, sizeof(cc));
    cc.topics = (const char *const *)pc->source.kafka.topics;
    cc.n_topics = pc->source.kafka.n_topics;
    cc.group_id = pc->source.kafka.group_id;
    cc.props = pc->source.kafka.properties.items;
    cc.n_props = pc->source.kafka.properties.n;
    cc.format = pc->source.format;
    cc.spec = p->spec;
    cc.json = p->json;
    cc.dead_letter_topic = pc->source.dead_letter_topic;
    cc.dead_letter_file_max_bytes = pc->source.dead_letter_file_max_bytes;
    cc.on_offset_reset = pc->source.kafka.on_offset_reset;
    cc.group_instance_id = pr__instance_id(p, pc);
    if (pc->state.enabled && pc->state.dir) {
        snprintf(p->dead_letter_file, sizeof(p->dead_letter_file), "%s/%s.deadletters",
                 pc->state.dir, pc->name);
        cc.dead_letter_file = p->dead_letter_file;
        snprintf(p->member_file, sizeof(p->member_file), "%s/%s.member", pc->state.dir, pc->name);
        cc.member_file = p->member_file;
        snprintf(p->read_file, sizeof(p->read_file), "%s/%s.read", pc->state.dir, pc->name);
        cc.read_file = p->read_file;
    }
    if (!cc.dead_letter_topic && !cc.dead_letter_file)
        pr_warn("pipeline %s: no source.dead_letter_topic and no state.dir: rejected records "
                "will be counted and logged only, not kept; set source.dead_letter_topic, or "
                "state.dir for the dead-letter file <state.dir>/%s.deadletters",
                pc->name, pc->name);
    cc.clock = svc->clock;
    cc.decode_threads = pr__decode_threads(svc, pc);
    cc.features = pc->features.declared ? &pc->features : NULL;
    cc.source = &pc->source;
    cc.consumers = pc->source.consumers;
    cc.on_assign = pr__on_assign;
    cc.on_revoke = pr__on_revoke;
    cc.on_reject = pr__on_reject;
    cc.opaque = p;
    p->cons = pr_consumer_new(&cc, e, sizeof(e));
    if (!p->cons)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "pipelines[%s].source: %s", pc->name, e);
    return 0;
}
