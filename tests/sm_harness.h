/*
 * Two state machines joined back to back, for sequence tests and the state
 * machine fuzzer. Every message goes through the real codec (encode, then
 * decode with the receiver's current max_frame) before the sender's on_send
 * and the receiver's on_recv judge it.
 */
#ifndef TW_SM_HARNESS_H
#define TW_SM_HARNESS_H

#include "proto_fixtures.h"

struct sm_pair {
    struct tw_sm c, s;
};

static inline int pair_init(struct sm_pair *p, uint32_t c_inflight, uint32_t s_inflight)
{
    int rc = tw__sm_init(&p->c, TW_ROLE_CLIENT, c_inflight);
    if (rc < 0)
        return rc;
    rc = tw__sm_init(&p->s, TW_ROLE_SERVER, s_inflight);
    if (rc < 0)
        tw__sm_destroy(&p->c);
    return rc;
}

static inline void pair_destroy(struct sm_pair *p)
{
    tw__sm_destroy(&p->c);
    tw__sm_destroy(&p->s);
}

/* Only the receiver judges: encode, decode under the receiver's limit, then
 * on_recv. Returns the codec verdict or on_recv's answer. */
static inline int pair_recv_only(struct tw_sm *rx, const struct tw_msg *m)
{
    static uint8_t buf[1 << 16];
    ssize_t n = tw__msg_encode(m, buf, sizeof(buf));
    if (n < 0)
        return (int)n;
    struct tw_msg d;
    ssize_t c = tw__msg_decode(buf, (size_t)n, rx->max_frame, &d);
    if (c < 0)
        return (int)c;
    return tw__sm_on_recv(rx, &d);
}

/* Sender then receiver. Returns the first non-zero answer: the sender's
 * verdict (the frame is then not delivered) or the receiver's. */
static inline int pair_send(struct sm_pair *p, int from_client, const struct tw_msg *m)
{
    struct tw_sm *tx = from_client ? &p->c : &p->s;
    struct tw_sm *rx = from_client ? &p->s : &p->c;
    int v = tw__sm_on_send(tx, m);
    if (v != 0)
        return v;
    return pair_recv_only(rx, m);
}

#endif
