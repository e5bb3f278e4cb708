/*
 * Message builders shared by the protocol tests and fuzzers. Each returns a
 * struct tw_msg by value whose byte strings point at string literals or at
 * caller storage (valid as long as that storage is). Header-only and static
 * so every test executable gets its own copy.
 */
#ifndef TW_PROTO_FIXTURES_H
#define TW_PROTO_FIXTURES_H

#include <string.h>

#include "proto/proto.h"
#include "proto/sm.h"

static inline struct tw_bytes fx_str(const char *s)
{
    struct tw_bytes b = {(const uint8_t *)s, (uint32_t)strlen(s)};
    return b;
}

static inline struct tw_msg fx_msg(uint32_t tag, uint64_t id)
{
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.version = TW_PROTO_VERSION;
    m.hdr.tag = tag;
    m.hdr.request_id = id;
    return m;
}

static inline struct tw_msg fx_hello(uint64_t caps, uint32_t max_frame, uint32_t max_inflight,
                                     const char *agent)
{
    struct tw_msg m = fx_msg(TW_TAG_HELLO, 0);
    m.u.hello.caps = caps;
    m.u.hello.max_frame = max_frame;
    m.u.hello.max_inflight = max_inflight;
    m.u.hello.agent = fx_str(agent);
    return m;
}

static inline struct tw_msg fx_hello_ack(uint64_t caps, uint32_t max_frame, uint32_t max_inflight,
                                         uint8_t auth_method, const char *agent)
{
    struct tw_msg m = fx_msg(TW_TAG_HELLO_ACK, 0);
    m.u.hello_ack.caps = caps;
    m.u.hello_ack.max_frame = max_frame;
    m.u.hello_ack.max_inflight = max_inflight;
    m.u.hello_ack.auth_method = auth_method;
    if (auth_method != TW_AUTH_NONE)
        for (unsigned i = 0; i < TW_AUTH_NONCE_LEN; i++)
            m.u.hello_ack.server_nonce[i] = (uint8_t)(0xA0 + i);
    m.u.hello_ack.agent = fx_str(agent);
    return m;
}

/* A descriptor over static storage: f32 [2,3] "layer0.weight" on cpu. */
static inline struct tw_descriptor fx_desc(const char *name, const char *tag, uint8_t dtype,
                                           uint8_t ndim, const uint64_t *shape)
{
    struct tw_descriptor d;
    memset(&d, 0, sizeof(d));
    d.dtype = dtype;
    d.ndim = ndim;
    uint64_t n = tw__dtype_size(dtype);
    for (unsigned i = 0; i < ndim; i++) {
        d.shape[i] = shape[i];
        n *= shape[i];
    }
    d.byte_length = n;
    d.name = fx_str(name);
    d.device_tag = fx_str(tag);
    return d;
}

static inline struct tw_msg fx_request(uint64_t id, uint8_t flags, const char *name)
{
    struct tw_msg m = fx_msg(TW_TAG_TENSOR_REQUEST, id);
    m.u.tensor_request.flags = flags;
    m.u.tensor_request.name = fx_str(name);
    return m;
}

static inline struct tw_msg fx_put(uint64_t id, uint8_t flags, struct tw_descriptor d)
{
    struct tw_msg m = fx_msg(TW_TAG_TENSOR_PUT, id);
    m.u.tensor_put.flags = flags;
    m.u.tensor_put.desc = d;
    return m;
}

static inline struct tw_msg fx_info(uint64_t id, uint8_t dp, struct tw_descriptor d)
{
    struct tw_msg m = fx_msg(TW_TAG_TENSOR_INFO, id);
    m.u.tensor_info.data_plane = dp;
    m.u.tensor_info.desc = d;
    return m;
}

static inline struct tw_msg fx_data(uint64_t id, uint64_t offset, const void *bytes, uint32_t len,
                                    int more)
{
    struct tw_msg m = fx_msg(TW_TAG_DATA, id);
    m.hdr.flags = more ? TW_FRAME_MORE : 0;
    m.u.data.offset = offset;
    m.u.data.bytes.ptr = bytes;
    m.u.data.bytes.len = len;
    return m;
}

static inline struct tw_msg fx_put_accept(uint64_t id, uint8_t dp)
{
    struct tw_msg m = fx_msg(TW_TAG_PUT_ACCEPT, id);
    m.u.put_accept.data_plane = dp;
    return m;
}

