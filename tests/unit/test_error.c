#include <errno.h>

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

int main(void)
{
    TW_RUN(wire_codes_map_one_to_one);
    TW_RUN(errno_passes_through);
    TW_RUN(unknown_codes_never_null);
    TW_RUN(verdicts_are_a_range_with_names);
    TW_DONE();
}
