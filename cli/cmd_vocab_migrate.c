/*
 * cmd_vocab_migrate.c — `piperec vocab migrate --from OLD.yaml`: carry a
 * pipeline's vocabularies over a change of its features.
 *
 * Why: a snapshot is tied to the pipeline's spec (its fingerprint covers the
 * columns and their settings), so a team that adds a feature to a running
 * pipeline would otherwise have to drop every vocabulary, and with it every
 * index its model was trained on. Columns are matched by name instead: the
 * state dir's vocabulary, read with the config it was written under (OLD),
 * is exported as text, each column the new config still has is imported
 * with its indices (and eviction state) unchanged, a new column starts
 * empty, a column the new config dropped is reported and left out, and a
 * declared feature whose values get other keys now (its paths, default or
 * operators before vocab changed: pr_feature_vocab_input_fp) starts empty
 * too. A column whose settings changed is checked by the import as any
 * dictionary is (indices within capacity, keys below the modulus...).
 *
 * The state dir is locked (the service must be stopped, as for import), the
 * journal is folded into the new snapshot and removed. Not for a shared
 * vocabulary (vocab_log): the log decides every index there.
 * Exit codes: 0 done, 1 I/O failure, 2 usage, config or a column that does
 * not fit.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_fs.h"
#include "pr_vocab.h"

static void pr__migrate_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec vocab migrate --from OLD_CONFIG [--config NEW_CONFIG] [--pipeline P]\n"
            "                             [--state DIR]\n"
            "  Carries a pipeline's vocabularies over a change of its features: the state\n"
            "  dir's vocabulary, written under OLD_CONFIG, becomes the one NEW_CONFIG (default\n"
            "  the embedded config) reads. Columns match by name: kept ones keep every index,\n"
            "  new ones start empty, dropped ones are reported. Stop the service first.\n");
}

static bool pr__has_column(const pr_pipeline_spec *s, const char *name)
{
    for (uint32_t c = 0; c < s->n_sparse; c++)
        if (!strcmp(s->sparse[c].name, name))
            return true;
    return false;
}

/* Does new column `nc` keep the old config's column of its name? Not when
 * its values get other keys now (a declared feature whose paths, default or
 * operators before vocab changed): its indices would name other values. */
static bool pr__kept(const pr_pipeline_spec *os, const pr_sparse_col_spec *nc, bool *changed)
{
    *changed = false;
    for (uint32_t c = 0; c < os->n_sparse; c++)
        if (!strcmp(os->sparse[c].name, nc->name)) {
            uint64_t a = os->sparse[c].input_fp, b = nc->input_fp;
            *changed = a && b && a != b;
            return !*changed;
        }
    return false;
}

/* The "notice_next N" of a kept column's state line, or 0 when none. */
static unsigned long long pr__notice_next_of(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    unsigned long long n = 0;
    while (f && fgets(line, sizeof(line), f) && line[0] == '#')
        if (sscanf(line, "#! piperec-state notice_next %llu", &n) == 1)
            break;
    if (f)
        fclose(f);
    return n;
}

