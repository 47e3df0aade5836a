/*
 * test_trainer_ckpt.c — checkpoint delivery pieces (docs/trainer-protocol.md
 * "Checkpoint delivery"):
 *   - sinks/trainer_ckpt.c: interval sets (merging of overlapping and
 *     touching ranges, coverage, unknown partitions and topics, empty sets,
 *     offsets at INT64_MAX) and the release decision for a batch;
 *   - sinks/trainer_position.c: the client's position, its range order and
 *     its JSON form (the Python Position.to_dict());
 *   - the trainer sink in checkpoint mode over loopback with the C client:
 *     acks do not release, a CheckpointCommit releases exactly the batches
 *     it covers (CheckpointOk says how many) while batches that arrive during
 *     the wait stay buffered in order, Subscribe.resume feeds the resume
 *     filter and releases held batches, and a crashed trainer's batches after
 *     its checkpoint go to the next one.
 */
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_engine.h"
#include "pr_sink.h"
#include "pr_trainer_client.h"
#include "trainer_ckpt.h"

/* ---------------------------------------------------------------- interval sets */

/* The intervals of (topic, partition) as "a-b a-b ...", "" when unknown. */
static const char *ivs(const pr__posset *s, const char *topic, int32_t part)
{
    static char buf[512];
    buf[0] = '\0';
    for (size_t i = 0; i < s->n; i++) {
        if (s->parts[i].partition != part || strcmp(s->parts[i].topic, topic))
            continue;
        size_t l = 0;
        for (size_t j = 0; j < s->parts[i].n; j++)
            l += (size_t)snprintf(buf + l, sizeof(buf) - l, "%s%lld-%lld", j ? " " : "",
                                  (long long)s->parts[i].iv[j].first,
                                  (long long)s->parts[i].iv[j].last);
    }
    return buf;
}

static void test_add_merges(void **state)
{
    (void)state;
    pr__posset s;
    pr__posset_init(&s);
    assert_int_equal(pr__posset_add(&s, "t", 0, 20, 29), 0);
    assert_int_equal(pr__posset_add(&s, "t", 0, 0, 4), 0); /* before: inserted first */
    assert_int_equal(pr__posset_add(&s, "t", 0, 40, 49), 0);
    assert_string_equal(ivs(&s, "t", 0), "0-4 20-29 40-49");
    assert_int_equal(pr__posset_add(&s, "t", 0, 5, 9), 0); /* touching at the end */
    assert_string_equal(ivs(&s, "t", 0), "0-9 20-29 40-49");
    assert_int_equal(pr__posset_add(&s, "t", 0, 15, 19), 0); /* touching at the start */
    assert_string_equal(ivs(&s, "t", 0), "0-9 15-29 40-49");
    assert_int_equal(pr__posset_add(&s, "t", 0, 25, 42), 0); /* overlapping two */
    assert_string_equal(ivs(&s, "t", 0), "0-9 15-49");
    assert_int_equal(pr__posset_add(&s, "t", 0, 30, 35), 0); /* inside: no change */
    assert_string_equal(ivs(&s, "t", 0), "0-9 15-49");
    assert_int_equal(pr__posset_add(&s, "t", 0, 60, 60), 0); /* a single offset */
    assert_int_equal(pr__posset_add(&s, "t", 0, 10, 14), 0); /* fills the gap exactly */
    assert_string_equal(ivs(&s, "t", 0), "0-49 60-60");
    assert_int_equal(pr__posset_add(&s, "t", 0, 0, 100), 0); /* swallows everything */
    assert_string_equal(ivs(&s, "t", 0), "0-100");
    /* Partitions and topics are separate keys; NULL topic is "". */
    assert_int_equal(pr__posset_add(&s, "t", 1, 0, 0), 0);
    assert_int_equal(pr__posset_add(&s, "u", 0, 7, 8), 0);
    assert_int_equal(pr__posset_add(&s, NULL, 0, 3, 3), 0);
    assert_string_equal(ivs(&s, "t", 0), "0-100");
    assert_string_equal(ivs(&s, "t", 1), "0-0");
    assert_string_equal(ivs(&s, "u", 0), "7-8");
    assert_string_equal(ivs(&s, "", 0), "3-3");
    assert_int_equal(s.n, 4);
    pr__posset_fini(&s);
    assert_int_equal(s.n, 0);
}

