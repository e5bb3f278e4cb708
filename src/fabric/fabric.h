/*
 * tensorwire RDMA data plane through libfabric (internal API).
 *
 * Objects and who owns them:
 *
 *   struct tw_fabric       a data plane: one per process (server) or per
 *                          client. Holds up to TW_FABRIC_MAX_RAILS "rails",
 *                          one per provider that opened (e.g. shm and
 *                          tcp;ofi_rxm), each a fabric + domain + RDM endpoint
 *                          + completion queue + address vector shared by all
 *                          peers. Optionally runs a data-mover thread.
 *                          tw__fabric_open() creates it, tw__fabric_close()
 *                          frees it and everything below.
 *   struct tw_fabric_peer  one remote endpoint inserted into a rail's address
 *                          vector (one per control connection that negotiated
 *                          RDMA). Created by tw__fabric_accept_offer() or
 *                          tw__fabric_peer_insert(), released by
 *                          tw__fabric_peer_remove(). Transfers to a removed
 *                          peer are failed with -ECONNABORTED.
 *   struct tw_fabric_mr    one memory registration on one rail. Created by
 *                          tw__fabric_mr_register(), released (and its key
 *                          revoked) by tw__fabric_mr_deregister() or
 *                          tw__fabric_mr_release(). The memory itself stays
 *                          the caller's; it must stay valid until the
 *                          registration is released AND no operation can
 *                          touch it (see "Memory safety" below).
 *   struct tw_fabric_xfer  one transfer (pull = fi_read, push = fi_write) of a
 *                          whole region, cut into chunks with several
 *                          operations in flight and a deadline. Owned by the
 *                          plane from tw__fabric_xfer_submit() until its
 *                          completion is popped by tw__fabric_done_pop().
 *
 * Progress model (chosen and why): libfabric's tcp and shm providers make
 * data progress only when the application polls the completion queue
 * (FI_PROGRESS_MANUAL), and that is true on the *target* side too: a peer
 * that reads our registered memory stalls unless we poll. A server whose
 * epoll loop also had to spin on CQs would either burn a core or add
 * latency, and shm has no CQ wait fd at all. So a plane opened with
 * `threaded = 1` runs one data-mover thread (mover.c) that polls the CQs
 * while a transfer, a remotely accessible registration or a draining
 * operation exists (spinning, then sleeping on the CQ wait fds, or napping
 * 50 us where a rail has none), and sleeps on an internal eventfd otherwise.
 * Finished asynchronous transfers are queued and the mover writes to an
 * eventfd (tw__fabric_event_fd()) that the server's epoll loop watches; the
 * loop then calls tw__fabric_done_pop() (or _pop_many()) until it returns
 * 0; the eventfd is written once per burst of completions, not per
 * transfer. libtensorwire's engine does the same with its socket and this
 * fd (src/client/dp_rdma.c), so the transfers of a batch are in flight
 * together; the mover posts the operations of all transfers that became
 * ready since its last round in one call window per rail. A caller that
 * wants one transfer at a time uses tw__fabric_xfer_run(), which works in
 * both modes (threaded: waits for the mover; unthreaded: busy-polls
 * inline). A client should be threaded too: in a pull put the server reads
 * the client's memory, which needs the client's target-side progress while
 * it blocks on its socket.
 *
 * Memory safety after a timeout: fi_cancel() cannot take back RMA on every
 * provider (tcp;ofi_rxm). A transfer that stops while the provider still
 * holds operations completes after drain_ns with buffer_busy = 1; those
 * operations may still write the local buffer later, so such a buffer is
 * released with tw__fabric_mr_release(), whose callback runs once nothing
 * can touch it any more.
 *
 * Thread safety: every function may be called from any thread. One mutex
 * per plane protects its state; it is dropped around every libfabric call
 * that moves data (posts, CQ reads, cancels), which runs under the rail's
 * own io mutex instead (domains are opened FI_THREAD_DOMAIN), so a call
 * that never returns cannot block the other threads; a control call that
 * needs the rail gives up once the watchdog declared it wedged.
 * Posting happens only on the progressing thread (the mover), never in
 * the caller of tw__fabric_xfer_submit(). tw__fabric_close() must not race
 * with any other call on the same plane.
 *
 * Wedged and retired rails (libfabric 1.17 shm): shm posts by taking a spin
 * lock that lives in the target's shared region, and progresses its own
 * queue under a lock in its own region, so a peer process killed while
 * holding one makes our fi_read/fi_write or fi_cq_read spin forever, and
 * an operation a dead peer never answered blocks every later completion of
 * that endpoint (responses are consumed in order). A threaded plane runs a
 * watchdog: a libfabric call that has not returned after wedge_ns marks its
 * rail *wedged*; the rail's transfers fail at once (-ECONNABORTED, with
 * buffer_busy where operations were posted: their buffers are never handed
 * back), the stuck mover thread is abandoned and a new one serves the other
 * rails. A shm rail holding an operation whose transfer was abandoned is
 * *retired* (no new peers or transfers; running ones continue). For both a
 * replacement rail of the same provider opens in a new slot, so new peers
 * (and RDMA_ENDPOINT offers) get a working endpoint;
 * tw__fabric_peer_usable() tells the owner of an old peer to fall back to
 * inline. A retired rail closes, and its slot is reused, once no peer,
 * registration or transfer refers to it (an owner with a registration
 * cache drops the rail's idle registrations: tw__fabric_retired_rails()).
 * A wedged rail is never closed and a plane with an abandoned thread is
 * not freed at close (that thread may still return into it).
 *
 * Closing with operations outstanding (libfabric 1.17 tcp;ofi_rxm): an
 * fi_read the peer never answered (link cut, peer frozen) cannot be
 * cancelled, and fi_close() of an endpoint that still holds one crashes
 * inside the provider (SIGSEGV, seen in the netns fault test). So
 * tw__fabric_close() first stops every transfer and drains for at most
 * 2 x drain_ns; a non-shm rail on which the provider still holds
 * operations after that is *kept*: none of its objects (endpoint, CQ, AV,
 * registrations, domain) is closed or called again, and the plane object
 * with the transfers the provider points into stays allocated on the same
 * list as planes with an abandoned thread. The registrations those
 * operations use are not handed back (on_idle does not run). Nothing moves
 * into the buffer afterwards: tcp moves data only inside our own calls
 * (FI_PROGRESS_MANUAL) and no thread calls the kept rail again. The cost is
 * a bounded leak (one rail: a few MB of provider buffers and its sockets)
 * per plane closed in that state, in exchange for never crashing; a shm
 * rail closes as before (its peer writes our memory itself, see
 * tw__fabric_mr_release()).
 *
 * Kept for the life of the process: what a wedged, retired or kept rail
 * must never hand back is not freed but owned, from tw__fabric_close() on,
 * by the fabric module itself (plane.c), on two process-wide lists behind
 * one mutex: the planes kept above (with their rails, transfers and the
 * libfabric objects they hold), and every registration released with
 * operations a shm peer never answered or a kept rail still holds
 * (tw__fabric_mr_release() whose on_idle cannot run: the struct with its
 * on_idle argument, i.e. the owner's buffer and, for the registration
 * cache, its handles). Nothing on these lists is ever freed, called or
 * reused: the process's exit releases them. They are listed so that they
 * stay reachable (leak checkers report real leaks only; `make asan` runs
 * without suppressions) and counted (tw__fabric_kept()). Each entry is
 * bounded (one plane of a few KiB plus one rail's provider buffers, or one
 * transfer's buffer) and appears only after a peer died or a link broke
 * with operations in flight.
 *
 * Errors: 0 or a negative tensorwire code (include/tensorwire/error.h).
 * -errno values come straight from libfabric (FI_E* equal errno values).
 * A human-readable reason is kept in the plane (tw__fabric_errmsg()) or, for
 * transfers, in the completion.
 */
