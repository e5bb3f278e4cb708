/*
 * Private structures of the data plane, shared by the files of src/fabric/
 * only. Everything here is protected by tw_fabric.lock unless said otherwise.
 *
 *   rail.c     provider selection, opening and closing rails
 *   addr.c     host id, local addresses, offer/accept, peers
 *   mr.c       memory registration and key revocation
 *   xfer.c     the RMA engine: chunking, completions, deadlines, draining
 *   mover.c    the data-mover thread, eventfd and completion queue
 *   wedge.c    the watchdog: wedged libfabric calls, retiring and reopening
 *              rails
 *
 * Locks: fab->lock protects tensorwire's state. Each rail's io mutex
 * serialises every call into its domain (opened FI_THREAD_DOMAIN). Data
 * calls that may not return (fi_read, fi_write, fi_cq_read, fi_cancel) run
 * on the progressing thread between call_begin() and call_end() (xfer.c):
 * fab->lock dropped, io held, the call stamped for the watchdog. Control
 * calls (registration, address vector, fi_trywait) are made with fab->lock
 * held and take io with tw__fabric_io_lock(), which gives up when the rail
 * is wedged. So the order is fab->lock -> io for control calls, and a
 * thread holding io never waits for fab->lock.
 */
#ifndef TW_FABRIC_INT_H
#define TW_FABRIC_INT_H

#include <pthread.h>
#include "fabric/fi_api.h"
#include <sched.h>
#include <stdarg.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "fabric/fabric.h"

#define TW_FABRIC_API FI_VERSION(1, 17)
/* shm: address slots of dead peers kept before the rail is replaced (of
 * the 256 an endpoint has). */
#define TW_FABRIC_SHM_DEAD_SLOTS 64u
/* shm: how long posts to a peer may be refused with nothing in flight
 * before the connection is taken as broken (xfer.c refused_too_long). A
 * live peer that is merely not scheduled (two CPU burners beside `ctest
 * -j2` on 2 cores) refuses too until its progress answers our connection
 * request; 1 s was seen to pass that way (test_fabric_rma_shm), so the
 * limit is 5 s: still far inside any transfer deadline. */
#define TW_FABRIC_SHM_REFUSED_NS (5000ull * 1000 * 1000)

/* Intrusive doubly linked list. */
struct tw_fabric_link {
    struct tw_fabric_link *prev, *next;
};

