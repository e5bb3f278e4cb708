/*
 * One handler per client message. Every message reaching here was decoded by
 * the codec and approved by the state machine, so handlers deal only with
 * meaning: does the tensor exist, does it fit, is the token right.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/server.h"

/* Data planes this server always offers; RDMA (bit 2, and bit 3 unless
 * --push never) only when its plane opened (tw__srv_fabric_caps). Eager
 * puts (bit 4) cost nothing here: a TENSOR_PUT is answered as soon as it
 * is read, before the DATA behind it (handle_put), and DATA of a put
 * answered with ERROR is dropped as stale (conn.c begin_data). */
#define SERVER_CAPS (TW_CAP_INLINE_DATA | TW_CAP_PAYLOAD_CRC32C | TW_CAP_EAGER_PUT)
#define SERVER_AGENT "tensorwired/0.1"

/* Names in messages: printable and bounded, so a 1 KiB name does not flood
 * an ERROR message or a log line. */
static const char *show_name(const struct tw_bytes *b, char *buf, size_t len)
{
    size_t n = b->len < len - 4 ? b->len : len - 4;
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        buf[j++] = (b->ptr[i] >= 0x20 && b->ptr[i] != 0x7f) ? (char)b->ptr[i] : '?';
    if (n < b->len) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    buf[j] = '\0';
    return buf;
}

static void count_request(struct tw_srv_conn *c)
{
    c->requests++;
    c->srv->stats.requests++;
}

static void handle_hello(struct tw_srv_conn *c, const struct tw_msg *m)
{
    struct tw_srv *srv = c->srv;
    uint64_t offered = SERVER_CAPS | tw__srv_fabric_caps(srv);
    uint64_t caps = m->u.hello.caps & offered & TW_CAP_KNOWN_MASK;
    if (!(caps & TW_CAP_RDMA_DATA_PLANE))
        caps &= ~TW_CAP_RDMA_GPUDIRECT;
    if (!(caps & (TW_CAP_INLINE_DATA | TW_CAP_RDMA_DATA_PLANE))) {
        tw__conn_fail(c, TW_WIRE_PROTOCOL_ERROR,
                      "no common data plane: client capabilities 0x%llx, server offers 0x%llx "
                      "(inline data)",
                      (unsigned long long)m->u.hello.caps, (unsigned long long)offered);
        return;
    }
    c->caps = caps;
    c->max_frame =
        m->u.hello.max_frame < srv->cfg.max_frame ? m->u.hello.max_frame : srv->cfg.max_frame;
    c->max_inflight = m->u.hello.max_inflight < srv->cfg.max_inflight ? m->u.hello.max_inflight
                                                                      : srv->cfg.max_inflight;
    int auth = srv->token.len > 0;
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_HELLO_ACK;
    r.u.hello_ack.caps = caps;
    r.u.hello_ack.max_frame = c->max_frame;
    r.u.hello_ack.max_inflight = c->max_inflight;
    r.u.hello_ack.auth_method = auth ? TW_AUTH_HMAC_SHA256 : TW_AUTH_NONE;
    if (auth) {
        if (tw__auth_nonce(c->server_nonce) < 0) {
            tw__conn_fail(c, TW_WIRE_INTERNAL, "cannot generate a nonce");
            return;
        }
        memcpy(r.u.hello_ack.server_nonce, c->server_nonce, TW_AUTH_NONCE_LEN);
    }
    r.u.hello_ack.agent.ptr = (const uint8_t *)SERVER_AGENT;
    r.u.hello_ack.agent.len = (uint32_t)strlen(SERVER_AGENT);
    if (tw__conn_send(c, &r) < 0)
        return;
    char agent[80];
    TW_LOGD("conn %llu %s: hello from '%s': caps 0x%llx, max_frame %u, max_inflight %u%s",
            (unsigned long long)c->id, c->peer, show_name(&m->u.hello.agent, agent, sizeof(agent)),
            (unsigned long long)caps, c->max_frame, c->max_inflight,
            auth ? ", authentication required" : "");
    if (!auth)
        tw__conn_handshake_done(c);
}

