/*
 * The transfer-path decision (path.h). Read it as a table, top to bottom;
 * the first row that matches decides the plane, then the mode, then staging:
 *
 *   plane
 *     server, no WANT_RDMA                     inline   NOT_REQUESTED
 *     no accepted endpoint                     inline   NO_ENDPOINT
 *     rail retired                             inline   RAIL_RETIRED
 *     client get (size unknown)                rdma     SIZE_UNKNOWN
 *     size < rdma_min_bytes, bit 0 negotiated  inline   BELOW_THRESHOLD
 *     size < rdma_min_bytes, bit 0 not         rdma     INLINE_NOT_NEGOTIATED
 *     otherwise                                rdma     AT_THRESHOLD
 *     (inline chosen but bit 0 not negotiated: none, NO_PLANE)
 *   mode (rdma, decided by the destination owner only; needs bit 3)
 *     policy always                            push     PUSH_ALWAYS
 *     policy auto, GPU memory admitted, over
 *       shm from host memory                   pull     (staged below)
 *     policy auto, GPU memory admitted         push     PUSH_GPUDIRECT
 *     policy auto, server put over shm, source
 *       readable by CMA                        pull     PULL_SHM_CMA
 *     policy auto, server put over shm         push     PUSH_SHM
 *     otherwise                                pull
 *   staging (this side's memory is GPU memory)
 *     inline                                   host     STAGED_INLINE
 *     rdma, GPUDirect not admitted             host     STAGED_NO_GPUDIRECT
 *     rdma over shm, destination, pull         host     STAGED_SHM_PULL
 *       (where auto did not push because the source is host memory:
 *        STAGED_SHM_HOST_SOURCE)
 *
 * Server put over shm pushes under "auto" because shm (libfabric 1.17) posts
 * under a lock in the target's region: a client killed during a pull put,
 * while its progress held that lock, left the server's post spinning for
 * good (a wedged rail, docs/testing.md). With push the copy runs in the
 * server's progress under its own lock. Unless the server can copy the
 * client's bytes itself: where the client's registered source is readable
 * from its process by cross-memory attach (process_vm_readv, src/fabric/
 * xfer.c), the server's plane reads it without libfabric and without any
 * lock of a shared region, so a dying client leaves nothing held, and a
 * small put costs one copy on one thread instead of libfabric's
 * write-with-delivery-complete round trip (32 KiB puts: docs/performance.md,
 * "server reads of puts"). That is known only once the client's
 * RDMA_REGISTER names the range, so the server decides the put again then
 * (peer_cma); GPU memory of a GPUDirect client is not readable that way and
 * keeps PUSH_SHM. A put into a server GPU that stages (not admitted) reads
 * into its host copy the same way; one admitted is pushed (PUSH_GPUDIRECT,
 * above this row).
 *
 * GPU memory of the destination over shm is written only by push, and a
 * pull into it stages (STAGED_SHM_PULL). shm (libfabric 1.22) moves GPU
 * memory by CUDA IPC, and the copy runs in the TARGET's process: for a
 * read, the source's. Its cudaMemcpy returns before a device-to-device
 * copy has landed, and shm completes the read then, so the reader saw
 * zeros where the bytes were still on their way (H200, a server tensor on
 * cuda:0 read into a client's cuda:0 buffer: every size from 1 B to 64
 * MiB, docs/gpudirect.md). With push the copy runs in the destination's
 * own process, which waits for it before it reports the transfer complete
 * (tw__cuda_settle_writes).
 *
 * But not from host memory: shm writes host memory into GPU memory through
 * its bounce buffers (SAR, ~2.4 GB/s on the H200), while the staged path
 * copies the host source by cross-memory attach into pinned memory and
 * from there to the GPU (5.8-6.7 GB/s; docs/performance.md, "host tensors
 * into a client's GPU"). A client get learns where the source lives from
 * TENSOR_INFO's device tag and decides again then (engine.c), before any
 * plane state exists; --push always still pushes. A server put learns it
 * at the client's RDMA_REGISTER: a source range readable by cross-memory
 * attach is host memory (server/xfer_rdma.c), and the staged plane takes
 * the put over (tw__xfer_replan).
 */
#include "proto/path.h"

#include <stdio.h>
#include <string.h>

#include "proto/proto.h"

