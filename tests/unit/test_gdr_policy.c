/*
 * GPUDirect admission (src/gdr/): the sysfs reader against fixture trees
 * (tests/fixtures/gdr/<machine>/, each with a README saying what it
 * mirrors), PCIe distance classification, and the policy as a table of fact
 * structs: each predicate failing alone, BAR1 ranges, shm versus NIC-backed
 * providers, off and require.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gdr/admission.h"
#include "gdr/nics.h"
#include "gdr/pci.h"
#include "gdr/policy.h"
#include "gdr/sysfs.h"
#include "tw_test.h"

static const char *fixture_root(const char *machine)
{
    static char buf[512];
    const char *src = getenv("TW_SOURCE_DIR");
    snprintf(buf, sizeof(buf), "%s/tests/fixtures/gdr/%s", src ? src : ".", machine);
    return buf;
}

static struct tw_sysfs open_fixture(const char *machine)
{
    struct tw_sysfs fs;
    TW_ASSERT_OK(tw__sysfs_init(&fs, fixture_root(machine)));
    return fs;
}

/* A GPU that passes every GPU-side predicate, placed per the fixture. */
static struct tw_gdr_gpu_facts good_gpu(const struct tw_sysfs *fs)
{
    struct tw_gdr_gpu_facts g;
    memset(&g, 0, sizeof(g));
    g.ordinal = 0;
    snprintf(g.name, sizeof(g.name), "fixture GPU");
    g.gdr_supported = 1;
    g.dmabuf_supported = 1;
    g.dmabuf_export = 1;
    g.mig_enabled = 0;
    g.bar1_known = 1;
    g.bar1_total = 128ull << 30;
    g.bar1_free = 120ull << 30;
    if (fs) {
        TW_ASSERT_OK(tw__pci_dev_read(fs, "0000:03:00.0", &g.pci));
        g.pci_known = 1;
        snprintf(g.bdf, sizeof(g.bdf), "%s", g.pci.bdf);
    }
    return g;
}

static struct tw_gdr_provider_facts provider(const char *name, int hmem)
{
    struct tw_gdr_provider_facts p;
    memset(&p, 0, sizeof(p));
    snprintf(p.name, sizeof(p.name), "%s", name);
    p.kind = tw__gdr_prov_kind_of(name);
    p.hmem_cuda = hmem;
    p.dmabuf_mr = TW_GDR_UNKNOWN;
    return p;
}

static struct tw_gdr_nic_facts fixture_nic(const struct tw_sysfs *fs)
{
    struct tw_gdr_nic_facts nics[4];
    TW_ASSERT_EQ(tw__gdr_nics_read(fs, nics, 4), 1);
    TW_ASSERT_STR_EQ(nics[0].name, "mlx5_0");
    return nics[0];
}

static struct tw_gdr_config cfg_limit(enum tw_gdr_mode mode, enum tw_pcie_dist limit)
{
    struct tw_gdr_config c;
    tw__gdr_config_defaults(&c);
    c.mode = mode;
    c.max_distance = limit;
    return c;
}

/* Asserts the verdict failed on exactly predicate p with reason r. */
static void expect_only(const struct tw_gdr_verdict *v, enum tw_gdr_pred p, enum tw_gdr_reason r)
{
    TW_ASSERT_EQ(v->admitted, 0);
    TW_ASSERT_EQ(v->first_fail, p);
    TW_ASSERT_EQ(v->reason, r);
    int fails = 0;
    for (int i = 0; i < TW_GDR_P_COUNT; i++)
        fails += v->checks[i].status == TW_GDR_FAIL;
    if (fails != 1)
        TW_FAIL("predicate %s should fail alone, %d failed", tw__gdr_pred_name(p), fails);
    TW_ASSERT_EQ(v->use_dmabuf, 0);
}

static void test_normalize(void)
{
    char out[128];
    TW_ASSERT_OK(tw__sysfs_normalize("/a//b/./c/../d/", out, sizeof(out)));
    TW_ASSERT_STR_EQ(out, "/a/b/d");
    TW_ASSERT_OK(tw__sysfs_normalize("/../..", out, sizeof(out)));
    TW_ASSERT_STR_EQ(out, "/");
    TW_ASSERT_ERR(tw__sysfs_normalize("relative", out, sizeof(out)), TW_EINVAL);
    TW_ASSERT_ERR(tw__sysfs_normalize("/abcdef", out, 4), TW_EINVAL);
}