/* Many single offsets in a scrambled order end up as the same intervals
 * as their sorted union (a reference bitmap decides). */
static void test_add_random_against_bitmap(void **state)
{
    (void)state;
    pr__posset s;
    pr__posset_init(&s);
    uint8_t ref[300] = {0};
    uint32_t x = 12345;
    for (int i = 0; i < 400; i++) {
        x = x * 1103515245u + 12345u;
        int64_t a = (x >> 8) % 290, len = (x >> 20) % 6;
        assert_int_equal(pr__posset_add(&s, "t", 0, a, a + len), 0);
        for (int64_t k = a; k <= a + len; k++)
            ref[k] = 1;
        /* Invariant: sorted, disjoint, not touching. */
        const pr__pospart *p = &s.parts[0];
        for (size_t j = 1; j < p->n; j++)
            assert_true(p->iv[j].first > p->iv[j - 1].last + 1);
    }
    for (int64_t k = 0; k < 300; k++)
        assert_int_equal(pr__posset_covers(&s, "t", 0, k, k), ref[k] != 0);
    pr__posset_fini(&s);
}

static void test_add_rejects_and_edges(void **state)
{
    (void)state;
    pr__posset s;
    pr__posset_init(&s);
    assert_int_equal(pr__posset_add(&s, "t", 0, 5, 4), PR_EINVAL);
    assert_int_equal(pr__posset_add(&s, "t", 0, -1, 4), PR_EINVAL);
    assert_int_equal(s.n, 0); /* nothing was created for a rejected range */
    /* An interval ending at INT64_MAX (a hostile resume): no overflow when
     * merging (UBSan would say so) and still merged with what touches it. */
    assert_int_equal(pr__posset_add(&s, "t", 0, 100, INT64_MAX), 0);
    assert_int_equal(pr__posset_add(&s, "t", 0, 0, 99), 0);
    assert_int_equal(pr__posset_add(&s, "t", 0, 50, INT64_MAX), 0);
    assert_int_equal(s.parts[0].n, 1);
    assert_true(pr__posset_covers(&s, "t", 0, 0, INT64_MAX));
    assert_int_equal(pr__posset_add(&s, "t", 1, INT64_MAX, INT64_MAX), 0);
    assert_int_equal(pr__posset_add(&s, "t", 1, 0, 0), 0);
    assert_int_equal(s.parts[1].n, 2);
    pr__posset_fini(&s);
}

static void test_covers(void **state)
{
    (void)state;
    pr__posset s;
    pr__posset_init(&s);
    assert_false(pr__posset_covers(&s, "t", 0, 0, 0)); /* empty set */
    pr__posset_add(&s, "t", 0, 10, 19);
    pr__posset_add(&s, "t", 0, 30, 39);
    assert_true(pr__posset_covers(&s, "t", 0, 10, 19));
    assert_true(pr__posset_covers(&s, "t", 0, 12, 12));
    assert_true(pr__posset_covers(&s, "t", 0, 39, 39));
    assert_false(pr__posset_covers(&s, "t", 0, 9, 12));  /* starts before */
    assert_false(pr__posset_covers(&s, "t", 0, 15, 20)); /* runs past the end */
    assert_false(pr__posset_covers(&s, "t", 0, 15, 35)); /* spans the gap */
    assert_false(pr__posset_covers(&s, "t", 0, 20, 29)); /* the gap */
    assert_false(pr__posset_covers(&s, "t", 0, 40, 40)); /* after the last */
    assert_false(pr__posset_covers(&s, "t", 0, 0, 0));   /* before the first */
    assert_false(pr__posset_covers(&s, "t", 1, 12, 12)); /* unknown partition */
    assert_false(pr__posset_covers(&s, "u", 0, 12, 12)); /* unknown topic */
    assert_false(pr__posset_covers(&s, NULL, 0, 12, 12));
    pr__posset_fini(&s);
}

