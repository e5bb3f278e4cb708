/*
 * The request engine: runs an array of requests on one connection, keeping up
 * to the negotiated max_inflight of them open, and routes every reply to its
 * request by id.
 *
 * Ids: a run of n requests reserves ids base..base+n-1 (request i gets
 * base + i), so a reply finds its request by subtraction. Requests rejected
 * locally before sending leave a gap; the protocol only requires ids to
 * increase.
 *
 * Flushing: queued frames are sent before any read that could block, never
 * later, so the server is never left waiting for bytes we hold (that would
 * deadlock both sides). Frames already complete in the receive buffer are
 * processed first, so one sendmsg carries the answers to many of them.
 */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/client_internal.h"

void tw__client_engine_finish(struct tw_client *c, struct tw__creq *r, int status, const char *msg,
                              size_t msg_len)
{
    if (r->finished)
        return;
    r->finished = 1;
    r->status = status;
    if (r->dp && r->dp->release)
        r->dp->release(c, r);
    if (r->status != status) {
        /* The plane's release failed the request (a staged copy to the
         * GPU): its text is in c->errmsg. */
        status = r->status;
        if (r->index < c->err_index)
            c->err_index = r->index;
        msg = NULL;
        goto out_times;
    }
    if (status == 0 && r->dp && (r->op == TW__OP_GET || r->op == TW__OP_PUT)) {
        c->last_path = r->path;
        c->have_last_path = 1;
    }
out_times:
    if (r->started) {
        r->t_end = tw__now_ns();
        if (c->run_active > 0)
            c->run_active--;
        if (r->op == TW__OP_GET || r->op == TW__OP_PUT) {
            if (r->dp && r->dp->wire_plane == TW_DP_RDMA && !r->path.gdr)
                c->run_done_rdma++;
            else
                c->run_done_other++;
        }
    }
    if (status < 0 && r->index < c->err_index) {
        c->err_index = r->index;
        if (msg)
            snprintf(c->errmsg, sizeof(c->errmsg), "%.*s", (int)msg_len, msg);
        else
            snprintf(c->errmsg, sizeof(c->errmsg), "%s", tw_strerror(status));
    }
}

static struct tw__creq *lookup(struct tw_client *c, uint64_t id)
{
    if (!c->run || id < c->run_base || id >= c->next_id)
        return NULL;
    size_t idx = c->run_map[id - c->run_base];
    if (idx == TW__RUN_SYNC)
        return NULL;
    struct tw__creq *r = &c->run[idx];
    return r->started ? r : NULL;
}

/* The plane that implements p; NULL when none does (no plane left). */
static const struct tw__client_dp_ops *dp_for_path(const struct tw_path *p)
{
    int staged = p->staging == TW_PATH_STAGING_HOST;
    switch (p->plane) {
    case TW_PATH_PLANE_INLINE:
        return staged ? tw__client_dp_inline_staged : &tw__client_dp_inline;
    case TW_PATH_PLANE_RDMA:
        return staged ? tw__client_dp_rdma_staged : &tw__client_dp_rdma;
    default:
        return NULL;
    }
}

/* The kind of provider the connection's RDMA peer is on (NONE without one). */
static enum tw_path_provider conn_provider(const tw_client *c)
{
    return tw__path_provider_kind(c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL);
}

/* The put threshold on a provider for a call that keeps depth requests in
 * flight, for a put from GPU memory (gpu) or host memory.
 * TW_RDMA_MIN_BYTES_AUTO over shm: 32 KiB puts go by RDMA only where many
 * are in flight (proto.h: with few, the extra control round trip costs more
 * than the copy it saves); over other providers GPU memory does from 32 KiB
 * where many are in flight, host memory from 1 MiB (proto.h,
 * TW_DEFAULT_RDMA_MIN_BYTES_GPU_DEEP). */
static uint64_t rdma_min_bytes_on(const tw_client *c, enum tw_path_provider prov, size_t depth,
                                  int gpu)
{
    if (c->rdma_min_bytes != TW_RDMA_MIN_BYTES_AUTO)
        return c->rdma_min_bytes;
    int deep = depth >= TW_DEEP_PUTS;
    if (prov != TW_PATH_PROV_SHM)
        return gpu && deep ? TW_DEFAULT_RDMA_MIN_BYTES_GPU_DEEP : TW_DEFAULT_RDMA_MIN_BYTES;
    return deep ? TW_DEFAULT_RDMA_MIN_BYTES_SHM : TW_DEFAULT_RDMA_MIN_BYTES_SHM_SHALLOW;
}

uint64_t tw__client_rdma_min_bytes(const tw_client *c)
{
    return rdma_min_bytes_on(c, conn_provider(c), 1, 0);
}

/* How many requests a run keeps in flight. With max_inflight set, that
 * many (as negotiated). With 0 (the default) it follows what the run's
 * transfers turned out to be, since a get's plane is the server's choice
 * (its threshold) and is known only once it answers: TW__WINDOW_NARROW
 * until most finished gets and puts went by direct RDMA, on an shm
 * connection (wide), then TW__WINDOW_WIDE (both measured,
 * client_internal.h). */
