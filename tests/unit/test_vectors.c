/*
 * Golden vectors (tests/vectors/NAME.hex, written from the spec by
 * scripts/gen-vectors.py without the C codec): every message is built here
 * field by field, encoded and compared byte for byte with its file; the
 * file is decoded and compared field by field with the message. The
 * authentication MACs and the descriptor CRC32C in the vectors are checked
 * against OpenSSL's HMAC-SHA256 and tw__crc32c, which pins down exactly what
 * the spec says is hashed.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "proto_fixtures.h"
#include "tw_test.h"
#include "tw_vectors.h"

static uint8_t file_buf[8192];

static void check_vector(const char *name, const struct tw_msg *m)
{
    fprintf(stderr, "  vector %s\n", name);
    size_t n = tw_load_vector(name, file_buf, sizeof(file_buf));
    uint8_t enc[8192];
    ssize_t e = tw__msg_encode(m, enc, sizeof(enc));
    if (e < 0)
        TW_FAIL("%s: encode failed: %s", name, tw_strerror_name((int)e));
    TW_ASSERT_EQ(e, n);
    TW_ASSERT_MEM_EQ(enc, file_buf, n);
    struct tw_msg d;
    ssize_t c = tw__msg_decode(file_buf, n, TW_MAX_MAX_FRAME, &d);
    if (c < 0)
        TW_FAIL("%s: decode failed: %s", name, tw_strerror_name((int)c));
    TW_ASSERT_EQ(c, n);
    struct tw_msg want = *m;
    want.hdr.payload_len = (uint32_t)(n - TW_FRAME_HEADER_LEN);
    if (!tw__msg_equal(&d, &want))
        TW_FAIL("%s: decoded fields differ from the C-built message", name);
    /* Truncated at every length: incomplete, never an error or a read
     * past the end. */
    for (size_t k = 0; k < n; k++)
        TW_ASSERT_ERR(tw__msg_decode(file_buf, k, TW_MAX_MAX_FRAME, &d), TW_EAGAIN_FRAME);
    /* One byte too long a payload_len: incomplete as well. */
    uint8_t save = file_buf[12];
    file_buf[12] = (uint8_t)(save + 1);
    if (file_buf[12] != 0)
        TW_ASSERT_ERR(tw__msg_decode(file_buf, n, TW_MAX_MAX_FRAME, &d), TW_EAGAIN_FRAME);
    file_buf[12] = save;
    /* A handshake message must fit the pre-authentication limit. */
    if (m->hdr.tag <= TW_TAG_AUTH_OK || m->hdr.tag == TW_TAG_ERROR)
        TW_ASSERT(tw__msg_decode(file_buf, n, TW_PREAUTH_MAX_FRAME, &d) == c);
}

static const uint8_t tensor[24] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                   12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};
static const char token[] = "correct horse battery staple";
static uint8_t nonce_s[32], nonce_c[32], host_id[16];

static void fill(void)
{
    for (unsigned i = 0; i < 32; i++) {
        nonce_s[i] = (uint8_t)(0xA0 + i);
        nonce_c[i] = (uint8_t)(0x40 + i);
    }
    for (unsigned i = 0; i < 16; i++)
        host_id[i] = (uint8_t)(0x10 + i);
}

static void hmac3(const char *label, const uint8_t *a, const uint8_t *b, uint8_t out[32])
{
    uint8_t msg[20 + 64];
    size_t ll = strlen(label);
    TW_ASSERT_EQ(ll, 20);
    memcpy(msg, label, ll);
    memcpy(msg + ll, a, 32);
    memcpy(msg + ll + 32, b, 32);
    unsigned len = 32;
    TW_ASSERT(HMAC(EVP_sha256(), token, (int)strlen(token), msg, ll + 64, out, &len) != NULL);
    TW_ASSERT_EQ(len, 32);
}

static const uint64_t shape23[2] = {2, 3};
static const uint64_t shape3[1] = {3};

static void handshake_vectors(void)
{
    fill();
    struct tw_msg m = fx_hello(0xF, 16u << 20, 256, "tensorwire/0.1.0");
    check_vector("hello", &m);
    m = fx_hello_ack(0x7, 4u << 20, 64, TW_AUTH_HMAC_SHA256, "tensorwired/0.1.0");
    memcpy(m.u.hello_ack.server_nonce, nonce_s, 32);
    check_vector("hello_ack", &m);
    m = fx_msg(TW_TAG_AUTH, 0);
    memcpy(m.u.auth.client_nonce, nonce_c, 32);
    hmac3("tensorwire-v1 client", nonce_s, nonce_c, m.u.auth.mac);
    check_vector("auth", &m);
    m = fx_msg(TW_TAG_AUTH_OK, 0);
    hmac3("tensorwire-v1 server", nonce_c, nonce_s, m.u.auth_ok.mac);
    check_vector("auth_ok", &m);
}