static void handle_auth(struct tw_srv_conn *c, const struct tw_msg *m)
{
    struct tw_srv *srv = c->srv;
    uint8_t want[TW_AUTH_MAC_LEN];
    if (tw__auth_mac(srv->token.bytes, srv->token.len, TW_AUTH_PROOF_CLIENT, c->server_nonce,
                     m->u.auth.client_nonce, want) < 0) {
        tw__conn_fail(c, TW_WIRE_INTERNAL, "HMAC computation failed");
        return;
    }
    if (!tw__auth_mac_equal(want, m->u.auth.mac)) {
        TW_LOGW("conn %llu %s: authentication failed: wrong token", (unsigned long long)c->id,
                c->peer);
        tw__conn_fail(c, TW_WIRE_UNAUTHORIZED,
                      "authentication failed: the MAC does not match this server's token");
        return;
    }
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_AUTH_OK;
    if (tw__auth_mac(srv->token.bytes, srv->token.len, TW_AUTH_PROOF_SERVER, c->server_nonce,
                     m->u.auth.client_nonce, r.u.auth_ok.mac) < 0) {
        tw__conn_fail(c, TW_WIRE_INTERNAL, "HMAC computation failed");
        return;
    }
    if (tw__conn_send(c, &r) < 0)
        return;
    tw__conn_handshake_done(c);
    TW_LOGD("conn %llu %s: authenticated", (unsigned long long)c->id, c->peer);
}

uint64_t tw__srv_rdma_min_bytes(const struct tw_srv *srv, enum tw_path_provider prov,
                                enum tw_path_op op)
{
    if (srv->cfg.rdma_min_bytes_set)
        return srv->cfg.rdma_min_bytes;
    if (op == TW_PATH_PUT)
        return TW_DEFAULT_RDMA_MIN_BYTES_PUT;
    return prov == TW_PATH_PROV_SHM ? TW_DEFAULT_RDMA_MIN_BYTES_SHM : srv->cfg.rdma_min_bytes;
}

/* The kind of provider c's RDMA peer is on (NONE without one). */
static enum tw_path_provider conn_provider(const struct tw_srv_conn *c)
{
    return tw__path_provider_kind(c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL);
}

static enum tw_path_push path_push(int srv_push)
{
    switch (srv_push) {
    case TW_SRV_PUSH_ALWAYS:
        return TW_PATH_PUSH_ALWAYS;
    case TW_SRV_PUSH_NEVER:
        return TW_PATH_PUSH_NEVER;
    default:
        return TW_PATH_PUSH_AUTO;
    }
}

/*
 * The path of one get or put: tw__path_decide (proto/path.h, the one place
 * that decides plane, push or pull and staging) over what this connection
 * negotiated and the request. Only the inputs are gathered here: the
 * decision does no I/O, so the rail's health is read first. A retired rail
 * (src/fabric/fabric.h: a wedged or blocked shm endpoint) downgrades the
 * rest of the connection, said once.
 */
static struct tw_path choose_path(struct tw_srv_conn *c, enum tw_path_op op, uint32_t flags,
                                  const struct tw_tensor *t, struct tw_path_in *inp)
{
    struct tw_srv *srv = c->srv;
    enum tw_path_provider prov = conn_provider(c);
    struct tw_path_in in = {
        .role = TW_PATH_SERVER,
        .op = op,
        .caps = c->caps,
        .endpoint_accepted = c->fpeer && srv->fab,
        .provider = prov,
        .rail_usable = 1,
        .want_rdma = (flags & TW_XFER_WANT_RDMA) != 0,
        .size_known = 1,
        .size = t->byte_length,
        .rdma_min_bytes = tw__srv_rdma_min_bytes(srv, prov, op),
        .mem_local = t->gpu >= 0 ? TW_PATH_MEM_CUDA : TW_PATH_MEM_HOST,
        .mem_peer = TW_PATH_MEM_UNKNOWN, /* the client's memory is not on the wire */
        .push = path_push(srv->cfg.push),
        .gdr = tw__srv_gdr_verdict(c, t), /* one table cell (gdr_srv.c) */
        .peer_cma = 0,                    /* a put's: known at its RDMA_REGISTER (xfer_rdma.c) */
    };
    char detail[320];
    if (in.want_rdma && in.endpoint_accepted &&
        !tw__fabric_peer_usable(c->fpeer, detail, sizeof(detail))) {
        in.rail_usable = 0;
        if (!c->rdma_downgraded) {
            c->rdma_downgraded = 1;
            TW_LOGW("conn %llu %s: rdma unusable (%s); this connection moves data inline from "
                    "now on",
                    (unsigned long long)c->id, c->peer, detail);
        }
    }
    if (inp) /* the inputs, for the caller (a put decides again at RDMA_REGISTER) */
        *inp = in;
    return tw__path_decide(&in);
}

