/*
 * tw_doctor(): facts (facts.c) and verdicts (policy.c) written as text for
 * people or as JSON for machines. Only formatting lives here.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdr/facts.h"
#include "gdr/policy.h"
#include "tensorwire/doctor.h"
#include "tensorwire/version.h"

/* A growing string; on allocation failure `failed` is set and writes stop. */
struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
};

__attribute__((format(printf, 2, 3))) static void put(struct sbuf *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
}

/* A JSON string literal: quotes, backslashes and control characters
 * escaped; bytes >= 0x80 pass through (the inputs are UTF-8 or ASCII). */
static void jstr(struct sbuf *b, const char *s)
{
    put(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\')
            put(b, "\\%c", *c);
        else if (*c < 0x20)
            put(b, "\\u%04x", *c);
        else
            put(b, "%c", *c);
    }
    put(b, "\"");
}

static const char *tri_json(int v)
{
    return v == 1 ? "true" : v == 0 ? "false" : "null";
}

static const char *tri_text(int v)
{
    return v == 1 ? "yes" : v == 0 ? "no" : "unknown";
}

static const char *iommu_name(enum tw_iommu_kind k)
{
    switch (k) {
    case TW_IOMMU_NONE:
        return "none";
    case TW_IOMMU_IDENTITY:
        return "identity";
    case TW_IOMMU_TRANSLATED:
        return "translated";
    case TW_IOMMU_UNKNOWN:
        break;
    }
    return "unknown";
}

static const char *status_name(enum tw_gdr_status s)
{
    return s == TW_GDR_PASS ? "pass" : s == TW_GDR_FAIL ? "fail" : "n/a";
}

/* What a GPU tensor's bytes go through on this provider, for people. */
static void path_text(struct sbuf *b, const struct tw_gdr_provider_info *pi,
                      const struct tw_gdr_verdict *v)
{
    if (v->admitted)
        put(b, "gdr push (%s)", pi->facts.name);
    else
        put(b, "rdma pull (%s) + staging", pi->facts.name);
}

/* Every (GPU, available provider) verdict, decided once for both reports. */
struct decisions {
    int n;
    struct decision {
        int gpu, prov;
        struct tw_gdr_verdict v;
        const struct tw_gdr_nic_facts *nic;
    } rows[TW_GDR_MAX_GPUS * TW_GDR_MAX_PROVIDERS];
    int admitted_gpus; /* GPUs admitted on at least one provider */
};

static void decide_all(const struct tw_gdr_machine *m, const struct tw_gdr_config *cfg,
                       struct decisions *d)
{
    d->n = 0;
    d->admitted_gpus = 0;
    for (int g = 0; g < m->ngpus; g++) {
        int any = 0;
        for (int p = 0; p < m->nprov; p++) {
            if (!m->provs[p].available)
                continue;
            struct decision *r = &d->rows[d->n++];
            r->gpu = g;
            r->prov = p;
            tw__gdr_machine_decide(m, cfg, g, p, &r->v, &r->nic);
            any |= r->v.admitted;
        }
        d->admitted_gpus += any;
    }
}

