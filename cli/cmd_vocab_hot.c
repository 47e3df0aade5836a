/*
 * cmd_vocab_hot.c — `piperec vocab hot --top K`: the hot indices per sparse
 * column, for a trainer to pin on the GPU (FAE), written as the TSV of
 * docs/formats.md ("Hot indices"). A declared schema's columns are its
 * vocab features, by name (a list feature counts every element).
 *
 * Two sources:
 *   --url http://HOST:PORT  a running service: the column names from
 *                           GET /v1/status, then GET /v1/hot per column
 *                           (the decayed sketch's estimate: what is hot now);
 *   --input DIR             a vocabulary export or an offline vocab/ folder
 *                           (index, value_hex, count): the exact top K by
 *                           count over everything the export saw.
 * Plain HTTP/1.0 over a socket: the two endpoints answer small JSON bodies
 * and the CLI should not need an HTTP library. The JSON is piperec's own
 * (service/http_views.c), so a scanner for the few keys used is enough.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "pr_cli.h"
#include "pr_config.h"
#include "pr_hostport.h"
#include "pr_mbuf.h"

typedef struct pr__hot_ent {
    int64_t index;
    double share;
} pr__hot_ent;

static void pr__hot_usage(FILE *f)
{
    fprintf(f, "usage: piperec vocab hot --top K (--url http://HOST:PORT | --input DIR)\n"
               "                         [--pipeline P] [--config FILE] [--output PATH|-]\n"
               "  The K hottest indices per sparse column, for a trainer to pin on the GPU.\n"
               "  --url: a running service's hot-set sketch (GET /v1/hot; hot.top_k >= K).\n"
               "  --input: a vocab export / offline vocab/ dir: the exact top K by count\n"
               "           (columns from --config, default the embedded config; refused\n"
               "           when a column evicts: the export lacks the evicted values).\n"
               "  Output (default -): TSV column, rank, index, share (docs/formats.md).\n");
}

/* GET path from host:port; *body gets the response body. 0, or PR_EIO with
 * a reason (connection, status other than 200). */
static int pr__http_get(const char *host, uint16_t port, const char *path, pr_mbuf *body, char *err,
                        size_t err_size)
{
    char ps[8];
    snprintf(ps, sizeof(ps), "%u", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int gai = getaddrinfo(host, ps, &hints, &ai);
    if (gai)
        return pr_seterr(err, err_size, PR_EIO, "%s:%u: %s", host, port, gai_strerror(gai));
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return pr_seterr(err, err_size, PR_EIO, "%s:%u: %s", host, port, strerror(errno));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[1200];
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n",
                     path, host);
    pr_mbuf resp;
    pr_mbuf_init(&resp);
    int rc = 0;
    if (n < 0 || (size_t)n >= sizeof(req) || send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        rc = pr_seterr(err, err_size, PR_EIO, "%s:%u: sending the request failed", host, port);
        goto out;
    }
    char buf[16384];
    ssize_t k;
    while ((k = recv(fd, buf, sizeof(buf), 0)) > 0)
        pr_mbuf_append(&resp, buf, (size_t)k);
    pr_mbuf_append(&resp, "", 1); /* NUL */
    if (k < 0 || resp.err) {
        rc = pr_seterr(err, err_size, PR_EIO, "%s:%u%s: %s", host, port, path,
                       resp.err ? "out of memory" : strerror(errno));
        goto out;
    }
    const char *sp = strchr(resp.buf, ' ');
    const char *hdr_end = strstr(resp.buf, "\r\n\r\n");
    if (!sp || !hdr_end || strncmp(resp.buf, "HTTP/1.", 7)) {
        rc = pr_seterr(err, err_size, PR_EIO, "%s:%u%s: not an HTTP response", host, port, path);
        goto out;
    }
    if (atoi(sp + 1) != 200) {
        rc = pr_seterr(err, err_size, PR_EIO, "%s:%u%s: HTTP %d: %.300s", host, port, path,
                       atoi(sp + 1), hdr_end + 4);
        goto out;
    }
    pr_mbuf_puts(body, hdr_end + 4);
out:
    pr_mbuf_fini(&resp);
    close(fd);
    return rc;
}

/* The sparse column names of pipeline `pl` (NULL = the first) in /v1/status:
 * the keys of its "vocab_sizes" object, in column order. Returns how many
 * (at most max), or -1 with *pl_out unset when the pipeline is not there. */
