/*
 * Staging planes (server side): the tensor version lives in GPU memory
 * (tw__path_decide said TW_PATH_STAGING_HOST), so the transfer runs on the
 * inner plane (inline or RDMA, unchanged) over a host copy of the version,
 * and the bytes cross between that copy and the GPU with the store's device
 * memory ops (CUDA in the daemon, a host double in tests):
 *
 *   get: start copies the GPU version into a new host version and hands
 *        that to the inner plane (x->t), keeping the GPU one in x->dev_t;
 *   put: start gives the inner plane a host version to fill; commit (all
 *        bytes in, CRC checked) copies it into the GPU version, which is
 *        what gets published (a small one's copy queued with others'
 *        when a read or the plane's completions finish several); an RDMA
 *        pull put (the server reads) of more than one chunk is pipelined
 *        instead (below: no host version, the reads and the copies to the
 *        GPU overlap chunk by chunk).
 *
 * An inline get copies frame by frame, just before each frame is queued
 * (the frames queued before it drain to the socket meanwhile). An RDMA get
 * to a client that announced bit 5 copies in parts that the client reads
 * as they land (RDMA_AVAILABLE, "progressive RDMA get" below); to one that
 * did not, it copies the whole version before RDMA_REGISTER goes out,
 * because in a pull the client reads whenever it likes (the client
 * overlaps its own copies to the GPU with its reads either way:
 * dp_staging.c). A host copy from the pinned slab (under 8 MiB: a batch's
 * blocks) is copied on the device's stream and its RDMA_REGISTER queued
 * at once, marked with the copy's ticket: conn_flush sends it when the
 * copy is done (as it does an inline DATA frame a copy fills), so the
 * copies of many small gets overlap each other and the frames before
 * them; before, each took a synchronous copy on the event loop.
 * Every copy runs at the pinned rate: host copies under 8 MiB come from
 * the store's page-locked slab (tw__store_alloc_pinned: pinned once per
 * 64 MiB arena, their copies queued on the device's stream), larger ones
 * are page-locked through a registration
 * cache (srv->stage_pins, mem/regcache.h, with a registrar that pins
 * through the store's devmem ops), so a repeated transfer of one size finds
 * its recycled host memory pinned already (the store keeps freed buffers
 * for reuse, still tracked, so the cache keeps the pin); the pin goes when
 * the memory is freed (hostmem invalidation) or evicted (LRU, at most
 * STAGE_PIN_MAX bytes). A pin that fails only makes the copy slower.
 *
 * The host copy is a real store version (tw__store_alloc with device tag
 * cpu), so it counts against the CPU's capacity while it lives and is
 * freed with its last reference (an inline DATA frame still queued holds
 * one).
 */
#include <stdio.h>
#include <string.h>

#include <errno.h>
#include <stdlib.h>

#include "mem/regcache.h"
#include "mem/staging.h"
#include "server/log.h"
#include "server/server.h"
#include "server/xfer.h"

/* Host copies smaller than this are not pinned (slab blocks: pinning one
 * costs more than copying it); at most STAGE_PIN_MAX bytes stay pinned. */
#define STAGE_PIN_MIN ((size_t)1 << 20)
#define STAGE_PIN_MAX ((size_t)8 << 30)

/* The registrar of srv->stage_pins: pins with the store's devmem ops in the
 * context of the first served GPU (pins are portable: every GPU copies at
 * the pinned rate). */
static int pin_reg(void *ctx, const struct tw_reg_request *req, void **handle, char *err,
                   size_t errlen)
{
    struct tw_srv *srv = ctx;
    const struct tw_store_devmem_ops *m = tw__store_devmem(&srv->store);
    int rc = m->pin(srv->store.gpu[0].ordinal, (void *)req->addr, req->len, err, errlen);
    if (rc == 0)
        *handle = (void *)req->addr;
    return rc;
}

static void pin_dereg(void *ctx, void *handle)
{
    struct tw_srv *srv = ctx;
    tw__store_devmem(&srv->store)->unpin(srv->store.gpu[0].ordinal, handle);
}

static const struct tw_registrar_ops pin_registrar = {
    .name = "staging pins",
    .reg = pin_reg,
    .dereg = pin_dereg,
};

/* Makes sure host version t's memory is pinned (kept so in the cache; no
 * reference is held: an eviction only makes a later copy slower). Returns
 * whether it is pinned now. */
static int pin_host_copy(struct tw_srv *srv, const struct tw_tensor *t)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(&srv->store);
    if (!m->pin || !m->unpin || !t->mmapped || t->alloc_len < STAGE_PIN_MIN ||
        srv->store.ngpus == 0)
        return 0;
    if (!srv->stage_pins) {
        struct tw_regcache_config cfg = {.max_entries = 64, .max_host_bytes = STAGE_PIN_MAX};
        if (tw__regcache_create(&cfg, &pin_registrar, srv, &srv->stage_pins) != 0) {
            srv->stage_pins = NULL;
            return 0;
        }
    }
    struct tw_regcache_region *r = NULL;
    char err[200];
    if (tw__regcache_lookup(srv->stage_pins, t->data, t->alloc_len, TW_ACCESS_LOCAL_READ,
                            TW_MEMKIND_HOST, &r, err, sizeof(err)) == 0) {
        tw__regcache_release(srv->stage_pins, r);
        return 1;
    }
    TW_LOGD("staging: pinning %zu bytes of host memory failed (copies run unpinned): %s",
            t->alloc_len, err);
    return 0;
}

