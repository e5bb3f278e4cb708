/* Device tags: the parser and formatter of proto/device.h, and that the
 * wire check (tw__device_tag_check) agrees with them. */
#include <string.h>

#include "proto/device.h"
#include "proto/proto.h"
#include "tw_test.h"

static void expect_cuda(const char *s, int ordinal)
{
    struct tw_device d = {.type = TW_DEVICE_CPU, .ordinal = -7};
    TW_ASSERT_OK(tw__device_parse_str(s, &d));
    TW_ASSERT_EQ(d.type, TW_DEVICE_CUDA);
    TW_ASSERT_EQ(d.ordinal, ordinal);
    TW_ASSERT_OK(tw__device_tag_check((const uint8_t *)s, strlen(s)));
    char buf[TW_DEVICE_TAG_BUFLEN];
    TW_ASSERT_EQ(tw__device_format(&d, buf, sizeof(buf)), (int)strlen(s));
    TW_ASSERT_STR_EQ(buf, s);
}

static void expect_bad(const char *s)
{
    struct tw_device d = {.type = TW_DEVICE_CUDA, .ordinal = 42};
    TW_ASSERT_ERR(tw__device_parse_str(s, &d), TW_EBAD_DEVICE_TAG);
    TW_ASSERT_EQ(d.ordinal, 42); /* untouched on error */
    TW_ASSERT_ERR(tw__device_tag_check((const uint8_t *)s, strlen(s)), TW_EBAD_DEVICE_TAG);
}

static void test_valid(void)
{
    struct tw_device d;
    TW_ASSERT_OK(tw__device_parse_str("cpu", &d));
    TW_ASSERT_EQ(d.type, TW_DEVICE_CPU);
    TW_ASSERT_EQ(d.ordinal, -1);
    char buf[TW_DEVICE_TAG_BUFLEN];
    TW_ASSERT_EQ(tw__device_format(&d, buf, sizeof(buf)), 3);
    TW_ASSERT_STR_EQ(buf, "cpu");
    expect_cuda("cuda:0", 0);
    expect_cuda("cuda:7", 7);
    expect_cuda("cuda:10", 10);
    expect_cuda("cuda:99", 99);
    expect_cuda("cuda:100", 100);
    expect_cuda("cuda:255", 255);
    /* Not NUL-terminated: only len bytes count. */
    TW_ASSERT_OK(tw__device_parse("cuda:12xyz", 7, &d));
    TW_ASSERT_EQ(d.ordinal, 12);
}

static void test_strict(void)
{
    expect_bad("cuda:01");
    expect_bad("cuda:00");
    expect_bad("cuda:256");
    expect_bad("cuda:999");
    expect_bad("cuda:1000");
    expect_bad("cuda:4294967296"); /* would wrap a 32-bit accumulator */
    expect_bad("cuda:99999999999999999999");
    expect_bad("cuda:");
    expect_bad("cuda");
    expect_bad("cuda0");
    expect_bad("cuda:-1");
    expect_bad("cuda:+1");
    expect_bad("cuda: 1");
    expect_bad("cuda:1a");
    expect_bad("cuda::1");
    expect_bad("CPU");
    expect_bad("Cuda:0");
    expect_bad("");
    expect_bad("cpu ");
    expect_bad("abcdefghijklmnopqrstuvwxyz0123456"); /* 33 bytes */
    struct tw_device d;
    TW_ASSERT_ERR(tw__device_parse(NULL, 3, &d), TW_EBAD_DEVICE_TAG);
    TW_ASSERT_ERR(tw__device_parse("cpu", 0, &d), TW_EBAD_DEVICE_TAG);
}

static void test_unknown_but_valid(void)
{
    /* Valid on the wire, but no device tensorwire knows: DEVICE_UNAVAILABLE,
     * not a syntax error. */
    struct tw_device d;
    const char *tags[] = {"rocm:0", "cpu0", "cp", "tpu", "x"};
    for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
        TW_ASSERT_ERR(tw__device_parse_str(tags[i], &d), TW_EDEVICE);
        TW_ASSERT_OK(tw__device_tag_check((const uint8_t *)tags[i], strlen(tags[i])));
    }
}

static void test_format_errors(void)
{
    char buf[TW_DEVICE_TAG_BUFLEN];
    struct tw_device d = {.type = TW_DEVICE_CUDA, .ordinal = 256};
    TW_ASSERT_ERR(tw__device_format(&d, buf, sizeof(buf)), TW_EINVAL);
    d.ordinal = -1;
    TW_ASSERT_ERR(tw__device_format(&d, buf, sizeof(buf)), TW_EINVAL);
    d = (struct tw_device){.type = (enum tw_device_type)9, .ordinal = 0};
    TW_ASSERT_ERR(tw__device_format(&d, buf, sizeof(buf)), TW_EINVAL);
    d = (struct tw_device){.type = TW_DEVICE_CUDA, .ordinal = 255};
    TW_ASSERT_ERR(tw__device_format(&d, buf, 8), TW_EINVAL); /* no room for the NUL */
    TW_ASSERT_EQ(tw__device_format(&d, buf, 9), 8);
    struct tw_device a = {TW_DEVICE_CUDA, 1}, b = {TW_DEVICE_CUDA, 1}, c = {TW_DEVICE_CUDA, 2},
                     h1 = {TW_DEVICE_CPU, -1}, h2 = {TW_DEVICE_CPU, 5};
    TW_ASSERT(tw__device_equal(&a, &b));
    TW_ASSERT(!tw__device_equal(&a, &c));
    TW_ASSERT(tw__device_equal(&h1, &h2));
    TW_ASSERT(!tw__device_equal(&a, &h1));
}

int main(void)
{
    TW_RUN(test_valid);
    TW_RUN(test_strict);
    TW_RUN(test_unknown_but_valid);
    TW_RUN(test_format_errors);
    TW_DONE();
}
