/*
 * NVML BAR1 query. Loaded once (the table is immutable afterwards);
 * nvmlInit/nvmlShutdown are reference counted by NVML itself, so pairing
 * them around every query is safe next to other NVML users in the process.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu/cuda.h"
#include "gpu/nvml.h"
#include "tensorwire/error.h"

struct nvml_api {
#define TW_NVML_FIELD(field, sym, ret, params) ret(*field) params;
    TW_NVML_SYMBOLS(TW_NVML_FIELD)
#undef TW_NVML_FIELD
    /* Optional (NVML of R470 and later); NULL when absent. */
    nvmlReturn_t (*nvmlDeviceGetMigMode)(nvmlDevice_t dev, unsigned int *current,
                                         unsigned int *pending);
};

#define TW_NVML_ERROR_NOT_SUPPORTED 3

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct nvml_api nv;
static int load_status = TW_EDEVICE;
static char load_reason[256] = "NVML not loaded";

static void load_nvml(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_reason, sizeof(load_reason), "no NVML: dlopen(libnvidia-ml.so.1) failed: %s",
                 why ? why : "unknown");
        return;
    }
#define TW_NVML_RESOLVE(field, sym, ret, params)                                                   \
    *(void **)&nv.field = dlsym(lib, sym);                                                         \
    if (!nv.field) {                                                                               \
        snprintf(load_reason, sizeof(load_reason), "NVML too old: lacks %s", sym);                 \
        goto out_close_lib;                                                                        \
    }
    TW_NVML_SYMBOLS(TW_NVML_RESOLVE)
#undef TW_NVML_RESOLVE
    *(void **)&nv.nvmlDeviceGetMigMode = dlsym(lib, "nvmlDeviceGetMigMode");
    load_status = 0;
    return;

out_close_lib:
    memset(&nv, 0, sizeof(nv));
    dlclose(lib);
}

int tw__nvml_gpu_info(int cuda_ordinal, struct tw_nvml_gpu_info *out, char *err, size_t errlen)
{
    pthread_once(&load_once, load_nvml);
    if (load_status != 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s", load_reason);
        return load_status;
    }
    nvmlReturn_t r = nv.nvmlInit();
    if (r != NVML_SUCCESS) {
        if (err && errlen)
            snprintf(err, errlen, "nvmlInit_v2: %s", nv.nvmlErrorString(r));
        return TW_EDEVICE;
    }
    int rc = 0;
    nvmlDevice_t dev = NULL;
    /* CUDA orders devices fastest-first by default, NVML by PCI address:
     * match on the bus id when the CUDA driver is there to tell us. */
    const struct tw_cuda_api *cu;
    char bus[32];
    CUdevice cdev;
    if (tw__cuda_get(&cu, NULL, 0) == 0 && cu->cuDeviceGet(&cdev, cuda_ordinal) == CUDA_SUCCESS &&
        cu->cuDeviceGetPCIBusId(bus, (int)sizeof(bus), cdev) == CUDA_SUCCESS)
        r = nv.nvmlDeviceGetHandleByPciBusId(bus, &dev);
    else
        r = nv.nvmlDeviceGetHandleByIndex((unsigned int)cuda_ordinal, &dev);
    if (r != NVML_SUCCESS) {
        if (err && errlen)
            snprintf(err, errlen, "NVML: no device for CUDA ordinal %d: %s", cuda_ordinal,
                     nv.nvmlErrorString(r));
        rc = TW_EDEVICE;
        goto out_shutdown;
    }
    nvmlBAR1Memory_t info;
    r = nv.nvmlDeviceGetBAR1MemoryInfo(dev, &info);
    if (r != NVML_SUCCESS) {
        if (err && errlen)
            snprintf(err, errlen, "nvmlDeviceGetBAR1MemoryInfo: %s", nv.nvmlErrorString(r));
        rc = TW_EDEVICE;
        goto out_shutdown;
    }
    out->bar1_total = info.bar1Total;
    out->bar1_free = info.bar1Free;
    out->mig_enabled = -1;
    if (nv.nvmlDeviceGetMigMode) {
        unsigned int cur = 0, pending = 0;
        r = nv.nvmlDeviceGetMigMode(dev, &cur, &pending);
        if (r == NVML_SUCCESS)
            out->mig_enabled = cur != 0;
        else if (r == TW_NVML_ERROR_NOT_SUPPORTED)
            out->mig_enabled = 0; /* a GPU without MIG cannot have it on */
    }

out_shutdown:
    nv.nvmlShutdown();
    return rc;
}

int tw__nvml_bar1_total(int cuda_ordinal, uint64_t *bytes, char *err, size_t errlen)
{
    struct tw_nvml_gpu_info info;
    int rc = tw__nvml_gpu_info(cuda_ordinal, &info, err, errlen);
    if (rc == 0)
        *bytes = info.bar1_total;
    return rc;
}
