/*
 * sink_cfg.c — the keys of every sink's `sinks.<name>` section: names,
 * ranges, defaults and docs, one table per sink (contract: pr_sink.h).
 *
 * The YAML loader (config/) applies files through these tables, the sinks
 * fill zero fields from them, and docs/configuration.md is generated from
 * them, so a default lives here and nowhere else. Kept apart from the sinks
 * so that the loader links the tables without librdkafka's producer code.
 */
#include "pr_sink.h"

#include <stddef.h>

#define PR__SINK_OFF_DOC "Set false to keep the section but switch the sink off."

const char *const pr_trainer_delivery_names[] = {"ack", "checkpoint", NULL};

static const pr_cfgmap_entry trainer_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_trainer_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_HOSTPORT("listen", pr_trainer_sink_cfg, listen, "127.0.0.1:7070",
                      "Address trainers connect to (host:port; port 0 = any free port)."),
    PR_CFG_E_STR("unix_path", PR_CFG_NONEMPTY, pr_trainer_sink_cfg, unix_path, NULL,
                 "Also listen on this Unix domain socket (same protocol, same token rule; no "
                 "TLS: the file, mode 0660, is the guard) for a trainer on the same node, e.g. "
                 "a sidecar sharing an emptyDir volume; it connects to unix:PATH. A stale socket "
                 "file is replaced."),
    PR_CFG_E_INT("max_unacked_batches", 0, pr_trainer_sink_cfg, max_unacked_batches, 1, 65536, "64",
                 "Credit window: batches sent to a trainer and not yet acknowledged."),
    PR_CFG_E_INT("ack_timeout_ms", 0, pr_trainer_sink_cfg, ack_timeout_ms, 1, INT32_MAX, "30000",
                 "A trainer whose oldest outstanding batch stays unacknowledged this long is "
                 "dropped (Error TIMEOUT) and its batches are re-sent to another trainer, however "
                 "chatty the connection: the longest training step (an evaluation pass, a large "
                 "torch.save) must stay below it, since a batch is acked when the loop asks for "
                 "the next one. Raise it for slow steps."),
    PR_CFG_E_INT("keepalive_ms", PR_CFG_INTERNAL, pr_trainer_sink_cfg, keepalive_ms, 1, INT32_MAX,
                 "10000", "Interval of the server's Ping frames."),
    PR_CFG_E_INT("max_connections", 0, pr_trainer_sink_cfg, max_connections, 1, 65536, "64",
                 "Open connections (subscribed or not) at most; more are accepted and closed "
                 "at once. Keep it well below the process's open-file limit."),
    PR_CFG_E_INT("handshake_timeout_ms", 0, pr_trainer_sink_cfg, handshake_timeout_ms, 100,
                 INT32_MAX, "10000",
                 "A connection that has not completed Subscribe (TLS handshake included) this "
                 "long after it was accepted is closed."),
    PR_CFG_E_INT("idle_timeout_ms", 0, pr_trainer_sink_cfg, idle_timeout_ms, 1000, INT32_MAX,
                 "60000",
                 "A connection that sends nothing for this long is closed (trainers answer the "
                 "server's pings every 10 s, so only dead or stuck peers reach it)."),
    PR_CFG_E_INT("max_frame_bytes", 0, pr_trainer_sink_cfg, max_frame_bytes, 1024, 67108864,
                 "1048576",
                 "Largest frame a client may send (Subscribe, Ack, ...); a larger one closes the "
                 "connection with Error BAD_FRAME."),
    {.name = "max_receive_buffer_bytes",
     .type = PR_CFG_SIZE,
     .off = offsetof(pr_trainer_sink_cfg, max_receive_buffer_bytes),
     .min = 65536,
     .def = "16MiB",
     .doc = "Receive buffer memory shared by all connections beyond each one's first 4 KiB; a "
            "connection whose partial frame needs more is dropped. Counted in "
            "limits.max_inflight_bytes."},
    PR_CFG_E_ENUM("delivery", pr_trainer_sink_cfg, delivery, pr_trainer_delivery_names, "ack",
                  "When a batch's input offsets may be committed: ack = when its trainer acks it; "
                  "checkpoint = when a trainer reports a durable checkpoint holding its rows "
                  "(CheckpointCommit), and a restored trainer resumes exactly after its "
                  "checkpoint (docs/trainer-protocol.md)."),
};
const pr_cfgmap pr_sink_trainer_cfgmap = PR_CFGMAP(trainer_entries);

