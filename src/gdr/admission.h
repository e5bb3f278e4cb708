/*
 * GPUDirect admission for the data path: verdicts computed once, looked up
 * in O(1) per transfer.
 *
 * Facts are gathered once per process and provider list
 * (tw__gdr_machine_once: it opens the provider and the GPUs, hundreds of
 * milliseconds); a table (struct tw_gdr_table) then holds the verdict of
 * every (provider, CUDA ordinal) pair under one configuration, built by a
 * pure function (tw__gdr_table_build), so a server or a client resolves its
 * plane's provider to a row once and each transfer reads one array cell.
 *
 * Ownership: a table is a plain value the caller owns (it embeds the
 * verdicts; no pointers into the machine). The machine returned by
 * tw__gdr_machine_once is owned by the process and never freed.
 *
 * Thread safety: build and lookups are pure; tw__gdr_machine_once may be
 * called from any thread (one mutex, held while gathering).
 */
#ifndef TW_GDR_ADMISSION_H
#define TW_GDR_ADMISSION_H

#include "gdr/facts.h"
#include "gdr/policy.h"

struct tw_gdr_table {
    struct tw_gdr_config cfg;
    int ngpus; /* CUDA ordinals 0..ngpus-1 have a verdict */
    int nprov;
    char prov[TW_GDR_MAX_PROVIDERS][32];
    struct tw_gdr_verdict v[TW_GDR_MAX_PROVIDERS][TW_GDR_MAX_GPUS];
    int flush_needed[TW_GDR_MAX_GPUS];      /* NIC writes need cuFlushGPUDirectRDMAWrites */
    int admitted_any[TW_GDR_MAX_PROVIDERS]; /* some GPU admitted on that provider */
};

/* Fills *t with the verdict of every (provider, GPU) of m under cfg. Pure. */
void tw__gdr_table_build(struct tw_gdr_table *t, const struct tw_gdr_machine *m,
                         const struct tw_gdr_config *cfg);

/* Row of provider `name` ("shm", "tcp;ofi_rxm" matches "tcp"), or -1. */
int tw__gdr_table_provider(const struct tw_gdr_table *t, const char *name);

/* The verdict of (row, ordinal), or NULL when either is out of range
 * (no facts: not admitted). O(1). */
static inline const struct tw_gdr_verdict *tw__gdr_table_get(const struct tw_gdr_table *t, int row,
                                                             int ordinal)
{
    if (!t || row < 0 || row >= t->nprov || ordinal < 0 || ordinal >= t->ngpus)
        return NULL;
    return &t->v[row][ordinal];
}

/* 1 when (row, ordinal) is admitted. O(1). */
static inline int tw__gdr_table_admitted(const struct tw_gdr_table *t, int row, int ordinal)
{
    const struct tw_gdr_verdict *v = tw__gdr_table_get(t, row, ordinal);
    return v && v->admitted;
}

/*
 * The first failing predicate of the best GPU on `row` as one sentence for
 * --gpudirect require ("cuda:0 on shm: provider_hmem: the provider refused
 * to register CUDA memory"), or "no GPU here". Writes into buf, returns buf.
 */
char *tw__gdr_table_why_not(const struct tw_gdr_table *t, int row, char *buf, size_t len);

/*
 * This process's facts for `providers` (comma-separated, as
 * tw__gdr_machine_gather): gathered on the first call for that list and
 * kept (up to 4 lists; more fall back to gathering into a leaked copy).
 * Returns NULL only when out of memory.
 */
const struct tw_gdr_machine *tw__gdr_machine_once(const char *providers);
/* The same, probing CUDA registration on `plane`'s rails when the facts for
 * that list are gathered now (tw__gdr_machine_gather_on); a list already
 * gathered is returned as it is, however it was probed. */
const struct tw_gdr_machine *tw__gdr_machine_once_on(const char *providers,
                                                     struct tw_fabric *plane);

#endif