static size_t window_of(const struct tw_client *c, int wide)
{
    size_t w = c->sm.max_inflight < c->want_inflight ? c->sm.max_inflight : c->want_inflight;
    if (c->auto_window && !wide && w > TW__WINDOW_NARROW)
        w = TW__WINDOW_NARROW;
    return w ? w : 1;
}

/* How many requests the running call keeps in flight from its start: its
 * size, up to the window it opens with. 1 outside a call. */
static size_t run_depth(const tw_client *c)
{
    if (!c->run)
        return 1;
    size_t w = window_of(c, 0);
    return c->run_n < w ? c->run_n : w;
}

/* The inputs of r's transfer-path decision; mem_peer is the server's memory
 * of the tensor: a put names it (its device tag), a get learns it from
 * TENSOR_INFO (UNKNOWN until then). */
static struct tw_path_in path_inputs(struct tw_client *c, const struct tw__creq *r,
                                     enum tw_path_mem mem_peer)
{
    enum tw_path_provider prov = conn_provider(c);
    struct tw_path_in in = {
        .role = TW_PATH_CLIENT,
        .op = r->op == TW__OP_GET ? TW_PATH_GET : TW_PATH_PUT,
        .caps = c->sm.caps,
        .endpoint_accepted = c->fpeer != NULL,
        .provider = prov,
        /* A peer whose rail was retired (fabric.h: a wedged or blocked shm
         * endpoint) moves the rest of this connection's data inline. */
        .rail_usable = !c->fpeer || tw__fabric_peer_usable(c->fpeer, NULL, 0),
        /* A get's size is known only from TENSOR_INFO: always ask, the
         * server applies its threshold. A put's is known now. */
        .size_known = r->op == TW__OP_PUT,
        .size = r->len,
        .rdma_min_bytes = rdma_min_bytes_on(c, prov, run_depth(c), r->mem.kind == TW_MEMKIND_CUDA),
        .mem_local = r->mem.kind == TW_MEMKIND_CUDA ? TW_PATH_MEM_CUDA : TW_PATH_MEM_HOST,
        .mem_peer = mem_peer,
        .push = (enum tw_path_push)c->push_policy,
        /* Our GPU buffer admitted for GPUDirect on this provider: the plane
         * registers it directly (gdr push / gdr pull), else it stages. */
        .gdr = tw__client_gdr_verdict(c, r),
    };
    return in;
}

/* "cpu" (or no tag) is host memory, "cuda:N" GPU memory, anything else
 * unknown. */
static enum tw_path_mem mem_of_tag(const char *tag)
{
    if (!tag[0] || strcmp(tag, "cpu") == 0)
        return TW_PATH_MEM_HOST;
    return strncmp(tag, "cuda:", 5) == 0 ? TW_PATH_MEM_CUDA : TW_PATH_MEM_UNKNOWN;
}

const struct tw__client_dp_ops *tw__client_pick_data_plane(struct tw_client *c, struct tw__creq *r)
{
    enum tw_path_mem peer = TW_PATH_MEM_UNKNOWN;
    if (r->op == TW__OP_PUT && r->desc)
        peer = mem_of_tag(r->desc->device_tag);
    struct tw_path_in in = path_inputs(c, r, peer);
    r->path = tw__path_decide(&in);
    return dp_for_path(&r->path);
}

/* TENSOR_INFO said where the server holds the tensor of get r: where that
 * changes our path (a GPU destination over shm from host memory stages
 * instead of being pushed, proto/path.c), decide again. Like
 * follow_inline, before any plane state exists. */
static void follow_source(struct tw_client *c, struct tw__creq *r, const char *device_tag)
{
    if (r->path.plane != TW_PATH_PLANE_RDMA || r->path.reason != TW_PATH_R_PUSH_GPUDIRECT)
        return;
    struct tw_path_in in = path_inputs(c, r, mem_of_tag(device_tag));
    struct tw_path p = tw__path_decide(&in);
    if (p.plane != TW_PATH_PLANE_RDMA)
        return; /* the rail went meanwhile: the server already chose rdma */
    r->path = p;
    r->dp = dp_for_path(&r->path);
}

/* The server answered a request for RDMA with the inline plane (allowed:
 * docs/protocol.md §4.7, §4.9): follow it. No plane state exists yet: it is
 * made by get_start / put_start, after this. */
static void follow_inline(struct tw__creq *r)
{
    if (r->path.plane != TW_PATH_PLANE_INLINE) {
        r->path = tw__path_follow_inline(r->path);
        r->dp = dp_for_path(&r->path);
    }
}

static int cancel_request(struct tw_client *c, struct tw__creq *r, const char *why);

/* PUT_ACCEPT(1) for put r: its bytes go inline. A registration sent ahead
 * (bit 6) is void and dropped first; GPU memory the RDMA plane would have
 * read directly (gdr) is copied to a host stage now, as put_prepare does
 * for a put staged from the start. Returns 0 or a connection-fatal code. */
