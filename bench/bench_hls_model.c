/*
 * bench_hls_model.c — what the FPGA kernel (fpga_engine/hls/pr_kernel.c)
 * would do on an Alveo U55C, from its loop structure, next to Piper's
 * published Table 4; plus the measured speed of its C simulation (hls-sim)
 * on this host, with the cpu backend for reference.
 *
 *   bench_hls_model [--rows N] [--block-rows N] [--no-measure]
 *
 * Output: JSON lines. "kind":"model" lines are a cycle model, not a
 * measurement: no card and no Vitis are available here. Its assumptions
 * (also in fpga_engine/hls/README.md):
 *   - 200 MHz (Piper's achieved clock); one compute unit; one 64-byte word
 *     per cycle per AXI stream (II=1 per word);
 *   - the kernel's loop nest as written: per call, validate every hex column,
 *     then every dense column, then every sparse column, one after another;
 *     inside a column tile the DATAFLOW stages overlap, so a tile costs the
 *     slowest stage's trip count x II plus a fill/drain latency L;
 *   - stage IIs: read 1 cycle/word (a hex group of 8 values is 2 words),
 *     Hex2Int 2 cycles/group (2 words in), Neg2Zero/Logarithm/Modulus 1
 *     cycle/group (8 lanes unrolled), vocab 2 cycles/value on-chip (URAM
 *     read-after-write) and 6 cycles/value in HBM (latency hidden by 16
 *     outstanding requests, Piper's figure), write 1 cycle/word;
 *   - host transfers overlap compute (double buffering), so they are left
 *     out; PCIe Gen3x16 (~12 GB/s) is reported beside it as a bound.
 * "lanes" projects Piper's organisation (one vocab pipeline per column, each
 * on its own HBM pseudo-channel) as a what-if; the kernel built here has one.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pr_engine.h"
#include "pr_gen.h"
#include "hls/pr_kernel.h" /* fpga_engine/ is on the include path */
#include "pr_log.h"

#define L_FILL 40.0     /* cycles of pipeline fill/drain per dataflow tile */
#define PCIE_BPS 12.0e9 /* bytes/s, Gen3x16 effective */
#define PIPER_ROWS 45840617.0 /* Criteo Kaggle train rows ("45 million entries") */

typedef struct pipe {
    const char *name;
    bool vocab;
    uint64_t modulus;
} pipe;

