/*
 * bench_ceiling.c — the bare-consumer ceiling: how fast the broker and
 * librdkafka deliver a topic to a consume-and-discard loop, measured beside
 * `piperec run` on the same topic (bench/bench_sweep.sh) so that the ratio
 * piperec / ceiling says how close piperec gets to what the broker and the
 * client library can deliver.
 *
 *   bench_ceiling --bootstrap HOST:PORT --topic T --group G [--consumers K]
 *                 [--messages N] [--timeout-s S] [--reset-path] [--marks PATH]
 *                 [-X key=value]...
 *
 * Each of K consumer instances (one thread and one rd_kafka_t each, all in
 * group G) is made by the project's builder (pr_kafka.h) with piperec's own
 * consumer role (PR_KAFKA_GROUP_CONSUMER: the same defaults and forced values
 * as `piperec run`'s source, the same -X properties as the run's config) and
 * loops on rd_kafka_consumer_poll, counting messages, payload bytes and rows
 * (newline-separated lines: one Criteo line or several per message) and
 * discarding them. Nothing is decoded, stored or committed.
 *
 * The end of the topic: the sum over its partitions of high - low watermark,
 * queried before subscribing (--messages N overrides it); the group starts at
 * the log start of every partition it is assigned (with --reset-path, the
 * way piperec does: assigned with no offset, each partition's
 * auto.offset.reset error answered by an unassign + assign at the log start). The clock runs from
 * the first message any instance receives to the one that completes the count (the ~3 s group join
 * before is reported as join_seconds, not counted), the way bench_stream.sh times `piperec run`.
 * With K > 1 the partitions stay paused until the group has settled (every member holds partitions
 * and all are held), so the window is the steady state, not one member reading alone until the
 * others join. CPU seconds are the process's over the same window. Prints one JSON line; progress
 * and errors go to stderr. Exit 1 on a client error or when --timeout-s (default 300) passes first.
 *
 * --marks PATH (a FIFO): the line "first CPU" is written to it when the first message comes and
 * "last CPU" when the count completes (CPU: this process's CPU seconds then), so that a watcher
 * (bench_sweep.py watch) can read the CPU time of every process on the machine (the broker's, this
 * one's) and the machine's idle time over the same window, the way the sweep's poller does for
 * `piperec run`. Opened before the clients are made (it waits for the reader); a write is one small
 * write(2), outside the loop's per-message path except at those two points.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "pr_kafka.h"

#define BC_MAX_PROPS     64
#define BC_MAX_CONSUMERS 256

typedef struct bc_args {
    const char *bootstrap, *topic, *group;
    const char *marks; /* FIFO for the window's "first" / "last" marks, or NULL */
    int consumers;
    bool reset_path;  /* start as piperec does: through the reset error */
    int64_t messages; /* 0 = the topic's watermarks */
    double timeout_s;
    pr_kv props[BC_MAX_PROPS];
    size_t n_props;
} bc_args;

/* Shared by the consumer threads. */
typedef struct bc_run {
    int64_t target;
    atomic_llong messages, rows, bytes;
    atomic_llong t_first_ns; /* 0 until the first message */
    atomic_llong t_last_ns;
    atomic_bool done, failed;
    double cpu_first; /* process CPU seconds when the first message came */
    int marks_fd;     /* --marks, or -1 */
    double deadline;
    /* K > 1: partitions stay paused until the group is settled (every member
     * holds its balanced share: P/K rounded down or up), so that no member
     * reads alone before the others join and no rebalance round falls inside
     * the window. */
    int consumers, partitions;
    struct bc_member *members;
    atomic_bool released;
    bool reset_path;
} bc_run;

typedef struct bc_member {
    bc_run *run;
    rd_kafka_t *rk;
    pthread_t tid;
    atomic_int assigned; /* partitions this member holds (set by its thread) */
    bool resumed;        /* its paused partitions were resumed */
} bc_member;

static double bc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static long long bc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double bc_cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Lines in a payload: newline-separated, the last one with or without its
 * newline (what `piperec produce --lines-per-message N` writes). */
static long long bc_rows(const char *p, size_t len)
{
    long long n = 0;
    const char *end = p + len, *q = p;
    while (q < end && (q = memchr(q, '\n', (size_t)(end - q))) != NULL) {
        n++;
        q++;
    }
    if (len && p[len - 1] != '\n')
        n++;
    return n;
}

/* Every partition assigned starts at the log start (a fresh group: what
 * auto.offset.reset=earliest does in `piperec run`, without its round trip
 * through the reset error). */
