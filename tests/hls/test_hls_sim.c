/*
 * test_hls_sim.c — the HLS kernel in C simulation (backend "hls-sim") against
 * the cpu backend, bit for bit, on Piper's three pipelines (P-I stateless,
 * P-II modulus 8192 + vocab on-chip, P-III modulus 524288 + vocab in HBM),
 * both vocabulary profiles, streaming and two-pass min_count, blocks bigger
 * than one kernel call, the Criteo sample, snapshots through the kernel's
 * READ/LOAD modes, the spec limits of the device, and the xrt backend without
 * a device (PR_ENODEV, `auto` falls back to cpu).
 *
 * Every comparison runs the same blocks through a cpu engine and an hls-sim
 * engine and compares all outputs and the full vocabulary (vocab_read).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine_int.h"
#include "pr_ingest.h"
#include "pr_engine.h"
#include "pr_kernel.h"
#include "pr_log.h"
#include "pr_vocab.h"

/* ------------------------------------------------------------ data */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

typedef struct gen_opts {
    uint64_t pool;   /* distinct sparse values drawn from (skewed) */
    int bad_per_mil; /* rows with a non-hex character somewhere */
    int miss_pct;    /* missing fields */
    int u64_cols;    /* the last u64_cols sparse columns hold u64 values */
} gen_opts;

/* Fill `b` with `rows` rows. Sparse values are big 64-bit numbers from a
 * skewed pool so that Modulus folds several onto one key. */
static void gen_block(pr_block *b, uint32_t rows, uint64_t *seed, const gen_opts *g)
{
    static const char hexd[] = "0123456789abcdef0123456789ABCDEF";
    pr_block_reset(b);
    for (uint32_t r = 0; r < rows; r++) {
        b->labels[r] = (int32_t)(rnd(seed) & 1);
        for (uint32_t d = 0; d < b->n_dense; d++) {
            uint64_t x = rnd(seed);
            double v;
            switch (x % 5) {
            case 0:
                v = -(double)(x >> 40 & 255);
                break; /* negatives */
            case 1:
                v = (double)(x >> 20 & 4095);
                break; /* small ints (table path) */
            case 2:
                v = (double)(x >> 8 & 0xffffff) / 7.0;
                break; /* fractions */
            case 3:
                v = (double)(x >> 3 & 0xfffffffff);
                break; /* large */
            default:
                v = (double)(x >> 50);
                break;
            }
            b->dense[(size_t)d * b->cap + r] = v;
            if ((int)(rnd(seed) % 100) < g->miss_pct)
                pr_bit_set(b->dense_missing + d * pr_bitmap_words(b->cap), r);
        }
        bool bad = (int)(rnd(seed) % 1000) < g->bad_per_mil;
        uint32_t bad_col = (uint32_t)(rnd(seed) % b->n_sparse);
        for (uint32_t c = 0; c < b->n_sparse; c++) {
            uint64_t u = rnd(seed);
            uint64_t k = (u % g->pool) * (u % 3 ? 1 : (u >> 32) % 7 + 1) % g->pool; /* skew */
            uint64_t v = k * 0x9E3779B97F4A7C15ull ^ (k << 7);
            bool u64col = (int)c >= (int)b->n_sparse - g->u64_cols;
            if ((int)(rnd(seed) % 100) < g->miss_pct) {
                pr_block_put_hex(b, c, r, "", 0);
                continue;
            }
            if (u64col) {
                b->sparse_enc[c] = PR_SPARSE_U64;
                b->sparse_u64[(size_t)c * b->cap + r] = v;
                continue;
            }
            char s[17];
            int len = 1 + (int)(v % 16);
            uint64_t x = len == 16 ? v : v & ((1ull << (4 * len)) - 1);
            for (int i = len - 1; i >= 0; i--, x >>= 4)
                s[i] = hexd[(x & 15) + (u >> 60 & 1) * 16]; /* mixed case */
            if (bad && c == bad_col)
                s[rnd(seed) % (uint64_t)len] = "gz -x"[rnd(seed) % 5];
            pr_block_put_hex(b, c, r, s, (size_t)len);
        }
    }
    b->rows = rows;
}

/* ------------------------------------------------------------ comparison */