/* Debug log of a WANT_RDMA request's path (plain inline requests are the
 * common case and stay quiet). */
static void log_path(const struct tw_srv_conn *c, uint64_t id, enum tw_path_op op,
                     const struct tw_tensor *t, uint32_t flags, const struct tw_path *p)
{
    if (!(flags & TW_XFER_WANT_RDMA) || !tw__log_enabled(TW_LOG_DEBUG))
        return;
    /* GPU memory staged for want of GPUDirect: say which predicate failed. */
    char why[256] = "";
    if (p->reason == TW_PATH_R_STAGED_NO_GPUDIRECT && t->gpu >= 0) {
        why[0] = ' ';
        why[1] = '(';
        tw__srv_gdr_why_not(c, c->srv->store.gpu[t->gpu].ordinal, why + 2, sizeof(why) - 3);
        strcat(why, ")");
    }
    TW_LOGD("conn %llu %s: %s request %llu of %llu B: %s data plane%s, %s%s (--rdma-min-bytes "
            "%llu)",
            (unsigned long long)c->id, c->peer, op == TW_PATH_PUT ? "put" : "get",
            (unsigned long long)id, (unsigned long long)t->byte_length,
            p->plane == TW_PATH_PLANE_RDMA     ? "rdma"
            : p->plane == TW_PATH_PLANE_INLINE ? "inline"
                                               : "no",
            p->mode == TW_PATH_PUSH ? " (push)" : "",
            tw__path_reason_str((enum tw_path_reason)p->reason), why,
            (unsigned long long)tw__srv_rdma_min_bytes(c->srv, conn_provider(c), op));
}

/* No data plane of this server implements the path: none is left (the RDMA
 * rail of an RDMA-only connection was retired, docs/protocol.md §7). The
 * request fails, the connection stays. */
static void refuse_no_plane(struct tw_srv_conn *c, uint64_t id, const char *op,
                            const struct tw_path *p)
{
    tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "%s: no data plane left on this connection (%s)",
                        op, tw__path_reason_str((enum tw_path_reason)p->reason));
}

static void handle_get(struct tw_srv_conn *c, const struct tw_msg *m)
{
    char name[96];
    const struct tw_bytes *nm = &m->u.tensor_request.name;
    uint64_t id = m->hdr.request_id;
    count_request(c);
    struct tw_tensor *t = tw__store_get(&c->srv->store, nm->ptr, nm->len);
    if (!t) {
        tw__conn_send_error(c, id, TW_WIRE_NOT_FOUND, "no tensor named '%s'",
                            show_name(nm, name, sizeof(name)));
        return;
    }
    struct tw_path_in in;
    struct tw_path path = choose_path(c, TW_PATH_GET, m->u.tensor_request.flags, t, &in);
    log_path(c, id, TW_PATH_GET, t, m->u.tensor_request.flags, &path);
    if (!tw__dp_for_path(&path)) {
        tw__tensor_unref(t);
        refuse_no_plane(c, id, "get", &path);
        return;
    }
    struct tw_xfer *x = tw__xfer_new(c, id, TW_XFER_GET, t, &path);
    tw__tensor_unref(t);
    if (!x) {
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "out of memory");
        return;
    }
    /* Meaningful over a host-local provider only (§4.5): elsewhere the
     * source is registered as for any get. */
    x->attach =
        (m->u.tensor_request.flags & TW_XFER_ATTACH_READ) && in.provider == TW_PATH_PROV_SHM;
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_TENSOR_INFO;
    r.hdr.request_id = id;
    r.u.tensor_info.data_plane = x->ops->wire_plane;
    tw__tensor_describe(x->t, (c->caps & TW_CAP_PAYLOAD_CRC32C) != 0, &r.u.tensor_info.desc);
    /* A refused send means the connection is closing: x stays in its table
     * and goes with the deferred teardown; only starting it is pointless. */
    if (tw__conn_send(c, &r) < 0)
        return;
    c->srv->stats.gets++;
    int rc = x->ops->start(x);
    if (rc < 0) {
        char why[sizeof(x->why)];
        snprintf(why, sizeof(why), "%s", x->why[0] ? x->why : tw_strerror(rc));
        tw__xfer_destroy(x);
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "cannot start the transfer: %s", why);
    }
}

