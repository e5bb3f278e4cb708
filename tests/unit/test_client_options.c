/*
 * struct tw_client_options across header versions (include/tensorwire/
 * client.h): a program built against an older, smaller struct must keep
 * working with this library, and the library must read and write no byte
 * beyond the caller's size.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

/* What an older header could have declared: the fields up to
 * socket_buffer_bytes, before fabric, push and rdma_min_bytes existed. */
struct old_options {
    size_t size;
    const char *token;
    const char *token_file;
    int connect_timeout_ms;
    int request_timeout_ms;
    uint32_t max_inflight;
    uint32_t max_frame;
    int checksum;
    const char *agent;
    int socket_buffer_bytes;
};

/* The old struct inside a larger buffer whose tail is garbage: the library
 * must neither read it (else fabric would be a wild pointer) nor write it. */
union old_in_buffer {
    struct old_options old;
    unsigned char bytes[sizeof(struct tw_client_options) + 64];
};

static void test_layout_is_a_prefix(void)
{
    TW_ASSERT_EQ(offsetof(struct old_options, socket_buffer_bytes),
                 offsetof(struct tw_client_options, socket_buffer_bytes));
    TW_ASSERT_EQ(offsetof(struct tw_client_options, size), 0);
    TW_ASSERT(sizeof(struct old_options) < sizeof(struct tw_client_options));
}

static void test_init_writes_only_within_size(void)
{
    union old_in_buffer b;
    memset(b.bytes, 0xA5, sizeof(b.bytes));
    tw_client_options_init_size((struct tw_client_options *)&b.old, sizeof(b.old));
    TW_ASSERT_EQ_U64(b.old.size, sizeof(b.old));
    TW_ASSERT_EQ(b.old.connect_timeout_ms, 10000);
    TW_ASSERT_EQ(b.old.max_inflight, 0); /* 0: the window follows the transfers */
    TW_ASSERT(b.old.token == NULL && b.old.agent == NULL);
    for (size_t i = sizeof(b.old); i < sizeof(b.bytes); i++)
        if (b.bytes[i] != 0xA5)
            TW_FAIL("init wrote byte %zu beyond size %zu", i, sizeof(b.old));

    struct tw_client_options n;
    tw_client_options_init(&n);
    TW_ASSERT_EQ_U64(n.size, sizeof(n));
    TW_ASSERT_EQ_U64(n.rdma_min_bytes, TW_RDMA_MIN_BYTES_AUTO);
}

static void test_old_struct_gets_defaults_beyond_size(void)
{
    union old_in_buffer b;
    struct tw_client_options got;
    char err[256] = "";
    memset(b.bytes, 0xA5, sizeof(b.bytes));
    tw_client_options_init_size((struct tw_client_options *)&b.old, sizeof(b.old));
    b.old.max_inflight = 7;
    b.old.checksum = 1;
    b.old.socket_buffer_bytes = 1 << 20;
    TW_ASSERT_OK(
        tw__client_options_resolve((struct tw_client_options *)&b.old, &got, err, sizeof(err)));
    TW_ASSERT_EQ_U64(got.size, sizeof(got));
    TW_ASSERT_EQ(got.max_inflight, 7);
    TW_ASSERT_EQ(got.checksum, 1);
    TW_ASSERT_EQ(got.socket_buffer_bytes, 1 << 20);
    TW_ASSERT(got.fabric == NULL);                                /* default, not 0xA5A5... */
    TW_ASSERT_EQ(got.push, TW_PUSH_AUTO);                         /* default */
    TW_ASSERT_EQ_U64(got.rdma_min_bytes, TW_RDMA_MIN_BYTES_AUTO); /* default: per provider */
}

static void test_newer_struct_tail_must_be_zero(void)
{
    unsigned char buf[sizeof(struct tw_client_options) + 16];
    struct tw_client_options *o = (struct tw_client_options *)buf, got;
    char err[256] = "";
    memset(buf, 0xA5, sizeof(buf));
    tw_client_options_init_size(o, sizeof(buf)); /* a newer header's size */
    TW_ASSERT_EQ_U64(o->size, sizeof(buf));
    for (size_t i = sizeof(*o); i < sizeof(buf); i++)
        TW_ASSERT_EQ(buf[i], 0); /* unknown options zeroed = their defaults */
    o->max_frame = 1u << 20;
    TW_ASSERT_OK(tw__client_options_resolve(o, &got, err, sizeof(err)));
    TW_ASSERT_EQ(got.max_frame, 1u << 20);
    buf[sizeof(*o) + 3] = 1; /* a newer option set: cannot be honoured */
    TW_ASSERT_ERR(tw__client_options_resolve(o, &got, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "newer") != NULL);
}

static void test_uninitialised_is_refused(void)
{
    struct tw_client_options o, got;
    char err[256] = "";
    memset(&o, 0, sizeof(o));
    TW_ASSERT_ERR(tw__client_options_resolve(&o, &got, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "tw_client_options_init") != NULL);
    TW_ASSERT_OK(tw__client_options_resolve(NULL, &got, err, sizeof(err)));
    TW_ASSERT_EQ(got.connect_timeout_ms, 10000);
}

/* Through the public entry point: the old struct passes option checks and
 * the connect reaches the socket (a port nobody listens on). */
static void test_connect_with_old_struct(void)
{
    union old_in_buffer b;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    char addr[64], err[256];
    tw_client *c = NULL;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TW_ASSERT(fd >= 0);
    TW_ASSERT_OK(bind(fd, (struct sockaddr *)&sa, sl));
    TW_ASSERT_OK(getsockname(fd, (struct sockaddr *)&sa, &sl));
    close(fd);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
    memset(b.bytes, 0xA5, sizeof(b.bytes));
    tw_client_options_init_size((struct tw_client_options *)&b.old, sizeof(b.old));
    TW_ASSERT_ERR(
        tw_client_connect_error(addr, (struct tw_client_options *)&b.old, &c, err, sizeof(err)),
        -ECONNREFUSED);
    TW_ASSERT(c == NULL);
    struct tw_client_options z;
    memset(&z, 0, sizeof(z));
    TW_ASSERT_ERR(tw_client_connect_error(addr, &z, &c, err, sizeof(err)), TW_EINVAL);
}

int main(void)
{
    TW_RUN(test_layout_is_a_prefix);
    TW_RUN(test_init_writes_only_within_size);
    TW_RUN(test_old_struct_gets_defaults_beyond_size);
    TW_RUN(test_newer_struct_tail_must_be_zero);
    TW_RUN(test_uninitialised_is_refused);
    TW_RUN(test_connect_with_old_struct);
    TW_DONE();
}