void tw__srv_stage_destroy(struct tw_srv *srv)
{
    /* Every pipe ended with its connection (abandoned ones keep slots). */
    if (srv->stage_pool && srv->stage_reserved == 0) {
        tw__staging_pool_destroy(srv->stage_pool);
        srv->stage_pool = NULL;
    }
    if (srv->stage_pins && tw__regcache_destroy(srv->stage_pins) == 0)
        srv->stage_pins = NULL;
}

int tw__srv_stage_fence(struct tw_srv_conn *c, char *err, size_t errlen)
{
    struct tw_store *st = &c->srv->store;
    const struct tw_store_devmem_ops *m = tw__store_devmem(st);
    int rc = 0;
    for (unsigned i = 0; c->dev_fence && i < st->ngpus; i++) {
        if (!(c->dev_fence & ((uint64_t)1 << i)))
            continue;
        c->dev_fence &= ~((uint64_t)1 << i);
        c->srv->stats.staged_copy_waits++;
        uint64_t t0 = tw__now_ns();
        int r = m->fence(st->gpu[i].ordinal, err, errlen);
        c->srv->stats.staged_copy_wait_ns += tw__now_ns() - t0;
        if (r && rc == 0)
            rc = r;
    }
    c->dev_fence = 0;
    return rc;
}

/* Whether the copy with `ticket` on store GPU `gpu` is done: 1, 0 (not
 * yet; only without wait), or a negative code. A wait that blocks is
 * counted in STATS staged_copy_waits / staged_copy_wait_ns. */
static int ticket_done(struct tw_srv *srv, int gpu, uint64_t ticket, int wait, char *err,
                       size_t errlen)
{
    struct tw_store *st = &srv->store;
    const struct tw_store_devmem_ops *m = tw__store_devmem(st);
    int ordinal = st->gpu[gpu].ordinal;
    int r = m->copied(ordinal, ticket, 0, err, errlen);
    if (r == 0 && wait) {
        srv->stats.staged_copy_waits++;
        uint64_t t0 = tw__now_ns();
        r = m->copied(ordinal, ticket, 1, err, errlen);
        srv->stats.staged_copy_wait_ns += tw__now_ns() - t0;
    }
    return r;
}

int tw__srv_stage_ready(struct tw_srv_conn *c, struct tw_out_chunk *ch, char *err, size_t errlen)
{
    int r = ticket_done(c->srv, ch->dev_gpu, ch->dev_ticket, 0, err, errlen);
    if (r == 1)
        ch->dev_gpu = -1;
    return r;
}

void tw__srv_stage_stats(struct tw_srv *srv, uint64_t *pinned_bytes, uint64_t *pins_in_use)
{
    *pinned_bytes = *pins_in_use = 0;
    if (!srv->stage_pins)
        return;
    struct tw_regcache_stats st;
    tw__regcache_stats(srv->stage_pins, &st);
    *pinned_bytes = st.bytes;
    *pins_in_use = st.in_use;
}

struct staged_dp {
    struct tw_dp_ops ops; /* first: x->ops points here */
    const struct tw_dp_ops *inner;
};

static const struct tw_dp_ops *inner_of(const struct tw_xfer *x)
{
    return ((const struct staged_dp *)x->ops)->inner;
}

static int gpu_ordinal(const struct tw_xfer *x)
{
    return x->t->store->gpu[x->t->gpu].ordinal;
}

/* Puts a new host version shaped like the GPU version x->t in its place;
 * *pinned says whether its memory is page-locked (NULL: not wanted). */
static int stage_host_version(struct tw_xfer *x, int *pinned)
{
    struct tw_tensor *dev = x->t, *host = NULL;
    struct tw_descriptor d;
    if (dev->gpu < 0)
        return TW_EINVAL; /* staging a host version: the path was decided wrong */
    tw__tensor_describe(dev, 1, &d);
    d.device_tag.ptr = (const uint8_t *)"cpu";
    d.device_tag.len = 3;
    int rc = tw__store_alloc_pinned(dev->store, &d, &host);
    if (rc)
        return rc;
    int p = host->pinned || pin_host_copy(x->conn->srv, host); /* the slab's, or cached */
    if (pinned)
        *pinned = p;
    x->dev_t = dev; /* x's reference moves along */
    x->t = host;    /* and x holds the host version's only reference */
    return 0;
}

/* ---- pipelined pull put into GPU memory ----
 *
 * The server is the destination and reads (pull, the default put on tcp):
 * it reads the client's source chunk by chunk into slots of a pinned pool
 * (registered through the plane's cache) with at most PIPE_READS reads in
 * flight, and queues each chunk's copy into the GPU version as soon as its
 * read completed (in order: the CRC follows the bytes), so the copy of
 * chunk k runs while chunk k+1 is read. No host version of the tensor is
 * made. Once every read completed: RDMA_DONE, the last copies are waited
 * for (at most PIPE_DEPTH chunks, under a millisecond), the CRC folded in
 * per chunk is the transfer's, and the GPU version is committed.
 *
 * A pipe reserves PIPE_DEPTH pool slots when it starts (a put that finds
 * none left is staged the whole-copy way), so its chunks never wait for
 * another pipe's slots: the only wait is a queued copy, which the loop
 * blocks on briefly when no read is in flight. A request that ends with
 * reads in flight leaves them to finish (their completions come back
 * through tw__srv_staged_on_completion) while the state keeps its own
 * reference to the GPU version; the last completion frees it. A read that
 * ended with operations still in the provider (buffer_busy) makes the
 * state abandon its slots and its registration for good (counted in
 * srv->stage_leaked): they may still be written.
 */
