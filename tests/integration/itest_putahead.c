/* The server's read-ahead of inline put payloads (src/server/conn.c,
 * ahead_plan and ahead_settle) from a raw peer with EAGER_PUT: TENSOR_PUTs
 * queued ahead of their DATA frames, as libtensorwire sends a batch, read
 * with the payload before them (STATS put_read_ahead) and never mistaken
 * for anything else; a PING where the server expects the next DATA frame,
 * so that every frame it read ahead goes back to the parser (STATS
 * put_read_ahead_missed); a peer whose payloads come in several frames,
 * which the server stops predicting; a put of several frames before small
 * ones, not predicted before its last frame; every tensor read back
 * byte-exact. */
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

/* Appends one encoded frame to buf (room for it is the caller's). */
static size_t put_frame(uint8_t *buf, const struct tw_msg *m)
{
    ssize_t n = tw__msg_encode(m, buf, 1u << 20);
    TW_ASSERT(n > 0);
    return (size_t)n;
}

static size_t put_open(uint8_t *buf, uint64_t id, const char *name, uint64_t len)
{
    struct tw_msg m;
    itc_msg(&m, TW_TAG_TENSOR_PUT, id);
    itest_desc(&m.u.tensor_put.desc, name, TW_DTYPE_U8, 1, &len);
    return put_frame(buf, &m);
}

/* One DATA frame: bytes [off, off + len) of data, MORE when more follow. */
static size_t put_part(uint8_t *buf, uint64_t id, const uint8_t *data, uint64_t off, uint64_t len,
                       int more)
{
    struct tw_msg m;
    itc_msg(&m, TW_TAG_DATA, id);
    m.hdr.flags = more ? TW_FRAME_MORE : 0;
    m.u.data.offset = off;
    m.u.data.bytes.ptr = data + off;
    m.u.data.bytes.len = (uint32_t)len;
    return put_frame(buf, &m);
}

static size_t put_data(uint8_t *buf, uint64_t id, const uint8_t *data, uint64_t len)
{
    return put_part(buf, id, data, 0, len, 0);
}

static size_t put_ping(uint8_t *buf, uint64_t id)
{
    struct tw_msg m;
    itc_msg(&m, TW_TAG_PING, id);
    memcpy(m.u.ping.payload, "aheadpng", sizeof(m.u.ping.payload));
    return put_frame(buf, &m);
}

/* Reads replies until every put in ids[0..n) has its OK (PUT_ACCEPT first)
 * and the PING ping_id (0: none) its PONG. */
static void expect_puts_done(struct itc *c, const uint64_t *ids, size_t n, uint64_t ping_id)
{
    int *accepted = calloc(n, sizeof(int)), *ok = calloc(n, sizeof(int));
    size_t oks = 0;
    int pong = ping_id == 0;
    TW_ASSERT(accepted && ok);
    while (oks < n || !pong) {
        struct tw_msg r;
        TW_ASSERT_EQ(itc_recv(c, &r), 0);
        if (r.hdr.tag == TW_TAG_PONG) {
            TW_ASSERT_EQ_U64(r.hdr.request_id, ping_id);
            TW_ASSERT(!pong);
            pong = 1;
            continue;
        }
        size_t i = 0;
        while (i < n && ids[i] != r.hdr.request_id)
            i++;
        TW_ASSERT(i < n);
        if (r.hdr.tag == TW_TAG_ERROR)
            TW_FAIL("put %llu: ERROR %u: %.*s", (unsigned long long)ids[i], r.u.error.code,
                    (int)r.u.error.message.len, (const char *)r.u.error.message.ptr);
        if (r.hdr.tag == TW_TAG_PUT_ACCEPT) {
            TW_ASSERT(!accepted[i]);
            TW_ASSERT_EQ(r.u.put_accept.data_plane, TW_DP_INLINE);
            accepted[i] = 1;
        } else {
            TW_ASSERT_EQ(r.hdr.tag, TW_TAG_OK);
            TW_ASSERT(accepted[i] && !ok[i]);
            ok[i] = 1;
            oks++;
        }
    }
    free(accepted);
    free(ok);
}

static void expect_stored(struct itc *c, const char *name, const uint8_t *data, uint64_t len)
{
    uint8_t *back = NULL;
    uint64_t back_len = 0;
    TW_ASSERT_EQ(itc_get(c, name, &back, &back_len, NULL), 0);
    TW_ASSERT_EQ_U64(back_len, len);
    TW_ASSERT_MEM_EQ(back, data, len);
    free(back);
}

/* One round's puts: their data, names and ids, and the bytes a test sends
 * (room for every frame of them). */
