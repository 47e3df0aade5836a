/*
 * group_leave.c — pr_kafka_leave_group: ask a group's coordinator to drop one
 * member by its member id (a Kafka LeaveGroup request sent on its behalf).
 *
 * Why: a process killed with SIGKILL never sends LeaveGroup, so under dynamic
 * membership its partitions stay with its dead member until the session
 * expires, and the coordinator then holds the next rebalance for the member
 * it still lists. The restarted process knows the member id its predecessor
 * had (the consumer writes it to the state dir) and sends the LeaveGroup the
 * predecessor could not; the rebalance starts at once. librdkafka has no
 * public call for this (it only ever leaves as itself), so this file speaks
 * the three requests it needs directly: ApiVersions (to pick versions the
 * broker accepts), FindCoordinator and LeaveGroup, all in their classic
 * (non-flexible) encodings, over a plain TCP connection.
 *
 * Scope: listeners without TLS or SASL only (security.protocol absent or
 * PLAINTEXT). Elsewhere it returns PR_ENOTSUP and the restart falls back to
 * waiting out the session (static membership is the answer there).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "pr_clock.h"
#include "pr_hostport.h"
#include "pr_ingest.h"
#include "pr_log.h"

enum {
    PR__API_FIND_COORDINATOR = 10,
    PR__API_LEAVE_GROUP = 13,
    PR__API_VERSIONS = 18,
};
/* Highest classic (non-flexible) versions this file encodes. */
#define PR__FIND_MAX  2
#define PR__LEAVE_MAX 3

#define PR__ERR_COORDINATOR_LOAD      14
#define PR__ERR_COORDINATOR_AVAIL     15
#define PR__ERR_NOT_COORDINATOR       16
#define PR__ERR_UNKNOWN_MEMBER_ID     25
#define PR__ERR_GROUP_ID_NOT_FOUND    69
#define PR__ERR_REBALANCE_IN_PROGRESS 27

typedef struct pr__buf {
    unsigned char d[1024];
    size_t n;
    int overflow;
} pr__buf;

static void pr__put(pr__buf *b, const void *p, size_t n)
{
    if (b->n + n > sizeof(b->d)) {
        b->overflow = 1;
        return;
    }
    memcpy(b->d + b->n, p, n);
    b->n += n;
}
static void pr__put16(pr__buf *b, int v)
{
    unsigned char x[2] = {(unsigned char)(v >> 8), (unsigned char)v};
    pr__put(b, x, 2);
}
static void pr__put32(pr__buf *b, int32_t v)
{
    uint32_t u = (uint32_t)v;
    unsigned char x[4] = {(unsigned char)(u >> 24), (unsigned char)(u >> 16),
                          (unsigned char)(u >> 8), (unsigned char)u};
    pr__put(b, x, 4);
}
static void pr__putstr(pr__buf *b, const char *s)
{
    if (!s) {
        pr__put16(b, -1); /* nullable string: null */
        return;
    }
    size_t n = strlen(s);
    if (n > 0x7fff) {
        b->overflow = 1;
        return;
    }
    pr__put16(b, (int)n);
    pr__put(b, s, n);
}

/* A bounded reader over a response body. */
typedef struct pr__rd {
    const unsigned char *p;
    size_t n, off;
    int bad;
} pr__rd;

static int32_t pr__get(pr__rd *r, size_t w)
{
    if (r->off + w > r->n) {
        r->bad = 1;
        return 0;
    }
    uint32_t v = 0;
    for (size_t i = 0; i < w; i++)
        v = v << 8 | r->p[r->off + i];
    r->off += w;
    return w == 2 ? (int16_t)v : w == 1 ? (int8_t)v : (int32_t)v;
}
static void pr__getstr(pr__rd *r, char *out, size_t cap)
{
    int32_t n = pr__get(r, 2);
    if (out)
        out[0] = 0;
    if (n < 0)
        return;
    if (r->off + (size_t)n > r->n) {
        r->bad = 1;
        return;
    }
    if (out) {
        size_t c = (size_t)n < cap - 1 ? (size_t)n : cap - 1;
        memcpy(out, r->p + r->off, c);
        out[c] = 0;
    }
    r->off += (size_t)n;
}

static int64_t pr__ms_now(void)
{
    return pr_clock_mono_ns(pr_clock_real()) / 1000000;
}

