/* libfabric inventory and the CUDA registration probe (see probe.h). */
#include "fabric/probe.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fabric/fabric.h"
#include "fabric/fabric_int.h"

const char *tw__fabric_version_string(char *buf, size_t len)
{
    if (tw__fabric_lib_load(NULL, 0) < 0) {
        if (len)
            buf[0] = '\0';
        return buf;
    }
    uint32_t v = fi_version();
    snprintf(buf, len, "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    return buf;
}

int tw__fabric_list_providers(struct tw_fabric_prov_desc *out, size_t cap, char *err, size_t errlen)
{
    struct fi_info *list = NULL;
    int ret = fi_getinfo(TW_FABRIC_API, NULL, NULL, 0, NULL, &list);
    if (ret) {
        if (ret == -FI_ENODATA)
            return 0;
        snprintf(err, errlen, "fi_getinfo: %s", fi_strerror(-ret));
        return ret;
    }
    size_t n = 0;
    for (struct fi_info *fi = list; fi; fi = fi->next) {
        const char *prov = fi->fabric_attr->prov_name ? fi->fabric_attr->prov_name : "?";
        const char *dom = fi->domain_attr->name ? fi->domain_attr->name : "";
        int rma = (fi->caps & FI_RMA) && fi->ep_attr->type == FI_EP_RDM;
        int hmem = (fi->caps & FI_HMEM) != 0;
        /* One row per (provider, domain): merge the capabilities of its
         * endpoint types, so an RDM endpoint with RMA shows wherever one
         * exists. */
        size_t i;
        for (i = 0; i < n && i < cap; i++) {
            if (strcmp(out[i].provider, prov) == 0 && strcmp(out[i].domain, dom) == 0)
                break;
        }
        if (i < n && i < cap) {
            out[i].rma |= rma;
            out[i].hmem |= hmem;
            continue;
        }
        if (n < cap) {
            struct tw_fabric_prov_desc *d = &out[n];
            memset(d, 0, sizeof(*d));
            snprintf(d->provider, sizeof(d->provider), "%s", prov);
            snprintf(d->fabric, sizeof(d->fabric), "%s",
                     fi->fabric_attr->name ? fi->fabric_attr->name : "");
            snprintf(d->domain, sizeof(d->domain), "%s", dom);
            d->rma = rma;
            d->hmem = hmem;
            uint64_t mode = (uint64_t)fi->domain_attr->mr_mode;
            const char *s = fi_tostr(&mode, FI_TYPE_MR_MODE);
            snprintf(d->mr_mode, sizeof(d->mr_mode), "%s", s ? s : "");
        }
        n++;
    }
    fi_freeinfo(list);
    return n > 0x7fffffff ? 0x7fffffff : (int)n;
}

#define PROBE_ACCESS                                                                               \
    (TW_FABRIC_REMOTE_READ | TW_FABRIC_REMOTE_WRITE | TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE)

/* Registers [dev_ptr, dev_ptr+len) of CUDA device `device` on `rail` of fab
 * (through the dma-buf db when not NULL) and releases it. 1 or 0 (why in
 * detail). */
static int reg_on_rail(struct tw_fabric *fab, unsigned rail, int device, uintptr_t dev_ptr,
                       size_t len, const struct tw_fabric_dmabuf *db, char *detail,
                       size_t detail_len)
{
    struct tw_fabric_mr *mr = NULL;
    int rc = db ? tw__fabric_mr_register_dmabuf_rail(fab, rail, (void *)dev_ptr, len, PROBE_ACCESS,
                                                     device, db, &mr)
                : tw__fabric_mr_register_rail(fab, rail, (void *)dev_ptr, len, PROBE_ACCESS,
                                              TW_FABRIC_CUDA, device, &mr);
    if (rc < 0) {
        snprintf(detail, detail_len, "%s: %s",
                 db ? "dma-buf registration refused" : "registering CUDA memory failed",
                 tw__fabric_errmsg(fab));
        return 0;
    }
    tw__fabric_mr_deregister(mr);
    snprintf(detail, detail_len, "registered %zu bytes of cuda:%d%s", len, device,
             db ? " through a dma-buf fd" : "");
    return 1;
}

int tw__fabric_probe_cuda_mr(const char *provider, int device, uintptr_t dev_ptr, size_t len,
                             char *detail, size_t detail_len)
{
    struct tw_fabric_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.provider = provider;
    struct tw_fabric *fab = NULL;
    char why[TW_FABRIC_ERRMSG_LEN];
    if (len == 0) {
        /* Nothing to register: only whether the provider opens here. */
        int rc = tw__fabric_open(&cfg, &fab, why, sizeof(why));
        snprintf(detail, detail_len, "%s", rc < 0 ? why : "opens");
        tw__fabric_close(fab);
        return rc < 0 ? rc : 0;
    }
    cfg.hmem = 1;
    int rc = tw__fabric_open(&cfg, &fab, why, sizeof(why));
    if (rc < 0) {
        /* Tell "no such provider here" from "no FI_HMEM": open it plain. */
        cfg.hmem = 0;
        struct tw_fabric *plain = NULL;
        char why2[TW_FABRIC_ERRMSG_LEN];
        if (tw__fabric_open(&cfg, &plain, why2, sizeof(why2)) < 0) {
            snprintf(detail, detail_len, "%s", why2);
            return rc;
        }
        tw__fabric_close(plain);
        snprintf(detail, detail_len, "opens, but not with FI_HMEM: %s", why);
        return 0;
    }
    rc = reg_on_rail(fab, 0, device, dev_ptr, len, NULL, detail, detail_len);
    tw__fabric_close(fab);
    return rc;
}

int tw__fabric_probe_dmabuf_mr(const char *provider, int device, uintptr_t dev_ptr, size_t len,
                               int fd, uint64_t offset, char *detail, size_t detail_len)
{
    struct tw_fabric_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.provider = provider;
    cfg.hmem = 1;
    struct tw_fabric *fab = NULL;
    char why[TW_FABRIC_ERRMSG_LEN];
    int rc = tw__fabric_open(&cfg, &fab, why, sizeof(why));
    if (rc < 0) {
        snprintf(detail, detail_len, "%s", why);
        return rc;
    }
    struct tw_fabric_dmabuf db = {.fd = fd, .offset = offset};
    rc = reg_on_rail(fab, 0, device, dev_ptr, len, &db, detail, detail_len);
    tw__fabric_close(fab);
    return rc;
}

/* The first usable rail of fab whose core provider is `provider`'s ("tcp"
 * matches "tcp;ofi_rxm"), or -1. */
static int rail_of(struct tw_fabric *fab, const char *provider)
{
    const struct tw_fabric_addr *addrs;
    unsigned n = tw__fabric_local_addrs(fab, &addrs);
    size_t pl = strcspn(provider, ";");
    for (unsigned i = 0; i < n; i++) {
        const char *a = addrs[i].provider;
        if (strcspn(a, ";") == pl && strncmp(a, provider, pl) == 0)
            return (int)i;
    }
    return -1;
}

int tw__fabric_plane_probe_mr(struct tw_fabric *fab, const char *provider, int device,
                              uintptr_t dev_ptr, size_t len, int dmabuf_fd, uint64_t offset,
                              char *detail, size_t detail_len)
{
    int rail = rail_of(fab, provider);
    if (rail < 0) {
        snprintf(detail, detail_len, "the open rdma plane has no %s rail", provider);
        return -ENOENT;
    }
    if (len == 0) {
        snprintf(detail, detail_len, "opens (a rail of the open plane)");
        return 0;
    }
    struct tw_fabric_dmabuf db = {.fd = dmabuf_fd, .offset = offset};
    return reg_on_rail(fab, (unsigned)rail, device, dev_ptr, len, dmabuf_fd >= 0 ? &db : NULL,
                       detail, detail_len);
}
