/*
 * main.c — `piperec <command> [options]`: dispatch to the subcommands of
 * pr_cli.h through one table (name, handler, one-line help).
 */
#include <stdio.h>
#include <string.h>

#include "pr_cli.h"

#ifndef PR_VERSION
#define PR_VERSION "0.0.0"
#endif

typedef struct pr_command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} pr_command;

static int pr__cmd_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("piperec %s\n", PR_VERSION);
    return 0;
}

static const pr_command pr_commands[] = {
    {"run", pr_cli_cmd_run, "run the streaming service: --config FILE"},
    {"demo", pr_cli_cmd_demo, "live demo: embedded broker, producer, pipeline, trainer"},
    {"process", pr_cli_cmd_process, "offline: --config FILE --input PATH|- --output DIR"},
    {"gen", pr_cli_cmd_gen, "synthetic Criteo-shaped data: --rows N --seed S --output PATH"},
    {"broker", pr_cli_cmd_broker, "test broker (librdkafka mock cluster) on loopback"},
    {"produce", pr_cli_cmd_produce,
     "load events into Kafka: --bootstrap ADDR --topic T --input FILE"},
    {"consume", pr_cli_cmd_consume, "reference trainer client: --connect HOST:PORT --pipeline P"},
    {"vocab", pr_cli_cmd_vocab, "vocabulary export|import: --state DIR --pipeline P"},
    {"explain", pr_cli_cmd_explain, "features, operator chains and their backends: --config FILE"},
    {"infer", pr_cli_cmd_infer, "a config from sample events: --input FILE | --topic T"},
    {"transform", pr_cli_cmd_transform,
     "events -> the rows a model gets, vocabulary frozen: --config FILE --vocab DIR"},
    {"serve", pr_cli_cmd_serve, "transform over HTTP for a model server: --config FILE"},
    {"version", pr__cmd_version, "print the version"},
};

static void pr_usage(FILE *f)
{
    fprintf(f, "usage: piperec <command> [options]   (piperec <command> --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(pr_commands) / sizeof(pr_commands[0]); i++)
        fprintf(f, "  %-9s %s\n", pr_commands[i].name, pr_commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        pr_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof(pr_commands) / sizeof(pr_commands[0]); i++)
        if (!strcmp(argv[1], pr_commands[i].name))
            return pr_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "piperec: unknown command '%s'\n", argv[1]);
    pr_usage(stderr);
    return 2;
}