/*
 * The device check of a put, before PUT_ACCEPT and so before any RDMA
 * handshake (protocol §9.8): a device that is unknown, absent, not served
 * or (a GPU) without room gets DEVICE_UNAVAILABLE naming the reason and the
 * devices served. Returns 1 when the put may go on.
 */
static int device_ok(struct tw_srv_conn *c, uint64_t id, const struct tw_descriptor *d)
{
    struct tw_srv *srv = c->srv;
    uint64_t free_bytes[TW_SRV_MAX_DEVICES];
    char name[96], tag[40], list[256];
    for (unsigned i = 0; i < srv->devices.n; i++)
        free_bytes[i] = tw__store_device_free_bytes(&srv->store, &srv->devices.d[i].dev);
    struct tw_srv_device_verdict v =
        tw__srv_device_admit(&srv->devices, srv->gpu_count, free_bytes,
                             (const char *)d->device_tag.ptr, d->device_tag.len, d->byte_length);
    if (v.reason == TW_SRV_DEVICE_OK)
        return 1; /* the text below is for refusals only: a put pays nothing for it */
    show_name(&d->name, name, sizeof(name));
    show_name(&d->device_tag, tag, sizeof(tag));
    tw__srv_devices_format(&srv->devices, list, sizeof(list));
    if (v.reason == TW_SRV_DEVICE_NO_ROOM) {
        tw__conn_send_error(c, id, TW_WIRE_DEVICE_UNAVAILABLE,
                            "put of '%s': device %s has %llu of %llu bytes free, %llu needed "
                            "(devices: %s)",
                            name, tag, (unsigned long long)free_bytes[v.index],
                            (unsigned long long)srv->devices.d[v.index].capacity,
                            (unsigned long long)d->byte_length, list);
        return 0;
    }
    tw__conn_send_error(c, id, TW_WIRE_DEVICE_UNAVAILABLE,
                        "put of '%s': device %s %s (devices: %s)", name, tag,
                        tw__srv_device_reason_str(v.reason), list);
    return 0;
}

static void handle_put(struct tw_srv_conn *c, const struct tw_msg *m)
{
    char name[96];
    const struct tw_descriptor *d = &m->u.tensor_put.desc;
    uint64_t id = m->hdr.request_id;
    struct tw_store *st = &c->srv->store;
    count_request(c);
    if (!device_ok(c, id, d))
        return;
    struct tw_tensor *t = NULL;
    int rc = tw__store_alloc(st, d, &t);
    if (rc == TW_ECAPACITY) {
        tw__conn_send_error(
            c, id, TW_WIRE_CAPACITY_EXCEEDED,
            "put of '%s' needs %llu bytes but only %llu of the server's %llu "
            "bytes are free",
            show_name(&d->name, name, sizeof(name)), (unsigned long long)d->byte_length,
            (unsigned long long)tw__store_free_bytes(st), (unsigned long long)st->capacity);
        return;
    }
    if (rc < 0) {
        tw__conn_send_error(c, id, TW_WIRE_CAPACITY_EXCEEDED,
                            "put of '%s': cannot allocate %llu bytes of host memory",
                            show_name(&d->name, name, sizeof(name)),
                            (unsigned long long)d->byte_length);
        return;
    }
    struct tw_path_in in;
    struct tw_path path = choose_path(c, TW_PATH_PUT, m->u.tensor_put.flags, t, &in);
    log_path(c, id, TW_PATH_PUT, t, m->u.tensor_put.flags, &path);
    if (!tw__dp_for_path(&path)) {
        tw__tensor_unref(t); /* the unpublished version goes */
        refuse_no_plane(c, id, "put", &path);
        return;
    }
    struct tw_xfer *x = tw__xfer_new(c, id, TW_XFER_PUT, t, &path);
    tw__tensor_unref(t); /* x holds the only reference now (or none: freed) */
    if (!x) {
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "out of memory");
        return;
    }
    x->path_in = in; /* decided again at the client's RDMA_REGISTER (peer_cma) */
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_PUT_ACCEPT;
    r.hdr.request_id = id;
    r.u.put_accept.data_plane = x->ops->wire_plane;
    if (tw__conn_send(c, &r) < 0)
        return;
    rc = x->ops->start(x);
    if (rc < 0) {
        char why[sizeof(x->why)];
        snprintf(why, sizeof(why), "%s", x->why[0] ? x->why : tw_strerror(rc));
        tw__xfer_destroy(x);
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "cannot start the transfer: %s", why);
    }
}

