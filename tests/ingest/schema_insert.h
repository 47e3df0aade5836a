/*
 * schema_insert.h — a test helper shared by test_avro.c and test_pbuser.c:
 * a config's text with lines inserted after its "    schema:" line (a
 * schema.filter, a schema.downsample) or another (labels and dense features
 * added to a list). Include after <cmocka.h>.
 */
#ifndef PR_TESTS_SCHEMA_INSERT_H
#define PR_TESTS_SCHEMA_INSERT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* yaml (malloc'd, freed here) with `lines` after its first line `anchor`
 * (e.g. "      labels:\n"); lines NULL: yaml as it is. */
static inline char *schema_insert_at(char *yaml, const char *anchor, const char *lines)
{
    if (!lines)
        return yaml;
    const char *at = strstr(yaml, anchor);
    assert_non_null(at);
    at += strlen(anchor);
    size_t n = strlen(yaml) + strlen(lines) + 1;
    char *out = malloc(n);
    assert_non_null(out);
    snprintf(out, n, "%.*s%s%s", (int)(at - yaml), yaml, lines, at);
    free(yaml);
    return out;
}

/* yaml with `lines` after "    schema:\n" (a filter, a downsample). */
static inline char *schema_insert(char *yaml, const char *lines)
{
    return schema_insert_at(yaml, "    schema:\n", lines);
}

#endif
