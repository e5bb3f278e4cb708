/* tw_parse_size: the one size syntax of tensorwired and the CLI
 * (include/tensorwire/size.h), through the public header only. */
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

static void test_accepts(void)
{
    static const struct {
        const char *text;
        uint64_t value;
    } ok[] = {
        {"0", 0},
        {"1234", 1234},
        {"4096", 4096},
        {"100B", 100},
        {"100b", 100},
        {"4K", 4000},
        {"4k", 4000},
        {"64K", 64000},
        {"5MB", 5000000},
        {"2M", 2000000},
        {"3G", 3000000000ull},
        {"1T", 1000000000000ull},
        {"4Ki", 4096},
        {"4KiB", 4096},
        {"4kib", 4096},
        {"256Mi", 256ull << 20},
        {"5MiB", 5ull << 20},
        {"2Gi", 2ull << 30},
        {"1Ti", 1ull << 40},
        {"0Ti", 0},
        {"18446744073709551615", UINT64_MAX},
        {"16777215Ti", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 7;
        fprintf(stderr, "  %s\n", ok[i].text);
        TW_ASSERT_OK(tw_parse_size(ok[i].text, &v));
        TW_ASSERT_EQ_U64(v, ok[i].value);
    }
}

static void test_rejects(void)
{
    static const char *const bad[] = {
        "",
        "K",
        "G",
        "Ki",
        "4X",
        "1Gix",
        "4KI",
        "4iB",
        "4BB",
        "-1",
        "+1",
        " 1",
        "1 ",
        "1.5K",
        "0x10",
        "4Kb ",
        "4 K",
        "99999999999999999999", /* above UINT64_MAX */
        "18446744073709551616", /* UINT64_MAX + 1 */
        "20000000Ti",           /* product overflows */
        "17179869184Gi",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 7;
        fprintf(stderr, "  '%s'\n", bad[i]);
        TW_ASSERT_ERR(tw_parse_size(bad[i], &v), TW_EINVAL);
        TW_ASSERT_EQ_U64(v, 7); /* untouched on failure */
    }
    uint64_t v;
    TW_ASSERT_ERR(tw_parse_size(NULL, &v), TW_EINVAL);
}

int main(void)
{
    TW_RUN(test_accepts);
    TW_RUN(test_rejects);
    TW_DONE();
}