static void handle_stat(struct tw_srv_conn *c, const struct tw_msg *m)
{
    char name[96];
    uint64_t id = m->hdr.request_id;
    count_request(c);
    struct tw_tensor *t = tw__store_get(&c->srv->store, m->u.name.name.ptr, m->u.name.name.len);
    if (!t) {
        tw__conn_send_error(c, id, TW_WIRE_NOT_FOUND, "no tensor named '%s'",
                            show_name(&m->u.name.name, name, sizeof(name)));
        return;
    }
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_TENSOR_INFO;
    r.hdr.request_id = id;
    r.u.tensor_info.data_plane = TW_DP_NONE;
    tw__tensor_describe(t, (c->caps & TW_CAP_PAYLOAD_CRC32C) != 0, &r.u.tensor_info.desc);
    tw__conn_send(c, &r);
    tw__tensor_unref(t);
}

static void handle_delete(struct tw_srv_conn *c, const struct tw_msg *m)
{
    char name[96];
    uint64_t id = m->hdr.request_id;
    count_request(c);
    if (tw__store_delete(&c->srv->store, m->u.name.name.ptr, m->u.name.name.len) < 0) {
        tw__conn_send_error(c, id, TW_WIRE_NOT_FOUND, "no tensor named '%s'",
                            show_name(&m->u.name.name, name, sizeof(name)));
        return;
    }
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_OK;
    r.hdr.request_id = id;
    tw__conn_send(c, &r);
}

static int send_list_frame(struct tw_srv_conn *c, uint64_t id, uint32_t count,
                           const uint8_t *entries, size_t len, int more)
{
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_LIST_REPLY;
    r.hdr.request_id = id;
    r.hdr.flags = more ? TW_FRAME_MORE : 0;
    r.u.list_reply.count = count;
    r.u.list_reply.entries.ptr = entries;
    r.u.list_reply.entries.len = (uint32_t)len;
    return tw__conn_send(c, &r);
}

static void handle_list(struct tw_srv_conn *c, const struct tw_msg *m)
{
    uint64_t id = m->hdr.request_id;
    struct tw_tensor **list = NULL;
    size_t n = 0;
    count_request(c);
    int rc = tw__store_list(&c->srv->store, m->u.list.prefix.ptr, m->u.list.prefix.len, &list, &n);
    if (rc < 0) {
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "out of memory listing tensors");
        return;
    }
    /* Frames of at most TW_SRV_LIST_FRAME payload (and never above the
     * negotiated max_frame), each a count plus whole descriptors. */
    size_t cap = TW_SRV_LIST_FRAME < c->max_frame ? TW_SRV_LIST_FRAME : c->max_frame;
    cap -= 4;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        tw__store_list_free(list, n);
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "out of memory listing tensors");
        return;
    }
    size_t used = 0;
    uint32_t count = 0;
    int with_crc = (c->caps & TW_CAP_PAYLOAD_CRC32C) != 0;
    for (size_t i = 0; i < n; i++) {
        struct tw_descriptor d;
        tw__tensor_describe(list[i], with_crc, &d);
        size_t need = tw__descriptor_encoded_len(&d);
        if (used + need > cap) {
            if (send_list_frame(c, id, count, buf, used, 1) < 0)
                goto out_free_list;
            used = 0;
            count = 0;
        }
        ssize_t w = tw__descriptor_encode(&d, buf + used, cap - used);
        if (w < 0) {
            tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "cannot encode '%s': %s", list[i]->name,
                                tw_strerror((int)w));
            goto out_free_list;
        }
        used += (size_t)w;
        count++;
    }
    send_list_frame(c, id, count, buf, used, 0);

out_free_list:
    free(buf);
    tw__store_list_free(list, n);
}

