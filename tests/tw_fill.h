/*
 * Deterministic test bytes, the one fill of the tests (through tw_test.h)
 * and the benches (through bench/bench_util.h). Header-only and free of
 * the library and of the test harness, so programs that link only the
 * public library can use it.
 */
#ifndef TW_FILL_H
#define TW_FILL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* xorshift64, eight bytes a step: differs with seed and position, so a
 * wrong offset or a stale buffer shows in a comparison. */
static inline void tw_test_fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++)
        p[i] = (uint8_t)(x >> (8 * (i & 7)));
}

#endif
