/*
 * Server devices without a GPU: --devices and --capacity parsing, the
 * resolution against a fixture host (gpu_count, free memory), the put
 * admission decision as a table, and per-device accounting in the store
 * with a host-memory double of the device allocator.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/config.h"
#include "server/devices.h"
#include "server/store.h"
#include "tw_test.h"
#include "tw_test_gpu.h"

static void test_parse_devices(void)
{
    struct tw_device d[TW_SRV_MAX_DEVICES];
    unsigned n = 99;
    char err[256];
    TW_ASSERT_OK(
        tw__srv_parse_devices("cpu,cuda:0,cuda:1", d, TW_SRV_MAX_DEVICES, &n, err, sizeof(err)));
    TW_ASSERT_EQ(n, 3);
    TW_ASSERT_EQ(d[0].type, TW_DEVICE_CPU);
    TW_ASSERT_EQ(d[1].type, TW_DEVICE_CUDA);
    TW_ASSERT_EQ(d[1].ordinal, 0);
    TW_ASSERT_EQ(d[2].ordinal, 1);
    TW_ASSERT_OK(tw__srv_parse_devices("cuda:3", d, TW_SRV_MAX_DEVICES, &n, err, sizeof(err)));
    TW_ASSERT_EQ(n, 1);
    TW_ASSERT_EQ(d[0].ordinal, 3);
    const char *bad[] = {"",        "cpu,",       ",cpu",          "cpu,,cuda:0",
                         "cuda:01", "cpu,cpu",    "cuda:1,cuda:1", "cuda:256",
                         "rocm:0",  "cpu cuda:0", "CPU",           "cuda"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = 77;
        err[0] = '\0';
        TW_ASSERT_ERR(tw__srv_parse_devices(bad[i], d, TW_SRV_MAX_DEVICES, &n, err, sizeof(err)),
                      TW_EINVAL);
        TW_ASSERT_EQ(n, 77); /* untouched */
        TW_ASSERT(err[0] != '\0');
        fprintf(stderr, "  '%s': %s\n", bad[i], err);
    }
    TW_ASSERT_ERR(tw__srv_parse_devices("cpu,cuda:0,cuda:1", d, 2, &n, err, sizeof(err)),
                  TW_EINVAL);
}