static void transfer_vectors(void)
{
    struct tw_msg m = fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight");
    check_vector("tensor_request", &m);
    struct tw_descriptor d = fx_desc("layer0.weight", "cuda:0", TW_DTYPE_F32, 2, shape23);
    d.flags = TW_DESC_HAS_CRC32C;
    d.crc32c = tw__crc32c(0, tensor, sizeof(tensor));
    m = fx_put(2, 0, d);
    check_vector("tensor_put", &m);
    m = fx_info(1, TW_DP_INLINE, fx_desc("layer0.weight", "cpu", TW_DTYPE_F32, 2, shape23));
    check_vector("tensor_info", &m);
    m = fx_data(1, 0, tensor, 24, 0);
    check_vector("data", &m);
    m = fx_data(1, 0, tensor, 16, 1);
    check_vector("data_more", &m);
    m = fx_put_accept(2, TW_DP_RDMA);
    check_vector("put_accept", &m);
    m = fx_register(4, 0x1234, 0x7f0000001000ull, 24);
    check_vector("rdma_register", &m);
    m = fx_register_more(4, 0x1234, 0x7f0000001000ull, 24);
    check_vector("rdma_register_more", &m);
    m = fx_available(4, 16);
    check_vector("rdma_available", &m);
    m = fx_msg(TW_TAG_RDMA_READY, 4);
    check_vector("rdma_ready", &m);
    m = fx_done(4, 0, 24);
    check_vector("rdma_done", &m);
    m = fx_msg(TW_TAG_OK, 6);
    check_vector("ok", &m);
}

static void endpoint_vectors(void)
{
    struct tw_msg m = fx_endpoint(TW_EP_OFFER);
    check_vector("rdma_endpoint_offer", &m);
    m = fx_endpoint(TW_EP_ACCEPT);
    check_vector("rdma_endpoint_accept", &m);
    m = fx_endpoint(TW_EP_DECLINE);
    check_vector("rdma_endpoint_decline", &m);
}

static void other_vectors(void)
{
    struct tw_msg m = fx_error(5, TW_WIRE_NOT_FOUND, "no tensor named \"x\"");
    check_vector("error", &m);
    m = fx_error(0, TW_WIRE_PROTOCOL_ERROR, "bad magic");
    check_vector("error_fatal", &m);
    m = fx_name_msg(TW_TAG_LIST, 7, "layer");
    check_vector("list", &m);

    uint8_t ent[256];
    size_t off = 0;
    struct tw_descriptor d0 = fx_desc("layer0.weight", "cpu", TW_DTYPE_F32, 2, shape23);
    struct tw_descriptor d1 = fx_desc("layer1.bias", "cuda:1", TW_DTYPE_BF16, 1, shape3);
    off += (size_t)tw__descriptor_encode(&d0, ent, sizeof(ent));
    off += (size_t)tw__descriptor_encode(&d1, ent + off, sizeof(ent) - off);
    m = fx_msg(TW_TAG_LIST_REPLY, 7);
    m.hdr.flags = TW_FRAME_MORE;
    m.u.list_reply.count = 2;
    m.u.list_reply.entries.ptr = ent;
    m.u.list_reply.entries.len = (uint32_t)off;
    check_vector("list_reply", &m);

    m = fx_name_msg(TW_TAG_STAT, 8, "layer0.weight");
    check_vector("stat", &m);
    m = fx_name_msg(TW_TAG_DELETE, 9, "layer0.weight");
    check_vector("delete", &m);
    m = fx_ping(TW_TAG_PING, 10, "pingpong");
    check_vector("ping", &m);
    m = fx_ping(TW_TAG_PONG, 10, "pingpong");
    check_vector("pong", &m);
    m = fx_goodbye(TW_WIRE_SHUTTING_DOWN);
    check_vector("goodbye", &m);
    m = fx_msg(TW_TAG_STATS, 11);
    check_vector("stats", &m);

    uint8_t st[64];
    off = 0;
    off += (size_t)tw__stats_entry_encode("bytes_sent", 1234, st, sizeof(st));
    off += (size_t)tw__stats_entry_encode("conn.active", 3, st + off, sizeof(st) - off);
    m = fx_msg(TW_TAG_STATS_REPLY, 11);
    m.u.stats_reply.count = 2;
    m.u.stats_reply.entries.ptr = st;
    m.u.stats_reply.entries.len = (uint32_t)off;
    check_vector("stats_reply", &m);
}

/* Every tag has at least one vector, so a new message cannot go without. */
static void every_tag_has_a_vector(void)
{
    static const char *const names[] = {
        "hello",      "hello_ack",     "auth",       "auth_ok",     "tensor_request",
        "tensor_put", "tensor_info",   "data",       "put_accept",  "rdma_endpoint_offer",
        "rdma_done",  "rdma_register", "rdma_ready", "error",       "ok",
        "list",       "list_reply",    "stat",       "delete",      "ping",
        "pong",       "goodbye",       "stats",      "stats_reply", "rdma_available"};
    for (uint32_t tag = 1; tag <= TW_TAG_MAX; tag++) {
        size_t n = tw_load_vector(names[tag - 1], file_buf, sizeof(file_buf));
        struct tw_frame_header h;
        TW_ASSERT_OK(tw__frame_decode_header(file_buf, n, TW_MAX_MAX_FRAME, &h));
        TW_ASSERT_EQ(h.tag, tag);
    }
}

int main(void)
{
    TW_RUN(handshake_vectors);
    TW_RUN(transfer_vectors);
    TW_RUN(endpoint_vectors);
    TW_RUN(other_vectors);
    TW_RUN(every_tag_has_a_vector);
    TW_DONE();
}