static void test_resolve_and_read(void)
{
    struct tw_sysfs fs = open_fixture("dgx-pxb");
    char real[TW_SYSFS_PATH_MAX];
    TW_ASSERT_OK(tw__sysfs_resolve(&fs, "/sys/bus/pci/devices/0000:03:00.0", real, sizeof(real)));
    TW_ASSERT_STR_EQ(real, "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/"
                           "0000:03:00.0");
    /* A link in the middle of a path. */
    TW_ASSERT_OK(tw__sysfs_resolve(&fs, "/sys/class/infiniband/mlx5_0/device/numa_node", real,
                                   sizeof(real)));
    TW_ASSERT(strstr(real, "/0000:06:00.0/numa_node") != NULL);
    TW_ASSERT_ERR(tw__sysfs_resolve(&fs, "/sys/bus/pci/devices/0000:99:00.0", real, sizeof(real)),
                  -ENOENT);
    uint64_t bits = 0;
    TW_ASSERT_OK(tw__sysfs_read_u64(&fs, "/sys/bus/pci/devices/0000:06:00.0/dma_mask_bits", &bits));
    TW_ASSERT_EQ_U64(bits, 64);
    char type[32];
    TW_ASSERT_EQ(tw__sysfs_read(&fs, "/sys/kernel/iommu_groups/20/type", type, sizeof(type)), 8);
    TW_ASSERT_STR_EQ(type, "identity");
}

static void test_pci_dev(void)
{
    struct tw_sysfs fs = open_fixture("dgx-pxb");
    struct tw_pci_dev d;
    TW_ASSERT_OK(tw__pci_dev_read(&fs, "00000000:03:00.0", &d)); /* CUDA's spelling */
    TW_ASSERT_STR_EQ(d.bdf, "0000:03:00.0");
    TW_ASSERT_EQ(d.numa_node, 0);
    TW_ASSERT_EQ(d.dma_mask_bits, 64);
    TW_ASSERT_EQ(d.iommu, TW_IOMMU_IDENTITY);
    TW_ASSERT_EQ_U64(d.bar_start[1], 0x38000000000ull);
    TW_ASSERT_EQ_U64(d.bar_end[1], 0x39fffffffffull);
    TW_ASSERT_ERR(tw__pci_dev_read(&fs, "0000:99:00.0", &d), -ENOENT);
    TW_ASSERT_ERR(tw__pci_dev_read(&fs, "zz:00.0", &d), TW_EINVAL);

    struct tw_sysfs none = open_fixture("no-iommu");
    TW_ASSERT_OK(tw__pci_dev_read(&none, "0000:03:00.0", &d));
    TW_ASSERT_EQ(d.iommu, TW_IOMMU_NONE);
    struct tw_sysfs tr = open_fixture("translated-iommu");
    TW_ASSERT_OK(tw__pci_dev_read(&tr, "0000:03:00.0", &d));
    TW_ASSERT_EQ(d.iommu, TW_IOMMU_TRANSLATED);
    TW_ASSERT_STR_EQ(d.iommu_type, "DMA-FQ");
}

static void test_iommu_kinds(void)
{
    TW_ASSERT_EQ(tw__iommu_kind("identity"), TW_IOMMU_IDENTITY);
    TW_ASSERT_EQ(tw__iommu_kind("DMA"), TW_IOMMU_TRANSLATED);
    TW_ASSERT_EQ(tw__iommu_kind("DMA-FQ"), TW_IOMMU_TRANSLATED);
    TW_ASSERT_EQ(tw__iommu_kind("unmanaged"), TW_IOMMU_TRANSLATED);
    TW_ASSERT_EQ(tw__iommu_kind("blocked"), TW_IOMMU_TRANSLATED);
    TW_ASSERT_EQ(tw__iommu_kind(""), TW_IOMMU_UNKNOWN);
    TW_ASSERT_EQ(tw__iommu_kind("something-new"), TW_IOMMU_UNKNOWN);
}

