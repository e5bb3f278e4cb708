/*
 * Staging planes (client side): the caller's buffer is GPU memory that the
 * inline plane cannot read() into and the RDMA plane may not register
 * (tw__path_decide said TW_PATH_STAGING_HOST), so the transfer runs on the
 * inner plane (inline or RDMA, unchanged) over a host buffer the library
 * owns, and the bytes cross between that buffer and the device with the
 * memory kind's copies:
 *
 *   put: put_prepare copies device -> host before TENSOR_PUT is built (the
 *        descriptor's CRC is computed on the host copy), the inner plane
 *        sends from the host copy;
 *   get: get_start points the inner plane at a host buffer of byte_length
 *        bytes; on the inline plane each DATA frame's bytes are copied on
 *        to the device as soon as they are in (the next frames wait in the
 *        socket meanwhile); what is left (all of it on RDMA) is copied in
 *        release, before the request is reported done.
 *
 * r->buf is the host buffer while the inner plane runs and the caller's
 * device pointer again after release. The copies are synchronous on the
 * device's primary context (cuMemcpyDtoH / cuMemcpyHtoD on the legacy
 * default stream), so when a call returns the bytes are in place and
 * visible to any work later submitted on that device.
 *
 * The host buffer is kept on the handle between requests (the largest one
 * used so far) and page-locked from 1 MiB up, so repeated transfers do not
 * fault in or pin fresh pages. Not a full pipeline yet: a put copies the
 * whole tensor before sending, and the RDMA plane copies after the read
 * (the chunked pipeline of mem/staging.h is the next step;
 * docs/performance.md has what this costs).
 *
 * State: struct stage in r->stage (the inner plane keeps r->dp_state).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "mem/hostmem.h"

struct staged_plane {
    struct tw__client_dp_ops ops; /* first: r->dp points here */
    const struct tw__client_dp_ops *inner;
};

/* A library host buffer; pinned through `pin_dev`'s context when >= 0. */
struct tw__stage_buf {
    void *p;
    size_t cap;
    int pin_dev;
};

struct stage {
    uint8_t *dev; /* the caller's device buffer */
    struct tw__stage_buf *buf;
    size_t len;
    size_t copied; /* get: bytes already copied to the device */
    int failed;    /* get: a copy to the device failed (text in c->errmsg) */
};

/* Buffers at least this large are page-locked (copies at full speed; the
 * pinning is paid once while the buffer is kept between requests). */
#define STAGE_PIN_MIN ((size_t)1 << 20)

static void buf_free(struct tw__stage_buf *b)
{
    if (!b)
        return;
    if (b->pin_dev >= 0)
        tw__memkind_cuda_async.unpin(b->pin_dev, b->p);
    tw__hostmem_free(b->p);
    free(b);
}

void tw__client_stage_free(struct tw_client *c)
{
    buf_free(c->stage_spare);
    c->stage_spare = NULL;
}

/* A host buffer of at least len bytes: the kept one when it is large
 * enough, else a new one. */
static struct tw__stage_buf *buf_get(struct tw_client *c, const struct tw__creq *r, size_t len)
{
    struct tw__stage_buf *b = c->stage_spare;
    if (b && b->cap >= len) {
        c->stage_spare = NULL;
        return b;
    }
    b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cap = len ? len : 1;
    b->pin_dev = -1;
    if (tw__hostmem_alloc(b->cap, &b->p) != 0) {
        free(b);
        return NULL;
    }
    const struct tw_memkind_async_ops *as = r->mem_ops->async;
    if (as && b->cap >= STAGE_PIN_MIN && as->pin(r->mem.device, b->p, b->cap, NULL, 0) == 0)
        b->pin_dev = r->mem.device;
    return b;
}

/* Keeps the larger of b and the kept buffer, frees the other. */
static void buf_put(struct tw_client *c, struct tw__stage_buf *b)
{
    if (c->stage_spare && c->stage_spare->cap >= b->cap) {
        buf_free(b);
        return;
    }
    buf_free(c->stage_spare);
    c->stage_spare = b;
}

static const struct tw__client_dp_ops *inner_of(const struct tw__creq *r)
{
    return ((const struct staged_plane *)r->dp)->inner;
}

/* Swaps r->buf for a host buffer of len bytes. */
static int stage_begin(struct tw_client *c, struct tw__creq *r, size_t len)
{
    struct stage *st = calloc(1, sizeof(*st));
    if (!st)
        return -ENOMEM;
    st->buf = buf_get(c, r, len);
    if (!st->buf) {
        free(st);
        tw__client_seterr(c, "'%s': cannot allocate %zu bytes of host memory to stage GPU memory",
                          r->name, len);
        return -ENOMEM;
    }
    st->dev = r->buf;
    st->len = len;
    r->stage = st;
    r->buf = st->buf->p;
    return 0;
}

