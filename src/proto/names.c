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
};

const char *tw__tag_name(uint32_t tag)
{
    if (tag == 0 || tag > TW_TAG_MAX)
        return "UNKNOWN";
    return tag_names[tag];
}
