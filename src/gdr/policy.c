/*
 * GPUDirect admission policy (see policy.h). Every predicate is evaluated,
 * even after one failed, so the verdict carries the whole table; the first
 * failure in predicate order is the headline reason.
 */
#include "gdr/policy.h"

#include <errno.h>
#include <string.h>

#include "tensorwire/error.h"

void tw__gdr_config_defaults(struct tw_gdr_config *cfg)
{
    cfg->mode = TW_GDR_MODE_AUTO;
    cfg->max_distance = TW_PCIE_PXB;
}

int tw__gdr_range_inside(uint64_t win_start, uint64_t win_len, uint64_t start, uint64_t len)
{
    if (len == 0)
        return TW_EINVAL;
    if (start > UINT64_MAX - len)
        return -ERANGE;
    /* Written so no sum can wrap: start >= win_start, then the offset
     * into the window and the length both fit what remains of it. */
    if (start < win_start || len > win_len || start - win_start > win_len - len)
        return -ENOSPC;
    return 0;
}

static void set(struct tw_gdr_verdict *v, enum tw_gdr_pred p, enum tw_gdr_status s,
                enum tw_gdr_reason r)
{
    v->checks[p].status = s;
    v->checks[p].reason = r;
}

/* A tri-state fact: 1 passes, 0 fails with `no`, unknown fails with `unknown`. */
static void tri(struct tw_gdr_verdict *v, enum tw_gdr_pred p, int fact, enum tw_gdr_reason no,
                enum tw_gdr_reason unknown)
{
    if (fact == 1)
        set(v, p, TW_GDR_PASS, TW_GDR_R_OK);
    else
        set(v, p, TW_GDR_FAIL, fact == 0 ? no : unknown);
}

/* The NIC-side predicates: IOMMU, DMA mask, PCIe distance. */
static void check_nic(const struct tw_gdr_config *cfg, const struct tw_gdr_gpu_facts *gpu,
                      const struct tw_gdr_nic_facts *nic, struct tw_gdr_verdict *v)
{
    if (!nic || !gpu->pci_known) {
        enum tw_gdr_reason r = nic ? TW_GDR_R_PCIE_UNKNOWN : TW_GDR_R_NO_NIC;
        set(v, TW_GDR_P_IOMMU, TW_GDR_FAIL, nic ? TW_GDR_R_IOMMU_UNKNOWN : r);
        set(v, TW_GDR_P_DMA_MASK, TW_GDR_FAIL, nic ? TW_GDR_R_DMA_MASK_UNKNOWN : r);
        set(v, TW_GDR_P_PCIE, TW_GDR_FAIL, r);
        return;
    }
    /* IOMMU: both ends must use bus addresses (no domain or identity). */
    enum tw_iommu_kind ig = gpu->pci.iommu, in = nic->pci.iommu;
    if (ig == TW_IOMMU_TRANSLATED || in == TW_IOMMU_TRANSLATED)
        set(v, TW_GDR_P_IOMMU, TW_GDR_FAIL, TW_GDR_R_IOMMU_TRANSLATED);
    else if (ig == TW_IOMMU_UNKNOWN || in == TW_IOMMU_UNKNOWN)
        set(v, TW_GDR_P_IOMMU, TW_GDR_FAIL, TW_GDR_R_IOMMU_UNKNOWN);
    else
        set(v, TW_GDR_P_IOMMU, TW_GDR_PASS, TW_GDR_R_OK);

    /* DMA mask: the NIC must be able to address the last byte of BAR1
     * (resource 1 of an NVIDIA GPU: the window peer DMA targets). */
    uint64_t bar_end = gpu->pci.bar_end[1];
    int bits = nic->pci.dma_mask_bits;
    if (bits <= 0 || bar_end == 0)
        set(v, TW_GDR_P_DMA_MASK, TW_GDR_FAIL, TW_GDR_R_DMA_MASK_UNKNOWN);
    else if (bits < 64 && (bar_end >> bits) != 0)
        set(v, TW_GDR_P_DMA_MASK, TW_GDR_FAIL, TW_GDR_R_DMA_MASK_SHORT);
    else
        set(v, TW_GDR_P_DMA_MASK, TW_GDR_PASS, TW_GDR_R_OK);

    v->distance =
        tw__pcie_distance(gpu->pci.path, gpu->pci.numa_node, nic->pci.path, nic->pci.numa_node);
    if (v->distance > cfg->max_distance)
        set(v, TW_GDR_P_PCIE, TW_GDR_FAIL, TW_GDR_R_PCIE_TOO_FAR);
    else
        set(v, TW_GDR_P_PCIE, TW_GDR_PASS, TW_GDR_R_OK);
}

