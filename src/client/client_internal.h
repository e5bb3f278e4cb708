/*
 * libtensorwire internals: the connection (conn.c), the request engine that
 * pipelines requests on it (engine.c) and the data planes that move tensor
 * bytes for one transfer (dp_inline.c, dp_rdma.c), chosen per request by the
 * transfer-path decision shared with the server (proto/path.h).
 *
 * Ownership: struct tw_client owns its socket, its receive and send buffers
 * and its state machine. A struct tw__creq belongs to the caller of
 * tw__client_engine_run (usually on its stack or in one calloc'd array) and points at
 * caller memory (names, tensor buffers) only for the duration of that call.
 * Nothing here is thread-safe: one handle, one thread at a time.
 */
#ifndef TW_CLIENT_INTERNAL_H
#define TW_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "common/clock.h"
#include "fabric/fabric.h"
#include "mem/memkind.h"
#include "proto/path.h"
#include "proto/proto.h"
#include "proto/sm.h"
#include "tensorwire/client.h"

#define TW__CLIENT_ERRMSG_LEN 1280
#define TW__CLIENT_RX_INITIAL (256u * 1024u)
/* DATA payloads at least this large are received straight into the
 * destination; smaller ones are copied out of the receive buffer, which costs
 * less than the extra system calls. */
#define TW__CLIENT_DIRECT_RECV_MIN (64u * 1024u)
#define TW__RUN_SYNC SIZE_MAX
/* The batch window with max_inflight 0 (engine.c batch_window). Measured on
 * the H200 host, 40,960 x 32 KiB (bench_kv --inflight): over shm RDMA,
 * 256 in flight moved 8-9% more than 64 (put 5.48-5.60 against 5.06-5.19
 * GB/s, get 6.13-6.26 against 5.67-5.75); inline, 256 moved 8-18% less
 * (get 4.84-5.14 against 5.37-6.14 GB/s). Over tcp RDMA gets moved 1-12%
 * more with 256 in four pairs of four (3.07 / 3.08 against 2.81 / 2.73
 * GB/s); puts moved less with 256 (2.16 / 2.57 against 2.44 / 2.65) until
 * the request table's removals stopped scanning the run of ids in flight
 * (proto/sm.c, Robin Hood order): since then 2.90 / 2.84 against 2.76 /
 * 2.59 on an H100 host and 2.24-2.80 against 1.86-2.51 on the 2-core VM.
 * Device blocks of 32 KiB staged over RDMA (H100 host, bench_stage_e2e,
 * three pairs): over shm gets 6481-7936 MiB/s with 256 against 5064-5815
 * with 64, puts of new names 4221-5434 against 3189-3734; over tcp gets
 * 2863-3550 against 2634-2823, puts 1968-3072 against 1991-2323
 * (docs/performance.md). */
#define TW__WINDOW_NARROW 64u
#define TW__WINDOW_WIDE 256u
/* Inline puts up to this size send their DATA right behind TENSOR_PUT when
 * bit 4 (EAGER_PUT) was negotiated: no PUT_ACCEPT round trip. Larger ones
 * wait, so a refused put (capacity, device) does not cost its bytes on
 * the wire. */
#define TW__EAGER_PUT_MAX (1u << 20)
#define TW__CLIENT_PAGE 4096u      /* tw_get_alloc alignment */
#define TW__CLIENT_HUGE (2u << 20) /* huge-page alignment from here */

/* Host memory the library hands out (tw_get_alloc, tw_device_alloc("cpu"),
 * freed with free()): page aligned; from TW__CLIENT_HUGE bytes up,
 * aligned to and advised for huge pages (device.c). 0 or -ENOMEM. */
int tw__client_host_alloc(size_t len, void **out);

enum tw__op {
    TW__OP_GET = 1,
    TW__OP_PUT,
    TW__OP_STAT,
    TW__OP_DELETE,
    TW__OP_LIST,
    TW__OP_PING,
    TW__OP_STATS
};

struct tw__creq;
struct tw_client;
struct tw__rdma_req;
struct tw_fabric_mrcache;
struct tw__client_gdr_fake;

