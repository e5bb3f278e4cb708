/*
 * The transfer path of one get or put: which data plane moves the bytes
 * (inline DATA frames or RDMA), who moves them on RDMA (the destination
 * reads: pull; the source writes: push) and whether this side's end of the
 * transfer goes through a host staging buffer (GPU memory that the NIC may
 * not touch directly).
 *
 * Both sides decide with the same function, tw__path_decide(), from plain
 * inputs: what the connection negotiated, the request, the memory kinds,
 * policies and verdicts that the caller computed (rail health, GPUDirect
 * admission). The function does no I/O, allocates nothing and keeps no
 * state; the answer carries a reason code, and prose is made from the code
 * only where a person reads it (tw__path_reason_str, tw__path_format).
 *
 * Who decides what (docs/protocol.md §7, §9):
 *   - the plane: the client asks (WANT_RDMA) and the server answers; an
 *     answer of the inline plane to a request for RDMA is legal and the
 *     client follows it (tw__path_follow_inline);
 *   - the mode: the destination owner (the client of a get, the server of a
 *     put). The source side gets TW_PATH_PULL back and learns a push from
 *     the destination's messages (RDMA_REGISTER before RDMA_READY);
 *   - staging: each side for its own memory.
 *
 * Adding a data plane (GPU staging, issue #11) means one ops table on each
 * side and one row here.
 */
#ifndef TW_PROTO_PATH_H
#define TW_PROTO_PATH_H

#include <stddef.h>
#include <stdint.h>

enum tw_path_plane {
    TW_PATH_PLANE_NONE = 0, /* no plane can move it: refuse the request */
    TW_PATH_PLANE_INLINE,   /* DATA frames on the control connection */
    TW_PATH_PLANE_RDMA      /* RDMA_REGISTER / RDMA_READY / RDMA_DONE */
};

enum tw_path_mode {
    TW_PATH_PULL = 0, /* the destination reads (also: not decided by this side) */
    TW_PATH_PUSH      /* the source writes into the destination */
};

enum tw_path_staging {
    TW_PATH_STAGING_NONE = 0, /* the plane touches the caller's memory */
    TW_PATH_STAGING_HOST      /* bytes pass through a host buffer on this side */
};

enum tw_path_role { TW_PATH_CLIENT = 0, TW_PATH_SERVER = 1 };
enum tw_path_op { TW_PATH_GET = 0, TW_PATH_PUT = 1 };
/* UNKNOWN: the peer's memory of a client get before TENSOR_INFO names its
 * device tag, and of every put the server decides (not on the wire). */
enum tw_path_mem { TW_PATH_MEM_HOST = 0, TW_PATH_MEM_CUDA = 1, TW_PATH_MEM_UNKNOWN = 2 };

/* Kind of libfabric provider behind the accepted endpoint. */
enum tw_path_provider {
    TW_PATH_PROV_NONE = 0, /* no endpoint */
    TW_PATH_PROV_TCP,      /* "tcp", "tcp;ofi_rxm", "sockets" */
    TW_PATH_PROV_SHM,      /* "shm" */
    TW_PATH_PROV_NIC       /* verbs, efa and every other provider */
};

/* Same values as the public enum tw_push_policy (tensorwire/client.h). */
enum tw_path_push { TW_PATH_PUSH_AUTO = 0, TW_PATH_PUSH_ALWAYS = 1, TW_PATH_PUSH_NEVER = 2 };

/* GPUDirect admission of this side's memory on the connection's provider
 * (src/gdr/admission.h: one table cell; NOT_EVALUATED for host memory). */
enum tw_path_gdr { TW_PATH_GDR_NOT_EVALUATED = 0, TW_PATH_GDR_REFUSED, TW_PATH_GDR_ADMITTED };

/* Why the path is what it is: the most specific decision wins (staging
 * over mode over plane). Codes are stable within a process only. */
