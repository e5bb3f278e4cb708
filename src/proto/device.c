/* Device tag parsing and formatting (device.h). */
#include "proto/device.h"

#include <stdio.h>
#include <string.h>

#include "proto/proto.h"
#include "tensorwire/error.h"

static int tag_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':' || c == '.' ||
           c == '-';
}

int tw__device_parse(const char *s, size_t len, struct tw_device *out)
{
    if (!s || len == 0 || len > TW_MAX_DEVICE_TAG_LEN)
        return TW_EBAD_DEVICE_TAG;
    for (size_t i = 0; i < len; i++)
        if (!tag_char_ok(s[i]))
            return TW_EBAD_DEVICE_TAG;
    if (len == 3 && memcmp(s, "cpu", 3) == 0) {
        *out = (struct tw_device){.type = TW_DEVICE_CPU, .ordinal = -1};
        return 0;
    }
    if (len < 4 || memcmp(s, "cuda", 4) != 0)
        return TW_EDEVICE;
    /* "cuda" + ':' + 1..3 digits, no leading zero, at most 255. Checking
     * the length first keeps the accumulator far from overflow. */
    if (len < 6 || len > 8 || s[4] != ':')
        return TW_EBAD_DEVICE_TAG;
    if (len > 6 && s[5] == '0')
        return TW_EBAD_DEVICE_TAG;
    int n = 0;
    for (size_t i = 5; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return TW_EBAD_DEVICE_TAG;
        n = n * 10 + (s[i] - '0');
    }
    if (n > TW_DEVICE_MAX_CUDA_ORDINAL)
        return TW_EBAD_DEVICE_TAG;
    *out = (struct tw_device){.type = TW_DEVICE_CUDA, .ordinal = n};
    return 0;
}

int tw__device_parse_str(const char *s, struct tw_device *out)
{
    if (!s)
        return TW_EBAD_DEVICE_TAG;
    return tw__device_parse(s, strnlen(s, TW_MAX_DEVICE_TAG_LEN + 1), out);
}

int tw__device_format(const struct tw_device *d, char *buf, size_t len)
{
    int n;
    switch (d->type) {
    case TW_DEVICE_CPU:
        n = snprintf(buf, len, "cpu");
        break;
    case TW_DEVICE_CUDA:
        if (d->ordinal < 0 || d->ordinal > TW_DEVICE_MAX_CUDA_ORDINAL)
            return TW_EINVAL;
        n = snprintf(buf, len, "cuda:%d", d->ordinal);
        break;
    default:
        return TW_EINVAL;
    }
    if (n < 0 || (size_t)n >= len)
        return TW_EINVAL;
    return n;
}

int tw__device_equal(const struct tw_device *a, const struct tw_device *b)
{
    if (a->type != b->type)
        return 0;
    return a->type == TW_DEVICE_CPU || a->ordinal == b->ordinal;
}
