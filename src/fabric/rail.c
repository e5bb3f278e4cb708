/*
 * Provider selection and rail lifecycle: fi_getinfo with the capabilities
 * and MR modes we support, then fabric, domain, completion queue, address
 * vector and RDM endpoint for each chosen provider.
 *
 * Why these hints: we support every MR mode a real NIC demands
 * (FI_MR_LOCAL, VIRT_ADDR, ALLOCATED, PROV_KEY, ENDPOINT; mr.c honours each
 * one the provider keeps), except FI_MR_RAW: RDMA_REGISTER carries a u64 key,
 * so a provider whose keys are longer than 8 bytes cannot be used and is
 * rejected with that reason. FI_THREAD_DOMAIN is the least we can ask for:
 * each rail's io mutex serialises every call into its domain
 * (fabric_int.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric_int.h"

/* "auto" preference order: real NICs first, then same-host shared memory,
 * then TCP (always works where IP does). */
static const char *const auto_order[] = {"verbs", "efa", "shm", "tcp"};

static void append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    if (used + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* "tcp;ofi_rxm" matches "tcp;ofi_rxm" and "tcp"; "shm" matches "shm". */
static int prov_matches(const char *prov_name, const char *want)
{
    if (strcmp(prov_name, want) == 0)
        return 1;
    size_t n = strlen(want);
    return strncmp(prov_name, want, n) == 0 && prov_name[n] == ';';
}

static struct fi_info *make_hints(const char *want, int hmem)
{
    struct fi_info *hints = fi_allocinfo();
    if (!hints)
        return NULL;
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    if (hmem)
        hints->caps |= FI_HMEM;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    if (hmem)
        hints->domain_attr->mr_mode |= FI_MR_HMEM;
    /* A push is complete only when the bytes are in the target's memory:
     * RDMA_DONE follows on the control connection and the peer reads the
     * buffer right away. The default (inject) completion would only say
     * that our buffer may be reused. */
    hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->control_progress = FI_PROGRESS_UNSPEC;
    hints->domain_attr->data_progress = FI_PROGRESS_UNSPEC;
    /* The core name ("tcp") selects layered variants ("tcp;ofi_rxm") too. */
    const char *semi = strchr(want, ';');
    hints->fabric_attr->prov_name = semi ? strndup(want, (size_t)(semi - want)) : strdup(want);
    if (!hints->fabric_attr->prov_name) {
        fi_freeinfo(hints);
        return NULL;
    }
    return hints;
}

/* Finds the first usable fi_info for `want`; on failure writes why. */
static int select_info(const char *want, const char *node, int hmem, struct fi_info **out,
                       char *why, size_t whylen)
{
    struct fi_info *hints = make_hints(want, hmem), *list = NULL;
    if (!hints) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int is_shm = strcmp(want, "shm") == 0;
    int ret = fi_getinfo(TW_FABRIC_API, is_shm ? NULL : node, NULL, is_shm || !node ? 0 : FI_SOURCE,
                         hints, &list);
    fi_freeinfo(hints);
    if (ret) {
        snprintf(why, whylen, "fi_getinfo(%s%s%s): %s", want, node && !is_shm ? ", node " : "",
                 node && !is_shm ? node : "", fi_strerror(-ret));
        return ret == -FI_ENODATA ? TW_ENOFABRIC : ret;
    }
    const char *reject = "no RDM endpoint with FI_RMA";
    for (struct fi_info *fi = list; fi; fi = fi->next) {
        if (!prov_matches(fi->fabric_attr->prov_name, want)) {
            continue;
        }
        if (fi->domain_attr->mr_key_size > sizeof(uint64_t)) {
            reject = "keys longer than 8 bytes (FI_MR_RAW) do not fit RDMA_REGISTER";
            continue;
        }
        if (strlen(fi->fabric_attr->prov_name) > TW_MAX_PROVIDER_LEN) {
            reject = "provider name longer than 64 bytes";
            continue;
        }
        *out = fi_dupinfo(fi);
        fi_freeinfo(list);
        if (!*out) {
            snprintf(why, whylen, "out of memory");
            return -ENOMEM;
        }
        return 0;
    }
    fi_freeinfo(list);
    snprintf(why, whylen, "%s: %s", want, reject);
    return TW_ENOFABRIC;
}

int tw__fabric_io_lock(struct tw_fabric_rail *r)
{
    /* Held for one libfabric call, usually short: spin first, then wait
     * in slices that look at the rail. */
    if (tw__fabric_rail_wedged(r) || r->kept)
        return -ECONNABORTED;
    if (tw__fabric_spin_trylock(&r->io) == 0)
        return 0;
    for (;;) {
        if (tw__fabric_rail_wedged(r) || r->kept)
            return -ECONNABORTED;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_mutex_timedlock(&r->io, &ts) == 0)
            return 0;
    }
}

