/*
 * test_infer.c — `piperec infer`'s rules (config/config_infer.c): sample
 * events in, a config out. Each test feeds events, loads the text it writes
 * through the config loader (what `infer` itself checks) and asserts on the
 * loaded features (kind, path, operators), not on the wording, plus the
 * comments that carry a decision (why a field is left out).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_config.h"

typedef struct inferred {
    pr_mbuf text;
    pr_config *cfg;
    pr_infer_summary sum;
} inferred;

/* Feed the events (NULL-terminated), write and load the config. */
static void infer_ok(const char *const *events, const pr_infer_opts *o, inferred *r)
{
    pr_infer *inf = NULL;
    assert_int_equal(pr_infer_new(&inf), 0);
    for (size_t i = 0; events[i]; i++)
        pr_infer_add_json(inf, events[i], strlen(events[i]));
    pr_mbuf_init(&r->text);
    char err[2048];
    pr_infer_opts none = {0};
    int rc = pr_infer_write(inf, o ? o : &none, &r->text, &r->sum, err, sizeof(err));
    if (rc)
        fail_msg("infer failed: %s", err);
    pr_infer_free(inf);
    r->cfg = NULL;
    if (pr_config_load_string(r->text.buf, r->text.len, "<inferred>", &r->cfg, err, sizeof(err)))
        fail_msg("the inferred config does not load: %s\n%s", err, r->text.buf);
}

static void inferred_free(inferred *r)
{
    pr_config_free(r->cfg);
    pr_mbuf_fini(&r->text);
}

/* Repeat one event template n times, "%d" replaced by the event's number
 * (and further %d by derived values: i % 7, i % 3, i * 37). */
static char **repeat(const char *fmt, int n)
{
    char **ev = calloc((size_t)n + 1, sizeof(*ev));
    assert_non_null(ev);
    for (int i = 0; i < n; i++) {
        char b[2048];
        snprintf(b, sizeof(b), fmt, i, i % 7, i % 3, i * 37);
        ev[i] = strdup(b);
    }
    return ev;
}

static void repeat_free(char **ev)
{
    for (size_t i = 0; ev[i]; i++)
        free(ev[i]);
    free(ev);
}

static const pr_feature_spec *feat(const inferred *r, const char *name)
{
    const pr_feature_schema *fs = &r->cfg->pipelines[0].features;
    for (uint32_t i = 0; i < fs->n_features; i++)
        if (!strcmp(fs->features[i].name, name))
            return &fs->features[i];
    return NULL;
}

static const pr_feature_spec *feat_ok(const inferred *r, const char *name, pr_feature_kind kind,
                                      const char *path)
{
    const pr_feature_spec *f = feat(r, name);
    if (!f)
        fail_msg("no feature %s in:\n%s", name, r->text.buf);
    assert_int_equal(f->kind, kind);
    assert_string_equal(f->paths[0], path);
    return f;
}

/* The path is listed as not used, with `why` in its reason. */
static void skipped(const inferred *r, const char *path, const char *why)
{
    char b[256];
    snprintf(b, sizeof(b), "#   %s: ", path);
    const char *at = strstr(r->text.buf, b);
    if (!at)
        fail_msg("%s not listed as not used:\n%s", path, r->text.buf);
    const char *eol = strchr(at, '\n');
    if (!strstr(at, why) || strstr(at, why) > eol)
        fail_msg("%s: reason without '%s': %.*s", path, why, (int)(eol - at), at);
}