static int is_destination(const struct tw_path_in *in)
{
    return (in->role == TW_PATH_CLIENT) == (in->op == TW_PATH_GET);
}

static struct tw_path plane_of(const struct tw_path_in *in)
{
    struct tw_path p = {.plane = TW_PATH_PLANE_INLINE, .mode = TW_PATH_PULL};
    if (in->role == TW_PATH_SERVER && !in->want_rdma)
        p.reason = TW_PATH_R_NOT_REQUESTED;
    else if (!in->endpoint_accepted)
        p.reason = TW_PATH_R_NO_ENDPOINT;
    else if (!in->rail_usable)
        p.reason = TW_PATH_R_RAIL_RETIRED;
    else if (!in->size_known) {
        p.plane = TW_PATH_PLANE_RDMA;
        p.reason = TW_PATH_R_SIZE_UNKNOWN;
    } else if (in->size < in->rdma_min_bytes) {
        p.reason = TW_PATH_R_BELOW_THRESHOLD;
        if (!(in->caps & TW_CAP_INLINE_DATA)) {
            /* An RDMA-only connection: the threshold is a preference, and
             * inline is not ours to choose (docs/protocol.md §7). */
            p.plane = TW_PATH_PLANE_RDMA;
            p.reason = TW_PATH_R_INLINE_NOT_NEGOTIATED;
        }
    } else {
        p.plane = TW_PATH_PLANE_RDMA;
        p.reason = TW_PATH_R_AT_THRESHOLD;
    }
    if (p.plane == TW_PATH_PLANE_INLINE && !(in->caps & TW_CAP_INLINE_DATA)) {
        p.plane = TW_PATH_PLANE_NONE;
        p.reason = TW_PATH_R_NO_PLANE;
    }
    return p;
}

static void mode_of(const struct tw_path_in *in, struct tw_path *p)
{
    if (!is_destination(in) || !(in->caps & TW_CAP_RDMA_GPUDIRECT) ||
        in->push == TW_PATH_PUSH_NEVER)
        return;
    if (in->push == TW_PATH_PUSH_ALWAYS) {
        p->mode = TW_PATH_PUSH;
        p->reason = TW_PATH_R_PUSH_ALWAYS;
    } else if (in->mem_local == TW_PATH_MEM_CUDA && in->gdr == TW_PATH_GDR_ADMITTED) {
        if (in->provider == TW_PATH_PROV_SHM && in->mem_peer == TW_PATH_MEM_HOST) {
            p->reason = TW_PATH_R_STAGED_SHM_HOST_SOURCE; /* pull, staged below */
        } else {
            p->mode = TW_PATH_PUSH;
            p->reason = TW_PATH_R_PUSH_GPUDIRECT;
        }
    } else if (in->role == TW_PATH_SERVER && in->provider == TW_PATH_PROV_SHM) {
        if (in->peer_cma) { /* host memory here, or a staged GPU tensor's host copy */
            p->reason = TW_PATH_R_PULL_SHM_CMA; /* the mode stays pull */
        } else {
            p->mode = TW_PATH_PUSH;
            p->reason = TW_PATH_R_PUSH_SHM;
        }
    }
}

struct tw_path tw__path_decide(const struct tw_path_in *in)
{
    struct tw_path p = plane_of(in);
    if (p.plane == TW_PATH_PLANE_RDMA)
        mode_of(in, &p);
    if (p.plane != TW_PATH_PLANE_NONE && in->mem_local == TW_PATH_MEM_CUDA) {
        if (p.plane == TW_PATH_PLANE_INLINE) {
            p.staging = TW_PATH_STAGING_HOST;
            p.reason = TW_PATH_R_STAGED_INLINE;
        } else if (in->gdr != TW_PATH_GDR_ADMITTED) {
            p.staging = TW_PATH_STAGING_HOST;
            p.reason = TW_PATH_R_STAGED_NO_GPUDIRECT;
        } else if (in->provider == TW_PATH_PROV_SHM && is_destination(in) &&
                   p.mode == TW_PATH_PULL) {
            p.staging = TW_PATH_STAGING_HOST;
            if (p.reason != TW_PATH_R_STAGED_SHM_HOST_SOURCE)
                p.reason = TW_PATH_R_STAGED_SHM_PULL;
        } else {
            p.gdr = 1; /* the gdr push / gdr pull row */
        }
    }
    return p;
}

