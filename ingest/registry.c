/*
 * registry.c — a client of a Confluent-compatible schema registry (issue 23;
 * contract: "schema registry" in pr_ingest.h), shared by the Avro and the
 * Protobuf readers, and the registry's message framing.
 *
 * One libcurl easy handle, reused (keep-alive), one request at a time on the
 * decoding thread: GET {url}/schemas/ids/{id}. The answer's "schema" member
 * is read with piperec's own JSON extractor (it unescapes the schema text).
 * The client holds no schemas: the readers cache what they compile. It holds
 * the registry's health instead: a failed request starts a backoff (100 ms,
 * doubling to 5 s) during which fetches answer PR_EAGAIN without a request,
 * so that a paused partition retrying every poll does not hammer a registry
 * that is down; the first success resets it.
 *
 * Totals for /metrics are kept per configuration (the pr_registry_cfg a
 * client is made from, i.e. one pipeline's source.schema_registry), not per
 * client: a pipeline may make several clients (one per decoder) and make
 * them again (a restart), and its counters must add up and never go back.
 * They live in a small static table of atomics that the HTTP thread reads
 * without a lock; a slot is claimed once per cfg under a mutex.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "pr_clock.h"
#include "pr_ingest.h"

#define PR__REG_MAX_ANSWER  (8u << 20) /* bytes of one answer */
#define PR__REG_BACKOFF0_MS 100
#define PR__REG_BACKOFF_MAX 5000
#define PR__REG_MAX_TALLIES 64 /* registry configs with totals (pipelines, reloads) */

/* The totals of one pr_registry_cfg (see the file comment). */
typedef struct pr__reg_tally {
    _Atomic(const pr_registry_cfg *) cfg; /* set once, under pr__tally_lock */
    atomic_uint_fast64_t fetches, fail[PR_REG_FAIL__COUNT], evictions;
    atomic_int_fast64_t cached;
} pr__reg_tally;

static pr__reg_tally pr__tallies[PR__REG_MAX_TALLIES];
static pthread_mutex_t pr__tally_lock = PTHREAD_MUTEX_INITIALIZER;

const char *const pr_registry_fail_names[] = {
    [PR_REG_FAIL_REFUSED] = "refused", [PR_REG_FAIL_TIMEOUT] = "timeout",
    [PR_REG_FAIL_5XX] = "5xx",         [PR_REG_FAIL_404] = "404",
    [PR_REG_FAIL_OTHER] = "other",     [PR_REG_FAIL__COUNT] = NULL};

struct pr_registry {
    char *url; /* without a trailing '/' */
    char *userpwd;
    struct curl_slist *headers;
    char *ca_file;
    uint32_t timeout_ms;
    CURL *curl;
    pr_json_extractor *x;
    pr_json_block *jb;
    int64_t retry_at_ns; /* backing off until */
    uint32_t backoff_ms;
    pr_registry_stats st;
    pr__reg_tally *tally; /* NULL when the table is full (no totals) */
};

static pthread_once_t pr__curl_once = PTHREAD_ONCE_INIT;

/* The slot of cfg, claimed on first use; NULL when cfg has none. */
static pr__reg_tally *pr__tally_find(const pr_registry_cfg *cfg, bool claim)
{
    for (size_t i = 0; i < PR__REG_MAX_TALLIES; i++) {
        const pr_registry_cfg *c = atomic_load(&pr__tallies[i].cfg);
        if (c == cfg)
            return &pr__tallies[i];
        if (!c)
            break; /* slots are claimed in order */
    }
    if (!claim)
        return NULL;
    pr__reg_tally *t = NULL;
    pthread_mutex_lock(&pr__tally_lock);
    for (size_t i = 0; i < PR__REG_MAX_TALLIES && !t; i++) {
        const pr_registry_cfg *c = atomic_load(&pr__tallies[i].cfg);
        if (c == cfg || !c) {
            t = &pr__tallies[i];
            if (!c)
                atomic_store(&t->cfg, cfg);
        }
    }
    pthread_mutex_unlock(&pr__tally_lock);
    return t;
}

bool pr_registry_totals_of(const pr_registry_cfg *cfg, pr_registry_totals *t)
{
    memset(t, 0, sizeof(*t));
    const pr__reg_tally *y = pr__tally_find(cfg, false);
    if (!y)
        return false;
    t->fetches = atomic_load_explicit(&y->fetches, memory_order_relaxed);
    for (int k = 0; k < PR_REG_FAIL__COUNT; k++)
        t->fail[k] = atomic_load_explicit(&y->fail[k], memory_order_relaxed);
    t->cache_evictions = atomic_load_explicit(&y->evictions, memory_order_relaxed);
    t->cached = atomic_load_explicit(&y->cached, memory_order_relaxed);
    return true;
}

