/* cmd_demo.c — placeholder until the `demo` command lands (replace this file). */
#include <stdio.h>

#include "pr_cli.h"

int pr_cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "piperec: 'demo' is not built yet\n");
    return 2;
}
