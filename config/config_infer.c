/*
 * config_infer.c — `piperec infer`: a declared-schema config from sample events.
 *
 * A team with a topic of JSON events should not have to write forty lines of
 * YAML before its first batch. This file reads sample events (one JSON object
 * each), keeps statistics per field path (how often present, which types,
 * distinct values, numeric range, list lengths, whether the values look like
 * times), and writes the config those statistics suggest: the event time,
 * the labels (numbers, or by value: --labels type=click|purchase gives
 * `in: [click, purchase]`, and the field is then no input), dense features
 * with a transform fitted to the sample, dense vectors (embeddings: lists
 * of numbers of one length), sparse ids and
 * multi-valued lists with a vocabulary, and a comment on every line
 * saying what was seen, so the reader can judge each choice. Fields not used
 * are listed with the reason. The decisions are a fixed table of rules
 * (docs/configuration.md, "Inferring a schema"), not a model: the same events
 * give the same config, and the caller checks that it loads.
 *
 * Memory is bounded: at most PR__INF_MAX_PATHS paths and, per path, an exact
 * set of at most PR__INF_DISTINCT_CAP distinct values (PR__INF_DISTINCT_NUM
 * for fractional numbers; then "over"): 256 MiB for a thousand string
 * fields of unique values, a few MiB for ordinary events.
 */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pr_config_int.h"
#include "pr_engine.h"

#define PR__INF_MAX_PATHS    1024
#define PR__INF_DISTINCT_CAP 16384 /* values of ids: a unique id shows up to here */
#define PR__INF_DISTINCT_NUM 256   /* values of fractional numbers: only few or one matter */
#define PR__INF_FEW_VALUES   64 /* an integer field with at most this many values is a category */
#define PR__INF_MAX_DEPTH    64
#define PR__INF_MAP_KEYS     64         /* an object with this many distinct keys is a map */
#define PR__INF_MAP_MIN_KEYS 16         /* ... and one with this many, few of them per event */
#define PR__INF_RARE_PCT     1.0        /* a field in under 1% of the events ... */
#define PR__INF_RARE_EVENTS  10         /* ... and under 10 of them is too rare to learn from */
#define PR__INF_CHUNK        (1u << 20) /* a delimited record is read this much at a time */
/* What an integer beyond int64 becomes for the walk (JSON text; a string
 * whose first byte is 0, which the statistics count as such an integer). */
#define PR__INF_BIGINT_JSON "\"\\u0000piperec:integer beyond int64\""
#define PR__INF_BIGINT_LEN                                                                         \
    (sizeof("piperec:integer beyond int64")) /* objects and lists deeper than the decoder reads    \
                                                (too_deep) */

/* One field path and what was seen there. */
typedef struct pr__ip {
    char path[PR_FEAT_PATH_MAX];
    bool path_bad;    /* a segment the path syntax cannot name, or too long */
    bool under_list;  /* crosses a list of objects: read as a list */
    bool nested;      /* a list met under a list of objects */
    bool too_deep;    /* objects nested deeper than the decoder reads */
    uint64_t records; /* events where it held something non-null */
    uint64_t nulls;
    uint64_t n_obj, n_arr_obj, n_arr_scalar, n_arr_empty, n_scalar; /* shapes of the value */
    /* scalars: the value itself, a list's elements, or a mapped field's values */
    uint64_t n_bool, n_int, n_num, n_str, n_elem_null, n_elem_other;
    uint64_t n_stat; /* numbers seen (bool, int, num) */
    double min, max, mean, m2;
    bool non_binary; /* a number other than 0 and 1 */
    uint64_t n_time[PR_TIME__COUNT];
    uint64_t n_time_ns;   /* numbers of nanoseconds since the epoch */
    uint64_t n_bigint;    /* integers beyond int64 */
    uint64_t n_nonfinite; /* NaN or infinities (an Avro or Protobuf float) */
    uint64_t n_badutf8;   /* strings that are not UTF-8 (Avro, Protobuf) */
    uint64_t n_badtime;   /* Protobuf Timestamps or Durations out of range */
    uint64_t n_date;      /* strings that are dates, YYYY-MM-DD */
    double max_abs;
    uint64_t *set; /* distinct values' hashes, open addressing, 0 = empty */
    size_t set_cap, set_n;
    bool set_full;
    uint32_t *len_hist; /* lists: events by length, [0, PR_FEAT_MAX_LIST + 1] */
    uint32_t cur_len, max_len;
    uint64_t cur_rec; /* event number + 1 it was last touched in */
    char example[40];
    char list_example[48]; /* the first list of values' first elements: "[0.12, -3, ...]" */
    /* an object (not under a list of objects): its keys (distinct in set,
     * per event in len_hist / cur_len / max_len) and its values, to tell a
     * map ({"sports": 0.7}) from a record (pr__inf_is_map) */
    bool map_now;       /* over PR__INF_MAP_KEYS keys: keys no longer paths */
    int8_t schema_map;  /* the writer schema's word (pr__infer_set_schema): 1 may be a map, -1
                         * a record or message, 0 not asked yet */
    int8_t schema_time; /* likewise (time_at): 1 a time by its type, -1 not, 0 not asked */
    uint64_t mv_num, mv_null, mv_other; /* its values: numbers (within float32), null, others */
    uint64_t mv_str;                    /* ... of the others, strings */
    double mv_min, mv_max;
    bool mv_weights; /* a number other than 0 and 1 among them */
} pr__ip;

struct pr_infer {
    pr__ip *ps;
    size_t n, cap;
    uint32_t *index; /* open addressing by path hash: ps index + 1 */
    size_t index_cap;
    uint64_t events, bad, paths_dropped;
    char last_err[200]; /* why the last refused event was */
    bool avro_registry; /* Avro records came in schema-registry framing */
    const void *schema; /* pr__infer_set_schema */
    pr__infer_map_fn map_at, time_at;
};

/* A value's key in a distinct set: the operators' hash (XXH64) of its
 * bytes, apart by type (42, "42" and 42.0 differ), never 0 (an empty slot). */
static uint64_t pr__value_key(const void *p, size_t n, uint64_t type)
{
    uint64_t h = pr_fop_hash64(p, n) + type * 0x9e3779b97f4a7c15ull;
    return h ? h : 1;
}

int pr_infer_new(pr_infer **out)
{
    pr_infer *inf = calloc(1, sizeof(*inf));
    if (!inf)
        return PR_ENOMEM;
    inf->index_cap = 2 * PR__INF_MAX_PATHS;
    inf->index = calloc(inf->index_cap, sizeof(*inf->index));
    if (!inf->index) {
        free(inf);
        return PR_ENOMEM;
    }
    *out = inf;
    return 0;
}

void pr_infer_free(pr_infer *inf)
{
    if (!inf)
        return;
    for (size_t i = 0; i < inf->n; i++) {
        free(inf->ps[i].set);
        free(inf->ps[i].len_hist);
    }
    free(inf->ps);
    free(inf->index);
    free(inf);
}

uint64_t pr_infer_events(const pr_infer *inf)
{
    return inf->events;
}

uint64_t pr_infer_rejected(const pr_infer *inf)
{
    return inf->bad;
}

const char *pr_infer_last_error(const pr_infer *inf)
{
    return inf->last_err;
}

/* A key the path syntax can name, and YAML can print (libyaml's printable
 * set: no control character, C1 control, byte-order mark, U+FFFE/U+FFFF or
 * character beyond U+FFFF): non-empty, no '.', no space. */
static bool pr__key_ok(const char *k)
{
    const unsigned char *c = (const unsigned char *)k;
    if (!*c)
        return false;
    for (; *c; c++) {
        if (*c == '.' || *c <= ' ' || *c == 0x7f)
            return false;
        if (*c < 0x80)
            continue;
        if (*c >= 0xf0 || (*c == 0xc2 && c[1] < 0xa0) ||
            (*c == 0xef &&
             ((c[1] == 0xbb && c[2] == 0xbf) || (c[1] == 0xbf && (c[2] == 0xbe || c[2] == 0xbf)))))
            return false;
    }
    return true;
}

/* A comment's text: printed ASCII only (a key or a file name may hold
 * anything; YAML refuses control characters even in comments). */
