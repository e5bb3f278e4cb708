/*
 * What GPUDirect admission costs per transfer (docs/performance.md,
 * "GPUDirect admission"): the cached verdict lookup a server or client makes
 * for each transfer (one table cell, gdr/admission.h) against deciding from
 * the facts again (tw__gdr_decide, all predicates) and against gathering the
 * facts (once per process; real machine, so it opens the GPUs and
 * providers).
 *
 *   bench_gdr_lookup [--gather PROVIDERS]
 *
 * Facts are a fixture: 8 GPUs, providers shm (registers CUDA), tcp, verbs
 * (refuses), so the lookup and decide figures do not depend on the machine.
 * Figures are medians of 15 batches of 1,000,000 lookups (ns per lookup).
 * The last line is always
 *   gdr lookup_median_ns=X decide_median_ns=Y
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "gdr/admission.h"
#include "bench_util.h"

#define BATCHES 15
#define N 1000000

static void fixture(struct tw_gdr_machine *m)
{
    memset(m, 0, sizeof(*m));
    m->ngpus = 8;
    for (int i = 0; i < 8; i++) {
        struct tw_gdr_gpu_facts *g = &m->gpus[i];
        g->ordinal = i;
        g->gdr_supported = g->dmabuf_supported = g->dmabuf_export = 1;
        g->mig_enabled = 0;
        g->bar1_known = 1;
        g->bar1_total = 128ull << 30;
        g->bar1_free = 120ull << 30;
    }
    const char *names[3] = {"shm", "tcp", "verbs"};
    m->nprov = 3;
    for (int p = 0; p < 3; p++) {
        struct tw_gdr_provider_facts *f = &m->provs[p].facts;
        snprintf(f->name, sizeof(f->name), "%s", names[p]);
        f->kind = tw__gdr_prov_kind_of(names[p]);
        f->hmem_cuda = p == 0;
        f->dmabuf_mr = TW_GDR_UNKNOWN;
        m->provs[p].available = 1;
    }
}

int main(int argc, char **argv)
{
    const char *gather = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--gather") == 0 && i + 1 < argc) {
            gather = argv[++i];
        } else {
            fprintf(stderr, "usage: %s [--gather PROVIDERS]\n", argv[0]);
            return 2;
        }
    }
    struct tw_gdr_machine *m = malloc(sizeof(*m));
    struct tw_gdr_table *t = malloc(sizeof(*t));
    if (!m || !t)
        return 1;
    fixture(m);
    struct tw_gdr_config cfg;
    tw__gdr_config_defaults(&cfg);
    tw__gdr_table_build(t, m, &cfg);

    double lk[BATCHES], dc[BATCHES];
    volatile int sink = 0;
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = tw__now_ns();
        int acc = 0;
        for (int i = 0; i < N; i++)
            acc += tw__gdr_table_admitted(t, i & 1, (i >> 1) & 7);
        uint64_t t1 = tw__now_ns();
        sink += acc;
        lk[b] = (double)(t1 - t0) / N;
        acc = 0;
        struct tw_gdr_verdict v;
        t0 = tw__now_ns();
        for (int i = 0; i < N / 10; i++)
            acc += tw__gdr_machine_decide(m, &cfg, (i >> 1) & 7, i & 1, &v, NULL);
        t1 = tw__now_ns();
        sink += acc;
        dc[b] = (double)(t1 - t0) / (N / 10);
    }
    double l = tw_bench_median(lk, BATCHES), d = tw_bench_median(dc, BATCHES);
    printf("cached verdict lookup (one table cell): %.2f ns median of %d x %d\n", l, BATCHES, N);
    printf("decide from facts (every predicate):    %.1f ns median (%.0fx the lookup)\n", d,
           l > 0 ? d / l : 0.0);
    if (gather) {
        uint64_t t0 = tw__now_ns();
        const struct tw_gdr_machine *real = tw__gdr_machine_once(gather);
        uint64_t t1 = tw__now_ns();
        const struct tw_gdr_machine *again = tw__gdr_machine_once(gather);
        uint64_t t2 = tw__now_ns();
        printf("gather facts once (%s): %.1f ms; second call (cached): %.0f ns; %d GPU(s)\n",
               gather, (double)(t1 - t0) / 1e6, (double)(t2 - t1),
               real && real == again ? real->ngpus : -1);
    }
    printf("gdr lookup_median_ns=%.2f decide_median_ns=%.1f\n", l, d);
    free(t);
    free(m);
    return sink < 0;
}
