/*
 * Storage for the store's small host tensors (under TW_SLAB_MAX bytes): page
 * multiples carved from large arenas, so that a put of a new small tensor
 * costs no system call and no page fault per tensor (issue 10: a KV-cache
 * batch of 40,960 x 32 KiB new names ran at 0.13-0.31x of one tensor of the
 * same bytes, the store's per-tensor allocation and first touch dominating).
 *
 * - Arenas are TW_SLAB_ARENA bytes of anonymous memory, aligned to 2 MiB and
 *   advised MADV_HUGEPAGE; pages are faulted in ahead of the bump pointer
 *   in 2 MiB steps (MADV_POPULATE_WRITE, or a touch per page on kernels
 *   without it), so the fault cost is paid per huge page, not per 4 KiB
 *   page of each tensor.
 * - Faulting ahead runs on a helper thread (the slab's faulter), so the
 *   event loop does not clear pages itself: a fresh server's first batch
 *   of small puts spent a third of its loop in the kernel's clear_page
 *   (docs/performance.md, "Small-tensor memory faulted ahead on a helper
 *   thread"). The faulter keeps the pages from the bump pointer on faulted
 *   in, as far ahead as the slab has bytes in use, at most
 *   TW_SLAB_FAULT_AHEAD_MAX (a slab holding little stays small); the loop
 *   faults only what the faulter did not reach yet (the block it hands out
 *   through the end of its huge page). It uses MADV_POPULATE_WRITE only
 *   (which never writes the memory: a block may already hold a put's
 *   bytes when the faulter gets to it); where that call is missing or
 *   fails, or the thread cannot start, the loop faults one 2 MiB step
 *   ahead itself, as before. Page-locked slabs (below) have no faulter:
 *   pinning faults the whole arena. After the arena, the faulter takes
 *   ranges outside the slab that the store hands it (a large tensor's
 *   fresh mapping, about to be received into from its start:
 *   tw__slab_fault_range), so their first put does not clear pages in
 *   the thread that receives.
 * - Freed blocks go to a queue per size (in pages) and are reused exactly by
 *   the next allocation of that size, oldest first: an overwrite of a batch,
 *   or a new batch of the same shapes, reuses faulted memory, and blocks
 *   freed in address order (the previous versions of a batch, committed
 *   in order) are handed out in that order, so the new versions continue
 *   each other in memory as the old ones did (a stack handed each group of
 *   blocks freed together out backwards; the RDMA planes move neighbours
 *   with one operation: docs/protocol.md §10 "Shared keys"). Freed blocks beyond keep_max
 *   bytes are handed back to the kernel with MADV_DONTNEED (the addresses
 *   stay reserved for the same size; a reuse faults them again), so an idle
 *   server holds at most keep_max bytes of free small-tensor memory, and
 *   tw__slab_trim (the store's idle trim) gives back the free blocks that
 *   stayed unused for a whole trim period.
 * - Arenas are unmapped by tw__slab_destroy, or, when blocks are still in
 *   use then, by the tw__slab_free of the last one.
 *
 * Memory is not tracked by tw__hostmem: RDMA registers these blocks per use,
 * as it did the posix_memalign'd ones before. Old contents of a reused block
 * are visible until the caller overwrites them (the store fills every byte
 * of a version before publishing it and clears the tail of the last page).
 *
 * Single-threaded (the daemon's event loop), like the store; the faulter
 * thread only faults pages in (an arena's faulted mark, atomic, and its
 * requests under its own lock) and is joined by tw__slab_destroy.
 */
#ifndef TW_SERVER_SLAB_H
#define TW_SERVER_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define TW_SLAB_MAX (1u << 20)              /* blocks are smaller than this (tw__slab_init) */
#define TW_SLAB_ARENA (64u << 20)           /* bytes per arena */
#define TW_SLAB_FAULT_AHEAD_MAX (32u << 20) /* the faulter's lead on the bump pointer, at most */

struct tw_slab_arena;
struct tw_slab_faulter;

/* Free blocks of one size: a queue of addresses, free[head, nfree). */
struct tw_slab_class {
    void **free;
    size_t head, nfree, cap;
};

