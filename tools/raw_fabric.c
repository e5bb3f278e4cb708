/*
 * Raw libfabric RMA loop (see tools/raw_fabric.h). Same endpoint attributes
 * as the tensorwire plane (RDM, delivery-complete, provider keys, virtual
 * addresses) so that the difference measured is the data plane's own cost.
 */
#include "tools/raw_fabric.h"

#include "tensorwire/error.h"
#include "tools/clock.h"
/* libfabric through the same dlopen loader as the library (the CLI would
 * otherwise link libfabric and pay its providers' constructors at start). */
#include "src/fabric/fi_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RAW_MAX_INFLIGHT 1024

/* One endpoint with its CQ, AV and one registered buffer. */
struct raw_ep {
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    struct fid_mr *mr;
};

struct tw_raw_fabric {
    struct raw_ep init;
    struct raw_ep tgt; /* tgt.ep == NULL: external target */
    int fast;          /* shm, host memory on both ends: raw_rma()'s fast path */
    uint8_t *buf;
    size_t len;
    fi_addr_t peer;
    int have_peer;
    uint64_t remote_addr, key;
    char prov[64];
    char err[256];
};

/* An operation as fast as libfabric can do it. On shm the endpoint's
 * default FI_DELIVERY_COMPLETE sends a read through the target's progress
 * (in 1.17 through its bounce buffers, one read per peer at a time) and a
 * write through the target's progress too; posted without it, the
 * initiator copies by cross-memory attach inside the call (the bytes are
 * in place when it returns). The client's plane reads that way by itself
 * (src/fabric/xfer.c, cma_read). So the baseline over shm is libfabric's
 * fastest path for both, never a slower one. Loops on CUDA memory keep
 * the endpoint's flags (cross-memory attach does not apply there). */
static ssize_t raw_rma(const struct tw_raw_fabric *r, int write, void *buf, size_t len, void *desc,
                       uint64_t raddr, void *context)
{
    if (!r->fast)
        return write ? fi_write(r->init.ep, buf, len, desc, r->peer, raddr, r->key, context)
                     : fi_read(r->init.ep, buf, len, desc, r->peer, raddr, r->key, context);
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct fi_rma_iov rma = {.addr = raddr, .len = len, .key = r->key};
    struct fi_msg_rma msg = {.msg_iov = &iov,
                             .desc = &desc,
                             .iov_count = 1,
                             .addr = r->peer,
                             .rma_iov = &rma,
                             .rma_iov_count = 1,
                             .context = context};
    return write ? fi_writemsg(r->init.ep, &msg, FI_COMPLETION)
                 : fi_readmsg(r->init.ep, &msg, FI_COMPLETION);
}

static int fail(char *err, size_t cap, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *err, size_t cap, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && cap)
        vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return rc < 0 ? rc : -EIO;
}

static void ep_close(struct raw_ep *e)
{
    if (e->mr)
        fi_close(&e->mr->fid);
    if (e->ep)
        fi_close(&e->ep->fid);
    if (e->av)
        fi_close(&e->av->fid);
    if (e->cq)
        fi_close(&e->cq->fid);
    if (e->domain)
        fi_close(&e->domain->fid);
    if (e->fabric)
        fi_close(&e->fabric->fid);
    if (e->info)
        fi_freeinfo(e->info);
    memset(e, 0, sizeof(*e));
}

/* shm_name: NULL for network providers, else a name unique in the host. */
static int ep_open(struct raw_ep *e, const char *prov, const char *shm_name, void *buf, size_t len,
                   uint64_t access, int cuda_device, int hmem, char *err, size_t cap)
{
    struct fi_info *hints = fi_allocinfo();
    int rc;
    if (!hints)
        return fail(err, cap, -ENOMEM, "fi_allocinfo: out of memory");
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE; /* same semantics as the plane */
    if (cuda_device >= 0 || hmem) {
        hints->caps |= FI_HMEM;
        hints->domain_attr->mr_mode |= FI_MR_HMEM;
    }
    hints->fabric_attr->prov_name = strdup(prov);
    rc = fi_getinfo(FI_VERSION(1, 17), shm_name ? NULL : "127.0.0.1", NULL,
                    shm_name ? 0 : FI_SOURCE, hints, &e->info);
    fi_freeinfo(hints);
    if (rc) {
        e->info = NULL;
        return fail(err, cap, rc, "fi_getinfo(%s): %s", prov, fi_strerror(-rc));
    }
    if (shm_name) {
        free(e->info->src_addr);
        e->info->src_addr = strdup(shm_name);
        e->info->src_addrlen = strlen(shm_name) + 1;
    }
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .size = 1024};
    struct fi_av_attr ava = {.type = FI_AV_UNSPEC};
    const char *step = "fi_fabric";
    if ((rc = fi_fabric(e->info->fabric_attr, &e->fabric, NULL)) ||
        (step = "fi_domain", rc = fi_domain(e->fabric, e->info, &e->domain, NULL)) ||
        (step = "fi_cq_open", rc = fi_cq_open(e->domain, &cqa, &e->cq, NULL)) ||
        (step = "fi_av_open", rc = fi_av_open(e->domain, &ava, &e->av, NULL)) ||
        (step = "fi_endpoint", rc = fi_endpoint(e->domain, e->info, &e->ep, NULL)) ||
        (step = "fi_ep_bind", rc = fi_ep_bind(e->ep, &e->cq->fid, FI_TRANSMIT | FI_RECV)) ||
        (step = "fi_ep_bind", rc = fi_ep_bind(e->ep, &e->av->fid, 0)) ||
        (step = "fi_enable", rc = fi_enable(e->ep)))
        goto out_close;
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct fi_mr_attr ma = {.mr_iov = &iov,
                            .iov_count = 1,
                            .access = access,
                            .iface = cuda_device >= 0 ? FI_HMEM_CUDA : FI_HMEM_SYSTEM};
    if (cuda_device >= 0)
        ma.device.cuda = cuda_device;
    /* Device memory as libfabric classifies it (src/fabric/mr.c does the
     * same): shm then moves it by CUDA IPC from the initiator's side. */
    uint64_t mr_flags = cuda_device >= 0 ? FI_HMEM_DEVICE_ONLY : 0;
    if ((step = "fi_mr_regattr", rc = fi_mr_regattr(e->domain, &ma, mr_flags, &e->mr)))
        goto out_close;
    if (e->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        if ((step = "fi_mr_bind", rc = fi_mr_bind(e->mr, &e->ep->fid, 0)) ||
            (step = "fi_mr_enable", rc = fi_mr_enable(e->mr)))
            goto out_close;
    }
    return 0;