#define PIPE_CHUNK ((size_t)8 << 20)
#define PIPE_SLOTS 16u
#define PIPE_DEPTH 4u
#define PIPE_READS 2u

struct put_pipe;

struct put_read {
    struct put_pipe *pp;
    struct tw_staging_chunk ch;
    int live; /* chunk held: read in flight (!done) or waiting its turn */
    int done; /* its read completed */
};

struct put_pipe {
    struct tw_srv *srv;
    struct tw_xfer *x;     /* NULL once the request ended (orphan) */
    struct tw_tensor *dev; /* the GPU version: own reference */
    int ordinal;
    struct tw_staging_pipe *pipe;
    struct tw_fabric_mrc *mr; /* the pool on the connection's rail */
    struct tw_fabric_rkey remote;
    struct put_read rd[PIPE_READS];
    unsigned nflight;   /* reads submitted, not completed */
    uint64_t submitted; /* bytes of chunks whose read was submitted */
    uint64_t next_release;
    int busy;     /* a read completed with buffer_busy */
    int finished; /* RDMA_DONE sent, or failing, or failed: no more reads */
    /* A failure waiting for the reads in flight: the ERROR goes only once
     * they completed, because the client revokes its source on ERROR
     * (docs/protocol.md §10) and a read of a revoked region may never
     * complete (shm). */
    int failing;
    uint32_t fail_code;
    char fail_why[400];
    /* TW_TEST_REORDER_READS (tests only): a completion held back. */
    int held;
    struct tw_fabric_completion held_fc;
};

static void put_pipe_free(struct put_pipe *pp)
{
    struct tw_srv *srv = pp->srv;
    if (pp->busy) {
        /* The provider may still write the pool slots: never reuse them. */
        srv->stage_leaked++;
        TW_LOGW("staged put of '%s': reads still in the provider after the request ended; "
                "their %u pool slots are abandoned",
                pp->dev->name, PIPE_DEPTH);
        tw__tensor_unref(pp->dev);
        return; /* pp, its pipe and registration stay (leaked on purpose) */
    }
    tw__staging_end(pp->pipe); /* waits for queued copies, gives the slots back */
    tw__fabric_mrcache_release(srv->mrc, pp->mr);
    srv->stage_reserved -= PIPE_DEPTH;
    tw__tensor_unref(pp->dev);
    free(pp);
}

/* Whether put x can be pipelined; reserves the pool slots when so. */
static int put_pipe_start(struct tw_xfer *x)
{
    struct tw_srv *srv = x->conn->srv;
    if (x->dir != TW_XFER_PUT || inner_of(x) != &tw__dp_rdma_ops || x->path.mode != TW_PATH_PULL ||
        !x->t->byte_length || tw__store_devmem(x->t->store) != &tw__store_devmem_cuda || !srv->mrc)
        return 0;
    /* One chunk or less: nothing to overlap, and a pipe costs a stream
     * pass, a pool registration and 4 of 16 pool slots (so at most four
     * such puts ran at once; the rest took the whole-copy way anyway).
     * The whole-copy way reads into a host version from the pinned slab
     * and queues its copy with others' (staged_commit): on the H200 32
     * KiB GPU to GPU puts by staged RDMA had run at 0.39-0.47x inline
     * with 16-64 in flight (docs/performance.md). */
    if (x->t->byte_length <= PIPE_CHUNK)
        return 0;
    int ordinal = gpu_ordinal(x);
    if (!srv->stage_pool) {
        char err[200];
        if (tw__staging_pool_create(&tw__memkind_cuda_async, ordinal, PIPE_CHUNK, PIPE_SLOTS,
                                    &srv->stage_pool, err, sizeof(err)) != 0) {
            srv->stage_pool = NULL;
            TW_LOGD("staging: no pool for pipelined puts: %s", err);
            return 0;
        }
    }
    if (srv->stage_reserved + PIPE_DEPTH > PIPE_SLOTS)
        return 0;
    struct put_pipe *pp = calloc(1, sizeof(*pp));
    if (!pp)
        return 0;
    pp->srv = srv;
    pp->x = x;
    pp->dev = x->t;
    tw__tensor_ref(pp->dev);
    pp->ordinal = ordinal;
    for (unsigned i = 0; i < PIPE_READS; i++)
        pp->rd[i].pp = pp;
    srv->stage_reserved += PIPE_DEPTH;
    x->stage = pp;
    return 1;
}

/* Ends put x with ERROR(code); its state finishes when its reads have. */
static void put_pipe_fail(struct put_pipe *pp, uint32_t code, const char *what, const char *detail)
{
    struct tw_xfer *x = pp->x;
    struct tw_srv_conn *c = x->conn;
    uint64_t id = x->id;
    char name[80], why[400];
    snprintf(name, sizeof(name), "%.64s", x->t->name);
    /* what and detail may live in pp, which the destroy below can free. */
    snprintf(why, sizeof(why), "%s%s%.300s", what, detail && *detail ? ": " : "",
             detail ? detail : "");
    pp->finished = 1;
    x->failed = 1;
    tw__xfer_destroy(x); /* -> staged_release: orphan or freed */
    tw__conn_send_error(c, id, code, "rdma put of '%s': %s", name, why);
    tw__conn_maybe_finish(c);
}