struct batch {
    size_t n;
    const uint64_t *sizes;
    uint8_t **data;
    char (*names)[48];
    uint64_t *ids;
    uint8_t *wire;
};

static void batch_init(struct batch *b, size_t n, const uint64_t *sizes)
{
    size_t total = 1024;
    b->n = n;
    b->sizes = sizes;
    b->data = calloc(n, sizeof(*b->data));
    b->names = calloc(n, sizeof(*b->names));
    b->ids = calloc(n, sizeof(*b->ids));
    TW_ASSERT(b->data && b->names && b->ids);
    for (size_t i = 0; i < n; i++) {
        b->data[i] = malloc(sizes[i]);
        TW_ASSERT(b->data[i] != NULL);
        total += sizes[i] + 256 * 4;
    }
    b->wire = malloc(total);
    TW_ASSERT(b->wire != NULL);
}

static void batch_free(struct batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        free(b->data[i]);
    free(b->data);
    free(b->names);
    free(b->ids);
    free(b->wire);
}

/* New contents, names prefix/round/i and ids for a round; encodes every
 * TENSOR_PUT into b->wire and returns their bytes. */
static size_t batch_open(struct batch *b, struct itc *c, const char *prefix, int round)
{
    size_t off = 0;
    for (size_t i = 0; i < b->n; i++) {
        itest_fill(b->data[i], b->sizes[i], (uint32_t)(round * 131 + i) ^ (uint32_t)prefix[0]);
        snprintf(b->names[i], sizeof(b->names[i]), "%s/%d/%zu", prefix, round, i);
        b->ids[i] = itc_id(c);
        off += put_open(b->wire + off, b->ids[i], b->names[i], b->sizes[i]);
    }
    return off;
}

/* Sends b->wire[0, len), reads every put's replies (and the PONG of
 * ping_id, 0 for none), and reads every tensor back. */
static void batch_finish(struct batch *b, struct itc *c, size_t len, uint64_t ping_id)
{
    TW_ASSERT_OK(itc_send_raw(c, b->wire, len));
    expect_puts_done(c, b->ids, b->n, ping_id);
    for (size_t i = 0; i < b->n; i++)
        expect_stored(c, b->names[i], b->data[i], b->sizes[i]);
}

/* Connects with EAGER_PUT (and caps), prepares b for sizes[0..n) and
 * reads the read-ahead counters before the test: *ahead0, *missed0. */
static void peer_open(struct itc *c, struct batch *b, const uint64_t *sizes, size_t n,
                      uint64_t caps, uint64_t *ahead0, uint64_t *missed0)
{
    itc_connect(c, &srv);
    TW_ASSERT_OK(itc_handshake_caps(c, NULL, TW_CAP_INLINE_DATA | TW_CAP_EAGER_PUT | caps));
    *ahead0 = itc_stat_value(c, "put_read_ahead");
    *missed0 = itc_stat_value(c, "put_read_ahead_missed");
    TW_ASSERT(*ahead0 != UINT64_MAX && *missed0 != UINT64_MAX);
    batch_init(b, n, sizes);
}

/* Puts queued ahead of their payloads, in one send: the payloads behind
 * the first one read in place are read with it (put_read_ahead moves),
 * none is mistaken (put_read_ahead_missed stays). Sizes mix small and
 * large payloads and one above the 64 KiB a buffered read takes. Rounds
 * repeat (new names) until the server read ahead at least once: the
 * bytes must have arrived when it reads, which a busy machine may delay. */
static void test_grouped_puts(void)
{
    static const uint64_t sizes[] = {20000, 32768, 32768, 1,     5000,  32768, 70000,
                                     32768, 100,   32768, 32768, 32768, 131072};
    struct itc c;
    struct batch b;
    uint64_t ahead0, missed0;
    peer_open(&c, &b, sizes, sizeof(sizes) / sizeof(sizes[0]), TW_CAP_PAYLOAD_CRC32C, &ahead0,
              &missed0);
    int rounds = 0;
    for (; rounds < 20; rounds++) {
        size_t off = batch_open(&b, &c, "ahead", rounds);
        for (size_t i = 0; i < b.n; i++)
            off += put_data(b.wire + off, b.ids[i], b.data[i], sizes[i]);
        batch_finish(&b, &c, off, 0);
        if (itc_stat_value(&c, "put_read_ahead") > ahead0)
            break;
    }
    TW_ASSERT(rounds < 20); /* read ahead in one of the rounds */
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "put_read_ahead_missed"), missed0);
    batch_free(&b);
    itc_close(&c);
}