static inline struct tw_msg fx_register(uint64_t id, uint64_t rkey, uint64_t addr, uint64_t len)
{
    struct tw_msg m = fx_msg(TW_TAG_RDMA_REGISTER, id);
    m.u.rdma_register.rkey = rkey;
    m.u.rdma_register.remote_addr = addr;
    m.u.rdma_register.length = len;
    return m;
}

/* A source registration whose bytes follow (bit 5: MORE). */
static inline struct tw_msg fx_register_more(uint64_t id, uint64_t rkey, uint64_t addr,
                                             uint64_t len)
{
    struct tw_msg m = fx_register(id, rkey, addr, len);
    m.hdr.flags = TW_FRAME_MORE;
    return m;
}

static inline struct tw_msg fx_available(uint64_t id, uint64_t ready)
{
    struct tw_msg m = fx_msg(TW_TAG_RDMA_AVAILABLE, id);
    m.u.rdma_available.ready = ready;
    return m;
}

static inline struct tw_msg fx_done(uint64_t id, uint32_t status, uint64_t bytes)
{
    struct tw_msg m = fx_msg(TW_TAG_RDMA_DONE, id);
    m.u.rdma_done.status = status;
    m.u.rdma_done.bytes = bytes;
    return m;
}

static inline struct tw_msg fx_error(uint64_t id, uint32_t code, const char *text)
{
    struct tw_msg m = fx_msg(TW_TAG_ERROR, id);
    m.u.error.code = code;
    m.u.error.message = fx_str(text);
    return m;
}

static inline struct tw_msg fx_name_msg(uint32_t tag, uint64_t id, const char *name)
{
    struct tw_msg m = fx_msg(tag, id);
    if (tag == TW_TAG_LIST)
        m.u.list.prefix = fx_str(name);
    else
        m.u.name.name = fx_str(name);
    return m;
}

static inline struct tw_msg fx_ping(uint32_t tag, uint64_t id, const char payload[8])
{
    struct tw_msg m = fx_msg(tag, id);
    memcpy(m.u.ping.payload, payload, 8);
    return m;
}

static inline struct tw_msg fx_goodbye(uint32_t code)
{
    struct tw_msg m = fx_msg(TW_TAG_GOODBYE, 0);
    m.u.goodbye.code = code;
    return m;
}

/* OFFER with one or two entries; ACCEPT with one; DECLINE with a reason. */
static inline struct tw_msg fx_endpoint(uint8_t status)
{
    static const uint8_t addr_a[16] = {0x02, 0x00, 0x4e, 0x21, 127, 0, 0, 1};
    static const uint8_t addr_b[16] = {0x02, 0x00, 0x4e, 0x22, 127, 0, 0, 1};
    struct tw_msg m = fx_msg(TW_TAG_RDMA_ENDPOINT, 0);
    m.u.rdma_endpoint.status = status;
    for (unsigned i = 0; i < TW_HOST_ID_LEN; i++)
        m.u.rdma_endpoint.host_id[i] = (uint8_t)(0x10 + i);
    if (status == TW_EP_DECLINE) {
        m.u.rdma_endpoint.reason = fx_str("no common provider");
        return m;
    }
    m.u.rdma_endpoint.count = status == TW_EP_OFFER ? 2 : 1;
    m.u.rdma_endpoint.entries[0].provider =
        fx_str(status == TW_EP_OFFER ? "verbs;ofi_rxm" : "tcp;ofi_rxm");
    m.u.rdma_endpoint.entries[0].addr_format = 2; /* FI_SOCKADDR_IN */
    m.u.rdma_endpoint.entries[0].addr.ptr = status == TW_EP_OFFER ? addr_a : addr_b;
    m.u.rdma_endpoint.entries[0].addr.len = 16;
    if (status == TW_EP_OFFER) {
        m.u.rdma_endpoint.entries[1].provider = fx_str("tcp;ofi_rxm");
        m.u.rdma_endpoint.entries[1].addr_format = 2;
        m.u.rdma_endpoint.entries[1].addr.ptr = addr_a;
        m.u.rdma_endpoint.entries[1].addr.len = 16;
    }
    return m;
}

#endif