typedef struct vlist {
    pr_vocab_entry *e;
    size_t n, cap;
} vlist;

static int vl_cb(const pr_vocab_entry *e, void *opaque)
{
    vlist *l = opaque;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 256;
        l->e = realloc(l->e, l->cap * sizeof(*l->e));
    }
    l->e[l->n++] = *e;
    return 0;
}

static void assert_same_vocab(const pr_engine *a, const pr_engine *b)
{
    const pr_pipeline_spec *s = pr_engine_spec(a);
    for (uint32_t c = 0; c < s->n_sparse; c++) {
        assert_int_equal(pr_engine_vocab_size(a, c), pr_engine_vocab_size(b, c));
        vlist x = {0}, y = {0};
        assert_int_equal(pr_engine_vocab_read(a, c, vl_cb, &x), 0);
        assert_int_equal(pr_engine_vocab_read(b, c, vl_cb, &y), 0);
        assert_int_equal(x.n, y.n);
        for (size_t i = 0; i < x.n; i++) {
            assert_int_equal(x.e[i].value, y.e[i].value);
            assert_int_equal(x.e[i].index, y.e[i].index);
            assert_int_equal(x.e[i].count, y.e[i].count);
        }
        free(x.e);
        free(y.e);
    }
}

static void assert_same_out(const pr_out *a, const pr_out *b)
{
    assert_int_equal(a->rows, b->rows);
    assert_int_equal(a->n_rejected, b->n_rejected);
    uint32_t rows = a->rows;
    assert_memory_equal(a->labels, b->labels, rows * sizeof(int32_t));
    for (uint32_t d = 0; d < a->n_dense; d++) /* bit-exact floats */
        assert_memory_equal(a->dense + (size_t)d * a->cap, b->dense + (size_t)d * b->cap,
                            rows * sizeof(float));
    for (uint32_t c = 0; c < a->n_sparse; c++)
        for (uint32_t r = 0; r < rows; r++)
            if (pr_out_index(a, c, r) != pr_out_index(b, c, r))
                fail_msg("sparse col %u row %u: cpu %lld hls-sim %lld", c, r,
                         (long long)pr_out_index(a, c, r), (long long)pr_out_index(b, c, r));
    assert_memory_equal(a->rejected, b->rejected, pr_bitmap_words(rows) * sizeof(uint64_t));
    for (uint32_t r = 0; r < rows; r++) {
        assert_int_equal(a->reject_reason[r], b->reject_reason[r]);
        if (pr_bit_test(a->rejected, r))
            assert_int_equal(a->reject_col[r], b->reject_col[r]);
    }
}

static pr_engine *mk(const pr_pipeline_spec *s, const char *backend)
{
    char err[512] = "";
    pr_engine_opts o = {.backend = backend, .threads = 2};
    pr_engine *e = pr_engine_new(s, &o, err, sizeof(err));
    if (!e)
        fail_msg("%s: %s", backend, err);
    assert_string_equal(pr_engine_backend_name(e), backend);
    return e;
}

/* Run n_blocks generated blocks through cpu and hls-sim; compare each output
 * and the vocabularies after each block. Returns the two engines through
 * through pc and ph when asked (else frees them). */
static uint64_t g_rejected; /* rows rejected in compared blocks, so tests see the path ran */

