/* Connection state machine: every legal sequence of the design through two
 * machines back to back, and every out-of-order sequence with the exact
 * verdict on the side that must catch it. */
#include <errno.h>

#include "sm_harness.h"
#include "tw_test.h"

#define C 1 /* from client */
#define S 0 /* from server */
#define OK_SEND(p, from, m)                                                                        \
    do {                                                                                           \
        struct tw_msg m_ = (m);                                                                    \
        TW_ASSERT_ERR(pair_send((p), (from), &m_), 0);                                             \
    } while (0)
#define RECV(sm, m, verdict)                                                                       \
    do {                                                                                           \
        struct tw_msg m_ = (m);                                                                    \
        TW_ASSERT_ERR(pair_recv_only((sm), &m_), (verdict));                                       \
    } while (0)
#define SEND_FAILS(sm, m, verdict)                                                                 \
    do {                                                                                           \
        struct tw_msg m_ = (m);                                                                    \
        TW_ASSERT_ERR(tw__sm_on_send((sm), &m_), (verdict));                                       \
    } while (0)

/* The sender's machine refuses to send m, and the receiver's to accept it,
 * both with verdict. */
#define REFUSED(sender, receiver, m, verdict)                                                      \
    do {                                                                                           \
        SEND_FAILS((sender), (m), (verdict));                                                      \
        RECV((receiver), (m), (verdict));                                                          \
    } while (0)

static const uint64_t shape23[2] = {2, 3};
static uint8_t bytes24[24];

static struct tw_descriptor desc24(void)
{
    return fx_desc("layer0.weight", "cpu", TW_DTYPE_F32, 2, shape23);
}

/* Handshake with the given caps on both sides, optional auth, and an RDMA
 * endpoint exchange when rdma is set. */
static void ready(struct sm_pair *p, uint64_t caps, int auth, int rdma)
{
    TW_ASSERT_OK(pair_init(p, 8, 8));
    TW_ASSERT_EQ(p->s.max_frame, TW_PREAUTH_MAX_FRAME);
    OK_SEND(p, C, fx_hello(caps, 16u << 20, 8, "client"));
    OK_SEND(p, S,
            fx_hello_ack(caps, 16u << 20, 4, auth ? TW_AUTH_HMAC_SHA256 : TW_AUTH_NONE, "srv"));
    if (auth) {
        TW_ASSERT_EQ(p->c.phase, TW_PHASE_AUTH);
        TW_ASSERT_EQ(p->s.max_frame, TW_PREAUTH_MAX_FRAME);
        struct tw_msg a = fx_msg(TW_TAG_AUTH, 0);
        OK_SEND(p, C, a);
        OK_SEND(p, S, fx_msg(TW_TAG_AUTH_OK, 0));
    }
    TW_ASSERT_EQ(p->c.phase, TW_PHASE_READY);
    TW_ASSERT_EQ(p->s.phase, TW_PHASE_READY);
    TW_ASSERT_EQ(p->s.max_frame, 16u << 20);
    TW_ASSERT_EQ(p->c.max_inflight, 4);
    if (rdma) {
        OK_SEND(p, C, fx_endpoint(TW_EP_OFFER));
        OK_SEND(p, S, fx_endpoint(TW_EP_ACCEPT));
        TW_ASSERT_EQ(p->c.fabric_state, TW_SM_FABRIC_ACCEPTED);
        TW_ASSERT_EQ(p->s.fabric_state, TW_SM_FABRIC_ACCEPTED);
    }
}

static void both_idle(struct sm_pair *p, uint64_t id)
{
    TW_ASSERT(!tw__sm_request_active(&p->c, id));
    TW_ASSERT(!tw__sm_request_active(&p->s, id));
    TW_ASSERT_EQ(p->c.inflight, 0);
    TW_ASSERT_EQ(p->s.inflight, 0);
}

static void legal_inline_get(void)
{
    struct sm_pair p;
    ready(&p, 0x3, 1, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    TW_ASSERT_EQ(tw__sm_request_kind(&p.s, 1), TW_REQ_TENSOR_REQUEST);
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 10, 1));
    OK_SEND(&p, S, fx_data(1, 10, bytes24 + 10, 14, 0));
    both_idle(&p, 1);
    pair_destroy(&p);
}

static void legal_inline_put(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    TW_ASSERT(tw__sm_request_active(&p.s, 1));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 1));
    both_idle(&p, 1);
    pair_destroy(&p);
}

/* Both machines still READY (nothing was fatal); then the pair goes. */
static void end_ready(struct sm_pair *p)
{
    TW_ASSERT_EQ(p->c.phase, TW_PHASE_READY);
    TW_ASSERT_EQ(p->s.phase, TW_PHASE_READY);
    pair_destroy(p);
}

/* Bit 4 (EAGER_PUT): an inline put's DATA right behind its TENSOR_PUT,
 * PUT_ACCEPT after all of it, in the middle of it, or ERROR instead. */
static void legal_eager_put(void)
{
    struct sm_pair p;
    ready(&p, 0x11, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 1));
    both_idle(&p, 1);
    /* PUT_ACCEPT between two frames: the rest follows as usual. */
    OK_SEND(&p, C, fx_put(2, 0, desc24()));
    OK_SEND(&p, C, fx_data(2, 0, bytes24, 10, 1));
    OK_SEND(&p, S, fx_put_accept(2, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(2, 10, bytes24 + 10, 14, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 2));
    both_idle(&p, 2);
    /* Refused after its bytes were sent: what comes later is stale. */
    OK_SEND(&p, C, fx_put(3, 0, desc24()));
    OK_SEND(&p, C, fx_data(3, 0, bytes24, 10, 1));
    OK_SEND(&p, S, fx_error(3, TW_WIRE_CAPACITY_EXCEEDED, "full"));
    RECV(&p.s, fx_data(3, 10, bytes24 + 10, 14, 0), TW_SM_STALE);
    both_idle(&p, 3);
    /* DEVICE_UNAVAILABLE is still allowed before PUT_ACCEPT. */
    OK_SEND(&p, C, fx_put(4, 0, desc24()));
    OK_SEND(&p, C, fx_data(4, 0, bytes24, 24, 0));
    OK_SEND(&p, S, fx_error(4, TW_WIRE_DEVICE_UNAVAILABLE, "no cuda:7"));
    both_idle(&p, 4);
    end_ready(&p);
}