void tw__fabric_io_unlock(struct tw_fabric_rail *r)
{
    pthread_mutex_unlock(&r->io);
}

static int open_rail(struct tw_fabric_rail *r, struct fi_info *info, char *why, size_t whylen)
{
    const char *step;
    int ret;
    r->info = info;
    r->wait_fd = -1;
    r->mr_mode = info->domain_attr->mr_mode;
    r->max_msg = info->ep_attr->max_msg_size ? info->ep_attr->max_msg_size : SIZE_MAX;
    r->is_shm = strcmp(info->fabric_attr->prov_name, "shm") == 0;
    /* Unique non-zero start so requested keys of two planes rarely collide
     * and a key is never reused inside one domain. */
    r->next_key = ((uint64_t)getpid() << 32) | 1;
    if (r->is_shm) {
        /* A unique name per endpoint: two planes in one process would
         * otherwise both claim fi_shm://<pid>. */
        static unsigned shm_seq;
        char name[64];
        /* The pid in the name lets peers notice that we exited (addr.c);
         * the clock bits keep a reused pid from meeting the region a killed
         * process left in /dev/shm (seen: a peer inserted that stale one). */
        int len = snprintf(name, sizeof(name), "fi_shm://tw_%d_%u_%08x", (int)getpid(),
                           __atomic_fetch_add(&shm_seq, 1, __ATOMIC_RELAXED),
                           (unsigned)(tw__now_ns() & 0xffffffffu));
        char *dup = strdup(name);
        if (dup) {
            free(info->src_addr);
            info->src_addr = dup;
            info->src_addrlen = (size_t)len + 1;
        }
    }

    step = "fi_fabric";
    ret = fi_fabric(info->fabric_attr, &r->fabric, NULL);
    if (ret)
        goto out_fail;
    step = "fi_domain";
    ret = fi_domain(r->fabric, info, &r->domain, NULL);
    if (ret)
        goto out_close_fabric;

    struct fi_cq_attr cq_attr = {
        .format = FI_CQ_FORMAT_CONTEXT,
        .size = info->tx_attr->size > 256 ? info->tx_attr->size * 2 : 1024,
        .wait_obj = FI_WAIT_FD,
    };
    step = "fi_cq_open";
    ret = fi_cq_open(r->domain, &cq_attr, &r->cq, NULL);
    if (ret) {
        /* No wait fd on this provider: the mover polls with back-off. */
        cq_attr.wait_obj = FI_WAIT_NONE;
        ret = fi_cq_open(r->domain, &cq_attr, &r->cq, NULL);
    } else if (fi_control(&r->cq->fid, FI_GETWAIT, &r->wait_fd) != 0) {
        r->wait_fd = -1;
    }
    if (ret)
        goto out_close_domain;

    struct fi_av_attr av_attr = {.type = FI_AV_UNSPEC};
    step = "fi_av_open";
    ret = fi_av_open(r->domain, &av_attr, &r->av, NULL);
    if (ret)
        goto out_close_cq;
    step = "fi_endpoint";
    ret = fi_endpoint(r->domain, info, &r->ep, NULL);
    if (ret)
        goto out_close_av;
    step = "fi_ep_bind(cq)";
    ret = fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV);
    if (ret)
        goto out_close_ep;
    step = "fi_ep_bind(av)";
    ret = fi_ep_bind(r->ep, &r->av->fid, 0);
    if (ret)
        goto out_close_ep;
    step = "fi_enable";
    ret = fi_enable(r->ep);
    if (ret)
        goto out_close_ep;

    size_t alen = sizeof(r->addr.addr);
    step = "fi_getname";
    ret = fi_getname(&r->ep->fid, r->addr.addr, &alen);
    if (ret)
        goto out_close_ep;
    if (alen == 0 || alen > TW_MAX_FABRIC_ADDR_LEN) {
        ret = -EMSGSIZE;
        goto out_close_ep;
    }
    r->addr.addr_len = (uint16_t)alen;
    r->addr.addr_format = info->addr_format;
    snprintf(r->addr.provider, sizeof(r->addr.provider), "%s", info->fabric_attr->prov_name);
    return 0; /* the caller initialises r->io where the rail will live */

