/*
 * A host-memory double of the CUDA memory kind's asynchronous ops, for the
 * staging pipeline's tests without a GPU.
 *
 * "Device memory" is ordinary host memory. Copies behave like DMA on a
 * stream: queued, and executed only when an event recorded after them is
 * found complete (after `pending_polls` unsuccessful queries, or at once by
 * a wait), reading their source at that moment. So a pipeline that reads a
 * staged chunk before its copy completed, or refills a slot whose copy has
 * not run yet, gets wrong bytes and the test sees them.
 *
 * Injected failures, counted over every copy of the process (0-based):
 * fail_submit_at = k: copy k is refused when queued (like a bad argument);
 * fail_complete_at = k: copy k is accepted, does not run, and every event
 * recorded after it on its stream reports the failure (like a device fault).
 *
 * Counters say what was created and destroyed, so tests check that nothing
 * leaks (pinnings, streams, events) after a failure.
 *
 * Single-threaded use only (tests).
 */
#ifndef TW_TEST_FAKE_MEMKIND_H
#define TW_TEST_FAKE_MEMKIND_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem/memkind.h"
#include "tensorwire/error.h"

#define FAKE_MAX_OPS 1024

struct fake_op {
    void *dst;
    const void *src;
    size_t len;
    int poisoned;
};

struct fake_stream {
    struct fake_op ops[FAKE_MAX_OPS];
    unsigned executed, queued; /* ops[executed..queued) still pending */
    int failed;                /* a poisoned op ran: later events fail */
};

struct fake_event {
    struct fake_stream *stream;
    unsigned upto; /* ops before the record */
    int polls_left;
};

static struct {
    long pins, unpins, streams, stream_frees, events, event_frees;
    long stream_waits;
    long copies;
    long fail_submit_at, fail_complete_at;
    /* Refuse the next copy longer than this (0: none), once; counted. */
    size_t fail_len_over;
    long len_refusals;
    int pending_polls;
    int fail_pin;
} fake;

static inline void fake_reset(void)
{
    memset(&fake, 0, sizeof(fake));
    fake.fail_submit_at = -1;
    fake.fail_complete_at = -1;
}

static inline int fake_pin(int device, void *p, size_t len, char *err, size_t errlen)
{
    if (fake.fail_pin) {
        if (err && errlen)
            snprintf(err, errlen, "fake: pinning refused");
        return -ENOMEM;
    }
    memset(p, 0xEE, len); /* stale bytes a too-early read would see */
    fake.pins++;
    return 0;
}

static inline void fake_unpin(int device, void *p)
{
    if (p)
        fake.unpins++;
}

static inline int fake_stream_create(int device, void **stream, char *err, size_t errlen)
{
    *stream = calloc(1, sizeof(struct fake_stream));
    if (!*stream)
        return -ENOMEM;
    fake.streams++;
    return 0;
}

static inline void fake_run(struct fake_stream *s, unsigned upto)
{
    for (; s->executed < upto; s->executed++) {
        struct fake_op *op = &s->ops[s->executed % FAKE_MAX_OPS];
        if (op->poisoned)
            s->failed = 1;
        else
            memcpy(op->dst, op->src, op->len);
    }
}

static inline int fake_stream_wait(int device, void *stream, char *err, size_t errlen)
{
    struct fake_stream *s = stream;
    fake.stream_waits++;
    fake_run(s, s->queued);
    if (s->failed && err && errlen)
        snprintf(err, errlen, "fake: device copy failed (injected)");
    return s->failed ? TW_EINTERNAL : 0;
}

static inline void fake_stream_destroy(int device, void *stream)
{
    if (stream)
        fake.stream_frees++;
    free(stream);
}

static inline int fake_event_create(int device, void **event, char *err, size_t errlen)
{
    *event = calloc(1, sizeof(struct fake_event));
    if (!*event)
        return -ENOMEM;
    fake.events++;
    return 0;
}