static void eager_put_violations(void)
{
    struct sm_pair p;
    /* Not with WANT_RDMA: the answer could be the RDMA plane. */
    ready(&p, 0x15, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    REFUSED(&p.c, &p.s, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Not from the server, and not twice. */
    ready(&p, 0x11, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    SEND_FAILS(&p.s, fx_data(1, 0, bytes24, 24, 0), TW_EBAD_DIRECTION);
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    REFUSED(&p.c, &p.s, fx_data(1, 24, bytes24, 1, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* All bytes sent: OK before PUT_ACCEPT, the RDMA plane, a second
     * PUT_ACCEPT. */
    ready(&p, 0x11, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    REFUSED(&p.s, &p.c, fx_msg(TW_TAG_OK, 1), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x11, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    RECV(&p.c, fx_put_accept(1, TW_DP_RDMA), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
    ready(&p, 0x11, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 24, 0));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    REFUSED(&p.s, &p.c, fx_put_accept(1, TW_DP_INLINE), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

/* Bit 6 (EAGER_RDMA_PUT): a put's RDMA_REGISTER right behind its
 * TENSOR_PUT. PUT_ACCEPT(2) then leads to pull or push as usual; after
 * PUT_ACCEPT(1) the registration is void (the server may read it before or
 * after answering) and the bytes come inline; after ERROR it is stale. */
static struct tw_msg reg_more24(uint64_t id)
{
    struct tw_msg m = fx_register(id, 0xabc, 0, 24);
    m.hdr.flags = TW_FRAME_MORE;
    return m;
}

static void legal_eager_rdma_put(void)
{
    struct sm_pair p;
    ready(&p, 0x4D, 0, 1);
    /* Pull. */
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_RDMA));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_done(1, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 1));
    both_idle(&p, 1);
    /* Push: the server registers its destination after PUT_ACCEPT. */
    OK_SEND(&p, C, fx_put(2, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(2, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_put_accept(2, TW_DP_RDMA));
    OK_SEND(&p, S, fx_register(2, 0xdef, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 2));
    OK_SEND(&p, C, fx_done(2, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 2));
    both_idle(&p, 2);
    /* Inline, answered before the server read the registration (what
     * tensorwired does): the server meets it after its PUT_ACCEPT(1). */
    SEND_FAILS(&p.c, fx_put(3, TW_XFER_WANT_RDMA, desc24()), 0);
    SEND_FAILS(&p.c, fx_register(3, 0xabc, 0, 24), 0);
    RECV(&p.s, fx_put(3, TW_XFER_WANT_RDMA, desc24()), 0);
    SEND_FAILS(&p.s, fx_put_accept(3, TW_DP_INLINE), 0);
    RECV(&p.s, fx_register(3, 0xabc, 0, 24), 0);
    RECV(&p.c, fx_put_accept(3, TW_DP_INLINE), 0);
    OK_SEND(&p, C, fx_data(3, 0, bytes24, 24, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 3));
    both_idle(&p, 3);
    /* Inline, answered after reading it. */
    OK_SEND(&p, C, fx_put(4, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(4, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_put_accept(4, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(4, 0, bytes24, 10, 1));
    OK_SEND(&p, C, fx_data(4, 10, bytes24 + 10, 14, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 4));
    both_idle(&p, 4);
    /* Refused after the registration was read, and refused before it
     * arrived (stale). */
    OK_SEND(&p, C, fx_put(5, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(5, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_error(5, TW_WIRE_DEVICE_UNAVAILABLE, "no cuda:7"));
    both_idle(&p, 5);
    SEND_FAILS(&p.c, fx_put(6, TW_XFER_WANT_RDMA, desc24()), 0);
    SEND_FAILS(&p.c, fx_register(6, 0xabc, 0, 24), 0);
    RECV(&p.s, fx_put(6, TW_XFER_WANT_RDMA, desc24()), 0);
    SEND_FAILS(&p.s, fx_error(6, TW_WIRE_CAPACITY_EXCEEDED, "full"), 0);
    RECV(&p.s, fx_register(6, 0xabc, 0, 24), TW_SM_STALE);
    RECV(&p.c, fx_error(6, TW_WIRE_CAPACITY_EXCEEDED, "full"), 0);
    both_idle(&p, 6);
    end_ready(&p);
}

static void eager_rdma_put_violations(void)
{
    struct sm_pair p;
    /* Without bit 6 the client waits for PUT_ACCEPT. */
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    REFUSED(&p.c, &p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Not for a put without WANT_RDMA, not from the server. */
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    REFUSED(&p.c, &p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    REFUSED(&p.s, &p.c, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Once only: not twice ahead, not again after PUT_ACCEPT(2) (the
     * source registering twice) or PUT_ACCEPT(1). */
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    REFUSED(&p.c, &p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_RDMA));
    RECV(&p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    REFUSED(&p.c, &p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* After PUT_ACCEPT(1), only before the first DATA. */
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 10, 1));
    RECV(&p.s, fx_register(1, 0xabc, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* No MORE on it; its length is the put's (request-level). */
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    RECV(&p.s, reg_more24(1), TW_EBAD_FLAGS);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    ready(&p, 0x45, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    RECV(&p.s, fx_register(1, 0xabc, 0, 23), TW_EBAD_FIELD);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    TW_ASSERT(!tw__sm_request_active(&p.s, 1));
    pair_destroy(&p);
    /* Still no DATA ahead of PUT_ACCEPT for an RDMA put. */
    ready(&p, 0x55, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    REFUSED(&p.c, &p.s, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

static void legal_rdma_pull_get(void)
{
    struct sm_pair p;
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_RDMA, desc24()));
    OK_SEND(&p, S, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, C, fx_done(1, 0, 24));
    both_idle(&p, 1);
    pair_destroy(&p);
}

/* Bit 7: a get asked with ATTACH_READ is pulled (its source may come
 * without a key: rkey 0), never pushed, and asked only once negotiated. */
static void attach_read_get(void)
{
    struct sm_pair p;
    const uint8_t flags = TW_XFER_WANT_RDMA | TW_XFER_ATTACH_READ;
    ready(&p, 0x85, 0, 1);
    OK_SEND(&p, C, fx_request(1, flags, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_RDMA, desc24()));
    OK_SEND(&p, S, fx_register(1, 0, 0x7f0000001000ull, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, C, fx_done(1, 0, 24));
    /* The server may answer inline (§4.7): the flag is then moot. */
    OK_SEND(&p, C, fx_request(3, flags, "layer0.weight"));
    OK_SEND(&p, S, fx_info(3, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(3, 0, bytes24, 24, 0));
    both_idle(&p, 2);
    pair_destroy(&p);
    /* With bit 3 a plain get may be pushed; this one may not. */
    ready(&p, 0x8D, 0, 1);
    OK_SEND(&p, C, fx_request(1, flags, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_RDMA, desc24()));
    OK_SEND(&p, S, fx_register(1, 0, 0x7f0000001000ull, 24));
    REFUSED(&p.c, &p.s, fx_register(1, 0xdef, 0x7f0000002000ull, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Not without bit 7. */
    ready(&p, 0x5, 0, 1);
    REFUSED(&p.c, &p.s, fx_request(1, flags, "layer0.weight"), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
}

static void legal_gpudirect_push_get(void)
{
    struct sm_pair p;
    ready(&p, 0xD, 0, 1);
    OK_SEND(&p, C, fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_RDMA, desc24()));
    OK_SEND(&p, S, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, C, fx_register(1, 0xdef, 0x7f0000000000ull, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_done(1, 0, 24));
    both_idle(&p, 1);
    pair_destroy(&p);
}

static void legal_rdma_pull_put(void)
{
    struct sm_pair p;
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_RDMA));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_done(1, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 1));
    both_idle(&p, 1);
    pair_destroy(&p);
}

static void legal_gpudirect_push_put(void)
{
    struct sm_pair p;
    ready(&p, 0xF, 1, 1);
    struct tw_descriptor d = desc24();
    d.device_tag = fx_str("cuda:0");
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, d));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_RDMA));
    OK_SEND(&p, C, fx_register(1, 0xabc, 0, 24));
    OK_SEND(&p, S, fx_register(1, 0xdef, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, C, fx_done(1, 0, 24));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_CHECKSUM_MISMATCH, "crc32c 0x1 != 0x2"));
    both_idle(&p, 1);
    pair_destroy(&p);
}

/* ---- more legal sequences ---------------------------------------------- */

static void legal_misc_requests(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_LIST, 1, "layer"));
    struct tw_msg lr = fx_msg(TW_TAG_LIST_REPLY, 1);
    lr.hdr.flags = TW_FRAME_MORE;
    OK_SEND(&p, S, lr);
    OK_SEND(&p, S, lr);
    TW_ASSERT(tw__sm_request_active(&p.c, 1));
    lr.hdr.flags = 0;
    OK_SEND(&p, S, lr);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 2, "layer0.weight"));
    OK_SEND(&p, S, fx_info(2, TW_DP_NONE, desc24()));
    OK_SEND(&p, C, fx_name_msg(TW_TAG_DELETE, 3, "layer0.weight"));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 3));
    OK_SEND(&p, C, fx_ping(TW_TAG_PING, 4, "12345678"));
    OK_SEND(&p, S, fx_ping(TW_TAG_PONG, 4, "12345678"));
    OK_SEND(&p, C, fx_msg(TW_TAG_STATS, 5));
    OK_SEND(&p, S, fx_msg(TW_TAG_STATS_REPLY, 5));
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 6, "missing"));
    OK_SEND(&p, S, fx_error(6, TW_WIRE_NOT_FOUND, "no tensor \"missing\""));
    both_idle(&p, 6);
    /* Ids may skip values: only "strictly increasing" is required. */
    OK_SEND(&p, C, fx_msg(TW_TAG_STATS, 100));
    OK_SEND(&p, S, fx_msg(TW_TAG_STATS_REPLY, 100));
    OK_SEND(&p, C, fx_goodbye(0));
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_CLOSING);
    pair_destroy(&p);
}

static void legal_zero_byte_and_chunked(void)
{
    struct sm_pair p;
    ready(&p, 0x3, 0, 0);
    uint64_t zero[1] = {0};
    struct tw_descriptor d0 = fx_desc("empty", "cpu", TW_DTYPE_F32, 1, zero);
    OK_SEND(&p, C, fx_put(1, 0, d0));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(1, 0, NULL, 0, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 1));
    /* 24 bytes in 24 one-byte frames, with a CRC32C in the descriptor. */
    struct tw_descriptor d = desc24();
    d.flags = TW_DESC_HAS_CRC32C;
    d.crc32c = tw__crc32c(0, bytes24, 24);
    OK_SEND(&p, C, fx_request(2, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(2, TW_DP_INLINE, d));
    for (unsigned i = 0; i < 24; i++)
        OK_SEND(&p, S, fx_data(2, i, bytes24 + i, 1, i < 23));
    both_idle(&p, 2);
    pair_destroy(&p);
}

static void legal_rdma_downgraded_to_inline(void)
{
    struct sm_pair p;
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 24, 0));
    OK_SEND(&p, C, fx_put(2, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, S, fx_put_accept(2, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(2, 0, bytes24, 24, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_OK, 2));
    both_idle(&p, 2);
    pair_destroy(&p);
}

static void legal_device_unavailable(void)
{
    struct sm_pair p;
    ready(&p, 0xF, 0, 1);
    struct tw_descriptor d = desc24();
    d.device_tag = fx_str("cuda:7");
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, d));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_DEVICE_UNAVAILABLE, "no device cuda:7 (server has 2 GPUs)"));
    both_idle(&p, 1);
    /* After PUT_ACCEPT it is too late for DEVICE_UNAVAILABLE (ADR-012). */
    OK_SEND(&p, C, fx_put(2, TW_XFER_WANT_RDMA, d));
    OK_SEND(&p, S, fx_put_accept(2, TW_DP_RDMA));
    SEND_FAILS(&p.s, fx_error(2, TW_WIRE_DEVICE_UNAVAILABLE, ""), TW_EOUT_OF_ORDER);
    RECV(&p.c, fx_error(2, TW_WIRE_DEVICE_UNAVAILABLE, ""), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

static void legal_error_mid_transfer(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    /* Server gives up on an inline put half way; the client's DATA that
     * crossed the ERROR is stale on the server. */
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    OK_SEND(&p, C, fx_data(1, 0, bytes24, 8, 1));
    struct tw_msg late = fx_data(1, 8, bytes24 + 8, 8, 1);
    TW_ASSERT_OK(tw__sm_on_send(&p.c, &late));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_CAPACITY_EXCEEDED, "store full"));
    RECV(&p.s, late, TW_SM_STALE);
    both_idle(&p, 1);
    /* Client cancels a get; the server's DATA crossing it is stale. */
    OK_SEND(&p, C, fx_request(2, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(2, TW_DP_INLINE, desc24()));
    struct tw_msg d1 = fx_data(2, 0, bytes24, 8, 1);
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &d1));
    OK_SEND(&p, C, fx_error(2, TW_WIRE_CANCELLED, "deadline passed"));
    RECV(&p.c, d1, TW_SM_STALE);
    /* The server's final reply crossing a cancel: the cancel is stale. */
    OK_SEND(&p, C, fx_name_msg(TW_TAG_DELETE, 3, "x"));
    struct tw_msg cancel = fx_error(3, TW_WIRE_CANCELLED, "");
    TW_ASSERT_OK(tw__sm_on_send(&p.c, &cancel));
    struct tw_msg ok3 = fx_msg(TW_TAG_OK, 3);
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &ok3));
    RECV(&p.c, ok3, TW_SM_STALE);
    RECV(&p.s, cancel, TW_SM_STALE);
    /* RDMA put failing after the data moved. */
    both_idle(&p, 3);
    pair_destroy(&p);
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_RDMA));
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_done(1, TW_WIRE_INTERNAL, 0));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_INTERNAL, "fi_read: remote access error"));
    both_idle(&p, 1);
    pair_destroy(&p);
}

