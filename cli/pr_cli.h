/*
 * pr_cli.h — internal to cli/: the `piperec` subcommands and the small
 * helpers the long-running ones share (synchronous signal handling,
 * free-port probing; cli_util.c). main.c dispatches through a table of
 * the commands; each lives in its own cli/cmd_<name>.c. Every command takes the
 * arguments after its name (argv[0] is the command name) and returns the
 * process exit code: 0 success, 1 runtime failure, 2 usage/config error.
 */
#ifndef PR_CLI_H
#define PR_CLI_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pr_config.h"
#include "pr_engine.h"

int pr_cli_cmd_process(int argc, char **argv); /* offline: TSV file -> .npy */
int pr_cli_cmd_gen(int argc, char **argv);     /* synthetic Criteo-shaped data */
int pr_cli_cmd_run(int argc, char **argv);     /* the streaming service */
int pr_cli_cmd_broker(int argc, char **argv);  /* librdkafka mock cluster on loopback */
int pr_cli_cmd_produce(int argc, char **argv); /* load events into Kafka */
int pr_cli_cmd_consume(int argc, char **argv); /* reference trainer-stream client */
int pr_cli_cmd_demo(int argc, char **argv);    /* one-command live demo */
int pr_cli_cmd_vocab(int argc, char **argv);   /* vocabulary export/import/hot */
int pr_cli_vocab_hot(int argc, char **argv);   /* `vocab hot` (cmd_vocab_hot.c) */
int pr_cli_cmd_explain(int argc, char **argv); /* features and operator placement */
int pr_cli_cmd_transform(int argc,
                         char **argv);       /* events -> rows, vocabulary frozen (cmd_serve.c) */
int pr_cli_cmd_serve(int argc, char **argv); /* the same over HTTP (cmd_serve.c) */
int pr_cli_cmd_infer(int argc, char **argv); /* a config from sample events */
int pr_cli_vocab_lookup(int argc, char **argv);  /* `vocab lookup` (cmd_vocab_lookup.c) */
int pr_cli_vocab_migrate(int argc, char **argv); /* `vocab migrate` (cmd_vocab_migrate.c) */

/* ---------------------------------------------------------------- helpers */

/* A pipeline's vocabulary as `piperec vocab` opens it (cmd_vocab.c): the
 * config, the pipeline, an empty engine of its vocabulary columns (a
 * declared schema's: one per vocab feature, espec) and where its state
 * lives. */
typedef struct pr_cli_vocab {
    char cmd[64]; /* "piperec vocab <sub>", or the command given: its messages' prefix */
    pr_config *cfg;
    const pr_pipeline_cfg *pc;
    pr_pipeline_spec espec; /* the engine's spec */
    pr_engine_opts eo;      /* and its options (one thread: nothing is processed) */
    pr_engine *eng;
    const char *state;              /* --state or the pipeline's state.dir; may be NULL */
    char snap[4096], journal[4096]; /* under state */
    bool have_snap, have_journal;
    bool shared;      /* vocab_log: one tagged snapshot, no journal */
    char error[1024]; /* the last load's failure, as printed (without cmd): serve's status */
} pr_cli_vocab;

/* Load the config (NULL: the embedded one), find the pipeline (NULL: the
 * first) and build its engine; need_state: a state dir is required. `sub`:
 * the vocab subcommand ("lookup"), or a whole command ("piperec serve"). Prints
 * what is wrong as "piperec vocab <sub>: ..." and returns the exit code (0,
 * 1 I/O, 2 usage/config). pr_cli_vocab_close after, whatever it returned. */
int pr_cli_vocab_open(const char *sub, const char *config, const char *pipeline, const char *state,
                      bool need_state, pr_cli_vocab *v);
/* The state dir's snapshot and journal into v->eng (as the service would
 * recover them); the exit code as above. */
