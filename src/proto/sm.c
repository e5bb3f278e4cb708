/*
 * Connection state machine (docs/protocol.md, "Sequences").
 *
 * One function, step(), judges a message for either direction: `from` says
 * which role sent it. on_send and on_recv differ only in what they do with
 * the verdict: a send verdict changes nothing (the caller has a bug and must
 * not send), a fatal receive verdict kills the connection, a request-level
 * receive verdict consumes the request id. step() therefore computes its
 * verdict before it mutates anything.
 *
 * Requests live in an open-addressing hash table keyed by request id, sized
 * to a power of two at least twice the local max_inflight so that probes
 * stay short; deletion shifts entries back (no tombstones), so lookups never
 * degrade over a long-lived connection. Ids are sequential in practice, and
 * `id & mask` spreads them perfectly.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "proto/sm.h"

enum req_state {
    RS_FREE = 0,
    RS_GET_AWAIT_INFO,   /* TENSOR_REQUEST sent: TENSOR_INFO next */
    RS_INLINE_DATA,      /* DATA frames from the source owner */
    RS_RDMA_AWAIT_SRC,   /* RDMA_REGISTER from the source owner next */
    RS_RDMA_AWAIT_DST,   /* destination owner: RDMA_REGISTER (push) or RDMA_READY (pull) */
    RS_RDMA_AWAIT_READY, /* both registered: RDMA_READY from the destination owner */
    RS_RDMA_PULL,        /* destination reads; it sends RDMA_DONE */
    RS_RDMA_PUSH,        /* source writes; it sends RDMA_DONE */
    RS_PUT_AWAIT_ACCEPT, /* TENSOR_PUT sent: PUT_ACCEPT or ERROR next (or, eager, DATA) */
    RS_PUT_EAGER_DONE,   /* eager put: all DATA sent before PUT_ACCEPT, which comes next */
    RS_PUT_EAGER_REG,    /* bit 6: source registered before PUT_ACCEPT, which comes next */
    RS_PUT_AWAIT_RESULT, /* all bytes moved: OK or ERROR next */
    RS_LIST,             /* LIST_REPLY frames until MORE = 0 */
    RS_STAT,             /* TENSOR_INFO(none) next */
    RS_DELETE,           /* OK next */
    RS_PING,             /* PONG next */
    RS_STATS             /* STATS_REPLY next */
};

struct tw_sm_req {
    uint64_t id; /* 0: free slot */
    uint8_t kind;
    uint8_t state;
    uint8_t xfer_flags; /* TENSOR_REQUEST / TENSOR_PUT flags */
    uint64_t byte_length;
    uint64_t done; /* DATA bytes seen so far */
    /* Bit 5: the source registered with MORE; bytes announced so far by
     * RDMA_AVAILABLE. */
    uint8_t progressive;
    /* Bit 6: the client's RDMA_REGISTER of this put was seen before or
     * without PUT_ACCEPT(2) (at most one; after PUT_ACCEPT(1) it is void). */
    uint8_t eager_reg;
    uint64_t avail;
    uint8_t ping[TW_PING_PAYLOAD_LEN];
};

#define FROM_CLIENT TW_ROLE_CLIENT
#define FROM_SERVER TW_ROLE_SERVER

/* ---- request table ----------------------------------------------------- */

/*
 * Open addressing with linear probing from home slot id & mask, kept in
 * Robin Hood order: along a probe run, no entry sits farther from its
 * home than the one after it would allow (an insert takes the slot of
 * the first entry closer to its home than the newcomer and moves that
 * one on). Removal then shifts the run back only up to the first empty
 * slot or entry at its home. Request ids rise, so the entries in flight
 * are mostly each at their home: an insert or a removal touches a slot
 * or two, where plain linear probing scanned the whole run of requests
 * in flight on every removal (the server loop's top function in a
 * 4,160-get batch over tcp RDMA, 15% of its samples).
 */
static uint32_t slot_dist(const struct tw_sm *sm, uint32_t i)
{
    uint32_t mask = sm->table_cap - 1;
    return (i - ((uint32_t)sm->table[i].id & mask)) & mask;
}

static struct tw_sm_req *slot_find(const struct tw_sm *sm, uint64_t id)
{
    uint32_t mask = sm->table_cap - 1;
    for (uint32_t i = (uint32_t)id & mask, d = 0; d < sm->table_cap; i = (i + 1) & mask, d++) {
        if (sm->table[i].id == id)
            return &sm->table[i];
        /* An empty slot, or one whose entry is nearer its home than id
         * would be here: id would have taken that slot. */
        if (sm->table[i].id == 0 || slot_dist(sm, i) < d)
            return NULL;
    }
    return NULL;
}

