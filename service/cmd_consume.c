/* cmd_consume.c — placeholder until the `consume` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_consume(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'consume' is not built yet\n");
    return 2;
}
