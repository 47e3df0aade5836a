/*
 * sink_cfg.c — the keys of every sink's `sinks.<name>` section: names,
 * ranges, defaults and docs, one table per sink (contract: pr_sink.h).
 *
 * The YAML loader (config/) applies files through these tables, the sinks
 * fill zero fields from them, and docs/configuration.md is generated from
 * them, so a default lives here and nowhere else. Kept apart from the sinks
 * so that the loader links the tables without librdkafka's producer code.
 */
#include "pr_sink.h"

#include <stddef.h>

#define PR__SINK_OFF_DOC "Set false to keep the section but switch the sink off."

static const pr_cfgmap_entry trainer_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_trainer_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_HOSTPORT("listen", pr_trainer_sink_cfg, listen, "127.0.0.1:7070",
                      "Address trainers connect to (host:port; port 0 = any free port)."),
    PR_CFG_E_INT("max_unacked_batches", 0, pr_trainer_sink_cfg, max_unacked_batches, 1, 65536, "64",
                 "Credit window: batches sent to a trainer and not yet acknowledged."),
    PR_CFG_E_INT("ack_timeout_ms", 0, pr_trainer_sink_cfg, ack_timeout_ms, 1, INT32_MAX, "30000",
                 "A trainer silent this long with batches outstanding is dropped and its batches "
                 "are re-sent to another trainer."),
    PR_CFG_E_INT("keepalive_ms", PR_CFG_INTERNAL, pr_trainer_sink_cfg, keepalive_ms, 1, INT32_MAX,
                 "10000", "Interval of the server's Ping frames."),
};
const pr_cfgmap pr_sink_trainer_cfgmap = PR_CFGMAP(trainer_entries);

static const pr_cfgmap_entry kafka_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_kafka_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_STR("topic", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_kafka_sink_cfg, topic, NULL,
                 "Topic receiving piperec.Batch messages."),
    PR_CFG_E_KV("properties", pr_kafka_sink_cfg, properties,
                "librdkafka producer properties, passed through; bootstrap.servers defaults to "
                "the source's."),
    PR_CFG_E_INT("max_queued_batches", PR_CFG_INTERNAL, pr_kafka_sink_cfg, max_queued_batches, 1, 0,
                 "10000", "Batches accepted and not yet delivered before send() refuses."),
};
const pr_cfgmap pr_sink_kafka_cfgmap = PR_CFGMAP(kafka_entries);

static const pr_cfgmap_entry files_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_files_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_STR("dir", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_files_sink_cfg, dir, NULL,
                 "Directory for .npy batch files (created if missing)."),
    PR_CFG_E_INT("roll_batches", 0, pr_files_sink_cfg, roll_batches, 1, UINT32_MAX, "100",
                 "Batches written per file set before a new one is started."),
    PR_CFG_E_INT("roll_max_ms", PR_CFG_INTERNAL, pr_files_sink_cfg, roll_max_ms, 1, INT32_MAX,
                 "1000", "A roll this old is closed at the next poll."),
};
const pr_cfgmap pr_sink_files_cfgmap = PR_CFGMAP(files_entries);
