/* Connection state machine: every legal sequence of the design through two
 * machines back to back, and every out-of-order sequence with the exact
 * verdict on the side that must catch it. */
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
    OK_SEND(p, S, fx_hello_ack(caps, 16u << 20, 4, auth ? TW_AUTH_HMAC_SHA256 : TW_AUTH_NONE, "srv"));
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
        TW_ASSERT_EQ(p->c.fabric_state, 2);
        TW_ASSERT_EQ(p->s.fabric_state, 2);
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

int main(void)
{
    TW_RUN(legal_inline_get);
    TW_RUN(legal_inline_put);
    TW_RUN(legal_rdma_pull_get);
    TW_RUN(legal_gpudirect_push_get);
    TW_RUN(legal_rdma_pull_put);
    TW_RUN(legal_gpudirect_push_put);
    TW_DONE();
}
