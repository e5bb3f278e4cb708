/*
 * libtensorwire against a scripted fake server on a real loopback socket: a
 * thread accepts one connection, answers the handshake (built with the codec)
 * and then misbehaves in one chosen way. Checks that the client refuses a
 * server that fails mutual authentication, kills the connection on a
 * malformed or out-of-bounds frame with a message saying why, times out on a
 * silent server, turns GOODBYE + close into SHUTTING_DOWN, and fails every
 * later call with -ENOTCONN. Shutdown (include/tensorwire/client.h): after
 * GOODBYE one call reports SHUTTING_DOWN, every later one -ENOTCONN; a put
 * whose send fails because the server closed after saying why reports
 * SHUTTING_DOWN, not the socket's EPIPE.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "tw_test.h"

enum script {
    BAD_AUTH_OK,   /* HMAC handshake, AUTH_OK with a wrong MAC */
    BAD_MAGIC,     /* after the handshake, a frame with bad magic */
    DATA_TOO_LONG, /* TENSOR_INFO says 4 bytes, DATA carries 8 */
    SILENT,        /* reads requests, never answers */
    GOODBYE_CLOSE, /* GOODBYE then close with a request in flight */
    ERROR_ID0,     /* ERROR(INTERNAL, 0) with a message */
    GOODBYE_IDLE,  /* PONG + GOODBYE, then ERROR(SHUTTING_DOWN, id) to all */
    SHUTDOWN_PUT   /* mid-put: ERROR(SHUTTING_DOWN, id), GOODBYE, close unread */
};

struct fake {
    int lfd;
    enum script script;
    char addr[64];
};

static void send_msg(int fd, struct tw_msg *m)
{
    uint8_t buf[4096];
    m->hdr.version = TW_PROTO_VERSION;
    ssize_t n = tw__msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        TW_FAIL("fake server: encode %s: %s", tw__tag_name(m->hdr.tag), tw_strerror_name((int)n));
    if (send(fd, buf, (size_t)n, MSG_NOSIGNAL) != n)
        TW_FAIL("fake server: send");
}

