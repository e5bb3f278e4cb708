/*
 * Text the CLI shows: names made safe for a terminal, JSON strings, byte
 * counts. Pure formatting, no I/O beyond the FILE * a caller passes.
 */
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"

/* Control characters a terminal would act on: C0, DEL, and C1 (U+0080..
 * U+009F, encoded C2 80..C2 9F). Returns the byte length of the control at
 * s (1 or 2), or 0. */
static size_t control_len(const unsigned char *s)
{
    if (s[0] < 0x20 || s[0] == 0x7f)
        return 1;
    if (s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f)
        return 2;
    return 0;
}

const char *tw_cli_shown(const char *s, char *buf, size_t cap, size_t max_shown)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = 0, total = strlen(s);
    if (cap < 32)
        return "";
    for (; *p; p++) {
        size_t cl = control_len(p);
        if ((size_t)(p - (const unsigned char *)s) >= max_shown || n + 5 + 24 >= cap) {
            /* Cut at a character boundary, then say how much was cut. */
            while (n > 0 && ((unsigned char)buf[n - 1] & 0xc0) == 0x80)
                n--;
            if (n > 0 && ((unsigned char)buf[n - 1] & 0xc0) == 0xc0)
                n--;
            snprintf(buf + n, cap - n, "...(%zu bytes)", total);
            return buf;
        }
        if (cl) {
            n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", p[0]);
            if (cl == 2) /* both bytes of a C1 control: \xc2\x9b */
                n += (size_t)snprintf(buf + n, cap - n, "\\x%02x", *++p);
            continue;
        }
        if (*p == '\\') {
            buf[n++] = '\\';
            buf[n++] = '\\';
            continue;
        }
        buf[n++] = (char)*p;
    }
    buf[n] = '\0';
    return buf;
}

void tw_cli_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else if (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)
            fprintf(f, "\\u%04x", *++p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

const char *tw_cli_bytes(uint64_t n, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    unsigned u = 0;
    while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}