/*
 * A data plane moves the bytes of one transfer once the control plane has
 * agreed on it (TENSOR_INFO for a get, PUT_ACCEPT for a put). The engine picks
 * one per request (tw__client_pick_data_plane, from tw__path_decide) and asks
 * the server for it; the server's answer (data_plane field) must match
 * ops->wire_plane, or be the inline plane, which the client then follows.
 * A plane keeps its per-request state behind r->dp_state: it allocates it in
 * get_start / put_start and frees it in release.
 *
 *   get_start   TENSOR_INFO arrived and the destination is big enough:
 *               prepare to receive byte_length bytes into r->buf.
 *   get_data    a DATA frame for r: header decoded, 8-byte offset prefix
 *               consumed; receive n bytes at r->buf + offset (the plane reads
 *               them from the connection). NULL: DATA is a protocol error.
 *   put_prepare optional: called before TENSOR_PUT is built (before the CRC
 *               of r->buf is computed); may point r->buf at a host copy.
 *   put_start   PUT_ACCEPT arrived: send r->len bytes from r->buf; on the RDMA
 *               plane with bit 6 (EAGER_RDMA_PUT) right after TENSOR_PUT
 *               instead (its RDMA_REGISTER), before any PUT_ACCEPT.
 *   on_message  RDMA_REGISTER / RDMA_READY / RDMA_DONE for r (NULL: error).
 *   release     r ended (finished, failed or abandoned): free r->dp_state and
 *               whatever it holds (registrations); NULL when the plane keeps
 *               no state. Called once per request, also when dp_state is
 *               NULL.
 * All but release return 0 or a negative code; a negative code from a plane
 * is connection-fatal unless the plane finished the request itself.
 */
struct tw__client_dp_ops {
    const char *name;   /* "inline tcp" */
    uint8_t wire_plane; /* TW_DP_INLINE, TW_DP_RDMA */
    uint8_t xfer_flags; /* TENSOR_REQUEST/PUT flags to ask for it */
    int (*get_start)(struct tw_client *c, struct tw__creq *r);
    int (*get_data)(struct tw_client *c, struct tw__creq *r, uint64_t offset, uint32_t n, int more);
    int (*put_prepare)(struct tw_client *c, struct tw__creq *r);
    int (*put_start)(struct tw_client *c, struct tw__creq *r);
    int (*on_message)(struct tw_client *c, struct tw__creq *r, const struct tw_msg *msg);
    void (*release)(struct tw_client *c, struct tw__creq *r);
};

extern const struct tw__client_dp_ops tw__client_dp_inline;
extern const struct tw__client_dp_ops tw__client_dp_rdma;
/* GPU memory through a host buffer, around the inline / RDMA plane
 * (dp_staging.c). */
extern const struct tw__client_dp_ops *const tw__client_dp_inline_staged;
extern const struct tw__client_dp_ops *const tw__client_dp_rdma_staged;

/* Whether get r, about to be requested on the RDMA plane, may carry
 * ATTACH_READ (docs/protocol.md §4.5, bit 7): a pull into host memory here
 * (the caller's, or the library's for a get that stages into GPU memory),
 * the bit negotiated, and our reads from the server's process going by
 * cross-memory attach (dp_rdma.c). */
int tw__client_rdma_attach_read(struct tw_client *c, const struct tw__creq *r);

/* Where a listing or stats reply is accumulated (tw_list / tw_stats). */
struct tw__collect {
    uint8_t *names; /* all NUL-terminated names/keys, back to back */
    size_t names_len, names_cap;
    void *entries; /* struct tw_tensor_info[] or struct tw_stat_entry[] */
    size_t count, cap;
    size_t *name_off; /* offset of entry i's name in names */
};

