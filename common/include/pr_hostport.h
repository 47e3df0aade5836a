/*
 * pr_hostport.h — "host:port" addresses as every listener and client in
 * piperec spells them: "host:port", "[v6addr]:port" or ":port" (host empty =
 * all interfaces). One parser, so a config check and the socket that later
 * binds can never disagree about what an address means.
 */
#ifndef PR_HOSTPORT_H
#define PR_HOSTPORT_H

#include <stddef.h>
#include <stdint.h>

/* Split `s` into host (without brackets; may be "") and port (0..65535; 0 =
 * pick one). The host may hold letters, digits, '.', '-', '_' (or, inside
 * brackets, hex digits, ':' and '.'); the port is 1-5 decimal digits.
 * host/port may be NULL when not wanted. Returns 0 or PR_EINVAL (also when
 * the host does not fit in host_size). */
int pr_hostport_parse(const char *s, char *host, size_t host_size, uint16_t *port);

#endif
