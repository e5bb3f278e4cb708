/*
 * GPUDirect RDMA admission: a pure, fail-closed decision over facts.
 *
 * Facts about one GPU, one data-plane provider and (for NIC-backed
 * providers) one NIC are gathered once (gdr/facts.h) into the plain structs
 * below; tw__gdr_decide() then checks every predicate and admits GPUDirect
 * for that (GPU, provider, NIC) only when all that apply pass. Each predicate
 * yields its own verdict and reason code, so `tensorwire doctor` can print
 * the whole table and the data path can say exactly why it stages instead.
 * Modelled on the DMA-BUF driver change in ../shared/seeds/003_*: admit only
 * when every runtime predicate holds, fail closed on anything unknown.
 *
 * Nothing here does I/O; every function is pure and thread-safe.
 */
#ifndef TW_GDR_POLICY_H
#define TW_GDR_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "gdr/pci.h"

/* The operator's switch (--gpudirect on server and client). */
enum tw_gdr_mode {
    TW_GDR_MODE_AUTO = 0,    /* use it where admitted (default) */
    TW_GDR_MODE_OFF = 1,     /* never */
    TW_GDR_MODE_REQUIRE = 2, /* refuse to start/connect unless admitted */
};

/* Tri-state facts: a predicate whose fact is unknown fails (fail closed). */
#define TW_GDR_UNKNOWN (-1)

struct tw_gdr_gpu_facts {
    int ordinal;          /* CUDA ordinal */
    char name[96];        /* "NVIDIA H200" */
    char bdf[16];         /* sysfs form, "" when unknown */
    int gdr_supported;    /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: 1/0/-1 */
    int dmabuf_supported; /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: 1/0/-1 */
    int dmabuf_export;    /* a dma-buf export of a test allocation worked: 1/0/-1 */
    int mig_enabled;      /* NVML current MIG mode: 1/0/-1 */
    uint64_t bar1_total;  /* NVML, bytes; 0 with bar1_known = 0 when unknown */
    uint64_t bar1_free;
    int bar1_known;
    int flush_needed;    /* GPU_DIRECT_RDMA_WRITES_ORDERING is NONE: NIC writes
                            must be flushed before GPU work reads them */
    int flush_supported; /* cuFlushGPUDirectRDMAWrites works from the host */
    int pci_known;       /* pci below was read from sysfs */
    struct tw_pci_dev pci;
};

/* How a provider moves bytes, which decides which predicates apply. */
enum tw_gdr_prov_kind {
    TW_GDR_PROV_NIC = 0,        /* a NIC DMAs into memory (verbs, efa, ...) */
    TW_GDR_PROV_HOST_LOCAL = 1, /* inside this host (shm: CUDA IPC), no NIC */
    TW_GDR_PROV_SOCKET = 2,     /* through kernel sockets (tcp, udp): a CUDA
                                   buffer would be copied by the provider */
};

struct tw_gdr_provider_facts {
    char name[32]; /* libfabric provider: "shm", "tcp", "verbs", "efa" */
    enum tw_gdr_prov_kind kind;
    int hmem_cuda;           /* a real registration of a small CUDA buffer with
                                FI_HMEM_CUDA succeeded: 1/0/-1 */
    int dmabuf_mr;           /* FI_MR_DMABUF registration of a CUDA dma-buf
                                succeeded: 1/0/-1 (-1 also when not built in) */
    char detail[160];        /* why hmem_cuda is 0 (libfabric's words), or "" */
    char dmabuf_detail[160]; /* what the FI_MR_DMABUF probe said, or "" */
};

struct tw_gdr_nic_facts {
    char name[64]; /* "mlx5_0" */
    struct tw_pci_dev pci;
};

struct tw_gdr_config {
    enum tw_gdr_mode mode;
    enum tw_pcie_dist max_distance; /* default TW_PCIE_PXB */
};

/* The predicates, in the order they are checked and printed. */
enum tw_gdr_pred {
    TW_GDR_P_ENABLED = 0,   /* the operator has not disabled it */
    TW_GDR_P_PROVIDER_RDMA, /* the provider moves data by DMA or CUDA IPC */
    TW_GDR_P_PROVIDER_HMEM, /* the provider registers CUDA memory */
    TW_GDR_P_GPU_ATTR,      /* the GPU reports GPU_DIRECT_RDMA_SUPPORTED */
    TW_GDR_P_MIG,           /* MIG disabled */
    TW_GDR_P_BAR1,          /* NVML reports a BAR1 window */
    TW_GDR_P_IOMMU,         /* GPU and NIC IOMMU: none or identity */
    TW_GDR_P_DMA_MASK,      /* the NIC's DMA mask covers the GPU's BAR1 */
    TW_GDR_P_PCIE,          /* GPU-NIC PCIe distance within the limit */
    TW_GDR_P_DMABUF,        /* dma-buf registration path (informational) */
    TW_GDR_P_COUNT
};

