/*
 * test_dlq_file.c — the dead-letter file without a topic (pr_dlq_new_file)
 * and the rate-limited log's suppressed count, in-process (no broker).
 *
 * A user audit found that without source.dead_letter_topic rejected records
 * were only counted and logged, the log capped at 5 lines a second and its
 * "(N similar messages suppressed)" said only by a later warning: a burst
 * that ended was never reported, and the records were nowhere. Here: every
 * letter lands in the file with its reason and exact bytes; its offset is
 * held until the file is fsync'd; the file rotates once at its cap with the
 * dropped letters counted; a write that fails stops the producer with the
 * offset still held; and a burst's suppressed count is said once its
 * window closed, with no later message (time driven by the bucket's window,
 * never by a sleep).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "pr_ingest.h"
#include "pr_log.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        *n = 0;
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void tmp_path(char *dir, size_t n, char *path, size_t pn)
{
    snprintf(dir, n, "/tmp/pr-dlqf-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(path, pn, "%s/p.deadletters", dir);
}

/* Letters with their reasons and exact bytes (a NUL, a tab and a newline in
 * the payload, a tab in the detail), each holding its offset until the fsync. */
static void test_letters_held_until_fsync(void **state)
{
    (void)state;
    char dir[64], path[128], errstr[256];
    tmp_path(dir, sizeof(dir), path, sizeof(path));
    pr_dlq *d = pr_dlq_new_file(path, 0, errstr, sizeof(errstr));
    assert_non_null(d);
    static const char bin[] = {'a', 0, '\t', 'b', '\n', 'c'};
    assert_int_equal(pr_dlq_send(d, 3, bin, sizeof(bin), "bad_dense", "col\tI2", "ev", 3, 17, -1),
                     0);
    assert_int_equal(pr_dlq_send(d, 3, "x", 1, "field_count", "2 fields", "ev", 3, 12, 4), 0);
    assert_int_equal(pr_dlq_send(d, 5, "", 0, "empty", "empty message", "ev", 5, 40, -1), 0);
    /* Written as they come, durable only after the fsync: held until then. */
    assert_int_equal(pr_dlq_hold(d, 3), 12);
    assert_int_equal(pr_dlq_hold(d, 5), 40);
    assert_int_equal(pr_dlq_hold(d, 4), INT64_MAX);
    assert_int_equal(pr_dlq_sync(d), 0);
    assert_int_equal(pr_dlq_hold(d, 3), INT64_MAX);
    assert_int_equal(pr_dlq_hold(d, 5), INT64_MAX);

    /* pr_dlq_poll fsyncs at most every 100 ms: right after a sync, a new
     * letter stays held (checked only when this thread was not stalled). */
    int64_t t0 = pr_mono_ns();
    assert_int_equal(pr_dlq_send(d, 3, "yz", 2, "bad_hex", "C1", "ev", 3, 20, -1), 0);
    pr_dlq_poll(d);
    if (pr_mono_ns() - t0 < 50000000LL)
        assert_int_equal(pr_dlq_hold(d, 3), 20);
    assert_int_equal(pr_dlq_flush(d, 1000), 0); /* the drain's flush syncs too */
    assert_int_equal(pr_dlq_hold(d, 3), INT64_MAX);
    pr_dlq_stats st;
    pr_dlq_get_stats(d, &st);
    assert_int_equal(st.to_file, 4);
    assert_int_equal(st.file_dropped, 0);
    assert_null(pr_dlq_fatal(d));
    pr_dlq_free(d);

    size_t n;
    char *got = slurp(path, &n);
    static const char want_head[] =
        "piperec-dead-letter\tbad_dense\tev\t3\t17\t-1\t6\tcol I2\tno dead_letter_topic\n";
    char want[512];
    size_t w = 0;
    memcpy(want + w, want_head, sizeof(want_head) - 1);
    w += sizeof(want_head) - 1;
    memcpy(want + w, bin, sizeof(bin));
    w += sizeof(bin);
    w += (size_t)sprintf(want + w,
                         "\npiperec-dead-letter\tfield_count\tev\t3\t12\t4\t1\t2 fields\tno "
                         "dead_letter_topic\nx\n"
                         "piperec-dead-letter\tempty\tev\t5\t40\t-1\t0\tempty message\tno "
                         "dead_letter_topic\n\n"
                         "piperec-dead-letter\tbad_hex\tev\t3\t20\t-1\t2\tC1\tno "
                         "dead_letter_topic\nyz\n");
    assert_int_equal(n, w);
    assert_memory_equal(got, want, w);
    free(got);
    unlink(path);
    rmdir(dir);
}

/* Letters of offsets [from, to) on partition key 0, each `len` bytes. */
static void send_range(pr_dlq *d, const char *payload, size_t len, int from, int to)
{
    for (int i = from; i < to; i++)
        assert_int_equal(pr_dlq_send(d, 0, payload, len, "bad_hex", "C1", "ev", 0, i, -1), 0);
}

/* At the cap the file becomes <file>.1 once; the next rotation drops that
 * .1, its letters counted. A restart counts the letters of files it found. */