/* Per device served: device.<dev>.{capacity,reserved,stored}_bytes, <dev>
 * being "cpu" or "cudaN" (STATS keys have no ':'), and for a GPU the device
 * memory held for small versions, device.cudaN.slab_{bytes,free_bytes}.
 * Adds to *count. */
static ssize_t encode_device_stats(struct tw_srv *srv, uint8_t *buf, size_t cap, uint32_t *count)
{
    size_t used = 0;
    for (unsigned i = 0; i < srv->devices.n; i++) {
        const struct tw_device *d = &srv->devices.d[i].dev;
        uint64_t v[5] = {srv->store.capacity, srv->store.reserved, srv->store.stored_bytes};
        int nv = 3;
        char dev[16];
        if (d->type == TW_DEVICE_CUDA) {
            const struct tw_store_gpu *g = tw__store_gpu(&srv->store, d->ordinal);
            const struct tw_store_devmem_ops *dm = tw__store_devmem(&srv->store);
            if (!g)
                continue;
            v[0] = g->capacity;
            v[1] = g->reserved;
            v[2] = g->stored_bytes;
            if (dm->held) {
                dm->held(d->ordinal, &v[3], &v[4]);
                nv = 5;
            }
            snprintf(dev, sizeof(dev), "cuda%d", d->ordinal);
        } else {
            snprintf(dev, sizeof(dev), "cpu");
        }
        static const char *const what[5] = {"capacity", "reserved", "stored", "slab", "slab_free"};
        for (int k = 0; k < nv; k++) {
            char key[64];
            snprintf(key, sizeof(key), "device.%s.%s_bytes", dev, what[k]);
            ssize_t w = tw__stats_entry_encode(key, v[k], buf + used, cap - used);
            if (w < 0)
                return w;
            used += (size_t)w;
            (*count)++;
        }
    }
    return (ssize_t)used;
}

