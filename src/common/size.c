/* tw_parse_size (include/tensorwire/size.h): a hand-written scan, no
 * strtoull (which would accept signs and leading space). */
#include "tensorwire/size.h"

#include <ctype.h>

int tw_parse_size(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (!s || !isdigit((unsigned char)*p))
        return TW_EINVAL;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return TW_EINVAL;
        v = v * 10 + d;
    }
    uint64_t mult = 1, base = 1000;
    int exp = 0;
    switch (*p) {
    case 'k':
    case 'K':
        exp = 1;
        break;
    case 'm':
    case 'M':
        exp = 2;
        break;
    case 'g':
    case 'G':
        exp = 3;
        break;
    case 't':
    case 'T':
        exp = 4;
        break;
    default:
        break;
    }
    if (exp > 0) {
        p++;
        if (*p == 'i') {
            base = 1024;
            p++;
        }
    }
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p)
        return TW_EINVAL;
    for (int i = 0; i < exp; i++)
        mult *= base;
    if (v != 0 && mult > UINT64_MAX / v)
        return TW_EINVAL;
    *out = v * mult;
    return 0;
}
