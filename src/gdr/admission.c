/* GPUDirect verdict table and the process's facts (see admission.h). */
#include "gdr/admission.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tw__gdr_table_build(struct tw_gdr_table *t, const struct tw_gdr_machine *m,
                         const struct tw_gdr_config *cfg)
{
    memset(t, 0, sizeof(*t));
    t->cfg = *cfg;
    t->ngpus = m->ngpus < TW_GDR_MAX_GPUS ? m->ngpus : TW_GDR_MAX_GPUS;
    t->nprov = m->nprov < TW_GDR_MAX_PROVIDERS ? m->nprov : TW_GDR_MAX_PROVIDERS;
    for (int g = 0; g < t->ngpus; g++)
        t->flush_needed[g] = m->gpus[g].flush_needed;
    for (int p = 0; p < t->nprov; p++) {
        snprintf(t->prov[p], sizeof(t->prov[p]), "%s", m->provs[p].facts.name);
        for (int g = 0; g < t->ngpus; g++) {
            /* The table is indexed by CUDA ordinal; the machine lists GPUs
             * by ordinal too, but say so rather than assume it. */
            int ord = m->gpus[g].ordinal;
            if (ord < 0 || ord >= TW_GDR_MAX_GPUS)
                continue;
            tw__gdr_machine_decide(m, cfg, g, p, &t->v[p][ord], NULL);
            if (t->v[p][ord].admitted)
                t->admitted_any[p] = 1;
        }
    }
}

/* "tcp;ofi_rxm" -> "tcp": the core provider is what was probed. */
static size_t core_len(const char *name)
{
    const char *semi = strchr(name, ';');
    return semi ? (size_t)(semi - name) : strlen(name);
}

int tw__gdr_table_provider(const struct tw_gdr_table *t, const char *name)
{
    if (!t || !name)
        return -1;
    size_t n = core_len(name);
    for (int p = 0; p < t->nprov; p++)
        if (core_len(t->prov[p]) == n && strncmp(t->prov[p], name, n) == 0)
            return p;
    return -1;
}

char *tw__gdr_table_why_not(const struct tw_gdr_table *t, int row, char *buf, size_t len)
{
    if (len == 0)
        return buf;
    if (!t || t->ngpus == 0) {
        snprintf(buf, len, "no GPU here");
        return buf;
    }
    if (row < 0 || row >= t->nprov) {
        snprintf(buf, len, "the provider was not probed for CUDA registration");
        return buf;
    }
    /* The GPU whose first failure comes latest in the predicate order is
     * the closest to admission: report that one. */
    int best = 0;
    for (int g = 1; g < t->ngpus; g++)
        if (t->v[row][g].first_fail > t->v[row][best].first_fail)
            best = g;
    const struct tw_gdr_verdict *v = &t->v[row][best];
    if (v->admitted)
        snprintf(buf, len, "cuda:%d on %s: admitted", best, t->prov[row]);
    else
        snprintf(buf, len, "cuda:%d on %s: %s: %s (%s)", best, t->prov[row],
                 tw__gdr_pred_name(v->first_fail), tw__gdr_reason_str(v->reason),
                 tw__gdr_reason_fix(v->reason));
    return buf;
}

#define ONCE_SLOTS 4

static pthread_mutex_t once_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    char providers[128];
    struct tw_gdr_machine *m;
} once_tab[ONCE_SLOTS];

const struct tw_gdr_machine *tw__gdr_machine_once(const char *providers)
{
    return tw__gdr_machine_once_on(providers, NULL);
}

const struct tw_gdr_machine *tw__gdr_machine_once_on(const char *providers, struct tw_fabric *plane)
{
    const char *key = providers ? providers : "";
    struct tw_gdr_machine *m = NULL;
    pthread_mutex_lock(&once_lock);
    for (int i = 0; i < ONCE_SLOTS; i++) {
        if (once_tab[i].m && strcmp(once_tab[i].providers, key) == 0) {
            m = once_tab[i].m;
            goto out_unlock;
        }
    }
    /* Gathering under the lock: a second caller for the same list waits
     * for the first instead of opening every provider again. */
    m = malloc(sizeof(*m));
    if (!m)
        goto out_unlock;
    tw__gdr_machine_gather_on(m, providers, NULL, plane);
    for (int i = 0; i < ONCE_SLOTS; i++) {
        if (!once_tab[i].m) {
            snprintf(once_tab[i].providers, sizeof(once_tab[i].providers), "%s", key);
            once_tab[i].m = m;
            break;
        }
    }
out_unlock:
    pthread_mutex_unlock(&once_lock);
    return m;
}
