/* HOST:PORT parsing without sscanf: split on the last ':' (or after ']'),
 * check the port by hand, resolve the host with getaddrinfo. */
#include "net/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "tensorwire/error.h"

static int parse_port(const char *p, unsigned *out)
{
    unsigned v = 0;
    if (*p == '\0')
        return TW_EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return TW_EINVAL;
        v = v * 10 + (unsigned)(*p - '0');
        if (v > 65535)
            return TW_EINVAL;
    }
    *out = v;
    return 0;
}

int tw__net_split_hostport(const char *s, char host[TW_NET_HOST_MAX + 1], unsigned *port,
                           char *errbuf, size_t errlen)
{
    const char *port_str;
    size_t host_len;

    if (!s || !*s) {
        tw__errbuf_set(errbuf, errlen, "empty address");
        return TW_EINVAL;
    }
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') {
            tw__errbuf_set(errbuf, errlen, "'%s': expected [IPv6]:PORT", s);
            return TW_EINVAL;
        }
        host_len = (size_t)(close - s - 1);
        if (host_len == 0 || host_len > TW_NET_HOST_MAX) {
            tw__errbuf_set(errbuf, errlen, "'%s': bad IPv6 address", s);
            return TW_EINVAL;
        }
        memcpy(host, s + 1, host_len);
        port_str = close + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon) {
            tw__errbuf_set(errbuf, errlen, "'%s': expected HOST:PORT", s);
            return TW_EINVAL;
        }
        host_len = (size_t)(colon - s);
        if (memchr(s, ':', host_len)) {
            tw__errbuf_set(errbuf, errlen, "'%s': an IPv6 address needs brackets: [ADDR]:PORT", s);
            return TW_EINVAL;
        }
        if (host_len > TW_NET_HOST_MAX) {
            tw__errbuf_set(errbuf, errlen, "'%s': host name too long", s);
            return TW_EINVAL;
        }
        memcpy(host, s, host_len);
        port_str = colon + 1;
    }
    host[host_len] = '\0';
    if (parse_port(port_str, port) != 0) {
        tw__errbuf_set(errbuf, errlen, "'%s': port must be a number 0..65535", s);
        return TW_EINVAL;
    }
    return 0;
}

/* getaddrinfo with AI_ADDRCONFIG, retried without it: AI_ADDRCONFIG hides
 * loopback-only families on hosts without a configured address of that
 * family. Returns getaddrinfo's code; *res is set only on 0. */
static int resolve(const char *host, unsigned port, int family, struct addrinfo **res)
{
    struct addrinfo hints;
    char port_buf[8];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
    snprintf(port_buf, sizeof(port_buf), "%u", port);
    *res = NULL;
    int rc = getaddrinfo(host, port_buf, &hints, res);
    if (rc == EAI_BADFLAGS || (rc != 0 && *res == NULL)) {
        hints.ai_flags = AI_NUMERICSERV;
        rc = getaddrinfo(host, port_buf, &hints, res);
    }
    if (rc == 0 && !*res)
        rc = EAI_NONAME;
    return rc;
}

int tw__net_parse_hostport(const char *s, struct sockaddr_storage *out, socklen_t *out_len,
                           char *errbuf, size_t errlen)
{
    char host[TW_NET_HOST_MAX + 1];
    unsigned port;
    struct addrinfo *res;
    int rc = tw__net_split_hostport(s, host, &port, errbuf, errlen);
    if (rc)
        return rc;
    if (host[0] == '\0')
        strcpy(host, "0.0.0.0");
    if (resolve(host, port, s[0] == '[' ? AF_INET6 : AF_UNSPEC, &res) != 0) {
        tw__errbuf_set(errbuf, errlen, "cannot resolve host '%s'", host);
        return -EADDRNOTAVAIL;
    }
    if (res->ai_addrlen > sizeof(*out)) {
        freeaddrinfo(res);
        tw__errbuf_set(errbuf, errlen, "'%s': address too long", s);
        return TW_EINVAL;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

/* One non-blocking connect to ai, waited for until deadline_ns (0: none).
 * Returns the fd or a negative code. */
static int connect_one(const struct addrinfo *ai, uint64_t deadline_ns, int sockbuf)
{
    int one = 1, err;
    socklen_t elen = sizeof(err);
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -errno;
    /* Small control frames must not wait for Nagle. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sockbuf > 0) {
        (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof(sockbuf));
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof(sockbuf));
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        err = -errno;
        goto out_close_fd;
    }
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int wait_ms = -1;
        if (deadline_ns) {
            uint64_t now = tw__now_ns();
            if (now >= deadline_ns) {
                err = TW_ETIMEDOUT;
                goto out_close_fd;
            }
            /* Round up so a sub-millisecond remainder still waits. */
            wait_ms = (int)((deadline_ns - now + 999999u) / 1000000u);
        }
        int n = poll(&p, 1, wait_ms);
        if (n > 0)
            break;
        if (n < 0 && errno != EINTR) {
            err = -errno;
            goto out_close_fd;
        }
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0) {
        err = -errno;
        goto out_close_fd;
    }
    if (err) {
        err = -err;
        goto out_close_fd;
    }
    return fd;

out_close_fd:
    close(fd);
    return err;
}

int tw__net_connect_hostport(const char *s, int timeout_ms, int sockbuf, int *out_fd, char *errbuf,
                             size_t errlen)
{
    char host[TW_NET_HOST_MAX + 1];
    unsigned port;
    struct addrinfo *res, *ai;
    int fd = TW_EINVAL;
    int rc = tw__net_split_hostport(s, host, &port, errbuf, errlen);
    if (rc)
        return rc;
    if (host[0] == '\0') {
        tw__errbuf_set(errbuf, errlen, "'%s': no host to connect to", s);
        return TW_EINVAL;
    }
    uint64_t deadline_ns = timeout_ms > 0 ? tw__now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
    rc = resolve(host, port, s[0] == '[' ? AF_INET6 : AF_UNSPEC, &res);
    if (rc != 0) {
        int e = errno;
        tw__errbuf_set(errbuf, errlen, "cannot resolve '%s': %s", host, gai_strerror(rc));
        return rc == EAI_SYSTEM && e ? -e : -EHOSTUNREACH;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = connect_one(ai, deadline_ns, sockbuf);
        if (fd >= 0 || fd == TW_ETIMEDOUT)
            break;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        if (fd == TW_ETIMEDOUT)
            tw__errbuf_set(errbuf, errlen, "cannot connect to %s within %d ms", s, timeout_ms);
        else
            tw__errbuf_set(errbuf, errlen, "cannot connect to %s: %s", s, tw_strerror(fd));
        return fd;
    }
    *out_fd = fd;
    return 0;
}

char *tw__net_addr_format(const struct sockaddr *sa, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    if (!buf || len == 0)
        return buf;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(buf, len, "%s:%u", ip, (unsigned)ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        snprintf(buf, len, "[%s]:%u", ip, (unsigned)ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(family %d)", (int)sa->sa_family);
    }
    return buf;
}

int tw__net_same_host(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return 0;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr)) == 0;
    return 0;
}