/* Like put_pipe_fail, once no read is in flight any more (now, or at the
 * last read's completion). */
static void put_pipe_fail_later(struct put_pipe *pp, uint32_t code, const char *what,
                                const char *detail)
{
    if (pp->nflight == 0) {
        put_pipe_fail(pp, code, what, detail);
        return;
    }
    pp->finished = 1;
    pp->failing = 1;
    pp->fail_code = code;
    snprintf(pp->fail_why, sizeof(pp->fail_why), "%s%s%.300s", what, detail && *detail ? ": " : "",
             detail ? detail : "");
}

static void put_pipe_copy_failed(struct put_pipe *pp)
{
    char what[64];
    pp->srv->stats.staged_failed++;
    snprintf(what, sizeof(what), "copying it to cuda:%d failed", pp->ordinal);
    TW_LOGW("put of '%s': %s: %s", pp->dev->name, what, tw__staging_error(pp->pipe));
    put_pipe_fail_later(pp, TW_WIRE_INTERNAL, what, tw__staging_error(pp->pipe));
}

/* Every read completed and every chunk released: the bytes are in the GPU
 * once the last copies finish. */
static void put_pipe_all_read(struct put_pipe *pp)
{
    struct tw_xfer *x = pp->x;
    struct tw_msg m;
    int rc;
    pp->finished = 1;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_RDMA_DONE;
    m.hdr.request_id = x->id;
    m.u.rdma_done.bytes = x->t->byte_length;
    if (tw__conn_send(x->conn, &m) < 0)
        return;
    while ((rc = tw__staging_complete(pp->pipe)) == 0)
        rc = tw__staging_wait(pp->pipe, 1000);
    if (rc < 0) {
        put_pipe_copy_failed(pp);
        return;
    }
    x->crc = tw__staging_crc(pp->pipe);
    x->done = x->t->byte_length;
    tw__xfer_put_complete(x);
}

/* A read record free for the next chunk, or NULL. Not merely "fewer than
 * PIPE_READS in flight": a read that completed before an earlier chunk's
 * keeps its record (and its chunk) until its turn to be released. */
static struct put_read *put_pipe_free_read(struct put_pipe *pp)
{
    for (unsigned i = 0; i < PIPE_READS; i++)
        if (!pp->rd[i].live)
            return &pp->rd[i];
    return NULL;
}

/* Submits reads while slots and the read window allow. */
static void put_pipe_pump(struct put_pipe *pp)
{
    struct tw_xfer *x = pp->x;
    struct tw_srv_conn *c = x->conn;
    struct tw_srv *srv = pp->srv;
    uint64_t len = x->t->byte_length;
    struct put_read *rd;
    int waits = 0;
    while (!pp->finished && pp->submitted < len && (rd = put_pipe_free_read(pp)) != NULL) {
        struct tw_staging_chunk ch;
        int got = tw__staging_acquire(pp->pipe, &ch);
        if (got == 0 && pp->nflight == 0) {
            /* Only a queued copy holds the slot back (the slots are
             * reserved): wait for it, briefly. Never spin: a wait that
             * keeps finding nothing means the pipe lost its slots. */
            if (++waits > 8) {
                put_pipe_fail(pp, TW_WIRE_INTERNAL, "staging pipeline stalled",
                              "no pool slot came back");
                return;
            }
            if (tw__staging_wait(pp->pipe, 1000) < 0)
                got = -1;
            else
                continue;
        }
        if (got < 0) {
            put_pipe_copy_failed(pp);
            return;
        }
        if (got == 0)
            return; /* a completion pumps again */
        struct tw_fabric_xfer_desc d;
        memset(&d, 0, sizeof(d));
        d.op = TW_FABRIC_PULL;
        d.peer = c->fpeer;
        d.local = tw__fabric_mrc_mr(pp->mr);
        d.local_offset = tw__fabric_mrc_offset(pp->mr) + ch.pool_offset;
        d.remote = pp->remote;
        d.remote.remote_addr += ch.offset;
        d.remote.length -= ch.offset;
        d.length = ch.len;
        if (srv->cfg.transfer_timeout_ms) {
            uint64_t left_ms = srv->cfg.transfer_timeout_ms;
            uint64_t used = tw__loop_now(&srv->loop) - x->started_ms;
            left_ms = used < left_ms ? left_ms - used : 1;
            d.deadline_ns = tw__now_ns() + left_ms * 1000000ull;
        }
        d.cookie = (uint64_t)(uintptr_t)rd | 1u;
        rd->ch = ch;
        rd->live = 1;
        rd->done = 0;
        if (tw__fabric_xfer_submit(srv->fab, &d, NULL) < 0) {
            rd->live = 0;
            put_pipe_fail_later(pp, TW_WIRE_INTERNAL, "cannot start reading",
                                tw__fabric_errmsg(srv->fab));
            return;
        }
        pp->nflight++;
        pp->submitted += ch.len;
    }
    if (!pp->finished && pp->submitted == len && pp->nflight == 0 &&
        pp->next_release * PIPE_CHUNK >= len)
        put_pipe_all_read(pp);
}