static void test_rotation_at_cap(void **state)
{
    (void)state;
    char dir[64], path[128], path1[140], errstr[256];
    tmp_path(dir, sizeof(dir), path, sizeof(path));
    snprintf(path1, sizeof(path1), "%s.1", path);
    char payload[1000];
    memset(payload, 'p', sizeof(payload));
    /* ~1070 bytes a letter, a 4 KiB cap: 3 letters a file. */
    pr_dlq *d = pr_dlq_new_file(path, 4096, errstr, sizeof(errstr));
    assert_non_null(d);
    send_range(d, payload, sizeof(payload), 0, 3);
    assert_int_equal(pr_dlq_sync(d), 0);
    /* The letter that rotates the file holds its offset until the next
     * fsync like any other (the rotation's own fsync released the rest). */
    send_range(d, payload, sizeof(payload), 3, 4);
    assert_int_equal(pr_dlq_hold(d, 0), 3);
    send_range(d, payload, sizeof(payload), 4, 7);
    assert_int_equal(pr_dlq_sync(d), 0);
    assert_int_equal(pr_dlq_hold(d, 0), INT64_MAX);
    pr_dlq_stats st;
    pr_dlq_get_stats(d, &st);
    assert_int_equal(st.to_file, 7);
    assert_int_equal(st.file_dropped, 3); /* letters 0-2: rotated out twice */
    pr_dlq_free(d);
    size_t n, n1;
    char *cur = slurp(path, &n), *old = slurp(path1, &n1);
    assert_true(n <= 4096 && n1 <= 4096);
    assert_non_null(strstr(cur, "\tev\t0\t6\t-1\t1000\t")); /* letter 6 */
    assert_null(strstr(cur, "\tev\t0\t5\t-1\t"));
    assert_non_null(strstr(old, "\tev\t0\t3\t-1\t1000\t")); /* letters 3-5 */
    assert_non_null(strstr(old, "\tev\t0\t5\t-1\t1000\t"));
    free(cur);
    free(old);

    /* A new producer on the same files: .1's 3 letters are counted when it
     * goes (its count unknown until then). */
    d = pr_dlq_new_file(path, 4096, errstr, sizeof(errstr));
    assert_non_null(d);
    send_range(d, payload, sizeof(payload), 7, 10);
    assert_int_equal(pr_dlq_sync(d), 0);
    pr_dlq_get_stats(d, &st);
    assert_int_equal(st.file_dropped, 3);
    pr_dlq_free(d);
    unlink(path);
    unlink(path1);
    rmdir(dir);
}

/* A file that cannot be written: fatal, naming it; the offset stays held
 * (a later sync never releases it). */
static void test_unwritable_file_holds(void **state)
{
    (void)state;
    char errstr[256];
    pr_dlq *d = pr_dlq_new_file("/nonexistent-dir/p.deadletters", 0, errstr, sizeof(errstr));
    assert_non_null(d);
    assert_int_equal(pr_dlq_send(d, 2, "x", 1, "bad_hex", "C1", "ev", 2, 9, -1), PR_EIO);
    assert_non_null(pr_dlq_fatal(d));
    assert_non_null(strstr(pr_dlq_fatal(d), "/nonexistent-dir/p.deadletters"));
    assert_int_equal(pr_dlq_sync(d), PR_EIO);
    assert_int_equal(pr_dlq_hold(d, 2), 9);
    pr_dlq_free(d);
}

/* A burst of 8 warnings in one window (5 a second let through) and none
 * after: the 3 suppressed are said by the flush once the window closed,
 * not before, and only once. */
static void test_suppressed_count_flushed(void **state)
{
    (void)state;
    char log[] = "/tmp/pr-rl-XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    assert_int_equal(dup2(fd, 2), 2);
    pr_ratelimit rl = PR_RATELIMIT_INIT(5);
    for (int i = 0; i < 8; i++)
        pr_log_ratelimited(&rl, PR_LOG_WARN, "reject %d", i);
    if (rl.window_s == (int64_t)time(NULL)) /* the burst's window still open */
        assert_int_equal(pr_log_ratelimited_flush(&rl, PR_LOG_WARN, "consumer: rejects", false), 0);
    uint64_t suppressed = rl.suppressed; /* 3, or fewer when a second ticked mid-burst */
    assert_true(suppressed > 0 && suppressed <= 3);
    rl.window_s -= 1; /* the window closes */
    assert_int_equal(pr_log_ratelimited_flush(&rl, PR_LOG_WARN, "consumer: rejects", false),
                     suppressed);
    assert_int_equal(pr_log_ratelimited_flush(&rl, PR_LOG_WARN, "consumer: rejects", true), 0);
    /* At stop, `now` says what the open window holds. */
    rl.window_s = (int64_t)time(NULL);
    rl.used = 5;
    pr_log_ratelimited(&rl, PR_LOG_WARN, "reject 9");
    assert_int_equal(pr_log_ratelimited_flush(&rl, PR_LOG_WARN, "at stop", true), 1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t n;
    char *text = slurp(log, &n);
    char want[128];
    snprintf(want, sizeof(want), "consumer: rejects: %llu similar messages suppressed\n",
             (unsigned long long)suppressed);
    assert_non_null(strstr(text, want));
    assert_non_null(strstr(text, "at stop: 1 similar messages suppressed\n"));
    free(text);
    unlink(log);
}

int main(void)
{
    pr_log_set_level(PR_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_letters_held_until_fsync),
        cmocka_unit_test(test_rotation_at_cap),
        cmocka_unit_test(test_unwritable_file_holds),
        cmocka_unit_test(test_suppressed_count_flushed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