static void test_parse_capacity(void)
{
    struct tw_srv_config c;
    char err[256];
    tw__srv_config_defaults(&c);
    /* A bare size keeps meaning the CPU's. */
    TW_ASSERT_OK(tw__srv_parse_capacity("2Gi", &c, err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.capacity, 2ull << 30);
    TW_ASSERT_EQ(c.ncapacities, 0);
    TW_ASSERT_OK(tw__srv_parse_capacity("cpu=64Gi,cuda:0=40Gi,cuda:3=0", &c, err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.capacity, 64ull << 30);
    TW_ASSERT_EQ(c.ncapacities, 2);
    TW_ASSERT_EQ(c.capacities[0].dev.ordinal, 0);
    TW_ASSERT_EQ_U64(c.capacities[0].bytes, 40ull << 30);
    TW_ASSERT_EQ(c.capacities[1].dev.ordinal, 3);
    TW_ASSERT_EQ_U64(c.capacities[1].bytes, 0);
    /* Only GPUs: the CPU's stays. */
    TW_ASSERT_OK(tw__srv_parse_capacity("cuda:1=1G", &c, err, sizeof(err)));
    TW_ASSERT_EQ_U64(c.capacity, 64ull << 30);
    TW_ASSERT_EQ(c.ncapacities, 1);
    const char *bad[] = {
        "lots",       "cpu=",      "=1G",     "cpu=1G,cpu=2G", "cuda:0=1G,cuda:0=2G",
        "cuda:01=1G", "rocm:0=1G", "cpu=1G,", "cpu:1G",        "cuda:0=1X"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = '\0';
        TW_ASSERT_ERR(tw__srv_parse_capacity(bad[i], &c, err, sizeof(err)), TW_EINVAL);
        TW_ASSERT_EQ_U64(c.capacity, 64ull << 30); /* unchanged */
        TW_ASSERT_EQ(c.ncapacities, 1);
        fprintf(stderr, "  '%s': %s\n", bad[i], err);
    }
    /* Through the option setter and argv, with the option's name in the
     * error. */
    char *argv[] = {"tensorwired", "--devices", "cpu,cuda:1", "--capacity=cpu=1Gi,cuda:1=2Gi",
                    NULL};
    TW_ASSERT_OK(tw__srv_config_from_args(&c, 4, argv, err, sizeof(err)));
    TW_ASSERT_EQ(c.ndevices, 2);
    TW_ASSERT_EQ_U64(c.capacity, 1ull << 30);
    TW_ASSERT_EQ_U64(c.capacities[0].bytes, 2ull << 30);
    TW_ASSERT_ERR(tw__srv_config_set(&c, "devices", "cuda:01", err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "devices") != NULL);
    TW_ASSERT_ERR(tw__srv_config_set(&c, "capacity", "gpu=1", err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "capacity") != NULL);
}

static void test_resolve(void)
{
    struct tw_srv_config c;
    struct tw_srv_devices t;
    char err[256];
    const uint64_t free2[2] = {80ull << 30, 4000};
    tw__srv_config_defaults(&c);
    c.capacity = 1000;
    /* Default: cpu and every GPU, each GPU 3/4 of its free memory. */
    TW_ASSERT_OK(tw__srv_devices_resolve(&c, 2, free2, &t, err, sizeof(err)));
    TW_ASSERT_EQ(t.n, 3);
    TW_ASSERT_EQ(t.d[0].dev.type, TW_DEVICE_CPU);
    TW_ASSERT_EQ_U64(t.d[0].capacity, 1000);
    TW_ASSERT_EQ(t.d[2].dev.ordinal, 1);
    TW_ASSERT_EQ_U64(t.d[1].capacity, 60ull << 30);
    TW_ASSERT_EQ_U64(t.d[2].capacity, 3000);
    char list[128];
    tw__srv_devices_format(&t, list, sizeof(list));
    TW_ASSERT_STR_EQ(list, "cpu, cuda:0, cuda:1");
    /* No GPU: cpu only. */
    TW_ASSERT_OK(tw__srv_devices_resolve(&c, 0, NULL, &t, err, sizeof(err)));
    TW_ASSERT_EQ(t.n, 1);
    /* Explicit list and capacities. */
    TW_ASSERT_OK(tw__srv_parse_devices("cuda:1,cpu", c.devices, TW_SRV_MAX_DEVICES, &c.ndevices,
                                       err, sizeof(err)));
    TW_ASSERT_OK(tw__srv_parse_capacity("cuda:1=2G", &c, err, sizeof(err)));
    TW_ASSERT_OK(tw__srv_devices_resolve(&c, 2, free2, &t, err, sizeof(err)));
    TW_ASSERT_EQ(t.n, 2);
    TW_ASSERT_EQ(t.d[0].dev.ordinal, 1);
    TW_ASSERT_EQ_U64(t.d[0].capacity, 2000000000ull);
    tw__srv_devices_format(&t, list, sizeof(list));
    TW_ASSERT_STR_EQ(list, "cuda:1, cpu");
    /* A GPU this host does not have; a capacity for a device not served. */
    TW_ASSERT_ERR(tw__srv_devices_resolve(&c, 1, free2, &t, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "cuda:1 is not present") != NULL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT_OK(tw__srv_parse_capacity("cuda:0=1G", &c, err, sizeof(err)));
    TW_ASSERT_ERR(tw__srv_devices_resolve(&c, 2, free2, &t, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "cuda:0") != NULL);
    fprintf(stderr, "  %s\n", err);
    /* A GPU whose free memory is unknown (0) needs an explicit capacity
     * (0 would read as unlimited). */
    const uint64_t nofree[2] = {0, 4000};
    c.ndevices = 0;
    TW_ASSERT_OK(tw__srv_parse_capacity("cuda:1=2G", &c, err, sizeof(err)));
    TW_ASSERT_ERR(tw__srv_devices_resolve(&c, 2, nofree, &t, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT(strstr(err, "cuda:0: no free memory known") != NULL);
    fprintf(stderr, "  %s\n", err);
    TW_ASSERT_OK(tw__srv_parse_capacity("cuda:0=5,cuda:1=2G", &c, err, sizeof(err)));
    TW_ASSERT_OK(tw__srv_devices_resolve(&c, 2, nofree, &t, err, sizeof(err)));
    TW_ASSERT_EQ_U64(t.d[1].capacity, 5);
    TW_ASSERT_EQ_U64(t.d[2].capacity, 2000000000ull);
}

/* The admission decision as a table: host with 2 GPUs, serving cpu and
 * cuda:1 only; cuda:1 has 100 bytes free, the CPU none (its capacity is the
 * store's CAPACITY_EXCEEDED, not a device verdict). */
static void test_admit_table(void)
{
    struct tw_srv_devices t = {.n = 2};
    t.d[0].dev = (struct tw_device){TW_DEVICE_CPU, -1};
    t.d[1].dev = (struct tw_device){TW_DEVICE_CUDA, 1};
    const uint64_t free_bytes[2] = {0, 100};
    const struct {
        const char *tag;
        uint64_t bytes;
        enum tw_srv_device_reason reason;
        int index;
    } rows[] = {
        {"cpu", 5000, TW_SRV_DEVICE_OK, 0},          {"cuda:1", 100, TW_SRV_DEVICE_OK, 1},
        {"cuda:1", 0, TW_SRV_DEVICE_OK, 1},          {"cuda:1", 101, TW_SRV_DEVICE_NO_ROOM, 1},
        {"cuda:0", 1, TW_SRV_DEVICE_NOT_SERVED, -1}, {"cuda:2", 1, TW_SRV_DEVICE_ABSENT, -1},
        {"cuda:255", 1, TW_SRV_DEVICE_ABSENT, -1},   {"rocm:0", 1, TW_SRV_DEVICE_UNKNOWN_KIND, -1},
        {"tpu", 1, TW_SRV_DEVICE_UNKNOWN_KIND, -1},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        struct tw_srv_device_verdict v = tw__srv_device_admit(&t, 2, free_bytes, rows[i].tag,
                                                              strlen(rows[i].tag), rows[i].bytes);
        if (v.reason != rows[i].reason || v.index != rows[i].index)
            TW_FAIL("row %zu (%s, %llu): reason %s index %d, want %s index %d", i, rows[i].tag,
                    (unsigned long long)rows[i].bytes, tw__srv_device_reason_str(v.reason), v.index,
                    tw__srv_device_reason_str(rows[i].reason), rows[i].index);
    }
}

/* Device memory double: host allocations, counted. */
static long dev_allocs, dev_frees;
static int fail_dev_alloc;

static int fake_dev_alloc(int ordinal, size_t len, void **p, char *err, size_t errlen)
{
    if (fail_dev_alloc)
        return -ENOMEM;
    *p = malloc(len);
    if (!*p)
        return -ENOMEM;
    dev_allocs++;
    return 0;
}

static void fake_dev_free(int ordinal, void *p, size_t len)
{
    dev_frees++;
    free(p);
}

static const struct tw_store_devmem_ops fake_devmem = {.alloc = fake_dev_alloc,
                                                       .free = fake_dev_free};

static long host_pins, host_unpins;
static int fail_host_pin;

static int fake_pin(int ordinal, void *p, size_t len, char *err, size_t errlen)
{
    (void)p, (void)len, (void)err, (void)errlen;
    TW_ASSERT_EQ(ordinal, 1);
    if (fail_host_pin)
        return -ENOMEM;
    host_pins++;
    return 0;
}

static void fake_unpin(int ordinal, void *p)
{
    (void)ordinal, (void)p;
    host_unpins++;
}

static const struct tw_store_devmem_ops fake_devmem_pins = {
    .alloc = fake_dev_alloc, .free = fake_dev_free, .pin = fake_pin, .unpin = fake_unpin};

/* Host copies of staged GPU tensors: those under 8 MiB from the page-locked
 * slab (pinned once per arena), larger ones and every one without a way to pin
 * (no GPU, a refused pin) ordinary host versions. */
static void test_store_alloc_pinned(void)
{
    struct tw_store s;
    struct tw_descriptor d;
    struct tw_tensor *a, *b, *big;
    /* No GPU declared: nothing to pin for. */
    TW_ASSERT_OK(tw__store_init(&s, 0));
    s.devmem = &fake_devmem_pins;
    tw_test_desc_u8(&d, "h", "cpu", 32768);
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &a));
    TW_ASSERT(a->in_slab && !a->pinned);
    tw__tensor_unref(a);
    TW_ASSERT_EQ(host_pins, 0);
    tw__store_destroy(&s);

    TW_ASSERT_OK(tw__store_init(&s, 1ull << 30));
    s.devmem = &fake_devmem_pins;
    TW_ASSERT_OK(tw__store_add_gpu(&s, 1, 0));
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &a));
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &b));
    TW_ASSERT(a->pinned && a->in_slab && b->pinned && a->data != b->data);
    TW_ASSERT_EQ(host_pins, 1);              /* one arena */
    TW_ASSERT_EQ_U64(s.reserved, 2 * 32768); /* counted like any host version */
    /* Up to 8 MiB (a batch of medium GPU blocks) from the same slab; from
     * 8 MiB a mapping of its own. */
    tw_test_desc_u8(&d, "mid", "cpu", (8u << 20) - 4096);
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &big));
    TW_ASSERT(big->pinned && big->in_slab && !big->mmapped);
    tw__tensor_unref(big);
    tw_test_desc_u8(&d, "big", "cpu", 8u << 20);
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &big));
    TW_ASSERT(!big->pinned && big->mmapped);
    tw__tensor_unref(big);
    /* An ordinary put never lands in the pinned slab. */
    tw_test_desc_u8(&d, "p", "cpu", 32768);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &big));
    TW_ASSERT(!big->pinned && big->in_slab);
    tw__tensor_unref(big);
    uint8_t *mem = a->data;
    tw__tensor_unref(a);
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &a)); /* the freed pinned block again */
    TW_ASSERT(a->pinned && a->data == mem);
    tw__tensor_unref(a);
    tw__tensor_unref(b);
    tw__store_destroy(&s);
    TW_ASSERT_EQ(host_unpins, 1);

    /* A refused pin: ordinary memory, and no second attempt. */
    host_pins = host_unpins = 0;
    fail_host_pin = 1;
    TW_ASSERT_OK(tw__store_init(&s, 0));
    s.devmem = &fake_devmem_pins;
    TW_ASSERT_OK(tw__store_add_gpu(&s, 1, 0));
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &a));
    TW_ASSERT(!a->pinned && a->in_slab);
    fail_host_pin = 0;
    TW_ASSERT_OK(tw__store_alloc_pinned(&s, &d, &b));
    TW_ASSERT(!b->pinned);
    TW_ASSERT_EQ(host_pins, 0);
    tw__tensor_unref(a);
    tw__tensor_unref(b);
    tw__store_destroy(&s);
}

