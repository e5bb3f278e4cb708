/*
 * Registrar adapter for libfabric: registers cache regions with
 * fi_mr_regattr() on one domain, host memory as FI_HMEM_SYSTEM and CUDA
 * memory as FI_HMEM_CUDA (device = CUDA ordinal), deregisters with fi_close.
 *
 *   struct tw_fabric_registrar fr;
 *   tw__fabric_registrar_init(&fr, domain, info->domain_attr->mr_mode);
 *   tw__regcache_create(&cfg, &tw__fabric_registrar_ops, &fr, &cache);
 *   ... region handle is a struct fid_mr *: fi_mr_desc(), fi_mr_key() ...
 *
 * The domain is borrowed: it must outlive the cache (destroy the cache
 * before fi_close(domain)). Keys: when the domain lacks FI_MR_PROV_KEY the
 * adapter requests unique keys from a per-adapter counter.
 */
#ifndef TW_MEM_REG_FABRIC_H
#define TW_MEM_REG_FABRIC_H

#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

#include "mem/regcache.h"

struct tw_fabric_registrar {
    struct fid_domain *domain; /* borrowed */
    int mr_mode;               /* info->domain_attr->mr_mode */
    _Atomic uint64_t next_key;
};

void tw__fabric_registrar_init(struct tw_fabric_registrar *fr, struct fid_domain *domain,
                               int mr_mode);

/* libfabric access bits for TW_ACCESS_* (pure). */
uint64_t tw__fabric_access(uint32_t access);

extern const struct tw_registrar_ops tw__fabric_registrar_ops;

#endif
