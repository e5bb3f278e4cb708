/*
 * tensorwired metrics: counters the session layer bumps, and
 * `--metrics HOST:PORT`, which serves them (with STATS' counters and
 * gauges) in Prometheus text exposition format 0.0.4 on GET /metrics.
 *
 * HTTP is libmicrohttpd's, driven from the server's own event loop
 * (MHD's epoll fd watched by the loop, MHD's timeout as a loop timer), so
 * the page is built on the loop thread and reads the server's state without
 * any lock. At most TW_METRICS_MAX_CLIENTS scrapers at once, each cut after
 * TW_METRICS_TIMEOUT_S without progress: a scraper cannot hold the server.
 *
 * libmicrohttpd is not linked: tw__metrics_start() dlopens
 * libmicrohttpd.so.12 (and resolves the few functions used, metrics.c)
 * the first time --metrics is given, and fails with a message naming the
 * library when it cannot be loaded; without --metrics it is never loaded,
 * so tensorwired runs on hosts that lack it. Once loaded it stays loaded
 * until the process exits.
 *
 * Ownership: struct tw_srv_metrics lives inside struct tw_srv;
 * tw__metrics_start() creates the HTTP daemon, tw__metrics_stop() (also
 * safe when it never started) frees it. Both on the loop thread.
 */
#ifndef TW_SERVER_METRICS_H
#define TW_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "net/loop.h"

#define TW_METRICS_MAX_CLIENTS 8u
#define TW_METRICS_TIMEOUT_S 10u
/* Upper bounds (seconds) of the transfer-duration histogram buckets. */
#define TW_METRICS_BUCKETS 14u

struct tw_srv;
struct tw_xfer;

/* Transfer outcomes by plane (0 inline, 1 rdma) and direction (0 get, 1 put). */
struct tw_metrics_xfers {
    uint64_t ok, failed;
    uint64_t bytes; /* bytes moved, failed transfers' partial bytes included */
    uint64_t bucket[TW_METRICS_BUCKETS + 1]; /* successful ones, by duration; last = +Inf */
    uint64_t sum_ns;
};

struct tw_srv_metrics {
    struct tw_metrics_xfers xfers[2][2];
    struct MHD_Daemon *mhd; /* NULL: --metrics not given */
    struct tw_io io;
    struct tw_timer timer;
    char bound[64];
};

/* Records the end of transfer x (called by tw__xfer_destroy: every transfer
 * ends there exactly once). It counts as ok when it was not marked failed
 * and moved all byte_length bytes; its duration goes into the histogram
 * when now_ns is not 0 (tw__metrics_now_ns). */
void tw__metrics_xfer_end(struct tw_srv_metrics *m, const struct tw_xfer *x, uint64_t now_ns);

/*
 * Starts serving /metrics on srv->cfg.metrics ("HOST:PORT"; port 0 picks
 * one, written to srv->metrics.bound). Returns 0 (also when no address is
 * configured) or a negative code with errbuf saying why.
 */
int tw__metrics_start(struct tw_srv *srv, char *errbuf, size_t errlen);
void tw__metrics_stop(struct tw_srv *srv);

/*
 * Writes the exposition text of srv into a new malloc'd, NUL-terminated
 * buffer (*out, *len; the caller frees it). Returns 0 or -ENOMEM.
 */
int tw__metrics_render(const struct tw_srv *srv, char **out, size_t *len);

/* The RDMA plane's and its registration cache's counters (zeros when the
 * server has no plane), for STATS and /metrics. */
struct tw_fabric_stats;
struct tw_fabric_mrcache_stats;
void tw__srv_plane_stats(const struct tw_srv *srv, struct tw_fabric_stats *fst,
                         struct tw_fabric_mrcache_stats *mst);

/* Monotonic clock in nanoseconds while /metrics is served (m->mhd), else 0:
 * the duration histogram is shown nowhere else, and the two clock reads
 * per transfer were 4% of the server's time in 4 KiB gets (perf, 2-core
 * VM). */
uint64_t tw__metrics_now_ns(const struct tw_srv_metrics *m);

#endif