static void pr__comment(pr_mbuf *mb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pr__comment(pr_mbuf *mb, const char *fmt, ...)
{
    char b[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof(b), fmt, ap);
    va_end(ap);
    for (char *p = b; *p; p++)
        if ((unsigned char)*p < ' ' || (unsigned char)*p >= 0x7f)
            *p = '?';
    pr_mbuf_puts(mb, b);
}

static pr__ip *pr__ip_find(const pr_infer *inf, const char *path)
{
    size_t mask = inf->index_cap - 1;
    for (size_t k = pr_fop_hash64(path, strlen(path)) & mask;; k = (k + 1) & mask) {
        uint32_t at = inf->index[k];
        if (!at)
            return NULL;
        if (!strcmp(inf->ps[at - 1].path, path))
            return &inf->ps[at - 1];
    }
}

/* The path's entry, created at first sight (the caller keeps the cap);
 * NULL when out of memory. */
static pr__ip *pr__ip_get(pr_infer *inf, const char *path, bool bad, bool under_list)
{
    size_t len = strlen(path);
    size_t mask = inf->index_cap - 1;
    pr__ip *found = pr__ip_find(inf, path);
    if (found)
        return found;
    if (inf->n == inf->cap) {
        size_t cap = inf->cap ? 2 * inf->cap : 64;
        pr__ip *ps = realloc(inf->ps, cap * sizeof(*ps));
        if (!ps)
            return NULL;
        inf->ps = ps;
        inf->cap = cap;
    }
    pr__ip *ip = &inf->ps[inf->n];
    memset(ip, 0, sizeof(*ip));
    snprintf(ip->path, sizeof(ip->path), "%s", path);
    ip->path_bad = bad || len >= PR_FEAT_PATH_MAX;
    ip->under_list = under_list;
    if (under_list) { /* a mapped field is a list: its lengths per event */
        ip->len_hist = calloc(PR_FEAT_MAX_LIST + 2, sizeof(*ip->len_hist));
        if (!ip->len_hist)
            return NULL;
    }
    inf->n++;
    for (size_t k = pr_fop_hash64(path, len) & mask;; k = (k + 1) & mask)
        if (!inf->index[k]) {
            inf->index[k] = (uint32_t)inf->n;
            break;
        }
    return ip;
}

/* The path is seen in event `rec`: counts the event once, closes the last
 * event's list length. */
static void pr__touch(pr__ip *ip, uint64_t rec)
{
    if (ip->cur_rec == rec + 1)
        return;
    if (ip->cur_rec && ip->len_hist)
        ip->len_hist[ip->cur_len > PR_FEAT_MAX_LIST ? PR_FEAT_MAX_LIST + 1 : ip->cur_len]++;
    ip->cur_rec = rec + 1;
    ip->cur_len = 0;
    ip->records++;
}

static void pr__distinct(pr__ip *ip, uint64_t h)
{
    if (ip->set_full)
        return;
    if (ip->set_n * 2 >= ip->set_cap) {
        if (ip->set_n >= (ip->n_num ? PR__INF_DISTINCT_NUM : PR__INF_DISTINCT_CAP)) {
            ip->set_full = true;
            return;
        }
        size_t cap = ip->set_cap ? 2 * ip->set_cap : 64;
        uint64_t *set = calloc(cap, sizeof(*set));
        if (!set) {
            ip->set_full = true;
            return;
        }
        for (size_t i = 0; i < ip->set_cap; i++)
            if (ip->set[i])
                for (size_t k = ip->set[i] & (cap - 1);; k = (k + 1) & (cap - 1))
                    if (!set[k]) {
                        set[k] = ip->set[i];
                        break;
                    }
        free(ip->set);
        ip->set = set;
        ip->set_cap = cap;
    }
    for (size_t k = h & (ip->set_cap - 1);; k = (k + 1) & (ip->set_cap - 1)) {
        if (ip->set[k] == h)
            return;
        if (!ip->set[k]) {
            ip->set[k] = h;
            ip->set_n++;
            return;
        }
    }
}

static void pr__inf_number(pr__ip *ip, double x)
{
    ip->n_stat++;
    if (ip->n_stat == 1 || x < ip->min)
        ip->min = x;
    if (ip->n_stat == 1 || x > ip->max)
        ip->max = x;
    double d = x - ip->mean;
    ip->mean += d / (double)ip->n_stat;
    ip->m2 += d * (x - ip->mean);
    if (x != 0 && x != 1)
        ip->non_binary = true;
    double a = fabs(x);
    if (a > ip->max_abs)
        ip->max_abs = a;
    if (a >= 1e18 && a < 1e19)
        ip->n_time_ns++;
    if (a >= 1e9 && a < 1e10)
        ip->n_time[PR_TIME_S]++;
    else if (a >= 1e12 && a < 1e13)
        ip->n_time[PR_TIME_MS]++;
    else if (a >= 1e15 && a < 1e16)
        ip->n_time[PR_TIME_US]++;
}

/* A string that is a date, YYYY-MM-DD. */
static bool pr__is_date(const char *s, size_t n)
{
    static const char pat[] = "dddd-dd-dd";
    if (n != sizeof(pat) - 1)
        return false;
    for (size_t i = 0; i < n; i++)
        if (pat[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != '-')
            return false;
    return true;
}

/* One scalar value at the path (the value, a list element, a mapped field). */
static void pr__inf_scalar(pr__ip *ip, const json_t *v)
{
    uint64_t h = 0;
    switch (json_typeof(v)) {
    case JSON_TRUE:
    case JSON_FALSE: {
        int b = json_is_true(v);
        ip->n_bool++;
        pr__inf_number(ip, b);
        h = pr__value_key(&b, sizeof(b), 1);
        if (!ip->example[0])
            snprintf(ip->example, sizeof(ip->example), "%s", b ? "true" : "false");
        break;
    }
    case JSON_INTEGER: {
        json_int_t x = json_integer_value(v);
        ip->n_int++;
        pr__inf_number(ip, (double)x);
        h = pr__value_key(&x, sizeof(x), 2);
        if (!ip->example[0])
            snprintf(ip->example, sizeof(ip->example), "%" JSON_INTEGER_FORMAT, x);
        break;
    }
    case JSON_REAL: {
        double x = json_real_value(v);
        ip->n_num++;
        pr__inf_number(ip, x);
        h = pr__value_key(&x, sizeof(x), 3);
        if (!ip->example[0])
            snprintf(ip->example, sizeof(ip->example), "%.6g", x);
        break;
    }
    case JSON_STRING: {
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n > 9 && !s[0] && !memcmp(s + 1, "piperec:", 8)) { /* a marker */
            if (n == sizeof(PR__INF_MARK_NONFINITE) - 1 && !memcmp(s, PR__INF_MARK_NONFINITE, n))
                ip->n_nonfinite++;
            else if (n == sizeof(PR__INF_MARK_BADUTF8) - 1 && !memcmp(s, PR__INF_MARK_BADUTF8, n))
                ip->n_badutf8++;
            else if (n == sizeof(PR__INF_MARK_BADTIME) - 1 && !memcmp(s, PR__INF_MARK_BADTIME, n))
                ip->n_badtime++;
            else
                ip->n_bigint++; /* the one pr_infer_add_json puts there */
            return;
        }
        int64_t us;
        ip->n_str++;
        if (pr_fop_parse_rfc3339(s, n, &us) == 0)
            ip->n_time[PR_TIME_RFC3339]++;
        else if (pr__is_date(s, n))
            ip->n_date++;
        h = pr__value_key(s, n, 4);
        if (!ip->example[0]) {
            /* a printable excerpt in quotes (no quote, backslash or control byte) */
            size_t k = 0, cap = sizeof(ip->example) - 5;
            ip->example[k++] = '"';
            for (size_t i = 0; i < n && k < cap; i++) {
                unsigned char c = (unsigned char)s[i];
                ip->example[k++] = (c < ' ' || c == '"' || c == '\\' || c >= 0x7f) ? '?' : (char)c;
            }
            if (n + 1 > cap) {
                memcpy(ip->example + k, "...", 3);
                k += 3;
            }
            ip->example[k++] = '"';
            ip->example[k] = 0;
        }
        break;
    }
    default:
        return;
    }
    pr__distinct(ip, h);
}

/* The first elements of a list of values, as the comment of a dense
 * vector shows them: "[0.12, -3, 7.5, ...]". */
static void pr__list_example(pr__ip *ip, const json_t *v)
{
    char *b = ip->list_example;
    size_t cap = sizeof(ip->list_example), k = 1, n = json_array_size(v), i = 0;
    b[0] = '[';
    for (; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        char one[32];
        if (json_is_integer(e))
            snprintf(one, sizeof(one), "%" JSON_INTEGER_FORMAT, json_integer_value(e));
        else if (json_is_real(e))
            snprintf(one, sizeof(one), "%.4g", json_real_value(e));
        else
            snprintf(one, sizeof(one), "%s", json_is_string(e) ? "\"...\"" : "?");
        size_t len = strlen(one) + (i ? 2 : 0);
        if (k + len + sizeof(", ...]") > cap)
            break;
        k += (size_t)snprintf(b + k, cap - k, "%s%s", i ? ", " : "", one);
    }
    snprintf(b + k, cap - k, "%s]", i < n ? ", ..." : "");
}

static int pr__inf_walk(pr_infer *inf, const char *prefix, bool prefix_bad, const json_t *obj,
                        bool under_list, uint64_t rec, unsigned depth);

/* The keys and values of the object v at ip (not under a list of objects):
 * what tells a map from a record. */
static void pr__inf_object(pr__ip *ip, const json_t *v)
{
    const char *key;
    json_t *kv;
    json_object_foreach((json_t *)v, key, kv)
    {
        pr__distinct(ip, pr__value_key(key, strlen(key), 5));
        if (!ip->example[0])
            snprintf(ip->example, sizeof(ip->example), "\"%.30s\"", key);
        if (json_is_null(kv)) {
            ip->mv_null++;
        } else if (json_is_number(kv) && fabs(json_number_value(kv)) <= FLT_MAX) {
            double x = json_number_value(kv);
            if (!ip->mv_num || x < ip->mv_min)
                ip->mv_min = x;
            if (!ip->mv_num || x > ip->mv_max)
                ip->mv_max = x;
            ip->mv_num++;
            ip->mv_weights |= x != 0 && x != 1;
        } else {
            ip->mv_other++;
            ip->mv_str += json_is_string(kv);
        }
    }
    size_t n = json_object_size(v);
    ip->cur_len = (uint32_t)(n > UINT32_MAX ? UINT32_MAX : n);
    if (ip->cur_len > ip->max_len)
        ip->max_len = ip->cur_len;
    if (ip->schema_map < 0) /* a record or message by its schema: never a map */
        return;
    if (!ip->set_full && ip->set_n >= PR__INF_MAP_KEYS)
        ip->map_now = true;
    else if (ip->set_full)
        ip->map_now = true;
}

/* The value v found at `path`. */
static int pr__inf_value(pr_infer *inf, const char *path, bool bad, const json_t *v,
                         bool under_list, uint64_t rec, unsigned depth)
{
    if (inf->n == PR__INF_MAX_PATHS && !pr__ip_find(inf, path)) {
        inf->paths_dropped++;
        return 0;
    }
    pr__ip *ip = pr__ip_get(inf, path, bad, under_list);
    if (!ip)
        return PR_ENOMEM;
    if (json_is_null(v)) {
        ip->nulls++;
        return 0;
    }
    if (json_is_object(v)) {
        ip->n_obj++;
        pr__touch(ip, rec);
        if (depth >= PR__INF_MAX_DEPTH) { /* the decoder rejects it (too_deep) */
            ip->too_deep = true;
            return 0;
        }
        if (!under_list) {
            if (!ip->schema_map)
                ip->schema_map = !inf->map_at || inf->map_at(inf->schema, path) ? 1 : -1;
            if (!ip->len_hist &&
                !(ip->len_hist = calloc(PR_FEAT_MAX_LIST + 2, sizeof(*ip->len_hist))))
                return PR_ENOMEM;
            pr__inf_object(ip, v);
            if (ip->map_now) /* a map: its keys are no paths (they would fill the table) */
                return 0;
        }
        /* the walk may grow inf->ps: neither ip nor ip->path outlives it */
        return pr__inf_walk(inf, path, ip->path_bad, v, under_list, rec, depth + 1);
    }
    if (!json_is_array(v)) {
        ip->n_scalar++;
        pr__touch(ip, rec);
        if (!ip->schema_time && json_is_string(v))
            ip->schema_time = inf->time_at && inf->time_at(inf->schema, path) ? 1 : -1;
        if (under_list && ++ip->cur_len > ip->max_len)
            ip->max_len = ip->cur_len;
        pr__inf_scalar(ip, v);
        return 0;
    }
    pr__touch(ip, rec);
    if (under_list) {
        ip->nested = true;
        return 0;
    }
    if (!ip->len_hist) {
        ip->len_hist = calloc(PR_FEAT_MAX_LIST + 2, sizeof(*ip->len_hist));
        if (!ip->len_hist)
            return PR_ENOMEM;
    }
    size_t n = json_array_size(v), n_obj = 0;
    for (size_t i = 0; i < n; i++)
        n_obj += json_is_object(json_array_get(v, i));
    if (!n) { /* [] fits a list of values and a list of objects alike */
        ip->n_arr_empty++;
        return 0;
    }
    if (n_obj) {
        /* the walks may grow inf->ps: ip is found again by its index */
        size_t at = (size_t)(ip - inf->ps);
        bool pbad = ip->path_bad;
        ip->n_arr_obj++;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(v, i);
            if (json_is_object(e)) {
                if (depth >= PR__INF_MAX_DEPTH) {
                    inf->ps[at].too_deep = true;
                    break;
                }
                int rc = pr__inf_walk(inf, path, pbad, e, true, rec, depth + 2);
                if (rc)
                    return rc;
            } else if (!json_is_null(e)) {
                inf->ps[at].n_elem_other++;
            }
        }
        return 0;
    }
    ip->n_arr_scalar++;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(v, i);
        if (json_is_null(e))
            ip->n_elem_null++;
        else if (json_is_array(e))
            ip->n_elem_other++;
        else
            pr__inf_scalar(ip, e);
    }
    if (!ip->list_example[0])
        pr__list_example(ip, v);
    ip->cur_len = (uint32_t)(n > UINT32_MAX ? UINT32_MAX : n);
    if (ip->cur_len > ip->max_len)
        ip->max_len = ip->cur_len;
    return 0;
}

static int pr__inf_walk(pr_infer *inf, const char *prefix, bool prefix_bad, const json_t *obj,
                        bool under_list, uint64_t rec, unsigned depth)
{
    const char *key;
    const json_t *v;
    char path[2 * PR_FEAT_PATH_MAX];
    json_object_foreach((json_t *)obj, key, v)
    {
        bool bad = prefix_bad || !pr__key_ok(key);
        int len = snprintf(path, PR_FEAT_PATH_MAX, "%s%s%s", prefix, *prefix ? "." : "", key);
        if (len >= PR_FEAT_PATH_MAX)
            bad = true;
        int rc = pr__inf_value(inf, path, bad, v, under_list, rec, depth);
        if (rc)
            return rc;
    }
    return 0;
}

int pr__infer_add_root(pr_infer *inf, const json_t *root)
{
    int rc = pr__inf_walk(inf, "", false, root, false, inf->events, 1);
    if (rc)
        return rc;
    inf->events++;
    return 0;
}

void pr__infer_reject(pr_infer *inf)
{
    inf->bad++;
}

int pr__infer_read_delimited(pr_infer *inf, FILE *f, uint64_t max_events, pr__infer_record_fn one,
                             void *ctx, const char *what, char *errstr, size_t errstr_size)
{
    uint8_t *rec = NULL;
    size_t cap = 0;
    int rc = 0, c;
    while (!rc && pr_infer_events(inf) < max_events && (c = getc(f)) != EOF) {
        uint64_t len = 0;
        unsigned shift = 0;
        for (; c != EOF && (c & 0x80) && shift < 35; shift += 7, c = getc(f))
            len |= (uint64_t)(c & 0x7f) << shift; /* as the offline reader: 6 bytes at most */
        bool ok = c != EOF && !(c & 0x80);
        len |= ok ? (uint64_t)c << shift : 0;
        /* grown as the bytes come: a garbage length costs no more than the input has */
        for (size_t got = 0, want; ok && got < len; got += want) {
            want = len - got < PR__INF_CHUNK ? (size_t)(len - got) : PR__INF_CHUNK;
            if (got + want > cap) {
                uint8_t *nb = realloc(rec, got + want);
                if (!nb) {
                    rc = PR_ENOMEM;
                    break;
                }
                rec = nb;
                cap = got + want;
            }
            ok = fread(rec + got, 1, want, f) == want;
        }
        if (rc || ferror(f))
            break;
        if (!ok) { /* a length unreadable or beyond the input: no next record */
            pr__infer_reject(inf);
            break;
        }
        rc = one(ctx, inf, len ? rec : (const uint8_t *)"", (size_t)len);
    }
    free(rec);
    if (rc)
        return pr_seterr(errstr, errstr_size, rc, "%s: out of memory", what);
    if (ferror(f))
        return pr_seterr(errstr, errstr_size, PR_EIO, "reading the %s: %s", what, strerror(errno));
    return 0;
}

void pr__infer_set_avro_registry(pr_infer *inf)
{
    inf->avro_registry = true;
}

void pr__infer_set_schema(pr_infer *inf, const void *schema, pr__infer_map_fn map_at,
                          pr__infer_map_fn time_at)
{
    inf->schema = schema;
    inf->map_at = map_at;
    inf->time_at = time_at;
}

