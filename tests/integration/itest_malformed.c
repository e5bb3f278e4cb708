/* Hostile and broken peers: raw malformed bytes get ERROR(PROTOCOL_ERROR,
 * id 0) and a close, a killed client leaves no partial tensor, limits on
 * connections and handshake time hold, and through all of it a second
 * connection keeps working. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;
static struct itc good; /* the bystander connection */

static void bystander_ok(void)
{
    TW_ASSERT_EQ(itc_ping(&good), 0);
    TW_ASSERT(itest_server_alive(&srv));
}

/* Sends raw bytes on a fresh connection (after a handshake when ready) and
 * expects ERROR(code, 0) followed by EOF. */
static void expect_fatal(const void *bytes, size_t len, int handshake, uint32_t code)
{
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    if (handshake)
        TW_ASSERT_OK(itc_handshake(&c, NULL));
    TW_ASSERT_OK(itc_send_raw(&c, bytes, len));
    itc_expect_error(&c, 0, code);
    TW_ASSERT_OK(itc_expect_eof(&c));
    (void)m;
    itc_close(&c);
    bystander_ok();
}

static size_t frame(uint8_t *buf, uint32_t tag, uint32_t len, uint64_t id)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_PING;
    m.hdr.request_id = 1;
    TW_ASSERT_EQ(tw__msg_encode(&m, buf, 64), 32);
    memcpy(buf + 8, &tag, 4);
    memcpy(buf + 12, &len, 4);
    memcpy(buf + 16, &id, 8);
    return 24;
}

static void test_bad_magic(void)
{
    uint8_t b[64];
    size_t n = frame(b, TW_TAG_PING, 8, 1);
    memcpy(b, "HTTP", 4);
    expect_fatal(b, n + 8, 0, TW_WIRE_PROTOCOL_ERROR);
    expect_fatal("GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, 1, TW_WIRE_PROTOCOL_ERROR);
}

static void test_unknown_tag(void)
{
    uint8_t b[64];
    size_t n = frame(b, 0x77, 0, 1);
    expect_fatal(b, n, 1, TW_WIRE_PROTOCOL_ERROR);
}

static void test_oversized(void)
{
    uint8_t b[64];
    /* Before the handshake the limit is 4096 bytes. */
    size_t n = frame(b, TW_TAG_HELLO, 5000, 0);
    expect_fatal(b, n, 0, TW_WIRE_PROTOCOL_ERROR);
    /* After it, the negotiated max_frame (16 MiB). */
    n = frame(b, TW_TAG_DATA, (16u << 20) + 1, 1);
    expect_fatal(b, n, 1, TW_WIRE_PROTOCOL_ERROR);
    /* A control message longer than any valid one is not buffered. */
    n = frame(b, TW_TAG_STAT, 1u << 20, 1);
    expect_fatal(b, n, 1, TW_WIRE_PROTOCOL_ERROR);
}

static void test_out_of_order(void)
{
    struct tw_msg m;
    uint8_t b[128];
    /* A request before HELLO. */
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_PING;
    m.hdr.request_id = 1;
    ssize_t n = tw__msg_encode(&m, b, sizeof(b));
    expect_fatal(b, (size_t)n, 0, TW_WIRE_PROTOCOL_ERROR);
    /* DATA for a request that was never opened. */
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = 5;
    m.u.data.bytes.ptr = (const uint8_t *)"abcd";
    m.u.data.bytes.len = 4;
    n = tw__msg_encode(&m, b, sizeof(b));
    expect_fatal(b, (size_t)n, 1, TW_WIRE_PROTOCOL_ERROR);
    /* A server-to-client message sent by the client. */
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_OK;
    m.hdr.request_id = 1;
    n = tw__msg_encode(&m, b, sizeof(b));
    expect_fatal(b, (size_t)n, 1, TW_WIRE_PROTOCOL_ERROR);
}

static void test_duplicate_id(void)
{
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_PING;
    m.hdr.request_id = 7;
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PONG);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_PING;
    m.hdr.request_id = 7; /* ids must increase */
    itc_send(&c, &m);
    itc_expect_error(&c, 0, TW_WIRE_PROTOCOL_ERROR);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
    bystander_ok();
}

