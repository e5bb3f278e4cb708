/*
 * libtensorwire public entry points (include/tensorwire/client.h): option
 * defaults, connect + handshake + mutual authentication, and thin wrappers
 * that build requests for the engine.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client/client_internal.h"
#include "common/token.h"
#include "proto/auth.h"
#include "tensorwire/version.h"

/* The public dtype codes are the wire codes. */
_Static_assert((int)TW_F64 == (int)TW_DTYPE_F64 && (int)TW_BOOL == (int)TW_DTYPE_BOOL &&
                   (int)TW_BF16 == (int)TW_DTYPE_BF16 && (int)TW_F8E5M2 == (int)TW_DTYPE_F8E5M2 &&
                   (int)TW_U64 == (int)TW_DTYPE_U64 && TW_DTYPE_COUNT == (int)TW_DTYPE_MAX,
               "public dtype codes must equal the wire codes");
_Static_assert(TW_TENSOR_MAX_NDIM == TW_MAX_NDIM, "ndim limits differ");
_Static_assert(TW_TENSOR_MAX_NAME == TW_MAX_NAME_LEN, "name limits differ");

/* --- dtypes ------------------------------------------------------------- */

size_t tw_dtype_size(int dtype)
{
    if (dtype < 1 || dtype > TW_DTYPE_COUNT)
        return 0;
    return tw__dtype_size((uint8_t)dtype);
}

const char *tw_dtype_name(int dtype)
{
    if (dtype < 1 || dtype > TW_DTYPE_COUNT)
        return NULL;
    return tw__dtype_name((uint8_t)dtype);
}

int tw_dtype_from_string(const char *name)
{
    static const struct {
        const char *alias;
        int code;
    } aliases[] = {
        {"float64", TW_F64}, {"float32", TW_F32}, {"float16", TW_F16}, {"bfloat16", TW_BF16},
        {"half", TW_F16},    {"float", TW_F32},   {"double", TW_F64},  {"int8", TW_I8},
        {"int16", TW_I16},   {"int32", TW_I32},   {"int64", TW_I64},   {"uint8", TW_U8},
        {"uint16", TW_U16},  {"uint32", TW_U32},  {"uint64", TW_U64},
    };
    if (!name)
        return TW_EINVAL;
    for (int d = 1; d <= TW_DTYPE_COUNT; d++) {
        const char *n = tw_dtype_name(d);
        if (n && strcmp(n, name) == 0)
            return d;
    }
    for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
        if (strcmp(aliases[i].alias, name) == 0)
            return aliases[i].code;
    return TW_EINVAL;
}

int tw_tensor_desc_bytes(const struct tw_tensor_desc *desc, uint64_t *out)
{
    if (!desc || !out || desc->ndim > TW_TENSOR_MAX_NDIM || tw_dtype_size(desc->dtype) == 0)
        return TW_EINVAL;
    /* An overflowing product is an argument error too (TW_EINVAL), not an
     * errno: no system call failed. */
    return tw__shape_bytes(desc->dtype, desc->ndim, desc->shape, out) ? TW_EINVAL : 0;
}

/* --- connection --------------------------------------------------------- */

static void client_free(struct tw_client *c)
{
    tw__client_gdr_free(c);
    tw__client_rdma_close(c);
    tw__client_stage_free(c);
    if (c->fd >= 0)
        close(c->fd);
    tw__sm_destroy(&c->sm);
    free(c->rbuf);
    for (int q = 0; q < 2; q++) {
        free(c->tx[q].buf);
        free(c->tx[q].segs);
    }
    free(c->kept_reqs);
    free(c->kept_map);
    free(c);
}

/* Reads one control frame during the handshake; an ERROR(id 0) becomes its
 * code with the server's message. */
