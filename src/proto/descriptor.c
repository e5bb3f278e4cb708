/*
 * Tensor descriptor rules and packing (docs/protocol.md, "Descriptor").
 *
 * The descriptor is the one structure shared by TENSOR_PUT, TENSOR_INFO and
 * LIST_REPLY; its checks run in a fixed order that the spec documents,
 * because the first violation decides between a fatal verdict (reserved
 * bits: the sender does not speak our protocol) and a request-level one
 * (a bad name or shape in an otherwise well-formed request).
 */
#include <errno.h>

#include "proto/proto.h"
#include "proto/wire.h"

int tw__shape_bytes(uint8_t dtype, uint8_t ndim, const uint64_t *shape, uint64_t *out_bytes)
{
    size_t esize = tw__dtype_size(dtype);
    if (esize == 0)
        return TW_EBAD_DTYPE;
    if (ndim > TW_MAX_NDIM)
        return TW_EBAD_SHAPE;
    /* A zero dimension makes the tensor empty whatever the others say; it is
     * checked first so that [2^63, 4, 0] is an empty tensor, not an
     * overflow, independent of dimension order. */
    for (uint8_t i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            *out_bytes = 0;
            return 0;
        }
    }
    uint64_t n = esize;
    for (uint8_t i = 0; i < ndim; i++) {
        if (__builtin_mul_overflow(n, shape[i], &n))
            return TW_EOVERFLOW;
    }
    *out_bytes = n;
    return 0;
}

int tw__descriptor_check(const struct tw_descriptor *d)
{
    if (d->flags & ~TW_DESC_HAS_CRC32C)
        return TW_EBAD_FLAGS;
    if (!(d->flags & TW_DESC_HAS_CRC32C) && d->crc32c != 0)
        return TW_EBAD_FIELD;
    uint64_t bytes;
    int rc = tw__shape_bytes(d->dtype, d->ndim, d->shape, &bytes);
    if (rc < 0)
        return rc;
    if (bytes != d->byte_length)
        return TW_EBAD_SHAPE;
    rc = tw__name_check(d->name.ptr, d->name.len);
    if (rc < 0)
        return rc;
    return tw__device_tag_check(d->device_tag.ptr, d->device_tag.len);
}

size_t tw__descriptor_encoded_len(const struct tw_descriptor *d)
{
    return TW_DESCRIPTOR_FIXED_LEN + 8u * (size_t)d->ndim + d->name.len + d->device_tag.len;
}

size_t tw__descriptor_put(uint8_t *buf, const struct tw_descriptor *d)
{
    wire_put_u8(buf + 0, d->dtype);
    wire_put_u8(buf + 1, d->ndim);
    wire_put_u8(buf + 2, d->flags);
    wire_put_u8(buf + 3, (uint8_t)d->device_tag.len);
    wire_put_u16(buf + 4, (uint16_t)d->name.len);
    wire_put_u16(buf + 6, 0);
    wire_put_u64(buf + 8, d->byte_length);
    wire_put_u32(buf + 16, d->crc32c);
    wire_put_u32(buf + 20, 0);
    size_t off = TW_DESCRIPTOR_FIXED_LEN;
    for (uint8_t i = 0; i < d->ndim; i++, off += 8)
        wire_put_u64(buf + off, d->shape[i]);
    /* memcpy from a NULL pointer is undefined even for 0 bytes. */
    if (d->name.len)
        memcpy(buf + off, d->name.ptr, d->name.len);
    off += d->name.len;
    if (d->device_tag.len)
        memcpy(buf + off, d->device_tag.ptr, d->device_tag.len);
    off += d->device_tag.len;
    return off;
}

ssize_t tw__descriptor_encode(const struct tw_descriptor *d, uint8_t *buf, size_t cap)
{
    int rc = tw__descriptor_check(d);
    if (rc < 0)
        return rc;
    if (tw__descriptor_encoded_len(d) > cap)
        return -ENOBUFS;
    return (ssize_t)tw__descriptor_put(buf, d);
}