static int put_follow_inline(struct tw_client *c, struct tw__creq *r)
{
    if (r->eager_reg) {
        tw__client_dp_rdma.release(c, r); /* the rdma state only: a host stage stays */
        r->eager_reg = 0;
    }
    int gdr = r->path.gdr;
    follow_inline(r);
    if (gdr && r->dp->put_prepare) {
        int rc = r->dp->put_prepare(c, r);
        if (rc) {
            char why[TW__CLIENT_ERRMSG_LEN];
            int n = snprintf(why, sizeof(why), "%s", c->errmsg);
            int qrc = cancel_request(c, r, "staging the put failed");
            tw__client_engine_finish(c, r, rc, why,
                                     (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
            return qrc;
        }
    }
    return r->dp->put_start(c, r);
}

static void desc_from_wire(const struct tw_descriptor *w, struct tw_tensor_desc *d)
{
    memset(d, 0, sizeof(*d));
    d->dtype = w->dtype;
    d->ndim = w->ndim;
    for (unsigned i = 0; i < w->ndim && i < TW_TENSOR_MAX_NDIM; i++)
        d->shape[i] = w->shape[i];
    size_t tl = w->device_tag.len <= TW_TENSOR_MAX_DEVICE_TAG ? w->device_tag.len
                                                              : TW_TENSOR_MAX_DEVICE_TAG;
    memcpy(d->device_tag, w->device_tag.ptr, tl);
    d->device_tag[tl] = '\0';
    d->byte_length = w->byte_length;
}

/* Appends name (not NUL-terminated) plus a NUL to the collector. */
static int collect_add(struct tw__collect *k, const uint8_t *name, size_t len, size_t entry_size,
                       const void *entry)
{
    if (k->names_len + len + 1 > k->names_cap) {
        size_t cap = k->names_cap ? k->names_cap : 1024;
        while (cap < k->names_len + len + 1)
            cap *= 2;
        uint8_t *p = realloc(k->names, cap);
        if (!p)
            return -ENOMEM;
        k->names = p;
        k->names_cap = cap;
    }
    if (k->count == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 64;
        void *e = realloc(k->entries, cap * entry_size);
        if (!e)
            return -ENOMEM;
        k->entries = e;
        size_t *o = realloc(k->name_off, cap * sizeof(*o));
        if (!o)
            return -ENOMEM;
        k->name_off = o;
        k->cap = cap;
    }
    memcpy((uint8_t *)k->entries + k->count * entry_size, entry, entry_size);
    k->name_off[k->count] = k->names_len;
    memcpy(k->names + k->names_len, name, len);
    k->names[k->names_len + len] = '\0';
    k->names_len += len + 1;
    k->count++;
    return 0;
}

static int on_list_reply(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg)
{
    size_t cursor = 0;
    struct tw_descriptor w;
    int rc;
    while ((rc = tw__list_next(msg, &cursor, &w)) == 1) {
        struct tw_tensor_info info = {.name = NULL};
        desc_from_wire(&w, &info.desc);
        rc = collect_add(r->collect, w.name.ptr, w.name.len, sizeof(info), &info);
        if (rc) {
            tw__client_engine_finish(c, r, rc, "out of memory collecting the listing", 36);
            return 0;
        }
    }
    if (rc < 0)
        return rc; /* malformed entries: fatal */
    if (!(msg->hdr.flags & TW_FRAME_MORE))
        tw__client_engine_finish(c, r, 0, NULL, 0);
    return 0;
}

static int on_stats_reply(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg)
{
    size_t cursor = 0;
    struct tw_bytes key;
    uint64_t value;
    int rc;
    while ((rc = tw__stats_next(msg, &cursor, &key, &value)) == 1) {
        struct tw_stat_entry e = {.key = NULL, .value = value};
        if (collect_add(r->collect, key.ptr, key.len, sizeof(e), &e)) {
            tw__client_engine_finish(c, r, -ENOMEM, "out of memory collecting stats", 30);
            return 0;
        }
    }
    if (rc < 0)
        return rc;
    tw__client_engine_finish(c, r, 0, NULL, 0);
    return 0;
}

/*
 * Sends ERROR(CANCELLED) for r, then a PING. The server handles its input in
 * order, so by the time the PONG arrives it has stopped r and every DATA frame
 * it had already sent for r came before the PONG: the reader discards them as
 * stale, and the run ends only after the PONG. No bytes of a cancelled
 * transfer are left on the connection for a later call (where they could
 * stall a large send while the server waits for us to read).
 * The PING takes r's in-flight slot, so the window is never exceeded.
 */
static int cancel_request(struct tw_client *c, struct tw__creq *r, const char *why)
{
    struct tw_msg m = {
        .hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_ERROR, .request_id = r->id}};
    struct tw_msg p = {.hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_PING}};
    int rc;
    m.u.error.code = TW_WIRE_CANCELLED;
    m.u.error.message.ptr = (const uint8_t *)why;
    m.u.error.message.len = (uint32_t)strlen(why);
    rc = tw__client_conn_queue(c, &m);
    if (rc)
        return rc;
    /* Ids are handed out in send order (the protocol wants them strictly
     * increasing on the wire); the map marks this one as a sync marker. */
    c->run_map[c->next_id - c->run_base] = TW__RUN_SYNC;
    p.hdr.request_id = c->next_id++;
    memcpy(p.u.ping.payload, &p.hdr.request_id, sizeof(p.u.ping.payload));
    rc = tw__client_conn_queue(c, &p);
    if (rc)
        return rc;
    c->sync_pending++;
    c->run_active++;
    return 0;
}

/* A reply to one of cancel_request's PINGs (PONG, or ERROR such as BUSY):
 * either way the server has handled the cancel before it. */
