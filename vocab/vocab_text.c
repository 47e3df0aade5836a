/*
 * vocab_text.c — vocabularies as text: export (one DIR/<column>.tsv per
 * sparse column, "index<TAB>value_hex<TAB>count") and import (the same
 * format read back, or another system's dictionary written in it).
 *
 * Import checks every file in full before any table changes, so a bad file
 * leaves the engine as it was; errors name file:line.
 */
#define _GNU_SOURCE
#include "pr_vocab.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pr_log.h"
#include "vocab_int.h"

/* --- text export */

typedef struct {
    FILE *f;
} pr__export_ctx;

/* Digits of v in `base` (10 or 16, lowercase), written backwards ending at
 * `end`; returns the first character. (Hand-formatted: fprintf's format
 * parsing was ~300 instructions a line and an offline run exports up to
 * n_sparse * modulus lines, serially, after the last block.) */
static char *pr__fmt_u64(char *end, uint64_t v, unsigned base)
{
    do {
        *--end = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    return end;
}

static int pr__export_cb(const pr_vocab_entry *e, void *opaque)
{
    pr__export_ctx *x = opaque;
    char line[80], *end = line + sizeof(line), *p = end;
    *--p = '\n';
    p = pr__fmt_u64(p, e->count, 10);
    *--p = '\t';
    p = pr__fmt_u64(p, e->value, 16);
    *--p = '\t';
    p = pr__fmt_u64(p, e->index < 0 ? 0 - (uint64_t)e->index : (uint64_t)e->index, 10);
    if (e->index < 0)
        *--p = '-';
    return fwrite(p, 1, (size_t)(end - p), x->f) == (size_t)(end - p) ? 0 : PR_EIO;
}

int pr_vocab_export(const pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab export: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    if (mkdir(dir, 0777) && errno != EEXIST)
        return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: mkdir %s: %s", dir,
                         strerror(errno));
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++) {
        const pr_sparse_col_spec *s = &pr_engine_spec(eng)->sparse[c];
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s.tsv", dir, s->name);
        FILE *f = fopen(path, "w");
        if (!f)
            return pr_seterr(errstr, errstr_size, PR_EIO, "vocab export: %s: %s", path,
                             strerror(errno));
        fprintf(f,
                "# piperec vocabulary: pipeline %s column %s profile %s min_count %u size %" PRIu64
                "\n# index\tvalue_hex\tcount\n",
                pr_engine_spec(eng)->name, s->name,
                pr_vocab_profile_name(pr_engine_spec(eng)->profile), s->min_count,
                pr_engine_vocab_size(eng, c));
        pr__export_ctx x = {f};
        int rc = pr_engine_vocab_read(eng, c, pr__export_cb, &x);
        if (fclose(f) && !rc)
            rc = PR_EIO;
        if (rc)
            return pr_seterr(errstr, errstr_size, rc, "vocab export: writing %s failed", path);
    }
    return 0;
}

/* --- text import (the export format read back; also seeds from other systems)
 *
 * Every column is parsed and checked in full before any state changes, so a
 * bad file leaves the engine as it was. Checks name file:line: field syntax,
 * values not below the modulus, indices reserved by the profile, duplicate
 * values, duplicate indices, gaps, and the column's capacity. */

typedef struct {
    uint64_t value;
    int64_t index;
    uint64_t count;
    size_t line;
} pr__imp_ent;

typedef struct {
    pr__imp_ent *e;
    size_t n, cap;
} pr__imp_col;

static int pr__imp_by_value(const void *a, const void *b)
{
    const pr__imp_ent *x = a, *y = b;
    return x->value < y->value   ? -1
           : x->value > y->value ? 1
                                 : (x->line > y->line) - (x->line < y->line);
}

/* Assigned entries by index, then pending (index < 0) ones by value. */
static int pr__imp_by_index(const void *a, const void *b)
{
    const pr__imp_ent *x = a, *y = b;
    if ((x->index < 0) != (y->index < 0))
        return x->index < 0 ? 1 : -1;
    if (x->index < 0)
        return x->value < y->value ? -1 : x->value > y->value;
    return x->index < y->index   ? -1
           : x->index > y->index ? 1
                                 : (x->line > y->line) - (x->line < y->line);
}

