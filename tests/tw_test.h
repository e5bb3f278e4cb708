/*
 * Minimal test harness. Each tests/unit/test_*.c is one executable and one
 * CTest test (own process, CTest timeout). TW_RUN(fn) runs a case and prints
 * its name; a failed assertion prints file:line, the expression and both
 * values, then exits 1 so the rest of the file does not run on broken state.
 */
#ifndef TW_TEST_H
#define TW_TEST_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorwire/error.h"
#include "tw_fill.h" /* tw_test_fill */

static int tw_test_cases_run;

/* CLOCK_MONOTONIC in ns for tests that link only the public library (the
 * library's own clock, src/common/clock.h, is internal). */
static inline uint64_t tw_test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define TW_FAIL(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                                      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

#define TW_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TW_FAIL("%s", #cond);                                                                  \
    } while (0)

#define TW_ASSERT_EQ(a, b)                                                                         \
    do {                                                                                           \
        long long tw_a_ = (long long)(a), tw_b_ = (long long)(b);                                  \
        if (tw_a_ != tw_b_)                                                                        \
            TW_FAIL("%s == %s: %lld != %lld", #a, #b, tw_a_, tw_b_);                               \
    } while (0)

#define TW_ASSERT_EQ_U64(a, b)                                                                     \
    do {                                                                                           \
        uint64_t tw_a_ = (uint64_t)(a), tw_b_ = (uint64_t)(b);                                     \
        if (tw_a_ != tw_b_)                                                                        \
            TW_FAIL("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, tw_a_, tw_b_);                    \
    } while (0)

/* Compares two tensorwire error codes and prints them by name. */
#define TW_ASSERT_ERR(a, b)                                                                        \
    do {                                                                                           \
        int tw_a_ = (int)(a), tw_b_ = (int)(b);                                                    \
        if (tw_a_ != tw_b_)                                                                        \
            TW_FAIL("%s == %s: %d (%s) != %d (%s)", #a, #b, tw_a_, tw_strerror_name(tw_a_), tw_b_, \
                    tw_strerror_name(tw_b_));                                                      \
    } while (0)

#define TW_ASSERT_OK(a) TW_ASSERT_ERR(a, 0)

#define TW_ASSERT_MEM_EQ(a, b, n)                                                                  \
    do {                                                                                           \
        const unsigned char *tw_pa_ = (const unsigned char *)(a);                                  \
        const unsigned char *tw_pb_ = (const unsigned char *)(b);                                  \
        size_t tw_n_ = (size_t)(n);                                                                \
        for (size_t tw_i_ = 0; tw_i_ < tw_n_; tw_i_++)                                             \
            if (tw_pa_[tw_i_] != tw_pb_[tw_i_])                                                    \
                TW_FAIL("%s and %s differ at byte %zu of %zu: 0x%02x != 0x%02x", #a, #b, tw_i_,    \
                        tw_n_, tw_pa_[tw_i_], tw_pb_[tw_i_]);                                      \
    } while (0)

#define TW_ASSERT_STR_EQ(a, b)                                                                     \
    do {                                                                                           \
        const char *tw_a_ = (a), *tw_b_ = (b);                                                     \
        if (strcmp(tw_a_, tw_b_) != 0)                                                             \
            TW_FAIL("%s == %s: \"%s\" != \"%s\"", #a, #b, tw_a_, tw_b_);                           \
    } while (0)

#define TW_RUN(fn)                                                                                 \
    do {                                                                                           \
        fprintf(stderr, "case %s\n", #fn);                                                         \
        fn();                                                                                      \
        tw_test_cases_run++;                                                                       \
    } while (0)

#define TW_DONE()                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "%d cases passed\n", tw_test_cases_run);                                   \
        return 0;                                                                                  \
    } while (0)

/* A test that cannot run here (no GPU, no provider) exits 77 with a reason;
 * CMake marks 77 as SKIP_RETURN_CODE. */
#define TW_SKIP(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "SKIP: ");                                                                 \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        exit(77);                                                                                  \
    } while (0)

#endif
