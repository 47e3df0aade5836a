/*
 * poll_threads.h — one polling thread per consumer instance (issue 21):
 * internal to ingest/, used by consumer.c only.
 *
 * With source.consumers: K > 1, each instance's rd_kafka_consumer_poll runs
 * on a thread of its own, which pushes what it gets (messages, consumer
 * errors, and its rebalance events) into a bounded single-producer ring.
 * The pipeline thread takes entries from the rings instead of polling the
 * clients itself, so what librdkafka costs per message (its queue, the
 * op-to-message conversion, the position update) leaves the pipeline
 * thread, and K clients are served by K threads. So does the reading of
 * each message's facts (pr__pt_facts: the pipeline thread then does not
 * touch a message another core wrote, except to decode and destroy it).
 * With decode threads (every format of decode_par.h's decode table) the
 * polling thread also decodes its instance's messages into runs of its own
 * (decode_par.h, pr__druns; the prep callback), handed over sealed: the
 * pipeline thread merges their rows instead of decoding them (issue 21).
 * (Destroying consumed messages on the polling threads, through a ring
 * going back, was tried and not kept: it changes when librdkafka's objects
 * are released, and test_poll_threads' closes of 3 instances hung in
 * librdkafka 2.0.2's cooperative close more often with it on a loaded
 * machine: bench/RESULTS.md, issue 21. consumer.c now hands them to a
 * reaper thread that it flushes before any instance leaves: reaper.h.)
 *
 * Why the pipeline's semantics do not move: a partition is one instance's,
 * and an instance's ring is FIFO, so per-partition order is librdkafka's;
 * a rebalance event goes into the ring behind the messages polled before it
 * and the instance's thread blocks in its rebalance callback until the
 * pipeline thread has handled the event (pr__pt_done), so the pipeline sees,
 * per instance, exactly the sequence it saw polling the client itself:
 * owner callbacks, commits on revoke and dropping of revoked messages stay
 * on the pipeline thread. What a pause cannot stop is the ring's content
 * (at most PR__PT_RING entries per instance), which is delivered as
 * messages already polled were before.
 */
#ifndef PR_INGEST_POLL_THREADS_H
#define PR_INGEST_POLL_THREADS_H

#include <librdkafka/rdkafka.h>
#include <stdbool.h>
#include <stddef.h>

#include "decode_par.h"

#define PR__PT_RING 2048 /* entries per instance (a power of two) */

typedef struct pr__pt pr__pt;

typedef enum {
    PR__PT_MSG = 0,   /* m: a message or a consumer error, as consumer_poll gave it */
    PR__PT_REBALANCE, /* err, parts: the instance's rebalance callback, blocked */
} pr__pt_kind;

/* What the consumer thread needs of a message without error, read by its
 * polling thread (pr__pt_prep_fn) so that the consumer thread does not
 * touch the message itself (each first touch of a message another core
 * wrote is a cache miss): its record count (-1: not read, e.g. an error),
 * Kafka timestamp, topic, partition, offset and payload length. */
typedef struct pr__pt_facts {
    int nrec;
    int32_t partition;
    int64_t ts, offset;
    size_t len;
    const rd_kafka_topic_t *rkt;
    pr__ddec dec; /* decoded by its polling thread (run NULL: not decoded) */
} pr__pt_facts;

typedef struct pr__pt_entry {
    pr__pt_kind kind;
    unsigned inst;
    rd_kafka_message_t *m;
    pr__pt_facts f; /* PR__PT_MSG: found by its polling thread (prep) */
    rd_kafka_resp_err_t err;
    rd_kafka_topic_partition_list_t *parts; /* owned by librdkafka; valid until done */
} pr__pt_entry;

/* Called on a polling thread for each message without error before it
 * goes into the ring: fills e->f. Must touch nothing the
 * consumer thread writes (it runs beside it). Returns PR__PT_NOW (push it
 * now) or PR__PT_RUN: it was decoded into the instance's open run, and
 * waits with the run's other messages until the run is handed over (a
 * batch of them, a message that is not in a run, an empty poll, a
 * rebalance event or the thread's end), after seal(opaque, inst); or
 * PR__PT_BUSY: no room to decode it now (e->f filled, nothing decoded):
 * the thread hands its run over, waits a little and asks again, at most
 * PR__PT_BUSY_MS, then pushes it as PR__PT_NOW. */
enum { PR__PT_NOW = 0, PR__PT_RUN = 1, PR__PT_BUSY = 2 };
typedef int (*pr__pt_prep_fn)(void *opaque, unsigned inst, const rd_kafka_message_t *m,
                              pr__pt_entry *e);
typedef void (*pr__pt_seal_fn)(void *opaque, unsigned inst);
/* Starts one thread per rks[k] (n of them; the handles stay the caller's);
 * prep and seal may be NULL. NULL with errstr when a thread cannot be made
 * (none is left running). */
pr__pt *pr__pt_start(rd_kafka_t *const *rks, unsigned n, pr__pt_prep_fn prep, pr__pt_seal_fn seal,
                     void *prep_opaque, char *errstr, size_t errstr_size);

/* Is the calling thread instance inst's polling thread? (In the rebalance
 * callback: hand the event over, or handle it right here.) */
bool pr__pt_on_poller(const pr__pt *pt, unsigned inst);

/* On instance inst's polling thread, inside its rebalance callback: queue
 * the event and block until the consumer thread called pr__pt_done(inst). */
void pr__pt_handoff(pr__pt *pt, unsigned inst, rd_kafka_resp_err_t err,
                    rd_kafka_topic_partition_list_t *parts);

/* Consumer thread: the next entry, instances in turn, up to
 * 256 entries of one before the next (1), or none within
 * wait_ms (0). A PR__PT_REBALANCE entry must be answered by pr__pt_done. */
int pr__pt_next(pr__pt *pt, int wait_ms, pr__pt_entry *out);

/* Consumer thread, without waiting: the messages (PR__PT_MSG entries, at
 * most max) that follow in the ring of the instance in turn, in place
 * (*out: the first), as pr__pt_next would give them one by one; 0 when none
 * waits or an event comes first (pr__pt_next's to give). They stay the
 * ring's until pr__pt_span_taken(n) says the first n were taken (n <= the
 * span; what is not taken is the next span's or pr__pt_next's). Per message,
 * pr__pt_next's copy of the entry and its turn were most of the pipeline
 * thread's ring cost (a perf profile of issue 21). */
size_t pr__pt_span(pr__pt *pt, size_t max, pr__pt_entry **out);
void pr__pt_span_taken(pr__pt *pt, size_t n);

/* Consumer thread: instance inst's ring is empty and its thread is not
 * handing over a rebalance event (then an assignment change made now cannot
 * be taken by librdkafka as the answer to an event not yet served, as long
 * as librdkafka's own queue is empty too: consumer.c's pr__restart_due). */
bool pr__pt_quiet(pr__pt *pt, unsigned inst);

/* Consumer thread: the rebalance event of instance inst is handled. */
void pr__pt_done(pr__pt *pt, unsigned inst);

/* Consumer thread: stop the threads. Until they have all exited, entries
 * keep coming from pr__pt_next (serve rebalances, drop messages); returns
 * once none is running and every ring is empty. */
void pr__pt_stop(pr__pt *pt, void (*serve)(void *opaque, const pr__pt_entry *e), void *opaque);

/* Joins (after pr__pt_stop) and frees; messages still queued are destroyed
 * (not handed out: their offsets stay unstored). NULL is a no-op. */
void pr__pt_free(pr__pt *pt);

#endif
