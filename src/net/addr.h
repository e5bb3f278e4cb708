/*
 * Socket address helpers: the one "HOST:PORT" parser of tensorwire (server
 * --listen, client connect), printing, and a connect by address string.
 *
 * Accepted forms: "127.0.0.1:7450", "localhost:7450", "[::1]:7450",
 * "[fe80::1%eth0]:7450" and, to listen only, ":7450" (all IPv4 interfaces).
 * An IPv6 address needs brackets ("::1:80" is refused: it is ambiguous). The
 * port is a decimal number 0..65535; 0 asks the kernel for an ephemeral port
 * when used to listen. Host names are resolved with getaddrinfo() (this may
 * block: call it at startup or from a blocking client call, not from an event
 * loop callback).
 *
 * errbuf (errlen bytes; may be NULL) receives a NUL-terminated reason on
 * failure. It belongs to the caller.
 */
#ifndef TW_NET_ADDR_H
#define TW_NET_ADDR_H

#include <stddef.h>
#include <sys/socket.h>

/* Longest string tw__net_addr_format writes, NUL included. */
#define TW_NET_ADDRSTRLEN 64

/* Longest host part accepted, NUL excluded. */
#define TW_NET_HOST_MAX 255

/*
 * Splits s into host (NUL-terminated, without brackets; "" for ":PORT") and
 * port, without resolving anything. Returns 0 or TW_EINVAL (errbuf says
 * why). host must hold TW_NET_HOST_MAX + 1 bytes.
 */
int tw__net_split_hostport(const char *s, char host[TW_NET_HOST_MAX + 1], unsigned *port,
                           char *errbuf, size_t errlen);

/*
 * Parses and resolves s into *out / *out_len (the first address found; an
 * empty host is 0.0.0.0). Returns 0, TW_EINVAL when s is not of one of the
 * forms above, or -EADDRNOTAVAIL when the host does not resolve.
 */
int tw__net_parse_hostport(const char *s, struct sockaddr_storage *out, socklen_t *out_len,
                           char *errbuf, size_t errlen);

/*
 * Connects a TCP socket to s, trying every address the host resolves to in
 * order, all within timeout_ms (<= 0: no limit). The socket is close-on-exec,
 * non-blocking and TCP_NODELAY; sockbuf > 0 sets SO_SNDBUF and SO_RCVBUF to
 * that many bytes before connecting (0 leaves autotuning on). *out_fd
 * belongs to the caller. Returns 0; TW_EINVAL for a malformed address or an
 * empty host; -EHOSTUNREACH when the host does not resolve (or the -errno of
 * a failed resolver system call); TW_ETIMEDOUT when the time ran out; else
 * the -errno of the last failed connect (e.g. -ECONNREFUSED).
 */
int tw__net_connect_hostport(const char *s, int timeout_ms, int sockbuf, int *out_fd, char *errbuf,
                             size_t errlen);

/* Writes "a.b.c.d:port" or "[v6]:port" into buf (always NUL-terminated).
 * Returns buf, so it can be passed straight to printf. */
char *tw__net_addr_format(const struct sockaddr *sa, char *buf, size_t len);

/* 1 when a and b are the same IP address (ports ignored; IPv4 and IPv6
 * compared within their family only), else 0. */
int tw__net_same_host(const struct sockaddr *a, const struct sockaddr *b);

#endif