#ifndef TW_FABRIC_H
#define TW_FABRIC_H

#include <stddef.h>
#include <stdint.h>

#include "common/clock.h" /* tw__now_ns(): the clock of deadline_ns */
#include "proto/proto.h"
#include "common/verdict.h"

#define TW_FABRIC_MAX_RAILS 8u /* usable rails at once; also the most RDMA_ENDPOINT entries */
/* Rail slots of a plane: the usable rails plus retired ones, which keep
 * their slot until the plane closes (see "Wedged and retired rails"). */
#define TW_FABRIC_MAX_SLOTS 32u
#define TW_FABRIC_ERRMSG_LEN 512u

/* Defaults from bench/bench_fabric.c --sweep (docs/performance.md): on
 * loopback tcp and shm every chunk >= 256 KiB with depth >= 2 lies within
 * the host's noise; 1 MiB x 8 was at or near the top for both providers
 * and is what RDMA NICs usually want (enough bytes in flight to cover a
 * round trip). Re-tune on real NICs with --sweep. */
#define TW_FABRIC_DEFAULT_CHUNK (1u << 20)
/* shm moves a transfer whose local memory is CUDA memory by CUDA IPC: the
 * peer opens an IPC handle of the local buffer and does one device copy
 * per operation, so each operation costs a command round trip through the
 * peer and 1 MiB operations cap a GPU -> GPU write far below the copy
 * engine (docs/performance.md, #12). Such transfers use operations of up
 * to this size unless a chunk size was configured. */
#define TW_FABRIC_SHM_DEVICE_CHUNK (256u << 20)
/* Bytes per RMA operation of one transfer (pure): the configured chunk
 * if one was configured, else the default, raised to device_chunk
 * (TW_FABRIC_SHM_DEVICE_CHUNK) when the rail is shm and the local memory
 * is CUDA memory; never above the provider's max_msg. */
size_t tw__fabric_xfer_chunk(size_t chunk, int configured, size_t device_chunk, int is_shm,
                             int local_device, size_t max_msg);
#define TW_FABRIC_DEFAULT_DEPTH 8u
#define TW_FABRIC_MAX_DEPTH 256u
/* How long a timed-out or cancelled transfer waits for its operations to
 * come back (cancelled or completed) before it completes with buffer_busy. */
#define TW_FABRIC_DEFAULT_DRAIN_NS (200ull * 1000 * 1000)
/* The longest a single libfabric call may take before its rail is declared
 * wedged. Legitimate calls take microseconds to a few milliseconds (a CQ
 * read that progresses a queue of 1 MiB copies); 1 s leaves ample room,
 * also on a loaded host under sanitizers. A control call (registration,
 * address vector) waits for a wedged rail's io mutex at most this long. */
