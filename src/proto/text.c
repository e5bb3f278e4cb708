/*
 * Text rules of the protocol: UTF-8 validity, tensor names, device tags.
 *
 * Names travel between hosts and end up in logs and file systems, so the
 * rules are strict: RFC 3629 UTF-8 only (no overlong forms, which would let
 * two byte strings spell one name; no UTF-16 surrogates; nothing above
 * U+10FFFF) and no NUL, which C callers would silently truncate at.
 */
#include <string.h>

#include "proto/device.h"
#include "proto/proto.h"

int tw__utf8_valid(const uint8_t *s, size_t len)
{
    return tw__utf8_invalid_at(s, len) == len;
}

size_t tw__utf8_invalid_at(const uint8_t *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp, min;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
            min = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
            min = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
            min = 0x10000;
        } else {
            return i; /* continuation byte, C0/C1 overlong lead, or > U+10FFFF lead */
        }
        if (len - i - 1 < n)
            return i;
        for (size_t k = 1; k <= n; k++) {
            uint8_t cc = s[i + k];
            if ((cc & 0xC0) != 0x80)
                return i;
            cp = (cp << 6) | (cc & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n + 1;
    }
    return len;
}

/* A control character at s[i]: C0 (NUL included), DEL, or C1 (U+0080..
 * U+009F, whose UTF-8 is C2 80..C2 9F). Names carry none, so no terminal,
 * log line or listing can be steered by a name (docs/protocol.md §3.1). */
static int has_control(const uint8_t *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] < 0x20 || s[i] == 0x7f)
            return 1;
        if (s[i] == 0xc2 && i + 1 < len && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f)
            return 1;
    }
    return 0;
}

const char *tw__name_problem(const uint8_t *s, size_t len)
{
    if (!s || len == 0)
        return "is empty";
    if (len > TW_MAX_NAME_LEN)
        return "is longer than 1024 bytes";
    /* Printable ASCII (most names) passes in one look at each byte; the
     * two passes below are for the rest. */
    size_t i = 0;
    while (i < len && s[i] >= 0x20 && s[i] < 0x7f)
        i++;
    if (i == len)
        return NULL;
    if (!tw__utf8_valid(s, len))
        return "is not valid UTF-8";
    if (has_control(s, len))
        return "holds a control character (C0, DEL or C1)";
    return NULL;
}

int tw__name_check(const uint8_t *s, size_t len)
{
    return tw__name_problem(s, len) ? TW_EBAD_NAME : 0;
}

static int tag_char_ok(uint8_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':' || c == '.' ||
           c == '-';
}

int tw__device_tag_check(const uint8_t *s, size_t len)
{
    if (len == 0 || len > TW_MAX_DEVICE_TAG_LEN || !s)
        return TW_EBAD_DEVICE_TAG;
    for (size_t i = 0; i < len; i++)
        if (!tag_char_ok(s[i]))
            return TW_EBAD_DEVICE_TAG;
    /* Anything that starts with "cuda" names a CUDA device and must be
     * exactly "cuda:N" (proto/device.h has the one parser), so that one
     * device has one spelling. */
    if (len >= 4 && memcmp(s, "cuda", 4) == 0) {
        struct tw_device dev;
        if (tw__device_parse((const char *)s, len, &dev) != 0)
            return TW_EBAD_DEVICE_TAG;
    }
    return 0;
}
