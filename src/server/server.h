/*
 * tensorwired: the server object, its connections, and the session API the
 * handlers and data planes use to answer.
 *
 * Threading: one thread runs the event loop; everything here is touched only
 * from it. Memory: the server owns its connections; a connection owns its
 * state machine, buffers, output queue and transfers. A connection that is
 * closed is unlinked at once and freed after the current loop iteration
 * (events already collected may still point at it).
 */
#ifndef TW_SERVER_SERVER_H
#define TW_SERVER_SERVER_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/token.h"
#include "fabric/fabric.h"
#include "fabric/mrcache.h"
#include "net/addr.h"
#include "net/loop.h"
#include "net/sock.h"
#include "proto/auth.h"
#include "proto/proto.h"
#include "proto/sm.h"
#include "server/config.h"
#include "server/devices.h"
#include "server/metrics.h"
#include "server/store.h"
#include "server/xfer.h"

/* Input buffer: frame headers and control messages (the largest legal
 * client->server control payload is about 3 KiB; DATA bytes bypass it).
 * A read into it asks for TW_SRV_READ_BUF at most; the rest is room for
 * the frames a read-ahead put into puts' destinations, should they turn
 * out to be other frames (conn.c, ahead_settle). Pages of it that are
 * never used are never touched. */
#define TW_SRV_READ_BUF 65536u
#define TW_SRV_INBUF (TW_NET_IO_MAX + 2 * TW_SRV_SCATTER_TAIL)
/* Bytes read into the input buffer behind the rest of a DATA payload that
 * is read in place (conn.c, conn_read): the next frames' headers and the
 * start of the next payload. */
#define TW_SRV_SCATTER_TAIL 4096u
/* Read-ahead of put payloads (conn.c, ahead_plan and ahead_settle): with
 * the rest of one DATA payload, the same call reads the whole DATA frames
 * of the next inline puts already announced, each straight into its
 * tensor, while they fit in TW_NET_IO_MAX bytes and TW_SRV_AHEAD_FRAMES
 * frames. */
#define TW_SRV_AHEAD_FRAMES 16u
/* A connection whose predictions missed this many times, and more than
 * once per 8 frames taken, is not read ahead any more: its peer does not
 * send the announced puts' DATA in order, in one frame each. */
#define TW_SRV_AHEAD_MISSES_MAX 8u
/* Offset in the input buffer of the bytes read behind a read-ahead (its
 * start holds each predicted frame's header while it is checked). */
#define TW_SRV_AHEAD_TAIL_AT 64u
#define TW_SRV_MAX_CTL_PAYLOAD 16384u
/* Stop reading from a peer whose unread replies exceed this (it is not
 * reading); resume below half. DATA frames of GETs are not counted: they
 * are produced only while fewer than TW_SRV_DATA_FRAMES_QUEUED frames and
 * fewer than TW_SRV_DATA_BYTES_QUEUED bytes of them are queued. The bytes
 * bound keeps two 16 MiB frames of a large get queued; the frames bound
 * lets the small frames of many gets go out in one sendmsg (with a bound
 * of 2 frames, 64 gets of 32 KiB in flight took 33 sendmsg calls per
 * event-loop round, and a server staging them from a GPU waited for its
 * copies once per 2 blocks). */
#define TW_SRV_OUT_CTL_HIGH (1u << 20)
#define TW_SRV_DATA_FRAMES_QUEUED 64u
#define TW_SRV_DATA_BYTES_QUEUED (2u * TW_SRV_DATA_CHUNK)
#define TW_SRV_DATA_CHUNK (16u << 20)
#define TW_SRV_LIST_FRAME (256u << 10)
/* Fairness: bytes one connection may move per wakeup before yielding. */
#define TW_SRV_IO_BUDGET (16u << 20)
/* After the server's GOODBYE: how long crossing requests are still read
 * and answered before the connection closes. */
#define TW_SRV_GOODBYE_WINDOW_MS 1000u
/* Every this often the server frees spare buffers unused for a period and
 * returns free heap to the kernel (malloc_trim): idle memory goes back. */
