#include "server/log.h"

#include "tensorwire/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum tw_log_level current_level = TW_LOG_INFO;
static enum tw_log_format current_format = TW_LOG_TEXT;
static const char *const level_names[] = {"error", "warn", "info", "debug"};

void tw__log_set_level(enum tw_log_level level)
{
    current_level = level;
}

enum tw_log_level tw__log_get_level(void)
{
    return current_level;
}

int tw__log_level_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    if (strcmp(s, "warning") == 0)
        return TW_LOG_WARN;
    return -1;
}

int tw__log_enabled(enum tw_log_level level)
{
    return level <= current_level;
}

void tw__log_set_format(enum tw_log_format format)
{
    current_format = format;
}

int tw__log_format_parse(const char *s)
{
    if (strcmp(s, "text") == 0)
        return TW_LOG_TEXT;
    if (strcmp(s, "json") == 0)
        return TW_LOG_JSON;
    return -1;
}

enum tw_log_level tw__log_level_of_request_error(uint32_t code)
{
    switch (code) {
    case TW_WIRE_INTERNAL:
        return TW_LOG_ERROR;
    case TW_WIRE_TIMEOUT:
    case TW_WIRE_CHECKSUM_MISMATCH:
    case TW_WIRE_CANCELLED:
    case TW_WIRE_DEVICE_UNAVAILABLE:
    case TW_WIRE_CAPACITY_EXCEEDED:
    case TW_WIRE_SHUTTING_DOWN:
    case TW_WIRE_BUSY:
        return TW_LOG_INFO;
    default:
        /* NOT_FOUND, INVALID_ARGUMENT, PROTOCOL_ERROR, UNAUTHORIZED,
         * UNSUPPORTED_VERSION and codes from a newer peer. */
        return TW_LOG_DEBUG;
    }
}

/* Length of the well-formed UTF-8 sequence at s (1..4), or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
    size_t n;
    unsigned lo = 0x80, hi = 0xbf;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        n = 2;
    else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        lo = s[0] == 0xe0 ? 0xa0 : 0x80;
        hi = s[0] == 0xed ? 0x9f : 0xbf;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        lo = s[0] == 0xf0 ? 0x90 : 0x80;
        hi = s[0] == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return n;
}

/* Appends s to out[*n..cap) as the inside of a JSON string; stops (without
 * splitting an escape) when full. Log messages carry peer-supplied text
 * (client names, tensor names), so control characters are escaped and a
 * byte that is not well-formed UTF-8 becomes U+FFFD: every line stays valid
 * JSON. */
static void json_escape(char *out, size_t cap, size_t *n, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        char esc[8];
        size_t k, used = 1;
        if (*s == '"' || *s == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*s;
            k = 2;
        } else if (*s < 0x20 || *s == 0x7f) {
            k = (size_t)snprintf(esc, sizeof(esc), "\\u%04x", *s);
        } else if (*s < 0x80) {
            esc[0] = (char)*s;
            k = 1;
        } else if ((used = utf8_seq_len(s)) != 0) {
            memcpy(esc, s, used);
            k = used;
        } else {
            used = 1;
            k = (size_t)snprintf(esc, sizeof(esc), "\\ufffd");
        }
        if (*n + k >= cap)
            return;
        memcpy(out + *n, esc, k);
        *n += k;
        s += used;
    }
}

void tw__log(enum tw_log_level level, const char *fmt, ...)
{
    char line[2048], msg[1600], stamp[80];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    snprintf(stamp, sizeof(stamp), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len;
    if (current_format == TW_LOG_JSON) {
        len = (size_t)snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"",
                               stamp, level_names[level]);
        /* Room for the closing quote, brace and newline. */
        json_escape(line, sizeof(line) - 3, &len, msg);
        line[len++] = '"';
        line[len++] = '}';
    } else {
        int m = snprintf(line, sizeof(line) - 1, "%s %-5s %s", stamp, level_names[level], msg);
        len = m < 0 ? 0 : (size_t)m;
        if (len > sizeof(line) - 2)
            len = sizeof(line) - 2;
    }
    line[len++] = '\n';
    /* One write per line so lines from a crash or from tests reading stderr
     * never interleave mid-line. */
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}