int pr_cli_vocab_load_state(pr_cli_vocab *v);
/* The vocabulary into v->eng: from `input`, a folder of <column>.tsv (a
 * `piperec process` output, whose meta.json must name v's pipeline, or a
 * `vocab export`), else from the state dir (pr_cli_vocab_load_state). A
 * two-pass config's engine is rebuilt as a streaming one first. The exit
 * code. */
int pr_cli_vocab_load(pr_cli_vocab *v, const char *config, const char *input);
void pr_cli_vocab_close(pr_cli_vocab *v);
/* `vocab import` for a pipeline with vocab_log (cmd_vocab_log.c): DIR's
 * vocabulary written into the log, which must not have given an index yet;
 * the exit code (0, 1 runtime, 2 usage/config/bad input). */
int pr_cli_vocab_import_log(pr_cli_vocab *v, const char *dir);
/* `vocab export --from-log` (cmd_vocab_log.c): the vocabulary the log holds,
 * read to its end without writing it, into DIR; the exit code. */
int pr_cli_vocab_export_log(pr_cli_vocab *v, const char *dir);

/* `piperec infer --bootstrap ADDR --topic T` (infer_kafka.c): up to `rows`
 * events of topic T into inf, read from the beginning of every partition
 * with no consumer group (nothing joined, stored or committed), until every
 * partition is at its end or timeout_s passed; each message read as
 * o->avro_schema_file / o->pb_descriptor_set say (else JSON, bare or
 * registry-framed); tombstones skipped. A summary line goes to stderr.
 * Returns the exit code, err filled when not 0: 1 runtime (memory); 2 the
 * broker not reached within the timeout, the topic does not exist, or the
 * schema / descriptor set does not load. */
int pr_cli_infer_kafka(const char *bootstrap, const char *topic, int timeout_s, uint64_t rows,
                       pr_infer *inf, const pr_infer_opts *o, char *err, size_t errn);

#ifndef PR_VERSION
#define PR_VERSION "0.0.0"
#endif

/* Block SIGINT, SIGTERM and SIGPIPE in the calling thread (and so in every
 * thread it creates afterwards); *set gets SIGINT+SIGTERM for waiting. */
void pr_cli_block_signals(sigset_t *set);

/* Wait up to timeout_ms for one of `set`; returns the signal or 0. */
int pr_cli_wait_signal(const sigset_t *set, int timeout_ms);

/* One command-line option: `--name VALUE` (val) or `--name` alone (flag). */
typedef struct pr_cli_opt {
    const char *name;
    const char **val;
    bool *flag;
} pr_cli_opt;

/* Parse argv[from, argc): each argument one of opts, each at most once.
 * Returns 0; 1 after printing usage to stdout for --help / -h (exit 0); 2
 * after printing "piperec CMD: unknown option 'X'" (or "missing value for",
 * or "given twice") and usage to stderr. */
int pr_cli_parse_opts(const char *cmd, int argc, char **argv, int from, const pr_cli_opt *opts,
                      size_t n_opts, void (*usage)(FILE *));

/* An option's integer: all of s a decimal in [lo, hi] into *out: 0, or -1
 * (the caller says what the option takes). */
int pr_cli_parse_long(const char *s, long lo, long hi, long *out);

/* One `--set PATH=VALUE` of `piperec CMD` (run, process): split at the first
 * '=' into one malloc'd copy (paths[i]; values[i] points into it), at most
 * PR_CLI_MAX_SET. 0, 1 (no memory) or 2 after a message. */
#define PR_CLI_MAX_SET 32
int pr_cli_add_set(const char *cmd, const char *arg, char **paths, char **values, size_t *n);

/* The exit code of a PR_E* failure: 1 for a runtime one (PR_EIO,
 * PR_ENOMEM), else 2 (bad input, usage, configuration). */
int pr_cli_exit_code(int rc);

/* True when host:port can be bound right now (a hint, not a promise). */
bool pr_cli_port_free(const char *host, uint16_t port);

#endif
