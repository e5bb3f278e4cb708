/*
 * Words for request-level verdicts: the decoder says only which rule a
 * request-opening frame broke (a code); a peer deserves the value too
 * (docs/protocol.md section 8: "a message saying which rule failed and with
 * what value"). This re-reads the raw fields, which the framing checks have
 * already bounded, and never trusts a length beyond the frame.
 */
#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/wire.h"

/* A view of n bytes at off within the payload, or NULL past its end. */
static const uint8_t *field(const uint8_t *pl, size_t plen, size_t off, size_t n)
{
    return off <= plen && n <= plen - off ? pl + off : NULL;
}

static void explain_name(const char *what, const uint8_t *s, size_t n, char *buf, size_t len)
{
    if (n == 0) {
        snprintf(buf, len, "%s is empty (1..%u bytes)", what, TW_MAX_NAME_LEN);
        return;
    }
    if (n > TW_MAX_NAME_LEN) {
        snprintf(buf, len, "%s is %zu bytes, limit %u", what, n, TW_MAX_NAME_LEN);
        return;
    }
    if (!s) {
        snprintf(buf, len, "%s of %zu bytes runs past the frame", what, n);
        return;
    }
    const uint8_t *nul = memchr(s, 0, n);
    if (nul) {
        snprintf(buf, len, "%s has a NUL byte at byte offset %zu", what, (size_t)(nul - s));
        return;
    }
    size_t at = tw__utf8_invalid_at(s, n);
    if (at < n) {
        snprintf(buf, len, "%s is not valid UTF-8 at byte offset %zu (byte 0x%02x)", what, at,
                 s[at]);
        return;
    }
    snprintf(buf, len, "%s of %zu bytes", what, n);
}

static void explain_device_tag(const uint8_t *s, size_t n, char *buf, size_t len)
{
    if (n == 0 || n > TW_MAX_DEVICE_TAG_LEN || !s) {
        snprintf(buf, len, "device tag is %zu bytes (1..%u)", n, TW_MAX_DEVICE_TAG_LEN);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':' ||
              c == '.' || c == '-')) {
            snprintf(buf, len,
                     "device tag has byte 0x%02x at byte offset %zu, outside [a-z0-9_:.-]", c, i);
            return;
        }
    }
    snprintf(buf, len,
             "device tag '%.*s' starts with 'cuda' but is not cuda:N (N 0..255, no "
             "leading zeros)",
             (int)n, (const char *)s);
}

static void explain_descriptor(const uint8_t *d, size_t dlen, int verdict, char *buf, size_t len)
{
    if (dlen < 24) {
        snprintf(buf, len, "descriptor of %zu bytes is shorter than its 24 fixed bytes", dlen);
        return;
    }
    uint8_t dtype = wire_get_u8(d), ndim = wire_get_u8(d + 1), tag_len = wire_get_u8(d + 3);
    uint16_t name_len = wire_get_u16(d + 4);
    uint64_t byte_length = wire_get_u64(d + 8);
    switch (verdict) {
    case TW_EBAD_DTYPE:
        snprintf(buf, len, "dtype %u is not one of 1..%u", dtype, (unsigned)TW_DTYPE_MAX);
        return;
    case TW_EBAD_SHAPE:
    case TW_EOVERFLOW: {
        if (ndim > TW_MAX_NDIM) {
            snprintf(buf, len, "ndim is %u, limit %u", ndim, TW_MAX_NDIM);
            return;
        }
        const uint8_t *sh = field(d, dlen, 24, 8u * ndim);
        if (!sh) {
            snprintf(buf, len, "shape of %u dimensions runs past the frame", ndim);
            return;
        }
        uint64_t shape[TW_MAX_NDIM], want = 0;
        char dims[TW_MAX_NDIM * 22];
        size_t used = 0;
        dims[0] = '\0';
        for (unsigned i = 0; i < ndim; i++) {
            shape[i] = wire_get_u64(sh + 8u * i);
            int w = snprintf(dims + used, sizeof(dims) - used, "%s%llu", i ? ", " : "",
                             (unsigned long long)shape[i]);
            if (w > 0 && (size_t)w < sizeof(dims) - used)
                used += (size_t)w;
        }
        if (tw__shape_bytes(dtype, ndim, shape, &want) == TW_EOVERFLOW || verdict == TW_EOVERFLOW) {
            snprintf(buf, len, "%s [%s] is more than 2^64-1 bytes", tw__dtype_name(dtype), dims);
            return;
        }
        snprintf(buf, len, "byte_length is %llu but %s [%s] is %llu bytes",
                 (unsigned long long)byte_length, tw__dtype_name(dtype), dims,
                 (unsigned long long)want);
        return;
    }
    case TW_EBAD_NAME:
        explain_name("name", field(d, dlen, 24 + 8u * ndim, name_len), name_len, buf, len);
        return;
    case TW_EBAD_DEVICE_TAG:
        explain_device_tag(field(d, dlen, 24 + 8u * ndim + name_len, tag_len), tag_len, buf, len);
        return;
    }
    snprintf(buf, len, "%s", tw_strerror(verdict));
}

const char *tw__explain_request_verdict(const uint8_t *frame, size_t flen, int verdict, char *buf,
                                        size_t len)
{
    if (!len)
        return buf;
    buf[0] = '\0';
    if (flen < TW_FRAME_HEADER_LEN) {
        snprintf(buf, len, "%s", tw_strerror(verdict));
        return buf;
    }
    uint32_t tag = wire_get_u32(frame + 8);
    const uint8_t *pl = frame + TW_FRAME_HEADER_LEN;
    size_t plen = flen - TW_FRAME_HEADER_LEN;
    const uint8_t *lenf;
    switch (tag) {
    case TW_TAG_TENSOR_REQUEST:
        if (verdict == TW_EBAD_NAME && (lenf = field(pl, plen, 2, 2)) != NULL) {
            uint16_t n = wire_get_u16(lenf);
            explain_name("name", field(pl, plen, 4, n), n, buf, len);
            return buf;
        }
        break;
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
    case TW_TAG_LIST:
        if (verdict == TW_EBAD_NAME && (lenf = field(pl, plen, 0, 2)) != NULL) {
            uint16_t n = wire_get_u16(lenf);
            explain_name(tag == TW_TAG_LIST ? "prefix" : "name", field(pl, plen, 2, n), n, buf,
                         len);
            return buf;
        }
        break;
    case TW_TAG_TENSOR_PUT:
        if (plen > 4) {
            explain_descriptor(pl + 4, plen - 4, verdict, buf, len);
            return buf;
        }
        break;
    }
    snprintf(buf, len, "%s", tw_strerror(verdict));
    return buf;
}
