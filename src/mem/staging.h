/*
 * Staging: moving device memory (GPU) through pinned host buffers, chunk by
 * chunk, so that the device copies overlap the network.
 *
 * A pool is a bounded set of equal slots carved out of ONE host allocation
 * made at creation: library-tracked memory (hostmem.h) page-locked by the
 * memory kind. Being tracked, a registration cache keeps its registration,
 * so a data plane registers the pool once (tw__staging_pool_memory() gives
 * the region, each chunk its offset in it); destroying the pool invalidates
 * that registration.
 * It is shared by every transfer; slots are taken and given back under the
 * pool's mutex, so pipes on different threads may share a pool.
 *
 * A pipe is one transfer of `len` bytes of device memory, in chunks of the
 * pool's slot size, at most `depth` chunks in flight (depth >= 2: one chunk
 * is copied while the previous one is on the network).
 *
 *   TO_HOST (the device is the source; the consumer sends):
 *     tw__staging_acquire()  -> chunk k's bytes, ready to read (copied
 *                               device->host on the pipe's stream)
 *     tw__staging_release()  -> the consumer is done with them: slot free
 *   TO_DEVICE (the device is the destination; the producer receives):
 *     tw__staging_acquire()  -> room for chunk k, to fill
 *     tw__staging_release()  -> filled: queued host->device
 *   tw__staging_complete()   -> 1 once every byte reached its destination
 *
 * Chunks are handed out in order (k = 0, 1, ...), several may be held at
 * once (up to depth). TO_HOST chunks may be released in any order; TO_DEVICE
 * chunks must be released in order (the running CRC follows the bytes).
 * Nothing blocks except tw__staging_wait() and tw__staging_end(): a server's
 * event loop calls acquire/release/poll when its sockets are ready and polls
 * again later when acquire said "not yet"; a blocking client calls
 * tw__staging_wait() instead of spinning.
 *
 * With TW_STAGING_CRC the pipe keeps the CRC32C (proto.h) of the bytes in
 * tensor order, computed on each staged chunk as it passes (TO_HOST: when
 * acquired; TO_DEVICE: when released), never by a second pass.
 *
 * A failed copy (submitted or completed) puts the pipe in a failed state:
 * every later call returns that code, the reason is in tw__staging_error().
 * tw__staging_end() always waits for the copies still queued, gives every
 * slot back to the pool and frees the pipe, whether it completed or not.
 *
 * A pipe is used by one thread at a time. The pool must outlive its pipes.
 */
#ifndef TW_MEM_STAGING_H
#define TW_MEM_STAGING_H

#include <stddef.h>
#include <stdint.h>

#include "mem/memkind.h"

/* Measured on an H200 (docs/performance.md, bench/bench_staging.c): 4 MiB
 * chunks, 4 deep, reach the plain pinned copy's bandwidth within a few %. */
#define TW_STAGING_DEFAULT_CHUNK ((size_t)4 << 20)
#define TW_STAGING_DEFAULT_DEPTH 4u
#define TW_STAGING_DEFAULT_SLOTS 16u
#define TW_STAGING_MAX_DEPTH 64u

enum tw_staging_dir {
    TW_STAGING_TO_HOST = 0,   /* device -> pinned host -> consumer */
    TW_STAGING_TO_DEVICE = 1, /* producer -> pinned host -> device */
};

#define TW_STAGING_CRC 0x1u /* keep a running CRC32C of the bytes */

/* ---- chunk arithmetic (pure) ---- */

/* Number of chunks of `chunk` bytes (> 0) that cover len bytes: 0 for 0. */
uint64_t tw__staging_nchunks(uint64_t len, size_t chunk);
/* Offset and length of chunk k of a len-byte transfer. TW_EINVAL when
 * chunk is 0 or k >= tw__staging_nchunks(len, chunk). */
int tw__staging_chunk_span(uint64_t len, size_t chunk, uint64_t k, uint64_t *off, size_t *clen);

/* ---- pool ---- */

struct tw_staging_pool;

/*
 * Maps nslots * chunk bytes of tracked host memory and pins them through
 * ops (in the context of `device`; the memory serves every device). chunk must be a
 * non-zero multiple of 4 KiB, nslots >= 1. Returns 0 with *out, or a
 * negative code with reason in err (nothing allocated then).
 */
int tw__staging_pool_create(const struct tw_memkind_async_ops *ops, int device, size_t chunk,
                            unsigned nslots, struct tw_staging_pool **out, char *err,
                            size_t errlen);
/* Unpins and frees the memory (invalidating every cached registration of
 * it). Every pipe of the pool must have ended, and every registration of
 * the pool memory taken by a transfer released. */
