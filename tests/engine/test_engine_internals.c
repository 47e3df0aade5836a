/*
 * test_engine_internals.c — the engine's internal building blocks that the
 * public tests only reach indirectly: the worker pool (every task runs
 * exactly once, for any thread count, many phases in a row), aligned
 * allocation, and the block slot layout written by pr_block_put_hex.
 */
#include "engine_test_util.h"

#include <stdatomic.h>

#include "engine_int.h"

typedef struct {
    atomic_int hits[1000];
    atomic_int bad_worker;
    int threads;
} pool_ctx;

static void pool_task(void *ctx, uint32_t task, int worker)
{
    pool_ctx *p = ctx;
    atomic_fetch_add(&p->hits[task], 1);
    if (worker < 0 || worker >= p->threads)
        atomic_fetch_add(&p->bad_worker, 1);
}

static void test_pool(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        pr__pool *pool = pr__pool_new(threads);
        assert_non_null(pool);
        assert_int_equal(pr__pool_threads(pool), threads);
        pool_ctx *c = calloc(1, sizeof(*c));
        c->threads = threads;
        for (int phase = 0; phase < 200; phase++) {
            uint32_t n = (uint32_t)(phase % 7 == 0 ? 0 : phase % 50 + 1);
            for (uint32_t i = 0; i < n; i++)
                atomic_store(&c->hits[i], 0);
            pr__pool_run(pool, n, pool_task, c);
            for (uint32_t i = 0; i < n; i++)
                assert_int_equal(atomic_load(&c->hits[i]), 1);
        }
        assert_int_equal(atomic_load(&c->bad_worker), 0);
        free(c);
        pr__pool_free(pool);
    }
}

static void test_aligned_and_blocks(void **state)
{
    (void)state;
    for (size_t n = 1; n < 5000; n = n * 3 + 1) {
        unsigned char *p = pr__zalloc_aligned(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(p[i], 0);
        pr__free_aligned(p);
    }
    pr_block *b = pr_block_new(2, 3, 100, true);
    assert_non_null(b);
    assert_int_equal(b->cap, 128);
    assert_int_equal((uintptr_t)b->sparse_hex % 64, 0);
    assert_non_null(b->offset);
    pr_block_put_hex(b, 2, 5, "a1", 2);
    assert_memory_equal(pr_block_hex(b, 2, 5), "00000000000000a1", 16);
    assert_false(pr_bit_test(b->sparse_missing + 2 * pr_bitmap_words(b->cap), 5));
    pr_block_put_hex(b, 2, 5, "", 0);
    assert_true(pr_bit_test(b->sparse_missing + 2 * pr_bitmap_words(b->cap), 5));
    pr_block_put_hex(b, 2, 5, "0123456789abcdef", 16);
    assert_memory_equal(pr_block_hex(b, 2, 5), "0123456789abcdef", 16);
    assert_false(pr_bit_test(b->sparse_missing + 2 * pr_bitmap_words(b->cap), 5));
    b->sparse_enc[1] = PR_SPARSE_U64;
    pr_bit_set(b->dense_missing, 3);
    b->rows = 9;
    pr_block_reset(b);
    assert_int_equal(b->rows, 0);
    assert_int_equal(b->sparse_enc[1], PR_SPARSE_HEX);
    assert_false(pr_bit_test(b->dense_missing, 3));
    pr_block_free(b);
    pr_block_free(NULL);

    pr_out *o = pr_out_new(2, 3, 70, 8);
    assert_non_null(o);
    assert_int_equal(o->cap, 128);
    assert_int_equal(o->sparse_width, 8);
    pr_out_free(o);
    assert_null(pr_out_new(2, 3, 70, 5));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_aligned_and_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
