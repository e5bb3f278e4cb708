/* Completion of queued copies by ticket (server/copy_tickets.h) over fake
 * markers: a "stream" whose recorded markers are reached in order when
 * the test says so, and which can be told to fail. */
#include <stdio.h>
#include <string.h>

#include "server/copy_tickets.h"
#include "tensorwire/error.h"
#include "tw_test.h"

struct fake_stream {
    int records; /* markers recorded so far (record i gets seq i + 1) */
    int reached; /* markers with seq <= reached are reached */
    int created, destroyed, queries, waits;
    int fail_query; /* query/wait answer TW_EDEVICE */
    int seq[64];    /* marker id -> seq of its latest record */
};

static int m_create(void *ctx, void **m, char *err, size_t errlen)
{
    struct fake_stream *f = ctx;
    *m = (void *)(intptr_t)(++f->created);
    return 0;
}

static void m_destroy(void *ctx, void *m)
{
    ((struct fake_stream *)ctx)->destroyed++;
}

static int m_record(void *ctx, void *m, char *err, size_t errlen)
{
    struct fake_stream *f = ctx;
    f->seq[(intptr_t)m] = ++f->records;
    return 0;
}

static int m_query(void *ctx, void *m, char *err, size_t errlen)
{
    struct fake_stream *f = ctx;
    f->queries++;
    if (f->fail_query) {
        snprintf(err, errlen, "injected");
        return TW_EDEVICE;
    }
    return f->seq[(intptr_t)m] <= f->reached;
}

static int m_wait(void *ctx, void *m, char *err, size_t errlen)
{
    struct fake_stream *f = ctx;
    f->waits++;
    if (f->fail_query) {
        snprintf(err, errlen, "injected");
        return TW_EDEVICE;
    }
    if (f->seq[(intptr_t)m] > f->reached)
        f->reached = f->seq[(intptr_t)m]; /* the stream runs up to it */
    return 0;
}

static const struct tw_copy_marker_ops fake_ops = {
    .create = m_create, .destroy = m_destroy, .record = m_record, .query = m_query, .wait = m_wait};

/* Tickets are done only once a marker covering them was reached; a query
 * never blocks; a wait reaches exactly the oldest covering marker. */
static void test_done_by_marker(void)
{
    struct fake_stream f = {0};
    struct tw_copy_tickets t;
    char err[128];
    tw__copy_tickets_init(&t, &fake_ops, &f);
    for (int i = 0; i < 3; i++)
        TW_ASSERT_EQ_U64(tw__copy_tickets_issue(&t), (uint64_t)i + 1);
    /* Not handed to the driver yet: an internal error, not a hang. */
    TW_ASSERT_ERR(tw__copy_tickets_done(&t, 1, 1, err, sizeof(err)), TW_EINVAL);
    TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err))); /* marker 1: tickets 1-3 */
    TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err))); /* nothing new: no marker */
    TW_ASSERT_EQ(f.records, 1);
    tw__copy_tickets_issue(&t);
    tw__copy_tickets_issue(&t);
    TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err))); /* marker 2: tickets 4-5 */
    TW_ASSERT_EQ(f.records, 2);

    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 2, 0, err, sizeof(err)), 0);
    TW_ASSERT_EQ(f.waits, 0);
    f.reached = 1; /* the stream passed marker 1 */
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 3, 0, err, sizeof(err)), 1);
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 4, 0, err, sizeof(err)), 0);
    TW_ASSERT_EQ_U64(t.completed, 3);
    int q = f.queries;
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 1, 0, err, sizeof(err)), 1);
    TW_ASSERT_EQ(f.queries, q); /* known complete: no query */

    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 5, 1, err, sizeof(err)), 1);
    TW_ASSERT_EQ(f.waits, 1);
    TW_ASSERT_EQ_U64(t.completed, 5);
    TW_ASSERT_EQ(t.n, 0u);
    tw__copy_tickets_destroy(&t);
    TW_ASSERT_EQ(f.destroyed, f.created);
    TW_ASSERT_EQ(f.created, 2);
}

