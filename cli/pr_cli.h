/*
 * pr_cli.h — the `piperec` subcommands. main.c dispatches through a table of
 * these; each lives in its own service/cmd_<name>.c. Every command takes the
 * arguments after its name (argv[0] is the command name) and returns the
 * process exit code: 0 success, 1 runtime failure, 2 usage/config error.
 */
#ifndef PR_CLI_H
#define PR_CLI_H

int pr_cmd_process(int argc, char **argv); /* offline: TSV file -> .npy */
int pr_cmd_gen(int argc, char **argv);     /* synthetic Criteo-shaped data */
int pr_cmd_run(int argc, char **argv);     /* the streaming service */
int pr_cmd_broker(int argc, char **argv);  /* librdkafka mock cluster on loopback */
int pr_cmd_produce(int argc, char **argv); /* load events into Kafka */
int pr_cmd_consume(int argc, char **argv); /* reference trainer-stream client */
int pr_cmd_demo(int argc, char **argv);    /* one-command live demo */

#endif