/* Copies the received bytes [st->copied, upto) to the device. */
static int stage_to_device(struct tw_client *c, struct tw__creq *r, struct stage *st, size_t upto)
{
    char err[200];
    if (upto <= st->copied)
        return 0;
    int rc = r->mem_ops->copy_from_host((uintptr_t)(st->dev + st->copied),
                                        (const uint8_t *)st->buf->p + st->copied, upto - st->copied,
                                        &r->mem, err, sizeof(err));
    if (rc) {
        tw__client_seterr(c, "'%s': copying the received bytes to the GPU failed: %s", r->name,
                          err);
        return rc;
    }
    st->copied = upto;
    return 0;
}

static int staged_get_start(struct tw_client *c, struct tw__creq *r)
{
    int rc = stage_begin(c, r, (size_t)r->expect);
    if (rc)
        return rc;
    return inner_of(r)->get_start(c, r);
}

/* Inline: each frame's bytes go on to the device as soon as they are in,
 * while the next ones wait in the socket; the last ones in release. */
static int staged_get_data(struct tw_client *c, struct tw__creq *r, uint64_t offset, uint32_t n,
                           int more)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (!in->get_data)
        return TW_EBAD_FIELD;
    int rc = in->get_data(c, r, offset, n, more);
    struct stage *st = r->stage; /* NULL once the request finished */
    if (rc || !st || !more || st->failed)
        return rc;
    /* A failed copy fails the request when it ends (release): the rest of
     * its bytes still arrive and the connection stays in step. */
    st->failed = stage_to_device(c, r, st, (size_t)r->received);
    return 0;
}

static int staged_put_prepare(struct tw_client *c, struct tw__creq *r)
{
    char err[200];
    int rc = stage_begin(c, r, r->len);
    if (rc || !r->len)
        return rc;
    struct stage *st = r->stage;
    rc =
        r->mem_ops->copy_to_host(st->buf->p, (uintptr_t)st->dev, r->len, &r->mem, err, sizeof(err));
    if (rc)
        tw__client_seterr(c, "'%s': staging the GPU buffer to host memory failed: %s", r->name,
                          err);
    return rc;
}

static int staged_put_start(struct tw_client *c, struct tw__creq *r)
{
    return inner_of(r)->put_start(c, r);
}

static int staged_on_message(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (!in->on_message)
        return TW_EBAD_FIELD;
    return in->on_message(c, r, msg);
}

/* The inner plane let go of the host buffer: a successful get's last bytes
 * go to the device now (a failed copy fails the request: r->status), and
 * the caller's pointer comes back. */
static void staged_release(struct tw_client *c, struct tw__creq *r)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (in->release)
        in->release(c, r);
    struct stage *st = r->stage;
    if (!st)
        return;
    r->stage = NULL;
    if (r->op == TW__OP_GET && r->finished && r->status == 0) {
        int rc = st->failed ? st->failed : stage_to_device(c, r, st, (size_t)r->expect);
        if (rc)
            r->status = rc;
    }
    r->buf = st->dev;
    buf_put(c, st->buf);
    free(st);
}

static const struct staged_plane inline_staged = {
    .ops =
        {
            .name = "inline tcp + staging",
            .wire_plane = TW_DP_INLINE,
            .xfer_flags = 0,
            .get_start = staged_get_start,
            .get_data = staged_get_data,
            .put_prepare = staged_put_prepare,
            .put_start = staged_put_start,
            .on_message = NULL,
            .release = staged_release,
        },
    .inner = &tw__client_dp_inline,
};

static const struct staged_plane rdma_staged = {
    .ops =
        {
            .name = "rdma + staging",
            .wire_plane = TW_DP_RDMA,
            .xfer_flags = TW_XFER_WANT_RDMA,
            .get_start = staged_get_start,
            .get_data = staged_get_data,
            .put_prepare = staged_put_prepare,
            .put_start = staged_put_start,
            .on_message = staged_on_message,
            .release = staged_release,
        },
    .inner = &tw__client_dp_rdma,
};

const struct tw__client_dp_ops *const tw__client_dp_inline_staged = &inline_staged.ops;
const struct tw__client_dp_ops *const tw__client_dp_rdma_staged = &rdma_staged.ops;