out_close_ep:
    fi_close(&r->ep->fid);
out_close_av:
    fi_close(&r->av->fid);
out_close_cq:
    fi_close(&r->cq->fid);
out_close_domain:
    fi_close(&r->domain->fid);
out_close_fabric:
    fi_close(&r->fabric->fid);
out_fail:
    snprintf(why, whylen, "%s: %s: %s", info->fabric_attr->prov_name, step, fi_strerror(-ret));
    fi_freeinfo(info);
    memset(r, 0, sizeof(*r));
    r->wait_fd = -1;
    return ret < 0 ? ret : -EIO;
}

void tw__fabric_rail_close(struct tw_fabric_rail *r)
{
    if (!r->info)
        return;
    if (tw__fabric_rail_wedged(r)) {
        /* A thread may still be inside a call on this endpoint (closing it
         * would wait for that thread, forever): leave it open. Once every
         * abandoned thread came back, tw__fabric_close() clears wedged. */
        return;
    }
    if (r->kept)
        return; /* operations outstanding: fi_close() of the endpoint crashes (fabric.h) */
    /* Order: endpoint before the objects bound to it, domain last. */
    pthread_mutex_destroy(&r->io);
    fi_close(&r->ep->fid);
    fi_close(&r->av->fid);
    fi_close(&r->cq->fid);
    fi_close(&r->domain->fid);
    fi_close(&r->fabric->fid);
    fi_freeinfo(r->info);
    memset(r, 0, sizeof(*r));
    r->wait_fd = -1;
}

int tw__fabric_rail_reopen(const struct tw_fabric_rail *old, struct tw_fabric_rail *r, char *why,
                           size_t whylen)
{
    memset(r, 0, sizeof(*r));
    r->wait_fd = -1;
    struct fi_info *info = fi_dupinfo(old->info);
    if (!info) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int ret = open_rail(r, info, why, whylen);
    if (ret == 0) {
        r->fab = old->fab;
        r->hmem = old->hmem;
        r->pref = old->pref;
    }
    return ret;
}

struct tw_fabric_rail *tw__fabric_rail_by_name(struct tw_fabric *fab, const uint8_t *name,
                                               size_t len)
{
    for (unsigned i = 0; i < fab->nrails; i++) {
        const struct tw_fabric_rail *r = &fab->rails[i];
        const char *p = r->addr.provider;
        if (r->info && !r->retired && strlen(p) == len && memcmp(p, name, len) == 0)
            return &fab->rails[i];
    }
    return NULL;
}

void tw__fabric_rails_describe_locked(struct tw_fabric *fab)
{
    /* Usable rails in preference order (a replacement takes the place of
     * the rail it replaces). */
    fab->naddrs = 0;
    for (unsigned pref = 0; pref < TW_FABRIC_MAX_SLOTS; pref++)
        for (unsigned k = 0; k < fab->nrails && fab->naddrs < TW_FABRIC_MAX_RAILS; k++)
            if (fab->rails[k].info && !fab->rails[k].retired && fab->rails[k].pref == pref)
                fab->addrs[fab->naddrs++] = fab->rails[k].addr;
    snprintf(fab->describe, sizeof(fab->describe), "rails:");
    for (unsigned k = 0; k < fab->naddrs; k++)
        append(fab->describe, sizeof(fab->describe), "%s%s", k ? ", " : " ",
               fab->addrs[k].provider);
    /* Device memory was asked for: name the rails that cannot register it. */
    if (fab->hmem) {
        int first = 1;
        for (unsigned k = 0; k < fab->nrails; k++)
            if (fab->rails[k].info && !fab->rails[k].retired && !fab->rails[k].hmem) {
                append(fab->describe, sizeof(fab->describe), "%s%s%s%s%s",
                       first ? "; host memory only (no FI_HMEM): " : ", ",
                       fab->rails[k].addr.provider, fab->rails[k].hmem_why[0] ? " (" : "",
                       fab->rails[k].hmem_why, fab->rails[k].hmem_why[0] ? ")" : "");
                first = 0;
            }
    }
    if (fab->naddrs == 0)
        append(fab->describe, sizeof(fab->describe), " none");
    if (fab->open_failed[0])
        append(fab->describe, sizeof(fab->describe), "; failed: %s", fab->open_failed);
    unsigned retired = 0, wedged = 0;
    for (unsigned k = 0; k < fab->nrails; k++) {
        retired +=
            fab->rails[k].info && fab->rails[k].retired && !tw__fabric_rail_wedged(&fab->rails[k]);
        wedged += (unsigned)tw__fabric_rail_wedged(&fab->rails[k]);
    }
    if (retired || wedged)
        append(fab->describe, sizeof(fab->describe), "; %u retired, %u wedged", retired, wedged);
}

