/* Round trips against a real tensorwired: handshake, put/get/stat/list/
 * delete for every dtype, 0-d and empty tensors, CRC, overwrite, LIST split
 * over several frames, STATS, PING, and the request-level errors. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

static void test_every_dtype(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    for (uint8_t dt = 1; dt <= TW_DTYPE_MAX; dt++) {
        char name[64];
        uint64_t shape[3] = {3, 5, 7 + dt};
        uint64_t len = tw__dtype_size(dt) * shape[0] * shape[1] * shape[2];
        uint8_t *data = malloc(len), *back = NULL;
        uint64_t back_len = 0;
        itest_fill(data, len, dt);
        snprintf(name, sizeof(name), "dtype/%s", tw__dtype_name(dt));
        TW_ASSERT_EQ(itc_put(&c, name, dt, 3, shape, data, len, dt & 1), 0);
        struct tw_descriptor d;
        TW_ASSERT_EQ(itc_get(&c, name, &back, &back_len, &d), 0);
        TW_ASSERT_EQ_U64(back_len, len);
        TW_ASSERT_MEM_EQ(back, data, len);
        TW_ASSERT_EQ(d.dtype, dt);
        TW_ASSERT_EQ(d.ndim, 3);
        TW_ASSERT_EQ_U64(d.shape[2], shape[2]);
        TW_ASSERT_EQ(itc_stat(&c, name, &d), 0);
        TW_ASSERT_EQ_U64(d.byte_length, len);
        TW_ASSERT_EQ(d.dtype, dt);
        free(data);
        free(back);
    }
    itc_close(&c);
}

static void test_scalar_and_empty(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    double pi = 3.141592653589793;
    uint8_t *back = NULL;
    uint64_t len = 0;
    struct tw_descriptor d;
    TW_ASSERT_EQ(itc_put(&c, "scalar", TW_DTYPE_F64, 0, NULL, &pi, 8, 1), 0);
    TW_ASSERT_EQ(itc_get(&c, "scalar", &back, &len, &d), 0);
    TW_ASSERT_EQ_U64(len, 8);
    TW_ASSERT_EQ(d.ndim, 0);
    TW_ASSERT_MEM_EQ(back, &pi, 8);
    free(back);

    uint64_t shape[2] = {4, 0};
    TW_ASSERT_EQ(itc_put(&c, "empty", TW_DTYPE_F32, 2, shape, "", 0, 1), 0);
    TW_ASSERT_EQ(itc_get(&c, "empty", &back, &len, &d), 0);
    TW_ASSERT_EQ_U64(len, 0);
    TW_ASSERT_EQ(d.ndim, 2);
    TW_ASSERT_EQ_U64(d.shape[0], 4);
    TW_ASSERT_EQ_U64(d.shape[1], 0);
    free(back);
    itc_close(&c);
}

static void test_overwrite_delete_notfound(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t s1[1] = {1000}, s2[2] = {2, 3};
    uint8_t a[1000], b[6];
    itest_fill(a, sizeof(a), 1);
    itest_fill(b, sizeof(b), 2);
    TW_ASSERT_EQ(itc_put(&c, "w0", TW_DTYPE_U8, 1, s1, a, sizeof(a), 0), 0);
    TW_ASSERT_EQ(itc_put(&c, "w0", TW_DTYPE_I8, 2, s2, b, sizeof(b), 0), 0);
    uint8_t *back;
    uint64_t len;
    struct tw_descriptor d;
    TW_ASSERT_EQ(itc_get(&c, "w0", &back, &len, &d), 0);
    TW_ASSERT_EQ_U64(len, 6);
    TW_ASSERT_EQ(d.dtype, TW_DTYPE_I8);
    TW_ASSERT_MEM_EQ(back, b, 6);
    free(back);
    TW_ASSERT_EQ(itc_delete(&c, "w0"), 0);
    TW_ASSERT_EQ(itc_stat(&c, "w0", NULL), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ(itc_delete(&c, "w0"), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ(itc_get(&c, "w0", &back, &len, NULL), TW_WIRE_NOT_FOUND);
    /* The connection is still fine after request-level errors. */
    TW_ASSERT_EQ(itc_ping(&c), 0);
    itc_close(&c);
}

