/*
 * test_notice_floor.c — recycled-index notices exactly once across stops
 * and restarts (issue 19's "a restart re-announces only unacknowledged
 * notices"), with the real batcher and the real floor file.
 *
 * A simulated engine hands out numbered notices; each start restores every
 * notice at or above the floor it saved last (as the vocabulary's snapshot
 * does), builds a few batches, acknowledges some (in order or not), saves
 * the floor file as service/pipeline.c does, and stops without a flush.
 * Over all the starts, a number a trainer acknowledged must never come
 * again, no number may come twice in one start, and the last start, which
 * drains everything, must announce every number not acknowledged before.
 *
 * The regression: a restored backlog goes out partly (row 0 spreading and
 * the notices rows need first), not in number order, so acknowledged
 * notices sat above unacknowledged ones and a single floor number made the
 * next start announce them again (test_evict_vlog_restart under load:
 * "replica 2 announced 9669 notice number(s) twice").
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <cmocka.h>

#include "batcher_int.h"
#include "bt_util.h"
#include "pr_clock.h"

#define NF_IDX  300  /* indices per column */
#define NF_MAX  4096 /* notice numbers a test may reach */
#define NF_ROWS 8    /* rows per block = batch.size */

typedef struct nf_world {
    pr_batch_ordering ord;
    uint32_t reannounce_max;
    uint64_t total;           /* last number the engine handed out */
    pr_recycled meta[NF_MAX]; /* notice n: its column and index */
    uint8_t acked[NF_MAX];    /* acknowledged by a trainer in some start */
    char dir[32], path[64];
    uint32_t rng;
    int64_t next_off;
} nf_world;

/* The saved state as a start reads it (the floor file, service.c); cfg
 * points into *a until pr_notice_acks_fini. */
static void nf_load(nf_world *w, pr_batcher_cfg *cfg, pr_notice_acks *a)
{
    char err[256];
    assert_int_equal(pr_batcher_notice_floor_load(w->path, a, err, sizeof(err)), 0);
    cfg->notice_floor = a->floor;
    cfg->notice_acked = a->r;
    cfg->n_notice_acked = a->n;
}

/* What a store cycle saves (service/pipeline.c, pr__store_safe_offsets). */
static void nf_save(nf_world *w, pr_batcher *b, uint32_t engine_pending)
{
    char err[256];
    pr_notice_acks a;
    pr_batcher_notice_acks(b, pr_batcher_notice_top(b, w->total, engine_pending), &a);
    assert_int_equal(pr_batcher_notice_floor_save(w->path, &a, err, sizeof(err)), 0);
}

static uint64_t nf_saved_floor(nf_world *w, uint32_t *n_ranges)
{
    pr_batcher_cfg cfg = {0};
    pr_notice_acks a;
    nf_load(w, &cfg, &a);
    *n_ranges = a.n;
    pr_notice_acks_fini(&a);
    return cfg.notice_floor;
}

/* One start: restore, add `blocks` blocks (each recycles one more index),
 * acknowledge the batches emitted except the first when `skip_first`, save,
 * stop; `final` flushes and acknowledges everything. */