struct tw__creq {
    enum tw__op op;
    uint64_t id;      /* 0 until sent */
    const char *name; /* caller's, NUL-terminated; NULL for PING/STATS */
    size_t name_len;
    uint8_t *buf;                /* get: destination; put: source */
    size_t len;                  /* get: capacity; put: bytes */
    struct tw_tensor_desc *desc; /* put: input; get/stat: output (may be NULL) */
    const struct tw__client_dp_ops *dp;
    struct tw_path path; /* get/put: tw__path_decide's answer, then what happened */
    void *dp_state;      /* owned by dp (see struct tw__client_dp_ops) */
    /* What r->buf is (classified when the request starts; host for a get
     * into a library allocation) and the staging plane's state around the
     * inner plane (owned by dp_staging.c, freed by its release). */
    const struct tw_memkind_ops *mem_ops;
    struct tw_mem_attr mem;
    void *stage;
    uint64_t expect;   /* get: byte_length announced */
    uint64_t received; /* get: bytes so far; put: bytes queued */
    uint32_t crc, crc_expected;
    int check_crc;
    int crc_done; /* put: r->crc is the bytes' CRC32C already (put_prepare) */
    int alloc;    /* get: allocate buf (page-aligned) at TENSOR_INFO */
    int started, finished;
    int eager;     /* put: its DATA was queued right after TENSOR_PUT (bit 4) */
    int eager_reg; /* put: its RDMA_REGISTER was queued right after TENSOR_PUT (bit 6) */
    int attach;    /* get: asked with ATTACH_READ (bit 7): read by cross-memory attach only */
    int status;
    uint8_t ping[TW_PING_PAYLOAD_LEN];
    struct tw__collect *collect; /* LIST, STATS */
    size_t index;                /* position in the run, for error reporting */
    uint64_t t_start, t_end;     /* CLOCK_MONOTONIC ns: sent, finished */
};

/* Where the connection's RDMA endpoint exchange ended (tw_client_fabric_status
 * makes the text). */
enum tw__client_fabric {
    TW__FABRIC_NOT_REQUESTED = 0, /* --fabric none */
    TW__FABRIC_SERVER_HAS_NONE,   /* the server did not announce bit 2 */
    TW__FABRIC_OPEN_FAILED,       /* our plane did not open (detail) */
    TW__FABRIC_DECLINED,          /* the server's DECLINE (detail: its reason) */
    TW__FABRIC_INSERT_FAILED,     /* the server's address was refused (detail) */
    TW__FABRIC_ACCEPTED           /* fab and fpeer are usable */
};

/* One segment of the send queue: bytes in the send buffer (ptr NULL, at
 * offset off) or caller memory (ptr). */
struct tw__txseg {
    const uint8_t *ptr; /* NULL: bytes [off, off + len) of its queue's buf */
    size_t off;
    size_t len;
};

/* One send queue: encoded frames in buf, described in order by segs. */
struct tw__txq {
    uint8_t *buf;
    size_t cap, len;
    struct tw__txseg *segs;
    size_t nsegs, segcap;
};
enum { TW__TXQ_CTL = 0, TW__TXQ_DATA = 1 };

/* Gets whose copies to the GPU wait for a fence, at most (a fence is
 * taken when they reach it; dp_staging.c stage_queue). */
#define TW__STAGE_PEND 256
/* Groups of those copies with an event recorded behind them (dp_staging.c
 * stage_reclaim). */
#define TW__STAGE_GROUPS 32
/* Size classes of kept staging buffers: 32 KiB to 8 MiB by powers of two
 * (dp_staging.c buf_get). */
#define TW__STAGE_CLASSES 9
/* Small puts from GPU memory copied to host memory ahead, at most. */
#define TW__STAGE_AHEAD 32

struct tw_client {
    int fd;
    int broken;  /* connection gone: every call fails -ENOTCONN */
    int closing; /* GOODBYE received: start nothing new */
    struct tw_sm sm;
    int request_timeout_ms;
    uint32_t want_inflight;
    /* max_inflight 0 (default): the batch window is chosen per run from the
     * transfers it has finished (engine.c batch_window). */
    int auto_window;
    int checksum; /* option and capability both on */
    uint64_t next_id;

    /* Receive buffer: bytes [rpos, rlen) are unread. rconsume is the size of
     * the frame handed out by tw__client_conn_next, consumed on the next call. */
    uint8_t *rbuf;
    size_t rcap, rpos, rlen, rconsume;