static int handshake_next(struct tw_client *c, struct tw_msg *msg, uint32_t want_tag, int timeout)
{
    int rc = tw__client_conn_next(c, msg, timeout);
    if (rc < 0)
        return rc;
    if (rc == 0 || msg->hdr.request_id != 0) {
        tw__client_seterr(c, "unexpected frame during the handshake");
        return tw__client_conn_fail(c, TW_EOUT_OF_ORDER, 1);
    }
    if (msg->hdr.tag == TW_TAG_ERROR) {
        uint32_t code = msg->u.error.code;
        int st = code >= 1 && code < 100 ? TW_ERR_FROM_WIRE(code) : TW_EINTERNAL;
        tw__client_seterr(c, "server refused the connection: %.*s", (int)msg->u.error.message.len,
                          (const char *)msg->u.error.message.ptr);
        return tw__client_conn_fail(c, st, 0);
    }
    if (msg->hdr.tag != want_tag) {
        tw__client_seterr(c, "expected %s, got %s", tw__tag_name(want_tag),
                          tw__tag_name(msg->hdr.tag));
        return tw__client_conn_fail(c, TW_EOUT_OF_ORDER, 1);
    }
    return 0;
}

/* token->len == 0: no token was given. */
static int handshake(struct tw_client *c, const struct tw_client_options *o,
                     const struct tw_token *token)
{
    char agent[80];
    struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_HELLO}};
    struct tw_msg in;
    uint8_t server_nonce[TW_AUTH_NONCE_LEN], client_nonce[TW_AUTH_NONCE_LEN];
    uint8_t mac[TW_AUTH_MAC_LEN];
    int timeout = o->connect_timeout_ms;
    int rc;

    snprintf(agent, sizeof(agent), "%s", o->agent ? o->agent : "libtensorwire/" TW_VERSION_STRING);
    m.u.hello.caps =
        TW_CAP_INLINE_DATA | TW_CAP_EAGER_PUT | (o->checksum ? TW_CAP_PAYLOAD_CRC32C : 0);
    if (c->want_rdma) {
        /* Bit 5: our reads follow a source's RDMA_AVAILABLE (dp_rdma.c,
         * dp_staging.c); we never send MORE ourselves. Bit 6: a put's
         * RDMA_REGISTER goes right behind its TENSOR_PUT (engine.c). Bit 7:
         * gets we read by cross-memory attach say so (ATTACH_READ). */
        m.u.hello.caps |= TW_CAP_RDMA_DATA_PLANE | TW_CAP_RDMA_PROGRESSIVE | TW_CAP_EAGER_RDMA_PUT |
                          TW_CAP_RDMA_ATTACH_READS;
        if (o->push != TW_PUSH_NEVER)
            m.u.hello.caps |= TW_CAP_RDMA_GPUDIRECT;
    }
    m.u.hello.max_frame = o->max_frame;
    m.u.hello.max_inflight = o->max_inflight;
    m.u.hello.agent.ptr = (const uint8_t *)agent;
    m.u.hello.agent.len = (uint32_t)strlen(agent);
    rc = tw__client_conn_queue(c, &m);
    if (rc)
        return rc;
    rc = tw__client_conn_flush(c, timeout);
    if (rc)
        return rc;
    rc = handshake_next(c, &in, TW_TAG_HELLO_ACK, timeout);
    if (rc)
        return rc;
    c->checksum = o->checksum && (in.u.hello_ack.caps & TW_CAP_PAYLOAD_CRC32C);
    if (!(in.u.hello_ack.caps & TW_CAP_INLINE_DATA)) {
        tw__client_seterr(c, "the server offers no inline data plane");
        return tw__client_conn_fail(c, TW_ENOT_NEGOTIATED, 0);
    }
    if (in.u.hello_ack.auth_method == TW_AUTH_NONE) {
        if (token->len) {
            /* A token means the caller wants to know it talks to the right
             * server; a server that does not authenticate cannot prove it. */
            tw__client_seterr(c, "a token was given but the server does not authenticate; "
                                 "refusing an unauthenticated server");
            return tw__client_conn_fail(c, TW_EUNAUTHORIZED, 0);
        }
        return 0;
    }
    if (in.u.hello_ack.auth_method != TW_AUTH_HMAC_SHA256) {
        tw__client_seterr(c, "unknown auth method %u", in.u.hello_ack.auth_method);
        return tw__client_conn_fail(c, TW_EBAD_FIELD, 1);
    }
    if (!token->len) {
        tw__client_seterr(c, "the server requires a token (token / token_file, CLI --token-file)");
        return tw__client_conn_fail(c, TW_EUNAUTHORIZED, 0);
    }
    memcpy(server_nonce, in.u.hello_ack.server_nonce, TW_AUTH_NONCE_LEN);
    if (tw__auth_nonce(client_nonce) < 0) {
        tw__client_seterr(c, "cannot generate a nonce (OpenSSL RAND_bytes failed)");
        return tw__client_conn_fail(c, TW_EINTERNAL, 0);
    }
    memset(&m, 0, sizeof(m));
    m.hdr.version = TW_PROTO_VERSION;
    m.hdr.tag = TW_TAG_AUTH;
    memcpy(m.u.auth.client_nonce, client_nonce, TW_AUTH_NONCE_LEN);
    rc = tw__auth_mac(token->bytes, token->len, TW_AUTH_PROOF_CLIENT, server_nonce, client_nonce,
                      m.u.auth.mac);
    if (rc)
        return tw__client_conn_fail(c, rc, 0);
    rc = tw__client_conn_queue(c, &m);
    if (!rc)
        rc = tw__client_conn_flush(c, timeout);
    if (rc)
        return rc;
    rc = handshake_next(c, &in, TW_TAG_AUTH_OK, timeout);
    if (rc)
        return rc;
    rc = tw__auth_mac(token->bytes, token->len, TW_AUTH_PROOF_SERVER, server_nonce, client_nonce,
                      mac);
    if (rc)
        return tw__client_conn_fail(c, rc, 0);
    if (!tw__auth_mac_equal(mac, in.u.auth_ok.mac)) {
        tw__client_seterr(c, "the server's AUTH_OK proof is wrong: it does not hold our token");
        return tw__client_conn_fail(c, TW_EUNAUTHORIZED, 0);
    }
    return 0;
}

