/*
 * A libfabric call that does not return (what libfabric 1.17 shm does when
 * a peer process dies holding a lock in shared memory), simulated with the
 * plane's call hook: the data mover blocks inside the watchdog's window of
 * a data call. The watchdog must declare the rail wedged within wedge_ns,
 * fail its transfer (ECONNABORTED), abandon the stuck thread, start a new
 * mover, open a replacement rail, and refuse control calls on the wedged
 * rail without blocking; a new peer pair on the replacement moves bytes;
 * once the stuck call returns, its thread leaves and the plane closes
 * cleanly (ASan: no leak). And a retired rail closes once unused, its slot
 * reused by the next replacement.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric_int.h"
#include "tw_fabric_pair.h"
#include "tw_test.h"

#ifndef TW_TEST_PROVIDER
#define TW_TEST_PROVIDER "tcp"
#endif

/* The shm default (TW_FABRIC_DEFAULT_WEDGE_NS). With 200 ms a legitimate
 * call on the replacement rail (tcp under ASan beside `ctest -j2` and a
 * build) took 206 ms and wedged that rail too: the test then failed for
 * its own threshold, not for the code. */
#define WEDGE_MS 1000u

/* The hook: once armed, the first data call on rail 0 blocks until
 * released. */
static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hook_cond = PTHREAD_COND_INITIALIZER;
static int armed, blocked, released;

static void hook(void *arg, unsigned rail)
{
    (void)arg;
    pthread_mutex_lock(&hook_lock);
    if (armed && rail == 0) {
        armed = 0;
        blocked = 1;
        pthread_cond_broadcast(&hook_cond);
        while (!released)
            pthread_cond_wait(&hook_cond, &hook_lock);
    }
    pthread_mutex_unlock(&hook_lock);
}

static int wait_completion(struct tw_fabric *f, struct tw_fabric_completion *c, unsigned ms)
{
    struct pollfd pfd = {.fd = tw__fabric_event_fd(f), .events = POLLIN};
    uint64_t until = tw__now_ns() + (uint64_t)ms * 1000000ull;
    while (tw__now_ns() < until) {
        if (tw__fabric_done_pop(f, c) == 1)
            return 1;
        poll(&pfd, 1, 10);
    }
    return 0;
}

static unsigned abandoned(struct tw_fabric *f)
{
    pthread_mutex_lock(&f->lock);
    unsigned n = f->abandoned;
    pthread_mutex_unlock(&f->lock);
    return n;
}

