/* PCIe device facts and distance classification (see pci.h). */
#include "gdr/pci.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tensorwire/error.h"

enum tw_iommu_kind tw__iommu_kind(const char *type)
{
    if (!type || !*type)
        return TW_IOMMU_UNKNOWN;
    if (strcmp(type, "identity") == 0)
        return TW_IOMMU_IDENTITY;
    /* "DMA", "DMA-FQ", "unmanaged" (VFIO) and "blocked" all mean the
     * device's DMA addresses are not bus addresses. */
    if (strncmp(type, "DMA", 3) == 0 || strcmp(type, "unmanaged") == 0 ||
        strcmp(type, "blocked") == 0)
        return TW_IOMMU_TRANSLATED;
    return TW_IOMMU_UNKNOWN;
}

static const char *const dist_names[] = {
    [TW_PCIE_PIX] = "PIX",   [TW_PCIE_PXB] = "PXB", [TW_PCIE_PHB] = "PHB",
    [TW_PCIE_NODE] = "NODE", [TW_PCIE_SYS] = "SYS",
};

const char *tw__pcie_dist_name(enum tw_pcie_dist d)
{
    if (d < TW_PCIE_PIX || d > TW_PCIE_SYS)
        return "?";
    return dist_names[d];
}

int tw__pcie_dist_parse(const char *s, enum tw_pcie_dist *out)
{
    for (int d = TW_PCIE_PIX; d <= TW_PCIE_SYS; d++) {
        if (strcasecmp(s, dist_names[d]) == 0) {
            *out = (enum tw_pcie_dist)d;
            return 0;
        }
    }
    return TW_EINVAL;
}

#define MAX_HOPS 32

/* Splits "/sys/devices/pciDDDD:BB/BDF/BDF/..." into the host bridge name
 * and the chain of BDFs (the device itself last). Returns the chain length,
 * or -1 when the path is not a PCI device path. */
static int split_path(const char *path, char *host, size_t hostcap, const char *comp[MAX_HOPS],
                      size_t len[MAX_HOPS])
{
    static const char prefix[] = "/sys/devices/";
    if (strncmp(path, prefix, sizeof(prefix) - 1) != 0)
        return -1;
    const char *p = path + sizeof(prefix) - 1;
    const char *e = strchr(p, '/');
    if (!e || strncmp(p, "pci", 3) != 0 || (size_t)(e - p) >= hostcap)
        return -1;
    memcpy(host, p, (size_t)(e - p));
    host[e - p] = '\0';
    int n = 0;
    p = e + 1;
    while (*p) {
        e = strchr(p, '/');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (n == MAX_HOPS)
            return -1;
        comp[n] = p;
        len[n] = l;
        n++;
        p += l;
        if (*p == '/')
            p++;
    }
    return n;
}

enum tw_pcie_dist tw__pcie_distance(const char *path_a, int numa_a, const char *path_b, int numa_b)
{
    char ha[64], hb[64];
    const char *ca[MAX_HOPS], *cb[MAX_HOPS];
    size_t la[MAX_HOPS], lb[MAX_HOPS];
    int na = split_path(path_a, ha, sizeof(ha), ca, la);
    int nb = split_path(path_b, hb, sizeof(hb), cb, lb);
    if (na < 1 || nb < 1)
        return TW_PCIE_SYS; /* not a PCI path: assume the worst */
    if (strcmp(ha, hb) != 0) {
        /* Different host bridges: one NUMA node, or across the SMP link. */
        if (numa_a >= 0 && numa_a == numa_b)
            return TW_PCIE_NODE;
        return TW_PCIE_SYS;
    }
    /* Bridges above each device: the chain without its last element. The
     * common prefix of those is the set of bridges both sit below. */
    int ba = na - 1, bb = nb - 1, k = 0;
    while (k < ba && k < bb && la[k] == lb[k] && memcmp(ca[k], cb[k], la[k]) == 0)
        k++;
    if (k == 0)
        return TW_PCIE_PHB; /* different root ports of one host bridge */
    /* Bridges on the path below the deepest common one. Below one switch,
     * each device sits behind one downstream port of it (or both behind the
     * same one): at most one bridge each, and the common bridge is the
     * switch's upstream port, not the root port (k >= 2). */
    int below = (ba - k) + (bb - k);
    if (k >= 2 && ba - k <= 1 && bb - k <= 1 && below <= 2)
        return TW_PCIE_PIX;
    return TW_PCIE_PXB;
}

