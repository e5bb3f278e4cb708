/*
 * RDMA NICs as sysfs lists them (/sys/class/infiniband/<name>/device), read
 * through the sysfs reader so tests can point it at a fixture tree.
 *
 * Ownership: the caller owns the output array.
 */
#ifndef TW_GDR_NICS_H
#define TW_GDR_NICS_H

#include <stddef.h>

#include "gdr/policy.h"
#include "gdr/sysfs.h"

/*
 * Fills nics[0..cap) with every RDMA device that is a PCI function, sorted by
 * name, and returns how many exist (which may exceed cap: only cap are
 * written). 0 when the class directory is absent (no RDMA stack loaded).
 * Returns a negative code only when the directory exists but cannot be read.
 */
int tw__gdr_nics_read(const struct tw_sysfs *fs, struct tw_gdr_nic_facts *nics, size_t cap);

/* The NIC closest to the GPU on PCIe (ties: first by name), or NULL when
 * n is 0. Pure. */
const struct tw_gdr_nic_facts *tw__gdr_nic_closest(const struct tw_gdr_gpu_facts *gpu,
                                                   const struct tw_gdr_nic_facts *nics, size_t n);

#endif