static void test_bdf(void)
{
    char out[16];
    TW_ASSERT_OK(tw__pci_bdf_normalize("00000000:1A:00.0", out, sizeof(out)));
    TW_ASSERT_STR_EQ(out, "0000:1a:00.0");
    TW_ASSERT_OK(tw__pci_bdf_normalize("05:1f.7", out, sizeof(out)));
    TW_ASSERT_STR_EQ(out, "0000:05:1f.7");
    TW_ASSERT_ERR(tw__pci_bdf_normalize("05:20.0", out, sizeof(out)), TW_EINVAL); /* dev > 31 */
    TW_ASSERT_ERR(tw__pci_bdf_normalize("05:00.8", out, sizeof(out)), TW_EINVAL);
    TW_ASSERT_ERR(tw__pci_bdf_normalize("05:00", out, sizeof(out)), TW_EINVAL);
    TW_ASSERT_ERR(tw__pci_bdf_normalize("", out, sizeof(out)), TW_EINVAL);
}

/* The pure classifier on synthetic paths. */
static void test_distance_table(void)
{
    static const struct {
        const char *a, *b;
        int na, nb;
        enum tw_pcie_dist want;
    } rows[] = {
        /* Same switch, two downstream ports. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
         "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:07:00.0", 0, 0,
         TW_PCIE_PIX},
        /* Same downstream port (two functions behind it). */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
         "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.1", 0, 0,
         TW_PCIE_PIX},
        /* Two switches deep on one side. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
         "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:04.0/0000:04:00.0/"
         "0000:05:00.0/0000:06:00.0",
         0, 0, TW_PCIE_PXB},
        /* One directly on the root port, the other behind a switch below it. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
         "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.1", 0, 0, TW_PCIE_PXB},
        /* Different root ports, one host bridge. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
         "/sys/devices/pci0000:00/0000:00:03.0/0000:08:00.0", 0, 0, TW_PCIE_PHB},
        /* Different host bridges, one NUMA node. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
         "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", 0, 0, TW_PCIE_NODE},
        /* Different NUMA nodes. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
         "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0", 0, 1, TW_PCIE_SYS},
        /* NUMA unknown on one side: fail closed. */
        {"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0",
         "/sys/devices/pci0000:40/0000:40:01.0/0000:41:00.0", 0, -1, TW_PCIE_SYS},
        /* Not a PCI path at all. */
        {"/sys/devices/virtual/net/lo", "/sys/devices/pci0000:00/0000:00:01.0", 0, 0, TW_PCIE_SYS},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        enum tw_pcie_dist d = tw__pcie_distance(rows[i].a, rows[i].na, rows[i].b, rows[i].nb);
        if (d != rows[i].want)
            TW_FAIL("row %zu: %s, want %s", i, tw__pcie_dist_name(d),
                    tw__pcie_dist_name(rows[i].want));
        /* Symmetric. */
        TW_ASSERT_EQ(tw__pcie_distance(rows[i].b, rows[i].nb, rows[i].a, rows[i].na), d);
    }
    enum tw_pcie_dist p;
    TW_ASSERT_OK(tw__pcie_dist_parse("pxb", &p));
    TW_ASSERT_EQ(p, TW_PCIE_PXB);
    TW_ASSERT_ERR(tw__pcie_dist_parse("far", &p), TW_EINVAL);
}

/* Every fixture topology, accepted at its own distance and rejected one
 * step below it. */
