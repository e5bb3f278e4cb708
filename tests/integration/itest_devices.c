/*
 * DEVICE_UNAVAILABLE on the wire (protocol §9.8), on any host: a put naming
 * a device the server cannot honour is refused before PUT_ACCEPT with a
 * message that says why and lists the devices served; the connection stays
 * usable; STATS reports bytes per device. --devices naming an absent GPU
 * stops the daemon at startup.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu/cuda.h"
#include "itest.h"
#include "tw_test.h"

static struct itest_server srv;

/* Sends TENSOR_PUT of "t" (4 f32) on device `tag`; returns its id. */
static uint64_t send_put_on(struct itc *c, const char *tag)
{
    struct tw_descriptor d;
    uint64_t shape[1] = {4};
    itest_desc(&d, "t", TW_DTYPE_F32, 1, shape);
    d.device_tag.ptr = (const uint8_t *)tag;
    d.device_tag.len = (uint32_t)strlen(tag);
    return itc_send_put(c, &d, 0);
}

/* Sends a put of 4 bytes to `tag` and expects ERROR(DEVICE_UNAVAILABLE)
 * whose message contains every string of want (NULL-terminated). */
static void expect_refused(struct itc *c, const char *tag, const char *const *want)
{
    uint64_t id = send_put_on(c, tag);
    char msg[512];
    itc_expect_error_text(c, id, TW_WIRE_DEVICE_UNAVAILABLE, msg, sizeof(msg));
    for (; *want; want++)
        if (!strstr(msg, *want))
            TW_FAIL("message \"%s\" lacks \"%s\"", msg, *want);
}

static void test_refusals(void)
{
    struct itc c;
    itc_connect(&c, &srv);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    const char *absent[] = {"cuda:7", "not present", "devices: cpu", NULL};
    expect_refused(&c, "cuda:7", absent);
    /* Not present here without a GPU, not served with one (--devices cpu). */
    const char *absent0[] = {"cuda:0", "not ", "devices: cpu", NULL};
    expect_refused(&c, "cuda:0", absent0);
    const char *unknown[] = {"rocm:0", "not a device kind", "devices: cpu", NULL};
    expect_refused(&c, "rocm:0", unknown);
    /* The connection lives: a host put and get work after the refusals. */
    uint8_t data[16], *back = NULL;
    uint64_t len = 0, shape[1] = {4};
    itest_fill(data, sizeof(data), 5);
    TW_ASSERT_OK(itc_put(&c, "host", TW_DTYPE_F32, 1, shape, data, 16, 1));
    TW_ASSERT_OK(itc_get(&c, "host", &back, &len, NULL));
    TW_ASSERT_EQ_U64(len, 16);
    TW_ASSERT_MEM_EQ(back, data, 16);
    free(back);
    /* Per-device STATS: the CPU holds the 16 bytes. */
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "device.cpu.stored_bytes"), 16);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "device.cpu.capacity_bytes"), 1 << 20);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "stored_bytes"), 16);
    itc_close(&c);
}

/* A GPU that this host does not have in --devices: the daemon refuses to
 * start, saying which. */
static void test_absent_gpu_in_devices(void)
{
    char path[4096];
    const char *bd = getenv("TW_BUILD_DIR");
    snprintf(path, sizeof(path), "%s/tensorwired", bd ? bd : ".");
    int out[2];
    TW_ASSERT(pipe(out) == 0);
    pid_t pid = fork();
    TW_ASSERT(pid >= 0);
    if (pid == 0) {
        dup2(out[1], 2);
        close(out[0]);
        execl(path, path, "--listen", "127.0.0.1:0", "--devices", "cpu,cuda:200", (char *)NULL);
        _exit(127);
    }
    close(out[1]);
    char buf[1024];
    size_t used = 0;
    ssize_t r;
    while (used + 1 < sizeof(buf) && (r = read(out[0], buf + used, sizeof(buf) - 1 - used)) > 0)
        used += (size_t)r;
    buf[used] = '\0';
    close(out[0]);
    int st;
    TW_ASSERT(waitpid(pid, &st, 0) == pid);
    TW_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) != 0);
    fprintf(stderr, "  %s", buf);
    TW_ASSERT(strstr(buf, "cuda:200 is not present") != NULL);
}

/* With a GPU (the H200 host): the default serves it, STATS shows its
 * capacity, and a put to it gets the honest refusal of this build (the
 * planes cannot move GPU bytes yet). */
static void test_default_gpu(void)
{
    if (tw__cuda_device_count() == 0) {
        fprintf(stderr, "  no GPU here: nothing to check\n");
        return;
    }
    struct itest_server g;
    struct itc c;
    itest_server_start(&g, NULL);
    itc_connect(&c, &g);
    TW_ASSERT_OK(itc_handshake(&c, NULL));
    uint64_t cap = itc_stat_value(&c, "device.cuda0.capacity_bytes");
    fprintf(stderr, "  device.cuda0.capacity_bytes = %llu\n", (unsigned long long)cap);
    TW_ASSERT(cap > 0 && cap != UINT64_MAX);
    TW_ASSERT_EQ_U64(itc_stat_value(&c, "device.cuda0.stored_bytes"), 0);
    /* A put to a served GPU goes on (staged through host memory). */
    struct tw_msg m;
    uint64_t id = send_put_on(&c, "cuda:0");
    TW_ASSERT_EQ(itc_recv(&c, &m), 0);
    TW_ASSERT_EQ(m.hdr.tag, TW_TAG_PUT_ACCEPT);
    TW_ASSERT_EQ_U64(m.hdr.request_id, id);
    itc_close(&c);
    TW_ASSERT_EQ(itest_server_stop(&g, SIGTERM, 10000), 0);
}

int main(void)
{
    const char *args[] = {"--devices", "cpu", "--capacity", "cpu=1Mi", NULL};
    itest_server_start(&srv, args);
    TW_RUN(test_refusals);
    TW_ASSERT_EQ(itest_server_stop(&srv, SIGTERM, 10000), 0);
    TW_RUN(test_absent_gpu_in_devices);
    TW_RUN(test_default_gpu);
    TW_DONE();
}