/* Reads one whole frame into buf; returns its header or exits on EOF. */
static int read_frame(int fd, uint8_t *buf, size_t cap, struct tw_msg *m)
{
    size_t len = 0;
    for (;;) {
        ssize_t n = tw__msg_decode(buf, len, TW_DEFAULT_MAX_FRAME, m);
        if (n > 0)
            return 0;
        if (n != TW_EAGAIN_FRAME)
            TW_FAIL("fake server: client sent a bad frame: %s", tw_strerror_name((int)n));
        ssize_t r = recv(fd, buf + len, cap - len, 0);
        if (r <= 0)
            return -1;
        len += (size_t)r;
    }
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    uint8_t buf[8192];
    struct tw_msg in, m;
    int fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    if (read_frame(fd, buf, sizeof(buf), &in) || in.hdr.tag != TW_TAG_HELLO)
        TW_FAIL("fake server: no HELLO");
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_HELLO_ACK;
    m.u.hello_ack.caps = TW_CAP_INLINE_DATA;
    m.u.hello_ack.max_frame = TW_MIN_MAX_FRAME;
    m.u.hello_ack.max_inflight = 4;
    m.u.hello_ack.auth_method = f->script == BAD_AUTH_OK ? TW_AUTH_HMAC_SHA256 : TW_AUTH_NONE;
    memset(m.u.hello_ack.server_nonce, f->script == BAD_AUTH_OK ? 7 : 0, TW_AUTH_NONCE_LEN);
    m.u.hello_ack.agent.ptr = (const uint8_t *)"fake";
    m.u.hello_ack.agent.len = 4;
    send_msg(fd, &m);
    if (f->script == BAD_AUTH_OK) {
        if (read_frame(fd, buf, sizeof(buf), &in) || in.hdr.tag != TW_TAG_AUTH)
            TW_FAIL("fake server: no AUTH");
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_AUTH_OK;
        memset(m.u.auth_ok.mac, 0x42, TW_AUTH_MAC_LEN); /* not the token's proof */
        send_msg(fd, &m);
        goto out_drain;
    }
    if (read_frame(fd, buf, sizeof(buf), &in))
        goto out_close;
    uint64_t id = in.hdr.request_id;
    memset(&m, 0, sizeof(m));
    switch (f->script) {
    case BAD_MAGIC: {
        uint8_t junk[TW_FRAME_HEADER_LEN] = {'N', 'O', 'P', 'E', 1};
        if (send(fd, junk, sizeof(junk), MSG_NOSIGNAL) < 0)
            TW_FAIL("send");
        break;
    }
    case DATA_TOO_LONG: {
        static const uint8_t eight[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        m.hdr.tag = TW_TAG_TENSOR_INFO;
        m.hdr.request_id = id;
        m.u.tensor_info.data_plane = TW_DP_INLINE;
        m.u.tensor_info.desc.dtype = TW_DTYPE_U8;
        m.u.tensor_info.desc.ndim = 1;
        m.u.tensor_info.desc.shape[0] = 4;
        m.u.tensor_info.desc.byte_length = 4;
        m.u.tensor_info.desc.name = in.u.tensor_request.name;
        m.u.tensor_info.desc.device_tag.ptr = (const uint8_t *)"cpu";
        m.u.tensor_info.desc.device_tag.len = 3;
        send_msg(fd, &m);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_DATA;
        m.hdr.request_id = id;
        m.u.data.offset = 0;
        m.u.data.bytes.ptr = eight;
        m.u.data.bytes.len = 8;
        send_msg(fd, &m);
        break;
    }
    case GOODBYE_CLOSE:
        m.hdr.tag = TW_TAG_GOODBYE;
        m.u.goodbye.code = TW_WIRE_SHUTTING_DOWN;
        send_msg(fd, &m);
        goto out_close;
    case GOODBYE_IDLE: {
        m.hdr.tag = TW_TAG_PONG;
        m.hdr.request_id = id;
        memcpy(m.u.ping.payload, in.u.ping.payload, TW_PING_PAYLOAD_LEN);
        send_msg(fd, &m);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_GOODBYE;
        m.u.goodbye.code = TW_WIRE_SHUTTING_DOWN;
        send_msg(fd, &m);
        /* Like tensorwired in its GOODBYE window: crossing requests get
         * ERROR(SHUTTING_DOWN, id) until the client closes. */
        while (read_frame(fd, buf, sizeof(buf), &in) == 0) {
            static const char text[] = "PING not started: the server is shutting down";
            memset(&m, 0, sizeof(m));
            m.hdr.tag = TW_TAG_ERROR;
            m.hdr.request_id = in.hdr.request_id;
            m.u.error.code = TW_WIRE_SHUTTING_DOWN;
            m.u.error.message.ptr = (const uint8_t *)text;
            m.u.error.message.len = sizeof(text) - 1;
            send_msg(fd, &m);
        }
        goto out_close;
    }
    case SHUTDOWN_PUT: {
        static const char text[] = "put of 'big' abandoned: server is shutting down";
        if (in.hdr.tag != TW_TAG_TENSOR_PUT)
            TW_FAIL("fake server: expected TENSOR_PUT, got %s", tw__tag_name(in.hdr.tag));
        m.hdr.tag = TW_TAG_PUT_ACCEPT;
        m.hdr.request_id = id;
        m.u.put_accept.data_plane = TW_DP_INLINE;
        send_msg(fd, &m);
        /* Some DATA arrives: the client is busy sending the rest. */
        if (recv(fd, buf, sizeof(buf), MSG_WAITALL) <= 0)
            TW_FAIL("fake server: no DATA");
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_ERROR;
        m.hdr.request_id = id;
        m.u.error.code = TW_WIRE_SHUTTING_DOWN;
        m.u.error.message.ptr = (const uint8_t *)text;
        m.u.error.message.len = sizeof(text) - 1;
        send_msg(fd, &m);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_GOODBYE;
        m.u.goodbye.code = TW_WIRE_SHUTTING_DOWN;
        send_msg(fd, &m);
        goto out_close; /* with DATA unread: the kernel answers it with a reset */
    }
    case ERROR_ID0:
        m.hdr.tag = TW_TAG_ERROR;
        m.u.error.code = TW_WIRE_INTERNAL;
        m.u.error.message.ptr = (const uint8_t *)"fake server exploded";
        m.u.error.message.len = 20;
        send_msg(fd, &m);
        goto out_close;
    default:
        break;
    }
out_drain:
    /* Keep the socket open until the client is done with it. */
    while (recv(fd, buf, sizeof(buf), 0) > 0)
        ;
out_close:
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f, pthread_t *th, enum script s)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    f->script = s;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    TW_ASSERT(f->lfd >= 0);
    TW_ASSERT_EQ(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    TW_ASSERT_EQ(listen(f->lfd, 1), 0);
    TW_ASSERT_EQ(getsockname(f->lfd, (struct sockaddr *)&a, &alen), 0);
    snprintf(f->addr, sizeof(f->addr), "127.0.0.1:%u", ntohs(a.sin_port));
    TW_ASSERT_EQ(pthread_create(th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f, pthread_t th)
{
    pthread_join(th, NULL);
    close(f->lfd);
}

static tw_client *connect_ok(struct fake *f, int timeout_ms)
{
    struct tw_client_options o;
    tw_client *c = NULL;
    tw_client_options_init(&o);
    o.request_timeout_ms = timeout_ms;
    TW_ASSERT_OK(tw_client_connect(f->addr, &o, &c));
    TW_ASSERT_EQ(tw_client_max_frame(c), TW_MIN_MAX_FRAME);
    TW_ASSERT_EQ(tw_client_max_inflight(c), 4);
    return c;
}

static void test_server_fails_mutual_auth(void)
{
    struct fake f;
    pthread_t th;
    struct tw_client_options o;
    tw_client *c = (tw_client *)1;
    char err[256];
    fake_start(&f, &th, BAD_AUTH_OK);
    tw_client_options_init(&o);
    o.token = "the-real-token";
    TW_ASSERT_ERR(tw_client_connect_error(f.addr, &o, &c, err, sizeof(err)), TW_EUNAUTHORIZED);
    TW_ASSERT(c == NULL);
    TW_ASSERT(strstr(err, "proof is wrong") != NULL);
    fake_stop(&f, th);
}

static void test_bad_magic_kills_connection(void)
{
    struct fake f;
    pthread_t th;
    fake_start(&f, &th, BAD_MAGIC);
    tw_client *c = connect_ok(&f, 5000);
    TW_ASSERT_EQ(tw_client_is_connected(c), 1);
    TW_ASSERT_ERR(tw_ping(c, NULL), TW_EBAD_MAGIC);
    TW_ASSERT(TW_ERR_IS_VERDICT(TW_EBAD_MAGIC));
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    TW_ASSERT(strstr(tw_client_last_error_message(c), "EBAD_MAGIC") != NULL);
    TW_ASSERT_ERR(tw_ping(c, NULL), -ENOTCONN);
    TW_ASSERT(strstr(tw_client_last_error_message(c), "closed") != NULL);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_data_past_length(void)
{
    struct fake f;
    pthread_t th;
    uint8_t buf[64];
    memset(buf, 0xee, sizeof(buf));
    fake_start(&f, &th, DATA_TOO_LONG);
    tw_client *c = connect_ok(&f, 5000);
    int rc = tw_get(c, "t", buf, sizeof(buf), NULL);
    TW_ASSERT(TW_ERR_IS_VERDICT(rc)); /* a decoder / state-machine verdict */
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    fprintf(stderr, "  verdict %s: %s\n", tw_strerror_name(rc), tw_client_last_error_message(c));
    for (size_t i = 4; i < sizeof(buf); i++)
        TW_ASSERT_EQ(buf[i], 0xee); /* nothing written past the announced bytes */
    TW_ASSERT_ERR(tw_get(c, "t", buf, sizeof(buf), NULL), -ENOTCONN);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_silent_server_times_out(void)
{
    struct fake f;
    pthread_t th;
    fake_start(&f, &th, SILENT);
    tw_client *c = connect_ok(&f, 200);
    TW_ASSERT_ERR(tw_stat(c, "t", NULL), TW_ETIMEDOUT);
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    TW_ASSERT(strstr(tw_client_last_error_message(c), "200 ms") != NULL);
    TW_ASSERT_ERR(tw_stat(c, "t", NULL), -ENOTCONN);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_goodbye_then_close(void)
{
    struct fake f;
    pthread_t th;
    fake_start(&f, &th, GOODBYE_CLOSE);
    tw_client *c = connect_ok(&f, 5000);
    TW_ASSERT_ERR(tw_delete(c, "t"), TW_ESHUTDOWN);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_connection_error_message(void)
{
    struct fake f;
    pthread_t th;
    fake_start(&f, &th, ERROR_ID0);
    tw_client *c = connect_ok(&f, 5000);
    TW_ASSERT_ERR(tw_delete(c, "t"), TW_EINTERNAL);
    TW_ASSERT_EQ(tw_client_is_connected(c), 0); /* ERROR with request id 0 */
    TW_ASSERT_STR_EQ(tw_client_last_error_message(c), "fake server exploded");
    TW_ASSERT_ERR(tw_delete(c, "t"), -ENOTCONN);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_goodbye_then_enotconn(void)
{
    struct fake f;
    pthread_t th;
    fake_start(&f, &th, GOODBYE_IDLE);
    tw_client *c = connect_ok(&f, 5000);
    TW_ASSERT_OK(tw_ping(c, NULL));
    /* The GOODBYE is read by the next call at the latest. */
    int rc = tw_ping(c, NULL);
    TW_ASSERT_ERR(rc, TW_ESHUTDOWN);
    fprintf(stderr, "  after GOODBYE: %s: %s\n", tw_strerror_name(rc),
            tw_client_last_error_message(c));
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    /* Then the documented -ENOTCONN, every time (a reconnect loop sees it
     * at once, not SHUTTING_DOWN forever). */
    for (int i = 0; i < 1000; i++)
        TW_ASSERT_ERR(tw_ping(c, NULL), -ENOTCONN);
    tw_close(c);
    fake_stop(&f, th);
}

static void test_shutdown_mid_put(void)
{
    struct fake f;
    pthread_t th;
    size_t len = 32u << 20; /* far more than the socket buffers hold */
    uint8_t *data = calloc(1, len);
    TW_ASSERT(data != NULL);
    struct tw_tensor_desc d;
    memset(&d, 0, sizeof(d));
    d.dtype = TW_DTYPE_U8;
    d.ndim = 1;
    d.shape[0] = len;
    fake_start(&f, &th, SHUTDOWN_PUT);
    tw_client *c = connect_ok(&f, 5000);
    TW_ASSERT_EQ(tw_client_is_connected(c), 1);
    int rc = tw_put(c, "big", &d, data, len);
    fprintf(stderr, "  put during shutdown: %s: %s\n", tw_strerror_name(rc),
            tw_client_last_error_message(c));
    TW_ASSERT_ERR(rc, TW_ESHUTDOWN);
    TW_ASSERT(strstr(tw_client_last_error_message(c), "shutting down") != NULL);
    TW_ASSERT_EQ(tw_client_is_connected(c), 0);
    TW_ASSERT_ERR(tw_ping(c, NULL), -ENOTCONN);
    tw_close(c);
    fake_stop(&f, th);
    free(data);
}

int main(void)
{
    TW_RUN(test_server_fails_mutual_auth);
    TW_RUN(test_bad_magic_kills_connection);
    TW_RUN(test_data_past_length);
    TW_RUN(test_silent_server_times_out);
    TW_RUN(test_goodbye_then_close);
    TW_RUN(test_connection_error_message);
    TW_RUN(test_goodbye_then_enotconn);
    TW_RUN(test_shutdown_mid_put);
    TW_DONE();
}
