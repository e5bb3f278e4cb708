/* tensorwired /metrics: Prometheus text exposition through libmicrohttpd,
 * run from the server's event loop (metrics.h). */
#include "server/metrics.h"

#include <dlfcn.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "net/addr.h"
#include "net/sock.h"
#include "server/log.h"
#include "server/server.h"
#include "tensorwire/error.h"

/* libmicrohttpd is loaded with dlopen when --metrics is given, so a host
 * without it runs tensorwired (metrics.h). <microhttpd.h> gives the types;
 * the functions used are resolved here, in one place, into `mhd`. */
#define TW_MHD_LIBRARY "libmicrohttpd.so.12"
#define TW_MHD_SYMBOLS(X)                                                                          \
    X(start_daemon, MHD_start_daemon)                                                              \
    X(stop_daemon, MHD_stop_daemon)                                                                \
    X(get_daemon_info, MHD_get_daemon_info)                                                        \
    X(run, MHD_run)                                                                                \
    X(get_timeout, MHD_get_timeout)                                                                \
    X(create_response_from_buffer, MHD_create_response_from_buffer)                                \
    X(add_response_header, MHD_add_response_header)                                                \
    X(queue_response, MHD_queue_response)                                                          \
    X(destroy_response, MHD_destroy_response)

static struct {
#define TW_MHD_FIELD(field, sym) __typeof__(sym) *field;
    TW_MHD_SYMBOLS(TW_MHD_FIELD)
#undef TW_MHD_FIELD
} mhd;
static int mhd_loaded;

/* Loads the library once (loop thread only); it stays loaded for the
 * process's life. Returns 0 or TW_EINTERNAL with why in errbuf. */
