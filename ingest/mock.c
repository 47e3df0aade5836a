/*
 * mock.c — a loopback TEST broker: librdkafka's mock cluster behind a tiny
 * API, for tests, `piperec broker` and `piperec demo`.
 *
 * Shape: the mock cluster needs an rd_kafka_t to live in; a producer handle
 * that never produces hosts it. One broker (ids from 1), topics created up
 * front with the requested partition count so consumers see the intended
 * layout instead of the mock's auto-created default. No durability, no
 * SSL/SASL, ~5 MB kept per partition: production uses a real Kafka cluster.
 */
#include <stdlib.h>
#include <string.h>

#include "pr_ingest.h" /* brings rdkafka.h, which rdkafka_mock.h needs first */

#include <librdkafka/rdkafka_mock.h>

struct pr_mock_broker {
    rd_kafka_t *rk;
    rd_kafka_mock_cluster_t *mc;
    char *bootstrap;
};

int pr_mock_broker_create_topic(pr_mock_broker *mb, const char *topic, int partitions, char *errstr,
                                size_t errstr_size)
{
    if (!topic || !*topic || partitions < 1)
        return pr_seterr(errstr, errstr_size, PR_EINVAL,
                         "mock broker: topic needs a name and >= 1 partition");
    rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mb->mc, topic, partitions, 1);
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "mock broker: create topic %s: %s", topic,
                         rd_kafka_err2str(err));
    return 0;
}

pr_mock_broker *pr_mock_broker_start(int partitions, const char *topics_csv, char *errstr,
                                     size_t errstr_size)
{
    pr_mock_broker *mb = calloc(1, sizeof(*mb));
    if (!mb) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "mock broker: out of memory");
        return NULL;
    }
    /* The host handle talks to nobody (pr_kafka.h's PR_KAFKA_TEST_BROKER). */
    pr_kafka_client_conf cc = {.role = PR_KAFKA_TEST_BROKER};
    if (pr_kafka_client_new(&cc, &mb->rk, errstr, errstr_size))
        goto out_free;
    mb->mc = rd_kafka_mock_cluster_new(mb->rk, 1);
    if (!mb->mc) {
        pr_seterr(errstr, errstr_size, PR_EKAFKA, "mock broker: cannot start the mock cluster");
        goto out_rk;
    }
    mb->bootstrap = strdup(rd_kafka_mock_cluster_bootstraps(mb->mc));
    if (!mb->bootstrap)
        goto out_mc;
    if (topics_csv && *topics_csv) {
        char *list = strdup(topics_csv), *save = NULL;
        if (!list)
            goto out_mc;
        for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            while (*t == ' ')
                t++;
            if (!*t)
                continue;
            /* "name:N" gives one topic its own partition count. */
            int np = partitions;
            char *colon = strchr(t, ':');
            if (colon) {
                *colon = '\0';
                np = atoi(colon + 1);
                if (np < 1 || np > 10000) {
                    pr_seterr(errstr, errstr_size, PR_EINVAL,
                              "mock broker: topic %s: bad partition count '%s'", t, colon + 1);
                    free(list);
                    goto out_mc;
                }
            }
            if (pr_mock_broker_create_topic(mb, t, np, errstr, errstr_size)) {
                free(list);
                goto out_mc;
            }
        }
        free(list);
    }
    return mb;

out_mc:
    rd_kafka_mock_cluster_destroy(mb->mc);
out_rk:
    rd_kafka_destroy(mb->rk);
out_free:
    free(mb->bootstrap);
    free(mb);
    return NULL;
}

const char *pr_mock_broker_bootstrap(const pr_mock_broker *mb)
{
    return mb->bootstrap;
}

int pr_mock_broker_set_down(pr_mock_broker *mb, bool down, char *errstr, size_t errstr_size)
{
    rd_kafka_resp_err_t err =
        down ? rd_kafka_mock_broker_set_down(mb->mc, -1) : rd_kafka_mock_broker_set_up(mb->mc, -1);
    if (err)
        return pr_seterr(errstr, errstr_size, PR_EKAFKA, "mock broker: set %s: %s",
                         down ? "down" : "up", rd_kafka_err2str(err));
    return 0;
}

void pr_mock_broker_fail_next(pr_mock_broker *mb, int16_t api_key, size_t n, int err)
{
    for (size_t i = 0; i < n; i++)
        rd_kafka_mock_push_request_errors(mb->mc, api_key, 1, (rd_kafka_resp_err_t)err);
}

void pr_mock_broker_stop(pr_mock_broker *mb)
{
    if (!mb)
        return;
    rd_kafka_mock_cluster_destroy(mb->mc);
    rd_kafka_destroy(mb->rk);
    free(mb->bootstrap);
    free(mb);
}
