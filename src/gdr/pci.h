/*
 * PCIe facts for GPUDirect admission, read through the sysfs reader
 * (gdr/sysfs.h), and the pure functions that classify them.
 *
 * PCIe distance between two devices is classified like NCCL's topology
 * (docs/gpudirect.md, "PCIe distance"), from the canonical sysfs paths
 * (/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/.../BDF):
 *   PIX   both below one PCIe switch (at most one switch between them);
 *   PXB   below one root port, through several switches;
 *   PHB   same PCIe host bridge, different root ports (through the CPU's
 *         host bridge);
 *   NODE  different host bridges on the same NUMA node;
 *   SYS   different NUMA nodes, or a NUMA node unknown (fail closed).
 * Smaller is closer; the enum is ordered so a limit is a comparison.
 *
 * Ownership: plain values; nothing allocates.
 */
#ifndef TW_GDR_PCI_H
#define TW_GDR_PCI_H

#include <stddef.h>
#include <stdint.h>

#include "gdr/sysfs.h"

enum tw_pcie_dist {
    TW_PCIE_PIX = 1,
    TW_PCIE_PXB = 2,
    TW_PCIE_PHB = 3,
    TW_PCIE_NODE = 4,
    TW_PCIE_SYS = 5,
};

enum tw_iommu_kind {
    TW_IOMMU_NONE = 0,       /* no IOMMU group: DMA uses bus addresses */
    TW_IOMMU_IDENTITY = 1,   /* identity / passthrough domain */
    TW_IOMMU_TRANSLATED = 2, /* DMA, DMA-FQ, unmanaged, blocked: translated */
    TW_IOMMU_UNKNOWN = 3,    /* a group without a readable type */
};

#define TW_PCI_BARS 6

struct tw_pci_dev {
    char bdf[16];                    /* "0000:05:00.0" */
    char path[TW_SYSFS_PATH_MAX];    /* canonical "/sys/devices/pci.../BDF" */
    int numa_node;                   /* -1 when unknown */
    int dma_mask_bits;               /* 0 when unknown */
    enum tw_iommu_kind iommu;        /* of the device's IOMMU group */
    char iommu_type[24];             /* the group's type file, "" when none */
    uint64_t bar_start[TW_PCI_BARS]; /* from the resource file; 0/0 when unused */
    uint64_t bar_end[TW_PCI_BARS];   /* inclusive */
};

/*
 * Reads /sys/bus/pci/devices/<bdf>: canonical path, numa_node,
 * dma_mask_bits, resource, and the IOMMU group's type. Missing optional
 * files leave their fields "unknown". Returns 0, -ENOENT when the device is
 * absent, or another negative code.
 */
int tw__pci_dev_read(const struct tw_sysfs *fs, const char *bdf, struct tw_pci_dev *out);

/* Pure: the kind of an IOMMU group type string ("identity", "DMA-FQ", ...). */
enum tw_iommu_kind tw__iommu_kind(const char *type);

/* Pure: PCIe distance between two canonical device paths (see above). */
enum tw_pcie_dist tw__pcie_distance(const char *path_a, int numa_a, const char *path_b, int numa_b);

/* "PIX", "PXB", "PHB", "NODE", "SYS". */
const char *tw__pcie_dist_name(enum tw_pcie_dist d);
/* Parses those names (case-insensitive). Returns 0 or TW_EINVAL. */
int tw__pcie_dist_parse(const char *s, enum tw_pcie_dist *out);

/* Normalises a PCI bus id to the sysfs form "dddd:bb:dd.f" in lower case
 * (CUDA reports "00000000:05:00.0"). Returns 0 or TW_EINVAL. */
int tw__pci_bdf_normalize(const char *in, char *out, size_t cap);

#endif
