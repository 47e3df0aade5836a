/* cmd_broker.c — placeholder until the `broker` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_broker(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'broker' is not built yet\n");
    return 2;
}
