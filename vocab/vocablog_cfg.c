/*
 * vocablog_cfg.c — the keys of a pipeline's `vocab_log` section (contract:
 * pr_vocab.h). The YAML loader applies files through this table and
 * docs/configuration.md is generated from it. Kept apart from vocablog.c so
 * the loader links the table without librdkafka code.
 */
#include "pr_vocab.h"

static const pr_cfgmap_entry vocablog_entries[] = {
    PR_CFG_E_STR("topic", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_vocablog_cfg, topic, NULL,
                 "Kafka topic of the shared vocabulary log: one partition, retention.ms=-1 and "
                 "retention.bytes=-1, cleanup.policy=delete. Replicas of a pipeline that name the "
                 "same topic share one vocabulary (docs/vocab-log.md)."),
    PR_CFG_E_KV("properties", pr_vocablog_cfg, properties,
                "librdkafka properties for the log's producer and reader. Without "
                "bootstrap.servers of their own the log is on the source's cluster and takes "
                "every source.kafka.properties key it does not set (brokers, TLS, SASL, ...)."),
    PR_CFG_E_INT("startup_timeout_ms", 0, pr_vocablog_cfg, startup_timeout_ms, 1000, 3600000,
                 "60000",
                 "How long a start waits for the log (metadata, watermarks, reading it to its "
                 "end) before it exits with the reason."),
    PR_CFG_E_INT("usage_interval_ms", 0, pr_vocablog_cfg, usage_interval_ms, 10, 3600000, "1000",
                 "Columns with eviction only: how often a replica appends the uses of values it "
                 "looked up (a Usage record) so that every replica's eviction statistics agree. "
                 "Shorter: evictions follow recent use more closely; longer: a smaller log."),
};
const pr_cfgmap pr_vocablog_cfgmap = PR_CFGMAP(vocablog_entries);
