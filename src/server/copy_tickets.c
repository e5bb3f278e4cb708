/*
 * Completion of queued copies, by ticket (see copy_tickets.h).
 */
#include "server/copy_tickets.h"

#include <stdio.h>
#include <string.h>

#include "tensorwire/error.h"

#define SLOT(t, k) (((t)->head + (k)) % TW_COPY_TICKET_MARKERS)

void tw__copy_tickets_init(struct tw_copy_tickets *t, const struct tw_copy_marker_ops *ops,
                           void *ctx)
{
    memset(t, 0, sizeof(*t));
    t->ops = ops;
    t->ctx = ctx;
}

void tw__copy_tickets_destroy(struct tw_copy_tickets *t)
{
    for (unsigned i = 0; i < TW_COPY_TICKET_MARKERS; i++)
        if (t->slot[i].marker)
            t->ops->destroy(t->ctx, t->slot[i].marker);
    tw__copy_tickets_init(t, t->ops, t->ctx);
}

uint64_t tw__copy_tickets_issue(struct tw_copy_tickets *t)
{
    return ++t->issued;
}

/* The oldest k + 1 markers were reached: they leave the ring. */
static void retire(struct tw_copy_tickets *t, unsigned k)
{
    t->completed = t->slot[SLOT(t, k)].upto;
    t->head = SLOT(t, k + 1);
    t->n -= k + 1;
}

int tw__copy_tickets_mark(struct tw_copy_tickets *t, char *err, size_t errlen)
{
    if (t->issued == t->marked)
        return 0;
    if (t->n == TW_COPY_TICKET_MARKERS) {
        int rc = t->ops->wait(t->ctx, t->slot[t->head].marker, err, errlen);
        if (rc)
            return rc;
        retire(t, 0);
    }
    unsigned s = SLOT(t, t->n);
    if (!t->slot[s].marker) {
        int rc = t->ops->create(t->ctx, &t->slot[s].marker, err, errlen);
        if (rc)
            return rc;
    }
    int rc = t->ops->record(t->ctx, t->slot[s].marker, err, errlen);
    if (rc)
        return rc;
    t->slot[s].upto = t->issued;
    t->n++;
    t->marked = t->issued;
    return 0;
}

/* Position (from the oldest) of the oldest marker covering ticket, which
 * the caller knows is in the ring (completed < ticket <= marked). */
static unsigned covering(const struct tw_copy_tickets *t, uint64_t ticket)
{
    unsigned k = 0;
    while (t->slot[SLOT(t, k)].upto < ticket)
        k++;
    return k;
}

int tw__copy_tickets_done(struct tw_copy_tickets *t, uint64_t ticket, int wait, char *err,
                          size_t errlen)
{
    if (ticket <= t->completed)
        return 1;
    if (ticket > t->marked) {
        snprintf(err, errlen, "internal: copy %llu waited for before it was handed to the driver",
                 (unsigned long long)ticket);
        return TW_EINVAL;
    }
    /* Reached markers leave the ring, oldest first, up to the oldest one
     * covering the ticket (the ring is in ticket order). */
    unsigned k = covering(t, ticket);
    for (unsigned i = 0; i <= k; i++) {
        int r = t->ops->query(t->ctx, t->slot[t->head].marker, err, errlen);
        if (r < 0)
            return r;
        if (r == 0)
            break;
        retire(t, 0);
    }
    if (ticket <= t->completed)
        return 1;
    if (!wait)
        return 0;
    k = covering(t, ticket);
    int rc = t->ops->wait(t->ctx, t->slot[SLOT(t, k)].marker, err, errlen);
    if (rc)
        return rc;
    retire(t, k);
    return 1;
}

void tw__copy_tickets_all_done(struct tw_copy_tickets *t)
{
    t->completed = t->marked;
    t->head = SLOT(t, t->n);
    t->n = 0;
}
