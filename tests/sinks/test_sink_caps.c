/*
 * test_sink_caps.c — the sink table's capability declarations (pr_sink.h,
 * issue 18 item 4): the core dispatches on them, so a declared capability
 * must come with its callbacks, and the config switch each sink names must
 * be its own. Then the neutral answers of the capability calls for a sink
 * without the capability (a test sink declared here, which does no I/O), and
 * who encodes a batch: a sink set whose only sink declares
 * PR_SINK_CAP_ENCODES hands it over unencoded (the sink encodes on its own
 * thread); with two sinks, or one without it, the set encodes first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pr_batcher.h"
#include "pr_sink.h"

static void test_table_declarations(void **state)
{
    (void)state;
    size_t n = 0;
    const pr_sink_ops *ops;
    for (size_t i = 0; (ops = pr_sink_ops_at(i)) != NULL; i++, n++) {
        assert_non_null(ops->name);
        assert_true(ops->enabled_off + sizeof(bool) <= sizeof(pr_sinks_cfg));
        for (size_t j = 0; j < i; j++) {
            assert_string_not_equal(pr_sink_ops_at(j)->name, ops->name);
            assert_int_not_equal(pr_sink_ops_at(j)->enabled_off, ops->enabled_off);
        }
        bool listener = ops->caps & PR_SINK_CAP_LISTENER;
        assert_true(listener == (ops->port != NULL));
        assert_true(listener == (ops->buffered_bytes != NULL));
        bool ckpt = ops->caps & PR_SINK_CAP_CHECKPOINT;
        assert_true(ckpt == (ops->checkpoint_mode != NULL));
        assert_true(ckpt == (ops->resume_known != NULL));
        assert_true(ckpt == (ops->resume_filter != NULL));
    }
    assert_int_equal(n, 3);
    /* The config switches are the pr_sinks_cfg members of the same name. */
    assert_int_equal(pr_sink_trainer_ops.enabled_off, offsetof(pr_sinks_cfg, trainer.enabled));
    assert_int_equal(pr_sink_kafka_ops.enabled_off, offsetof(pr_sinks_cfg, kafka.enabled));
    assert_int_equal(pr_sink_files_ops.enabled_off, offsetof(pr_sinks_cfg, files.enabled));
    /* The trainer sink is the one with every capability today. */
    assert_int_equal(pr_sink_trainer_ops.caps, PR_SINK_CAP_ACKS | PR_SINK_CAP_REDELIVERY |
                                                   PR_SINK_CAP_CHECKPOINT | PR_SINK_CAP_LISTENER |
                                                   PR_SINK_CAP_ENCODES);
    assert_int_equal(pr_sink_kafka_ops.caps, 0);
    assert_int_equal(pr_sink_files_ops.caps, 0);
}

static void test_neutral_answers(void **state)
{
    (void)state;
    static const pr_sink_ops bare = {.name = "bare"};
    pr_sink s = {.ops = &bare};
    assert_int_equal(pr_sink_caps(&s), 0);
    assert_int_equal(pr_sink_port(&s), -1);
    assert_int_equal(pr_sink_buffered_bytes(&s), 0);
    assert_false(pr_sink_checkpoint_mode(&s));
    assert_true(pr_sink_resume_known(&s));
    int32_t keys[2] = {0, 0};
    int64_t offs[2] = {1, 2};
    uint8_t skip[2] = {7, 7};
    assert_int_equal(pr_sink_resume_filter(&s, NULL, 0, keys, offs, 2, skip), 0);
    assert_int_equal(skip[0], 7); /* untouched */
    assert_int_equal(pr_sink_port(NULL), -1);
    assert_int_equal(pr_sink_buffered_bytes(NULL), 0);
}

/* Test sinks that record whether the batch they were given was encoded. */
static int seen_encoded[2], n_seen;

static int rec_send(pr_sink *s, pr_batch *b)
{
    (void)s;
    seen_encoded[n_seen++ % 2] = b->pb != NULL;
    return 0;
}

static int rec_poll(pr_sink *s, pr_sink_ack_cb cb, void *opaque)
{
    (void)s, (void)cb, (void)opaque;
    return 0;
}

static void rec_free(pr_sink *s)
{
    free(s);
}

static const pr_sink_ops enc_ops = {.name = "enc",
                                    .send = rec_send,
                                    .poll = rec_poll,
                                    .free_ = rec_free,
                                    .caps = PR_SINK_CAP_ENCODES};
static const pr_sink_ops plain_ops = {
    .name = "plain", .send = rec_send, .poll = rec_poll, .free_ = rec_free};

static pr_sink *rec_new(const pr_sink_ops *ops)
{
    pr_sink *s = calloc(1, sizeof(*s));
    assert_non_null(s);
    s->ops = ops;
    return s;
}

static void send_one(const pr_sink_ops *a, const pr_sink_ops *b, int want_encoded)
{
    pr_sinkset *ss = pr_sinkset_new();
    assert_non_null(ss);
    assert_int_equal(pr_sinkset_add(ss, rec_new(a)), 0);
    if (b)
        assert_int_equal(pr_sinkset_add(ss, rec_new(b)), 0);
    pr_batch *bt = pr_batch_new("p", 4, 13, 26, 8);
    assert_non_null(bt);
    bt->seq = 1;
    n_seen = 0;
    assert_int_equal(pr_sinkset_send(ss, bt), 0);
    assert_int_equal(n_seen, b ? 2 : 1);
    for (int i = 0; i < n_seen; i++)
        assert_int_equal(seen_encoded[i], want_encoded);
    assert_int_equal(bt->pb != NULL, want_encoded);
    pr_batch_unref(bt);
    pr_sinkset_free(ss);
}

static void test_who_encodes(void **state)
{
    (void)state;
    send_one(&enc_ops, NULL, 0);     /* the sink encodes, on its thread */
    send_one(&plain_ops, NULL, 1);   /* the set encodes */
    send_one(&enc_ops, &enc_ops, 1); /* shared bytes: encoded once, first */
    send_one(&enc_ops, &plain_ops, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_declarations),
        cmocka_unit_test(test_neutral_answers),
        cmocka_unit_test(test_who_encodes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
