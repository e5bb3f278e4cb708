/*
 * Host memory whose lifetime tensorwire knows: buffers the library allocated
 * and buffers the application declared with tw_mem_register(). Only these
 * are kept registered after use (a malloc'd buffer can be freed and its
 * pages reused behind our back, and nothing tells us).
 *
 * Every unregistration bumps a process-wide generation and then calls the
 * subscribed invalidation hooks (one per registration cache) with the range,
 * after the range left the table. A cache that read the generation, still
 * unchanged, under its own lock before inserting a region therefore either
 * saw the range tracked with no unregistration since, or will receive the
 * hook afterwards.
 *
 * Lock order: subscriber lock -> (hook's own locks, e.g. a cache lock) ->
 * table lock (a leaf: never held while calling out).
 */
#ifndef TW_MEM_HOSTMEM_H
#define TW_MEM_HOSTMEM_H

#include <stddef.h>
#include <stdint.h>

/* If [addr, addr+len) lies inside one tracked buffer, return 1 and its
 * bounds; else 0. *gen gets the generation read with the table locked. */
int tw__hostmem_find(uintptr_t addr, size_t len, uintptr_t *base, size_t *blen, uint64_t *gen);

/* The current generation (incremented by every unregistration). */
uint64_t tw__hostmem_generation(void);

typedef void (*tw_hostmem_hook)(void *ctx, uintptr_t addr, size_t len);

/* Subscribe/unsubscribe an invalidation hook. The hook runs on the thread
 * that unregisters, with the subscriber lock held: it must not call
 * subscribe/unsubscribe. Returns 0 or -ENOMEM. */
int tw__hostmem_subscribe(tw_hostmem_hook hook, void *ctx);
void tw__hostmem_unsubscribe(tw_hostmem_hook hook, void *ctx);

/*
 * Library-owned host memory: page-aligned, zeroed, tracked from allocation
 * to free. tw__hostmem_free() invalidates every cached registration of the
 * buffer before the pages go back (regions still in use by a transfer stay
 * registered until released; the caller must not free memory with a
 * transfer in flight).
 */
int tw__hostmem_alloc(size_t len, void **out);
void tw__hostmem_free(void *p);

#endif
