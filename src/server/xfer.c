/* Transfer lifetime shared by every data plane: table membership, the
 * per-transfer deadline, and the commit of a completed PUT. */
#include "server/xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/log.h"
#include "server/server.h"

static void on_deadline(struct tw_loop *loop, struct tw_timer *t)
{
    struct tw_xfer *x = t->data;
    struct tw_srv_conn *c = x->conn;
    uint64_t id = x->id;
    double secs = (double)c->srv->cfg.transfer_timeout_ms / 1000.0;
    char name[80];
    snprintf(name, sizeof(name), "%.64s", x->t->name);
    unsigned long long done = x->done, total = x->t->byte_length;
    int put = x->dir == TW_XFER_PUT;
    x->failed = 1;
    tw__xfer_destroy(x);
    tw__conn_send_error(c, id, TW_WIRE_TIMEOUT,
                        "%s of '%s' did not finish within %.1f s (%llu of %llu bytes moved)",
                        put ? "put" : "get", name, secs, done, total);
    tw__conn_maybe_finish(c);
}

struct tw_xfer *tw__xfer_new(struct tw_srv_conn *c, uint64_t id, enum tw_xfer_dir dir,
                             struct tw_tensor *t, const struct tw_path *path)
{
    const struct tw_dp_ops *ops = tw__dp_for_path(path);
    struct tw_xfer *x = ops ? calloc(1, sizeof(*x)) : NULL;
    if (!x)
        return NULL;
    x->path = *path;
    x->conn = c;
    x->id = id;
    x->dir = dir;
    x->t = t;
    tw__tensor_ref(t);
    x->ops = ops;
    x->prog_gpu = -1;
    x->started_ms = tw__loop_now(&c->srv->loop);
    x->started_ns = tw__metrics_now_ns(&c->srv->metrics);
    tw__timer_init(&x->deadline, on_deadline, x);
    if (c->srv->cfg.transfer_timeout_ms)
        tw__loop_timer_start(&c->srv->loop, &x->deadline, c->srv->cfg.transfer_timeout_ms);
    tw__conn_add_xfer(c, x);
    return x;
}

const struct tw_dp_ops *tw__dp_for_path(const struct tw_path *p)
{
    int staged = p->staging == TW_PATH_STAGING_HOST;
    switch (p->plane) {
    case TW_PATH_PLANE_INLINE:
        return staged ? tw__dp_inline_staged_ops : &tw__dp_inline_ops;
    case TW_PATH_PLANE_RDMA:
        return staged ? tw__dp_rdma_staged_ops : &tw__dp_rdma_ops;
    default:
        return NULL;
    }
}

/* STATS: one counter per path of a transfer that moved all its bytes. */
static void count_path(struct tw_srv_stats *st, const struct tw_xfer *x)
{
    const struct tw_path *p = &x->path;
    if (x->done != x->t->byte_length)
        return;
    if (p->plane == TW_PATH_PLANE_INLINE)
        (*(p->staging ? &st->path_inline_staged : &st->path_inline))++;
    else if (p->staging)
        st->path_rdma_staged++;
    else if (p->gdr)
        (*(p->mode == TW_PATH_PUSH ? &st->path_gdr_push : &st->path_gdr_pull))++;
    else
        (*(p->mode == TW_PATH_PUSH ? &st->path_rdma_push : &st->path_rdma_pull))++;
}

/* Takes x off c's list of queued commits. */
static void commits_unlink(struct tw_srv_conn *c, struct tw_xfer *x)
{
    struct tw_xfer **pp = &c->commit_head, *prev = NULL;
    for (; *pp && *pp != x; pp = &(*pp)->cnext)
        prev = *pp;
    if (!*pp)
        return;
    *pp = x->cnext;
    if (c->commit_tail == x)
        c->commit_tail = prev;
    x->cnext = NULL;
    x->in_commits = 0;
}

void tw__xfer_destroy(struct tw_xfer *x)
{
    struct tw_srv_conn *c = x->conn;
    if (x->in_commits) {
        /* Not published: its copy must not run into freed memory. */
        char err[128];
        (void)tw__srv_stage_commit_wait(x, 1, err, sizeof(err));
        commits_unlink(c, x);
    }
    count_path(&c->srv->stats, x);
    tw__metrics_xfer_end(&c->srv->metrics, x, tw__metrics_now_ns(&c->srv->metrics));
    tw__loop_timer_stop(&c->srv->loop, &x->deadline);
    tw__conn_remove_xfer(c, x);
    if (x->ops->release)
        x->ops->release(x);
    tw__tensor_unref(x->t);
    free(x);
}

