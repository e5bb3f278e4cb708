/* Device table and put admission (devices.h). */
#include "server/devices.h"

#include <stdio.h>
#include <string.h>

#include "tensorwire/error.h"

static int find(const struct tw_srv_devices *t, const struct tw_device *d)
{
    for (unsigned i = 0; i < t->n; i++)
        if (tw__device_equal(&t->d[i].dev, d))
            return (int)i;
    return -1;
}

int tw__srv_devices_resolve(const struct tw_srv_config *c, int gpu_count, const uint64_t *gpu_free,
                            struct tw_srv_devices *out, char *err, size_t errlen)
{
    char tag[TW_DEVICE_TAG_BUFLEN];
    out->n = 0;
    if (c->ndevices == 0) {
        out->d[out->n++].dev = (struct tw_device){.type = TW_DEVICE_CPU, .ordinal = -1};
        for (int i = 0; i < gpu_count && out->n < TW_SRV_MAX_DEVICES; i++)
            out->d[out->n++].dev = (struct tw_device){.type = TW_DEVICE_CUDA, .ordinal = i};
    } else {
        for (unsigned i = 0; i < c->ndevices; i++) {
            const struct tw_device *d = &c->devices[i];
            if (d->type == TW_DEVICE_CUDA && d->ordinal >= gpu_count) {
                tw__device_format(d, tag, sizeof(tag));
                if (err && errlen)
                    snprintf(err, errlen, "--devices: %s is not present (this host has %d GPU%s)",
                             tag, gpu_count, gpu_count == 1 ? "" : "s");
                return TW_EINVAL;
            }
            out->d[out->n++].dev = *d;
        }
    }
    for (unsigned i = 0; i < c->ncapacities; i++) {
        if (find(out, &c->capacities[i].dev) < 0) {
            tw__device_format(&c->capacities[i].dev, tag, sizeof(tag));
            if (err && errlen)
                snprintf(err, errlen, "--capacity: %s is not a device this server uses", tag);
            return TW_EINVAL;
        }
    }
    for (unsigned i = 0; i < out->n; i++) {
        struct tw_srv_device *d = &out->d[i];
        int explicit = 0;
        for (unsigned k = 0; k < c->ncapacities; k++)
            if (tw__device_equal(&c->capacities[k].dev, &d->dev)) {
                d->capacity = c->capacities[k].bytes;
                explicit = 1;
            }
        if (d->dev.type == TW_DEVICE_CPU) {
            d->capacity = c->capacity;
        } else if (!explicit) {
            d->capacity =
                gpu_free[d->dev.ordinal] / TW_SRV_GPU_CAPACITY_DEN * TW_SRV_GPU_CAPACITY_NUM;
            /* 0 would read as "unlimited": a GPU with nothing free (or whose
             * free memory could not be read) needs an explicit capacity. */
            if (d->capacity == 0) {
                tw__device_format(&d->dev, tag, sizeof(tag));
                if (err && errlen)
                    snprintf(err, errlen,
                             "%s: no free memory known; give --capacity %s=SIZE or leave it out "
                             "of --devices",
                             tag, tag);
                return TW_EINVAL;
            }
        }
    }
    return 0;
}

struct tw_srv_device_verdict tw__srv_device_admit(const struct tw_srv_devices *t, int gpu_count,
                                                  const uint64_t *free_bytes, const char *tag,
                                                  size_t len, uint64_t byte_length)
{
    struct tw_srv_device_verdict v = {.reason = TW_SRV_DEVICE_OK, .index = -1};
    if (tw__device_parse(tag, len, &v.dev) != 0) {
        v.reason = TW_SRV_DEVICE_UNKNOWN_KIND;
        return v;
    }
    if (v.dev.type == TW_DEVICE_CUDA && v.dev.ordinal >= gpu_count) {
        v.reason = TW_SRV_DEVICE_ABSENT;
        return v;
    }
    v.index = find(t, &v.dev);
    if (v.index < 0) {
        v.reason = TW_SRV_DEVICE_NOT_SERVED;
        return v;
    }
    if (v.dev.type == TW_DEVICE_CUDA && byte_length > free_bytes[v.index])
        v.reason = TW_SRV_DEVICE_NO_ROOM;
    return v;
}

const char *tw__srv_device_reason_str(enum tw_srv_device_reason r)
{
    switch (r) {
    case TW_SRV_DEVICE_OK:
        return "available";
    case TW_SRV_DEVICE_UNKNOWN_KIND:
        return "not a device kind this server knows";
    case TW_SRV_DEVICE_ABSENT:
        return "not present";
    case TW_SRV_DEVICE_NOT_SERVED:
        return "not served (not in --devices)";
    case TW_SRV_DEVICE_NO_ROOM:
        return "not enough free capacity";
    }
    return "unknown";
}

void tw__srv_devices_format(const struct tw_srv_devices *t, char *buf, size_t len)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (unsigned i = 0; i < t->n && used < len; i++) {
        char tag[TW_DEVICE_TAG_BUFLEN];
        if (tw__device_format(&t->d[i].dev, tag, sizeof(tag)) < 0)
            continue;
        int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", tag);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (t->n == 0)
        snprintf(buf, len, "none");
}
