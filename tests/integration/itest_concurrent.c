/* Several connections at once, each with many requests in flight: pipelined
 * puts (all TENSOR_PUTs, then all DATA), pipelined gets whose DATA frames
 * interleave, and a check of every byte. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "tw_test.h"

enum { THREADS = 4, PER_THREAD = 48 };

static struct itest_server srv;

static uint64_t size_of(int t, int i)
{
    /* From 0 bytes to ~2.2 MiB, so some gets span several DATA frames. */
    static const uint64_t sizes[] = {0, 1, 7, 4096, 65537, 1u << 20, (2u << 20) + 12345};
    return sizes[(t * 7 + i) % 7];
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    struct itc c;
    struct tw_msg m;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint8_t *data[PER_THREAD];
    char names[PER_THREAD][32];
    uint64_t ids[PER_THREAD];

    /* Puts: every TENSOR_PUT first, then the PUT_ACCEPTs, then the bytes. */
    for (int i = 0; i < PER_THREAD; i++) {
        uint64_t len = size_of(t, i), shape[1] = {len};
        data[i] = malloc(len ? len : 1);
        itest_fill(data[i], len, (uint32_t)(t * 1000 + i));
        snprintf(names[i], sizeof(names[i]), "conc/%d/%02d", t, i);
        ids[i] = itc_id(&c);
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_TENSOR_PUT;
        m.hdr.request_id = ids[i];
        itest_desc(&m.u.tensor_put.desc, names[i], TW_DTYPE_U8, 1, shape);
        m.u.tensor_put.desc.flags = TW_DESC_HAS_CRC32C;
        m.u.tensor_put.desc.crc32c = tw__crc32c(0, data[i], len);
        itc_send(&c, &m);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        TW_ASSERT_OK(itc_recv(&c, &m));
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
        TW_ASSERT_EQ_U64(m.hdr.request_id, ids[i]);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        uint64_t len = size_of(t, i), off = 0;
        do {
            uint64_t n = len - off < 300000 ? len - off : 300000;
            memset(&m, 0, sizeof(m));
            m.hdr.tag = TW_TAG_DATA;
            m.hdr.request_id = ids[i];
            m.hdr.flags = off + n < len ? TW_FRAME_MORE : 0;
            m.u.data.offset = off;
            m.u.data.bytes.ptr = data[i] + off;
            m.u.data.bytes.len = (uint32_t)n;
            itc_send(&c, &m);
            off += n;
        } while (off < len);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        TW_ASSERT_OK(itc_recv(&c, &m));
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_OK);
        TW_ASSERT_EQ_U64(m.hdr.request_id, ids[i]);
    }

    /* Gets: all requests at once; frames of different ids interleave. */
    uint64_t got[PER_THREAD] = {0};
    int finished = 0;
    for (int i = 0; i < PER_THREAD; i++) {
        ids[i] = itc_send_get(&c, names[i], 0);
    }
    while (finished < PER_THREAD) {
        TW_ASSERT_OK(itc_recv(&c, &m));
        int i = (int)(m.hdr.request_id - ids[0]);
        TW_ASSERT(i >= 0 && i < PER_THREAD);
        if (m.hdr.tag == TW_TAG_TENSOR_INFO) {
            TW_ASSERT_EQ_U64(m.u.tensor_info.desc.byte_length, size_of(t, i));
            continue;
        }
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_DATA);
        TW_ASSERT_EQ_U64(m.u.data.offset, got[i]);
        TW_ASSERT_MEM_EQ(m.u.data.bytes.ptr, data[i] + got[i], m.u.data.bytes.len);
        got[i] += m.u.data.bytes.len;
        if (!(m.hdr.flags & TW_FRAME_MORE)) {
            TW_ASSERT_EQ_U64(got[i], size_of(t, i));
            finished++;
        }
    }
    for (int i = 0; i < PER_THREAD; i++)
        free(data[i]);
    itc_close(&c);
    return NULL;
}

