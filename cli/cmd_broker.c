/*
 * cmd_broker.c — `piperec broker [--partitions N] [--topics a,b]`: a TEST
 * Kafka broker on loopback (librdkafka's mock cluster, ingest/mock.c).
 *
 * The first stdout line is `bootstrap=HOST:PORT`, flushed at once, so a
 * script can start it in the background and read the address; then it runs
 * until SIGINT/SIGTERM. SIGUSR1 takes the broker down (connections closed,
 * new ones refused) and SIGUSR2 brings it back, for outage tests
 * (tests/fault/). Any Kafka client (kcat, confluent-kafka, piperec
 * itself) can produce and consume; it has no durability, no SSL/SASL and
 * keeps only ~5 MB per partition.
 */
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pr_cli.h"
#include "pr_ingest.h"
#include "pr_log.h"

static void pr__broker_usage(FILE *f)
{
    fprintf(f, "usage: piperec broker [--partitions N] [--topics a,b,...]\n"
               "\n"
               "Starts a TEST Kafka broker on 127.0.0.1 (librdkafka's mock cluster) and\n"
               "prints `bootstrap=HOST:PORT` as the first line of stdout; runs until\n"
               "SIGINT/SIGTERM; SIGUSR1 takes it down (an outage: connections closed,\n"
               "new ones refused, data kept), SIGUSR2 brings it back. For tests and demos only: no "
               "durability (everything is\n"
               "in memory and gone at exit), no SSL/SASL, and only the last ~5 MB of\n"
               "each partition are kept, so consume while you produce. Production\n"
               "uses a real Kafka cluster.\n"
               "\n"
               "  --partitions N   partitions per created topic (default 3)\n"
               "  --topics LIST    comma-separated topics to create up front (default\n"
               "                   \"events\"); NAME:N gives one topic N partitions (a\n"
               "                   vocab_log topic needs 1: --topics events,vocab:1); other\n"
               "                   topics are auto-created on first use by producers\n"
               "                   with the mock's default partition count\n");
}

int pr_cli_cmd_broker(int argc, char **argv)
{
    static const struct option opts[] = {
        {"partitions", required_argument, NULL, 'p'},
        {"topics", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int partitions = 3;
    const char *topics = "events";
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "p:t:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'p': {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 10000) {
                fprintf(stderr, "piperec broker: --partitions: expected 1..10000, got '%s'\n",
                        optarg);
                return 2;
            }
            partitions = (int)v;
            break;
        }
        case 't':
            topics = optarg;
            break;
        case 'h':
            pr__broker_usage(stdout);
            return 0;
        default:
            pr__broker_usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "piperec broker: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }

    /* Block the signals before librdkafka starts its threads, so they all
     * inherit the mask and this thread receives them. */
    sigset_t set;
    pr_cli_block_signals(&set);
    sigset_t ctl;
    sigemptyset(&ctl);
    sigaddset(&ctl, SIGUSR1);
    sigaddset(&ctl, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &ctl, NULL);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    char errstr[512];
    pr_mock_broker *mb = pr_mock_broker_start(partitions, topics, errstr, sizeof(errstr));
    if (!mb) {
        fprintf(stderr, "piperec broker: %s\n", errstr);
        return 1;
    }
    printf("bootstrap=%s\n", pr_mock_broker_bootstrap(mb));
    fflush(stdout);
    pr_info("test broker up at %s: topics %s (NAME:N has N partitions, the others %d) (no "
            "durability, ~5 MB per partition)",
            pr_mock_broker_bootstrap(mb), topics, partitions);
    int sig;
    for (;;) {
        sig = pr_cli_wait_signal(&set, 1000);
        if (sig != SIGUSR1 && sig != SIGUSR2) {
            if (sig)
                break;
            continue;
        }
        bool down = sig == SIGUSR1;
        if (pr_mock_broker_set_down(mb, down, errstr, sizeof(errstr)))
            pr_err("broker: %s", errstr);
        else
            pr_info("broker: %s", down ? "down (SIGUSR1): connections closed and refused"
                                       : "up (SIGUSR2): accepting connections");
    }
    pr_info("broker: signal %d, stopping", sig);
    pr_mock_broker_stop(mb);
    return 0;
}