#define TW_FABRIC_DEFAULT_WEDGE_NS (1000ull * 1000 * 1000)
/* The same for rails other than shm when wedge_ns is left at 0. Only shm
 * calls can spin forever on a lock a dead peer held; a tcp call that is
 * merely slow (the mover descheduled on a loaded host: 32 RDMA clients on
 * 2 cores passed 1 s, and every transfer of the rail was failed) must not
 * retire its rail, while a call that truly hangs is still caught. */
#define TW_FABRIC_DEFAULT_NET_WEDGE_NS (10000ull * 1000 * 1000)
/* How long the mover keeps polling after the last completion or wake-up
 * before it sleeps on the CQ wait fds (rails that have one: tcp; shm keeps
 * polling, yielding, while work is live). Long enough that back-to-back
 * small operations of a busy peer do not pay a thread wake-up each, short
 * enough that many planes on few cores do not starve each other
 * (docs/performance.md, "Batched RDMA"). The environment variable
 * TW_FABRIC_SPIN_US overrides it for every plane of the process (0..100000
 * microseconds), for tuning on a given host. */
#define TW_FABRIC_DEFAULT_SPIN_NS (100ull * 1000)

struct tw_fabric;
struct tw_fabric_peer;
struct tw_fabric_mr;
struct tw_fabric_xfer;

struct tw_fabric_config {
    /* "auto": open every usable provider among verbs, efa, shm, tcp (in that
     * preference order; each one that fails is recorded with its reason).
     * "none": no data plane (tw__fabric_open() returns TW_ENOFABRIC).
     * Anything else: a comma-separated list of provider names, matched
     * against libfabric's name either fully ("tcp;ofi_rxm") or by its core
     * provider ("tcp", "verbs"). NULL means "auto". */
    const char *provider;
    /* Local address or interface to bind non-shm rails to (e.g. "127.0.0.1",
     * a NIC's IP); NULL lets the provider choose. */
    const char *node;
    size_t chunk_size; /* bytes per RMA operation; 0 = TW_FABRIC_DEFAULT_CHUNK (and
                          TW_FABRIC_SHM_DEVICE_CHUNK for CUDA memory on shm) */
    unsigned depth;    /* operations in flight per transfer; 0 = default */
    uint64_t drain_ns; /* 0 = TW_FABRIC_DEFAULT_DRAIN_NS */
    int threaded;      /* 1: start the data-mover thread and the watchdog */
    uint64_t wedge_ns; /* a libfabric call longer than this wedges its rail;
                          0 = TW_FABRIC_DEFAULT_WEDGE_NS on shm rails and
                          TW_FABRIC_DEFAULT_NET_WEDGE_NS on the others */
    int hmem;          /* 1: ask for FI_HMEM (device memory registration);
                          a provider that has none still opens, as a rail
                          for host memory only (tw__fabric_describe names
                          it) */
    uint64_t spin_ns;  /* mover polling after activity; 0 = TW_FABRIC_DEFAULT_SPIN_NS
                          (or TW_FABRIC_SPIN_US) */
    /* 1: on shm rails, reads of host memory from a peer whose process may
     * be attached are copied with process_vm_readv() by the mover, outside
     * libfabric (xfer.c, "Reads on shm by cross-memory attach"); the
     * target's key is then not checked. The client library's plane sets
     * it (its gets), and tensorwired's (its pull puts over shm,
     * proto/path.c PULL_SHM_CMA). Whole transfers that became ready
     * together are copied in groups of at least TW_FABRIC_CMA_GROUP reads
     * (a group ends with a transfer), and each group completes before the
     * next is copied. */
    int cma_reads;
    /* With hmem: len bytes of CUDA device `device` memory (the caller's,
     * only used during tw__fabric_open) that each rail opened with FI_HMEM
     * must register; a rail that refuses is reopened without FI_HMEM.
     * FI_HMEM has a cost where it buys nothing (libfabric's shm turns
     * cross-memory attach off for host memory on such an endpoint). NULL:
     * FI_HMEM is kept unproved. */
    void *hmem_probe; /* TW__HMEM_PROBE_BYTES is the size callers use */
    size_t hmem_probe_len;
    int hmem_probe_device;
};

/* Size of the CUDA buffer callers pass as hmem_probe (one GPU page). */
#define TW__HMEM_PROBE_BYTES ((size_t)64 * 1024)

/* Opens a data plane. On failure returns a negative code (TW_ENOFABRIC when
 * no provider could be opened, or with "none") and writes why, for every
 * candidate that failed, into err (if err != NULL, NUL-terminated).
 * *out is set only on success. */
int tw__fabric_open(const struct tw_fabric_config *cfg, struct tw_fabric **out, char *err,
                    size_t errlen);

/* Stops the mover, fails and drains every transfer, removes every peer,
 * closes every registration still open, closes the rails and frees fab.
 * Completions not popped are discarded. NULL is ignored. */
void tw__fabric_close(struct tw_fabric *fab);

/* The last error detail of this plane (static buffer inside fab; valid
 * until the next call on fab). */
const char *tw__fabric_errmsg(const struct tw_fabric *fab);

