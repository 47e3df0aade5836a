/*
 * test_vocablog_ahead.c — the vocab log's look-ahead (pr_vocablog_propose_ahead)
 * keeps first-appearance order, on a real log (the test broker), driven the
 * way service/pipeline.c drives it: while the worker's block is held, the
 * rows of the next block from `ahead_rows` on are proposed ahead, and
 * `ahead_rows` moves to the block's end only when the call took the rows.
 *
 * Regression for the race test_worker_handoff's vocab_log round hit under
 * CPU load ("sparse differ from the offline output"): a block that waits
 * for its own look-ahead records (proposed while the block before it
 * waited) has nothing pending in the log yet, so a look-ahead for the block
 * after it cannot go out then (its values would precede the waiting block's
 * remaining ones). The call used to answer 0 without proposing anything,
 * the driver took those rows as proposed, and the next look-ahead started
 * after them: later rows' values reached the log first and got the lower
 * indices. Now it answers PR_EAGAIN and the driver keeps its position.
 *
 * The interleaving is made deterministic with the broker taken down (the
 * look-ahead record of block B cannot be delivered, so B's resolve must
 * wait for it, with nothing of its own pending, exactly when block C's
 * look-ahead is asked for) and with the reader holding back B's own record
 * (pr__vocablog_hold_from), so that B still waits when C's later rows go
 * ahead.
 */
#include "engine_test_util.h"

#include <time.h>

#include "pr_ingest.h"
#include "pr_vocab.h"
#include "vocab_int.h"

#define VA_ROWS 128

typedef struct {
    pr_mock_broker *mb;
    pr_engine *e;
    pr_vocablog *vl;
    pr_vocablog_cfg cfg;
    pr_kv props[1];
} va_env;

static void va_open(va_env *v)
{
    char err[512] = "";
    memset(v, 0, sizeof(*v));
    v->mb = pr_mock_broker_start(1, "vl", err, sizeof(err));
    if (!v->mb)
        fail_msg("broker: %s", err);
    pr_pipeline_spec s;
    tu_spec(&s, 1, 1, PR_VOCAB_DEFAULT, 100000, true, true);
    v->e = tu_engine(&s, "cpu", 1);
    v->props[0] = (pr_kv){"bootstrap.servers", pr_mock_broker_bootstrap(v->mb)};
    v->cfg = (pr_vocablog_cfg){.enabled = true,
                               .topic = "vl",
                               .properties = {v->props, 1},
                               .startup_timeout_ms = 30000,
                               .usage_interval_ms = 1000};
    pr_vocablog_opts o = {
        .cfg = &v->cfg, .pipeline = "p", .replica = "r1", .epoch = 1, .eng = v->e};
    if (pr_vocablog_new(&o, &v->vl, err, sizeof(err)))
        fail_msg("pr_vocablog_new: %s", err);
}

static void va_close(va_env *v)
{
    pr_vocablog_free(v->vl);
    pr_engine_free(v->e);
    pr_mock_broker_stop(v->mb);
}

static void va_down(va_env *v, bool down)
{
    char err[256] = "";
    if (pr_mock_broker_set_down(v->mb, down, err, sizeof(err)))
        fail_msg("broker down=%d: %s", down, err);
}

/* Rows [from, to) of column 0 hold `val`; the block then has `to` rows. */
static void va_fill(pr_block *b, uint32_t from, uint32_t to, uint64_t val)
{
    for (uint32_t r = from; r < to; r++) {
        tu_put_hex_u64(b, 0, r, val);
        b->partition[r] = 0;
        b->offset[r] = r;
    }
    b->rows = to;
}

static int64_t va_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* pipeline.c's look-ahead step: rows [*ahead_rows, rows) of `next`. */
static void va_ahead(va_env *v, const pr_block *next, uint32_t *ahead_rows)
{
    char err[512] = "";
    int rc = pr_vocablog_propose_ahead(v->vl, next, *ahead_rows, err, sizeof(err));
    if (rc == PR_EAGAIN)
        return; /* not taken: asked again at the next held turn */
    if (rc)
        fail_msg("propose_ahead: %s", err);
    *ahead_rows = next->rows;
}

