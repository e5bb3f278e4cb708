/*
 * Protocol micro-benchmarks: CRC32C (table vs SSE4.2, the table version is
 * the baseline measured in the same run), frame decode, and the state
 * machine's cost per DATA frame. Each figure is the median of REPS timed
 * repetitions. Usage: bench_proto [MiB for the CRC buffer, default 64]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "proto/crc32c.h"
#include "proto/proto.h"
#include "proto/sm.h"

#define REPS 9

/* Seconds on the library's monotonic clock. */
static double now(void)
{
    return (double)tw__now_ns() * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v)
{
    qsort(v, REPS, sizeof(double), cmp);
    return v[REPS / 2];
}

static volatile uint32_t sink;

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atoi(argv[1]) : 64;
    size_t len = mib << 20;
    uint8_t *buf = malloc(len);
    if (!buf)
        return 1;
    for (size_t i = 0; i < len; i++)
        buf[i] = (uint8_t)(i * 131 + 7);

    double sw[REPS], hw[REPS];
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        sink = tw__crc32c_sw(0, buf, len);
        double t1 = now();
        sink = tw__crc32c_hw(0, buf, len);
        double t2 = now();
        sw[r] = (double)len / (t1 - t0) / 1e9;
        hw[r] = (double)len / (t2 - t1) / 1e9;
    }
    double msw = median(sw), mhw = median(hw);
    printf("crc32c %zu MiB: table %.2f GB/s (baseline), sse4.2 %.2f GB/s (%s), ratio %.1fx\n", mib,
           msw, mhw, tw__crc32c_hw_available() ? "hardware" : "NOT available: table fallback",
           mhw / msw);

    /* Decode of a TENSOR_PUT frame (descriptor with a 2-d shape). */
    static const uint64_t shape[2] = {4096, 4096};
    struct tw_msg m;
    memset(&m, 0, sizeof(m));
    m.hdr.tag = TW_TAG_TENSOR_PUT;
    m.hdr.request_id = 1;
    m.u.tensor_put.desc.dtype = TW_DTYPE_BF16;
    m.u.tensor_put.desc.ndim = 2;
    memcpy(m.u.tensor_put.desc.shape, shape, sizeof(shape));
    m.u.tensor_put.desc.byte_length = 4096ull * 4096 * 2;
    m.u.tensor_put.desc.name.ptr = (const uint8_t *)"model.layers.17.mlp.down_proj.weight";
    m.u.tensor_put.desc.name.len = 36;
    m.u.tensor_put.desc.device_tag.ptr = (const uint8_t *)"cuda:0";
    m.u.tensor_put.desc.device_tag.len = 6;
    uint8_t frame[256];
    ssize_t n = tw__msg_encode(&m, frame, sizeof(frame));
    if (n < 0)
        return 1;
    const int iters = 1000000;
    double dec[REPS], enc[REPS];
    for (int r = 0; r < REPS; r++) {
        struct tw_msg d;
        double t0 = now();
        for (int i = 0; i < iters; i++)
            sink += (uint32_t)tw__msg_decode(frame, (size_t)n, TW_DEFAULT_MAX_FRAME, &d);
        double t1 = now();
        for (int i = 0; i < iters; i++)
            sink += (uint32_t)tw__msg_encode(&m, frame, sizeof(frame));
        double t2 = now();
        dec[r] = (t1 - t0) / iters * 1e9;
        enc[r] = (t2 - t1) / iters * 1e9;
    }
    printf("TENSOR_PUT frame (%zd bytes): decode %.0f ns, encode+validate %.0f ns\n", n,
           median(dec), median(enc));

    /* State machine: one DATA frame judged by sender and receiver. */
    double smc[REPS];
    for (int r = 0; r < REPS; r++) {
        struct tw_sm c, s;
        tw__sm_init(&c, TW_ROLE_CLIENT, 256);
        tw__sm_init(&s, TW_ROLE_SERVER, 256);
        struct tw_msg h;
        memset(&h, 0, sizeof(h));
        h.hdr.tag = TW_TAG_HELLO;
        h.u.hello.caps = 1;
        h.u.hello.max_frame = 16u << 20;
        h.u.hello.max_inflight = 256;
        tw__sm_on_send(&c, &h);
        tw__sm_on_recv(&s, &h);
        memset(&h, 0, sizeof(h));
        h.hdr.tag = TW_TAG_HELLO_ACK;
        h.u.hello_ack.caps = 1;
        h.u.hello_ack.max_frame = 16u << 20;
        h.u.hello_ack.max_inflight = 256;
        tw__sm_on_send(&s, &h);
        tw__sm_on_recv(&c, &h);
        struct tw_msg put = m;
        put.u.tensor_put.desc.byte_length = (uint64_t)iters * 8 * 2;
        put.u.tensor_put.desc.shape[0] = (uint64_t)iters * 8;
        put.u.tensor_put.desc.shape[1] = 1;
        tw__sm_on_send(&c, &put);
        tw__sm_on_recv(&s, &put);
        struct tw_msg acc;
        memset(&acc, 0, sizeof(acc));
        acc.hdr.tag = TW_TAG_PUT_ACCEPT;
        acc.hdr.request_id = 1;
        acc.u.put_accept.data_plane = TW_DP_INLINE;
        tw__sm_on_send(&s, &acc);
        tw__sm_on_recv(&c, &acc);
        struct tw_msg dm;
        memset(&dm, 0, sizeof(dm));
        dm.hdr.tag = TW_TAG_DATA;
        dm.hdr.request_id = 1;
        dm.u.data.bytes.len = 16;
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            dm.hdr.flags = i + 1 < iters ? TW_FRAME_MORE : 0;
            dm.u.data.offset = (uint64_t)i * 16;
            if (tw__sm_on_send(&c, &dm) || tw__sm_on_recv(&s, &dm))
                return 1;
        }
        smc[r] = (now() - t0) / iters * 1e9;
        tw__sm_destroy(&c);
        tw__sm_destroy(&s);
    }
    printf("state machine: %.0f ns per DATA frame (on_send + on_recv)\n", median(smc));
    free(buf);
    return 0;
}