out_close:
    fail(err, cap, rc, "%s(%s): %s", step, prov, fi_strerror(rc < 0 ? -rc : rc));
    ep_close(e);
    return rc < 0 ? rc : -EIO;
}

int tw_raw_fabric_set_target(struct tw_raw_fabric *r, const struct tw_raw_fabric_target *t)
{
    if (r->have_peer) {
        fi_av_remove(r->init.av, &r->peer, 1, 0);
        r->have_peer = 0;
    }
    if (fi_av_insert(r->init.av, t->addr, 1, &r->peer, 0, NULL) != 1)
        return fail(r->err, sizeof(r->err), TW_EINVAL, "fi_av_insert of the target failed");
    r->have_peer = 1;
    r->remote_addr = t->remote_addr;
    r->key = t->key;
    return 0;
}

int tw_raw_fabric_open(const char *prov, void *buf, size_t len, void *target_buf,
                       struct tw_raw_fabric **out, char *err, size_t cap)
{
    return tw_raw_fabric_open_cuda(prov, buf, -1, len, target_buf, -1, out, err, cap);
}

int tw_raw_fabric_open_cuda(const char *prov, void *buf, int buf_cuda, size_t len, void *target_buf,
                            int target_cuda, struct tw_raw_fabric **out, char *err, size_t cap)
{
    struct tw_raw_fabric *r = calloc(1, sizeof(*r));
    char name[2][64];
    int is_shm = strncmp(prov, "shm", 3) == 0, rc;
    *out = NULL;
    if (!r)
        return fail(err, cap, -ENOMEM, "out of memory");
    r->buf = buf;
    r->len = len;
    /* shm endpoints of one host need distinct names. */
    snprintf(name[0], sizeof(name[0]), "fi_shm://twraw_%d_%p_i", (int)getpid(), (void *)r);
    snprintf(name[1], sizeof(name[1]), "fi_shm://twraw_%d_%p_t", (int)getpid(), (void *)r);
    rc = ep_open(&r->init, prov, is_shm ? name[0] : NULL, buf, len, FI_READ | FI_WRITE, buf_cuda,
                 target_cuda >= 0, err, cap);
    if (rc)
        goto out_free;
    snprintf(r->prov, sizeof(r->prov), "%s", r->init.info->fabric_attr->prov_name);
    r->fast = is_shm && buf_cuda < 0 && target_cuda < 0;
    if (target_buf) {
        uint8_t addr[256];
        size_t alen = sizeof(addr);
        rc = ep_open(&r->tgt, prov, is_shm ? name[1] : NULL, target_buf, len,
                     FI_REMOTE_READ | FI_REMOTE_WRITE, target_cuda, target_cuda >= 0, err, cap);
        if (rc)
            goto out_close_init;
        if ((rc = fi_getname(&r->tgt.ep->fid, addr, &alen)) != 0) {
            rc = fail(err, cap, rc, "fi_getname: %s", fi_strerror(-rc));
            goto out_close_tgt;
        }
        struct tw_raw_fabric_target t = {
            .addr = addr,
            .addr_len = alen,
            .remote_addr = (r->tgt.info->domain_attr->mr_mode & FI_MR_VIRT_ADDR)
                               ? (uint64_t)(uintptr_t)target_buf
                               : 0,
            .key = fi_mr_key(r->tgt.mr),
        };
        if ((rc = tw_raw_fabric_set_target(r, &t)) != 0) {
            snprintf(err, cap, "%s", r->err);
            goto out_close_tgt;
        }
    }
    *out = r;
    return 0;

out_close_tgt:
    ep_close(&r->tgt);
out_close_init:
    ep_close(&r->init);
out_free:
    free(r);
    return rc;
}

