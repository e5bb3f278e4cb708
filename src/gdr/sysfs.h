/*
 * The one reader of sysfs for GPUDirect admission.
 *
 * Every path the admission policy looks at ("/sys/bus/pci/devices/...",
 * "/sys/kernel/iommu_groups/...") is read through a struct tw_sysfs whose
 * root can be overridden, so the policy runs in tests against fixture trees
 * under tests/fixtures/gdr/ that mirror real machines (libibverbs sysfs.c
 * does the same). Symbolic links are resolved by string, inside the root: an
 * absolute link target is taken relative to the root, never to the real
 * filesystem, so a fixture tree cannot escape into the test machine's /sys.
 *
 * Ownership: struct tw_sysfs is a plain value (a root path); nothing here
 * allocates. Output buffers belong to the caller.
 */
#ifndef TW_GDR_SYSFS_H
#define TW_GDR_SYSFS_H

#include <stddef.h>
#include <stdint.h>

#define TW_SYSFS_PATH_MAX 512

struct tw_sysfs {
    /* Prefix of every absolute path read, without a trailing slash; "" is the
     * real root. */
    char root[256];
};

/* root NULL or "": the real filesystem. Returns TW_EINVAL when root is too long. */
int tw__sysfs_init(struct tw_sysfs *fs, const char *root);

/*
 * Reads the file at absolute path `path` (under the root) into buf, at most
 * cap-1 bytes, NUL-terminated, trailing white space removed. Returns the
 * length, or -errno from open/read (-ENOENT when absent).
 */
int tw__sysfs_read(const struct tw_sysfs *fs, const char *path, char *buf, size_t cap);

/* Reads a decimal (or 0x-prefixed hexadecimal) unsigned integer. Returns 0,
 * -errno, or TW_EINVAL when the content is not such a number. */
int tw__sysfs_read_u64(const struct tw_sysfs *fs, const char *path, uint64_t *out);

/* Reads a signed decimal integer (numa_node is -1 when unknown). */
int tw__sysfs_read_int(const struct tw_sysfs *fs, const char *path, int *out);

/*
 * Resolves every symbolic link in `path` (absolute, under the root) and
 * writes the canonical absolute path (without the root prefix) to out.
 * Returns 0, -errno from lstat/readlink (-ENOENT when a component is
 * missing), -ELOOP after 32 links, or TW_EINVAL when the result does not fit.
 */
int tw__sysfs_resolve(const struct tw_sysfs *fs, const char *path, char *out, size_t cap);

/* Pure helper: the canonical form of absolute path `in` ("." and ".."
 * folded, repeated slashes removed). Returns 0 or TW_EINVAL. */
int tw__sysfs_normalize(const char *in, char *out, size_t cap);

#endif