static int compare_stream(const pr_pipeline_spec *s, int n_blocks, uint32_t rows, gen_opts g,
                          uint64_t seed, pr_engine **pc, pr_engine **ph)
{
    int rc = 0;
    pr_engine *cpu = mk(s, "cpu"), *hls = mk(s, "hls-sim");
    pr_block **blk = calloc((size_t)n_blocks, sizeof(*blk));
    for (int i = 0; i < n_blocks; i++) {
        blk[i] = pr_block_new(s->n_dense, s->n_sparse, rows, false);
        gen_block(blk[i], rows - (uint32_t)i * 13 % (rows / 2 + 1), &seed, &g);
    }
    if (s->count_mode == PR_COUNT_TWO_PASS) {
        for (int i = 0; i < n_blocks; i++) {
            assert_int_equal(pr_engine_count(cpu, blk[i]), 0);
            assert_int_equal(pr_engine_count(hls, blk[i]), 0);
        }
        assert_int_equal(pr_engine_count_done(cpu), 0);
        assert_int_equal(pr_engine_count_done(hls), 0);
    }
    uint8_t w = pr_engine_sparse_width(cpu);
    assert_int_equal(w, pr_engine_sparse_width(hls));
    pr_out *oc = pr_out_new(s->n_dense, s->n_sparse, rows, w);
    pr_out *oh = pr_out_new(s->n_dense, s->n_sparse, rows, w);
    for (int i = 0; i < n_blocks; i++) {
        char e1[512] = "", e2[512] = "";
        int r1 = pr_engine_process(cpu, blk[i], oc, e1, sizeof(e1));
        int r2 = pr_engine_process(hls, blk[i], oh, e2, sizeof(e2));
        assert_int_equal(r1, r2);
        assert_same_out(oc, oh);
        assert_same_vocab(cpu, hls);
        g_rejected += oh->n_rejected;
        if ((rc = r1))
            break;
    }
    pr_out_free(oc);
    pr_out_free(oh);
    for (int i = 0; i < n_blocks; i++)
        pr_block_free(blk[i]);
    free(blk);
    if (pc && ph) {
        *pc = cpu;
        *ph = hls;
    } else {
        pr_engine_free(cpu);
        pr_engine_free(hls);
    }
    return rc;
}

static void spec_of(pr_pipeline_spec *s, uint16_t nd, uint16_t ns, bool vocab, uint64_t mod,
                    pr_vocab_profile prof)
{
    pr_pipeline_spec_default(s);
    s->n_dense = nd;
    s->n_sparse = ns;
    s->profile = prof;
    s->n_sparse_ops = vocab ? 3 : 2;
    for (uint32_t c = 0; c < ns; c++)
        s->sparse[c].modulus = mod;
}

static const gen_opts G = {.pool = 20000, .bad_per_mil = 20, .miss_pct = 8, .u64_cols = 0};

/* ------------------------------------------------------------ tests */

/* P-I: neg2zero, log1p, hex2int, modulus (a non power of two, a power of two). */
static void test_p1_equal(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 13, 26, false, 1000003, PR_VOCAB_DLRM);
    s.sparse[3].modulus = 1ull << 20;
    s.sparse[4].modulus = (1ull << 40) + 7; /* int64 output */
    g_rejected = 0;
    assert_int_equal(compare_stream(&s, 3, 2048, G, 11, NULL, NULL), 0);
    assert_true(g_rejected > 0);
    /* dense without neg2zero: log1p of negatives, NaN included */
    s.n_dense_ops = 1;
    s.dense_ops[0] = PR_OP_LOG1P;
    compare_stream(&s, 2, 1000, G, 12, NULL, NULL);
    s.n_dense_ops = 0;
    compare_stream(&s, 1, 1000, G, 13, NULL, NULL);
}

/* P-II: modulus 8192 + vocab (on-chip tables), both profiles; u64 columns. */
static void test_p2_equal(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        pr_pipeline_spec s;
        spec_of(&s, 13, 26, true, 8192, (pr_vocab_profile)p);
        gen_opts g = G;
        g.u64_cols = 3;
        compare_stream(&s, 4, 3000, g, 21 + (uint64_t)p, NULL, NULL);
    }
}

/* P-III: modulus 524288 + vocab (HBM tables), both profiles. */
static void test_p3_equal(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        pr_pipeline_spec s;
        spec_of(&s, 4, 26, true, 524288, (pr_vocab_profile)p);
        gen_opts g = G;
        g.pool = 400000;
        compare_stream(&s, 3, 4096, g, 31 + (uint64_t)p, NULL, NULL);
    }
}

/* More sparse columns than vocabulary lanes: lane l owns columns l, l+L,
 * l+2L; its on-chip bank fills up (two 40000-entry tables do not fit in one
 * 65536-entry bank, so the second goes to the lane's HBM table) and the
 * lanes' HBM tables hold several columns each. Bad hex rows are spread over
 * all columns, so a row rejected by a column of one lane must leave every
 * other lane's tables alone. */