static void test_bad_data_sequence(void)
{
    struct itc c;
    struct tw_msg m;
    uint64_t shape[1] = {100};
    uint8_t data[100] = {0};
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = 1;
    itest_desc(&m.u.tensor_put.desc, "gap", TW_DTYPE_U8, 1, shape);
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    /* Offset 10 first: a gap. */
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = 1;
    m.u.data.offset = 10;
    m.u.data.bytes.ptr = data;
    m.u.data.bytes.len = 90;
    itc_send(&c, &m);
    itc_expect_error(&c, 0, TW_WIRE_PROTOCOL_ERROR);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
    TW_ASSERT_EQ(itc_stat(&good, "gap", NULL), TW_WIRE_NOT_FOUND);
    bystander_ok();
}

static void test_killed_mid_put(void)
{
    /* A child process starts a 32 MiB put, sends half, and is killed. */
    uint64_t len = 32u << 20;
    pid_t pid = fork();
    TW_ASSERT(pid >= 0);
    if (pid == 0) {
        struct itc c;
        struct tw_msg m;
        uint64_t shape[1] = {len};
        itc_connect(&c, &srv);
        if (itc_handshake(&c, NULL) != 0)
            _exit(1);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_TENSOR_PUT;
        m.hdr.request_id = 1;
        itest_desc(&m.u.tensor_put.desc, "half", TW_DTYPE_U8, 1, shape);
        itc_send(&c, &m);
        if (itc_recv(&c, &m) != 0 || m.hdr.tag != TW_TAG_PUT_ACCEPT)
            _exit(1);
        uint8_t *chunk = calloc(1, 1u << 20);
        for (uint64_t off = 0; off < len / 2; off += 1u << 20) {
            memset(&m, 0, sizeof(m));
            m.hdr.tag = TW_TAG_DATA;
            m.hdr.request_id = 1;
            m.hdr.flags = TW_FRAME_MORE;
            m.u.data.offset = off;
            m.u.data.bytes.ptr = chunk;
            m.u.data.bytes.len = 1u << 20;
            itc_send(&c, &m);
        }
        /* Half a frame header, then die without closing cleanly. */
        itc_send_raw(&c, "TWIR\x01", 5);
        raise(SIGKILL);
    }
    int st;
    TW_ASSERT_EQ(waitpid(pid, &st, 0), pid);
    TW_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* The server notices the close; the put never becomes visible. */
    for (int i = 0; i < 100 && itc_stat_value(&good, "reserved_bytes") != 0; i++)
        usleep(10000);
    TW_ASSERT_EQ(itc_stat(&good, "half", NULL), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ_U64(itc_stat_value(&good, "reserved_bytes"), 0);
    bystander_ok();
}

/* Request-level rejections name the rule and the value (protocol section
 * 8, issue #9 fix 7). Raw frames: the codec refuses to encode such names. */
static void expect_invalid(struct itc *c, const uint8_t *f, size_t len, const char *want)
{
    uint64_t id;
    char text[1100];
    memcpy(&id, f + 16, 8);
    TW_ASSERT_OK(itc_send_raw(c, f, len));
    itc_expect_error_text(c, id, TW_WIRE_INVALID_ARGUMENT, text, sizeof(text));
    if (!strstr(text, want))
        TW_FAIL("ERROR message '%s' does not say '%s'", text, want);
}

static void test_rejections_name_the_value(void)
{
    struct itc c;
    static uint8_t f[2048];
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    /* STAT with a 1040-byte name. */
    uint32_t plen = 2 + 1040;
    frame(f, TW_TAG_STAT, plen, itc_id(&c));
    f[24] = 1040 & 0xff;
    f[25] = 1040 >> 8;
    memset(f + 26, 'a', 1040);
    expect_invalid(&c, f, 24 + plen, "name is 1040 bytes, limit 1024");
    /* DELETE of a name with an overlong '/' (C0 AF) at byte offset 3. */
    static const uint8_t bad[] = {'a', 'b', 'c', 0xC0, 0xAF};
    plen = 2 + sizeof(bad);
    frame(f, TW_TAG_DELETE, plen, itc_id(&c));
    f[24] = sizeof(bad);
    f[25] = 0;
    memcpy(f + 26, bad, sizeof(bad));
    expect_invalid(&c, f, 24 + plen, "not valid UTF-8 at byte offset 3");
    /* TENSOR_PUT whose byte_length is not the shape's: encode a valid one,
     * then change byte_length (descriptor offset 8, payload offset 4). */
    struct tw_msg m;
    uint64_t shape[1] = {4};
    memset(&m, 0, sizeof(m));
    m.hdr.version = TW_PROTO_VERSION;
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = itc_id(&c);
    itest_desc(&m.u.tensor_put.desc, "shape", TW_DTYPE_U8, 1, shape);
    ssize_t n = tw__msg_encode(&m, f, sizeof(f));
    TW_ASSERT(n > 0);
    uint64_t wrong = 100;
    memcpy(f + 24 + 4 + 8, &wrong, 8);
    expect_invalid(&c, f, (size_t)n, "byte_length is 100 but u8 [4] is 4 bytes");
    TW_ASSERT_EQ(itc_ping(&c), 0);
    itc_close(&c);
}

static void test_handshake_timeout_and_max_connections(void)
{
    struct itest_server s2;
    const char *args[] = {"--handshake-timeout", "0.3", "--max-connections", "2", NULL};
    itest_server_start(&s2, args);
    struct itc a, b, c, d;
    itc_connect(&a, &s2);
    itc_connect(&b, &s2);
    TW_ASSERT_OK(itc_handshake(&b, NULL));
    /* Server full, a still silent in its handshake: a makes room for c
     * (ERROR(BUSY, 0), then EOF) and c is served. */
    itc_connect(&c, &s2);
    itc_expect_error(&a, 0, TW_WIRE_BUSY);
    TW_ASSERT_OK(itc_expect_eof(&a));
    itc_close(&a);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    /* Full of established connections: the next one is refused with
     * ERROR(BUSY, 0), never evicting an established one. */
    itc_connect(&d, &s2);
    itc_expect_error(&d, 0, TW_WIRE_BUSY);
    TW_ASSERT_OK(itc_expect_eof(&d));
    itc_close(&d);
    TW_ASSERT_EQ(itc_ping(&b), 0);
    TW_ASSERT_EQ(itc_ping(&c), 0);
    itc_close(&c);
    /* A slot is free again once c is gone (the server sees its EOF first). */
    uint64_t t0 = itest_now_ms();
    for (;;) {
        itc_connect(&a, &s2);
        int rc = itc_handshake(&a, NULL);
        itc_close(&a);
        if (rc == 0)
            break;
        TW_ASSERT_EQ(rc, TW_WIRE_BUSY);
        TW_ASSERT(itest_now_ms() - t0 < 5000);
        usleep(10000);
    }
    /* a never says HELLO: TIMEOUT after 0.3 s, then close. */
    itc_connect(&a, &s2);
    t0 = itest_now_ms();
    itc_expect_error(&a, 0, TW_WIRE_TIMEOUT);
    TW_ASSERT_OK(itc_expect_eof(&a));
    TW_ASSERT(itest_now_ms() - t0 < 3000);
    itc_close(&a);
    TW_ASSERT_EQ(itc_ping(&b), 0);
    itc_close(&b);
    TW_ASSERT_EQ(itest_server_stop(&s2, SIGTERM, 10000), 0);
}

int main(void)
{
    itest_server_start(&srv, NULL);
    itc_connect(&good, &srv);
    TW_ASSERT_OK(itc_handshake(&good, NULL));
    TW_RUN(test_bad_magic);
    TW_RUN(test_unknown_tag);
    TW_RUN(test_oversized);
    TW_RUN(test_out_of_order);
    TW_RUN(test_duplicate_id);
    TW_RUN(test_bad_data_sequence);
    TW_RUN(test_killed_mid_put);
    TW_RUN(test_rejections_name_the_value);
    TW_RUN(test_handshake_timeout_and_max_connections);
    itc_close(&good);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
