/*
 * Facts gathering (see facts.h). Every source that is missing (no driver,
 * no NVML, no libfabric, no sysfs entry) leaves its facts "unknown" with a
 * reason, which the policy then fails closed on.
 */
#include "gdr/facts.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "fabric/fi_api.h"
#include "gdr/nics.h"
#include "gdr/sysfs.h"
#include "gpu/cuda.h"
#include "gpu/nvml.h"

/* Size of the device buffer used to prove registration and dma-buf export:
 * one GPU page. */
#define PROBE_BYTES ((size_t)64 * 1024)

static void gather_gpu(const struct tw_cuda_api *cu, const struct tw_sysfs *fs, int ordinal,
                       struct tw_gdr_gpu_facts *g, char *note, size_t notelen)
{
    memset(g, 0, sizeof(*g));
    g->ordinal = ordinal;
    g->gdr_supported = g->dmabuf_supported = g->dmabuf_export = TW_GDR_UNKNOWN;
    g->mig_enabled = TW_GDR_UNKNOWN;
    note[0] = '\0';
    CUdevice dev;
    if (cu->cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS) {
        snprintf(note, notelen, "cuDeviceGet(%d) failed", ordinal);
        return;
    }
    if (cu->cuDeviceGetName(g->name, (int)sizeof(g->name), dev) != CUDA_SUCCESS)
        snprintf(g->name, sizeof(g->name), "?");
    int v;
    if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev) ==
        CUDA_SUCCESS)
        g->gdr_supported = v != 0;
    if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS)
        g->dmabuf_supported = v != 0;
    if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS,
                                 dev) == CUDA_SUCCESS)
        g->flush_supported = (v & CU_FLUSH_GPU_DIRECT_RDMA_WRITES_OPTION_HOST) != 0;
    /* Unknown ordering counts as "needs a flush": fail safe. */
    g->flush_needed = 1;
    if (cu->cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WRITES_ORDERING, dev) ==
        CUDA_SUCCESS)
        g->flush_needed = v == CU_GPU_DIRECT_RDMA_WRITES_ORDERING_NONE;

    char bus[32];
    if (cu->cuDeviceGetPCIBusId(bus, (int)sizeof(bus), dev) == CUDA_SUCCESS &&
        tw__pci_bdf_normalize(bus, g->bdf, sizeof(g->bdf)) == 0 &&
        tw__pci_dev_read(fs, g->bdf, &g->pci) == 0)
        g->pci_known = 1;

    struct tw_nvml_gpu_info info;
    char err[160];
    if (tw__nvml_gpu_info(ordinal, &info, err, sizeof(err)) == 0) {
        g->bar1_known = 1;
        g->bar1_total = info.bar1_total;
        g->bar1_free = info.bar1_free;
        g->mig_enabled = info.mig_enabled;
    } else {
        snprintf(note, notelen, "%s", err);
    }
}

/* Allocates the probe buffer on GPU `ordinal` and tries a dma-buf export of
 * it; returns the buffer (0 when allocation failed) for the provider probes. */
