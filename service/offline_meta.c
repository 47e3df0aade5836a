/*
 * offline_meta.c — `piperec process`'s output directory around a run: what an
 * earlier run left there is cleared first, and meta.json says afterwards what
 * the arrays are (pr_service.h).
 *
 * Why: the offline drivers write only the files of this run's layout and
 * features. A second run into the same directory with a feature renamed, the
 * other layout, or no dense features left the first run's
 * sparse/<old>.values.npy, sparse.npy or dense.npy beside the new files, and
 * a loader that lists sparse/ read a feature that no longer exists.
 * Without meta.json nothing in DIR said which column of labels.npy is which
 * label, nor how large each embedding table must be; a files-sink roll says
 * both, so one loader reads either with the same keys.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_mbuf.h"
#include "pr_service.h"

/* Remove DIR/name when it is there. */
static int pr__rm(const char *dir, const char *name, char *errstr, size_t errstr_size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (unlink(path) < 0 && errno != ENOENT)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    return 0;
}

static bool pr__ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n > t && strcmp(s + n - t, tail) == 0;
}

/* Remove every file of DIR/sub whose name ends with one of `tails`. */
static int pr__rm_matching(const char *dir, const char *sub, const char *const *tails, char *errstr,
                           size_t errstr_size)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (!d)
        return errno == ENOENT || errno == ENOTDIR
                   ? 0
                   : pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s", path, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL)
        for (const char *const *t = tails; *t && !rc; t++)
            if (pr__ends_with(e->d_name, *t)) {
                rc = pr__rm(path, e->d_name, errstr, errstr_size);
                break;
            }
    closedir(d);
    return rc;
}

/* Are a and b the same directory? */
static bool pr__same_dir(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

int pr_offline_clear_outputs(const char *dir, const char *vocab_seed, char *errstr,
                             size_t errstr_size)
{
    static const char *const top[] = {"dense.npy", "sparse.npy", "labels.npy", "meta.json"};
    static const char *const arrays[] = {".values.npy", ".lengths.npy", ".weights.npy", NULL};
    static const char *const vocab[] = {".tsv", NULL};
    int rc = 0;
    for (size_t i = 0; i < sizeof(top) / sizeof(top[0]) && !rc; i++)
        rc = pr__rm(dir, top[i], errstr, errstr_size);
    if (!rc)
        rc = pr__rm_matching(dir, "sparse", arrays, errstr, errstr_size);
    char vdir[4200];
    snprintf(vdir, sizeof(vdir), "%s/vocab", dir);
    if (!rc && !pr__same_dir(vocab_seed, vdir)) /* the seed is read when the run starts */
        rc = pr__rm_matching(dir, "vocab", vocab, errstr, errstr_size);
    return rc;
}

/* ,\n  "key": ["a", "b"] */
static void pr__names(pr_mbuf *m, const char *key, const char *const *names, uint32_t n)
{
    pr_mbuf_printf(m, ",\n  \"%s\": [", key);
    for (uint32_t i = 0; i < n; i++) {
        if (i)
            pr_mbuf_puts(m, ", ");
        pr_mbuf_json_str(m, names[i]);
    }
    pr_mbuf_puts(m, "]");
}

/* The declared schema's names of one kind (sparse: PR_FEAT_SPARSE and
 * PR_FEAT_LIST), in schema order, into `out` (at most `cap`). */
static uint32_t pr__kind_names(const pr_feature_schema *s, pr_feature_kind kind, const char **out,
                               uint32_t cap)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_features && n < cap; i++) {
        pr_feature_kind k = s->features[i].kind;
        if (k == kind || (kind == PR_FEAT_SPARSE && k == PR_FEAT_LIST))
            out[n++] = s->features[i].name;
    }
    return n;
}

static uint64_t pr__vocab_size(const pr_offline_result *res, const char *name)
{
    for (uint32_t c = 0; c < res->n_vocab; c++)
        if (strncmp(res->vocab_names[c], name, PR_NAME_MAX) == 0)
            return res->vocab_sizes[c];
    return 0;
}

