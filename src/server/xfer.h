/*
 * One tensor transfer (a GET the server sends, or a PUT it receives) and the
 * data-plane interface that moves its bytes.
 *
 * The session layer (conn.c, handlers.c) owns the protocol: it opens a
 * transfer after TENSOR_INFO / PUT_ACCEPT, feeds it the frames of its request
 * id, and ends it. How bytes move is the data plane's business, behind
 * struct tw_dp_ops: today the inline plane (DATA frames on the control
 * connection, xfer_inline.c) and the RDMA plane (xfer_rdma.c over src/fabric),
 * which uses on_msg for RDMA_REGISTER / RDMA_READY / RDMA_DONE and the same
 * completion path (tw__xfer_put_complete). The handlers pick the ops table
 * from tw__path_decide (proto/path.h) through tw__dp_for_path; a plane keeps
 * its per-transfer state behind x->dp and frees it in release.
 *
 * Ownership: a transfer belongs to its connection (in its id table) and holds
 * one reference to its tensor version: the source for a GET, the unpublished
 * new version for a PUT. tw__xfer_destroy releases both; a PUT destroyed
 * before completion therefore leaves nothing behind.
 */
#ifndef TW_SERVER_XFER_H
#define TW_SERVER_XFER_H

#include <stddef.h>
#include <stdint.h>

#include "net/loop.h"
#include "proto/path.h"
#include "proto/proto.h"
#include "server/store.h"

struct tw_srv_conn;
struct tw_xfer;

enum tw_xfer_dir {
    TW_XFER_GET = 0, /* TENSOR_REQUEST: the server is the source */
    TW_XFER_PUT = 1  /* TENSOR_PUT: the server is the destination */
};

/*
 * A data plane. Functions return 0 (or a documented positive value) on
 * success and a TW_E* verdict on failure; a verdict from data_begin/on_msg is
 * a protocol violation by the peer (the session answers PROTOCOL_ERROR).
 */
struct tw_dp_ops {
    const char *name;
    uint8_t wire_plane; /* TW_DP_INLINE / TW_DP_RDMA, sent in TENSOR_INFO / PUT_ACCEPT */
    /* Called once, after TENSOR_INFO / PUT_ACCEPT was queued. */
    int (*start)(struct tw_xfer *x);
    /* Source side: queue the next unit of output. Called when the
     * connection has room. Returns 1 while more remains, 0 after the last
     * unit was queued (the transfer is then over), or a verdict. */
    int (*pump)(struct tw_xfer *x);
    /* Destination side, inline DATA: validates the frame (offset, length,
     * MORE) and returns in *dst where its bytes.len bytes go. */
    int (*data_begin)(struct tw_xfer *x, const struct tw_msg *m, uint8_t **dst);
    /* The bytes announced by data_begin are in place. Returns 1 when that
     * was the last frame (the transfer is complete), else 0. */
    int (*data_end)(struct tw_xfer *x, const struct tw_msg *m);
    /* Any other frame of this request (RDMA_REGISTER, RDMA_READY, RDMA_DONE). */
    int (*on_msg)(struct tw_xfer *x, const struct tw_msg *m);
    /* Optional: a PUT's bytes all arrived and their CRC matched; called
     * before a version is published. Sets *publish to the version to
     * publish instead of x->t (the staging planes copy their host version
     * into the GPU version here and publish that; x keeps its references,
     * release drops them). 0, or a negative code with the reason in err:
     * the put fails with INTERNAL. Where the connection collects commits
     * (conn->defer_commits) it may instead queue its copy and return 1
     * with x->commit_gpu / x->commit_ticket set: the version is published
     * (and OK sent) by tw__xfer_commits_flush once that copy is done. */
    int (*commit)(struct tw_xfer *x, struct tw_tensor **publish, char *err, size_t errlen);
    /* Releases data-plane resources (registrations); called by destroy. */
    void (*release)(struct tw_xfer *x);
};

extern const struct tw_dp_ops tw__dp_inline_ops;
/* RDMA_REGISTER / RDMA_READY / RDMA_DONE through src/fabric (xfer_rdma.c). */
extern const struct tw_dp_ops tw__dp_rdma_ops;

/* A GPU version through host memory around the inline / RDMA plane
 * (xfer_staged.c). */
extern const struct tw_dp_ops *const tw__dp_inline_staged_ops;
extern const struct tw_dp_ops *const tw__dp_rdma_staged_ops;

/* The ops table that implements p; NULL for TW_PATH_PLANE_NONE. */
const struct tw_dp_ops *tw__dp_for_path(const struct tw_path *p);

