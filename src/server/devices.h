/*
 * Which devices tensorwired stores tensors on, and whether a put's device
 * tag can be honoured. Both are pure functions over plain inputs (the
 * number of visible GPUs and their free memory are arguments, found once at
 * startup by the caller), so tests feed them fixtures.
 */
#ifndef TW_SERVER_DEVICES_H
#define TW_SERVER_DEVICES_H

#include <stddef.h>
#include <stdint.h>

#include "proto/device.h"
#include "server/config.h"

/* A GPU not named in --capacity may hold this fraction of the memory that
 * was free on it at startup: the rest stays for the CUDA context, staging
 * and other processes on the GPU. */
#define TW_SRV_GPU_CAPACITY_NUM 3u
#define TW_SRV_GPU_CAPACITY_DEN 4u

struct tw_srv_device {
    struct tw_device dev;
    uint64_t capacity; /* bytes; 0 = unlimited */
};

/* The devices served, in --devices order (default: cpu, cuda:0, ...). */
struct tw_srv_devices {
    unsigned n;
    struct tw_srv_device d[TW_SRV_MAX_DEVICES];
};

/*
 * Resolves c->devices and c->capacities against this host: gpu_count
 * visible GPUs, gpu_free[i] bytes free on cuda:i. Fails (TW_EINVAL, reason
 * in err) when --devices names a GPU that is not present, --capacity names
 * a device that is not served, or a served GPU without an explicit
 * capacity has no free memory (gpu_free 0: unknown or full).
 */
int tw__srv_devices_resolve(const struct tw_srv_config *c, int gpu_count, const uint64_t *gpu_free,
                            struct tw_srv_devices *out, char *err, size_t errlen);

/* Why a put's device cannot be honoured. */
enum tw_srv_device_reason {
    TW_SRV_DEVICE_OK = 0,
    TW_SRV_DEVICE_UNKNOWN_KIND, /* a valid tag, but not cpu or cuda:N */
    TW_SRV_DEVICE_ABSENT,       /* cuda:N with N >= the GPUs of this host */
    TW_SRV_DEVICE_NOT_SERVED,   /* present, but not in --devices */
    TW_SRV_DEVICE_NO_ROOM,      /* a GPU without byte_length free */
};

struct tw_srv_device_verdict {
    enum tw_srv_device_reason reason;
    struct tw_device dev; /* the parsed tag (when it parsed) */
    int index;            /* in the table; -1 unless served */
};

/*
 * Decides whether a put of byte_length bytes may go to the device named by
 * tag[0..len) (already syntax-checked by the codec). free_bytes[i] is what
 * device i of the table can still take (UINT64_MAX: unlimited). Room is
 * judged for GPUs only: the CPU's capacity stays the store's
 * CAPACITY_EXCEEDED, as before devices existed.
 */
struct tw_srv_device_verdict tw__srv_device_admit(const struct tw_srv_devices *t, int gpu_count,
                                                  const uint64_t *free_bytes, const char *tag,
                                                  size_t len, uint64_t byte_length);

/* Short name of a reason ("not present", ...). */
const char *tw__srv_device_reason_str(enum tw_srv_device_reason r);

/* "cpu, cuda:0, cuda:1": the served devices, into buf (always terminated). */
void tw__srv_devices_format(const struct tw_srv_devices *t, char *buf, size_t len);

#endif
