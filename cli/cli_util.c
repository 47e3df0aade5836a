/*
 * cli_util.c — signal and port helpers for the long-running commands
 * (pr_cli.h).
 */
#include "pr_cli.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void pr_cli_block_signals(sigset_t *set)
{
    sigset_t all;
    sigemptyset(&all);
    sigaddset(&all, SIGINT);
    sigaddset(&all, SIGTERM);
    sigaddset(&all, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
}

int pr_cli_wait_signal(const sigset_t *set, int timeout_ms)
{
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    int s = sigtimedwait(set, NULL, &ts);
    return s > 0 ? s : 0;
}

bool pr_cli_port_free(const char *host, uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, host && host[0] ? host : "0.0.0.0", &a.sin_addr) != 1) {
        close(fd);
        return false;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

int pr_cli_exit_code(int rc)
{
    return rc == PR_EIO || rc == PR_ENOMEM ? 1 : 2;
}

int pr_cli_parse_long(const char *s, long lo, long hi, long *out)
{
    char *e;
    errno = 0;
    long v = strtol(s, &e, 10);
    if (errno || e == s || *e || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int pr_cli_parse_opts(const char *cmd, int argc, char **argv, int from, const pr_cli_opt *opts,
                      size_t n_opts, void (*usage)(FILE *))
{
    uint64_t seen = 0; /* options given so far (the first 64) */
    for (int i = from; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        }
        size_t k = 0;
        while (k < n_opts && strcmp(argv[i], opts[k].name))
            k++;
        if (k < n_opts && k < 64 && (seen >> k & 1)) { /* which one was meant? */
            fprintf(stderr, "piperec %s: '%s' given twice\n", cmd, argv[i]);
            usage(stderr);
            return 2;
        }
        if (k < n_opts && k < 64)
            seen |= 1ull << k;
        if (k < n_opts && opts[k].flag) {
            *opts[k].flag = true;
            continue;
        }
        if (k == n_opts || i + 1 >= argc) {
            fprintf(stderr, "piperec %s: %s '%s'\n", cmd,
                    k == n_opts ? "unknown option" : "missing value for", argv[i]);
            usage(stderr);
            return 2;
        }
        *opts[k].val = argv[++i];
    }
    return 0;
}

int pr_cli_add_set(const char *cmd, const char *arg, char **paths, char **values, size_t *n)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) {
        fprintf(stderr, "piperec %s: --set '%s': expected PATH=VALUE\n", cmd, arg);
        return 2;
    }
    if (*n == PR_CLI_MAX_SET) {
        fprintf(stderr, "piperec %s: more than %d --set\n", cmd, PR_CLI_MAX_SET);
        return 2;
    }
    char *copy = strdup(arg);
    if (!copy)
        return 1;
    copy[eq - arg] = '\0';
    paths[*n] = copy;
    values[(*n)++] = copy + (eq - arg) + 1;
    return 0;
}
