/* tensorwired logging: which level a failed request is logged at, and
 * --log-format json lines (escaping of peer-supplied text). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/config.h"
#include "server/log.h"
#include "tensorwire/error.h"
#include "tw_test.h"

static void test_request_error_levels(void)
{
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_NOT_FOUND), TW_LOG_DEBUG);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_INVALID_ARGUMENT), TW_LOG_DEBUG);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_PROTOCOL_ERROR), TW_LOG_DEBUG);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_TIMEOUT), TW_LOG_INFO);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_CHECKSUM_MISMATCH), TW_LOG_INFO);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_CANCELLED), TW_LOG_INFO);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_CAPACITY_EXCEEDED), TW_LOG_INFO);
    TW_ASSERT_EQ(tw__log_level_of_request_error(TW_WIRE_INTERNAL), TW_LOG_ERROR);
    TW_ASSERT_EQ(tw__log_level_of_request_error(999), TW_LOG_DEBUG);
}

static void test_format_parse(void)
{
    struct tw_srv_config c;
    char err[256];
    tw__srv_config_defaults(&c);
    TW_ASSERT_EQ(c.log_format, TW_LOG_TEXT);
    TW_ASSERT_OK(tw__srv_config_set(&c, "log-format", "json", err, sizeof(err)));
    TW_ASSERT_EQ(c.log_format, TW_LOG_JSON);
    TW_ASSERT(tw__srv_config_set(&c, "log-format", "xml", err, sizeof(err)) < 0);
    TW_ASSERT(strstr(err, "'xml'") != NULL);
    TW_ASSERT_EQ(tw__log_format_parse("text"), TW_LOG_TEXT);
    TW_ASSERT_EQ(tw__log_format_parse("json"), TW_LOG_JSON);
    TW_ASSERT_EQ(tw__log_format_parse("JSON"), -1);
    TW_ASSERT_EQ(tw__log_format_parse(""), -1);
}

/* Runs one tw__log() call with stderr sent to a file; returns the line. */
static void capture(enum tw_log_level level, const char *msg, char *out, size_t cap)
{
    char path[] = "/tmp/tw-log-test.XXXXXX";
    int fd = mkstemp(path);
    TW_ASSERT(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    TW_ASSERT(saved >= 0);
    TW_ASSERT(dup2(fd, 2) == 2);
    tw__log(level, "%s", msg);
    fflush(stderr);
    TW_ASSERT(dup2(saved, 2) == 2);
    close(saved);
    ssize_t n = pread(fd, out, cap - 1, 0);
    TW_ASSERT(n > 0);
    out[n] = '\0';
    close(fd);
    unlink(path);
}

static void test_json_lines(void)
{
    char line[4096];
    tw__log_set_format(TW_LOG_JSON);
    capture(TW_LOG_INFO, "plain", line, sizeof(line));
    TW_ASSERT(strncmp(line, "{\"ts\":\"", 7) == 0);
    TW_ASSERT(strstr(line, "\",\"level\":\"info\",\"msg\":\"plain\"}\n") != NULL);

    /* Quotes, backslashes, control characters, valid UTF-8 kept, invalid
     * bytes replaced. */
    capture(TW_LOG_WARN, "a\"b\\c\td\ne\x1b[0m \xc3\xa9 \xff\xc3", line, sizeof(line));
    const char *want = "\"level\":\"warn\",\"msg\":\"a\\\"b\\\\c\\u0009d\\u000ae\\u001b[0m "
                       "\xc3\xa9 \\ufffd\\ufffd\"}\n";
    if (!strstr(line, want))
        TW_FAIL("json line\n  %s  lacks\n  %s", line, want);
    TW_ASSERT(strchr(line, '\n') == line + strlen(line) - 1);

    /* An over-long message is cut, and the line is still closed. */
    char big[3000];
    memset(big, '"', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    capture(TW_LOG_INFO, big, line, sizeof(line));
    size_t n = strlen(line);
    TW_ASSERT(n < 2100);
    TW_ASSERT(strcmp(line + n - 3, "\"}\n") == 0);
    TW_ASSERT(line[n - 4] == '"' && line[n - 5] == '\\');

    tw__log_set_format(TW_LOG_TEXT);
    capture(TW_LOG_INFO, "plain", line, sizeof(line));
    TW_ASSERT(strstr(line, "Z info  plain\n") != NULL);
}

int main(void)
{
    TW_RUN(test_request_error_levels);
    TW_RUN(test_format_parse);
    TW_RUN(test_json_lines);
    TW_DONE();
}
