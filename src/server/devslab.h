/*
 * Device memory for the store's small GPU-resident versions (under
 * TW_DEVSLAB_MAX bytes): blocks carved from chunks of about
 * TW_DEVSLAB_CHUNK bytes, so that a put of a new small tensor costs no
 * driver allocation (issue 11: cuMemAlloc + cuMemFree cost ~6.3 us per
 * 32 KiB block on the H200, a third of what a KV-cache block's put may
 * take at the target rate; docs/performance.md).
 *
 * - Sizes are rounded up to a class: multiples of 256 bytes up to 2 KiB,
 *   then eight classes per power of two (a block wastes less than 1/8 of
 *   its bytes). Blocks are TW_DEVSLAB_ALIGN-aligned (cuMemAlloc's
 *   guarantee is at least that).
 * - A class's chunks grow: its first two are TW_DEVSLAB_CHUNK, then each
 *   pair twice the size, up to TW_DEVSLAB_CHUNK_MAX, so a batch of
 *   thousands of new small tensors costs tens of driver allocations, not
 *   hundreds (cuMemAlloc of 2 MiB chunks was 9% of tensorwired's loop in
 *   a batch put of 40,960 new 32 KiB tensors on the H200). A larger chunk
 *   the device cannot give (out of memory, after idle chunks went back)
 *   is tried again at TW_DEVSLAB_CHUNK.
 * - A chunk holds blocks of one class. Each class keeps its chunks that
 *   have free blocks on a list; a block comes from the first of them (the
 *   one a block was last given back to), a new chunk only when none has
 *   one. A chunk's free blocks are a stack, each with the ticket it was
 *   given back with: the caller's mark of the device work that may still
 *   read the block (server/copy_tickets.h); the block is handed out with
 *   it and the caller waits for that work before writing.
 * - A chunk whose blocks are all free is "idle". Idle chunks beyond
 *   keep_max bytes go back to the driver as soon as they become idle; the
 *   others when unused for a whole trim period (tw__devslab_trim, the
 *   store's idle trim), or all at once when an allocation fails for want
 *   of memory (here, or the caller's: tw__devslab_trim(all)). Before any
 *   chunk goes back, ops->quiesce lets queued device work finish.
 * - A chunk with one block in use stays: a pattern that keeps one small
 *   tensor per chunk alive holds up to a chunk per tensor (the price of no
 *   per-tensor allocation; the host slab has the same trade).
 *
 * Ownership: the slab owns its chunks and gives them back through ops;
 * ops and ctx are the caller's and outlive it. No I/O beyond the ops; one
 * thread (the server's event loop), like the store.
 */
#ifndef TW_SERVER_DEVSLAB_H
#define TW_SERVER_DEVSLAB_H

#include <stddef.h>
#include <stdint.h>

#define TW_DEVSLAB_MAX ((size_t)1 << 20)        /* blocks serve lengths below this */
#define TW_DEVSLAB_CHUNK ((size_t)2 << 20)      /* bytes per chunk (at least 1 block) */
#define TW_DEVSLAB_CHUNK_MAX ((size_t)32 << 20) /* ... growing up to this */
#define TW_DEVSLAB_ALIGN ((size_t)256)
#define TW_DEVSLAB_CLASSES 80

/* Device memory. alloc returns 0 with *p set, -ENOMEM when the device is
 * out of memory, or another negative code (reason in err). quiesce returns
 * once no device work queued so far may still read a freed block. */
struct tw_devslab_ops {
    int (*alloc)(void *ctx, size_t len, void **p, char *err, size_t errlen);
    void (*free)(void *ctx, void *p);
    void (*quiesce)(void *ctx);
};

struct tw_devslab_chunk;

struct tw_devslab {
    const struct tw_devslab_ops *ops;
    void *ctx;
    uint64_t keep_max;                /* idle chunk bytes kept until a trim */
    struct tw_devslab_chunk **chunks; /* sorted by address */
    size_t nchunks, capchunks;
    struct tw_devslab_chunk *partial[TW_DEVSLAB_CLASSES]; /* chunks with a free block */
    uint64_t chunk_bytes;                                 /* all chunks */
    uint64_t free_bytes;                                  /* free blocks (their class sizes) */
    uint64_t idle_bytes;                                  /* idle chunks */
    uint64_t chunk_allocs;                                /* chunks allocated so far */
    uint32_t nclass[TW_DEVSLAB_CLASSES];                  /* chunks held per class */
};

/* The block size serving len (0 < len < TW_DEVSLAB_MAX) and its class
 * (0 .. TW_DEVSLAB_CLASSES - 1) in *cls when not NULL. */
size_t tw__devslab_block_size(size_t len, unsigned *cls);

/* An empty slab (no memory yet). */
void tw__devslab_init(struct tw_devslab *s, const struct tw_devslab_ops *ops, void *ctx,
                      uint64_t keep_max);

/* A block for len bytes (0 < len < TW_DEVSLAB_MAX) in *p, owned by the
 * caller until tw__devslab_put, with the ticket it was given back with in
 * *ticket (0 for a block never used). Returns 0, -ENOMEM when no chunk
 * could be had even after giving back every idle one, or the code of
 * ops->alloc. */
int tw__devslab_get(struct tw_devslab *s, size_t len, void **p, uint64_t *ticket, char *err,
                    size_t errlen);

/* Gives back a block of tw__devslab_get with the same len, with the
 * ticket of the work that may still read it. Returns 0, or TW_EINVAL when
 * p is not a block of this slab of that size (then nothing changed). */
int tw__devslab_put(struct tw_devslab *s, void *p, size_t len, uint64_t ticket);

/* Gives back to the driver the idle chunks unused since the previous call
 * (all: every idle chunk). Returns the bytes given back. */
uint64_t tw__devslab_trim(struct tw_devslab *s, int all);

/* Gives back every chunk, blocks in use or not, and empties the slab (the
 * device memory of blocks still in use is gone). */
void tw__devslab_destroy(struct tw_devslab *s);

#endif
