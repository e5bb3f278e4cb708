/*
 * Gathering GPUDirect facts from this machine: the CUDA driver and GPUs
 * (attributes, dma-buf export), NVML (BAR1, MIG), sysfs (PCIe, IOMMU, NICs,
 * through gdr/sysfs.h's root) and libfabric (version, providers, a real CUDA
 * registration per candidate provider). Gathering does I/O and can take
 * hundreds of milliseconds (it opens every provider); the decision over
 * the result (gdr/policy.h) is pure and free. Gather once per process.
 *
 * Ownership: struct tw_gdr_machine is a plain value the caller owns (it is
 * large: allocate it, do not put it on a small stack).
 */
#ifndef TW_GDR_FACTS_H
#define TW_GDR_FACTS_H

#include <stddef.h>

#include "fabric/probe.h"
#include "gdr/policy.h"

#define TW_GDR_MAX_GPUS 16
#define TW_GDR_MAX_PROVIDERS 8
#define TW_GDR_MAX_NICS 16
#define TW_GDR_MAX_FABRIC_ROWS 32

struct tw_gdr_provider_info {
    struct tw_gdr_provider_facts facts;
    int available; /* the provider opened here (with or without FI_HMEM) */
};

struct tw_gdr_machine {
    /* CUDA */
    int cuda_ok;
    int cuda_driver_version; /* 13000 for 13.0 */
    char cuda_status[256];   /* why not, when !cuda_ok */
    int ngpus;
    struct tw_gdr_gpu_facts gpus[TW_GDR_MAX_GPUS];
    char gpu_notes[TW_GDR_MAX_GPUS][160]; /* NVML or export failures */
    /* libfabric */
    char fabric_version[32]; /* "" when libfabric cannot be used */
    char fabric_status[256];
    int nrows; /* may exceed TW_GDR_MAX_FABRIC_ROWS; only that many kept */
    struct tw_fabric_prov_desc rows[TW_GDR_MAX_FABRIC_ROWS];
    int nprov;
    struct tw_gdr_provider_info provs[TW_GDR_MAX_PROVIDERS];
    /* sysfs */
    char sysfs_root[256];
    int nnics;
    struct tw_gdr_nic_facts nics[TW_GDR_MAX_NICS];
};

/*
 * Fills *m. providers: comma-separated candidates to probe for CUDA
 * registration (NULL: "verbs,efa,shm,tcp", the data plane's "auto" list).
 * sysfs_root: NULL or "" for the real /sys, else a fixture tree. Never fails:
 * whatever cannot be learnt is recorded as unknown with the reason.
 */
void tw__gdr_machine_gather(struct tw_gdr_machine *m, const char *providers,
                            const char *sysfs_root);

struct tw_fabric;

/*
 * The same, with the CUDA registration probes made on an open plane's rails
 * (fabric/probe.h, tw__fabric_plane_probe_mr) instead of opening each
 * provider once more: the registration the data path will make, on the
 * domain it will use, and no second open of the provider. A provider the
 * plane has no rail of is "not available" here. plane NULL: as above.
 */
void tw__gdr_machine_gather_on(struct tw_gdr_machine *m, const char *providers,
                               const char *sysfs_root, struct tw_fabric *plane);

/* The verdict for GPU index gi and provider index pi of m under cfg, with
 * the NIC closest to that GPU for NIC-backed providers. Pure. */
int tw__gdr_machine_decide(const struct tw_gdr_machine *m, const struct tw_gdr_config *cfg, int gi,
                           int pi, struct tw_gdr_verdict *out, const struct tw_gdr_nic_facts **nic);

#endif
