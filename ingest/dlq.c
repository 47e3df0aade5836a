/*
 * dlq.c — the dead-letter producer: a rejected record goes to a Kafka topic
 * with its original bytes and headers saying why and where it came from, or,
 * without a topic, to the dead-letter file.
 *
 * Shape: one idempotent producer (acks=all) per dead-letter topic, fed from
 * the pipeline thread and never blocking it. Every dead letter stays on a
 * pending list (with a copy of its bytes) until the broker confirmed it, and
 * while it is pending it HOLDS its source offset: pr_dlq_hold() tells the
 * service the lowest such offset per partition key, and nothing at or past it
 * is stored for commit. A full local queue or a failed delivery is retried
 * (at most once a second per letter) from pr_dlq_poll(); a letter the topic
 * can never take (larger than message.max.bytes, or refused by the broker as
 * too large) goes to the dead-letter file instead (pr_dlq_set_file), and
 * without a file the producer turns fatal (pr_dlq_fatal) so the pipeline
 * stops rather than commit past a record that is nowhere. Delivery reports
 * are served by pr_dlq_poll(), which the consumer calls on every poll;
 * counters are atomics so metrics can read them from any thread; the pending
 * list belongs to the polling thread.
 *
 * The dead-letter file (pr_dlq_new_file: no topic, every letter goes there):
 * letters are appended through a 64 KiB buffer as they come, and an fsync
 * (at most every 100 ms, from pr_dlq_poll, or at once from pr_dlq_sync /
 * pr_dlq_flush) makes them durable. Until then a letter holds its offset
 * like a pending one (the `unsynced` table), so a flood of bad records
 * costs one fsync per 100 ms, not one per record, and a commit never passes
 * a letter a crash could lose. The file is bounded: a letter that would take
 * it past max_bytes first renames it to <file>.1 (the older .1 and its
 * letters go, counted as file_dropped). A write or fsync that fails makes
 * the producer fatal, holding the offsets it could not write.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pr_fs.h"
#include "pr_grow.h"
#include "pr_ingest.h"
#include "pr_log.h"

/* One dead letter not yet confirmed by the broker (nor written to the file). */
typedef struct pr__letter {
    struct pr__letter *next;
    int32_t key; /* source partition key: the hold */
    int64_t offset;
    int32_t partition;
    int64_t record_index;
    char *reason, *detail, *src_topic;
    void *payload;
    size_t len;
    bool tombstone; /* the source message had a null value: the letter has one too */
    void *mkey;     /* the source message's Kafka key (NULL: none), kept on the letter */
    size_t mkey_len;
    bool in_queue;       /* handed to librdkafka, delivery report pending */
    int64_t next_try_ns; /* retry not before (monotonic) */
} pr__letter;

/* Per source partition key, the lowest offset whose letter is in the file
 * but not fsync'd yet: it holds like a pending letter. */
typedef struct pr__unsynced {
    int32_t key;
    int64_t offset;
} pr__unsynced;

#define PR__FILE_BUF     (64 * 1024)
#define PR__FILE_SYNC_NS 100000000LL /* fsync at most this often from pr_dlq_poll */
#define PR__HDR_MAX      1024

/* The dead-letter file. Polling thread only. */
typedef struct pr__dlfile {
    char *path, *path1;        /* the file and its one older generation, <file>.1 */
    int fd;                    /* -1: opened at the first letter */
    uint64_t size;             /* bytes in path, buffered ones included */
    uint64_t max_bytes;        /* rotate before a letter would pass it; 0 = never */
    int64_t letters, letters1; /* letters in path / path.1; -1 = unknown (older files) */
    char *buf;                 /* written, not yet handed to write(2) */
    size_t n_buf;
    bool dir_dirty; /* created or renamed: the directory needs its fsync */
    bool failed;    /* a write or fsync failed: holds are never released */
    pr__unsynced *unsynced;
    size_t n_unsynced, cap_unsynced;
    int64_t synced_ns; /* last fsync, monotonic */
} pr__dlfile;

