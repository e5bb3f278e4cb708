/*
 * Connection state machine for protocol v1, without I/O.
 *
 * One struct tw_sm per connection and per side. Feed it every message the
 * side sends (tw__sm_on_send) and receives (tw__sm_on_recv) *after* the codec
 * decoded it; it answers 0 when the message is legal at this point of the
 * sequence and a TW_E* verdict otherwise (docs/protocol.md, "Sequences" and
 * "Error handling"). Receive verdicts tell the caller how to react:
 *
 *   tw__sm_verdict_is_fatal(v) != 0  send ERROR(tw__sm_fatal_wire_code(v),
 *                                   request_id 0) -- PROTOCOL_ERROR for all
 *                                   but EBAD_VERSION -- and close;
 *   otherwise                       answer ERROR(tw__sm_verdict_wire_code(v))
 *                                   for that request id; connection lives.
 *
 * After a fatal receive verdict the machine is in TW_PHASE_DEAD and accepts
 * only the sending of ERROR with request id 0. After a request-level receive
 * verdict the id is already consumed (a request-opening frame) or the request
 * already ended (RDMA_REGISTER length mismatch): do not call
 * tw__sm_reject_request, just send the ERROR. On_send verdicts change
 * nothing: they report a bug of this side, and the frame must not be sent.
 *
 * A return of TW_SM_STALE (positive) from tw__sm_on_recv means "a message for
 * a request this side already ended (it crossed an ERROR, or a cancel crossed
 * the last reply): discard it". Any id at or below the highest id seen that
 * is not in flight is stale. Sending ERROR for such an id is legal (that is
 * how a rejected request is answered); sending anything else is not.
 *
 * Ownership: the state machine owns its request table (allocated by
 * tw__sm_init, freed by tw__sm_destroy). It keeps no pointer into messages.
 * Not thread-safe: one connection, one thread at a time.
 */
#ifndef TW_PROTO_SM_H
#define TW_PROTO_SM_H

#include <stdint.h>

#include "proto.h"

enum tw_role { TW_ROLE_CLIENT = 0, TW_ROLE_SERVER = 1 };

enum tw_conn_phase {
    /* Each handshake phase names the next handshake message on the wire. */
    TW_PHASE_HELLO = 0, /* server: awaiting HELLO; client: HELLO to send */
    TW_PHASE_HELLO_ACK, /* client awaits HELLO_ACK; server has it to send */
    TW_PHASE_AUTH,      /* awaiting AUTH (server) / AUTH to send (client) */
    TW_PHASE_AUTH_OK,   /* client awaits AUTH_OK; server has it to send */
    TW_PHASE_READY,     /* requests may flow */
    TW_PHASE_CLOSING,   /* GOODBYE sent or received: no new requests */
    TW_PHASE_DEAD       /* fatal error: nothing more is legal */
};

enum tw_req_kind {
    TW_REQ_NONE = 0,
    TW_REQ_TENSOR_REQUEST,
    TW_REQ_TENSOR_PUT,
    TW_REQ_LIST,
    TW_REQ_STAT,
    TW_REQ_DELETE,
    TW_REQ_PING,
    TW_REQ_STATS
};

#define TW_SM_STALE 1

/* The RDMA endpoint exchange of a connection (docs/protocol.md §7). */
enum tw_sm_fabric {
    TW_SM_FABRIC_NONE = 0, /* no RDMA_ENDPOINT yet */
    TW_SM_FABRIC_OFFERED,  /* the client's OFFER is out, no answer yet */
    TW_SM_FABRIC_ACCEPTED, /* ACCEPT: WANT_RDMA is legal from now on */
    TW_SM_FABRIC_DECLINED  /* DECLINE: inline only, for good */
};

struct tw_sm_req; /* opaque request slot */

struct tw_sm {
    enum tw_role role;
    enum tw_conn_phase phase;
    uint64_t caps;         /* negotiated, valid from READY on */
    uint32_t max_frame;    /* negotiated payload limit (pre-auth: lower) */
    uint32_t max_inflight; /* negotiated */
    int auth_required;
    enum tw_sm_fabric fabric_state;
    int goodbye_sent, goodbye_received;
    uint64_t highest_request_id; /* ids are strictly increasing per connection */
    uint32_t inflight;
    uint32_t table_cap;
    struct tw_sm_req *table;
    /* Handshake bookkeeping (additive to the original layout). */
    uint32_t local_max_inflight; /* what tw__sm_init was given */
    uint64_t hello_caps;         /* caps announced in HELLO (masked) */
    uint32_t hello_max_frame;    /* limits announced in HELLO */
    uint32_t hello_max_inflight;
    uint32_t negotiated_max_frame; /* from HELLO_ACK; becomes max_frame at READY */
};

/* max_inflight_local: the most requests this side will track (what it
 * announces in HELLO / HELLO_ACK, 1..65536). Returns 0, TW_EINVAL for a
 * value outside that range, or -ENOMEM. */
int tw__sm_init(struct tw_sm *sm, enum tw_role role, uint32_t max_inflight_local);
void tw__sm_destroy(struct tw_sm *sm);

int tw__sm_on_send(struct tw_sm *sm, const struct tw_msg *msg);
int tw__sm_on_recv(struct tw_sm *sm, const struct tw_msg *msg);

/* Verdict classification (see the comment at the top). tag is the tag of the
 * frame the verdict is about: a descriptor or name verdict (EBAD_NAME,
 * EBAD_DTYPE, EBAD_SHAPE, EOVERFLOW, EBAD_DEVICE_TAG, ENOT_NEGOTIATED for a
 * descriptor CRC) on a request-opening frame (TENSOR_REQUEST, TENSOR_PUT,
 * LIST, STAT, DELETE) is request-level: the frame's bounds were intact. */
int tw__sm_verdict_is_fatal(int verdict, uint32_t tag);
uint32_t tw__sm_verdict_wire_code(int verdict);
/* Code for the ERROR(id 0) that answers a fatal verdict: UNSUPPORTED_VERSION
 * for TW_EBAD_VERSION, UNAUTHORIZED for TW_EUNAUTHORIZED, else
 * PROTOCOL_ERROR. */
uint32_t tw__sm_fatal_wire_code(int verdict);

/* A request-opening frame whose payload failed a request-level rule of the
 * *codec* (tw__msg_decode returned a verdict for which
 * tw__sm_verdict_is_fatal(v, hdr->tag) == 0): the request id is consumed
 * (must still be increasing: EDUP_REQUEST otherwise) without opening a
 * request. Server side only. Returns 0, then the caller answers
 * ERROR(tw__sm_verdict_wire_code(v), id); or a fatal verdict (the machine
 * is then DEAD). Not needed for verdicts of tw__sm_on_recv itself. */
int tw__sm_reject_request(struct tw_sm *sm, const struct tw_frame_header *hdr);

/* Introspection for callers and tests. */
int tw__sm_request_active(const struct tw_sm *sm, uint64_t request_id);
enum tw_req_kind tw__sm_request_kind(const struct tw_sm *sm, uint64_t request_id);

#endif
