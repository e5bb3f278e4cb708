/*
 * `tensorwire bench`: count gets or puts of size bytes kept inflight deep on
 * one connection (tw_batch_get / tw_batch_put), then the same bytes through a
 * raw loopback socket loop with the same depth (tools/raw_loop.c), printed
 * side by side with their ratio. When the connection's data plane is RDMA
 * (--fabric), the same rounds also run the raw libfabric loop
 * (tools/raw_fabric.c): fi_read for pull, fi_write for push, same size, same
 * depth, same provider, between two endpoints of this process; that loop is
 * then the baseline of the ratio, and the raw socket loop is still printed
 * so that RDMA can be compared with inline TCP.
 *
 * Baselines are the best the raw transport does, not one arbitrary setting
 * (issue 10): the raw libfabric loop first sweeps operation size x window
 * (SWEEP_SIZES x SWEEP_WINDOWS, the same total bytes) and the rounds then
 * also run its best setting, against which the ratio is taken; the raw
 * socket side adds a one-way streaming loop (tw_raw_stream, what iperf3
 * measures) beside the request/response loop, at its best number of bytes
 * per system call (swept as well).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tools/npy.h"
#include "tools/cli.h"
#include "tools/raw_fabric.h"

#define BENCH_BUFFER_BUDGET (1ull << 30) /* client buffers kept at once */
#define SWEEP_BUFFER (256ull << 20)      /* raw libfabric sweep: memory cycled through */

static const uint64_t sweep_sizes[] = {64ull << 10, 256ull << 10, 1ull << 20, 4ull << 20,
                                       16ull << 20};
static const uint32_t sweep_windows[] = {1, 4, 16, 64};
/* The streaming socket loop's bytes per system call (0: one whole tensor,
 * at most 1 GiB, per call); --no-sweep takes STREAM_BLOCK_DEFAULT. */
static const size_t stream_blocks[] = {64u << 10, 256u << 10, 1u << 20, 4u << 20, 0};
#define STREAM_BLOCK_DEFAULT ((size_t)256 << 10)

/* Fills size bytes of host or device memory at p with byte v. */
static int fill_buffer(void *p, uint64_t size, int v)
{
    uint8_t *tmp;
    if (!size)
        return 0;
    if ((tmp = malloc((size_t)size)) == NULL)
        return -ENOMEM;
    memset(tmp, v, (size_t)size);
    int rc = tw_mem_copy(p, tmp, (size_t)size);
    free(tmp);
    return rc;
}

static const char usage_bench[] =
    "usage: tensorwire bench [--op get|put] [--size SIZE] [--count N] [--inflight N]\n"
    "                        [--warmup N] [--rounds R] [--sockbuf SIZE]\n"
    "                        [--fabric auto|none|PROV] [--push auto|always|never]\n"
    "                        [--rdma-min-bytes SIZE] [--connections N] [--no-sweep]\n"
    "                        [--device DEV] [--server-device DEV] [--json]\n"
    "  Moves COUNT tensors of SIZE bytes (default 4Ki; K/M/G = 1000^n, Ki/Mi/Gi =\n"
    "  1024^n) with INFLIGHT requests outstanding on one connection (default 16),\n"
    "  after WARMUP untimed ones, then the same through a raw TCP loopback\n"
    "  request/response loop, and prints throughput, p50/p99 latency and the ratio.\n"
    "  R rounds (default 3) alternate the two; throughput is the median round,\n"
    "  latency percentiles are over all requests.\n"
    "  Default COUNT: as many as make 1 GiB (at least 8, at most 100000).\n"
    "  Client buffers are capped at 1 GiB: beyond that, in-flight requests share\n"
    "  buffers (contents are not verified here; the integration tests do that).\n"
    "  They come from tw_device_alloc, and the raw loops' buffers likewise from\n"
    "  memory advised for transparent huge pages from 2 MiB, as tensorwired keeps\n"
    "  its tensors.\n"
    "  --fabric / --push (also global options): RDMA data plane through libfabric.\n"
    "  When the connection uses RDMA, each round also runs a raw libfabric loop\n"
    "  (fi_read for pull, fi_write for push, same size, depth and provider, two\n"
    "  endpoints in this process, no protocol) and the ratio is against it; the\n"
    "  raw socket loop is still run and printed. Output names the data plane.\n"
    "  Before the rounds the raw libfabric loop sweeps operation sizes 64Ki..16Mi x\n"
    "  windows 1..64 for the same total bytes; its best setting runs in every round\n"
    "  and is the baseline of the ratio (--no-sweep: same size and depth only).\n"
    "  Every round also runs a one-way streaming socket loop (the same bytes as one\n"
    "  stream, no turnarounds: what iperf3 measures); inline ratios are against it.\n"
    "  Before the rounds it sweeps its bytes per system call (64Ki..4Mi and one\n"
    "  tensor) and the rounds run the best (--no-sweep: 256Ki).\n"
    "  --rdma-min-bytes (also global): puts smaller than SIZE go inline (default\n"
    "  over shm 32Ki with 32 or more in flight, else 64Ki; 1Mi otherwise, 32Ki\n"
    "  for --device memory with 32 or more in flight; 0 = always rdma); the\n"
    "  server's own threshold decides gets. Output\n"
    "  (JSON rdma_min_bytes, server_rdma_min_bytes) shows both thresholds.\n"
    "  --connections N: N connections (threads), each moving COUNT tensors with\n"
    "  INFLIGHT outstanding at once (like redis-benchmark -c N -P INFLIGHT); the\n"
    "  rate counts all of them, latency is connection 0's, the raw baselines stay\n"
    "  one connection.\n"
    "  --device cuda:N keeps the client buffers in this machine's GPU N;\n"
    "  --server-device cuda:N stores the tensors on the server's GPU N (default\n"
    "  cpu for both).\n"
    "  --json prints one JSON object. The tensors bench/<pid>/* are removed after.\n";

