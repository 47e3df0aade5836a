/*
 * cmd_run.c — `piperec run --config FILE`: the long-running streaming service.
 *
 * Exit codes (pr_cli.h): 2 for a usage or configuration problem (the message
 * names the file, line and key), 1 when the service cannot start or a
 * pipeline fails for good, 0 after a clean SIGTERM/SIGINT drain. A drain that
 * times out waiting for acknowledgements still exits 0: its records were never
 * committed, so they are delivered again after the restart (at-least-once).
 *
 * Signals are blocked in every thread and taken synchronously by the main
 * thread with sigtimedwait, so no handler runs inside library code.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_log.h"
#include "pr_service.h"

static void pr__run_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec run --config FILE [--set PATH=VALUE]... [--check]\n"
            "\n"
            "Run every pipeline of FILE (YAML, see docs/configuration.md) until SIGTERM or\n"
            "SIGINT, then drain: emit partial batches, wait for acknowledgements, commit.\n"
            "  --config FILE   the configuration (required)\n"
            "  --set PATH=VALUE  override one setting (VALUE read as YAML, checked as in\n"
            "                  the file), e.g. --set\n"
            "                  'pipelines[*].source.kafka.properties.bootstrap.servers=HOST:PORT'\n"
            "                  (docs/configuration.md, \"Overriding from the command line\")\n"
            "  --check         validate the configuration and exit (0 = valid)\n");
}

/* Keep freed heap memory in the process instead of handing it back to the
 * kernel after each use. librdkafka's broker thread allocates every fetch
 * response (megabytes) and every message's op, and the consumer frees them
 * a moment later; with glibc's defaults (responses mmap'd, heap tops trimmed
 * past 128 KiB) each fetch came back as fresh pages for the kernel to zero
 * and fault in: ~0.3 us CPU per 300-byte event, a fifth of the broker
 * thread (bench/RESULTS.md, "streaming JSON CPU per event"). 32 MiB is
 * where glibc's own dynamic mmap threshold tops out; an arena keeps at most
 * 64 MiB free at its top. Setting either turns the dynamic one off. */
static void pr__run_keep_freed_memory(void)
{
    /* glibc's own environment settings win: a user who sets them (memory
     * tight, docs/operations.md) gets exactly what they asked for. */
    if (!getenv("MALLOC_MMAP_THRESHOLD_"))
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
    if (!getenv("MALLOC_TRIM_THRESHOLD_"))
        mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

int pr_cli_cmd_run(int argc, char **argv)
{
    const char *path = NULL;
    bool check_only = false;
    char *ov_path[PR_CLI_MAX_SET], *ov_value[PR_CLI_MAX_SET];
    size_t n_ov = 0;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        if (!strcmp(argv[i], "--set") && i + 1 < argc) {
            rc = pr_cli_add_set("run", argv[++i], ov_path, ov_value, &n_ov);
        } else if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strncmp(argv[i], "--config=", 9)) {
            path = argv[i] + 9;
        } else if (!strcmp(argv[i], "--check")) {
            check_only = true;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__run_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "piperec run: unknown argument '%s'\n", argv[i]);
            pr__run_usage(stderr);
            rc = 2;
        }
    }
    if (!rc && !path) {
        fprintf(stderr, "piperec run: --config FILE is required\n");
        pr__run_usage(stderr);
        rc = 2;
    }

    char err[4096];
    pr_config *cfg = NULL;
    if (!rc && pr_config_load_file_with(path, ov_path, ov_value, n_ov, &cfg, err, sizeof(err))) {
        fprintf(stderr, "piperec run: %s\n", err);
        rc = 2;
    }
    for (size_t k = 0; k < n_ov; k++)
        free(ov_path[k]); /* ov_value[k] points into the same allocation */
    if (rc)
        return rc;
    if (pr_config_check_streaming(cfg, err, sizeof(err))) {
        fprintf(stderr, "piperec run: %s\n", err);
        pr_config_free(cfg);
        return 2;
    }
    if (check_only && pr_config_check_kafka(cfg, err, sizeof(err))) {
        fprintf(stderr, "piperec run: %s\n", err);
        pr_config_free(cfg);
        return 2;
    }
    if (check_only) {
        printf("%s: ok (%zu pipeline%s)\n", path, cfg->n_pipelines,
               cfg->n_pipelines == 1 ? "" : "s");
        pr_config_free(cfg);
        return 0;
    }
    pr_log_set_level(cfg->log_level);
    pr__run_keep_freed_memory();

    sigset_t sigs;
    pr_cli_block_signals(&sigs);

    pr_service *svc = NULL;
    pr_service_opts opts = {0};
    if (pr_service_new(cfg, &opts, &svc, err, sizeof(err))) {
        fprintf(stderr, "piperec run: %s\n", err);
        pr_config_free(cfg);
        return 1;
    }
    if (pr_service_start(svc, err, sizeof(err))) {
        fprintf(stderr, "piperec run: %s\n", err);
        pr_service_free(svc);
        pr_config_free(cfg);
        return 1;
    }
    pr_info("piperec %s: %zu pipeline(s) running; http on port %u", PR_VERSION, cfg->n_pipelines,
            (unsigned)pr_service_http_port(svc));
    for (size_t i = 0; i < pr_service_n_pipelines(svc); i++)
        if (pr_service_trainer_port(svc, i))
            pr_info("pipeline %s: trainers connect to port %u", cfg->pipelines[i].name,
                    (unsigned)pr_service_trainer_port(svc, i));

    int sig = 0;
    while (!pr_service_stopping(svc)) {
        sig = pr_cli_wait_signal(&sigs, 200);
        if (sig > 0)
            break;
    }
    if (sig > 0)
        pr_info("signal %d: draining", sig);
    rc = pr_service_stop(svc);
    int exit_code = 0;
    if (rc == PR_ETIMEDOUT) {
        pr_warn("drain timed out; unacknowledged records will be delivered again");
    } else if (rc) {
        pr_err("stopped after a failure: %s", pr_strerror(rc));
        exit_code = 1;
    }
    pr_service_free(svc);
    pr_config_free(cfg);
    return exit_code;
}
