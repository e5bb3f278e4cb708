/*
 * Memory registration honouring the provider's MR mode, and key revocation.
 *
 *   FI_MR_LOCAL     local buffers need a descriptor: we register them and
 *                   pass fi_mr_desc() with every operation. Without it, a
 *                   buffer used only locally is not registered at all.
 *   FI_MR_VIRT_ADDR remote_addr is the virtual address; else 0 (offsets).
 *   FI_MR_PROV_KEY  the provider picks keys; else we request keys from a
 *                   per-rail counter, so a closed key is never handed out
 *                   again by this rail (an old key cannot alias a new region).
 *   FI_MR_ALLOCATED nothing to do: we only register memory that exists.
 *   FI_MR_ENDPOINT  bind the MR to the rail's endpoint, then enable it.
 *   FI_MR_RAW       not supported (rail.c rejects keys over 8 bytes).
 *
 * Revocation: fi_close() of the MR is the revocation. What the peer then
 * sees depends on the provider (verified in tests/integration/
 * test_fabric_rma.c, old_key_rejected): tcp;ofi_rxm drops the connection
 * and the peer gets an error completion; shm rejects the key silently and
 * the peer's transfer runs into its deadline. No bytes move in either case.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "fabric/fabric_int.h"
#include "gpu/cuda.h"

#define ACCESS_KNOWN                                                                               \
    (TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE | TW_FABRIC_REMOTE_READ | TW_FABRIC_REMOTE_WRITE)
#define TW_FABRIC_LINGER_NS (2ull * 1000 * 1000 * 1000)
#define ACCESS_REMOTE (TW_FABRIC_REMOTE_READ | TW_FABRIC_REMOTE_WRITE)

static uint64_t fi_access(unsigned a)
{
    uint64_t f = 0;
    if (a & TW_FABRIC_LOCAL_READ)
        f |= FI_READ;
    if (a & TW_FABRIC_LOCAL_WRITE)
        f |= FI_WRITE;
    if (a & TW_FABRIC_REMOTE_READ)
        f |= FI_REMOTE_READ;
    if (a & TW_FABRIC_REMOTE_WRITE)
        f |= FI_REMOTE_WRITE;
    return f;
}

int tw__fabric_mr_register(struct tw_fabric_peer *peer, void *addr, size_t len, unsigned access,
                           enum tw_fabric_iface iface, int device, struct tw_fabric_mr **out)
{
    return tw__fabric_mr_register_on(peer->rail, addr, len, access, iface, device, out);
}

int tw__fabric_mr_register_rail(struct tw_fabric *fab, unsigned rail, void *addr, size_t len,
                                unsigned access, enum tw_fabric_iface iface, int device,
                                struct tw_fabric_mr **out)
{
    unsigned slots = tw__fabric_rail_slots(fab);
    if (rail >= slots)
        return tw__fabric_fail(fab, TW_EINVAL, "rail %u out of range (%u rails)", rail, slots);
    return tw__fabric_mr_register_on(&fab->rails[rail], addr, len, access, iface, device, out);
}

int tw__fabric_dmabuf_built(void)
{
#ifdef FI_MR_DMABUF
    return 1;
#else
    return 0;
#endif
}

/* Build switch for A/B measurements only (docs/performance.md): 0 registers
 * CUDA memory without FI_HMEM_DEVICE_ONLY. */
#ifndef TW_FABRIC_HMEM_DEVICE_ONLY
#define TW_FABRIC_HMEM_DEVICE_ONLY 1
#endif

/* FI_HMEM_DEVICE_ONLY for CUDA memory only the device reaches (device
 * memory, not managed): libfabric's own classification of such memory
 * (hmem_cuda.c), given explicitly since registration does not derive it.
 * With it shm moves the buffer by CUDA IPC from the side that holds it
 * (the initiator's local buffer) instead of bouncing it through its
 * shared-memory SAR buffers. 0 when the driver cannot say. */