static void text_report(struct sbuf *b, const struct tw_gdr_machine *m,
                        const struct tw_gdr_config *cfg, const struct decisions *d)
{
    put(b, "tensorwire %s doctor: GPUDirect RDMA on this machine\n\n", TW_VERSION_STRING);
    if (m->cuda_ok)
        put(b, "CUDA driver   %d.%d, %d GPU%s\n", m->cuda_driver_version / 1000,
            m->cuda_driver_version % 1000 / 10, m->ngpus, m->ngpus == 1 ? "" : "s");
    else
        put(b, "CUDA driver   none: %s\n", m->cuda_status);
    for (int i = 0; i < m->ngpus; i++) {
        const struct tw_gdr_gpu_facts *g = &m->gpus[i];
        put(b, "  cuda:%d  %s  pci %s  numa %d  iommu %s\n", g->ordinal, g->name,
            g->bdf[0] ? g->bdf : "?", g->pci_known ? g->pci.numa_node : -1,
            g->pci_known ? iommu_name(g->pci.iommu) : "unknown");
        if (g->bar1_known)
            put(b, "          BAR1 %llu MiB (%llu MiB free)",
                (unsigned long long)(g->bar1_total >> 20),
                (unsigned long long)(g->bar1_free >> 20));
        else
            put(b, "          BAR1 unknown");
        put(b, "  MIG %s  GPUDirect RDMA attribute %s  dma-buf %s (export %s)  flush %s\n",
            g->mig_enabled == 1   ? "on"
            : g->mig_enabled == 0 ? "off"
                                  : "unknown",
            tri_text(g->gdr_supported), tri_text(g->dmabuf_supported), tri_text(g->dmabuf_export),
            g->flush_needed ? (g->flush_supported ? "needed (cuFlushGPUDirectRDMAWrites)"
                                                  : "needed, not supported")
                            : "not needed");
        if (m->gpu_notes[i][0])
            put(b, "          note: %s\n", m->gpu_notes[i]);
    }
    put(b, "\nlibfabric     %s\n", m->fabric_version[0] ? m->fabric_version : "not usable");
    if (m->fabric_status[0])
        put(b, "  %s\n", m->fabric_status);
    if (m->nrows > 0)
        put(b, "  %-16s %-24s %-4s %-5s %s\n", "provider", "domain", "RMA", "HMEM", "MR mode");
    for (int i = 0; i < m->nrows && i < TW_GDR_MAX_FABRIC_ROWS; i++) {
        const struct tw_fabric_prov_desc *r = &m->rows[i];
        put(b, "  %-16s %-24s %-4s %-5s %s\n", r->provider, r->domain, r->rma ? "yes" : "no",
            r->hmem ? "yes" : "no", r->mr_mode[0] ? r->mr_mode : "(basic)");
    }
    put(b, "\nRDMA NICs     %d", m->nnics);
    put(b, m->nnics ? "\n" : " (none under %s/sys/class/infiniband)\n",
        strcmp(m->sysfs_root, "/") ? m->sysfs_root : "");
    for (int i = 0; i < m->nnics; i++) {
        const struct tw_gdr_nic_facts *n = &m->nics[i];
        put(b, "  %-10s pci %s  numa %d  dma mask %d bits  iommu %s\n", n->name, n->pci.bdf,
            n->pci.numa_node, n->pci.dma_mask_bits, iommu_name(n->pci.iommu));
    }
    put(b, "\nProviders probed with a CUDA registration\n");
    for (int p = 0; p < m->nprov; p++) {
        const struct tw_gdr_provider_info *pi = &m->provs[p];
        put(b, "  %-8s %-10s %s: %s\n", pi->facts.name, tw__gdr_prov_kind_name(pi->facts.kind),
            !pi->available             ? "not available here"
            : pi->facts.hmem_cuda == 1 ? "registers CUDA memory"
            : pi->facts.hmem_cuda == 0 ? "refuses CUDA memory"
                                       : "not probed",
            pi->facts.detail);
        if (pi->facts.dmabuf_detail[0])
            put(b, "  %-8s %-10s FI_MR_DMABUF: %s\n", "", "", pi->facts.dmabuf_detail);
    }

    for (int g = 0; g < m->ngpus; g++) {
        put(b, "\nGPUDirect for cuda:%d (--gpudirect %s, PCIe limit %s)\n", m->gpus[g].ordinal,
            tw__gdr_mode_name(cfg->mode), tw__pcie_dist_name(cfg->max_distance));
        for (int i = 0; i < d->n; i++) {
            const struct decision *r = &d->rows[i];
            if (r->gpu != g)
                continue;
            const struct tw_gdr_provider_info *pi = &m->provs[r->prov];
            put(b, "  %s%s%s: %s\n", pi->facts.name, r->nic ? " via " : "",
                r->nic ? r->nic->name : "", r->v.admitted ? "ADMITTED" : "not admitted");
            for (int k = 0; k < TW_GDR_P_COUNT; k++) {
                const struct tw_gdr_check *c = &r->v.checks[k];
                put(b, "    %-14s %-4s %s\n", tw__gdr_pred_name((enum tw_gdr_pred)k),
                    status_name(c->status),
                    c->status == TW_GDR_PASS ? "" : tw__gdr_reason_str(c->reason));
            }
            if (r->v.distance)
                put(b, "    (PCIe distance GPU-NIC: %s)\n", tw__pcie_dist_name(r->v.distance));
            put(b, "    path for GPU tensors: ");
            path_text(b, pi, &r->v);
            put(b, "\n");
            if (!r->v.admitted && tw__gdr_reason_fix(r->v.reason)[0])
                put(b, "    to get GPUDirect: %s\n", tw__gdr_reason_fix(r->v.reason));
        }
        put(b, "  inline tcp: inline tcp + staging (never GPUDirect)\n");
    }
    if (m->ngpus == 0)
        put(b, "\nVerdict: no GPU here; GPU tensors cannot be stored or sent from this machine.\n");
    else
        put(b, "\nVerdict: GPUDirect admitted for %d of %d GPU%s.\n", d->admitted_gpus, m->ngpus,
            m->ngpus == 1 ? "" : "s");
}

