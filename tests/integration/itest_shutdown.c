/* Deadlines and shutdown: a stalled put gets TIMEOUT for that request only;
 * SIGTERM with transfers in flight fails them with SHUTTING_DOWN, says
 * GOODBYE, closes, and the process exits 0. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "tensorwire/client.h"
#include "tw_test.h"

static void start_put(struct itc *c, uint64_t id, const char *name, uint64_t len, uint64_t send)
{
    struct tw_msg m;
    uint64_t shape[1] = {len};
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = id;
    itest_desc(&m.u.tensor_put.desc, name, TW_DTYPE_U8, 1, shape);
    itc_send(c, &m);
    TW_ASSERT_OK(itc_recv(c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    uint8_t *buf = calloc(1, send);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = id;
    m.hdr.flags = TW_FRAME_MORE;
    m.u.data.bytes.ptr = buf;
    m.u.data.bytes.len = (uint32_t)send;
    itc_send(c, &m);
    free(buf);
}

static void test_transfer_timeout(void)
{
    struct itest_server srv;
    const char *args[] = {"--transfer-timeout", "0.4", NULL};
    itest_server_start(&srv, args);
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t id = itc_id(&c);
    start_put(&c, id, "slow", 1u << 20, 4096);
    uint64_t t0 = itest_now_ms();
    itc_expect_error(&c, id, TW_WIRE_TIMEOUT);
    TW_ASSERT(itest_now_ms() - t0 < 3000);
    /* Late DATA for the ended request is dropped; the connection lives. */
    struct tw_msg m;
    uint8_t buf[100] = {0};
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = id;
    m.hdr.flags = TW_FRAME_MORE;
    m.u.data.offset = 4096;
    m.u.data.bytes.ptr = buf;
    m.u.data.bytes.len = sizeof(buf);
    itc_send(&c, &m);
    TW_ASSERT_EQ(itc_ping(&c), 0);
    TW_ASSERT_EQ(itc_stat(&c, "slow", NULL), TW_WIRE_NOT_FOUND);
    itc_close(&c);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
}