static void test_store_per_device(void)
{
    struct tw_store s;
    struct tw_descriptor d;
    struct tw_tensor *t, *t2;
    TW_ASSERT_OK(tw__store_init(&s, 1 << 20));
    s.devmem = &fake_devmem;
    TW_ASSERT_OK(tw__store_add_gpu(&s, 1, 1000));
    TW_ASSERT_ERR(tw__store_add_gpu(&s, 1, 5), TW_EINVAL);
    struct tw_device cpu = {TW_DEVICE_CPU, -1}, g1 = {TW_DEVICE_CUDA, 1}, g0 = {TW_DEVICE_CUDA, 0};
    TW_ASSERT_EQ_U64(tw__store_device_free_bytes(&s, &g1), 1000);
    TW_ASSERT_EQ_U64(tw__store_device_free_bytes(&s, &g0), 0);

    tw_test_desc_u8(&d, "a", "cuda:1", 600);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &t));
    TW_ASSERT_EQ(dev_allocs, 1);
    TW_ASSERT_EQ(t->gpu, 0);
    TW_ASSERT_STR_EQ(t->device_tag, "cuda:1");
    TW_ASSERT_EQ_U64(tw__store_device_free_bytes(&s, &g1), 400);
    TW_ASSERT_EQ_U64(tw__store_device_free_bytes(&s, &cpu), 1 << 20); /* CPU untouched */
    /* A second 600 bytes does not fit on cuda:1. */
    tw_test_desc_u8(&d, "b", "cuda:1", 600);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &t2), TW_ECAPACITY);
    TW_ASSERT_EQ(dev_allocs, 1);
    /* A GPU that was not declared, and an unknown kind. */
    tw_test_desc_u8(&d, "c", "cuda:0", 1);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &t2), TW_EDEVICE);
    tw_test_desc_u8(&d, "c", "rocm:0", 1);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &t2), TW_EDEVICE);
    /* Device allocation failure: nothing reserved. */
    fail_dev_alloc = 1;
    tw_test_desc_u8(&d, "c", "cuda:1", 10);
    TW_ASSERT_ERR(tw__store_alloc(&s, &d, &t2), -ENOMEM);
    fail_dev_alloc = 0;
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->reserved, 600);

    tw__store_commit(&s, t);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->stored_bytes, 600);
    TW_ASSERT_EQ_U64(s.stored_bytes, 0);
    /* Overwrite "a" with a host version: bytes move between devices. */
    tw_test_desc_u8(&d, "a", "cpu", 100);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &t2));
    tw__store_commit(&s, t2);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->stored_bytes, 0);
    TW_ASSERT_EQ_U64(s.stored_bytes, 100);
    /* The old GPU version is still referenced by t: memory stays until
     * the last reference goes. */
    TW_ASSERT_EQ(dev_frees, 0);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->reserved, 600);
    tw__tensor_unref(t);
    TW_ASSERT_EQ(dev_frees, 1);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->reserved, 0);
    tw__tensor_unref(t2);
    /* Back to the GPU, then delete. */
    tw_test_desc_u8(&d, "a", "cuda:1", 1000);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &t));
    tw__store_commit(&s, t);
    tw__tensor_unref(t);
    TW_ASSERT_EQ_U64(s.stored_bytes, 0);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->stored_bytes, 1000);
    TW_ASSERT_EQ_U64(tw__store_device_free_bytes(&s, &g1), 0);
    TW_ASSERT_OK(tw__store_delete(&s, (const uint8_t *)"a", 1));
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->stored_bytes, 0);
    TW_ASSERT_EQ_U64(tw__store_gpu(&s, 1)->reserved, 0);
    TW_ASSERT_EQ(dev_frees, 2);
    /* A zero-byte GPU tensor allocates nothing. */
    tw_test_desc_u8(&d, "z", "cuda:1", 0);
    TW_ASSERT_OK(tw__store_alloc(&s, &d, &t));
    TW_ASSERT(t->data == NULL);
    tw__store_commit(&s, t);
    tw__tensor_unref(t);
    tw__store_destroy(&s);
    TW_ASSERT_EQ(dev_allocs, dev_frees);
}

int main(void)
{
    TW_RUN(test_parse_devices);
    TW_RUN(test_parse_capacity);
    TW_RUN(test_resolve);
    TW_RUN(test_admit_table);
    TW_RUN(test_store_per_device);
    TW_RUN(test_store_alloc_pinned);
    TW_DONE();
}
