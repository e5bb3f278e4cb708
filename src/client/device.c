/*
 * Device memory for callers of the client API (client.h,
 * TW_CLIENT_DEVICE_MEMORY): allocation on a named device, copies between
 * host and device memory, and the device sibling of tw_get_alloc. CUDA is
 * reached through the dlopen'ed driver (gpu/cuda.h) only.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client/client_internal.h"
#include "gpu/cuda.h"
#include "proto/device.h"

int tw__client_host_alloc(size_t len, void **out)
{
    /* 2 MiB or more: 2 MiB-aligned and advised for transparent huge
     * pages, as tensorwired keeps its tensors. On the 2-core VM a 256 MiB
     * inline put from 4 KiB pages ran at 0.58x the raw socket loop (both
     * of its ends in huge pages), from huge pages at 1.02-1.10x.
     * Advisory: a kernel without THP (or with it off) ignores it. */
    size_t align = len >= TW__CLIENT_HUGE ? TW__CLIENT_HUGE : TW__CLIENT_PAGE;
    if (posix_memalign(out, align, len ? len : 1) != 0)
        return -ENOMEM;
    if (align == TW__CLIENT_HUGE)
        (void)madvise(*out, len & ~(size_t)(TW__CLIENT_PAGE - 1), MADV_HUGEPAGE);
    return 0;
}

int tw_device_alloc(const char *device, size_t len, void **out)
{
    struct tw_device d;
    if (!device || !out || tw__device_parse_str(device, &d) != 0)
        return TW_EINVAL;
    *out = NULL;
    if (!len)
        len = 1;
    if (d.type == TW_DEVICE_CPU)
        return tw__client_host_alloc(len, out);
    const struct tw_cuda_api *cu;
    int rc = tw__cuda_enter(d.ordinal, &cu, NULL, 0);
    if (rc)
        return rc == TW_EINVAL ? TW_EDEVICE : rc;
    CUdeviceptr p = 0;
    CUresult r = cu->cuMemAlloc(&p, len);
    if (r != CUDA_SUCCESS)
        return tw__cuda_to_err(r);
    *out = (void *)(uintptr_t)p;
    return 0;
}

void tw_device_free(void *p)
{
    struct tw_mem_attr a;
    const struct tw_cuda_api *cu;
    if (!p)
        return;
    if (tw__memkind_cuda.query((uintptr_t)p, 1, &a, NULL, 0) == 0 &&
        tw__cuda_enter(a.device, &cu, NULL, 0) == 0) {
        cu->cuMemFree((CUdeviceptr)(uintptr_t)p);
        return;
    }
    free(p);
}

int tw_mem_copy(void *dst, const void *src, size_t len)
{
    const struct tw_memkind_ops *dk, *sk;
    struct tw_mem_attr da, sa;
    if (!len)
        return 0;
    if (!dst || !src)
        return TW_EINVAL;
    int rc = tw__memkind_classify(NULL, (uintptr_t)dst, len, TW_MEMKIND_AUTO, &dk, &da, NULL, 0);
    if (rc == 0)
        rc = tw__memkind_classify(NULL, (uintptr_t)src, len, TW_MEMKIND_AUTO, &sk, &sa, NULL, 0);
    if (rc)
        return rc;
    if (da.kind == TW_MEMKIND_CUDA && sa.kind == TW_MEMKIND_CUDA)
        return TW_EINVAL;
    if (da.kind == TW_MEMKIND_CUDA)
        return dk->copy_from_host((uintptr_t)dst, src, len, &da, NULL, 0);
    return sk->copy_to_host(dst, (uintptr_t)src, len, &sa, NULL, 0);
}

int tw_get_alloc_device(tw_client *c, const char *name, const char *device, void **out_buf,
                        size_t *out_len, struct tw_tensor_desc *out_desc)
{
    struct tw_tensor_desc d;
    int rc = TW_EINVAL;
    if (!out_buf)
        return TW_EINVAL;
    *out_buf = NULL;
    for (int attempt = 0; attempt < 3; attempt++) {
        void *buf = NULL;
        rc = tw_stat(c, name, &d);
        if (rc)
            return rc;
        if ((uint64_t)(size_t)d.byte_length != d.byte_length)
            return -ENOMEM;
        rc = tw_device_alloc(device, (size_t)d.byte_length, &buf);
        if (rc)
            return rc;
        rc = tw_get(c, name, buf, (size_t)d.byte_length, &d);
        if (rc == 0) {
            *out_buf = buf;
            if (out_len)
                *out_len = (size_t)d.byte_length;
            if (out_desc)
                *out_desc = d;
            return 0;
        }
        tw_device_free(buf);
        if (rc != -ENOBUFS)
            return rc;
    }
    return rc;
}