static void staged_read_done(struct put_pipe *pp, struct put_read *rd,
                             const struct tw_fabric_completion *fc)
{
    pp->nflight--;
    rd->done = 1;
    if (fc->buffer_busy)
        pp->busy = 1;
    if (!pp->x) { /* orphan: the request is gone */
        if (pp->nflight == 0)
            put_pipe_free(pp);
        return;
    }
    if (pp->failing) {
        if (pp->nflight == 0) {
            char why[sizeof(pp->fail_why)];
            snprintf(why, sizeof(why), "%s", pp->fail_why);
            put_pipe_fail(pp, pp->fail_code, why, NULL);
        }
        return;
    }
    if (pp->finished)
        return;
    if (fc->status != 0 || fc->bytes != rd->ch.len) {
        char why[TW_FABRIC_ERRMSG_LEN + 64];
        snprintf(why, sizeof(why), "%s (chunk at %llu, %llu of %zu bytes read)",
                 fc->msg[0] ? fc->msg : tw_strerror(fc->status), (unsigned long long)rd->ch.offset,
                 (unsigned long long)fc->bytes, rd->ch.len);
        put_pipe_fail_later(pp,
                            fc->status ? tw__fabric_status_to_wire(fc->status) : TW_WIRE_INTERNAL,
                            "reading the client's memory failed", why);
        return;
    }
    /* Chunks go to the GPU in order: release every completed one whose
     * turn it is. */
    for (int again = 1; again;) {
        again = 0;
        for (unsigned i = 0; i < PIPE_READS; i++) {
            struct put_read *r = &pp->rd[i];
            if (!r->live || !r->done || r->ch.index != pp->next_release)
                continue;
            r->live = 0;
            if (tw__staging_release(pp->pipe, &r->ch) < 0) {
                put_pipe_copy_failed(pp);
                return;
            }
            pp->next_release++;
            again = 1;
        }
    }
    put_pipe_pump(pp);
}

/* TW_TEST_REORDER_READS=1 (tests only): the provider may complete a pipe's
 * two reads in either order (each is cut into operations of its own), and
 * on a busy machine it does; this makes it happen on every pair: the
 * in-order read's completion, arriving while the pipe's other read is in
 * flight, is held back and handed over after that one's. */
static int test_reorder_reads(void)
{
    static int read_env = 0;
    static int on;
    if (!read_env) {
        const char *v = getenv("TW_TEST_REORDER_READS");
        on = v && strcmp(v, "1") == 0;
        read_env = 1;
    }
    return on;
}

void tw__srv_staged_on_completion(struct tw_srv *srv, const struct tw_fabric_completion *fc)
{
    struct put_read *rd = (struct put_read *)(uintptr_t)(fc->cookie & ~(uint64_t)1);
    struct put_pipe *pp = rd->pp;
    (void)srv;
    if (pp->held) { /* the other read's: it goes first */
        struct tw_fabric_completion h = pp->held_fc;
        struct put_read *hrd = (struct put_read *)(uintptr_t)(h.cookie & ~(uint64_t)1);
        pp->held = 0;
        staged_read_done(pp, rd, fc); /* pp stays: the held read still counts */
        staged_read_done(pp, hrd, &h);
        return;
    }
    if (test_reorder_reads() && pp->x && !pp->finished && pp->nflight == PIPE_READS &&
        rd->ch.index == pp->next_release) {
        pp->held_fc = *fc;
        pp->held = 1;
        return;
    }
    staged_read_done(pp, rd, fc);
}

/* The client's RDMA_REGISTER: its source. RDMA_READY, then the reads. */
static int put_pipe_register(struct tw_xfer *x, const struct tw_msg *m)
{
    struct put_pipe *pp = x->stage;
    struct tw_srv_conn *c = x->conn;
    struct tw_srv *srv = c->srv;
    char err[TW_FABRIC_ERRMSG_LEN];
    if (m->u.rdma_register.length != x->t->byte_length)
        return TW_EBAD_LENGTH;
    pp->remote.key = m->u.rdma_register.rkey;
    pp->remote.remote_addr = m->u.rdma_register.remote_addr;
    pp->remote.length = m->u.rdma_register.length;
    void *base;
    size_t blen;
    tw__staging_pool_memory(srv->stage_pool, &base, &blen);
    if (tw__fabric_mrcache_acquire_peer(srv->mrc, c->fpeer, base, blen, TW_FABRIC_LOCAL_READ,
                                        TW_MEMKIND_HOST, &pp->mr, err, sizeof(err)) < 0) {
        pp->mr = NULL;
        put_pipe_fail(pp, TW_WIRE_INTERNAL, "cannot register the staging pool", err);
        return 0;
    }
    struct tw_mem_attr attr = {.kind = TW_MEMKIND_CUDA, .device = pp->ordinal};
    if (tw__staging_begin(srv->stage_pool, TW_STAGING_TO_DEVICE, &tw__memkind_cuda, &attr,
                          (uintptr_t)pp->dev->data, pp->dev->byte_length, PIPE_DEPTH,
                          pp->dev->has_crc ? TW_STAGING_CRC : 0, &pp->pipe, err, sizeof(err)) < 0) {
        pp->pipe = NULL;
        put_pipe_fail(pp, TW_WIRE_INTERNAL, "cannot start the copies to the GPU", err);
        return 0;
    }
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_RDMA_READY;
    r.hdr.request_id = x->id;
    if (tw__conn_send(c, &r) < 0)
        return 0;
    put_pipe_pump(pp);
    return 0;
}

