/*
 * Malformed input, one table row per rule: raw frames are assembled byte by
 * byte (the encoder refuses to produce most of them) and the decoder must
 * answer the exact verdict docs/protocol.md gives, never read past the
 * buffer (run under ASan), and report the first violation in the spec's
 * order.
 */
#include "proto_fixtures.h"
#include "tw_test.h"

/* ---- raw frame builder --------------------------------------------------- */

struct fb {
    uint8_t b[8192];
    size_t n;
};

static void put(struct fb *f, const void *p, size_t n)
{
    TW_ASSERT(f->n + n <= sizeof(f->b));
    memcpy(f->b + f->n, p, n);
    f->n += n;
}
static void p8(struct fb *f, uint8_t v)
{
    put(f, &v, 1);
}
static void p16(struct fb *f, uint16_t v)
{
    uint8_t b[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    put(f, b, 2);
}
static void p32(struct fb *f, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p8(f, (uint8_t)(v >> (8 * i)));
}
static void p64(struct fb *f, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p8(f, (uint8_t)(v >> (8 * i)));
}
static void pstr(struct fb *f, const char *s)
{
    put(f, s, strlen(s));
}

/* Header with payload_len fixed up by fin(). */
static void hdr(struct fb *f, uint32_t tag, uint64_t id, uint8_t flags)
{
    f->n = 0;
    pstr(f, "TWIR");
    p8(f, 1);
    p8(f, flags);
    p16(f, 0);
    p32(f, tag);
    p32(f, 0);
    p64(f, id);
}
static void fin(struct fb *f)
{
    uint32_t len = (uint32_t)(f->n - 24);
    for (int i = 0; i < 4; i++)
        f->b[12 + i] = (uint8_t)(len >> (8 * i));
}

static int decode(const struct fb *f, uint32_t max_frame, struct tw_msg *m)
{
    ssize_t n = tw__msg_decode(f->b, f->n, max_frame, m);
    if (n >= 0) {
        TW_ASSERT_EQ(n, f->n);
        return 0;
    }
    return (int)n;
}

#define EXPECT(f, verdict)                                                                         \
    do {                                                                                           \
        struct tw_msg m_;                                                                          \
        TW_ASSERT_ERR(decode((f), TW_DEFAULT_MAX_FRAME, &m_), (verdict));                          \
    } while (0)

/* Descriptor with explicit fields; shape given as ndim values. */
struct dspec {
    uint8_t dtype, ndim, flags;
    const char *name, *tag;
    int name_len, tag_len; /* -1: strlen */
    uint64_t byte_length;
    uint32_t crc;
    uint16_t res16;
    uint32_t res32;
    uint64_t shape[20];
};

static void pdesc(struct fb *f, const struct dspec *d)
{
    size_t nl = d->name_len < 0 ? strlen(d->name) : (size_t)d->name_len;
    size_t tl = d->tag_len < 0 ? strlen(d->tag) : (size_t)d->tag_len;
    p8(f, d->dtype);
    p8(f, d->ndim);
    p8(f, d->flags);
    p8(f, (uint8_t)tl);
    p16(f, (uint16_t)nl);
    p16(f, d->res16);
    p64(f, d->byte_length);
    p32(f, d->crc);
    p32(f, d->res32);
    for (unsigned i = 0; i < d->ndim; i++)
        p64(f, d->shape[i]);
    put(f, d->name, nl);
    put(f, d->tag, tl);
}

static struct dspec good_desc(void)
{
    struct dspec d = {.dtype = TW_DTYPE_F32,
                      .ndim = 2,
                      .name = "w",
                      .tag = "cpu",
                      .name_len = -1,
                      .tag_len = -1,
                      .byte_length = 24,
                      .shape = {2, 3}};
    return d;
}

static void put_frame(struct fb *f, uint8_t flags, const struct dspec *d)
{
    hdr(f, TW_TAG_TENSOR_PUT, 1, 0);
    p8(f, flags);
    p8(f, 0);
    p16(f, 0);
    pdesc(f, d);
    fin(f);
}

static void request_frame(struct fb *f, uint8_t flags, const void *name, size_t len)
{
    hdr(f, TW_TAG_TENSOR_REQUEST, 1, 0);
    p8(f, flags);
    p8(f, 0);
    p16(f, (uint16_t)len);
    put(f, name, len);
    fin(f);
}

static void hello_frame(struct fb *f, uint64_t caps, uint32_t max_frame, uint32_t inflight,
                        const char *agent)
{
    hdr(f, TW_TAG_HELLO, 0, 0);
    p64(f, caps);
    p32(f, max_frame);
    p32(f, inflight);
    p16(f, (uint16_t)strlen(agent));
    pstr(f, agent);
    fin(f);
}

/* ---- header ------------------------------------------------------------ */

static void truncated_at_every_length(void)
{
    struct fb f;
    struct dspec d = good_desc();
    put_frame(&f, 0, &d);
    struct tw_msg m;
    for (size_t k = 0; k < f.n; k++)
        TW_ASSERT_ERR(tw__msg_decode(f.b, k, TW_DEFAULT_MAX_FRAME, &m), TW_EAGAIN_FRAME);
    TW_ASSERT_EQ(tw__msg_decode(f.b, f.n, TW_DEFAULT_MAX_FRAME, &m), f.n);
    /* Truncated headers are incomplete even when the bytes present are bad:
     * the decoder looks at nothing before it has 24 bytes. */
    f.b[0] = 'X';
    for (size_t k = 0; k < 24; k++)
        TW_ASSERT_ERR(tw__msg_decode(f.b, k, TW_DEFAULT_MAX_FRAME, &m), TW_EAGAIN_FRAME);
    /* The header alone is enough to reject an oversized frame early. */
    hdr(&f, TW_TAG_DATA, 1, 0);
    p64(&f, 0);
    fin(&f);
    f.b[12] = 0x01;
    f.b[13] = 0x10; /* 4097 */
    TW_ASSERT_ERR(tw__msg_decode(f.b, 24, TW_PREAUTH_MAX_FRAME, &m), TW_EFRAME_TOO_LARGE);
    TW_ASSERT_ERR(tw__msg_decode(f.b, 24, TW_DEFAULT_MAX_FRAME, &m), TW_EAGAIN_FRAME);
}

static void header_rules_in_order(void)
{
    struct fb f;
    hdr(&f, TW_TAG_OK, 1, 0);
    fin(&f);
    EXPECT(&f, 0);
    for (int i = 0; i < 4; i++) {
        struct fb g = f;
        g.b[i] ^= 0x20;
        EXPECT(&g, TW_EBAD_MAGIC);
    }
    static const uint8_t versions[] = {0, 2, 255};
    for (unsigned i = 0; i < sizeof(versions); i++) {
        struct fb g = f;
        g.b[4] = versions[i];
        EXPECT(&g, TW_EBAD_VERSION);
    }
    static const uint32_t tags[] = {0, 0x1A, 0x100, 0x01000005u, 0xFFFFFFFFu};
    for (unsigned i = 0; i < 5; i++) {
        struct fb g = f;
        for (int k = 0; k < 4; k++)
            g.b[8 + k] = (uint8_t)(tags[i] >> (8 * k));
        EXPECT(&g, TW_EUNKNOWN_TAG);
    }
    for (int bit = 1; bit < 8; bit++) {
        struct fb g = f;
        g.b[5] = (uint8_t)(1u << bit);
        EXPECT(&g, TW_EBAD_FLAGS);
    }
    for (int k = 6; k < 8; k++) {
        struct fb g = f;
        g.b[k] = 1;
        EXPECT(&g, TW_EBAD_FLAGS);
    }
    /* MORE is only for DATA, LIST_REPLY and RDMA_REGISTER (bit 5). */
    struct fb g = f;
    g.b[5] = TW_FRAME_MORE;
    EXPECT(&g, TW_EBAD_FLAGS);
    static const uint32_t no_more[] = {TW_TAG_RDMA_AVAILABLE, TW_TAG_RDMA_DONE, TW_TAG_RDMA_READY};
    for (unsigned i = 0; i < 3; i++) {
        struct fb h = f;
        h.b[5] = TW_FRAME_MORE;
        for (int k = 0; k < 4; k++)
            h.b[8 + k] = (uint8_t)(no_more[i] >> (8 * k));
        TW_ASSERT_ERR(tw__frame_decode_header(h.b, TW_FRAME_HEADER_LEN, TW_DEFAULT_MAX_FRAME,
                                              &(struct tw_frame_header){0}),
                      TW_EBAD_FLAGS);
    }

    /* Order: magic before version before tag before size before flags. */
    g = f;
    g.b[0] = 0;
    g.b[4] = 9;
    g.b[8] = 0x77;
    g.b[15] = 0x7F;
    g.b[5] = 0x80;
    EXPECT(&g, TW_EBAD_MAGIC);
    g.b[0] = 'T';
    EXPECT(&g, TW_EBAD_VERSION);
    g.b[4] = 1;
    EXPECT(&g, TW_EUNKNOWN_TAG);
    g.b[8] = TW_TAG_OK;
    EXPECT(&g, TW_EFRAME_TOO_LARGE);
    g.b[15] = 0;
    EXPECT(&g, TW_EBAD_FLAGS);
}

static void oversized_payload_len(void)
{
    struct fb f;
    hdr(&f, TW_TAG_DATA, 1, 0);
    p64(&f, 0);
    fin(&f);
    struct tw_msg m;
    uint32_t lens[] = {TW_PREAUTH_MAX_FRAME + 1, TW_DEFAULT_MAX_FRAME + 1, 0xFFFFFFFFu};
    uint32_t limits[] = {TW_PREAUTH_MAX_FRAME, TW_DEFAULT_MAX_FRAME, TW_MAX_MAX_FRAME};
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 4; k++)
            f.b[12 + k] = (uint8_t)(lens[i] >> (8 * k));
        TW_ASSERT_ERR(tw__msg_decode(f.b, f.n, limits[i], &m), TW_EFRAME_TOO_LARGE);
    }
    /* Exactly at the limit is allowed (and incomplete here). */
    for (int k = 0; k < 4; k++)
        f.b[12 + k] = (uint8_t)(TW_PREAUTH_MAX_FRAME >> (8 * k));
    TW_ASSERT_ERR(tw__msg_decode(f.b, f.n, TW_PREAUTH_MAX_FRAME, &m), TW_EAGAIN_FRAME);
}