/* One line describing the opened rails and the candidates that failed,
 * e.g. "rails: shm, tcp;ofi_rxm; failed: verbs (fi_getinfo: No data
 * available)". Valid as long as fab. */
const char *tw__fabric_describe(const struct tw_fabric *fab);

/* --- Addressing (RDMA_ENDPOINT) ---------------------------------------- */

/* Our own address on one rail, owned by the plane; valid as long as fab. */
struct tw_fabric_addr {
    char provider[TW_MAX_PROVIDER_LEN + 1]; /* libfabric prov_name, NUL-terminated */
    uint32_t addr_format;                   /* FI_SOCKADDR_IN, FI_ADDR_STR, ... */
    uint16_t addr_len;
    uint8_t addr[TW_MAX_FABRIC_ADDR_LEN]; /* fi_getname() bytes */
};

/* This host's id: the first 16 bytes of /proc/sys/kernel/random/boot_id
 * parsed as a UUID. Returns 0 or a negative errno / TW_EBAD_FIELD. */
int tw__fabric_host_id(uint8_t out[TW_HOST_ID_LEN]);
/* Same, from an explicit file (tests). */
int tw__fabric_host_id_from(const char *path, uint8_t out[TW_HOST_ID_LEN]);

/* Our rails in preference order: the entries of an RDMA_ENDPOINT OFFER.
 * Returns the count (1..TW_FABRIC_MAX_RAILS); *addrs points into fab. */
unsigned tw__fabric_local_addrs(const struct tw_fabric *fab, const struct tw_fabric_addr **addrs);

/* A borrowed wire view (struct tw_fabric_entry of proto.h) of a local address,
 * for the encoder. Valid as long as fab. */
void tw__fabric_addr_view(const struct tw_fabric_addr *a, struct tw_fabric_entry *view);

/*
 * Server side of RDMA_ENDPOINT: picks the first offered entry we can use
 * (same provider name as one of our rails; shm only when peer_host_id equals
 * our host id; address format must match), inserts the peer's address and
 * returns the peer and our address on that rail for the ACCEPT reply.
 * Returns 0, or TW_ENOFABRIC with a reason naming every rejected entry in
 * reason (NUL-terminated; <= TW_MAX_REASON_LEN fits a DECLINE) when none
 * fits, or another negative code when fi_av_insert fails.
 */
int tw__fabric_accept_offer(struct tw_fabric *fab, const uint8_t peer_host_id[TW_HOST_ID_LEN],
                            const struct tw_fabric_entry *entries, unsigned count,
                            struct tw_fabric_peer **peer, const struct tw_fabric_addr **ours,
                            char *reason, size_t reasonlen);

/* Client side of RDMA_ENDPOINT ACCEPT (or any explicit insert): inserts the
 * peer address on the rail whose provider name equals `provider`
 * (NUL-terminated). Returns 0, TW_ENOFABRIC (no such rail / wrong format),
 * or a negative errno from fi_av_insert. */
int tw__fabric_peer_insert(struct tw_fabric *fab, const char *provider, uint32_t addr_format,
                           const void *addr, size_t addr_len, struct tw_fabric_peer **peer);

/* Same, from a decoded RDMA_ENDPOINT ACCEPT entry (provider bytes need no
 * NUL). */
int tw__fabric_peer_insert_entry(struct tw_fabric *fab, const struct tw_fabric_entry *e,
                                 struct tw_fabric_peer **peer);

/* The host id the plane read at open (all zero if boot_id was unreadable),
 * for the host_id field of OFFER / ACCEPT. */
void tw__fabric_plane_host_id(const struct tw_fabric *fab, uint8_t out[TW_HOST_ID_LEN]);

/* Fails the peer's transfers still in flight (-ECONNABORTED, delivered as
 * usual), then removes its address once they have drained. The handle is
 * invalid after this call. NULL is ignored. */
void tw__fabric_peer_remove(struct tw_fabric_peer *peer);

/* Whether new transfers with this peer may use RDMA: 1, or 0 when its rail
 * was retired or wedged (then why, if not NULL, says why; NUL-terminated).
 * The peer's owner then moves its data inline. */
int tw__fabric_peer_usable(struct tw_fabric_peer *peer, char *why, size_t whylen);

/* The provider name of the rail a peer lives on ("tcp;ofi_rxm"). */
const char *tw__fabric_peer_provider(const struct tw_fabric_peer *peer);

/* 1 when this plane's reads of [addr, addr + len) in the peer's memory
 * would be copied by cross-memory attach (xfer.c: the plane has cma_reads,
 * the peer is on an shm rail with virtual addresses, its process is
 * verified) and the range's first and last byte can be read from its
 * process (one process_vm_readv of 2 bytes; an empty range needs none);
 * else 0 (GPU memory of a GPUDirect peer: EFAULT). Nothing is kept of the
 * bytes. A range found readable is remembered for the peer (512 of them,
 * by address), and so is the union of such ranges that touch within one
 * 2 MiB-aligned chunk (512 of those, by chunk): a later call for one at
 * the same address, no longer (a caller's buffer, put again), or for one
 * inside such a union (the next blocks of an arena: a KV batch has more
 * blocks than the 512 ranges) answers 1 without a system call. Were those
 * pages unmapped meanwhile and their addresses given to GPU memory, that
 * put is read instead of pushed: cross-memory attach gets EFAULT and the
 * read goes to libfabric (see xfer.c), which may fail it (shm 1.17: at
 * the deadline, without answering); tw__fabric_peer_cma_forget() drops
 * the range at addr and the union holding addr after a failed read, so
 * the next put there is looked at again. The peer's
 * owner calls both, from one thread. The first call for a peer takes
 * fab->lock and reads its /proc/PID/maps; later ones take no lock. */