static inline void link_init(struct tw_fabric_link *h)
{
    h->prev = h->next = h;
}
static inline int link_empty(const struct tw_fabric_link *h)
{
    return h->next == h;
}
static inline void link_add_tail(struct tw_fabric_link *h, struct tw_fabric_link *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}
static inline void link_del(struct tw_fabric_link *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* Moves every node of src to the end of dst; src is left empty. */
static inline void link_splice_tail(struct tw_fabric_link *dst, struct tw_fabric_link *src)
{
    if (link_empty(src))
        return;
    src->next->prev = dst->prev;
    dst->prev->next = src->next;
    src->prev->next = dst;
    dst->prev = src->prev;
    link_init(src);
}
#define TW_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

struct tw_fabric_rail {
    struct tw_fabric *fab;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_ep *ep;
    struct fid_cq *cq;
    struct fid_av *av;
    int wait_fd;       /* CQ wait fd (FI_WAIT_FD) or -1: then poll with back-off */
    uint64_t mr_mode;  /* what the provider demands (subset of what we support) */
    uint64_t next_key; /* next requested key when !FI_MR_PROV_KEY; never reused */
    size_t max_msg;    /* ep_attr->max_msg_size */
    int is_shm;
    int hmem;           /* opened with FI_HMEM: may register device memory (mr.c) */
    char hmem_why[160]; /* FI_HMEM asked but dropped: the refused CUDA probe */
    /* Retired: no new peers, no new transfers (a replacement rail of the
     * same provider is opened in another slot); transfers already running
     * continue. Wedged (implies retired): a libfabric call on this rail
     * did not return within wedge_ns; nothing touches the rail's endpoint,
     * CQ or address vector any more and it is never closed. */
    int retired; /* set under fab->lock (__atomic); tw__fabric_peer_usable reads it without */
    int wedged;  /* read without fab->lock by io waiters: __atomic */
    pthread_mutex_t io;
    unsigned pref;       /* preference position (order of the offer) */
    unsigned dead_slots; /* shm: address slots kept for dead peers (addr.c) */
    char retire_why[256];
    /* Operations of finished (abandoned) transfers the provider still
     * holds. shm (libfabric 1.17) answers RMA in order, so while one of
     * these is unanswered every later operation on this endpoint waits
     * behind it: for good if its peer died. */
    unsigned stuck_ops;
    /* Kept: the plane closed while the provider still held operations on
     * this (non-shm) rail. libfabric 1.17 tcp;ofi_rxm crashes in fi_close()
     * of an endpoint with RMA outstanding, so nothing of the rail (endpoint,
     * CQ, AV, MRs, domain) is closed or called any more: it is left open on
     * purpose, like a wedged rail, with its plane on the kept list. */
    int kept;
    struct tw_fabric_addr addr;
};

#define TW_FABRIC_CMA_RANGE_BITS 7 /* 128 sets of 4 ranges remembered per peer */
#define TW_FABRIC_CMA_WAYS 4
#define TW_FABRIC_CMA_CHUNK_SHIFT 21 /* extents stay within one 2 MiB-aligned chunk */
struct tw_fabric_cma_set {
    uint64_t lo[TW_FABRIC_CMA_WAYS], hi[TW_FABRIC_CMA_WAYS]; /* [lo, hi); lo == hi: empty */
    uint8_t next;                                            /* the way replaced next */
};

struct tw_fabric_peer {
    struct tw_fabric_rail *rail;
    fi_addr_t fi_addr;
    uint32_t addr_format;
    size_t addr_len;
    uint8_t addr[TW_MAX_FABRIC_ADDR_LEN];
    unsigned refs; /* 1 (owner) + transfers */
    int pid;       /* shm peer named by tensorwire, else 0 */
    uint64_t alive_checked_ns;
    int stopped; /* shm peer process stopped: hold posts */
    /* cross-memory attach (xfer.c): 0 not checked yet, 1 ok, -1 no; set
     * under fab->lock, or by the mover alone (-1 on EPERM); read without the
     * lock by tw__fabric_peer_cma_readable: __atomic */
    int cma;
    /* 1 once a cross-memory-attach copy from the peer's process succeeded
     * (the kernel allows it, not only /proc/PID/maps): the condition for
     * asking with ATTACH_READ (tw__fabric_peer_attach_reads). __atomic */
    int cma_proven;
    /* What tw__fabric_peer_cma_readable() found readable (host memory of
     * the peer's), two tables of 1 << TW_FABRIC_CMA_RANGE_BITS sets, each
     * set replacing its oldest way: cma_ranges holds the ranges as asked
     * (set by the start's page: a client's ring of buffers), cma_extents
     * the unions of ranges that touch within one 2 MiB-aligned chunk (set
     * by the chunk: a batch from consecutive blocks of one arena, more of
     * them than cma_ranges holds). Allocated together at the first one
     * (18 KiB: a server's peers only), touched by the peer's owner only,
     * freed with the peer. */
    struct tw_fabric_cma_set *cma_ranges, *cma_extents;
    int removed; /* set under fab->lock (__atomic); read without it as rail->retired */
    struct tw_fabric_link node; /* fab->peers */
};

struct tw_fabric_mr {
    struct tw_fabric_rail *rail;
    struct fid_mr *mr; /* NULL for 0 bytes, and once revoked */
    void *desc;
    uint8_t *base; /* registered memory (the caller's) */
    uint64_t len;
    struct tw_fabric_rkey rkey;
    unsigned access;
    int cuda_device;            /* CUDA ordinal of the memory (FI_HMEM_CUDA), else -1 */
    unsigned refs;              /* 1 (owner, until deregister) + transfers using it locally */
    void (*on_idle)(void *arg); /* tw__fabric_mr_release() */
    int keep_on_close;          /* a shm peer may still write it: never hand back */
    /* Registration cache (mrcache.c): a cached remote registration does
     * not count in fab->remote_mrs by itself, only while handles expose
     * it (exposed of them), so an idle cache does not keep the mover
     * spinning. */
    int quiet;
    unsigned exposed;
    void *on_idle_arg;
    struct tw_fabric_link node; /* fab->mrs, fab->idle_mrs while closing, or the
                                   process-wide kept list (tw__fabric_mr_keep) */
};

/* One RMA operation slot; fi_context2 first: libfabric may use it. */
struct tw_fabric_rma {
    struct fi_context2 ctx;
    struct tw_fabric_xfer *xfer;
    uint64_t off, len;
    int busy;
    int fresh; /* reserved this round, not posted yet (xfer.c post_batch) */
    /* Posted as part of one libfabric operation with others (xfer.c,
     * "Joined operations"): the operation's context is the first one's
     * ctx, and join_next links the rest in address order. */
    int joined;
    struct tw_fabric_rma *join_next;
};

struct tw_fabric_xfer {
    struct tw_fabric *fab;
    struct tw_fabric_xfer_desc d;
    size_t chunk;
    unsigned depth;
    uint64_t next_off;   /* next byte to post */
    uint64_t bytes_done; /* bytes of completed chunks */
    unsigned inflight;
    int status;   /* first error sticks */
    int stopping; /* no more posts; drain then finish */
    int cancel_sent;
    uint64_t stop_ns;
    uint64_t progress_ns;      /* first seen by the progressing thread (0 before), or the last
                                  operation completed (stall_ns) */
    uint64_t refused_since_ns; /* posts refused (EAGAIN) with nothing in flight since */
    int sync;                  /* tw__fabric_xfer_run() waits for it */
    int no_cma;                /* cross-memory attach hit EFAULT: libfabric reads the rest */
    ssize_t post_ret;          /* the post that stopped this round's posts, else 0 */
    unsigned post_posted;      /* operations posted this round */
    int finished;              /* completion produced */
    int popped;                /* completion consumed: free once drained */
    /* Orphan: a popped transfer whose shm peer process is gone while the
     * provider still holds its operations. Nobody can answer them any
     * more, so its buffer, registration and peer were let go; the struct
     * stays (the provider holds its op contexts) until its rail closes. */
    struct tw_fabric_rail *orphan_rail;
    /* Probe (tcp): a 1-byte repeat of the transfer's first operation,
     * posted on the same connection while abandoned operations to a
     * removed peer are held (xfer.c, probe_zombies()); probe_ns: last one. */
    struct tw_fabric_rma probe;
    uint64_t probe_ns;
    char msg[TW_FABRIC_ERRMSG_LEN];
    struct tw_fabric_link node; /* fab->active, fab->done, or fab->zombies */
    /* On fab->ready (or on the round's fab->walk / fab->skip): something
     * may be due (xfer.c, mark_ready). Only while active. */
    struct tw_fabric_link ready_node; /* linked to itself when on none */
    struct tw_fabric_rma ops[];
};

struct tw_fabric {
    pthread_mutex_t lock;
    pthread_cond_t done_cond; /* a sync transfer finished */
    /* Slots: rails[0 .. nrails-1]; retired rails keep their slot (peers and
     * registrations point into the array) and replacements take new ones. */
    struct tw_fabric_rail rails[TW_FABRIC_MAX_SLOTS];
    unsigned nrails; /* stored with __atomic (tw__fabric_rail_slots reads it unlocked) */
    struct tw_fabric_addr addrs[TW_FABRIC_MAX_RAILS]; /* usable rails, in preference order */
    unsigned naddrs;
    size_t chunk;
    int chunk_configured; /* chunk came from the config, not the default */
    size_t device_chunk;  /* CUDA memory on shm (tw__fabric_xfer_chunk) */
    int hmem_device;      /* with hmem: the CUDA device whose context progress uses */
    unsigned depth;
    uint64_t drain_ns;
    uint64_t spin_ns; /* mover.c: polling after the last activity */
    int cma_reads;    /* tw_fabric_config.cma_reads */
    int join_ops;     /* join adjacent operations of transfers (xfer.c); TW_FABRIC_JOIN=0: no */
    /* Reads done in the caller's thread (tw__fabric_xfer_read_now), which
     * takes no lock: __atomic, folded into the stats by tw__fabric_stats. */
    uint64_t now_reads, now_bytes;
    int hmem;
    uint8_t host_id[TW_HOST_ID_LEN];

    struct tw_fabric_link peers, mrs, active, done, zombies;
    /* The active transfers the progressing thread looks at next round
     * (xfer.c): new ones, ones an operation of came back or that were
     * stopped; every active one once per TW_FABRIC_SWEEP_NS (deadlines, stalls;
     * the last such round at swept_ns). */
    struct tw_fabric_link ready, walk, skip; /* walk, skip: a round's (xfer.c) */
    uint64_t swept_ns;
    struct tw_fabric_link idle_mrs; /* on_idle calls deferred until the rails closed */
    int closing;
    unsigned remote_mrs;      /* open registrations with remote access */
    uint64_t linger_until_ns; /* keep progressing after the last one closed */
    struct tw_fabric_stats st;

    /* Mover thread. */
    int threaded;
    pthread_t mover;
    int stop;
    int paused;
    /* progress_locked() runs on one thread at a time: the mover, or on an
     * unthreaded plane the thread that set this. */
    int progressing;
    int mover_running;  /* the current generation's mover has not exited */
    int mover_joinable; /* fab->mover may be joined (not detached) */

    /* Watchdog (wedge.c). The stamp of the data call window in progress is
     * read by the watchdog without fab->lock: __atomic. A counter, not a
     * clock: the progressing thread opens millions of windows a second and
     * the watchdog times them itself. */
    pthread_t watchdog;
    pthread_mutex_t wd_lock; /* the watchdog's sleep; never held with fab->lock */
    pthread_cond_t wd_cond;
    int wd_running, wd_stop;
    uint64_t wedge_ns;     /* shm rails (and all rails when configured) */
    uint64_t wedge_net_ns; /* other rails */
    unsigned gen;          /* mover generation: bumped when a mover is abandoned (__atomic) */
    uint64_t call_seq;     /* bumped at each call window; odd while one is open */
    unsigned call_rail, call_gen;
    unsigned abandoned;          /* mover threads stuck inside libfabric */
    unsigned reopen;             /* bit per slot: open a replacement for it */
    int reap_pending;            /* a retired rail may have become unused: close it */
    uint64_t zombies_checked_ns; /* last look for orphans (xfer.c) */
    void (*call_hook)(void *arg, unsigned rail); /* tests: runs inside the call window */
    void *call_hook_arg;
    /* Target-side activity (tw__fabric_target_watch()): while watched > 0
     * the mover looks at the rails' CQ wait fds before each poll round and
     * counts in target_events every look that found one readable. */
    unsigned target_watch;
    uint64_t target_events;
    int wake_fd;  /* eventfd: wakes the mover (submit, cancel, close) */
    int event_fd; /* eventfd: completions queued for the owner's loop */
    /* event_fd holds a count (written once when fab->done went from empty
     * to not empty, read back once the owner found it empty again): one
     * write and one read per burst of completions, not per transfer.
     * Written under the lock with __atomic stores; tw__fabric_done_pop_many
     * reads it without the lock (0: nothing queued). */
    int event_signaled;
    /* The mover is (about to be) blocked in poll/ppoll: a submit must
     * write wake_fd. While it runs it picks new transfers up by itself, so
     * a burst of submits costs no system call each. */
    int mover_asleep;
    /* Threads blocked in tw__fabric_lock() (__atomic): the progressing
     * thread lets them in before it takes fab->lock back (below). */
    unsigned lock_wanted;

    struct tw_fabric *kept_next; /* plane.c: closed planes kept for a stuck thread */
    char errmsg[TW_FABRIC_ERRMSG_LEN];
    char describe[1024];
    char open_failed[768]; /* providers that did not open, for describe */
};

/*
 * fab->lock hand-off. The progressing thread (the mover) drops fab->lock
 * around every libfabric call and between poll rounds and takes it back
 * at once; glibc's mutex is not fair, so a thread that found it held and
 * slept in the kernel was woken by each drop only to find it taken again
 * a few hundred nanoseconds later, before it got to run. Each acquisition
 * by the owner's event loop (a registration, a deregistration, a key
 * exposed, per request) then cost several futex round trips against a
 * polling mover (the H200 profile of small staged gets: mutex and futex
 * ~11% + most of the kernel's 26% of the server's event loop,
 * docs/performance.md). So everyone but the progressing thread takes the
 * lock with tw__fabric_lock(), which counts itself in fab->lock_wanted
 * while it waits and spins on trylock for up to TW_FABRIC_LOCK_SPIN_NS,
 * yielding the CPU after the first 2 us, before it sleeps (the mover lets
 * go within a poll round, and a waiter already awake takes the lock
 * without making the mover wait for its wake-up), and the progressing
 * thread retakes it with tw__fabric_relock(), which first lets the
 * counted waiters through: it spins (trylock) until none is left and the
 * lock is free, yielding the CPU after the first 2 us (on an
 * oversubscribed host the waiter needs it), and after
 * TW_FABRIC_HANDOFF_NS sleeps on the mutex like anyone else.
 */
#define TW_FABRIC_HANDOFF_NS 50000u
#define TW_FABRIC_LOCK_SPIN_NS 20000u
/* A spinner past this yields its CPU (the holder may need it). */
#define TW_FABRIC_SPIN_YIELD_NS 2000u

static inline void tw__fabric_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* Tries m with trylock for up to TW_FABRIC_LOCK_SPIN_NS. Returns 0 with
 * m held, or -1. The holders of fab->lock and of a rail's io mutex keep
 * them for a libfabric call or a few list operations (a registration:
 * about a microsecond), and a thread that slept on the mutex makes the
 * holder's unlock a FUTEX_WAKE system call and its own way back a
 * wake-up (the H200 profile of small staged gets: the event loop's
 * unlocks of fab->lock ~18% of its time while the mover slept on it). */
static inline int tw__fabric_spin_trylock(pthread_mutex_t *m)
{
    if (pthread_mutex_trylock(m) == 0)
        return 0;
    uint64_t t0 = tw__now_ns();
    for (unsigned spins = 1;; spins++) {
        tw__fabric_cpu_relax();
        if (pthread_mutex_trylock(m) == 0)
            return 0;
        if (spins % 32 == 0) {
            uint64_t waited = tw__now_ns() - t0;
            if (waited >= TW_FABRIC_LOCK_SPIN_NS)
                return -1;
            /* Past 2 us the holder may be off its CPU (more busy threads
             * than cores: the holder preempted on this one), and spinning
             * only delays it; yield as tw__fabric_relock does. */
            if (waited >= TW_FABRIC_SPIN_YIELD_NS)
                sched_yield();
        }
    }
}

/* Takes m: spins (tw__fabric_spin_trylock), then sleeps on it. */
static inline void tw__fabric_spin_lock(pthread_mutex_t *m)
{
    if (tw__fabric_spin_trylock(m) != 0)
        pthread_mutex_lock(m);
}

static inline void tw__fabric_lock(struct tw_fabric *fab)
{
    if (pthread_mutex_trylock(&fab->lock) == 0)
        return;
    __atomic_add_fetch(&fab->lock_wanted, 1, __ATOMIC_RELAXED);
    /* Awake when the mover lets go (it does so within a poll round), so
     * it does not wait for this thread's wake-up meanwhile. */
    tw__fabric_spin_lock(&fab->lock);
    __atomic_sub_fetch(&fab->lock_wanted, 1, __ATOMIC_RELAXED);
}

/* The progressing thread's way back to fab->lock (it does not hold it).
 * It spins whether or not a waiter is counted: a holder that is not
 * waiting (the event loop inside a registration) lets go within
 * microseconds too, and sleeping on the mutex would cost both sides a
 * system call (tw__fabric_spin_lock). */
static inline void tw__fabric_relock(struct tw_fabric *fab)
{
    if (__atomic_load_n(&fab->lock_wanted, __ATOMIC_RELAXED) == 0 &&
        pthread_mutex_trylock(&fab->lock) == 0)
        return;
    uint64_t t0 = tw__now_ns();
    for (unsigned spins = 1;; spins++) {
        tw__fabric_cpu_relax();
        if (__atomic_load_n(&fab->lock_wanted, __ATOMIC_ACQUIRE) == 0 &&
            pthread_mutex_trylock(&fab->lock) == 0)
            return;
        if (spins % 32 == 0) {
            uint64_t waited = tw__now_ns() - t0;
            if (waited >= TW_FABRIC_HANDOFF_NS) {
                pthread_mutex_lock(&fab->lock);
                return;
            }
            if (waited >= TW_FABRIC_SPIN_YIELD_NS)
                sched_yield();
        }
    }
}

/* errmsg helpers: write into fab->errmsg (and return code). */
int tw__fabric_fail(struct tw_fabric *fab, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* rail.c */
/* r->wedged, read from any thread (the watchdog sets it without fab->lock). */
static inline int tw__fabric_rail_wedged(const struct tw_fabric_rail *r)
{
    return __atomic_load_n(&r->wedged, __ATOMIC_ACQUIRE);
}
/* Takes rail r's io mutex for a control call; the caller holds fab->lock.
 * Returns 0, or -ECONNABORTED (nothing taken) when the rail is wedged:
 * then skip the call (nobody progresses that endpoint any more). */
int tw__fabric_io_lock(struct tw_fabric_rail *r);
void tw__fabric_io_unlock(struct tw_fabric_rail *r);
int tw__fabric_rails_open(struct tw_fabric *fab, const struct tw_fabric_config *cfg, char *err,
                          size_t errlen);
void tw__fabric_rail_close(struct tw_fabric_rail *rail);
/* Opens a rail like `old` (same provider and attributes) into *r, which
 * is not yet part of the plane. Returns 0 or a negative code with why. */
int tw__fabric_rail_reopen(const struct tw_fabric_rail *old, struct tw_fabric_rail *r, char *why,
                           size_t whylen);
/* Rebuilds fab->addrs and fab->describe from the usable rails. */
void tw__fabric_rails_describe_locked(struct tw_fabric *fab);
/* The usable (not retired) rail for a provider name, or NULL. */
struct tw_fabric_rail *tw__fabric_rail_by_name(struct tw_fabric *fab, const uint8_t *name,
                                               size_t len);

/* addr.c */
void tw__fabric_peer_put_locked(struct tw_fabric_peer *peer);
void tw__fabric_peers_close_locked(struct tw_fabric *fab);
/* Whether a shm peer's process is gone (exited, zombie or exiting; see
 * addr.c). The /proc look is rate-limited to once a millisecond per peer
 * unless now is 0. */
int tw__fabric_peer_gone(struct tw_fabric_peer *peer, uint64_t now);

/* mr.c */
int tw__fabric_mr_register_on(struct tw_fabric_rail *r, void *addr, size_t len, unsigned access,
                              enum tw_fabric_iface iface, int device, struct tw_fabric_mr **out);
void tw__fabric_mr_put_locked(struct tw_fabric_mr *mr);
/* Stop counting a fresh remote registration in remote_mrs (see quiet). */
void tw__fabric_mr_quiet(struct tw_fabric_mr *mr);
/* A handle starts (+1) or stops (-1) exposing a quiet registration to a
 * peer: the mover keeps target-side progress going while any is exposed,
 * and lingers after the last one goes, as after a deregistration. */
void tw__fabric_mr_expose(struct tw_fabric_mr *mr, int delta);
void tw__fabric_mrs_close_locked(struct tw_fabric *fab);
void tw__fabric_mrs_idle_run(struct tw_fabric *fab);

/* plane.c */
/* Moves a released registration whose memory an unanswered operation may
 * still touch (keep_on_close) onto the process-lifetime kept list instead
 * of freeing it: its on_idle never runs, and the owner's on_idle argument
 * (e.g. the registration cache's handles and the buffer they name) stays
 * reachable from it. Clears m->rail, m->mr and m->desc (the rail may close
 * and its plane be freed). Called without fab->lock. */
void tw__fabric_mr_keep(struct tw_fabric_mr *m);
/* A CUDA context current on the calling thread before it posts or
 * progresses operations on CUDA memory. libfabric's CUDA code
 * (cuMemGetAddressRange, IPC handles) runs on the thread that calls it and
 * needs a current context; without one, shm (1.22) logged
 * CUDA_ERROR_INVALID_CONTEXT and fell back from CUDA IPC to its SAR bounce
 * buffers (docs/gpudirect.md). device >= 0: that device's primary
 * context (once per thread until another device is asked for); device -1:
 * `fallback`'s, only if this thread has none from here yet. Failures are
 * left to the provider's own error. */
void tw__fabric_cuda_current(int device, int fallback);

/* xfer.c */
/* Polls the usable rails and advances transfers; the lock is dropped
 * around libfabric calls. Returns the number of completions processed, or
 * -1 when the calling mover thread was abandoned by the watchdog while the
 * lock was dropped (then the lock is NOT held on return and the thread must
 * exit without touching the plane). */
int tw__fabric_progress_locked(struct tw_fabric *fab);
int tw__fabric_xfer_submit_locked(struct tw_fabric *fab, const struct tw_fabric_xfer_desc *d,
                                  int sync, struct tw_fabric_xfer **out);
void tw__fabric_xfer_free(struct tw_fabric_xfer *x);
void tw__fabric_xfer_fail_peer_locked(struct tw_fabric *fab, struct tw_fabric_peer *peer,
                                      int status, const char *why);
void tw__fabric_xfers_abort_locked(struct tw_fabric *fab);
void tw__fabric_xfers_mark_unsafe_locked(struct tw_fabric *fab);
/* At close, after the transfers were aborted: marks every non-shm rail on
 * which the provider still holds operations `kept` (see the field), and the
 * registrations those operations use keep_on_close. Returns how many rails
 * were kept. */
unsigned tw__fabric_xfers_keep_rails_locked(struct tw_fabric *fab);
int tw__fabric_busy_locked(const struct tw_fabric *fab);
/* Lets go of popped transfers whose shm peer died with operations in the
 * provider (see orphan_rail); frees orphans of closed rails. */
void tw__fabric_zombies_reap_locked(struct tw_fabric *fab, uint64_t now);
/* Frees the orphans of rail r, which was just closed. */
void tw__fabric_orphans_free_locked(struct tw_fabric *fab, const struct tw_fabric_rail *r);
/* Ends every running transfer on rail r now, with status and why; their
 * operations still in the provider count as stuck (buffer_busy). */
void tw__fabric_xfers_fail_rail_locked(struct tw_fabric *fab, struct tw_fabric_rail *r, int status,
                                       const char *why);

/* wedge.c */
/* Closes retired (not wedged) rails nothing uses any more, freeing their
 * slots; called by the progressing thread outside any call window. */
void tw__fabric_rails_reap_locked(struct tw_fabric *fab);
/* Notes that an object of rail r went away: a retired rail may now be
 * closable (reap_pending). */
void tw__fabric_rail_released_locked(struct tw_fabric_rail *r);
int tw__fabric_watchdog_start(struct tw_fabric *fab);
void tw__fabric_watchdog_stop(struct tw_fabric *fab);
/* Retires rail r (see struct tw_fabric_rail) and asks the watchdog for a
 * replacement. */
void tw__fabric_rail_retire_locked(struct tw_fabric *fab, struct tw_fabric_rail *r, const char *fmt,
                                   ...) __attribute__((format(printf, 3, 4)));

/* mover.c */
/* Starts a mover thread for generation fab->gen (also used to replace an
 * abandoned one). */
int tw__fabric_mover_start(struct tw_fabric *fab);
void tw__fabric_mover_stop(struct tw_fabric *fab);
void tw__fabric_mover_wake(struct tw_fabric *fab);
void tw__fabric_done_push_locked(struct tw_fabric *fab, struct tw_fabric_xfer *x);
/* fab->done was found empty: consume event_fd's count if one was written. */
void tw__fabric_done_reset_locked(struct tw_fabric *fab);

#endif