enum tw_gdr_status {
    TW_GDR_PASS = 0,
    TW_GDR_FAIL = 1,
    TW_GDR_NA = 2, /* does not apply (e.g. IOMMU for shm) */
};

/* Why: one code per distinct cause, each with a fix (tw__gdr_reason_fix). */
enum tw_gdr_reason {
    TW_GDR_R_OK = 0,
    TW_GDR_R_DISABLED,          /* --gpudirect off */
    TW_GDR_R_NO_GPU,            /* no CUDA driver or no such device */
    TW_GDR_R_PROVIDER_SOCKET,   /* the provider copies through sockets */
    TW_GDR_R_PROVIDER_NO_HMEM,  /* provider refused to register CUDA memory */
    TW_GDR_R_PROVIDER_UNPROBED, /* registration not tried (no fabric open) */
    TW_GDR_R_GPU_NO_GDR,        /* attribute 0 */
    TW_GDR_R_GPU_GDR_UNKNOWN,   /* attribute not readable */
    TW_GDR_R_MIG_ON,
    TW_GDR_R_MIG_UNKNOWN, /* no NVML */
    TW_GDR_R_NO_BAR1,     /* NVML says 0 or cannot say */
    TW_GDR_R_HOST_LOCAL,  /* NA: provider moves data inside the host */
    TW_GDR_R_NO_NIC,      /* NIC-backed provider, but no NIC facts */
    TW_GDR_R_IOMMU_TRANSLATED,
    TW_GDR_R_IOMMU_UNKNOWN,
    TW_GDR_R_DMA_MASK_SHORT,
    TW_GDR_R_DMA_MASK_UNKNOWN,
    TW_GDR_R_PCIE_TOO_FAR,
    TW_GDR_R_PCIE_UNKNOWN,
    TW_GDR_R_DMABUF_USED,     /* informational: dma-buf will be used */
    TW_GDR_R_DMABUF_NOT_USED, /* informational: pointer registration */
    TW_GDR_R_COUNT
};

struct tw_gdr_check {
    enum tw_gdr_status status;
    enum tw_gdr_reason reason;
};

struct tw_gdr_verdict {
    int admitted;                /* every applicable predicate passed */
    int use_dmabuf;              /* register through a dma-buf fd */
    enum tw_gdr_pred first_fail; /* TW_GDR_P_COUNT when admitted */
    enum tw_gdr_reason reason;   /* first failing predicate's reason, or OK */
    enum tw_pcie_dist distance;  /* GPU-NIC, 0 when not applicable */
    struct tw_gdr_check checks[TW_GDR_P_COUNT];
};

void tw__gdr_config_defaults(struct tw_gdr_config *cfg);

/*
 * The decision. nic may be NULL (host-local provider, or no NIC found).
 * Always fills *out; returns out->admitted.
 */
/* "nic", "host-local", "socket". */
const char *tw__gdr_prov_kind_name(enum tw_gdr_prov_kind k);
/* The kind of a libfabric provider name ("tcp;ofi_rxm" counts as tcp). Pure. */
enum tw_gdr_prov_kind tw__gdr_prov_kind_of(const char *provider);

int tw__gdr_decide(const struct tw_gdr_config *cfg, const struct tw_gdr_gpu_facts *gpu,
                   const struct tw_gdr_provider_facts *prov, const struct tw_gdr_nic_facts *nic,
                   struct tw_gdr_verdict *out);

/*
 * BAR1 admission of one registration, overflow-safe: [start, start+len)
 * must be non-empty and wholly inside the window [win_start,
 * win_start+win_len). Returns 0 when inside; TW_EINVAL when empty; -ERANGE
 * when start+len overflows 64 bits; -ENOSPC when the range is outside or
 * spans the end of the window.
 */
int tw__gdr_range_inside(uint64_t win_start, uint64_t win_len, uint64_t start, uint64_t len);

/* Names and prose for people: "provider_hmem", a sentence, and what to do. */
const char *tw__gdr_pred_name(enum tw_gdr_pred p);
const char *tw__gdr_reason_str(enum tw_gdr_reason r);
const char *tw__gdr_reason_fix(enum tw_gdr_reason r);
const char *tw__gdr_mode_name(enum tw_gdr_mode m);
/* "auto", "off", "require". Returns 0 or TW_EINVAL. */
int tw__gdr_mode_parse(const char *s, enum tw_gdr_mode *out);

#endif