const char *tw_raw_fabric_provider(const struct tw_raw_fabric *r)
{
    return r->prov;
}

const char *tw_raw_fabric_errmsg(const struct tw_raw_fabric *r)
{
    return r->err;
}

/* The in-process target's progress thread, alive only during a loop: it
 * plays the peer's progress engine (the tcp provider moves a read's bytes
 * only when the target side polls; shm's larger writes too), on its own
 * core as a remote peer's would be. RMA raises no completion there, so
 * nothing is consumed. */
struct target_thread {
    struct fid_cq *cq;
    int stop;
};

static void *target_main(void *arg)
{
    struct target_thread *t = arg;
    while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
        struct fi_cq_entry e;
        (void)fi_cq_read(t->cq, &e, 1);
    }
    return NULL;
}

/* Reaps completions: 0 when none, 1..n when some, negative on error. */
static int reap(struct tw_raw_fabric *r, struct fi_context2 *ctx, const uint64_t *slot_op,
                const uint64_t *t_post, uint64_t *lat_ns, uint32_t *free_slots, uint32_t *nfree)
{
    struct fi_cq_entry e[16];
    ssize_t n = fi_cq_read(r->init.cq, e, 16);
    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL) {
        struct fi_cq_err_entry ee = {0};
        fi_cq_readerr(r->init.cq, &ee, 0);
        return fail(r->err, sizeof(r->err), -(ee.err ? ee.err : EIO), "completion error: %s",
                    fi_strerror(ee.err));
    }
    if (n < 0)
        return fail(r->err, sizeof(r->err), (int)n, "fi_cq_read: %s", fi_strerror((int)-n));
    uint64_t t = tw_cli_now_ns();
    for (ssize_t i = 0; i < n; i++) {
        uint32_t s = (uint32_t)((struct fi_context2 *)e[i].op_context - ctx);
        if (lat_ns)
            lat_ns[slot_op[s]] = t - t_post[s];
        free_slots[(*nfree)++] = s;
    }
    return (int)n;
}

int tw_raw_fabric_loop(struct tw_raw_fabric *r, int write, uint64_t size, uint64_t count,
                       uint32_t inflight, uint64_t *lat_ns, uint64_t *elapsed_ns)
{
    struct fi_context2 ctx[RAW_MAX_INFLIGHT];
    uint64_t slot_op[RAW_MAX_INFLIGHT], t_post[RAW_MAX_INFLIGHT];
    uint32_t free_slots[RAW_MAX_INFLIGHT], nfree = 0;
    uint64_t posted = 0, done = 0, t0;
    struct target_thread tt = {.cq = r->tgt.cq};
    pthread_t th;
    int rc = 0;
    if (!r->have_peer)
        return fail(r->err, sizeof(r->err), TW_EINVAL, "no target");
    if (size == 0 || size > r->len || size > r->init.info->ep_attr->max_msg_size)
        return fail(r->err, sizeof(r->err), -EMSGSIZE,
                    "%llu bytes: larger than the buffer or the provider's largest message",
                    (unsigned long long)size);
    uint64_t slots = r->len / size;
    inflight = inflight < 1 ? 1 : inflight > RAW_MAX_INFLIGHT ? RAW_MAX_INFLIGHT : inflight;
    for (uint32_t i = 0; i < inflight; i++)
        free_slots[nfree++] = inflight - 1 - i;
    void *desc = fi_mr_desc(r->init.mr);
    if (tt.cq && (rc = pthread_create(&th, NULL, target_main, &tt)) != 0)
        return fail(r->err, sizeof(r->err), -rc, "pthread_create: %s", strerror(rc));

    t0 = tw_cli_now_ns();
    while (done < count) {
        while (posted < count && nfree > 0) {
            uint32_t s = free_slots[nfree - 1];
            uint64_t off = (posted % slots) * size;
            slot_op[s] = posted;
            t_post[s] = tw_cli_now_ns();
            ssize_t ret =
                raw_rma(r, write, r->buf + off, size, desc, r->remote_addr + off, &ctx[s]);
            if (ret == -FI_EAGAIN)
                break; /* reap first */
            if (ret) {
                rc = fail(r->err, sizeof(r->err), (int)ret, "%s: %s",
                          write ? "fi_write" : "fi_read", fi_strerror((int)-ret));
                goto out_join;
            }
            nfree--;
            posted++;
        }
        int n = reap(r, ctx, slot_op, t_post, lat_ns, free_slots, &nfree);
        if (n < 0) {
            rc = n; /* posted operations may still be in flight: the
                       caller closes r, which cancels them */
            goto out_join;
        }
        done += (uint64_t)n;
    }
    *elapsed_ns = tw_cli_now_ns() - t0;

out_join:
    if (tt.cq) {
        __atomic_store_n(&tt.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
    }
    return rc;
}

void tw_raw_fabric_close(struct tw_raw_fabric *r)
{
    if (!r)
        return;
    if (r->tgt.ep)
        ep_close(&r->tgt);
    ep_close(&r->init);
    free(r);
}