static struct tw_sm_req *slot_insert(struct tw_sm *sm, uint64_t id)
{
    uint32_t mask = sm->table_cap - 1;
    struct tw_sm_req carry, *mine = NULL;
    memset(&carry, 0, sizeof(carry));
    carry.id = id;
    for (uint32_t i = (uint32_t)id & mask, d = 0, n = 0; n < sm->table_cap;
         i = (i + 1) & mask, d++, n++) {
        struct tw_sm_req *slot = &sm->table[i];
        if (slot->id == 0) {
            *slot = carry;
            sm->inflight++;
            return mine ? mine : slot;
        }
        uint32_t sd = slot_dist(sm, i);
        if (sd < d) { /* the newcomer (or the entry it moved) takes it */
            struct tw_sm_req t = *slot;
            *slot = carry;
            carry = t;
            if (!mine)
                mine = slot;
            d = sd;
        }
    }
    return NULL; /* unreachable: inflight <= max_inflight <= cap / 2 */
}

static void slot_remove(struct tw_sm *sm, struct tw_sm_req *r)
{
    uint32_t mask = sm->table_cap - 1;
    uint32_t hole = (uint32_t)(r - sm->table);
    sm->table[hole].id = 0;
    sm->inflight--;
    /* Backward shift: the rest of the run moves one slot nearer home, up
     * to an empty slot or an entry already at its home. */
    for (uint32_t i = (hole + 1) & mask; sm->table[i].id != 0 && slot_dist(sm, i) != 0;
         i = (i + 1) & mask) {
        sm->table[hole] = sm->table[i];
        sm->table[i].id = 0;
        hole = i;
    }
}

int tw__sm_init(struct tw_sm *sm, enum tw_role role, uint32_t max_inflight_local)
{
    memset(sm, 0, sizeof(*sm));
    if (max_inflight_local < 1 || max_inflight_local > 65536)
        return TW_EINVAL;
    uint32_t cap = 8;
    while (cap < 2 * max_inflight_local)
        cap <<= 1;
    sm->table = calloc(cap, sizeof(*sm->table));
    if (!sm->table)
        return -ENOMEM;
    sm->table_cap = cap;
    sm->role = role;
    sm->phase = TW_PHASE_HELLO;
    sm->max_frame = TW_PREAUTH_MAX_FRAME;
    sm->max_inflight = max_inflight_local;
    sm->local_max_inflight = max_inflight_local;
    return 0;
}

void tw__sm_destroy(struct tw_sm *sm)
{
    free(sm->table);
    sm->table = NULL;
    sm->table_cap = 0;
    sm->inflight = 0;
}

/* ---- classification ---------------------------------------------------- */

static int is_opening(uint32_t tag)
{
    switch (tag) {
    case TW_TAG_TENSOR_REQUEST:
    case TW_TAG_TENSOR_PUT:
    case TW_TAG_LIST:
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
    case TW_TAG_PING:
    case TW_TAG_STATS:
        return 1;
    default:
        return 0;
    }
}

/* Which role may send a tag: 0 client, 1 server, 2 either. */
static int tag_sender(uint32_t tag)
{
    switch (tag) {
    case TW_TAG_HELLO:
    case TW_TAG_AUTH:
    case TW_TAG_TENSOR_REQUEST:
    case TW_TAG_TENSOR_PUT:
    case TW_TAG_LIST:
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
    case TW_TAG_PING:
    case TW_TAG_STATS:
        return FROM_CLIENT;
    case TW_TAG_HELLO_ACK:
    case TW_TAG_AUTH_OK:
    case TW_TAG_TENSOR_INFO:
    case TW_TAG_PUT_ACCEPT:
    case TW_TAG_OK:
    case TW_TAG_LIST_REPLY:
    case TW_TAG_PONG:
    case TW_TAG_STATS_REPLY:
        return FROM_SERVER;
    default:
        return 2;
    }
}

int tw__sm_verdict_is_fatal(int verdict, uint32_t tag)
{
    if (verdict >= 0 || verdict == TW_EAGAIN_FRAME)
        return 0;
    if (verdict == TW_ETOO_MANY_INFLIGHT || verdict == TW_ESHUTDOWN)
        return 0;
    switch (tag) {
    case TW_TAG_TENSOR_REQUEST:
    case TW_TAG_TENSOR_PUT:
    case TW_TAG_LIST:
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
        switch (verdict) {
        case TW_EBAD_NAME:
        case TW_EBAD_DTYPE:
        case TW_EBAD_SHAPE:
        case TW_EOVERFLOW:
        case TW_EBAD_DEVICE_TAG:
        case TW_ENOT_NEGOTIATED:
            return 0;
        default:
            return 1;
        }
    case TW_TAG_RDMA_REGISTER:
        return verdict != TW_EBAD_FIELD;
    default:
        return 1;
    }
}