static int on_sync_reply(struct tw_client *c, const struct tw_msg *msg)
{
    if (msg->hdr.tag != TW_TAG_PONG && msg->hdr.tag != TW_TAG_ERROR)
        return TW_EOUT_OF_ORDER;
    if (c->sync_pending == 0)
        return TW_EUNKNOWN_REQUEST;
    c->sync_pending--;
    c->run_active--;
    return 0;
}

static int on_tensor_info(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg)
{
    const struct tw_descriptor *w = &msg->u.tensor_info.desc;
    struct tw_tensor_desc d;
    desc_from_wire(w, &d);
    if (r->desc)
        *r->desc = d;
    if (r->op == TW__OP_STAT) {
        if (msg->u.tensor_info.data_plane != TW_DP_NONE)
            return TW_EBAD_FIELD;
        tw__client_engine_finish(c, r, 0, NULL, 0);
        return 0;
    }
    if (msg->u.tensor_info.data_plane == TW_DP_INLINE)
        follow_inline(r);
    else
        follow_source(c, r, d.device_tag);
    if (msg->u.tensor_info.data_plane != r->dp->wire_plane)
        return TW_EBAD_FIELD;
    r->expect = w->byte_length;
    if (r->alloc && !r->buf) {
        size_t want = w->byte_length ? (size_t)w->byte_length : 1;
        void *p = NULL;
        if ((uint64_t)(size_t)w->byte_length != w->byte_length ||
            tw__client_host_alloc(want, &p) != 0) {
            int rc = cancel_request(c, r, "client out of memory");
            if (rc)
                return rc;
            tw__client_engine_finish(c, r, -ENOMEM, "cannot allocate the destination buffer", 38);
            return 0;
        }
        r->buf = p;
        r->len = (size_t)w->byte_length;
    }
    if (w->byte_length > r->len) {
        char why[200];
        int rc = cancel_request(c, r, "client buffer too small");
        if (rc)
            return rc;
        int n = snprintf(why, sizeof(why), "tensor '%s' needs %llu bytes; the buffer holds %zu",
                         r->name, (unsigned long long)w->byte_length, r->len);
        tw__client_engine_finish(c, r, -ENOBUFS, why,
                                 (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
        return 0;
    }
    r->check_crc = c->checksum && (w->flags & TW_DESC_HAS_CRC32C);
    r->crc_expected = w->crc32c;
    r->crc = 0;
    return r->dp->get_start(c, r);
}

/* Routes one control frame. Returns 0 or a connection-fatal code. */
static int dispatch(struct tw_client *c, const struct tw_msg *msg)
{
    uint32_t tag = msg->hdr.tag;
    uint64_t id = msg->hdr.request_id;
    struct tw__creq *r;

    if (id == 0) {
        if (tag == TW_TAG_GOODBYE) {
            c->closing = 1;
            return 0;
        }
        if (tag == TW_TAG_ERROR) {
            int st = tw__err_from_peer(msg->u.error.code);
            tw__client_seterr(c, "%.*s", (int)msg->u.error.message.len,
                              (const char *)msg->u.error.message.ptr);
            tw__client_conn_fail(c, st, 0);
            return st;
        }
        return TW_EOUT_OF_ORDER;
    }
    if (id >= c->run_base && id < c->next_id && c->run_map[id - c->run_base] == TW__RUN_SYNC)
        return on_sync_reply(c, msg);
    r = lookup(c, id);
    if (!r || r->finished)
        return TW_EUNKNOWN_REQUEST;

    switch (tag) {
    case TW_TAG_ERROR:
        tw__client_engine_finish(c, r, tw__err_from_peer(msg->u.error.code),
                                 (const char *)msg->u.error.message.ptr, msg->u.error.message.len);
        return 0;
    case TW_TAG_TENSOR_INFO:
        if (r->op != TW__OP_GET && r->op != TW__OP_STAT)
            return TW_EOUT_OF_ORDER;
        return on_tensor_info(c, r, msg);
    case TW_TAG_PUT_ACCEPT:
        if (r->op != TW__OP_PUT)
            return TW_EOUT_OF_ORDER;
        if (r->eager)
            return 0; /* the bytes went behind the TENSOR_PUT (the sm checked the plane) */
        if (r->eager_reg && msg->u.put_accept.data_plane == TW_DP_RDMA)
            return 0; /* registered behind the TENSOR_PUT: READY (or REGISTER) next */
        if (msg->u.put_accept.data_plane == TW_DP_INLINE)
            return put_follow_inline(c, r);
        if (msg->u.put_accept.data_plane != r->dp->wire_plane)
            return TW_EBAD_FIELD;
        return r->dp->put_start(c, r);
    case TW_TAG_OK:
        if (r->op != TW__OP_PUT && r->op != TW__OP_DELETE)
            return TW_EOUT_OF_ORDER;
        if (r->op == TW__OP_PUT && r->received != r->len)
            return TW_EOUT_OF_ORDER; /* OK before all our bytes were queued */
        tw__client_engine_finish(c, r, 0, NULL, 0);
        return 0;
    case TW_TAG_LIST_REPLY:
        if (r->op != TW__OP_LIST)
            return TW_EOUT_OF_ORDER;
        return on_list_reply(c, r, msg);
    case TW_TAG_STATS_REPLY:
        if (r->op != TW__OP_STATS)
            return TW_EOUT_OF_ORDER;
        return on_stats_reply(c, r, msg);
    case TW_TAG_PONG:
        if (r->op != TW__OP_PING)
            return TW_EOUT_OF_ORDER;
        if (memcmp(msg->u.ping.payload, r->ping, TW_PING_PAYLOAD_LEN) != 0)
            return TW_EBAD_FIELD;
        tw__client_engine_finish(c, r, 0, NULL, 0);
        return 0;
    case TW_TAG_RDMA_REGISTER:
    case TW_TAG_RDMA_READY:
    case TW_TAG_RDMA_DONE:
    case TW_TAG_RDMA_AVAILABLE:
        if (!r->dp->on_message)
            return TW_ENOT_NEGOTIATED;
        return r->dp->on_message(c, r, msg);
    default:
        return TW_EOUT_OF_ORDER;
    }
}

int tw__client_engine_on_data(struct tw_client *c, const struct tw_msg *msg)
{
    struct tw__creq *r = lookup(c, msg->hdr.request_id);
    if (!r || r->finished || r->op != TW__OP_GET || !r->dp->get_data) {
        tw__client_seterr(c, "server sent DATA for request %llu, which expects none",
                          (unsigned long long)msg->hdr.request_id);
        return TW_EOUT_OF_ORDER;
    }
    return r->dp->get_data(c, r, msg->u.data.offset, msg->u.data.bytes.len,
                           (msg->hdr.flags & TW_FRAME_MORE) != 0);
}

static int name_msg(struct tw__creq *r, struct tw_bytes *b)
{
    if (!r->name)
        return TW_EBAD_NAME;
    r->name_len = strlen(r->name);
    b->ptr = (const uint8_t *)r->name;
    b->len = (uint32_t)r->name_len;
    return tw__name_check(b->ptr, r->name_len);
}

int tw__client_classify(struct tw_client *c, uintptr_t addr, size_t len,
                        const struct tw_memkind_ops **ops, struct tw_mem_attr *attr, char *err,
                        size_t errlen)
{
    struct tw_mem_attr *k = &c->run_alloc;
    /* Within a run the caller keeps every buffer allocated (client.h), so
     * the CUDA allocation found for one item is still that allocation for
     * the next: items sliced from one allocation (a KV cache) cost one
     * driver query per run, not one each. */
    if (c->run && c->run_alloc_ops && len && addr >= k->alloc_base &&
        addr - k->alloc_base <= k->alloc_len && len <= k->alloc_len - (addr - k->alloc_base)) {
        *ops = c->run_alloc_ops;
        *attr = *k;
        return 0;
    }
    int rc = tw__memkind_classify(c->memkinds, addr, len, TW_MEMKIND_AUTO, ops, attr, err, errlen);
    if (rc == 0 && attr->kind == TW_MEMKIND_CUDA && attr->alloc_len && c->run) {
        c->run_alloc = *attr;
        c->run_alloc_ops = *ops;
    }
    return rc;
}

/* What r's buffer is (host or GPU memory): the path stages GPU memory
 * through host memory. A get into a library allocation is host memory. A
 * range that starts in a GPU allocation and leaves it is refused (r is
 * finished with TW_EINVAL): no CPU may touch it. One driver query per
 * buffer (none for a slice of the run's last CUDA allocation). */
static int classify_buffer(struct tw_client *c, struct tw__creq *r)
{
    char err[200] = "";
    if ((r->op != TW__OP_GET && r->op != TW__OP_PUT) || !r->buf || !r->len) {
        r->mem_ops = &tw__memkind_host;
        r->mem = (struct tw_mem_attr){.kind = TW_MEMKIND_HOST, .device = -1};
        return 0;
    }
    if (tw__client_classify(c, (uintptr_t)r->buf, r->len, &r->mem_ops, &r->mem, err, sizeof(err)) ==
        0)
        return 0;
    r->mem_ops = &tw__memkind_host;
    r->mem = (struct tw_mem_attr){.kind = TW_MEMKIND_HOST, .device = -1};
    char why[300];
    int n = snprintf(why, sizeof(why), "'%s': %s", r->name, err);
    tw__client_engine_finish(c, r, TW_EINVAL, why,
                             (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
    return TW_EINVAL;
}

/* Builds and queues the request-opening frame of r. A negative return before
 * anything was queued is a local argument error (r is finished with it). */
static int start_request(struct tw_client *c, struct tw__creq *r)
{
    struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION}};
    int rc = 0;

    if ((r->op == TW__OP_GET || r->op == TW__OP_PUT) && !r->buf && r->len && !r->alloc) {
        tw__client_engine_finish(c, r, TW_EINVAL, "NULL buffer with a non-zero length", 34);
        return TW_EINVAL;
    }
    if (r->op == TW__OP_PUT && !r->desc) {
        tw__client_engine_finish(c, r, TW_EINVAL, "put without a descriptor", 24);
        return TW_EINVAL;
    }
    rc = classify_buffer(c, r);
    if (rc)
        return rc;

    switch (r->op) {
    case TW__OP_GET:
        m.hdr.tag = TW_TAG_TENSOR_REQUEST;
        r->dp = tw__client_pick_data_plane(c, r);
        if (!r->dp) {
            rc = TW_ENOT_NEGOTIATED;
            break;
        }
        m.u.tensor_request.flags = r->dp->xfer_flags;
        r->attach = tw__client_rdma_attach_read(c, r);
        if (r->attach)
            m.u.tensor_request.flags |= TW_XFER_ATTACH_READ;
        rc = name_msg(r, &m.u.tensor_request.name);
        break;
    case TW__OP_PUT: {
        struct tw_descriptor *w = &m.u.tensor_put.desc;
        const struct tw_tensor_desc *d = r->desc;
        const char *tag = d->device_tag[0] ? d->device_tag : "cpu";
        m.hdr.tag = TW_TAG_TENSOR_PUT;
        r->dp = tw__client_pick_data_plane(c, r);
        if (!r->dp) {
            rc = TW_ENOT_NEGOTIATED;
            break;
        }
        m.u.tensor_put.flags = r->dp->xfer_flags;
        rc = name_msg(r, &w->name);
        if (rc)
            break;
        if (d->ndim > TW_TENSOR_MAX_NDIM) {
            rc = TW_EBAD_SHAPE;
            break;
        }
        w->dtype = d->dtype;
        w->ndim = d->ndim;
        memcpy(w->shape, d->shape, sizeof(uint64_t) * d->ndim);
        w->device_tag.ptr = (const uint8_t *)tag;
        w->device_tag.len = (uint32_t)strnlen(tag, TW_TENSOR_MAX_DEVICE_TAG + 1);
        rc = tw__shape_bytes(d->dtype, d->ndim, d->shape, &w->byte_length);
        if (rc)
            break;
        if (w->byte_length != r->len) {
            char why[160];
            int n = snprintf(why, sizeof(why),
                             "put '%s': shape and dtype give %llu bytes but %zu were passed",
                             r->name, (unsigned long long)w->byte_length, r->len);
            tw__client_engine_finish(c, r, TW_EINVAL, why, (size_t)n);
            return TW_EINVAL;
        }
        if (r->dp->put_prepare) {
            rc = r->dp->put_prepare(c, r);
            if (rc) {
                /* Its text is in c->errmsg. */
                char why[TW__CLIENT_ERRMSG_LEN];
                int n = snprintf(why, sizeof(why), "%s", c->errmsg);
                tw__client_engine_finish(c, r, rc, why,
                                         (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
                return rc;
            }
        }
        if (c->checksum) {
            w->flags |= TW_DESC_HAS_CRC32C;
            if (r->path.gdr) {
                /* GPU memory the plane reads directly: read it back. */
                char err[200] = "", why[300];
                rc = tw__memkind_crc32c(r->mem_ops, &r->mem, (uintptr_t)r->buf, r->len, &w->crc32c,
                                        err, sizeof(err));
                if (rc) {
                    int n = snprintf(why, sizeof(why),
                                     "put '%s': reading the GPU buffer for its CRC32C failed: %s",
                                     r->name, err);
                    tw__client_engine_finish(c, r, rc, why,
                                             (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
                    return rc;
                }
            } else {
                w->crc32c = r->crc_done ? r->crc : tw__crc32c(0, r->buf, r->len);
            }
        }
        rc = tw__descriptor_check(w);
        break;
    }
    case TW__OP_STAT:
    case TW__OP_DELETE:
        m.hdr.tag = r->op == TW__OP_STAT ? TW_TAG_STAT : TW_TAG_DELETE;
        rc = name_msg(r, &m.u.name.name);
        break;
    case TW__OP_LIST:
        m.hdr.tag = TW_TAG_LIST;
        m.u.list.prefix.ptr = (const uint8_t *)(r->name ? r->name : "");
        m.u.list.prefix.len = (uint32_t)(r->name ? strlen(r->name) : 0);
        if (m.u.list.prefix.len && tw__name_check(m.u.list.prefix.ptr, m.u.list.prefix.len))
            rc = TW_EBAD_NAME;
        break;
    case TW__OP_PING:
        m.hdr.tag = TW_TAG_PING;
        memcpy(m.u.ping.payload, r->ping, TW_PING_PAYLOAD_LEN);
        break;
    case TW__OP_STATS:
        m.hdr.tag = TW_TAG_STATS;
        break;
    }
    if (rc < 0) {
        char why[160];
        /* The reason, never the name itself: it may be 1,000 bytes or hold
         * control characters, and the caller has it anyway. */
        const char *bad =
            r->name ? tw__name_problem((const uint8_t *)r->name, strlen(r->name)) : NULL;
        int n = bad ? snprintf(why, sizeof(why), "the name (%zu bytes) %s", strlen(r->name), bad)
                    : snprintf(why, sizeof(why), "%s", tw_strerror(rc));
        /* Local validation failures map to INVALID_ARGUMENT, like the
         * server's answer to the same request would. */
        tw__client_engine_finish(c, r, TW_EINVAL, why,
                                 (size_t)n < sizeof(why) ? (size_t)n : sizeof(why) - 1);
        return TW_EINVAL;
    }
    r->id = c->next_id;
    m.hdr.request_id = r->id;
    r->started = 1;
    r->t_start = tw__now_ns();
    rc = tw__client_conn_queue(c, &m);
    if (rc) {
        r->started = 0;
        return rc;
    }
    c->run_map[c->next_id - c->run_base] = r->index;
    c->next_id++;
    /* Bit 4: a small inline put's bytes follow its TENSOR_PUT at once. */
    if (r->op == TW__OP_PUT && (c->sm.caps & TW_CAP_EAGER_PUT) && r->dp == &tw__client_dp_inline &&
        r->len <= TW__EAGER_PUT_MAX) {
        rc = r->dp->put_start(c, r);
        if (rc)
            return rc;
        r->eager = 1;
    } else if (r->op == TW__OP_PUT && (c->sm.caps & TW_CAP_EAGER_RDMA_PUT) &&
               r->dp->wire_plane == TW_DP_RDMA &&
               (c->run_active == 0 || conn_provider(c) != TW_PATH_PROV_SHM)) {
        /* Bit 6: the put registers its source right behind its
         * TENSOR_PUT, so the server reads (or asks for a push) without
         * waiting for us to see PUT_ACCEPT. Alone in flight on any
         * provider: one put at a time over shm on the H200, p50 68-79 ->
         * 27-37 us at 32 KiB, 77-85 -> 43-48 at 256 KiB. Among others
         * except over shm: a tcp KV batch put (40,960 x 32 KiB, 256 in
         * flight, H100 host) waited 0.68-0.74 ms of its 1.8-2.0 ms per
         * put between the server's TENSOR_PUT and our registration;
         * registered eagerly 0.9-1.1 ms, the batch 2.53-2.67 -> 2.93-3.31
         * GB/s in three pairs of three. Over shm, where the server reads
         * by cross-memory attach, eager batch puts measured slower (H100
         * host 3.19-3.35 -> 2.42-2.56 GB/s; H200 x0.56-0.73 -> x0.42-0.62
         * of one tensor), cause not found (docs/performance.md). A
         * registration that fails here is tried again at PUT_ACCEPT,
         * whose failure ends the put as without the bit. */
        if (r->dp->put_start(c, r) == 0) {
            r->eager_reg = 1;
            c->run_eager++;
        } else
            tw__client_dp_rdma.release(c, r);
    }
    return 0;
}

/* True when a whole frame (header and payload) is already buffered. */
static int frame_buffered(const struct tw_client *c)
{
    size_t pos = c->rpos + c->rconsume;
    size_t have = c->rlen - pos;
    if (have < TW_FRAME_HEADER_LEN)
        return 0;
    const uint8_t *p = c->rbuf + pos;
    uint32_t plen =
        (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
    return have - TW_FRAME_HEADER_LEN >= plen;
}

/* While RDMA transfers run, waits for the socket or the plane's event fd,
 * whichever comes first. Returns 1 when the socket is readable (or on an
 * error the read will report), 0 when a transfer may have finished. No
 * timeout here: each transfer has its own stall timeout
 * (request_timeout_ms), and the socket read after it has the usual one. */
static int wait_socket_or_plane(struct tw_client *c)
{
    struct pollfd p[2] = {{.fd = c->fd, .events = POLLIN},
                          {.fd = tw__fabric_event_fd(c->fab), .events = POLLIN}};
    for (;;) {
        int k = poll(p, 2, 1000);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 || p[0].revents)
            return 1;
        if (p[1].revents)
            return 0;
        /* Nothing for a second: look at the transfers again (a stall
         * timeout fires from the mover, which also signals). */
        return 0;
    }
}

static size_t count_unfinished(const struct tw__creq *reqs, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += !reqs[i].finished;
    return k;
}

/* The window of the running call now (window_of): wide once most of its
 * finished transfers went by RDMA, directly from or into host memory or
 * staged through it for GPU memory, on any provider (client_internal.h:
 * measured faster with the wide window over shm and tcp, slower inline). */
static size_t batch_window(const struct tw_client *c)
{
    return window_of(c, c->run_done_rdma > c->run_done_other);
}

void *tw__client_scratch(void **keep, size_t *cap, size_t n, size_t elem, size_t limit)
{
    if (n == 0)
        n = 1; /* a block all the same, as malloc(0) gave one */
    if (n <= *cap)
        return *keep;
    if (elem && n > SIZE_MAX / elem)
        return NULL;
    if (n > limit)
        return malloc(n * elem);
    /* Grown to n, not doubled: a batch size repeats, and what is kept
     * should not exceed what was asked. The old contents need no copy. */
    void *p = malloc(n * elem);
    if (!p)
        return NULL;
    free(*keep);
    *keep = p;
    *cap = n;
    return p;
}

int tw__client_engine_run(struct tw_client *c, struct tw__creq *reqs, size_t n)
{
    size_t next = 0, active = 0, window;
    int rc = 0;

    c->err_index = SIZE_MAX;
    c->errmsg[0] = '\0';
    if (c->broken) {
        for (size_t i = 0; i < n; i++)
            tw__client_engine_finish(c, &reqs[i], -ENOTCONN,
                                     "the connection is closed (an earlier call failed)", 49);
        return -ENOTCONN;
    }
    c->run = reqs;
    c->run_alloc_ops = NULL;
    c->run_n = n;
    c->run_active = 0;
    c->sync_pending = 0;
    c->run_base = c->next_id;
    /* At most one id per request plus one sync PING per cancelled request. */
    c->run_map = tw__client_scratch((void **)&c->kept_map, &c->kept_map_cap, 2 * n,
                                    sizeof(*c->run_map), 2 * (size_t)TW__CLIENT_KEEP_ITEMS);
    if (!c->run_map) {
        c->run = NULL;
        for (size_t i = 0; i < n; i++)
            tw__client_engine_finish(c, &reqs[i], -ENOMEM, "out of memory", 13);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        reqs[i].index = i;
    c->run_done_rdma = c->run_done_other = c->run_peak = c->run_eager = 0;

    for (;;) {
        /* Open requests up to the window. */
        window = batch_window(c);
        while (next < n && active < window) {
            struct tw__creq *r = &reqs[next++];
            if (r->finished)
                continue;
            if (c->closing) {
                tw__client_engine_finish(c, r, TW_ESHUTDOWN,
                                         "the server is shutting down (GOODBYE)", 37);
                continue;
            }
            rc = start_request(c, r);
            if (rc && r->finished)
                continue; /* a local failure of that request only */
            if (rc)
                goto out_fail;
            c->run_active++;
            active = c->run_active;
            if (active > c->run_peak)
                c->run_peak = active;
        }
        if (active == 0 && next >= n)
            break;
        if (c->rdma_inflight || c->rdma_ready) {
            /* Finished RDMA transfers first: their requests end and free
             * window slots for the next ones. */
            rc = tw__client_rdma_reap(c);
            if (rc)
                goto out_fail;
            if (c->run_active != active) {
                active = c->run_active;
                continue;
            }
        }
        if (!frame_buffered(c)) {
            rc = tw__client_conn_flush(c, c->request_timeout_ms);
            if (rc)
                goto out_fail;
            if (c->rdma_inflight && !wait_socket_or_plane(c))
                continue; /* a transfer finished: reap it */
        }
        struct tw_msg msg;
        rc = tw__client_conn_next(c, &msg, c->request_timeout_ms);
        if (rc < 0)
            goto out_fail;
        if (rc == 1) {
            rc = dispatch(c, &msg);
            if (rc < 0) {
                if (!c->broken) {
                    tw__client_seterr(c, "server sent an unexpected %s for request %llu: %s",
                                      tw__tag_name(msg.hdr.tag),
                                      (unsigned long long)msg.hdr.request_id, tw_strerror_name(rc));
                    tw__client_conn_fail(c, rc, 1);
                }
                goto out_fail;
            }
        }
        active = c->run_active; /* tw__client_engine_finish counts down */
    }
    rc = tw__client_conn_flush(c, c->request_timeout_ms); /* pending cancels */
    if (rc)
        goto out_fail;
    tw__client_put_span_close(c);    /* before the slabs it may cover can go */
    (void)tw__client_stage_fence(c); /* a failed copy fails its own request */
    tw__client_stage_ahead_drop(c);
    if (!c->put_spans_live) /* a span still registered may cover a slab */
        tw__client_stage_trim(c);
    c->run = NULL;
    if (c->run_map != c->kept_map)
        free(c->run_map);
    c->run_map = NULL;
    /* client.h: SHUTTING_DOWN with GOODBYE closes the connection. Once a
     * call has reported it, later calls fail with -ENOTCONN (a call that
     * only succeeded while GOODBYE arrived leaves that to the next one). */
    if (c->closing) {
        for (size_t i = 0; i < n; i++)
            if (reqs[i].status == TW_ESHUTDOWN) {
                tw__client_conn_fail(c, 0, 0);
                break;
            }
    }
    return 0;

out_fail:
    /* Connection-level failure: every unfinished request shares it. The
     * message explaining it is already in c->errmsg. A close after the
     * server's GOODBYE is its shutdown, not a network fault; so is a send
     * that failed (EPIPE, ECONNRESET) because the server closed after
     * saying GOODBYE or ERROR(SHUTTING_DOWN) that was not read yet. */
    if (rc == -EPIPE || rc == -ECONNRESET) {
        int said = tw__client_conn_last_words(c);
        if (said)
            rc = said;
    }
    if (c->closing && rc == -ECONNRESET) {
        rc = TW_ESHUTDOWN;
        tw__client_seterr(c, "the server shut down (GOODBYE) before answering");
    }
    if (count_unfinished(reqs, n)) {
        char keep[TW__CLIENT_ERRMSG_LEN];
        memcpy(keep, c->errmsg, sizeof(keep));
        for (size_t i = 0; i < n; i++)
            if (!reqs[i].finished) {
                reqs[i].finished = 1;
                reqs[i].status = rc;
                if (reqs[i].dp && reqs[i].dp->release)
                    reqs[i].dp->release(c, &reqs[i]);
            }
        memcpy(c->errmsg, keep, sizeof(keep));
        c->err_index = 0;
    }
    tw__client_conn_discard(c);
    tw__client_conn_fail(c, rc, 0);
    tw__client_put_span_close(c);
    (void)tw__client_stage_fence(c);
    tw__client_stage_ahead_drop(c);
    if (!c->put_spans_live) /* a span still registered may cover a slab */
        tw__client_stage_trim(c);
    c->run = NULL;
    if (c->run_map != c->kept_map)
        free(c->run_map);
    c->run_map = NULL;
    return rc;
}
