/*
 * cfgmap.c — defaults from configuration key tables (contract: pr_cfgmap.h).
 *
 * Only what a component needs on its own lives here: reading a default's
 * text into its field. Walking YAML, error paths and the docs reference are
 * the loader's business (config/pr_config.c), which reads the same tables.
 */
#include "pr_cfgmap.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pr_error.h"
#include "pr_fs.h"

/* ---- property values kept elsewhere: ${env:NAME}, ${file:PATH} */

#define PR__REF_FILE_MAX (1u << 20)

static int pr__ref_env(const char *name, char **out, char *errstr, size_t errstr_size)
{
    const char *v = getenv(name);
    if (!v)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "environment variable %s is not set (the value is ${env:%s})", name, name);
    *out = strdup(v);
    return *out ? 0 : pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
}

static int pr__ref_file(const char *path, char **out, char *errstr, size_t errstr_size)
{
    char err[600];
    int rc = pr_read_text_file(path, PR__REF_FILE_MAX, out, err, sizeof(err));
    return rc ? pr_seterr(errstr, errstr_size, rc, "cannot read the value's file (${file:%s}): %s",
                          path, err)
              : 0;
}

static const struct {
    const char *prefix;
    int (*get)(const char *arg, char **out, char *errstr, size_t errstr_size);
} pr__refs[] = {
    {"${env:", pr__ref_env},
    {"${file:", pr__ref_file},
};

/* The table entry of reference `raw`, or -1 when malformed; *arg its
 * argument (malloc'd). -2 when raw is not a reference at all. */
static int pr__ref_parse(const char *raw, char **arg)
{
    *arg = NULL;
    if (!strncmp(raw, "$${", 3) || strncmp(raw, "${", 2))
        return -2;
    size_t len = strlen(raw);
    for (size_t i = 0; i < sizeof(pr__refs) / sizeof(pr__refs[0]); i++) {
        size_t pl = strlen(pr__refs[i].prefix);
        if (strncmp(raw, pr__refs[i].prefix, pl))
            continue;
        if (len <= pl + 1 || raw[len - 1] != '}')
            return -1;
        if (!(*arg = strndup(raw + pl, len - pl - 1)))
            return -1;
        return (int)i;
    }
    return -1;
}

/* Never the value itself in the message: it may be a literal secret. */
static int pr__ref_malformed(char *errstr, size_t errstr_size)
{
    return pr_seterr(errstr, errstr_size, PR_EINVAL,
                     "the value begins with ${ but is not ${env:NAME} or ${file:PATH} (the whole "
                     "value; write $${ for a value that begins with ${)");
}

int pr_kv_ref_check(const char *raw, char *errstr, size_t errstr_size)
{
    char *arg;
    int i = pr__ref_parse(raw, &arg);
    free(arg);
    return i == -1 ? pr__ref_malformed(errstr, errstr_size) : 0;
}

int pr_kv_ref_resolve(const char *raw, char **out, char *errstr, size_t errstr_size)
{
    char *arg;
    *out = NULL;
    int i = pr__ref_parse(raw, &arg);
    if (i == -1)
        return pr__ref_malformed(errstr, errstr_size);
    if (i == -2) {
        *out = strdup(raw + (raw[0] == '$' && raw[1] == '$' && raw[2] == '{'));
        return *out ? 0 : pr_seterr(errstr, errstr_size, PR_ENOMEM, "out of memory");
    }
    int rc = pr__refs[i].get(arg, out, errstr, errstr_size);
    free(arg);
    return rc;
}

const char *pr_kv_get(const pr_kv_list *l, const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; l && i < l->n; i++)
        if (strcmp(l->items[i].key, key) == 0)
            v = l->items[i].value;
    return v;
}

