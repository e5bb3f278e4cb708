/* .npy header parser/writer and the CLI's size/shape parsers. */
#include <errno.h>

#include "tools/npy.h"
#include "tw_test.h"

static char err[256];

/* Builds a v1 header around dict exactly as NumPy does (padding to 64). */
static size_t make_v1(uint8_t *buf, const char *dict)
{
    size_t dlen = strlen(dict), total = (10 + dlen + 1 + 63) / 64 * 64, hlen = total - 10;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)hlen;
    buf[9] = (uint8_t)(hlen >> 8);
    memcpy(buf + 10, dict, dlen);
    memset(buf + 10 + dlen, ' ', hlen - dlen - 1);
    buf[total - 1] = '\n';
    return total;
}

static void test_parse_numpy_header(void)
{
    uint8_t buf[256];
    struct tw__npy_info info;
    size_t n = make_v1(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    TW_ASSERT_OK(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)));
    TW_ASSERT_EQ(info.dtype, TW_F32);
    TW_ASSERT_EQ(info.ndim, 2);
    TW_ASSERT_EQ_U64(info.shape[0], 2);
    TW_ASSERT_EQ_U64(info.shape[1], 3);
    TW_ASSERT_EQ_U64(info.byte_length, 24);
    TW_ASSERT_EQ(info.data_offset, n);
}

static void test_parse_scalar_and_1d(void)
{
    uint8_t buf[256];
    struct tw__npy_info info;
    size_t n = make_v1(buf, "{'descr': '<i8', 'fortran_order': False, 'shape': (), }");
    TW_ASSERT_OK(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)));
    TW_ASSERT_EQ(info.ndim, 0);
    TW_ASSERT_EQ_U64(info.byte_length, 8);
    n = make_v1(buf, "{\"shape\": (5,), \"descr\": \"|b1\", \"fortran_order\": False}");
    TW_ASSERT_OK(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)));
    TW_ASSERT_EQ(info.dtype, TW_BOOL);
    TW_ASSERT_EQ(info.ndim, 1);
    TW_ASSERT_EQ_U64(info.byte_length, 5);
    n = make_v1(buf, "{'descr': '<u2', 'fortran_order': False, 'shape': (0, 7), }");
    TW_ASSERT_OK(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)));
    TW_ASSERT_EQ_U64(info.byte_length, 0);
}

