/*
 * cmd_serve.c — `piperec transform` and `piperec serve`: the rows a model
 * gets for events, with a pipeline's vocabulary as it stands, without
 * adding to it (pr_service.h, "transform" and "serve").
 *
 * Why: a model in serving must see the features it was trained on, built
 * by the same code. `transform` answers a file or a pipe (a held-out day, a
 * batch scoring job, a check of what a request becomes); `serve` answers
 * HTTP for a model server, and reloads the vocabulary when the training
 * side's state changes, so new ids reach serving without a restart.
 *
 * The vocabulary comes from a `piperec process` output or `vocab export`
 * folder (--vocab DIR), or a state dir as the service recovers it (--state
 * DIR, default the pipeline's state.dir), as `vocab lookup` reads them
 * (pr_cli_vocab_load). Exit codes: 0, 1 runtime, 2 usage or config.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_log.h"
#include "pr_service.h"
#include "pr_vocab.h"

#define PR__SERVE_LISTEN "127.0.0.1:9470"
#define PR__FLUSH_BYTES  (1u << 20) /* transform: write the output in pieces this large */

static void pr__transform_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec transform [--config FILE] [--pipeline P] [--vocab DIR | --state DIR]\n"
            "                         [--input PATH|-] [--output PATH|-] [--framing F]\n"
            "                         [--unseen INDEX]\n"
            "  The row each event becomes with the pipeline's vocabulary as it stands: its\n"
            "  decoder and operators, a known id's index, OOV for an id without one. Nothing\n"
            "  is added to the vocabulary; schema.filter and downsample do not apply.\n"
            "  --vocab DIR: a `piperec process` output (its vocab/) or a `vocab export`;\n"
            "  --state DIR: a state dir (snapshot + journal), default the pipeline's state.dir.\n"
            "  --input (default -): events in source.format; --framing lines (json,\n"
            "           criteo_tsv: the default), delimited (avro, protobuf: varint-length\n"
            "           records, the default) or single (the whole input is one event).\n"
            "  --output (default -): one JSON line per event, in order:\n"
            "           {\"labels\":{..},\"dense\":{..},\"sparse\":{..}} or "
            "{\"error\":..,\"detail\":..}\n"
            "  --unseen INDEX: profile dlrm (no OOV index): the index of an id without one\n"
            "           (default 0).\n");
}

static void pr__serve_usage(FILE *f)
{
    fprintf(f,
            "usage: piperec serve [--config FILE] [--pipeline P]\n"
            "                     [--vocab DIR | --state DIR | --from-log]\n"
            "                     [--listen HOST:PORT] [--threads N] [--reload-s S]\n"
            "                     [--unseen INDEX]\n"
            "  `piperec transform` over HTTP, for a model server:\n"
            "    POST /v1/transform   events in the body (?framing=lines|delimited|single),\n"
            "                         one JSON line per event back\n"
            "    GET /healthz, /metrics (Prometheus), /v1/status (JSON)\n"
            "  --listen (default " PR__SERVE_LISTEN "); HTTPS with the config's http.tls.\n"
            "  --threads N (1..64; default the CPUs this process may use, at most 16):\n"
            "           requests answered at once (a thread per connection, at most 64).\n"
            "  --reload-s S (default 60, 0 never): look at the vocabulary every S seconds and\n"
            "           load it again once its files changed and then held still for one\n"
            "           look; requests use the old one until the new one is whole.\n"
            "  --from-log: a pipeline with vocab_log: follow the shared vocabulary log as a\n"
            "           replica does, never writing it; new indices apply between requests.\n"
            "  --vocab, --state, --unseen: as for piperec transform. SIGTERM or SIGINT stops.\n");
}

/* --unseen into *out: 0 or 2 after a message. */
static int pr__parse_unseen(const char *cmd, const char *arg, int64_t *out)
{
    long v = 0;
    if (arg && pr_cli_parse_long(arg, 0, INT32_MAX, &v)) {
        fprintf(stderr, "piperec %s: --unseen '%s': an index 0..%d\n", cmd, arg, INT32_MAX);
        return 2;
    }
    *out = v;
    return 0;
}