static void test_lanes_shared(void **state)
{
    (void)state;
    for (int p = 0; p < 2; p++) {
        pr_pipeline_spec s;
        uint16_t ns =
            2 * PR_K_VOCAB_LANES + 8 < PR_MAX_SPARSE ? 2 * PR_K_VOCAB_LANES + 8 : PR_MAX_SPARSE;
        spec_of(&s, 2, ns, true, 40000, (pr_vocab_profile)p);
        for (uint32_t c = 0; c < ns; c++)
            s.sparse[c].modulus = c % 2 ? 100003 : c % 5 == 1 ? 300 : 40000;
        if (p == PR_VOCAB_DEFAULT)
            s.sparse[3].min_count = 3;
        gen_opts g = G;
        g.u64_cols = 2;
        g.bad_per_mil = 60;
        uint64_t before = g_rejected;
        compare_stream(&s, 3, 2048, g, 41 + (uint64_t)p, NULL, NULL);
        assert_true(g_rejected > before);
    }
}

/* A column's vocabulary lane has one HBM pseudo-channel (512 MiB): two
 * 2^26-entry columns in the same lane do not fit; the reason names it. */
static void test_lane_hbm_limit(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512] = "";
    pr_engine_opts o = {.backend = "hls-sim"};
    spec_of(&s, 0, PR_K_VOCAB_LANES + 1, true, 8, PR_VOCAB_DLRM);
    s.sparse[0].modulus = s.sparse[PR_K_VOCAB_LANES].modulus = 1ull << 26;
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "lane 0"));
    assert_non_null(strstr(err, "pseudo-channel"));
}

/* A value first seen in block k keeps its index in block k+1 (checked on the
 * hls-sim engine directly, not only through equality with cpu). */
static void test_index_stable_across_blocks(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 0, 2, true, 8192, PR_VOCAB_DEFAULT);
    pr_engine *e = mk(&s, "hls-sim");
    pr_block *b = pr_block_new(0, 2, 64, false);
    pr_out *o = pr_out_new(0, 2, 64, pr_engine_sparse_width(e));
    char err[256];
    const char *v1[] = {"a1", "ff", "a1", "1b"};
    for (int i = 0; i < 4; i++) {
        pr_block_put_hex(b, 0, (uint32_t)i, v1[i], strlen(v1[i]));
        pr_block_put_hex(b, 1, (uint32_t)i, "", 0);
    }
    b->rows = 4;
    assert_int_equal(pr_engine_process(e, b, o, err, sizeof(err)), 0);
    assert_int_equal(pr_out_index(o, 0, 0), 2);
    assert_int_equal(pr_out_index(o, 0, 1), 3);
    assert_int_equal(pr_out_index(o, 0, 2), 2);
    assert_int_equal(pr_out_index(o, 0, 3), 4);
    assert_int_equal(pr_out_index(o, 1, 0), PR_INDEX_MISSING);
    pr_block_reset(b);
    const char *v2[] = {"1B", "new", "FF", "a1"};
    for (int i = 0; i < 4; i++) {
        pr_block_put_hex(b, 0, (uint32_t)i, v2[i], strlen(v2[i]));
        pr_block_put_hex(b, 1, (uint32_t)i, "7", 1);
    }
    b->rows = 4;
    assert_int_equal(pr_engine_process(e, b, o, err, sizeof(err)), 0);
    assert_int_equal(pr_out_index(o, 0, 0), 4);          /* 0x1b from block 0 */
    assert_int_equal(pr_bit_test(o->rejected, 1), true); /* "new" is not hex */
    assert_int_equal(o->reject_col[1], 0);
    assert_int_equal(pr_out_index(o, 0, 2), 3);
    assert_int_equal(pr_out_index(o, 0, 3), 2);
    assert_int_equal(pr_engine_vocab_size(e, 0), 5);
    assert_int_equal(pr_engine_vocab_size(e, 1), 3); /* "7" once; row 1 rejected */
    pr_out_free(o);
    pr_block_free(b);
    pr_engine_free(e);
}

/* Streaming min_count and a small capacity (OOV when full), default profile,
 * on-chip and HBM; pending entries (counted, no index yet) compared too. */
