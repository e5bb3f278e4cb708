/*
 * libfabric through dlopen("libfabric.so.1"): include this header, never
 * <rdma/...> directly.
 *
 * Why: linking libfabric runs every provider's constructor at process start
 * (psm's libinfinipath alone sleeps about 120 ms), so every program that
 * linked libtensorwire paid it, `--help` and `--fabric none` included. Now
 * libfabric is loaded the first time a fabric is asked for, and a machine
 * without it simply has "no fabric here".
 *
 * Only a handful of libfabric's functions are exported symbols; everything
 * else in its headers (endpoints, memory registration, RMA, completion
 * queues) is static inline through the ops tables of objects that those
 * functions return. Each exported function is renamed below to a
 * tensorwire trampoline *before* the libfabric headers declare it, so the
 * headers' own inline helpers (fi_allocinfo() calls fi_dupinfo()) go
 * through the trampolines too, and the call sites keep libfabric's names.
 * A file that includes <rdma/fabric.h> without this header would reference
 * the real symbol, which nothing links: the build fails at link time, so
 * the rule cannot be broken silently.
 *
 * The headers still come from libfabric-dev at build time (struct layouts
 * of FI_VERSION(1, 17)); the library found at run time must be ABI version
 * 1 (libfabric.so.1) and report fi_version() >= 1.17.
 */
#ifndef TW_FABRIC_FI_API_H
#define TW_FABRIC_FI_API_H

#include <stddef.h>

#define fi_getinfo tw__fi_getinfo
#define fi_freeinfo tw__fi_freeinfo
#define fi_dupinfo tw__fi_dupinfo
#define fi_fabric tw__fi_fabric
#define fi_strerror tw__fi_strerror
#define fi_version tw__fi_version
#define fi_tostr tw__fi_tostr

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

/*
 * X(field, "exported symbol", return type, (parameters)): every libfabric
 * symbol tensorwire resolves. The loader resolves all of them or none.
 */
#define TW_FI_SYMBOLS(X)                                                                           \
    X(version, "fi_version", uint32_t, (void))                                                     \
    X(getinfo, "fi_getinfo", int,                                                                  \
      (uint32_t version, const char *node, const char *service, uint64_t flags,                    \
       const struct fi_info *hints, struct fi_info **info))                                        \
    X(freeinfo, "fi_freeinfo", void, (struct fi_info * info))                                      \
    X(dupinfo, "fi_dupinfo", struct fi_info *, (const struct fi_info *info))                       \
    X(fabric, "fi_fabric", int,                                                                    \
      (struct fi_fabric_attr * attr, struct fid_fabric * *fabric, void *context))                  \
    X(strerror, "fi_strerror", const char *, (int errnum))                                         \
    X(tostr, "fi_tostr", char *, (const void *data, enum fi_type datatype))

/*
 * Loads libfabric once per process (pthread_once; never unloaded). Returns
 * 0, or TW_ENOFABRIC with why (library missing, symbol missing, too old)
 * written into err. Safe from any thread. Every trampoline calls it, so
 * calling it first is needed only to get the reason.
 */
int tw__fabric_lib_load(char *err, size_t errlen);

/*
 * One line for humans and --version: "libfabric 1.17.0 (libfabric.so.1)"
 * once loaded, else the reason it is not. Loads the library when asked.
 * Writes at most len bytes (NUL-terminated) into buf and returns buf.
 */
const char *tw__fabric_lib_describe(char *buf, size_t len);

/* 1 when libfabric has been loaded in this process (never loads it). */
int tw__fabric_lib_loaded(void);

#endif
