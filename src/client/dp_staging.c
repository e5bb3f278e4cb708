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
 *        bytes; when the request ends with success, release copies it host
 *        -> device and only then reports the request done.
 *
 * r->buf is the host buffer while the inner plane runs and the caller's
 * device pointer again after release. The copies are synchronous on the
 * device's primary context (cuMemcpyDtoH / cuMemcpyHtoD on the legacy
 * default stream), so when a call returns the bytes are in place and
 * visible to any work later submitted on that device.
 *
 * Not pipelined: the device copy and the network do not overlap yet (the
 * chunked pipeline of mem/staging.h is the next step; docs/performance.md
 * has what this costs).
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

struct stage {
    uint8_t *dev; /* the caller's device buffer */
    void *host;   /* tw__hostmem_alloc'd, len bytes (at least 1) */
    size_t len;
};

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
    int rc = tw__hostmem_alloc(len ? len : 1, &st->host);
    if (rc) {
        free(st);
        tw__client_seterr(c, "'%s': cannot allocate %zu bytes of host memory to stage GPU memory",
                          r->name, len);
        return rc;
    }
    st->dev = r->buf;
    st->len = len;
    r->stage = st;
    r->buf = st->host;
    return 0;
}

static int staged_get_start(struct tw_client *c, struct tw__creq *r)
{
    int rc = stage_begin(c, r, (size_t)r->expect);
    if (rc)
        return rc;
    return inner_of(r)->get_start(c, r);
}

static int staged_get_data(struct tw_client *c, struct tw__creq *r, uint64_t offset, uint32_t n,
                           int more)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (!in->get_data)
        return TW_EBAD_FIELD;
    return in->get_data(c, r, offset, n, more);
}

static int staged_put_prepare(struct tw_client *c, struct tw__creq *r)
{
    char err[200];
    int rc = stage_begin(c, r, r->len);
    if (rc || !r->len)
        return rc;
    struct stage *st = r->stage;
    rc = r->mem_ops->copy_to_host(st->host, (uintptr_t)st->dev, r->len, &r->mem, err, sizeof(err));
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

/* The inner plane let go of the host buffer: a successful get's bytes go to
 * the device now (a failed copy fails the request: r->status), and the
 * caller's pointer comes back. */
static void staged_release(struct tw_client *c, struct tw__creq *r)
{
    const struct tw__client_dp_ops *in = inner_of(r);
    if (in->release)
        in->release(c, r);
    struct stage *st = r->stage;
    if (!st)
        return;
    if (r->op == TW__OP_GET && r->finished && r->status == 0 && r->expect) {
        char err[200];
        int rc = r->mem_ops->copy_from_host((uintptr_t)st->dev, st->host, (size_t)r->expect,
                                            &r->mem, err, sizeof(err));
        if (rc) {
            r->status = rc;
            tw__client_seterr(c, "'%s': copying the received bytes to the GPU failed: %s", r->name,
                              err);
        }
    }
    r->buf = st->dev;
    tw__hostmem_free(st->host);
    free(st);
    r->stage = NULL;
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