int tw__gdr_decide(const struct tw_gdr_config *cfg, const struct tw_gdr_gpu_facts *gpu,
                   const struct tw_gdr_provider_facts *prov, const struct tw_gdr_nic_facts *nic,
                   struct tw_gdr_verdict *v)
{
    memset(v, 0, sizeof(*v));

    if (cfg->mode == TW_GDR_MODE_OFF)
        set(v, TW_GDR_P_ENABLED, TW_GDR_FAIL, TW_GDR_R_DISABLED);
    else
        set(v, TW_GDR_P_ENABLED, TW_GDR_PASS, TW_GDR_R_OK);

    /* Without a GPU nothing else can be known: every predicate fails with
     * the one cause a person can act on. */
    if (!gpu) {
        for (int p = TW_GDR_P_PROVIDER_RDMA; p < TW_GDR_P_COUNT; p++)
            set(v, (enum tw_gdr_pred)p, TW_GDR_FAIL, TW_GDR_R_NO_GPU);
        goto verdict;
    }

    if (prov && prov->kind == TW_GDR_PROV_SOCKET)
        set(v, TW_GDR_P_PROVIDER_RDMA, TW_GDR_FAIL, TW_GDR_R_PROVIDER_SOCKET);
    else
        set(v, TW_GDR_P_PROVIDER_RDMA, TW_GDR_PASS, TW_GDR_R_OK);
    if (!prov || prov->hmem_cuda == TW_GDR_UNKNOWN)
        set(v, TW_GDR_P_PROVIDER_HMEM, TW_GDR_FAIL, TW_GDR_R_PROVIDER_UNPROBED);
    else
        tri(v, TW_GDR_P_PROVIDER_HMEM, prov->hmem_cuda, TW_GDR_R_PROVIDER_NO_HMEM,
            TW_GDR_R_PROVIDER_UNPROBED);
    tri(v, TW_GDR_P_GPU_ATTR, gpu->gdr_supported, TW_GDR_R_GPU_NO_GDR, TW_GDR_R_GPU_GDR_UNKNOWN);
    tri(v, TW_GDR_P_MIG, gpu->mig_enabled == TW_GDR_UNKNOWN ? TW_GDR_UNKNOWN : !gpu->mig_enabled,
        TW_GDR_R_MIG_ON, TW_GDR_R_MIG_UNKNOWN);
    if (gpu->bar1_known && gpu->bar1_total > 0)
        set(v, TW_GDR_P_BAR1, TW_GDR_PASS, TW_GDR_R_OK);
    else
        set(v, TW_GDR_P_BAR1, TW_GDR_FAIL, TW_GDR_R_NO_BAR1);

    /* A host-local provider (shm) hands GPU memory to its peer by CUDA IPC:
     * no NIC ever DMAs into the GPU, so IOMMU, DMA mask and PCIe distance
     * do not apply. Say so instead of pretending to check them. */
    if (prov && prov->kind != TW_GDR_PROV_NIC) {
        /* Socket providers already failed provider_rdma; no NIC DMA either. */
        enum tw_gdr_reason na =
            prov->kind == TW_GDR_PROV_HOST_LOCAL ? TW_GDR_R_HOST_LOCAL : TW_GDR_R_PROVIDER_SOCKET;
        set(v, TW_GDR_P_IOMMU, TW_GDR_NA, na);
        set(v, TW_GDR_P_DMA_MASK, TW_GDR_NA, na);
        set(v, TW_GDR_P_PCIE, TW_GDR_NA, na);
    } else {
        check_nic(cfg, gpu, nic, v);
    }