static int pr__status_columns(const char *json, const char **pl, char (*cols)[PR_NAME_MAX], int max,
                              char *pl_name, size_t pl_size)
{
    const char *p = json;
    while ((p = strstr(p, "{\"name\":\""))) {
        p += 9;
        const char *e = strchr(p, '"');
        if (!e)
            return -1;
        if (*pl && ((size_t)(e - p) != strlen(*pl) || strncmp(p, *pl, (size_t)(e - p))))
            continue;
        snprintf(pl_name, pl_size, "%.*s", (int)(e - p), p);
        const char *v = strstr(e, "\"vocab_sizes\":{");
        if (!v)
            return -1;
        v += 15;
        int n = 0;
        while (*v == '"' && n < max) {
            const char *ke = strchr(v + 1, '"');
            if (!ke || ke - v - 1 >= PR_NAME_MAX)
                return -1;
            snprintf(cols[n++], PR_NAME_MAX, "%.*s", (int)(ke - v - 1), v + 1);
            v = strpbrk(ke, ",}");
            if (!v || *v == '}')
                break;
            v++;
        }
        return n;
    }
    return -1;
}

/* Items of a /v1/hot answer into ents (at most max); returns how many. */
static size_t pr__parse_hot(const char *json, pr__hot_ent *ents, size_t max, double *coverage)
{
    size_t n = 0;
    const char *p = strstr(json, "\"items\":[");
    while (p && n < max && (p = strstr(p, "{\"index\":"))) {
        char *e;
        ents[n].index = strtoll(p + 9, &e, 10);
        const char *s = strstr(e, "\"share\":");
        if (!s)
            break;
        ents[n].share = strtod(s + 8, &e);
        n++;
        p = e;
    }
    const char *c = strstr(json, "\"coverage\":");
    *coverage = c ? strtod(c + 11, NULL) : 0;
    return n;
}

static int pr__ent_cmp(const void *a, const void *b)
{
    const pr__hot_ent *x = a, *y = b;
    if (x->share != y->share)
        return x->share > y->share ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* The exact top k of DIR/<col>.tsv by count (share = count / all counts,
 * the `-1` lines of values below min_count included).
 * Returns how many, or -1 with a message (unreadable file, no counts). */
static long pr__tsv_top(const char *dir, const char *col, pr__hot_ent *ents, size_t k,
                        double *coverage, char *err, size_t err_size)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.tsv", dir, col);
    FILE *f = fopen(path, "r");
    if (!f) {
        pr_seterr(err, err_size, PR_EIO, "%s: %s", path, strerror(errno));
        return -1;
    }
    pr__hot_ent *all = NULL;
    size_t n = 0, cap = 0;
    double total = 0;
    char line[512];
    long lineno = 0, rc = 0;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        if (line[0] == '#' || line[0] == '\n' || line[0] == '\r')
            continue;
        long long idx;
        char hex[40];
        unsigned long long cnt = 0;
        int got = sscanf(line, "%lld\t%39s\t%llu", &idx, hex, &cnt);
        if (got < 2) {
            rc = pr_seterr(err, err_size, PR_EBADREC, "%s:%ld: expected index, value_hex, count",
                           path, lineno);
            goto out;
        }
        total += (double)cnt; /* values below min_count were looked up too */
        if (idx < 0 || !cnt)
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 1024;
            pr__hot_ent *m = realloc(all, nc * sizeof(*m));
            if (!m) {
                rc = pr_seterr(err, err_size, PR_ENOMEM, "%s: out of memory", path);
                goto out;
            }
            all = m;
            cap = nc;
        }
        all[n++] = (pr__hot_ent){idx, (double)cnt};
    }
    if (!n) {
        rc = pr_seterr(err, err_size, PR_EBADREC,
                       "%s: no counts (profile dlrm with min_count 1 does not count; export from "
                       "a pipeline that counts, or use --url)",
                       path);
        goto out;
    }
    qsort(all, n, sizeof(*all), pr__ent_cmp);
    if (k > n)
        k = n;
    *coverage = 0;
    for (size_t i = 0; i < k; i++) {
        ents[i] = (pr__hot_ent){all[i].index, all[i].share / total};
        *coverage += ents[i].share;
    }
    rc = (long)k;
out:
    free(all);
    fclose(f);
    return rc;
}