static void json_report(struct sbuf *b, const struct tw_gdr_machine *m,
                        const struct tw_gdr_config *cfg, const struct decisions *d)
{
    put(b, "{\"tensorwire_version\":");
    jstr(b, TW_VERSION_STRING);
    put(b, ",\"cuda\":{\"ok\":%s,\"driver_version\":%d,\"status\":", m->cuda_ok ? "true" : "false",
        m->cuda_driver_version);
    jstr(b, m->cuda_ok ? "" : m->cuda_status);
    put(b, "},\"gpus\":[");
    for (int i = 0; i < m->ngpus; i++) {
        const struct tw_gdr_gpu_facts *g = &m->gpus[i];
        put(b, "%s{\"device\":\"cuda:%d\",\"name\":", i ? "," : "", g->ordinal);
        jstr(b, g->name);
        put(b, ",\"pci\":");
        jstr(b, g->bdf);
        put(b,
            ",\"numa_node\":%d,\"iommu\":\"%s\",\"gpudirect_rdma_supported\":%s,"
            "\"dmabuf_supported\":%s,\"dmabuf_export\":%s,\"mig_enabled\":%s,\"flush_needed\":%s,"
            "\"flush_supported\":%s,",
            g->pci_known ? g->pci.numa_node : -1,
            g->pci_known ? iommu_name(g->pci.iommu) : "unknown", tri_json(g->gdr_supported),
            tri_json(g->dmabuf_supported), tri_json(g->dmabuf_export), tri_json(g->mig_enabled),
            g->flush_needed ? "true" : "false", g->flush_supported ? "true" : "false");
        if (g->bar1_known)
            put(b, "\"bar1_total\":%llu,\"bar1_free\":%llu,", (unsigned long long)g->bar1_total,
                (unsigned long long)g->bar1_free);
        else
            put(b, "\"bar1_total\":null,\"bar1_free\":null,");
        put(b, "\"note\":");
        jstr(b, m->gpu_notes[i]);
        put(b, "}");
    }
    put(b, "],\"libfabric\":{\"version\":");
    jstr(b, m->fabric_version);
    put(b, ",\"status\":");
    jstr(b, m->fabric_status);
    put(b, ",\"providers\":[");
    for (int i = 0; i < m->nrows && i < TW_GDR_MAX_FABRIC_ROWS; i++) {
        const struct tw_fabric_prov_desc *r = &m->rows[i];
        put(b, "%s{\"provider\":", i ? "," : "");
        jstr(b, r->provider);
        put(b, ",\"domain\":");
        jstr(b, r->domain);
        put(b, ",\"rma\":%s,\"hmem\":%s,\"mr_mode\":", r->rma ? "true" : "false",
            r->hmem ? "true" : "false");
        jstr(b, r->mr_mode);
        put(b, "}");
    }
    put(b, "]},\"nics\":[");
    for (int i = 0; i < m->nnics; i++) {
        const struct tw_gdr_nic_facts *n = &m->nics[i];
        put(b, "%s{\"name\":", i ? "," : "");
        jstr(b, n->name);
        put(b, ",\"pci\":");
        jstr(b, n->pci.bdf);
        put(b, ",\"numa_node\":%d,\"dma_mask_bits\":%d,\"iommu\":\"%s\"}", n->pci.numa_node,
            n->pci.dma_mask_bits, iommu_name(n->pci.iommu));
    }
    put(b, "],\"probes\":[");
    for (int p = 0; p < m->nprov; p++) {
        const struct tw_gdr_provider_info *pi = &m->provs[p];
        put(b, "%s{\"provider\":", p ? "," : "");
        jstr(b, pi->facts.name);
        put(b,
            ",\"kind\":\"%s\",\"available\":%s,\"registers_cuda\":%s,\"dmabuf_mr\":%s,\"detail\":",
            tw__gdr_prov_kind_name(pi->facts.kind), pi->available ? "true" : "false",
            tri_json(pi->facts.hmem_cuda), tri_json(pi->facts.dmabuf_mr));
        jstr(b, pi->facts.detail);
        put(b, ",\"dmabuf_detail\":");
        jstr(b, pi->facts.dmabuf_detail);
        put(b, "}");
    }
    put(b, "],\"config\":{\"gpudirect\":\"%s\",\"max_pcie_distance\":\"%s\"},\"admission\":[",
        tw__gdr_mode_name(cfg->mode), tw__pcie_dist_name(cfg->max_distance));
    for (int i = 0; i < d->n; i++) {
        const struct decision *r = &d->rows[i];
        const struct tw_gdr_provider_info *pi = &m->provs[r->prov];
        const struct tw_gdr_verdict *v = &r->v;
        put(b, "%s{\"device\":\"cuda:%d\",\"provider\":", i ? "," : "", m->gpus[r->gpu].ordinal);
        jstr(b, pi->facts.name);
        put(b, ",\"nic\":");
        if (r->nic)
            jstr(b, r->nic->name);
        else
            put(b, "null");
        put(b, ",\"admitted\":%s,\"dmabuf\":%s,\"pcie_distance\":", v->admitted ? "true" : "false",
            v->use_dmabuf ? "true" : "false");
        if (v->distance)
            put(b, "\"%s\"", tw__pcie_dist_name(v->distance));
        else
            put(b, "null");
        put(b, ",\"reason\":");
        jstr(b, v->admitted ? "" : tw__gdr_pred_name(v->first_fail));
        put(b, ",\"reason_text\":");
        jstr(b, v->admitted ? "" : tw__gdr_reason_str(v->reason));
        put(b, ",\"fix\":");
        jstr(b, v->admitted ? "" : tw__gdr_reason_fix(v->reason));
        put(b, ",\"path\":\"");
        path_text(b, pi, v);
        put(b, "\",\"checks\":[");
        for (int k = 0; k < TW_GDR_P_COUNT; k++) {
            const struct tw_gdr_check *c = &v->checks[k];
            put(b, "%s{\"predicate\":\"%s\",\"status\":\"%s\",\"reason\":", k ? "," : "",
                tw__gdr_pred_name((enum tw_gdr_pred)k), status_name(c->status));
            jstr(b, c->status == TW_GDR_PASS ? "" : tw__gdr_reason_str(c->reason));
            put(b, "}");
        }
        put(b, "]}");
    }
    put(b, "],\"gpus_admitted\":%d,\"gpudirect_admitted_anywhere\":%s}\n", d->admitted_gpus,
        d->admitted_gpus > 0 ? "true" : "false");
}

