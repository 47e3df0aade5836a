/*
 * fuzz_json.c — libFuzzer target for the JSON field extractor
 * (ingest/json_extract.c, pr_json_extract).
 *
 * Input: one flags byte, then the document.
 *   bits 0-1: path set (0: the clickstream event's paths, 1: short names
 *             that random bytes hit often, 2: deep and list-heavy, 3: one KEY)
 *   bit 2:    max_depth 4 instead of the default 64
 *   bit 3:    a 2-row block (the PR_EFULL path) instead of 64 rows
 * Checks, beyond no crash / leak / UB / hang:
 *   - the return is 0, a named reason, or PR_EFULL (only when full);
 *   - a rejected document leaves the block exactly as it was (rows, every
 *     column's value count, arena length) and an offset inside the document;
 *   - an accepted row is consistent: counts sum to the values appended,
 *     absent/null rows have no values, scalars at most one, lists within
 *     max_list, strings inside the arena and valid UTF-8 (the extractor's
 *     promise to what follows it);
 *   - the same document followed by whitespace gives the same decision and,
 *     when accepted, the same values (the fast paths that read ahead take
 *     other branches when more bytes follow).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_ingest.h"
#include "pr_log.h"

static const pr_json_path set0[] = {
    {"ts", PR_JSON_INT64, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"user.age_days", PR_JSON_INT64, 0, 0, PR_JSON_AT},
    {"item.id", PR_JSON_KEY, PR_JSON_SCALAR, 0, PR_JSON_AT},
    {"item.category", PR_JSON_STRING, 0, 0, PR_JSON_AT},
    {"item.price", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT},
    {"item.tags", PR_JSON_STRING, PR_JSON_LIST, 16, PR_JSON_AT},
    {"history", PR_JSON_INT64, PR_JSON_LIST, 64, PR_JSON_AT},
    {"label.click", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT},
    {"label.purchase", PR_JSON_DOUBLE, 0, 0, PR_JSON_AT},
    {"context.device", PR_JSON_STRING, 0, 0, PR_JSON_AT},
};
static const pr_json_path set1[] = {
    {"a", PR_JSON_INT64, PR_JSON_SCALAR_OR_LIST, 3, PR_JSON_AT},
    {"b", PR_JSON_DOUBLE, PR_JSON_SCALAR_OR_LIST, 3, PR_JSON_AT},
    {"c", PR_JSON_BOOL, PR_JSON_SCALAR_OR_LIST, 3, PR_JSON_AT},
    {"d", PR_JSON_STRING, PR_JSON_SCALAR_OR_LIST, 3, PR_JSON_AT},
    {"e", PR_JSON_KEY, PR_JSON_SCALAR_OR_LIST, 3, PR_JSON_AT},
    {"f.a", PR_JSON_INT64, 0, 0, PR_JSON_AT},
    {"f.f.a", PR_JSON_STRING, PR_JSON_LIST, 2, PR_JSON_AT},
    {"g", PR_JSON_ANY, PR_JSON_ALIGNED, 3, PR_JSON_KEYS},
    {"g", PR_JSON_ANY, PR_JSON_ALIGNED, 3, PR_JSON_VALUES},
};
static const pr_json_path set2[] = {
    {"a.b.c.d.e", PR_JSON_INT64, PR_JSON_LIST, 1000, PR_JSON_AT},
    {"a.b.x", PR_JSON_DOUBLE, PR_JSON_LIST, 5, PR_JSON_AT},
    {"a.y", PR_JSON_STRING, PR_JSON_LIST, 1, PR_JSON_AT},
    {"z", PR_JSON_BOOL, PR_JSON_LIST, 4, PR_JSON_AT},
};
static const pr_json_path set3[] = {{"k", PR_JSON_KEY, PR_JSON_SCALAR_OR_LIST, 8, PR_JSON_AT},
                                    {"m.n", PR_JSON_ANY, PR_JSON_LIST, 40, PR_JSON_KEYS}};

static const struct {
    const pr_json_path *p;
    size_t n;
} sets[4] = {{set0, sizeof(set0) / sizeof(set0[0])},
             {set1, sizeof(set1) / sizeof(set1[0])},
             {set2, sizeof(set2) / sizeof(set2[0])},
             {set3, 2}};

static pr_json_extractor *xs[8];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pr_log_set_level(PR_LOG_ERROR);
    char err[256];
    for (int i = 0; i < 8; i++) {
        xs[i] =
            pr_json_extractor_new(sets[i & 3].p, sets[i & 3].n, (i & 4) ? 4 : 0, err, sizeof(err));
        FUZZ_CHECK(xs[i] != NULL);
    }
    return 0;
}

static bool valid_utf8(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
        if (c < 0xc2 || c > 0xf4 || i + len > n)
            return false;
        uint32_t cp = c & (0x3f >> (len - 1));
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* One extraction with the checks above; returns its result. */
static int extract_checked(const pr_json_extractor *x, const pr_json_path *paths, pr_json_block *b,
                           const char *doc, size_t len)
{
    uint32_t rows = b->rows;
    size_t arena = b->arena_len;
    uint32_t nv[16];
    for (uint32_t c = 0; c < b->n_cols; c++)
        nv[c] = b->cols[c].n_values;
    pr_json_reject rej;
    int rc = pr_json_extract(x, b, doc, len, &rej);
    FUZZ_CHECK(rc == 0 || (rc > 0 && rc < PR_JSON__REASONS) || (rc == PR_EFULL && rows == b->cap));
    if (rc != 0) {
        FUZZ_CHECK(b->rows == rows && b->arena_len == arena);
        for (uint32_t c = 0; c < b->n_cols; c++)
            FUZZ_CHECK(b->cols[c].n_values == nv[c]);
        if (rc > 0) {
            FUZZ_CHECK(rej.reason == rc && rej.offset <= len);
            FUZZ_CHECK(memchr(rej.detail, 0, sizeof(rej.detail)) != NULL);
        }
        return rc;
    }
    FUZZ_CHECK(b->rows == rows + 1 && b->arena_len <= arena + len);
    for (uint32_t c = 0; c < b->n_cols; c++) {
        const pr_json_col *col = &b->cols[c];
        uint32_t n = col->count[rows];
        FUZZ_CHECK(col->n_values == nv[c] + n);
        FUZZ_CHECK(col->present[rows] <= PR_JSON_PRESENT);
        if (col->present[rows] != PR_JSON_PRESENT)
            FUZZ_CHECK(n == 0);
        if (paths[c].shape == PR_JSON_SCALAR)
            FUZZ_CHECK(n <= 1);
        else
            FUZZ_CHECK(n <= paths[c].max_list);
        for (uint32_t k = nv[c]; k < col->n_values; k++) {
            if (paths[c].type == PR_JSON_STRING || paths[c].type == PR_JSON_KEY) {
                pr_json_str s = col->str[k];
                FUZZ_CHECK(s.off >= arena && (size_t)s.off + s.len <= b->arena_len);
                FUZZ_CHECK(valid_utf8((const uint8_t *)b->arena + s.off, s.len));
            } else if (paths[c].type == PR_JSON_BOOL) {
                FUZZ_CHECK(col->b[k] <= 1);
            } else if (paths[c].type == PR_JSON_ANY) {
                const pr_json_any *v = &col->any[k];
                FUZZ_CHECK(v->type <= PR_JSON_ANY);
                FUZZ_CHECK(v->type != PR_JSON_HOLE || paths[c].shape == PR_JSON_ALIGNED);
                if (v->type == PR_JSON_STRING) {
                    FUZZ_CHECK(v->s.off >= arena && (size_t)v->s.off + v->s.len <= b->arena_len);
                    FUZZ_CHECK(valid_utf8((const uint8_t *)b->arena + v->s.off, v->s.len));
                }
                /* a map's keys are strings, each once */
                FUZZ_CHECK(paths[c].part != PR_JSON_KEYS || v->type == PR_JSON_STRING);
                for (uint32_t e = nv[c]; paths[c].part == PR_JSON_KEYS && e < k; e++)
                    FUZZ_CHECK(
                        col->any[e].s.len != v->s.len ||
                        memcmp(b->arena + col->any[e].s.off, b->arena + v->s.off, v->s.len) != 0);
            }
        }
    }
    return rc;
}