static void test_list(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    /* 300 names of ~1000 bytes do not fit one 256 KiB LIST_REPLY. */
    enum { N = 300 };
    char name[1100];
    uint8_t one = 1;
    for (int i = N - 1; i >= 0; i--) {
        memset(name, 'x', 990);
        snprintf(name, sizeof(name), "list/%04d/", i);
        name[10] = 'y';
        memset(name + 10, 'z', 980);
        name[990] = '\0';
        TW_ASSERT_EQ(itc_put(&c, name, TW_DTYPE_BOOL, 0, NULL, &one, 1, 0), 0);
    }
    TW_ASSERT_EQ(itc_put(&c, "lisz", TW_DTYPE_BOOL, 0, NULL, &one, 1, 0), 0);
    char **names;
    size_t n, frames;
    TW_ASSERT_EQ(itc_list(&c, "list/", &names, &n, &frames), 0);
    TW_ASSERT_EQ(n, N);
    TW_ASSERT(frames >= 2);
    for (size_t i = 1; i < n; i++)
        TW_ASSERT(strcmp(names[i - 1], names[i]) < 0);
    TW_ASSERT(strncmp(names[0], "list/0000/", 10) == 0);
    itc_free_names(names, n);
    TW_ASSERT_EQ(itc_list(&c, "no-such-prefix", &names, &n, &frames), 0);
    TW_ASSERT_EQ(n, 0);
    TW_ASSERT_EQ(frames, 1);
    itc_free_names(names, n);
    TW_ASSERT_EQ(itc_list(&c, "", &names, &n, &frames), 0);
    TW_ASSERT(n >= N + 1);
    itc_free_names(names, n);
    itc_close(&c);
}