uint32_t tw__sm_verdict_wire_code(int verdict)
{
    if (verdict >= 0)
        return 0;
    if (verdict <= -(TW_WIRE_ERROR_BASE + 1) &&
        verdict >= -(TW_WIRE_ERROR_BASE + TW_WIRE_ERROR_MAX))
        return (uint32_t)(-verdict - TW_WIRE_ERROR_BASE);
    switch (verdict) {
    case TW_ETOO_MANY_INFLIGHT:
        return TW_WIRE_BUSY;
    case TW_EBAD_NAME:
    case TW_EBAD_DTYPE:
    case TW_EBAD_SHAPE:
    case TW_EOVERFLOW:
    case TW_EBAD_DEVICE_TAG:
    case TW_ENOT_NEGOTIATED:
    case TW_EBAD_FIELD:
        return TW_WIRE_INVALID_ARGUMENT;
    case TW_EBAD_VERSION:
        return TW_WIRE_UNSUPPORTED_VERSION;
    default:
        if (verdict > -TW_WIRE_ERROR_BASE)
            return TW_WIRE_INTERNAL; /* a local -errno, not the peer's fault */
        return TW_WIRE_PROTOCOL_ERROR;
    }
}

uint32_t tw__sm_fatal_wire_code(int verdict)
{
    if (verdict == TW_EBAD_VERSION)
        return TW_WIRE_UNSUPPORTED_VERSION;
    if (verdict == TW_EUNAUTHORIZED)
        return TW_WIRE_UNAUTHORIZED;
    return TW_WIRE_PROTOCOL_ERROR;
}

/* ---- handshake --------------------------------------------------------- */

static int step_handshake(struct tw_sm *sm, const struct tw_msg *m, int commit)
{
    switch (m->hdr.tag) {
    case TW_TAG_HELLO:
        if (sm->phase != TW_PHASE_HELLO)
            return TW_EOUT_OF_ORDER;
        if (sm->role == TW_ROLE_CLIENT && m->u.hello.max_inflight > sm->local_max_inflight)
            return TW_EBAD_FIELD; /* announcing more than this side tracks */
        if (commit) {
            sm->hello_caps = m->u.hello.caps & TW_CAP_KNOWN_MASK;
            sm->hello_max_frame = m->u.hello.max_frame;
            sm->hello_max_inflight = m->u.hello.max_inflight;
            sm->phase = TW_PHASE_HELLO_ACK;
        }
        return 0;
    case TW_TAG_HELLO_ACK: {
        if (sm->phase != TW_PHASE_HELLO_ACK)
            return TW_EOUT_OF_ORDER;
        uint64_t caps = m->u.hello_ack.caps;
        /* The answer is an intersection: nothing the client did not offer. */
        if (caps & ~sm->hello_caps)
            return TW_EBAD_CAPS;
        if (m->u.hello_ack.max_frame > sm->hello_max_frame)
            return TW_EBAD_FIELD;
        if (m->u.hello_ack.max_inflight > sm->hello_max_inflight ||
            m->u.hello_ack.max_inflight > sm->local_max_inflight)
            return TW_EBAD_FIELD;
        if (commit) {
            sm->caps = caps;
            sm->negotiated_max_frame = m->u.hello_ack.max_frame;
            sm->max_inflight = m->u.hello_ack.max_inflight;
            sm->auth_required = m->u.hello_ack.auth_method != TW_AUTH_NONE;
            if (sm->auth_required) {
                sm->phase = TW_PHASE_AUTH;
            } else {
                sm->phase = TW_PHASE_READY;
                sm->max_frame = sm->negotiated_max_frame;
            }
        }
        return 0;
    }
    case TW_TAG_AUTH:
        if (sm->phase != TW_PHASE_AUTH)
            return TW_EOUT_OF_ORDER;
        if (commit)
            sm->phase = TW_PHASE_AUTH_OK;
        return 0;
    case TW_TAG_AUTH_OK:
        if (sm->phase != TW_PHASE_AUTH_OK)
            return TW_EOUT_OF_ORDER;
        if (commit) {
            sm->phase = TW_PHASE_READY;
            sm->max_frame = sm->negotiated_max_frame;
        }
        return 0;
    default:
        return TW_EOUT_OF_ORDER;
    }
}

