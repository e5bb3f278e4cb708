/*
 * The inline data plane: tensor bytes travel in DATA frames on the control
 * connection. Sending queues frames that point into the tensor version (no
 * copy); receiving hands the session a destination inside the new version,
 * into which it read()s the bytes directly.
 */
#include "server/xfer.h"

#include "server/server.h"

static int inline_start(struct tw_xfer *x)
{
    if (x->dir == TW_XFER_GET)
        tw__xfer_want_pump(x);
    return 0;
}

static int inline_pump(struct tw_xfer *x)
{
    /* Frames of at most TW_SRV_DATA_CHUNK, never above the negotiated
     * max_frame (whose payload also holds the 8-byte offset). */
    uint32_t chunk = x->conn->max_frame - TW_DATA_PREFIX_LEN;
    if (chunk > TW_SRV_DATA_CHUNK)
        chunk = TW_SRV_DATA_CHUNK;
    uint64_t total = x->t->byte_length;
    uint64_t left = total - x->done;
    size_t len = left < chunk ? (size_t)left : chunk;
    int more = x->done + len < total;
    /* A 0-byte tensor still sends exactly one empty DATA frame, MORE=0. */
    int rc = tw__conn_send_data(x->conn, x->id, x->t, x->done, len, more);
    if (rc < 0)
        return rc;
    x->done += len;
    return more ? 1 : 0;
}

static int inline_data_begin(struct tw_xfer *x, const struct tw_msg *m, uint8_t **dst)
{
    uint64_t off = m->u.data.offset, len = m->u.data.bytes.len;
    uint64_t total = x->t->byte_length;
    int more = (m->hdr.flags & TW_FRAME_MORE) != 0;
    if (off != x->done)
        return TW_EOUT_OF_ORDER; /* offsets are strictly sequential, no gaps */
    if (len > total - x->done)
        return TW_EBAD_LENGTH; /* bytes past byte_length */
    if (!more && x->done + len != total)
        return TW_EBAD_LENGTH; /* last frame before byte_length */
    *dst = x->t->data ? x->t->data + off : NULL;
    return 0;
}

static int inline_data_end(struct tw_xfer *x, const struct tw_msg *m)
{
    uint64_t len = m->u.data.bytes.len;
    if (x->t->has_crc && len)
        x->crc = tw__crc32c(x->crc, x->t->data + x->done, (size_t)len);
    x->done += len;
    return (m->hdr.flags & TW_FRAME_MORE) ? 0 : 1;
}

static int inline_on_msg(struct tw_xfer *x, const struct tw_msg *m)
{
    /* Bit 6: the client registered its source before reading our
     * PUT_ACCEPT(1); the state machine let that one registration through,
     * and it is void: the bytes come inline. */
    if (x->dir == TW_XFER_PUT && m->hdr.tag == TW_TAG_RDMA_REGISTER)
        return 0;
    return TW_ENOT_NEGOTIATED; /* no other RDMA messages on the inline plane */
}

const struct tw_dp_ops tw__dp_inline_ops = {
    .name = "inline",
    .wire_plane = TW_DP_INLINE,
    .start = inline_start,
    .pump = inline_pump,
    .data_begin = inline_data_begin,
    .data_end = inline_data_end,
    .on_msg = inline_on_msg,
    .release = NULL,
};