static void test_request_errors(void)
{
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));

    /* A GPU device tag: this server keeps tensors in host memory. */
    struct tw_descriptor gd;
    uint64_t shape[1] = {4};
    itest_desc(&gd, "gpu", TW_DTYPE_F32, 1, shape);
    gd.device_tag.ptr = (const uint8_t *)"cuda:7";
    gd.device_tag.len = 6;
    uint64_t id = itc_send_put(&c, &gd, 0);
    itc_expect_error(&c, id, TW_WIRE_DEVICE_UNAVAILABLE);

    /* A wrong CRC: nothing is stored. */
    uint8_t data[16];
    itest_fill(data, sizeof(data), 3);
    id = itc_id(&c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = id;
    itest_desc(&m.u.tensor_put.desc, "badcrc", TW_DTYPE_F32, 1, shape);
    m.u.tensor_put.desc.flags = TW_DESC_HAS_CRC32C;
    m.u.tensor_put.desc.crc32c = tw__crc32c(0, data, 16) ^ 1;
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = id;
    m.u.data.bytes.ptr = data;
    m.u.data.bytes.len = 16;
    itc_send(&c, &m);
    itc_expect_error(&c, id, TW_WIRE_CHECKSUM_MISMATCH);
    TW_ASSERT_EQ(itc_stat(&c, "badcrc", NULL), TW_WIRE_NOT_FOUND);

    /* A shape that does not match byte_length: INVALID_ARGUMENT for that
     * request, connection lives. Built by hand since the encoder refuses. */
    id = itc_id(&c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = id;
    itest_desc(&m.u.tensor_put.desc, "bad", TW_DTYPE_F32, 1, shape);
    uint8_t frame[256];
    ssize_t n = tw__msg_encode(&m, frame, sizeof(frame));
    TW_ASSERT(n > 0);
    frame[TW_FRAME_HEADER_LEN + 4 + 8] ^= 0x01; /* byte_length 16 -> 17 */
    TW_ASSERT_OK(itc_send_raw(&c, frame, (size_t)n));
    itc_expect_error(&c, id, TW_WIRE_INVALID_ARGUMENT);
    TW_ASSERT_EQ(itc_ping(&c), 0);

    /* Control characters in a name (C0, DEL, C1): INVALID_ARGUMENT for that
     * request, connection lives (docs/protocol.md §3.1). The encoder
     * refuses such names, so the last bytes of an encoded STAT are patched. */
    static const uint8_t controls[][2] = {{0x09, 0}, {0x0a, 0},    {0x1b, 0},
                                          {0x7f, 0}, {0xc2, 0x80}, {0xc2, 0x9b}};
    for (size_t k = 0; k < sizeof(controls) / sizeof(controls[0]); k++) {
        size_t clen = controls[k][1] ? 2 : 1;
        id = itc_id(&c);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_STAT;
        m.hdr.request_id = id;
        m.u.name.name.ptr = (const uint8_t *)"ctl__";
        m.u.name.name.len = (uint32_t)(3 + clen);
        n = tw__msg_encode(&m, frame, sizeof(frame));
        TW_ASSERT(n > 0);
        memcpy(frame + n - clen, controls[k], clen);
        TW_ASSERT_OK(itc_send_raw(&c, frame, (size_t)n));
        itc_expect_error(&c, id, TW_WIRE_INVALID_ARGUMENT);
    }
    TW_ASSERT_EQ(itc_ping(&c), 0);
    /* U+00A0 (C2 A0), just past C1, is an ordinary character. */
    TW_ASSERT_EQ(itc_stat(&c, "nbsp\xc2\xa0", NULL), TW_WIRE_NOT_FOUND);

    /* A long UTF-8 name is cut for the message without breaking UTF-8. */
    char longname[256] = "x";
    for (int i = 0; i < 100; i++)
        strcat(longname, "\xc3\xa9"); /* U+00E9 */
    TW_ASSERT_EQ(itc_stat(&c, longname, NULL), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ(itc_ping(&c), 0);
    itc_close(&c);
}

static void test_busy_inflight(void)
{
    /* A separate server with --max-inflight 2: three GETs of a tensor the
     * client does not read yet keep two in flight; the third gets BUSY. */
    struct itest_server s2;
    const char *args[] = {"--max-inflight", "2", NULL};
    itest_server_start(&s2, args);
    struct itc c;
    itc_connect(&c, &s2);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t len = 64u << 20;
    uint64_t shape[1] = {len};
    uint8_t *data = malloc(len);
    itest_fill(data, len, 9);
    TW_ASSERT_EQ(itc_put(&c, "big", TW_DTYPE_U8, 1, shape, data, len, 0), 0);
    struct tw_msg m;
    uint64_t ids[3];
    for (int i = 0; i < 3; i++) {
        ids[i] = itc_send_get(&c, "big", 0);
    }
    /* Drain everything: two full GETs and one BUSY, in any interleaving. */
    uint64_t got[2] = {0, 0};
    int busy = 0, done = 0;
    while (done < 2 || !busy) {
        TW_ASSERT_OK(itc_recv(&c, &m));
        if (m.hdr.tag == TW_TAG_ERROR) {
            TW_ASSERT_EQ_U64(m.hdr.request_id, ids[2]);
            TW_ASSERT_EQ(m.u.error.code, TW_WIRE_BUSY);
            busy = 1;
        } else if (m.hdr.tag == TW_TAG_DATA) {
            int k = m.hdr.request_id == ids[0] ? 0 : 1;
            TW_ASSERT(m.hdr.request_id == ids[k]);
            TW_ASSERT_EQ_U64(m.u.data.offset, got[k]);
            TW_ASSERT(memcmp(m.u.data.bytes.ptr, data + got[k], m.u.data.bytes.len) == 0);
            got[k] += m.u.data.bytes.len;
            if (!(m.hdr.flags & TW_FRAME_MORE))
                done++;
        } else {
            TW_ASSERT_EQ(m.hdr.tag, TW_TAG_TENSOR_INFO);
        }
    }
    TW_ASSERT_EQ_U64(got[0], len);
    TW_ASSERT_EQ_U64(got[1], len);
    TW_ASSERT_EQ(itc_ping(&c), 0);
    free(data);
    itc_close(&c);
    TW_ASSERT_EQ(itest_server_stop(&s2, SIGTERM, 10000), 0);
}

static void test_readers_keep_old_version(void)
{
    /* A GET in progress keeps reading the version it started with while the
     * name is overwritten and then deleted. */
    struct itc r, w;
    struct tw_msg m;
    uint64_t len = 32u << 20, shape[1] = {len};
    uint8_t *v1 = malloc(len), *v2 = malloc(len);
    itest_fill(v1, len, 1);
    itest_fill(v2, len, 2);
    itc_connect(&r, &srv);
    itc_connect(&w, &srv);
    TW_ASSERT_OK(itc_handshake(&r, NULL));
    TW_ASSERT_OK(itc_handshake(&w, NULL));
    TW_ASSERT_EQ(itc_put(&w, "ver", TW_DTYPE_U8, 1, shape, v1, len, 0), 0);
    itc_send_get(&r, "ver", 0);
    TW_ASSERT_OK(itc_recv(&r, &m)); /* TENSOR_INFO: the GET has started */
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_TENSOR_INFO);
    TW_ASSERT_EQ(itc_put(&w, "ver", TW_DTYPE_U8, 1, shape, v2, len, 0), 0);
    uint8_t *back;
    uint64_t blen;
    TW_ASSERT_EQ(itc_get(&w, "ver", &back, &blen, NULL), 0);
    TW_ASSERT(memcmp(back, v2, len) == 0);
    free(back);
    TW_ASSERT_EQ(itc_delete(&w, "ver"), 0);
    uint64_t got = 0;
    for (;;) {
        TW_ASSERT_OK(itc_recv(&r, &m));
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_DATA);
        TW_ASSERT(memcmp(m.u.data.bytes.ptr, v1 + got, m.u.data.bytes.len) == 0);
        got += m.u.data.bytes.len;
        if (!(m.hdr.flags & TW_FRAME_MORE))
            break;
    }
    TW_ASSERT_EQ_U64(got, len);
    TW_ASSERT_EQ(itc_stat(&r, "ver", NULL), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ_U64(itc_stat_value(&r, "reserved_bytes"), itc_stat_value(&r, "stored_bytes"));
    free(v1);
    free(v2);
    itc_close(&r);
    itc_close(&w);
}

static void test_half_close(void)
{
    /* Requests followed by shutdown(SHUT_WR): the replies still arrive. */
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    for (int i = 0; i < 20; i++) {
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_PING;
        m.hdr.request_id = itc_id(&c);
        itc_send(&c, &m);
    }
    TW_ASSERT_EQ(shutdown(c.fd, SHUT_WR), 0);
    for (int i = 0; i < 20; i++) {
        TW_ASSERT_OK(itc_recv(&c, &m));
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PONG);
        TW_ASSERT_EQ_U64(m.hdr.request_id, (uint64_t)i + 1);
    }
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
}

