/*
 * The tools' monotonic clock (CLOCK_MONOTONIC, ns), one copy for the CLI,
 * its bench command and the raw libfabric baseline. The library's own clock
 * (src/common/clock.h) is internal; the tools use only the public API, and
 * a clock is not worth exporting.
 */
#ifndef TW_TOOLS_CLOCK_H
#define TW_TOOLS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t tw_cli_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
