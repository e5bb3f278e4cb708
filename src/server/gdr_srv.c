/*
 * GPUDirect on the server (issue 12): admission of the served GPUs on the
 * plane's providers, computed once at startup (gdr/admission.h), then one
 * table cell per transfer; the push offer (bit 3); the flush that makes NIC
 * writes into GPU memory visible before a pushed put is committed.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdr/admission.h"
#include "gpu/cuda.h"
#include "server/log.h"
#include "server/server.h"

/* The distinct core providers of the plane's rails, comma-separated. */
static void plane_providers(struct tw_fabric *fab, char *buf, size_t len)
{
    const struct tw_fabric_addr *addrs;
    unsigned n = tw__fabric_local_addrs(fab, &addrs);
    size_t used = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        const char *p = addrs[i].provider;
        size_t pl = strcspn(p, ";");
        int seen = 0;
        for (const char *s = buf; *s;) {
            size_t sl = strcspn(s, ",");
            if (sl == pl && strncmp(s, p, pl) == 0)
                seen = 1;
            s += sl + (s[sl] == ',');
        }
        if (seen || used + pl + 2 > len)
            continue;
        used += (size_t)snprintf(buf + used, len - used, "%s%.*s", used ? "," : "", (int)pl, p);
    }
}

int tw__srv_gdr_init(struct tw_srv *srv, char *err, size_t errlen)
{
    const struct tw_srv_config *c = &srv->cfg;
    int require = c->gpudirect == TW_GDR_MODE_REQUIRE;
    for (unsigned i = 0; i < TW_FABRIC_MAX_SLOTS; i++)
        srv->gdr_rail_row[i] = -1;
    if (c->gpudirect == TW_GDR_MODE_OFF) {
        TW_LOGI("gpudirect: off (--gpudirect off)");
        return 0;
    }
    if (srv->store.ngpus == 0) {
        if (require) {
            snprintf(err, errlen, "--gpudirect require: no GPU is served (--devices)");
            return TW_EDEVICE;
        }
        return 0;
    }
    if (!srv->fab) {
        if (require) {
            snprintf(err, errlen, "--gpudirect require: no rdma data plane: %s", srv->fab_why);
            return TW_EDEVICE;
        }
        return 0;
    }
    char provs[128];
    plane_providers(srv->fab, provs, sizeof(provs));
    /* The CUDA registration probes run on the plane's rails. */
    const struct tw_gdr_machine *m = tw__gdr_machine_once_on(provs, srv->fab);
    srv->gdr = m ? malloc(sizeof(*srv->gdr)) : NULL;
    if (!srv->gdr) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    struct tw_gdr_config gc = {.mode = (enum tw_gdr_mode)c->gpudirect,
                               .max_distance = (enum tw_pcie_dist)c->gpudirect_max_distance};
    tw__gdr_table_build(srv->gdr, m, &gc);
    const struct tw_fabric_addr *addrs;
    unsigned n = tw__fabric_local_addrs(srv->fab, &addrs);
    for (unsigned i = 0; i < n && i < TW_FABRIC_MAX_SLOTS; i++)
        srv->gdr_rail_row[i] = tw__gdr_table_provider(srv->gdr, addrs[i].provider);

    int admitted = 0;
    for (unsigned gi = 0; gi < srv->store.ngpus; gi++) {
        int ord = srv->store.gpu[gi].ordinal;
        for (int row = 0; row < srv->gdr->nprov; row++) {
            const struct tw_gdr_verdict *v = tw__gdr_table_get(srv->gdr, row, ord);
            if (v && v->admitted) {
                admitted = 1;
                TW_LOGI("gpudirect: cuda:%d admitted on %s: gdr push", ord, srv->gdr->prov[row]);
            } else {
                TW_LOGI("gpudirect: cuda:%d not admitted on %s: %s: %s", ord, srv->gdr->prov[row],
                        v ? tw__gdr_pred_name(v->first_fail) : "facts",
                        v ? tw__gdr_reason_str(v->reason) : "no facts for this GPU");
            }
        }
    }
    if (require && !admitted) {
        char why[320];
        snprintf(err, errlen, "--gpudirect require: no served GPU is admitted: %s",
                 tw__gdr_table_why_not(srv->gdr, srv->gdr->nprov ? 0 : -1, why, sizeof(why)));
        return TW_EDEVICE;
    }
    srv->gdr_any = admitted;
    return 0;
}