struct pr_dlq {
    rd_kafka_t *rk; /* NULL: no topic, every letter goes to the file */
    char *topic;    /* NULL with rk */
    pr__dlfile f;   /* f.path NULL = no file */
    uint64_t sent, failed, pending, to_file, file_dropped; /* atomics */
    pr__letter *letters;                                   /* pending list; polling thread only */
    char fatal[512];                                       /* set when a letter can go nowhere */
    bool closing; /* pr_dlq_free: delivery reports no longer touch letters */
    pr_ratelimit rl;
};

static void pr__letter_free(pr__letter *l)
{
    free(l->reason);
    free(l->detail);
    free(l->src_topic);
    free(l->payload);
    free(l->mkey);
    free(l);
}

static void pr__letter_unlink(pr_dlq *d, pr__letter *l)
{
    for (pr__letter **pp = &d->letters; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    __atomic_sub_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    pr__letter_free(l);
}

/* Errors no retry can cure: the letter goes to the file. */
static bool pr__permanent(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE ||
           err == RD_KAFKA_RESP_ERR_INVALID_RECORD;
}

static int64_t pr__mono_ns(void)
{
    return pr_clock_mono_ns(pr_clock_real());
}

/* ---------------------------------------------------------------- the file */

static void pr__set_fatal(pr_dlq *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pr__set_fatal(pr_dlq *d, const char *fmt, ...)
{
    if (d->fatal[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->fatal, sizeof(d->fatal), fmt, ap);
    va_end(ap);
    pr_err("%s", d->fatal);
}

static int pr__file_open(pr__dlfile *f)
{
    f->fd = open(f->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (f->fd < 0)
        return PR_EIO;
    struct stat st;
    if (fstat(f->fd, &st)) {
        close(f->fd);
        f->fd = -1;
        return PR_EIO;
    }
    f->size = (uint64_t)st.st_size;
    f->letters = st.st_size ? -1 : 0;
    if (!st.st_size)
        f->dir_dirty = true; /* maybe just created */
    return 0;
}

static int pr__file_drain_buf(pr__dlfile *f)
{
    int rc = f->n_buf ? pr_write_all(f->fd, f->buf, f->n_buf) : 0;
    f->n_buf = 0;
    return rc;
}

/* Write what is buffered and fsync: every letter written so far is durable
 * and stops holding its offset. 0, or PR_EIO (fatal set; holds kept). */
static int pr__file_sync(pr_dlq *d)
{
    pr__dlfile *f = &d->f;
    if (f->failed)
        return PR_EIO;
    if (f->fd < 0 || (!f->n_buf && !f->n_unsynced && !f->dir_dirty))
        return 0;
    int rc = pr__file_drain_buf(f);
    if (!rc && fsync(f->fd))
        rc = PR_EIO;
    if (!rc && f->dir_dirty)
        rc = pr_fsync_dir_of(f->path);
    int why = errno; /* before anything else can change it */
    f->synced_ns = pr__mono_ns();
    if (rc) {
        f->failed = true;
        pr__set_fatal(d,
                      "dead-letter file %s: write or fsync failed (%s); stopping before the "
                      "offsets of its unsynced letters are committed",
                      f->path, strerror(why));
        return rc;
    }
    f->dir_dirty = false;
    f->n_unsynced = 0;
    return 0;
}

/* Letters in a dead-letter file (each: a header line whose 7th field is the
 * payload length, the payload, a newline); 0 when it does not exist. */
static int64_t pr__file_count(const char *path)
{
    FILE *fp = fopen(path, "re");
    if (!fp)
        return 0;
    int64_t n = 0;
    char line[PR__HDR_MAX + 1];
    while (fgets(line, sizeof(line), fp)) {
        const char *t = line;
        for (int i = 0; i < 6 && t; i++)
            t = strchr(t, '\t') ? strchr(t, '\t') + 1 : NULL;
        if (!t || strncmp(line, "piperec-dead-letter\t", 20))
            break; /* not a header: a torn tail */
        n++;
        if (fseeko(fp, (off_t)strtoull(t, NULL, 10) + 1, SEEK_CUR))
            break;
    }
    fclose(fp);
    return n;
}

/* The file is full: to <file>.1 (dropping the older one), a new file. */
static void pr__file_rotate(pr_dlq *d)
{
    pr__dlfile *f = &d->f;
    if (pr__file_sync(d))
        return;
    int64_t dropped = f->letters1 >= 0 ? f->letters1 : pr__file_count(f->path1);
    if (rename(f->path, f->path1)) {
        /* Not again at every letter (each would cost an fsync): the file
         * grows past the cap from here, and says so once. */
        pr_warn("dead-letter file %s: rename to %s failed (%s); appending past "
                "dead_letter_file_max_bytes from now on",
                f->path, f->path1, strerror(errno));
        f->max_bytes = 0;
        return;
    }
    __atomic_add_fetch(&d->file_dropped, (uint64_t)dropped, __ATOMIC_RELAXED);
    pr_warn("dead-letter file %s reached %" PRIu64 " bytes: now %s (%" PRId64
            " older letter(s) there dropped)",
            f->path, f->size, f->path1, dropped);
    f->letters1 = f->letters;
    close(f->fd);
    f->fd = -1;
    if (pr__file_open(f))
        return; /* the append fails next and says why */
    f->dir_dirty = true;
}

/* Hold `offset` of partition key `key` until the next fsync (the lowest
 * unsynced offset per key). 0, or PR_ENOMEM (fatal set). */
static int pr__file_hold(pr_dlq *d, int32_t key, int64_t offset)
{
    pr__dlfile *f = &d->f;
    size_t u = 0;
    while (u < f->n_unsynced && f->unsynced[u].key != key)
        u++;
    if (u == f->n_unsynced) {
        if (pr_grow((void **)&f->unsynced, &f->cap_unsynced, u + 1, sizeof(*f->unsynced))) {
            f->failed = true;
            pr__set_fatal(d, "dead letter of offset %" PRId64 ": out of memory", offset);
            return PR_ENOMEM;
        }
        f->unsynced[f->n_unsynced++] = (pr__unsynced){key, offset};
    } else if (offset < f->unsynced[u].offset) {
        f->unsynced[u].offset = offset;
    }
    return 0;
}

/* Header fields hold no tab nor newline. */
static const char *pr__field(const char *s, char *buf, size_t n)
{
    if (!strpbrk(s, "\t\r\n"))
        return s;
    snprintf(buf, n, "%s", s);
    for (char *c = buf; *c; c++)
        if (*c == '\t' || *c == '\r' || *c == '\n')
            *c = ' ';
    return buf;
}

/* Append one letter to the dead-letter file (fsync'd later: pr__file_sync),
 * its offset held until then. The format, one text header line
 *   piperec-dead-letter<TAB>reason<TAB>source-topic<TAB>partition<TAB>offset
 *   <TAB>record-index<TAB>length<TAB>detail<TAB>why-not-in-the-topic
 * then exactly `length` payload bytes and a newline. 0; PR_ENODEV without a
 * file; PR_EIO / PR_ENOMEM (fatal set). */
static int pr__file_put(pr_dlq *d, int32_t key, const char *reason, const char *detail,
                        const char *src_topic, int32_t partition, int64_t offset,
                        int64_t record_index, const void *payload, size_t len, const char *why)
{
    pr__dlfile *f = &d->f;
    if (!f->path)
        return PR_ENODEV;
    /* Held first: whatever happens next, its offset is not committed past. */
    if (pr__file_hold(d, key, offset))
        return PR_ENOMEM;
    if (f->failed)
        return PR_EIO;
    char hdr[PR__HDR_MAX], b1[256], b2[512], b3[256];
    int n = snprintf(hdr, sizeof(hdr),
                     "piperec-dead-letter\t%s\t%s\t%" PRId32 "\t%" PRId64 "\t%" PRId64
                     "\t%zu\t%s\t%s\n",
                     pr__field(reason, b1, sizeof(b1)), pr__field(src_topic, b3, sizeof(b3)),
                     partition, offset, record_index, len, pr__field(detail, b2, sizeof(b2)), why);
    if (n < 0 || n >= (int)sizeof(hdr)) {
        n = (int)sizeof(hdr) - 1;
        hdr[n - 1] = '\n';
    }
    uint64_t need = (uint64_t)n + len + 1;
    int rc = 0;
    if (f->fd < 0 && pr__file_open(f))
        rc = PR_EIO;
    if (!rc && f->max_bytes && f->size && f->size + need > f->max_bytes) {
        pr__file_rotate(d); /* its fsync releases every hold: this letter's again */
        if (pr__file_hold(d, key, offset))
            return PR_ENOMEM;
        if (f->fd < 0 || f->failed)
            rc = PR_EIO;
    }
    if (!rc && f->n_buf + need > PR__FILE_BUF)
        rc = pr__file_drain_buf(f);
    if (!rc && need > PR__FILE_BUF) { /* a large letter: straight through */
        if (pr_write_all(f->fd, hdr, (size_t)n) || pr_write_all(f->fd, payload, len) ||
            pr_write_all(f->fd, "\n", 1))
            rc = PR_EIO;
    } else if (!rc) {
        memcpy(f->buf + f->n_buf, hdr, (size_t)n);
        if (len)
            memcpy(f->buf + f->n_buf + n, payload, len);
        f->buf[f->n_buf + (size_t)n + len] = '\n';
        f->n_buf += need;
    }
    if (rc) {
        f->failed = true;
        pr__set_fatal(d,
                      "dead letter of %s [%" PRId32 "] offset %" PRId64
                      " (%zu bytes) cannot be written to %s (%s); stopping before its offset "
                      "is committed",
                      src_topic, partition, offset, len, f->path, strerror(errno));
        return rc;
    }
    f->size += need;
    if (f->letters >= 0)
        f->letters++;
    __atomic_add_fetch(&d->to_file, 1, __ATOMIC_RELAXED);
    return 0;
}

/* A letter the topic will never take: to the file, or fatal. */
static void pr__give_up_topic(pr_dlq *d, pr__letter *l, rd_kafka_resp_err_t why)
{
    int rc = pr__file_put(d, l->key, l->reason, l->detail, l->src_topic, l->partition, l->offset,
                          l->record_index, l->payload, l->len, rd_kafka_err2str(why));
    if (rc == 0)
        rc = pr__file_sync(d); /* rare: durable before it stops holding, as ever */
    if (rc == 0) {
        pr_warn("dead-letter topic %s cannot take %s [%" PRId32 "] offset %" PRId64
                " (%zu bytes: %s); written to %s",
                d->topic, l->src_topic, l->partition, l->offset, l->len, rd_kafka_err2str(why),
                d->f.path);
        pr__letter_unlink(d, l);
        return;
    }
    if (rc == PR_ENODEV)
        pr__set_fatal(d,
                      "dead letter of %s [%" PRId32 "] offset %" PRId64
                      " (%zu bytes) can reach neither topic %s (%s) nor a dead-letter file (no "
                      "state.dir); stopping before its offset is committed",
                      l->src_topic, l->partition, l->offset, l->len, d->topic,
                      rd_kafka_err2str(why));
    l->next_try_ns = INT64_MAX; /* keeps holding its offset */
}

/* Hand letter l to librdkafka. On a local refusal the letter stays pending:
 * retried later, or given up to the file when it can never fit. */
static int pr__produce(pr_dlq *d, pr__letter *l)
{
    char part[16], off[24], idx[24];
    snprintf(part, sizeof(part), "%" PRId32, l->partition);
    snprintf(off, sizeof(off), "%" PRId64, l->offset);
    rd_kafka_headers_t *h = rd_kafka_headers_new(6);
    rd_kafka_header_add(h, "piperec-reason", -1, l->reason, -1);
    rd_kafka_header_add(h, "piperec-detail", -1, l->detail, -1);
    rd_kafka_header_add(h, "piperec-source-topic", -1, l->src_topic, -1);
    rd_kafka_header_add(h, "piperec-partition", -1, part, -1);
    rd_kafka_header_add(h, "piperec-offset", -1, off, -1);
    if (l->record_index >= 0) {
        snprintf(idx, sizeof(idx), "%" PRId64, l->record_index);
        rd_kafka_header_add(h, "piperec-record-index", -1, idx, -1);
    }
    rd_kafka_resp_err_t err = rd_kafka_producev(
        d->rk, RD_KAFKA_V_TOPIC(d->topic),
        RD_KAFKA_V_VALUE(l->tombstone ? NULL : l->payload, l->tombstone ? 0 : l->len),
        RD_KAFKA_V_KEY(l->mkey, l->mkey_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(l), RD_KAFKA_V_END);
    if (!err) {
        l->in_queue = true;
        return 0;
    }
    rd_kafka_headers_destroy(h); /* not taken over on failure */
    __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
    if (pr__permanent(err)) {
        pr__give_up_topic(d, l, err);
        return PR_EKAFKA;
    }
    pr_log_ratelimited(&d->rl, PR_LOG_WARN,
                       "dead-letter topic %s: %s; will retry (the source offset is held)", d->topic,
                       rd_kafka_err2str(err));
    l->next_try_ns = pr__mono_ns() + 1000000000LL;
    return err == RD_KAFKA_RESP_ERR__QUEUE_FULL ? PR_EAGAIN : PR_EKAFKA;
}

static void pr__dlq_dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    pr_dlq *d = opaque;
    pr__letter *l = d->closing ? NULL : m->_private;
    if (d->closing)
        return;
    if (l)
        l->in_queue = false;
    if (m->err) {
        __atomic_add_fetch(&d->failed, 1, __ATOMIC_RELAXED);
        if (l && pr__permanent(m->err)) {
            pr__give_up_topic(d, l, m->err);
            return;
        }
        pr_log_ratelimited(&d->rl, PR_LOG_WARN,
                           "dead-letter topic %s: delivery failed: %s; will retry (the source "
                           "offset is held)",
                           d->topic, rd_kafka_err2str(m->err));
        if (l)
            l->next_try_ns = pr__mono_ns() + 1000000000LL;
    } else {
        __atomic_add_fetch(&d->sent, 1, __ATOMIC_RELAXED);
        if (l)
            pr__letter_unlink(d, l);
    }
}

static pr_dlq *pr__dlq_alloc(void)
{
    pr_dlq *d = calloc(1, sizeof(*d));
    if (!d)
        return NULL;
    d->rl = (pr_ratelimit)PR_RATELIMIT_INIT(5);
    d->f.fd = -1;
    return d;
}

/* The producer's own log lines through piperec's log (not raw to stderr);
 * a connection's FAIL is said by pr__dlq_error_cb instead. */
static void pr__dlq_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    pr_log_level l = strcmp(fac, "FAIL") == 0 ? PR_LOG_DEBUG
                     : level <= 3             ? PR_LOG_ERROR
                     : level <= 4             ? PR_LOG_WARN
                     : level <= 6             ? PR_LOG_INFO
                                              : PR_LOG_DEBUG;
    pr_log(l, "dead-letter producer: librdkafka %s: %s", fac, buf);
}

/* Client errors (a broker down...): served by pr_dlq_poll's rd_kafka_poll,
 * on the polling thread, like the letters' reports. A letter still waits
 * and holds its offset; this only says why. */
static void pr__dlq_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)rk;
    pr_dlq *d = opaque;
    pr_log_ratelimited(&d->rl, PR_LOG_WARN, "dead-letter producer: %s: %s",
                       rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

pr_dlq *pr_dlq_new(const char *topic, const pr_kv_ref *props, size_t n_props, char *errstr,
                   size_t errstr_size)
{
    if (!topic || !*topic) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter topic: empty name");
        return NULL;
    }
    pr_dlq *d = pr__dlq_alloc();
    if (!d) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "dead-letter producer: out of memory");
        return NULL;
    }
    d->topic = strdup(topic);
    if (!d->topic) {
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "dead-letter producer: out of memory");
        goto out_free;
    }
    /* Idempotent, acks=all, linger 20 ms; the consumer's list without its
     * consumer properties (pr_kafka.h's PR_KAFKA_DLQ_PRODUCER). */
    pr_kafka_client_conf cc = {.role = PR_KAFKA_DLQ_PRODUCER,
                               .props = props,
                               .n_props = n_props,
                               .opaque = d,
                               .log_cb = pr__dlq_log_cb,
                               .error_cb = pr__dlq_error_cb,
                               .dr_msg_cb = pr__dlq_dr};
    if (pr_kafka_client_new(&cc, &d->rk, errstr, errstr_size))
        goto out_free;
    return d;