#define TW_SRV_TRIM_MS 10000u
/* Connections being refused with ERROR(BUSY) beyond max_connections. */
#define TW_SRV_MAX_REJECTING 64u

struct tw_srv;

/* One queued frame: hdr[] (owned) followed by body (borrowed from ref). */
struct tw_out_chunk {
    struct tw_out_chunk *next;
    struct tw_tensor *ref; /* keeps body alive; NULL for control frames */
    const uint8_t *body;
    size_t body_len;
    size_t hdr_len;
    size_t sent; /* bytes of hdr+body already written */
    /* A DATA frame whose body a queued copy from store GPU dev_gpu is still
     * filling (xfer_staged.c): sent once that copy's ticket is done.
     * dev_gpu -1: nothing to wait for. */
    int dev_gpu;
    uint64_t dev_ticket;
    uint8_t hdr[];
};

enum tw_conn_state {
    TW_CONN_OPEN = 0, /* reading and answering */
    TW_CONN_FLUSHING, /* closing: sending what is queued, reading nothing */
    TW_CONN_DRAINING, /* write side shut; reading until the peer's EOF */
    TW_CONN_DEAD      /* unlinked, waiting to be freed */
};

/* Teardown asked for and not yet done (deferred close, see tw__conn_close):
 * the connection's transfers, fabric peer and socket stay valid until
 * tw__srv_settle() acts on it after the current loop iteration. */
enum tw_conn_teardown {
    TW_TEARDOWN_NONE = 0,
    TW_TEARDOWN_CLOSE,  /* graceful: abandon transfers, flush, half-close */
    TW_TEARDOWN_DESTROY /* immediate: close the socket, unlink */
};

struct tw_srv_conn {
    struct tw_srv *srv;
    struct tw_srv_conn *next, *prev;
    uint64_t id;
    int fd;
    struct tw_io io;
    char peer[TW_NET_ADDRSTRLEN];
    struct sockaddr_storage peer_addr;
    enum tw_conn_state state;
    int rejecting; /* over max_connections: ERROR(BUSY) then close */
    int slot_held; /* counted in nconns or nrejecting until destroyed */
    /* Not through the handshake yet: on srv's handshake list (oldest
     * first), counted in srv->nhandshaking (admission.h). */
    int handshaking;
    struct tw_srv_conn *hs_next, *hs_prev;
    int peer_goodbye; /* client sent GOODBYE: close when idle */
    int in_io;        /* inside this connection's own I/O callback */
    int input_paused; /* too many unread replies: not reading */
    char close_reason[256];
    enum tw_conn_teardown teardown;  /* asked for, done by tw__srv_settle */
    struct tw_srv_conn *settle_next; /* on srv->settle while teardown != NONE */

    struct tw_sm sm;
    uint64_t caps;      /* negotiated */
    uint32_t max_frame; /* negotiated */
    uint32_t max_inflight;
    uint8_t server_nonce[TW_AUTH_NONCE_LEN];

    /* Input: buffered bytes in[in_start, in_end), TW_SRV_INBUF of room. */
    uint8_t *in;
    size_t in_start, in_end;
    /* Read-ahead (conn.c, ahead_plan): the frames predicted for the next
     * read, with the headers they should have and the ones that came. */
    struct tw_srv_ahead {
        uint8_t *dst;
        size_t len;
        uint8_t want[TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN];
        uint8_t got[TW_FRAME_HEADER_LEN + TW_DATA_PREFIX_LEN];
    } ahead[TW_SRV_AHEAD_FRAMES];
    uint64_t ahead_taken, ahead_missed; /* this connection's, as in STATS */
    struct {
        int active;
        struct tw_xfer *x; /* NULL: discard the bytes */
        uint8_t *dst;
        uint64_t left;
        struct tw_msg msg; /* the DATA frame being received */
    } body;