/* ---- progressive RDMA get (bit 5) ----
 *
 * Without bit 5 an RDMA get copies the whole GPU version to the host before
 * RDMA_REGISTER (the client may read at once). With it, the copy is queued
 * in PROG_CHUNKS parts of at least PROG_ALIGN bytes, each handed to the
 * driver at once with its own marker (copy_tickets.h), RDMA_REGISTER goes
 * with MORE, and an RDMA_AVAILABLE per part follows, each sent by
 * conn_flush once its part's copy is done: the client's reads of part k
 * overlap the copies of parts k+1.. (docs/protocol.md §9.3). Few parts,
 * because every part takes a marker of the device's ring (16, shared by
 * the connection's other copies) and a full ring waits. Below PROG_MIN the
 * whole copy takes under ~0.2 ms at the pinned rate: not worth the frames.
 * A part's copy that fails after its frame was queued closes the
 * connection (as for a DATA frame a copy fills); one refused when queued
 * fails the request before RDMA_REGISTER. The host version is freed only
 * after its last copy is done (staged_release).
 */
#define PROG_MIN ((uint64_t)8 << 20)
#define PROG_CHUNKS 8u
#define PROG_ALIGN ((uint64_t)1 << 20)

struct prog_plan {
    unsigned n;
    uint64_t end[PROG_CHUNKS];
    uint64_t ticket[PROG_CHUNKS];
};

static int progressive_wanted(const struct tw_xfer *x, const struct tw_store_devmem_ops *m,
                              int pinned)
{
    return x->dir == TW_XFER_GET && inner_of(x) == &tw__dp_rdma_ops &&
           (x->conn->caps & TW_CAP_RDMA_PROGRESSIVE) && x->t->byte_length >= PROG_MIN &&
           m->copy_async && m->copied && pinned;
}

static int stage_progressive(struct tw_xfer *x, const struct tw_store_devmem_ops *m, int ordinal,
                             struct prog_plan *pl, char *err, size_t errlen)
{
    uint64_t len = x->t->byte_length;
    uint64_t part = (len + PROG_CHUNKS - 1) / PROG_CHUNKS;
    part = (part + PROG_ALIGN - 1) & ~(PROG_ALIGN - 1);
    pl->n = 0;
    for (uint64_t off = 0; off < len;) {
        uint64_t n = len - off < part ? len - off : part;
        uint64_t ticket = 0;
        int rc = m->copy_async(ordinal, x->t->data + off, x->dev_t->data + off, (size_t)n, 1,
                               &ticket, err, errlen);
        if (rc)
            return rc; /* the parts queued before it are waited for in release */
        x->prog_gpu = x->dev_t->gpu;
        x->prog_ticket = ticket;
        /* Hands it to the driver now, behind its own marker. */
        rc = m->copied(ordinal, ticket, 0, err, errlen);
        if (rc < 0)
            return rc;
        off += n;
        pl->end[pl->n] = off;
        pl->ticket[pl->n++] = ticket;
    }
    x->conn->srv->stats.staged_async_copies += pl->n;
    x->conn->srv->stats.staged_progressive_gets++;
    x->progressive = 1;
    return 0;
}

int tw__srv_stage_prog_wait(struct tw_xfer *x, char *err, size_t errlen)
{
    if (x->prog_gpu < 0 || !x->dev_t)
        return 0;
    int gpu = x->prog_gpu;
    x->prog_gpu = -1;
    int rc = ticket_done(x->conn->srv, gpu, x->prog_ticket, 1, err, errlen);
    return rc < 0 ? rc : 0;
}

/* A get's copy from GPU ordinal failed (err): counted, said in x->why and
 * logged; returns rc. */
static int get_copy_failed(struct tw_xfer *x, int ordinal, const char *err, int rc)
{
    x->conn->srv->stats.staged_failed++;
    snprintf(x->why, sizeof(x->why), "copying it from cuda:%d failed: %.150s", ordinal, err);
    TW_LOGW("get of '%s': %s", x->t->name, x->why);
    return rc;
}

