/*
 * Soak benchmark (not a test): N clients x T seconds of mixed operations
 * against a running tensorwired, through the public client API, with
 * self-checking content.
 *
 *   bench_soak -s HOST:PORT [-n CLIENTS] [-t SECONDS] [--max-size BYTES]
 *              [--names K] [--fabric none|PROV] [--rdma-min-bytes SIZE]
 *              [--server-pid PID]
 *
 * Each client is one thread with its own connection and its own K names
 * (soak/<client>/<k>), so it knows what each name must hold: a put writes
 * version v of name k with bytes generated from (client, k, v) and a size
 * drawn from them; a get must return exactly those bytes (or NOT_FOUND
 * after a delete); a stat must report that size. Ops are drawn 35% put,
 * 40% get, 15% stat, 10% delete. Anything else is a mismatch (wrong bytes
 * or size) or an error (an unexpected failure), both counted and printed.
 *
 * Prints ops/s, per op count, p50/p99/max latency, errors, mismatches, and
 * with --server-pid the server's VmRSS before the run and after every name
 * was deleted (1 s later). Exit status 1 when any error or mismatch.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tensorwire/client.h"
#include "tensorwire/error.h"

enum { OP_PUT, OP_GET, OP_STAT, OP_DEL, OP_N };
static const char *const op_names[OP_N] = {"put", "get", "stat", "delete"};

struct lat {
    uint32_t *us;
    size_t n, cap;
};

struct client {
    pthread_t th;
    unsigned id;
    struct lat lat[OP_N];
    uint64_t errors, mismatches, bytes;
    char first_problem[256];
};

static const char *addr;
static unsigned nclients = 8, nnames = 4;
static double seconds = 10;
static uint64_t max_size = 4u << 20, rdma_min_bytes = 1u << 20;
static const char *fabric = "none";
static double t_end;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Size of version v of name k of client c: 0 .. max_size, spread over
 * powers of two so small and large transfers both occur. */
static size_t size_of(unsigned c, unsigned k, uint64_t v)
{
    uint64_t h = mix(((uint64_t)c << 40) ^ ((uint64_t)k << 32) ^ v);
    unsigned shift = (unsigned)(h % 24); /* 1 B .. 8 MiB before the cap */
    uint64_t n = (1ull << shift) + (h >> 40) % (1ull << shift);
    return (size_t)(n > max_size ? max_size : n);
}

static void fill(uint8_t *p, size_t n, unsigned c, unsigned k, uint64_t v)
{
    uint64_t s = mix(((uint64_t)c << 40) ^ ((uint64_t)k << 32) ^ v ^ 0x5eed);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s = mix(s);
        memcpy(p + i, &s, 8);
    }
    s = mix(s);
    for (; i < n; i++)
        p[i] = (uint8_t)(s >> (8 * (i & 7)));
}

static void lat_add(struct lat *l, double secs)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        uint32_t *p = realloc(l->us, cap * sizeof(*p));
        if (!p)
            return;
        l->us = p;
        l->cap = cap;
    }
    double us = secs * 1e6;
    l->us[l->n++] = us > 4e9 ? 4000000000u : (uint32_t)us;
}