static bool pr__imp_u64(const char *s, size_t len, unsigned base, uint64_t *out)
{
    if (!len || (base == 16 && len > 16) || (base == 10 && len > 20))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        int d;
        char ch = s[i];
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (base == 16 && ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (base == 16 && ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return false;
        if (v > (UINT64_MAX - (uint64_t)d) / base)
            return false;
        v = v * base + (uint64_t)d;
    }
    *out = v;
    return true;
}

/* Parse DIR/<col>.tsv into *ic and check it against the spec. */
static int pr__imp_parse(const pr_engine *eng, uint32_t c, const char *path, pr__imp_col *ic,
                         char *errstr, size_t errstr_size)
{
    const pr_pipeline_spec *spec = pr_engine_spec(eng);
    const pr_sparse_col_spec *s = &spec->sparse[c];
    int64_t base = pr__vbase(spec->profile);
    uint64_t cap = pr_spec_col_capacity(spec, c);
    bool mod = pr_spec_has_op(spec, PR_OP_MODULUS);
    bool pending_ok = s->min_count > 1 && spec->count_mode == PR_COUNT_STREAMING;
    FILE *f = fopen(path, "r");
    if (!f)
        return pr_seterr(errstr, errstr_size, PR_EIO, "%s: %s (every sparse column needs a file)",
                         path, strerror(errno));
    char *buf = NULL;
    size_t bufcap = 0, line = 0;
    ssize_t len;
    int rc = 0;
    while (!rc && (len = getline(&buf, &bufcap, f)) >= 0) {
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
            buf[--len] = 0;
        if (len == 0 || buf[0] == '#')
            continue;
        const char *fld[4];
        size_t fl[4], nf = 0;
        for (char *p = buf;; nf++) {
            char *t = strchr(p, '\t');
            if (nf < 4) {
                fld[nf] = p;
                fl[nf] = t ? (size_t)(t - p) : strlen(p);
            }
            if (!t) {
                nf++;
                break;
            }
            p = t + 1;
        }
        pr__imp_ent e = {0, 0, 0, line};
        uint64_t iv;
        bool neg = fl[0] > 0 && fld[0][0] == '-';
        if (nf < 2 || nf > 3) {
            rc = pr_seterr(errstr, errstr_size, PR_EBADREC,
                           "%s:%zu: %zu fields, expected index<TAB>value_hex[<TAB>count]", path,
                           line, nf);
        } else if (!pr__imp_u64(fld[0] + neg, fl[0] - neg, 10, &iv) || iv > (uint64_t)INT64_MAX) {
            rc =
                pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: index '%.*s' is not an integer",
                          path, line, (int)(fl[0] > 40 ? 40 : fl[0]), fld[0]);
        } else if (!pr__imp_u64(fld[1], fl[1], 16, &e.value)) {
            rc = pr_seterr(errstr, errstr_size, PR_EBADREC,
                           "%s:%zu: value '%.*s' is not 1 to 16 hex digits", path, line,
                           (int)(fl[1] > 40 ? 40 : fl[1]), fld[1]);
        } else if (nf == 3 && !pr__imp_u64(fld[2], fl[2], 10, &e.count)) {
            rc =
                pr_seterr(errstr, errstr_size, PR_EBADREC, "%s:%zu: count '%.*s' is not an integer",
                          path, line, (int)(fl[2] > 40 ? 40 : fl[2]), fld[2]);
        } else if (mod && e.value >= s->modulus) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: value %" PRIx64 " is not below column %s's modulus %" PRIu64
                           " (values are keys after Hex2Int and Modulus)",
                           path, line, e.value, s->name, s->modulus);
        } else if (neg && (iv != 1 || !pending_ok)) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: index -%" PRIu64 ": only -1 is allowed (a value still below "
                           "min_count), and only when min_count > 1 with count_mode streaming",
                           path, line, iv);
        } else if (!neg && (int64_t)iv < base) {
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL,
                           "%s:%zu: index %" PRIu64 " is reserved by profile default (0 = missing, "
                           "1 = out-of-vocabulary); vocabulary indices start at 2",
                           path, line, iv);
        } else if (!neg && iv >= cap) {
            rc = pr_seterr(errstr, errstr_size, PR_EFULL,
                           "%s:%zu: index %" PRIu64 " does not fit column %s's capacity %" PRIu64,
                           path, line, iv, s->name, cap);
        } else {
            e.index = neg ? -1 : (int64_t)iv;
            if (ic->n == ic->cap) {
                size_t nc = ic->cap ? ic->cap * 2 : 1024;
                pr__imp_ent *p = realloc(ic->e, nc * sizeof(*p));
                if (!p) {
                    rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "%s: out of memory", path);
                    break;
                }
                ic->e = p;
                ic->cap = nc;
            }
            ic->e[ic->n++] = e;
        }
    }
    if (!rc && ferror(f))
        rc = pr_seterr(errstr, errstr_size, PR_EIO, "%s: read error: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    if (rc || !ic->n)
        return rc;
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_value);
    for (size_t i = 1; i < ic->n; i++)
        if (ic->e[i].value == ic->e[i - 1].value)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate value %" PRIx64 " (also on line %zu)", path,
                             ic->e[i].line, ic->e[i].value, ic->e[i - 1].line);
    qsort(ic->e, ic->n, sizeof(*ic->e), pr__imp_by_index);
    int64_t want = base;
    for (size_t i = 0; i < ic->n && ic->e[i].index >= 0; i++, want++) {
        const pr__imp_ent *x = &ic->e[i];
        if (i && x->index == ic->e[i - 1].index)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: duplicate index %" PRId64 " (also on line %zu)", path,
                             x->line, x->index, ic->e[i - 1].line);
        if (x->index != want)
            return pr_seterr(errstr, errstr_size, PR_EINVAL,
                             "%s:%zu: index %" PRId64 " leaves a gap: index %" PRId64
                             " is missing (indices must be contiguous from %" PRId64 ")",
                             path, x->line, x->index, want, base);
    }
    return 0;
}