static void bc_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                            rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    bc_member *mb = opaque;
    bc_run *r = mb->run;
    bool coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
    bool assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
    int before = atomic_load(&mb->assigned), now;
    rd_kafka_error_t *e = NULL;
    if (assign) {
        for (int i = 0; i < parts->cnt && !r->reset_path; i++)
            parts->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        if (coop)
            e = rd_kafka_incremental_assign(rk, parts);
        else
            rd_kafka_assign(rk, parts);
        if (!atomic_load(&r->released))
            rd_kafka_pause_partitions(rk, parts);
        now = (coop ? before : 0) + parts->cnt;
    } else if (coop) {
        e = rd_kafka_incremental_unassign(rk, parts);
        now = before - parts->cnt;
    } else {
        rd_kafka_assign(rk, NULL);
        now = 0;
    }
    atomic_store(&mb->assigned, now);
    if (e) {
        fprintf(stderr, "bench_ceiling: rebalance: %s\n", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
}

/* One line to the --marks FIFO, "first CPU" or "last CPU" with this
 * process's CPU seconds then (the watcher may read it after this process
 * exited); a failed write (the watcher gone) only loses the accounting,
 * never the run. */
static void bc_mark(const bc_run *r, const char *what, double cpu)
{
    char line[64];
    int n = snprintf(line, sizeof(line), "%s %.6f\n", what, cpu);
    if (r->marks_fd >= 0 && write(r->marks_fd, line, (size_t)n) < 0)
        fprintf(stderr, "bench_ceiling: --marks: write failed\n");
}

static void bc_count(bc_run *r, const rd_kafka_message_t *m)
{
    long long now = bc_now_ns(), zero = 0;
    if (atomic_load(&r->t_first_ns) == 0 &&
        atomic_compare_exchange_strong(&r->t_first_ns, &zero, now)) {
        r->cpu_first = bc_cpu_seconds();
        bc_mark(r, "first", r->cpu_first);
    }
    atomic_fetch_add(&r->rows, bc_rows(m->payload, m->len));
    atomic_fetch_add(&r->bytes, (long long)m->len);
    if (atomic_fetch_add(&r->messages, 1) + 1 == r->target) {
        atomic_store(&r->t_last_ns, bc_now_ns());
        bc_mark(r, "last", bc_cpu_seconds());
        atomic_store(&r->done, true);
    }
}

/* --reset-path: piperec's consumer runs with auto.offset.reset=error and
 * restarts a partition with no committed offset itself, by an incremental
 * unassign + assign at the log start (ingest/consumer.c); this does the
 * same, so that the ceiling can be measured with piperec's start path too. */
static void bc_reset(rd_kafka_t *rk, const rd_kafka_message_t *m)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, rd_kafka_topic_name(m->rkt), m->partition);
    rd_kafka_error_t *e = rd_kafka_incremental_unassign(rk, l);
    if (!e) {
        l->elems[0].offset = RD_KAFKA_OFFSET_BEGINNING;
        e = rd_kafka_incremental_assign(rk, l);
    }
    if (e) {
        fprintf(stderr, "bench_ceiling: reset: %s\n", rd_kafka_error_string(e));
        rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Once the group is settled, every member resumes what it holds. */
static void bc_release(bc_member *mb)
{
    bc_run *r = mb->run;
    if (!atomic_load(&r->released)) {
        int lo = r->partitions / r->consumers,
            hi = (r->partitions + r->consumers - 1) / r->consumers;
        int total = 0;
        bool balanced = true;
        for (int i = 0; i < r->consumers; i++) {
            int n = atomic_load(&r->members[i].assigned);
            total += n;
            balanced = balanced && n >= lo && n <= hi;
        }
        if (balanced && total == r->partitions)
            atomic_store(&r->released, true);
    }
    if (atomic_load(&r->released) && !mb->resumed) {
        rd_kafka_topic_partition_list_t *l = NULL;
        if (!rd_kafka_assignment(mb->rk, &l) && l) {
            rd_kafka_resume_partitions(mb->rk, l);
            rd_kafka_topic_partition_list_destroy(l);
        }
        mb->resumed = true;
    }
}

static void *bc_loop(void *arg)
{
    bc_member *mb = arg;
    bc_run *r = mb->run;
    while (!atomic_load(&r->done) && !atomic_load(&r->failed)) {
        bc_release(mb);
        rd_kafka_message_t *m = rd_kafka_consumer_poll(mb->rk, mb->resumed ? 100 : 10);
        if (!m) {
            if (bc_now() > r->deadline) {
                fprintf(stderr, "bench_ceiling: timed out at %lld of %" PRId64 " messages\n",
                        (long long)atomic_load(&r->messages), r->target);
                atomic_store(&r->failed, true);
            }
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET && m->rkt)
            bc_reset(mb->rk, m);
        else if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
            ; /* the role's enable.partition.eof: a partition's end, no error */
        else if (m->err)
            fprintf(stderr, "bench_ceiling: %s\n", rd_kafka_message_errstr(m));
        else
            bc_count(r, m);
        rd_kafka_message_destroy(m);
    }
    return NULL;
}

/* The --marks FIFO for writing, waiting up to 30 s for its reader (a plain
 * open would wait forever if the watcher never came); blocking once open. */
static int bc_open_marks(const char *path)
{
    for (int waited_ms = 0;; waited_ms += 10) {
        int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
                close(fd);
                return -1;
            }
            return fd;
        }
        if (errno != ENXIO || waited_ms >= 30000)
            return -1; /* ENXIO: still no reader after 30 s */
        usleep(10000);
    }
}