static const pipe pipes[] = {
    {"P-I", false, 1ull << 20},
    {"P-II", true, 8192},
    {"P-III", true, 524288},
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Cycles of one kernel call of `rows` rows (Criteo shape, hex input). */
static double call_cycles(uint32_t rows, uint32_t nd, uint32_t ns, const pipe *p, double *parts)
{
    double rp = pr_k_rows_pad(rows), groups = rp / 8, tiles = (rp + PR_K_TILE_ROWS - 1) / PR_K_TILE_ROWS;
    double ii_vocab = !p->vocab ? 0 : p->modulus <= PR_K_ONCHIP_MAX_DOMAIN ? 2 : 6;
    double fixed = ns + 1 + rp + rows + rp / 32 + ns / 8.0 + 1; /* cfg, reject init/count/out, header */
    double validate = ns * (2 * groups + tiles * L_FILL);
    double dense = nd * (groups + tiles * L_FILL);
    double slow = ii_vocab * 8 > 2 ? ii_vocab * 8 : 2; /* per group: vocab or read/hex2int */
    double sparse = ns * (slow * groups + tiles * L_FILL);
    parts[0] = validate, parts[1] = dense, parts[2] = sparse, parts[3] = fixed;
    return fixed + validate + dense + sparse;
}

static void model(uint32_t block_rows)
{
    uint32_t nd = 13, ns = 26;
    for (size_t i = 0; i < sizeof(pipes) / sizeof(pipes[0]); i++) {
        const pipe *p = &pipes[i];
        double parts[4];
        double cyc = call_cycles(block_rows, nd, ns, p, parts);
        double secs = cyc / (double)PR_K_CLOCK_HZ;
        double in_bytes = (double)pr_k_in_words(pr_k_rows_pad(block_rows), nd, ns) * 64;
        double out_bytes = (double)pr_k_out_words(pr_k_rows_pad(block_rows), nd, ns, 4) * 64;
        double pcie_s = (in_bytes + out_bytes) / PCIE_BPS;
        printf("{\"bench\":\"hls_model\",\"kind\":\"model\",\"pipeline\":\"%s\",\"block_rows\":%u,"
               "\"clock_mhz\":%.0f,\"cycles_per_block\":%.0f,\"cycles\":{\"validate\":%.0f,"
               "\"dense\":%.0f,\"sparse\":%.0f,\"fixed\":%.0f},\"vocab_memory\":\"%s\","
               "\"rows_per_s\":%.0f,\"seconds_for_45M_rows\":%.2f,\"pcie_bytes_per_block\":%.0f,"
               "\"pcie_bound_rows_per_s\":%.0f}\n",
               p->name, block_rows, PR_K_CLOCK_HZ / 1e6, cyc, parts[0], parts[1], parts[2], parts[3],
               !p->vocab ? "none" : p->modulus <= PR_K_ONCHIP_MAX_DOMAIN ? "uram" : "hbm",
               block_rows / secs, PIPER_ROWS / (block_rows / secs), in_bytes + out_bytes,
               block_rows / pcie_s);
    }
    /* Per operator over the full dataset, as Piper's Table 4 reports it. */
    struct {
        const char *op;
        double values;        /* values through the operator */
        double cycles_per_8;  /* cycles per 8-value group, one pipeline */
        double piper_s;       /* Table 4, Piper column */
    } ops[] = {
        {"Neg2Zero", PIPER_ROWS * 13, 1, 0.23},
        {"Logarithm", PIPER_ROWS * 13, 1, 0.23},
        {"Hex2Int", PIPER_ROWS * 26, 2, 0.92},
        {"Modulus", PIPER_ROWS * 26, 1, 0.46},
        {"VocabGen-8K", PIPER_ROWS * 26, 16, 0.92},
        {"VocabMap-8K", PIPER_ROWS * 26, 8, 0.46},
        {"VocabGen-512K", PIPER_ROWS * 26, 48, 2.15},
        {"VocabMap-512K", PIPER_ROWS * 26, 48, 2.96},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        double one = ops[i].values / 8 * ops[i].cycles_per_8 / (double)PR_K_CLOCK_HZ;
        bool vocab = strncmp(ops[i].op, "Vocab", 5) == 0;
        printf("{\"bench\":\"hls_model\",\"kind\":\"model_op\",\"op\":\"%s\",\"rows\":%.0f,"
               "\"values\":%.0f,\"model_s_1_lane\":%.2f,\"model_s_26_lanes\":%.2f,"
               "\"piper_table4_s\":%.2f%s}\n",
               ops[i].op, PIPER_ROWS, ops[i].values, one, vocab ? one / 26 : one, ops[i].piper_s,
               strncmp(ops[i].op, "VocabMap", 8) == 0
                   ? ",\"note\":\"piperec fuses gen+map in one pass; map alone would be II=1 "
                     "on-chip\""
                   : "");
    }
}

/* Measured: the same blocks through hls-sim and cpu (1 thread) on this host. */
static int measure(uint64_t total, uint32_t block_rows)
{
    pr_gen *g = pr_gen_new(42);
    if (!g)
        return 1;
    pr_block *b = pr_block_new(13, 26, block_rows, false);
    const char *backends[] = {"hls-sim", "cpu"};
    for (size_t i = 0; i < sizeof(pipes) / sizeof(pipes[0]); i++) {
        for (int k = 0; k < 2; k++) {
            pr_pipeline_spec s;
            pr_pipeline_spec_default(&s);
            s.n_sparse_ops = pipes[i].vocab ? 3 : 2;
            for (int c = 0; c < 26; c++)
                s.sparse[c].modulus = pipes[i].modulus;
            char err[512];
            pr_engine_opts o = {.backend = backends[k], .threads = 1};
            pr_engine *e = pr_engine_new(&s, &o, err, sizeof(err));
            if (!e) {
                fprintf(stderr, "bench_hls_model: %s: %s\n", backends[k], err);
                return 1;
            }
            pr_out *out = pr_out_new(13, 26, block_rows, pr_engine_sparse_width(e));
            double busy = 0;
            uint64_t done = 0;
            while (done < total) {
                uint32_t n = total - done < block_rows ? (uint32_t)(total - done) : block_rows;
                pr_block_reset(b);
                pr_gen_fill_block(g, done, n, b, false);
                double t0 = now_s();
                if (pr_engine_process(e, b, out, err, sizeof(err))) {
                    fprintf(stderr, "bench_hls_model: process: %s\n", err);
                    return 1;
                }
                busy += now_s() - t0;
                done += n;
            }
            printf("{\"bench\":\"hls_model\",\"kind\":\"measured\",\"pipeline\":\"%s\",\"backend\":\"%s\","
                   "\"threads\":1,\"rows\":%" PRIu64 ",\"block_rows\":%u,\"seconds\":%.3f,"
                   "\"rows_per_s\":%.0f}\n",
                   pipes[i].name, backends[k], done, block_rows, busy, (double)done / busy);
            fflush(stdout);
            pr_out_free(out);
            pr_engine_free(e);
        }
    }
    pr_block_free(b);
    pr_gen_free(g);
    return 0;
}

int main(int argc, char **argv)
{
    uint64_t rows = 262144;
    uint32_t block_rows = PR_K_MAX_ROWS;
    bool do_measure = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--block-rows") && i + 1 < argc)
            block_rows = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-measure"))
            do_measure = false;
        else {
            fprintf(stderr, "usage: bench_hls_model [--rows N] [--block-rows N] [--no-measure]\n");
            return 2;
        }
    }
    if (block_rows == 0 || block_rows > PR_K_MAX_ROWS) {
        fprintf(stderr, "bench_hls_model: --block-rows must be 1..%u\n", PR_K_MAX_ROWS);
        return 2;
    }
    printf("{\"bench\":\"hls_model\",\"kind\":\"piper_table4\",\"rows\":%.0f,\"seconds\":{"
           "\"Neg2Zero\":0.23,\"Logarithm\":0.23,\"Hex2Int\":0.92,\"Modulus\":0.46,"
           "\"VocabGen-8K\":0.92,\"VocabMap-8K\":0.46,\"VocabGen-512K\":2.15,\"VocabMap-512K\":2.96},"
           "\"source\":\"Piper (seeds/001), Table 4, Alveo U55C at 200 MHz\"}\n",
           PIPER_ROWS);
    model(block_rows);
    return do_measure ? measure(rows, block_rows) : 0;
}
