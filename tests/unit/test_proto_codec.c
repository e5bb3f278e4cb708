/* Codec basics: CRC32C check values, every message round-trips through
 * encode and decode, header rules, zero-copy DATA, iterators. */
#include <errno.h>

#include "proto/crc32c.h"
#include "proto_fixtures.h"
#include "tw_test.h"

static void crc32c_check_value(void)
{
    const char *s = "123456789";
    TW_ASSERT_EQ_U64(tw__crc32c(0, s, 9), 0xE3069283u);
    TW_ASSERT_EQ_U64(tw__crc32c_sw(0, s, 9), 0xE3069283u);
    TW_ASSERT_EQ_U64(tw__crc32c_hw(0, s, 9), 0xE3069283u);
    /* Incremental: crc(a||b) == crc(crc(a), b). */
    TW_ASSERT_EQ_U64(tw__crc32c(tw__crc32c(0, s, 4), s + 4, 5), 0xE3069283u);
    TW_ASSERT_EQ_U64(tw__crc32c(0, s, 0), 0);
    /* 32 zero bytes: RFC 3720 B.4 test vector. */
    uint8_t z[32] = {0};
    TW_ASSERT_EQ_U64(tw__crc32c(0, z, 32), 0x8A9136AAu);
    uint8_t ff[32];
    memset(ff, 0xFF, 32);
    TW_ASSERT_EQ_U64(tw__crc32c(0, ff, 32), 0x62A8AB43u);
}

static void crc32c_sw_matches_hw(void)
{
    /* Lengths cross the 3 x 4096-byte striping of the hardware path. */
    static uint8_t buf[3 * 3 * 4096 + 100];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (uint8_t)(x >> 16);
    }
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len + off <= sizeof(buf); len += (len < 300 ? 1 : 997))
            TW_ASSERT_EQ_U64(tw__crc32c_sw(7, buf + off, len), tw__crc32c_hw(7, buf + off, len));
    static const size_t edges[] = {12287, 12288, 12289, 24576, 24577, 36863};
    for (unsigned i = 0; i < 6; i++) {
        TW_ASSERT_EQ_U64(tw__crc32c_sw(0, buf, edges[i]), tw__crc32c_hw(0, buf, edges[i]));
        /* Incremental over the stripe boundary equals one pass. */
        uint32_t a = tw__crc32c(0, buf, 5000);
        TW_ASSERT_EQ_U64(tw__crc32c(a, buf + 5000, edges[i] - 5000), tw__crc32c(0, buf, edges[i]));
    }
}

static void roundtrip(const struct tw_msg *m)
{
    uint8_t buf[8192], buf2[8192];
    ssize_t n = tw__msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        TW_FAIL("encode %s: %s", tw__tag_name(m->hdr.tag), tw_strerror_name((int)n));
    TW_ASSERT_EQ(n, tw__msg_encoded_len(m));
    struct tw_msg d;
    ssize_t c = tw__msg_decode(buf, (size_t)n, TW_MAX_MAX_FRAME, &d);
    if (c != n)
        TW_FAIL("decode %s: %zd (%s)", tw__tag_name(m->hdr.tag), c, tw_strerror_name((int)c));
    struct tw_msg want = *m;
    want.hdr.payload_len = (uint32_t)(n - TW_FRAME_HEADER_LEN);
    TW_ASSERT(tw__msg_equal(&d, &want));
    TW_ASSERT_EQ(tw__msg_encode(&d, buf2, sizeof(buf2)), n);
    TW_ASSERT_MEM_EQ(buf, buf2, (size_t)n);
    /* Every proper prefix is incomplete, never an error. */
    for (ssize_t k = 0; k < n; k++)
        TW_ASSERT_ERR(tw__msg_decode(buf, (size_t)k, TW_MAX_MAX_FRAME, &d), TW_EAGAIN_FRAME);
}

