/*
 * tensorwire doctor: why GPUDirect RDMA is, or is not, used on this machine.
 *
 * tw_doctor() gathers the facts GPUDirect admission depends on (CUDA driver
 * and GPUs, NVML BAR1 and MIG, libfabric and its providers with a real CUDA
 * registration per provider, RDMA NICs, IOMMU and PCIe topology from sysfs),
 * decides admission for every (GPU, provider) pair with the same policy the
 * data path uses, and writes a report for people or for machines.
 * docs/gpudirect.md explains every predicate and reason.
 *
 * It needs no GPU, NIC or libfabric: missing pieces are reported as such. It
 * opens each candidate provider once, which can take up to a second.
 * Thread-safe; keeps nothing.
 */
#ifndef TENSORWIRE_DOCTOR_H
#define TENSORWIRE_DOCTOR_H

#include "tensorwire/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TW_DOCTOR_JSON 0x1u /* the report is one JSON object (docs/gpudirect.md) */

struct tw_doctor_result {
    int gpus;          /* GPUs the CUDA driver reports (0 without a driver) */
    int admitted_gpus; /* GPUs admitted for GPUDirect on at least one provider */
};

/*
 * Examines this machine. providers: comma-separated libfabric providers to
 * probe (NULL: "verbs,efa,shm,tcp"). sysfs_root: NULL for the real /sys, or
 * a directory that mirrors it (tests). On success returns 0, stores a
 * NUL-terminated report in *report (free it with tw_free) and fills *result
 * when result is not NULL. Errors: TW_EINVAL (report NULL or an unknown
 * flag), -ENOMEM.
 */
TW_EXTERN int tw_doctor(const char *providers, const char *sysfs_root, unsigned flags,
                        char **report, struct tw_doctor_result *result);

#ifdef __cplusplus
}
#endif

#endif