static void test_sigterm_in_flight(void)
{
    struct itest_server srv;
    itest_server_start(&srv, NULL);
    struct itc p, g, idle;
    itc_connect(&p, &srv);
    itc_connect(&g, &srv);
    itc_connect(&idle, &srv);
    TW_ASSERT_OK(itc_handshake(&p, NULL));
    TW_ASSERT_OK(itc_handshake(&g, NULL));
    TW_ASSERT_OK(itc_handshake(&idle, NULL));

    /* g: a 64 MiB tensor requested but not read: its GET stays in flight. */
    uint64_t len = 64u << 20, shape[1] = {len};
    uint8_t *data = calloc(1, len);
    TW_ASSERT_EQ(itc_put(&g, "big", TW_DTYPE_U8, 1, shape, data, len, 0), 0);
    free(data);
    struct tw_msg m;
    uint64_t gid = itc_send_get(&g, "big", 0);
    /* p: a put with half its bytes sent. */
    uint64_t pid = itc_id(&p);
    start_put(&p, pid, "partial", 1u << 20, 512u << 10);
    TW_ASSERT_EQ(itc_ping(&p), 0); /* the server has seen the DATA */

    kill(srv.pid, SIGTERM);

    /* idle: GOODBYE; a request crossing it gets SHUTTING_DOWN (within the
     * server's reply window, so this is checked first). */
    TW_ASSERT_OK(itc_recv(&idle, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_GOODBYE);
    TW_ASSERT_EQ(m.u.goodbye.code, TW_WIRE_SHUTTING_DOWN);
    uint64_t late = itc_id(&idle);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_STAT;
    m.hdr.request_id = late;
    m.u.name.name.ptr = (const uint8_t *)"big";
    m.u.name.name.len = 3;
    itc_send(&idle, &m);
    itc_expect_error(&idle, late, TW_WIRE_SHUTTING_DOWN);

    /* p: ERROR(SHUTTING_DOWN, pid), GOODBYE(SHUTTING_DOWN), EOF. */
    itc_expect_error(&p, pid, TW_WIRE_SHUTTING_DOWN);
    TW_ASSERT_OK(itc_recv(&p, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_GOODBYE);
    TW_ASSERT_EQ(m.u.goodbye.code, TW_WIRE_SHUTTING_DOWN);
    TW_ASSERT_OK(itc_expect_eof(&p));
    itc_close(&p); /* a peer that got GOODBYE closes; the server waits for that */
    /* g: DATA frames already queued, then the ERROR and GOODBYE. */
    int saw_error = 0, saw_goodbye = 0;
    for (;;) {
        int rc = itc_recv(&g, &m);
        if (rc == -EPIPE)
            break;
        TW_ASSERT_OK(rc);
        if (m.hdr.tag == TW_TAG_ERROR) {
            TW_ASSERT_EQ_U64(m.hdr.request_id, gid);
            TW_ASSERT_EQ(m.u.error.code, TW_WIRE_SHUTTING_DOWN);
            saw_error = 1;
        } else if (m.hdr.tag == TW_TAG_GOODBYE) {
            saw_goodbye = 1;
        } else {
            TW_ASSERT(m.hdr.tag == TW_TAG_TENSOR_INFO || m.hdr.tag == TW_TAG_DATA);
            TW_ASSERT(!saw_error);
        }
    }
    TW_ASSERT(saw_error && saw_goodbye);
    itc_close(&g);
    /* idle: EOF after the GOODBYE reply window. */
    TW_ASSERT_OK(itc_expect_eof(&idle));
    itc_close(&idle);
    TW_ASSERT_EQ(itest_server_stop(&srv, 0, 10000), 0);
}

static void test_idle_timeout(void)
{
    struct itest_server srv;
    const char *args[] = {"--idle-timeout", "0.3", NULL};
    itest_server_start(&srv, args);
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_GOODBYE);
    TW_ASSERT_EQ(m.u.goodbye.code, TW_WIRE_TIMEOUT);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
}

/* The library against the real server (client.h): after SIGTERM one call
 * reports SHUTTING_DOWN, then every call fails with -ENOTCONN at once, and
 * tw_client_is_connected says so (a reconnect loop stops spinning). */
static void test_library_after_goodbye(void)
{
    struct itest_server srv;
    itest_server_start(&srv, NULL);
    struct tw_client_options o;
    tw_client *c = NULL;
    tw_client_options_init(&o);
    o.request_timeout_ms = 10000;
    TW_ASSERT_OK(tw_client_connect(srv.addr, &o, &c));
    TW_ASSERT_EQ(tw_client_is_connected(c), 1);
    TW_ASSERT_OK(tw_ping(c, NULL));
    kill(srv.pid, SIGTERM);
    /* Calls answered before the server saw the signal still succeed. */
    int rc = 0;
    uint64_t t0 = itest_now_ms();
    while ((rc = tw_ping(c, NULL)) == 0) {
        TW_ASSERT(itest_now_ms() - t0 < 10000);
        usleep(1000);
    }
    fprintf(stderr, "  first failure: %s: %s\n", tw_strerror_name(rc),
            tw_client_last_error_message(c));
    TW_ASSERT_ERR(rc, TW_ESHUTDOWN);
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    for (int i = 0; i < 100; i++)
        TW_ASSERT_ERR(tw_ping(c, NULL), -ENOTCONN);
    tw_close(c);
    TW_ASSERT_EQ(itest_server_stop(&srv, 0, 10000), 0);
}

int main(void)
{
    TW_RUN(test_transfer_timeout);
    TW_RUN(test_sigterm_in_flight);
    TW_RUN(test_idle_timeout);
    TW_RUN(test_library_after_goodbye);
    TW_DONE();
}
