/*
 * Admission decision (see admission.h). The order matters: the per-address
 * cap comes first so one address cannot evict everyone else's handshakes;
 * established connections are never evicted, only refused newcomers when
 * they fill the server.
 */
#include "server/admission.h"

struct tw_admit_decision tw__admit_decide(const struct tw_admit_input *in)
{
    struct tw_admit_decision d = {TW_ADMIT_ACCEPT, TW_ADMIT_R_OK, 0};
    if (in->from_address >= in->max_per_address) {
        d.verdict = TW_ADMIT_REFUSE;
        d.reason = TW_ADMIT_R_ADDRESS_CAP;
        return d;
    }
    uint32_t handshaking = in->handshaking;
    if (in->served >= in->max_served) {
        if (handshaking == 0) {
            d.verdict = TW_ADMIT_REFUSE;
            d.reason = TW_ADMIT_R_SERVER_FULL;
            return d;
        }
        d.verdict = TW_ADMIT_EVICT_OLDEST;
        d.reason = TW_ADMIT_R_SERVER_FULL_EVICT;
        handshaking--;
    } else if (handshaking >= in->max_handshaking) {
        d.verdict = TW_ADMIT_EVICT_OLDEST;
        d.reason = TW_ADMIT_R_HANDSHAKES_FULL;
        handshaking--;
    }
    /* Counting the new connection, more than half the budget waiting. */
    if (2 * ((uint64_t)handshaking + 1) > in->max_handshaking) {
        d.short_deadline = 1;
        if (d.verdict == TW_ADMIT_ACCEPT)
            d.reason = TW_ADMIT_R_OK_PRESSURE;
    }
    return d;
}

const char *tw__admit_reason_text(enum tw_admit_reason r)
{
    switch (r) {
    case TW_ADMIT_R_OK:
        return "accepted";
    case TW_ADMIT_R_OK_PRESSURE:
        return "accepted with the shorter handshake deadline (over half of --max-handshakes "
               "waiting)";
    case TW_ADMIT_R_HANDSHAKES_FULL:
        return "--max-handshakes connections are waiting for their handshake";
    case TW_ADMIT_R_SERVER_FULL_EVICT:
        return "--max-connections reached while some connections are still in their handshake";
    case TW_ADMIT_R_ADDRESS_CAP:
        return "this address already has --max-handshakes-per-address connections waiting for "
               "their handshake";
    case TW_ADMIT_R_SERVER_FULL:
        return "--max-connections established connections are being served";
    }
    return "unknown admission reason";
}