static void every_message_roundtrips(void)
{
    uint64_t shape[2] = {2, 3};
    struct tw_descriptor d = fx_desc("layer0.weight", "cpu", TW_DTYPE_F32, 2, shape);
    uint8_t bytes[24];
    for (unsigned i = 0; i < 24; i++)
        bytes[i] = (uint8_t)i;
    struct tw_msg ms[32];
    int n = 0;
    ms[n++] = fx_hello(0xF, 16u << 20, 256, "tensorwire/0.1.0");
    ms[n++] = fx_hello_ack(0x7, 16u << 20, 128, TW_AUTH_HMAC_SHA256, "tensorwired/0.1.0");
    ms[n++] = fx_hello_ack(0x1, 1u << 16, 1, TW_AUTH_NONE, "");
    ms[n] = fx_msg(TW_TAG_AUTH, 0);
    memset(ms[n].u.auth.client_nonce, 0x11, 32);
    memset(ms[n++].u.auth.mac, 0x22, 32);
    ms[n] = fx_msg(TW_TAG_AUTH_OK, 0);
    memset(ms[n++].u.auth_ok.mac, 0x33, 32);
    ms[n++] = fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight");
    ms[n++] = fx_put(2, 0, d);
    ms[n++] = fx_info(3, TW_DP_INLINE, d);
    ms[n++] = fx_data(3, 0, bytes, 24, 0);
    ms[n++] = fx_data(3, 0, bytes, 0, 0);
    ms[n++] = fx_put_accept(2, TW_DP_RDMA);
    ms[n++] = fx_endpoint(TW_EP_OFFER);
    ms[n++] = fx_endpoint(TW_EP_ACCEPT);
    ms[n++] = fx_endpoint(TW_EP_DECLINE);
    ms[n++] = fx_done(4, 0, 24);
    ms[n++] = fx_register(4, 0x1234, 0x7f0000001000ull, 24);
    ms[n++] = fx_msg(TW_TAG_RDMA_READY, 4);
    ms[n++] = fx_error(5, TW_WIRE_NOT_FOUND, "no tensor named \"x\"");
    ms[n++] = fx_error(0, TW_WIRE_PROTOCOL_ERROR, "");
    ms[n++] = fx_msg(TW_TAG_OK, 6);
    ms[n++] = fx_name_msg(TW_TAG_LIST, 7, "layer");
    ms[n++] = fx_name_msg(TW_TAG_LIST, 7, "");
    ms[n++] = fx_name_msg(TW_TAG_STAT, 8, "layer0.weight");
    ms[n++] = fx_name_msg(TW_TAG_DELETE, 9, "layer0.weight");
    ms[n++] = fx_ping(TW_TAG_PING, 10, "pingpong");
    ms[n++] = fx_ping(TW_TAG_PONG, 10, "pingpong");
    ms[n++] = fx_goodbye(0);
    ms[n++] = fx_msg(TW_TAG_STATS, 11);
    for (int i = 0; i < n; i++)
        roundtrip(&ms[i]);

    /* LIST_REPLY and STATS_REPLY from packed entries. */
    uint8_t ent[512];
    size_t off = 0;
    struct tw_descriptor d2 = fx_desc("layer1.bias", "cuda:0", TW_DTYPE_BF16, 1, shape);
    ssize_t k = tw__descriptor_encode(&d, ent, sizeof(ent));
    TW_ASSERT(k > 0);
    off += (size_t)k;
    k = tw__descriptor_encode(&d2, ent + off, sizeof(ent) - off);
    TW_ASSERT(k > 0);
    off += (size_t)k;
    struct tw_msg lr = fx_msg(TW_TAG_LIST_REPLY, 12);
    lr.hdr.flags = TW_FRAME_MORE;
    lr.u.list_reply.count = 2;
    lr.u.list_reply.entries.ptr = ent;
    lr.u.list_reply.entries.len = (uint32_t)off;
    roundtrip(&lr);
    size_t cur = 0;
    struct tw_descriptor got;
    TW_ASSERT_EQ(tw__list_next(&lr, &cur, &got), 1);
    TW_ASSERT_EQ(got.name.len, 13);
    TW_ASSERT_EQ(tw__list_next(&lr, &cur, &got), 1);
    TW_ASSERT_EQ(got.dtype, TW_DTYPE_BF16);
    TW_ASSERT_EQ(tw__list_next(&lr, &cur, &got), 0);

    uint8_t st[128];
    off = 0;
    off += (size_t)tw__stats_entry_encode("bytes_sent", 1234, st, sizeof(st));
    off += (size_t)tw__stats_entry_encode("conn.active", 3, st + off, sizeof(st) - off);
    struct tw_msg sr = fx_msg(TW_TAG_STATS_REPLY, 13);
    sr.u.stats_reply.count = 2;
    sr.u.stats_reply.entries.ptr = st;
    sr.u.stats_reply.entries.len = (uint32_t)off;
    roundtrip(&sr);
    cur = 0;
    struct tw_bytes key;
    uint64_t val;
    TW_ASSERT_EQ(tw__stats_next(&sr, &cur, &key, &val), 1);
    TW_ASSERT_EQ_U64(val, 1234);
    TW_ASSERT_EQ(tw__stats_next(&sr, &cur, &key, &val), 1);
    TW_ASSERT_EQ_U64(val, 3);
    TW_ASSERT_EQ(tw__stats_next(&sr, &cur, &key, &val), 0);
    TW_ASSERT_ERR(tw__stats_entry_encode("Bad Key", 1, st, sizeof(st)), TW_EBAD_FIELD);
}

