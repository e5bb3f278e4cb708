/*
 * libfabric loader (fi_api.h). One pthread_once per process: the table is
 * filled before anyone reads it and never written again, so readers need no
 * lock. The trampolines keep libfabric's contracts when the library is
 * missing: fi_getinfo()/fi_fabric() fail with -FI_ENOSYS, fi_dupinfo()
 * returns NULL, fi_freeinfo() has nothing to free (no fi_info can exist
 * without the library), fi_strerror() and fi_tostr() still return a string.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "fabric/fi_api.h"
#include "common/verdict.h"

#define TW_FI_LIBRARY "libfabric.so.1"

struct tw_fi_table {
#define TW_FI_FIELD(field, sym, ret, params) ret(*field) params;
    TW_FI_SYMBOLS(TW_FI_FIELD)
#undef TW_FI_FIELD
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static struct tw_fi_table fi;
static atomic_int loaded;
static char load_reason[256] = "libfabric not loaded";

static void load_library(void)
{
    /* RTLD_LOCAL: libfabric's symbols stay out of the global namespace, so
     * nothing else in the process binds to them by accident. */
    void *lib = dlopen(TW_FI_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(load_reason, sizeof(load_reason), "no libfabric: dlopen(%s) failed: %s",
                 TW_FI_LIBRARY, why ? why : "unknown");
        return;
    }
#define TW_FI_RESOLVE(field, sym, ret, params)                                                     \
    *(void **)&fi.field = dlsym(lib, sym);                                                         \
    if (!fi.field) {                                                                               \
        snprintf(load_reason, sizeof(load_reason), "libfabric too old: %s lacks %s",               \
                 TW_FI_LIBRARY, sym);                                                              \
        goto out_close_lib;                                                                        \
    }
    TW_FI_SYMBOLS(TW_FI_RESOLVE)
#undef TW_FI_RESOLVE

    uint32_t v = fi.version();
    if (FI_VERSION_LT(v, FI_VERSION(1, 17))) {
        snprintf(load_reason, sizeof(load_reason), "libfabric %u.%u is older than 1.17",
                 FI_MAJOR(v), FI_MINOR(v));
        goto out_close_lib;
    }
    snprintf(load_reason, sizeof(load_reason), "libfabric %u.%u (%s)", FI_MAJOR(v), FI_MINOR(v),
             TW_FI_LIBRARY);
    atomic_store(&loaded, 1);
    return;

out_close_lib:
    memset(&fi, 0, sizeof(fi));
    dlclose(lib);
}

int tw__fabric_lib_load(char *err, size_t errlen)
{
    pthread_once(&load_once, load_library);
    if (atomic_load(&loaded))
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", load_reason);
    return TW_ENOFABRIC;
}

const char *tw__fabric_lib_describe(char *buf, size_t len)
{
    pthread_once(&load_once, load_library);
    snprintf(buf, len, "%s", load_reason);
    return buf;
}

int tw__fabric_lib_loaded(void)
{
    return atomic_load(&loaded);
}

/* The trampolines. Their names are libfabric's, renamed by fi_api.h. */

uint32_t fi_version(void)
{
    return tw__fabric_lib_load(NULL, 0) ? 0 : fi.version();
}

int fi_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
               const struct fi_info *hints, struct fi_info **info)
{
    if (tw__fabric_lib_load(NULL, 0))
        return -FI_ENOSYS;
    return fi.getinfo(version, node, service, flags, hints, info);
}

void fi_freeinfo(struct fi_info *info)
{
    if (info && !tw__fabric_lib_load(NULL, 0))
        fi.freeinfo(info);
}

struct fi_info *fi_dupinfo(const struct fi_info *info)
{
    return tw__fabric_lib_load(NULL, 0) ? NULL : fi.dupinfo(info);
}

int fi_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric, void *context)
{
    if (tw__fabric_lib_load(NULL, 0))
        return -FI_ENOSYS;
    return fi.fabric(attr, fabric, context);
}

char *fi_tostr(const void *data, enum fi_type datatype)
{
    static char not_loaded[] = "(libfabric not loaded)";
    return tw__fabric_lib_load(NULL, 0) ? not_loaded : fi.tostr(data, datatype);
}

const char *fi_strerror(int errnum)
{
    if (tw__fabric_lib_load(NULL, 0))
        return load_reason;
    return fi.strerror(errnum);
}