/* ---- handshake violations ------------------------------------------------ */

static void requests_before_ready(void)
{
    struct sm_pair p;
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    SEND_FAILS(&p.c, fx_request(1, 0, "x"), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_request(1, 0, "x"), TW_EOUT_OF_ORDER);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    /* After HELLO/HELLO_ACK but before AUTH_OK. */
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    OK_SEND(&p, S, fx_hello_ack(0x1, 1u << 20, 8, TW_AUTH_HMAC_SHA256, "s"));
    SEND_FAILS(&p.c, fx_request(1, 0, "x"), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 1, "x"), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x5, 1u << 20, 8, "c"));
    OK_SEND(&p, S, fx_hello_ack(0x5, 1u << 20, 8, TW_AUTH_HMAC_SHA256, "s"));
    OK_SEND(&p, C, fx_msg(TW_TAG_AUTH, 0));
    RECV(&p.s, fx_endpoint(TW_EP_OFFER), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    /* Limits stay low until the handshake completes. */
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    OK_SEND(&p, S, fx_hello_ack(0x1, 1u << 20, 8, TW_AUTH_HMAC_SHA256, "s"));
    TW_ASSERT_EQ(p.s.max_frame, TW_PREAUTH_MAX_FRAME);
    TW_ASSERT_EQ(p.c.max_frame, TW_PREAUTH_MAX_FRAME);
    OK_SEND(&p, C, fx_msg(TW_TAG_AUTH, 0));
    OK_SEND(&p, S, fx_msg(TW_TAG_AUTH_OK, 0));
    TW_ASSERT_EQ(p.s.max_frame, 1u << 20);
    pair_destroy(&p);
}