static void zero_copy_data(void)
{
    uint8_t buf[64];
    struct tw_msg m = fx_data(7, 4096, NULL, 1000, 1);
    TW_ASSERT_EQ(tw__msg_encoded_len(&m), 24 + 8 + 1000);
    TW_ASSERT_EQ(tw__msg_encode(&m, buf, sizeof(buf)), 32);
    struct tw_frame_header h;
    TW_ASSERT_OK(tw__frame_decode_header(buf, 32, 1u << 20, &h));
    TW_ASSERT_EQ(h.payload_len, 1008);
    struct tw_msg d;
    TW_ASSERT_OK(tw__msg_decode_data_prefix(&h, buf + 24, &d));
    TW_ASSERT_EQ_U64(d.u.data.offset, 4096);
    TW_ASSERT_EQ(d.u.data.bytes.len, 1000);
    TW_ASSERT(d.u.data.bytes.ptr == NULL);
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, 31), -ENOBUFS);
}

static void encoder_refuses_invalid(void)
{
    uint8_t buf[256];
    struct tw_msg m = fx_request(0, 0, "x");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_REQUEST_ID);
    m = fx_request(1, 0x80, "x");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_FLAGS);
    m = fx_request(1, 0, "");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_NAME);
    m = fx_hello(0x100 | 0x1, 1u << 20, 1, "a"); /* bit 8: reserved */
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_CAPS);
    m = fx_hello(0x80 | 0x5, 1u << 20, 1, "a"); /* bit 7: RDMA_ATTACH_READS */
    TW_ASSERT(tw__msg_encode(&m, buf, sizeof(buf)) > 0);
    /* ATTACH_READ only beside WANT_RDMA; bits 2..7 reserved. */
    m = fx_request(1, TW_XFER_WANT_RDMA | TW_XFER_ATTACH_READ, "x");
    TW_ASSERT(tw__msg_encode(&m, buf, sizeof(buf)) > 0);
    m = fx_request(1, TW_XFER_ATTACH_READ, "x");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_FLAGS);
    m = fx_request(1, 0x04 | TW_XFER_WANT_RDMA, "x");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_FLAGS);
    m = fx_hello(0x40 | 0x1, 1u << 20, 1, "a"); /* bit 6: EAGER_RDMA_PUT */
    TW_ASSERT(tw__msg_encode(&m, buf, sizeof(buf)) > 0);
    m = fx_hello(0x20 | 0x1, 1u << 20, 1, "a"); /* bit 5: RDMA_PROGRESSIVE */
    TW_ASSERT(tw__msg_encode(&m, buf, sizeof(buf)) > 0);
    m = fx_hello(0x10 | 0x1, 1u << 20, 1, "a"); /* bit 4: EAGER_PUT */
    TW_ASSERT(tw__msg_encode(&m, buf, sizeof(buf)) > 0);
    m = fx_hello(0x8, 1u << 20, 1, "a");
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_CAPS);
    m = fx_msg(TW_TAG_OK, 1);
    m.hdr.flags = TW_FRAME_MORE;
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, sizeof(buf)), TW_EBAD_FLAGS);
    m = fx_msg(TW_TAG_OK, 1);
    TW_ASSERT_ERR(tw__msg_encode(&m, buf, 10), -ENOBUFS);
}

