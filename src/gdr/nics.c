/* RDMA NIC discovery through sysfs (see nics.h). */
#include "gdr/nics.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensorwire/error.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct tw_gdr_nic_facts *)a)->name,
                  ((const struct tw_gdr_nic_facts *)b)->name);
}

int tw__gdr_nics_read(const struct tw_sysfs *fs, struct tw_gdr_nic_facts *nics, size_t cap)
{
    char dirpath[TW_SYSFS_PATH_MAX];
    int n = snprintf(dirpath, sizeof(dirpath), "%s/sys/class/infiniband", fs->root);
    if (n < 0 || (size_t)n >= sizeof(dirpath))
        return TW_EINVAL;
    DIR *d = opendir(dirpath);
    if (!d)
        return errno == ENOENT ? 0 : -errno;
    size_t found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char link[TW_SYSFS_PATH_MAX], real[TW_SYSFS_PATH_MAX];
        snprintf(link, sizeof(link), "/sys/class/infiniband/%.64s/device", e->d_name);
        if (tw__sysfs_resolve(fs, link, real, sizeof(real)) < 0)
            continue; /* not backed by a device (e.g. a soft RoCE link) */
        const char *bdf = strrchr(real, '/');
        struct tw_gdr_nic_facts tmp;
        memset(&tmp, 0, sizeof(tmp));
        if (!bdf || tw__pci_dev_read(fs, bdf + 1, &tmp.pci) < 0)
            continue; /* not a PCI function */
        snprintf(tmp.name, sizeof(tmp.name), "%.63s", e->d_name);
        if (found < cap)
            nics[found] = tmp;
        found++;
    }
    closedir(d);
    qsort(nics, found < cap ? found : cap, sizeof(*nics), by_name);
    return found > (size_t)0x7fffffff ? 0x7fffffff : (int)found;
}

const struct tw_gdr_nic_facts *tw__gdr_nic_closest(const struct tw_gdr_gpu_facts *gpu,
                                                   const struct tw_gdr_nic_facts *nics, size_t n)
{
    const struct tw_gdr_nic_facts *best = NULL;
    enum tw_pcie_dist bestd = TW_PCIE_SYS;
    for (size_t i = 0; i < n; i++) {
        enum tw_pcie_dist d = gpu->pci_known
                                  ? tw__pcie_distance(gpu->pci.path, gpu->pci.numa_node,
                                                      nics[i].pci.path, nics[i].pci.numa_node)
                                  : TW_PCIE_SYS;
        if (!best || d < bestd) {
            best = &nics[i];
            bestd = d;
        }
    }
    return best;
}