int tw_client_connect_error(const char *addr, const struct tw_client_options *opts, tw_client **out,
                            char *errbuf, size_t cap)
{
    struct tw_client_options o;
    struct tw_client *c;
    struct tw_token token; /* on the stack, wiped on every way out */
    int rc;

    tw__token_clear(&token);
    if (errbuf && cap)
        errbuf[0] = '\0';
    if (!out)
        return TW_EINVAL;
    *out = NULL;
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->fd = -1;
    rc = tw__client_options_resolve(opts, &o, c->errmsg, sizeof(c->errmsg));
    if (rc)
        goto out_free_client;
    c->next_id = 1;
    c->request_timeout_ms = o.request_timeout_ms;
    /* 0: the window follows the transfers (engine.c batch_window); the
     * server is asked for the widest one. */
    c->auto_window = o.max_inflight == 0;
    if (c->auto_window)
        o.max_inflight = TW__WINDOW_WIDE;
    c->want_inflight = o.max_inflight;
    cpu_set_t cpus;
    c->cpus = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    /* The one place the fabric option is read: NULL, "" and "none" mean no
     * RDMA (tensorwire/client.h). */
    c->want_rdma = o.fabric && *o.fabric && strcmp(o.fabric, "none") != 0;
    c->rcap = TW__CLIENT_RX_INITIAL;
    c->rbuf = malloc(c->rcap);
    if (!c->rbuf) {
        rc = -ENOMEM;
        goto out_free_client;
    }
    if (o.max_inflight > 65536 || o.max_frame < TW_MIN_MAX_FRAME ||
        o.max_frame > TW_MAX_MAX_FRAME ||
        (o.agent && (strlen(o.agent) == 0 || strlen(o.agent) > TW_MAX_AGENT_LEN))) {
        tw__client_seterr(c,
                          "options out of range (max_inflight 0..65536, max_frame 64 KiB..1 GiB, "
                          "agent 1..64 bytes)");
        rc = TW_EINVAL;
        goto out_free_client;
    }
    if (o.token) {
        rc = tw__token_set(&token, o.token, strlen(o.token), c->errmsg, sizeof(c->errmsg));
        if (rc)
            goto out_free_client;
    } else if (o.token_file) {
        rc = tw__token_load_file(&token, o.token_file,
                                 o.allow_insecure_token_file ? TW__TOKEN_ALLOW_INSECURE : 0,
                                 c->errmsg, sizeof(c->errmsg));
        if (rc)
            goto out_free_client;
    }
    rc = tw__sm_init(&c->sm, TW_ROLE_CLIENT, o.max_inflight);
    if (rc)
        goto out_free_token;
    rc = tw__client_conn_open(c, addr, o.connect_timeout_ms, o.socket_buffer_bytes);
    if (rc)
        goto out_free_token;
    rc = handshake(c, &o, &token);
    if (rc)
        goto out_free_token;
    tw__token_clear(&token);
    c->push_policy = o.push;
    c->rdma_min_bytes = o.rdma_min_bytes;
    c->gdr_mode = o.gpudirect; /* the plane asks for FI_HMEM unless off */
    if (!c->want_rdma) {
        c->fabric = TW__FABRIC_NOT_REQUESTED;
    } else if (!(c->sm.caps & TW_CAP_RDMA_DATA_PLANE)) {
        c->fabric = TW__FABRIC_SERVER_HAS_NONE;
    } else {
        rc = tw__client_rdma_setup(c, o.fabric, o.connect_timeout_ms);
        if (rc)
            goto out_free_client;
    }
    rc = tw__client_gdr_setup(c, &o);
    if (rc)
        goto out_free_client;
    c->errmsg[0] = '\0';
    *out = c;
    return 0;

out_free_token:
    tw__token_clear(&token);
out_free_client:
    if (errbuf && cap)
        snprintf(errbuf, cap, "%s", c->errmsg[0] ? c->errmsg : tw_strerror(rc));
    client_free(c);
    return rc;
}