/* ---- RDMA_ENDPOINT and GOODBYE ----------------------------------------- */

static int step_endpoint(struct tw_sm *sm, const struct tw_msg *m, int from, int commit)
{
    uint8_t status = m->u.rdma_endpoint.status;
    if ((status == TW_EP_OFFER) != (from == FROM_CLIENT))
        return TW_EBAD_DIRECTION;
    if (!(sm->caps & TW_CAP_RDMA_DATA_PLANE))
        return TW_ENOT_NEGOTIATED;
    if (status == TW_EP_OFFER) {
        if (sm->phase != TW_PHASE_READY || sm->fabric_state != TW_SM_FABRIC_NONE)
            return TW_EOUT_OF_ORDER;
        if (commit)
            sm->fabric_state = TW_SM_FABRIC_OFFERED;
        return 0;
    }
    if (sm->fabric_state != TW_SM_FABRIC_OFFERED)
        return TW_EOUT_OF_ORDER;
    if (commit)
        sm->fabric_state = status == TW_EP_ACCEPT ? TW_SM_FABRIC_ACCEPTED : TW_SM_FABRIC_DECLINED;
    return 0;
}

static int step_goodbye(struct tw_sm *sm, int sending, int commit)
{
    if (sending ? sm->goodbye_sent : sm->goodbye_received)
        return TW_EOUT_OF_ORDER;
    if (commit) {
        if (sending)
            sm->goodbye_sent = 1;
        else
            sm->goodbye_received = 1;
        sm->phase = TW_PHASE_CLOSING;
    }
    return 0;
}

/* ---- requests ---------------------------------------------------------- */

static int src_owner(const struct tw_sm_req *r)
{
    return r->kind == TW_REQ_TENSOR_REQUEST ? FROM_SERVER : FROM_CLIENT;
}

static enum tw_req_kind kind_of(uint32_t tag)
{
    switch (tag) {
    case TW_TAG_TENSOR_REQUEST:
        return TW_REQ_TENSOR_REQUEST;
    case TW_TAG_TENSOR_PUT:
        return TW_REQ_TENSOR_PUT;
    case TW_TAG_LIST:
        return TW_REQ_LIST;
    case TW_TAG_STAT:
        return TW_REQ_STAT;
    case TW_TAG_DELETE:
        return TW_REQ_DELETE;
    case TW_TAG_PING:
        return TW_REQ_PING;
    default:
        return TW_REQ_STATS;
    }
}

/* Checks of a request-opening frame that do not depend on the table. */
static int open_check(const struct tw_sm *sm, const struct tw_msg *m, int sending)
{
    if (m->hdr.request_id <= sm->highest_request_id)
        return TW_EDUP_REQUEST;
    if (sm->phase == TW_PHASE_CLOSING) {
        /* The server's own GOODBYE may cross a request the client sent
         * before it saw it: that is a race, answered SHUTTING_DOWN. */
        if (!sending && sm->role == TW_ROLE_SERVER && !sm->goodbye_received)
            return TW_ESHUTDOWN;
        return TW_EOUT_OF_ORDER;
    }
    if (sm->inflight >= sm->max_inflight)
        return TW_ETOO_MANY_INFLIGHT;
    uint8_t flags = 0;
    if (m->hdr.tag == TW_TAG_TENSOR_REQUEST)
        flags = m->u.tensor_request.flags;
    else if (m->hdr.tag == TW_TAG_TENSOR_PUT)
        flags = m->u.tensor_put.flags;
    else
        return 0;
    if ((flags & TW_XFER_WANT_RDMA) && sm->fabric_state != TW_SM_FABRIC_ACCEPTED)
        return TW_ENOT_NEGOTIATED;
    if ((flags & TW_XFER_ATTACH_READ) && !(sm->caps & TW_CAP_RDMA_ATTACH_READS))
        return TW_ENOT_NEGOTIATED;
    if (!(flags & TW_XFER_WANT_RDMA) && !(sm->caps & TW_CAP_INLINE_DATA))
        return TW_ENOT_NEGOTIATED;
    if (m->hdr.tag == TW_TAG_TENSOR_PUT && (m->u.tensor_put.desc.flags & TW_DESC_HAS_CRC32C) &&
        !(sm->caps & TW_CAP_PAYLOAD_CRC32C))
        return TW_ENOT_NEGOTIATED;
    return 0;
}

