/*
 * Completion of queued copies, by ticket (store.c's device -> host copies
 * for staged inline gets).
 *
 * Every copy queued on a device's stream gets the next ticket of that
 * device (1, 2, ...). After a batch of copies was handed to the driver, a
 * marker (a CUDA event in the daemon) is recorded behind it: it covers
 * every ticket issued so far. A copy is complete once a marker covering its
 * ticket was reached; the stream runs in order, so reaching a marker also
 * completes every earlier one. The connection sends a DATA frame whose
 * bytes were copied from a GPU only once its ticket is complete, and sends
 * the frames before it meanwhile: copies of later frames overlap the
 * sending of earlier ones (conn.c, conn_flush).
 *
 * The markers are kept in a ring of TW_COPY_TICKET_MARKERS slots, oldest
 * first; a mark that finds the ring full waits for the oldest marker first.
 * Each slot's marker is created on first use through the ops and reused.
 *
 * Ownership: the ring owns its markers (tw__copy_tickets_destroy destroys
 * them through the ops); ops and ctx are the caller's and must outlive the
 * ring. No I/O beyond the ops; one thread (the server's event loop).
 */
#ifndef TW_SERVER_COPY_TICKETS_H
#define TW_SERVER_COPY_TICKETS_H

#include <stddef.h>
#include <stdint.h>

/* Markers in the stream of copies. Each returns 0 or a negative code with
 * the reason in err, except query. */
struct tw_copy_marker_ops {
    int (*create)(void *ctx, void **marker, char *err, size_t errlen);
    void (*destroy)(void *ctx, void *marker);
    /* Places the marker behind every copy handed to the driver so far. */
    int (*record)(void *ctx, void *marker, char *err, size_t errlen);
    /* 1: reached, 0: not yet, negative: a copy before it failed. */
    int (*query)(void *ctx, void *marker, char *err, size_t errlen);
    /* Blocks until reached (0) or a copy before it failed. */
    int (*wait)(void *ctx, void *marker, char *err, size_t errlen);
};

#define TW_COPY_TICKET_MARKERS 16

struct tw_copy_tickets {
    const struct tw_copy_marker_ops *ops;
    void *ctx;
    uint64_t issued;    /* the last ticket handed out */
    uint64_t marked;    /* tickets covered by a recorded marker */
    uint64_t completed; /* tickets known complete */
    unsigned head, n;   /* live slots: head .. head + n - 1 (mod size) */
    struct {
        void *marker; /* created on first use, reused */
        uint64_t upto;
    } slot[TW_COPY_TICKET_MARKERS];
};

/* An empty ring over ops (nothing is created yet). */
void tw__copy_tickets_init(struct tw_copy_tickets *t, const struct tw_copy_marker_ops *ops,
                           void *ctx);
/* Destroys the markers created (call after the stream was synchronized). */
void tw__copy_tickets_destroy(struct tw_copy_tickets *t);

/* The ticket of the next queued copy. */
uint64_t tw__copy_tickets_issue(struct tw_copy_tickets *t);

/* Records a marker covering every ticket issued so far (nothing when they
 * are covered already); call right after handing the copies to the driver.
 * A full ring first waits for its oldest marker. 0 or a negative code. */
int tw__copy_tickets_mark(struct tw_copy_tickets *t, char *err, size_t errlen);

/* Whether the copy with `ticket` (and every earlier one) is complete: 1
 * yes, 0 not yet (only when !wait), or a negative code. The ticket must be
 * covered by a marker (ticket <= t->marked: mark first), else TW_EINVAL. */
int tw__copy_tickets_done(struct tw_copy_tickets *t, uint64_t ticket, int wait, char *err,
                          size_t errlen);

/* Every marked copy is known complete (the caller synchronized the whole
 * stream): empties the ring. */
void tw__copy_tickets_all_done(struct tw_copy_tickets *t);

#endif