static int pr__left(int64_t deadline)
{
    int64_t l = deadline - pr__ms_now();
    return l > 0 ? (int)l : 0;
}

/* Connect to host:port before the deadline; -1 and a reason on failure. */
static int pr__connect(const char *host, const char *port, int64_t deadline, char *why,
                       size_t why_size)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e) {
        snprintf(why, why_size, "%s:%s: %s", host, port, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
            break;
        if (errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (poll(&p, 1, pr__left(deadline)) == 1 &&
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr == 0)
                break;
            errno = soerr ? soerr : ETIMEDOUT;
        }
        snprintf(why, why_size, "%s:%s: %s", host, port, strerror(errno));
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* Send one request (header v1: api key, version, correlation id, client id)
 * and read its response body (after the correlation id) into resp. */
static int pr__call(int fd, int api, int ver, int32_t corr, const pr__buf *body,
                    unsigned char **resp, size_t *resp_n, int64_t deadline, char *why,
                    size_t why_size)
{
    pr__buf m = {.n = 0};
    pr__put32(&m, 0); /* size, patched below */
    pr__put16(&m, api);
    pr__put16(&m, ver);
    pr__put32(&m, corr);
    pr__putstr(&m, "piperec-leave");
    pr__put(&m, body->d, body->n);
    if (m.overflow || body->overflow) {
        snprintf(why, why_size, "request too large");
        return -1;
    }
    uint32_t sz = (uint32_t)(m.n - 4);
    m.d[0] = (unsigned char)(sz >> 24);
    m.d[1] = (unsigned char)(sz >> 16);
    m.d[2] = (unsigned char)(sz >> 8);
    m.d[3] = (unsigned char)sz;
    for (size_t off = 0; off < m.n;) {
        ssize_t w = send(fd, m.d + off, m.n - off, MSG_NOSIGNAL);
        if (w > 0) {
            off += (size_t)w;
            continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EINTR) {
            snprintf(why, why_size, "send: %s", strerror(errno));
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        if (poll(&p, 1, pr__left(deadline)) != 1) {
            snprintf(why, why_size, "send: timed out");
            return -1;
        }
    }
    unsigned char hdr[8];
    unsigned char *buf = NULL;
    size_t want = sizeof(hdr), got = 0, total = 0;
    for (;;) {
        unsigned char *dst = buf ? buf + got : hdr + got;
        ssize_t r = recv(fd, dst, want - got, 0);
        if (r > 0) {
            got += (size_t)r;
            if (got < want)
                continue;
            if (buf)
                break;
            total = (size_t)hdr[0] << 24 | (size_t)hdr[1] << 16 | (size_t)hdr[2] << 8 | hdr[3];
            int32_t rc = (int32_t)((uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 |
                                   (uint32_t)hdr[6] << 8 | hdr[7]);
            if (total < 4 || total > (1u << 20) || rc != corr) {
                snprintf(why, why_size, "malformed response (size %zu, correlation %d)", total,
                         (int)rc);
                return -1;
            }
            want = total - 4;
            got = 0;
            buf = malloc(want ? want : 1);
            if (!buf) {
                snprintf(why, why_size, "out of memory");
                return -1;
            }
            if (!want)
                break;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
            snprintf(why, why_size, "recv: %s", r == 0 ? "connection closed" : strerror(errno));
            free(buf);
            return -1;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, pr__left(deadline)) != 1) {
            snprintf(why, why_size, "no answer in time");
            free(buf);
            return -1;
        }
    }
    *resp = buf;
    *resp_n = want;
    return 0;
}

/* ApiVersions v0: the highest version <= our max of FindCoordinator and
 * LeaveGroup the broker takes (-1 when none). */
static int pr__versions(int fd, int64_t deadline, int *find_v, int *leave_v, char *why,
                        size_t why_size)
{
    pr__buf body = {.n = 0};
    unsigned char *resp;
    size_t n;
    if (pr__call(fd, PR__API_VERSIONS, 0, 1, &body, &resp, &n, deadline, why, why_size))
        return -1;
    pr__rd r = {resp, n, 0, 0};
    int err = pr__get(&r, 2);
    int32_t cnt = pr__get(&r, 4);
    *find_v = *leave_v = -1;
    for (int32_t i = 0; i < cnt && !r.bad; i++) {
        int key = pr__get(&r, 2), lo = pr__get(&r, 2), hi = pr__get(&r, 2);
        int *slot = key == PR__API_FIND_COORDINATOR ? find_v
                    : key == PR__API_LEAVE_GROUP    ? leave_v
                                                    : NULL;
        int mx = key == PR__API_FIND_COORDINATOR ? PR__FIND_MAX : PR__LEAVE_MAX;
        if (slot && lo <= mx)
            *slot = hi < mx ? hi : mx;
    }
    free(resp);
    if (r.bad || err) {
        snprintf(why, why_size, "ApiVersions: %s", r.bad ? "malformed answer" : "error answer");
        return -1;
    }
    if (*find_v < 0 || *leave_v < 0) {
        snprintf(why, why_size, "the broker takes no FindCoordinator v0-%d or LeaveGroup v0-%d",
                 PR__FIND_MAX, PR__LEAVE_MAX);
        return -1;
    }
    return 0;
}

/* FindCoordinator: host and port of the group's coordinator. Returns 0, 1
 * for "not yet" (retry), -1 on failure. */
static int pr__find(int fd, int ver, const char *group, int64_t deadline, char *host,
                    size_t host_size, int *port, char *why, size_t why_size)
{
    pr__buf body = {.n = 0};
    pr__putstr(&body, group);
    if (ver >= 1)
        pr__put(&body, "\0", 1); /* key_type: group */
    unsigned char *resp;
    size_t n;
    if (pr__call(fd, PR__API_FIND_COORDINATOR, ver, 2, &body, &resp, &n, deadline, why, why_size))
        return -1;
    pr__rd r = {resp, n, 0, 0};
    if (ver >= 1)
        (void)pr__get(&r, 4); /* throttle */
    int err = pr__get(&r, 2);
    if (ver >= 1)
        pr__getstr(&r, NULL, 0); /* error message */
    (void)pr__get(&r, 4);        /* node id */
    pr__getstr(&r, host, host_size);
    *port = pr__get(&r, 4);
    free(resp);
    if (r.bad) {
        snprintf(why, why_size, "FindCoordinator: malformed answer");
        return -1;
    }
    if (err == PR__ERR_COORDINATOR_AVAIL || err == PR__ERR_COORDINATOR_LOAD ||
        err == PR__ERR_NOT_COORDINATOR)
        return 1;
    if (err) {
        snprintf(why, why_size, "FindCoordinator: %s", rd_kafka_err2str((rd_kafka_resp_err_t)err));
        return -1;
    }
    return 0;
}

/* LeaveGroup for member_id. 0 = left (or was gone already: *gone), 1 = retry. */
static int pr__leave(int fd, int ver, const char *group, const char *member_id, int64_t deadline,
                     bool *gone, char *why, size_t why_size)
{
    pr__buf body = {.n = 0};
    pr__putstr(&body, group);
    if (ver <= 2) {
        pr__putstr(&body, member_id);
    } else {
        pr__put32(&body, 1); /* members[] */
        pr__putstr(&body, member_id);
        pr__putstr(&body, NULL); /* group_instance_id: none (dynamic member) */
    }
    unsigned char *resp;
    size_t n;
    if (pr__call(fd, PR__API_LEAVE_GROUP, ver, 3, &body, &resp, &n, deadline, why, why_size))
        return -1;
    pr__rd r = {resp, n, 0, 0};
    if (ver >= 1)
        (void)pr__get(&r, 4); /* throttle */
    int err = pr__get(&r, 2);
    if (!err && ver >= 3) {
        int32_t cnt = pr__get(&r, 4);
        for (int32_t i = 0; i < cnt && !r.bad; i++) {
            pr__getstr(&r, NULL, 0);
            pr__getstr(&r, NULL, 0);
            int e = pr__get(&r, 2);
            if (e)
                err = e;
        }
    }
    free(resp);
    if (r.bad) {
        snprintf(why, why_size, "LeaveGroup: malformed answer");
        return -1;
    }
    *gone = err == PR__ERR_UNKNOWN_MEMBER_ID || err == PR__ERR_GROUP_ID_NOT_FOUND;
    if (!err || *gone)
        return 0;
    if (err == PR__ERR_COORDINATOR_AVAIL || err == PR__ERR_COORDINATOR_LOAD ||
        err == PR__ERR_NOT_COORDINATOR)
        return 1;
    snprintf(why, why_size, "LeaveGroup: %s", rd_kafka_err2str((rd_kafka_resp_err_t)err));
    return -1;
}

/* One bootstrap.servers entry (len bytes at s): an optional "PLAINTEXT://"
 * in front, then what pr_hostport_parse takes; port as a string. */
static int pr__split_hostport(const char *s, size_t len, char *host, size_t host_size, char *port,
                              size_t port_size)
{
    const char *sep = memmem(s, len, "://", 3);
    if (sep) {
        len -= (size_t)(sep + 3 - s);
        s = sep + 3;
    }
    char entry[300];
    uint16_t p;
    if (len >= sizeof(entry))
        return -1;
    memcpy(entry, s, len);
    entry[len] = 0;
    if (pr_hostport_parse(entry, host, host_size, &p) || !host[0] || !p)
        return -1;
    snprintf(port, port_size, "%u", p);
    return 0;
}

int pr_kafka_leave_group(const pr_kv_ref *props, size_t n_props, const char *group,
                         const char *member_id, int timeout_ms, bool *was_member, char *errstr,
                         size_t errstr_size)
{
    *was_member = false;
    const char *bootstrap = NULL;
    for (size_t i = 0; i < n_props; i++) {
        const char *k = props[i].key, *v = props[i].value;
        if (!strcmp(k, "bootstrap.servers") || !strcmp(k, "metadata.broker.list"))
            bootstrap = v;
        else if (!strcmp(k, "security.protocol") && strcasecmp(v, "plaintext"))
            return pr_seterr(errstr, errstr_size, PR_ENOTSUP,
                             "security.protocol %s: only PLAINTEXT listeners are supported", v);
    }
    if (!bootstrap || !*bootstrap)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "bootstrap.servers is not set");
    if (!group || !*group || !member_id || !*member_id)
        return pr_seterr(errstr, errstr_size, PR_EINVAL, "no group or member id");

    int64_t deadline = pr__ms_now() + (timeout_ms > 0 ? timeout_ms : 1);
    char why[256] = "no bootstrap server answered";
    char host[256], port[16];
    int find_v = -1, leave_v = -1;
    char chost[256] = "";
    int cport = 0;
    /* Bootstrap servers in turn until one names the coordinator. */
    while (pr__left(deadline) > 0 && !chost[0]) {
        const char *s = bootstrap;
        while (*s && !chost[0] && pr__left(deadline) > 0) {
            size_t len = strcspn(s, ", ");
            if (len && !pr__split_hostport(s, len, host, sizeof(host), port, sizeof(port))) {
                int fd = pr__connect(host, port, deadline, why, sizeof(why));
                if (fd >= 0) {
                    int rc = pr__versions(fd, deadline, &find_v, &leave_v, why, sizeof(why));
                    if (!rc)
                        rc = pr__find(fd, find_v, group, deadline, chost, sizeof(chost), &cport,
                                      why, sizeof(why));
                    if (rc == 1) {
                        chost[0] = 0;
                        snprintf(why, sizeof(why), "the group's coordinator is not available");
                    }
                    close(fd);
                }
            } else if (len) {
                snprintf(why, sizeof(why), "bootstrap.servers entry '%.*s': not host:port",
                         (int)len, s);
            }
            s += len;
            s += strspn(s, ", ");
        }
        if (!chost[0])
            usleep(100000);
    }
    if (!chost[0])
        return pr_seterr(errstr, errstr_size, PR_ETIMEDOUT, "%s", why);

    char cp[16];
    snprintf(cp, sizeof(cp), "%d", cport);
    while (pr__left(deadline) > 0) {
        int fd = pr__connect(chost, cp, deadline, why, sizeof(why));
        if (fd < 0) {
            usleep(100000);
            continue;
        }
        int fv, lv;
        bool gone = false;
        int rc = pr__versions(fd, deadline, &fv, &lv, why, sizeof(why));
        if (!rc)
            rc = pr__leave(fd, lv, group, member_id, deadline, &gone, why, sizeof(why));
        close(fd);
        if (rc == 0) {
            *was_member = !gone;
            return 0;
        }
        if (rc < 0)
            return pr_seterr(errstr, errstr_size, PR_EKAFKA, "coordinator %s:%d: %s", chost, cport,
                             why);
        usleep(100000);
    }
    return pr_seterr(errstr, errstr_size, PR_ETIMEDOUT, "coordinator %s:%d: %s", chost, cport, why);
}