static void test_min_count_streaming(void **state)
{
    (void)state;
    uint64_t mods[2] = {8192, 524288};
    for (int m = 0; m < 2; m++) {
        pr_pipeline_spec s;
        spec_of(&s, 2, 6, true, mods[m], PR_VOCAB_DEFAULT);
        for (int c = 0; c < 6; c++)
            s.sparse[c].min_count = (uint32_t)(1 + c % 3);
        s.sparse[5].capacity = 500;
        gen_opts g = G;
        g.pool = 3000;
        compare_stream(&s, 4, 2000, g, 41 + (uint64_t)m, NULL, NULL);
    }
}

/* Two-pass min_count: count every block, then process them. */
static void test_min_count_two_pass(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 2, 5, true, 8192, PR_VOCAB_DEFAULT);
    s.count_mode = PR_COUNT_TWO_PASS;
    for (int c = 0; c < 5; c++)
        s.sparse[c].min_count = 1 + (uint32_t)c; /* column 0 does not count */
    s.sparse[4].modulus = 524288;
    gen_opts g = G;
    g.pool = 4000;
    compare_stream(&s, 3, 2500, g, 51, NULL, NULL);
}

/* dlrm: a full vocabulary is an error (PR_EFULL) at the same row, with the
 * same outputs and state as the cpu backend. */
static void test_dlrm_full(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 1, 4, true, 8192, PR_VOCAB_DLRM);
    s.sparse[2].capacity = 700;
    gen_opts g = G;
    g.pool = 5000;
    assert_int_equal(compare_stream(&s, 2, 3000, g, 61, NULL, NULL), PR_EFULL);
}

/* Blocks larger than one kernel call (65536 rows) are split into calls and
 * double buffered; results must not notice. */
static void test_big_block(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 2, 3, true, 524288, PR_VOCAB_DLRM);
    gen_opts g = G;
    g.pool = 300000;
    compare_stream(&s, 2, PR_K_MAX_ROWS * 2 + 1000, g, 71, NULL, NULL);
}

/* Criteo sample (tests/data/criteo_sample_100.tsv) decoded with the ingest
 * decoder, both profiles, P-II and P-III moduli. */
static void reject_cb(void *opaque, int reason, const char *detail, const char *rec, size_t len,
                      int64_t recno)
{
    (void)reason, (void)detail, (void)rec, (void)len, (void)recno;
    (*(int *)opaque)++;
}

static void test_criteo_sample(void **state)
{
    (void)state;
    FILE *f = fopen(PR_TEST_DATA "/criteo_sample_100.tsv", "r");
    assert_non_null(f);
    uint64_t mods[2] = {8192, 524288};
    for (int p = 0; p < 2; p++) {
        for (int m = 0; m < 2; m++) {
            pr_pipeline_spec s;
            spec_of(&s, 13, 26, true, mods[m], (pr_vocab_profile)p);
            pr_engine *cpu = mk(&s, "cpu"), *hls = mk(&s, "hls-sim");
            pr_block *b = pr_block_new(13, 26, 64, false);
            pr_out *oc = pr_out_new(13, 26, 64, pr_engine_sparse_width(cpu));
            pr_out *oh = pr_out_new(13, 26, 64, pr_engine_sparse_width(cpu));
            int rejects = 0;
            pr_decode_ctx ctx = {.spec = &s, .on_reject = reject_cb, .opaque = &rejects};
            char line[8192];
            int64_t n = 0, blocks = 0;
            rewind(f);
            for (;;) { /* blocks of <= 64 rows: 100 lines span two blocks */
                char *l = fgets(line, sizeof(line), f);
                if (l) {
                    size_t len = strcspn(line, "\n");
                    assert_int_equal(pr_decode_criteo_line(&ctx, b, line, len, ++n), 1);
                }
                if (b->rows == b->cap || (!l && b->rows)) {
                    char e1[256], e2[256];
                    assert_int_equal(pr_engine_process(cpu, b, oc, e1, sizeof(e1)), 0);
                    assert_int_equal(pr_engine_process(hls, b, oh, e2, sizeof(e2)), 0);
                    assert_same_out(oc, oh);
                    pr_block_reset(b);
                    blocks++;
                }
                if (!l)
                    break;
            }
            assert_int_equal(n, 100);
            assert_int_equal(blocks, 2);
            assert_int_equal(rejects, 0);
            assert_same_vocab(cpu, hls);
            assert_true(pr_engine_vocab_size(hls, 0) > 1);
            pr_out_free(oc);
            pr_out_free(oh);
            pr_block_free(b);
            pr_engine_free(cpu);
            pr_engine_free(hls);
        }
    }
    fclose(f);
}

