/*
 * fuzz_util.h — helpers shared by the fuzz targets: a reject log, a block
 * comparison for differential targets, and FUZZ_CHECK, which aborts (a
 * crash libFuzzer reports, with the input saved) when an invariant fails.
 */
#ifndef PR_FUZZ_UTIL_H
#define PR_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_engine.h"

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define FUZZ_MAX_REJ 256
typedef struct fuzz_rejects {
    int n;
    int reason[FUZZ_MAX_REJ];
    int64_t recno[FUZZ_MAX_REJ];
    char detail[FUZZ_MAX_REJ][200];
} fuzz_rejects;

static inline void fuzz_on_reject(void *opaque, int reason, const char *detail, const char *rec,
                                  size_t len, int64_t recno)
{
    fuzz_rejects *l = opaque;
    FUZZ_CHECK(reason > 0 && detail != NULL);
    /* The record must be readable in full (ASan checks the bytes). */
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < len; i++)
        sink ^= (uint8_t)rec[i];
    (void)sink;
    if (l->n >= FUZZ_MAX_REJ)
        return;
    l->reason[l->n] = reason;
    l->recno[l->n] = recno;
    snprintf(l->detail[l->n], sizeof(l->detail[0]), "%s", detail);
    l->n++;
}

static inline void fuzz_compare_rejects(const fuzz_rejects *x, const fuzz_rejects *y)
{
    FUZZ_CHECK(x->n == y->n);
    for (int i = 0; i < x->n; i++) {
        FUZZ_CHECK(x->reason[i] == y->reason[i]);
        FUZZ_CHECK(x->recno[i] == y->recno[i]);
        FUZZ_CHECK(!strcmp(x->detail[i], y->detail[i]));
    }
}

/* Same rows, values, missing bits and encodings; nothing set past rows. */
static inline void fuzz_compare_blocks(const pr_block *x, const pr_block *y)
{
    FUZZ_CHECK(x->rows == y->rows && x->cap == y->cap);
    size_t words = pr_bitmap_words(x->cap);
    for (uint32_t c = 0; c < x->n_sparse && x->rows; c++)
        FUZZ_CHECK(x->sparse_enc[c] == y->sparse_enc[c]);
    for (uint32_t r = 0; r < x->rows; r++) {
        FUZZ_CHECK(x->labels[r] == y->labels[r]);
        if (x->offset && y->offset) {
            FUZZ_CHECK(x->partition[r] == y->partition[r]);
            FUZZ_CHECK(x->offset[r] == y->offset[r]);
            FUZZ_CHECK(x->event_time_ms[r] == y->event_time_ms[r]);
        }
        for (uint32_t c = 0; c < x->n_dense; c++) {
            size_t i = (size_t)c * x->cap + r;
            FUZZ_CHECK(!memcmp(&x->dense[i], &y->dense[i], sizeof(double)));
            FUZZ_CHECK(pr_bit_test(x->dense_missing + c * words, r) ==
                       pr_bit_test(y->dense_missing + c * words, r));
        }
        for (uint32_t c = 0; c < x->n_sparse; c++) {
            size_t i = (size_t)c * x->cap + r;
            if (x->sparse_enc[c] == PR_SPARSE_U64)
                FUZZ_CHECK(x->sparse_u64[i] == y->sparse_u64[i]);
            else
                FUZZ_CHECK(!memcmp(x->sparse_hex + i * PR_HEX_SLOT, y->sparse_hex + i * PR_HEX_SLOT,
                                   PR_HEX_SLOT));
            FUZZ_CHECK(pr_bit_test(x->sparse_missing + c * words, r) ==
                       pr_bit_test(y->sparse_missing + c * words, r));
        }
    }
    /* A rejected record could only have left bits in the next row. */
    for (uint32_t r = x->rows; r < x->cap && r < x->rows + 1; r++) {
        for (uint32_t c = 0; c < x->n_dense; c++)
            FUZZ_CHECK(!pr_bit_test(x->dense_missing + c * words, r) &&
                       !pr_bit_test(y->dense_missing + c * words, r));
        for (uint32_t c = 0; c < x->n_sparse; c++)
            FUZZ_CHECK(!pr_bit_test(x->sparse_missing + c * words, r) &&
                       !pr_bit_test(y->sparse_missing + c * words, r));
    }
}

/* Blocks are cached per slot (allocating a 1024-row Criteo block per input
 * would dominate the run time): the slot's block, emptied, with this shape. */
#define FUZZ_BLOCK_SLOTS 32
static inline pr_block *fuzz_block(unsigned slot, uint16_t n_dense, uint16_t n_sparse, uint32_t cap)
{
    static pr_block *cache[FUZZ_BLOCK_SLOTS];
    FUZZ_CHECK(slot < FUZZ_BLOCK_SLOTS);
    pr_block *b = cache[slot];
    if (b && (b->n_dense != n_dense || b->n_sparse != n_sparse || b->cap != cap)) {
        pr_block_free(b);
        b = NULL;
    }
    if (!b)
        b = cache[slot] = pr_block_new(n_dense, n_sparse, cap, true);
    FUZZ_CHECK(b != NULL);
    pr_block_reset(b);
    return b;
}

#endif
