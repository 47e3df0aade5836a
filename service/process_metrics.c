/*
 * process_metrics.c — the standard Prometheus process collector for Linux:
 * process_cpu_seconds_total, process_resident_memory_bytes,
 * process_virtual_memory_bytes, process_open_fds, process_max_fds and
 * process_start_time_seconds, with the names and meanings every Prometheus
 * client library uses, so stock dashboards and alerts work unchanged.
 *
 * Everything is read at scrape time from /proc/self (stat, statm, fd) and
 * /proc/stat (boot time); there is no state. A value whose source cannot be
 * read (no /proc, e.g. a sandbox) is left out rather than reported as 0.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "pr_metrics.h"

/* Reads a small /proc file into buf (NUL-terminated); false if unreadable. */
static bool pr__proc_read(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* Boot time (seconds since the epoch) from the "btime" line of /proc/stat. */
static bool pr__boot_time(double *out)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    char line[256];
    bool ok = false;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long bt;
        if (sscanf(line, "btime %llu", &bt) == 1) {
            *out = (double)bt;
            ok = true;
            break;
        }
    }
    fclose(f);
    return ok;
}

static long pr__count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the descriptor opendir itself holds */
}

void pr__process_metrics(pr_mbuf *mb)
{
    const double tck = (double)sysconf(_SC_CLK_TCK);
    const double page = (double)sysconf(_SC_PAGESIZE);
    char buf[1024];

    /* /proc/self/stat: "pid (comm) state ppid ...": comm may hold spaces and
     * parentheses, so fields are counted from the last ')'. After it come
     * field 3 (state) ... 14 utime, 15 stime, 22 starttime (clock ticks after
     * boot), 23 vsize (bytes). */
    if (pr__proc_read("/proc/self/stat", buf, sizeof(buf)) && tck > 0) {
        const char *p = strrchr(buf, ')');
        unsigned long long f[24] = {0};
        int field = 3, got = 0;
        for (p = p ? p + 1 : buf; *p && field <= 23; field++) {
            while (*p == ' ')
                p++;
            char *end;
            unsigned long long v = strtoull(p, &end, 10);
            if (end != p) {
                f[field] = v;
                got = field;
            }
            p = end;
            while (*p && *p != ' ')
                p++;
        }
        if (got >= 23) {
            pr__metric_single(mb, "process_cpu_seconds_total", PR_METRIC_COUNTER,
                              "Total user and system CPU time spent in seconds.",
                              (double)(f[14] + f[15]) / tck);
            double boot;
            if (pr__boot_time(&boot))
                pr__metric_single(mb, "process_start_time_seconds", PR_METRIC_GAUGE,
                                  "Start time of the process since unix epoch in seconds.",
                                  boot + (double)f[22] / tck);
            pr__metric_single(mb, "process_virtual_memory_bytes", PR_METRIC_GAUGE,
                              "Virtual memory size in bytes.", (double)f[23]);
        }
    }

    /* /proc/self/statm: size resident shared ... in pages. */
    unsigned long long size_pages, rss_pages;
    if (pr__proc_read("/proc/self/statm", buf, sizeof(buf)) &&
        sscanf(buf, "%llu %llu", &size_pages, &rss_pages) == 2)
        pr__metric_single(mb, "process_resident_memory_bytes", PR_METRIC_GAUGE,
                          "Resident memory size in bytes.", (double)rss_pages * page);

    long fds = pr__count_fds();
    if (fds >= 0)
        pr__metric_single(mb, "process_open_fds", PR_METRIC_GAUGE,
                          "Number of open file descriptors.", (double)fds);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        pr__metric_single(mb, "process_max_fds", PR_METRIC_GAUGE,
                          "Maximum number of open file descriptors.", (double)rl.rlim_cur);
}