    /* dma-buf is how a NIC-backed registration is made when the GPU, the
     * export and the provider all support it; otherwise the provider is
     * given the pointer. Either way it does not decide admission. */
    v->use_dmabuf = gpu->dmabuf_supported == 1 && gpu->dmabuf_export == 1 && prov &&
                    prov->dmabuf_mr == 1 && prov->kind == TW_GDR_PROV_NIC;
    set(v, TW_GDR_P_DMABUF, TW_GDR_NA,
        v->use_dmabuf ? TW_GDR_R_DMABUF_USED : TW_GDR_R_DMABUF_NOT_USED);

verdict:
    v->first_fail = TW_GDR_P_COUNT;
    v->reason = TW_GDR_R_OK;
    for (int p = 0; p < TW_GDR_P_COUNT; p++) {
        if (v->checks[p].status == TW_GDR_FAIL) {
            v->first_fail = (enum tw_gdr_pred)p;
            v->reason = v->checks[p].reason;
            break;
        }
    }
    v->admitted = v->first_fail == TW_GDR_P_COUNT;
    if (!v->admitted)
        v->use_dmabuf = 0;
    return v->admitted;
}

static const char *const pred_names[TW_GDR_P_COUNT] = {
    [TW_GDR_P_ENABLED] = "enabled",
    [TW_GDR_P_PROVIDER_RDMA] = "provider_rdma",
    [TW_GDR_P_PROVIDER_HMEM] = "provider_hmem",
    [TW_GDR_P_GPU_ATTR] = "gpu_gdr",
    [TW_GDR_P_MIG] = "mig_disabled",
    [TW_GDR_P_BAR1] = "bar1",
    [TW_GDR_P_IOMMU] = "iommu",
    [TW_GDR_P_DMA_MASK] = "dma_mask",
    [TW_GDR_P_PCIE] = "pcie_distance",
    [TW_GDR_P_DMABUF] = "dmabuf",
};

const char *tw__gdr_pred_name(enum tw_gdr_pred p)
{
    return (p >= 0 && p < TW_GDR_P_COUNT && pred_names[p]) ? pred_names[p] : "?";
}

struct reason_text {
    const char *what, *fix;
};

static const struct reason_text reasons[TW_GDR_R_COUNT] = {
    [TW_GDR_R_OK] = {"passes", ""},
    [TW_GDR_R_DISABLED] = {"disabled by --gpudirect off", "use --gpudirect auto"},
    [TW_GDR_R_NO_GPU] = {"no CUDA driver or no such GPU",
                         "install the NVIDIA driver (libcuda.so.1) and check nvidia-smi"},
    [TW_GDR_R_PROVIDER_SOCKET] =
        {"the provider moves data through kernel sockets: no NIC writes GPU memory",
         "use an RDMA provider (verbs, efa) on an RDMA NIC, or shm inside one host"},
    [TW_GDR_R_PROVIDER_NO_HMEM] =
        {"the libfabric provider refused to register CUDA memory",
         "use a libfabric built with CUDA support (configure --with-cuda) and a provider "
         "with FI_HMEM (verbs, efa, shm)"},
    [TW_GDR_R_PROVIDER_UNPROBED] = {"CUDA registration on this provider was not tried",
                                    "open the fabric (--fabric PROVIDER) so it can be probed"},
    [TW_GDR_R_GPU_NO_GDR] = {"the GPU does not report GPU_DIRECT_RDMA_SUPPORTED",
                             "use a data-center GPU with GPUDirect RDMA support"},
    [TW_GDR_R_GPU_GDR_UNKNOWN] = {"GPU_DIRECT_RDMA_SUPPORTED could not be read",
                                  "update the NVIDIA driver (CUDA 11.3 or newer)"},
    [TW_GDR_R_MIG_ON] = {"MIG is enabled on the GPU",
                         "disable MIG (nvidia-smi -i N -mig 0) for GPUDirect"},
    [TW_GDR_R_MIG_UNKNOWN] = {"MIG mode could not be read (no NVML)",
                              "install libnvidia-ml.so.1 (part of the driver)"},
    [TW_GDR_R_NO_BAR1] = {"NVML reports no BAR1 window",
                          "enable the GPU's BAR1 (large BAR / Resizable BAR in firmware) and "
                          "install NVML"},
    [TW_GDR_R_HOST_LOCAL] = {"does not apply: the provider moves data inside this host "
                             "(CUDA IPC), no NIC touches GPU memory",
                             ""},
    [TW_GDR_R_NO_NIC] = {"no RDMA NIC found for this provider",
                         "install an RDMA NIC (ConnectX, EFA) and its driver"},
    [TW_GDR_R_IOMMU_TRANSLATED] = {"the IOMMU translates DMA of the GPU or the NIC",
                                   "boot with iommu=pt (or intel_iommu=off / amd_iommu=off) so "
                                   "peer DMA uses bus addresses"},
    [TW_GDR_R_IOMMU_UNKNOWN] = {"the IOMMU domain type could not be read",
                                "check /sys/kernel/iommu_groups/*/type"},
    [TW_GDR_R_DMA_MASK_SHORT] = {"the NIC's DMA mask does not cover the GPU's BAR1",
                                 "enable 64-bit DMA on the NIC, or move BAR1 below the mask"},
    [TW_GDR_R_DMA_MASK_UNKNOWN] = {"the NIC's DMA mask or the GPU's BAR1 address is unknown",
                                   "check dma_mask_bits and resource under /sys/bus/pci/devices"},
    [TW_GDR_R_PCIE_TOO_FAR] = {"the GPU and the NIC are too far apart on PCIe",
                               "use a NIC under the same PCIe switch as the GPU, or raise "
                               "--gpudirect-max-distance"},
    [TW_GDR_R_PCIE_UNKNOWN] = {"the PCIe path between GPU and NIC could not be read",
                               "check /sys/bus/pci/devices"},
    [TW_GDR_R_DMABUF_USED] = {"registers through a dma-buf file descriptor", ""},
    [TW_GDR_R_DMABUF_NOT_USED] = {"registers by pointer (dma-buf not supported by the GPU, "
                                  "the export, the provider or this libfabric)",
                                  ""},
};

