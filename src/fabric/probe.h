/*
 * What libfabric offers on this machine, for `tensorwire doctor` and
 * GPUDirect admission (src/gdr/): its version, its providers with their
 * capabilities, and whether a provider registers CUDA memory, proven by a
 * real registration (the only test that tells a libfabric built without
 * CUDA from one built with it: both list FI_HMEM for some providers).
 *
 * Ownership: the caller owns every output buffer. Nothing is kept open.
 */
#ifndef TW_FABRIC_PROBE_H
#define TW_FABRIC_PROBE_H

#include <stddef.h>
#include <stdint.h>

struct tw_fabric_prov_desc {
    char provider[64]; /* "tcp;ofi_rxm" */
    char fabric[64];   /* fabric name */
    char domain[64];   /* domain (NIC or interface) name */
    int rma;           /* FI_RMA with an RDM endpoint */
    int hmem;          /* FI_HMEM in caps */
    char mr_mode[160]; /* "FI_MR_LOCAL | FI_MR_VIRT_ADDR | ..." */
};

/* libfabric's runtime version as "1.17.0", or "" when libfabric cannot be
 * used here. Writes into buf and returns it. */
const char *tw__fabric_version_string(char *buf, size_t len);

/*
 * Lists every (provider, domain) libfabric reports, without duplicates, in
 * libfabric's order. Returns how many exist (may exceed cap: only cap are
 * written), or a negative code with the reason in err.
 */
int tw__fabric_list_providers(struct tw_fabric_prov_desc *out, size_t cap, char *err,
                              size_t errlen);

/*
 * Opens `provider` with FI_HMEM and registers [dev_ptr, dev_ptr+len) of CUDA
 * device `device` for remote read and write, then releases everything.
 * Returns 1 when the registration worked, 0 when the provider opened but
 * refused FI_HMEM or the registration (why in detail), or a negative code
 * when the provider cannot be opened here at all (why in detail). With len
 * 0 nothing is registered: 0 says the provider opens here.
 */
int tw__fabric_probe_cuda_mr(const char *provider, int device, uintptr_t dev_ptr, size_t len,
                             char *detail, size_t detail_len);

/*
 * Opens `provider` with FI_HMEM and registers the CUDA range [dev_ptr,
 * dev_ptr+len) of `device` through the dma-buf fd (offset inside it) with
 * FI_MR_DMABUF. Returns 1 when the provider accepted it, 0 when it opened
 * but refused (why in detail, e.g. "this build's libfabric headers have no
 * FI_MR_DMABUF" or the provider's error), negative when it cannot open.
 * The fd stays the caller's.
 */
int tw__fabric_probe_dmabuf_mr(const char *provider, int device, uintptr_t dev_ptr, size_t len,
                               int fd, uint64_t offset, char *detail, size_t detail_len);

struct tw_fabric;

/*
 * The same probes on a plane that is already open (tw__fabric_open with
 * hmem): registers [dev_ptr, dev_ptr+len) of CUDA device `device` on that
 * plane's first rail of `provider` (core name: "tcp" matches
 * "tcp;ofi_rxm"), by pointer, or through the dma-buf dmabuf_fd (at offset)
 * when it is >= 0, and releases it at once. Nothing is opened: this is the
 * registration the data path will make, on the domain it will use.
 * Returns 1 (registered), 0 (refused, or len 0: the rail exists; why in
 * detail) or -ENOENT when the plane has no rail of that provider.
 */
int tw__fabric_plane_probe_mr(struct tw_fabric *fab, const char *provider, int device,
                              uintptr_t dev_ptr, size_t len, int dmabuf_fd, uint64_t offset,
                              char *detail, size_t detail_len);

#endif