static void request_id_rules(void)
{
    struct fb f;
    hello_frame(&f, 1, 1u << 20, 1, "a");
    f.b[16] = 1;
    EXPECT(&f, TW_EBAD_REQUEST_ID);
    hdr(&f, TW_TAG_OK, 0, 0);
    fin(&f);
    EXPECT(&f, TW_EBAD_REQUEST_ID);
    request_frame(&f, 0, "x", 1);
    f.b[16] = 0;
    EXPECT(&f, TW_EBAD_REQUEST_ID);
    hdr(&f, TW_TAG_GOODBYE, 5, 0);
    p32(&f, 0);
    fin(&f);
    EXPECT(&f, TW_EBAD_REQUEST_ID);
    /* ERROR may carry either. */
    hdr(&f, TW_TAG_ERROR, 0, 0);
    p32(&f, 3);
    p16(&f, 0);
    fin(&f);
    EXPECT(&f, 0);
    f.b[16] = 9;
    EXPECT(&f, 0);
}

/* ---- lengths ----------------------------------------------------------- */

static void length_mismatches(void)
{
    struct fb f;
    /* Fixed-size payloads, one byte short and one byte long. */
    static const struct {
        uint32_t tag;
        uint64_t id;
        size_t len;
    } fixed[] = {
        {TW_TAG_AUTH, 0, 64},      {TW_TAG_AUTH_OK, 0, 32},       {TW_TAG_PUT_ACCEPT, 1, 4},
        {TW_TAG_RDMA_DONE, 1, 16}, {TW_TAG_RDMA_REGISTER, 1, 24}, {TW_TAG_RDMA_READY, 1, 0},
        {TW_TAG_OK, 1, 0},         {TW_TAG_PING, 1, 8},           {TW_TAG_PONG, 1, 8},
        {TW_TAG_GOODBYE, 0, 4},    {TW_TAG_STATS, 1, 0},
    };
    for (unsigned i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) {
        hdr(&f, fixed[i].tag, fixed[i].id, 0);
        for (size_t k = 0; k < fixed[i].len; k++)
            p8(&f, fixed[i].tag == TW_TAG_PUT_ACCEPT && k == 0 ? 1 : 0);
        fin(&f);
        EXPECT(&f, 0);
        p8(&f, 0);
        fin(&f);
        EXPECT(&f, TW_EBAD_LENGTH);
        if (fixed[i].len > 0) {
            f.n -= 2;
            fin(&f);
            EXPECT(&f, TW_EBAD_LENGTH);
        }
    }
    /* Length fields that point past the payload. */
    hello_frame(&f, 1, 1u << 20, 1, "abc");
    f.b[24 + 16] = 4; /* agent_len 4, 3 bytes present */
    EXPECT(&f, TW_EBAD_LENGTH);
    request_frame(&f, 0, "abc", 3);
    f.b[24 + 2] = 200;
    EXPECT(&f, TW_EBAD_LENGTH);
    /* Structure beats fields: bad flags and a name running past the end. */
    f.b[24] = 0x80;
    EXPECT(&f, TW_EBAD_LENGTH);
    hdr(&f, TW_TAG_DATA, 1, 0);
    p32(&f, 0); /* offset needs 8 bytes */
    fin(&f);
    EXPECT(&f, TW_EBAD_LENGTH);
    hdr(&f, TW_TAG_ERROR, 1, 0);
    p32(&f, 1);
    p16(&f, 5);
    pstr(&f, "abcd");
    fin(&f);
    EXPECT(&f, TW_EBAD_LENGTH);
    /* Descriptor: ndim says more dimensions than there are bytes. */
    struct dspec d = good_desc();
    put_frame(&f, 0, &d);
    f.b[24 + 4 + 1] = 9;
    EXPECT(&f, TW_EBAD_LENGTH);
}