const char *tw__gdr_reason_str(enum tw_gdr_reason r)
{
    return (r >= 0 && r < TW_GDR_R_COUNT && reasons[r].what) ? reasons[r].what : "?";
}

const char *tw__gdr_reason_fix(enum tw_gdr_reason r)
{
    return (r >= 0 && r < TW_GDR_R_COUNT && reasons[r].fix) ? reasons[r].fix : "";
}

const char *tw__gdr_prov_kind_name(enum tw_gdr_prov_kind k)
{
    switch (k) {
    case TW_GDR_PROV_NIC:
        return "nic";
    case TW_GDR_PROV_HOST_LOCAL:
        return "host-local";
    case TW_GDR_PROV_SOCKET:
        return "socket";
    }
    return "?";
}

enum tw_gdr_prov_kind tw__gdr_prov_kind_of(const char *provider)
{
    size_t n = strcspn(provider, ";");
    if ((n == 3 && strncmp(provider, "shm", 3) == 0) ||
        (n == 3 && strncmp(provider, "sm2", 3) == 0))
        return TW_GDR_PROV_HOST_LOCAL;
    if ((n == 3 && strncmp(provider, "tcp", 3) == 0) ||
        (n == 3 && strncmp(provider, "udp", 3) == 0) ||
        (n == 7 && strncmp(provider, "sockets", 7) == 0))
        return TW_GDR_PROV_SOCKET;
    return TW_GDR_PROV_NIC;
}

static const char *const mode_names[] = {
    [TW_GDR_MODE_AUTO] = "auto", [TW_GDR_MODE_OFF] = "off", [TW_GDR_MODE_REQUIRE] = "require"};

const char *tw__gdr_mode_name(enum tw_gdr_mode m)
{
    return (m >= TW_GDR_MODE_AUTO && m <= TW_GDR_MODE_REQUIRE) ? mode_names[m] : "?";
}

int tw__gdr_mode_parse(const char *s, enum tw_gdr_mode *out)
{
    for (int m = TW_GDR_MODE_AUTO; m <= TW_GDR_MODE_REQUIRE; m++) {
        if (strcmp(s, mode_names[m]) == 0) {
            *out = (enum tw_gdr_mode)m;
            return 0;
        }
    }
    return TW_EINVAL;
}
