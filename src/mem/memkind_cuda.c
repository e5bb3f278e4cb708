/*
 * CUDA device memory kind.
 *
 * A GPU virtual address can be freed and handed out again for another
 * allocation (even on another GPU), and nothing notifies us. So query() asks
 * the driver on every call for the allocation's buffer id, device and range
 * (one cuPointerGetAttributes), and same_backing() compares them: a cached
 * registration is reused only for the very allocation it was made for.
 *
 * The copy and export helpers make the owning device's primary context
 * current on the calling thread (they leave it current).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/cuda.h"
#include "mem/memkind.h"
#include "tensorwire/error.h"

static int cuda_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                      size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_get(&cu, err, errlen);
    if (rc)
        return rc;

    unsigned int memtype = 0;
    unsigned long long buffer_id = 0;
    int ordinal = -1;
    CUdeviceptr range_start = 0;
    size_t range_size = 0;
    CUpointer_attribute which[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,    CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    };
    void *data[] = {&memtype, &buffer_id, &ordinal, &range_start, &range_size};
    /* Unlike cuPointerGetAttribute, this returns CUDA_SUCCESS with zeroed
     * values for memory CUDA does not know, so memtype 0 means "not ours". */
    CUresult r = cu->cuPointerGetAttributes(5, which, data, (CUdeviceptr)addr);
    if (r != CUDA_SUCCESS) {
        char buf[128];
        if (err && errlen)
            snprintf(err, errlen, "cuPointerGetAttributes(%#lx): %s", (unsigned long)addr,
                     tw__cuda_strerror(r, buf, sizeof(buf)));
        return TW_EINVAL;
    }
    if (memtype != CU_MEMORYTYPE_DEVICE) {
        if (err && errlen)
            snprintf(err, errlen, "%#lx is not CUDA device memory (memory type %u)",
                     (unsigned long)addr, memtype);
        return TW_EINVAL;
    }
    if (addr < range_start || addr - range_start > range_size ||
        len > range_size - (addr - range_start)) {
        if (err && errlen)
            snprintf(err, errlen,
                     "range %#lx+%zu leaves its CUDA allocation %#llx+%zu (buffer id %llu)",
                     (unsigned long)addr, len, range_start, range_size, buffer_id);
        return -ERANGE;
    }
    *attr = (struct tw_mem_attr){
        .kind = TW_MEMKIND_CUDA,
        .flags = TW_MEM_ATTR_TRACKED,
        .device = ordinal,
        .buffer_id = buffer_id,
        .alloc_base = (uintptr_t)range_start,
        .alloc_len = range_size,
    };
    return 0;
}

static size_t cuda_granularity(void)
{
    return TW_CUDA_GPU_PAGE;
}

/* GPU BAR mappings are made in 64 KiB pages, and two buffers in one page
 * share the mapping, so regions are rounded out to 64 KiB; but a dma-buf
 * export (and a peer-memory registration) must stay inside one allocation,
 * so the rounded range is clamped to it. */
static void cuda_round(const struct tw_mem_attr *attr, uintptr_t addr, size_t len, uintptr_t *start,
                       uintptr_t *end)
{
    tw__memkind_round_out(addr, len, TW_CUDA_GPU_PAGE, start, end);
    if (attr->alloc_len) {
        uintptr_t lo = attr->alloc_base, hi = attr->alloc_base + attr->alloc_len;
        if (*start < lo)
            *start = lo;
        if (*end > hi)
            *end = hi;
    }
}

static int cuda_same_backing(const struct tw_mem_attr *cached, const struct tw_mem_attr *now)
{
    return now->kind == TW_MEMKIND_CUDA && cached->buffer_id == now->buffer_id &&
           cached->device == now->device;
}

static int cuda_copy_to_host(void *dst, uintptr_t src, size_t len, const struct tw_mem_attr *attr,
                             char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(attr->device, &cu, err, errlen);
    if (rc == 0)
        rc = tw__cuda_test_copy_hook("cuMemcpyDtoH", err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuMemcpyDtoH(dst, (CUdeviceptr)src, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemcpyDtoH");
    return 0;
}

static int cuda_copy_from_host(uintptr_t dst, const void *src, size_t len,
                               const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(attr->device, &cu, err, errlen);
    if (rc == 0)
        rc = tw__cuda_test_copy_hook("cuMemcpyHtoD", err, errlen);
    if (rc)
        return rc;
    CUresult r = cu->cuMemcpyHtoD((CUdeviceptr)dst, src, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemcpyHtoD");
    return 0;
}

static int cuda_export_dmabuf(uintptr_t addr, size_t len, const struct tw_mem_attr *attr, int *fd,
                              uint64_t *offset, char *err, size_t errlen)
{
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(attr->device, &cu, err, errlen);
    if (rc)
        return rc;
    int out = -1;
    CUresult r = cu->cuMemGetHandleForAddressRange(&out, (CUdeviceptr)addr, len,
                                                   CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS)
        return tw__cuda_fail(r, err, errlen, "cuMemGetHandleForAddressRange(%#lx, %zu, DMA_BUF_FD)",
                             (unsigned long)addr, len);
    *fd = out;
    *offset = 0;
    return 0;
}

const struct tw_memkind_ops tw__memkind_cuda = {
    .kind = TW_MEMKIND_CUDA,
    .name = "cuda",
    .check_on_hit = 1,
    .query = cuda_query,
    .granularity = cuda_granularity,
    .round = cuda_round,
    .same_backing = cuda_same_backing,
    .copy_to_host = cuda_copy_to_host,
    .copy_from_host = cuda_copy_from_host,
    .export_dmabuf = cuda_export_dmabuf,
    .async = &tw__memkind_cuda_async,
};