static int step_open(struct tw_sm *sm, const struct tw_msg *m, int sending)
{
    int v = open_check(sm, m, sending);
    if (v < 0)
        return v;
    {
        struct tw_sm_req *r = slot_insert(sm, m->hdr.request_id);
        if (!r)
            return TW_ETOO_MANY_INFLIGHT;
        sm->highest_request_id = m->hdr.request_id;
        r->kind = (uint8_t)kind_of(m->hdr.tag);
        switch (m->hdr.tag) {
        case TW_TAG_TENSOR_REQUEST:
            r->state = RS_GET_AWAIT_INFO;
            r->xfer_flags = m->u.tensor_request.flags;
            break;
        case TW_TAG_TENSOR_PUT:
            r->state = RS_PUT_AWAIT_ACCEPT;
            r->xfer_flags = m->u.tensor_put.flags;
            r->byte_length = m->u.tensor_put.desc.byte_length;
            break;
        case TW_TAG_LIST:
            r->state = RS_LIST;
            break;
        case TW_TAG_STAT:
            r->state = RS_STAT;
            break;
        case TW_TAG_DELETE:
            r->state = RS_DELETE;
            break;
        case TW_TAG_PING:
            r->state = RS_PING;
            memcpy(r->ping, m->u.ping.payload, TW_PING_PAYLOAD_LEN);
            break;
        default:
            r->state = RS_STATS;
            break;
        }
    }
    return 0;
}

/* Bit 6 (EAGER_RDMA_PUT): the client's one RDMA_REGISTER of a put with
 * WANT_RDMA, sent before it saw PUT_ACCEPT. The receiver meets it while
 * PUT_ACCEPT is outstanding (it has not answered yet) or after its own
 * PUT_ACCEPT(1) and before any DATA (the registration is then void). */
static int eager_register(const struct tw_sm *sm, const struct tw_sm_req *r, int from)
{
    if (!(sm->caps & TW_CAP_EAGER_RDMA_PUT) || r->kind != TW_REQ_TENSOR_PUT ||
        !(r->xfer_flags & TW_XFER_WANT_RDMA) || from != FROM_CLIENT || r->eager_reg)
        return 0;
    return r->state == RS_PUT_AWAIT_ACCEPT || (r->state == RS_INLINE_DATA && r->done == 0);
}

/* Verdict and next state of one in-request message. *next = RS_FREE ends
 * the request. Pure: mutates nothing. */
