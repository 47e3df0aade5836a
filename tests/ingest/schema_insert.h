/*
 * schema_insert.h — a test helper shared by test_avro.c and test_pbuser.c:
 * a config's text with lines (a schema.filter, a schema.downsample)
 * inserted after its "    schema:" line. Include after <cmocka.h>.
 */
#ifndef PR_TESTS_SCHEMA_INSERT_H
#define PR_TESTS_SCHEMA_INSERT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* yaml (malloc'd, freed here) with `lines` after "    schema:\n"; lines NULL:
 * yaml as it is. */
static inline char *schema_insert(char *yaml, const char *lines)
{
    if (!lines)
        return yaml;
    const char *at = strstr(yaml, "    schema:\n");
    assert_non_null(at);
    at += strlen("    schema:\n");
    size_t n = strlen(yaml) + strlen(lines) + 1;
    char *out = malloc(n);
    assert_non_null(out);
    snprintf(out, n, "%.*s%s%s", (int)(at - yaml), yaml, lines, at);
    free(yaml);
    return out;
}

#endif