int tw_doctor(const char *providers, const char *sysfs_root, unsigned flags, char **report,
              struct tw_doctor_result *result)
{
    if (!report || (flags & ~TW_DOCTOR_JSON))
        return TW_EINVAL;
    *report = NULL;
    struct tw_gdr_machine *m = malloc(sizeof(*m));
    if (!m)
        return -ENOMEM;
    tw__gdr_machine_gather(m, providers, sysfs_root);
    struct tw_gdr_config cfg;
    tw__gdr_config_defaults(&cfg);
    struct sbuf b = {.p = malloc(4096), .cap = 4096};
    if (!b.p) {
        free(m);
        return -ENOMEM;
    }
    b.p[0] = '\0';
    struct decisions *d = malloc(sizeof(*d));
    if (!d) {
        free(b.p);
        free(m);
        return -ENOMEM;
    }
    decide_all(m, &cfg, d);
    if (flags & TW_DOCTOR_JSON)
        json_report(&b, m, &cfg, d);
    else
        text_report(&b, m, &cfg, d);
    if (result) {
        result->gpus = m->ngpus;
        result->admitted_gpus = d->admitted_gpus;
    }
    free(d);
    free(m);
    if (b.failed) {
        free(b.p);
        return -ENOMEM;
    }
    *report = b.p;
    return 0;
}
