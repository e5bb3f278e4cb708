/*
 * Frame and message codec (docs/protocol.md, "Framing" and "Messages").
 *
 * Decoding happens in the order the spec prescribes, and every step only
 * looks at bytes the previous step proved present:
 *
 *   1. header complete (else TW_EAGAIN_FRAME), magic, version, known tag,
 *      payload_len <= max_frame, header flags and reserved bytes;
 *   2. payload complete (else TW_EAGAIN_FRAME);
 *   3. request id rule of the tag (zero / non-zero);
 *   4. structure: every length field is read through a bounds-checked reader
 *      and the fields must add up to payload_len exactly (TW_EBAD_LENGTH);
 *   5. field rules, in wire order, the first violation wins.
 *
 * Structure before fields matters: only a frame whose boundaries are intact
 * can be answered with a request-level error while the connection lives.
 *
 * The encoder packs a message and then runs the decoder's payload rules over
 * what it wrote, so it can never emit a frame its own decoder would reject.
 */
#include <errno.h>

#include "proto/proto.h"
#include "proto/wire.h"

/* ---- bounds-checked reader --------------------------------------------- */

struct rd {
    const uint8_t *p;
    size_t len;
    size_t off;
    int err;       /* structural violation (TW_EBAD_LENGTH), sticky */
    int field_err; /* first field violation, reported only if structure is fine */
};

static const uint8_t *rd_take(struct rd *r, size_t n)
{
    if (r->err || n > r->len - r->off) {
        r->err = TW_EBAD_LENGTH;
        return NULL;
    }
    const uint8_t *q = r->p + r->off;
    r->off += n;
    return q;
}

static uint8_t rd_u8(struct rd *r)
{
    const uint8_t *q = rd_take(r, 1);
    return q ? wire_get_u8(q) : 0;
}

static uint16_t rd_u16(struct rd *r)
{
    const uint8_t *q = rd_take(r, 2);
    return q ? wire_get_u16(q) : 0;
}

static uint32_t rd_u32(struct rd *r)
{
    const uint8_t *q = rd_take(r, 4);
    return q ? wire_get_u32(q) : 0;
}

static uint64_t rd_u64(struct rd *r)
{
    const uint8_t *q = rd_take(r, 8);
    return q ? wire_get_u64(q) : 0;
}

static void rd_bytes(struct rd *r, size_t n, struct tw_bytes *out)
{
    const uint8_t *q = rd_take(r, n);
    out->ptr = q;
    out->len = q ? (uint32_t)n : 0;
}

static void rd_copy(struct rd *r, uint8_t *dst, size_t n)
{
    const uint8_t *q = rd_take(r, n);
    if (q)
        memcpy(dst, q, n);
    else
        memset(dst, 0, n);
}

/* Records a field verdict unless an earlier one was recorded. */
static void rd_check(struct rd *r, int verdict)
{
    if (verdict < 0 && r->field_err == 0)
        r->field_err = verdict;
}

static int rd_finish(struct rd *r)
{
    if (!r->err && r->off != r->len)
        r->err = TW_EBAD_LENGTH;
    return r->err ? r->err : r->field_err;
}

/* ---- field rules ------------------------------------------------------- */

static int printable_ascii(const struct tw_bytes *b)
{
    for (uint32_t i = 0; i < b->len; i++)
        if (b->ptr[i] < 0x20 || b->ptr[i] > 0x7E)
            return 0;
    return 1;
}