struct result {
    double bytes_per_s, ops_per_s, p50_us, p99_us;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* rates: requests/s of each round (sorted here); lat: all samples (sorted). */
static void summarize(uint64_t *lat, uint64_t n, uint64_t size, double *rates, uint64_t rounds,
                      struct result *r)
{
    qsort(lat, n, sizeof(*lat), cmp_u64);
    qsort(rates, rounds, sizeof(*rates), cmp_double);
    r->ops_per_s = rounds % 2 ? rates[rounds / 2] : (rates[rounds / 2 - 1] + rates[rounds / 2]) / 2;
    r->bytes_per_s = r->ops_per_s * (double)size;
    r->p50_us = (double)lat[n / 2] / 1e3;
    uint64_t i99 = (n * 99) / 100;
    r->p99_us = (double)lat[i99 < n ? i99 : n - 1] / 1e3;
}

/* The server's STATS value for key, -1 when it has none (an older server)
 * or STATS failed. */
static long long server_setting(tw_client *c, const char *key)
{
    struct tw_stat_entry *st = NULL;
    size_t n = 0;
    long long v = -1;
    if (tw_stats(c, &st, &n) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strcmp(st[i].key, key) == 0)
            v = (long long)st[i].value;
    tw_stats_free(st);
    return v;
}

/* One more connection of --connections N: its own client, buffers, names
 * (bench/<pid>/<k>/<i>) and items; its batches run on a thread of their own
 * while connection 0 runs on the caller's. */
struct extra_conn {
    tw_client *c;
    struct tw_batch_item *items;
    uint8_t **bufs;
    char (*names)[80];
    uint64_t nbuf, count;
    int op_put, rc;
    pthread_t th;
};

static void *extra_main(void *arg)
{
    struct extra_conn *e = arg;
    e->rc =
        e->op_put ? tw_batch_put(e->c, e->items, e->count) : tw_batch_get(e->c, e->items, e->count);
    return NULL;
}

static void extra_close(struct extra_conn *e)
{
    for (uint64_t i = 0; e->c && e->names && i < e->nbuf; i++)
        if (e->names[i][0])
            tw_delete(e->c, e->names[i]); /* best effort */
    for (uint64_t i = 0; e->bufs && i < e->nbuf; i++)
        free(e->bufs[i]);
    free(e->bufs);
    free(e->names);
    free(e->items);
    tw_close(e->c);
    memset(e, 0, sizeof(*e));
}

/* Connects, stores the tensors a get reads, and runs the warm-up. 0 or -1
 * (with a message printed); e is then closed. */
static int extra_open(struct extra_conn *e, const struct tw_cli *cli, unsigned k, int op_put,
                      uint64_t size, uint64_t nbuf, uint64_t count, uint64_t warmup)
{
    struct tw_tensor_desc desc = {.dtype = TW_U8, .ndim = 1, .shape = {size}};
    uint64_t nitems = count > warmup ? count : warmup;
    int rc;
    memset(e, 0, sizeof(*e));
    e->op_put = op_put;
    e->count = count;
    e->nbuf = nbuf;
    if (!(e->c = tw_cli_connect(cli)))
        return -1;
    e->bufs = calloc(nbuf, sizeof(*e->bufs));
    e->names = calloc(nbuf, sizeof(*e->names));
    e->items = calloc(nitems, sizeof(*e->items));
    if (!e->bufs || !e->names || !e->items)
        goto out_nomem;
    for (uint64_t i = 0; i < nbuf; i++) {
        if (posix_memalign((void **)&e->bufs[i], 4096, size ? size : 1) != 0) {
            e->bufs[i] = NULL;
            goto out_nomem;
        }
        memset(e->bufs[i], (int)(i * 37 + k), size);
        snprintf(e->names[i], sizeof(e->names[i]), "bench/%d/%u/%llu", (int)getpid(), k,
                 (unsigned long long)i);
        if (!op_put && (rc = tw_put(e->c, e->names[i], &desc, e->bufs[i], size)) != 0)
            goto out_fail;
    }
    for (uint64_t i = 0; i < nitems; i++)
        e->items[i] = (struct tw_batch_item){
            .name = e->names[i % nbuf], .desc = desc, .buf = e->bufs[i % nbuf], .len = size};
    if (warmup && (rc = op_put ? tw_batch_put(e->c, e->items, warmup)
                               : tw_batch_get(e->c, e->items, warmup)) != 0)
        goto out_fail;
    return 0;

out_nomem:
    fprintf(stderr, "tensorwire bench: out of memory for connection %u\n", k);
    extra_close(e);
    return -1;
out_fail:
    tw_cli_fail(e->c, rc, "bench: connection %u", k);
    extra_close(e);
    return -1;
}

static int parse_count(const char *s, uint64_t *v, uint64_t max)
{
    return s && (tw_parse_size(s, v) != 0 || *v == 0 || *v > max);
}

int tw_cli_bench(const struct tw_cli *cli, int argc, char **argv)
{
    const char *o_op = "get", *o_size = "4Ki", *o_count = NULL, *o_inflight = "16", *o_json = NULL,
               *o_nosweep = NULL, *o_conns = "1", *o_warmup = NULL, *o_sockbuf = NULL,
               *o_rounds = "3", *o_fabric = NULL, *o_push = NULL, *o_rdma_min = NULL,
               *o_device = NULL, *o_srv_device = NULL;
    uint64_t size = 0, count = 0, inflight = 0, warmup = 0, sockbuf = 0, nbuf, elapsed = 0,
             raw_elapsed = 0;
    struct tw_batch_item *items = NULL;
    uint8_t **bufs = NULL;
    uint64_t *lat = NULL, *raw_lat = NULL, rounds = 0;
    double *tw_rate = NULL, *raw_rate = NULL, *fab_rate = NULL, *stream_rate = NULL,
           *best_rate = NULL;
    uint64_t best_size = 0, best_count = 0, stream_elapsed = 0;
    uint32_t best_window = 0;
    double best_sweep = 0;
    uint64_t *fab_lat = NULL, fab_elapsed = 0;
    uint8_t *fab_buf = NULL, *fab_tgt = NULL;
    struct tw_raw_fabric *rf = NULL;
    struct result tw_res, raw_res, fab_res;
    char plane[96] = "", prov[64] = "", fab_err[256];
    int rdma = 0, fab_write = 0;
    struct tw_cli cli2 = *cli;
    char name_prefix[32]; /* "bench/PID": fits the names below with any index */
    char(*names)[80] = NULL;
    int op_put, rc, ret = TW_CLI_FAILED;
    struct extra_conn *extra = NULL;
    uint64_t nconns = 1, nextra = 0;
    tw_client *c = NULL;

    for (int i = 1; i < argc; i++) {
        const char **slot = NULL;
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
            return fputs(usage_bench, stdout), TW_CLI_OK;
        if (strcmp(a, "--json") == 0) {
            o_json = "1";
            continue;
        }
        if (strcmp(a, "--no-sweep") == 0) {
            o_nosweep = "1";
            continue;
        }
        if (strcmp(a, "--op") == 0)
            slot = &o_op;
        else if (strcmp(a, "--size") == 0)
            slot = &o_size;
        else if (strcmp(a, "--count") == 0)
            slot = &o_count;
        else if (strcmp(a, "--inflight") == 0)
            slot = &o_inflight;
        else if (strcmp(a, "--warmup") == 0)
            slot = &o_warmup;
        else if (strcmp(a, "--sockbuf") == 0)
            slot = &o_sockbuf;
        else if (strcmp(a, "--rounds") == 0)
            slot = &o_rounds;
        else if (strcmp(a, "--connections") == 0)
            slot = &o_conns;
        else if (strcmp(a, "--fabric") == 0)
            slot = &o_fabric;
        else if (strcmp(a, "--push") == 0)
            slot = &o_push;
        else if (strcmp(a, "--rdma-min-bytes") == 0)
            slot = &o_rdma_min;
        else if (strcmp(a, "--device") == 0)
            slot = &o_device;
        else if (strcmp(a, "--server-device") == 0)
            slot = &o_srv_device;
        if (!slot) {
            fprintf(stderr, "tensorwire bench: %s '%.64s' (see tensorwire bench --help)\n",
                    a[0] == '-' ? "unknown option" : "unexpected argument", a);
            return TW_CLI_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "tensorwire bench: %s needs a value\n", a);
            return TW_CLI_USAGE;
        }
        *slot = argv[++i];
    }
    op_put = strcmp(o_op, "put") == 0;
    if (!op_put && strcmp(o_op, "get") != 0)
        return tw_cli_bad_value("bench", "--op", o_op, "get or put");
    if (tw_parse_size(o_size, &size) || size > (64ull << 30))
        return tw_cli_bad_value("bench", "--size", o_size, "a size up to 64Gi (e.g. 4Ki, 1Mi)");
    if (parse_count(o_count, &count, 100000000))
        return tw_cli_bad_value("bench", "--count", o_count, "a count 1..100000000");
    if (parse_count(o_inflight, &inflight, 65536))
        return tw_cli_bad_value("bench", "--inflight", o_inflight, "a count 1..65536");
    if (parse_count(o_rounds, &rounds, 100))
        return tw_cli_bad_value("bench", "--rounds", o_rounds, "a count 1..100");
    if (parse_count(o_conns, &nconns, 1024))
        return tw_cli_bad_value("bench", "--connections", o_conns, "a count 1..1024");
    if (nconns > 1 && (o_device || o_srv_device))
        return tw_cli_bad_value(
            "bench", "--connections", o_conns,
            "1 with --device / --server-device (GPU buffers on one connection)");
    if (o_warmup && tw_parse_size(o_warmup, &warmup))
        return tw_cli_bad_value("bench", "--warmup", o_warmup, "a count");
    if (o_sockbuf && (tw_parse_size(o_sockbuf, &sockbuf) || sockbuf > (1u << 30)))
        return tw_cli_bad_value("bench", "--sockbuf", o_sockbuf, "a size up to 1Gi");
    if (o_push && tw_cli_parse_push("bench", o_push, &cli2.opts.push))
        return TW_CLI_USAGE;
    if (o_fabric) {
        if (tw_cli_check_fabric("bench", o_fabric))
            return TW_CLI_USAGE;
        cli2.opts.fabric = o_fabric;
    }
    if (o_rdma_min && tw_parse_size(o_rdma_min, &cli2.opts.rdma_min_bytes))
        return tw_cli_bad_value("bench", "--rdma-min-bytes", o_rdma_min,
                                "a size (e.g. 0, 65536, 256Ki, 1Mi)");
    if (!o_count) {
        count = size ? (1ull << 30) / size : 100000;
        count = count < 8 ? 8 : count > 100000 ? 100000 : count;
    }
    if (!o_warmup)
        warmup = inflight < count ? inflight : count;
    nbuf = BENCH_BUFFER_BUDGET / nconns / (size ? size : 1);
    nbuf = nbuf < 1 ? 1 : nbuf;
    nbuf = nbuf < inflight ? nbuf : inflight;
    nbuf = nbuf < count ? nbuf : count;

