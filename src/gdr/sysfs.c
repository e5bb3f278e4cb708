/* sysfs reads under an overridable root (see sysfs.h for why). */
#include "gdr/sysfs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "tensorwire/error.h"

int tw__sysfs_init(struct tw_sysfs *fs, const char *root)
{
    if (!root)
        root = "";
    size_t n = strlen(root);
    while (n > 0 && root[n - 1] == '/')
        n--;
    if (n >= sizeof(fs->root))
        return TW_EINVAL;
    memcpy(fs->root, root, n);
    fs->root[n] = '\0';
    return 0;
}

/* root + path into full; TW_EINVAL when it does not fit. */
static int full_path(const struct tw_sysfs *fs, const char *path, char *full, size_t cap)
{
    int n = snprintf(full, cap, "%s%s", fs->root, path);
    return (n < 0 || (size_t)n >= cap) ? TW_EINVAL : 0;
}

int tw__sysfs_read(const struct tw_sysfs *fs, const char *path, char *buf, size_t cap)
{
    char full[TW_SYSFS_PATH_MAX];
    if (cap == 0 || full_path(fs, path, full, sizeof(full)) < 0)
        return TW_EINVAL;
    ssize_t n = tw__read_small_file(full, buf, cap);
    if (n < 0)
        return (int)n;
    size_t len = (size_t)n;
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\t'))
        len--;
    buf[len] = '\0';
    return (int)len;
}

int tw__sysfs_read_u64(const struct tw_sysfs *fs, const char *path, uint64_t *out)
{
    char buf[64];
    int n = tw__sysfs_read(fs, path, buf, sizeof(buf));
    if (n < 0)
        return n;
    if (n == 0 || buf[0] == '-' || buf[0] == '+')
        return TW_EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 0);
    if (errno || *end != '\0')
        return TW_EINVAL;
    *out = v;
    return 0;
}

int tw__sysfs_read_int(const struct tw_sysfs *fs, const char *path, int *out)
{
    char buf[64];
    int n = tw__sysfs_read(fs, path, buf, sizeof(buf));
    if (n < 0)
        return n;
    char *end;
    errno = 0;
    long v = strtol(buf, &end, 10);
    if (n == 0 || errno || *end != '\0' || v < INT_MIN || v > INT_MAX)
        return TW_EINVAL;
    *out = (int)v;
    return 0;
}

int tw__sysfs_normalize(const char *in, char *out, size_t cap)
{
    if (in[0] != '/' || cap < 2)
        return TW_EINVAL;
    size_t o = 0;
    const char *p = in;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 1 && p[0] == '.') {
            /* nothing */
        } else if (n == 2 && p[0] == '.' && p[1] == '.') {
            while (o > 0 && out[o - 1] != '/')
                o--;
            if (o > 0)
                o--; /* the slash before the dropped component */
        } else {
            if (o + 1 + n + 1 > cap)
                return TW_EINVAL;
            out[o++] = '/';
            memcpy(out + o, p, n);
            o += n;
        }
        p += n;
    }
    if (o == 0)
        out[o++] = '/';
    out[o] = '\0';
    return 0;
}

int tw__sysfs_resolve(const struct tw_sysfs *fs, const char *path, char *out, size_t cap)
{
    /* todo: the path still to walk; done: the resolved prefix. */
    char todo[TW_SYSFS_PATH_MAX], done[TW_SYSFS_PATH_MAX], full[TW_SYSFS_PATH_MAX];
    char link[TW_SYSFS_PATH_MAX], next[2 * TW_SYSFS_PATH_MAX];
    if (tw__sysfs_normalize(path, todo, sizeof(todo)) < 0)
        return TW_EINVAL;
    done[0] = '\0';
    size_t pos = 0;
    int links = 0;
    for (;;) {
        while (todo[pos] == '/')
            pos++;
        if (!todo[pos])
            break;
        const char *comp = todo + pos;
        const char *e = strchr(comp, '/');
        size_t n = e ? (size_t)(e - comp) : strlen(comp);
        size_t dl = strlen(done);
        if (dl + 1 + n + 1 > sizeof(done))
            return TW_EINVAL;
        done[dl] = '/';
        memcpy(done + dl + 1, comp, n);
        done[dl + 1 + n] = '\0';
        pos += n;
        if (full_path(fs, done, full, sizeof(full)) < 0)
            return TW_EINVAL;
        struct stat st;
        if (lstat(full, &st) < 0)
            return -errno;
        if (!S_ISLNK(st.st_mode))
            continue;
        if (++links > 32)
            return -ELOOP;
        ssize_t ln = readlink(full, link, sizeof(link) - 1);
        if (ln < 0)
            return -errno;
        link[ln] = '\0';
        done[dl] = '\0'; /* the link's directory */
        int m;
        if (link[0] == '/')
            m = snprintf(next, sizeof(next), "%s%s", link, todo + pos);
        else
            m = snprintf(next, sizeof(next), "%s/%s%s", done, link, todo + pos);
        if (m < 0 || (size_t)m >= sizeof(next))
            return TW_EINVAL;
        if (tw__sysfs_normalize(next, todo, sizeof(todo)) < 0)
            return TW_EINVAL;
        done[0] = '\0';
        pos = 0;
    }
    const char *res = done[0] ? done : "/";
    if (strlen(res) + 1 > cap)
        return TW_EINVAL;
    memcpy(out, res, strlen(res) + 1);
    return 0;
}
