/*
 * fuzz_config.c — libFuzzer target for the configuration loader
 * (config/pr_config.c with the component key tables of pr_cfgmap.h).
 *
 * Input: YAML text, optionally followed by a NUL byte and override lines
 * "path=value\n" (the command line's --set). The YAML is loaded with
 * pr_config_load_string (an empty YAML part means the embedded default
 * config), checked with pr_config_check_streaming, then each override is
 * applied with pr_config_set; a failed override must leave the config as it
 * was (same pipelines, same http.listen), and every error message must be a
 * terminated string.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_config.h"
#include "pr_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pr_log_set_level(PR_LOG_ERROR);
    return 0;
}

static void check_err(const char *err, size_t size)
{
    FUZZ_CHECK(memchr(err, '\0', size) != NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t ylen = nul ? (size_t)(nul - data) : size;
    char err[4096];
    pr_config *cfg = NULL;
    int rc;
    /* An exact-size copy: the loader is given a length, not a C string. */
    char *yaml = malloc(ylen ? ylen : 1);
    memcpy(yaml, data, ylen);
    if (ylen == 0) {
        rc = pr_config_load_default(&cfg, err, sizeof(err));
        FUZZ_CHECK(rc == 0);
    } else {
        err[0] = '\0';
        rc = pr_config_load_string(yaml, ylen, "<fuzz>", &cfg, err, sizeof(err));
        check_err(err, sizeof(err));
        FUZZ_CHECK((rc == 0) == (cfg != NULL));
    }
    free(yaml);
    if (!cfg)
        return 0;
    FUZZ_CHECK(cfg->n_pipelines >= 1);
    err[0] = '\0';
    (void)pr_config_check_streaming(cfg, err, sizeof(err));
    check_err(err, sizeof(err));
    (void)pr_config_pipeline(cfg, cfg->pipelines[0].name);

    if (nul) {
        /* Overrides: "path=value" per line. */
        size_t rest = size - ylen - 1;
        char *ov = malloc(rest + 1);
        memcpy(ov, nul + 1, rest);
        ov[rest] = '\0';
        char *save = NULL;
        int n = 0;
        for (char *line = strtok_r(ov, "\n", &save); line && n < 16;
             line = strtok_r(NULL, "\n", &save), n++) {
            char *eq = strchr(line, '=');
            if (!eq)
                continue;
            *eq = '\0';
            size_t np = cfg->n_pipelines;
            char name0[PR_NAME_MAX];
            memcpy(name0, cfg->pipelines[0].name, sizeof(name0));
            char *listen = cfg->http.listen ? strdup(cfg->http.listen) : NULL;
            err[0] = '\0';
            rc = pr_config_set(cfg, line, eq + 1, err, sizeof(err));
            check_err(err, sizeof(err));
            if (rc) {
                FUZZ_CHECK(cfg->n_pipelines == np);
                FUZZ_CHECK(!strcmp(cfg->pipelines[0].name, name0));
                FUZZ_CHECK((!listen && !cfg->http.listen) ||
                           (listen && cfg->http.listen && !strcmp(listen, cfg->http.listen)));
            } else {
                FUZZ_CHECK(cfg->n_pipelines >= 1);
            }
            free(listen);
        }
        free(ov);
    }
    pr_config_free(cfg);
    return 0;
}
