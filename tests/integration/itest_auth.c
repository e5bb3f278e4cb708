/* --token-file: the right token works, a wrong token and a peer that skips
 * AUTH get ERROR(UNAUTHORIZED, 0) and a close. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

static void test_right_token(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, "s3cret-token"));
    uint64_t shape[1] = {3};
    TW_ASSERT_EQ(itc_put(&c, "t", TW_DTYPE_U8, 1, shape, "abc", 3, 1), 0);
    TW_ASSERT_EQ(itc_stat(&c, "t", NULL), 0);
    itc_close(&c);
}

static void test_wrong_token(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_EQ(itc_handshake(&c, "s3cret-tokem"), TW_WIRE_UNAUTHORIZED);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
}

static void test_no_auth(void)
{
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_HELLO;
    m.u.hello.caps = TW_CAP_INLINE_DATA;
    m.u.hello.max_frame = TW_DEFAULT_MAX_FRAME;
    m.u.hello.max_inflight = 16;
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_HELLO_ACK);
    TW_ASSERT_EQ(m.u.hello_ack.auth_method, TW_AUTH_HMAC_SHA256);
    /* Straight to a request. */
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_STAT;
    m.hdr.request_id = 1;
    m.u.name.name.ptr = (const uint8_t *)"t";
    m.u.name.name.len = 1;
    itc_send(&c, &m);
    itc_expect_error(&c, 0, TW_WIRE_UNAUTHORIZED);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
}

int main(void)
{
    char path[] = "/tmp/tw-itest-token-XXXXXX";
    int fd = mkstemp(path);
    TW_ASSERT(fd >= 0);
    /* Trailing whitespace is not part of the token. */
    TW_ASSERT_EQ(write(fd, "s3cret-token \n\n", 15), 15);
    close(fd);
    const char *args[] = {"--token-file", path, NULL};
    itest_server_start(&srv, args);
    TW_RUN(test_right_token);
    TW_RUN(test_wrong_token);
    TW_RUN(test_no_auth);
    TW_RUN(test_right_token);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    unlink(path);
    TW_DONE();
}
