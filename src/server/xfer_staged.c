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
 *        what gets published.
 *
 * An inline get copies frame by frame, just before each frame is queued
 * (the frames queued before it drain to the socket meanwhile). An RDMA get
 * copies the whole version before RDMA_REGISTER: in a pull the client reads
 * whenever it likes, and the protocol has no message that would tell it a
 * chunk is ready, so the server's copy cannot overlap the client's reads
 * (the client overlaps its own copies to the GPU with them: dp_staging.c).
 * What this side does instead is make every copy run at the pinned rate:
 * the host copies of 1 MiB and more are page-locked through a registration
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

#include "mem/regcache.h"
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
 * reference is held: an eviction only makes a later copy slower). */
static void pin_host_copy(struct tw_srv *srv, const struct tw_tensor *t)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(&srv->store);
    if (!m->pin || !m->unpin || !t->mmapped || t->alloc_len < STAGE_PIN_MIN ||
        srv->store.ngpus == 0)
        return;
    if (!srv->stage_pins) {
        struct tw_regcache_config cfg = {.max_entries = 64, .max_host_bytes = STAGE_PIN_MAX};
        if (tw__regcache_create(&cfg, &pin_registrar, srv, &srv->stage_pins) != 0) {
            srv->stage_pins = NULL;
            return;
        }
    }
    struct tw_regcache_region *r = NULL;
    char err[200];
    if (tw__regcache_lookup(srv->stage_pins, t->data, t->alloc_len, TW_ACCESS_LOCAL_READ,
                            TW_MEMKIND_HOST, &r, err, sizeof(err)) == 0)
        tw__regcache_release(srv->stage_pins, r);
    else
        TW_LOGD("staging: pinning %zu bytes of host memory failed (copies run unpinned): %s",
                t->alloc_len, err);
}

void tw__srv_stage_destroy(struct tw_srv *srv)
{
    if (srv->stage_pins && tw__regcache_destroy(srv->stage_pins) == 0)
        srv->stage_pins = NULL;
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

/* Puts a new host version shaped like the GPU version x->t in its place. */
static int stage_host_version(struct tw_xfer *x)
{
    struct tw_tensor *dev = x->t, *host = NULL;
    struct tw_descriptor d;
    if (dev->gpu < 0)
        return TW_EINVAL; /* staging a host version: the path was decided wrong */
    tw__tensor_describe(dev, 1, &d);
    d.device_tag.ptr = (const uint8_t *)"cpu";
    d.device_tag.len = 3;
    int rc = tw__store_alloc(dev->store, &d, &host);
    if (rc)
        return rc;
    pin_host_copy(x->conn->srv, host);
    x->dev_t = dev; /* x's reference moves along */
    x->t = host;    /* and x holds the host version's only reference */
    return 0;
}

static int staged_start(struct tw_xfer *x)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(x->t->store);
    char err[256];
    int ordinal = gpu_ordinal(x);
    if (!m->to_host || !m->from_host)
        return TW_EDEVICE;
    int rc = stage_host_version(x);
    if (rc)
        return rc;
    struct tw_srv_conn *c = x->conn;
    char path[128];
    tw__path_format(&x->path, NULL, path, sizeof(path));
    TW_LOGD("conn %llu %s: %s of '%s' (%llu B on cuda:%d): %s", (unsigned long long)c->id, c->peer,
            x->dir == TW_XFER_GET ? "get" : "put", x->t->name,
            (unsigned long long)x->t->byte_length, ordinal, path);
    if (x->dir == TW_XFER_GET)
        c->srv->stats.staged_gets++;
    else
        c->srv->stats.staged_puts++;
    c->srv->stats.staged_bytes += x->t->byte_length;
    /* Inline gets copy frame by frame in pump; RDMA reads the whole copy. */
    if (x->dir == TW_XFER_GET && x->t->byte_length && inner_of(x) != &tw__dp_inline_ops) {
        rc = m->to_host(ordinal, x->t->data, x->dev_t->data, (size_t)x->t->byte_length, err,
                        sizeof(err));
        if (rc) {
            c->srv->stats.staged_failed++;
            snprintf(x->why, sizeof(x->why), "copying it from cuda:%d failed: %.150s", ordinal,
                     err);
            TW_LOGW("get of '%s': %s", x->t->name, x->why);
            return rc;
        }
    }
    return inner_of(x)->start(x);
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
    if (len && x->dev_t) {
        char err[256];
        int ordinal = x->dev_t->store->gpu[x->dev_t->gpu].ordinal;
        int rc = m->to_host(ordinal, x->t->data + x->done, x->dev_t->data + x->done, len, err,
                            sizeof(err));
        if (rc) {
            x->conn->srv->stats.staged_failed++;
            snprintf(x->why, sizeof(x->why), "copying it from cuda:%d failed: %.150s", ordinal,
                     err);
            TW_LOGW("get of '%s': %s", x->t->name, x->why);
            return rc;
        }
    }
    return inner_of(x)->pump(x);
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
    return inner_of(x)->on_msg(x, msg);
}

/* All of a put's bytes are in the host version: they go to the GPU, and
 * the GPU version is what gets published. */
static int staged_commit(struct tw_xfer *x, struct tw_tensor **publish, char *err, size_t errlen)
{
    const struct tw_store_devmem_ops *m = tw__store_devmem(x->t->store);
    struct tw_tensor *host = x->t, *dev = x->dev_t;
    if (!dev) {
        snprintf(err, errlen, "internal: staged put without a GPU version");
        return TW_EINTERNAL;
    }
    int ordinal = dev->store->gpu[dev->gpu].ordinal;
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
    /* The GPU version is published with the CRC the put announced. */
    dev->has_crc = host->has_crc;
    dev->crc32c = host->crc32c;
    *publish = dev;
    return 0;
}

/* The inner plane lets go of the host version; x->t is the GPU version
 * again for destroy's unref. */
static void staged_release(struct tw_xfer *x)
{
    const struct tw_dp_ops *in = inner_of(x);
    if (in->release)
        in->release(x);
    if (x->dev_t) {
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