static CUdeviceptr probe_buffer(const struct tw_cuda_api *cu, struct tw_gdr_gpu_facts *g)
{
    if (tw__cuda_use_device(g->ordinal, NULL, 0) < 0)
        return 0;
    CUdeviceptr p = 0;
    if (cu->cuMemAlloc(&p, PROBE_BYTES) != CUDA_SUCCESS)
        return 0;
    if (g->dmabuf_supported == 1) {
        int fd = -1;
        CUresult r = cu->cuMemGetHandleForAddressRange(&fd, p, PROBE_BYTES,
                                                       CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
        g->dmabuf_export = r == CUDA_SUCCESS && fd >= 0;
        if (fd >= 0)
            close(fd);
    } else if (g->dmabuf_supported == 0) {
        g->dmabuf_export = 0;
    }
    return p;
}

/* The dma-buf registration path of a provider that registers CUDA memory
 * by pointer: export the probe buffer and register the fd (FI_MR_DMABUF,
 * compiled only against libfabric 1.20+ headers). */
static void probe_dmabuf(const struct tw_cuda_api *cu, const struct tw_gdr_gpu_facts *g,
                         CUdeviceptr buf, struct tw_gdr_provider_facts *f, struct tw_fabric *plane)
{
    if (!tw__fabric_dmabuf_built()) {
        snprintf(f->dmabuf_detail, sizeof(f->dmabuf_detail),
                 "not built: this build's libfabric headers have no FI_MR_DMABUF (1.20+)");
        return;
    }
    if (g->dmabuf_export != 1) {
        snprintf(f->dmabuf_detail, sizeof(f->dmabuf_detail), "the GPU exported no dma-buf");
        return;
    }
    int fd = -1;
    if (tw__cuda_use_device(g->ordinal, NULL, 0) < 0 ||
        cu->cuMemGetHandleForAddressRange(&fd, buf, PROBE_BYTES,
                                          CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != CUDA_SUCCESS ||
        fd < 0) {
        snprintf(f->dmabuf_detail, sizeof(f->dmabuf_detail), "dma-buf export failed");
        f->dmabuf_mr = 0;
        return;
    }
    int rc =
        plane ? tw__fabric_plane_probe_mr(plane, f->name, g->ordinal, (uintptr_t)buf, PROBE_BYTES,
                                          fd, 0, f->dmabuf_detail, sizeof(f->dmabuf_detail))
              : tw__fabric_probe_dmabuf_mr(f->name, g->ordinal, (uintptr_t)buf, PROBE_BYTES, fd, 0,
                                           f->dmabuf_detail, sizeof(f->dmabuf_detail));
    close(fd);
    f->dmabuf_mr = rc > 0 ? 1 : 0;
}

/* The CUDA registration probe of provider p: on plane's rail of p when a
 * plane is given (nothing opened), else by opening p. */
static int probe_cuda(struct tw_fabric *plane, const char *p, int device, uintptr_t buf, size_t len,
                      char *detail, size_t detail_len)
{
    if (plane)
        return tw__fabric_plane_probe_mr(plane, p, device, buf, len, -1, 0, detail, detail_len);
    return tw__fabric_probe_cuda_mr(p, device, buf, len, detail, detail_len);
}

static void gather_fabric(struct tw_gdr_machine *m, const char *providers,
                          const struct tw_cuda_api *cu, struct tw_fabric *plane)
{
    char err[256] = "";
    /* No libfabric here: the reason is the status, and no provider is
     * probed (the GPU facts below are still gathered). */
    int have_fabric = tw__fabric_lib_load(m->fabric_status, sizeof(m->fabric_status)) == 0;
    if (have_fabric) {
        tw__fabric_version_string(m->fabric_version, sizeof(m->fabric_version));
        m->nrows = tw__fabric_list_providers(m->rows, TW_GDR_MAX_FABRIC_ROWS, err, sizeof(err));
    }
    if (m->nrows < 0) {
        snprintf(m->fabric_status, sizeof(m->fabric_status), "%s", err);
        m->nrows = 0;
    }

    /* One probe buffer, on the first GPU: whether a provider registers
     * CUDA memory is a property of the libfabric build and the provider. */
    CUdeviceptr buf = 0;
    if (cu && m->ngpus > 0)
        buf = probe_buffer(cu, &m->gpus[0]);
    for (int i = 1; cu && i < m->ngpus; i++) {
        CUdeviceptr b = probe_buffer(cu, &m->gpus[i]); /* dma-buf export per GPU */
        if (b) {
            tw__cuda_use_device(m->gpus[i].ordinal, NULL, 0);
            cu->cuMemFree(b);
        }
    }

    char list[256];
    snprintf(list, sizeof(list), "%s",
             !have_fabric ? ""
             : providers  ? providers
                          : "verbs,efa,shm,tcp");
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p && m->nprov < TW_GDR_MAX_PROVIDERS;
         p = strtok_r(NULL, ",", &save)) {
        struct tw_gdr_provider_info *pi = &m->provs[m->nprov++];
        memset(pi, 0, sizeof(*pi));
        snprintf(pi->facts.name, sizeof(pi->facts.name), "%s", p);
        pi->facts.kind = tw__gdr_prov_kind_of(p);
        pi->facts.hmem_cuda = TW_GDR_UNKNOWN;
        /* dma-buf MRs need FI_MR_DMABUF (libfabric 1.20); this build's
         * headers decide whether it can even be asked for. */
        pi->facts.dmabuf_mr = TW_GDR_UNKNOWN;
        if (!buf) {
            snprintf(pi->facts.detail, sizeof(pi->facts.detail), "%s",
                     m->ngpus ? "no probe buffer on the GPU" : "no GPU to register");
            /* Still say whether the provider exists here. */
            char why[256];
            pi->available = probe_cuda(plane, p, -1, 0, 0, why, sizeof(why)) >= 0;
            if (!pi->available)
                snprintf(pi->facts.detail, sizeof(pi->facts.detail), "%.159s", why);
            continue;
        }
        int rc = probe_cuda(plane, p, m->gpus[0].ordinal, (uintptr_t)buf, PROBE_BYTES,
                            pi->facts.detail, sizeof(pi->facts.detail));
        pi->available = rc >= 0;
        pi->facts.hmem_cuda = rc > 0 ? 1 : 0;
        if (rc > 0)
            probe_dmabuf(cu, &m->gpus[0], buf, &pi->facts, plane);
    }
    if (buf) {
        tw__cuda_use_device(m->gpus[0].ordinal, NULL, 0);
        cu->cuMemFree(buf);
    }
}

void tw__gdr_machine_gather(struct tw_gdr_machine *m, const char *providers, const char *sysfs_root)
{
    tw__gdr_machine_gather_on(m, providers, sysfs_root, NULL);
}

void tw__gdr_machine_gather_on(struct tw_gdr_machine *m, const char *providers,
                               const char *sysfs_root, struct tw_fabric *plane)
{
    memset(m, 0, sizeof(*m));
    struct tw_sysfs fs;
    if (tw__sysfs_init(&fs, sysfs_root) < 0)
        tw__sysfs_init(&fs, NULL);
    snprintf(m->sysfs_root, sizeof(m->sysfs_root), "%s", fs.root[0] ? fs.root : "/");

    const struct tw_cuda_api *cu = NULL;
    if (tw__cuda_get(&cu, m->cuda_status, sizeof(m->cuda_status)) == 0) {
        m->cuda_ok = 1;
        m->cuda_driver_version = cu->driver_version;
        int n = 0;
        if (cu->cuDeviceGetCount(&n) != CUDA_SUCCESS)
            n = 0;
        if (n > TW_GDR_MAX_GPUS)
            n = TW_GDR_MAX_GPUS;
        m->ngpus = n;
        for (int i = 0; i < n; i++)
            gather_gpu(cu, &fs, i, &m->gpus[i], m->gpu_notes[i], sizeof(m->gpu_notes[i]));
        if (n == 0)
            snprintf(m->cuda_status, sizeof(m->cuda_status), "CUDA driver loaded, no GPU");
    } else {
        cu = NULL;
    }

    int nn = tw__gdr_nics_read(&fs, m->nics, TW_GDR_MAX_NICS);
    m->nnics = nn < 0 ? 0 : (nn > TW_GDR_MAX_NICS ? TW_GDR_MAX_NICS : nn);
    gather_fabric(m, providers, cu, plane);
}

int tw__gdr_machine_decide(const struct tw_gdr_machine *m, const struct tw_gdr_config *cfg, int gi,
                           int pi, struct tw_gdr_verdict *out, const struct tw_gdr_nic_facts **nic)
{
    const struct tw_gdr_gpu_facts *g = (gi >= 0 && gi < m->ngpus) ? &m->gpus[gi] : NULL;
    const struct tw_gdr_provider_facts *p = (pi >= 0 && pi < m->nprov) ? &m->provs[pi].facts : NULL;
    const struct tw_gdr_nic_facts *n = NULL;
    if (g && p && p->kind == TW_GDR_PROV_NIC)
        n = tw__gdr_nic_closest(g, m->nics, (size_t)m->nnics);
    if (nic)
        *nic = n;
    return tw__gdr_decide(cfg, g, p, n, out);
}