static void test_concurrent(void)
{
    /* A stalled reader: asks for 64 MiB and reads nothing while the
     * workers run. It must not slow anyone down or lose its data. */
    struct itc stalled;
    struct tw_msg m;
    uint64_t big = 64u << 20, shape[1] = {big};
    uint8_t *bigdata = malloc(big);
    itest_fill(bigdata, big, 77);
    itc_connect(&stalled, &srv);
    TW_ASSERT_OK(itc_handshake(&stalled, NULL));
    TW_ASSERT_EQ(itc_put(&stalled, "stalled", TW_DTYPE_U8, 1, shape, bigdata, big, 0), 0);
    uint64_t sid = itc_send_get(&stalled, "stalled", 0);

    pthread_t th[THREADS];
    uint64_t t0 = itest_now_ms();
    for (int t = 0; t < THREADS; t++)
        TW_ASSERT_EQ(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t), 0);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    fprintf(stderr, "  %d connections x %d puts + %d gets: %llu ms\n", THREADS, PER_THREAD,
            PER_THREAD, (unsigned long long)(itest_now_ms() - t0));
    /* Now the stalled reader drains its GET: every byte intact. */
    uint64_t got = 0;
    for (;;) {
        TW_ASSERT_OK(itc_recv(&stalled, &m));
        TW_ASSERT_EQ_U64(m.hdr.request_id, sid);
        if (m.hdr.tag == TW_TAG_TENSOR_INFO)
            continue;
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_DATA);
        TW_ASSERT_EQ_U64(m.u.data.offset, got);
        TW_ASSERT(memcmp(m.u.data.bytes.ptr, bigdata + got, m.u.data.bytes.len) == 0);
        got += m.u.data.bytes.len;
        if (!(m.hdr.flags & TW_FRAME_MORE))
            break;
    }
    TW_ASSERT_EQ_U64(got, big);
    TW_ASSERT_EQ(itc_delete(&stalled, "stalled"), 0);
    itc_close(&stalled);
    free(bigdata);
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "tensors"), THREADS * PER_THREAD);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "connections_total"), THREADS + 2);
    itc_close(&c);
}

enum { FLOOD = 1000000 };

static void *flood_sender(void *arg)
{
    struct itc *c = arg;
    uint8_t *buf = malloc((size_t)FLOOD * 32);
    TW_ASSERT(buf != NULL);
    for (uint64_t i = 0; i < FLOOD; i++) {
        struct tw_msg m;
        memset(&m, 0, sizeof(m));
        m.hdr.tag = TW_TAG_PING;
        m.hdr.request_id = i + 1;
        memcpy(m.u.ping.payload, &i, 8);
        TW_ASSERT_EQ(tw__msg_encode(&m, buf + i * 32, 32), 32);
    }
    TW_ASSERT_OK(itc_send_raw(c, buf, (size_t)FLOOD * 32));
    free(buf);
    return NULL;
}

static void test_backpressure(void)
{
    /* 32 MB of PINGs from a client that reads nothing for a while: the
     * server stops reading once its queue of unread replies is full instead
     * of buffering without bound, stays responsive to others, and resumes
     * when the client reads. Every PONG arrives, in order. */
    struct itc flood, other;
    struct tw_msg m;
    pthread_t th;
    itc_connect(&flood, &srv);
    itc_connect(&other, &srv);
    TW_ASSERT_OK(itc_handshake(&flood, NULL));
    TW_ASSERT_OK(itc_handshake(&other, NULL));
    TW_ASSERT_EQ(pthread_create(&th, NULL, flood_sender, &flood), 0);
    /* Wait (bounded) until the server has paused the flooding connection;
     * meanwhile other connections are answered. */
    uint64_t pauses = 0;
    for (int i = 0; i < 200 && pauses == 0; i++) {
        usleep(50000);
        pauses = itc_stat_value(&other, "input_pauses");
    }
    TW_ASSERT(pauses >= 1);
    TW_ASSERT_EQ(itc_ping(&other), 0);
    for (uint64_t i = 0; i < FLOOD; i++) {
        TW_ASSERT_OK(itc_recv(&flood, &m));
        TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PONG);
        TW_ASSERT_EQ_U64(m.hdr.request_id, i + 1);
        uint64_t v;
        memcpy(&v, m.u.ping.payload, 8);
        TW_ASSERT_EQ_U64(v, i);
    }
    pthread_join(th, NULL);
    flood.next_id = FLOOD + 1;
    TW_ASSERT_EQ(itc_ping(&flood), 0);
    itc_close(&flood);
    itc_close(&other);
}

static void test_many_connections(void)
{
    enum { N = 200 };
    static struct itc cs[N];
    for (int i = 0; i < N; i++) {
        itc_connect(&cs[i], &srv);
        TW_ASSERT_OK(itc_handshake(&cs[i], NULL));
    }
    TW_ASSERT_EQ_U64(itc_stat_value(&cs[0], "connections"), N);
    for (int i = 0; i < N; i++)
        TW_ASSERT_EQ(itc_ping(&cs[i]), 0);
    for (int i = 0; i < N; i++)
        itc_close(&cs[i]);
}

int main(void)
{
    itest_server_start(&srv, NULL);
    TW_RUN(test_concurrent);
    TW_RUN(test_backpressure);
    TW_RUN(test_many_connections);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