/* Names libfabric could offer for RDM + RMA, for the "unknown provider"
 * message. */
static void list_available(int hmem, char *buf, size_t len)
{
    struct fi_info *hints = make_hints("x", hmem), *list = NULL;
    if (!hints)
        return;
    free(hints->fabric_attr->prov_name);
    hints->fabric_attr->prov_name = NULL;
    if (fi_getinfo(TW_FABRIC_API, NULL, NULL, 0, hints, &list) == 0) {
        const char *seen[16];
        unsigned nseen = 0;
        for (struct fi_info *fi = list; fi && nseen < 16; fi = fi->next) {
            int dup = 0;
            for (unsigned i = 0; i < nseen; i++)
                dup |= strcmp(seen[i], fi->fabric_attr->prov_name) == 0;
            if (!dup) {
                append(buf, len, "%s%s", nseen ? ", " : "", fi->fabric_attr->prov_name);
                seen[nseen++] = fi->fabric_attr->prov_name;
            }
        }
        fi_freeinfo(list);
    }
    fi_freeinfo(hints);
}

/* FI_HMEM is not free: libfabric's shm turns cross-memory attach (CMA) off
 * on an endpoint with FI_HMEM, so host memory moves through its bounce
 * buffers instead (seen on a GPU host: RDMA push over shm at 0.6x). A rail
 * keeps FI_HMEM only when it really registers CUDA memory: 1 when `r`
 * refuses cfg->hmem_probe (the reason in why), 0 when it registers it. */
static int refuses_cuda(struct tw_fabric_rail *r, const struct tw_fabric_config *cfg, char *why,
                        size_t whylen)
{
    struct tw_fabric_mr *m = NULL;
    int rc = tw__fabric_mr_register_on(r, cfg->hmem_probe, cfg->hmem_probe_len,
                                       TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE, TW_FABRIC_CUDA,
                                       cfg->hmem_probe_device, &m);
    if (rc < 0) {
        snprintf(why, whylen, "%s", tw__fabric_errmsg(r->fab));
        return 1;
    }
    tw__fabric_mr_deregister(m);
    return 0;
}

/* Closes `r` (opened with FI_HMEM, no peer yet) and opens the same provider
 * without it in the same slot, keeping r->hmem_why. 0 or a negative code
 * (why says). */
static int reopen_plain(struct tw_fabric_rail *r, const char *want, const char *node, char *why,
                        size_t whylen)
{
    struct tw_fabric *fab = r->fab;
    unsigned pref = r->pref;
    char hmem_why[sizeof(r->hmem_why)];
    snprintf(hmem_why, sizeof(hmem_why), "%s", r->hmem_why);
    tw__fabric_rail_close(r);
    struct fi_info *info = NULL;
    int ret = select_info(want, node, 0, &info, why, whylen);
    if (ret == 0)
        ret = open_rail(r, info, why, whylen);
    if (ret)
        return ret;
    pthread_mutex_init(&r->io, NULL);
    r->fab = fab;
    r->hmem = 0;
    r->pref = pref;
    snprintf(r->hmem_why, sizeof(r->hmem_why), "%s", hmem_why);
    return 0;
}

