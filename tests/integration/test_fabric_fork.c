/*
 * Data plane between two processes (fork), over TW_TEST_PROVIDER: the child
 * is a "server" with a threaded plane that exposes a source region (remote
 * read) and a destination region (remote write); addresses and keys travel
 * over a socketpair, as RDMA_ENDPOINT / RDMA_REGISTER would on the control
 * connection. The parent pulls and pushes, then the child stalls (tcp:
 * SIGSTOP; shm: its mover paused, see stalled_then_dead_peer) -> TIMEOUT,
 * and is killed mid-transfer (a dead peer -> an error for that transfer
 * only); a new child is then served.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tw_fabric_pair.h"
#include "tw_test.h"

#ifndef TW_TEST_PROVIDER
#define TW_TEST_PROVIDER "tcp"
#endif
#define REGION (64u << 20)

struct hello { /* child -> parent, after the parent's address */
    struct tw_fabric_addr addr;
    struct tw_fabric_rkey src, dst;
};

static void xwrite(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            _exit(3);
        c += w;
        n -= (size_t)w;
    }
}

static int xread(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The child: serve until the parent closes the socket (or a signal). */
static void child_main(int sock)
{
    struct tw_fabric *f = tw_test_open_plane(1, 0);
    struct tw_fabric_addr peer_addr;
    if (xread(sock, &peer_addr, sizeof(peer_addr)))
        _exit(2);
    struct tw_fabric_peer *p;
    if (tw__fabric_peer_insert(f, peer_addr.provider, peer_addr.addr_format, peer_addr.addr,
                               peer_addr.addr_len, &p))
        _exit(4);
    uint8_t *src = malloc(REGION), *dst = calloc(1, REGION);
    tw_test_fill(src, REGION, 1);
    struct tw_fabric_mr *ms, *md;
    if (tw__fabric_mr_register(p, src, REGION, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &ms) ||
        tw__fabric_mr_register(p, dst, REGION, TW_FABRIC_REMOTE_WRITE, TW_FABRIC_HOST, 0, &md))
        _exit(5);
    struct hello h;
    const struct tw_fabric_addr *mine;
    tw__fabric_local_addrs(f, &mine);
    h.addr = mine[0];
    h.src = tw__fabric_mr_rkey(ms);
    h.dst = tw__fabric_mr_rkey(md);
    xwrite(sock, &h, sizeof(h));
    /* Commands: 'c' = check the destination against the push pattern,
     * 'p' / 'r' = pause / resume progress (a stalled peer). */
    char cmd;
    while (xread(sock, &cmd, 1) == 0) {
        if (cmd == 'p' || cmd == 'r') {
            tw__fabric_pause(f, cmd == 'p');
            xwrite(sock, "k", 1);
            continue;
        }
        uint8_t *want = malloc(REGION);
        tw_test_fill(want, REGION, 2);
        char ok = memcmp(want, dst, REGION) == 0 ? 'y' : 'n';
        free(want);
        xwrite(sock, &ok, 1);
    }
    tw__fabric_mr_deregister(ms);
    tw__fabric_mr_deregister(md);
    tw__fabric_peer_remove(p);
    tw__fabric_close(f);
    free(src);
    free(dst);
    _exit(0);
}

/* A killed shm peer cannot remove its region from /dev/shm; the test does,
 * so CI hosts do not collect them. Only the exact name of the endpoint the
 * child announced ("fi_shm://tw_<pid>_<seq>_<clock>", rail.c): a prefix
 * such as tw_<pid>_ could hit a region of another test's process that got
 * the same pid after the child died (ctest -j runs them side by side). */
static void unlink_shm_region(const struct tw_fabric_addr *a)
{
    static const char scheme[] = "fi_shm://";
    size_t n = strnlen((const char *)a->addr, a->addr_len);
    if (strcmp(a->provider, "shm") != 0 || n <= sizeof(scheme) - 1 ||
        memcmp(a->addr, scheme, sizeof(scheme) - 1) != 0)
        return;
    char path[300];
    snprintf(path, sizeof(path), "/dev/shm/%.*s", (int)(n - (sizeof(scheme) - 1)),
             (const char *)a->addr + sizeof(scheme) - 1);
    unlink(path);
}

struct child {
    pid_t pid;
    int sock;
    struct hello h;
    struct tw_fabric_peer *peer;
};

static void spawn(struct tw_fabric *f, struct child *c)
{
    int sv[2];
    TW_ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    c->pid = fork();
    TW_ASSERT(c->pid >= 0);
    if (c->pid == 0) {
        close(sv[0]);
        child_main(sv[1]);
    }
    close(sv[1]);
    c->sock = sv[0];
    const struct tw_fabric_addr *mine;
    tw__fabric_local_addrs(f, &mine);
    xwrite(c->sock, &mine[0], sizeof(mine[0]));
    if (xread(c->sock, &c->h, sizeof(c->h))) {
        int st = 0;
        waitpid(c->pid, &st, 0);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
            TW_SKIP("child could not open %s", TW_TEST_PROVIDER);
        TW_FAIL("child failed to start (status 0x%x)", st);
    }
    TW_ASSERT_OK(tw__fabric_peer_insert(f, c->h.addr.provider, c->h.addr.addr_format,
                                        c->h.addr.addr, c->h.addr.addr_len, &c->peer));
}

static void reap(struct tw_fabric *f, struct child *c)
{
    close(c->sock);
    int st;
    if (c->pid > 0)
        TW_ASSERT_EQ(waitpid(c->pid, &st, 0), c->pid);
    tw__fabric_peer_remove(c->peer);
}

static struct tw_fabric *plane;
static uint8_t *buf, *want;
static struct tw_fabric_mr *lmr;
static unsigned lmr_rail;

/* The local region is registered once per rail: again when a peer lives
 * on another (a replacement) rail. */
static void local_mr_on(struct tw_fabric_peer *peer)
{
    if (lmr && tw__fabric_peer_rail(peer) == lmr_rail)
        return;
    tw__fabric_mr_deregister(lmr);
    TW_ASSERT_OK(tw__fabric_mr_register(
        peer, buf, REGION, TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE, TW_FABRIC_HOST, 0, &lmr));
    lmr_rail = tw__fabric_peer_rail(peer);
}

static int pull(struct child *c, unsigned ms, struct tw_fabric_completion *out)
{
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = c->peer,
                                    .local = lmr,
                                    .remote = c->h.src,
                                    .length = REGION,
                                    .deadline_ns = tw__now_ns() + ms * 1000000ull};
    return tw__fabric_xfer_run(plane, &d, out);
}