static int request_next(const struct tw_sm *sm, const struct tw_sm_req *r, const struct tw_msg *m,
                        int from, uint8_t *next, uint64_t *done, uint64_t *avail)
{
    int src = src_owner(r), dst = !src;
    *next = r->state;
    *done = r->done;
    *avail = r->avail;
    switch (m->hdr.tag) {
    case TW_TAG_ERROR:
        /* ADR-012: a put the server cannot place on the declared device is
         * refused before the RDMA handshake, i.e. instead of PUT_ACCEPT. */
        if (from == FROM_SERVER && m->u.error.code == TW_WIRE_DEVICE_UNAVAILABLE &&
            r->kind == TW_REQ_TENSOR_PUT && r->state != RS_PUT_AWAIT_ACCEPT &&
            r->state != RS_PUT_EAGER_DONE && r->state != RS_PUT_EAGER_REG)
            return TW_EOUT_OF_ORDER;
        *next = RS_FREE;
        return 0;
    case TW_TAG_TENSOR_INFO: {
        const struct tw_descriptor *d = &m->u.tensor_info.desc;
        uint8_t dp = m->u.tensor_info.data_plane;
        if (r->state == RS_STAT) {
            if (dp != TW_DP_NONE)
                return TW_EBAD_FIELD;
        } else if (r->state == RS_GET_AWAIT_INFO) {
            if (dp == TW_DP_NONE)
                return TW_EBAD_FIELD;
            if (dp == TW_DP_RDMA && !(r->xfer_flags & TW_XFER_WANT_RDMA))
                return TW_ENOT_NEGOTIATED;
            if (dp == TW_DP_INLINE && !(sm->caps & TW_CAP_INLINE_DATA))
                return TW_ENOT_NEGOTIATED;
        } else {
            return TW_EOUT_OF_ORDER;
        }
        if ((d->flags & TW_DESC_HAS_CRC32C) && !(sm->caps & TW_CAP_PAYLOAD_CRC32C))
            return TW_ENOT_NEGOTIATED;
        if (r->state == RS_STAT)
            *next = RS_FREE;
        else
            *next = dp == TW_DP_INLINE ? RS_INLINE_DATA : RS_RDMA_AWAIT_SRC;
        return 0;
    }
    case TW_TAG_PUT_ACCEPT: {
        uint8_t dp = m->u.put_accept.data_plane;
        if (r->state != RS_PUT_AWAIT_ACCEPT && r->state != RS_PUT_EAGER_DONE &&
            r->state != RS_PUT_EAGER_REG)
            return TW_EOUT_OF_ORDER;
        if (dp == TW_DP_RDMA && !(r->xfer_flags & TW_XFER_WANT_RDMA))
            return TW_ENOT_NEGOTIATED;
        if (dp == TW_DP_INLINE && !(sm->caps & TW_CAP_INLINE_DATA))
            return TW_ENOT_NEGOTIATED;
        /* Eager DATA already seen: the rest follows (or all of it came). */
        if (r->state == RS_PUT_EAGER_DONE)
            *next = RS_PUT_AWAIT_RESULT;
        else if (r->state == RS_PUT_EAGER_REG) /* bit 6: the source already registered */
            *next = dp == TW_DP_INLINE ? RS_INLINE_DATA : RS_RDMA_AWAIT_DST;
        else
            *next = dp == TW_DP_INLINE ? RS_INLINE_DATA : RS_RDMA_AWAIT_SRC;
        return 0;
    }
    case TW_TAG_DATA: {
        /* Bit 4: an inline put's DATA may precede its PUT_ACCEPT (only a
         * put without WANT_RDMA, which can only be answered inline). */
        int eager = r->state == RS_PUT_AWAIT_ACCEPT && (sm->caps & TW_CAP_EAGER_PUT) &&
                    !(r->xfer_flags & TW_XFER_WANT_RDMA);
        if (r->state != RS_INLINE_DATA && !eager)
            return TW_EOUT_OF_ORDER;
        if (from != src)
            return TW_EBAD_DIRECTION;
        if (m->u.data.offset != r->done)
            return TW_EOUT_OF_ORDER;
        uint64_t n = m->u.data.bytes.len;
        if (n > r->byte_length - r->done)
            return TW_EBAD_LENGTH;
        uint64_t now = r->done + n;
        if (m->hdr.flags & TW_FRAME_MORE) {
            /* A non-final frame carries bytes and leaves some for later, so
             * a stream always ends with exactly one MORE = 0 frame. */
            if (n == 0 || now == r->byte_length)
                return TW_EBAD_LENGTH;
            *done = now;
            return 0;
        }
        if (now != r->byte_length)
            return TW_EBAD_LENGTH;
        *done = now;
        if (eager)
            *next = RS_PUT_EAGER_DONE;
        else
            *next = r->kind == TW_REQ_TENSOR_PUT ? RS_PUT_AWAIT_RESULT : RS_FREE;
        return 0;
    }
    case TW_TAG_RDMA_REGISTER:
        if (eager_register(sm, r, from)) {
            /* Bit 6: a put's source registration ahead of PUT_ACCEPT; if
             * PUT_ACCEPT(1) went first it is void (the bytes come inline). */
            if (m->hdr.flags & TW_FRAME_MORE)
                return TW_EBAD_FLAGS;
            if (m->u.rdma_register.length != r->byte_length)
                return TW_EBAD_FIELD;
            if (r->state == RS_PUT_AWAIT_ACCEPT)
                *next = RS_PUT_EAGER_REG;
            return 0;
        }
        if (r->state == RS_RDMA_AWAIT_SRC) {
            if (from != src)
                return TW_EOUT_OF_ORDER; /* destination before the source */
            *next = RS_RDMA_AWAIT_DST;
        } else if (r->state == RS_RDMA_AWAIT_DST) {
            if (from != dst)
                return TW_EOUT_OF_ORDER; /* the source registering twice */
            if (!(sm->caps & TW_CAP_RDMA_GPUDIRECT))
                return TW_ENOT_NEGOTIATED;
            /* Bit 7: a get asked with ATTACH_READ is pulled, never pushed
             * (its source may hold no key the server could write with). */
            if (r->xfer_flags & TW_XFER_ATTACH_READ)
                return TW_EOUT_OF_ORDER;
            *next = RS_RDMA_AWAIT_READY;
        } else {
            return TW_EOUT_OF_ORDER;
        }
        if (m->hdr.flags & TW_FRAME_MORE) {
            /* Bit 5: only the source's registration of a get (the server),
             * of at least a byte. */
            if (r->state != RS_RDMA_AWAIT_SRC || r->kind != TW_REQ_TENSOR_REQUEST)
                return TW_EBAD_FLAGS;
            if (!(sm->caps & TW_CAP_RDMA_PROGRESSIVE))
                return TW_ENOT_NEGOTIATED;
            if (r->byte_length == 0)
                return TW_EBAD_LENGTH;
        }
        if (m->u.rdma_register.length != r->byte_length)
            return TW_EBAD_FIELD;
        return 0;
    case TW_TAG_RDMA_AVAILABLE:
        if (from != src)
            return TW_EBAD_DIRECTION;
        if (!r->progressive || (r->state != RS_RDMA_AWAIT_DST && r->state != RS_RDMA_AWAIT_READY &&
                                r->state != RS_RDMA_PULL && r->state != RS_RDMA_PUSH))
            return TW_EOUT_OF_ORDER;
        /* Strictly increasing, up to the whole region. */
        if (m->u.rdma_available.ready <= r->avail || m->u.rdma_available.ready > r->byte_length)
            return TW_EBAD_LENGTH;
        *avail = m->u.rdma_available.ready;
        return 0;
    case TW_TAG_RDMA_READY:
        if (from != dst)
            return TW_EBAD_DIRECTION;
        if (r->state == RS_RDMA_AWAIT_DST)
            *next = RS_RDMA_PULL;
        else if (r->state == RS_RDMA_AWAIT_READY)
            *next = RS_RDMA_PUSH;
        else
            return TW_EOUT_OF_ORDER;
        return 0;
    case TW_TAG_RDMA_DONE:
        if (r->state == RS_RDMA_PULL) {
            if (from != dst)
                return TW_EBAD_DIRECTION;
        } else if (r->state == RS_RDMA_PUSH) {
            if (from != src)
                return TW_EBAD_DIRECTION;
        } else {
            return TW_EOUT_OF_ORDER;
        }
        if (m->u.rdma_done.status == 0 && m->u.rdma_done.bytes != r->byte_length)
            return TW_EBAD_LENGTH;
        /* Bit 5: every byte was announced before a successful end. */
        if (m->u.rdma_done.status == 0 && r->progressive && r->avail != r->byte_length)
            return TW_EOUT_OF_ORDER;
        *done = m->u.rdma_done.bytes;
        *next = r->kind == TW_REQ_TENSOR_PUT ? RS_PUT_AWAIT_RESULT : RS_FREE;
        return 0;
    case TW_TAG_OK:
        if (r->state != RS_PUT_AWAIT_RESULT && r->state != RS_DELETE)
            return TW_EOUT_OF_ORDER;
        *next = RS_FREE;
        return 0;
    case TW_TAG_LIST_REPLY:
        if (r->state != RS_LIST)
            return TW_EOUT_OF_ORDER;
        if (!(m->hdr.flags & TW_FRAME_MORE))
            *next = RS_FREE;
        return 0;
    case TW_TAG_PONG:
        if (r->state != RS_PING)
            return TW_EOUT_OF_ORDER;
        if (memcmp(r->ping, m->u.ping.payload, TW_PING_PAYLOAD_LEN) != 0)
            return TW_EBAD_FIELD;
        *next = RS_FREE;
        return 0;
    case TW_TAG_STATS_REPLY:
        if (r->state != RS_STATS)
            return TW_EOUT_OF_ORDER;
        *next = RS_FREE;
        return 0;
    default:
        return TW_EOUT_OF_ORDER;
    }
}