/* ---- descriptor --------------------------------------------------------- */

static void descriptor_rules(void)
{
    struct fb f;
    struct dspec d = good_desc();
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    d = good_desc();
    d.byte_length = 25;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_SHAPE);

    d = good_desc();
    d.dtype = TW_DTYPE_F64;
    d.shape[0] = UINT64_C(1) << 62;
    d.shape[1] = 4;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EOVERFLOW);

    d = good_desc();
    d.dtype = TW_DTYPE_U8;
    d.shape[0] = UINT64_C(1) << 32;
    d.shape[1] = UINT64_C(1) << 32;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EOVERFLOW);

    /* Element size alone overflows: 2^62 f64 = 2^65 bytes. */
    d = good_desc();
    d.dtype = TW_DTYPE_F64;
    d.ndim = 1;
    d.shape[0] = UINT64_C(1) << 62;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EOVERFLOW);

    /* A zero dimension makes it empty, wherever it is. */
    d = good_desc();
    d.ndim = 3;
    d.shape[0] = UINT64_C(1) << 63;
    d.shape[1] = 4;
    d.shape[2] = 0;
    d.byte_length = 0;
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    /* The largest representable tensor is fine. */
    d = good_desc();
    d.dtype = TW_DTYPE_U8;
    d.ndim = 1;
    d.shape[0] = UINT64_MAX;
    d.byte_length = UINT64_MAX;
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    /* Scalar: ndim 0 is one element. */
    d = good_desc();
    d.ndim = 0;
    d.byte_length = 4;
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    d = good_desc();
    d.ndim = 17;
    d.byte_length = 4;
    for (int i = 0; i < 17; i++)
        d.shape[i] = 1;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_SHAPE);
    d.ndim = 16;
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    static const uint8_t bad_dtypes[] = {0, 16, 255};
    for (unsigned i = 0; i < sizeof(bad_dtypes); i++) {
        d = good_desc();
        d.dtype = bad_dtypes[i];
        put_frame(&f, 0, &d);
        EXPECT(&f, TW_EBAD_DTYPE);
    }

    d = good_desc();
    d.res16 = 1;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_FLAGS);
    d = good_desc();
    d.res32 = 0x100;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_FLAGS);
    d = good_desc();
    d.flags = 0x02;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_FLAGS);
    d = good_desc();
    d.crc = 0x1234;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_FIELD);
    d.flags = TW_DESC_HAS_CRC32C;
    put_frame(&f, 0, &d);
    EXPECT(&f, 0);

    /* Transfer flags and reserved bytes of TENSOR_PUT. */
    d = good_desc();
    put_frame(&f, 0x02, &d);
    EXPECT(&f, TW_EBAD_FLAGS);
    put_frame(&f, 0, &d);
    f.b[24 + 2] = 1;
    EXPECT(&f, TW_EBAD_FLAGS);

    /* First violation wins: fatal reserved bits come before the name. */
    d = good_desc();
    d.name = "";
    put_frame(&f, 0x80, &d);
    EXPECT(&f, TW_EBAD_FLAGS);
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_NAME);
    /* ...and dtype before shape before name before device tag. */
    d.tag = "CPU";
    d.byte_length = 1;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_SHAPE);
    d.dtype = 0;
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_DTYPE);
    d = good_desc();
    d.name = "";
    d.tag = "CPU";
    put_frame(&f, 0, &d);
    EXPECT(&f, TW_EBAD_NAME);

    /* TENSOR_INFO data_plane. */
    d = good_desc();
    hdr(&f, TW_TAG_TENSOR_INFO, 1, 0);
    p8(&f, 3);
    p8(&f, 0);
    p16(&f, 0);
    pdesc(&f, &d);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
}