static void names_and_tags(void)
{
    TW_ASSERT_EQ(tw__dtype_size(TW_DTYPE_BF16), 2);
    TW_ASSERT_EQ(tw__dtype_size(0), 0);
    TW_ASSERT_EQ(tw__dtype_size(16), 0);
    TW_ASSERT_STR_EQ(tw__dtype_name(TW_DTYPE_F8E4M3), "f8e4m3");
    TW_ASSERT_EQ(tw__dtype_from_name("bool"), TW_DTYPE_BOOL);
    TW_ASSERT_EQ(tw__dtype_from_name("f128"), 0);
    TW_ASSERT_STR_EQ(tw__tag_name(TW_TAG_RDMA_REGISTER), "RDMA_REGISTER");
    TW_ASSERT_STR_EQ(tw__tag_name(0x19), "RDMA_AVAILABLE");
    TW_ASSERT_STR_EQ(tw__tag_name(0x1A), "UNKNOWN");
    TW_ASSERT_OK(tw__device_tag_check((const uint8_t *)"cuda:255", 8));
    TW_ASSERT_ERR(tw__device_tag_check((const uint8_t *)"cuda:256", 8), TW_EBAD_DEVICE_TAG);
    TW_ASSERT_ERR(tw__device_tag_check((const uint8_t *)"cuda:01", 7), TW_EBAD_DEVICE_TAG);
    TW_ASSERT_ERR(tw__device_tag_check((const uint8_t *)"CPU", 3), TW_EBAD_DEVICE_TAG);
    TW_ASSERT_OK(tw__device_tag_check((const uint8_t *)"cpu", 3));
    TW_ASSERT_OK(tw__device_tag_check((const uint8_t *)"rocm:0", 6));
}

static ssize_t payload_of(const struct tw_msg *m)
{
    static uint8_t buf[8192];
    ssize_t n = tw__msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        TW_FAIL("encode %s: %s", tw__tag_name(m->hdr.tag), tw_strerror_name((int)n));
    return n - TW_FRAME_HEADER_LEN;
}

