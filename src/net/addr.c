/* HOST:PORT parsing without sscanf: split on the last ':' (or after ']'),
 * check the port by hand, resolve the host with getaddrinfo. */
#include "net/addr.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

static void set_err(char *errbuf, size_t errlen, const char *fmt, const char *arg)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, fmt, arg);
}

static int parse_port(const char *p, unsigned *out)
{
    unsigned v = 0;
    if (*p == '\0')
        return -EINVAL;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -EINVAL;
        v = v * 10 + (unsigned)(*p - '0');
        if (v > 65535)
            return -EINVAL;
    }
    *out = v;
    return 0;
}

int tw__net_parse_hostport(const char *s, struct sockaddr_storage *out, socklen_t *out_len,
                           char *errbuf, size_t errlen)
{
    char host[256];
    const char *port_str;
    size_t host_len;
    unsigned port;
    int bracketed = 0;

    if (!s || !*s) {
        set_err(errbuf, errlen, "empty address%s", "");
        return -EINVAL;
    }
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':') {
            set_err(errbuf, errlen, "'%s': expected [IPv6]:PORT", s);
            return -EINVAL;
        }
        host_len = (size_t)(close - s - 1);
        if (host_len == 0 || host_len >= sizeof(host)) {
            set_err(errbuf, errlen, "'%s': bad IPv6 address", s);
            return -EINVAL;
        }
        memcpy(host, s + 1, host_len);
        port_str = close + 2;
        bracketed = 1;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon) {
            set_err(errbuf, errlen, "'%s': expected HOST:PORT", s);
            return -EINVAL;
        }
        host_len = (size_t)(colon - s);
        if (memchr(s, ':', host_len)) {
            set_err(errbuf, errlen, "'%s': an IPv6 address needs brackets: [ADDR]:PORT", s);
            return -EINVAL;
        }
        if (host_len >= sizeof(host)) {
            set_err(errbuf, errlen, "'%s': host name too long", s);
            return -EINVAL;
        }
        memcpy(host, s, host_len);
        port_str = colon + 1;
    }
    host[host_len] = '\0';
    if (parse_port(port_str, &port) != 0) {
        set_err(errbuf, errlen, "'%s': port must be a number 0..65535", s);
        return -EINVAL;
    }
    if (host_len == 0)
        strcpy(host, "0.0.0.0");

    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = bracketed ? AF_INET6 : AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
    char port_buf[8];
    snprintf(port_buf, sizeof(port_buf), "%u", port);
    int rc = getaddrinfo(host, port_buf, &hints, &res);
    if (rc == EAI_BADFLAGS || (rc != 0 && res == NULL)) {
        /* AI_ADDRCONFIG hides loopback-only families on hosts without a
         * configured address of that family; retry without it. */
        hints.ai_flags = AI_NUMERICSERV;
        rc = getaddrinfo(host, port_buf, &hints, &res);
    }
    if (rc != 0 || !res) {
        set_err(errbuf, errlen, "cannot resolve host '%s'", host);
        return -EADDRNOTAVAIL;
    }
    if (res->ai_addrlen > sizeof(*out)) {
        freeaddrinfo(res);
        set_err(errbuf, errlen, "'%s': address too long", s);
        return -EINVAL;
    }
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    *out_len = res->ai_addrlen;
    freeaddrinfo(res);
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