out_free:
    free(d->topic);
    free(d);
    return NULL;
}

pr_dlq *pr_dlq_new_file(const char *path, uint64_t max_bytes, char *errstr, size_t errstr_size)
{
    if (!path || !*path) {
        pr_seterr(errstr, errstr_size, PR_EINVAL, "dead-letter file: empty path");
        return NULL;
    }
    pr_dlq *d = pr__dlq_alloc();
    if (!d || pr_dlq_set_file(d, path, max_bytes)) {
        free(d);
        pr_seterr(errstr, errstr_size, PR_ENOMEM, "dead-letter file: out of memory");
        return NULL;
    }
    return d;
}

static char *pr__dup(const char *s)
{
    return strdup(s ? s : "");
}

int pr_dlq_send(pr_dlq *d, int32_t key, const void *payload, size_t len, const char *reason,
                const char *detail, const char *src_topic, int32_t partition, int64_t offset,
                int64_t record_index)
{
    return pr_dlq_send_keyed(d, key, NULL, 0, payload, len, reason, detail, src_topic, partition,
                             offset, record_index);
}

int pr_dlq_send_keyed(pr_dlq *d, int32_t key, const void *mkey, size_t mkey_len,
                      const void *payload, size_t len, const char *reason, const char *detail,
                      const char *src_topic, int32_t partition, int64_t offset,
                      int64_t record_index)
{
    if (!d->rk) /* no topic: straight to the file, held until its fsync */
        return pr__file_put(d, key, reason ? reason : "unknown", detail ? detail : "",
                            src_topic ? src_topic : "", partition, offset, record_index,
                            payload ? payload : "", payload ? len : 0, "no dead_letter_topic");
    pr__letter *l = calloc(1, sizeof(*l));
    if (!l)
        return PR_ENOMEM;
    l->key = key;
    l->offset = offset;
    l->partition = partition;
    l->record_index = record_index;
    l->reason = pr__dup(reason ? reason : "unknown");
    l->detail = pr__dup(detail);
    l->src_topic = pr__dup(src_topic);
    l->tombstone = payload == NULL;
    len = payload ? len : 0;
    l->payload = malloc(len ? len : 1);
    l->len = len;
    if (!l->reason || !l->detail || !l->src_topic || !l->payload) {
        pr__letter_free(l);
        pr__set_fatal(d, "dead letter of offset %" PRId64 ": out of memory", offset);
        return PR_ENOMEM;
    }
    if (len)
        memcpy(l->payload, payload, len);
    if (mkey && (l->mkey = malloc(mkey_len ? mkey_len : 1)) != NULL) {
        memcpy(l->mkey, mkey, mkey_len);
        l->mkey_len = mkey_len;
    } else if (mkey) {
        pr__letter_free(l);
        pr__set_fatal(d, "dead letter of offset %" PRId64 ": out of memory", offset);
        return PR_ENOMEM;
    }
    l->next = d->letters;
    d->letters = l;
    __atomic_add_fetch(&d->pending, 1, __ATOMIC_RELAXED);
    return pr__produce(d, l);
}

