/*
 * Reads a golden vector tests/vectors/NAME.hex (the spec's format: lines
 * starting with '#' are comments, other lines hex bytes and whitespace) into
 * buf (cap bytes, owned by the caller); returns the byte count. Skips the
 * test when TW_SOURCE_DIR is unset (outside ctest); fails it on a missing
 * file, a bad character, an odd digit count on a line, or overflow of buf.
 */
#ifndef TW_VECTORS_H
#define TW_VECTORS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tw_test.h"

static size_t tw_load_vector(const char *name, uint8_t *buf, size_t cap)
{
    const char *root = getenv("TW_SOURCE_DIR");
    char path[1024], line[1024];
    size_t n = 0;
    if (!root)
        TW_SKIP("TW_SOURCE_DIR not set (run through ctest)");
    snprintf(path, sizeof(path), "%s/tests/vectors/%s.hex", root, name);
    FILE *f = fopen(path, "r");
    if (!f)
        TW_FAIL("cannot open %s", path);
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#')
            continue;
        int hi = -1;
        for (const char *c = line; *c; c++) {
            int v;
            if (*c >= '0' && *c <= '9')
                v = *c - '0';
            else if (*c >= 'a' && *c <= 'f')
                v = *c - 'a' + 10;
            else if (*c >= 'A' && *c <= 'F')
                v = *c - 'A' + 10;
            else if (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r')
                continue;
            else
                TW_FAIL("%s: bad character '%c'", path, *c);
            if (hi < 0) {
                hi = v;
            } else {
                TW_ASSERT(n < cap);
                buf[n++] = (uint8_t)(hi << 4 | v);
                hi = -1;
            }
        }
        if (hi >= 0)
            TW_FAIL("%s: odd number of hex digits on a line", path);
    }
    fclose(f);
    return n;
}

#endif