    /* Send queues (conn.c): tx[TW__TXQ_CTL] every frame but DATA and
     * GOODBYE, tx[TW__TXQ_DATA] the DATA frames (header encoded, bytes in
     * place) and GOODBYE (nothing may follow it). A flush sends the first,
     * then the second: the frames that open
     * requests go ahead of the payloads queued beside them, so that the
     * server knows where the next payloads go before they arrive and can
     * read several in one call (server/conn.c, ahead_plan). DATA frames
     * keep their order among themselves; each still follows the
     * TENSOR_PUT of its request. */
    struct tw__txq tx[2];

    /* The run in progress (engine.c). Ids are handed out in send order from
     * run_base; run_map[id - run_base] is the request's index in run, or
     * TW__RUN_SYNC for a PING sent after a cancel. */
    size_t *run_map;
    /* The batch calls' per-item state (api.c) and the run's id map, kept
     * from one call for the next (tw__client_scratch; a block other than
     * these is the call's own, freed at its end): allocated per call,
     * a threaded client's large blocks came back from the kernel each time
     * (16 threads of 20,000 4 KiB gets: 1,250 minor faults per thread in
     * each of its first two calls, 156 in each later one). Owned by the
     * handle, freed by tw_close; capacities in elements. */
    struct tw__creq *kept_reqs;
    size_t kept_reqs_cap;
    size_t *kept_map;
    size_t kept_map_cap;
    struct tw__creq *run;
    size_t run_n;
    size_t run_active; /* started and not finished, plus sync PINGs */
    /* Gets and puts of the run finished, by plane: RDMA (direct from or
     * into the caller's host memory, or staged for its GPU memory; not
     * GPUDirect) and any other (batch_window). */
    size_t run_done_rdma, run_done_other;
    size_t run_peak;     /* most requests in flight at once in the last run (tests) */
    size_t run_eager;    /* its puts registered behind their TENSOR_PUT (bit 6; tests) */
    size_t sync_pending; /* PINGs sent after cancels, not yet answered */
    uint64_t run_base;
    size_t err_index; /* index of the lowest failed request in the run */
    /* The CUDA allocation an item of the run was last found in, and its
     * memory kind's ops (NULL: none yet): tw__client_classify. */
    struct tw_mem_attr run_alloc;
    const struct tw_memkind_ops *run_alloc_ops;

    char errmsg[TW__CLIENT_ERRMSG_LEN];