static void pull_and_push(void)
{
    struct child c;
    spawn(plane, &c);
    struct tw_fabric_completion cc;
    memset(buf, 0, REGION);
    int ret = pull(&c, 20000, &cc);
    if (ret)
        TW_FAIL("pull: %s: %s", tw_strerror_name(ret), cc.msg);
    TW_ASSERT_MEM_EQ(buf, want, REGION);
    tw_test_fill(buf, REGION, 2);
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PUSH,
                                    .peer = c.peer,
                                    .local = lmr,
                                    .remote = c.h.dst,
                                    .length = REGION,
                                    .deadline_ns = tw__now_ns() + 20000000000ull};
    ret = tw__fabric_xfer_run(plane, &d, &cc);
    if (ret)
        TW_FAIL("push: %s: %s", tw_strerror_name(ret), cc.msg);
    char ok = 0;
    xwrite(c.sock, "c", 1);
    TW_ASSERT_OK(xread(c.sock, &ok, 1));
    TW_ASSERT_EQ(ok, 'y');
    reap(plane, &c);
}

static void stalled_then_dead_peer(void)
{
    struct child c;
    spawn(plane, &c);
    struct tw_fabric_completion cc;
    TW_ASSERT_OK(pull(&c, 20000, &cc)); /* connection established */

    /* Stalled: the process exists but makes no progress. On tcp it is
     * frozen (SIGSTOP). On shm a frozen peer may hold the spin lock in its
     * region that our fi_read must take, and then we would spin inside
     * libfabric until it resumes (docs/testing.md); so there it stops
     * progressing cooperatively (its mover paused). */
    int is_shm_rail = strcmp(tw__fabric_peer_provider(c.peer), "shm") == 0;
    char ack;
    if (is_shm_rail) {
        xwrite(c.sock, "p", 1);
        TW_ASSERT_OK(xread(c.sock, &ack, 1));
    } else {
        /* kill() returns before the peer has stopped: a thread inside a
         * system call (a send of megabytes) finishes it first, and on a
         * loaded machine the whole 64 MiB read was seen served after
         * kill() returned. Wait until every thread of it is stopped. */
        int st = 0;
        TW_ASSERT_OK(kill(c.pid, SIGSTOP));
        TW_ASSERT_EQ(waitpid(c.pid, &st, WUNTRACED), c.pid);
        TW_ASSERT(WIFSTOPPED(st));
    }
    uint64_t t0 = tw__now_ns();
    int ret = pull(&c, 300, &cc);
    uint64_t ms = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  stopped peer: %s after %llu ms: %s\n", tw_strerror_name(ret),
            (unsigned long long)ms, cc.msg);
    TW_ASSERT_ERR(ret, TW_ETIMEDOUT);
    TW_ASSERT(ms < 3000);
    /* The provider kept the reads (fi_cancel cannot take RMA back here):
     * they may land later, so the buffer must go through mr_release. */
    TW_ASSERT_EQ(cc.buffer_busy, 1);
    struct tw_fabric_stats st1;
    tw__fabric_stats(plane, &st1);
    TW_ASSERT(st1.stuck_ops > 0);
    char why[256] = "";
    if (is_shm_rail && !tw__fabric_peer_usable(c.peer, why, sizeof(why))) {
        /* shm consumes answers in order: the unanswered reads would hold
         * up every later operation of this endpoint, so the rail was
         * retired, and the watchdog opens a replacement. */
        fprintf(stderr, "  stalled shm peer: %s\n", why);
        TW_ASSERT(strstr(why, "never answered") != NULL);
        xwrite(c.sock, "r", 1);
        TW_ASSERT_OK(xread(c.sock, &ack, 1));
        /* The retired rail is still polled: late answers drain (shm 1.17
         * does not always send them: then the buffer stays parked). */
        uint64_t until = tw__now_ns() + 3000000000ull;
        do {
            usleep(1000);
            tw__fabric_stats(plane, &st1);
        } while ((st1.stuck_ops || !st1.rails_reopened) && tw__now_ns() < until);
        fprintf(stderr, "  after resuming: %u operations still held\n", st1.stuck_ops);
        TW_ASSERT_EQ(st1.rails_retired, 1);
        TW_ASSERT_EQ(st1.rails_reopened, 1);
        TW_ASSERT_ERR(pull(&c, 20000, &cc), -ECONNABORTED);
        /* A new connection lands on the replacement rail. */
        reap(plane, &c);
        spawn(plane, &c);
        TW_ASSERT(tw__fabric_peer_rail(c.peer) != 0);
        local_mr_on(c.peer);
    } else if (is_shm_rail) {
        xwrite(c.sock, "r", 1);
        TW_ASSERT_OK(xread(c.sock, &ack, 1));
    } else {
        kill(c.pid, SIGCONT);
    }
    memset(buf, 0, REGION);
    ret = pull(&c, 20000, &cc);
    if (ret)
        TW_FAIL("pull after resuming: %s: %s", tw_strerror_name(ret), cc.msg);
    TW_ASSERT_MEM_EQ(buf, want, REGION);
    if (!is_shm_rail) {
        struct tw_fabric_stats st0;
        tw__fabric_stats(plane, &st0);
        fprintf(stderr, "  after SIGCONT: %u abandoned operations still held\n", st0.stuck_ops);
        TW_ASSERT_EQ(st0.stuck_ops, 0); /* the late answers drained them */
    }

    /* Dead: killed while an asynchronous transfer is in flight. */
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = c.peer,
                                    .local = lmr,
                                    .remote = c.h.src,
                                    .length = REGION,
                                    .deadline_ns = tw__now_ns() + 2000000000ull,
                                    .cookie = 7};
    TW_ASSERT_OK(tw__fabric_xfer_submit(plane, &d, NULL));
    /* Killed and reaped before we progress again, as a real peer (not our
     * child) vanishes: shm 1.17 would spin forever in fi_read on a lock the
     * dead process held if we posted to it (docs/testing.md). */
    kill(c.pid, SIGKILL);
    int wst;
    TW_ASSERT_EQ(waitpid(c.pid, &wst, 0), c.pid);
    unlink_shm_region(&c.h.addr);
    c.pid = 0;
    t0 = tw__now_ns();
    int got = 0;
    while (!got && tw__now_ns() - t0 < 10000000000ull) {
        got = tw__fabric_done_pop(plane, &cc);
        if (!got)
            usleep(1000);
    }
    TW_ASSERT_EQ(got, 1);
    ms = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  killed peer: %s after %llu ms, %llu bytes: %s\n",
            tw_strerror_name(cc.status), (unsigned long long)ms, (unsigned long long)cc.bytes,
            cc.msg);
    TW_ASSERT_EQ_U64(cc.cookie, 7);
    /* The transfer may have finished before the kill landed; if not, it
     * failed (connection error or deadline), never hung. */
    if (cc.status == 0)
        TW_ASSERT_EQ_U64(cc.bytes, REGION);
    else
        TW_ASSERT(cc.bytes < REGION);
    int is_shm = strcmp(tw__fabric_peer_provider(c.peer), "shm") == 0;
    reap(plane, &c);

    struct tw_fabric_stats st2;
    tw__fabric_stats(plane, &st2);
    fprintf(stderr, "  operations the dead peer never answered: %u\n", st2.stuck_ops);
    if (is_shm && st2.stuck_ops > 0) {
        /* shm 1.17 answers in order: the dead peer's unanswered read
         * would block this endpoint for good, so the rail was retired and
         * a replacement opened; the same plane serves the next peer. */
        uint64_t until = tw__now_ns() + 10000000000ull;
        do {
            usleep(1000);
            tw__fabric_stats(plane, &st2);
        } while (st2.rails_reopened < 2 && tw__now_ns() < until);
        fprintf(stderr, "  rails: %u retired, %u reopened\n", st2.rails_retired,
                st2.rails_reopened);
        TW_ASSERT_EQ(st2.rails_retired, 2);
        TW_ASSERT_EQ(st2.rails_reopened, 2);
    }

    /* A new peer is served normally, by the same plane. */
    spawn(plane, &c);
    local_mr_on(c.peer);
    memset(buf, 0, REGION);
    ret = pull(&c, 20000, &cc);
    if (ret)
        TW_FAIL("pull from a new peer: %s: %s", tw_strerror_name(ret), cc.msg);
    TW_ASSERT_MEM_EQ(buf, want, REGION);
    reap(plane, &c);
    struct tw_fabric_stats st;
    tw__fabric_stats(plane, &st);
    TW_ASSERT_EQ(st.xfers_active, 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    /* Threaded, as a server's: its watchdog replaces retired rails. */
    plane = tw_test_open_plane(1, 0);
    buf = malloc(REGION);
    want = malloc(REGION);
    TW_ASSERT(buf && want);
    tw_test_fill(want, REGION, 1);
    /* Any peer handle on the rail will do to register the local region. */
    struct child boot;
    spawn(plane, &boot);
    local_mr_on(boot.peer);
    reap(plane, &boot);
    TW_RUN(pull_and_push);
    TW_RUN(stalled_then_dead_peer);
    tw__fabric_mr_deregister(lmr);
    tw__fabric_close(plane);
    free(buf);
    free(want);
    TW_DONE();
}