/* Snapshot through the kernel's READ mode, restore into a fresh hls-sim
 * engine through LOAD, continue: same as the cpu engine that never stopped.
 * The snapshot also loads into a cpu engine (one file format). */
static void test_snapshot_roundtrip(void **state)
{
    (void)state;
    for (int m = 0; m < 2; m++) {
        pr_pipeline_spec s;
        spec_of(&s, 2, 4, true, m ? 524288 : 8192, PR_VOCAB_DEFAULT);
        s.sparse[1].min_count = 3; /* pending entries cross the snapshot too */
        pr_engine *cpu, *hls;
        gen_opts g = G;
        g.pool = 3000;
        compare_stream(&s, 2, 1500, g, 81 + (uint64_t)m, &cpu, &hls);
        char path[] = "/tmp/pr_hls_snapXXXXXX";
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        close(fd);
        char err[512];
        assert_int_equal(pr_vocab_save(hls, path, err, sizeof(err)), 0);
        pr_engine *h2 = mk(&s, "hls-sim"), *c2 = mk(&s, "cpu");
        assert_int_equal(pr_vocab_load(h2, path, err, sizeof(err)), 0);
        assert_int_equal(pr_vocab_load(c2, path, err, sizeof(err)), 0);
        assert_same_vocab(hls, h2);
        assert_same_vocab(cpu, c2);
        /* continue all four on the same new block */
        uint64_t seed = 99;
        pr_block *b = pr_block_new(2, 4, 1500, false);
        gen_block(b, 1500, &seed, &g);
        pr_engine *es[4] = {cpu, hls, h2, c2};
        pr_out *o[4];
        for (int i = 0; i < 4; i++) {
            o[i] = pr_out_new(2, 4, 1500, pr_engine_sparse_width(cpu));
            assert_int_equal(pr_engine_process(es[i], b, o[i], err, sizeof(err)), 0);
        }
        for (int i = 1; i < 4; i++) {
            assert_same_out(o[0], o[i]);
            assert_same_vocab(es[0], es[i]);
        }
        for (int i = 0; i < 4; i++) {
            pr_out_free(o[i]);
            pr_engine_free(es[i]);
        }
        pr_block_free(b);
        unlink(path);
    }
}

/* The device's limits are refused at create time with a reason. */
static void test_limits(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    char err[512] = "";
    pr_engine_opts o = {.backend = "hls-sim"};
    const pr_backend_ops *ops = pr__backend_lookup("hls-sim");
    pr_backend *be = NULL;

    spec_of(&s, 1, 2, true, 1ull << 27, PR_VOCAB_DLRM);
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "2^26"));
    assert_int_equal(ops->new_(&s, &o, &be, err, sizeof(err)), PR_ENOTSUP);

    spec_of(&s, 1, 2, true, 8192, PR_VOCAB_DLRM);
    s.n_sparse_ops = 2;
    s.sparse_ops[0] = PR_OP_HEX2INT;
    s.sparse_ops[1] = PR_OP_VOCAB; /* no modulus: unbounded domain */
    err[0] = 0;
    assert_int_equal(ops->new_(&s, &o, &be, err, sizeof(err)), PR_ENOTSUP);
    assert_non_null(strstr(err, "modulus"));
    assert_null(be);

    /* Stateless without modulus is fine on the device. */
    s.n_sparse_ops = 1;
    pr_engine *e = pr_engine_new(&s, &o, err, sizeof(err));
    assert_non_null(e);
    pr_engine_free(e);
}