/* A wait for an early ticket stops at the oldest marker covering it, so
 * later batches keep running (and stay in the ring). */
static void test_wait_stops_at_covering_marker(void)
{
    struct fake_stream f = {0};
    struct tw_copy_tickets t;
    char err[128];
    tw__copy_tickets_init(&t, &fake_ops, &f);
    for (int b = 0; b < 4; b++) { /* four batches of 8 */
        for (int i = 0; i < 8; i++)
            tw__copy_tickets_issue(&t);
        TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err)));
    }
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 12, 1, err, sizeof(err)), 1); /* batch 2 */
    TW_ASSERT_EQ(f.reached, 2);
    TW_ASSERT_EQ_U64(t.completed, 16);
    TW_ASSERT_EQ(t.n, 2u);
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 17, 0, err, sizeof(err)), 0);
    tw__copy_tickets_all_done(&t); /* the caller synchronized the stream */
    TW_ASSERT_EQ_U64(t.completed, 32);
    TW_ASSERT_EQ(t.n, 0u);
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, 32, 0, err, sizeof(err)), 1);
    tw__copy_tickets_destroy(&t);
}

/* More batches than slots: the ring waits for its oldest marker, reuses
 * the slots' markers, and every ticket still completes in order. */
static void test_ring_wraps(void)
{
    struct fake_stream f = {0};
    struct tw_copy_tickets t;
    char err[128];
    tw__copy_tickets_init(&t, &fake_ops, &f);
    const int batches = 3 * TW_COPY_TICKET_MARKERS + 5;
    for (int b = 0; b < batches; b++) {
        for (int i = 0; i < 3; i++)
            tw__copy_tickets_issue(&t);
        TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err)));
        TW_ASSERT(t.n <= TW_COPY_TICKET_MARKERS);
        /* Every ticket of a batch that left the ring was reached. */
        TW_ASSERT(t.completed <= (uint64_t)f.reached * 3);
    }
    TW_ASSERT_EQ(f.created, TW_COPY_TICKET_MARKERS);
    TW_ASSERT_EQ(f.waits, batches - TW_COPY_TICKET_MARKERS);
    TW_ASSERT_EQ(t.n, (unsigned)TW_COPY_TICKET_MARKERS);
    uint64_t last = (uint64_t)batches * 3;
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, last, 0, err, sizeof(err)), 0);
    f.reached = batches;
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, last - 4, 0, err, sizeof(err)), 1);
    TW_ASSERT_EQ_U64(t.completed, last - 3); /* up to the covering marker only */
    TW_ASSERT_EQ(tw__copy_tickets_done(&t, last, 0, err, sizeof(err)), 1);
    TW_ASSERT_EQ(t.n, 0u);
    tw__copy_tickets_destroy(&t);
    TW_ASSERT_EQ(f.destroyed, TW_COPY_TICKET_MARKERS);
}

/* A failed copy is an error for the waiter, with the reason. */
static void test_failure_reported(void)
{
    struct fake_stream f = {0};
    struct tw_copy_tickets t;
    char err[128] = "";
    tw__copy_tickets_init(&t, &fake_ops, &f);
    tw__copy_tickets_issue(&t);
    TW_ASSERT_OK(tw__copy_tickets_mark(&t, err, sizeof(err)));
    f.fail_query = 1;
    TW_ASSERT_ERR(tw__copy_tickets_done(&t, 1, 0, err, sizeof(err)), TW_EDEVICE);
    TW_ASSERT(strstr(err, "injected") != NULL);
    TW_ASSERT_ERR(tw__copy_tickets_done(&t, 1, 1, err, sizeof(err)), TW_EDEVICE);
    TW_ASSERT_EQ_U64(t.completed, 0);
    tw__copy_tickets_destroy(&t);
}

int main(void)
{
    TW_RUN(test_done_by_marker);
    TW_RUN(test_wait_stops_at_covering_marker);
    TW_RUN(test_ring_wraps);
    TW_RUN(test_failure_reported);
    TW_DONE();
}