/* ---- names -------------------------------------------------------------- */

static void names(void)
{
    static const struct {
        const char *what;
        const char *bytes;
        size_t len;
        int verdict;
    } rows[] = {
        {"empty", "", 0, TW_EBAD_NAME},
        {"ascii", "layer0.weight", 13, 0},
        {"two-byte", "caf\xc3\xa9", 5, 0},
        {"three-byte", "\xe2\x82\xac", 3, 0},
        {"four-byte", "\xf0\x9f\x98\x80", 4, 0},
        {"U+10FFFF", "\xf4\x8f\xbf\xbf", 4, 0},
        {"embedded NUL", "a\0b", 3, TW_EBAD_NAME},
        {"lone continuation", "\x80", 1, TW_EBAD_NAME},
        {"0xFF", "a\xff", 2, TW_EBAD_NAME},
        {"0xFE", "\xfe", 1, TW_EBAD_NAME},
        {"overlong '/' 2 bytes", "\xc0\xaf", 2, TW_EBAD_NAME},
        {"overlong NUL 2 bytes", "\xc0\x80", 2, TW_EBAD_NAME},
        {"overlong C1", "\xc1\xbf", 2, TW_EBAD_NAME},
        {"overlong '/' 3 bytes", "\xe0\x80\xaf", 3, TW_EBAD_NAME},
        {"overlong U+07FF 3 bytes", "\xe0\x9f\xbf", 3, TW_EBAD_NAME},
        {"overlong '/' 4 bytes", "\xf0\x80\x80\xaf", 4, TW_EBAD_NAME},
        {"overlong U+FFFF 4 bytes", "\xf0\x8f\xbf\xbf", 4, TW_EBAD_NAME},
        {"surrogate D800", "\xed\xa0\x80", 3, TW_EBAD_NAME},
        {"surrogate DFFF", "\xed\xbf\xbf", 3, TW_EBAD_NAME},
        {"U+D7FF ok", "\xed\x9f\xbf", 3, 0},
        {"above U+10FFFF", "\xf4\x90\x80\x80", 4, TW_EBAD_NAME},
        {"lead F5", "\xf5\x80\x80\x80", 4, TW_EBAD_NAME},
        {"truncated 3-byte", "ab\xe2\x82", 4, TW_EBAD_NAME},
        {"truncated 4-byte", "\xf0\x9f\x98", 3, TW_EBAD_NAME},
        {"bad continuation", "\xe2\x28\xa1", 3, TW_EBAD_NAME},
        {"ESC", "a\x1b[2Jb", 6, TW_EBAD_NAME},
        {"DEL last", "layer0.weight\x7f", 14, TW_EBAD_NAME},
        {"tab first", "\tlayer0", 7, TW_EBAD_NAME},
        {"C1 NEL after ASCII", "kv/0/\xc2\x85", 7, TW_EBAD_NAME},
        {"U+00A0 ok", "kv\xc2\xa0", 4, 0},
        {"space and tilde ok", " ~", 2, 0},
    };
    struct fb f;
    for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fprintf(stderr, "  name: %s\n", rows[i].what);
        request_frame(&f, 0, rows[i].bytes, rows[i].len);
        EXPECT(&f, rows[i].verdict);
        /* The same rule in STAT, DELETE and descriptors. */
        hdr(&f, TW_TAG_STAT, 1, 0);
        p16(&f, (uint16_t)rows[i].len);
        put(&f, rows[i].bytes, rows[i].len);
        fin(&f);
        EXPECT(&f, rows[i].verdict);
        hdr(&f, TW_TAG_DELETE, 1, 0);
        p16(&f, (uint16_t)rows[i].len);
        put(&f, rows[i].bytes, rows[i].len);
        fin(&f);
        EXPECT(&f, rows[i].verdict);
        struct dspec d = good_desc();
        d.name = rows[i].bytes;
        d.name_len = (int)rows[i].len;
        put_frame(&f, 0, &d);
        EXPECT(&f, rows[i].verdict);
    }
    static char longname[1026];
    memset(longname, 'n', sizeof(longname));
    request_frame(&f, 0, longname, 1024);
    EXPECT(&f, 0);
    request_frame(&f, 0, longname, 1025);
    EXPECT(&f, TW_EBAD_NAME);
    /* LIST prefix: may be empty, otherwise a name. */
    hdr(&f, TW_TAG_LIST, 1, 0);
    p16(&f, 0);
    fin(&f);
    EXPECT(&f, 0);
    hdr(&f, TW_TAG_LIST, 1, 0);
    p16(&f, 2);
    put(&f, "\xc0\xaf", 2);
    fin(&f);
    EXPECT(&f, TW_EBAD_NAME);
}