/* A batch with topic table {"a", "b"} and ranges (topic index, partition, first, last). */
static pr_batch *mkbatch(uint64_t seq, const int64_t (*r)[4], uint32_t n)
{
    pr_batch *b = pr_batch_new("criteo", 3, 2, 1, 4);
    assert_non_null(b);
    b->seq = seq;
    b->n_topics = 2;
    b->topics = calloc(2, sizeof(char *));
    b->topics[0] = strdup("a");
    b->topics[1] = strdup("b");
    b->n_ranges = n;
    b->ranges = n ? calloc(n, sizeof(*b->ranges)) : NULL;
    for (uint32_t i = 0; i < n; i++)
        b->ranges[i] = (pr_batch_range){PR_PART_KEY(r[i][0], r[i][1]), r[i][2], r[i][3],
                                        (uint32_t)(r[i][3] - r[i][2] + 1)};
    for (int k = 0; k < 3; k++) {
        b->labels[k] = (int32_t)seq;
        ((int32_t *)b->sparse)[k] = (int32_t)seq;
    }
    return b;
}

static void test_release_decision(void **state)
{
    (void)state;
    pr__posset s;
    pr__posset_init(&s);
    const int64_t r1[][4] = {{0, 0, 0, 9}, {1, 0, 0, 4}};
    pr_batch *b = mkbatch(1, r1, 2);
    assert_false(pr__posset_covers_batch(&s, b)); /* empty position */
    pr__posset_add(&s, "a", 0, 0, 20);
    assert_false(pr__posset_covers_batch(&s, b)); /* topic b's rows are not in it */
    pr__posset_add(&s, "b", 0, 0, 3);
    assert_false(pr__posset_covers_batch(&s, b)); /* one offset short */
    pr__posset_add(&s, "b", 0, 4, 4);
    assert_true(pr__posset_covers_batch(&s, b));
    pr_batch_unref(b);
    /* A batch without ranges is never released by a position. */
    b = mkbatch(2, NULL, 0);
    assert_false(pr__posset_covers_batch(&s, b));
    pr_batch_unref(b);
    /* Same partition number, other topic: the key's topic index decides. */
    const int64_t r3[][4] = {{1, 0, 6, 6}};
    b = mkbatch(3, r3, 1);
    assert_false(pr__posset_covers_batch(&s, b));
    /* Without a topic table, ranges are of topic "". */
    for (uint32_t i = 0; i < b->n_topics; i++)
        free(b->topics[i]);
    free(b->topics);
    b->topics = NULL;
    b->n_topics = 0;
    b->ranges[0].partition = PR_PART_KEY(0, 0);
    assert_false(pr__posset_covers_batch(&s, b));
    pr__posset_add(&s, "", 0, 6, 6);
    assert_true(pr__posset_covers_batch(&s, b));
    pr_batch_unref(b);
    pr__posset_fini(&s);
}

/* ---------------------------------------------------------------- client positions */

static char *to_json(pr_trainer_position *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(pr_trainer_position_write_json(p, f), 0);
    fclose(f);
    return buf;
}

static void test_position_json(void **state)
{
    (void)state;
    pr_trainer_position *p = pr_trainer_position_new();
    char *js = to_json(p);
    assert_string_equal(js, "{}");
    free(js);
    const pr_trainer_range *r;
    assert_int_equal(pr_trainer_position_ranges(p, &r), 0);
    assert_int_equal(pr_trainer_position_count(p), 0);
    /* Added out of order: listed by (topic, partition, first). */
    pr_trainer_position_add(p, "ev", 1, 10, 19);
    pr_trainer_position_add(p, "ev", 0, 0, 4);
    pr_trainer_position_add(p, "ab", 3, 7, 7);
    pr_trainer_position_add(p, "ev", 1, 0, 5);
    pr_trainer_position_add(p, "ev", 1, 6, 8); /* touches 0-5: merged */
    assert_int_equal(pr_trainer_position_add(p, "ev", 1, 9, 2), PR_EINVAL);
    assert_int_equal(pr_trainer_position_ranges(p, &r), 4);
    assert_string_equal(r[0].topic, "ab");
    assert_int_equal(r[1].partition, 0);
    assert_int_equal(r[2].first, 0);
    assert_int_equal(r[2].last, 8);
    assert_int_equal(r[3].first, 10);
    assert_int_equal(pr_trainer_position_count(p), 1 + 5 + 9 + 10);
    js = to_json(p);
    assert_string_equal(js,
                        "{\"ab/3\": [[7, 7]], \"ev/0\": [[0, 4]], \"ev/1\": [[0, 8], [10, 19]]}");
    /* Round trip, then merge: the union. */
    pr_trainer_position *q = pr_trainer_position_new();
    const char *end;
    char err[256];
    assert_int_equal(pr_trainer_position_parse_json(q, js, &end, err, sizeof(err)), 0);
    assert_int_equal(*end, '\0');
    char *js2 = to_json(q);
    assert_string_equal(js2, js);
    free(js2);
    pr_trainer_position_add(q, "ev", 1, 9, 9);
    assert_int_equal(pr_trainer_position_merge(p, q), 0);
    free(js);
    js = to_json(p);
    assert_string_equal(js, "{\"ab/3\": [[7, 7]], \"ev/0\": [[0, 4]], \"ev/1\": [[0, 19]]}");
    free(js);
    pr_trainer_position_free(q);
    pr_trainer_position_free(p);
}