/* The kernel itself refuses a bad config or an out-of-range state access. */
static void test_kernel_badarg(void **state)
{
    (void)state;
    pr_ksim_dev *dev = calloc(1, sizeof(*dev));
    pr_kw *cfg = calloc(4, sizeof(pr_kw)), *out = calloc(8, sizeof(pr_kw));
    pr_kw *xfer = calloc(1, sizeof(pr_kw));
    uint64_t tab[8] = {0}, newv[8] = {0};
#define TAB_ARG(l) , tab
    pr_kernel(cfg, out, cfg, newv, xfer, PR_KMODE_PROCESS, 0, 0, 0, 0 PR_K_LANES(TAB_ARG), dev);
    assert_int_equal(out[0].l[0], PR_KST_BADARG); /* no magic */
    cfg[0].l[PR_KCFG_MAGIC] = PR_K_CFG_MAGIC;
    cfg[0].l[PR_KCFG_SHAPE] = 1u << 16; /* one sparse column */
    cfg[0].l[PR_KCFG_SPARSE_OPS] = PR_KOP_MODULUS | PR_KOP_VOCAB;
    cfg[0].l[PR_KCFG_WIDTH] = 4;
    cfg[1].l[PR_KCOL_MODULUS] = cfg[1].l[PR_KCOL_DOMAIN] = 16;
    cfg[1].l[PR_KCOL_MEM] = PR_KMEM_ONCHIP;
    cfg[1].l[PR_KCOL_CAPACITY] = 16;
    cfg[1].l[PR_KCOL_MIN_COUNT] = 1;
    pr_kernel(cfg, out, cfg, newv, xfer, PR_KMODE_READ, 0, 0, 8, 9 PR_K_LANES(TAB_ARG), dev);
    assert_int_equal(out[0].l[0], PR_KST_BADARG); /* 8 + 9 > 16 entries */
    pr_kernel(cfg, out, cfg, newv, xfer, PR_KMODE_READ, 0, 1, 0, 1 PR_K_LANES(TAB_ARG), dev);
    assert_int_equal(out[0].l[0], PR_KST_BADARG); /* no column 1 */
    pr_kernel(cfg, out, cfg, newv, xfer, PR_KMODE_CLEAR, 0, 0, 5, 0 PR_K_LANES(TAB_ARG), dev);
    assert_int_equal(out[0].l[0], PR_KST_OK);
    assert_int_equal(out[1].l[0], 5); /* indices handed out, as set */
    free(dev);
    free(cfg);
    free(out);
    free(xfer);
}

/* xrt without a device: PR_ENODEV with a message naming the missing device
 * and the fallback; `auto` runs cpu and says so. */
static void test_xrt_nodev(void **state)
{
    (void)state;
    pr_pipeline_spec s;
    spec_of(&s, 13, 26, true, 8192, PR_VOCAB_DLRM);
    char err[512] = "";
    pr_engine_opts o = {.backend = "xrt", .xclbin = "/nonexistent.xclbin"};
    const pr_backend_ops *ops = pr__backend_lookup("xrt");
    assert_non_null(ops);
    pr_backend *be = NULL;
    assert_int_equal(ops->new_(&s, &o, &be, err, sizeof(err)), PR_ENODEV);
    assert_null(be);
    assert_non_null(strstr(err, "no Alveo device"));
    assert_non_null(strstr(err, "engine.backend: cpu or auto"));

    err[0] = 0;
    assert_null(pr_engine_new(&s, &o, err, sizeof(err)));
    assert_non_null(strstr(err, "no Alveo device"));

    pr_log_set_level(PR_LOG_ERROR); /* the fallback warning is expected */
    o.backend = "auto";
    pr_engine *e = pr_engine_new(&s, &o, err, sizeof(err));
    pr_log_set_level(PR_LOG_INFO);
    assert_non_null(e);
    assert_string_equal(pr_engine_backend_name(e), "cpu");
    pr_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_p1_equal),
        cmocka_unit_test(test_p2_equal),
        cmocka_unit_test(test_p3_equal),
        cmocka_unit_test(test_lanes_shared),
        cmocka_unit_test(test_lane_hbm_limit),
        cmocka_unit_test(test_index_stable_across_blocks),
        cmocka_unit_test(test_min_count_streaming),
        cmocka_unit_test(test_min_count_two_pass),
        cmocka_unit_test(test_dlrm_full),
        cmocka_unit_test(test_big_block),
        cmocka_unit_test(test_criteo_sample),
        cmocka_unit_test(test_snapshot_roundtrip),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_kernel_badarg),
        cmocka_unit_test(test_xrt_nodev),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
