/* --capacity: a put that does not fit gets CAPACITY_EXCEEDED and changes
 * nothing; in-progress puts hold their reservation; deleting frees room. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

static void test_capacity(void)
{
    struct itc a, b;
    struct tw_msg m;
    uint64_t len = 600u << 10, shape[1] = {len};
    uint8_t *data = malloc(len);
    itest_fill(data, len, 5);
    itc_connect(&a, &srv);
    itc_connect(&b, &srv);
    TW_ASSERT_OK(itc_handshake(&a, NULL));
    TW_ASSERT_OK(itc_handshake(&b, NULL));

    TW_ASSERT_EQ(itc_put(&a, "first", TW_DTYPE_U8, 1, shape, data, len, 0), 0);
    TW_ASSERT_EQ(itc_put(&a, "second", TW_DTYPE_U8, 1, shape, data, len, 0),
                 TW_WIRE_CAPACITY_EXCEEDED);
    TW_ASSERT_EQ(itc_stat(&a, "second", NULL), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ_U64(itc_stat_value(&a, "stored_bytes"), len);
    /* Overwriting needs room for both versions until the commit. */
    TW_ASSERT_EQ(itc_put(&a, "first", TW_DTYPE_U8, 1, shape, data, len, 0),
                 TW_WIRE_CAPACITY_EXCEEDED);
    uint8_t *back;
    uint64_t blen;
    TW_ASSERT_EQ(itc_get(&a, "first", &back, &blen, NULL), 0);
    TW_ASSERT_MEM_EQ(back, data, len);
    free(back);
    TW_ASSERT_EQ(itc_delete(&a, "first"), 0);
    TW_ASSERT_EQ_U64(itc_stat_value(&a, "reserved_bytes"), 0);

    /* An accepted but unfinished put reserves its bytes. */
    struct tw_descriptor d;
    itest_desc(&d, "pending", TW_DTYPE_U8, 1, shape);
    uint64_t id = itc_send_put(&a, &d, 0);
    TW_ASSERT_OK(itc_recv(&a, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    TW_ASSERT_EQ(itc_put(&b, "other", TW_DTYPE_U8, 1, shape, data, len, 0),
                 TW_WIRE_CAPACITY_EXCEEDED);
    /* Cancelling it (client ERROR) releases the reservation. */
    itc_send_error(&a, id, TW_WIRE_CANCELLED);
    TW_ASSERT_EQ(itc_ping(&a), 0);
    TW_ASSERT_EQ_U64(itc_stat_value(&a, "reserved_bytes"), 0);
    TW_ASSERT_EQ(itc_put(&b, "other", TW_DTYPE_U8, 1, shape, data, len, 0), 0);
    TW_ASSERT_EQ(itc_stat(&a, "pending", NULL), TW_WIRE_NOT_FOUND);
    free(data);
    itc_close(&a);
    itc_close(&b);
}

int main(void)
{
    /* The capacity comes from a config file, to cover --config end to end. */
    char path[] = "/tmp/tw-itest-conf-XXXXXX";
    int fd = mkstemp(path);
    TW_ASSERT(fd >= 0);
    const char conf[] = "# itest_capacity\ncapacity = 1Mi\nmax_inflight = 64\n";
    TW_ASSERT_EQ(write(fd, conf, sizeof(conf) - 1), (long long)sizeof(conf) - 1);
    close(fd);
    const char *args[] = {"--config", path, NULL};
    itest_server_start(&srv, args);
    unlink(path);
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "capacity_bytes"), 1u << 20);
    itc_close(&c);
    TW_RUN(test_capacity);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
