/*
 * Host memory kind. The CPU can touch it directly, so the copy helpers are
 * memcpy; what matters for caching is whether its lifetime is tracked
 * (hostmem.h), which query() reports in attr->flags.
 */
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "mem/hostmem.h"
#include "mem/memkind.h"

static int host_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                      size_t errlen)
{
    *attr = (struct tw_mem_attr){.kind = TW_MEMKIND_HOST, .device = -1};
    if (tw__hostmem_find(addr, len, &attr->alloc_base, &attr->alloc_len, &attr->lifetime_gen))
        attr->flags |= TW_MEM_ATTR_TRACKED;
    return 0;
}

static size_t host_granularity(void)
{
    /* Relaxed atomic: every thread computes the same value. */
    static _Atomic size_t page;
    size_t p = atomic_load_explicit(&page, memory_order_relaxed);
    if (!p) {
        p = (size_t)sysconf(_SC_PAGESIZE);
        atomic_store_explicit(&page, p, memory_order_relaxed);
    }
    return p;
}

/* Page rounding never touches an unmapped page (a page holding any byte of
 * the buffer is mapped) so no clamp is needed, unlike GPU allocations. */
static void host_round(const struct tw_mem_attr *attr, uintptr_t addr, size_t len, uintptr_t *start,
                       uintptr_t *end)
{
    tw__memkind_round_out(addr, len, host_granularity(), start, end);
}

static int host_same_backing(const struct tw_mem_attr *cached, const struct tw_mem_attr *now)
{
    /* Tracked host memory cannot change under a cached region: the
     * unregistration that would allow it invalidates the region first. */
    return now->kind == TW_MEMKIND_HOST;
}

static int host_copy_to_host(void *dst, uintptr_t src, size_t len, const struct tw_mem_attr *attr,
                             char *err, size_t errlen)
{
    memcpy(dst, (const void *)src, len);
    return 0;
}

static int host_copy_from_host(uintptr_t dst, const void *src, size_t len,
                               const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    memcpy((void *)dst, src, len);
    return 0;
}

const struct tw_memkind_ops tw__memkind_host = {
    .kind = TW_MEMKIND_HOST,
    .name = "host",
    .check_on_hit = 0,
    .query = host_query,
    .granularity = host_granularity,
    .round = host_round,
    .same_backing = host_same_backing,
    .copy_to_host = host_copy_to_host,
    .copy_from_host = host_copy_from_host,
    .export_dmabuf = NULL,
};