/* TENSOR_INFO carries the byte length of a get; remember it on commit. */
static void request_commit(struct tw_sm *sm, struct tw_sm_req *r, const struct tw_msg *m,
                           uint8_t next, uint64_t done, uint64_t avail)
{
    if (m->hdr.tag == TW_TAG_TENSOR_INFO)
        r->byte_length = m->u.tensor_info.desc.byte_length;
    if (m->hdr.tag == TW_TAG_RDMA_REGISTER && (m->hdr.flags & TW_FRAME_MORE))
        r->progressive = 1;
    if (m->hdr.tag == TW_TAG_RDMA_REGISTER &&
        (next == RS_PUT_EAGER_REG || (r->state == RS_INLINE_DATA && next == RS_INLINE_DATA)))
        r->eager_reg = 1;
    r->done = done;
    r->avail = avail;
    if (next == RS_FREE)
        slot_remove(sm, r);
    else
        r->state = next;
}

/*
 * The whole judgement. sending: this side sends m. Returns 0, TW_SM_STALE,
 * or a verdict; with commit = 0 it only judges, with commit = 1 it also
 * applies a legal message. Verdict side effects (DEAD, consumed ids) are
 * applied by on_recv.
 */
static int step(struct tw_sm *sm, const struct tw_msg *m, int sending, int commit)
{
    uint32_t tag = m->hdr.tag;
    int from = sending ? (int)sm->role : !(int)sm->role;

    if (sm->phase == TW_PHASE_DEAD) {
        if (sending && tag == TW_TAG_ERROR && m->hdr.request_id == 0)
            return 0;
        return TW_EOUT_OF_ORDER;
    }
    if (tag == 0 || tag > TW_TAG_MAX)
        return TW_EUNKNOWN_TAG;
    int who = tag_sender(tag);
    if (who != 2 && who != from)
        return TW_EBAD_DIRECTION;

    if (tag == TW_TAG_ERROR && m->hdr.request_id == 0) {
        /* Connection-level: the sender closes after it. */
        if (commit)
            sm->phase = TW_PHASE_DEAD;
        return 0;
    }
    if (tag == TW_TAG_HELLO || tag == TW_TAG_HELLO_ACK || tag == TW_TAG_AUTH ||
        tag == TW_TAG_AUTH_OK)
        return step_handshake(sm, m, commit);
    if (sm->phase != TW_PHASE_READY && sm->phase != TW_PHASE_CLOSING)
        return TW_EOUT_OF_ORDER;
    if (tag == TW_TAG_RDMA_ENDPOINT)
        return step_endpoint(sm, m, from, commit);
    if (tag == TW_TAG_GOODBYE)
        return step_goodbye(sm, sending, commit);
    if (is_opening(tag)) {
        if (!commit)
            return open_check(sm, m, sending);
        return step_open(sm, m, sending);
    }

    uint64_t id = m->hdr.request_id;
    if (id > sm->highest_request_id)
        return TW_EUNKNOWN_REQUEST;
    struct tw_sm_req *r = slot_find(sm, id);
    if (!r) {
        if (!sending)
            return TW_SM_STALE;
        return tag == TW_TAG_ERROR ? 0 : TW_EUNKNOWN_REQUEST;
    }
    uint8_t next;
    uint64_t done, avail;
    int v = request_next(sm, r, m, from, &next, &done, &avail);
    if (v < 0)
        return v;
    if (commit)
        request_commit(sm, r, m, next, done, avail);
    return 0;
}