/* A click stream: every kind the rules tell apart. */
static void test_kinds(void **state)
{
    (void)state;
    /* vary the values per event: %d is i, i % 7, i % 3, i * 37 */
    char **ev = calloc(201, sizeof(*ev));
    for (int i = 0; i < 200; i++) {
        char b[1024];
        snprintf(b, sizeof(b),
                 "{\"event_id\": \"e%d\", \"ts\": %lld, \"user\": {\"id\": \"u%d\", \"age_days\": "
                 "%d}, \"item\": {\"id\": %d, \"price\": %g, \"tags\": [%s]}, \"history\": [%d, "
                 "%d], \"v\": 3, \"page\": %d, \"score\": %g, \"label\": {\"click\": %d, "
                 "\"dwell_s\": %g}}",
                 i, 1732600000000LL + i * 1000, i % 13, i * 37, 1000 + i % 17, 0.5 + i * 3.1,
                 i % 2 ? "\"x\", \"y\"" : "\"z\"", i, i + 1, i % 5, (i % 9) - 4.5, i % 2, i * 0.25);
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat_ok(&r, "event_time", PR_FEAT_EVENT_TIME, "ts");
    assert_int_equal(f->unit, PR_TIME_MS);
    feat_ok(&r, "click", PR_FEAT_LABEL, "label.click");
    feat_ok(&r, "dwell_s", PR_FEAT_LABEL, "label.dwell_s"); /* a number under label */
    /* ids: strings, an *.id integer, a few-valued integer */
    f = feat_ok(&r, "user_id", PR_FEAT_SPARSE, "user.id");
    assert_int_equal(f->ops[f->n_ops - 1].op, PR_FOP_VOCAB);
    feat_ok(&r, "item_id", PR_FEAT_SPARSE, "item.id");
    feat_ok(&r, "page", PR_FEAT_SPARSE, "page");
    /* lists keep their p99 length */
    f = feat_ok(&r, "tags", PR_FEAT_LIST, "item.tags");
    assert_int_equal(f->max_len, 2);
    f = feat_ok(&r, "history", PR_FEAT_LIST, "history");
    assert_int_equal(f->max_len, 2);
    /* long-tailed non-negative numbers: log1p; others: standardize */
    f = feat_ok(&r, "price", PR_FEAT_DENSE, "item.price");
    assert_int_equal(f->n_ops, 1);
    assert_int_equal(f->ops[0].op, PR_FOP_LOG1P);
    f = feat_ok(&r, "age_days", PR_FEAT_DENSE, "user.age_days");
    assert_int_equal(f->ops[0].op, PR_FOP_LOG1P);
    f = feat_ok(&r, "score", PR_FEAT_DENSE, "score");
    assert_int_equal(f->ops[0].op, PR_FOP_STANDARDIZE);
    assert_true(f->ops[0].a > -0.6 && f->ops[0].a < 0.6);
    assert_true(f->ops[0].b > 2 && f->ops[0].b < 3);
    skipped(&r, "event_id", "an event id");
    skipped(&r, "v", "the same value in every event");
    assert_true(r.sum.event_time);
    assert_int_equal(r.sum.labels, 2);
    assert_int_equal(r.sum.dense, 3);
    assert_int_equal(r.sum.sparse, 5);
    assert_int_equal(r.sum.lists, 2);
    assert_int_equal(r.sum.skipped, 2);
    /* the same events give the same text */
    inferred r2;
    infer_ok((const char *const *)ev, NULL, &r2);
    assert_string_equal(r.text.buf, r2.text.buf);
    inferred_free(&r2);
    inferred_free(&r);
    repeat_free(ev);
}

/* Missing values: a label's default, a dense value's fill at the mean. */
static void test_missing(void **state)
{
    (void)state;
    char **ev = calloc(101, sizeof(*ev));
    for (int i = 0; i < 100; i++) {
        char b[256];
        if (i % 4)
            snprintf(b, sizeof(b), "{\"x\": %.1f, \"purchase\": %d, \"click\": 1}", (i % 10) - 5.0,
                     i % 2);
        else
            snprintf(b, sizeof(b), "{\"x\": null, \"click\": 0}");
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat_ok(&r, "purchase", PR_FEAT_LABEL, "purchase");
    assert_true(f->has_default);
    f = feat_ok(&r, "x", PR_FEAT_DENSE, "x");
    assert_int_equal(f->n_ops, 2);
    assert_int_equal(f->ops[0].op, PR_FOP_FILL);
    assert_int_equal(f->ops[1].op, PR_FOP_STANDARDIZE);
    assert_true(f->ops[0].a == f->ops[1].a); /* filled with the mean */
    f = feat_ok(&r, "click", PR_FEAT_LABEL, "click");
    assert_false(f->has_default);
    inferred_free(&r);
    repeat_free(ev);
}

/* Lists of objects read as lists; what no feature can read is left out. */
static void test_shapes(void **state)
{
    (void)state;
    char deep[600] = "";
    for (int i = 0; i < 70; i++)
        strcat(deep, "{\"d\": ");
    strcat(deep, "1");
    for (int i = 0; i < 70; i++)
        strcat(deep, "}");
    char **ev = calloc(61, sizeof(*ev));
    for (int i = 0; i < 60; i++) {
        char b[2048];
        snprintf(b, sizeof(b),
                 "{\"imps\": [{\"ad\": \"a%d\", \"bid\": %g}, {\"ad\": \"b%d\"}], "
                 "\"emb\": [0.5, %g], \"mixed\": %s, \"shape\": %s, \"nest\": {\"l\": [[1], [2]]},"
                 " \"weird key\": %d, \"time\": \"2026-11-%02dT10:00:00Z\", "
                 "\"signup_at\": %d, \"never\": null, \"deep\": %s, \"obj_list\": [{\"t\": [1]}]}",
                 i % 5, i * 0.5, i % 3, i * 0.1, i % 2 ? "1" : "\"one\"",
                 i % 2 ? "[1]" : "{\"a\": 1}", i % 4, 1 + i % 28, 1600000000 + i, deep);
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat_ok(&r, "ad", PR_FEAT_LIST, "imps.ad");
    assert_int_equal(f->max_len, 2);
    f = feat_ok(&r, "event_time", PR_FEAT_EVENT_TIME, "time");
    assert_int_equal(f->unit, PR_TIME_RFC3339);
    feat_ok(&r, "mixed", PR_FEAT_SPARSE, "mixed"); /* 1 and "one": two kinds of ids */
    assert_non_null(strstr(r.text.buf, "are two ids"));
    /* bid beside the one id list in imps: its weights, 1 for the ad without */
    f = feat(&r, "ad");
    assert_string_equal(f->weights_path, "imps.bid");
    assert_true(f->has_weight_default && f->weight_default == 1.0f);
    assert_null(strstr(r.text.buf, "#   imps.bid: "));
    f = feat_ok(&r, "emb", PR_FEAT_DENSE, "emb"); /* [0.5, x]: a vector of 2 */
    assert_int_equal(f->dim, 2);
    skipped(&r, "shape", "an object, a list or a value");
    skipped(&r, "nest.l", "a list holding");
    skipped(&r, "weird key", "a key a path cannot name");
    /* another time: its age at the event (log-scaled seconds) */
    f = feat_ok(&r, "signup_at_age", PR_FEAT_DENSE, "signup_at");
    assert_int_equal(f->n_ops, 3);
    assert_int_equal(f->ops[0].op, PR_FOP_AGE);
    assert_int_equal(f->ops[0].unit, PR_TIME_S);
    assert_int_equal(f->ops[2].op, PR_FOP_LOG1P);
    skipped(&r, "never", "always null");
    skipped(&r, "obj_list.t", "a list inside a list of objects");
    assert_non_null(strstr(r.text.buf, "nested over 64 deep"));
    assert_non_null(strstr(r.text.buf, "# no label found"));
    inferred_free(&r);
    repeat_free(ev);
}

/* Numbers beside two id lists in one list of objects weigh neither (which
 * one is the user's call); integers there are ids, not weights. */
static void test_weights(void **state)
{
    (void)state;
    char **ev = repeat("{\"imps\": [{\"ad\": \"a%d\", \"cat\": \"c%d\", \"score\": 0.%d, "
                       "\"pos\": %d}]}",
                       80);
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    assert_int_equal(feat(&r, "ad")->weights_path[0], 0);
    assert_int_equal(feat(&r, "cat")->weights_path[0], 0);
    skipped(&r, "imps.score", "numbers beside 3 id lists in one list of objects");
    inferred_free(&r);
    repeat_free(ev);

    /* two fractional numbers beside one id list: neither is guessed (the
     * fuzzer's find: both were proposed, a config that does not load) */
    ev = repeat("{\"imps\": [{\"ad\": \"a%d\", \"seqw\": 0.%d5, \"w\": 1.%d5}, "
                "{\"ad\": \"b\"}], \"c\": %d}",
                80);
    infer_ok((const char *const *)ev, NULL, &r);
    assert_int_equal(feat(&r, "ad")->weights_path[0], 0);
    skipped(&r, "imps.seqw", "one of 2 fractional numbers beside the ids ad");
    skipped(&r, "imps.w", "one of 2 fractional numbers beside the ids ad");
    inferred_free(&r);
    repeat_free(ev);

    /* a weights path that YAML must quote is quoted (the fuzzer's find) */
    ev = repeat("{\"imps{\": [{\"ad\": \"a%d\", \"w\": 0.%d5}, {\"ad\": \"b\"}], "
                "\"c\": %d}",
                80);
    infer_ok((const char *const *)ev, NULL, &r);
    assert_string_equal(feat(&r, "ad")->weights_path, "imps{.w");
    inferred_free(&r);
    repeat_free(ev);
}

/* A map ({"sports": 0.7}: many keys, few of them per event) becomes a list
 * of its keys, weighted by its values when they are numbers beyond 0/1; a
 * record of many fields, all there, stays fields; a map's keys are not
 * listed one by one, and a huge one stops making paths. */
static void test_maps(void **state)
{
    (void)state;
    enum { N = 300 };
    char **ev = calloc(N + 1, sizeof(*ev));
    assert_non_null(ev);
    for (int i = 0; i < N; i++) {
        char b[4096];
        int n = snprintf(b, sizeof(b),
                         "{\"y\": %d, \"aff\": {\"c%d\": 0.%d, \"c%d\": %s}, \"tags\": "
                         "{\"t%d\": true}, \"rec\": {",
                         i % 2, i % 30, i % 9 + 1, (i + 7) % 30, i % 10 ? "2" : "null", i % 20);
        for (int k = 0; k < 20; k++) /* a record: 20 fields in every event */
            n += snprintf(b + n, sizeof(b) - (size_t)n, "%s\"f%d\": %d", k ? ", " : "", k,
                          (i + k) % 5);
        n += snprintf(b + n, sizeof(b) - (size_t)n,
                      "}, \"big\": {\"i%d\": 1, \"i%d\": 1}, \"mix\": {\"m%d\": %s}, "
                      "\"attrs\": {\"a%d\": \"v%d\", \"a%d\": %s}}",
                      i, i + 1000, i % 40, i % 2 ? "true" : "0.5", i % 50, i % 7, (i + 9) % 50,
                      i % 5 ? "\"w\"" : "null");
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat(&r, "aff");
    assert_non_null(f);
    assert_int_equal(f->kind, PR_FEAT_LIST);
    assert_true(f->from_keys && f->weights_from_values && f->has_weight_default);
    assert_int_equal(f->max_len, 2);
    assert_non_null(strstr(r.text.buf, "a map: its keys as ids"));
    f = feat(&r, "tags"); /* all true: keys only */
    assert_non_null(f);
    assert_true(f->from_keys && !pr_feature_weighted(f));
    f = feat(&r, "big"); /* over 64 distinct keys */
    assert_true(f && f->from_keys && !pr_feature_weighted(f));
    f = feat(&r, "mix"); /* true beside numbers: a weight cannot be true, keys only (fuzzer) */
    assert_true(f && f->from_keys && !pr_feature_weighted(f));
    f = feat(&r, "attrs"); /* string values: each key with its value (from: entries) */
    assert_true(f && f->from_keys && f->from_entries && !pr_feature_weighted(f));
    assert_non_null(feat(&r, "f0")); /* the record's fields stay fields */
    assert_null(feat(&r, "c1"));
    assert_null(strstr(r.text.buf, "#   aff.c1:")); /* a map's keys are not listed */
    assert_null(strstr(r.text.buf, "#   big.i1:"));
    inferred_free(&r);
    /* a key of a map given as a label or time: refused, saying so */
    pr_infer *inf = NULL;
    assert_int_equal(pr_infer_new(&inf), 0);
    for (size_t i = 0; ev[i]; i++)
        assert_int_equal(pr_infer_add_json(inf, ev[i], strlen(ev[i])), 0);
    static const pr_infer_opts lo = {.labels = "aff.c3"}, to = {.time_path = "aff.c3"};
    const pr_infer_opts *opts[] = {&lo, &to};
    for (size_t k = 0; k < 2; k++) {
        pr_mbuf mb;
        pr_mbuf_init(&mb);
        pr_infer_summary sum;
        char err[512] = "";
        assert_int_equal(pr_infer_write(inf, opts[k], &mb, &sum, err, sizeof(err)), PR_EINVAL);
        if (!strstr(err, "a key of the map aff (read by its keys)"))
            fail_msg("'%s' does not say the map", err);
        pr_mbuf_fini(&mb);
    }
    pr_infer_free(inf);
    /* the map once a string (or []): listed once with the reason, its keys
     * not one by one */
    for (int k = 0; k < 2; k++) {
        free(ev[5]);
        ev[5] = strdup(k ? "{\"y\": 1, \"aff\": []}" : "{\"y\": 1, \"aff\": \"x\"}");
        infer_ok((const char *const *)ev, NULL, &r);
        assert_null(feat(&r, "aff"));
        assert_non_null(strstr(r.text.buf, "#   aff: a map (many keys, few per event) that is "
                                           "not always an object"));
        assert_null(strstr(r.text.buf, "#   aff.c"));
        inferred_free(&r);
    }
    repeat_free(ev);
}

/* A list whose ids the sample also saw in an earlier id field (a history of
 * candidate items) gets a comment suggesting `table:` (never the key: two
 * integer id spaces may overlap by chance); string ids of another space,
 * and a field of few values, get none. */
static void test_tables_suggested(void **state)
{
    (void)state;
    enum { N = 600 };
    char **ev = calloc(N + 1, sizeof(*ev));
    assert_non_null(ev);
    for (int i = 0; i < N; i++) {
        char b[512];
        int n = snprintf(b, sizeof(b),
                         "{\"y\": %d, \"item\": \"i%d\", \"user\": \"u%d\", \"page\": %d, "
                         "\"hist\": [",
                         i % 2, (i * 7919) % 400, (i * 31) % 300, i % 9);
        for (int k = 0; k < 4; k++)
            n += snprintf(b + n, sizeof(b) - (size_t)n, "%s\"i%d\"", k ? ", " : "",
                          (i * 13 + k * 101) % 400);
        snprintf(b + n, sizeof(b) - (size_t)n, "], \"pages\": [%d]}", i % 9);
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *h = feat(&r, "hist");
    assert_non_null(h);
    assert_string_equal(h->table, ""); /* a suggestion only */
    assert_non_null(strstr(r.text.buf, "values also in item: if they are the same ids, table: "
                                       "item gives them one vocabulary"));
    assert_null(strstr(r.text.buf, "also in user"));
    assert_null(strstr(r.text.buf, "also in page"));
    inferred_free(&r);
    repeat_free(ev);
}

/* --labels, --time, --ignore: the caller's word wins; a bad one is refused. */
static void test_options(void **state)
{
    (void)state;
    char **ev = repeat("{\"id\": \"r%d\", \"t\": %d, \"y\": {\"ok\": %d, \"n\": 5}, \"skip\": "
                       "{\"a\": %d}, \"ts\": 1700000000}",
                       80);
    pr_infer_opts o = {.labels = "t", .time_path = "", .ignore = "skip,y.n"};
    inferred r;
    infer_ok((const char *const *)ev, &o, &r);
    feat_ok(&r, "t", PR_FEAT_LABEL, "t");
    feat_ok(&r, "ok", PR_FEAT_SPARSE, "y.ok"); /* under y (a label parent) but not given */
    assert_null(feat(&r, "event_time"));
    skipped(&r, "skip.a", "--ignore");
    skipped(&r, "y.n", "--ignore");
    assert_non_null(strstr(r.text.buf, "no event time found"));
    inferred_free(&r);

    /* refusals name the option and the path */
    static const struct {
        pr_infer_opts o;
        const char *msg;
    } bad[] = {
        {{.labels = "nope"}, "--labels: no event has the field 'nope'"},
        {{.labels = "id"}, "--labels: 'id' cannot be a label: not a number"},
        {{.time_path = "t"}, "--time: 't' cannot be the event time: not a time"},
        {{.time_path = "zz"}, "--time: no event has the field 'zz'"},
        {{.ignore = "skip,,y.n"}, "--ignore: an empty"},
    };
    pr_infer *inf = NULL;
    assert_int_equal(pr_infer_new(&inf), 0);
    for (size_t i = 0; ev[i]; i++)
        assert_int_equal(pr_infer_add_json(inf, ev[i], strlen(ev[i])), 0);
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        pr_mbuf mb;
        pr_mbuf_init(&mb);
        pr_infer_summary sum;
        char err[512] = "";
        assert_int_equal(pr_infer_write(inf, &bad[k].o, &mb, &sum, err, sizeof(err)), PR_EINVAL);
        if (!strstr(err, bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, err, bad[k].msg);
        pr_mbuf_fini(&mb);
    }
    pr_infer_free(inf);
    repeat_free(ev);
}

/* Lines that are not JSON objects are counted, not learnt; none at all is
 * refused. */
static void test_bad_lines(void **state)
{
    (void)state;
    pr_infer *inf = NULL;
    assert_int_equal(pr_infer_new(&inf), 0);
    static const char *const bad[] = {"not json", "[1, 2]", "{\"a\": 1", "null", "{\"a\": 1} x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(pr_infer_add_json(inf, bad[i], strlen(bad[i])), PR_EBADREC);
    assert_int_equal(pr_infer_events(inf), 0);
    assert_int_equal(pr_infer_rejected(inf), 5);
    pr_mbuf mb;
    pr_mbuf_init(&mb);
    pr_infer_summary sum;
    char err[256];
    pr_infer_opts o = {0};
    assert_int_equal(pr_infer_write(inf, &o, &mb, &sum, err, sizeof(err)), PR_EINVAL);
    assert_non_null(strstr(err, "no event"));
    pr_mbuf_fini(&mb);
    pr_infer_free(inf);
}

/* Names: a field's last key, its whole path when two share one, never the
 * event time's; ids unique per event are left out, also past the exact
 * distinct count when named so. */
static void test_names(void **state)
{
    (void)state;
    char **ev = repeat("{\"a\": {\"id\": \"x%d\"}, \"b\": {\"id\": %d}, \"event_time\": %d, "
                       "\"ts\": 1700000000123, \"request_id\": \"q%d\"}",
                       100);
    for (int i = 0; i < 100; i++) { /* a.id repeats: not unique */
        char b[256];
        snprintf(b, sizeof(b),
                 "{\"a\": {\"id\": \"x%d\"}, \"b\": {\"id\": %d}, \"event_time\": %d, "
                 "\"ts\": 1700000000123, \"request_id\": \"q%d\"}",
                 i % 10, i % 20, i % 3, i);
        free(ev[i]);
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    feat_ok(&r, "a_id", PR_FEAT_SPARSE, "a.id");
    feat_ok(&r, "b_id", PR_FEAT_SPARSE, "b.id");
    feat_ok(&r, "event_time_2", PR_FEAT_SPARSE, "event_time"); /* the time's name is taken */
    feat_ok(&r, "event_time", PR_FEAT_EVENT_TIME, "ts");
    skipped(&r, "request_id", "an event id");
    inferred_free(&r);
    repeat_free(ev);
}

/* What a review of real teams' events asked for: outcomes never become
 * inputs; ids by their names; the event time by its name's rank, read past
 * a sentinel, never under a field that is sometimes no object; what the
 * decoder would reject is left out (integers beyond int64, lists over 4096,
 * labels beyond float32); dates and nanoseconds are no ids or measures. */
static void test_review(void **state)
{
    (void)state;
    char big[4096 * 2 + 64];
    size_t k = (size_t)sprintf(big, "[");
    for (int i = 0; i < 4100; i++)
        k += (size_t)sprintf(big + k, "%s1", i ? "," : "");
    sprintf(big + k, "]");
    char **ev = calloc(301, sizeof(*ev));
    for (int i = 0; i < 300; i++) {
        char *b = malloc(sizeof(big) + 1024);
        snprintf(b, sizeof(big) + 1024,
                 "{\"user\": {\"created_at\": %lld, \"userid\": %d, \"uid\": %d}, \"ts\": %lld, "
                 "\"paid\": %d.5, \"label\": \"%d\", \"purchase\": %d, \"click\": %d, "
                 "\"target\": {\"item_id\": %d, \"bid\": %d.25}, \"hash\": %s, \"day\": "
                 "\"2026-11-%02d\", \"sent_ns\": %lld, \"meta\": %s, \"big\": %s, "
                 "\"lng\": %.4f, \"r\": %s, \"outcome\": {\"revenue\": %s}}",
                 1600000000000LL + i, 100000 + i * 7, 5000 + i * 3,
                 i == 7 ? 0LL : 1732600000000LL + i * 1000, i, i % 2, i % 3, i % 2, i % 9, i % 50,
                 i == 5 ? "18446744073709551615" : "12", 1 + i % 28, 1732600000000000000LL + i,
                 i % 10 ? "{\"at_ms\": 1700000000000}" : "\"none\"", i == 3 ? big : "[1, 2]",
                 -122.4 + (i % 10) * 0.001, i == 9 ? "3.5e38" : "0.5", i == 9 ? "3.5e38" : "0.5");
        ev[i] = b;
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat_ok(&r, "event_time", PR_FEAT_EVENT_TIME, "ts");
    assert_int_equal(f->unit, PR_TIME_MS); /* the top-level ts, past its one 0 */
    f = feat_ok(&r, "created_at_age", PR_FEAT_DENSE, "user.created_at");
    assert_int_equal(f->ops[0].op, PR_FOP_AGE);
    assert_int_equal(f->ops[0].unit, PR_TIME_MS);
    feat_ok(&r, "userid", PR_FEAT_SPARSE, "user.userid");
    feat_ok(&r, "uid", PR_FEAT_SPARSE, "user.uid");
    feat_ok(&r, "paid", PR_FEAT_DENSE, "paid");
    feat_ok(&r, "click", PR_FEAT_LABEL, "click");
    skipped(&r, "label", "named like an outcome");            /* "0"/"1" strings */
    skipped(&r, "purchase", "named like an outcome");         /* 0/1/2 */
    feat_ok(&r, "item_id", PR_FEAT_SPARSE, "target.item_id"); /* target is no label parent */
    feat_ok(&r, "bid", PR_FEAT_DENSE, "target.bid");
    skipped(&r, "hash", "integers beyond int64");
    skipped(&r, "day", "dates");
    skipped(&r, "sent_ns", "nanoseconds");
    skipped(&r, "meta.at_ms", "under meta");
    skipped(&r, "big", "over 4096");
    skipped(&r, "outcome.revenue", "beyond float32"); /* a label could not hold it */
    f = feat_ok(&r, "r", PR_FEAT_DENSE, "r");         /* log1p brings it back */
    assert_int_equal(f->ops[0].op, PR_FOP_LOG1P);
    /* 9 digits: a standardized longitude keeps its precision */
    f = feat_ok(&r, "lng", PR_FEAT_DENSE, "lng");
    assert_int_equal(f->ops[0].op, PR_FOP_STANDARDIZE);
    assert_true(fabs(f->ops[0].a - (-122.3955)) < 1e-6);
    inferred_free(&r);
    repeat_free(ev);
}

/* The second review: an event time must convert in every event (one value
 * beyond its unit's range is a bad_time reject); at most 256 dense and 256
 * sparse features, the first ones seen; a field in under 1% of the events
 * and under 10 of them is too rare to learn from. */
static void test_review2(void **state)
{
    (void)state;
    char **ev = calloc(201, sizeof(*ev));
    for (int i = 0; i < 200; i++) {
        char b[256];
        snprintf(b, sizeof(b), "{\"ts\": %s, \"u\": \"u%d\", \"click\": %d%s}",
                 i == 9   ? "1e300"
                 : i == 8 ? "0"
                          : "1700000000000",
                 i % 7, i % 2, i == 3 ? ", \"once\": \"x\"" : "");
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    assert_null(feat(&r, "event_time")); /* 1e300 ms is no time: none chosen */
    assert_non_null(strstr(r.text.buf, "no event time found"));
    skipped(&r, "once", "too rare to learn from");
    inferred_free(&r);
    repeat_free(ev);

    ev = calloc(4, sizeof(*ev));
    for (int e = 0; e < 3; e++) {
        char *b = malloc(300 * 64), *p = b;
        p += sprintf(p, "{\"click\": %d", e % 2);
        for (int i = 0; i < 300; i++)
            p += sprintf(p, ", \"s%03d\": \"v%d\", \"d%03d\": %d.5", i, e, i, e * 1000 + i);
        sprintf(p, "}");
        ev[e] = b;
    }
    infer_ok((const char *const *)ev, NULL, &r);
    assert_int_equal(r.sum.dense, 256);
    assert_int_equal(r.sum.sparse, 256);
    feat_ok(&r, "s255", PR_FEAT_SPARSE, "s255");
    skipped(&r, "s256", "over 256 sparse features");
    skipped(&r, "d299", "over 256 dense features");
    inferred_free(&r);
    repeat_free(ev);
}

/* The event's vectors: a list of `n` numbers, "%g" of base + k * step. */
static int vec_json(char *b, size_t cap, int n, double base, double step)
{
    size_t k = (size_t)snprintf(b, cap, "[");
    for (int i = 0; i < n && k < cap; i++)
        k += (size_t)snprintf(b + k, cap - k, "%s%g", i ? ", " : "", base + i * step);
    if (k < cap)
        k += (size_t)snprintf(b + k, cap - k, "]");
    return (int)k;
}

/* Dense vectors (dim): a list of numbers of one length in every event that
 * holds one, with a fractional number or under an embedding's name; no ops,
 * default: 0 where some events lack it ([] and null too); a length that
 * varies, one number, a value beyond float32, true/false or strings among
 * the numbers leave it out; integer lists stay lists (ids). */
static void test_vectors(void **state)
{
    (void)state;
    char **ev = calloc(101, sizeof(*ev));
    for (int i = 0; i < 100; i++) {
        char b[4096], emb[256], ctx[128], var[256], big[64], lk[256];
        vec_json(emb, sizeof(emb), 8, -0.5 + i * 0.01, 0.125);
        if (i % 4 == 3)
            vec_json(ctx, sizeof(ctx), 4, i * 0.5, -1);
        else
            snprintf(ctx, sizeof(ctx), i % 4 == 1 ? "null" : "[]");
        vec_json(var, sizeof(var), 3 + i % 7, 0.25, 1);
        snprintf(big, sizeof(big), "[0.5, %s]", i == 7 ? "1e300" : "1.5");
        vec_json(lk, sizeof(lk), 16, 0.5, i);
        snprintf(b, sizeof(b),
                 "{\"click\": %d, \"emb\": %s, %s%s%s\"var\": %s, \"hist\": [%d, %d, %d], "
                 "\"user_emb\": [%d, %d, %d, %d], \"item2vec\": [%d%s], \"emb_ids\": [%d, 7, 9], "
                 "\"member\": [%d, 1, 2], \"big\": %s, \"flags\": [0.5, %s], \"one\": [%g], "
                 "\"words\": [\"a\", 0.5], \"a_very_long_query_embedding_key_for_the_ranking_"
                 "model_v2\": %s}",
                 i % 2, emb, i % 4 ? "\"ctx\": " : "", i % 4 ? ctx : "", i % 4 ? ", " : "", var, i,
                 i + 1, i + 2, i % 5, i % 3, -i, i, i % 9, i % 2 ? ", 4" : "", i % 11, i % 13, big,
                 i % 2 ? "true" : "false", i * 0.5, lk);
        ev[i] = strdup(b);
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    const pr_feature_spec *f = feat_ok(&r, "emb", PR_FEAT_DENSE, "emb");
    assert_int_equal(f->dim, 8);
    assert_int_equal(f->n_ops, 0); /* an embedding is used as it is */
    assert_false(f->has_default);  /* in every event */
    assert_non_null(strstr(r.text.buf, "dim: 8 }   # vectors of 8 numbers "));
    assert_non_null(strstr(r.text.buf, "in 100% of events, elements -0.5..1.365, e.g. [-0.5, "));
    f = feat_ok(&r, "ctx", PR_FEAT_DENSE, "ctx"); /* absent, null, [] or 4 numbers */
    assert_int_equal(f->dim, 4);
    assert_int_equal(f->n_ops, 0);
    assert_true(f->has_default);
    assert_true(f->deflt.a == 0);
    assert_non_null(strstr(r.text.buf, "dim: 4, default: 0 }   # vectors of 4 numbers "
                                       "(an embedding: used as it is), in 25% of events"));
    f = feat_ok(&r, "user_emb", PR_FEAT_DENSE, "user_emb"); /* integers, an embedding's name */
    assert_int_equal(f->dim, 4);
    assert_non_null(strstr(r.text.buf, "vectors of 4 integers"));
    /* a long key: the name leaves room for its columns' NAME[15] (the config loaded) */
    f = feat_ok(&r, "a_very_long_query_embedding_key_for_the_ranking_model_v", PR_FEAT_DENSE,
                "a_very_long_query_embedding_key_for_the_ranking_model_v2");
    assert_int_equal(f->dim, 16);
    /* integer lists stay lists: ids, a length that varies, an id's name, no vector name */
    f = feat_ok(&r, "hist", PR_FEAT_LIST, "hist");
    assert_int_equal(f->max_len, 3);
    feat_ok(&r, "item2vec", PR_FEAT_LIST, "item2vec");
    feat_ok(&r, "emb_ids", PR_FEAT_LIST, "emb_ids");
    feat_ok(&r, "member", PR_FEAT_LIST, "member");
    skipped(&r, "var",
            "a list of numbers whose length varies (3..9): a dense vector needs one "
            "length, a list feature reads ids");
    skipped(&r, "big", "beyond float32 (up to 1e+300)");
    skipped(&r, "flags", "a list mixing true/false and numbers");
    skipped(&r, "one", "a list of one number");
    skipped(&r, "words", "a list mixing strings and numbers");
    assert_int_equal(r.sum.dense, 4);
    assert_int_equal(r.sum.lists, 4);
    assert_int_equal(r.sum.skipped, 5);
    inferred_free(&r);
    repeat_free(ev);
}

/* The dense budget: at most 256 dense features in 4096 dense columns, a
 * vector counted by its dim; one that does not fit in what is left is left
 * out, a smaller one seen later still goes in. */
static void test_vector_budget(void **state)
{
    (void)state;
    static const struct {
        const char *key;
        int dim;
    } vecs[] = {{"a_emb", 3000}, {"b_emb", 1000}, {"c_emb", 200}, {"d_emb", 90}};
    char **ev = calloc(4, sizeof(*ev));
    for (int e = 0; e < 3; e++) {
        size_t cap = 64 * 1024, k = 0;
        char *b = malloc(cap);
        k += (size_t)snprintf(b + k, cap - k, "{\"click\": %d", e % 2);
        for (size_t v = 0; v < sizeof(vecs) / sizeof(vecs[0]); v++) {
            k += (size_t)snprintf(b + k, cap - k, ", \"%s\": ", vecs[v].key);
            k += (size_t)vec_json(b + k, cap - k, vecs[v].dim, e * 0.5, 0.25);
        }
        for (int x = 0; x < 10; x++) /* 6 of them fit: 3000 + 1000 + 90 + 6 = 4096 */
            k += (size_t)snprintf(b + k, cap - k, ", \"x%d\": %d.5", x, e * 10 + x);
        snprintf(b + k, cap - k, "}");
        ev[e] = b;
    }
    inferred r;
    infer_ok((const char *const *)ev, NULL, &r);
    assert_int_equal(feat_ok(&r, "a_emb", PR_FEAT_DENSE, "a_emb")->dim, 3000);
    assert_int_equal(feat_ok(&r, "b_emb", PR_FEAT_DENSE, "b_emb")->dim, 1000);
    skipped(&r, "c_emb",
            "a vector whose dim would go over the 4096 dense columns a schema takes "
            "(4000 taken");
    assert_int_equal(feat_ok(&r, "d_emb", PR_FEAT_DENSE, "d_emb")->dim, 90);
    feat_ok(&r, "x5", PR_FEAT_DENSE, "x5");
    skipped(&r, "x6", "a number that would go over the 4096 dense columns");
    skipped(&r, "x9", "over the 4096 dense columns");
    assert_int_equal(r.sum.dense, 9);
    assert_int_equal(r.cfg->pipelines[0].features.n_features, 10); /* and the label */
    assert_int_equal(pr_feature_schema_dense_cols(&r.cfg->pipelines[0].features), 4096);
    inferred_free(&r);
    repeat_free(ev);
}

/* A file under /tmp with these bytes; its path into path (a mkstemps
 * template with suffix). */
static void temp_file(char *path, int suffix, const void *data, size_t n)
{
    int fd = mkstemps(path, suffix);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Avro arrays of float and double, Protobuf repeated float and double, as
 * JSON lists are: a vector of one length in every record becomes a dense
 * vector the format's config check accepts (an empty Avro array or an
 * absent repeated field is missing: default 0); an array of longs stays a
 * list; a NaN (which JSON cannot hold) leaves the array out. */
static void test_vector_formats(void **state)
{
    (void)state;
    /* Avro: record E { array<float> emb; array<double> dv; array<long> ids } */
    static const char avsc[] =
        "{\"type\": \"record\", \"name\": \"E\", \"fields\": ["
        "{\"name\": \"emb\", \"type\": {\"type\": \"array\", \"items\": \"float\"}}, "
        "{\"name\": \"dv\", \"type\": {\"type\": \"array\", \"items\": \"double\"}}, "
        "{\"name\": \"ids\", \"type\": {\"type\": \"array\", \"items\": \"long\"}}, "
        "{\"name\": \"nan_emb\", \"type\": {\"type\": \"array\", \"items\": \"double\"}}]}";
    char avsc_path[] = "/tmp/pr_test_infer_XXXXXX.avsc";
    temp_file(avsc_path, 5, avsc, sizeof(avsc) - 1);
    FILE *recs = tmpfile();
    assert_non_null(recs);
    for (int i = 0; i < 40; i++) {
        uint8_t body[256];
        size_t n = 0;
        body[n++] = 3 * 2; /* 3 floats, a zigzag count */
        for (int k = 0; k < 3; k++) {
            float x = 0.25f * (float)(i + k);
            memcpy(body + n, &x, 4); /* little-endian, as the Avro spec */
            n += 4;
        }
        body[n++] = 0;
        if (i % 2) { /* 2 doubles, else an empty array */
            body[n++] = 2 * 2;
            for (int k = 0; k < 2; k++) {
                double x = -1.5 * (double)(i + k);
                memcpy(body + n, &x, 8);
                n += 8;
            }
        }
        body[n++] = 0;
        body[n++] = 2 * 2; /* ids: 2 longs */
        body[n++] = (uint8_t)(2 * (i % 50));
        body[n++] = 2 * 3;
        body[n++] = 0;
        body[n++] = 2 * 2; /* nan_emb: 2 doubles, a NaN in one record */
        for (int k = 0; k < 2; k++) {
            double x = i == 5 && k ? NAN : 0.5 * (double)(i - k);
            memcpy(body + n, &x, 8);
            n += 8;
        }
        body[n++] = 0;
        fputc((int)n, recs);
        fwrite(body, 1, n, recs);
    }
    rewind(recs);
    pr_infer *inf = NULL;
    char err[2048];
    assert_int_equal(pr_infer_new(&inf), 0);
    assert_int_equal(pr_infer_add_avro_records(inf, avsc_path, recs, 1000, err, sizeof(err)), 0);
    fclose(recs);
    pr_infer_opts ao = {.avro_schema_file = avsc_path};
    inferred r;
    pr_mbuf_init(&r.text);
    assert_int_equal(pr_infer_write(inf, &ao, &r.text, &r.sum, err, sizeof(err)), 0);
    pr_infer_free(inf);
    if (pr_config_load_string(r.text.buf, r.text.len, "<inferred>", &r.cfg, err, sizeof(err)))
        fail_msg("the inferred Avro config does not load: %s\n%s", err, r.text.buf);
    const pr_feature_spec *f = feat_ok(&r, "emb", PR_FEAT_DENSE, "emb");
    assert_int_equal(f->dim, 3);
    assert_false(f->has_default);
    f = feat_ok(&r, "dv", PR_FEAT_DENSE, "dv");
    assert_int_equal(f->dim, 2);
    assert_true(f->has_default);
    feat_ok(&r, "ids", PR_FEAT_LIST, "ids");
    skipped(&r, "nan_emb", "NaN or infinity in 1 values");
    inferred_free(&r);
    unlink(avsc_path);

    /* Protobuf: the descriptor set protoc writes of
     *   syntax = "proto3"; package v;
     *   message E { repeated float vec = 1; repeated double dvec = 2 [packed = false];
     *               repeated int64 ids = 3; } */
    static const uint8_t desc[] = {
        0x0a, 0x55, 0x0a, 0x07, 0x76, 0x2e, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x12, 0x01, 0x76, 0x22,
        0x3f, 0x0a, 0x01, 0x45, 0x12, 0x10, 0x0a, 0x03, 0x76, 0x65, 0x63, 0x18, 0x01, 0x20, 0x03,
        0x28, 0x02, 0x52, 0x03, 0x76, 0x65, 0x63, 0x12, 0x16, 0x0a, 0x04, 0x64, 0x76, 0x65, 0x63,
        0x18, 0x02, 0x20, 0x03, 0x28, 0x01, 0x42, 0x02, 0x10, 0x00, 0x52, 0x04, 0x64, 0x76, 0x65,
        0x63, 0x12, 0x10, 0x0a, 0x03, 0x69, 0x64, 0x73, 0x18, 0x03, 0x20, 0x03, 0x28, 0x03, 0x52,
        0x03, 0x69, 0x64, 0x73, 0x62, 0x06, 0x70, 0x72, 0x6f, 0x74, 0x6f, 0x33};
    char desc_path[] = "/tmp/pr_test_infer_XXXXXX.desc";
    temp_file(desc_path, 5, desc, sizeof(desc));
    FILE *msgs = tmpfile();
    assert_non_null(msgs);
    for (int i = 0; i < 40; i++) {
        uint8_t m[256];
        size_t n = 0;
        m[n++] = 0x0a; /* vec: packed, 4 floats */
        m[n++] = 16;
        for (int k = 0; k < 4; k++) {
            float x = 0.5f * (float)(i - k);
            memcpy(m + n, &x, 4);
            n += 4;
        }
        for (int k = 0; i % 2 && k < 2; k++) { /* dvec: 2 unpacked doubles, else absent */
            double x = 0.125 * (double)(i * k);
            m[n++] = 0x11;
            memcpy(m + n, &x, 8);
            n += 8;
        }
        m[n++] = 0x1a; /* ids: packed, 2 varints */
        m[n++] = 2;
        m[n++] = (uint8_t)(i % 30);
        m[n++] = 5;
        fputc((int)n, msgs);
        fwrite(m, 1, n, msgs);
    }
    rewind(msgs);
    assert_int_equal(pr_infer_new(&inf), 0);
    assert_int_equal(pr_infer_add_pb_messages(inf, desc_path, "v.E", msgs, 1000, err, sizeof(err)),
                     0);
    fclose(msgs);
    pr_infer_opts po = {.pb_descriptor_set = desc_path, .pb_message = "v.E"};
    pr_mbuf_init(&r.text);
    assert_int_equal(pr_infer_write(inf, &po, &r.text, &r.sum, err, sizeof(err)), 0);
    pr_infer_free(inf);
    r.cfg = NULL;
    if (pr_config_load_string(r.text.buf, r.text.len, "<inferred>", &r.cfg, err, sizeof(err)))
        fail_msg("the inferred Protobuf config does not load: %s\n%s", err, r.text.buf);
    f = feat_ok(&r, "vec", PR_FEAT_DENSE, "vec");
    assert_int_equal(f->dim, 4);
    assert_false(f->has_default);
    f = feat_ok(&r, "dvec", PR_FEAT_DENSE, "dvec");
    assert_int_equal(f->dim, 2);
    assert_true(f->has_default); /* absent (an empty repeated field) in half */
    feat_ok(&r, "ids", PR_FEAT_LIST, "ids");
    inferred_free(&r);
    unlink(desc_path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds),         cmocka_unit_test(test_missing),
        cmocka_unit_test(test_shapes),        cmocka_unit_test(test_weights),
        cmocka_unit_test(test_maps),          cmocka_unit_test(test_tables_suggested),
        cmocka_unit_test(test_options),       cmocka_unit_test(test_bad_lines),
        cmocka_unit_test(test_names),         cmocka_unit_test(test_review),
        cmocka_unit_test(test_review2),       cmocka_unit_test(test_vectors),
        cmocka_unit_test(test_vector_budget), cmocka_unit_test(test_vector_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