__attribute__((format(printf, 3, 4))) static void problem(struct client *cl, uint64_t *counter,
                                                          const char *fmt, ...)
{
    (*counter)++;
    if (cl->first_problem[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cl->first_problem, sizeof(cl->first_problem), fmt, ap);
    va_end(ap);
}

static void *run_client(void *arg)
{
    struct client *cl = arg;
    struct tw_client_options o;
    tw_client *c = NULL;
    char err[512];
    tw_client_options_init(&o);
    o.fabric = fabric;
    o.rdma_min_bytes = rdma_min_bytes;
    if (tw_client_connect_error(addr, &o, &c, err, sizeof(err)) != 0) {
        problem(cl, &cl->errors, "connect: %s", err);
        return NULL;
    }
    uint64_t *version = calloc(nnames, sizeof(uint64_t)); /* 0 = absent */
    uint8_t *want = malloc(max_size ? max_size : 1), *got = malloc(max_size ? max_size : 1);
    if (!version || !want || !got) {
        problem(cl, &cl->errors, "out of memory");
        goto out;
    }
    uint64_t rnd = mix(cl->id + 1);
    uint64_t next_version = 1;
    while (now_s() < t_end) {
        rnd = mix(rnd);
        unsigned k = (unsigned)(rnd % nnames), pick = (unsigned)((rnd >> 32) % 100);
        int op = pick < 35 ? OP_PUT : pick < 75 ? OP_GET : pick < 90 ? OP_STAT : OP_DEL;
        char name[64];
        snprintf(name, sizeof(name), "soak/%u/%u", cl->id, k);
        uint64_t v = version[k];
        struct tw_tensor_desc d;
        memset(&d, 0, sizeof(d));
        double t0 = now_s();
        int rc;
        if (op == OP_PUT) {
            uint64_t nv = next_version++;
            size_t n = size_of(cl->id, k, nv);
            fill(want, n, cl->id, k, nv);
            d.dtype = TW_U8;
            d.ndim = 1;
            d.shape[0] = n;
            t0 = now_s(); /* generating the bytes is not the server's time */
            rc = tw_put(c, name, &d, want, n);
            if (rc == 0) {
                version[k] = nv;
                cl->bytes += n;
            } else {
                problem(cl, &cl->errors, "put %s: %s: %s", name, tw_strerror_name(rc),
                        tw_client_last_error_message(c));
            }
        } else if (op == OP_GET) {
            rc = tw_get(c, name, got, max_size ? max_size : 1, &d);
            if (v == 0 && rc != TW_ENOTFOUND) {
                problem(cl, &cl->mismatches, "get %s: want NOT_FOUND, got %s", name,
                        tw_strerror_name(rc));
            } else if (v != 0 && rc != 0) {
                problem(cl, &cl->errors, "get %s: %s: %s", name, tw_strerror_name(rc),
                        tw_client_last_error_message(c));
            } else if (v != 0) {
                size_t n = size_of(cl->id, k, v);
                cl->bytes += n;
                fill(want, n, cl->id, k, v);
                if (d.byte_length != n || memcmp(want, got, n) != 0)
                    problem(cl, &cl->mismatches,
                            "get %s: version %llu: %llu bytes, want %zu, or content differs", name,
                            (unsigned long long)v, (unsigned long long)d.byte_length, n);
            }
        } else if (op == OP_STAT) {
            rc = tw_stat(c, name, &d);
            if (v == 0 && rc != TW_ENOTFOUND)
                problem(cl, &cl->mismatches, "stat %s: want NOT_FOUND, got %s", name,
                        tw_strerror_name(rc));
            else if (v != 0 && (rc != 0 || d.byte_length != size_of(cl->id, k, v)))
                problem(cl, rc ? &cl->errors : &cl->mismatches, "stat %s: %s, %llu bytes", name,
                        tw_strerror_name(rc), (unsigned long long)d.byte_length);
        } else {
            rc = tw_delete(c, name);
            if (rc != (v ? 0 : TW_ENOTFOUND))
                problem(cl, &cl->mismatches, "delete %s: got %s (version %llu)", name,
                        tw_strerror_name(rc), (unsigned long long)v);
            version[k] = 0;
        }
        lat_add(&cl->lat[op], now_s() - t0);
    }
    for (unsigned k = 0; k < nnames; k++) {
        char name[64];
        snprintf(name, sizeof(name), "soak/%u/%u", cl->id, k);
        if (version[k] && tw_delete(c, name) != 0)
            problem(cl, &cl->errors, "cleanup delete %s failed", name);
    }
out:
    free(version);
    free(want);
    free(got);
    tw_close(c);
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static long rss_kib(long pid)
{
    char path[64], line[256];
    long kib = -1;
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s -s HOST:PORT [-n CLIENTS] [-t SECONDS] [--max-size BYTES] [--names K]\n"
            "          [--fabric none|PROV] [--rdma-min-bytes SIZE] [--server-pid PID]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    long server_pid = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage(argv[0]);
        if (strcmp(a, "-s") == 0)
            addr = v;
        else if (strcmp(a, "-n") == 0)
            nclients = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "-t") == 0)
            seconds = strtod(v, NULL);
        else if (strcmp(a, "--max-size") == 0)
            max_size = strtoull(v, NULL, 10);
        else if (strcmp(a, "--names") == 0)
            nnames = (unsigned)strtoul(v, NULL, 10);
        else if (strcmp(a, "--fabric") == 0)
            fabric = v;
        else if (strcmp(a, "--rdma-min-bytes") == 0)
            rdma_min_bytes = strtoull(v, NULL, 10);
        else if (strcmp(a, "--server-pid") == 0)
            server_pid = strtol(v, NULL, 10);
        else
            return usage(argv[0]);
    }
    if (!addr || nclients == 0 || nclients > 4096 || nnames == 0 || seconds <= 0 ||
        max_size > (1ull << 30))
        return usage(argv[0]);
    struct client *cl = calloc(nclients, sizeof(*cl));
    if (!cl)
        return 1;
    long rss_before = server_pid ? rss_kib(server_pid) : -1;
    double t0 = now_s();
    t_end = t0 + seconds;
    for (unsigned i = 0; i < nclients; i++) {
        cl[i].id = i;
        if (pthread_create(&cl[i].th, NULL, run_client, &cl[i]) != 0) {
            fprintf(stderr, "pthread_create failed at client %u\n", i);
            return 1;
        }
    }
    for (unsigned i = 0; i < nclients; i++)
        pthread_join(cl[i].th, NULL);
    double elapsed = now_s() - t0;
    if (server_pid)
        sleep(1);
    long rss_after = server_pid ? rss_kib(server_pid) : -1;

    uint64_t errors = 0, mismatches = 0, total = 0, bytes = 0;
    printf("soak: %u clients x %.0f s, fabric %s, sizes up to %llu B, %u names each\n", nclients,
           seconds, fabric, (unsigned long long)max_size, nnames);
    printf("%-7s %10s %10s %10s %10s\n", "op", "count", "p50_ms", "p99_ms", "max_ms");
    for (int op = 0; op < OP_N; op++) {
        size_t n = 0;
        for (unsigned i = 0; i < nclients; i++)
            n += cl[i].lat[op].n;
        uint32_t *all = malloc((n ? n : 1) * sizeof(uint32_t));
        if (!all)
            return 1;
        size_t at = 0;
        for (unsigned i = 0; i < nclients; i++) {
            memcpy(all + at, cl[i].lat[op].us, cl[i].lat[op].n * sizeof(uint32_t));
            at += cl[i].lat[op].n;
        }
        qsort(all, n, sizeof(uint32_t), cmp_u32);
        total += n;
        if (n)
            printf("%-7s %10zu %10.3f %10.3f %10.3f\n", op_names[op], n, all[n / 2] / 1e3,
                   all[(n * 99) / 100] / 1e3, all[n - 1] / 1e3);
        else
            printf("%-7s %10zu %10s %10s %10s\n", op_names[op], n, "-", "-", "-");
        free(all);
    }
    for (unsigned i = 0; i < nclients; i++) {
        errors += cl[i].errors;
        mismatches += cl[i].mismatches;
        bytes += cl[i].bytes;
        if (cl[i].first_problem[0])
            printf("client %u: %s\n", i, cl[i].first_problem);
        for (int op = 0; op < OP_N; op++)
            free(cl[i].lat[op].us);
    }
    printf("ops/s %.0f, %.1f MB/s of tensor bytes, errors %llu, mismatches %llu\n",
           (double)total / elapsed, (double)bytes / elapsed / 1e6, (unsigned long long)errors,
           (unsigned long long)mismatches);
    if (server_pid)
        printf("server RSS before %ld KiB, after %ld KiB (1 s after the last delete)\n", rss_before,
               rss_after);
    free(cl);
    return errors || mismatches ? 1 : 0;
}
