/*
 * bench_hls_model.c — what the FPGA kernel (fpga_engine/hls/pr_kernel.c)
 * would do on an Alveo U55C, from its dataflow structure, next to Piper's
 * published Table 4; plus the measured speed of its C simulation (hls-sim)
 * on this host, with the cpu backend for reference.
 *
 *   bench_hls_model [--rows N] [--block-rows N] [--lanes N] [--no-measure]
 *
 * Output: JSON lines. "kind":"model*" lines are a cycle model, not a
 * measurement: no card and no Vitis are available here. Its assumptions
 * (printed as the "model_assumptions" line, and in fpga_engine/hls/README.md):
 *   - 200 MHz (Piper's achieved clock); one compute unit; each AXI port
 *     moves one 64-byte word per cycle (12.8 GB/s, one HBM pseudo-channel);
 *     `in` has one reader stage (rd_in), `out`/`newv` one writer (wr_out);
 *   - one DATAFLOW region per call; every process loops over the tiles
 *     (1024 rows), so in steady state a tile costs the slowest process's
 *     cycles per tile; a call adds one tile of fill (lanes start after the
 *     validator has seen a whole tile) and a fixed launch overhead;
 *   - per-process cycles per tile, G = 128 groups of 8 rows:
 *       rd_in     nd*G + 2*G per sparse column (II 2 per group: 2 hex words,
 *                 or 1 u64 word at half rate) + 1 missing-bitmap word per
 *                 column per 512 rows
 *       hex2int   2*G per sparse column (II 1 per word)
 *       validate  1024 (reset) + G per sparse column + G (ok masks, all lanes
 *                 at once) + 32 (reject words)
 *       lane l    G (ok masks) + per owned column: 1024 values x II + depth;
 *                 II = 2 on-chip (URAM read-after-write, Piper), depth 10;
 *                 II = max(6 (Piper), 2 accesses / HBM_ACC_PER_CYCLE,
 *                 HBM_LAT / OUTSTANDING) in HBM, depth HBM_LAT (the pipeline
 *                 drains per column tile); the forwarding window (32 updates)
 *                 must cover 2*HBM_LAT / II updates in flight
 *       neg2zero, log1p  nd*G (II 1 per word)
 *       wr_out    nd*G + 1 word per 16 indices (int32) per column + 1 new-
 *                 index packet per column + 32 reject words;
 *   - host transfers overlap compute (double buffering); PCIe Gen3x16
 *     (~12 GB/s) is reported beside it as the end-to-end bound.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pr_clock.h"
#include "pr_engine.h"
#include "pr_gen.h"
#include "hls/pr_kernel.h" /* fpga_engine/ is on the include path */
#include "pr_log.h"

#define PCIE_BPS          12.0e9     /* bytes/s, Gen3x16 effective */
#define PIPER_ROWS        45840617.0 /* Criteo Kaggle train rows ("45 million entries") */
#define HBM_LAT           64.0 /* cycles (320 ns) from read issue to data, random 8-byte access */
#define HBM_OUTSTANDING   32.0 /* num_read_outstanding per lane port */
#define HBM_ACC_PER_CYCLE 0.5  /* random accesses a pseudo-channel sustains per kernel cycle */
#define II_URAM           2.0
#define II_HBM_PIPER      6.0
#define DEPTH_URAM        10.0
#define FWD_WINDOW        32.0
#define LAUNCH_CYCLES     2000.0 /* 10 us per kernel call: XRT start/done, header */
#define TILE              ((double)PR_K_TILE_ROWS)
#define G                 (TILE / 8)

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

static double ii_hbm(void)
{
    double ii = II_HBM_PIPER;
    if (2.0 / HBM_ACC_PER_CYCLE > ii)
        ii = 2.0 / HBM_ACC_PER_CYCLE;
    if (HBM_LAT / HBM_OUTSTANDING > ii)
        ii = HBM_LAT / HBM_OUTSTANDING;
    return ii;
}

enum { ST_RD, ST_HEX, ST_VAL, ST_LANE, ST_N2Z, ST_LOG, ST_WR, ST__N };
static const char *const st_name[ST__N] = {"rd_in",    "hex2int", "validate", "lane",
                                           "neg2zero", "log1p",   "wr_out"};

/* Cycles per full tile of each process (Criteo shape, hex input, int32
 * indices), `lanes` vocabulary lanes, columns round-robin. */