enum tw_path_reason {
    TW_PATH_R_NOT_REQUESTED = 0, /* server: the request had no WANT_RDMA */
    TW_PATH_R_NO_ENDPOINT,       /* no accepted RDMA endpoint on the connection */
    TW_PATH_R_RAIL_RETIRED,      /* the endpoint's rail was retired (fabric.h) */
    TW_PATH_R_BELOW_THRESHOLD,   /* smaller than rdma_min_bytes */
    TW_PATH_R_PEER_CHOSE_INLINE, /* client: the server answered inline */
    TW_PATH_R_SIZE_UNKNOWN,      /* client get: ask for RDMA, the server applies its threshold */
    TW_PATH_R_AT_THRESHOLD,      /* RDMA asked for and at least rdma_min_bytes */
    TW_PATH_R_INLINE_NOT_NEGOTIATED,  /* RDMA at every size: bit 0 not negotiated */
    TW_PATH_R_NO_PLANE,               /* rail retired and inline not negotiated */
    TW_PATH_R_PUSH_ALWAYS,            /* push: the destination's policy is "always" */
    TW_PATH_R_PUSH_SHM,               /* push: server put over shm (policy auto) */
    TW_PATH_R_PULL_SHM_CMA,           /* pull: server put over shm, the client's source
                                         readable by cross-memory attach (policy auto) */
    TW_PATH_R_PUSH_GPUDIRECT,         /* push: GPU destination admitted for GPUDirect */
    TW_PATH_R_STAGED_INLINE,          /* GPU memory on this side, inline plane */
    TW_PATH_R_STAGED_NO_GPUDIRECT,    /* GPU memory on this side, not admitted */
    TW_PATH_R_STAGED_SHM_PULL,        /* GPU destination over shm without push */
    TW_PATH_R_STAGED_SHM_HOST_SOURCE, /* GPU destination over shm, source in host memory */
    TW_PATH_R_COUNT
};

struct tw_path_in {
    enum tw_path_role role;
    enum tw_path_op op;
    uint64_t caps;         /* negotiated capability bits (TW_CAP_*) */
    int endpoint_accepted; /* RDMA_ENDPOINT was ACCEPTed and the plane is open */
    enum tw_path_provider provider;
    int rail_usable; /* the endpoint's rail is not retired */
    int want_rdma;   /* server: the request's TW_XFER_WANT_RDMA; client: unused */
    int size_known;  /* 0: a client get (size unknown until TENSOR_INFO) */
    uint64_t size;   /* byte_length when size_known */
    uint64_t rdma_min_bytes;
    enum tw_path_mem mem_local; /* this side's memory of the tensor */
    enum tw_path_mem mem_peer;  /* the other side's: a client get learns it from
                                   TENSOR_INFO's device tag (decided again then) */
    enum tw_path_push push;     /* this side's push policy */
    enum tw_path_gdr gdr;       /* this side's GPUDirect admission verdict */
    /* Server put over shm: 1 when the client's registered source can be
     * copied from its process by cross-memory attach (its pid verified, the
     * first and last byte readable: tw__fabric_peer_cma_readable). Known
     * only once the client's RDMA_REGISTER arrived; 0 before. */
    int peer_cma;
};

struct tw_path {
    uint8_t plane;   /* enum tw_path_plane */
    uint8_t mode;    /* enum tw_path_mode; meaningful on RDMA only */
    uint8_t staging; /* enum tw_path_staging */
    uint8_t reason;  /* enum tw_path_reason */
    uint8_t gdr;     /* 1: this side's GPU memory is registered with the
                        plane directly (GPUDirect: "gdr push", "gdr pull") */
};

/* The path for in. Pure: same inputs, same answer. */
struct tw_path tw__path_decide(const struct tw_path_in *in);

/* The client's request for RDMA was answered with the inline plane: the
 * path the client follows instead (staging kept, reason PEER_CHOSE_INLINE;
 * GPU memory that the RDMA plane would have used directly, gdr, stages:
 * STAGED_INLINE). */
struct tw_path tw__path_follow_inline(struct tw_path p);

/* Maps a libfabric provider name ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm")
 * to its kind; NULL is TW_PATH_PROV_NONE. */
enum tw_path_provider tw__path_provider_kind(const char *name);

/* Short static text for a reason ("below the rdma threshold"); never NULL. */
const char *tw__path_reason_str(enum tw_path_reason r);

/*
 * For people only (get -v, logs, tw_client_data_plane): "rdma pull
 * (tcp;ofi_rxm)", "rdma push (shm) + staging", "gdr push (shm)" (GPU
 * memory moved by the plane itself), "inline tcp", "inline tcp (below the
 * rdma threshold)". provider: the endpoint's provider name or
 * NULL. Writes a NUL-terminated string into buf (truncated to len) and
 * returns buf.
 */
char *tw__path_format(const struct tw_path *p, const char *provider, char *buf, size_t len);

#endif