void tw__staging_pool_destroy(struct tw_staging_pool *p);
/* The pool's one pinned region, for registering it once (valid until
 * destroy). */
void tw__staging_pool_memory(const struct tw_staging_pool *p, void **base, size_t *len);
size_t tw__staging_pool_chunk(const struct tw_staging_pool *p);
unsigned tw__staging_pool_slots(const struct tw_staging_pool *p);
/* Slots not held by any pipe right now. */
unsigned tw__staging_pool_free_slots(struct tw_staging_pool *p);

/* ---- pipe ---- */

struct tw_staging_pipe;

/* One chunk handed out by tw__staging_acquire: plain data, valid until the
 * chunk is released (the bytes) or the pipe ends. */
struct tw_staging_chunk {
    uint64_t index;     /* k */
    uint64_t offset;    /* of the chunk in the transfer */
    uint8_t *ptr;       /* len pinned bytes: read (TO_HOST) or fill (TO_DEVICE) */
    size_t len;         /* chunk bytes (the last chunk may be shorter) */
    size_t pool_offset; /* ptr - pool base, for a registration of the pool */
};

/*
 * Starts a transfer between device memory [dev, dev+len) described by attr
 * (from kind->query) and the pool. kind->async must be non-NULL. depth is
 * clamped to [2, TW_STAGING_MAX_DEPTH] and to the chunks needed; flags is
 * TW_STAGING_*. Creates the pipe's stream and events on attr->device.
 * Returns 0 with *out, or a negative code with the reason in err.
 */
int tw__staging_begin(struct tw_staging_pool *pool, enum tw_staging_dir dir,
                      const struct tw_memkind_ops *kind, const struct tw_mem_attr *attr,
                      uintptr_t dev, uint64_t len, unsigned depth, unsigned flags,
                      struct tw_staging_pipe **out, char *err, size_t errlen);

/*
 * Like tw__staging_begin, between device memory and the caller's host
 * buffer [host, host+len) (pinned for full speed; it must stay valid until
 * end) instead of pool slots: chunk k (chunk bytes, > 0) is staged at
 * host + k * chunk, so once the pipe completed the whole transfer lies in
 * host in order. Chunks are handed out and released as with a pool
 * (pool_offset is the chunk's offset in host); nothing waits for a slot.
 */
int tw__staging_begin_host(uint8_t *host, size_t chunk, enum tw_staging_dir dir,
                           const struct tw_memkind_ops *kind, const struct tw_mem_attr *attr,
                           uintptr_t dev, uint64_t len, unsigned depth, unsigned flags,
                           struct tw_staging_pipe **out, char *err, size_t errlen);

/* 1 with the next chunk in *c; 0 when it is not available yet (copy still
 * running, depth chunks held, or no free slot in the pool) or all chunks
 * were handed out; a negative code when the pipe failed. */
int tw__staging_acquire(struct tw_staging_pipe *p, struct tw_staging_chunk *c);
/* Gives back a chunk from acquire (see the header comment for what it
 * means in each direction). 0, TW_EINVAL for a chunk not held (or, TO_DEVICE,
 * out of order), or the pipe's failure. */
int tw__staging_release(struct tw_staging_pipe *p, const struct tw_staging_chunk *c);
/* Progress without handing anything out: notices finished copies, queues
 * new ones into free slots. 0 or the pipe's failure. Never blocks. */
int tw__staging_poll(struct tw_staging_pipe *p);
/*
 * Blocks until something a caller could act on changed: the oldest queued
 * copy finished, or (when the pipe waits for a pool slot) another pipe gave
 * one back, or at most timeout_ms passed. Returns at once when nothing is
 * queued and the pipe does not wait for a slot (the caller holds the work).
 * 0 or the pipe's failure.
 */
int tw__staging_wait(struct tw_staging_pipe *p, int timeout_ms);
/* 1 when every chunk is done (TO_HOST: released; TO_DEVICE: its copy to the
 * device finished), 0 when not yet, or the pipe's failure. */
int tw__staging_complete(struct tw_staging_pipe *p);
/* The CRC32C of the bytes staged so far, in tensor order (0 without
 * TW_STAGING_CRC). The transfer's CRC once complete. */
uint32_t tw__staging_crc(const struct tw_staging_pipe *p);
/* Why the pipe failed ("" when it did not). Valid until end. */
const char *tw__staging_error(const struct tw_staging_pipe *p);
/* Waits for copies still queued, returns the pipe's slots to the pool,
 * destroys its stream and events, frees it. NULL is a no-op. */
void tw__staging_end(struct tw_staging_pipe *p);

#endif