static inline void fake_event_destroy(int device, void *event)
{
    if (event)
        fake.event_frees++;
    free(event);
}

static inline int fake_queue(void *stream, void *dst, const void *src, size_t len, char *err,
                             size_t errlen)
{
    struct fake_stream *s = stream;
    long k = fake.copies++;
    if (k == fake.fail_submit_at) {
        if (err && errlen)
            snprintf(err, errlen, "fake: copy %ld refused (injected)", k);
        return TW_EINTERNAL;
    }
    if (fake.fail_len_over && len > fake.fail_len_over) {
        fake.fail_len_over = 0;
        fake.len_refusals++;
        if (err && errlen)
            snprintf(err, errlen, "fake: copy %ld of %zu bytes refused (injected)", k, len);
        return TW_EINTERNAL;
    }
    if (s->queued - s->executed >= FAKE_MAX_OPS)
        fake_run(s, s->queued - FAKE_MAX_OPS + 1);
    s->ops[s->queued % FAKE_MAX_OPS] = (struct fake_op){
        .dst = dst, .src = src, .len = len, .poisoned = k == fake.fail_complete_at};
    s->queued++;
    return 0;
}

static inline int fake_copy_to_host_async(void *stream, void *dst, uintptr_t src, size_t len,
                                          const struct tw_mem_attr *attr, char *err, size_t errlen)
{
    return fake_queue(stream, dst, (const void *)src, len, err, errlen);
}

static inline int fake_copy_from_host_async(void *stream, uintptr_t dst, const void *src,
                                            size_t len, const struct tw_mem_attr *attr, char *err,
                                            size_t errlen)
{
    return fake_queue(stream, (void *)dst, src, len, err, errlen);
}

static inline int fake_event_record(int device, void *event, void *stream, char *err, size_t errlen)
{
    struct fake_event *e = event;
    struct fake_stream *s = stream;
    *e = (struct fake_event){.stream = s, .upto = s->queued, .polls_left = fake.pending_polls};
    return 0;
}

static inline int fake_event_finish(struct fake_event *e, char *err, size_t errlen)
{
    fake_run(e->stream, e->upto);
    if (e->stream->failed) {
        if (err && errlen)
            snprintf(err, errlen, "fake: device copy failed (injected)");
        return TW_EINTERNAL;
    }
    return 0;
}

static inline int fake_event_query(int device, void *event, char *err, size_t errlen)
{
    struct fake_event *e = event;
    if (!e->stream)
        return 1;
    if (e->polls_left > 0) {
        e->polls_left--;
        return 0;
    }
    int rc = fake_event_finish(e, err, errlen);
    return rc < 0 ? rc : 1;
}

static inline int fake_event_wait(int device, void *event, char *err, size_t errlen)
{
    struct fake_event *e = event;
    if (!e->stream)
        return 0;
    e->polls_left = 0;
    return fake_event_finish(e, err, errlen);
}

static const struct tw_memkind_async_ops fake_async = {
    .pin = fake_pin,
    .unpin = fake_unpin,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .stream_wait = fake_stream_wait,
    .event_create = fake_event_create,
    .event_destroy = fake_event_destroy,
    .copy_to_host_async = fake_copy_to_host_async,
    .copy_from_host_async = fake_copy_from_host_async,
    .event_record = fake_event_record,
    .event_query = fake_event_query,
    .event_wait = fake_event_wait,
};

/* The fake kind: host memory that pretends to be CUDA device 0. */
static inline int fake_query(uintptr_t addr, size_t len, struct tw_mem_attr *attr, char *err,
                             size_t errlen)
{
    *attr = (struct tw_mem_attr){
        .kind = TW_MEMKIND_CUDA, .device = 0, .alloc_base = addr, .alloc_len = len};
    return 0;
}

static const struct tw_memkind_ops fake_kind = {
    .kind = TW_MEMKIND_CUDA,
    .name = "fake-cuda",
    .query = fake_query,
    .async = &fake_async,
};

#endif