static void tile_cycles(uint32_t nd, uint32_t ns, uint32_t lanes, const pipe *p, double st[ST__N])
{
    bool hbm = p->vocab && p->modulus > PR_K_ONCHIP_MAX_DOMAIN;
    double ii = !p->vocab ? II_URAM /* the lane loop without a table: modulus at II 2 */
                : hbm     ? ii_hbm()
                          : II_URAM;
    double depth = hbm ? HBM_LAT : DEPTH_URAM;
    double cols_max = (double)((ns + lanes - 1) / lanes);
    st[ST_RD] = nd * G + ns * 2 * G + ns * TILE / 512;
    st[ST_HEX] = ns * 2 * G;
    st[ST_VAL] = TILE + ns * G + G + TILE / 32;
    st[ST_LANE] = G + cols_max * (TILE * ii + depth);
    st[ST_N2Z] = nd * G;
    st[ST_LOG] = nd * G;
    st[ST_WR] = nd * G + ns * (TILE * 4 / 64 + 1) + TILE / 32;
}

static void model(uint32_t block_rows, uint32_t lanes)
{
    uint32_t nd = 13, ns = 26;
    printf("{\"bench\":\"hls_model\",\"kind\":\"model_assumptions\",\"clock_mhz\":%.0f,"
           "\"axi_bytes_per_cycle_per_port\":64,\"tile_rows\":%u,\"vocab_lanes\":%u,"
           "\"lanes_compiled\":%u,\"column_to_lane\":\"c %% lanes\",\"ii_uram\":%.0f,"
           "\"ii_hbm\":%.1f,\"ii_hbm_parts\":{\"piper\":%.0f,\"pc_random_access\":%.1f,"
           "\"latency_over_outstanding\":%.1f},\"hbm_latency_cycles\":%.0f,"
           "\"hbm_outstanding_per_lane\":%.0f,\"hbm_random_accesses_per_cycle_per_pc\":%.2f,"
           "\"forwarding_window\":%.0f,\"updates_in_flight\":%.1f,\"launch_cycles_per_call\":%.0f,"
           "\"dataflow\":\"steady state = slowest process per tile; + 1 tile fill per call\"}\n",
           PR_K_CLOCK_HZ / 1e6, PR_K_TILE_ROWS, lanes, PR_K_VOCAB_LANES, II_URAM, ii_hbm(),
           II_HBM_PIPER, 2.0 / HBM_ACC_PER_CYCLE, HBM_LAT / HBM_OUTSTANDING, HBM_LAT,
           HBM_OUTSTANDING, HBM_ACC_PER_CYCLE, FWD_WINDOW, 2 * HBM_LAT / ii_hbm(), LAUNCH_CYCLES);
    for (size_t i = 0; i < sizeof(pipes) / sizeof(pipes[0]); i++) {
        const pipe *p = &pipes[i];
        double st[ST__N];
        tile_cycles(nd, ns, lanes, p, st);
        int slow = 0;
        for (int k = 1; k < ST__N; k++)
            if (st[k] > st[slow])
                slow = k;
        double tiles = (double)((pr_k_rows_pad(block_rows) + PR_K_TILE_ROWS - 1) / PR_K_TILE_ROWS);
        double cyc = (tiles + 1) * st[slow] + LAUNCH_CYCLES;
        double secs = cyc / (double)PR_K_CLOCK_HZ;
        double in_bytes = (double)pr_k_in_words(pr_k_rows_pad(block_rows), nd, ns) * 64;
        double out_bytes = (double)pr_k_out_words(pr_k_rows_pad(block_rows), nd, ns, 4) * 64;
        double pcie_rps = block_rows / ((in_bytes + out_bytes) / PCIE_BPS);
        double rps = block_rows / secs;
        printf("{\"bench\":\"hls_model\",\"kind\":\"model\",\"pipeline\":\"%s\",\"block_rows\":%u,"
               "\"vocab_lanes\":%u,\"vocab_memory\":\"%s\",\"cycles_per_tile\":{",
               p->name, block_rows, lanes,
               !p->vocab                              ? "none"
               : p->modulus <= PR_K_ONCHIP_MAX_DOMAIN ? "uram"
                                                      : "hbm");
        for (int k = 0; k < ST__N; k++)
            printf("%s\"%s\":%.0f", k ? "," : "", st_name[k], st[k]);
        printf("},\"bottleneck\":\"%s\",\"cycles_per_block\":%.0f,\"kernel_rows_per_s\":%.0f,"
               "\"kernel_seconds_for_45M_rows\":%.2f,\"pcie_bytes_per_row\":%.0f,"
               "\"pcie_bound_rows_per_s\":%.0f,\"end_to_end_rows_per_s\":%.0f,"
               "\"end_to_end_seconds_for_45M_rows\":%.2f}\n",
               st_name[slow], cyc, rps, PIPER_ROWS / rps, (in_bytes + out_bytes) / block_rows,
               pcie_rps, rps < pcie_rps ? rps : pcie_rps,
               PIPER_ROWS / (rps < pcie_rps ? rps : pcie_rps));
    }
    /* Per operator over the full dataset, as Piper's Table 4 reports it: the
     * operator alone, its input streamed from one HBM port and its output
     * written to another (64 B/cycle each); the operator's own stage runs in
     * every column's lane at once (vocab), or on 64-byte words (the rest). */
    double n = PIPER_ROWS, nd_v = n * 13, ns_v = n * 26;
    double lane_cols = (double)((26 + lanes - 1) / lanes);
    struct {
        const char *op;
        double read_words, write_words, stage_cycles, piper_s;
        const char *note;
    } ops[] = {
        {"Neg2Zero", nd_v / 8, nd_v / 8, nd_v / 8, 0.23,
         "8-byte doubles in (Piper: 4-byte values, 16 per word)"},
        {"Logarithm", nd_v / 8, nd_v / 16, nd_v / 8, 0.23, "double in, float32 out"},
        {"Hex2Int", ns_v / 4, ns_v / 8, ns_v / 4, 0.92,
         "16-byte hex slots (64-bit values; Piper: 8-char strings)"},
        {"Modulus", ns_v / 8, ns_v / 8, n * lane_cols * II_URAM, 0.46,
         "u64 in, one modulus unit per lane"},
        {"VocabGen-8K", ns_v / 8, ns_v / 16, n * lane_cols * II_URAM, 0.92,
         "URAM bank per lane, II 2"},
        {"VocabMap-8K", ns_v / 8, ns_v / 16, n * lane_cols * II_URAM, 0.46,
         "gen+map fused in one pass (map alone would be II 1 on-chip)"},
        {"VocabGen-512K", ns_v / 8, ns_v / 16, n * lane_cols * ii_hbm(), 2.15,
         "HBM pseudo-channel per lane"},
        {"VocabMap-512K", ns_v / 8, ns_v / 16, n * lane_cols * ii_hbm(), 2.96,
         "gen+map fused in one pass"},
    };
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        double io = ops[i].read_words > ops[i].write_words ? ops[i].read_words : ops[i].write_words;
        double cyc = io > ops[i].stage_cycles ? io : ops[i].stage_cycles;
        printf("{\"bench\":\"hls_model\",\"kind\":\"model_op\",\"op\":\"%s\",\"rows\":%.0f,"
               "\"vocab_lanes\":%u,\"stage_s\":%.2f,\"io_s\":%.2f,\"model_s\":%.2f,"
               "\"piper_table4_s\":%.2f,\"note\":\"%s\"}\n",
               ops[i].op, n, lanes, ops[i].stage_cycles / PR_K_CLOCK_HZ, io / PR_K_CLOCK_HZ,
               cyc / PR_K_CLOCK_HZ, ops[i].piper_s, ops[i].note);
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
                double t0 = pr_mono_ns() / 1e9;
                if (pr_engine_process(e, b, out, err, sizeof(err))) {
                    fprintf(stderr, "bench_hls_model: process: %s\n", err);
                    return 1;
                }
                busy += pr_mono_ns() / 1e9 - t0;
                done += n;
            }
            printf("{\"bench\":\"hls_model\",\"kind\":\"measured\",\"pipeline\":\"%s\",\"backend\":"
                   "\"%s\","
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
    uint32_t lanes = PR_K_VOCAB_LANES;
    bool do_measure = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            rows = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--block-rows") && i + 1 < argc)
            block_rows = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--lanes") && i + 1 < argc)
            lanes = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--no-measure"))
            do_measure = false;
        else {
            fprintf(
                stderr,
                "usage: bench_hls_model [--rows N] [--block-rows N] [--lanes N] [--no-measure]\n");
            return 2;
        }
    }
    if (block_rows == 0 || block_rows > PR_K_MAX_ROWS) {
        fprintf(stderr, "bench_hls_model: --block-rows must be 1..%u\n", PR_K_MAX_ROWS);
        return 2;
    }
    printf(
        "{\"bench\":\"hls_model\",\"kind\":\"piper_table4\",\"rows\":%.0f,\"seconds\":{"
        "\"Neg2Zero\":0.23,\"Logarithm\":0.23,\"Hex2Int\":0.92,\"Modulus\":0.46,"
        "\"VocabGen-8K\":0.92,\"VocabMap-8K\":0.46,\"VocabGen-512K\":2.15,\"VocabMap-512K\":2.96},"
        "\"source\":\"Piper (seeds/001), Table 4, Alveo U55C at 200 MHz\"}\n",
        PIPER_ROWS);
    if (lanes == 0 || lanes > 26) {
        fprintf(stderr, "bench_hls_model: --lanes must be 1..26 (HBM pseudo-channels)\n");
        return 2;
    }
    model(block_rows, lanes);
    return do_measure ? measure(rows, block_rows) : 0;
}
