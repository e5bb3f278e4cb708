/*
 * bench_fabric: raw libfabric RMA loop vs the tensorwire engine, same
 * provider, same target, same process.
 *
 *   bench_fabric [-p tcp|shm] [-o read|write] [-r reps] [-c chunk] [-d depth]
 *                [-s size]... [--sweep]
 *
 * The target is a tensorwire plane with its data-mover thread (the provider
 * needs target-side progress on tcp). The baseline is the raw libfabric loop
 * shared with `tensorwire bench` (tools/raw_fabric.c): a bare RDM endpoint
 * posting ONE fi_read/fi_write of the whole size and spinning on fi_cq_read
 * until it completes, the most direct use of the provider. The engine runs tw__fabric_xfer_run() on
 * an unthreaded plane (the client's blocking path) with its chunking and depth. Each repetition
 * times `iters` back-to-back transfers; the median repetition is reported,
 * with the ratio engine/raw throughput (>1: engine faster).
 * --sweep runs the engine over chunk x depth for the largest size (tuning).
 *
 * --adjacent W: many small transfers whose regions continue each other
 * on both sides (a batch of KV blocks from one arena into one slab), W in
 * flight, on an unthreaded plane progressed by this thread: the engine
 * with joined operations (src/fabric/xfer.c) against the same engine with
 * TW_FABRIC_JOIN=0 and against the raw loop at the same size and window
 * (and at 1 MiB, what joining can reach), interleaved, medians.
 */
#include <errno.h>
#include <getopt.h>
#include "fabric/fi_api.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fabric/fabric.h"
#include "tools/raw_fabric.h"
#include "bench_util.h"

