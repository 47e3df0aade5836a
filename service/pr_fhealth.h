/*
 * pr_fhealth.h — feature health (service-private): per feature, how many
 * events lacked it; per vocabulary column, how many values were looked up
 * and how many got no index of their own (OOV). One snapshot type, filled
 * from the engine (pr_engine_missing, pr_engine_stats col_values/col_oov),
 * rendered the same way by `run` (per pipeline) and `serve`, so a dashboard
 * can set the serving traffic's shares beside the training stream's: a
 * feature missing far more often, or an OOV share far higher, in serving
 * than in training is skew the model pays for.
 *
 * Features are named as the batches name them: the Criteo layout's dense
 * names (I1..) then its sparse columns (C1..); a declared schema's features
 * in schema order (a feature without a path, schema.downsample's weight
 * label, is left out). Columns are the engine's vocabulary columns: a
 * declared schema's vocab features (a shared table by its name).
 */
#ifndef PR_FHEALTH_H
#define PR_FHEALTH_H

#include <stdint.h>

#include "pr_config.h"
#include "pr_engine.h"
#include "pr_mbuf.h"

typedef struct pr_fhealth {
    const pr_pipeline_cfg *pc;    /* borrowed: feature names */
    const pr_pipeline_spec *spec; /* borrowed: the engine's spec (columns) */
    uint64_t rows;                /* rows the engine processed and did not reject */
    uint32_t n_feat;
    uint64_t *missing; /* [n_feat] rows whose event lacked feature i */
    uint64_t lookups[PR_MAX_SPARSE], oov[PR_MAX_SPARSE];
} pr_fhealth;

/* Zeroed counts shaped for pipeline pc whose engine runs `spec`: 0 or
 * PR_ENOMEM. pr_fhealth_fini frees (a zeroed struct is fine). */
int pr_fhealth_init(pr_fhealth *h, const pr_pipeline_cfg *pc, const pr_pipeline_spec *spec);
void pr_fhealth_fini(pr_fhealth *h);

/* The engine's counts into h (replacing them); `base`, when not NULL (and
 * not h), added: the counts of engines this one replaced. Same threads as
 * pr_engine_get_stats. */
void pr_fhealth_read(pr_fhealth *h, const pr_engine *eng, const pr_fhealth *base);
/* Add the engine's counts to h's (a replaced engine's into a base). */
void pr_fhealth_add_engine(pr_fhealth *h, const pr_engine *eng);

/* Copy src's counts into dst (the same shape). */
void pr_fhealth_copy(pr_fhealth *dst, const pr_fhealth *src);

/* Prometheus samples of one family for pipeline `pipe` (the caller wrote
 * its header): which 0 = piperec_feature_missing_total{pipeline,feature},
 * 1 = piperec_vocab_lookups_total{pipeline,column}, 2 =
 * piperec_vocab_oov_total{pipeline,column}. Columns only with a vocab
 * operator. */
enum { PR_FHEALTH_MISSING = 0, PR_FHEALTH_LOOKUPS, PR_FHEALTH_OOV, PR_FHEALTH__COUNT };
void pr_fhealth_samples(pr_mbuf *mb, int which, const char *pipe, const pr_fhealth *h);
#define PR_FHEALTH_HELP_MISSING                                                                    \
    "Rows whose event lacked the feature (absent, null or an empty list; before any default)."
#define PR_FHEALTH_HELP_LOOKUPS                                                                    \
    "Values looked up in the column's vocabulary (missing values are not)."
#define PR_FHEALTH_HELP_OOV                                                                        \
    "Looked-up values answered without an index of their own (the OOV index: below min_count, "    \
    "a full table; unseen in serving; a shared log's undecided values)."
/* All three families, headers and samples, for pipeline `pipe` (a page
 * with no family table of its own: `serve`'s). */
void pr_fhealth_metrics(pr_mbuf *mb, const char *pipe, const pr_fhealth *h);

/* The /v1/status object: {"rows":N,"features":[{"name","missing","missing_share"}],
 * "columns":[{"name","lookups","oov","oov_share"}]} (shares null while
 * their denominator is 0). */
void pr_fhealth_json(pr_mbuf *mb, const pr_fhealth *h);

#endif