static void handshake_violations(void)
{
    struct sm_pair p;
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x5, 1u << 20, 8, "c"));
    RECV(&p.s, fx_hello(0x5, 1u << 20, 8, "c"), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    TW_ASSERT_OK(pair_init(&p, 8, 8));
    SEND_FAILS(&p.s, fx_hello(0x5, 1u << 20, 8, "c"), TW_EBAD_DIRECTION);
    RECV(&p.c, fx_hello(0x5, 1u << 20, 8, "c"), TW_EBAD_DIRECTION);
    pair_destroy(&p);

    /* HELLO_ACK must be an intersection within the offered limits. */
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    SEND_FAILS(&p.s, fx_hello_ack(0x3, 1u << 20, 8, 0, "s"), TW_EBAD_CAPS);
    RECV(&p.c, fx_hello_ack(0x3, 1u << 20, 8, 0, "s"), TW_EBAD_CAPS);
    pair_destroy(&p);
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    RECV(&p.c, fx_hello_ack(0x1, 2u << 20, 8, 0, "s"), TW_EBAD_FIELD);
    pair_destroy(&p);
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    RECV(&p.c, fx_hello_ack(0x1, 1u << 20, 9, 0, "s"), TW_EBAD_FIELD);
    pair_destroy(&p);
    /* A server with a smaller table must not agree to more. */
    TW_ASSERT_OK(pair_init(&p, 8, 2));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    SEND_FAILS(&p.s, fx_hello_ack(0x1, 1u << 20, 8, 0, "s"), TW_EBAD_FIELD);
    OK_SEND(&p, S, fx_hello_ack(0x1, 1u << 20, 2, 0, "s"));
    /* AUTH when none was asked for. */
    RECV(&p.s, fx_msg(TW_TAG_AUTH, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    /* A client announcing more than it tracks is a local bug. */
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    SEND_FAILS(&p.c, fx_hello(0x1, 1u << 20, 9, "c"), TW_EBAD_FIELD);
    /* Server refuses the handshake: ERROR id 0, then both are dead. */
    OK_SEND(&p, C, fx_hello(0x2, 1u << 20, 8, "c"));
    OK_SEND(&p, S, fx_error(0, TW_WIRE_PROTOCOL_ERROR, "no common data plane"));
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    SEND_FAILS(&p.c, fx_msg(TW_TAG_AUTH, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    /* Unauthorized: ERROR(UNAUTHORIZED, 0) after a bad MAC. */
    TW_ASSERT_OK(pair_init(&p, 8, 8));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 8, "c"));
    OK_SEND(&p, S, fx_hello_ack(0x1, 1u << 20, 8, TW_AUTH_HMAC_SHA256, "s"));
    OK_SEND(&p, C, fx_msg(TW_TAG_AUTH, 0));
    OK_SEND(&p, S, fx_error(0, TW_WIRE_UNAUTHORIZED, "bad token"));
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
}

static void direction_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    SEND_FAILS(&p.s, fx_request(1, 0, "x"), TW_EBAD_DIRECTION);
    RECV(&p.c, fx_request(1, 0, "x"), TW_EBAD_DIRECTION);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    RECV(&p.s, fx_info(1, TW_DP_INLINE, desc24()), TW_EBAD_DIRECTION);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    /* DATA of a get comes from the server only. */
    SEND_FAILS(&p.c, fx_data(1, 0, bytes24, 24, 0), TW_EBAD_DIRECTION);
    RECV(&p.s, fx_data(1, 0, bytes24, 24, 0), TW_EBAD_DIRECTION);
    pair_destroy(&p);
}

/* ---- request ids --------------------------------------------------------- */

static void request_id_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 5, "a"));
    SEND_FAILS(&p.c, fx_name_msg(TW_TAG_STAT, 5, "a"), TW_EDUP_REQUEST);
    SEND_FAILS(&p.c, fx_name_msg(TW_TAG_STAT, 4, "a"), TW_EDUP_REQUEST);
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 5, "a"), TW_EDUP_REQUEST);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 5, "a"));
    OK_SEND(&p, S, fx_error(5, TW_WIRE_NOT_FOUND, ""));
    /* Ended ids are never reused, even after the request finished. */
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 3, "a"), TW_EDUP_REQUEST);
    pair_destroy(&p);

    ready(&p, 0x1, 0, 0);
    /* A reply for an id never opened. */
    RECV(&p.c, fx_msg(TW_TAG_OK, 1), TW_EUNKNOWN_REQUEST);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    SEND_FAILS(&p.s, fx_msg(TW_TAG_OK, 1), TW_EUNKNOWN_REQUEST);
    RECV(&p.s, fx_data(7, 0, bytes24, 1, 0), TW_EUNKNOWN_REQUEST);
    pair_destroy(&p);
}

static void too_many_inflight(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0); /* negotiated max_inflight 4 */
    for (uint64_t id = 1; id <= 4; id++)
        OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, id, "a"));
    SEND_FAILS(&p.c, fx_name_msg(TW_TAG_STAT, 5, "a"), TW_ETOO_MANY_INFLIGHT);
    /* A client that ignores the limit gets BUSY; the connection lives. */
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 5, "a"), TW_ETOO_MANY_INFLIGHT);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    TW_ASSERT_EQ(p.s.inflight, 4);
    TW_ASSERT_EQ(tw__sm_verdict_wire_code(TW_ETOO_MANY_INFLIGHT), TW_WIRE_BUSY);
    struct tw_msg busy = fx_error(5, TW_WIRE_BUSY, "too many requests in flight");
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &busy));
    /* The rejected id is consumed. */
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 5, "a"), TW_EDUP_REQUEST);
    pair_destroy(&p);

    ready(&p, 0x1, 0, 0);
    for (uint64_t id = 1; id <= 4; id++)
        OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, id, "a"));
    OK_SEND(&p, S, fx_error(2, TW_WIRE_NOT_FOUND, ""));
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 5, "a"));
    TW_ASSERT_EQ(p.c.inflight, 4);
    pair_destroy(&p);
}

static void stale_after_error(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 8, 1));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_INTERNAL, "read failed"));
    /* Anything later for id 1 is discarded on both sides. */
    RECV(&p.c, fx_data(1, 8, bytes24 + 8, 16, 0), TW_SM_STALE);
    RECV(&p.c, fx_error(1, TW_WIRE_INTERNAL, ""), TW_SM_STALE);
    RECV(&p.s, fx_error(1, TW_WIRE_CANCELLED, ""), TW_SM_STALE);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_READY);
    /* ...but the side that ended it may not send for it any more. */
    SEND_FAILS(&p.s, fx_data(1, 8, bytes24 + 8, 16, 0), TW_EUNKNOWN_REQUEST);
    pair_destroy(&p);
}