    /* Output queue. */
    struct tw_out_chunk *out_head, *out_tail;
    size_t out_ctl_bytes;
    size_t out_data_frames;
    uint64_t out_data_bytes; /* body bytes of the queued DATA frames */
    /* Store GPU indexes (bit i: store.gpu[i]) that copies were queued on
     * for this connection's DATA frames (xfer_staged.c): each frame waits
     * for its own copy (dev_gpu, dev_ticket); a teardown, or a frame that
     * was not queued, waits for all of them (tw__srv_stage_fence). */
    uint64_t dev_fence;
    /* Puts whose copy into the GPU was queued, to publish in this order
     * (xfer.h, tw__xfer_commits_flush); defer_commits is set while the
     * connection reads, and srv->completing while the loop pops the
     * plane's completions: the only times a commit may be queued. */
    struct tw_xfer *commit_head, *commit_tail;
    int defer_commits;
    /* Gets whose source key waits for the end of this read (xfer_rdma.c,
     * "Shared source keys"): keys_defer is set while the connection reads;
     * tw__srv_rdma_key_pending() keys them before the I/O callback ends. */
    struct tw_rdma_st *keys_head, *keys_tail;
    int keys_defer;

    /* Transfers by request id, and the sources waiting to produce. */
    struct tw_xfer **xtab;
    size_t xtab_mask;
    size_t nxfers;
    struct tw_xfer *pump_head;

    struct tw_timer handshake_timer, idle_timer, close_timer;
    uint64_t last_io_ms;
    uint64_t bytes_in, bytes_out, requests;
    uint64_t accepted_ms;

    /* RDMA: the client's endpoint after RDMA_ENDPOINT ACCEPT (NULL before,
     * and after DECLINE); removed when the connection is destroyed. */
    struct tw_fabric_peer *fpeer;
    int rdma_downgraded; /* fpeer's rail was retired: logged once */
};

struct tw_srv_stats {
    uint64_t connections_total;
    uint64_t connections_rejected;
    uint64_t connections_evicted; /* handshakes ended to make room */
    uint64_t requests;
    uint64_t requests_failed;
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint64_t puts, gets;
    uint64_t input_pauses; /* times a connection stopped reading (backpressure) */
    /* Transfers of GPU versions through host memory (xfer_staged.c). */
    uint64_t staged_gets, staged_puts, staged_bytes;
    uint64_t staged_failed; /* staged transfers whose GPU copy failed */
    /* Small host copies queued asynchronously, and the waits for them
     * before sending (one wait covers every frame queued since the last). */
    uint64_t staged_async_copies, staged_copy_waits, staged_copy_wait_ns;
    uint64_t staged_progressive_gets; /* RDMA gets announced in parts (bit 5) */
    uint64_t staged_async_commits;
    /* RDMA gets asked with ATTACH_READ (bit 7) whose source was sent
     * without a key: nothing registered (xfer_rdma.c). */
    uint64_t rdma_attach_gets;
    /* Source registrations shared by gets of adjacent slab tensors, and
     * the gets sent such a key (xfer_rdma.c, docs/protocol.md §10). */
    uint64_t rdma_get_spans, rdma_get_span_gets;
    /* Inline put payloads read ahead with the one before them (conn.c,
     * ahead_plan), and predictions that met another frame instead. */
    uint64_t put_read_ahead, put_read_ahead_missed;
    /* Transfers that moved all their bytes, by path (tw__path_format's
     * words): every transfer records its path here and in the log. */
    uint64_t path_inline, path_inline_staged, path_rdma_pull, path_rdma_push, path_rdma_staged,
        path_gdr_pull, path_gdr_push;
};

struct tw_regcache;
struct tw_staging_pool;

