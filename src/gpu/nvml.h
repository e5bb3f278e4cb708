/*
 * NVML through dlopen("libnvidia-ml.so.1"): just what the registration cache
 * needs, the BAR1 size of a GPU (the window GPUDirect RDMA pins through).
 *
 * A missing library or device is "no GPU here": TW_EDEVICE with the reason
 * in err, never an abort. NVML is initialised and shut down around each
 * query, so no NVML state outlives the call.
 */
#ifndef TW_GPU_NVML_H
#define TW_GPU_NVML_H

#include <stddef.h>
#include <stdint.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_SUCCESS 0

typedef struct {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

#define TW_NVML_SYMBOLS(X)                                                                         \
    X(nvmlInit, "nvmlInit_v2", nvmlReturn_t, (void))                                               \
    X(nvmlShutdown, "nvmlShutdown", nvmlReturn_t, (void))                                          \
    X(nvmlErrorString, "nvmlErrorString", const char *, (nvmlReturn_t r))                          \
    X(nvmlDeviceGetHandleByIndex, "nvmlDeviceGetHandleByIndex_v2", nvmlReturn_t,                   \
      (unsigned int index, nvmlDevice_t *dev))                                                     \
    X(nvmlDeviceGetHandleByPciBusId, "nvmlDeviceGetHandleByPciBusId_v2", nvmlReturn_t,             \
      (const char *bus_id, nvmlDevice_t *dev))                                                     \
    X(nvmlDeviceGetBAR1MemoryInfo, "nvmlDeviceGetBAR1MemoryInfo", nvmlReturn_t,                    \
      (nvmlDevice_t dev, nvmlBAR1Memory_t * info))

/* What GPUDirect admission asks NVML about one GPU. */
struct tw_nvml_gpu_info {
    uint64_t bar1_total, bar1_free; /* bytes */
    int mig_enabled;                /* current MIG mode: 1, 0, or -1 unknown */
};

/*
 * BAR1 and MIG mode of the GPU with CUDA ordinal `cuda_ordinal` (found as
 * below). A GPU without MIG support reports mig_enabled 0; an NVML without
 * nvmlDeviceGetMigMode reports -1. Returns 0 or TW_EDEVICE with the reason.
 */
int tw__nvml_gpu_info(int cuda_ordinal, struct tw_nvml_gpu_info *out, char *err, size_t errlen);

/*
 * BAR1 size in bytes of the GPU with CUDA ordinal `cuda_ordinal`. The GPU is
 * found by PCI bus id when CUDA is loaded (CUDA and NVML may number devices
 * differently), else by NVML index. Returns 0, or TW_EDEVICE with the reason
 * in err (may be NULL).
 */
int tw__nvml_bar1_total(int cuda_ordinal, uint64_t *bytes, char *err, size_t errlen);

#endif