static int staged_start(struct tw_xfer *x)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(x->t->store);
    char err[256];
    int ordinal = gpu_ordinal(x);
    int pinned = 0;
    struct prog_plan plan = {0};
    if (!m->to_host || !m->from_host)
        return TW_EDEVICE;
    int rc = put_pipe_start(x) ? 0 : stage_host_version(x, &pinned);
    if (rc)
        return rc;
    struct tw_srv_conn *c = x->conn;
    if (tw__log_enabled(TW_LOG_DEBUG)) { /* a small block costs a few us: no formatting */
        char path[128];
        tw__path_format(&x->path, NULL, path, sizeof(path));
        TW_LOGD("conn %llu %s: %s of '%s' (%llu B on cuda:%d): %s", (unsigned long long)c->id,
                c->peer, x->dir == TW_XFER_GET ? "get" : "put", x->t->name,
                (unsigned long long)x->t->byte_length, ordinal, path);
    }
    if (x->dir == TW_XFER_GET)
        c->srv->stats.staged_gets++;
    else
        c->srv->stats.staged_puts++;
    c->srv->stats.staged_bytes += x->t->byte_length;
    /* Inline gets copy frame by frame in pump; RDMA copies the whole version
     * first, or in parts the client reads as they land (bit 5), or (a host
     * copy in the pinned slab) queues its copy and holds RDMA_REGISTER
     * back until it is done. */
    int deferred = 0;
    uint64_t ticket = 0;
    if (x->dir == TW_XFER_GET && x->t->byte_length && inner_of(x) != &tw__dp_inline_ops) {
        if (progressive_wanted(x, m, pinned)) {
            rc = stage_progressive(x, m, ordinal, &plan, err, sizeof(err));
        } else if (x->t->pinned && m->copy_async && m->copied && m->fence) {
            rc = m->copy_async(ordinal, x->t->data, x->dev_t->data, (size_t)x->t->byte_length, 1,
                               &ticket, err, sizeof(err));
            if (rc == 0) {
                deferred = 1;
                x->prog_gpu = x->dev_t->gpu; /* staged_release waits for it */
                x->prog_ticket = ticket;
                c->dev_fence |= (uint64_t)1 << x->dev_t->gpu;
                c->srv->stats.staged_async_copies++;
            }
        } else {
            rc = m->to_host(ordinal, x->t->data, x->dev_t->data, (size_t)x->t->byte_length, err,
                            sizeof(err));
        }
        if (rc)
            return get_copy_failed(x, ordinal, err, rc);
    }
    struct tw_out_chunk *tail = c->out_tail;
    rc = inner_of(x)->start(x);
    if (deferred) {
        /* The frame start queued last is the RDMA_REGISTER of the host
         * copy: conn_flush sends it once the copy is done, so the client
         * reads (or has us write) only bytes in place. */
        struct tw_out_chunk *ch = c->out_tail;
        if (rc == 0 && tw__srv_rdma_key_waits(x)) {
            /* Keyed with its neighbours at the end of this read (one key
             * for a run of adjacent host copies): the frame, queued then,
             * waits for this copy likewise (xfer_rdma.c). */
        } else if (rc == 0 && ch && ch != tail && ch->dev_gpu < 0) {
            ch->dev_gpu = x->dev_t->gpu;
            ch->dev_ticket = ticket;
        } else if (tw__srv_stage_prog_wait(x, err, sizeof(err)) < 0 && rc == 0) {
            return get_copy_failed(x, ordinal, err, TW_EINTERNAL);
        }
    }
    if (rc || !x->progressive)
        return rc;
    for (unsigned i = 0; i < plan.n; i++)
        if (tw__srv_rdma_announce(x, plan.end[i], x->prog_gpu, plan.ticket[i]) < 0)
            return TW_ESHUTDOWN;
    return 0;
}

/* Inline get: the bytes of the frame the inline plane sends next come
 * from the GPU just before it is queued, while the frames queued before
 * it drain to the socket. Same framing as xfer_inline.c. */
static int staged_pump(struct tw_xfer *x)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(x->t->store);
    uint32_t chunk = x->conn->max_frame - TW_DATA_PREFIX_LEN;
    if (chunk > TW_SRV_DATA_CHUNK)
        chunk = TW_SRV_DATA_CHUNK;
    uint64_t left = x->t->byte_length - x->done;
    size_t len = left < chunk ? (size_t)left : chunk;
    uint64_t ticket = 0;
    if (len && x->dev_t) {
        char err[256];
        int ordinal = x->dev_t->store->gpu[x->dev_t->gpu].ordinal;
        int rc;
        /* A small host copy in the pinned slab: queue the copy, and
         * conn_flush sends the frame once its ticket is done (a synchronous
         * copy costs ~9-13 us per 32 KiB block on the H200, a queued one
         * ~1.4-2.4: docs/performance.md), the frames before it meanwhile. */
        if (x->t->pinned && m->copy_async && m->copied && m->fence) {
            rc = m->copy_async(ordinal, x->t->data + x->done, x->dev_t->data + x->done, len, 1,
                               &ticket, err, sizeof(err));
            if (rc == 0) {
                x->conn->dev_fence |= (uint64_t)1 << x->dev_t->gpu;
                x->conn->srv->stats.staged_async_copies++;
            }
        } else {
            rc = m->to_host(ordinal, x->t->data + x->done, x->dev_t->data + x->done, len, err,
                            sizeof(err));
        }
        if (rc)
            return get_copy_failed(x, ordinal, err, rc);
    }
    struct tw_out_chunk *tail = x->conn->out_tail;
    int rc = inner_of(x)->pump(x);
    if (rc >= 0 && ticket) {
        /* The inline plane queued exactly one DATA frame: this copy's. */
        struct tw_out_chunk *ch = x->conn->out_tail;
        if (ch && ch != tail && ch->ref == x->t) {
            ch->dev_gpu = x->dev_t->gpu;
            ch->dev_ticket = ticket;
        } else { /* not expected: make every frame wait for every copy */
            char err[256];
            if (tw__srv_stage_fence(x->conn, err, sizeof(err)) != 0) {
                snprintf(x->why, sizeof(x->why), "copying it from the GPU failed: %.150s", err);
                return TW_EINTERNAL;
            }
        }
    }
    if (rc < 0 && x->conn->dev_fence) {
        /* The frame was not queued: the host copy may go with x, so no copy
         * may still be writing it. */
        char err[64];
        (void)tw__srv_stage_fence(x->conn, err, sizeof(err));
    }
    return rc;
}