static void test_client_goodbye(void)
{
    /* GOODBYE with a put in flight: the server finishes it, then closes. */
    struct itc c;
    struct tw_msg m;
    uint64_t shape[1] = {1000};
    uint8_t data[1000];
    itest_fill(data, sizeof(data), 11);
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t id = itc_id(&c);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = id;
    itest_desc(&m.u.tensor_put.desc, "bye", TW_DTYPE_U8, 1, shape);
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_GOODBYE;
    itc_send(&c, &m);
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_DATA;
    m.hdr.request_id = id;
    m.u.data.bytes.ptr = data;
    m.u.data.bytes.len = sizeof(data);
    itc_send(&c, &m);
    TW_ASSERT_OK(itc_recv(&c, &m));
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_OK);
    TW_ASSERT_EQ_U64(m.hdr.request_id, id);
    TW_ASSERT_OK(itc_expect_eof(&c));
    itc_close(&c);
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint8_t *back;
    uint64_t len;
    TW_ASSERT_EQ(itc_get(&c, "bye", &back, &len, NULL), 0);
    TW_ASSERT_MEM_EQ(back, data, sizeof(data));
    free(back);
    itc_close(&c);
}

static void test_stats(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t tensors = itc_stat_value(&c, "tensors");
    TW_ASSERT(tensors >= TW_DTYPE_MAX + 2);
    TW_ASSERT(itc_stat_value(&c, "stored_bytes") > 0);
    TW_ASSERT(itc_stat_value(&c, "bytes_in") > itc_stat_value(&c, "stored_bytes"));
    TW_ASSERT(itc_stat_value(&c, "requests") > 100);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "connections"), 1);
    itc_close(&c);
}

int main(void)
{
    itest_server_start(&srv, NULL);
    TW_RUN(test_every_dtype);
    TW_RUN(test_scalar_and_empty);
    TW_RUN(test_overwrite_delete_notfound);
    TW_RUN(test_list);
    TW_RUN(test_request_errors);
    TW_RUN(test_busy_inflight);
    TW_RUN(test_readers_keep_old_version);
    TW_RUN(test_half_close);
    TW_RUN(test_client_goodbye);
    TW_RUN(test_stats);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