/* --framing into *fr (default: by format): 0 or 2 after a message. */
static int pr__parse_framing(const char *cmd, const char *arg, const pr_pipeline_cfg *pc,
                             pr_framing *fr)
{
    *fr = pr_framing_default((pr_msg_format)pc->source.format);
    if (!arg)
        return 0;
    for (int k = 0; k < PR_FRAMING__COUNT; k++)
        if (!strcmp(arg, pr_framing_names[k])) {
            *fr = (pr_framing)k;
            return 0;
        }
    fprintf(stderr, "piperec %s: --framing '%s': one of lines, delimited, single\n", cmd, arg);
    return 2;
}

/* ---------------------------------------------------------------- transform */

/* The whole input: mapped when it is a regular file, else read. */
typedef struct pr__input {
    char *buf;
    size_t len;
    bool mapped;
} pr__input;

static int pr__input_read(const char *path, pr__input *in)
{
    *in = (pr__input){0};
    FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
    if (!f) {
        fprintf(stderr, "piperec transform: --input %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct stat st;
    if (f != stdin && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fileno(f), 0);
        if (m != MAP_FAILED) {
            *in = (pr__input){m, (size_t)st.st_size, true};
            fclose(f);
            return 0;
        }
    }
    size_t cap = 0;
    for (;;) {
        if (in->len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(in->buf, cap);
            if (!nb)
                break;
            in->buf = nb;
        }
        size_t n = fread(in->buf + in->len, 1, cap - in->len, f);
        in->len += n;
        if (n == 0)
            break;
    }
    int bad = ferror(f) || in->len == cap;
    if (f != stdin)
        fclose(f);
    if (bad) {
        fprintf(stderr, "piperec transform: --input %s: %s\n", path,
                in->len == cap ? "out of memory" : "read failed");
        return 1;
    }
    return 0;
}

static void pr__input_free(pr__input *in)
{
    if (in->mapped)
        munmap(in->buf, in->len);
    else
        free(in->buf);
}

/* Write mb out when it holds `atleast` bytes (0: whatever it holds). */
static int pr__drain(pr_mbuf *mb, FILE *out, size_t atleast)
{
    if (mb->len < atleast || !mb->len)
        return 0;
    int rc = fwrite(mb->buf, 1, mb->len, out) == mb->len ? 0 : 1;
    pr_mbuf_reset(mb);
    return rc;
}

static int pr__transform_run(pr_cli_vocab *v, pr_framing fr, int64_t unseen, const pr__input *in,
                             FILE *out)
{
    char err[1024];
    pr_transform *t = NULL;
    pr_transform_opts to = {.pc = v->pc, .eng = v->eng, .unseen = unseen};
    if (pr_transform_new(&to, &t, err, sizeof(err))) {
        fprintf(stderr, "piperec transform: %s\n", err);
        return 2;
    }
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    const char *rec;
    size_t n, at = 0;
    int rc = 0, wrc = 0;
    /* The framing first, whole: a broken input is refused before any line. */
    int bad = pr_framing_check(fr, in->buf, in->len, err, sizeof(err));
    while (!bad && !rc && !wrc &&
           pr_framing_next(fr, in->buf, in->len, &at, &rec, &n, err, sizeof(err)) == 1) {
        rc = pr_transform_event(t, rec, n, &mb, err, sizeof(err));
        wrc = pr__drain(&mb, out, PR__FLUSH_BYTES);
    }
    rc = rc ? rc : bad;
    if (!rc && !wrc && !(rc = pr_transform_flush(t, &mb, err, sizeof(err))))
        wrc = pr__drain(&mb, out, 0);
    pr_transform_counts c;
    pr_transform_get_counts(t, &c);
    pr_transform_free(t);
    pr_mbuf_fini(&mb);
    if (rc)
        fprintf(stderr, "piperec transform: %s\n", err);
    else if (wrc)
        fprintf(stderr, "piperec transform: writing the output: %s\n", strerror(errno));
    fprintf(stderr,
            "piperec transform: pipeline %s (%s, profile %s): %" PRIu64 " events, %" PRIu64
            " rows, %" PRIu64 " rejected, %" PRIu64 " ids without an index\n",
            v->pc->name, pr_msg_format_name(v->pc->source.format),
            pr_vocab_profile_name(v->espec.profile), c.events, c.rows, c.rejected, c.unseen);
    return bad ? 2 : rc || wrc ? 1 : 0;
}

int pr_cli_cmd_transform(int argc, char **argv)
{
    const char *config = NULL, *pipeline = NULL, *state = NULL, *vocab = NULL, *input = "-",
               *output = "-", *unseen_s = NULL, *framing = NULL;
    const pr_cli_opt opts[] = {
        {"--config", &config, NULL},   {"--pipeline", &pipeline, NULL}, {"--state", &state, NULL},
        {"--vocab", &vocab, NULL},     {"--input", &input, NULL},       {"--output", &output, NULL},
        {"--unseen", &unseen_s, NULL}, {"--framing", &framing, NULL},
    };
    int pr = pr_cli_parse_opts("transform", argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__transform_usage);
    if (pr)
        return pr == 1 ? 0 : pr;
    int64_t unseen;
    if (state && vocab) {
        fprintf(stderr, "piperec transform: give --state or --vocab, not both\n");
        return 2;
    }
    if (pr__parse_unseen("transform", unseen_s, &unseen))
        return 2;
    pr_cli_vocab v;
    pr_framing fr;
    pr__input in = {0};
    int ret = pr_cli_vocab_open("piperec transform", config, pipeline, state, !vocab, &v);
    if (!ret && !(ret = pr__parse_framing("transform", framing, v.pc, &fr)) &&
        !(ret = pr_cli_vocab_load(&v, config, vocab)) && !(ret = pr__input_read(input, &in))) {
        FILE *out = strcmp(output, "-") ? fopen(output, "we") : stdout;
        if (!out) {
            fprintf(stderr, "piperec transform: --output %s: %s\n", output, strerror(errno));
            ret = 1;
        } else {
            ret = pr__transform_run(&v, fr, unseen, &in, out);
            if ((out == stdout ? fflush(out) : fclose(out)) != 0 && !ret) {
                fprintf(stderr, "piperec transform: --output %s: %s\n", output, strerror(errno));
                ret = 1;
            }
        }
    }
    pr__input_free(&in);
    pr_cli_vocab_close(&v);
    return ret;
}

/* ---------------------------------------------------------------- serve */

/* A stamp of the vocabulary's files (a folder's *.tsv, or the state dir's
 * snapshot and journal): inode, size and mtime summed, so that any rewrite,
 * rename or append changes it. */
static uint64_t pr__stamp_file(const char *path)
{
    struct stat st;
    if (stat(path, &st))
        return 0x9e3779b97f4a7c15ULL; /* absent: a value of its own */
    return (uint64_t)st.st_ino * 31 + (uint64_t)st.st_size * 131 +
           (uint64_t)st.st_mtim.tv_sec * 1000003 + (uint64_t)st.st_mtim.tv_nsec;
}

static uint64_t pr__vocab_stamp(const pr_cli_vocab *v, const char *dir)
{
    if (!dir)
        return pr__stamp_file(v->snap) * 7 + pr__stamp_file(v->journal);
    char path[4200];
    snprintf(path, sizeof(path), "%s/vocab", dir);
    struct stat st;
    const char *d = stat(path, &st) == 0 && S_ISDIR(st.st_mode) ? path : dir;
    DIR *dp = opendir(d);
    uint64_t h = 0;
    struct dirent *e;
    while (dp && (e = readdir(dp))) {
        if (e->d_name[0] == '.')
            continue; /* ., .., and a copy's hidden temporaries */
        char f[4500];
        snprintf(f, sizeof(f), "%s/%s", d, e->d_name);
        h += pr__stamp_file(f);
    }
    if (dp)
        closedir(dp);
    return h;
}

/* A fresh engine with the vocabulary as it is now into *eng: the exit code. */
static int pr__serve_load(pr_cli_vocab *v, const char *config, const char *dir, pr_engine **eng)
{
    char err[1024];
    pr_engine *keep = v->eng;
    if (!(v->eng = pr_engine_new(&v->espec, &v->eo, err, sizeof(err)))) {
        v->eng = keep;
        snprintf(v->error, sizeof(v->error), "%s", err);
        fprintf(stderr, "piperec serve: %s\n", err);
        return 1;
    }
    v->have_snap = v->state && access(v->snap, F_OK) == 0;
    v->have_journal = v->state && access(v->journal, F_OK) == 0;
    int ret = pr_cli_vocab_load(v, config, dir);
    if (ret)
        pr_engine_free(v->eng);
    else
        *eng = v->eng;
    v->eng = keep;
    return ret;
}

typedef struct pr__serve_args {
    const char *config, *dir, *listen;
    int64_t unseen, reload_s;
    unsigned threads;
    bool from_log;
} pr__serve_args;

/* --threads into *out (default: the CPUs this process may run on, at most
 * 16): 0 or 2 after a message. */
static int pr__parse_threads(const char *arg, unsigned *out)
{
    if (!arg) {
        cpu_set_t cs;
        int n = sched_getaffinity(0, sizeof(cs), &cs) == 0 ? CPU_COUNT(&cs) : 1;
        *out = n < 1 ? 1 : n > 16 ? 16 : (unsigned)n;
        return 0;
    }
    long n;
    if (pr_cli_parse_long(arg, 1, PR_SERVE_MAX_THREADS, &n)) {
        fprintf(stderr, "piperec serve: --threads '%s': 1..%d requests at once\n", arg,
                PR_SERVE_MAX_THREADS);
        return 2;
    }
    *out = (unsigned)n;
    return 0;
}

/* --from-log: the shared vocabulary log, read as a replica reads it but
 * never written, its records applied between requests. */
typedef struct pr__serve_log {
    pr_vocablog *vl;
    int64_t unseen;
    int rc;
    char err[1024];
} pr__serve_log;

static void pr__log_poll(void *opaque, pr_engine *eng)
{
    (void)eng;
    pr__serve_log *lg = opaque;
    lg->rc = pr_vocablog_poll(lg->vl, 0, lg->err, sizeof(lg->err));
}

/* The log closed (which unfreezes the engine), the engine frozen again. */
static void pr__log_close(void *opaque, pr_engine *eng)
{
    pr__serve_log *lg = opaque;
    pr_vocablog_free(lg->vl);
    lg->vl = NULL;
    lg->rc = pr_engine_vocab_serve(eng, lg->unseen, lg->err, sizeof(lg->err));
}

/* A fresh engine caught up with the log into *eng, the log into lg: the
 * exit code. */
static int pr__serve_log_open(pr_cli_vocab *v, pr__serve_log *lg, pr_engine **eng)
{
    char err[1024];
    if (!v->pc->vocab_log.enabled) {
        fprintf(stderr, "piperec serve: --from-log: pipeline %s has no vocab_log section\n",
                v->pc->name);
        return 2;
    }
    if (!(*eng = pr_engine_new(&v->espec, &v->eo, err, sizeof(err)))) {
        fprintf(stderr, "piperec serve: %s\n", err);
        return 1;
    }
    pr_vocablog_opts o = {.cfg = &v->pc->vocab_log,
                          .pipeline = v->pc->name,
                          .replica = "piperec-serve",
                          .eng = *eng,
                          .read_only = true};
    int rc = pr_vocablog_new(&o, &lg->vl, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec serve: pipeline %s: %s\n", v->pc->name, err);
        pr_engine_free(*eng);
        *eng = NULL;
        return pr_cli_exit_code(rc);
    }
    return 0;
}

/* Between two looks at the signals: the log's new records applied (one
 * step: at most 4096 records, pr_vocablog_poll, with requests held off), or
 * the vocabulary's files looked at (and loaded once they held still).
 * True when the log has more to apply at once: the caller looks again
 * after a short pause, so a backlog is applied in steps that requests
 * run between. */
typedef struct pr__serve_watch {
    uint64_t stamp, seen;
    int64_t next_ns;
} pr__serve_watch;

static bool pr__serve_tick(pr_cli_vocab *v, const pr__serve_args *a, pr_serve *s, pr__serve_log *lg,
                           pr__serve_watch *w, const char *src)
{
    char err[1024];
    if (lg->vl) {
        pr_vocablog_stats st;
        pr_vocablog_get_stats(lg->vl, &st);
        uint64_t before = st.records_applied;
        pr_serve_locked(s, pr__log_poll, lg);
        if (lg->rc) {
            pr_warn("serve: vocabulary log: %s", lg->err);
            pr_serve_load_failed(s, lg->err);
        }
        pr_vocablog_get_stats(lg->vl, &st);
        pr_serve_set_log_position(s, st.applied_offset, st.end_offset);
        return !lg->rc && st.records_applied != before && st.applied_offset < st.end_offset;
    }
    if (!a->reload_s || pr_mono_ns() < w->next_ns)
        return false;
    w->next_ns = pr_mono_ns() + a->reload_s * 1000000000LL;
    /* A folder: load once its files changed and then held still for one
     * look, so a vocabulary being written (a `vocab export`, a copy) is not
     * read half way. */
    uint64_t now = pr__vocab_stamp(v, a->dir);
    bool settled = now == w->seen || !a->dir; /* a state dir: a checkpoint renames its
                                               * snapshot in whole, and a journal that
                                               * grows is read as far as it goes */
    w->seen = now;
    if (now == w->stamp || !settled)
        return false;
    pr_engine *eng = NULL;
    if (pr__serve_load(v, a->config, a->dir, &eng)) {
        pr_serve_load_failed(s, v->error[0] ? v->error : "the reload failed: see the log");
        w->seen = 0; /* the stamp stays: tried again once the files hold still */
        return false;
    }
    if (pr_serve_swap(s, eng, err, sizeof(err))) {
        pr_serve_load_failed(s, err);
        return false;
    }
    w->stamp = now;
    pr_info("serve: vocabulary reloaded from %s", src);
    return false;
}

static int pr__serve_loop(pr_cli_vocab *v, const pr__serve_args *a)
{
    char err[1024], src[4300];
    sigset_t sigs;
    pr_cli_block_signals(&sigs);
    if (a->from_log)
        snprintf(src, sizeof(src), "log %s", v->pc->vocab_log.topic);
    else
        snprintf(src, sizeof(src), "%s %s", a->dir ? "vocab" : "state", a->dir ? a->dir : v->state);
    const pr_http_tls_cfg *tls = &v->cfg->http.tls;
    pr_serve_opts so = {.pc = v->pc,
                        .listen = a->listen,
                        .unseen = a->unseen,
                        .vocab_source = src,
                        .threads = a->threads};
    if (tls->enabled)
        so.tls_cert = tls->cert_file, so.tls_key = tls->key_file, so.tls_ca = tls->ca_file;
    pr__serve_watch w = {.stamp = a->from_log ? 0 : pr__vocab_stamp(v, a->dir)};
    w.seen = w.stamp;
    w.next_ns = pr_mono_ns() + a->reload_s * 1000000000LL;
    pr__serve_log lg = {.unseen = a->unseen};
    pr_engine *eng = NULL;
    int ret =
        a->from_log ? pr__serve_log_open(v, &lg, &eng) : pr__serve_load(v, a->config, a->dir, &eng);
    pr_serve *s = NULL;
    if (ret)
        return ret;
    if (pr_serve_start(&so, eng, &s, err, sizeof(err))) {
        fprintf(stderr, "piperec serve: %s\n", err);
        pr_vocablog_free(lg.vl); /* before the engine it borrows */
        pr_engine_free(eng);
        return 2;
    }
    fprintf(stderr,
            "piperec serve: pipeline %s (%s, profile %s), vocabulary from %s: listening on "
            "%s://%.*s:%u (POST /v1/transform), %u thread(s)\n",
            v->pc->name, pr_msg_format_name(v->pc->source.format),
            pr_vocab_profile_name(v->espec.profile), src, tls->enabled ? "https" : "http",
            (int)(strrchr(a->listen, ':') - a->listen), a->listen, (unsigned)pr_serve_port(s),
            pr_serve_threads(s));
    int sig;
    bool more = pr__serve_tick(v, a, s, &lg, &w, src); /* the log's position, from the start */
    while ((sig = pr_cli_wait_signal(&sigs, more ? 1 : lg.vl ? 100 : 200)) == 0)
        more = pr__serve_tick(v, a, s, &lg, &w, src);
    if (lg.vl)
        pr_serve_locked(s, pr__log_close, &lg);
    pr_transform_counts c;
    pr_serve_get_counts(s, &c);
    pr_serve_stop(s);
    fprintf(stderr,
            "piperec serve: signal %d: stopped after %" PRIu64 " events (%" PRIu64 " rows, %" PRIu64
            " rejected, %" PRIu64 " ids without an index)\n",
            sig, c.events, c.rows, c.rejected, c.unseen);
    return 0;
}

int pr_cli_cmd_serve(int argc, char **argv)
{
    const char *config = NULL, *pipeline = NULL, *state = NULL, *vocab = NULL,
               *listen = PR__SERVE_LISTEN, *unseen_s = NULL, *reload_s = "60", *threads = NULL;
    bool from_log = false;
    const pr_cli_opt opts[] = {
        {"--from-log", NULL, &from_log}, {"--config", &config, NULL},
        {"--pipeline", &pipeline, NULL}, {"--state", &state, NULL},
        {"--vocab", &vocab, NULL},       {"--listen", &listen, NULL},
        {"--unseen", &unseen_s, NULL},   {"--reload-s", &reload_s, NULL},
        {"--threads", &threads, NULL},
    };
    int pr = pr_cli_parse_opts("serve", argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0]),
                               pr__serve_usage);
    if (pr)
        return pr == 1 ? 0 : pr;
    pr__serve_args a = {.config = config, .dir = vocab, .listen = listen, .from_log = from_log};
    long rs;
    if (pr_cli_parse_long(reload_s, 0, 86400, &rs)) {
        fprintf(stderr, "piperec serve: --reload-s '%s': seconds 0..86400 (0: never)\n", reload_s);
        return 2;
    }
    a.reload_s = rs;
    if (pr__parse_threads(threads, &a.threads))
        return 2;
    if ((state != NULL) + (vocab != NULL) + from_log > 1) {
        fprintf(stderr, "piperec serve: give one of --state, --vocab and --from-log\n");
        return 2;
    }
    if (!strrchr(listen, ':')) {
        fprintf(stderr, "piperec serve: --listen '%s': expected host:port\n", listen);
        return 2;
    }
    if (pr__parse_unseen("serve", unseen_s, &a.unseen))
        return 2;
    pr_cli_vocab v;
    int ret = pr_cli_vocab_open("piperec serve", config, pipeline, state, !vocab && !from_log, &v);
    if (!ret)
        ret = pr__serve_loop(&v, &a);
    pr_cli_vocab_close(&v);
    return ret;
}
