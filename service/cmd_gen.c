/* cmd_gen.c — placeholder until the `gen` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_gen(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'gen' is not built yet\n");
    return 2;
}