static void device_tags(void)
{
    static const struct {
        const char *tag;
        int verdict;
    } rows[] = {
        {"cpu", 0},
        {"cuda:0", 0},
        {"cuda:7", 0},
        {"cuda:255", 0},
        {"rocm:0", 0},
        {"host_pinned", 0},
        {"", TW_EBAD_DEVICE_TAG},
        {"CPU", TW_EBAD_DEVICE_TAG},
        {"cuda", TW_EBAD_DEVICE_TAG},
        {"cuda:", TW_EBAD_DEVICE_TAG},
        {"cuda:01", TW_EBAD_DEVICE_TAG},
        {"cuda:256", TW_EBAD_DEVICE_TAG},
        {"cuda:1000", TW_EBAD_DEVICE_TAG},
        {"cuda0", TW_EBAD_DEVICE_TAG},
        {"cuda:-1", TW_EBAD_DEVICE_TAG},
        {"cuda:a", TW_EBAD_DEVICE_TAG},
        {"gpu 0", TW_EBAD_DEVICE_TAG},
        {"cpu\n", TW_EBAD_DEVICE_TAG},
        {"abcdefghijklmnopqrstuvwxyz012345", 0},
        {"abcdefghijklmnopqrstuvwxyz0123456", TW_EBAD_DEVICE_TAG},
    };
    struct fb f;
    for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        fprintf(stderr, "  device tag: \"%s\"\n", rows[i].tag);
        struct dspec d = good_desc();
        d.tag = rows[i].tag;
        put_frame(&f, 0, &d);
        EXPECT(&f, rows[i].verdict);
    }
}

/* ---- handshake ---------------------------------------------------------- */

