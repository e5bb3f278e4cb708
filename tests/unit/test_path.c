/*
 * The transfer-path decision as a table: inputs -> (plane, mode, staging,
 * reason). No I/O, like the codec tests. Each row names what it pins.
 */
#include "proto/path.h"
#include "proto/proto.h"
#include "tw_test.h"

#define INL TW_CAP_INLINE_DATA
#define CRC TW_CAP_PAYLOAD_CRC32C
#define RDMA TW_CAP_RDMA_DATA_PLANE
#define GDR TW_CAP_RDMA_GPUDIRECT
#define MIB (1024u * 1024u)

enum { C = TW_PATH_CLIENT, S = TW_PATH_SERVER };
enum { GET = TW_PATH_GET, PUT = TW_PATH_PUT };
enum { HOST = TW_PATH_MEM_HOST, CUDA = TW_PATH_MEM_CUDA, UNK = TW_PATH_MEM_UNKNOWN };
enum {
    P_NONE = TW_PATH_PROV_NONE,
    P_TCP = TW_PATH_PROV_TCP,
    P_SHM = TW_PATH_PROV_SHM,
    P_NIC = TW_PATH_PROV_NIC
};
enum { AUTO = TW_PATH_PUSH_AUTO, ALWAYS = TW_PATH_PUSH_ALWAYS, NEVER = TW_PATH_PUSH_NEVER };
enum {
    UNEVAL = TW_PATH_GDR_NOT_EVALUATED,
    REFUSED = TW_PATH_GDR_REFUSED,
    ADMITTED = TW_PATH_GDR_ADMITTED
};
enum { NONE = TW_PATH_PLANE_NONE, INLINE = TW_PATH_PLANE_INLINE, RDMA_P = TW_PATH_PLANE_RDMA };
enum { PULL = TW_PATH_PULL, PUSH = TW_PATH_PUSH };
enum { ST_NONE = TW_PATH_STAGING_NONE, ST_HOST = TW_PATH_STAGING_HOST };

struct row {
    const char *what;
    /* inputs */
    int role, op;
    uint64_t caps;
    int accepted, provider, usable, want, known;
    uint64_t size, min;
    int mem, mem_peer, push, gdr;
    /* expected */
    int plane, mode, staging, reason;
};