static void pr__rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4600];
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "%.4200s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* Old vocabulary -> text in tmp -> the new engine -> the new snapshot. */
static int pr__migrate(pr_cli_vocab *o, pr_cli_vocab *n, const char *tmp)
{
    char err[4096];
    const pr_pipeline_spec *os = &o->espec, *ns = &n->espec;
    int rc = pr_vocab_export(o->eng, tmp, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec vocab migrate: %s\n", err);
        return pr_cli_exit_code(rc);
    }
    unsigned long long notice_next = 0;
    char path[4400];
    bool changed;
    for (uint32_t c = 0; c < ns->n_sparse && !notice_next; c++)
        if (pr__kept(os, &ns->sparse[c], &changed)) {
            snprintf(path, sizeof(path), "%s/%s.tsv", tmp, ns->sparse[c].name);
            notice_next = pr__notice_next_of(path);
        }
    for (uint32_t c = 0; c < os->n_sparse; c++)
        if (!pr__has_column(ns, os->sparse[c].name)) {
            fprintf(stderr, "piperec vocab migrate: column %s: not in the new config, dropped\n",
                    os->sparse[c].name);
            snprintf(path, sizeof(path), "%s/%s.tsv", tmp, os->sparse[c].name);
            unlink(path);
        }
    /* A new column's empty file comes from the new (still empty) engine: the
     * header and state line the import expects, with the notice counter the
     * kept columns carry (every file must carry the same one). */
    pr_engine_vocab_notices_set_next(n->eng, notice_next);
    for (uint32_t c = 0; c < ns->n_sparse; c++) {
        bool kept = pr__kept(os, &ns->sparse[c], &changed);
        if (!kept && (rc = pr_vocab_export_column(n->eng, tmp, c, err, sizeof(err)))) {
            fprintf(stderr, "piperec vocab migrate: %s\n", err);
            return pr_cli_exit_code(rc);
        }
        fprintf(stderr, "piperec vocab migrate: column %s: %s\n", ns->sparse[c].name,
                kept      ? "kept, every index unchanged"
                : changed ? "its values get other keys now (paths, default or operators before "
                            "vocab changed), starts empty"
                          : "new, starts empty");
    }
    if ((rc = pr_vocab_import(n->eng, tmp, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab migrate: %s (nothing changed in %s)\n", err, n->state);
        return pr_cli_exit_code(rc);
    }
    /* The journal's records are folded into the export: the new snapshot
     * replaces both. */
    if ((rc = pr_vocab_save(n->eng, n->snap, err, sizeof(err)))) {
        fprintf(stderr, "piperec vocab migrate: %s\n", err);
        return 1;
    }
    if (unlink(n->journal) && errno != ENOENT) {
        fprintf(stderr, "piperec vocab migrate: %s: %s\n", n->journal, strerror(errno));
        return 1;
    }
    fprintf(stderr, "piperec vocab migrate: pipeline %s: %u column(s) -> %s\n", n->pc->name,
            (unsigned)ns->n_sparse, n->snap);
    return 0;
}

int pr_cli_vocab_migrate(int argc, char **argv)
{
    const char *from = NULL, *config = NULL, *pipeline = NULL, *state = NULL;
    const pr_cli_opt opts[] = {{"--from", &from, NULL},
                               {"--config", &config, NULL},
                               {"--pipeline", &pipeline, NULL},
                               {"--state", &state, NULL}};
    int pr = pr_cli_parse_opts("vocab migrate", argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__migrate_usage);
    if (pr)
        return pr == 1 ? 0 : pr;
    if (!from) {
        fprintf(stderr, "piperec vocab migrate: --from OLD_CONFIG is required (the config the "
                        "state dir's vocabulary was written under)\n");
        return 2;
    }
    pr_cli_vocab o, n;
    memset(&n, 0, sizeof(n));
    int ret = pr_cli_vocab_open("migrate", from, pipeline, state, true, &o);
    if (!ret)
        ret = pr_cli_vocab_open("migrate", config, pipeline, state ? state : o.state, true, &n);
    if (!ret && strcmp(o.pc->name, n.pc->name)) {
        fprintf(stderr,
                "piperec vocab migrate: pipeline %s in --from, %s in the new config: "
                "name the same one with --pipeline\n",
                o.pc->name, n.pc->name);
        ret = 2;
    }
    if (!ret && (o.shared || n.shared)) {
        fprintf(stderr,
                "piperec vocab migrate: pipeline %s shares its vocabulary through "
                "vocab_log: the log decides every index (docs/vocab-log.md)\n",
                n.pc->name);
        ret = 2;
    }
    char lock[4200], err[4096], tmp[4200];
    int lfd = -1;
    if (!ret) {
        snprintf(lock, sizeof(lock), "%s/%s.lock", n.state, n.pc->name);
        lfd = pr_lock_file(lock, err, sizeof(err));
        if (lfd < 0 && lfd != PR_ENOTSUP) {
            fprintf(stderr, "piperec vocab migrate: %s%s\n", err,
                    lfd == PR_ESTATE ? ": stop the service first" : "");
            ret = lfd == PR_ESTATE ? 2 : 1;
        }
    }
    if (!ret)
        ret = pr_cli_vocab_load_state(&o);
    if (!ret) {
        snprintf(tmp, sizeof(tmp), "%s/.migrate-%s-XXXXXX", n.state, n.pc->name);
        if (!mkdtemp(tmp)) {
            fprintf(stderr, "piperec vocab migrate: %s: %s\n", tmp, strerror(errno));
            ret = 1;
        } else {
            ret = pr__migrate(&o, &n, tmp);
            pr__rm_dir(tmp);
        }
    }
    if (lfd >= 0)
        close(lfd);
    pr_cli_vocab_close(&o);
    pr_cli_vocab_close(&n);
    return ret;
}
