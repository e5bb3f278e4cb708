/* Names and element sizes of dtypes, and names of message tags: one table
 * each, indexed by the wire value, so a name and its number never drift. */
#include <string.h>

#include "proto/proto.h"

struct dtype_entry {
    const char *name;
    size_t size;
};

/* Index = wire dtype value; entry 0 is "unknown". */
static const struct dtype_entry dtypes[TW_DTYPE_MAX + 1] = {
    [TW_DTYPE_F64] = {"f64", 8},       [TW_DTYPE_F32] = {"f32", 4},
    [TW_DTYPE_F16] = {"f16", 2},       [TW_DTYPE_BF16] = {"bf16", 2},
    [TW_DTYPE_F8E4M3] = {"f8e4m3", 1}, [TW_DTYPE_F8E5M2] = {"f8e5m2", 1},
    [TW_DTYPE_I8] = {"i8", 1},         [TW_DTYPE_I16] = {"i16", 2},
    [TW_DTYPE_I32] = {"i32", 4},       [TW_DTYPE_I64] = {"i64", 8},
    [TW_DTYPE_U8] = {"u8", 1},         [TW_DTYPE_U16] = {"u16", 2},
    [TW_DTYPE_U32] = {"u32", 4},       [TW_DTYPE_U64] = {"u64", 8},
    [TW_DTYPE_BOOL] = {"bool", 1},
};

size_t tw__dtype_size(uint8_t dtype)
{
    if (dtype == 0 || dtype > TW_DTYPE_MAX)
        return 0;
    return dtypes[dtype].size;
}

const char *tw__dtype_name(uint8_t dtype)
{
    if (dtype == 0 || dtype > TW_DTYPE_MAX)
        return NULL;
    return dtypes[dtype].name;
}

uint8_t tw__dtype_from_name(const char *name)
{
    if (!name)
        return 0;
    for (uint8_t i = 1; i <= TW_DTYPE_MAX; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return i;
    return 0;
}

static const char *const tag_names[TW_TAG_MAX + 1] = {
    [TW_TAG_HELLO] = "HELLO",
    [TW_TAG_HELLO_ACK] = "HELLO_ACK",
    [TW_TAG_AUTH] = "AUTH",
    [TW_TAG_AUTH_OK] = "AUTH_OK",
    [TW_TAG_TENSOR_REQUEST] = "TENSOR_REQUEST",
    [TW_TAG_TENSOR_PUT] = "TENSOR_PUT",
    [TW_TAG_TENSOR_INFO] = "TENSOR_INFO",
    [TW_TAG_DATA] = "DATA",
    [TW_TAG_PUT_ACCEPT] = "PUT_ACCEPT",
    [TW_TAG_RDMA_ENDPOINT] = "RDMA_ENDPOINT",
    [TW_TAG_RDMA_DONE] = "RDMA_DONE",
    [TW_TAG_RDMA_REGISTER] = "RDMA_REGISTER",
    [TW_TAG_RDMA_READY] = "RDMA_READY",
    [TW_TAG_ERROR] = "ERROR",
    [TW_TAG_OK] = "OK",
    [TW_TAG_LIST] = "LIST",
    [TW_TAG_LIST_REPLY] = "LIST_REPLY",
    [TW_TAG_STAT] = "STAT",
    [TW_TAG_DELETE] = "DELETE",
    [TW_TAG_PING] = "PING",
    [TW_TAG_PONG] = "PONG",
    [TW_TAG_GOODBYE] = "GOODBYE",
    [TW_TAG_STATS] = "STATS",
    [TW_TAG_STATS_REPLY] = "STATS_REPLY",
    [TW_TAG_RDMA_AVAILABLE] = "RDMA_AVAILABLE",
};

const char *tw__tag_name(uint32_t tag)
{
    if (tag == 0 || tag > TW_TAG_MAX)
        return "UNKNOWN";
    return tag_names[tag];
}

/* The largest valid instance of each message: fixed part plus every
 * variable field at its maximum (docs/protocol.md, "Limits"). */
#define DESC_MAX                                                                                   \
    (TW_DESCRIPTOR_FIXED_LEN + 8u * TW_MAX_NDIM + TW_MAX_NAME_LEN + TW_MAX_DEVICE_TAG_LEN)
static const uint32_t max_payload[TW_TAG_MAX + 1] = {
    [TW_TAG_HELLO] = 18 + TW_MAX_AGENT_LEN,
    [TW_TAG_HELLO_ACK] = 54 + TW_MAX_AGENT_LEN,
    [TW_TAG_AUTH] = TW_AUTH_NONCE_LEN + TW_AUTH_MAC_LEN,
    [TW_TAG_AUTH_OK] = TW_AUTH_MAC_LEN,
    [TW_TAG_TENSOR_REQUEST] = 4 + TW_MAX_NAME_LEN,
    [TW_TAG_TENSOR_PUT] = 4 + DESC_MAX,
    [TW_TAG_TENSOR_INFO] = 4 + DESC_MAX,
    [TW_TAG_DATA] = UINT32_MAX,
    [TW_TAG_PUT_ACCEPT] = 4,
    [TW_TAG_RDMA_ENDPOINT] =
        20 + TW_MAX_REASON_LEN +
        TW_MAX_FABRIC_ENTRIES * (8 + TW_MAX_PROVIDER_LEN + TW_MAX_FABRIC_ADDR_LEN),
    [TW_TAG_RDMA_DONE] = 16,
    [TW_TAG_RDMA_REGISTER] = 24,
    [TW_TAG_RDMA_READY] = 0,
    [TW_TAG_ERROR] = 6 + TW_MAX_ERROR_MSG_LEN,
    [TW_TAG_OK] = 0,
    [TW_TAG_LIST] = 2 + TW_MAX_NAME_LEN,
    [TW_TAG_LIST_REPLY] = UINT32_MAX,
    [TW_TAG_STAT] = 2 + TW_MAX_NAME_LEN,
    [TW_TAG_DELETE] = 2 + TW_MAX_NAME_LEN,
    [TW_TAG_PING] = TW_PING_PAYLOAD_LEN,
    [TW_TAG_PONG] = TW_PING_PAYLOAD_LEN,
    [TW_TAG_GOODBYE] = 4,
    [TW_TAG_STATS] = 0,
    [TW_TAG_STATS_REPLY] = UINT32_MAX,
    [TW_TAG_RDMA_AVAILABLE] = 8,
};

uint32_t tw__max_payload_len(uint32_t tag)
{
    if (tag == 0 || tag > TW_TAG_MAX)
        return 0;
    return max_payload[tag];
}