static int mhd_load(char *errbuf, size_t errlen)
{
    if (mhd_loaded)
        return 0;
    void *lib = dlopen(TW_MHD_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(errbuf, errlen,
                 "--metrics needs %s (libmicrohttpd, e.g. Debian's libmicrohttpd12), which "
                 "cannot be loaded: %s",
                 TW_MHD_LIBRARY, why ? why : "dlopen failed");
        return TW_EINTERNAL;
    }
#define TW_MHD_RESOLVE(field, sym)                                                                 \
    *(void **)&mhd.field = dlsym(lib, #sym);                                                       \
    if (!mhd.field) {                                                                              \
        snprintf(errbuf, errlen, "--metrics: %s lacks %s", TW_MHD_LIBRARY, #sym);                  \
        goto out_close_lib;                                                                        \
    }
    TW_MHD_SYMBOLS(TW_MHD_RESOLVE)
#undef TW_MHD_RESOLVE
    mhd_loaded = 1;
    return 0;

out_close_lib:
    memset(&mhd, 0, sizeof(mhd));
    dlclose(lib);
    return TW_EINTERNAL;
}

static const double bucket_le[TW_METRICS_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
static const char *const plane_names[2] = {"inline", "rdma"};
static const char *const op_names[2] = {"get", "put"};

uint64_t tw__metrics_now_ns(const struct tw_srv_metrics *m)
{
    if (!m->mhd)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tw__metrics_xfer_end(struct tw_srv_metrics *m, const struct tw_xfer *x, uint64_t now_ns)
{
    int plane = x->ops->wire_plane == TW_DP_RDMA;
    int put = x->dir == TW_XFER_PUT;
    struct tw_metrics_xfers *s = &m->xfers[plane][put];
    s->bytes += x->done;
    if (x->failed || x->done != x->t->byte_length) {
        s->failed++;
        return;
    }
    s->ok++;
    if (!now_ns)
        return;
    uint64_t ns = now_ns > x->started_ns ? now_ns - x->started_ns : 0;
    s->sum_ns += ns;
    unsigned b = 0;
    while (b < TW_METRICS_BUCKETS && (double)ns > bucket_le[b] * 1e9)
        b++;
    s->bucket[b]++;
}

void tw__srv_plane_stats(const struct tw_srv *srv, struct tw_fabric_stats *fst,
                         struct tw_fabric_mrcache_stats *mst)
{
    memset(fst, 0, sizeof(*fst));
    memset(mst, 0, sizeof(*mst));
    if (srv->fab)
        tw__fabric_stats(srv->fab, fst);
    if (srv->mrc)
        tw__fabric_mrcache_stats(srv->mrc, mst);
}

/* ---- exposition ---- */

static void family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP tensorwire_%s %s\n# TYPE tensorwire_%s %s\n", name, help, name, type);
}

static void scalar(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
    family(f, name, type, help);
    fprintf(f, "tensorwire_%s %llu\n", name, (unsigned long long)v);
}

static void render_xfers(FILE *f, const struct tw_srv_metrics *m)
{
    family(f, "transfers_total", "counter",
           "Transfers (gets and puts) that ended, by data plane, operation and result.");
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < 2; o++) {
            const struct tw_metrics_xfers *s = &m->xfers[p][o];
            fprintf(f, "tensorwire_transfers_total{plane=\"%s\",op=\"%s\",result=\"ok\"} %llu\n",
                    plane_names[p], op_names[o], (unsigned long long)s->ok);
            fprintf(f,
                    "tensorwire_transfers_total{plane=\"%s\",op=\"%s\",result=\"failed\"} %llu\n",
                    plane_names[p], op_names[o], (unsigned long long)s->failed);
        }
    family(f, "transfer_bytes_total", "counter",
           "Tensor bytes moved by transfers that ended (partial bytes of failed ones included), "
           "by data plane and operation.");
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < 2; o++)
            fprintf(f, "tensorwire_transfer_bytes_total{plane=\"%s\",op=\"%s\"} %llu\n",
                    plane_names[p], op_names[o], (unsigned long long)m->xfers[p][o].bytes);
    family(f, "transfer_duration_seconds", "histogram",
           "Duration of successful transfers, from the request to the last byte moved (an "
           "inline get: queued on its connection), by data plane and operation.");
    for (int p = 0; p < 2; p++)
        for (int o = 0; o < 2; o++) {
            const struct tw_metrics_xfers *s = &m->xfers[p][o];
            uint64_t cum = 0;
            for (unsigned b = 0; b <= TW_METRICS_BUCKETS; b++) {
                cum += s->bucket[b];
                char le[32];
                if (b < TW_METRICS_BUCKETS)
                    snprintf(le, sizeof(le), "%g", bucket_le[b]);
                else
                    snprintf(le, sizeof(le), "+Inf");
                fprintf(f,
                        "tensorwire_transfer_duration_seconds_bucket{plane=\"%s\",op=\"%s\","
                        "le=\"%s\"} %llu\n",
                        plane_names[p], op_names[o], le, (unsigned long long)cum);
            }
            fprintf(f, "tensorwire_transfer_duration_seconds_sum{plane=\"%s\",op=\"%s\"} %.9f\n",
                    plane_names[p], op_names[o], (double)s->sum_ns / 1e9);
            fprintf(f, "tensorwire_transfer_duration_seconds_count{plane=\"%s\",op=\"%s\"} %llu\n",
                    plane_names[p], op_names[o], (unsigned long long)s->ok);
        }
}

int tw__metrics_render(const struct tw_srv *srv, char **out, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return -ENOMEM;
    struct tw_fabric_stats fst;
    struct tw_fabric_mrcache_stats mst;
    tw__srv_plane_stats(srv, &fst, &mst);
    const struct tw_srv_stats *st = &srv->stats;

    scalar(f, "connections", "gauge", "Connections being served.", srv->nconns);
    scalar(f, "connections_accepted_total", "counter", "Connections accepted and served.",
           st->connections_total);
    scalar(f, "connections_rejected_total", "counter",
           "Connections refused (connection limit or accept failure).", st->connections_rejected);
    scalar(f, "requests_total", "counter", "Requests received.", st->requests);
    scalar(f, "requests_failed_total", "counter", "Requests answered with ERROR.",
           st->requests_failed);
    scalar(f, "received_bytes_total", "counter", "Bytes read from control connections.",
           st->bytes_in);
    scalar(f, "sent_bytes_total", "counter", "Bytes written to control connections.",
           st->bytes_out);
    scalar(f, "puts_total", "counter", "Puts stored.", st->puts);
    scalar(f, "gets_total", "counter", "Gets started.", st->gets);
    scalar(f, "input_pauses_total", "counter",
           "Times a connection stopped being read because it did not read its replies.",
           st->input_pauses);
    scalar(f, "tensors", "gauge", "Names stored.", srv->store.count);
    scalar(f, "stored_bytes", "gauge", "Bytes of the current tensor versions.",
           srv->store.stored_bytes);
    scalar(f, "reserved_bytes", "gauge",
           "Bytes of every live tensor version, puts in progress included.", srv->store.reserved);
    scalar(f, "capacity_bytes", "gauge", "Most bytes stored (--capacity; 0 = unlimited).",
           srv->store.capacity);
    /* Per device: cpu (the store's own fields) and every declared GPU. */
    const struct tw_store *sto = &srv->store;
    static const char *const dev_fields[3][2] = {
        {"device_stored_bytes", "Bytes of the current tensor versions, by device."},
        {"device_reserved_bytes", "Bytes of every live tensor version, by device."},
        {"device_capacity_bytes", "Most bytes stored on the device (0 = unlimited)."},
    };
    for (int k = 0; k < 3; k++) {
        family(f, dev_fields[k][0], "gauge", dev_fields[k][1]);
        uint64_t cpu = k == 0 ? sto->stored_bytes : k == 1 ? sto->reserved : sto->capacity;
        fprintf(f, "tensorwire_%s{device=\"cpu\"} %llu\n", dev_fields[k][0],
                (unsigned long long)cpu);
        for (unsigned g = 0; g < sto->ngpus; g++) {
            const struct tw_store_gpu *gpu = &sto->gpu[g];
            uint64_t v = k == 0 ? gpu->stored_bytes : k == 1 ? gpu->reserved : gpu->capacity;
            fprintf(f, "tensorwire_%s{device=\"cuda:%d\"} %llu\n", dev_fields[k][0], gpu->ordinal,
                    (unsigned long long)v);
        }
    }

    /* Device memory held for small GPU tensors (server/devslab.h). */
    const struct tw_store_devmem_ops *dm = tw__store_devmem(sto);
    if (dm->held && sto->ngpus) {
        uint64_t held[TW_STORE_MAX_GPUS][2];
        for (unsigned g = 0; g < sto->ngpus; g++)
            dm->held(sto->gpu[g].ordinal, &held[g][0], &held[g][1]);
        static const char *const slab_fields[2][2] = {
            {"device_slab_bytes", "GPU memory held for tensors under 1 MiB (2 MiB chunks)."},
            {"device_slab_free_bytes", "The part of device_slab_bytes no tensor uses now."},
        };
        for (int k = 0; k < 2; k++) {
            family(f, slab_fields[k][0], "gauge", slab_fields[k][1]);
            for (unsigned g = 0; g < sto->ngpus; g++)
                fprintf(f, "tensorwire_%s{device=\"cuda:%d\"} %llu\n", slab_fields[k][0],
                        sto->gpu[g].ordinal, (unsigned long long)held[g][k]);
        }
    }

    render_xfers(f, &srv->metrics);

    scalar(f, "rdma_enabled", "gauge", "1 when the RDMA data plane is open.", srv->fab != NULL);
    scalar(f, "rdma_transfers_active", "gauge", "RDMA transfers in progress.", fst.xfers_active);
    scalar(f, "rdma_registrations_open", "gauge", "Memory registrations held.", fst.mrs_open);
    scalar(f, "rdma_peers", "gauge", "Client endpoints in the address vectors.", fst.peers);
    scalar(f, "rdma_stuck_operations", "gauge",
           "Operations of abandoned transfers the provider still holds.", fst.stuck_ops);
    scalar(f, "rdma_rails_retired_total", "counter", "RDMA rails retired (wedged included).",
           fst.rails_retired);
    scalar(f, "rdma_rails_wedged_total", "counter", "RDMA rails whose libfabric call hung.",
           fst.rails_wedged);
    scalar(f, "rdma_rails_reopened_total", "counter", "Replacement RDMA rails opened.",
           fst.rails_reopened);
    scalar(f, "regcache_hits_total", "counter", "Registration cache hits.", mst.total.hits);
    scalar(f, "regcache_misses_total", "counter", "Registration cache misses (registrations).",
           mst.total.misses);
    scalar(f, "regcache_evictions_total", "counter", "Registration cache evictions.",
           mst.total.evictions);
    scalar(f, "regcache_invalidations_total", "counter",
           "Cached registrations dropped because their memory went away.", mst.total.invalidations);
    scalar(f, "regcache_entries", "gauge", "Registrations in the cache.", mst.total.entries);
    scalar(f, "regcache_bytes", "gauge", "Bytes registered by cached entries.", mst.total.bytes);
    if (fclose(f) != 0 || !buf) {
        free(buf);
        return -ENOMEM;
    }
    *out = buf;
    *len = n;
    return 0;
}

/* ---- HTTP ---- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    struct tw_srv *srv = cls;
    struct MHD_Response *r;
    unsigned status;
    char *body = NULL;
    size_t len = 0;
    static const char not_found[] = "not found: the only page is /metrics\n";
    static const char bad_method[] = "only GET and HEAD\n";

    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        status = MHD_HTTP_METHOD_NOT_ALLOWED;
        r = mhd.create_response_from_buffer(sizeof(bad_method) - 1, (void *)bad_method,
                                            MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, "/metrics") != 0) {
        status = MHD_HTTP_NOT_FOUND;
        r = mhd.create_response_from_buffer(sizeof(not_found) - 1, (void *)not_found,
                                            MHD_RESPMEM_PERSISTENT);
    } else if (tw__metrics_render(srv, &body, &len) != 0) {
        return MHD_NO; /* out of memory: drop the connection */
    } else {
        status = MHD_HTTP_OK;
        r = mhd.create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
        if (!r)
            free(body);
    }
    if (!r)
        return MHD_NO;
    mhd.add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            status == MHD_HTTP_OK ? "text/plain; version=0.0.4; charset=utf-8"
                                                  : "text/plain; charset=utf-8");
    enum MHD_Result ret = mhd.queue_response(conn, status, r);
    mhd.destroy_response(r);
    return ret;
}