static void test_fixture_distances(void)
{
    static const struct {
        const char *machine;
        enum tw_pcie_dist dist;
    } rows[] = {{"pix", TW_PCIE_PIX},
                {"dgx-pxb", TW_PCIE_PXB},
                {"phb", TW_PCIE_PHB},
                {"node", TW_PCIE_NODE},
                {"sys", TW_PCIE_SYS}};
    struct tw_gdr_provider_facts verbs = provider("verbs", 1);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct tw_sysfs fs = open_fixture(rows[i].machine);
        struct tw_gdr_gpu_facts g = good_gpu(&fs);
        struct tw_gdr_nic_facts nic = fixture_nic(&fs);
        struct tw_gdr_config at = cfg_limit(TW_GDR_MODE_AUTO, rows[i].dist);
        struct tw_gdr_verdict v;
        if (!tw__gdr_decide(&at, &g, &verbs, &nic, &v))
            TW_FAIL("%s at limit %s: rejected (%s)", rows[i].machine,
                    tw__pcie_dist_name(rows[i].dist), tw__gdr_reason_str(v.reason));
        TW_ASSERT_EQ(v.distance, rows[i].dist);
        if (rows[i].dist > TW_PCIE_PIX) {
            struct tw_gdr_config below = cfg_limit(TW_GDR_MODE_AUTO, rows[i].dist - 1);
            tw__gdr_decide(&below, &g, &verbs, &nic, &v);
            expect_only(&v, TW_GDR_P_PCIE, TW_GDR_R_PCIE_TOO_FAR);
        }
        /* The default limit is PXB. */
        struct tw_gdr_config def;
        tw__gdr_config_defaults(&def);
        TW_ASSERT_EQ(tw__gdr_decide(&def, &g, &verbs, &nic, &v), rows[i].dist <= TW_PCIE_PXB);
    }
}

static void test_each_predicate_alone(void)
{
    struct tw_sysfs fs = open_fixture("dgx-pxb");
    struct tw_gdr_nic_facts nic = fixture_nic(&fs);
    struct tw_gdr_config cfg = cfg_limit(TW_GDR_MODE_AUTO, TW_PCIE_PXB);
    struct tw_gdr_provider_facts verbs = provider("verbs", 1);
    struct tw_gdr_verdict v;

    struct tw_gdr_gpu_facts g = good_gpu(&fs);
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &nic, &v), 1);
    TW_ASSERT_EQ(v.reason, TW_GDR_R_OK);
    TW_ASSERT_EQ(v.first_fail, TW_GDR_P_COUNT);

    struct tw_gdr_config off = cfg_limit(TW_GDR_MODE_OFF, TW_PCIE_PXB);
    tw__gdr_decide(&off, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_ENABLED, TW_GDR_R_DISABLED);

    struct tw_gdr_provider_facts nohmem = provider("verbs", 0);
    snprintf(nohmem.detail, sizeof(nohmem.detail), "fi_mr_regattr: Function not implemented");
    tw__gdr_decide(&cfg, &g, &nohmem, &nic, &v);
    expect_only(&v, TW_GDR_P_PROVIDER_HMEM, TW_GDR_R_PROVIDER_NO_HMEM);
    struct tw_gdr_provider_facts unprobed = provider("verbs", TW_GDR_UNKNOWN);
    tw__gdr_decide(&cfg, &g, &unprobed, &nic, &v);
    expect_only(&v, TW_GDR_P_PROVIDER_HMEM, TW_GDR_R_PROVIDER_UNPROBED);

    g = good_gpu(&fs);
    g.gdr_supported = 0;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_GPU_ATTR, TW_GDR_R_GPU_NO_GDR);
    g.gdr_supported = TW_GDR_UNKNOWN;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_GPU_ATTR, TW_GDR_R_GPU_GDR_UNKNOWN);

    g = good_gpu(&fs);
    g.mig_enabled = 1;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_MIG, TW_GDR_R_MIG_ON);
    g.mig_enabled = TW_GDR_UNKNOWN;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_MIG, TW_GDR_R_MIG_UNKNOWN);

    g = good_gpu(&fs);
    g.bar1_total = 0;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_BAR1, TW_GDR_R_NO_BAR1);
    g = good_gpu(&fs);
    g.bar1_known = 0;
    tw__gdr_decide(&cfg, &g, &verbs, &nic, &v);
    expect_only(&v, TW_GDR_P_BAR1, TW_GDR_R_NO_BAR1);

    /* IOMMU identity versus translated, and no IOMMU at all. */
    struct tw_sysfs tr = open_fixture("translated-iommu");
    g = good_gpu(&tr);
    struct tw_gdr_nic_facts trnic = fixture_nic(&tr);
    tw__gdr_decide(&cfg, &g, &verbs, &trnic, &v);
    expect_only(&v, TW_GDR_P_IOMMU, TW_GDR_R_IOMMU_TRANSLATED);
    struct tw_sysfs none = open_fixture("no-iommu");
    g = good_gpu(&none);
    struct tw_gdr_nic_facts nonic = fixture_nic(&none);
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &nonic, &v), 1);
    /* Identity on one end, translated on the other. */
    g = good_gpu(&fs);
    struct tw_gdr_nic_facts mixed = nic;
    mixed.pci.iommu = TW_IOMMU_TRANSLATED;
    tw__gdr_decide(&cfg, &g, &verbs, &mixed, &v);
    expect_only(&v, TW_GDR_P_IOMMU, TW_GDR_R_IOMMU_TRANSLATED);
    mixed.pci.iommu = TW_IOMMU_UNKNOWN;
    tw__gdr_decide(&cfg, &g, &verbs, &mixed, &v);
    expect_only(&v, TW_GDR_P_IOMMU, TW_GDR_R_IOMMU_UNKNOWN);

    /* A 32-bit NIC against a BAR1 above 4 GiB. */
    struct tw_sysfs d32 = open_fixture("dma32");
    g = good_gpu(&d32);
    struct tw_gdr_nic_facts d32nic = fixture_nic(&d32);
    TW_ASSERT_EQ(d32nic.pci.dma_mask_bits, 32);
    tw__gdr_decide(&cfg, &g, &verbs, &d32nic, &v);
    expect_only(&v, TW_GDR_P_DMA_MASK, TW_GDR_R_DMA_MASK_SHORT);
    /* ...which passes when BAR1 sits below 4 GiB. */
    g.pci.bar_start[1] = 0xc0000000ull;
    g.pci.bar_end[1] = 0xcfffffffull;
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &d32nic, &v), 1);
    /* Unknown mask. */
    g = good_gpu(&fs);
    struct tw_gdr_nic_facts nomask = nic;
    nomask.pci.dma_mask_bits = 0;
    tw__gdr_decide(&cfg, &g, &verbs, &nomask, &v);
    expect_only(&v, TW_GDR_P_DMA_MASK, TW_GDR_R_DMA_MASK_UNKNOWN);
}