int pr_offline_write_meta(const char *dir, const char *pipeline, const pr_pipeline_spec *spec,
                          const char (*dense_names)[PR_NAME_MAX], const pr_feature_schema *schema,
                          const pr_offline_result *res, char *errstr, size_t errstr_size)
{
    const char *names[PR_MAX_SPARSE > PR_MAX_DENSE_COLS ? PR_MAX_SPARSE : PR_MAX_DENSE_COLS];
    const uint32_t cap = sizeof(names) / sizeof(names[0]);
    uint32_t n_labels = 0, n_dense = spec->n_dense, n_sparse = spec->n_sparse;
    if (schema) {
        n_labels = pr__kind_names(schema, PR_FEAT_LABEL, names, cap);
        n_sparse = pr__kind_names(schema, PR_FEAT_SPARSE, names, cap);
    }
    pr_mbuf m;
    pr_mbuf_init(&m);
    pr_mbuf_puts(&m, "{\n  \"pipeline\": ");
    pr_mbuf_json_str(&m, pipeline);
    pr_mbuf_printf(&m,
                   ",\n  \"rows\": %" PRIu64 ",\n  \"rejected\": %" PRIu64
                   ",\n  \"n_dense\": %u,\n  \"n_sparse\": %u,\n  \"sparse_width\": %u",
                   res->rows, res->rejected, n_dense, n_sparse, schema ? 8u : res->sparse_width);
    /* vocab_sizes in the arrays' sparse order, as a batch gives them: the
     * engine's columns by name; a declared feature without vocab has the
     * range of its last operator (hash N: N; 0 when unbounded). */
    /* only when configured: other runs' meta.json is as it was */
    if (schema && schema->n_filter)
        pr_mbuf_printf(&m, ",\n  \"filtered\": %" PRIu64, res->filtered);
    if (schema && schema->downsample.enabled)
        pr_mbuf_printf(&m, ",\n  \"sampled_out\": %" PRIu64, res->sampled_out);
    pr_mbuf_puts(&m, ",\n  \"vocab_sizes\": [");
    for (uint32_t i = 0, c = 0; schema && i < schema->n_features; i++) {
        const pr_feature_spec *f = &schema->features[i];
        if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
            continue;
        uint64_t size = pr_feature_vocab_step(f) >= 0
                            ? pr__vocab_size(res, pr_feature_table_name(f))
                            : pr_feature_value_range(f);
        pr_mbuf_printf(&m, "%s%" PRIu64, c++ ? ", " : "", size);
    }
    for (uint32_t c = 0; !schema && c < n_sparse && c < cap; c++)
        pr_mbuf_printf(&m, "%s%" PRIu64, c ? ", " : "", pr__vocab_size(res, spec->sparse[c].name));
    pr_mbuf_puts(&m, "]");
    if (schema) {
        pr_mbuf_printf(&m, ",\n  \"jagged\": true,\n  \"n_labels\": %u", n_labels);
        pr__names(&m, "feature_keys", names, pr__kind_names(schema, PR_FEAT_SPARSE, names, cap));
        pr__names(&m, "label_names", names, pr__kind_names(schema, PR_FEAT_LABEL, names, cap));
        uint32_t nw = 0;
        for (uint32_t i = 0; i < schema->n_features && nw < cap; i++)
            if (pr_feature_weighted(&schema->features[i]))
                names[nw++] = schema->features[i].name;
        if (nw)
            pr__names(&m, "weighted_keys", names, nw);
        uint32_t nt = 0; /* shared vocabularies: each feature's table (only when some share) */
        bool shared = false;
        for (uint32_t i = 0; i < schema->n_features && nt < cap; i++) {
            const pr_feature_spec *f = &schema->features[i];
            if (f->kind != PR_FEAT_SPARSE && f->kind != PR_FEAT_LIST)
                continue;
            shared |= f->table[0] != '\0';
            names[nt++] = pr_feature_table_name(f);
        }
        if (shared)
            pr__names(&m, "feature_tables", names, nt);
    } else {
        for (uint32_t c = 0; c < n_sparse && c < cap; c++)
            names[c] = spec->sparse[c].name;
        pr__names(&m, "sparse_names", names, n_sparse);
    }
    /* the config's names: I1.. (or schema.dense_names), or a declared
     * schema's columns, a vector's as NAME[0]..NAME[dim-1] */
    for (uint32_t c = 0; c < n_dense && c < cap; c++)
        names[c] = dense_names[c];
    pr__names(&m, "dense_names", names, n_dense);
    pr_mbuf_puts(&m, "\n}\n");

    char path[4200], tmp[4210];
    snprintf(path, sizeof(path), "%s/meta.json", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int rc = m.err;
    FILE *f = rc ? NULL : fopen(tmp, "w");
    if (!rc && !f)
        rc = PR_EIO;
    if (f) {
        bool ok = fwrite(m.buf, 1, m.len, f) == m.len;
        if (fclose(f) != 0 || !ok || rename(tmp, path) != 0) {
            rc = PR_EIO;
            unlink(tmp);
        }
    }
    pr_mbuf_fini(&m);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "%s: %s", path,
                         rc == PR_ENOMEM ? "out of memory" : strerror(errno));
    return 0;
}
