/*
 * pr_hostport.c — the "host:port" parser (contract: pr_hostport.h).
 */
#include "pr_hostport.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "pr_error.h"

static bool pr__host_char(char c, bool bracketed)
{
    if (bracketed)
        return isxdigit((unsigned char)c) || c == ':' || c == '.';
    return isalnum((unsigned char)c) || c == '.' || c == '-' || c == '_';
}

int pr_hostport_parse(const char *s, char *host, size_t host_size, uint16_t *port)
{
    if (!s)
        return PR_EINVAL;
    const char *h = s, *colon;
    bool bracketed = s[0] == '[';
    if (bracketed) {
        const char *rb = strchr(s, ']');
        if (!rb || rb[1] != ':')
            return PR_EINVAL;
        h = s + 1;
        colon = rb + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return PR_EINVAL;
    }
    size_t hlen = (size_t)((bracketed ? colon - 1 : colon) - h);
    for (size_t i = 0; i < hlen; i++)
        if (!pr__host_char(h[i], bracketed))
            return PR_EINVAL;
    const char *p = colon + 1;
    if (!*p || strlen(p) > 5)
        return PR_EINVAL;
    unsigned v = 0;
    for (; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return PR_EINVAL;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (v > 65535)
        return PR_EINVAL;
    if (host) {
        if (hlen >= host_size)
            return PR_EINVAL;
        memcpy(host, h, hlen);
        host[hlen] = '\0';
    }
    if (port)
        *port = (uint16_t)v;
    return 0;
}