struct tw_srv {
    struct tw_srv_config cfg;
    struct tw_loop loop;
    struct tw_store store;
    /* Devices tensors may be stored on (--devices, resolved at startup)
     * and the GPUs this host has (devices.h). */
    struct tw_srv_devices devices;
    int gpu_count;
    struct tw_token token;
    int lfd;
    struct tw_io listen_io;
    struct tw_timer accept_retry;
    char bound[TW_NET_ADDRSTRLEN];
    struct tw_srv_conn *conns;
    struct tw_srv_conn *dead;
    struct tw_srv_conn *settle; /* connections with a teardown to do */
    uint32_t nconns;            /* served connections (max_connections applies) */
    uint32_t nrejecting;        /* connections being refused */
    /* Some connection has puts whose copies into the GPU were queued (set
     * where one is queued, xfer.c tw__xfer_put_complete, after a read or
     * the plane's completions alike): the loop polls instead of sleeping
     * and publishes them once done, or waits for them when it has nothing
     * else to do (tw__srv_poll). */
    int commits_pending;
    /* The loop is handing the plane's completions to their requests
     * (fabric_srv.c on_fab_io): small staged puts those complete queue
     * their copies into the GPU, published later like those of a read. */
    int completing;
    /* Connections still in their handshake, oldest first. */
    struct tw_srv_conn *hs_head, *hs_tail;
    uint32_t nhandshaking;
    uint64_t next_conn_id;
    int shutting_down;
    int done;
    struct tw_timer grace_timer;
    struct tw_timer trim_timer; /* TW_SRV_TRIM_MS */
    struct tw_srv_stats stats;
    /* Transfers in flight on all connections (the sum of their nxfers):
     * how busy the loop is (xfer_rdma.c: whether to copy a read itself). */
    size_t xfers_live;
    struct tw_srv_metrics metrics; /* metrics.h */
    uint8_t *scratch;              /* sink for discarded DATA bytes */
    size_t scratch_len;

    /* RDMA plane (fabric_srv.c); NULL when it did not open. */
    struct tw_fabric *fab;
    /* Registration cache of fab (every registration of the server goes
     * through it); NULL with fab. Store storage going back to the spare pool
     * is invalidated in it (store.on_recycle). */
    struct tw_fabric_mrcache *mrc;
    /* Page-locked host copies of staged transfers (xfer_staged.c): a
     * registration cache whose registrar pins; NULL until the first one. */
    struct tw_regcache *stage_pins;
    /* The pinned pool of pipelined pull puts into GPU memory and the slots
     * their pipes reserved (xfer_staged.c); NULL until the first one. */
    struct tw_staging_pool *stage_pool;
    unsigned stage_reserved;
    unsigned stage_leaked;  /* pipes abandoned with reads still in the provider */
    uint32_t rails_dropped; /* retired rails whose cached registrations went */
    struct tw_io fab_io;
    char fab_why[512]; /* why there is no plane, or what it opened */
    /* Registrations released with buffers still busy: the plane calls back
     * (any thread) when nothing can touch the memory any more; the loop then
     * drops the tensor references they held. */
    int idle_efd;
    struct tw_io idle_io;
    pthread_mutex_t idle_lock;
    struct tw_rdma_st *idle_list;
    struct tw_rdma_st *rdma_live; /* every transfer state not yet freed */
    /* GPUDirect (gdr_srv.c): verdicts of the served GPUs on the plane's
     * providers, built once at startup; NULL when no GPU is served, the
     * plane is closed or --gpudirect off. gdr_rail_row: the table row of
     * each rail slot's provider (-1: none). */
    struct tw_gdr_table *gdr;
    int gdr_any; /* some served GPU is admitted on some rail */
    int gdr_rail_row[TW_FABRIC_MAX_SLOTS];
};

/* Loads the token, binds the listener, installs signal handling. errbuf says
 * why on failure. Returns 0 or a negative code. */
int tw__srv_init(struct tw_srv *srv, const struct tw_srv_config *cfg, char *errbuf, size_t errlen);
/* One loop iteration (waiting at most max_wait_ms, -1 = until the next
 * timer), then frees the connections it closed. Returns the number of
 * callbacks run or a negated errno. For tests and fuzzers. */
