#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum tw_log_level current_level = TW_LOG_INFO;
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

void tw__log(enum tw_log_level level, const char *fmt, ...)
{
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000L, level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines from a crash or from tests reading stderr
     * never interleave mid-line. */
    fwrite(line, 1, len, stderr);
    fflush(stderr);
}
