/* tensorwired configuration: sizes, durations, options, config files. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/config.h"
#include "server/log.h"
#include "tw_test.h"

static void test_seconds(void)
{
    uint64_t ms;
    TW_ASSERT_OK(tw__parse_seconds("10", &ms));
    TW_ASSERT_EQ_U64(ms, 10000);
    TW_ASSERT_OK(tw__parse_seconds("0.25", &ms));
    TW_ASSERT_EQ_U64(ms, 250);
    TW_ASSERT_OK(tw__parse_seconds("1.5s", &ms));
    TW_ASSERT_EQ_U64(ms, 1500);
    TW_ASSERT_ERR(tw__parse_seconds("1.", &ms), TW_EINVAL);
    TW_ASSERT_ERR(tw__parse_seconds("abc", &ms), TW_EINVAL);
    TW_ASSERT_ERR(tw__parse_seconds("-3", &ms), TW_EINVAL);
}

static void test_args_and_file(void)
{
    struct tw_srv_config c;
    char err[256];
    char path[] = "/tmp/tw-config-XXXXXX";
    int fd = mkstemp(path);
    TW_ASSERT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# tensorwired test config\n"
               "listen = [::1]:9000\n"
               "capacity = 2Gi   # trailing comment\n"
               "max_inflight = 32\n"
               "\n"
               "log-level = debug\n");
    fclose(f);
    tw__srv_config_defaults(&c);
    TW_ASSERT_STR_EQ(c.listen, "127.0.0.1:7450");
    TW_ASSERT(c.capacity > 0 && c.capacity == tw__srv_default_capacity());
    /* Command-line options override the file, wherever --config appears. */
    char *argv[] = {"tensorwired", "--max-inflight=8", "--config", path, "--idle-timeout",
                    "0",           "--token-file",     "/x",       NULL};
    TW_ASSERT_OK(tw__srv_config_from_args(&c, 8, argv, err, sizeof(err)));
    TW_ASSERT_STR_EQ(c.listen, "[::1]:9000");
    TW_ASSERT_EQ_U64(c.capacity, 2ull << 30);
    TW_ASSERT_EQ(c.max_inflight, 8);
    TW_ASSERT_EQ(c.log_level, TW_LOG_DEBUG);
    TW_ASSERT_EQ_U64(c.idle_timeout_ms, 0);
    TW_ASSERT_STR_EQ(c.token_file, "/x");

    char *bad1[] = {"tensorwired", "--capacity", "lots", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 3, bad1, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    char *bad2[] = {"tensorwired", "--frobnicate", "1", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 3, bad2, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT(strstr(err, "unknown option '--frobnicate'") != NULL);
    char *bad3[] = {"tensorwired", "--listen", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 2, bad3, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "'--listen' needs a value") != NULL);
    /* An unknown option without a value is unknown, not "needs a value". */
    char *bad5[] = {"tensorwired", "--foo", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 2, bad5, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT_STR_EQ(err, "unknown option '--foo'");
    char *bad6[] = {"tensorwired", "--listen", "127.0.0.1:0", "--foo", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 4, bad6, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_STR_EQ(err, "unknown option '--foo'");
    /* A flag takes no value; in a file it is "key = true". */
    tw__srv_config_defaults(&c);
    TW_ASSERT_EQ(c.allow_insecure_token_file, 0);
    char *flag[] = {"tensorwired", "--allow-insecure-token-file", "--max-inflight", "9", NULL};
    TW_ASSERT_OK(tw__srv_config_from_args(&c, 4, flag, err, sizeof(err)));
    TW_ASSERT_EQ(c.allow_insecure_token_file, 1);
    TW_ASSERT_EQ(c.max_inflight, 9);
    tw__srv_config_defaults(&c);
    TW_ASSERT_OK(tw__srv_config_set(&c, "allow_insecure_token_file", "true", err, sizeof(err)));
    TW_ASSERT_EQ(c.allow_insecure_token_file, 1);
    TW_ASSERT_ERR(tw__srv_config_set(&c, "allow-insecure-token-file", "maybe", err, sizeof(err)),
                  TW_EINVAL);
    /* A provider name libfabric does not have is a typo: refused, named. */
    TW_ASSERT_OK(tw__srv_config_set(&c, "fabric", "tcp;ofi_rxm,shm", err, sizeof(err)));
    TW_ASSERT_OK(tw__srv_config_set(&c, "fabric", "verbs", err, sizeof(err)));
    TW_ASSERT_ERR(tw__srv_config_set(&c, "fabric", "bogus", err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "unknown provider 'bogus'") != NULL);
    TW_ASSERT_ERR(tw__srv_config_set(&c, "fabric", "tcp,tpc", err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "unknown provider 'tpc'") != NULL);
    TW_ASSERT_ERR(tw__srv_config_set(&c, "fabric", "tcp,", err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    char *bad4[] = {"tensorwired", "--max-inflight", "70000", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 3, bad4, err, sizeof(err)), TW_EINVAL);

    f = fopen(path, "w");
    fprintf(f, "listen 127.0.0.1:1\n");
    fclose(f);
    TW_ASSERT_ERR(tw__srv_config_load_file(&c, path, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    unlink(path);
    TW_ASSERT_ERR(tw__srv_config_load_file(&c, path, err, sizeof(err)), -ENOENT);
}

/* --rdma-min-bytes: default 1 MiB (64 KiB on shm while not set), sizes with suffixes, 0 allowed
 * (RDMA at every size), junk rejected with the option's name; config file key. */
static void test_rdma_min_bytes(void)
{
    struct tw_srv_config c;
    char err[256];
    tw__srv_config_defaults(&c);
    TW_ASSERT_EQ_U64(c.rdma_min_bytes, 1u << 20);
    TW_ASSERT_EQ(c.rdma_min_bytes_set, 0); /* shm connections: their own default */
    char *a1[] = {"tensorwired", "--rdma-min-bytes", "256Ki", NULL};
    TW_ASSERT_OK(tw__srv_config_from_args(&c, 3, a1, err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.rdma_min_bytes, 256u << 10);
    TW_ASSERT_EQ(c.rdma_min_bytes_set, 1); /* for every provider, shm too */
    char *a2[] = {"tensorwired", "--rdma-min-bytes=0", NULL};
    TW_ASSERT_OK(tw__srv_config_from_args(&c, 2, a2, err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.rdma_min_bytes, 0);
    TW_ASSERT_OK(tw__srv_config_set(&c, "rdma_min_bytes", "4M", err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.rdma_min_bytes, 4000000);
    TW_ASSERT_OK(tw__srv_config_set(&c, "rdma-min-bytes", "12345", err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.rdma_min_bytes, 12345);
    const char *bad[] = {"", "-1", "1Q", "lots", "1Mix"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        TW_ASSERT_ERR(tw__srv_config_set(&c, "rdma-min-bytes", bad[i], err, sizeof(err)),
                      TW_EINVAL);
        TW_ASSERT(strstr(err, "rdma-min-bytes") != NULL);
        TW_ASSERT_EQ_U64(c.rdma_min_bytes, 12345); /* unchanged */
    }
    fprintf(stderr, "  %s\n", err);
    char *a3[] = {"tensorwired", "--rdma-min-bytes", NULL};
    TW_ASSERT_ERR(tw__srv_config_from_args(&c, 2, a3, err, sizeof(err)), TW_EINVAL);
}

int main(void)
{
    TW_RUN(test_seconds);
    TW_RUN(test_args_and_file);
    TW_RUN(test_rdma_min_bytes);
    TW_DONE();
}
