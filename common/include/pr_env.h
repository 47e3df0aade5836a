/*
 * pr_env.h — the PIPEREC_* on/off switches the benches use to run an older
 * path beside the current one in the same binary (PIPEREC_POLL_DECODE=0,
 * PIPEREC_WORKER_DEFER_EMIT=0, PIPEREC_WORKER_PROF=1, ...). One reading
 * for all of them: unset keeps the default, "0" is off, any other value is
 * on. None of them changes an output byte (docs/architecture.md names what
 * each keeps). Header-only: read at setup, never per row.
 */
#ifndef PR_ENV_H
#define PR_ENV_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline bool pr_env_switch(const char *name, bool dflt)
{
    const char *v = getenv(name);
    return v ? strcmp(v, "0") != 0 : dflt;
}

#endif
