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
 *
 * The pipeline's spec (profile, modulus, capacity, min_count) comes from
 * --config (default: the embedded config), because snapshots are tied to it.
 *   hot:    the hottest indices per column (cmd_vocab_hot.c).
 * Exit codes: 0 done, 1 I/O or runtime failure, 2 usage, config or bad input.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_engine.h"

static void pr__vocab_usage(FILE *f)
{
    fprintf(
        f,
        "usage: piperec vocab export [--config FILE] --pipeline P [--state DIR] --output OUTDIR\n"
        "       piperec vocab import [--config FILE] --pipeline P [--state DIR] --input INDIR "
        "[--force]\n"
        "  export: the pipeline's vocabulary in state dir DIR (P.vocab + P.journal)\n"
        "          -> OUTDIR/<column>.tsv (index, value_hex, count; docs/formats.md).\n"
        "  import: INDIR/<column>.tsv -> DIR/P.vocab; refuses when DIR already holds\n"
        "          a vocabulary for P unless --force (the journal is then removed).\n"
        "          Stop the service first.\n"
        "  --state defaults to the pipeline's state.dir; --pipeline to the first one.\n"
        "       piperec vocab hot --top K (--url http://HOST:PORT | --input DIR) ...\n"
        "  hot:    the K hottest indices per column (piperec vocab hot --help).\n");
}

static int pr__rc_exit(int rc)
{
    return rc == PR_EIO || rc == PR_ENOMEM ? 1 : 2;
}