    /* RDMA data plane (dp_rdma.c): opened after the handshake when both
     * sides announced bit 2 and the server ACCEPTed our OFFER. */
    struct tw_fabric *fab;
    struct tw_fabric_peer *fpeer;
    /* The registration of the run of adjacent put sources that the last
     * RDMA put opened (dp_rdma.c put_span); NULL when none is open. */
    struct tw__put_span *put_span;
    uint64_t put_spans, put_span_users; /* spans registered, puts that used one (tests) */
    unsigned put_spans_live;            /* spans registered and not yet revoked */
    /* Requests of the run whose fabric transfer the plane holds, and those
     * whose completion was popped but not yet handled, in order (dp_rdma.c;
     * the engine waits on the plane's event fd while any is in flight). */
    size_t rdma_inflight;
    /* The CPUs this process may run on, as of connect (sched_getaffinity):
     * with one, the engine never copies reads beside the mover. */
    int cpus;
    struct tw__rdma_req *rdma_ready;
    /* Pull puts whose RDMA_DONE we wait for while the server reads our
     * memory: their reads count as progress in the socket waits (conn.c
     * wait_fd, fabric.h "Target-side activity"). */
    unsigned target_watch;
    int want_rdma;           /* the fabric option named providers (not "none") */
    int push_policy;         /* enum tw_push_policy */
    uint64_t rdma_min_bytes; /* puts below this go inline (option; may be
                                TW_RDMA_MIN_BYTES_AUTO: tw__client_rdma_min_bytes) */
    enum tw__client_fabric fabric;
    char fabric_detail[320]; /* error text or the server's reason, for the status */
    /* Path of the last finished get/put (have_last_path: there was one). */
    struct tw_path last_path;
    int have_last_path;
    /* Text handed out by tw_client_fabric_status / tw_client_data_plane,
     * made from the codes above when asked. */
    char fabric_text[384];
    char plane_text[384];
    /* Staging (dp_staging.c): one host buffer above the largest size class
     * kept between requests, so a repeated large transfer of GPU memory
     * neither faults in nor pins fresh pages. NULL when none is kept. */
    struct tw__stage_buf *stage_spare;
    /* Buffers of the size classes (pinned once) kept for batches of small
     * and medium transfers: nstage_kept[k] idle in class k, a list per
     * class (through their `next`) of those not in a slab; their idle bytes
     * are bounded (dp_staging.c). */
    struct tw__stage_buf *stage_kept[TW__STAGE_CLASSES];
    unsigned nstage_kept[TW__STAGE_CLASSES];
    /* The slabs the small classes' buffers are carved from (dp_staging.c
     * struct tw__stage_slab: their idle buffers are counted in nstage_kept
     * but on no list), freed whole by tw__client_stage_trim; each class's
     * next-fit cursor (the slab and buffer index to look from). */
    struct tw__stage_slab *stage_slabs;
    size_t stage_small_idle; /* bound on their idle bytes; 0: STAGE_SMALL_IDLE (tests) */
    size_t stage_pool_chunk; /* the pipeline pool's chunk (0: not read yet) */
    struct tw__stage_slab *stage_cur[TW__STAGE_CLASSES];
    unsigned stage_cur_i[TW__STAGE_CLASSES];
    /* Copies saved by joining adjacent small gets' copies to the GPU
     * (stage_submit) and small puts' copies from it (put_ahead), since the
     * handle was made (tests). */
    uint64_t stage_joined_gets, stage_joined_puts;
    /* Chunk reads of pipelined pulls started while the same pull's
     * previous read was still in flight (dp_staging.c piped_pump), since
     * the handle was made (tests). */
    uint64_t stage_pull_overlaps;
    /* Gets into a size class's buffer whose copy to the GPU is queued on
     * the device's fence stream, not yet waited for
     * (tw__client_stage_fence): the buffer and the request (index in
     * c->run) of each. At most TW__STAGE_PEND. Their copies reach
     * the stream in groups (dp_staging.c stage_submit: one batched driver
     * call per group), each followed by an event where one could be
     * recorded: stage_grp, oldest first from stage_grp_head, numbered
     * 1, 2, ... (stage_grp_seq: the last one's); a buffer whose group's
     * event was reached is given back without waiting for the rest of the
     * stream. Events are the slots' own, made on first use, reused. */
    struct tw__stage_pending {
        struct tw__stage_buf *buf;
        size_t index;
        int device;
        uintptr_t dst; /* the copy: buf's first len bytes to dst */
        size_t len;
        int queued;     /* handed to the stream (0: waits for stage_submit) */
        uint64_t group; /* its group's number, 0: no event follows it */
    } stage_pend[TW__STAGE_PEND];
    unsigned nstage_pend;
    struct tw__stage_group {
        void *event; /* of device ev_dev (NULL until first used) */
        int ev_dev;
        uint64_t seq;
    } stage_grp[TW__STAGE_GROUPS];
    unsigned stage_grp_head, nstage_grp;
    uint64_t stage_grp_seq;
    unsigned nstage_unqueued;    /* of them, not handed to the stream yet */
    size_t stage_unqueued_bytes; /* and their bytes */
    /* Small puts of the run from GPU memory whose bytes were copied into a
     * small buffer ahead, by a group (dp_staging.c put_ahead), with the
     * request's index in c->run; given back when the run ends
     * (tw__client_stage_ahead_drop). The group's stream and device. */
    struct tw__stage_ahead {
        size_t index;
        struct tw__stage_buf *buf;
    } stage_ahead[TW__STAGE_AHEAD];
    unsigned nstage_ahead;
    void *stage_ahead_stream;
    int stage_ahead_dev;
    const struct tw_memkind_async_ops *stage_ahead_as;
    void **stage_fence_stream; /* by device ordinal (TW_CUDA_MAX_DEVICES), made on first use */
    const struct tw_memkind_async_ops *stage_fence_as; /* whose streams they are */
    /* The pinned chunk pool of RDMA pull gets into GPU memory (made on the
     * first one, mem/staging.h) and its one registration on fpeer (made
     * once; forgotten when the plane closes, which frees it). */
    struct tw_staging_pool *stage_pool;
    struct tw_fabric_mr *stage_pool_mr;
    /* Counts the RDMA plane's closes (tw__client_rdma_close): registrations
     * kept on library buffers (dp_staging.c tw__client_stage_lend_mr) of an
     * earlier value were freed with that plane. */
    unsigned rdma_gen;
    /* Set by the plane (any thread) once a pool registration given up
     * with reads still in the provider is idle (dp_staging.c). */
    int stage_pool_idle;
    /* Memory kinds that classify buffers, indexed by enum tw_memkind; NULL
     * entries are the built-in ones (tests put a fake CUDA kind here). */
    const struct tw_memkind_ops *memkinds[TW_MEMKIND_MAX];
    /* GPUDirect (gdr_client.c): the options, and the verdict table of this
     * process's GPUs on fpeer's provider, built on first use (NULL before). */
    int gdr_mode;         /* enum tw_gpudirect_mode */
    int gdr_max_distance; /* enum tw_pcie_dist */
    struct tw_gdr_table *gdr;
    int gdr_row;  /* fpeer's provider in gdr, -1 when none */
    int fab_hmem; /* the plane was opened with FI_HMEM (CUDA registrations possible) */
    /* Registration cache of the plane for this process's GPU memory (made
     * on the first gdr transfer, destroyed with the plane). */
    struct tw_fabric_mrcache *mrc;
    /* Why the last refused verdict on GPU memory was a refusal, for
     * tw_client_data_plane ("" before the first). */
    char gdr_why[256];
    /* Tests only (NULL otherwise): stands in for the admission table and
     * the CUDA flush, so CI runs the gdr rows with host memory behind a
     * fake CUDA memory kind. */
    const struct tw__client_gdr_fake *gdr_fake;
};

