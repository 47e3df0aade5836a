/*
 * bt_serve.c — test tool for the batcher script tests.
 *
 *   bt_serve files DIR N ROLL      write N synthetic batches through the files sink
 *   bt_serve trainer N CMD [ARG..] serve N synthetic batches on a trainer sink
 *                                  (127.0.0.1, port in $BT_PORT for CMD), run CMD,
 *                                  exit 0 when CMD exits 0 and every batch was
 *                                  acked exactly once. BT_TLS_CERT/BT_TLS_KEY
 *                                  (+ BT_TLS_CA: mutual TLS) and BT_TOKEN_FILE
 *                                  turn on TLS and token auth.
 *
 * Synthetic batch `s` (pipeline "bt", 4 rows, 3 dense, 2 sparse int32): row i
 * has global index g = (s-1)*4 + i, label g % 2, dense[c] = g + 0.5*c,
 * sparse[c] = 10*g + c; one offset range: partition 0, offsets g0..g0+3.
 * The scripts recompute these values to check what their client received.
 *
 * BT_JAGGED=1: jagged batches instead (a declared schema, issue 20): labels
 * click = g % 2 and buy = (g % 3 == 0), dense price = g + 0.25 and 2g,
 * features user (one value, 10*g) and hist (a list of g % 3 values,
 * 100*g + j), vocab sizes 100+s and 200+s; same offsets. BT_TABLES=1 with
 * it: hist shares user's vocabulary (feature_tables user, user).
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pr_sink.h"

#define ROWS 4

static bool jagged;
static const char *const jag_labels[] = {"click", "buy"};
static const char *const jag_dense[] = {"price", "twice"};
static const char *const jag_keys[] = {"user", "hist"};

static pr_batch *make_jagged(uint64_t s)
{
    uint64_t g0 = (s - 1) * ROWS, nv = ROWS;
    for (uint32_t i = 0; i < ROWS; i++)
        nv += (g0 + i) % 3;
    pr_batch *b = pr_batch_new_jagged("bt", ROWS, 2, 2, 2, nv);
    b->label_names = calloc(2, PR_NAME_MAX);
    b->dense_names = calloc(2, PR_NAME_MAX);
    for (int k = 0; k < 2; k++) {
        snprintf(b->label_names[k], PR_NAME_MAX, "%s", jag_labels[k]);
        snprintf(b->dense_names[k], PR_NAME_MAX, "%s", jag_dense[k]);
        snprintf(b->feature_keys[k], PR_NAME_MAX, "%s", jag_keys[k]);
    }
    if (getenv("BT_TABLES") && !strcmp(getenv("BT_TABLES"), "1") &&
        (b->feature_tables = calloc(2, PR_NAME_MAX))) /* hist in user's table */
        for (int k = 0; k < 2; k++)
            snprintf(b->feature_tables[k], PR_NAME_MAX, "user");
    uint64_t at = 0;
    for (uint32_t i = 0; i < ROWS; i++) {
        uint64_t g = g0 + i;
        b->label_mat[i * 2] = (float)(g % 2);
        b->label_mat[i * 2 + 1] = g % 3 == 0 ? 1.0f : 0.0f;
        b->dense_mat[i * 2] = (float)g + 0.25f;
        b->dense_mat[i * 2 + 1] = 2.0f * (float)g;
        b->lengths[i] = 1;
        b->values[at++] = (int64_t)(10 * g);
    }
    for (uint32_t i = 0; i < ROWS; i++) {
        uint64_t g = g0 + i;
        b->lengths[ROWS + i] = (int32_t)(g % 3);
        for (uint64_t j = 0; j < g % 3; j++)
            b->values[at++] = (int64_t)(100 * g + j);
    }
    return b;
}

static pr_batch *make_batch(uint64_t s)
{
    pr_batch *b = jagged ? make_jagged(s) : pr_batch_new("bt", ROWS, 3, 2, 4);
    b->seq = s;
    uint64_t g0 = (s - 1) * ROWS;
    for (uint32_t i = 0; i < ROWS && !jagged; i++) {
        uint64_t g = g0 + i;
        b->labels[i] = (int32_t)(g % 2);
        for (int c = 0; c < 3; c++)
            b->dense[c * ROWS + i] = (float)g + 0.5f * (float)c;
        for (int c = 0; c < 2; c++)
            ((int32_t *)b->sparse)[c * ROWS + i] = (int32_t)(10 * g + (uint64_t)c);
    }
    b->ranges = calloc(1, sizeof(pr_batch_range));
    b->ranges[0] = (pr_batch_range){0, (int64_t)g0, (int64_t)g0 + ROWS - 1, ROWS};
    b->n_ranges = 1;
    b->topics = calloc(1, sizeof(char *));
    b->topics[0] = strdup("events");
    b->n_topics = 1;
    b->min_event_time_ms = 1700000000000LL + (int64_t)g0;
    b->max_event_time_ms = b->min_event_time_ms + ROWS - 1;
    b->emit_time_ms = 1700000001000LL;
    b->vocab_sizes[0] = 100 + s;
    b->vocab_sizes[1] = 200 + s;
    return b;
}

static int seen[100001];
static uint64_t n_acked, dup_acks;

