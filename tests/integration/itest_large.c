/* A large tensor, byte-exact both ways with a CRC: 256 MiB by default,
 * 1 GiB with TW_TEST_BIG=1. Also measures the rates (printed, not checked). */
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

static void test_large(void)
{
    const char *big = getenv("TW_TEST_BIG");
    uint64_t len = (big && strcmp(big, "1") == 0) ? (1ull << 30) : (256ull << 20);
    uint64_t shape[2] = {len / 4096, 1024};
    uint8_t *data = malloc(len), *back = NULL;
    TW_ASSERT(data != NULL);
    itest_fill(data, len, 42);
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t t0 = itest_now_ms();
    TW_ASSERT_EQ(itc_put(&c, "large", TW_DTYPE_F32, 2, shape, data, len, 1), 0);
    uint64_t t1 = itest_now_ms();
    uint64_t back_len = 0;
    struct tw_descriptor d;
    TW_ASSERT_EQ(itc_get(&c, "large", &back, &back_len, &d), 0);
    uint64_t t2 = itest_now_ms();
    TW_ASSERT_EQ_U64(back_len, len);
    TW_ASSERT(d.flags & TW_DESC_HAS_CRC32C);
    TW_ASSERT(memcmp(back, data, len) == 0);
    fprintf(stderr, "  %llu MiB: put %llu ms, get %llu ms (test client copies, CRC on both ends)\n",
            (unsigned long long)(len >> 20), (unsigned long long)(t1 - t0),
            (unsigned long long)(t2 - t1));
    free(back);
    TW_ASSERT_EQ(itc_delete(&c, "large"), 0);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "reserved_bytes"), 0);
    itc_close(&c);
    free(data);
}

int main(void)
{
    itest_server_start(&srv, NULL);
    TW_RUN(test_large);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
