/*
 * Inline data plane: tensor bytes travel in DATA frames on the control
 * connection. Sending gathers [header+offset | caller bytes] into sendmsg
 * iovecs (no copy of the tensor); receiving copies what already sits in the
 * receive buffer and reads the rest of each frame straight into the caller's
 * buffer.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "client/client_internal.h"

static int inline_get_start(struct tw_client *c, struct tw__creq *r)
{
    (void)c;
    r->received = 0;
    return 0;
}

static int inline_get_data(struct tw_client *c, struct tw__creq *r, uint64_t offset, uint32_t n,
                           int more)
{
    int rc;
    /* The state machine checks the frame sequence; these bounds protect the
     * caller's buffer whatever the state machine concludes. */
    if (offset != r->received || n > r->expect - r->received) {
        tw__client_seterr(c, "DATA for '%s' at offset %llu (+%u) outside the %llu announced bytes",
                          r->name, (unsigned long long)offset, n, (unsigned long long)r->expect);
        return TW_EBAD_LENGTH;
    }
    rc = tw__client_conn_recv_payload(c, r->buf + offset, n, c->request_timeout_ms);
    if (rc)
        return rc;
    if (r->check_crc)
        r->crc = tw__crc32c(r->crc, r->buf + offset, n);
    r->received += n;
    if (more)
        return 0;
    if (r->received != r->expect) {
        tw__client_seterr(c, "DATA for '%s' ended after %llu of %llu bytes", r->name,
                          (unsigned long long)r->received, (unsigned long long)r->expect);
        return TW_EBAD_LENGTH;
    }
    if (r->check_crc && r->crc != r->crc_expected) {
        char why[200];
        int k = snprintf(why, sizeof(why),
                         "'%s': CRC32C of the received bytes is %08x, the server announced %08x",
                         r->name, r->crc, r->crc_expected);
        tw__client_engine_finish(c, r, TW_ECHECKSUM, why,
                                 (size_t)k < sizeof(why) ? (size_t)k : sizeof(why) - 1);
        return 0;
    }
    tw__client_engine_finish(c, r, 0, NULL, 0);
    return 0;
}

static int inline_put_start(struct tw_client *c, struct tw__creq *r)
{
    /* Frame payload = 8-byte offset + bytes, at most the negotiated limit. */
    size_t chunk = (size_t)c->sm.max_frame - TW_DATA_PREFIX_LEN;
    size_t off = 0;
    do {
        size_t n = r->len - off < chunk ? r->len - off : chunk;
        struct tw_msg m = {
            .hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_DATA, .request_id = r->id}};
        m.hdr.flags = off + n < r->len ? TW_FRAME_MORE : 0;
        m.u.data.offset = off;
        m.u.data.bytes.ptr = n ? r->buf + off : NULL;
        m.u.data.bytes.len = (uint32_t)n;
        int rc = tw__client_conn_queue(c, &m);
        if (rc)
            return rc;
        off += n;
    } while (off < r->len);
    r->received = r->len;
    return 0;
}

const struct tw__client_dp_ops tw__client_dp_inline = {
    .name = "inline tcp",
    .wire_plane = TW_DP_INLINE,
    .xfer_flags = 0,
    .get_start = inline_get_start,
    .get_data = inline_get_data,
    .put_start = inline_put_start,
    .on_message = NULL,
    .release = NULL, /* no per-request state */
};