static void on_ack(void *opaque, uint64_t seq)
{
    (void)opaque;
    if (seq < 100001 && seen[seq]++)
        dup_acks++;
    n_acked++;
}

static int run_files(const char *dir, uint64_t n, uint32_t roll)
{
    const char *sn[] = {"C1", "C2"};
    pr_sink_cfg cfg = {
        .pipeline = "bt", .n_dense = 3, .n_sparse = 2, .sparse_width = 4, .sparse_names = sn};
    cfg.files.dir = dir;
    cfg.files.roll_batches = roll;
    cfg.files.roll_max_ms = 1;
    pr_sink *s;
    char err[512];
    if (pr_sink_new(&pr_sink_files_ops, &cfg, &s, err, sizeof(err))) {
        fprintf(stderr, "bt_serve: %s\n", err);
        return 1;
    }
    pr_sinkset *ss = pr_sinkset_new();
    pr_sinkset_add(ss, s);
    for (uint64_t i = 1; i <= n; i++) {
        pr_batch *b = make_batch(i);
        if (pr_sinkset_send(ss, b)) {
            pr_batch_unref(b);
            return 1;
        }
        pr_batch_unref(b);
        pr_sinkset_poll(ss, on_ack, NULL);
    }
    for (int i = 0; i < 1000 && n_acked < n; i++) {
        poll(NULL, 0, 2);
        pr_sinkset_poll(ss, on_ack, NULL);
    }
    pr_sinkset_free(ss);
    if (n_acked != n || dup_acks) {
        fprintf(stderr, "bt_serve: %llu of %llu batches acked (%llu twice)\n",
                (unsigned long long)n_acked, (unsigned long long)n, (unsigned long long)dup_acks);
        return 1;
    }
    return 0;
}

static int run_trainer(uint64_t n, char **cmd)
{
    pr_sink_cfg cfg = {.pipeline = "bt", .n_dense = 3, .n_sparse = 2, .sparse_width = 4};
    cfg.trainer.listen = "127.0.0.1:0";
    cfg.trainer.keepalive_ms = 200; /* exercise pings */
    /* TLS and token auth for the security script test (unset: plain TCP). */
    cfg.trainer.tls.cert_file = getenv("BT_TLS_CERT");
    cfg.trainer.tls.key_file = getenv("BT_TLS_KEY");
    cfg.trainer.tls.ca_file = getenv("BT_TLS_CA");
    cfg.trainer.tls.enabled = cfg.trainer.tls.cert_file != NULL;
    cfg.trainer.auth.token_file = getenv("BT_TOKEN_FILE");
    cfg.trainer.unix_path = getenv("BT_UNIX"); /* also a Unix domain socket (unix:PATH) */
    pr_sink *s;
    char err[512];
    if (pr_sink_new(&pr_sink_trainer_ops, &cfg, &s, err, sizeof(err))) {
        fprintf(stderr, "bt_serve: %s\n", err);
        return 1;
    }
    pr_sinkset *ss = pr_sinkset_new();
    pr_sinkset_add(ss, s);
    for (uint64_t i = 1; i <= n; i++) {
        pr_batch *b = make_batch(i);
        pr_sinkset_send(ss, b);
        pr_batch_unref(b);
    }
    char port[16];
    snprintf(port, sizeof(port), "%d", pr_sink_port(s));
    setenv("BT_PORT", port, 1);
    pid_t pid = fork();
    if (pid == 0) {
        execvp(cmd[0], cmd);
        perror(cmd[0]);
        _exit(127);
    }
    int status = 0, done = 0;
    for (int i = 0; i < 60000; i++) { /* 5 min hard limit */
        pr_sinkset_poll(ss, on_ack, NULL);
        if (!done && waitpid(pid, &status, WNOHANG) == pid)
            done = i;
        if (done && (n_acked >= n || i - done > 400))
            break;
        poll(NULL, 0, 5);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fprintf(stderr, "bt_serve: client did not finish\n");
    }
    pr_sinkset_poll(ss, on_ack, NULL);
    pr_sinkset_free(ss);
    int rc = done && WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (rc != 0) {
        fprintf(stderr, "bt_serve: client exited with %d\n", rc);
        return 1;
    }
    if (n_acked != n || dup_acks) {
        fprintf(stderr, "bt_serve: %llu of %llu batches acked (%llu twice)\n",
                (unsigned long long)n_acked, (unsigned long long)n, (unsigned long long)dup_acks);
        return 1;
    }
    printf("bt_serve: all %llu batches acked exactly once\n", (unsigned long long)n);
    return 0;
}

int main(int argc, char **argv)
{
    jagged = getenv("BT_JAGGED") && !strcmp(getenv("BT_JAGGED"), "1");
    if (argc >= 5 && !strcmp(argv[1], "files"))
        return run_files(argv[2], strtoull(argv[3], NULL, 10), (uint32_t)atoi(argv[4]));
    if (argc >= 4 && !strcmp(argv[1], "trainer"))
        return run_trainer(strtoull(argv[2], NULL, 10), argv + 3);
    fprintf(stderr, "usage: bt_serve files DIR N ROLL | bt_serve trainer N CMD [ARGS...]\n");
    return 2;
}