int tw__srv_poll(struct tw_srv *srv, int max_wait_ms);
/* Serves until shutdown completes. Returns 0 or a negated errno. */
int tw__srv_run(struct tw_srv *srv);
/* Stops accepting, fails in-flight requests with SHUTTING_DOWN, says
 * GOODBYE and closes every connection (within cfg.shutdown_grace_ms). */
void tw__srv_shutdown(struct tw_srv *srv, const char *why);
void tw__srv_destroy(struct tw_srv *srv);

/* ---- session layer (conn.c) ---- */

/* Wraps an accepted socket; takes ownership of fd. rejecting: answer
 * ERROR(BUSY, 0) with why (static text) and close; otherwise serve it with
 * a handshake deadline of handshake_ms (0: none). */
int tw__conn_new(struct tw_srv *srv, int fd, const struct sockaddr *peer, int rejecting,
                 const char *why, uint64_t handshake_ms);
/* The handshake completed (READY): leaves the handshake budget and stops
 * the handshake deadline. */
void tw__conn_handshake_done(struct tw_srv_conn *c);
/* Connections in their handshake from the same address as peer. */
uint32_t tw__srv_handshakes_from(const struct tw_srv *srv, const struct sockaddr *peer);
/*
 * Deferred close (like libuv's uv_close): nothing below frees a transfer, a
 * tensor reference, the fabric peer or the connection under its caller. A
 * failing connection is only marked: it stops reading and stops accepting
 * frames to send at once (tw__conn_send then returns TW_ESHUTDOWN), and
 * tw__srv_settle() tears it down at one point of the loop, after the
 * current iteration. So a caller may keep using its transfer after any send
 * and need not re-check the connection's state for memory safety.
 */
/* Validates msg with the state machine, encodes and queues it. Returns 0 or
 * a negative code: the connection is closing (TW_ESHUTDOWN), or the frame
 * was refused (the server broke the sequence: the connection is failed
 * with ERROR(INTERNAL, 0)), or out of memory (the connection is marked for
 * an immediate close). */
int tw__conn_send(struct tw_srv_conn *c, struct tw_msg *m);
/* Queues DATA(offset, t->data[offset..offset+len)) without copying. */
int tw__conn_send_data(struct tw_srv_conn *c, uint64_t id, struct tw_tensor *t, uint64_t offset,
                       size_t len, int more);
