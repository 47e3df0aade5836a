/*
 * compat_scenario.h — the scenario behind tests/vocab/fixtures/: state dirs
 * (snapshot + journal, or a tagged snapshot) written by a release, then
 * restored and run on, with every index and notice dumped as text.
 *
 * gen_fixtures.c (built against the release that wrote the fixtures, see
 * fixtures/README.md) runs the writing half and the restoring half with that
 * release's code; test_vocab_compat.c runs the restoring half with today's
 * and compares the dumps byte for byte. The API names differ between the
 * two (pr_engine_vocab_* then, pr_vocab_* now): the includer defines CS_*.
 * Header-only: deterministic blocks, the cases, the dump.
 */
#ifndef PR_COMPAT_SCENARIO_H
#define PR_COMPAT_SCENARIO_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_engine.h"

#define CS_ROWS     128
#define CS_BLOCKS_A 8 /* blocks the writer processes */
#define CS_CKPT_AT  3 /* the writer checkpoints after this block (journal cases) */
#define CS_BLOCKS_B 4 /* blocks processed after the restore */
#define CS_N_SPARSE 4
#define CS_TAG      "compat-tag:log-offset-1234"

typedef struct cs_case {
    const char *name;
    bool tagged; /* a tagged snapshot (a shared vocabulary's), no journal */
    void (*spec)(pr_pipeline_spec *s);
} cs_case;

static void cs_spec_base(pr_pipeline_spec *s)
{
    pr_pipeline_spec_default(s);
    snprintf(s->name, sizeof(s->name), "compat");
    s->has_label = false;
    s->n_dense = 0;
    s->n_dense_ops = 0;
    s->n_sparse = CS_N_SPARSE;
    for (int c = 0; c < CS_N_SPARSE; c++)
        s->sparse[c].modulus = 1000;
}

static void cs_spec_plain(pr_pipeline_spec *s)
{
    cs_spec_base(s); /* dlrm: snapshot v1, journal v1 */
}

static void cs_spec_min_count(pr_pipeline_spec *s)
{
    cs_spec_base(s);
    s->profile = PR_VOCAB_DEFAULT;
    for (int c = 0; c < CS_N_SPARSE; c++)
        s->sparse[c].min_count = 3; /* pending entries in the snapshot */
}

static void cs_spec_evict(pr_pipeline_spec *s)
{
    cs_spec_base(s); /* snapshot v3, journal v2 */
    s->profile = PR_VOCAB_DEFAULT;
    s->sparse[0].capacity = 100;
    s->sparse[0].eviction = PR_EVICT_LRU;
    s->sparse[1].capacity = 120;
    s->sparse[1].eviction = PR_EVICT_LFU;
    s->sparse[1].decay_records = 300;
    s->sparse[2].capacity = 140;
    s->sparse[2].eviction = PR_EVICT_TTL;
    s->sparse[2].ttl_records = 200;
}

static void cs_spec_event_ttl(pr_pipeline_spec *s)
{
    cs_spec_evict(s); /* snapshot v4, journal v3 */
    s->sparse[2].ttl_records = 0;
    s->sparse[2].ttl_s = 3;
}

static const cs_case cs_cases[] = {
    {"plain", false, cs_spec_plain},       {"min_count", false, cs_spec_min_count},
    {"evict", false, cs_spec_evict},       {"event_ttl", false, cs_spec_event_ttl},
    {"plain_tagged", true, cs_spec_plain}, {"evict_tagged", true, cs_spec_evict},
};
#define CS_N_CASES (sizeof(cs_cases) / sizeof(cs_cases[0]))

static inline uint64_t cs_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* Block k of the stream: skewed values (many repeats, a steady trickle of
 * new ones), ~3% missing, event times 40 ms apart. */
static void cs_fill_block(pr_block *b, unsigned k)
{
    pr_block_reset(b);
    uint64_t seed = 0x9E3779B97F4A7C15ULL ^ ((uint64_t)k * 0x100000001b3ULL);
    b->rows = CS_ROWS;
    for (uint32_t c = 0; c < CS_N_SPARSE; c++) {
        b->sparse_enc[c] = PR_SPARSE_U64;
        for (uint32_t r = 0; r < CS_ROWS; r++) {
            uint64_t a = cs_rand(&seed) % (200 + 60 * (uint64_t)k);
            uint64_t v = cs_rand(&seed) % (a + 1);
            b->sparse_u64[(size_t)c * b->cap + r] = v * 7 + c;
            if (cs_rand(&seed) % 32 == 0)
                pr_bit_set(b->sparse_missing, (size_t)c * pr_bitmap_words(b->cap) * 64 + r);
        }
    }
    for (uint32_t r = 0; r < CS_ROWS; r++) {
        b->partition[r] = 0;
        b->offset[r] = (int64_t)k * CS_ROWS + r;
        b->event_time_ms[r] = 1700000000000LL + ((int64_t)k * CS_ROWS + r) * 40;
    }
}