static void nf_start(nf_world *w, int blocks, bool skip_first, bool final)
{
    pr_manual_clock mc;
    pr_manual_clock_init(&mc, 1700000000000LL);
    bt_sink sink = {0};
    pr_batcher_cfg cfg = {.pipeline = "t",
                          .n_dense = BT_ND,
                          .n_sparse = BT_NS,
                          .sparse_width = 4,
                          .batch = {.size = NF_ROWS,
                                    .max_delay_ms = 1000,
                                    .ordering = w->ord,
                                    .reannounce_max = w->reannounce_max},
                          .clock = &mc.clock,
                          .on_emit = bt_on_emit,
                          .opaque = &sink,
                          .notice_restart_next = w->total + 1};
    pr_notice_acks acks;
    nf_load(w, &cfg, &acks);
    pr_batcher *b;
    char err[256];
    assert_int_equal(pr_batcher_new(&cfg, &b, err, sizeof(err)), 0);
    pr_notice_acks_fini(&acks); /* the batcher copied the ranges */
    pr_batcher_assign(b, 0);

    /* The vocabulary restores every notice at or above the floor it was
     * told was delivered (the same floor the file holds). */
    static pr_recycled restored[NF_MAX], notes[NF_MAX];
    uint32_t n_restored = 0;
    for (uint64_t n = cfg.notice_floor ? cfg.notice_floor : 1; n <= w->total; n++)
        restored[n_restored++] = w->meta[n];

    bt_io *io = bt_io_new(64);
    for (int blk = 0; blk < blocks; blk++) {
        bt_io_reset(io);
        for (uint32_t r = 0; r < NF_ROWS; r++, w->next_off++) {
            bt_row(io, 0, w->next_off, w->next_off, 0);
            for (int c = 0; c < BT_NS; c++) {
                w->rng = w->rng * 1103515245u + 12345u;
                ((int32_t *)io->out.sparse)[(size_t)c * io->out.cap + r] =
                    (int32_t)((w->rng >> 8) % NF_IDX);
            }
        }
        uint32_t k = 0;
        if (blk == 0) {
            memcpy(notes, restored, n_restored * sizeof(pr_recycled));
            k = n_restored;
        }
        /* one new recycle per block: the index row 3 reads in column 0 */
        assert_true(w->total + 1 < NF_MAX);
        pr_recycled nw = {0, 3, ((int32_t *)io->out.sparse)[3], ++w->total};
        w->meta[nw.number] = nw;
        w->meta[nw.number].row = 0;
        notes[k++] = nw;
        io->out.recycled = notes;
        io->out.n_recycled = k;
        assert_int_equal(pr_batcher_add(b, &io->in, &io->out), 0);
    }
    if (final)
        pr_batcher_flush(b);

    /* What the trainers saw: no number acknowledged before, none twice. */
    static uint8_t seen[NF_MAX];
    memset(seen, 0, sizeof(seen));
    for (size_t i = 0; i < sink.n; i++)
        for (uint32_t j = 0; j < sink.b[i]->n_recycled; j++) {
            uint64_t n = sink.b[i]->recycled[j].number;
            assert_true(n >= 1 && n <= w->total);
            if (w->acked[n])
                fail_msg("notice #%llu announced again after it was acknowledged",
                         (unsigned long long)n);
            if (seen[n]++)
                fail_msg("notice #%llu announced twice in one start", (unsigned long long)n);
        }
    for (size_t i = 0; i < sink.n; i++) {
        if (skip_first && !final && i == 0)
            continue;
        assert_int_equal(pr_batcher_ack(b, sink.b[i]->seq), 0);
        for (uint32_t j = 0; j < sink.b[i]->n_recycled; j++)
            w->acked[sink.b[i]->recycled[j].number] = 1;
    }
    nf_save(w, b, blocks ? 0 : n_restored);
    if (final) /* every number reached a trainer exactly once over all the starts */
        for (uint64_t n = 1; n <= w->total; n++)
            if (!w->acked[n])
                fail_msg("notice #%llu never acknowledged", (unsigned long long)n);
    pr_batcher_free(b);
    bt_sink_free(&sink);
    bt_io_free(io);
}

static void nf_world_init(nf_world *w, pr_batch_ordering ord, uint32_t cap)
{
    memset(w, 0, sizeof(*w));
    w->ord = ord;
    w->reannounce_max = cap;
    w->rng = 11;
    snprintf(w->dir, sizeof(w->dir), "/tmp/pr_nfloor_XXXXXX");
    assert_non_null(mkdtemp(w->dir));
    snprintf(w->path, sizeof(w->path), "%s/p.notices", w->dir);
    /* a first life: 600 recycles, none acknowledged (a crash) */
    for (int i = 0; i < 600; i++) {
        uint64_t n = ++w->total;
        w->meta[n] = (pr_recycled){(uint32_t)(n % 2), 0, (int64_t)((n * 37) % NF_IDX), n};
    }
}

static void nf_world_fini(nf_world *w)
{
    remove(w->path);
    rmdir(w->dir);
}

static void nf_scenario(pr_batch_ordering ord, uint32_t cap)
{
    static nf_world w;
    nf_world_init(&w, ord, cap);
    nf_start(&w, 6, false, false); /* part of the backlog goes, all acknowledged */
    uint32_t n1, n2;
    uint64_t f1 = nf_saved_floor(&w, &n1);
    if (cap) /* rows took notices ahead of the row-0 share: holes below them */
        assert_true(n1 > 0);
    nf_start(&w, 0, false, false); /* a start with nothing to read keeps what it knew */
    assert_int_equal(nf_saved_floor(&w, &n2), f1);
    assert_int_equal(n2, n1);
    nf_start(&w, 5, true, false); /* the first batch of this start is never acknowledged */
    nf_start(&w, 3, false, false);
    nf_start(&w, 0, false, false);
    nf_start(&w, 200, false, true); /* drains everything */
    nf_world_fini(&w);
}

static void test_restart_partial_backlog(void **state)
{
    (void)state;
    nf_scenario(PR_BATCH_ORDER_PARTITION, 20);
    nf_scenario(PR_BATCH_ORDER_PARTITION, 0);
    nf_scenario(PR_BATCH_ORDER_EVENT_TIME, 20);
}

