/* tw__now_ns: CLOCK_MONOTONIC, which cannot fail on Linux for a valid
 * clock id and a valid pointer, so there is no error to return. */
#include "common/clock.h"

#include <time.h>

uint64_t tw__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