/* A PING where the server predicts the next put's DATA frame: a 100 KB
 * payload (read in place: more than a buffered read takes) is followed by
 * a PING, then the DATA frames of seven 32 KiB puts announced before. The
 * read that finishes the first payload took the PING and what follows it
 * into the next puts' tensors: those bytes go back to the parser, which
 * answers the PING and stores every put byte-exact. Rounds repeat until
 * such a read happened (put_read_ahead_missed moves). */
static void test_ping_between(void)
{
    static const uint64_t sizes[] = {100000, 32768, 32768, 32768, 32768, 32768, 32768, 32768};
    struct itc c;
    struct batch b;
    uint64_t ahead0, missed0;
    peer_open(&c, &b, sizes, sizeof(sizes) / sizeof(sizes[0]), 0, &ahead0, &missed0);
    int rounds = 0;
    for (; rounds < 20; rounds++) {
        size_t off = batch_open(&b, &c, "ahead-ping", rounds);
        off += put_data(b.wire + off, b.ids[0], b.data[0], sizes[0]);
        uint64_t ping_id = itc_id(&c);
        off += put_ping(b.wire + off, ping_id);
        for (size_t i = 1; i < b.n; i++)
            off += put_data(b.wire + off, b.ids[i], b.data[i], sizes[i]);
        batch_finish(&b, &c, off, ping_id);
        if (itc_stat_value(&c, "put_read_ahead_missed") > missed0)
            break;
    }
    TW_ASSERT(rounds < 20);
    batch_free(&b);
    itc_close(&c);
}

/* A peer that sends each payload in several DATA frames (MORE), its
 * TENSOR_PUTs ahead: every prediction would miss. After a few misses the
 * connection is not read ahead any more (server.h,
 * TW_SRV_AHEAD_MISSES_MAX): at most 8 misses for 120 puts of 100 KiB in
 * four frames each, every put stored byte-exact. */
static void test_chunked_peer(void)
{
    enum { FRAMES = 4, PART = 25600 };
    static const uint64_t sizes[] = {FRAMES * PART, FRAMES * PART, FRAMES * PART,
                                     FRAMES * PART, FRAMES * PART, FRAMES * PART};
    struct itc c;
    struct batch b;
    uint64_t ahead0, missed0;
    peer_open(&c, &b, sizes, sizeof(sizes) / sizeof(sizes[0]), 0, &ahead0, &missed0);
    for (int round = 0; round < 20; round++) {
        size_t off = batch_open(&b, &c, "ahead-chunked", round);
        for (size_t i = 0; i < b.n; i++)
            for (size_t f = 0; f < FRAMES; f++)
                off += put_part(b.wire + off, b.ids[i], b.data[i], f * PART, PART, f + 1 < FRAMES);
        batch_finish(&b, &c, off, 0);
    }
    TW_ASSERT(itc_stat_value(&c, "put_read_ahead_missed") - missed0 <= 8);
    batch_free(&b);
    itc_close(&c);
}

/* A large put in three frames (MORE), then eight 32 KiB puts, every
 * TENSOR_PUT ahead: the end of a frame that is not its put's last is
 * followed by that put's next frame, so nothing is predicted there (no
 * miss in ten rounds or more), while the small puts after the last frame
 * are still read ahead (rounds go on, up to 20, until they were); every
 * put stored byte-exact. */
static void test_large_then_small(void)
{
    enum { PART = 100000 };
    static const uint64_t sizes[] = {3 * PART, 32768, 32768, 32768, 32768,
                                     32768,    32768, 32768, 32768};
    struct itc c;
    struct batch b;
    uint64_t ahead0, missed0;
    peer_open(&c, &b, sizes, sizeof(sizes) / sizeof(sizes[0]), 0, &ahead0, &missed0);
    int round = 0;
    for (; round < 20; round++) {
        size_t off = batch_open(&b, &c, "ahead-large", round);
        for (int f = 0; f < 3; f++)
            off += put_part(b.wire + off, b.ids[0], b.data[0], (uint64_t)f * PART, PART, f < 2);
        for (size_t i = 1; i < b.n; i++)
            off += put_data(b.wire + off, b.ids[i], b.data[i], sizes[i]);
        batch_finish(&b, &c, off, 0);
        if (round >= 9 && itc_stat_value(&c, "put_read_ahead") > ahead0)
            break;
    }
    TW_ASSERT(round < 20); /* the small puts were read ahead at least once */
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "put_read_ahead_missed"), missed0);
    batch_free(&b);
    itc_close(&c);
}

int main(void)
{
    itest_server_start(&srv, NULL);
    TW_RUN(test_grouped_puts);
    TW_RUN(test_ping_between);
    TW_RUN(test_chunked_peer);
    TW_RUN(test_large_then_small);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_DONE();
}
