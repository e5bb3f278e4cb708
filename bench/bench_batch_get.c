/*
 * bench_batch_get: the C side of bench/bench_python.py's stacked get_many
 * comparison. One tw_batch_get of COUNT distinct tensors, PREFIX0 ..
 * PREFIX<COUNT-1>, into the distinct rows of ONE buffer of COUNT x SIZE
 * bytes: the memory pattern of the binding's get_many(names, out=T) into a
 * KV-cache tensor T. (`tensorwire bench` cycles its items over 64 tensors
 * and 64 buffers instead.)
 *
 *   bench_batch_get HOST:PORT PREFIX COUNT SIZE ROUNDS
 *
 * The buffer is written once (page faults out of the way) and one untimed
 * batch warms the path; then ROUNDS timed batches. Only tw_batch_get is
 * timed: the item array is built once before, as a C program would keep it
 * (the binding builds its items inside every call, which is its cost).
 * Every row's first 8 bytes must hold its index afterwards (the Python
 * bench stores them so); a wrong row fails the run. Prints one JSON line:
 * {"bytes": COUNT*SIZE, "seconds": [wall time per round], "cpu_seconds":
 * [this process's user + system CPU time per round]}. Links the shared
 * libtensorwire through include/tensorwire/ only, like a user.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "tensorwire/tensorwire.h"

/* CPU seconds (user + system) of this process so far. */
static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    struct tw_client_options o;
    struct tw_batch_item *items = NULL;
    tw_client *c = NULL;
    char *arena = NULL, *names = NULL;
    long count, size, rounds;
    int rc, status = 1;
    const size_t name_cap = 128;

    if (argc != 6 || (count = atol(argv[3])) <= 0 || (size = atol(argv[4])) < 8 ||
        (rounds = atol(argv[5])) <= 0) {
        fprintf(stderr, "usage: bench_batch_get HOST:PORT PREFIX COUNT SIZE(>=8) ROUNDS\n");
        return 2;
    }
    tw_client_options_init(&o);
    o.max_inflight = 64; /* as `tensorwire bench --inflight 64` and the binding */
    rc = tw_client_connect(argv[1], &o, &c);
    if (rc < 0) {
        fprintf(stderr, "bench_batch_get: connect %s: %s\n", argv[1], tw_strerror(rc));
        return 1;
    }
    items = calloc((size_t)count, sizeof(*items));
    names = malloc((size_t)count * name_cap);
    if (!items || !names || posix_memalign((void **)&arena, 4096, (size_t)count * size) != 0) {
        fprintf(stderr, "bench_batch_get: out of memory\n");
        goto out;
    }
    memset(arena, 0xa5, (size_t)count * size);
    for (long i = 0; i < count; i++) {
        char *n = names + (size_t)i * name_cap;
        snprintf(n, name_cap, "%s%ld", argv[2], i);
        items[i].name = n;
        items[i].buf = arena + (size_t)i * size;
        items[i].len = (size_t)size;
    }
    rc = tw_batch_get(c, items, (size_t)count); /* warm-up */
    double *cpu = calloc((size_t)rounds, sizeof(*cpu));
    printf("{\"bytes\": %llu, \"seconds\": [",
           (unsigned long long)count * (unsigned long long)size);
    for (long r = 0; rc == 0 && r < rounds; r++) {
        double t0 = now_s(), c0 = cpu_s();
        rc = tw_batch_get(c, items, (size_t)count);
        printf("%s%.6f", r ? ", " : "", now_s() - t0);
        if (cpu)
            cpu[r] = cpu_s() - c0;
    }
    printf("], \"cpu_seconds\": [");
    for (long r = 0; cpu && r < rounds; r++)
        printf("%s%.6f", r ? ", " : "", cpu[r]);
    printf("]}\n");
    free(cpu);
    if (rc != 0) {
        for (long i = 0; i < count; i++)
            if (items[i].status < 0) {
                fprintf(stderr, "bench_batch_get: item %ld '%s': %s\n", i, items[i].name,
                        tw_strerror(items[i].status));
                break;
            }
        goto out;
    }
    for (long i = 0; i < count; i++) {
        int64_t v;
        memcpy(&v, arena + (size_t)i * size, sizeof(v));
        if (v != i || items[i].desc.byte_length != (uint64_t)size) {
            fprintf(stderr, "bench_batch_get: row %ld holds %lld (%llu bytes), not its index\n", i,
                    (long long)v, (unsigned long long)items[i].desc.byte_length);
            goto out;
        }
    }
    status = 0;

out:
    free(arena);
    free(names);
    free(items);
    tw_close(c);
    return status;
}