static const char *const tls_versions[] = {"1.2", "1.3", NULL};
static const pr_cfgmap_entry trainer_tls_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_trainer_tls_cfg, enabled, NULL,
                  "Set false to keep the section but serve plain TCP."),
    PR_CFG_E_STR("cert_file", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_trainer_tls_cfg, cert_file,
                 NULL, "PEM server certificate (chain) for the trainer port."),
    PR_CFG_E_STR("key_file", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_trainer_tls_cfg, key_file, NULL,
                 "PEM private key of cert_file."),
    PR_CFG_E_STR("ca_file", 0, pr_trainer_tls_cfg, ca_file, NULL,
                 "PEM CA bundle for client certificates; when set, every trainer must present a "
                 "certificate signed by it (mutual TLS)."),
    PR_CFG_E_CHOICE("min_version", pr_trainer_tls_cfg, min_version, tls_versions, "1.2",
                    "Oldest TLS version accepted."),
};
const pr_cfgmap pr_sink_trainer_tls_cfgmap = PR_CFGMAP(trainer_tls_entries);

static const pr_cfgmap_entry trainer_auth_entries[] = {
    PR_CFG_E_STR("token_file", PR_CFG_NONEMPTY, pr_trainer_auth_cfg, token_file, NULL,
                 "File of bearer tokens, one per line (# comments); when set, Subscribe must "
                 "carry one of them. Re-read when the file changes (rotation without restart)."),
};
const pr_cfgmap pr_sink_trainer_auth_cfgmap = PR_CFGMAP(trainer_auth_entries);

static const char *const refuse_names[PR_TRAINER_REFUSE__COUNT] = {
    "max_connections", "fd_exhausted", "tls_handshake", "plaintext_on_tls"};
static const char *const drop_names[PR_TRAINER_DROP__COUNT] = {
    "handshake_timeout", "idle_timeout",        "ack_timeout",
    "frame_too_large",   "receive_buffer_full", "protocol"};
static const char *const auth_names[PR_TRAINER_AUTH__COUNT] = {"missing_token", "bad_token",
                                                               "client_cert"};
_Static_assert(PR_TRAINER_REFUSE__COUNT <= sizeof(((pr_sink_stats *)0)->refused) / sizeof(uint64_t),
               "pr_sink_stats.refused too small");
_Static_assert(PR_TRAINER_DROP__COUNT <= sizeof(((pr_sink_stats *)0)->dropped) / sizeof(uint64_t),
               "pr_sink_stats.dropped too small");
_Static_assert(PR_TRAINER_AUTH__COUNT <=
                   sizeof(((pr_sink_stats *)0)->auth_failures) / sizeof(uint64_t),
               "pr_sink_stats.auth_failures too small");

const char *pr_trainer_refuse_reason_name(int r)
{
    return r >= 0 && r < PR_TRAINER_REFUSE__COUNT ? refuse_names[r] : "unknown";
}

const char *pr_trainer_drop_reason_name(int r)
{
    return r >= 0 && r < PR_TRAINER_DROP__COUNT ? drop_names[r] : "unknown";
}

const char *pr_trainer_auth_reason_name(int r)
{
    return r >= 0 && r < PR_TRAINER_AUTH__COUNT ? auth_names[r] : "unknown";
}

static const pr_cfgmap_entry kafka_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_kafka_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_STR("topic", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_kafka_sink_cfg, topic, NULL,
                 "Topic receiving piperec.Batch messages."),
    PR_CFG_E_KV("properties", pr_kafka_sink_cfg, properties,
                "librdkafka producer properties, passed through (${env:NAME}, ${file:PATH} as in "
                "the source's); without bootstrap.servers of its own the sink is on the source's "
                "cluster and takes the source's properties a producer has (brokers, TLS, SASL, "
                "...), its own keys winning."),
    PR_CFG_E_INT("max_queued_batches", PR_CFG_INTERNAL, pr_kafka_sink_cfg, max_queued_batches, 1, 0,
                 "10000", "Batches accepted and not yet delivered before send() refuses."),
};
const pr_cfgmap pr_sink_kafka_cfgmap = PR_CFGMAP(kafka_entries);

static const pr_cfgmap_entry files_entries[] = {
    PR_CFG_E_BOOL("enabled", pr_files_sink_cfg, enabled, NULL, PR__SINK_OFF_DOC),
    PR_CFG_E_STR("dir", PR_CFG_REQUIRED | PR_CFG_NONEMPTY, pr_files_sink_cfg, dir, NULL,
                 "Directory for .npy batch files (created if missing)."),
    PR_CFG_E_INT("roll_batches", 0, pr_files_sink_cfg, roll_batches, 1, UINT32_MAX, "100",
                 "Most batches in one roll (file set); a roll also closes at roll_max_ms, "
                 "whichever comes first."),
    PR_CFG_E_INT("roll_max_ms", 0, pr_files_sink_cfg, roll_max_ms, 1, INT32_MAX, "1000",
                 "A roll this old (since its first batch) is closed at the next poll, however "
                 "few batches it holds: a roll's batches are acknowledged, and their offsets "
                 "committed, only once it is closed and fsync'd, so this bounds how long they "
                 "wait. Raise it (with roll_batches) for fewer, larger rolls."),
};
const pr_cfgmap pr_sink_files_cfgmap = PR_CFGMAP(files_entries);