/* FNV-1a over a 64-bit value's bytes: the dumps print digests, not lists,
 * so the fixtures stay small; they still pin every index and notice. */
static inline uint64_t cs_fnv(uint64_t h, uint64_t v)
{
    for (unsigned i = 0; i < 8; i++) {
        h ^= v >> (8 * i) & 0xff;
        h *= 0x100000001b3ULL;
    }
    return h;
}
#define CS_FNV_INIT 0xcbf29ce484222325ULL

static void cs_dump_out(FILE *f, unsigned k, const pr_out *o)
{
    fprintf(f, "block %u rows %u rejected %u\n", k, o->rows, o->n_rejected);
    for (uint32_t c = 0; c < o->n_sparse; c++) {
        uint64_t h = CS_FNV_INIT;
        for (uint32_t r = 0; r < o->rows; r++)
            h = cs_fnv(h, (uint64_t)pr_out_index(o, c, r));
        fprintf(f, "  col %u indices %016" PRIx64 " first %" PRId64 " last %" PRId64 "\n", c, h,
                pr_out_index(o, c, 0), pr_out_index(o, c, o->rows - 1));
    }
    uint64_t h = CS_FNV_INIT;
    for (uint32_t i = 0; i < o->n_recycled; i++) {
        const pr_recycled *r = &o->recycled[i];
        h = cs_fnv(cs_fnv(cs_fnv(cs_fnv(h, r->col), r->row), (uint64_t)r->index), r->number);
    }
    fprintf(f, "  recycled %u %016" PRIx64, o->n_recycled, h);
    if (o->n_recycled)
        fprintf(f, " first col %u row %u index %" PRId64 " number %" PRIu64, o->recycled[0].col,
                o->recycled[0].row, o->recycled[0].index, o->recycled[0].number);
    fputc('\n', f);
}

typedef struct cs_vdigest {
    uint64_t h, n, pending;
} cs_vdigest;

static int cs_digest_entry(const pr_vocab_entry *e, void *opaque)
{
    cs_vdigest *d = opaque;
    d->h = cs_fnv(cs_fnv(cs_fnv(d->h, e->value), (uint64_t)e->index), e->count);
    d->h = cs_fnv(cs_fnv(d->h, e->last_use), (uint64_t)e->last_use_ms);
    d->n++;
    d->pending += e->index < 0;
    return 0;
}

static void cs_dump_vocab(FILE *f, const pr_engine *eng)
{
    for (uint32_t c = 0; c < CS_N_SPARSE; c++) {
        cs_vdigest d = {CS_FNV_INIT, 0, 0};
        pr_engine_vocab_read(eng, c, cs_digest_entry, &d);
        fprintf(f,
                "vocab col %u size %" PRIu64 " entries %" PRIu64 " pending %" PRIu64
                " digest %016" PRIx64 "\n",
                c, pr_engine_vocab_size(eng, c), d.n, d.pending, d.h);
    }
    fprintf(f, "recycled_total %" PRIu64 "\n", pr_engine_vocab_recycled_total(eng));
}

/* Process blocks [from, to) and dump each; 0 or the first failure. */
static int cs_run_blocks(pr_engine *eng, unsigned from, unsigned to, FILE *dump, bool deliver)
{
    pr_block *b = pr_block_new(0, CS_N_SPARSE, CS_ROWS, true);
    pr_out *o = pr_out_new(0, CS_N_SPARSE, CS_ROWS, pr_engine_sparse_width(eng));
    int rc = b && o ? 0 : PR_ENOMEM;
    char err[256];
    for (unsigned k = from; k < to && !rc; k++) {
        cs_fill_block(b, k);
        rc = pr_engine_process(eng, b, o, err, sizeof(err));
        if (rc)
            fprintf(stderr, "block %u: %s\n", k, err);
        else if (dump)
            cs_dump_out(dump, k, o);
        /* the writer acknowledges all but its last two notices */
        uint64_t total = pr_engine_vocab_recycled_total(eng);
        if (deliver && total > 2)
            pr_engine_vocab_notices_delivered(eng, total - 1);
    }
    pr_out_free(o);
    pr_block_free(b);
    return rc;
}

#endif
