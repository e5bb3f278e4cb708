/* Memory kind dispatch: which table describes a pointer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu/cuda.h"
#include "mem/memkind.h"
#include "proto/proto.h"
#include "tensorwire/error.h"

const struct tw_memkind_ops *tw__memkind_ops(enum tw_memkind kind)
{
    switch (kind) {
    case TW_MEMKIND_HOST:
        return &tw__memkind_host;
    case TW_MEMKIND_CUDA:
        return &tw__memkind_cuda;
    default:
        return NULL;
    }
}

static const struct tw_memkind_ops *pick(const struct tw_memkind_ops *const table[TW_MEMKIND_MAX],
                                         enum tw_memkind kind)
{
    if (table && table[kind])
        return table[kind];
    return tw__memkind_ops(kind);
}

int tw__memkind_classify(const struct tw_memkind_ops *const table[TW_MEMKIND_MAX], uintptr_t addr,
                         size_t len, enum tw_memkind hint, const struct tw_memkind_ops **ops,
                         struct tw_mem_attr *attr, char *err, size_t errlen)
{
    if (len == 0 || addr + len < addr) {
        if (err && errlen)
            snprintf(err, errlen, "empty or wrapping range %#lx+%zu", (unsigned long)addr, len);
        return TW_EINVAL;
    }
    if (hint != TW_MEMKIND_AUTO) {
        if ((unsigned)hint >= TW_MEMKIND_MAX) {
            if (err && errlen)
                snprintf(err, errlen, "unknown memory kind %d", (int)hint);
            return TW_EINVAL;
        }
        *ops = pick(table, hint);
        int rc = (*ops)->query(addr, len, attr, err, errlen);
        return rc == -ERANGE ? TW_EINVAL : rc;
    }
    /* AUTO: a GPU pointer is whatever the CUDA driver claims; TW_EDEVICE
     * (no driver) and TW_EINVAL (not CUDA memory) both mean "try host". */
    const struct tw_memkind_ops *cuda = pick(table, TW_MEMKIND_CUDA);
    int q = cuda->query(addr, len, attr, NULL, 0); /* no reason formatted for host memory */
    if (q == 0) {
        *ops = cuda;
        return 0;
    }
    if (q == -ERANGE) { /* rare: ask again for the reason */
        if (err && errlen)
            (void)cuda->query(addr, len, attr, err, errlen);
        return TW_EINVAL;
    }
    *ops = pick(table, TW_MEMKIND_HOST);
    return (*ops)->query(addr, len, attr, err, errlen);
}

void tw__memkind_round_out(uintptr_t addr, size_t len, size_t gran, uintptr_t *start,
                           uintptr_t *end)
{
    uintptr_t mask = (uintptr_t)gran - 1;
    *start = addr & ~mask;
    *end = (addr + len + mask) & ~mask;
}

int tw__memkind_crc32c(const struct tw_memkind_ops *k, const struct tw_mem_attr *attr,
                       uintptr_t addr, size_t len, uint32_t *crc, char *err, size_t errlen)
{
    enum { PIECE = 4 << 20 };
    uint32_t v = 0;
    if (!k->copy_to_host) {
        if (err && errlen)
            snprintf(err, errlen, "%s memory cannot be read back", k->name);
        return TW_EDEVICE;
    }
    uint8_t *buf = len ? malloc(len < PIECE ? len : PIECE) : NULL;
    if (len && !buf)
        return -ENOMEM;
    for (size_t off = 0; off < len; off += PIECE) {
        size_t n = len - off < PIECE ? len - off : PIECE;
        int rc = k->copy_to_host(buf, addr + off, n, attr, err, errlen);
        if (rc) {
            free(buf);
            return rc;
        }
        v = tw__crc32c(v, buf, n);
    }
    free(buf);
    *crc = v;
    return 0;
}
