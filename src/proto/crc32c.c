/*
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum carried
 * by descriptors with TW_DESC_HAS_CRC32C.
 *
 * Two implementations: slicing-by-8 tables (portable, ~1-2 GB/s) and the
 * SSE4.2 crc32 instruction, chosen once at run time with
 * __builtin_cpu_supports so one binary runs on any x86-64. Both compute the
 * same function; tests compare them on random buffers.
 *
 * The crc32 instruction has a latency of 3 cycles but a throughput of one
 * per cycle, so a single dependency chain uses a third of it. Large buffers
 * are therefore cut into rounds of three STRIPE-byte stripes whose CRCs run
 * as three independent chains and are then combined: the CRC register is
 * linear over GF(2), so crc(s, A||B) = shift(crc(s, A)) ^ crc(0, B), where
 * shift() advances a register over STRIPE zero bytes. shift() is itself
 * linear in the 32 register bits and is precomputed as four 256-entry
 * tables (one per register byte).
 */
#include <pthread.h>
#include <string.h>

#include "proto/crc32c.h"
#include "proto/proto.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define TW_HAVE_SSE42_PATH 1
#endif

#define POLY 0x82F63B78u

#define STRIPE 4096u

static uint32_t table[8][256];
static uint32_t shift_table[4][256]; /* advance a raw register over STRIPE zero bytes */
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

/* Raw register (no pre/post inversion) advanced over n zero bytes. */
static uint32_t zeros_raw(uint32_t r, size_t n)
{
    while (n--)
        r = (r >> 8) ^ table[0][r & 0xFF];
    return r;
}

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xFF];
    /* shift() of each single register bit, then of every byte value by
     * linearity. */
    uint32_t basis[32];
    for (int b = 0; b < 32; b++)
        basis[b] = zeros_raw(UINT32_C(1) << b, STRIPE);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t x = 0;
            for (int b = 0; b < 8; b++)
                if (v & (1u << b))
                    x ^= basis[8 * k + b];
            shift_table[k][v] = x;
        }
}

static uint32_t shift_stripe(uint32_t r)
{
    return shift_table[0][r & 0xFF] ^ shift_table[1][(r >> 8) & 0xFF] ^
           shift_table[2][(r >> 16) & 0xFF] ^ shift_table[3][r >> 24];
}

uint32_t tw__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    pthread_once(&table_once, table_init);
    crc = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
        len--;
    }
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= crc;
        crc = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^
              table[4][lo >> 24] ^ table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^
              table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#ifdef TW_HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const void *buf,
                                                               size_t len)
{
    const uint8_t *p = buf;
    uint64_t c = ~crc;
    while (len && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
#if defined(__x86_64__)
    if (len >= 3 * STRIPE)
        pthread_once(&table_once, table_init);
    while (len >= 3 * STRIPE) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < STRIPE; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p + i, 8);
            memcpy(&v1, p + STRIPE + i, 8);
            memcpy(&v2, p + 2 * STRIPE + i, 8);
            c = _mm_crc32_u64(c, v0);
            c1 = _mm_crc32_u64(c1, v1);
            c2 = _mm_crc32_u64(c2, v2);
        }
        c = shift_stripe((uint32_t)c) ^ (uint32_t)c1;
        c = shift_stripe((uint32_t)c) ^ (uint32_t)c2;
        p += 3 * STRIPE;
        len -= 3 * STRIPE;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
#endif
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

int tw__crc32c_hw_available(void)
{
#ifdef TW_HAVE_SSE42_PATH
    return __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    return 0;
#endif
}

uint32_t tw__crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
#ifdef TW_HAVE_SSE42_PATH
    if (tw__crc32c_hw_available())
        return crc32c_sse42(crc, buf, len);
#endif
    return tw__crc32c_sw(crc, buf, len);
}

uint32_t tw__crc32c(uint32_t crc, const void *buf, size_t len)
{
    /* __builtin_cpu_supports reads a table filled by a constructor: cheap,
     * so no function pointer cache (and no race) is needed. */
    return tw__crc32c_hw(crc, buf, len);
}
