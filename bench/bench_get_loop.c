/*
 * bench_get_loop: the C side of bench/bench_python.py's per-call comparison.
 * One tw_get after another (no batch, nothing in flight but the one call),
 * the same call the Python binding makes for get(name, out=x), so the
 * difference between the two is the binding's cost.
 *
 *   bench_get_loop HOST:PORT NAME COUNT BLOCKS
 *
 * Gets NAME COUNT times per block into one buffer sized by a first get, and
 * prints one JSON line: {"per_call_us": [one value per block]}. Links the
 * shared libtensorwire through include/tensorwire/ only, like a user.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tensorwire/tensorwire.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    tw_client *c = NULL;
    struct tw_tensor_desc d;
    void *buf = NULL;
    size_t len = 0;
    long count, blocks;
    int rc, status = 1;

    if (argc != 5 || (count = atol(argv[3])) <= 0 || (blocks = atol(argv[4])) <= 0) {
        fprintf(stderr, "usage: bench_get_loop HOST:PORT NAME COUNT BLOCKS\n");
        return 2;
    }
    rc = tw_client_connect(argv[1], NULL, &c);
    if (rc < 0) {
        fprintf(stderr, "bench_get_loop: connect %s: %s\n", argv[1], tw_strerror(rc));
        return 1;
    }
    rc = tw_get_alloc(c, argv[2], &buf, &len, &d);
    if (rc < 0) {
        fprintf(stderr, "bench_get_loop: get %s: %s\n", argv[2], tw_strerror(rc));
        goto out_close;
    }
    printf("{\"per_call_us\": [");
    for (long b = 0; b < blocks; b++) {
        double t0 = now_s();
        for (long i = 0; i < count; i++) {
            rc = tw_get(c, argv[2], buf, len, &d);
            if (rc < 0) {
                fprintf(stderr, "bench_get_loop: get %s: %s\n", argv[2], tw_strerror(rc));
                goto out_free;
            }
        }
        printf("%s%.3f", b ? ", " : "", (now_s() - t0) * 1e6 / (double)count);
    }
    printf("]}\n");
    status = 0;

out_free:
    tw_free(buf);
out_close:
    tw_close(c);
    return status;
}
