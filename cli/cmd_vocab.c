/*
 * cmd_vocab.c — `piperec vocab export|import|hot`: move a pipeline's vocabulary
 * between a state dir (snapshot <P>.vocab + journal <P>.journal, as the
 * service keeps them) and the text format of docs/formats.md
 * (<column>.tsv per sparse column, the same files `piperec process` writes
 * under vocab/).
 *
 *   export: snapshot + journal replay -> OUTDIR/<col>.tsv. Read-only on the
 *           state dir, so it may run beside the service (it sees the state as
 *           of the last fdatasync'd journal record).
 *   import: INDIR/<col>.tsv -> a new snapshot; refuses when the state dir
 *           already holds a vocabulary unless --force (which also removes the
 *           journal). Do not run it while the service has the pipeline open.
 *           A pipeline with vocab_log: into the log (cmd_vocab_log.c).
 *
 * The pipeline's spec (profile, modulus, capacity, min_count) comes from
 * --config (default: the embedded config), because snapshots are tied to it.
 *   hot:    the hottest indices per column (cmd_vocab_hot.c).
 * Exit codes: 0 done, 1 I/O or runtime failure, 2 usage, config or bad input.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_engine.h"
#include "pr_fs.h"
#include "pr_vocab.h"

static void pr__vocab_usage(FILE *f)
{
    fprintf(
        f,
        "usage: piperec vocab export [--config FILE] --pipeline P [--state DIR | --from-log] "
        "--output OUTDIR\n"
        "       piperec vocab import [--config FILE] --pipeline P [--state DIR] --input INDIR "
        "[--force]\n"
        "  export: the pipeline's vocabulary in state dir DIR (P.vocab + P.journal)\n"
        "          -> OUTDIR/<column>.tsv (index, value_hex, count; docs/formats.md).\n"
        "          --from-log (vocab_log): read from the log itself, to its end, instead:\n"
        "          every index the log gave, with no replica's state dir.\n"
        "  import: INDIR/<column>.tsv -> DIR/P.vocab; refuses when DIR already holds\n"
        "          a vocabulary for P unless --force (the journal is then removed).\n"
        "          With vocab_log: into the log instead (a log that gave no index\n"
        "          yet), which every replica started afterwards rebuilds from.\n"
        "          Stop the service first. With eviction both keep the notice counter\n"
        "          and the eviction statistics (the import continues the same notices).\n"
        "  --state defaults to the pipeline's state.dir; --pipeline to the first one.\n"
        "       piperec vocab hot --top K (--url http://HOST:PORT | --input DIR) ...\n"
        "  hot:    the K hottest indices per column (piperec vocab hot --help).\n"
        "       piperec vocab lookup --feature F (--state DIR | --input DIR) [--ids PATH|-] ...\n"
        "  lookup: the index each of your ids has (piperec vocab lookup --help).\n"
        "       piperec vocab migrate --from OLD_CONFIG [--config NEW_CONFIG] ...\n"
        "  migrate: keep the indices over a change of the features (piperec vocab migrate\n"
        "          --help).\n");
}

/* export: snapshot + journal replay -> dir. Returns the exit code. */
static int pr__vocab_export_state(pr_cli_vocab *v, const char *dir)
{
    char err[4096];
    int rc = pr_cli_vocab_load_state(v);
    if (rc)
        return rc;
    if ((rc = pr_vocab_export(v->eng, dir, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab export: %s\n", err);
        return pr_cli_exit_code(rc);
    }
    fprintf(stderr, "piperec vocab export: pipeline %s: %u columns -> %s\n", v->pc->name,
            (unsigned)pr_engine_spec(v->eng)->n_sparse, dir);
    return 0;
}

/* import, the state dir locked: dir -> a new snapshot (the old journal
 * removed). Returns the exit code. */
static int pr__vocab_import_locked(pr_cli_vocab *v, const char *dir, bool force)
{
    char err[4096];
    int rc;
    if ((v->have_snap || v->have_journal) && !force) {
        fprintf(stderr,
                "piperec vocab import: %s already holds a vocabulary for pipeline %s (%s); "
                "use --force to replace it\n",
                v->state, v->pc->name, v->have_snap ? v->snap : v->journal);
        return 2;
    }
    if ((rc = pr_vocab_import(v->eng, dir, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab import: %s\n", err);
        return pr_cli_exit_code(rc);
    }
    /* The old journal's indices belong to the replaced vocabulary. */
    if (v->have_journal && unlink(v->journal)) {
        fprintf(stderr, "piperec vocab import: %s: %s\n", v->journal, strerror(errno));
        return 1;
    }
    if ((rc = pr_vocab_save(v->eng, v->snap, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab import: %s\n", err);
        return 1;
    }
    fprintf(stderr, "piperec vocab import: pipeline %s: %s -> %s\n", v->pc->name, dir, v->snap);
    return 0;
}

/* import under the pipeline's lock, which the service holds while it runs
 * the pipeline: replacing its snapshot and journal under it would lose its
 * indices. Returns the exit code. */
static int pr__vocab_import_state(pr_cli_vocab *v, const char *dir, bool force)
{
    char err[4096], lock[4200];
    if (access(v->state, F_OK) != 0 && mkdir(v->state, 0777) && errno != EEXIST) {
        fprintf(stderr, "piperec vocab import: mkdir %s: %s\n", v->state, strerror(errno));
        return 1;
    }
    snprintf(lock, sizeof(lock), "%s/%s.lock", v->state, v->pc->name);
    int lfd = pr_lock_file(lock, err, sizeof(err));
    if (lfd == PR_ENOTSUP)
        fprintf(stderr,
                "piperec vocab import: %s: no lock on this file system; be sure the "
                "service is stopped\n",
                err);
    else if (lfd < 0) {
        fprintf(stderr, "piperec vocab import: %s%s\n", err,
                lfd == PR_ESTATE ? ": stop the service first" : "");
        return lfd == PR_ESTATE ? 2 : 1;
    }
    /* What the state dir holds, now that nothing else writes it. */
    v->have_snap = access(v->snap, F_OK) == 0;
    v->have_journal = access(v->journal, F_OK) == 0;
    int ret = pr__vocab_import_locked(v, dir, force);
    if (lfd >= 0)
        close(lfd);
    return ret;
}

/* 0, or 2 after saying that v has no state dir to read or write. */
static int pr__vocab_need_state(const pr_cli_vocab *v)
{
    if (v->state)
        return 0;
    fprintf(stderr, "%s: %s is required (pipeline %s has no state.dir)\n", v->cmd,
            strncmp(v->cmd, "piperec vocab ", 14) ? "--vocab DIR or --state DIR" : "--state",
            v->pc->name);
    return 2;
}

int pr_cli_vocab_open(const char *sub, const char *config, const char *pipeline, const char *state,
                      bool need_state, pr_cli_vocab *v)
{
    char err[4096];
    memset(v, 0, sizeof(*v));
    snprintf(v->cmd, sizeof(v->cmd), "%s%s", strncmp(sub, "piperec ", 8) ? "piperec vocab " : "",
             sub);
    int rc = config ? pr_config_load_file(config, &v->cfg, err, sizeof(err))
                    : pr_config_load_default(&v->cfg, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "%s: %s\n", v->cmd, err);
        return 2; /* a config that cannot be read is a usage error, as for run */
    }
    v->pc = pipeline ? pr_config_pipeline(v->cfg, pipeline) : &v->cfg->pipelines[0];
    if (!v->pc) {
        fprintf(stderr, "%s: no pipeline named '%s' in %s\n", v->cmd, pipeline, v->cfg->origin);
        return 2;
    }
    v->state = state ? state : v->pc->state.dir;
    if (need_state && pr__vocab_need_state(v))
        return 2;
    /* A shared vocabulary (vocab_log) keeps one tagged snapshot, no journal. */
    v->shared = v->pc->vocab_log.enabled;
    if (v->state) {
        pr_vocab_state_paths(v->state, v->pc->name, v->shared, v->snap, sizeof(v->snap), v->journal,
                             sizeof(v->journal));
        v->have_snap = access(v->snap, F_OK) == 0;
        v->have_journal = access(v->journal, F_OK) == 0;
    }
    /* One thread is plenty: nothing is processed. */
    v->eo = pr_config_engine_opts(v->cfg);
    v->eo.threads = 1;
    /* A declared schema's engine has one column per vocab feature. */
    v->espec = v->pc->spec;
    if (v->pc->features.declared &&
        pr_feature_engine_spec(&v->pc->features, &v->pc->spec, &v->espec, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s: pipeline %s: %s\n", v->cmd, v->pc->name, err);
        return 2;
    }
    if (!(v->eng = pr_engine_new(&v->espec, &v->eo, err, sizeof(err)))) {
        fprintf(stderr, "%s: pipeline %s: %s\n", v->cmd, v->pc->name, err);
        return 2;
    }
    return 0;
}

/* The snapshot's identity: a checkpoint renames a new one in (then empties
 * the journal), which changes it. */
static bool pr__same_file(bool had, const struct stat *a, const char *path)
{
    struct stat b;
    bool has = stat(path, &b) == 0;
    return had == has && (!had || (a->st_ino == b.st_ino && a->st_size == b.st_size &&
                                   a->st_mtim.tv_sec == b.st_mtim.tv_sec &&
                                   a->st_mtim.tv_nsec == b.st_mtim.tv_nsec));
}

/* A load's failure: kept in v->error and printed as "<cmd>: <why>". */
static void pr__load_fail(pr_cli_vocab *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void pr__load_fail(pr_cli_vocab *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->error, sizeof(v->error), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", v->cmd, v->error);
}

int pr_cli_vocab_load_state(pr_cli_vocab *v)
{
    char err[4096];
    int rc = 0;
    if (!v->have_snap && !v->have_journal) {
        pr__load_fail(v, "%s holds no vocabulary for pipeline %s (no %s)%s", v->state, v->pc->name,
                      v->snap,
                      v->shared ? ": a replica of a shared vocabulary (vocab_log) writes its "
                                  "first snapshot state.checkpoint_interval_s after it starts, "
                                  "and at a stop"
                                : "");
        return 2;
    }
    /* Beside a running service a checkpoint may replace the snapshot and
     * empty the journal between the two reads: an old snapshot with the new
     * journal would miss every index between them. Read again when the
     * snapshot changed under the read. */
    for (int attempt = 0; attempt < 5; attempt++) {
        struct stat st;
        bool had = stat(v->snap, &st) == 0;
        unsigned char tag[PR_SNAPSHOT_TAG_MAX];
        uint32_t tag_len = 0;
        rc = 0;
        if ((had && (rc = pr_vocab_load_tagged(v->eng, v->snap, tag, sizeof(tag), &tag_len, err,
                                               sizeof(err)))) ||
            (v->have_journal && !v->shared && access(v->journal, F_OK) == 0 &&
             (rc = pr_vocab_journal_replay(v->eng, v->journal, err, sizeof(err)))) ||
            pr__same_file(had, &st, v->snap))
            break;
        pr_engine_free(v->eng); /* a fresh engine for the next read */
        if (!(v->eng = pr_engine_new(&v->espec, &v->eo, err, sizeof(err)))) {
            rc = PR_ENOMEM;
            break;
        }
        rc = PR_ESTATE;
        snprintf(err, sizeof(err),
                 "%.3900s kept changing while it was read (a checkpoint every "
                 "few milliseconds?)",
                 v->snap);
    }
    if (rc) {
        pr__load_fail(v, "%s", err);
        return pr_cli_exit_code(rc);
    }
    /* A shared vocabulary's journal is the log: the snapshot alone is what
     * the state dir holds, up to a checkpoint interval behind the replica. */
    struct stat st;
    if (v->shared && stat(v->snap, &st) == 0)
        fprintf(stderr,
                "%s: %s is a replica's snapshot of a shared vocabulary, written "
                "%.0f s ago: indices the log gave since then are not in it (they are in the "
                "next snapshot, every state.checkpoint_interval_s)\n",
                v->cmd, v->snap, difftime(time(NULL), st.st_mtime));
    return 0;
}

/* The vocabulary into v->eng: a folder of <column>.tsv (a process output's
 * vocab/ when DIR has one), or the state dir. 0 or an exit code. */
static int pr__vocab_load_dir(pr_cli_vocab *v, const char *input)
{
    if (!input)
        return pr_cli_vocab_load_state(v);
    char dir[4096], err[4096];
    struct stat st;
    int e = stat(input, &st) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (e) {
        pr__load_fail(v, "%s: %s", input, strerror(e));
        return 2;
    }
    snprintf(dir, sizeof(dir), "%s/vocab", input);
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        snprintf(dir, sizeof(dir), "%s", input);
    int rc = pr_vocab_import(v->eng, dir, err, sizeof(err));
    if (rc) {
        pr__load_fail(v, "%s", err);
        return pr_cli_exit_code(rc);
    }
    return 0;
}

/* 0, or 2 after saying so when --input's meta.json (a `piperec process`
 * output) names another pipeline than the config's: its vocabulary is read
 * through the wrong features otherwise ("no column 'user'" from the
 * embedded Criteo config, or another pipeline's steps). */
static int pr__vocab_check_meta(pr_cli_vocab *v, const char *input, const char *config)
{
    char path[4096], buf[512];
    snprintf(path, sizeof(path), "%s/meta.json", input);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    static const char key[] = "\"pipeline\": \"";
    const char *p = strstr(buf, key), *e = p ? strchr(p + sizeof(key) - 1, '"') : NULL;
    if (!e)
        return 0;
    p += sizeof(key) - 1;
    if ((size_t)(e - p) == strlen(v->pc->name) && !memcmp(p, v->pc->name, (size_t)(e - p)))
        return 0;
    pr__load_fail(v,
                  "%s says pipeline '%.*s' wrote it, but this command reads it through "
                  "pipeline '%s' of %s: pass the --config%s it was processed with",
                  path, (int)(e - p), p, v->pc->name,
                  config ? config : "the embedded default config",
                  config ? " (and --pipeline)" : "");
    return 2;
}

int pr_cli_vocab_load(pr_cli_vocab *v, const char *config, const char *input)
{
    /* A two-pass config's vocabulary reads like a streaming one. */
    if (v->espec.count_mode == PR_COUNT_TWO_PASS) {
        char err[1024];
        v->espec.count_mode = PR_COUNT_STREAMING;
        pr_engine_free(v->eng);
        if (!(v->eng = pr_engine_new(&v->espec, &v->eo, err, sizeof(err)))) {
            pr__load_fail(v, "%s", err);
            return 2;
        }
    }
    v->error[0] = '\0';
    int ret = input ? pr__vocab_check_meta(v, input, config) : 0;
    return ret ? ret : pr__vocab_load_dir(v, input);
}

void pr_cli_vocab_close(pr_cli_vocab *v)
{
    pr_engine_free(v->eng);
    pr_config_free(v->cfg);
    memset(v, 0, sizeof(*v));
}

int pr_cli_cmd_vocab(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        pr__vocab_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "hot"))
        return pr_cli_vocab_hot(argc, argv);
    if (!strcmp(argv[1], "lookup"))
        return pr_cli_vocab_lookup(argc, argv);
    if (!strcmp(argv[1], "migrate"))
        return pr_cli_vocab_migrate(argc, argv);
    bool is_export = !strcmp(argv[1], "export");
    if (!is_export && strcmp(argv[1], "import")) {
        fprintf(stderr, "piperec vocab: unknown subcommand '%s'\n", argv[1]);
        pr__vocab_usage(stderr);
        return 2;
    }
    const char *config = NULL, *pipeline = NULL, *state = NULL, *dir = NULL;
    bool force = false, from_log = false;
    /* --force is import's, --from-log export's */
    const pr_cli_opt opts[] = {
        {"--config", &config, NULL},
        {"--pipeline", &pipeline, NULL},
        {"--state", &state, NULL},
        {is_export ? "--output" : "--input", &dir, NULL},
        {is_export ? "--from-log" : "--force", NULL, is_export ? &from_log : &force},
    };
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "vocab %s", argv[1]);
    int pr = pr_cli_parse_opts(cmd, argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__vocab_usage);
    if (pr)
        return pr == 1 ? 0 : pr;
    if (!dir) {
        fprintf(stderr, "piperec vocab %s: %s is required\n", argv[1],
                is_export ? "--output" : "--input");
        return 2;
    }
    pr_cli_vocab v;
    /* A shared vocabulary's import goes into its log, and --from-log exports
     * from it: neither needs a state dir. */
    int ret = pr_cli_vocab_open(argv[1], config, pipeline, state, false, &v);
    bool into_log = ret == 0 && !is_export && v.shared;
    if (ret) {
        /* said */
    } else if (from_log && (state || !v.shared)) {
        fprintf(stderr, "piperec vocab export: --from-log %s\n",
                state ? "reads the log, not a state dir: leave out --state"
                      : "needs a pipeline with vocab_log (its vocabulary is in the log)");
        ret = 2;
    } else if (into_log && (state || force)) {
        fprintf(stderr,
                "piperec vocab import: pipeline %s shares its vocabulary through vocab_log: "
                "the import goes into the log (topic %s), so --state and --force do not "
                "apply (docs/vocab-log.md, \"Seeding the log\")\n",
                v.pc->name, v.pc->vocab_log.topic);
        ret = 2;
    } else if (from_log) {
        ret = pr_cli_vocab_export_log(&v, dir);
    } else if (into_log) {
        ret = pr_cli_vocab_import_log(&v, dir);
    } else if (!(ret = pr__vocab_need_state(&v))) {
        ret = is_export ? pr__vocab_export_state(&v, dir) : pr__vocab_import_state(&v, dir, force);
    }
    pr_cli_vocab_close(&v);
    return ret;
}