/* ERROR(code, id, message) for one request (id != 0); logged at info. */
int tw__conn_send_error(struct tw_srv_conn *c, uint64_t id, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Connection-level ERROR(code, 0, message), then the graceful close. Every
 * fatal path the server takes while the socket still works goes through
 * here, so the peer always learns why (docs/protocol.md section 1). */
void tw__conn_fail(struct tw_srv_conn *c, uint32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Graceful close: marks the connection; the settle step abandons its
 * transfers, flushes the queue, shuts down the write side and waits briefly
 * for the peer's EOF. */
void tw__conn_close(struct tw_srv_conn *c, const char *reason);
/* GOODBYE(code), then TW_SRV_GOODBYE_WINDOW_MS in which requests that
 * crossed it are still answered (the state machine turns them into
 * ERROR(SHUTTING_DOWN, id)), then the graceful close. A peer that closes
 * first ends it sooner. */
void tw__conn_goodbye(struct tw_srv_conn *c, uint32_t code, const char *reason);
/* Immediate close (peer gone, fatal I/O error): marks the connection; the
 * settle step closes the socket and unlinks it, and the server frees it
 * after that (tw__conn_free). */
void tw__conn_destroy(struct tw_srv_conn *c, const char *reason);
/* The one place where connections are torn down: runs every teardown
 * marked since the last call (including ones a teardown itself marks).
 * Called by tw__srv_poll after each loop iteration and by tw__srv_destroy. */
void tw__srv_settle(struct tw_srv *srv);
void tw__conn_free(struct tw_srv_conn *c);
/* Ends every transfer with ERROR(code, id, why) (shutdown, idle timeout). */
void tw__conn_fail_transfers(struct tw_srv_conn *c, uint32_t code, const char *why);

struct tw_xfer *tw__conn_find_xfer(struct tw_srv_conn *c, uint64_t id);
void tw__conn_add_xfer(struct tw_srv_conn *c, struct tw_xfer *x);
void tw__conn_remove_xfer(struct tw_srv_conn *c, struct tw_xfer *x);
/* Called when a transfer ends: closes the connection if the peer said
 * GOODBYE and nothing is left in flight. */
void tw__conn_maybe_finish(struct tw_srv_conn *c);

/* ---- RDMA lifecycle (fabric_srv.c) ---- */

/* Opens the plane from cfg.fabric (a failure is logged, not fatal) and
 * watches its completion eventfd. Returns 0 or a negative code for a
 * failure of the loop itself. */
int tw__srv_fabric_init(struct tw_srv *srv);
/* Closes the plane (after every connection is gone) and drops the tensor
 * references of registrations it handed back. */
void tw__srv_fabric_destroy(struct tw_srv *srv);
/* Capability bits 2 and 3 this server announces. */
uint64_t tw__srv_fabric_caps(const struct tw_srv *srv);
/* RDMA_ENDPOINT OFFER: answers ACCEPT or DECLINE. */
void tw__srv_fabric_endpoint(struct tw_srv_conn *c, const struct tw_msg *m);
/* The connection is going away: its peer is removed (transfers in flight
 * fail and drain in the plane). */
void tw__srv_fabric_conn_gone(struct tw_srv_conn *c);

/* ---- GPUDirect (gdr_srv.c) ---- */

struct tw_gdr_table;
/* After the plane opened: admission of every served GPU on its providers,
 * logged. With --gpudirect require, fails (reason in err, naming the
 * failing predicate) unless some served GPU is admitted. */
int tw__srv_gdr_init(struct tw_srv *srv, char *err, size_t errlen);
void tw__srv_gdr_destroy(struct tw_srv *srv);
/* 1 when GPU `ordinal` is admitted for GPUDirect on c's rail. */
int tw__srv_gdr_admits(const struct tw_srv_conn *c, int ordinal);
/* Why GPU `ordinal` is not admitted on c's rail, for an error message:
 * "cuda:0 on tcp;ofi_rxm: provider_rdma: the provider moves data through
 * kernel sockets: ...". Writes into buf and returns it. */
char *tw__srv_gdr_why_not(const struct tw_srv_conn *c, int ordinal, char *buf, size_t len);
/* The RDMA size threshold for op on a connection on a provider of kind
 * prov: --rdma-min-bytes when set; else for puts
 * TW_DEFAULT_RDMA_MIN_BYTES_PUT on every provider (the client's own
 * threshold decides above it: it knows the put's size, memory and depth),
 * for gets TW_DEFAULT_RDMA_MIN_BYTES_SHM on shm and
 * TW_DEFAULT_RDMA_MIN_BYTES elsewhere (handlers.c). */
uint64_t tw__srv_rdma_min_bytes(const struct tw_srv *srv, enum tw_path_provider prov,
                                enum tw_path_op op);
/* The verdict for tensor t's memory on c's rail: one table cell. */
enum tw_path_gdr tw__srv_gdr_verdict(const struct tw_srv_conn *c, const struct tw_tensor *t);
/* Makes writes into GPU tensor t visible to later GPU work: over shm, waits
 * for the CUDA IPC copies shm ran here (tw__cuda_settle_writes); then
 * cuFlushGPUDirectRDMAWrites where the GPU says NIC writes need it; 0 for
 * host tensors. */
int tw__srv_gdr_flush(const struct tw_srv_conn *c, const struct tw_tensor *t, char *err,
                      size_t errlen);
/* CRC32C of GPU tensor t's bytes, read back to the host in pieces. */
int tw__srv_gdr_crc(const struct tw_srv *srv, const struct tw_tensor *t, uint32_t *crc, char *err,
                    size_t errlen);

/* ---- staging planes (xfer_staged.c) ---- */

/* Shutdown, before the store frees its memory: unpins the host copies kept
 * pinned (srv->stage_pins) and frees the cache. */
void tw__srv_stage_destroy(struct tw_srv *srv);
/* Waits for every copy queued on the GPUs in c->dev_fence (its DATA
 * frames' and its queued commits'): 0, or a negative code when one failed
 * (the frames hold wrong bytes: the caller closes the connection), with
 * the reason in err. */
int tw__srv_stage_fence(struct tw_srv_conn *c, char *err, size_t errlen);
/* Whether the copy filling frame ch (a DATA frame, or an RDMA_REGISTER
 * whose source it fills) is complete: 1 yes (ch needs no more looking
 * at), 0 not yet, negative when it failed (reason in err; the caller
 * closes the connection). Never blocks. */
int tw__srv_stage_ready(struct tw_srv_conn *c, struct tw_out_chunk *ch, char *err, size_t errlen);
/* Whether the queued copy of commit x (x->in_commits: x->commit_gpu,
 * commit_ticket) is done: 1 yes, 0 not yet (only when !wait; the call
 * hands queued copies to the driver), or a negative code with "copying it
 * to cuda:N failed: ..." in err. wait blocks until done. */
int tw__srv_stage_commit_wait(struct tw_xfer *x, int wait, char *err, size_t errlen);
/* A progressive get's source (x->progressive with copies, xfer_staged.c):
 * waits until its last copy to the host is done. 0 or a negative code with
 * the reason in err; 0 at once when nothing is in flight. */
int tw__srv_stage_prog_wait(struct tw_xfer *x, char *err, size_t errlen);
/* Bit 5: queues RDMA_AVAILABLE(ready) for get x, to be sent once the copy
 * with `ticket` on store GPU `gpu` is done (gpu -1: at once). 0 or the
 * negative code of tw__conn_send. */
int tw__srv_rdma_announce(struct tw_xfer *x, uint64_t ready, int gpu, uint64_t ticket);
/* Pinned host bytes kept now and pins held by transfers (STATS). */
void tw__srv_stage_stats(struct tw_srv *srv, uint64_t *pinned_bytes, uint64_t *pins_in_use);
/* A completion of a pipelined pull put's read (cookie with bit 0 set, as
 * handed to tw__fabric_xfer_submit by xfer_staged.c). Loop thread. */
void tw__srv_staged_on_completion(struct tw_srv *srv, const struct tw_fabric_completion *fc);

/* ---- per-transfer RDMA plane (xfer_rdma.c), for fabric_srv.c ---- */

/* One completion popped from the plane: continues or ends its transfer, or
 * finishes the cleanup of a transfer that already ended. Loop thread. */
void tw__srv_rdma_on_completion(struct tw_srv *srv, const struct tw_fabric_completion *fc);
/* Frees the transfer states whose busy registrations went idle (srv->idle_efd
 * became readable). Loop thread. */
void tw__srv_rdma_drain_idle(struct tw_srv *srv);
/* Registers the source of every get of c that waits for its key (read
 * while c->keys_defer was set) and sends their RDMA_REGISTERs: the gets of
 * tensors that continue each other in the store's slab share one key. */
void tw__srv_rdma_key_pending(struct tw_srv_conn *c);
/* Whether get x (on the RDMA plane, started) waits for that keying: its
 * RDMA_REGISTER is not queued yet. */
int tw__srv_rdma_key_waits(const struct tw_xfer *x);
/* Shutdown, plane still open: drops the cache handles every live transfer
 * state holds, so the cache can be destroyed before the plane. */
void tw__srv_rdma_drop_handles(struct tw_srv *srv);
/* Shutdown, plane closed: frees every transfer state left (and the tensor
 * references they hold). */
void tw__srv_rdma_free_all(struct tw_srv *srv);

/* ---- handlers (handlers.c) ---- */

/* Acts on one decoded, state-machine-approved frame other than DATA. */
void tw__handle_msg(struct tw_srv_conn *c, const struct tw_msg *m);

#endif
