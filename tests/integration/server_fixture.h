/*
 * Starts a real tensorwired for a test: $TW_BUILD_DIR/tensorwired --listen
 * 127.0.0.1:0 plus extra options, reads its "listening on HOST:PORT" line
 * from its stdout (10 s at most), and stops it with SIGTERM (SIGKILL after
 * 5 s). Header-only (static functions) so each test executable includes it.
 *
 * TW_TEST_FABRIC=tcp|shm (and TW_TEST_PUSH=always|never|auto) runs the same
 * tests over the RDMA data plane: the server gets --fabric, --push and
 * --rdma-min-bytes 0, and clients whose options come from
 * tw_test_client_options() ask for that provider and policy, so every get
 * and put of a non-empty tensor moves by RDMA (cmake/parts/client.cmake
 * registers those variants).
 */
#ifndef TW_TEST_SERVER_FIXTURE_H
#define TW_TEST_SERVER_FIXTURE_H

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tensorwire/client.h"
#include "tw_test.h"

struct tw_test_server {
    pid_t pid;
    int out_fd;
    char addr[64];
};

static void tw_test_server_path(char *buf, size_t cap, const char *exe)
{
    const char *b = getenv("TW_BUILD_DIR");
    snprintf(buf, cap, "%s/%s", b && *b ? b : ".", exe);
}

/* argv_extra: NULL-terminated extra options. Exits 77 (skip) when the
 * server binary is missing, 1 when it does not start. */
static void tw_test_server_start(struct tw_test_server *s, const char *const *argv_extra)
{
    char exe[1024];
    const char *argv[32];
    int p[2], n = 0;
    tw_test_server_path(exe, sizeof(exe), "tensorwired");
    if (access(exe, X_OK) != 0) {
        fprintf(stderr, "SKIP: %s not built\n", exe);
        exit(77);
    }
    argv[n++] = exe;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (fabric && *fabric) {
        const char *push = getenv("TW_TEST_PUSH");
        argv[n++] = "--fabric";
        argv[n++] = fabric;
        argv[n++] = "--push";
        argv[n++] = push && *push ? push : "auto";
        argv[n++] = "--rdma-min-bytes";
        argv[n++] = "0";
    }
    for (int i = 0; argv_extra && argv_extra[i] && n < 31; i++)
        argv[n++] = argv_extra[i];
    argv[n] = NULL;
    if (pipe(p) != 0) {
        perror("pipe");
        exit(1);
    }
    s->pid = fork();
    if (s->pid < 0) {
        perror("fork");
        exit(1);
    }
    if (s->pid == 0) {
        /* A test that fails exits at once: take the server with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], 1);
        close(p[0]);
        close(p[1]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    s->out_fd = p[0];
    char line[4096];
    size_t len = 0;
    uint64_t t0 = tw_test_now_ns();
    for (;;) {
        struct pollfd pf = {.fd = s->out_fd, .events = POLLIN};
        int left = 10000 - (int)((tw_test_now_ns() - t0) / 1000000);
        if (left <= 0 || poll(&pf, 1, left) <= 0) {
            fprintf(stderr, "tensorwired printed no 'listening on' line within 10 s\n");
            kill(s->pid, SIGKILL);
            exit(1);
        }
        ssize_t r = read(s->out_fd, line + len, sizeof(line) - 1 - len);
        if (r <= 0) {
            fprintf(stderr, "tensorwired exited before listening\n");
            exit(1);
        }
        len += (size_t)r;
        line[len] = '\0';
        const char *l = strstr(line, "listening on ");
        if (l && strchr(l, '\n')) {
            l += strlen("listening on ");
            size_t k = 0;
            while (l[k] && l[k] != '\n' && l[k] != ' ' && k + 1 < sizeof(s->addr)) {
                s->addr[k] = l[k];
                k++;
            }
            s->addr[k] = '\0';
            return;
        }
        if (len + 1 >= sizeof(line))
            len = 0;
    }
}

/* Client options for tests: the defaults, plus the RDMA data plane of
 * TW_TEST_FABRIC / TW_TEST_PUSH when set (see the top of this file). */
static void tw_test_client_options(struct tw_client_options *o)
{
    tw_client_options_init(o);
    const char *fabric = getenv("TW_TEST_FABRIC");
    if (fabric && *fabric) {
        const char *push = getenv("TW_TEST_PUSH");
        o->fabric = fabric;
        o->push = push && strcmp(push, "always") == 0  ? TW_PUSH_ALWAYS
                  : push && strcmp(push, "never") == 0 ? TW_PUSH_NEVER
                                                       : TW_PUSH_AUTO;
        o->rdma_min_bytes = 0;
    }
}

/* The data plane a test expects for a non-empty get or put: "rdma push"
 * with TW_TEST_PUSH=always, "rdma pull" with another TW_TEST_FABRIC run,
 * "inline" otherwise (a prefix of tw_client_data_plane()). */
static inline const char *tw_test_expected_plane(void)
{
    const char *fabric = getenv("TW_TEST_FABRIC"), *push = getenv("TW_TEST_PUSH");
    if (!fabric || !*fabric)
        return "inline";
    return push && strcmp(push, "always") == 0 ? "rdma push" : "rdma pull";
}

static int tw_test_server_stop(struct tw_test_server *s)
{
    int status = 0;
    if (s->pid <= 0)
        return 0;
    kill(s->pid, SIGTERM);
    for (int i = 0; i < 500; i++) {
        pid_t w = waitpid(s->pid, &status, WNOHANG);
        if (w == s->pid)
            goto out_close;
        usleep(10000);
    }
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
out_close:
    close(s->out_fd);
    s->pid = 0;
    return status;
}

/* Writes text to a fresh file under /tmp; path receives its name. */
__attribute__((unused)) static void tw_test_write_file(char *path, size_t cap, const char *text)
{
    snprintf(path, cap, "/tmp/tw-test-%d-XXXXXX", (int)getpid());
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        perror("token file");
        exit(1);
    }
    close(fd);
}

/* One of the server's STATS counters; `absent` when it has no such key. */
static inline uint64_t tw_test_stat(tw_client *c, const char *key, uint64_t absent)
{
    struct tw_stat_entry *st;
    size_t n;
    uint64_t v = absent;
    TW_ASSERT_OK(tw_stats(c, &st, &n));
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].key, key) == 0)
            v = st[i].value;
    tw_stats_free(st);
    return v;
}

/* A connection to s with options o; fails the test when it cannot
 * connect. */
static inline tw_client *tw_test_connect_opts(const struct tw_test_server *s,
                                              const struct tw_client_options *o)
{
    tw_client *c = NULL;
    char err[256];
    int rc = tw_client_connect_error(s->addr, o, &c, err, sizeof(err));
    if (rc)
        TW_FAIL("connect %s: %s: %s", s->addr, tw_strerror_name(rc), err);
    return c;
}

/* A connection to s with tw_test_client_options(). */
static inline tw_client *tw_test_connect(const struct tw_test_server *s)
{
    struct tw_client_options o;
    tw_test_client_options(&o);
    return tw_test_connect_opts(s, &o);
}

#endif