    cli2.opts.max_inflight = (uint32_t)inflight;
    cli2.opts.socket_buffer_bytes = (int)sockbuf;
    c = tw_cli_connect(&cli2);
    if (!c)
        return TW_CLI_FAILED;
    /* The server's threshold for this op on this connection: puts have
     * their own default (older servers: none), so do gets over shm. */
    long long srv_rdma_min = -1;
    if (op_put)
        srv_rdma_min = server_setting(c, "rdma_min_bytes_put");
    else if (strcmp(tw_client_fabric_status(c), "rdma shm") == 0)
        srv_rdma_min = server_setting(c, "rdma_min_bytes_shm");
    if (srv_rdma_min < 0)
        srv_rdma_min = server_setting(c, "rdma_min_bytes");
    uint64_t cli_rdma_min = tw_client_rdma_min_bytes(c);
    if (nconns > 1 && !(extra = calloc(nconns - 1, sizeof(*extra)))) {
        fprintf(stderr, "tensorwire bench: out of memory\n");
        goto out_free;
    }
    for (uint64_t k = 1; k < nconns; k++) {
        if (extra_open(&extra[k - 1], &cli2, (unsigned)k, op_put, size, nbuf, count, warmup) != 0)
            goto out_free;
        nextra = k;
    }
    if (tw_client_max_inflight(c) < inflight)
        fprintf(stderr, "tensorwire bench: note: the server allows %u in flight, not %llu\n",
                tw_client_max_inflight(c), (unsigned long long)inflight);