static void wedged_call(void)
{
    struct tw_fabric *srv = tw_test_open_plane(1, 0), *cli = tw_test_open_plane(1, WEDGE_MS);
    struct tw_fabric_peer *cp, *sp;
    tw_test_connect_planes(cli, srv, &cp, &sp);
    size_t n = 4u << 20;
    uint8_t *src = malloc(n), *dst = calloc(1, n), *dst2 = calloc(1, n);
    TW_ASSERT(src && dst && dst2);
    for (size_t i = 0; i < n; i++)
        src[i] = (uint8_t)(i * 7 + 3);
    struct tw_fabric_mr *rsrc, *ldst;
    TW_ASSERT_OK(
        tw__fabric_mr_register(sp, src, n, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &rsrc));
    TW_ASSERT_OK(
        tw__fabric_mr_register(cp, dst, n, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0, &ldst));

    tw__fabric_set_call_hook(cli, hook, NULL);
    pthread_mutex_lock(&hook_lock);
    armed = 1;
    pthread_mutex_unlock(&hook_lock);
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = cp,
                                    .local = ldst,
                                    .remote = tw__fabric_mr_rkey(rsrc),
                                    .length = n,
                                    .deadline_ns = tw__now_ns() + 30000000000ull,
                                    .cookie = 42};
    uint64_t t0 = tw__now_ns();
    TW_ASSERT_OK(tw__fabric_xfer_submit(cli, &d, NULL));
    /* While the call hangs, a control call that needs the rail (a remote
     * registration) waits for it only until the watchdog gives the rail
     * up, then fails; it never hangs with it. */
    pthread_mutex_lock(&hook_lock);
    while (!blocked)
        pthread_cond_wait(&hook_cond, &hook_lock);
    pthread_mutex_unlock(&hook_lock);
    struct tw_fabric_mr *m1 = NULL;
    int r1 = tw__fabric_mr_register(cp, dst2, n, TW_FABRIC_REMOTE_WRITE, TW_FABRIC_HOST, 0, &m1);
    uint64_t waited = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  register while the call hangs: %s after %llu ms\n", tw_strerror_name(r1),
            (unsigned long long)waited);
    TW_ASSERT_ERR(r1, -ECONNABORTED);
    TW_ASSERT(waited < 5000);
    struct tw_fabric_completion c;
    TW_ASSERT_EQ(wait_completion(cli, &c, 10000), 1);
    uint64_t ms = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  wedged transfer: %s after %llu ms, buffer_busy %d: %s\n",
            tw_strerror_name(c.status), (unsigned long long)ms, c.buffer_busy, c.msg);
    TW_ASSERT_EQ(blocked, 1);
    TW_ASSERT_ERR(c.status, -ECONNABORTED);
    TW_ASSERT_EQ_U64(c.cookie, 42);
    TW_ASSERT(strstr(c.msg, "has not returned") != NULL);
    TW_ASSERT(ms >= WEDGE_MS && ms < 5000);

    /* The rail is given up and replaced; the peer says why. */
    struct tw_fabric_stats st;
    uint64_t until = tw__now_ns() + 5000000000ull;
    do {
        usleep(1000);
        tw__fabric_stats(cli, &st);
    } while (!st.rails_reopened && tw__now_ns() < until);
    TW_ASSERT_EQ(st.rails_wedged, 1);
    TW_ASSERT_EQ(st.rails_retired, 1);
    TW_ASSERT_EQ(st.rails_reopened, 1);
    TW_ASSERT_EQ(st.threads_abandoned, 1);
    TW_ASSERT_EQ(abandoned(cli), 1);
    char why[256];
    TW_ASSERT_EQ(tw__fabric_peer_usable(cp, why, sizeof(why)), 0);
    fprintf(stderr, "  old peer: %s\n", why);
    TW_ASSERT(strstr(why, "wedged") != NULL);
    fprintf(stderr, "  plane: %s\n", tw__fabric_describe(cli));
    TW_ASSERT(strstr(tw__fabric_describe(cli), "1 wedged") != NULL);

    /* Control calls on the wedged rail fail at once instead of waiting for
     * the stuck thread; transfers are refused. */
    t0 = tw__now_ns();
    struct tw_fabric_mr *m2 = NULL;
    int ret = tw__fabric_mr_register(cp, dst2, n, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0, &m2);
    ms = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  register on the wedged rail: %s after %llu ms: %s\n", tw_strerror_name(ret),
            (unsigned long long)ms, tw__fabric_errmsg(cli));
    TW_ASSERT_ERR(ret, -ECONNABORTED);
    TW_ASSERT(ms < 1000);
    TW_ASSERT_ERR(tw__fabric_xfer_submit(cli, &d, NULL), -ECONNABORTED);

    /* A new peer pair (a new connection) lands on the replacement rail and
     * moves bytes: the new mover serves it. */
    struct tw_fabric_peer *cp2, *sp2;
    tw_test_connect_planes(cli, srv, &cp2, &sp2);
    TW_ASSERT(tw__fabric_peer_rail(cp2) != tw__fabric_peer_rail(cp));
    TW_ASSERT_EQ(tw__fabric_peer_usable(cp2, NULL, 0), 1);
    struct tw_fabric_mr *rsrc2, *ldst2;
    TW_ASSERT_OK(
        tw__fabric_mr_register(sp2, src, n, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &rsrc2));
    TW_ASSERT_OK(
        tw__fabric_mr_register(cp2, dst2, n, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0, &ldst2));
    struct tw_fabric_xfer_desc d2 = {.op = TW_FABRIC_PULL,
                                     .peer = cp2,
                                     .local = ldst2,
                                     .remote = tw__fabric_mr_rkey(rsrc2),
                                     .length = n,
                                     .deadline_ns = tw__now_ns() + 20000000000ull};
    ret = tw__fabric_xfer_run(cli, &d2, &c);
    if (ret)
        TW_FAIL("transfer on the replacement rail: %s: %s", tw_strerror_name(ret), c.msg);
    TW_ASSERT_MEM_EQ(dst2, src, n);

    /* The stuck call returns: its thread sees it was replaced and leaves. */
    pthread_mutex_lock(&hook_lock);
    released = 1;
    pthread_cond_broadcast(&hook_cond);
    pthread_mutex_unlock(&hook_lock);
    until = tw__now_ns() + 5000000000ull;
    while (abandoned(cli) && tw__now_ns() < until)
        usleep(1000);
    TW_ASSERT_EQ(abandoned(cli), 0);
    tw__fabric_set_call_hook(cli, NULL, NULL);

    tw__fabric_mr_deregister(ldst2);
    tw__fabric_mr_deregister(rsrc2);
    tw__fabric_mr_deregister(ldst);
    tw__fabric_peer_remove(cp2);
    tw__fabric_peer_remove(cp);
    /* The client first: its late operation (posted by the returning
     * thread) may still be served by the server into dst. */
    tw__fabric_close(cli);
    tw__fabric_mr_deregister(rsrc);
    tw__fabric_peer_remove(sp2);
    tw__fabric_peer_remove(sp);
    tw__fabric_close(srv);
    free(src);
    free(dst);
    free(dst2);
}