/* "http://HOST:PORT[/...]" -> host, port. 0, or -1 when it is not one. */
static int pr__hot_parse_url(const char *url, char *host, size_t host_size, uint16_t *port)
{
    const char *hp = strncmp(url, "http://", 7) ? NULL : url + 7;
    char hpbuf[300];
    snprintf(hpbuf, sizeof(hpbuf), "%s", hp ? hp : "");
    char *slash = strchr(hpbuf, '/');
    if (slash)
        *slash = '\0';
    return !hp || pr_hostport_parse(hpbuf, host, host_size, port) ? -1 : 0;
}

/* --input: the pipeline (from --config, default the embedded config) and
 * its sparse column names. 0, or the exit code with a message. *cfg is the
 * caller's to free. */
static int pr__hot_input_columns(const char *config, const char *pipeline, pr_config **cfg,
                                 char (*cols)[PR_NAME_MAX], char *pl_name, int *n_cols)
{
    char err[4096];
    int rc = config ? pr_config_load_file(config, cfg, err, sizeof(err))
                    : pr_config_load_default(cfg, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "piperec vocab hot: %s\n", err);
        return 2; /* a config that cannot be read is a usage error, as for run */
    }
    const pr_pipeline_cfg *pc =
        pipeline ? pr_config_pipeline(*cfg, pipeline) : &(*cfg)->pipelines[0];
    if (!pc) {
        fprintf(stderr, "piperec vocab hot: no pipeline named '%s' in %s\n", pipeline,
                (*cfg)->origin);
        return 2;
    }
    snprintf(pl_name, PR_NAME_MAX, "%s", pc->name);
    /* A declared schema's columns are its vocab features (the engine spec
     * the pipeline runs, named after them). */
    pr_pipeline_spec espec;
    const pr_pipeline_spec *spec = &pc->spec;
    if (pc->features.declared) {
        if (pr_feature_engine_spec(&pc->features, &pc->spec, &espec, err, sizeof(err)) < 0) {
            fprintf(stderr, "piperec vocab hot: pipeline %s: %s\n", pc->name, err);
            return 2;
        }
        spec = &espec;
    }
    /* An evicting column's export holds only the values it kept: their
     * counts leave out every lookup of an evicted value, so shares and
     * coverage would be far too high (issue 19 item 4). */
    for (uint32_t c = 0; c < spec->n_sparse; c++)
        if (spec->sparse[c].eviction != PR_EVICT_NONE) {
            fprintf(stderr,
                    "piperec vocab hot: --input: column %s of pipeline %s evicts "
                    "(transform.vocab.eviction): an export holds only the values it kept, "
                    "so its counts cannot give shares; ask the live sketch (--url), which "
                    "counts values, not recycled indices\n",
                    spec->sparse[c].name, pc->name);
            return 2;
        }
    *n_cols = (int)spec->n_sparse;
    for (int c = 0; c < *n_cols; c++)
        snprintf(cols[c], PR_NAME_MAX, "%s", spec->sparse[c].name);
    return 0;
}

/* The TSV to `output` ("-": stdout). 0, or -1 with a message. */
static int pr__hot_write(const char *output, const pr_mbuf *tsv)
{
    FILE *f = strcmp(output, "-") ? fopen(output, "w") : stdout;
    if (!f || fwrite(tsv->buf, 1, tsv->len, f) != tsv->len || (f != stdout && fclose(f))) {
        fprintf(stderr, "piperec vocab hot: %s: %s\n", output, strerror(errno));
        return -1;
    }
    if (f == stdout)
        fflush(stdout);
    return 0;
}