struct tw_path tw__path_follow_inline(struct tw_path p)
{
    /* GPU memory the RDMA plane would have touched directly (gdr) cannot
     * take DATA frames: it stages like any GPU memory on the inline plane. */
    if (p.gdr)
        p.staging = TW_PATH_STAGING_HOST;
    p.plane = TW_PATH_PLANE_INLINE;
    p.mode = TW_PATH_PULL;
    p.gdr = 0;
    p.reason = p.staging ? TW_PATH_R_STAGED_INLINE : TW_PATH_R_PEER_CHOSE_INLINE;
    return p;
}

enum tw_path_provider tw__path_provider_kind(const char *name)
{
    if (!name || !*name)
        return TW_PATH_PROV_NONE;
    size_t n = strcspn(name, ";");
    if (n == 3 && memcmp(name, "shm", 3) == 0)
        return TW_PATH_PROV_SHM;
    if ((n == 3 && memcmp(name, "tcp", 3) == 0) || (n == 7 && memcmp(name, "sockets", 7) == 0))
        return TW_PATH_PROV_TCP;
    return TW_PATH_PROV_NIC;
}

const char *tw__path_reason_str(enum tw_path_reason r)
{
    static const char *const text[TW_PATH_R_COUNT] = {
        [TW_PATH_R_NOT_REQUESTED] = "rdma not requested",
        [TW_PATH_R_NO_ENDPOINT] = "no rdma endpoint on this connection",
        [TW_PATH_R_RAIL_RETIRED] = "the rdma rail was retired",
        [TW_PATH_R_BELOW_THRESHOLD] = "below the rdma threshold",
        [TW_PATH_R_PEER_CHOSE_INLINE] = "the server chose inline",
        [TW_PATH_R_SIZE_UNKNOWN] = "size unknown: the server applies its threshold",
        [TW_PATH_R_AT_THRESHOLD] = "at or above the rdma threshold",
        [TW_PATH_R_INLINE_NOT_NEGOTIATED] = "inline not negotiated: rdma at every size",
        [TW_PATH_R_NO_PLANE] = "the rdma rail was retired and inline was not negotiated",
        [TW_PATH_R_PUSH_ALWAYS] = "push policy always",
        [TW_PATH_R_PUSH_SHM] = "put over shm: the client writes",
        [TW_PATH_R_PULL_SHM_CMA] = "put over shm: the server copies from the client's process",
        [TW_PATH_R_PUSH_GPUDIRECT] = "GPU destination admitted for GPUDirect",
        [TW_PATH_R_STAGED_SHM_PULL] =
            "GPU destination over shm without push: staged (a read lands after it completes)",
        [TW_PATH_R_STAGED_SHM_HOST_SOURCE] =
            "GPU destination over shm, source in host memory: staged (faster than shm's SAR)",
        [TW_PATH_R_STAGED_INLINE] = "GPU memory staged through host memory for inline",
        [TW_PATH_R_STAGED_NO_GPUDIRECT] = "GPU memory not admitted for GPUDirect",
    };
    if ((unsigned)r >= TW_PATH_R_COUNT || !text[r])
        return "unknown";
    return text[r];
}

char *tw__path_format(const struct tw_path *p, const char *provider, char *buf, size_t len)
{
    const char *staged = p->staging == TW_PATH_STAGING_HOST ? " + staging" : "";
    if (!len)
        return buf;
    switch (p->plane) {
    case TW_PATH_PLANE_RDMA:
        snprintf(buf, len, "%s %s (%s)%s", p->gdr ? "gdr" : "rdma",
                 p->mode == TW_PATH_PUSH ? "push" : "pull", provider && *provider ? provider : "?",
                 staged);
        break;
    case TW_PATH_PLANE_INLINE:
        /* Why a transfer is inline matters only where RDMA was possible:
         * on a connection without it, inline is all there is. */
        if (p->reason == TW_PATH_R_RAIL_RETIRED || p->reason == TW_PATH_R_BELOW_THRESHOLD ||
            p->reason == TW_PATH_R_PEER_CHOSE_INLINE)
            snprintf(buf, len, "inline tcp (%s)%s", tw__path_reason_str(p->reason), staged);
        else
            snprintf(buf, len, "inline tcp%s", staged);
        break;
    default:
        snprintf(buf, len, "none (%s)", tw__path_reason_str(p->reason));
        break;
    }
    return buf;
}