    bufs = calloc(nbuf, sizeof(*bufs));
    names = calloc(nbuf, sizeof(*names));
    uint64_t nitems = count > warmup ? count : warmup;
    items = calloc(nitems, sizeof(*items));
    lat = calloc(count * rounds, sizeof(*lat));
    raw_lat = calloc(count * rounds, sizeof(*raw_lat));
    tw_rate = calloc(rounds, sizeof(*tw_rate));
    raw_rate = calloc(rounds, sizeof(*raw_rate));
    fab_rate = calloc(rounds, sizeof(*fab_rate));
    fab_lat = calloc(count * rounds, sizeof(*fab_lat));
    stream_rate = calloc(rounds, sizeof(*stream_rate));
    best_rate = calloc(rounds, sizeof(*best_rate));
    if (!bufs || !names || !items || !lat || !raw_lat || !tw_rate || !raw_rate || !fab_rate ||
        !fab_lat || !stream_rate || !best_rate) {
        fprintf(stderr, "tensorwire bench: out of memory\n");
        goto out_free;
    }
    snprintf(name_prefix, sizeof(name_prefix), "bench/%d", (int)getpid());
    for (uint64_t i = 0; i < nbuf; i++) {
        rc = tw_device_alloc(o_device ? o_device : "cpu", size ? size : 1, (void **)&bufs[i]);
        if (rc) {
            bufs[i] = NULL;
            fprintf(stderr, "tensorwire bench: cannot allocate %llu bytes on %s: %s\n",
                    (unsigned long long)size, o_device ? o_device : "cpu", tw_strerror(rc));
            goto out_free;
        }
        if (fill_buffer(bufs[i], size, (int)(i * 37 + 1)) != 0) {
            fprintf(stderr, "tensorwire bench: cannot fill a buffer on %s\n", o_device);
            goto out_free;
        }
        snprintf(names[i], sizeof(names[i]), "%s/%llu", name_prefix, (unsigned long long)i);
    }