int pr_cli_vocab_hot(int argc, char **argv)
{
    const char *url = NULL, *dir = NULL, *pipeline = NULL, *config = NULL, *output = "-",
               *top = NULL;
    struct {
        const char *name;
        const char **val;
    } opts[] = {{"--url", &url},       {"--input", &dir},     {"--pipeline", &pipeline},
                {"--config", &config}, {"--output", &output}, {"--top", &top}};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            pr__hot_usage(stdout);
            return 0;
        }
        size_t k = 0, nk = sizeof(opts) / sizeof(opts[0]);
        while (k < nk && strcmp(argv[i], opts[k].name))
            k++;
        if (k == nk || i + 1 >= argc) {
            fprintf(stderr, "piperec vocab hot: %s '%s'\n",
                    k == nk ? "unknown option" : "missing value for", argv[i]);
            pr__hot_usage(stderr);
            return 2;
        }
        *opts[k].val = argv[++i];
    }
    char *end = NULL;
    long top_k = top ? strtol(top, &end, 10) : 0;
    if (!top || *end || top_k < 1 || top_k > 1 << 24 || !url == !dir) {
        fprintf(stderr, "piperec vocab hot: %s\n",
                !url == !dir ? "give one of --url and --input" : "--top must be 1..16777216");
        pr__hot_usage(stderr);
        return 2;
    }
    char host[256] = "";
    uint16_t port = 0;
    if (url && pr__hot_parse_url(url, host, sizeof(host), &port)) {
        fprintf(stderr, "piperec vocab hot: --url: expected http://HOST:PORT, got '%s'\n", url);
        return 2;
    }

    char err[4096];
    int ret = 1;
    int n_cols = 0;
    char(*cols)[PR_NAME_MAX] = calloc(PR_MAX_SPARSE, PR_NAME_MAX);
    char pl_name[PR_NAME_MAX] = "";
    pr__hot_ent *ents = malloc((size_t)top_k * sizeof(*ents));
    pr_config *cfg = NULL;
    pr_mbuf body, tsv;
    pr_mbuf_init(&body);
    pr_mbuf_init(&tsv);
    if (!cols || !ents) {
        fprintf(stderr, "piperec vocab hot: out of memory\n");
        goto out;
    }
    if (url) {
        if (pr__http_get(host, port, "/v1/status", &body, err, sizeof(err))) {
            fprintf(stderr, "piperec vocab hot: %s\n", err);
            goto out;
        }
        n_cols =
            pr__status_columns(body.buf, &pipeline, cols, PR_MAX_SPARSE, pl_name, sizeof(pl_name));
        if (n_cols < 0) {
            fprintf(stderr, "piperec vocab hot: %s: no pipeline %s%s%s in /v1/status\n", url,
                    pipeline ? "'" : "", pipeline ? pipeline : "at all", pipeline ? "'" : "");
            ret = 2;
            goto out;
        }
    } else if ((ret = pr__hot_input_columns(config, pipeline, &cfg, cols, pl_name, &n_cols))) {
        goto out;
    }
    ret = 1; /* from here on, failures are I/O */

    pr_mbuf_printf(&tsv, "# piperec hot indices: pipeline %s top %ld source %s (%s)\n", pl_name,
                   top_k, url ? url : dir,
                   url ? "decayed hot-set sketch, estimated shares" : "exact counts");
    pr_mbuf_puts(&tsv, "# column\trank\tindex\tshare\n");
    for (int c = 0; c < n_cols; c++) {
        long n;
        double coverage = 0;
        if (url) {
            char path[512];
            snprintf(path, sizeof(path), "/v1/hot?pipeline=%s&column=%s&k=%ld", pl_name, cols[c],
                     top_k);
            pr_mbuf_reset(&body);
            if (pr__http_get(host, port, path, &body, err, sizeof(err))) {
                fprintf(stderr, "piperec vocab hot: %s\n", err);
                goto out;
            }
            n = (long)pr__parse_hot(body.buf, ents, (size_t)top_k, &coverage);
        } else if ((n = pr__tsv_top(dir, cols[c], ents, (size_t)top_k, &coverage, err,
                                    sizeof(err))) < 0) {
            fprintf(stderr, "piperec vocab hot: %s\n", err);
            ret = strstr(err, "out of memory") ? 1 : 2;
            goto out;
        }
        pr_mbuf_printf(&tsv, "# %s: %ld indices, coverage %.6g\n", cols[c], n, coverage);
        for (long i = 0; i < n; i++)
            pr_mbuf_printf(&tsv, "%s\t%ld\t%lld\t%.6g\n", cols[c], i + 1, (long long)ents[i].index,
                           ents[i].share);
    }
    if (tsv.err) {
        fprintf(stderr, "piperec vocab hot: out of memory\n");
        goto out;
    }
    if (pr__hot_write(output, &tsv))
        goto out;
    fprintf(stderr, "piperec vocab hot: pipeline %s: %d columns, top %ld -> %s\n", pl_name, n_cols,
            top_k, output);
    ret = 0;
out:
    pr_mbuf_fini(&body);
    pr_mbuf_fini(&tsv);
    pr_config_free(cfg);
    free(cols);
    free(ents);
    return ret;
}