static void test_require_and_no_gpu(void)
{
    struct tw_sysfs fs = open_fixture("sys");
    struct tw_gdr_gpu_facts g = good_gpu(&fs);
    struct tw_gdr_nic_facts nic = fixture_nic(&fs);
    struct tw_gdr_provider_facts verbs = provider("verbs", 1);
    struct tw_gdr_config req = cfg_limit(TW_GDR_MODE_REQUIRE, TW_PCIE_PXB);
    struct tw_gdr_verdict v;
    /* require does not bend the rules: the caller refuses to start and
     * names the failing predicate. */
    TW_ASSERT_EQ(tw__gdr_decide(&req, &g, &verbs, &nic, &v), 0);
    TW_ASSERT_STR_EQ(tw__gdr_pred_name(v.first_fail), "pcie_distance");
    TW_ASSERT(strlen(tw__gdr_reason_fix(v.reason)) > 0);
    TW_ASSERT_EQ(v.distance, TW_PCIE_SYS);

    tw__gdr_decide(&req, NULL, &verbs, &nic, &v);
    TW_ASSERT_EQ(v.admitted, 0);
    TW_ASSERT_EQ(v.reason, TW_GDR_R_NO_GPU);
    TW_ASSERT_EQ(v.first_fail, TW_GDR_P_PROVIDER_RDMA);
}