static void pull_ok(struct tw_fabric *cli, struct tw_fabric *srv, struct tw_fabric_peer **cp,
                    struct tw_fabric_peer **sp)
{
    tw_test_connect_planes(cli, srv, cp, sp);
    size_t n = 1u << 20;
    uint8_t *src = malloc(n), *dst = calloc(1, n);
    TW_ASSERT(src && dst);
    for (size_t i = 0; i < n; i++)
        src[i] = (uint8_t)(i * 13 + 1);
    struct tw_fabric_mr *rs, *ld;
    TW_ASSERT_OK(
        tw__fabric_mr_register(*sp, src, n, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &rs));
    TW_ASSERT_OK(tw__fabric_mr_register(*cp, dst, n, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0, &ld));
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = *cp,
                                    .local = ld,
                                    .remote = tw__fabric_mr_rkey(rs),
                                    .length = n,
                                    .deadline_ns = tw__now_ns() + 20000000000ull};
    struct tw_fabric_completion c;
    int ret = tw__fabric_xfer_run(cli, &d, &c);
    if (ret)
        TW_FAIL("pull on rail %u: %s: %s", tw__fabric_peer_rail(*cp), tw_strerror_name(ret), c.msg);
    TW_ASSERT_MEM_EQ(dst, src, n);
    tw__fabric_mr_deregister(ld);
    tw__fabric_mr_deregister(rs);
    free(src);
    free(dst);
}

static struct tw_fabric_stats wait_stats(struct tw_fabric *f, unsigned reopened, unsigned closed)
{
    struct tw_fabric_stats st;
    uint64_t until = tw__now_ns() + 5000000000ull;
    do {
        usleep(1000);
        tw__fabric_stats(f, &st);
    } while ((st.rails_reopened < reopened || st.rails_closed < closed) && tw__now_ns() < until);
    return st;
}

/* A retired rail closes once nothing refers to it, and its slot is reused:
 * a server replaces rails for as long as it runs. */