static void test_position_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"[]", "expected '{'"},
        {"{\"ev\": [[0, 1]]}", "not \"topic/partition\""},
        {"{\"ev/x\": [[0, 1]]}", "not \"topic/partition\""},
        {"{\"ev/-1\": [[0, 1]]}", "not \"topic/partition\""},
        {"{\"ev/0\": [[5, 1]]}", "0 <= first <= last"},
        {"{\"ev/0\": [[-1, 1]]}", "0 <= first <= last"},
        {"{\"ev/0\": [[0 1]]}", "expected ','"},
        {"{\"ev/0\": [[0, x]]}", "expected an integer"},
        {"{\"ev/0\": [[0, 1]]", "expected '}'"},
        {"{\"ev/0", "unterminated string"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pr_trainer_position *p = pr_trainer_position_new();
        char err[256] = "";
        assert_int_equal(pr_trainer_position_parse_json(p, bad[i].text, NULL, err, sizeof(err)),
                         PR_EBADREC);
        if (!strstr(err, bad[i].msg))
            fail_msg("'%s': got '%s', expected '%s'", bad[i].text, err, bad[i].msg);
        pr_trainer_position_free(p);
    }
    /* White space and empty lists are fine. */
    pr_trainer_position *p = pr_trainer_position_new();
    char err[256];
    assert_int_equal(
        pr_trainer_position_parse_json(p, " {\n \"a.b/2\" : [ ] , \"x/0\":[[1,2],[4,4]] } ", NULL,
                                       err, sizeof(err)),
        0);
    assert_int_equal(pr_trainer_position_count(p), 3);
    pr_trainer_position_free(p);
}

/* ---------------------------------------------------------------- the sink, checkpoint mode */

typedef struct cfx {
    pr_sinkset *ss;
    pr_sink *sink;
    char addr[64];
    uint64_t acked[256]; /* released: the sink set saw them acknowledged */
    size_t n_acked;
} cfx;

static cfx *cfx_new_mode(pr_trainer_delivery delivery)
{
    cfx *f = calloc(1, sizeof(*f));
    const char *dn[] = {"I1", "I2"}, *sn[] = {"C1"};
    pr_sink_cfg cfg = {.pipeline = "criteo",
                       .n_dense = 2,
                       .n_sparse = 1,
                       .sparse_width = 4,
                       .dense_names = dn,
                       .sparse_names = sn};
    cfg.trainer.listen = "127.0.0.1:0";
    cfg.trainer.max_unacked_batches = 64;
    cfg.trainer.delivery = delivery;
    char err[256];
    assert_int_equal(pr_sink_new(&pr_sink_trainer_ops, &cfg, &f->sink, err, sizeof(err)), 0);
    f->ss = pr_sinkset_new();
    assert_int_equal(pr_sinkset_add(f->ss, f->sink), 0);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%d", pr_sink_port(f->sink));
    assert_int_equal(pr_sink_checkpoint_mode(f->sink), delivery == PR_TRAINER_DELIVERY_CHECKPOINT);
    return f;
}

static cfx *cfx_new(void)
{
    return cfx_new_mode(PR_TRAINER_DELIVERY_CHECKPOINT);
}

static void cfx_free(cfx *f)
{
    pr_sinkset_free(f->ss);
    free(f);
}

/* Batch `seq` holds offsets [10*(seq-1), 10*seq - 1] of topic "a" partition 0. */
static void send_seq(cfx *f, uint64_t seq)
{
    const int64_t r[][4] = {{0, 0, (int64_t)(10 * (seq - 1)), (int64_t)(10 * seq - 1)}};
    pr_batch *b = mkbatch(seq, r, 1);
    assert_int_equal(pr_sinkset_send(f->ss, b), 0);
    pr_batch_unref(b);
}