    struct tw_tensor_desc desc = {.dtype = TW_U8, .ndim = 1, .shape = {size}};
    if (o_srv_device)
        snprintf(desc.device_tag, sizeof(desc.device_tag), "%s", o_srv_device);
    if (!op_put) {
        /* Gets read tensors that exist: store one per buffer first. */
        for (uint64_t i = 0; i < nbuf; i++) {
            rc = tw_put(c, names[i], &desc, bufs[i], size);
            if (rc) {
                ret = tw_cli_fail(c, rc, "bench: put %s", names[i]);
                goto out_cleanup;
            }
        }
    }
    for (uint64_t i = 0; i < nitems; i++) {
        items[i].name = names[i % nbuf];
        items[i].desc = desc;
        items[i].buf = bufs[i % nbuf];
        items[i].len = size;
    }
    if (warmup) {
        rc = op_put ? tw_batch_put(c, items, warmup) : tw_batch_get(c, items, warmup);
        if (rc) {
            ret = tw_cli_fail(c, rc, "bench: warmup %s", o_op);
            goto out_cleanup;
        }
    }
    /* The plane that moved the warm-up (or the setup puts): "rdma pull
     * (tcp;ofi_rxm)", "rdma push (shm)" or "inline tcp". */
    snprintf(plane, sizeof(plane), "%s", tw_client_data_plane(c));
    if (strncmp(plane, "rdma ", 5) == 0) {
        const char *lp = strchr(plane, '('), *rp = strrchr(plane, ')');
        rdma = 1;
        fab_write = strncmp(plane, "rdma push", 9) == 0;
        if (lp && rp > lp)
            snprintf(prov, sizeof(prov), "%.*s", (int)(rp - lp - 1), lp + 1);
        /* One buffer per request in flight for small sizes (like the client
         * side), one reused buffer for large ones (each far beyond cache). */
        uint64_t slots = size >= (64ull << 20) ? 1 : nbuf;
        size_t flen = (size_t)(size * slots);
        if (!o_nosweep && flen < SWEEP_BUFFER)
            flen = SWEEP_BUFFER; /* the sweep cycles through 256 MiB */
        if (tw_device_alloc("cpu", flen, (void **)&fab_buf) != 0 ||
            tw_device_alloc("cpu", flen, (void **)&fab_tgt) != 0) {
            fprintf(stderr, "tensorwire bench: cannot allocate the raw fabric loop's buffers\n");
            goto out_cleanup;
        }
        memset(fab_buf, 0xa5, flen);
        memset(fab_tgt, 0x5a, flen);
        rc = tw_raw_fabric_open(prov, fab_buf, flen, fab_tgt, &rf, fab_err, sizeof(fab_err));
        if (rc) {
            fprintf(stderr, "tensorwire bench: raw libfabric loop on %s: %s\n", prov, fab_err);
            goto out_cleanup;
        }
        /* Warm the raw loop as the connection was warmed. */
        if (warmup && tw_raw_fabric_loop(rf, fab_write, size, warmup, (uint32_t)inflight, NULL,
                                         &fab_elapsed) != 0) {
            fprintf(stderr, "tensorwire bench: raw libfabric loop: %s\n", tw_raw_fabric_errmsg(rf));
            goto out_cleanup;
        }
        /* The sweep: every operation size and window for the same total
         * bytes; sizes beyond the provider's largest message are skipped. */
        uint64_t total = size * count;
        for (size_t si = 0; !o_nosweep && si < sizeof(sweep_sizes) / sizeof(*sweep_sizes); si++) {
            for (size_t wi = 0; wi < sizeof(sweep_windows) / sizeof(*sweep_windows); wi++) {
                uint64_t sz = sweep_sizes[si], n = total / sweep_sizes[si], el = 0;
                n = n < 1 ? 1 : n;
                if (tw_raw_fabric_loop(rf, fab_write, sz, n, sweep_windows[wi], NULL, &el) != 0 ||
                    el == 0)
                    continue;
                double bps = (double)(n * sz) / ((double)el / 1e9);
                if (bps > best_sweep) {
                    best_sweep = bps;
                    best_size = sz;
                    best_count = n;
                    best_window = sweep_windows[wi];
                }
            }
        }
    }
    /* The streaming socket loop's best system call size for the same bytes
     * (a whole tensor per call was 15% slower than 256 KiB calls at 256 MiB
     * on the 2-core VM); sizes at or above one tensor are the whole-tensor
     * setting, run once. */
    uint64_t whole = size < (1ull << 30) ? size : (1ull << 30);
    size_t stream_block = STREAM_BLOCK_DEFAULT >= whole ? 0 : STREAM_BLOCK_DEFAULT;
    if (!o_nosweep) {
        double best_bps = 0;
        int whole_done = 0;
        for (size_t bi = 0; bi < sizeof(stream_blocks) / sizeof(*stream_blocks); bi++) {
            size_t blk = stream_blocks[bi] >= whole ? 0 : stream_blocks[bi];
            uint64_t el = 0;
            if (blk == 0 && whole_done++)
                continue;
            if (tw_raw_stream(op_put, size, count, blk, (int)sockbuf, &el) != 0 || el == 0)
                continue;
            double bps = (double)(size * count) / ((double)el / 1e9);
            if (bps > best_bps) {
                best_bps = bps;
                stream_block = blk;
            }
        }
    }
    /* Rounds alternate ours and the baseline so drift in machine load hits
     * both alike; throughput is the median over rounds, latency percentiles
     * are over all samples. */
    for (uint64_t round = 0; round < rounds; round++) {
        uint64_t t0 = tw_cli_now_ns(), started = 0;
        for (; started < nextra; started++)
            if (pthread_create(&extra[started].th, NULL, extra_main, &extra[started]) != 0)
                break;
        rc = op_put ? tw_batch_put(c, items, count) : tw_batch_get(c, items, count);
        int xrc = started < nextra ? TW_CLI_FAILED : 0;
        for (uint64_t k = 0; k < started; k++) {
            pthread_join(extra[k].th, NULL);
            if (extra[k].rc && !xrc) {
                xrc = extra[k].rc;
                tw_cli_fail(extra[k].c, xrc, "bench: %s on connection %llu", o_op,
                            (unsigned long long)k + 1);
            }
        }
        elapsed = tw_cli_now_ns() - t0;
        if (rc || xrc) {
            if (rc)
                tw_cli_fail(c, rc, "bench: %s", o_op);
            goto out_cleanup;
        }
        for (uint64_t i = 0; i < count; i++)
            lat[round * count + i] = items[i].latency_ns;
        /* All connections' tensors per second (nconns * count). */
        tw_rate[round] = (double)(count * nconns) / ((double)elapsed / 1e9);

        rc = tw_raw_loop(op_put, size, count, (uint32_t)inflight, (int)sockbuf,
                         raw_lat + round * count, &raw_elapsed);
        if (rc) {
            fprintf(stderr, "tensorwire bench: raw socket loop failed: %s\n", strerror(-rc));
            goto out_cleanup;
        }
        raw_rate[round] = (double)count / ((double)raw_elapsed / 1e9);

        rc = tw_raw_stream(op_put, size, count, stream_block, (int)sockbuf, &stream_elapsed);
        if (rc) {
            fprintf(stderr, "tensorwire bench: streaming socket loop failed: %s\n", strerror(-rc));
            goto out_cleanup;
        }
        stream_rate[round] = (double)count / ((double)stream_elapsed / 1e9);

        if (rf) {
            rc = tw_raw_fabric_loop(rf, fab_write, size, count, (uint32_t)inflight,
                                    fab_lat + round * count, &fab_elapsed);
            if (rc) {
                fprintf(stderr, "tensorwire bench: raw libfabric loop: %s\n",
                        tw_raw_fabric_errmsg(rf));
                goto out_cleanup;
            }
            fab_rate[round] = (double)count / ((double)fab_elapsed / 1e9);
        }
        if (rf && best_size) {
            rc = tw_raw_fabric_loop(rf, fab_write, best_size, best_count, best_window, NULL,
                                    &fab_elapsed);
            if (rc) {
                fprintf(stderr, "tensorwire bench: raw libfabric loop (best setting): %s\n",
                        tw_raw_fabric_errmsg(rf));
                goto out_cleanup;
            }
            /* In tensors of size per second, like every other rate here. */
            best_rate[round] =
                (double)(best_size * best_count) / (double)size / ((double)fab_elapsed / 1e9);
        }
    }
    summarize(lat, count * rounds, size, tw_rate, rounds, &tw_res);
    summarize(raw_lat, count * rounds, size, raw_rate, rounds, &raw_res);
    if (rf)
        summarize(fab_lat, count * rounds, size, fab_rate, rounds, &fab_res);
    else
        fab_res = raw_res;
    qsort(stream_rate, rounds, sizeof(*stream_rate), cmp_double);
    double stream_ops = rounds % 2 ? stream_rate[rounds / 2]
                                   : (stream_rate[rounds / 2 - 1] + stream_rate[rounds / 2]) / 2;
    double best_ops = fab_res.ops_per_s;
    if (best_size) {
        qsort(best_rate, rounds, sizeof(*best_rate), cmp_double);
        best_ops = rounds % 2 ? best_rate[rounds / 2]
                              : (best_rate[rounds / 2 - 1] + best_rate[rounds / 2]) / 2;
    }