void pr_dlq_poll(pr_dlq *d)
{
    if (!d)
        return;
    int64_t now = pr__mono_ns();
    if (d->rk) {
        rd_kafka_poll(d->rk, 0);
        for (pr__letter *l = d->letters, *next; l; l = next) {
            next = l->next; /* pr__produce may unlink l */
            if (!l->in_queue && l->next_try_ns <= now)
                pr__produce(d, l);
        }
    }
    if ((d->f.n_buf || d->f.n_unsynced) && now - d->f.synced_ns >= PR__FILE_SYNC_NS)
        pr__file_sync(d);
    pr_log_ratelimited_flush(&d->rl, PR_LOG_WARN, "dead letters", false);
}

int pr_dlq_sync(pr_dlq *d)
{
    return d ? pr__file_sync(d) : 0;
}

int64_t pr_dlq_hold(const pr_dlq *d, int32_t key)
{
    int64_t hold = INT64_MAX;
    if (!d)
        return hold;
    for (const pr__letter *l = d->letters; l; l = l->next)
        if (l->key == key && l->offset < hold)
            hold = l->offset;
    for (size_t i = 0; i < d->f.n_unsynced; i++)
        if (d->f.unsynced[i].key == key && d->f.unsynced[i].offset < hold)
            hold = d->f.unsynced[i].offset;
    return hold;
}