static void handle_stats(struct tw_srv_conn *c, const struct tw_msg *m)
{
    struct tw_srv *srv = c->srv;
    struct tw_fabric_stats fst;
    struct tw_fabric_mrcache_stats mst;
    tw__srv_plane_stats(srv, &fst, &mst);
    uint64_t pinned_bytes = 0, pins_in_use = 0;
    tw__srv_stage_stats(srv, &pinned_bytes, &pins_in_use);
    count_request(c);
    const struct {
        const char *key;
        uint64_t value;
    } kv[] = {
        {"connections", srv->nconns},
        {"connections_total", srv->stats.connections_total},
        {"connections_rejected", srv->stats.connections_rejected},
        {"connections_evicted", srv->stats.connections_evicted},
        {"connections_handshaking", srv->nhandshaking},
        {"requests", srv->stats.requests},
        {"requests_failed", srv->stats.requests_failed},
        {"bytes_in", srv->stats.bytes_in},
        {"bytes_out", srv->stats.bytes_out},
        {"puts", srv->stats.puts},
        {"gets", srv->stats.gets},
        {"input_pauses", srv->stats.input_pauses},
        {"path_inline", srv->stats.path_inline},
        {"path_inline_staged", srv->stats.path_inline_staged},
        {"path_rdma_pull", srv->stats.path_rdma_pull},
        {"path_rdma_push", srv->stats.path_rdma_push},
        {"path_rdma_staged", srv->stats.path_rdma_staged},
        {"path_gdr_pull", srv->stats.path_gdr_pull},
        {"path_gdr_push", srv->stats.path_gdr_push},
        {"gpudirect_admitted", (uint64_t)srv->gdr_any},
        {"staged_gets", srv->stats.staged_gets},
        {"staged_puts", srv->stats.staged_puts},
        {"staged_bytes", srv->stats.staged_bytes},
        {"staged_failed", srv->stats.staged_failed},
        {"staged_async_copies", srv->stats.staged_async_copies},
        {"staged_async_commits", srv->stats.staged_async_commits},
        {"rdma_attach_gets", srv->stats.rdma_attach_gets},
        {"rdma_get_spans", srv->stats.rdma_get_spans},
        {"rdma_get_span_gets", srv->stats.rdma_get_span_gets},
        {"put_read_ahead", srv->stats.put_read_ahead},
        {"put_read_ahead_missed", srv->stats.put_read_ahead_missed},
        {"staged_progressive_gets", srv->stats.staged_progressive_gets},
        {"staged_copy_waits", srv->stats.staged_copy_waits},
        {"staged_copy_wait_ns", srv->stats.staged_copy_wait_ns},
        {"staged_pinned_bytes", pinned_bytes},
        {"staged_pins_in_use", pins_in_use},
        {"staged_pool_reserved", srv->stage_reserved},
        {"staged_pipes_abandoned", srv->stage_leaked},
        {"tensors", srv->store.count},
        {"stored_bytes", srv->store.stored_bytes},
        {"reserved_bytes", srv->store.reserved},
        {"capacity_bytes", srv->store.capacity},
        /* A setting, not a counter: lets clients (tensorwire bench) report
         * the threshold that decided their transfers' plane. */
        {"rdma_min_bytes", srv->cfg.rdma_min_bytes},
        /* ... the one shm connections use for gets (rdma_min_bytes when
         * it was set, else TW_DEFAULT_RDMA_MIN_BYTES_SHM) ... */
        {"rdma_min_bytes_shm", tw__srv_rdma_min_bytes(srv, TW_PATH_PROV_SHM, TW_PATH_GET)},
        /* ... and the one every connection uses for puts (rdma_min_bytes
         * when it was set, else TW_DEFAULT_RDMA_MIN_BYTES_PUT: the
         * client's threshold decides above it). */
        {"rdma_min_bytes_put", tw__srv_rdma_min_bytes(srv, TW_PATH_PROV_TCP, TW_PATH_PUT)},
        {"rdma_xfers_done", fst.xfers_done},
        {"rdma_xfers_failed", fst.xfers_failed},
        /* Of rdma_xfers_done: small reads of a local client's memory copied
         * in the loop (tw__fabric_peer_read_now: no registration). */
        {"rdma_reads_now", fst.reads_now},
        /* Reads the data mover copied from local clients' processes
         * (shm, process_vm_readv), and the calls it made for them: reads
         * that leave together share calls (fabric/xfer.c cma_flush). */
        {"rdma_cma_reads", fst.cma_reads - fst.reads_now},
        {"rdma_cma_calls", fst.cma_calls},
        /* Operations posted inside another's (neighbours on both sides
         * under one key: fabric/xfer.c "Joined operations"), and the
         * libfabric operations that carried two or more. */
        {"rdma_ops_joined", fst.ops_joined},
        {"rdma_joins", fst.joins},
        {"rdma_xfers_active", fst.xfers_active},
        {"rdma_mrs_open", fst.mrs_open},
        {"rdma_peers", fst.peers},
        /* Rails given up (fabric.h, "Wedged and retired rails"): retired
         * includes wedged; reopened are their replacements. */
        {"rdma_stuck_ops", fst.stuck_ops},
        {"rdma_rails_retired", fst.rails_retired},
        {"rdma_rails_wedged", fst.rails_wedged},
        {"rdma_rails_reopened", fst.rails_reopened},
        {"rdma_rails_closed", fst.rails_closed},
        /* Registration cache (sum over rails): misses are lookups that
         * registered, including one-shot registrations of memory of unknown
         * lifetime (regcache_uncached, small tensors); push destinations
         * (REMOTE_WRITE, never cached) count in regcache_direct only. */
        {"regcache_hits", mst.total.hits},
        {"regcache_misses", mst.total.misses},
        {"regcache_uncached", mst.total.uncached},
        {"regcache_direct", mst.direct},
        {"regcache_evictions", mst.total.evictions},
        {"regcache_invalidations", mst.total.invalidations},
        {"regcache_entries", mst.total.entries},
        {"regcache_bytes", mst.total.bytes},
        {"regcache_reg_ns", mst.total.reg_ns},
    };
    /* About 2 KiB of counters, and up to 5 keys of ~40 bytes per device
     * (TW_STORE_MAX_GPUS GPUs). */
    const size_t cap = 16384;
    uint8_t *buf = malloc(cap);
    size_t used = 0;
    uint32_t count = 0;
    if (!buf) {
        tw__conn_send_error(c, m->hdr.request_id, TW_WIRE_INTERNAL, "out of memory for stats");
        return;
    }
    ssize_t w = 0;
    for (size_t i = 0; i < sizeof(kv) / sizeof(kv[0]) && w >= 0; i++, count++) {
        w = tw__stats_entry_encode(kv[i].key, kv[i].value, buf + used, cap - used);
        used += w > 0 ? (size_t)w : 0;
    }
    if (w >= 0)
        w = encode_device_stats(srv, buf + used, cap - used, &count);
    if (w < 0) {
        tw__conn_send_error(c, m->hdr.request_id, TW_WIRE_INTERNAL, "cannot encode stats");
        goto out;
    }
    used += (size_t)w;
    struct tw_msg r;
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_STATS_REPLY;
    r.hdr.request_id = m->hdr.request_id;
    r.u.stats_reply.count = count;
    r.u.stats_reply.entries.ptr = buf;
    r.u.stats_reply.entries.len = (uint32_t)used;
    tw__conn_send(c, &r); /* encodes a copy */
out:
    free(buf);
}