static void caps_and_hello(void)
{
    struct fb f;
    struct tw_msg m;
    hello_frame(&f, 0x8, 1u << 20, 1, "a");
    EXPECT(&f, TW_EBAD_CAPS);
    hello_frame(&f, 0x9, 1u << 20, 1, "a");
    EXPECT(&f, TW_EBAD_CAPS);
    hello_frame(&f, 0xC, 1u << 20, 1, "a");
    EXPECT(&f, 0);
    /* Reserved bits are ignored and masked off; bits 4 (EAGER_PUT), 5
     * (RDMA_PROGRESSIVE), 6 (EAGER_RDMA_PUT) and 7 (RDMA_ATTACH_READS) are
     * kept. */
    hello_frame(&f, UINT64_C(0x8000000000000101), 1u << 20, 1, "a");
    TW_ASSERT_OK(decode(&f, TW_PREAUTH_MAX_FRAME, &m));
    TW_ASSERT_EQ_U64(m.u.hello.caps, 0x1);
    hello_frame(&f, UINT64_C(0x8000000000000085), 1u << 20, 1, "a");
    TW_ASSERT_OK(decode(&f, TW_PREAUTH_MAX_FRAME, &m));
    TW_ASSERT_EQ_U64(m.u.hello.caps, 0x85);
    hello_frame(&f, UINT64_C(0x8000000000000045), 1u << 20, 1, "a");
    TW_ASSERT_OK(decode(&f, TW_PREAUTH_MAX_FRAME, &m));
    TW_ASSERT_EQ_U64(m.u.hello.caps, 0x45);
    hello_frame(&f, UINT64_C(0x8000000000000021), 1u << 20, 1, "a");
    TW_ASSERT_OK(decode(&f, TW_PREAUTH_MAX_FRAME, &m));
    TW_ASSERT_EQ_U64(m.u.hello.caps, 0x21);
    hello_frame(&f, UINT64_C(0x8000000000000011), 1u << 20, 1, "a");
    TW_ASSERT_OK(decode(&f, TW_PREAUTH_MAX_FRAME, &m));
    TW_ASSERT_EQ_U64(m.u.hello.caps, 0x11);
    /* ...but do not rescue bit 3 without bit 2. */
    hello_frame(&f, UINT64_C(0xFFFFFFFFFFFFFFF8), 1u << 20, 1, "a");
    EXPECT(&f, TW_EBAD_CAPS);
    /* Limits. */
    hello_frame(&f, 1, TW_MIN_MAX_FRAME - 1, 1, "a");
    EXPECT(&f, TW_EBAD_FIELD);
    hello_frame(&f, 1, TW_MIN_MAX_FRAME, 1, "a");
    EXPECT(&f, 0);
    hello_frame(&f, 1, TW_MAX_MAX_FRAME + 1, 1, "a");
    EXPECT(&f, TW_EBAD_FIELD);
    hello_frame(&f, 1, TW_MAX_MAX_FRAME, 65536, "a");
    EXPECT(&f, 0);
    hello_frame(&f, 1, 1u << 20, 0, "a");
    EXPECT(&f, TW_EBAD_FIELD);
    hello_frame(&f, 1, 1u << 20, 65537, "a");
    EXPECT(&f, TW_EBAD_FIELD);
    hello_frame(&f, 1, 1u << 20, 1, "");
    EXPECT(&f, 0);
    hello_frame(&f, 1, 1u << 20, 1, "bad\tagent");
    EXPECT(&f, TW_EBAD_FIELD);
    hello_frame(&f, 1, 1u << 20, 1,
                "0123456789012345678901234567890123456789012345678901234567890123");
    EXPECT(&f, 0);
    hello_frame(&f, 1, 1u << 20, 1,
                "01234567890123456789012345678901234567890123456789012345678901234");
    EXPECT(&f, TW_EBAD_FIELD);
    /* Caps are checked before the limits (wire order). */
    hello_frame(&f, 0x8, 1, 0, "a");
    EXPECT(&f, TW_EBAD_CAPS);

    /* HELLO_ACK. */
    struct tw_msg ack = fx_hello_ack(0x7, 1u << 20, 8, TW_AUTH_HMAC_SHA256, "s");
    uint8_t buf[256];
    ssize_t n = tw__msg_encode(&ack, buf, sizeof(buf));
    TW_ASSERT(n > 0);
    memcpy(f.b, buf, (size_t)n);
    f.n = (size_t)n;
    EXPECT(&f, 0);
    struct fb g = f;
    g.b[24] = 0x8;
    EXPECT(&g, TW_EBAD_CAPS);
    g.b[24] = 0x2; /* no data plane in common */
    EXPECT(&g, TW_EBAD_CAPS);
    g.b[24] = 0x4; /* RDMA only is fine */
    EXPECT(&g, 0);
    g = f;
    g.b[24 + 16] = 2; /* auth_method */
    EXPECT(&g, TW_EBAD_FIELD);
    g = f;
    g.b[24 + 18] = 1; /* reserved */
    EXPECT(&g, TW_EBAD_FLAGS);
    g = f;
    g.b[24 + 16] = 0; /* auth none with a non-zero nonce */
    EXPECT(&g, TW_EBAD_FIELD);
    /* Pre-authentication limit: a HELLO larger than 4096 bytes. */
    hdr(&f, TW_TAG_HELLO, 0, 0);
    for (int i = 0; i < 4097; i++)
        p8(&f, 0);
    fin(&f);
    TW_ASSERT_ERR(decode(&f, TW_PREAUTH_MAX_FRAME, &m), TW_EFRAME_TOO_LARGE);
}

/* ---- other messages ----------------------------------------------------- */

static void endpoint_frame(struct fb *f, uint8_t status, uint8_t count, const char *reason,
                           uint8_t provider_len, uint8_t res, uint16_t addr_len)
{
    hdr(f, TW_TAG_RDMA_ENDPOINT, 0, 0);
    p8(f, status);
    p8(f, count);
    p16(f, (uint16_t)strlen(reason));
    for (int i = 0; i < 16; i++)
        p8(f, 0x10);
    pstr(f, reason);
    for (unsigned e = 0; e < count; e++) {
        p8(f, provider_len);
        p8(f, res);
        p16(f, addr_len);
        p32(f, 2);
        for (unsigned i = 0; i < provider_len; i++)
            p8(f, 't');
        for (unsigned i = 0; i < addr_len; i++)
            p8(f, (uint8_t)i);
    }
    fin(f);
}

