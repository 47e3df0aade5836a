/*
 * engine_int.h — internals shared by the engine core (engine.c), the backend
 * registry (backends.c) and the backends. Not part of the public contract.
 *
 * Kept small on purpose: spec helpers every backend needs (base index of a
 * profile, output width), aligned zeroed allocation for block-sized arrays,
 * the backend registry lookup, and a persistent worker pool (pool.c) that the
 * cpu backend uses to spread columns over threads.
 */
#ifndef PR_ENGINE_INT_H
#define PR_ENGINE_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "pr_backend.h"

/* First index handed to a value: 0 under dlrm, 2 under default. */
static inline int64_t pr__profile_base(pr_vocab_profile p)
{
    return p == PR_VOCAB_DEFAULT ? 2 : 0;
}

/* Output width (4 or 8 bytes per sparse index) for a validated spec. */
uint8_t pr__spec_sparse_width(const pr_pipeline_spec *spec);

/* Fingerprint of everything in a spec that gives vocabulary indices their
 * meaning (sparse ops, profile, count mode, per-column modulus, min_count,
 * capacity, and when a column evicts its eviction, ttl_records, ttl_s and
 * decay_records). Snapshots and journals carry it. */
uint64_t pr__spec_fingerprint(const pr_pipeline_spec *spec);

/* Does some column evict by event time (eviction ttl with ttl_s)? (Any
 * eviction: pr_spec_has_eviction, pr_engine.h.) */
bool pr__spec_has_event_ttl(const pr_pipeline_spec *spec);

/* Append a notice to out->recycled, growing it. PR_ENOMEM. */
int pr__out_recycled_push(pr_out *o, const pr_recycled *r);

/* 64-byte aligned, zeroed memory. Large requests come straight from fresh
 * pages (calloc), so untouched parts cost no resident memory. */
void *pr__zalloc_aligned(size_t size);
void pr__free_aligned(void *p);

/* Zeroed memory for a table that is read before it is written, from several
 * threads (the direct vocabulary maps). huge: 2 MiB aligned, asking for
 * transparent huge pages (pr_engine_opts.huge_tables says when and why);
 * tables under 1 MiB, or !huge, come from pr__zalloc_aligned. Free with the
 * same size and huge. NULL when out of memory. */
void *pr__table_alloc(size_t size, bool huge);
void pr__table_free(void *p, size_t size, bool huge);

/* Backend registry (backends.c). Returns NULL for an unknown name. */
const pr_backend_ops *pr__backend_lookup(const char *name);

/* ---------------------------------------------------------------- pool.c */

/* A persistent pool: `threads` workers in all, the calling thread being one of
 * them. pr__pool_run hands out tasks 0..n-1 in increasing order through an
 * atomic counter (so give the most expensive tasks the lowest numbers) and
 * returns when every task has finished. `worker` (0..threads-1) identifies the
 * thread running a task, for per-worker scratch and stats. Runs of more than
 * PR__POOL_MAX_TASKS tasks are run serially by the caller. Workers spin
 * briefly between runs, then sleep (pool.c). */
#define PR__POOL_MAX_TASKS 0xffff
typedef struct pr__pool pr__pool;
typedef void (*pr__task_fn)(void *ctx, uint32_t task, int worker);

pr__pool *pr__pool_new(int threads);
void pr__pool_run(pr__pool *p, uint32_t n_tasks, pr__task_fn fn, void *ctx);
int pr__pool_threads(const pr__pool *p);
void pr__pool_free(pr__pool *p);

#endif
