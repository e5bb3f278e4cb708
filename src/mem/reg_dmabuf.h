/*
 * Registrar that exports each region as a dma-buf file descriptor through
 * its memory kind (CUDA: cuMemGetHandleForAddressRange). It is the first
 * half of a GPUDirect registration (the NIC side, fi_mr_regattr with
 * FI_MR_DMABUF or ibv_reg_dmabuf_mr, consumes the fd), and on its own it
 * measures and tests what the cache saves on GPU memory.
 *
 * Handle: struct tw_dmabuf_handle *, owned by the registrar; the fd is
 * closed on deregistration. ctx may be NULL or a struct tw_dmabuf_registrar
 * to count live exports.
 */
#ifndef TW_MEM_REG_DMABUF_H
#define TW_MEM_REG_DMABUF_H

#include <stdatomic.h>
#include <stdint.h>

#include "mem/regcache.h"

struct tw_dmabuf_handle {
    int fd;
    uint64_t offset; /* of addr inside the dma-buf */
    uintptr_t addr;
    size_t len;
};

struct tw_dmabuf_registrar {
    _Atomic long live;    /* exports not yet closed */
    _Atomic long exports; /* total exports made */
};

extern const struct tw_registrar_ops tw__dmabuf_registrar_ops;

#endif
