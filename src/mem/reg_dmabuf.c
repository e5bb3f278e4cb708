/* dma-buf export registrar (see reg_dmabuf.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "mem/reg_dmabuf.h"
#include "tensorwire/error.h"

static int dmabuf_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                      size_t errlen)
{
    struct tw_dmabuf_registrar *dr = ctx;
    if (!req->kind->export_dmabuf) {
        if (err && errlen)
            snprintf(err, errlen, "%s memory cannot be exported as a dma-buf", req->kind->name);
        return TW_EINVAL;
    }
    struct tw_dmabuf_handle *h = malloc(sizeof(*h));
    if (!h)
        return -ENOMEM;
    int rc =
        req->kind->export_dmabuf(req->addr, req->len, &req->attr, &h->fd, &h->offset, err, errlen);
    if (rc)
        goto out_free_handle;
    h->addr = req->addr;
    h->len = req->len;
    if (dr) {
        atomic_fetch_add(&dr->live, 1);
        atomic_fetch_add(&dr->exports, 1);
    }
    *handle = h;
    return 0;

out_free_handle:
    free(h);
    return rc;
}

static void dmabuf_dereg(void *ctx, void *handle)
{
    struct tw_dmabuf_registrar *dr = ctx;
    struct tw_dmabuf_handle *h = handle;
    close(h->fd);
    free(h);
    if (dr)
        atomic_fetch_sub(&dr->live, 1);
}

const struct tw_registrar_ops tw__dmabuf_registrar_ops = {
    .name = "dma-buf",
    .reg = dmabuf_reg,
    .dereg = dmabuf_dereg,
};
