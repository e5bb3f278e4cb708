/*
 * Device tags: the one parser and formatter for "cpu" and "cuda:N".
 *
 * The wire rule (docs/protocol.md §3.2) is that a tag starting with "cuda"
 * is exactly "cuda:N", N decimal 0..255 without leading zeros, so a device
 * has one spelling; other tags of [a-z0-9_:.-]{1,32} are syntactically valid
 * but name no device tensorwire knows. Server (--devices, a put's tag), CLI
 * (--device) and client all go through tw__device_parse().
 *
 * Pure functions: no I/O, no allocation, any thread.
 */
#ifndef TW_PROTO_DEVICE_H
#define TW_PROTO_DEVICE_H

#include <stddef.h>

enum tw_device_type {
    TW_DEVICE_CPU = 0,
    TW_DEVICE_CUDA = 1,
};

#define TW_DEVICE_MAX_CUDA_ORDINAL 255
/* Longest formatted tag ("cuda:255") plus its NUL. */
#define TW_DEVICE_TAG_BUFLEN 9

/* A device: type plus CUDA ordinal (-1 for the CPU). Plain data. */
struct tw_device {
    enum tw_device_type type;
    int ordinal;
};

/*
 * Parses s[0..len) (not NUL-terminated). Returns 0 with *out set for "cpu"
 * and "cuda:N"; TW_EBAD_DEVICE_TAG when the text breaks the wire rule
 * ("cuda:01", "cuda:256", "CPU", "", too long); TW_EDEVICE when it is a
 * syntactically valid tag of a device type tensorwire does not know
 * ("rocm:0"). *out is untouched on error.
 */
int tw__device_parse(const char *s, size_t len, struct tw_device *out);

/* Same for a NUL-terminated string. */
int tw__device_parse_str(const char *s, struct tw_device *out);

/*
 * Writes the canonical tag ("cpu", "cuda:3") and its NUL into buf. Returns
 * the length without the NUL, or TW_EINVAL for a device that has no tag
 * (bad type, ordinal out of range) or a buffer too small (nothing useful is
 * written then; TW_DEVICE_TAG_BUFLEN always suffices).
 */
int tw__device_format(const struct tw_device *d, char *buf, size_t len);

/* 1 when a and b name the same device. */
int tw__device_equal(const struct tw_device *a, const struct tw_device *b);

#endif
