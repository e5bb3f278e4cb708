#include <errno.h>

#include "proto/proto.h"
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

static void wire_codes_map_one_to_one(void)
{
    for (int c = 1; c <= TW_WIRE_ERROR_MAX; c++) {
        int err = TW_ERR_FROM_WIRE(c);
        TW_ASSERT(strcmp(tw_strerror_name(err), "UNKNOWN") != 0);
        TW_ASSERT_EQ(-err - TW_WIRE_ERROR_BASE, c);
    }
    TW_ASSERT_STR_EQ(tw_strerror_name(TW_ENOTFOUND), "NOT_FOUND");
    TW_ASSERT_STR_EQ(tw_strerror_name(TW_EDEVICE), "DEVICE_UNAVAILABLE");
}

static void errno_passes_through(void)
{
    TW_ASSERT_STR_EQ(tw_strerror_name(-ECONNREFUSED), "ECONNREFUSED");
    TW_ASSERT_STR_EQ(tw_strerror(-ENOMEM), strerror(ENOMEM));
}

static void unknown_codes_never_null(void)
{
    TW_ASSERT_STR_EQ(tw_strerror(-99999), "unknown error");
    TW_ASSERT_STR_EQ(tw_strerror_name(12345), "UNKNOWN");
    TW_ASSERT_STR_EQ(tw_version(), TW_VERSION_STRING);
}

/* Local verdicts are internal codes; the public header promises their
 * range and their names. */
static void verdicts_are_a_range_with_names(void)
{
    TW_ASSERT(TW_ERR_IS_VERDICT(-1100));
    TW_ASSERT(TW_ERR_IS_VERDICT(-1199));
    TW_ASSERT(!TW_ERR_IS_VERDICT(-1200));
    TW_ASSERT(!TW_ERR_IS_VERDICT(-1099));
    TW_ASSERT(!TW_ERR_IS_VERDICT(TW_EINVAL));
    TW_ASSERT(!TW_ERR_IS_VERDICT(-EINVAL));
    TW_ASSERT(!TW_ERR_IS_VERDICT(0));
    TW_ASSERT_STR_EQ(tw_strerror_name(-1101), "EBAD_MAGIC");
    TW_ASSERT_STR_EQ(tw_strerror(-1101), "bad frame magic");
    /* Argument errors are TW_EINVAL, not an errno. */
    TW_ASSERT_ERR(tw_dtype_from_string("no-such-dtype"), TW_EINVAL);
    TW_ASSERT_ERR(tw_tensor_desc_bytes(NULL, NULL), TW_EINVAL);
    TW_ASSERT_EQ(tw_client_is_connected(NULL), 0);
}

/* Codes a peer sends (ERROR, RDMA_DONE) map like ours inside 1..99 and to
 * INTERNAL outside, without computing TW_ERR_FROM_WIRE of a huge u32 (the
 * session fuzzer's overflow: fuzz/corpus/fuzz_server_session/
 * error_code_overflow). */
static void peer_codes_map_without_overflow(void)
{
    TW_ASSERT_EQ(tw__err_from_peer(TW_WIRE_NOT_FOUND), TW_ENOTFOUND);
    TW_ASSERT_EQ(tw__err_from_peer(TW_WIRE_CANCELLED), TW_ERR_FROM_WIRE(TW_WIRE_CANCELLED));
    TW_ASSERT_EQ(tw__err_from_peer(99), TW_ERR_FROM_WIRE(99));
    const uint32_t outside[] = {0, 100, 0x7ffffffdu, 0x80000000u, 0xffffffffu};
    for (size_t i = 0; i < sizeof(outside) / sizeof(outside[0]); i++)
        TW_ASSERT_EQ(tw__err_from_peer(outside[i]), TW_EINTERNAL);
}

int main(void)
{
    TW_RUN(wire_codes_map_one_to_one);
    TW_RUN(errno_passes_through);
    TW_RUN(unknown_codes_never_null);
    TW_RUN(verdicts_are_a_range_with_names);
    TW_RUN(peer_codes_map_without_overflow);
    TW_DONE();
}