static void request_level_rejection(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    /* The decoder refuses a bad name; the server consumes the id. */
    uint8_t buf[64];
    struct tw_msg bad = fx_request(3, 0, "x");
    TW_ASSERT_EQ(tw__msg_encode(&bad, buf, sizeof(buf)), 29);
    buf[28] = 0xFF;
    struct tw_msg d;
    ssize_t v = tw__msg_decode(buf, 29, p.s.max_frame, &d);
    TW_ASSERT_ERR(v, TW_EBAD_NAME);
    TW_ASSERT(!tw__sm_verdict_is_fatal((int)v, TW_TAG_TENSOR_REQUEST));
    struct tw_frame_header h;
    TW_ASSERT_OK(tw__frame_decode_header(buf, 29, p.s.max_frame, &h));
    TW_ASSERT_OK(tw__sm_reject_request(&p.s, &h));
    TW_ASSERT_EQ_U64(p.s.highest_request_id, 3);
    TW_ASSERT_ERR(tw__sm_reject_request(&p.s, &h), TW_EDUP_REQUEST);
    pair_destroy(&p);

    ready(&p, 0x1, 0, 0);
    TW_ASSERT_OK(tw__sm_on_send(&p.c, &bad)); /* the client thinks the name is fine */
    TW_ASSERT_OK(tw__sm_reject_request(&p.s, &h));
    OK_SEND(&p, S, fx_error(3, TW_WIRE_INVALID_ARGUMENT, "name is not valid UTF-8"));
    both_idle(&p, 3);
    OK_SEND(&p, C, fx_request(4, 0, "layer0.weight"));
    /* A rejection may only be for a request-opening frame. */
    h.tag = TW_TAG_OK;
    h.request_id = 9;
    TW_ASSERT_ERR(tw__sm_reject_request(&p.s, &h), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

/* ---- RDMA endpoint -------------------------------------------------------- */

static void endpoint_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    SEND_FAILS(&p.c, fx_endpoint(TW_EP_OFFER), TW_ENOT_NEGOTIATED);
    RECV(&p.s, fx_endpoint(TW_EP_OFFER), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    ready(&p, 0x5, 0, 0);
    RECV(&p.c, fx_endpoint(TW_EP_ACCEPT), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x5, 0, 0);
    SEND_FAILS(&p.s, fx_endpoint(TW_EP_OFFER), TW_EBAD_DIRECTION);
    SEND_FAILS(&p.c, fx_endpoint(TW_EP_ACCEPT), TW_EBAD_DIRECTION);
    /* WANT_RDMA before ACCEPT (none sent, then pending, then declined). */
    SEND_FAILS(&p.c, fx_request(1, TW_XFER_WANT_RDMA, "x"), TW_ENOT_NEGOTIATED);
    RECV(&p.s, fx_request(1, TW_XFER_WANT_RDMA, "x"), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY); /* request-level: INVALID_ARGUMENT */
    OK_SEND(&p, C, fx_endpoint(TW_EP_OFFER));
    RECV(&p.s, fx_put(2, TW_XFER_WANT_RDMA, desc24()), TW_ENOT_NEGOTIATED);
    /* Plain requests are fine while the offer is pending. */
    OK_SEND(&p, C, fx_msg(TW_TAG_STATS, 3));
    RECV(&p.s, fx_endpoint(TW_EP_OFFER), TW_EOUT_OF_ORDER); /* only once */
    pair_destroy(&p);
    ready(&p, 0x5, 0, 0);
    OK_SEND(&p, C, fx_endpoint(TW_EP_OFFER));
    OK_SEND(&p, S, fx_endpoint(TW_EP_DECLINE));
    TW_ASSERT_EQ(p.c.fabric_state, TW_SM_FABRIC_DECLINED);
    SEND_FAILS(&p.c, fx_request(1, TW_XFER_WANT_RDMA, "x"), TW_ENOT_NEGOTIATED);
    SEND_FAILS(&p.c, fx_endpoint(TW_EP_OFFER), TW_EOUT_OF_ORDER);
    SEND_FAILS(&p.s, fx_endpoint(TW_EP_ACCEPT), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

/* ---- RDMA sequences --------------------------------------------------------- */

static void rdma_get_to_register(struct sm_pair *p, uint64_t caps)
{
    ready(p, caps, 0, 1);
    OK_SEND(p, C, fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight"));
    OK_SEND(p, S, fx_info(1, TW_DP_RDMA, desc24()));
}

static void rdma_put_to_register(struct sm_pair *p, uint64_t caps)
{
    ready(p, caps, 0, 1);
    OK_SEND(p, C, fx_put(1, TW_XFER_WANT_RDMA, desc24()));
    OK_SEND(p, S, fx_put_accept(1, TW_DP_RDMA));
}

static void rdma_ready_before_source_register(void)
{
    struct sm_pair p;
    rdma_get_to_register(&p, 0xD);
    SEND_FAILS(&p.c, fx_msg(TW_TAG_RDMA_READY, 1), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_msg(TW_TAG_RDMA_READY, 1), TW_EOUT_OF_ORDER);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    rdma_put_to_register(&p, 0xD);
    SEND_FAILS(&p.s, fx_msg(TW_TAG_RDMA_READY, 1), TW_EOUT_OF_ORDER);
    RECV(&p.c, fx_msg(TW_TAG_RDMA_READY, 1), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

static void second_register_without_gpudirect(void)
{
    struct sm_pair p;
    rdma_get_to_register(&p, 0x5);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    SEND_FAILS(&p.c, fx_register(1, 2, 0, 24), TW_ENOT_NEGOTIATED);
    RECV(&p.s, fx_register(1, 2, 0, 24), TW_ENOT_NEGOTIATED);
    TW_ASSERT(tw__sm_verdict_is_fatal(TW_ENOT_NEGOTIATED, TW_TAG_RDMA_REGISTER));
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    rdma_put_to_register(&p, 0x5);
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    RECV(&p.c, fx_register(1, 2, 0, 24), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
}

static void register_from_wrong_side(void)
{
    struct sm_pair p;
    /* Destination (client of a get) registering before the source. */
    rdma_get_to_register(&p, 0xD);
    SEND_FAILS(&p.c, fx_register(1, 2, 0, 24), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_register(1, 2, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Source registering twice. */
    rdma_get_to_register(&p, 0xD);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    SEND_FAILS(&p.s, fx_register(1, 1, 0, 24), TW_EOUT_OF_ORDER);
    RECV(&p.c, fx_register(1, 1, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* A third registration. */
    rdma_put_to_register(&p, 0xD);
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    OK_SEND(&p, S, fx_register(1, 2, 0, 24));
    RECV(&p.s, fx_register(1, 3, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Registration after RDMA_READY. */
    rdma_put_to_register(&p, 0xD);
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    RECV(&p.c, fx_register(1, 2, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* Registration on an inline transfer. */
    ready(&p, 0xD, 0, 1);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    RECV(&p.c, fx_register(1, 1, 0, 24), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

static void ready_and_done_violations(void)
{
    struct sm_pair p;
    rdma_get_to_register(&p, 0xD);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    /* RDMA_READY comes from the destination owner only. */
    SEND_FAILS(&p.s, fx_msg(TW_TAG_RDMA_READY, 1), TW_EBAD_DIRECTION);
    RECV(&p.c, fx_msg(TW_TAG_RDMA_READY, 1), TW_EBAD_DIRECTION);
    pair_destroy(&p);

    rdma_get_to_register(&p, 0xD);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    RECV(&p.s, fx_done(1, 0, 24), TW_EOUT_OF_ORDER); /* DONE before READY */
    pair_destroy(&p);

    /* Pull: the reader (destination) reports; the source may not. */
    rdma_get_to_register(&p, 0xD);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    SEND_FAILS(&p.c, fx_msg(TW_TAG_RDMA_READY, 1), TW_EOUT_OF_ORDER);
    SEND_FAILS(&p.s, fx_done(1, 0, 24), TW_EBAD_DIRECTION);
    SEND_FAILS(&p.c, fx_done(1, 0, 23), TW_EBAD_LENGTH);
    OK_SEND(&p, C, fx_done(1, 0, 24));
    pair_destroy(&p);

    /* Push: the writer (source) reports. */
    rdma_put_to_register(&p, 0xD);
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    OK_SEND(&p, S, fx_register(1, 2, 0, 24));
    OK_SEND(&p, S, fx_msg(TW_TAG_RDMA_READY, 1));
    RECV(&p.c, fx_done(1, 0, 24), TW_EBAD_DIRECTION);
    pair_destroy(&p);

    /* OK before the data moved. */
    rdma_put_to_register(&p, 0x5);
    OK_SEND(&p, C, fx_register(1, 1, 0, 24));
    RECV(&p.c, fx_msg(TW_TAG_OK, 1), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

/* Bit 5: a source registration with MORE, then RDMA_AVAILABLE. */
static void legal_progressive_source(void)
{
    struct sm_pair p;
    /* Pull: the reader may end only once every byte was announced. */
    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_available(1, 8));
    SEND_FAILS(&p.c, fx_done(1, 0, 24), TW_EOUT_OF_ORDER);
    OK_SEND(&p, C, fx_done(1, TW_WIRE_INTERNAL, 8)); /* a failed read may end it */
    both_idle(&p, 1);
    pair_destroy(&p);

    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    OK_SEND(&p, S, fx_available(1, 1)); /* before RDMA_READY: legal */
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, S, fx_available(1, 24));
    OK_SEND(&p, C, fx_done(1, 0, 24));
    both_idle(&p, 1);
    pair_destroy(&p);

    /* Push: the destination registers; the source announces, then ends. */
    rdma_get_to_register(&p, 0x2D);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    OK_SEND(&p, C, fx_register(1, 2, 0, 24));
    OK_SEND(&p, S, fx_available(1, 16));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    SEND_FAILS(&p.s, fx_done(1, 0, 24), TW_EOUT_OF_ORDER);
    OK_SEND(&p, S, fx_available(1, 24));
    OK_SEND(&p, S, fx_done(1, 0, 24));
    both_idle(&p, 1);
    pair_destroy(&p);
}

static void progressive_violations(void)
{
    struct sm_pair p;
    /* MORE without bit 5. */
    rdma_get_to_register(&p, 0x5);
    SEND_FAILS(&p.s, fx_register_more(1, 1, 0, 24), TW_ENOT_NEGOTIATED);
    RECV(&p.c, fx_register_more(1, 1, 0, 24), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    /* MORE on a put's source registration (the client's): gets only. */
    rdma_put_to_register(&p, 0x25);
    SEND_FAILS(&p.c, fx_register_more(1, 1, 0, 24), TW_EBAD_FLAGS);
    RECV(&p.s, fx_register_more(1, 1, 0, 24), TW_EBAD_FLAGS);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    /* MORE on the destination's registration. */
    rdma_get_to_register(&p, 0x2D);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    SEND_FAILS(&p.c, fx_register_more(1, 2, 0, 24), TW_EBAD_FLAGS);
    RECV(&p.s, fx_register_more(1, 2, 0, 24), TW_EBAD_FLAGS);
    pair_destroy(&p);
    /* RDMA_AVAILABLE after a plain registration, from the destination,
     * not increasing, past the end, and after the last byte. */
    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register(1, 1, 0, 24));
    RECV(&p.c, fx_available(1, 8), TW_EOUT_OF_ORDER);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    SEND_FAILS(&p.c, fx_available(1, 8), TW_EBAD_DIRECTION);
    RECV(&p.s, fx_available(1, 8), TW_EBAD_DIRECTION);
    pair_destroy(&p);
    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    OK_SEND(&p, S, fx_available(1, 8));
    SEND_FAILS(&p.s, fx_available(1, 8), TW_EBAD_LENGTH);
    SEND_FAILS(&p.s, fx_available(1, 4), TW_EBAD_LENGTH);
    SEND_FAILS(&p.s, fx_available(1, 25), TW_EBAD_LENGTH);
    OK_SEND(&p, S, fx_available(1, 24));
    RECV(&p.c, fx_available(1, 24), TW_EBAD_LENGTH);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
    /* Before any registration, and on an inline get. */
    rdma_get_to_register(&p, 0x25);
    RECV(&p.c, fx_available(1, 8), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x25, 0, 1);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    RECV(&p.c, fx_available(1, 8), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* After the request ended: stale, discarded. */
    rdma_get_to_register(&p, 0x25);
    OK_SEND(&p, S, fx_register_more(1, 1, 0, 24));
    OK_SEND(&p, C, fx_msg(TW_TAG_RDMA_READY, 1));
    OK_SEND(&p, C, fx_error(1, TW_WIRE_CANCELLED, "deadline"));
    {
        struct tw_msg a = fx_available(1, 24);
        TW_ASSERT_EQ(pair_recv_only(&p.c, &a), TW_SM_STALE);
    }
    pair_destroy(&p);
}

static void register_length_mismatch(void)
{
    struct sm_pair p;
    rdma_get_to_register(&p, 0xD);
    SEND_FAILS(&p.s, fx_register(1, 1, 0, 23), TW_EBAD_FIELD);
    RECV(&p.c, fx_register(1, 1, 0, 23), TW_EBAD_FIELD);
    /* Request-level: the client answers ERROR(INVALID_ARGUMENT, 1). */
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_READY);
    TW_ASSERT(!tw__sm_request_active(&p.c, 1));
    struct tw_msg e = fx_error(1, TW_WIRE_INVALID_ARGUMENT, "registration length 23 != 24");
    TW_ASSERT_OK(tw__sm_on_send(&p.c, &e));
    TW_ASSERT_OK(pair_recv_only(&p.s, &e));
    both_idle(&p, 1);
    pair_destroy(&p);
}

static void rdma_info_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    /* The server may downgrade, never upgrade. */
    SEND_FAILS(&p.s, fx_info(1, TW_DP_RDMA, desc24()), TW_ENOT_NEGOTIATED);
    RECV(&p.c, fx_info(1, TW_DP_RDMA, desc24()), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
    ready(&p, 0x5, 0, 1);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    RECV(&p.c, fx_put_accept(1, TW_DP_RDMA), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
    /* DATA on the RDMA plane. */
    rdma_get_to_register(&p, 0x5);
    RECV(&p.c, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    /* RDMA-only peers: no inline plane without WANT_RDMA. */
    ready(&p, 0x4, 0, 1);
    SEND_FAILS(&p.c, fx_request(1, 0, "layer0.weight"), TW_ENOT_NEGOTIATED);
    OK_SEND(&p, C, fx_request(1, TW_XFER_WANT_RDMA, "layer0.weight"));
    SEND_FAILS(&p.s, fx_info(1, TW_DP_INLINE, desc24()), TW_ENOT_NEGOTIATED);
    pair_destroy(&p);
}

/* ---- inline DATA ----------------------------------------------------------- */

static void inline_get_to_data(struct sm_pair *p)
{
    ready(p, 0x3, 0, 0);
    OK_SEND(p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(p, S, fx_info(1, TW_DP_INLINE, desc24()));
}

static void data_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x3, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    RECV(&p.c, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER); /* before TENSOR_INFO */
    pair_destroy(&p);

    inline_get_to_data(&p);
    uint8_t big[32] = {0};
    SEND_FAILS(&p.s, fx_data(1, 0, big, 25, 0), TW_EBAD_LENGTH); /* past byte_length */
    RECV(&p.c, fx_data(1, 0, big, 25, 0), TW_EBAD_LENGTH);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    inline_get_to_data(&p);
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 20, 1));
    RECV(&p.c, fx_data(1, 20, bytes24, 5, 1), TW_EBAD_LENGTH);
    pair_destroy(&p);

    inline_get_to_data(&p);
    RECV(&p.c, fx_data(1, 0, bytes24, 23, 0), TW_EBAD_LENGTH); /* last frame short */
    pair_destroy(&p);

    inline_get_to_data(&p);
    RECV(&p.c, fx_data(1, 0, bytes24, 24, 1), TW_EBAD_LENGTH); /* all bytes, MORE set */
    pair_destroy(&p);

    inline_get_to_data(&p);
    RECV(&p.c, fx_data(1, 0, bytes24, 0, 1), TW_EBAD_LENGTH); /* empty non-final */
    pair_destroy(&p);

    inline_get_to_data(&p);
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 8, 1));
    RECV(&p.c, fx_data(1, 9, bytes24, 8, 1), TW_EOUT_OF_ORDER); /* gap */
    pair_destroy(&p);

    inline_get_to_data(&p);
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 8, 1));
    RECV(&p.c, fx_data(1, 0, bytes24, 8, 1), TW_EOUT_OF_ORDER); /* repeat */
    pair_destroy(&p);

    /* After the last DATA the request is over: more DATA is stale. */
    inline_get_to_data(&p);
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 24, 0));
    RECV(&p.c, fx_data(1, 24, bytes24, 1, 0), TW_SM_STALE);
    pair_destroy(&p);

    /* Put: DATA before PUT_ACCEPT. */
    ready(&p, 0x3, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    SEND_FAILS(&p.c, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_data(1, 0, bytes24, 24, 0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

static void reply_violations(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 1, "a"));
    RECV(&p.c, fx_info(1, TW_DP_INLINE, desc24()), TW_EBAD_FIELD);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "a"));
    RECV(&p.c, fx_info(1, TW_DP_NONE, desc24()), TW_EBAD_FIELD);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_ping(TW_TAG_PING, 1, "abcdefgh"));
    RECV(&p.c, fx_ping(TW_TAG_PONG, 1, "abcdefgX"), TW_EBAD_FIELD);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_ping(TW_TAG_PING, 1, "abcdefgh"));
    RECV(&p.c, fx_msg(TW_TAG_OK, 1), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    RECV(&p.c, fx_put_accept(1, TW_DP_INLINE), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_put(1, 0, desc24()));
    OK_SEND(&p, S, fx_put_accept(1, TW_DP_INLINE));
    RECV(&p.c, fx_msg(TW_TAG_OK, 1), TW_EOUT_OF_ORDER); /* OK before the data */
    pair_destroy(&p);
    /* CRC32C without its capability. */
    ready(&p, 0x1, 0, 0);
    struct tw_descriptor d = desc24();
    d.flags = TW_DESC_HAS_CRC32C;
    d.crc32c = 1;
    SEND_FAILS(&p.c, fx_put(1, 0, d), TW_ENOT_NEGOTIATED);
    RECV(&p.s, fx_put(1, 0, d), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    OK_SEND(&p, C, fx_request(2, 0, "a"));
    RECV(&p.c, fx_info(2, TW_DP_INLINE, d), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    pair_destroy(&p);
}

/* ---- GOODBYE and connection errors ---------------------------------------- */

static void goodbye_rules(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, C, fx_goodbye(0));
    SEND_FAILS(&p.c, fx_request(2, 0, "a"), TW_EOUT_OF_ORDER);
    RECV(&p.s, fx_request(2, 0, "a"), TW_EOUT_OF_ORDER);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    /* In-flight requests finish after GOODBYE. */
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, C, fx_goodbye(0));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 24, 0));
    SEND_FAILS(&p.c, fx_goodbye(0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);

    /* Server shutdown: its GOODBYE crosses a new request. */
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_error(1, TW_WIRE_SHUTTING_DOWN, "server shutting down"));
    struct tw_msg bye = fx_goodbye(TW_WIRE_SHUTTING_DOWN);
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &bye));
    struct tw_msg late = fx_request(2, 0, "a");
    TW_ASSERT_OK(tw__sm_on_send(&p.c, &late));
    RECV(&p.s, late, TW_ESHUTDOWN);
    TW_ASSERT(!tw__sm_verdict_is_fatal(TW_ESHUTDOWN, TW_TAG_TENSOR_REQUEST));
    OK_SEND(&p, S, fx_error(2, TW_WIRE_SHUTTING_DOWN, ""));
    TW_ASSERT_OK(pair_recv_only(&p.c, &bye));
    SEND_FAILS(&p.c, fx_request(3, 0, "a"), TW_EOUT_OF_ORDER);
    both_idle(&p, 2);
    pair_destroy(&p);
}

/* Rules the spec left open until issue #9 (docs/protocol.md section 8,
 * "Which verdict, in which order"): one row each, so two peers written from
 * the text give the same verdict. */
static void spec_open_points(void)
{
    struct sm_pair p;
    /* Fix 3: an unused id between two used ones is stale, not unknown: a
     * receiver does not remember every id below the highest it saw. */
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 10, "a"));
    OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, 20, "a"));
    RECV(&p.s, fx_data(15, 0, bytes24, 1, 0), TW_SM_STALE);
    RECV(&p.s, fx_error(15, TW_WIRE_CANCELLED, ""), TW_SM_STALE);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    /* Above every id seen it is unknown (fatal). */
    RECV(&p.s, fx_data(21, 0, bytes24, 1, 0), TW_EUNKNOWN_REQUEST);
    pair_destroy(&p);

    /* Fix 4: a get ends at the server when it sends (queues) the DATA with
     * MORE clear. Client DATA for it while in flight is EBAD_DIRECTION;
     * after that point it is stale, like a crossing cancel. */
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    OK_SEND(&p, S, fx_data(1, 0, bytes24, 8, 1));
    RECV(&p.s, fx_data(1, 0, bytes24, 8, 1), TW_EBAD_DIRECTION);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    OK_SEND(&p, S, fx_info(1, TW_DP_INLINE, desc24()));
    struct tw_msg last = fx_data(1, 0, bytes24, 24, 0);
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &last)); /* queued, not yet read by the client */
    RECV(&p.s, fx_error(1, TW_WIRE_CANCELLED, ""), TW_SM_STALE);
    RECV(&p.s, fx_data(1, 0, bytes24, 8, 1), TW_SM_STALE);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    pair_destroy(&p);

    /* Fix 5: a request after the client's GOODBYE is fatal when read. */
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_goodbye(0));
    RECV(&p.s, fx_name_msg(TW_TAG_STAT, 1, "a"), TW_EOUT_OF_ORDER);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    pair_destroy(&p);

    /* Fix 6: the order of request-level checks: id order, shutdown,
     * max_inflight (BUSY), then capabilities (ENOT_NEGOTIATED); the
     * server's DEVICE_UNAVAILABLE and CAPACITY_EXCEEDED come after all of
     * them (handlers.c). */
    ready(&p, 0x1, 0, 0); /* inline only, no CRC32C, max_inflight 4 */
    for (uint64_t id = 1; id <= 4; id++)
        OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, id, "a"));
    RECV(&p.s, fx_request(5, TW_XFER_WANT_RDMA, "a"), TW_ETOO_MANY_INFLIGHT);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    struct tw_msg bye = fx_goodbye(TW_WIRE_SHUTTING_DOWN);
    TW_ASSERT_OK(tw__sm_on_send(&p.s, &bye));
    RECV(&p.s, fx_request(1, TW_XFER_WANT_RDMA, "a"), TW_ESHUTDOWN);
    pair_destroy(&p);
    ready(&p, 0x1, 0, 0);
    struct tw_descriptor crc = desc24();
    crc.flags |= TW_DESC_HAS_CRC32C;
    RECV(&p.s, fx_put(1, TW_XFER_WANT_RDMA, crc), TW_ENOT_NEGOTIATED);
    RECV(&p.s, fx_put(2, 0, crc), TW_ENOT_NEGOTIATED);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_READY);
    pair_destroy(&p);
}