/* A test's stand-in for GPUDirect admission (c->gdr_fake). */
struct tw__client_gdr_fake {
    int admitted;     /* verdict for every GPU buffer */
    int flush_needed; /* call flush() before a get into GPU memory completes */
    /* Called instead of cuFlushGPUDirectRDMAWrites; 0 or a negative code. */
    int (*flush)(void *arg, int device);
    void *arg;
    /* The fake device memory is host memory: register it without
     * FI_HMEM_CUDA (through the same cache and code path). */
    int register_as_host;
};

/* --- dp_staging.c ------------------------------------------------------ */

/* Frees the kept staging buffer (tw_close). */
void tw__client_stage_free(struct tw_client *c);
/* Waits for the copies to the GPU queued for small gets of this run
 * (c->run): a get whose copy failed gets that status and message. Called
 * before tw__client_engine_run returns, so every call returns with its
 * bytes in place. Returns 0 or the first failure. */
int tw__client_stage_fence(struct tw_client *c);
/* Gives back the buffers of puts copied ahead and not started (the run
 * ended, or failed). Called where the run ends, with the fence. */
void tw__client_stage_ahead_drop(struct tw_client *c);
/* Frees whole slabs of idle small-class buffers until those idle stay
 * within their bound (dp_staging.c STAGE_SMALL_IDLE). A run takes as many
 * as it has requests in flight and copies pending, so it is called where a
 * run ends, after the fence and tw__client_stage_ahead_drop. */
void tw__client_stage_trim(struct tw_client *c);
/* A staged put's run of adjacent staging buffers (dp_staging.c): the end
 * of the bytes of r and of the puts after it in the call whose buffers
 * (taken, or copied ahead for them) continue r's in its slab, at most
 * max bytes and items puts from r->buf; r->buf + r->len when none does. */
const uint8_t *tw__client_stage_span_end(const struct tw_client *c, const struct tw__creq *r,
                                         size_t max, unsigned items);
/* Closes the run's open span of put sources (dp_rdma.c): at the end of a
 * run (before the staging slabs may be freed) and before the plane
 * closes. */
void tw__client_put_span_close(struct tw_client *c);