int pr_cli_cmd_vocab(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        pr__vocab_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "hot"))
        return pr_cli_vocab_hot(argc, argv);
    bool is_export = !strcmp(argv[1], "export");
    if (!is_export && strcmp(argv[1], "import")) {
        fprintf(stderr, "piperec vocab: unknown subcommand '%s'\n", argv[1]);
        pr__vocab_usage(stderr);
        return 2;
    }
    const char *config = NULL, *pipeline = NULL, *state = NULL, *dir = NULL;
    bool force = false;
    struct {
        const char *name;
        const char **val;
    } opts[] = {
        {"--config", &config},
        {"--pipeline", &pipeline},
        {"--state", &state},
        {is_export ? "--output" : "--input", &dir},
    };
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__vocab_usage(stdout);
            return 0;
        }
        if (!is_export && !strcmp(argv[i], "--force")) {
            force = true;
            continue;
        }
        size_t k = 0, nk = sizeof(opts) / sizeof(opts[0]);
        while (k < nk && strcmp(argv[i], opts[k].name))
            k++;
        if (k == nk || i + 1 >= argc) {
            fprintf(stderr, "piperec vocab %s: %s '%s'\n", argv[1],
                    k == nk ? "unknown option" : "missing value for", argv[i]);
            pr__vocab_usage(stderr);
            return 2;
        }
        *opts[k].val = argv[++i];
    }
    if (!dir) {
        fprintf(stderr, "piperec vocab %s: %s is required\n", argv[1],
                is_export ? "--output" : "--input");
        return 2;
    }

    char err[4096];
    pr_config *cfg = NULL;
    int rc = config ? pr_config_load_file(config, &cfg, err, sizeof(err))
                    : pr_config_load_default(&cfg, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec vocab %s: %s\n", argv[1], err);
        return rc == PR_EIO ? 1 : 2;
    }
    int ret = 2;
    pr_engine *eng = NULL;
    const pr_pipeline_cfg *pc = pipeline ? pr_config_pipeline(cfg, pipeline) : &cfg->pipelines[0];
    if (!pc) {
        fprintf(stderr, "piperec vocab %s: no pipeline named '%s' in %s\n", argv[1], pipeline,
                cfg->origin);
        goto out;
    }
    if (!state)
        state = pc->state.dir;
    if (!state) {
        fprintf(stderr, "piperec vocab %s: --state is required (pipeline %s has no state.dir)\n",
                argv[1], pc->name);
        goto out;
    }
    char snap[4096], journal[4096];
    /* A shared vocabulary (vocab_log) keeps one tagged snapshot, no journal. */
    bool shared = pc->vocab_log.enabled;
    snprintf(snap, sizeof(snap), "%s/%s.%s", state, pc->name, shared ? "vocablog" : "vocab");
    snprintf(journal, sizeof(journal), "%s/%s.journal", state, pc->name);
    if (shared && !is_export) {
        fprintf(stderr,
                "piperec vocab import: pipeline %s shares its vocabulary through "
                "vocab_log: the log decides every index (docs/vocab-log.md)\n",
                pc->name);
        goto out;
    }
    /* One thread is plenty: nothing is processed. */
    pr_engine_opts eo = pr_config_engine_opts(cfg);
    eo.threads = 1;
    /* A declared schema's engine has one column per vocab feature. */
    pr_pipeline_spec espec = pc->spec;
    if (pc->features.declared &&
        pr_feature_engine_spec(&pc->features, &pc->spec, &espec, err, sizeof(err)) < 0) {
        fprintf(stderr, "piperec vocab %s: pipeline %s: %s\n", argv[1], pc->name, err);
        goto out;
    }
    eng = pr_engine_new(&espec, &eo, err, sizeof(err));
    if (!eng) {
        fprintf(stderr, "piperec vocab %s: pipeline %s: %s\n", argv[1], pc->name, err);
        goto out;
    }
    bool have_snap = access(snap, F_OK) == 0, have_journal = access(journal, F_OK) == 0;
    if (is_export) {
        if (!have_snap && !have_journal) {
            fprintf(stderr,
                    "piperec vocab export: %s holds no vocabulary for pipeline %s (no %s)\n", state,
                    pc->name, snap);
            goto out;
        }
        unsigned char tag[PR_SNAPSHOT_TAG_MAX];
        uint32_t tag_len = 0;
        if (shared)
            have_journal = false;
        if ((have_snap && (rc = pr_engine_vocab_load_tagged(eng, snap, tag, sizeof(tag), &tag_len,
                                                            err, sizeof(err)))) ||
            (have_journal &&
             (rc = pr_engine_vocab_journal_replay(eng, journal, err, sizeof(err)))) ||
            (rc = pr_engine_vocab_export(eng, dir, err, sizeof(err)))) {
            fprintf(stderr, "piperec vocab export: %s\n", err);
            ret = pr__rc_exit(rc);
            goto out;
        }
        fprintf(stderr, "piperec vocab export: pipeline %s: %u columns -> %s\n", pc->name,
                (unsigned)espec.n_sparse, dir);
    } else {
        if ((have_snap || have_journal) && !force) {
            fprintf(stderr,
                    "piperec vocab import: %s already holds a vocabulary for pipeline %s (%s); "
                    "use --force to replace it\n",
                    state, pc->name, have_snap ? snap : journal);
            goto out;
        }
        if ((rc = pr_engine_vocab_import(eng, dir, err, sizeof(err)))) {
            fprintf(stderr, "piperec vocab import: %s\n", err);
            ret = pr__rc_exit(rc);
            goto out;
        }
        if (access(state, F_OK) != 0 && mkdir(state, 0777) && errno != EEXIST) {
            fprintf(stderr, "piperec vocab import: mkdir %s: %s\n", state, strerror(errno));
            ret = 1;
            goto out;
        }
        /* The old journal's indices belong to the replaced vocabulary. */
        if (have_journal && unlink(journal)) {
            fprintf(stderr, "piperec vocab import: %s: %s\n", journal, strerror(errno));
            ret = 1;
            goto out;
        }
        if ((rc = pr_engine_vocab_save(eng, snap, err, sizeof(err)))) {
            fprintf(stderr, "piperec vocab import: %s\n", err);
            ret = 1;
            goto out;
        }
        fprintf(stderr, "piperec vocab import: pipeline %s: %s -> %s\n", pc->name, dir, snap);
    }
    ret = 0;
out:
    pr_engine_free(eng);
    pr_config_free(cfg);
    return ret;
}
