/*
 * The query of a fake CUDA memory kind that claims one host arena as a
 * single allocation of cuda:0 (test_client_staging, test_client_gdr): the
 * client then treats buffers inside it as GPU memory.
 */
#ifndef TW_TEST_FAKE_ARENA_H
#define TW_TEST_FAKE_ARENA_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

#include "mem/memkind.h"
#include "tensorwire/error.h"

/* tw_memkind_ops.query over [base, base + arena_len). */
static inline int tw_test_arena_query(uintptr_t base, size_t arena_len, uintptr_t addr, size_t len,
                                      struct tw_mem_attr *attr, char *err, size_t errlen)
{
    if (addr < base || addr >= base + arena_len)
        return TW_EINVAL; /* not ours: host memory */
    if (len > base + arena_len - addr) {
        if (err && errlen)
            snprintf(err, errlen, "range leaves the fake allocation");
        return -ERANGE; /* memkind.h: starts in the allocation, leaves it */
    }
    *attr = (struct tw_mem_attr){.kind = TW_MEMKIND_CUDA,
                                 .flags = TW_MEM_ATTR_TRACKED,
                                 .device = 0,
                                 .buffer_id = 1,
                                 .alloc_base = base,
                                 .alloc_len = arena_len};
    return 0;
}

#endif
