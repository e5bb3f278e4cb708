/*
 * Little-endian put/get helpers for the protocol codec.
 *
 * Every multi-byte integer on the wire is little-endian. The codec never casts
 * a struct over wire bytes: it copies each field through memcpy (which the
 * compiler turns into one unaligned load or store) and swaps bytes on a
 * big-endian host. The caller guarantees that p points at enough bytes; the
 * bounds checks live in the codec's reader (codec.c), not here.
 */
#ifndef TW_PROTO_WIRE_H
#define TW_PROTO_WIRE_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TW_WIRE_SWAP16(x) __builtin_bswap16(x)
#define TW_WIRE_SWAP32(x) __builtin_bswap32(x)
#define TW_WIRE_SWAP64(x) __builtin_bswap64(x)
#else
#define TW_WIRE_SWAP16(x) (x)
#define TW_WIRE_SWAP32(x) (x)
#define TW_WIRE_SWAP64(x) (x)
#endif

static inline void wire_put_u8(uint8_t *p, uint8_t v)
{
    p[0] = v;
}

static inline void wire_put_u16(uint8_t *p, uint16_t v)
{
    v = TW_WIRE_SWAP16(v);
    memcpy(p, &v, sizeof(v));
}

static inline void wire_put_u32(uint8_t *p, uint32_t v)
{
    v = TW_WIRE_SWAP32(v);
    memcpy(p, &v, sizeof(v));
}

static inline void wire_put_u64(uint8_t *p, uint64_t v)
{
    v = TW_WIRE_SWAP64(v);
    memcpy(p, &v, sizeof(v));
}

static inline uint8_t wire_get_u8(const uint8_t *p)
{
    return p[0];
}

static inline uint16_t wire_get_u16(const uint8_t *p)
{
    uint16_t v;
    memcpy(&v, p, sizeof(v));
    return TW_WIRE_SWAP16(v);
}

static inline uint32_t wire_get_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return TW_WIRE_SWAP32(v);
}

static inline uint64_t wire_get_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return TW_WIRE_SWAP64(v);
}

#endif