static void retired_rail_closes(void)
{
    struct tw_fabric *srv = tw_test_open_plane(1, 0), *cli = tw_test_open_plane(1, WEDGE_MS);
    struct tw_fabric_peer *cp, *sp;
    pull_ok(cli, srv, &cp, &sp);
    TW_ASSERT_EQ(tw__fabric_peer_rail(cp), 0);
    TW_ASSERT_OK(tw__fabric_rail_retire(cli, 0, "test"));
    struct tw_fabric_stats st = wait_stats(cli, 1, 0);
    TW_ASSERT_EQ(st.rails_reopened, 1);
    TW_ASSERT_EQ(st.rails_closed, 0); /* its peer is still there */
    TW_ASSERT_EQ(tw__fabric_rail_slots(cli), 2);
    TW_ASSERT_EQ(tw__fabric_peer_usable(cp, NULL, 0), 0);
    tw__fabric_peer_remove(cp); /* the connection goes: the rail closes */
    tw__fabric_peer_remove(sp);
    st = wait_stats(cli, 1, 1);
    TW_ASSERT_EQ(st.rails_closed, 1);
    TW_ASSERT_EQ(tw__fabric_retired_rails(cli), 0);
    fprintf(stderr, "  after the close: %s\n", tw__fabric_describe(cli));

    pull_ok(cli, srv, &cp, &sp); /* on the replacement, slot 1 */
    TW_ASSERT_EQ(tw__fabric_peer_rail(cp), 1);
    TW_ASSERT_OK(tw__fabric_rail_retire(cli, 1, "test again"));
    st = wait_stats(cli, 2, 1);
    TW_ASSERT_EQ(st.rails_reopened, 2);
    TW_ASSERT_EQ(tw__fabric_rail_slots(cli), 2); /* slot 0 was reused */
    tw__fabric_peer_remove(cp);
    tw__fabric_peer_remove(sp);
    st = wait_stats(cli, 2, 2);
    TW_ASSERT_EQ(st.rails_closed, 2);
    pull_ok(cli, srv, &cp, &sp);
    TW_ASSERT_EQ(tw__fabric_peer_rail(cp), 0);
    TW_ASSERT_ERR(tw__fabric_rail_retire(cli, 1, "closed"), TW_EINVAL);
    tw__fabric_peer_remove(cp);
    tw__fabric_peer_remove(sp);
    tw__fabric_close(cli);
    tw__fabric_close(srv);
}

/* Closing a plane while its call still hangs: close returns (the stuck
 * thread is not waited for), the plane stays allocated for that thread,
 * which leaves cleanly when the call returns later; leak checkers see
 * nothing lost (ASan). */
static void close_while_wedged(void)
{
    struct tw_fabric *srv = tw_test_open_plane(1, 0), *cli = tw_test_open_plane(1, WEDGE_MS);
    struct tw_fabric_peer *cp, *sp;
    tw_test_connect_planes(cli, srv, &cp, &sp);
    pthread_mutex_lock(&hook_lock);
    armed = 1;
    blocked = 0;
    released = 0;
    pthread_mutex_unlock(&hook_lock);
    tw__fabric_set_call_hook(cli, hook, NULL); /* the mover's next data call blocks */
    size_t n = 1u << 20;
    uint8_t *src = calloc(1, n);
    struct tw_fabric_mr *rs;
    TW_ASSERT_OK(tw__fabric_mr_register(sp, src, n, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &rs));
    struct tw_fabric_mr *m;
    TW_ASSERT_OK(tw__fabric_mr_register(cp, src, n, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0, &m));
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = cp,
                                    .local = m,
                                    .remote = tw__fabric_mr_rkey(rs),
                                    .length = n,
                                    .deadline_ns = tw__now_ns() + 30000000000ull};
    TW_ASSERT_OK(tw__fabric_xfer_submit(cli, &d, NULL));
    pthread_mutex_lock(&hook_lock);
    while (!blocked)
        pthread_cond_wait(&hook_cond, &hook_lock);
    pthread_mutex_unlock(&hook_lock);
    tw__fabric_mr_deregister(m);
    tw__fabric_peer_remove(cp);
    uint64_t t0 = tw__now_ns();
    tw__fabric_close(cli); /* the watchdog frees the mover from the call */
    uint64_t ms = (tw__now_ns() - t0) / 1000000;
    fprintf(stderr, "  close with a call hanging: %llu ms\n", (unsigned long long)ms);
    TW_ASSERT(ms < 5000);
    /* The call returns now: its thread finds the plane kept and leaves. */
    pthread_mutex_lock(&hook_lock);
    released = 1;
    pthread_cond_broadcast(&hook_cond);
    pthread_mutex_unlock(&hook_lock);
    usleep(200 * 1000);
    tw__fabric_mr_deregister(rs);
    tw__fabric_peer_remove(sp);
    tw__fabric_close(srv);
    /* The returning thread may have posted a read into src before it
     * noticed; with the server plane closed nobody can answer it. */
    free(src);
}

int main(void)
{
    TW_RUN(wedged_call);
    TW_RUN(retired_rail_closes);
    TW_RUN(close_while_wedged);
    TW_DONE();
}
