/*
 * test_sink_caps.c — the sink table's capability declarations (pr_sink.h,
 * issue 18 item 4): the core dispatches on them, so a declared capability
 * must come with its callbacks, and the config switch each sink names must
 * be its own. Then the neutral answers of the capability calls for a sink
 * without the capability (a test sink declared here, which does no I/O).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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
                                                   PR_SINK_CAP_CHECKPOINT | PR_SINK_CAP_LISTENER);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_declarations),
        cmocka_unit_test(test_neutral_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
