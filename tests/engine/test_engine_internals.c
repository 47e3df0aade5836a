/*
 * test_engine_internals.c — the engine's internal building blocks that the
 * public tests only reach indirectly: the worker pool (every task runs
 * exactly once, for any thread count, many phases in a row; a stress of
 * thousands of runs with sleeping tasks under a watchdog for lost wake-ups), aligned
 * allocation, and the block slot layout written by pr_block_put_hex.
 */
#include "engine_test_util.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

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

/* Stress for the pool's sleep/wake paths: thousands of tiny runs with 2-4
 * workers. Some tasks yield or sleep (so the caller's spin runs out and it
 * sleeps on `done`), and now and then the caller pauses between runs (so the
 * workers' spin runs out and they sleep on `gen`). A lost wake-up shows as a
 * run that never returns: a watchdog thread aborts the test after a deadline
 * far beyond the expected running time instead of letting it hang. */
typedef struct {
    atomic_int hits[64];
    atomic_int bad_worker;
    int threads;
    uint32_t run;
} stress_ctx;

static uint32_t stress_hash(uint32_t a, uint32_t b)
{
    uint32_t h = a * 0x9e3779b1u ^ (b + 0x7f4a7c15u) * 0x85ebca6bu;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    return h ^ (h >> 13);
}

static void nap_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void stress_task(void *ctx, uint32_t task, int worker)
{
    stress_ctx *c = ctx;
    uint32_t h = stress_hash(c->run, task);
    if ((h & 31) == 0)
        sched_yield();
    else if ((h & 255) == 1)
        nap_us(20 + (long)(h >> 24)); /* 20-275 us: outlasts the caller's spin now and then */
    else if ((h & 4095) == 2)
        nap_us(2000);
    atomic_fetch_add(&c->hits[task], 1);
    if (worker < 0 || worker >= c->threads)
        atomic_fetch_add(&c->bad_worker, 1);
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    const char *what;
} watchdog;

static void *watchdog_main(void *arg)
{
    watchdog *w = arg;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60; /* the whole stress takes about a second, a few under ASan */
    pthread_mutex_lock(&w->mu);
    while (!w->done)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) == ETIMEDOUT && !w->done) {
            fprintf(stderr, "pool stress: %s did not finish in 60 s: lost wake-up?\n", w->what);
            abort();
        }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void test_pool_stress(void **state)
{
    (void)state;
    watchdog w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, "the pool stress"};
    pthread_t wt;
    assert_int_equal(pthread_create(&wt, NULL, watchdog_main, &w), 0);
    for (int threads = 2; threads <= 4; threads++) {
        pr__pool *pool = pr__pool_new(threads);
        assert_non_null(pool);
        stress_ctx *c = calloc(1, sizeof(*c));
        c->threads = threads;
        for (uint32_t run = 0; run < 6000; run++) {
            uint32_t h = stress_hash(run, 0xffffu + (uint32_t)threads);
            uint32_t n = 2 + h % 39;
            c->run = run;
            for (uint32_t i = 0; i < n; i++)
                atomic_store(&c->hits[i], 0);
            pr__pool_run(pool, n, stress_task, c);
            for (uint32_t i = 0; i < n; i++)
                if (atomic_load(&c->hits[i]) != 1)
                    fail_msg("threads %d run %u: task %u ran %d times", threads, run, i,
                             atomic_load(&c->hits[i]));
            if ((h >> 8 & 63) == 0)
                nap_us(300); /* let the workers fall asleep on the futex */
        }
        assert_int_equal(atomic_load(&c->bad_worker), 0);
        free(c);
        pr__pool_free(pool);
    }
    pthread_mutex_lock(&w.mu);
    w.done = true;
    pthread_cond_signal(&w.cv);
    pthread_mutex_unlock(&w.mu);
    pthread_join(wt, NULL);
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
        cmocka_unit_test(test_pool_stress),
        cmocka_unit_test(test_aligned_and_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