static void on_ack(void *opaque, uint64_t seq)
{
    cfx *f = opaque;
    f->acked[f->n_acked++] = seq;
}

/* Poll the sink set for a while (acks are delivered through it). */
static void settle(cfx *f, size_t want)
{
    for (int i = 0; i < 400 && f->n_acked < want; i++) {
        pr_sinkset_poll(f->ss, on_ack, f);
        if (f->n_acked < want)
            poll(NULL, 0, 5);
    }
}

static pr_trainer_client *open_client(cfx *f, const pr_trainer_range *resume, size_t n)
{
    pr_trainer_client_opts o = {.connect = f->addr,
                                .pipeline = "criteo",
                                .credits = 8,
                                .client_id = "ck",
                                .timeout_ms = 5000,
                                .resume = resume,
                                .n_resume = n};
    pr_trainer_client *c;
    char err[256];
    if (pr_trainer_client_open(&o, &c, err, sizeof(err)))
        fail_msg("connect: %s", err);
    return c;
}

/* Receive one batch; return its seq (and add it to pos when given). */
static uint64_t take(pr_trainer_client *c, pr_trainer_position *pos)
{
    pr_batch_view v;
    char err[256];
    int rc = pr_trainer_client_next(c, &v, 5000, err, sizeof(err));
    if (rc != 1)
        fail_msg("next: rc %d: %s", rc, rc < 0 ? err : "timeout");
    uint64_t seq = v.seq;
    assert_int_equal(v.n_ranges, 1);
    assert_int_equal(v.ranges[0].first_offset, (int64_t)(10 * (seq - 1)));
    if (pos)
        assert_int_equal(pr_trainer_position_add_batch(pos, &v), 0);
    pr_batch_view_fini(&v);
    return seq;
}

static void test_sink_commit_releases_covered(void **state)
{
    (void)state;
    cfx *f = cfx_new();
    assert_false(pr_sink_resume_known(f->sink)); /* nobody subscribed yet */
    pr_trainer_client *c = open_client(f, NULL, 0);
    for (uint64_t s = 1; s <= 4; s++)
        send_seq(f, s);
    pr_trainer_position *pos = pr_trainer_position_new();
    for (uint64_t s = 1; s <= 4; s++) {
        uint64_t got = take(c, s <= 2 ? pos : NULL);
        assert_int_equal(got, s);
        assert_int_equal(pr_trainer_client_ack(c, got), 0);
    }
    settle(f, 1);
    assert_int_equal(f->n_acked, 0); /* acks return credit, nothing is released */
    assert_true(pr_sink_resume_known(f->sink));

    /* Batches sent now arrive while the client waits for CheckpointOk. */
    send_seq(f, 5);
    send_seq(f, 6);
    poll(NULL, 0, 50);
    const pr_trainer_range *r;
    int64_t n = pr_trainer_position_ranges(pos, &r);
    assert_int_equal(n, 1);
    uint32_t released = 99;
    char err[256];
    assert_int_equal(
        pr_trainer_client_checkpoint(c, r, (size_t)n, 7, 5000, &released, err, sizeof(err)), 1);
    assert_int_equal(released, 2);
    settle(f, 2);
    assert_int_equal(f->n_acked, 2);
    assert_int_equal(f->acked[0] + f->acked[1], 1 + 2);
    /* The batches buffered during the wait come next, in order. */
    assert_int_equal(take(c, NULL), 5);
    assert_int_equal(take(c, NULL), 6);

    /* A position covering only part of batch 3 releases nothing. */
    pr_trainer_position_add(pos, "a", 0, 20, 25);
    n = pr_trainer_position_ranges(pos, &r);
    assert_int_equal(
        pr_trainer_client_checkpoint(c, r, (size_t)n, 8, 5000, &released, err, sizeof(err)), 1);
    assert_int_equal(released, 0);
    /* Committed offsets are never delivered again: the resume filter skips them. */
    const char *topics[] = {"a", "b"};
    int32_t keys[] = {PR_PART_KEY(0, 0), PR_PART_KEY(0, 0), PR_PART_KEY(0, 0), PR_PART_KEY(1, 0),
                      PR_PART_KEY(0, 1)};
    int64_t offs[] = {0, 25, 26, 3, 3};
    uint8_t skip[5];
    assert_int_equal(pr_sink_resume_filter(f->sink, topics, 2, keys, offs, 5, skip), 2);
    assert_memory_equal(skip, ((uint8_t[]){1, 1, 0, 0, 0}), 5);
    /* A bad range is refused by the client before it is sent. */
    pr_trainer_range badr = {"a", 0, 5, 1};
    assert_int_equal(pr_trainer_client_checkpoint(c, &badr, 1, 9, 0, NULL, err, sizeof(err)),
                     PR_EINVAL);
    pr_trainer_position_free(pos);
    pr_trainer_client_close(c);
    cfx_free(f);
}

