/*
 * GPUDirect on the client (issue 12): --gpudirect auto|off|require and the
 * admission verdict of this process's GPUs on the connection's provider.
 * Facts are gathered once per process (gdr/admission.h); the table is built
 * per connection when first needed (its configuration is the connection's).
 * Today only `require` needs it: the client's own GPU memory still moves
 * through host staging (dp_staging.c); registering it with the plane
 * (engine.c's path input `gdr`, dp_rdma.c's registrations, the flush after a
 * pushed get) is the next step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "gdr/admission.h"

/* Builds c->gdr for the accepted endpoint's provider. 0, or -ENOMEM. */
static int build(struct tw_client *c)
{
    if (c->gdr)
        return 0;
    const char *prov = c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL;
    char core[64];
    snprintf(core, sizeof(core), "%.*s", prov ? (int)strcspn(prov, ";") : 0, prov ? prov : "");
    const struct tw_gdr_machine *m = tw__gdr_machine_once(core);
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
