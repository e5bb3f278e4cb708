/*
 * The watchdog of a threaded plane: finds libfabric calls that do not
 * return (a wedged rail), gives up on the thread inside one, and opens
 * replacement rails for retired ones. See fabric.h, "Wedged and retired
 * rails", for why this exists (libfabric 1.17 shm and dead peers).
 *
 * The progressing thread numbers each data call window (xfer.c call_begin:
 * call_seq is odd while one is open); a window seen open for wedge_ns is a
 * wedged call. The watchdog reads the stamp without fab->lock, because a
 * thread making a control call may hold fab->lock while it waits for the
 * wedged rail's io mutex: the watchdog first marks the rail wedged
 * (atomically; that waiter then gives up and releases fab->lock), then
 * takes fab->lock for the rest. It sleeps on its own mutex and wakes every
 * wedge_ns / 4 (between 10 and 250 ms): a few wake-ups a second.
 *
 * Retired rails: the watchdog opens their replacements (reopen_locked);
 * the progressing thread closes them once unused (rails_reap_locked),
 * never while their replacement is still being opened from their fi_info.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fabric/fabric_int.h"

void tw__fabric_rail_retire_locked(struct tw_fabric *fab, struct tw_fabric_rail *r, const char *fmt,
                                   ...)
{
    if (r->retired)
        return;
    __atomic_store_n(&r->retired, 1, __ATOMIC_RELEASE);
    va_list ap;
    va_start(ap, fmt);
    tw__errbuf_vset(r->retire_why, sizeof(r->retire_why), fmt, ap);
    va_end(ap);
    fab->st.rails_retired++;
    __atomic_or_fetch(&fab->reopen, 1u << (unsigned)(r - fab->rails), __ATOMIC_RELEASE);
    tw__fabric_rails_describe_locked(fab);
    if (fab->wd_running) {
        pthread_mutex_lock(&fab->wd_lock);
        pthread_cond_signal(&fab->wd_cond);
        pthread_mutex_unlock(&fab->wd_lock);
    }
}

int tw__fabric_rail_retire(struct tw_fabric *fab, unsigned rail, const char *why)
{
    tw__fabric_lock(fab);
    if (rail >= fab->nrails || !fab->rails[rail].info) {
        pthread_mutex_unlock(&fab->lock);
        return tw__fabric_fail(fab, TW_EINVAL, "no open rail in slot %u", rail);
    }
    tw__fabric_rail_retire_locked(fab, &fab->rails[rail], "%s", why ? why : "retired by hand");
    fab->reap_pending = 1;
    pthread_mutex_unlock(&fab->lock);
    tw__fabric_mover_wake(fab);
    return 0;
}

void tw__fabric_rail_released_locked(struct tw_fabric_rail *r)
{
    if (r->retired && !tw__fabric_rail_wedged(r))
        r->fab->reap_pending = 1;
}

static int rail_in_use_locked(struct tw_fabric *fab, const struct tw_fabric_rail *r)
{
    for (struct tw_fabric_link *l = fab->peers.next; l != &fab->peers; l = l->next)
        if (TW_CONTAINER_OF(l, struct tw_fabric_peer, node)->rail == r)
            return 1;
    for (struct tw_fabric_link *l = fab->mrs.next; l != &fab->mrs; l = l->next)
        if (TW_CONTAINER_OF(l, struct tw_fabric_mr, node)->rail == r)
            return 1;
    struct tw_fabric_link *lists[] = {&fab->active, &fab->zombies, &fab->done};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++)
        for (struct tw_fabric_link *l = lists[i]->next; l != lists[i]; l = l->next) {
            const struct tw_fabric_xfer *x = TW_CONTAINER_OF(l, struct tw_fabric_xfer, node);
            if ((x->d.peer && x->d.peer->rail == r) || (x->d.local && x->d.local->rail == r))
                return 1;
        }
    return 0;
}

void tw__fabric_rails_reap_locked(struct tw_fabric *fab)
{
    fab->reap_pending = 0;
    int closed = 0;
    for (unsigned i = 0; i < fab->nrails; i++) {
        struct tw_fabric_rail *r = &fab->rails[i];
        /* Not before its replacement opened: that copies its fi_info. */
        if (!r->info || !r->retired || tw__fabric_rail_wedged(r) ||
            (__atomic_load_n(&fab->reopen, __ATOMIC_ACQUIRE) & (1u << i)) ||
            rail_in_use_locked(fab, r))
            continue;
        /* Only the progressing thread opens call windows, and it is here:
         * nothing is inside this rail. Once it is closed no completion
         * can name an orphan of it any more. */
        tw__fabric_rail_close(r);
        tw__fabric_orphans_free_locked(fab, r);
        fab->st.rails_closed++;
        closed = 1;
    }
    if (closed)
        tw__fabric_rails_describe_locked(fab);
}