int tw__fabric_peer_cma_readable(struct tw_fabric_peer *peer, uint64_t addr, uint64_t len);
/* 1 when this plane's reads from the peer are copied by cross-memory
 * attach (the plane has cma_reads, the peer is on an shm rail with virtual
 * addresses, its process is verified and has not refused an attach) and
 * one such copy succeeded already (the kernel's ptrace rules allow it:
 * Yama's ptrace_scope 1 lets /proc/PID/maps be read but not the memory),
 * so the peer's keys are not needed: a client may then ask for gets with
 * ATTACH_READ (protocol bit 7). Else 0. The first call for a peer takes
 * fab->lock; later ones take no lock. */
int tw__fabric_peer_attach_reads(struct tw_fabric_peer *peer);
void tw__fabric_peer_cma_forget(struct tw_fabric_peer *peer, uint64_t addr);

/* --- Memory registration (RDMA_REGISTER) ------------------------------- */

/* Access bits (combine). Remote bits are what the peer may do to the
 * region; local bits are what our own transfers do with it. Register with
 * the least: a pull source gets REMOTE_READ, a push destination
 * REMOTE_WRITE, our pull destination LOCAL_READ, our push source
 * LOCAL_WRITE (libfabric naming: the local buffer of an fi_read is FI_READ). */
#define TW_FABRIC_LOCAL_READ 0x1u   /* buffer receives our fi_read */
#define TW_FABRIC_LOCAL_WRITE 0x2u  /* buffer is the source of our fi_write */
#define TW_FABRIC_REMOTE_READ 0x4u  /* peer may fi_read it */
#define TW_FABRIC_REMOTE_WRITE 0x8u /* peer may fi_write it */
/* Not an access right: the memory is registered for this one use and
 * freed or reused before anyone registers it again (a staged get's host
 * copy), so the registration cache (mrcache.h) registers it directly and
 * the release revokes it, with no cache bookkeeping. */
#define TW_FABRIC_ONCE 0x10u

/* Memory kind of a registration (maps to enum fi_hmem_iface). */
enum tw_fabric_iface { TW_FABRIC_HOST = 0, TW_FABRIC_CUDA = 1 };

/* What the peer needs: exactly the RDMA_REGISTER payload. */
struct tw_fabric_rkey {
    uint64_t key;         /* rkey */
    uint64_t remote_addr; /* virtual address (FI_MR_VIRT_ADDR) or 0 (offset) */
    uint64_t length;
};

/* Registers [addr, addr + len) on the rail of `peer` (registrations are per
 * domain; a server registers per connection). len may be 0 (no libfabric
 * call; key 0). iface TW_FABRIC_CUDA needs a rail opened with FI_HMEM and
 * `device` the CUDA device ordinal. Honours the rail's MR mode: provider
 * keys or unique requested keys, virtual or offset addressing, endpoint
 * binding, local descriptors. The registration must be released with
 * tw__fabric_mr_deregister(). Returns 0 or a negative code (detail in
 * tw__fabric_errmsg()). */
int tw__fabric_mr_register(struct tw_fabric_peer *peer, void *addr, size_t len, unsigned access,
                           enum tw_fabric_iface iface, int device, struct tw_fabric_mr **mr);

/* Releases the registration: fi_close() of the MR, which revokes its key
 * (the peer's later RMA with it fails, see docs/testing.md "Fabric" for how
 * each provider reports that). If a transfer still uses it as its local
 * buffer (running, or abandoned operations: buffer_busy), the MR stays open
 * until that drained and is closed then; otherwise at once. The handle is
 * invalid after this call. NULL is ignored. */
void tw__fabric_mr_deregister(struct tw_fabric_mr *mr);

/* Deregisters like tw__fabric_mr_deregister() and calls on_idle(arg) once
 * no operation can touch the memory any more: at once if no transfer holds
 * the registration, else when the last abandoned operation drained (or at
 * tw__fabric_close(): on tcp the closed sockets guarantee nothing arrives
 * any more; on shm the peer writes our memory itself, so a buffer whose
 * operations were never answered is NOT handed back at close: on_idle
 * never runs and the registration with its arg moves to the process-wide
 * kept list, see "Kept for the life of the process"). Free or reuse the
 * buffer in on_idle, never before, when a
 * completion had buffer_busy set. on_idle runs on any thread with the
 * plane's lock held: it must not call tw__fabric_* functions. */
void tw__fabric_mr_release(struct tw_fabric_mr *mr, void (*on_idle)(void *arg), void *arg);

/* Key, address and length to send in RDMA_REGISTER. */
struct tw_fabric_rkey tw__fabric_mr_rkey(const struct tw_fabric_mr *mr);
/* The access bits it was registered with (TW_FABRIC_*). */
unsigned tw__fabric_mr_access(const struct tw_fabric_mr *mr);
/* fi_mr_desc() of the registration (NULL for a 0-byte one). */
void *tw__fabric_mr_desc(const struct tw_fabric_mr *mr);

