/*
 * Registration cache on the RDMA data plane: repeated fi_read pulls of the
 * same 64 MiB library-allocated host buffer between two planes of this
 * process (loopback), registering per transfer vs through the cache.
 *
 *   bench_mrcache [--transfers N] [--provider tcp,shm] [--size BYTES]
 *
 * Per provider, N rounds, each timing both variants back to back (order
 * alternating every round, so drift hits both alike):
 *   per-transfer  server registers the source (REMOTE_READ), client
 *                 registers the destination (LOCAL_READ), pull, both
 *                 deregister (tw__fabric_mr_register/deregister)
 *   cached        the same through tw__fabric_mrcache_acquire/release: the
 *                 first round registers, the rest hit
 * and reports medians, throughput and the ratio, plus the registration
 * part alone (acquire+release times). Every pulled buffer is checked.
 * The last line is
 *   mrcache <provider> per_transfer_ms=X cached_ms=Y ratio=R
 * for the last provider measured.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fabric/fabric.h"
#include "fabric/mrcache.h"
#include "mem/hostmem.h"
#include "tensorwire/error.h"

static struct tw_fabric *srv, *cli;
static struct tw_fabric_peer *srv_peer, *cli_peer;
static struct tw_fabric_mrcache *smc, *cmc;
static uint8_t *src, *dst;
static size_t size = (size_t)64 << 20;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

static void die(const char *what, int rc, const char *msg)
{
    fprintf(stderr, "bench_mrcache: %s: %s: %s\n", what, tw_strerror_name(rc), msg ? msg : "");
    exit(1);
}

static int open_pair(const char *prov)
{
    char err[512];
    struct tw_fabric_config cfg = {.provider = prov, .node = "127.0.0.1", .threaded = 1};
    int rc = tw__fabric_open(&cfg, &srv, err, sizeof(err));
    if (rc) {
        printf("%s: skipped: %s\n", prov, err);
        return rc;
    }
    cfg.threaded = 0;
    if ((rc = tw__fabric_open(&cfg, &cli, err, sizeof(err))))
        die("open client plane", rc, err);
    const struct tw_fabric_addr *mine, *theirs = NULL;
    unsigned n = tw__fabric_local_addrs(cli, &mine);
    struct tw_fabric_entry offer[TW_FABRIC_MAX_RAILS];
    for (unsigned i = 0; i < n; i++)
        tw__fabric_addr_view(&mine[i], &offer[i]);
    uint8_t host[TW_HOST_ID_LEN];
    tw__fabric_plane_host_id(cli, host);
    char reason[257];
    if ((rc = tw__fabric_accept_offer(srv, host, offer, n, &srv_peer, &theirs, reason,
                                      sizeof(reason))))
        die("accept", rc, reason);
    struct tw_fabric_entry accept;
    tw__fabric_addr_view(theirs, &accept);
    if ((rc = tw__fabric_peer_insert_entry(cli, &accept, &cli_peer)))
        die("insert", rc, tw__fabric_errmsg(cli));
    if ((rc = tw__fabric_mrcache_create(srv, NULL, &smc)) ||
        (rc = tw__fabric_mrcache_create(cli, NULL, &cmc)))
        die("mrcache create", rc, NULL);
    return 0;
}

static void close_pair(void)
{
    tw__fabric_mrcache_destroy(cmc);
    tw__fabric_mrcache_destroy(smc);
    tw__fabric_peer_remove(cli_peer);
    tw__fabric_peer_remove(srv_peer);
    tw__fabric_pause(srv, 1);
    tw__fabric_close(cli);
    tw__fabric_close(srv);
}

static void pull(struct tw_fabric_mr *local, uint64_t loff, struct tw_fabric_rkey key, unsigned i)
{
    src[0] = (uint8_t)i;
    src[size - 1] = (uint8_t)(i * 7);
    struct tw_fabric_xfer_desc d = {.op = TW_FABRIC_PULL,
                                    .peer = cli_peer,
                                    .local = local,
                                    .local_offset = loff,
                                    .remote = key,
                                    .length = size,
                                    .deadline_ns = tw__now_ns() + 60ull * 1000000000};
    struct tw_fabric_completion c;
    int rc = tw__fabric_xfer_run(cli, &d, &c);
    if (rc)
        die("pull", rc, c.msg);
    if (dst[0] != (uint8_t)i || dst[size - 1] != (uint8_t)(i * 7))
        die("pull", TW_EINTERNAL, "wrong bytes arrived");
}

/* Returns the round's wall time; *reg_ns gets the registration part,
 * *xfer_ns the pull alone. */
static uint64_t round_per_transfer(unsigned i, uint64_t *reg_ns, uint64_t *xfer_ns)
{
    uint64_t t0, t1, t2, t3;
    t0 = tw__now_ns();
    struct tw_fabric_mr *r = NULL, *l = NULL;
    int rc =
        tw__fabric_mr_register(srv_peer, src, size, TW_FABRIC_REMOTE_READ, TW_FABRIC_HOST, 0, &r);
    if (rc)
        die("register source", rc, tw__fabric_errmsg(srv));
    if ((rc = tw__fabric_mr_register(cli_peer, dst, size, TW_FABRIC_LOCAL_READ, TW_FABRIC_HOST, 0,
                                     &l)))
        die("register destination", rc, tw__fabric_errmsg(cli));
    t1 = tw__now_ns();
    pull(l, 0, tw__fabric_mr_rkey(r), i);
    t2 = tw__now_ns();
    tw__fabric_mr_deregister(l);
    tw__fabric_mr_deregister(r);
    t3 = tw__now_ns();
    *reg_ns = (t1 - t0) + (t3 - t2);
    *xfer_ns = t2 - t1;
    return t3 - t0;
}

