/*
 * Socket address helpers: "HOST:PORT" parsing and printing.
 *
 * Accepted forms: "127.0.0.1:7450", "localhost:7450", "[::1]:7450",
 * "[fe80::1%eth0]:7450" and ":7450" (all IPv4 interfaces). The port is a
 * decimal number 0..65535; 0 asks the kernel for an ephemeral port when used
 * to listen. Host names are resolved with getaddrinfo() (this may block: call
 * it at startup, not from an event loop callback).
 */
#ifndef TW_NET_ADDR_H
#define TW_NET_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Longest string tw__net_addr_format writes, NUL included. */
#define TW_NET_ADDRSTRLEN 64

/*
 * Parses s into *out / *out_len. Returns 0, -EINVAL when s is not of one of
 * the forms above (errbuf says why), or -EADDRNOTAVAIL when the host does not
 * resolve. errbuf (may be NULL) receives a NUL-terminated reason.
 */
int tw__net_parse_hostport(const char *s, struct sockaddr_storage *out, socklen_t *out_len,
                           char *errbuf, size_t errlen);

/* Writes "a.b.c.d:port" or "[v6]:port" into buf (always NUL-terminated).
 * Returns buf, so it can be passed straight to printf. */
char *tw__net_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* 1 when a and b are the same IP address (ports ignored; IPv4 and IPv6
 * compared within their family only), else 0. */
int tw__net_same_host(const struct sockaddr *a, const struct sockaddr *b);

#endif
