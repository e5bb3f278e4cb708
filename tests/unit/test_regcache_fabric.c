/*
 * Registration cache in front of real libfabric registrations: the "tcp"
 * provider (layered under ofi_rxm for RDM endpoints with FI_RMA) on
 * loopback. Skips (77) when the provider is not available.
 */
#include <stdlib.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "mem/reg_fabric.h"
#include "mem/regcache.h"
#include "tensorwire/mem.h"
#include "tw_test.h"

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;

static void open_tcp(void)
{
    struct fi_info *hints = fi_allocinfo();
    TW_ASSERT(hints != NULL);
    hints->caps = FI_RMA | FI_MSG;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode =
        FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->fabric_attr->prov_name = strdup("tcp");
    int rc = fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", NULL, FI_SOURCE, hints, &info);
    fi_freeinfo(hints);
    if (rc)
        TW_SKIP("libfabric tcp provider with FI_RMA unavailable: fi_getinfo: %s", fi_strerror(-rc));
    fprintf(stderr, "provider %s, domain %s, mr_mode %#x\n", info->fabric_attr->prov_name,
            info->domain_attr->name, info->domain_attr->mr_mode);
    rc = fi_fabric(info->fabric_attr, &fabric, NULL);
    if (rc)
        TW_SKIP("fi_fabric(tcp): %s", fi_strerror(-rc));
    rc = fi_domain(fabric, info, &domain, NULL);
    if (rc)
        TW_SKIP("fi_domain(tcp): %s", fi_strerror(-rc));
}

static void real_registrations_are_cached(void)
{
    struct tw_fabric_registrar fr;
    tw__fabric_registrar_init(&fr, domain, info->domain_attr->mr_mode);
    struct tw_regcache *c = NULL;
    TW_ASSERT_OK(tw__regcache_create(NULL, &tw__fabric_registrar_ops, &fr, &c));

    size_t len = 4 << 20;
    char *buf = aligned_alloc(4096, len);
    TW_ASSERT(buf != NULL);
    memset(buf, 0x5a, len);
    TW_ASSERT_OK(tw_mem_register(buf, len, 0));

    char err[256] = "";
    struct tw_regcache_region *r1 = NULL, *r2 = NULL;
    uint32_t acc = TW_ACCESS_LOCAL_READ | TW_ACCESS_REMOTE_READ;
    int rc = tw__regcache_lookup(c, buf, len, acc, TW_MEMKIND_HOST, &r1, err, sizeof(err));
    if (rc)
        TW_FAIL("lookup: %s: %s", tw_strerror_name(rc), err);
    struct fid_mr *mr = tw__regcache_region_handle(r1);
    TW_ASSERT(mr != NULL);
    fprintf(stderr, "registered %p+%zu: key %#llx desc %p\n", (void *)buf, len,
            (unsigned long long)fi_mr_key(mr), fi_mr_desc(mr));
    tw__regcache_release(c, r1);

    TW_ASSERT_OK(
        tw__regcache_lookup(c, buf + 4096, 8192, acc, TW_MEMKIND_HOST, &r2, err, sizeof(err)));
    TW_ASSERT(tw__regcache_region_handle(r2) == mr);
    tw__regcache_release(c, r2);

    /* Different access rights: a second, separate MR. */
    TW_ASSERT_OK(tw__regcache_lookup(c, buf, 4096, TW_ACCESS_REMOTE_WRITE, TW_MEMKIND_HOST, &r2,
                                     err, sizeof(err)));
    TW_ASSERT(tw__regcache_region_handle(r2) != mr);
    tw__regcache_release(c, r2);

    struct tw_regcache_stats s;
    tw__regcache_stats(c, &s);
    TW_ASSERT_EQ(s.hits, 1);
    TW_ASSERT_EQ(s.registrations, 2);
    TW_ASSERT_EQ(s.entries, 2);

    /* Withdrawing the buffer closes both MRs. */
    TW_ASSERT_OK(tw_mem_unregister(buf));
    tw__regcache_stats(c, &s);
    TW_ASSERT_EQ(s.entries, 0);
    TW_ASSERT_EQ(s.deregistrations, 2);
    TW_ASSERT_OK(tw__regcache_destroy(c));
    free(buf);
}

int main(void)
{
    open_tcp();
    TW_RUN(real_registrations_are_cached);
    fi_close(&domain->fid);
    fi_close(&fabric->fid);
    fi_freeinfo(info);
    TW_DONE();
}