/* Sum of high - low watermarks over the topic's partitions; -1 on error. */
static int64_t bc_topic_size(rd_kafka_t *rk, const char *topic, int *n_parts)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    int64_t total = -1;
    if (rkt && rd_kafka_metadata(rk, 0, rkt, &md, 10000) == RD_KAFKA_RESP_ERR_NO_ERROR &&
        md->topic_cnt == 1 && !md->topics[0].err) {
        total = 0;
        *n_parts = md->topics[0].partition_cnt;
        for (int i = 0; i < md->topics[0].partition_cnt && total >= 0; i++) {
            int64_t lo, hi;
            if (rd_kafka_query_watermark_offsets(rk, topic, md->topics[0].partitions[i].id, &lo,
                                                 &hi, 10000))
                total = -1;
            else
                total += hi - lo;
        }
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return total;
}

static int bc_new_member(const bc_args *a, bc_member *mb)
{
    char errstr[512];
    pr_kv defaults[] = {{"bootstrap.servers", a->bootstrap}};
    pr_kv set[] = {{"group.id", a->group}};
    pr_kafka_client_conf cc = {.role = PR_KAFKA_GROUP_CONSUMER,
                               .props = a->props,
                               .n_props = a->n_props,
                               .defaults = defaults,
                               .n_defaults = 1,
                               .set = set,
                               .n_set = 1,
                               .opaque = mb,
                               .rebalance_cb = bc_rebalance_cb};
    if (pr_kafka_client_new(&cc, &mb->rk, errstr, sizeof(errstr))) {
        fprintf(stderr, "bench_ceiling: %s\n", errstr);
        return -1;
    }
    rd_kafka_poll_set_consumer(mb->rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, a->topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t err = rd_kafka_subscribe(mb->rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (err) {
        fprintf(stderr, "bench_ceiling: subscribe: %s\n", rd_kafka_err2str(err));
        return -1;
    }
    return 0;
}

static void bc_usage(void)
{
    fprintf(stderr, "usage: bench_ceiling --bootstrap HOST:PORT --topic T --group G\n"
                    "                     [--consumers K] [--messages N] [--timeout-s S]\n"
                    "                     [--reset-path] [--marks FIFO]\n"
                    "                     [-X key=value]...\n");
}

/* -X key=value: the string is split in place (argv outlives the run). */
static int bc_add_prop(bc_args *a, char *kv)
{
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv || a->n_props == BC_MAX_PROPS) {
        fprintf(stderr, "bench_ceiling: -X: expected key=value, got '%s'\n", kv);
        return -1;
    }
    *eq = '\0';
    a->props[a->n_props++] = (pr_kv){kv, eq + 1};
    return 0;
}

static int bc_parse(int argc, char **argv, bc_args *a)
{
    static const struct option opts[] = {{"bootstrap", required_argument, NULL, 'b'},
                                         {"topic", required_argument, NULL, 't'},
                                         {"group", required_argument, NULL, 'g'},
                                         {"consumers", required_argument, NULL, 'k'},
                                         {"messages", required_argument, NULL, 'n'},
                                         {"timeout-s", required_argument, NULL, 'T'},
                                         {"reset-path", no_argument, NULL, 'r'},
                                         {"marks", required_argument, NULL, 'm'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int ch;
    *a = (bc_args){.consumers = 1, .timeout_s = 300};
    while ((ch = getopt_long(argc, argv, "X:", opts, NULL)) != -1) {
        switch (ch) {
        case 'b':
            a->bootstrap = optarg;
            break;
        case 't':
            a->topic = optarg;
            break;
        case 'g':
            a->group = optarg;
            break;
        case 'k':
            a->consumers = atoi(optarg);
            break;
        case 'n':
            a->messages = strtoll(optarg, NULL, 10);
            break;
        case 'T':
            a->timeout_s = atof(optarg);
            break;
        case 'r':
            a->reset_path = true;
            break;
        case 'm':
            a->marks = optarg;
            break;
        case 'X':
            if (bc_add_prop(a, optarg))
                return -1;
            break;
        default:
            bc_usage();
            return -1;
        }
    }
    if (!a->bootstrap || !a->topic || !a->group || a->consumers < 1 ||
        a->consumers > BC_MAX_CONSUMERS || a->messages < 0) {
        bc_usage();
        return -1;
    }
    return 0;
}

static void bc_report(const bc_args *a, bc_run *r, int n_parts, double t_subscribe)
{
    double s = (double)(atomic_load(&r->t_last_ns) - atomic_load(&r->t_first_ns)) * 1e-9;
    double join = (double)atomic_load(&r->t_first_ns) * 1e-9 - t_subscribe;
    double cpu = bc_cpu_seconds() - r->cpu_first;
    long long msgs = atomic_load(&r->messages), rows = atomic_load(&r->rows);
    if (s <= 0)
        s = 1e-9;
    printf("{\"bench\": \"ceiling\", \"topic\": \"%s\", \"consumers\": %d, \"partitions\": %d, "
           "\"messages\": %lld, \"rows\": %lld, \"bytes\": %lld, \"seconds\": %.3f, "
           "\"msgs_per_s\": %.0f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f, "
           "\"cpu_seconds\": %.2f, \"join_seconds\": %.2f, \"reset_path\": %s, "
           "\"loop\": \"rd_kafka_consumer_poll, count, discard (PR_KAFKA_GROUP_CONSUMER)\"}\n",
           a->topic, a->consumers, n_parts, msgs, rows, (long long)atomic_load(&r->bytes), s,
           (double)msgs / s, (double)rows / s, (double)atomic_load(&r->bytes) / s / 1e6, cpu, join,
           a->reset_path ? "true" : "false");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    bc_args a;
    static bc_run run;
    static bc_member members[BC_MAX_CONSUMERS];
    int n_parts = 0, started = 0, rc = 1;
    if (bc_parse(argc, argv, &a))
        return 2;
    run.marks_fd = -1;
    if (a.marks) {
        signal(SIGPIPE, SIG_IGN); /* a watcher that left: the write fails, the run goes on */
        run.marks_fd = bc_open_marks(a.marks);
        if (run.marks_fd < 0) {
            fprintf(stderr, "bench_ceiling: --marks %s: %s\n", a.marks,
                    errno == ENXIO ? "no reader opened the FIFO within 30 s" : strerror(errno));
            return 1;
        }
    }
    for (int i = 0; i < a.consumers; i++) {
        members[i].run = &run;
        if (bc_new_member(&a, &members[i]))
            goto out;
        started = i + 1;
    }
    run.target = bc_topic_size(members[0].rk, a.topic, &n_parts);
    if (a.messages)
        run.target = a.messages;
    if (run.target <= 0) {
        fprintf(stderr, "bench_ceiling: topic %s: nothing to read (or its watermarks failed)\n",
                a.topic);
        goto out;
    }
    fprintf(stderr, "bench_ceiling: %d consumer(s), %s: %" PRId64 " messages in %d partitions\n",
            a.consumers, a.topic, run.target, n_parts);
    run.consumers = a.consumers;
    run.reset_path = a.reset_path;
    run.members = members;
    run.partitions = n_parts;
    /* One member needs no settling; nor can more members than partitions
     * all hold one. */
    if (a.consumers == 1 || a.consumers > n_parts)
        atomic_store(&run.released, true);
    double t_subscribe = bc_now();
    run.deadline = t_subscribe + a.timeout_s;
    for (int i = 0; i < a.consumers; i++)
        pthread_create(&members[i].tid, NULL, bc_loop, &members[i]);
    for (int i = 0; i < a.consumers; i++)
        pthread_join(members[i].tid, NULL);
    if (!atomic_load(&run.failed)) {
        bc_report(&a, &run, n_parts, t_subscribe);
        rc = 0;
    }
    /* The watcher reads this process's threads in /proc after "last": stay
     * a moment (outside the window) so that they are still there. */
    if (run.marks_fd >= 0)
        nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL);
out:
    for (int i = 0; i < started; i++) {
        rd_kafka_consumer_close(members[i].rk);
        rd_kafka_destroy(members[i].rk);
    }
    if (run.marks_fd >= 0)
        close(run.marks_fd);
    return rc;
}