int tw_client_connect(const char *addr, const struct tw_client_options *opts, tw_client **out)
{
    return tw_client_connect_error(addr, opts, out, NULL, 0);
}

void tw_close(tw_client *c)
{
    if (!c)
        return;
    if (!c->broken && c->fd >= 0 && c->sm.phase == TW_PHASE_READY) {
        struct tw_msg m = {.hdr = {.version = TW_PROTO_VERSION, .tag = TW_TAG_GOODBYE}};
        m.u.goodbye.code = 0;
        tw__client_conn_discard(c);
        if (tw__client_conn_queue(c, &m) == 0)
            tw__client_conn_flush(c, 1000);
    }
    client_free(c);
}

/* The two getters below make their text when asked, into buffers of the
 * handle (not const objects: the casts are only for the const API). */
const char *tw_client_data_plane(const tw_client *c)
{
    if (!c || !c->have_last_path)
        return "";
    struct tw_client *m = (struct tw_client *)c;
    tw__path_format(&c->last_path, c->fpeer ? tw__fabric_peer_provider(c->fpeer) : NULL,
                    m->plane_text, sizeof(m->plane_text));
    /* GPU memory that could have moved by GPUDirect and did not: say why
     * ("rdma pull (shm) + staging (not GPUDirect: cuda:0 on shm:
     * provider_hmem: ...)"). */
    const char *why = NULL;
    if (c->last_path.reason == TW_PATH_R_STAGED_NO_GPUDIRECT && c->gdr_why[0])
        why = c->gdr_why;
    else if (c->last_path.reason == TW_PATH_R_STAGED_SHM_PULL ||
             c->last_path.reason == TW_PATH_R_STAGED_SHM_HOST_SOURCE)
        why = tw__path_reason_str(c->last_path.reason);
    if (why) {
        size_t n = strlen(m->plane_text);
        snprintf(m->plane_text + n, sizeof(m->plane_text) - n, " (not GPUDirect: %s)", why);
    }
    return m->plane_text;
}

