/*
 * End-to-end put/get through a running tensorwired with the inline plane
 * (baseline) and the RDMA plane, pull and push, measured in one run through
 * the public client API (connection and plane setup excluded).
 *
 *   bench_rdma_e2e HOST:PORT SIZE_BYTES REPS PLANE...
 *   PLANE: none | PROVIDER (tcp, shm, ...) | PROVIDER:push
 *
 * Prints the median time of REPS put and get round trips per plane and the
 * ratio to the first plane given (use "none" first for the inline baseline).
 * The server's --push decides who moves a put; the client's push policy
 * decides a get.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensorwire/client.h"
#include "bench_util.h"

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s HOST:PORT SIZE_BYTES REPS PLANE...\n", argv[0]);
        return 2;
    }
    const char *addr = argv[1];
    size_t n = (size_t)strtoull(argv[2], NULL, 10);
    int reps = atoi(argv[3]);
    if (reps < 1 || reps > 1000)
        return 2;
    uint8_t *buf = malloc(n ? n : 1);
    double *tp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!buf || !tp || !tg)
        return 1;
    memset(buf, 0x3c, n);
    double base_put = 0, base_get = 0;
    for (int a = 4; a < argc; a++) {
        char prov[64];
        snprintf(prov, sizeof(prov), "%s", argv[a]);
        char *colon = strchr(prov, ':');
        int push = colon && strcmp(colon + 1, "push") == 0;
        if (colon)
            *colon = '\0';
        struct tw_client_options o;
        tw_client_options_init(&o);
        o.fabric = prov;
        o.push = push ? TW_PUSH_ALWAYS : TW_PUSH_AUTO;
        tw_client *c = tw_bench_connect(addr, &o);
        struct tw_tensor_desc d;
        tw_bench_u8_desc(&d, n);
        char put_plane[128] = "";
        for (int i = 0; i < reps; i++) {
            double t0 = tw_bench_now_s();
            if (tw_put(c, "bench/rdma_e2e", &d, buf, n) != 0) {
                fprintf(stderr, "put: %s\n", tw_client_last_error_message(c));
                return 1;
            }
            tp[i] = tw_bench_now_s() - t0;
            snprintf(put_plane, sizeof(put_plane), "%s", tw_client_data_plane(c));
            t0 = tw_bench_now_s();
            if (tw_get(c, "bench/rdma_e2e", buf, n, NULL) != 0) {
                fprintf(stderr, "get: %s\n", tw_client_last_error_message(c));
                return 1;
            }
            tg[i] = tw_bench_now_s() - t0;
        }
        qsort(tp, (size_t)reps, sizeof(double), tw_bench_cmp_double);
        qsort(tg, (size_t)reps, sizeof(double), tw_bench_cmp_double);
        double mp = tp[reps / 2], mg = tg[reps / 2];
        if (a == 4) {
            base_put = mp;
            base_get = mg;
        }
        printf("%-10s put %8.2f ms %6.2f GB/s x%.2f [%s] | get %8.2f ms %6.2f GB/s x%.2f [%s]\n",
               argv[a], mp * 1e3, (double)n / mp / 1e9, base_put / mp, put_plane, mg * 1e3,
               (double)n / mg / 1e9, base_get / mg, tw_client_data_plane(c));
        tw_delete(c, "bench/rdma_e2e");
        tw_close(c);
    }
    free(buf);
    free(tp);
    free(tg);
    return 0;
}