/* Row r of a and row r2 of b hold the same values. */
static void compare_rows(const pr_json_path *paths, const pr_json_block *a, uint32_t r,
                         const pr_json_block *b, uint32_t r2)
{
    for (uint32_t c = 0; c < a->n_cols; c++) {
        const pr_json_col *x = &a->cols[c], *y = &b->cols[c];
        FUZZ_CHECK(x->present[r] == y->present[r2] && x->count[r] == y->count[r2]);
        uint32_t n = x->count[r], vx = x->n_values - n, vy = y->n_values - n;
        for (uint32_t k = 0; k < n; k++) {
            switch (paths[c].type) {
            case PR_JSON_INT64:
                FUZZ_CHECK(x->i64[vx + k] == y->i64[vy + k]);
                break;
            case PR_JSON_DOUBLE:
                FUZZ_CHECK(!memcmp(&x->f64[vx + k], &y->f64[vy + k], sizeof(double)));
                break;
            case PR_JSON_BOOL:
                FUZZ_CHECK(x->b[vx + k] == y->b[vy + k]);
                break;
            case PR_JSON_ANY: {
                const pr_json_any *p = &x->any[vx + k], *q = &y->any[vy + k];
                FUZZ_CHECK(p->type == q->type);
                if (p->type == PR_JSON_STRING)
                    FUZZ_CHECK(p->s.len == q->s.len &&
                               !memcmp(a->arena + p->s.off, b->arena + q->s.off, p->s.len));
                else if (p->type == PR_JSON_DOUBLE)
                    FUZZ_CHECK(!memcmp(&p->d, &q->d, sizeof(double)));
                else if (p->type != PR_JSON_HOLE)
                    FUZZ_CHECK(p->i == q->i);
                break;
            }
            default:
                FUZZ_CHECK(x->str[vx + k].len == y->str[vy + k].len);
                FUZZ_CHECK(!memcmp(a->arena + x->str[vx + k].off, b->arena + y->str[vy + k].off,
                                   x->str[vx + k].len));
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    const unsigned flags = data[0];
    const char *doc = (const char *)data + 1;
    const size_t len = size - 1;
    const pr_json_extractor *x = xs[flags & 7];
    const pr_json_path *paths = sets[flags & 3].p;
    pr_json_block *a = pr_json_block_new(x, (flags & 8) ? 2 : 64);
    pr_json_block *b = pr_json_block_new(x, 64);
    FUZZ_CHECK(a && b);

    /* Twice into the same block (a second row after the first), then into a
     * full block when it has 2 rows. */
    int r1 = extract_checked(x, paths, a, doc, len);
    int r2 = extract_checked(x, paths, a, doc, len);
    FUZZ_CHECK(r1 == r2);
    if (flags & 8) {
        int r3 = extract_checked(x, paths, a, doc, len);
        FUZZ_CHECK(r3 == (r1 == 0 ? PR_EFULL : r1));
    }

    /* The document followed by whitespace, in an exact-size copy. */
    char *padded = malloc(len + 24);
    memcpy(padded, doc, len);
    memset(padded + len, ' ', 23);
    padded[len + 23] = '\n';
    int rp = extract_checked(x, paths, b, padded, len + 24);
    FUZZ_CHECK((r1 == 0) == (rp == 0));
    if (r1 == 0) {
        compare_rows(paths, a, a->rows - 1, b, b->rows - 1);
        FUZZ_CHECK(a->cols[0].count[0] == a->cols[0].count[1]);
    }
    free(padded);
    pr_json_block_free(a);
    pr_json_block_free(b);
    return 0;
}
