/*
 * reaper.h — consumed librdkafka messages destroyed off the pipeline thread
 * (issue 21): internal to ingest/, used by consumer.c only.
 *
 * With source.consumers > 1 the pipeline thread merges rows the polling
 * threads decoded, and was left destroying every message: librdkafka's
 * message free (glibc's free of memory another thread allocated, and the
 * fetch buffer's reference) was ~16% of its CPU on one line per message,
 * and on a 16-core host that thread is the bound (bench/RESULTS.md). The
 * pipeline thread now hands each consumed message to a reaper thread in
 * batches of PR__REAP_BATCH (one lock per batch); the reaper destroys them.
 *
 * Safe because destroying a message only releases it: nothing in piperec or
 * librdkafka waits for it (offsets are stored explicitly, the fetch queue's
 * accounting happened when the message was polled), and at most
 * PR__REAP_CAP messages wait (when the reaper is that far behind, the
 * pipeline thread destroys inline). pr__reaper_flush() returns once every
 * message handed over is destroyed: consumer.c calls it before the
 * instances leave the group and close, so librdkafka's close sees exactly
 * the messages it saw before (an earlier attempt that freed messages on the
 * polling threads without such a barrier was removed after close hangs:
 * bench/RESULTS.md, issue 21).
 */
#ifndef PR_INGEST_REAPER_H
#define PR_INGEST_REAPER_H

#include <librdkafka/rdkafka.h>

typedef struct pr__reaper pr__reaper;

/* Starts the reaper thread (named pr:reap); NULL when it cannot (the caller
 * destroys messages itself). */
pr__reaper *pr__reaper_start(void);

/* The pipeline thread: m is consumed; it will be destroyed. */
void pr__reaper_put(pr__reaper *r, rd_kafka_message_t *m);

/* The pipeline thread: the messages put so far go to the reaper now, not
 * when a batch is full (an idle poll: up to a batch of messages would keep
 * their fetch buffers and partitions referenced until traffic resumes). */
void pr__reaper_kick(pr__reaper *r);

/* The pipeline thread: returns once every message put so far is destroyed. */
void pr__reaper_flush(pr__reaper *r);

/* Flush, stop the thread, free (NULL: nothing). Returns how many messages
 * were destroyed inline because the reaper was behind. */
unsigned long long pr__reaper_stop(pr__reaper *r);

#endif
