/*
 * tensorwired logging: one line per event on stderr,
 *   2026-11-29T11:20:00.123Z info  conn 7 127.0.0.1:50312: closed: ...
 * or with --log-format json one JSON object per line,
 *   {"ts":"2026-11-29T11:20:00.123Z","level":"info","msg":"conn 7 ..."}
 * Levels error < warn < info < debug; lines above the configured level are
 * dropped before formatting. Process-wide state: the daemon is one thread.
 *
 * What goes where (docs/server.md "Logs"): info has one line per connection
 * (when it closes, with its totals) and one per failed transfer; requests
 * that fail for the client's own reasons (NOT_FOUND, INVALID_ARGUMENT, ...)
 * and per-request detail are debug; warn and error are for the operator.
 */
#ifndef TW_SERVER_LOG_H
#define TW_SERVER_LOG_H

#include <stdint.h>

enum tw_log_level { TW_LOG_ERROR = 0, TW_LOG_WARN, TW_LOG_INFO, TW_LOG_DEBUG };

void tw__log_set_level(enum tw_log_level level);
enum tw_log_level tw__log_get_level(void);
/* "error", "warn", "info", "debug" -> level; -1 when unknown. */
int tw__log_level_parse(const char *s);
int tw__log_enabled(enum tw_log_level level);

enum tw_log_format { TW_LOG_TEXT = 0, TW_LOG_JSON = 1 };
void tw__log_set_format(enum tw_log_format format);
/* "text", "json" -> format; -1 when unknown. */
int tw__log_format_parse(const char *s);

/*
 * The level at which a request that failed with wire error `code` is
 * logged (a pure function): INTERNAL is an error; a transfer that failed
 * on its way (TIMEOUT, CHECKSUM_MISMATCH, CANCELLED, DEVICE_UNAVAILABLE,
 * CAPACITY_EXCEEDED, SHUTTING_DOWN, BUSY) is info; the client's own
 * mistakes (NOT_FOUND, INVALID_ARGUMENT, ...) are debug.
 */
enum tw_log_level tw__log_level_of_request_error(uint32_t code);

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
