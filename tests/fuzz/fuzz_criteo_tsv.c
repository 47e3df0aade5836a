/*
 * fuzz_criteo_tsv.c — libFuzzer target for the Criteo TSV decoder
 * (ingest/criteo_tsv.c, the message path in ingest/proto_decode.c).
 *
 * Input: one flags byte, then TSV text.
 *   bit 0: fused Hex2Int (ctx.parse_hex)
 *   bit 1: small shape (label, 2 dense, 3 sparse) instead of Criteo's 13 + 26
 *   bit 2: no label column
 *   bit 3: blocks of 64 rows (the PR_EFULL / resume paths) instead of 1024
 * Differential: the buffer decoder (pr_decode_criteo_lines, whose fast path
 * may look past a line's end up to the buffer's end) against the one-line
 * decoder (pr_decode_criteo_line) on an exact-size copy of each line: same
 * rows, same values and the same rejects (reason, record number, detail).
 * Then the Kafka message path (pr_decode_message, criteo_tsv) on the same
 * bytes, resumed through full blocks, must account for every record.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "pr_ingest.h"
#include "pr_log.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    pr_log_set_level(PR_LOG_ERROR);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 65536)
        return 0;
    const unsigned flags = data[0];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;

    pr_pipeline_spec spec;
    pr_pipeline_spec_default(&spec);
    if (flags & 2) {
        spec.n_dense = 2;
        spec.n_sparse = 3;
    }
    if (flags & 4)
        spec.has_label = false;
    const uint32_t cap = (flags & 8) ? 64 : 1024;

    fuzz_rejects ra = {0}, rb = {0};
    pr_decode_ctx ca = {.spec = &spec,
                        .on_reject = fuzz_on_reject,
                        .opaque = &ra,
                        .partition = 1,
                        .offset = 10,
                        .default_event_time_ms = 5,
                        .parse_hex = flags & 1};
    pr_decode_ctx cb = ca;
    cb.opaque = &rb;
    const unsigned slot = (flags >> 1) & 7;
    pr_block *a = fuzz_block(2 * slot, spec.n_dense, spec.n_sparse, cap);
    pr_block *b = fuzz_block(2 * slot + 1, spec.n_dense, spec.n_sparse, cap);

    /* 1. buffer decoder vs one line at a time. */
    const char *p = text, *end = text + len;
    int64_t recno = 1;
    while (p < end) {
        int64_t lines = 0;
        size_t used = pr_decode_criteo_lines(&ca, a, p, (size_t)(end - p), true, recno, &lines);
        FUZZ_CHECK(used <= (size_t)(end - p));
        const char *q = p;
        for (int64_t i = 0; i < lines; i++) {
            const char *nl = memchr(q, '\n', (size_t)(end - q));
            size_t ll = nl ? (size_t)(nl - q) : (size_t)(end - q);
            char *copy = malloc(ll ? ll : 1);
            memcpy(copy, q, ll);
            uint32_t before = b->rows;
            int rc = pr_decode_criteo_line(&cb, b, copy, ll, recno + i);
            free(copy);
            FUZZ_CHECK(rc == 0 || rc == 1);
            FUZZ_CHECK(b->rows == before + (uint32_t)rc);
            q = nl ? nl + 1 : end;
        }
        FUZZ_CHECK(q == p + used);
        fuzz_compare_blocks(a, b);
        fuzz_compare_rejects(&ra, &rb);
        FUZZ_CHECK((int64_t)a->rows + ra.n >= 0);
        ra.n = rb.n = 0;
        recno += lines;
        p += used;
        if (a->rows == a->cap) {
            pr_block_reset(a);
            pr_block_reset(b);
        } else {
            FUZZ_CHECK(p == end); /* eof: everything decodes while there is room */
        }
    }

    /* 2. the Kafka message path, resumed through full blocks. */
    pr_block_reset(a);
    ra.n = 0;
    uint32_t next = 0;
    int64_t rows = 0;
    int rounds = 0;
    for (;;) {
        int rc = pr_decode_message(PR_MSG_CRITEO_TSV, &ca, a, text, len, &next, NULL);
        FUZZ_CHECK(rc >= 0 || rc == PR_EFULL);
        rows += a->rows;
        if (rc != PR_EFULL)
            break;
        FUZZ_CHECK(a->rows > 0 && ++rounds < 100000);
        pr_block_reset(a);
    }
    int count = pr_message_record_count(PR_MSG_CRITEO_TSV, text, len, NULL);
    FUZZ_CHECK(count >= 0 && rows <= count);

    return 0;
}