int tw__xfer_replan(struct tw_xfer *x, const struct tw_path *p, const struct tw_msg *m)
{
    const struct tw_dp_ops *ops = tw__dp_for_path(p);
    if (x->ops->release)
        x->ops->release(x);
    x->path = *p;
    x->ops = ops;
    x->why[0] = '\0';
    int rc = ops->start(x);
    if (rc < 0) {
        struct tw_srv_conn *c = x->conn;
        uint64_t id = x->id;
        char why[sizeof(x->why)];
        snprintf(why, sizeof(why), "%s", x->why[0] ? x->why : tw_strerror(rc));
        tw__xfer_destroy(x);
        tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "cannot start the transfer: %s", why);
        return 0;
    }
    return ops->on_msg(x, m);
}

void tw__xfer_want_pump(struct tw_xfer *x)
{
    struct tw_srv_conn *c = x->conn;
    if (x->in_send_list)
        return;
    if (!c->pump_head) {
        x->snext = x->sprev = x;
        c->pump_head = x;
    } else {
        /* Insert before the head: the end of the round. */
        x->snext = c->pump_head;
        x->sprev = c->pump_head->sprev;
        x->sprev->snext = x;
        c->pump_head->sprev = x;
    }
    x->in_send_list = 1;
}

static void put_publish(struct tw_xfer *x, struct tw_tensor *t, uint64_t ms);

/* The commit failed: INTERNAL, nothing stored; destroys x. */
static void put_fail(struct tw_xfer *x, const char *why)
{
    struct tw_srv_conn *c = x->conn;
    uint64_t id = x->id;
    char name[80];
    snprintf(name, sizeof(name), "%.64s", x->t->name);
    x->failed = 1;
    tw__xfer_destroy(x);
    tw__conn_send_error(c, id, TW_WIRE_INTERNAL, "put of '%s': %s; nothing was stored", name, why);
    tw__conn_maybe_finish(c);
}

void tw__xfer_put_complete(struct tw_xfer *x)
{
    struct tw_srv_conn *c = x->conn;
    struct tw_tensor *t = x->t;
    uint64_t id = x->id;
    uint64_t ms = tw__loop_now(&c->srv->loop) - x->started_ms;
    int crc_ok = !t->has_crc || x->crc == t->crc32c;

    if (crc_ok && x->ops->commit) {
        char why[256];
        int rc = x->ops->commit(x, &t, why, sizeof(why));
        if (rc < 0) {
            put_fail(x, why);
            return;
        }
        if (rc == 1) { /* published once its copy is done (tw__srv_poll) */
            c->srv->commits_pending = 1;
            x->commit_t = t;
            x->in_commits = 1;
            x->cnext = NULL;
            if (c->commit_tail)
                c->commit_tail->cnext = x;
            else
                c->commit_head = x;
            c->commit_tail = x;
            return;
        }
    }
    if (!crc_ok) {
        char name[80];
        snprintf(name, sizeof(name), "%.64s", t->name);
        uint32_t got = x->crc, want = t->crc32c;
        x->failed = 1;
        tw__xfer_destroy(x);
        tw__conn_send_error(c, id, TW_WIRE_CHECKSUM_MISMATCH,
                            "put of '%s': CRC32C of the received bytes is 0x%08x but the "
                            "descriptor says 0x%08x; nothing was stored",
                            name, got, want);
        tw__conn_maybe_finish(c);
        return;
    }
    put_publish(x, t, ms);
}

/* Publishes c's queued commits in order while their copies are done
 * (wait: waiting for each). Returns 1 when some are left. */
static int commits_publish(struct tw_srv_conn *c, int wait)
{
    while (c->commit_head) {
        struct tw_xfer *x = c->commit_head;
        char why[256];
        int rc = tw__srv_stage_commit_wait(x, wait, why, sizeof(why));
        if (rc == 0)
            return 1; /* still copying (only without wait) */
        commits_unlink(c, x);
        if (rc < 0)
            put_fail(x, why);
        else
            put_publish(x, x->commit_t, tw__loop_now(&c->srv->loop) - x->started_ms);
    }
    return 0;
}

void tw__xfer_commits_flush(struct tw_srv_conn *c)
{
    (void)commits_publish(c, 1);
}

int tw__xfer_commits_advance(struct tw_srv_conn *c)
{
    if (!commits_publish(c, 0))
        return 0;
    c->srv->commits_pending = 1;
    return 1;
}

static void put_publish(struct tw_xfer *x, struct tw_tensor *t, uint64_t ms)
{
    struct tw_srv_conn *c = x->conn;
    uint64_t id = x->id;
    tw__store_commit(&c->srv->store, t);
    c->srv->stats.puts++;
    TW_LOGD("conn %llu %s: stored '%s' (%llu bytes, %llu ms)", (unsigned long long)c->id, c->peer,
            t->name, (unsigned long long)t->byte_length, (unsigned long long)ms);
    tw__xfer_destroy(x);
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_OK;
    m.hdr.request_id = id;
    if (tw__conn_send(c, &m) == 0)
        tw__conn_maybe_finish(c);
}