const char *tw_client_fabric_status(const tw_client *c)
{
    if (!c)
        return "";
    struct tw_client *m = (struct tw_client *)c;
    char *b = m->fabric_text;
    size_t n = sizeof(m->fabric_text);
    switch (c->fabric) {
    case TW__FABRIC_NOT_REQUESTED:
        snprintf(b, n, "inline: rdma not requested (--fabric none)");
        break;
    case TW__FABRIC_SERVER_HAS_NONE:
        snprintf(b, n, "inline: the server offers no rdma data plane");
        break;
    case TW__FABRIC_OPEN_FAILED:
        snprintf(b, n, "inline: the client's rdma plane did not open: %s", c->fabric_detail);
        break;
    case TW__FABRIC_DECLINED:
        snprintf(b, n, "inline: the server declined rdma: %s", c->fabric_detail);
        break;
    case TW__FABRIC_INSERT_FAILED:
        snprintf(b, n, "inline: cannot insert the server's rdma address: %s", c->fabric_detail);
        break;
    case TW__FABRIC_ACCEPTED:
        snprintf(b, n, "rdma %s", c->fpeer ? tw__fabric_peer_provider(c->fpeer) : "?");
        break;
    }
    return b;
}

int tw_client_is_connected(const tw_client *c)
{
    /* After the server's GOODBYE nothing new can start: not usable. */
    return c && !c->broken && !c->closing && c->fd >= 0;
}

const char *tw_client_last_error_message(const tw_client *c)
{
    return c ? c->errmsg : "";
}

uint32_t tw_client_max_frame(const tw_client *c)
{
    return c->sm.max_frame;
}

uint32_t tw_client_max_inflight(const tw_client *c)
{
    return c->sm.max_inflight;
}

uint64_t tw_client_rdma_min_bytes(const tw_client *c)
{
    return c ? tw__client_rdma_min_bytes(c) : UINT64_MAX;
}

/* --- requests ----------------------------------------------------------- */

static int run_one(struct tw_client *c, struct tw__creq *r)
{
    int rc;
    if (!c)
        return TW_EINVAL;
    rc = tw__client_engine_run(c, r, 1);
    return rc ? rc : r->status;
}

int tw_put(tw_client *c, const char *name, const struct tw_tensor_desc *desc, const void *data,
           size_t len)
{
    struct tw__creq r = {.op = TW__OP_PUT,
                         .name = name,
                         .buf = (uint8_t *)data,
                         .len = len,
                         .desc = (struct tw_tensor_desc *)desc};
    if (!desc || (!data && len))
        return TW_EINVAL;
    return run_one(c, &r);
}

int tw_get(tw_client *c, const char *name, void *buf, size_t cap, struct tw_tensor_desc *out_desc)
{
    struct tw__creq r = {
        .op = TW__OP_GET, .name = name, .buf = buf, .len = buf ? cap : 0, .desc = out_desc};
    return run_one(c, &r);
}

int tw_get_alloc(tw_client *c, const char *name, void **out_buf, size_t *out_len,
                 struct tw_tensor_desc *out_desc)
{
    struct tw__creq r = {.op = TW__OP_GET, .name = name, .alloc = 1, .desc = out_desc};
    int rc;
    if (!out_buf)
        return TW_EINVAL;
    *out_buf = NULL;
    rc = run_one(c, &r);
    if (rc) {
        free(r.buf);
        return rc;
    }
    *out_buf = r.buf;
    if (out_len)
        *out_len = r.len;
    return 0;
}

void tw_free(void *buf)
{
    free(buf);
}

int tw_stat(tw_client *c, const char *name, struct tw_tensor_desc *out_desc)
{
    struct tw__creq r = {.op = TW__OP_STAT, .name = name, .desc = out_desc};
    return run_one(c, &r);
}

int tw_delete(tw_client *c, const char *name)
{
    struct tw__creq r = {.op = TW__OP_DELETE, .name = name};
    return run_one(c, &r);
}

int tw_ping(tw_client *c, uint64_t *rtt_ns)
{
    struct tw__creq r = {.op = TW__OP_PING};
    uint64_t t0;
    int rc;
    if (c)
        memcpy(r.ping, &c->next_id, sizeof(r.ping));
    t0 = tw__now_ns();
    rc = run_one(c, &r);
    if (!rc && rtt_ns)
        *rtt_ns = tw__now_ns() - t0;
    return rc;
}

static void collect_free(struct tw__collect *k)
{
    free(k->names);
    free(k->entries);
    free(k->name_off);
}