static void rdma_endpoint_rules(void)
{
    struct fb f;
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 0, 16);
    EXPECT(&f, 0);
    endpoint_frame(&f, TW_EP_OFFER, 8, "", 64, 0, 256);
    EXPECT(&f, 0);
    endpoint_frame(&f, 3, 1, "", 3, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 0, "", 3, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 9, "", 3, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_ACCEPT, 2, "", 3, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_DECLINE, 1, "x", 3, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_DECLINE, 0, "no shm across hosts", 0, 0, 0);
    EXPECT(&f, 0);
    endpoint_frame(&f, TW_EP_DECLINE, 0, "\xc0\xaf", 0, 0, 0);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 0, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 65, 0, 16);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 1, 16);
    EXPECT(&f, TW_EBAD_FLAGS);
    /* Wire order inside an entry: provider_len before reserved before
     * addr_len. */
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 65, 1, 0);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 1, 0);
    EXPECT(&f, TW_EBAD_FLAGS);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 0, 0);
    EXPECT(&f, TW_EBAD_FIELD);
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 0, 257);
    EXPECT(&f, TW_EBAD_FIELD);
    static char reason[258];
    memset(reason, 'r', 257);
    endpoint_frame(&f, TW_EP_DECLINE, 0, reason, 0, 0, 0);
    EXPECT(&f, TW_EBAD_FIELD);
    reason[256] = 0;
    endpoint_frame(&f, TW_EP_DECLINE, 0, reason, 0, 0, 0);
    EXPECT(&f, 0);
    /* Entry running past the payload. */
    endpoint_frame(&f, TW_EP_OFFER, 1, "", 3, 0, 16);
    f.n -= 1;
    fin(&f);
    EXPECT(&f, TW_EBAD_LENGTH);
}

static void misc_rules(void)
{
    struct fb f;
    hdr(&f, TW_TAG_PUT_ACCEPT, 1, 0);
    p8(&f, 0);
    p8(&f, 0);
    p16(&f, 0);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    f.b[24] = 3;
    EXPECT(&f, TW_EBAD_FIELD);
    f.b[24] = 1;
    f.b[25] = 1;
    EXPECT(&f, TW_EBAD_FLAGS);

    hdr(&f, TW_TAG_RDMA_DONE, 1, 0);
    p32(&f, 0);
    p32(&f, 1);
    p64(&f, 24);
    fin(&f);
    EXPECT(&f, TW_EBAD_FLAGS);

    hdr(&f, TW_TAG_ERROR, 1, 0);
    p32(&f, 0);
    p16(&f, 0);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    hdr(&f, TW_TAG_ERROR, 1, 0);
    p32(&f, 999); /* unknown codes are accepted as they are */
    p16(&f, 2);
    put(&f, "\xed\xa0", 2);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    static char msg[1026];
    memset(msg, 'm', 1025);
    hdr(&f, TW_TAG_ERROR, 1, 0);
    p32(&f, 999);
    p16(&f, 1025);
    pstr(&f, msg);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    f.n -= 1;
    f.b[28] = 0x00;
    f.b[29] = 0x04;
    fin(&f);
    EXPECT(&f, 0);

    /* TENSOR_REQUEST flags and reserved byte: ATTACH_READ (bit 1) only
     * with WANT_RDMA, bits 2..7 never. */
    request_frame(&f, 0x02, "x", 1);
    EXPECT(&f, TW_EBAD_FLAGS);
    request_frame(&f, 0x03, "x", 1);
    EXPECT(&f, 0);
    request_frame(&f, 0x05, "x", 1);
    EXPECT(&f, TW_EBAD_FLAGS);
    request_frame(&f, 0, "x", 1);
    f.b[25] = 1;
    EXPECT(&f, TW_EBAD_FLAGS);
}

static void list_reply_frame(struct fb *f, uint32_t count, const char *const *names, int n)
{
    hdr(f, TW_TAG_LIST_REPLY, 1, 0);
    p32(f, count);
    for (int i = 0; i < n; i++) {
        struct dspec d = good_desc();
        d.name = names[i];
        pdesc(f, &d);
    }
    fin(f);
}