int pr_dlq_set_file(pr_dlq *d, const char *path, uint64_t max_bytes)
{
    pr__dlfile *f = &d->f;
    if (f->fd >= 0 || f->n_unsynced)
        return PR_ESTATE; /* set once, before the first letter */
    free(f->path);
    free(f->path1);
    free(f->buf);
    f->path = f->path1 = f->buf = NULL;
    if (!path || !*path)
        return 0;
    f->path = strdup(path);
    f->path1 = malloc(strlen(path) + 3);
    f->buf = malloc(PR__FILE_BUF);
    if (!f->path || !f->path1 || !f->buf) {
        free(f->path);
        free(f->path1);
        free(f->buf);
        f->path = f->path1 = f->buf = NULL;
        return PR_ENOMEM;
    }
    sprintf(f->path1, "%s.1", path);
    f->max_bytes = max_bytes;
    f->letters = 0;
    f->letters1 = -1;
    return 0;
}

const char *pr_dlq_fatal(const pr_dlq *d)
{
    return d && d->fatal[0] ? d->fatal : NULL;
}

/* Topic letters: wait for them (the loop of pr_dlq_flush). */
static int pr__flush_topic(pr_dlq *d, int timeout_ms)
{
    int64_t deadline = pr__mono_ns() + (int64_t)timeout_ms * 1000000;
    for (;;) {
        pr_dlq_poll(d);
        bool waiting = false;
        for (pr__letter *l = d->letters; l; l = l->next)
            if (l->next_try_ns != INT64_MAX)
                waiting = true;
        if (!waiting)
            return d->letters ? PR_ETIMEDOUT : 0;
        if (pr__mono_ns() >= deadline)
            return PR_ETIMEDOUT;
        rd_kafka_flush(d->rk, 50);
    }
}