static void test_shm_vs_nic(void)
{
    /* shm moves GPU memory by CUDA IPC: NIC predicates do not apply, even on
     * a machine whose IOMMU translates and with no NIC at all. */
    struct tw_sysfs tr = open_fixture("translated-iommu");
    struct tw_gdr_gpu_facts g = good_gpu(&tr);
    struct tw_gdr_provider_facts shm = provider("shm", 1);
    shm.dmabuf_mr = 1;
    struct tw_gdr_config cfg = cfg_limit(TW_GDR_MODE_AUTO, TW_PCIE_PIX);
    struct tw_gdr_verdict v;
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &shm, NULL, &v), 1);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_IOMMU].status, TW_GDR_NA);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_IOMMU].reason, TW_GDR_R_HOST_LOCAL);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_DMA_MASK].status, TW_GDR_NA);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_PCIE].status, TW_GDR_NA);
    TW_ASSERT_EQ(v.use_dmabuf, 0); /* CUDA IPC, not dma-buf */
    /* shm without CUDA in its libfabric: not admitted, for that reason. */
    struct tw_gdr_provider_facts shm_nohmem = provider("shm", 0);
    tw__gdr_decide(&cfg, &g, &shm_nohmem, NULL, &v);
    expect_only(&v, TW_GDR_P_PROVIDER_HMEM, TW_GDR_R_PROVIDER_NO_HMEM);
    /* tcp copies through sockets: never GPUDirect, whatever it registers. */
    struct tw_gdr_provider_facts tcp = provider("tcp;ofi_rxm", 1);
    TW_ASSERT_EQ(tcp.kind, TW_GDR_PROV_SOCKET);
    tw__gdr_decide(&cfg, &g, &tcp, NULL, &v);
    TW_ASSERT_EQ(v.admitted, 0);
    TW_ASSERT_EQ(v.first_fail, TW_GDR_P_PROVIDER_RDMA);
    TW_ASSERT_EQ(v.reason, TW_GDR_R_PROVIDER_SOCKET);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_PCIE].status, TW_GDR_NA);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_PCIE].reason, TW_GDR_R_PROVIDER_SOCKET);
    TW_ASSERT_EQ(tw__gdr_prov_kind_of("verbs;ofi_rxm"), TW_GDR_PROV_NIC);
    TW_ASSERT_EQ(tw__gdr_prov_kind_of("efa"), TW_GDR_PROV_NIC);
    TW_ASSERT_EQ(tw__gdr_prov_kind_of("shm"), TW_GDR_PROV_HOST_LOCAL);
    /* A NIC-backed provider with no NIC found. */
    struct tw_gdr_provider_facts verbs = provider("verbs", 1);
    tw__gdr_decide(&cfg, &g, &verbs, NULL, &v);
    TW_ASSERT_EQ(v.admitted, 0);
    TW_ASSERT_EQ(v.first_fail, TW_GDR_P_IOMMU);
    TW_ASSERT_EQ(v.reason, TW_GDR_R_NO_NIC);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_PCIE].reason, TW_GDR_R_NO_NIC);
}

static void test_dmabuf_choice(void)
{
    struct tw_sysfs fs = open_fixture("pix");
    struct tw_gdr_gpu_facts g = good_gpu(&fs);
    struct tw_gdr_nic_facts nic = fixture_nic(&fs);
    struct tw_gdr_config cfg = cfg_limit(TW_GDR_MODE_AUTO, TW_PCIE_PXB);
    struct tw_gdr_provider_facts verbs = provider("verbs", 1);
    struct tw_gdr_verdict v;
    /* libfabric without FI_MR_DMABUF (1.17): pointer registration. */
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &nic, &v), 1);
    TW_ASSERT_EQ(v.use_dmabuf, 0);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_DMABUF].reason, TW_GDR_R_DMABUF_NOT_USED);
    verbs.dmabuf_mr = 1;
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &nic, &v), 1);
    TW_ASSERT_EQ(v.use_dmabuf, 1);
    TW_ASSERT_EQ(v.checks[TW_GDR_P_DMABUF].reason, TW_GDR_R_DMABUF_USED);
    /* The export failing keeps GPUDirect, by pointer. */
    g.dmabuf_export = 0;
    TW_ASSERT_EQ(tw__gdr_decide(&cfg, &g, &verbs, &nic, &v), 1);
    TW_ASSERT_EQ(v.use_dmabuf, 0);
}