static void nf_write(const char *path, const char *text)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* The file: ranges round trip; the one-number file of earlier releases
 * loads (and is what a state without ranges writes, byte for byte); a bad
 * range names the file, the line and what to do. */
static void test_floor_file_ranges(void **state)
{
    (void)state;
    char dir[] = "/tmp/pr_nfile_XXXXXX", path[64], err[256], text[128];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/p.notices", dir);
    const pr_notice_range r[] = {{12, 12}, {14, 20}, {1000, 1999}};
    pr_notice_acks a = {.floor = 10, .r = r, .n = 3}, v;
    assert_int_equal(pr_batcher_notice_floor_save(path, &a, err, sizeof(err)), 0);
    FILE *fp = fopen(path, "r");
    size_t len = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[len] = '\0';
    assert_string_equal(text, "10\n12-12\n14-20\n1000-1999\n");
    assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), 0);
    assert_int_equal(v.floor, 10);
    assert_int_equal(v.n, 3);
    assert_memory_equal(v.r, r, sizeof(r));
    assert_int_equal(pr_notice_acks_digest(&v), pr_notice_acks_digest(&a));
    v.n = 2;
    assert_true(pr_notice_acks_digest(&v) != pr_notice_acks_digest(&a));
    pr_notice_acks_fini(&v);

    assert_int_equal(
        pr_batcher_notice_floor_save(path, &(pr_notice_acks){.floor = 77}, err, sizeof(err)), 0);
    fp = fopen(path, "r");
    len = fread(text, 1, sizeof(text) - 1, fp);
    fclose(fp);
    text[len] = '\0';
    assert_string_equal(text, "77\n"); /* the earlier releases' file */
    nf_write(path, "41258");           /* no newline, as a hand-written file may be */
    assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), 0);
    assert_int_equal(v.floor, 41258);
    assert_int_equal(v.n, 0);
    pr_notice_acks_fini(&v);

    const char *bad[] = {"10\n5-8\n",          /* below the floor */
                         "10\n10-12\n",        /* the floor itself is not acknowledged */
                         "10\n14-20\n12-12\n", /* not increasing */
                         "10\n12-14\n15-16\n", /* adjacent: not the form we write */
                         "10\n20-14\n",        /* lo > hi */
                         "10\n12\n",           /* not a range */
                         "10\n12-x\n",         "10\n\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        nf_write(path, bad[i]);
        v.floor = 5;
        assert_int_equal(pr_batcher_notice_floor_load(path, &v, err, sizeof(err)), PR_EBADREC);
        assert_non_null(strstr(err, path));
        assert_non_null(strstr(err, "line "));
        assert_non_null(strstr(err, "delete the file"));
        assert_int_equal(v.floor, 0);
        assert_int_equal(v.n, 0);
        pr_notice_acks_fini(&v);
    }
    remove(path);
    rmdir(dir);
}

/* The acknowledged set: merges touching numbers, answers membership, and
 * past PR_NOTICE_ACKS_MAX ranges forgets the highest (re-sent, never lost). */
static void test_ackset_bound(void **state)
{
    (void)state;
    pr__ackset s = {0};
    static pr_recycled v[1000];
    for (uint32_t i = 0; i < 5; i++) /* 10, 12, 14, 16, 18 */
        v[i].number = 10 + 2 * i;
    pr__ackset_add(&s, v, 5);
    assert_int_equal(s.n, 5);
    for (uint32_t i = 0; i < 4; i++) /* 17, 15, 13, 11: one range 10-18 */
        v[i].number = 17 - 2 * i;
    pr__ackset_add(&s, v, 4);
    assert_int_equal(s.n, 1);
    assert_true(s.r[0].lo == 10 && s.r[0].hi == 18);
    assert_true(pr__ackset_has(&s, 10) && pr__ackset_has(&s, 18));
    assert_false(pr__ackset_has(&s, 9) || pr__ackset_has(&s, 19));
    pr__ackset_clip(&s, 12, 16); /* (floor, top) */
    assert_true(s.n == 1 && s.r[0].lo == 13 && s.r[0].hi == 15);
    /* every other number from 1000 on: one range each */
    uint64_t next = 1000;
    while (next < 1000 + 2ull * (PR_NOTICE_ACKS_MAX + 500)) {
        for (uint32_t i = 0; i < 1000; i++, next += 2)
            v[i].number = next;
        pr__ackset_add(&s, v, 1000);
    }
    assert_int_equal(s.n, PR_NOTICE_ACKS_MAX);
    assert_true(pr__ackset_has(&s, 13) && pr__ackset_has(&s, 1000));
    assert_false(pr__ackset_has(&s, next - 2)); /* the highest went */
    pr__ackset_fini(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart_partial_backlog),
        cmocka_unit_test(test_floor_file_ranges),
        cmocka_unit_test(test_ackset_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