/* A staged pull get's host buffer (a size class's or the spare, not the
 * pipeline's pool) registered on the plane for reads into it
 * (TW_FABRIC_LOCAL_READ, the whole buffer), made on the buffer's first such
 * get and kept with the buffer, so a batch of small staged gets registers
 * and revokes nothing per get. The registration is lent: the caller neither
 * deregisters nor releases it (a transfer holds its own reference while it
 * runs). NULL when r reads into no such buffer, there is no plane, or the
 * registration failed: the caller registers r->buf itself. */
struct tw_fabric_mr *tw__client_stage_lend_mr(struct tw_client *c, struct tw__creq *r);
/* A lent registration whose reads were left in the provider (a cancelled
 * transfer, buffer_busy): the buffer gives it up and the caller owns it
 * (releases it with tw__fabric_mr_release and waits for it to go idle,
 * as for its own); the buffer registers anew when next used. NULL when the
 * buffer holds none. */
struct tw_fabric_mr *tw__client_stage_take_mr(struct tw_client *c, struct tw__creq *r);

/* --- conn.c ------------------------------------------------------------ */

/* printf into c->errmsg (replaces it). */
void tw__client_seterr(struct tw_client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Opens a TCP connection to "HOST:PORT" within timeout_ms (<= 0: forever).
 * Returns the connected, non-blocking, TCP_NODELAY socket or a negative code;
 * detail in c->errmsg. */
int tw__client_conn_open(struct tw_client *c, const char *addr, int timeout_ms, int sockbuf);

/* --- options.c --------------------------------------------------------- */

/* The caller's options (NULL: defaults) as this library's struct: fields
 * outside in->size get their defaults. Returns 0, or TW_EINVAL (size below
 * sizeof(size_t), or non-zero bytes in a newer header's unknown tail) with a
 * sentence in err. Reads no byte of *in beyond in->size. */
int tw__client_options_resolve(const struct tw_client_options *in, struct tw_client_options *out,
                               char *err, size_t errlen);

/* Queues msg (validated by the codec and the state machine). For DATA with
 * msg->u.data.bytes.ptr set, the bytes are sent from that memory without a
 * copy and must stay valid until tw__client_conn_flush returns. */
int tw__client_conn_queue(struct tw_client *c, const struct tw_msg *msg);
/* Sends everything queued: the frames of the control queue, then the DATA
 * frames (struct tw_client, tx). */
int tw__client_conn_flush(struct tw_client *c, int timeout_ms);
/* Drops everything queued, sending nothing. */
void tw__client_conn_discard(struct tw_client *c);

/* Reads the next frame. Control frames: returns 1 and *msg views the receive
 * buffer until the next call. DATA frames are given to on_data (engine.c) and
 * the call returns 0. Returns a negative code on failure (connection-fatal:
 * c->broken is set and c->errmsg says why). */
int tw__client_conn_next(struct tw_client *c, struct tw_msg *msg, int timeout_ms);

/* Receives exactly n bytes of the current DATA payload into dst (NULL:
 * discard them). For the data planes. */
int tw__client_conn_recv_payload(struct tw_client *c, uint8_t *dst, size_t n, int timeout_ms);

/* Marks the connection dead after a fatal verdict: best-effort
 * ERROR(wire_code, 0) when send_error, then shutdown. Returns err. */
int tw__client_conn_fail(struct tw_client *c, int err, int send_error);
/* After the server closed under a send (EPIPE, ECONNRESET): reads what it
 * sent before closing, without waiting, and looks for its reason: a
 * connection-level ERROR (returns its code), or GOODBYE / ERROR(SHUTTING_DOWN)
 * (returns TW_ESHUTDOWN and sets c->closing). c->errmsg gets the server's
 * words. Returns 0 when it said nothing (or the bytes are not at a frame
 * boundary). Works on a broken connection; consumes the receive buffer. */
int tw__client_conn_last_words(struct tw_client *c);

/* --- engine.c ---------------------------------------------------------- */

/* The memory kind of [addr, addr+len) (tw__memkind_classify, AUTO, with
 * c->memkinds); during a run, a range inside the CUDA allocation found for
 * an earlier item reuses that answer. 0, or a negative code with the
 * reason in err (may be NULL): TW_EINVAL for a range that starts in a CUDA
 * allocation and leaves it. */
int tw__client_classify(struct tw_client *c, uintptr_t addr, size_t len,
                        const struct tw_memkind_ops **ops, struct tw_mem_attr *attr, char *err,
                        size_t errlen);

/* Runs reqs[0..n) to completion, keeping up to the negotiated max_inflight
 * in flight. Every request gets a status. Returns 0 or a connection-level
 * error (then every unfinished request has that status too). */
int tw__client_engine_run(struct tw_client *c, struct tw__creq *reqs, size_t n);
/* The most items whose per-item state a handle keeps between calls
 * (about 260 bytes each: 17 MB at most); larger batches allocate it per
 * call. */
#define TW__CLIENT_KEEP_ITEMS 65536u
/* n elements of elem bytes: the kept block *keep (capacity *cap elements,
 * grown to n when n <= limit), or else a fresh allocation (not *keep)
 * the caller frees. Not zeroed. NULL when out of memory. */
void *tw__client_scratch(void **keep, size_t *cap, size_t n, size_t elem, size_t limit);
/* Called by tw__client_conn_next for each DATA frame. */
int tw__client_engine_on_data(struct tw_client *c, const struct tw_msg *msg);
/* Ends request r with status (records the error message for the run). */
void tw__client_engine_finish(struct tw_client *c, struct tw__creq *r, int status, const char *msg,
                              size_t msg_len);
/* --- dp_rdma.c --------------------------------------------------------- */

/* After the handshake: opens the plane (provider list, "auto") when the
 * server announced bit 2, sends RDMA_ENDPOINT OFFER and waits for the answer.
 * Any failure or DECLINE leaves the connection inline-only with the reason in
 * c->fabric and c->fabric_detail; only a connection failure is returned
 * (negative). */
int tw__client_rdma_setup(struct tw_client *c, const char *provider, int timeout_ms);

/* Pops the plane's finished transfers and ends their requests (RDMA_DONE
 * queued, bytes checked). Cheap when nothing finished (no system call).
 * Returns 0 or a connection-fatal code. */
int tw__client_rdma_reap(struct tw_client *c);

struct tw_gdr_table;

/* --- gdr_client.c --------------------------------------------------------- */

/* After tw__client_rdma_setup: takes the gpudirect options; with require,
 * fails (TW_EDEVICE, the failing predicate in c->errmsg) unless a GPU of
 * this process is admitted on the accepted endpoint's provider. */
int tw__client_gdr_setup(struct tw_client *c, const struct tw_client_options *o);
void tw__client_gdr_free(struct tw_client *c);
/* GPUDirect verdict for r's buffer on this connection (the `gdr` input of
 * tw__path_decide): NOT_EVALUATED for host memory or without an endpoint;
 * the first GPU buffer builds the verdict table (facts gathered once per
 * process). A refusal leaves its reason in c->gdr_why. */
enum tw_path_gdr tw__client_gdr_verdict(struct tw_client *c, const struct tw__creq *r);
/* Before a get into GPU memory that the plane wrote (gdr) is reported
 * complete: cuFlushGPUDirectRDMAWrites on its device where the GPU needs it
 * (docs/protocol.md §10). 0, or a negative code with the reason in err. */
int tw__client_gdr_flush(struct tw_client *c, const struct tw__creq *r, char *err, size_t errlen);
/* The memory kind to register r's GPU buffer as (TW_MEMKIND_CUDA; host for
 * a test's fake device memory). */
enum tw_memkind tw__client_gdr_hint(const struct tw_client *c);
/* The plane's registration cache, made on first use. 0 or -ENOMEM. */
int tw__client_gdr_cache(struct tw_client *c);
/* Closes the plane (tw_close). */
void tw__client_rdma_close(struct tw_client *c);

/* Chooses the path of get or put r (tw__path_decide over this connection)
 * and stores it in r->path; returns the plane to ask for, NULL when no
 * plane can move it. */
const struct tw__client_dp_ops *tw__client_pick_data_plane(struct tw_client *c, struct tw__creq *r);
/* c's put threshold: the option, or for TW_RDMA_MIN_BYTES_AUTO the default of
 * the connection's provider (engine.c). */
uint64_t tw__client_rdma_min_bytes(const tw_client *c);

#endif