/* The mover has been inside one call on rail `idx` for held_ns. */
static void wedge_locked(struct tw_fabric *fab, unsigned idx, uint64_t held_ns)
{
    struct tw_fabric_rail *r = &fab->rails[idx];
    char why[256];
    snprintf(why, sizeof(why), "a libfabric call on this rail has not returned for %llu ms%s",
             (unsigned long long)(held_ns / 1000000),
             r->is_shm ? " (a peer process died or stopped while holding a lock in its shared "
                         "region)"
                       : "");
    __atomic_store_n(&r->wedged, 1, __ATOMIC_RELEASE);
    fab->st.rails_wedged++;
    if (r->retired) { /* retired before (a replacement is under way): new reason */
        snprintf(r->retire_why, sizeof(r->retire_why), "%s", why);
        tw__fabric_rails_describe_locked(fab);
    } else {
        tw__fabric_rail_retire_locked(fab, r, "%s", why);
    }
    tw__fabric_xfers_fail_rail_locked(fab, r, -ECONNABORTED, why);

    /* Give up on the stuck mover; a new one serves the other rails. */
    __atomic_add_fetch(&fab->gen, 1, __ATOMIC_RELEASE);
    /* Close the abandoned window: the new mover's start even again. */
    if (__atomic_load_n(&fab->call_seq, __ATOMIC_ACQUIRE) & 1)
        __atomic_add_fetch(&fab->call_seq, 1, __ATOMIC_RELEASE);
    if (fab->mover_joinable) {
        /* It may spin for good (shm: on a lock a dead process held): let it
         * use only CPU time nothing else wants. */
        struct sched_param sp = {.sched_priority = 0};
        pthread_setschedparam(fab->mover, SCHED_IDLE, &sp);
        pthread_detach(fab->mover);
        fab->mover_joinable = 0;
    }
    fab->mover_running = 0;
    fab->abandoned++;
    fab->st.threads_abandoned++;
    int ret = tw__fabric_mover_start(fab);
    if (ret) {
        /* Fail closed: without a mover nothing moves; retire every rail so
         * owners fall back to inline, and end what runs. */
        for (unsigned i = 0; i < fab->nrails; i++) {
            struct tw_fabric_rail *o = &fab->rails[i];
            tw__fabric_rail_retire_locked(fab, o, "no data mover thread: %s", strerror(-ret));
            tw__fabric_xfers_fail_rail_locked(fab, o, -ECONNABORTED, "no data mover thread");
        }
        __atomic_store_n(&fab->reopen, 0, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&fab->done_cond);
    }
    tw__fabric_mover_wake(fab);
}

/* Opens a replacement for every retired rail that asked for one. Drops
 * the lock while a rail opens; the old rail's reopen bit stays set until
 * then, so the mover does not close it (and free its fi_info) meanwhile. */
static void reopen_locked(struct tw_fabric *fab)
{
    unsigned pending;
    while ((pending = __atomic_load_n(&fab->reopen, __ATOMIC_ACQUIRE)) != 0 &&
           !__atomic_load_n(&fab->wd_stop, __ATOMIC_ACQUIRE)) {
        unsigned idx = (unsigned)__builtin_ctz(pending);
        struct tw_fabric_rail *old = &fab->rails[idx];
        size_t used = strlen(old->retire_why);
        unsigned free_slots = TW_FABRIC_MAX_SLOTS - fab->nrails;
        for (unsigned k = 0; k < fab->nrails; k++)
            free_slots += !fab->rails[k].info;
        int ret = TW_ENOFABRIC;
        struct tw_fabric_rail fresh;
        char why[256] = "";
        if (!free_slots) {
            snprintf(why, sizeof(why), "all %u rail slots used", TW_FABRIC_MAX_SLOTS);
        } else {
            pthread_mutex_unlock(&fab->lock);
            /* old->info and old->pref do not change while the bit is set. */
            ret = tw__fabric_rail_reopen(old, &fresh, why, sizeof(why));
            tw__fabric_lock(fab);
        }
        __atomic_and_fetch(&fab->reopen, ~(1u << idx), __ATOMIC_RELEASE);
        fab->reap_pending = 1; /* the old one may close now */
        if (ret) {
            snprintf(old->retire_why + used, sizeof(old->retire_why) - used, "; no replacement: %s",
                     why);
            continue;
        }
        /* A slot a closed rail left, else a new one. */
        unsigned slot = 0;
        while (slot < fab->nrails && fab->rails[slot].info)
            slot++;
        if (__atomic_load_n(&fab->wd_stop, __ATOMIC_ACQUIRE) || slot >= TW_FABRIC_MAX_SLOTS) {
            pthread_mutex_init(&fresh.io, NULL); /* rail_close destroys it */
            tw__fabric_rail_close(&fresh);
            continue;
        }
        fab->rails[slot] = fresh;
        pthread_mutex_init(&fab->rails[slot].io, NULL);
        if (slot == fab->nrails) /* read without the lock: tw__fabric_rail_slots */
            __atomic_store_n(&fab->nrails, slot + 1, __ATOMIC_RELEASE);
        fab->st.rails_reopened++;
        tw__fabric_rails_describe_locked(fab);
    }
    tw__fabric_mover_wake(fab);
}