struct tw_slab {
    size_t page;
    size_t max_block; /* blocks are smaller than this */
    size_t nclasses;  /* sizes 1..nclasses pages */
    struct tw_slab_class *classes;
    struct tw_slab_arena *arenas; /* newest first; bump allocation in the first */
    uint64_t keep_max;            /* free bytes kept faulted in */
    uint64_t kept_bytes;          /* free bytes currently faulted in */
    uint64_t live_bytes;          /* bytes of blocks handed out */
    uint64_t arena_bytes;         /* bytes of all arenas */
    int dead;                     /* destroyed with blocks in use */
    /* Page-locked mode (tw__slab_set_pinned): every arena is pinned when it
     * is mapped and unpinned before it is unmapped; free blocks are never
     * given back with MADV_DONTNEED (a pinned page must stay the one the
     * device DMAs to), so keep_max and tw__slab_trim do not apply, and at
     * most max_arena_bytes are mapped (an allocation beyond returns NULL:
     * the caller falls back to pageable memory); a pin that fails stops
     * the growth for good. At that cap an arena whose blocks are all free
     * again (the host copies of a batch of other sizes) is taken off the
     * free lists and carved afresh (tw__slab_alloc), looked for again once
     * TW_SLAB_ARENA / 16 bytes were freed since a look that found none
     * (freed_since_look). */
    int (*pin)(void *ctx, void *p, size_t len);
    void (*unpin)(void *ctx, void *p);
    void *pin_ctx;
    uint64_t max_arena_bytes;
    uint64_t freed_since_look;
    /* The faulter (slab.c), started with the first arena or range of a
     * slab that is not page-locked; NULL before, and for good
     * (faulter_off) once it could not start, its MADV_POPULATE_WRITE
     * failed, or the slab was destroyed. asked_arena and
     * asked_upto: what it was last asked to fault (the loop's copy, so an
     * allocation takes its lock only when that moves). */
    struct tw_slab_faulter *faulter;
    int faulter_off;
    struct tw_slab_arena *asked_arena;
    size_t asked_upto;
};

/* Prepares an empty slab (no memory yet) for blocks under TW_SLAB_MAX.
 * Returns 0 or -ENOMEM. */
int tw__slab_init(struct tw_slab *sl, uint64_t keep_max);
/* The same for blocks under max_block (a multiple of the page size, at
 * most TW_SLAB_ARENA / 8: an arena's unused tail stays under an eighth).
 * Returns 0, -EINVAL (any other max_block) or -ENOMEM. */
int tw__slab_init_sized(struct tw_slab *sl, uint64_t keep_max, size_t max_block);
/* Switches an empty slab (no arena yet) to page-locked mode, see struct
 * tw_slab. pin returns 0 or a negative code; ctx is passed to both. */
void tw__slab_set_pinned(struct tw_slab *sl, int (*pin)(void *ctx, void *p, size_t len),
                         void (*unpin)(void *ctx, void *p), void *ctx, uint64_t max_arena_bytes);
/* A block of len bytes (a multiple of the page size, 0 < len < max_block),
 * page aligned, owned by the caller until tw__slab_free. NULL when out of
 * memory (page-locked mode: at max_arena_bytes with no wholly free arena). */
void *tw__slab_alloc(struct tw_slab *sl, size_t len);
/* Queues [p, p + len), memory outside the slab that is about to be
 * written from its start (a large tensor's fresh mapping), for the
 * faulter, after the slab's own arena: faulted in ahead of the writer
 * with MADV_POPULATE_WRITE, 2 MiB at a time. Advisory: without a faulter
 * (page-locked slab, no thread, MADV_POPULATE_WRITE refused) or with
 * FAULT_RANGES (16) queued already, nothing happens and the pages fault
 * on first use. The caller must call tw__slab_fault_forget(sl, p) before
 * the memory is unmapped or handed to anyone else. */
void tw__slab_fault_range(struct tw_slab *sl, void *p, size_t len);
/* Takes p's range off the faulter's queue, waiting for a step on it that
 * is under way (at most one 2 MiB MADV_POPULATE_WRITE). No-op for a range
 * never queued, already done, or without a faulter. */
void tw__slab_fault_forget(struct tw_slab *sl, void *p);
/* Gives back a block from tw__slab_alloc with the same len. */
void tw__slab_free(struct tw_slab *sl, void *p, size_t len);
/* Gives back (MADV_DONTNEED) the free blocks that were already free and
 * faulted in at the previous call, and marks the others: called
 * periodically, a free block stays faulted in 1 to 2 periods unused.
 * Returns the bytes given back. */
uint64_t tw__slab_trim(struct tw_slab *sl);
/* Stops the faulter (joined), then unmaps the arenas now, or with the last
 * tw__slab_free when blocks are still in use (sl must then stay valid
 * until that call). */
void tw__slab_destroy(struct tw_slab *sl);

#endif