struct tw_xfer {
    struct tw_srv_conn *conn;
    uint64_t id;
    enum tw_xfer_dir dir;
    struct tw_tensor *t;
    /* Staging planes: the GPU version (the reference x->t would hold)
     * while x->t is its host copy; NULL otherwise. */
    struct tw_tensor *dev_t;
    /* Staging planes: a pipelined pull put's state (xfer_staged.c), else
     * NULL. */
    void *stage;
    const struct tw_dp_ops *ops;
    /* The path tw__path_decide chose (the handler sets it before start);
     * the plane records what the peer decided (a client's push get). */
    struct tw_path path;
    /* A put's: the inputs path was decided from, kept to decide it again
     * once the client's RDMA_REGISTER says whether its source is readable
     * by cross-memory attach (xfer_rdma.c, peer_cma); zero for a get. */
    struct tw_path_in path_in;
    /* A get asked with ATTACH_READ (bit 7) over shm: the client reads the
     * source by cross-memory attach, so a host source needs no key. */
    int attach;
    void *dp;      /* data-plane private state, owned by ops */
    uint64_t done; /* bytes moved so far */
    uint32_t crc;  /* running CRC32C of received bytes (PUT with a CRC) */
    uint64_t started_ms;
    uint64_t started_ns; /* tw__metrics_now_ns(), for the duration histogram (0: not timed) */
    int failed;          /* ended with an error (metrics.h counts it failed) */
    /* Why start failed, for the ERROR the handler sends ("" when the code
     * says it all). */
    char why[200];
    struct tw_timer deadline;
    /* A commit waiting for its copy (see commit above): the store GPU
     * index and ticket of the copy, the version to publish, and the
     * connection's list of them (in completion order). */
    int commit_gpu;
    uint64_t commit_ticket;
    struct tw_tensor *commit_t;
    struct tw_xfer *cnext;
    int in_commits;
    /* Bit 5 (docs/protocol.md §4.22), a get only: its RDMA_REGISTER goes
     * with MORE and RDMA_AVAILABLE frames follow, each sent once the copy
     * of its part is done (xfer_staged.c); prog_ticket is the last part's
     * copy on store GPU prog_gpu (-1: no copy in flight). */
    int progressive;
    int prog_gpu;
    uint64_t prog_ticket;
    struct tw_xfer *hnext;         /* connection's id table */
    struct tw_xfer *snext, *sprev; /* connection's list of sources to pump */
    int in_send_list;
};

/* Creates a transfer for request id on conn moving its bytes on path's plane
 * (tw__dp_for_path(path) must not be NULL), taking a new reference to t,
 * inserts it in the connection's table and arms its deadline. Returns NULL
 * on allocation failure. */
struct tw_xfer *tw__xfer_new(struct tw_srv_conn *c, uint64_t id, enum tw_xfer_dir dir,
                             struct tw_tensor *t, const struct tw_path *path);
/* Removes x from its connection and frees it (see Ownership above). */
void tw__xfer_destroy(struct tw_xfer *x);
/* Moves x, a transfer that has not moved a byte, to the plane of path p
 * (tw__dp_for_path(p) must not be NULL) once the server learned more about
 * it (a put's source memory, at the client's RDMA_REGISTER): the current
 * plane releases its state, the new one starts, and m, the message that
 * taught it, is handed to the new plane. Returns what that plane's on_msg
 * returns; 0 after answering ERROR INTERNAL and destroying x when the new
 * plane cannot start. */
int tw__xfer_replan(struct tw_xfer *x, const struct tw_path *p, const struct tw_msg *m);
/* A PUT whose bytes all arrived: verifies the CRC, publishes the version and
 * answers OK, or answers CHECKSUM_MISMATCH; then destroys x. A commit whose
 * copy was queued leaves x on the connection's list instead. */
void tw__xfer_put_complete(struct tw_xfer *x);
/* Publishes (and answers) the puts on c's list of queued commits, in
 * order, each once its copy is done (waiting for it); a failed copy fails
 * its put with INTERNAL. Called before the event loop could let anything
 * observe the store: at the end of the connection's read, and before a
 * request other than a put is handled. */
void tw__xfer_commits_flush(struct tw_srv_conn *c);
/* The same without waiting: publishes the queued commits whose copies are
 * done (in order, up to the first still copying) and hands the others'
 * copies to the driver; returns 1 and sets srv->commits_pending when some
 * are left (the loop publishes them: tw__srv_poll). At the end of a read,
 * so the event loop reads on while the GPU copies the puts just read. */
int tw__xfer_commits_advance(struct tw_srv_conn *c);
/* Makes a source transfer eligible for pumping (round robin per connection). */
void tw__xfer_want_pump(struct tw_xfer *x);

#endif