/* Resolve `b` until it is ready; while it waits, look ahead into `next`
 * (NULL: none), as the pipeline thread does between the held turns. */
static void va_resolve(va_env *v, const pr_block *b, const pr_block *next, uint32_t *ahead_rows)
{
    char err[512] = "";
    int64_t deadline = va_now_ms() + 30000;
    for (;;) {
        int rc = pr_vocablog_resolve(v->vl, b, 50, err, sizeof(err));
        if (rc == 0)
            return;
        if (rc != PR_EAGAIN)
            fail_msg("resolve: %s", err);
        if (va_now_ms() > deadline)
            fail_msg("resolve: still waiting after 30 s");
        if (next)
            va_ahead(v, next, ahead_rows);
    }
}

/* The index of `val` in column 0, or -1. */
static int64_t va_find(const pr_engine *e, uint64_t val)
{
    tu_vocab t = tu_vocab_get(e, 0);
    int64_t idx = -1;
    for (size_t i = 0; i < t.n; i++)
        if (t.e[i].value == val)
            idx = t.e[i].index;
    free(t.e);
    return idx;
}

static int64_t va_index(const pr_engine *e, uint64_t val)
{
    int64_t idx = va_find(e, val);
    if (idx < 0)
        fail_msg("value %llx has no index", (unsigned long long)val);
    return idx;
}

/* Nothing of a waiting block is in the log: a look-ahead cannot go out,
 * and says so (PR_EAGAIN: the rows were not taken). */
static void test_ahead_needs_a_waiting_block(void **state)
{
    (void)state;
    char err[512] = "";
    va_env v;
    va_open(&v);
    pr_block *C = pr_block_new(1, 1, VA_ROWS, true);
    assert_non_null(C);
    va_fill(C, 0, 64, 0x31);
    assert_int_equal(pr_vocablog_propose_ahead(v.vl, C, 0, err, sizeof(err)), PR_EAGAIN);
    pr_block_free(C);
    va_close(&v);
}

/* Blocks A (value a), B (b1 in rows 0..63, proposed ahead while A waits;
 * b2 in rows 64..127, read after that), C (c1 in rows 0..63, c2 in rows
 * 64..127, read while B waits): the log must number a, b1, b2, c1, c2 in
 * that order, as one process numbers them in first-appearance order. */
