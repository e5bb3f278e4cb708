/*
 * libFuzzer target: one server session fed arbitrary client bytes.
 *
 * A real struct tw_srv (store, loop, handlers, state machine) serves one
 * connection over a socketpair; the input becomes what the client sends.
 * Input byte 0 selects the mode:
 *   even: raw bytes, written as they are;
 *   odd:  a valid HELLO first, then records
 *         [tag u8][flags u8][id step u8][len u16 LE][len payload bytes]
 *         each sent as a frame with a correct header, so the fuzzer spends
 *         its time in handlers and sequences rather than on the magic.
 * Output is read and discarded; the session must end cleanly (no crash, no
 * leak, no hang) however it goes. The store persists across inputs, bounded
 * by a 64 MiB capacity.
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "server/log.h"
#include "server/server.h"

static struct tw_srv srv;

static void setup(void)
{
    struct tw_srv_config cfg;
    char err[256];
    tw__srv_config_defaults(&cfg);
    snprintf(cfg.listen, sizeof(cfg.listen), "127.0.0.1:0");
    cfg.capacity = 64u << 20;
    cfg.max_frame = 64u << 10;
    cfg.log_level = TW_LOG_ERROR;
    /* No RDMA plane: fuzzed RDMA_ENDPOINT addresses would make the tcp
     * provider connect to arbitrary hosts and accumulate peers. */
    snprintf(cfg.fabric, sizeof(cfg.fabric), "none");
    tw__log_set_level(TW_LOG_ERROR);
    signal(SIGPIPE, SIG_IGN); /* as tensorwired's main() does */
    if (tw__srv_init(&srv, &cfg, err, sizeof(err)) < 0)
        abort();
}

static void drain(int fd)
{
    static uint8_t sink[1 << 16];
    while (read(fd, sink, sizeof(sink)) > 0) {
    }
}

/* Writes everything, serving the connection whenever the socket is full. */
static void feed(int fd, const uint8_t *p, size_t n)
{
    int stuck = 0;
    while (n > 0 && stuck < 1000) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL); /* the server may have closed */
        if (w > 0) {
            p += w;
            n -= (size_t)w;
            stuck = 0;
        } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
            return; /* the server closed: the rest is moot */
        } else {
            stuck++;
        }
        tw__srv_poll(&srv, 0);
        drain(fd);
    }
}

static size_t hello(uint8_t *buf)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_HELLO;
    m.u.hello.caps = TW_CAP_INLINE_DATA | TW_CAP_PAYLOAD_CRC32C;
    m.u.hello.max_frame = 64u << 10;
    m.u.hello.max_inflight = 8;
    ssize_t n = tw__msg_encode(&m, buf, 128);
    return n > 0 ? (size_t)n : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    int sv[2];
    if (!ready) {
        setup();
        ready = 1;
    }
    if (size == 0)
        return 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        return 0;
    struct sockaddr_un peer = {.sun_family = AF_UNIX};
    if (tw__conn_new(&srv, sv[0], (struct sockaddr *)&peer, 0, NULL, srv.cfg.handshake_timeout_ms) <
        0) {
        close(sv[1]);
        return 0;
    }
    if (data[0] & 1) {
        uint8_t frame[TW_FRAME_HEADER_LEN + 65536];
        uint64_t id = 0;
        feed(sv[1], frame, hello(frame));
        size_t i = 1;
        while (i + 5 <= size) {
            uint32_t tag = data[i];
            uint8_t flags = data[i + 1];
            id += data[i + 2];
            size_t len = (size_t)data[i + 3] | (size_t)data[i + 4] << 8;
            i += 5;
            if (len > size - i)
                len = size - i;
            uint32_t magic = TW_PROTO_MAGIC, plen = (uint32_t)len;
            memcpy(frame, &magic, 4);
            frame[4] = TW_PROTO_VERSION;
            frame[5] = flags & 1; /* MORE only: reserved bits are covered by raw mode */
            frame[6] = frame[7] = 0;
            memcpy(frame + 8, &tag, 4);
            memcpy(frame + 12, &plen, 4);
            memcpy(frame + 16, &id, 8);
            memcpy(frame + TW_FRAME_HEADER_LEN, data + i, len);
            feed(sv[1], frame, TW_FRAME_HEADER_LEN + len);
            i += len;
        }
    } else {
        feed(sv[1], data + 1, size - 1);
    }
    /* Half-close like a client that is done, let the server finish. */
    shutdown(sv[1], SHUT_WR);
    for (int k = 0; k < 200 && srv.conns; k++) {
        tw__srv_poll(&srv, 0);
        drain(sv[1]);
        if (srv.conns && srv.conns->state == TW_CONN_DRAINING)
            break;
    }
    close(sv[1]);
    /* Whatever is left (e.g. waiting for a timer) goes now. */
    for (struct tw_srv_conn *c = srv.conns; c; c = c->next)
        tw__conn_destroy(c, "fuzz input done");
    tw__srv_poll(&srv, 0);
    return 0;
}
