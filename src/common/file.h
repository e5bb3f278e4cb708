/*
 * Reading a small file whole (/proc and /sys attributes, boot_id): the one
 * EINTR-safe read loop, so callers only parse.
 */
#ifndef TW_COMMON_FILE_H
#define TW_COMMON_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads at most cap - 1 bytes of the file at path into buf (caller-owned)
 * and NUL-terminates them. Returns the number of bytes read, or -errno from
 * open/read (the file is closed either way); TW_EINVAL when cap is 0. A file
 * longer than cap - 1 bytes is cut there (no error). */
ssize_t tw__read_small_file(const char *path, char *buf, size_t cap);

#endif
