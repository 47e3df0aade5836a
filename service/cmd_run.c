/* cmd_run.c — placeholder until the `run` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'run' is not built yet\n");
    return 2;
}