void pr_registry_note_cache(pr_registry *r, int64_t delta, uint64_t evicted)
{
    if (!r || !r->tally)
        return;
    atomic_fetch_add_explicit(&r->tally->cached, delta, memory_order_relaxed);
    if (evicted)
        atomic_fetch_add_explicit(&r->tally->evictions, evicted, memory_order_relaxed);
}

static void pr__count_fail(pr_registry *r, pr_registry_fail kind)
{
    if (r->tally)
        atomic_fetch_add_explicit(&r->tally->fail[kind], 1, memory_order_relaxed);
}

static void pr__curl_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* The first line of a small file (a password or a token), malloc'd. */
static char *pr__first_line(const char *path, char *errstr, size_t errstr_size)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    if (!f || !fgets(line, sizeof(line), f)) {
        if (f)
            fclose(f);
        pr_seterr(errstr, errstr_size, PR_EIO, "schema_registry: cannot read %s", path);
        return NULL;
    }
    fclose(f);
    line[strcspn(line, "\r\n")] = 0;
    return strdup(line);
}

/* Basic auth or a bearer token, from their files. */
static int pr__auth(pr_registry *r, const pr_registry_cfg *cfg, char *errstr, size_t errstr_size)
{
    if (cfg->token_file) {
        char *tok = pr__first_line(cfg->token_file, errstr, errstr_size);
        if (!tok)
            return PR_EIO;
        size_t n = strlen(tok) + 32;
        char *h = malloc(n);
        if (h)
            snprintf(h, n, "Authorization: Bearer %s", tok);
        free(tok);
        struct curl_slist *l = h ? curl_slist_append(r->headers, h) : NULL;
        free(h);
        if (!l)
            return PR_ENOMEM;
        r->headers = l;
    }
    if (cfg->username) {
        char *pw = cfg->password_file ? pr__first_line(cfg->password_file, errstr, errstr_size)
                                      : strdup("");
        if (!pw)
            return PR_EIO;
        size_t n = strlen(cfg->username) + strlen(pw) + 2;
        if ((r->userpwd = malloc(n)))
            snprintf(r->userpwd, n, "%s:%s", cfg->username, pw);
        free(pw);
        if (!r->userpwd)
            return PR_ENOMEM;
    }
    return 0;
}

pr_registry *pr_registry_new(const pr_registry_cfg *cfg, char *errstr, size_t errstr_size)
{
    if (!cfg->url || (strncmp(cfg->url, "http://", 7) && strncmp(cfg->url, "https://", 8))) {
        pr_seterr(errstr, errstr_size, PR_EINVAL,
                  "schema_registry.url: an http:// or https:// URL is needed");
        return NULL;
    }
    pthread_once(&pr__curl_once, pr__curl_init);
    pr_registry *r = calloc(1, sizeof(*r));
    if (!r || !(r->url = strdup(cfg->url)))
        goto out_nomem;
    size_t ul = strlen(r->url);
    while (ul > 0 && r->url[ul - 1] == '/')
        r->url[--ul] = 0;
    r->timeout_ms = cfg->timeout_ms ? cfg->timeout_ms : 2000;
    r->tally = pr__tally_find(cfg, true);
    if (cfg->ca_file && !(r->ca_file = strdup(cfg->ca_file)))
        goto out_nomem;
    int rc = pr__auth(r, cfg, errstr, errstr_size);
    if (rc == PR_ENOMEM)
        goto out_nomem;
    if (rc)
        goto out_free;
    const pr_json_path paths[] = {
        {.path = "schema", .type = PR_JSON_STRING, .shape = PR_JSON_SCALAR},
        {.path = "schemaType", .type = PR_JSON_STRING, .shape = PR_JSON_SCALAR},
    };
    if (!(r->x = pr_json_extractor_new(paths, 2, 0, errstr, errstr_size)) ||
        !(r->jb = pr_json_block_new(r->x, 1)) || !(r->curl = curl_easy_init()))
        goto out_nomem;
    return r;
out_nomem:
    pr_seterr(errstr, errstr_size, PR_ENOMEM, "schema_registry: out of memory");
out_free:
    pr_registry_free(r);
    return NULL;
}

void pr_registry_free(pr_registry *r)
{
    if (!r)
        return;
    if (r->curl)
        curl_easy_cleanup(r->curl);
    curl_slist_free_all(r->headers);
    pr_json_block_free(r->jb);
    pr_json_extractor_free(r->x);
    free(r->url);
    free(r->userpwd);
    free(r->ca_file);
    free(r);
}

typedef struct pr__answer {
    char *buf;
    size_t len, cap;
} pr__answer;

static size_t pr__on_data(char *p, size_t size, size_t nmemb, void *opaque)
{
    pr__answer *a = opaque;
    size_t n = size * nmemb;
    if (a->len + n + 1 > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + n + 1)
            cap *= 2;
        char *b = cap <= PR__REG_MAX_ANSWER ? realloc(a->buf, cap) : NULL;
        if (!b)
            return 0; /* curl fails the transfer */
        a->buf = b;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, p, n);
    a->len += n;
    a->buf[a->len] = 0;
    return n;
}