/* Same as tw__fabric_mr_register() on rail `rail` (0 .. count of
 * tw__fabric_local_addrs() - 1) instead of a peer's: a registration made on
 * a rail serves every peer of that rail (the registration cache,
 * src/fabric/mrcache.h, registers per rail). TW_EINVAL for a bad rail. */
int tw__fabric_mr_register_rail(struct tw_fabric *fab, unsigned rail, void *addr, size_t len,
                                unsigned access, enum tw_fabric_iface iface, int device,
                                struct tw_fabric_mr **mr);

/* A CUDA range named by a dma-buf (cuMemGetHandleForAddressRange): the fd
 * (borrowed: the caller closes it after the registration) and the offset of
 * the registered address inside it. */
struct tw_fabric_dmabuf {
    int fd;
    uint64_t offset;
};

/* 1 when this build's libfabric headers have FI_MR_DMABUF (1.20 or newer);
 * Debian 12's 1.17 has not, and then the call below fails with -ENOTSUP. */
int tw__fabric_dmabuf_built(void);

/* Like tw__fabric_mr_register_rail() for len bytes of CUDA device `device`
 * memory at addr, named by the dma-buf db (fi_mr_regattr with FI_MR_DMABUF:
 * the provider imports the buffer instead of resolving a pointer). The
 * rail must have been opened with FI_HMEM. Returns 0 or a negative code (-ENOTSUP
 * without FI_MR_DMABUF at build time; the provider's code when it refuses). */
int tw__fabric_mr_register_dmabuf_rail(struct tw_fabric *fab, unsigned rail, void *addr, size_t len,
                                       unsigned access, int device,
                                       const struct tw_fabric_dmabuf *db, struct tw_fabric_mr **mr);

/* Rail slots in use (usable and retired rails): valid rail indexes are
 * 0 .. this - 1. */
unsigned tw__fabric_rail_slots(struct tw_fabric *fab);

/* Retires the rail in slot `rail` by hand (as a dead shm peer would):
 * no new peers or transfers on it, a replacement opens (threaded planes),
 * and it closes once unused. For tests and operators refreshing an
 * endpoint. TW_EINVAL for a closed or unknown slot. */
int tw__fabric_rail_retire(struct tw_fabric *fab, unsigned rail, const char *why);

/* One line about the rail in slot `rail` for logs, e.g. "shm: wedged: a
 * libfabric call on this rail has not returned for 1012 ms (...)" or
 * "tcp;ofi_rxm: in use"; NUL-terminated in buf. */
void tw__fabric_rail_status(struct tw_fabric *fab, unsigned rail, char *buf, size_t len);

/* Bit k set: the rail in slot k is retired (or wedged) and still open.
 * An owner caching registrations per rail should drop that rail's idle
 * ones (tw__fabric_mrcache_drop_rail()) so the rail can close. */
uint32_t tw__fabric_retired_rails(struct tw_fabric *fab);

/* The rail slot index a peer lives on (at open, slots follow the order of
 * tw__fabric_local_addrs(); replacements take new slots). */
unsigned tw__fabric_peer_rail(const struct tw_fabric_peer *peer);

/* --- Transfers --------------------------------------------------------- */

enum tw_fabric_op {
    TW_FABRIC_PULL = 1, /* fi_read: remote -> local */
    TW_FABRIC_PUSH = 2  /* fi_write: local -> remote */
};

struct tw_fabric_xfer_desc {
    enum tw_fabric_op op;
    struct tw_fabric_peer *peer;
    struct tw_fabric_mr *local;   /* registered with LOCAL_READ (pull) / LOCAL_WRITE (push) */
    uint64_t local_offset;        /* byte offset inside `local` */
    struct tw_fabric_rkey remote; /* from the peer's RDMA_REGISTER */
    uint64_t length;              /* bytes to move; <= remote.length and fits `local` */
    uint64_t deadline_ns;         /* absolute tw__now_ns(); 0 = none */
    uint64_t cookie;              /* caller's, returned in the completion */
    /* Longest time without any operation completing (no byte moved)
     * before the transfer fails with TW_ETIMEDOUT; 0 = none. Unlike
     * deadline_ns it extends while bytes move: the client's
     * request_timeout_ms ("longest wait without any progress"). */
    uint64_t stall_ns;
    /* PULL only: the peer sent its RDMA_REGISTER for a get asked with
     * ATTACH_READ (protocol bit 7), so its key may be void (rkey 0, nothing
     * registered) where the region is host memory. Read by cross-memory
     * attach; should the peer's process refuse that (EPERM) the transfer
     * fails instead of going to libfabric. A range the process cannot give
     * (EFAULT: GPU memory, which the peer registers with a real key) goes
     * to libfabric as usual. Submitting one needs host memory in `local`
     * and an shm peer on a plane with cma_reads (else TW_EINVAL), whose
     * process has not refused (else -EPERM). */
    int attach_only;
};