static void test_parse_rejects(void)
{
    uint8_t buf[256];
    struct tw__npy_info info;
    size_t n = make_v1(buf, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "Fortran") != NULL);
    n = make_v1(buf, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "big-endian") != NULL);
    n = make_v1(buf, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "unsupported dtype '<c8'") != NULL);
    n = make_v1(buf, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    n = make_v1(buf, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    n = make_v1(buf, "{'descr': '<f4', 'shape': (2,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "fortran_order") != NULL);
    n = make_v1(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,a), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    /* 17 dimensions. */
    n = make_v1(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': "
                     "(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    /* Byte length overflow. */
    n = make_v1(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': "
                     "(4294967296, 4294967296), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    memcpy(buf, "\x93NUMPZ", 6);
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    make_v1(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
    buf[6] = 4;
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
}

static void test_parse_needs_more(void)
{
    uint8_t buf[256];
    struct tw__npy_info info;
    size_t n = make_v1(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, 4, 0, &info, err, sizeof(err)), -EAGAIN);
    TW_ASSERT_EQ(info.data_offset, 8);
    TW_ASSERT_ERR(tw__npy_parse(buf, 10, 0, &info, err, sizeof(err)), -EAGAIN);
    TW_ASSERT_EQ(info.data_offset, n);
    TW_ASSERT_ERR(tw__npy_parse(buf, n - 1, 0, &info, err, sizeof(err)), -EAGAIN);
}

static void test_void_dtypes(void)
{
    uint8_t buf[256];
    struct tw__npy_info info;
    size_t n = make_v1(buf, "{'descr': '|V2', 'fortran_order': False, 'shape': (4,), }");
    TW_ASSERT_ERR(tw__npy_parse(buf, n, 0, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "--dtype bf16") != NULL);
    TW_ASSERT_ERR(tw__npy_parse(buf, n, TW_F8E4M3, &info, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_OK(tw__npy_parse(buf, n, TW_BF16, &info, err, sizeof(err)));
    TW_ASSERT_EQ(info.dtype, TW_BF16);
    TW_ASSERT_EQ_U64(info.byte_length, 8);
}

static void test_write_then_parse_every_dtype(void)
{
    for (int dt = 1; dt <= TW_DTYPE_COUNT; dt++) {
        uint8_t buf[4096];
        uint64_t shape[3] = {3, 1, 5};
        struct tw__npy_info info;
        int is_void = -1;
        long n = tw__npy_write_header((uint8_t)dt, 3, shape, buf, sizeof(buf), &is_void);
        TW_ASSERT(n > 0);
        TW_ASSERT_EQ(n % 64, 0);
        TW_ASSERT_EQ(buf[n - 1], '\n');
        TW_ASSERT_EQ(is_void, dt == TW_BF16 || dt == TW_F8E4M3 || dt == TW_F8E5M2);
        TW_ASSERT_OK(tw__npy_parse(buf, (size_t)n, is_void ? dt : 0, &info, err, sizeof(err)));
        TW_ASSERT_EQ(info.dtype, dt);
        TW_ASSERT_EQ(info.ndim, 3);
        TW_ASSERT_EQ_U64(info.shape[2], 5);
        TW_ASSERT_EQ_U64(info.byte_length, 15 * tw_dtype_size(dt));
        TW_ASSERT_EQ(info.data_offset, (size_t)n);
    }
    uint8_t small[32];
    uint64_t one = 1;
    TW_ASSERT_ERR(tw__npy_write_header(TW_F32, 1, &one, small, sizeof(small), NULL), -ENOBUFS);
    TW_ASSERT_ERR(tw__npy_write_header(99, 1, &one, small, sizeof(small), NULL), TW_EINVAL);
}

static void test_write_matches_numpy_spelling(void)
{
    uint8_t buf[256];
    uint64_t s2[2] = {2, 3}, s1[1] = {5};
    const char want2[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    const char want1[] = "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }";
    long n = tw__npy_write_header(TW_F32, 2, s2, buf, sizeof(buf), NULL);
    TW_ASSERT_EQ(n, 128);
    TW_ASSERT_MEM_EQ(buf, "\x93NUMPY\x01\x00\x76\x00", 10);
    TW_ASSERT_MEM_EQ(buf + 10, want2, sizeof(want2) - 1);
    n = tw__npy_write_header(TW_U8, 1, s1, buf, sizeof(buf), NULL);
    TW_ASSERT_EQ(n, 128);
    TW_ASSERT_MEM_EQ(buf + 10, want1, sizeof(want1) - 1);
    TW_ASSERT_EQ(buf[10 + sizeof(want1) - 1], ' ');
}

static void test_write_scalar(void)
{
    uint8_t buf[128];
    struct tw__npy_info info;
    long n = tw__npy_write_header(TW_F64, 0, NULL, buf, sizeof(buf), NULL);
    TW_ASSERT_EQ(n, 128);
    TW_ASSERT(memmem(buf, (size_t)n, "'shape': ()", 11) != NULL);
    TW_ASSERT_OK(tw__npy_parse(buf, (size_t)n, 0, &info, err, sizeof(err)));
    TW_ASSERT_EQ(info.ndim, 0);
}

static void test_parse_shape(void)
{
    uint8_t nd;
    uint64_t s[TW_TENSOR_MAX_NDIM];
    TW_ASSERT_OK(tw__cli_parse_shape("2,3,4", &nd, s));
    TW_ASSERT_EQ(nd, 3);
    TW_ASSERT_EQ_U64(s[2], 4);
    TW_ASSERT_OK(tw__cli_parse_shape("", &nd, s));
    TW_ASSERT_EQ(nd, 0);
    TW_ASSERT_OK(tw__cli_parse_shape("scalar", &nd, s));
    TW_ASSERT_EQ(nd, 0);
    TW_ASSERT_OK(tw__cli_parse_shape("0", &nd, s));
    TW_ASSERT_EQ(nd, 1);
    TW_ASSERT_ERR(tw__cli_parse_shape("2,,3", &nd, s), TW_EINVAL);
    TW_ASSERT_ERR(tw__cli_parse_shape("2,3,", &nd, s), TW_EINVAL);
    TW_ASSERT_ERR(tw__cli_parse_shape("2x3", &nd, s), TW_EINVAL);
    TW_ASSERT_ERR(tw__cli_parse_shape("1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1", &nd, s), TW_EINVAL);
}

static void test_dtype_names(void)
{
    TW_ASSERT_EQ(tw_dtype_from_string("f32"), TW_F32);
    TW_ASSERT_EQ(tw_dtype_from_string("float32"), TW_F32);
    TW_ASSERT_EQ(tw_dtype_from_string("bf16"), TW_BF16);
    TW_ASSERT_EQ(tw_dtype_from_string("bool"), TW_BOOL);
    TW_ASSERT_ERR(tw_dtype_from_string("f128"), TW_EINVAL);
    for (int d = 1; d <= TW_DTYPE_COUNT; d++)
        TW_ASSERT_EQ(tw_dtype_from_string(tw_dtype_name(d)), d);
    TW_ASSERT(tw_dtype_name(0) == NULL);
    TW_ASSERT_EQ(tw_dtype_size(TW_F8E5M2), 1);
    TW_ASSERT_EQ(tw_dtype_size(99), 0);
}

int main(void)
{
    TW_RUN(test_parse_numpy_header);
    TW_RUN(test_parse_scalar_and_1d);
    TW_RUN(test_parse_rejects);
    TW_RUN(test_parse_needs_more);
    TW_RUN(test_void_dtypes);
    TW_RUN(test_write_then_parse_every_dtype);
    TW_RUN(test_write_matches_numpy_spelling);
    TW_RUN(test_write_scalar);
    TW_RUN(test_parse_shape);
    TW_RUN(test_dtype_names);
    TW_DONE();
}