/* A failed request: counted, remembered, and a backoff started. */
static int pr__failed(pr_registry *r, pr_registry_fail kind, char *errstr, size_t errstr_size,
                      const char *why)
{
    pr__count_fail(r, kind);
    r->st.failures++;
    r->st.down = true;
    snprintf(r->st.last_error, sizeof(r->st.last_error), "%s", why);
    r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : PR__REG_BACKOFF0_MS;
    if (r->backoff_ms > PR__REG_BACKOFF_MAX)
        r->backoff_ms = PR__REG_BACKOFF_MAX;
    r->retry_at_ns = pr_mono_ns() + (int64_t)r->backoff_ms * 1000000;
    return pr_seterr(errstr, errstr_size, PR_EAGAIN, "schema registry %s: %s", r->url, why);
}

/* A transfer that failed, by kind. */
static pr_registry_fail pr__curl_fail_kind(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        return PR_REG_FAIL_REFUSED;
    case CURLE_OPERATION_TIMEDOUT:
        return PR_REG_FAIL_TIMEOUT;
    default:
        return PR_REG_FAIL_OTHER;
    }
}

/* The "schema" and "schemaType" members of a 200 answer. */
static int pr__parse_answer(pr_registry *r, const pr__answer *a, char **text, char *type,
                            size_t type_size, char *errstr, size_t errstr_size)
{
    pr_json_block_reset(r->jb);
    pr_json_reject rej;
    if (!a->buf || pr_json_extract(r->x, r->jb, a->buf, a->len, &rej) != 0 ||
        r->jb->cols[0].present[0] != PR_JSON_PRESENT)
        return pr__failed(r, PR_REG_FAIL_OTHER, errstr, errstr_size,
                          "answer without a \"schema\" string");
    const pr_json_str *s = &r->jb->cols[0].str[0];
    if (!(*text = malloc((size_t)s->len + 1)))
        return pr_seterr(errstr, errstr_size, PR_ENOMEM, "schema_registry: out of memory");
    memcpy(*text, r->jb->arena + s->off, s->len);
    (*text)[s->len] = 0;
    snprintf(type, type_size, "AVRO");
    if (r->jb->cols[1].present[0] == PR_JSON_PRESENT) {
        const pr_json_str *t = &r->jb->cols[1].str[0];
        snprintf(type, type_size, "%.*s", (int)t->len, r->jb->arena + t->off);
    }
    return 0;
}

int pr_registry_fetch(pr_registry *r, uint32_t id, char **text, char *schema_type,
                      size_t schema_type_size, char *errstr, size_t errstr_size)
{
    *text = NULL;
    if (r->st.down && pr_mono_ns() < r->retry_at_ns)
        return pr_seterr(errstr, errstr_size, PR_EAGAIN, "schema registry %s: %s (retrying)",
                         r->url, r->st.last_error);
    char url[2048];
    snprintf(url, sizeof(url), "%s/schemas/ids/%u", r->url, id);
    pr__answer a = {0};
    CURL *c = r->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, pr__on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)r->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (r->headers)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, r->headers);
    if (r->userpwd) {
        curl_easy_setopt(c, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(c, CURLOPT_USERPWD, r->userpwd);
    }
    if (r->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, r->ca_file);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int rc;
    char why[160];
    if (cc != CURLE_OK) {
        snprintf(why, sizeof(why), "%s", curl_easy_strerror(cc));
        rc = pr__failed(r, pr__curl_fail_kind(cc), errstr, errstr_size, why);
    } else if (status == 404) {
        pr__count_fail(r, PR_REG_FAIL_404);
        r->st.not_found++;
        r->st.down = false;
        r->backoff_ms = 0;
        rc = pr_seterr(errstr, errstr_size, PR_EBADREC, "schema id %u: not found", id);
    } else if (status != 200) {
        snprintf(why, sizeof(why), "HTTP status %ld", status);
        rc = pr__failed(r, status >= 500 && status <= 599 ? PR_REG_FAIL_5XX : PR_REG_FAIL_OTHER,
                        errstr, errstr_size, why);
    } else if (!(rc = pr__parse_answer(r, &a, text, schema_type, schema_type_size, errstr,
                                       errstr_size))) {
        r->st.fetches++;
        if (r->tally)
            atomic_fetch_add_explicit(&r->tally->fetches, 1, memory_order_relaxed);
        r->st.down = false;
        r->backoff_ms = 0;
    }
    free(a.buf);
    return rc;
}

bool pr_registry_frame(const void *buf, size_t len, uint32_t *id, size_t *body)
{
    const uint8_t *p = buf;
    if (len < 5 || p[0] != 0)
        return false;
    *id = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    *body = 5;
    return true;
}

void pr_registry_get_stats(const pr_registry *r, pr_registry_stats *st)
{
    *st = r->st;
}