static void *watchdog_main(void *arg)
{
    struct tw_fabric *fab = arg;
    uint64_t period = fab->wedge_ns / 4;
    if (period < 10000000ull)
        period = 10000000ull;
    if (period > 250000000ull)
        period = 250000000ull;
    uint64_t seen_seq = 0, seen_ns = 0; /* the open window seen first at seen_ns */
    pthread_mutex_lock(&fab->wd_lock);
    while (!__atomic_load_n(&fab->wd_stop, __ATOMIC_ACQUIRE)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + period;
        ts.tv_sec = (time_t)(t / 1000000000ull);
        ts.tv_nsec = (long)(t % 1000000000ull);
        pthread_cond_timedwait(&fab->wd_cond, &fab->wd_lock, &ts);
        if (__atomic_load_n(&fab->wd_stop, __ATOMIC_ACQUIRE))
            break;
        pthread_mutex_unlock(&fab->wd_lock);

        /* The same odd (open) window seen for wedge_ns: wedged. */
        uint64_t seq = __atomic_load_n(&fab->call_seq, __ATOMIC_ACQUIRE);
        unsigned rail = __atomic_load_n(&fab->call_rail, __ATOMIC_RELAXED);
        unsigned gen = __atomic_load_n(&fab->call_gen, __ATOMIC_RELAXED);
        uint64_t now = tw__now_ns();
        if (!(seq & 1) || seq != seen_seq) {
            seen_seq = seq;
            seen_ns = now;
        } else if (rail < TW_FABRIC_MAX_SLOTS &&
                   now - seen_ns >= (__atomic_load_n(&fab->rails[rail].is_shm, __ATOMIC_RELAXED)
                                         ? fab->wedge_ns
                                         : fab->wedge_net_ns) &&
                   gen == __atomic_load_n(&fab->gen, __ATOMIC_ACQUIRE)) {
            /* First let io waiters holding fab->lock give up. */
            __atomic_store_n(&fab->rails[rail].wedged, 1, __ATOMIC_RELEASE);
            tw__fabric_lock(fab);
            /* Even if the call returned meanwhile, it took longer than
             * wedge_ns and waiters may have given up: finish the job. */
            if (gen == fab->gen)
                wedge_locked(fab, rail, now - seen_ns);
            pthread_mutex_unlock(&fab->lock);
            seen_seq = 0;
        }
        if (__atomic_load_n(&fab->reopen, __ATOMIC_ACQUIRE)) {
            tw__fabric_lock(fab);
            reopen_locked(fab);
            pthread_mutex_unlock(&fab->lock);
        }
        pthread_mutex_lock(&fab->wd_lock);
    }
    pthread_mutex_unlock(&fab->wd_lock);
    return NULL;
}

int tw__fabric_watchdog_start(struct tw_fabric *fab)
{
    pthread_condattr_t ca;
    int ret = pthread_condattr_init(&ca);
    if (ret)
        return -ret;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ret = pthread_cond_init(&fab->wd_cond, &ca);
    pthread_condattr_destroy(&ca);
    if (ret)
        return -ret;
    pthread_mutex_init(&fab->wd_lock, NULL);
    fab->wd_running = 1;
    ret = pthread_create(&fab->watchdog, NULL, watchdog_main, fab);
    if (ret) {
        fab->wd_running = 0;
        pthread_mutex_destroy(&fab->wd_lock);
        pthread_cond_destroy(&fab->wd_cond);
        return -ret;
    }
    return 0;
}

void tw__fabric_watchdog_stop(struct tw_fabric *fab)
{
    if (!fab->wd_running)
        return;
    pthread_mutex_lock(&fab->wd_lock);
    __atomic_store_n(&fab->wd_stop, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&fab->wd_cond);
    pthread_mutex_unlock(&fab->wd_lock);
    pthread_join(fab->watchdog, NULL);
    fab->wd_running = 0;
    pthread_mutex_destroy(&fab->wd_lock);
    pthread_cond_destroy(&fab->wd_cond);
}

void tw__fabric_set_call_hook(struct tw_fabric *fab, void (*hook)(void *arg, unsigned rail),
                              void *arg)
{
    tw__fabric_lock(fab);
    fab->call_hook = hook;
    fab->call_hook_arg = arg;
    pthread_mutex_unlock(&fab->lock);
}