int pr_dlq_flush(pr_dlq *d, int timeout_ms)
{
    if (!d)
        return 0;
    int rc = d->rk ? pr__flush_topic(d, timeout_ms) : 0;
    int fs = pr__file_sync(d);
    return rc ? rc : fs;
}

void pr_dlq_free(pr_dlq *d)
{
    if (!d)
        return;
    if (pr_dlq_flush(d, 5000) && d->rk)
        pr_warn("dead letters of %s: %" PRIu64 " not delivered at shutdown%s (their offsets were "
                "not committed: they will be read again)",
                d->topic, __atomic_load_n(&d->pending, __ATOMIC_RELAXED),
                d->f.failed ? ", the dead-letter file failed" : "");
    else if (d->f.failed)
        pr_warn("dead letters in %s: the file failed; the offsets of letters not synced were "
                "not committed: they will be read again",
                d->f.path);
    pr_log_ratelimited_flush(&d->rl, PR_LOG_WARN, "dead letters", true);
    d->closing = true;
    if (d->rk)
        rd_kafka_destroy(d->rk);
    while (d->letters) {
        pr__letter *l = d->letters;
        d->letters = l->next;
        pr__letter_free(l);
    }
    if (d->f.fd >= 0)
        close(d->f.fd);
    free(d->f.path);
    free(d->f.path1);
    free(d->f.buf);
    free(d->f.unsynced);
    free(d->topic);
    free(d);
}

void pr_dlq_get_stats(const pr_dlq *d, pr_dlq_stats *st)
{
    memset(st, 0, sizeof(*st));
    if (!d)
        return;
    st->sent = __atomic_load_n(&d->sent, __ATOMIC_RELAXED);
    st->failed = __atomic_load_n(&d->failed, __ATOMIC_RELAXED);
    st->pending = __atomic_load_n(&d->pending, __ATOMIC_RELAXED);
    st->to_file = __atomic_load_n(&d->to_file, __ATOMIC_RELAXED);
    st->file_dropped = __atomic_load_n(&d->file_dropped, __ATOMIC_RELAXED);
}