static uint64_t cuda_device_only(void *addr)
{
    const struct tw_cuda_api *cu;
    if (!TW_FABRIC_HMEM_DEVICE_ONLY || tw__cuda_get(&cu, NULL, 0) != 0)
        return 0;
    unsigned int memtype = 0, managed = 1;
    CUpointer_attribute which[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                   CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void *data[] = {&memtype, &managed};
    if (cu->cuPointerGetAttributes(2, which, data, (CUdeviceptr)(uintptr_t)addr) != CUDA_SUCCESS)
        return 0;
    return memtype == CU_MEMORYTYPE_DEVICE && !managed ? FI_HMEM_DEVICE_ONLY : 0;
}

static int register_on(struct tw_fabric_rail *r, void *addr, size_t len, unsigned access,
                       enum tw_fabric_iface iface, int device, const struct tw_fabric_dmabuf *db,
                       struct tw_fabric_mr **out);

int tw__fabric_mr_register_on(struct tw_fabric_rail *r, void *addr, size_t len, unsigned access,
                              enum tw_fabric_iface iface, int device, struct tw_fabric_mr **out)
{
    return register_on(r, addr, len, access, iface, device, NULL, out);
}

int tw__fabric_mr_register_dmabuf_rail(struct tw_fabric *fab, unsigned rail, void *addr, size_t len,
                                       unsigned access, int device,
                                       const struct tw_fabric_dmabuf *db, struct tw_fabric_mr **out)
{
    unsigned slots = tw__fabric_rail_slots(fab);
    if (rail >= slots)
        return tw__fabric_fail(fab, TW_EINVAL, "rail %u out of range (%u rails)", rail, slots);
    if (!db || db->fd < 0 || len == 0)
        return tw__fabric_fail(fab, TW_EINVAL, "dma-buf registration needs an fd and a length");
    return register_on(&fab->rails[rail], addr, len, access, TW_FABRIC_CUDA, device, db, out);
}

void tw__fabric_cuda_current(int device, int fallback)
{
    static _Thread_local int current = -1, fallback_tried;
    if (device < 0) {
        if (current >= 0 || fallback < 0 || fallback_tried)
            return;
        fallback_tried = 1; /* no driver: asked once per thread */
        device = fallback;
    }
    if (device != current && tw__cuda_use_device(device, NULL, 0) == 0)
        current = device;
}

static int register_on(struct tw_fabric_rail *r, void *addr, size_t len, unsigned access,
                       enum tw_fabric_iface iface, int device, const struct tw_fabric_dmabuf *db,
                       struct tw_fabric_mr **out)
{
    struct tw_fabric *fab = r->fab;
    int ret;

#ifndef FI_MR_DMABUF
    if (db)
        return tw__fabric_fail(fab, -ENOTSUP,
                               "dma-buf registration: this build's libfabric headers have no "
                               "FI_MR_DMABUF (1.20 or newer needed)");
#endif
    if (access == 0 || (access & ~ACCESS_KNOWN))
        return tw__fabric_fail(fab, TW_EINVAL, "registration access 0x%x invalid", access);
    if (iface != TW_FABRIC_HOST && iface != TW_FABRIC_CUDA)
        return tw__fabric_fail(fab, TW_EINVAL, "unknown memory interface %d", (int)iface);
    if (iface == TW_FABRIC_CUDA && !r->hmem)
        return tw__fabric_fail(fab, TW_EDEVICE,
                               "device memory registration: the %s rail was opened without "
                               "FI_HMEM (%s)",
                               r->addr.provider,
                               r->hmem_why[0] ? r->hmem_why
                               : fab->hmem    ? "the provider has none"
                                              : "the plane did not ask");
    if (len && !addr)
        return tw__fabric_fail(fab, TW_EINVAL, "registration of %zu bytes at NULL", len);

    struct tw_fabric_mr *m = calloc(1, sizeof(*m));
    if (!m)
        return tw__fabric_fail(fab, -ENOMEM, "out of memory");
    m->rail = r;
    m->access = access;
    m->cuda_device = iface == TW_FABRIC_CUDA ? device : -1;
    m->refs = 1;
    m->base = addr;
    m->len = len;
    m->rkey.length = len;
    m->rkey.remote_addr = (r->mr_mode & FI_MR_VIRT_ADDR) ? (uint64_t)(uintptr_t)addr : 0;

    int needed = len > 0 && ((access & ACCESS_REMOTE) || (r->mr_mode & FI_MR_LOCAL) ||
                             iface != TW_FABRIC_HOST);
    /* One lock for the rail's state and the registration (a staged get
     * registers per request). */
    tw__fabric_lock(fab);
    if (!r->info) {
        ret = tw__fabric_fail(fab, -ECONNABORTED, "rail slot %u is closed",
                              (unsigned)(r - fab->rails));
        goto out_free_mr;
    }
    if (r->retired) {
        ret = tw__fabric_fail(fab, -ECONNABORTED, "%s rail %s: %s", r->addr.provider,
                              tw__fabric_rail_wedged(r) ? "wedged" : "retired", r->retire_why);
        goto out_free_mr;
    }
    if (needed) {
        struct iovec iov = {.iov_base = addr, .iov_len = len};
        struct fi_mr_attr attr = {
            .mr_iov = &iov,
            .iov_count = 1,
            .access = fi_access(access),
            .offset = 0,
            .requested_key = (r->mr_mode & FI_MR_PROV_KEY) ? 0 : r->next_key++,
            .context = m,
            .iface = iface == TW_FABRIC_CUDA ? FI_HMEM_CUDA : FI_HMEM_SYSTEM,
        };
        uint64_t flags = 0;
        int by_dmabuf = 0;
        if (iface == TW_FABRIC_CUDA) {
            attr.device.cuda = device;
            flags |= cuda_device_only(addr);
        }
        /* The dma-buf branch (libfabric 1.20+ headers): the memory is named
         * by a dma-buf fd and an offset in it instead of a pointer; the
         * provider imports it (FI_MR_DMABUF). */
#ifdef FI_MR_DMABUF
        struct fi_mr_dmabuf dmb;
        if (db) {
            dmb = (struct fi_mr_dmabuf){
                .fd = db->fd, .offset = db->offset, .len = len, .base_addr = addr};
            attr.dmabuf = &dmb;
            flags |= FI_MR_DMABUF;
            by_dmabuf = 1;
        }
#endif
        ret = tw__fabric_io_lock(r);
        if (ret) {
            tw__fabric_fail(fab, ret, "%s rail wedged: %s", r->addr.provider, r->retire_why);
            goto out_free_mr;
        }
        ret = fi_mr_regattr(r->domain, &attr, flags, &m->mr);
        if (ret) {
            tw__fabric_io_unlock(r);
            tw__fabric_fail(fab, ret, "%s: fi_mr_regattr(%zu bytes, access 0x%x%s): %s",
                            r->addr.provider, len, access, by_dmabuf ? ", FI_MR_DMABUF" : "",
                            fi_strerror(-ret));
            goto out_free_mr;
        }
        if (r->mr_mode & FI_MR_ENDPOINT) {
            ret = fi_mr_bind(m->mr, &r->ep->fid, 0);
            if (ret) {
                tw__fabric_fail(fab, ret, "%s: fi_mr_bind: %s", r->addr.provider,
                                fi_strerror(-ret));
                goto out_close_mr;
            }
            ret = fi_mr_enable(m->mr);
            if (ret) {
                tw__fabric_fail(fab, ret, "%s: fi_mr_enable: %s", r->addr.provider,
                                fi_strerror(-ret));
                goto out_close_mr;
            }
        }
        m->rkey.key = fi_mr_key(m->mr);
        if (m->rkey.key == FI_KEY_NOTAVAIL) {
            ret = tw__fabric_fail(fab, -ENOTSUP, "%s: key not available (FI_MR_RAW)",
                                  r->addr.provider);
            goto out_close_mr;
        }
        m->desc = fi_mr_desc(m->mr);
        tw__fabric_io_unlock(r);
    }
    if (access & ACCESS_REMOTE)
        fab->remote_mrs++;
    fab->st.mrs_made++;
    link_add_tail(&fab->mrs, &m->node);
    /* The mover polls while remotely accessible memory exists (target-side
     * progress on manual-progress providers): wake it if it sleeps. One
     * that is awake sees remote_mrs in its next round (it decides to sleep
     * under the lock), so it costs no system call per registration. */
    int wake = (access & ACCESS_REMOTE) && fab->mover_asleep;
    pthread_mutex_unlock(&fab->lock);
    if (wake)
        tw__fabric_mover_wake(fab);
    *out = m;
    return 0;

out_close_mr:
    fi_close(&m->mr->fid);
    tw__fabric_io_unlock(r);
out_free_mr:
    pthread_mutex_unlock(&fab->lock);
    free(m);
    return ret;
}

void tw__fabric_mr_quiet(struct tw_fabric_mr *m)
{
    struct tw_fabric *fab = m->rail->fab;
    tw__fabric_lock(fab);
    if ((m->access & ACCESS_REMOTE) && !m->quiet) {
        m->quiet = 1;
        fab->remote_mrs--;
    }
    pthread_mutex_unlock(&fab->lock);
}

void tw__fabric_mr_expose(struct tw_fabric_mr *m, int delta)
{
    struct tw_fabric *fab = m->rail->fab;
    if (!m->quiet)
        return; /* counted for its whole life (quiet is set before sharing) */
    tw__fabric_lock(fab);
    if (delta > 0) {
        m->exposed++;
        fab->remote_mrs++;
    } else {
        m->exposed--;
        fab->remote_mrs--;
        fab->linger_until_ns = tw__now_ns() + TW_FABRIC_LINGER_NS;
    }
    int wake = delta > 0 && fab->mover_asleep; /* as in register_on */
    pthread_mutex_unlock(&fab->lock);
    if (wake)
        tw__fabric_mover_wake(fab);
}

static struct tw_fabric *fab_of(const struct tw_fabric_mr *m)
{
    return m->rail->fab;
}

void tw__fabric_mr_put_locked(struct tw_fabric_mr *m)
{
    if (--m->refs)
        return;
    /* On a wedged rail the close is skipped: nobody progresses that
     * endpoint any more, so no peer can use the key (tcp, shm: the target
     * side moves the bytes in its progress). */
    if (m->mr && tw__fabric_io_lock(m->rail) == 0) {
        fi_close(&m->mr->fid);
        tw__fabric_io_unlock(m->rail);
    }
    if ((m->access & ACCESS_REMOTE) && !m->quiet) {
        /* Keep serving the target side a while: a peer's request that
         * raced with the revocation gets its error answer instead of
         * waiting for its deadline. */
        m->rail->fab->remote_mrs--;
        m->rail->fab->linger_until_ns = tw__now_ns() + TW_FABRIC_LINGER_NS;
    }
    link_del(&m->node);
    tw__fabric_rail_released_locked(m->rail);
    if (m->on_idle && fab_of(m)->closing) {
        /* Closing: the provider may still touch the memory until the
         * rails are closed; tw__fabric_close() calls on_idle after that. */
        link_add_tail(&fab_of(m)->idle_mrs, &m->node);
        return;
    }
    if (m->on_idle)
        m->on_idle(m->on_idle_arg);
    free(m);
}

void tw__fabric_mr_release(struct tw_fabric_mr *m, void (*on_idle)(void *arg), void *arg)
{
    if (!m)
        return;
    struct tw_fabric *fab = m->rail->fab;
    tw__fabric_lock(fab);
    m->on_idle = on_idle;
    m->on_idle_arg = arg;
    tw__fabric_mr_put_locked(m);
    pthread_mutex_unlock(&fab->lock);
}

void tw__fabric_mrs_idle_run(struct tw_fabric *fab)
{
    while (!link_empty(&fab->idle_mrs)) {
        struct tw_fabric_mr *m = TW_CONTAINER_OF(fab->idle_mrs.next, struct tw_fabric_mr, node);
        link_del(&m->node);
        if (m->keep_on_close) {
            /* Not handed back: kept, reachable, for the process's life. */
            tw__fabric_mr_keep(m);
            continue;
        }
        m->on_idle(m->on_idle_arg);
        free(m);
    }
}

void tw__fabric_mr_deregister(struct tw_fabric_mr *m)
{
    if (!m)
        return;
    struct tw_fabric *fab = m->rail->fab;
    tw__fabric_lock(fab);
    tw__fabric_mr_put_locked(m);
    pthread_mutex_unlock(&fab->lock);
}

void tw__fabric_mrs_close_locked(struct tw_fabric *fab)
{
    while (!link_empty(&fab->mrs)) {
        struct tw_fabric_mr *m = TW_CONTAINER_OF(fab->mrs.next, struct tw_fabric_mr, node);
        m->refs = 1;
        tw__fabric_mr_put_locked(m);
    }
}

struct tw_fabric_rkey tw__fabric_mr_rkey(const struct tw_fabric_mr *mr)
{
    return mr->rkey;
}

unsigned tw__fabric_mr_access(const struct tw_fabric_mr *mr)
{
    return mr->access;
}

void *tw__fabric_mr_desc(const struct tw_fabric_mr *mr)
{
    return mr->desc;
}