static uint64_t round_cached(unsigned i, uint64_t *reg_ns, uint64_t *xfer_ns)
{
    uint64_t t0, t1, t2, t3;
    char err[512];
    t0 = tw__now_ns();
    struct tw_fabric_mrc *r = NULL, *l = NULL;
    int rc = tw__fabric_mrcache_acquire_peer(smc, srv_peer, src, size, TW_FABRIC_REMOTE_READ,
                                             TW_MEMKIND_HOST, &r, err, sizeof(err));
    if (rc)
        die("acquire source", rc, err);
    if ((rc = tw__fabric_mrcache_acquire_peer(cmc, cli_peer, dst, size, TW_FABRIC_LOCAL_READ,
                                              TW_MEMKIND_HOST, &l, err, sizeof(err))))
        die("acquire destination", rc, err);
    t1 = tw__now_ns();
    pull(tw__fabric_mrc_mr(l), tw__fabric_mrc_offset(l), tw__fabric_mrc_rkey(r), i);
    t2 = tw__now_ns();
    tw__fabric_mrcache_release(cmc, l);
    tw__fabric_mrcache_release(smc, r);
    t3 = tw__now_ns();
    *reg_ns = (t1 - t0) + (t3 - t2);
    *xfer_ns = t2 - t1;
    return t3 - t0;
}

int main(int argc, char **argv)
{
    unsigned transfers = 21;
    char provs[256] = "tcp,shm";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--transfers") && i + 1 < argc)
            transfers = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--provider") && i + 1 < argc)
            snprintf(provs, sizeof(provs), "%s", argv[++i]);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoull(argv[++i], NULL, 0);
        else {
            fprintf(stderr, "usage: %s [--transfers N] [--provider tcp,shm] [--size BYTES]\n",
                    argv[0]);
            return 2;
        }
    }
    if (transfers == 0 || size < 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc;
    if ((rc = tw__hostmem_alloc(size, (void **)&src)) ||
        (rc = tw__hostmem_alloc(size, (void **)&dst)))
        die("tw__hostmem_alloc", rc, NULL);
    memset(src, 1, size); /* fault the pages in: pinning real memory */
    memset(dst, 2, size);
    uint64_t *per = calloc(transfers, sizeof(*per)), *cached = calloc(transfers, sizeof(*cached));
    uint64_t *per_reg = calloc(transfers, sizeof(*per)), *c_reg = calloc(transfers, sizeof(*per));
    uint64_t *per_x = calloc(transfers, sizeof(*per)), *c_x = calloc(transfers, sizeof(*per));
    char last[256] = "";
    char *save = NULL;
    for (char *p = strtok_r(provs, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        if (open_pair(p))
            continue;
        const char *name = tw__fabric_peer_provider(cli_peer);
        uint64_t ignore, ignore2;
        round_per_transfer(1000, &ignore, &ignore2); /* warm-up: connections, page tables */
        for (unsigned i = 0; i < transfers; i++) {
            if (i & 1) {
                cached[i] = round_cached(i, &c_reg[i], &c_x[i]);
                per[i] = round_per_transfer(i, &per_reg[i], &per_x[i]);
            } else {
                per[i] = round_per_transfer(i, &per_reg[i], &per_x[i]);
                cached[i] = round_cached(i, &c_reg[i], &c_x[i]);
            }
        }
        struct tw_fabric_mrcache_stats st;
        tw__fabric_mrcache_stats(smc, &st);
        uint64_t mp = median(per, transfers), mc = median(cached, transfers);
        uint64_t rp = median(per_reg, transfers), rcd = median(c_reg, transfers);
        uint64_t xp = median(per_x, transfers), xc = median(c_x, transfers);
        double mib = (double)size / (1 << 20);
        printf("%s: %.0f MiB pull x %u: register per transfer median %.3f ms (%.2f GiB/s), "
               "cached median %.3f ms (%.2f GiB/s), ratio %.2fx; registration part: %.1f us "
               "vs %.2f us; pull part: %.3f ms vs %.3f ms; server cache: %llu miss, %llu hits\n",
               name, mib, transfers, (double)mp / 1e6, (double)size / (double)mp * 1e9 / (1u << 30),
               (double)mc / 1e6, (double)size / (double)mc * 1e9 / (1u << 30),
               mc ? (double)mp / (double)mc : 0.0, (double)rp / 1e3, (double)rcd / 1e3,
               (double)xp / 1e6, (double)xc / 1e6, (unsigned long long)st.total.misses,
               (unsigned long long)st.total.hits);
        snprintf(last, sizeof(last), "mrcache %s per_transfer_ms=%.3f cached_ms=%.3f ratio=%.2f",
                 name, (double)mp / 1e6, (double)mc / 1e6, mc ? (double)mp / (double)mc : 0.0);
        close_pair();
    }
    if (last[0])
        printf("%s\n", last);
    tw__hostmem_free(src);
    tw__hostmem_free(dst);
    free(per);
    free(cached);
    free(per_reg);
    free(per_x);
    free(c_x);
    free(c_reg);
    return last[0] ? 0 : 77;
}
