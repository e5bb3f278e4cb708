/*
 * The one monotonic clock of tensorwire (CLOCK_MONOTONIC). Every deadline,
 * latency and age inside the library and the server is measured with it, so
 * values taken in different modules compare directly. Thread-safe, no state.
 */
#ifndef TW_COMMON_CLOCK_H
#define TW_COMMON_CLOCK_H

#include <stdint.h>

/* Nanoseconds since an arbitrary start (boot), never going backwards. */
uint64_t tw__now_ns(void);

/* The same clock in milliseconds. */
static inline uint64_t tw__now_ms(void)
{
    return tw__now_ns() / 1000000u;
}

#endif