static void test_bar1_ranges(void)
{
    const uint64_t G = 1ull << 30;
    /* Window [16 GiB, 16 GiB + 8 GiB). */
    TW_ASSERT_OK(tw__gdr_range_inside(16 * G, 8 * G, 16 * G, 8 * G));           /* exactly */
    TW_ASSERT_OK(tw__gdr_range_inside(16 * G, 8 * G, 20 * G, 64 << 10));        /* inside */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 23 * G, 2 * G), -ENOSPC); /* spans end */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 15 * G, 2 * G), -ENOSPC); /* spans start */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 30 * G, 1), -ENOSPC);     /* outside */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 0, 1), -ENOSPC);          /* below */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 20 * G, 0), TW_EINVAL);   /* empty */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, UINT64_MAX - 10, 64), -ERANGE);
    TW_ASSERT_ERR(tw__gdr_range_inside(0, UINT64_MAX, UINT64_MAX, 1), -ERANGE);
    /* A huge length that would wrap a naive start+len check. */
    TW_ASSERT_ERR(tw__gdr_range_inside(16 * G, 8 * G, 17 * G, UINT64_MAX - 17 * G), -ENOSPC);
    /* An empty window admits nothing. */
    TW_ASSERT_ERR(tw__gdr_range_inside(0, 0, 0, 1), -ENOSPC);
}

static void test_nics_and_names(void)
{
    struct tw_sysfs fs = open_fixture("dgx-pxb");
    struct tw_gdr_nic_facts nics[2];
    TW_ASSERT_EQ(tw__gdr_nics_read(&fs, nics, 2), 1);
    TW_ASSERT_STR_EQ(nics[0].pci.bdf, "0000:06:00.0");
    struct tw_gdr_gpu_facts g = good_gpu(&fs);
    TW_ASSERT(tw__gdr_nic_closest(&g, nics, 1) == &nics[0]);
    TW_ASSERT(tw__gdr_nic_closest(&g, nics, 0) == NULL);
    /* A root without an RDMA stack. */
    struct tw_sysfs empty;
    TW_ASSERT_OK(tw__sysfs_init(&empty, "/nonexistent-tw-root"));
    TW_ASSERT_EQ(tw__gdr_nics_read(&empty, nics, 2), 0);

    enum tw_gdr_mode m;
    TW_ASSERT_OK(tw__gdr_mode_parse("require", &m));
    TW_ASSERT_EQ(m, TW_GDR_MODE_REQUIRE);
    TW_ASSERT_ERR(tw__gdr_mode_parse("on", &m), TW_EINVAL);
    for (int r = 0; r < TW_GDR_R_COUNT; r++)
        TW_ASSERT(tw__gdr_reason_str((enum tw_gdr_reason)r)[0] != '?');
    for (int p = 0; p < TW_GDR_P_COUNT; p++)
        TW_ASSERT(tw__gdr_pred_name((enum tw_gdr_pred)p)[0] != '?');
}

/* The verdict table (gdr/admission.h): every (provider, GPU) cell equals
 * the pure decision over the same facts; rows resolve by core provider
 * name; off, require's sentence, out-of-range cells. */