struct tw_fabric_completion {
    uint64_t cookie;
    int status;     /* 0, TW_ETIMEDOUT, TW_ECANCELLED, -ECONNABORTED, or a
                       negative errno from the provider's error completion */
    uint64_t bytes; /* bytes moved by completed chunks */
    /* 1 when the transfer ended (deadline, cancel) while the provider still
     * held some of its operations, which fi_cancel() could not take back
     * (tcp;ofi_rxm cannot cancel RMA). They may still complete and write
     * into the local buffer later: release its registration with
     * tw__fabric_mr_release() and free the buffer in on_idle. */
    int buffer_busy;
    char msg[TW_FABRIC_ERRMSG_LEN]; /* empty on success; else fi_cq_strerror() etc. */
};

/* The RDMA_DONE status for a completion: 0, TIMEOUT, CANCELLED,
 * SHUTTING_DOWN, or INTERNAL for provider and connection errors. */
uint32_t tw__fabric_status_to_wire(int status);

/* Starts an asynchronous transfer. On success (0) the plane owns it and
 * queues exactly one completion (tw__fabric_done_pop(); the event fd becomes
 * readable) — also for 0 bytes. *xfer (may be NULL) stays valid for
 * tw__fabric_xfer_cancel() until that completion is popped. On failure
 * nothing is queued. Needs a threaded plane or tw__fabric_progress() calls. */
int tw__fabric_xfer_submit(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                           struct tw_fabric_xfer **xfer);

/* Reads len bytes of the peer's region `remote` (from its start) into host
 * memory buf now, in the calling thread, where the plane would copy them
 * by cross-memory attach anyway (see tw__fabric_peer_cma_readable) and len
 * is at most TW_FABRIC_READ_NOW_MAX: no registration of buf, no hand-off to
 * the mover and back, so a small read costs one system call instead of
 * two thread wake-ups. Returns 1 with *c filled (cookie; status 0 and
 * bytes = len, or the failure, e.g. the peer's process is gone) when the
 * read is over: nothing is queued. Returns 0 when it is not eligible or
 * the range cannot be read that way (EFAULT: GPU memory; EPERM): submit a
 * transfer instead. Why 256 KiB: on the 2-core VM 256 KB puts over shm ran
 * 1.6-2x faster this way, 1 MiB ones ~10% and 4 MiB ones no faster, while a
 * longer copy holds up everything else the caller's loop serves. */
#define TW_FABRIC_READ_NOW_MAX (256u * 1024u)
/* ... and only while the caller has at most this many transfers in flight
 * (this one included): the copy then runs on the caller's thread instead of
 * beside it. On the H200 host (16 cores) reading every 32 KiB get of 64 in
 * flight in the client's own thread fell from 136-143k to 76-83k ops/s,
 * and the KV batch get from x0.61-0.63 to x0.35-0.38 of one tensor, while
 * one put at a time went from 76 to 28 us (docs/performance.md). */
#define TW_FABRIC_READ_NOW_MAX_INFLIGHT 2
/* ... or while the caller's plane has at least this many of its transfers
 * in flight and the caller may run on more than one CPU: the mover, which
 * copies the reads of those one after the other, is the bottleneck, and
 * the caller (idle about half of the time, waiting for it) copies this one
 * beside it. H200 host, KV-shaped batch gets (40,960 x 32 KiB, 1.34 GB)
 * over shm: 4.3-5.4 GB/s with the mover copying all, 5.9-8.0 this way;
 * 32 KiB gets with 64 in flight 227-273k against 246-293k ops/s (backlogs
 * of 8 and 16 measured slower; docs/performance.md, "The client copies
 * beside its mover"). A window below it (16 in flight) never reaches it;
 * a client pinned to one CPU does not (there it ran at 0.73x). */
#define TW_FABRIC_READ_NOW_BACKLOG 32u
int tw__fabric_peer_read_now(struct tw_fabric_peer *peer, void *buf, uint64_t len,
                             const struct tw_fabric_rkey *remote, uint64_t cookie,
                             struct tw_fabric_completion *c);

/* Asks the transfer to stop: its completion will carry `status` (e.g.
 * TW_ECANCELLED when the peer sent ERROR) unless it already finished. The
 * outstanding operations are cancelled and drained before it completes. */
void tw__fabric_xfer_cancel(struct tw_fabric_xfer *xfer, int status);

/* Blocking transfer for a client: submits and returns when it completed or
 * failed (its deadline included). Returns c->status; c may be NULL.
 * tw__fabric_xfer_run() is tw__fabric_xfer_start() then
 * tw__fabric_xfer_wait(). */
int tw__fabric_xfer_run(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                        struct tw_fabric_completion *c);
/* The same in two steps, so that a caller keeps several transfers in
 * flight and waits for them one by one (the pipelined pull into GPU
 * memory reads its next chunk while it waits for this one). No completion
 * is queued for such a transfer (tw__fabric_done_pop() never returns it);
 * the caller owns *xfer until tw__fabric_xfer_wait(), which must be
 * called exactly once for it (tw__fabric_xfer_cancel() before it stops
 * it early), and before tw__fabric_close(). On failure to start (nonzero,
 * c filled when not NULL) *xfer is NULL and nothing is to be waited for. */
int tw__fabric_xfer_start(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                          struct tw_fabric_xfer **xfer, struct tw_fabric_completion *c);
int tw__fabric_xfer_wait(struct tw_fabric *fab, struct tw_fabric_xfer *xfer,
                         struct tw_fabric_completion *c);