/* A trainer that checkpoints against a server in ack delivery is told at its
 * first commit (before it relies on a replay the server will not make),
 * not ignored: acked batches are committed there at once. */
static void test_sink_commit_in_ack_mode_is_an_error(void **state)
{
    (void)state;
    cfx *f = cfx_new_mode(PR_TRAINER_DELIVERY_ACK);
    pr_trainer_client *c = open_client(f, NULL, 0);
    send_seq(f, 1);
    pr_trainer_position *pos = pr_trainer_position_new();
    assert_int_equal(take(c, pos), 1);
    assert_int_equal(pr_trainer_client_ack(c, 1), 0);
    const pr_trainer_range *r;
    int64_t n = pr_trainer_position_ranges(pos, &r);
    char err[512] = "";
    uint32_t released = 0;
    int rc = pr_trainer_client_checkpoint(c, r, (size_t)n, 1, 5000, &released, err, sizeof(err));
    assert_true(rc < 0);
    if (!strstr(err, "delivery is ack"))
        fail_msg("commit in ack mode: rc %d, '%s'", rc, err);
    pr_trainer_position_free(pos);
    pr_trainer_client_close(c);
    cfx_free(f);
}

/* A trainer crashes after its checkpoint: what it trained on after the
 * checkpoint goes to the next trainer; one restored from a checkpoint whose
 * commit was lost gets that checkpoint's batches released by its resume. */
static void test_sink_crash_and_resume(void **state)
{
    (void)state;
    cfx *f = cfx_new();
    pr_trainer_client *c = open_client(f, NULL, 0);
    for (uint64_t s = 1; s <= 4; s++)
        send_seq(f, s);
    pr_trainer_position *pos = pr_trainer_position_new();
    for (uint64_t s = 1; s <= 4; s++) {
        assert_int_equal(take(c, s <= 2 ? pos : NULL), s); /* checkpoint holds 1, 2 */
        pr_trainer_client_ack(c, s);
    }
    /* The checkpoint is durable but its commit is lost with the trainer. */
    pr_trainer_client_close(c);
    settle(f, 1);
    assert_int_equal(f->n_acked, 0);

    const pr_trainer_range *r;
    int64_t n = pr_trainer_position_ranges(pos, &r);
    c = open_client(f, r, (size_t)n);
    settle(f, 2);
    assert_int_equal(f->n_acked, 2); /* 1 and 2 released by the resume */
    /* Exactly the batches after the checkpoint, once. */
    assert_int_equal(take(c, NULL), 3);
    assert_int_equal(take(c, NULL), 4);
    pr_batch_view v;
    char err[256];
    assert_int_equal(pr_trainer_client_next(c, &v, 200, err, sizeof(err)), 0);
    /* Rows of the resume position are filtered at the source. */
    const char *topics[] = {"a"};
    int32_t keys[] = {PR_PART_KEY(0, 0), PR_PART_KEY(0, 0)};
    int64_t offs[] = {19, 20};
    uint8_t skip[2];
    assert_int_equal(pr_sink_resume_filter(f->sink, topics, 1, keys, offs, 2, skip), 1);
    assert_int_equal(skip[0], 1);
    assert_int_equal(skip[1], 0);
    pr_trainer_position_free(pos);
    pr_trainer_client_close(c);
    cfx_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_add_merges),
        cmocka_unit_test(test_add_random_against_bitmap),
        cmocka_unit_test(test_add_rejects_and_edges),
        cmocka_unit_test(test_covers),
        cmocka_unit_test(test_release_decision),
        cmocka_unit_test(test_position_json),
        cmocka_unit_test(test_position_parse_errors),
        cmocka_unit_test(test_sink_commit_releases_covered),
        cmocka_unit_test(test_sink_commit_in_ack_mode_is_an_error),
        cmocka_unit_test(test_sink_crash_and_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
