/*
 * Test helpers for the data-plane tests (TW_TEST_PROVIDER is the provider
 * under test, a compile definition).
 *
 * tw_test_open_plane(): opens a plane on TW_TEST_PROVIDER bound to
 * loopback with a 100 ms drain time (and wedge_ms, 0 = default); a
 * provider that does not open here ends the test with SKIP (77).
 *
 * tw_test_connect_planes(): RDMA_ENDPOINT in miniature between two planes
 * of one process. The client plane offers its rails, the server plane accepts the
 * first usable one and the client inserts the accepted address. Fails the
 * test (TW_ASSERT) on any error. *cp is the client's peer handle for the
 * server, *sp the server's for the client; both are owned by the caller
 * (tw__fabric_peer_remove()).
 */
#ifndef TW_FABRIC_PAIR_H
#define TW_FABRIC_PAIR_H

#include "fabric/fabric.h"
#include "tw_test.h"

static inline struct tw_fabric *tw_test_open_plane(int threaded, uint64_t wedge_ms)
{
    struct tw_fabric_config cfg = {.provider = TW_TEST_PROVIDER,
                                   .node = "127.0.0.1",
                                   .threaded = threaded,
                                   .drain_ns = 100ull * 1000 * 1000,
                                   .wedge_ns = wedge_ms * 1000000ull};
    char err[512];
    struct tw_fabric *f = NULL;
    int ret = tw__fabric_open(&cfg, &f, err, sizeof(err));
    if (ret)
        TW_SKIP("provider %s unavailable: %s (%s)", TW_TEST_PROVIDER, err, tw_strerror_name(ret));
    return f;
}

static inline void tw_test_connect_planes(struct tw_fabric *c, struct tw_fabric *s,
                                          struct tw_fabric_peer **cp, struct tw_fabric_peer **sp)
{
    const struct tw_fabric_addr *mine, *theirs = NULL;
    unsigned n = tw__fabric_local_addrs(c, &mine);
    TW_ASSERT(n >= 1);
    struct tw_fabric_entry offer[TW_FABRIC_MAX_RAILS];
    for (unsigned i = 0; i < n; i++)
        tw__fabric_addr_view(&mine[i], &offer[i]);
    uint8_t host[TW_HOST_ID_LEN];
    tw__fabric_plane_host_id(c, host);
    char reason[TW_MAX_REASON_LEN + 1];
    TW_ASSERT_OK(tw__fabric_accept_offer(s, host, offer, n, sp, &theirs, reason, sizeof(reason)));
    TW_ASSERT(theirs != NULL);
    /* The client sees the ACCEPT entry as a decoded wire view. */
    struct tw_fabric_entry accept;
    tw__fabric_addr_view(theirs, &accept);
    TW_ASSERT_OK(tw__fabric_peer_insert_entry(c, &accept, cp));
    TW_ASSERT_STR_EQ(tw__fabric_peer_provider(*cp), tw__fabric_peer_provider(*sp));
}

#endif