int pr_cfgmap_name_index(const char *const *names, const char *s)
{
    for (int i = 0; names && s && names[i]; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

int pr_cfgmap_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t mul;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"KiB", 1ull << 10},
        {"MiB", 1ull << 20},
        {"GiB", 1ull << 30},
        {"TiB", 1ull << 40},
        {"KB", 1000ull},
        {"MB", 1000000ull},
        {"GB", 1000000000ull},
        {"TB", 1000000000000ull},
    };
    if (!s || !isdigit((unsigned char)s[0]))
        return PR_EINVAL;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return PR_EINVAL;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v > UINT64_MAX / units[i].mul)
                return PR_EINVAL;
            *out = (uint64_t)v * units[i].mul;
            return 0;
        }
    }
    return PR_EINVAL;
}

bool pr_cfgmap_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", NULL};
    static const char *const no[] = {"false", "no", "off", NULL};
    for (int i = 0; yes[i]; i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return true;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return true;
        }
    }
    return false;
}

static uint64_t pr__load_int(const void *p, int width)
{
    switch (width) {
    case 1:
        return *(const uint8_t *)p;
    case 2:
        return *(const uint16_t *)p;
    case 4:
        return *(const uint32_t *)p;
    default:
        return *(const uint64_t *)p;
    }
}

void pr_cfgmap_store_int(void *p, int width, uint64_t v)
{
    switch (width) {
    case 1:
        *(uint8_t *)p = (uint8_t)v;
        break;
    case 2:
        *(uint16_t *)p = (uint16_t)v;
        break;
    case 4:
        *(uint32_t *)p = (uint32_t)v;
        break;
    default:
        *(uint64_t *)p = v;
        break;
    }
}

/* Is the field of e zero (or NULL)? Only for the types default_zero fills. */
static bool pr__field_is_zero(const pr_cfgmap_entry *e, const void *p)
{
    switch (e->type) {
    case PR_CFG_INT:
        return pr__load_int(p, e->width) == 0;
    case PR_CFG_SIZE:
        return *(const uint64_t *)p == 0;
    case PR_CFG_STR:
    case PR_CFG_HOSTPORT:
        return *(const char *const *)p == NULL;
    default:
        return false;
    }
}

/* Parse e->def into the field. Lists and key/value maps have no scalar default. */
static int pr__apply_default(const pr_cfgmap_entry *e, void *p)
{
    const char *d = e->def;
    switch (e->type) {
    case PR_CFG_BOOL:
        return pr_cfgmap_parse_bool(d, (bool *)p) ? 0 : PR_EINVAL;
    case PR_CFG_INT: {
        char *end;
        errno = 0;
        uint64_t v = d[0] == '-' ? (uint64_t)strtoll(d, &end, 10) : strtoull(d, &end, 10);
        if (errno || end == d || *end)
            return PR_EINVAL;
        pr_cfgmap_store_int(p, e->width, v);
        return 0;
    }
    case PR_CFG_STR:
    case PR_CFG_HOSTPORT:
        *(const char **)p = d;
        return 0;
    case PR_CFG_ENUM: {
        int v = pr_cfgmap_name_index(e->names, d);
        if (v < 0)
            return PR_EINVAL;
        *(int *)p = v;
        return 0;
    }
    case PR_CFG_SIZE:
        return pr_cfgmap_parse_size(d, (uint64_t *)p);
    case PR_CFG_STRLIST:
    case PR_CFG_KV:
        return 0;
    }
    return PR_EINVAL;
}

static int pr__set_defaults(const pr_cfgmap *m, void *base, bool only_zero)
{
    int rc = 0;
    for (size_t i = 0; i < m->n; i++) {
        const pr_cfgmap_entry *e = &m->entries[i];
        void *p = (char *)base + e->off;
        if (!e->def || (only_zero && !pr__field_is_zero(e, p)))
            continue;
        int r = pr__apply_default(e, p);
        if (r < 0)
            rc = r;
    }
    return rc;
}

int pr_cfgmap_set_defaults(const pr_cfgmap *m, void *base)
{
    return pr__set_defaults(m, base, false);
}

int pr_cfgmap_default_zero(const pr_cfgmap *m, void *base)
{
    return pr__set_defaults(m, base, true);
}
