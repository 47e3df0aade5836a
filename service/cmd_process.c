/* cmd_process.c — placeholder until the `process` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_process(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'process' is not built yet\n");
    return 2;
}
