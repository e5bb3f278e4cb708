/*
 * The two CRC32C implementations behind tw__crc32c (proto.h), exposed so
 * that tests and benches can compare them. Same contract as tw__crc32c.
 */
#ifndef TW_PROTO_CRC32C_H
#define TW_PROTO_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Portable slicing-by-8 table implementation. */
uint32_t tw__crc32c_sw(uint32_t crc, const void *buf, size_t len);
/* SSE4.2 crc32 instruction; falls back to the table version where the CPU
 * lacks SSE4.2 (or on other architectures). */
uint32_t tw__crc32c_hw(uint32_t crc, const void *buf, size_t len);
/* 1 when tw__crc32c_hw really uses the instruction. */
int tw__crc32c_hw_available(void);

#endif