static int staged_data_begin(struct tw_xfer *x, const struct tw_msg *msg, uint8_t **dst)
{
    const struct tw_dp_ops *in = inner_of(x);
    return in->data_begin ? in->data_begin(x, msg, dst) : TW_ENOT_NEGOTIATED;
}

static int staged_data_end(struct tw_xfer *x, const struct tw_msg *msg)
{
    return inner_of(x)->data_end(x, msg);
}

static int staged_on_msg(struct tw_xfer *x, const struct tw_msg *msg)
{
    if (x->stage && msg->hdr.tag == TW_TAG_RDMA_REGISTER)
        return put_pipe_register(x, msg);
    return inner_of(x)->on_msg(x, msg);
}

/* All of a put's bytes are in the host version: they go to the GPU, and
 * the GPU version is what gets published. */
static int staged_commit(struct tw_xfer *x, struct tw_tensor **publish, char *err, size_t errlen)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(x->t->store);
    struct tw_tensor *host = x->t, *dev = x->dev_t;
    if (x->stage) { /* pipelined: the bytes are in the GPU version already */
        *publish = x->t;
        return 0;
    }
    if (!dev) {
        snprintf(err, errlen, "internal: staged put without a GPU version");
        return TW_EINTERNAL;
    }
    int ordinal = dev->store->gpu[dev->gpu].ordinal;
    /* The GPU version is published with the CRC the put announced. */
    dev->has_crc = host->has_crc;
    dev->crc32c = host->crc32c;
    *publish = dev;
    if (host->byte_length && host->pinned && (x->conn->defer_commits || x->conn->srv->completing) &&
        m->copy_async && m->copied && m->fence) {
        /* A small put among others read in one go, or completed by the
         * plane with others (RDMA pull puts): its copy is queued and
         * batched with theirs; the connection publishes it once done
         * (tw__xfer_commits_flush). */
        char why[200];
        int rc = m->copy_async(ordinal, dev->data, host->data, (size_t)host->byte_length, 0,
                               &x->commit_ticket, why, sizeof(why));
        if (rc == 0) {
            x->commit_gpu = dev->gpu;
            x->conn->dev_fence |= (uint64_t)1 << dev->gpu;
            x->conn->srv->stats.staged_async_commits++;
            return 1;
        }
        TW_LOGD("put of '%s': queueing its copy failed (copying now): %s", host->name, why);
    }
    if (host->byte_length) {
        char why[200];
        int rc = m->from_host(ordinal, dev->data, host->data, (size_t)host->byte_length, why,
                              sizeof(why));
        if (rc) {
            x->conn->srv->stats.staged_failed++;
            snprintf(err, errlen, "copying it to cuda:%d failed: %s", ordinal, why);
            return rc;
        }
    }
    return 0;
}

int tw__srv_stage_commit_wait(struct tw_xfer *x, int wait, char *err, size_t errlen)
{
    struct tw_store *st = &x->conn->srv->store;
    int ordinal = st->gpu[x->commit_gpu].ordinal;
    char why[200] = "";
    int rc = tw__store_devmem(st)->copied(ordinal, x->commit_ticket, wait, why, sizeof(why));
    if (rc >= 0)
        return wait ? 1 : rc;
    x->conn->srv->stats.staged_failed++;
    snprintf(err, errlen, "copying it to cuda:%d failed: %s", ordinal, why);
    return rc;
}

/* The inner plane lets go of the host version; x->t is the GPU version
 * again for destroy's unref. */
static void staged_release(struct tw_xfer *x)
{
    const struct tw_dp_ops *in = inner_of(x);
    if (in->release)
        in->release(x);
    struct put_pipe *pp = x->stage;
    if (pp) {
        x->stage = NULL;
        pp->x = NULL;
        pp->finished = 1;
        if (pp->nflight == 0)
            put_pipe_free(pp);
    }
    if (x->dev_t) {
        /* No copy may still write the host version when it goes. */
        char err[64];
        (void)tw__srv_stage_prog_wait(x, err, sizeof(err));
        tw__tensor_unref(x->t);
        x->t = x->dev_t;
        x->dev_t = NULL;
    }
}

static const struct staged_dp inline_staged = {
    .ops =
        {
            .name = "inline + staging",
            .wire_plane = TW_DP_INLINE,
            .start = staged_start,
            .pump = staged_pump,
            .data_begin = staged_data_begin,
            .data_end = staged_data_end,
            .on_msg = staged_on_msg,
            .commit = staged_commit,
            .release = staged_release,
        },
    .inner = &tw__dp_inline_ops,
};

static const struct staged_dp rdma_staged = {
    .ops =
        {
            .name = "rdma + staging",
            .wire_plane = TW_DP_RDMA,
            .start = staged_start,
            .pump = NULL, /* as the RDMA plane: no DATA frames */
            .data_begin = NULL,
            .data_end = NULL,
            .on_msg = staged_on_msg,
            .commit = staged_commit,
            .release = staged_release,
        },
    .inner = &tw__dp_rdma_ops,
};

const struct tw_dp_ops *const tw__dp_inline_staged_ops = &inline_staged.ops;
const struct tw_dp_ops *const tw__dp_rdma_staged_ops = &rdma_staged.ops;
