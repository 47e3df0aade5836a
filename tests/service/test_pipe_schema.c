/*
 * test_pipe_schema.c — dropping rows from a declared schema's jagged block
 * (service/pipe_schema.c, used when partitions are revoked or a checkpoint
 * already holds rows): the rows kept equal a block decoded from the kept
 * records alone, elements, missing bits, feature health's absent bitmaps,
 * side values and metadata included;
 * also with shared vocabularies (several features' keys in one column).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pipe.h"
#include "pr_config.h"

static const char *const yaml =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      labels: [ { name: y, path: y } ]\n"
    "      dense: [ { name: d, path: d } ]\n"
    "      sparse:\n"
    "        - { name: u, path: u, ops: [vocab] }\n"
    "        - { name: h, path: h, list: { max_len: 5 }, ops: [vocab] }\n"
    "        - { name: t, path: t, list: { max_len: 3 }, ops: [ { hash: 50 } ] }\n";

/* The same with shared vocabularies: the history's last 2 items in h's
 * column, the user again in u's (elements interleaved row by row). */
static const char *const yaml_tables =
    "pipelines:\n"
    "  - name: t\n"
    "    source: { format: json }\n"
    "    schema:\n"
    "      labels: [ { name: y, path: y } ]\n"
    "      dense: [ { name: d, path: d } ]\n"
    "      sparse:\n"
    "        - { name: u, path: u, ops: [vocab] }\n"
    "        - { name: h, path: h, list: { max_len: 5 }, ops: [vocab] }\n"
    "        - { name: hl, path: h, list: { max_len: 2, keep: last }, ops: [vocab], table: h }\n"
    "        - { name: t, path: t, list: { max_len: 3 }, ops: [ { hash: 50 } ] }\n"
    "        - { name: u2, path: u, ops: [vocab], table: u }\n";

static bool drop_odd_partition(void *opaque, const pr_block *b, uint32_t r)
{
    (void)opaque;
    return b->partition[r] % 2 == 1;
}

/* Record i: partition i % 3, a user missing every 4th, i % 6 history items. */
static int make_doc(uint32_t i, char *buf, size_t cap)
{
    int n = snprintf(buf, cap, "{\"y\":%u,\"d\":%u.5,", i % 2, i);
    if (i % 4)
        n += snprintf(buf + n, cap - n, "\"u\":\"u%u\",", i % 7);
    n += snprintf(buf + n, cap - n, "\"h\":[");
    for (uint32_t k = 0; k < i % 6; k++)
        n += snprintf(buf + n, cap - n, "%s%u", k ? "," : "", i * 10 + k);
    n += snprintf(buf + n, cap - n, "],\"t\":[");
    for (uint32_t k = 0; k < i % 4; k++)
        n += snprintf(buf + n, cap - n, "%s\"t%u\"", k ? "," : "", k + i);
    return n + snprintf(buf + n, cap - n, "]}");
}

static void fill(pr_decode_ctx *ctx, pr_block *b, bool kept_only)
{
    char doc[512];
    for (uint32_t i = 0; i < 60; i++) {
        int part = (int)(i % 3);
        if (kept_only && part % 2 == 1)
            continue;
        ctx->partition = part;
        int n = make_doc(i, doc, sizeof(doc));
        assert_int_equal(pr_decode_json_line(ctx, b, doc, (size_t)n, i), 1);
    }
}

static void run_drop_rows(const char *yaml)
{
    char err[512];
    pr_config *cfg = NULL;
    if (pr_config_load_string(yaml, strlen(yaml), "t.yaml", &cfg, err, sizeof(err)))
        fail_msg("%s", err);
    const pr_feature_schema *fs = &cfg->pipelines[0].features;
    pr_json_decoder *d = pr_json_decoder_new(fs, err, sizeof(err));
    assert_non_null(d);
    pr_decode_ctx ctx = {.json = d};
    pr_block *all = pr_feature_block_new(fs, 64, true);
    pr_block *want = pr_feature_block_new(fs, 64, true);
    fill(&ctx, all, false);
    fill(&ctx, want, true);
    pr__schema_drop_rows(all, drop_odd_partition, NULL);

    assert_int_equal(all->rows, want->rows);
    pr_fside *a = all->side, *w = want->side;
    assert_memory_equal(a->labels, w->labels, want->rows * sizeof(float));
    assert_memory_equal(a->dense, w->dense, want->rows * sizeof(float));
    assert_memory_equal(all->offset, want->offset, want->rows * sizeof(int64_t));
    assert_memory_equal(all->partition, want->partition, want->rows * sizeof(int32_t));
    for (uint16_t f = 0; f < w->n_feat; f++) {
        assert_memory_equal(pr_fside_lengths(a, f), pr_fside_lengths(w, f),
                            all->cap * sizeof(int32_t)); /* rows dropped: lengths 0 */
        int c = w->vocab_col[f];
        if (c < 0) {
            assert_int_equal(a->n_values[f], w->n_values[f]);
            assert_memory_equal(a->values[f], w->values[f], w->n_values[f] * sizeof(int64_t));
            continue;
        }
        assert_int_equal(all->col_rows[c], want->col_rows[c]);
        assert_memory_equal(all->sparse_u64 + (size_t)c * all->scap,
                            want->sparse_u64 + (size_t)c * want->scap,
                            want->col_rows[c] * sizeof(uint64_t));
        size_t words = pr_bitmap_words(all->scap);
        assert_memory_equal(all->sparse_missing + (size_t)c * words,
                            want->sparse_missing + (size_t)c * words, words * 8);
    }
    /* feature health's absent bitmaps: moved with their rows, cleared past them */
    size_t aw = pr_bitmap_words(all->cap);
    assert_int_equal(a->n_schema, w->n_schema);
    assert_memory_equal(a->absent, w->absent, a->n_schema * aw * 8);
    uint64_t any = 0;
    for (size_t k = 0; k < a->n_schema * aw; k++)
        any |= w->absent[k];
    assert_true(any != 0); /* a missing user, empty lists: something to move */
    pr_block_free(all);
    pr_block_free(want);
    pr_json_decoder_free(d);
    pr_config_free(cfg);
}

static void test_drop_rows(void **state)
{
    (void)state;
    run_drop_rows(yaml);
}

static void test_drop_rows_shared_tables(void **state)
{
    (void)state;
    run_drop_rows(yaml_tables);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_drop_rows),
        cmocka_unit_test(test_drop_rows_shared_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