int pr_infer_add_json(pr_infer *inf, const char *text, size_t len)
{
    json_error_t jerr;
    /* A repeated key is refused: the decoder may reject the event at the
     * first occurrence where the statistics would keep the last. */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    char *copy = NULL;
    for (int k = 0; !root && strstr(jerr.text, "too big") && k < 64; k++) {
        /* an integer beyond int64 (jansson stops just after it): learn the
         * event with a marker string in its place, which no feature reads */
        size_t end = (size_t)jerr.position, at = end, n = copy ? strlen(copy) : len;
        const char *src = copy ? copy : text;
        while (at > 0 && (isdigit((unsigned char)src[at - 1]) || src[at - 1] == '-'))
            at--;
        if (at == end || end > n)
            break;
        char *next = malloc(n - (end - at) + sizeof(PR__INF_BIGINT_JSON));
        if (!next) {
            free(copy);
            return PR_ENOMEM;
        }
        memcpy(next, src, at);
        memcpy(next + at, PR__INF_BIGINT_JSON, sizeof(PR__INF_BIGINT_JSON) - 1);
        memcpy(next + at + sizeof(PR__INF_BIGINT_JSON) - 1, src + end, n - end);
        next[n - (end - at) + sizeof(PR__INF_BIGINT_JSON) - 1] = 0;
        free(copy);
        copy = next;
        root = json_loadb(copy, strlen(copy), JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    }
    free(copy);
    if (!root || !json_is_object(root)) {
        if (root)
            snprintf(inf->last_err, sizeof(inf->last_err), "not a JSON object");
        else
            snprintf(inf->last_err, sizeof(inf->last_err), "%s at byte %d", jerr.text,
                     jerr.position);
        json_decref(root);
        inf->bad++;
        return PR_EBADREC;
    }
    int rc = pr__infer_add_root(inf, root);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------- decisions */

typedef enum pr__ikind {
    PR__IK_NONE = 0, /* a container (object or list of objects): its fields speak */
    PR__IK_SKIP,
    PR__IK_TIME,
    PR__IK_LABEL,
    PR__IK_DENSE,
    PR__IK_SPARSE,
    PR__IK_LIST,
    PR__IK_WEIGHTS, /* the weights of a list feature beside it (pr__infer_weights) */
    PR__IK_MAPKEY,  /* a key of a map read by its keys (pr__inf_map): not listed */
} pr__ikind;

typedef struct pr__idec {
    pr__ikind kind;
    pr_time_unit unit;
    char why[256];   /* SKIP: the reason; else what was seen */
    char ops[200];   /* the ops list, or "" */
    char extra[256]; /* more keys: "default: 0", "list: { max_len: 9 }", "dim: 64" */
    char name[PR_NAME_MAX];
    uint32_t dim; /* DENSE: 0 a number, else a vector's length (its dense columns) */
    bool weights; /* SKIP: fractional numbers under a list of objects: a list's weights? */
    const char *weights_path; /* LIST: its weights' path (pr__infer_weights), or NULL */
    bool answer; /* SKIP: the field of a label by value (--labels PATH=V1|V2): no input */
    /* a label by value (after the fields' decisions): its field's index, and
     * its values as given ("V1|V2", in_len bytes, pointing into --labels) */
    size_t of;
    const char *in;
    size_t in_len;
} pr__idec;

static const char *pr__last_seg(const char *path)
{
    const char *d = strrchr(path, '.');
    return d ? d + 1 : path;
}

static bool pr__word_in(const char *w, const char *const *words)
{
    for (size_t i = 0; words[i]; i++)
        if (!strcasecmp(w, words[i]))
            return true;
    return false;
}

/* A key as the name tables below spell it: lower case, without '_' and '-'
 * ("is_Click" -> "isclick"). */
static void pr__norm(const char *seg, size_t n, char *out, size_t on)
{
    size_t k = 0;
    for (size_t i = 0; i < n && seg[i] && k + 1 < on; i++)
        if (seg[i] != '_' && seg[i] != '-')
            out[k++] = (char)tolower((unsigned char)seg[i]);
    out[k] = 0;
}

/* The path's last key, normalized. */
static void pr__norm_last(const char *path, char *out, size_t on)
{
    const char *s = pr__last_seg(path);
    pr__norm(s, strlen(s), out, on);
}

/* Names of a field that holds an outcome to learn (also after "is"). */
static const char *const pr__label_words[] = {
    "label",     "click",     "clicked",     "clicks",     "target",   "y",       "purchase",
    "purchased", "convert",   "converted",   "conversion", "like",     "liked",   "buy",
    "bought",    "share",     "shared",      "follow",     "followed", "watched", "finished",
    "completed", "addtocart", "addedtocart", "ordered",    NULL};
/* Names of a field that may say what happened (an event type: its values
 * are the outcome), for a hint towards --labels PATH=VALUE. */
static const char *const pr__event_type_words[] = {
    "type", "eventtype",   "event",           "eventname", "action",    "actiontype",
    "kind", "interaction", "interactiontype", "behavior",  "behaviour", NULL};
/* Names of an object whose number fields are all outcomes (label.dwell_s). */
static const char *const pr__label_parents[] = {"label", "labels", "outcome", "outcomes", NULL};
/* Names of a field that holds the event's time. */
static const char *const pr__time_words[] = {
    "ts",         "time",        "timestamp", "eventtime",  "eventts",   "eventtimestamp",
    "tsms",       "timestampms", "datetime",  "occurredat", "createdat", "loggedat",
    "servertime", "clienttime",  NULL};
/* Names of a field unique to each event. */
static const char *const pr__event_id_words[] = {
    "eventid", "requestid",    "messageid", "msgid",    "uuid", "guid",
    "traceid", "impressionid", "logid",     "recordid", NULL};
/* Last keys ending in "id" that are no ids. */
static const char *const pr__not_id_words[] = {
    "paid",  "valid", "invalid", "void", "avoid",  "android", "rapid", "solid", "liquid",
    "fluid", "humid", "hybrid",  "acid", "vivid",  "grid",    "squid", "mid",   "bid",
    "kid",   "lid",   "did",     "hid",  "maxbid", "minbid",  NULL};
/* Words of a key that name a vector of numbers (an embedding). */
static const char *const pr__vector_words[] = {"emb",       "embs",       "embed", "embeds",
                                               "embedding", "embeddings", "vec",   "vecs",
                                               "vector",    "vectors",    NULL};
/* Lists that are histories, newest last: keep the last values. */
static const char *const pr__history_words[] = {"history", "hist",     "recent",       "past",
                                                "seq",     "sequence", "sessionitems", NULL};

static bool pr__outcome_named(const char *path)
{
    char w[PR_FEAT_PATH_MAX];
    pr__norm_last(path, w, sizeof(w));
    return pr__word_in(w, pr__label_words) ||
           (!strncmp(w, "is", 2) && pr__word_in(w + 2, pr__label_words));
}

static bool pr__has_label_parent(const char *path)
{
    char seg[PR_FEAT_PATH_MAX];
    for (const char *p = path, *d; (d = strchr(p, '.')); p = d + 1) {
        pr__norm(p, (size_t)(d - p), seg, sizeof(seg));
        if (pr__word_in(seg, pr__label_parents))
            return true;
    }
    return false;
}

/* How much the name says "the event's time": 0 a time word at the top
 * level, 1 a *_ts, *_at, *_time (*_ms, *_us, *_ns, createdAt, sendTime)
 * key at the top level, 2 and 3 the same nested; -1 not a time name. */
static int pr__time_rank(const char *path)
{
    const char *s = pr__last_seg(path);
    if (s != path && !strcmp(s, "seconds")) { /* a Timestamp's, as an object: named by it */
        char parent[PR_FEAT_PATH_MAX];
        snprintf(parent, sizeof(parent), "%.*s", (int)(s - 1 - path), path);
        int r = pr__time_rank(parent);
        return r >= 0 ? r : 3;
    }
    size_t n = strlen(s);
    char w[PR_FEAT_PATH_MAX];
    pr__norm(s, n, w, sizeof(w));
    int nested = s != path ? 2 : 0;
    if (pr__word_in(w, pr__time_words))
        return nested;
    if ((n > 3 && (!strcasecmp(s + n - 3, "_ts") || !strcasecmp(s + n - 3, "_at") ||
                   !strcasecmp(s + n - 3, "_ms") || !strcasecmp(s + n - 3, "_us") ||
                   !strcasecmp(s + n - 3, "_ns"))) ||
        (n > 5 && !strcasecmp(s + n - 5, "_time")) ||
        (n > 2 && islower((unsigned char)s[n - 3]) && !strcmp(s + n - 2, "At")) ||
        (n > 4 && islower((unsigned char)s[n - 5]) && !strcmp(s + n - 4, "Time")))
        return nested + 1;
    return -1;
}

/* pr__time_rank, and a time by its type (time_at: a Protobuf Timestamp)
 * that no time word names ranks last, 3. */
static int pr__time_rank_of(const pr__ip *ip)
{
    int r = pr__time_rank(ip->path);
    return r < 0 && ip->schema_time > 0 ? 3 : r;
}

/* id, ids, user_id, item-ids, userId, itemIDs, userid, uid, sku; not paid,
 * valid, android, max_bid. */
static bool pr__id_named(const char *path)
{
    const char *s = pr__last_seg(path);
    size_t n = strlen(s);
    char w[PR_FEAT_PATH_MAX];
    pr__norm(s, n, w, sizeof(w));
    size_t k = strlen(w);
    if (k && w[k - 1] == 's' && k > 2 && !strcmp(w + k - 3, "ids"))
        w[--k] = 0; /* a plural */
    if (!strcmp(w, "sku") || !strcmp(w, "skus"))
        return true;
    if (k < 2 || strcmp(w + k - 2, "id") || pr__word_in(w, pr__not_id_words))
        return false;
    /* "id" itself, after a separator or a camel hump (user_id, userId), or
     * closing a short all-lower key (userid, uid): not a word that ends so */
    if (k == 2 || s[n - 3 - (s[n - 1] == 's')] == '_' || s[n - 3 - (s[n - 1] == 's')] == '-' ||
        s[n - 2 - (s[n - 1] == 's')] == 'I')
        return true;
    return k <= 8;
}

static bool pr__event_id_named(const char *path)
{
    char w[PR_FEAT_PATH_MAX];
    pr__norm_last(path, w, sizeof(w));
    return pr__word_in(w, pr__event_id_words) || !strcmp(path, "id") || !strcmp(path, "_id");
}

/* A word of the last key (split at '_', '-', digits and camel humps) names
 * a vector: user_emb, itemEmbedding, item2vec, QUERY_VECTOR; not member,
 * vecto. */
static bool pr__vector_named(const char *path)
{
    const char *s = pr__last_seg(path);
    for (size_t i = 0, n = strlen(s); i < n;) {
        if (!isalpha((unsigned char)s[i])) {
            i++;
            continue;
        }
        char w[PR_FEAT_PATH_MAX];
        size_t k = 0;
        w[k++] = s[i++];
        for (; i < n && isalpha((unsigned char)s[i]) &&
               !(isupper((unsigned char)s[i]) && islower((unsigned char)s[i - 1]));
             i++)
            w[k++] = s[i];
        w[k] = 0;
        if (pr__word_in(w, pr__vector_words))
            return true;
    }
    return false;
}

static bool pr__history_named(const char *path)
{
    char w[PR_FEAT_PATH_MAX];
    pr__norm_last(path, w, sizeof(w));
    for (size_t i = 0; pr__history_words[i]; i++)
        if (strstr(w, pr__history_words[i]))
            return true;
    return false;
}

/* The unit of the path's times: RFC 3339 when every value is such a string;
 * s, ms or us when every value is a number, at least 99% of them lie in
 * that unit's range and none beyond it (a few sentinels, 0 or -1, read as
 * early times; a larger one the decoder rejects as bad_time); else -1. */
static int pr__time_unit_of(const pr__ip *ip)
{
    uint64_t scalars = ip->n_bool + ip->n_int + ip->n_num + ip->n_str;
    if (!scalars || ip->n_arr_scalar || ip->n_arr_obj || ip->n_obj || ip->under_list ||
        ip->n_bool || ip->n_bigint)
        return -1;
    if (ip->n_str)
        return ip->n_time[PR_TIME_RFC3339] == scalars ? PR_TIME_RFC3339 : -1;
    static const double upper[] = {[PR_TIME_S] = 1e10, [PR_TIME_MS] = 1e13, [PR_TIME_US] = 1e16};
    for (int u = 0; u < PR_TIME_RFC3339; u++)
        if (ip->n_time[u] * 100 >= scalars * 99 && ip->max_abs < upper[u])
            return u;
    return -1;
}

static uint64_t pr__distinct_n(const pr__ip *ip)
{
    return ip->set_n;
}

/* "8123 distinct" or "more than 65536 distinct". */
static void pr__distinct_text(const pr__ip *ip, char *b, size_t n)
{
    if (ip->set_full)
        snprintf(b, n, "over %zu distinct", ip->set_n);
    else
        snprintf(b, n, "%zu distinct", ip->set_n);
}

/* The length at the q-th quantile of the events holding the list (the
 * last event's length is still in cur_len). */
static uint32_t pr__len_quantile(const pr__ip *ip, double q)
{
    uint32_t last = ip->cur_len > PR_FEAT_MAX_LIST ? PR_FEAT_MAX_LIST + 1 : ip->cur_len;
    uint64_t total = ip->cur_rec ? 1 : 0, acc = 0;
    for (uint32_t i = 0; i <= PR_FEAT_MAX_LIST + 1; i++)
        total += ip->len_hist[i];
    uint64_t want = (uint64_t)ceil(q * (double)total);
    for (uint32_t i = 0; i <= PR_FEAT_MAX_LIST + 1; i++) {
        acc += ip->len_hist[i] + (ip->cur_rec && i == last);
        if (acc >= want && acc)
            return i;
    }
    return ip->max_len;
}

/* The shortest and longest non-empty list (PR_FEAT_MAX_LIST + 1: longer)
 * into *lo, *hi; the events holding one (an empty list reads as missing). */
static uint64_t pr__len_range(const pr__ip *ip, uint32_t *lo, uint32_t *hi)
{
    uint32_t last = ip->cur_len > PR_FEAT_MAX_LIST ? PR_FEAT_MAX_LIST + 1 : ip->cur_len;
    uint64_t held = 0;
    *lo = *hi = 0;
    for (uint32_t i = 1; i <= PR_FEAT_MAX_LIST + 1; i++) {
        uint64_t k = ip->len_hist[i] + (ip->cur_rec && i == last);
        if (!k)
            continue;
        held += k;
        if (!*lo)
            *lo = i;
        *hi = i;
    }
    return held;
}

static double pr__std(const pr__ip *ip)
{
    return ip->n_stat ? sqrt(ip->m2 / (double)ip->n_stat) : 0; /* as process --fit: ddof 0 */
}

/* The next item of a comma list into out; false at the end. An item that
 * does not fit gives "" (which matches no path). */
static bool pr__csv_next(const char **p, char *out, size_t n)
{
    if (!*p || !**p)
        return false;
    const char *e = strchr(*p, ',');
    size_t k = e ? (size_t)(e - *p) : strlen(*p);
    out[0] = 0;
    if (k < n) {
        memcpy(out, *p, k);
        out[k] = 0;
    }
    *p += k + (e ? 1 : 0);
    return true;
}

/* The path is an item of the comma list (or, with under, lies under one). */
static bool pr__in_list(const char *path, const char *csv, bool under)
{
    char item[PR_FEAT_PATH_MAX];
    size_t n = strlen(path);
    for (const char *p = csv; pr__csv_next(&p, item, sizeof(item));) {
        size_t k = strlen(item);
        if (k && k <= n && !strncmp(item, path, k) && (path[k] == 0 || (under && path[k] == '.')))
            return true;
    }
    return false;
}

/* One item of --labels: PATH (a label of that number), or PATH=V1|V2|...
 * (a label by value: 1 when the field holds one of the values). The first
 * '=' ends the path, '|' separates the values. */
typedef struct pr__litem {
    char path[PR_FEAT_PATH_MAX]; /* "" when empty or over-long */
    const char *text;            /* the item as given, len bytes */
    size_t len;
    const char *vals; /* after '=', vals_len bytes; NULL: a plain label */
    size_t vals_len;
} pr__litem;

/* The next item of the --labels list into *it; false at the end. */
static bool pr__label_next(const char **p, pr__litem *it)
{
    if (!*p || !**p)
        return false;
    const char *e = strchr(*p, ',');
    size_t k = e ? (size_t)(e - *p) : strlen(*p);
    const char *eq = memchr(*p, '=', k);
    size_t pn = eq ? (size_t)(eq - *p) : k;
    it->text = *p;
    it->len = k;
    it->vals = eq ? eq + 1 : NULL;
    it->vals_len = eq ? k - pn - 1 : 0;
    it->path[0] = 0;
    if (pn < sizeof(it->path)) {
        memcpy(it->path, *p, pn);
        it->path[pn] = 0;
    }
    *p += k + (e ? 1 : 0);
    return true;
}

/* The next value of an item's "V1|V2|..." (end: past its last byte) into
 * *v, *n; false after the last. */
static bool pr__label_value(const char **p, const char *end, const char **v, size_t *n)
{
    if (*p > end)
        return false;
    const char *bar = memchr(*p, '|', (size_t)(end - *p));
    *v = *p;
    *n = bar ? (size_t)(bar - *p) : (size_t)(end - *p);
    *p = bar ? bar + 1 : end + 1;
    return true;
}

/* The first --labels item naming path, plain or by value (as by_value
 * asks), into *out (may be NULL); false when none does. */
static bool pr__label_item(const char *labels, const char *path, bool by_value, pr__litem *out)
{
    pr__litem it;
    for (const char *p = labels; pr__label_next(&p, &it);)
        if (!it.vals == !by_value && it.path[0] && !strcmp(it.path, path)) {
            if (out)
                *out = it;
            return true;
        }
    return false;
}

static void pr__inf_skip(pr__idec *d, const char *why)
{
    d->kind = PR__IK_SKIP;
    snprintf(d->why, sizeof(d->why), "%s", why);
}

/* The ops and comment of a numeric (dense) feature. The fitted numbers are
 * printed with 9 digits, which give the float32 the engine computes in. */
static void pr__inf_dense(const pr__ip *ip, uint64_t events, pr__idec *d)
{
    double sd = pr__std(ip), pct = 100.0 * (double)ip->records / (double)events;
    d->kind = PR__IK_DENSE;
    snprintf(d->why, sizeof(d->why), "%s %.6g..%.6g, mean %.6g, std %.6g, in %.0f%% of events",
             ip->n_num ? "numbers" : "integers", ip->min, ip->max, ip->mean, sd, pct);
    if (ip->min == ip->max) { /* absent or this value: no measure */
        char b[256];
        snprintf(b, sizeof(b), "one number (%.6g) where present, in %.0f%% of events: no measure",
                 ip->min, pct);
        pr__inf_skip(d, b);
    } else if (ip->min >= 0 &&
               (ip->max >= 100 || ip->max > 10 * ip->mean || !isfinite(sd) || ip->max > FLT_MAX)) {
        /* non-negative and long-tailed (counts, prices, durations) */
        snprintf(d->ops, sizeof(d->ops), "log1p");
    } else if (!isfinite(sd) || !isfinite(ip->mean) || ip->max_abs > FLT_MAX) {
        pr__inf_skip(d, "numbers beyond float32, some negative: no transform here keeps them");
    } else if (ip->records < events) {
        /* a missing value becomes the mean, so 0 after standardizing */
        snprintf(d->ops, sizeof(d->ops),
                 "{ fill: %.9g }, { standardize: { mean: %.9g, std: %.9g } }", ip->mean, ip->mean,
                 sd);
    } else {
        snprintf(d->ops, sizeof(d->ops), "{ standardize: { mean: %.9g, std: %.9g } }", ip->mean,
                 sd);
    }
}

/* Every object on the way to the path is always one shape: an object (or
 * null), or a list of objects (or []); else the decoder would meet a value,
 * or the other shape, where the path goes through. NULL, or the first
 * ancestor that is not. */
static const pr__ip *pr__ancestor_mixed(const pr_infer *inf, const pr__ip *ip)
{
    char pre[PR_FEAT_PATH_MAX];
    for (const char *d = strchr(ip->path, '.'); d; d = strchr(d + 1, '.')) {
        size_t n = (size_t)(d - ip->path);
        memcpy(pre, ip->path, n);
        pre[n] = 0;
        const pr__ip *a = pr__ip_find(inf, pre);
        if (!a)
            continue;
        bool obj = a->n_obj, objs = a->n_arr_obj + a->n_arr_empty;
        if (a->n_scalar || a->n_arr_scalar || a->n_elem_other || (obj && objs))
            return a;
    }
    return NULL;
}

/* What the decision reads of one field, computed once. */
typedef struct pr__ictx {
    const pr_infer *inf;
    const pr__ip *ip;
    const pr_infer_opts *o;
    uint64_t scalars; /* values seen (a list's elements) */
    double pct;       /* share of the events holding it */
    bool list;        /* read as a list */
    bool labels_given;
    int unit;       /* pr__time_unit_of */
    bool have_time; /* an event time was picked: another time can be an age */
    char dist[48];
} pr__ictx;

/* Is the object at ip a map, whose keys are ids (list: { from: keys }),
 * rather than a record of fields? Over PR__INF_MAP_KEYS distinct keys, or
 * PR__INF_MAP_MIN_KEYS with at most a quarter of them in half the events;
 * always an object, not under a list of objects. */
/* Keys as a map has them (many, few per event), whatever else the path
 * holds in some events. */
static bool pr__inf_map_keys(const pr__ip *ip)
{
    if (!ip->n_obj || ip->under_list || ip->path_bad || !ip->len_hist || ip->schema_map < 0)
        return false;
    if (ip->map_now)
        return true;
    return ip->set_n >= PR__INF_MAP_MIN_KEYS && 4 * pr__len_quantile(ip, 0.5) <= ip->set_n;
}

static bool pr__inf_is_map(const pr__ip *ip)
{
    return !ip->n_scalar && !ip->n_arr_obj && !ip->n_arr_scalar && !ip->n_arr_empty &&
           pr__inf_map_keys(ip);
}

/* The map whose keys ip lies under (ip a field of one of its values), or
 * NULL. */
static const pr__ip *pr__inf_in_map(const pr_infer *inf, const pr__ip *ip)
{
    char pre[PR_FEAT_PATH_MAX];
    snprintf(pre, sizeof(pre), "%s", ip->path);
    for (char *dot = strchr(pre, '.'); dot; dot = strchr(dot + 1, '.')) {
        *dot = '\0';
        const pr__ip *a = pr__ip_find(inf, pre);
        *dot = '.';
        if (a && pr__inf_is_map(a))
            return a;
    }
    return NULL;
}

/* A map (pr__inf_is_map) as a list of its keys, weighted by its values
 * when they are numbers beyond 0/1: true when decided. */
static bool pr__inf_map(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    if (!pr__inf_is_map(ip))
        return false;
    if (ip->max_len > PR_FEAT_MAX_LIST) {
        pr__inf_skip(d, "a map with over 4096 keys in some events: the decoder rejects those "
                        "(list_too_long)");
        return true;
    }
    uint32_t p99 = pr__len_quantile(ip, 0.99);
    bool weighted = ip->mv_weights && !ip->mv_other;
    /* an attribute map, {"color": "red"}: every value a string (or null) */
    bool entries = ip->mv_str && ip->mv_str == ip->mv_other && !ip->mv_num;
    d->kind = PR__IK_LIST;
    snprintf(d->ops, sizeof(d->ops), "vocab");
    snprintf(d->extra, sizeof(d->extra), "list: { max_len: %u, from: %s }%s", p99 < 1 ? 1 : p99,
             entries ? "entries" : "keys",
             weighted ? ", weights: { from: values, default: 1 }" : "");
    int n = snprintf(d->why, sizeof(d->why),
                     "a map: %s, in %.0f%% of events, keys per event p99 %u max %u, "
                     "%s%zu distinct keys, e.g. %s",
                     entries ? "each key with its string value as an id (color=red)"
                             : "its keys as ids",
                     c->pct, p99, ip->max_len, ip->set_full ? "over " : "", ip->set_n, ip->example);
    if (weighted && n > 0 && (size_t)n < sizeof(d->why))
        snprintf(d->why + n, sizeof(d->why) - (size_t)n, "; weighted by its values (%.6g..%.6g%s)",
                 ip->mv_min, ip->mv_max, ip->mv_null ? "; 1 for null" : "");
    return true;
}

/* Left out because its shape varies or no decoder could read it (or a
 * container, decided by its fields): true when decided. */
static bool pr__inf_unreadable(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    const pr_infer_opts *o = c->o;
    uint64_t scalars = c->scalars;
    char b[256];
    /* --- what no feature can read */
    if (o->ignore && pr__in_list(ip->path, o->ignore, true)) {
        pr__inf_skip(d, "left out (--ignore)");
        return true;
    }
    if (ip->too_deep) {
        pr__inf_skip(d, "objects nested over 64 deep (the decoder rejects such events: too_deep)");
        return true;
    }
    const pr__ip *map = pr__inf_in_map(c->inf, ip);
    if (map) {
        d->kind = PR__IK_MAPKEY;
        snprintf(d->why, sizeof(d->why), "a key of the map %.100s (read by its keys)", map->path);
        return true;
    }
    if (ip->n_obj && !scalars && !ip->n_arr_scalar && pr__inf_map(c, d))
        return true;
    if (ip->n_obj && pr__inf_map_keys(ip) && !pr__inf_is_map(ip)) {
        pr__inf_skip(d, "a map (many keys, few per event) that is not always an object: "
                        "list: { from: keys } would reject the events where it is a value or "
                        "a list");
        return true;
    }
    if (ip->n_obj && !scalars && !ip->n_arr_scalar)
        return true; /* an object: its fields are decided one by one */
    if (ip->n_arr_obj && !ip->n_arr_scalar && !ip->n_scalar && !ip->n_obj) { /* [] too */
        if (ip->n_elem_other)
            pr__inf_skip(d, "a list of objects mixed with other values: its fields are read "
                            "where objects are");
        return true; /* a list of objects: its fields are lists */
    }
    const pr__ip *mixed = pr__ancestor_mixed(c->inf, ip);
    if (mixed && pr__inf_map_keys(mixed)) { /* its keys: one line, the map's */
        d->kind = PR__IK_MAPKEY;
        snprintf(d->why, sizeof(d->why), "a key of %.100s (a map, not always an object)",
                 mixed->path);
        return true;
    }
    if (mixed) {
        snprintf(b, sizeof(b),
                 "under %s, which is not always an object (or always a list of objects)",
                 mixed->path);
        pr__inf_skip(d, b);
        return true;
    }
    if (ip->path_bad) {
        pr__inf_skip(d, "a key a path cannot name (empty, '.', space or control character, or a "
                        "path over 127 bytes)");
        return true;
    }
    if (!ip->records) {
        pr__inf_skip(d, "always null");
        return true;
    }
    if (ip->nested) {
        pr__inf_skip(d, "a list inside a list of objects (one list level per path)");
        return true;
    }
    if (ip->n_arr_obj && ip->n_arr_scalar) {
        pr__inf_skip(d, "a list of objects in some events, of values in others");
        return true;
    }
    if ((ip->n_obj != 0) + (ip->n_arr_obj + ip->n_arr_scalar + ip->n_arr_empty != 0) +
            (ip->n_scalar != 0) >
        1) {
        pr__inf_skip(d, "an object, a list or a value from one event to the next");
        return true;
    }
    if (ip->n_elem_null || ip->n_elem_other) {
        pr__inf_skip(d, "a list holding nulls, lists or objects beside values (a list feature "
                        "reads strings or integers)");
        return true;
    }
    if (ip->n_bigint) {
        snprintf(b, sizeof(b),
                 "integers beyond int64 in %" PRIu64 " values (rejected as number_out_of_range): "
                 "send such ids as strings",
                 ip->n_bigint);
        pr__inf_skip(d, b);
        return true;
    }
    if (ip->n_badutf8) {
        snprintf(b, sizeof(b), "strings that are not UTF-8 in %" PRIu64 " values (bad_utf8)",
                 ip->n_badutf8);
        pr__inf_skip(d, b);
        return true;
    }
    if (ip->n_nonfinite) {
        snprintf(b, sizeof(b),
                 "NaN or infinity in %" PRIu64 " values (rejected as number_out_of_range)",
                 ip->n_nonfinite);
        pr__inf_skip(d, b);
        return true;
    }
    if (ip->n_badtime) {
        snprintf(b, sizeof(b),
                 "a Timestamp or Duration out of its range in %" PRIu64 " values (bad_time)",
                 ip->n_badtime);
        pr__inf_skip(d, b);
        return true;
    }

    return false;
}

/* A label, or an outcome left out (an input must not hold the answer):
 * true when decided. */
static bool pr__inf_outcome(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    uint64_t ev = c->inf->events, scalars = c->scalars;
    double pct = c->pct;
    bool numeric = scalars && ip->n_int + ip->n_num + ip->n_bool == scalars;
    bool outcome = pr__outcome_named(ip->path) || pr__has_label_parent(ip->path);
    pr__litem vi;
    if (c->labels_given && pr__label_item(c->o->labels, ip->path, true, &vi)) {
        char b[256]; /* the answer of a label by value: no input */
        snprintf(b, sizeof(b), "the field of --labels %.*s%s: no input (it would leak the answer)",
                 (int)(vi.len > 80 ? 80 : vi.len), vi.text, vi.len > 80 ? "..." : "");
        pr__inf_skip(d, b);
        d->answer = true;
        return true;
    }
    bool label = c->labels_given ? pr__label_item(c->o->labels, ip->path, false, NULL)
                                 : !c->list && numeric && outcome &&
                                       (!ip->non_binary || pr__has_label_parent(ip->path));
    if (label) {
        if (c->list || !numeric) {
            pr__inf_skip(d, "not a number or true/false in every event: no label");
            return true;
        }
        if (ip->max_abs > FLT_MAX) {
            pr__inf_skip(d, "values beyond float32: no label (number_out_of_range)");
            return true;
        }
        d->kind = PR__IK_LABEL;
        if (!ip->non_binary)
            snprintf(d->why, sizeof(d->why), "0/1, mean %.4g, in %.0f%% of events", ip->mean, pct);
        else
            snprintf(d->why, sizeof(d->why), "numbers %.6g..%.6g, mean %.6g, in %.0f%% of events",
                     ip->min, ip->max, ip->mean, pct);
        if (ip->records < ev)
            snprintf(d->extra, sizeof(d->extra), "default: 0");
        return true;
    }
    if (outcome) { /* an outcome is no input: it would leak the answer */
        pr__inf_skip(d, c->labels_given ? "named like an outcome, not among --labels: no input "
                                          "either (it would leak the answer)"
                                        : "named like an outcome but not 0/1 (or a number under "
                                          "label.*): --labels to train on it");
        return true;
    }

    return false;
}

static bool pr__path_seen(const pr_infer *inf, const char *path);

/* Is path X.nanos beside an X.seconds (a Timestamp's two fields, as a JSON
 * object; from Protobuf, infer sees a Timestamp read whole, its text)? */
static bool pr__timestamp_nanos(const pr_infer *inf, const char *path)
{
    const char *s = pr__last_seg(path);
    char secs[PR_FEAT_PATH_MAX];
    if (s == path || strcmp(s, "nanos") ||
        snprintf(secs, sizeof(secs), "%.*sseconds", (int)(s - path), path) >= (int)sizeof(secs))
        return false;
    return pr__path_seen(inf, secs);
}

/* Left out though readable: no value, another time, a date, one value, an
 * event id: true when decided. */
static bool pr__inf_no_feature(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    uint64_t ev = c->inf->events, scalars = c->scalars;
    char b[256];
    if (!scalars) {
        pr__inf_skip(d, c->list ? "lists always empty" : "no value seen");
        return true;
    }
    if (c->pct < PR__INF_RARE_PCT && ip->records < PR__INF_RARE_EVENTS) {
        snprintf(b, sizeof(b), "in %" PRIu64 " of %" PRIu64 " events: too rare to learn from",
                 ip->records, ev);
        pr__inf_skip(d, b);
        return true;
    }
    if (pr__timestamp_nanos(c->inf, ip->path)) {
        pr__inf_skip(d, "a Timestamp's nanoseconds: its seconds are the time (to the second)");
        return true;
    }
    if (c->unit >= 0 && (pr__time_rank(ip->path) >= 0 || c->unit == PR_TIME_RFC3339)) {
        if (c->have_time && !c->list) { /* how old it was at the event */
            d->kind = PR__IK_DENSE;
            snprintf(d->ops, sizeof(d->ops), "{ age: %s }, { clip: [0, 1e9] }, log1p",
                     pr_time_unit_names[c->unit]);
            snprintf(d->why, sizeof(d->why),
                     "a time (%s) besides the event time: its age at the event, in seconds "
                     "(a time after it 0), in %.0f%% of events, e.g. %s",
                     pr_time_unit_names[c->unit], c->pct, ip->example);
            return true;
        }
        snprintf(b, sizeof(b),
                 "a time (%s) besides the event time: add it with age (seconds before the "
                 "event), hour_of_day or day_of_week if it matters",
                 pr_time_unit_names[c->unit]);
        pr__inf_skip(d, b);
        return true;
    }
    if (pr__time_rank(ip->path) >= 0 && ip->n_time_ns * 100 >= scalars * 99 && !ip->n_str) {
        pr__inf_skip(d, "a time in nanoseconds: no unit reads it (s, ms, us or RFC 3339)");
        return true;
    }
    if (ip->n_date && ip->n_date == ip->n_str && ip->n_str == scalars) {
        pr__inf_skip(d, "dates (YYYY-MM-DD): as ids they would never match a later day");
        return true;
    }
    if (!c->list && !ip->set_full && pr__distinct_n(ip) == 1 && ip->records == ev) {
        pr__inf_skip(d, "the same value in every event");
        return true;
    }
    bool ids = ip->n_num == 0 && ip->n_str + ip->n_int + ip->n_bool == scalars;
    if (!c->list && ids && pr__event_id_named(ip->path) &&
        (ip->set_full || pr__distinct_n(ip) * 10 >= scalars * 9)) {
        snprintf(b, sizeof(b), "%s in %" PRIu64 " values: an event id, not a feature", c->dist,
                 scalars);
        pr__inf_skip(d, b);
        return true;
    }

    return false;
}

/* A dense vector (`dim`): a list of numbers, with a fractional one among
 * them or under a vector's name (pr__vector_named, not an id's), of one
 * length L (2..4096) in every event holding one; no ops (an embedding is
 * used as it is), `default: 0` where events lack it (absent, null or []).
 * True when decided: a vector, or a list of fractional numbers left out
 * with the reason; false for the lists the id rules decide. */
static bool pr__inf_vector(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    uint64_t ev = c->inf->events;
    bool frac = ip->n_num > 0;
    if (!frac && (ip->n_int != c->scalars || !pr__vector_named(ip->path) ||
                  pr__id_named(ip->path) || ip->under_list))
        return false;
    if (ip->under_list) {
        pr__inf_skip(d, "a list of numbers under a list of objects (a dense vector reads one "
                        "list of numbers, a list feature reads ids)");
        d->weights = frac && !ip->n_str && !ip->n_bool && !ip->nested && ip->max_abs <= FLT_MAX;
        return true;
    }
    char b[256];
    uint32_t lo, hi;
    uint64_t held = pr__len_range(ip, &lo, &hi);
    if (ip->n_str || ip->n_bool) {
        pr__inf_skip(d, ip->n_str ? "a list mixing strings and numbers"
                                  : "a list mixing true/false and numbers (a dense vector reads "
                                    "numbers, a list feature reads ids)");
        return true;
    }
    bool fixed = held && lo == hi && lo >= 2 && hi <= PR_FEAT_MAX_LIST;
    if (!fixed && !frac)
        return false; /* integers under a vector's name: the id rules decide */
    if (!fixed) {
        if (hi > PR_FEAT_MAX_LIST)
            snprintf(b, sizeof(b),
                     "a list of numbers over 4096 long in some events: a dense "
                     "vector takes at most 4096 (the decoder rejects longer "
                     "lists: list_too_long)");
        else if (lo != hi)
            snprintf(b, sizeof(b),
                     "a list of numbers whose length varies (%u..%u): a dense vector needs one "
                     "length, a list feature reads ids",
                     lo, hi);
        else
            snprintf(b, sizeof(b),
                     "a list of one number in every event: a dense vector takes "
                     "2..4096 (declare dim: 1 by hand), a list feature reads ids");
        pr__inf_skip(d, b);
        return true;
    }
    if (ip->max_abs > FLT_MAX) {
        snprintf(b, sizeof(b),
                 "a list of numbers beyond float32 (up to %.3g): a dense vector rejects them "
                 "(number_out_of_range)",
                 ip->max_abs);
        pr__inf_skip(d, b);
        return true;
    }
    d->kind = PR__IK_DENSE;
    d->dim = lo;
    snprintf(d->why, sizeof(d->why),
             "vectors of %u %s (an embedding: used as it is), in %.0f%% of events, elements "
             "%.6g..%.6g, e.g. %s",
             lo, frac ? "numbers" : "integers", 100.0 * (double)held / (double)ev, ip->min, ip->max,
             ip->list_example);
    snprintf(d->extra, sizeof(d->extra), "dim: %u%s", lo, held < ev ? ", default: 0" : "");
    return true;
}

/* A list, an id (sparse) or a number (dense). */
static void pr__inf_feature(const pr__ictx *c, pr__idec *d)
{
    const pr__ip *ip = c->ip;
    uint64_t ev = c->inf->events, scalars = c->scalars;
    double pct = c->pct;
    char b[256];
    bool ids = ip->n_num == 0 && ip->n_str + ip->n_int + ip->n_bool == scalars;
    bool unique = !ip->set_full && pr__distinct_n(ip) == scalars && scalars >= 50;
    /* --- lists (dense vectors first), ids, numbers */
    if (c->list) {
        if (pr__inf_vector(c, d))
            return;
        if (!ids) {
            pr__inf_skip(d, ip->n_str ? "a list mixing strings and numbers"
                                      : "a list of numbers (a list feature reads ids: strings or "
                                        "integers)");
            return;
        }
        if (ip->max_len > PR_FEAT_MAX_LIST) {
            snprintf(b, sizeof(b),
                     "lists over 4096 elements in some events: the decoder rejects those "
                     "(list_too_long); cut them upstream");
            pr__inf_skip(d, b);
            return;
        }
        uint32_t p99 = pr__len_quantile(ip, 0.99);
        bool last = pr__history_named(ip->path);
        d->kind = PR__IK_LIST;
        snprintf(d->ops, sizeof(d->ops), "vocab");
        snprintf(d->why, sizeof(d->why),
                 "lists of %s%s, in %.0f%% of events, length p99 %u max %u, %s, e.g. %s%s",
                 ip->n_str ? (ip->n_int ? "strings and integers" : "strings") : "integers",
                 ip->under_list ? " (a field of a list of objects)" : "", pct, p99, ip->max_len,
                 c->dist, ip->example, last ? "; keep: last as for a history, oldest first" : "");
        snprintf(d->extra, sizeof(d->extra), "list: { max_len: %u%s }", p99 < 1 ? 1 : p99,
                 last ? ", keep: last" : "");
        return;
    }
    if (ids && (ip->n_str || ip->n_bool || pr__id_named(ip->path) ||
                (!ip->set_full && pr__distinct_n(ip) <= PR__INF_FEW_VALUES))) {
        char w[PR_FEAT_PATH_MAX];
        pr__norm_last(ip->path, w, sizeof(w));
        /* a few strings under an event-type name: perhaps the answer itself */
        bool event_type = ip->n_str && !ip->set_full && pr__distinct_n(ip) <= 16 &&
                          pr__word_in(w, pr__event_type_words) && !c->labels_given;
        char hint[PR_FEAT_PATH_MAX + 96] = "";
        if (event_type)
            snprintf(hint, sizeof(hint),
                     "an event type? if it is the outcome, --labels %s=VALUE makes labels of it: ",
                     ip->path);
        d->kind = PR__IK_SPARSE;
        snprintf(d->ops, sizeof(d->ops), "vocab");
        int len = snprintf(
            d->why, sizeof(d->why), "%s%s%s, in %.0f%% of events, %s, e.g. %s", hint,
            unique ? "unique in every event of the sample (an event id? --ignore it): " : "",
            ip->n_str ? (ip->n_int ? "strings and integers (42 and \"42\" are two ids)" : "strings")
            : ip->n_bool ? "true/false"
                         : "integers",
            pct, c->dist, ip->example);
        (void)len; /* a comment: a long one is cut, as every why is */
        return;
    }
    if (ip->n_str) {
        pr__inf_skip(d, "strings mixed with fractional numbers");
        return;
    }
    pr__inf_dense(ip, ev, d);
}

/* What the field at ip becomes (d). The rules, in order, are those of
 * docs/configuration.md, "Inferring a schema": left out when the user says
 * so, when its shape varies or a decoder could not read it; the event time;
 * a label; left out when it is an outcome that is not a label, a time, a
 * date, an event id or constant; a list; an id (sparse); a number (dense). */
static void pr__inf_decide(const pr_infer *inf, const pr__ip *ip, const pr_infer_opts *o,
                           bool is_time, bool have_time, pr__idec *d)
{
    pr__ictx c = {.inf = inf, .ip = ip, .o = o, .have_time = have_time};
    c.scalars = ip->n_bool + ip->n_int + ip->n_num + ip->n_str + ip->n_bigint;
    c.pct = 100.0 * (double)ip->records / (double)(inf->events ? inf->events : 1);
    c.list = ip->n_arr_scalar || ip->n_arr_empty || ip->under_list;
    c.labels_given = o->labels && *o->labels;
    c.unit = pr__time_unit_of(ip);
    pr__distinct_text(ip, c.dist, sizeof(c.dist));
    memset(d, 0, sizeof(*d));
    if (pr__inf_unreadable(&c, d))
        return;
    if (is_time) { /* the event time */
        if (c.unit < 0) {
            pr__inf_skip(d, "not a time in every event (s, ms or us since the epoch, or RFC "
                            "3339 strings)");
            return;
        }
        d->kind = PR__IK_TIME;
        d->unit = (pr_time_unit)c.unit;
        snprintf(d->why, sizeof(d->why), "%s, in %.0f%% of events, e.g. %s",
                 pr_time_unit_names[d->unit], c.pct, ip->example);
        return;
    }
    if (!pr__inf_outcome(&c, d) && !pr__inf_no_feature(&c, d))
        pr__inf_feature(&c, d);
}

/* The name characters of src[0..n) (A-Z a-z 0-9 _ -, others '_'), at most
 * cut of them, into b (PR_NAME_MAX). */
static void pr__name_chars(const char *src, size_t n, size_t cut, char *b)
{
    size_t k = 0;
    for (; k < n && src[k] && k < cut; k++) {
        unsigned char c = (unsigned char)src[k];
        b[k] = (isalnum(c) || c == '_' || c == '-') ? (char)c : '_';
    }
    b[k] = 0;
}

/* all[i].name: b, else b_2, b_3 ... (b cut at cut), the first that neither
 * event_time nor a name given before (all[0..i)) takes. The one rule of
 * unique names, for features and labels by value alike. */
static void pr__name_unique(pr__idec *all, size_t i, const char *b, size_t cut)
{
    char cand[PR_NAME_MAX];
    snprintf(cand, sizeof(cand), "%s", b);
    for (unsigned t = 2;; t++) {
        bool taken = !strcmp(cand, "event_time");
        for (size_t j = 0; j < i && !taken; j++)
            if (all[j].name[0] && !strcmp(all[j].name, cand))
                taken = true;
        if (!taken)
            break;
        snprintf(cand, sizeof(cand), "%.*s_%u", (int)cut, b, t);
    }
    snprintf(all[i].name, sizeof(all[i].name), "%s", cand);
}

/* A feature name: the field's last key, or its whole path when another
 * feature's last key is the same; [A-Za-z0-9_-], at most 63 (a vector's
 * fewer: its columns' names NAME[dim-1] must fit in 63); unique. */
static void pr__inf_name(const pr__ip *ps, const pr__idec *ds, size_t n, size_t i, pr__idec *all)
{
    char idx[16] = "";
    if (ds[i].kind == PR__IK_DENSE && ds[i].dim)
        snprintf(idx, sizeof(idx), "[%u]", ds[i].dim - 1);
    size_t cut = sizeof(all[i].name) - 5 - strlen(idx); /* room for "_NNN" */
    const char *seg = pr__last_seg(ps[i].path);
    bool clash = !strcmp(seg, "event_time");
    for (size_t j = 0; j < n && !clash; j++)
        if (j != i && ds[j].kind > PR__IK_TIME && ds[j].kind <= PR__IK_LIST &&
            !strcmp(pr__last_seg(ps[j].path), seg))
            clash = true;
    const char *src = clash ? ps[i].path : seg;
    char b[PR_NAME_MAX];
    if (!strncmp(ds[i].ops, "{ age:", 6)) { /* an age: the time's field, then _age */
        const char *p = ps[i].path, *e = p + strlen(p);
        if (seg != p && !strcmp(seg, "seconds")) /* a Timestamp's: its field's name */
            e = seg - 1;
        const char *st = e;
        while (st > p && st[-1] != '.')
            st--;
        char f[PR_NAME_MAX - 4];
        pr__name_chars(st, (size_t)(e - st), cut < sizeof(f) ? cut - 4 : sizeof(f) - 1, f);
        snprintf(b, sizeof(b), "%s_age", f);
    } else {
        pr__name_chars(src, strlen(src), cut, b);
    }
    pr__name_unique(all, i, b, cut);
}

/* A name or path as YAML: plain when it is made of safe characters and
 * YAML would not read it as something else (null, a boolean), else quoted. */
static void pr__yaml_str(pr_mbuf *mb, const char *p)
{
    static const char *const special[] = {"null", "true", "false", "yes", "no",
                                          "on",   "off",  "y",     "n",   NULL};
    bool plain = (isalpha((unsigned char)p[0]) || p[0] == '_') && !pr__word_in(p, special);
    for (const char *c = p; *c && plain; c++)
        plain = isalnum((unsigned char)*c) || *c == '_' || *c == '-' || *c == '.';
    if (plain)
        pr_mbuf_puts(mb, p);
    else
        pr_mbuf_json_str(mb, p);
}

static bool pr__path_seen(const pr_infer *inf, const char *path)
{
    for (size_t i = 0; i < inf->n; i++)
        if (!strcmp(inf->ps[i].path, path))
            return true;
    return false;
}

/* Bytes YAML can hold in a quoted string: UTF-8 of characters libyaml
 * prints (no control character, C1 control, surrogate, byte-order mark,
 * U+FFFE/U+FFFF or character beyond U+FFFF). */
static bool pr__yaml_text_ok(const char *s, size_t n)
{
    const unsigned char *c = (const unsigned char *)s, *end = c + n;
    while (c < end) {
        if (*c < 0x80) {
            if (*c < ' ' || *c == 0x7f)
                return false;
            c++;
            continue;
        }
        size_t k = *c >= 0xe0 ? 3 : 2;
        if (*c < 0xc2 || *c >= 0xf0 || (size_t)(end - c) < k || (c[1] & 0xc0) != 0x80 ||
            (k == 3 && (c[2] & 0xc0) != 0x80))
            return false;
        uint32_t cp =
            k == 2 ? (uint32_t)(c[0] & 0x1f) << 6 | (c[1] & 0x3f)
                   : (uint32_t)(c[0] & 0x0f) << 12 | (uint32_t)(c[1] & 0x3f) << 6 | (c[2] & 0x3f);
        if ((k == 3 && cp < 0x800) || cp < 0xa0 || (cp >= 0xd800 && cp < 0xe000) || cp == 0xfeff ||
            cp >= 0xfffe)
            return false;
        c += k;
    }
    return true;
}

/* A value of a label by value that is written as a plain integer: its
 * text is one as the loader reads it ([-+]digits within int64; true and
 * false as 1 and 0) and the field holds numbers or true/false, no string
 * (else the value is a quoted string, matched by its bytes). *x: its value. */
static bool pr__value_int(const pr__ip *ip, const char *v, size_t n, int64_t *x)
{
    if (ip->n_str || !(ip->n_int + ip->n_bool + ip->n_num))
        return false;
    char b[32];
    if (!n || n >= sizeof(b))
        return false;
    memcpy(b, v, n);
    b[n] = 0;
    if (!strcmp(b, "true") || !strcmp(b, "false")) {
        *x = b[0] == 't';
        return true;
    }
    if (!pr__is_int_text(b))
        return false;
    errno = 0;
    long long ll = strtoll(b, NULL, 10);
    *x = ll;
    return errno != ERANGE;
}

/* The values of a label by value (it, its field ip) as the config's in:
 * takes them: 1..PR_FEAT_MAX_IN, none empty, over 63 bytes or beyond what
 * YAML holds, none twice (as written: 1 and true are one integer); else
 * PR_EINVAL naming --labels and the item. */
static int pr__check_values(const pr__ip *ip, const pr__litem *it, char *errstr, size_t errn)
{
    const char *end = it->vals + it->vals_len, *v[PR_FEAT_MAX_IN + 1], *why = NULL;
    size_t n[PR_FEAT_MAX_IN + 1], k = 0, at = 0;
    for (const char *p = it->vals; !why && pr__label_value(&p, end, &v[k], &n[k]); k++) {
        int64_t a, b;
        at = k;
        if (k == PR_FEAT_MAX_IN)
            why = "more than 64 values";
        else if (!n[k])
            why = "an empty value (want PATH=V1|V2|...)";
        else if (n[k] >= PR_FOP_STR_MAX)
            why = "a value over 63 bytes";
        else if (!pr__yaml_text_ok(v[k], n[k]))
            why = "a value with a control character, or not UTF-8 (or beyond U+FFFF)";
        bool ik = !why && pr__value_int(ip, v[k], n[k], &a);
        for (size_t j = 0; j < k && !why; j++)
            if (ik ? pr__value_int(ip, v[j], n[j], &b) && a == b
                   : !pr__value_int(ip, v[j], n[j], &b) && n[j] == n[k] &&
                         !memcmp(v[j], v[k], n[k]))
                why = "a value listed twice";
    }
    if (!why)
        return 0;
    int w = it->len > 120 ? 120 : (int)it->len;
    bool show = at < PR_FEAT_MAX_IN && n[at]; /* the value in question */
    snprintf(errstr, errn, "--labels: '%.*s%s': %s%s%.*s%s", w, it->text,
             (size_t)w < it->len ? "..." : "", why, show ? " ('" : "",
             show ? (int)(n[at] > 80 ? 80 : n[at]) : 0, show ? v[at] : "", show ? "')" : "");
    return PR_EINVAL;
}

/* Each path of a comma list was seen, else PR_EINVAL naming the option.
 * --labels (labels): an item's path part (PATH=V1|V2: a label by value,
 * whose values are checked too, and whose path is no plain label as well). */
static int pr__check_list(const pr_infer *inf, const char *csv, const char *opt, bool labels,
                          char *errstr, size_t errn)
{
    pr__litem it;
    char path[PR_FEAT_PATH_MAX];
    for (const char *p = csv;
         labels ? pr__label_next(&p, &it) : pr__csv_next(&p, path, sizeof(path));) {
        const char *pa = labels ? it.path : path;
        bool by_value = labels && it.vals;
        int w = by_value ? (it.len > 120 ? 120 : (int)it.len) : 0;
        if (!pa[0]) {
            snprintf(errstr, errn, "%s: an empty or over-long path in '%s'", opt, csv);
            return PR_EINVAL;
        }
        if (!pr__path_seen(inf, pa)) {
            snprintf(errstr, errn, "%s: no event has the field '%s'%s%.*s%s", opt, pa,
                     by_value ? " (" : "", w, by_value ? it.text : "", by_value ? ")" : "");
            return PR_EINVAL;
        }
        if (!by_value)
            continue;
        if (pr__label_item(csv, pa, false, NULL)) {
            snprintf(errstr, errn,
                     "--labels: '%s' is given as a label and by value ('%.*s'): "
                     "one or the other",
                     pa, w, it.text);
            return PR_EINVAL;
        }
        int rc = pr__check_values(pr__ip_find(inf, pa), &it, errstr, errn);
        if (rc)
            return rc;
    }
    return 0;
}

/* The event time, decided into *td: --time's field, else the time-named
 * field (best pr__time_rank first, then first seen) that decides as a time;
 * -1 for none. PR_EINVAL (-2) with errstr when --time's field cannot be. */
static long pr__pick_time(const pr_infer *inf, const pr_infer_opts *o, pr__idec *td, char *errstr,
                          size_t errn)
{
    if (o->time_path) {
        if (!*o->time_path)
            return -1;
        for (size_t i = 0; i < inf->n; i++)
            if (!strcmp(inf->ps[i].path, o->time_path)) {
                pr__inf_decide(inf, &inf->ps[i], o, true, false, td);
                if (td->kind == PR__IK_TIME)
                    return (long)i;
                snprintf(errstr, errn, "--time: '%s' cannot be the event time: %s", o->time_path,
                         td->kind == PR__IK_SKIP || td->kind == PR__IK_MAPKEY ? td->why
                                                                              : "an object");
                return -2;
            }
        snprintf(errstr, errn, "--time: no event has the field '%s'", o->time_path);
        return -2;
    }
    for (int rank = 0; rank < 4; rank++)
        for (size_t i = 0; i < inf->n; i++)
            if (pr__time_unit_of(&inf->ps[i]) >= 0 && pr__time_rank_of(&inf->ps[i]) == rank) {
                pr__inf_decide(inf, &inf->ps[i], o, true, false, td);
                if (td->kind == PR__IK_TIME)
                    return (long)i;
            }
    return -1;
}

/* --name, --topic, --bootstrap as the config takes them, else PR_EINVAL. */
static int pr__check_names(const pr_infer_opts *o, char *errstr, size_t errn)
{
    static const struct {
        const char *opt, *extra; /* extra: characters allowed beside A-Z a-z 0-9 _ - */
        size_t max;
    } rules[] = {{"--name", "", PR_NAME_MAX - 1}, {"--topic", ".", 249}};
    const char *vals[] = {o->name, o->topic};
    for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
        const char *v = vals[r];
        if (!v)
            continue;
        size_t n = strlen(v);
        bool ok = n >= 1 && n <= rules[r].max;
        for (const char *c = v; *c && ok; c++)
            ok = isalnum((unsigned char)*c) || *c == '_' || *c == '-' || strchr(rules[r].extra, *c);
        if (!ok) {
            snprintf(errstr, errn, "%s: want 1..%zu of A-Z a-z 0-9 _ -%s, got '%s'", rules[r].opt,
                     rules[r].max, *rules[r].extra ? " ." : "", v);
            return PR_EINVAL;
        }
    }
    for (const char *c = o->bootstrap; c && *c; c++)
        if ((unsigned char)*c <= ' ' || *c == '"' || *c == '\\' || (unsigned char)*c >= 0x7f) {
            snprintf(errstr, errn, "--bootstrap: want HOST:PORT[,HOST:PORT...], got '%s'",
                     o->bootstrap);
            return PR_EINVAL;
        }
    return 0;
}

/* A file the config names, absolute (the loader reads it from wherever
 * the service runs); as given when it does not resolve. */
static void pr__file_str(pr_mbuf *mb, const char *file)
{
    char *abs = realpath(file, NULL);
    pr_mbuf_json_str(mb, abs ? abs : file);
    free(abs);
}

/* ", in: [V1, V2]" of a label by value d on the field ip: an integer (or
 * true/false) plain where the field holds numbers (pr__value_int), else a
 * string, quoted unless plain YAML reads it as that same string. */
static void pr__in_values(pr_mbuf *mb, const pr__ip *ip, const pr__idec *d)
{
    const char *v, *end = d->in + d->in_len;
    size_t n, k = 0;
    pr_mbuf_puts(mb, ", in: [");
    for (const char *p = d->in; pr__label_value(&p, end, &v, &n); k++) {
        int64_t x;
        char b[PR_FOP_STR_MAX], *e;
        snprintf(b, sizeof(b), "%.*s", (int)n, v);
        if (k)
            pr_mbuf_puts(mb, ", ");
        bool vint = pr__value_int(ip, v, n, &x);
        if (vint && (b[0] == 't' || b[0] == 'f'))
            pr_mbuf_puts(mb, b);
        else if (vint)
            pr_mbuf_printf(mb, "%" PRId64, x);
        else if (strtod(b, &e), e != b && !*e)
            pr_mbuf_json_str(mb, b); /* inf, nan: plain, YAML would read a number */
        else
            pr__yaml_str(mb, b);
    }
    pr_mbuf_puts(mb, "]");
}

static void pr__feature_line(pr_mbuf *mb, const pr__ip *ip, const pr__idec *d)
{
    pr_mbuf_printf(mb, "        - { name: ");
    pr__yaml_str(mb, d->name);
    pr_mbuf_printf(mb, ", path: ");
    pr__yaml_str(mb, ip->path);
    if (d->in)
        pr__in_values(mb, ip, d);
    if (d->extra[0])
        pr_mbuf_printf(mb, ", %s", d->extra);
    if (d->weights_path) {
        pr_mbuf_puts(mb, ", weights: { path: ");
        pr__yaml_str(mb, d->weights_path);
        pr_mbuf_puts(mb, ", default: 1 }");
    }
    if (d->ops[0])
        pr_mbuf_printf(mb, ", ops: [%s]", d->ops);
    pr__comment(mb, " }   # %s", d->why);
    pr_mbuf_puts(mb, "\n");
}

/* The one id list whose objects hold weight candidate i (a fractional
 * number beside the ids in a list of objects), or SIZE_MAX; *n_ids counts
 * the id lists under those objects. */
static size_t pr__weights_ids(const pr_infer *inf, const pr__idec *ds, size_t i, size_t *n_ids)
{
    const char *p = inf->ps[i].path, *dot = strrchr(p, '.');
    size_t plen = dot ? (size_t)(dot - p) + 1 : 0, j = SIZE_MAX;
    *n_ids = 0;
    for (size_t k = 0; k < inf->n; k++)
        if (ds[k].kind == PR__IK_LIST && inf->ps[k].under_list && !inf->ps[k].nested &&
            !strncmp(inf->ps[k].path, p, plen) && !strchr(inf->ps[k].path + plen, '.')) {
            ++*n_ids;
            j = k;
        }
    return *n_ids == 1 ? j : SIZE_MAX;
}

/* Fractional numbers beside the ids of one list feature in a list of
 * objects ("cats": [{"id": "a", "score": 0.7}]) become that list's weights
 * (an id-score list), with default 1 for an id without one. Two or more
 * id lists under the same objects, or two or more such numbers beside one
 * id list: which weighs which is the user's call; they stay out, with the
 * reason. */
static void pr__infer_weights(const pr_infer *inf, pr__idec *ds)
{
    size_t *of = malloc((inf->n ? inf->n : 1) * sizeof(*of));
    if (!of)
        return;
    for (size_t i = 0; i < inf->n; i++) {
        of[i] = SIZE_MAX;
        if (ds[i].kind != PR__IK_SKIP || !ds[i].weights)
            continue;
        size_t n_ids;
        of[i] = pr__weights_ids(inf, ds, i, &n_ids);
        if (n_ids > 1)
            snprintf(ds[i].why, sizeof(ds[i].why),
                     "numbers beside %zu id lists in one list of objects: weights of one? "
                     "(give it weights: { path: %.100s })",
                     n_ids, inf->ps[i].path);
    }
    for (size_t i = 0; i < inf->n; i++) {
        size_t j = of[i], rivals = 0;
        if (j == SIZE_MAX)
            continue;
        for (size_t k = 0; k < inf->n; k++)
            rivals += k != i && of[k] == j;
        const char *p = inf->ps[i].path;
        if (rivals) {
            snprintf(ds[i].why, sizeof(ds[i].why),
                     "one of %zu fractional numbers beside the ids %.40s: which weighs them? "
                     "(give it weights: { path: %.100s })",
                     rivals + 1, pr__last_seg(inf->ps[j].path), p);
            continue;
        }
        ds[j].weights_path = p;
        size_t el = strlen(ds[j].why);
        snprintf(ds[j].why + el, sizeof(ds[j].why) - el,
                 "; weighted by %s (%.6g..%.6g; 1 for an id without one)", pr__last_seg(p),
                 inf->ps[i].min, inf->ps[i].max);
        ds[i].kind = PR__IK_WEIGHTS;
    }
    free(of);
}

static bool pr__set_has(const pr__ip *ip, uint64_t h)
{
    if (!ip->set_cap)
        return false;
    for (size_t k = h & (ip->set_cap - 1);; k = (k + 1) & (ip->set_cap - 1)) {
        if (ip->set[k] == h)
            return true;
        if (!ip->set[k])
            return false;
    }
}

/* A shared vocabulary to suggest (a comment, never a key: two id spaces
 * of integers may overlap by chance): feature j (a vocab list or id, over
 * PR__INF_FEW_VALUES distinct values) whose values the sample also saw in
 * an earlier feature i with the same operators, as a click history's items
 * are candidate items: a tenth or more of the smaller of their distinct
 * sets (a sample of a big id space overlaps another sample of it little:
 * 20,000 events of `piperec gen` give a quarter). */
static void pr__infer_tables(const pr_infer *inf, pr__idec *ds)
{
    size_t *owner = malloc((inf->n ? inf->n : 1) * sizeof(*owner)); /* the table each joins */
    if (!owner)
        return;
    for (size_t j = 0; j < inf->n; j++) {
        owner[j] = SIZE_MAX;
        const pr__ip *b = &inf->ps[j];
        bool id = ds[j].kind == PR__IK_SPARSE || ds[j].kind == PR__IK_LIST;
        if (!id || !strstr(ds[j].ops, "vocab") || b->set_n <= PR__INF_FEW_VALUES)
            continue;
        size_t best = SIZE_MAX, best_n = 0;
        for (size_t i = 0; i < j; i++) {
            const pr__ip *a = &inf->ps[i];
            if ((ds[i].kind != PR__IK_SPARSE && ds[i].kind != PR__IK_LIST) ||
                strcmp(ds[i].ops, ds[j].ops) || a->set_n <= PR__INF_FEW_VALUES)
                continue;
            size_t n = 0;
            for (size_t k = 0; k < b->set_cap; k++)
                n += b->set[k] && pr__set_has(a, b->set[k]);
            if (n > best_n) {
                best = i;
                best_n = n;
            }
        }
        size_t small = best == SIZE_MAX                 ? 0
                       : inf->ps[best].set_n < b->set_n ? inf->ps[best].set_n
                                                        : b->set_n;
        if (best == SIZE_MAX || 10 * best_n < small)
            continue;
        /* a table has one owner: the one `best` would join, else best */
        owner[j] = owner[best] != SIZE_MAX ? owner[best] : best;
        size_t el = strlen(ds[j].why);
        snprintf(ds[j].why + el, sizeof(ds[j].why) - el,
                 "; %zu values also in %s: if they are the same ids, table: %s gives them one "
                 "vocabulary",
                 best_n, ds[best].name, ds[owner[j]].name);
    }
    free(owner);
}

/* Whether the sample holds the value v (vint: as the integer x, which an
 * integer, a fractional number or true/false of that value matches; else
 * as a string of those bytes): 1 yes, 0 never, -1 cannot tell (the field
 * had more distinct values than are kept). */
static int pr__value_seen(const pr__ip *ip, const char *v, size_t n, bool vint, int64_t x)
{
    bool seen;
    if (vint) {
        json_int_t ji = (json_int_t)x;
        double dx = (double)x;
        int b = (int)x;
        seen = pr__set_has(ip, pr__value_key(&ji, sizeof(ji), 2)) ||
               pr__set_has(ip, pr__value_key(&dx, sizeof(dx), 3)) ||
               ((x == 0 || x == 1) && pr__set_has(ip, pr__value_key(&b, sizeof(b), 1)));
    } else {
        seen = pr__set_has(ip, pr__value_key(v, n, 4));
    }
    return seen ? 1 : ip->set_full ? -1 : 0;
}

/* The comment of a label by value (d, its field ip, the item it): when it
 * is 1, what the field holds, and the values the sample never holds (each
 * also into *unseen, "PATH=V, ...", for the summary). How often it is 1 is
 * not known: the statistics keep distinct values, not their counts. */
static void pr__value_label_why(const pr_infer *inf, const pr__ip *ip, const pr__litem *it,
                                pr__idec *d, char *unseen, size_t un)
{
    char never[200] = "";
    size_t k = 0, nv = 0, len, nl = 0;
    const char *v, *end = it->vals + it->vals_len;
    for (const char *p = it->vals; pr__label_value(&p, end, &v, &len);)
        nv++;
    snprintf(d->why, sizeof(d->why), "1 when %s is ", ip->path);
    for (const char *p = it->vals; pr__label_value(&p, end, &v, &len); k++) {
        int64_t x;
        bool vint = pr__value_int(ip, v, len, &x);
        size_t at = strlen(d->why);
        snprintf(d->why + at, sizeof(d->why) - at, "%s%.*s",
                 !k           ? ""
                 : k + 1 < nv ? ", "
                              : " or ",
                 (int)len, v);
        if (pr__value_seen(ip, v, len, vint, x))
            continue;
        if (nl < sizeof(never))
            nl += (size_t)snprintf(never + nl, sizeof(never) - nl, "%s%.*s", nl ? ", " : "",
                                   (int)len, v);
        size_t ul = strlen(unseen);
        snprintf(unseen + ul, un - ul, "%s%s=%.*s", ul ? ", " : "", ip->path, (int)len, v);
    }
    char dist[48];
    pr__distinct_text(ip, dist, sizeof(dist));
    size_t at = strlen(d->why);
    snprintf(d->why + at, sizeof(d->why) - at, ", else 0; %s: %s, in %.0f%% of events, %s%s%s",
             ip->path,
             ip->n_str   ? (ip->n_int + ip->n_num + ip->n_bool ? "strings and numbers" : "strings")
             : ip->n_num ? "numbers"
             : ip->n_int ? (ip->n_bool ? "integers and true/false" : "integers")
                         : "true/false",
             100.0 * (double)ip->records / (double)inf->events, dist,
             never[0] ? "; never in the sample: " : "", never);
}

/* The labels by value (--labels PATH=V1|V2, in the order given) into
 * ds[inf->n...]: named after their first value (unique, pr__name_unique),
 * `default: 0` where events lack the field; PR_EINVAL naming the item
 * when its field cannot be one (an object, a list of objects, a shape that
 * varies: as the decisions said). */
static int pr__infer_value_labels(const pr_infer *inf, const pr_infer_opts *o, pr__idec *ds,
                                  char *unseen, size_t un, char *errstr, size_t errn)
{
    pr__litem it;
    size_t k = inf->n;
    for (const char *p = o->labels; pr__label_next(&p, &it);) {
        if (!it.vals)
            continue;
        const pr__ip *ip = pr__ip_find(inf, it.path);
        size_t i = (size_t)(ip - inf->ps);
        if (!(ds[i].kind == PR__IK_SKIP && ds[i].answer) && ds[i].kind != PR__IK_TIME) {
            snprintf(errstr, errn, "--labels: '%.*s' cannot be a label: %s",
                     (int)(it.len > 120 ? 120 : it.len), it.text,
                     ds[i].kind == PR__IK_SKIP || ds[i].kind == PR__IK_MAPKEY ? ds[i].why
                     : ds[i].kind == PR__IK_NONE ? "an object or a list of objects"
                                                 : "a map");
            return PR_EINVAL;
        }
        pr__idec *d = &ds[k];
        d->kind = PR__IK_LABEL;
        d->of = i;
        d->in = it.vals;
        d->in_len = it.vals_len;
        pr__value_label_why(inf, ip, &it, d, unseen, un);
        if (ip->records < inf->events)
            snprintf(d->extra, sizeof(d->extra), "default: 0");
        const char *first = it.vals, *v = it.vals;
        size_t len = 0, cut = sizeof(d->name) - 5; /* room for "_NNN" */
        pr__label_value(&first, it.vals + it.vals_len, &v, &len);
        char b[PR_NAME_MAX];
        pr__name_chars(v, len, cut, b);
        pr__name_unique(ds, k++, b, cut);
    }
    return 0;
}

/* The schema's caps, the first features seen kept: at most PR_MAX_DENSE
 * dense features in PR_MAX_DENSE_COLS dense columns (a vector takes its
 * dim: one that does not fit in what is left is left out, a later smaller
 * one may fit), at most PR_MAX_SPARSE sparse ones (lists too). */
static void pr__infer_caps(pr__idec *ds, size_t n)
{
    size_t nd = 0, ns = 0, cols = 0;
    char b[256];
    for (size_t i = 0; i < n; i++) {
        if (ds[i].kind == PR__IK_SPARSE || ds[i].kind == PR__IK_LIST) {
            if (++ns > PR_MAX_SPARSE)
                pr__inf_skip(&ds[i], "over 256 sparse features (the most a schema takes): the "
                                     "first ones seen are kept");
            continue;
        }
        if (ds[i].kind != PR__IK_DENSE)
            continue;
        size_t w = ds[i].dim ? ds[i].dim : 1;
        if (nd >= PR_MAX_DENSE) {
            pr__inf_skip(&ds[i], "over 256 dense features (the most a schema takes): the first "
                                 "ones seen are kept");
        } else if (cols + w > PR_MAX_DENSE_COLS) {
            snprintf(b, sizeof(b),
                     "%s over the %d dense columns a schema takes (%zu taken by the dense "
                     "features seen before it)",
                     ds[i].dim ? "a vector whose dim would go" : "a number that would go",
                     PR_MAX_DENSE_COLS, cols);
            pr__inf_skip(&ds[i], b);
        } else {
            nd++;
            cols += w;
        }
    }
}

/* A plain --labels item whose field decided as no label: PR_EINVAL naming
 * it, with the reason. */
static int pr__check_plain_labels(const pr_infer *inf, const pr_infer_opts *o, const pr__idec *ds,
                                  char *errstr, size_t errn)
{
    pr__litem it;
    for (const char *p = o->labels; pr__label_next(&p, &it);)
        for (size_t i = 0; i < inf->n && !it.vals; i++)
            if (!strcmp(inf->ps[i].path, it.path) && ds[i].kind != PR__IK_LABEL) {
                snprintf(errstr, errn, "--labels: '%s' cannot be a label: %s", it.path,
                         ds[i].kind == PR__IK_SKIP || ds[i].kind == PR__IK_MAPKEY
                             ? ds[i].why
                             : "not a number or true/false");
                return PR_EINVAL;
            }
    return 0;
}

/* The labels by value among --labels (PATH=V1|V2 items). */
static size_t pr__n_value_labels(const char *labels)
{
    pr__litem it;
    size_t n = 0;
    for (const char *p = labels; pr__label_next(&p, &it);)
        n += it.vals != NULL;
    return n;
}

/* Every field decided (*out, [*n_out]: inf->n fields, then the labels by
 * value; the caller's to free) and *t the event time's index (-1: none),
 * after the options' checks; names given, the schema's caps kept; the
 * values of labels by value the sample never holds into sum. PR_EINVAL
 * with errstr (an option, no feature), PR_ENOMEM. */
static int pr__infer_decide_all(const pr_infer *inf, const pr_infer_opts *o, pr__idec **out,
                                size_t *n_out, long *t, pr_infer_summary *sum, char *errstr,
                                size_t errn)
{
    int rc = pr__check_names(o, errstr, errn);
    if (!rc)
        rc = pr__check_list(inf, o->labels, "--labels", true, errstr, errn);
    if (!rc)
        rc = pr__check_list(inf, o->ignore, "--ignore", false, errstr, errn);
    if (rc)
        return rc;
    pr__idec td;
    *t = pr__pick_time(inf, o, &td, errstr, errn);
    if (*t == -2)
        return PR_EINVAL;
    size_t n_all = inf->n + pr__n_value_labels(o->labels);
    pr__idec *ds = calloc(n_all ? n_all : 1, sizeof(*ds));
    if (!ds)
        return PR_ENOMEM;
    for (size_t i = 0; i < inf->n; i++) {
        if ((long)i == *t)
            ds[i] = td;
        else
            pr__inf_decide(inf, &inf->ps[i], o, false, *t >= 0, &ds[i]);
    }
    pr__infer_caps(ds, inf->n);
    pr__infer_weights(inf, ds);
    for (size_t i = 0; i < inf->n; i++)
        if (ds[i].kind > PR__IK_TIME && ds[i].kind <= PR__IK_LIST) /* a feature */
            pr__inf_name(inf->ps, ds, inf->n, i, ds);
    pr__infer_tables(inf, ds);
    rc = pr__check_plain_labels(inf, o, ds, errstr, errn);
    if (!rc)
        rc = pr__infer_value_labels(inf, o, ds, sum->label_values_unseen,
                                    sizeof(sum->label_values_unseen), errstr, errn);
    if (rc) {
        free(ds);
        return rc;
    }
    size_t n_feat = 0;
    for (size_t i = 0; i < inf->n; i++)
        n_feat +=
            ds[i].kind == PR__IK_DENSE || ds[i].kind == PR__IK_SPARSE || ds[i].kind == PR__IK_LIST;
    if (!n_feat) { /* a schema needs one; say why the first fields are none */
        size_t n_label = 0;
        for (size_t i = 0; i < n_all; i++)
            n_label += ds[i].kind == PR__IK_LABEL;
        size_t len = (size_t)snprintf(errstr, errn,
                                      "no field of the %zu seen can be a dense or sparse feature "
                                      "(%zu taken as labels)",
                                      inf->n, n_label);
        for (size_t i = 0, k = 0; i < inf->n && k < 3 && len < errn; i++)
            if (ds[i].kind == PR__IK_SKIP) {
                len += (size_t)snprintf(errstr + len, errn - len, "%s %s: %s", k++ ? ";" : ":",
                                        inf->ps[i].path, ds[i].why);
            }
        free(ds);
        return PR_EINVAL;
    }
    *out = ds;
    *n_out = n_all;
    return 0;
}

/* A property whose value must not be copied into a file. */
static bool pr__secret_key(const char *key)
{
    static const char *const words[] = {"password", "secret", "token", "jaas", NULL};
    for (size_t i = 0; words[i]; i++)
        if (strstr(key, words[i]))
            return true;
    return false;
}

/* The caller's Kafka properties after bootstrap.servers (which the option or
 * the first one gave): references as given, a secret's raw value as an
 * environment reference the service resolves when it starts. */
static void pr__infer_props(const pr_infer_opts *o, pr_mbuf *out)
{
    for (size_t i = 0; i < o->n_kafka_props; i++) {
        const pr_kv *kv = &o->kafka_props[i];
        if (!strcmp(kv->key, "bootstrap.servers") || !strcmp(kv->key, "auto.offset.reset"))
            continue;
        pr_mbuf_printf(out, ",\n                      ");
        pr__yaml_str(out, kv->key);
        pr_mbuf_printf(out, ": ");
        if (pr__secret_key(kv->key) && strncmp(kv->value, "${", 2)) {
            char ref[256];
            size_t k = (size_t)snprintf(ref, sizeof(ref), "${env:PIPEREC_KAFKA_");
            for (const char *c = kv->key; *c && k + 2 < sizeof(ref); c++)
                ref[k++] = isalnum((unsigned char)*c) ? (char)toupper((unsigned char)*c) : '_';
            snprintf(ref + k, sizeof(ref) - k, "}");
            pr_mbuf_json_str(out, ref);
        } else {
            pr_mbuf_json_str(out, kv->value);
        }
    }
}

/* The config's first comments and its source (a Kafka topic, the format). */
static void pr__infer_head(const pr_infer *inf, const pr_infer_opts *o, pr_mbuf *out)
{
    const char *name = o->name ? o->name : "events";
    pr__comment(out, "# Inferred by `piperec infer` from %" PRIu64 " events of %s", inf->events,
                o->origin ? o->origin : "the input");
    if (inf->bad)
        pr_mbuf_printf(out, " (%" PRIu64 " records that do not read as events skipped)", inf->bad);
    pr_mbuf_printf(out,
                   ".\n"
                   "# Review it before training: each feature's comment says what was seen, and\n"
                   "# the fields left out are listed at the end of the schema with the reason.\n"
                   "# The rules: docs/configuration.md, \"Inferring a schema\".\n");
    if (inf->paths_dropped)
        pr_mbuf_printf(
            out, "# Only the first %d field paths were studied; %" PRIu64 " more were seen.\n",
            PR__INF_MAX_PATHS, inf->paths_dropped);
    pr_mbuf_printf(out, "pipelines:\n  - name: ");
    pr__yaml_str(out, name);
    pr_mbuf_printf(out, "\n    source:\n      kafka:\n        topics: [");
    pr__yaml_str(out, o->topic ? o->topic : name);
    pr_mbuf_printf(out, "]\n        properties: { bootstrap.servers: ");
    pr_mbuf_json_str(out, o->bootstrap ? o->bootstrap : "127.0.0.1:9092");
    pr_mbuf_printf(out, ", auto.offset.reset: earliest");
    pr__infer_props(o, out);
    pr_mbuf_printf(out, " }\n");
    if (o->avro_schema_file) {
        pr_mbuf_printf(out, "      format: avro\n      avro: { schema_file: ");
        pr__file_str(out, o->avro_schema_file);
        if (inf->avro_registry)
            pr_mbuf_printf(out, ", framing: registry }   # a schema-registry header before "
                                "each body (its id is not looked up)\n");
        else
            pr_mbuf_printf(out, " }   # plain bodies; framing: registry for a schema-registry "
                                "header\n");
    } else if (o->pb_descriptor_set && o->pb_message) {
        pr_mbuf_printf(out, "      format: protobuf\n      protobuf: { descriptor_set: ");
        pr__file_str(out, o->pb_descriptor_set);
        pr_mbuf_printf(out, ", message: ");
        pr_mbuf_json_str(out, o->pb_message);
        pr_mbuf_printf(out, " }\n");
    } else {
        pr_mbuf_printf(out, "      format: json\n");
    }
}

int pr_infer_write(const pr_infer *inf, const pr_infer_opts *o, pr_mbuf *out, pr_infer_summary *sum,
                   char *errstr, size_t errn)
{
    memset(sum, 0, sizeof(*sum));
    if (!inf->events) {
        snprintf(errstr, errn, "no event to learn from (%" PRIu64 " records do not read as events)",
                 inf->bad);
        return PR_EINVAL;
    }
    pr__idec *ds = NULL;
    long t;
    size_t n_all;
    int rc = pr__infer_decide_all(inf, o, &ds, &n_all, &t, sum, errstr, errn);
    if (rc)
        return rc;
    pr__infer_head(inf, o, out);
    pr_mbuf_printf(out, "    schema:\n");
    if (t >= 0) {
        pr_mbuf_printf(out, "      event_time: { path: ");
        pr__yaml_str(out, inf->ps[t].path);
        pr__comment(out, ", unit: %s }   # %s", pr_time_unit_names[ds[t].unit], ds[t].why);
        pr_mbuf_puts(out, "\n");
        sum->event_time = true;
    } else {
        pr_mbuf_printf(out, "      # no event time found (a time-named field of s, ms, us or RFC "
                            "3339 values): batches use the Kafka message time; --time PATH names "
                            "one\n");
    }
    static const struct {
        pr__ikind kind;
        const char *key;
    } sections[] = {{PR__IK_LABEL, "labels"}, {PR__IK_DENSE, "dense"}, {PR__IK_SPARSE, "sparse"}};
    for (size_t s = 0; s < sizeof(sections) / sizeof(sections[0]); s++) {
        size_t cnt = 0;
        for (size_t i = 0; i < n_all; i++)
            cnt += ds[i].kind == sections[s].kind ||
                   (sections[s].kind == PR__IK_SPARSE && ds[i].kind == PR__IK_LIST);
        if (!cnt) {
            if (sections[s].kind == PR__IK_LABEL)
                pr_mbuf_printf(out, "      # no label found (a 0/1 field named like click, "
                                    "purchase, label, or a number under label.*): --labels "
                                    "PATH,... names them\n");
            continue;
        }
        pr_mbuf_printf(out, "      %s:\n", sections[s].key);
        for (size_t i = 0; i < n_all; i++) /* labels by value last, as given */
            if (ds[i].kind == sections[s].kind ||
                (sections[s].kind == PR__IK_SPARSE && ds[i].kind == PR__IK_LIST)) {
                pr__feature_line(out, &inf->ps[i < inf->n ? i : ds[i].of], &ds[i]);
                switch (ds[i].kind) {
                case PR__IK_LABEL:
                    sum->labels++;
                    break;
                case PR__IK_DENSE:
                    sum->dense++;
                    break;
                case PR__IK_LIST:
                    sum->lists++; /* fall through */
                default:
                    sum->sparse++;
                    break;
                }
            }
    }
    if (t >= 0 && sum->sparse)
        pr_mbuf_printf(out,
                       "        # the time of day and week often matter:\n"
                       "        # - { name: hour, path: %s, ops: [hour_of_day, vocab] }\n"
                       "        # - { name: weekday, path: %s, ops: [day_of_week] }\n",
                       inf->ps[t].path, inf->ps[t].path);
    size_t skipped = 0;
    for (size_t i = 0; i < inf->n; i++)
        if (ds[i].kind == PR__IK_SKIP) {
            if (!skipped++)
                pr_mbuf_printf(out, "      # not used:\n");
            pr__comment(out, "      #   %s: %s", inf->ps[i].path, ds[i].why);
            pr_mbuf_puts(out, "\n");
        }
    sum->skipped = skipped;
    pr_mbuf_printf(out, "    transform:\n"
                        "      vocab: { profile: default }   # 0 = missing, 1 = out of vocabulary, "
                        "ids from 2\n"
                        "    batch: { size: 4096, max_delay_ms: 100 }\n"
                        "    sinks:\n"
                        "      trainer: { listen: \"127.0.0.1:7070\" }\n");
    free(ds);
    return out->err;
}