/* UTF-8 text without NUL, max bytes: ERROR messages, DECLINE reasons. */
static int text_ok(const struct tw_bytes *b, uint32_t max)
{
    if (b->len > max)
        return 0;
    if (b->len == 0)
        return 1;
    if (memchr(b->ptr, 0, b->len))
        return 0;
    return tw__utf8_valid(b->ptr, b->len);
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static int caps_verdict(uint64_t caps)
{
    if ((caps & TW_CAP_RDMA_GPUDIRECT) && !(caps & TW_CAP_RDMA_DATA_PLANE))
        return TW_EBAD_CAPS;
    return 0;
}

static int stats_key_ok(const uint8_t *k, size_t n)
{
    if (n == 0 || n > TW_MAX_STATS_KEY_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = k[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

static int provider_ok(const struct tw_bytes *b)
{
    if (b->len == 0 || b->len > TW_MAX_PROVIDER_LEN)
        return 0;
    for (uint32_t i = 0; i < b->len; i++)
        if (b->ptr[i] < 0x21 || b->ptr[i] > 0x7E)
            return 0;
    return 1;
}

/* ---- descriptor -------------------------------------------------------- */

static void rd_descriptor(struct rd *r, struct tw_descriptor *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = rd_u8(r);
    d->ndim = rd_u8(r);
    d->flags = rd_u8(r);
    uint8_t tag_len = rd_u8(r);
    uint16_t name_len = rd_u16(r);
    uint16_t res16 = rd_u16(r);
    d->byte_length = rd_u64(r);
    d->crc32c = rd_u32(r);
    uint32_t res32 = rd_u32(r);
    /* ndim may exceed TW_MAX_NDIM on the wire; the dimensions past the
     * sixteenth are skipped so the structure stays checkable, and the
     * descriptor check then reports EBAD_SHAPE. */
    const uint8_t *dims = rd_take(r, 8u * (size_t)d->ndim);
    if (dims) {
        for (unsigned i = 0; i < d->ndim && i < TW_MAX_NDIM; i++)
            d->shape[i] = wire_get_u64(dims + 8u * i);
    }
    rd_bytes(r, name_len, &d->name);
    rd_bytes(r, tag_len, &d->device_tag);
    if (r->err)
        return;
    rd_check(r, (res16 || res32) ? TW_EBAD_FLAGS : 0);
    rd_check(r, tw__descriptor_check(d));
}

/* ---- request id rule --------------------------------------------------- */

/* 0: must be zero; 1: must be non-zero; 2: either (ERROR). */
static int id_rule(uint32_t tag)
{
    switch (tag) {
    case TW_TAG_HELLO:
    case TW_TAG_HELLO_ACK:
    case TW_TAG_AUTH:
    case TW_TAG_AUTH_OK:
    case TW_TAG_RDMA_ENDPOINT:
    case TW_TAG_GOODBYE:
        return 0;
    case TW_TAG_ERROR:
        return 2;
    default:
        return 1;
    }
}

static int check_request_id(uint32_t tag, uint64_t id)
{
    int rule = id_rule(tag);
    if ((rule == 0 && id != 0) || (rule == 1 && id == 0))
        return TW_EBAD_REQUEST_ID;
    return 0;
}

/* ---- header ------------------------------------------------------------ */

int tw__tag_may_have_more(uint32_t tag)
{
    /* RDMA_REGISTER: a source registration whose bytes follow (bit 5; the
     * state machine refuses it elsewhere). */
    return tag == TW_TAG_DATA || tag == TW_TAG_LIST_REPLY || tag == TW_TAG_RDMA_REGISTER;
}

int tw__frame_decode_header(const uint8_t *buf, size_t len, uint32_t max_frame,
                            struct tw_frame_header *hdr)
{
    if (len < TW_FRAME_HEADER_LEN)
        return TW_EAGAIN_FRAME;
    if (wire_get_u32(buf + 0) != TW_PROTO_MAGIC)
        return TW_EBAD_MAGIC;
    if (wire_get_u8(buf + 4) != TW_PROTO_VERSION)
        return TW_EBAD_VERSION;
    uint32_t tag = wire_get_u32(buf + 8);
    if (tag == 0 || tag > TW_TAG_MAX)
        return TW_EUNKNOWN_TAG;
    uint32_t payload_len = wire_get_u32(buf + 12);
    if (payload_len > max_frame)
        return TW_EFRAME_TOO_LARGE;
    uint8_t flags = wire_get_u8(buf + 5);
    if ((flags & ~TW_FRAME_FLAGS_KNOWN) || wire_get_u16(buf + 6) != 0)
        return TW_EBAD_FLAGS;
    if ((flags & TW_FRAME_MORE) && !tw__tag_may_have_more(tag))
        return TW_EBAD_FLAGS;
    hdr->version = TW_PROTO_VERSION;
    hdr->flags = flags;
    hdr->tag = tag;
    hdr->payload_len = payload_len;
    hdr->request_id = wire_get_u64(buf + 16);
    return 0;
}

/* ---- payloads ---------------------------------------------------------- */

static void decode_hello(struct rd *r, struct tw_msg *m)
{
    uint64_t caps = rd_u64(r);
    m->u.hello.max_frame = rd_u32(r);
    m->u.hello.max_inflight = rd_u32(r);
    uint16_t agent_len = rd_u16(r);
    rd_bytes(r, agent_len, &m->u.hello.agent);
    m->u.hello.caps = caps & TW_CAP_KNOWN_MASK;
    rd_check(r, caps_verdict(m->u.hello.caps));
    if (m->u.hello.max_frame < TW_MIN_MAX_FRAME || m->u.hello.max_frame > TW_MAX_MAX_FRAME)
        rd_check(r, TW_EBAD_FIELD);
    if (m->u.hello.max_inflight < 1 || m->u.hello.max_inflight > 65536)
        rd_check(r, TW_EBAD_FIELD);
    if (agent_len > TW_MAX_AGENT_LEN || (!r->err && !printable_ascii(&m->u.hello.agent)))
        rd_check(r, TW_EBAD_FIELD);
}

static void decode_hello_ack(struct rd *r, struct tw_msg *m)
{
    uint64_t caps = rd_u64(r);
    m->u.hello_ack.max_frame = rd_u32(r);
    m->u.hello_ack.max_inflight = rd_u32(r);
    m->u.hello_ack.auth_method = rd_u8(r);
    uint8_t res[3];
    rd_copy(r, res, sizeof(res));
    rd_copy(r, m->u.hello_ack.server_nonce, TW_AUTH_NONCE_LEN);
    uint16_t agent_len = rd_u16(r);
    rd_bytes(r, agent_len, &m->u.hello_ack.agent);
    m->u.hello_ack.caps = caps & TW_CAP_KNOWN_MASK;
    rd_check(r, caps_verdict(m->u.hello_ack.caps));
    if (!(m->u.hello_ack.caps & (TW_CAP_INLINE_DATA | TW_CAP_RDMA_DATA_PLANE)))
        rd_check(r, TW_EBAD_CAPS);
    if (m->u.hello_ack.max_frame < TW_MIN_MAX_FRAME || m->u.hello_ack.max_frame > TW_MAX_MAX_FRAME)
        rd_check(r, TW_EBAD_FIELD);
    if (m->u.hello_ack.max_inflight < 1 || m->u.hello_ack.max_inflight > 65536)
        rd_check(r, TW_EBAD_FIELD);
    if (m->u.hello_ack.auth_method > TW_AUTH_HMAC_SHA256)
        rd_check(r, TW_EBAD_FIELD);
    if (!all_zero(res, sizeof(res)))
        rd_check(r, TW_EBAD_FLAGS);
    if (m->u.hello_ack.auth_method == TW_AUTH_NONE &&
        !all_zero(m->u.hello_ack.server_nonce, TW_AUTH_NONCE_LEN))
        rd_check(r, TW_EBAD_FIELD);
    if (agent_len > TW_MAX_AGENT_LEN || (!r->err && !printable_ascii(&m->u.hello_ack.agent)))
        rd_check(r, TW_EBAD_FIELD);
}

static void decode_name(struct rd *r, struct tw_bytes *name)
{
    uint16_t len = rd_u16(r);
    rd_bytes(r, len, name);
    if (!r->err)
        rd_check(r, tw__name_check(name->ptr, name->len));
}

static void decode_rdma_endpoint(struct rd *r, struct tw_msg *m)
{
    uint8_t status = rd_u8(r);
    uint8_t count = rd_u8(r);
    uint16_t reason_len = rd_u16(r);
    m->u.rdma_endpoint.status = status;
    m->u.rdma_endpoint.count = count;
    rd_copy(r, m->u.rdma_endpoint.host_id, TW_HOST_ID_LEN);
    rd_bytes(r, reason_len, &m->u.rdma_endpoint.reason);
    if (status > TW_EP_DECLINE)
        rd_check(r, TW_EBAD_FIELD);
    if (count > TW_MAX_FABRIC_ENTRIES || (status == TW_EP_OFFER && count < 1) ||
        (status == TW_EP_ACCEPT && count != 1) || (status == TW_EP_DECLINE && count != 0))
        rd_check(r, TW_EBAD_FIELD);
    if (!r->err && !text_ok(&m->u.rdma_endpoint.reason, TW_MAX_REASON_LEN))
        rd_check(r, TW_EBAD_FIELD);
    for (unsigned i = 0; i < count && !r->err; i++) {
        struct tw_fabric_entry e;
        uint8_t provider_len = rd_u8(r);
        uint8_t res = rd_u8(r);
        uint16_t addr_len = rd_u16(r);
        e.addr_format = rd_u32(r);
        rd_bytes(r, provider_len, &e.provider);
        rd_bytes(r, addr_len, &e.addr);
        if (r->err)
            break;
        /* Wire order: provider_len, reserved, addr_len, then the bytes. */
        if (provider_len < 1 || provider_len > TW_MAX_PROVIDER_LEN)
            rd_check(r, TW_EBAD_FIELD);
        if (res)
            rd_check(r, TW_EBAD_FLAGS);
        if (addr_len < 1 || addr_len > TW_MAX_FABRIC_ADDR_LEN)
            rd_check(r, TW_EBAD_FIELD);
        if (!provider_ok(&e.provider))
            rd_check(r, TW_EBAD_FIELD);
        if (i < TW_MAX_FABRIC_ENTRIES)
            m->u.rdma_endpoint.entries[i] = e;
    }
}

static void decode_list_reply(struct rd *r, struct tw_msg *m)
{
    uint32_t count = rd_u32(r);
    m->u.list_reply.count = count;
    if (r->err)
        return;
    /* Every descriptor takes at least TW_DESCRIPTOR_FIXED_LEN bytes, which
     * bounds the loop by the payload, not by the peer's count. */
    if (count > (r->len - r->off) / TW_DESCRIPTOR_FIXED_LEN) {
        r->err = TW_EBAD_LENGTH;
        return;
    }
    size_t start = r->off;
    struct tw_bytes prev = {NULL, 0};
    for (uint32_t i = 0; i < count && !r->err; i++) {
        struct tw_descriptor d;
        rd_descriptor(r, &d);
        if (r->err)
            break;
        /* Names strictly increasing bytewise: sorted and unique. */
        if (prev.ptr) {
            size_t n = prev.len < d.name.len ? prev.len : d.name.len;
            int c = memcmp(prev.ptr, d.name.ptr, n);
            if (c > 0 || (c == 0 && prev.len >= d.name.len))
                rd_check(r, TW_EBAD_FIELD);
        }
        prev = d.name;
    }
    m->u.list_reply.entries.ptr = r->p + start;
    m->u.list_reply.entries.len = (uint32_t)(r->off - start);
}

static void decode_stats_reply(struct rd *r, struct tw_msg *m)
{
    uint32_t count = rd_u32(r);
    m->u.stats_reply.count = count;
    if (r->err)
        return;
    if (count > (r->len - r->off) / 9u) { /* key_len + value, key may be empty */
        r->err = TW_EBAD_LENGTH;
        return;
    }
    size_t start = r->off;
    for (uint32_t i = 0; i < count && !r->err; i++) {
        struct tw_bytes key;
        uint8_t key_len = rd_u8(r);
        rd_bytes(r, key_len, &key);
        (void)rd_u64(r);
        if (!r->err && !stats_key_ok(key.ptr, key.len))
            rd_check(r, TW_EBAD_FIELD);
    }
    m->u.stats_reply.entries.ptr = r->p + start;
    m->u.stats_reply.entries.len = (uint32_t)(r->off - start);
}

static const uint8_t empty_payload[1];

int tw__msg_decode_payload(const struct tw_frame_header *hdr, const uint8_t *payload,
                           struct tw_msg *msg)
{
    memset(&msg->u, 0, sizeof(msg->u));
    msg->hdr = *hdr;
    int rc = check_request_id(hdr->tag, hdr->request_id);
    if (rc < 0)
        return rc;
    struct rd r = {.p = payload ? payload : empty_payload, .len = hdr->payload_len};
    uint8_t res[3];
    switch (hdr->tag) {
    case TW_TAG_HELLO:
        decode_hello(&r, msg);
        break;
    case TW_TAG_HELLO_ACK:
        decode_hello_ack(&r, msg);
        break;
    case TW_TAG_AUTH:
        rd_copy(&r, msg->u.auth.client_nonce, TW_AUTH_NONCE_LEN);
        rd_copy(&r, msg->u.auth.mac, TW_AUTH_MAC_LEN);
        break;
    case TW_TAG_AUTH_OK:
        rd_copy(&r, msg->u.auth_ok.mac, TW_AUTH_MAC_LEN);
        break;
    case TW_TAG_TENSOR_REQUEST: {
        msg->u.tensor_request.flags = rd_u8(&r);
        uint8_t res1 = rd_u8(&r);
        uint16_t name_len = rd_u16(&r);
        rd_bytes(&r, name_len, &msg->u.tensor_request.name);
        if (r.err)
            break;
        if ((msg->u.tensor_request.flags & ~(TW_XFER_WANT_RDMA | TW_XFER_ATTACH_READ)) || res1)
            rd_check(&r, TW_EBAD_FLAGS);
        /* ATTACH_READ says how an RDMA get is read: never without WANT_RDMA. */
        if ((msg->u.tensor_request.flags & TW_XFER_ATTACH_READ) &&
            !(msg->u.tensor_request.flags & TW_XFER_WANT_RDMA))
            rd_check(&r, TW_EBAD_FLAGS);
        rd_check(&r,
                 tw__name_check(msg->u.tensor_request.name.ptr, msg->u.tensor_request.name.len));
        break;
    }
    case TW_TAG_TENSOR_PUT:
        msg->u.tensor_put.flags = rd_u8(&r);
        rd_copy(&r, res, 3);
        if (!r.err && ((msg->u.tensor_put.flags & ~TW_XFER_WANT_RDMA) || !all_zero(res, 3)))
            rd_check(&r, TW_EBAD_FLAGS);
        rd_descriptor(&r, &msg->u.tensor_put.desc);
        break;
    case TW_TAG_TENSOR_INFO:
        msg->u.tensor_info.data_plane = rd_u8(&r);
        rd_copy(&r, res, 3);
        if (!r.err && msg->u.tensor_info.data_plane > TW_DP_RDMA)
            rd_check(&r, TW_EBAD_FIELD);
        if (!r.err && !all_zero(res, 3))
            rd_check(&r, TW_EBAD_FLAGS);
        rd_descriptor(&r, &msg->u.tensor_info.desc);
        break;
    case TW_TAG_DATA:
        msg->u.data.offset = rd_u64(&r);
        if (!r.err)
            rd_bytes(&r, r.len - r.off, &msg->u.data.bytes);
        break;
    case TW_TAG_PUT_ACCEPT:
        msg->u.put_accept.data_plane = rd_u8(&r);
        rd_copy(&r, res, 3);
        if (msg->u.put_accept.data_plane != TW_DP_INLINE &&
            msg->u.put_accept.data_plane != TW_DP_RDMA)
            rd_check(&r, TW_EBAD_FIELD);
        if (!all_zero(res, 3))
            rd_check(&r, TW_EBAD_FLAGS);
        break;
    case TW_TAG_RDMA_ENDPOINT:
        decode_rdma_endpoint(&r, msg);
        break;
    case TW_TAG_RDMA_DONE: {
        msg->u.rdma_done.status = rd_u32(&r);
        uint32_t res4 = rd_u32(&r);
        msg->u.rdma_done.bytes = rd_u64(&r);
        if (res4)
            rd_check(&r, TW_EBAD_FLAGS);
        break;
    }
    case TW_TAG_RDMA_REGISTER:
        msg->u.rdma_register.rkey = rd_u64(&r);
        msg->u.rdma_register.remote_addr = rd_u64(&r);
        msg->u.rdma_register.length = rd_u64(&r);
        break;
    case TW_TAG_RDMA_AVAILABLE:
        msg->u.rdma_available.ready = rd_u64(&r);
        break;
    case TW_TAG_RDMA_READY:
    case TW_TAG_OK:
    case TW_TAG_STATS:
        break;
    case TW_TAG_ERROR: {
        msg->u.error.code = rd_u32(&r);
        uint16_t len = rd_u16(&r);
        rd_bytes(&r, len, &msg->u.error.message);
        if (msg->u.error.code == 0)
            rd_check(&r, TW_EBAD_FIELD);
        if (!r.err && !text_ok(&msg->u.error.message, TW_MAX_ERROR_MSG_LEN))
            rd_check(&r, TW_EBAD_FIELD);
        break;
    }
    case TW_TAG_LIST: {
        uint16_t len = rd_u16(&r);
        rd_bytes(&r, len, &msg->u.list.prefix);
        if (!r.err && len > 0)
            rd_check(&r, tw__name_check(msg->u.list.prefix.ptr, len));
        break;
    }
    case TW_TAG_LIST_REPLY:
        decode_list_reply(&r, msg);
        break;
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
        decode_name(&r, &msg->u.name.name);
        break;
    case TW_TAG_PING:
    case TW_TAG_PONG:
        rd_copy(&r, msg->u.ping.payload, TW_PING_PAYLOAD_LEN);
        break;
    case TW_TAG_GOODBYE:
        msg->u.goodbye.code = rd_u32(&r);
        break;
    case TW_TAG_STATS_REPLY:
        decode_stats_reply(&r, msg);
        break;
    default:
        return TW_EUNKNOWN_TAG;
    }
    return rd_finish(&r);
}

ssize_t tw__msg_decode(const uint8_t *buf, size_t len, uint32_t max_frame, struct tw_msg *msg)
{
    struct tw_frame_header hdr;
    int rc = tw__frame_decode_header(buf, len, max_frame, &hdr);
    if (rc < 0)
        return rc;
    if (len - TW_FRAME_HEADER_LEN < hdr.payload_len)
        return TW_EAGAIN_FRAME;
    rc = tw__msg_decode_payload(&hdr, buf + TW_FRAME_HEADER_LEN, msg);
    if (rc < 0)
        return rc;
    return (ssize_t)(TW_FRAME_HEADER_LEN + (size_t)hdr.payload_len);
}

int tw__msg_decode_data_prefix(const struct tw_frame_header *hdr, const uint8_t *prefix,
                               struct tw_msg *msg)
{
    if (hdr->tag != TW_TAG_DATA)
        return TW_EUNKNOWN_TAG;
    memset(&msg->u, 0, sizeof(msg->u));
    msg->hdr = *hdr;
    int rc = check_request_id(hdr->tag, hdr->request_id);
    if (rc < 0)
        return rc;
    if (hdr->payload_len < TW_DATA_PREFIX_LEN)
        return TW_EBAD_LENGTH;
    msg->u.data.offset = wire_get_u64(prefix);
    msg->u.data.bytes.ptr = NULL;
    msg->u.data.bytes.len = hdr->payload_len - TW_DATA_PREFIX_LEN;
    return 0;
}

/* ---- iterators --------------------------------------------------------- */

int tw__list_next(const struct tw_msg *msg, size_t *cursor, struct tw_descriptor *out)
{
    const struct tw_bytes *e = &msg->u.list_reply.entries;
    if (*cursor >= e->len)
        return 0;
    struct rd r = {.p = e->ptr, .len = e->len, .off = *cursor};
    rd_descriptor(&r, out);
    if (r.err)
        return r.err;
    if (r.field_err)
        return r.field_err;
    *cursor = r.off;
    return 1;
}

int tw__stats_next(const struct tw_msg *msg, size_t *cursor, struct tw_bytes *key, uint64_t *value)
{
    const struct tw_bytes *e = &msg->u.stats_reply.entries;
    if (*cursor >= e->len)
        return 0;
    struct rd r = {.p = e->ptr, .len = e->len, .off = *cursor};
    uint8_t key_len = rd_u8(&r);
    rd_bytes(&r, key_len, key);
    *value = rd_u64(&r);
    if (r.err)
        return r.err;
    if (!stats_key_ok(key->ptr, key->len))
        return TW_EBAD_FIELD;
    *cursor = r.off;
    return 1;
}

ssize_t tw__stats_entry_encode(const char *key, uint64_t value, uint8_t *buf, size_t cap)
{
    size_t klen = key ? strlen(key) : 0;
    if (!stats_key_ok((const uint8_t *)key, klen))
        return TW_EBAD_FIELD;
    if (cap < 1 + klen + 8)
        return -ENOBUFS;
    wire_put_u8(buf, (uint8_t)klen);
    memcpy(buf + 1, key, klen);
    wire_put_u64(buf + 1 + klen, value);
    return (ssize_t)(1 + klen + 8);
}

/* ---- encoder ----------------------------------------------------------- */

static int bytes_ok(const struct tw_bytes *b)
{
    return b->len == 0 || b->ptr != NULL;
}

/* Checks that every length fits its wire field (so nothing is truncated)
 * and returns the payload length, or a verdict. Value rules are left to the
 * decoder pass that runs over the written bytes. */
static int64_t desc_len(const struct tw_descriptor *d)
{
    if (d->ndim > TW_MAX_NDIM)
        return TW_EBAD_SHAPE;
    if (d->name.len > TW_MAX_NAME_LEN || !bytes_ok(&d->name))
        return TW_EBAD_NAME;
    if (d->device_tag.len > TW_MAX_DEVICE_TAG_LEN || !bytes_ok(&d->device_tag))
        return TW_EBAD_DEVICE_TAG;
    return (int64_t)tw__descriptor_encoded_len(d);
}

static int64_t payload_len_of(const struct tw_msg *m)
{
    int64_t n;
    switch (m->hdr.tag) {
    case TW_TAG_HELLO:
        if (m->u.hello.caps & ~TW_CAP_KNOWN_MASK)
            return TW_EBAD_CAPS;
        if (m->u.hello.agent.len > TW_MAX_AGENT_LEN || !bytes_ok(&m->u.hello.agent))
            return TW_EBAD_FIELD;
        return 18 + (int64_t)m->u.hello.agent.len;
    case TW_TAG_HELLO_ACK:
        if (m->u.hello_ack.caps & ~TW_CAP_KNOWN_MASK)
            return TW_EBAD_CAPS;
        if (m->u.hello_ack.agent.len > TW_MAX_AGENT_LEN || !bytes_ok(&m->u.hello_ack.agent))
            return TW_EBAD_FIELD;
        return 54 + (int64_t)m->u.hello_ack.agent.len;
    case TW_TAG_AUTH:
        return TW_AUTH_NONCE_LEN + TW_AUTH_MAC_LEN;
    case TW_TAG_AUTH_OK:
        return TW_AUTH_MAC_LEN;
    case TW_TAG_TENSOR_REQUEST:
        if (m->u.tensor_request.name.len > TW_MAX_NAME_LEN || !bytes_ok(&m->u.tensor_request.name))
            return TW_EBAD_NAME;
        return 4 + (int64_t)m->u.tensor_request.name.len;
    case TW_TAG_TENSOR_PUT:
        n = desc_len(&m->u.tensor_put.desc);
        return n < 0 ? n : 4 + n;
    case TW_TAG_TENSOR_INFO:
        n = desc_len(&m->u.tensor_info.desc);
        return n < 0 ? n : 4 + n;
    case TW_TAG_DATA:
        return TW_DATA_PREFIX_LEN + (int64_t)m->u.data.bytes.len;
    case TW_TAG_PUT_ACCEPT:
        return 4;
    case TW_TAG_RDMA_ENDPOINT: {
        const __typeof__(m->u.rdma_endpoint) *ep = &m->u.rdma_endpoint;
        if (ep->count > TW_MAX_FABRIC_ENTRIES)
            return TW_EBAD_FIELD;
        if (ep->reason.len > TW_MAX_REASON_LEN || !bytes_ok(&ep->reason))
            return TW_EBAD_FIELD;
        n = 20 + (int64_t)ep->reason.len;
        for (unsigned i = 0; i < ep->count; i++) {
            const struct tw_fabric_entry *e = &ep->entries[i];
            if (e->provider.len > TW_MAX_PROVIDER_LEN || !bytes_ok(&e->provider) ||
                e->addr.len > TW_MAX_FABRIC_ADDR_LEN || !bytes_ok(&e->addr))
                return TW_EBAD_FIELD;
            n += 8 + (int64_t)e->provider.len + (int64_t)e->addr.len;
        }
        return n;
    }
    case TW_TAG_RDMA_DONE:
        return 16;
    case TW_TAG_RDMA_REGISTER:
        return 24;
    case TW_TAG_RDMA_AVAILABLE:
        return 8;
    case TW_TAG_RDMA_READY:
    case TW_TAG_OK:
    case TW_TAG_STATS:
        return 0;
    case TW_TAG_ERROR:
        if (m->u.error.message.len > TW_MAX_ERROR_MSG_LEN || !bytes_ok(&m->u.error.message))
            return TW_EBAD_FIELD;
        return 6 + (int64_t)m->u.error.message.len;
    case TW_TAG_LIST:
        if (m->u.list.prefix.len > TW_MAX_NAME_LEN || !bytes_ok(&m->u.list.prefix))
            return TW_EBAD_NAME;
        return 2 + (int64_t)m->u.list.prefix.len;
    case TW_TAG_LIST_REPLY:
        if (!bytes_ok(&m->u.list_reply.entries))
            return TW_EBAD_LENGTH;
        return 4 + (int64_t)m->u.list_reply.entries.len;
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
        if (m->u.name.name.len > TW_MAX_NAME_LEN || !bytes_ok(&m->u.name.name))
            return TW_EBAD_NAME;
        return 2 + (int64_t)m->u.name.name.len;
    case TW_TAG_PING:
    case TW_TAG_PONG:
        return TW_PING_PAYLOAD_LEN;
    case TW_TAG_GOODBYE:
        return 4;
    case TW_TAG_STATS_REPLY:
        if (!bytes_ok(&m->u.stats_reply.entries))
            return TW_EBAD_LENGTH;
        return 4 + (int64_t)m->u.stats_reply.entries.len;
    default:
        return TW_EUNKNOWN_TAG;
    }
}

ssize_t tw__msg_encoded_len(const struct tw_msg *msg)
{
    const struct tw_frame_header *h = &msg->hdr;
    if (h->tag == 0 || h->tag > TW_TAG_MAX)
        return TW_EUNKNOWN_TAG;
    if ((h->flags & ~TW_FRAME_FLAGS_KNOWN) ||
        ((h->flags & TW_FRAME_MORE) && !tw__tag_may_have_more(h->tag)))
        return TW_EBAD_FLAGS;
    int rc = check_request_id(h->tag, h->request_id);
    if (rc < 0)
        return rc;
    int64_t n = payload_len_of(msg);
    if (n < 0)
        return (ssize_t)n;
    if (n > (int64_t)UINT32_MAX)
        return TW_EFRAME_TOO_LARGE;
    return (ssize_t)(TW_FRAME_HEADER_LEN + n);
}

static size_t put_bytes(uint8_t *p, const struct tw_bytes *b)
{
    if (b->len)
        memcpy(p, b->ptr, b->len);
    return b->len;
}

static void put_payload(uint8_t *p, const struct tw_msg *m)
{
    size_t off = 0;
    switch (m->hdr.tag) {
    case TW_TAG_HELLO:
        wire_put_u64(p, m->u.hello.caps);
        wire_put_u32(p + 8, m->u.hello.max_frame);
        wire_put_u32(p + 12, m->u.hello.max_inflight);
        wire_put_u16(p + 16, (uint16_t)m->u.hello.agent.len);
        put_bytes(p + 18, &m->u.hello.agent);
        break;
    case TW_TAG_HELLO_ACK:
        wire_put_u64(p, m->u.hello_ack.caps);
        wire_put_u32(p + 8, m->u.hello_ack.max_frame);
        wire_put_u32(p + 12, m->u.hello_ack.max_inflight);
        wire_put_u8(p + 16, m->u.hello_ack.auth_method);
        memset(p + 17, 0, 3);
        memcpy(p + 20, m->u.hello_ack.server_nonce, TW_AUTH_NONCE_LEN);
        wire_put_u16(p + 52, (uint16_t)m->u.hello_ack.agent.len);
        put_bytes(p + 54, &m->u.hello_ack.agent);
        break;
    case TW_TAG_AUTH:
        memcpy(p, m->u.auth.client_nonce, TW_AUTH_NONCE_LEN);
        memcpy(p + TW_AUTH_NONCE_LEN, m->u.auth.mac, TW_AUTH_MAC_LEN);
        break;
    case TW_TAG_AUTH_OK:
        memcpy(p, m->u.auth_ok.mac, TW_AUTH_MAC_LEN);
        break;
    case TW_TAG_TENSOR_REQUEST:
        wire_put_u8(p, m->u.tensor_request.flags);
        wire_put_u8(p + 1, 0);
        wire_put_u16(p + 2, (uint16_t)m->u.tensor_request.name.len);
        put_bytes(p + 4, &m->u.tensor_request.name);
        break;
    case TW_TAG_TENSOR_PUT:
        wire_put_u8(p, m->u.tensor_put.flags);
        memset(p + 1, 0, 3);
        tw__descriptor_put(p + 4, &m->u.tensor_put.desc);
        break;
    case TW_TAG_TENSOR_INFO:
        wire_put_u8(p, m->u.tensor_info.data_plane);
        memset(p + 1, 0, 3);
        tw__descriptor_put(p + 4, &m->u.tensor_info.desc);
        break;
    case TW_TAG_DATA:
        wire_put_u64(p, m->u.data.offset);
        if (m->u.data.bytes.ptr)
            put_bytes(p + 8, &m->u.data.bytes);
        break;
    case TW_TAG_PUT_ACCEPT:
        wire_put_u8(p, m->u.put_accept.data_plane);
        memset(p + 1, 0, 3);
        break;
    case TW_TAG_RDMA_ENDPOINT: {
        const __typeof__(m->u.rdma_endpoint) *ep = &m->u.rdma_endpoint;
        wire_put_u8(p, ep->status);
        wire_put_u8(p + 1, ep->count);
        wire_put_u16(p + 2, (uint16_t)ep->reason.len);
        memcpy(p + 4, ep->host_id, TW_HOST_ID_LEN);
        off = 20 + put_bytes(p + 20, &ep->reason);
        for (unsigned i = 0; i < ep->count; i++) {
            const struct tw_fabric_entry *e = &ep->entries[i];
            wire_put_u8(p + off, (uint8_t)e->provider.len);
            wire_put_u8(p + off + 1, 0);
            wire_put_u16(p + off + 2, (uint16_t)e->addr.len);
            wire_put_u32(p + off + 4, e->addr_format);
            off += 8;
            off += put_bytes(p + off, &e->provider);
            off += put_bytes(p + off, &e->addr);
        }
        break;
    }
    case TW_TAG_RDMA_DONE:
        wire_put_u32(p, m->u.rdma_done.status);
        wire_put_u32(p + 4, 0);
        wire_put_u64(p + 8, m->u.rdma_done.bytes);
        break;
    case TW_TAG_RDMA_REGISTER:
        wire_put_u64(p, m->u.rdma_register.rkey);
        wire_put_u64(p + 8, m->u.rdma_register.remote_addr);
        wire_put_u64(p + 16, m->u.rdma_register.length);
        break;
    case TW_TAG_RDMA_AVAILABLE:
        wire_put_u64(p, m->u.rdma_available.ready);
        break;
    case TW_TAG_ERROR:
        wire_put_u32(p, m->u.error.code);
        wire_put_u16(p + 4, (uint16_t)m->u.error.message.len);
        put_bytes(p + 6, &m->u.error.message);
        break;
    case TW_TAG_LIST:
        wire_put_u16(p, (uint16_t)m->u.list.prefix.len);
        put_bytes(p + 2, &m->u.list.prefix);
        break;
    case TW_TAG_LIST_REPLY:
        wire_put_u32(p, m->u.list_reply.count);
        put_bytes(p + 4, &m->u.list_reply.entries);
        break;
    case TW_TAG_STAT:
    case TW_TAG_DELETE:
        wire_put_u16(p, (uint16_t)m->u.name.name.len);
        put_bytes(p + 2, &m->u.name.name);
        break;
    case TW_TAG_PING:
    case TW_TAG_PONG:
        memcpy(p, m->u.ping.payload, TW_PING_PAYLOAD_LEN);
        break;
    case TW_TAG_GOODBYE:
        wire_put_u32(p, m->u.goodbye.code);
        break;
    case TW_TAG_STATS_REPLY:
        wire_put_u32(p, m->u.stats_reply.count);
        put_bytes(p + 4, &m->u.stats_reply.entries);
        break;
    default: /* RDMA_READY, OK, STATS: empty */
        break;
    }
}

ssize_t tw__msg_encode(const struct tw_msg *msg, uint8_t *buf, size_t cap)
{
    ssize_t total = tw__msg_encoded_len(msg);
    if (total < 0)
        return total;
    int zero_copy = msg->hdr.tag == TW_TAG_DATA && msg->u.data.bytes.ptr == NULL;
    size_t need = zero_copy ? TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN : (size_t)total;
    if (need > cap)
        return -ENOBUFS;
    struct tw_frame_header hdr = {
        .version = TW_PROTO_VERSION,
        .flags = msg->hdr.flags,
        .tag = msg->hdr.tag,
        .payload_len = (uint32_t)(total - TW_FRAME_HEADER_LEN),
        .request_id = msg->hdr.request_id,
    };
    wire_put_u32(buf + 0, TW_PROTO_MAGIC);
    wire_put_u8(buf + 4, TW_PROTO_VERSION);
    wire_put_u8(buf + 5, hdr.flags);
    wire_put_u16(buf + 6, 0);
    wire_put_u32(buf + 8, hdr.tag);
    wire_put_u32(buf + 12, hdr.payload_len);
    wire_put_u64(buf + 16, hdr.request_id);
    put_payload(buf + TW_FRAME_HEADER_LEN, msg);
    if (zero_copy)
        return (ssize_t)need;
    /* Validate what was written with the decoder's own rules. */
    struct tw_msg check;
    int rc = tw__msg_decode_payload(&hdr, buf + TW_FRAME_HEADER_LEN, &check);
    if (rc < 0)
        return rc;
    return total;
}

void tw__msg_error_init(struct tw_msg *m, uint64_t id, uint32_t code, const char *text)
{
    memset(m, 0, sizeof(*m));
    m->hdr.version = TW_PROTO_VERSION;
    m->hdr.tag = TW_TAG_ERROR;
    m->hdr.request_id = id;
    m->u.error.code = code;
    m->u.error.message.ptr = (const uint8_t *)text;
    m->u.error.message.len = (uint32_t)strlen(text);
}
