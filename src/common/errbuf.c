#include "common/errbuf.h"

#include <stdio.h>

void tw__errbuf_vset(char *buf, size_t cap, const char *fmt, va_list ap)
{
    if (!buf || cap == 0)
        return;
    vsnprintf(buf, cap, fmt, ap);
}

void tw__errbuf_set(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw__errbuf_vset(buf, cap, fmt, ap);
    va_end(ap);
}