static void list_and_stats_replies(void)
{
    struct fb f;
    const char *sorted[] = {"a", "ab", "b"};
    list_reply_frame(&f, 3, sorted, 3);
    EXPECT(&f, 0);
    list_reply_frame(&f, 4, sorted, 3);
    EXPECT(&f, TW_EBAD_LENGTH);
    list_reply_frame(&f, 2, sorted, 3);
    EXPECT(&f, TW_EBAD_LENGTH);
    list_reply_frame(&f, 0xFFFFFFFFu, sorted, 3);
    EXPECT(&f, TW_EBAD_LENGTH);
    const char *unsorted[] = {"b", "a"};
    list_reply_frame(&f, 2, unsorted, 2);
    EXPECT(&f, TW_EBAD_FIELD);
    const char *dup[] = {"a", "a"};
    list_reply_frame(&f, 2, dup, 2);
    EXPECT(&f, TW_EBAD_FIELD);
    /* A bad entry inside a reply is fatal (not request-opening). */
    const char *bad[] = {"a", "\xff"};
    list_reply_frame(&f, 2, bad, 2);
    EXPECT(&f, TW_EBAD_NAME);
    TW_ASSERT(tw__sm_verdict_is_fatal(TW_EBAD_NAME, TW_TAG_LIST_REPLY));

    hdr(&f, TW_TAG_STATS_REPLY, 1, 0);
    p32(&f, 1);
    p8(&f, 3);
    pstr(&f, "Abc");
    p64(&f, 1);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    hdr(&f, TW_TAG_STATS_REPLY, 1, 0);
    p32(&f, 1);
    p8(&f, 0);
    p64(&f, 1);
    fin(&f);
    EXPECT(&f, TW_EBAD_FIELD);
    hdr(&f, TW_TAG_STATS_REPLY, 1, 0);
    p32(&f, 2);
    p8(&f, 3);
    pstr(&f, "abc");
    p64(&f, 1);
    fin(&f);
    EXPECT(&f, TW_EBAD_LENGTH);
}

/* ---- classification ----------------------------------------------------- */

static void verdict_classification(void)
{
    static const int request_level[] = {TW_EBAD_NAME, TW_EBAD_DTYPE,      TW_EBAD_SHAPE,
                                        TW_EOVERFLOW, TW_EBAD_DEVICE_TAG, TW_ENOT_NEGOTIATED};
    static const uint32_t opening[] = {TW_TAG_TENSOR_REQUEST, TW_TAG_TENSOR_PUT, TW_TAG_LIST,
                                       TW_TAG_STAT, TW_TAG_DELETE};
    for (unsigned i = 0; i < 6; i++) {
        for (unsigned t = 0; t < 5; t++)
            TW_ASSERT(!tw__sm_verdict_is_fatal(request_level[i], opening[t]));
        TW_ASSERT(tw__sm_verdict_is_fatal(request_level[i], TW_TAG_TENSOR_INFO));
        TW_ASSERT_EQ(tw__sm_verdict_wire_code(request_level[i]), TW_WIRE_INVALID_ARGUMENT);
    }
    static const int fatal[] = {TW_EBAD_MAGIC,       TW_EBAD_VERSION,   TW_EUNKNOWN_TAG,
                                TW_EFRAME_TOO_LARGE, TW_EBAD_FLAGS,     TW_EBAD_LENGTH,
                                TW_EBAD_CAPS,        TW_EBAD_DIRECTION, TW_EOUT_OF_ORDER,
                                TW_EUNKNOWN_REQUEST, TW_EDUP_REQUEST,   TW_EBAD_REQUEST_ID};
    for (unsigned i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++) {
        TW_ASSERT(tw__sm_verdict_is_fatal(fatal[i], TW_TAG_TENSOR_PUT));
        TW_ASSERT_EQ(tw__sm_fatal_wire_code(fatal[i]), fatal[i] == TW_EBAD_VERSION
                                                           ? TW_WIRE_UNSUPPORTED_VERSION
                                                           : TW_WIRE_PROTOCOL_ERROR);
    }
    TW_ASSERT(tw__sm_verdict_is_fatal(TW_EBAD_FIELD, TW_TAG_TENSOR_PUT));
    TW_ASSERT(!tw__sm_verdict_is_fatal(TW_EBAD_FIELD, TW_TAG_RDMA_REGISTER));
    TW_ASSERT(tw__sm_verdict_is_fatal(TW_ENOT_NEGOTIATED, TW_TAG_RDMA_REGISTER));
    TW_ASSERT(!tw__sm_verdict_is_fatal(TW_ETOO_MANY_INFLIGHT, TW_TAG_PING));
    TW_ASSERT_EQ(tw__sm_verdict_wire_code(TW_ETOO_MANY_INFLIGHT), TW_WIRE_BUSY);
    TW_ASSERT_EQ(tw__sm_verdict_wire_code(TW_ESHUTDOWN), TW_WIRE_SHUTTING_DOWN);
    TW_ASSERT_EQ(tw__sm_verdict_wire_code(TW_ENOTFOUND), TW_WIRE_NOT_FOUND);
    TW_ASSERT_EQ(tw__sm_fatal_wire_code(TW_EUNAUTHORIZED), TW_WIRE_UNAUTHORIZED);
}

int main(void)
{
    TW_RUN(truncated_at_every_length);
    TW_RUN(header_rules_in_order);
    TW_RUN(oversized_payload_len);
    TW_RUN(request_id_rules);
    TW_RUN(length_mismatches);
    TW_RUN(descriptor_rules);
    TW_RUN(names);
    TW_RUN(device_tags);
    TW_RUN(caps_and_hello);
    TW_RUN(rdma_endpoint_rules);
    TW_RUN(misc_rules);
    TW_RUN(list_and_stats_replies);
    TW_RUN(verdict_classification);
    TW_DONE();
}