static void handle_ping(struct tw_srv_conn *c, const struct tw_msg *m)
{
    struct tw_msg r;
    count_request(c);
    memset(&r, 0, sizeof(r));
    r.hdr.tag = TW_TAG_PONG;
    r.hdr.request_id = m->hdr.request_id;
    memcpy(r.u.ping.payload, m->u.ping.payload, TW_PING_PAYLOAD_LEN);
    tw__conn_send(c, &r);
}

static void handle_error(struct tw_srv_conn *c, const struct tw_msg *m)
{
    char text[160];
    show_name(&m->u.error.message, text, sizeof(text));
    const char *code = tw_strerror_name(tw__err_from_peer(m->u.error.code));
    if (m->hdr.request_id == 0) {
        char why[256];
        snprintf(why, sizeof(why), "peer sent connection error %s: %s", code, text);
        tw__conn_destroy(c, why);
        return;
    }
    /* The client cancelled a request (deadline, user abort). */
    struct tw_xfer *x = tw__conn_find_xfer(c, m->hdr.request_id);
    TW_LOGI("conn %llu %s: request %llu cancelled by the client: %s: %s", (unsigned long long)c->id,
            c->peer, (unsigned long long)m->hdr.request_id, code, text);
    if (x) {
        tw__xfer_destroy(x);
        tw__conn_maybe_finish(c);
    }
}

static void handle_goodbye(struct tw_srv_conn *c, const struct tw_msg *m)
{
    c->peer_goodbye = 1;
    TW_LOGD("conn %llu %s: goodbye (code %u), %zu transfers to finish", (unsigned long long)c->id,
            c->peer, m->u.goodbye.code, c->nxfers);
    tw__conn_maybe_finish(c);
}

void tw__handle_msg(struct tw_srv_conn *c, const struct tw_msg *m)
{
    switch (m->hdr.tag) {
    case TW_TAG_HELLO:
        handle_hello(c, m);
        break;
    case TW_TAG_AUTH:
        handle_auth(c, m);
        break;
    case TW_TAG_TENSOR_REQUEST:
        handle_get(c, m);
        break;
    case TW_TAG_TENSOR_PUT:
        handle_put(c, m);
        break;
    case TW_TAG_STAT:
        handle_stat(c, m);
        break;
    case TW_TAG_DELETE:
        handle_delete(c, m);
        break;
    case TW_TAG_LIST:
        handle_list(c, m);
        break;
    case TW_TAG_STATS:
        handle_stats(c, m);
        break;
    case TW_TAG_PING:
        handle_ping(c, m);
        break;
    case TW_TAG_ERROR:
        handle_error(c, m);
        break;
    case TW_TAG_GOODBYE:
        handle_goodbye(c, m);
        break;
    case TW_TAG_RDMA_ENDPOINT:
        tw__srv_fabric_endpoint(c, m);
        break;
    default: {
        /* RDMA messages for a request: the transfer's data plane decides. */
        struct tw_xfer *x = m->hdr.request_id ? tw__conn_find_xfer(c, m->hdr.request_id) : NULL;
        int rc = x ? x->ops->on_msg(x, m) : TW_ENOT_NEGOTIATED;
        if (rc < 0)
            tw__conn_fail(
                c, TW_WIRE_PROTOCOL_ERROR, "%s for request %llu: %s (%s)", tw__tag_name(m->hdr.tag),
                (unsigned long long)m->hdr.request_id, tw_strerror(rc),
                x ? "not expected by its data plane now" : "no RDMA transfer with that id");
        break;
    }
    }
}
