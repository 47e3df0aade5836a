/*
 * engine_cfg.c — the `engine` keys: names, ranges, defaults and docs in one
 * table (pr_engine_cfgmap, contract: pr_engine.h).
 *
 * The YAML loader (config/) applies files through this table,
 * docs/configuration.md is generated from it and pr_engine_new fills zero
 * options from it, so the engine's defaults live here only.
 */
#include "pr_engine.h"

static const char *const backend_names[] = {"cpu", "hls-sim", "xrt", "auto", NULL};

static const pr_cfgmap_entry engine_entries[] = {
    PR_CFG_E_CHOICE("backend", pr_engine_opts, backend, backend_names, "cpu",
                    "Engine backend: cpu, hls-sim (the HLS kernel run as C), xrt (an FPGA), auto "
                    "(xrt when a device is present, else cpu)."),
    PR_CFG_E_INT("threads", 0, pr_engine_opts, threads, 1, 64, "2",
                 "Worker threads of the cpu backend (1..64)."),
    PR_CFG_E_STR("xclbin", 0, pr_engine_opts, xclbin, NULL, "xrt: path of the device binary."),
    PR_CFG_E_INT("device", 0, pr_engine_opts, device, 0, 1024, "0", "xrt: device index."),
    PR_CFG_E_BOOL("overlap", pr_engine_opts, overlap, "true",
                  "Streaming (`run`): one more thread per pipeline reads and decodes the next "
                  "block while the engine and batcher work on the current one. Blocks are still "
                  "processed one at a time in arrival order, so results are the same with it "
                  "off; off = one thread does both (fewer threads, less throughput)."),
};
const pr_cfgmap pr_engine_cfgmap = PR_CFGMAP(engine_entries);
