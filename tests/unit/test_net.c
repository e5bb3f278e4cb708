/* src/net: HOST:PORT parsing and the event loop's timers and I/O. */
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "net/addr.h"
#include "net/loop.h"
#include "net/sock.h"
#include "tw_test.h"

static void test_parse(void)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    char buf[TW_NET_ADDRSTRLEN], err[128];
    TW_ASSERT_OK(tw__net_parse_hostport("127.0.0.1:7450", &ss, &sl, err, sizeof(err)));
    TW_ASSERT_STR_EQ(tw__net_addr_format((struct sockaddr *)&ss, buf, sizeof(buf)),
                     "127.0.0.1:7450");
    TW_ASSERT_OK(tw__net_parse_hostport("[::1]:0", &ss, &sl, err, sizeof(err)));
    TW_ASSERT_EQ(ss.ss_family, AF_INET6);
    TW_ASSERT_STR_EQ(tw__net_addr_format((struct sockaddr *)&ss, buf, sizeof(buf)), "[::1]:0");
    TW_ASSERT_OK(tw__net_parse_hostport(":80", &ss, &sl, err, sizeof(err)));
    TW_ASSERT_STR_EQ(tw__net_addr_format((struct sockaddr *)&ss, buf, sizeof(buf)), "0.0.0.0:80");
    TW_ASSERT_OK(tw__net_parse_hostport("localhost:1", &ss, &sl, err, sizeof(err)));
    TW_ASSERT_ERR(tw__net_parse_hostport("127.0.0.1", &ss, &sl, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__net_parse_hostport("127.0.0.1:65536", &ss, &sl, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__net_parse_hostport("127.0.0.1:x", &ss, &sl, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__net_parse_hostport("::1:80", &ss, &sl, err, sizeof(err)), TW_EINVAL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT_ERR(tw__net_parse_hostport("[::1]80", &ss, &sl, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__net_parse_hostport("", &ss, &sl, err, sizeof(err)), TW_EINVAL);
}

static int fired[4];
static void on_timer(struct tw_loop *loop, struct tw_timer *t)
{
    fired[(intptr_t)t->data]++;
}

static void test_timers(void)
{
    struct tw_loop loop;
    struct tw_timer t[4];
    TW_ASSERT_OK(tw__loop_init(&loop));
    for (int i = 0; i < 4; i++)
        tw__timer_init(&t[i], on_timer, (void *)(intptr_t)i);
    TW_ASSERT_OK(tw__loop_timer_start(&loop, &t[0], 30));
    TW_ASSERT_OK(tw__loop_timer_start(&loop, &t[1], 10));
    TW_ASSERT_OK(tw__loop_timer_start(&loop, &t[2], 20));
    TW_ASSERT_OK(tw__loop_timer_start(&loop, &t[3], 5));
    tw__loop_timer_stop(&loop, &t[2]);
    TW_ASSERT(!tw__timer_active(&t[2]));
    TW_ASSERT_OK(tw__loop_timer_start(&loop, &t[3], 40)); /* re-arm later */
    uint64_t start = tw__loop_now(&loop);
    while (fired[0] + fired[1] + fired[3] < 3 && tw__loop_now(&loop) - start < 2000)
        TW_ASSERT(tw__loop_run_once(&loop, -1) >= 0);
    TW_ASSERT_EQ(fired[0], 1);
    TW_ASSERT_EQ(fired[1], 1);
    TW_ASSERT_EQ(fired[2], 0);
    TW_ASSERT_EQ(fired[3], 1);
    TW_ASSERT(tw__loop_now(&loop) - start >= 40);
    tw__loop_destroy(&loop);
}

static int io_calls;
static void on_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    char b[16];
    io_calls++;
    TW_ASSERT(events & EPOLLIN);
    TW_ASSERT_EQ(read(io->fd, b, sizeof(b)), 5);
    /* Deleting the other io mid-batch must suppress its pending event. */
    tw__loop_io_del(loop, (struct tw_io *)io->data);
}

static void test_io_and_delete_in_batch(void)
{
    struct tw_loop loop;
    struct tw_io a, b;
    int pa[2], pb[2];
    TW_ASSERT_OK(tw__loop_init(&loop));
    TW_ASSERT_EQ(pipe(pa), 0);
    TW_ASSERT_EQ(pipe(pb), 0);
    tw__io_init(&a, pa[0], on_io, &b);
    tw__io_init(&b, pb[0], on_io, &a);
    TW_ASSERT_OK(tw__loop_io_set(&loop, &a, EPOLLIN));
    TW_ASSERT_OK(tw__loop_io_set(&loop, &b, EPOLLIN));
    TW_ASSERT_EQ(write(pa[1], "hello", 5), 5);
    TW_ASSERT_EQ(write(pb[1], "hello", 5), 5);
    TW_ASSERT_EQ(tw__loop_run_once(&loop, 1000), 1);
    TW_ASSERT_EQ(io_calls, 1);
    tw__loop_destroy(&loop);
    close(pa[0]);
    close(pa[1]);
    close(pb[0]);
    close(pb[1]);
}

static void test_listen_ephemeral(void)
{
    struct sockaddr_storage ss, bound;
    socklen_t sl, bl;
    int lfd, cfd, afd;
    TW_ASSERT_OK(tw__net_parse_hostport("127.0.0.1:0", &ss, &sl, NULL, 0));
    TW_ASSERT_OK(tw__net_listen((struct sockaddr *)&ss, sl, 16, &lfd));
    TW_ASSERT_OK(tw__net_local_addr(lfd, &bound, &bl));
    TW_ASSERT(((struct sockaddr_in *)&bound)->sin_port != 0);
    TW_ASSERT_ERR(tw__net_accept(lfd, &afd, NULL, NULL), -EAGAIN);
    TW_ASSERT_OK(tw__net_connect((struct sockaddr *)&bound, bl, &cfd));
    int rc;
    for (int i = 0; i < 100 && (rc = tw__net_accept(lfd, &afd, NULL, NULL)) == -EAGAIN; i++)
        usleep(1000);
    TW_ASSERT_OK(rc);
    close(afd);
    close(cfd);
    close(lfd);
}

/* tw__net_connect_hostport: the client's connect, by address string. */
static void test_connect_hostport(void)
{
    struct sockaddr_storage ss, bound;
    socklen_t sl, bl;
    int lfd, cfd = -1, afd = -1, rc;
    char addr[64], err[256];
    TW_ASSERT_OK(tw__net_parse_hostport("127.0.0.1:0", &ss, &sl, NULL, 0));
    TW_ASSERT_OK(tw__net_listen((struct sockaddr *)&ss, sl, 16, &lfd));
    TW_ASSERT_OK(tw__net_local_addr(lfd, &bound, &bl));
    tw__net_addr_format((struct sockaddr *)&bound, addr, sizeof(addr));
    TW_ASSERT_OK(tw__net_connect_hostport(addr, 10000, 0, &cfd, err, sizeof(err)));
    for (int i = 0; i < 1000 && (rc = tw__net_accept(lfd, &afd, NULL, NULL)) == -EAGAIN; i++)
        usleep(1000);
    TW_ASSERT_OK(rc);
    TW_ASSERT_EQ(write(cfd, "x", 1), 1);
    close(afd);
    close(cfd);
    close(lfd); /* now nothing listens on that port */
    cfd = -1;
    TW_ASSERT_ERR(tw__net_connect_hostport(addr, 10000, 0, &cfd, err, sizeof(err)), -ECONNREFUSED);
    TW_ASSERT(strstr(err, addr) != NULL);
    TW_ASSERT_EQ(cfd, -1);
    TW_ASSERT_ERR(tw__net_connect_hostport("127.0.0.1", 1000, 0, &cfd, err, sizeof(err)),
                  TW_EINVAL);
    TW_ASSERT_ERR(tw__net_connect_hostport(":7450", 1000, 0, &cfd, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_ERR(tw__net_connect_hostport(NULL, 1000, 0, &cfd, NULL, 0), TW_EINVAL);
    TW_ASSERT_ERR(
        tw__net_connect_hostport("no-such-host.invalid:1", 5000, 0, &cfd, err, sizeof(err)),
        -EHOSTUNREACH);
}

int main(void)
{
    TW_RUN(test_parse);
    TW_RUN(test_timers);
    TW_RUN(test_io_and_delete_in_batch);
    TW_RUN(test_listen_ephemeral);
    TW_RUN(test_connect_hostport);
    TW_DONE();
}
