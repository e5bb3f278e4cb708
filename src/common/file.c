#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "tensorwire/error.h"

ssize_t tw__read_small_file(const char *path, char *buf, size_t cap)
{
    if (cap == 0)
        return TW_EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int err = -errno;
            close(fd);
            return err;
        }
        if (r == 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = '\0';
    return (ssize_t)len;
}