static int pr__nonempty_cb(const pr_vocab_entry *e, void *opaque)
{
    (void)e;
    (void)opaque;
    return 1;
}

int pr_vocab_import(pr_engine *eng, const char *dir, char *errstr, size_t errstr_size)
{
    if (!pr__has_vocab(eng))
        return pr_seterr(errstr, errstr_size, PR_ESTATE,
                         "vocab import: pipeline '%s' has no vocab operator",
                         pr_engine_spec(eng)->name);
    if (pr_engine_spec(eng)->count_mode == PR_COUNT_TWO_PASS)
        return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                         "vocab import: pipeline '%s' uses count_mode two_pass, which assigns "
                         "indices from its own counting pass; importing is only supported with "
                         "count_mode streaming",
                         pr_engine_spec(eng)->name);
    for (uint32_t c = 0; c < pr_engine_spec(eng)->n_sparse; c++)
        if (pr_engine_vocab_read(eng, c, pr__nonempty_cb, NULL))
            return pr_seterr(errstr, errstr_size, PR_ESTATE,
                             "vocab import: column %s already has a vocabulary",
                             pr_engine_spec(eng)->sparse[c].name);
    uint32_t ns = pr_engine_spec(eng)->n_sparse;
    pr__imp_col *cols = calloc(ns ? ns : 1, sizeof(*cols));
    pr_vocab_entry *ents = NULL;
    if (!cols)
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
    int rc = 0;
    char path[4096];
    for (uint32_t c = 0; c < ns && !rc; c++) {
        if (snprintf(path, sizeof(path), "%s/%s.tsv", dir, pr_engine_spec(eng)->sparse[c].name) >=
            (int)sizeof(path))
            rc = pr_seterr(errstr, errstr_size, PR_EINVAL, "vocab import: path too long");
        else
            rc = pr__imp_parse(eng, c, path, &cols[c], errstr, errstr_size);
    }
    for (uint32_t c = 0; c < ns && !rc; c++) {
        free(ents);
        ents = malloc((cols[c].n ? cols[c].n : 1) * sizeof(*ents));
        if (!ents) {
            rc = pr_seterr(errstr, errstr_size, PR_ENOMEM, "vocab import: out of memory");
            break;
        }
        for (size_t i = 0; i < cols[c].n; i++)
            ents[i] =
                (pr_vocab_entry){cols[c].e[i].value, cols[c].e[i].index, cols[c].e[i].count, 0, 0};
        if ((rc = pr_engine_vocab_load_column(eng, c, ents, cols[c].n))) {
            rc = pr_seterr(errstr, errstr_size, rc,
                           "vocab import: %s/%s.tsv: entries rejected by backend %s (%s)", dir,
                           pr_engine_spec(eng)->sparse[c].name, pr_engine_backend_name(eng),
                           pr_strerror(rc));
            /* Leave no half-imported column behind. */
            for (uint32_t k = 0; k <= c; k++)
                pr_engine_vocab_load_column(eng, k, NULL, 0);
            break;
        }
        pr__journal_sync_col(eng, c);
    }
    free(ents);
    for (uint32_t c = 0; c < ns; c++)
        free(cols[c].e);
    free(cols);
    return rc;
}
