/*
 * tw_client_options across header versions (include/tensorwire/client.h):
 * the library reads the first opts->size bytes of the caller's struct and
 * nothing beyond, so a program built against an older, smaller struct still
 * works, and one built against a newer header is accepted when the options
 * this library does not know are left at zero (their default).
 */
#include <stddef.h>
#include <string.h>

#include "client/client_internal.h"
#include "common/errbuf.h"
#include "tensorwire/version.h"

/* Every field after `size`, in declaration order. A field is taken from the
 * caller only when it lies wholly within the caller's size. */
#define TW_CLIENT_OPTION_FIELDS(X)                                                                 \
    X(token)                                                                                       \
    X(token_file)                                                                                  \
    X(connect_timeout_ms)                                                                          \
    X(request_timeout_ms)                                                                          \
    X(max_inflight)                                                                                \
    X(max_frame)                                                                                   \
    X(checksum)                                                                                    \
    X(agent)                                                                                       \
    X(socket_buffer_bytes)                                                                         \
    X(fabric)                                                                                      \
    X(push)                                                                                        \
    X(rdma_min_bytes)                                                                              \
    X(allow_insecure_token_file)                                                                   \
    X(gpudirect)                                                                                   \
    X(gpudirect_max_distance)

static void set_defaults(struct tw_client_options *o)
{
    memset(o, 0, sizeof(*o));
    o->size = sizeof(*o);
    o->connect_timeout_ms = 10000;
    o->request_timeout_ms = 30000;
    o->max_inflight = 0; /* chosen per run: engine.c batch_window */
    o->max_frame = TW_DEFAULT_MAX_FRAME;
    o->rdma_min_bytes = TW_RDMA_MIN_BYTES_AUTO;
}

void tw_client_options_init_size(struct tw_client_options *opts, size_t size)
{
    struct tw_client_options d;
    if (!opts || size < sizeof(opts->size))
        return;
    set_defaults(&d);
    if (size > sizeof(d)) {
        /* A newer header: its extra options default to zero. */
        memset((char *)opts + sizeof(d), 0, size - sizeof(d));
        memcpy(opts, &d, sizeof(d));
    } else {
        memcpy(opts, &d, size);
    }
    opts->size = size;
}

int tw__client_options_resolve(const struct tw_client_options *in, struct tw_client_options *out,
                               char *err, size_t errlen)
{
    set_defaults(out);
    if (!in)
        return 0;
    size_t n = in->size;
    if (n < sizeof(in->size)) {
        tw__errbuf_set(err, errlen,
                       "options.size is %zu: initialise options with tw_client_options_init()", n);
        return TW_EINVAL;
    }
    if (n > sizeof(*out)) {
        const unsigned char *tail = (const unsigned char *)in + sizeof(*out);
        for (size_t i = 0; i < n - sizeof(*out); i++) {
            if (tail[i]) {
                tw__errbuf_set(err, errlen,
                               "options from a newer tensorwire header set an option this "
                               "library (%s) does not know (byte %zu of %zu)",
                               TW_VERSION_STRING, sizeof(*out) + i, n);
                return TW_EINVAL;
            }
        }
    }
    struct tw_client_options d = *out;
    memcpy(out, in, n < sizeof(*out) ? n : sizeof(*out));
#define TW_TAKE_OR_DEFAULT(f)                                                                      \
    if (offsetof(struct tw_client_options, f) + sizeof(out->f) > n)                                \
        out->f = d.f;
    TW_CLIENT_OPTION_FIELDS(TW_TAKE_OR_DEFAULT)
#undef TW_TAKE_OR_DEFAULT
    out->size = sizeof(*out);
    return 0;
}