static void test_ahead_keeps_first_appearance_order(void **state)
{
    (void)state;
    const uint64_t a = 0x11, b1 = 0x21, b2 = 0x22, c1 = 0x31, c2 = 0x32;
    char err[512] = "";
    va_env v;
    va_open(&v);
    pr_block *A = pr_block_new(1, 1, VA_ROWS, true), *B = pr_block_new(1, 1, VA_ROWS, true),
             *C = pr_block_new(1, 1, VA_ROWS, true);
    assert_non_null(A);
    assert_non_null(B);
    assert_non_null(C);
    uint32_t ahead_b = 0, ahead_c = 0;

    /* A proposes and waits; its record reaches the log and is applied, but
     * A is not resolved yet (still pending), so B may look ahead. */
    va_fill(A, 0, 64, a);
    va_down(&v, true); /* so that A surely waits */
    assert_int_equal(pr_vocablog_resolve(v.vl, A, 0, err, sizeof(err)), PR_EAGAIN);
    va_down(&v, false);
    int64_t t0 = va_now_ms();
    /* Until it is applied, and its delivery report has surely arrived. */
    while (va_find(v.e, a) < 0 || va_now_ms() - t0 < 500) {
        assert_int_equal(pr_vocablog_poll(v.vl, 20, err, sizeof(err)), 0);
        if (va_now_ms() - t0 > 30000)
            fail_msg("A's proposal never came back from the log");
    }

    /* Broker down: B's look-ahead record stays with the producer. */
    va_down(&v, true);
    va_fill(B, 0, 64, b1);
    va_ahead(&v, B, &ahead_b);
    assert_int_equal(ahead_b, 64);
    va_fill(B, 64, VA_ROWS, b2); /* read after the look-ahead */
    /* A's record was delivered and applied before the outage: ready. */
    assert_int_equal(pr_vocablog_resolve(v.vl, A, 0, err, sizeof(err)), 0);

    /* B's turn: it waits for its own look-ahead record first, with none of
     * its values proposed yet. C's first rows, read meanwhile, cannot go
     * ahead now. */
    assert_int_equal(pr_vocablog_resolve(v.vl, B, 0, err, sizeof(err)), PR_EAGAIN);
    va_fill(C, 0, 64, c1);
    va_ahead(&v, C, &ahead_c);

    /* Broker back: B's look-ahead record lands and is applied, B proposes
     * b2 and waits for it; the reader holds b2's record back (a slow
     * reader), so B keeps waiting while C's look-ahead goes out behind it. */
    pr_vocablog_stats st;
    pr_vocablog_get_stats(v.vl, &st);
    uint64_t proposed = st.proposals;
    pr__vocablog_hold_from(v.vl, st.applied_offset + 1); /* B's look-ahead is at applied_offset */
    va_down(&v, false);
    int64_t deadline = va_now_ms() + 30000;
    while (st.proposals == proposed) {
        assert_int_equal(pr_vocablog_resolve(v.vl, B, 50, err, sizeof(err)), PR_EAGAIN);
        va_ahead(&v, C, &ahead_c);
        pr_vocablog_get_stats(v.vl, &st);
        if (va_now_ms() > deadline)
            fail_msg("B never proposed b2");
    }
    va_ahead(&v, C, &ahead_c);
    va_fill(C, 64, VA_ROWS, c2); /* read while B waits */
    va_ahead(&v, C, &ahead_c);
    pr__vocablog_hold_from(v.vl, INT64_MAX);
    va_resolve(&v, B, C, &ahead_c);
    va_resolve(&v, C, NULL, NULL);

    int64_t ia = va_index(v.e, a);
    assert_int_equal(va_index(v.e, b1), ia + 1);
    assert_int_equal(va_index(v.e, b2), ia + 2);
    assert_int_equal(va_index(v.e, c1), ia + 3);
    assert_int_equal(va_index(v.e, c2), ia + 4);

    pr_block_free(A);
    pr_block_free(B);
    pr_block_free(C);
    va_close(&v);
}

/* A held block whose records were given up on (a revoke took some of its
 * rows: pr_vocablog_abandon) has nothing pending until it is resolved
 * again: the next block's rows cannot go ahead before that. */
static void test_ahead_after_abandon(void **state)
{
    (void)state;
    const uint64_t a = 0x11, c1 = 0x31, c2 = 0x32;
    char err[512] = "";
    va_env v;
    va_open(&v);
    pr_block *A = pr_block_new(1, 1, VA_ROWS, true), *C = pr_block_new(1, 1, VA_ROWS, true);
    assert_non_null(A);
    assert_non_null(C);
    uint32_t ahead_c = 0;

    va_down(&v, true);
    va_fill(A, 0, 64, a);
    assert_int_equal(pr_vocablog_resolve(v.vl, A, 0, err, sizeof(err)), PR_EAGAIN);
    pr_vocablog_abandon(v.vl); /* A changed: its misses are looked for again */
    va_fill(C, 0, 64, c1);
    va_ahead(&v, C, &ahead_c);
    va_fill(C, 64, VA_ROWS, c2);
    va_down(&v, false);
    va_resolve(&v, A, C, &ahead_c);
    va_resolve(&v, C, NULL, NULL);

    int64_t ia = va_index(v.e, a);
    assert_int_equal(va_index(v.e, c1), ia + 1);
    assert_int_equal(va_index(v.e, c2), ia + 2);

    pr_block_free(A);
    pr_block_free(C);
    va_close(&v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ahead_needs_a_waiting_block),
        cmocka_unit_test(test_ahead_keeps_first_appearance_order),
        cmocka_unit_test(test_ahead_after_abandon),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