void tw__srv_gdr_destroy(struct tw_srv *srv)
{
    free(srv->gdr);
    srv->gdr = NULL;
    srv->gdr_any = 0;
}

static int peer_row(const struct tw_srv *srv, struct tw_fabric_peer *peer)
{
    unsigned rail = tw__fabric_peer_rail(peer);
    if (rail < TW_FABRIC_MAX_SLOTS && srv->gdr_rail_row[rail] >= 0)
        return srv->gdr_rail_row[rail];
    return tw__gdr_table_provider(srv->gdr, tw__fabric_peer_provider(peer));
}

int tw__srv_gdr_admits(const struct tw_srv_conn *c, int ordinal)
{
    const struct tw_srv *srv = c->srv;
    if (!srv->gdr || !c->fpeer)
        return 0;
    return tw__gdr_table_admitted(srv->gdr, peer_row(srv, c->fpeer), ordinal);
}

char *tw__srv_gdr_why_not(const struct tw_srv_conn *c, int ordinal, char *buf, size_t len)
{
    const struct tw_srv *srv = c->srv;
    if (!len)
        return buf;
    if (c->srv->cfg.gpudirect == TW_GDR_MODE_OFF) {
        snprintf(buf, len, "--gpudirect off");
        return buf;
    }
    if (!srv->gdr || !c->fpeer) {
        snprintf(buf, len, "%s", !c->fpeer ? "no rdma endpoint" : "no GPUDirect facts");
        return buf;
    }
    const struct tw_gdr_verdict *v = tw__gdr_table_get(srv->gdr, peer_row(srv, c->fpeer), ordinal);
    if (!v)
        snprintf(buf, len, "%s not probed for CUDA registration",
                 tw__fabric_peer_provider(c->fpeer));
    else if (v->admitted)
        snprintf(buf, len, "admitted");
    else
        snprintf(buf, len, "cuda:%d on %s: %s: %s", ordinal, tw__fabric_peer_provider(c->fpeer),
                 tw__gdr_pred_name(v->first_fail), tw__gdr_reason_str(v->reason));
    return buf;
}

enum tw_path_gdr tw__srv_gdr_verdict(const struct tw_srv_conn *c, const struct tw_tensor *t)
{
    const struct tw_srv *srv = c->srv;
    if (t->gpu < 0 || !srv->gdr || !c->fpeer)
        return TW_PATH_GDR_NOT_EVALUATED;
    return tw__srv_gdr_admits(c, srv->store.gpu[t->gpu].ordinal) ? TW_PATH_GDR_ADMITTED
                                                                 : TW_PATH_GDR_REFUSED;
}

int tw__srv_gdr_flush(const struct tw_srv_conn *c, const struct tw_tensor *t, char *err,
                      size_t errlen)
{
    const struct tw_srv *srv = c->srv;
    if (t->gpu < 0 || !srv->gdr)
        return 0;
    int ord = srv->store.gpu[t->gpu].ordinal;
    if (ord >= srv->gdr->ngpus)
        return 0;
    /* shm: the bytes came by a CUDA copy shm ran in this process. */
    int ipc =
        c->fpeer && tw__path_provider_kind(tw__fabric_peer_provider(c->fpeer)) == TW_PATH_PROV_SHM;
    return tw__cuda_settle_writes(ord, ipc, srv->gdr->flush_needed[ord], err, errlen);
}

int tw__srv_gdr_crc(const struct tw_srv *srv, const struct tw_tensor *t, uint32_t *crc, char *err,
                    size_t errlen)
{
    /* GPU memory is read back in 4 MiB pieces through the store's device
     * memory ops: one extra pass, the cost the descriptor's CRC flag asks
     * for (docs/protocol.md §5). */
    enum { PIECE = 4 << 20 };
    const struct tw_store_devmem_ops *m = tw__store_devmem(&srv->store);
    int ord = srv->store.gpu[t->gpu].ordinal;
    if (!m->to_host)
        return TW_EDEVICE;
    uint8_t *buf = malloc(PIECE);
    if (!buf)
        return -ENOMEM;
    uint32_t v = 0;
    for (uint64_t off = 0; off < t->byte_length; off += PIECE) {
        size_t n = t->byte_length - off < PIECE ? (size_t)(t->byte_length - off) : PIECE;
        int rc = m->to_host(ord, buf, t->data + off, n, err, errlen);
        if (rc < 0) {
            free(buf);
            return rc;
        }
        v = tw__crc32c(v, buf, n);
    }
    free(buf);
    *crc = v;
    return 0;
}
