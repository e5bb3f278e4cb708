/*
 * Field-by-field equality of decoded messages, comparing byte strings by
 * content. Used by the round-trip fuzzer and the golden-vector test; kept in
 * the library so both share one definition of "the same message".
 */
#include <string.h>

#include "proto/proto.h"

static int bytes_eq(const struct tw_bytes *a, const struct tw_bytes *b)
{
    if (a->len != b->len)
        return 0;
    return a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0;
}

static int desc_eq(const struct tw_descriptor *a, const struct tw_descriptor *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->flags != b->flags ||
        a->crc32c != b->crc32c || a->byte_length != b->byte_length)
        return 0;
    for (unsigned i = 0; i < a->ndim && i < TW_MAX_NDIM; i++)
        if (a->shape[i] != b->shape[i])
            return 0;
    return bytes_eq(&a->name, &b->name) && bytes_eq(&a->device_tag, &b->device_tag);
}

int tw__msg_equal(const struct tw_msg *a, const struct tw_msg *b)
{
    if (a->hdr.version != b->hdr.version || a->hdr.flags != b->hdr.flags ||
        a->hdr.tag != b->hdr.tag || a->hdr.payload_len != b->hdr.payload_len ||
        a->hdr.request_id != b->hdr.request_id)
        return 0;
    switch (a->hdr.tag) {
    case TW_TAG_HELLO:
        return a->u.hello.caps == b->u.hello.caps && a->u.hello.max_frame == b->u.hello.max_frame &&
               a->u.hello.max_inflight == b->u.hello.max_inflight &&
               bytes_eq(&a->u.hello.agent, &b->u.hello.agent);
    case TW_TAG_HELLO_ACK:
        return a->u.hello_ack.caps == b->u.hello_ack.caps &&
               a->u.hello_ack.max_frame == b->u.hello_ack.max_frame &&
               a->u.hello_ack.max_inflight == b->u.hello_ack.max_inflight &&
               a->u.hello_ack.auth_method == b->u.hello_ack.auth_method &&
               memcmp(a->u.hello_ack.server_nonce, b->u.hello_ack.server_nonce,
                      TW_AUTH_NONCE_LEN) == 0 &&
               bytes_eq(&a->u.hello_ack.agent, &b->u.hello_ack.agent);
    case TW_TAG_AUTH:
        return memcmp(&a->u.auth, &b->u.auth, sizeof(a->u.auth)) == 0;
    case TW_TAG_AUTH_OK:
        return memcmp(&a->u.auth_ok, &b->u.auth_ok, sizeof(a->u.auth_ok)) == 0;
    case TW_TAG_TENSOR_REQUEST:
        return a->u.tensor_request.flags == b->u.tensor_request.flags &&
               bytes_eq(&a->u.tensor_request.name, &b->u.tensor_request.name);
    case TW_TAG_TENSOR_PUT:
        return a->u.tensor_put.flags == b->u.tensor_put.flags &&
               desc_eq(&a->u.tensor_put.desc, &b->u.tensor_put.desc);
    case TW_TAG_TENSOR_INFO:
        return a->u.tensor_info.data_plane == b->u.tensor_info.data_plane &&
               desc_eq(&a->u.tensor_info.desc, &b->u.tensor_info.desc);
    case TW_TAG_DATA:
        if (a->u.data.offset != b->u.data.offset || a->u.data.bytes.len != b->u.data.bytes.len)
            return 0;
        if (!a->u.data.bytes.ptr || !b->u.data.bytes.ptr)
            return a->u.data.bytes.ptr == b->u.data.bytes.ptr;
        return bytes_eq(&a->u.data.bytes, &b->u.data.bytes);
    case TW_TAG_PUT_ACCEPT:
        return a->u.put_accept.data_plane == b->u.put_accept.data_plane;
    case TW_TAG_RDMA_ENDPOINT: {
        const __typeof__(a->u.rdma_endpoint) *x = &a->u.rdma_endpoint, *y = &b->u.rdma_endpoint;
        if (x->status != y->status || x->count != y->count ||
            memcmp(x->host_id, y->host_id, TW_HOST_ID_LEN) != 0 ||
            !bytes_eq(&x->reason, &y->reason))
            return 0;
        for (unsigned i = 0; i < x->count && i < TW_MAX_FABRIC_ENTRIES; i++)
            if (!bytes_eq(&x->entries[i].provider, &y->entries[i].provider) ||
                x->entries[i].addr_format != y->entries[i].addr_format ||
                !bytes_eq(&x->entries[i].addr, &y->entries[i].addr))
                return 0;
        return 1;
    }
    case TW_TAG_RDMA_DONE:
        return a->u.rdma_done.status == b->u.rdma_done.status &&
               a->u.rdma_done.bytes == b->u.rdma_done.bytes;
    case TW_TAG_RDMA_REGISTER:
        return a->u.rdma_register.rkey == b->u.rdma_register.rkey &&
               a->u.rdma_register.remote_addr == b->u.rdma_register.remote_addr &&
               a->u.rdma_register.length == b->u.rdma_register.length;
    case TW_TAG_RDMA_AVAILABLE:
        return a->u.rdma_available.ready == b->u.rdma_available.ready;
    case TW_TAG_ERROR:
        return a->u.error.code == b->u.error.code &&
               bytes_eq(&a->u.error.message, &b->u.error.message);
    case TW_TAG_LIST:
        return bytes_eq(&a->u.list.prefix, &b->u.list.prefix);
    case TW_TAG_LIST_REPLY:
        return a->u.list_reply.count == b->u.list_reply.count &&
               bytes_eq(&a->u.list_reply.entries, &b->u.list_reply.entries);
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
        return bytes_eq(&a->u.name.name, &b->u.name.name);
    case TW_TAG_PING:
    case TW_TAG_PONG:
        return memcmp(a->u.ping.payload, b->u.ping.payload, TW_PING_PAYLOAD_LEN) == 0;
    case TW_TAG_GOODBYE:
        return a->u.goodbye.code == b->u.goodbye.code;
    case TW_TAG_STATS_REPLY:
        return a->u.stats_reply.count == b->u.stats_reply.count &&
               bytes_eq(&a->u.stats_reply.entries, &b->u.stats_reply.entries);
    default: /* RDMA_READY, OK, STATS */
        return 1;
    }
}
