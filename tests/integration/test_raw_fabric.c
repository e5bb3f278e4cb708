/*
 * The raw libfabric baseline of `tensorwire bench` (tools/raw_fabric.c)
 * really moves the bytes: fi_read brings the target's, fi_write leaves ours
 * there, at depth 1 and 16, with per-operation latencies filled. Skips (77)
 * when the provider (TW_TEST_PROVIDER) cannot be opened here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/raw_fabric.h"
#include "tw_test.h"

#define SLOT 4096u
#define SLOTS 16u

static struct tw_raw_fabric *r;
static uint8_t *mine, *theirs;

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(seed + i * 7);
}

static void test_read_brings_target_bytes(void)
{
    uint64_t lat[64], el = 0;
    fill(theirs, SLOT * SLOTS, 3);
    memset(mine, 0, SLOT * SLOTS);
    memset(lat, 0, sizeof(lat));
    TW_ASSERT_EQ(tw_raw_fabric_loop(r, 0, SLOT, 64, SLOTS, lat, &el), 0);
    TW_ASSERT(memcmp(mine, theirs, SLOT * SLOTS) == 0);
    for (int i = 0; i < 64; i++)
        TW_ASSERT(lat[i] > 0);
    TW_ASSERT(el > 0);
}

static void test_write_leaves_our_bytes(void)
{
    uint64_t el = 0;
    fill(mine, SLOT * SLOTS, 11);
    memset(theirs, 0, SLOT * SLOTS);
    TW_ASSERT_EQ(tw_raw_fabric_loop(r, 1, SLOT * SLOTS, 3, 1, NULL, &el), 0);
    TW_ASSERT(memcmp(mine, theirs, SLOT * SLOTS) == 0);
}

static void test_too_large_is_refused(void)
{
    uint64_t el = 0;
    TW_ASSERT(tw_raw_fabric_loop(r, 0, SLOT * SLOTS + 1, 1, 1, NULL, &el) < 0);
    TW_ASSERT(strstr(tw_raw_fabric_errmsg(r), "larger") != NULL);
}

int main(void)
{
    char err[256];
    mine = calloc(SLOTS, SLOT);
    theirs = calloc(SLOTS, SLOT);
    if (!mine || !theirs)
        return 1;
    if (tw_raw_fabric_open(TW_TEST_PROVIDER, mine, SLOT * SLOTS, theirs, &r, err, sizeof(err))) {
        TW_SKIP("provider %s: %s", TW_TEST_PROVIDER, err);
    }
    TW_RUN(test_read_brings_target_bytes);
    TW_RUN(test_write_leaves_our_bytes);
    TW_RUN(test_too_large_is_refused);
    tw_raw_fabric_close(r);
    free(mine);
    free(theirs);
    TW_DONE();
}
