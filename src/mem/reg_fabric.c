/* libfabric registrar adapter (see reg_fabric.h). */
#include <stdatomic.h>
#include <stdio.h>
#include <sys/uio.h>

#include <rdma/fi_errno.h>

#include "mem/reg_fabric.h"
#include "tensorwire/error.h"

void tw__fabric_registrar_init(struct tw_fabric_registrar *fr, struct fid_domain *domain,
                               int mr_mode)
{
    fr->domain = domain;
    fr->mr_mode = mr_mode;
    atomic_init(&fr->next_key, 1);
}

uint64_t tw__fabric_access(uint32_t access)
{
    uint64_t a = 0;
    if (access & TW_ACCESS_LOCAL_READ)
        a |= FI_SEND | FI_WRITE;
    if (access & TW_ACCESS_LOCAL_WRITE)
        a |= FI_RECV | FI_READ;
    if (access & TW_ACCESS_REMOTE_READ)
        a |= FI_REMOTE_READ;
    if (access & TW_ACCESS_REMOTE_WRITE)
        a |= FI_REMOTE_WRITE;
    return a;
}

static int fabric_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                      size_t errlen)
{
    struct tw_fabric_registrar *fr = ctx;
    struct iovec iov = {.iov_base = (void *)req->addr, .iov_len = req->len};
    struct fi_mr_attr attr = {
        .mr_iov = &iov,
        .iov_count = 1,
        .access = tw__fabric_access(req->access),
        .requested_key = (fr->mr_mode & FI_MR_PROV_KEY) ? 0 : atomic_fetch_add(&fr->next_key, 1),
        .iface = FI_HMEM_SYSTEM,
    };
    if (req->attr.kind == TW_MEMKIND_CUDA) {
        attr.iface = FI_HMEM_CUDA;
        attr.device.cuda = req->attr.device;
    }
    struct fid_mr *mr = NULL;
    int rc = fi_mr_regattr(fr->domain, &attr, 0, &mr);
    if (rc) {
        if (err && errlen)
            snprintf(err, errlen, "fi_mr_regattr(%#lx, %zu, %s): %s", (unsigned long)req->addr,
                     req->len, req->kind->name, fi_strerror(-rc));
        /* libfabric's FI_E* codes are errno values, so -rc maps 1:1. */
        return rc < 0 ? rc : TW_EINTERNAL;
    }
    *handle = mr;
    return 0;
}

static void fabric_dereg(void *ctx, void *handle)
{
    struct fid_mr *mr = handle;
    /* fi_close of an MR only fails on a provider bug; nothing to undo. */
    (void)fi_close(&mr->fid);
}

const struct tw_registrar_ops tw__fabric_registrar_ops = {
    .name = "libfabric",
    .reg = fabric_reg,
    .dereg = fabric_dereg,
};
