/*
 * The raw libfabric baseline shared by `tensorwire bench` (tools/bench.c)
 * and bench/bench_fabric.c: fi_read or fi_write of a given size on one RDM
 * endpoint of a given provider, no protocol, no chunking, inflight
 * operations kept posted, busy-polling the completion queue. The most direct
 * use of the provider, against which the data plane is measured.
 *
 * The target is either a second endpoint opened here in the same process
 * (target_buf given to tw_raw_fabric_open; during each loop a thread then
 * drives that endpoint's progress, as a remote peer's progress engine would:
 * the tcp provider needs target-side progress), or an external one (tw_raw_fabric_set_target, e.g.
 * a tensorwire plane with its own mover thread).
 */
#ifndef TW_TOOLS_RAW_FABRIC_H
#define TW_TOOLS_RAW_FABRIC_H

#include <stddef.h>
#include <stdint.h>

struct tw_raw_fabric;

/* Remote memory and address of an external target. addr is copied. */
struct tw_raw_fabric_target {
    const void *addr; /* provider address (fi_getname format) */
    size_t addr_len;
    uint64_t remote_addr; /* what fi_read/fi_write take for offset 0 */
    uint64_t key;
};

/*
 * Opens an RDM endpoint of provider prov ("tcp", "shm", "tcp;ofi_rxm", ...)
 * on 127.0.0.1 and registers [buf, buf+len) for local reads and writes; buf
 * must stay valid until tw_raw_fabric_close. When target_buf is not NULL,
 * [target_buf, target_buf+len) is exposed by a second endpoint of this
 * process and becomes the target. Returns 0 and *out (release with
 * tw_raw_fabric_close), or a negative errno-style code with a reason in err.
 */
int tw_raw_fabric_open(const char *prov, void *buf, size_t len, void *target_buf,
                       struct tw_raw_fabric **out, char *err, size_t cap);
/* The same where buf and/or target_buf are CUDA device memory of the
 * ordinals buf_cuda / target_cuda (-1: host memory): FI_HMEM endpoints,
 * fi_mr_regattr with FI_HMEM_CUDA. */
int tw_raw_fabric_open_cuda(const char *prov, void *buf, int buf_cuda, size_t len, void *target_buf,
                            int target_cuda, struct tw_raw_fabric **out, char *err, size_t cap);
/* Points the loop at an external target instead. 0 or negative. */
int tw_raw_fabric_set_target(struct tw_raw_fabric *r, const struct tw_raw_fabric_target *t);
/* The provider libfabric actually opened ("tcp;ofi_rxm"). Valid as long as r. */
const char *tw_raw_fabric_provider(const struct tw_raw_fabric *r);

/*
 * count operations (fi_write when write, else fi_read) of size bytes each,
 * inflight of them posted at once. Operation i uses offset (i % slots) * size
 * of both buffers, slots = len / size: give len = size * inflight for
 * distinct memory per operation in flight (as a client with one buffer per
 * request has), len = size to reuse one. Fills lat_ns[count] (post to completion, ns; may be
 * NULL) and *elapsed_ns. Returns 0, -EMSGSIZE when size exceeds len or the
 * provider's largest message, or a negative code with the reason in
 * tw_raw_fabric_errmsg.
 */
int tw_raw_fabric_loop(struct tw_raw_fabric *r, int write, uint64_t size, uint64_t count,
                       uint32_t inflight, uint64_t *lat_ns, uint64_t *elapsed_ns);
/* Reason for the last failure; valid as long as r. */
const char *tw_raw_fabric_errmsg(const struct tw_raw_fabric *r);
/* NULL is accepted. */
void tw_raw_fabric_close(struct tw_raw_fabric *r);

#endif