/* tw__max_payload_len is the size of the largest valid instance. */
static void max_payload_lengths(void)
{
    static char name[TW_MAX_NAME_LEN + 1], text[TW_MAX_ERROR_MSG_LEN + 1], agent[65], tag[33];
    static uint8_t addr[TW_MAX_FABRIC_ADDR_LEN], prov[TW_MAX_PROVIDER_LEN];
    memset(name, 'n', TW_MAX_NAME_LEN);
    memset(text, 't', TW_MAX_ERROR_MSG_LEN);
    memset(agent, 'a', 64);
    memset(tag, 'x', 32);
    memset(prov, 'p', sizeof(prov));
    struct tw_msg m = fx_hello(0xF, 1u << 20, 8, agent);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_HELLO));
    m = fx_hello_ack(0xF, 1u << 20, 8, TW_AUTH_HMAC_SHA256, agent);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_HELLO_ACK));
    m = fx_request(1, 0, name);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_TENSOR_REQUEST));
    uint64_t shape[16];
    for (int i = 0; i < 16; i++)
        shape[i] = 1;
    struct tw_descriptor d = fx_desc(name, tag, TW_DTYPE_U8, 16, shape);
    m = fx_put(1, 0, d);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_TENSOR_PUT));
    TW_ASSERT_EQ(tw__max_payload_len(TW_TAG_TENSOR_PUT), 1212);
    m = fx_info(1, TW_DP_INLINE, d);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_TENSOR_INFO));
    m = fx_msg(TW_TAG_RDMA_ENDPOINT, 0);
    m.u.rdma_endpoint.status = TW_EP_OFFER;
    m.u.rdma_endpoint.count = TW_MAX_FABRIC_ENTRIES;
    m.u.rdma_endpoint.reason.ptr = (const uint8_t *)text;
    m.u.rdma_endpoint.reason.len = TW_MAX_REASON_LEN;
    for (unsigned i = 0; i < TW_MAX_FABRIC_ENTRIES; i++) {
        m.u.rdma_endpoint.entries[i].provider.ptr = prov;
        m.u.rdma_endpoint.entries[i].provider.len = TW_MAX_PROVIDER_LEN;
        m.u.rdma_endpoint.entries[i].addr.ptr = addr;
        m.u.rdma_endpoint.entries[i].addr.len = TW_MAX_FABRIC_ADDR_LEN;
    }
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_RDMA_ENDPOINT));
    m = fx_error(1, TW_WIRE_INTERNAL, text);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_ERROR));
    m = fx_name_msg(TW_TAG_LIST, 1, name);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_LIST));
    m = fx_name_msg(TW_TAG_STAT, 1, name);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_STAT));
    m = fx_name_msg(TW_TAG_DELETE, 1, name);
    TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(TW_TAG_DELETE));
    /* Fixed-size messages. */
    static const uint32_t fixed[] = {TW_TAG_AUTH,      TW_TAG_AUTH_OK,       TW_TAG_PUT_ACCEPT,
                                     TW_TAG_RDMA_DONE, TW_TAG_RDMA_REGISTER, TW_TAG_RDMA_READY,
                                     TW_TAG_OK,        TW_TAG_PING,          TW_TAG_PONG,
                                     TW_TAG_GOODBYE,   TW_TAG_STATS};
    for (unsigned i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        m = fx_msg(fixed[i], fixed[i] == TW_TAG_AUTH || fixed[i] == TW_TAG_AUTH_OK ||
                                     fixed[i] == TW_TAG_GOODBYE
                                 ? 0
                                 : 1);
        if (fixed[i] == TW_TAG_PUT_ACCEPT)
            m.u.put_accept.data_plane = TW_DP_INLINE;
        TW_ASSERT_EQ(payload_of(&m), tw__max_payload_len(fixed[i]));
    }
    TW_ASSERT_EQ_U64(tw__max_payload_len(TW_TAG_DATA), UINT32_MAX);
    TW_ASSERT_EQ(tw__max_payload_len(0), 0);
    TW_ASSERT_EQ(tw__max_payload_len(TW_TAG_MAX + 1), 0);
    /* Every bounded control message fits far below the smallest max_frame. */
    for (uint32_t t = 1; t <= TW_TAG_MAX; t++)
        if (tw__max_payload_len(t) != UINT32_MAX)
            TW_ASSERT(tw__max_payload_len(t) <= TW_PREAUTH_MAX_FRAME);
}

int main(void)
{
    TW_RUN(crc32c_check_value);
    TW_RUN(crc32c_sw_matches_hw);
    TW_RUN(every_message_roundtrips);
    TW_RUN(zero_copy_data);
    TW_RUN(encoder_refuses_invalid);
    TW_RUN(names_and_tags);
    TW_RUN(max_payload_lengths);
    TW_DONE();
}