int tw__fabric_rails_open(struct tw_fabric *fab, const struct tw_fabric_config *cfg, char *err,
                          size_t errlen)
{
    const char *spec = cfg->provider ? cfg->provider : "auto";
    char names[8][TW_MAX_PROVIDER_LEN + 1];
    unsigned nnames = 0;
    int is_auto = strcmp(spec, "auto") == 0;
    char failed[768] = "";

    if (strcmp(spec, "none") == 0) {
        snprintf(err, errlen, "RDMA data plane disabled (provider \"none\")");
        return TW_ENOFABRIC;
    }
    if (is_auto) {
        for (size_t i = 0; i < sizeof(auto_order) / sizeof(auto_order[0]); i++)
            snprintf(names[nnames++], sizeof(names[0]), "%s", auto_order[i]);
    } else {
        /* Comma-separated list, bounded; empty items are errors. */
        const char *p = spec;
        while (*p) {
            const char *end = strchr(p, ',');
            size_t n = end ? (size_t)(end - p) : strlen(p);
            if (n == 0 || n > TW_MAX_PROVIDER_LEN || nnames == 8) {
                snprintf(err, errlen, "bad provider list \"%s\": %s", spec,
                         nnames == 8 ? "more than 8 names" : "empty or over-long name");
                return TW_ENOFABRIC;
            }
            memcpy(names[nnames], p, n);
            names[nnames++][n] = '\0';
            p = end ? end + 1 : p + n;
        }
        if (nnames == 0) {
            snprintf(err, errlen, "empty provider name");
            return TW_ENOFABRIC;
        }
    }
    /* The first use of libfabric in this process loads it (fi_api.h); a
     * machine without it has no fabric, for a reason the caller can print. */
    int lrc = tw__fabric_lib_load(err, errlen);
    if (lrc)
        return lrc;

    int last = TW_ENOFABRIC;
    for (unsigned i = 0; i < nnames && fab->nrails < TW_FABRIC_MAX_RAILS; i++) {
        char why[256] = "";
        struct fi_info *info = NULL;
        int hmem = cfg->hmem;
        int ret = select_info(names[i], cfg->node, hmem, &info, why, sizeof(why));
        if (ret != 0 && hmem) {
            /* This provider has no FI_HMEM (libfabric's tcp, for one): it
             * still moves host memory, so open it without; its rail never
             * registers device memory (hmem 0). Other providers keep
             * FI_HMEM: the choice is per rail, not per plane. */
            char plain_why[256] = "";
            if (select_info(names[i], cfg->node, 0, &info, plain_why, sizeof(plain_why)) == 0)
                ret = 0, hmem = 0;
        }
        if (ret == 0) {
            /* Two names for one provider ("tcp,tcp;ofi_rxm") open one rail. */
            for (unsigned k = 0; k < fab->nrails; k++)
                if (strcmp(fab->rails[k].addr.provider, info->fabric_attr->prov_name) == 0) {
                    fi_freeinfo(info);
                    info = NULL;
                }
            if (!info)
                continue;
            struct tw_fabric_rail *r = &fab->rails[fab->nrails];
            ret = open_rail(r, info, why, sizeof(why));
            if (ret == 0) {
                pthread_mutex_init(&r->io, NULL);
                r->fab = fab;
                r->hmem = hmem;
                r->pref = fab->nrails;
                if (hmem && cfg->hmem_probe &&
                    refuses_cuda(r, cfg, r->hmem_why, sizeof(r->hmem_why)))
                    ret = reopen_plain(r, names[i], cfg->node, why, sizeof(why));
                if (ret == 0) {
                    __atomic_store_n(&fab->nrails, fab->nrails + 1, __ATOMIC_RELEASE);
                    continue;
                }
            }
        }
        last = ret;
        append(failed, sizeof(failed), "%s%s (%s)", failed[0] ? "; " : "", names[i], why);
    }

    snprintf(fab->open_failed, sizeof(fab->open_failed), "%s", failed);
    tw__fabric_rails_describe_locked(fab);

    if (fab->nrails == 0) {
        snprintf(err, errlen, "no usable RDMA provider: %s", failed);
        if (!is_auto) {
            append(err, errlen, "; available here: ");
            size_t before = strlen(err);
            list_available(cfg->hmem, err, errlen);
            if (strlen(err) == before)
                append(err, errlen, "none");
        }
        return last == -FI_ENOMEM ? -ENOMEM : TW_ENOFABRIC;
    }
    return 0;
}
