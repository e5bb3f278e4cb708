/*
 * GPUDirect on the client (issue 12): --gpudirect auto|off|require and the
 * admission verdict of this process's GPUs on the connection's provider.
 * Facts are gathered once per process (gdr/admission.h); the table is built
 * per connection when first needed (its configuration is the connection's):
 * at connect for `require`, else on the first get or put of GPU memory, so
 * a client that never touches GPU memory never gathers them.
 *
 * The verdict is the `gdr` input of tw__path_decide (engine.c): an admitted
 * GPU buffer is registered with the plane directly (dp_rdma.c, through the
 * registration cache below: FI_HMEM_CUDA, 64 KiB-rounded, serialized per
 * device), so a get into it is pushed by the server (`gdr push`, the
 * second RDMA_REGISTER is ours) or read by us (`gdr pull`), and a put from
 * it is read by the server or pushed by us, with no host staging. A get
 * into GPU memory that the plane wrote is flushed here before it is
 * reported complete (docs/protocol.md §10).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "fabric/mrcache.h"
#include "gdr/admission.h"
#include "gpu/cuda.h"

/* Builds c->gdr for the accepted endpoint's provider. 0, or -ENOMEM. */
static int build(struct tw_client *c)
{
    if (c->gdr)
        return 0;
    const char *prov = c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL;
    char core[64];
    snprintf(core, sizeof(core), "%.*s", prov ? (int)strcspn(prov, ";") : 0, prov ? prov : "");
    /* The CUDA registration probe runs on our plane's rail (no second
     * open of the provider). */
    const struct tw_gdr_machine *m = tw__gdr_machine_once_on(core, c->fab);
    c->gdr = m ? malloc(sizeof(*c->gdr)) : NULL;
    if (!c->gdr)
        return -ENOMEM;
    struct tw_gdr_config gc = {.mode = (enum tw_gdr_mode)c->gdr_mode,
                               .max_distance = (enum tw_pcie_dist)c->gdr_max_distance};
    tw__gdr_table_build(c->gdr, m, &gc);
    c->gdr_row = tw__gdr_table_provider(c->gdr, core);
    return 0;
}

int tw__client_gdr_setup(struct tw_client *c, const struct tw_client_options *o)
{
    c->gdr_mode = o->gpudirect;
    c->gdr_max_distance = o->gpudirect_max_distance ? o->gpudirect_max_distance : TW_PCIE_PXB;
    c->gdr_row = -1;
    if (o->gpudirect < TW_GPUDIRECT_AUTO || o->gpudirect > TW_GPUDIRECT_REQUIRE ||
        o->gpudirect_max_distance < 0 || o->gpudirect_max_distance > TW_PCIE_SYS) {
        tw__client_seterr(c, "options out of range (gpudirect 0..2, gpudirect_max_distance 0..5)");
        return TW_EINVAL;
    }
    if (o->gpudirect != TW_GPUDIRECT_REQUIRE)
        return 0;
    if (!c->fpeer) {
        tw__client_seterr(c, "gpudirect require: no rdma data plane (%s)",
                          tw_client_fabric_status(c));
        return TW_EDEVICE;
    }
    int rc = build(c);
    if (rc < 0)
        return rc;
    if (c->gdr_row < 0 || !c->gdr->admitted_any[c->gdr_row]) {
        char why[320];
        tw__client_seterr(c, "gpudirect require: no GPU of this process is admitted: %s",
                          tw__gdr_table_why_not(c->gdr, c->gdr_row, why, sizeof(why)));
        return TW_EDEVICE;
    }
    return 0;
}

void tw__client_gdr_free(struct tw_client *c)
{
    free(c->gdr);
    c->gdr = NULL;
}

static enum tw_path_gdr refuse(struct tw_client *c, const char *fmt, const char *detail)
{
    snprintf(c->gdr_why, sizeof(c->gdr_why), fmt, detail);
    return TW_PATH_GDR_REFUSED;
}

enum tw_path_gdr tw__client_gdr_verdict(struct tw_client *c, const struct tw__creq *r)
{
    if (r->mem.kind != TW_MEMKIND_CUDA || !c->fpeer)
        return TW_PATH_GDR_NOT_EVALUATED;
    if (c->gdr_fake)
        return c->gdr_fake->admitted ? TW_PATH_GDR_ADMITTED
                                     : refuse(c, "%s", "refused by the test's stand-in");
    if (c->gdr_mode == TW_GPUDIRECT_OFF)
        return refuse(c, "%s", "--gpudirect off");
    if (!c->fab_hmem)
        return refuse(c, "the rdma plane (%s) was opened without FI_HMEM",
                      tw__fabric_peer_provider(c->fpeer));
    if (build(c) < 0)
        return refuse(c, "%s", "out of memory for the GPUDirect verdicts");
    const struct tw_gdr_verdict *v = tw__gdr_table_get(c->gdr, c->gdr_row, r->mem.device);
    if (v && v->admitted)
        return TW_PATH_GDR_ADMITTED;
    if (!v) {
        snprintf(c->gdr_why, sizeof(c->gdr_why), "cuda:%d on %s: not probed for CUDA registration",
                 r->mem.device, tw__fabric_peer_provider(c->fpeer));
        return TW_PATH_GDR_REFUSED;
    }
    snprintf(c->gdr_why, sizeof(c->gdr_why), "cuda:%d on %s: %s: %s", r->mem.device,
             tw__fabric_peer_provider(c->fpeer), tw__gdr_pred_name(v->first_fail),
             tw__gdr_reason_str(v->reason));
    return TW_PATH_GDR_REFUSED;
}

int tw__client_gdr_flush(struct tw_client *c, const struct tw__creq *r, char *err, size_t errlen)
{
    int dev = r->mem.device;
    if (c->gdr_fake)
        return c->gdr_fake->flush_needed && c->gdr_fake->flush
                   ? c->gdr_fake->flush(c->gdr_fake->arg, dev)
                   : 0;
    /* No table: the GPU was never judged, so the plane never wrote it. */
    if (!c->gdr || dev < 0 || dev >= c->gdr->ngpus)
        return 0;
    /* shm: the bytes came by a CUDA copy shm ran in this process. */
    int ipc =
        c->fpeer && tw__path_provider_kind(tw__fabric_peer_provider(c->fpeer)) == TW_PATH_PROV_SHM;
    return tw__cuda_settle_writes(dev, ipc, c->gdr->flush_needed[dev], err, errlen);
}

enum tw_memkind tw__client_gdr_hint(const struct tw_client *c)
{
    return c->gdr_fake && c->gdr_fake->register_as_host ? TW_MEMKIND_HOST : TW_MEMKIND_CUDA;
}

int tw__client_gdr_cache(struct tw_client *c)
{
    if (c->mrc)
        return 0;
    struct tw_regcache_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    for (int k = 0; k < TW_MEMKIND_MAX; k++)
        cfg.memkinds[k] = c->memkinds[k];
    return tw__fabric_mrcache_create(c->fab, &cfg, &c->mrc);
}