#define MAX_SIZES 8
#define DIE(...)                                                                                   \
    do {                                                                                           \
        fprintf(stderr, "bench_fabric: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static int iters_for(size_t size)
{
    if (size <= 64 * 1024)
        return 2000;
    if (size <= (4u << 20))
        return 100;
    return 1;
}

struct engine {
    struct tw_fabric *plane;
    struct tw_fabric_peer *peer;
    struct tw_fabric_mr *mr;
};

static void engine_open(struct engine *e, const char *prov, size_t chunk, unsigned depth, void *buf,
                        size_t len, struct tw_fabric *target, struct tw_fabric_peer **target_peer)
{
    struct tw_fabric_config cfg = {
        .provider = prov, .node = "127.0.0.1", .chunk_size = chunk, .depth = depth};
    char err[512];
    if (tw__fabric_open(&cfg, &e->plane, err, sizeof(err)))
        DIE("engine plane: %s", err);
    const struct tw_fabric_addr *mine, *theirs;
    tw__fabric_local_addrs(e->plane, &mine);
    tw__fabric_local_addrs(target, &theirs);
    if (tw__fabric_peer_insert(e->plane, theirs[0].provider, theirs[0].addr_format, theirs[0].addr,
                               theirs[0].addr_len, &e->peer))
        DIE("engine insert: %s", tw__fabric_errmsg(e->plane));
    if (target_peer && tw__fabric_peer_insert(target, mine[0].provider, mine[0].addr_format,
                                              mine[0].addr, mine[0].addr_len, target_peer))
        DIE("target insert: %s", tw__fabric_errmsg(target));
    if (tw__fabric_mr_register(e->peer, buf, len, TW_FABRIC_LOCAL_READ | TW_FABRIC_LOCAL_WRITE,
                               TW_FABRIC_HOST, 0, &e->mr))
        DIE("engine register: %s", tw__fabric_errmsg(e->plane));
}

static void engine_close(struct engine *e)
{
    tw__fabric_mr_deregister(e->mr);
    tw__fabric_peer_remove(e->peer);
    tw__fabric_close(e->plane);
}

static double engine_rep(struct engine *e, int write, size_t size, struct tw_fabric_rkey rk)
{
    int iters = iters_for(size);
    struct tw_fabric_xfer_desc d = {.op = write ? TW_FABRIC_PUSH : TW_FABRIC_PULL,
                                    .peer = e->peer,
                                    .local = e->mr,
                                    .remote = rk,
                                    .length = size};
    struct tw_fabric_completion c;
    uint64_t t0 = tw__now_ns();
    for (int i = 0; i < iters; i++) {
        d.deadline_ns = tw__now_ns() + 60ull * 1000000000ull;
        if (tw__fabric_xfer_run(e->plane, &d, &c))
            DIE("engine transfer: %s", c.msg);
    }
    return (double)(tw__now_ns() - t0) / iters;
}

static double engine_rep_once(struct engine *e, int write, size_t size, struct tw_fabric_rkey rk)
{
    struct tw_fabric_xfer_desc d = {.op = write ? TW_FABRIC_PUSH : TW_FABRIC_PULL,
                                    .peer = e->peer,
                                    .local = e->mr,
                                    .remote = rk,
                                    .length = size,
                                    .deadline_ns = tw__now_ns() + 60ull * 1000000000ull};
    struct tw_fabric_completion c;
    uint64_t t0 = tw__now_ns();
    if (tw__fabric_xfer_run(e->plane, &d, &c))
        DIE("engine transfer: %s", c.msg);
    return (double)(tw__now_ns() - t0);
}

/* Transfers of `size` bytes each, window in flight, over consecutive
 * regions of span bytes (wrapping), for span bytes in all; ns per
 * transfer. */
static double engine_window(struct engine *e, int write, size_t size, unsigned window, size_t span,
                            struct tw_fabric_rkey rk)
{
    size_t n = span / size, next = 0, done = 0;
    unsigned inflight = 0;
    uint64_t t0 = tw__now_ns();
    while (done < n) {
        for (; inflight < window && next < n; next++, inflight++) {
            struct tw_fabric_xfer_desc d = {.op = write ? TW_FABRIC_PUSH : TW_FABRIC_PULL,
                                            .peer = e->peer,
                                            .local = e->mr,
                                            .local_offset = (uint64_t)next * size,
                                            .remote = rk,
                                            .length = size,
                                            .deadline_ns = tw__now_ns() + 60ull * 1000000000ull};
            d.remote.remote_addr += (uint64_t)next * size;
            d.remote.length = size;
            if (tw__fabric_xfer_submit(e->plane, &d, NULL))
                DIE("engine submit: %s", tw__fabric_errmsg(e->plane));
        }
        tw__fabric_progress(e->plane);
        struct tw_fabric_completion c[64];
        size_t k = tw__fabric_done_pop_many(e->plane, c, 64);
        for (size_t i = 0; i < k; i++)
            if (c[i].status)
                DIE("engine transfer: %s", c[i].msg);
        done += k;
        inflight -= (unsigned)k;
    }
    return (double)(tw__now_ns() - t0) / (double)n;
}

static double raw_window(struct tw_raw_fabric *r, int write, size_t size, unsigned window,
                         size_t span)
{
    uint64_t elapsed, n = span / size;
    if (tw_raw_fabric_loop(r, write, size, n, window, NULL, &elapsed))
        DIE("raw loop: %s", tw_raw_fabric_errmsg(r));
    return (double)elapsed / (double)n;
}

/* The raw loop (tools/raw_fabric.c), one operation at a time like the
 * engine's blocking path. */
static double raw_rep(struct tw_raw_fabric *r, int write, size_t size)
{
    int iters = iters_for(size);
    uint64_t elapsed;
    if (tw_raw_fabric_loop(r, write, size, (uint64_t)iters, 1, NULL, &elapsed))
        DIE("raw loop: %s", tw_raw_fabric_errmsg(r));
    return (double)elapsed / iters;
}

/* The raw loop's endpoint over local[0..len), aimed at the target's
 * region rk. */
static struct tw_raw_fabric *raw_open(const char *prov, void *local, size_t len,
                                      struct tw_fabric *target, struct tw_fabric_rkey rk)
{
    struct tw_raw_fabric *r;
    const struct tw_fabric_addr *taddr;
    char err[512];
    tw__fabric_local_addrs(target, &taddr);
    if (tw_raw_fabric_open(prov, local, len, NULL, &r, err, sizeof(err)))
        DIE("raw endpoint: %s", err);
    struct tw_raw_fabric_target rt = {.addr = taddr[0].addr,
                                      .addr_len = taddr[0].addr_len,
                                      .remote_addr = rk.remote_addr,
                                      .key = rk.key};
    if (tw_raw_fabric_set_target(r, &rt))
        DIE("raw target: %s", tw_raw_fabric_errmsg(r));
    return r;
}

static void fmt_size(size_t s, char *out, size_t len)
{
    if (s >= (1u << 20))
        snprintf(out, len, "%zu MiB", s >> 20);
    else if (s >= 1024)
        snprintf(out, len, "%zu KiB", s >> 10);
    else
        snprintf(out, len, "%zu B", s);
}

int main(int argc, char **argv)
{
    const char *prov = "tcp";
    int write = 0, reps = 5, sweep = 0;
    size_t chunk = 0, sizes[MAX_SIZES];
    unsigned depth = 0, nsizes = 0, adjacent = 0;
    static const struct option longopts[] = {{"sweep", no_argument, NULL, 'S'},
                                             {"adjacent", required_argument, NULL, 'A'},
                                             {0, 0, 0, 0}};
    int opt;
    while ((opt = getopt_long(argc, argv, "p:o:r:c:d:s:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'p':
            prov = optarg;
            break;
        case 'o':
            write = strcmp(optarg, "write") == 0;
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 'c':
            chunk = strtoull(optarg, NULL, 0);
            break;
        case 'd':
            depth = (unsigned)atoi(optarg);
            break;
        case 's':
            if (nsizes < MAX_SIZES)
                sizes[nsizes++] = strtoull(optarg, NULL, 0);
            break;
        case 'S':
            sweep = 1;
            break;
        case 'A':
            adjacent = (unsigned)atoi(optarg);
            if (adjacent < 1 || adjacent > 1024)
                DIE("--adjacent takes a window of 1..1024");
            break;
        default:
            DIE("usage: bench_fabric [-p prov] [-o read|write] [-r reps] [-c chunk] [-d depth] [-s "
                "size]... [--sweep] [--adjacent WINDOW]");
        }
    }
    if (reps < 1 || reps > 101)
        DIE("reps must be 1..101");
    if (nsizes == 0 && adjacent) {
        sizes[nsizes++] = 32u << 10;
    } else if (nsizes == 0) {
        sizes[nsizes++] = 4096;
        sizes[nsizes++] = 1u << 20;
        sizes[nsizes++] = 256u << 20;
    }
    size_t max = 0;
    for (unsigned i = 0; i < nsizes; i++)
        max = sizes[i] > max ? sizes[i] : max;
    if (adjacent && max < (64u << 20))
        max = 64u << 20; /* the span the transfers walk through */

    uint8_t *remote = malloc(max), *local = malloc(max);
    if (!remote || !local)
        DIE("out of memory");
    memset(remote, 0x5a, max);
    memset(local, 0xa5, max);

    struct tw_fabric_config tcfg = {.provider = prov, .node = "127.0.0.1", .threaded = 1};
    struct tw_fabric *target;
    char err[512];
    if (tw__fabric_open(&tcfg, &target, err, sizeof(err)))
        DIE("target plane: %s", err);

    struct engine e;
    struct tw_fabric_peer *tpeer;
    engine_open(&e, prov, chunk, depth, local, max, target, &tpeer);
    struct tw_fabric_mr *tmr;
    if (tw__fabric_mr_register(tpeer, remote, max, TW_FABRIC_REMOTE_READ | TW_FABRIC_REMOTE_WRITE,
                               TW_FABRIC_HOST, 0, &tmr))
        DIE("target register: %s", tw__fabric_errmsg(target));
    struct tw_fabric_rkey rk = tw__fabric_mr_rkey(tmr);

    unsigned def_depth = TW_FABRIC_DEFAULT_DEPTH;
    double load[1] = {0};
    if (getloadavg(load, 1) == 1)
        printf("host: %ld CPUs online, load average %.2f (figures are only comparable within "
               "one run)\n",
               sysconf(_SC_NPROCESSORS_ONLN), load[0]);
    printf("provider %s (%s), op %s, reps %d, engine chunk %zu depth %u\n",
           tw__fabric_peer_provider(e.peer), prov, write ? "fi_write" : "fi_read", reps,
           chunk ? chunk : (size_t)TW_FABRIC_DEFAULT_CHUNK, depth ? depth : def_depth);

    if (adjacent) {
        struct engine off;
        setenv("TW_FABRIC_JOIN", "0", 1);
        engine_open(&off, prov, chunk, depth, local, max, target, NULL);
        unsetenv("TW_FABRIC_JOIN");
        struct tw_raw_fabric *r = raw_open(prov, local, max, target, rk);
        printf("adjacent transfers, %u in flight, %zu MiB walked per repetition; GB/s (medians)\n",
               adjacent, max >> 20);
        printf("%-8s %10s %10s %10s %12s %8s %8s\n", "size", "joined", "not", "raw", "raw 1 MiB",
               "j/not", "j/raw");
        for (unsigned i = 0; i < nsizes; i++) {
            double vj[101], vn[101], vr[101], vm[101];
            struct tw_fabric_stats s0, s1;
            tw__fabric_stats(e.plane, &s0);
            for (int k = 0; k < reps; k++) {
                vj[k] = engine_window(&e, write, sizes[i], adjacent, max, rk);
                vn[k] = engine_window(&off, write, sizes[i], adjacent, max, rk);
                vr[k] = raw_window(r, write, sizes[i], adjacent, max);
                vm[k] = raw_window(r, write, 1u << 20, adjacent < 16 ? adjacent : 16, max);
            }
            tw__fabric_stats(e.plane, &s1);
            double j = (double)sizes[i] / tw_bench_median(vj, reps),
                   nj = (double)sizes[i] / tw_bench_median(vn, reps),
                   rw = (double)sizes[i] / tw_bench_median(vr, reps),
                   mb = (double)(1u << 20) / tw_bench_median(vm, reps);
            char ss[32];
            fmt_size(sizes[i], ss, sizeof(ss));
            printf("%-8s %10.3f %10.3f %10.3f %12.3f %8.2f %8.2f   (%.1f transfers per "
                   "operation)\n",
                   ss, j, nj, rw, mb, j / nj, j / rw,
                   s1.joins - s0.joins
                       ? (double)(s1.ops_joined - s0.ops_joined + (s1.joins - s0.joins)) /
                             (double)(s1.joins - s0.joins)
                       : 1.0);
        }
        tw_raw_fabric_close(r);
        engine_close(&off);
        engine_close(&e);
    } else if (sweep) {
        engine_close(&e);
        static const size_t chunks[] = {256u << 10, 1u << 20, 4u << 20, 16u << 20};
        static const unsigned depths[] = {1, 2, 4, 8, 16};
        printf("%-10s %-6s %12s\n", "chunk", "depth", "GB/s");
        for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++)
            for (size_t di = 0; di < sizeof(depths) / sizeof(depths[0]); di++) {
                engine_open(&e, prov, chunks[ci], depths[di], local, max, target, NULL);
                double v[101];
                for (int k = 0; k < reps; k++)
                    v[k] = engine_rep(&e, write, max, rk);
                double ns = tw_bench_median(v, reps);
                char cs[32];
                fmt_size(chunks[ci], cs, sizeof(cs));
                printf("%-10s %-6u %12.3f\n", cs, depths[di], (double)max / ns);
                engine_close(&e);
            }
    } else {
        struct tw_raw_fabric *r = raw_open(prov, local, max, target, rk);
        printf("%-8s %14s %14s %14s %14s %8s\n", "size", "raw us/op", "raw GB/s", "engine us/op",
               "engine GB/s", "ratio");
        for (unsigned i = 0; i < nsizes; i++) {
            double vr[101], ve[101];
            /* Interleave so drift (other load on the host) hits both. */
            for (int k = 0; k < reps; k++) {
                vr[k] = raw_rep(r, write, sizes[i]);
                ve[k] = engine_rep(&e, write, sizes[i], rk);
            }
            double mr = tw_bench_median(vr, reps), me = tw_bench_median(ve, reps);
            char ss[32];
            fmt_size(sizes[i], ss, sizeof(ss));
            printf("%-8s %14.2f %14.3f %14.2f %14.3f %8.2f\n", ss, mr / 1000, (double)sizes[i] / mr,
                   me / 1000, (double)sizes[i] / me, mr / me);
        }
        /* First operation after the target went idle: its mover has
         * stopped spinning and sleeps in poll() on the CQ wait fd, so this
         * is the wake-up cost a request pays after a quiet period. */
        double vi[101];
        for (int k = 0; k < reps; k++) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            nanosleep(&ts, NULL);
            vi[k] = engine_rep_once(&e, write, 4096, rk);
        }
        printf("4 KiB after 50 ms idle (target mover asleep): %.2f us median\n",
               tw_bench_median(vi, reps) / 1000);
        tw_raw_fabric_close(r);
        engine_close(&e);
    }
    if (memcmp(remote, local, 1) != 0 && !write)
        DIE("data check failed: a read did not bring the target's bytes");
    tw__fabric_mr_deregister(tmr);
    tw__fabric_peer_remove(tpeer);
    tw__fabric_close(target);
    free(remote);
    free(local);
    return 0;
}