/* Packs the collected entries and their names into one block: entries first,
 * names after, each entry's name pointer into the block. */
static void *collect_pack(struct tw__collect *k, size_t entry_size, size_t name_field_off)
{
    uint8_t *block;
    if (k->count == 0)
        return NULL;
    block = malloc(k->count * entry_size + k->names_len);
    if (!block)
        return NULL;
    memcpy(block, k->entries, k->count * entry_size);
    memcpy(block + k->count * entry_size, k->names, k->names_len);
    for (size_t i = 0; i < k->count; i++) {
        const char *name = (const char *)block + k->count * entry_size + k->name_off[i];
        memcpy(block + i * entry_size + name_field_off, &name, sizeof(name));
    }
    return block;
}

/* Runs one LIST or STATS request and packs what it collected into one
 * malloc'd array of entry_size-byte entries (names inside the same block). */
static int run_collect(tw_client *c, struct tw__creq *r, size_t entry_size, size_t name_field_off,
                       void **out, size_t *count)
{
    struct tw__collect k = {0};
    int rc;
    if (!out || !count)
        return TW_EINVAL;
    *out = NULL;
    *count = 0;
    r->collect = &k;
    rc = run_one(c, r);
    if (rc)
        goto out_free;
    if (k.count) {
        *out = collect_pack(&k, entry_size, name_field_off);
        if (!*out) {
            rc = -ENOMEM;
            goto out_free;
        }
    }
    *count = k.count;
out_free:
    collect_free(&k);
    return rc;
}

int tw_list(tw_client *c, const char *prefix, struct tw_tensor_info **out, size_t *count)
{
    struct tw__creq r = {.op = TW__OP_LIST, .name = prefix};
    void *block = NULL;
    int rc = run_collect(c, &r, sizeof(struct tw_tensor_info),
                         offsetof(struct tw_tensor_info, name), out ? &block : NULL, count);
    if (out)
        *out = block;
    return rc;
}

void tw_list_free(struct tw_tensor_info *list)
{
    free(list);
}

int tw_stats(tw_client *c, struct tw_stat_entry **out, size_t *count)
{
    struct tw__creq r = {.op = TW__OP_STATS};
    void *block = NULL;
    int rc = run_collect(c, &r, sizeof(struct tw_stat_entry), offsetof(struct tw_stat_entry, key),
                         out ? &block : NULL, count);
    if (out)
        *out = block;
    return rc;
}

void tw_stats_free(struct tw_stat_entry *stats)
{
    free(stats);
}

static int batch(tw_client *c, struct tw_batch_item *items, size_t n, enum tw__op op)
{
    struct tw__creq *reqs;
    int rc, first = 0;
    if (!c || (n && !items))
        return TW_EINVAL;
    if (n == 0)
        return 0;
    reqs = tw__client_scratch((void **)&c->kept_reqs, &c->kept_reqs_cap, n, sizeof(*reqs),
                              TW__CLIENT_KEEP_ITEMS);
    if (!reqs)
        return -ENOMEM;
    /* One pass: each request zeroed and filled (the block is reused). */
    for (size_t i = 0; i < n; i++)
        reqs[i] = (struct tw__creq){.op = op,
                                    .name = items[i].name,
                                    .buf = items[i].buf,
                                    .len = items[i].len,
                                    .desc = &items[i].desc};
    rc = tw__client_engine_run(c, reqs, n);
    for (size_t i = 0; i < n; i++) {
        items[i].status = reqs[i].status;
        items[i].latency_ns = reqs[i].t_end > reqs[i].t_start && reqs[i].t_start
                                  ? reqs[i].t_end - reqs[i].t_start
                                  : 0;
        if (reqs[i].status && !first)
            first = reqs[i].status;
    }
    if (reqs != c->kept_reqs)
        free(reqs);
    return first ? first : rc;
}

int tw_batch_get(tw_client *c, struct tw_batch_item *items, size_t n)
{
    return batch(c, items, n, TW__OP_GET);
}

int tw_batch_put(tw_client *c, struct tw_batch_item *items, size_t n)
{
    return batch(c, items, n, TW__OP_PUT);
}