static void test_table(void)
{
    struct tw_gdr_machine *m = calloc(1, sizeof(*m));
    TW_ASSERT(m != NULL);
    m->ngpus = 3;
    for (int i = 0; i < 3; i++) {
        m->gpus[i] = good_gpu(NULL);
        m->gpus[i].ordinal = i;
        m->gpus[i].flush_needed = i == 0;
    }
    m->gpus[1].mig_enabled = 1; /* cuda:1 fails alone on MIG */
    m->gpus[2].bar1_known = 0;  /* cuda:2 fails alone on BAR1 */
    m->gpus[2].bar1_total = 0;
    m->nprov = 3;
    m->provs[0].facts = provider("shm", 1);
    m->provs[1].facts = provider("tcp", 1);
    m->provs[2].facts = provider("verbs", 0);
    struct tw_gdr_config cfg = cfg_limit(TW_GDR_MODE_AUTO, TW_PCIE_PXB);
    struct tw_gdr_table *t = malloc(sizeof(*t));
    TW_ASSERT(t != NULL);
    tw__gdr_table_build(t, m, &cfg);
    TW_ASSERT_EQ(t->ngpus, 3);
    TW_ASSERT_EQ(t->nprov, 3);
    for (int p = 0; p < 3; p++) {
        for (int g = 0; g < 3; g++) {
            struct tw_gdr_verdict v;
            int adm = tw__gdr_machine_decide(m, &cfg, g, p, &v, NULL);
            TW_ASSERT_EQ(tw__gdr_table_admitted(t, p, g), adm);
            TW_ASSERT_EQ(tw__gdr_table_get(t, p, g)->reason, v.reason);
        }
    }
    TW_ASSERT_EQ(tw__gdr_table_admitted(t, 0, 0), 1);
    expect_only(tw__gdr_table_get(t, 0, 1), TW_GDR_P_MIG, TW_GDR_R_MIG_ON);
    expect_only(tw__gdr_table_get(t, 0, 2), TW_GDR_P_BAR1, TW_GDR_R_NO_BAR1);
    TW_ASSERT_EQ(tw__gdr_table_get(t, 1, 0)->reason, TW_GDR_R_PROVIDER_SOCKET);
    TW_ASSERT_EQ(tw__gdr_table_get(t, 2, 0)->reason, TW_GDR_R_PROVIDER_NO_HMEM);
    TW_ASSERT_EQ(t->admitted_any[0], 1);
    TW_ASSERT_EQ(t->admitted_any[1], 0);
    TW_ASSERT_EQ(t->admitted_any[2], 0);
    TW_ASSERT_EQ(t->flush_needed[0], 1);
    TW_ASSERT_EQ(t->flush_needed[1], 0);
    /* Rows by name: the core provider matches, a longer name does not. */
    TW_ASSERT_EQ(tw__gdr_table_provider(t, "shm"), 0);
    TW_ASSERT_EQ(tw__gdr_table_provider(t, "tcp;ofi_rxm"), 1);
    TW_ASSERT_EQ(tw__gdr_table_provider(t, "verbs;ofi_rxm"), 2);
    TW_ASSERT_EQ(tw__gdr_table_provider(t, "shmx"), -1);
    TW_ASSERT_EQ(tw__gdr_table_provider(t, "efa"), -1);
    TW_ASSERT_EQ(tw__gdr_table_provider(t, NULL), -1);
    /* Out of range: no facts, not admitted. */
    TW_ASSERT(tw__gdr_table_get(t, 0, 3) == NULL);
    TW_ASSERT(tw__gdr_table_get(t, -1, 0) == NULL);
    TW_ASSERT(tw__gdr_table_get(t, 3, 0) == NULL);
    TW_ASSERT(tw__gdr_table_get(NULL, 0, 0) == NULL);
    TW_ASSERT_EQ(tw__gdr_table_admitted(t, 0, -1), 0);
    /* require's sentence names the GPU, provider, predicate and reason. */
    char why[320];
    tw__gdr_table_why_not(t, 2, why, sizeof(why));
    TW_ASSERT(strstr(why, "cuda:") && strstr(why, "on verbs: provider_hmem: ") != NULL);
    tw__gdr_table_why_not(t, 0, why, sizeof(why));
    TW_ASSERT_STR_EQ(why, "cuda:0 on shm: admitted");
    /* --gpudirect off: nothing admitted anywhere, for that reason. */
    struct tw_gdr_config off = cfg_limit(TW_GDR_MODE_OFF, TW_PCIE_PXB);
    tw__gdr_table_build(t, m, &off);
    TW_ASSERT_EQ(t->admitted_any[0], 0);
    TW_ASSERT_EQ(tw__gdr_table_get(t, 0, 0)->reason, TW_GDR_R_DISABLED);
    /* No GPU. */
    m->ngpus = 0;
    tw__gdr_table_build(t, m, &cfg);
    TW_ASSERT_STR_EQ(tw__gdr_table_why_not(t, 0, why, sizeof(why)), "no GPU here");
    TW_ASSERT_EQ(tw__gdr_table_admitted(t, 0, 0), 0);
    free(t);
    free(m);
}

int main(void)
{
    TW_RUN(test_normalize);
    TW_RUN(test_resolve_and_read);
    TW_RUN(test_pci_dev);
    TW_RUN(test_iommu_kinds);
    TW_RUN(test_bdf);
    TW_RUN(test_distance_table);
    TW_RUN(test_fixture_distances);
    TW_RUN(test_each_predicate_alone);
    TW_RUN(test_require_and_no_gpu);
    TW_RUN(test_shm_vs_nic);
    TW_RUN(test_dmabuf_choice);
    TW_RUN(test_bar1_ranges);
    TW_RUN(test_nics_and_names);
    TW_RUN(test_table);
    TW_DONE();
}