int tw__sm_on_send(struct tw_sm *sm, const struct tw_msg *msg)
{
    int v = step(sm, msg, 1, 0);
    if (v != 0)
        return v;
    return step(sm, msg, 1, 1);
}

int tw__sm_on_recv(struct tw_sm *sm, const struct tw_msg *msg)
{
    int v = step(sm, msg, 0, 0);
    if (v == 0)
        return step(sm, msg, 0, 1);
    if (v > 0)
        return v; /* stale: discard */
    if (tw__sm_verdict_is_fatal(v, msg->hdr.tag)) {
        sm->phase = TW_PHASE_DEAD;
        return v;
    }
    if (is_opening(msg->hdr.tag)) {
        /* Request-level rejection of a new request: the id is used up. */
        sm->highest_request_id = msg->hdr.request_id;
    } else {
        /* Request-level verdict inside a request (RDMA_REGISTER length):
         * the request ends here; the caller answers ERROR(id). */
        struct tw_sm_req *r = slot_find(sm, msg->hdr.request_id);
        if (r)
            slot_remove(sm, r);
    }
    return v;
}

int tw__sm_reject_request(struct tw_sm *sm, const struct tw_frame_header *hdr)
{
    if (sm->phase == TW_PHASE_DEAD)
        return TW_EOUT_OF_ORDER;
    if (!is_opening(hdr->tag)) {
        sm->phase = TW_PHASE_DEAD;
        return TW_EOUT_OF_ORDER;
    }
    int v = 0;
    if (sm->role != TW_ROLE_SERVER)
        v = TW_EBAD_DIRECTION;
    else if (sm->phase != TW_PHASE_READY && sm->phase != TW_PHASE_CLOSING)
        v = TW_EOUT_OF_ORDER;
    else if (hdr->request_id == 0)
        v = TW_EBAD_REQUEST_ID;
    else if (hdr->request_id <= sm->highest_request_id)
        v = TW_EDUP_REQUEST;
    else if (sm->phase == TW_PHASE_CLOSING && sm->goodbye_received)
        v = TW_EOUT_OF_ORDER;
    if (v < 0) {
        sm->phase = TW_PHASE_DEAD;
        return v;
    }
    sm->highest_request_id = hdr->request_id;
    return 0;
}

int tw__sm_request_active(const struct tw_sm *sm, uint64_t request_id)
{
    return request_id != 0 && sm->table && slot_find(sm, request_id) != NULL;
}

enum tw_req_kind tw__sm_request_kind(const struct tw_sm *sm, uint64_t request_id)
{
    const struct tw_sm_req *r = request_id && sm->table ? slot_find(sm, request_id) : NULL;
    return r ? (enum tw_req_kind)r->kind : TW_REQ_NONE;
}
