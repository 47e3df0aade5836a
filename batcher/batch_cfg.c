/*
 * batch_cfg.c — the `batch` keys of a pipeline: names, ranges, defaults and
 * docs in one table (pr_batch_cfgmap, contract: pr_batcher.h).
 *
 * The YAML loader (config/) applies files through this table and
 * docs/configuration.md is generated from it, so a default changed here is
 * changed everywhere. Kept apart from batcher.c so that the loader links the
 * table without the batcher itself.
 */
#include "pr_batcher.h"

const char *const pr_batch_ordering_names[] = {"partition", "event_time", NULL};
const char *const pr_batch_late_policy_names[] = {"emit", "drop_to_dlq", NULL};
const char *const pr_batch_split_names[] = {"none", "popular", NULL};

static const pr_cfgmap_entry batch_entries[] = {
    PR_CFG_E_INT("size", 0, pr_batch_cfg, size, 1, 1048576, "4096", "Rows per batch (1..1048576)."),
    PR_CFG_E_INT("max_delay_ms", 0, pr_batch_cfg, max_delay_ms, 0, INT32_MAX, "100",
                 "Freshness bound: a batch is emitted when full or when its oldest record has "
                 "waited this long (0 = no waiting)."),
    PR_CFG_E_ENUM("ordering", pr_batch_cfg, ordering, pr_batch_ordering_names, "partition",
                  "partition: records keep offset order within a partition; event_time: "
                  "partitions are merged by watermark."),
    PR_CFG_E_INT("allowed_lateness_ms", 0, pr_batch_cfg, allowed_lateness_ms, 0, INT32_MAX, "1000",
                 "event_time only: how far behind the watermark a record may arrive before it is "
                 "late."),
    PR_CFG_E_ENUM("late_policy", pr_batch_cfg, late_policy, pr_batch_late_policy_names, "emit",
                  "event_time only: emit (late records go into the next batch) or drop_to_dlq "
                  "(sent to source.dead_letter_topic)."),
    PR_CFG_E_ENUM("split", pr_batch_cfg, split, pr_batch_split_names, "none",
                  "popular: rows whose sparse indices all lie in the current hot sets (top "
                  "hot.top_k per column, which must be > 0; a declared schema: every element "
                  "of every vocab feature) go into batches of their own, flagged "
                  "TrainingBatch.popular (Hotline); none: one stream."),
    PR_CFG_E_INT("popular_min_rows", 0, pr_batch_cfg, popular_min_rows, 0, 1048576, "0",
                 "split popular: the smallest popular batch (0..size; 0 = no minimum). A popular "
                 "batch still smaller at its max_delay_ms deadline is not sent alone: its rows "
                 "join the regular stream, merged in arrival order."),
    PR_CFG_E_INT("reannounce_max", 0, pr_batch_cfg, reannounce_max, 1, 1048576, "1024",
                 "After a restart: the most restored recycled-index notices (not acknowledged "
                 "before it) a batch carries at row 0, so a backlog goes out spread over batches; "
                 "a notice whose index a row uses goes in front of that row regardless, so a "
                 "batch carries at most this + rows x sparse columns."),
};

const pr_cfgmap pr_batch_cfgmap = PR_CFGMAP(batch_entries);
