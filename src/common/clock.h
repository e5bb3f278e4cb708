/*
 * The one monotonic clock of tensorwire (CLOCK_MONOTONIC). Every deadline,
 * latency and age inside the library and the server is measured with it, so
 * values taken in different modules compare directly. Thread-safe, no state.
 * Inline: it runs on hot paths (per completion, per lookup in benchmarks),
 * where a call into another file would be part of what is measured.
 */
#ifndef TW_COMMON_CLOCK_H
#define TW_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds since an arbitrary start (boot), never going backwards.
 * clock_gettime cannot fail for CLOCK_MONOTONIC and a valid pointer. */
static inline uint64_t tw__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The same clock in milliseconds. */
static inline uint64_t tw__now_ms(void)
{
    return tw__now_ns() / 1000000u;
}

#endif