static void fatal_error_kills_connection(void)
{
    struct sm_pair p;
    ready(&p, 0x1, 0, 0);
    OK_SEND(&p, C, fx_request(1, 0, "layer0.weight"));
    RECV(&p.s, fx_msg(TW_TAG_OK, 1), TW_EBAD_DIRECTION);
    TW_ASSERT_EQ(p.s.phase, TW_PHASE_DEAD);
    /* DEAD: only ERROR(id 0) may still be sent. */
    SEND_FAILS(&p.s, fx_info(1, TW_DP_INLINE, desc24()), TW_EOUT_OF_ORDER);
    SEND_FAILS(&p.s, fx_error(1, TW_WIRE_INTERNAL, ""), TW_EOUT_OF_ORDER);
    OK_SEND(&p, S, fx_error(0, TW_WIRE_PROTOCOL_ERROR, "OK from a client"));
    TW_ASSERT_EQ(p.c.phase, TW_PHASE_DEAD);
    RECV(&p.c, fx_goodbye(0), TW_EOUT_OF_ORDER);
    pair_destroy(&p);
}

/* ---- request table --------------------------------------------------------- */

static void table_churn(void)
{
    /* Open up to 64 requests, end them in a scrambled order, and check the
     * table against a plain array every few steps (Robin Hood insertion
     * and backward-shift deletion must never lose or invent an entry; a
     * lookup stops early where the order says the id cannot be). Ids
     * run far past the table's 128 slots while old ones stay open, so
     * their home slots collide. */
    struct sm_pair p;
    TW_ASSERT_OK(pair_init(&p, 64, 64));
    OK_SEND(&p, C, fx_hello(0x1, 1u << 20, 64, "c"));
    OK_SEND(&p, S, fx_hello_ack(0x1, 1u << 20, 64, 0, "s"));
    static uint8_t open_[4096 + 256]; /* ids up to 4095, then unused ones */
    uint64_t next = 1, live[64];
    uint32_t x = 1, nlive = 0;
    for (int step = 0; step < 3000; step++) {
        x = x * 1664525u + 1013904223u;
        if (p.c.inflight < 64 && ((x >> 16) & 1)) {
            if (next >= 4096)
                break;
            OK_SEND(&p, C, fx_name_msg(TW_TAG_STAT, next, "a"));
            open_[next++] = 1;
            live[nlive++] = next - 1;
        } else if (nlive > 0) {
            /* Any open one alike: old ids stay open beside new ones. */
            uint32_t k = (x >> 8) % nlive;
            uint64_t id = live[k];
            live[k] = live[--nlive];
            OK_SEND(&p, S, fx_error(id, TW_WIRE_NOT_FOUND, ""));
            open_[id] = 0;
        }
        if (step % 7 == 0)
            for (uint64_t id = 1; id < next + 130; id++) {
                TW_ASSERT_EQ(tw__sm_request_active(&p.c, id), open_[id]);
                TW_ASSERT_EQ(tw__sm_request_active(&p.s, id), open_[id]);
            }
    }
    pair_destroy(&p);
}

