/*
 * backends.c — the registry of compiled-in engine backends, by name.
 *
 * One table, in preference order. To add a backend, define its
 * `const pr_backend_ops` in its own folder and add one line here; the contract
 * test (tests/engine/test_backend_contract.c) then checks it automatically.
 * "auto" is not a table entry: pr_engine_new resolves it (xrt when its create
 * succeeds, otherwise cpu with a warning).
 */
#include <string.h>

#include "engine_int.h"

static const pr_backend_ops *const pr__backend_table[] = {
    &pr__backend_cpu, &pr__backend_hls_sim, /* fpga_engine/hls/ */
    &pr__backend_xrt, /* fpga_engine/xrt/, or hls/xrt_absent.c in builds without XRT */
};
#define PR__N_BACKENDS (sizeof(pr__backend_table) / sizeof(pr__backend_table[0]))

const pr_backend_ops *pr__backend_lookup(const char *name)
{
    for (size_t i = 0; name && i < PR__N_BACKENDS; i++)
        if (strcmp(pr__backend_table[i]->name, name) == 0)
            return pr__backend_table[i];
    return NULL;
}

const char *const *pr_engine_backends(void)
{
    static const char *names[PR__N_BACKENDS + 1];
    /* Filled on every call: cheap, and free of first-call races. */
    for (size_t i = 0; i < PR__N_BACKENDS; i++)
        names[i] = pr__backend_table[i]->name;
    names[PR__N_BACKENDS] = NULL;
    return names;
}