static const struct row rows[] = {
    /* --- server: the plane (handlers.c choose_dp) --- */
    {"server get without WANT_RDMA is inline", S, GET, INL | RDMA, 1, P_TCP, 1, 0, 1, 8 * MIB, MIB,
     HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_NOT_REQUESTED},
    {"server get, WANT_RDMA but no endpoint", S, GET, INL | RDMA, 0, P_NONE, 1, 1, 1, 8 * MIB, MIB,
     HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_NO_ENDPOINT},
    {"server get on a retired rail goes inline", S, GET, INL | RDMA, 1, P_SHM, 0, 1, 1, 8 * MIB,
     MIB, HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_RAIL_RETIRED},
    {"server get below the threshold is inline", S, GET, INL | RDMA, 1, P_TCP, 1, 1, 1, MIB - 1,
     MIB, HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_BELOW_THRESHOLD},
    {"server get at the threshold is rdma", S, GET, INL | RDMA, 1, P_TCP, 1, 1, 1, MIB, MIB, HOST,
     UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"server get threshold 0: a 0-byte tensor is rdma", S, GET, INL | RDMA, 1, P_TCP, 1, 1, 1, 0, 0,
     HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    /* Fix #1 of issue 9: RDMA only (bit 2 without bit 0). */
    {"server get, rdma-only connection, below the threshold: rdma", S, GET, RDMA, 1, P_TCP, 1, 1, 1,
     100, MIB, HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_INLINE_NOT_NEGOTIATED},
    {"server put, rdma-only connection, below the threshold: rdma", S, PUT, RDMA | GDR, 1, P_TCP, 1,
     1, 1, 4096, MIB, HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE,
     TW_PATH_R_INLINE_NOT_NEGOTIATED},
    {"server, rdma-only connection, retired rail: no plane", S, GET, RDMA, 1, P_SHM, 0, 1, 1,
     8 * MIB, MIB, HOST, UNK, AUTO, UNEVAL, NONE, PULL, ST_NONE, TW_PATH_R_NO_PLANE},
    /* --- server: who moves a put's bytes (xfer_rdma.c push_put) --- */
    {"server put pulls by default (tcp)", S, PUT, INL | RDMA | GDR, 1, P_TCP, 1, 1, 1, 8 * MIB, MIB,
     HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"server put over shm pushes under auto", S, PUT, INL | RDMA | GDR, 1, P_SHM, 1, 1, 1, 8 * MIB,
     MIB, HOST, UNK, AUTO, UNEVAL, RDMA_P, PUSH, ST_NONE, TW_PATH_R_PUSH_SHM},
    {"server put over shm without bit 3 pulls", S, PUT, INL | RDMA, 1, P_SHM, 1, 1, 1, 8 * MIB, MIB,
     HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"server put with --push always pushes", S, PUT, INL | RDMA | GDR, 1, P_NIC, 1, 1, 1, 8 * MIB,
     MIB, HOST, UNK, ALWAYS, UNEVAL, RDMA_P, PUSH, ST_NONE, TW_PATH_R_PUSH_ALWAYS},
    {"server put with --push never over shm pulls", S, PUT, INL | RDMA | GDR, 1, P_SHM, 1, 1, 1,
     8 * MIB, MIB, HOST, UNK, NEVER, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"server get (source) never decides push", S, GET, INL | RDMA | GDR, 1, P_SHM, 1, 1, 1, 8 * MIB,
     MIB, HOST, UNK, ALWAYS, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    /* --- client: what to ask for (engine.c) --- */
    {"client without an endpoint asks inline", C, GET, INL | CRC, 0, P_NONE, 1, 0, 0, 0, MIB, HOST,
     UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_NO_ENDPOINT},
    {"client get asks rdma: size unknown", C, GET, INL | RDMA, 1, P_TCP, 1, 0, 0, 0, MIB, HOST, UNK,
     AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_SIZE_UNKNOWN},
    {"client get on a retired rail asks inline", C, GET, INL | RDMA, 1, P_SHM, 0, 0, 0, 0, MIB,
     HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_RAIL_RETIRED},
    {"client put below the threshold is inline", C, PUT, INL | RDMA, 1, P_TCP, 1, 0, 1, 4096, MIB,
     HOST, UNK, AUTO, UNEVAL, INLINE, PULL, ST_NONE, TW_PATH_R_BELOW_THRESHOLD},
    {"client put at the threshold is rdma (the server picks the mode)", C, PUT, INL | RDMA | GDR, 1,
     P_SHM, 1, 0, 1, MIB, MIB, HOST, UNK, ALWAYS, UNEVAL, RDMA_P, PULL, ST_NONE,
     TW_PATH_R_AT_THRESHOLD},
    {"client get, push always and bit 3: push", C, GET, INL | RDMA | GDR, 1, P_TCP, 1, 0, 0, 0, MIB,
     HOST, UNK, ALWAYS, UNEVAL, RDMA_P, PUSH, ST_NONE, TW_PATH_R_PUSH_ALWAYS},
    {"client get, push always without bit 3: pull", C, GET, INL | RDMA, 1, P_TCP, 1, 0, 0, 0, MIB,
     HOST, UNK, ALWAYS, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_SIZE_UNKNOWN},
    {"client get, push auto into host memory: pull", C, GET, INL | RDMA | GDR, 1, P_SHM, 1, 0, 0, 0,
     MIB, HOST, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_SIZE_UNKNOWN},
    /* --- staging: GPU memory on this side (planes arrive in issue 11) --- */
    {"client get into GPU memory, not evaluated: rdma pull + staging", C, GET, INL | RDMA | GDR, 1,
     P_NIC, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"client get into GPU memory, refused: rdma pull + staging", C, GET, INL | RDMA | GDR, 1, P_NIC,
     1, 0, 0, 0, MIB, CUDA, UNK, AUTO, REFUSED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"client get into GPU memory, admitted, auto: push, no staging", C, GET, INL | RDMA | GDR, 1,
     P_NIC, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"client get into GPU memory, admitted, never: pull, no staging", C, GET, INL | RDMA, 1, P_NIC,
     1, 0, 0, 0, MIB, CUDA, UNK, NEVER, ADMITTED, RDMA_P, PULL, ST_NONE, TW_PATH_R_SIZE_UNKNOWN},
    {"client put from GPU memory without rdma: inline + staging", C, PUT, INL, 0, P_NONE, 1, 0, 1,
     8 * MIB, MIB, CUDA, UNK, AUTO, UNEVAL, INLINE, PULL, ST_HOST, TW_PATH_R_STAGED_INLINE},
    {"client put from GPU memory below the threshold: inline + staging", C, PUT, INL | RDMA, 1,
     P_TCP, 1, 0, 1, 10, MIB, CUDA, UNK, AUTO, ADMITTED, INLINE, PULL, ST_HOST,
     TW_PATH_R_STAGED_INLINE},
    {"server put into GPU memory, admitted: push", S, PUT, INL | RDMA | GDR, 1, P_NIC, 1, 1, 1,
     8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE, TW_PATH_R_PUSH_GPUDIRECT},
    {"server get from GPU memory, not admitted: staging", S, GET, INL | RDMA | GDR, 1, P_NIC, 1, 1,
     1, 8 * MIB, MIB, CUDA, UNK, AUTO, UNEVAL, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    /* --- issue 12: the gdr rows (GPU memory registered by the plane) --- */
    {"server get from GPU memory, admitted: gdr pull", S, GET, INL | RDMA | GDR, 1, P_SHM, 1, 1, 1,
     8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"server put into GPU memory over shm, admitted: gdr push", S, PUT, INL | RDMA | GDR, 1, P_SHM,
     1, 1, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"server put into GPU memory over shm, admitted, bit 3 not negotiated: staging", S, PUT,
     INL | RDMA, 1, P_SHM, 1, 1, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_SHM_PULL},
    {"server put into GPU memory over a NIC, admitted, bit 3 not negotiated: gdr pull", S, PUT,
     INL | RDMA, 1, P_NIC, 1, 1, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL, ST_NONE,
     TW_PATH_R_AT_THRESHOLD},
    {"server put into GPU memory, refused (e.g. tcp): staging", S, PUT, INL | RDMA | GDR, 1, P_TCP,
     1, 1, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, REFUSED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"server put into GPU memory over shm, admitted, --push never: staging", S, PUT,
     INL | RDMA | GDR, 1, P_SHM, 1, 1, 1, 8 * MIB, MIB, CUDA, UNK, NEVER, ADMITTED, RDMA_P, PULL,
     ST_HOST, TW_PATH_R_STAGED_SHM_PULL},
    {"server put into GPU memory over a NIC, admitted, --push never: gdr pull", S, PUT,
     INL | RDMA | GDR, 1, P_NIC, 1, 1, 1, 8 * MIB, MIB, CUDA, UNK, NEVER, ADMITTED, RDMA_P, PULL,
     ST_NONE, TW_PATH_R_AT_THRESHOLD},
    /* --- issue 12, client side: the client's own GPU memory (gdr_client.c) --- */
    {"client get into GPU memory over shm, admitted, auto: gdr push", C, GET, INL | RDMA | GDR, 1,
     P_SHM, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"client get into GPU memory over shm, admitted, never: staging (no pull into it)", C, GET,
     INL | RDMA | GDR, 1, P_SHM, 1, 0, 0, 0, MIB, CUDA, UNK, NEVER, ADMITTED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_SHM_PULL},
    {"client get into GPU memory over shm, admitted, always: gdr push", C, GET, INL | RDMA | GDR, 1,
     P_SHM, 1, 0, 0, 0, MIB, CUDA, UNK, ALWAYS, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_ALWAYS},
    {"client get into GPU memory over shm, admitted, bit 3 not negotiated: staging", C, GET,
     INL | RDMA, 1, P_SHM, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_SHM_PULL},
    {"client get into GPU memory over a NIC, admitted, bit 3 not negotiated: gdr pull", C, GET,
     INL | RDMA, 1, P_NIC, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL, ST_NONE,
     TW_PATH_R_SIZE_UNKNOWN},
    {"client get into GPU memory, admitted, push always: gdr push", C, GET, INL | RDMA | GDR, 1,
     P_TCP, 1, 0, 0, 0, MIB, CUDA, UNK, ALWAYS, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_ALWAYS},
    {"client get into GPU memory, --gpudirect off (refused): staging", C, GET, INL | RDMA | GDR, 1,
     P_SHM, 1, 0, 0, 0, MIB, CUDA, UNK, AUTO, REFUSED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"client get into GPU memory, retired rail: inline + staging", C, GET, INL | RDMA | GDR, 1,
     P_SHM, 0, 0, 0, 0, MIB, CUDA, UNK, AUTO, ADMITTED, INLINE, PULL, ST_HOST,
     TW_PATH_R_STAGED_INLINE},
    {"client put from GPU memory, admitted: gdr, the server picks the mode", C, PUT,
     INL | RDMA | GDR, 1, P_SHM, 1, 0, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, ADMITTED, RDMA_P, PULL,
     ST_NONE, TW_PATH_R_AT_THRESHOLD},
    {"client put from GPU memory, refused (1.17 shm): rdma + staging", C, PUT, INL | RDMA | GDR, 1,
     P_SHM, 1, 0, 1, 8 * MIB, MIB, CUDA, UNK, AUTO, REFUSED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"client put from GPU memory, admitted, push always: the source never pushes by itself", C, PUT,
     INL | RDMA | GDR, 1, P_NIC, 1, 0, 1, 8 * MIB, MIB, CUDA, UNK, ALWAYS, ADMITTED, RDMA_P, PULL,
     ST_NONE, TW_PATH_R_AT_THRESHOLD},
    /* --- a client get learns its source's memory from TENSOR_INFO (engine.c
     * follow_source): GPU memory over shm is not pushed from host memory --- */
    {"client get into admitted GPU memory over shm, host source: staged", C, GET, INL | RDMA | GDR,
     1, P_SHM, 1, 0, 0, 0, MIB, CUDA, HOST, AUTO, ADMITTED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_SHM_HOST_SOURCE},
    {"client get into admitted GPU memory over shm, GPU source: gdr push", C, GET, INL | RDMA | GDR,
     1, P_SHM, 1, 0, 0, 0, MIB, CUDA, CUDA, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"client get into admitted GPU memory over shm, host source, push always: gdr push", C, GET,
     INL | RDMA | GDR, 1, P_SHM, 1, 0, 0, 0, MIB, CUDA, HOST, ALWAYS, ADMITTED, RDMA_P, PUSH,
     ST_NONE, TW_PATH_R_PUSH_ALWAYS},
    {"client get into admitted GPU memory over tcp, host source: gdr push", C, GET,
     INL | RDMA | GDR, 1, P_TCP, 1, 0, 0, 0, MIB, CUDA, HOST, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"client get into admitted GPU memory over a NIC, host source: gdr push", C, GET,
     INL | RDMA | GDR, 1, P_NIC, 1, 0, 0, 0, MIB, CUDA, HOST, AUTO, ADMITTED, RDMA_P, PUSH, ST_NONE,
     TW_PATH_R_PUSH_GPUDIRECT},
    {"client get into GPU memory over shm, not admitted, host source: staged as before", C, GET,
     INL | RDMA | GDR, 1, P_SHM, 1, 0, 0, 0, MIB, CUDA, HOST, AUTO, REFUSED, RDMA_P, PULL, ST_HOST,
     TW_PATH_R_STAGED_NO_GPUDIRECT},
    {"client get into host memory over shm, host source: pull", C, GET, INL | RDMA | GDR, 1, P_SHM,
     1, 0, 0, 0, MIB, HOST, HOST, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_SIZE_UNKNOWN},
    {"server put into admitted GPU memory over shm, a host source (known at its RDMA_REGISTER): "
     "staged",
     S, PUT, INL | RDMA | GDR, 1, P_SHM, 1, 1, 1, 8 * MIB, MIB, CUDA, HOST, AUTO, ADMITTED, RDMA_P,
     PULL, ST_HOST, TW_PATH_R_STAGED_SHM_HOST_SOURCE},
    {"the peer's GPU memory does not change this side's path", S, GET, INL | RDMA, 1, P_TCP, 1, 1,
     1, 8 * MIB, MIB, HOST, CUDA, AUTO, UNEVAL, RDMA_P, PULL, ST_NONE, TW_PATH_R_AT_THRESHOLD},
};

static void table(void)
{
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        struct tw_path_in in = {
            .role = r->role,
            .op = r->op,
            .caps = r->caps,
            .endpoint_accepted = r->accepted,
            .provider = r->provider,
            .rail_usable = r->usable,
            .want_rdma = r->want,
            .size_known = r->known,
            .size = r->size,
            .rdma_min_bytes = r->min,
            .mem_local = r->mem,
            .mem_peer = r->mem_peer,
            .push = r->push,
            .gdr = r->gdr,
        };
        struct tw_path p = tw__path_decide(&in);
        fprintf(stderr, "  row %zu: %s -> %s\n", i, r->what,
                tw__path_reason_str((enum tw_path_reason)p.reason));
        TW_ASSERT_EQ(p.plane, r->plane);
        TW_ASSERT_EQ(p.mode, r->mode);
        TW_ASSERT_EQ(p.staging, r->staging);
        TW_ASSERT_EQ(p.reason, r->reason);
        /* GPUDirect: this side's GPU memory on RDMA without staging. */
        TW_ASSERT_EQ(p.gdr, r->mem == CUDA && r->plane == RDMA_P && r->staging == ST_NONE);
    }
}

/* A server put over shm decided again at the client's RDMA_REGISTER,
 * knowing whether the client's source can be read by cross-memory attach
 * (peer_cma, xfer_rdma.c): the same row of the table with peer_cma 0 and
 * 1. Only a destination in host memory under "auto" over shm changes (a
 * host tensor, or a staged GPU tensor's host copy: push -> the server's own
 * reads); every other row keeps its answer. */
static void peer_cma_rows(void)
{
    static const struct {
        const char *what;
        int op, provider, mem, push, gdr;
        uint64_t size, min;
        int mode0, reason0, mode1, reason1;
    } rows2[] = {
        {"put over shm into host memory", PUT, P_SHM, HOST, AUTO, UNEVAL, 8 * MIB, MIB, PUSH,
         TW_PATH_R_PUSH_SHM, PULL, TW_PATH_R_PULL_SHM_CMA},
        {"4 KiB put over shm, rdma at every size", PUT, P_SHM, HOST, AUTO, UNEVAL, 4096, 0, PUSH,
         TW_PATH_R_PUSH_SHM, PULL, TW_PATH_R_PULL_SHM_CMA},
        {"put over shm, --push always", PUT, P_SHM, HOST, ALWAYS, UNEVAL, 8 * MIB, MIB, PUSH,
         TW_PATH_R_PUSH_ALWAYS, PUSH, TW_PATH_R_PUSH_ALWAYS},
        {"put over shm, --push never", PUT, P_SHM, HOST, NEVER, UNEVAL, 8 * MIB, MIB, PULL,
         TW_PATH_R_AT_THRESHOLD, PULL, TW_PATH_R_AT_THRESHOLD},
        {"put over shm into GPU memory, not admitted (staged: its host copy is read)", PUT, P_SHM,
         CUDA, AUTO, REFUSED, 8 * MIB, MIB, PUSH, TW_PATH_R_STAGED_NO_GPUDIRECT, PULL,
         TW_PATH_R_STAGED_NO_GPUDIRECT},
        {"put over shm into admitted GPU memory", PUT, P_SHM, CUDA, AUTO, ADMITTED, 8 * MIB, MIB,
         PUSH, TW_PATH_R_PUSH_GPUDIRECT, PUSH, TW_PATH_R_PUSH_GPUDIRECT},
        {"put over tcp", PUT, P_TCP, HOST, AUTO, UNEVAL, 8 * MIB, MIB, PULL, TW_PATH_R_AT_THRESHOLD,
         PULL, TW_PATH_R_AT_THRESHOLD},
        {"put over a NIC", PUT, P_NIC, HOST, AUTO, UNEVAL, 8 * MIB, MIB, PULL,
         TW_PATH_R_AT_THRESHOLD, PULL, TW_PATH_R_AT_THRESHOLD},
        {"get over shm (the server is the source)", GET, P_SHM, HOST, AUTO, UNEVAL, 8 * MIB, MIB,
         PULL, TW_PATH_R_AT_THRESHOLD, PULL, TW_PATH_R_AT_THRESHOLD},
    };
    for (size_t i = 0; i < sizeof(rows2) / sizeof(rows2[0]); i++) {
        for (int cma = 0; cma <= 1; cma++) {
            struct tw_path_in in = {
                .role = TW_PATH_SERVER,
                .op = rows2[i].op,
                .caps = INL | RDMA | GDR,
                .endpoint_accepted = 1,
                .provider = rows2[i].provider,
                .rail_usable = 1,
                .want_rdma = 1,
                .size_known = 1,
                .size = rows2[i].size,
                .rdma_min_bytes = rows2[i].min,
                .mem_local = rows2[i].mem,
                .mem_peer = TW_PATH_MEM_UNKNOWN, /* as tensorwired passes it */
                .push = rows2[i].push,
                .gdr = rows2[i].gdr,
                .peer_cma = cma,
            };
            struct tw_path p = tw__path_decide(&in);
            fprintf(stderr, "  %s, peer_cma %d -> %s\n", rows2[i].what, cma,
                    tw__path_reason_str((enum tw_path_reason)p.reason));
            TW_ASSERT_EQ(p.plane, RDMA_P);
            TW_ASSERT_EQ(p.mode, cma ? rows2[i].mode1 : rows2[i].mode0);
            TW_ASSERT_EQ(p.reason, cma ? rows2[i].reason1 : rows2[i].reason0);
        }
    }
}

static void follow_inline(void)
{
    struct tw_path p = {
        .plane = TW_PATH_PLANE_RDMA, .mode = TW_PATH_PUSH, .reason = TW_PATH_R_PUSH_ALWAYS};
    struct tw_path f = tw__path_follow_inline(p);
    TW_ASSERT_EQ(f.plane, TW_PATH_PLANE_INLINE);
    TW_ASSERT_EQ(f.mode, TW_PATH_PULL);
    TW_ASSERT_EQ(f.reason, TW_PATH_R_PEER_CHOSE_INLINE);
    p.gdr = 1;
    /* A client gdr get answered inline: GPU memory cannot take DATA frames
     * directly, it stages. */
    f = tw__path_follow_inline(p);
    TW_ASSERT_EQ(f.gdr, 0);
    TW_ASSERT_EQ(f.staging, TW_PATH_STAGING_HOST);
    TW_ASSERT_EQ(f.reason, TW_PATH_R_STAGED_INLINE);
    p.gdr = 0;
    p.staging = TW_PATH_STAGING_HOST;
    f = tw__path_follow_inline(p);
    TW_ASSERT_EQ(f.staging, TW_PATH_STAGING_HOST);
    TW_ASSERT_EQ(f.reason, TW_PATH_R_STAGED_INLINE);
}

static void provider_kinds(void)
{
    TW_ASSERT_EQ(tw__path_provider_kind(NULL), TW_PATH_PROV_NONE);
    TW_ASSERT_EQ(tw__path_provider_kind(""), TW_PATH_PROV_NONE);
    TW_ASSERT_EQ(tw__path_provider_kind("shm"), TW_PATH_PROV_SHM);
    TW_ASSERT_EQ(tw__path_provider_kind("tcp"), TW_PATH_PROV_TCP);
    TW_ASSERT_EQ(tw__path_provider_kind("tcp;ofi_rxm"), TW_PATH_PROV_TCP);
    TW_ASSERT_EQ(tw__path_provider_kind("sockets"), TW_PATH_PROV_TCP);
    TW_ASSERT_EQ(tw__path_provider_kind("verbs;ofi_rxm"), TW_PATH_PROV_NIC);
    TW_ASSERT_EQ(tw__path_provider_kind("efa"), TW_PATH_PROV_NIC);
    TW_ASSERT_EQ(tw__path_provider_kind("shmx"), TW_PATH_PROV_NIC);
}

/* The strings tw_client_data_plane documents (tensorwire/client.h). */
static void format_for_people(void)
{
    char b[128];
    struct tw_path p = {
        .plane = TW_PATH_PLANE_RDMA, .mode = TW_PATH_PULL, .reason = TW_PATH_R_AT_THRESHOLD};
    TW_ASSERT_STR_EQ(tw__path_format(&p, "tcp;ofi_rxm", b, sizeof(b)), "rdma pull (tcp;ofi_rxm)");
    p.mode = TW_PATH_PUSH;
    TW_ASSERT_STR_EQ(tw__path_format(&p, "shm", b, sizeof(b)), "rdma push (shm)");
    p.gdr = 1;
    TW_ASSERT_STR_EQ(tw__path_format(&p, "shm", b, sizeof(b)), "gdr push (shm)");
    p.mode = TW_PATH_PULL;
    TW_ASSERT_STR_EQ(tw__path_format(&p, "verbs;ofi_rxm", b, sizeof(b)),
                     "gdr pull (verbs;ofi_rxm)");
    p.gdr = 0;
    p.staging = TW_PATH_STAGING_HOST;
    TW_ASSERT_STR_EQ(tw__path_format(&p, "tcp", b, sizeof(b)), "rdma pull (tcp) + staging");
    TW_ASSERT_STR_EQ(tw__path_format(&p, NULL, b, sizeof(b)), "rdma pull (?) + staging");
    struct tw_path i = {.plane = TW_PATH_PLANE_INLINE, .reason = TW_PATH_R_NO_ENDPOINT};
    TW_ASSERT_STR_EQ(tw__path_format(&i, NULL, b, sizeof(b)), "inline tcp");
    i.reason = TW_PATH_R_BELOW_THRESHOLD;
    TW_ASSERT_STR_EQ(tw__path_format(&i, "tcp", b, sizeof(b)),
                     "inline tcp (below the rdma threshold)");
    i.reason = TW_PATH_R_PEER_CHOSE_INLINE;
    TW_ASSERT_STR_EQ(tw__path_format(&i, "tcp", b, sizeof(b)),
                     "inline tcp (the server chose inline)");
    i.reason = TW_PATH_R_RAIL_RETIRED;
    TW_ASSERT_STR_EQ(tw__path_format(&i, "shm", b, sizeof(b)),
                     "inline tcp (the rdma rail was retired)");
    i.reason = TW_PATH_R_STAGED_INLINE;
    i.staging = TW_PATH_STAGING_HOST;
    TW_ASSERT_STR_EQ(tw__path_format(&i, NULL, b, sizeof(b)), "inline tcp + staging");
    /* Truncation keeps a terminated string. */
    TW_ASSERT_STR_EQ(tw__path_format(&p, "tcp", b, 5), "rdma");
}

/* Where this side's GPU memory stages, the staged threshold decides; not
 * for host memory, not for GPU memory admitted for GPUDirect, and never
 * below the plain threshold. */
/* GPU memory that stages has no threshold of its own (it had one, 512 KiB
 * over shm, until staged RDMA won from 32 KiB): below the plain threshold
 * inline with staging, from it RDMA with staging, on either side. */
static void staged_threshold(void)
{
    struct tw_path_in in = {.role = TW_PATH_SERVER,
                            .op = TW_PATH_GET,
                            .caps = INL | RDMA,
                            .endpoint_accepted = 1,
                            .provider = TW_PATH_PROV_SHM,
                            .rail_usable = 1,
                            .want_rdma = 1,
                            .size_known = 1,
                            .size = (32u << 10) - 1,
                            .rdma_min_bytes = 32u << 10,
                            .mem_local = TW_PATH_MEM_CUDA,
                            .mem_peer = TW_PATH_MEM_UNKNOWN,
                            .push = TW_PATH_PUSH_AUTO,
                            .gdr = TW_PATH_GDR_REFUSED};
    struct tw_path p = tw__path_decide(&in);
    TW_ASSERT_EQ(p.plane, INLINE);
    TW_ASSERT_EQ(p.reason, TW_PATH_R_STAGED_INLINE);
    TW_ASSERT_EQ(p.staging, ST_HOST);
    in.size = 32u << 10; /* at the threshold */
    p = tw__path_decide(&in);
    TW_ASSERT_EQ(p.plane, RDMA_P);
    TW_ASSERT_EQ(p.staging, ST_HOST);
    in.size = 256u << 10;
    TW_ASSERT_EQ(tw__path_decide(&in).plane, RDMA_P);
    in.mem_local = TW_PATH_MEM_HOST; /* nothing stages here */
    TW_ASSERT_EQ(tw__path_decide(&in).plane, RDMA_P);
    TW_ASSERT_EQ(tw__path_decide(&in).staging, ST_NONE);
    /* A client put from its GPU memory: the same. */
    in.mem_local = TW_PATH_MEM_CUDA;
    in.role = TW_PATH_CLIENT;
    in.op = TW_PATH_PUT;
    in.rdma_min_bytes = 64u << 10;
    in.size = (64u << 10) - 1;
    TW_ASSERT_EQ(tw__path_decide(&in).plane, INLINE);
    in.size = 64u << 10;
    p = tw__path_decide(&in);
    TW_ASSERT_EQ(p.plane, RDMA_P);
    TW_ASSERT_EQ(p.staging, ST_HOST);
}

static void every_reason_has_text(void)
{
    for (int r = 0; r < TW_PATH_R_COUNT; r++)
        TW_ASSERT(strcmp(tw__path_reason_str((enum tw_path_reason)r), "unknown") != 0);
    TW_ASSERT_STR_EQ(tw__path_reason_str(TW_PATH_R_COUNT), "unknown");
}

int main(void)
{
    TW_RUN(table);
    TW_RUN(peer_cma_rows);
    TW_RUN(follow_inline);
    TW_RUN(provider_kinds);
    TW_RUN(format_for_people);
    TW_RUN(staged_threshold);
    TW_RUN(every_reason_has_text);
    TW_DONE();
}