/* eventfd (non-blocking) that becomes readable when completions are queued.
 * Owned by the plane: do not close it. Reading it is optional: the loop
 * should drain tw__fabric_done_pop() until it returns 0 either way. */
int tw__fabric_event_fd(const struct tw_fabric *fab);

/* Pops one finished asynchronous transfer into *c. Returns 1 if one was
 * popped, 0 if none is pending. The xfer handle is freed by the pop. */
int tw__fabric_done_pop(struct tw_fabric *fab, struct tw_fabric_completion *c);

/* Pops up to max finished transfers into c[0..) under one lock; returns
 * how many. An empty look makes no system call. */
size_t tw__fabric_done_pop_many(struct tw_fabric *fab, struct tw_fabric_completion *c, size_t max);

/* Polls every rail once and advances transfers, on an unthreaded plane
 * (one caller at a time progresses; others return 0). On a threaded plane
 * the mover does this: returns 0. Returns the number of completions
 * processed. */
int tw__fabric_progress(struct tw_fabric *fab);

/* Counters for STATS and tests. */
struct tw_fabric_stats {
    uint64_t xfers_done, xfers_failed, bytes, ops_posted, ops_failed;
    unsigned xfers_active, mrs_open, peers;
    unsigned stuck_ops; /* ops of abandoned transfers the provider still holds */
    unsigned rails_retired, rails_wedged, rails_reopened;
    unsigned rails_closed;      /* retired rails closed once unused (slot free again) */
    unsigned threads_abandoned; /* mover threads left inside a wedged call */
    uint64_t cma_reads;         /* reads done by cross-memory attach (cma_reads) */
    uint64_t cma_calls;         /* the mover's process_vm_readv calls for them (batched) */
    uint64_t reads_now;         /* of those, whole transfers read by tw__fabric_peer_read_now */
    uint64_t mrs_made;          /* registrations made (monotonic; mrs_open: held now) */
    uint64_t ops_joined;        /* operations posted inside another's (xfer.c, joined) */
    uint64_t joins;             /* libfabric operations that carried two or more of ours */
    uint64_t rounds;            /* progress rounds */
    uint64_t looks;             /* transfers those rounds looked at (xfer.c, fab->ready) */
};
void tw__fabric_stats(struct tw_fabric *fab, struct tw_fabric_stats *st);

/* Reads by cross-memory attach per group (cma_reads above). 64 small
 * reads copied before any completed made a window of 64 requests move
 * in lockstep: 32 KiB pull puts over shm on the H200 at 0.48-0.69x the
 * raw read loop, 0.77-0.90x in groups of 16, same calls (docs/performance.md,
 * "Session of 2026-12-04"). */
#define TW_FABRIC_CMA_GROUP 16u

/* A progress round looks at the transfers something happened to (xfer.c,
 * fab->ready); every active one is looked at once per this period as well,
 * for its deadline and stall limit, which therefore hold to within it. */
#define TW_FABRIC_SWEEP_NS (10ull * 1000 * 1000)

/* --- Target-side activity ---------------------------------------------
 *
 * A peer that reads or writes our registered memory produces no completion
 * here, so an owner waiting for the peer's word that it finished (a client
 * whose put the server pulls, waiting for RDMA_DONE) sees no progress of
 * its own. On rails with a CQ wait fd (tcp;ofi_rxm) the peer's requests
 * make that fd readable before our progress serves them: while watched,
 * the mover looks at the wait fds (poll, no wait) before each poll round
 * and after each sleep and counts every look that found one readable. A
 * counter that moves means the peer is still asking for bytes. Rails
 * without a wait fd (shm), and NIC-offloaded RMA (verbs, efa: the NIC
 * serves reads without any call of ours), give no such signal. */

/* 1 when target-side activity on the peer's rail is observable (its rail
 * has a CQ wait fd and a mover thread runs), else 0. */
int tw__fabric_target_observable(const struct tw_fabric_peer *peer);
/* Starts (+1) or stops (-1) watching; the looks cost one poll() per mover
 * round, only while someone watches. */
void tw__fabric_target_watch(struct tw_fabric *fab, int delta);
/* The count of looks that found target-side activity (monotonic). */
uint64_t tw__fabric_target_events(struct tw_fabric *fab);

/* What the fabric module keeps for the rest of the process ("Kept for the
 * life of the process" above), summed over every plane ever closed. */
struct tw_fabric_kept {
    unsigned planes; /* closed planes kept (abandoned thread or kept rail) */
    unsigned mrs;    /* registrations never handed back */
    uint64_t bytes;  /* their registered bytes */
};
void tw__fabric_kept(struct tw_fabric_kept *out);

/* Test hook: while paused, the mover thread makes no progress (a stalled
 * peer). Only meaningful on threaded planes. Pausing returns once the
 * mover is asleep (at most 2 s), so nothing is progressed after it. */
void tw__fabric_pause(struct tw_fabric *fab, int paused);

/* Test hook: hook(arg, rail) runs on the progressing thread inside the
 * watchdog's window of every libfabric call (lock dropped, call stamped),
 * just before the call: a hook that blocks simulates a call that does not
 * return. NULL removes it. */
void tw__fabric_set_call_hook(struct tw_fabric *fab, void (*hook)(void *arg, unsigned rail),
                              void *arg);

#endif