static void run_mhd(struct tw_srv *srv)
{
    struct tw_srv_metrics *m = &srv->metrics;
    if (mhd.run(m->mhd) != MHD_YES)
        TW_LOGW("metrics: MHD_run failed");
    MHD_UNSIGNED_LONG_LONG ms;
    if (mhd.get_timeout(m->mhd, &ms) == MHD_YES)
        tw__loop_timer_start(&srv->loop, &m->timer, ms ? (uint64_t)ms : 1);
    else
        tw__loop_timer_stop(&srv->loop, &m->timer);
}

static void on_mhd_io(struct tw_loop *loop, struct tw_io *io, uint32_t events)
{
    run_mhd(io->data);
}

static void on_mhd_timer(struct tw_loop *loop, struct tw_timer *t)
{
    run_mhd(t->data);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    TW_LOGD("metrics: %s", msg);
}

int tw__metrics_start(struct tw_srv *srv, char *errbuf, size_t errlen)
{
    struct tw_srv_metrics *m = &srv->metrics;
    struct sockaddr_storage sa;
    socklen_t salen;
    char why[256];
    int lfd = -1, rc;

    if (!srv->cfg.metrics[0])
        return 0;
    rc = mhd_load(errbuf, errlen);
    if (rc < 0)
        return rc;
    rc = tw__net_parse_hostport(srv->cfg.metrics, &sa, &salen, why, sizeof(why));
    if (rc < 0) {
        snprintf(errbuf, errlen, "--metrics %s: %s", srv->cfg.metrics, why);
        return rc;
    }
    /* Our own listener (nonblocking, close-on-exec, SO_REUSEADDR) handed to
     * MHD, so a bind error is reported like the main listener's. */
    rc = tw__net_listen((const struct sockaddr *)&sa, salen, 16, &lfd);
    if (rc < 0) {
        snprintf(errbuf, errlen, "--metrics %s: %s", srv->cfg.metrics, tw_strerror(rc));
        return rc;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof(bound);
    if (tw__net_local_addr(lfd, &bound, &blen) == 0)
        tw__net_addr_format((const struct sockaddr *)&bound, m->bound, sizeof(m->bound));
    m->mhd = mhd.start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, srv,
                              MHD_OPTION_LISTEN_SOCKET, lfd, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)TW_METRICS_MAX_CLIENTS, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)TW_METRICS_TIMEOUT_S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                              NULL, MHD_OPTION_END);
    if (!m->mhd) {
        snprintf(errbuf, errlen, "--metrics %s: libmicrohttpd did not start", srv->cfg.metrics);
        rc = TW_EINTERNAL;
        goto out_close_listener;
    }
    const union MHD_DaemonInfo *info = mhd.get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info) {
        snprintf(errbuf, errlen, "--metrics: libmicrohttpd has no epoll fd");
        rc = TW_EINTERNAL;
        goto out_stop_daemon;
    }
    tw__io_init(&m->io, info->epoll_fd, on_mhd_io, srv);
    tw__timer_init(&m->timer, on_mhd_timer, srv);
    rc = tw__loop_io_set(&srv->loop, &m->io, EPOLLIN);
    if (rc < 0) {
        snprintf(errbuf, errlen, "--metrics: epoll_ctl: %s", tw_strerror(rc));
        goto out_stop_daemon;
    }
    TW_LOGI("metrics on http://%s/metrics", m->bound);
    return 0;

out_stop_daemon:
    mhd.stop_daemon(m->mhd); /* closes the listener it was given too */
    m->mhd = NULL;
    return rc;
out_close_listener:
    close(lfd);
    return rc;
}

void tw__metrics_stop(struct tw_srv *srv)
{
    struct tw_srv_metrics *m = &srv->metrics;
    if (!m->mhd)
        return;
    tw__loop_io_del(&srv->loop, &m->io);
    tw__loop_timer_stop(&srv->loop, &m->timer);
    mhd.stop_daemon(m->mhd);
    m->mhd = NULL;
}
