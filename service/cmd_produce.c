/* cmd_produce.c — placeholder until the `produce` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_produce(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'produce' is not built yet\n");
    return 2;
}