static void init_limits(void)
{
    struct tw_sm sm;
    TW_ASSERT_ERR(tw__sm_init(&sm, TW_ROLE_CLIENT, 0), TW_EINVAL);
    TW_ASSERT_ERR(tw__sm_init(&sm, TW_ROLE_CLIENT, 65537), TW_EINVAL);
    TW_ASSERT_OK(tw__sm_init(&sm, TW_ROLE_SERVER, 65536));
    TW_ASSERT(sm.table_cap >= 2 * 65536);
    TW_ASSERT_EQ(sm.phase, TW_PHASE_HELLO);
    TW_ASSERT_EQ(sm.max_frame, TW_PREAUTH_MAX_FRAME);
    TW_ASSERT_EQ(tw__sm_request_kind(&sm, 1), TW_REQ_NONE);
    tw__sm_destroy(&sm);
    tw__sm_destroy(&sm); /* idempotent */
}

int main(void)
{
    TW_RUN(legal_inline_get);
    TW_RUN(legal_inline_put);
    TW_RUN(legal_eager_put);
    TW_RUN(eager_put_violations);
    TW_RUN(legal_eager_rdma_put);
    TW_RUN(eager_rdma_put_violations);
    TW_RUN(legal_rdma_pull_get);
    TW_RUN(attach_read_get);
    TW_RUN(legal_gpudirect_push_get);
    TW_RUN(legal_rdma_pull_put);
    TW_RUN(legal_gpudirect_push_put);
    TW_RUN(legal_misc_requests);
    TW_RUN(legal_zero_byte_and_chunked);
    TW_RUN(legal_rdma_downgraded_to_inline);
    TW_RUN(legal_device_unavailable);
    TW_RUN(legal_error_mid_transfer);
    TW_RUN(requests_before_ready);
    TW_RUN(handshake_violations);
    TW_RUN(direction_violations);
    TW_RUN(request_id_violations);
    TW_RUN(too_many_inflight);
    TW_RUN(stale_after_error);
    TW_RUN(request_level_rejection);
    TW_RUN(endpoint_violations);
    TW_RUN(rdma_ready_before_source_register);
    TW_RUN(second_register_without_gpudirect);
    TW_RUN(register_from_wrong_side);
    TW_RUN(ready_and_done_violations);
    TW_RUN(legal_progressive_source);
    TW_RUN(progressive_violations);
    TW_RUN(register_length_mismatch);
    TW_RUN(rdma_info_violations);
    TW_RUN(data_violations);
    TW_RUN(reply_violations);
    TW_RUN(goodbye_rules);
    TW_RUN(spec_open_points);
    TW_RUN(fatal_error_kills_connection);
    TW_RUN(table_churn);
    TW_RUN(init_limits);
    TW_DONE();
}