int tw__pci_bdf_normalize(const char *in, char *out, size_t cap)
{
    /* Accept "[domain:]bus:dev.fn" with a domain of up to 8 hex digits. */
    unsigned long dom = 0, bus, dev, fn;
    const char *p = in;
    char *e;
    unsigned long parts[3];
    int nparts = 0;
    for (;;) {
        if (!isxdigit((unsigned char)*p))
            return TW_EINVAL;
        parts[nparts++] = strtoul(p, &e, 16);
        if (*e == ':' && nparts < 3) {
            p = e + 1;
            continue;
        }
        break;
    }
    if (*e != '.' || nparts < 2)
        return TW_EINVAL;
    if (nparts == 3) {
        dom = parts[0];
        bus = parts[1];
        dev = parts[2];
    } else {
        bus = parts[0];
        dev = parts[1];
    }
    p = e + 1;
    if (!isxdigit((unsigned char)*p))
        return TW_EINVAL;
    fn = strtoul(p, &e, 16);
    if (*e != '\0' || dom > 0xffff || bus > 0xff || dev > 0x1f || fn > 7)
        return TW_EINVAL;
    int n = snprintf(out, cap, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
    return (n < 0 || (size_t)n >= cap) ? TW_EINVAL : 0;
}

/* Parses the sysfs resource file: one "0xSTART 0xEND 0xFLAGS" line per
 * resource, BARs first. */
static void parse_resources(const char *text, struct tw_pci_dev *d)
{
    const char *p = text;
    for (int i = 0; i < TW_PCI_BARS && *p; i++) {
        char *e;
        unsigned long long s = strtoull(p, &e, 16);
        unsigned long long en = strtoull(e, &e, 16);
        d->bar_start[i] = s;
        d->bar_end[i] = en;
        const char *nl = strchr(e, '\n');
        if (!nl)
            break;
        p = nl + 1;
    }
}

/* dir + "/" + file into out; an over-long path reads as absent. */
static const char *join(char *out, size_t cap, const char *dir, const char *file)
{
    int n = snprintf(out, cap, "%s/%s", dir, file);
    return (n < 0 || (size_t)n >= cap) ? "/nonexistent" : out;
}

int tw__pci_dev_read(const struct tw_sysfs *fs, const char *bdf, struct tw_pci_dev *out)
{
    char path[TW_SYSFS_PATH_MAX], buf[1024];
    memset(out, 0, sizeof(*out));
    out->numa_node = -1;
    if (tw__pci_bdf_normalize(bdf, out->bdf, sizeof(out->bdf)) < 0)
        return TW_EINVAL;
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", out->bdf);
    int rc = tw__sysfs_resolve(fs, path, out->path, sizeof(out->path));
    if (rc < 0)
        return rc;
    if (tw__sysfs_read_int(fs, join(path, sizeof(path), out->path, "numa_node"), &out->numa_node) <
        0)
        out->numa_node = -1;
    uint64_t bits;
    if (tw__sysfs_read_u64(fs, join(path, sizeof(path), out->path, "dma_mask_bits"), &bits) == 0 &&
        bits <= 64)
        out->dma_mask_bits = (int)bits;
    if (tw__sysfs_read(fs, join(path, sizeof(path), out->path, "resource"), buf, sizeof(buf)) > 0)
        parse_resources(buf, out);
    /* IOMMU: the device's iommu_group link names the group; no link means
     * no IOMMU translates this device's DMA. */
    char group[TW_SYSFS_PATH_MAX];
    rc = tw__sysfs_resolve(fs, join(path, sizeof(path), out->path, "iommu_group"), group,
                           sizeof(group));
    if (rc == -ENOENT) {
        out->iommu = TW_IOMMU_NONE;
        return 0;
    }
    if (rc < 0) {
        out->iommu = TW_IOMMU_UNKNOWN;
        return 0;
    }
    if (tw__sysfs_read(fs, join(path, sizeof(path), group, "type"), out->iommu_type,
                       sizeof(out->iommu_type)) < 0)
        out->iommu_type[0] = '\0';
    out->iommu = tw__iommu_kind(out->iommu_type);
    return 0;
}