    /* The baseline is the best the raw transport did: for RDMA the raw
     * libfabric loop at the best swept setting or at ours, whichever was
     * faster; for inline the streaming or the request/response socket
     * loop, whichever was faster. */
    char base_name[128], base_setting[96], stream_label[48];
    double base_ops;
    if (stream_block)
        snprintf(stream_label, sizeof(stream_label), "%zu KiB calls", stream_block >> 10);
    else
        snprintf(stream_label, sizeof(stream_label), "whole tensor calls");
    if (rf) {
        snprintf(base_name, sizeof(base_name), "raw libfabric %s (%s)",
                 fab_write ? "fi_write" : "fi_read", tw_raw_fabric_provider(rf));
        if (best_size && best_ops > fab_res.ops_per_s) {
            base_ops = best_ops;
            snprintf(base_setting, sizeof(base_setting), "%llu B x %u in flight (swept)",
                     (unsigned long long)best_size, best_window);
        } else {
            base_ops = fab_res.ops_per_s;
            snprintf(base_setting, sizeof(base_setting), "%llu B x %llu in flight (ours)",
                     (unsigned long long)size, (unsigned long long)inflight);
        }
    } else {
        snprintf(base_name, sizeof(base_name), "raw socket");
        if (stream_ops > raw_res.ops_per_s) {
            base_ops = stream_ops;
            snprintf(base_setting, sizeof(base_setting), "one-way stream, %s", stream_label);
        } else {
            base_ops = raw_res.ops_per_s;
            snprintf(base_setting, sizeof(base_setting), "request/response x %llu in flight",
                     (unsigned long long)inflight);
        }
    }
    double ratio = base_ops > 0 ? tw_res.ops_per_s / base_ops : 0;
    double same_ratio = fab_res.ops_per_s > 0 ? tw_res.ops_per_s / fab_res.ops_per_s : 0;
    double sock_ratio = raw_res.ops_per_s > 0 ? tw_res.ops_per_s / raw_res.ops_per_s : 0;
    double stream_ratio = stream_ops > 0 ? tw_res.ops_per_s / stream_ops : 0;
    double mib = (double)size / 1048576.0;
    if (o_json) {
        printf("{\"op\":\"%s\",\"size\":%llu,\"count\":%llu,\"inflight\":%llu,"
               "\"bytes_per_s\":%.0f,\"baseline_bytes_per_s\":%.0f,\"ratio\":%.4f,"
               "\"ops_per_s\":%.1f,\"baseline_ops_per_s\":%.1f,\"baseline_setting\":\"%s\","
               "\"same_setting_bytes_per_s\":%.0f,\"same_setting_ratio\":%.4f,"
               "\"best_op_size\":%llu,\"best_window\":%u,"
               "\"p50_us\":%.1f,\"p99_us\":%.1f,\"baseline_p50_us\":%.1f,\"baseline_p99_us\":%.1f,"
               "\"baseline\":\"%s\",\"raw_socket_bytes_per_s\":%.0f,\"raw_socket_ratio\":%.4f,"
               "\"stream_bytes_per_s\":%.0f,\"stream_ratio\":%.4f,\"stream_block\":%zu,"
               "\"connections\":%llu,\"rounds\":%llu,\"max_frame\":%u,\"data_plane\":\"%s\","
               "\"provider\":\"%s\","
               "\"rdma_min_bytes\":%llu,\"server_rdma_min_bytes\":%lld}\n",
               o_op, (unsigned long long)size, (unsigned long long)count,
               (unsigned long long)inflight, tw_res.bytes_per_s, base_ops * (double)size, ratio,
               tw_res.ops_per_s, base_ops, base_setting, fab_res.bytes_per_s, same_ratio,
               (unsigned long long)best_size, best_window, tw_res.p50_us, tw_res.p99_us,
               fab_res.p50_us, fab_res.p99_us, base_name, raw_res.bytes_per_s, sock_ratio,
               stream_ops * (double)size, stream_ratio, stream_block, (unsigned long long)nconns,
               (unsigned long long)rounds, tw_client_max_frame(c), plane, prov,
               (unsigned long long)cli_rdma_min, srv_rdma_min);
    } else {
        printf("bench %s: size %llu B, count %llu x %llu rounds, in flight %llu x %llu "
               "connections, data plane: %s\n",
               o_op, (unsigned long long)size, (unsigned long long)count,
               (unsigned long long)rounds, (unsigned long long)inflight, (unsigned long long)nconns,
               plane);
        if (!rdma)
            printf("fabric: %s\n", tw_client_fabric_status(c));
        if (strncmp(tw_client_fabric_status(c), "rdma ", 5) == 0)
            printf("rdma threshold: puts from %llu B (client), %ss from %lld B "
                   "(server; -1 = unknown)\n",
                   (unsigned long long)cli_rdma_min, o_op, srv_rdma_min);
        printf("%-38s %12s %12s %8s\n", "", "MiB/s", "ops/s", "ratio");
        printf("%-38s %12.1f %12.0f\n", "tensorwire", tw_res.ops_per_s * mib, tw_res.ops_per_s);
        if (rf) {
            printf("%-38s %12.1f %12.0f %8.3f\n", "raw libfabric, same size and depth",
                   fab_res.ops_per_s * mib, fab_res.ops_per_s, same_ratio);
            if (best_size) {
                char label[64];
                snprintf(label, sizeof(label), "raw libfabric, best: %llu KiB x %u",
                         (unsigned long long)(best_size >> 10), best_window);
                printf("%-38s %12.1f %12.0f %8.3f\n", label, best_ops * mib, best_ops,
                       best_ops > 0 ? tw_res.ops_per_s / best_ops : 0);
            }
        }
        printf("%-38s %12.1f %12.0f %8.3f\n", "raw socket, request/response",
               raw_res.ops_per_s * mib, raw_res.ops_per_s, sock_ratio);
        char slabel[96];
        snprintf(slabel, sizeof(slabel), "raw socket stream, %s", stream_label);
        printf("%-38s %12.1f %12.0f %8.3f\n", slabel, stream_ops * mib, stream_ops, stream_ratio);
        printf("baseline: %s, %s: ratio %.3f\n", base_name, base_setting, ratio);
        printf("p50/p99 latency us: tensorwire %.1f/%.1f, %s %.1f/%.1f\n", tw_res.p50_us,
               tw_res.p99_us, rf ? "raw libfabric (same setting)" : "raw socket loop",
               fab_res.p50_us, fab_res.p99_us);
    }
    ret = TW_CLI_OK;

out_cleanup:
    for (uint64_t i = 0; i < nbuf && names; i++)
        if (names[i][0])
            tw_delete(c, names[i]); /* best effort; NOT_FOUND is fine */
out_free:
    for (uint64_t i = 0; bufs && i < nbuf; i++)
        tw_device_free(bufs[i]);
    free(bufs);
    free(names);
    free(items);
    free(lat);
    free(raw_lat);
    free(tw_rate);
    free(raw_rate);
    free(fab_rate);
    free(fab_lat);
    free(stream_rate);
    free(best_rate);
    tw_raw_fabric_close(rf);
    tw_device_free(fab_buf);
    tw_device_free(fab_tgt);
    for (uint64_t k = 0; k < nextra; k++)
        extra_close(&extra[k]);
    free(extra);
    tw_close(c);
    return ret;
}
