/*
 * tensorwired logging: one line per event on stderr,
 *   2026-11-29T11:20:00.123Z info  conn 7 127.0.0.1:50312: accepted
 * Levels error < warn < info < debug; lines above the configured level are
 * dropped before formatting. Process-wide state: the daemon is one thread.
 */
#ifndef TW_SERVER_LOG_H
#define TW_SERVER_LOG_H

enum tw_log_level { TW_LOG_ERROR = 0, TW_LOG_WARN, TW_LOG_INFO, TW_LOG_DEBUG };

void tw__log_set_level(enum tw_log_level level);
enum tw_log_level tw__log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -1 when unknown. */
int tw__log_level_parse(const char *s);
int tw__log_enabled(enum tw_log_level level);

void tw__log(enum tw_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TW_LOG(level, ...)                                                                         \
    do {                                                                                           \
        if (tw__log_enabled(level))                                                                \
            tw__log(level, __VA_ARGS__);                                                           \
    } while (0)
#define TW_LOGE(...) TW_LOG(TW_LOG_ERROR, __VA_ARGS__)
#define TW_LOGW(...) TW_LOG(TW_LOG_WARN, __VA_ARGS__)
#define TW_LOGI(...) TW_LOG(TW_LOG_INFO, __VA_ARGS__)
#define TW_LOGD(...) TW_LOG(TW_LOG_DEBUG, __VA_ARGS__)

#endif
