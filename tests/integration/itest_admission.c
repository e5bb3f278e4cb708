/* Connection admission under a crowd of idle, unauthenticated sockets
 * (issue #13): thousands of loopback connections from other addresses that
 * never say HELLO must not keep a legitimate client out, and every refused
 * or evicted socket gets ERROR(BUSY, 0), never a reset.
 *
 * Bounded: at most IDLE_MAX sockets (RLIMIT_NOFILE is raised to what the
 * hard limit allows, and the crowd shrinks to fit), loopback only (the
 * crowd binds 127.0.1.x source addresses, all local on Linux). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"
#include "tw_test.h"

#define IDLE_MAX 3000
#define ADDRESSES 100
#define PER_ADDRESS_CAP 8
#define HANDSHAKE_BUDGET 64

static int raise_nofile(int want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 256;
    rlim_t need = (rlim_t)want;
    if (rl.rlim_cur < need) {
        rl.rlim_cur = rl.rlim_max < need ? rl.rlim_max : need;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    return (int)rl.rlim_cur;
}

/* A nonblocking connect from 127.0.1.(1 + a). */
static int idle_connect(const struct itest_server *s, int a)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    TW_ASSERT(fd >= 0);
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000101u + (uint32_t)a);
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0)
        TW_FAIL("bind 127.0.1.%d: %s", 1 + a, strerror(errno));
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS)
        TW_FAIL("connect: %s", strerror(errno));
    return fd;
}

static void wait_connected(const int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        struct pollfd p = {.fd = fds[i], .events = POLLOUT};
        int rc = poll(&p, 1, 10000);
        TW_ASSERT(rc == 1);
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &len);
        if (err)
            TW_FAIL("idle socket %d: %s", i, strerror(err));
    }
}

/* Connect, HELLO/HELLO_ACK, PING/PONG: the time a real client waits. */
static uint64_t serve_one(const struct itest_server *s)
{
    struct itc c;
    uint64_t t0 = itest_now_ms();
    itc_connect(&c, s);
    int rc = itc_handshake(&c, NULL);
    if (rc != 0)
        TW_FAIL("legitimate client refused: %s", tw_strerror_name(TW_ERR_FROM_WIRE(rc)));
    TW_ASSERT_EQ(itc_ping(&c), 0);
    uint64_t ms = itest_now_ms() - t0;
    itc_close(&c);
    return ms;
}

/* What an idle socket got: 1 ERROR(BUSY, 0), 0 nothing yet; fails on a
 * reset or anything else. */
static int idle_outcome(int fd)
{
    uint8_t buf[2048];
    ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return 0;
    if (n < 0)
        TW_FAIL("idle socket: %s (a reset instead of ERROR(BUSY, 0))", strerror(errno));
    TW_ASSERT(n > 0);
    struct tw_msg m;
    ssize_t used = tw__msg_decode(buf, (size_t)n, TW_PREAUTH_MAX_FRAME, &m);
    if (used < 0)
        TW_FAIL("idle socket: %zd undecodable bytes: %s", n, tw_strerror_name((int)used));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_ERROR);
    TW_ASSERT_EQ_U64(m.hdr.request_id, 0);
    TW_ASSERT_EQ(m.u.error.code, TW_WIRE_BUSY);
    return 1;
}

static void test_idle_crowd(void)
{
    int limit = raise_nofile(IDLE_MAX + 256);
    int n = limit - 256 < IDLE_MAX ? limit - 256 : IDLE_MAX;
    TW_ASSERT(n >= 1000);
    /* The server inherits the raised limit: evicted sockets linger on its
     * side until their close completes. */
    const char *args[] = {"--max-handshakes",
                          "64",
                          "--max-handshakes-per-address",
                          "8",
                          "--handshake-timeout",
                          "30",
                          "--handshake-timeout-busy",
                          "30",
                          NULL};
    struct itest_server srv;
    itest_server_start(&srv, args);
    uint64_t before = serve_one(&srv);
    printf("  legitimate client before the crowd: %llu ms\n", (unsigned long long)before);

    int *fds = calloc((size_t)n, sizeof(int));
    TW_ASSERT(fds != NULL);
    uint64_t t0 = itest_now_ms();
    /* Grouped by address, so each address runs into its cap. */
    for (int i = 0; i < n; i++)
        fds[i] = idle_connect(&srv, i / (n / ADDRESSES) % ADDRESSES);
    wait_connected(fds, n);
    printf("  %d idle sockets from %d addresses connected in %llu ms\n", n, ADDRESSES,
           (unsigned long long)(itest_now_ms() - t0));

    /* Served within 100 ms on an idle machine; the assertion allows for a
     * busy one (two cores shared by parallel builds and tests). */
    uint64_t worst = 0;
    for (int k = 0; k < 5; k++) {
        uint64_t ms = serve_one(&srv);
        printf("  legitimate client with the crowd connected: %llu ms\n", (unsigned long long)ms);
        worst = ms > worst ? ms : worst;
    }
    TW_ASSERT(worst < 2000);

    /* Every crowd socket beyond the budgets was told BUSY, none reset:
     * at most HANDSHAKE_BUDGET may still be waiting (fewer: the legitimate
     * clients evicted some). Give the server time to reach them all. */
    int busy = 0, waiting = 0;
    uint64_t t1 = itest_now_ms();
    for (;;) {
        busy = waiting = 0;
        for (int i = 0; i < n; i++) {
            if (fds[i] < 0) {
                busy++;
                continue;
            }
            if (idle_outcome(fds[i])) {
                close(fds[i]); /* the server waits for this EOF */
                fds[i] = -1;
                busy++;
            } else {
                waiting++;
            }
        }
        if (waiting <= HANDSHAKE_BUDGET || itest_now_ms() - t1 > 20000)
            break;
        usleep(50000);
    }
    printf("  %d of %d idle sockets got ERROR(BUSY, 0), %d still waiting\n", busy, n, waiting);
    TW_ASSERT(waiting <= HANDSHAKE_BUDGET);
    TW_ASSERT(busy >= n - HANDSHAKE_BUDGET);

    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t evicted = itc_stat_value(&c, "connections_evicted");
    uint64_t rejected = itc_stat_value(&c, "connections_rejected");
    uint64_t handshaking = itc_stat_value(&c, "connections_handshaking");
    printf("  server: %llu evicted, %llu refused, %llu handshaking\n", (unsigned long long)evicted,
           (unsigned long long)rejected, (unsigned long long)handshaking);
    TW_ASSERT(evicted > 0);
    /* Each BUSY came from a refusal or an eviction. The per-address cap
     * refuses most of each address's group (22 of 30 when no eviction
     * interleaves; evictions make room for a few more). */
    TW_ASSERT(evicted + rejected >= (uint64_t)busy);
    TW_ASSERT(rejected >= (uint64_t)(ADDRESSES * (n / ADDRESSES - PER_ADDRESS_CAP)) / 2);
    TW_ASSERT(handshaking <= HANDSHAKE_BUDGET);
    itc_close(&c);

    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 20000), 0);
}

int main(void)
{
    TW_RUN(test_idle_crowd);
    TW_DONE();
}
