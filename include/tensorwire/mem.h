/*
 * tensorwire memory registration API.
 *
 * RDMA needs memory registered (pinned, translated for the NIC) before a
 * transfer. tensorwire keeps registrations in a cache and reuses them across
 * transfers (lazy unpinning), which is only safe when it knows how long the
 * memory lives. For GPU memory the CUDA driver tells it (every lookup checks
 * the allocation's buffer id). For host memory it cannot tell: a buffer from
 * malloc() can be freed and its address reused with other pages behind it.
 * So host memory is cached only when it is:
 *
 *   - allocated by tensorwire itself, or
 *   - declared with tw_mem_register() below.
 *
 * Any other host buffer still works; it is registered for one transfer and
 * deregistered when that transfer completes (slower for repeated transfers).
 *
 * Thread safety: both calls may be made from any thread, concurrently with
 * each other and with transfers.
 */
#ifndef TENSORWIRE_MEM_H
#define TENSORWIRE_MEM_H

#include <stddef.h>

#include "tensorwire/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Declare host memory [ptr, ptr+len) as owned by the application and valid
 * until tw_mem_unregister(ptr): from now on registrations of it may be kept
 * across transfers. Ownership does not move: tensorwire never frees or
 * writes the memory, it only remembers the range. flags must be 0 (reserved).
 *
 * Returns 0; TW_EINVAL for a NULL pointer, zero length, non-zero flags or a
 * range overlapping an already declared one; -EEXIST if ptr is already
 * declared; -ENOMEM.
 */
TW_EXTERN int tw_mem_register(void *ptr, size_t len, unsigned int flags);

/*
 * End the declaration made with tw_mem_register(ptr, ...). Every cached
 * registration overlapping the range is dropped: idle ones are deregistered
 * before this call returns; ones in use by an in-flight transfer stay
 * registered until that transfer completes, then are deregistered (never
 * reused). The call does not wait for transfers: the application must not
 * free or reuse the memory while a transfer on it is still in flight.
 *
 * Returns 0 or -ENOENT when ptr was not declared.
 */
TW_EXTERN int tw_mem_unregister(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
