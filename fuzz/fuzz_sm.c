/*
 * libFuzzer target: sequences of frames through the decoder and two state
 * machines (client and server) back to back.
 *
 * Input: records of dir u8 | len u16 LE | len frame bytes. dir bit0: 1 =
 * client to server, 0 = server to client. The frame is decoded under the
 * receiver's current limit. A decoded frame is judged by the sender's
 * on_send; if the sender refuses it, it is delivered only when dir bit1 is
 * set (a buggy or hostile peer), so the receiver is exercised on its own.
 * The receiver reacts as a real peer would: a fatal verdict kills the
 * connection (both sides stop), a request-level one consumes the id.
 * Invariants checked after every step: in-flight counts within the
 * negotiated limit, highest id never decreasing, DEAD is final.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/sm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const struct tw_sm *sm, uint64_t prev_highest)
{
    if (sm->inflight > sm->max_inflight || sm->inflight > sm->local_max_inflight)
        abort();
    if (sm->highest_request_id < prev_highest)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tw_sm c, s;
    if (tw__sm_init(&c, TW_ROLE_CLIENT, 4) < 0)
        return 0;
    if (tw__sm_init(&s, TW_ROLE_SERVER, 4) < 0) {
        tw__sm_destroy(&c);
        return 0;
    }
    size_t off = 0;
    while (size - off >= 3) {
        uint8_t dir = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off)
            len = size - off;
        const uint8_t *fr = data + off;
        off += len;
        int from_client = dir & 1;
        struct tw_sm *tx = from_client ? &c : &s;
        struct tw_sm *rx = from_client ? &s : &c;
        uint64_t tx_high = tx->highest_request_id, rx_high = rx->highest_request_id;

        struct tw_msg m;
        ssize_t n = tw__msg_decode(fr, len, rx->max_frame, &m);
        if (n == TW_EAGAIN_FRAME)
            continue;
        if (n < 0) {
            struct tw_frame_header h;
            if (tw__frame_decode_header(fr, len, rx->max_frame, &h) == 0 &&
                !tw__sm_verdict_is_fatal((int)n, h.tag)) {
                if (tw__sm_reject_request(rx, &h) < 0 && rx->phase != TW_PHASE_DEAD)
                    abort();
                check(rx, rx_high);
                continue;
            }
            break; /* fatal: the receiver closes */
        }
        int sv = tw__sm_on_send(tx, &m);
        if (sv != 0 && !(dir & 2))
            continue;
        int rv = tw__sm_on_recv(rx, &m);
        if (sv == 0)
            check(tx, tx_high);
        check(rx, rx_high);
        if (rv < 0 && tw__sm_verdict_is_fatal(rv, m.hdr.tag)) {
            if (rx->phase != TW_PHASE_DEAD)
                abort();
            /* The receiver may still send ERROR(id 0) and nothing else. */
            struct tw_msg e;
            memset(&e, 0, sizeof(e));
            e.hdr.tag = TW_TAG_ERROR;
            e.u.error.code = tw__sm_fatal_wire_code(rv);
            if (tw__sm_on_send(rx, &e) != 0)
                abort();
            e.hdr.request_id = 1;
            if (tw__sm_on_send(rx, &e) == 0)
                abort();
            break;
        }
        if (tx->phase == TW_PHASE_DEAD || rx->phase == TW_PHASE_DEAD)
            break;
    }
    tw__sm_destroy(&c);
    tw__sm_destroy(&s);
    return 0;
}
