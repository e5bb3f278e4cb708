/*
 * The one client integration check that looks inside the handle (so it
 * links the internal library, not libtensorwire.so): a get cancelled for a
 * too-small buffer returns only once the server has acknowledged the
 * cancel, leaving none of the cancelled tensor's bytes on the connection,
 * buffered or in the socket. Runs inline and over every RDMA variant
 * (cmake/parts/client.cmake), like test_client_lib.
 */
#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

#include "client/client_internal.h"
#include "integration/server_fixture.h"
#include "tensorwire/tensorwire.h"
#include "tw_test.h"

static struct tw_test_server srv;

/* A get cancelled for a too-small buffer returns only once the server has
 * acknowledged the cancel: none of the cancelled tensor's bytes remain on
 * the connection, buffered or in the socket. */
static void test_cancel_leaves_nothing_behind(void)
{
    struct tw_client_options o;
    tw_client *c = NULL;
    size_t n = 8u << 20;
    uint8_t *buf = calloc(1, n), small[1024];
    struct tw_tensor_desc d = {.dtype = TW_U8, .ndim = 1, .shape = {n}}, got;
    tw_test_client_options(&o);
    o.max_frame = 64 * 1024;
    TW_ASSERT_OK(tw_client_connect(srv.addr, &o, &c));
    TW_ASSERT_OK(tw_put(c, "cancel/t", &d, buf, n));
    for (int i = 0; i < 3; i++) {
        TW_ASSERT_ERR(tw_get(c, "cancel/t", small, sizeof(small), &got), -ENOBUFS);
        TW_ASSERT_EQ_U64(got.byte_length, n);
        TW_ASSERT_EQ(c->rlen - c->rpos - c->rconsume, 0);
        uint8_t peek;
        errno = 0;
        TW_ASSERT_EQ(recv(c->fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT), -1);
        TW_ASSERT(errno == EAGAIN || errno == EWOULDBLOCK);
    }
    /* A batch mixing cancels and successes. */
    struct tw_batch_item items[6];
    for (int i = 0; i < 6; i++) {
        items[i] = (struct tw_batch_item){
            .name = "cancel/t", .buf = i % 2 ? small : buf, .len = i % 2 ? sizeof(small) : n};
    }
    TW_ASSERT_ERR(tw_batch_get(c, items, 6), -ENOBUFS);
    for (int i = 0; i < 6; i++)
        TW_ASSERT_ERR(items[i].status, i % 2 ? -ENOBUFS : 0);
    TW_ASSERT_EQ(c->rlen - c->rpos - c->rconsume, 0);
    TW_ASSERT_OK(tw_delete(c, "cancel/t"));
    free(buf);
    tw_close(c);
}

int main(void)
{
    tw_test_server_start(&srv, NULL);
    fprintf(stderr, "server at %s\n", srv.addr);
    TW_RUN(test_cancel_leaves_nothing_behind);
    tw_test_server_stop(&srv);
    TW_DONE();
}
